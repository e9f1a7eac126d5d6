//! The long-poll fetch: wait (holding no records) until enough bytes have
//! arrived, then read each partition once.

use std::sync::Arc;
use std::time::Instant;

use flume_protocol::record;
use flume_protocol::ErrorCode;
use flume_rt as rt;
use futures::FutureExt;

use super::Records;
use crate::budget::{Charge, MemoryBudget};
use crate::config::MAX_FETCH_WAIT_MS;
use crate::domain::{FetchSpec, Fetched, PartitionRecords, ReadAs};
use crate::error::BrokerError;
use crate::partition::Partition;

/// Most bytes a waiting FETCH reads at once to count what has arrived; the
/// chunk is dropped as soon as it is counted.
pub const COUNT_CHUNK_BYTES: usize = 1 << 20;

/// The fewest bytes a stored record takes (header and empty payload).
const MIN_STORED_RECORD: usize = record::RECORD_HEADER_LEN + record::MIN_PAYLOAD_LEN;

/// A fetch given up while it waited ([`Records::fetch_unless`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GaveUp;

/// The budgets a FETCH served over the network is charged to.
#[derive(Debug, Clone, Copy)]
pub struct FetchMemory<'a> {
    /// The connection's share of the broker's budget: the response's records.
    pub response: &'a Arc<MemoryBudget>,
    /// A small broker-wide budget for the chunks waiting fetches read to count
    /// the bytes that arrived (see [`Records::fetch`]).
    pub counting: &'a Arc<MemoryBudget>,
}

impl Records {
    /// Serves a fetch: per requested partition, its records from the offset
    /// asked for and its offsets.
    ///
    /// While it waits, a fetch holds no records: it counts the bytes that
    /// arrive past each partition's offset (only what lies between the bytes
    /// already counted and the end offset, read in chunks of at most
    /// [`COUNT_CHUNK_BYTES`] that are dropped at once) until `min_bytes` are
    /// there, `max_wait_ms` (capped at [`crate::config::MAX_FETCH_WAIT_MS`]) passes, or the
    /// broker shuts down. `min_bytes` is at least 1 and at most what the
    /// request can ever receive (its `max_bytes` and the partitions' own,
    /// within one frame), so an unreachable `min_bytes` waits no longer than
    /// a reachable one. Only then are the records read, each partition's once.
    ///
    /// With [`FetchMemory`], counting chunks wait for room in its small
    /// `counting` budget (so waiting fetches never read more than that at once,
    /// and never hold the budget that lets connections read), and the final
    /// read charges each partition's read to `response` while the response is
    /// built: within the shared budget while it has room, otherwise within
    /// what is left of the connection's reserve (the first record always goes
    /// out whole). A connection that has used its reserve while the shared
    /// budget is spent waits for room, holding no records, past the deadline
    /// if need be; no other connection waits for it ([`crate::budget`]).
    ///
    /// The records are charged to `response` until the front end has encoded
    /// them and drops [`Fetched::charge`].
    pub async fn fetch(&self, req: &FetchSpec, memory: Option<FetchMemory<'_>>) -> Fetched {
        let mut never = futures::future::pending::<()>();
        match self.fetch_unless(req, memory, &mut never).await {
            Ok(f) => f,
            // `never` does not end.
            Err(GaveUp) => Fetched {
                partitions: Vec::new(),
                first_error: None,
                charge: None,
            },
        }
    }

    /// [`Records::fetch`], given up (`Err(GaveUp)`, nothing read) if `give_up`
    /// ends while the fetch waits for records. Only the wait is given up: a
    /// fetch that is counting or reading what arrived finishes, so no read
    /// runs on without the memory charged for it.
    ///
    /// The phases: [`Records::plan_fetch`] resolves the partitions and the
    /// limits; [`Records::wait_for_bytes`] waits until enough has arrived;
    /// [`Records::room_for_records`] takes room in the response budget;
    /// [`Records::read_fetched`] reads each partition once. A Flume-records
    /// fetch that found only entries without records (transaction markers,
    /// emptied batches) waits again from after them rather than answer empty
    /// at once.
    pub async fn fetch_unless<G>(
        &self,
        req: &FetchSpec,
        memory: Option<FetchMemory<'_>>,
        give_up: &mut G,
    ) -> Result<Fetched, GaveUp>
    where
        G: futures::future::FusedFuture<Output = ()> + Unpin,
    {
        let counting = memory.map(|m| m.counting);
        let response = memory.map(|m| m.response);
        let plan = self.plan_fetch(req);
        let mut progress = Progress::new(req);
        loop {
            self.wait_for_bytes(req, &plan, &mut progress, counting, give_up)
                .await?;
            let (budget, mut reserved) = self.room_for_records(&plan, response).await;
            let mut tally = FetchTally::default();
            let mut went_on = vec![None; req.partitions.len()];
            let partitions = self
                .read_fetched(
                    req,
                    &plan.resolved,
                    budget,
                    reserved.as_mut(),
                    &mut tally,
                    &mut went_on,
                )
                .await;
            if Instant::now() < plan.deadline
                && !self.is_shutting_down()
                && progress.passed_over(req, &partitions, &went_on)
            {
                continue;
            }
            return Ok(Fetched {
                partitions,
                first_error: tally.commit(),
                charge: reserved,
            });
        }
    }

    /// The first phase of a fetch: its partitions, its deadline and its
    /// limits (what each partition and the whole response may take, and the
    /// bytes worth answering for).
    fn plan_fetch(&self, req: &FetchSpec) -> FetchPlan {
        let cap = std::time::Duration::from_millis(MAX_FETCH_WAIT_MS.unsigned_abs().into());
        // A long wait ends on a shared tick: thousands of idle consumers' fetches
        // then time out together, a wake-up per tick instead of one each.
        let deadline = rt::coarse_from_now(Instant::now(), req.max_wait.min(cap));
        // The whole response must fit a frame: records, each partition's header, and
        // the one whole record that may go past the budget.
        let headers: usize = req.partitions.iter().map(|p| p.at.topic.len() + 40).sum();
        let budget = req.max_bytes.max(1).min(
            self.config
                .max_frame_bytes
                .saturating_sub(64 * 1024 + headers + self.config.max_record_bytes)
                .max(4096),
        );
        let resolved = req
            .partitions
            .iter()
            .map(|fp| match self.topic(&fp.at.topic) {
                None => Err(ErrorCode::UnknownTopic),
                Some(t) => t
                    .partition(fp.at.partition)
                    .cloned()
                    .ok_or(ErrorCode::UnknownPartition),
            })
            .collect();
        let wants: Vec<usize> = req
            .partitions
            .iter()
            .map(|fp| fp.max_bytes.max(1).min(budget))
            .collect();
        // What the request can ever receive, so an unreachable min_bytes cannot
        // make it wait for more than it could be given.
        let reachable = wants.iter().fold(0usize, |a, w| a.saturating_add(*w));
        let min_bytes = req.min_bytes.max(1).min(reachable.min(budget)).max(1);
        FetchPlan {
            resolved,
            wants,
            min_bytes,
            budget,
            headers,
            deadline,
        }
    }

    /// The waiting phase of a fetch: returns once `min_bytes` have arrived
    /// (bounded by the end offsets or counted by reading), a partition
    /// answers with an error, the deadline passes or the broker shuts down;
    /// `Err(GaveUp)` if `give_up` ends first.
    async fn wait_for_bytes<G>(
        &self,
        req: &FetchSpec,
        plan: &FetchPlan,
        progress: &mut Progress,
        counting: Option<&Arc<MemoryBudget>>,
        give_up: &mut G,
    ) -> Result<(), GaveUp>
    where
        G: futures::future::FusedFuture<Output = ()> + Unpin,
    {
        loop {
            let listeners: Vec<_> = plan.resolved.iter().flatten().map(|p| p.listen()).collect();
            let (lower, upper) = self.arrived_bounds(req, plan, progress);
            if !progress.errors && lower < plan.min_bytes && upper >= plan.min_bytes {
                self.count_arrived(plan, counting, req.read_as, req.committed, progress)
                    .await;
            }
            let now = Instant::now();
            if progress.counted.max(lower) >= plan.min_bytes
                || progress.errors
                || now >= plan.deadline
                || listeners.is_empty()
                || self.is_shutting_down()
            {
                return Ok(());
            }
            let any_data = futures::future::select_all(listeners.into_iter().map(Box::pin));
            // No listener on the shutdown signal: `begin_shutdown` wakes every
            // partition's readers after it closes the signal (a listener per
            // waiting fetch on that one event costs more than the fetch).
            futures::select! {
                _ = any_data.fuse() => {}
                _ = rt::sleep(plan.deadline - now).fuse() => {}
                () = &mut *give_up => return Err(GaveUp),
            }
        }
    }

    /// Bounds of the bytes that arrived, from the end offsets alone: a stored
    /// record takes at least MIN_STORED_RECORD bytes and at most
    /// max_record_bytes, so the record counts often decide without reading
    /// anything. Marks `progress.errors` for a partition that must answer now
    /// (unknown, deleted while the fetch waited, or asked out of range).
    fn arrived_bounds(
        &self,
        req: &FetchSpec,
        plan: &FetchPlan,
        progress: &mut Progress,
    ) -> (usize, usize) {
        let (mut lower, mut upper) = (progress.counted, progress.counted);
        for (i, part) in plan.resolved.iter().enumerate() {
            let (Ok(part), Some(at)) = (part, progress.next[i]) else {
                progress.errors = true;
                continue;
            };
            if part.is_deleted() {
                progress.errors = true;
                continue;
            }
            let end = if req.committed {
                part.stable_offset()
            } else {
                part.end_offset()
            };
            if at < part.start_offset() || at > end {
                progress.errors = true;
                continue;
            }
            let records = usize::try_from(end - at).unwrap_or(usize::MAX);
            let room = plan.wants[i].saturating_sub(progress.counted_in[i]);
            lower = lower.saturating_add(records.saturating_mul(MIN_STORED_RECORD).min(room));
            upper = upper.saturating_add(
                records
                    .saturating_mul(self.config.max_record_bytes)
                    .min(room),
            );
        }
        (lower, upper)
    }

    /// The room phase of a fetch: room for the records, charged as they are
    /// read: the shared budget's, or what is left of the connection's reserve
    /// (the fairness rule, `crate::budget`), in which the first record goes
    /// out whole. A response with no room waits for it holding no records,
    /// past its deadline if need be: a connection that has used its reserve
    /// waits, the others are served. Shutdown ends the wait. Returns the
    /// bytes the read may take and the charge it adds to.
    async fn room_for_records(
        &self,
        plan: &FetchPlan,
        response: Option<&Arc<MemoryBudget>>,
    ) -> (usize, Option<Charge>) {
        let Some(m) = response else {
            return (plan.budget, None);
        };
        if !m.may_admit(1) {
            futures::select! {
                () = m.wait_to_admit(1).fuse() => {}
                _ = self.shutdown.begun().fuse() => {}
            }
        }
        let mut budget = plan.budget;
        if m.is_spent() {
            budget = budget.min(m.reserve_left().saturating_sub(plan.headers).max(1));
        }
        (budget, Some(m.charge(plan.headers)))
    }

    /// Counts, by reading, the bytes that arrived past `progress.next` on
    /// each partition until `min_bytes` are counted or every partition is
    /// caught up. Each chunk is dropped once counted; chunks wait for room in
    /// `counting`.
    async fn count_arrived(
        &self,
        plan: &FetchPlan,
        counting: Option<&Arc<MemoryBudget>>,
        how: ReadAs,
        committed: bool,
        progress: &mut Progress,
    ) {
        let min_bytes = plan.min_bytes;
        for (i, part) in plan.resolved.iter().enumerate() {
            let (Ok(part), Some(mut at)) = (part, progress.next[i]) else {
                continue;
            };
            let visible = || {
                if committed {
                    part.stable_offset()
                } else {
                    part.end_offset()
                }
            };
            while progress.counted < min_bytes
                && progress.counted_in[i] < plan.wants[i]
                && at < visible()
            {
                if let Some(c) = counting {
                    if c.is_spent() {
                        let left = plan.deadline.saturating_duration_since(Instant::now());
                        let room = futures::select! {
                            r = rt::timeout(left, c.wait_for_room()).fuse() => r.is_some(),
                            _ = self.shutdown.begun().fuse() => false,
                        };
                        if !room {
                            return;
                        }
                    }
                }
                let chunk = (min_bytes - progress.counted)
                    .min(plan.wants[i] - progress.counted_in[i])
                    .min(COUNT_CHUNK_BYTES);
                // One record may go past the chunk.
                let _held = counting.map(|c| c.charge(chunk.max(self.config.max_record_bytes)));
                let (records, went_on) = match part.read(at, chunk, how, committed).await {
                    Ok(r) => (r.records, r.next),
                    Err(_) => {
                        // The final read reports it.
                        progress.errors = true;
                        return;
                    }
                };
                if records.is_empty() || went_on <= at {
                    break;
                }
                at = went_on;
                progress.next[i] = Some(at);
                progress.counted_in[i] += records.len();
                progress.counted += records.len();
            }
            if progress.counted >= min_bytes {
                return;
            }
        }
    }

    /// Reads each partition once, within `budget` bytes in all; what it
    /// served and the first failure go to `tally`.
    async fn read_fetched(
        &self,
        req: &FetchSpec,
        resolved: &[Result<Arc<Partition>, ErrorCode>],
        budget: usize,
        mut reserved: Option<&mut Charge>,
        tally: &mut FetchTally,
        went_on: &mut [Option<u64>],
    ) -> Vec<PartitionRecords> {
        let mut out = Vec::with_capacity(req.partitions.len());
        let mut total = 0usize;
        for (i, (fp, part)) in req.partitions.iter().zip(resolved).enumerate() {
            let part = match part {
                Ok(p) => p,
                Err(code) => {
                    tally.failed(i, *code);
                    out.push(PartitionRecords {
                        error: *code,
                        log_start: -1,
                        log_end: -1,
                        records: Vec::new(),
                        last_stable: -1,
                        aborted: Vec::new(),
                    });
                    continue;
                }
            };
            let want = fp.max_bytes.max(1).min(budget.saturating_sub(total));
            let to_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            let read = match u64::try_from(fp.offset) {
                Err(_) => Err(ErrorCode::OffsetOutOfRange),
                Ok(_) if want == 0 => Ok(None),
                Ok(o) => {
                    // Each read is charged for what it may return while it runs, then
                    // for what it did (one record may go past `want`).
                    if let Some(c) = reserved.as_deref_mut() {
                        c.add(want);
                    }
                    let mut r = part.read(o, want, req.read_as, req.committed).await;
                    // Only the first record of the first partition that has
                    // any may go past the limits (as Kafka's first batch):
                    // past it, a record that does not fit waits for the next
                    // fetch, so the response stays within `max_bytes`.
                    if let Ok(read) = r.as_mut() {
                        if total > 0 && read.records.len() > want {
                            read.records = Vec::new();
                            read.next = o;
                        } else if req.read_as == ReadAs::Records
                            && read.records.is_empty()
                            && read.next > o
                            && read.next >= read.log_end
                        {
                            // Nothing a Flume reader can read lies between `o`
                            // and the log end (transaction markers, aborted
                            // transactions): its end is where it is, so it is
                            // caught up (its protocol cannot move it past them).
                            read.log_end = o;
                        }
                    }
                    if let Some(c) = reserved.as_deref_mut() {
                        c.shrink_to(c.bytes().saturating_sub(want));
                        c.add(r.as_ref().map_or(0, |r| r.records.len()));
                    }
                    r.map(Some).map_err(|e| e.code())
                }
            };
            let now = part.offsets();
            let last_stable = to_i64(part.stable_offset());
            let nothing = |error| PartitionRecords {
                error,
                log_start: now.log_start,
                log_end: now.log_end,
                records: Vec::new(),
                last_stable,
                aborted: Vec::new(),
            };
            out.push(match read {
                // The offsets the read saw, so they agree with its records.
                Ok(Some(r)) => {
                    if let Some(w) = went_on.get_mut(i) {
                        *w = Some(r.next);
                    }
                    total += r.records.len();
                    tally.served(part, &r.records);
                    PartitionRecords {
                        error: ErrorCode::None,
                        log_start: to_i64(r.log_start),
                        log_end: to_i64(r.log_end),
                        records: r.records,
                        last_stable: last_stable.min(to_i64(r.log_end)),
                        aborted: r.aborted,
                    }
                }
                Ok(None) => nothing(ErrorCode::None),
                Err(error) => {
                    tally.failed(i, error);
                    nothing(error)
                }
            });
        }
        out
    }
}

/// What a fetch settled before it waits ([`Records::plan_fetch`]).
#[derive(Debug)]
struct FetchPlan {
    /// Each requested partition, or why it cannot be read.
    resolved: Vec<Result<Arc<Partition>, ErrorCode>>,
    /// What each partition may take.
    wants: Vec<usize>,
    /// The bytes worth answering for (at least 1, at most what can be given).
    min_bytes: usize,
    /// What the whole response may take.
    budget: usize,
    /// The response's bytes besides the records.
    headers: usize,
    /// When the fetch answers with what it has.
    deadline: Instant,
}

/// What a waiting fetch has counted so far.
#[derive(Debug)]
struct Progress {
    /// Per partition: the next offset not yet counted.
    next: Vec<Option<u64>>,
    /// Per partition: the bytes counted.
    counted_in: Vec<usize>,
    /// The bytes counted in all.
    counted: usize,
    /// A partition must answer now.
    errors: bool,
}

impl Progress {
    fn new(req: &FetchSpec) -> Self {
        Progress {
            next: req
                .partitions
                .iter()
                .map(|fp| u64::try_from(fp.offset).ok())
                .collect(),
            counted_in: vec![0; req.partitions.len()],
            counted: 0,
            errors: false,
        }
    }

    /// True when a Flume-records read served nothing yet went on past what
    /// was counted (only markers or emptied batches lay there): the fetch
    /// then counts again from after them.
    fn passed_over(
        &mut self,
        req: &FetchSpec,
        partitions: &[PartitionRecords],
        went_on: &[Option<u64>],
    ) -> bool {
        let passed = req.read_as == ReadAs::Records
            && partitions
                .iter()
                .all(|p| p.error == ErrorCode::None && p.records.is_empty())
            && went_on
                .iter()
                .zip(&self.next)
                .any(|(w, n)| w.is_some_and(|w| Some(w) > *n));
        if passed {
            for (n, w) in self.next.iter_mut().zip(went_on) {
                if let (Some(n), Some(w)) = (n.as_mut(), w) {
                    *n = (*n).max(*w);
                }
            }
        }
        passed
    }
}

/// What one FETCH served, counted once it answers.
#[derive(Debug, Default)]
struct FetchTally {
    served: Vec<(Arc<Partition>, u64, usize)>,
    first_error: Option<(usize, ErrorCode)>,
}

impl FetchTally {
    /// Partition `p` served `records` (stored format, as the log read and
    /// checked them: counted by their headers, not checked again).
    pub fn served(&mut self, p: &Arc<Partition>, records: &[u8]) {
        if !records.is_empty() {
            let n = flume_protocol::record::count_unchecked(records) as u64;
            self.served.push((Arc::clone(p), n, records.len()));
        }
    }

    /// The partition at `index` of the request failed with `code`.
    pub fn failed(&mut self, index: usize, code: ErrorCode) {
        if self.first_error.is_none() {
            self.first_error = Some((index, code));
        }
    }

    /// Adds what was served to the partitions' counters; returns the first
    /// failed partition (its index in the request) and its error.
    pub fn commit(&mut self) -> Option<(usize, ErrorCode)> {
        for (p, n, bytes) in self.served.drain(..) {
            p.stats().served(n, bytes);
        }
        self.first_error
    }
}

/// Most bytes one in-process read takes at once ([`Records::read_now`]).
const READ_NOW_MAX_BYTES: usize = 1024 * 1024;

impl Records {
    /// Up to `max` records (at least one, if there is any) of `partition` of
    /// `topic` from offset `from`, read on the calling thread and decoded:
    /// the read path of the in-process consumers (embedded mode, Python),
    /// where the reader is the caller's own thread.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, UNKNOWN_PARTITION, OFFSET_OUT_OF_RANGE, a corrupt record.
    pub fn read_now(
        &self,
        topic: &str,
        partition: i32,
        from: u64,
        max: usize,
    ) -> Result<Vec<record::Record>, BrokerError> {
        let t = self
            .topic(topic)
            .ok_or(BrokerError::from(ErrorCode::UnknownTopic))?;
        let part = t
            .partition(partition)
            .ok_or(BrokerError::from(ErrorCode::UnknownPartition))?;
        let mut out = Vec::new();
        let mut next = from;
        while out.len() < max.max(1) && next < part.end_offset() {
            let want = max.max(1) - out.len();
            // About what `want` records take (a read returns at least one whole record).
            let bytes = if want == 1 {
                1
            } else {
                want.saturating_mul(256).clamp(1, READ_NOW_MAX_BYTES)
            };
            let read = part.read_now(next, bytes)?;
            if read.records.is_empty() {
                if read.next <= next {
                    break;
                }
                // Only entries without records (transaction markers): past them.
                next = read.next;
                continue;
            }
            let buf = bytes::Bytes::from(read.records);
            // Where the wanted records end; only those are decoded.
            let (mut end, mut taken) = (0, 0);
            for raw in record::RecordIter::new(&buf) {
                let raw = raw
                    .map_err(|e| BrokerError::code_for(ErrorCode::CorruptRecord, e.to_string()))?;
                end = raw.pos + raw.encoded_len();
                taken += 1;
                if taken == want {
                    break;
                }
            }
            if taken == 0 {
                break;
            }
            let recs = record::decode_all(&buf.slice(..end))
                .map_err(|e| BrokerError::code_for(ErrorCode::CorruptRecord, e.to_string()))?;
            if let Some(last) = recs.last() {
                next = last.offset + 1;
            }
            out.extend(recs);
        }
        Ok(out)
    }

    /// Listeners woken when any of `partitions` of `topic` gets records
    /// (create them before looking, so an append in between is not missed).
    pub fn listen(&self, topic: &str, partitions: &[u32]) -> Vec<event_listener::EventListener> {
        self.topic(topic)
            .map(|t| {
                partitions
                    .iter()
                    .filter_map(|p| i32::try_from(*p).ok().and_then(|p| t.partition(p)))
                    .map(|p| p.listen())
                    .collect()
            })
            .unwrap_or_default()
    }
}

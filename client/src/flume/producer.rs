//! The producer over Flume's protocol (`crate::producer` is the facade):
//! `send` from any number of tasks; records are batched per
//! (topic, partition) into PRODUCE requests by one background task.
//!
//! - Batching: whatever accumulated while the previous requests were being
//!   written goes out together; `linger` waits a little longer to fill
//!   batches; a batch is sent at once when it reaches `batch_max_bytes`.
//! - At most `max_in_flight` requests are outstanding; requests are written
//!   in order by the one sender task.
//! - Order: records sent one after another with the same key keep their
//!   order in the partition, even with several requests in flight, because
//!   requests are written in order on one connection, the broker admits them
//!   in order, and the producer never retries (a failed send fails; the
//!   caller decides whether to send again).
//! - Memory: at most `buffer_max_bytes` of records wait in the client.
//!   Sends wait for room (default), or fail fast with [`Error::BufferFull`]
//!   when [`ProducerConfig::fail_when_full`] is set.
//! - Acknowledgements: the records of a batch share one acknowledgement
//!   (one allocation and one wake-up per batch); each [`Delivery`] reads its
//!   record's place from it.
//! - Routing: with no explicit partition the broker routes by key (FNV-1a of
//!   the key modulo the partition count, `flume_protocol::partition_for_key`);
//!   null keys go to one partition per batch.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use event_listener::Event;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;

use super::conn::Client;
use crate::error::{Error, Result};
use crate::types::delivery::{Acks, Delivery, Outcome};
use crate::types::producer::{Partitioner, ProducerConfig, ProducerRecord, RecordMetadata};
use flume_protocol::record;
use flume_protocol::{ErrorCode, ProduceEntry, ProduceRequest, ProduceResponse};
use flume_rt as rt;

struct Batch {
    buf: Vec<u8>,
    acks: Acks,
}

/// A partition's batches, oldest first. The newest, which every record
/// appends to, is kept in the map entry itself (a `VecDeque` alone put it
/// behind one more pointer: spread over 10,000 partitions, one more cache
/// miss per record); older ones, full, wait in `older`.
#[derive(Default)]
struct Batches {
    older: VecDeque<Batch>,
    /// `None` only when `older` is empty too.
    last: Option<Batch>,
}

impl Batches {
    fn is_empty(&self) -> bool {
        self.last.is_none()
    }

    fn len(&self) -> usize {
        self.older.len() + usize::from(self.last.is_some())
    }

    fn front(&self) -> Option<&Batch> {
        self.older.front().or(self.last.as_ref())
    }

    fn back(&self) -> Option<&Batch> {
        self.last.as_ref()
    }

    fn back_mut(&mut self) -> Option<&mut Batch> {
        self.last.as_mut()
    }

    fn push_back(&mut self, b: Batch) {
        if let Some(prev) = self.last.replace(b) {
            self.older.push_back(prev);
        }
    }

    fn pop_front(&mut self) -> Option<Batch> {
        self.older.pop_front().or_else(|| self.last.take())
    }
}

struct Shared {
    client: Client,
    config: ProducerConfig,
    state: Mutex<State>,
    /// Notified when a batch is added (sender) and when buffer room frees up (senders waiting).
    added: Event,
    freed: Event,
    /// Held by whoever is writing a PRODUCE request (the sender task from taking
    /// batches until the request is written; a direct send while it writes), so
    /// requests reach the connection in the order their records were accepted.
    order: futures::lock::Mutex<()>,
}

#[derive(Default)]
struct State {
    /// Per (topic, partition), batches of at most `batch_max_bytes` (one record may exceed it), oldest first.
    batches: BTreeMap<String, BTreeMap<i32, Batches>>,
    /// Where the last request that filled up stopped: the next one starts
    /// there, so every partition waits the same number of requests and fills
    /// its batch meanwhile (as Kafka's accumulator drains from a rotating
    /// index). Starting each request at the first partition instead sent the
    /// first ones again and again with a record or two each, while the last
    /// ones waited.
    cursor: (String, i32),
    buffered: usize,
    /// Bytes of the batches not yet taken into a request.
    unsent: usize,
    /// Partitions with a batch not yet taken.
    partitions: usize,
    full: bool,
    closed: bool,
}

use flume_rt::sync::lock;

/// Bytes a new batch starts with room for (at most the batch limit).
const FIRST_BATCH_CAPACITY: usize = 2048;

/// A request carrying at least this many partitions' batches...
const SPREAD_MIN_PARTITIONS: usize = 16;
/// ... that average less than this many bytes waits while another request
/// is in flight (see [`State::spread_thin`]).
const THIN_BATCH_BYTES: usize = 4096;

impl State {
    /// True when the batches waiting are many and small: at least
    /// [`SPREAD_MIN_PARTITIONS`] partitions averaging under
    /// [`THIN_BATCH_BYTES`]. The broker writes each partition's batch on its
    /// own (one write per partition), so a request of thousands of batches
    /// of a record or two costs it thousands of writes for little data. While
    /// another request is in flight, such a request waits for its answer and
    /// then carries everything that arrived meanwhile: Nagle's rule, applied
    /// to partitions, which lets batches grow with the broker's own pace.
    /// Few partitions, or full batches, go at once as before.
    fn spread_thin(&self) -> bool {
        self.partitions >= SPREAD_MIN_PARTITIONS
            && self.unsent < self.partitions.saturating_mul(THIN_BATCH_BYTES)
    }

    /// Takes batches for one request of at most `limit` bytes (at least one
    /// batch): each round the next batch of every partition, from the cursor
    /// round to just before it (first the partitions at or after it, then
    /// those before); where the request fills up becomes the next cursor.
    fn take_request(
        &mut self,
        limit: usize,
        entries: &mut Vec<ProduceEntry>,
        acks: &mut Vec<(usize, Acks)>,
    ) {
        let mut size = 0usize;
        'fill: loop {
            let mut took = false;
            for after_cursor in [true, false] {
                for (topic, parts) in self.batches.iter_mut() {
                    for (partition, queue) in parts.iter_mut() {
                        let at_or_after =
                            (topic.as_str(), *partition) >= (self.cursor.0.as_str(), self.cursor.1);
                        if at_or_after != after_cursor {
                            continue;
                        }
                        let Some(cost) = queue.front().map(|b| b.buf.len() + topic.len() + 16)
                        else {
                            continue;
                        };
                        if size > 0 && size + cost > limit {
                            self.cursor = (topic.clone(), *partition);
                            break 'fill;
                        }
                        let Some(b) = queue.pop_front() else { continue };
                        self.unsent = self.unsent.saturating_sub(b.buf.len());
                        size += cost;
                        took = true;
                        acks.push((b.buf.len(), b.acks));
                        entries.push(ProduceEntry {
                            topic: topic.clone(),
                            partition: *partition,
                            records: Bytes::from(b.buf),
                        });
                    }
                }
            }
            if !took {
                break;
            }
        }
    }
}

/// The producer over Flume's protocol: one connection, the batches, and the
/// sender task that writes them.
pub(crate) struct FlumeProducer {
    shared: Arc<Shared>,
    sender: rt::sync::TaskSlot<()>,
}

impl std::fmt::Debug for FlumeProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("broker", &self.shared.client.addr())
            .finish()
    }
}

impl FlumeProducer {
    /// Connects to the broker at `addr` (`host:port`) and starts the sender
    /// task. `config` comes normalised from the facade (`crate::producer`).
    ///
    /// # Errors
    /// [`Error::Connect`] when the broker cannot be reached; a partitioner
    /// other than FNV-1a (the broker routes keys itself).
    pub(crate) async fn connect(addr: String, config: ProducerConfig) -> Result<Self> {
        if config.partitioner != Partitioner::Fnv1a {
            return Err(Error::InvalidArgument(
                "a Flume broker routes keys by FNV-1a itself; the murmur2 partitioner needs a kafka:// address".into(),
            ));
        }
        let client = Client::connect(addr, config.connection.clone()).await?;
        let shared = Arc::new(Shared {
            client,
            config,
            state: Mutex::new(State::default()),
            added: Event::new(),
            freed: Event::new(),
            order: futures::lock::Mutex::new(()),
        });
        let sender = rt::spawn(sender_loop(Arc::clone(&shared)));
        Ok(FlumeProducer {
            shared,
            sender: rt::sync::TaskSlot::new(sender),
        })
    }

    /// Sends a record and waits for its acknowledgement: written directly
    /// when the producer is idle, else through the batches.
    pub(crate) async fn send_record(&self, rec: ProducerRecord) -> Result<RecordMetadata> {
        let rec = match self.try_direct(rec).await {
            Ok(result) => return result,
            Err(rec) => rec,
        };
        self.enqueue_inner(rec, !self.shared.config.fail_when_full)
            .await?
            .await
    }

    /// One record at a time on an idle producer: the caller writes its own
    /// request instead of handing it to the sender task and back, which saves
    /// two thread hand-offs per round trip. Gives the record back when the
    /// producer is busy (batches waiting, or the sender writing), so order holds.
    async fn try_direct(
        &self,
        rec: ProducerRecord,
    ) -> std::result::Result<Result<RecordMetadata>, ProducerRecord> {
        let sh = &self.shared;
        if !sh.config.linger.is_zero() || rec.topic.is_empty() {
            return Err(rec);
        }
        let Some(order) = sh.order.try_lock() else {
            return Err(rec);
        };
        let len =
            record::encoded_len_nullable(rec.key.as_deref(), rec.value.as_deref(), &rec.headers);
        {
            let mut st = lock(&sh.state);
            if st.closed
                || !st.batches.is_empty()
                || st.buffered + len > sh.config.buffer_max_bytes
                || len > sh.config.batch_max_bytes
            {
                return Err(rec);
            }
            st.buffered += len;
        }
        let mut buf = Vec::with_capacity(len);
        record::encode_nullable(
            &mut buf,
            0,
            rec.timestamp.unwrap_or_else(crate::clock::now_ms),
            rec.key.as_deref(),
            rec.value.as_deref(),
            &rec.headers,
        );
        let req = ProduceRequest {
            entries: vec![ProduceEntry {
                topic: rec.topic,
                partition: rec.partition.unwrap_or(-1),
                records: Bytes::from(buf),
            }],
        };
        let started = match sh.client.connection().await {
            Ok(conn) => conn.start_call(&req, Duration::ZERO).await,
            Err(e) => Err(e),
        };
        drop(order);
        let result = match started {
            Ok(fut) => fut.await,
            Err(e) => Err(e),
        };
        let mut acks = Acks::new();
        let delivery = acks.add();
        complete(sh, (vec![(len, acks)], result));
        Ok(delivery.await)
    }

    /// Buffers a record (waiting for room unless `fail_when_full`).
    pub(crate) async fn enqueue(&self, rec: ProducerRecord) -> Result<Delivery> {
        self.enqueue_inner(rec, !self.shared.config.fail_when_full)
            .await
    }

    async fn enqueue_inner(&self, rec: ProducerRecord, wait: bool) -> Result<Delivery> {
        let sh = &self.shared;
        if rec.topic.is_empty() {
            return Err(Error::InvalidArgument("topic must not be empty".into()));
        }
        let len =
            record::encoded_len_nullable(rec.key.as_deref(), rec.value.as_deref(), &rec.headers);
        let limit = sh
            .config
            .max_record_bytes
            .min(sh.config.buffer_max_bytes)
            .min(sh.config.connection.max_frame_bytes.saturating_sub(1024));
        if len > limit {
            return Err(Error::broker(
                ErrorCode::RecordTooLarge,
                format!(
                    "a record of {len} bytes (its 16-byte header included): the limit is {limit} bytes (max_record_bytes)"
                ),
            ));
        }
        let timestamp = rec.timestamp.unwrap_or_else(crate::clock::now_ms);
        let partition = rec.partition.unwrap_or(-1);
        let mut listener: Option<event_listener::EventListener> = None;
        loop {
            {
                let mut st = lock(&sh.state);
                if st.closed {
                    return Err(Error::Closed);
                }
                if st.buffered + len <= sh.config.buffer_max_bytes {
                    st.buffered += len;
                    let max = sh.config.batch_max_bytes;
                    if !st.batches.contains_key(&rec.topic) {
                        st.batches.insert(rec.topic.clone(), BTreeMap::new());
                    }
                    let mut full = false;
                    let mut delivery = None;
                    st.unsent += len;
                    let mut new_partition = false;
                    if let Some(queue) = st
                        .batches
                        .get_mut(&rec.topic)
                        .map(|t| t.entry(partition).or_default())
                    {
                        new_partition = queue.is_empty();
                        if queue.back().is_none_or(|b| b.buf.len() + len > max) {
                            queue.push_back(Batch {
                                // Room for a few records at once: a batch grown from
                                // nothing reallocates (and copies) every doubling.
                                buf: Vec::with_capacity(FIRST_BATCH_CAPACITY.min(max).max(len)),
                                acks: Acks::new(),
                            });
                        }
                        full = queue.len() > 1;
                        if let Some(b) = queue.back_mut() {
                            // Encoded straight into the batch: no per-record buffer.
                            record::encode_nullable(
                                &mut b.buf,
                                0,
                                timestamp,
                                rec.key.as_deref(),
                                rec.value.as_deref(),
                                &rec.headers,
                            );
                            delivery = Some(b.acks.add());
                            full |= b.buf.len() >= max;
                        }
                    }
                    st.full |= full;
                    st.partitions += usize::from(new_partition);
                    drop(st);
                    sh.added.notify(1);
                    // The queue was just given a batch, so there was one to add the record to.
                    return delivery.ok_or(Error::Closed);
                }
            }
            if !wait {
                return Err(Error::BufferFull {
                    limit: sh.config.buffer_max_bytes,
                });
            }
            // Listen, then look again before sleeping, so a release in between is not missed.
            match listener.take() {
                Some(l) => l.await,
                None => listener = Some(sh.freed.listen()),
            }
        }
    }

    /// Waits until every record sent before the call is acknowledged (or failed).
    pub(crate) async fn flush(&self) {
        let sh = &self.shared;
        loop {
            let listener = sh.freed.listen();
            if lock(&sh.state).buffered == 0 {
                return;
            }
            sh.added.notify(1);
            listener.await;
        }
    }

    /// Flushes, then stops the sender task and closes the connection.
    pub(crate) async fn close(&self) {
        self.flush().await;
        lock(&self.shared.state).closed = true;
        self.shared.added.notify(usize::MAX);
        self.sender.join().await;
        self.shared.client.close().await;
    }

    /// Stops taking records and lets the sender task end once what is
    /// buffered is sent (the producer was dropped).
    pub(crate) fn shut(&self) {
        lock(&self.shared.state).closed = true;
        self.shared.added.notify(usize::MAX);
    }
}

type Sent = (Vec<(usize, Acks)>, Result<ProduceResponse>);

async fn sender_loop(sh: Arc<Shared>) {
    let mut inflight: FuturesUnordered<futures::future::BoxFuture<'static, Sent>> =
        FuturesUnordered::new();
    loop {
        let listener = sh.added.listen();
        let (has_data, closed, full, thin) = {
            let st = lock(&sh.state);
            (!st.batches.is_empty(), st.closed, st.full, st.spread_thin())
        };
        if closed && !has_data && inflight.is_empty() {
            return;
        }
        if !has_data || inflight.len() >= sh.config.max_in_flight {
            let next = async {
                if inflight.is_empty() {
                    futures::future::pending().await
                } else {
                    inflight.next().await
                }
            };
            let done = futures::select! {
                _ = listener.fuse() => None,
                d = next.fuse() => d,
            };
            if let Some(d) = done {
                complete(&sh, d);
            }
            continue;
        }
        if !full && !closed && !inflight.is_empty() && thin && sh.config.linger.is_zero() {
            // Many small batches: wait for the request in flight (State::spread_thin).
            if let Some(d) = inflight.next().await {
                complete(&sh, d);
            }
            continue;
        }
        if !sh.config.linger.is_zero() && !full && !closed {
            rt::sleep(sh.config.linger).await;
        }
        // Take the oldest batch of each partition, then the next ones, while the request
        // stays under its limit; what is left goes in the next request.
        let limit = sh
            .config
            .connection
            .max_frame_bytes
            .saturating_sub(64 * 1024)
            .min(sh.config.request_max_bytes)
            .max(1);
        let mut entries = Vec::new();
        let mut acks = Vec::new();
        let order = sh.order.lock().await;
        {
            let mut guard = lock(&sh.state);
            let st = &mut *guard;
            st.take_request(limit, &mut entries, &mut acks);
            for parts in st.batches.values_mut() {
                parts.retain(|_, q| !q.is_empty());
            }
            st.batches.retain(|_, parts| !parts.is_empty());
            st.partitions = st.batches.values().map(BTreeMap::len).sum();
            let max = sh.config.batch_max_bytes;
            st.full = st
                .batches
                .values()
                .flat_map(BTreeMap::values)
                .any(|q| q.len() > 1 || q.front().is_some_and(|b| b.buf.len() >= max));
        }
        let req = ProduceRequest { entries };
        let started = match sh.client.connection().await {
            Ok(conn) => conn.start_call(&req, Duration::ZERO).await,
            Err(e) => Err(e),
        };
        drop(order);
        match started {
            Ok(fut) => inflight.push(async move { (acks, fut.await) }.boxed()),
            Err(e) => complete(&sh, (acks, Err(e))),
        }
        // Collect whatever already finished without waiting.
        while let Some(Some(d)) = inflight.next().now_or_never() {
            complete(&sh, d);
        }
    }
}

fn complete(sh: &Shared, (acks, result): Sent) {
    let freed: usize = acks.iter().map(|(n, _)| n).sum();
    match result {
        Ok(resp) if resp.results.len() == acks.len() => {
            for ((_, batch), r) in acks.into_iter().zip(resp.results) {
                if !r.error.is_ok() {
                    let context = if r.error == ErrorCode::RecordTooLarge {
                        format!(
                            "{}/{}: a record is above the broker's max_record_bytes (the producer's limit is {} bytes, 16-byte header included)",
                            r.topic, r.partition, sh.config.max_record_bytes
                        )
                    } else {
                        format!("{}/{}", r.topic, r.partition)
                    };
                    batch.complete(Outcome::failed(Error::broker(r.error, context)));
                    continue;
                }
                let placed: Vec<RecordMetadata> = r
                    .record_offsets()
                    .into_iter()
                    .take(batch.count)
                    .map(|(partition, offset)| RecordMetadata { partition, offset })
                    .collect();
                let rest = (placed.len() < batch.count).then(|| {
                    Error::protocol(format!(
                        "{}/{}: the broker acknowledged {} records of {} sent",
                        r.topic,
                        r.partition,
                        placed.len(),
                        batch.count
                    ))
                });
                batch.complete(Outcome { placed, rest });
            }
        }
        Ok(resp) => {
            let err = Error::protocol(format!(
                "PRODUCE response has {} results for {} entries sent",
                resp.results.len(),
                acks.len()
            ));
            for (_, batch) in acks {
                batch.complete(Outcome::failed(err.clone()));
            }
        }
        Err(e) => {
            for (_, batch) in acks {
                batch.complete(Outcome::failed(e.clone()));
            }
        }
    }
    {
        let mut st = lock(&sh.state);
        st.buffered = st.buffered.saturating_sub(freed);
    }
    sh.freed.notify(usize::MAX);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partitions_batches_keep_their_order() {
        let batch = |n: u8| Batch {
            buf: vec![n],
            acks: Acks::new(),
        };
        let mut q = Batches::default();
        assert!(q.is_empty() && q.front().is_none() && q.pop_front().is_none());
        for n in 0..3 {
            q.push_back(batch(n));
            assert_eq!(q.back().map(|b| b.buf[0]), Some(n));
            assert_eq!(q.front().map(|b| b.buf[0]), Some(0));
            assert_eq!(q.len(), usize::from(n) + 1);
        }
        let order: Vec<u8> = std::iter::from_fn(|| q.pop_front().map(|b| b.buf[0])).collect();
        assert_eq!(order, [0, 1, 2]);
        assert!(q.is_empty() && q.back().is_none());
        assert_eq!(q.len(), 0);
        q.push_back(batch(7));
        assert_eq!(q.pop_front().map(|b| b.buf[0]), Some(7));
    }

    fn state_with(parts: &[(&str, i32, usize)]) -> State {
        let mut st = State::default();
        for &(topic, partition, batches) in parts {
            let q = st
                .batches
                .entry(topic.to_string())
                .or_default()
                .entry(partition)
                .or_default();
            for seq in 0..batches {
                q.push_back(Batch {
                    // The batch's place in its partition, to check the order.
                    buf: vec![u8::try_from(seq).unwrap(); 84],
                    acks: Acks::new(),
                });
            }
            st.partitions += usize::from(batches > 0);
            st.unsent += batches * 84;
        }
        st
    }

    #[test]
    fn many_partitions_of_small_batches_are_thin_few_or_large_are_not() {
        let many: Vec<(&str, i32, usize)> = (0..16).map(|p| ("t", p, 1)).collect();
        let mut st = state_with(&many);
        assert!(st.spread_thin(), "16 partitions of 84 bytes each");
        assert!(
            !state_with(&many[..15]).spread_thin(),
            "15 partitions go at once"
        );
        // Once the batches average THIN_BATCH_BYTES, they go.
        st.unsent = 16 * THIN_BATCH_BYTES;
        assert!(!st.spread_thin());
        // What a request takes no longer counts.
        let mut st = state_with(&many);
        take(&mut st, 10_000);
        assert_eq!(st.unsent, 0);
    }

    fn take(st: &mut State, limit: usize) -> Vec<(String, i32, u8)> {
        let (mut entries, mut acks) = (Vec::new(), Vec::new());
        st.take_request(limit, &mut entries, &mut acks);
        assert_eq!(acks.len(), entries.len());
        entries
            .into_iter()
            .map(|e| (e.topic, e.partition, e.records[0]))
            .collect()
    }

    #[test]
    fn requests_take_partitions_round_robin_from_where_the_last_one_filled_up() {
        // Batches cost 84 + 1 + 16 = 101 bytes: two fit a 250-byte request.
        let mut st = state_with(&[("a", 0, 3), ("a", 1, 3), ("a", 2, 3), ("b", 0, 3)]);
        let at = |t: &str, p: i32, seq: u8| (t.to_string(), p, seq);
        assert_eq!(take(&mut st, 250), [at("a", 0, 0), at("a", 1, 0)]);
        assert_eq!(take(&mut st, 250), [at("a", 2, 0), at("b", 0, 0)]);
        // Round the end: the first partitions again, not the last ones twice.
        assert_eq!(take(&mut st, 250), [at("a", 0, 1), at("a", 1, 1)]);
        // A large request takes the next batch of each, from the cursor round,
        // then the ones after, each partition's oldest first.
        assert_eq!(
            take(&mut st, 10_000),
            [
                at("a", 2, 1),
                at("b", 0, 1),
                at("a", 0, 2),
                at("a", 1, 2),
                at("a", 2, 2),
                at("b", 0, 2)
            ]
        );
        assert!(st
            .batches
            .values()
            .flat_map(|p| p.values())
            .all(|q| q.is_empty()));
        // A batch larger than the limit still goes, alone.
        let mut one = state_with(&[("t", 0, 2)]);
        assert_eq!(take(&mut one, 1), [at("t", 0, 0)]);
    }
}

//! The group consumer over Flume's protocol (`crate::group` is the
//! facade): joins a consumer group, fetches the partitions the
//! broker assigns, heartbeats in the background and follows rebalances.
//!
//! - Heartbeats run in their own task, so slow processing never delays
//!   them; they share the consumer's one connection with its fetches and
//!   commits (requests on a connection are served concurrently, so a waiting
//!   fetch does not hold a heartbeat up), which keeps a member to one
//!   connection at the broker (10,000 members, 10,000 connections: the
//!   broker's default `max_connections`). The consumer's fetches are
//!   GROUP_FETCHes, which count as heartbeats and are answered the moment
//!   the group starts a rebalance; they wait at most a heartbeat interval,
//!   so an idle member sends one request per interval. While the application
//!   keeps it from fetching (it is processing), the task keeps a heartbeat
//!   waiting at the broker instead (HEARTBEAT_WAIT), answered as soon as a
//!   rebalance starts: either way a rebalance is known within milliseconds
//!   and the consumer rejoins at its next `recv`. Against a broker without
//!   GROUP_FETCH, plain fetches beside HEARTBEAT_WAITs; without either,
//!   plain HEARTBEATs every interval.
//! - On REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION or UNKNOWN_MEMBER (from a
//!   heartbeat, fetch or commit) the consumer stops handing out records,
//!   drops what it fetched, commits what was processed (auto-commit), emits
//!   [`RebalanceEvent::Revoked`], rejoins, emits [`RebalanceEvent::Assigned`]
//!   and resumes from the committed offsets of its new assignment.
//! - Commits: auto-commit is the default (every `auto_commit_interval`, on
//!   rebalance and on close): a record counts as processed once the next
//!   record is asked for. With `auto_commit(false)`, call
//!   [`GroupConsumer::commit`] (commits `record.offset + 1`) or
//!   [`GroupConsumer::commit_processed`].
//! - Delivery is at-least-once and ordered per partition: after a crash or a
//!   rebalance, records processed but not committed are delivered again.
//! - Dropping the consumer stops its heartbeats without blocking; the broker
//!   then expires it after the session timeout. `close` leaves at once.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::lock::Mutex as AsyncMutex;
use futures::FutureExt;

use super::conn::Client;
use crate::error::{Error, Result};
use crate::join_failures::{self, JoinFailures};
#[cfg(test)]
use crate::types::connection::ConnectionConfig;
use crate::types::consumer::StartOffset;
use crate::types::group::{ConsumerRecord, GroupConsumerBuilder, RebalanceEvent, TopicPartition};
use flume_protocol::record;
use flume_protocol::{
    ErrorCode, FetchPartition, FetchRequest, GroupFetchRequest, HeartbeatRequest,
    HeartbeatWaitRequest, JoinGroupRequest, LeaveGroupRequest, OffsetCommitRequest,
    OffsetFetchRequest, PartitionOffset, TopicPartitions,
};
use flume_rt as rt;
use flume_rt::sync::lock;

struct Shared {
    member: Mutex<String>,
    generation: AtomicI32,
    rejoin: AtomicBool,
    /// Whether the consumer's fetches are GROUP_FETCHes (extension key 17),
    /// which count as heartbeats: on while waiting requests are (the
    /// builder's `heartbeat_wait`) until the broker answers UNSUPPORTED_API.
    fetch_beats: AtomicBool,
    /// When the last GROUP_FETCH or heartbeat went out, in µs since `epoch`.
    last_sign_us: AtomicU64,
    /// Whether a GROUP_FETCH is in flight.
    fetching: AtomicBool,
    /// When the last GROUP_FETCH ended, in µs since `epoch`.
    fetch_ended_us: AtomicU64,
    /// Notified when a GROUP_FETCH starts or ends.
    fetch_moved: event_listener::Event,
    epoch: Instant,
    /// Notified when `rejoin` is set by the heartbeat task: a waiting fetch
    /// stops waiting.
    rebalance: event_listener::Event,
    /// Notified when a join completes (a new member id or generation): a
    /// paused heartbeat task heartbeats the new membership at once. Also
    /// when GROUP_FETCH turns out unsupported (the task changes its pace).
    joined: event_listener::Event,
}

impl Shared {
    fn new(member: &str, generation: i32, fetch_beats: bool) -> Self {
        Shared {
            member: Mutex::new(member.to_owned()),
            generation: AtomicI32::new(generation),
            rejoin: AtomicBool::new(generation < 0),
            fetch_beats: AtomicBool::new(fetch_beats),
            last_sign_us: AtomicU64::new(0),
            fetching: AtomicBool::new(false),
            fetch_ended_us: AtomicU64::new(0),
            fetch_moved: event_listener::Event::new(),
            epoch: Instant::now(),
            rebalance: event_listener::Event::new(),
            joined: event_listener::Event::new(),
        }
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn since_us(&self, then: &AtomicU64) -> Duration {
        let then = Duration::from_micros(then.load(Ordering::Acquire));
        self.epoch.elapsed().saturating_sub(then)
    }

    /// Notes that a GROUP_FETCH or a heartbeat is going out now.
    fn signed(&self) {
        self.last_sign_us.store(self.now_us(), Ordering::Release);
    }

    /// How long ago the last GROUP_FETCH or heartbeat went out.
    fn since_sign(&self) -> Duration {
        self.since_us(&self.last_sign_us)
    }

    /// A GROUP_FETCH went out: it is the member's heartbeat until it ends
    /// (when the returned guard is dropped, also by a cancelled `recv`).
    fn group_fetch_started(&self) -> GroupFetching<'_> {
        self.signed();
        self.fetching.store(true, Ordering::Release);
        self.fetch_moved.notify(usize::MAX);
        GroupFetching(self)
    }

    /// How long ago the last GROUP_FETCH ended.
    fn since_fetch_ended(&self) -> Duration {
        self.since_us(&self.fetch_ended_us)
    }

    /// Acts on a membership error in the answer to a request that carried
    /// `member` and `generation` (a heartbeat, a GROUP_FETCH), unless the
    /// consumer rejoined while it was in flight: the answer is about that
    /// membership, so a rejoin that has since obtained another id or
    /// generation must not be undone.
    fn fenced(&self, member_id: &str, generation: i32, e: &Error) {
        if !is_fencing(e.code()) {
            return;
        }
        let mut member = lock(&self.member);
        if *member != member_id || self.generation.load(Ordering::Acquire) != generation {
            tracing::debug!(error = %e, "answer is about a membership already replaced");
            return;
        }
        tracing::debug!(error = %e, "the broker asks for a rejoin");
        if e.code() == Some(ErrorCode::UnknownMember) {
            member.clear();
        }
        self.rejoin.store(true, Ordering::Release);
        // A fetch waiting on the broker gives way to the rejoin.
        self.rebalance.notify(usize::MAX);
    }
}

/// A GROUP_FETCH in flight (see [`Shared::group_fetch_started`]).
struct GroupFetching<'a>(&'a Shared);

impl Drop for GroupFetching<'_> {
    fn drop(&mut self) {
        let shared = self.0;
        shared
            .fetch_ended_us
            .store(shared.now_us(), Ordering::Release);
        shared.fetching.store(false, Ordering::Release);
        shared.fetch_moved.notify(usize::MAX);
    }
}

struct State {
    client: Arc<Client>,
    /// The heartbeat task's pace: a GROUP_FETCH waits at most this long.
    heartbeat_interval: Duration,
    cfg: GroupConsumerBuilder,
    shared: Arc<Shared>,
    assignment: Vec<TopicPartition>,
    positions: HashMap<TopicPartition, i64>,
    processed: BTreeMap<TopicPartition, i64>,
    committed: BTreeMap<TopicPartition, i64>,
    last_delivered: Option<(TopicPartition, i64)>,
    buffer: VecDeque<ConsumerRecord>,
    last_commit: Instant,
    events: async_channel::Sender<RebalanceEvent>,
    /// Fetches so far: where the next fetch starts in the partition list.
    rotation: usize,
    join_failures: JoinFailures,
}

/// A group member over Flume's protocol: the consumer's state behind its
/// lock (shared with the record futures) and the heartbeat task's stop
/// signal (dropped, the task ends).
pub(crate) struct FlumeGroup {
    state: Arc<AsyncMutex<State>>,
    stop: async_channel::Sender<()>,
}

impl FlumeGroup {
    /// Connects to the broker at `addr`, starts heartbeating and joins
    /// (waits for the first assignment); rebalances go to `events`.
    ///
    /// # Errors
    /// Connection failures, INVALID_NAME, ...
    pub(crate) async fn start(
        cfg: GroupConsumerBuilder,
        addr: &str,
        events: async_channel::Sender<RebalanceEvent>,
    ) -> Result<FlumeGroup> {
        let client = Arc::new(Client::connect(addr, cfg.connection.clone()).await?);
        let shared = Arc::new(Shared::new("", -1, cfg.heartbeat_wait));
        let (stop_tx, stop_rx) = async_channel::bounded::<()>(1);
        let interval = cfg
            .heartbeat_interval
            .unwrap_or(cfg.session_timeout / 3)
            .max(Duration::from_millis(10));
        rt::spawn(heartbeat_loop(
            Arc::clone(&client),
            cfg.group.clone(),
            Arc::clone(&shared),
            interval,
            cfg.session_timeout,
            cfg.heartbeat_wait,
            stop_rx,
        ));
        let join_failures = cfg.join_failures();
        let state = State {
            client,
            heartbeat_interval: interval,
            cfg,
            shared,
            assignment: Vec::new(),
            positions: HashMap::new(),
            processed: BTreeMap::new(),
            committed: BTreeMap::new(),
            last_delivered: None,
            buffer: VecDeque::new(),
            last_commit: Instant::now(),
            events,
            rotation: 0,
            join_failures,
        };
        let state = Arc::new(AsyncMutex::new(state));
        state.lock().await.ensure_joined().await?;
        Ok(FlumeGroup {
            state,
            stop: stop_tx,
        })
    }

    /// The next record (a future that owns what it needs, so the facade can
    /// keep it across polls).
    pub(crate) fn next(&self) -> BoxFuture<'static, Option<Result<ConsumerRecord>>> {
        next_record(Arc::clone(&self.state)).boxed()
    }

    /// The current assignment.
    pub(crate) async fn assignment(&self) -> Vec<TopicPartition> {
        self.state.lock().await.assignment.clone()
    }

    /// The current generation (-1 before the first join).
    pub(crate) async fn generation(&self) -> i32 {
        self.state
            .lock()
            .await
            .shared
            .generation
            .load(Ordering::Acquire)
    }

    /// This member's id.
    pub(crate) async fn member_id(&self) -> String {
        lock_str(&self.state.lock().await.shared.member)
    }

    /// Commits `record.offset + 1` for its partition.
    pub(crate) async fn commit(&self, record: &ConsumerRecord) -> Result<()> {
        let mut st = self.state.lock().await;
        let tp = (record.topic.clone(), record.partition);
        let next = i64::try_from(record.offset).unwrap_or(i64::MAX) + 1;
        st.commit_offsets(vec![(tp, next)]).await
    }

    /// Commits every record handed out so far.
    pub(crate) async fn commit_processed(&self) -> Result<()> {
        let mut st = self.state.lock().await;
        st.mark_last_processed();
        st.commit_pending().await
    }

    /// Commits (auto-commit mode), leaves the group and stops heartbeats.
    pub(crate) async fn close(&self) -> Result<()> {
        let mut st = self.state.lock().await;
        let commit = if st.cfg.auto_commit.is_some() {
            st.mark_last_processed();
            st.commit_pending().await
        } else {
            Ok(())
        };
        let member = lock_str(&st.shared.member);
        if !member.is_empty() {
            let _ = st
                .client
                .call(&LeaveGroupRequest {
                    group: st.cfg.group.clone(),
                    member_id: member,
                })
                .await;
        }
        // The heartbeat task stops first, so it opens no connection again.
        self.stop.close();
        st.client.close().await;
        commit
    }
}

fn lock_str(m: &Mutex<String>) -> String {
    lock(m).clone()
}

fn is_fencing(code: Option<ErrorCode>) -> bool {
    matches!(
        code,
        Some(
            ErrorCode::RebalanceInProgress
                | ErrorCode::IllegalGeneration
                | ErrorCode::UnknownMember
        )
    )
}

/// How long after a GROUP_FETCH ended the heartbeat task waits for the next
/// one before it keeps a heartbeat waiting at the broker instead (an idle
/// consumer asks again within microseconds; a busy one is processing).
const FETCH_GRACE: Duration = Duration::from_millis(100);

/// Heartbeats until `stop`.
///
/// Against a broker that knows HEARTBEAT_WAIT (extension key 16) each
/// heartbeat waits there for up to `interval` and is answered at once when
/// the group starts a rebalance: the consumer learns of it within
/// milliseconds, not at its next heartbeat. A broker without the key
/// answers UNSUPPORTED_API once, and plain HEARTBEATs every `interval`
/// follow.
///
/// While the consumer's fetches are GROUP_FETCHes (extension key 17) they
/// do both jobs: each counts as a heartbeat when it reaches the broker and
/// is answered at once when a rebalance starts, and it waits at most
/// `interval`. The task then sends nothing while one is in flight, nor for
/// [`FETCH_GRACE`] after one ended (an idle consumer sends the next within
/// microseconds), so an idle consumer makes one request per `interval`, not
/// a fetch and a heartbeat. Once the application keeps it from fetching
/// longer than that (it is processing), the task keeps a HEARTBEAT_WAIT
/// waiting as above. A fetch still in flight `due` after it went out (a
/// slow broker) gets a plain HEARTBEAT beside it.
async fn heartbeat_loop(
    client: Arc<Client>,
    group: String,
    shared: Arc<Shared>,
    interval: Duration,
    session: Duration,
    mut waits: bool,
    stop: async_channel::Receiver<()>,
) {
    // Under half the session, and no less than a fetch's longest wait.
    let due = interval
        .saturating_add(interval / 2)
        .min(session / 2)
        .max(interval);
    let grace = FETCH_GRACE.min(interval / 2);
    // Whether to pause `interval` (or until a rejoin) before the next heartbeat.
    let mut pause = false;
    // The membership a heartbeat was last refused for.
    let mut refused: Option<(String, i32)> = None;
    loop {
        let joined = shared.joined.listen();
        let rejoined = refused.as_ref().is_some_and(|(m, g)| {
            !shared.rejoin.load(Ordering::Acquire)
                && (*m != lock_str(&shared.member)
                    || *g != shared.generation.load(Ordering::Acquire))
        });
        if rejoined {
            // Once: the new membership is heartbeated at once, then the pace resumes.
            refused = None;
        }
        let mut overdue = false;
        if waits && shared.fetch_beats.load(Ordering::Acquire) && !rejoined {
            let moved = shared.fetch_moved.listen();
            let wait = if shared.fetching.load(Ordering::Acquire) {
                let quiet = shared.since_sign();
                overdue = quiet >= due;
                due.saturating_sub(quiet)
            } else {
                grace.saturating_sub(shared.since_fetch_ended())
            };
            if !overdue && !wait.is_zero() {
                futures::select! {
                    _ = moved.fuse() => {}
                    _ = rt::sleep(wait).fuse() => {}
                    _ = joined.fuse() => {}
                    _ = stop.recv().fuse() => break,
                }
                continue;
            }
        }
        if pause && !rejoined && !overdue {
            futures::select! {
                _ = rt::sleep(interval).fuse() => {}
                _ = joined.fuse() => {}
                _ = stop.recv().fuse() => break,
            }
            // Looked at again: a fetch may have started meanwhile.
            pause = false;
            continue;
        }
        let member = lock_str(&shared.member);
        let generation = shared.generation.load(Ordering::Acquire);
        // Heartbeats go on while a rebalance waits for this member to rejoin: the
        // session stays alive however long the application takes to come back to
        // `recv` (the rebalance timeout bounds that wait, as in Kafka).
        if member.is_empty() || shared.rejoin.load(Ordering::Acquire) {
            // Waiting would be answered at once (the rejoin is due): pace instead.
            pause = true;
            if member.is_empty() {
                continue;
            }
        } else {
            // Beside a fetch that is overdue, a plain one: the fetch watches for rebalances.
            pause = !waits || overdue;
        }
        let req = HeartbeatRequest {
            group: group.clone(),
            generation,
            member_id: member,
        };
        shared.signed();
        let call = async {
            if pause {
                return client.call(&req).await.map(|_| ());
            }
            let wait = HeartbeatWaitRequest {
                group: req.group.clone(),
                generation: req.generation,
                member_id: req.member_id.clone(),
                max_wait_ms: i32::try_from(interval.as_millis()).unwrap_or(i32::MAX),
            };
            client.call_with_extra(&wait, interval).await.map(|_| ())
        };
        let answer = futures::select! {
            r = call.fuse() => r,
            _ = stop.recv().fuse() => break,
        };
        if let Err(e) = answer {
            if !pause && e.code() == Some(ErrorCode::UnsupportedApi) {
                tracing::debug!("the broker has no HEARTBEAT_WAIT; plain heartbeats");
                waits = false;
                pause = false;
                continue;
            }
            shared.fenced(&req.member_id, req.generation, &e);
            refused = Some((req.member_id, req.generation));
            pause = true;
        }
    }
    client.close().await;
}

async fn next_record(state: Arc<AsyncMutex<State>>) -> Option<Result<ConsumerRecord>> {
    let mut st = state.lock().await;
    st.mark_last_processed();
    loop {
        if let Err(e) = st.ensure_joined().await {
            return Some(Err(e));
        }
        if let Err(e) = st.maybe_auto_commit().await
            && !is_fencing(e.code())
        {
            return Some(Err(e));
        }
        if let Some(r) = st.buffer.pop_front() {
            st.last_delivered = Some((
                (r.topic.clone(), r.partition),
                i64::try_from(r.offset).unwrap_or(i64::MAX),
            ));
            return Some(Ok(r));
        }
        if let Err(e) = st.fetch().await {
            if e.is_retriable() {
                // The broker may be restarting: back off a little, then rejoin and go on.
                rt::sleep(Duration::from_millis(100)).await;
                st.shared.rejoin.store(true, Ordering::Release);
                continue;
            }
            return Some(Err(e));
        }
    }
}

impl State {
    fn mark_last_processed(&mut self) {
        if let Some((tp, off)) = self.last_delivered.take()
            && self.assignment.contains(&tp)
        {
            self.processed.insert(tp, off + 1);
        }
    }

    fn emit(&self, ev: RebalanceEvent) {
        if let Err(async_channel::TrySendError::Full(ev)) = self.events.try_send(ev) {
            tracing::debug!(
                ?ev,
                "rebalance event dropped: nobody reads the event channel"
            );
        }
    }

    async fn ensure_joined(&mut self) -> Result<()> {
        while self.shared.rejoin.load(Ordering::Acquire) {
            // Revoke: commit what was processed, drop what was fetched.
            if !self.assignment.is_empty() {
                if (self.cfg.auto_commit.is_some() || self.cfg.commit_on_revoke)
                    && let Err(e) = self.commit_pending().await
                {
                    tracing::debug!(error = %e, "commit before rejoin failed");
                }
                let revoked = std::mem::take(&mut self.assignment);
                self.emit(RebalanceEvent::Revoked(revoked));
            }
            self.buffer.clear();
            self.positions.clear();
            self.processed.clear();
            self.last_delivered = None;
            let req = JoinGroupRequest {
                group: self.cfg.group.clone(),
                member_id: lock_str(&self.shared.member),
                session_timeout_ms: i32::try_from(self.cfg.session_timeout.as_millis())
                    .unwrap_or(i32::MAX),
                rebalance_timeout_ms: i32::try_from(self.cfg.rebalance_timeout.as_millis())
                    .unwrap_or(i32::MAX),
                assignor: self.cfg.assignor.clone(),
                topics: self.cfg.topics.clone(),
            };
            let resp = match self
                .client
                .call_with_extra(&req, self.cfg.rebalance_timeout)
                .await
            {
                Ok(r) => r,
                Err(e) if e.code() == Some(ErrorCode::UnknownMember) => {
                    lock(&self.shared.member).clear();
                    continue;
                }
                Err(e) if e.code() == Some(ErrorCode::RebalanceInProgress) => {
                    rt::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                Err(e) if e.is_retriable() => {
                    let broker = self.client.addr().to_owned();
                    join_failures::after_failure(
                        &mut self.join_failures,
                        &self.cfg.group,
                        &broker,
                        e,
                    )
                    .await?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            self.join_failures.succeeded();
            {
                // Both under the member lock, so a heartbeat answer sees them change together.
                let mut member = lock(&self.shared.member);
                resp.member_id.clone_into(&mut member);
                self.shared
                    .generation
                    .store(resp.generation, Ordering::Release);
            }
            self.assignment = resp
                .assignment
                .iter()
                .flat_map(|t| t.partitions.iter().map(move |p| (t.topic.clone(), *p)))
                .collect();
            self.shared.rejoin.store(false, Ordering::Release);
            // The join counted as a heartbeat: the task waits its grace time
            // for the first fetch, as after a fetch.
            self.shared
                .fetch_ended_us
                .store(self.shared.now_us(), Ordering::Release);
            self.shared.joined.notify(usize::MAX);
            tracing::debug!(generation = resp.generation, member = %resp.member_id, assignment = ?self.assignment, "joined group");
            if let Err(e) = self.load_positions().await {
                if is_fencing(e.code()) || e.is_retriable() {
                    self.shared.rejoin.store(true, Ordering::Release);
                    continue;
                }
                return Err(e);
            }
            self.emit(RebalanceEvent::Assigned {
                generation: resp.generation,
                partitions: self.assignment.clone(),
            });
        }
        Ok(())
    }

    async fn load_positions(&mut self) -> Result<()> {
        let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for (t, p) in &self.assignment {
            topics.entry(t.clone()).or_default().push(*p);
        }
        if topics.is_empty() {
            return Ok(());
        }
        let req = OffsetFetchRequest {
            group: self.cfg.group.clone(),
            topics: topics
                .into_iter()
                .map(|(topic, partitions)| TopicPartitions { topic, partitions })
                .collect(),
        };
        let resp = self.client.call(&req).await?;
        for p in resp.partitions {
            if !p.error.is_ok() {
                continue;
            }
            let pos = if p.committed >= 0 {
                p.committed.max(p.log_start)
            } else {
                match self.cfg.start {
                    StartOffset::Latest => p.log_end,
                    StartOffset::Earliest => p.log_start,
                    StartOffset::At(o) => i64::try_from(o).unwrap_or(0),
                }
            };
            self.committed
                .insert((p.topic.clone(), p.partition), p.committed);
            self.positions.insert((p.topic, p.partition), pos);
        }
        Ok(())
    }

    async fn fetch(&mut self) -> Result<()> {
        // Listening before the flag is read: a rebalance the heartbeat task
        // learns of from here on ends the wait below.
        let rebalance = self.shared.rebalance.listen();
        if self.shared.rejoin.load(Ordering::Acquire) {
            return Ok(());
        }
        let fetch_beats = self.shared.fetch_beats.load(Ordering::Acquire);
        if self.assignment.is_empty() && !fetch_beats {
            // Nothing assigned: wait for a rebalance to give us something.
            futures::select! {
                () = rt::sleep(self.cfg.fetch.max_wait.min(Duration::from_millis(200))).fuse() => {}
                () = rebalance.fuse() => {}
            }
            return Ok(());
        }
        let mut partitions: Vec<FetchPartition> = self
            .assignment
            .iter()
            .filter_map(|tp| {
                self.positions.get(tp).map(|o| FetchPartition {
                    topic: tp.0.clone(),
                    partition: tp.1,
                    offset: *o,
                    max_bytes: self.cfg.fetch.partition_max_bytes,
                })
            })
            .collect();
        // The broker fills partitions in request order until the fetch's
        // `max_bytes` is used up: start each fetch one partition further on, so
        // busy partitions listed first cannot starve the others.
        if !partitions.is_empty() {
            let first = self.rotation % partitions.len();
            partitions.rotate_left(first);
            self.rotation = self.rotation.wrapping_add(1);
        }
        let mut max_wait = self.cfg.fetch.max_wait;
        if fetch_beats {
            // The fetch is this member's heartbeat: one at least every interval.
            // With nothing assigned it only waits for a rebalance: a whole interval.
            max_wait = if partitions.is_empty() {
                self.heartbeat_interval
            } else {
                max_wait.min(self.heartbeat_interval)
            };
        }
        let req = FetchRequest {
            max_wait_ms: i32::try_from(max_wait.as_millis()).unwrap_or(i32::MAX),
            min_bytes: 1,
            max_bytes: self.cfg.fetch.max_bytes,
            partitions,
        };
        let conn = self.client.connection().await?;
        // Once written, the fetch may be abandoned: its answer is discarded.
        let resp = if fetch_beats {
            let req = GroupFetchRequest {
                group: self.cfg.group.clone(),
                generation: self.shared.generation.load(Ordering::Acquire),
                member_id: lock_str(&self.shared.member),
                fetch: req,
            };
            let answer = conn.start_call(&req, max_wait).await?;
            let _fetching = self.shared.group_fetch_started();
            let r = futures::select! {
                r = answer.fuse() => r,
                () = rebalance.fuse() => return Ok(()),
            };
            match r {
                Ok(resp) => resp,
                Err(e) if e.code() == Some(ErrorCode::UnsupportedApi) => {
                    tracing::debug!("the broker has no GROUP_FETCH; fetches and heartbeats");
                    self.shared.fetch_beats.store(false, Ordering::Release);
                    // The heartbeat task takes up its own pace.
                    self.shared.joined.notify(usize::MAX);
                    return Ok(());
                }
                Err(e) if is_fencing(e.code()) => {
                    self.shared.fenced(&req.member_id, req.generation, &e);
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        } else {
            let answer = conn.start_call(&req, max_wait).await?;
            futures::select! {
                r = answer.fuse() => r?,
                () = rebalance.fuse() => return Ok(()),
            }
        };
        if self.shared.rejoin.load(Ordering::Acquire) {
            // A rebalance began while we waited: what we fetched may not be ours any more.
            return Ok(());
        }
        for p in resp.partitions {
            let tp = (p.topic.clone(), p.partition);
            match p.error {
                ErrorCode::None => {}
                ErrorCode::OffsetOutOfRange => {
                    let reset = if self.cfg.start == StartOffset::Latest {
                        p.high_watermark
                    } else {
                        p.log_start
                    };
                    tracing::warn!(topic = %p.topic, partition = p.partition, reset, "offset out of range; resetting");
                    if reset >= 0 {
                        self.positions.insert(tp, reset);
                    }
                    continue;
                }
                code => return Err(Error::broker(code, format!("{}/{}", p.topic, p.partition))),
            }
            let from = self.positions.get(&tp).copied().unwrap_or(0);
            let records = record::decode_all(&p.records)?;
            for r in records {
                if i64::try_from(r.offset).unwrap_or(i64::MAX) < from {
                    continue;
                }
                self.positions
                    .insert(tp.clone(), i64::try_from(r.offset).unwrap_or(i64::MAX) + 1);
                self.buffer.push_back(ConsumerRecord {
                    topic: p.topic.clone(),
                    partition: p.partition,
                    record: r,
                });
            }
        }
        Ok(())
    }

    async fn maybe_auto_commit(&mut self) -> Result<()> {
        match self.cfg.auto_commit {
            Some(iv) if self.last_commit.elapsed() >= iv => {
                self.last_commit = Instant::now();
                self.commit_pending().await
            }
            _ => Ok(()),
        }
    }

    async fn commit_pending(&mut self) -> Result<()> {
        let todo: Vec<(TopicPartition, i64)> = self
            .processed
            .iter()
            .filter(|(tp, o)| self.committed.get(*tp).is_none_or(|c| c < *o))
            .map(|(tp, o)| (tp.clone(), *o))
            .collect();
        self.commit_offsets(todo).await
    }

    async fn commit_offsets(&mut self, offsets: Vec<(TopicPartition, i64)>) -> Result<()> {
        if offsets.is_empty() {
            return Ok(());
        }
        let req = OffsetCommitRequest {
            group: self.cfg.group.clone(),
            generation: self.shared.generation.load(Ordering::Acquire),
            member_id: lock_str(&self.shared.member),
            offsets: offsets
                .iter()
                .map(|((topic, partition), offset)| PartitionOffset {
                    topic: topic.clone(),
                    partition: *partition,
                    offset: *offset,
                })
                .collect(),
        };
        match self.client.call(&req).await {
            Ok(resp) => {
                for ((tp, off), r) in offsets.into_iter().zip(resp.results) {
                    if r.error.is_ok() {
                        self.committed.insert(tp, off);
                    } else {
                        return Err(Error::broker(
                            r.error,
                            format!("{}/{}", r.topic, r.partition),
                        ));
                    }
                }
                Ok(())
            }
            Err(e) => {
                if is_fencing(e.code()) {
                    self.shared.rejoin.store(true, Ordering::Release);
                }
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flume_protocol::frame::{self, Decoded};
    use flume_protocol::messages::{Decode, Empty};
    use flume_protocol::{encode_response_frame, ApiKey};
    use futures::io::{AsyncReadExt, AsyncWriteExt};

    /// Reads one request frame from a raw socket: (api key, request id, payload).
    async fn read_frame(s: &mut rt::TcpStream, buf: &mut Vec<u8>) -> (i16, i32, Vec<u8>) {
        loop {
            if let Decoded::Frame(f, used) = frame::decode_request(buf, 1 << 20).unwrap() {
                let out = (f.api_key, f.request_id, f.payload.to_vec());
                buf.drain(..used);
                return out;
            }
            let mut chunk = [0u8; 4096];
            let n = s.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the client closed the connection");
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    async fn answer_unknown_member(s: &mut rt::TcpStream, id: i32) {
        answer_code(s, id, ErrorCode::UnknownMember).await;
    }

    async fn answer_code(s: &mut rt::TcpStream, id: i32, code: ErrorCode) {
        let mut out = Vec::new();
        encode_response_frame::<Empty>(&mut out, id, Err(code));
        s.write_all(&out).await.unwrap();
    }

    /// While fetches are heartbeats the task sends nothing beside one in
    /// flight until it is overdue (then a plain HEARTBEAT), and once none has
    /// been in flight for the grace time it keeps a HEARTBEAT_WAIT waiting.
    #[test]
    fn heartbeats_only_when_no_fetch_is_in_flight() {
        rt::block_on(async {
            let listener = rt::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            let started = Instant::now();
            let shared = Arc::new(Shared::new("m", 1, true));
            let interval = Duration::from_millis(40);
            let fetching = shared.group_fetch_started();
            let (stop_tx, stop_rx) = async_channel::bounded::<()>(1);
            let hb = rt::spawn(heartbeat_loop(
                Arc::new(Client::new(&addr, ConnectionConfig::default())),
                "g".into(),
                Arc::clone(&shared),
                interval,
                Duration::from_secs(10),
                true,
                stop_rx,
            ));
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = Vec::new();
            let (api, id, payload) = read_frame(&mut s, &mut buf).await;
            assert_eq!(api, ApiKey::Heartbeat as i16, "a plain heartbeat");
            assert!(
                started.elapsed() >= interval + interval / 2,
                "not before the fetch in flight is overdue"
            );
            let sent = HeartbeatRequest::decode_exact(&payload).unwrap();
            assert_eq!((sent.member_id.as_str(), sent.generation), ("m", 1));
            answer_code(&mut s, id, ErrorCode::None).await;
            // The fetch ends and no other follows: a heartbeat waits at the broker.
            let ended = Instant::now();
            drop(fetching);
            let (api, _, _) = rt::timeout(Duration::from_secs(5), read_frame(&mut s, &mut buf))
                .await
                .expect("a heartbeat that waits");
            assert_eq!(api, ApiKey::HeartbeatWait as i16);
            assert!(ended.elapsed() >= interval / 2, "not within the grace time");
            drop(stop_tx);
            hb.cancel().await;
        });
    }

    /// The race of the heartbeat task with a rejoin, driven step by step
    /// through a raw broker: a heartbeat leaves with member "old", a rejoin
    /// obtains "new" while it is in flight, then UNKNOWN_MEMBER comes back for
    /// "old". The new id must survive (the next heartbeat carries it) and no
    /// rejoin is asked for; an UNKNOWN_MEMBER about "new" itself then clears it.
    #[test]
    fn stale_heartbeat_answer_keeps_the_id_a_rejoin_obtained() {
        rt::block_on(async {
            let listener = rt::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            // Fetches that are heartbeats off: this is about HEARTBEAT_WAIT.
            let shared = Arc::new(Shared::new("old", 1, false));
            let (stop_tx, stop_rx) = async_channel::bounded::<()>(1);
            let hb = rt::spawn(heartbeat_loop(
                Arc::new(Client::new(&addr, ConnectionConfig::default())),
                "g".into(),
                Arc::clone(&shared),
                Duration::from_millis(10),
                Duration::from_secs(10),
                true,
                stop_rx,
            ));
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = Vec::new();
            // A broker without HEARTBEAT_WAIT: plain heartbeats follow.
            let (api, id, _) = read_frame(&mut s, &mut buf).await;
            assert_eq!(api, ApiKey::HeartbeatWait as i16);
            answer_code(&mut s, id, ErrorCode::UnsupportedApi).await;
            let (api, id, payload) = read_frame(&mut s, &mut buf).await;
            assert_eq!(api, ApiKey::Heartbeat as i16);
            let sent = HeartbeatRequest::decode_exact(&payload).unwrap();
            assert_eq!((sent.member_id.as_str(), sent.generation), ("old", 1));
            {
                let mut m = shared.member.lock().unwrap();
                "new".clone_into(&mut m);
                shared.generation.store(2, Ordering::Release);
            }
            answer_unknown_member(&mut s, id).await;
            let (_, id, payload) =
                rt::timeout(Duration::from_secs(1), read_frame(&mut s, &mut buf))
                    .await
                    .expect("another heartbeat, with the id the rejoin obtained");
            let next = HeartbeatRequest::decode_exact(&payload).unwrap();
            assert_eq!((next.member_id.as_str(), next.generation), ("new", 2));
            assert_eq!(lock_str(&shared.member), "new");
            assert!(!shared.rejoin.load(Ordering::Acquire));
            // An answer about the current membership is acted on.
            answer_unknown_member(&mut s, id).await;
            let deadline = Instant::now() + Duration::from_secs(1);
            while !shared.rejoin.load(Ordering::Acquire) {
                assert!(Instant::now() < deadline, "the heartbeat asks for a rejoin");
                rt::sleep(Duration::from_millis(5)).await;
            }
            assert_eq!(lock_str(&shared.member), "");
            drop(stop_tx);
            hb.cancel().await;
        });
    }
}

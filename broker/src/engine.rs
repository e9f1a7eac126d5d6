//! The engine both front ends share: topics and partitions, produce with
//! routing, long-poll fetch, the group coordinator and committed offsets.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::budget::{Charge, MemoryBudget};
use crate::config::fetch_wait;
use crate::group::GroupLimits;

use flume_protocol::messages::encode_fetch_partition;
use flume_protocol::record::{self, RecordError, RecordIter};
use flume_protocol::wire::WriteExt;
use flume_protocol::{
    partition_for_key, CreateTopicRequest, ErrorCode, FetchRequest, JoinGroupRequest,
    JoinGroupResponse, MetadataResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetFetchPartition, OffsetFetchRequest, OffsetFetchResponse, PartitionError,
    PartitionMetadata, ProduceEntry, ProduceResult, Span, TopicMetadata,
};
use flume_rt as rt;
use futures::channel::oneshot;
use futures::FutureExt;

use crate::config::{valid_name, BrokerConfig, TopicConfig};
use crate::error::BrokerError;
use crate::group::{Assignor, Coordinator, JoinParams, Ready};
use crate::metrics::{FetchTally, GroupSummary, Metrics};
use crate::offsets::{NotQueued, Offsets};
use crate::partition::{Admission, Partition};
use crate::storage::{DataDirLock, FsyncPolicy, Log};

type JoinReply = oneshot::Sender<Result<JoinGroupResponse, ErrorCode>>;

/// Most bytes a waiting FETCH reads at once to count what has arrived; the
/// chunk is dropped as soon as it is counted.
pub const COUNT_CHUNK_BYTES: usize = 1 << 20;

/// The fewest bytes a stored record takes (header and empty payload).
const MIN_STORED_RECORD: usize = record::RECORD_HEADER_LEN + record::MIN_PAYLOAD_LEN;

/// The budgets a FETCH served over the network is charged to.
#[derive(Debug, Clone, Copy)]
pub struct FetchMemory<'a> {
    /// The connection's share of the broker's budget: the response's records.
    pub response: &'a Arc<MemoryBudget>,
    /// A small broker-wide budget for the chunks waiting fetches read to count
    /// the bytes that arrived (see [`Engine::fetch_within`]).
    pub counting: &'a Arc<MemoryBudget>,
}

/// A topic and its partitions.
#[derive(Debug)]
pub struct Topic {
    /// Name.
    pub name: String,
    /// Settings.
    pub config: TopicConfig,
    /// Partitions, by number.
    pub partitions: Vec<Arc<Partition>>,
    sticky: AtomicU32,
}

impl Topic {
    /// A partition by its wire number.
    pub fn partition(&self, p: i32) -> Option<&Arc<Partition>> {
        usize::try_from(p).ok().and_then(|p| self.partitions.get(p))
    }
}

/// The engine.
#[derive(Debug)]
pub struct Engine {
    config: BrokerConfig,
    topics: RwLock<BTreeMap<String, Arc<Topic>>>,
    /// Held across a topic's creation, including its file work on the blocking pool.
    create_lock: futures::lock::Mutex<()>,
    groups: Mutex<Coordinator<JoinReply>>,
    offsets: Offsets,
    shutdown_tx: async_channel::Sender<()>,
    shutdown_rx: async_channel::Receiver<()>,
    ticker: Mutex<Option<rt::Task<()>>>,
    /// The exclusive hold of the data directory, released at shutdown or drop.
    data_lock: Mutex<Option<DataDirLock>>,
    /// Request counters and latencies (see [`crate::metrics`]).
    metrics: Arc<Metrics>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A produce entry admitted to its partition queues, waiting for acknowledgements.
#[derive(Debug)]
pub struct PendingProduce {
    topic: String,
    partition: i32,
    error: ErrorCode,
    waits: Vec<(u32, u32, Admission)>,
    record_partitions: Vec<i32>,
}

impl PendingProduce {
    fn failed(entry_topic: &str, partition: i32, error: ErrorCode) -> Self {
        PendingProduce {
            topic: entry_topic.to_owned(),
            partition,
            error,
            waits: Vec::new(),
            record_partitions: Vec::new(),
        }
    }

    /// Waits for every partition writer and builds the result. A routed entry
    /// is appended partition by partition: when one partition fails the others
    /// may still be stored, so `spans` lists exactly the partitions appended and
    /// `record_partitions` is kept, telling which records those are.
    pub async fn finish(self) -> ProduceResult {
        let mut error = self.error;
        let mut spans = Vec::with_capacity(self.waits.len());
        for (p, count, rx) in self.waits {
            match rx.wait().await {
                Ok(base) => spans.push(Span {
                    partition: i32::try_from(p).unwrap_or(i32::MAX),
                    base_offset: i64::try_from(base).unwrap_or(i64::MAX),
                    count: i32::try_from(count).unwrap_or(i32::MAX),
                }),
                Err(e) => error = e,
            }
        }
        ProduceResult {
            topic: self.topic,
            partition: self.partition,
            error,
            spans,
            record_partitions: self.record_partitions,
        }
    }
}

impl Engine {
    /// Opens the data directory: locks it (see [`crate::storage::dirs`]),
    /// loads every topic (recovering its logs) and the committed offsets, and
    /// starts the maintenance ticker.
    ///
    /// # Errors
    /// Invalid settings, a directory another broker holds
    /// ([`crate::storage::StorageError::DataDirLocked`]) or that is not a
    /// Flume data directory ([`crate::storage::StorageError::ForeignDataDir`]),
    /// or storage that cannot be opened.
    pub fn open(config: BrokerConfig) -> Result<Arc<Self>, BrokerError> {
        config.validate()?;
        let dir = &config.data_dir;
        let data_lock = DataDirLock::acquire(dir, config.allow_foreign_data_dir)?;
        let mut topics = BTreeMap::new();
        let entries = std::fs::read_dir(dir).map_err(|source| BrokerError::Io {
            what: format!("list {}", dir.display()),
            source,
        })?;
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if !path.is_dir() || !valid_name(&name) {
                continue;
            }
            let conf_path = TopicConfig::path(&path);
            let text = match std::fs::read_to_string(&conf_path) {
                Ok(t) => t,
                Err(_) => {
                    tracing::warn!(dir = %path.display(), "directory without topic.conf; not a topic, skipped");
                    continue;
                }
            };
            let tc = TopicConfig::from_text(&text)
                .map_err(|e| BrokerError::Config(format!("{}: {e}", conf_path.display())))?;
            let topic = Self::open_topic(&config, &name, tc)?;
            topics.insert(name, Arc::new(topic));
        }
        let offsets = Offsets::open(&dir.join("__consumer_offsets"), config.fsync)?;
        let nonce = u64::try_from(crate::now_ms()).unwrap_or(0);
        let (shutdown_tx, shutdown_rx) = async_channel::bounded(1);
        let engine = Arc::new(Engine {
            config,
            topics: RwLock::new(topics),
            create_lock: futures::lock::Mutex::new(()),
            groups: Mutex::new(Coordinator::new(nonce)),
            offsets,
            shutdown_tx,
            shutdown_rx,
            ticker: Mutex::new(None),
            data_lock: Mutex::new(Some(data_lock)),
            metrics: Arc::new(Metrics::default()),
        });
        let weak = Arc::downgrade(&engine);
        let tick = engine.config.tick;
        let stop = engine.shutdown_rx.clone();
        let every = engine.config.maintenance_interval;
        let task = rt::spawn(async move {
            let mut last_maintained = Instant::now();
            loop {
                let stopped = futures::select! {
                    _ = rt::sleep(tick).fuse() => false,
                    _ = stop.recv().fuse() => true,
                };
                let Some(engine) = weak.upgrade() else { break };
                if stopped {
                    break;
                }
                engine.tick_groups();
                if last_maintained.elapsed() >= every || engine.config.fsync != FsyncPolicy::Never {
                    last_maintained = Instant::now();
                    engine.maintain().await;
                }
            }
        });
        *lock(&engine.ticker) = Some(task);
        Ok(engine)
    }

    fn open_topic(
        config: &BrokerConfig,
        name: &str,
        tc: TopicConfig,
    ) -> Result<Topic, BrokerError> {
        let dir = config.data_dir.join(name);
        let mut partitions = Vec::with_capacity(tc.partitions as usize);
        for p in 0..tc.partitions {
            let log = Log::open(&dir.join(format!("partition-{p}")), tc.log_config(config))?;
            partitions.push(Arc::new(Partition::start(
                name,
                p,
                log,
                tc.max_pending,
                tc.backpressure,
                config.writer_batch_bytes,
            )));
        }
        Ok(Topic {
            name: name.to_owned(),
            config: tc,
            partitions,
            sticky: AtomicU32::new(0),
        })
    }

    /// The settings.
    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    /// The coordinator's time, from the configured [`crate::Clock`].
    fn mono_ms(&self) -> u64 {
        self.config.clock.mono_ms()
    }

    /// Runs one maintenance pass now, as the ticker does: expires silent
    /// group members and completes rebalances past their deadline by the
    /// configured clock, then retention and the interval fsync. With a
    /// [`crate::Clock::manual`] clock a test advances the clock and calls
    /// this instead of waiting for the ticker.
    pub async fn tick_now(&self) {
        self.tick_groups();
        self.maintain().await;
    }

    /// How many members a group has, counting those whose join is parked
    /// waiting for a rebalance; `None` if the group does not exist.
    pub fn group_members(&self, group: &str) -> Option<usize> {
        lock(&self.groups)
            .state(group)
            .map(|(_, _, members)| members)
    }

    /// When the coordinator last heard from a member (join or heartbeat), in
    /// the clock's [`crate::Clock::mono_ms`]; `None` if it is not a member.
    /// Lets a test on a manual clock wait until a live member has heartbeated
    /// before moving the clock again.
    pub fn member_last_seen(&self, group: &str, member: &str) -> Option<u64> {
        lock(&self.groups).last_seen(group, member)
    }

    /// A receiver that fails (wakes) when shutdown begins.
    pub fn shutdown_signal(&self) -> async_channel::Receiver<()> {
        self.shutdown_rx.clone()
    }

    /// True once shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.shutdown_tx.is_closed()
    }

    /// A topic, if it exists.
    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    /// Every topic, sorted by name.
    pub fn topics(&self) -> Vec<Arc<Topic>> {
        self.topics
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// Creates a topic with the given settings (blocking; see [`Engine::create_topic_async`]).
    ///
    /// # Errors
    /// INVALID_NAME, INVALID_REQUEST, TOPIC_ALREADY_EXISTS, or storage errors.
    pub fn create_topic(&self, name: &str, tc: TopicConfig) -> Result<Arc<Topic>, BrokerError> {
        rt::block_on(self.create_topic_async(name, tc))
    }

    /// Creates a topic with the given settings. The file work (directory,
    /// `topic.conf`, partition logs) runs on the blocking pool.
    ///
    /// # Errors
    /// INVALID_NAME, INVALID_REQUEST (a setting out of range), LIMIT_REACHED
    /// (`max_partitions`), TOPIC_ALREADY_EXISTS, or storage errors.
    pub async fn create_topic_async(
        &self,
        name: &str,
        tc: TopicConfig,
    ) -> Result<Arc<Topic>, BrokerError> {
        if !valid_name(name) {
            return Err(BrokerError::code_for(
                ErrorCode::InvalidName,
                format!("topic name {name:?}"),
            ));
        }
        if let Err(e) = tc.check() {
            return Err(BrokerError::code_for(ErrorCode::InvalidRequest, e));
        }
        let _guard = self.create_lock.lock().await;
        if self.topic(name).is_some() {
            return Err(BrokerError::code_for(ErrorCode::TopicAlreadyExists, name));
        }
        // A broker-wide limit, so a peer cannot create its way to exhaustion.
        let existing: u64 = self
            .topics()
            .iter()
            .map(|t| t.partitions.len() as u64)
            .sum();
        self.config
            .check_partition_limit(name, existing, tc.partitions)?;
        let config = self.config.clone();
        let owned = name.to_owned();
        let topic = rt::unblock(move || {
            #[cfg(test)]
            lock(&FILE_WORK_THREADS).push((owned.clone(), std::thread::current().id()));
            let dir = config.data_dir.join(&owned);
            crate::storage::create_dir_durable(&dir)?;
            write_atomic(&TopicConfig::path(&dir), tc.to_text().as_bytes())?;
            Self::open_topic(&config, &owned, tc)
        })
        .await?;
        let topic = Arc::new(topic);
        tracing::info!(
            topic = name,
            partitions = topic.partitions.len(),
            "topic created"
        );
        self.topics
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(name.to_owned(), Arc::clone(&topic));
        Ok(topic)
    }

    /// Creates a topic from a CREATE_TOPIC request: -1 in a field takes the
    /// broker default, any other value must be in the field's documented range.
    ///
    /// # Errors
    /// INVALID_REQUEST naming the field, its value and its range; otherwise as
    /// [`Engine::create_topic`].
    pub fn create_topic_request(
        &self,
        req: &CreateTopicRequest,
    ) -> Result<Arc<Topic>, BrokerError> {
        let tc = TopicConfig::from_request(&self.config.default_topic, req).map_err(|e| {
            tracing::debug!(topic = %req.name, error = %e, "CREATE_TOPIC refused");
            BrokerError::code_for(ErrorCode::InvalidRequest, e)
        })?;
        self.create_topic(&req.name, tc)
    }

    /// The topic, created with the defaults if auto-create is on (blocking:
    /// for callers off the executor; async paths use [`Engine::auto_create`]).
    ///
    /// # Errors
    /// UNKNOWN_TOPIC (auto-create off), INVALID_NAME, storage errors.
    pub fn topic_or_create(&self, name: &str) -> Result<Arc<Topic>, BrokerError> {
        rt::block_on(self.auto_create(name))
    }

    /// The topic, created with the defaults (file work on the blocking pool)
    /// if auto-create is on.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC (auto-create off), INVALID_NAME, storage errors.
    pub async fn auto_create(&self, name: &str) -> Result<Arc<Topic>, BrokerError> {
        if let Some(t) = self.topic(name) {
            return Ok(t);
        }
        if !self.config.auto_create_topics {
            return Err(BrokerError::code_for(ErrorCode::UnknownTopic, name));
        }
        match self
            .create_topic_async(name, self.config.default_topic.clone())
            .await
        {
            Err(BrokerError::Code {
                code: ErrorCode::TopicAlreadyExists,
                ..
            }) => self
                .topic(name)
                .ok_or_else(|| ErrorCode::UnknownTopic.into()),
            other => other,
        }
    }

    fn partitions_of(&self, topic: &str) -> u32 {
        self.topic(topic)
            .map_or(0, |t| u32::try_from(t.partitions.len()).unwrap_or(0))
    }

    // ------------------------------------------------------------ produce

    /// Validates a produce entry, routes its records and queues them on their
    /// partitions (waiting for room in block mode). Call [`PendingProduce::finish`]
    /// for the offsets. Queueing happens in call order, so records sent one
    /// after another keep their order.
    pub async fn admit_produce(&self, entry: ProduceEntry) -> PendingProduce {
        let ProduceEntry {
            topic,
            partition,
            records,
        } = entry;
        let fail = |code| PendingProduce::failed(&topic, partition, code);
        if self.is_shutting_down() {
            return fail(ErrorCode::ShuttingDown);
        }
        let t = match self.auto_create(&topic).await {
            Ok(t) => t,
            Err(e) => return fail(e.code()),
        };
        let info = match record::validate_batch(&records, self.config.max_record_bytes as u64) {
            Ok(i) => i,
            Err(RecordError::TooLarge { size, limit, .. }) => {
                tracing::debug!(topic = %topic, size, limit, "RECORD_TOO_LARGE: a record of {size} bytes (16-byte header included) is above max_record_bytes ({limit})");
                return fail(ErrorCode::RecordTooLarge);
            }
            Err(_) => return fail(ErrorCode::CorruptRecord),
        };
        let mut pending = PendingProduce::failed(&topic, partition, ErrorCode::None);
        if partition >= 0 {
            let Some(p) = t.partition(partition) else {
                return fail(ErrorCode::UnknownPartition);
            };
            match p.enqueue(records, info.count, info.max_timestamp).await {
                Ok(rx) => pending.waits.push((p.id, info.count, rx)),
                Err(code) => pending.error = code,
            }
            return pending;
        }
        if partition != -1 {
            return fail(ErrorCode::UnknownPartition);
        }
        // Route: keyed records by FNV-1a, null keys to one partition per entry (sticky).
        let n = u32::try_from(t.partitions.len()).unwrap_or(1);
        let sticky = t.sticky.fetch_add(1, Ordering::Relaxed) % n;
        let mut subs: BTreeMap<u32, (Vec<u8>, u32, i64)> = BTreeMap::new();
        for raw in RecordIter::new(&records).flatten() {
            let p = match raw.key_value() {
                Some((Some(key), _)) => partition_for_key(key, n),
                _ => sticky,
            };
            pending
                .record_partitions
                .push(i32::try_from(p).unwrap_or(i32::MAX));
            let e = subs.entry(p).or_insert_with(|| (Vec::new(), 0, i64::MIN));
            e.0.extend_from_slice(&records[raw.pos..raw.pos + raw.encoded_len()]);
            e.1 += 1;
            e.2 = e.2.max(raw.timestamp());
        }
        for (p, (batch, count, max_ts)) in subs {
            let part = &t.partitions[p as usize];
            match part.enqueue(bytes::Bytes::from(batch), count, max_ts).await {
                Ok(rx) => pending.waits.push((p, count, rx)),
                Err(code) => pending.error = code,
            }
        }
        pending
    }

    // ------------------------------------------------------------ fetch

    /// Serves a FETCH into `out` (the response body), long-polling until
    /// `min_bytes` are available or `max_wait_ms` passes. As
    /// [`Engine::fetch_within`] with no memory budget. Returns the first
    /// partition that failed (its index in the request) and its error.
    pub async fn fetch_into(
        &self,
        req: &FetchRequest,
        out: &mut Vec<u8>,
    ) -> Option<(usize, ErrorCode)> {
        self.fetch_within(req, out, None).await
    }

    /// Serves a FETCH into `out` (the response body).
    ///
    /// While it waits, a fetch holds no records: it counts the bytes that
    /// arrive past each partition's offset (only what lies between the bytes
    /// already counted and the end offset, read in chunks of at most
    /// [`COUNT_CHUNK_BYTES`] that are dropped at once) until `min_bytes` are
    /// there, `max_wait_ms` (capped at [`crate::config::MAX_FETCH_WAIT_MS`]) passes, or the
    /// broker shuts down. `min_bytes` is at least 1 and at most what the
    /// request can ever receive (its `max_bytes` and the partitions' own,
    /// within one frame), so an unreachable `min_bytes` waits no longer than
    /// a reachable one. Only then are the records read into `out`.
    ///
    /// With [`FetchMemory`], counting chunks wait for room in its small
    /// `counting` budget (so waiting fetches never read more than that at once,
    /// and never hold the budget that lets connections read), and the final
    /// read first waits for room in `response` (until the deadline) and charges
    /// each partition's read while the response is built; if no room comes in
    /// time the answer carries one record (the first always goes out whole),
    /// so a spent budget neither keeps a fetch from answering nor a consumer
    /// from moving on. Returns the first partition that failed (its index in
    /// the request) and its error; what was served is counted in the metrics.
    pub async fn fetch_within(
        &self,
        req: &FetchRequest,
        out: &mut Vec<u8>,
        memory: Option<FetchMemory<'_>>,
    ) -> Option<(usize, ErrorCode)> {
        let counting = memory.map(|m| m.counting);
        let memory = memory.map(|m| m.response);
        let max_wait: Duration = fetch_wait(req.max_wait_ms);
        let deadline = Instant::now() + max_wait;
        // The whole response must fit a frame: records, each partition's header, and
        // the one whole record that may go past the budget.
        let headers: usize = req.partitions.iter().map(|p| p.topic.len() + 40).sum();
        let budget = usize::try_from(req.max_bytes.max(1)).unwrap_or(1).min(
            self.config
                .max_frame_bytes
                .saturating_sub(64 * 1024 + headers + self.config.max_record_bytes)
                .max(4096),
        );
        let resolved: Vec<Result<Arc<Partition>, ErrorCode>> = req
            .partitions
            .iter()
            .map(|fp| match self.topic(&fp.topic) {
                None => Err(ErrorCode::UnknownTopic),
                Some(t) => t
                    .partition(fp.partition)
                    .cloned()
                    .ok_or(ErrorCode::UnknownPartition),
            })
            .collect();
        let wants: Vec<usize> = req
            .partitions
            .iter()
            .map(|fp| {
                usize::try_from(fp.max_bytes.max(1))
                    .unwrap_or(1)
                    .min(budget)
            })
            .collect();
        // What the request can ever receive, so an unreachable min_bytes cannot
        // make it wait for more than it could be given.
        let reachable = wants.iter().fold(0usize, |a, w| a.saturating_add(*w));
        let min_bytes = usize::try_from(req.min_bytes.max(1))
            .unwrap_or(1)
            .min(reachable.min(budget))
            .max(1);
        // Per partition: the next offset not yet counted and the bytes counted.
        let mut next: Vec<Option<u64>> = req
            .partitions
            .iter()
            .map(|fp| u64::try_from(fp.offset).ok())
            .collect();
        let mut counted_in = vec![0usize; req.partitions.len()];
        let mut counted = 0usize;
        let mut errors = false;
        loop {
            let listeners: Vec<_> = resolved.iter().flatten().map(|p| p.listen()).collect();
            // Bounds from the end offsets alone: a stored record takes at least
            // MIN_STORED_RECORD bytes and at most max_record_bytes, so the record
            // counts often decide without reading anything.
            let (mut lower, mut upper) = (counted, counted);
            for (i, part) in resolved.iter().enumerate() {
                let (Ok(part), Some(at)) = (part, next[i]) else {
                    errors = true;
                    continue;
                };
                let end = part.end_offset();
                if at < part.start_offset() || at > end {
                    errors = true;
                    continue;
                }
                let records = usize::try_from(end - at).unwrap_or(usize::MAX);
                let room = wants[i].saturating_sub(counted_in[i]);
                lower = lower.saturating_add(records.saturating_mul(MIN_STORED_RECORD).min(room));
                upper = upper.saturating_add(
                    records
                        .saturating_mul(self.config.max_record_bytes)
                        .min(room),
                );
            }
            if !errors && lower < min_bytes && upper >= min_bytes {
                self.count_arrived(
                    &resolved,
                    &wants,
                    min_bytes,
                    deadline,
                    counting,
                    &mut next,
                    &mut counted_in,
                    &mut counted,
                    &mut errors,
                )
                .await;
            }
            let now = Instant::now();
            if counted.max(lower) >= min_bytes
                || errors
                || now >= deadline
                || listeners.is_empty()
                || self.is_shutting_down()
            {
                break;
            }
            let any_data = futures::future::select_all(listeners.into_iter().map(Box::pin));
            futures::select! {
                _ = any_data.fuse() => {}
                _ = rt::sleep(deadline - now).fuse() => {}
                _ = self.shutdown_rx.recv().fuse() => {}
            }
        }
        // Room for the records: the response is charged while it is built. With
        // no room by the deadline, the answer carries one record (the first one
        // always goes out whole), so a consumer still moves on.
        let mut reserved = None;
        let mut budget = budget;
        if let Some(m) = memory {
            if m.is_spent() && !self.is_shutting_down() {
                let left = deadline.saturating_duration_since(Instant::now());
                let _ = rt::timeout(left, m.wait_for_room()).await;
            }
            if m.is_spent() {
                budget = 1;
            }
            reserved = Some(m.charge(headers));
        }
        self.encode_fetch(req, &resolved, budget, reserved.as_mut(), out)
            .await
    }

    /// Counts, by reading, the bytes that arrived past `next` on each partition
    /// until `min_bytes` are counted or every partition is caught up. Each chunk
    /// is dropped once counted; chunks wait for room in `counting`.
    #[allow(clippy::too_many_arguments)]
    async fn count_arrived(
        &self,
        resolved: &[Result<Arc<Partition>, ErrorCode>],
        wants: &[usize],
        min_bytes: usize,
        deadline: Instant,
        counting: Option<&Arc<MemoryBudget>>,
        next: &mut [Option<u64>],
        counted_in: &mut [usize],
        counted: &mut usize,
        errors: &mut bool,
    ) {
        for (i, part) in resolved.iter().enumerate() {
            let (Ok(part), Some(mut at)) = (part, next[i]) else {
                continue;
            };
            while *counted < min_bytes && counted_in[i] < wants[i] && at < part.end_offset() {
                if let Some(c) = counting {
                    if c.is_spent() {
                        let left = deadline.saturating_duration_since(Instant::now());
                        let room = futures::select! {
                            r = rt::timeout(left, c.wait_for_room()).fuse() => r.is_some(),
                            _ = self.shutdown_rx.recv().fuse() => false,
                        };
                        if !room {
                            return;
                        }
                    }
                }
                let chunk = (min_bytes - *counted)
                    .min(wants[i] - counted_in[i])
                    .min(COUNT_CHUNK_BYTES);
                // One record may go past the chunk.
                let _held = counting.map(|c| c.charge(chunk.max(self.config.max_record_bytes)));
                let records = match part.read(at, chunk).await {
                    Ok(r) => r.records,
                    Err(_) => {
                        // The final read reports it.
                        *errors = true;
                        return;
                    }
                };
                // The log checked these records; only their sizes are needed here.
                let (mut n, mut pos) = (0u64, 0usize);
                while let Some((_, size)) = record::peek_header(&records, pos) {
                    pos = pos
                        .saturating_add(record::RECORD_HEADER_LEN)
                        .saturating_add(usize::try_from(size).unwrap_or(usize::MAX));
                    n += 1;
                }
                if n == 0 {
                    break;
                }
                at += n;
                next[i] = Some(at);
                counted_in[i] += records.len();
                *counted += records.len();
            }
            if *counted >= min_bytes {
                return;
            }
        }
    }

    /// Reads each partition once and encodes the response body.
    async fn encode_fetch(
        &self,
        req: &FetchRequest,
        resolved: &[Result<Arc<Partition>, ErrorCode>],
        budget: usize,
        mut reserved: Option<&mut Charge>,
        out: &mut Vec<u8>,
    ) -> Option<(usize, ErrorCode)> {
        out.put_count(req.partitions.len());
        let mut total = 0usize;
        let mut tally = FetchTally::default();
        for (i, (fp, part)) in req.partitions.iter().zip(resolved).enumerate() {
            let part = match part {
                Ok(p) => p,
                Err(code) => {
                    tally.failed(i, *code);
                    encode_fetch_partition(out, &fp.topic, fp.partition, *code, -1, -1, &[]);
                    continue;
                }
            };
            let to_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            let offset = u64::try_from(fp.offset);
            let want = usize::try_from(fp.max_bytes.max(1))
                .unwrap_or(1)
                .min(budget.saturating_sub(total));
            let result = match offset {
                Err(_) => Err(ErrorCode::OffsetOutOfRange),
                Ok(_) if want == 0 => Ok(None),
                Ok(o) => {
                    // Each read is charged for what it may return while it runs, then
                    // for what it did (one record may go past `want`).
                    if let Some(c) = reserved.as_deref_mut() {
                        c.add(want);
                    }
                    let r = part.read(o, want).await;
                    if let Some(c) = reserved.as_deref_mut() {
                        c.shrink_to(c.bytes().saturating_sub(want));
                        c.add(r.as_ref().map_or(0, |r| r.records.len()));
                    }
                    r.map(Some).map_err(|e| e.code())
                }
            };
            match result {
                Ok(Some(r)) => {
                    total += r.records.len();
                    tally.served(part, &r.records);
                    encode_fetch_partition(
                        out,
                        &fp.topic,
                        fp.partition,
                        ErrorCode::None,
                        to_i64(r.log_end),
                        to_i64(r.log_start),
                        &r.records,
                    );
                }
                Ok(None) => encode_fetch_partition(
                    out,
                    &fp.topic,
                    fp.partition,
                    ErrorCode::None,
                    to_i64(part.end_offset()),
                    to_i64(part.start_offset()),
                    &[],
                ),
                Err(code) => {
                    tally.failed(i, code);
                    encode_fetch_partition(
                        out,
                        &fp.topic,
                        fp.partition,
                        code,
                        to_i64(part.end_offset()),
                        to_i64(part.start_offset()),
                        &[],
                    );
                }
            }
        }
        tally.commit()
    }

    // ------------------------------------------------------------ groups

    fn deliver(ready: Vec<Ready<JoinReply>>) {
        for (tx, result) in ready {
            let _ = tx.send(result);
        }
    }

    /// Handles JOIN_GROUP: waits until the rebalance completes.
    ///
    /// # Errors
    /// INVALID_NAME, INVALID_REQUEST, UNKNOWN_MEMBER, SHUTTING_DOWN.
    pub async fn join_group(&self, req: JoinGroupRequest) -> Result<JoinGroupResponse, ErrorCode> {
        if !valid_name(&req.group) {
            return Err(ErrorCode::InvalidName);
        }
        let assignor = Assignor::parse(&req.assignor).ok_or(ErrorCode::InvalidRequest)?;
        let max_topics = self.config.max_topics_per_join;
        if req.topics.len() > max_topics {
            tracing::debug!(
                group = %req.group,
                topics = req.topics.len(),
                "join refused: the topic list is longer than max_topics_per_join ({max_topics})"
            );
            return Err(ErrorCode::InvalidRequest);
        }
        if req.topics.is_empty() {
            return Err(ErrorCode::InvalidRequest);
        }
        for t in &req.topics {
            if let Err(e) = self.auto_create(t).await {
                return Err(e.code());
            }
        }
        let ms = |v: i32, lo: u64, hi: u64| u64::try_from(v).unwrap_or(lo).clamp(lo, hi);
        let params = JoinParams {
            member_id: req.member_id,
            topics: req.topics,
            session_timeout_ms: ms(req.session_timeout_ms, 100, 300_000),
            rebalance_timeout_ms: ms(req.rebalance_timeout_ms, 0, 300_000),
            assignor,
            limits: GroupLimits {
                max_groups: self.config.max_groups,
                max_members: self.config.max_members_per_group,
            },
        };
        let (tx, rx) = oneshot::channel();
        if self.is_shutting_down() {
            return Err(ErrorCode::ShuttingDown);
        }
        let ready = {
            let now = self.mono_ms();
            let mut g = lock(&self.groups);
            g.join(&req.group, params, now, tx, &|t| self.partitions_of(t))
        };
        Self::deliver(ready);
        rx.await.unwrap_or(Err(ErrorCode::ShuttingDown))
    }

    /// Handles HEARTBEAT.
    ///
    /// # Errors
    /// UNKNOWN_MEMBER, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS.
    pub fn heartbeat(&self, group: &str, member: &str, generation: i32) -> Result<(), ErrorCode> {
        let now = self.mono_ms();
        lock(&self.groups).heartbeat(group, member, generation, now)
    }

    /// Handles LEAVE_GROUP.
    ///
    /// # Errors
    /// UNKNOWN_MEMBER.
    pub fn leave_group(&self, group: &str, member: &str) -> Result<(), ErrorCode> {
        let now = self.mono_ms();
        let ready = lock(&self.groups).leave(group, member, now, &|t| self.partitions_of(t))?;
        Self::deliver(ready);
        Ok(())
    }

    fn tick_groups(&self) {
        let now = self.mono_ms();
        let ready = lock(&self.groups).tick(now, &|t| self.partitions_of(t));
        Self::deliver(ready);
    }

    async fn maintain(&self) {
        let now = self.config.clock.wall_ms();
        for t in self.topics() {
            for p in &t.partitions {
                p.maintain(now).await;
            }
        }
        self.offsets.maintain().await;
    }

    // ------------------------------------------------------------ offsets

    /// Handles OFFSET_COMMIT, fenced by member and generation. The fencing
    /// check and the hand-off to the offsets writer happen under the groups
    /// lock, so a rebalance cannot slip between them and commits reach the
    /// file in the order they were checked; the write and its fsync happen
    /// after the lock is released, off the executor. Answers once the commit
    /// is written (and fsynced under `--fsync always`).
    ///
    /// # Errors
    /// UNKNOWN_MEMBER, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, STORAGE_ERROR,
    /// INVALID_REQUEST (offset store full), SHUTTING_DOWN.
    pub async fn commit_offsets(
        &self,
        req: &OffsetCommitRequest,
    ) -> Result<OffsetCommitResponse, ErrorCode> {
        if !valid_name(&req.group) {
            return Err(ErrorCode::InvalidName);
        }
        let mut results = Vec::with_capacity(req.offsets.len());
        let mut store = Vec::with_capacity(req.offsets.len());
        for o in &req.offsets {
            let error = match self.topic(&o.topic) {
                None => ErrorCode::UnknownTopic,
                Some(t) if t.partition(o.partition).is_none() => ErrorCode::UnknownPartition,
                Some(_) if o.offset < 0 => ErrorCode::OffsetOutOfRange,
                Some(_) => {
                    store.push((o.topic.clone(), o.partition, o.offset));
                    ErrorCode::None
                }
            };
            results.push(PartitionError {
                topic: o.topic.clone(),
                partition: o.partition,
                error,
            });
        }
        let rx = loop {
            let room = self.offsets.room();
            let queued = {
                let groups = lock(&self.groups);
                groups.check_commit(&req.group, &req.member_id, req.generation)?;
                if store.is_empty() {
                    return Ok(OffsetCommitResponse { results });
                }
                self.offsets.try_queue(&req.group, store)
            };
            match queued {
                Ok(rx) => break rx,
                // The queue is full: wait for the writer, then check the fencing again.
                Err(NotQueued::Full(back)) => {
                    store = back;
                    room.await;
                }
                Err(NotQueued::Closed) => return Err(ErrorCode::ShuttingDown),
            }
        };
        if let Err(e) = crate::offsets::finish(rx).await {
            tracing::error!(group = %req.group, error = %e, "offset commit failed");
            return Err(e.code());
        }
        Ok(OffsetCommitResponse { results })
    }

    /// Stores offsets outside group membership (embedded mode), on the calling thread.
    ///
    /// # Errors
    /// Storage errors.
    pub fn store_offsets(
        &self,
        group: &str,
        offsets: &[(String, i32, i64)],
    ) -> Result<(), BrokerError> {
        self.offsets.commit_now(group, offsets)
    }

    /// The committed offset of one partition, if any.
    pub fn committed(&self, group: &str, topic: &str, partition: i32) -> Option<i64> {
        self.offsets.get(group, topic, partition)
    }

    /// The committed offsets (tests, observability).
    pub fn offsets(&self) -> &Offsets {
        &self.offsets
    }

    /// Handles OFFSET_FETCH: committed offset, log start and log end per partition.
    pub fn offset_fetch(&self, req: &OffsetFetchRequest) -> OffsetFetchResponse {
        let mut partitions = Vec::new();
        let store = &self.offsets;
        for tp in &req.topics {
            let Some(t) = self.topic(&tp.topic) else {
                partitions.push(OffsetFetchPartition {
                    topic: tp.topic.clone(),
                    partition: -1,
                    error: ErrorCode::UnknownTopic,
                    committed: -1,
                    log_start: -1,
                    log_end: -1,
                });
                continue;
            };
            let list: Vec<i32> = if tp.partitions.is_empty() {
                (0..t.partitions.len())
                    .filter_map(|p| i32::try_from(p).ok())
                    .collect()
            } else {
                tp.partitions.clone()
            };
            for p in list {
                let (error, start, end) = match t.partition(p) {
                    Some(part) => (ErrorCode::None, part.start_offset(), part.end_offset()),
                    None => (ErrorCode::UnknownPartition, 0, 0),
                };
                partitions.push(OffsetFetchPartition {
                    topic: tp.topic.clone(),
                    partition: p,
                    error,
                    committed: store.get(&req.group, &tp.topic, p).unwrap_or(-1),
                    log_start: i64::try_from(start).unwrap_or(i64::MAX),
                    log_end: i64::try_from(end).unwrap_or(i64::MAX),
                });
            }
        }
        OffsetFetchResponse { partitions }
    }

    /// Handles METADATA: every topic (or those named) with partition offsets.
    pub fn metadata(&self, names: &[String]) -> MetadataResponse {
        let describe = |t: &Topic| TopicMetadata {
            name: t.name.clone(),
            error: ErrorCode::None,
            partitions: t
                .partitions
                .iter()
                .map(|p| PartitionMetadata {
                    partition: i32::try_from(p.id).unwrap_or(i32::MAX),
                    log_start: i64::try_from(p.start_offset()).unwrap_or(i64::MAX),
                    log_end: i64::try_from(p.end_offset()).unwrap_or(i64::MAX),
                })
                .collect(),
        };
        let topics = if names.is_empty() {
            self.topics().iter().map(|t| describe(t)).collect()
        } else {
            names
                .iter()
                .map(|n| match self.topic(n) {
                    Some(t) => describe(&t),
                    None => TopicMetadata {
                        name: n.clone(),
                        error: ErrorCode::UnknownTopic,
                        partitions: Vec::new(),
                    },
                })
                .collect()
        };
        MetadataResponse { topics }
    }

    // ------------------------------------------------------------ shutdown

    /// Signals shutdown: long polls return, parked joins get SHUTTING_DOWN,
    /// new produce requests are refused. Queues keep draining. Idempotent.
    pub fn begin_shutdown(&self) {
        self.shutdown_tx.close();
        let ready = lock(&self.groups).drain(ErrorCode::ShuttingDown);
        Self::deliver(ready);
    }

    /// Stops the engine: wakes long polls and parked joins, drains every
    /// partition queue to disk, fsyncs logs and offsets. Idempotent.
    pub async fn shutdown(&self) {
        self.begin_shutdown();
        let ticker = lock(&self.ticker).take();
        if let Some(t) = ticker {
            t.await;
        }
        for t in self.topics() {
            for p in &t.partitions {
                p.shutdown().await;
            }
        }
        if self.config.fsync == crate::storage::FsyncPolicy::Never {
            // The partitions skipped their own fsync under `never`: one syncfs for all.
            let dir = self.config.data_dir.clone();
            if let Err(e) = rt::unblock(move || crate::storage::dirs::sync_filesystem(&dir)).await {
                tracing::error!(error = %e, "flushing the data directory at shutdown failed");
            }
        }
        self.offsets.shutdown().await;
        // Everything is on disk: another broker (or a reopen in this process) may take over.
        drop(lock(&self.data_lock).take());
    }

    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.config.data_dir.clone()
    }

    /// Request counters and latencies.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Every group's state, generation, members and rebalances.
    pub fn group_summaries(&self) -> Vec<GroupSummary> {
        lock(&self.groups).summaries()
    }

    /// Up to `limit` committed offsets: ((group, topic, partition), offset).
    pub fn committed_offsets(&self, limit: usize) -> Vec<(crate::offsets::OffsetKey, i64)> {
        self.offsets.entries(limit)
    }
}

/// Test-only: the thread each topic's creation did its file work on.
#[cfg(test)]
pub(crate) static FILE_WORK_THREADS: Mutex<Vec<(String, std::thread::ThreadId)>> =
    Mutex::new(Vec::new());

/// Writes a small file atomically: temp file, fsync, rename, fsync of the directory.
pub(crate) fn write_atomic(path: &std::path::Path, data: &[u8]) -> Result<(), BrokerError> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let io = |what: String| move |source| BrokerError::Io { what, source };
    let mut f = std::fs::File::create(&tmp).map_err(io(format!("create {}", tmp.display())))?;
    f.write_all(data)
        .map_err(io(format!("write {}", tmp.display())))?;
    f.sync_all()
        .map_err(io(format!("fsync {}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(io(format!("rename {}", tmp.display())))?;
    if let Some(dir) = path.parent() {
        crate::storage::fsync_dir(dir)?;
    }
    Ok(())
}

//! The engine both front ends share: topics and partitions, produce with
//! routing, long-poll fetch, the group coordinator and committed offsets.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use flume_client::protocol::messages::encode_fetch_partition;
use flume_client::protocol::record::{self, RecordError, RecordIter};
use flume_client::protocol::wire::WriteExt;
use flume_client::protocol::{
    partition_for_key, CreateTopicRequest, ErrorCode, FetchRequest, JoinGroupRequest,
    JoinGroupResponse, MetadataResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetFetchPartition, OffsetFetchRequest, OffsetFetchResponse, PartitionError,
    PartitionMetadata, ProduceEntry, ProduceResult, Span, TopicMetadata,
};
use flume_client::rt;
use futures::channel::oneshot;
use futures::FutureExt;

use crate::config::{valid_name, Backpressure, BrokerConfig, TopicConfig};
use crate::error::BrokerError;
use crate::group::{Assignor, Coordinator, JoinParams, Ready};
use crate::metrics::{FetchTally, GroupSummary, Metrics};
use crate::offsets::OffsetStore;
use crate::partition::{Admission, Partition};
use crate::storage::{DataDirLock, FsyncPolicy, Log};

type JoinReply = oneshot::Sender<Result<JoinGroupResponse, ErrorCode>>;

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
    create_lock: Mutex<()>,
    groups: Mutex<Coordinator<JoinReply>>,
    offsets: Mutex<OffsetStore>,
    started: Instant,
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

    /// Waits for every partition writer and builds the result.
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
            record_partitions: if error.is_ok() {
                self.record_partitions
            } else {
                Vec::new()
            },
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
        let offsets = OffsetStore::open(
            &dir.join("__consumer_offsets"),
            config.fsync == FsyncPolicy::Always,
        )?;
        let nonce = u64::try_from(crate::now_ms()).unwrap_or(0);
        let (shutdown_tx, shutdown_rx) = async_channel::bounded(1);
        let engine = Arc::new(Engine {
            config,
            topics: RwLock::new(topics),
            create_lock: Mutex::new(()),
            groups: Mutex::new(Coordinator::new(nonce)),
            offsets: Mutex::new(offsets),
            started: Instant::now(),
            shutdown_tx,
            shutdown_rx,
            ticker: Mutex::new(None),
            data_lock: Mutex::new(Some(data_lock)),
            metrics: Arc::new(Metrics::default()),
        });
        let weak = Arc::downgrade(&engine);
        let tick = engine.config.tick;
        let stop = engine.shutdown_rx.clone();
        let task = rt::spawn(async move {
            let mut n: u64 = 0;
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
                n += 1;
                if n.is_multiple_of(10) || engine.config.fsync != FsyncPolicy::Never {
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

    /// Milliseconds since the engine started (the coordinator's clock).
    fn mono_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
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

    /// Creates a topic with the given settings.
    ///
    /// # Errors
    /// INVALID_NAME, TOPIC_ALREADY_EXISTS, or storage errors.
    pub fn create_topic(&self, name: &str, tc: TopicConfig) -> Result<Arc<Topic>, BrokerError> {
        if !valid_name(name) {
            return Err(BrokerError::code_for(
                ErrorCode::InvalidName,
                format!("topic name {name:?}"),
            ));
        }
        if let Err(e) = tc.check() {
            return Err(BrokerError::code_for(ErrorCode::InvalidRequest, e));
        }
        let _guard = lock(&self.create_lock);
        if self.topic(name).is_some() {
            return Err(BrokerError::code_for(ErrorCode::TopicAlreadyExists, name));
        }
        // Broker-wide budgets: every partition holds files and a task, every queue
        // slot is preallocated memory, so a peer cannot create its way to exhaustion.
        let topics = self.topics();
        let partitions: u64 = topics
            .iter()
            .map(|t| t.partitions.len() as u64)
            .sum::<u64>()
            + u64::from(tc.partitions);
        let slots: u64 =
            topics.iter().map(|t| t.config.queue_slots()).sum::<u64>() + tc.queue_slots();
        if partitions > self.config.max_partitions || slots > self.config.max_queue_slots {
            return Err(BrokerError::code_for(
                ErrorCode::InvalidRequest,
                format!(
                    "topic {name} would bring the broker to {partitions} partitions (limit {}) and {slots} queue slots (limit {})",
                    self.config.max_partitions, self.config.max_queue_slots
                ),
            ));
        }
        let dir = self.config.data_dir.join(name);
        crate::storage::create_dir_durable(&dir)?;
        write_atomic(&TopicConfig::path(&dir), tc.to_text().as_bytes())?;
        let topic = Arc::new(Self::open_topic(&self.config, name, tc)?);
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

    /// Creates a topic from a CREATE_TOPIC request (-1 fields take defaults).
    ///
    /// # Errors
    /// As [`Engine::create_topic`].
    pub fn create_topic_request(
        &self,
        req: &CreateTopicRequest,
    ) -> Result<Arc<Topic>, BrokerError> {
        let d = &self.config.default_topic;
        let pos_u64 = |v: i64, def: Option<u64>| if v < 0 { def } else { u64::try_from(v).ok() };
        let tc = TopicConfig {
            partitions: if req.partitions < 0 {
                d.partitions
            } else {
                u32::try_from(req.partitions).unwrap_or(0)
            },
            max_pending: if req.max_pending < 0 {
                d.max_pending
            } else {
                usize::try_from(req.max_pending).unwrap_or(0)
            },
            retention_bytes: pos_u64(req.retention_bytes, d.retention_bytes),
            retention_ms: pos_u64(req.retention_ms, d.retention_ms),
            segment_bytes: pos_u64(req.segment_bytes, Some(d.segment_bytes))
                .unwrap_or(d.segment_bytes),
            backpressure: match req.backpressure {
                0 => Backpressure::Block,
                1 => Backpressure::Reject,
                _ => d.backpressure,
            },
        };
        self.create_topic(&req.name, tc)
    }

    /// The topic, created with the defaults if auto-create is on.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC (auto-create off), INVALID_NAME, storage errors.
    pub fn topic_or_create(&self, name: &str) -> Result<Arc<Topic>, BrokerError> {
        if let Some(t) = self.topic(name) {
            return Ok(t);
        }
        if !self.config.auto_create_topics {
            return Err(BrokerError::code_for(ErrorCode::UnknownTopic, name));
        }
        match self.create_topic(name, self.config.default_topic.clone()) {
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
        let t = match self.topic_or_create(&topic) {
            Ok(t) => t,
            Err(e) => return fail(e.code()),
        };
        let info = match record::validate_batch(&records, self.config.max_record_bytes as u64) {
            Ok(i) => i,
            Err(RecordError::TooLarge { .. }) => return fail(ErrorCode::RecordTooLarge),
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
    /// `min_bytes` are available or `max_wait_ms` passes. Returns the first
    /// partition that failed (its index in the request) and its error.
    pub async fn fetch_into(
        &self,
        req: &FetchRequest,
        out: &mut Vec<u8>,
    ) -> Option<(usize, ErrorCode)> {
        let max_wait =
            Duration::from_millis(u64::try_from(req.max_wait_ms.clamp(0, 60_000)).unwrap_or(0));
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
        let min_bytes = usize::try_from(req.min_bytes.max(0)).unwrap_or(0);
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
        let start_len = out.len();
        let mut tally = FetchTally::default();
        loop {
            let listeners: Vec<_> = resolved.iter().flatten().map(|p| p.listen()).collect();
            out.truncate(start_len);
            tally.clear();
            out.put_count(req.partitions.len());
            let mut total = 0usize;
            let mut errors = false;
            for (i, (fp, part)) in req.partitions.iter().zip(&resolved).enumerate() {
                let part = match part {
                    Ok(p) => p,
                    Err(code) => {
                        errors = true;
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
                    Ok(o) => part.read(o, want).await.map(Some).map_err(|e| e.code()),
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
                        errors = true;
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
            let now = Instant::now();
            if total >= min_bytes.max(1)
                || errors
                || now >= deadline
                || listeners.is_empty()
                || self.is_shutting_down()
            {
                return tally.commit();
            }
            let any_data = futures::future::select_all(listeners.into_iter().map(Box::pin));
            futures::select! {
                _ = any_data.fuse() => {}
                _ = rt::sleep(deadline - now).fuse() => {}
                _ = self.shutdown_rx.recv().fuse() => {}
            }
        }
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
        if req.topics.is_empty() {
            return Err(ErrorCode::InvalidRequest);
        }
        for t in &req.topics {
            if let Err(e) = self.topic_or_create(t) {
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
        let now = crate::now_ms();
        for t in self.topics() {
            for p in &t.partitions {
                p.maintain(now).await;
            }
        }
    }

    // ------------------------------------------------------------ offsets

    /// Handles OFFSET_COMMIT, fenced by member and generation.
    ///
    /// # Errors
    /// UNKNOWN_MEMBER, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, STORAGE_ERROR.
    pub fn commit_offsets(
        &self,
        req: &OffsetCommitRequest,
    ) -> Result<OffsetCommitResponse, ErrorCode> {
        if !valid_name(&req.group) {
            return Err(ErrorCode::InvalidName);
        }
        let groups = lock(&self.groups);
        groups.check_commit(&req.group, &req.member_id, req.generation)?;
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
        // Written while the group is locked, so a rebalance cannot slip between the check and the write.
        if let Err(e) = lock(&self.offsets).commit(&req.group, &store) {
            tracing::error!(group = %req.group, error = %e, "offset commit failed");
            return Err(e.code());
        }
        drop(groups);
        Ok(OffsetCommitResponse { results })
    }

    /// Stores offsets outside group membership (embedded mode).
    ///
    /// # Errors
    /// Storage errors.
    pub fn store_offsets(
        &self,
        group: &str,
        offsets: &[(String, i32, i64)],
    ) -> Result<(), BrokerError> {
        lock(&self.offsets).commit(group, offsets)
    }

    /// The committed offset of one partition, if any.
    pub fn committed(&self, group: &str, topic: &str, partition: i32) -> Option<i64> {
        lock(&self.offsets).get(group, topic, partition)
    }

    /// Handles OFFSET_FETCH: committed offset, log start and log end per partition.
    pub fn offset_fetch(&self, req: &OffsetFetchRequest) -> OffsetFetchResponse {
        let mut partitions = Vec::new();
        let store = lock(&self.offsets);
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
        if let Err(e) = lock(&self.offsets).sync() {
            tracing::error!(error = %e, "fsync of committed offsets failed at shutdown");
        }
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
        lock(&self.offsets).entries(limit)
    }
}

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

//! The engine every front end shares: topics and partitions, produce with
//! routing, long-poll fetch, the group coordinator and committed offsets. It
//! speaks the domain ([`crate::domain`]), never a wire protocol.
//!
//! Layout, one concern a file:
//! - `mod.rs`: opening the data directory, the maintenance ticker, shutdown.
//! - `topics.rs`: topics, their creation (explicit and automatic), describe.
//! - `produce.rs`: checking a batch, routing its records, queueing them.
//! - `fetch.rs`: the long-poll fetch and its memory budgets.
//! - `groups.rs`: joins (broker- and client-assigned), syncs, heartbeats,
//!   leaves, commits and committed offsets, describe and list.
//! - `admin.rs`: deleting and altering topics, offsets by timestamp,
//!   deleting groups.
//! - `cleaner.rs`: the log cleaner's rounds over compacted partitions.
//! - `consumer_groups.rs`: consumer-protocol groups (KIP-848): heartbeats,
//!   session expiry, describe and list.
//! - `share.rs`: share groups (queues): membership, acquisitions from the
//!   log, acknowledgements, lock expiry, their kept state.
//! - `txn.rs`: transactions, through the transaction coordinator and its
//!   state log (markers wait for the storage format: see there).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use flume_protocol::ErrorCode;
use flume_rt as rt;
use flume_rt::sync::{lock, TaskSlot};
use futures::channel::oneshot;
use futures::FutureExt;

use crate::config::{valid_name, BrokerConfig, TopicConfig};
use crate::coordinator::group::{Answer, Coordinator};
use crate::coordinator::offsets::Offsets;
use crate::domain::GroupError;
use crate::domain::GroupSummary;
use crate::error::BrokerError;
use crate::metrics::Metrics;
use crate::storage::{DataDirLock, FsyncPolicy};
use topics::Shared;

mod admin;
mod cleaner;
mod consumer_groups;
mod fetch;
mod groups;
mod produce;
mod share;
mod topics;
mod txn;

/// What the front ends read and write of committed offsets and
/// transactions, from the coordinator they never name.
pub use crate::coordinator::offsets::Committed;
pub use crate::coordinator::txn::{TxnError, TxnListing, TxnMeta, TxnOffset, TxnState};
pub use admin::TOMBSTONE_PREFIX;
pub use consumer_groups::{
    Assignment, ConsumerBeat, ConsumerError, ConsumerGroupError, ConsumerGroupView,
    ConsumerHeartbeat, ConsumerMemberView,
};
pub use fetch::{FetchMemory, GaveUp, COUNT_CHUNK_BYTES};
pub use produce::PendingProduce;
pub use share::{
    AckError, AckType, Acquired, SessionError, SessionStep, ShareAck, ShareBeat, ShareCounts,
    ShareError, ShareFetchSpec, ShareFetched, ShareGroupError, ShareGroupView, ShareHeartbeat,
    ShareMemberView, SharePartitionView, ShareReset, ShareSettings, ShareTotals, ShareTp,
    MAX_SHARE_SESSIONS,
};
#[cfg(test)]
pub(crate) use topics::FILE_WORK_THREADS;
pub use topics::{Topic, TOPIC_ID_FILE};
pub use txn::{TxnFailure, TxnStats};

type JoinReply = oneshot::Sender<Result<Answer, GroupError>>;

/// Threads that open topics and partitions at start. The work is mostly
/// waiting for the disk (a cold cache: directory listings, index reads, the
/// active segment's tail), so more threads than cores keep more requests in
/// the disk's queue: 10,000 partitions opened in 11.8 s with one thread and a
/// cold cache.
const OPEN_THREADS: usize = 16;

/// Loads every topic of the data directory: each topic's `topic.conf` and
/// id (given one if it has none, see [`topics::load_or_assign_id`]), then
/// every partition's log (recovering it), spread over [`OPEN_THREADS`].
/// Also returns the directories of topic deletes a crash interrupted
/// (tombstones, see `admin.rs`), for the caller to finish.
#[allow(clippy::type_complexity)]
fn open_topics(
    config: &BrokerConfig,
    shared: &Shared,
) -> Result<(BTreeMap<String, Arc<Topic>>, Vec<(PathBuf, String)>), BrokerError> {
    let dir = &config.data_dir;
    let entries = std::fs::read_dir(dir).map_err(|source| BrokerError::Io {
        what: format!("list {}", dir.display()),
        source,
    })?;
    let mut candidates = Vec::new();
    let mut tombstones = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if admin::is_tombstone(&name) && path.is_dir() {
            tombstones.push((path, name));
        } else if valid_name(&name) && path.is_dir() {
            candidates.push((name, path));
        }
    }
    candidates.sort_unstable();
    let configs = parallel_map(&candidates, |(name, path)| {
        let conf_path = TopicConfig::path(path);
        let Ok(text) = std::fs::read_to_string(&conf_path) else {
            tracing::warn!(dir = %path.display(), "directory without topic.conf; not a topic, skipped");
            return Ok::<_, BrokerError>(None);
        };
        let tc = TopicConfig::from_text(&text)
            .map_err(|e| BrokerError::Config(format!("{}: {e}", conf_path.display())))?;
        let (id, assigned) = topics::load_or_assign_id(path)?;
        Ok(Some((name.clone(), id, tc, assigned)))
    });
    let mut found = Vec::new();
    let mut assigned = 0usize;
    for c in configs {
        if let Some((name, id, tc, new)) = c? {
            assigned += usize::from(new);
            found.push((name, id, tc));
        }
    }
    if assigned > 0 {
        // A data directory of a release before topic ids: given once, kept.
        tracing::info!(
            topics = assigned,
            "topics without an id were given one (written to their directories)"
        );
    }
    let work: Vec<(usize, u32)> = found
        .iter()
        .enumerate()
        .flat_map(|(t, (_, _, tc))| (0..tc.partitions).map(move |p| (t, p)))
        .collect();
    let mut opened = parallel_map(&work, |&(t, p)| {
        let (name, _, tc) = &found[t];
        Topic::open_partition(config, shared, name, tc, p)
    })
    .into_iter();
    let mut topics = BTreeMap::new();
    for (name, id, tc) in found {
        let partitions = opened
            .by_ref()
            .take(tc.partitions as usize)
            .collect::<Result<Vec<_>, _>>()?;
        topics.insert(
            name.clone(),
            Arc::new(Topic::from_parts(name, id, tc, partitions)),
        );
    }
    Ok((topics, tombstones))
}

/// `f` over `items` on up to [`OPEN_THREADS`] threads; results in order.
pub(super) fn parallel_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = OPEN_THREADS.min(items.len());
    let mut parts: Vec<Vec<(usize, R)>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        out.push((i, f(item)));
                    }
                    out
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let mut all: Vec<(usize, R)> = parts.iter_mut().flat_map(std::mem::take).collect();
    all.sort_unstable_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, r)| r).collect()
}

/// The engine: every topic, partition, group and committed offset of one
/// data directory, behind an API in the domain's terms ([`crate::domain`]).
#[derive(Debug)]
pub struct Engine {
    config: BrokerConfig,
    /// Settings of topics created without explicit ones: `config.default_topic`
    /// at start, changed by [`Engine::set_default_topic`] (a configuration reload).
    default_topic: RwLock<TopicConfig>,
    topics: RwLock<BTreeMap<String, Arc<Topic>>>,
    /// Held across a topic's creation, including its file work on the blocking pool.
    create_lock: futures::lock::Mutex<()>,
    groups: Mutex<Coordinator<JoinReply>>,
    /// Consumer-protocol groups (KIP-848; see `consumer_groups.rs`). Taken
    /// after `groups` when both are held.
    consumer_groups: Mutex<crate::coordinator::consumer::ConsumerGroups>,
    offsets: Offsets,
    shutdown_tx: async_channel::Sender<()>,
    shutdown_rx: async_channel::Receiver<()>,
    ticker: TaskSlot<()>,
    /// The log cleaner's round in progress, if any (see `cleaner.rs`).
    cleaner: cleaner::Cleaner,
    /// The exclusive hold of the data directory, released at shutdown or drop.
    data_lock: Mutex<Option<DataDirLock>>,
    /// Request counters and latencies (see [`crate::metrics`]).
    metrics: Arc<Metrics>,
    /// Idempotent producers' ids (see [`crate::coordinator::producer_ids`]).
    producer_ids: Arc<crate::coordinator::producer_ids::ProducerIds>,
    /// The ACLs and the authorisation check (see [`crate::security::acl`]).
    acl: Arc<crate::security::acl::Authorizer>,
    /// The per-principal limits every listener applies (see [`crate::security::quota`]).
    quotas: Arc<crate::security::quota::Quotas>,
    /// What every partition shares (the file cache, the producer-state limits).
    shared: Shared,
    /// The transaction coordinator and its state log (see `txn.rs`).
    txns: txn::Transactions,
    /// Share groups and their kept state (see `share.rs`).
    shares: share::Shares,
}

impl Engine {
    /// Opens the data directory: locks it (see `storage::dirs`),
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
        let shared = Shared::new(&config);
        let (topics, tombstones) = open_topics(&config, &shared)?;
        let offsets = Offsets::open_with_clock(
            &dir.join("__consumer_offsets"),
            config.fsync,
            config.clock.clone(),
        )?;
        // Deletes a crash interrupted: finish them (docs/storage.md, "Deleting a topic").
        for (path, _) in tombstones {
            let topic = admin::tombstone_topic(&path).unwrap_or_default();
            if !topics.contains_key(&topic) {
                offsets.remove_where_now(&|k| k.1 == topic)?;
            }
            tracing::warn!(dir = %path.display(), topic, "finishing the delete of a topic interrupted by a crash");
            admin::remove_tombstone(dir, &path)?;
        }
        let producer_ids =
            crate::coordinator::producer_ids::ProducerIds::open(dir).map_err(|e| {
                BrokerError::Io {
                    what: "producer ids".into(),
                    source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
                }
            })?;
        let txns = txn::Transactions::open(
            &dir.join("__transaction_state"),
            txn::limits(&config.transactions),
            config.clock.wall_ms(),
        )
        .map_err(|e| BrokerError::Io {
            what: "transaction state".into(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })?;
        let acl =
            crate::security::acl::Authorizer::open(dir, config.authorizer, &config.admin_users)?;
        let quotas = crate::security::quota::Quotas::new(
            config.connections_per_principal(),
            config.produce_quota_bytes_per_sec,
            config.clock.clone(),
        );
        let nonce = u64::try_from(config.clock.wall_ms()).unwrap_or(0);
        let metrics = Arc::new(Metrics::with_clock(config.clock.clone()));
        let shares = share::Shares::open(
            dir,
            config.share,
            config.fsync,
            config.clock.clone(),
            nonce,
            &|t| topics.contains_key(t),
        )?;
        let (shutdown_tx, shutdown_rx) = async_channel::bounded(1);
        let consumer_groups =
            crate::coordinator::consumer::ConsumerGroups::new(config.consumer_groups, nonce);
        let engine = Arc::new(Engine {
            default_topic: RwLock::new(config.default_topic.clone()),
            config,
            topics: RwLock::new(topics),
            create_lock: futures::lock::Mutex::new(()),
            groups: Mutex::new(Coordinator::new(nonce)),
            consumer_groups: Mutex::new(consumer_groups),
            offsets,
            shutdown_tx,
            shutdown_rx,
            ticker: TaskSlot::default(),
            cleaner: cleaner::Cleaner::default(),
            data_lock: Mutex::new(Some(data_lock)),
            metrics,
            producer_ids: Arc::new(producer_ids),
            acl: Arc::new(acl),
            quotas,
            shared,
            txns,
            shares,
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
                engine.tick_consumer_groups();
                engine.tick_shares().await;
                if last_maintained.elapsed() >= every || engine.config.fsync != FsyncPolicy::Never {
                    last_maintained = Instant::now();
                    engine.maintain().await;
                }
            }
        });
        engine.ticker.set(task);
        Ok(engine)
    }

    async fn maintain(&self) {
        let now = self.config.clock.wall_ms();
        let partitions = self
            .topics()
            .iter()
            .flat_map(|t| t.partitions.iter().cloned())
            .collect();
        crate::partition::maintain_all(partitions, now).await;
        self.start_cleaning(now);
        self.offsets.maintain().await;
        self.shares.maintain().await;
        self.maintain_txns().await;
    }

    /// The settings.
    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    /// The settings a topic created without explicit ones gets (auto-created
    /// topics, -1 fields of CREATE_TOPIC, Kafka's CreateTopics).
    pub fn default_topic(&self) -> TopicConfig {
        self.default_topic
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Changes the defaults of topics created from now on; existing topics
    /// keep the settings they were created with (`topic.conf`).
    ///
    /// # Errors
    /// [`BrokerError::Config`] naming a setting out of range; nothing changes then.
    pub fn set_default_topic(&self, tc: TopicConfig) -> Result<(), BrokerError> {
        tc.check().map_err(BrokerError::Config)?;
        *self
            .default_topic
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = tc;
        Ok(())
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
        self.tick_consumer_groups();
        self.tick_shares().await;
        self.maintain().await;
    }

    /// A receiver that fails (wakes) when shutdown begins.
    pub fn shutdown_signal(&self) -> async_channel::Receiver<()> {
        self.shutdown_rx.clone()
    }

    /// True once shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.shutdown_tx.is_closed()
    }

    // ------------------------------------------------------------ shutdown

    /// Signals shutdown: long polls return, parked joins get SHUTTING_DOWN,
    /// new produce requests are refused. Queues keep draining. Idempotent.
    pub fn begin_shutdown(&self) {
        self.shutdown_tx.close();
        let ready = lock(&self.groups).drain(ErrorCode::ShuttingDown);
        Self::deliver(ready);
        // Waiting fetches listen on their partitions only: wake them (each
        // looks again, after the signal closed, and returns).
        for t in self.topics() {
            for p in &t.partitions {
                p.wake_readers();
            }
        }
    }

    /// Stops the engine: wakes long polls and parked joins, drains every
    /// partition queue to disk, fsyncs logs and offsets. Idempotent.
    pub async fn shutdown(&self) {
        self.begin_shutdown();
        self.ticker.join().await;
        self.cleaner.stop().await;
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
        self.shares.shutdown().await;
        // Everything is on disk: another broker (or a reopen in this process) may take over.
        drop(lock(&self.data_lock).take());
    }

    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.config.data_dir.clone()
    }

    /// The data directory as a log directory is named to clients: its
    /// canonical path where it has one.
    pub fn log_dir(&self) -> PathBuf {
        let dir = self.data_dir();
        std::fs::canonicalize(&dir).unwrap_or(dir)
    }

    /// The per-principal limits (connections, produce rate, failed logins)
    /// and their counters.
    pub fn quotas(&self) -> &Arc<crate::security::quota::Quotas> {
        &self.quotas
    }

    /// Request counters and latencies.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The ACLs and the authorisation check every front end calls.
    pub fn acl(&self) -> &Arc<crate::security::acl::Authorizer> {
        &self.acl
    }

    /// Every group's state, generation, members and rebalances.
    pub fn group_summaries(&self) -> Vec<GroupSummary> {
        lock(&self.groups).summaries()
    }

    /// Up to `limit` committed offsets: ((group, topic, partition), offset).
    pub fn committed_offsets(
        &self,
        limit: usize,
    ) -> Vec<(crate::coordinator::offsets::OffsetKey, i64)> {
        self.offsets.entries(limit)
    }
}

#[cfg(test)]
mod offsets_tests;

#[cfg(test)]
mod share_tests;
#[cfg(test)]
mod txn_tests;

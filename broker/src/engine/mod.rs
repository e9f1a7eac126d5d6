//! The engine every front end shares, as services that each own their
//! state: [`Records`] (topics, produce, fetch), [`Groups`] (classic and
//! consumer-protocol groups, committed offsets), [`Transactions`],
//! [`Shares`] (share groups), [`Admin`] (a topic's removal, settings,
//! partitions, offsets by timestamp, deleting records) and the log cleaner.
//! It speaks the domain ([`crate::domain`]), never a wire protocol.
//!
//! The services form layers, each using only those below it: records at
//! the bottom; share groups over records; groups over records and share
//! groups (a group id is one kind of group only); transactions over records
//! and groups; administration over records, groups and share groups; the
//! cleaner over records. [`Engine`] opens them in that order, runs their
//! maintenance on one ticker, shuts them down, and hands them out; a front
//! end's API file talks to the service it serves.
//!
//! Layout, one service a module:
//! - `mod.rs`: opening the data directory, the maintenance ticker, shutdown.
//! - `records/`: topics (`topics.rs`), produce (`produce.rs`), the long-poll
//!   fetch and in-process reads (`fetch.rs`).
//! - `groups/`: classic groups and offsets (`classic.rs`), consumer-protocol
//!   groups (KIP-848, `consumer.rs`), deleting groups and offsets (`mod.rs`).
//! - `share/`: share groups (queues): membership, sessions and lock expiry
//!   (`mod.rs`), acquisitions from the log (`fetch.rs`), acknowledgements
//!   (`ack.rs`), describe, delete, start offsets and configs (`admin.rs`).
//! - `txn.rs`: transactions, through the transaction coordinator and its
//!   state log.
//! - `admin.rs`: deleting and altering topics, offsets by timestamp,
//!   deleting records.
//! - `cleaner.rs`: the log cleaner's rounds over compacted partitions.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use flume_rt as rt;
use flume_rt::sync::{lock, TaskSlot};
use futures::FutureExt;

use crate::config::BrokerConfig;
use crate::coordinator::offsets::Offsets;
use crate::coordinator::producer_ids::ProducerIds;
use crate::error::BrokerError;
use crate::metrics::Metrics;
use crate::storage::{DataDirLock, FsyncPolicy};

mod admin;
mod cleaner;
mod groups;
mod records;
mod share;
mod txn;

/// What the front ends read and write of committed offsets and
/// transactions, from the coordinator they never name.
pub use crate::coordinator::offsets::Committed;
pub use crate::coordinator::txn::{TxnError, TxnListing, TxnMeta, TxnOffset, TxnState};
pub use admin::{Admin, TOMBSTONE_PREFIX};
pub use groups::{
    Assignment, ConsumerBeat, ConsumerError, ConsumerGroupError, ConsumerGroupView,
    ConsumerHeartbeat, ConsumerMemberView, Groups, CLIENT_GROUP_BYTES, READER_END_PROBE,
};
#[cfg(test)]
pub(crate) use records::FILE_WORK_THREADS;
pub use records::{
    FetchMemory, GaveUp, PendingProduce, Records, Topic, COUNT_CHUNK_BYTES, TOPIC_ID_FILE,
};
pub use share::{
    AckError, AckType, Acquired, SessionError, SessionStep, ShareAck, ShareBeat, ShareCounts,
    ShareError, ShareFetchSpec, ShareFetched, ShareGroupError, ShareGroupView, ShareHeartbeat,
    ShareMemberView, SharePartitionView, ShareReset, ShareSettings, ShareTotals, ShareTp, Shares,
    MAX_SHARE_SESSIONS,
};
pub use txn::{Transactions, TxnFailure, TxnStats};

/// The broker's shutdown as every service sees it: begun once, never undone.
#[derive(Debug, Clone)]
pub(crate) struct Shutdown {
    tx: async_channel::Sender<()>,
    rx: async_channel::Receiver<()>,
}

impl Shutdown {
    fn new() -> Self {
        let (tx, rx) = async_channel::bounded(1);
        Shutdown { tx, rx }
    }

    /// True once shutdown has begun.
    pub(crate) fn is_begun(&self) -> bool {
        self.tx.is_closed()
    }

    /// Ends (with an error) when shutdown begins.
    pub(crate) async fn begun(&self) {
        let _ = self.rx.recv().await;
    }

    fn begin(&self) {
        self.tx.close();
    }
}

/// The engine: the services of one data directory (see the module docs),
/// the security state every front end checks (ACLs, quotas) and the metrics.
#[derive(Debug)]
pub struct Engine {
    config: Arc<BrokerConfig>,
    records: Arc<Records>,
    groups: Arc<Groups>,
    shares: Arc<Shares>,
    txns: Arc<Transactions>,
    admin: Admin,
    /// The log cleaner's rounds (see `cleaner.rs`).
    cleaner: cleaner::Cleaner,
    shutdown: Shutdown,
    ticker: TaskSlot<()>,
    /// The exclusive hold of the data directory, released at shutdown or drop.
    data_lock: Mutex<Option<DataDirLock>>,
    /// Request counters and latencies (see [`crate::metrics`]).
    metrics: Arc<Metrics>,
    /// The ACLs and the authorisation check (see [`crate::security::acl`]).
    acl: Arc<crate::security::acl::Authorizer>,
    /// The per-principal limits every listener applies (see [`crate::security::quota`]).
    quotas: Arc<crate::security::quota::Quotas>,
}

impl Engine {
    /// Opens the data directory: locks it (see `storage::dirs`), opens the
    /// services in order (records, recovering every log; share groups;
    /// groups and the committed offsets; transactions; administration; the
    /// cleaner) and starts the maintenance ticker.
    ///
    /// # Errors
    /// Invalid settings, a directory another broker holds
    /// ([`crate::storage::StorageError::DataDirLocked`]) or that is not a
    /// Flume data directory ([`crate::storage::StorageError::ForeignDataDir`]),
    /// or storage that cannot be opened.
    pub fn open(config: BrokerConfig) -> Result<Arc<Self>, BrokerError> {
        config.validate()?;
        let config = Arc::new(config);
        let dir = &config.data_dir;
        let data_lock = DataDirLock::acquire(dir, config.allow_foreign_data_dir)?;
        let shutdown = Shutdown::new();
        let producer_ids = Arc::new(ProducerIds::open(dir).map_err(|e| BrokerError::Io {
            what: "producer ids".into(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })?);
        let (records, tombstones) = Records::open(
            Arc::clone(&config),
            Arc::clone(&producer_ids),
            shutdown.clone(),
            &admin::is_tombstone,
        )?;
        let records = Arc::new(records);
        let offsets = Offsets::open_with_clock(
            &dir.join("__consumer_offsets"),
            config.fsync,
            config.clock.clone(),
        )?;
        // Deletes a crash interrupted: finish them (docs/storage.md, "Deleting a topic").
        for (path, _) in &tombstones {
            let topic = admin::tombstone_topic(path).unwrap_or_default();
            if records.topic(&topic).is_none() {
                offsets.remove_where_now(&|k| k.1 == topic)?;
            }
            tracing::warn!(dir = %path.display(), topic, "finishing the delete of a topic interrupted by a crash");
            admin::remove_tombstone(dir, path)?;
        }
        let nonce = u64::try_from(config.clock.wall_ms()).unwrap_or(0);
        let shares = Arc::new(Shares::open(Arc::clone(&records), shutdown.clone(), nonce)?);
        let groups = Arc::new(Groups::new(
            Arc::clone(&config),
            Arc::clone(&records),
            Arc::clone(&shares),
            offsets,
            shutdown.clone(),
            nonce,
        ));
        let txns = Arc::new(
            Transactions::open(
                Arc::clone(&records),
                Arc::clone(&groups),
                producer_ids,
                shutdown.clone(),
            )
            .map_err(|e| BrokerError::Io {
                what: "transaction state".into(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            })?,
        );
        let admin = Admin::new(
            Arc::clone(&records),
            Arc::clone(&groups),
            Arc::clone(&shares),
        );
        let acl =
            crate::security::acl::Authorizer::open(dir, config.authorizer, &config.admin_users)?;
        let quotas = crate::security::quota::Quotas::new(
            config.connections_per_principal(),
            config.produce_quota_bytes_per_sec,
            config.clock.clone(),
        );
        let metrics = Arc::new(Metrics::with_clock(config.clock.clone()));
        let cleaner = cleaner::Cleaner::new(Arc::clone(&records), Arc::clone(&metrics));
        let engine = Arc::new(Engine {
            config,
            records,
            groups,
            shares,
            txns,
            admin,
            cleaner,
            shutdown,
            ticker: TaskSlot::default(),
            data_lock: Mutex::new(Some(data_lock)),
            metrics,
            acl: Arc::new(acl),
            quotas,
        });
        engine.start_ticker();
        Ok(engine)
    }

    /// The maintenance ticker: group and share-group timers every tick,
    /// the services' maintenance every `maintenance_interval` (every tick
    /// when partitions fsync on their own).
    fn start_ticker(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let tick = self.config.tick;
        let shutdown = self.shutdown.clone();
        let every = self.config.maintenance_interval;
        let task = rt::spawn(async move {
            let mut last_maintained = Instant::now();
            loop {
                let stopped = futures::select! {
                    _ = rt::sleep(tick).fuse() => false,
                    _ = shutdown.begun().fuse() => true,
                };
                let Some(engine) = weak.upgrade() else { break };
                if stopped {
                    break;
                }
                engine.groups.tick();
                engine.shares.tick_shares().await;
                if last_maintained.elapsed() >= every || engine.config.fsync != FsyncPolicy::Never {
                    last_maintained = Instant::now();
                    engine.maintain().await;
                }
            }
        });
        self.ticker.set(task);
    }

    async fn maintain(&self) {
        let now = self.config.clock.wall_ms();
        crate::partition::maintain_all(self.records.partitions(), now).await;
        self.cleaner.start(now);
        self.groups.maintain().await;
        self.shares.maintain().await;
        self.txns.maintain_txns().await;
    }

    /// The settings.
    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    /// Topics, produce and fetch.
    pub fn records(&self) -> &Arc<Records> {
        &self.records
    }

    /// Classic and consumer-protocol groups and their committed offsets.
    pub fn groups(&self) -> &Arc<Groups> {
        &self.groups
    }

    /// Share groups (queues).
    pub fn shares(&self) -> &Arc<Shares> {
        &self.shares
    }

    /// Transactions.
    pub fn transactions(&self) -> &Arc<Transactions> {
        &self.txns
    }

    /// A topic's removal, settings and partitions; offsets by timestamp;
    /// deleting records.
    pub fn admin(&self) -> &Admin {
        &self.admin
    }

    /// Runs one maintenance pass now, as the ticker does: expires silent
    /// group members and completes rebalances past their deadline by the
    /// configured clock, then retention and the interval fsync. With a
    /// [`crate::Clock::manual`] clock a test advances the clock and calls
    /// this instead of waiting for the ticker.
    pub async fn tick_now(&self) {
        self.groups.tick();
        self.shares.tick_shares().await;
        self.maintain().await;
    }

    /// A receiver that fails (wakes) when shutdown begins.
    pub fn shutdown_signal(&self) -> async_channel::Receiver<()> {
        self.shutdown.rx.clone()
    }

    /// True once shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.is_begun()
    }

    // ------------------------------------------------------------ shutdown

    /// Signals shutdown: long polls return, parked joins get SHUTTING_DOWN,
    /// new produce requests are refused. Queues keep draining. Idempotent.
    pub fn begin_shutdown(&self) {
        self.shutdown.begin();
        self.groups.begin_shutdown();
        // Waiting fetches listen on their partitions only: wake them (each
        // looks again, after the signal closed, and returns).
        for p in self.records.partitions() {
            p.wake_readers();
        }
    }

    /// Stops the engine: wakes long polls and parked joins, drains every
    /// partition queue to disk, fsyncs logs and offsets. Idempotent.
    pub async fn shutdown(&self) {
        self.begin_shutdown();
        self.ticker.join().await;
        self.cleaner.stop().await;
        for p in self.records.partitions() {
            p.shutdown().await;
        }
        if self.config.fsync == crate::storage::FsyncPolicy::Never {
            // The partitions skipped their own fsync under `never`: one syncfs for all.
            let dir = self.config.data_dir.clone();
            if let Err(e) = rt::unblock(move || crate::storage::dirs::sync_filesystem(&dir)).await {
                tracing::error!(error = %e, "flushing the data directory at shutdown failed");
            }
        }
        self.groups.shutdown().await;
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
}

#[cfg(test)]
mod offsets_tests;

#[cfg(test)]
mod share_tests;
#[cfg(test)]
mod txn_tests;

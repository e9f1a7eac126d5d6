//! Topics: opening, creating (explicitly or on first use), looking up and
//! describing them.

use std::path::Path;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
#[cfg(test)]
use std::sync::Mutex;

use flume_protocol::ErrorCode;
use flume_rt as rt;

use super::Records;
use crate::config::{valid_name, BrokerConfig, TopicConfig};
use crate::domain::{PartitionOffsets, PartitionStatus, ProducerState, TopicDescription, TopicId};
use crate::error::BrokerError;
use crate::partition::producers::ProducerLimits;
use crate::partition::Partition;
use crate::storage::{write_atomic, CompactionConfig, FileCache, Log, LogConfig};

/// The file in a topic's directory that holds its id: the id's 36
/// characters and a newline (`docs/storage.md`, "Topic ids").
pub const TOPIC_ID_FILE: &str = "topic-id";

/// A fresh topic id from the OS's randomness.
fn new_id() -> Result<TopicId, BrokerError> {
    crate::security::users::random_bytes::<16>().map(TopicId::from_random)
}

/// Writes a topic's id into its directory, atomically.
fn write_id(topic_dir: &Path, id: TopicId) -> Result<(), BrokerError> {
    Ok(write_atomic(
        &topic_dir.join(TOPIC_ID_FILE),
        format!("{id}\n").as_bytes(),
    )?)
}

/// A topic's id from its directory, and whether it was given one now: a
/// directory written before topic ids (or by a crash between creating it and
/// writing the id) gets a new id, written durably before the topic is served,
/// so every later start reads the same one.
///
/// # Errors
/// A file that holds something else than an id ([`BrokerError::Config`]
/// naming it: the broker does not start rather than give the topic another
/// id), or I/O errors.
pub(in crate::engine) fn load_or_assign_id(
    topic_dir: &Path,
) -> Result<(TopicId, bool), BrokerError> {
    let path = topic_dir.join(TOPIC_ID_FILE);
    let text = crate::storage::read_optional(&path)?;
    if text.is_empty() {
        let id = new_id()?;
        write_id(topic_dir, id)?;
        return Ok((id, true));
    }
    TopicId::parse(text.trim_end())
        .map(|id| (id, false))
        .ok_or_else(|| {
            BrokerError::Config(format!(
                "{}: {:?} is not a topic id (a UUID of 36 characters); restore the file or remove it to give the topic a new id",
                path.display(),
                text.chars().take(64).collect::<String>()
            ))
        })
}

/// How a topic's logs are compacted, from its settings (`None`: they are not).
pub(in crate::engine) fn compaction_of(tc: &TopicConfig) -> Option<CompactionConfig> {
    tc.cleanup_policy.compacts().then(|| CompactionConfig {
        min_lag_ms: tc.min_compaction_lag_ms,
        max_lag_ms: tc.max_compaction_lag_ms,
        delete_retention_ms: tc.delete_retention_ms,
        min_dirty_ratio: tc.min_cleanable_dirty_ratio(),
    })
}

/// A topic and its partitions.
#[derive(Debug)]
pub struct Topic {
    /// Name.
    pub name: String,
    /// Id, given at creation and kept on disk ([`TOPIC_ID_FILE`]).
    pub id: TopicId,
    /// Settings.
    pub config: TopicConfig,
    /// Partitions, by number: the engine's own; others see their offsets
    /// and [`PartitionStatus`] snapshots.
    pub(in crate::engine) partitions: Vec<Arc<Partition>>,
    sticky: AtomicU32,
}

impl Topic {
    /// A partition by its wire number.
    pub fn partition(&self, p: i32) -> Option<&Arc<Partition>> {
        usize::try_from(p).ok().and_then(|p| self.partitions.get(p))
    }

    /// How many partitions it has.
    pub fn partition_count(&self) -> u32 {
        u32::try_from(self.partitions.len()).unwrap_or(u32::MAX)
    }

    /// Every partition's state now, in order, for observers (metrics, the
    /// dashboard, health); the size on disk only `with_disk` (it takes each
    /// log's lock).
    pub fn statuses(&self, with_disk: bool) -> Vec<PartitionStatus> {
        self.partitions
            .iter()
            .map(|p| PartitionStatus {
                topic: self.name.clone(),
                partition: p.id,
                log_start: p.start_offset(),
                log_end: p.end_offset(),
                disk: with_disk.then(|| p.disk_usage()),
                queued: p.queued(),
                counts: p.stats().counts(),
                failed: p.has_failed_write(),
                dirty_ppm: if with_disk { p.dirty_ppm() } else { None },
            })
            .collect()
    }
}

/// What every partition of a broker shares, made once at open from the
/// settings and owned by the engine: the cache of open segment files and the
/// producer-state limits (with their broker-wide count).
#[derive(Debug, Clone)]
pub(crate) struct Shared {
    /// Open segment files over all partitions (`max_open_files`).
    pub(crate) files: Arc<FileCache>,
    /// Idempotent producers' state, bounded per partition and overall.
    pub(crate) producer_limits: Arc<ProducerLimits>,
}

impl Shared {
    pub(crate) fn new(config: &BrokerConfig) -> Self {
        Shared {
            files: FileCache::new(config.max_open_files),
            producer_limits: Arc::new(ProducerLimits::new(
                config.max_producers_per_partition,
                config.max_producer_states,
                u64::try_from(config.producer_expiry.as_millis()).unwrap_or(u64::MAX),
                config.clock.clone(),
            )),
        }
    }
}

/// Log settings for one partition of a topic with settings `tc`.
fn log_config(tc: &TopicConfig, config: &BrokerConfig, files: &Arc<FileCache>) -> LogConfig {
    let (retention_bytes, retention_ms) = tc.log_retention();
    LogConfig {
        segment_bytes: tc.segment_bytes,
        segment_ms: tc.segment_ms,
        index_interval_bytes: config.index_interval_bytes,
        fsync: config.fsync,
        retention_bytes,
        retention_ms,
        verify_sealed: config.verify_on_open,
        files: Arc::clone(files),
        compaction: compaction_of(tc),
    }
}

impl Topic {
    /// Opens (recovering) partition `p` of topic `name`.
    pub(in crate::engine) fn open_partition(
        config: &BrokerConfig,
        shared: &Shared,
        name: &str,
        tc: &TopicConfig,
        p: u32,
    ) -> Result<Arc<Partition>, BrokerError> {
        let dir = config.data_dir.join(name).join(format!("partition-{p}"));
        let log = Log::open(&dir, log_config(tc, config, &shared.files))?;
        Ok(Arc::new(Partition::start(
            name,
            p,
            log,
            tc.max_pending,
            tc.backpressure,
            config.writer_batch_bytes,
            Arc::clone(&shared.producer_limits),
        )))
    }

    /// A topic from its opened partitions.
    pub(in crate::engine) fn from_parts(
        name: String,
        id: TopicId,
        config: TopicConfig,
        partitions: Vec<Arc<Partition>>,
    ) -> Topic {
        Topic {
            name,
            id,
            config,
            partitions,
            sticky: AtomicU32::new(0),
        }
    }

    /// The same topic (the same partitions) with other settings.
    pub(in crate::engine) fn with_config(&self, config: TopicConfig) -> Topic {
        Topic {
            name: self.name.clone(),
            id: self.id,
            config,
            partitions: self.partitions.clone(),
            sticky: AtomicU32::new(self.next_sticky()),
        }
    }

    /// The same topic with partitions added (`added` are the new ones, in
    /// number order after the existing ones) and the settings saying so.
    /// The engine swaps it into its map in place of this one: readers that
    /// hold this one keep a consistent view, later lookups see the new
    /// count, and the produce and fetch paths pay nothing for it.
    pub(in crate::engine) fn with_partitions(
        &self,
        config: TopicConfig,
        added: Vec<Arc<Partition>>,
    ) -> Topic {
        let mut partitions = self.partitions.clone();
        partitions.extend(added);
        Topic {
            name: self.name.clone(),
            id: self.id,
            config,
            partitions,
            sticky: AtomicU32::new(self.next_sticky()),
        }
    }

    pub(in crate::engine) fn next_sticky(&self) -> u32 {
        self.sticky
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// The offsets of every partition, in order.
    pub fn offsets(&self) -> Vec<PartitionOffsets> {
        self.partitions.iter().map(|p| p.offsets()).collect()
    }
}

impl Records {
    /// Opens (or creates) every partition of a topic whose directory and
    /// `topic.conf` exist. Missing partition directories are created first
    /// and made durable with one fsync of the topic's directory (not one per
    /// partition); the partitions are then opened on several threads
    /// ([`super::parallel_map`]). A crash in between is harmless: a start
    /// creates whatever partition directory is missing.
    pub(in crate::engine) fn open_topic(
        config: &BrokerConfig,
        shared: &Shared,
        name: &str,
        id: TopicId,
        tc: TopicConfig,
    ) -> Result<Topic, BrokerError> {
        let dir = config.data_dir.join(name);
        let mut created = false;
        for p in 0..tc.partitions {
            let pdir = dir.join(format!("partition-{p}"));
            match std::fs::create_dir(&pdir) {
                Ok(()) => created = true,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(source) => {
                    return Err(BrokerError::Io {
                        what: format!("create {}", pdir.display()),
                        source,
                    })
                }
            }
        }
        if created {
            crate::storage::fsync_dir(&dir)?;
        }
        let numbers: Vec<u32> = (0..tc.partitions).collect();
        let partitions = super::parallel_map(&numbers, |&p| {
            Topic::open_partition(config, shared, name, &tc, p)
        })
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
        Ok(Topic::from_parts(name.to_owned(), id, tc, partitions))
    }

    /// A topic, if it exists.
    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    /// The topic with this id, if it exists (a scan of the topics).
    pub fn topic_by_id(&self, id: TopicId) -> Option<Arc<Topic>> {
        self.topics
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .find(|t| t.id == id)
            .cloned()
    }

    /// A partition's log start and end offsets now; with `stable` the end
    /// is the last stable offset (what a `read_committed` reader may see).
    /// `None` for an unknown topic or partition.
    pub fn log_bounds(&self, topic: &str, partition: i32, stable: bool) -> Option<(u64, u64)> {
        let t = self.topic(topic)?;
        let p = t.partition(partition)?;
        let end = if stable {
            p.stable_offset()
        } else {
            p.end_offset()
        };
        Some((p.start_offset(), end))
    }

    /// The producers a partition tracks (their ids, epochs, last sequences
    /// and open transactions); `None` for an unknown topic or partition.
    pub fn producers(&self, topic: &str, partition: i32) -> Option<Vec<ProducerState>> {
        self.topic(topic)
            .and_then(|t| t.partition(partition).map(|p| p.producers()))
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

    /// Creates a topic with the given settings (blocking; see [`Records::create_topic_async`]).
    ///
    /// # Errors
    /// INVALID_NAME, INVALID_REQUEST, LIMIT_REACHED, TOPIC_ALREADY_EXISTS, or storage errors.
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
        let shared = self.shared.clone();
        let owned = name.to_owned();
        let topic = rt::unblock(move || {
            #[cfg(test)]
            flume_rt::sync::lock(&FILE_WORK_THREADS)
                .push((owned.clone(), std::thread::current().id()));
            let dir = config.data_dir.join(&owned);
            crate::storage::create_dir_durable(&dir)?;
            // The id first: `topic.conf` makes the directory a topic, and a
            // topic never exists without its id (a crash in between leaves
            // a directory a start skips and the next create overwrites).
            let id = new_id()?;
            write_id(&dir, id)?;
            write_atomic(&TopicConfig::path(&dir), tc.to_text().as_bytes())?;
            Self::open_topic(&config, &shared, &owned, id, tc)
        })
        .await?;
        let topic = Arc::new(topic);
        tracing::info!(
            topic = name,
            id = %topic.id,
            partitions = topic.partitions.len(),
            "topic created"
        );
        self.topics
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(name.to_owned(), Arc::clone(&topic));
        Ok(topic)
    }

    /// The topic, created with the defaults if auto-create is on (blocking:
    /// for callers off the executor; async paths use [`Records::auto_create`]).
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
            .create_topic_async(name, self.default_topic().for_new_topic())
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

    pub(in crate::engine) fn partitions_of(&self, topic: &str) -> u32 {
        self.topic(topic)
            .map_or(0, |t| u32::try_from(t.partitions.len()).unwrap_or(0))
    }

    /// Describes every topic (`names` empty) or the topics named, in that
    /// order; a name that is not a topic is described as UNKNOWN_TOPIC.
    pub fn describe(&self, names: &[String]) -> Vec<TopicDescription> {
        let describe = |t: &Topic| TopicDescription {
            name: t.name.clone(),
            partitions: Ok(t.offsets()),
        };
        if names.is_empty() {
            return self.topics().iter().map(|t| describe(t)).collect();
        }
        names
            .iter()
            .map(|n| match self.topic(n) {
                Some(t) => describe(&t),
                None => TopicDescription {
                    name: n.clone(),
                    partitions: Err(ErrorCode::UnknownTopic),
                },
            })
            .collect()
    }
}

/// Test-only: the thread each topic's creation did its file work on.
#[cfg(test)]
pub(crate) static FILE_WORK_THREADS: Mutex<Vec<(String, std::thread::ThreadId)>> =
    Mutex::new(Vec::new());

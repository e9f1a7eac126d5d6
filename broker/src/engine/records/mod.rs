//! The records service: topics (opening, creating, looking up), produce
//! (checking, routing and queueing batches; producer ids) and the long-poll
//! fetch. It owns every topic of the data directory; the other services
//! reach records through it.
//!
//! - `topics.rs`: a topic and its partitions; creation (explicit and
//!   automatic), lookup, describe.
//! - `produce.rs`: checking a batch, routing its records, queueing them.
//! - `fetch.rs`: the long-poll fetch and its memory budgets; in-process reads.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use super::Shutdown;
use crate::config::{valid_name, BrokerConfig, TopicConfig};
use crate::coordinator::producer_ids::ProducerIds;
use crate::domain::TopicId;
use crate::error::BrokerError;
use crate::partition::Partition;

pub(super) mod fetch;
pub(super) mod produce;
pub(super) mod topics;

pub use fetch::{FetchMemory, GaveUp, COUNT_CHUNK_BYTES};
pub use produce::PendingProduce;
pub(in crate::engine) use topics::compaction_of;
pub(in crate::engine) use topics::Shared;
#[cfg(test)]
pub(crate) use topics::FILE_WORK_THREADS;
pub use topics::{Topic, TOPIC_ID_FILE};

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
    is_tombstone: &dyn Fn(&str) -> bool,
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
        if is_tombstone(&name) && path.is_dir() {
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
pub(in crate::engine) fn parallel_map<T: Sync, R: Send>(
    items: &[T],
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
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

/// The records service: every topic and partition of the data directory,
/// their creation, produce and fetch.
#[derive(Debug)]
pub struct Records {
    config: Arc<BrokerConfig>,
    /// Settings of topics created without explicit ones: `config.default_topic`
    /// at start, changed by [`Records::set_default_topic`] (a configuration reload).
    default_topic: RwLock<TopicConfig>,
    topics: RwLock<BTreeMap<String, Arc<Topic>>>,
    /// Held across a topic's creation (and an administrator's changes of
    /// its partitions or removal), including its file work on the blocking pool.
    create_lock: futures::lock::Mutex<()>,
    /// What every partition shares (the file cache, the producer-state limits).
    shared: Shared,
    /// Idempotent producers' ids (see [`crate::coordinator::producer_ids`]).
    producer_ids: Arc<ProducerIds>,
    shutdown: Shutdown,
}

impl Records {
    /// Opens every topic of the data directory (recovering each partition's
    /// log). Also returns the directories (`is_tombstone` names them) of
    /// topic deletes a crash interrupted, for the caller to finish.
    pub(in crate::engine) fn open(
        config: Arc<BrokerConfig>,
        producer_ids: Arc<ProducerIds>,
        shutdown: Shutdown,
        is_tombstone: &dyn Fn(&str) -> bool,
    ) -> Result<(Self, Vec<(PathBuf, String)>), BrokerError> {
        let shared = Shared::new(&config);
        let (topics, tombstones) = open_topics(&config, &shared, is_tombstone)?;
        let records = Records {
            default_topic: RwLock::new(config.default_topic.clone()),
            config,
            topics: RwLock::new(topics),
            create_lock: futures::lock::Mutex::new(()),
            shared,
            producer_ids,
            shutdown,
        };
        Ok((records, tombstones))
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

    /// Every partition of every topic.
    pub(in crate::engine) fn partitions(&self) -> Vec<Arc<Partition>> {
        self.topics()
            .iter()
            .flat_map(|t| t.partitions.iter().cloned())
            .collect()
    }

    /// The broker's settings.
    pub(in crate::engine) fn config(&self) -> &Arc<BrokerConfig> {
        &self.config
    }

    /// What every partition shares, for partitions opened outside a create
    /// (an administrator's new partitions, a topic opened again).
    pub(in crate::engine) fn shared(&self) -> Shared {
        self.shared.clone()
    }

    /// The hold under which a topic is created, deleted, altered or grown:
    /// one change of a topic at a time, file work included.
    pub(in crate::engine) async fn changing_topics(&self) -> futures::lock::MutexGuard<'_, ()> {
        self.create_lock.lock().await
    }

    /// Puts `topic` in the table, in the place of the topic of its name if
    /// there is one (under [`Records::changing_topics`]).
    pub(in crate::engine) fn install_topic(&self, topic: Arc<Topic>) {
        self.topics
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(topic.name.clone(), topic);
    }

    /// Takes a topic out of the table (under [`Records::changing_topics`]):
    /// nothing finds it from now on.
    pub(in crate::engine) fn take_topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(name)
    }

    /// [`Records::take_topic`] by the topic's id.
    pub(in crate::engine) fn take_topic_by_id(&self, id: TopicId) -> Option<Arc<Topic>> {
        let mut topics = self
            .topics
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let name = topics.values().find(|t| t.id == id)?.name.clone();
        topics.remove(&name)
    }

    /// True once the broker's shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.is_begun()
    }
}

//! Embedded mode: the same engine in-process, with no network, for tests,
//! backtesting engines and single-process pipelines.
//!
//! The operations follow the NanoKafka design: `create_topic`, `produce`,
//! `join_group`, `poll`, `commit`, `lag`. Semantics:
//! - `poll` hands out the record at the group's committed offset of one of
//!   the consumer's partitions (rotating over partitions with data), so work
//!   that is not committed is handed out again: at-least-once.
//! - `commit(topic, group, partition, offset)` takes the offset of the record
//!   that was processed (as NanoKafka does) and stores `offset + 1`, the next
//!   one to read, in the broker's `__consumer_offsets`.
//! - Consumers that join the same (topic, group) split its partitions by the
//!   range assignor over their sorted names; there are no heartbeats in-process.
//! - Reopening on the same directory restores topics, records and offsets.
//!
//! Every async method has a blocking twin on [`Blocking`] for plain threads.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use flume_protocol::record::{self, Header, Record};
use flume_protocol::ErrorCode;
use flume_rt as rt;
use flume_rt::sync::lock;

use crate::config::{BrokerConfig, TopicConfig};
use crate::coordinator::assignor::{assign, Subscription};
use crate::domain::Assignor;
use crate::domain::{ProduceBatch, Route, TopicChanges};
use crate::engine::Engine;
use crate::error::BrokerError;

type Members = HashMap<(String, String), BTreeSet<String>>;

/// What `poll` returns: `(partition, (offset, value))`, as in NanoKafka
/// (`None` for a tombstone, a null value).
pub type Polled = (u32, (u64, Option<Bytes>));

/// An in-process broker.
#[derive(Debug)]
pub struct EmbeddedBroker {
    engine: Arc<Engine>,
    members: Mutex<Members>,
    turn: Mutex<HashMap<(String, String, String), usize>>,
}

impl EmbeddedBroker {
    /// Opens (or creates) a broker on `dir` with default settings. The
    /// directory is locked until [`EmbeddedBroker::close`] or drop: a second
    /// broker on it, in this process or another, gets
    /// [`StorageError::DataDirLocked`](crate::storage::StorageError::DataDirLocked)
    /// naming the holder's PID. A non-empty directory that is not a Flume data
    /// directory is refused (see [`BrokerConfig::allow_foreign_data_dir`]).
    ///
    /// # Errors
    /// A directory that is locked or foreign, storage that cannot be opened.
    pub fn open(dir: impl Into<std::path::PathBuf>) -> Result<Self, BrokerError> {
        Self::with_config(BrokerConfig::new(dir))
    }

    /// Opens a broker with explicit settings (`listen` is ignored).
    ///
    /// # Errors
    /// Invalid settings or storage that cannot be opened.
    pub fn with_config(config: BrokerConfig) -> Result<Self, BrokerError> {
        Ok(EmbeddedBroker {
            engine: Engine::open(config)?,
            members: Mutex::new(HashMap::new()),
            turn: Mutex::new(HashMap::new()),
        })
    }

    /// The engine (for metadata and direct access).
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Blocking wrappers for plain threads.
    pub fn blocking(&self) -> Blocking<'_> {
        Blocking(self)
    }

    /// Creates a topic.
    ///
    /// # Errors
    /// TOPIC_ALREADY_EXISTS, INVALID_NAME, storage errors.
    pub async fn create_topic(&self, name: &str, config: TopicConfig) -> Result<(), BrokerError> {
        let engine = Arc::clone(&self.engine);
        let name = name.to_owned();
        rt::unblock(move || engine.create_topic(&name, config).map(|_| ())).await
    }

    /// Appends one record; the key routes it (FNV-1a), no key spreads records
    /// round robin. Returns its (partition, offset) once it is in the log.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC (auto-create off), QUEUE_FULL (reject mode), RECORD_TOO_LARGE, storage errors.
    pub async fn produce(
        &self,
        topic: &str,
        value: &[u8],
        key: Option<&[u8]>,
    ) -> Result<(u32, u64), BrokerError> {
        self.produce_with(topic, key, value, &[], None).await
    }

    /// Appends one record with headers and an optional explicit partition.
    ///
    /// # Errors
    /// As [`EmbeddedBroker::produce`], and UNKNOWN_PARTITION.
    pub async fn produce_with(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: &[u8],
        headers: &[Header],
        partition: Option<u32>,
    ) -> Result<(u32, u64), BrokerError> {
        let mut buf = Vec::with_capacity(record::encoded_len(key, value, headers));
        record::encode(&mut buf, 0, crate::now_ms(), key, value, headers);
        let batch = ProduceBatch {
            topic: topic.to_owned(),
            route: Route::to(partition),
            records: Bytes::from(buf),
        };
        let result = self.engine.admit_produce(batch).await.finish().await;
        if !result.error.is_ok() {
            return Err(BrokerError::code_for(
                result.error,
                format!("produce to {topic}"),
            ));
        }
        let span = result
            .spans
            .first()
            .ok_or(BrokerError::from(ErrorCode::Unknown))?;
        Ok((
            u32::try_from(span.partition).unwrap_or(0),
            u64::try_from(span.base_offset).unwrap_or(0),
        ))
    }

    /// Adds `consumer` to the (topic, group); partitions are re-split among its consumers.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC (auto-create off), INVALID_NAME.
    pub fn join_group(&self, topic: &str, group: &str, consumer: &str) -> Result<(), BrokerError> {
        if !crate::config::valid_group_id(group) {
            return Err(BrokerError::code_for(
                ErrorCode::InvalidName,
                format!("group name {group:?}"),
            ));
        }
        self.engine.topic_or_create(topic)?;
        lock(&self.members)
            .entry((topic.to_owned(), group.to_owned()))
            .or_default()
            .insert(consumer.to_owned());
        Ok(())
    }

    /// Removes `consumer` from the (topic, group).
    pub fn leave_group(&self, topic: &str, group: &str, consumer: &str) {
        if let Some(m) = lock(&self.members).get_mut(&(topic.to_owned(), group.to_owned())) {
            m.remove(consumer);
        }
    }

    /// The partitions `consumer` owns in the (topic, group).
    pub fn assignment(&self, topic: &str, group: &str, consumer: &str) -> Vec<u32> {
        let members = lock(&self.members);
        let Some(set) = members.get(&(topic.to_owned(), group.to_owned())) else {
            return Vec::new();
        };
        let subs: Vec<Subscription> = set
            .iter()
            .map(|m| Subscription {
                member: m.clone(),
                topics: vec![topic.to_owned()],
            })
            .collect();
        let n = self.engine.topic(topic).map_or(0, |t| t.partition_count());
        assign(Assignor::Range, &subs, &|_| n)
            .get(consumer)
            .and_then(|a| a.get(topic))
            .map(|ps| ps.iter().filter_map(|p| u32::try_from(*p).ok()).collect())
            .unwrap_or_default()
    }

    /// The next uncommitted record of one of the consumer's partitions, as
    /// `(partition, (offset, value))`; `None` when there is nothing new.
    ///
    /// # Errors
    /// UNKNOWN_MEMBER (not joined), storage errors.
    pub async fn poll(
        &self,
        topic: &str,
        group: &str,
        consumer: &str,
    ) -> Result<Option<Polled>, BrokerError> {
        Ok(self
            .poll_record(topic, group, consumer)
            .await?
            .map(|(p, r)| (p, (r.offset, r.value))))
    }

    /// Like [`EmbeddedBroker::poll`], returning the whole record (key, headers, timestamp).
    ///
    /// # Errors
    /// As [`EmbeddedBroker::poll`].
    pub async fn poll_record(
        &self,
        topic: &str,
        group: &str,
        consumer: &str,
    ) -> Result<Option<(u32, Record)>, BrokerError> {
        Ok(self
            .poll_batch(topic, group, consumer, 1)?
            .into_iter()
            .next())
    }

    /// Up to `max` uncommitted records of the consumer's partitions, from
    /// where the group reads each next ([`Engine::resume_offset`]), taking the
    /// partitions in turn (the one after the last that gave records first),
    /// in offset order per partition. Reads on the calling thread
    /// ([`Engine::read_now`]); empty when there is nothing new.
    ///
    /// # Errors
    /// UNKNOWN_MEMBER (not joined), UNKNOWN_TOPIC, storage errors.
    pub fn poll_batch(
        &self,
        topic: &str,
        group: &str,
        consumer: &str,
        max: usize,
    ) -> Result<Vec<(u32, Record)>, BrokerError> {
        let joined = lock(&self.members)
            .get(&(topic.to_owned(), group.to_owned()))
            .is_some_and(|s| s.contains(consumer));
        if !joined {
            return Err(BrokerError::code_for(
                ErrorCode::UnknownMember,
                format!("{consumer} has not joined {group} on {topic}"),
            ));
        }
        let parts = self.assignment(topic, group, consumer);
        if self.engine.topic(topic).is_none() {
            return Err(ErrorCode::UnknownTopic.into());
        }
        let key = (topic.to_owned(), group.to_owned(), consumer.to_owned());
        let first = lock(&self.turn).get(&key).copied().unwrap_or(0);
        let mut out = Vec::new();
        for i in 0..parts.len() {
            if out.len() >= max {
                break;
            }
            let idx = (first + i) % parts.len();
            let p = i32::try_from(parts[idx]).unwrap_or(i32::MAX);
            let Ok(from) = self.engine.resume_offset(group, topic, p) else {
                continue;
            };
            let recs = self.engine.read_now(topic, p, from, max - out.len())?;
            if recs.is_empty() {
                continue;
            }
            lock(&self.turn).insert(key.clone(), idx + 1);
            out.extend(recs.into_iter().map(|r| (parts[idx], r)));
        }
        Ok(out)
    }

    /// Listeners woken when a partition the consumer owns gets records
    /// (create them, then poll again, so an append in between is not missed).
    pub fn listen(
        &self,
        topic: &str,
        group: &str,
        consumer: &str,
    ) -> Vec<event_listener::EventListener> {
        self.engine
            .listen(topic, &self.assignment(topic, group, consumer))
    }

    /// Marks the record at `offset` of `partition` as processed: stores `offset + 1`.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, UNKNOWN_PARTITION, storage errors.
    pub fn commit(
        &self,
        topic: &str,
        group: &str,
        partition: u32,
        offset: u64,
    ) -> Result<(), BrokerError> {
        let t = self
            .engine
            .topic(topic)
            .ok_or(BrokerError::from(ErrorCode::UnknownTopic))?;
        if partition >= t.partition_count() {
            return Err(ErrorCode::UnknownPartition.into());
        }
        let next = i64::try_from(offset.saturating_add(1)).unwrap_or(i64::MAX);
        self.engine.store_offsets(
            group,
            &[(
                topic.to_owned(),
                i32::try_from(partition).unwrap_or(i32::MAX),
                next,
            )],
        )
    }

    /// Records not yet committed by the group, per partition
    /// ([`flume_protocol::lag`]).
    ///
    /// # Errors
    /// UNKNOWN_TOPIC.
    pub fn lag(&self, topic: &str, group: &str) -> Result<BTreeMap<u32, u64>, BrokerError> {
        Ok(self.engine.group_lag(group, topic)?)
    }

    /// Deletes a topic, its records and its committed offsets (see
    /// [`Engine::delete_topic`]); the in-process members of its groups are
    /// forgotten. Polls and produces on it get UNKNOWN_TOPIC afterwards.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, INVALID_NAME, storage errors.
    pub async fn delete_topic(&self, name: &str) -> Result<(), BrokerError> {
        self.engine.delete_topic(name).await?;
        lock(&self.members).retain(|(topic, _), _| topic != name);
        lock(&self.turn).retain(|(topic, _, _), _| topic != name);
        Ok(())
    }

    /// Changes a topic's retention or segment size, durably (see
    /// [`Engine::alter_topic`]); returns its settings after the change.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, INVALID_REQUEST, storage errors.
    pub async fn alter_topic(
        &self,
        name: &str,
        changes: &TopicChanges,
    ) -> Result<TopicConfig, BrokerError> {
        self.engine.alter_topic(name, changes).await
    }

    /// The first record of a partition whose timestamp is at least
    /// `timestamp_ms`: `Some((offset, its timestamp))`, or `None` when no
    /// stored record is that recent.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, UNKNOWN_PARTITION, storage errors.
    pub async fn offset_for_time(
        &self,
        topic: &str,
        partition: u32,
        timestamp_ms: i64,
    ) -> Result<Option<(u64, i64)>, BrokerError> {
        let t = self
            .engine
            .topic(topic)
            .ok_or(BrokerError::from(ErrorCode::UnknownTopic))?;
        let p = i32::try_from(partition)
            .ok()
            .and_then(|p| t.partition(p))
            .ok_or(BrokerError::from(ErrorCode::UnknownPartition))?;
        p.offset_for_time(timestamp_ms).await
    }

    /// Drains every queue to disk and fsyncs.
    pub async fn close(&self) {
        self.engine.shutdown().await;
    }
}

/// Blocking wrappers around [`EmbeddedBroker`], for plain threads.
#[derive(Debug, Clone, Copy)]
pub struct Blocking<'a>(&'a EmbeddedBroker);

impl Blocking<'_> {
    /// See [`EmbeddedBroker::create_topic`].
    ///
    /// # Errors
    /// As there.
    pub fn create_topic(&self, name: &str, config: TopicConfig) -> Result<(), BrokerError> {
        rt::block_on(self.0.create_topic(name, config))
    }
    /// See [`EmbeddedBroker::produce`].
    ///
    /// # Errors
    /// As there.
    pub fn produce(
        &self,
        topic: &str,
        value: &[u8],
        key: Option<&[u8]>,
    ) -> Result<(u32, u64), BrokerError> {
        rt::block_on(self.0.produce(topic, value, key))
    }
    /// See [`EmbeddedBroker::join_group`].
    ///
    /// # Errors
    /// As there.
    pub fn join_group(&self, topic: &str, group: &str, consumer: &str) -> Result<(), BrokerError> {
        self.0.join_group(topic, group, consumer)
    }
    /// See [`EmbeddedBroker::poll`].
    ///
    /// # Errors
    /// As there.
    pub fn poll(
        &self,
        topic: &str,
        group: &str,
        consumer: &str,
    ) -> Result<Option<Polled>, BrokerError> {
        rt::block_on(self.0.poll(topic, group, consumer))
    }
    /// See [`EmbeddedBroker::commit`].
    ///
    /// # Errors
    /// As there.
    pub fn commit(
        &self,
        topic: &str,
        group: &str,
        partition: u32,
        offset: u64,
    ) -> Result<(), BrokerError> {
        self.0.commit(topic, group, partition, offset)
    }
    /// See [`EmbeddedBroker::lag`].
    ///
    /// # Errors
    /// As there.
    pub fn lag(&self, topic: &str, group: &str) -> Result<BTreeMap<u32, u64>, BrokerError> {
        self.0.lag(topic, group)
    }
    /// See [`EmbeddedBroker::delete_topic`].
    ///
    /// # Errors
    /// As there.
    pub fn delete_topic(&self, name: &str) -> Result<(), BrokerError> {
        rt::block_on(self.0.delete_topic(name))
    }
    /// See [`EmbeddedBroker::alter_topic`].
    ///
    /// # Errors
    /// As there.
    pub fn alter_topic(
        &self,
        name: &str,
        changes: &TopicChanges,
    ) -> Result<TopicConfig, BrokerError> {
        rt::block_on(self.0.alter_topic(name, changes))
    }
    /// See [`EmbeddedBroker::offset_for_time`].
    ///
    /// # Errors
    /// As there.
    pub fn offset_for_time(
        &self,
        topic: &str,
        partition: u32,
        timestamp_ms: i64,
    ) -> Result<Option<(u64, i64)>, BrokerError> {
        rt::block_on(self.0.offset_for_time(topic, partition, timestamp_ms))
    }
    /// See [`EmbeddedBroker::close`].
    pub fn close(&self) {
        rt::block_on(self.0.close());
    }
}

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
//! - Queues (share groups, KIP-932): `share_poll` acquires records for a
//!   consumer of a share group, each for the group's lock duration and
//!   with its delivery count, from every partition of the topic (any number
//!   of consumers share them); `share_acknowledge` accepts, releases or
//!   rejects one. A record not acknowledged in time goes back to the
//!   others. Each `share_poll` keeps the consumer in the group (it leaves
//!   with `share_leave`, or after the share session timeout without polls).
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
use crate::server::InProcessServer;

type Members = HashMap<(String, String), BTreeSet<String>>;

/// A share-group consumer's membership: its epoch and topics.
type ShareMembers = HashMap<(String, String), (i32, BTreeSet<String>)>;

/// A record acquired through a share group.
#[derive(Debug, Clone)]
pub struct ShareRecord {
    /// Its partition.
    pub partition: u32,
    /// The record.
    pub record: Record,
    /// How many times it has been delivered, this time included.
    pub delivery_count: u16,
}

pub use crate::engine::AckType;

/// A share-group failure as the embedded API reports it.
fn share_error(e: crate::engine::ShareError) -> BrokerError {
    use crate::engine::{ShareError as S, ShareGroupError as G};
    let e = match e {
        S::Broker(b) => return b,
        e => e,
    };
    let code = match &e {
        S::Broker(_) => ErrorCode::StorageError,
        S::Group(G::UnknownMember(_)) => ErrorCode::UnknownMember,
        S::Group(G::FencedEpoch { .. }) => ErrorCode::IllegalGeneration,
        S::Group(G::GroupFull { .. } | G::TooManyGroups(_)) | S::Limit(_) => {
            ErrorCode::LimitReached
        }
        S::UnknownTopic(_) => ErrorCode::UnknownTopic,
        S::UnknownPartition { .. } => ErrorCode::UnknownPartition,
        S::NotAssigned { .. } => ErrorCode::NotAssigned,
        S::NotEmpty(_) => ErrorCode::GroupNotEmpty,
        S::RecordState(crate::engine::AckError::NotAcquired { .. }) => {
            ErrorCode::InvalidRecordState
        }
        S::Group(G::Invalid(_)) | S::RecordState(_) | S::Session(_) => ErrorCode::InvalidRequest,
    };
    BrokerError::code_for(code, e.to_string())
}

/// What `poll` returns: `(partition, (offset, value))`, as in NanoKafka
/// (`None` for a tombstone, a null value).
pub type Polled = (u32, (u64, Option<Bytes>));

/// An in-process broker.
#[derive(Debug)]
pub struct EmbeddedBroker {
    engine: Arc<Engine>,
    members: Mutex<Members>,
    turn: Mutex<HashMap<(String, String, String), usize>>,
    share_members: Mutex<ShareMembers>,
    /// The Flume protocol in-process, once [`EmbeddedBroker::address`] was asked for.
    in_process: Mutex<Option<Arc<InProcessServer>>>,
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
            share_members: Mutex::new(HashMap::new()),
            in_process: Mutex::new(None),
        })
    }

    /// The address at which the SDK of this process reaches this broker
    /// without TCP (`inproc://flume-embedded-<pid>-<n>`): the same
    /// application code that runs on `host:port` or `kafka://...` runs here,
    /// e.g. `Producer::connect(&broker.address()?)` or a `GroupConsumer`
    /// with automatic heartbeats and rebalances. Served from the first call
    /// until [`EmbeddedBroker::close`].
    ///
    /// # Errors
    /// The users file (for authentication) cannot be read.
    pub fn address(&self) -> Result<String, BrokerError> {
        let mut slot = lock(&self.in_process);
        if let Some(s) = slot.as_ref() {
            return Ok(s.address().to_owned());
        }
        let server = Arc::new(InProcessServer::start(&self.engine)?);
        let address = server.address().to_owned();
        *slot = Some(server);
        Ok(address)
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
        rt::unblock(move || engine.records().create_topic(&name, config).map(|_| ())).await
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
        record::encode(
            &mut buf,
            0,
            self.engine.config().clock.wall_ms(),
            key,
            value,
            headers,
        );
        let batch = ProduceBatch {
            topic: topic.to_owned(),
            route: Route::to(partition),
            records: Bytes::from(buf),
        };
        let result = self
            .engine
            .records()
            .admit_produce(batch)
            .await
            .finish()
            .await;
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
        self.engine.records().topic_or_create(topic)?;
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
        let n = self
            .engine
            .records()
            .topic(topic)
            .map_or(0, |t| t.partition_count());
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
    /// where the group reads each next ([`crate::engine::Groups::resume_offset`]), taking the
    /// partitions in turn (the one after the last that gave records first),
    /// in offset order per partition. Reads on the calling thread
    /// ([`crate::engine::Records::read_now`]); empty when there is nothing new.
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
        if self.engine.records().topic(topic).is_none() {
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
            let Ok(from) = self.engine.groups().resume_offset(group, topic, p) else {
                continue;
            };
            let recs = self
                .engine
                .records()
                .read_now(topic, p, from, max - out.len())?;
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
            .records()
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
            .records()
            .topic(topic)
            .ok_or(BrokerError::from(ErrorCode::UnknownTopic))?;
        if partition >= t.partition_count() {
            return Err(ErrorCode::UnknownPartition.into());
        }
        let next = i64::try_from(offset.saturating_add(1)).unwrap_or(i64::MAX);
        self.engine.groups().store_offsets(
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
        Ok(self.engine.groups().group_lag(group, topic)?)
    }

    /// Deletes a topic, its records and its committed offsets (see
    /// [`crate::engine::Admin::delete_topic`]); the in-process members of its groups are
    /// forgotten. Polls and produces on it get UNKNOWN_TOPIC afterwards.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, INVALID_NAME, storage errors.
    pub async fn delete_topic(&self, name: &str) -> Result<(), BrokerError> {
        self.engine.admin().delete_topic(name).await?;
        lock(&self.members).retain(|(topic, _), _| topic != name);
        lock(&self.turn).retain(|(topic, _, _), _| topic != name);
        Ok(())
    }

    /// Changes a topic's retention or segment size, durably (see
    /// [`crate::engine::Admin::alter_topic`]); returns its settings after the change.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, INVALID_REQUEST, storage errors.
    pub async fn alter_topic(
        &self,
        name: &str,
        changes: &TopicChanges,
    ) -> Result<TopicConfig, BrokerError> {
        self.engine.admin().alter_topic(name, changes).await
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
            .records()
            .topic(topic)
            .ok_or(BrokerError::from(ErrorCode::UnknownTopic))?;
        let p = i32::try_from(partition)
            .ok()
            .and_then(|p| t.partition(p))
            .ok_or(BrokerError::from(ErrorCode::UnknownPartition))?;
        p.offset_for_time(timestamp_ms).await
    }

    /// Keeps `consumer` in share group `group` reading `topic` (joining, or
    /// joining again after its session ran out).
    async fn share_member(
        &self,
        topic: &str,
        group: &str,
        consumer: &str,
    ) -> Result<(), BrokerError> {
        use crate::engine::ShareHeartbeat;
        let key = (group.to_owned(), consumer.to_owned());
        let (epoch, topics, new_topic) = {
            let mut m = lock(&self.share_members);
            let e = m.entry(key.clone()).or_insert((0, BTreeSet::new()));
            let new_topic = e.1.insert(topic.to_owned());
            (e.0, e.1.clone(), new_topic)
        };
        let subscribed: Vec<String> = topics.into_iter().collect();
        for attempt in 0..2 {
            let join = epoch == 0 || new_topic || attempt > 0;
            let beat = self
                .engine
                .shares()
                .share_heartbeat(ShareHeartbeat {
                    group,
                    member_id: consumer,
                    member_epoch: if join { 0 } else { epoch },
                    subscribed: join.then(|| subscribed.clone()),
                    client_id: "embedded",
                    client_host: "in-process",
                })
                .await;
            match beat {
                Ok(b) => {
                    if let Some(e) = lock(&self.share_members).get_mut(&key) {
                        e.0 = b.member_epoch;
                    }
                    return Ok(());
                }
                // Its session ran out (or it was fenced): join again.
                Err(crate::engine::ShareError::Group(
                    crate::engine::ShareGroupError::UnknownMember(_)
                    | crate::engine::ShareGroupError::FencedEpoch { .. },
                )) if attempt == 0 => continue,
                Err(e) => return Err(share_error(e)),
            }
        }
        Err(BrokerError::code_for(
            ErrorCode::UnknownMember,
            format!("{consumer} could not join share group {group}"),
        ))
    }

    /// Acquires up to `max` records of `topic` for `consumer` of share
    /// group `group` (joining it on the first call), each locked for the
    /// group's lock duration, waiting up to `wait` when none is available.
    /// Acknowledge each with [`EmbeddedBroker::share_acknowledge`]; one not
    /// acknowledged in time goes back to the others with its delivery
    /// count.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, a group at its limits, storage errors.
    pub async fn share_poll(
        &self,
        topic: &str,
        group: &str,
        consumer: &str,
        max: usize,
        wait: std::time::Duration,
    ) -> Result<Vec<ShareRecord>, BrokerError> {
        let t = self
            .engine
            .records()
            .topic(topic)
            .ok_or(BrokerError::from(ErrorCode::UnknownTopic))?;
        self.share_member(topic, group, consumer).await?;
        let partitions = (0..i32::try_from(t.partition_count()).unwrap_or(i32::MAX))
            .map(|partition| crate::engine::ShareTp {
                topic: topic.to_owned(),
                partition,
            })
            .collect();
        let fetched = self
            .engine
            .shares()
            .share_fetch(crate::engine::ShareFetchSpec {
                group: group.to_owned(),
                member: consumer.to_owned(),
                partitions,
                max_records: max.max(1),
                max_bytes: 1 << 20,
                max_wait: wait,
            })
            .await
            .map_err(share_error)?;
        let mut out = Vec::new();
        for f in fetched {
            if let Some(e) = f.error {
                return Err(share_error(e));
            }
            let partition = u32::try_from(f.tp.partition).unwrap_or(0);
            let records = record::decode_all(&Bytes::from(f.records))
                .map_err(|e| BrokerError::code_for(ErrorCode::CorruptRecord, e.to_string()))?;
            for r in records {
                let o = i64::try_from(r.offset).unwrap_or(i64::MAX);
                let delivery_count = f
                    .acquired
                    .iter()
                    .find(|a| a.first_offset <= o && o <= a.last_offset)
                    .map_or(1, |a| a.delivery_count);
                out.push(ShareRecord {
                    partition,
                    record: r,
                    delivery_count,
                });
            }
        }
        Ok(out)
    }

    /// Accepts, releases or rejects the record at `offset` of `partition`
    /// that `consumer` acquired; answers once it is stored.
    ///
    /// # Errors
    /// INVALID_REQUEST: the consumer does not hold that record (its lock
    /// ran out, or it was acknowledged already); storage errors.
    pub async fn share_acknowledge(
        &self,
        topic: &str,
        group: &str,
        consumer: &str,
        partition: u32,
        offset: u64,
        ack: AckType,
    ) -> Result<(), BrokerError> {
        let o = i64::try_from(offset).unwrap_or(i64::MAX);
        let results = self
            .engine
            .shares()
            .share_acknowledge(
                group,
                consumer,
                &[crate::engine::ShareAck {
                    tp: crate::engine::ShareTp {
                        topic: topic.to_owned(),
                        partition: i32::try_from(partition).unwrap_or(i32::MAX),
                    },
                    first: o,
                    last: o,
                    ack,
                }],
            )
            .await
            .map_err(share_error)?;
        match results.into_iter().next() {
            Some(Err(e)) => Err(share_error(e)),
            _ => Ok(()),
        }
    }

    /// Takes `consumer` out of share group `group`: what it holds goes back
    /// to the others at once.
    ///
    /// # Errors
    /// Storage errors.
    pub async fn share_leave(&self, group: &str, consumer: &str) -> Result<(), BrokerError> {
        let was = lock(&self.share_members).remove(&(group.to_owned(), consumer.to_owned()));
        if was.is_none() {
            return Ok(());
        }
        match self
            .engine
            .shares()
            .share_heartbeat(crate::engine::ShareHeartbeat {
                group,
                member_id: consumer,
                member_epoch: -1,
                subscribed: None,
                client_id: "embedded",
                client_host: "in-process",
            })
            .await
        {
            Ok(_)
            | Err(crate::engine::ShareError::Group(
                crate::engine::ShareGroupError::UnknownMember(_),
            )) => Ok(()),
            Err(e) => Err(share_error(e)),
        }
    }

    /// Drains every queue to disk and fsyncs; in-process connections (see
    /// [`EmbeddedBroker::address`]) finish what they serve first, up to the
    /// shutdown timeout.
    pub async fn close(&self) {
        let served = lock(&self.in_process).clone();
        if let Some(server) = served {
            self.engine.begin_shutdown();
            let deadline = std::time::Instant::now() + self.engine.config().shutdown_timeout;
            server.stop(deadline).await;
        }
        self.engine.shutdown().await;
    }
}

/// Blocking wrappers around [`EmbeddedBroker`], for plain threads.
#[derive(Debug, Clone, Copy)]
pub struct Blocking<'a>(&'a EmbeddedBroker);

impl Blocking<'_> {
    /// See [`EmbeddedBroker::share_poll`].
    ///
    /// # Errors
    /// As there.
    pub fn share_poll(
        &self,
        topic: &str,
        group: &str,
        consumer: &str,
        max: usize,
        wait: std::time::Duration,
    ) -> Result<Vec<ShareRecord>, BrokerError> {
        rt::block_on(self.0.share_poll(topic, group, consumer, max, wait))
    }
    /// See [`EmbeddedBroker::share_acknowledge`].
    ///
    /// # Errors
    /// As there.
    pub fn share_acknowledge(
        &self,
        topic: &str,
        group: &str,
        consumer: &str,
        partition: u32,
        offset: u64,
        ack: AckType,
    ) -> Result<(), BrokerError> {
        rt::block_on(
            self.0
                .share_acknowledge(topic, group, consumer, partition, offset, ack),
        )
    }
    /// See [`EmbeddedBroker::share_leave`].
    ///
    /// # Errors
    /// As there.
    pub fn share_leave(&self, group: &str, consumer: &str) -> Result<(), BrokerError> {
        rt::block_on(self.0.share_leave(group, consumer))
    }
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

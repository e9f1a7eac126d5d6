//! The one place the Kafka front end calls the broker's engine.
//!
//! Everything else under [`crate::kafka`] speaks the types below (topics,
//! partitions, records with key, value, headers and timestamp, Kafka error
//! codes) and never names the engine, so when the engine's API changes only
//! this file follows it.

use std::sync::Arc;

use bytes::Bytes;
use flume_protocol::ErrorCode;
use uuid::Uuid;

use super::errors as kerr;
use crate::budget::MemoryBudget;
use crate::config::TopicConfig;
use crate::engine::{Committed, TxnError, TxnListing, TxnMeta, TxnOffset, TxnState};
use crate::domain::{
    ClientJoinSpec, ClientJoined, FetchFrom, FetchSpec, GroupDescription, GroupError, GroupListing,
    Member, ProducerError, ReadAs, SyncSpec, Synced, TopicId, TopicPartition,
};
use crate::engine::{Engine, FetchMemory, TxnFailure};

/// A topic: its name, id and partition count, and its configs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    /// Name.
    pub name: String,
    /// Id (all zero for a topic not created: a `validate_only` CreateTopics).
    pub id: Uuid,
    /// Number of partitions (numbered from 0).
    pub partitions: i32,
    /// Every topic config by Kafka's name, its value and source, for
    /// DescribeConfigs and CreateTopics v5+.
    pub configs: Vec<crate::config::named::Described>,
}

/// A topic's name, id and partition count, without its configs: for the
/// answers that list partitions (DescribeTopicPartitions, ElectLeaders).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicBrief {
    /// Name.
    pub name: String,
    /// Id.
    pub id: Uuid,
    /// Number of partitions (numbered from 0).
    pub partitions: i32,
}

/// A topic id as Kafka's messages carry it.
pub fn kafka_id(id: TopicId) -> Uuid {
    Uuid::from_bytes(id.0)
}

/// One partition to read.
#[derive(Debug, Clone)]
pub struct FetchWant {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// First offset wanted.
    pub offset: i64,
    /// Most bytes from this partition (the first record always comes whole).
    pub max_bytes: i32,
}

/// What one partition gave.
#[derive(Debug, Clone)]
pub struct FetchGot {
    /// Kafka error code (0 on success).
    pub error: i16,
    /// Log end offset.
    pub high_watermark: i64,
    /// Oldest offset stored.
    pub log_start: i64,
    /// The records read, as a Kafka record set (batches).
    pub records: Bytes,
    /// The last stable offset.
    pub last_stable: i64,
    /// A read_committed fetch: the aborted transactions among the records
    /// (producer id, first offset).
    pub aborted: Vec<(i64, i64)>,
}

/// A Kafka Fetch as the engine is asked it (see [`Backend::fetch`]).
#[derive(Debug, Clone, Copy)]
pub struct FetchAsk<'a> {
    /// Longest wait for `min_bytes`.
    pub max_wait_ms: i32,
    /// Bytes to wait for.
    pub min_bytes: i32,
    /// Most bytes in all.
    pub max_bytes: i32,
    /// The partitions and offsets.
    pub wants: &'a [FetchWant],
    /// `read_committed` (isolation level 1).
    pub committed: bool,
}

/// What a produce to a topic is held to (see [`Backend::produce_limits`]).
#[derive(Debug, Clone, Copy)]
pub struct ProduceLimits {
    /// The largest record batch (`max.message.bytes`).
    pub max_message_bytes: usize,
    /// Records get their append time (`message.timestamp.type=LogAppendTime`).
    pub log_append_time: bool,
    /// The codec batches are stored with (`compression.type`; `None`: the producer's).
    pub compression: Option<flume_protocol::kafka_batch::Compression>,
    /// Every record needs a key (`cleanup.policy` compacts).
    pub keyed_only: bool,
}

/// The engine as the Kafka front end needs it.
#[derive(Debug, Clone)]
pub struct Backend {
    engine: Arc<Engine>,
}

/// Kafka's code for a Flume engine error.
pub fn kafka_code(code: ErrorCode) -> i16 {
    match code {
        ErrorCode::None => kerr::NONE,
        ErrorCode::UnknownTopic | ErrorCode::UnknownPartition => kerr::UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode::OffsetOutOfRange => kerr::OFFSET_OUT_OF_RANGE,
        ErrorCode::RecordTooLarge => kerr::MESSAGE_TOO_LARGE,
        ErrorCode::CorruptRecord => kerr::CORRUPT_MESSAGE,
        ErrorCode::TopicAlreadyExists => kerr::TOPIC_ALREADY_EXISTS,
        ErrorCode::InvalidName => kerr::INVALID_TOPIC_EXCEPTION,
        ErrorCode::InvalidRequest => kerr::INVALID_REQUEST,
        ErrorCode::StorageError => kerr::KAFKA_STORAGE_ERROR,
        ErrorCode::QueueFull | ErrorCode::LimitReached => kerr::THROTTLING_QUOTA_EXCEEDED,
        ErrorCode::ShuttingDown => kerr::LEADER_NOT_AVAILABLE,
        ErrorCode::UnknownMember => kerr::UNKNOWN_MEMBER_ID,
        ErrorCode::IllegalGeneration => kerr::ILLEGAL_GENERATION,
        ErrorCode::RebalanceInProgress => kerr::REBALANCE_IN_PROGRESS,
        ErrorCode::UnsupportedApi => kerr::UNSUPPORTED_VERSION,
        ErrorCode::OffsetMetadataTooLarge => kerr::OFFSET_METADATA_TOO_LARGE,
        ErrorCode::InvalidConfig => kerr::INVALID_CONFIG,
        ErrorCode::InvalidRecord => kerr::INVALID_RECORD,
        _ => kerr::UNKNOWN_SERVER_ERROR,
    }
}

impl Backend {
    /// The ACLs and the authorisation check.
    pub fn acl(&self) -> &crate::security::acl::Authorizer {
        self.engine.acl()
    }

    /// The ACLs, shared (for work off the executor).
    pub fn acl_arc(&self) -> &std::sync::Arc<crate::security::acl::Authorizer> {
        self.engine.acl()
    }

    /// Wraps the engine.
    pub fn new(engine: Arc<Engine>) -> Self {
        Backend { engine }
    }

    /// The engine, for the APIs that call it as Flume's front end does
    /// (share groups first; issue 42 moves the rest).
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Whether the broker is stopping (connections finish and close).
    pub fn is_shutting_down(&self) -> bool {
        self.engine.is_shutting_down()
    }

    /// Resolves when the broker begins to shut down.
    pub fn shutdown_signal(&self) -> async_channel::Receiver<()> {
        self.engine.shutdown_signal()
    }

    /// The largest record the broker stores (key, value and headers).
    pub fn max_record_bytes(&self) -> usize {
        self.engine.config().max_record_bytes
    }

    /// What a produce to `topic` is held to, by its configs (a topic that
    /// does not exist yet, auto-created by the produce, by the broker's
    /// defaults).
    pub fn produce_limits(&self, topic: &str) -> ProduceLimits {
        use crate::config::CompressionType as C;
        use flume_protocol::kafka_batch::Compression;
        let of = |tc: &TopicConfig| ProduceLimits {
            max_message_bytes: usize::try_from(tc.max_message_bytes).unwrap_or(usize::MAX),
            log_append_time: tc.message_timestamp_type
                == crate::config::TimestampType::LogAppendTime,
            compression: match tc.compression_type {
                C::Producer => None,
                C::Uncompressed => Some(Compression::None),
                C::Gzip => Some(Compression::Gzip),
                C::Snappy => Some(Compression::Snappy),
                C::Lz4 => Some(Compression::Lz4),
                C::Zstd => Some(Compression::Zstd),
            },
            keyed_only: tc.cleanup_policy.compacts(),
        };
        match self.engine.topic(topic) {
            Some(t) => of(&t.config),
            None => of(&self.engine.default_topic()),
        }
    }

    /// Whether unknown topics are created on first produce or metadata request.
    pub fn auto_create(&self) -> bool {
        self.engine.config().auto_create_topics
    }

    fn info(&self, t: &crate::engine::Topic) -> TopicInfo {
        Self::info_of(
            &t.name,
            kafka_id(t.id),
            &t.config,
            &self.engine.default_topic(),
        )
    }

    fn info_of(name: &str, id: Uuid, tc: &TopicConfig, defaults: &TopicConfig) -> TopicInfo {
        TopicInfo {
            name: name.to_owned(),
            id,
            partitions: i32::try_from(tc.partitions).unwrap_or(i32::MAX),
            configs: crate::config::named::describe_topic(tc, defaults),
        }
    }

    fn brief(t: &crate::engine::Topic) -> TopicBrief {
        TopicBrief {
            name: t.name.clone(),
            id: kafka_id(t.id),
            partitions: i32::try_from(t.partition_count()).unwrap_or(i32::MAX),
        }
    }

    /// Every topic's name, id and partition count, by name.
    pub fn topic_briefs(&self) -> Vec<TopicBrief> {
        self.engine
            .topics()
            .iter()
            .map(|t| Self::brief(t))
            .collect()
    }

    /// One topic's name, id and partition count.
    pub fn topic_brief(&self, name: &str) -> Option<TopicBrief> {
        self.engine.topic(name).map(|t| Self::brief(&t))
    }

    /// The name, id and partition count of the topic with this id.
    pub fn topic_brief_by_id(&self, id: Uuid) -> Option<TopicBrief> {
        self.engine
            .topic_by_id(TopicId(id.into_bytes()))
            .map(|t| Self::brief(&t))
    }

    /// The topic with this id.
    pub fn topic_by_id(&self, id: Uuid) -> Option<TopicInfo> {
        self.engine
            .topic_by_id(TopicId(id.into_bytes()))
            .map(|t| self.info(&t))
    }

    /// The broker's settings and its defaults for new topics by the
    /// broker's config names, as served by the Kafka listener `listeners`.
    pub fn broker_configs(
        &self,
        listeners: &crate::config::broker_named::KafkaListeners,
    ) -> Vec<crate::config::named::Described> {
        crate::config::broker_named::describe_broker_all(
            self.engine.config(),
            &self.engine.default_topic(),
            Some(listeners),
        )
    }

    /// Changes a topic's configs by name (IncrementalAlterConfigs,
    /// AlterConfigs), all or nothing.
    ///
    /// # Errors
    /// A Kafka error code (UNKNOWN_TOPIC_OR_PARTITION, INVALID_CONFIG, ...)
    /// and a message naming the config and the value.
    pub async fn alter_topic_configs(
        &self,
        name: &str,
        ops: &[crate::domain::ConfigOp],
        validate_only: bool,
    ) -> Result<(), (i16, String)> {
        self.engine
            .alter_topic_configs(name, ops, validate_only)
            .await
            .map(|_| ())
            .map_err(|e| (kafka_code(e.code()), detail(&e)))
    }

    /// Every topic, by name.
    pub fn topics(&self) -> Vec<TopicInfo> {
        self.engine.topics().iter().map(|t| self.info(t)).collect()
    }

    /// One topic.
    pub fn topic(&self, name: &str) -> Option<TopicInfo> {
        self.engine.topic(name).map(|t| self.info(&t))
    }

    /// The topic, created with the broker's defaults when auto-create is on.
    ///
    /// # Errors
    /// A Kafka error code (unknown topic, invalid name, storage).
    pub async fn topic_or_create(&self, name: &str) -> Result<TopicInfo, i16> {
        self.engine
            .auto_create(name)
            .await
            .map(|t| self.info(&t))
            .map_err(|e| kafka_code(e.code()))
    }

    /// Creates a topic; `partitions` -1 takes the broker default; `configs`
    /// by Kafka's names (a null value is refused).
    ///
    /// # Errors
    /// A Kafka error code and a message.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: &[(String, Option<String>)],
        validate_only: bool,
    ) -> Result<TopicInfo, (i16, String)> {
        let defaults = self.engine.default_topic();
        let mut tc: TopicConfig = defaults.for_new_topic();
        if partitions != -1 {
            match u32::try_from(partitions) {
                Ok(p) if p >= 1 => tc.partitions = p,
                _ => {
                    return Err((
                        kerr::INVALID_PARTITIONS,
                        format!("{partitions} partitions: at least 1"),
                    ))
                }
            }
        }
        for (k, v) in configs {
            let Some(v) = v else {
                return Err((
                    kerr::INVALID_CONFIG,
                    format!("topic config {k} has a null value"),
                ));
            };
            tc.set_named(k, v)
                .map_err(|e| (kerr::INVALID_CONFIG, e.to_string()))?;
        }
        if let Err(e) = tc.check() {
            let code = if e.starts_with("partitions") {
                kerr::INVALID_PARTITIONS
            } else {
                kerr::INVALID_CONFIG
            };
            return Err((code, e));
        }
        if validate_only {
            if !crate::config::valid_name(name) {
                return Err((
                    kerr::INVALID_TOPIC_EXCEPTION,
                    format!("topic name {name:?}"),
                ));
            }
            if self.engine.topic(name).is_some() {
                return Err((kerr::TOPIC_ALREADY_EXISTS, name.to_owned()));
            }
            // Nothing was created, so no id (Kafka's controller makes one up).
            return Ok(Self::info_of(name, Uuid::nil(), &tc, &defaults));
        }
        match self.engine.create_topic_async(name, tc).await {
            Ok(t) => Ok(self.info(&t)),
            Err(e) => Err((kafka_code(e.code()), e.to_string())),
        }
    }

    /// `(log start, log end)` of a partition.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC_OR_PARTITION.
    pub fn offsets(&self, topic: &str, partition: i32) -> Result<(i64, i64), i16> {
        let t = self
            .engine
            .topic(topic)
            .ok_or(kerr::UNKNOWN_TOPIC_OR_PARTITION)?;
        let p = t
            .partition(partition)
            .ok_or(kerr::UNKNOWN_TOPIC_OR_PARTITION)?;
        let to = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        Ok((to(p.start_offset()), to(p.end_offset())))
    }

    /// The producers a partition tracks (DescribeProducers).
    ///
    /// # Errors
    /// UNKNOWN_TOPIC_OR_PARTITION.
    pub fn producers(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Vec<crate::domain::ProducerState>, i16> {
        self.engine
            .topic(topic)
            .and_then(|t| t.partition(partition).map(|p| p.producers()))
            .ok_or(kerr::UNKNOWN_TOPIC_OR_PARTITION)
    }

    /// [`Backend::offsets`] with the last stable offset for the end (a
    /// `read_committed` ListOffsets).
    ///
    /// # Errors
    /// UNKNOWN_TOPIC_OR_PARTITION.
    pub fn stable_offsets(&self, topic: &str, partition: i32) -> Result<(i64, i64), i16> {
        let t = self
            .engine
            .topic(topic)
            .ok_or(kerr::UNKNOWN_TOPIC_OR_PARTITION)?;
        let p = t
            .partition(partition)
            .ok_or(kerr::UNKNOWN_TOPIC_OR_PARTITION)?;
        let to = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        Ok((to(p.start_offset()), to(p.stable_offset())))
    }

    // ------------------------------------------------------------ admin: delete, offsets by time

    /// Deletes a topic (see [`Engine::delete_topic`]); its id.
    ///
    /// # Errors
    /// A Kafka error code and a message.
    pub async fn delete_topic(&self, name: &str) -> Result<Uuid, (i16, String)> {
        self.engine
            .delete_topic_returning_id(name)
            .await
            .map(kafka_id)
            .map_err(|e| (kafka_code(e.code()), e.to_string()))
    }

    /// Deletes the topic with this id (see [`Engine::delete_topic_by_id`]);
    /// its name.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC_ID and a message for an id no topic has, else a Kafka
    /// error code and a message.
    pub async fn delete_topic_by_id(&self, id: Uuid) -> Result<String, (i16, String)> {
        let id = TopicId(id.into_bytes());
        match self.engine.delete_topic_by_id(id).await {
            Ok(name) => Ok(name),
            Err(e) if e.code() == ErrorCode::UnknownTopic => {
                Err((kerr::UNKNOWN_TOPIC_ID, format!("no topic has the id {id}")))
            }
            Err(e) => Err((kafka_code(e.code()), e.to_string())),
        }
    }

    /// Moves a partition's log start to `before` (`None`: its end); the new
    /// log start.
    ///
    /// # Errors
    /// A Kafka error code.
    pub async fn delete_records(
        &self,
        topic: &str,
        partition: i32,
        before: Option<u64>,
    ) -> Result<i64, i16> {
        let at = TopicPartition::new(topic, partition);
        self.engine
            .delete_records(&at, before)
            .await
            .map(|s| i64::try_from(s).unwrap_or(i64::MAX))
            .map_err(kafka_code)
    }

    /// Grows a topic to `count` partitions (see [`Engine::create_partitions`]).
    ///
    /// # Errors
    /// A Kafka error code and a message: INVALID_PARTITIONS for a count that
    /// is not more than the topic has (or out of range), else as the engine's.
    pub async fn create_partitions(
        &self,
        name: &str,
        count: i32,
        validate_only: bool,
    ) -> Result<(), (i16, String)> {
        let Ok(total) = u32::try_from(count) else {
            return Err((
                kerr::INVALID_PARTITIONS,
                format!("{count} partitions: a count is at least 1"),
            ));
        };
        match self
            .engine
            .create_partitions(name, total, validate_only)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.code() == ErrorCode::InvalidRequest => {
                Err((kerr::INVALID_PARTITIONS, e.to_string()))
            }
            Err(e) => Err((kafka_code(e.code()), e.to_string())),
        }
    }

    /// Deletes a group with no members and its committed offsets (see
    /// [`Engine::delete_group`]); the Kafka error code (0 when done).
    pub async fn delete_group(&self, group: &str) -> i16 {
        match self.engine.delete_group(group).await {
            Ok(_) => kerr::NONE,
            Err(ErrorCode::GroupNotEmpty) => kerr::NON_EMPTY_GROUP,
            Err(ErrorCode::UnknownGroup) => kerr::GROUP_ID_NOT_FOUND,
            Err(ErrorCode::InvalidName) => kerr::INVALID_GROUP_ID,
            Err(c) => kafka_code(c),
        }
    }

    /// Deletes a group's committed offsets on some partitions (see
    /// [`Engine::delete_offsets`]): one Kafka error code per partition.
    ///
    /// # Errors
    /// The group's Kafka error code (GROUP_ID_NOT_FOUND, INVALID_GROUP_ID, storage).
    pub async fn delete_offsets(
        &self,
        group: &str,
        partitions: &[TopicPartition],
    ) -> Result<Vec<i16>, i16> {
        match self.engine.delete_offsets(group, partitions).await {
            Ok(codes) => Ok(codes
                .into_iter()
                .map(|c| match c {
                    ErrorCode::GroupNotEmpty => kerr::GROUP_SUBSCRIBED_TO_TOPIC,
                    c => kafka_code(c),
                })
                .collect()),
            Err(ErrorCode::UnknownGroup) => Err(kerr::GROUP_ID_NOT_FOUND),
            Err(ErrorCode::InvalidName) => Err(kerr::INVALID_GROUP_ID),
            Err(c) => Err(kafka_code(c)),
        }
    }

    /// The data directory (Kafka's one log directory).
    pub fn log_dir(&self) -> String {
        let dir = self.engine.data_dir();
        std::fs::canonicalize(&dir)
            .unwrap_or(dir)
            .display()
            .to_string()
    }

    /// Bytes on disk of each partition of a topic, in order (`None`: no such topic).
    pub fn partition_sizes(&self, topic: &str) -> Option<Vec<(i32, i64)>> {
        let t = self.engine.topic(topic)?;
        Some(
            t.statuses(true)
                .into_iter()
                .map(|s| {
                    let bytes = s.disk.map_or(0, |(b, _)| b);
                    (
                        i32::try_from(s.partition).unwrap_or(i32::MAX),
                        i64::try_from(bytes).unwrap_or(i64::MAX),
                    )
                })
                .collect(),
        )
    }

    /// The offset and timestamp of the first record with a partition's
    /// largest timestamp; `(-1, -1)` when it holds none.
    ///
    /// # Errors
    /// A Kafka error code.
    pub async fn max_timestamp(&self, topic: &str, partition: i32) -> Result<(i64, i64), i16> {
        let query = [(
            TopicPartition::new(topic, partition),
            crate::domain::OffsetSpec::MaxTimestamp,
        )];
        let found = self.engine.list_offsets(&query).await;
        match found.first() {
            Some(f) if f.error.is_ok() => Ok((f.offset, f.timestamp)),
            Some(f) => Err(kafka_code(f.error)),
            None => Err(kerr::UNKNOWN_SERVER_ERROR),
        }
    }

    /// The first offset of a partition whose record timestamp is at least
    /// `timestamp` (ms) and that record's timestamp; `(-1, -1)` when no stored
    /// record is that recent, as Kafka answers.
    ///
    /// # Errors
    /// A Kafka error code.
    pub async fn offset_for_time(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> Result<(i64, i64), i16> {
        let query = [(
            TopicPartition::new(topic, partition),
            crate::domain::OffsetSpec::Time(timestamp),
        )];
        let found = self.engine.list_offsets(&query).await;
        match found.first() {
            Some(f) if f.error.is_ok() && f.timestamp >= 0 => Ok((f.offset, f.timestamp)),
            Some(f) if f.error.is_ok() => Ok((-1, -1)),
            Some(f) => Err(kafka_code(f.error)),
            None => Err(kerr::UNKNOWN_SERVER_ERROR),
        }
    }

    /// Issues a producer id (epoch 0) to an idempotent producer.
    ///
    /// # Errors
    /// KAFKA_STORAGE_ERROR when the id block could not be persisted.
    pub async fn init_producer_id(&self) -> Result<i64, i16> {
        self.engine.init_producer_id().await.map_err(kafka_code)
    }

    /// Whether the transactional producer `transactional_id` (producer id
    /// and epoch) may write to a partition of `topic` now: see
    /// [`Engine::txn_may_write`].
    ///
    /// # Errors
    /// A Kafka error code: INVALID_PRODUCER_ID_MAPPING,
    /// INVALID_PRODUCER_EPOCH (fenced), INVALID_TXN_STATE.
    pub fn txn_may_write(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        topic: &str,
        partition: i32,
    ) -> Result<(), i16> {
        self.engine
            .txn_may_write(
                transactional_id,
                producer_id,
                epoch,
                &TopicPartition::new(topic.to_owned(), partition),
            )
            .map_err(|e| txn_code(&TxnFailure::Refused(e), true))
    }

    /// Appends the entries the Kafka front end prepared
    /// ([`super::records::prepare`]) to one partition and waits until they
    /// are stored. Returns the offset of the first record (for an idempotent
    /// producer's retry of a stored batch: that batch's, nothing appended).
    ///
    /// # Errors
    /// A Kafka error code (unknown topic or partition,
    /// OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, UNKNOWN_PRODUCER_ID, ...).
    pub async fn produce_encoded(
        &self,
        topic: &str,
        partition: i32,
        t: super::records::Prepared,
    ) -> Result<i64, i16> {
        if partition < 0 {
            return Err(kerr::UNKNOWN_TOPIC_OR_PARTITION);
        }
        let result = self
            .engine
            .admit_encoded(
                topic,
                partition,
                Bytes::from(t.entries),
                t.span,
                t.max_timestamp,
                t.producer,
            )
            .await
            .finish()
            .await;
        Self::produced(&result)
    }

    fn produced(result: &crate::domain::Appended) -> Result<i64, i16> {
        if let Some(e) = result.producer_error {
            return Err(match e {
                ProducerError::OutOfOrderSequence => kerr::OUT_OF_ORDER_SEQUENCE_NUMBER,
                ProducerError::InvalidEpoch => kerr::INVALID_PRODUCER_EPOCH,
                ProducerError::UnknownProducerId => kerr::UNKNOWN_PRODUCER_ID,
            });
        }
        if result.error != ErrorCode::None {
            return Err(kafka_code(result.error));
        }
        result
            .spans
            .first()
            .map(|s| s.base_offset)
            .ok_or(kerr::UNKNOWN_SERVER_ERROR)
    }

    /// Reads partitions through the engine's long-poll fetch: waits until
    /// `min_bytes` (counted in Flume's stored format) are there or
    /// `max_wait_ms` passes, then reads at most `max_bytes` in all.
    /// One answer per wanted partition, in order.
    pub async fn fetch(
        &self,
        ask: FetchAsk<'_>,
        response: &Arc<MemoryBudget>,
        counting: &Arc<MemoryBudget>,
    ) -> Vec<FetchGot> {
        let FetchAsk {
            max_wait_ms,
            min_bytes,
            max_bytes,
            wants,
            committed,
        } = ask;
        let size = |v: i32| usize::try_from(v.max(1)).unwrap_or(1);
        let spec = FetchSpec {
            max_wait: std::time::Duration::from_millis(
                u64::try_from(max_wait_ms.max(0)).unwrap_or(0),
            ),
            min_bytes: size(min_bytes),
            max_bytes: size(max_bytes),
            partitions: wants
                .iter()
                .map(|w| FetchFrom {
                    at: TopicPartition {
                        topic: w.topic.clone(),
                        partition: w.partition,
                    },
                    offset: w.offset,
                    max_bytes: size(w.max_bytes),
                })
                .collect(),
            read_as: ReadAs::Entries,
            committed,
        };
        let memory = FetchMemory { response, counting };
        let fetched = self.engine.fetch(&spec, Some(memory)).await;
        fetched
            .partitions
            .into_iter()
            .map(|p| FetchGot {
                error: kafka_code(p.error),
                high_watermark: p.log_end,
                log_start: p.log_start,
                records: super::records::to_kafka(&p.records),
                last_stable: p.last_stable,
                aborted: p
                    .aborted
                    .iter()
                    .map(|a| {
                        (
                            a.producer_id,
                            i64::try_from(a.first_offset).unwrap_or(i64::MAX),
                        )
                    })
                    .collect(),
            })
            .collect()
    }

    // ------------------------------------------------------------ groups

    /// Joins a member to a client-assigned group (parks until the rebalance
    /// completes).
    ///
    /// # Errors
    /// As [`Engine::join_client_group`]; map with [`group_code`].
    pub async fn join_group(&self, spec: ClientJoinSpec) -> Result<ClientJoined, GroupError> {
        self.engine.join_client_group(spec).await
    }

    /// A member's SyncGroup (parks until the leader's assignment).
    ///
    /// # Errors
    /// As [`Engine::sync_group`]; map with [`group_code`].
    pub async fn sync_group(&self, spec: SyncSpec) -> Result<Synced, GroupError> {
        self.engine.sync_group(spec).await
    }

    /// A member's heartbeat (with its group instance id if static); the
    /// Kafka error code (0 when fine).
    pub fn heartbeat(
        &self,
        group: &str,
        member: &str,
        instance: Option<&str>,
        generation: i32,
    ) -> i16 {
        match self
            .engine
            .heartbeat_as(group, (member, instance), generation)
        {
            Ok(()) => kerr::NONE,
            Err(e) => group_code(&e),
        }
    }

    /// A member leaves, named by member id, group instance id or both; the
    /// Kafka error code (0 when fine).
    pub fn leave_group(&self, group: &str, member: &str, instance: Option<&str>) -> i16 {
        match self.engine.leave_group_as(group, (member, instance)) {
            Ok(()) => kerr::NONE,
            Err(e) => group_code(&e),
        }
    }

    /// Commits offsets, fenced by member and generation: one Kafka error
    /// code per offset, in order.
    ///
    /// # Errors
    /// One Kafka error code for the whole commit (fencing, storage).
    pub async fn commit_offsets(
        &self,
        group: &str,
        (member, instance): (&str, Option<&str>),
        generation: i32,
        offsets: &[(TopicPartition, Committed)],
    ) -> Result<Vec<i16>, i16> {
        let m = Member {
            group,
            member_id: member,
            generation,
        };
        match self.engine.commit_offsets_as(m, instance, offsets).await {
            Ok(codes) => Ok(codes.into_iter().map(kafka_code).collect()),
            Err(e) => Err(group_code(&e)),
        }
    }

    /// What a group committed for one partition (offset -1 if nothing).
    pub fn committed(&self, group: &str, topic: &str, partition: i32) -> Committed {
        self.engine
            .committed_full(group, topic, partition)
            .unwrap_or(Committed::at(-1))
    }

    /// Every commit of a group: (topic, partition, what), sorted.
    pub fn committed_for_group(&self, group: &str) -> Vec<(String, i32, Committed)> {
        self.engine.committed_for_group_full(group)
    }

    /// A group's description; `None` if the broker knows nothing of it.
    pub fn describe_group(&self, group: &str) -> Option<GroupDescription> {
        self.engine.describe_group(group)
    }

    /// Every group, sorted by name.
    pub fn list_groups(&self) -> Vec<GroupListing> {
        self.engine.list_groups()
    }
}

impl Backend {
    // ------------------------------------------------------------ transactions

    /// InitProducerId with a transactional id: (producer id, epoch).
    ///
    /// # Errors
    /// As [`Engine::init_transactional_producer`]; map with [`txn_code`].
    pub async fn init_transactional_producer(
        &self,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), TxnFailure> {
        self.engine
            .init_transactional_producer(transactional_id, i64::from(timeout_ms), expected)
            .await
    }

    /// Whether a partition exists.
    pub fn partition_exists(&self, topic: &str, partition: i32) -> bool {
        self.engine
            .partition_exists(&TopicPartition::new(topic, partition))
    }

    /// AddPartitionsToTxn.
    ///
    /// # Errors
    /// As [`Engine::add_partitions_to_txn`]; map with [`txn_code`].
    pub async fn add_partitions_to_txn(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: Vec<TopicPartition>,
    ) -> Result<(), TxnFailure> {
        self.engine
            .add_partitions_to_txn(transactional_id, producer_id, epoch, partitions)
            .await
    }

    /// AddOffsetsToTxn.
    ///
    /// # Errors
    /// As [`Engine::add_offsets_to_txn`]; map with [`txn_code`].
    pub async fn add_offsets_to_txn(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        group: &str,
    ) -> Result<(), TxnFailure> {
        self.engine
            .add_offsets_to_txn(transactional_id, producer_id, epoch, group)
            .await
    }

    /// TxnOffsetCommit: one Kafka code per offset, in order.
    ///
    /// # Errors
    /// As [`Engine::txn_offset_commit`]; map with [`txn_code`].
    #[allow(clippy::too_many_arguments)]
    pub async fn txn_offset_commit(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        group: &str,
        (member, instance, generation): (&str, Option<&str>, i32),
        offsets: Vec<(TopicPartition, TxnOffset)>,
    ) -> Result<Vec<i16>, TxnFailure> {
        let m = Member {
            group,
            member_id: member,
            generation,
        };
        self.engine
            .txn_offset_commit(transactional_id, producer_id, epoch, m, instance, offsets)
            .await
            .map(|codes| codes.into_iter().map(kafka_code).collect())
    }

    /// EndTxn.
    ///
    /// # Errors
    /// As [`Engine::end_txn`]; map with [`txn_code`].
    pub async fn end_txn(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
    ) -> Result<(), TxnFailure> {
        self.engine
            .end_txn(transactional_id, producer_id, epoch, commit)
            .await
    }

    /// ListTransactions.
    pub fn list_transactions(
        &self,
        states: &[TxnState],
        producer_ids: &[i64],
        min_age_ms: i64,
    ) -> Vec<TxnListing> {
        self.engine
            .list_transactions(states, producer_ids, min_age_ms)
    }

    /// Whether an open transaction holds an offset of `group` for the
    /// partition not committed yet (OffsetFetch `require_stable`).
    pub fn pending_txn_offset(&self, group: &str, topic: &str, partition: i32) -> bool {
        self.engine
            .pending_txn_offset(group, &TopicPartition::new(topic, partition))
    }

    /// DescribeTransactions: one id's state, if known.
    pub fn describe_transaction(&self, transactional_id: &str) -> Option<TxnMeta> {
        self.engine.describe_transaction(transactional_id)
    }
}

/// Kafka's code for a transaction failure. `before_kip_588`: the request's
/// version predates PRODUCER_FENCED (InitProducerId v0-3, AddPartitionsToTxn,
/// AddOffsetsToTxn and EndTxn v0-1, TxnOffsetCommit v0-2), which then gets
/// INVALID_PRODUCER_EPOCH, as Kafka answers.
pub fn txn_code(e: &TxnFailure, before_kip_588: bool) -> i16 {
    match e {
        TxnFailure::Refused(r) => match r {
            TxnError::InvalidTransactionalId { .. } => kerr::INVALID_REQUEST,
            TxnError::InvalidTransactionTimeout { .. } => kerr::INVALID_TRANSACTION_TIMEOUT,
            TxnError::InvalidProducerIdMapping(_) => kerr::INVALID_PRODUCER_ID_MAPPING,
            TxnError::ProducerFenced { .. } if before_kip_588 => kerr::INVALID_PRODUCER_EPOCH,
            TxnError::ProducerFenced { .. } => kerr::PRODUCER_FENCED,
            TxnError::ConcurrentTransactions(_) => kerr::CONCURRENT_TRANSACTIONS,
            TxnError::InvalidTxnState { .. } | TxnError::GroupNotInTransaction(_) => {
                kerr::INVALID_TXN_STATE
            }
            TxnError::TooManyTransactionalIds { .. }
            | TxnError::TooManyOpenTransactions { .. }
            | TxnError::TooManyPartitions { .. } => kafka_code(ErrorCode::LimitReached),
            TxnError::ProducerIds(_) => kerr::KAFKA_STORAGE_ERROR,
        },
        TxnFailure::Markers(c) => kafka_code(*c),
        TxnFailure::Offsets(ErrorCode::InvalidName) => kerr::INVALID_GROUP_ID,
        TxnFailure::Offsets(c) => kafka_code(*c),
        TxnFailure::Group(g) => group_code(g),
        TxnFailure::Log(_) | TxnFailure::ShuttingDown => kerr::COORDINATOR_NOT_AVAILABLE,
    }
}

/// An error's message for a Kafka client: the detail alone when there is
/// one (the Flume code's name would only confuse a Kafka client).
fn detail(e: &crate::error::BrokerError) -> String {
    match e {
        crate::error::BrokerError::Code {
            detail: Some(d), ..
        } => d.clone(),
        other => other.to_string(),
    }
}

/// Kafka's code for a group operation's error.
pub fn group_code(e: &GroupError) -> i16 {
    match e {
        GroupError::InconsistentProtocol => kerr::INCONSISTENT_GROUP_PROTOCOL,
        GroupError::MemberIdRequired(_) => kerr::MEMBER_ID_REQUIRED,
        GroupError::FencedInstanceId => kerr::FENCED_INSTANCE_ID,
        GroupError::InvalidSessionTimeout { .. } => kerr::INVALID_SESSION_TIMEOUT,
        GroupError::StaleMemberEpoch { .. } => kerr::STALE_MEMBER_EPOCH,
        GroupError::FencedMemberEpoch { .. } => kerr::FENCED_MEMBER_EPOCH,
        GroupError::Code(c) => match c {
            ErrorCode::InvalidName => kerr::INVALID_GROUP_ID,
            ErrorCode::LimitReached => kerr::GROUP_MAX_SIZE_REACHED,
            ErrorCode::ShuttingDown => kerr::COORDINATOR_NOT_AVAILABLE,
            other => kafka_code(*other),
        },
    }
}

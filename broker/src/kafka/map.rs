//! Engine results as the Kafka front end answers them, and Kafka requests
//! as the engine is asked them: every translation between Kafka's shapes
//! (topic ids as UUIDs, `i32` counts, `i64` offsets, Kafka error codes) and
//! the domain's, and nothing else (the twin of [`crate::flume::map`]; the
//! error codes themselves are in [`super::errors`]).

use bytes::Bytes;
use flume_protocol::ErrorCode;
use uuid::Uuid;

use super::errors::{self as kerr, kafka_code};
use crate::config::TopicConfig;
use crate::domain::{
    Appended, FetchFrom, FetchSpec, PartitionRecords, ProducerError, ReadAs, TopicId,
    TopicPartition,
};
use crate::engine::Topic;

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

impl TopicInfo {
    /// A topic of the engine's, its configs described against the broker's
    /// `defaults` for new topics.
    pub fn of(t: &Topic, defaults: &TopicConfig) -> Self {
        Self::from_config(&t.name, kafka_id(t.id), &t.config, defaults)
    }

    /// A topic by its name, id and settings (one not created yet too).
    pub fn from_config(name: &str, id: Uuid, tc: &TopicConfig, defaults: &TopicConfig) -> Self {
        TopicInfo {
            name: name.to_owned(),
            id,
            partitions: i32::try_from(tc.partitions).unwrap_or(i32::MAX),
            configs: crate::config::named::describe_topic(tc, defaults),
        }
    }
}

/// A topic's partition count by its settings (as [`TopicInfo`] has it).
pub fn configured_partitions(t: &Topic) -> i32 {
    i32::try_from(t.config.partitions).unwrap_or(i32::MAX)
}

/// A topic's name, id and partition count, without its configs: for the
/// answers that list partitions (Metadata, DescribeTopicPartitions,
/// ElectLeaders).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicBrief {
    /// Name.
    pub name: String,
    /// Id.
    pub id: Uuid,
    /// Number of partitions (numbered from 0).
    pub partitions: i32,
}

impl TopicBrief {
    /// A topic of the engine's.
    pub fn of(t: &Topic) -> Self {
        TopicBrief {
            name: t.name.clone(),
            id: kafka_id(t.id),
            partitions: i32::try_from(t.partition_count()).unwrap_or(i32::MAX),
        }
    }
}

/// A topic id as Kafka's messages carry it.
pub fn kafka_id(id: TopicId) -> Uuid {
    Uuid::from_bytes(id.0)
}

/// A topic id from Kafka's messages as the engine knows it.
pub fn topic_id(id: Uuid) -> TopicId {
    TopicId(id.into_bytes())
}

/// An offset as Kafka's messages carry it.
pub fn offset(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A partition's `(log start, log end)` as the engine gives them
/// ([`crate::engine::Records::log_bounds`]), in Kafka's offsets.
///
/// # Errors
/// UNKNOWN_TOPIC_OR_PARTITION when the engine knows no such partition.
pub fn log_bounds(bounds: Option<(u64, u64)>) -> Result<(i64, i64), i16> {
    bounds
        .map(|(start, end)| (offset(start), offset(end)))
        .ok_or(kerr::UNKNOWN_TOPIC_OR_PARTITION)
}

/// Bytes on disk of each partition of a topic, in order (DescribeLogDirs).
pub fn partition_sizes(t: &Topic) -> Vec<(i32, i64)> {
    t.statuses(true)
        .into_iter()
        .map(|s| {
            let bytes = s.disk.map_or(0, |(b, _)| b);
            (
                i32::try_from(s.partition).unwrap_or(i32::MAX),
                i64::try_from(bytes).unwrap_or(i64::MAX),
            )
        })
        .collect()
}

/// What a produce to a topic is held to, from its configs.
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

impl ProduceLimits {
    /// The limits of a topic with these settings (for a topic a produce
    /// would auto-create, the broker's defaults).
    pub fn of(tc: &TopicConfig) -> Self {
        use crate::config::CompressionType as C;
        use flume_protocol::kafka_batch::Compression;
        ProduceLimits {
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
        }
    }
}

/// The offset of the first record a produce appended (for an idempotent
/// producer's retry of a stored batch: that batch's, nothing appended).
///
/// # Errors
/// A Kafka error code (unknown topic or partition,
/// OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, UNKNOWN_PRODUCER_ID, ...).
pub fn produced(result: &Appended) -> Result<i64, i16> {
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

/// A Kafka Fetch as the engine is asked it ([`fetch_spec`]).
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

/// A Kafka Fetch as the engine's long-poll fetch: it waits until
/// `min_bytes` (counted in Flume's stored format) are there or
/// `max_wait_ms` passes, then reads at most `max_bytes` in all; byte counts
/// of 0 or less count as 1.
pub fn fetch_spec(ask: FetchAsk<'_>) -> FetchSpec {
    let FetchAsk {
        max_wait_ms,
        min_bytes,
        max_bytes,
        wants,
        committed,
    } = ask;
    let size = |v: i32| usize::try_from(v.max(1)).unwrap_or(1);
    FetchSpec {
        max_wait: std::time::Duration::from_millis(u64::try_from(max_wait_ms.max(0)).unwrap_or(0)),
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
    }
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

impl From<PartitionRecords> for FetchGot {
    fn from(p: PartitionRecords) -> Self {
        FetchGot {
            error: kafka_code(p.error),
            high_watermark: p.log_end,
            log_start: p.log_start,
            records: super::records::to_kafka(&p.records),
            last_stable: p.last_stable,
            aborted: p
                .aborted
                .iter()
                .map(|a| (a.producer_id, offset(a.first_offset)))
                .collect(),
        }
    }
}

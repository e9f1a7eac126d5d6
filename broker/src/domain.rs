//! What the engine speaks: topics, partitions, record batches, offsets,
//! members and assignments, as Flume's own types. No wire type crosses this
//! line; each front end ([`crate::flume`] for the Flume protocol,
//! [`crate::embedded`] in-process, a Kafka listener next) maps its requests
//! to these and these to its responses.
//!
//! Conventions every front end relies on:
//! - Partition numbers are `i32` and offsets `i64`, the widths both the Flume
//!   and the Kafka protocols carry, so a front end passes a peer's numbers
//!   through and the engine answers an impossible one (a negative partition,
//!   a negative offset) with the error code it would give any unknown one.
//! - Errors are [`ErrorCode`]s, Flume's stable error vocabulary; a front end
//!   for another protocol translates them to its own codes.
//! - Records travel as batches in the Flume record format (the bytes stored on
//!   disk, see `docs/storage.md`), as shared [`Bytes`] so a front end can hand
//!   over slices of the frame it read without copying them. The engine checks
//!   every record (lengths, CRCs, the size limit) before it stores any.

use std::time::Duration;

use bytes::Bytes;
use flume_protocol::ErrorCode;

use crate::budget::Charge;
use crate::group::Assignor;

/// A partition of a topic.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// Topic name.
    pub topic: String,
    /// Partition number.
    pub partition: i32,
}

impl TopicPartition {
    /// A topic and partition.
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

// ------------------------------------------------------------ topics

/// A partition's offsets, as a describe reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOffsets {
    /// Partition number.
    pub partition: i32,
    /// The first offset still stored.
    pub log_start: i64,
    /// The offset the next record will get (the high watermark).
    pub log_end: i64,
}

/// A topic as a describe reports it: its partitions, or why there are none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDescription {
    /// Topic name.
    pub name: String,
    /// The partitions, in order; `Err` for a topic that does not exist.
    pub partitions: Result<Vec<PartitionOffsets>, ErrorCode>,
}

// ------------------------------------------------------------ produce

/// Where the records of a batch go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Every record to this partition.
    Partition(i32),
    /// Each record by its key (FNV-1a modulo the partition count); records
    /// without a key all go to one partition per batch, in turn (sticky).
    ByKey,
}

impl Route {
    /// To `partition` if one is given, by key otherwise.
    pub fn to(partition: Option<u32>) -> Route {
        partition.map_or(Route::ByKey, |p| {
            Route::Partition(i32::try_from(p).unwrap_or(i32::MAX))
        })
    }
}

/// Records to append to one topic.
#[derive(Debug, Clone)]
pub struct ProduceBatch {
    /// Topic name (created with the defaults if auto-create is on).
    pub topic: String,
    /// Where the records go.
    pub route: Route,
    /// One or more records in the Flume record format, not yet checked.
    pub records: Bytes,
}

/// An idempotent producer's stamp on a batch for one partition (Kafka's
/// producer id, epoch and the sequence number of the batch's first record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerBatch {
    /// Producer id, as issued by the broker.
    pub id: i64,
    /// Producer epoch.
    pub epoch: i16,
    /// Sequence number of the batch's first record (per producer and partition).
    pub base_sequence: i32,
}

/// Why a batch of an idempotent producer was refused (nothing of it appended).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProducerError {
    /// The sequence does not follow the producer's last one on the partition.
    OutOfOrderSequence,
    /// The epoch is older than one already seen from this producer.
    InvalidEpoch,
    /// The producer id was never issued by this broker.
    UnknownProducerId,
}

/// Records appended to one partition: `count` offsets from `base_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendedSpan {
    /// Partition.
    pub partition: i32,
    /// Offset of the first record.
    pub base_offset: i64,
    /// Number of records.
    pub count: i32,
}

/// What became of a [`ProduceBatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// Topic name.
    pub topic: String,
    /// The batch's route.
    pub route: Route,
    /// [`ErrorCode::None`], or why (part of) the batch was not appended. A
    /// routed batch is appended partition by partition, so `spans` lists
    /// exactly the partitions that were.
    pub error: ErrorCode,
    /// One span per partition written.
    pub spans: Vec<AppendedSpan>,
    /// For a routed batch: the partition of each record, in batch order
    /// (record `i`'s offset is its partition's base offset plus the records
    /// routed there before it). Empty for [`Route::Partition`].
    pub record_partitions: Vec<i32>,
    /// For an idempotent batch: why it was refused (then `error` is
    /// [`ErrorCode::InvalidRequest`] and `spans` is empty).
    pub producer_error: Option<ProducerError>,
    /// For an idempotent batch: true when it was a retry of a batch already
    /// stored, answered with that batch's offsets and not appended again.
    pub duplicate: bool,
}

// ------------------------------------------------------------ fetch

/// One partition a fetch reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchFrom {
    /// The partition.
    pub at: TopicPartition,
    /// The first offset wanted.
    pub offset: i64,
    /// Most record bytes from this partition (the first record always comes whole).
    pub max_bytes: usize,
}

/// A fetch: partitions and offsets, how much, how long to wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchSpec {
    /// Longest the fetch waits for `min_bytes` (capped by the engine).
    pub max_wait: Duration,
    /// Record bytes to wait for (at least 1, at most what the fetch can receive).
    pub min_bytes: usize,
    /// Most record bytes over all partitions (and at most one frame's worth).
    pub max_bytes: usize,
    /// The partitions, in the order the answer lists them.
    pub partitions: Vec<FetchFrom>,
}

/// What a fetch read from one partition.
#[derive(Debug, PartialEq, Eq)]
pub struct PartitionRecords {
    /// [`ErrorCode::None`] or why nothing was read.
    pub error: ErrorCode,
    /// The partition's first stored offset (-1 for an unknown partition).
    pub log_start: i64,
    /// The partition's high watermark (-1 for an unknown partition).
    pub log_end: i64,
    /// Whole records in the Flume record format, read once from the log.
    pub records: Vec<u8>,
}

/// The answer to a [`FetchSpec`]: one entry per requested partition, in order.
#[derive(Debug)]
pub struct Fetched {
    /// Per partition, in request order.
    pub partitions: Vec<PartitionRecords>,
    /// The first partition that failed (its index) and its error.
    pub first_error: Option<(usize, ErrorCode)>,
    /// The memory budget's charge for the records, held until the front end
    /// has encoded them (then its own response charge takes over).
    pub charge: Option<Charge>,
}

// ------------------------------------------------------------ groups

/// A member's request to join a group.
///
/// The broker assigns the partitions ([`Assignor`]). A protocol whose clients
/// assign (Kafka's SyncGroup, where the leader sends everyone's assignment)
/// would add its metadata and a client-side variant here; the coordinator's
/// generations and fencing stay the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinSpec {
    /// Group name.
    pub group: String,
    /// The member's id; empty on its first join.
    pub member_id: String,
    /// Subscribed topics (a set: the front end may pass duplicates).
    pub topics: Vec<String>,
    /// Heartbeats must come at least this often (clamped to 100 ms..5 min).
    pub session_timeout: Duration,
    /// How long a rebalance waits for known members to rejoin (at most 5 min).
    pub rebalance_timeout: Duration,
    /// How the broker spreads partitions over members.
    pub assignor: Assignor,
}

/// One topic's partitions assigned to a member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicAssignment {
    /// Topic.
    pub topic: String,
    /// Partitions.
    pub partitions: Vec<i32>,
}

/// A member's place in a completed rebalance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    /// The generation, which fences heartbeats and commits.
    pub generation: i32,
    /// The member's id (assigned on its first join).
    pub member_id: String,
    /// The longest-standing member.
    pub leader_id: String,
    /// Every member of the generation, sorted.
    pub members: Vec<String>,
    /// This member's partitions.
    pub assignment: Vec<TopicAssignment>,
}

/// The member a commit comes from; `generation` -1 and an empty id commit
/// outside group membership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member<'a> {
    /// Group name.
    pub group: &'a str,
    /// Member id.
    pub member_id: &'a str,
    /// The member's generation.
    pub generation: i32,
}

/// Committed offset and log bounds of one partition, for a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPosition {
    /// The partition (partition -1 with an unknown topic).
    pub at: TopicPartition,
    /// [`ErrorCode::None`], UNKNOWN_TOPIC or UNKNOWN_PARTITION.
    pub error: ErrorCode,
    /// The committed offset, -1 if none.
    pub committed: i64,
    /// The partition's first stored offset (0 for an unknown partition, -1 for an unknown topic).
    pub log_start: i64,
    /// The partition's high watermark (as `log_start` when unknown).
    pub log_end: i64,
}

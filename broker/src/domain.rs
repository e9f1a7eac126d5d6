//! What the engine speaks: topics, partitions, record batches, offsets,
//! members and assignments, as Flume's own types. No wire type crosses this
//! line; each front end (`flume` for the Flume protocol, `kafka` for
//! Kafka's, [`crate::embedded`] in-process) maps its requests to these and
//! these to its responses.
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
pub use crate::storage::ReadAs;
/// The most bytes one record batch may decompress to (its records, as stored).
pub use crate::storage::MAX_BATCH_DECODED_BYTES;

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

/// A topic's id: a random (version 4) UUID given when the topic is created
/// and kept in its directory (`docs/storage.md`, "Topic ids"), so a topic
/// deleted and created again under the same name has another one. Shown as
/// a UUID's 36 characters (`8-4-4-4-12` lowercase hex digits).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicId(pub [u8; 16]);

impl TopicId {
    /// A version 4 UUID from 16 random bytes (the version and variant bits
    /// set), never the all-zero id Kafka reserves for "no id".
    pub fn from_random(mut bytes: [u8; 16]) -> Self {
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        TopicId(bytes)
    }

    /// Reads the 36-character form [`std::fmt::Display`] writes (either
    /// case); `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let b = text.as_bytes();
        if b.len() != 36 || [8, 13, 18, 23].iter().any(|&i| b[i] != b'-') {
            return None;
        }
        let mut digits = b
            .iter()
            .enumerate()
            .filter(|(i, _)| ![8, 13, 18, 23].contains(i))
            .map(|(_, &c)| char::from(c).to_digit(16));
        let mut out = [0u8; 16];
        for byte in &mut out {
            let hi = digits.next()??;
            let lo = digits.next()??;
            *byte = u8::try_from(hi * 16 + lo).ok()?;
        }
        Some(TopicId(out))
    }
}

impl std::fmt::Display for TopicId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for TopicId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TopicId({self})")
    }
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

/// An idempotent or transactional producer as one partition knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerState {
    /// Producer id.
    pub producer_id: i64,
    /// Its epoch (-1 when unknown here).
    pub epoch: i16,
    /// The sequence of the last record appended (-1: none).
    pub last_sequence: i32,
    /// The offset where its open transaction began here, if one is open.
    pub txn_start: Option<u64>,
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
    /// Entries as stored (Kafka's front end) or Flume records only (Flume's
    /// protocol, the in-process readers).
    pub read_as: ReadAs,
    /// Read as `read_committed` (up to each partition's last stable offset;
    /// aborted transactions left out of records, or listed beside entries).
    pub committed: bool,
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
    /// Whole entries as the spec's [`ReadAs`] says (Flume records, and with
    /// [`ReadAs::Entries`] Kafka batch entries too), read once from the log.
    pub records: Vec<u8>,
    /// The partition's last stable offset (-1 for an unknown partition).
    pub last_stable: i64,
    /// A `read_committed` read of entries: the aborted transactions among them.
    pub aborted: Vec<crate::storage::AbortedTxn>,
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

/// How partitions are spread over members.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Assignor {
    /// Per topic, consecutive ranges of partitions to members sorted by id.
    Range,
    /// Every (topic, partition), sorted, dealt to members in turn.
    RoundRobin,
    /// Balanced like range, but a member keeps its partitions across
    /// rebalances where it can: when one member leaves only its partitions
    /// (and few others) move (see `sticky_topic`). The default.
    #[default]
    Sticky,
}

impl Assignor {
    /// Parses the JOIN_GROUP assignor string ("" means sticky, the default).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "" | "sticky" => Some(Assignor::Sticky),
            "range" => Some(Assignor::Range),
            "roundrobin" => Some(Assignor::RoundRobin),
            _ => None,
        }
    }
}

/// A member's request to join a group.
///
/// The broker assigns the partitions ([`Assignor`]). Groups whose clients
/// assign (Kafka's, where the leader sends everyone's assignment with
/// SyncGroup) join with a [`ClientJoinSpec`] instead; the coordinator's
/// generations and fencing are the same.
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

// ------------------------------------------------------------ client-assigned groups

/// Why a group operation failed.
///
/// Flume's protocol answers with [`GroupError::code`]; Kafka's front end maps
/// each variant to its own code (the protocol mismatch and the member id
/// round trip have no Flume code).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    /// One of Flume's codes: UNKNOWN_MEMBER, ILLEGAL_GENERATION,
    /// REBALANCE_IN_PROGRESS, LIMIT_REACHED, SHUTTING_DOWN, INVALID_NAME,
    /// INVALID_REQUEST.
    #[error("{0:?}")]
    Code(ErrorCode),
    /// The member's protocol type or protocols do not fit the group's: no
    /// protocol every member supports, or a member of the other assignment
    /// mode (broker-assigned vs client-assigned) while the group has members.
    #[error("the member's protocols do not match the group's")]
    InconsistentProtocol,
    /// A first join without a member id (Kafka's KIP-394): the member must
    /// join again with this id.
    #[error("join again with member id {0:?}")]
    MemberIdRequired(String),
    /// The group instance id (static membership, Kafka's KIP-345) belongs
    /// to another member id now: a newer process with the same instance id
    /// took its place, and this one must stop.
    #[error("the group instance id belongs to another member now")]
    FencedInstanceId,
    /// The session timeout is outside the broker's bounds
    /// (`group.min.session.timeout.ms` and `group.max.session.timeout.ms`).
    #[error("session timeout {ms} ms is outside the broker's {min}..={max} ms (group.min.session.timeout.ms, group.max.session.timeout.ms)")]
    InvalidSessionTimeout {
        /// What the member asked for.
        ms: u64,
        /// The broker's least session timeout.
        min: u64,
        /// The broker's greatest session timeout.
        max: u64,
    },
    /// A consumer-protocol member's commit with an epoch older than its own
    /// (Kafka's STALE_MEMBER_EPOCH).
    #[error("member epoch {sent} is older than the member's epoch {current}")]
    StaleMemberEpoch {
        /// What the member sent.
        sent: i32,
        /// Its epoch.
        current: i32,
    },
    /// A consumer-protocol member's commit with an epoch newer than its own
    /// (Kafka's FENCED_MEMBER_EPOCH).
    #[error("member epoch {sent} is not the member's epoch {current}")]
    FencedMemberEpoch {
        /// What the member sent.
        sent: i32,
        /// Its epoch.
        current: i32,
    },
}

impl GroupError {
    /// The nearest code of Flume's vocabulary (a protocol mismatch and a
    /// session timeout out of range are INVALID_REQUEST; a member id to
    /// rejoin with and a fenced instance are UNKNOWN_MEMBER).
    pub fn code(&self) -> ErrorCode {
        match self {
            GroupError::Code(c) => *c,
            GroupError::InconsistentProtocol | GroupError::InvalidSessionTimeout { .. } => {
                ErrorCode::InvalidRequest
            }
            GroupError::MemberIdRequired(_) | GroupError::FencedInstanceId => {
                ErrorCode::UnknownMember
            }
            GroupError::StaleMemberEpoch { .. } | GroupError::FencedMemberEpoch { .. } => {
                ErrorCode::IllegalGeneration
            }
        }
    }
}

impl From<ErrorCode> for GroupError {
    fn from(c: ErrorCode) -> Self {
        GroupError::Code(c)
    }
}

/// The session timeouts a member may ask for by default, in ms (Kafka's
/// default `group.min.session.timeout.ms` and `group.max.session.timeout.ms`;
/// the broker's bounds are [`crate::BrokerConfig::group_min_session_timeout`]
/// and [`crate::BrokerConfig::group_max_session_timeout`]).
pub const CLIENT_SESSION_TIMEOUT_MS: (u64, u64) = (6_000, 1_800_000);

/// A member's request to join a group whose leader assigns the partitions
/// (Kafka's JoinGroup): the coordinator picks a protocol every member
/// supports and hands the leader every member's metadata; the leader's
/// [`SyncSpec`] then brings everyone's assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientJoinSpec {
    /// Group name.
    pub group: String,
    /// The member's id; empty on its first join.
    pub member_id: String,
    /// When `member_id` is empty: answer [`GroupError::MemberIdRequired`]
    /// with a new id instead of joining (KIP-394, Kafka's JoinGroup v4+).
    pub require_member_id: bool,
    /// The client's id (a prefix of new member ids, and shown by describe).
    pub client_id: String,
    /// The member's group instance id (static membership, Kafka's KIP-345,
    /// JoinGroup v5+): a member that comes back under the same instance id
    /// takes the place (and the assignment) of the one before it, without a
    /// rebalance while the group is stable, and fences it. A static member
    /// needs no [`GroupError::MemberIdRequired`] round trip.
    pub group_instance_id: Option<String>,
    /// Whether the member understands a leader's answer that says to skip
    /// the assignment (JoinGroup v9+, KIP-814): a static leader coming back
    /// to a stable group then gets every member's metadata with
    /// [`ClientJoined::skip_assignment`] set, instead of an answer naming
    /// its previous member id as the leader.
    pub skip_assignment_supported: bool,
    /// Where the member connects from (shown by describe).
    pub client_host: String,
    /// The kind of protocols ("consumer" for Kafka consumers); every member
    /// of a group has the same.
    pub protocol_type: String,
    /// Protocols the member supports, preferred first: (name, metadata).
    pub protocols: Vec<(String, Bytes)>,
    /// The topics the member subscribes to, when the front end can read them
    /// from the metadata (shown by describe; the coordinator does not assign).
    pub topics: Vec<String>,
    /// Heartbeats must come at least this often: within the broker's
    /// bounds, else [`GroupError::InvalidSessionTimeout`].
    pub session_timeout: Duration,
    /// How long a rebalance waits for known members to rejoin, and then for
    /// the leader's assignment (at most 5 min).
    pub rebalance_timeout: Duration,
}

/// A member's place in a completed join of a client-assigned group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientJoined {
    /// The generation, which fences heartbeats, syncs and commits.
    pub generation: i32,
    /// The group's protocol type.
    pub protocol_type: String,
    /// The protocol chosen for this generation.
    pub protocol: String,
    /// The member that assigns.
    pub leader_id: String,
    /// The member's id.
    pub member_id: String,
    /// For the leader: every member and its metadata for `protocol`, in
    /// join order; empty for the others.
    pub members: Vec<JoinedMember>,
    /// The leader is told the members but must not send an assignment: a
    /// static leader that came back to a stable group (KIP-814).
    pub skip_assignment: bool,
}

/// One member as the leader of a client-assigned group sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinedMember {
    /// Member id.
    pub member_id: String,
    /// Its group instance id, for a static member.
    pub group_instance_id: Option<String>,
    /// Its metadata for the generation's protocol.
    pub metadata: Bytes,
}

/// One member's assignment, as the leader sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberAssignment {
    /// The member.
    pub member_id: String,
    /// The assignment as the protocol encodes it (opaque to the coordinator).
    pub assignment: Bytes,
    /// The partitions in it, when the front end can read them (describe, lag).
    pub partitions: Vec<TopicAssignment>,
}

/// A member's SyncGroup: the leader's carries every member's assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncSpec {
    /// Group name.
    pub group: String,
    /// The member's id.
    pub member_id: String,
    /// The member's group instance id, if static: must still be the
    /// member's (else [`GroupError::FencedInstanceId`]).
    pub group_instance_id: Option<String>,
    /// The member's generation.
    pub generation: i32,
    /// If given, must be the group's protocol type.
    pub protocol_type: Option<String>,
    /// If given, must be the generation's protocol.
    pub protocol: Option<String>,
    /// The leader's assignments (ignored from the others).
    pub assignments: Vec<MemberAssignment>,
}

/// What a member gets from SyncGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Synced {
    /// The group's protocol type.
    pub protocol_type: String,
    /// The generation's protocol.
    pub protocol: String,
    /// The member's assignment as the leader encoded it (empty if the leader
    /// sent none for it).
    pub assignment: Bytes,
}

/// Where a group is in its life (Kafka's names for the same states).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupPhase {
    /// No members (its committed offsets may remain).
    Empty,
    /// Waiting for the members to (re)join.
    PreparingRebalance,
    /// Client-assigned groups: joined, waiting for the leader's assignment.
    CompletingRebalance,
    /// A generation with its assignment is in force.
    Stable,
}

impl GroupPhase {
    /// The state's name as Kafka spells it ("Empty", "PreparingRebalance", ...).
    pub fn as_str(self) -> &'static str {
        match self {
            GroupPhase::Empty => "Empty",
            GroupPhase::PreparingRebalance => "PreparingRebalance",
            GroupPhase::CompletingRebalance => "CompletingRebalance",
            GroupPhase::Stable => "Stable",
        }
    }
}

/// The protocol type of groups whose partitions the broker assigns (Flume's
/// own clients), as describe and list report it.
pub const BROKER_ASSIGNED_PROTOCOL_TYPE: &str = "flume";

/// One member of a described group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    /// Member id.
    pub member_id: String,
    /// Group instance id of a static member (client-assigned only).
    pub group_instance_id: Option<String>,
    /// Client id (empty for broker-assigned members).
    pub client_id: String,
    /// Where the member connects from (empty for broker-assigned members).
    pub client_host: String,
    /// Subscribed topics (for client-assigned members: as read from the
    /// metadata, possibly empty).
    pub topics: Vec<String>,
    /// The member's metadata for the group's protocol (client-assigned only).
    pub metadata: Bytes,
    /// The assignment as the leader encoded it (client-assigned only).
    pub assignment_bytes: Bytes,
    /// The member's partitions in the current generation.
    pub assignment: Vec<TopicAssignment>,
}

/// A group as describe reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    /// Group name.
    pub group: String,
    /// Its state.
    pub phase: GroupPhase,
    /// "consumer" (or another Kafka protocol type) for client-assigned
    /// groups, [`BROKER_ASSIGNED_PROTOCOL_TYPE`] for broker-assigned ones,
    /// empty for a group known only by its committed offsets.
    pub protocol_type: String,
    /// The generation's protocol (client-assigned) or assignor (broker-assigned).
    pub protocol: String,
    /// The generation (0 before the first).
    pub generation: i32,
    /// The leader's member id (empty without members).
    pub leader_id: String,
    /// Members, sorted by id.
    pub members: Vec<MemberDescription>,
}

/// A group as list reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// Group name.
    pub group: String,
    /// Its state.
    pub phase: GroupPhase,
    /// As in [`GroupDescription::protocol_type`].
    pub protocol_type: String,
}

// ------------------------------------------------------------ admin

/// Which offset of a partition a lookup asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The oldest stored offset (the log start).
    Earliest,
    /// The offset the next record will get (the log end).
    Latest,
    /// The first offset whose record timestamp (ms since the epoch) is at
    /// least this; the log end when no stored record is that recent.
    Time(i64),
    /// The first record with the largest timestamp (offset -1 and timestamp
    /// -1 when the partition holds no record).
    MaxTimestamp,
}

/// The answer to one offset lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundOffset {
    /// The partition.
    pub at: TopicPartition,
    /// [`ErrorCode::None`], UNKNOWN_TOPIC, UNKNOWN_PARTITION, STORAGE_ERROR,
    /// CORRUPT_RECORD.
    pub error: ErrorCode,
    /// The offset (-1 with an error).
    pub offset: i64,
    /// For [`OffsetSpec::Time`], the timestamp of the record at `offset`;
    /// -1 otherwise, and when no record was that recent.
    pub timestamp: i64,
}

/// Changes to a topic's settings (those that can change while it runs);
/// `None` leaves a setting as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicChanges {
    /// Retention by size per partition: `Some(None)` removes the limit.
    pub retention_bytes: Option<Option<u64>>,
    /// Retention by age: `Some(None)` removes the limit.
    pub retention_ms: Option<Option<u64>>,
    /// Segment size (taken at the next roll).
    pub segment_bytes: Option<u64>,
}

/// One change to a topic config by its Kafka name (IncrementalAlterConfigs'
/// operations; the CLI's `--config` and `--delete-config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOp {
    /// Set the config on the topic.
    Set(String, String),
    /// Take it back to the broker's default.
    Delete(String),
    /// Add the entries of a comma-separated list (list configs only).
    Append(String, String),
    /// Remove the entries of a comma-separated list (list configs only).
    Subtract(String, String),
}

/// One group's summary (see the coordinator's summaries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSummary {
    /// Group id.
    pub group: String,
    /// `empty`, `preparing_rebalance`, `completing_rebalance` (Kafka groups
    /// waiting for the leader's assignment) or `stable`.
    pub state: &'static str,
    /// Generation.
    pub generation: i32,
    /// Members.
    pub members: usize,
    /// Rebalances started.
    pub rebalances: u64,
}

/// One partition's state at a moment, for observers (metrics, the
/// dashboard, health checks): offsets, queue, counters, disk, failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStatus {
    /// Topic.
    pub topic: String,
    /// Partition number.
    pub partition: u32,
    /// Oldest offset still stored.
    pub log_start: u64,
    /// Offset the next record gets.
    pub log_end: u64,
    /// Bytes of segment files and their count, when asked for.
    pub disk: Option<(u64, usize)>,
    /// Append requests waiting in its queue.
    pub queued: usize,
    /// Records and bytes in and out.
    pub counts: crate::metrics::PartitionCounts,
    /// Stopped by a storage failure (reads still served).
    pub failed: bool,
    /// For a compacted partition, when asked with the disk: the share of its
    /// sealed bytes the cleaner has not cleaned yet, in parts per million.
    pub dirty_ppm: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::TopicId;

    #[test]
    fn a_topic_id_is_a_version_4_uuid_and_reads_back_from_its_text() {
        let id = TopicId::from_random([0xff; 16]);
        let text = id.to_string();
        assert_eq!(text, "ffffffff-ffff-4fff-bfff-ffffffffffff");
        assert_eq!(TopicId::parse(&text), Some(id));
        assert_eq!(TopicId::parse(&text.to_uppercase()), Some(id));
        let zero = TopicId::from_random([0; 16]);
        assert_ne!(zero.0, [0; 16], "never the all-zero id");
        assert_eq!(zero.to_string(), "00000000-0000-4000-8000-000000000000");
        for bad in [
            "",
            "ffffffff-ffff-4fff-bfff-fffffffffff",
            "ffffffff-ffff-4fff-bfff-fffffffffffff",
            "ffffffffeffff-4fff-bfff-ffffffffffff",
            "gfffffff-ffff-4fff-bfff-ffffffffffff",
            "+fffffff-ffff-4fff-bfff-ffffffffffff",
            "ffffffff-ffff-4fff-bfff-fffffffffff\u{e9}",
        ] {
            assert_eq!(TopicId::parse(bad), None, "{bad:?}");
        }
    }
}

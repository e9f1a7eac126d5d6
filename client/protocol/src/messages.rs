//! Typed requests and responses. Each request names its response type.
//!
//! Every response payload starts with a top-level `error_code i16`; when it is
//! not 0 the body is omitted. Layouts are in `docs/protocol.md`.
//!
//! Each message is declared once with `message!` (below; the field codecs are in [`crate::codec`]): its
//! fields, in wire order, are its encoding (see [`crate::codec`] for how each
//! field type is written). Adding a field is adding a line; the `requests!`
//! table at the end pairs each request with its API key and response.

use bytes::{BufMut, Bytes};

use crate::error_code::ErrorCode;
use crate::wire::{Reader, WireError, WriteExt};

/// Declares a message struct and derives its wire encoding from its field
/// list: [`WireField`](crate::codec::WireField) (so it can be nested in other messages and in `Vec`s),
/// [`Encode`] and [`Decode`].
/// Fields are written and read in declaration order, each by its type's
/// [`WireField`](crate::codec::WireField) impl; `MIN_BYTES` is the sum of the fields'.
///
/// ```text
/// message! {
///     /// LEAVE_GROUP request: `[group][member_id]`.
///     #[derive(Debug, Clone, PartialEq, Eq, Default)]
///     pub struct LeaveGroupRequest {
///         /// Group id.
///         pub group: String,
///         /// Member leaving.
///         pub member_id: String,
///     }
/// }
/// ```
/// A unit struct (`pub struct Empty;`) encodes as no bytes.
macro_rules! message {
    (@traits $name:ident) => {
        impl $crate::messages::Encode for $name {
            #[inline]
            fn encode(&self, buf: &mut Vec<u8>) {
                $crate::codec::WireField::put(self, buf);
            }
        }
        impl $crate::messages::Decode for $name {
            #[inline]
            fn decode(
                r: &mut $crate::wire::Reader<'_>,
            ) -> Result<Self, $crate::wire::WireError> {
                <$name as $crate::codec::WireField>::get(r)
            }
        }
    };

    ($(
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $( $(#[$fmeta:meta])* $fvis:vis $field:ident : $ty:ty ),* $(,)?
        }
    )*) => {$(
        $(#[$meta])*
        $vis struct $name {
            $( $(#[$fmeta])* $fvis $field: $ty, )*
        }

        impl $crate::codec::WireField for $name {
            const MIN_BYTES: usize = 0 $( + <$ty as $crate::codec::WireField>::MIN_BYTES )*;
            #[inline]
            fn put(&self, buf: &mut Vec<u8>) {
                $( $crate::codec::WireField::put(&self.$field, buf); )*
            }
            #[inline]
            fn get(
                r: &mut $crate::wire::Reader<'_>,
            ) -> Result<Self, $crate::wire::WireError> {
                // Struct literal fields are evaluated in the order written: wire order.
                Ok($name { $( $field: <$ty as $crate::codec::WireField>::get(r)?, )* })
            }
        }

        $crate::messages::message!(@traits $name);
    )*};

    ($(#[$meta:meta])* $vis:vis struct $name:ident;) => {
        $(#[$meta])*
        $vis struct $name;

        impl $crate::codec::WireField for $name {
            const MIN_BYTES: usize = 0;
            #[inline]
            fn put(&self, _buf: &mut Vec<u8>) {}
            #[inline]
            fn get(
                _r: &mut $crate::wire::Reader<'_>,
            ) -> Result<Self, $crate::wire::WireError> {
                Ok($name)
            }
        }

        $crate::messages::message!(@traits $name);
    };

}

/// Declares which response each request gets and under which API key:
/// `Request => Response: ApiKey,` per line.
macro_rules! requests {
    ($( $req:ident => $resp:ident : $key:ident, )*) => {$(
        impl $crate::messages::Request for $req {
            const API_KEY: $crate::messages::ApiKey = $crate::messages::ApiKey::$key;
            type Response = $resp;
        }
    )*};
}

pub(crate) use message;

/// Declares [`ApiKey`] from one table: each API's variant, wire value,
/// wire name (docs, errors) and metrics label. Adding an API is adding a
/// line here (and its messages below, and its arm in the broker's
/// dispatch, which the compiler asks for).
macro_rules! api_keys {
    ($( $(#[$doc:meta])* $variant:ident = $value:literal, $name:literal, $label:literal; )*) => {
        /// The API keys. 0-6 are the original seven; 7 and up are Flume's
        /// extensions.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(i16)]
        pub enum ApiKey {
            $( $(#[$doc])* $variant = $value, )*
        }

        impl ApiKey {
            /// Every API, by wire value.
            pub const ALL: &'static [ApiKey] = &[$(ApiKey::$variant,)*];

            /// The key for a wire value.
            pub fn from_i16(k: i16) -> Option<Self> {
                match k {
                    $( $value => Some(ApiKey::$variant), )*
                    _ => None,
                }
            }

            /// Its name as `docs/protocol.md` and error messages spell it
            /// (`PRODUCE`).
            pub fn name(self) -> &'static str {
                match self {
                    $( ApiKey::$variant => $name, )*
                }
            }

            /// Its metrics label (`produce`).
            pub fn label(self) -> &'static str {
                match self {
                    $( ApiKey::$variant => $label, )*
                }
            }
        }
    };
}

api_keys! {
    /// Append records.
    Produce = 0, "PRODUCE", "produce";
    /// Read records, with long polling.
    Fetch = 1, "FETCH", "fetch";
    /// Join a consumer group (and receive an assignment).
    JoinGroup = 2, "JOIN_GROUP", "join_group";
    /// Leave a consumer group.
    LeaveGroup = 3, "LEAVE_GROUP", "leave_group";
    /// Keep a membership alive.
    Heartbeat = 4, "HEARTBEAT", "heartbeat";
    /// Commit offsets.
    OffsetCommit = 5, "OFFSET_COMMIT", "offset_commit";
    /// Read committed offsets and log ends.
    OffsetFetch = 6, "OFFSET_FETCH", "offset_fetch";
    /// Extension: create a topic.
    CreateTopic = 7, "CREATE_TOPIC", "create_topic";
    /// Extension: list topics with partitions and offsets.
    Metadata = 8, "METADATA", "metadata";
    /// Extension: delete a topic, its records and its committed offsets.
    DeleteTopic = 9, "DELETE_TOPIC", "delete_topic";
    /// Extension: change a topic's settings that can change at run time.
    AlterTopic = 10, "ALTER_TOPIC", "alter_topic";
    /// Extension: a topic's settings.
    DescribeTopicConfig = 11, "DESCRIBE_TOPIC_CONFIG", "describe_topic_config";
    /// Extension: offsets by timestamp (and the earliest and latest offsets).
    ListOffsets = 12, "LIST_OFFSETS", "list_offsets";
    /// Extension: delete an empty group's committed offsets.
    DeleteGroup = 13, "DELETE_GROUP", "delete_group";
    /// Extension: every group, with its state.
    ListGroups = 14, "LIST_GROUPS", "list_groups";
    /// Extension: one group's state, members, assignment and committed offsets.
    DescribeGroup = 15, "DESCRIBE_GROUP", "describe_group";
    /// Extension: a heartbeat that waits (up to `max_wait_ms`) for a
    /// rebalance of the member's group, so members learn of one at once.
    HeartbeatWait = 16, "HEARTBEAT_WAIT", "heartbeat_wait";
    /// Extension: a FETCH by a group member that counts as its heartbeat and
    /// is answered at once when the group starts a rebalance.
    GroupFetch = 17, "GROUP_FETCH", "group_fetch";
    /// Extension (security, keys 20-29): one step of a SASL exchange (SCRAM-SHA-256).
    Authenticate = 20, "AUTHENTICATE", "authenticate";
    /// Extension (security): list, add or remove SCRAM users (admins only).
    Users = 21, "USERS", "users";
    /// Extension (security): list, add or remove ACLs (admins only).
    Acls = 22, "ACLS", "acls";
    /// Topic configs by Kafka's names: describe, alter, create with them (extension).
    TopicConfigs = 23, "TOPIC_CONFIGS", "topic_configs";
    /// Extension: more partitions for a topic (never fewer).
    CreatePartitions = 24, "CREATE_PARTITIONS", "create_partitions";
    /// Extension: delete a group's committed offsets on one topic.
    DeleteOffsets = 25, "DELETE_OFFSETS", "delete_offsets";
    /// Extension: move a partition's log start (Kafka's DeleteRecords).
    DeleteRecords = 26, "DELETE_RECORDS", "delete_records";
    /// Extension: the transactional ids the broker coordinates, with their
    /// transactions (Kafka's ListTransactions and DescribeTransactions).
    ListTransactions = 27, "LIST_TRANSACTIONS", "list_transactions";
    /// Extension: join, keep, update or leave a share group (a queue).
    ShareHeartbeat = 28, "SHARE_HEARTBEAT", "share_heartbeat";
    /// Extension: acknowledge records of a share group, then acquire more.
    ShareFetch = 29, "SHARE_FETCH", "share_fetch";
    /// Extension: acknowledge records of a share group.
    ShareAcknowledge = 30, "SHARE_ACKNOWLEDGE", "share_acknowledge";
    /// Extension: a share group's members and its share-partitions' state.
    ShareGroupDescribe = 31, "SHARE_GROUP_DESCRIBE", "share_group_describe";
    /// Extension: consumer-protocol groups (Kafka's KIP-848): each member's
    /// epoch, subscription, assignment and target assignment.
    ConsumerGroupDescribe = 32, "CONSUMER_GROUP_DESCRIBE", "consumer_group_describe";
}

/// Encoding into a buffer.
pub trait Encode {
    /// Appends the encoded message to `buf`.
    fn encode(&self, buf: &mut Vec<u8>);
}

/// Decoding from a payload.
pub trait Decode: Sized {
    /// Reads one message from `r`.
    ///
    /// # Errors
    /// When the bytes do not form a valid message.
    fn decode(r: &mut Reader<'_>) -> Result<Self, WireError>;

    /// Decodes a whole payload, rejecting trailing bytes.
    ///
    /// # Errors
    /// When the payload does not decode or has bytes left over.
    fn decode_exact(payload: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(payload);
        let v = Self::decode(&mut r)?;
        r.finish()?;
        Ok(v)
    }

    /// Decodes a whole shared payload; record batches become zero-copy slices of it.
    ///
    /// # Errors
    /// As [`Decode::decode_exact`].
    fn decode_shared(payload: &Bytes) -> Result<Self, WireError> {
        let mut r = Reader::shared(payload);
        let v = Self::decode(&mut r)?;
        r.finish()?;
        Ok(v)
    }
}

/// A request type and the response it gets.
pub trait Request: Encode + Decode {
    /// Its API key.
    const API_KEY: ApiKey;
    /// The response it gets.
    type Response: Encode + Decode;
}

/// Encodes a response body behind its top-level error code.
pub fn encode_response<R: Encode>(buf: &mut Vec<u8>, result: Result<&R, ErrorCode>) {
    match result {
        Ok(body) => {
            buf.put_i16(0);
            body.encode(buf);
        }
        Err(code) => buf.put_i16(code.code()),
    }
}

/// Decodes a response payload: its top-level error code, then the body.
///
/// # Errors
/// `Ok(Err(code))` for a non-zero top-level code; `Err` if it does not decode.
pub fn decode_response<R: Decode>(payload: &[u8]) -> Result<Result<R, ErrorCode>, WireError> {
    decode_response_from(Reader::new(payload))
}

/// [`decode_response`] of a shared payload: record batches are zero-copy slices of it.
///
/// # Errors
/// As [`decode_response`].
pub fn decode_response_shared<R: Decode>(
    payload: &Bytes,
) -> Result<Result<R, ErrorCode>, WireError> {
    decode_response_from(Reader::shared(payload))
}

fn decode_response_from<R: Decode>(mut r: Reader<'_>) -> Result<Result<R, ErrorCode>, WireError> {
    let code = ErrorCode::from_code(r.i16()?);
    if !code.is_ok() {
        r.finish()?;
        return Ok(Err(code));
    }
    let body = R::decode(&mut r)?;
    r.finish()?;
    Ok(Ok(body))
}

// ---------------------------------------------------------------- PRODUCE

message! {
    /// Records for one topic-partition (or for routing, partition -1).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ProduceEntry {
        /// Topic name.
        pub topic: String,
        /// Partition, or -1 to let the broker route each record by key.
        pub partition: i32,
        /// Records in the stored format (see [`super::record`]), offsets ignored.
        pub records: Bytes,
    }

    /// PRODUCE request: `[count i32] count * ([topic string][partition i32][records bytes])`.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ProduceRequest {
        /// The batches.
        pub entries: Vec<ProduceEntry>,
    }

    /// Consecutive offsets given to records routed to one partition.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Span {
        /// Partition.
        pub partition: i32,
        /// Offset of the first record.
        pub base_offset: i64,
        /// Number of records.
        pub count: i32,
    }

    /// Result for one [`ProduceEntry`].
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ProduceResult {
        /// Topic name.
        pub topic: String,
        /// Partition as requested (-1 when routed).
        pub partition: i32,
        /// Error for the entry as a whole; no record of a failed entry was appended.
        pub error: ErrorCode,
        /// The offsets given, one span per partition written.
        pub spans: Vec<Span>,
        /// For a routed entry (partition -1): the partition of each record, in
        /// request order. Empty otherwise. Record `i`'s offset is the base offset
        /// of its partition's span plus the number of earlier records routed there.
        pub record_partitions: Vec<i32>,
    }

    /// PRODUCE response: `[count i32] count * ([topic][partition i32][error i16]
    /// [spans: count * (partition i32, base_offset i64, count i32)][record_partitions: count * i32])`.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ProduceResponse {
        /// One result per request entry, in request order.
        pub results: Vec<ProduceResult>,
    }
}

impl ProduceResult {
    /// The (partition, offset) of every record of the entry, in request order.
    pub fn record_offsets(&self) -> Vec<(i32, i64)> {
        if self.record_partitions.is_empty() {
            return self
                .spans
                .iter()
                .flat_map(|s| {
                    (0..i64::from(s.count.max(0))).map(move |i| (s.partition, s.base_offset + i))
                })
                .collect();
        }
        let mut next: Vec<(i32, i64)> = self
            .spans
            .iter()
            .map(|s| (s.partition, s.base_offset))
            .collect();
        self.record_partitions
            .iter()
            .map(|p| match next.iter_mut().find(|(q, _)| q == p) {
                Some((_, o)) => {
                    *o += 1;
                    (*p, *o - 1)
                }
                None => (*p, -1),
            })
            .collect()
    }
}

// ---------------------------------------------------------------- FETCH

message! {
    /// One partition to read.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct FetchPartition {
        /// Topic name.
        pub topic: String,
        /// Partition.
        pub partition: i32,
        /// First offset wanted.
        pub offset: i64,
        /// Most record bytes wanted from this partition (at least one record is
        /// returned even if it is larger).
        pub max_bytes: i32,
    }

    /// FETCH request: `[max_wait_ms i32][min_bytes i32][max_bytes i32]
    /// [count i32] count * ([topic][partition i32][offset i64][max_bytes i32])`.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct FetchRequest {
        /// Longest the broker may wait for `min_bytes` to arrive.
        pub max_wait_ms: i32,
        /// Answer as soon as this many record bytes are available in total.
        pub min_bytes: i32,
        /// Most record bytes in the whole response (soft: the first record always fits).
        pub max_bytes: i32,
        /// Partitions to read.
        pub partitions: Vec<FetchPartition>,
    }

    /// Records from one partition. The broker writes the same bytes without
    /// building one, with [`encode_fetch_partition`].
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct FetchPartitionResponse {
        /// Topic name.
        pub topic: String,
        /// Partition.
        pub partition: i32,
        /// Error for this partition.
        pub error: ErrorCode,
        /// Log end offset: the offset the next record will get.
        pub high_watermark: i64,
        /// Oldest offset still stored.
        pub log_start: i64,
        /// Whole records in the stored format.
        pub records: Bytes,
    }

    /// FETCH response: `[count i32] count * ([topic][partition i32][error i16]
    /// [high_watermark i64][log_start i64][records bytes])`.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct FetchResponse {
        /// One entry per requested partition, in request order.
        pub partitions: Vec<FetchPartitionResponse>,
    }
}

/// Writes one FETCH response partition header followed by its records,
/// without building a [`FetchPartitionResponse`] (the broker's zero-copy path:
/// `records` is borrowed from the log). Must write exactly what
/// [`FetchPartitionResponse`]'s derived encoding writes; the test
/// `encode_fetch_partition_matches_the_message` holds the two together.
pub fn encode_fetch_partition(
    buf: &mut Vec<u8>,
    topic: &str,
    partition: i32,
    error: ErrorCode,
    high_watermark: i64,
    log_start: i64,
    records: &[u8],
) {
    buf.put_string(topic);
    buf.put_i32(partition);
    buf.put_i16(error.code());
    buf.put_i64(high_watermark);
    buf.put_i64(log_start);
    buf.put_blob(records);
}

// ---------------------------------------------------------------- JOIN_GROUP

message! {
    /// JOIN_GROUP request: `[group][member_id][session_timeout_ms i32]
    /// [rebalance_timeout_ms i32][assignor string][topics: count * string]`.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct JoinGroupRequest {
        /// Group id.
        pub group: String,
        /// Empty on the first join; the id the broker gave afterwards.
        pub member_id: String,
        /// Heartbeats must arrive more often than this.
        pub session_timeout_ms: i32,
        /// How long a rebalance waits for known members to rejoin.
        pub rebalance_timeout_ms: i32,
        /// `"sticky"` (default when empty), `"range"` or `"roundrobin"`.
        pub assignor: String,
        /// Subscribed topics.
        pub topics: Vec<String>,
    }

    /// Partitions of one topic.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct TopicPartitions {
        /// Topic name.
        pub topic: String,
        /// Partitions.
        pub partitions: Vec<i32>,
    }

    /// JOIN_GROUP response: `[generation i32][member_id][leader_id][members: count * string]
    /// [assignment: count * ([topic][partitions: count * i32])]`.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct JoinGroupResponse {
        /// The new generation.
        pub generation: i32,
        /// This member's id (assigned on first join).
        pub member_id: String,
        /// The leader (the longest-standing member); informational.
        pub leader_id: String,
        /// Every member of the generation.
        pub members: Vec<String>,
        /// This member's partitions.
        pub assignment: Vec<TopicPartitions>,
    }
}

// ---------------------------------------------------------------- LEAVE_GROUP, HEARTBEAT

message! {
    /// An empty response body (LEAVE_GROUP, HEARTBEAT, CREATE_TOPIC): only the top-level error code.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct Empty;
}

message! {
    /// LEAVE_GROUP request: `[group][member_id]`.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct LeaveGroupRequest {
        /// Group id.
        pub group: String,
        /// Member leaving.
        pub member_id: String,
    }

    /// HEARTBEAT request: `[group][generation i32][member_id]`.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct HeartbeatRequest {
        /// Group id.
        pub group: String,
        /// The member's generation.
        pub generation: i32,
        /// Member id.
        pub member_id: String,
    }

    /// HEARTBEAT_WAIT request (extension, key 16):
    /// `[group][generation i32][member_id][max_wait_ms i32]`. A heartbeat
    /// whose answer waits until the group starts a rebalance (or the member
    /// is no longer in its generation: the error at once) or `max_wait_ms`
    /// passes (NONE). The broker caps the wait at the member's session
    /// timeout; a broker without the key answers UNSUPPORTED_API.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct HeartbeatWaitRequest {
        /// Group id.
        pub group: String,
        /// The member's generation.
        pub generation: i32,
        /// Member id.
        pub member_id: String,
        /// Longest wait in ms (0: answer at once, like HEARTBEAT).
        pub max_wait_ms: i32,
    }

    /// GROUP_FETCH request (extension, key 17): `[group][generation i32]
    /// [member_id]` then a FETCH request. A group member's fetch that counts
    /// as its heartbeat when it arrives (so a member that keeps fetching
    /// needs no other) and, while it waits for records, is answered at once
    /// with REBALANCE_IN_PROGRESS (or the member's other error) when the
    /// group starts a rebalance or loses a member. The response is a FETCH
    /// response; a broker without the key answers UNSUPPORTED_API.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct GroupFetchRequest {
        /// Group id.
        pub group: String,
        /// The member's generation.
        pub generation: i32,
        /// Member id.
        pub member_id: String,
        /// The fetch (with no partitions: waits only for a rebalance).
        pub fetch: FetchRequest,
    }
}

// ---------------------------------------------------------------- OFFSET_COMMIT

message! {
    /// An offset for one partition.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct PartitionOffset {
        /// Topic name.
        pub topic: String,
        /// Partition.
        pub partition: i32,
        /// The next offset to read (last processed + 1).
        pub offset: i64,
    }

    /// OFFSET_COMMIT request: `[group][generation i32][member_id]
    /// [count i32] count * ([topic][partition i32][offset i64])`.
    ///
    /// Generation -1 with an empty member id commits outside group membership,
    /// allowed only while the group has no members (tools, standalone consumers).
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct OffsetCommitRequest {
        /// Group id.
        pub group: String,
        /// The member's generation.
        pub generation: i32,
        /// Member id.
        pub member_id: String,
        /// Offsets to store.
        pub offsets: Vec<PartitionOffset>,
    }

    /// Result for one committed partition.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct PartitionError {
        /// Topic name.
        pub topic: String,
        /// Partition.
        pub partition: i32,
        /// Error for this partition.
        pub error: ErrorCode,
    }

    /// OFFSET_COMMIT response: `[count i32] count * ([topic][partition i32][error i16])`.
    /// Fencing errors (UNKNOWN_MEMBER, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS)
    /// come as the top-level code and nothing is stored.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct OffsetCommitResponse {
        /// One per committed partition, in request order.
        pub results: Vec<PartitionError>,
    }
}

// ---------------------------------------------------------------- OFFSET_FETCH

message! {
    /// OFFSET_FETCH request: `[group][count i32] count * ([topic][partitions: count * i32])`;
    /// an empty partition list means every partition of the topic.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct OffsetFetchRequest {
        /// Group id.
        pub group: String,
        /// Topics and partitions to report.
        pub topics: Vec<TopicPartitions>,
    }

    /// Committed offset and log end of one partition.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct OffsetFetchPartition {
        /// Topic name.
        pub topic: String,
        /// Partition.
        pub partition: i32,
        /// Error for this partition.
        pub error: ErrorCode,
        /// Committed next offset to read, -1 when none.
        pub committed: i64,
        /// Oldest offset still stored.
        pub log_start: i64,
        /// Log end offset.
        pub log_end: i64,
    }

    /// OFFSET_FETCH response: `[count i32] count * ([topic][partition i32][error i16]
    /// [committed i64][log_start i64][log_end i64])`.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct OffsetFetchResponse {
        /// One per partition.
        pub partitions: Vec<OffsetFetchPartition>,
    }
}

impl OffsetFetchPartition {
    /// Records not yet consumed by the group ([`crate::lag`]).
    pub fn lag(&self) -> i64 {
        crate::lag(self.committed, self.log_start, self.log_end)
    }
}

// ---------------------------------------------------------------- CREATE_TOPIC (extension, key 7)

message! {
    /// CREATE_TOPIC request (extension): `[name][partitions i32][retention_bytes i64]
    /// [retention_ms i64][segment_bytes i64][max_pending i32][backpressure i8]`;
    /// -1 in any setting means the broker's default; backpressure 0 = block, 1 = reject.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct CreateTopicRequest {
        /// Topic name.
        pub name: String,
        /// Partition count (-1: broker default).
        pub partitions: i32,
        /// Retention by size per partition (-1: default).
        pub retention_bytes: i64,
        /// Retention by age (-1: default).
        pub retention_ms: i64,
        /// Segment size (-1: default).
        pub segment_bytes: i64,
        /// Partition queue capacity (-1: default).
        pub max_pending: i32,
        /// -1 default, 0 block, 1 reject.
        pub backpressure: i8,
    }
}

impl Default for CreateTopicRequest {
    fn default() -> Self {
        CreateTopicRequest {
            name: String::new(),
            partitions: -1,
            retention_bytes: -1,
            retention_ms: -1,
            segment_bytes: -1,
            max_pending: -1,
            backpressure: -1,
        }
    }
}

// ---------------------------------------------------------------- METADATA (extension, key 8)

message! {
    /// METADATA request (extension): `[topics: count * string]`, empty = every topic.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct MetadataRequest {
        /// Topics to describe.
        pub topics: Vec<String>,
    }

    /// Offsets of one partition.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct PartitionMetadata {
        /// Partition.
        pub partition: i32,
        /// Oldest offset still stored.
        pub log_start: i64,
        /// Log end offset.
        pub log_end: i64,
    }

    /// One topic.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct TopicMetadata {
        /// Topic name.
        pub name: String,
        /// UNKNOWN_TOPIC for a requested topic that does not exist.
        pub error: ErrorCode,
        /// Its partitions.
        pub partitions: Vec<PartitionMetadata>,
    }

    /// METADATA response: `[count i32] count * ([name][error i16]
    /// [partitions: count * (partition i32, log_start i64, log_end i64)])`.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct MetadataResponse {
        /// Topics, sorted by name.
        pub topics: Vec<TopicMetadata>,
    }
}

// ---------------------------------------------------------------- DELETE_TOPIC (extension, key 9)

message! {
    /// DELETE_TOPIC request (extension): `[name]`. The answer is the top-level
    /// error code alone (UNKNOWN_TOPIC, INVALID_NAME, STORAGE_ERROR).
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct DeleteTopicRequest {
        /// Topic name.
        pub name: String,
    }
}

// ---------------------------------------------------------------- ALTER_TOPIC, DESCRIBE_TOPIC_CONFIG (keys 10, 11)

message! {
    /// ALTER_TOPIC request (extension): `[name][retention_bytes i64]
    /// [retention_ms i64][segment_bytes i64]`: -1 leaves a setting as it is;
    /// 0 removes a retention limit; any other value is the new setting.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct AlterTopicRequest {
        /// Topic name.
        pub name: String,
        /// Retention by size per partition (-1 unchanged, 0 none).
        pub retention_bytes: i64,
        /// Retention by age (-1 unchanged, 0 none).
        pub retention_ms: i64,
        /// Segment size, 1024..=2^31 (-1 unchanged).
        pub segment_bytes: i64,
    }

    /// DESCRIBE_TOPIC_CONFIG request (extension): `[name]`.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct DescribeTopicConfigRequest {
        /// Topic name.
        pub name: String,
    }

    /// A topic's settings (the answer to ALTER_TOPIC, after the change, and to
    /// DESCRIBE_TOPIC_CONFIG): `[partitions i32][retention_bytes i64]
    /// [retention_ms i64][segment_bytes i64][max_pending i32][backpressure i8]`;
    /// a retention of -1 is no limit; backpressure 0 = block, 1 = reject.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct TopicSettings {
        /// Partition count.
        pub partitions: i32,
        /// Retention by size per partition, -1 for none.
        pub retention_bytes: i64,
        /// Retention by age, -1 for none.
        pub retention_ms: i64,
        /// Segment size.
        pub segment_bytes: i64,
        /// Partition queue capacity.
        pub max_pending: i32,
        /// 0 block, 1 reject.
        pub backpressure: i8,
    }
}

impl Default for AlterTopicRequest {
    fn default() -> Self {
        AlterTopicRequest {
            name: String::new(),
            retention_bytes: -1,
            retention_ms: -1,
            segment_bytes: -1,
        }
    }
}

// ---------------------------------------------------------------- LIST_OFFSETS (extension, key 12)

/// [`ListOffsetsPartition::timestamp`]: the log end (the next offset).
pub const LATEST_TIMESTAMP: i64 = -1;
/// [`ListOffsetsPartition::timestamp`]: the log start (the oldest stored offset).
pub const EARLIEST_TIMESTAMP: i64 = -2;
/// [`ListOffsetsPartition::timestamp`]: the first record with the largest
/// timestamp (its offset and timestamp; -1 and -1 when the partition is empty).
pub const MAX_TIMESTAMP: i64 = -3;

message! {
    /// One partition to look up.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ListOffsetsPartition {
        /// Topic name.
        pub topic: String,
        /// Partition.
        pub partition: i32,
        /// Milliseconds since the epoch (0 or more): the first offset whose
        /// record timestamp is at least this; or [`LATEST_TIMESTAMP`] (-1),
        /// [`EARLIEST_TIMESTAMP`] (-2), [`MAX_TIMESTAMP`] (-3).
        pub timestamp: i64,
    }

    /// LIST_OFFSETS request (extension): `[count i32] count * ([topic][partition i32][timestamp i64])`.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ListOffsetsRequest {
        /// Partitions to look up.
        pub partitions: Vec<ListOffsetsPartition>,
    }

    /// The offset found for one partition.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ListedOffset {
        /// Topic name.
        pub topic: String,
        /// Partition.
        pub partition: i32,
        /// UNKNOWN_TOPIC, UNKNOWN_PARTITION, INVALID_REQUEST (a timestamp below -2), ...
        pub error: ErrorCode,
        /// The offset: for a time, the first whose timestamp is at least it, or
        /// the log end when no record is that recent (then `timestamp` is -1).
        pub offset: i64,
        /// The timestamp of the record at `offset`, -1 for earliest/latest or none found.
        pub timestamp: i64,
    }

    /// LIST_OFFSETS response: `[count i32] count * ([topic][partition i32][error i16]
    /// [offset i64][timestamp i64])`, in request order.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ListOffsetsResponse {
        /// One per requested partition, in order.
        pub partitions: Vec<ListedOffset>,
    }
}

// ---------------------------------------------------------------- DELETE_GROUP (extension, key 13)

message! {
    /// DELETE_GROUP request (extension): `[group]`. Refused with GROUP_NOT_EMPTY
    /// while the group has members; UNKNOWN_GROUP when it has neither members
    /// nor committed offsets.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct DeleteGroupRequest {
        /// Group id.
        pub group: String,
    }

    /// DELETE_GROUP response: `[offsets_dropped i32]`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct DeleteGroupResponse {
        /// How many committed (topic, partition) offsets went.
        pub offsets_dropped: i32,
    }
}

// ---------------------------------------------------------------- DELETE_RECORDS (extension, key 26)

message! {
    /// DELETE_RECORDS request (extension): `[topic][partition i32][before i64]`:
    /// the partition's log start moves to `before` (-1: its log end, deleting
    /// every record), durably. A `before` below the current start leaves it;
    /// past the end is OFFSET_OUT_OF_RANGE. Needs DELETE on the topic.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct DeleteRecordsRequest {
        /// Topic.
        pub topic: String,
        /// Partition.
        pub partition: i32,
        /// The new log start, or -1 for the log end.
        pub before: i64,
    }

    /// DELETE_RECORDS response: `[log_start i64]`, the partition's log start now.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct DeleteRecordsResponse {
        /// The log start after the request.
        pub log_start: i64,
    }
}

// ---------------------------------------------------------------- LIST_TRANSACTIONS (extension, key 27)

message! {
    /// LIST_TRANSACTIONS request (extension): `[states_filter [string]]
    /// [min_age_ms i64]`: the transactional ids in one of these states
    /// (Kafka's names: Empty, Ongoing, PrepareCommit, PrepareAbort,
    /// CompleteCommit, CompleteAbort, Dead; empty for all; an unknown name
    /// is INVALID_REQUEST) whose open transaction began at least
    /// `min_age_ms` ago (-1: any, open or not; the default). Needs DESCRIBE
    /// on the cluster.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ListTransactionsRequest {
        /// States to list; empty for all.
        pub states_filter: Vec<String>,
        /// Only transactions open at least this long (ms); -1 for every id.
        pub min_age_ms: i64,
    }

    /// One transactional id and its current (or last) transaction.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct TransactionListing {
        /// The transactional id.
        pub transactional_id: String,
        /// Its producer id.
        pub producer_id: i64,
        /// Its producer epoch (a producer with an older one is fenced).
        pub producer_epoch: i16,
        /// The transaction's state (Kafka's names).
        pub state: String,
        /// When the open transaction began (ms since the epoch); -1 when none is open.
        pub started_ms: i64,
        /// The transaction timeout the producer asked for (ms).
        pub timeout_ms: i32,
        /// The partitions the current transaction wrote to.
        pub partitions: Vec<TopicPartitions>,
    }

    /// LIST_TRANSACTIONS response: `[count i32] count * ([transactional_id]
    /// [producer_id i64][producer_epoch i16][state][started_ms i64]
    /// [timeout_ms i32][partitions [topic [partition i32]]])`, sorted by id.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ListTransactionsResponse {
        /// The transactional ids.
        pub transactions: Vec<TransactionListing>,
    }
}

impl Default for ListTransactionsRequest {
    /// Every transactional id: no state filter, no age filter.
    fn default() -> Self {
        ListTransactionsRequest {
            states_filter: Vec::new(),
            min_age_ms: -1,
        }
    }
}

// ---------------------------------------------------------------- SHARE GROUPS (extension, keys 28-31)

/// [`ShareAcknowledgement::ack_type`]: offsets with no record (nothing to do).
pub const ACK_GAP: i8 = 0;
/// [`ShareAcknowledgement::ack_type`]: processed, never delivered again.
pub const ACK_ACCEPT: i8 = 1;
/// [`ShareAcknowledgement::ack_type`]: back to available, delivered again (to any member).
pub const ACK_RELEASE: i8 = 2;
/// [`ShareAcknowledgement::ack_type`]: not processable, never delivered again (archived).
pub const ACK_REJECT: i8 = 3;
/// [`ShareAcknowledgement::ack_type`]: keep the records another lock duration.
pub const ACK_RENEW: i8 = 4;

message! {
    /// SHARE_HEARTBEAT request (extension): `[group][member_id]
    /// [member_epoch i32][client_id][topics [string]]`: epoch 0 joins (with
    /// an empty member id the broker makes one), -1 leaves, any other is the
    /// epoch last answered. `topics` empty: the subscription is unchanged
    /// (a join needs one).
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ShareHeartbeatRequest {
        /// The share group.
        pub group: String,
        /// The member's id (empty on a join: the broker makes one).
        pub member_id: String,
        /// 0 to join, -1 to leave, else the epoch last answered.
        pub member_epoch: i32,
        /// The client's id (shown by SHARE_GROUP_DESCRIBE).
        pub client_id: String,
        /// The topics subscribed to; empty: unchanged.
        pub topics: Vec<String>,
    }

    /// SHARE_HEARTBEAT response: `[member_id][member_epoch i32]
    /// [heartbeat_interval_ms i32][assignment [topic [partition i32]]]`.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ShareHeartbeatResponse {
        /// The member's id (the one made for it on a join without one).
        pub member_id: String,
        /// Its epoch now, to send in the next heartbeat (-1 after a leave).
        pub member_epoch: i32,
        /// How often to heartbeat.
        pub heartbeat_interval_ms: i32,
        /// Its partitions: every partition of every topic it subscribes to.
        pub assignment: Vec<TopicPartitions>,
    }

    /// One acknowledgement: the records `first_offset..=last_offset` of a partition.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ShareAcknowledgement {
        /// Topic.
        pub topic: String,
        /// Partition.
        pub partition: i32,
        /// First offset.
        pub first_offset: i64,
        /// Last offset (inclusive).
        pub last_offset: i64,
        /// [`ACK_GAP`], [`ACK_ACCEPT`], [`ACK_RELEASE`], [`ACK_REJECT`] or [`ACK_RENEW`].
        pub ack_type: i8,
    }

    /// One partition to acquire records from.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct SharePartitionRef {
        /// Topic.
        pub topic: String,
        /// Partition.
        pub partition: i32,
    }

    /// SHARE_FETCH request (extension): `[group][member_id][max_wait_ms i32]
    /// [max_records i32][max_bytes i32][partitions [topic][partition i32]]
    /// [acknowledgements [topic][partition i32][first_offset i64]
    /// [last_offset i64][ack_type i8]]`: the acknowledgements are applied
    /// first, then records are acquired.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ShareFetchRequest {
        /// The share group.
        pub group: String,
        /// The member.
        pub member_id: String,
        /// Longest the broker waits for records when none are available.
        pub max_wait_ms: i32,
        /// Most records acquired over all partitions.
        pub max_records: i32,
        /// Most record bytes read per partition (the first record is whole).
        pub max_bytes: i32,
        /// Partitions to acquire from (assigned to the member).
        pub partitions: Vec<SharePartitionRef>,
        /// Acknowledgements, applied before acquiring.
        pub acknowledgements: Vec<ShareAcknowledgement>,
    }

    /// A run of acquired records with one delivery count.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct AcquiredRecords {
        /// First offset.
        pub first_offset: i64,
        /// Last offset (inclusive).
        pub last_offset: i64,
        /// Deliveries of these records, this one included (1 the first time).
        pub delivery_count: i16,
    }

    /// What one partition of a SHARE_FETCH acquired.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ShareFetchPartition {
        /// Topic.
        pub topic: String,
        /// Partition.
        pub partition: i32,
        /// Why nothing was acquired here (NOT_ASSIGNED, UNKNOWN_TOPIC, ...).
        pub error: ErrorCode,
        /// The runs acquired, in offset order.
        pub acquired: Vec<AcquiredRecords>,
        /// The acquired records (only those), in the stored format.
        pub records: Bytes,
    }

    /// SHARE_FETCH response: `[acknowledgements [error i16]]
    /// [partitions [topic][partition i32][error i16]
    /// [acquired [first_offset i64][last_offset i64][delivery_count i16]]
    /// [records bytes]]`: one result per acknowledgement and one entry per
    /// partition, in request order.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ShareFetchResponse {
        /// One per acknowledgement of the request, in order.
        pub acknowledgements: Vec<ErrorCode>,
        /// One per partition of the request, in order.
        pub partitions: Vec<ShareFetchPartition>,
    }

    /// SHARE_ACKNOWLEDGE request (extension): `[group][member_id]
    /// [acknowledgements [topic][partition i32][first_offset i64]
    /// [last_offset i64][ack_type i8]]`.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ShareAcknowledgeRequest {
        /// The share group.
        pub group: String,
        /// The member.
        pub member_id: String,
        /// The acknowledgements.
        pub acknowledgements: Vec<ShareAcknowledgement>,
    }

    /// SHARE_ACKNOWLEDGE response: `[results [error i16]]`, one per
    /// acknowledgement, in order.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ShareAcknowledgeResponse {
        /// One per acknowledgement.
        pub results: Vec<ErrorCode>,
    }

    /// SHARE_GROUP_DESCRIBE request (extension): `[group]`.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ShareGroupDescribeRequest {
        /// The share group.
        pub group: String,
    }

    /// One member of a share group.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ShareMemberInfo {
        /// Its id.
        pub member_id: String,
        /// The client's id.
        pub client_id: String,
        /// The client's address (Kafka clients; empty for Flume's).
        pub client_host: String,
        /// Its epoch.
        pub member_epoch: i32,
        /// The topics it subscribes to.
        pub subscribed: Vec<String>,
        /// Its partitions.
        pub assignment: Vec<TopicPartitions>,
    }

    /// One share-partition of a share group.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct SharePartitionInfo {
        /// Topic.
        pub topic: String,
        /// Partition.
        pub partition: i32,
        /// Every record below is done (accepted or archived).
        pub start_offset: i64,
        /// The partition's log end (-1 if the topic is gone).
        pub log_end: i64,
        /// Records between the start and the last handed out, in any state.
        pub in_flight: i64,
        /// Of those, acquired by a member now.
        pub acquired: i64,
        /// Of those, available for (re)delivery.
        pub available: i64,
        /// Of those, delivered more than once and not done.
        pub redelivered: i64,
        /// Records archived (rejected or delivered too often) since the broker started.
        pub archived: i64,
    }

    /// SHARE_GROUP_DESCRIBE response: `[group][epoch i32]
    /// [members [member_id][client_id][client_host][member_epoch i32]
    /// [subscribed [string]][assignment [topic [partition i32]]]]
    /// [partitions [topic][partition i32][start_offset i64][log_end i64]
    /// [in_flight i64][acquired i64][available i64][redelivered i64][archived i64]]`.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ShareGroupDescribeResponse {
        /// The group.
        pub group: String,
        /// Its epoch (0 without members).
        pub epoch: i32,
        /// Its members, sorted by id.
        pub members: Vec<ShareMemberInfo>,
        /// Its share-partitions, sorted by topic and partition.
        pub partitions: Vec<SharePartitionInfo>,
    }
}

// ---------------------------------------------------------------- CONSUMER_GROUP_DESCRIBE (extension, key 32)

message! {
    /// CONSUMER_GROUP_DESCRIBE request (extension): `[groups [string]]`:
    /// these consumer-protocol groups (Kafka clients with
    /// `group.protocol=consumer`, KIP-848), or every one with members when
    /// `groups` is empty. At most 10,000 names (else INVALID_REQUEST).
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ConsumerGroupDescribeRequest {
        /// Group ids; empty for every consumer-protocol group with members.
        pub groups: Vec<String>,
    }

    /// One member of a consumer-protocol group.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ConsumerMemberInfo {
        /// Its id (the client's).
        pub member_id: String,
        /// A static member's `group.instance.id` (empty for a dynamic one).
        pub instance_id: String,
        /// Its rack (empty without one).
        pub rack_id: String,
        /// Its epoch: the group epoch whose assignment it has reconciled.
        pub member_epoch: i32,
        /// The client's id.
        pub client_id: String,
        /// The client's address.
        pub client_host: String,
        /// The topics it subscribes to by name.
        pub subscribed: Vec<String>,
        /// Its regular-expression subscription (empty without one).
        pub regex: String,
        /// The partitions it owns now.
        pub assignment: Vec<TopicPartitions>,
        /// The partitions the group's target assignment gives it.
        pub target: Vec<TopicPartitions>,
    }

    /// One consumer-protocol group.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ConsumerGroupInfo {
        /// Group id.
        pub group: String,
        /// `Stable` (every member owns its target) or `Reconciling`.
        pub state: String,
        /// The group epoch (bumped by every membership or subscription change).
        pub epoch: i32,
        /// The epoch of the target assignment.
        pub assignment_epoch: i32,
        /// The server-side assignor (`uniform`, `range`).
        pub assignor: String,
        /// Members, sorted by id.
        pub members: Vec<ConsumerMemberInfo>,
    }

    /// CONSUMER_GROUP_DESCRIBE response: `[groups [ConsumerGroupInfo]]`,
    /// sorted by id; a named group that is not a consumer-protocol group
    /// with members is left out.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ConsumerGroupDescribeResponse {
        /// The groups described.
        pub groups: Vec<ConsumerGroupInfo>,
    }
}

// ---------------------------------------------------------------- CREATE_PARTITIONS, DELETE_OFFSETS (extension, keys 24, 25)

message! {
    /// CREATE_PARTITIONS request (extension): `[topic][partitions i32]
    /// [validate_only i8]`: grow the topic to `partitions` in all (more than
    /// it has, else INVALID_REQUEST); `validate_only` 1 runs the checks only.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct CreatePartitionsRequest {
        /// Topic name.
        pub topic: String,
        /// The new partition count (in all).
        pub partitions: i32,
        /// 1: check only, change nothing.
        pub validate_only: i8,
    }

    /// CREATE_PARTITIONS response: `[before i32][partitions i32]`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct CreatePartitionsResponse {
        /// The count before.
        pub before: i32,
        /// The count now (or, validating only, what it would be).
        pub partitions: i32,
    }

    /// DELETE_OFFSETS request (extension): `[group][topic][count i32] count *
    /// [partition i32]`: the group's committed offsets on these partitions
    /// of the topic go (every partition of it when the list is empty).
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct DeleteOffsetsRequest {
        /// Group id.
        pub group: String,
        /// Topic name.
        pub topic: String,
        /// Partitions; empty for every partition of the topic.
        pub partitions: Vec<i32>,
    }

    /// One partition's outcome.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct DeletedOffset {
        /// Partition.
        pub partition: i32,
        /// NONE (deleted, or nothing was committed), UNKNOWN_PARTITION, or
        /// GROUP_NOT_EMPTY: a member of the group subscribes to the topic.
        pub error: ErrorCode,
    }

    /// DELETE_OFFSETS response: `[count i32] count * ([partition i32][error i16])`.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct DeleteOffsetsResponse {
        /// One per partition, in order.
        pub partitions: Vec<DeletedOffset>,
    }
}

// ---------------------------------------------------------------- LIST_GROUPS, DESCRIBE_GROUP (keys 14, 15)

message! {
    /// LIST_GROUPS request (extension): `[states_filter [string]]`: only
    /// groups in one of these states (Kafka's names: Empty,
    /// PreparingRebalance, CompletingRebalance, Stable); empty for every group.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ListGroupsRequest {
        /// States to list; empty for all.
        pub states_filter: Vec<String>,
    }

    /// One listed group.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct GroupListing {
        /// Group id.
        pub group: String,
        /// Its state (Kafka's names).
        pub state: String,
        /// "flume" for groups the broker assigns, "consumer" (or another
        /// protocol type) for Kafka clients' groups, empty for a group known
        /// only by its committed offsets.
        pub protocol_type: String,
    }

    /// LIST_GROUPS response: `[count i32] count * ([group][state][protocol_type])`, sorted by group.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ListGroupsResponse {
        /// The groups.
        pub groups: Vec<GroupListing>,
    }

    /// DESCRIBE_GROUP request (extension): `[group]`. UNKNOWN_GROUP when the
    /// group has neither members nor committed offsets.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct DescribeGroupRequest {
        /// Group id.
        pub group: String,
    }

    /// One member of a described group.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct GroupMemberInfo {
        /// Member id.
        pub member_id: String,
        /// Client id (Kafka clients; empty for Flume's).
        pub client_id: String,
        /// Where the member connects from (Kafka clients; empty for Flume's).
        pub client_host: String,
        /// The member's partitions in the current generation.
        pub assignment: Vec<TopicPartitions>,
    }

    /// One committed offset of a described group, with the partition's end.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct GroupOffsetInfo {
        /// Topic.
        pub topic: String,
        /// Partition.
        pub partition: i32,
        /// Committed offset.
        pub committed: i64,
        /// The partition's log end (-1 if the topic is gone); lag is
        /// `log_end - committed`.
        pub log_end: i64,
    }

    /// DESCRIBE_GROUP response: `[group][state][protocol_type][protocol]
    /// [generation i32][leader][members][offsets]`.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct DescribeGroupResponse {
        /// Group id.
        pub group: String,
        /// Its state (Kafka's names).
        pub state: String,
        /// As in [`GroupListing::protocol_type`].
        pub protocol_type: String,
        /// The assignor (broker-assigned) or the chosen protocol (Kafka clients).
        pub protocol: String,
        /// The generation (0 before the first).
        pub generation: i32,
        /// The leader's member id (empty without members).
        pub leader_id: String,
        /// Members, sorted by id.
        pub members: Vec<GroupMemberInfo>,
        /// Every committed offset, sorted by topic and partition.
        pub offsets: Vec<GroupOffsetInfo>,
    }
}

// ---------------------------------------------------------------- AUTHENTICATE (extension, key 20)

message! {
    /// AUTHENTICATE request (extension): `[mechanism string][payload bytes]`,
    /// one step of a SASL exchange. SCRAM-SHA-256 takes two: client-first,
    /// then client-final (see [`crate::scram`]).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct AuthenticateRequest {
        /// `SCRAM-SHA-256`.
        pub mechanism: String,
        /// The mechanism's message.
        pub payload: Bytes,
    }

    /// AUTHENTICATE response: `[payload bytes]`, the server's next message
    /// (server-first, then server-final). A failed step is the top-level
    /// code AUTHENTICATION_FAILED instead.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct AuthenticateResponse {
        /// The server's message.
        pub payload: Bytes,
    }
}

// ---------------------------------------------------------------- USERS (extension, key 21)

/// [`UsersRequest::op`]: list the users.
pub const USERS_LIST: i8 = 0;
/// [`UsersRequest::op`]: add the user, or replace its verifier.
pub const USERS_PUT: i8 = 1;
/// [`UsersRequest::op`]: remove the user.
pub const USERS_REMOVE: i8 = 2;

message! {
    /// USERS request (extension): `[op i8][name string][iterations i32][salt bytes]
    /// [stored_key bytes][server_key bytes]`. The client makes the SCRAM verifier,
    /// so the password never reaches the broker; list and remove leave the
    /// verifier fields empty.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct UsersRequest {
        /// [`USERS_LIST`], [`USERS_PUT`] or [`USERS_REMOVE`].
        pub op: i8,
        /// The user (empty for list).
        pub name: String,
        /// PBKDF2 iterations, at least 4096 (put).
        pub iterations: i32,
        /// The salt (put).
        pub salt: Bytes,
        /// StoredKey, 32 bytes (put).
        pub stored_key: Bytes,
        /// ServerKey, 32 bytes (put).
        pub server_key: Bytes,
    }

    /// USERS response: `[users: count * string]`, every user after the change, sorted.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct UsersResponse {
        /// The user names.
        pub users: Vec<String>,
    }
}

// ---------------------------------------------------------------- ACLS (extension, key 22)

/// [`AclsRequest::op`]: list the ACLs (of [`AclsRequest::acl`]'s principal, if not empty).
pub const ACLS_LIST: i8 = 0;
/// [`AclsRequest::op`]: add the ACL.
pub const ACLS_ADD: i8 = 1;
/// [`AclsRequest::op`]: remove the ACL.
pub const ACLS_REMOVE: i8 = 2;

message! {
    /// One ACL: `[principal string][permission string][resource_type string]
    /// [pattern string][name string][operation string]`, each as Kafka
    /// writes it: `User:alice`, `allow`, `topic`, `literal`, `orders`, `read`.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct AclEntry {
        /// `User:NAME`, `User:*` or `User:ANONYMOUS`.
        pub principal: String,
        /// `allow` or `deny`.
        pub permission: String,
        /// `topic`, `group` or `cluster`.
        pub resource_type: String,
        /// `literal` or `prefixed`.
        pub pattern: String,
        /// The name, prefix or `*` (`kafka-cluster` for the cluster).
        pub name: String,
        /// `read`, `write`, `create`, `delete`, `describe`, `alter` or `all`.
        pub operation: String,
    }

    /// ACLS request (extension): `[op i8][acl AclEntry]`. List reads only
    /// the principal (empty: every ACL).
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct AclsRequest {
        /// [`ACLS_LIST`], [`ACLS_ADD`] or [`ACLS_REMOVE`].
        pub op: i8,
        /// The ACL (add, remove) or the principal to list.
        pub acl: AclEntry,
    }

    /// ACLS response: `[changed i8][acls: count * AclEntry]`: whether the
    /// add or remove changed anything (0: it was there, or was not), and
    /// every ACL after it (of the principal, for list), sorted.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct AclsResponse {
        /// 1 when the add or remove changed the ACLs.
        pub changed: i8,
        /// The ACLs.
        pub acls: Vec<AclEntry>,
    }
}

// ---------------------------------------------------------------- TOPIC_CONFIGS (extension, key 23)

/// [`TopicConfigsRequest::op`]: describe a topic's configs.
pub const TOPIC_CONFIGS_DESCRIBE: i8 = 0;
/// [`TopicConfigsRequest::op`]: set and delete configs of a topic.
pub const TOPIC_CONFIGS_ALTER: i8 = 1;
/// [`TopicConfigsRequest::op`]: create a topic with configs.
pub const TOPIC_CONFIGS_CREATE: i8 = 2;

/// [`TopicConfigValue::source`]: set on the topic (Kafka's DYNAMIC_TOPIC_CONFIG).
pub const CONFIG_SOURCE_TOPIC: i8 = 1;
/// [`TopicConfigValue::source`]: the broker's default, set at its start (STATIC_BROKER_CONFIG).
pub const CONFIG_SOURCE_BROKER: i8 = 4;
/// [`TopicConfigValue::source`]: the built-in default (DEFAULT_CONFIG).
pub const CONFIG_SOURCE_DEFAULT: i8 = 5;

message! {
    /// One config by name.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ConfigEntry {
        /// Kafka's topic config name (`cleanup.policy`, ...).
        pub name: String,
        /// Its value as text (`compact`, `86400000`, ...).
        pub value: String,
    }

    /// TOPIC_CONFIGS request (extension): `[op i8][name][partitions i32]
    /// [validate_only i8][set: count * ([name][value])][delete: count * name]`.
    /// op 0 describes the topic (the other fields are ignored), 1 sets and
    /// then deletes (back to the broker's default) configs, 2 creates the
    /// topic with `partitions` (-1: the broker's default) and the `set` configs.
    /// validate_only 1: check, change nothing.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct TopicConfigsRequest {
        /// [`TOPIC_CONFIGS_DESCRIBE`], [`TOPIC_CONFIGS_ALTER`] or [`TOPIC_CONFIGS_CREATE`].
        pub op: i8,
        /// Topic name.
        pub name: String,
        /// Create only: the partition count, -1 for the broker's default.
        pub partitions: i32,
        /// 1: check only.
        pub validate_only: i8,
        /// Configs to set.
        pub set: Vec<ConfigEntry>,
        /// Alter only: configs to take back to the broker's default.
        pub delete: Vec<String>,
    }

    /// One config of a topic as it is now.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct TopicConfigValue {
        /// Kafka's name.
        pub name: String,
        /// The value in effect.
        pub value: String,
        /// [`CONFIG_SOURCE_TOPIC`], [`CONFIG_SOURCE_BROKER`] or [`CONFIG_SOURCE_DEFAULT`].
        pub source: i8,
    }

    /// TOPIC_CONFIGS response: `[error i16][message][partitions i32]
    /// [configs: count * ([name][value][source i8])]`. The top-level code is
    /// 0 once the request decoded and was authorized; `error` is the
    /// outcome (UNKNOWN_TOPIC, INVALID_CONFIG, TOPIC_ALREADY_EXISTS, ...)
    /// and `message` says what, naming the config and value. On success
    /// `configs` is every config of the topic (after the change), sorted by name.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct TopicConfigsResponse {
        /// The outcome.
        pub error: ErrorCode,
        /// What went wrong (empty on success).
        pub message: String,
        /// The topic's partition count (-1 on error).
        pub partitions: i32,
        /// Every config, sorted by name.
        pub configs: Vec<TopicConfigValue>,
    }
}

// ---------------------------------------------------------------- requests and their responses

requests! {
    ProduceRequest => ProduceResponse: Produce,
    FetchRequest => FetchResponse: Fetch,
    JoinGroupRequest => JoinGroupResponse: JoinGroup,
    LeaveGroupRequest => Empty: LeaveGroup,
    HeartbeatRequest => Empty: Heartbeat,
    OffsetCommitRequest => OffsetCommitResponse: OffsetCommit,
    OffsetFetchRequest => OffsetFetchResponse: OffsetFetch,
    CreateTopicRequest => Empty: CreateTopic,
    MetadataRequest => MetadataResponse: Metadata,
    DeleteTopicRequest => Empty: DeleteTopic,
    AlterTopicRequest => TopicSettings: AlterTopic,
    DescribeTopicConfigRequest => TopicSettings: DescribeTopicConfig,
    ListOffsetsRequest => ListOffsetsResponse: ListOffsets,
    DeleteGroupRequest => DeleteGroupResponse: DeleteGroup,
    ListGroupsRequest => ListGroupsResponse: ListGroups,
    DescribeGroupRequest => DescribeGroupResponse: DescribeGroup,
    AuthenticateRequest => AuthenticateResponse: Authenticate,
    UsersRequest => UsersResponse: Users,
    AclsRequest => AclsResponse: Acls,
    HeartbeatWaitRequest => Empty: HeartbeatWait,
    GroupFetchRequest => FetchResponse: GroupFetch,
    DeleteRecordsRequest => DeleteRecordsResponse: DeleteRecords,
    CreatePartitionsRequest => CreatePartitionsResponse: CreatePartitions,
    DeleteOffsetsRequest => DeleteOffsetsResponse: DeleteOffsets,
    TopicConfigsRequest => TopicConfigsResponse: TopicConfigs,
    ListTransactionsRequest => ListTransactionsResponse: ListTransactions,
    ShareHeartbeatRequest => ShareHeartbeatResponse: ShareHeartbeat,
    ShareFetchRequest => ShareFetchResponse: ShareFetch,
    ShareAcknowledgeRequest => ShareAcknowledgeResponse: ShareAcknowledge,
    ShareGroupDescribeRequest => ShareGroupDescribeResponse: ShareGroupDescribe,
    ConsumerGroupDescribeRequest => ConsumerGroupDescribeResponse: ConsumerGroupDescribe,
}

#[cfg(test)]
mod api_key_tests {
    use super::ApiKey;

    #[test]
    fn every_key_round_trips_and_is_named_once() {
        let mut values = std::collections::HashSet::new();
        let mut names = std::collections::HashSet::new();
        for &k in ApiKey::ALL {
            assert_eq!(ApiKey::from_i16(k as i16), Some(k));
            assert!(values.insert(k as i16), "{k:?}");
            assert!(names.insert(k.name()), "{k:?}");
            assert_eq!(k.label(), k.name().to_lowercase(), "{k:?}");
        }
        assert_eq!(ApiKey::from_i16(18), None);
        assert_eq!(ApiKey::from_i16(-1), None);
        assert_eq!(ApiKey::ShareGroupDescribe.name(), "SHARE_GROUP_DESCRIBE");
    }
}

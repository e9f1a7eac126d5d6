//! The stable error-code table. Codes are never reused; a retired code stays reserved.

/// An error code carried in responses (i16 on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// 0: success.
    None,
    /// 1: an unexpected server error; the message is in the broker's log.
    Unknown,
    /// 2: the request was well framed but its payload did not decode.
    InvalidRequest,
    /// 3: the topic does not exist (and auto-create is off, or the name is invalid).
    UnknownTopic,
    /// 4: the partition does not exist in that topic.
    UnknownPartition,
    /// 5: the fetch offset is below the log start or above the log end.
    OffsetOutOfRange,
    /// 6: the member id is not known to the group (expired, left, or never joined).
    UnknownMember,
    /// 7: the generation is not the group's current one.
    IllegalGeneration,
    /// 8: the group is rebalancing; rejoin with JOIN_GROUP.
    RebalanceInProgress,
    /// 9: the partition queue is full and the topic's backpressure mode is reject.
    QueueFull,
    /// 10: a record is larger than the broker's `max_record_bytes`.
    RecordTooLarge,
    /// 11: a record's CRC or structure is wrong (on the wire or on disk).
    CorruptRecord,
    /// 12: CREATE_TOPIC for a topic that exists.
    TopicAlreadyExists,
    /// 13: the broker could not write to (or read from) its disk.
    StorageError,
    /// 14: the api key is not one the broker knows.
    UnsupportedApi,
    /// 15: the broker is shutting down.
    ShuttingDown,
    /// 16: a topic or group name is empty, too long, or has characters outside `[A-Za-z0-9._-]`.
    InvalidName,
    /// 17: a broker limit is reached (groups, members of one group); the broker's log
    /// names the limit and its value. Retrying later may succeed.
    LimitReached,
    /// 18: the group has members: resetting its offsets or deleting it waits
    /// until every member has left (as Kafka's NON_EMPTY_GROUP).
    GroupNotEmpty,
    /// 19: no group of that name: no members and no committed offsets.
    UnknownGroup,
    /// 20: a commit's metadata string is longer than the broker keeps
    /// (4096 bytes, Kafka's `offset.metadata.max.bytes`).
    OffsetMetadataTooLarge,
    /// 21: a topic config is unknown or its value is out of range (the
    /// broker's log and the Kafka listener's message name both).
    InvalidConfig,
    /// 22: a record the topic cannot take as it is: a record without a key
    /// on a compacted topic (Kafka's INVALID_RECORD); nothing of the batch
    /// was appended.
    InvalidRecord,
    /// 23: a share group acknowledgement of records the member does not
    /// hold: never acquired by it, already acknowledged, or their lock ran
    /// out (Kafka's INVALID_RECORD_STATE); nothing of it was applied.
    InvalidRecordState,
    /// 24: SHARE_FETCH of a partition the member is not assigned (not
    /// subscribed to its topic, or the topic has fewer partitions).
    NotAssigned,
    /// 40: AUTHENTICATE failed (wrong user name or password, a malformed
    /// message, an unsupported mechanism). Codes 40-49 are security's.
    AuthenticationFailed,
    /// 41: the broker requires authentication (`--auth required`) and this
    /// connection has not authenticated; nothing was done.
    AuthenticationRequired,
    /// 42: the principal may not do this (USERS by someone who is not an admin).
    NotAuthorized,
    /// 43: the principal has no ACL that allows this operation on this
    /// resource (`--authorizer on`); nothing was done.
    AuthorizationFailed,
    /// 44: ACLs are not in use (`--authorizer off`): nothing to be allowed
    /// or denied; only an admin may list or stage ACLs then (Kafka's
    /// SECURITY_DISABLED). Nothing was done.
    SecurityDisabled,
    /// A code this client does not know (from a newer broker).
    Other(i16),
}

impl ErrorCode {
    /// The code on the wire.
    #[inline]
    pub fn code(self) -> i16 {
        match self {
            ErrorCode::None => 0,
            ErrorCode::Unknown => 1,
            ErrorCode::InvalidRequest => 2,
            ErrorCode::UnknownTopic => 3,
            ErrorCode::UnknownPartition => 4,
            ErrorCode::OffsetOutOfRange => 5,
            ErrorCode::UnknownMember => 6,
            ErrorCode::IllegalGeneration => 7,
            ErrorCode::RebalanceInProgress => 8,
            ErrorCode::QueueFull => 9,
            ErrorCode::RecordTooLarge => 10,
            ErrorCode::CorruptRecord => 11,
            ErrorCode::TopicAlreadyExists => 12,
            ErrorCode::StorageError => 13,
            ErrorCode::UnsupportedApi => 14,
            ErrorCode::ShuttingDown => 15,
            ErrorCode::InvalidName => 16,
            ErrorCode::LimitReached => 17,
            ErrorCode::GroupNotEmpty => 18,
            ErrorCode::UnknownGroup => 19,
            ErrorCode::OffsetMetadataTooLarge => 20,
            ErrorCode::InvalidConfig => 21,
            ErrorCode::InvalidRecord => 22,
            ErrorCode::InvalidRecordState => 23,
            ErrorCode::NotAssigned => 24,
            ErrorCode::AuthenticationFailed => 40,
            ErrorCode::AuthenticationRequired => 41,
            ErrorCode::NotAuthorized => 42,
            ErrorCode::AuthorizationFailed => 43,
            ErrorCode::SecurityDisabled => 44,
            ErrorCode::Other(c) => c,
        }
    }

    /// The code for a wire value.
    #[inline]
    pub fn from_code(code: i16) -> Self {
        match code {
            0 => ErrorCode::None,
            1 => ErrorCode::Unknown,
            2 => ErrorCode::InvalidRequest,
            3 => ErrorCode::UnknownTopic,
            4 => ErrorCode::UnknownPartition,
            5 => ErrorCode::OffsetOutOfRange,
            6 => ErrorCode::UnknownMember,
            7 => ErrorCode::IllegalGeneration,
            8 => ErrorCode::RebalanceInProgress,
            9 => ErrorCode::QueueFull,
            10 => ErrorCode::RecordTooLarge,
            11 => ErrorCode::CorruptRecord,
            12 => ErrorCode::TopicAlreadyExists,
            13 => ErrorCode::StorageError,
            14 => ErrorCode::UnsupportedApi,
            15 => ErrorCode::ShuttingDown,
            16 => ErrorCode::InvalidName,
            17 => ErrorCode::LimitReached,
            18 => ErrorCode::GroupNotEmpty,
            19 => ErrorCode::UnknownGroup,
            20 => ErrorCode::OffsetMetadataTooLarge,
            21 => ErrorCode::InvalidConfig,
            22 => ErrorCode::InvalidRecord,
            23 => ErrorCode::InvalidRecordState,
            24 => ErrorCode::NotAssigned,
            40 => ErrorCode::AuthenticationFailed,
            41 => ErrorCode::AuthenticationRequired,
            42 => ErrorCode::NotAuthorized,
            43 => ErrorCode::AuthorizationFailed,
            44 => ErrorCode::SecurityDisabled,
            c => ErrorCode::Other(c),
        }
    }

    /// True for [`ErrorCode::None`].
    pub fn is_ok(self) -> bool {
        self == ErrorCode::None
    }

    /// Short upper-case name, as in the protocol document.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::None => "NONE",
            ErrorCode::Unknown => "UNKNOWN",
            ErrorCode::InvalidRequest => "INVALID_REQUEST",
            ErrorCode::UnknownTopic => "UNKNOWN_TOPIC",
            ErrorCode::UnknownPartition => "UNKNOWN_PARTITION",
            ErrorCode::OffsetOutOfRange => "OFFSET_OUT_OF_RANGE",
            ErrorCode::UnknownMember => "UNKNOWN_MEMBER",
            ErrorCode::IllegalGeneration => "ILLEGAL_GENERATION",
            ErrorCode::RebalanceInProgress => "REBALANCE_IN_PROGRESS",
            ErrorCode::QueueFull => "QUEUE_FULL",
            ErrorCode::RecordTooLarge => "RECORD_TOO_LARGE",
            ErrorCode::CorruptRecord => "CORRUPT_RECORD",
            ErrorCode::TopicAlreadyExists => "TOPIC_ALREADY_EXISTS",
            ErrorCode::StorageError => "STORAGE_ERROR",
            ErrorCode::UnsupportedApi => "UNSUPPORTED_API",
            ErrorCode::ShuttingDown => "SHUTTING_DOWN",
            ErrorCode::InvalidName => "INVALID_NAME",
            ErrorCode::LimitReached => "LIMIT_REACHED",
            ErrorCode::GroupNotEmpty => "GROUP_NOT_EMPTY",
            ErrorCode::UnknownGroup => "UNKNOWN_GROUP",
            ErrorCode::OffsetMetadataTooLarge => "OFFSET_METADATA_TOO_LARGE",
            ErrorCode::InvalidConfig => "INVALID_CONFIG",
            ErrorCode::InvalidRecord => "INVALID_RECORD",
            ErrorCode::InvalidRecordState => "INVALID_RECORD_STATE",
            ErrorCode::NotAssigned => "NOT_ASSIGNED",
            ErrorCode::AuthenticationFailed => "AUTHENTICATION_FAILED",
            ErrorCode::AuthenticationRequired => "AUTHENTICATION_REQUIRED",
            ErrorCode::NotAuthorized => "NOT_AUTHORIZED",
            ErrorCode::AuthorizationFailed => "AUTHORIZATION_FAILED",
            ErrorCode::SecurityDisabled => "SECURITY_DISABLED",
            ErrorCode::Other(_) => "UNRECOGNIZED",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_stable() {
        for c in (0..=24).chain(40..=44) {
            assert_eq!(ErrorCode::from_code(c).code(), c);
            assert_ne!(ErrorCode::from_code(c).name(), "UNRECOGNIZED");
        }
        assert_eq!(ErrorCode::from_code(99), ErrorCode::Other(99));
        assert_eq!(ErrorCode::QueueFull.code(), 9);
        assert_eq!(ErrorCode::RebalanceInProgress.code(), 8);
    }
}

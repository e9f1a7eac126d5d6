//! Kafka's error codes used by the listener (numbers from Kafka's
//! `Errors.java`), and the code for each engine error: Flume's
//! [`ErrorCode`]s ([`kafka_code`]), group failures ([`group_code`]),
//! transaction failures ([`txn_code`]), share-group failures
//! ([`share_code`]).
#![allow(missing_docs)]

use flume_protocol::ErrorCode;

use crate::domain::GroupError;
use crate::engine::{TxnError, TxnFailure};

pub const UNKNOWN_SERVER_ERROR: i16 = -1;
pub const NONE: i16 = 0;
pub const OFFSET_OUT_OF_RANGE: i16 = 1;
pub const CORRUPT_MESSAGE: i16 = 2;
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
pub const LEADER_NOT_AVAILABLE: i16 = 5;
pub const MESSAGE_TOO_LARGE: i16 = 10;
pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
pub const INVALID_REQUIRED_ACKS: i16 = 21;
pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
pub const GROUP_AUTHORIZATION_FAILED: i16 = 30;
pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
pub const ILLEGAL_GENERATION: i16 = 22;
pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
pub const INVALID_GROUP_ID: i16 = 24;
pub const UNKNOWN_MEMBER_ID: i16 = 25;
pub const INVALID_SESSION_TIMEOUT: i16 = 26;
pub const REBALANCE_IN_PROGRESS: i16 = 27;
pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
pub const UNSUPPORTED_VERSION: i16 = 35;
pub const TOPIC_ALREADY_EXISTS: i16 = 36;
pub const INVALID_PARTITIONS: i16 = 37;
pub const INVALID_REPLICATION_FACTOR: i16 = 38;
pub const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
pub const INVALID_CONFIG: i16 = 40;
pub const INVALID_REQUEST: i16 = 42;
pub const POLICY_VIOLATION: i16 = 44;
pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
pub const INVALID_PRODUCER_EPOCH: i16 = 47;
pub const INVALID_TXN_STATE: i16 = 48;
pub const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
pub const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
pub const CONCURRENT_TRANSACTIONS: i16 = 51;
pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
pub const SECURITY_DISABLED: i16 = 54;
pub const KAFKA_STORAGE_ERROR: i16 = 56;
pub const LOG_DIR_NOT_FOUND: i16 = 57;
pub const UNKNOWN_PRODUCER_ID: i16 = 59;
pub const NON_EMPTY_GROUP: i16 = 68;
pub const GROUP_ID_NOT_FOUND: i16 = 69;
pub const MEMBER_ID_REQUIRED: i16 = 79;
pub const GROUP_MAX_SIZE_REACHED: i16 = 81;
pub const FENCED_INSTANCE_ID: i16 = 82;
pub const ELECTION_NOT_NEEDED: i16 = 84;
pub const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;
pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;
pub const INVALID_RECORD: i16 = 87;
pub const THROTTLING_QUOTA_EXCEEDED: i16 = 89;
pub const PRODUCER_FENCED: i16 = 90;
pub const RESOURCE_NOT_FOUND: i16 = 91;
pub const DUPLICATE_RESOURCE: i16 = 92;
pub const UNACCEPTABLE_CREDENTIAL: i16 = 93;
pub const UNKNOWN_TOPIC_ID: i16 = 100;
pub const MISMATCHED_ENDPOINT_TYPE: i16 = 114;
pub const FENCED_MEMBER_EPOCH: i16 = 110;
pub const UNRELEASED_INSTANCE_ID: i16 = 111;
pub const UNSUPPORTED_ASSIGNOR: i16 = 112;
pub const STALE_MEMBER_EPOCH: i16 = 113;
pub const INVALID_REGULAR_EXPRESSION: i16 = 130;
pub const INVALID_RECORD_STATE: i16 = 121;
pub const SHARE_SESSION_NOT_FOUND: i16 = 122;
pub const INVALID_SHARE_SESSION_EPOCH: i16 = 123;
pub const SHARE_SESSION_LIMIT_REACHED: i16 = 133;

/// Kafka's code for a share-group failure (ShareGroupHeartbeat, ShareFetch,
/// ShareAcknowledge).
pub fn share_code(e: &crate::engine::ShareError) -> i16 {
    use crate::engine::{SessionError, ShareError, ShareGroupError};
    match e {
        ShareError::Group(g) => match g {
            ShareGroupError::UnknownMember(_) => UNKNOWN_MEMBER_ID,
            ShareGroupError::FencedEpoch { .. } => FENCED_MEMBER_EPOCH,
            ShareGroupError::GroupFull { .. } | ShareGroupError::TooManyGroups(_) => {
                GROUP_MAX_SIZE_REACHED
            }
            ShareGroupError::Invalid(_) => INVALID_REQUEST,
        },
        ShareError::NotAssigned { .. } => UNKNOWN_TOPIC_OR_PARTITION,
        ShareError::UnknownTopic(_) | ShareError::UnknownPartition { .. } => {
            UNKNOWN_TOPIC_OR_PARTITION
        }
        ShareError::RecordState(_) => INVALID_RECORD_STATE,
        ShareError::NotEmpty(_) => NON_EMPTY_GROUP,
        ShareError::Limit(_) => THROTTLING_QUOTA_EXCEEDED,
        ShareError::Session(s) => match s {
            SessionError::NotFound(_) => SHARE_SESSION_NOT_FOUND,
            SessionError::Epoch { .. } => INVALID_SHARE_SESSION_EPOCH,
            SessionError::Full(_) => SHARE_SESSION_LIMIT_REACHED,
            SessionError::Invalid(_) => INVALID_REQUEST,
        },
        ShareError::Broker(b) => kafka_code(b.code()),
    }
}

/// Kafka's code for a Flume engine error.
pub fn kafka_code(code: ErrorCode) -> i16 {
    match code {
        ErrorCode::None => NONE,
        ErrorCode::UnknownTopic | ErrorCode::UnknownPartition => UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode::OffsetOutOfRange => OFFSET_OUT_OF_RANGE,
        ErrorCode::RecordTooLarge => MESSAGE_TOO_LARGE,
        ErrorCode::CorruptRecord => CORRUPT_MESSAGE,
        ErrorCode::TopicAlreadyExists => TOPIC_ALREADY_EXISTS,
        ErrorCode::InvalidName => INVALID_TOPIC_EXCEPTION,
        ErrorCode::InvalidRequest => INVALID_REQUEST,
        ErrorCode::StorageError => KAFKA_STORAGE_ERROR,
        ErrorCode::QueueFull | ErrorCode::LimitReached => THROTTLING_QUOTA_EXCEEDED,
        ErrorCode::ShuttingDown => LEADER_NOT_AVAILABLE,
        ErrorCode::UnknownMember => UNKNOWN_MEMBER_ID,
        ErrorCode::IllegalGeneration => ILLEGAL_GENERATION,
        ErrorCode::RebalanceInProgress => REBALANCE_IN_PROGRESS,
        ErrorCode::UnsupportedApi => UNSUPPORTED_VERSION,
        ErrorCode::OffsetMetadataTooLarge => OFFSET_METADATA_TOO_LARGE,
        ErrorCode::InvalidConfig => INVALID_CONFIG,
        ErrorCode::InvalidRecord => INVALID_RECORD,
        _ => UNKNOWN_SERVER_ERROR,
    }
}

/// Kafka's code for a group operation's error.
pub fn group_code(e: &GroupError) -> i16 {
    match e {
        GroupError::InconsistentProtocol => INCONSISTENT_GROUP_PROTOCOL,
        GroupError::MemberIdRequired(_) => MEMBER_ID_REQUIRED,
        GroupError::FencedInstanceId => FENCED_INSTANCE_ID,
        GroupError::InvalidSessionTimeout { .. } => INVALID_SESSION_TIMEOUT,
        GroupError::StaleMemberEpoch { .. } => STALE_MEMBER_EPOCH,
        GroupError::FencedMemberEpoch { .. } => FENCED_MEMBER_EPOCH,
        GroupError::Code(c) => match c {
            ErrorCode::InvalidName => INVALID_GROUP_ID,
            ErrorCode::LimitReached => GROUP_MAX_SIZE_REACHED,
            ErrorCode::ShuttingDown => COORDINATOR_NOT_AVAILABLE,
            other => kafka_code(*other),
        },
    }
}

/// Kafka's code for a group operation that answers only whether it was
/// done (Heartbeat, LeaveGroup): NONE, else as [`group_code`].
pub fn group_result_code(r: Result<(), GroupError>) -> i16 {
    match r {
        Ok(()) => NONE,
        Err(e) => group_code(&e),
    }
}

/// Kafka's code for a transaction failure. `before_kip_588`: the request's
/// version predates PRODUCER_FENCED (InitProducerId v0-3, AddPartitionsToTxn,
/// AddOffsetsToTxn and EndTxn v0-1, TxnOffsetCommit v0-2), which then gets
/// INVALID_PRODUCER_EPOCH, as Kafka answers.
pub fn txn_code(e: &TxnFailure, before_kip_588: bool) -> i16 {
    match e {
        TxnFailure::Refused(r) => match r {
            TxnError::InvalidTransactionalId { .. } => INVALID_REQUEST,
            TxnError::InvalidTransactionTimeout { .. } => INVALID_TRANSACTION_TIMEOUT,
            TxnError::InvalidProducerIdMapping(_) => INVALID_PRODUCER_ID_MAPPING,
            TxnError::ProducerFenced { .. } if before_kip_588 => INVALID_PRODUCER_EPOCH,
            TxnError::ProducerFenced { .. } => PRODUCER_FENCED,
            TxnError::ConcurrentTransactions(_) => CONCURRENT_TRANSACTIONS,
            TxnError::InvalidTxnState { .. } | TxnError::GroupNotInTransaction(_) => {
                INVALID_TXN_STATE
            }
            TxnError::TooManyTransactionalIds { .. }
            | TxnError::TooManyOpenTransactions { .. }
            | TxnError::TooManyPartitions { .. } => kafka_code(ErrorCode::LimitReached),
            TxnError::ProducerIds(_) => KAFKA_STORAGE_ERROR,
        },
        TxnFailure::Markers(c) => kafka_code(*c),
        TxnFailure::Offsets(ErrorCode::InvalidName) => INVALID_GROUP_ID,
        TxnFailure::Offsets(c) => kafka_code(*c),
        TxnFailure::Group(g) => group_code(g),
        TxnFailure::Log(_) | TxnFailure::ShuttingDown => COORDINATOR_NOT_AVAILABLE,
    }
}

/// An engine error's message for a Kafka client: the detail alone when
/// there is one (the Flume code's name would only confuse a Kafka client).
pub fn detail(e: &crate::error::BrokerError) -> String {
    match e {
        crate::error::BrokerError::Code {
            detail: Some(d), ..
        } => d.clone(),
        other => other.to_string(),
    }
}

/// An engine error as a Kafka code and its message (the error's display).
pub fn coded(e: &crate::error::BrokerError) -> (i16, String) {
    (kafka_code(e.code()), e.to_string())
}

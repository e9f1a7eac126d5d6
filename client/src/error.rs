//! The client's error type.

use std::sync::Arc;

use flume_protocol::{record::RecordError, wire::WireError, ErrorCode};

/// Result alias for the client.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a client call can fail with. Cheap to clone, so one failure can
/// be handed to every send of a batch.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The broker could not be reached.
    #[error("cannot connect to broker at {addr}: {reason}")]
    Connect {
        /// The address tried.
        addr: String,
        /// Why (not exposed as `source`, so error chains do not print it twice).
        reason: Arc<std::io::Error>,
    },
    /// TLS failed: the broker's certificate was refused (an unknown CA, a
    /// name that does not match), the broker refused ours, or the TLS files
    /// could not be used. Not retriable.
    #[error("TLS with broker at {addr} failed: {reason}")]
    Tls {
        /// The broker address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// Logging in failed: a wrong user name or password (the broker does not
    /// say which), or a broker whose SCRAM signature is wrong. Not retriable.
    #[error("login to broker at {addr} failed: {reason}")]
    Auth {
        /// The broker address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The connection broke while the request was pending.
    #[error("connection to broker at {addr} lost: {reason}")]
    Disconnected {
        /// The broker address.
        addr: String,
        /// What happened.
        reason: String,
    },
    /// No response within the request timeout.
    #[error("{api} request to {addr} timed out after {timeout_ms} ms")]
    Timeout {
        /// Which request.
        api: &'static str,
        /// The broker address.
        addr: String,
        /// The timeout.
        timeout_ms: u64,
    },
    /// The broker answered with an error code.
    #[error("broker error {code}{}", context.as_deref().map(|c| format!(" for {c}")).unwrap_or_default())]
    Broker {
        /// The code.
        code: ErrorCode,
        /// What it was about (topic-partition, group).
        context: Option<String>,
    },
    /// A Kafka broker (a `kafka://` address) answered with one of Kafka's
    /// error codes. [`Error::code`] gives Flume's equivalent where there is
    /// one (UNKNOWN_TOPIC_OR_PARTITION is [`ErrorCode::UnknownTopic`], ...),
    /// so code that matches on it works with either protocol;
    /// [`Error::kafka_code`] gives Kafka's own number.
    #[error("Kafka broker error {name} ({code}){}", context.as_deref().map(|c| format!(" for {c}")).unwrap_or_default())]
    Kafka {
        /// Kafka's error code (`Errors.java`).
        code: i16,
        /// Its name, as Kafka spells it (`NOT_LEADER_OR_FOLLOWER`).
        name: String,
        /// What it was about (topic-partition, group), and the broker's message if it sent one.
        context: Option<String>,
    },
    /// The broker broke the protocol: a response that does not decode, or
    /// an answer that does not match its request (fewer acknowledgements than records
    /// sent, say). Not retriable: the same broker would answer the same way.
    #[error("protocol violation by the broker: {detail}")]
    Protocol {
        /// What was wrong, with the numbers.
        detail: String,
    },
    /// A fetched record failed its CRC or structure check (corruption on the
    /// broker's disk or on the way).
    #[error("corrupt record in fetch response: {detail}")]
    CorruptRecord {
        /// Which check failed, with the numbers.
        detail: String,
    },
    /// The producer's buffer is full and the call asked not to wait.
    #[error("producer buffer is full ({limit} bytes buffered)")]
    BufferFull {
        /// The configured limit.
        limit: usize,
    },
    /// A group member's join failed this many times in a row
    /// ([`GroupConsumerBuilder::join_attempts`](crate::GroupConsumerBuilder::join_attempts)):
    /// the coordinator could not be reached or found, closed the connection
    /// or did not answer. Not retriable.
    #[error("joining group {group} failed {attempts} times in a row (coordinator {broker}); the last attempt: {last}")]
    JoinFailed {
        /// The group.
        group: String,
        /// Failed attempts in a row.
        attempts: u32,
        /// The coordinator last tried, or the bootstrap brokers when none was found.
        broker: String,
        /// Why the last attempt failed.
        last: Box<Error>,
    },
    /// The producer or consumer was closed.
    #[error("client is closed")]
    Closed,
    /// A bad argument from the caller (an empty topic, a group consumer with no topic).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl Error {
    /// The broker error code, if this is a broker error.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Broker { code, .. } => Some(*code),
            Error::Kafka { code, .. } => flume_equivalent_of_kafka(*code),
            _ => None,
        }
    }

    /// Kafka's error code, if a Kafka broker refused (a `kafka://` address).
    pub fn kafka_code(&self) -> Option<i16> {
        match self {
            Error::Kafka { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// True for errors after which a fresh connection may succeed (for a
    /// Kafka broker: the codes Kafka itself calls retriable, such as
    /// NOT_LEADER_OR_FOLLOWER).
    pub fn is_retriable(&self) -> bool {
        matches!(
            self,
            Error::Connect { .. } | Error::Disconnected { .. } | Error::Timeout { .. }
        ) || matches!(self.code(), Some(ErrorCode::ShuttingDown))
            || matches!(self, Error::Kafka { code, .. } if kafka_code_is_retriable(*code))
    }

    pub(crate) fn protocol(detail: impl Into<String>) -> Self {
        Error::Protocol {
            detail: detail.into(),
        }
    }

    pub(crate) fn broker(code: ErrorCode, context: impl Into<String>) -> Self {
        Error::Broker {
            code,
            context: Some(context.into()),
        }
    }
}

/// Flume's code for the condition a Kafka error code names, so that
/// [`Error::code`] means the same with either protocol (Kafka's names in
/// the comments, as `Errors.java` spells them). The Kafka client's
/// `kafka/errors.rs` builds [`Error::Kafka`] and uses this table too.
pub(crate) fn flume_equivalent_of_kafka(code: i16) -> Option<ErrorCode> {
    Some(match code {
        0 => ErrorCode::None,                    // NONE
        1 => ErrorCode::OffsetOutOfRange,        // OFFSET_OUT_OF_RANGE
        2 => ErrorCode::CorruptRecord,           // CORRUPT_MESSAGE
        3 => ErrorCode::UnknownTopic,            // UNKNOWN_TOPIC_OR_PARTITION
        10 => ErrorCode::RecordTooLarge,         // MESSAGE_TOO_LARGE
        12 => ErrorCode::OffsetMetadataTooLarge, // OFFSET_METADATA_TOO_LARGE
        17 => ErrorCode::InvalidName,            // INVALID_TOPIC_EXCEPTION
        // ILLEGAL_GENERATION, FENCED_MEMBER_EPOCH
        22 | 110 => ErrorCode::IllegalGeneration,
        25 => ErrorCode::UnknownMember,       // UNKNOWN_MEMBER_ID
        27 => ErrorCode::RebalanceInProgress, // REBALANCE_IN_PROGRESS
        // TOPIC_, GROUP_ and CLUSTER_AUTHORIZATION_FAILED
        29..=31 => ErrorCode::AuthorizationFailed,
        54 => ErrorCode::SecurityDisabled, // SECURITY_DISABLED
        // UNSUPPORTED_VERSION, UNSUPPORTED_FOR_MESSAGE_FORMAT
        35 | 44 => ErrorCode::UnsupportedApi,
        36 => ErrorCode::TopicAlreadyExists, // TOPIC_ALREADY_EXISTS
        40 => ErrorCode::InvalidConfig,      // INVALID_CONFIG
        42 => ErrorCode::InvalidRequest,     // INVALID_REQUEST
        58 => ErrorCode::AuthenticationFailed, // SASL_AUTHENTICATION_FAILED
        68 => ErrorCode::GroupNotEmpty,      // NON_EMPTY_GROUP
        69 => ErrorCode::UnknownGroup,       // GROUP_ID_NOT_FOUND
        87 => ErrorCode::InvalidRecord,      // INVALID_RECORD
        121 => ErrorCode::InvalidRecordState, // INVALID_RECORD_STATE
        _ => return None,
    })
}

/// Whether Kafka calls `code` retriable (the same request may succeed later).
pub(crate) fn kafka_code_is_retriable(code: i16) -> bool {
    kafka_protocol::error::ResponseError::try_from_code(code).is_some_and(|e| e.is_retriable())
}

impl From<WireError> for Error {
    fn from(e: WireError) -> Self {
        Error::protocol(format!("malformed response: {e}"))
    }
}

impl From<RecordError> for Error {
    fn from(e: RecordError) -> Self {
        Error::CorruptRecord {
            detail: e.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_violations_have_their_own_variant() {
        let e = Error::from(WireError::Truncated {
            at: 0,
            needed: 4,
            remaining: 1,
        });
        assert!(matches!(e, Error::Protocol { .. }), "{e}");
        assert!(!e.is_retriable());
    }
}

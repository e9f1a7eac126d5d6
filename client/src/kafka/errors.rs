//! Kafka's error codes as the SDK's [`Error`]: the name, whether Kafka calls
//! it retriable, and Flume's equivalent `ErrorCode` where there is one (those
//! two tables are `crate::error`'s, which `Error::code` reads and which must
//! not reach into this transport; re-exported here).

use kafka_protocol::error::ResponseError;

use crate::error::Error;
pub(crate) use crate::error::{
    flume_equivalent_of_kafka as flume_equivalent, kafka_code_is_retriable as is_retriable,
};

pub(crate) const NONE: i16 = 0;
pub(crate) const OFFSET_OUT_OF_RANGE: i16 = 1;
pub(crate) const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
pub(crate) const LEADER_NOT_AVAILABLE: i16 = 5;
pub(crate) const NOT_LEADER_OR_FOLLOWER: i16 = 6;
pub(crate) const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
pub(crate) const COORDINATOR_NOT_AVAILABLE: i16 = 15;
pub(crate) const NOT_COORDINATOR: i16 = 16;
pub(crate) const ILLEGAL_GENERATION: i16 = 22;
pub(crate) const UNKNOWN_MEMBER_ID: i16 = 25;
pub(crate) const REBALANCE_IN_PROGRESS: i16 = 27;
pub(crate) const UNSUPPORTED_VERSION: i16 = 35;
pub(crate) const INVALID_REQUEST: i16 = 42;
#[cfg(test)]
pub(crate) const TOPIC_ALREADY_EXISTS: i16 = 36;
pub(crate) const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
pub(crate) const DUPLICATE_SEQUENCE_NUMBER: i16 = 46;
pub(crate) const INVALID_PRODUCER_EPOCH: i16 = 47;
pub(crate) const UNKNOWN_PRODUCER_ID: i16 = 59;
pub(crate) const FENCED_LEADER_EPOCH: i16 = 74;
pub(crate) const UNKNOWN_LEADER_EPOCH: i16 = 75;
pub(crate) const MEMBER_ID_REQUIRED: i16 = 79;
pub(crate) const GROUP_ID_NOT_FOUND: i16 = 69;
pub(crate) const FENCED_MEMBER_EPOCH: i16 = 110;
pub(crate) const SHARE_SESSION_NOT_FOUND: i16 = 122;
pub(crate) const INVALID_SHARE_SESSION_EPOCH: i16 = 123;

/// `NotLeaderOrFollower` as Kafka spells it: `NOT_LEADER_OR_FOLLOWER`.
pub(crate) fn name(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        None => "NONE".to_owned(),
        Some(ResponseError::Unknown(c)) => format!("UNKNOWN_CODE_{c}"),
        Some(e) => {
            let camel = e.to_string();
            let mut out = String::with_capacity(camel.len() + 8);
            for (i, ch) in camel.chars().enumerate() {
                if ch.is_ascii_uppercase() && i > 0 {
                    out.push('_');
                }
                out.push(ch.to_ascii_uppercase());
            }
            out
        }
    }
}

/// Whether `code` says the client's idea of a partition's leader is stale:
/// refresh the metadata and send again.
pub(crate) fn is_stale_leader(code: i16) -> bool {
    matches!(
        code,
        NOT_LEADER_OR_FOLLOWER
            | LEADER_NOT_AVAILABLE
            | FENCED_LEADER_EPOCH
            | UNKNOWN_LEADER_EPOCH
            | UNKNOWN_TOPIC_OR_PARTITION
    )
}

/// Whether `code` says the group coordinator moved or is not ready.
pub(crate) fn is_coordinator_moved(code: i16) -> bool {
    matches!(
        code,
        NOT_COORDINATOR | COORDINATOR_NOT_AVAILABLE | COORDINATOR_LOAD_IN_PROGRESS
    )
}

/// The SDK's error for a Kafka error code about `context`.
pub(crate) fn error(code: i16, context: impl Into<String>) -> Error {
    Error::Kafka {
        code,
        name: name(code),
        context: Some(context.into()),
    }
}

/// As [`error`], with the broker's message when it sent one.
pub(crate) fn error_with(code: i16, context: impl Into<String>, message: Option<&str>) -> Error {
    let context = context.into();
    match message.filter(|m| !m.is_empty()) {
        Some(m) => error(code, format!("{context}: {m}")),
        None => error(code, context),
    }
}

/// `Ok` for code 0, else the error.
pub(crate) fn check(code: i16, context: impl FnOnce() -> String) -> Result<(), Error> {
    if code == NONE {
        Ok(())
    } else {
        Err(error(code, context()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flume_protocol::ErrorCode;

    #[test]
    fn names_are_kafkas_and_equivalents_keep_user_code_working() {
        assert_eq!(name(NOT_LEADER_OR_FOLLOWER), "NOT_LEADER_OR_FOLLOWER");
        assert_eq!(name(-1), "UNKNOWN_SERVER_ERROR");
        assert_eq!(name(31_000), "UNKNOWN_CODE_31000");
        assert!(is_retriable(NOT_LEADER_OR_FOLLOWER));
        assert!(!is_retriable(TOPIC_ALREADY_EXISTS));
        let e = error(TOPIC_ALREADY_EXISTS, "orders");
        assert_eq!(e.code(), Some(ErrorCode::TopicAlreadyExists));
        assert_eq!(e.kafka_code(), Some(36));
        assert_eq!(
            e.to_string(),
            "Kafka broker error TOPIC_ALREADY_EXISTS (36) for orders"
        );
        let e = error(NOT_LEADER_OR_FOLLOWER, "t/0");
        assert!(e.is_retriable());
        assert_eq!(e.code(), None);
    }
}

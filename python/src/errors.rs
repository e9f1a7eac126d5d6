//! The exception hierarchy: every error from the engine or the SDK becomes a
//! subclass of `flume.FlumeError` carrying the wire error code (`code`, or
//! `None` when the error did not come from a broker code).

use flume_broker::BrokerError;
use flume_client::ErrorCode;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::PyTypeInfo;

create_exception!(
    flume,
    FlumeError,
    PyException,
    "Base class of every Flume error. `code` is the broker's numeric error code, or None."
);
create_exception!(
    flume,
    QueueFull,
    FlumeError,
    "The partition queue is full and the topic's backpressure mode is reject."
);
create_exception!(
    flume,
    RecordTooLarge,
    FlumeError,
    "A record is larger than the broker's max_record_bytes."
);
create_exception!(flume, UnknownTopic, FlumeError, "The topic does not exist.");
create_exception!(
    flume,
    UnknownPartition,
    FlumeError,
    "The partition does not exist in that topic."
);
create_exception!(
    flume,
    UnknownMember,
    FlumeError,
    "The consumer is not a member of the group (never joined, left or expired)."
);
create_exception!(
    flume,
    TopicAlreadyExists,
    FlumeError,
    "create_topic for a topic that exists."
);
create_exception!(
    flume,
    InvalidName,
    FlumeError,
    "A topic or group name is empty, too long, or has characters outside [A-Za-z0-9._-]."
);
create_exception!(
    flume,
    InvalidRequest,
    FlumeError,
    "A request or setting the broker refuses (bad topic settings, limits)."
);
create_exception!(
    flume,
    OffsetOutOfRange,
    FlumeError,
    "The offset is below the log start or above the log end."
);
create_exception!(
    flume,
    CorruptRecord,
    FlumeError,
    "A record failed its CRC or structure check."
);
create_exception!(
    flume,
    StorageError,
    FlumeError,
    "The broker could not read or write its data directory (this includes a directory locked by another process)."
);
create_exception!(
    flume,
    RebalanceInProgress,
    FlumeError,
    "The group is rebalancing, or this member's generation is no longer current."
);
create_exception!(
    flume,
    ShuttingDown,
    FlumeError,
    "The broker is shutting down."
);
create_exception!(
    flume,
    ConnectionFailed,
    FlumeError,
    "The broker could not be reached, or the connection broke or timed out."
);
create_exception!(
    flume,
    BufferFull,
    FlumeError,
    "The producer's buffer is full and the call asked not to wait."
);
create_exception!(flume, Closed, FlumeError, "The object was closed.");
create_exception!(
    flume,
    InvalidConfig,
    InvalidRequest,
    "A topic config by Kafka's name is unknown or its value is out of range (the message names both)."
);
create_exception!(
    flume,
    InvalidRecord,
    FlumeError,
    "A record the topic cannot take as it is: a record without a key on a compacted topic."
);
create_exception!(
    flume,
    GroupNotEmpty,
    FlumeError,
    "The group has members: deleting it or its offsets waits until they have left."
);
create_exception!(
    flume,
    UnknownGroup,
    FlumeError,
    "No group of that name: no members and no committed offsets."
);

/// Builds an exception of class `T` (its class attribute `code` names the
/// wire code); lazy, so it needs no GIL until raised.
fn exc<T: PyTypeInfo>(msg: String) -> PyErr {
    PyErr::new::<T, _>(msg)
}

/// The exception for a broker error code.
pub fn code_error(code: ErrorCode, msg: String) -> PyErr {
    match code {
        ErrorCode::QueueFull => exc::<QueueFull>(msg),
        ErrorCode::RecordTooLarge => exc::<RecordTooLarge>(msg),
        ErrorCode::UnknownTopic => exc::<UnknownTopic>(msg),
        ErrorCode::UnknownPartition => exc::<UnknownPartition>(msg),
        ErrorCode::UnknownMember => exc::<UnknownMember>(msg),
        ErrorCode::TopicAlreadyExists => exc::<TopicAlreadyExists>(msg),
        ErrorCode::InvalidName => exc::<InvalidName>(msg),
        ErrorCode::InvalidRequest => exc::<InvalidRequest>(msg),
        ErrorCode::OffsetOutOfRange => exc::<OffsetOutOfRange>(msg),
        ErrorCode::CorruptRecord => exc::<CorruptRecord>(msg),
        ErrorCode::StorageError => exc::<StorageError>(msg),
        ErrorCode::RebalanceInProgress | ErrorCode::IllegalGeneration => {
            exc::<RebalanceInProgress>(msg)
        }
        ErrorCode::ShuttingDown => exc::<ShuttingDown>(msg),
        ErrorCode::InvalidConfig => exc::<InvalidConfig>(msg),
        ErrorCode::InvalidRecord => exc::<InvalidRecord>(msg),
        ErrorCode::GroupNotEmpty => exc::<GroupNotEmpty>(msg),
        ErrorCode::UnknownGroup => exc::<UnknownGroup>(msg),
        _ => exc::<FlumeError>(msg),
    }
}

/// The exception for an engine error.
pub fn broker_error(e: BrokerError) -> PyErr {
    let msg = e.to_string();
    match &e {
        BrokerError::Code { code, .. } => code_error(*code, msg),
        BrokerError::Config(_) => exc::<InvalidRequest>(msg),
        // Storage and I/O failures, including a data directory another broker holds.
        _ => match e.code() {
            ErrorCode::StorageError => exc::<StorageError>(msg),
            code => code_error(code, msg),
        },
    }
}

/// The exception for an SDK error.
pub fn client_error(e: flume_client::Error) -> PyErr {
    use flume_client::Error as E;
    let msg = e.to_string();
    match &e {
        E::Broker { code, .. } => code_error(*code, msg),
        // A Kafka broker's code (a kafka:// address): the class of Flume's
        // equivalent (UNKNOWN_TOPIC_OR_PARTITION is UnknownTopic, ...), so
        // the same `except` works with either protocol; Kafka's own name and
        // number are in the message.
        E::Kafka { .. } => match e.code() {
            Some(code) if code != ErrorCode::None => code_error(code, msg),
            _ => exc::<FlumeError>(msg),
        },
        E::Connect { .. } | E::Disconnected { .. } | E::Timeout { .. } => {
            exc::<ConnectionFailed>(msg)
        }
        E::BufferFull { .. } => exc::<BufferFull>(msg),
        E::Closed => exc::<Closed>(msg),
        E::CorruptRecord { .. } => exc::<CorruptRecord>(msg),
        E::InvalidArgument(_) => pyo3::exceptions::PyValueError::new_err(msg),
        _ => exc::<FlumeError>(msg),
    }
}

/// `Closed` for an object used after `close()`.
pub fn closed(what: &str) -> PyErr {
    exc::<Closed>(format!("{what} is closed"))
}

/// `__next__` of an iterator over `poll`: `Closed` ends the iteration (None).
pub fn until_closed<T>(py: Python<'_>, polled: PyResult<Option<T>>) -> PyResult<Option<T>> {
    match polled {
        Err(e) if e.is_instance_of::<Closed>(py) => Ok(None),
        other => other,
    }
}

/// Adds the exception classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("FlumeError", py.get_type::<FlumeError>())?;
    m.add("QueueFull", py.get_type::<QueueFull>())?;
    m.add("RecordTooLarge", py.get_type::<RecordTooLarge>())?;
    m.add("UnknownTopic", py.get_type::<UnknownTopic>())?;
    m.add("UnknownPartition", py.get_type::<UnknownPartition>())?;
    m.add("UnknownMember", py.get_type::<UnknownMember>())?;
    m.add("TopicAlreadyExists", py.get_type::<TopicAlreadyExists>())?;
    m.add("InvalidName", py.get_type::<InvalidName>())?;
    m.add("InvalidRequest", py.get_type::<InvalidRequest>())?;
    m.add("OffsetOutOfRange", py.get_type::<OffsetOutOfRange>())?;
    m.add("CorruptRecord", py.get_type::<CorruptRecord>())?;
    m.add("StorageError", py.get_type::<StorageError>())?;
    m.add("RebalanceInProgress", py.get_type::<RebalanceInProgress>())?;
    m.add("ShuttingDown", py.get_type::<ShuttingDown>())?;
    m.add("ConnectionFailed", py.get_type::<ConnectionFailed>())?;
    m.add("BufferFull", py.get_type::<BufferFull>())?;
    m.add("Closed", py.get_type::<Closed>())?;
    m.add("InvalidConfig", py.get_type::<InvalidConfig>())?;
    m.add("InvalidRecord", py.get_type::<InvalidRecord>())?;
    m.add("GroupNotEmpty", py.get_type::<GroupNotEmpty>())?;
    m.add("UnknownGroup", py.get_type::<UnknownGroup>())?;
    // `code`: the broker's wire error code of each class (None where there is none).
    py.get_type::<FlumeError>().setattr("code", py.None())?;
    let codes: [(Bound<'_, pyo3::types::PyType>, ErrorCode); 15] = [
        (py.get_type::<QueueFull>(), ErrorCode::QueueFull),
        (py.get_type::<RecordTooLarge>(), ErrorCode::RecordTooLarge),
        (py.get_type::<UnknownTopic>(), ErrorCode::UnknownTopic),
        (
            py.get_type::<UnknownPartition>(),
            ErrorCode::UnknownPartition,
        ),
        (py.get_type::<UnknownMember>(), ErrorCode::UnknownMember),
        (
            py.get_type::<TopicAlreadyExists>(),
            ErrorCode::TopicAlreadyExists,
        ),
        (py.get_type::<InvalidName>(), ErrorCode::InvalidName),
        (py.get_type::<InvalidRequest>(), ErrorCode::InvalidRequest),
        (
            py.get_type::<OffsetOutOfRange>(),
            ErrorCode::OffsetOutOfRange,
        ),
        (py.get_type::<CorruptRecord>(), ErrorCode::CorruptRecord),
        (py.get_type::<StorageError>(), ErrorCode::StorageError),
        (py.get_type::<InvalidConfig>(), ErrorCode::InvalidConfig),
        (py.get_type::<InvalidRecord>(), ErrorCode::InvalidRecord),
        (py.get_type::<GroupNotEmpty>(), ErrorCode::GroupNotEmpty),
        (py.get_type::<UnknownGroup>(), ErrorCode::UnknownGroup),
    ];
    for (t, c) in codes {
        t.setattr("code", c.code())?;
    }
    py.get_type::<RebalanceInProgress>()
        .setattr("code", ErrorCode::RebalanceInProgress.code())?;
    py.get_type::<ShuttingDown>()
        .setattr("code", ErrorCode::ShuttingDown.code())?;
    Ok(())
}

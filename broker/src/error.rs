//! The broker's error type.

use std::io;
use std::path::PathBuf;

use flume_protocol::ErrorCode;

use crate::storage::StorageError;

/// Errors from the broker's API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrokerError {
    /// A setting is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The storage engine failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A file outside the logs (topic config, offsets) failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// TLS could not be set up (certificate or key files).
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A request failed with a protocol error code.
    #[error("{code}{}", detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default())]
    Code {
        /// The code.
        code: ErrorCode,
        /// What it was about.
        detail: Option<String>,
    },
}

impl BrokerError {
    /// The error code a client sees for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            BrokerError::Code { code, .. } => *code,
            BrokerError::Storage(StorageError::OffsetOutOfRange { .. }) => {
                ErrorCode::OffsetOutOfRange
            }
            BrokerError::Storage(StorageError::Corrupt { .. }) => ErrorCode::CorruptRecord,
            BrokerError::Storage(StorageError::InvalidBatch(_)) => ErrorCode::CorruptRecord,
            BrokerError::Storage(_) | BrokerError::Io { .. } => ErrorCode::StorageError,
            BrokerError::Config(_) | BrokerError::Tls(_) => ErrorCode::InvalidRequest,
        }
    }

    pub(crate) fn code_for(code: ErrorCode, detail: impl Into<String>) -> Self {
        BrokerError::Code {
            code,
            detail: Some(detail.into()),
        }
    }
}

impl From<ErrorCode> for BrokerError {
    fn from(code: ErrorCode) -> Self {
        BrokerError::Code { code, detail: None }
    }
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {what} {path}: {source}")]
    Read {
        /// Which file it is (certificate, key, client CA).
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A file is not the PEM it should be.
    #[error("{what} {path}: {reason}")]
    Pem {
        /// Which file it is.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// rustls refused the certificates or the key (a key that does not match
    /// the certificate, say).
    #[error("TLS configuration refused: {0}")]
    Config(String),
}

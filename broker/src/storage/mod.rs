//! The log storage engine: one [`Log`] per partition.
//!
//! Layout of a partition directory:
//! ```text
//! 00000000000000000000.log     segment: [magic "FLMLOG" u8x6][version u16 = 1] then records
//! 00000000000000000000.index   sparse index: [magic "FLMIDX" u8x6][version u16 = 1]
//!                              then entries [relative offset u32][file position u32]
//! 00000000000000004096.log     the next segment, named by its base offset (20 digits)
//! ```
//! Records use the format of [`flume_client::protocol::record`], identical on
//! the wire: `[offset u64][size u32][crc32 u32][payload]`. `docs/storage.md`
//! documents every byte, and the recovery rules.
//!
//! - [`segment`]: one segment file and its index.
//! - [`log`]: the segments of a partition: append, read, recovery, retention.

pub mod log;
pub mod segment;

pub use log::{FsyncPolicy, Log, LogConfig, ReadResult};

use std::path::PathBuf;

/// Errors from the storage engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// A file operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A read outside the stored range.
    #[error("offset {requested} is out of range: log start is {log_start}, log end is {log_end}")]
    OffsetOutOfRange {
        /// The offset asked for.
        requested: u64,
        /// Oldest stored offset.
        log_start: u64,
        /// Next offset to be written.
        log_end: u64,
    },
    /// A stored record failed its CRC or structure check.
    #[error("corrupt record at offset {offset} (byte {position} of {}): {reason}", segment.display())]
    Corrupt {
        /// The segment file.
        segment: PathBuf,
        /// The offset being read.
        offset: u64,
        /// Byte position in the segment file.
        position: u64,
        /// What was wrong.
        reason: String,
    },
    /// The directory is in a state recovery will not guess about.
    #[error("refusing to open {}: {reason}", path.display())]
    Inconsistent {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// An append batch that does not validate.
    #[error("invalid batch: {0}")]
    InvalidBatch(#[from] flume_client::protocol::record::RecordError),
}

pub(crate) fn io_err<'a>(
    op: &'static str,
    path: &'a std::path::Path,
) -> impl FnOnce(std::io::Error) -> StorageError + 'a {
    move |source| StorageError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

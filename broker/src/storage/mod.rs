//! The log storage engine: one [`Log`] per partition.
//!
//! Layout of a partition directory:
//! ```text
//! 00000000000000000000.log     segment: [magic "FLMLOG" u8x6][version u16 = 2] then entries
//!                              (records, and Kafka batches as producers sent them)
//! 00000000000000000000.index   sparse index: [magic "FLMIDX" u8x6][version u16 = 2]
//!                              then entries [relative offset u32][file position u32][max ts i64]
//! 00000000000000004096.log     the next segment, named by its base offset (20 digits)
//! ```
//! Records use the format of [`flume_protocol::record`], identical on
//! the wire: `[offset u64][size u32][crc32 u32][payload]`. `docs/storage.md`
//! documents every byte, and the recovery rules.
//!
//! - `segment`: one segment file and its index.
//! - `log`: the segments of a partition: append, read, recovery, retention,
//!   and fail-stop after a failed write or fsync.
//! - `dirs`: directory fsync ([`fsync_dir`]), durable directory creation,
//!   the data directory's lock and marker.
//! - `fault`: the fault hook tests use to make writes and fsyncs fail.
//! - `files`: the broker-wide LRU of open segment files (`max_open_files`):
//!   sealed segments are opened on demand, so descriptors do not grow with
//!   partitions.
//! - [`compact`]: the cleaner of compacted logs (key map, rewrite, the
//!   crash-safe swap of cleaned segments).
//! - [`inspect`]: read-only checks and dumps of a stopped broker's data
//!   directory (`flume-cli data`).

pub mod compact;
pub(crate) mod dirs;
pub(crate) mod fault;
pub(crate) mod files;
pub mod inspect;
pub(crate) mod log;
pub(crate) mod segment;

pub use compact::{CleanStats, CleanerLimits, CompactionConfig};
pub use dirs::{create_dir_durable, fsync_dir, read_optional, write_atomic, DataDirLock};
pub use fault::FaultInjector;
pub use files::FileCache;
pub use log::{AbortedTxn, FsyncPolicy, Log, LogConfig, ReadAs, ReadResult, Stable};

use std::path::PathBuf;

/// The most a stored Kafka batch's records may decompress to: the Kafka
/// front end refuses a produced batch that decodes to more (or to more
/// than a frame), so every stored batch reads within it.
pub const MAX_BATCH_DECODED_BYTES: usize = 64 << 20;

/// Walks the records of a checked Kafka batch entry (decompressed within
/// [`MAX_BATCH_DECODED_BYTES`]), handing each with its offset delta to
/// `each`. A control batch gives none.
///
/// # Errors
/// Why the records do not decode.
pub(crate) fn batch_records(
    raw: &flume_protocol::record::RawRecord<'_>,
    header: &flume_protocol::kafka_batch::BatchHeader,
    each: &mut dyn FnMut(u64, flume_protocol::kafka_batch::RecordView<'_, '_>),
) -> Result<(), String> {
    use flume_protocol::kafka_batch::{self, BatchError, BATCH_HEADER_LEN, LEADER_EPOCH_AT};
    if header.is_control() || header.count == 0 {
        return Ok(());
    }
    let body = raw.kafka_body();
    let data = header
        .compression()
        .and_then(|c| {
            kafka_batch::decompress(
                c,
                body.get(BATCH_HEADER_LEN - LEADER_EPOCH_AT..)
                    .unwrap_or_default(),
                MAX_BATCH_DECODED_BYTES,
            )
        })
        .map_err(|e| e.to_string())?;
    kafka_batch::for_each_record::<BatchError>(header, &data, &mut |r| {
        each(u64::try_from(r.offset_delta).unwrap_or(0), r);
        Ok(())
    })
    .map_err(|e| e.to_string())
}

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
    /// The log stopped after a failed write or fsync (fail-stop): it was cut
    /// back to what had been acknowledged, and it takes no appends until the
    /// broker restarts and recovery has looked at the files again.
    #[error("{} stopped taking appends after a failed write or fsync ({reason}); restart the broker to recover it", dir.display())]
    Failed {
        /// The partition directory.
        dir: PathBuf,
        /// The first failure.
        reason: String,
    },
    /// Another broker (or embedded broker) holds the data directory.
    #[error("data directory {} is in use by another Flume broker{}; stop it or use another directory", dir.display(), holder_pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    DataDirLocked {
        /// The data directory.
        dir: PathBuf,
        /// The holder's PID, as it wrote it into `<dir>/.lock`.
        holder_pid: Option<u32>,
    },
    /// A non-empty directory that is not a Flume data directory.
    #[error("refusing to use {} as a data directory: it is not empty ({entry:?}) and is not a Flume data directory; choose an empty directory, or allow a foreign one (flume-cli broker --allow-foreign-data-dir)", dir.display())]
    ForeignDataDir {
        /// The directory.
        dir: PathBuf,
        /// An entry that is not Flume's.
        entry: String,
    },
    /// An append batch that does not validate.
    #[error("invalid batch: {0}")]
    InvalidBatch(#[from] flume_protocol::record::RecordError),
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

//! The transaction state log: `<data>/__transaction_state/txn.log`, an
//! append-only file of [`TxnRecord`]s, the last one of each transactional id
//! winning. Every append is fsynced before it returns (a transaction's state
//! is answered to a client only once durable), so the file holds every
//! state a client was told of.
//!
//! Format (big-endian):
//!
//! ```text
//! file    = magic "FLMTXN\0\x01" (8 bytes), record*
//! record  = len u32 | crc u32 (CRC-32 of payload) | payload (len bytes, at most 16 MiB)
//! payload = kind u8 (1 put, 2 remove) | id string
//!           put: producer_id i64 | epoch i16 | last_producer_id i64 | last_epoch i16
//!                | state u8 | timeout_ms u32 | started_ms i64 | updated_ms i64
//!                | partitions: count i32, (topic string, partition i32)*
//!                | groups: count i32, (group string, count i32,
//!                    (topic string, partition i32, offset i64, leader_epoch i32,
//!                     metadata: len i32 (-1 null), utf-8)*)*
//! string  = len i16 | utf-8
//! ```
//!
//! Recovery: [`TxnLog::open`] replays the records in order and stops at the
//! first that is short, fails its CRC or does not decode (a write the crash
//! tore): the file is cut there and the cut logged. A file that does not
//! start with the magic is refused (it is not a state log). Compaction: when
//! the file grows past `compact_min_bytes` and four times what the live
//! states take, [`TxnLog::compact`] rewrites it with one record per id (a
//! temp file, fsynced, renamed, the directory fsynced: a crash leaves the
//! old file or the new one).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::BufMut;
use flume_protocol::wire::{Reader, WireError, WriteExt};

use super::{TxnMeta, TxnOffset, TxnRecord, TxnState};
use crate::domain::TopicPartition;

/// Magic and version at the start of the file.
pub const TXN_MAGIC: [u8; 8] = *b"FLMTXN\x00\x01";

/// The state log's file name in its directory.
pub const TXN_LOG_FILE: &str = "txn.log";

/// Longest record payload (a transaction at the partition limit fits many times).
pub const MAX_RECORD_BYTES: usize = 16 << 20;

const HEADER: usize = 8;

/// Why the state log could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TxnLogError {
    /// A file operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a transaction state log.
    #[error("{path} is not a transaction state log (it starts with {found:?}, not {TXN_MAGIC:?})")]
    NotALog {
        /// The file.
        path: PathBuf,
        /// Its first bytes.
        found: Vec<u8>,
    },
    /// A record would be larger than [`MAX_RECORD_BYTES`].
    #[error("a state record of {0} bytes is over the limit of {MAX_RECORD_BYTES}")]
    RecordTooLarge(usize),
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> TxnLogError {
    let path = path.to_owned();
    move |source| TxnLogError::Io { what, path, source }
}

/// What [`TxnLog::open`] found.
#[derive(Debug)]
pub struct Replayed {
    /// The last state of every transactional id.
    pub states: BTreeMap<String, TxnMeta>,
}

/// The open state log.
#[derive(Debug)]
pub struct TxnLog {
    path: PathBuf,
    file: File,
    size: u64,
    /// Bytes the live states took at the last open or compaction.
    live_bytes: u64,
    compact_min_bytes: u64,
    /// Test-only: the next append fails after writing its bytes (as a failed fsync would).
    #[cfg(test)]
    fail_next: bool,
}

impl TxnLog {
    /// Test-only: makes the next append fail after its write (a failed fsync).
    #[cfg(test)]
    pub fn fail_next_append(&mut self) {
        self.fail_next = true;
    }

    /// Opens (or creates) the log in `dir` and replays it.
    ///
    /// # Errors
    /// I/O errors, or a file that is not a state log.
    pub fn open(dir: &Path) -> Result<(TxnLog, Replayed), TxnLogError> {
        std::fs::create_dir_all(dir).map_err(io("create", dir))?;
        let path = dir.join(TXN_LOG_FILE);
        let tmp = path.with_extension("log.tmp");
        if tmp.exists() {
            tracing::warn!(file = %tmp.display(), "removing a temp file left by an interrupted compaction of the transaction state log");
            std::fs::remove_file(&tmp).map_err(io("remove", &tmp))?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io("open", &path))?;
        let mut raw = Vec::new();
        file.read_to_end(&mut raw).map_err(io("read", &path))?;
        if raw.len() < HEADER {
            if raw.iter().zip(TXN_MAGIC.iter()).any(|(a, b)| a != b) {
                return Err(TxnLogError::NotALog { path, found: raw });
            }
            // New, or a header the crash cut: start over.
            file.set_len(0).map_err(io("truncate", &path))?;
            file.write_all_at(&TXN_MAGIC, 0)
                .map_err(io("write", &path))?;
            file.sync_all().map_err(io("fsync", &path))?;
            sync_dir(&path)?;
            let log = TxnLog {
                path,
                file,
                size: HEADER as u64,
                live_bytes: 0,
                compact_min_bytes: 1 << 20,
                #[cfg(test)]
                fail_next: false,
            };
            return Ok((
                log,
                Replayed {
                    states: BTreeMap::new(),
                },
            ));
        }
        if raw[..HEADER] != TXN_MAGIC {
            return Err(TxnLogError::NotALog {
                path,
                found: raw[..HEADER].to_vec(),
            });
        }
        let (states, valid, damage) = replay(&raw[HEADER..]);
        let size = (HEADER + valid) as u64;
        let cut_bytes = raw.len() as u64 - size;
        if let Some(why) = damage {
            tracing::warn!(file = %path.display(), position = size, cut_bytes, %why, "cut a torn or damaged tail of the transaction state log");
            file.set_len(size).map_err(io("truncate", &path))?;
            file.sync_all().map_err(io("fsync", &path))?;
        }
        let live_bytes = states
            .values()
            .map(|m| encoded_len(&TxnRecord::Put(m.clone())))
            .sum::<usize>() as u64;
        Ok((
            TxnLog {
                path,
                file,
                size,
                live_bytes,
                compact_min_bytes: 1 << 20,
                #[cfg(test)]
                fail_next: false,
            },
            Replayed { states },
        ))
    }

    /// The file's size in bytes.
    #[cfg(test)]
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Sets the size below which the log is never compacted (tests).
    #[cfg(test)]
    pub fn set_compact_min_bytes(&mut self, bytes: u64) {
        self.compact_min_bytes = bytes;
    }

    /// Appends records with one write and one fsync. On failure the file is
    /// cut back to where it was: none of them is kept.
    ///
    /// # Errors
    /// I/O errors, a record over [`MAX_RECORD_BYTES`].
    pub fn append(&mut self, records: &[&TxnRecord]) -> Result<(), TxnLogError> {
        let mut buf = Vec::new();
        for r in records {
            encode_record(&mut buf, r)?;
        }
        if buf.is_empty() {
            return Ok(());
        }
        let written = self
            .file
            .write_all_at(&buf, self.size)
            .map_err(io("append to", &self.path))
            .and_then(|()| self.fsync());
        if let Err(e) = written {
            if let Err(t) = self.file.set_len(self.size) {
                tracing::error!(file = %self.path.display(), error = %t, "could not cut back a failed append to the transaction state log");
            }
            return Err(e);
        }
        self.size += buf.len() as u64;
        Ok(())
    }

    fn fsync(&mut self) -> Result<(), TxnLogError> {
        #[cfg(test)]
        if std::mem::take(&mut self.fail_next) {
            return Err(io("fsync", &self.path)(std::io::Error::other("injected")));
        }
        self.file.sync_data().map_err(io("fsync", &self.path))
    }

    /// Whether the log has grown enough past its live content to compact.
    pub fn wants_compaction(&self) -> bool {
        self.size
            > self
                .compact_min_bytes
                .max(self.live_bytes.saturating_mul(4))
    }

    /// Rewrites the log with one record per live state (temp file, fsync,
    /// rename, directory fsync).
    ///
    /// # Errors
    /// I/O errors; the old file stays in place then.
    pub fn compact<'a>(
        &mut self,
        live: impl IntoIterator<Item = &'a TxnMeta>,
    ) -> Result<(), TxnLogError> {
        let tmp = self.path.with_extension("log.tmp");
        let mut buf = TXN_MAGIC.to_vec();
        for m in live {
            encode_record(&mut buf, &TxnRecord::Put(m.clone()))?;
        }
        let f = File::create(&tmp).map_err(io("create", &tmp))?;
        f.write_all_at(&buf, 0).map_err(io("write", &tmp))?;
        f.sync_all().map_err(io("fsync", &tmp))?;
        drop(f);
        std::fs::rename(&tmp, &self.path).map_err(io("rename to", &self.path))?;
        sync_dir(&self.path)?;
        self.file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(io("reopen", &self.path))?;
        self.size = buf.len() as u64;
        self.live_bytes = self.size - HEADER as u64;
        Ok(())
    }
}

fn sync_dir(path: &Path) -> Result<(), TxnLogError> {
    if let Some(dir) = path.parent() {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io("fsync the directory of", path))?;
    }
    Ok(())
}

/// Replays `body` (after the header): the states, the bytes that hold
/// whole valid records, and why the rest (if any) was not read.
fn replay(body: &[u8]) -> (BTreeMap<String, TxnMeta>, usize, Option<String>) {
    let mut states = BTreeMap::new();
    let mut at = 0;
    while at < body.len() {
        let rest = &body[at..];
        let Some((len, crc)) = rest.get(..8).map(|h| (be_u32(&h[..4]), be_u32(&h[4..8]))) else {
            return (
                states,
                at,
                Some(format!("{} bytes of a record header", rest.len())),
            );
        };
        let len = len as usize;
        if len > MAX_RECORD_BYTES {
            return (
                states,
                at,
                Some(format!("record length {len} is over {MAX_RECORD_BYTES}")),
            );
        }
        let Some(payload) = rest.get(8..8 + len) else {
            return (
                states,
                at,
                Some(format!("record of {len} bytes, {} there", rest.len() - 8)),
            );
        };
        if crc32fast::hash(payload) != crc {
            return (states, at, Some("record CRC mismatch".to_owned()));
        }
        match decode_payload(payload) {
            Ok(TxnRecord::Put(m)) => {
                states.insert(m.transactional_id.clone(), m);
            }
            Ok(TxnRecord::Remove(id)) => {
                states.remove(&id);
            }
            Err(e) => return (states, at, Some(format!("record does not decode: {e}"))),
        }
        at += 8 + len;
    }
    (states, at, None)
}

fn be_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(b);
    u32::from_be_bytes(a)
}

fn encoded_len(r: &TxnRecord) -> usize {
    let mut buf = Vec::new();
    encode_payload(&mut buf, r);
    buf.len() + 8
}

fn encode_record(buf: &mut Vec<u8>, r: &TxnRecord) -> Result<(), TxnLogError> {
    let mut payload = Vec::new();
    encode_payload(&mut payload, r);
    if payload.len() > MAX_RECORD_BYTES {
        return Err(TxnLogError::RecordTooLarge(payload.len()));
    }
    buf.put_u32(u32::try_from(payload.len()).unwrap_or(u32::MAX));
    buf.put_u32(crc32fast::hash(&payload));
    buf.extend_from_slice(&payload);
    Ok(())
}

pub(super) fn encode_payload(buf: &mut Vec<u8>, r: &TxnRecord) {
    match r {
        TxnRecord::Remove(id) => {
            buf.put_u8(2);
            buf.put_string(id);
        }
        TxnRecord::Put(m) => {
            buf.put_u8(1);
            buf.put_string(&m.transactional_id);
            buf.put_i64(m.producer_id);
            buf.put_i16(m.epoch);
            buf.put_i64(m.last_producer_id);
            buf.put_i16(m.last_epoch);
            buf.put_u8(m.state.code());
            buf.put_u32(m.timeout_ms);
            buf.put_i64(m.started_ms);
            buf.put_i64(m.updated_ms);
            buf.put_count(m.partitions.len());
            for tp in &m.partitions {
                buf.put_string(&tp.topic);
                buf.put_i32(tp.partition);
            }
            buf.put_count(m.groups.len());
            for (group, offsets) in &m.groups {
                buf.put_string(group);
                buf.put_count(offsets.len());
                for (tp, o) in offsets {
                    buf.put_string(&tp.topic);
                    buf.put_i32(tp.partition);
                    buf.put_i64(o.offset);
                    buf.put_i32(o.leader_epoch);
                    buf.put_nullable_bytes(o.metadata.as_deref().map(str::as_bytes));
                }
            }
        }
    }
}

pub(super) fn decode_payload(payload: &[u8]) -> Result<TxnRecord, WireError> {
    let mut r = Reader::new(payload);
    let kind = r.u8()?;
    let id = r.string()?;
    let record = match kind {
        2 => TxnRecord::Remove(id),
        1 => {
            let producer_id = r.i64()?;
            let epoch = r.i16()?;
            let last_producer_id = r.i64()?;
            let last_epoch = r.i16()?;
            let at = r.position();
            let code = r.u8()?;
            let state = TxnState::from_code(code)
                .filter(|s| *s != TxnState::Dead)
                .ok_or(WireError::InvalidLength {
                    at,
                    len: code.into(),
                })?;
            let timeout_ms = r.u32()?;
            let started_ms = r.i64()?;
            let updated_ms = r.i64()?;
            let partitions = r
                .array_of(6, |r| Ok(TopicPartition::new(r.string()?, r.i32()?)))?
                .into_iter()
                .collect();
            let groups = r
                .array_of(6, |r| {
                    let group = r.string()?;
                    let offsets = r
                        .array_of(22, |r| {
                            let tp = TopicPartition::new(r.string()?, r.i32()?);
                            let offset = r.i64()?;
                            let leader_epoch = r.i32()?;
                            let at = r.position();
                            let metadata = r
                                .nullable_bytes()?
                                .map(|b| {
                                    std::str::from_utf8(b)
                                        .map(str::to_owned)
                                        .map_err(|_| WireError::InvalidUtf8 { at })
                                })
                                .transpose()?;
                            Ok((
                                tp,
                                TxnOffset {
                                    offset,
                                    leader_epoch,
                                    metadata,
                                },
                            ))
                        })?
                        .into_iter()
                        .collect();
                    Ok((group, offsets))
                })?
                .into_iter()
                .collect();
            TxnRecord::Put(TxnMeta {
                transactional_id: id,
                producer_id,
                epoch,
                last_producer_id,
                last_epoch,
                state,
                timeout_ms,
                started_ms,
                updated_ms,
                partitions,
                groups,
            })
        }
        other => {
            return Err(WireError::InvalidLength {
                at: 0,
                len: other.into(),
            })
        }
    };
    r.finish()?;
    Ok(record)
}

/// The state log and the coordinator over it: an operation's step is
/// appended (and fsynced) before it is installed. The synchronous core the
/// engine wraps (blocking file work: call it off the executor).
#[derive(Debug)]
pub struct TxnStore {
    /// The coordinator.
    pub coordinator: super::TxnCoordinator,
    log: TxnLog,
}

impl TxnStore {
    /// Opens the log in `dir`, replays it and recovers the coordinator:
    /// returns the store and the completions to carry out before serving
    /// (see [`super::TxnCoordinator::recover`]); the aborts of transactions
    /// that were open are already recorded.
    ///
    /// # Errors
    /// As [`TxnLog::open`], and an append that fails.
    pub fn open(
        dir: &Path,
        limits: super::TxnLimits,
        now: i64,
    ) -> Result<(TxnStore, Vec<super::Completion>), TxnLogError> {
        let (log, replayed) = TxnLog::open(dir)?;
        let (coordinator, redo) =
            super::TxnCoordinator::recover(limits, replayed.states.into_values(), now);
        let mut store = TxnStore { coordinator, log };
        // The aborts of open transactions: one write and one fsync for all.
        let records: Vec<&TxnRecord> = redo.iter().filter_map(|s| s.record.as_ref()).collect();
        store.log.append(&records)?;
        let mut completions = Vec::new();
        for step in redo {
            store.coordinator.apply(&step);
            completions.extend(step.completion);
        }
        Ok((store, completions))
    }

    /// Makes a step durable, then installs it; compacts the log when it has
    /// grown well past its live content (a failed compaction is logged and
    /// tried again later: the log is still whole).
    ///
    /// # Errors
    /// The append failed: nothing is installed.
    pub fn commit(&mut self, step: &super::Step) -> Result<(), TxnLogError> {
        if let Some(record) = &step.record {
            self.log.append(&[record])?;
        }
        self.coordinator.apply(step);
        if self.log.wants_compaction() {
            if let Err(e) = self.log.compact(self.coordinator.all()) {
                tracing::warn!(error = %e, "compaction of the transaction state log failed; it keeps growing until one succeeds");
            }
        }
        Ok(())
    }

    /// The log (tests).
    #[cfg(test)]
    pub fn log(&mut self) -> &mut TxnLog {
        &mut self.log
    }
}

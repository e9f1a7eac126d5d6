//! One segment: a `.log` file of records and its sparse `.index`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use flume_protocol::record::{self, RECORD_HEADER_LEN};

use super::fault::{self, FaultInjector};
use super::files::{CachedFile, FileCache};
use super::{io_err, StorageError};

/// How a segment reaches one of its files: kept open by the segment
/// (the active segment of a log that fsyncs), or through the broker's
/// [`FileCache`] (opened on demand, closed when least recently used).
#[derive(Debug)]
enum SegFile {
    Pinned(File),
    Cached(CachedFile),
}

/// An open file for one call.
enum FileRef<'a> {
    Pinned(&'a File),
    Cached(Arc<File>),
}

impl std::ops::Deref for FileRef<'_> {
    type Target = File;
    fn deref(&self) -> &File {
        match self {
            FileRef::Pinned(f) => f,
            FileRef::Cached(f) => f,
        }
    }
}

impl SegFile {
    fn new(files: &Arc<FileCache>, path: &Path, file: File, pin: bool) -> Self {
        if pin {
            SegFile::Pinned(file)
        } else {
            SegFile::Cached(files.adopt(path.to_path_buf(), file))
        }
    }

    fn get(&self) -> Result<FileRef<'_>, StorageError> {
        Ok(match self {
            SegFile::Pinned(f) => FileRef::Pinned(f),
            SegFile::Cached(c) => FileRef::Cached(c.get()?),
        })
    }

    /// Hands a pinned file to the cache; closes a cached one (reopened on use).
    fn release(self, files: &Arc<FileCache>, path: &Path) -> Self {
        match self {
            SegFile::Pinned(f) => SegFile::Cached(files.adopt(path.to_path_buf(), f)),
            SegFile::Cached(c) => {
                c.close();
                SegFile::Cached(c)
            }
        }
    }

    /// Closes a cached file now (no-op for a pinned one).
    fn close(&self) {
        if let SegFile::Cached(c) = self {
            c.close();
        }
    }
}

/// Magic and version at the start of every `.log` file this version
/// writes. Version 2 segments may hold Kafka batch entries
/// ([`record::ATTR_KAFKA_BATCH`]); version 1 segments (written before them)
/// hold records only and are read as they are. A version 1 active segment
/// gets the version 2 header when it is opened ([`upgrade_header`]), since
/// it may get batch entries; an older Flume refuses version 2 files instead
/// of misreading them.
pub const LOG_MAGIC: [u8; 8] = *b"FLMLOG\x00\x02";
/// The header of a version 1 `.log` file (records only).
pub const LOG_MAGIC_V1: [u8; 8] = *b"FLMLOG\x00\x01";

/// Checks a `.log` file's header: `Ok(true)` for this version's, `Ok(false)`
/// for version 1's, and a reason to refuse the file otherwise (a newer
/// version's, or no Flume segment at all).
pub fn check_log_magic(magic: &[u8; 8]) -> Result<bool, String> {
    if *magic == LOG_MAGIC {
        return Ok(true);
    }
    if *magic == LOG_MAGIC_V1 {
        return Ok(false);
    }
    if magic[..6] == LOG_MAGIC[..6] {
        let version = u16::from_be_bytes([magic[6], magic[7]]);
        return Err(format!(
            "segment format version {version} was written by a newer Flume; this one reads versions 1 and 2 (downgrading a data directory is not supported)"
        ));
    }
    Err(format!(
        "bad magic/version {magic:02x?}, expected {LOG_MAGIC:02x?}"
    ))
}

/// Rewrites a version 1 `.log` header as version 2 in place (one 8-byte
/// write in the first block, then an fsync): every version 1 file is a valid
/// version 2 one.
///
/// # Errors
/// I/O errors.
pub fn upgrade_header(file: &File, path: &Path) -> Result<(), StorageError> {
    file.write_all_at(&LOG_MAGIC, 0)
        .map_err(io_err("write header of", path))?;
    file.sync_data().map_err(io_err("fsync", path))
}
/// Magic and version at the start of every `.index` file. Version 2 entries
/// carry a timestamp; a version 1 index (no timestamps) is rebuilt from its
/// segment on open, as a missing one is.
pub const INDEX_MAGIC: [u8; 8] = *b"FLMIDX\x00\x02";
/// Bytes of the file header.
pub const FILE_HEADER_LEN: u64 = 8;
/// Bytes of one index entry: `[rel u32][pos u32][max_ts_before i64]`.
pub const INDEX_ENTRY_LEN: usize = 16;

/// "No timestamp yet" in an index entry (no record before it in the segment).
pub const NO_TIMESTAMP: i64 = i64::MIN;

/// File name of a segment with this base offset and extension.
pub fn file_name(base: u64, ext: &str) -> String {
    format!("{base:020}.{ext}")
}

/// An index entry: the record with offset `base + rel` starts at byte `pos`,
/// and every record of the segment before it has a timestamp of at most
/// `max_ts_before` (so the values never decrease along the index, and a
/// lookup by time skips every entry whose `max_ts_before` is below the time
/// wanted: see [`Segment::find_time`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// Offset relative to the segment base.
    pub rel: u32,
    /// Byte position in the `.log` file.
    pub pos: u32,
    /// Largest timestamp of the records before this one in the segment
    /// ([`NO_TIMESTAMP`] if none).
    pub max_ts_before: i64,
}

impl IndexEntry {
    /// Appends the entry's [`INDEX_ENTRY_LEN`] bytes to `raw`.
    pub(crate) fn encode(&self, raw: &mut Vec<u8>) {
        raw.extend_from_slice(&self.rel.to_be_bytes());
        raw.extend_from_slice(&self.pos.to_be_bytes());
        raw.extend_from_slice(&self.max_ts_before.to_be_bytes());
    }

    /// The entry in `raw` ([`INDEX_ENTRY_LEN`] bytes), as [`IndexEntry::encode`] wrote it.
    pub(crate) fn decode(raw: &[u8]) -> Option<IndexEntry> {
        let field = |r: std::ops::Range<usize>| raw.get(r);
        Some(IndexEntry {
            rel: u32::from_be_bytes(field(0..4)?.try_into().ok()?),
            pos: u32::from_be_bytes(field(4..8)?.try_into().ok()?),
            max_ts_before: i64::from_be_bytes(field(8..16)?.try_into().ok()?),
        })
    }
}

/// The timestamp of a checked entry whose bytes start at `at` in `buf` (a
/// Kafka batch entry's maxTimestamp).
fn timestamp_at(buf: &[u8], at: usize) -> Option<i64> {
    let end = at
        .checked_add(RECORD_HEADER_LEN)?
        .checked_add(usize::try_from(record::peek_header(buf, at)?.1).ok()?)?;
    let raw = record::RawRecord {
        pos: at,
        offset: 0,
        payload: buf.get(at + RECORD_HEADER_LEN..end)?,
    };
    (raw.payload.len() >= record::MIN_PAYLOAD_LEN).then(|| raw.timestamp())
}

/// The first record of a checked entry whose timestamp is at least `ts`: a
/// record itself, or the first such record of a Kafka batch entry (read out
/// of the batch; a control batch has none).
///
/// # Errors
/// Why a batch entry's records do not decode.
pub(crate) fn first_at_or_after(
    raw: &record::RawRecord<'_>,
    ts: i64,
) -> Result<Option<(u64, i64)>, String> {
    let Some(header) = raw.batch_header() else {
        return Ok((raw.timestamp() >= ts).then(|| (raw.offset, raw.timestamp())));
    };
    let mut found = None;
    super::batch_records(raw, &header, &mut |delta, r| {
        if found.is_none() && r.timestamp >= ts {
            found = Some((raw.offset.saturating_add(delta), r.timestamp));
        }
    })?;
    Ok(found)
}

/// True when `raw` may come where offset `expected` is due: it has that
/// offset, or a later one and the mark of a record stored after a gap
/// ([`record::ATTR_AFTER_GAP`], set by the cleaner). Any other offset is
/// damage. The offset due after an entry is its [`record::RawRecord::last_offset`] + 1.
pub(crate) fn follows(raw: &record::RawRecord<'_>, expected: u64) -> bool {
    raw.offset == expected
        || (raw.offset > expected && raw.attributes() & record::ATTR_AFTER_GAP != 0)
}

/// What a recovery scan found.
#[derive(Debug, Default)]
pub struct ScanOutcome {
    /// Bytes of whole, valid records (file position where they end).
    pub valid_end: u64,
    /// Offset after the last valid record.
    pub next_offset: u64,
    /// Largest timestamp seen.
    pub max_timestamp: Option<i64>,
    /// Why the scan stopped early, if it did.
    pub damage: Option<String>,
}

/// The state of a segment before an append, to cut it back to (see [`Segment::rollback`]).
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    size: u64,
    next_offset: u64,
    entries: usize,
    bytes_since_entry: u64,
    max_timestamp: Option<i64>,
}

/// One segment.
#[derive(Debug)]
pub struct Segment {
    /// Offset of its first record.
    pub base: u64,
    /// Offset after its last record.
    pub next_offset: u64,
    /// File size, header included.
    pub size: u64,
    /// Largest record timestamp, when known (computed lazily for old segments).
    pub max_timestamp: Option<i64>,
    log_path: PathBuf,
    index_path: PathBuf,
    log: SegFile,
    index: SegFile,
    files: Arc<FileCache>,
    entries: Vec<IndexEntry>,
    /// How many of `entries` the `.index` file holds: the rest are written
    /// [`INDEX_WRITE_EVERY`] at a time, and when the segment is sealed,
    /// fsynced or closed.
    index_written: usize,
    bytes_since_entry: u64,
    index_interval: u64,
    faults: Arc<FaultInjector>,
}

/// Index entries kept in memory only before they are written to the
/// `.index` file together (64 KiB of log at the default 4 KiB interval).
/// The index is derived data: the entries a crash loses are found again by
/// the recovery scan of the active segment, which starts from the last
/// entry on disk, so this bounds what that scan reads beyond it. Writing
/// them one at a time cost a second file per partition in the open-file
/// cache: with 10,000 partitions written in turn, half the appends had to
/// open a file.
pub const INDEX_WRITE_EVERY: usize = 16;

fn read_exact_at(file: &File, path: &Path, buf: &mut [u8], pos: u64) -> Result<(), StorageError> {
    file.read_exact_at(buf, pos).map_err(io_err("read", path))
}

/// True when `needed` bytes from `pos + at` lie within `size` (lengths read
/// from disk are never trusted to add up without overflow).
fn fits(pos: u64, at: usize, needed: u64, size: u64) -> bool {
    pos.checked_add(at as u64)
        .and_then(|p| p.checked_add(needed))
        .is_some_and(|end| end <= size)
}

impl Segment {
    /// Creates an empty segment (both files, with headers). The caller
    /// fsyncs the directory if the policy asks for it.
    ///
    /// # Errors
    /// When the files cannot be created (what was created is removed again).
    ///
    /// `pin`: keep both files open outside the cache (see [`super::files`]).
    pub fn create(
        dir: &Path,
        base: u64,
        index_interval: u64,
        faults: Arc<FaultInjector>,
        files: &Arc<FileCache>,
        pin: bool,
    ) -> Result<Self, StorageError> {
        let log_path = dir.join(file_name(base, "log"));
        let index_path = dir.join(file_name(base, "index"));
        let created = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&log_path)
            .map_err(io_err("create", &log_path))
            .and_then(|mut log| {
                log.write_all(&LOG_MAGIC)
                    .map_err(io_err("write", &log_path))?;
                Ok((log, Self::fresh_index(&index_path)?))
            });
        let (log, index) = match created {
            Ok(f) => f,
            Err(e) => {
                let _ = std::fs::remove_file(&log_path);
                let _ = std::fs::remove_file(&index_path);
                return Err(e);
            }
        };
        Ok(Segment {
            base,
            next_offset: base,
            size: FILE_HEADER_LEN,
            max_timestamp: None,
            log: SegFile::new(files, &log_path, log, pin),
            index: SegFile::new(files, &index_path, index, pin),
            files: Arc::clone(files),
            log_path,
            index_path,
            entries: Vec::new(),
            index_written: 0,
            bytes_since_entry: 0,
            index_interval,
            faults,
        })
    }

    fn fresh_index(path: &Path) -> Result<File, StorageError> {
        let mut index = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(io_err("create", path))?;
        index
            .write_all(&INDEX_MAGIC)
            .map_err(io_err("write", path))?;
        Ok(index)
    }

    /// Opens an existing segment.
    ///
    /// `active`: scan from the last valid index entry, checking every CRC,
    /// and truncate at the first torn or corrupt record. Otherwise the
    /// segment is trusted; `verify` scans it fully and refuses damage.
    /// `next_base`: base of the following segment (the next offset of a sealed one).
    ///
    /// # Errors
    /// I/O errors, a bad magic, or (with `verify`) a damaged sealed segment.
    ///
    /// `pin` (active segments only): keep both files open outside the cache.
    /// A sealed segment's files are closed when this returns and opened on
    /// demand through `files`.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        dir: &Path,
        base: u64,
        index_interval: u64,
        active: bool,
        verify: bool,
        next_base: Option<u64>,
        faults: Arc<FaultInjector>,
        files: &Arc<FileCache>,
        pin: bool,
    ) -> Result<Self, StorageError> {
        let pin = pin && active;
        let log_path = dir.join(file_name(base, "log"));
        let index_path = dir.join(file_name(base, "index"));
        let log = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&log_path)
            .map_err(io_err("open", &log_path))?;
        let size = log.metadata().map_err(io_err("stat", &log_path))?.len();
        if size < FILE_HEADER_LEN {
            if !active {
                return Err(StorageError::Inconsistent {
                    path: log_path,
                    reason: format!("sealed segment is {size} bytes, shorter than its header"),
                });
            }
            // A segment created just before a crash: start it again.
            tracing::warn!(segment = %log_path.display(), size, "active segment shorter than its header; recreating it empty");
            drop(log);
            return Self::create(dir, base, index_interval, faults, files, pin);
        }
        let mut magic = [0u8; 8];
        read_exact_at(&log, &log_path, &mut magic, 0)?;
        match check_log_magic(&magic) {
            Ok(true) => {}
            Ok(false) if active => upgrade_header(&log, &log_path)?,
            Ok(false) => {}
            Err(reason) => {
                return Err(StorageError::Inconsistent {
                    path: log_path,
                    reason,
                })
            }
        }
        let mut index_missing = false;
        let (index, entries) = match Self::load_index(&index_path, &log, size, base) {
            Some(found) => found,
            None => {
                tracing::info!(index = %index_path.display(), "index missing or invalid; rebuilding from the log");
                index_missing = true;
                (Self::fresh_index(&index_path)?, Vec::new())
            }
        };
        let mut seg = Segment {
            base,
            next_offset: next_base.unwrap_or(base),
            size,
            max_timestamp: None,
            log: SegFile::new(files, &log_path, log, pin),
            index: SegFile::new(files, &index_path, index, pin),
            files: Arc::clone(files),
            log_path,
            index_path,
            index_written: entries.len(),
            entries,
            bytes_since_entry: 0,
            index_interval,
            faults,
        };
        // An empty index is valid for a segment shorter than one index interval
        // (its first entry comes after `index_interval` bytes): rebuilding it at
        // every open cost a truncate (a synchronous discard on some filesystems)
        // per partition, most of a restart's time with many small partitions.
        let rebuilt_index = index_missing
            || (seg.entries.is_empty()
                && size > FILE_HEADER_LEN.saturating_add(seg.index_interval));
        if active || verify || rebuilt_index || next_base.is_none() {
            // Scan from the last index entry when trusted, from the start when verifying.
            let from = if verify || rebuilt_index {
                None
            } else {
                seg.entries.last().copied()
            };
            // Entries past the last one on disk (not yet written at a crash)
            // are found again as the scan goes; a verifying scan from the
            // start leaves the loaded entries as they are.
            let build = rebuilt_index || from.is_some() || seg.entries.is_empty();
            let out = seg.scan(from, build)?;
            if let Some(damage) = &out.damage {
                if !active {
                    return Err(StorageError::Corrupt {
                        segment: seg.log_path.clone(),
                        offset: out.next_offset,
                        position: out.valid_end,
                        reason: damage.clone(),
                    });
                }
                let dropped = size.saturating_sub(out.valid_end);
                tracing::warn!(
                    segment = %seg.log_path.display(),
                    dropped_bytes = dropped,
                    resume_offset = out.next_offset,
                    reason = %damage,
                    "truncated torn or corrupt tail of the active segment"
                );
                let log = seg.log.get()?;
                log.set_len(out.valid_end)
                    .map_err(io_err("truncate", &seg.log_path))?;
                log.sync_all().map_err(io_err("fsync", &seg.log_path))?;
                drop(log);
                seg.size = out.valid_end;
                seg.entries.retain(|e| u64::from(e.pos) < out.valid_end);
                seg.rewrite_index()?;
            }
            seg.next_offset = match next_base {
                // A sealed segment ends where the next one begins: its last
                // records may have been cleaned away.
                Some(nb) if out.next_offset <= nb => nb,
                _ => out.next_offset,
            };
            // Scanned from an entry, the scan started from what the entry knows.
            seg.max_timestamp = out.max_timestamp;
            if rebuilt_index {
                seg.rewrite_index()?;
            } else {
                seg.write_index_tail();
            }
        }
        seg.bytes_since_entry = seg.size.saturating_sub(
            seg.entries
                .last()
                .map_or(FILE_HEADER_LEN, |e| u64::from(e.pos)),
        );
        if !active {
            // Sealed: opened again only when read.
            seg.log.close();
            seg.index.close();
        }
        Ok(seg)
    }

    /// Reads and validates the index; `None` if it must be rebuilt. Drops
    /// trailing entries that point past the log or at the wrong offset.
    fn load_index(
        path: &Path,
        log: &File,
        log_size: u64,
        base: u64,
    ) -> Option<(File, Vec<IndexEntry>)> {
        let index = OpenOptions::new().read(true).write(true).open(path).ok()?;
        let mut raw = Vec::new();
        let mut f = &index;
        std::io::Read::read_to_end(&mut f, &mut raw).ok()?;
        if raw.len() < FILE_HEADER_LEN as usize || raw[..8] != INDEX_MAGIC {
            return None;
        }
        let mut entries: Vec<IndexEntry> = Vec::new();
        for chunk in raw[8..].chunks_exact(INDEX_ENTRY_LEN) {
            let IndexEntry {
                rel,
                pos,
                max_ts_before,
            } = IndexEntry::decode(chunk)?;
            if let Some(last) = entries.last() {
                if rel <= last.rel || pos <= last.pos || max_ts_before < last.max_ts_before {
                    return None;
                }
            }
            if u64::from(pos) < FILE_HEADER_LEN || u64::from(pos) >= log_size {
                break;
            }
            entries.push(IndexEntry {
                rel,
                pos,
                max_ts_before,
            });
        }
        // Check the entries from the end: each must point at a record header
        // with its offset. Entries past real data (lost before a crash) go.
        while let Some(last) = entries.last().copied() {
            let mut h = [0u8; RECORD_HEADER_LEN];
            let ok = log.read_exact_at(&mut h, u64::from(last.pos)).is_ok()
                && record::peek_header(&h, 0).map(|(o, _)| o) == Some(base + u64::from(last.rel));
            if ok {
                break;
            }
            entries.pop();
        }
        if entries.len() * INDEX_ENTRY_LEN + 8 != raw.len() {
            // Some entries were dropped: the caller rewrites the file when it scans.
            let this = (index, entries);
            let _ = rewrite_index_file(path, &this.0, &this.1);
            return Some(this);
        }
        Some((index, entries))
    }

    /// Scans records from `from` (or the start), checking each CRC.
    /// When `build_index` is set, index entries are added as it goes.
    fn scan(
        &mut self,
        from: Option<IndexEntry>,
        build_index: bool,
    ) -> Result<ScanOutcome, StorageError> {
        let (mut pos, mut next) = match from {
            Some(e) => (u64::from(e.pos), self.base + u64::from(e.rel)),
            None => (FILE_HEADER_LEN, self.base),
        };
        let mut out = ScanOutcome {
            valid_end: pos,
            next_offset: next,
            ..ScanOutcome::default()
        };
        let chunk_len: u64 = 1 << 20;
        let mut since_entry = 0u64;
        // The largest timestamp so far: the index entry scanned from knows
        // the records before it.
        let mut max_ts = from.map_or(NO_TIMESTAMP, |e| e.max_ts_before);
        if max_ts != NO_TIMESTAMP {
            out.max_timestamp = Some(max_ts);
        }
        while pos < self.size {
            let want = chunk_len.min(self.size - pos);
            let mut buf = vec![0u8; usize::try_from(want).unwrap_or(usize::MAX)];
            read_exact_at(&*self.log.get()?, &self.log_path, &mut buf, pos)?;
            let mut at = 0usize;
            let mut progressed = false;
            loop {
                match record::check_record(&buf, at, u64::MAX) {
                    Ok(raw) => {
                        if !follows(&raw, next) {
                            out.damage = Some(format!(
                                "record at byte {} has offset {}, expected {next}{}",
                                pos + at as u64,
                                raw.offset,
                                if raw.offset > next {
                                    " (a gap not marked as one)"
                                } else {
                                    ""
                                }
                            ));
                            return Ok(out);
                        }
                        if build_index && since_entry >= self.index_interval {
                            self.push_entry(raw.offset, pos + at as u64, max_ts);
                            since_entry = 0;
                        }
                        let len = raw.encoded_len();
                        since_entry += len as u64;
                        max_ts = max_ts.max(raw.timestamp());
                        out.max_timestamp = Some(max_ts);
                        at += len;
                        next = raw.last_offset() + 1;
                        out.valid_end = pos + at as u64;
                        out.next_offset = next;
                        progressed = true;
                    }
                    Err(record::RecordError::Torn { needed, .. })
                        if at > 0 && fits(pos, at, needed, self.size) =>
                    {
                        // The record continues past this chunk: read again from it.
                        break;
                    }
                    Err(record::RecordError::Torn { needed, .. })
                        if fits(pos, at, needed, self.size) =>
                    {
                        // A single record larger than the chunk: read it whole.
                        let mut big = vec![0u8; usize::try_from(needed).unwrap_or(usize::MAX)];
                        read_exact_at(&*self.log.get()?, &self.log_path, &mut big, pos)?;
                        buf = big;
                        continue;
                    }
                    Err(e) => {
                        if pos + (at as u64) < self.size {
                            out.damage = Some(e.to_string());
                            return Ok(out);
                        }
                        break;
                    }
                }
                if at >= buf.len() {
                    break;
                }
            }
            if !progressed {
                break;
            }
            pos += at as u64;
        }
        Ok(out)
    }

    fn push_entry(&mut self, offset: u64, pos: u64, max_ts_before: i64) {
        // Segments are capped below 4 GiB and 2^32 records by the log, so both fit.
        let rel = u32::try_from(offset.saturating_sub(self.base)).unwrap_or(u32::MAX);
        let pos = u32::try_from(pos).unwrap_or(u32::MAX);
        self.entries.push(IndexEntry {
            rel,
            pos,
            max_ts_before,
        });
    }

    fn rewrite_index(&mut self) -> Result<(), StorageError> {
        rewrite_index_file(&self.index_path, &*self.index.get()?, &self.entries)?;
        self.index_written = self.entries.len();
        Ok(())
    }

    /// Appends a validated batch whose offsets are already assigned, with one
    /// write call. Adds index entries every `index_interval` bytes.
    ///
    /// # Errors
    /// When the write fails; the file is cut back to its previous size.
    pub fn append(&mut self, batch: &[u8], count: u64, max_ts: i64) -> Result<(), StorageError> {
        let start = self.size;
        let log = self.log.get()?;
        let written = if self.faults.write_fault() {
            // A short write, then the error: what a full or failing disk gives.
            let half = batch.get(..batch.len() / 2).unwrap_or_default();
            log.write_all_at(half, start)
                .and(Err(fault::injected("write")))
        } else {
            log.write_all_at(batch, start)
        };
        if let Err(e) = written {
            if let Err(t) = log.set_len(start) {
                tracing::error!(segment = %self.log_path.display(), error = %t, "could not cut a failed write back; recovery will at restart");
            }
            return Err(StorageError::Io {
                op: "append to",
                path: self.log_path.clone(),
                source: e,
            });
        }
        let mut pos = 0usize;
        let mut offset = self.next_offset;
        let mut seen_ts = self.max_timestamp.unwrap_or(NO_TIMESTAMP);
        while let Some((_, size, span)) = record::peek_entry(batch, pos) {
            if self.bytes_since_entry >= self.index_interval {
                self.push_entry(offset, start + pos as u64, seen_ts);
                self.bytes_since_entry = 0;
            }
            if let Some(ts) = timestamp_at(batch, pos) {
                seen_ts = seen_ts.max(ts);
            }
            let len = RECORD_HEADER_LEN + size as usize;
            self.bytes_since_entry += len as u64;
            pos += len;
            offset += span;
        }
        if self.entries.len() >= self.index_written + INDEX_WRITE_EVERY {
            self.write_index_tail();
        }
        self.size += batch.len() as u64;
        self.next_offset += count;
        let max_ts = max_ts.max(seen_ts);
        self.max_timestamp = Some(self.max_timestamp.map_or(max_ts, |m| m.max(max_ts)));
        Ok(())
    }

    /// Writes the index entries the file does not hold yet. The index is
    /// derived data: a failed write is logged and tried again with the next
    /// ones (recovery finds lost entries again).
    pub fn write_index_tail(&mut self) {
        let Some(new) = self.entries.get(self.index_written..) else {
            return;
        };
        if new.is_empty() {
            return;
        }
        let mut raw = Vec::with_capacity(new.len() * INDEX_ENTRY_LEN);
        for e in new {
            e.encode(&mut raw);
        }
        let at = FILE_HEADER_LEN + (self.index_written * INDEX_ENTRY_LEN) as u64;
        match self.index.get().and_then(|f| {
            f.write_all_at(&raw, at)
                .map_err(io_err("write", &self.index_path))
        }) {
            Ok(()) => self.index_written = self.entries.len(),
            Err(e) => {
                tracing::warn!(index = %self.index_path.display(), error = %e, "index write failed; it will be rebuilt on open");
            }
        }
    }

    /// Entries the `.index` file holds (for tests).
    pub fn index_written(&self) -> usize {
        self.index_written
    }

    /// The state to cut back to if what follows fails.
    pub fn mark(&self) -> Mark {
        Mark {
            size: self.size,
            next_offset: self.next_offset,
            entries: self.entries.len(),
            bytes_since_entry: self.bytes_since_entry,
            max_timestamp: self.max_timestamp,
        }
    }

    /// Cuts the segment back to `mark` (taken before appends that were not
    /// acknowledged): the files are truncated and the in-memory state
    /// restored, so nothing after the mark is ever served.
    ///
    /// # Errors
    /// When the truncation fails; the in-memory state is restored anyway
    /// (reads stop at the mark) and recovery cuts the file at restart.
    pub fn rollback(&mut self, mark: Mark) -> Result<(), StorageError> {
        self.size = mark.size;
        self.next_offset = mark.next_offset;
        self.entries.truncate(mark.entries);
        self.bytes_since_entry = mark.bytes_since_entry;
        self.max_timestamp = mark.max_timestamp;
        if self.index_written > self.entries.len() {
            self.index_written = self.entries.len();
            let index_len = FILE_HEADER_LEN + (self.index_written * INDEX_ENTRY_LEN) as u64;
            if let Ok(index) = self.index.get() {
                let _ = index.set_len(index_len);
            }
        }
        let log = self.log.get()?;
        log.set_len(mark.size)
            .map_err(io_err("truncate", &self.log_path))?;
        // Best effort: the disk has just failed, and restart recovery checks again.
        let _ = log.sync_all();
        Ok(())
    }

    /// fdatasync of the log file.
    ///
    /// # Errors
    /// When the OS reports a failure.
    pub fn sync(&self) -> Result<(), StorageError> {
        if self.faults.fsync_fault() {
            return Err(io_err("fsync", &self.log_path)(fault::injected("fsync")));
        }
        self.log
            .get()?
            .sync_data()
            .map_err(io_err("fsync", &self.log_path))
    }

    /// Writes the index's pending entries and flushes the index file as
    /// well (on seal and shutdown).
    ///
    /// # Errors
    /// When the OS reports a failure.
    pub fn sync_all(&mut self) -> Result<(), StorageError> {
        self.sync()?;
        self.write_index_tail();
        self.index
            .get()?
            .sync_data()
            .map_err(io_err("fsync", &self.index_path))
    }

    /// Where [`Segment::position_of`] starts scanning for `offset`: the
    /// position of the sparse index entry at or before it (no I/O).
    pub fn scan_start(&self, offset: u64) -> u64 {
        self.entry_before(offset).0
    }

    /// The sparse index entry at or before `offset`: its position and offset
    /// (the segment's start when there is none).
    fn entry_before(&self, offset: u64) -> (u64, u64) {
        let rel = offset.saturating_sub(self.base);
        let idx = self.entries.partition_point(|e| u64::from(e.rel) <= rel);
        match idx.checked_sub(1).and_then(|i| self.entries.get(i)) {
            Some(e) => (u64::from(e.pos), self.base + u64::from(e.rel)),
            None => (FILE_HEADER_LEN, self.base),
        }
    }

    /// Byte position of the first entry whose last offset is `offset` or
    /// more (the record at `offset`, or the Kafka batch entry holding it, or
    /// the first after it: `offset` lies in this segment and offsets may
    /// have gaps), found by a binary search of the index and a forward scan
    /// of entry headers; the segment's size when no entry of it is that far
    /// (its last records were cleaned away). The entries read later check
    /// their CRCs and their offsets against [`follows`].
    ///
    /// # Errors
    /// I/O errors, or record headers whose offsets go backwards or whose
    /// sizes step past the end of the segment.
    pub fn position_of(&self, offset: u64) -> Result<u64, StorageError> {
        let (mut pos, mut cur) = self.entry_before(offset);
        let mut buf = vec![0u8; 0];
        let mut buf_start = pos;
        while cur < offset && pos < self.size {
            let local = usize::try_from(pos - buf_start).unwrap_or(usize::MAX);
            let header = match record::peek_entry(&buf, local) {
                Some(h) => h,
                None => {
                    let want = (self.index_interval + 2 * record::ENTRY_PEEK_LEN as u64)
                        .max(4096)
                        .min(self.size.saturating_sub(pos));
                    if want < record::ENTRY_PEEK_LEN as u64 {
                        return Err(self.corrupt(
                            offset,
                            pos,
                            "index scan ran past the end of the segment",
                        ));
                    }
                    buf = vec![0u8; usize::try_from(want).unwrap_or(usize::MAX)];
                    read_exact_at(&*self.log.get()?, &self.log_path, &mut buf, pos)?;
                    buf_start = pos;
                    match record::peek_entry(&buf, 0) {
                        Some(h) => h,
                        None => return Err(self.corrupt(offset, pos, "short record header")),
                    }
                }
            };
            let last = header.0.saturating_add(header.2 - 1);
            if header.0 < cur {
                return Err(self.corrupt(
                    offset,
                    pos,
                    &format!(
                        "record header has offset {}, expected {cur} or more",
                        header.0
                    ),
                ));
            }
            if last >= offset {
                break;
            }
            // The size comes from disk: it must not step past the end of the segment.
            pos = match pos.checked_add(RECORD_HEADER_LEN as u64 + u64::from(header.1)) {
                Some(p) if p <= self.size => p,
                _ => {
                    return Err(self.corrupt(
                        offset,
                        pos,
                        &format!(
                            "record {} claims {} bytes, past the end of the segment ({} bytes)",
                            header.0,
                            RECORD_HEADER_LEN as u64 + u64::from(header.1),
                            self.size
                        ),
                    ))
                }
            };
            cur = last + 1;
        }
        Ok(pos)
    }

    fn corrupt(&self, offset: u64, pos: u64, reason: &str) -> StorageError {
        StorageError::Corrupt {
            segment: self.log_path.clone(),
            offset,
            position: pos,
            reason: reason.to_owned(),
        }
    }

    /// Reads whole entries from the first one holding `offset` or after it
    /// (a Kafka batch entry may start before `offset`), up to `max_bytes`
    /// (at least one entry), checking every CRC. Empty when no record of the
    /// segment is that far: the reader goes on to the next segment.
    ///
    /// # Errors
    /// I/O errors, or [`StorageError::Corrupt`] naming the offset and segment.
    pub fn read(&self, offset: u64, max_bytes: usize) -> Result<Vec<u8>, StorageError> {
        let pos = self.position_of(offset)?;
        let avail = match self.size.checked_sub(pos) {
            Some(a) if a > 0 => a,
            Some(_) => return Ok(Vec::new()),
            None => {
                return Err(self.corrupt(
                    offset,
                    pos,
                    &format!(
                        "record lies past the end of the segment ({} bytes)",
                        self.size
                    ),
                ))
            }
        };
        let mut want = (max_bytes as u64).min(avail);
        if want < RECORD_HEADER_LEN as u64 {
            want = avail.min(RECORD_HEADER_LEN as u64);
        }
        let mut buf = vec![0u8; usize::try_from(want).unwrap_or(usize::MAX)];
        read_exact_at(&*self.log.get()?, &self.log_path, &mut buf, pos)?;
        // The first record always goes out whole, even above max_bytes.
        if let Some((_, size)) = record::peek_header(&buf, 0) {
            let first = RECORD_HEADER_LEN as u64 + u64::from(size);
            if first > avail {
                return Err(self.corrupt(
                    offset,
                    pos,
                    &format!("record claims {first} bytes, {avail} remain in the segment"),
                ));
            }
            if first > buf.len() as u64 {
                buf = vec![0u8; usize::try_from(first).unwrap_or(usize::MAX)];
                read_exact_at(&*self.log.get()?, &self.log_path, &mut buf, pos)?;
            }
        }
        let mut end = 0usize;
        let mut expect = offset;
        for raw in record::RecordIter::new(&buf) {
            match raw {
                Ok(r) => {
                    // The first entry may be a batch that holds `offset`.
                    let holds = r.pos == 0 && r.offset <= offset && offset <= r.last_offset();
                    if !holds && !follows(&r, expect) {
                        return Err(self.corrupt(
                            expect,
                            pos + r.pos as u64,
                            &format!("record has offset {}", r.offset),
                        ));
                    }
                    expect = r.last_offset() + 1;
                    end = r.pos + r.encoded_len();
                }
                Err(record::RecordError::Torn { at, .. }) if at > 0 => break,
                Err(e) => return Err(self.corrupt(expect, pos + end as u64, &e.to_string())),
            }
        }
        buf.truncate(end);
        Ok(buf)
    }

    /// The largest timestamp of the segment, scanning it once if unknown.
    ///
    /// # Errors
    /// I/O errors.
    pub fn max_timestamp(&mut self) -> Result<Option<i64>, StorageError> {
        if self.max_timestamp.is_none() && self.size > FILE_HEADER_LEN {
            let out = self.scan(None, false)?;
            self.max_timestamp = out.max_timestamp;
        }
        Ok(self.max_timestamp)
    }

    /// The first record of the segment whose timestamp is at least `ts`:
    /// its offset and timestamp, or `None` if it has no such record. The
    /// index skips every entry whose records before it are all older
    /// (`max_ts_before < ts`); the rest, at most one index interval plus a
    /// record when the answer is not in the segment, is read and checked.
    ///
    /// # Errors
    /// I/O errors, or [`StorageError::Corrupt`] for a damaged record.
    pub fn find_time(&self, ts: i64) -> Result<Option<(u64, i64)>, StorageError> {
        if self.max_timestamp.is_some_and(|m| m < ts) {
            return Ok(None);
        }
        let skip = self.entries.partition_point(|e| e.max_ts_before < ts);
        let (mut pos, mut next) = match skip.checked_sub(1).and_then(|i| self.entries.get(i)) {
            Some(e) => (u64::from(e.pos), self.base + u64::from(e.rel)),
            None => (FILE_HEADER_LEN, self.base),
        };
        let chunk = self
            .index_interval
            .saturating_mul(2)
            .clamp(64 * 1024, 1 << 20);
        while pos < self.size {
            let want = chunk.min(self.size - pos);
            let mut buf = vec![0u8; usize::try_from(want).unwrap_or(usize::MAX)];
            read_exact_at(&*self.log.get()?, &self.log_path, &mut buf, pos)?;
            let mut at = 0usize;
            loop {
                match record::check_record(&buf, at, u64::MAX) {
                    Ok(raw) => {
                        if !follows(&raw, next) {
                            return Err(self.corrupt(
                                next,
                                pos + at as u64,
                                &format!("record has offset {}", raw.offset),
                            ));
                        }
                        if raw.timestamp() >= ts {
                            let found = first_at_or_after(&raw, ts)
                                .map_err(|e| self.corrupt(raw.offset, pos + at as u64, &e))?;
                            if found.is_some() {
                                return Ok(found);
                            }
                        }
                        at += raw.encoded_len();
                        next = raw.last_offset() + 1;
                        if at >= buf.len() {
                            break;
                        }
                    }
                    Err(record::RecordError::Torn { needed, .. })
                        if fits(pos, at, needed, self.size) =>
                    {
                        if at == 0 {
                            // One record larger than the chunk: read it whole.
                            buf = vec![0u8; usize::try_from(needed).unwrap_or(usize::MAX)];
                            read_exact_at(&*self.log.get()?, &self.log_path, &mut buf, pos)?;
                            continue;
                        }
                        break;
                    }
                    Err(e) => return Err(self.corrupt(next, pos + at as u64, &e.to_string())),
                }
            }
            pos += at as u64;
        }
        Ok(None)
    }

    /// Closes the segment's cached files now (reopened on the next use).
    pub fn close_files(&self) {
        self.log.close();
        self.index.close();
    }

    /// Deletes both files.
    pub fn delete(self) -> Result<(), StorageError> {
        let Segment {
            log_path,
            index_path,
            log,
            index,
            ..
        } = self;
        // Out of the cache first: a later open of the same name is a new file.
        drop(log);
        drop(index);
        std::fs::remove_file(&log_path).map_err(io_err("delete", &log_path))?;
        let _ = std::fs::remove_file(&index_path);
        Ok(())
    }

    /// Makes this (former active) segment a sealed one: its files go
    /// through the cache, and the index, no longer written, is closed.
    pub fn seal(&mut self) {
        self.write_index_tail();
        let placeholder = || SegFile::Cached(self.files.file(PathBuf::new()));
        let log = std::mem::replace(&mut self.log, placeholder());
        self.log = match log {
            SegFile::Pinned(f) => SegFile::Cached(self.files.adopt(self.log_path.clone(), f)),
            cached => cached,
        };
        let index = std::mem::replace(&mut self.index, placeholder());
        self.index = index.release(&self.files, &self.index_path);
        self.index.close();
    }

    /// Path of the `.log` file.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Number of index entries (for tests and diagnostics).
    pub fn index_len(&self) -> usize {
        self.entries.len()
    }
}

fn rewrite_index_file(
    path: &Path,
    file: &File,
    entries: &[IndexEntry],
) -> Result<(), StorageError> {
    let mut raw = Vec::with_capacity(8 + entries.len() * INDEX_ENTRY_LEN);
    raw.extend_from_slice(&INDEX_MAGIC);
    for e in entries {
        e.encode(&mut raw);
    }
    file.set_len(0).map_err(io_err("truncate", path))?;
    file.write_all_at(&raw, 0).map_err(io_err("write", path))?;
    Ok(())
}

//! A partition's log: its segments, appends with rollover, reads through the
//! sparse index, recovery on open, and retention.
//!
//! Fail-stop: after any failed write or fsync the log cuts the active segment
//! back to what had been acknowledged, keeps its end offset there, and refuses
//! every later append with [`StorageError::Failed`] until it is opened again
//! (at the broker's restart, when recovery looks at the files). A failed fsync
//! cannot be retried safely: the kernel may have dropped the dirty pages and
//! report the next fsync as a success (PostgreSQL's "fsyncgate").

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flume_protocol::record;

use super::compact::{self, CleanPlan, Cleaned, CompactionConfig, PlannedSegment};
use super::fault::FaultInjector;
use super::files::FileCache;
use super::segment::{self, Segment};
use super::{dirs, io_err, StorageError};

/// When appended data is fsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Before an append returns (one fdatasync per appended batch).
    Always,
    /// At most this long after an append (checked on append and by the broker's ticker).
    Interval(Duration),
    /// Left to the OS. A process crash loses nothing that `append` returned;
    /// a power loss may lose the last seconds.
    Never,
}

/// Settings of one log.
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// Roll to a new segment when the active one would exceed this size.
    pub segment_bytes: u64,
    /// Roll to a new segment at the first append once the active one has
    /// held records this long (`segment.ms`; `None`: never by age). The age
    /// counts from the segment's first append in this process (from the
    /// open for a segment a restart found non-empty).
    pub segment_ms: Option<u64>,
    /// Bytes of records between two sparse index entries.
    pub index_interval_bytes: u64,
    /// When to fsync.
    pub fsync: FsyncPolicy,
    /// Delete oldest segments while the log is larger than this.
    pub retention_bytes: Option<u64>,
    /// Delete oldest segments whose newest record is older than this.
    pub retention_ms: Option<u64>,
    /// On open, check every record of every sealed segment (slower start).
    pub verify_sealed: bool,
    /// The open files of segments, shared by all the logs of a broker
    /// (bounded by `max_open_files`).
    pub files: Arc<FileCache>,
    /// How the log is compacted (`None`: it is not; see [`super::compact`]).
    pub compaction: Option<CompactionConfig>,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 64 * 1024 * 1024,
            segment_ms: None,
            index_interval_bytes: 4096,
            fsync: FsyncPolicy::Never,
            retention_bytes: None,
            retention_ms: None,
            verify_sealed: false,
            files: Arc::new(FileCache::default()),
            compaction: None,
        }
    }
}

impl LogConfig {
    /// Whether the active segment keeps its files open outside the file
    /// cache: when an fsync is promised, the descriptor that wrote the data
    /// must be the one that fsyncs it (see `super::files`).
    pub fn pins_active(&self) -> bool {
        self.fsync != FsyncPolicy::Never
    }
}

/// Segments are capped so that positions fit the index's u32.
pub const MAX_SEGMENT_BYTES: u64 = 1 << 31;

/// What a read returned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadResult {
    /// Whole records in the stored format; empty at the log end.
    pub records: Vec<u8>,
    /// Oldest stored offset.
    pub log_start: u64,
    /// Next offset to be written.
    pub log_end: u64,
    /// Where the next read goes on: the offset after the last entry (or
    /// record) handed out, or after the entries a [`ReadAs::Records`] read
    /// passed over; the read's offset when it found nothing.
    pub next: u64,
    /// True when `records` holds a Kafka batch entry (never after a
    /// [`ReadAs::Records`] read).
    pub batches: bool,
    /// The aborted transactions among `records` (a `read_committed` read
    /// of entries; see [`Log::read_stable`]).
    pub aborted: Vec<AbortedTxn>,
}

/// A transaction that ended in an abort, in one partition: its producer,
/// the offset of its first batch and of its ABORT marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    /// The producer id.
    pub producer_id: i64,
    /// The offset of its first batch.
    pub first_offset: u64,
    /// The offset of its ABORT marker.
    pub last_offset: u64,
}

/// What a `read_committed` reader may see ([`Log::read_stable`]).
#[derive(Debug, Clone, Copy)]
pub struct Stable<'a> {
    /// The last stable offset: nothing at or past it is served.
    pub end: u64,
    /// The aborted transactions the read may meet.
    pub aborted: &'a [AbortedTxn],
}

impl Stable<'_> {
    /// Everything (`read_uncommitted`).
    pub const ALL: Stable<'static> = Stable {
        end: u64::MAX,
        aborted: &[],
    };

    /// Whether a batch of `producer_id` at `offset` belongs to an aborted transaction.
    pub fn aborts(&self, producer_id: i64, offset: u64) -> bool {
        self.aborted.iter().any(|a| {
            a.producer_id == producer_id && a.first_offset <= offset && offset <= a.last_offset
        })
    }
}

/// Bytes of the whole entries of `entries` (a checked read) that start below `end`.
fn cut_at(entries: &[u8], end: u64) -> usize {
    let mut pos = 0usize;
    while let Some((offset, size, _)) = record::peek_entry(entries, pos) {
        if offset >= end {
            break;
        }
        pos = pos
            .saturating_add(record::RECORD_HEADER_LEN)
            .saturating_add(usize::try_from(size).unwrap_or(usize::MAX))
            .min(entries.len());
    }
    pos
}

/// How a read hands out what it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadAs {
    /// The entries as stored: records and Kafka batch entries (the Kafka
    /// front end serves batches as they are).
    #[default]
    Entries,
    /// Flume records only: the records of Kafka batch entries are read out
    /// of them ([`record::expand`]), and a read whose entries hold no record
    /// (control or empty batches) goes on past them, so a Flume consumer
    /// never sees an empty read before the log end.
    Records,
}

/// The log of one partition.
#[derive(Debug)]
pub struct Log {
    dir: PathBuf,
    config: LogConfig,
    /// Sealed segments, oldest first.
    sealed: Vec<Segment>,
    /// The segment appends go to.
    active: Segment,
    last_sync: Instant,
    /// When the last append was written (`None` until this process appends):
    /// the tail it wrote is in the page cache.
    appended_at: Option<Instant>,
    /// When the active segment got its first record (see `segment_ms`).
    active_since: Option<Instant>,
    dirty: bool,
    /// Why the log stopped taking appends, once a write or fsync failed.
    failed: Option<String>,
    faults: Arc<FaultInjector>,
    /// Where the cleaner's last pass ended (see [`super::compact`]).
    cleaned_to: u64,
    /// The log start a DeleteRecords moved past the first segment's base
    /// (0: none; see [`Log::delete_records`]).
    deleted_to: u64,
}

/// Name of the file holding the offset a DeleteRecords moved the log start to.
pub const LOG_START_FILE: &str = "log-start-offset";

impl Log {
    /// Opens (or creates) the log in `dir`, recovering as documented in
    /// `docs/storage.md`: sealed segments are trusted (or verified with
    /// `verify_sealed`), the active one is scanned from its last index entry
    /// and truncated at the first torn or corrupt record; missing or bad
    /// indexes are rebuilt.
    ///
    /// # Errors
    /// I/O errors, or a directory recovery will not repair.
    pub fn open(dir: &Path, mut config: LogConfig) -> Result<Self, StorageError> {
        config.segment_bytes = config.segment_bytes.clamp(1, MAX_SEGMENT_BYTES);
        config.index_interval_bytes = config.index_interval_bytes.max(1);
        let faults = Arc::new(FaultInjector::default());
        // A new partition directory is made durable at once (rare: topic creation).
        dirs::create_dir_durable(dir)?;
        // A cleaner pass a crash interrupted before its swap: its output goes
        // (the originals are whole; see `install_cleaned` for the swap's order).
        compact::remove_cleaned(dir);
        let cleaned_to = compact::read_checkpoint(dir).unwrap_or(0);
        let deleted_to = dirs::read_optional(&dir.join(LOG_START_FILE))?
            .trim()
            .parse::<u64>()
            .unwrap_or(0);
        let mut bases = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io_err("list", dir))? {
            let entry = entry.map_err(io_err("list", dir))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if let Some(stem) = name.strip_suffix(".log") {
                match stem.parse::<u64>() {
                    Ok(base) if stem.len() == 20 => bases.push(base),
                    _ => {
                        tracing::warn!(file = %entry.path().display(), "ignoring a file that is not a segment")
                    }
                }
            } else if name.ends_with(".index") {
                let stem = name.trim_end_matches(".index");
                if !dir.join(format!("{stem}.log")).exists() {
                    tracing::info!(file = %entry.path().display(), "removing an index without its segment");
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        bases.sort_unstable();
        let mut segments = Vec::with_capacity(bases.len().max(1));
        for (i, &base) in bases.iter().enumerate() {
            let next_base = bases.get(i + 1).copied();
            let active = next_base.is_none();
            let seg = Segment::open(
                dir,
                base,
                config.index_interval_bytes,
                active,
                config.verify_sealed && !active,
                next_base,
                Arc::clone(&faults),
                &config.files,
                config.pins_active(),
            )?;
            if let Some(nb) = next_base {
                if seg.next_offset != nb {
                    return Err(StorageError::Inconsistent {
                        path: seg.log_path().to_path_buf(),
                        reason: format!(
                            "segment ends at offset {} but the next segment starts at {nb}",
                            seg.next_offset
                        ),
                    });
                }
            }
            segments.push(seg);
        }
        let active = match segments.pop() {
            Some(a) => a,
            None => {
                let seg = Segment::create(
                    dir,
                    0,
                    config.index_interval_bytes,
                    Arc::clone(&faults),
                    &config.files,
                    config.pins_active(),
                )?;
                if config.fsync != FsyncPolicy::Never {
                    dirs::fsync_dir(dir)?;
                }
                seg
            }
        };
        let active_since = (active.size > segment::FILE_HEADER_LEN).then(Instant::now);
        Ok(Log {
            dir: dir.to_path_buf(),
            config,
            sealed: segments,
            active,
            last_sync: Instant::now(),
            appended_at: None,
            active_since,
            dirty: false,
            failed: None,
            faults,
            cleaned_to,
            deleted_to,
        })
    }

    /// The fault hook of this log (inert until a test arms it).
    pub fn faults(&self) -> &Arc<FaultInjector> {
        &self.faults
    }

    /// True when the active segment has index entries its `.index` file
    /// does not hold yet (see `super::segment::INDEX_WRITE_EVERY`).
    pub fn index_pending(&self) -> bool {
        self.active.index_len() > self.active.index_written()
    }

    /// Writes the active segment's pending index entries (at shutdown, so
    /// the next start does not scan for them).
    pub fn write_index_tail(&mut self) {
        self.active.write_index_tail();
    }

    /// Why the log stopped taking appends, if it did (see the module docs).
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    fn refuse(&self) -> Result<(), StorageError> {
        match &self.failed {
            Some(reason) => Err(StorageError::Failed {
                dir: self.dir.clone(),
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Stops the log after a failed write or fsync: cuts the active segment
    /// back to `mark` (the state before the appends that were not
    /// acknowledged; `None` when every byte written was acknowledged) and
    /// refuses appends from now on. Returns `err` for the caller.
    fn fail_stop(&mut self, mark: Option<segment::Mark>, err: StorageError) -> StorageError {
        let end_before = self.end_offset();
        if let Some(mark) = mark {
            if let Err(e) = self.active.rollback(mark) {
                tracing::error!(dir = %self.dir.display(), error = %e, "could not cut the failed append off the segment; it is not served, and recovery decides at restart");
            }
        }
        tracing::error!(
            dir = %self.dir.display(),
            error = %err,
            end_offset = self.end_offset(),
            dropped_records = end_before.saturating_sub(self.end_offset()),
            "write or fsync failed: the partition takes no appends until the broker restarts"
        );
        if self.failed.is_none() {
            self.failed = Some(err.to_string());
        }
        err
    }

    fn active(&self) -> &Segment {
        &self.active
    }

    fn active_mut(&mut self) -> &mut Segment {
        &mut self.active
    }

    /// Oldest offset served: the first segment's base, or later where a
    /// DeleteRecords moved it (never past the end).
    pub fn start_offset(&self) -> u64 {
        let first = self.sealed.first().map_or(self.active.base, |s| s.base);
        first.max(self.deleted_to.min(self.end_offset()))
    }

    /// Kafka's DeleteRecords: the log start moves to `before` (records
    /// below it are no longer served; the whole segments below it are
    /// deleted at once, the rest of the segment that holds `before` when
    /// retention deletes it). The new start is durable before this returns
    /// (`log-start-offset`, written atomically). Returns the log start.
    ///
    /// # Errors
    /// [`StorageError::OffsetOutOfRange`] past the log end; I/O errors.
    pub fn delete_records(&mut self, before: u64) -> Result<u64, StorageError> {
        let (start, end) = (self.start_offset(), self.end_offset());
        if before > end {
            return Err(StorageError::OffsetOutOfRange {
                requested: before,
                log_start: start,
                log_end: end,
            });
        }
        if before <= start {
            return Ok(start);
        }
        dirs::write_atomic(
            &self.dir.join(LOG_START_FILE),
            format!("{before}\n").as_bytes(),
        )?;
        self.deleted_to = before;
        while self.sealed.first().is_some_and(|s| s.next_offset <= before) {
            let seg = self.sealed.remove(0);
            tracing::info!(segment = %seg.log_path().display(), base = seg.base, next = seg.next_offset, "deleted a segment below the log start (DeleteRecords)");
            seg.delete()?;
        }
        Ok(self.start_offset())
    }

    /// Base offset of the active segment (where the cleaner stops).
    pub fn active_base(&self) -> u64 {
        self.active.base
    }

    /// Offset the next appended record gets.
    pub fn end_offset(&self) -> u64 {
        self.active().next_offset
    }

    /// Total bytes of all segment files.
    pub fn size_bytes(&self) -> u64 {
        self.sealed.iter().map(|s| s.size).sum::<u64>() + self.active.size
    }

    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.sealed.len() + 1
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The settings.
    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Appends a batch of records (the stored format, any offsets) with one
    /// write, assigning consecutive offsets; returns the base offset. Applies
    /// the fsync policy once for the batch.
    ///
    /// # Errors
    /// An invalid batch, or I/O errors (nothing of the batch is kept then).
    pub fn append(&mut self, batch: &mut [u8]) -> Result<u64, StorageError> {
        let info = record::validate_batch(batch, u64::MAX)?;
        self.append_validated(batch, u64::from(info.count), info.max_timestamp)
    }

    /// Appends a batch already checked with `record::validate_batch`.
    ///
    /// # Errors
    /// I/O errors (nothing of the batch is kept then).
    ///
    /// # Errors
    /// [`StorageError::Failed`] once the log has stopped; I/O errors, after
    /// which the log stops (nothing of the batch is kept or served).
    pub fn append_validated(
        &mut self,
        batch: &mut [u8],
        count: u64,
        max_ts: i64,
    ) -> Result<u64, StorageError> {
        self.refuse()?;
        let needs_roll = {
            let a = self.active();
            let aged = match (self.config.segment_ms, self.active_since) {
                (Some(ms), Some(since)) => since.elapsed() >= Duration::from_millis(ms),
                _ => false,
            };
            a.size > segment::FILE_HEADER_LEN
                && (a.size.saturating_add(batch.len() as u64) > self.config.segment_bytes
                    || (a.next_offset - a.base).saturating_add(count) > u64::from(u32::MAX)
                    || aged)
        };
        if needs_roll {
            if let Err(e) = self.roll() {
                // Nothing of this batch was written; what was written before was acknowledged.
                return Err(self.fail_stop(None, e));
            }
        }
        let base = self.end_offset();
        record::assign_offsets(batch, base);
        let mark = self.active().mark();
        if let Err(e) = self.active_mut().append(batch, count, max_ts) {
            return Err(self.fail_stop(Some(mark), e));
        }
        self.dirty = true;
        let now = Instant::now();
        self.appended_at = Some(now);
        self.active_since.get_or_insert(now);
        let due = match self.config.fsync {
            FsyncPolicy::Always => true,
            FsyncPolicy::Interval(d) => self.last_sync.elapsed() >= d,
            FsyncPolicy::Never => false,
        };
        if due {
            if let Err(e) = self.sync_active() {
                // This batch is not acknowledged yet: cut it off. Under the interval
                // policy earlier batches were acknowledged already and stay.
                return Err(self.fail_stop(Some(mark), e));
            }
        }
        Ok(base)
    }

    fn roll(&mut self) -> Result<(), StorageError> {
        let next = self.end_offset();
        // A sealed segment is flushed with the policy's promise: under `Never` the OS
        // writes it back in its own time (an fsync of 64 MiB here would stall every
        // producer of the partition for tens of milliseconds).
        if self.config.fsync != FsyncPolicy::Never {
            self.active_mut().sync_all()?;
        } else {
            self.active_mut().write_index_tail();
        }
        let seg = Segment::create(
            &self.dir,
            next,
            self.config.index_interval_bytes,
            Arc::clone(&self.faults),
            &self.config.files,
            self.config.pins_active(),
        )?;
        if self.config.fsync != FsyncPolicy::Never {
            // The new segment's name must outlive a power loss, or so would its records.
            if let Err(e) = self.fsync_dir() {
                let _ = seg.delete();
                return Err(e);
            }
        }
        let mut old = std::mem::replace(&mut self.active, seg);
        old.seal();
        self.sealed.push(old);
        self.active_since = None;
        Ok(())
    }

    fn fsync_dir(&self) -> Result<(), StorageError> {
        if self.faults.dir_fsync_fault() {
            return Err(io_err("fsync directory", &self.dir)(
                super::fault::injected("directory fsync"),
            ));
        }
        dirs::fsync_dir(&self.dir)
    }

    fn sync_active(&mut self) -> Result<(), StorageError> {
        if self.dirty {
            let started = std::time::Instant::now();
            self.active().sync()?;
            crate::metrics::FSYNC_LATENCY.observe(started.elapsed());
            self.dirty = false;
        }
        self.last_sync = Instant::now();
        Ok(())
    }

    /// fdatasync of the active segment, if anything was written since the last one.
    ///
    /// # Errors
    /// [`StorageError::Failed`] once the log has stopped; a failure the OS
    /// reports, after which the log stops (what was written stays: it was
    /// acknowledged already).
    pub fn sync(&mut self) -> Result<(), StorageError> {
        self.refuse()?;
        if let Err(e) = self.sync_active() {
            return Err(self.fail_stop(None, e));
        }
        Ok(())
    }

    /// Syncs when the interval policy says it is due.
    ///
    /// # Errors
    /// When the OS reports a failure.
    pub fn sync_if_due(&mut self) -> Result<(), StorageError> {
        if let FsyncPolicy::Interval(d) = self.config.fsync {
            if self.failed.is_none() && self.dirty && self.last_sync.elapsed() >= d {
                self.sync()?;
            }
        }
        Ok(())
    }

    /// Reads whole records from `offset`, up to `max_bytes` but at least one
    /// record if one exists there. Reads stay within one segment.
    ///
    /// # Errors
    /// [`StorageError::OffsetOutOfRange`] below the log start or above the
    /// end; [`StorageError::Corrupt`] for a damaged record.
    pub fn read(&self, offset: u64, max_bytes: usize) -> Result<ReadResult, StorageError> {
        let (log_start, log_end) = (self.start_offset(), self.end_offset());
        if offset < log_start || offset > log_end {
            return Err(StorageError::OffsetOutOfRange {
                requested: offset,
                log_start,
                log_end,
            });
        }
        let mut result = ReadResult {
            records: Vec::new(),
            log_start,
            log_end,
            next: offset,
            batches: false,
            aborted: Vec::new(),
        };
        if offset == log_end {
            return Ok(result);
        }
        // Offsets may have gaps: a read at a missing offset starts at the
        // next record, in a later segment when the rest of this one was
        // cleaned away.
        let mut idx = self.sealed.partition_point(|s| s.base <= offset);
        let mut from = offset;
        if idx > 0 && offset < self.active.base {
            idx -= 1;
        } else {
            idx = self.sealed.len();
        }
        while let Some(seg) = self.sealed.get(idx).or(Some(&self.active)) {
            let at = from.max(seg.base);
            if at < seg.next_offset {
                let read = seg.read(at, max_bytes)?;
                if !read.bytes.is_empty() {
                    result.records = read.bytes;
                    result.next = read.next.max(offset);
                    result.batches = read.batches;
                    break;
                }
            }
            if idx >= self.sealed.len() {
                // The active segment: nothing more to read yet.
                break;
            }
            idx += 1;
            from = seg.next_offset;
        }
        Ok(result)
    }

    /// [`Log::read`], handed out as `how` says.
    ///
    /// # Errors
    /// As [`Log::read`]; [`StorageError::Corrupt`] for a batch entry whose
    /// records do not decode.
    pub fn read_as(
        &self,
        offset: u64,
        max_bytes: usize,
        how: ReadAs,
    ) -> Result<ReadResult, StorageError> {
        self.read_stable(offset, max_bytes, how, &Stable::ALL)
    }

    /// [`Log::read_as`] as a `read_committed` reader sees the log: nothing
    /// at or past `stable.end` (the last stable offset), and, read as
    /// records, nothing of the aborted transactions. Read as entries, the
    /// aborted transactions the read meets come back in
    /// [`ReadResult::aborted`] for the reader to drop (as Kafka's fetch
    /// answers them).
    ///
    /// # Errors
    /// As [`Log::read_as`].
    pub fn read_stable(
        &self,
        offset: u64,
        max_bytes: usize,
        how: ReadAs,
        stable: &Stable<'_>,
    ) -> Result<ReadResult, StorageError> {
        let mut at = offset;
        loop {
            if at >= stable.end {
                return Ok(ReadResult {
                    records: Vec::new(),
                    log_start: self.start_offset(),
                    log_end: self.end_offset(),
                    next: offset.max(at.min(stable.end)),
                    batches: false,
                    aborted: Vec::new(),
                });
            }
            let mut r = self.read(at, max_bytes)?;
            if stable.end < r.next {
                // Entries from the last stable offset on are not served yet.
                let cut = cut_at(&r.records, stable.end);
                r.records.truncate(cut);
                r.next = if cut == 0 { at } else { stable.end.min(r.next) };
            }
            let skip = |raw: &record::RawRecord<'_>| {
                raw.batch_header().is_some_and(|h| {
                    h.is_transactional()
                        && !h.is_control()
                        && stable.aborts(h.producer_id, raw.offset)
                })
            };
            if how == ReadAs::Entries || !r.batches {
                if how == ReadAs::Entries && !stable.aborted.is_empty() {
                    r.aborted = stable
                        .aborted
                        .iter()
                        .filter(|a| a.last_offset >= at && a.first_offset < r.next)
                        .copied()
                        .collect();
                }
                return Ok(r);
            }
            let e = record::expand_filtered(
                &r.records,
                at,
                max_bytes,
                super::MAX_BATCH_DECODED_BYTES,
                &skip,
            )
            .map_err(|e| StorageError::Corrupt {
                segment: self.dir.clone(),
                offset: at,
                position: 0,
                reason: e.to_string(),
            })?;
            if e.count > 0 || e.next >= r.log_end.min(stable.end) || e.next <= at {
                let next = e.next.max(offset);
                let records = match e.records {
                    std::borrow::Cow::Borrowed(b) if b.len() == r.records.len() => None,
                    other => Some(other.into_owned()),
                };
                return Ok(ReadResult {
                    records: records.unwrap_or(r.records),
                    next,
                    log_start: r.log_start,
                    log_end: r.log_end,
                    batches: false,
                    aborted: Vec::new(),
                });
            }
            // Only control, empty or aborted batches: go on after them.
            at = e.next;
        }
    }

    /// True when [`Log::read`] of `offset` touches only the last `window`
    /// bytes of the active segment (whatever its `max_bytes`: a read ends at
    /// the segment's end) and this process appended there within `fresh`:
    /// the bytes were written moments ago and are in the page cache, so the
    /// read costs a memory copy, not a disk access (a consumer at the tail).
    /// Decided from memory (the sparse index), without I/O.
    pub fn is_hot(&self, offset: u64, window: u64, fresh: Duration) -> bool {
        let a = &self.active;
        if offset < a.base || offset >= a.next_offset {
            return false;
        }
        self.appended_at.is_some_and(|t| t.elapsed() <= fresh)
            && a.size.saturating_sub(a.scan_start(offset)) <= window
    }

    /// The first record whose timestamp is at least `ts`: its offset and
    /// timestamp, or `None` when no stored record is that recent. Timestamps
    /// are the producers' and need not grow with offsets: the answer is the
    /// lowest offset with a timestamp at or after `ts`. Segments whose
    /// newest record is older are skipped when that is known; within a
    /// segment the index's timestamps skip to the last entry before the
    /// answer (see `Segment::find_time`).
    ///
    /// # Errors
    /// I/O errors, or a damaged record on the way.
    pub fn find_time(&self, ts: i64) -> Result<Option<(u64, i64)>, StorageError> {
        let start = self.start_offset();
        for seg in self.sealed.iter().chain(std::iter::once(&self.active)) {
            match seg.find_time(ts)? {
                Some(hit) if hit.0 < start => return self.find_time_from(start, ts),
                Some(hit) => return Ok(Some(hit)),
                None => {}
            }
        }
        Ok(None)
    }

    /// [`Log::find_time`] among the records from `from` on, read in order
    /// (the rare case of a DeleteRecords start inside a segment).
    fn find_time_from(&self, from: u64, ts: i64) -> Result<Option<(u64, i64)>, StorageError> {
        let mut next = from;
        while next < self.end_offset() {
            let r = self.read(next, 1 << 20)?;
            if r.records.is_empty() {
                break;
            }
            for raw in record::RecordIter::new(&r.records).flatten() {
                if raw.timestamp() >= ts {
                    let Some(header) = raw.batch_header() else {
                        return Ok(Some((raw.offset, raw.timestamp())));
                    };
                    // A batch may start below `from`: its first records do not count.
                    let mut found = None;
                    super::batch_records(&raw, &header, &mut |delta, rec| {
                        let at = raw.offset.saturating_add(delta);
                        if found.is_none() && at >= from && rec.timestamp >= ts {
                            found = Some((at, rec.timestamp));
                        }
                    })
                    .map_err(|reason| StorageError::Corrupt {
                        segment: self.dir.clone(),
                        offset: raw.offset,
                        position: 0,
                        reason,
                    })?;
                    if found.is_some() {
                        return Ok(found);
                    }
                }
                next = raw.last_offset() + 1;
            }
        }
        Ok(None)
    }

    /// Changes the settings that can change while the log is open: retention
    /// (applied at the next maintenance pass) and the segment size (applied
    /// at the next roll).
    pub fn set_limits(
        &mut self,
        retention_bytes: Option<u64>,
        retention_ms: Option<u64>,
        segment_bytes: u64,
        segment_ms: Option<u64>,
    ) {
        self.config.retention_bytes = retention_bytes;
        self.config.retention_ms = retention_ms;
        self.config.segment_bytes = segment_bytes.clamp(1, MAX_SEGMENT_BYTES);
        self.config.segment_ms = segment_ms;
    }

    /// Changes how the log is compacted (see [`super::compact`]).
    pub fn set_compaction(&mut self, compaction: Option<CompactionConfig>) {
        self.config.compaction = compaction;
    }

    /// Closes every cached segment file (before the log's directory is
    /// deleted: the descriptors would otherwise hold the space until the
    /// cache evicted them).
    pub fn close_files(&self) {
        for seg in self.sealed.iter().chain(std::iter::once(&self.active)) {
            seg.close_files();
        }
    }

    /// Applies retention by size and age; returns how many segments went.
    /// The active segment is never deleted.
    ///
    /// # Errors
    /// I/O errors while reading timestamps or deleting files.
    pub fn enforce_retention(&mut self, now_ms: i64) -> Result<usize, StorageError> {
        let mut removed = 0;
        while !self.sealed.is_empty() {
            let over_size = self
                .config
                .retention_bytes
                .is_some_and(|limit| self.size_bytes() > limit);
            let too_old = match self.config.retention_ms {
                Some(ms) => match self.sealed[0].max_timestamp()? {
                    Some(ts) => ts < now_ms.saturating_sub(i64::try_from(ms).unwrap_or(i64::MAX)),
                    None => false,
                },
                None => false,
            };
            if !(over_size || too_old) {
                break;
            }
            let seg = self.sealed.remove(0);
            tracing::info!(segment = %seg.log_path().display(), base = seg.base, next = seg.next_offset, "retention deleted a segment");
            seg.delete()?;
            removed += 1;
        }
        Ok(removed)
    }

    /// Where the cleaner's last pass ended (0 before the first).
    pub fn cleaned_to(&self) -> u64 {
        self.cleaned_to
    }

    /// The share of the sealed segments' bytes the cleaner has not seen
    /// (0 when there is nothing sealed).
    pub fn dirty_ratio(&self) -> f64 {
        let (mut clean, mut dirty) = (0u64, 0u64);
        for s in &self.sealed {
            if s.next_offset <= self.cleaned_to {
                clean += s.size;
            } else {
                dirty += s.size;
            }
        }
        if clean + dirty == 0 {
            0.0
        } else {
            dirty as f64 / (clean + dirty) as f64
        }
    }

    /// Step 1 of a cleaner pass (see [`super::compact`]): `None` unless the
    /// log is compacted and due (dirty ratio at least the topic's minimum,
    /// or its oldest dirty segment older than `max.compaction.lag.ms`), else
    /// what the pass may rewrite: every sealed segment.
    pub fn clean_plan(&self, now_ms: i64) -> Option<CleanPlan> {
        let config = self.config.compaction?;
        let first_dirty = self
            .sealed
            .iter()
            .find(|s| s.next_offset > self.cleaned_to)?;
        let ratio = self.dirty_ratio();
        let overdue = config.max_lag_ms.is_some_and(|lag| {
            first_dirty.max_timestamp.is_some_and(|ts| {
                ts < now_ms.saturating_sub(i64::try_from(lag).unwrap_or(i64::MAX))
            })
        });
        if ratio < config.min_dirty_ratio && !overdue {
            return None;
        }
        Some(CleanPlan {
            dir: self.dir.clone(),
            segments: self
                .sealed
                .iter()
                .map(|s| PlannedSegment {
                    base: s.base,
                    next_offset: s.next_offset,
                    path: s.log_path().to_path_buf(),
                    size: s.size,
                    max_timestamp: s.max_timestamp,
                })
                .collect(),
            checkpoint: self.cleaned_to,
            index_interval: self.config.index_interval_bytes,
            config,
            dirty_ratio: ratio,
        })
    }

    /// Step 3 of a cleaner pass: each cleaned segment replaces its original
    /// (unless retention deleted that one meanwhile), then the checkpoint
    /// moves. Each swap is crash-safe: the old index goes first (a log
    /// without an index is rebuilt on open), then `rename` puts the cleaned
    /// log in place of the old one in one step, then its index follows; a
    /// crash before the log's rename leaves the original, after it the
    /// cleaned one, and `.cleaned` files left over are removed on open.
    /// Returns the bytes the swap freed.
    ///
    /// # Errors
    /// I/O errors; the segments swapped before it stay swapped (each one is
    /// whole), the others keep their originals.
    pub fn install_cleaned(&mut self, cleaned: Cleaned) -> Result<u64, StorageError> {
        let mut freed = 0u64;
        let mut result = Ok(());
        for c in &cleaned.segments {
            let Some(i) = self
                .sealed
                .iter()
                .position(|s| s.base == c.base && s.size == c.original_size)
            else {
                continue;
            };
            let next_base = self.sealed.get(i + 1).map_or(self.active.base, |s| s.base);
            match self.swap_one(i, c, next_base) {
                Ok(f) => freed += f,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        compact::remove_cleaned(&self.dir);
        result?;
        compact::write_checkpoint(&self.dir, cleaned.checkpoint)?;
        self.cleaned_to = cleaned.checkpoint;
        Ok(freed)
    }

    fn swap_one(
        &mut self,
        i: usize,
        c: &compact::CleanedSegment,
        next_base: u64,
    ) -> Result<u64, StorageError> {
        let log_path = self.dir.join(segment::file_name(c.base, "log"));
        let index_path = self.dir.join(segment::file_name(c.base, "index"));
        let cleaned_log = self.dir.join(compact::cleaned_name(c.base, "log"));
        let cleaned_index = self.dir.join(compact::cleaned_name(c.base, "index"));
        self.sealed[i].close_files();
        match std::fs::remove_file(&index_path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("delete", &index_path)(e)),
        }
        self.fsync_dir()?;
        std::fs::rename(&cleaned_log, &log_path).map_err(io_err("rename", &cleaned_log))?;
        std::fs::rename(&cleaned_index, &index_path).map_err(io_err("rename", &cleaned_index))?;
        self.fsync_dir()?;
        let mut seg = Segment::open(
            &self.dir,
            c.base,
            self.config.index_interval_bytes,
            false,
            false,
            Some(next_base),
            Arc::clone(&self.faults),
            &self.config.files,
            false,
        )?;
        seg.max_timestamp = c.max_timestamp;
        let freed = self.sealed[i].size.saturating_sub(seg.size);
        self.sealed[i] = seg;
        Ok(freed)
    }

    /// Fsyncs everything (for a clean shutdown).
    ///
    /// # Errors
    /// When the OS reports a failure.
    pub fn close(mut self) -> Result<(), StorageError> {
        self.sync()?;
        self.active_mut().sync_all()
    }
}

#[cfg(test)]
mod failure_tests;
#[cfg(test)]
mod tests;

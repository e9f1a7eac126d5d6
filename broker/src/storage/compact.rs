//! Log compaction: the cleaner of `compact` topics.
//!
//! A compacted log keeps at least the newest record of every key. A pass
//! over one partition runs in three steps, so that appends and reads wait
//! only for the last, short one:
//!
//! 1. [`super::Log::clean_plan`] (under the log's read lock): whether the
//!    partition is due (its dirty ratio, or its oldest dirty record's age),
//!    and a snapshot of the sealed segments a pass may rewrite. The active
//!    segment is never touched.
//! 2. [`prepare`] (no lock: sealed segments never change): a map from each
//!    key of the dirty part (the records after the last pass's end, the
//!    checkpoint) to its newest offset, bounded by [`CleanerLimits`]; then
//!    every planned segment from the log start to where the map ends is
//!    rewritten to `<base>.log.cleaned` with its index, keeping a record
//!    when no newer record of its key is in the map. Offsets are kept: a
//!    record after a removed one is marked ([`record::ATTR_AFTER_GAP`]) and
//!    its CRC recomputed. A tombstone (null value) the map keeps is removed
//!    once it lies in the part a previous pass cleaned and its timestamp is
//!    `delete.retention.ms` old. Keyless records are kept.
//! 3. [`super::Log::install_cleaned`] (under the write lock): each cleaned
//!    segment replaces its original, crash-safe at every step (see
//!    `install`), and the checkpoint moves to where the map ended.
//!
//! When the map fills, the pass ends there and the next pass goes on from
//! it, so a partition with more keys than the map holds is cleaned in
//! several passes; memory stays within the setting.
//!
//! Kafka batch entries are cleaned record by record as records are: a batch
//! whose records all stay is copied as it is; one that loses some is built
//! again with the rest (same codec, producer id, epoch, base sequence,
//! flags and offset span, so its producer's sequence state is kept); one
//! that loses all is dropped, unless it is a control batch (transaction
//! markers stay) or may be its producer's last batch (no later batch of its
//! producer was seen in the pass): that one stays as an empty batch, as
//! Kafka's cleaner keeps it.

use std::collections::HashMap;
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use flume_protocol::record;

use super::segment::{self, IndexEntry, FILE_HEADER_LEN, INDEX_MAGIC, LOG_MAGIC, NO_TIMESTAMP};
use super::{io_err, StorageError};

/// How a compacted log is cleaned (Kafka's topic configs of these names).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompactionConfig {
    /// `min.compaction.lag.ms`: a segment holding a record younger than
    /// this is not cleaned yet (nor any after it).
    pub min_lag_ms: u64,
    /// `max.compaction.lag.ms`: a partition whose oldest dirty segment is
    /// this old is cleaned whatever its dirty ratio.
    pub max_lag_ms: Option<u64>,
    /// `delete.retention.ms`: how long a tombstone stays after it is cleaned.
    pub delete_retention_ms: u64,
    /// `min.cleanable.dirty.ratio`: clean when the dirty bytes are at least
    /// this share of the cleanable bytes.
    pub min_dirty_ratio: f64,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            min_lag_ms: 0,
            max_lag_ms: None,
            delete_retention_ms: 86_400_000,
            min_dirty_ratio: 0.5,
        }
    }
}

/// The broker-wide bounds of the cleaner.
#[derive(Debug, Clone)]
pub struct CleanerLimits {
    /// Most bytes the key map of one pass may take.
    pub key_map_bytes: usize,
    /// Most bytes a second the cleaner reads and writes (`None`: no limit).
    pub io_bytes_per_sec: Option<u64>,
}

impl Default for CleanerLimits {
    fn default() -> Self {
        CleanerLimits {
            key_map_bytes: 32 * 1024 * 1024,
            io_bytes_per_sec: None,
        }
    }
}

/// The bytes one key of the map costs: its 16-byte hash, the 8-byte
/// offset and the table's control byte.
const MAP_SLOT_BYTES: usize = 16 + 8 + 1;

impl CleanerLimits {
    /// The most keys the map holds within `key_map_bytes`: the table is
    /// allocated once, at the size of the largest power-of-two number of
    /// buckets that fits, filled to 7/8 as hashbrown fills it.
    pub fn max_keys(&self) -> usize {
        let buckets = (self.key_map_bytes / MAP_SLOT_BYTES).max(8);
        let pow2 = if buckets.is_power_of_two() {
            buckets
        } else {
            buckets.next_power_of_two() / 2
        };
        pow2 / 8 * 7
    }
}

/// A sealed segment as the plan saw it.
#[derive(Debug, Clone)]
pub struct PlannedSegment {
    /// Base offset.
    pub base: u64,
    /// The offset after it (the next segment's base).
    pub next_offset: u64,
    /// Its `.log` file.
    pub path: PathBuf,
    /// Its size; a segment of another size at install time is not replaced.
    pub size: u64,
    /// Its newest record's timestamp, when known.
    pub max_timestamp: Option<i64>,
}

/// What a pass will clean, from [`super::Log::clean_plan`].
#[derive(Debug, Clone)]
pub struct CleanPlan {
    /// The partition directory.
    pub dir: PathBuf,
    /// The sealed segments, oldest first, up to the active one.
    pub segments: Vec<PlannedSegment>,
    /// Where the last pass ended: records from here are dirty.
    pub checkpoint: u64,
    /// The log's index interval, for the cleaned segments' indexes.
    pub index_interval: u64,
    /// The topic's settings.
    pub config: CompactionConfig,
    /// The dirty share of the planned bytes when planned.
    pub dirty_ratio: f64,
}

/// One cleaned segment, written next to its original.
#[derive(Debug)]
pub struct CleanedSegment {
    /// Base offset.
    pub base: u64,
    /// The size of the original it replaces.
    pub original_size: u64,
    /// Its newest record's timestamp (`None`: no record is left).
    pub max_timestamp: Option<i64>,
}

/// What [`prepare`] produced, for [`super::Log::install_cleaned`].
#[derive(Debug)]
pub struct Cleaned {
    /// The segments to install, oldest first.
    pub segments: Vec<CleanedSegment>,
    /// The checkpoint once installed: where the key map ended.
    pub checkpoint: u64,
    /// Figures of the pass.
    pub stats: CleanStats,
}

/// Figures of one pass.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CleanStats {
    /// Segments rewritten.
    pub segments: usize,
    /// Bytes of segments read (the map's scan and the rewrite).
    pub bytes_read: u64,
    /// Bytes of the cleaned segments.
    pub bytes_written: u64,
    /// Records the rewrite read.
    pub records_read: u64,
    /// Records the rewrite kept.
    pub records_kept: u64,
    /// Tombstones removed.
    pub tombstones_removed: u64,
    /// Distinct keys in the map.
    pub keys: usize,
}

/// File name of a cleaned segment's log or index before it is installed.
pub fn cleaned_name(base: u64, ext: &str) -> String {
    format!("{}.cleaned", segment::file_name(base, ext))
}

/// Name of the file holding a partition's checkpoint.
pub const CHECKPOINT_FILE: &str = "cleaner.checkpoint";

/// The checkpoint stored in `dir` (`None`: no pass has ended yet, or the
/// file is damaged: then the whole log counts as dirty, which only costs a
/// pass).
pub fn read_checkpoint(dir: &Path) -> Option<u64> {
    let text = super::read_optional(&dir.join(CHECKPOINT_FILE)).ok()?;
    text.trim().strip_prefix("cleaned_to=")?.parse().ok()
}

/// Stores the checkpoint (atomically: a crash leaves the old or the new one).
///
/// # Errors
/// I/O errors.
pub fn write_checkpoint(dir: &Path, offset: u64) -> Result<(), StorageError> {
    super::write_atomic(
        &dir.join(CHECKPOINT_FILE),
        format!("cleaned_to={offset}\n").as_bytes(),
    )
}

/// A 128-bit hash of a key: two SipHash-1-3 runs (the standard library's,
/// fixed keys) over different prefixes. Two keys collide with a chance of
/// about n²/2¹²⁹ for n keys: 10⁹ keys give 10⁻²¹.
fn key_hash(key: &[u8]) -> u128 {
    let half = |salt: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        salt.hash(&mut h);
        key.hash(&mut h);
        h.finish()
    };
    (u128::from(half(0)) << 64) | u128::from(half(1))
}

/// Keeps the cleaner's reads and writes under a rate, by sleeping on the
/// (blocking) thread it runs on.
struct Throttle {
    rate: Option<u64>,
    started: Instant,
    bytes: u64,
}

impl Throttle {
    fn new(rate: Option<u64>) -> Self {
        Throttle {
            rate: rate.filter(|r| *r > 0),
            started: Instant::now(),
            bytes: 0,
        }
    }

    fn account(&mut self, bytes: u64) {
        let Some(rate) = self.rate else { return };
        self.bytes = self.bytes.saturating_add(bytes);
        let due = Duration::from_secs_f64(self.bytes as f64 / rate as f64);
        if let Some(ahead) = due.checked_sub(self.started.elapsed()) {
            std::thread::sleep(ahead);
        }
    }
}

/// What [`for_each_record`] calls with each record and its bytes: `false` stops.
type Visit<'a> = dyn FnMut(&record::RawRecord<'_>, &[u8]) -> Result<bool, StorageError> + 'a;

/// Bytes read from a segment at a time.
const CHUNK: usize = 1 << 20;

/// Calls `visit` with every record of the segment file at `path` (CRC
/// checked, offsets increasing as [`segment::follows`] allows), reading it
/// a chunk at a time. `visit` returns `false` to stop early.
fn for_each_record(
    seg: &PlannedSegment,
    throttle: &mut Throttle,
    stop: &AtomicBool,
    visit: &mut Visit<'_>,
) -> Result<(), StorageError> {
    let file = File::open(&seg.path).map_err(io_err("open", &seg.path))?;
    let size = seg.size;
    let mut pos = FILE_HEADER_LEN;
    let mut next = seg.base;
    let mut buf = Vec::new();
    while pos < size {
        if stop.load(Ordering::Relaxed) {
            return Err(StorageError::Inconsistent {
                path: seg.path.clone(),
                reason: "the cleaner was stopped".into(),
            });
        }
        let want = usize::try_from(size - pos).unwrap_or(usize::MAX).min(CHUNK);
        buf.resize(want, 0);
        file.read_exact_at(&mut buf, pos)
            .map_err(io_err("read", &seg.path))?;
        throttle.account(want as u64);
        let mut at = 0usize;
        while at < buf.len() {
            match record::check_record(&buf, at, u64::MAX) {
                Ok(raw) => {
                    if !segment::follows(&raw, next) {
                        return Err(corrupt(
                            seg,
                            raw.offset,
                            pos + at as u64,
                            "offset out of order",
                        ));
                    }
                    let bytes = &buf[at..at + raw.encoded_len()];
                    if !visit(&raw, bytes)? {
                        return Ok(());
                    }
                    next = raw.last_offset() + 1;
                    at += raw.encoded_len();
                }
                Err(record::RecordError::Torn { needed, .. })
                    if pos
                        .checked_add(at as u64)
                        .and_then(|p| p.checked_add(needed))
                        .is_some_and(|end| end <= size) =>
                {
                    if at == 0 {
                        // One record larger than the chunk: read it whole.
                        buf.resize(usize::try_from(needed).unwrap_or(usize::MAX), 0);
                        file.read_exact_at(&mut buf, pos)
                            .map_err(io_err("read", &seg.path))?;
                        continue;
                    }
                    break;
                }
                Err(e) => return Err(corrupt(seg, next, pos + at as u64, &e.to_string())),
            }
        }
        if at == 0 {
            return Err(corrupt(seg, next, pos, "no whole record where one was due"));
        }
        pos += at as u64;
    }
    Ok(())
}

fn corrupt(seg: &PlannedSegment, offset: u64, position: u64, reason: &str) -> StorageError {
    StorageError::Corrupt {
        segment: seg.path.clone(),
        offset,
        position,
        reason: reason.to_owned(),
    }
}

/// Writes a cleaned segment: `<base>.log.cleaned` and its index
/// `<base>.index.cleaned`, built as the records go (one entry every
/// `index_interval` bytes, as appends place them).
struct CleanedWriter {
    log_path: PathBuf,
    index_path: PathBuf,
    out: BufWriter<File>,
    size: u64,
    base: u64,
    expect: u64,
    entries: Vec<IndexEntry>,
    since_entry: u64,
    index_interval: u64,
    max_ts: i64,
    scratch: Vec<u8>,
}

impl CleanedWriter {
    fn create(dir: &Path, base: u64, index_interval: u64) -> Result<Self, StorageError> {
        let log_path = dir.join(cleaned_name(base, "log"));
        let index_path = dir.join(cleaned_name(base, "index"));
        let file = File::create(&log_path).map_err(io_err("create", &log_path))?;
        let mut out = BufWriter::with_capacity(CHUNK, file);
        out.write_all(&LOG_MAGIC)
            .map_err(io_err("write", &log_path))?;
        Ok(CleanedWriter {
            log_path,
            index_path,
            out,
            size: FILE_HEADER_LEN,
            base,
            expect: base,
            entries: Vec::new(),
            since_entry: 0,
            index_interval,
            max_ts: NO_TIMESTAMP,
            scratch: Vec::new(),
        })
    }

    fn push(&mut self, raw: &record::RawRecord<'_>, bytes: &[u8]) -> Result<(), StorageError> {
        if self.since_entry >= self.index_interval {
            self.entries.push(IndexEntry {
                rel: u32::try_from(raw.offset - self.base).unwrap_or(u32::MAX),
                pos: u32::try_from(self.size).unwrap_or(u32::MAX),
                max_ts_before: self.max_ts,
            });
            self.since_entry = 0;
        }
        let gap = raw.offset != self.expect;
        let marked = raw.attributes() & record::ATTR_AFTER_GAP != 0;
        let write = if gap == marked {
            bytes
        } else {
            self.scratch.clear();
            self.scratch.extend_from_slice(bytes);
            record::set_after_gap(&mut self.scratch, gap);
            &self.scratch
        };
        self.out
            .write_all(write)
            .map_err(io_err("write", &self.log_path))?;
        self.size += bytes.len() as u64;
        self.since_entry += bytes.len() as u64;
        self.expect = raw.last_offset() + 1;
        self.max_ts = self.max_ts.max(raw.timestamp());
        Ok(())
    }

    /// Writes a batch entry built again (`entry`: a whole entry, offset not
    /// yet set), at `offset`.
    fn push_rebuilt(&mut self, offset: u64, entry: &[u8]) -> Result<(), StorageError> {
        let mut e = entry.to_vec();
        record::assign_offsets(&mut e, offset);
        let raw = record::check_record(&e, 0, u64::MAX).map_err(|err| StorageError::Corrupt {
            segment: self.log_path.clone(),
            offset,
            position: self.size,
            reason: format!("a rebuilt batch does not check: {err}"),
        })?;
        let raw = record::RawRecord {
            pos: 0,
            offset: raw.offset,
            payload: raw.payload,
        };
        let bytes = e.clone();
        self.push(&raw, &bytes)
    }

    /// Flushes and fsyncs both files; returns the log's size and newest timestamp.
    fn finish(self) -> Result<(u64, Option<i64>), StorageError> {
        let file = self
            .out
            .into_inner()
            .map_err(|e| io_err("write", &self.log_path)(e.into_error()))?;
        file.sync_all().map_err(io_err("fsync", &self.log_path))?;
        let mut raw = Vec::with_capacity(8 + self.entries.len() * segment::INDEX_ENTRY_LEN);
        raw.extend_from_slice(&INDEX_MAGIC);
        for e in &self.entries {
            e.encode(&mut raw);
        }
        let mut index =
            File::create(&self.index_path).map_err(io_err("create", &self.index_path))?;
        index
            .write_all(&raw)
            .map_err(io_err("write", &self.index_path))?;
        index
            .sync_all()
            .map_err(io_err("fsync", &self.index_path))?;
        let ts = (self.max_ts != NO_TIMESTAMP).then_some(self.max_ts);
        Ok((self.size, ts))
    }
}

/// Step 2 of a pass (see the module docs): builds the key map over the
/// dirty segments and writes the cleaned segments next to the originals.
/// Runs without the log's lock, on a thread that may block; `stop` ends it
/// early (nothing is installed then, and what it wrote is removed).
///
/// # Errors
/// I/O errors or a damaged record; the `.cleaned` files written so far are
/// removed.
pub fn prepare(
    plan: &CleanPlan,
    limits: &CleanerLimits,
    now_ms: i64,
    stop: &AtomicBool,
) -> Result<Option<Cleaned>, StorageError> {
    let mut throttle = Throttle::new(limits.io_bytes_per_sec);
    let mut stats = CleanStats::default();
    let young = now_ms.saturating_sub(i64::try_from(plan.config.min_lag_ms).unwrap_or(i64::MAX));
    // The cleanable part ends at the first segment holding a record younger
    // than min.compaction.lag.ms.
    let mut cleanable = Vec::new();
    for seg in &plan.segments {
        let newest = match seg.max_timestamp {
            Some(ts) => Some(ts),
            None if plan.config.min_lag_ms > 0 => {
                let mut newest = None::<i64>;
                for_each_record(seg, &mut throttle, stop, &mut |raw, _| {
                    newest = Some(newest.map_or(raw.timestamp(), |n| n.max(raw.timestamp())));
                    Ok(true)
                })?;
                stats.bytes_read += seg.size;
                newest
            }
            None => None,
        };
        if plan.config.min_lag_ms > 0 && newest.is_some_and(|ts| ts > young) {
            break;
        }
        cleanable.push(seg);
    }
    let Some(last) = cleanable.last() else {
        return Ok(None);
    };
    let end = last.next_offset;
    if plan.checkpoint >= end {
        return Ok(None);
    }
    // The map: each dirty key's newest offset, up to `map_end` (where the
    // map filled, or the end of the cleanable part).
    let max_keys = limits.max_keys();
    let dirty_span = usize::try_from(end - plan.checkpoint).unwrap_or(usize::MAX);
    let mut map: HashMap<u128, u64> = HashMap::with_capacity(max_keys.min(dirty_span));
    // Each producer's newest batch seen by the map's scan: an emptied batch
    // of a producer with a later one may go (bounded; past the bound, an
    // emptied batch stays, which only keeps a few bytes).
    let mut producers: HashMap<i64, u64> = HashMap::new();
    let mut map_end = end;
    'segments: for seg in cleanable.iter().filter(|s| s.next_offset > plan.checkpoint) {
        let mut full_at = None;
        for_each_record(seg, &mut throttle, stop, &mut |raw, _| {
            if raw.last_offset() < plan.checkpoint {
                return Ok(true);
            }
            let mut add = |at: u64, key: &[u8]| {
                if full_at.is_some() || at < plan.checkpoint {
                    return;
                }
                let h = key_hash(key);
                if map.len() >= max_keys && !map.contains_key(&h) {
                    full_at = Some(at);
                    return;
                }
                map.insert(h, at);
            };
            match raw.batch_header() {
                None => {
                    if let Some((Some(key), _)) = raw.key_value() {
                        add(raw.offset, key);
                    }
                }
                Some(h) => {
                    if h.producer_id >= 0 && producers.len() < MAX_PRODUCERS_SEEN {
                        producers.insert(h.producer_id, raw.offset);
                    }
                    if !h.is_control() {
                        super::batch_records(raw, &h, &mut |delta, r| {
                            if let Some(key) = r.key {
                                add(raw.offset.saturating_add(delta), key);
                            }
                        })
                        .map_err(|e| corrupt(seg, raw.offset, 0, &e))?;
                    }
                }
            }
            Ok(full_at.is_none())
        })?;
        stats.bytes_read += seg.size;
        if let Some(at) = full_at {
            map_end = at;
            break 'segments;
        }
    }
    if map_end <= plan.checkpoint {
        return Ok(None);
    }
    stats.keys = map.len();
    let horizon =
        now_ms.saturating_sub(i64::try_from(plan.config.delete_retention_ms).unwrap_or(i64::MAX));
    let mut cleaned = Vec::new();
    let result = (|| {
        for seg in cleanable.iter().filter(|s| s.base < map_end) {
            let mut w = CleanedWriter::create(&plan.dir, seg.base, plan.index_interval)?;
            let mut push_err = None;
            for_each_record(seg, &mut throttle, stop, &mut |raw, bytes| {
                // Whether the record at `at` stays.
                let mut keeps = |at: u64, key: Option<&[u8]>, tombstone: bool, ts: i64| {
                    stats.records_read += 1;
                    let keep = match key {
                        Some(key) if at < map_end => {
                            let newest = map.get(&key_hash(key)).is_none_or(|&o| at >= o);
                            if newest && tombstone && at < plan.checkpoint && ts < horizon {
                                stats.tombstones_removed += 1;
                                false
                            } else {
                                newest
                            }
                        }
                        _ => true,
                    };
                    if keep {
                        stats.records_kept += 1;
                    }
                    keep
                };
                let pushed = match raw.batch_header() {
                    None => {
                        let (key, tombstone) = match raw.key_value() {
                            Some((key, value)) => (key, value.is_none()),
                            None => (None, false),
                        };
                        if keeps(raw.offset, key, tombstone, raw.timestamp()) {
                            w.push(raw, bytes)
                        } else {
                            Ok(())
                        }
                    }
                    Some(h) if h.is_control() => w.push(raw, bytes),
                    Some(h) => {
                        let last_of_producer = h.producer_id >= 0
                            && producers
                                .get(&h.producer_id)
                                .is_none_or(|&o| o <= raw.offset);
                        match clean_batch(raw, &h, last_of_producer, &mut keeps) {
                            Ok(BatchOutcome::Keep) => w.push(raw, bytes),
                            Ok(BatchOutcome::Drop) => Ok(()),
                            Ok(BatchOutcome::Rebuilt(entry)) => w.push_rebuilt(raw.offset, &entry),
                            Err(e) => Err(corrupt(seg, raw.offset, 0, &e)),
                        }
                    }
                };
                if let Err(e) = pushed {
                    push_err = Some(e);
                    return Ok(false);
                }
                Ok(true)
            })?;
            if let Some(e) = push_err {
                return Err(e);
            }
            let (size, max_timestamp) = w.finish()?;
            throttle.account(size);
            stats.bytes_written += size;
            stats.segments += 1;
            cleaned.push(CleanedSegment {
                base: seg.base,
                original_size: seg.size,
                max_timestamp,
            });
        }
        Ok(())
    })();
    stats.bytes_read += cleaned.iter().map(|c| c.original_size).sum::<u64>();
    match result {
        Ok(()) => Ok(Some(Cleaned {
            segments: cleaned,
            checkpoint: map_end,
            stats,
        })),
        Err(e) => {
            remove_cleaned(&plan.dir);
            Err(e)
        }
    }
}

/// Producers whose newest batch a pass remembers (16 bytes each).
const MAX_PRODUCERS_SEEN: usize = 64 * 1024;

/// What the cleaner does with one Kafka batch entry.
enum BatchOutcome {
    /// Every record stays: the entry is copied as it is.
    Keep,
    /// No record stays and the batch need not: it goes.
    Drop,
    /// Some records stay (or none, for a producer's last batch): the entry
    /// built again with them.
    Rebuilt(Vec<u8>),
}

/// Whether the record at an offset stays: `(offset, key, tombstone, timestamp)`.
type Keeps<'a> = dyn FnMut(u64, Option<&[u8]>, bool, i64) -> bool + 'a;

/// Decides a Kafka batch entry's fate record by record with `keeps(offset,
/// key, tombstone, timestamp)`.
fn clean_batch(
    raw: &record::RawRecord<'_>,
    h: &flume_protocol::kafka_batch::BatchHeader,
    last_of_producer: bool,
    keeps: &mut Keeps<'_>,
) -> Result<BatchOutcome, String> {
    use flume_protocol::kafka_batch::{BatchBuilder, BatchMeta, ATTR_CODEC_MASK};
    let mut b = BatchBuilder::new(Some(h.base_timestamp));
    let mut dropped = 0usize;
    super::batch_records(raw, h, &mut |delta, r| {
        if keeps(
            raw.offset.saturating_add(delta),
            r.key,
            r.value.is_none(),
            r.timestamp,
        ) {
            b.push(
                i32::try_from(delta).unwrap_or(i32::MAX),
                r.timestamp,
                r.key,
                r.value,
                r.headers.iter().copied(),
            );
        } else {
            dropped += 1;
        }
    })?;
    if dropped == 0 {
        return Ok(BatchOutcome::Keep);
    }
    if b.is_empty() && !last_of_producer {
        return Ok(BatchOutcome::Drop);
    }
    let meta = BatchMeta {
        base_offset: 0,
        partition_leader_epoch: h.partition_leader_epoch,
        flags: h.attributes & !ATTR_CODEC_MASK,
        producer_id: h.producer_id,
        producer_epoch: h.producer_epoch,
        base_sequence: h.base_sequence,
        last_offset_delta: Some(h.last_offset_delta),
        max_timestamp: (h.log_append_time() || b.is_empty()).then_some(h.max_timestamp),
        base_timestamp: Some(h.base_timestamp),
    };
    let batch = b
        .finish(&meta, h.compression().map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let mut entry = Vec::with_capacity(batch.len() + 8);
    record::encode_batch_entry(&mut entry, &batch);
    Ok(BatchOutcome::Rebuilt(entry))
}

/// Removes every `.cleaned` file of a partition directory (an unfinished
/// pass: on open, or after a pass failed or was stopped).
pub fn remove_cleaned(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().ends_with(".cleaned") {
            tracing::info!(file = %entry.path().display(), "removing an unfinished cleaned segment");
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests;

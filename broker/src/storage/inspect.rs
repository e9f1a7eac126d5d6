//! Read-only inspection of a data directory: what `flume-cli data check`,
//! `dump` and `usage` show of a stopped broker's files.
//!
//! Nothing here writes. Files are opened read-only; nothing is truncated,
//! rebuilt or created (not even the lock file); the data directory's lock is
//! only tested: a shared, non-blocking `flock` on `<data>/.lock`, released at
//! once, tells whether a broker holds the directory (its PID is read from the
//! file), and [`DataDir::open`] refuses such a directory unless forced, since
//! a running broker appends to its active segments meanwhile.
//!
//! The checks are the ones recovery makes (`docs/storage.md`), applied to
//! every segment rather than only the active one, and reported instead of
//! repaired: each record's size against the file, its CRC and payload
//! structure, increasing offsets from the segment's base up to the next
//! segment's (dense, except after a record marked as following a gap),
//! and the sparse index against the records it points at. Each
//! [`Problem`] names the file, the offset and the byte position.
//!
//! - [`DataDir`]: the directory, its topics and partitions, the offsets and
//!   share-state files.
//! - [`segments`], [`check_partition`]: a partition's segment files, checked.
//! - [`read_records`]: records from an offset, decoded as a consumer gets them.

use std::fs::File;
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use flume_protocol::record::{self, RawRecord, RecordError, RECORD_HEADER_LEN};

use super::dirs::{self, LOCK_FILE, MARKER_FILE, MARKER_TEXT};
use super::segment::{
    file_name, IndexEntry, FILE_HEADER_LEN, INDEX_ENTRY_LEN, INDEX_MAGIC, INDEX_WRITE_EVERY,
    LOG_MAGIC, NO_TIMESTAMP,
};
use super::{io_err, StorageError};

/// One on-disk format: the version written and the versions read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskFormat {
    /// What it is.
    pub name: &'static str,
    /// The version this build writes.
    pub writes: u16,
    /// The versions it reads (older ones converted or rebuilt on open).
    pub reads: &'static [u16],
}

/// The version in a magic-and-version header (its last two bytes).
pub const fn header_version(magic: [u8; 8]) -> u16 {
    u16::from_be_bytes([magic[6], magic[7]])
}

/// The storage formats: the data directory layout, segment logs and indexes.
/// (The committed-offsets file belongs to the coordinator:
/// `crate::disk_formats` lists every format.)
pub fn storage_formats() -> Vec<DiskFormat> {
    vec![
        DiskFormat {
            name: "data directory layout",
            writes: layout_version(),
            reads: &[1],
        },
        DiskFormat {
            name: "segment log (.log)",
            writes: header_version(LOG_MAGIC),
            // Version 1 segments hold records only; version 2 adds Kafka batches.
            reads: &[1, 2],
        },
        DiskFormat {
            name: "segment index (.index)",
            writes: header_version(INDEX_MAGIC),
            // A version 1 index is rebuilt from its segment on open.
            reads: &[1, 2],
        },
    ]
}

/// The layout version the marker file states (`... layout N`).
fn layout_version() -> u16 {
    std::str::from_utf8(MARKER_TEXT)
        .ok()
        .and_then(|t| t.trim().rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// A record error as the report says it (positions are given separately).
pub fn describe_record_error(e: &RecordError) -> String {
    match e {
        RecordError::Torn {
            needed, available, ..
        } => format!("torn record: it needs {needed} bytes, {available} remain"),
        RecordError::Corrupt {
            expected, actual, ..
        } => format!("CRC mismatch: stored {expected:#010x}, the payload's is {actual:#010x}"),
        RecordError::Malformed { .. } => "malformed payload (its fields do not add up)".to_owned(),
        other => other.to_string(),
    }
}

/// Something wrong in a file, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file.
    pub file: PathBuf,
    /// The record offset concerned, when there is one.
    pub offset: Option<u64>,
    /// The byte position in `file`, when there is one.
    pub position: Option<u64>,
    /// What is wrong.
    pub what: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(o) = self.offset {
            write!(f, ": offset {o}")?;
        }
        if let Some(p) = self.position {
            write!(f, ": byte {p}")?;
        }
        write!(f, ": {}", self.what)
    }
}

fn problem(file: &Path, offset: Option<u64>, position: Option<u64>, what: String) -> Problem {
    Problem {
        file: file.to_path_buf(),
        offset,
        position,
        what,
    }
}

/// A data directory opened for reading.
#[derive(Debug)]
pub struct DataDir {
    dir: PathBuf,
    holder: Option<Option<u32>>,
}

/// One partition's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionDir {
    /// Its topic.
    pub topic: String,
    /// Its number.
    pub partition: u32,
    /// `<data>/<topic>/partition-<n>`.
    pub dir: PathBuf,
}

impl DataDir {
    /// Opens `dir` for reading: it must exist and be a Flume data directory.
    /// A directory a broker holds is refused, naming its PID, unless `force`
    /// ([`DataDir::holder`] then says who holds it).
    ///
    /// # Errors
    /// [`StorageError::DataDirLocked`] while a broker holds it,
    /// [`StorageError::Inconsistent`] for a path that is not a directory or a
    /// directory that is not Flume's, I/O errors.
    pub fn open(dir: &Path, force: bool) -> Result<DataDir, StorageError> {
        let meta = std::fs::metadata(dir).map_err(io_err("open", dir))?;
        if !meta.is_dir() {
            return Err(StorageError::Inconsistent {
                path: dir.to_path_buf(),
                reason: "not a directory".into(),
            });
        }
        if !dir.join(MARKER_FILE).is_file() {
            if let Some(entry) = dirs::foreign_entry(dir)? {
                return Err(StorageError::Inconsistent {
                    path: dir.to_path_buf(),
                    reason: format!(
                        "not a Flume data directory (no {MARKER_FILE}, no topic, no __consumer_offsets; it holds {entry:?})"
                    ),
                });
            }
        }
        let holder = lock_holder(dir)?;
        if let (Some(pid), false) = (holder, force) {
            return Err(StorageError::DataDirLocked {
                dir: dir.to_path_buf(),
                holder_pid: pid,
            });
        }
        Ok(DataDir {
            dir: dir.to_path_buf(),
            holder,
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// `Some(pid)` when a broker held the directory at open (the PID when
    /// its lock file names one).
    pub fn holder(&self) -> Option<Option<u32>> {
        self.holder
    }

    /// What the marker file says, when it differs from what this build
    /// writes (`None`: as expected, or no marker: a directory from before it).
    pub fn marker_problem(&self) -> Option<Problem> {
        let path = self.dir.join(MARKER_FILE);
        let text = std::fs::read(&path).ok()?;
        (text != MARKER_TEXT).then(|| {
            problem(
                &path,
                None,
                None,
                format!(
                    "marker reads {:?}, this build reads layout {}",
                    String::from_utf8_lossy(&text).trim(),
                    layout_version()
                ),
            )
        })
    }

    /// Every partition of every topic (a directory with `topic.conf` and a
    /// name that does not start with `__` or `.`), by topic and number.
    ///
    /// # Errors
    /// I/O errors listing the directories.
    pub fn partitions(&self) -> Result<Vec<PartitionDir>, StorageError> {
        let mut out = Vec::new();
        for topic in self.topics()? {
            let tdir = self.dir.join(&topic);
            for entry in std::fs::read_dir(&tdir).map_err(io_err("list", &tdir))? {
                let entry = entry.map_err(io_err("list", &tdir))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                let Some(n) = name.strip_prefix("partition-") else {
                    continue;
                };
                if let (Ok(partition), true) = (n.parse::<u32>(), entry.path().is_dir()) {
                    out.push(PartitionDir {
                        topic: topic.clone(),
                        partition,
                        dir: entry.path(),
                    });
                }
            }
        }
        out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(out)
    }

    /// The topics' names, sorted.
    ///
    /// # Errors
    /// I/O errors listing the directory.
    pub fn topics(&self) -> Result<Vec<String>, StorageError> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(io_err("list", &self.dir))? {
            let entry = entry.map_err(io_err("list", &self.dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if !name.starts_with("__")
                && !name.starts_with('.')
                && path.is_dir()
                && path.join("topic.conf").is_file()
            {
                out.push(name);
            }
        }
        out.sort();
        Ok(out)
    }

    /// One partition's directory.
    ///
    /// # Errors
    /// [`StorageError::Inconsistent`] when the topic or partition is not there.
    pub fn partition(&self, topic: &str, partition: u32) -> Result<PartitionDir, StorageError> {
        let tdir = self.dir.join(topic);
        if topic.starts_with("__") || !tdir.join("topic.conf").is_file() {
            return Err(StorageError::Inconsistent {
                path: tdir,
                reason: format!("no topic {topic} in this data directory"),
            });
        }
        let dir = tdir.join(format!("partition-{partition}"));
        if !dir.is_dir() {
            return Err(StorageError::Inconsistent {
                path: dir,
                reason: format!("topic {topic} has no partition {partition}"),
            });
        }
        Ok(PartitionDir {
            topic: topic.to_owned(),
            partition,
            dir,
        })
    }

    /// The committed-offsets file (which may not exist).
    pub fn offsets_file(&self) -> PathBuf {
        self.dir.join("__consumer_offsets").join("offsets.log")
    }

    /// The share-group state file (which may not exist).
    pub fn share_state_file(&self) -> PathBuf {
        self.dir.join("__share_state").join("share.log")
    }
}

/// Whether a broker holds `dir`'s lock: `Some(its PID, if the file names
/// one)`. Tests with a shared non-blocking lock, released at once; a missing
/// lock file means no broker (and is not created).
fn lock_holder(dir: &Path) -> Result<Option<Option<u32>>, StorageError> {
    let path = dir.join(LOCK_FILE);
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("open", &path)(e)),
    };
    use rustix::fs::{flock, FlockOperation};
    match flock(&file, FlockOperation::NonBlockingLockShared) {
        Ok(()) => {
            let _ = flock(&file, FlockOperation::Unlock);
            Ok(None)
        }
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            Ok(Some(text.trim().parse().ok()))
        }
        Err(e) => Err(io_err("lock", &path)(e.into())),
    }
}

/// A segment's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentFiles {
    /// Its base offset (from the file name).
    pub base: u64,
    /// The `.log` file.
    pub log: PathBuf,
    /// Its size.
    pub log_bytes: u64,
    /// The `.index` file.
    pub index: PathBuf,
    /// Its size, `None` when it is missing.
    pub index_bytes: Option<u64>,
}

/// A partition's segments, oldest first, and the names of other files in
/// its directory (an index without its log, anything else).
///
/// # Errors
/// I/O errors listing the directory.
pub fn segments(dir: &Path) -> Result<(Vec<SegmentFiles>, Vec<String>), StorageError> {
    let mut bases = Vec::new();
    let mut others = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err("list", dir))? {
        let entry = entry.map_err(io_err("list", dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let stem_of = |ext: &str| {
            name.strip_suffix(ext)
                .filter(|s| s.len() == 20)
                .and_then(|s| s.parse::<u64>().ok())
        };
        if let Some(base) = stem_of(".log") {
            bases.push(base);
        } else if stem_of(".index").is_some_and(|b| !dir.join(file_name(b, "log")).exists()) {
            others.push(format!("{name} (an index without its segment)"));
        } else if stem_of(".index").is_none()
            && name != super::compact::CHECKPOINT_FILE
            && name != super::log::LOG_START_FILE
        {
            others.push(name);
        }
    }
    bases.sort_unstable();
    others.sort();
    let mut out = Vec::with_capacity(bases.len());
    for base in bases {
        let log = dir.join(file_name(base, "log"));
        let index = dir.join(file_name(base, "index"));
        let log_bytes = std::fs::metadata(&log).map_err(io_err("stat", &log))?.len();
        let index_bytes = std::fs::metadata(&index).ok().map(|m| m.len());
        out.push(SegmentFiles {
            base,
            log,
            log_bytes,
            index,
            index_bytes,
        });
    }
    Ok((out, others))
}

/// Why a walk over a `.log` file stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    /// At the end of the file, after whole records.
    Clean,
    /// The visitor asked to stop.
    Stopped,
    /// At a record that runs past the end of the file.
    Torn {
        position: u64,
        offset: u64,
        needed: u64,
        available: u64,
    },
    /// At a record that is damaged.
    Bad {
        position: u64,
        offset: u64,
        reason: String,
    },
}

/// Bytes read at a time.
const CHUNK: u64 = 1 << 20;

/// What [`walk`] calls with each record: its position, the record, its bytes.
type Visit<'a> = dyn FnMut(u64, &RawRecord<'_>, &[u8]) -> ControlFlow<()> + 'a;

/// Walks the records of `file` from byte `start` (a record boundary whose
/// Checks what an entry holds: a record's key, value and headers add up; a
/// Kafka batch entry is a whole batch (its own CRC-32C) whose records decode.
fn check_payload(raw: &RawRecord<'_>, bytes: &[u8]) -> Result<(), String> {
    let Some(header) = raw.batch_header() else {
        return record::decode_all(&Bytes::copy_from_slice(bytes))
            .map(|_| ())
            .map_err(|_| "malformed payload (its key, value or headers do not add up)".into());
    };
    let mut whole = raw.kafka_prefix().to_vec();
    whole.extend_from_slice(raw.kafka_body());
    flume_protocol::kafka_batch::check(&whole).map_err(|e| format!("Kafka batch: {e}"))?;
    super::batch_records(raw, &header, &mut |_, _| {})
        .map_err(|e| format!("Kafka batch records: {e}"))
}

/// record has offset `first`), checking each one's size against the file,
/// its CRC and that offsets increase by one (or jump, after a gap the record
/// is marked with); `visit` sees each with its position
/// and whole bytes. Lengths from disk are checked against the file before
/// anything is allocated for them.
fn walk(
    file: &File,
    path: &Path,
    size: u64,
    start: u64,
    first: u64,
    visit: &mut Visit<'_>,
) -> Result<(End, u64), StorageError> {
    let mut pos = start;
    let mut next = first;
    while pos < size {
        let want = CHUNK.min(size - pos);
        let mut buf = vec![0u8; usize::try_from(want).unwrap_or(usize::MAX)];
        file.read_exact_at(&mut buf, pos)
            .map_err(io_err("read", path))?;
        let mut at = 0usize;
        while at < buf.len() {
            let here = pos + at as u64;
            match record::check_record(&buf, at, u64::MAX) {
                Ok(raw) => {
                    if !super::segment::follows(&raw, next) {
                        return Ok((
                            End::Bad {
                                position: here,
                                offset: next,
                                reason: format!(
                                    "record has offset {}, expected {next}{}",
                                    raw.offset,
                                    if raw.offset > next {
                                        " (a gap not marked as one)"
                                    } else {
                                        ""
                                    }
                                ),
                            },
                            next,
                        ));
                    }
                    next = raw.offset;
                    let len = raw.encoded_len();
                    let bytes = buf.get(at..at + len).unwrap_or_default();
                    if let Err(reason) = check_payload(&raw, bytes) {
                        return Ok((
                            End::Bad {
                                position: here,
                                offset: next,
                                reason,
                            },
                            next,
                        ));
                    }
                    if visit(here, &raw, bytes).is_break() {
                        return Ok((End::Stopped, raw.last_offset() + 1));
                    }
                    at += len;
                    next = raw.last_offset() + 1;
                }
                Err(RecordError::Torn { needed, .. }) => {
                    let fits = here.checked_add(needed).is_some_and(|e| e <= size);
                    if !fits {
                        return Ok((
                            End::Torn {
                                position: here,
                                offset: next,
                                needed,
                                available: size - here,
                            },
                            next,
                        ));
                    }
                    if at > 0 {
                        break; // continues past this chunk: read again from it
                    }
                    // One record larger than the chunk: read it whole.
                    buf = vec![0u8; usize::try_from(needed).unwrap_or(usize::MAX)];
                    file.read_exact_at(&mut buf, here)
                        .map_err(io_err("read", path))?;
                }
                Err(e) => {
                    return Ok((
                        End::Bad {
                            position: here,
                            offset: next,
                            reason: describe_record_error(&e),
                        },
                        next,
                    ))
                }
            }
        }
        pos += at as u64;
    }
    Ok((End::Clean, next))
}

/// What the `.index` file holds, read without trusting it.
#[derive(Debug, Default)]
struct IndexFile {
    entries: Vec<IndexEntry>,
    problems: Vec<Problem>,
    notes: Vec<String>,
    /// Entries are worth checking against the log (a version 2 index).
    usable: bool,
}

fn read_index(seg: &SegmentFiles) -> Result<IndexFile, StorageError> {
    let mut out = IndexFile::default();
    let path = &seg.index;
    let raw = match std::fs::read(path) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            out.notes.push(
                "no index file: the broker rebuilds it from the log at its next start".into(),
            );
            return Ok(out);
        }
        Err(e) => return Err(io_err("read", path)(e)),
    };
    let Some(magic) = raw.get(..8) else {
        out.problems.push(problem(
            path,
            None,
            Some(0),
            format!(
                "index is {} bytes, shorter than its 8-byte header",
                raw.len()
            ),
        ));
        return Ok(out);
    };
    if magic != INDEX_MAGIC {
        if magic[..6] == INDEX_MAGIC[..6] && magic[6..] == [0, 1] {
            out.notes.push(
                "version 1 index: the broker rebuilds it as version 2 at its next start".into(),
            );
        } else {
            out.problems.push(problem(
                path,
                None,
                Some(0),
                format!("bad magic/version {magic:02x?}, expected {INDEX_MAGIC:02x?}"),
            ));
        }
        return Ok(out);
    }
    out.usable = true;
    let body = raw.get(8..).unwrap_or_default();
    let whole = body.len() / INDEX_ENTRY_LEN * INDEX_ENTRY_LEN;
    if whole != body.len() {
        out.problems.push(problem(
            path,
            None,
            Some(FILE_HEADER_LEN + whole as u64),
            format!(
                "index is truncated: {} bytes of a partial {INDEX_ENTRY_LEN}-byte entry at its end",
                body.len() - whole
            ),
        ));
    }
    for (i, chunk) in body.chunks_exact(INDEX_ENTRY_LEN).enumerate() {
        let Some(e) = IndexEntry::decode(chunk) else {
            break;
        };
        if let Some(last) = out.entries.last() {
            if e.rel <= last.rel || e.pos <= last.pos || e.max_ts_before < last.max_ts_before {
                out.problems.push(problem(
                    path,
                    Some(seg.base + u64::from(e.rel)),
                    Some(FILE_HEADER_LEN + (i * INDEX_ENTRY_LEN) as u64),
                    format!("entry {i} does not follow entry {} (offsets, positions and timestamps must increase)", i - 1),
                ));
                break;
            }
        }
        out.entries.push(e);
    }
    Ok(out)
}

/// A checked segment.
#[derive(Debug, Clone)]
pub struct SegmentReport {
    /// Its files.
    pub files: SegmentFiles,
    /// Whether it is the active (newest) segment of its partition.
    pub active: bool,
    /// Whole, valid records from its start.
    pub records: u64,
    /// The offset after the last valid record.
    pub next_offset: u64,
    /// Byte position where the valid records end.
    pub valid_end: u64,
    /// The largest timestamp of its valid records.
    pub max_timestamp: Option<i64>,
    /// Entries of its index.
    pub index_entries: usize,
    /// What is damaged, with the place.
    pub problems: Vec<Problem>,
    /// What is worth knowing but not damage (a missing index the broker rebuilds).
    pub notes: Vec<String>,
}

/// Checks one segment: every record, then its index against the records.
/// `active`: the newest segment of its partition (a torn tail is how a
/// crash leaves it; the broker cuts it at its next start). `index_interval`:
/// the broker's index spacing (`BrokerConfig::index_interval_bytes`).
///
/// # Errors
/// I/O errors.
pub fn check_segment(
    seg: &SegmentFiles,
    active: bool,
    index_interval: u64,
) -> Result<SegmentReport, StorageError> {
    let mut report = SegmentReport {
        files: seg.clone(),
        active,
        records: 0,
        next_offset: seg.base,
        valid_end: 0,
        max_timestamp: None,
        index_entries: 0,
        problems: Vec::new(),
        notes: Vec::new(),
    };
    let path = &seg.log;
    let file = File::open(path).map_err(io_err("open", path))?;
    let size = file.metadata().map_err(io_err("stat", path))?.len();
    let mut magic = [0u8; 8];
    if size < FILE_HEADER_LEN || file.read_exact_at(&mut magic, 0).is_err() {
        report.problems.push(problem(
            path,
            Some(seg.base),
            Some(0),
            format!("segment is {size} bytes, shorter than its 8-byte header"),
        ));
        return Ok(report);
    }
    if let Err(reason) = super::segment::check_log_magic(&magic) {
        report
            .problems
            .push(problem(path, Some(seg.base), Some(0), reason));
        return Ok(report);
    }
    let index = read_index(seg)?;
    report.index_entries = index.entries.len();
    report.problems.extend(index.problems);
    report.notes.extend(index.notes);
    let entries = if index.usable {
        index.entries
    } else {
        Vec::new()
    };
    // The index checked as the walk passes each record: every entry must be
    // at a record's start with that record's offset, and know the largest
    // timestamp before it; the entries the broker's rule places (one at the
    // first record at least `index_interval` bytes after the last) tell
    // whether entries are missing.
    let mut cursor = 0usize;
    let mut max_ts = NO_TIMESTAMP;
    let mut since_entry = 0u64;
    let mut expected = 0usize;
    let mut follows_rule = true;
    let mut index_problems = Vec::new();
    let base = seg.base;
    let ipath = seg.index.clone();
    let mut visit = |pos: u64, raw: &RawRecord<'_>, _bytes: &[u8]| {
        while let Some(e) = entries.get(cursor).filter(|e| u64::from(e.pos) < pos) {
            index_problems.push(problem(
                &ipath,
                Some(base + u64::from(e.rel)),
                Some(FILE_HEADER_LEN + (cursor * INDEX_ENTRY_LEN) as u64),
                format!(
                    "entry {cursor} points at log byte {}, inside a record",
                    e.pos
                ),
            ));
            cursor += 1;
        }
        let rule_here = since_entry >= index_interval;
        if rule_here {
            expected += 1;
            since_entry = 0;
        }
        match entries.get(cursor).filter(|e| u64::from(e.pos) == pos) {
            Some(e) => {
                if base + u64::from(e.rel) != raw.offset {
                    index_problems.push(problem(
                        &ipath,
                        Some(raw.offset),
                        Some(FILE_HEADER_LEN + (cursor * INDEX_ENTRY_LEN) as u64),
                        format!(
                            "entry {cursor} says offset {} at log byte {pos}, the record there has offset {}",
                            base + u64::from(e.rel),
                            raw.offset
                        ),
                    ));
                }
                if e.max_ts_before < max_ts {
                    index_problems.push(problem(
                        &ipath,
                        Some(raw.offset),
                        Some(FILE_HEADER_LEN + (cursor * INDEX_ENTRY_LEN) as u64),
                        format!(
                            "entry {cursor} says no record before it is newer than {}, one is {max_ts}",
                            e.max_ts_before
                        ),
                    ));
                }
                if !rule_here {
                    follows_rule = false;
                }
                since_entry = 0;
                cursor += 1;
            }
            None if rule_here => follows_rule &= cursor >= entries.len(),
            None => {}
        }
        since_entry += raw.encoded_len() as u64;
        max_ts = max_ts.max(raw.timestamp());
        ControlFlow::Continue(())
    };
    let (end, next) = walk(&file, path, size, FILE_HEADER_LEN, seg.base, &mut visit)?;
    report.next_offset = next;
    report.records = next - seg.base;
    report.max_timestamp = (report.records > 0).then_some(max_ts);
    report.valid_end = match &end {
        End::Torn { position, .. } | End::Bad { position, .. } => *position,
        End::Clean | End::Stopped => size,
    };
    // Past damage nothing is checked: its entries are not judged either.
    let checked_to_end = matches!(end, End::Clean);
    for (i, e) in entries
        .iter()
        .enumerate()
        .skip(cursor)
        .filter(|_| checked_to_end)
    {
        index_problems.push(problem(
            &seg.index,
            Some(seg.base + u64::from(e.rel)),
            Some(FILE_HEADER_LEN + (i * INDEX_ENTRY_LEN) as u64),
            format!(
                "entry {i} points at log byte {}, past the valid records (they end at byte {})",
                e.pos, report.valid_end
            ),
        ));
    }
    // Missing entries at the index's end. The active segment writes its
    // entries INDEX_WRITE_EVERY at a time, so that many may lag; a sealed
    // segment's index is complete. An index laid out by another interval
    // (the setting changed) is not judged by this one.
    let slack = if active { INDEX_WRITE_EVERY } else { 0 };
    if index.usable && follows_rule && expected > entries.len() + slack {
        let at = entries.last().map_or(FILE_HEADER_LEN, |e| u64::from(e.pos));
        index_problems.push(problem(
            &seg.index,
            None,
            Some(FILE_HEADER_LEN + (entries.len() * INDEX_ENTRY_LEN) as u64),
            format!(
                "index is truncated: {} entries, the records call for {expected} (one every {index_interval} bytes); none after log byte {at}",
                entries.len()
            ),
        ));
    }
    report.problems.extend(index_problems);
    match end {
        End::Clean | End::Stopped => {}
        End::Torn {
            position,
            offset,
            needed,
            available,
        } => {
            let what = if active {
                format!("torn tail: the record there needs {needed} bytes, {available} remain (a crash mid-write; the broker cuts the segment here at its next start)")
            } else {
                format!("sealed segment ends in a torn record: it needs {needed} bytes, {available} remain")
            };
            report
                .problems
                .push(problem(path, Some(offset), Some(position), what));
        }
        End::Bad {
            position,
            offset,
            reason,
        } => {
            let then = if active {
                " (the broker cuts the active segment here at its next start, dropping what follows)"
            } else {
                " (a sealed segment: reads of it fail with CORRUPT_RECORD here)"
            };
            report.problems.push(problem(
                path,
                Some(offset),
                Some(position),
                format!("{reason}{then}"),
            ));
        }
    }
    Ok(report)
}

/// A checked partition.
#[derive(Debug, Clone)]
pub struct PartitionReport {
    /// The partition.
    pub partition: PartitionDir,
    /// Its segments, oldest first.
    pub segments: Vec<SegmentReport>,
    /// Problems between segments (offsets that do not meet).
    pub problems: Vec<Problem>,
    /// Other files in its directory.
    pub others: Vec<String>,
}

impl PartitionReport {
    /// Every problem: the segments' and the partition's.
    pub fn all_problems(&self) -> impl Iterator<Item = &Problem> {
        self.segments
            .iter()
            .flat_map(|s| s.problems.iter())
            .chain(self.problems.iter())
    }

    /// The first stored offset.
    pub fn log_start(&self) -> u64 {
        self.segments.first().map_or(0, |s| s.files.base)
    }

    /// The offset after the last valid record.
    pub fn log_end(&self) -> u64 {
        self.segments.last().map_or(0, |s| s.next_offset)
    }
}

/// Checks every segment of a partition, and that each sealed segment ends
/// where the next one starts.
///
/// # Errors
/// I/O errors.
pub fn check_partition(
    p: &PartitionDir,
    index_interval: u64,
) -> Result<PartitionReport, StorageError> {
    let (files, others) = segments(&p.dir)?;
    let mut segments = Vec::with_capacity(files.len());
    let mut problems = Vec::new();
    let last = files.len().saturating_sub(1);
    for (i, f) in files.iter().enumerate() {
        let s = check_segment(f, i == last, index_interval)?;
        if let Some(next) = files.get(i + 1) {
            // A segment may end short of the next one's base (its last
            // records cleaned away), never past it.
            if s.problems.is_empty() && s.next_offset > next.base {
                problems.push(problem(
                    &f.log,
                    Some(s.next_offset),
                    Some(s.valid_end),
                    format!(
                        "segment ends at offset {} but the next segment starts at {} (the broker refuses to open the partition)",
                        s.next_offset, next.base
                    ),
                ));
            }
        }
        segments.push(s);
    }
    Ok(PartitionReport {
        partition: p.clone(),
        segments,
        problems,
        others,
    })
}

/// A partition's log start as the broker serves it: its first segment's
/// base, or the start DeleteRecords moved it to (`log-start-offset`) when
/// that is further (the records below it may still lie in that segment).
///
/// # Errors
/// I/O errors reading `log-start-offset`.
pub fn log_start(dir: &Path, files: &[SegmentFiles]) -> Result<u64, StorageError> {
    let first = files.first().map_or(0, |f| f.base);
    let deleted_to = dirs::read_optional(&dir.join(super::log::LOG_START_FILE))?
        .trim()
        .parse::<u64>()
        .unwrap_or(0);
    Ok(first.max(deleted_to))
}

/// One record as `data dump` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpedRecord {
    /// Byte position in its segment file.
    pub position: u64,
    /// Its `.log` file.
    pub segment: PathBuf,
    /// The size field (payload bytes).
    pub size: u32,
    /// The stored CRC.
    pub crc: u32,
    /// The record, decoded as a consumer decodes it.
    pub record: flume_protocol::Record,
}

/// Hands `visit` the records of a partition from `from` on, oldest first,
/// until it breaks or the records end; returns the offset after the last
/// record handed over. Starts at the index entry before `from` when the
/// index is usable. A torn tail of the active segment ends the records (a
/// consumer never sees it).
///
/// # Errors
/// [`StorageError::Inconsistent`] below the first stored offset,
/// [`StorageError::Corrupt`] at a damaged record (naming the segment, offset
/// and byte position; the records before it were handed over), I/O errors.
pub fn read_records(
    p: &PartitionDir,
    from: u64,
    visit: &mut dyn FnMut(DumpedRecord) -> ControlFlow<()>,
) -> Result<u64, StorageError> {
    let (files, _) = segments(&p.dir)?;
    let log_start = log_start(&p.dir, &files)?;
    if from < log_start {
        return Err(StorageError::Inconsistent {
            path: p.dir.clone(),
            reason: format!("offset {from} is below the log start, {log_start} (retention or DeleteRecords removed the records before it)"),
        });
    }
    let last = files.len().saturating_sub(1);
    let mut next = from;
    for (i, seg) in files.iter().enumerate() {
        if files.get(i + 1).is_some_and(|n| n.base <= from) {
            continue; // entirely before `from`
        }
        let file = File::open(&seg.log).map_err(io_err("open", &seg.log))?;
        let size = file.metadata().map_err(io_err("stat", &seg.log))?.len();
        let (start, first) = start_for(seg, &file, from);
        let mut stopped = false;
        let mut on_record = |pos: u64, raw: &RawRecord<'_>, bytes: &[u8]| {
            if raw.last_offset() < from {
                return ControlFlow::Continue(());
            }
            // A Kafka batch entry gives each of its records (walk checked they decode).
            let Ok(expanded) =
                record::expand(bytes, from, usize::MAX, super::MAX_BATCH_DECODED_BYTES)
            else {
                return ControlFlow::Continue(());
            };
            let Ok(decoded) = record::decode_all(&Bytes::copy_from_slice(&expanded.records)) else {
                return ControlFlow::Continue(());
            };
            let crc = bytes
                .get(12..16)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map_or(0, u32::from_be_bytes);
            for record in decoded {
                let flow = visit(DumpedRecord {
                    position: pos,
                    segment: seg.log.clone(),
                    size: u32::try_from(raw.payload.len()).unwrap_or(u32::MAX),
                    crc,
                    record,
                });
                if flow.is_break() {
                    stopped = true;
                    return flow;
                }
            }
            ControlFlow::Continue(())
        };
        let (end, after) = walk(&file, &seg.log, size, start, first, &mut on_record)?;
        next = next.max(after);
        match end {
            End::Stopped => return Ok(next),
            End::Clean => {}
            End::Torn { .. } if i == last => return Ok(next),
            End::Torn {
                position,
                offset,
                needed,
                available,
            } => {
                return Err(StorageError::Corrupt {
                    segment: seg.log.clone(),
                    offset,
                    position,
                    reason: format!(
                    "torn record in a sealed segment: it needs {needed} bytes, {available} remain"
                ),
                })
            }
            End::Bad {
                position,
                offset,
                reason,
            } => {
                return Err(StorageError::Corrupt {
                    segment: seg.log.clone(),
                    offset,
                    position,
                    reason,
                })
            }
        }
        if stopped {
            return Ok(next);
        }
    }
    Ok(next)
}

/// Where to start reading `seg` for offset `from`: the last index entry at
/// or before it that points at a record header with its offset, else the
/// segment's first record.
fn start_for(seg: &SegmentFiles, log: &File, from: u64) -> (u64, u64) {
    let fallback = (FILE_HEADER_LEN, seg.base);
    let Ok(index) = read_index(seg) else {
        return fallback;
    };
    if !index.usable {
        return fallback;
    }
    let rel = from.saturating_sub(seg.base);
    let upto = index.entries.partition_point(|e| u64::from(e.rel) <= rel);
    for e in index.entries[..upto].iter().rev() {
        let mut h = [0u8; RECORD_HEADER_LEN];
        let at_record = log.read_exact_at(&mut h, u64::from(e.pos)).is_ok()
            && record::peek_header(&h, 0).map(|(o, _)| o) == Some(seg.base + u64::from(e.rel));
        if at_record {
            return (u64::from(e.pos), seg.base + u64::from(e.rel));
        }
    }
    fallback
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{Log, LogConfig};
    use flume_protocol::record::{encode, Header};
    use std::fs::OpenOptions;

    const INTERVAL: u64 = 100;

    /// A partition of `n` records over several segments, closed cleanly.
    fn partition(dir: &Path, n: u64) -> PartitionDir {
        let pdir = dir.join("t").join("partition-0");
        std::fs::create_dir_all(&pdir).unwrap();
        std::fs::write(dir.join("t").join("topic.conf"), b"partitions=1\n").unwrap();
        let mut log = Log::open(
            &pdir,
            LogConfig {
                segment_bytes: 1000,
                index_interval_bytes: INTERVAL,
                ..LogConfig::default()
            },
        )
        .unwrap();
        for i in 0..n {
            let mut b = Vec::new();
            let headers = [Header {
                key: "h".into(),
                value: Some(Bytes::from(format!("{i}"))),
            }];
            let key = format!("k{i}");
            let key = (i % 3 != 0).then_some(key.as_bytes());
            encode(
                &mut b,
                0,
                1000 + i as i64,
                key,
                format!("value-{i}").as_bytes(),
                &headers,
            );
            log.append(&mut b).unwrap();
        }
        log.close().unwrap();
        PartitionDir {
            topic: "t".into(),
            partition: 0,
            dir: pdir,
        }
    }

    fn check(p: &PartitionDir) -> PartitionReport {
        check_partition(p, INTERVAL).unwrap()
    }

    fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push((p.clone(), std::fs::read(&p).unwrap()));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn a_clean_partition_has_no_problem_and_reads_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = partition(dir.path(), 60);
        let before = snapshot(dir.path());
        let r = check(&p);
        assert!(r.segments.len() > 2, "{} segments", r.segments.len());
        assert_eq!(
            r.all_problems().count(),
            0,
            "{:?}",
            r.all_problems().collect::<Vec<_>>()
        );
        assert_eq!((r.log_start(), r.log_end()), (0, 60));
        assert!(r.segments.iter().all(|s| s.index_entries > 0));
        let mut got = Vec::new();
        let end = read_records(&p, 17, &mut |d| {
            got.push(d);
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(end, 60);
        assert_eq!(got.len(), 43);
        assert_eq!(got[0].record.offset, 17);
        assert_eq!(got[0].record.key.as_deref(), Some(&b"k17"[..]));
        assert_eq!(got[1].record.key, None);
        assert_eq!(got[0].record.value, Some(Bytes::from("value-17")));
        assert_eq!(got[0].record.headers[0].value, Some(Bytes::from("17")));
        assert_eq!(got[0].record.timestamp, 1017);
        // Stopping early.
        let mut n = 0;
        read_records(&p, 0, &mut |_| {
            n += 1;
            if n == 5 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
        assert_eq!(n, 5);
        assert!(matches!(
            read_records(&p, 0, &mut |_| ControlFlow::Continue(())),
            Ok(60)
        ));
        assert_eq!(snapshot(dir.path()), before, "nothing written");
    }

    #[test]
    fn a_flipped_byte_in_a_sealed_segment_is_named_by_file_offset_and_position() {
        let dir = tempfile::tempdir().unwrap();
        let p = partition(dir.path(), 60);
        let (files, _) = segments(&p.dir).unwrap();
        let sealed = &files[1];
        // The third record of the second segment: find its position by walking.
        let r = check(&p);
        let seg = &r.segments[1];
        let file = File::open(&sealed.log).unwrap();
        let mut positions = Vec::new();
        walk(
            &file,
            &sealed.log,
            sealed.log_bytes,
            FILE_HEADER_LEN,
            sealed.base,
            &mut |pos, _, _| {
                positions.push(pos);
                ControlFlow::Continue(())
            },
        )
        .unwrap();
        let at = positions[2];
        let mut raw = std::fs::read(&sealed.log).unwrap();
        raw[usize::try_from(at).unwrap() + RECORD_HEADER_LEN + 12] ^= 0x01;
        std::fs::write(&sealed.log, raw).unwrap();
        let r = check(&p);
        let problems: Vec<_> = r.all_problems().collect();
        assert_eq!(problems.len(), 1, "{problems:?}");
        let bad = problems[0];
        assert_eq!(bad.file, sealed.log);
        assert_eq!(bad.offset, Some(seg.files.base + 2));
        assert_eq!(bad.position, Some(at));
        assert!(bad.what.contains("CRC mismatch"), "{bad}");
        // Dumping stops there with the same place.
        let mut seen = 0;
        let err = read_records(&p, 0, &mut |_| {
            seen += 1;
            ControlFlow::Continue(())
        })
        .unwrap_err();
        assert!(
            matches!(err, StorageError::Corrupt { offset, position, .. } if offset == sealed.base + 2 && position == at),
            "{err}"
        );
        assert_eq!(seen, sealed.base + 2);
    }

    #[test]
    fn a_truncated_index_and_a_torn_tail_are_found_where_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let p = partition(dir.path(), 60);
        let (files, _) = segments(&p.dir).unwrap();
        // Index of a sealed segment cut inside its second entry.
        let idx = &files[0].index;
        let cut = FILE_HEADER_LEN + INDEX_ENTRY_LEN as u64 + 5;
        OpenOptions::new()
            .write(true)
            .open(idx)
            .unwrap()
            .set_len(cut)
            .unwrap();
        // The active segment's last record cut short.
        let active = files.last().unwrap();
        let r = check(&p);
        let last_start = {
            let file = File::open(&active.log).unwrap();
            let mut last = 0;
            walk(
                &file,
                &active.log,
                active.log_bytes,
                FILE_HEADER_LEN,
                active.base,
                &mut |pos, _, _| {
                    last = pos;
                    ControlFlow::Continue(())
                },
            )
            .unwrap();
            last
        };
        let end_before = r.log_end();
        OpenOptions::new()
            .write(true)
            .open(&active.log)
            .unwrap()
            .set_len(active.log_bytes - 3)
            .unwrap();
        let r = check(&p);
        let problems: Vec<_> = r.all_problems().collect();
        let partial = problems
            .iter()
            .find(|p| p.file == *idx && p.what.contains("partial"))
            .unwrap_or_else(|| panic!("{problems:?}"));
        assert_eq!(
            partial.position,
            Some(FILE_HEADER_LEN + INDEX_ENTRY_LEN as u64)
        );
        let missing = problems
            .iter()
            .find(|p| p.file == *idx && p.what.contains("call for"))
            .unwrap_or_else(|| panic!("{problems:?}"));
        assert_eq!(
            missing.position,
            Some(FILE_HEADER_LEN + INDEX_ENTRY_LEN as u64)
        );
        let torn = problems
            .iter()
            .find(|p| p.file == active.log)
            .unwrap_or_else(|| panic!("{problems:?}"));
        assert!(torn.what.starts_with("torn tail"), "{torn}");
        assert_eq!(torn.position, Some(last_start));
        assert_eq!(torn.offset, Some(end_before - 1));
        assert_eq!(problems.len(), 3, "{problems:?}");
        // A consumer never sees the torn record: the dump ends before it.
        assert_eq!(
            read_records(&p, 0, &mut |_| ControlFlow::Continue(())).unwrap(),
            end_before - 1
        );
    }

    #[test]
    fn a_held_directory_is_refused_naming_the_holder_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let lock = crate::storage::DataDirLock::acquire(&data, false).unwrap();
        let err = DataDir::open(&data, false).unwrap_err();
        assert!(
            matches!(&err, StorageError::DataDirLocked { holder_pid: Some(pid), .. } if *pid == std::process::id()),
            "{err}"
        );
        let forced = DataDir::open(&data, true).unwrap();
        assert_eq!(forced.holder(), Some(Some(std::process::id())));
        drop(lock);
        let free = DataDir::open(&data, false).unwrap();
        assert_eq!(free.holder(), None);
        assert!(free.partitions().unwrap().is_empty());
        assert!(free.marker_problem().is_none());
        // A missing lock file is not created; a foreign directory is refused.
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("notes.txt"), b"x").unwrap();
        assert!(DataDir::open(&other, false).is_err());
        assert!(!other.join(LOCK_FILE).exists());
        assert!(DataDir::open(&dir.path().join("missing"), false).is_err());
    }

    #[test]
    fn formats_name_their_versions() {
        let f = storage_formats();
        assert!(f.iter().any(|f| f.name.contains(".index") && f.writes == 2));
        assert!(f.iter().any(|f| f.name.contains(".log") && f.writes == 2));
        assert_eq!(layout_version(), 1);
    }
}

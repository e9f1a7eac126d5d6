//! The committed-offset file and the map of live offsets, synchronous:
//! `<data>/__consumer_offsets/offsets.log` (format in the parent module's
//! docs and `docs/storage.md`). [`OffsetStore`] appends commits, replays the
//! file on open (cutting a torn or corrupt tail), converts a version 1 file,
//! and compacts the file when it grows well past its live content.

use crate::clock::Clock;
use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use bytes::BufMut;
use flume_protocol::record::{self, RecordIter};
use flume_protocol::wire::{Reader, WriteExt};
use flume_protocol::ErrorCode;

use crate::error::BrokerError;
use crate::storage::inspect::{describe_record_error, header_version, DiskFormat, Problem};
use crate::storage::segment::{FILE_HEADER_LEN, LOG_MAGIC_V1 as LOG_MAGIC};
use crate::storage::FsyncPolicy;

/// (group, topic, partition).
pub type OffsetKey = (String, String, i32);

/// What is committed for a (group, topic, partition): the next offset to
/// read, and what a Kafka client keeps beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The next offset to read.
    pub offset: i64,
    /// The leader epoch of the record before `offset`, as the client saw it (-1: none).
    pub leader_epoch: i32,
    /// The client's metadata string (at most [`MAX_METADATA_BYTES`]).
    pub metadata: Option<String>,
    /// The protocol type of the group when it committed (`consumer` for
    /// Kafka consumers, `flume` for Flume's groups; empty for a commit from
    /// outside any membership), so a group known only by its offsets is
    /// listed as what it was.
    pub protocol_type: String,
}

impl Committed {
    /// An offset with no epoch and no metadata.
    pub fn at(offset: i64) -> Self {
        Committed {
            offset,
            leader_epoch: -1,
            metadata: None,
            protocol_type: String::new(),
        }
    }
}

/// Most bytes of one partition's commit metadata (Kafka's
/// `offset.metadata.max.bytes`); a longer one is OFFSET_METADATA_TOO_LARGE.
pub const MAX_METADATA_BYTES: usize = 4096;

/// Most bytes of commit metadata the store holds over all entries; a commit
/// that would go past it is refused (INVALID_REQUEST).
pub const MAX_METADATA_TOTAL_BYTES: usize = 64 << 20;

/// Offsets of one commit: (topic, partition, what is committed).
pub type CommitOffsets = Vec<(String, i32, Committed)>;

/// One commit as the store takes it: the group and its offsets.
pub type Commit<'a> = (&'a str, &'a [(String, i32, Committed)]);

/// Magic and version at the start of the offsets file.
pub const OFFSETS_MAGIC: [u8; 8] = *b"FLMOFS\x00\x02";

/// Most commits waiting for the offsets writer; a full queue makes
/// OFFSET_COMMIT wait for room (each waiting commit is a decoded request,
/// already bounded by the frame size and the broker's request budget).
pub const COMMIT_QUEUE_CAPACITY: usize = 1024;

pub(super) type Map = HashMap<OffsetKey, Committed>;

pub(super) fn read_map(m: &RwLock<Map>) -> std::sync::RwLockReadGuard<'_, Map> {
    m.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write_map(m: &RwLock<Map>) -> std::sync::RwLockWriteGuard<'_, Map> {
    m.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Test-only: called just before the offsets file is fsynced; an error is
/// taken as the fsync's failure.
#[cfg(test)]
#[derive(Clone)]
pub(crate) struct FsyncHook(pub(crate) Arc<dyn Fn() -> std::io::Result<()> + Send + Sync>);

#[cfg(test)]
impl std::fmt::Debug for FsyncHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FsyncHook")
    }
}

/// The offset store: the file and the live offsets.
#[derive(Debug)]
pub struct OffsetStore {
    path: PathBuf,
    file: File,
    size: u64,
    pub(super) map: Arc<RwLock<Map>>,
    policy: FsyncPolicy,
    /// Bytes written since the last fsync.
    dirty: bool,
    last_sync: Instant,
    pub(super) syncs: Arc<AtomicU64>,
    compact_min_bytes: u64,
    /// Most (group, topic, partition) entries kept: commits that would add more are refused.
    max_keys: usize,
    /// Bytes of metadata the map holds.
    metadata_bytes: usize,
    /// The time written in each record (the broker's clock; see [`Self::with_clock`]).
    clock: Clock,
    #[cfg(test)]
    pub(super) hook: Option<FsyncHook>,
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> BrokerError {
    move |source| BrokerError::Io { what, source }
}

impl OffsetStore {
    /// Opens (or creates) the store in `dir`; `policy` says when commits are fsynced.
    ///
    /// # Errors
    /// I/O errors, or a file that is not an offsets file.
    pub fn open(dir: &Path, policy: FsyncPolicy) -> Result<Self, BrokerError> {
        crate::storage::create_dir_durable(dir)?;
        let path = dir.join("offsets.log");
        let tmp = dir.join("offsets.log.tmp");
        if tmp.exists() {
            tracing::warn!(file = %tmp.display(), "removing a temp file left by an interrupted offsets compaction");
            std::fs::remove_file(&tmp).map_err(io(format!("remove {}", tmp.display())))?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io(format!("open {}", path.display())))?;
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut raw)
            .map_err(io(format!("read {}", path.display())))?;
        let mut map = HashMap::new();
        let size;
        let mut convert = false;
        if raw.len() < FILE_HEADER_LEN as usize {
            file.set_len(0)
                .map_err(io(format!("truncate {}", path.display())))?;
            file.write_all_at(&OFFSETS_MAGIC, 0)
                .map_err(io(format!("write {}", path.display())))?;
            size = FILE_HEADER_LEN;
        } else {
            let replayed = replay(&raw).map_err(|reason| BrokerError::Io {
                what: format!("open {}", path.display()),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, reason),
            })?;
            convert = replayed.version == 1;
            map = replayed.map;
            size = FILE_HEADER_LEN + replayed.valid as u64;
            if let Some(reason) = replayed.damage {
                let dropped = raw.len() as u64 - size;
                tracing::warn!(file = %path.display(), dropped_bytes = dropped, position = size, %reason, "truncated a torn or corrupt tail of the offsets file");
                file.set_len(size)
                    .map_err(io(format!("truncate {}", path.display())))?;
            }
        }
        let metadata_bytes = map.values().map(metadata_len).sum();
        OffsetStore {
            path,
            file,
            size,
            map: Arc::new(RwLock::new(map)),
            policy,
            dirty: false,
            last_sync: Instant::now(),
            syncs: Arc::new(AtomicU64::new(0)),
            compact_min_bytes: 1 << 20,
            max_keys: 1_000_000,
            metadata_bytes,
            clock: Clock::system(),
            #[cfg(test)]
            hook: None,
        }
        .converted(convert)
    }

    /// Stamps records with `clock`'s wall time from now on (the broker's
    /// injected clock; the system clock otherwise).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// A store opened from a version 1 file, rewritten as version 2 (the
    /// compaction's temp file and rename: a crash leaves one or the other).
    fn converted(mut self, convert: bool) -> Result<Self, BrokerError> {
        if convert {
            tracing::info!(file = %self.path.display(), "rewriting the offsets file in version 2 (commit metadata and leader epochs)");
            self.compact()?;
        }
        Ok(self)
    }

    /// The committed offset (next to read), if any.
    #[cfg(test)]
    pub fn get(&self, group: &str, topic: &str, partition: i32) -> Option<i64> {
        get(&self.map, group, topic, partition)
    }

    /// Every committed offset of a group for a topic.
    #[cfg(test)]
    pub fn for_topic(&self, group: &str, topic: &str) -> Vec<(i32, i64)> {
        for_topic(&self.map, group, topic)
    }

    /// Stores one commit's offsets, with no epoch or metadata (see
    /// [`OffsetStore::commit_batch`]).
    ///
    /// # Errors
    /// As [`OffsetStore::commit_batch`].
    pub fn commit(
        &mut self,
        group: &str,
        offsets: &[(String, i32, i64)],
    ) -> Result<(), BrokerError> {
        let offsets = plain(offsets);
        let mut r = self.commit_batch(&[(group, &offsets)]);
        r.pop().unwrap_or(Ok(()))
    }

    /// What is committed for a (group, topic, partition), if anything.
    #[cfg(test)]
    pub fn get_committed(&self, group: &str, topic: &str, partition: i32) -> Option<Committed> {
        get_committed(&self.map, group, topic, partition)
    }

    /// Stores several commits with one write and, as the fsync policy says,
    /// one fsync; returns one result per commit, in order. A commit that
    /// would take the store past its entry limit or its metadata limit is
    /// refused (INVALID_REQUEST) and the others go ahead. After a failed write or fsync the file is cut
    /// back to its previous size and none of the batch is applied.
    pub fn commit_batch(&mut self, commits: &[Commit<'_>]) -> Vec<Result<(), BrokerError>> {
        let mut results: Vec<Result<(), BrokerError>> = Vec::with_capacity(commits.len());
        let mut buf = Vec::new();
        let ts = self.clock.wall_ms();
        {
            let map = read_map(&self.map);
            let mut added: HashSet<OffsetKey> = HashSet::new();
            let mut metadata = self.metadata_bytes;
            for (group, offsets) in commits {
                let new: Vec<OffsetKey> = offsets
                    .iter()
                    .map(|(t, p, _)| ((*group).to_owned(), t.clone(), *p))
                    .filter(|k| !map.contains_key(k) && !added.contains(k))
                    .collect();
                let held = map.len() + added.len();
                if held + new.len() > self.max_keys {
                    results.push(Err(BrokerError::code_for(
                        ErrorCode::InvalidRequest,
                        format!(
                            "the offset store holds {held} (group, topic, partition) entries, the limit is {}",
                            self.max_keys
                        ),
                    )));
                    continue;
                }
                // Metadata replaced by this commit frees its bytes (an estimate
                // within a batch: what an earlier commit of it adds is not freed).
                let freed: usize = offsets
                    .iter()
                    .filter_map(|(t, p, _)| map.get(&((*group).to_owned(), t.clone(), *p)))
                    .map(metadata_len)
                    .sum();
                let adds: usize = offsets.iter().map(|(_, _, c)| metadata_len(c)).sum();
                let after = (metadata + adds).saturating_sub(freed);
                if adds > freed && after > MAX_METADATA_TOTAL_BYTES {
                    results.push(Err(BrokerError::code_for(
                        ErrorCode::InvalidRequest,
                        format!(
                            "the offset store holds {metadata} bytes of commit metadata, the limit is {MAX_METADATA_TOTAL_BYTES}"
                        ),
                    )));
                    continue;
                }
                metadata = after;
                added.extend(new);
                for (topic, partition, c) in *offsets {
                    let value = encode_value(topic, *partition, c);
                    record::encode(&mut buf, 0, ts, Some(group.as_bytes()), &value, &[]);
                }
                results.push(Ok(()));
            }
        }
        if buf.is_empty() {
            return results;
        }
        if let Err(e) = self.write_durably(&buf) {
            let msg = e.to_string();
            for r in &mut results {
                if r.is_ok() {
                    *r = Err(BrokerError::code_for(ErrorCode::StorageError, msg.clone()));
                }
            }
            return results;
        }
        {
            let mut map = write_map(&self.map);
            for ((group, offsets), r) in commits.iter().zip(&results) {
                if r.is_ok() {
                    for (topic, partition, c) in *offsets {
                        let key = ((*group).to_owned(), topic.clone(), *partition);
                        self.metadata_bytes += metadata_len(c);
                        if let Some(old) = map.insert(key, c.clone()) {
                            self.metadata_bytes =
                                self.metadata_bytes.saturating_sub(metadata_len(&old));
                        }
                    }
                }
            }
        }
        let live = read_map(&self.map).len() as u64;
        if self.size > self.compact_min_bytes.max(live * 256) {
            if let Err(e) = self.compact() {
                tracing::warn!(error = %e, "offsets compaction failed; the log keeps growing until it succeeds");
            }
        }
        results
    }

    /// Appends `buf` and applies the fsync policy; on failure cuts the file back.
    fn write_durably(&mut self, buf: &[u8]) -> Result<(), BrokerError> {
        let written = self
            .file
            .write_all_at(buf, self.size)
            .map_err(io(format!("append to {}", self.path.display())));
        let synced = written.and_then(|()| {
            self.dirty = true;
            match self.policy {
                FsyncPolicy::Always => self.sync(),
                FsyncPolicy::Interval(_) => self.sync_if_due(Instant::now()),
                FsyncPolicy::Never => Ok(()),
            }
        });
        if let Err(e) = synced {
            // Nothing of the batch is acknowledged, so nothing of it may come back on restart.
            if let Err(t) = self.file.set_len(self.size) {
                tracing::error!(file = %self.path.display(), error = %t, "could not cut back a failed offsets write");
            }
            return Err(e);
        }
        self.size += buf.len() as u64;
        Ok(())
    }

    /// Rewrites the file with only the live offsets (temp file, fsync,
    /// rename, fsync of the directory).
    ///
    /// # Errors
    /// I/O errors; the old file stays in place then.
    pub fn compact(&mut self) -> Result<(), BrokerError> {
        self.compact_keeping(&|_| true)
    }

    /// Drops every committed offset `drop` selects, durably: the file is
    /// compacted without them (temp file, fsync, rename, directory fsync)
    /// before they leave the map. Returns how many went.
    ///
    /// # Errors
    /// I/O errors; nothing is dropped then.
    pub fn remove_where(
        &mut self,
        drop: &dyn Fn(&OffsetKey) -> bool,
    ) -> Result<usize, BrokerError> {
        let gone: Vec<OffsetKey> = read_map(&self.map)
            .keys()
            .filter(|k| drop(k))
            .cloned()
            .collect();
        if gone.is_empty() {
            return Ok(0);
        }
        self.compact_keeping(&|k| !drop(k))?;
        let mut map = write_map(&self.map);
        for k in &gone {
            if let Some(old) = map.remove(k) {
                self.metadata_bytes = self.metadata_bytes.saturating_sub(metadata_len(&old));
            }
        }
        Ok(gone.len())
    }

    fn compact_keeping(&mut self, keep: &dyn Fn(&OffsetKey) -> bool) -> Result<(), BrokerError> {
        let tmp = self.path.with_extension("log.tmp");
        let mut buf = Vec::with_capacity(8);
        buf.extend_from_slice(&OFFSETS_MAGIC);
        let ts = self.clock.wall_ms();
        for (key, c) in read_map(&self.map).iter().filter(|(k, _)| keep(k)) {
            let (group, topic, partition) = key;
            let value = encode_value(topic, *partition, c);
            record::encode(&mut buf, 0, ts, Some(group.as_bytes()), &value, &[]);
        }
        let mut f = File::create(&tmp).map_err(io(format!("create {}", tmp.display())))?;
        f.write_all(&buf)
            .map_err(io(format!("write {}", tmp.display())))?;
        f.sync_all()
            .map_err(io(format!("fsync {}", tmp.display())))?;
        std::fs::rename(&tmp, &self.path).map_err(io(format!("rename {}", tmp.display())))?;
        if let Some(dir) = self.path.parent() {
            if let Err(e) = crate::storage::fsync_dir(dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "fsync of the directory after the offsets compaction failed");
            }
        }
        self.file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(io(format!("open {}", self.path.display())))?;
        self.size = buf.len() as u64;
        self.dirty = false;
        Ok(())
    }

    /// Fsyncs the file.
    ///
    /// # Errors
    /// I/O errors.
    pub fn sync(&mut self) -> Result<(), BrokerError> {
        #[cfg(test)]
        if let Some(h) = &self.hook {
            (h.0)().map_err(io(format!("fsync {}", self.path.display())))?;
        }
        self.file
            .sync_data()
            .map_err(io(format!("fsync {}", self.path.display())))?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.dirty = false;
        self.last_sync = Instant::now();
        Ok(())
    }

    /// Under the interval policy, fsyncs if something was written and the
    /// last fsync is at least the interval before `now`.
    ///
    /// # Errors
    /// I/O errors.
    pub fn sync_if_due(&mut self, now: Instant) -> Result<(), BrokerError> {
        if let FsyncPolicy::Interval(d) = self.policy {
            if self.dirty && now.saturating_duration_since(self.last_sync) >= d {
                return self.sync();
            }
        }
        Ok(())
    }

    /// Number of fsyncs of the offsets file so far.
    #[cfg(test)]
    pub fn fsync_count(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    #[cfg(test)]
    fn set_compact_min(&mut self, n: u64) {
        self.compact_min_bytes = n;
    }

    #[cfg(test)]
    fn set_max_keys(&mut self, n: usize) {
        self.max_keys = n;
    }
}

/// Up to `limit` committed offsets, in no particular order.
pub(super) fn entries(map: &RwLock<Map>, limit: usize) -> Vec<(OffsetKey, i64)> {
    map.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .take(limit)
        .map(|(k, c)| (k.clone(), c.offset))
        .collect()
}

pub(super) fn get(map: &RwLock<Map>, group: &str, topic: &str, partition: i32) -> Option<i64> {
    get_committed(map, group, topic, partition).map(|c| c.offset)
}

pub(super) fn get_committed(
    map: &RwLock<Map>,
    group: &str,
    topic: &str,
    partition: i32,
) -> Option<Committed> {
    read_map(map)
        .get(&(group.to_owned(), topic.to_owned(), partition))
        .cloned()
}

pub(super) fn for_topic(map: &RwLock<Map>, group: &str, topic: &str) -> Vec<(i32, i64)> {
    let mut v: Vec<(i32, i64)> = read_map(map)
        .iter()
        .filter(|((g, t, _), _)| g == group && t == topic)
        .map(|((_, _, p), c)| (*p, c.offset))
        .collect();
    v.sort_unstable();
    v
}

/// Offsets of a commit with no epoch or metadata.
fn plain(offsets: &[(String, i32, i64)]) -> Vec<(String, i32, Committed)> {
    offsets
        .iter()
        .map(|(t, p, o)| (t.clone(), *p, Committed::at(*o)))
        .collect()
}

fn metadata_len(c: &Committed) -> usize {
    c.metadata.as_ref().map_or(0, String::len)
}

fn encode_value(topic: &str, partition: i32, c: &Committed) -> Vec<u8> {
    let mut value = Vec::with_capacity(topic.len() + 24 + metadata_len(c));
    value.put_string(topic);
    value.put_i32(partition);
    value.put_i64(c.offset);
    value.put_i32(c.leader_epoch);
    value.put_nullable_bytes(c.metadata.as_deref().map(str::as_bytes));
    value.put_string(&c.protocol_type);
    value
}

/// What the bytes of an offsets file hold.
struct Replay {
    version: u8,
    map: Map,
    records: usize,
    /// Bytes of whole, valid records after the header.
    valid: usize,
    /// Why the records stop before the end, if they do.
    damage: Option<String>,
}

/// Replays an offsets file (its header included, at least 8 bytes): the
/// live offsets of its valid records, and where and why they stop.
///
/// # Errors
/// A file of a newer version, or not an offsets file, as a message.
fn replay(raw: &[u8]) -> Result<Replay, String> {
    let version = match raw.get(..8) {
        Some(m) if *m == OFFSETS_MAGIC => 2,
        Some(m) if *m == LOG_MAGIC => 1,
        Some(m) if m[..6] == OFFSETS_MAGIC[..6] => {
            return Err(format!(
                "offsets file version {} is newer than this broker reads (2): it was written by a newer Flume",
                u16::from_be_bytes([m[6], m[7]])
            ))
        }
        _ => return Err("not a Flume offsets file (bad magic)".into()),
    };
    let body = raw.get(8..).unwrap_or_default();
    let mut out = Replay {
        version,
        map: HashMap::new(),
        records: 0,
        valid: 0,
        damage: None,
    };
    for r in RecordIter::new(body) {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                out.damage = Some(describe_record_error(&e));
                break;
            }
        };
        let Some((k, v)) = decode(&r, version) else {
            out.damage = Some(
                "malformed offset record (its group, topic, partition or offset do not decode)"
                    .into(),
            );
            break;
        };
        out.map.insert(k, v);
        out.records += 1;
        out.valid = r.pos + r.encoded_len();
    }
    Ok(out)
}

/// What `flume-cli data check` reports of the committed-offsets file.
#[derive(Debug, Clone)]
pub struct OffsetsFileReport {
    /// The file.
    pub path: PathBuf,
    /// Its format version (0 when its header cannot be read).
    pub version: u16,
    /// Its size.
    pub bytes: u64,
    /// Valid commit records in it.
    pub records: usize,
    /// The committed offsets it holds (group, topic, partition; the next
    /// offset to read), sorted.
    pub committed: Vec<(OffsetKey, i64)>,
    /// Where and why its valid records stop before its end.
    pub damage: Option<Problem>,
}

/// Reads the committed-offsets file at `path` without changing it (no
/// truncation, no conversion, nothing created): `None` when it does not exist.
///
/// # Errors
/// I/O errors reading it.
pub fn check_offsets_file(path: &Path) -> Result<Option<OffsetsFileReport>, BrokerError> {
    let raw = match std::fs::read(path) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(format!("read {}", path.display()))(e)),
    };
    let mut report = OffsetsFileReport {
        path: path.to_path_buf(),
        version: 0,
        bytes: raw.len() as u64,
        records: 0,
        committed: Vec::new(),
        damage: None,
    };
    let damage = |position: u64, what: String| Problem {
        file: path.to_path_buf(),
        offset: None,
        position: Some(position),
        what,
    };
    if raw.len() < FILE_HEADER_LEN as usize {
        report.damage = Some(damage(
            0,
            format!(
                "{} bytes, shorter than its 8-byte header (the broker starts it again, empty)",
                raw.len()
            ),
        ));
        return Ok(Some(report));
    }
    match replay(&raw) {
        Ok(r) => {
            report.version = u16::from(r.version);
            report.records = r.records;
            let mut committed: Vec<(OffsetKey, i64)> =
                r.map.into_iter().map(|(k, c)| (k, c.offset)).collect();
            committed.sort();
            report.committed = committed;
            if let Some(reason) = r.damage {
                let at = FILE_HEADER_LEN + r.valid as u64;
                report.damage = Some(damage(
                    at,
                    format!("{reason} (the broker cuts the file here at its next start, keeping the commits before it)"),
                ));
            }
        }
        Err(reason) => report.damage = Some(damage(0, reason)),
    }
    Ok(Some(report))
}

/// The committed-offsets file's format.
pub fn offsets_format() -> DiskFormat {
    DiskFormat {
        name: "committed offsets (offsets.log)",
        writes: header_version(OFFSETS_MAGIC),
        // Version 1 is converted on open.
        reads: &[1, 2],
    }
}

/// One record of a file of `version`: its key and what it commits.
fn decode(r: &record::RawRecord<'_>, version: u8) -> Option<(OffsetKey, Committed)> {
    let (key, value) = r.key_value()?;
    let group = String::from_utf8(key?.to_vec()).ok()?;
    let mut rd = Reader::new(value?);
    let topic = rd.string().ok()?;
    let partition = rd.i32().ok()?;
    let mut c = Committed::at(rd.i64().ok()?);
    if version >= 2 {
        c.leader_epoch = rd.i32().ok()?;
        c.metadata = match rd.nullable_bytes().ok()? {
            None => None,
            Some(b) => Some(String::from_utf8(b.to_vec()).ok()?),
        };
        c.protocol_type = rd.string().ok()?;
    }
    rd.finish().ok()?;
    Some(((group, topic, partition), c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_checked_without_being_changed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("offsets.log");
        assert!(check_offsets_file(&path).unwrap().is_none());
        let mut s = OffsetStore::open(dir.path(), FsyncPolicy::Never).unwrap();
        s.commit("g", &[("t".into(), 0, 5), ("t".into(), 1, 7)])
            .unwrap();
        s.commit("g", &[("t".into(), 0, 6)]).unwrap();
        drop(s);
        let r = check_offsets_file(&path).unwrap().unwrap();
        assert_eq!((r.version, r.records), (2, 3));
        assert_eq!(
            r.committed,
            vec![
                (("g".into(), "t".into(), 0), 6),
                (("g".into(), "t".into(), 1), 7)
            ]
        );
        assert!(r.damage.is_none());
        // A flipped byte in the last record: named at its start, nothing cut.
        let mut raw = std::fs::read(&path).unwrap();
        let last_len = raw.len() - usize::try_from(r.bytes).unwrap();
        assert_eq!(last_len, 0);
        let ends: Vec<usize> = RecordIter::new(&raw[8..])
            .map(|r| r.unwrap())
            .map(|r| 8 + r.pos)
            .collect();
        let last = *ends.last().unwrap();
        let n = raw.len();
        raw[n - 1] ^= 0xff;
        std::fs::write(&path, &raw).unwrap();
        let r = check_offsets_file(&path).unwrap().unwrap();
        let d = r.damage.unwrap();
        assert_eq!(d.position, Some(last as u64), "{d}");
        assert!(d.what.contains("CRC mismatch"), "{d}");
        assert_eq!(r.committed.len(), 2, "the commits before it");
        assert_eq!(std::fs::read(&path).unwrap(), raw, "unchanged");
        std::fs::write(&path, b"FLMOFS\x00\x09").unwrap();
        let d = check_offsets_file(&path).unwrap().unwrap().damage.unwrap();
        assert!(d.what.contains("newer"), "{d}");
    }

    #[test]
    fn commits_survive_reopen_and_torn_tails() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = OffsetStore::open(dir.path(), FsyncPolicy::Never).unwrap();
        s.commit("g", &[("t".into(), 0, 5), ("t".into(), 1, 7)])
            .unwrap();
        s.commit("g", &[("t".into(), 0, 6)]).unwrap();
        drop(s);
        let s = OffsetStore::open(dir.path(), FsyncPolicy::Never).unwrap();
        assert_eq!(s.get("g", "t", 0), Some(6));
        assert_eq!(s.for_topic("g", "t"), vec![(0, 6), (1, 7)]);
        drop(s);
        // Tear the last record: the previous value comes back.
        let path = dir.path().join("offsets.log");
        let len = std::fs::metadata(&path).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 3)
            .unwrap();
        let mut s = OffsetStore::open(dir.path(), FsyncPolicy::Never).unwrap();
        assert_eq!(s.get("g", "t", 0), Some(5));
        s.commit("g", &[("t".into(), 0, 9)]).unwrap();
        drop(s);
        assert_eq!(
            OffsetStore::open(dir.path(), FsyncPolicy::Never)
                .unwrap()
                .get("g", "t", 0),
            Some(9)
        );
    }

    fn full(offset: i64, epoch: i32, metadata: Option<&str>, protocol: &str) -> Committed {
        Committed {
            offset,
            leader_epoch: epoch,
            metadata: metadata.map(str::to_owned),
            protocol_type: protocol.to_owned(),
        }
    }

    #[test]
    fn epochs_metadata_and_protocol_types_survive_reopen_and_compaction() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = OffsetStore::open(dir.path(), FsyncPolicy::Never).unwrap();
        let a = full(5, 3, Some("checkpoint é"), "consumer");
        let b = full(7, -1, Some(""), "consumer");
        let c = full(1, -1, None, "");
        let batch = vec![
            ("t".to_owned(), 0, a.clone()),
            ("t".to_owned(), 1, b.clone()),
        ];
        assert!(s
            .commit_batch(&[("g", &batch), ("h", &[("t".into(), 0, c.clone())])])
            .iter()
            .all(Result::is_ok));
        drop(s);
        let mut s = OffsetStore::open(dir.path(), FsyncPolicy::Never).unwrap();
        assert_eq!(s.get_committed("g", "t", 0), Some(a.clone()));
        assert_eq!(
            s.get_committed("g", "t", 1),
            Some(b.clone()),
            "empty is not null"
        );
        assert_eq!(s.get_committed("h", "t", 0), Some(c.clone()));
        s.compact().unwrap();
        drop(s);
        let s = OffsetStore::open(dir.path(), FsyncPolicy::Never).unwrap();
        assert_eq!(s.get_committed("g", "t", 0), Some(a));
        assert_eq!(s.get_committed("g", "t", 1), Some(b));
        assert_eq!(s.metadata_bytes, "checkpoint é".len());
        let raw = std::fs::read(dir.path().join("offsets.log")).unwrap();
        assert_eq!(raw[..8], OFFSETS_MAGIC);
    }

    /// A version 1 file, as every broker before commit metadata wrote it:
    /// the log's header and `[topic][partition][offset]` values.
    fn write_v1(dir: &Path, entries: &[(&str, &str, i32, i64)]) {
        let mut buf = LOG_MAGIC.to_vec();
        for (group, topic, partition, offset) in entries {
            let mut value = Vec::new();
            value.put_string(topic);
            value.put_i32(*partition);
            value.put_i64(*offset);
            record::encode(&mut buf, 0, 1, Some(group.as_bytes()), &value, &[]);
        }
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("offsets.log"), buf).unwrap();
    }

    #[test]
    fn a_version_1_file_is_read_and_rewritten_as_version_2() {
        let dir = tempfile::tempdir().unwrap();
        write_v1(
            dir.path(),
            &[
                ("g", "t", 0, 5),
                ("g", "t", 1, 9),
                ("g", "t", 0, 6),
                ("h", "u", 2, 1),
            ],
        );
        let s = OffsetStore::open(dir.path(), FsyncPolicy::Never).unwrap();
        assert_eq!(s.get("g", "t", 0), Some(6));
        assert_eq!(s.get("g", "t", 1), Some(9));
        assert_eq!(s.get_committed("h", "u", 2), Some(Committed::at(1)));
        drop(s);
        let raw = std::fs::read(dir.path().join("offsets.log")).unwrap();
        assert_eq!(raw[..8], OFFSETS_MAGIC, "converted on open");
        let s = OffsetStore::open(dir.path(), FsyncPolicy::Never).unwrap();
        assert_eq!(s.for_topic("g", "t"), vec![(0, 6), (1, 9)]);
    }

    #[test]
    fn a_file_of_a_newer_version_is_refused_not_misread() {
        let dir = tempfile::tempdir().unwrap();
        let mut magic = OFFSETS_MAGIC;
        magic[7] = 3;
        std::fs::write(dir.path().join("offsets.log"), magic).unwrap();
        let e = OffsetStore::open(dir.path(), FsyncPolicy::Never).unwrap_err();
        assert!(e.to_string().contains("newer Flume"), "{e}");
        assert_eq!(
            std::fs::read(dir.path().join("offsets.log")).unwrap(),
            magic,
            "left as it was"
        );
    }

    #[test]
    fn metadata_is_bounded_over_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = OffsetStore::open(dir.path(), FsyncPolicy::Never).unwrap();
        let big = "m".repeat(MAX_METADATA_BYTES);
        let n = MAX_METADATA_TOTAL_BYTES / MAX_METADATA_BYTES;
        let batch: Vec<_> = (0..n)
            .map(|p| {
                (
                    "t".to_owned(),
                    i32::try_from(p).unwrap(),
                    full(1, -1, Some(&big), ""),
                )
            })
            .collect();
        assert!(s.commit_batch(&[("g", &batch)])[0].is_ok());
        let one_more = [("t".to_owned(), -5, full(1, -1, Some("x"), ""))];
        let r = s.commit_batch(&[("g", &one_more)]);
        assert!(
            r[0].as_ref()
                .is_err_and(|e| e.to_string().contains("metadata")),
            "{r:?}"
        );
        // Replacing metadata with less is fine; so is a commit without any.
        let smaller = [("t".to_owned(), 0, full(2, -1, Some("s"), ""))];
        assert!(s.commit_batch(&[("g", &smaller)])[0].is_ok());
        assert!(s.commit_batch(&[("g", &[("u".to_owned(), 0, Committed::at(3))])])[0].is_ok());
        assert_eq!(
            s.metadata_bytes,
            MAX_METADATA_TOTAL_BYTES - MAX_METADATA_BYTES + 1
        );
    }

    #[test]
    fn removed_offsets_stay_removed_after_reopen_and_later_commits_stay() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = OffsetStore::open(dir.path(), FsyncPolicy::Never).unwrap();
        s.commit("g", &[("t".into(), 0, 5), ("u".into(), 0, 7)])
            .unwrap();
        s.commit("h", &[("t".into(), 1, 3)]).unwrap();
        assert_eq!(s.remove_where(&|k| k.1 == "t").unwrap(), 2);
        assert_eq!(s.remove_where(&|k| k.1 == "t").unwrap(), 0);
        s.commit("g", &[("v".into(), 0, 1)]).unwrap();
        drop(s);
        let mut s = OffsetStore::open(dir.path(), FsyncPolicy::Never).unwrap();
        assert_eq!(s.get("g", "t", 0), None);
        assert_eq!(s.get("h", "t", 1), None);
        assert_eq!(s.get("g", "u", 0), Some(7));
        assert_eq!(s.get("g", "v", 0), Some(1));
        assert_eq!(s.remove_where(&|k| k.0 == "g").unwrap(), 2);
        drop(s);
        let s = OffsetStore::open(dir.path(), FsyncPolicy::Never).unwrap();
        assert!(s.for_topic("g", "u").is_empty() && s.for_topic("g", "v").is_empty());
    }

    #[test]
    fn interval_policy_fsyncs_at_most_once_per_interval() {
        let dir = tempfile::tempdir().unwrap();
        let hour = std::time::Duration::from_secs(3600);
        let mut s = OffsetStore::open(dir.path(), FsyncPolicy::Interval(hour)).unwrap();
        let t0 = Instant::now();
        // Opening counts as a sync: the first commit is not due for an hour.
        s.commit("g", &[("t".into(), 0, 1)]).unwrap();
        assert_eq!(
            s.fsync_count(),
            0,
            "not due: the store was synced when opened"
        );
        s.sync_if_due(t0).unwrap();
        assert_eq!(s.fsync_count(), 0);
        s.sync_if_due(t0 + hour).unwrap();
        assert_eq!(s.fsync_count(), 1, "due once the interval has passed");
        s.sync_if_due(t0 + 3 * hour).unwrap();
        assert_eq!(s.fsync_count(), 1, "nothing written since: no fsync");
        let mut a = OffsetStore::open(dir.path(), FsyncPolicy::Always).unwrap();
        a.commit("g", &[("t".into(), 0, 2)]).unwrap();
        assert_eq!(a.fsync_count(), 1, "always: fsynced before commit returns");
    }

    #[test]
    fn the_number_of_entries_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = OffsetStore::open(dir.path(), FsyncPolicy::Never).unwrap();
        s.set_max_keys(3);
        s.commit(
            "g",
            &[("t".into(), 0, 1), ("t".into(), 1, 1), ("t".into(), 2, 1)],
        )
        .unwrap();
        let err = s.commit("h", &[("t".into(), 0, 1)]).unwrap_err();
        assert_eq!(err.code(), flume_protocol::ErrorCode::InvalidRequest);
        // Updating an existing entry is always allowed.
        s.commit("g", &[("t".into(), 0, 2)]).unwrap();
        assert_eq!(s.get("g", "t", 0), Some(2));
    }

    #[test]
    fn compaction_keeps_live_offsets_and_stray_temp_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = OffsetStore::open(dir.path(), FsyncPolicy::Never).unwrap();
        s.set_compact_min(2000);
        for i in 0..500 {
            s.commit("g", &[("t".into(), i % 3, i64::from(i))]).unwrap();
        }
        assert!(
            std::fs::metadata(dir.path().join("offsets.log"))
                .unwrap()
                .len()
                < 4000
        );
        drop(s);
        std::fs::write(dir.path().join("offsets.log.tmp"), b"half written").unwrap();
        let s = OffsetStore::open(dir.path(), FsyncPolicy::Never).unwrap();
        assert!(!dir.path().join("offsets.log.tmp").exists());
        assert_eq!(s.for_topic("g", "t"), vec![(0, 498), (1, 499), (2, 497)]);
    }
}

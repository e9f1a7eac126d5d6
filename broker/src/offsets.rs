//! Committed offsets, in `<data>/__consumer_offsets/offsets.log`.
//!
//! The file is a header (`FLMOFS`, version 2) followed by records in the
//! log's format (so each carries a CRC): key = group id, value = `[topic
//! string][partition i32][offset i64][leader epoch i32][metadata nullable
//! bytes, utf-8][group protocol type string]` (what Kafka clients commit
//! beside an offset, -1 and null when none; the group's protocol type when it
//! committed). A file of version 1 (the log's header, `FLMLOG`, and values
//! without the last three fields) is read and rewritten as version 2 on open, so a
//! broker of an older version refuses the file instead of misreading it. A
//! commit appends one record per partition; on open the
//! file is replayed, and a torn or corrupt tail is cut off, so every
//! partition's committed offset is the old value or the new one, never torn.
//! When the file grows well past its live content it is compacted by writing
//! `offsets.log.tmp`, fsyncing it, renaming it over the old file and fsyncing
//! the directory; a stray temp file from an interrupted compaction is removed
//! on open.
//!
//! Layout:
//! - [`OffsetStore`]: the file and the map of live offsets, synchronous.
//! - [`Offsets`]: what the engine uses. Commits go through a bounded queue to
//!   one writer task (group commit, as the partitions do): it takes every
//!   commit waiting, appends them with one write, applies the broker's fsync
//!   policy once for the batch (`always`: fdatasync before any is
//!   acknowledged; `<ms>`: an fdatasync at most `<ms>` after a commit, by
//!   the writer or the broker's ticker; `never`: left to the OS), then makes
//!   them visible and acknowledges each. The file work runs on the blocking
//!   pool, so an fsync never holds a lock that heartbeats or joins need, and
//!   never blocks an executor thread. Reads (`get`, `for_topic`) take a
//!   read lock on the map, which the writer holds only to insert.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use bytes::BufMut;
use event_listener::{Event, EventListener};
use flume_protocol::record::{self, RecordIter};
use flume_protocol::wire::{Reader, WriteExt};
use flume_protocol::ErrorCode;
use flume_rt as rt;
use flume_rt::sync::lock;
use futures::channel::oneshot;

use crate::error::BrokerError;
use crate::storage::segment::{FILE_HEADER_LEN, LOG_MAGIC};
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

type Map = HashMap<OffsetKey, Committed>;

fn read_map(m: &RwLock<Map>) -> std::sync::RwLockReadGuard<'_, Map> {
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
    map: Arc<RwLock<Map>>,
    policy: FsyncPolicy,
    /// Bytes written since the last fsync.
    dirty: bool,
    last_sync: Instant,
    syncs: Arc<AtomicU64>,
    compact_min_bytes: u64,
    /// Most (group, topic, partition) entries kept: commits that would add more are refused.
    max_keys: usize,
    /// Bytes of metadata the map holds.
    metadata_bytes: usize,
    #[cfg(test)]
    hook: Option<FsyncHook>,
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
            let version = match &raw[..8] {
                m if *m == OFFSETS_MAGIC => 2,
                m if *m == LOG_MAGIC => 1,
                m if m[..6] == OFFSETS_MAGIC[..6] => {
                    return Err(BrokerError::Io {
                        what: format!("open {}", path.display()),
                        source: std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!(
                                "offsets file version {} is newer than this broker reads (2): \
                                 it was written by a newer Flume",
                                u16::from_be_bytes([m[6], m[7]])
                            ),
                        ),
                    })
                }
                _ => {
                    return Err(BrokerError::Io {
                        what: format!("open {}", path.display()),
                        source: std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            "not a Flume offsets file (bad magic)",
                        ),
                    })
                }
            };
            convert = version == 1;
            let body = &raw[8..];
            let mut valid = 0usize;
            let mut damage = None;
            for r in RecordIter::new(body) {
                match r.map_err(|e| e.to_string()).and_then(|r| {
                    let end = r.pos + r.encoded_len();
                    decode(&r, version)
                        .map(|kv| (kv, end))
                        .ok_or_else(|| "malformed offset record".to_owned())
                }) {
                    Ok(((k, v), end)) => {
                        map.insert(k, v);
                        valid = end;
                    }
                    Err(e) => {
                        damage = Some(e);
                        break;
                    }
                }
            }
            size = FILE_HEADER_LEN + valid as u64;
            if let Some(reason) = damage {
                tracing::warn!(file = %path.display(), dropped_bytes = body.len() - valid, %reason, "truncated a torn or corrupt tail of the offsets file");
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
            #[cfg(test)]
            hook: None,
        }
        .converted(convert)
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
    pub fn get(&self, group: &str, topic: &str, partition: i32) -> Option<i64> {
        get(&self.map, group, topic, partition)
    }

    /// Every committed offset of a group for a topic.
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
        let ts = crate::now_ms();
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
        let ts = crate::now_ms();
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
fn entries(map: &RwLock<Map>, limit: usize) -> Vec<(OffsetKey, i64)> {
    map.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .take(limit)
        .map(|(k, c)| (k.clone(), c.offset))
        .collect()
}

fn get(map: &RwLock<Map>, group: &str, topic: &str, partition: i32) -> Option<i64> {
    get_committed(map, group, topic, partition).map(|c| c.offset)
}

fn get_committed(map: &RwLock<Map>, group: &str, topic: &str, partition: i32) -> Option<Committed> {
    read_map(map)
        .get(&(group.to_owned(), topic.to_owned(), partition))
        .cloned()
}

fn for_topic(map: &RwLock<Map>, group: &str, topic: &str) -> Vec<(i32, i64)> {
    let mut v: Vec<(i32, i64)> = read_map(map)
        .iter()
        .filter(|((g, t, _), _)| g == group && t == topic)
        .map(|((_, _, p), c)| (*p, c.offset))
        .collect();
    v.sort_unstable();
    v
}

/// One commit waiting for the writer.
#[derive(Debug)]
struct CommitJob {
    group: String,
    offsets: CommitOffsets,
    ack: oneshot::Sender<Result<(), BrokerError>>,
}

/// Why a commit was not queued.
#[derive(Debug)]
pub enum NotQueued {
    /// The queue is full: the offsets come back; wait on [`Offsets::room`] and retry.
    Full(CommitOffsets),
    /// The writer has stopped (shutdown).
    Closed,
}

/// The committed offsets with their writer task (see the module docs).
#[derive(Debug)]
pub struct Offsets {
    store: Arc<Mutex<OffsetStore>>,
    map: Arc<RwLock<Map>>,
    syncs: Arc<AtomicU64>,
    queue: async_channel::Sender<CommitJob>,
    room: Arc<Event>,
    writer: rt::sync::TaskSlot<()>,
}

impl Offsets {
    /// Up to `limit` committed offsets, in no particular order (metrics).
    pub fn entries(&self, limit: usize) -> Vec<(OffsetKey, i64)> {
        entries(&self.map, limit)
    }

    /// Opens the store in `dir` and starts its writer task.
    ///
    /// # Errors
    /// As [`OffsetStore::open`].
    pub fn open(dir: &Path, policy: FsyncPolicy) -> Result<Self, BrokerError> {
        Ok(Self::start(OffsetStore::open(dir, policy)?))
    }

    fn start(store: OffsetStore) -> Self {
        let map = Arc::clone(&store.map);
        let syncs = Arc::clone(&store.syncs);
        let store = Arc::new(Mutex::new(store));
        let (tx, rx) = async_channel::bounded(COMMIT_QUEUE_CAPACITY);
        let room = Arc::new(Event::new());
        let writer = rt::spawn(writer_loop(rx, Arc::clone(&store), Arc::clone(&room)));
        Offsets {
            store,
            map,
            syncs,
            queue: tx,
            room,
            writer: rt::sync::TaskSlot::new(writer),
        }
    }

    /// The committed offset (next to read), if any. Commits are visible once acknowledged.
    pub fn get(&self, group: &str, topic: &str, partition: i32) -> Option<i64> {
        get(&self.map, group, topic, partition)
    }

    /// What is committed (offset, leader epoch, metadata), if anything.
    pub fn get_committed(&self, group: &str, topic: &str, partition: i32) -> Option<Committed> {
        get_committed(&self.map, group, topic, partition)
    }

    /// Every committed offset of a group for a topic.
    pub fn for_topic(&self, group: &str, topic: &str) -> Vec<(i32, i64)> {
        for_topic(&self.map, group, topic)
    }

    /// Every committed offset of a group: (topic, partition, offset), sorted.
    /// Scans every entry (admin requests, not the commit path).
    pub fn for_group(&self, group: &str) -> Vec<(String, i32, i64)> {
        let mut v: Vec<(String, i32, i64)> = self
            .for_group_committed(group)
            .into_iter()
            .map(|(t, p, c)| (t, p, c.offset))
            .collect();
        v.sort_unstable();
        v
    }

    /// Every commit of a group, epochs and metadata included, sorted by
    /// topic and partition. Scans every entry.
    pub fn for_group_committed(&self, group: &str) -> Vec<(String, i32, Committed)> {
        let mut v: Vec<(String, i32, Committed)> = read_map(&self.map)
            .iter()
            .filter(|((g, _, _), _)| g == group)
            .map(|((_, t, p), c)| (t.clone(), *p, c.clone()))
            .collect();
        v.sort_unstable_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        v
    }

    /// Whether a group has any committed offset.
    pub fn has_group(&self, group: &str) -> bool {
        read_map(&self.map).keys().any(|(g, _, _)| g == group)
    }

    /// The groups with committed offsets and the protocol type each
    /// committed with (a non-empty one if any), sorted. Scans every entry.
    pub fn groups_with_type(&self) -> Vec<(String, String)> {
        let map = read_map(&self.map);
        let mut by: std::collections::BTreeMap<&String, &str> = std::collections::BTreeMap::new();
        for ((g, _, _), c) in map.iter() {
            let t = by.entry(g).or_insert("");
            if t.is_empty() {
                *t = &c.protocol_type;
            }
        }
        by.into_iter()
            .map(|(g, t)| (g.clone(), t.to_owned()))
            .collect()
    }

    /// The protocol type a group's offsets were committed with (a non-empty
    /// one if any; empty if none or no offsets).
    pub fn group_protocol_type(&self, group: &str) -> String {
        read_map(&self.map)
            .iter()
            .filter(|((g, _, _), c)| g == group && !c.protocol_type.is_empty())
            .map(|(_, c)| c.protocol_type.clone())
            .next()
            .unwrap_or_default()
    }

    /// The groups with committed offsets, sorted. Scans every entry.
    pub fn groups(&self) -> Vec<String> {
        let map = read_map(&self.map);
        let set: std::collections::BTreeSet<&String> = map.keys().map(|(g, _, _)| g).collect();
        set.into_iter().cloned().collect()
    }

    /// Queues a commit without waiting; the receiver gets its result once it
    /// is written (and fsynced if the policy is `always`). Commits are written
    /// in the order they are queued.
    ///
    /// # Errors
    /// [`NotQueued::Full`] (retry after [`Offsets::room`]) or [`NotQueued::Closed`].
    pub fn try_queue(
        &self,
        group: &str,
        offsets: CommitOffsets,
    ) -> Result<oneshot::Receiver<Result<(), BrokerError>>, NotQueued> {
        let (ack, rx) = oneshot::channel();
        let job = CommitJob {
            group: group.to_owned(),
            offsets,
            ack,
        };
        match self.queue.try_send(job) {
            Ok(()) => Ok(rx),
            Err(async_channel::TrySendError::Full(job)) => Err(NotQueued::Full(job.offsets)),
            Err(async_channel::TrySendError::Closed(_)) => Err(NotQueued::Closed),
        }
    }

    /// A listener woken when the writer takes commits off the queue. Create
    /// it before [`Offsets::try_queue`], so no wake-up is missed.
    pub fn room(&self) -> EventListener {
        self.room.listen()
    }

    /// Queues a commit, waiting for room, and waits for its result.
    ///
    /// # Errors
    /// Storage errors, INVALID_REQUEST (entry limit), SHUTTING_DOWN.
    pub async fn commit(&self, group: &str, offsets: CommitOffsets) -> Result<(), BrokerError> {
        let mut offsets = offsets;
        loop {
            let room = self.room();
            match self.try_queue(group, offsets) {
                Ok(rx) => return finish(rx).await,
                Err(NotQueued::Full(back)) => {
                    offsets = back;
                    room.await;
                }
                Err(NotQueued::Closed) => return Err(ErrorCode::ShuttingDown.into()),
            }
        }
    }

    /// Stores offsets at once on the calling thread, bypassing the queue
    /// (embedded mode, which has no executor of its own to wait on).
    ///
    /// # Errors
    /// As [`OffsetStore::commit`].
    pub fn commit_now(
        &self,
        group: &str,
        offsets: &[(String, i32, i64)],
    ) -> Result<(), BrokerError> {
        lock(&self.store).commit(group, offsets)
    }

    /// Under the interval policy, fsyncs the file if a commit is older than
    /// the interval; off the executor. Called by the broker's ticker.
    pub async fn maintain(&self) {
        let store = Arc::clone(&self.store);
        let r = rt::unblock(move || lock(&store).sync_if_due(Instant::now())).await;
        if let Err(e) = r {
            tracing::error!(error = %e, "interval fsync of committed offsets failed");
        }
    }

    /// Number of fsyncs of the offsets file so far.
    pub fn fsync_count(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// [`Offsets::remove_where`] on the calling thread (at open).
    ///
    /// # Errors
    /// I/O errors; nothing is dropped then.
    pub fn remove_where_now(
        &self,
        drop: &dyn Fn(&OffsetKey) -> bool,
    ) -> Result<usize, BrokerError> {
        lock(&self.store).remove_where(drop)
    }

    /// Drops every committed offset `drop` selects, durably (see
    /// [`OffsetStore::remove_where`]), off the executor; commits queued
    /// meanwhile are written after it. Returns how many went.
    ///
    /// # Errors
    /// I/O errors; nothing is dropped then.
    pub async fn remove_where(
        &self,
        drop: impl Fn(&OffsetKey) -> bool + Send + 'static,
    ) -> Result<usize, BrokerError> {
        let store = Arc::clone(&self.store);
        rt::unblock(move || lock(&store).remove_where(&drop)).await
    }

    /// Stops taking commits, lets the writer finish the queued ones and fsyncs the file.
    pub async fn shutdown(&self) {
        self.queue.close();
        self.writer.join().await;
        let store = Arc::clone(&self.store);
        if let Err(e) = rt::unblock(move || lock(&store).sync()).await {
            tracing::error!(error = %e, "fsync of committed offsets failed at shutdown");
        }
    }

    /// Test-only: `f` runs just before every fsync of the offsets file.
    #[cfg(test)]
    pub(crate) fn set_fsync_hook(&self, f: Arc<dyn Fn() -> std::io::Result<()> + Send + Sync>) {
        lock(&self.store).hook = Some(FsyncHook(f));
    }
}

/// Waits for a queued commit's result.
///
/// # Errors
/// The commit's failure, or SHUTTING_DOWN if the writer went away.
pub async fn finish(rx: oneshot::Receiver<Result<(), BrokerError>>) -> Result<(), BrokerError> {
    rx.await
        .unwrap_or_else(|_| Err(ErrorCode::ShuttingDown.into()))
}

/// Most commits the writer takes in one group commit.
const WRITER_BATCH: usize = 256;

async fn writer_loop(
    rx: async_channel::Receiver<CommitJob>,
    store: Arc<Mutex<OffsetStore>>,
    room: Arc<Event>,
) {
    while let Ok(first) = rx.recv().await {
        let mut jobs = vec![first];
        while jobs.len() < WRITER_BATCH {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        room.notify(usize::MAX);
        let store = Arc::clone(&store);
        let (jobs, results) = rt::unblock(move || {
            let commits: Vec<Commit<'_>> = jobs
                .iter()
                .map(|j| (j.group.as_str(), j.offsets.as_slice()))
                .collect();
            let results = lock(&store).commit_batch(&commits);
            (jobs, results)
        })
        .await;
        for (job, r) in jobs.into_iter().zip(results) {
            let _ = job.ack.send(r);
        }
    }
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

/// One record of a file of `version`: its key and what it commits.
fn decode(r: &record::RawRecord<'_>, version: u8) -> Option<(OffsetKey, Committed)> {
    let (key, value) = r.key_value()?;
    let group = String::from_utf8(key?.to_vec()).ok()?;
    let mut rd = Reader::new(value);
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

/// The offsets writer inside a running engine: lock-free heartbeats and
/// joins while a commit waits for its fsync, group commit, fsync policies.
#[cfg(test)]
mod engine_tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use crate::domain::{JoinSpec, Member, TopicPartition};
    use crate::group::Assignor;

    use super::*;
    use crate::config::{BrokerConfig, TopicConfig};
    use crate::engine::Engine;

    fn engine(dir: &Path, fsync: FsyncPolicy) -> Arc<Engine> {
        let mut c = BrokerConfig::new(dir);
        c.fsync = fsync;
        c.tick = Duration::from_millis(10);
        let e = Engine::open(c).unwrap();
        e.create_topic(
            "t",
            TopicConfig {
                partitions: 2,
                ..TopicConfig::default()
            },
        )
        .unwrap();
        e
    }

    /// Commits `offset` for partition 0 of "t" outside group membership.
    async fn commit_at(e: &Engine, group: &str, offset: i64) -> Result<Vec<ErrorCode>, ErrorCode> {
        let member = Member {
            group,
            member_id: "",
            generation: -1,
        };
        e.commit_offsets(member, &[(TopicPartition::new("t", 0), offset)])
            .await
    }

    fn join(group: &str) -> JoinSpec {
        JoinSpec {
            group: group.into(),
            member_id: String::new(),
            topics: vec!["t".into()],
            session_timeout: Duration::from_secs(10),
            rebalance_timeout: Duration::ZERO,
            assignor: Assignor::Range,
        }
    }

    /// A gate for the fsync hook: `entered` reports each fsync that starts;
    /// every fsync waits until `release` is dropped (at most 10 s, so a
    /// failing test cannot hang).
    fn gate(e: &Engine) -> (mpsc::Receiver<()>, mpsc::Sender<()>) {
        let (entered_tx, entered) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let entered_tx = Mutex::new(entered_tx);
        let release_rx = Mutex::new(release_rx);
        e.offsets().set_fsync_hook(Arc::new(move || {
            let _ = lock(&entered_tx).send(());
            let _ = lock(&release_rx).recv_timeout(Duration::from_secs(10));
            Ok(())
        }));
        (entered, release)
    }

    /// Runs `f` on its own thread; its result, or None if it took longer than `limit`.
    fn within<T: Send + 'static>(
        limit: Duration,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(limit).ok()
    }

    #[test]
    fn a_commit_stuck_in_fsync_stalls_neither_heartbeats_nor_joins() {
        let dir = tempfile::tempdir().unwrap();
        let e = engine(dir.path(), FsyncPolicy::Always);
        let member = rt::block_on(rt::timeout(
            Duration::from_secs(5),
            e.join_group(join("g1")),
        ))
        .expect("first join completes")
        .unwrap();
        let (entered, release) = gate(&e);
        let ec = Arc::clone(&e);
        let stuck = rt::spawn(async move { commit_at(&ec, "tools", 5).await });
        entered
            .recv_timeout(Duration::from_secs(5))
            .expect("the commit reaches its fsync");

        let eh = Arc::clone(&e);
        let hb = within(Duration::from_secs(1), move || {
            eh.heartbeat("g1", &member.member_id, member.generation)
        });
        let ej = Arc::clone(&e);
        let joined = within(Duration::from_secs(1), move || {
            rt::block_on(rt::timeout(
                Duration::from_secs(5),
                ej.join_group(join("g2")),
            ))
        });
        // Not acknowledged (nor visible) before it is durable.
        let visible_early = e.committed("tools", "t", 0);
        drop(release);
        assert_eq!(
            hb,
            Some(Ok(())),
            "a heartbeat completes while a commit waits for its fsync"
        );
        assert!(
            matches!(joined, Some(Some(Ok(_)))),
            "a JOIN of another group completes while a commit waits for its fsync: {joined:?}"
        );
        assert_eq!(visible_early, None);
        let r = rt::block_on(stuck).unwrap();
        assert!(r.iter().all(|p| p.is_ok()));
        assert_eq!(e.committed("tools", "t", 0), Some(5));
        rt::block_on(e.shutdown());
    }

    #[test]
    fn commits_waiting_behind_an_fsync_share_the_next_one() {
        let dir = tempfile::tempdir().unwrap();
        let e = engine(dir.path(), FsyncPolicy::Always);
        let (entered, release) = gate(&e);
        let ec = Arc::clone(&e);
        let first = rt::spawn(async move { commit_at(&ec, "g0", 1).await });
        entered.recv_timeout(Duration::from_secs(5)).unwrap();
        let before = e.offsets().fsync_count();
        let rest: Vec<_> = (1..=10)
            .map(|i| {
                let ec = Arc::clone(&e);
                rt::spawn(async move { commit_at(&ec, &format!("g{i}"), i).await })
            })
            .collect();
        // Wait until all ten are queued behind the stuck writer.
        let deadline = Instant::now() + Duration::from_secs(5);
        while e.offsets().queue.len() < 10 {
            assert!(Instant::now() < deadline, "commits did not queue");
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(release);
        rt::block_on(first).unwrap();
        for t in rest {
            rt::block_on(t).unwrap();
        }
        assert_eq!(before, 0);
        assert_eq!(
            e.offsets().fsync_count(),
            2,
            "one fsync for the first commit, one for the ten queued behind it"
        );
        for i in 0..=10 {
            assert_eq!(e.committed(&format!("g{i}"), "t", 0), Some(i.max(1)));
        }
        rt::block_on(e.shutdown());
    }

    /// A full commit queue makes further commits wait for room (nothing is
    /// dropped or refused); they complete once the writer moves on.
    #[test]
    fn a_full_commit_queue_makes_commits_wait_for_room() {
        let dir = tempfile::tempdir().unwrap();
        let e = engine(dir.path(), FsyncPolicy::Always);
        let (entered, release) = gate(&e);
        let ec = Arc::clone(&e);
        let first = rt::spawn(async move { commit_at(&ec, "g", 0).await });
        entered.recv_timeout(Duration::from_secs(5)).unwrap();
        let n = i64::try_from(COMMIT_QUEUE_CAPACITY).unwrap() + 1;
        let waiting: Vec<_> = (1..=n)
            .map(|i| {
                let ec = Arc::clone(&e);
                rt::spawn(async move { commit_at(&ec, "g", i).await })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        while e.offsets().queue.len() < COMMIT_QUEUE_CAPACITY {
            assert!(Instant::now() < deadline, "the queue did not fill");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(e.offsets().queue.len(), COMMIT_QUEUE_CAPACITY, "bounded");
        drop(release);
        rt::block_on(first).unwrap();
        for t in waiting {
            rt::block_on(t).unwrap();
        }
        let c = e.committed("g", "t", 0).unwrap();
        assert!((1..=n).contains(&c), "{c}");
        rt::block_on(e.shutdown());
    }

    #[test]
    fn interval_policy_fsyncs_committed_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let e = engine(dir.path(), FsyncPolicy::Interval(Duration::from_millis(20)));
        rt::block_on(commit_at(&e, "g", 3)).unwrap();
        // The ticker (every 10 ms) fsyncs what is older than the interval.
        let deadline = Instant::now() + Duration::from_secs(5);
        while e.offsets().fsync_count() == 0 {
            assert!(Instant::now() < deadline, "committed offsets never fsynced");
            std::thread::sleep(Duration::from_millis(2));
        }
        rt::block_on(e.shutdown());
    }

    /// Auto-creation (first PRODUCE or JOIN_GROUP of a topic) does its file
    /// work on the blocking pool, not on the thread running the request.
    #[test]
    fn auto_creation_does_its_file_work_off_the_calling_thread() {
        let dir = tempfile::tempdir().unwrap();
        let e = engine(dir.path(), FsyncPolicy::Never);
        let name = format!("auto-{}", std::process::id());
        let caller = std::thread::current().id();
        rt::block_on(e.auto_create(&name)).unwrap();
        let threads: Vec<_> = lock(&crate::engine::FILE_WORK_THREADS)
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, t)| *t)
            .collect();
        assert_eq!(threads.len(), 1);
        assert_ne!(threads[0], caller, "file work ran on the request's thread");
        assert!(e.topic(&name).is_some());
    }

    /// A failed fsync answers STORAGE_ERROR, and the commit is neither
    /// visible nor found in the file after a restart.
    #[test]
    fn a_failed_fsync_stores_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let e = engine(dir.path(), FsyncPolicy::Always);
        rt::block_on(commit_at(&e, "g", 1)).unwrap();
        let fail = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let f = Arc::clone(&fail);
        e.offsets().set_fsync_hook(Arc::new(move || {
            if f.swap(false, Ordering::AcqRel) {
                Err(std::io::Error::other("injected fsync failure"))
            } else {
                Ok(())
            }
        }));
        let err = rt::block_on(commit_at(&e, "g", 2)).unwrap_err();
        assert_eq!(err, ErrorCode::StorageError);
        assert_eq!(e.committed("g", "t", 0), Some(1));
        rt::block_on(e.shutdown());
        drop(e);
        let s =
            OffsetStore::open(&dir.path().join("__consumer_offsets"), FsyncPolicy::Never).unwrap();
        assert_eq!(
            s.get("g", "t", 0),
            Some(1),
            "the failed commit is not in the file"
        );
    }

    #[test]
    fn never_policy_leaves_commits_to_the_os() {
        let dir = tempfile::tempdir().unwrap();
        let e = engine(dir.path(), FsyncPolicy::Never);
        rt::block_on(commit_at(&e, "g", 3)).unwrap();
        assert_eq!(e.offsets().fsync_count(), 0);
        assert_eq!(e.committed("g", "t", 0), Some(3));
    }
}

//! The share-state file: what every share-partition keeps across restarts,
//! in `<data>/__share_state/share.log` (the format is also in
//! `docs/storage.md`).
//!
//! ```text
//! file    = magic "FLMSHR\0\x01" (8 bytes), entry*
//! entry   = a record of the log's format (offset:u64 = 0, size:u32, crc:u32,
//!           payload); key = the share group's id, value = one of:
//! value   = 0x01 topic:string partition:i32 flags:u8 (bit 0: full)
//!                start:i64 end:i64 runs:u32 run*           a ShareUpdate
//!         | 0x02                                           group deleted
//!         | 0x03 topic:string partition:i32                partition forgotten
//! run     = first:i64 count:u32 state:u8 delivery_count:u16
//!           (`count` consecutive offsets from `first`, one state and count;
//!            state 0 available, 1 acknowledged, 2 archived)
//! string  = len:i16 utf-8                                   big-endian
//! ```
//!
//! A [`ShareUpdate`] is stored as the runs of its records in the order it
//! lists them, so the records of 2000 in-flight offsets with one state are
//! one 15-byte run. Replaying the file applies each record in order, as
//! [`ShareSnapshot::apply`] does (a full update replaces the partition's
//! state; a partial one moves the start and end and sets the records it
//! carries; only records in `start..end` are kept), and a removal drops the
//! group's or the partition's state.
//!
//! Recovery is the committed-offset store's: [`ShareStore::open`] replays
//! the records and stops at the first that is torn, fails its CRC, has a
//! non-zero offset field, does not decode, or would take the store past its
//! limits; the file is cut there (logged), so nothing after a damaged record
//! is served and the next append continues a valid file. Compaction: when
//! the file is at least 1 MiB and more than four times what its live state
//! takes (one full update per share-partition), it is rewritten as full
//! updates into `share.log.tmp`, fsynced, renamed over the file and the
//! directory fsynced; a stray temp file is removed on open. Writes follow
//! the broker's fsync policy as the offsets file does.
//!
//! Bounds: at most [`MAX_SHARE_PARTITIONS`] (group, topic, partition)
//! entries, [`MAX_PARTITION_RECORDS`] records per entry and
//! [`MAX_KEPT_RECORDS`] records in all; a write past one is refused with
//! LIMIT_REACHED, and nothing is allocated from a count in the file before
//! it is checked against them.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use bytes::BufMut;
use flume_protocol::record::{self, RawRecord, RecordIter, MIN_PAYLOAD_LEN, RECORD_HEADER_LEN};
use flume_protocol::wire::{Reader, WriteExt};
use flume_protocol::ErrorCode;

use super::partition::{ShareSnapshot, ShareUpdate, SnapshotState};
use crate::error::BrokerError;
use crate::storage::fault::injected;
use crate::storage::inspect::{describe_record_error, header_version, DiskFormat, Problem};
use crate::storage::{FaultInjector, FsyncPolicy};

/// (group, topic, partition).
pub type ShareKey = (String, String, i32);

/// One share-partition's update as the engine writes it.
pub type ShareWrite = (String, String, i32, ShareUpdate);

/// Magic and version at the start of the share-state file.
pub const SHARE_MAGIC: [u8; 8] = *b"FLMSHR\x00\x01";

/// The file's name in `<data>/__share_state`.
pub const SHARE_LOG_FILE: &str = "share.log";

/// Most (group, topic, partition) entries the store keeps.
pub const MAX_SHARE_PARTITIONS: usize = 100_000;

/// Most records one entry keeps, and one update carries (Kafka caps
/// `share.partition.max.record.locks`, the in-flight records of a
/// share-partition, at 10,000).
pub const MAX_PARTITION_RECORDS: usize = 16_384;

/// Most records the store keeps over all entries (about 20 bytes each in
/// memory).
pub const MAX_KEPT_RECORDS: usize = 10_000_000;

/// The file's header length.
const HEADER_LEN: usize = SHARE_MAGIC.len();

/// Bytes of one run.
const RUN_LEN: usize = 8 + 4 + 1 + 2;

const KIND_UPDATE: u8 = 1;
const KIND_GROUP_DELETED: u8 = 2;
const KIND_PARTITION_FORGOTTEN: u8 = 3;

/// One change to the share state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShareOp {
    /// A share-partition's update (applied as [`ShareSnapshot::apply`]).
    Update(ShareWrite),
    /// A share group was deleted: every partition of it is forgotten.
    RemoveGroup(String),
    /// A share-partition is forgotten (its group's offsets deleted).
    RemovePartition(ShareKey),
    /// A topic was deleted: its partitions are forgotten in every group
    /// (written as one "partition forgotten" record each).
    RemoveTopic(String),
}

/// The store's bounds (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Limits {
    /// Most entries.
    pub(super) partitions: usize,
    /// Most records over all entries.
    pub(super) records: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            partitions: MAX_SHARE_PARTITIONS,
            records: MAX_KEPT_RECORDS,
        }
    }
}

/// One entry's kept state: [`ShareSnapshot`] with its records by offset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Kept {
    start: i64,
    end: i64,
    records: std::collections::BTreeMap<i64, (SnapshotState, u16)>,
}

impl Kept {
    fn snapshot(&self) -> ShareSnapshot {
        ShareSnapshot {
            start_offset: self.start,
            end_offset: self.end,
            records: self.records.iter().map(|(&o, &(s, d))| (o, s, d)).collect(),
        }
    }

    /// How many records this state keeps after `u` (without applying it).
    fn len_after(&self, u: &ShareUpdate) -> usize {
        let s = &u.state;
        if u.full {
            let mut offsets: Vec<i64> = s
                .records
                .iter()
                .map(|r| r.0)
                .filter(|o| *o >= s.start_offset && *o < s.end_offset)
                .collect();
            offsets.sort_unstable();
            offsets.dedup();
            return offsets.len();
        }
        let start = self.start.max(s.start_offset);
        let end = s.end_offset.max(start);
        let below = self.records.range(..start).count();
        let above = self.records.range(end..).count();
        let mut n = self.records.len() - below - above;
        let mut added: HashSet<i64> = HashSet::new();
        for &(o, _, _) in &s.records {
            if o >= start && o < end && !self.records.contains_key(&o) && added.insert(o) {
                n += 1;
            }
        }
        n
    }

    /// Applies `u` as [`ShareSnapshot::apply`] does, keeping only the
    /// records in `start..end`.
    fn apply(&mut self, u: &ShareUpdate) {
        let s = &u.state;
        if u.full {
            self.start = s.start_offset;
            self.end = s.end_offset;
            self.records.clear();
        } else {
            self.start = self.start.max(s.start_offset);
            self.end = s.end_offset.max(self.start);
        }
        for &(o, state, d) in &s.records {
            if o >= self.start && o < self.end {
                self.records.insert(o, (state, d));
            }
        }
        while let Some(e) = self.records.first_entry() {
            if *e.key() >= self.start {
                break;
            }
            e.remove();
        }
        while let Some(e) = self.records.last_entry() {
            if *e.key() < self.end {
                break;
            }
            e.remove();
        }
    }
}

pub(super) type Map = HashMap<ShareKey, Kept>;

pub(super) fn read_map(m: &RwLock<Map>) -> std::sync::RwLockReadGuard<'_, Map> {
    m.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write_map(m: &RwLock<Map>) -> std::sync::RwLockWriteGuard<'_, Map> {
    m.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The kept state of a share-partition, if any.
pub(super) fn get(
    map: &RwLock<Map>,
    group: &str,
    topic: &str,
    partition: i32,
) -> Option<ShareSnapshot> {
    read_map(map)
        .get(&(group.to_owned(), topic.to_owned(), partition))
        .map(Kept::snapshot)
}

/// The groups with kept state, sorted. Scans every entry.
pub(super) fn groups(map: &RwLock<Map>) -> Vec<String> {
    let map = read_map(map);
    let set: std::collections::BTreeSet<&String> = map.keys().map(|(g, _, _)| g).collect();
    set.into_iter().cloned().collect()
}

/// The partitions of a group with kept state, sorted. Scans every entry.
pub(super) fn partitions_of(map: &RwLock<Map>, group: &str) -> Vec<(String, i32)> {
    let mut v: Vec<(String, i32)> = read_map(map)
        .keys()
        .filter(|(g, _, _)| g == group)
        .map(|(_, t, p)| (t.clone(), *p))
        .collect();
    v.sort_unstable();
    v
}

/// A step of a compaction (tests look at the files there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CompactStep {
    /// The temp file is written, not yet fsynced.
    Written,
    /// The temp file is fsynced, not yet renamed.
    Synced,
    /// The temp file is renamed over the file; the directory not yet fsynced.
    Renamed,
    /// The directory is fsynced.
    Done,
}

/// Test-only: called at each step of a compaction (a test copies the
/// directory there: what a crash at that point leaves).
#[cfg(test)]
pub(crate) struct StepHook(pub(crate) Box<dyn FnMut(CompactStep) + Send>);

#[cfg(test)]
impl std::fmt::Debug for StepHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StepHook")
    }
}

/// The share-state store: the file and the kept state of every
/// share-partition (see the module docs).
#[derive(Debug)]
pub struct ShareStore {
    path: PathBuf,
    file: File,
    size: u64,
    pub(super) map: Arc<RwLock<Map>>,
    /// Records the map holds over all entries.
    kept: usize,
    policy: FsyncPolicy,
    /// Bytes written since the last fsync.
    dirty: bool,
    /// A compaction renamed its file in but the directory fsync failed: the
    /// next fsync does it first.
    dir_unsynced: bool,
    last_sync: Instant,
    pub(super) syncs: Arc<AtomicU64>,
    compact_min_bytes: u64,
    /// The file size at which the compaction rule is evaluated next.
    next_check: u64,
    limits: Limits,
    faults: FaultInjector,
    /// The time written in each record (see [`Self::with_clock`]).
    clock: crate::clock::Clock,
    #[cfg(test)]
    hook: Option<StepHook>,
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> BrokerError {
    move |source| BrokerError::Io { what, source }
}

fn limit(what: String) -> BrokerError {
    BrokerError::code_for(ErrorCode::LimitReached, what)
}

impl ShareStore {
    /// Opens (or creates) the store in `dir`; `policy` says when writes are
    /// fsynced. A torn or corrupt tail is cut off (see the module docs).
    ///
    /// # Errors
    /// I/O errors, or a file that is not a share-state file or is of a newer
    /// version (left as it is).
    pub fn open(dir: &Path, policy: FsyncPolicy) -> Result<Self, BrokerError> {
        crate::storage::create_dir_durable(dir)?;
        let path = dir.join(SHARE_LOG_FILE);
        let tmp = tmp_path(&path);
        if tmp.exists() {
            tracing::warn!(file = %tmp.display(), "removing a temp file left by an interrupted share-state compaction");
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
        let mut kept = 0;
        let size;
        if raw.len() < HEADER_LEN {
            // New, or torn while its header was written: nothing was stored.
            file.set_len(0)
                .map_err(io(format!("truncate {}", path.display())))?;
            file.write_all_at(&SHARE_MAGIC, 0)
                .map_err(io(format!("write {}", path.display())))?;
            size = HEADER_LEN as u64;
        } else {
            let replayed = replay(&raw).map_err(|reason| BrokerError::Io {
                what: format!("open {}", path.display()),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, reason),
            })?;
            map = replayed.map;
            kept = replayed.kept;
            size = (HEADER_LEN + replayed.valid) as u64;
            if let Some(reason) = replayed.damage {
                let dropped = raw.len() as u64 - size;
                tracing::warn!(file = %path.display(), dropped_bytes = dropped, position = size, %reason, "truncated a torn or corrupt tail of the share-state file");
                file.set_len(size)
                    .map_err(io(format!("truncate {}", path.display())))?;
                file.sync_all()
                    .map_err(io(format!("fsync {}", path.display())))?;
            }
        }
        let compact_min_bytes = 1 << 20;
        Ok(ShareStore {
            path,
            file,
            size,
            map: Arc::new(RwLock::new(map)),
            kept,
            policy,
            dirty: false,
            dir_unsynced: false,
            last_sync: Instant::now(),
            syncs: Arc::new(AtomicU64::new(0)),
            compact_min_bytes,
            next_check: compact_min_bytes,
            limits: Limits::default(),
            faults: FaultInjector::default(),
            clock: crate::clock::Clock::system(),
            #[cfg(test)]
            hook: None,
        })
    }

    /// Stamps records with `clock`'s wall time from now on (the broker's
    /// injected clock; the system clock otherwise).
    pub fn with_clock(mut self, clock: crate::clock::Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The kept state of a share-partition, if any.
    #[cfg(test)]
    pub fn get(&self, group: &str, topic: &str, partition: i32) -> Option<ShareSnapshot> {
        get(&self.map, group, topic, partition)
    }

    /// The groups with kept state, sorted.
    #[cfg(test)]
    pub fn groups(&self) -> Vec<String> {
        groups(&self.map)
    }

    /// The partitions of `group` with kept state, sorted.
    #[cfg(test)]
    pub fn partitions_of(&self, group: &str) -> Vec<(String, i32)> {
        partitions_of(&self.map, group)
    }

    /// The number of (group, topic, partition) entries kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        read_map(&self.map).len()
    }

    /// Whether nothing is kept.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stores updates with one write and, as the fsync policy says, one
    /// fsync (`always`: before this returns): all of them or none.
    ///
    /// # Errors
    /// LIMIT_REACHED past a bound (nothing stored), I/O errors (the file is
    /// cut back; nothing stored).
    #[cfg(test)]
    pub fn write_batch(&mut self, updates: &[ShareWrite]) -> Result<(), BrokerError> {
        let ops: Vec<ShareOp> = updates.iter().cloned().map(ShareOp::Update).collect();
        self.commit(&[&ops]).pop().unwrap_or(Ok(()))
    }

    /// Forgets every partition of `group`, durably as [`Self::write_batch`].
    ///
    /// # Errors
    /// I/O errors.
    #[cfg(test)]
    pub fn remove_group(&mut self, group: &str) -> Result<(), BrokerError> {
        let op = [ShareOp::RemoveGroup(group.to_owned())];
        self.commit(&[&op]).pop().unwrap_or(Ok(()))
    }

    /// Forgets one share-partition, durably as [`Self::write_batch`].
    ///
    /// # Errors
    /// I/O errors.
    #[cfg(test)]
    pub fn remove_partition(
        &mut self,
        group: &str,
        topic: &str,
        partition: i32,
    ) -> Result<(), BrokerError> {
        let op = [ShareOp::RemovePartition((
            group.to_owned(),
            topic.to_owned(),
            partition,
        ))];
        self.commit(&[&op]).pop().unwrap_or(Ok(()))
    }

    /// Forgets the partitions of `topic` in every group (the topic was
    /// deleted), durably as [`Self::write_batch`].
    ///
    /// # Errors
    /// I/O errors.
    #[cfg(test)]
    pub fn remove_topic(&mut self, topic: &str) -> Result<(), BrokerError> {
        let op = [ShareOp::RemoveTopic(topic.to_owned())];
        self.commit(&[&op]).pop().unwrap_or(Ok(()))
    }

    /// Stores several jobs (each a list of changes applied all or nothing)
    /// with one write and, as the fsync policy says, one fsync; returns one
    /// result per job, in order. A job that would take the store past a
    /// bound is refused (LIMIT_REACHED) and the others go ahead. After a
    /// failed write or fsync the file is cut back to its previous size and
    /// none of the batch is applied. The changes become visible (to
    /// [`Self::get`] and the writer's readers) only once written.
    pub fn commit(&mut self, jobs: &[&[ShareOp]]) -> Vec<Result<(), BrokerError>> {
        let ts = self.clock.wall_ms();
        let mut results: Vec<Result<(), BrokerError>> = Vec::with_capacity(jobs.len());
        let mut buf = Vec::new();
        let (over, kept) = {
            let map = read_map(&self.map);
            let fresh = || Stage::new(&map, self.limits, self.kept);
            let mut stage = fresh();
            for job in jobs {
                match stage.job(job, Some((&mut buf, ts))) {
                    Ok(()) => results.push(Ok(())),
                    Err(e) => {
                        results.push(Err(e));
                        // Undo the refused job's part: redo the others.
                        stage = fresh();
                        buf.clear();
                        for (i, job) in jobs.iter().enumerate().take(results.len()) {
                            if results[i].is_ok() {
                                results[i] = stage.job(job, Some((&mut buf, ts)));
                            }
                        }
                    }
                }
            }
            (stage.over, stage.records)
        };
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
            for (key, v) in over {
                match v {
                    Some(k) => {
                        map.insert(key, k);
                    }
                    None => {
                        map.remove(&key);
                    }
                }
            }
        }
        self.kept = kept;
        self.maybe_compact();
        results
    }

    /// Appends `buf` and applies the fsync policy; on failure cuts the file back.
    fn write_durably(&mut self, buf: &[u8]) -> Result<(), BrokerError> {
        let written = if self.faults.write_fault() {
            // A short write, then the error: what a full or failing disk gives.
            let half = buf.get(..buf.len() / 2).unwrap_or_default();
            self.file
                .write_all_at(half, self.size)
                .and(Err(injected("write")))
        } else {
            self.file.write_all_at(buf, self.size)
        }
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
                tracing::error!(file = %self.path.display(), error = %t, "could not cut back a failed share-state write");
            }
            return Err(e);
        }
        self.size += buf.len() as u64;
        Ok(())
    }

    /// Bytes the live state takes as full updates (what a compaction writes).
    pub fn live_bytes(&self) -> u64 {
        let map = read_map(&self.map);
        let body: u64 = map
            .iter()
            .map(|((g, t, _), k)| full_record_len(g, t, runs_of(k)) as u64)
            .sum();
        HEADER_LEN as u64 + body
    }

    /// The compaction rule (module docs), evaluated when the file has grown
    /// past the size of the last evaluation by a quarter, so its cost (a pass
    /// over the live state) is spread over at least that many written bytes.
    fn maybe_compact(&mut self) {
        if self.size < self.next_check {
            return;
        }
        let live = self.live_bytes();
        if self.size >= self.compact_min_bytes && self.size > live.saturating_mul(4) {
            if let Err(e) = self.compact() {
                tracing::warn!(error = %e, "share-state compaction failed; the file keeps growing until it succeeds");
                self.next_check = self.size.saturating_add(self.size / 4);
            }
        } else {
            self.next_check = self
                .compact_min_bytes
                .max(live.saturating_mul(4))
                .max(self.size.saturating_add(self.size / 4));
        }
    }

    /// Rewrites the file with one full update per share-partition (temp
    /// file, fsync, rename, fsync of the directory: a crash leaves the old
    /// file or the new one).
    ///
    /// # Errors
    /// I/O errors before the rename; the old file stays in place then.
    pub fn compact(&mut self) -> Result<(), BrokerError> {
        let tmp = tmp_path(&self.path);
        let ts = self.clock.wall_ms();
        let mut buf = SHARE_MAGIC.to_vec();
        {
            let map = read_map(&self.map);
            let mut keys: Vec<&ShareKey> = map.keys().collect();
            keys.sort_unstable();
            for key in keys {
                if let Some(k) = map.get(key) {
                    encode_full(&mut buf, ts, key, k);
                }
            }
        }
        let r = self.swap_in(&tmp, &buf);
        if r.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        r
    }

    fn swap_in(&mut self, tmp: &Path, buf: &[u8]) -> Result<(), BrokerError> {
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(tmp)
            .map_err(io(format!("create {}", tmp.display())))?;
        if self.faults.write_fault() {
            let half = buf.get(..buf.len() / 2).unwrap_or_default();
            f.write_all(half).and(Err(injected("write")))
        } else {
            f.write_all(buf)
        }
        .map_err(io(format!("write {}", tmp.display())))?;
        self.step(CompactStep::Written);
        if self.faults.fsync_fault() {
            return Err(io(format!("fsync {}", tmp.display()))(injected("fsync")));
        }
        f.sync_all()
            .map_err(io(format!("fsync {}", tmp.display())))?;
        self.step(CompactStep::Synced);
        std::fs::rename(tmp, &self.path).map_err(io(format!("rename {}", tmp.display())))?;
        // The handle now names the new file: appends go on there.
        self.file = f;
        self.size = buf.len() as u64;
        self.dirty = false;
        self.next_check = self.compact_min_bytes.max(self.size.saturating_mul(4));
        self.step(CompactStep::Renamed);
        if let Err(e) = self.fsync_dir() {
            // The rename may not survive a power loss yet: the next fsync of
            // an append does this first, so nothing written to the new file
            // is acknowledged as durable before its name is.
            tracing::warn!(file = %self.path.display(), error = %e, "fsync of the directory after the share-state compaction failed; retried before the next fsync");
            self.dir_unsynced = true;
        }
        self.step(CompactStep::Done);
        Ok(())
    }

    fn fsync_dir(&mut self) -> Result<(), BrokerError> {
        let Some(dir) = self.path.parent() else {
            return Ok(());
        };
        if self.faults.dir_fsync_fault() {
            return Err(io(format!("fsync directory {}", dir.display()))(injected(
                "directory fsync",
            )));
        }
        crate::storage::fsync_dir(dir)?;
        self.dir_unsynced = false;
        Ok(())
    }

    #[cfg(test)]
    fn step(&mut self, step: CompactStep) {
        if let Some(h) = &mut self.hook {
            (h.0)(step);
        }
    }

    #[cfg(not(test))]
    fn step(&mut self, _step: CompactStep) {}

    /// Fsyncs the file (and the directory first, if a compaction's rename
    /// is not yet durable).
    ///
    /// # Errors
    /// I/O errors.
    pub fn sync(&mut self) -> Result<(), BrokerError> {
        if self.dir_unsynced {
            self.fsync_dir()?;
        }
        if self.faults.fsync_fault() {
            return Err(io(format!("fsync {}", self.path.display()))(injected(
                "fsync",
            )));
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

    /// The file's size.
    #[cfg(test)]
    pub fn file_bytes(&self) -> u64 {
        self.size
    }

    /// Number of fsyncs of the file so far.
    #[cfg(test)]
    pub fn fsync_count(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Faults to inject into the file's writes and fsyncs (tests).
    #[cfg(test)]
    pub(crate) fn faults(&self) -> &FaultInjector {
        &self.faults
    }

    #[cfg(test)]
    pub(crate) fn set_step_hook(&mut self, f: impl FnMut(CompactStep) + Send + 'static) {
        self.hook = Some(StepHook(Box::new(f)));
    }

    #[cfg(test)]
    pub(crate) fn set_compact_min(&mut self, n: u64) {
        self.compact_min_bytes = n;
        self.next_check = n;
    }

    #[cfg(test)]
    pub(crate) fn set_limits(&mut self, partitions: usize, records: usize) {
        self.limits = Limits {
            partitions,
            records,
        };
    }
}

fn tmp_path(path: &Path) -> PathBuf {
    path.with_extension("log.tmp")
}

/// The changes of a batch staged over the kept state: touched entries are
/// copied here and changed, and move into the map once written.
struct Stage<'m> {
    base: &'m Map,
    /// Changed entries: `None` removed.
    over: HashMap<ShareKey, Option<Kept>>,
    /// Entries visible (base and over).
    keys: usize,
    /// Records visible.
    records: usize,
    limits: Limits,
}

impl<'m> Stage<'m> {
    fn new(base: &'m Map, limits: Limits, records: usize) -> Self {
        Stage {
            base,
            over: HashMap::new(),
            keys: base.len(),
            records,
            limits,
        }
    }

    fn current(&self, key: &ShareKey) -> Option<&Kept> {
        match self.over.get(key) {
            Some(v) => v.as_ref(),
            None => self.base.get(key),
        }
    }

    /// The visible keys `pick` selects.
    fn keys_where(&self, pick: impl Fn(&ShareKey) -> bool) -> Vec<ShareKey> {
        let mut v: Vec<ShareKey> = self
            .over
            .iter()
            .filter(|(k, v)| v.is_some() && pick(k))
            .map(|(k, _)| k.clone())
            .collect();
        v.extend(
            self.base
                .keys()
                .filter(|k| !self.over.contains_key(*k) && pick(k))
                .cloned(),
        );
        v.sort_unstable();
        v
    }

    /// Applies one job, all or nothing as far as the caller is concerned (a
    /// refused job leaves the stage to be rebuilt), encoding its records
    /// into `out` with timestamp `ts`.
    fn job(
        &mut self,
        ops: &[ShareOp],
        mut out: Option<(&mut Vec<u8>, i64)>,
    ) -> Result<(), BrokerError> {
        for op in ops {
            self.op(op, out.as_mut().map(|(b, ts)| (&mut **b, *ts)))?;
        }
        Ok(())
    }

    fn op(&mut self, op: &ShareOp, out: Option<(&mut Vec<u8>, i64)>) -> Result<(), BrokerError> {
        match op {
            ShareOp::Update((group, topic, partition, update)) => {
                let key = (group.clone(), topic.clone(), *partition);
                self.update(key, update)?;
                if let Some((buf, ts)) = out {
                    encode_update(buf, ts, group, topic, *partition, update);
                }
            }
            ShareOp::RemoveGroup(group) => {
                let gone = self.keys_where(|k| k.0 == *group);
                if gone.is_empty() {
                    return Ok(());
                }
                for k in &gone {
                    self.remove(k);
                }
                if let Some((buf, ts)) = out {
                    record::encode(
                        buf,
                        0,
                        ts,
                        Some(group.as_bytes()),
                        &[KIND_GROUP_DELETED],
                        &[],
                    );
                }
            }
            ShareOp::RemovePartition(key) => {
                if self.remove(key) {
                    if let Some((buf, ts)) = out {
                        encode_forgotten(buf, ts, key);
                    }
                }
            }
            ShareOp::RemoveTopic(topic) => {
                let gone = self.keys_where(|k| k.1 == *topic);
                for k in &gone {
                    self.remove(k);
                }
                if let Some((buf, ts)) = out {
                    for k in &gone {
                        encode_forgotten(buf, ts, k);
                    }
                }
            }
        }
        Ok(())
    }

    fn update(&mut self, key: ShareKey, u: &ShareUpdate) -> Result<(), BrokerError> {
        let (group, topic, partition) = (&key.0, &key.1, key.2);
        if topic.len() > i16::MAX as usize {
            return Err(BrokerError::code_for(
                ErrorCode::InvalidRequest,
                format!("topic name of {} bytes", topic.len()),
            ));
        }
        if u.state.records.len() > MAX_PARTITION_RECORDS {
            return Err(limit(format!(
                "a share-state update of {group}/{topic}/{partition} carries {} records, the limit is {MAX_PARTITION_RECORDS}",
                u.state.records.len()
            )));
        }
        let (exists, old_len, new_len) = match self.current(&key) {
            Some(k) => (true, k.records.len(), k.len_after(u)),
            None => (false, 0, Kept::default().len_after(u)),
        };
        if !exists && self.keys >= self.limits.partitions {
            return Err(limit(format!(
                "the share-state store holds {} (group, topic, partition) entries, the limit is {}",
                self.keys, self.limits.partitions
            )));
        }
        if new_len > MAX_PARTITION_RECORDS {
            return Err(limit(format!(
                "share-partition {group}/{topic}/{partition} would keep {new_len} records, the limit is {MAX_PARTITION_RECORDS}"
            )));
        }
        let records = self.records - old_len + new_len;
        if new_len > old_len && records > self.limits.records {
            return Err(limit(format!(
                "the share-state store holds {} records, the limit is {}",
                self.records, self.limits.records
            )));
        }
        let base = self.base;
        let slot = self
            .over
            .entry(key)
            .or_insert_with_key(|k| base.get(k).cloned());
        slot.get_or_insert_with(Kept::default).apply(u);
        self.keys += usize::from(!exists);
        self.records = records;
        Ok(())
    }

    /// Removes a visible entry; false when there is none.
    fn remove(&mut self, key: &ShareKey) -> bool {
        let Some(len) = self.current(key).map(|k| k.records.len()) else {
            return false;
        };
        if self.base.contains_key(key) {
            self.over.insert(key.clone(), None);
        } else {
            self.over.remove(key);
        }
        self.keys -= 1;
        self.records -= len;
        true
    }
}

fn state_code(s: SnapshotState) -> u8 {
    match s {
        SnapshotState::Available => 0,
        SnapshotState::Acknowledged => 1,
        SnapshotState::Archived => 2,
    }
}

fn state_from(code: u8) -> Option<SnapshotState> {
    Some(match code {
        0 => SnapshotState::Available,
        1 => SnapshotState::Acknowledged,
        2 => SnapshotState::Archived,
        _ => return None,
    })
}

/// One run: `count` consecutive offsets from `first` with one state and count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    first: i64,
    count: u32,
    state: SnapshotState,
    delivery_count: u16,
}

/// The runs of records in the order given.
fn runs(records: impl Iterator<Item = (i64, SnapshotState, u16)>) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for (o, s, d) in records {
        if let Some(r) = out.last_mut() {
            let next = r.first.checked_add(i64::from(r.count));
            if next == Some(o) && r.state == s && r.delivery_count == d && r.count < u32::MAX {
                r.count += 1;
                continue;
            }
        }
        out.push(Run {
            first: o,
            count: 1,
            state: s,
            delivery_count: d,
        });
    }
    out
}

fn runs_of(k: &Kept) -> usize {
    runs(k.records.iter().map(|(&o, &(s, d))| (o, s, d))).len()
}

/// Bytes of an update record: the record header, the payload's fixed fields,
/// the group as key and the value.
fn full_record_len(group: &str, topic: &str, runs: usize) -> usize {
    RECORD_HEADER_LEN + MIN_PAYLOAD_LEN + group.len() + update_value_len(topic, runs)
}

fn update_value_len(topic: &str, runs: usize) -> usize {
    1 + 2 + topic.len() + 4 + 1 + 8 + 8 + 4 + runs * RUN_LEN
}

fn update_value(
    topic: &str,
    partition: i32,
    full: bool,
    s: &ShareSnapshot,
    runs: &[Run],
) -> Vec<u8> {
    let mut v = Vec::with_capacity(update_value_len(topic, runs.len()));
    v.put_u8(KIND_UPDATE);
    v.put_string(topic);
    v.put_i32(partition);
    v.put_u8(u8::from(full));
    v.put_i64(s.start_offset);
    v.put_i64(s.end_offset);
    // At most MAX_PARTITION_RECORDS runs (checked by the caller).
    v.put_u32(u32::try_from(runs.len()).unwrap_or(u32::MAX));
    for r in runs {
        v.put_i64(r.first);
        v.put_u32(r.count);
        v.put_u8(state_code(r.state));
        v.put_u16(r.delivery_count);
    }
    v
}

fn encode_update(
    buf: &mut Vec<u8>,
    ts: i64,
    group: &str,
    topic: &str,
    partition: i32,
    u: &ShareUpdate,
) {
    let runs = runs(u.state.records.iter().copied());
    let value = update_value(topic, partition, u.full, &u.state, &runs);
    record::encode(buf, 0, ts, Some(group.as_bytes()), &value, &[]);
}

fn encode_full(buf: &mut Vec<u8>, ts: i64, key: &ShareKey, k: &Kept) {
    let runs = runs(k.records.iter().map(|(&o, &(s, d))| (o, s, d)));
    let s = ShareSnapshot {
        start_offset: k.start,
        end_offset: k.end,
        records: Vec::new(),
    };
    let value = update_value(&key.1, key.2, true, &s, &runs);
    record::encode(buf, 0, ts, Some(key.0.as_bytes()), &value, &[]);
}

fn encode_forgotten(buf: &mut Vec<u8>, ts: i64, key: &ShareKey) {
    let mut v = Vec::with_capacity(1 + 2 + key.1.len() + 4);
    v.put_u8(KIND_PARTITION_FORGOTTEN);
    v.put_string(&key.1);
    v.put_i32(key.2);
    record::encode(buf, 0, ts, Some(key.0.as_bytes()), &v, &[]);
}

/// One record of the file as a change; `None` when it does not decode (or
/// its offset field is not 0, so that every byte of a record is checked).
fn decode(r: &RawRecord<'_>) -> Option<ShareOp> {
    if r.offset != 0 || r.attributes() != 0 {
        return None;
    }
    let (key, value) = r.key_value()?;
    let group = String::from_utf8(key?.to_vec()).ok()?;
    let mut rd = Reader::new(value?);
    let op = match rd.u8().ok()? {
        KIND_UPDATE => {
            let topic = rd.string().ok()?;
            let partition = rd.i32().ok()?;
            let full = match rd.u8().ok()? {
                0 => false,
                1 => true,
                _ => return None,
            };
            let start_offset = rd.i64().ok()?;
            let end_offset = rd.i64().ok()?;
            let n = usize::try_from(rd.u32().ok()?).ok()?;
            if n.checked_mul(RUN_LEN)? != rd.remaining() {
                return None;
            }
            let raw = rd.take(n * RUN_LEN).ok()?;
            let records = expand_runs(raw)?;
            ShareOp::Update((
                group,
                topic,
                partition,
                ShareUpdate {
                    full,
                    state: ShareSnapshot {
                        start_offset,
                        end_offset,
                        records,
                    },
                },
            ))
        }
        KIND_GROUP_DELETED => ShareOp::RemoveGroup(group),
        KIND_PARTITION_FORGOTTEN => {
            let topic = rd.string().ok()?;
            let partition = rd.i32().ok()?;
            ShareOp::RemovePartition((group, topic, partition))
        }
        _ => return None,
    };
    rd.finish().ok()?;
    Some(op)
}

/// The records of encoded runs; `None` for a run that is empty, overflows
/// the offsets or has an unknown state, or more than
/// [`MAX_PARTITION_RECORDS`] records in all (checked before allocating).
fn expand_runs(raw: &[u8]) -> Option<Vec<(i64, SnapshotState, u16)>> {
    let parse = |c: &[u8]| -> Option<Run> {
        let mut rd = Reader::new(c);
        let first = rd.i64().ok()?;
        let count = rd.u32().ok()?;
        let state = state_from(rd.u8().ok()?)?;
        let delivery_count = rd.u16().ok()?;
        if count == 0 {
            return None;
        }
        first.checked_add(i64::from(count) - 1)?;
        Some(Run {
            first,
            count,
            state,
            delivery_count,
        })
    };
    let mut total = 0usize;
    for c in raw.chunks_exact(RUN_LEN) {
        total = total.checked_add(usize::try_from(parse(c)?.count).ok()?)?;
        if total > MAX_PARTITION_RECORDS {
            return None;
        }
    }
    let mut records = Vec::with_capacity(total);
    for c in raw.chunks_exact(RUN_LEN) {
        let r = parse(c)?;
        for i in 0..i64::from(r.count) {
            records.push((r.first + i, r.state, r.delivery_count));
        }
    }
    Some(records)
}

/// What the bytes of a share-state file hold.
struct Replay {
    map: Map,
    /// Records kept over all entries.
    kept: usize,
    /// Valid records in the file.
    records: usize,
    /// Bytes of whole, valid records after the header.
    valid: usize,
    /// Why the records stop before the end, if they do.
    damage: Option<String>,
}

/// Replays a share-state file (its header included, at least 8 bytes).
///
/// # Errors
/// A file of a newer version, or not a share-state file, as a message.
fn replay(raw: &[u8]) -> Result<Replay, String> {
    match raw.get(..HEADER_LEN) {
        Some(m) if *m == SHARE_MAGIC => {}
        Some(m) if m[..6] == SHARE_MAGIC[..6] => {
            return Err(format!(
                "share-state file version {} is not one this broker reads (1): it was written by a newer Flume",
                u16::from_be_bytes([m[6], m[7]])
            ))
        }
        _ => return Err("not a Flume share-state file (bad magic)".into()),
    }
    let body = raw.get(HEADER_LEN..).unwrap_or_default();
    let empty = Map::new();
    let mut stage = Stage::new(&empty, Limits::default(), 0);
    let mut records = 0;
    let mut valid = 0;
    let mut damage = None;
    for r in RecordIter::new(body) {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                damage = Some(describe_record_error(&e));
                break;
            }
        };
        let Some(op) = decode(&r) else {
            damage = Some("malformed share-state record (its fields do not decode)".into());
            break;
        };
        if let Err(e) = stage.op(&op, None) {
            damage = Some(format!("share-state record past the store's bounds: {e}"));
            break;
        }
        records += 1;
        valid = r.pos + r.encoded_len();
    }
    let kept = stage.records;
    let map = stage
        .over
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?)))
        .collect();
    Ok(Replay {
        map,
        kept,
        records,
        valid,
        damage,
    })
}

/// What `flume-cli data check` reports of the share-state file.
#[derive(Debug, Clone)]
pub struct ShareFileReport {
    /// The file.
    pub path: PathBuf,
    /// Its format version (0 when its header cannot be read).
    pub version: u16,
    /// Its size.
    pub bytes: u64,
    /// Valid records in it.
    pub records: usize,
    /// The share-partitions it keeps (group, topic, partition) with their
    /// start offsets and in-flight records, sorted.
    pub partitions: Vec<(ShareKey, i64, usize)>,
    /// Where and why its valid records stop before its end.
    pub damage: Option<Problem>,
}

/// Reads the share-state file at `path` without changing it: `None` when it
/// does not exist.
///
/// # Errors
/// I/O errors reading it.
pub fn check_share_file(path: &Path) -> Result<Option<ShareFileReport>, BrokerError> {
    let raw = match std::fs::read(path) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(format!("read {}", path.display()))(e)),
    };
    let mut report = ShareFileReport {
        path: path.to_path_buf(),
        version: 0,
        bytes: raw.len() as u64,
        records: 0,
        partitions: Vec::new(),
        damage: None,
    };
    let damage = |position: u64, what: String| Problem {
        file: path.to_path_buf(),
        offset: None,
        position: Some(position),
        what,
    };
    if raw.len() < HEADER_LEN {
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
            report.version = header_version(SHARE_MAGIC);
            report.records = r.records;
            let mut partitions: Vec<(ShareKey, i64, usize)> = r
                .map
                .into_iter()
                .map(|(k, v)| (k, v.start, v.records.len()))
                .collect();
            partitions.sort();
            report.partitions = partitions;
            if let Some(reason) = r.damage {
                let at = (HEADER_LEN + r.valid) as u64;
                report.damage = Some(damage(
                    at,
                    format!("{reason} (the broker cuts the file here at its next start, keeping the records before it)"),
                ));
            }
        }
        Err(reason) => report.damage = Some(damage(0, reason)),
    }
    Ok(Some(report))
}

/// The share-state file's format.
pub fn share_format() -> DiskFormat {
    DiskFormat {
        name: "share-group state (share.log)",
        writes: header_version(SHARE_MAGIC),
        reads: &[1],
    }
}

#[cfg(test)]
mod tests;

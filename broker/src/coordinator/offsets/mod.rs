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

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use event_listener::{Event, EventListener};
use flume_protocol::ErrorCode;
use flume_rt as rt;
use flume_rt::sync::lock;
use futures::channel::oneshot;

use crate::error::BrokerError;
use crate::storage::FsyncPolicy;

mod store;

#[cfg(test)]
use store::FsyncHook;
pub use store::{
    check_offsets_file, offsets_format, Commit, CommitOffsets, Committed, OffsetKey, OffsetStore,
    OffsetsFileReport, COMMIT_QUEUE_CAPACITY, MAX_METADATA_BYTES,
};
use store::{entries, for_topic, get, get_committed, read_map, Map};

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
        Self::open_with_clock(dir, policy, crate::clock::Clock::system())
    }

    /// As [`Self::open`], the records stamped by `clock` (the broker's).
    ///
    /// # Errors
    /// As [`OffsetStore::open`].
    pub fn open_with_clock(
        dir: &Path,
        policy: FsyncPolicy,
        clock: crate::clock::Clock,
    ) -> Result<Self, BrokerError> {
        Ok(Self::start(
            OffsetStore::open(dir, policy)?.with_clock(clock),
        ))
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

    /// Commits waiting for the writer (tests: the queue is bounded).
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.queue.len()
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

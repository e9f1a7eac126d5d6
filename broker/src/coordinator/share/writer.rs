//! [`ShareState`]: the share-state store with its writer task, what the
//! engine uses, as [`crate::coordinator::offsets::Offsets`] is for committed
//! offsets.
//!
//! Writes go through a bounded queue to one writer task (group commit): it
//! takes every job waiting, appends them with one write, applies the
//! broker's fsync policy once for the batch (`always`: fdatasync before any
//! is answered; `<ms>`: an fdatasync at most `<ms>` after a write, by the
//! writer or the broker's ticker through [`ShareState::maintain`]; `never`:
//! left to the OS), then makes them visible and answers each job through its
//! oneshot. The file work runs on the blocking pool, so an fsync never
//! blocks an executor thread. Reads (`get`, `groups`, `partitions_of`) take
//! a read lock on the map, which the writer holds only to move a written
//! batch in.

use std::path::Path;
#[cfg(test)]
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use event_listener::{Event, EventListener};
use flume_protocol::ErrorCode;
use flume_rt as rt;
use flume_rt::sync::lock;
use futures::channel::oneshot;

use super::partition::ShareSnapshot;
use super::store::{self, Map, ShareOp, ShareStore, ShareWrite};
use crate::error::BrokerError;
use crate::storage::FsyncPolicy;

/// Most jobs waiting for the share-state writer; a full queue makes writers
/// wait for room (each job is what one request changed, already bounded by
/// the request's size).
pub const SHARE_QUEUE_CAPACITY: usize = 1024;

/// Most jobs the writer takes in one group commit.
const WRITER_BATCH: usize = 256;

/// One job waiting for the writer: changes applied all or nothing.
#[derive(Debug)]
struct Job {
    ops: Vec<ShareOp>,
    ack: oneshot::Sender<Result<(), BrokerError>>,
}

/// Why a job was not queued.
#[derive(Debug)]
pub enum NotQueued {
    /// The queue is full: the changes come back; wait on [`ShareState::room`] and retry.
    Full(Vec<ShareOp>),
    /// The writer has stopped (shutdown).
    Closed,
}

/// The share state with its writer task (see the module docs).
#[derive(Debug)]
pub struct ShareState {
    store: Arc<Mutex<ShareStore>>,
    map: Arc<RwLock<Map>>,
    #[cfg(test)]
    syncs: Arc<AtomicU64>,
    queue: async_channel::Sender<Job>,
    room: Arc<Event>,
    writer: rt::sync::TaskSlot<()>,
}

impl ShareState {
    /// Opens the store in `dir` (`<data>/__share_state`) and starts its writer task.
    ///
    /// # Errors
    /// As [`ShareStore::open`].
    #[cfg(test)]
    pub fn open(dir: &Path, policy: FsyncPolicy) -> Result<Self, BrokerError> {
        Self::open_with_clock(dir, policy, crate::clock::Clock::system())
    }

    /// As [`Self::open`], the records stamped by `clock` (the broker's).
    ///
    /// # Errors
    /// As [`ShareStore::open`].
    pub fn open_with_clock(
        dir: &Path,
        policy: FsyncPolicy,
        clock: crate::clock::Clock,
    ) -> Result<Self, BrokerError> {
        Ok(Self::start(
            ShareStore::open(dir, policy)?.with_clock(clock),
        ))
    }

    /// Starts the writer task of an opened store.
    pub fn start(store: ShareStore) -> Self {
        let map = Arc::clone(&store.map);
        #[cfg(test)]
        let syncs = Arc::clone(&store.syncs);
        let store = Arc::new(Mutex::new(store));
        let (tx, rx) = async_channel::bounded(SHARE_QUEUE_CAPACITY);
        let room = Arc::new(Event::new());
        let writer = rt::spawn(writer_loop(rx, Arc::clone(&store), Arc::clone(&room)));
        ShareState {
            store,
            map,
            #[cfg(test)]
            syncs,
            queue: tx,
            room,
            writer: rt::sync::TaskSlot::new(writer),
        }
    }

    /// The kept state of a share-partition, if any (what
    /// `SharePartition::restore` takes). Writes are visible once answered.
    pub fn get(&self, group: &str, topic: &str, partition: i32) -> Option<ShareSnapshot> {
        store::get(&self.map, group, topic, partition)
    }

    /// The groups with kept state, sorted. Scans every entry.
    pub fn groups(&self) -> Vec<String> {
        store::groups(&self.map)
    }

    /// The partitions of `group` with kept state, sorted. Scans every entry.
    pub fn partitions_of(&self, group: &str) -> Vec<(String, i32)> {
        store::partitions_of(&self.map, group)
    }

    /// Queues a job without waiting; the receiver gets its result once it
    /// is written (and fsynced if the policy is `always`). Jobs are written
    /// in the order they are queued.
    ///
    /// # Errors
    /// [`NotQueued::Full`] (retry after [`ShareState::room`]) or [`NotQueued::Closed`].
    pub fn try_queue(
        &self,
        ops: Vec<ShareOp>,
    ) -> Result<oneshot::Receiver<Result<(), BrokerError>>, NotQueued> {
        let (ack, rx) = oneshot::channel();
        match self.queue.try_send(Job { ops, ack }) {
            Ok(()) => Ok(rx),
            Err(async_channel::TrySendError::Full(job)) => Err(NotQueued::Full(job.ops)),
            Err(async_channel::TrySendError::Closed(_)) => Err(NotQueued::Closed),
        }
    }

    /// A listener woken when the writer takes jobs off the queue. Create it
    /// before [`ShareState::try_queue`], so no wake-up is missed.
    pub fn room(&self) -> EventListener {
        self.room.listen()
    }

    /// Queues a job, waiting for room, and waits until it is stored.
    ///
    /// # Errors
    /// Storage errors, LIMIT_REACHED (a bound of the store), SHUTTING_DOWN.
    ///
    /// # Cancel safety
    /// Dropping the future after the job is queued does not unqueue it: it
    /// may still be written.
    pub async fn apply(&self, ops: Vec<ShareOp>) -> Result<(), BrokerError> {
        let mut ops = ops;
        loop {
            let room = self.room();
            match self.try_queue(ops) {
                Ok(rx) => return crate::coordinator::offsets::finish(rx).await,
                Err(NotQueued::Full(back)) => {
                    ops = back;
                    room.await;
                }
                Err(NotQueued::Closed) => return Err(ErrorCode::ShuttingDown.into()),
            }
        }
    }

    /// Stores share-partitions' updates (all or none) and returns once they
    /// are stored: synced under `always`, so an acknowledgement may be
    /// answered then.
    ///
    /// # Errors
    /// As [`ShareState::apply`].
    pub async fn write(&self, updates: Vec<ShareWrite>) -> Result<(), BrokerError> {
        self.apply(updates.into_iter().map(ShareOp::Update).collect())
            .await
    }

    /// Forgets every partition of a deleted share group, durably.
    ///
    /// # Errors
    /// As [`ShareState::apply`].
    pub async fn remove_group(&self, group: &str) -> Result<(), BrokerError> {
        self.apply(vec![ShareOp::RemoveGroup(group.to_owned())])
            .await
    }

    /// Forgets one share-partition, durably.
    ///
    /// # Errors
    /// As [`ShareState::apply`].
    pub async fn remove_partition(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
    ) -> Result<(), BrokerError> {
        self.apply(vec![ShareOp::RemovePartition((
            group.to_owned(),
            topic.to_owned(),
            partition,
        ))])
        .await
    }

    /// Forgets a deleted topic's partitions in every group, durably.
    ///
    /// # Errors
    /// As [`ShareState::apply`].
    pub async fn remove_topic(&self, topic: &str) -> Result<(), BrokerError> {
        self.apply(vec![ShareOp::RemoveTopic(topic.to_owned())])
            .await
    }

    /// Stores changes at once on the calling thread, bypassing the queue
    /// (embedded mode, which has no executor of its own to wait on).
    ///
    /// # Errors
    /// As [`ShareStore::commit`].
    pub fn apply_now(&self, ops: &[ShareOp]) -> Result<(), BrokerError> {
        lock(&self.store).commit(&[ops]).pop().unwrap_or(Ok(()))
    }

    /// Under the interval policy, fsyncs the file if a write is older than
    /// the interval; off the executor. Called by the broker's ticker.
    pub async fn maintain(&self) {
        let store = Arc::clone(&self.store);
        let r = rt::unblock(move || lock(&store).sync_if_due(Instant::now())).await;
        if let Err(e) = r {
            tracing::error!(error = %e, "interval fsync of the share state failed");
        }
    }

    /// Number of fsyncs of the share-state file so far.
    #[cfg(test)]
    pub fn fsync_count(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Jobs waiting for the writer (tests: the queue is bounded).
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.queue.len()
    }

    /// The store, for tests that inject faults or look at the file.
    #[cfg(test)]
    pub(crate) fn store(&self) -> &Mutex<ShareStore> {
        &self.store
    }

    /// Stops taking jobs, lets the writer finish the queued ones and fsyncs the file.
    pub async fn shutdown(&self) {
        self.queue.close();
        self.writer.join().await;
        let store = Arc::clone(&self.store);
        if let Err(e) = rt::unblock(move || lock(&store).sync()).await {
            tracing::error!(error = %e, "fsync of the share state failed at shutdown");
        }
    }
}

async fn writer_loop(
    rx: async_channel::Receiver<Job>,
    store: Arc<Mutex<ShareStore>>,
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
            let batch: Vec<&[ShareOp]> = jobs.iter().map(|j| j.ops.as_slice()).collect();
            let results = lock(&store).commit(&batch);
            (jobs, results)
        })
        .await;
        for (job, r) in jobs.into_iter().zip(results) {
            let _ = job.ack.send(r);
        }
    }
}

#[cfg(test)]
mod tests;

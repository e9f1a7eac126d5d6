//! A partition: a [`Log`] plus a bounded queue drained by one writer task.
//!
//! The writer takes everything waiting (up to `writer_batch_bytes`), copies it
//! into one reused buffer, appends it with one write (group commit), applies
//! the fsync policy once for the batch, then acknowledges each request with
//! its base offset. Queued appends and all reads run on the blocking pool
//! (`rt::unblock`), so a slow disk (fsync, dirty-page throttling, cold reads)
//! stalls only that pool, never the executor threads that serve connections.
//!
//! Fast path: with fsync `Never`, a small append (at most [`INLINE_MAX_BYTES`])
//! that finds the partition idle (nothing queued or being written) is written
//! to the page cache inline by the connection task, saving the two thread
//! hand-offs that dominate one-record-at-a-time latency. Order is kept: the
//! fast path is taken only while no earlier request is pending.
//!
//! Fail-stop: once a write or fsync has failed, the log has cut off what was
//! not acknowledged and refuses appends (see [`crate::storage::log`]); the
//! partition answers every later append with STORAGE_ERROR at once, keeps
//! serving what was acknowledged, and recovers only at the broker's restart.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use event_listener::{Event, EventListener};
use flume_protocol::ErrorCode;
use flume_rt as rt;
use futures::channel::oneshot;

use crate::config::Backpressure;
use crate::error::BrokerError;
use crate::storage::{FsyncPolicy, Log, ReadResult, StorageError};

/// The outcome of an append: the base offset, or an error code.
pub type AppendResult = Result<u64, ErrorCode>;

/// Largest append taken by the inline fast path.
pub const INLINE_MAX_BYTES: usize = 64 * 1024;

/// One queued append: validated records of one partition.
#[derive(Debug)]
pub struct AppendRequest {
    /// Records in the stored format (shared with the request frame, not copied).
    pub batch: Bytes,
    /// Number of records.
    pub count: u32,
    /// Largest timestamp.
    pub max_timestamp: i64,
    /// Where the result goes.
    pub ack: oneshot::Sender<AppendResult>,
}

/// An admitted append: done already (fast path) or queued.
#[derive(Debug)]
pub enum Admission {
    /// Appended inline.
    Done(AppendResult),
    /// Queued; the writer will answer.
    Queued(oneshot::Receiver<AppendResult>),
}

impl Admission {
    /// The base offset once the append is done.
    ///
    /// # Errors
    /// The append's failure, or SHUTTING_DOWN if the writer went away.
    pub async fn wait(self) -> AppendResult {
        match self {
            Admission::Done(r) => r,
            Admission::Queued(rx) => rx.await.unwrap_or(Err(ErrorCode::ShuttingDown)),
        }
    }
}

#[derive(Debug)]
struct Shared {
    topic: String,
    id: u32,
    log: RwLock<Log>,
    /// Notified after every append, for long-poll fetches.
    data: Event,
    end: AtomicU64,
    start: AtomicU64,
    failed: AtomicBool,
    /// Requests queued or being written; the fast path needs 0.
    pending: AtomicUsize,
    /// Records and bytes in and out, for metrics.
    stats: crate::metrics::PartitionStats,
}

/// A partition of a topic.
#[derive(Debug)]
pub struct Partition {
    /// Topic name.
    pub topic: String,
    /// Partition number.
    pub id: u32,
    shared: Arc<Shared>,
    queue: async_channel::Sender<AppendRequest>,
    backpressure: Backpressure,
    inline_ok: bool,
    writer: rt::sync::TaskSlot<()>,
}

pub(crate) fn read_lock(log: &RwLock<Log>) -> std::sync::RwLockReadGuard<'_, Log> {
    log.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(crate) fn write_lock(log: &RwLock<Log>) -> std::sync::RwLockWriteGuard<'_, Log> {
    log.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    /// Appends `batch` (already contiguous) under the lock; updates the
    /// cached end offset and wakes long polls.
    fn append(&self, log: &mut Log, batch: &mut [u8], count: u64, max_ts: i64) -> AppendResult {
        let started = std::time::Instant::now();
        let appended = log.append_validated(batch, count, max_ts);
        crate::metrics::APPEND_LATENCY.observe(started.elapsed());
        match appended {
            Ok(base) => {
                self.stats.appended(count, batch.len());
                self.end.store(log.end_offset(), Ordering::Release);
                Ok(base)
            }
            Err(e) => {
                self.failed.store(true, Ordering::Release);
                tracing::error!(topic = %self.topic, partition = self.id, error = %e, "append failed; producers get STORAGE_ERROR");
                Err(ErrorCode::StorageError)
            }
        }
    }
}

impl Partition {
    /// Wraps an opened log and starts its writer task.
    pub fn start(
        topic: &str,
        id: u32,
        log: Log,
        max_pending: usize,
        backpressure: Backpressure,
        batch_bytes: usize,
    ) -> Self {
        let (tx, rx) = async_channel::bounded(max_pending.max(1));
        let inline_ok = log.config().fsync == FsyncPolicy::Never;
        let shared = Arc::new(Shared {
            topic: topic.to_owned(),
            id,
            end: AtomicU64::new(log.end_offset()),
            start: AtomicU64::new(log.start_offset()),
            log: RwLock::new(log),
            data: Event::new(),
            failed: AtomicBool::new(false),
            pending: AtomicUsize::new(0),
            stats: crate::metrics::PartitionStats::default(),
        });
        let writer = rt::spawn(writer_loop(rx, Arc::clone(&shared), batch_bytes));
        Partition {
            topic: topic.to_owned(),
            id,
            shared,
            queue: tx,
            backpressure,
            inline_ok,
            writer: rt::sync::TaskSlot::new(writer),
        }
    }

    /// Offset the next record gets.
    pub fn end_offset(&self) -> u64 {
        self.shared.end.load(Ordering::Acquire)
    }

    /// Oldest stored offset.
    pub fn start_offset(&self) -> u64 {
        self.shared.start.load(Ordering::Acquire)
    }

    /// Its number and offsets, in the domain's widths.
    pub fn offsets(&self) -> crate::domain::PartitionOffsets {
        crate::domain::PartitionOffsets {
            partition: i32::try_from(self.id).unwrap_or(i32::MAX),
            log_start: i64::try_from(self.start_offset()).unwrap_or(i64::MAX),
            log_end: i64::try_from(self.end_offset()).unwrap_or(i64::MAX),
        }
    }

    /// Records and bytes in and out of the partition.
    pub fn stats(&self) -> &crate::metrics::PartitionStats {
        &self.shared.stats
    }

    /// Bytes of segment files and their number (takes the log's read lock).
    pub fn disk_usage(&self) -> (u64, usize) {
        let log = read_lock(&self.shared.log);
        (log.size_bytes(), log.segment_count())
    }

    /// Requests waiting in the queue.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Capacity of the queue.
    pub fn capacity(&self) -> usize {
        self.queue.capacity().unwrap_or(usize::MAX)
    }

    /// A listener notified at the next append. Create it before checking
    /// for data, then await it, so no append is missed.
    pub fn listen(&self) -> EventListener {
        self.shared.data.listen()
    }

    fn try_inline(&self, batch: &Bytes, count: u32, max_timestamp: i64) -> Option<AppendResult> {
        if !self.inline_ok
            || batch.len() > INLINE_MAX_BYTES
            || self.shared.pending.load(Ordering::Acquire) != 0
        {
            return None;
        }
        let mut log = match self.shared.log.try_write() {
            Ok(l) => l,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        // Checked again under the lock: no earlier request may still be waiting.
        if self.shared.pending.load(Ordering::Acquire) != 0 || self.queue.is_closed() {
            return None;
        }
        let mut buf = batch.to_vec();
        let r = self
            .shared
            .append(&mut log, &mut buf, u64::from(count), max_timestamp);
        drop(log);
        self.shared.data.notify(usize::MAX);
        Some(r)
    }

    /// Admits an append: inline when the partition is idle (fast path),
    /// else queued. In block mode a full queue waits for room; in reject
    /// mode it is QUEUE_FULL at once.
    ///
    /// # Errors
    /// QUEUE_FULL (reject mode), SHUTTING_DOWN (queue closed), STORAGE_ERROR
    /// once a write or fsync of the partition has failed.
    ///
    /// # Cancel safety
    /// Cancelling while waiting for room queues nothing.
    pub async fn enqueue(
        &self,
        batch: Bytes,
        count: u32,
        max_timestamp: i64,
    ) -> Result<Admission, ErrorCode> {
        if self.has_failed_write() {
            return Err(ErrorCode::StorageError);
        }
        if let Some(r) = self.try_inline(&batch, count, max_timestamp) {
            return Ok(Admission::Done(r));
        }
        let (ack, rx) = oneshot::channel();
        let req = AppendRequest {
            batch,
            count,
            max_timestamp,
            ack,
        };
        self.shared.pending.fetch_add(1, Ordering::AcqRel);
        let sent = match self.backpressure {
            Backpressure::Block => self
                .queue
                .send(req)
                .await
                .map_err(|_| ErrorCode::ShuttingDown),
            Backpressure::Reject => self.queue.try_send(req).map_err(|e| match e {
                async_channel::TrySendError::Full(_) => ErrorCode::QueueFull,
                async_channel::TrySendError::Closed(_) => ErrorCode::ShuttingDown,
            }),
        };
        if let Err(code) = sent {
            self.shared.pending.fetch_sub(1, Ordering::AcqRel);
            return Err(code);
        }
        Ok(Admission::Queued(rx))
    }

    /// Admits an append and waits for its base offset.
    ///
    /// # Errors
    /// As [`Partition::enqueue`], or the append's failure.
    pub async fn append(
        &self,
        batch: Bytes,
        count: u32,
        max_timestamp: i64,
    ) -> Result<u64, ErrorCode> {
        self.enqueue(batch, count, max_timestamp)
            .await?
            .wait()
            .await
    }

    /// Reads whole records from `offset` (at least one if any), off the executor.
    ///
    /// # Errors
    /// Out of range, or a corrupt record.
    pub async fn read(&self, offset: u64, max_bytes: usize) -> Result<ReadResult, BrokerError> {
        if offset == self.end_offset() && offset >= self.start_offset() {
            return Ok(ReadResult {
                records: Vec::new(),
                log_start: self.start_offset(),
                log_end: offset,
            });
        }
        let shared = Arc::clone(&self.shared);
        let r = rt::unblock(move || read_lock(&shared.log).read(offset, max_bytes)).await;
        r.map_err(|e| {
            if let StorageError::Corrupt { .. } = e {
                tracing::error!(topic = %self.topic, partition = self.id, error = %e, "corrupt record; not served");
            }
            BrokerError::from(e)
        })
    }

    /// Reads synchronously (embedded mode, tests).
    ///
    /// # Errors
    /// As [`Partition::read`].
    pub fn read_now(&self, offset: u64, max_bytes: usize) -> Result<ReadResult, BrokerError> {
        Ok(read_lock(&self.shared.log).read(offset, max_bytes)?)
    }

    /// Runs retention and the interval fsync; called by the broker's ticker.
    pub async fn maintain(&self, now_ms: i64) {
        let shared = Arc::clone(&self.shared);
        let r = rt::unblock(move || {
            let mut l = write_lock(&shared.log);
            let synced = l.sync_if_due();
            if l.failure().is_some() {
                shared.failed.store(true, Ordering::Release);
            }
            synced?;
            l.enforce_retention(now_ms)?;
            Ok::<u64, StorageError>(l.start_offset())
        })
        .await;
        match r {
            Ok(start) => self.shared.start.store(start, Ordering::Release),
            Err(e) => {
                tracing::error!(topic = %self.topic, partition = self.id, error = %e, "maintenance failed")
            }
        }
    }

    /// True once a write or fsync has failed on disk: the partition takes no
    /// appends until the broker restarts, and keeps serving what was acknowledged.
    pub fn has_failed_write(&self) -> bool {
        self.shared.failed.load(Ordering::Acquire)
    }

    /// The fault hook of the partition's log, for tests (inert until armed).
    pub fn faults(&self) -> Arc<crate::storage::FaultInjector> {
        Arc::clone(read_lock(&self.shared.log).faults())
    }

    /// Closes the queue, lets the writer drain it, and fsyncs the log.
    pub async fn shutdown(&self) {
        self.queue.close();
        self.writer.join().await;
        let shared = Arc::clone(&self.shared);
        let r = rt::unblock(move || {
            let mut log = write_lock(&shared.log);
            // A stopped log is not fsynced again: a retried fsync can lie.
            if log.failure().is_some() {
                return Ok(());
            }
            log.sync()
        })
        .await;
        if let Err(e) = r {
            tracing::error!(topic = %self.topic, partition = self.id, error = %e, "fsync at shutdown failed");
        }
        self.shared.data.notify(usize::MAX);
    }
}

/// Largest buffer a partition writer keeps when its queue is empty.
const IDLE_WRITER_BUFFER: usize = 256 * 1024;

async fn writer_loop(
    rx: async_channel::Receiver<AppendRequest>,
    shared: Arc<Shared>,
    batch_bytes: usize,
) {
    // One buffer, reused for every group commit: no allocation or page faults per batch.
    let mut buf: Vec<u8> = Vec::new();
    while let Ok(first) = rx.recv().await {
        let mut reqs = vec![first];
        let mut bytes = reqs[0].batch.len();
        while bytes < batch_bytes {
            match rx.try_recv() {
                Ok(r) => {
                    bytes += r.batch.len();
                    reqs.push(r);
                }
                Err(_) => break,
            }
        }
        buf.clear();
        for r in &reqs {
            buf.extend_from_slice(&r.batch);
        }
        let count: u64 = reqs.iter().map(|r| u64::from(r.count)).sum();
        let max_ts = reqs.iter().map(|r| r.max_timestamp).max().unwrap_or(0);
        let sh = Arc::clone(&shared);
        let mut taken = std::mem::take(&mut buf);
        let (result, back) = rt::unblock(move || {
            let mut log = write_lock(&sh.log);
            let r = sh.append(&mut log, &mut taken, count, max_ts);
            // Counted down under the lock, so the fast path never overtakes a queued request.
            sh.pending.fetch_sub(reqs.len(), Ordering::AcqRel);
            drop(log);
            ((r, reqs), taken)
        })
        .await;
        buf = back;
        // The buffer is kept while appends keep coming; an idle writer lets a large
        // one go, so the memory held by idle partitions does not grow with the
        // largest group commit each ever made.
        if buf.capacity() > IDLE_WRITER_BUFFER && rx.is_empty() {
            buf = Vec::new();
        }
        let (result, reqs) = result;
        shared.data.notify(usize::MAX);
        let mut next = result;
        for r in reqs {
            let _ = r.ack.send(next);
            next = next.map(|b| b + u64::from(r.count));
        }
    }
}

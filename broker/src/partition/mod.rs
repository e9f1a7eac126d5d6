//! A partition: a [`Log`] plus a bounded queue drained by a writer task.
//!
//! Idle cost: a partition holds no writer task, no queue storage and no write
//! buffer while nothing is queued. The queue (`AppendQueue`) is bounded by
//! `max_pending` (a producer waits for room, or gets QUEUE_FULL in reject
//! mode, exactly as a preallocated channel would) but allocates its slots as
//! requests arrive and lets them go when it drains. The writer task is spawned
//! by the append that finds no writer running, and ends when the queue is
//! empty, dropping its buffer.
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
//! fast path is taken only while no earlier request is pending. Reads have
//! the same fast path: a read of at most [`HOT_READ_BYTES`] from the tail of
//! the active segment that this process wrote within [`HOT_READ_FRESH`] (a
//! consumer keeping up) is a page-cache copy and runs inline, unless an
//! append holds the log at that moment.
//!
//! Idempotent producers: an append may carry a [`ProducerBatch`]; its
//! sequence is checked against the partition's [`ProducerTable`] under the
//! log's write lock, by whichever path appends (the writer for a group
//! commit, request by request in queue order, or the fast path), so the
//! check and the append are one step with respect to every other append of
//! the partition. A retry of a stored batch is answered with its original
//! base offset and not written; a refused one is answered at once. Producer
//! entries are recorded before the group commit is written: if that write
//! fails the partition stops taking appends anyway (fail-stop, below).
//!
//! Fail-stop: once a write or fsync has failed, the log has cut off what was
//! not acknowledged and refuses appends (see `storage::log`); the
//! partition answers every later append with STORAGE_ERROR at once, keeps
//! serving what was acknowledged, and recovers only at the broker's restart.

pub mod producers;
pub mod txns;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use event_listener::{Event, EventListener};
use flume_protocol::ErrorCode;
use flume_rt as rt;
use futures::channel::oneshot;

use crate::config::Backpressure;
use crate::domain::{ProducerBatch, ProducerError};
use crate::error::BrokerError;
use crate::storage::{
    CleanStats, CleanerLimits, FsyncPolicy, Log, ReadAs, ReadResult, StorageError,
};
use producers::{ProducerLimits, ProducerTable, Verdict};
use txns::{Marker, TxnIndex};

/// The outcome of an append: the base offset, or an error code.
pub type AppendResult = Result<u64, ErrorCode>;

/// Where an append ended up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// Offset of the first record.
    pub base: u64,
    /// A retry of an idempotent batch already stored at `base`: nothing was written.
    pub duplicate: bool,
}

/// Why an append was not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A broker error (queue full, storage, shutting down, ...).
    Code(ErrorCode),
    /// The idempotent producer's batch was refused.
    Producer(ProducerError),
}

/// An append's outcome in full.
pub type Acked = Result<Stored, Refusal>;

fn appended(base: u64) -> Acked {
    Ok(Stored {
        base,
        duplicate: false,
    })
}

/// Largest append taken by the inline fast path.
pub const INLINE_MAX_BYTES: usize = 64 * 1024;

/// A read's result: a storage error, or the records or the code to answer
/// (UNKNOWN_TOPIC once the topic is deleted).
type ReadOutcome = Result<Result<ReadResult, ErrorCode>, StorageError>;

/// A read runs inline when all it touches lies in the last this many bytes
/// of the active segment ([`Partition::read`]'s fast path)...
pub const HOT_READ_BYTES: u64 = 256 * 1024;

/// ... and this process appended to the segment within this long: the
/// bytes are in the page cache.
pub const HOT_READ_FRESH: std::time::Duration = std::time::Duration::from_secs(10);

thread_local! {
    /// The inline fast path's copy of an append, reused: at most
    /// [`INLINE_MAX_BYTES`] per thread that appends inline.
    static INLINE_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One queued append: validated records of one partition.
#[derive(Debug)]
pub struct AppendRequest {
    /// Records in the stored format (shared with the request frame, not copied).
    pub batch: Bytes,
    /// Number of records.
    pub count: u32,
    /// Largest timestamp.
    pub max_timestamp: i64,
    /// The idempotent producer's stamp, if any.
    pub producer: Option<ProducerBatch>,
    /// Where the result goes.
    pub ack: oneshot::Sender<Acked>,
}

/// An admitted append: done already (fast path) or queued.
#[derive(Debug)]
pub enum Admission {
    /// Appended inline.
    Done(Acked),
    /// Queued; the writer will answer.
    Queued(oneshot::Receiver<Acked>),
}

impl Admission {
    /// The base offset once the append is done (a duplicate's original one).
    ///
    /// # Errors
    /// The append's failure, or SHUTTING_DOWN if the writer went away; a
    /// refused idempotent batch is INVALID_REQUEST here (see [`Admission::outcome`]).
    pub async fn wait(self) -> AppendResult {
        match self.outcome().await {
            Ok(s) => Ok(s.base),
            Err(Refusal::Code(c)) => Err(c),
            Err(Refusal::Producer(_)) => Err(ErrorCode::InvalidRequest),
        }
    }

    /// The append's outcome in full, once it is done.
    ///
    /// # Errors
    /// As [`Admission::wait`], with a refused idempotent batch's reason.
    pub async fn outcome(self) -> Acked {
        match self {
            Admission::Done(r) => r,
            Admission::Queued(rx) => rx
                .await
                .unwrap_or(Err(Refusal::Code(ErrorCode::ShuttingDown))),
        }
    }
}

/// What an [`AppendQueue`] holds.
#[derive(Debug, Default)]
struct QueueState {
    items: VecDeque<AppendRequest>,
    closed: bool,
    /// A writer task is running (it ends when it finds the queue empty).
    writer_running: bool,
}

/// A FIFO of append requests bounded by `capacity` whose storage grows on
/// demand and is released when it drains (a preallocated channel of 1 024
/// slots held about 64 KiB per partition before a record arrived).
#[derive(Debug)]
struct AppendQueue {
    state: Mutex<QueueState>,
    capacity: usize,
    /// Notified when requests are taken out or the queue closes.
    room: Event,
    /// Notified when the writer task ends.
    writer_done: Event,
}

/// Why a request was not queued.
enum Refused {
    Full(AppendRequest),
    Closed,
}

impl AppendQueue {
    fn new(capacity: usize) -> Self {
        AppendQueue {
            state: Mutex::new(QueueState::default()),
            capacity: capacity.max(1),
            room: Event::new(),
            writer_done: Event::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues `req` if there is room; `Ok(true)` when the caller must start a writer.
    fn try_push(&self, req: AppendRequest) -> Result<bool, Refused> {
        let mut s = self.lock();
        if s.closed {
            return Err(Refused::Closed);
        }
        if s.items.len() >= self.capacity {
            return Err(Refused::Full(req));
        }
        s.items.push_back(req);
        let start = !s.writer_running;
        s.writer_running = true;
        Ok(start)
    }

    /// Queues `req`, waiting for room.
    ///
    /// # Cancel safety
    /// Nothing is queued until this returns.
    async fn push(&self, mut req: AppendRequest) -> Result<bool, Refused> {
        loop {
            match self.try_push(req) {
                Err(Refused::Full(back)) => req = back,
                other => return other,
            }
            let listener = self.room.listen();
            match self.try_push(req) {
                Err(Refused::Full(back)) => req = back,
                other => return other,
            }
            listener.await;
        }
    }

    /// Takes queued requests up to `max_bytes` (at least one). With nothing
    /// queued the writer is marked as ended and the storage released.
    fn take(&self, max_bytes: usize) -> Vec<AppendRequest> {
        let mut s = self.lock();
        let mut out = Vec::new();
        let mut bytes = 0usize;
        while bytes < max_bytes {
            match s.items.pop_front() {
                Some(r) => {
                    bytes += r.batch.len();
                    out.push(r);
                }
                None => break,
            }
        }
        if s.items.is_empty() {
            // An idle partition keeps no slots.
            s.items = VecDeque::new();
            if out.is_empty() {
                s.writer_running = false;
                drop(s);
                self.writer_done.notify(usize::MAX);
                return out;
            }
        }
        drop(s);
        if !out.is_empty() {
            self.room.notify(usize::MAX);
        }
        out
    }

    fn len(&self) -> usize {
        self.lock().items.len()
    }

    fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Closes the queue (waiting producers get SHUTTING_DOWN) and waits
    /// until the writer has written what was queued and ended.
    async fn close_and_drain(&self) {
        self.lock().closed = true;
        self.room.notify(usize::MAX);
        loop {
            let listener = self.writer_done.listen();
            if !self.lock().writer_running {
                return;
            }
            listener.await;
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
    /// Set when the topic is deleted: reads answer UNKNOWN_TOPIC from then
    /// on (checked under the log's lock, see [`Partition::close_for_delete`]).
    deleted: AtomicBool,
    /// Requests queued or being written; the fast path needs 0.
    pending: AtomicUsize,
    /// Records and bytes in and out, for metrics.
    stats: crate::metrics::PartitionStats,
    queue: AppendQueue,
    batch_bytes: usize,
    /// Idempotent producers' sequences; locked only under the log's write lock.
    producers: Mutex<ProducerTable>,
    /// The active segment's base when the producer snapshot was last
    /// written (a roll since calls for a new one).
    snapshot_base: AtomicU64,
    /// Open and aborted transactions; locked only under the log's lock
    /// (written under its write lock, with the appends that change it).
    txns: Mutex<TxnIndex>,
    /// The first offset of the oldest open transaction (`u64::MAX`: none),
    /// for the last stable offset without a lock.
    unstable_from: AtomicU64,
}

/// A partition of a topic.
#[derive(Debug)]
pub struct Partition {
    /// Topic name.
    pub topic: String,
    /// Partition number.
    pub id: u32,
    shared: Arc<Shared>,
    backpressure: Backpressure,
    inline_ok: bool,
}

pub(crate) fn read_lock(log: &RwLock<Log>) -> std::sync::RwLockReadGuard<'_, Log> {
    log.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(crate) fn write_lock(log: &RwLock<Log>) -> std::sync::RwLockWriteGuard<'_, Log> {
    log.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Rebuilds a partition's producer table at start: its snapshot (when it
/// fits the log), then the Kafka batch entries after it, or, without one,
/// those of the active segment (see [`producers`]).
fn recover_producers(
    topic: &str,
    id: u32,
    log: &Log,
    table: &mut ProducerTable,
    txns: &mut TxnIndex,
) {
    let started = std::time::Instant::now();
    let from = std::fs::read(log.dir().join(producers::SNAPSHOT_FILE))
        .ok()
        .and_then(|raw| table.load_snapshot(&raw, log.end_offset()))
        .map(|(end, t)| {
            *txns = t;
            end
        });
    let mut at = from
        .unwrap_or_else(|| log.active_base())
        .max(log.start_offset());
    let (mut batches, mut bytes) = (0u64, 0u64);
    while at < log.end_offset() {
        let read = match log.read(at, 1 << 20) {
            Ok(r) if !r.records.is_empty() && r.next > at => r,
            Ok(_) => break,
            Err(e) => {
                tracing::warn!(topic, partition = id, error = %e, "producer state: the log could not be read past {at}; producers after it start afresh");
                break;
            }
        };
        bytes += read.records.len() as u64;
        for raw in flume_protocol::record::RecordIter::new(&read.records).flatten() {
            if raw.offset < at {
                continue;
            }
            let Some(h) = raw.batch_header() else {
                continue;
            };
            follow_txns(&raw, &h, table, txns);
            if h.producer_id >= 0 && !h.is_control() {
                table.replay(
                    &ProducerBatch {
                        id: h.producer_id,
                        epoch: h.producer_epoch,
                        base_sequence: h.base_sequence,
                    },
                    u32::try_from(raw.span()).unwrap_or(u32::MAX),
                    raw.offset,
                );
                batches += 1;
            }
        }
        at = read.next;
    }
    if !table.is_empty() || batches > 0 {
        tracing::debug!(
            topic,
            partition = id,
            producers = table.len(),
            snapshot = from.is_some(),
            batches,
            bytes,
            elapsed_us = started.elapsed().as_micros() as u64,
            "producer state recovered"
        );
    }
}

/// What a stored Kafka batch changes in a partition's transactions: a
/// transactional batch opens its producer's transaction here (if none is
/// open), a marker ends it (and fences older epochs of its producer).
fn follow_txns(
    raw: &flume_protocol::record::RawRecord<'_>,
    h: &flume_protocol::kafka_batch::BatchHeader,
    table: &mut ProducerTable,
    txns: &mut TxnIndex,
) {
    if !h.is_transactional() {
        return;
    }
    if !h.is_control() {
        txns.on_batch(h.producer_id, raw.offset);
        return;
    }
    let data = raw
        .kafka_body()
        .get(
            flume_protocol::kafka_batch::BATCH_HEADER_LEN
                - flume_protocol::kafka_batch::LEADER_EPOCH_AT..,
        )
        .unwrap_or_default();
    match Marker::of(h, data) {
        Ok(m) => {
            txns.on_marker(h.producer_id, raw.offset, m);
            table.fence(h.producer_id, h.producer_epoch);
        }
        Err(e) => {
            tracing::warn!(offset = raw.offset, error = %e, "a control batch that is not a transaction marker; ignored");
        }
    }
}

/// Writes a producer snapshot atomically; a failure costs only a longer
/// read of the log at the next start.
fn write_snapshot(dir: &std::path::Path, raw: &[u8]) {
    let path = dir.join(producers::SNAPSHOT_FILE);
    if let Err(e) = crate::storage::write_atomic(&path, raw) {
        tracing::warn!(file = %path.display(), error = %e, "producer snapshot not written");
    }
}

impl Shared {
    /// The producer table as a snapshot at the log's end, `None` when it
    /// tracks no producer. The caller holds the log's lock.
    fn snapshot(&self, log: &Log) -> Option<Vec<u8>> {
        let table = self
            .producers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut txns = self
            .txns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        txns.trim(log.start_offset());
        let any_txn = *txns != TxnIndex::default();
        (!table.is_empty() || any_txn).then(|| table.encode_snapshot(log.end_offset(), &txns))
    }

    /// Takes in the transactional batches and markers of an append (whose
    /// entries have their offsets now); the caller holds the log's write lock.
    fn follow_appended(&self, entries: &[u8]) {
        let mut any = false;
        let mut pos = 0usize;
        while let Some((_, size, _)) = flume_protocol::record::peek_entry(entries, pos) {
            let at = pos + flume_protocol::record::RECORD_HEADER_LEN;
            let end = at.saturating_add(usize::try_from(size).unwrap_or(usize::MAX));
            // A transactional batch has its attribute bit 4 in the batch's attributes.
            let transactional = entries
                .get(at)
                .is_some_and(|a| a & flume_protocol::record::ATTR_KAFKA_BATCH != 0)
                && entries.get(at + 10..at + 12).is_some_and(|b| {
                    i16::from_be_bytes([b[0], b[1]])
                        & flume_protocol::kafka_batch::ATTR_TRANSACTIONAL
                        != 0
                });
            if transactional {
                any = true;
                break;
            }
            pos = end;
        }
        if !any {
            return;
        }
        let mut table = self
            .producers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut txns = self
            .txns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for raw in flume_protocol::record::RecordIter::new(entries).flatten() {
            if let Some(h) = raw.batch_header() {
                follow_txns(&raw, &h, &mut table, &mut txns);
            }
        }
        self.unstable_from
            .store(txns.stable_offset(u64::MAX), Ordering::Release);
    }

    /// Reads from `log` (locked by the caller) unless the topic was deleted
    /// (checked under the lock: UNKNOWN_TOPIC then).
    fn read_from(
        &self,
        log: &Log,
        offset: u64,
        max_bytes: usize,
        how: ReadAs,
        committed: bool,
    ) -> ReadOutcome {
        if self.deleted.load(Ordering::Acquire) {
            return Ok(Err(ErrorCode::UnknownTopic));
        }
        if committed {
            let txns = self
                .txns
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if *txns != TxnIndex::default() {
                let end = txns.stable_offset(log.end_offset());
                let aborted = txns.aborted_in(offset, end);
                drop(txns);
                let stable = crate::storage::Stable {
                    end,
                    aborted: &aborted,
                };
                return log.read_stable(offset, max_bytes, how, &stable).map(Ok);
            }
        }
        log.read_as(offset, max_bytes, how).map(Ok)
    }

    /// Appends `batch` (already contiguous) under the lock; updates the
    /// cached end offset and wakes long polls.
    fn append(&self, log: &mut Log, batch: &mut [u8], count: u64, max_ts: i64) -> AppendResult {
        let started = std::time::Instant::now();
        let appended = log.append_validated(batch, count, max_ts);
        crate::metrics::APPEND_LATENCY.observe(started.elapsed());
        match appended {
            Ok(base) => {
                self.stats.appended(count, batch.len());
                self.follow_appended(batch);
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

    /// Decides on the requests of a group commit in order, checking the
    /// sequences of idempotent ones against the producer table. Returns each
    /// request's outcome (`None`: to be appended at the offset given) with
    /// what is to be appended; the caller holds the log's write lock.
    fn decide<'a>(
        &self,
        log: &Log,
        items: impl Iterator<Item = (Option<&'a ProducerBatch>, u32)>,
    ) -> Vec<Result<u64, Acked>> {
        let mut table = self
            .producers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut next = log.end_offset();
        items
            .map(|(producer, count)| {
                let Some(p) = producer else {
                    let at = next;
                    next += u64::from(count);
                    return Ok(at);
                };
                match table.check(p, count) {
                    Verdict::Append => {
                        if !table.record(p, count, next) {
                            tracing::debug!(topic = %self.topic, partition = self.id, producer = p.id, "producer state limit reached; batch appended untracked");
                        }
                        let at = next;
                        next += u64::from(count);
                        Ok(at)
                    }
                    Verdict::Duplicate(base) => Err(Ok(Stored {
                        base,
                        duplicate: true,
                    })),
                    Verdict::Refuse(e) => Err(Err(Refusal::Producer(e))),
                }
            })
            .collect()
    }
}

impl Partition {
    /// Wraps an opened log. No task or queue storage is created until an
    /// append is queued.
    pub fn start(
        topic: &str,
        id: u32,
        log: Log,
        max_pending: usize,
        backpressure: Backpressure,
        batch_bytes: usize,
        producer_limits: Arc<ProducerLimits>,
    ) -> Self {
        let inline_ok = log.config().fsync == FsyncPolicy::Never;
        let mut producers = ProducerTable::new(producer_limits);
        let mut txns = TxnIndex::default();
        recover_producers(topic, id, &log, &mut producers, &mut txns);
        txns.trim(log.start_offset());
        let unstable_from = txns.stable_offset(u64::MAX);
        let snapshot_base = log.active_base();
        let shared = Arc::new(Shared {
            topic: topic.to_owned(),
            id,
            end: AtomicU64::new(log.end_offset()),
            start: AtomicU64::new(log.start_offset()),
            log: RwLock::new(log),
            data: Event::new(),
            failed: AtomicBool::new(false),
            deleted: AtomicBool::new(false),
            pending: AtomicUsize::new(0),
            stats: crate::metrics::PartitionStats::default(),
            queue: AppendQueue::new(max_pending),
            batch_bytes,
            producers: Mutex::new(producers),
            snapshot_base: AtomicU64::new(snapshot_base),
            txns: Mutex::new(txns),
            unstable_from: AtomicU64::new(unstable_from),
        });
        Partition {
            topic: topic.to_owned(),
            id,
            shared,
            backpressure,
            inline_ok,
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
        self.shared.queue.len()
    }

    /// Capacity of the queue (`max_pending`).
    pub fn capacity(&self) -> usize {
        self.shared.queue.capacity
    }

    /// True while a writer task runs (it ends when the queue drains).
    pub fn writer_running(&self) -> bool {
        self.shared.queue.lock().writer_running
    }

    /// A listener notified at the next append. Create it before checking
    /// for data, then await it, so no append is missed.
    pub fn listen(&self) -> EventListener {
        self.shared.data.listen()
    }

    /// Wakes every reader waiting for data (they look again and find the
    /// broker shutting down).
    pub fn wake_readers(&self) {
        self.shared.data.notify(usize::MAX);
    }

    fn try_inline(
        &self,
        batch: &Bytes,
        count: u32,
        max_timestamp: i64,
        producer: Option<&ProducerBatch>,
    ) -> Option<Acked> {
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
        if self.shared.pending.load(Ordering::Acquire) != 0 || self.shared.queue.is_closed() {
            return None;
        }
        if producer.is_some() {
            let decided = self.shared.decide(&log, std::iter::once((producer, count)));
            if let Some(Err(done)) = decided.into_iter().next() {
                return Some(done);
            }
        }
        // The records are copied (their offsets are filled in) into this
        // thread's reused buffer: no allocation per append, and memory the
        // thread touched before (spread produce makes one inline append per
        // partition of a request).
        let r = INLINE_BUF.with(|cell| match cell.try_borrow_mut() {
            Ok(mut buf) => {
                buf.clear();
                buf.extend_from_slice(batch);
                self.shared
                    .append(&mut log, &mut buf, u64::from(count), max_timestamp)
            }
            Err(_) => {
                let mut buf = batch.to_vec();
                self.shared
                    .append(&mut log, &mut buf, u64::from(count), max_timestamp)
            }
        });
        drop(log);
        self.shared.data.notify(usize::MAX);
        Some(r.map_or_else(|c| Err(Refusal::Code(c)), appended))
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
        self.enqueue_as(batch, count, max_timestamp, None).await
    }

    /// As [`Partition::enqueue`], for a batch an idempotent producer stamped
    /// (`producer`): its sequence is checked as it is appended, and a retry of
    /// a stored batch is answered with that batch's base offset.
    ///
    /// # Errors
    /// As [`Partition::enqueue`].
    ///
    /// # Cancel safety
    /// As [`Partition::enqueue`].
    pub async fn enqueue_as(
        &self,
        batch: Bytes,
        count: u32,
        max_timestamp: i64,
        producer: Option<ProducerBatch>,
    ) -> Result<Admission, ErrorCode> {
        if self.has_failed_write() {
            return Err(ErrorCode::StorageError);
        }
        if let Some(r) = self.try_inline(&batch, count, max_timestamp, producer.as_ref()) {
            return Ok(Admission::Done(r));
        }
        let (ack, rx) = oneshot::channel();
        let req = AppendRequest {
            batch,
            count,
            max_timestamp,
            producer,
            ack,
        };
        self.shared.pending.fetch_add(1, Ordering::AcqRel);
        let sent = match self.backpressure {
            Backpressure::Block => self.shared.queue.push(req).await,
            Backpressure::Reject => self.shared.queue.try_push(req),
        };
        match sent {
            Ok(start_writer) => {
                if start_writer {
                    // Detached: it ends by itself when the queue is empty.
                    drop(rt::spawn(writer_loop(Arc::clone(&self.shared))));
                }
                Ok(Admission::Queued(rx))
            }
            Err(refused) => {
                self.shared.pending.fetch_sub(1, Ordering::AcqRel);
                Err(match refused {
                    Refused::Full(_) => ErrorCode::QueueFull,
                    Refused::Closed if self.is_deleted() => ErrorCode::UnknownTopic,
                    Refused::Closed => ErrorCode::ShuttingDown,
                })
            }
        }
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

    /// Reads whole entries from `offset` (at least one if any), off the
    /// executor, handed out as `how` says ([`ReadAs`]); `committed`: as a
    /// `read_committed` reader (up to the last stable offset, aborted
    /// transactions left out as records or listed with entries: see
    /// `Log::read_stable`).
    ///
    /// # Errors
    /// Out of range, or a corrupt record.
    pub async fn read(
        &self,
        offset: u64,
        max_bytes: usize,
        how: ReadAs,
        committed: bool,
    ) -> Result<ReadResult, BrokerError> {
        if self.is_deleted() {
            return Err(ErrorCode::UnknownTopic.into());
        }
        if offset == self.end_offset() && offset >= self.start_offset() {
            return Ok(ReadResult {
                records: Vec::new(),
                log_start: self.start_offset(),
                log_end: offset,
                next: offset,
                batches: false,
                aborted: Vec::new(),
            });
        }
        let r = match self.try_read_hot(offset, max_bytes, how, committed) {
            Some(r) => r,
            None => {
                let shared = Arc::clone(&self.shared);
                rt::unblock(move || {
                    shared.read_from(&read_lock(&shared.log), offset, max_bytes, how, committed)
                })
                .await
            }
        };
        let r = match r {
            Ok(Err(code)) => return Err(code.into()),
            Ok(Ok(read)) => Ok(read),
            Err(e) => Err(e),
        };
        r.map_err(|e| {
            if let StorageError::Corrupt { .. } = e {
                tracing::error!(topic = %self.topic, partition = self.id, error = %e, "corrupt record; not served");
            }
            BrokerError::from(e)
        })
    }

    /// The read's fast path: a small read of the tail this process has just
    /// written (see [`Log::is_hot`]: page-cache bytes, a memory copy) runs on
    /// the calling task, saving the two thread hand-offs of the blocking pool
    /// that dominate a tailing consumer's latency. `None` (take the pool)
    /// when the read is not hot or an append holds the log.
    fn try_read_hot(
        &self,
        offset: u64,
        max_bytes: usize,
        how: ReadAs,
        committed: bool,
    ) -> Option<ReadOutcome> {
        let log = match self.shared.log.try_read() {
            Ok(l) => l,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        log.is_hot(offset, HOT_READ_BYTES, HOT_READ_FRESH).then(|| {
            self.shared
                .read_from(&log, offset, max_bytes, how, committed)
        })
    }

    /// Reads Flume records synchronously (embedded mode, tests).
    ///
    /// # Errors
    /// As [`Partition::read`].
    pub fn read_now(&self, offset: u64, max_bytes: usize) -> Result<ReadResult, BrokerError> {
        let log = read_lock(&self.shared.log);
        if self.is_deleted() {
            return Err(ErrorCode::UnknownTopic.into());
        }
        match self
            .shared
            .read_from(&log, offset, max_bytes, ReadAs::Records, true)?
        {
            Ok(r) => Ok(r),
            Err(code) => Err(code.into()),
        }
    }

    /// The last stable offset: below it every transaction has ended (the
    /// end offset when no transaction is open here).
    pub fn stable_offset(&self) -> u64 {
        self.shared
            .unstable_from
            .load(Ordering::Acquire)
            .min(self.end_offset())
    }

    /// The producers this partition tracks (DescribeProducers): id, epoch,
    /// last sequence appended (-1: none) and the offset where its open
    /// transaction began here (`None`: no transaction open).
    pub fn producers(&self) -> Vec<crate::domain::ProducerState> {
        let _log = read_lock(&self.shared.log);
        let open: std::collections::HashMap<i64, u64> = self
            .shared
            .txns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .open()
            .collect();
        let mut out: Vec<crate::domain::ProducerState> = self
            .shared
            .producers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .describe()
            .into_iter()
            .map(|(id, epoch, last_sequence)| crate::domain::ProducerState {
                producer_id: id,
                epoch,
                last_sequence,
                txn_start: open.get(&id).copied(),
            })
            .collect();
        for (id, first) in open {
            if !out.iter().any(|p| p.producer_id == id) {
                out.push(crate::domain::ProducerState {
                    producer_id: id,
                    epoch: -1,
                    last_sequence: -1,
                    txn_start: Some(first),
                });
            }
        }
        out
    }

    /// The producers with a transaction open here, and where each began.
    pub fn open_transactions(&self) -> Vec<(i64, u64)> {
        let _log = read_lock(&self.shared.log);
        self.shared
            .txns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .open()
            .collect()
    }

    /// True when a Flume reader at `offset` (below the log end) finds no
    /// record up to the log end: only transaction markers or aborted
    /// transactions lie there, and no transaction is open. One read of at
    /// most one record.
    pub async fn nothing_to_read_from(&self, offset: u64) -> bool {
        if offset >= self.end_offset() || self.stable_offset() < self.end_offset() {
            return false;
        }
        match self.read(offset, 1, ReadAs::Records, true).await {
            Ok(r) => r.records.is_empty() && r.next > offset && r.next >= r.log_end,
            Err(_) => false,
        }
    }

    /// Writes a transaction marker (a control batch: COMMIT or ABORT) of
    /// `producer_id` at `epoch`, queued behind the appends before it, and
    /// waits until it is stored. Returns its offset.
    ///
    /// # Errors
    /// As an append (STORAGE_ERROR, SHUTTING_DOWN, ...).
    pub async fn write_marker(
        &self,
        producer_id: i64,
        epoch: i16,
        marker: Marker,
        now_ms: i64,
    ) -> Result<u64, ErrorCode> {
        use flume_protocol::kafka_batch::{
            BatchBuilder, BatchMeta, Compression, ATTR_CONTROL, ATTR_TRANSACTIONAL,
        };
        let mut b = BatchBuilder::new(None);
        // Value: [version i16 = 0][coordinator epoch i32 = 0] (one coordinator).
        b.push(
            0,
            now_ms,
            Some(&marker.key()),
            Some(&[0, 0, 0, 0, 0, 0]),
            [],
        );
        let meta = BatchMeta {
            flags: ATTR_CONTROL | ATTR_TRANSACTIONAL,
            producer_id,
            producer_epoch: epoch,
            ..BatchMeta::default()
        };
        let batch = b
            .finish(&meta, Compression::None)
            .map_err(|_| ErrorCode::CorruptRecord)?;
        let mut entry = Vec::with_capacity(batch.len() + 17);
        flume_protocol::record::encode_batch_entry(&mut entry, &batch);
        self.append(Bytes::from(entry), 1, now_ms).await
    }

    /// True once the partition's topic has been deleted.
    pub fn is_deleted(&self) -> bool {
        self.shared.deleted.load(Ordering::Acquire)
    }

    /// The first record whose timestamp is at least `ts` (its offset and
    /// timestamp), or `None` if no stored record is that recent; off the
    /// executor (see [`Log::find_time`]).
    ///
    /// # Errors
    /// UNKNOWN_TOPIC once the topic is deleted; I/O errors or a corrupt record.
    pub async fn offset_for_time(&self, ts: i64) -> Result<Option<(u64, i64)>, BrokerError> {
        let shared = Arc::clone(&self.shared);
        rt::unblock(move || {
            let log = read_lock(&shared.log);
            if shared.deleted.load(Ordering::Acquire) {
                return Err(ErrorCode::UnknownTopic.into());
            }
            Ok(log.find_time(ts)?)
        })
        .await
    }

    /// Changes how the log is compacted (`None`: it no longer is), from the
    /// next cleaner round on.
    pub async fn set_compaction(&self, compaction: Option<crate::storage::CompactionConfig>) {
        let shared = Arc::clone(&self.shared);
        rt::unblock(move || write_lock(&shared.log).set_compaction(compaction)).await;
    }

    /// Moves the log start to `before` (Kafka's DeleteRecords; see
    /// [`Log::delete_records`]); returns the new log start.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC once the topic is deleted; OFFSET_OUT_OF_RANGE past the
    /// end; I/O errors.
    pub async fn delete_records(&self, before: u64) -> Result<u64, BrokerError> {
        let shared = Arc::clone(&self.shared);
        rt::unblock(move || {
            let mut log = write_lock(&shared.log);
            if shared.deleted.load(Ordering::Acquire) {
                return Err(ErrorCode::UnknownTopic.into());
            }
            let start = log.delete_records(before)?;
            shared.start.store(start, Ordering::Release);
            Ok(start)
        })
        .await
    }

    /// The first record with the largest timestamp of the partition: its
    /// offset and timestamp (Kafka's ListOffsets -3, KIP-734); `None` when
    /// it holds no record. Found by a binary search over timestamps with the
    /// time lookup ([`Log::find_time`], which skips by the index): at most
    /// 65 lookups under one read lock, off the executor, reading no more
    /// than an index interval per segment each, so it needs no state the log
    /// does not keep.
    pub async fn max_timestamp(&self) -> Result<Option<(u64, i64)>, BrokerError> {
        let shared = Arc::clone(&self.shared);
        rt::unblock(move || {
            let log = read_lock(&shared.log);
            if shared.deleted.load(Ordering::Acquire) {
                return Err(ErrorCode::UnknownTopic.into());
            }
            // `lo` is a timestamp some record has; no record is newer than `hi`.
            let Some((_, mut lo)) = log.find_time(i64::MIN)? else {
                return Ok(None);
            };
            let mut hi = i64::MAX;
            while lo < hi {
                // Above `lo`, at most `hi`: computed wide, it always fits.
                let wide = i128::from(lo) + (i128::from(hi) - i128::from(lo) + 1) / 2;
                let mid = i64::try_from(wide).unwrap_or(hi);
                match log.find_time(mid)? {
                    Some((_, ts)) => lo = ts,
                    None => hi = mid - 1,
                }
            }
            Ok(log.find_time(lo)?)
        })
        .await
    }

    /// Applies changed settings to the running log (see [`Log::set_limits`]).
    pub async fn set_limits(
        &self,
        retention_bytes: Option<u64>,
        retention_ms: Option<u64>,
        segment_bytes: u64,
        segment_ms: Option<u64>,
    ) {
        let shared = Arc::clone(&self.shared);
        rt::unblock(move || {
            write_lock(&shared.log).set_limits(
                retention_bytes,
                retention_ms,
                segment_bytes,
                segment_ms,
            );
        })
        .await;
    }

    /// Stops the partition before its files are deleted: appends are
    /// refused from now on (what was queued is written first), reads started
    /// before this finish on intact files (the log's write lock is taken
    /// once, after the flag is set), every later read and time lookup
    /// answers UNKNOWN_TOPIC, waiting long polls are woken, and the cached
    /// segment files are closed. Idempotent.
    pub async fn close_for_delete(&self) {
        self.shared.deleted.store(true, Ordering::Release);
        self.shared.queue.close_and_drain().await;
        let shared = Arc::clone(&self.shared);
        rt::unblock(move || write_lock(&shared.log).close_files()).await;
        self.shared.data.notify(usize::MAX);
    }

    /// Runs retention and the interval fsync now, on this thread (it may
    /// block on the disk: the broker's ticker calls it from a blocking
    /// thread, for many partitions at a time, see [`maintain_all`]).
    pub fn maintain_blocking(&self, now_ms: i64) {
        let shared = &self.shared;
        let r = (|| {
            let mut l = write_lock(&shared.log);
            let synced = l.sync_if_due();
            if l.failure().is_some() {
                shared.failed.store(true, Ordering::Release);
            }
            synced?;
            l.enforce_retention(now_ms)?;
            let start = l.start_offset();
            // After a roll, a new snapshot of the producers: a restart then
            // reads only the segments after it.
            let snapshot = (l.active_base() != shared.snapshot_base.load(Ordering::Acquire))
                .then(|| {
                    shared
                        .snapshot_base
                        .store(l.active_base(), Ordering::Release);
                    shared.snapshot(&l)
                })
                .flatten();
            let dir = l.dir().to_path_buf();
            drop(l);
            if let Some(raw) = snapshot {
                write_snapshot(&dir, &raw);
            }
            let expired = shared
                .producers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .expire();
            if expired > 0 {
                tracing::debug!(topic = %shared.topic, partition = shared.id, expired, "idle producers' state dropped");
            }
            Ok::<u64, StorageError>(start)
        })();
        match r {
            Ok(start) => self.shared.start.store(start, Ordering::Release),
            Err(e) => {
                tracing::error!(topic = %self.topic, partition = self.id, error = %e, "maintenance failed")
            }
        }
    }

    /// One pass of the log cleaner over this partition, on this (blocking)
    /// thread, if its log is compacted and due (see `storage::compact`):
    /// the plan under the read lock, the rewrite without a lock, the swap
    /// under the write lock. Returns the pass's figures, `None` when there
    /// was nothing to do.
    ///
    /// # Errors
    /// I/O errors or a damaged record; nothing is swapped then.
    pub fn compact_blocking(
        &self,
        now_ms: i64,
        limits: &CleanerLimits,
        stop: &AtomicBool,
    ) -> Result<Option<CleanStats>, StorageError> {
        let shared = &self.shared;
        let Some(plan) = read_lock(&shared.log).clean_plan(now_ms) else {
            return Ok(None);
        };
        let Some(cleaned) = crate::storage::compact::prepare(&plan, limits, now_ms, stop)? else {
            return Ok(None);
        };
        let stats = cleaned.stats.clone();
        let mut log = write_lock(&shared.log);
        if shared.deleted.load(Ordering::Acquire) || stop.load(Ordering::Acquire) {
            crate::storage::compact::remove_cleaned(&plan.dir);
            return Ok(None);
        }
        let freed = log.install_cleaned(cleaned)?;
        tracing::info!(
            topic = %shared.topic,
            partition = shared.id,
            segments = stats.segments,
            keys = stats.keys,
            records_kept = stats.records_kept,
            records_removed = stats.records_read.saturating_sub(stats.records_kept),
            tombstones_removed = stats.tombstones_removed,
            freed_bytes = freed,
            dirty_ratio = plan.dirty_ratio,
            "cleaned a compacted partition"
        );
        Ok(Some(stats))
    }

    /// The share of the partition's sealed bytes the cleaner has not seen
    /// yet, in parts per million, when its log is compacted.
    pub fn dirty_ppm(&self) -> Option<u32> {
        let log = read_lock(&self.shared.log);
        log.config().compaction?;
        Some((log.dirty_ratio() * 1e6) as u32)
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

    /// Closes the queue, lets the writer drain it, writes the active
    /// segment's pending index entries, and fsyncs the log, unless
    /// the fsync policy is `never`: then the broker flushes the whole data
    /// directory's filesystem once after every partition has drained
    /// (`storage::dirs::sync_filesystem`), instead of one fdatasync
    /// (and one file reopen) per partition.
    pub async fn shutdown(&self) {
        self.shared.queue.close_and_drain().await;
        let shared = Arc::clone(&self.shared);
        rt::unblock(move || {
            let log = read_lock(&shared.log);
            if shared.deleted.load(Ordering::Acquire) {
                return;
            }
            let (raw, dir) = (shared.snapshot(&log), log.dir().to_path_buf());
            drop(log);
            match raw {
                Some(raw) => write_snapshot(&dir, &raw),
                None => {
                    // No producer left: an older snapshot would only be read for nothing.
                    let _ = std::fs::remove_file(dir.join(producers::SNAPSHOT_FILE));
                }
            }
        })
        .await;
        if read_lock(&self.shared.log).index_pending() {
            let shared = Arc::clone(&self.shared);
            rt::unblock(move || write_lock(&shared.log).write_index_tail()).await;
        }
        if self.inline_ok {
            // inline_ok is exactly "fsync policy is never".
            self.shared.data.notify(usize::MAX);
            return;
        }
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

/// Partitions maintained per trip to a blocking thread.
const MAINTAIN_CHUNK: usize = 1024;

/// Runs [`Partition::maintain_blocking`] for every partition, on blocking
/// threads, `MAINTAIN_CHUNK` partitions per trip: a trip per partition
/// would cost two thread wake-ups each, every second under the `never` fsync
/// policy and every tick under the others (an idle broker's CPU with many
/// partitions: README, "Scale").
pub async fn maintain_all(partitions: Vec<Arc<Partition>>, now_ms: i64) {
    let mut rest = partitions;
    while !rest.is_empty() {
        let chunk: Vec<Arc<Partition>> = rest.drain(..rest.len().min(MAINTAIN_CHUNK)).collect();
        rt::unblock(move || {
            for p in &chunk {
                p.maintain_blocking(now_ms);
            }
        })
        .await;
    }
}

/// Largest buffer a partition writer keeps when its queue is empty.
const IDLE_WRITER_BUFFER: usize = 256 * 1024;

async fn writer_loop(shared: Arc<Shared>) {
    // One buffer, reused for every group commit while appends keep coming: no
    // allocation or page faults per batch. It goes with the task when the queue drains.
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let reqs = shared.queue.take(shared.batch_bytes);
        if reqs.is_empty() {
            return;
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
            let acks = if reqs.iter().any(|r| r.producer.is_some()) {
                append_checked(&sh, &mut log, &reqs, &mut taken)
            } else {
                let r = sh.append(&mut log, &mut taken, count, max_ts);
                let mut next = r;
                reqs.iter()
                    .map(|q| {
                        let this = next.map_or_else(|c| Err(Refusal::Code(c)), appended);
                        next = next.map(|b| b + u64::from(q.count));
                        this
                    })
                    .collect()
            };
            // Counted down under the lock, so the fast path never overtakes a queued request.
            sh.pending.fetch_sub(reqs.len(), Ordering::AcqRel);
            drop(log);
            ((acks, reqs), taken)
        })
        .await;
        buf = back;
        // The buffer is kept while appends keep coming; an idle writer lets a large
        // one go, so the memory held by idle partitions does not grow with the
        // largest group commit each ever made.
        if buf.capacity() > IDLE_WRITER_BUFFER && shared.queue.len() == 0 {
            buf = Vec::new();
        }
        let (acks, reqs): (Vec<Acked>, Vec<AppendRequest>) = result;
        shared.data.notify(usize::MAX);
        for (r, a) in reqs.into_iter().zip(acks) {
            let _ = r.ack.send(a);
        }
    }
}

/// A group commit with idempotent requests among its requests: each is
/// checked in queue order; duplicates and refused ones are answered without
/// being written, the rest appended with one write. `buf` holds every
/// request's records on entry and what is written on return.
fn append_checked(
    shared: &Shared,
    log: &mut Log,
    reqs: &[AppendRequest],
    buf: &mut Vec<u8>,
) -> Vec<Acked> {
    let decided = shared.decide(log, reqs.iter().map(|r| (r.producer.as_ref(), r.count)));
    let mut count = 0u64;
    let mut max_ts = i64::MIN;
    let skipped = decided.iter().any(Result::is_err);
    if skipped {
        buf.clear();
    }
    for (r, d) in reqs.iter().zip(&decided) {
        if d.is_ok() {
            if skipped {
                buf.extend_from_slice(&r.batch);
            }
            count += u64::from(r.count);
            max_ts = max_ts.max(r.max_timestamp);
        }
    }
    let written = if count == 0 {
        Ok(0)
    } else {
        shared.append(log, buf, count, max_ts)
    };
    decided
        .into_iter()
        .map(|d| match d {
            Ok(at) => written.map_or_else(|c| Err(Refusal::Code(c)), |_| appended(at)),
            Err(done) => done,
        })
        .collect()
}

// The tests hold the log's lock on purpose while they queue appends, to keep
// the writer parked; those awaits never wait for the lock.
#[cfg(test)]
#[allow(clippy::await_holding_lock)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use std::time::{Duration, Instant};

    fn record(v: &[u8]) -> Bytes {
        let mut out = Vec::new();
        flume_protocol::record::encode(&mut out, 0, 1, None, v, &[]);
        Bytes::from(out)
    }

    fn partition(dir: &std::path::Path, max_pending: usize, bp: Backpressure) -> Partition {
        let log = Log::open(dir, crate::storage::LogConfig::default()).unwrap();
        let limits = Arc::new(ProducerLimits::new(
            10,
            100,
            60_000,
            crate::clock::Clock::manual(),
        ));
        Partition::start("t", 0, log, max_pending, bp, 1 << 20, limits)
    }

    /// Waits for `cond` with a deadline (no fixed sleeps).
    fn wait_for(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::yield_now();
        }
    }

    /// Queues one append and waits until the writer has taken it and is
    /// blocked on the log lock the caller holds, so the queue is empty.
    fn park_writer(p: &Partition) -> Admission {
        let first = p
            .enqueue(record(b"first"), 1, 1)
            .now_or_never()
            .unwrap()
            .unwrap();
        assert!(
            matches!(first, Admission::Queued(_)),
            "the log is locked: no fast path"
        );
        wait_for("the writer to take the first request", || p.queued() == 0);
        first
    }

    fn shared_log(p: &Partition) -> Arc<Shared> {
        Arc::clone(&p.shared)
    }

    #[test]
    fn an_idle_partition_holds_no_writer_and_no_queue_storage() {
        let dir = tempfile::tempdir().unwrap();
        let p = partition(dir.path(), 1024, Backpressure::Block);
        assert!(!p.writer_running());
        assert_eq!(p.shared.queue.lock().items.capacity(), 0);
        rt::block_on(async {
            let sh = shared_log(&p);
            let guard = write_lock(&sh.log);
            let first = park_writer(&p);
            let second = p.enqueue(record(b"b"), 1, 1).await.unwrap();
            assert!(p.writer_running());
            assert!(p.shared.queue.lock().items.capacity() > 0);
            drop(guard);
            assert_eq!(first.wait().await, Ok(0));
            assert_eq!(second.wait().await, Ok(1));
        });
        wait_for("the writer to end", || !p.writer_running());
        assert_eq!(p.shared.queue.lock().items.capacity(), 0, "slots released");
        rt::block_on(p.shutdown());
    }

    /// A Kafka batch entry of one record from producer 7, epoch 0, sequence `seq`.
    fn stamped(seq: i32, v: &[u8]) -> (Bytes, Option<ProducerBatch>) {
        use flume_protocol::kafka_batch::{BatchBuilder, BatchMeta, Compression};
        let mut b = BatchBuilder::new(None);
        b.push(0, 1, None, Some(v), []);
        let meta = BatchMeta {
            producer_id: 7,
            producer_epoch: 0,
            base_sequence: seq,
            ..BatchMeta::default()
        };
        let mut entry = Vec::new();
        flume_protocol::record::encode_batch_entry(
            &mut entry,
            &b.finish(&meta, Compression::None).unwrap(),
        );
        let pb = ProducerBatch {
            id: 7,
            epoch: 0,
            base_sequence: seq,
        };
        (Bytes::from(entry), Some(pb))
    }

    fn send(p: &Partition, seq: i32, v: &[u8]) -> Result<Stored, Refusal> {
        let (entry, pb) = stamped(seq, v);
        rt::block_on(async { p.enqueue_as(entry, 1, 1, pb).await.unwrap().outcome().await })
    }

    #[test]
    fn idempotent_producers_are_recovered_from_a_snapshot_and_the_log_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let stored = |base, duplicate| Ok(Stored { base, duplicate });
        let p = partition(dir.path(), 1024, Backpressure::Block);
        for seq in 0..3 {
            assert_eq!(send(&p, seq, b"v"), stored(seq as u64, false));
        }
        // A clean stop writes the snapshot: the retry of the last batch is a duplicate.
        rt::block_on(p.shutdown());
        drop(p);
        assert!(dir.path().join(producers::SNAPSHOT_FILE).is_file());
        let p = partition(dir.path(), 1024, Backpressure::Block);
        assert_eq!(send(&p, 2, b"v"), stored(2, true));
        assert_eq!(
            send(&p, 5, b"gap"),
            Err(Refusal::Producer(ProducerError::OutOfOrderSequence))
        );
        // Appended after the snapshot, then a crash (no stop, no new snapshot):
        // the batch is read back from the log.
        assert_eq!(send(&p, 3, b"v"), stored(3, false));
        drop(p);
        let p = partition(dir.path(), 1024, Backpressure::Block);
        assert_eq!(
            send(&p, 3, b"v"),
            stored(3, true),
            "from the log after the snapshot"
        );
        assert_eq!(send(&p, 2, b"v"), stored(2, true), "from the snapshot");
        assert_eq!(send(&p, 4, b"v"), stored(4, false));
        // Without any snapshot the active segment is read.
        drop(p);
        std::fs::remove_file(dir.path().join(producers::SNAPSHOT_FILE)).unwrap();
        let p = partition(dir.path(), 1024, Backpressure::Block);
        assert_eq!(send(&p, 4, b"v"), stored(4, true));
        assert_eq!(p.end_offset(), 5, "no retry was appended twice");
        // A damaged snapshot is ignored (the log is read instead).
        rt::block_on(p.shutdown());
        drop(p);
        let snap = dir.path().join(producers::SNAPSHOT_FILE);
        let mut raw = std::fs::read(&snap).unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 1;
        std::fs::write(&snap, raw).unwrap();
        let p = partition(dir.path(), 1024, Backpressure::Block);
        assert_eq!(send(&p, 4, b"v"), stored(4, true));
        rt::block_on(p.shutdown());
    }

    #[test]
    fn the_writer_checks_idempotent_requests_in_queue_order_within_a_group_commit() {
        let dir = tempfile::tempdir().unwrap();
        let p = partition(dir.path(), 1024, Backpressure::Block);
        let pb = |seq| {
            Some(ProducerBatch {
                id: 7,
                epoch: 0,
                base_sequence: seq,
            })
        };
        rt::block_on(async {
            let sh = shared_log(&p);
            let guard = write_lock(&sh.log);
            let first = park_writer(&p); // offset 0, no producer
                                         // One group commit: seq 0, its retry, a gap, seq 1, a plain record.
            let a = p.enqueue_as(record(b"a"), 1, 1, pb(0)).await.unwrap();
            let retry = p.enqueue_as(record(b"a"), 1, 1, pb(0)).await.unwrap();
            let gap = p.enqueue_as(record(b"z"), 1, 1, pb(5)).await.unwrap();
            let b = p.enqueue_as(record(b"b"), 1, 1, pb(1)).await.unwrap();
            let plain = p.enqueue(record(b"c"), 1, 1).await.unwrap();
            drop(guard);
            assert_eq!(first.wait().await, Ok(0));
            let stored = |base, duplicate| Ok(Stored { base, duplicate });
            assert_eq!(a.outcome().await, stored(1, false));
            assert_eq!(retry.outcome().await, stored(1, true));
            assert_eq!(
                gap.outcome().await,
                Err(Refusal::Producer(ProducerError::OutOfOrderSequence))
            );
            assert_eq!(b.outcome().await, stored(2, false));
            assert_eq!(plain.outcome().await, stored(3, false));
            assert_eq!(p.end_offset(), 4, "the retry and the gap were not written");
            // The fast path (idle partition) checks too.
            let again = p.enqueue_as(record(b"b"), 1, 1, pb(1)).await.unwrap();
            assert!(matches!(again, Admission::Done(_)));
            assert_eq!(again.outcome().await, stored(2, true));
            let read = p.read(0, 1 << 20, ReadAs::Records, true).await.unwrap();
            let values: Vec<Vec<u8>> =
                flume_protocol::record::decode_all(&Bytes::from(read.records))
                    .unwrap()
                    .into_iter()
                    .map(|r| r.payload().to_vec())
                    .collect();
            assert_eq!(values, [&b"first"[..], b"a", b"b", b"c"]);
            p.shutdown().await;
        });
    }

    #[test]
    fn inline_appends_reuse_one_buffer_without_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        let p = partition(dir.path(), 1024, Backpressure::Block);
        rt::block_on(async {
            // A long batch, then shorter ones: nothing of an earlier append
            // may reach a later one through the reused buffer.
            let mut long = Vec::new();
            for _ in 0..3 {
                long.extend_from_slice(&record(&[b'a'; 300]));
            }
            let appended = p.enqueue(Bytes::from(long), 3, 1).await.unwrap();
            assert!(matches!(appended, Admission::Done(_)), "idle: inline");
            assert_eq!(appended.wait().await, Ok(0));
            for (i, v) in [&b"b"[..], b"cc"].into_iter().enumerate() {
                let a = p.enqueue(record(v), 1, 1).await.unwrap();
                assert!(matches!(a, Admission::Done(_)));
                assert_eq!(a.wait().await, Ok(3 + i as u64));
            }
            let read = p.read(0, 1 << 20, ReadAs::Records, true).await.unwrap();
            let recs = flume_protocol::record::decode_all(&Bytes::from(read.records)).unwrap();
            let values: Vec<Vec<u8>> = recs.iter().map(|r| r.payload().to_vec()).collect();
            assert_eq!(values.len(), 5);
            assert_eq!(values[3], b"b");
            assert_eq!(values[4], b"cc");
            let offsets: Vec<u64> = recs.iter().map(|r| r.offset).collect();
            assert_eq!(offsets, [0, 1, 2, 3, 4]);
            p.shutdown().await;
        });
    }

    #[test]
    fn reject_mode_refuses_at_max_pending() {
        let dir = tempfile::tempdir().unwrap();
        let p = partition(dir.path(), 2, Backpressure::Reject);
        rt::block_on(async {
            let sh = shared_log(&p);
            let guard = write_lock(&sh.log);
            let first = park_writer(&p);
            let a = p.enqueue(record(b"a"), 1, 1).await.unwrap();
            let b = p.enqueue(record(b"b"), 1, 1).await.unwrap();
            assert_eq!(p.queued(), 2);
            assert_eq!(
                p.enqueue(record(b"c"), 1, 1).await.unwrap_err(),
                ErrorCode::QueueFull
            );
            drop(guard);
            assert_eq!(first.wait().await, Ok(0));
            assert_eq!(a.wait().await, Ok(1));
            assert_eq!(b.wait().await, Ok(2));
            p.shutdown().await;
        });
    }

    #[test]
    fn block_mode_waits_at_max_pending_and_shutdown_wakes_waiters() {
        let dir = tempfile::tempdir().unwrap();
        let p = partition(dir.path(), 2, Backpressure::Block);
        rt::block_on(async {
            let sh = shared_log(&p);
            let guard = write_lock(&sh.log);
            let first = park_writer(&p);
            let a = p.enqueue(record(b"a"), 1, 1).await.unwrap();
            let b = p.enqueue(record(b"b"), 1, 1).await.unwrap();
            let mut third = Box::pin(p.enqueue(record(b"c"), 1, 1));
            assert!(third.as_mut().now_or_never().is_none(), "waits for room");
            // Cancelled while waiting: nothing was queued.
            drop(third);
            assert_eq!(p.queued(), 2);
            let mut fourth = Box::pin(p.enqueue(record(b"d"), 1, 1));
            assert!(fourth.as_mut().now_or_never().is_none());
            drop(guard);
            assert_eq!(first.wait().await, Ok(0));
            assert_eq!(a.wait().await, Ok(1));
            assert_eq!(b.wait().await, Ok(2));
            assert_eq!(
                fourth.await.unwrap().wait().await,
                Ok(3),
                "room made, queued"
            );
            // A producer waiting at shutdown gets SHUTTING_DOWN.
            let guard = write_lock(&sh.log);
            let first = park_writer(&p);
            let _a = p.enqueue(record(b"e"), 1, 1).await.unwrap();
            let _b = p.enqueue(record(b"f"), 1, 1).await.unwrap();
            let mut blocked = Box::pin(p.enqueue(record(b"g"), 1, 1));
            assert!(blocked.as_mut().now_or_never().is_none());
            p.shared.queue.lock().closed = true;
            p.shared.queue.room.notify(usize::MAX);
            assert_eq!(blocked.await.unwrap_err(), ErrorCode::ShuttingDown);
            drop(guard);
            assert_eq!(first.wait().await, Ok(4));
            p.shutdown().await;
            assert!(!p.writer_running());
        });
    }
}

//! A partition: a [`Log`] plus a bounded queue drained by one writer task.
//!
//! The writer takes everything waiting (up to `writer_batch_bytes`), appends
//! it with one write (group commit), applies the fsync policy once for the
//! batch, then acknowledges each request with its base offset. Appends and
//! reads run on the blocking pool (`rt::unblock`) so file I/O never stalls the
//! executor threads that serve connections.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use event_listener::{Event, EventListener};
use flume_client::protocol::ErrorCode;
use flume_client::rt;
use futures::channel::oneshot;

use crate::config::Backpressure;
use crate::error::BrokerError;
use crate::storage::{Log, ReadResult, StorageError};

/// The outcome of an append: the base offset, or an error code.
pub type AppendResult = Result<u64, ErrorCode>;

/// One queued append: validated records of one partition.
#[derive(Debug)]
pub struct AppendRequest {
    /// Records in the stored format.
    pub batch: Vec<u8>,
    /// Number of records.
    pub count: u32,
    /// Largest timestamp.
    pub max_timestamp: i64,
    /// Where the result goes.
    pub ack: oneshot::Sender<AppendResult>,
}

/// A partition of a topic.
#[derive(Debug)]
pub struct Partition {
    /// Topic name.
    pub topic: String,
    /// Partition number.
    pub id: u32,
    log: Arc<RwLock<Log>>,
    queue: async_channel::Sender<AppendRequest>,
    backpressure: Backpressure,
    /// Notified after every append, for long-poll fetches.
    data: Arc<Event>,
    end: Arc<AtomicU64>,
    start: Arc<AtomicU64>,
    failed: Arc<AtomicBool>,
    writer: std::sync::Mutex<Option<rt::Task<()>>>,
}

pub(crate) fn read_lock(log: &RwLock<Log>) -> std::sync::RwLockReadGuard<'_, Log> {
    log.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(crate) fn write_lock(log: &RwLock<Log>) -> std::sync::RwLockWriteGuard<'_, Log> {
    log.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
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
        let end = Arc::new(AtomicU64::new(log.end_offset()));
        let start = Arc::new(AtomicU64::new(log.start_offset()));
        let log = Arc::new(RwLock::new(log));
        let data = Arc::new(Event::new());
        let failed = Arc::new(AtomicBool::new(false));
        let writer = rt::spawn(writer_loop(
            rx,
            Arc::clone(&log),
            Arc::clone(&data),
            Arc::clone(&end),
            Arc::clone(&failed),
            batch_bytes,
        ));
        Partition {
            topic: topic.to_owned(),
            id,
            log,
            queue: tx,
            backpressure,
            data,
            end,
            start,
            failed,
            writer: std::sync::Mutex::new(Some(writer)),
        }
    }

    /// Offset the next record gets.
    pub fn end_offset(&self) -> u64 {
        self.end.load(Ordering::Acquire)
    }

    /// Oldest stored offset.
    pub fn start_offset(&self) -> u64 {
        self.start.load(Ordering::Acquire)
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
        self.data.listen()
    }

    /// Queues an append. In block mode this waits for room; in reject mode a
    /// full queue is QUEUE_FULL at once. Returns where the result will come.
    ///
    /// # Errors
    /// QUEUE_FULL (reject mode), SHUTTING_DOWN (queue closed).
    ///
    /// # Cancel safety
    /// Cancelling while waiting for room queues nothing.
    pub async fn enqueue(
        &self,
        batch: Vec<u8>,
        count: u32,
        max_timestamp: i64,
    ) -> Result<oneshot::Receiver<AppendResult>, ErrorCode> {
        let (ack, rx) = oneshot::channel();
        let req = AppendRequest {
            batch,
            count,
            max_timestamp,
            ack,
        };
        match self.backpressure {
            Backpressure::Block => self
                .queue
                .send(req)
                .await
                .map_err(|_| ErrorCode::ShuttingDown)?,
            Backpressure::Reject => self.queue.try_send(req).map_err(|e| match e {
                async_channel::TrySendError::Full(_) => ErrorCode::QueueFull,
                async_channel::TrySendError::Closed(_) => ErrorCode::ShuttingDown,
            })?,
        }
        Ok(rx)
    }

    /// Queues an append and waits for its base offset.
    ///
    /// # Errors
    /// As [`Partition::enqueue`], or the append's failure.
    pub async fn append(
        &self,
        batch: Vec<u8>,
        count: u32,
        max_timestamp: i64,
    ) -> Result<u64, ErrorCode> {
        let rx = self.enqueue(batch, count, max_timestamp).await?;
        rx.await.unwrap_or(Err(ErrorCode::ShuttingDown))
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
        let log = Arc::clone(&self.log);
        let r = rt::unblock(move || read_lock(&log).read(offset, max_bytes)).await;
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
        Ok(read_lock(&self.log).read(offset, max_bytes)?)
    }

    /// Runs retention and the interval fsync; called by the broker's ticker.
    pub async fn maintain(&self, now_ms: i64) {
        let log = Arc::clone(&self.log);
        let r = rt::unblock(move || {
            let mut l = write_lock(&log);
            l.sync_if_due()?;
            l.enforce_retention(now_ms)?;
            Ok::<u64, StorageError>(l.start_offset())
        })
        .await;
        match r {
            Ok(start) => self.start.store(start, Ordering::Release),
            Err(e) => {
                tracing::error!(topic = %self.topic, partition = self.id, error = %e, "maintenance failed")
            }
        }
    }

    /// True once an append has failed on disk (the partition keeps serving reads).
    pub fn has_failed_write(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Closes the queue, lets the writer drain it, and fsyncs the log.
    pub async fn shutdown(&self) {
        self.queue.close();
        let writer = self
            .writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(w) = writer {
            w.await;
        }
        let log = Arc::clone(&self.log);
        let r = rt::unblock(move || {
            let mut l = write_lock(&log);
            l.sync()
        })
        .await;
        if let Err(e) = r {
            tracing::error!(topic = %self.topic, partition = self.id, error = %e, "fsync at shutdown failed");
        }
        self.data.notify(usize::MAX);
    }
}

async fn writer_loop(
    rx: async_channel::Receiver<AppendRequest>,
    log: Arc<RwLock<Log>>,
    data: Arc<Event>,
    end: Arc<AtomicU64>,
    failed: Arc<AtomicBool>,
    batch_bytes: usize,
) {
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
        let mut batch = if reqs.len() == 1 {
            std::mem::take(&mut reqs[0].batch)
        } else {
            let mut b = Vec::with_capacity(bytes);
            for r in &reqs {
                b.extend_from_slice(&r.batch);
            }
            b
        };
        let count: u64 = reqs.iter().map(|r| u64::from(r.count)).sum();
        let max_ts = reqs.iter().map(|r| r.max_timestamp).max().unwrap_or(0);
        let log2 = Arc::clone(&log);
        let result = rt::unblock(move || {
            let mut l = write_lock(&log2);
            l.append_validated(&mut batch, count, max_ts)
                .map(|base| (base, l.end_offset()))
        })
        .await;
        match result {
            Ok((base, new_end)) => {
                end.store(new_end, Ordering::Release);
                data.notify(usize::MAX);
                let mut next = base;
                for r in reqs {
                    let _ = r.ack.send(Ok(next));
                    next += u64::from(r.count);
                }
            }
            Err(e) => {
                failed.store(true, Ordering::Release);
                tracing::error!(dir = %crate::partition::read_lock(&log).dir().display(), error = %e, "append failed; producers get STORAGE_ERROR");
                for r in reqs {
                    let _ = r.ack.send(Err(ErrorCode::StorageError));
                }
            }
        }
    }
}

//! The producer: `send` from any number of tasks; records are batched per
//! (topic, partition) into PRODUCE requests by one background task.
//!
//! - Batching: whatever accumulated while the previous requests were being
//!   written goes out together; `linger` waits a little longer to fill
//!   batches; a batch is sent at once when it reaches `batch_max_bytes`.
//! - At most `max_in_flight` requests are outstanding; requests are written
//!   in order by the one sender task.
//! - Order: records sent one after another with the same key keep their
//!   order in the partition, even with several requests in flight, because
//!   requests are written in order on one connection, the broker admits them
//!   in order, and the producer never retries (a failed send fails; the
//!   caller decides whether to send again).
//! - Memory: at most `buffer_max_bytes` of records wait in the client.
//!   `send` waits for room (default); `try_send` fails fast with
//!   [`Error::BufferFull`].
//! - Routing: with no explicit partition the broker routes by key (FNV-1a of
//!   the key modulo the partition count, see
//!   [`crate::protocol::partition_for_key`]); null keys go to one partition per batch.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use event_listener::Event;
use futures::channel::oneshot;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;

use crate::conn::{Client, ConnectionConfig};
use crate::error::{Error, Result};
use crate::protocol::record::{self, Header};
use crate::protocol::{ErrorCode, ProduceEntry, ProduceRequest, ProduceResponse};
use crate::rt;

/// Producer settings.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// Extra wait to fill batches before sending (0: send what is there now).
    pub linger: Duration,
    /// A batch this large is sent at once; also the most bytes per (topic, partition) per request.
    pub batch_max_bytes: usize,
    /// Most bytes of records waiting in the client.
    pub buffer_max_bytes: usize,
    /// Most PRODUCE requests in flight.
    pub max_in_flight: usize,
    /// Largest record, counting its 16-byte header: larger ones fail at once
    /// with RECORD_TOO_LARGE. The default is the broker's default
    /// `max_record_bytes` (1 MiB); keep the two equal.
    pub max_record_bytes: usize,
    /// Largest PRODUCE request: batches of several partitions (or several
    /// batches of one) share a request up to this size (a single batch may
    /// exceed it). Always kept 64 KiB under `connection.max_frame_bytes`.
    pub request_max_bytes: usize,
    /// Connection settings.
    pub connection: ConnectionConfig,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            linger: Duration::ZERO,
            batch_max_bytes: 1024 * 1024,
            buffer_max_bytes: 32 * 1024 * 1024,
            max_in_flight: 8,
            max_record_bytes: record::DEFAULT_MAX_RECORD_BYTES,
            request_max_bytes: 4 * 1024 * 1024,
            connection: ConnectionConfig::default(),
        }
    }
}

/// Where an acknowledged record landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
}

/// A record to send, with every optional field.
#[derive(Debug, Clone, Default)]
pub struct SendRecord {
    /// Topic.
    pub topic: String,
    /// Key (routes the record when no partition is given).
    pub key: Option<Bytes>,
    /// Value.
    pub value: Bytes,
    /// Headers.
    pub headers: Vec<Header>,
    /// Explicit partition.
    pub partition: Option<i32>,
    /// Timestamp in ms; now when `None`.
    pub timestamp: Option<i64>,
}

type Ack = oneshot::Sender<Result<RecordMetadata>>;

#[derive(Default)]
struct Batch {
    buf: Vec<u8>,
    acks: Vec<Ack>,
}

struct Shared {
    client: Client,
    config: ProducerConfig,
    state: Mutex<State>,
    /// Notified when a batch is added (sender) and when buffer room frees up (senders waiting).
    added: Event,
    freed: Event,
    /// Held by whoever is writing a PRODUCE request (the sender task from taking
    /// batches until the request is written; a direct send while it writes), so
    /// requests reach the connection in the order their records were accepted.
    order: futures::lock::Mutex<()>,
}

#[derive(Default)]
struct State {
    /// Per (topic, partition), batches of at most `batch_max_bytes` (one record may exceed it), oldest first.
    batches: BTreeMap<String, BTreeMap<i32, VecDeque<Batch>>>,
    buffered: usize,
    full: bool,
    closed: bool,
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A batching producer. Cheap to share behind an `Arc`; `send` takes `&self`.
pub struct Producer {
    shared: Arc<Shared>,
    sender: Mutex<Option<rt::Task<()>>>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("broker", &self.shared.client.addr())
            .finish()
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Producer {
    /// Connects with default settings.
    ///
    /// # Errors
    /// [`Error::Connect`] when the broker cannot be reached.
    pub async fn connect(addr: &str) -> Result<Self> {
        Self::with_config(addr, ProducerConfig::default()).await
    }

    /// Connects with explicit settings.
    ///
    /// # Errors
    /// [`Error::Connect`] when the broker cannot be reached.
    pub async fn with_config(addr: &str, mut config: ProducerConfig) -> Result<Self> {
        config.max_in_flight = config.max_in_flight.max(1);
        config.connection.max_in_flight = config.connection.max_in_flight.max(config.max_in_flight);
        let client = Client::connect(addr, config.connection.clone()).await?;
        let shared = Arc::new(Shared {
            client,
            config,
            state: Mutex::new(State::default()),
            added: Event::new(),
            freed: Event::new(),
            order: futures::lock::Mutex::new(()),
        });
        let sender = rt::spawn(sender_loop(Arc::clone(&shared)));
        Ok(Producer {
            shared,
            sender: Mutex::new(Some(sender)),
        })
    }

    /// Sends a record and waits for the broker's acknowledgement.
    ///
    /// # Errors
    /// Connection failures, broker errors (QUEUE_FULL, RECORD_TOO_LARGE, ...), [`Error::Closed`].
    pub async fn send(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: &[u8],
    ) -> Result<RecordMetadata> {
        self.send_record(SendRecord {
            topic: topic.to_owned(),
            key: key.map(Bytes::copy_from_slice),
            value: Bytes::copy_from_slice(value),
            ..SendRecord::default()
        })
        .await
    }

    /// Sends a record with headers, partition or timestamp.
    ///
    /// # Errors
    /// As [`Producer::send`].
    pub async fn send_record(&self, rec: SendRecord) -> Result<RecordMetadata> {
        let rec = match self.try_direct(rec).await {
            Ok(result) => return result,
            Err(rec) => rec,
        };
        let rx = self.enqueue(rec, true).await?;
        rx.await.unwrap_or(Err(Error::Closed))
    }

    /// One record at a time on an idle producer: the caller writes its own
    /// request instead of handing it to the sender task and back, which saves
    /// two thread hand-offs per round trip. Gives the record back when the
    /// producer is busy (batches waiting, or the sender writing), so order holds.
    async fn try_direct(
        &self,
        rec: SendRecord,
    ) -> std::result::Result<Result<RecordMetadata>, SendRecord> {
        let sh = &self.shared;
        if !sh.config.linger.is_zero() || rec.topic.is_empty() {
            return Err(rec);
        }
        let Some(order) = sh.order.try_lock() else {
            return Err(rec);
        };
        let len = record::encoded_len(rec.key.as_deref(), &rec.value, &rec.headers);
        {
            let mut st = lock(&sh.state);
            if st.closed
                || !st.batches.is_empty()
                || st.buffered + len > sh.config.buffer_max_bytes
                || len > sh.config.batch_max_bytes
            {
                return Err(rec);
            }
            st.buffered += len;
        }
        let mut buf = Vec::with_capacity(len);
        record::encode(
            &mut buf,
            0,
            rec.timestamp.unwrap_or_else(now_ms),
            rec.key.as_deref(),
            &rec.value,
            &rec.headers,
        );
        let req = ProduceRequest {
            entries: vec![ProduceEntry {
                topic: rec.topic,
                partition: rec.partition.unwrap_or(-1),
                records: Bytes::from(buf),
            }],
        };
        let started = match sh.client.connection().await {
            Ok(conn) => conn.start_call(&req, Duration::ZERO).await,
            Err(e) => Err(e),
        };
        drop(order);
        let result = match started {
            Ok(fut) => fut.await,
            Err(e) => Err(e),
        };
        let (tx, rx) = oneshot::channel();
        complete(sh, (vec![(len, vec![tx])], result));
        Ok(rx.await.unwrap_or(Err(Error::Closed)))
    }

    /// Buffers a record without waiting for room or for the acknowledgement;
    /// the returned future resolves to its metadata.
    ///
    /// # Errors
    /// [`Error::BufferFull`] when the buffer is full, [`Error::Closed`].
    pub fn try_send(
        &self,
        rec: SendRecord,
    ) -> Result<impl std::future::Future<Output = Result<RecordMetadata>>> {
        let rx = self
            .enqueue(rec, false)
            .now_or_never()
            .unwrap_or(Err(Error::BufferFull {
                limit: self.shared.config.buffer_max_bytes,
            }))?;
        Ok(async move { rx.await.unwrap_or(Err(Error::Closed)) })
    }

    /// Buffers a record, waiting for room in the buffer; the returned future
    /// resolves to its metadata. Lets one task keep many sends in flight.
    ///
    /// # Errors
    /// [`Error::Closed`], or an invalid record.
    pub async fn send_nowait(
        &self,
        rec: SendRecord,
    ) -> Result<impl std::future::Future<Output = Result<RecordMetadata>>> {
        let rx = self.enqueue(rec, true).await?;
        Ok(async move { rx.await.unwrap_or(Err(Error::Closed)) })
    }

    async fn enqueue(
        &self,
        rec: SendRecord,
        wait: bool,
    ) -> Result<oneshot::Receiver<Result<RecordMetadata>>> {
        let sh = &self.shared;
        if rec.topic.is_empty() {
            return Err(Error::InvalidArgument("topic must not be empty".into()));
        }
        let len = record::encoded_len(rec.key.as_deref(), &rec.value, &rec.headers);
        let limit = sh
            .config
            .max_record_bytes
            .min(sh.config.buffer_max_bytes)
            .min(sh.config.connection.max_frame_bytes.saturating_sub(1024));
        if len > limit {
            return Err(Error::broker(
                ErrorCode::RecordTooLarge,
                format!(
                    "a record of {len} bytes (its 16-byte header included): the limit is {limit} bytes (max_record_bytes)"
                ),
            ));
        }
        let timestamp = rec.timestamp.unwrap_or_else(now_ms);
        let partition = rec.partition.unwrap_or(-1);
        let (tx, rx) = oneshot::channel();
        let mut listener: Option<event_listener::EventListener> = None;
        loop {
            {
                let mut st = lock(&sh.state);
                if st.closed {
                    return Err(Error::Closed);
                }
                if st.buffered + len <= sh.config.buffer_max_bytes {
                    st.buffered += len;
                    let max = sh.config.batch_max_bytes;
                    if !st.batches.contains_key(&rec.topic) {
                        st.batches.insert(rec.topic.clone(), BTreeMap::new());
                    }
                    let mut full = false;
                    if let Some(queue) = st
                        .batches
                        .get_mut(&rec.topic)
                        .map(|t| t.entry(partition).or_default())
                    {
                        if queue.back().is_none_or(|b| b.buf.len() + len > max) {
                            queue.push_back(Batch::default());
                        }
                        full = queue.len() > 1;
                        if let Some(b) = queue.back_mut() {
                            // Encoded straight into the batch: no per-record buffer.
                            record::encode(
                                &mut b.buf,
                                0,
                                timestamp,
                                rec.key.as_deref(),
                                &rec.value,
                                &rec.headers,
                            );
                            b.acks.push(tx);
                            full |= b.buf.len() >= max;
                        }
                    }
                    st.full |= full;
                    break;
                }
            }
            if !wait {
                return Err(Error::BufferFull {
                    limit: sh.config.buffer_max_bytes,
                });
            }
            // Listen, then look again before sleeping, so a release in between is not missed.
            match listener.take() {
                Some(l) => l.await,
                None => listener = Some(sh.freed.listen()),
            }
        }
        sh.added.notify(1);
        Ok(rx)
    }

    /// Waits until every record sent before the call is acknowledged (or failed).
    pub async fn flush(&self) {
        let sh = &self.shared;
        loop {
            let listener = sh.freed.listen();
            if lock(&sh.state).buffered == 0 {
                return;
            }
            sh.added.notify(1);
            listener.await;
        }
    }

    /// Flushes, then stops the sender task and closes the connection.
    pub async fn close(&self) {
        self.flush().await;
        lock(&self.shared.state).closed = true;
        self.shared.added.notify(usize::MAX);
        let task = self
            .sender
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(t) = task {
            t.await;
        }
        self.shared.client.close().await;
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        lock(&self.shared.state).closed = true;
        self.shared.added.notify(usize::MAX);
    }
}

type Sent = (Vec<(usize, Vec<Ack>)>, Result<ProduceResponse>);

async fn sender_loop(sh: Arc<Shared>) {
    let mut inflight: FuturesUnordered<futures::future::BoxFuture<'static, Sent>> =
        FuturesUnordered::new();
    loop {
        let listener = sh.added.listen();
        let (has_data, closed, full) = {
            let st = lock(&sh.state);
            (!st.batches.is_empty(), st.closed, st.full)
        };
        if closed && !has_data && inflight.is_empty() {
            return;
        }
        if !has_data || inflight.len() >= sh.config.max_in_flight {
            let next = async {
                if inflight.is_empty() {
                    futures::future::pending().await
                } else {
                    inflight.next().await
                }
            };
            let done = futures::select! {
                _ = listener.fuse() => None,
                d = next.fuse() => d,
            };
            if let Some(d) = done {
                complete(&sh, d);
            }
            continue;
        }
        if !sh.config.linger.is_zero() && !full && !closed {
            rt::sleep(sh.config.linger).await;
        }
        // Take the oldest batch of each partition, then the next ones, while the request
        // stays under its limit; what is left goes in the next request.
        let limit = sh
            .config
            .connection
            .max_frame_bytes
            .saturating_sub(64 * 1024)
            .min(sh.config.request_max_bytes)
            .max(1);
        let mut entries = Vec::new();
        let mut acks = Vec::new();
        let order = sh.order.lock().await;
        {
            let mut st = lock(&sh.state);
            let mut size = 0usize;
            'fill: loop {
                let mut took = false;
                for (topic, parts) in st.batches.iter_mut() {
                    for (partition, queue) in parts.iter_mut() {
                        let Some(cost) = queue.front().map(|b| b.buf.len() + topic.len() + 16)
                        else {
                            continue;
                        };
                        if size > 0 && size + cost > limit {
                            break 'fill;
                        }
                        let Some(b) = queue.pop_front() else { continue };
                        size += cost;
                        took = true;
                        acks.push((b.buf.len(), b.acks));
                        entries.push(ProduceEntry {
                            topic: topic.clone(),
                            partition: *partition,
                            records: Bytes::from(b.buf),
                        });
                    }
                }
                if !took {
                    break;
                }
            }
            for parts in st.batches.values_mut() {
                parts.retain(|_, q| !q.is_empty());
            }
            st.batches.retain(|_, parts| !parts.is_empty());
            let max = sh.config.batch_max_bytes;
            st.full = st
                .batches
                .values()
                .flat_map(BTreeMap::values)
                .any(|q| q.len() > 1 || q.front().is_some_and(|b| b.buf.len() >= max));
        }
        let req = ProduceRequest { entries };
        let started = match sh.client.connection().await {
            Ok(conn) => conn.start_call(&req, Duration::ZERO).await,
            Err(e) => Err(e),
        };
        drop(order);
        match started {
            Ok(fut) => inflight.push(async move { (acks, fut.await) }.boxed()),
            Err(e) => complete(&sh, (acks, Err(e))),
        }
        // Collect whatever already finished without waiting.
        while let Some(Some(d)) = inflight.next().now_or_never() {
            complete(&sh, d);
        }
    }
}

fn complete(sh: &Shared, (acks, result): Sent) {
    let freed: usize = acks.iter().map(|(n, _)| n).sum();
    match result {
        Ok(resp) if resp.results.len() == acks.len() => {
            for ((_, waiters), r) in acks.into_iter().zip(resp.results) {
                if !r.error.is_ok() {
                    let context = if r.error == ErrorCode::RecordTooLarge {
                        format!(
                            "{}/{}: a record is above the broker's max_record_bytes (the producer's limit is {} bytes, 16-byte header included)",
                            r.topic, r.partition, sh.config.max_record_bytes
                        )
                    } else {
                        format!("{}/{}", r.topic, r.partition)
                    };
                    let err = Error::broker(r.error, context);
                    for w in waiters {
                        let _ = w.send(Err(err.clone()));
                    }
                    continue;
                }
                let offsets = r.record_offsets();
                for (i, w) in waiters.into_iter().enumerate() {
                    let meta = offsets.get(i).map(|(p, o)| RecordMetadata {
                        partition: *p,
                        offset: *o,
                    });
                    let _ = w.send(meta.ok_or_else(|| {
                        Error::InvalidArgument("broker acknowledged fewer records than sent".into())
                    }));
                }
            }
        }
        Ok(_) => {
            let err = Error::InvalidArgument("PRODUCE response does not match the request".into());
            for (_, waiters) in acks {
                for w in waiters {
                    let _ = w.send(Err(err.clone()));
                }
            }
        }
        Err(e) => {
            for (_, waiters) in acks {
                for w in waiters {
                    let _ = w.send(Err(e.clone()));
                }
            }
        }
    }
    {
        let mut st = lock(&sh.state);
        st.buffered = st.buffered.saturating_sub(freed);
    }
    sh.freed.notify(usize::MAX);
}

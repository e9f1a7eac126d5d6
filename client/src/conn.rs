//! One multiplexed connection: requests are written as they come, a reader
//! task matches responses by `request_id`, and when the connection breaks
//! every pending request fails with the same error.
//!
//! [`Client`] wraps a connection and reconnects, with backoff, on the next
//! call after a failure.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::channel::oneshot;
use futures::io::AsyncReadExt;
use futures::lock::Mutex as AsyncMutex;
use futures::FutureExt;

use crate::error::{Error, Result};
use crate::protocol::frame::{self, Decoded};
use crate::protocol::{self, messages::decode_response_shared, Request};
use crate::rt;

/// Connection settings.
#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    /// Time allowed for one request (long-poll fetches add their wait to it).
    pub request_timeout: Duration,
    /// Time allowed to open the TCP connection.
    pub connect_timeout: Duration,
    /// Most requests in flight on the connection; further calls wait.
    pub max_in_flight: usize,
    /// Largest response frame accepted.
    pub max_frame_bytes: usize,
    /// Reconnect backoff: first delay, doubled up to `backoff_max`.
    pub backoff_initial: Duration,
    /// Largest reconnect delay.
    pub backoff_max: Duration,
    /// Before waiting for a response the usual way (parking the thread until
    /// the reactor reports the socket readable), keep trying to read for this
    /// long, yielding to other tasks between tries. Zero (the default) never
    /// spins. A few tens of microseconds cut one-at-a-time latency where waking
    /// an idle core is slow (VMs, deep C-states) at the price of a busy core;
    /// it suits a latency-bound caller with a core to spare.
    pub busy_poll: Duration,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        ConnectionConfig {
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            max_in_flight: 64,
            max_frame_bytes: frame::DEFAULT_MAX_FRAME_BYTES,
            backoff_initial: Duration::from_millis(50),
            backoff_max: Duration::from_secs(2),
            busy_poll: Duration::ZERO,
        }
    }
}

type Reply = oneshot::Sender<Result<Bytes>>;

/// A request waiting for its response, with the moment it times out.
struct Waiter {
    reply: Reply,
    deadline: std::time::Instant,
    api: &'static str,
    timeout: Duration,
}

struct Pending {
    map: HashMap<i32, Waiter>,
    broken: Option<Error>,
}

struct Inner {
    addr: String,
    writer: AsyncMutex<rt::TcpStream>,
    /// The read side. There is no reader task: a caller waiting for its
    /// response takes this lock and reads, handing every response it meets to
    /// its waiter (leader/follower). A lone caller thus reads its own response
    /// with no hand-off between tasks.
    reader: AsyncMutex<ReadState>,
    pending: Mutex<Pending>,
    /// Notified when requests were answered by someone other than the reader
    /// (deadline expiry, a failure): wakes the caller holding the read side.
    answered: event_listener::Event,
    next_id: AtomicI32,
    slots: (async_channel::Sender<()>, async_channel::Receiver<()>),
    /// When a response last arrived (ms since `born`), to skip liveness probes on a busy connection.
    last_rx_ms: std::sync::atomic::AtomicU64,
    born: std::time::Instant,
    config: ConnectionConfig,
}

/// A multiplexed connection to one broker.
#[derive(Clone)]
pub struct Connection {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("addr", &self.inner.addr)
            .finish()
    }
}

fn lock(p: &Mutex<Pending>) -> std::sync::MutexGuard<'_, Pending> {
    p.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Connection {
    /// Opens a connection to `addr`.
    ///
    /// # Errors
    /// [`Error::Connect`] when the broker cannot be reached in time.
    pub async fn connect(addr: &str, config: ConnectionConfig) -> Result<Self> {
        let connect_err = |e: std::io::Error| Error::Connect {
            addr: addr.to_owned(),
            reason: Arc::new(e),
        };
        let stream = rt::timeout(config.connect_timeout, rt::TcpStream::connect(addr))
            .await
            .ok_or_else(|| {
                connect_err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connect timed out",
                ))
            })?
            .map_err(connect_err)?;
        stream.set_nodelay(true).map_err(connect_err)?;
        let inner = Arc::new(Inner {
            addr: addr.to_owned(),
            writer: AsyncMutex::new(stream.clone()),
            reader: AsyncMutex::new(ReadState {
                stream,
                buf: BytesMut::with_capacity(64 * 1024),
                chunk: vec![0u8; 64 * 1024],
                drained: true,
                busy_poll: config.busy_poll,
            }),
            answered: event_listener::Event::new(),
            pending: Mutex::new(Pending {
                map: HashMap::new(),
                broken: None,
            }),
            next_id: AtomicI32::new(1),
            slots: async_channel::bounded(config.max_in_flight.max(1)),
            last_rx_ms: std::sync::atomic::AtomicU64::new(0),
            born: std::time::Instant::now(),
            config,
        });
        // One timer per connection fails requests past their deadline; a timer
        // per request would wake the reactor thread on every call.
        let weak = Arc::downgrade(&inner);
        let tick = (inner.config.request_timeout / 10)
            .clamp(Duration::from_millis(10), Duration::from_millis(100));
        rt::spawn(async move {
            loop {
                rt::sleep(tick).await;
                let Some(inner) = weak.upgrade() else { return };
                if !inner.expire(std::time::Instant::now()) {
                    return;
                }
            }
        });
        Ok(Connection { inner })
    }

    /// The broker address.
    pub fn addr(&self) -> &str {
        &self.inner.addr
    }

    /// True once the connection has failed; a new one is needed. With no
    /// request in flight, also notices a broker that closed the connection
    /// since the last call (one non-blocking read).
    pub fn is_broken(&self) -> bool {
        {
            let p = lock(&self.inner.pending);
            if p.broken.is_some() {
                return true;
            }
            if !p.map.is_empty() {
                return false;
            }
        }
        // A connection that answered in the last 100 ms is taken as alive: the
        // probe costs two system calls, as much as a third of a small request.
        let now = u64::try_from(self.inner.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        if now.saturating_sub(self.inner.last_rx_ms.load(Ordering::Relaxed)) < 100 {
            return false;
        }
        if let Some(mut st) = self.inner.reader.try_lock() {
            let st = &mut *st;
            let probe = st.stream.read(&mut st.chunk).now_or_never();
            if let Some(r) = probe {
                let r = r.map(|n| st.took(n));
                let reason = match r {
                    Ok(0) => Some("broker closed the connection".to_owned()),
                    Ok(_) => None,
                    Err(e) => Some(e.to_string()),
                };
                if let Some(reason) = reason {
                    self.inner.fail_all(Error::Disconnected {
                        addr: self.inner.addr.clone(),
                        reason,
                    });
                    return true;
                }
            }
        }
        false
    }

    /// Sends `req` and waits for its response, within the request timeout
    /// plus `extra` (for long polls).
    ///
    /// # Errors
    /// Connection failures, the timeout, a malformed response, or the
    /// broker's top-level error code as [`Error::Broker`].
    ///
    /// # Cancel safety
    /// Dropping the future abandons the request; its response is discarded.
    pub async fn call<R: Request>(&self, req: &R, extra: Duration) -> Result<R::Response> {
        let payload = self.call_raw(req, extra).await?;
        match decode_response_shared::<R::Response>(&payload)? {
            Ok(resp) => Ok(resp),
            Err(code) => Err(Error::Broker {
                code,
                context: None,
            }),
        }
    }

    async fn call_raw<R: Request>(&self, req: &R, extra: Duration) -> Result<Bytes> {
        self.start_raw(req, extra).await?.await
    }

    /// Writes `req` now and returns a future of its response. Requests
    /// started one after another reach the broker in that order, which is
    /// how the producer keeps per-key order with several requests in flight.
    ///
    /// # Errors
    /// When the connection is broken or the write fails or times out.
    pub async fn start_call<R: Request>(
        &self,
        req: &R,
        extra: Duration,
    ) -> Result<impl std::future::Future<Output = Result<R::Response>> + Send + 'static> {
        let fut = self.start_raw(req, extra).await?;
        Ok(async move {
            let payload = fut.await?;
            match decode_response_shared::<R::Response>(&payload)? {
                Ok(resp) => Ok(resp),
                Err(code) => Err(Error::Broker {
                    code,
                    context: None,
                }),
            }
        })
    }

    async fn start_raw<R: Request>(
        &self,
        req: &R,
        extra: Duration,
    ) -> Result<impl std::future::Future<Output = Result<Bytes>> + Send + 'static> {
        let inner = Arc::clone(&self.inner);
        // Take an in-flight slot; the guard gives it back however we leave.
        inner.slots.0.send(()).await.map_err(|_| Error::Closed)?;
        let slot = SlotGuard(inner.slots.1.clone());
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed) & i32::MAX;
        let (tx, rx) = oneshot::channel();
        {
            let mut p = lock(&inner.pending);
            if let Some(e) = &p.broken {
                return Err(e.clone());
            }
            p.map.insert(
                id,
                Waiter {
                    reply: tx,
                    deadline: std::time::Instant::now() + inner.config.request_timeout + extra,
                    api: api_name(R::API_KEY),
                    timeout: inner.config.request_timeout + extra,
                },
            );
        }
        let pending = PendingGuard {
            inner: Arc::clone(&inner),
            id,
        };
        let mut buf = Vec::new();
        protocol::encode_request(&mut buf, id, req);
        let api = api_name(R::API_KEY);
        let timeout = inner.config.request_timeout + extra;
        let timeout_err = {
            let addr = inner.addr.clone();
            move || Error::Timeout {
                api,
                addr: addr.clone(),
                timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            }
        };
        let written = {
            let mut w = inner.writer.lock().await;
            rt::write_all_timeout(&mut *w, &buf, timeout).await
        };
        match written {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return Err(timeout_err()),
            Err(e) => {
                let err = Error::Disconnected {
                    addr: inner.addr.clone(),
                    reason: e.to_string(),
                };
                inner.fail_all(err.clone());
                return Err(err);
            }
        }
        Ok(async move {
            let _slot = slot;
            let _pending = pending;
            // The per-connection sweeper answers with a timeout error past the deadline.
            wait_response(&_pending.inner, rx).await
        })
    }

    /// Closes the connection; pending requests fail.
    pub async fn close(&self) {
        self.inner.fail_all(Error::Closed);
        let w = self.inner.writer.lock().await;
        let _ = w.shutdown(std::net::Shutdown::Both);
    }
}

struct SlotGuard(async_channel::Receiver<()>);
impl Drop for SlotGuard {
    fn drop(&mut self) {
        let _ = self.0.try_recv();
    }
}

struct PendingGuard {
    inner: Arc<Inner>,
    id: i32,
}
impl Drop for PendingGuard {
    fn drop(&mut self) {
        lock(&self.inner.pending).map.remove(&self.id);
    }
}

impl Inner {
    /// Fails every request past its deadline; false once the connection is broken.
    fn expire(&self, now: std::time::Instant) -> bool {
        let expired: Vec<Waiter> = {
            let mut p = lock(&self.pending);
            if p.broken.is_some() {
                return false;
            }
            let ids: Vec<i32> = p
                .map
                .iter()
                .filter(|(_, w)| w.deadline <= now)
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter().filter_map(|id| p.map.remove(&id)).collect()
        };
        let any = !expired.is_empty();
        for w in expired {
            let _ = w.reply.send(Err(Error::Timeout {
                api: w.api,
                addr: self.addr.clone(),
                timeout_ms: u64::try_from(w.timeout.as_millis()).unwrap_or(u64::MAX),
            }));
        }
        if any {
            self.answered.notify(usize::MAX);
        }
        true
    }

    fn fail_all(&self, err: Error) {
        let drained: Vec<Reply> = {
            let mut p = lock(&self.pending);
            if p.broken.is_none() {
                p.broken = Some(err.clone());
            }
            p.map.drain().map(|(_, w)| w.reply).collect()
        };
        for tx in drained {
            let _ = tx.send(Err(err.clone()));
        }
        self.answered.notify(usize::MAX);
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(w) = self.writer.try_lock() {
            let _ = w.shutdown(std::net::Shutdown::Both);
        }
    }
}

struct ReadState {
    stream: rt::TcpStream,
    buf: BytesMut,
    /// Reads land here first: zeroed once, so no read pays for clearing memory.
    chunk: Vec<u8>,
    /// The last read came back short of `chunk`: the socket was empty then, so
    /// the next read waits for readiness instead of trying first.
    drained: bool,
    /// [`ConnectionConfig::busy_poll`].
    busy_poll: Duration,
}

impl ReadState {
    /// Appends the `n` bytes just read into `chunk` to the buffer.
    fn took(&mut self, n: usize) -> usize {
        self.buf.extend_from_slice(&self.chunk[..n]);
        self.drained = n < self.chunk.len();
        n
    }
}

fn closed(inner: &Inner) -> Error {
    lock(&inner.pending)
        .broken
        .clone()
        .unwrap_or_else(|| Error::Disconnected {
            addr: inner.addr.clone(),
            reason: "connection closed".into(),
        })
}

/// Waits for the response of one request: either another caller reads it for
/// us, or we take the read side and read until it arrives.
async fn wait_response(
    inner: &Arc<Inner>,
    mut rx: oneshot::Receiver<Result<Bytes>>,
) -> Result<Bytes> {
    use futures::future::{select, Either};
    // Uncontended, the read side is taken at once without registering on `rx`, so
    // the response we read ourselves wakes no one: a self-wake would make the
    // executor poll the reactor once more for nothing (five syscalls here).
    let mut st = match inner.reader.try_lock() {
        Some(st) => st,
        None => {
            let lock_fut = inner.reader.lock();
            futures::pin_mut!(lock_fut);
            match select(&mut rx, lock_fut).await {
                Either::Left((r, _)) => return r.unwrap_or_else(|_| Err(closed(inner))),
                Either::Right((st, _)) => st,
            }
        }
    };
    // We hold the read side: read until our own response has been handed over,
    // or until the deadline sweeper (or a failure) answers for us, which it
    // signals on `answered`.
    loop {
        let alarm = inner.answered.listen();
        match rx.try_recv() {
            Ok(Some(r)) => return r,
            Ok(None) => {}
            Err(_) => return Err(closed(inner)),
        }
        let read = read_some(inner, &mut st);
        futures::pin_mut!(read);
        match select(alarm, read).await {
            Either::Left(((), _)) | Either::Right((Ok(()), _)) => {}
            Either::Right((Err(reason), _)) => inner.fail_all(Error::Disconnected {
                addr: inner.addr.clone(),
                reason,
            }),
        }
    }
}

/// Hands every whole response in the buffer to its waiter; if there was none,
/// reads more bytes from the socket.
async fn read_some(inner: &Inner, st: &mut ReadState) -> std::result::Result<(), String> {
    let max = inner.config.max_frame_bytes;
    let mut delivered = false;
    loop {
        let (id, range) = match frame::decode_response(&st.buf, max) {
            Ok(Decoded::Frame(f, used)) => (f.request_id, used - f.payload.len()..used),
            Ok(Decoded::NeedMore(_)) => break,
            Err(e) => return Err(format!("bad frame from broker: {e}")),
        };
        let frame = st.buf.split_to(range.end).freeze();
        let payload = frame.slice(range);
        let waiter = lock(&inner.pending).map.remove(&id);
        if let Some(w) = waiter {
            let _ = w.reply.send(Ok(payload));
        }
        delivered = true;
    }
    if delivered {
        let now = u64::try_from(inner.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        inner.last_rx_ms.store(now, Ordering::Relaxed);
    }
    if delivered {
        return Ok(());
    }
    if lock(&inner.pending).broken.is_some() {
        return Err("connection closed".into());
    }
    match read_into(st).await {
        Ok(0) => Err("broker closed the connection".into()),
        Ok(_) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// Reads once from the socket and appends what came to the buffer. Cancel safe:
/// bytes are appended only once the read has completed.
async fn read_into(st: &mut ReadState) -> std::io::Result<usize> {
    if st.drained && !st.busy_poll.is_zero() {
        if let Some(r) = st.stream.read_spinning(&mut st.chunk, st.busy_poll).await {
            return r.map(|n| st.took(n));
        }
    }
    let n = if st.drained {
        st.stream.read_ready(&mut st.chunk).await?
    } else {
        st.stream.read(&mut st.chunk).await?
    };
    Ok(st.took(n))
}

fn api_name(k: protocol::ApiKey) -> &'static str {
    use protocol::ApiKey::*;
    match k {
        Produce => "PRODUCE",
        Fetch => "FETCH",
        JoinGroup => "JOIN_GROUP",
        LeaveGroup => "LEAVE_GROUP",
        Heartbeat => "HEARTBEAT",
        OffsetCommit => "OFFSET_COMMIT",
        OffsetFetch => "OFFSET_FETCH",
        CreateTopic => "CREATE_TOPIC",
        Metadata => "METADATA",
    }
}

/// A connection that reconnects: the next call after a failure opens a new
/// connection, waiting with exponential backoff between failed attempts.
#[derive(Debug)]
pub struct Client {
    addr: String,
    config: ConnectionConfig,
    state: AsyncMutex<ClientState>,
}

#[derive(Debug, Default)]
struct ClientState {
    conn: Option<Connection>,
    failures: u32,
}

impl Client {
    /// A client for `addr`; does not connect yet.
    pub fn new(addr: impl Into<String>, config: ConnectionConfig) -> Self {
        Client {
            addr: addr.into(),
            config,
            state: AsyncMutex::new(ClientState::default()),
        }
    }

    /// Connects now, failing if the broker cannot be reached.
    ///
    /// # Errors
    /// [`Error::Connect`].
    pub async fn connect(addr: impl Into<String>, config: ConnectionConfig) -> Result<Self> {
        let c = Client::new(addr, config);
        c.connection().await?;
        Ok(c)
    }

    /// The broker address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The settings.
    pub fn config(&self) -> &ConnectionConfig {
        &self.config
    }

    /// The live connection, opening one if needed.
    ///
    /// # Errors
    /// [`Error::Connect`] when the broker cannot be reached.
    pub async fn connection(&self) -> Result<Connection> {
        let mut st = self.state.lock().await;
        if let Some(c) = &st.conn {
            if !c.is_broken() {
                return Ok(c.clone());
            }
        }
        st.conn = None;
        if st.failures > 0 {
            let exp = st.failures.min(10) - 1;
            let delay = self
                .config
                .backoff_initial
                .saturating_mul(1 << exp)
                .min(self.config.backoff_max);
            rt::sleep(delay).await;
        }
        match Connection::connect(&self.addr, self.config.clone()).await {
            Ok(c) => {
                st.failures = 0;
                st.conn = Some(c.clone());
                Ok(c)
            }
            Err(e) => {
                st.failures = st.failures.saturating_add(1);
                Err(e)
            }
        }
    }

    /// Sends one request on the current connection.
    ///
    /// # Errors
    /// As [`Connection::call`].
    pub async fn call<R: Request>(&self, req: &R) -> Result<R::Response> {
        self.connection().await?.call(req, Duration::ZERO).await
    }

    /// Sends one request allowing `extra` time beyond the request timeout.
    ///
    /// # Errors
    /// As [`Connection::call`].
    pub async fn call_with_extra<R: Request>(
        &self,
        req: &R,
        extra: Duration,
    ) -> Result<R::Response> {
        self.connection().await?.call(req, extra).await
    }

    /// Closes the current connection.
    pub async fn close(&self) {
        let mut st = self.state.lock().await;
        if let Some(c) = st.conn.take() {
            c.close().await;
        }
    }
}

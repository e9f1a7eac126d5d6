//! Flume's transport, its base: one multiplexed connection: requests are written as they come, responses
//! are matched by `request_id`, and when the connection breaks every pending
//! request fails with the same error.
//!
//! [`Client`] wraps a connection and reconnects, with backoff, on the next
//! call after a failure.
//!
//! # Who reads the socket
//!
//! There is no reader task: a caller waiting for its response reads the socket
//! itself, handing every response it meets to its waiter, so a lone caller
//! reads its own response with no hand-off between tasks. Nobody owns the read
//! side between polls, though: the read state is locked only for the
//! non-blocking read inside one poll, and every waiting caller waits for the
//! socket to become readable itself (and for its own response). The contract:
//!
//! - A request future that is polled once and then dropped, or kept and never
//!   polled again, never delays other requests on the connection: whoever is
//!   polled reads. Its response, when it comes, is discarded (dropped) or
//!   kept for it (left alone). A future left alone still holds one of the
//!   `max_in_flight` slots until it is dropped, so drop what you abandon.
//! - A write is all or nothing for the connection: a write that times out or
//!   is dropped after part of a frame went out leaves the stream unusable, so
//!   the connection is failed at once (every pending request gets the error,
//!   the socket is shut down) and [`Client`] opens a new one for the next call.
//!   A write that times out before any byte went out fails only its request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::channel::oneshot;
use futures::lock::Mutex as AsyncMutex;

use crate::error::{Error, Result};
use crate::tls::{Socket, SocketWriter};
use crate::types::connection::{ConnectionConfig, Credentials};
use flume_protocol::frame::{self, Decoded};
use flume_protocol::{self as protocol, messages::decode_response_shared, Request};
use flume_rt as rt;
use flume_rt::SpinBudget;

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
    /// The socket (plain or TLS), shared by the writer, the readers and `shutdown`.
    stream: Socket,
    /// Taken for a whole frame, so frames never interleave.
    writer: AsyncMutex<SocketWriter>,
    /// The read side: locked only for a non-blocking read and the hand-out of
    /// what it read, never across an `.await` (see the module docs).
    read: Mutex<ReadState>,
    pending: Mutex<Pending>,
    next_id: AtomicI32,
    slots: (async_channel::Sender<()>, async_channel::Receiver<()>),
    /// When a response last arrived (ms since `born`), to skip liveness probes on a busy connection.
    last_rx_ms: std::sync::atomic::AtomicU64,
    born: std::time::Instant,
    /// How long the next waiter spins ([`ConnectionConfig::busy_poll`]).
    spin: Mutex<SpinBudget>,
    /// A waiter is spinning now: the others park (its reads serve them too).
    spinning: AtomicBool,
    /// Requests awaiting their responses, and while there are any, this
    /// connection's mark in the process's count of waiting connections
    /// ([`rt::spin::crowded`]).
    waiters: Mutex<(usize, Option<rt::spin::Waiting>)>,
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

use flume_rt::sync::lock;

impl Connection {
    /// Opens a connection to `addr`.
    ///
    /// # Errors
    /// [`Error::Connect`] when the broker cannot be reached in time,
    /// [`Error::Tls`] when the TLS handshake fails on a certificate.
    pub async fn connect(addr: &str, config: ConnectionConfig) -> Result<Self> {
        let stream = crate::tls::open(addr, config.connect_timeout, config.tls.as_ref()).await?;
        Self::over(addr, stream, config).await
    }

    /// A connection over a stream already open to the broker at `addr`
    /// (logging in first when `config` has credentials). The one place the
    /// connection meets its stream: everything below reads and writes
    /// through [`Socket`] (`try_read`, `readable`, `shutdown`, `writer`), so
    /// another kind of byte stream (an in-memory duplex to a broker in the
    /// same process) is a variant of [`Socket`] handed in here.
    pub(crate) async fn over(addr: &str, stream: Socket, config: ConnectionConfig) -> Result<Self> {
        let inner = Arc::new(Inner {
            addr: addr.to_owned(),
            writer: AsyncMutex::new(stream.writer()),
            stream,
            read: Mutex::new(ReadState {
                buf: BytesMut::with_capacity(64 * 1024),
                chunk: vec![0u8; 64 * 1024],
                drained: true,
                reads: 0,
            }),
            pending: Mutex::new(Pending {
                map: HashMap::new(),
                broken: None,
            }),
            next_id: AtomicI32::new(1),
            slots: async_channel::bounded(config.max_in_flight.max(1)),
            last_rx_ms: std::sync::atomic::AtomicU64::new(0),
            born: std::time::Instant::now(),
            spin: Mutex::new(SpinBudget::new(config.busy_poll)),
            spinning: AtomicBool::new(false),
            waiters: Mutex::new((0, None)),
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
        let conn = Connection { inner };
        if let Some(creds) = conn.inner.config.credentials.clone() {
            conn.login(&creds).await?;
        }
        Ok(conn)
    }

    /// SCRAM-SHA-256 over AUTHENTICATE: client-first, client-final, and the
    /// server's signature checked (the broker knew the password).
    async fn login(&self, creds: &Credentials) -> Result<()> {
        use base64::Engine as _;
        use flume_protocol::scram::{ClientExchange, MECHANISM};
        use flume_protocol::AuthenticateRequest;
        let auth_err = |reason: String| Error::Auth {
            addr: self.inner.addr.clone(),
            reason,
        };
        let mut nonce = [0u8; 18];
        getrandom::fill(&mut nonce).map_err(|e| auth_err(format!("no randomness: {e}")))?;
        let nonce = base64::engine::general_purpose::STANDARD_NO_PAD.encode(nonce);
        let (mut exchange, first) =
            ClientExchange::start(&creds.username, creds.password(), &nonce)
                .map_err(|e| auth_err(e.to_string()))?;
        let step = |payload: Vec<u8>| AuthenticateRequest {
            mechanism: MECHANISM.into(),
            payload: Bytes::from(payload),
        };
        let refused = |e: Error| match e {
            Error::Broker { code, .. } => {
                auth_err(format!("the broker refused the login ({code})"))
            }
            e => e,
        };
        let server_first = self
            .call(&step(first), Duration::ZERO)
            .await
            .map_err(refused)?;
        let fin = exchange
            .respond(&server_first.payload)
            .map_err(|e| auth_err(e.to_string()))?;
        let server_final = self
            .call(&step(fin), Duration::ZERO)
            .await
            .map_err(refused)?;
        exchange
            .verify(&server_final.payload)
            .map_err(|e| auth_err(e.to_string()))?;
        Ok(())
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
        self.inner.settle(self.inner.try_read_once(None));
        lock(&self.inner.pending).broken.is_some()
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
    /// Dropping it part-way through writing the request fails the connection
    /// (see the module docs). A future polled once and then left alone never
    /// delays other requests.
    pub async fn call<R: Request>(&self, req: &R, extra: Duration) -> Result<R::Response> {
        let payload = self.call_raw(req, extra).await?;
        match decode_response_shared::<R::Response>(&payload)? {
            Ok(resp) => Ok(resp),
            Err(code) => Err(top_level_error::<R>(code)),
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
    /// When the connection is broken or the write fails or times out; a write
    /// that stopped part-way also fails the connection.
    ///
    /// # Cancel safety
    /// As [`Connection::call`].
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
                Err(code) => Err(top_level_error::<R>(code)),
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
        let api = R::API_KEY.name();
        let timeout = inner.config.request_timeout + extra;
        {
            let mut p = lock(&inner.pending);
            if let Some(e) = &p.broken {
                return Err(e.clone());
            }
            p.map.insert(
                id,
                Waiter {
                    reply: tx,
                    deadline: std::time::Instant::now() + timeout,
                    api,
                    timeout,
                },
            );
        }
        let pending = PendingGuard {
            inner: Arc::clone(&inner),
            id,
        };
        let mut buf = Vec::new();
        protocol::encode_request(&mut buf, id, req);
        {
            let mut w = inner.writer.lock().await;
            // A write that failed part-way while we waited for the lock broke the stream.
            if let Some(e) = &lock(&inner.pending).broken {
                return Err(e.clone());
            }
            let sent = AtomicUsize::new(0);
            // Fails the connection if this future is dropped after part of the frame went out.
            let mut torn = TornWriteGuard {
                inner: &inner,
                sent: &sent,
                len: buf.len(),
                api,
                armed: true,
            };
            let written = rt::write_all_timeout_counted(&mut *w, &buf, timeout, &sent).await;
            torn.armed = false;
            match written {
                Ok(()) => {}
                Err(e) => {
                    let n = sent.load(Ordering::Relaxed);
                    let timed_out = e.kind() == std::io::ErrorKind::TimedOut;
                    if n == 0 && timed_out {
                        // Nothing went out: the stream is intact, only this request failed.
                        return Err(timeout_error(api, &inner.addr, timeout));
                    }
                    let reason = if timed_out {
                        format!(
                            "{api} request written part-way ({n} of {} bytes) when its \
                             {} ms write timeout passed",
                            buf.len(),
                            timeout.as_millis()
                        )
                    } else {
                        e.to_string()
                    };
                    inner.fail(Error::Disconnected {
                        addr: inner.addr.clone(),
                        reason,
                    });
                    return Err(if timed_out {
                        timeout_error(api, &inner.addr, timeout)
                    } else {
                        closed(&inner)
                    });
                }
            }
        }
        Ok(async move {
            let _slot = slot;
            let _pending = pending;
            // The per-connection sweeper answers with a timeout error past the deadline.
            wait_response(&_pending.inner, _pending.id, rx).await
        })
    }

    /// Closes the connection; pending requests fail.
    pub async fn close(&self) {
        self.inner.fail(Error::Closed);
    }
}

fn timeout_error(api: &'static str, addr: &str, timeout: Duration) -> Error {
    Error::Timeout {
        api,
        addr: addr.to_owned(),
        timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
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

/// Armed while a frame is being written: dropped armed (the caller gave up on
/// the future mid-write) after some bytes went out, it fails the connection,
/// whose stream now ends in half a frame.
struct TornWriteGuard<'a> {
    inner: &'a Inner,
    sent: &'a AtomicUsize,
    len: usize,
    api: &'static str,
    armed: bool,
}
impl Drop for TornWriteGuard<'_> {
    fn drop(&mut self) {
        let n = self.sent.load(Ordering::Relaxed);
        if self.armed && n > 0 && n < self.len {
            self.inner.fail(Error::Disconnected {
                addr: self.inner.addr.clone(),
                reason: format!(
                    "{} request abandoned part-way through its write ({n} of {} bytes)",
                    self.api, self.len
                ),
            });
        }
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
        for w in expired {
            let _ = w
                .reply
                .send(Err(timeout_error(w.api, &self.addr, w.timeout)));
        }
        true
    }

    /// Marks the connection broken, fails every pending request with `err`
    /// and shuts the socket down (the broker sees the end of the stream, and
    /// nothing more can be written after a torn frame).
    fn fail(&self, err: Error) {
        let drained: Vec<Reply> = {
            let mut p = lock(&self.pending);
            if p.broken.is_none() {
                p.broken = Some(err.clone());
            }
            p.map.drain().map(|(_, w)| w.reply).collect()
        };
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        for tx in drained {
            let _ = tx.send(Err(err.clone()));
        }
    }

    /// Reads once without waiting, if nobody else is reading right now, and
    /// hands every whole response to its waiter, except the response to
    /// `own` (the caller's request), which is returned instead: sent through
    /// the channel, it would wake the caller's own task for nothing, which
    /// costs the executor one more turn of the reactor.
    fn try_read_once(&self, own: Option<i32>) -> ReadOutcome {
        let Ok(mut st) = self.read.try_lock() else {
            return ReadOutcome::Busy;
        };
        match self.stream.try_read(&mut st.chunk) {
            Ok(0) => ReadOutcome::Failed("broker closed the connection".into()),
            Ok(n) => {
                st.took(n);
                match self.deliver(&mut st, own) {
                    Ok(Some(payload)) => ReadOutcome::Own(payload),
                    Ok(None) => ReadOutcome::Read,
                    Err(reason) => ReadOutcome::Failed(reason),
                }
            }
            Err(e) if rt::retry(&e) => {
                st.drained = true;
                ReadOutcome::Empty
            }
            Err(e) => ReadOutcome::Failed(e.to_string()),
        }
    }

    /// Hands every whole response in the buffer to its waiter; returns the one
    /// to `own`, whose waiter stays in the map (its [`PendingGuard`] removes it
    /// once the caller's receiver is gone, so that wakes no one either).
    fn deliver(
        &self,
        st: &mut ReadState,
        own: Option<i32>,
    ) -> std::result::Result<Option<Bytes>, String> {
        let max = self.config.max_frame_bytes;
        let mut delivered = false;
        let mut mine = None;
        loop {
            let (id, range) = match frame::decode_response(&st.buf, max) {
                Ok(Decoded::Frame(f, used)) => (f.request_id, used - f.payload.len()..used),
                Ok(Decoded::NeedMore(_)) => break,
                Err(e) => return Err(format!("bad frame from broker: {e}")),
            };
            let frame = st.buf.split_to(range.end).freeze();
            let payload = frame.slice(range);
            delivered = true;
            let mut p = lock(&self.pending);
            if own == Some(id) && p.map.contains_key(&id) {
                mine = Some(payload);
                continue;
            }
            let waiter = p.map.remove(&id);
            drop(p);
            if let Some(w) = waiter {
                let _ = w.reply.send(Ok(payload));
            }
        }
        if delivered {
            let now = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX);
            self.last_rx_ms.store(now, Ordering::Relaxed);
        }
        Ok(mine)
    }

    /// Acts on what a read found: `Some` ends the caller's wait.
    fn settle(&self, outcome: ReadOutcome) -> Option<Result<Bytes>> {
        match outcome {
            ReadOutcome::Own(payload) => Some(Ok(payload)),
            ReadOutcome::Failed(reason) => {
                self.fail(Error::Disconnected {
                    addr: self.addr.clone(),
                    reason,
                });
                None
            }
            ReadOutcome::Busy | ReadOutcome::Empty | ReadOutcome::Read => None,
        }
    }
}

/// What one non-blocking read found.
enum ReadOutcome {
    /// Another thread holds the read side at this moment.
    Busy,
    /// The socket had nothing.
    Empty,
    /// Bytes came; the whole responses among them were handed out.
    Read,
    /// Bytes came, among them the response the caller waits for.
    Own(Bytes),
    /// The connection failed (end of stream, an I/O error, a bad frame).
    Failed(String),
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

struct ReadState {
    buf: BytesMut,
    /// Reads land here first: zeroed once, so no read pays for clearing memory.
    chunk: Vec<u8>,
    /// The last read came back short of `chunk`: the socket was empty then, so
    /// the next read waits for readiness instead of trying first.
    drained: bool,
    /// Reads so far: a waiter woken by readiness skips its read when someone
    /// else has read since it began to wait (the socket is empty again).
    reads: u64,
}

impl ReadState {
    /// Appends the `n` bytes just read into `chunk` to the buffer.
    fn took(&mut self, n: usize) {
        self.buf.extend_from_slice(&self.chunk[..n]);
        self.drained = n < self.chunk.len();
        self.reads = self.reads.wrapping_add(1);
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

/// Waits for the response of one request, reading the socket whenever it is
/// readable and nobody else has read it since (see the module docs). Nothing is
/// held between polls, so abandoning this future stalls no one.
async fn wait_response(
    inner: &Arc<Inner>,
    id: i32,
    mut rx: oneshot::Receiver<Result<Bytes>>,
) -> Result<Bytes> {
    use futures::future::{select, Either};
    let _waiting = WaitMark::new(inner);
    // Spin at most once per wait, right after the request went out.
    let mut may_spin = true;
    loop {
        match rx.try_recv() {
            Ok(Some(r)) => return r,
            Ok(None) => {}
            Err(_) => return Err(closed(inner)),
        }
        // The last read filled the buffer: more may be waiting, read before waiting.
        let more = !lock(&inner.read).drained;
        if more {
            let outcome = inner.try_read_once(Some(id));
            let busy = matches!(outcome, ReadOutcome::Busy);
            if let Some(r) = inner.settle(outcome) {
                return r;
            }
            if busy {
                // Another thread is reading right now: let it finish.
                rt::yield_now().await;
            }
            continue;
        }
        if std::mem::take(&mut may_spin)
            && let Some(r) = spin(inner, id, &mut rx).await
        {
            return r;
        }
        let seen = lock(&inner.read).reads;
        let readable = inner.stream.readable();
        futures::pin_mut!(readable);
        match select(&mut rx, readable).await {
            Either::Left((r, _)) => return r.unwrap_or_else(|_| Err(closed(inner))),
            Either::Right((Ok(()), _)) => {
                if lock(&inner.read).reads != seen {
                    // Someone read after we began to wait and left the socket
                    // empty; wait again (readiness is re-armed level-triggered).
                    continue;
                }
                if let Some(r) = inner.settle(inner.try_read_once(Some(id))) {
                    return r;
                }
            }
            Either::Right((Err(e), _)) => inner.fail(Error::Disconnected {
                addr: inner.addr.clone(),
                reason: e.to_string(),
            }),
        }
    }
}

/// [`ConnectionConfig::busy_poll`]: unless another waiter is spinning,
/// tries to read for the connection's spin budget without parking the thread,
/// yielding to other tasks first and every 16th try, and tells the budget
/// whether it paid. `None` when the response did not come in time.
async fn spin(
    inner: &Inner,
    id: i32,
    rx: &mut oneshot::Receiver<Result<Bytes>>,
) -> Option<Result<Bytes>> {
    let _spinner = Spinner::take(&inner.spinning)?;
    let cap = if rt::spin::crowded() {
        rt::spin::CROWDED_MAX
    } else {
        Duration::MAX
    };
    let budget = lock(&inner.spin).budget_within(cap);
    if budget.is_zero() {
        return None;
    }
    let start = std::time::Instant::now();
    let r = spin_for(inner, id, rx, budget, start).await;
    let mut b = lock(&inner.spin);
    match r {
        Some(Ok(_)) => b.caught(start.elapsed()),
        Some(Err(_)) => {}
        None => b.missed(),
    }
    r
}

/// One request waiting for its response: the connection counts as waiting
/// in the process while it has any ([`rt::spin::crowded`]).
struct WaitMark<'a>(&'a Inner);

impl<'a> WaitMark<'a> {
    fn new(inner: &'a Inner) -> Self {
        let mut w = lock(&inner.waiters);
        w.0 += 1;
        if w.0 == 1 {
            w.1 = Some(rt::spin::Waiting::start());
        }
        WaitMark(inner)
    }
}

impl Drop for WaitMark<'_> {
    fn drop(&mut self) {
        let mut w = lock(&self.0.waiters);
        w.0 = w.0.saturating_sub(1);
        if w.0 == 0 {
            w.1 = None;
        }
    }
}

/// The right to spin on a connection, given back when dropped (also when
/// the waiting future is abandoned mid-spin).
struct Spinner<'a>(&'a AtomicBool);

impl<'a> Spinner<'a> {
    fn take(flag: &'a AtomicBool) -> Option<Self> {
        flag.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Spinner(flag))
    }
}

impl Drop for Spinner<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

async fn spin_for(
    inner: &Inner,
    id: i32,
    rx: &mut oneshot::Receiver<Result<Bytes>>,
    budget: Duration,
    start: std::time::Instant,
) -> Option<Result<Bytes>> {
    let mut attempt: u32 = 0;
    loop {
        if attempt.is_multiple_of(16) {
            rt::yield_now().await;
        } else {
            std::hint::spin_loop();
        }
        attempt = attempt.wrapping_add(1);
        if let Some(r) = inner.settle(inner.try_read_once(Some(id))) {
            return Some(r);
        }
        match rx.try_recv() {
            Ok(Some(r)) => return Some(r),
            Ok(None) => {}
            Err(_) => return Some(Err(closed(inner))),
        }
        if start.elapsed() >= budget {
            return None;
        }
    }
}

/// A top-level error code of `R`'s response as an error; an authorisation
/// failure names the request (the caller adds the resource).
fn top_level_error<R: Request>(code: protocol::ErrorCode) -> Error {
    let context = (code == protocol::ErrorCode::AuthorizationFailed)
        .then(|| format!("{}: no ACL allows it", R::API_KEY.name()));
    Error::Broker { code, context }
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
        if let Some(c) = &st.conn
            && !c.is_broken()
        {
            return Ok(c.clone());
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

//! The TCP server: one task per connection, many requests in flight per
//! connection, responses written through a buffer that is flushed when the
//! connection has nothing more ready.
//!
//! A connection task reads frames, admits each request in order (a PRODUCE
//! is queued on its partitions right away, so per-connection order holds;
//! in block mode a full queue stops the reading, and TCP pushes back on the
//! producer), and then polls the in-flight requests (acknowledgements, long
//! polls, parked joins) together. At most `max_in_flight_per_connection`
//! requests are served at once. Every request is charged to the broker-wide
//! memory budget ([`crate::budget`]) from admission until its response has
//! been written; past the budget no connection reads more.
//!
//! Shutdown stops accepting, lets connections finish their requests until
//! `shutdown_timeout`, and then cancels the connection tasks still running
//! (a peer that does not read its responses, say), so it returns on time.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use event_listener::Event;
use flume_protocol::frame::{self, Decoded};
use flume_protocol::messages::{Decode, Empty, Encode};
use flume_protocol::wire::Reader;
use flume_protocol::{
    encode_response_frame, ApiKey, CreateTopicRequest, ErrorCode, FetchRequest, HeartbeatRequest,
    JoinGroupRequest, LeaveGroupRequest, MetadataRequest, OffsetCommitRequest, OffsetFetchRequest,
    ProduceRequest, ProduceResponse,
};
use flume_rt::{self as rt, TcpListener, TcpStream};
use futures::future::BoxFuture;
use futures::io::AsyncReadExt;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;

use crate::budget::{Charge, MemoryBudget, MemoryUse};
use crate::config::BrokerConfig;
use crate::engine::{Engine, FetchMemory};
use crate::error::BrokerError;
use crate::metrics::{ServerStats, Tracked};
use tracing::Instrument;

#[derive(Debug)]
struct Connections {
    open: AtomicUsize,
    closed: Event,
    /// Requests being served, over all connections.
    memory: Arc<MemoryBudget>,
    /// Chunks that waiting fetches read to count what arrived, over all connections.
    counting: Arc<MemoryBudget>,
    /// The task of every open connection, by a sequence number, so shutdown
    /// can cancel those that outlive its deadline.
    tasks: Mutex<HashMap<u64, rt::Task<()>>>,
    next_id: AtomicU64,
}

impl Connections {
    fn tasks(&self) -> std::sync::MutexGuard<'_, HashMap<u64, rt::Task<()>>> {
        self.tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

struct ConnGuard(Arc<Connections>, u64);
impl Drop for ConnGuard {
    fn drop(&mut self) {
        // Dropping the handle of the task that is ending detaches it; nothing is lost.
        drop(self.0.tasks().remove(&self.1));
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        self.0.closed.notify(usize::MAX);
    }
}

/// A running broker.
#[derive(Debug)]
pub struct Broker {
    engine: Arc<Engine>,
    addr: SocketAddr,
    conns: Arc<Connections>,
    accept: Mutex<Option<rt::Task<()>>>,
    /// The HTTP server (metrics, dashboard), when configured.
    http: Option<crate::http::HttpServer>,
}

impl Broker {
    /// Opens the data directory, binds `config.listen` and starts serving.
    ///
    /// # Errors
    /// Invalid settings, storage that cannot be opened, or an address that cannot be bound.
    pub async fn start(config: BrokerConfig) -> Result<Broker, BrokerError> {
        let listen = config.listen.clone();
        let engine = Engine::open(config)?;
        let listener = TcpListener::bind(&listen)
            .await
            .map_err(|source| BrokerError::Io {
                what: format!("listen on {listen}"),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| BrokerError::Io {
            what: "read the listening address".into(),
            source,
        })?;
        tracing::info!(%addr, data = %engine.data_dir().display(), "broker listening");
        let conns = Arc::new(Connections {
            open: AtomicUsize::new(0),
            closed: Event::new(),
            memory: MemoryBudget::new(engine.config().max_request_memory),
            counting: MemoryBudget::new(COUNTING_BYTES),
            tasks: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
        });
        let http = match engine.config().http_listen.clone() {
            Some(http_addr) => {
                let probe_conns = Arc::clone(&conns);
                let probe = Arc::new(move || ServerStats {
                    connections_open: probe_conns.open.load(Ordering::Acquire),
                    memory: probe_conns.memory.usage(),
                });
                Some(crate::http::HttpServer::start(&http_addr, Arc::clone(&engine), probe).await?)
            }
            None => None,
        };
        let accept = rt::spawn(accept_loop(
            listener,
            Arc::clone(&engine),
            Arc::clone(&conns),
        ));
        Ok(Broker {
            engine,
            addr,
            conns,
            accept: Mutex::new(Some(accept)),
            http,
        })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address of the HTTP server, when `http_listen` is set.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(crate::http::HttpServer::local_addr)
    }

    /// The engine behind the server.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Open connections.
    pub fn connection_count(&self) -> usize {
        self.conns.open.load(Ordering::Acquire)
    }

    /// Memory of the requests being served (see [`BrokerConfig::max_request_memory`]).
    pub fn request_memory(&self) -> MemoryUse {
        self.conns.memory.usage()
    }

    /// Graceful shutdown: stop accepting, let connections finish their
    /// in-flight requests (up to `shutdown_timeout`), cancel the connection
    /// tasks still running then, drain every partition queue to disk, fsync,
    /// close. Idempotent.
    pub async fn shutdown(&self) {
        self.engine.begin_shutdown();
        let accept = self
            .accept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(a) = accept {
            a.await;
        }
        let deadline = Instant::now() + self.engine.config().shutdown_timeout;
        loop {
            let listener = self.conns.closed.listen();
            let open = self.conns.open.load(Ordering::Acquire);
            if open == 0 {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                tracing::warn!(
                    open,
                    "shutdown timeout: closing connections with requests still in flight"
                );
                let tasks: Vec<rt::Task<()>> = self.conns.tasks().drain().map(|(_, t)| t).collect();
                for t in tasks {
                    t.cancel().await;
                }
                break;
            }
            rt::timeout(deadline - now, listener).await;
        }
        self.engine.shutdown().await;
        tracing::info!("broker stopped");
    }
}

async fn accept_loop(listener: TcpListener, engine: Arc<Engine>, conns: Arc<Connections>) {
    let stop = engine.shutdown_signal();
    loop {
        let accepted = futures::select! {
            r = listener.accept().fuse() => r,
            _ = stop.recv().fuse() => break,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                rt::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let max = engine.config().max_connections;
        if conns.open.load(Ordering::Acquire) >= max {
            tracing::warn!(%peer, max, "connection limit reached; closing the new connection");
            engine.metrics().connection_refused();
            let _ = stream.shutdown(std::net::Shutdown::Both);
            continue;
        }
        conns.open.fetch_add(1, Ordering::AcqRel);
        let id = conns.next_id.fetch_add(1, Ordering::Relaxed);
        let guard = ConnGuard(Arc::clone(&conns), id);
        let engine = Arc::clone(&engine);
        // The map is locked across the spawn, so a task that ends at once removes
        // its handle only after it was inserted.
        let mut tasks = conns.tasks();
        let task = rt::spawn(async move {
            let _guard = guard;
            tracing::debug!(%peer, "connection open");
            let memory = MemoryBudget::within(
                &_guard.0.memory,
                engine
                    .config()
                    .max_connection_memory
                    .max(engine.config().max_frame_bytes),
            );
            let counting = Arc::clone(&_guard.0.counting);
            match serve(engine, memory, counting, stream).await {
                Ok(()) => tracing::debug!(%peer, "connection closed"),
                Err(e) if is_disconnect(&e) => {
                    tracing::debug!(%peer, error = %e, "connection closed by peer")
                }
                Err(e) => tracing::warn!(%peer, error = %e, "connection closed"),
            }
        });
        tasks.insert(id, task);
    }
}

fn is_disconnect(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
    )
}

type InFlight = BoxFuture<'static, Vec<u8>>;

/// A request being served and its charge to the memory budget (its frame and
/// decoded form), handed over with the response, which keeps it until written.
struct Charged {
    response: InFlight,
    charge: Option<Charge>,
}

impl std::future::Future for Charged {
    type Output = (Vec<u8>, Option<Charge>);
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        match self.response.as_mut().poll(cx) {
            std::task::Poll::Ready(r) => std::task::Poll::Ready((r, self.charge.take())),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }
}

/// Moves a response into the write buffer; its charge grows by the response
/// and lasts until the buffer is written.
fn take_response(
    (resp, charge): (Vec<u8>, Option<Charge>),
    wbuf: &mut Vec<u8>,
    unwritten: &mut Vec<Charge>,
) {
    if let Some(mut c) = charge {
        c.add(resp.len());
        unwritten.push(c);
    }
    wbuf.extend_from_slice(&resp);
}

/// Most bytes all waiting fetches read at once to count what has arrived (a
/// few chunks; see [`Engine::fetch_within`]).
const COUNTING_BYTES: usize = 4 << 20;

/// Most partitions one FETCH may name (each costs a lookup, a listener and a read).
pub const MAX_FETCH_PARTITIONS: usize = 10_000;

fn io_other(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg)
}

/// Most room reserved for a frame beyond twice what has arrived of it.
const FRAME_RESERVE_STEP: usize = 1 << 20;

/// Makes room in `rbuf` for a frame of `total` bytes, so a large frame lands
/// in one allocation instead of being copied at every doubling. The room grows
/// with the bytes that actually arrive (at most twice them plus 1 MiB), never
/// with the size a peer merely claims.
fn reserve_for_frame(rbuf: &mut BytesMut, total: usize) {
    let len = rbuf.len();
    if rbuf.capacity() >= total || len >= total {
        return;
    }
    let target = total.min(len.saturating_mul(2).max(len + FRAME_RESERVE_STEP));
    rbuf.reserve(target - len);
}

/// Serves one connection until EOF, a bad frame, a timeout or shutdown.
async fn serve(
    engine: Arc<Engine>,
    memory: Arc<MemoryBudget>,
    counting: Arc<MemoryBudget>,
    stream: TcpStream,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let cfg = engine.config().clone();
    let mut writer = stream.clone();
    let reader = stream;
    // The last read came back short of `chunk`, so the socket was empty: the next
    // read waits for readiness before reading (no failed read per request).
    let mut drained = true;
    let stop = engine.shutdown_signal();
    // Frames are split off this buffer as shared `Bytes`, so record batches reach the
    // partition writers without being copied.
    let mut rbuf = BytesMut::with_capacity(64 * 1024);
    // Reads land here first: zeroed once, so no read pays for clearing fresh memory.
    let mut chunk = vec![0u8; 64 * 1024];
    let mut wbuf: Vec<u8> = Vec::with_capacity(64 * 1024);
    // Charges of the responses in `wbuf`, released once it is written.
    let mut unwritten: Vec<Charge> = Vec::new();
    let mut inflight: FuturesUnordered<Charged> = FuturesUnordered::new();
    let mut reading = true;
    let mut failure: Option<std::io::Error> = None;
    let mut last_progress = Instant::now();
    loop {
        // Admit every whole frame we have, in order, while the memory budget has room.
        let mut held_back = false;
        while reading && inflight.len() < cfg.max_in_flight_per_connection {
            if memory.is_spent() {
                held_back = true;
                break;
            }
            let (api_key, request_id, used) = match frame::decode_request(
                &rbuf,
                cfg.max_frame_bytes,
            ) {
                Ok(Decoded::Frame(f, used)) => (f.api_key, f.request_id, used),
                Ok(Decoded::NeedMore(total)) => {
                    if let Some(total) = total {
                        reserve_for_frame(&mut rbuf, total);
                    }
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "malformed frame; closing the connection after pending responses");
                    failure = Some(io_other(e.to_string()));
                    reading = false;
                    break;
                }
            };
            let frame = rbuf.split_to(used).freeze();
            // Charged from now until the response is written: the frame (a PRODUCE
            // keeps it, its batches are slices of it), then the decoded request.
            let mut charge = memory.charge(frame.len());
            let payload = frame.slice(4 + frame::REQUEST_HEADER_LEN..);
            let mut decoded = 0;
            let budgets = (&memory, &counting);
            let response =
                admit(&engine, budgets, api_key, request_id, payload, &mut decoded).await;
            charge.add(decoded);
            inflight.push(Charged {
                response,
                charge: Some(charge),
            });
        }
        // Gather every response that is ready, then write them with one call.
        while let Some(Some(resp)) = inflight.next().now_or_never() {
            take_response(resp, &mut wbuf, &mut unwritten);
        }
        if !wbuf.is_empty() {
            if let Err(e) = rt::write_all_timeout(&mut writer, &wbuf, cfg.write_timeout).await {
                if e.kind() == std::io::ErrorKind::TimedOut {
                    return Err(std::io::Error::new(
                        e.kind(),
                        "peer does not read its responses",
                    ));
                }
                return Err(e);
            }
            wbuf.clear();
            unwritten.clear();
            if wbuf.capacity() > 1 << 20 {
                wbuf.shrink_to(64 * 1024);
            }
        }
        if !reading && inflight.is_empty() {
            return failure.map_or(Ok(()), Err);
        }
        // Past the memory budget nothing more is admitted or read until requests
        // complete (they do on their own: see `crate::budget`).
        // Frames held back wait for room, not for bytes: their peer may be waiting
        // for their responses and send nothing more.
        let spent = held_back || memory.is_spent();
        let can_read = reading && inflight.len() < cfg.max_in_flight_per_connection && !spent;
        let partial = !rbuf.is_empty();
        let read = async {
            if !can_read {
                futures::future::pending().await
            } else if drained {
                if !cfg.busy_poll.is_zero() {
                    if let Some(r) = reader.read_spinning(&mut chunk, cfg.busy_poll).await {
                        return r;
                    }
                }
                reader.read_ready(&mut chunk).await
            } else {
                (&reader).read(&mut chunk).await
            }
        };
        let room = async {
            if reading && spent {
                memory.wait_for_room().await;
            } else {
                futures::future::pending::<()>().await;
            }
        };
        let next = async {
            if inflight.is_empty() {
                futures::future::pending().await
            } else {
                inflight.next().await
            }
        };
        // A peer that sent part of a frame and then went quiet is cut off. The
        // timer is armed only then: one per request would wake the reactor thread
        // on every request. Time we spend not reading is not the peer's.
        if !can_read {
            last_progress = Instant::now();
        }
        // Once seen, the shutdown signal is not polled again: a closed channel is
        // always ready, and the loop would spin without yielding while it waits
        // for its requests (and could not be cancelled).
        let stopped = async {
            if reading {
                let _ = stop.recv().await;
            } else {
                futures::future::pending::<()>().await;
            }
        };
        let idle_timer = async {
            if partial && can_read {
                rt::sleep(cfg.read_timeout.saturating_sub(last_progress.elapsed())).await;
            } else {
                futures::future::pending::<()>().await;
            }
        };
        enum Ev {
            Read(std::io::Result<usize>),
            Done(Option<(Vec<u8>, Option<Charge>)>),
            Stop,
            Idle,
            Room,
        }
        let ev = futures::select! {
            r = read.fuse() => Ev::Read(r),
            d = next.fuse() => Ev::Done(d),
            _ = stopped.fuse() => Ev::Stop,
            () = room.fuse() => Ev::Room,
            _ = idle_timer.fuse() => Ev::Idle,
        };
        if let Ev::Read(Ok(n)) = &ev {
            rbuf.extend_from_slice(&chunk[..*n]);
            drained = *n < chunk.len();
        }
        match ev {
            Ev::Read(Ok(0)) => {
                if !rbuf.is_empty() {
                    tracing::debug!(bytes = rbuf.len(), "peer closed mid-frame");
                }
                reading = false;
            }
            Ev::Read(Ok(_)) => last_progress = Instant::now(),
            Ev::Read(Err(e)) => return Err(e),
            Ev::Done(Some(resp)) => take_response(resp, &mut wbuf, &mut unwritten),
            Ev::Done(None) => {}
            Ev::Stop => reading = false,
            Ev::Room => {}
            Ev::Idle => {
                if partial {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "incomplete frame, peer went quiet",
                    ));
                }
            }
        }
    }
}

/// Handles one request end to end and returns its response frame: what a
/// connection does for each frame it reads (used by the fuzz target).
pub async fn handle_request(
    engine: &Arc<Engine>,
    api_key: i16,
    request_id: i32,
    payload: &[u8],
) -> Vec<u8> {
    let memory = MemoryBudget::new(usize::MAX);
    let counting = MemoryBudget::new(COUNTING_BYTES);
    let mut decoded = 0;
    admit(
        engine,
        (&memory, &counting),
        api_key,
        request_id,
        Bytes::copy_from_slice(payload),
        &mut decoded,
    )
    .await
    .await
}

fn respond<R: Encode>(id: i32, result: Result<&R, ErrorCode>) -> Vec<u8> {
    let mut buf = Vec::new();
    encode_response_frame(&mut buf, id, result);
    buf
}

fn error_frame(id: i32, code: ErrorCode) -> InFlight {
    futures::future::ready(respond::<Empty>(id, Err(code))).boxed()
}

fn decode<T: Decode>(id: i32, payload: &[u8]) -> Result<T, InFlight> {
    T::decode_exact(payload).map_err(|e| {
        tracing::debug!(request_id = id, error = %e, "request payload does not decode");
        error_frame(id, ErrorCode::InvalidRequest)
    })
}

fn empty_result(id: i32, r: Result<(), ErrorCode>) -> InFlight {
    futures::future::ready(respond(id, r.as_ref().map(|()| &Empty).map_err(|e| *e))).boxed()
}

/// Bytes a decoded FETCH holds per partition beyond its topic name: the
/// decoded entry, its resolved partition and its counting state (an estimate).
const FETCH_DECODED_PER_PARTITION: usize = 160;
/// Bytes a decoded JOIN_GROUP holds per topic beyond the name (an estimate).
const JOIN_DECODED_PER_TOPIC: usize = 48;

/// Decodes a JOIN_GROUP, refusing a topic list longer than `max_topics`
/// before any of its names is decoded, and deduplicates the list.
fn decode_join(payload: &[u8], max_topics: usize) -> Result<JoinGroupRequest, String> {
    let mut r = Reader::new(payload);
    let mut req = JoinGroupRequest {
        group: r.string().map_err(|e| e.to_string())?,
        member_id: r.string().map_err(|e| e.to_string())?,
        session_timeout_ms: r.i32().map_err(|e| e.to_string())?,
        rebalance_timeout_ms: r.i32().map_err(|e| e.to_string())?,
        assignor: r.string().map_err(|e| e.to_string())?,
        topics: Vec::new(),
    };
    let n = r.count(2).map_err(|e| e.to_string())?;
    if n > max_topics {
        return Err(format!(
            "the topic list has {n} entries, max_topics_per_join is {max_topics}"
        ));
    }
    req.topics.reserve_exact(n);
    for _ in 0..n {
        req.topics.push(r.string().map_err(|e| e.to_string())?);
    }
    r.finish().map_err(|e| e.to_string())?;
    // A subscription is a set: duplicates would only cost memory and work.
    req.topics.sort_unstable();
    req.topics.dedup();
    Ok(req)
}

/// Admits one request: does what must happen in order now (queueing a
/// produce) and returns the future of its response frame. `decoded` is set
/// to the bytes the decoded request holds beyond its frame (an estimate).
/// The request runs in its `tracing` span, and its latency and outcome go to
/// the metrics when the response is ready (see [`crate::metrics::Tracked`]).
async fn admit(
    engine: &Arc<Engine>,
    budgets: (&Arc<MemoryBudget>, &Arc<MemoryBudget>),
    api_key: i16,
    id: i32,
    shared: Bytes,
    decoded: &mut usize,
) -> InFlight {
    let tracked = engine.metrics().begin(api_key, id);
    let response = admit_request(engine, budgets, api_key, id, shared, decoded, &tracked)
        .instrument(tracked.span().clone())
        .await;
    tracked.finish(response)
}

async fn admit_request(
    engine: &Arc<Engine>,
    (memory, counting): (&Arc<MemoryBudget>, &Arc<MemoryBudget>),
    api_key: i16,
    id: i32,
    shared: Bytes,
    decoded: &mut usize,
    tracked: &Tracked,
) -> InFlight {
    let payload: &[u8] = &shared;
    let Some(api) = ApiKey::from_i16(api_key) else {
        tracing::debug!(api_key, "unknown api key");
        return error_frame(id, ErrorCode::UnsupportedApi);
    };
    match api {
        ApiKey::Produce => {
            let req = match ProduceRequest::decode_shared(&shared) {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(request_id = id, error = %e, "request payload does not decode");
                    return error_frame(id, ErrorCode::InvalidRequest);
                }
            };
            if let Some(e) = req.entries.first() {
                tracked.about(&e.topic, e.partition);
            }
            let mut pending = Vec::with_capacity(req.entries.len());
            for entry in req.entries {
                pending.push(engine.admit_produce(entry).await);
            }
            let note = tracked.note();
            async move {
                let mut results = Vec::with_capacity(pending.len());
                for p in pending {
                    let r = p.finish().await;
                    note.failed(r.error, &r.topic, r.partition);
                    results.push(r);
                }
                respond(id, Ok(&ProduceResponse { results }))
            }
            .boxed()
        }
        ApiKey::Fetch => {
            let req: FetchRequest = match decode(id, payload) {
                Ok(r) => r,
                Err(f) => return f,
            };
            if req.partitions.len() > MAX_FETCH_PARTITIONS {
                tracing::debug!(
                    request_id = id,
                    partitions = req.partitions.len(),
                    "fetch of too many partitions"
                );
                return error_frame(id, ErrorCode::InvalidRequest);
            }
            *decoded = req
                .partitions
                .iter()
                .map(|p| p.topic.len() + FETCH_DECODED_PER_PARTITION)
                .sum();
            if let Some(p) = req.partitions.first() {
                tracked.about(&p.topic, p.partition);
            }
            let engine = Arc::clone(engine);
            let memory = Arc::clone(memory);
            let counting = Arc::clone(counting);
            let note = tracked.note();
            async move {
                let mut buf = Vec::new();
                let start = frame::begin_response(&mut buf, id);
                buf.extend_from_slice(&0i16.to_be_bytes());
                let budgets = FetchMemory {
                    response: &memory,
                    counting: &counting,
                };
                if let Some((i, code)) = engine.fetch_within(&req, &mut buf, Some(budgets)).await {
                    if let Some(p) = req.partitions.get(i) {
                        note.failed(code, &p.topic, p.partition);
                    }
                }
                frame::finish_frame(&mut buf, start);
                buf
            }
            .boxed()
        }
        ApiKey::JoinGroup => {
            let req = match decode_join(payload, engine.config().max_topics_per_join) {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(request_id = id, error = %e, "JOIN_GROUP refused");
                    return error_frame(id, ErrorCode::InvalidRequest);
                }
            };
            *decoded = req
                .topics
                .iter()
                .map(|t| t.len() + JOIN_DECODED_PER_TOPIC)
                .sum();
            let engine = Arc::clone(engine);
            async move {
                let r = engine.join_group(req).await;
                respond(id, r.as_ref().map_err(|e| *e))
            }
            .boxed()
        }
        ApiKey::LeaveGroup => match decode::<LeaveGroupRequest>(id, payload) {
            Ok(req) => empty_result(id, engine.leave_group(&req.group, &req.member_id)),
            Err(f) => f,
        },
        ApiKey::Heartbeat => match decode::<HeartbeatRequest>(id, payload) {
            Ok(req) => empty_result(
                id,
                engine.heartbeat(&req.group, &req.member_id, req.generation),
            ),
            Err(f) => f,
        },
        ApiKey::OffsetCommit => {
            let req: OffsetCommitRequest = match decode(id, payload) {
                Ok(r) => r,
                Err(f) => return f,
            };
            // The engine hands the write to the offsets writer (off the executor).
            let engine = Arc::clone(engine);
            async move {
                let r = engine.commit_offsets(&req).await;
                respond(id, r.as_ref().map_err(|e| *e))
            }
            .boxed()
        }
        ApiKey::OffsetFetch => match decode::<OffsetFetchRequest>(id, payload) {
            Ok(req) => futures::future::ready(respond(id, Ok(&engine.offset_fetch(&req)))).boxed(),
            Err(f) => f,
        },
        ApiKey::CreateTopic => {
            let req: CreateTopicRequest = match decode(id, payload) {
                Ok(r) => r,
                Err(f) => return f,
            };
            let engine = Arc::clone(engine);
            async move {
                let r = rt::unblock(move || {
                    engine
                        .create_topic_request(&req)
                        .map(|_| ())
                        .map_err(|e| e.code())
                })
                .await;
                respond(id, r.as_ref().map(|()| &Empty).map_err(|e| *e))
            }
            .boxed()
        }
        ApiKey::Metadata => match decode::<MetadataRequest>(id, payload) {
            Ok(req) => {
                futures::future::ready(respond(id, Ok(&engine.metadata(&req.topics)))).boxed()
            }
            Err(f) => f,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flume_protocol::messages::Encode;

    fn join(topics: &[&str]) -> Vec<u8> {
        let mut buf = Vec::new();
        JoinGroupRequest {
            group: "g".into(),
            member_id: String::new(),
            session_timeout_ms: 1000,
            rebalance_timeout_ms: 1000,
            assignor: String::new(),
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
        }
        .encode(&mut buf);
        buf
    }

    #[test]
    fn join_topic_lists_are_deduplicated_and_capped_before_decoding() {
        let req = decode_join(&join(&["b", "a", "b", "a", "b"]), 5).unwrap();
        assert_eq!(req.topics, vec!["a".to_owned(), "b".to_owned()]);
        let err = decode_join(&join(&["a"; 6]), 5).unwrap_err();
        assert!(
            err.contains("6 entries") && err.contains("max_topics_per_join is 5"),
            "{err}"
        );
        // The count is checked before the names: a list that claims more names
        // than the cap is refused even if its bytes are cut short.
        let mut cut = join(&["a"; 6]);
        cut.truncate(cut.len() - 4);
        assert!(decode_join(&cut, 5)
            .unwrap_err()
            .contains("max_topics_per_join"));
        assert!(decode_join(&join(&["a"]), 5).is_ok());
        let mut trailing = join(&["a"]);
        trailing.push(0);
        assert!(decode_join(&trailing, 5).is_err());
    }
}

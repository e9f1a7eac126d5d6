//! One connection as a state machine: [`serve`] is the whole life of a
//! connection, and reads as what it does.
//!
//! ```text
//! loop {
//!     admit      every whole frame read so far, in order, while the in-flight
//!                limit and the memory budget allow; dispatch each to the front end
//!     respond    gather every response that is ready, write them in one call
//!     close      once no more is read and nothing is in flight
//!     wait       for the next event: bytes, a response, room, shutdown, the idle timer
//!     apply      that event
//! }
//! ```
//!
//! Requests are admitted in order (a PRODUCE is queued on its partitions right
//! away, so per-connection order holds; in block mode a full queue stops the
//! admitting, and TCP pushes back on the producer) and served together, at
//! most `max_in_flight_per_connection` at once. Every request is charged to
//! the connection's share of the memory budget ([`crate::budget`]) from
//! admission until its response has been written; past the budget nothing
//! more is admitted or read, except what fits in the connection's own
//! reserve (the fairness rule: a new connection is always served). A peer that sends part of a frame and goes quiet
//! for `read_timeout` is cut off; one that does not read its responses for
//! `write_timeout` too. Shutdown stops the reading; the requests in flight
//! are still answered.
//!
//! The peer closing is noticed at once, whatever the connection is waiting
//! for: while it may not admit (its in-flight places taken, the memory budget
//! spent, a produce throttle) it still reads up to [`crate::net::WATCH_AHEAD_BYTES`]
//! ahead, only to see EOF or a reset. A reset ends the connection there. EOF
//! is a half-close: the whole frames already read are still admitted and
//! answered, except requests that wait on others rather than on the broker's
//! own work (a FETCH with `max_wait_ms` > 0, HEARTBEAT_WAIT, GROUP_FETCH,
//! JOIN_GROUP; see
//! [`waits_on_others`]): those are dropped, unanswered, in flight or not,
//! and their memory released, so a dead client's connections close at once
//! (Kafka closes on EOF outright).

use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use flume_protocol::frame::{self, Decoded};
use flume_rt as rt;
use flume_rt::SpinBudget;
use futures::io::AsyncReadExt;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;

use crate::budget::{Charge, MemoryBudget};
use crate::config::BrokerConfig;
use crate::engine::{Engine, FetchMemory};
use crate::flume::{self, InFlight};
use crate::security::auth::{Authenticator, ConnAuth, Step};
use crate::security::quota::{ConnQuota, Mechanism};
use crate::security::tls::Transport;
use crate::security::Principal;
use flume_protocol::{ApiKey, AuthenticateResponse, ErrorCode};

/// Told the connection's principal whenever it changes (after AUTHENTICATE).
pub type PrincipalSink = Arc<dyn Fn(Principal) + Send + Sync>;

/// Who a connection is and how it may authenticate.
pub struct Security {
    /// Who the peer is so far (its client certificate's subject, or anonymous).
    pub principal: Principal,
    /// The broker's authentication settings and users.
    pub auth: Arc<Authenticator>,
    /// Told the principal after a successful AUTHENTICATE.
    pub sink: PrincipalSink,
    /// The connection's standing with the per-principal limits.
    pub quota: ConnQuota,
}

/// Serves one connection until EOF, a bad frame, a timeout or shutdown.
/// `stream` is past its TLS handshake, if any; `security` says who the peer is.
///
/// # Errors
/// A failed read or write, a malformed frame, a timeout.
pub async fn serve(
    engine: Arc<Engine>,
    memory: Arc<MemoryBudget>,
    counting: Arc<MemoryBudget>,
    stream: Transport,
    security: Security,
) -> std::io::Result<()> {
    let mut conn = ConnState::new(engine, memory, counting, stream, security)?;
    loop {
        conn.admit().await;
        conn.respond().await?;
        if conn.is_finished() {
            return conn.close();
        }
        let event = conn.wait().await;
        conn.apply(event)?;
    }
}

/// What a connection waits for.
#[derive(Debug)]
pub enum Event {
    /// Bytes from the peer (0: it closed its side).
    Read(std::io::Result<usize>),
    /// A response became ready (None: nothing was in flight).
    Done(Option<(Vec<u8>, Option<Charge>)>),
    /// The broker is shutting down.
    Stop,
    /// The memory budget has room again, or `respond` freed an in-flight
    /// place a frame already read waits for.
    Room,
    /// The peer sent part of a frame and went quiet for `read_timeout`.
    Idle,
    /// The produce throttle time is over: reading resumes.
    Unmuted,
}

/// Whether the connection still reads requests.
#[derive(Debug)]
enum Phase {
    Reading,
    /// The peer closed its side (EOF): the whole frames already read are
    /// still admitted, except requests that wait on others (dropped).
    PeerClosed,
    /// No more requests: the peer closed and every whole frame it sent was
    /// admitted, it sent a bad frame (`failure`), or the broker is shutting
    /// down. What is in flight is still answered.
    Draining {
        failure: Option<std::io::Error>,
    },
}

/// A request being served and its charge to the memory budget (its frame and
/// decoded form), handed over with the response, which keeps it until written.
struct Charged {
    response: InFlight,
    charge: Option<Charge>,
    /// A request that waits on others ([`waits_on_others`]): once the peer
    /// has closed, its answer is dropped, not waited for.
    drop_on_close: bool,
}

/// Whether a request may wait on others rather than only on the broker's own
/// work: a FETCH with `max_wait_ms` > 0 (new records), HEARTBEAT_WAIT and
/// GROUP_FETCH (a rebalance, records), JOIN_GROUP (the other members),
/// SHARE_FETCH (records to acquire). Once the peer has closed its
/// side, such a request is dropped unanswered: its answer could take up to
/// its wait, and a peer that closed is almost always gone. Every other
/// request is still answered (a half-closed peer may read its answers).
fn waits_on_others(api_key: i16, payload: &[u8]) -> bool {
    match ApiKey::from_i16(api_key) {
        // FetchRequest starts with max_wait_ms:i32 (docs/protocol.md); one too
        // short to hold it is answered INVALID_REQUEST at once.
        Some(ApiKey::Fetch) => payload
            .first_chunk::<4>()
            .is_some_and(|w| i32::from_be_bytes(*w) > 0),
        Some(
            ApiKey::HeartbeatWait | ApiKey::JoinGroup | ApiKey::GroupFetch | ApiKey::ShareFetch,
        ) => true,
        _ => false,
    }
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

/// The state of one connection.
pub struct ConnState {
    engine: Arc<Engine>,
    cfg: BrokerConfig,
    /// The connection's share of the request memory budget.
    memory: Arc<MemoryBudget>,
    /// The broker-wide budget of waiting fetches' counting reads.
    counting: Arc<MemoryBudget>,
    /// The byte stream: read in `wait`, written in `respond`, never both at once.
    io: Transport,
    /// Who the peer is (for authorisation).
    principal: Principal,
    /// AUTHENTICATE's state.
    auth: ConnAuth,
    sink: PrincipalSink,
    /// Per-principal limits: the connection count, the produce quota.
    quota: ConnQuota,
    /// Over its produce quota, the connection reads nothing until then.
    muted_until: Option<Instant>,
    stop: async_channel::Receiver<()>,
    phase: Phase,
    /// Frames are split off this buffer as shared `Bytes`, so record batches
    /// reach the partition writers without being copied.
    rbuf: BytesMut,
    /// Reads land here first: zeroed once, so no read pays for clearing fresh memory.
    chunk: Vec<u8>,
    /// The last read came back short of `chunk`, so the socket was empty: the
    /// next read waits for readiness before reading (no failed read per request).
    drained: bool,
    /// Responses ready to be written, with one call.
    wbuf: Vec<u8>,
    /// Charges of the responses in `wbuf`, released once it is written.
    unwritten: Vec<Charge>,
    inflight: FuturesUnordered<Charged>,
    /// The last admission pass stopped at a frame of this many bytes that the
    /// memory budget could not admit.
    held_back: Option<usize>,
    /// The last admission pass stopped for want of an in-flight place: once
    /// `respond` frees one, admission runs again before waiting for bytes (a
    /// peer that pipelined past the limit may send nothing more).
    slot_wanted: bool,
    /// The last time the peer's bytes arrived (or we were not reading).
    last_progress: Instant,
    /// How long `wait` spins for the next event before parking (`busy_poll`).
    spin: SpinBudget,
    /// The peer closed its side (a read returned EOF): nothing more is read.
    peer_closed: bool,
}

impl ConnState {
    /// A connection on `stream`, before its first read.
    ///
    /// # Errors
    /// The socket refuses `TCP_NODELAY`.
    pub fn new(
        engine: Arc<Engine>,
        memory: Arc<MemoryBudget>,
        counting: Arc<MemoryBudget>,
        stream: Transport,
        security: Security,
    ) -> std::io::Result<Self> {
        stream.set_nodelay()?;
        let cfg = engine.config().clone();
        let spin_policy = cfg.busy_poll;
        let stop = engine.shutdown_signal();
        Ok(ConnState {
            engine,
            cfg,
            memory,
            counting,
            io: stream,
            principal: security.principal,
            auth: ConnAuth::new(security.auth),
            sink: security.sink,
            quota: security.quota,
            muted_until: None,
            stop,
            phase: Phase::Reading,
            rbuf: BytesMut::with_capacity(64 * 1024),
            chunk: vec![0u8; 64 * 1024],
            drained: true,
            wbuf: Vec::with_capacity(64 * 1024),
            unwritten: Vec::new(),
            inflight: FuturesUnordered::new(),
            held_back: None,
            slot_wanted: false,
            last_progress: Instant::now(),
            spin: SpinBudget::new(spin_policy),
            peer_closed: false,
        })
    }

    fn reading(&self) -> bool {
        matches!(self.phase, Phase::Reading)
    }

    /// Whether whole frames are still admitted (reading, or the peer closed
    /// after sending them).
    fn admitting(&self) -> bool {
        matches!(self.phase, Phase::Reading | Phase::PeerClosed)
    }

    fn has_slot(&self) -> bool {
        self.inflight.len() < self.cfg.max_in_flight_per_connection
    }

    /// Whether the produce quota keeps the connection from reading now.
    fn muted(&mut self) -> bool {
        match self.muted_until {
            Some(t) if Instant::now() < t => true,
            Some(_) => {
                self.muted_until = None;
                false
            }
            None => false,
        }
    }

    /// Admits every whole frame read so far, in order, while a slot is free
    /// and the memory budget has room. A malformed frame stops the reading;
    /// the responses already in flight are still written. Once the peer has
    /// closed, the first incomplete frame ends the admitting.
    pub async fn admit(&mut self) {
        self.held_back = None;
        self.slot_wanted = false;
        while self.admitting() && !self.muted() {
            if !self.has_slot() {
                self.slot_wanted = true;
                return;
            }
            let (api_key, request_id, used) = match frame::decode_request(
                &self.rbuf,
                self.cfg.max_frame_bytes,
            ) {
                Ok(Decoded::Frame(f, used)) => (f.api_key, f.request_id, used),
                Ok(Decoded::NeedMore(_)) if self.peer_closed => {
                    if !self.rbuf.is_empty() {
                        tracing::debug!(bytes = self.rbuf.len(), "peer closed mid-frame");
                    }
                    self.phase = Phase::Draining { failure: None };
                    return;
                }
                Ok(Decoded::NeedMore(total)) => {
                    if let Some(total) = total {
                        reserve_for_frame(&mut self.rbuf, total);
                    }
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "malformed frame; closing the connection after pending responses");
                    let failure =
                        std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string());
                    self.phase = Phase::Draining {
                        failure: Some(failure),
                    };
                    return;
                }
            };
            // The fairness rule (`crate::budget`): within the connection's
            // reserve however spent the shared budget is, beyond it only
            // while the shared budget has room.
            if !self.memory.may_admit(used) {
                self.held_back = Some(used);
                return;
            }
            self.dispatch(api_key, request_id, used).await;
        }
    }

    /// Hands the next frame (`used` bytes of the read buffer) to the front end
    /// and puts its response in flight. The request is charged from now until
    /// its response is written: the frame (a PRODUCE keeps it, its batches are
    /// slices of it), then the decoded request.
    async fn dispatch(&mut self, api_key: i16, request_id: i32, used: usize) {
        let frame = self.rbuf.split_to(used).freeze();
        let payload = frame.slice(4 + frame::REQUEST_HEADER_LEN..);
        let waits = waits_on_others(api_key, &payload);
        if waits && self.peer_closed {
            tracing::debug!(
                api_key,
                request_id,
                "peer closed: a request that waits is dropped unanswered"
            );
            return;
        }
        let mut charge = self.memory.charge(frame.len());
        if api_key == ApiKey::Authenticate as i16 {
            let response = self.authenticate(request_id, &payload);
            self.inflight.push(Charged {
                response,
                charge: Some(charge),
                drop_on_close: false,
            });
            return;
        }
        if let Err(e) = self.quota.check() {
            // Over the connection limit of its principal: answered, then closed.
            tracing::info!(error = %e, "connection closed");
            self.refuse(request_id, ErrorCode::LimitReached, charge, e.to_string());
            return;
        }
        if api_key == ApiKey::Users as i16 && self.auth.allows_requests() {
            let auth = Arc::clone(self.auth.authenticator());
            let admins = self.cfg.admin_users.clone();
            let principal = self.principal.clone();
            let response = async move {
                let result = rt::unblock(move || {
                    crate::security::auth::users_request(&auth, &admins, &principal, &payload)
                })
                .await;
                let mut buf = Vec::new();
                flume_protocol::encode_response_frame(
                    &mut buf,
                    request_id,
                    result.as_ref().map_err(|e| *e),
                );
                buf
            }
            .boxed();
            self.inflight.push(Charged {
                response,
                charge: Some(charge),
                drop_on_close: false,
            });
            return;
        }
        if !self.auth.allows_requests() {
            let mut buf = Vec::new();
            flume_protocol::encode_response_frame::<AuthenticateResponse>(
                &mut buf,
                request_id,
                Err(ErrorCode::AuthenticationRequired),
            );
            self.inflight.push(Charged {
                response: futures::future::ready(buf).boxed(),
                charge: Some(charge),
                drop_on_close: false,
            });
            return;
        }
        let mut decoded = 0;
        let budgets = FetchMemory {
            response: &self.memory,
            counting: &self.counting,
        };
        let request = flume::Request {
            api_key,
            id: request_id,
            payload,
        };
        let response = flume::admit(
            &self.engine,
            budgets,
            request,
            &self.principal,
            &mut decoded,
        )
        .await;
        charge.add(decoded);
        if api_key == ApiKey::Produce as i16 {
            // Served now; past its quota the connection then reads nothing
            // for the throttle time (the PRODUCE response has no field for it).
            let throttle = self.quota.produce(frame.len());
            if !throttle.is_zero() {
                tracing::debug!(principal = %self.principal, ?throttle, "produce quota: throttled");
                self.muted_until = Some(Instant::now() + throttle);
            }
        }
        self.inflight.push(Charged {
            response,
            charge: Some(charge),
            drop_on_close: waits,
        });
    }

    /// Answers `code` and closes the connection once the answer is written.
    fn refuse(&mut self, request_id: i32, code: ErrorCode, charge: Charge, why: String) {
        let mut buf = Vec::new();
        flume_protocol::encode_response_frame::<AuthenticateResponse>(
            &mut buf,
            request_id,
            Err(code),
        );
        self.phase = Phase::Draining {
            failure: Some(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                why,
            )),
        };
        self.inflight.push(Charged {
            response: futures::future::ready(buf).boxed(),
            charge: Some(charge),
            drop_on_close: false,
        });
    }

    /// One AUTHENTICATE step: the response, delayed after a failure; after
    /// too many failures the connection stops reading (and closes once the
    /// answer is written). A new exchange from an address with too many
    /// failed logins is refused at once; a login as a principal at its
    /// connection limit is answered LIMIT_REACHED; either closes.
    fn authenticate(&mut self, request_id: i32, payload: &[u8]) -> InFlight {
        let mut buf = Vec::new();
        let limited = if self.auth.in_exchange() {
            Ok(())
        } else {
            self.quota.login_allowed()
        };
        let checked = limited.is_ok();
        let step = match limited {
            Ok(()) => self.auth.step(payload),
            Err(e) => {
                tracing::info!(error = %e, "AUTHENTICATE refused");
                Step::Failed {
                    code: ErrorCode::AuthenticationFailed,
                    delay: std::time::Duration::ZERO,
                    close: true,
                }
            }
        };
        let step = match step {
            Step::Done(resp, principal) => {
                self.quota.login_result(Mechanism::ScramSha256, true);
                match self.quota.login(&principal) {
                    Ok(()) => Step::Done(resp, principal),
                    Err(e) => {
                        tracing::info!(error = %e, "connection closed after AUTHENTICATE");
                        Step::Failed {
                            code: ErrorCode::LimitReached,
                            delay: std::time::Duration::ZERO,
                            close: true,
                        }
                    }
                }
            }
            Step::Failed {
                code: ErrorCode::AuthenticationFailed,
                delay,
                close,
            } if checked => {
                self.quota.login_result(Mechanism::ScramSha256, false);
                Step::Failed {
                    code: ErrorCode::AuthenticationFailed,
                    delay,
                    close,
                }
            }
            other => other,
        };
        match step {
            Step::Continue(resp) => {
                flume_protocol::encode_response_frame(&mut buf, request_id, Ok(&resp));
                futures::future::ready(buf).boxed()
            }
            Step::Done(resp, principal) => {
                (self.sink)(principal.clone());
                self.principal = principal;
                flume_protocol::encode_response_frame(&mut buf, request_id, Ok(&resp));
                futures::future::ready(buf).boxed()
            }
            Step::Failed { code, delay, close } => {
                flume_protocol::encode_response_frame::<AuthenticateResponse>(
                    &mut buf,
                    request_id,
                    Err(code),
                );
                if close {
                    self.phase = Phase::Draining {
                        failure: Some(std::io::Error::new(
                            std::io::ErrorKind::PermissionDenied,
                            "too many failed AUTHENTICATE attempts",
                        )),
                    };
                }
                async move {
                    rt::sleep(delay).await;
                    buf
                }
                .boxed()
            }
        }
    }

    /// Moves a response into the write buffer; its charge grows by the
    /// response and lasts until the buffer is written.
    fn take(&mut self, (resp, charge): (Vec<u8>, Option<Charge>)) {
        if let Some(mut c) = charge {
            c.add(resp.len());
            self.unwritten.push(c);
        }
        self.wbuf.extend_from_slice(&resp);
    }

    /// Gathers every response that is ready and writes them with one call.
    ///
    /// # Errors
    /// The write fails, or the peer does not read for `write_timeout`.
    pub async fn respond(&mut self) -> std::io::Result<()> {
        while let Some(Some(resp)) = self.inflight.next().now_or_never() {
            self.take(resp);
        }
        if self.wbuf.is_empty() {
            return Ok(());
        }
        if let Err(e) =
            rt::write_all_timeout(&mut self.io, &self.wbuf, self.cfg.write_timeout).await
        {
            if e.kind() == std::io::ErrorKind::TimedOut {
                return Err(std::io::Error::new(
                    e.kind(),
                    "peer does not read its responses",
                ));
            }
            return Err(e);
        }
        self.wbuf.clear();
        self.unwritten.clear();
        if self.wbuf.capacity() > 1 << 20 {
            self.wbuf.shrink_to(64 * 1024);
        }
        Ok(())
    }

    /// True once nothing more is read or admitted and every response is written.
    pub fn is_finished(&self) -> bool {
        !self.admitting() && self.inflight.is_empty() && self.wbuf.is_empty()
    }

    /// Ends the connection: Ok after a clean close, the malformed frame's
    /// error otherwise.
    ///
    /// # Errors
    /// The peer sent a malformed frame.
    pub fn close(self) -> std::io::Result<()> {
        match self.phase {
            Phase::Draining {
                failure: Some(e), ..
            } => Err(e),
            _ => Ok(()),
        }
    }

    /// Waits for the next event. Past the memory budget no more requests are
    /// read until requests complete (they do on their own: see `crate::budget`);
    /// frames held back wait for room, not for bytes, since their peer may be
    /// waiting for their responses and send nothing more. Whenever requests
    /// are not read, the socket is still watched for the peer closing: up to
    /// [`crate::net::WATCH_AHEAD_BYTES`] are read ahead into the read buffer (or, once no
    /// more requests are admitted, read and dropped).
    pub async fn wait(&mut self) -> Event {
        if self.slot_wanted && self.has_slot() && self.admitting() {
            // `respond` freed a place: admit before waiting.
            return Event::Room;
        }
        let reading = self.reading();
        let admitting = self.admitting();
        let held_back = self.held_back;
        let spent = held_back.is_some() || self.memory.is_spent();
        let muted = self.muted();
        let can_read = reading && self.has_slot() && !spent && !muted;
        let watch_len = if can_read || self.peer_closed {
            0
        } else if reading {
            crate::net::WATCH_AHEAD_BYTES
                .saturating_sub(self.rbuf.len())
                .min(self.chunk.len())
        } else {
            self.chunk.len()
        };
        let muted_until = self.muted_until;
        let partial = !self.rbuf.is_empty();
        // The idle timer is armed only for a partial frame: one per request
        // would wake the reactor thread on every request. Time we spend not
        // reading is not the peer's.
        if !can_read {
            self.last_progress = Instant::now();
        }
        let idle_left = self
            .cfg
            .read_timeout
            .saturating_sub(self.last_progress.elapsed());
        // Having answered (or while a response is on its way), spin for the
        // next event before parking the thread: the next request, or the
        // response in flight (the spin's yields let the select poll it).
        let drained = self.drained;
        let spin_for = match &self.io {
            Transport::Plain(_) if can_read && drained => self.spin.budget(),
            _ => std::time::Duration::ZERO,
        };
        // An atomic, not a Cell: the future must be Send.
        let missed = std::sync::atomic::AtomicBool::new(false);
        let spin_start = Instant::now();
        let (io, chunk, missed_ref) = (&mut self.io, &mut self.chunk, &missed);
        let read = async {
            if !can_read {
                // Only watching for EOF or a reset (watch_len > 0, so a 0 is EOF).
                let Some(buf) = chunk.get_mut(..watch_len).filter(|b| !b.is_empty()) else {
                    return futures::future::pending().await;
                };
                return match io {
                    Transport::Plain(reader) => reader.read_ready(buf).await,
                    Transport::Tls(t) => t.read(buf).await,
                    Transport::Local(s) => (&*s).read(buf).await,
                };
            }
            match io {
                Transport::Plain(reader) if drained => {
                    if !spin_for.is_zero() {
                        if let Some(r) = reader.read_spinning(chunk, spin_for).await {
                            return r;
                        }
                        missed_ref.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    reader.read_ready(chunk).await
                }
                Transport::Plain(reader) => (&*reader).read(chunk).await,
                // rustls keeps what it decrypted but was not read; a cancelled read loses nothing.
                Transport::Tls(t) => t.read(chunk).await,
                // Copied out under the pipe's lock: a cancelled read loses nothing.
                Transport::Local(s) => (&*s).read(chunk).await,
            }
        };
        let memory = &self.memory;
        let room = async {
            match held_back {
                // A whole frame waits: until it may be admitted.
                Some(bytes) if admitting => memory.wait_to_admit(bytes).await,
                // Reading is held to watching: until the shared budget has room.
                None if admitting && spent => memory.wait_for_room().await,
                _ => futures::future::pending::<()>().await,
            }
        };
        let inflight = &mut self.inflight;
        let next = async {
            if inflight.is_empty() {
                futures::future::pending().await
            } else {
                inflight.next().await
            }
        };
        // Once seen, the shutdown signal is not polled again: a closed channel
        // is always ready, and the loop would spin without yielding while it
        // waits for its requests (and could not be cancelled).
        let stop = &self.stop;
        let stopped = async {
            if admitting {
                let _ = stop.recv().await;
            } else {
                futures::future::pending::<()>().await;
            }
        };
        // A login under way (or owed, with `--auth required`) is bounded by
        // the read timeout too, so a peer that never finishes holds nothing long.
        let login_owed = self.auth.in_exchange() || !self.auth.allows_requests();
        let idle = async {
            if (partial || login_owed) && can_read {
                rt::sleep(idle_left).await;
            } else {
                futures::future::pending::<()>().await;
            }
        };
        let unmute = async {
            match muted_until {
                Some(t) if admitting => {
                    rt::sleep(t.saturating_duration_since(Instant::now())).await
                }
                _ => futures::future::pending::<()>().await,
            }
        };
        let event = futures::select! {
            r = read.fuse() => Event::Read(r),
            () = unmute.fuse() => Event::Unmuted,
            d = next.fuse() => Event::Done(d),
            _ = stopped.fuse() => Event::Stop,
            () = room.fuse() => Event::Room,
            _ = idle.fuse() => Event::Idle,
        };
        if !spin_for.is_zero() {
            if missed.into_inner() {
                self.spin.missed();
            } else if matches!(event, Event::Read(_) | Event::Done(Some(_))) {
                self.spin.caught(spin_start.elapsed());
            }
        }
        event
    }

    /// Applies an event to the state.
    ///
    /// # Errors
    /// A failed read, or a partial frame left for `read_timeout`.
    pub fn apply(&mut self, event: Event) -> std::io::Result<()> {
        match event {
            Event::Read(Ok(0)) => {
                // Half-closed or gone: what is read is still admitted (see
                // `admit`), what waits on others is dropped now.
                self.peer_closed = true;
                self.drained = true;
                if self.reading() {
                    // With no whole frame left to admit (the usual case: a
                    // dead client), nothing more is admitted at all.
                    let whole = !matches!(
                        frame::decode_request(&self.rbuf, self.cfg.max_frame_bytes),
                        Ok(Decoded::NeedMore(_))
                    );
                    self.phase = if whole {
                        Phase::PeerClosed
                    } else {
                        if !self.rbuf.is_empty() {
                            tracing::debug!(bytes = self.rbuf.len(), "peer closed mid-frame");
                        }
                        Phase::Draining { failure: None }
                    };
                }
                if self.inflight.iter().any(|c| c.drop_on_close) {
                    self.inflight = std::mem::take(&mut self.inflight)
                        .into_iter()
                        .filter(|c| !c.drop_on_close)
                        .collect();
                }
            }
            Event::Read(Ok(n)) => {
                self.drained = n < self.chunk.len();
                // Draining, bytes are read only to notice the peer closing.
                if self.reading() {
                    self.rbuf.extend_from_slice(&self.chunk[..n]);
                    self.last_progress = Instant::now();
                }
            }
            Event::Read(Err(e)) => return Err(e),
            Event::Done(Some(resp)) => self.take(resp),
            Event::Done(None) | Event::Room | Event::Unmuted => {}
            Event::Stop => self.phase = Phase::Draining { failure: None },
            Event::Idle => {
                if !self.rbuf.is_empty() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "incomplete frame, peer went quiet",
                    ));
                }
                if self.auth.in_exchange() || !self.auth.allows_requests() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "login not finished, peer went quiet",
                    ));
                }
            }
        }
        Ok(())
    }
}

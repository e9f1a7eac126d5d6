//! The network layer every listener shares: the accept loop (a failed
//! accept retried after a pause, the connection limit, refused connections
//! counted), the TLS handshake in the connection's own task, the memory
//! budgets of a listener and each connection's share of them (with its
//! reserve: [`crate::budget`]), the connection tasks that shutdown drains and,
//! past its deadline, cancels, who each open connection is, and when the
//! memory closed connections freed is handed back to the system. Each
//! protocol's connection loop lives in its front end (`flume::conn`,
//! `kafka`); HTTP takes connections with [`next_connection`] and [`secure`]
//! and keeps its own limit (it closes the oldest idle connection instead of
//! refusing a new one).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use event_listener::Event;
use flume_rt::{self as rt, sync::lock};

use crate::budget::{MemoryBudget, CONNECTION_RESERVE_BYTES};
use crate::metrics::Metrics;
use crate::security::tls::{self, ServerTls, Transport};
use crate::security::Principal;

/// The connections of one listener.
#[derive(Debug)]
pub(crate) struct Connections {
    open: AtomicUsize,
    closed: Event,
    /// Requests being served, over all connections.
    pub(crate) memory: Arc<MemoryBudget>,
    /// Chunks that waiting fetches read to count what arrived, over all connections.
    pub(crate) counting: Arc<MemoryBudget>,
    /// The task of every open connection, by a sequence number, so shutdown
    /// can cancel those that outlive its deadline.
    tasks: Mutex<HashMap<u64, rt::Task<()>>>,
    /// Who each open connection is, once known (at most one entry per open
    /// connection, so bounded by the connection limit).
    principals: Mutex<HashMap<u64, Principal>>,
    next_id: AtomicU64,
}

/// A connection's own handle on its listener: records who it is.
#[derive(Debug)]
pub(crate) struct ConnHandle {
    conns: Arc<Connections>,
    id: u64,
}

impl ConnHandle {
    /// Records the connection's principal (replacing what was recorded).
    pub(crate) fn set_principal(&self, p: Principal) {
        lock(&self.conns.principals).insert(self.id, p);
    }
}

/// Held by a connection's task: counts it as open until the task ends.
struct ConnGuard(Arc<Connections>, u64);

impl Drop for ConnGuard {
    fn drop(&mut self) {
        // Dropping the handle of the task that is ending detaches it; nothing is lost.
        drop(lock(&self.0.tasks).remove(&self.1));
        lock(&self.0.principals).remove(&self.1);
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        self.0.closed.notify(usize::MAX);
        connection_closed();
    }
}

/// Closed connections after which the freed memory is handed back to the
/// system: each left its buffers (up to 192 KiB) in the allocator.
const TRIM_AFTER_CLOSED: usize = 64;
/// A trim runs once no connection has closed for this long: a wave of
/// connections ending together is trimmed once, after it.
const TRIM_DELAY: Duration = Duration::from_secs(1);
/// The longest a trim waits for a wave that keeps closing.
const TRIM_MAX_WAIT: Duration = Duration::from_secs(10);
/// The least time between two trims (each walks and locks every arena).
const TRIM_EVERY: Duration = Duration::from_secs(5);

/// When the broker hands freed memory back to the system (see
/// [`flume_rt::heap`]): after a wave, that is once [`TRIM_AFTER_CLOSED`]
/// connections have closed and the open ones are down to half their peak
/// since the last trim (steady churn, connections closing as others open,
/// reuses the memory it frees and never asks for one); the trim runs when no
/// connection has closed for [`TRIM_DELAY`] (at most [`TRIM_MAX_WAIT`] after it
/// was first due) and at least [`TRIM_EVERY`] after the last one. Time is
/// passed in.
#[derive(Debug, Default)]
struct TrimPolicy {
    /// Open connections, over all listeners, and their peak since the last trim.
    open: usize,
    peak: usize,
    /// Connections closed since the last trim, and when the last one did.
    closed: usize,
    last_close: Option<Instant>,
    /// A trim is scheduled.
    pending: bool,
    last_trim: Option<Instant>,
}

impl TrimPolicy {
    const fn new() -> Self {
        TrimPolicy {
            open: 0,
            peak: 0,
            closed: 0,
            last_close: None,
            pending: false,
            last_trim: None,
        }
    }

    /// A connection opened.
    fn opened(&mut self) {
        self.open = self.open.saturating_add(1);
        self.peak = self.peak.max(self.open);
    }

    /// A connection closed at `now`: how long to wait before trimming, when a
    /// trim is now due and none is pending.
    fn closed(&mut self, now: Instant) -> Option<Duration> {
        self.open = self.open.saturating_sub(1);
        self.closed = self.closed.saturating_add(1);
        self.last_close = Some(now);
        if self.pending || self.closed < TRIM_AFTER_CLOSED || self.open > self.peak / 2 {
            return None;
        }
        self.pending = true;
        let earliest = self.last_trim.map_or(now, |l| l + TRIM_EVERY);
        Some(earliest.saturating_duration_since(now).max(TRIM_DELAY))
    }

    /// The scheduled trim, first awake at `first`, looks again at `now`: how
    /// much longer to wait for the wave to end, or `None` to trim now.
    fn wait_more(&self, first: Instant, now: Instant) -> Option<Duration> {
        let quiet_at = self.last_close.map_or(now, |c| c + TRIM_DELAY);
        let until = quiet_at.min(first + TRIM_MAX_WAIT);
        (until > now).then(|| until - now)
    }

    /// The trim starts at `now`: closings from here on count toward the next.
    fn trimming(&mut self, now: Instant) {
        self.closed = 0;
        self.pending = false;
        self.peak = self.open;
        self.last_trim = Some(now);
    }

    /// The scheduled trim was dropped before it ran: the next closing may
    /// schedule another.
    fn abandoned(&mut self) {
        self.pending = false;
    }
}

/// The process's policy (the allocator is the process's, whatever the listener).
static TRIM: Mutex<TrimPolicy> = Mutex::new(TrimPolicy::new());
/// Trims attempted so far.
static TRIMS: AtomicU64 = AtomicU64::new(0);

/// A scheduled trim that has not started: dropping it (its task dropped
/// unfinished) lets the policy schedule another.
struct PendingTrim(bool);

impl Drop for PendingTrim {
    fn drop(&mut self) {
        if self.0 {
            lock(&TRIM).abandoned();
        }
    }
}

/// Counts a closed connection and schedules a trim when one is due.
fn connection_closed() {
    let Some(delay) = lock(&TRIM).closed(Instant::now()) else {
        return;
    };
    // Detached: it ends on its own; a broker shutting down meanwhile loses nothing.
    drop(rt::spawn(async move {
        let mut pending = PendingTrim(true);
        rt::sleep(delay).await;
        let first = Instant::now();
        loop {
            let more = lock(&TRIM).wait_more(first, Instant::now());
            match more {
                Some(d) => rt::sleep(d).await,
                None => break,
            }
        }
        lock(&TRIM).trimming(Instant::now());
        pending.0 = false;
        let start = Instant::now();
        let released = rt::unblock(flume_rt::heap::release_free_memory).await;
        TRIMS.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            released,
            took_us = start.elapsed().as_micros() as u64,
            "handed freed memory back to the system"
        );
    }));
}

/// How many times this process has tried to hand the memory closed
/// connections freed back to the system (a call of glibc's `malloc_trim`;
/// nothing is called elsewhere): after a wave of closed connections, at most
/// once per five seconds.
pub fn allocator_trims() -> u64 {
    TRIMS.load(Ordering::Relaxed)
}

impl Connections {
    /// No connections yet; `max_request_memory` bounds the requests they serve,
    /// `counting_bytes` what waiting fetches read to count.
    pub(crate) fn new(max_request_memory: usize, counting_bytes: usize) -> Arc<Self> {
        Arc::new(Connections {
            open: AtomicUsize::new(0),
            closed: Event::new(),
            memory: MemoryBudget::new(max_request_memory),
            counting: MemoryBudget::new(counting_bytes),
            tasks: Mutex::new(HashMap::new()),
            principals: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
        })
    }

    /// Open connections.
    pub(crate) fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// The principals of the open connections that have one recorded.
    pub(crate) fn principals(&self) -> Vec<Principal> {
        lock(&self.principals).values().cloned().collect()
    }

    /// Serves a new connection with `serve(handle)` as its own task, unless
    /// `max` are open already; `false` when refused (the caller closes the socket).
    pub(crate) fn spawn<F, Fut>(self: &Arc<Self>, max: usize, serve: F) -> bool
    where
        F: FnOnce(ConnHandle) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        if self.open() >= max {
            return false;
        }
        self.open.fetch_add(1, Ordering::AcqRel);
        lock(&TRIM).opened();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let guard = ConnGuard(Arc::clone(self), id);
        let serve = serve(ConnHandle {
            conns: Arc::clone(self),
            id,
        });
        // The map is locked across the spawn, so a task that ends at once removes
        // its handle only after it was inserted.
        let mut tasks = lock(&self.tasks);
        let task = rt::spawn(async move {
            let _guard = guard;
            serve.await;
        });
        tasks.insert(id, task);
        true
    }

    /// Waits until every connection has ended or `deadline` passes, then
    /// cancels the connection tasks still running; returns how many that was.
    pub(crate) async fn drain(&self, deadline: Instant) -> usize {
        loop {
            let listener = self.closed.listen();
            let open = self.open();
            if open == 0 {
                return 0;
            }
            let now = Instant::now();
            if now >= deadline {
                let tasks: Vec<rt::Task<()>> = lock(&self.tasks).drain().map(|(_, t)| t).collect();
                for t in tasks {
                    t.cancel().await;
                }
                return open;
            }
            rt::timeout(deadline - now, listener).await;
        }
    }
}

/// Bytes waiting fetches may read at once to count what arrived, over all
/// the connections of a listener.
pub(crate) const COUNTING_BYTES: usize = 4 << 20;

/// Most bytes a connection that may not admit reads ahead, only to notice the
/// peer closing or resetting: as much as its reserve, so a request that fits
/// the reserve is whole in its buffer by then ([`crate::budget`]).
pub(crate) const WATCH_AHEAD_BYTES: usize = CONNECTION_RESERVE_BYTES;

/// How a listener takes connections.
#[derive(Clone)]
pub(crate) struct Listening {
    /// The listener's name in logs (`flume`, `kafka`).
    pub(crate) name: &'static str,
    /// Most connections open at once; past it a new one is closed and counted.
    pub(crate) max_connections: usize,
    /// One connection's share of the listener's request memory.
    pub(crate) connection_memory: usize,
    /// The TLS handshake's time limit (the read timeout).
    pub(crate) handshake: std::time::Duration,
    /// TLS, when the broker has it.
    pub(crate) tls: Option<Arc<ServerTls>>,
    /// Where refused connections are counted.
    pub(crate) metrics: Arc<Metrics>,
}

/// A connection past its TLS handshake, as a protocol's connection loop gets it.
pub(crate) struct Accepted {
    /// The byte stream (TLS or plain).
    pub(crate) stream: Transport,
    /// The peer's address.
    pub(crate) peer: std::net::SocketAddr,
    /// Who the peer is so far (its certificate's subject, or anonymous).
    pub(crate) principal: Principal,
    /// The connection's share of the listener's request memory, with its reserve.
    pub(crate) memory: Arc<MemoryBudget>,
    /// The listener's budget of waiting fetches' counting reads.
    pub(crate) counting: Arc<MemoryBudget>,
    /// Records who the connection is, for the listener's list.
    pub(crate) handle: ConnHandle,
}

/// Takes connections on `listener` until `stop` fires: each within
/// `how.max_connections` gets a task of its own that runs the TLS handshake
/// and then `serve`; one past the limit is closed at once, logged and
/// counted.
pub(crate) async fn accept_loop<F, Fut>(
    listener: rt::TcpListener,
    conns: Arc<Connections>,
    how: Listening,
    stop: async_channel::Receiver<()>,
    serve: F,
) where
    F: Fn(Accepted) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    while let Some((stream, peer)) = next_connection(&listener, &stop, how.name).await {
        let _ = stream.set_nodelay(true);
        admit(&conns, &how, &serve, Arrived::Tcp(stream, peer));
    }
}

/// The peer address given to in-process connections (they have none):
/// loopback, port 0, so per-address limits treat them as local.
pub(crate) const IN_PROCESS_PEER: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// Takes in-process connections ([`rt::local`]) until `stop` fires, under the
/// same limit, budgets and `serve` as the TCP listener they stand beside; no
/// TLS (the bytes never leave the process), so each starts anonymous and
/// authenticates as a TCP client does.
pub(crate) async fn accept_local_loop<F, Fut>(
    listener: rt::local::LocalListener,
    conns: Arc<Connections>,
    how: Listening,
    stop: async_channel::Receiver<()>,
    serve: F,
) where
    F: Fn(Accepted) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    use futures::FutureExt;
    loop {
        let accepted = futures::select! {
            r = listener.accept().fuse() => r,
            _ = stop.recv().fuse() => return,
        };
        match accepted {
            Ok(stream) => admit(&conns, &how, &serve, Arrived::Local(stream)),
            Err(_) => return,
        }
    }
}

/// A connection as it arrives, before its handshake.
enum Arrived {
    Tcp(rt::TcpStream, std::net::SocketAddr),
    Local(rt::local::LocalStream),
}

/// Gives a new connection its task (handshake, then `serve`) unless the
/// listener is at `how.max_connections`: then it is closed, logged and counted.
fn admit<F, Fut>(conns: &Arc<Connections>, how: &Listening, serve: &F, arrived: Arrived)
where
    F: Fn(Accepted) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let peer = match &arrived {
        Arrived::Tcp(_, peer) => *peer,
        Arrived::Local(_) => IN_PROCESS_PEER,
    };
    let memory = MemoryBudget::within(
        &conns.memory,
        how.connection_memory,
        CONNECTION_RESERVE_BYTES,
    );
    let counting = Arc::clone(&conns.counting);
    let (tls, handshake, name, serve) = (how.tls.clone(), how.handshake, how.name, serve.clone());
    let admitted = conns.spawn(how.max_connections, move |handle| async move {
        tracing::debug!(%peer, listener = name, "connection open");
        let (stream, principal) = match arrived {
            Arrived::Tcp(stream, _) => match secure(tls.as_deref(), stream, handshake).await {
                Ok(x) => x,
                Err(e) => {
                    tracing::info!(%peer, listener = name, error = %e, "TLS handshake failed; connection closed");
                    return;
                }
            },
            Arrived::Local(stream) => (Transport::Local(stream), Principal::Anonymous),
        };
        if !principal.is_anonymous() {
            tracing::debug!(%peer, %principal, "connection authenticated by its certificate");
        }
        handle.set_principal(principal.clone());
        serve(Accepted {
            stream,
            peer,
            principal,
            memory,
            counting,
            handle,
        })
        .await;
    });
    if !admitted {
        // The refused stream was moved into the unspawned task and closed with it.
        tracing::warn!(%peer, listener = how.name, max = how.max_connections, "connection limit reached; closing the new connection");
        how.metrics.connection_refused();
    }
}

/// Opens the connection's byte stream: the TLS handshake when `tls` is set
/// (within `limit`, charged to no request budget), the socket as it is
/// otherwise; with who the peer is (its client certificate's subject, or
/// anonymous).
///
/// # Errors
/// The handshake fails or does not finish within `limit`.
pub(crate) async fn secure(
    tls: Option<&ServerTls>,
    stream: rt::TcpStream,
    limit: std::time::Duration,
) -> std::io::Result<(Transport, Principal)> {
    match tls {
        Some(t) => tls::accept(t, stream, limit).await,
        None => Ok((Transport::Plain(stream), Principal::Anonymous)),
    }
}

/// The next connection on `listener`, or `None` once `stop` fires (the
/// engine's shutdown signal). A failed accept (out of file descriptors and
/// the like) is logged under `what` and retried after a short pause rather
/// than in a tight loop.
pub(crate) async fn next_connection(
    listener: &rt::TcpListener,
    stop: &async_channel::Receiver<()>,
    what: &str,
) -> Option<(rt::TcpStream, std::net::SocketAddr)> {
    use futures::FutureExt;
    loop {
        let accepted = futures::select! {
            r = listener.accept().fuse() => r,
            _ = stop.recv().fuse() => return None,
        };
        match accepted {
            Ok(x) => return Some(x),
            Err(e) => {
                tracing::warn!(error = %e, listener = what, "accept failed");
                rt::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A policy with `n` connections open.
    fn with_open(n: usize) -> TrimPolicy {
        let mut p = TrimPolicy::new();
        for _ in 0..n {
            p.opened();
        }
        p
    }

    #[test]
    fn a_wave_of_closed_connections_is_trimmed_once_after_it() {
        let t0 = Instant::now();
        let mut p = with_open(2_000);
        // Not before half of them are gone (and at least 64).
        for _ in 0..999 {
            assert_eq!(p.closed(t0), None);
        }
        assert_eq!(p.closed(t0), Some(TRIM_DELAY));
        for _ in 0..1_000 {
            assert_eq!(p.closed(t0), None);
        }
        // Woken a second later, the wave over: trim now.
        let t1 = t0 + TRIM_DELAY;
        assert_eq!(p.wait_more(t1, t1), None);
        p.trimming(t1);
        // The next wave, right after: not before five seconds after the last trim.
        let mut p2 = with_open(100);
        p2.last_trim = p.last_trim;
        for _ in 1..TRIM_AFTER_CLOSED {
            assert_eq!(p2.closed(t1), None);
        }
        assert_eq!(p2.closed(t1), Some(TRIM_EVERY));
        // Long after the last trim: a second after the wave again.
        let t2 = t1 + Duration::from_secs(60);
        let mut p3 = with_open(64);
        p3.last_trim = Some(t1);
        for _ in 1..TRIM_AFTER_CLOSED {
            assert_eq!(p3.closed(t2), None);
        }
        assert_eq!(p3.closed(t2), Some(TRIM_DELAY));
    }

    #[test]
    fn steady_churn_never_asks_for_a_trim() {
        let t0 = Instant::now();
        let mut p = with_open(100);
        for i in 0..10_000u64 {
            // One closes as another opens: the memory freed is reused.
            assert_eq!(p.closed(t0 + Duration::from_millis(i)), None);
            p.opened();
        }
        assert!(!p.pending);
    }

    #[test]
    fn a_slow_wave_is_trimmed_when_it_ends_or_after_the_longest_wait() {
        let t0 = Instant::now();
        let mut p = with_open(100);
        let mut at = t0;
        let mut due = None;
        for _ in 0..100 {
            at += Duration::from_millis(100);
            due = due.or(p.closed(at));
        }
        // Due at the 64th closing (6.4 s), the last one 3.6 s later.
        assert_eq!(due, Some(TRIM_DELAY));
        let first = t0 + Duration::from_millis(6_400) + TRIM_DELAY;
        let last = t0 + Duration::from_millis(10_000);
        assert_eq!(p.wait_more(first, first), Some(last + TRIM_DELAY - first));
        assert_eq!(p.wait_more(first, last + TRIM_DELAY), None);
        // A wave that never stops closing is trimmed after the longest wait.
        let mut q = with_open(100);
        q.last_close = Some(first + TRIM_MAX_WAIT + Duration::from_secs(5));
        assert_eq!(q.wait_more(first, first), Some(TRIM_MAX_WAIT));
        assert_eq!(q.wait_more(first, first + TRIM_MAX_WAIT), None);
    }

    #[test]
    fn a_trim_dropped_before_it_ran_lets_the_next_closing_schedule_one() {
        let t0 = Instant::now();
        let mut p = with_open(200);
        let mut due = None;
        for _ in 0..100 {
            due = due.or(p.closed(t0));
        }
        assert!(due.is_some() && p.pending);
        assert_eq!(p.closed(t0), None);
        p.abandoned();
        assert_eq!(p.closed(t0), Some(TRIM_DELAY));
    }
}

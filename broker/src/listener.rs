//! What every TCP listener of the broker (the Flume protocol, the Kafka
//! protocol) shares: the count of open connections with its limit, the
//! request-memory budgets, the connection tasks that shutdown drains and,
//! past its deadline, cancels, the TLS handshake ([`secure`]) and who each
//! open connection is (its [`Principal`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use event_listener::Event;
use flume_rt::{self as rt, sync::lock};

use crate::budget::MemoryBudget;
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
/// How long after the closing that asks for a trim it runs: a wave of
/// connections ending together is trimmed once, after it.
const TRIM_DELAY: Duration = Duration::from_secs(1);
/// The least time between two trims (each walks and locks every arena).
const TRIM_EVERY: Duration = Duration::from_secs(5);

/// When the broker hands freed memory back to the system (see
/// [`flume_rt::heap`]): after [`TRIM_AFTER_CLOSED`] connections closed, once,
/// [`TRIM_DELAY`] later and at least [`TRIM_EVERY`] after the last trim. Time is
/// passed in.
#[derive(Debug, Default)]
struct TrimPolicy {
    closed: usize,
    pending: bool,
    last: Option<Instant>,
}

impl TrimPolicy {
    /// A connection closed at `now`: how long to wait before trimming, when a
    /// trim is now due and none is pending.
    fn closed(&mut self, now: Instant) -> Option<Duration> {
        self.closed = self.closed.saturating_add(1);
        if self.pending || self.closed < TRIM_AFTER_CLOSED {
            return None;
        }
        self.pending = true;
        let earliest = self.last.map_or(now, |l| l + TRIM_EVERY);
        Some(earliest.saturating_duration_since(now).max(TRIM_DELAY))
    }

    /// The trim starts at `now`: closings from here on count toward the next.
    fn trimming(&mut self, now: Instant) {
        self.closed = 0;
        self.pending = false;
        self.last = Some(now);
    }
}

/// The process's policy (the allocator is the process's, whatever the listener).
static TRIM: Mutex<TrimPolicy> = Mutex::new(TrimPolicy {
    closed: 0,
    pending: false,
    last: None,
});
/// Trims run so far.
static TRIMS: AtomicU64 = AtomicU64::new(0);

/// Counts a closed connection and schedules a trim when one is due.
fn connection_closed() {
    let Some(delay) = lock(&TRIM).closed(Instant::now()) else {
        return;
    };
    // Detached: it ends on its own; a broker shutting down meanwhile loses nothing.
    drop(rt::spawn(async move {
        rt::sleep(delay).await;
        lock(&TRIM).trimming(Instant::now());
        let released = rt::unblock(flume_rt::heap::release_free_memory).await;
        TRIMS.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(released, "handed freed memory back to the system");
    }));
}

/// How many times this process has handed the memory closed connections freed
/// back to the system (glibc's `malloc_trim`): at most once per five seconds,
/// a second after 64 connections closed.
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

    #[test]
    fn a_wave_of_closed_connections_is_trimmed_once_after_it() {
        let t0 = Instant::now();
        let mut p = TrimPolicy::default();
        for _ in 1..TRIM_AFTER_CLOSED {
            assert_eq!(p.closed(t0), None);
        }
        // The 64th asks for a trim a second later; the rest of the wave does not.
        assert_eq!(p.closed(t0), Some(TRIM_DELAY));
        for _ in 0..1_000 {
            assert_eq!(p.closed(t0), None);
        }
        let t1 = t0 + TRIM_DELAY;
        p.trimming(t1);
        // The next wave, right after: not before five seconds after the last trim.
        for _ in 1..TRIM_AFTER_CLOSED {
            assert_eq!(p.closed(t1), None);
        }
        assert_eq!(p.closed(t1), Some(TRIM_EVERY));
        p.trimming(t1 + TRIM_EVERY);
        // Long after: a second after the wave again.
        let t2 = t1 + Duration::from_secs(60);
        for _ in 1..TRIM_AFTER_CLOSED {
            assert_eq!(p.closed(t2), None);
        }
        assert_eq!(p.closed(t2), Some(TRIM_DELAY));
    }
}

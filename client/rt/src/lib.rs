//! The runtime seam: everything Flume takes from async-std goes through here
//! (spawning, TCP, timers, blocking work). Moving to smol or another runtime
//! is a change to this file only; the rest of the code uses `futures` and
//! `async-channel`.
//!
//! TCP sockets are async-io's `Async` (the reactor under async-std and smol)
//! wrapped in [`TcpStream`] and [`TcpListener`], so that a read can wait for
//! readiness before touching the socket: see [`TcpStream::read_ready`].

use std::future::Future;
use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_io::Async;

pub mod heap;
pub mod local;
pub mod spin;
pub use spin::{BusyPoll, SpinBudget};

/// Whether a read that failed with `e` found nothing (or was interrupted) and may simply be tried again.
pub fn retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// A TCP connection; clones share the socket (one task reads while another writes).
#[derive(Clone, Debug)]
pub struct TcpStream(Arc<Async<std::net::TcpStream>>);

/// Resolves `addr` ("host:port"); names are looked up off the executor threads.
async fn resolve(addr: &str) -> io::Result<Vec<SocketAddr>> {
    if let Ok(a) = addr.parse::<SocketAddr>() {
        return Ok(vec![a]);
    }
    let owned = addr.to_owned();
    let addrs: Vec<SocketAddr> = unblock(move || owned.to_socket_addrs()).await?.collect();
    if addrs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{addr} resolves to no address"),
        ));
    }
    Ok(addrs)
}

impl TcpStream {
    /// Connects to `addr` ("host:port"), trying each address it resolves to.
    ///
    /// # Errors
    /// Resolution or connection errors (the last one when every address fails).
    pub async fn connect(addr: &str) -> io::Result<TcpStream> {
        let mut last = None;
        for a in resolve(addr).await? {
            match Async::<std::net::TcpStream>::connect(a).await {
                Ok(s) => return Ok(TcpStream(Arc::new(s))),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::ErrorKind::AddrNotAvailable.into()))
    }

    /// Sets `TCP_NODELAY`.
    ///
    /// # Errors
    /// The socket option could not be set.
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.0.get_ref().set_nodelay(on)
    }

    /// Shuts down one or both directions of the connection.
    ///
    /// # Errors
    /// The socket is not connected.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.0.get_ref().shutdown(how)
    }

    /// The peer's address.
    ///
    /// # Errors
    /// The socket is not connected.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.0.get_ref().peer_addr()
    }

    /// Reads what has arrived without waiting: `WouldBlock` when nothing has.
    ///
    /// # Errors
    /// `WouldBlock`, or I/O errors from the socket.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut socket: &std::net::TcpStream = self.0.get_ref();
        socket.read(buf)
    }

    /// Tries to read for up to `budget`, never parking the thread. It yields to
    /// the other tasks of this thread first (a peer served by the same thread
    /// then answers before the first read) and every 16th attempt after that
    /// (a yield can cost a poll of the reactor), then also the CPU to the
    /// other threads on it (`sched_yield`: the reactor thread must not wait
    /// for the spinner's time slice), spinning in between. `None` when
    /// nothing arrived in time. Cancel safe.
    pub async fn read_spinning(
        &self,
        buf: &mut [u8],
        budget: Duration,
    ) -> Option<io::Result<usize>> {
        let start = std::time::Instant::now();
        let mut attempt: u32 = 0;
        loop {
            if attempt.is_multiple_of(16) {
                yield_now().await;
                if attempt > 0 {
                    // And to the other threads on this CPU: the reactor thread
                    // that wakes this process's other connections must not
                    // wait for the spin to end (the executor polls the reactor
                    // itself only every few hundred tasks).
                    std::thread::yield_now();
                }
            } else {
                std::hint::spin_loop();
            }
            attempt = attempt.wrapping_add(1);
            match self.try_read(buf) {
                Err(e) if retry(&e) => {}
                r => return Some(r),
            }
            if start.elapsed() >= budget {
                return None;
            }
        }
    }

    /// Waits until the socket is readable (or has failed), without reading.
    /// Any number of tasks may wait at once; each is woken. Readiness is
    /// re-armed level-triggered, so bytes that arrived before the call are seen.
    /// Cancel safe.
    ///
    /// # Errors
    /// I/O errors from the reactor.
    pub async fn readable(&self) -> io::Result<()> {
        self.0.readable().await
    }

    /// Reads what has arrived, waiting until something has. Unlike a plain
    /// read it waits for the reactor's readiness event first and only then reads,
    /// so it never spends a syscall on a socket it already knows to be empty.
    /// Use it when the previous read came back short of the buffer (the socket
    /// was drained then): on a request/response connection that saves one
    /// failed read per message on each side. Cancel safe.
    ///
    /// # Errors
    /// I/O errors from the socket.
    pub async fn read_ready(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            self.0.readable().await?;
            match self.try_read(buf) {
                Err(e) if retry(&e) => continue,
                r => return r,
            }
        }
    }
}

impl futures::io::AsyncRead for &TcpStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut &*self.0).poll_read(cx, buf)
    }
}

impl futures::io::AsyncWrite for &TcpStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut &*self.0).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut &*self.0).poll_flush(cx)
    }
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut &*self.0).poll_close(cx)
    }
}

impl futures::io::AsyncRead for TcpStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut &*self).poll_read(cx, buf)
    }
}

impl futures::io::AsyncWrite for TcpStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut &*self).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut &*self).poll_flush(cx)
    }
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut &*self).poll_close(cx)
    }
}

/// A listening TCP socket.
#[derive(Debug)]
pub struct TcpListener(Async<std::net::TcpListener>);

impl TcpListener {
    /// Binds `addr` ("host:port"; port 0 picks a free port).
    ///
    /// # Errors
    /// Resolution errors, or the address cannot be bound.
    pub async fn bind(addr: &str) -> io::Result<TcpListener> {
        let mut last = None;
        for a in resolve(addr).await? {
            match Async::<std::net::TcpListener>::bind(a) {
                Ok(l) => return Ok(TcpListener(l)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::ErrorKind::AddrNotAvailable.into()))
    }

    /// The bound address.
    ///
    /// # Errors
    /// The socket cannot report it.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.get_ref().local_addr()
    }

    /// Waits for the next connection.
    ///
    /// # Errors
    /// Accept errors (out of file descriptors and the like).
    pub async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let (s, peer) = self.0.accept().await?;
        Ok((TcpStream(Arc::new(s)), peer))
    }
}

/// A spawned task; dropping it detaches the task, [`Task::cancel`] stops it.
#[derive(Debug)]
pub struct Task<T>(async_std::task::JoinHandle<T>);

impl<T> Task<T> {
    /// Stops the task and waits until it is gone.
    pub async fn cancel(self) -> Option<T> {
        self.0.cancel().await
    }
}

impl<T> Future for Task<T> {
    type Output = T;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<T> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

/// Spawns a task on the executor.
pub fn spawn<F>(fut: F) -> Task<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Task(async_std::task::spawn(fut))
}

/// Runs blocking work (file I/O, fsync) off the executor threads.
pub async fn unblock<F, T>(f: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    async_std::task::spawn_blocking(f).await
}

/// Runs a future to completion on the current thread.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    async_std::task::block_on(fut)
}

/// Waits for `d`.
pub async fn sleep(d: Duration) {
    async_std::task::sleep(d).await;
}

/// The granularity of [`sleep_coarse`]: long waits end on a multiple of
/// this since the process started.
pub const COARSE_TICK: Duration = Duration::from_millis(8);

/// Waits that last at least this long are rounded by [`sleep_coarse`].
pub const COARSE_FROM: Duration = Duration::from_millis(100);

/// When a wait of `d` that starts at `now` ends under [`sleep_coarse`]: `d`
/// under [`COARSE_FROM`] exactly, a longer one rounded up to the next
/// [`COARSE_TICK`] boundary counted from `epoch` (so at most one tick late).
pub fn coarse_deadline(epoch: Instant, now: Instant, d: Duration) -> Instant {
    let end = now + d;
    if d < COARSE_FROM {
        return end;
    }
    let since = end.saturating_duration_since(epoch).as_nanos();
    let tick = COARSE_TICK.as_nanos();
    let rounded = since.div_ceil(tick) * tick;
    let extra = u64::try_from(rounded - since).unwrap_or(0);
    end + Duration::from_nanos(extra)
}

/// Waits for `d`, ending a long wait on a shared tick (see
/// [`coarse_deadline`]): thousands of long polls that time out within the
/// same few milliseconds then wake the timer thread, and the executor,
/// once per tick instead of once each (as Kafka's purgatory does with its
/// timing wheel). For waits whose exact end does not matter: a parked
/// fetch or heartbeat.
pub async fn sleep_coarse(d: Duration) {
    let now = Instant::now();
    sleep(coarse_from_now(now, d).saturating_duration_since(now)).await;
}

/// [`coarse_deadline`] from `now`, on the process's own ticks: for a long
/// poll that sleeps until its deadline in pieces.
pub fn coarse_from_now(now: Instant, d: Duration) -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(|| now);
    coarse_deadline(epoch, now, d)
}

/// Runs `fut` for at most `d`; `None` when the time ran out.
pub async fn timeout<F: Future>(d: Duration, fut: F) -> Option<F::Output> {
    async_std::future::timeout(d, fut).await.ok()
}

/// Yields to other tasks once.
pub async fn yield_now() {
    async_std::task::yield_now().await;
}

/// Writes all of `buf`, failing with `TimedOut` if the peer does not take it
/// within `limit`. See [`write_all_timeout_counted`].
///
/// # Errors
/// I/O errors, or `TimedOut`.
pub async fn write_all_timeout<W>(w: &mut W, buf: &[u8], limit: Duration) -> std::io::Result<()>
where
    W: futures::io::AsyncWrite + Unpin,
{
    let sent = std::sync::atomic::AtomicUsize::new(0);
    write_all_timeout_counted(w, buf, limit, &sent).await
}

/// Writes all of `buf`, failing with `TimedOut` if the peer does not take it
/// within `limit`; `sent` counts the bytes written so far (also when the
/// future is dropped half-way), so the caller knows whether a frame was torn.
/// The bytes are flushed before it returns (a TLS stream's last records).
/// The common case (the socket has room) completes without arming a timer: a
/// timer per write costs a wake-up of the reactor thread, which is most of a
/// small request's latency.
///
/// # Errors
/// I/O errors, or `TimedOut`.
pub async fn write_all_timeout_counted<W>(
    w: &mut W,
    buf: &[u8],
    limit: Duration,
    sent: &std::sync::atomic::AtomicUsize,
) -> std::io::Result<()>
where
    W: futures::io::AsyncWrite + Unpin,
{
    use futures::io::AsyncWriteExt;
    use futures::FutureExt;
    use std::sync::atomic::Ordering;
    let mut pos = 0;
    while pos < buf.len() {
        match w.write(&buf[pos..]).now_or_never() {
            Some(Ok(0)) => return Err(std::io::ErrorKind::WriteZero.into()),
            Some(Ok(n)) => {
                pos += n;
                sent.store(pos, Ordering::Relaxed);
            }
            Some(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Some(Err(e)) => return Err(e),
            None => break,
        }
    }
    // A TLS stream may keep the last records it encrypted until flushed; on
    // plain TCP the flush does nothing.
    if pos == buf.len() {
        if let Some(r) = w.flush().now_or_never() {
            return r;
        }
    }
    let rest = async {
        while pos < buf.len() {
            match w.write(&buf[pos..]).await {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    pos += n;
                    sent.store(pos, Ordering::Relaxed);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        w.flush().await
    };
    match timeout(limit, rest).await {
        Some(r) => r,
        None => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "peer does not read",
        )),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_waits_end_on_a_shared_tick_and_short_ones_exactly() {
        let epoch = Instant::now();
        let ms = Duration::from_millis;
        // Short waits are exact.
        assert_eq!(
            coarse_deadline(epoch, epoch + ms(3), ms(50)),
            epoch + ms(53)
        );
        // Long ones end on the next tick boundary, at most one tick late.
        for start in 0..40u64 {
            let now = epoch + Duration::from_micros(start * 917);
            let end = coarse_deadline(epoch, now, ms(500));
            let late = end - (now + ms(500));
            assert!(late < COARSE_TICK, "{late:?}");
            assert_eq!((end - epoch).as_nanos() % COARSE_TICK.as_nanos(), 0);
        }
        // Two waits that would end within one tick end together.
        assert_eq!(
            coarse_deadline(epoch, epoch + Duration::from_micros(100), ms(500)),
            coarse_deadline(epoch, epoch + Duration::from_micros(3_900), ms(500)),
        );
    }

    use super::*;
    use futures::io::AsyncWriteExt;

    /// Both ends of a loopback connection: (client, server).
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let client = TcpStream::connect(&addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, server)
    }

    /// `read_ready` finds bytes that arrived before it was called (no readiness
    /// event was pending for them), bytes that arrive while it waits, and EOF.
    #[test]
    fn read_ready_sees_early_late_and_eof() {
        block_on(async {
            let (mut client, server) = pair().await;
            let mut buf = [0u8; 16];
            client.write_all(b"early").await.unwrap();
            let n = timeout(Duration::from_secs(10), server.read_ready(&mut buf))
                .await
                .expect("bytes already in the socket are seen")
                .unwrap();
            assert_eq!(&buf[..n], b"early");
            let writer = spawn(async move {
                yield_now().await;
                client.write_all(b"late").await.unwrap();
                client.shutdown(Shutdown::Write).unwrap();
            });
            let n = timeout(Duration::from_secs(10), server.read_ready(&mut buf))
                .await
                .expect("bytes that arrive while waiting are seen")
                .unwrap();
            assert_eq!(&buf[..n], b"late");
            writer.await;
            let n = timeout(Duration::from_secs(10), server.read_ready(&mut buf))
                .await
                .expect("EOF is seen")
                .unwrap();
            assert_eq!(n, 0);
        });
    }

    /// `read_spinning` gives up after its budget when nothing comes, and
    /// returns what is there (and EOF) at once.
    #[test]
    fn read_spinning_gives_up_or_returns_what_is_there() {
        block_on(async {
            let (mut client, server) = pair().await;
            let mut buf = [0u8; 16];
            let t = std::time::Instant::now();
            assert!(server
                .read_spinning(&mut buf, Duration::from_millis(5))
                .await
                .is_none());
            assert!(t.elapsed() >= Duration::from_millis(5));
            client.write_all(b"here").await.unwrap();
            client.shutdown(Shutdown::Write).unwrap();
            let n = server
                .read_spinning(&mut buf, Duration::from_secs(10))
                .await
                .expect("bytes in the socket are read")
                .unwrap();
            assert_eq!(&buf[..n], b"here");
            let eof = server
                .read_spinning(&mut buf, Duration::from_secs(10))
                .await
                .expect("EOF is read")
                .unwrap();
            assert_eq!(eof, 0);
        });
    }
}

/// Small synchronisation helpers shared by the broker and the client.
///
/// They live in the runtime seam because both sides already depend on it and
/// because [`TaskSlot`] holds this crate's [`Task`]; neither helper names
/// async-std.
pub mod sync {
    use std::sync::{Mutex, MutexGuard, PoisonError};

    use super::Task;

    /// Locks `m`, ignoring poisoning: every critical section in Flume leaves
    /// its data consistent before anything that can panic, so a panic in
    /// another thread is no reason to fail this one.
    pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        m.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A background task that is joined at most once: `join` takes it out
    /// and awaits it, so a second `join` (or one racing a `close`) returns
    /// `None` at once instead of awaiting a task twice.
    #[derive(Debug)]
    pub struct TaskSlot<T>(Mutex<Option<Task<T>>>);

    impl<T> Default for TaskSlot<T> {
        fn default() -> Self {
            TaskSlot(Mutex::new(None))
        }
    }

    impl<T> TaskSlot<T> {
        /// A slot holding `task`.
        pub fn new(task: Task<T>) -> Self {
            TaskSlot(Mutex::new(Some(task)))
        }

        /// Puts `task` in the slot; a task already there is detached.
        pub fn set(&self, task: Task<T>) {
            *lock(&self.0) = Some(task);
        }

        /// Takes the task out (the slot is empty afterwards) and waits for it
        /// to finish; `None` when the slot was empty.
        pub async fn join(&self) -> Option<T> {
            let task = lock(&self.0).take();
            match task {
                Some(t) => Some(t.await),
                None => None,
            }
        }

        /// Takes the task out and stops it; `None` when the slot was empty or
        /// the task was stopped before it finished.
        pub async fn cancel(&self) -> Option<T> {
            let task = lock(&self.0).take();
            match task {
                Some(t) => t.cancel().await,
                None => None,
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_task_slot_joins_its_task_once() {
            crate::block_on(async {
                let slot = TaskSlot::new(crate::spawn(async { 7 }));
                assert_eq!(slot.join().await, Some(7));
                assert_eq!(slot.join().await, None);
                slot.set(crate::spawn(async { 8 }));
                assert_eq!(slot.join().await, Some(8));
            });
        }

        #[test]
        fn lock_ignores_poisoning() {
            let m = std::sync::Arc::new(Mutex::new(1));
            let m2 = std::sync::Arc::clone(&m);
            let _ = std::thread::spawn(move || {
                let _g = m2.lock();
                panic!("poison it");
            })
            .join();
            assert!(m.is_poisoned());
            *lock(&m) += 1;
            assert_eq!(*lock(&m), 2);
        }
    }
}

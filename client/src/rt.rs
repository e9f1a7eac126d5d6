//! The runtime seam: everything Flume takes from async-std goes through here
//! (spawning, TCP, timers, blocking work). Moving to smol or another runtime
//! is a change to this file only; the rest of the code uses `futures` and
//! `async-channel`.

use std::future::Future;
use std::time::Duration;

pub use async_std::net::{TcpListener, TcpStream};

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

/// Runs `fut` for at most `d`; `None` when the time ran out.
pub async fn timeout<F: Future>(d: Duration, fut: F) -> Option<F::Output> {
    async_std::future::timeout(d, fut).await.ok()
}

/// Yields to other tasks once.
pub async fn yield_now() {
    async_std::task::yield_now().await;
}

/// Writes all of `buf`, failing with `TimedOut` if the peer does not take it
/// within `limit`. The common case (the socket has room) completes without
/// arming a timer: a timer per write costs a wake-up of the reactor thread,
/// which is most of a small request's latency.
///
/// # Errors
/// I/O errors, or `TimedOut`.
pub async fn write_all_timeout<W>(w: &mut W, buf: &[u8], limit: Duration) -> std::io::Result<()>
where
    W: futures::io::AsyncWrite + Unpin,
{
    use futures::io::AsyncWriteExt;
    use futures::FutureExt;
    let mut pos = 0;
    while pos < buf.len() {
        match w.write(&buf[pos..]).now_or_never() {
            Some(Ok(0)) => return Err(std::io::ErrorKind::WriteZero.into()),
            Some(Ok(n)) => pos += n,
            Some(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Some(Err(e)) => return Err(e),
            None => break,
        }
    }
    if pos == buf.len() {
        return Ok(());
    }
    match timeout(limit, w.write_all(&buf[pos..])).await {
        Some(r) => r,
        None => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "peer does not read",
        )),
    }
}

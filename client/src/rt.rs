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

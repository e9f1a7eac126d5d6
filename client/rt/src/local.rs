//! In-process connections: a byte stream between two tasks of one process,
//! with the shape of [`crate::TcpStream`] but no socket, no kernel and no port.
//!
//! A broker in the same process registers a [`LocalListener`] under a name in
//! a process-wide table; a client [`connect`]s to `inproc://<name>` and gets
//! a [`LocalStream`] whose other end the listener accepts. Both ends then run
//! exactly the code they run over TCP (framing, the connection's state
//! machine, authentication), so an application written against a broker's
//! address runs unchanged against a broker in its own process.
//!
//! Each direction is a bounded pipe of [`PIPE_BYTES`]: a writer that finds it
//! full waits until the reader has taken some (as TCP's window makes it
//! wait); the listener's queue of connections not yet accepted holds
//! [`BACKLOG`], and a `connect` past it waits. Dropping every clone of one end
//! is a close: the other end reads EOF and its writes fail with `BrokenPipe`.
//!
//! Why not a pipe crate: the client's connection reads through a shared
//! reference without waiting ([`LocalStream::try_read`]), lets any number of
//! tasks wait for readability ([`LocalStream::readable`]) and writes through
//! `&LocalStream`, as it does on a socket; the pipes on crates.io hand out
//! `&mut` halves with one waiter each.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read};
use std::net::Shutdown;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};

use futures::io::{AsyncRead, AsyncWrite};

/// The address scheme of in-process listeners: `inproc://<name>`.
pub const SCHEME: &str = "inproc://";

/// Bytes one direction of a [`LocalStream`] holds before its writer waits.
pub const PIPE_BYTES: usize = 256 * 1024;

/// Connections a [`LocalListener`] holds before they are accepted; a
/// [`connect`] past it waits.
pub const BACKLOG: usize = 128;

/// Whether `addr` names an in-process listener (`inproc://...`).
pub fn is_local(addr: &str) -> bool {
    addr.starts_with(SCHEME)
}

/// One direction: bytes written and not yet read, bounded by `cap`.
struct PipeState {
    buf: VecDeque<u8>,
    cap: usize,
    /// The writing end is gone or shut down: the reader gets EOF once `buf` is empty.
    write_closed: bool,
    /// The reading end is gone: writes fail.
    read_closed: bool,
    /// Tasks waiting for bytes (or EOF).
    readers: Vec<Waker>,
    /// Tasks waiting for room.
    writers: Vec<Waker>,
}

struct Pipe(Mutex<PipeState>);

fn register(wakers: &mut Vec<Waker>, w: &Waker) {
    if !wakers.iter().any(|x| x.will_wake(w)) {
        wakers.push(w.clone());
    }
}

fn wake(wakers: &mut Vec<Waker>) {
    for w in wakers.drain(..) {
        w.wake();
    }
}

impl Pipe {
    fn new(cap: usize) -> Arc<Pipe> {
        Arc::new(Pipe(Mutex::new(PipeState {
            buf: VecDeque::new(),
            cap,
            write_closed: false,
            read_closed: false,
            readers: Vec::new(),
            writers: Vec::new(),
        })))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, PipeState> {
        // A panic while holding the lock cannot leave the pipe inconsistent
        // (every change is a single VecDeque call or a flag): keep going.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads what is there; `WouldBlock` when nothing is (and the writer is
    /// still open), registering `cx`'s waker when given.
    fn read(&self, out: &mut [u8], cx: Option<&mut Context<'_>>) -> io::Result<usize> {
        let mut st = self.state();
        if out.is_empty() {
            return Ok(0);
        }
        if st.buf.is_empty() {
            if st.write_closed {
                return Ok(0);
            }
            if let Some(cx) = cx {
                register(&mut st.readers, cx.waker());
            }
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = st.buf.read(out)?;
        wake(&mut st.writers);
        Ok(n)
    }

    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut st = self.state();
        if !st.buf.is_empty() || st.write_closed {
            return Poll::Ready(());
        }
        register(&mut st.readers, cx.waker());
        Poll::Pending
    }

    fn poll_write(&self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let mut st = self.state();
        if st.read_closed {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the in-process peer closed the connection",
            )));
        }
        if st.write_closed {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "this end was shut down for writing",
            )));
        }
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let room = st.cap.saturating_sub(st.buf.len());
        if room == 0 {
            register(&mut st.writers, cx.waker());
            return Poll::Pending;
        }
        let n = room.min(data.len());
        st.buf.extend(&data[..n]);
        wake(&mut st.readers);
        Poll::Ready(Ok(n))
    }

    fn close_write(&self) {
        let mut st = self.state();
        st.write_closed = true;
        wake(&mut st.readers);
    }

    fn close_read(&self) {
        let mut st = self.state();
        st.read_closed = true;
        st.buf = VecDeque::new();
        wake(&mut st.writers);
    }
}

/// One end's two directions; dropping the last clone of an end closes both.
struct End {
    rx: Arc<Pipe>,
    tx: Arc<Pipe>,
}

impl Drop for End {
    fn drop(&mut self) {
        self.rx.close_read();
        self.tx.close_write();
    }
}

/// One end of an in-process connection; clones share it (one task reads
/// while another writes), as [`crate::TcpStream`]'s do.
#[derive(Clone)]
pub struct LocalStream(Arc<End>);

impl std::fmt::Debug for LocalStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LocalStream")
    }
}

/// A connected pair of in-process streams, each buffering `cap` bytes per
/// direction.
pub fn pair(cap: usize) -> (LocalStream, LocalStream) {
    let (a, b) = (Pipe::new(cap), Pipe::new(cap));
    (
        LocalStream(Arc::new(End {
            rx: Arc::clone(&a),
            tx: Arc::clone(&b),
        })),
        LocalStream(Arc::new(End { rx: b, tx: a })),
    )
}

impl LocalStream {
    /// Reads what has arrived without waiting: `WouldBlock` when nothing
    /// has, `Ok(0)` once the peer has closed and everything was read.
    ///
    /// # Errors
    /// `WouldBlock` when there is nothing to read yet.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.rx.read(buf, None)
    }

    /// Waits until a read would not block (bytes, or the peer's close). Any
    /// number of tasks may wait at once; all are woken.
    ///
    /// # Errors
    /// None today; the signature matches [`crate::TcpStream::readable`].
    pub async fn readable(&self) -> io::Result<()> {
        futures::future::poll_fn(|cx| self.0.rx.poll_readable(cx)).await;
        Ok(())
    }

    /// Shuts down writing (the peer reads EOF), reading (the peer's writes
    /// fail) or both, as a socket's `shutdown` does.
    ///
    /// # Errors
    /// None today; the signature matches [`crate::TcpStream::shutdown`].
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        if matches!(how, Shutdown::Write | Shutdown::Both) {
            self.0.tx.close_write();
        }
        if matches!(how, Shutdown::Read | Shutdown::Both) {
            self.0.rx.close_read();
        }
        Ok(())
    }
}

impl AsyncRead for &LocalStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.0.rx.read(buf, Some(cx)) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
            r => Poll::Ready(r),
        }
    }
}

impl AsyncRead for LocalStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut &*self).poll_read(cx, buf)
    }
}

impl AsyncWrite for &LocalStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.0.tx.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.tx.close_write();
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for LocalStream {
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

type Table = Mutex<HashMap<String, async_channel::Sender<LocalStream>>>;

fn table() -> std::sync::MutexGuard<'static, HashMap<String, async_channel::Sender<LocalStream>>> {
    static LISTENERS: OnceLock<Table> = OnceLock::new();
    LISTENERS
        .get_or_init(Table::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// A name in this process that in-process connections reach; dropping it
/// frees the name, and connections not yet accepted are closed.
pub struct LocalListener {
    name: String,
    incoming: async_channel::Receiver<LocalStream>,
    registered: async_channel::Sender<LocalStream>,
}

impl std::fmt::Debug for LocalListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalListener")
            .field("name", &self.name)
            .finish()
    }
}

impl LocalListener {
    /// Registers `name` (with or without the `inproc://` scheme).
    ///
    /// # Errors
    /// `AddrInUse` when another listener of this process holds the name;
    /// `InvalidInput` for an empty name.
    pub fn bind(name: &str) -> io::Result<LocalListener> {
        let name = name.strip_prefix(SCHEME).unwrap_or(name);
        if name.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an in-process listener needs a name (inproc://NAME)",
            ));
        }
        let mut table = table();
        if table.get(name).is_some_and(|s| !s.is_closed()) {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{SCHEME}{name} is already in use in this process"),
            ));
        }
        let (tx, rx) = async_channel::bounded(BACKLOG);
        table.insert(name.to_owned(), tx.clone());
        Ok(LocalListener {
            name: name.to_owned(),
            incoming: rx,
            registered: tx,
        })
    }

    /// Registers a name of its own: `<prefix>-<pid>-<n>`, unique in the process.
    pub fn bind_unique(prefix: &str) -> LocalListener {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let name = format!("{prefix}-{}-{n}", std::process::id());
            if let Ok(l) = LocalListener::bind(&name) {
                return l;
            }
        }
    }

    /// The address clients connect to: `inproc://<name>`.
    pub fn address(&self) -> String {
        format!("{SCHEME}{}", self.name)
    }

    /// The next connection.
    ///
    /// # Errors
    /// None while the listener exists (the table keeps a sender).
    pub async fn accept(&self) -> io::Result<LocalStream> {
        self.incoming
            .recv()
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::NotConnected, "listener closed"))
    }
}

impl Drop for LocalListener {
    fn drop(&mut self) {
        self.incoming.close();
        let mut table = table();
        if table
            .get(&self.name)
            .is_some_and(|s| s.same_channel(&self.registered))
        {
            table.remove(&self.name);
        }
    }
}

/// Connects to the in-process listener `addr` (`inproc://<name>`, or the
/// bare name), waiting while its backlog is full.
///
/// # Errors
/// `ConnectionRefused` when no listener of this process has the name (or it
/// closed meanwhile).
pub async fn connect(addr: &str) -> io::Result<LocalStream> {
    let name = addr.strip_prefix(SCHEME).unwrap_or(addr);
    let refused = || {
        io::Error::new(
            io::ErrorKind::ConnectionRefused,
            format!("no in-process broker is listening on {SCHEME}{name} in this process"),
        )
    };
    let sender = table().get(name).cloned().ok_or_else(refused)?;
    let (ours, theirs) = pair(PIPE_BYTES);
    sender.send(theirs).await.map_err(|_| refused())?;
    Ok(ours)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn bytes_flow_both_ways_and_a_drop_is_eof_then_broken_pipe() {
        futures::executor::block_on(async {
            let (a, b) = pair(16);
            (&a).write_all(b"hello").await.unwrap();
            let mut buf = [0u8; 8];
            assert_eq!((&b).read(&mut buf).await.unwrap(), 5);
            assert_eq!(&buf[..5], b"hello");
            assert_eq!(
                b.try_read(&mut buf).unwrap_err().kind(),
                io::ErrorKind::WouldBlock
            );
            (&b).write_all(b"back").await.unwrap();
            drop(b);
            let mut got = Vec::new();
            (&a).read_to_end(&mut got).await.unwrap();
            assert_eq!(got, b"back");
            let e = (&a).write_all(b"x").await.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
        });
    }

    #[test]
    fn a_full_pipe_takes_what_fits_and_the_writer_waits_for_the_reader() {
        futures::executor::block_on(async {
            let (a, b) = pair(4);
            let waker = futures::task::noop_waker();
            let mut cx = Context::from_waker(&waker);
            assert!(matches!(
                Pin::new(&mut &a).poll_write(&mut cx, b"abcdef"),
                Poll::Ready(Ok(4))
            ));
            assert!(Pin::new(&mut &a).poll_write(&mut cx, b"ef").is_pending());
            let mut buf = [0u8; 3];
            assert_eq!(b.try_read(&mut buf).unwrap(), 3);
            assert!(matches!(
                Pin::new(&mut &a).poll_write(&mut cx, b"ef"),
                Poll::Ready(Ok(2))
            ));
            let mut rest = [0u8; 8];
            assert_eq!(b.try_read(&mut rest).unwrap(), 3);
            assert_eq!(&rest[..3], b"def");
        });
    }

    #[test]
    fn every_waiter_for_readability_is_woken() {
        futures::executor::block_on(async {
            let (a, b) = pair(64);
            let waiters = futures::future::join3(b.readable(), b.readable(), async {
                (&a).write_all(b"x").await.unwrap();
            });
            let (r1, r2, ()) = waiters.await;
            assert!(r1.is_ok() && r2.is_ok());
        });
    }

    #[test]
    fn a_listener_accepts_by_name_frees_it_when_dropped_and_refuses_a_second_bind() {
        futures::executor::block_on(async {
            let l = LocalListener::bind_unique("test");
            let addr = l.address();
            assert!(is_local(&addr));
            assert_eq!(
                LocalListener::bind(&addr).unwrap_err().kind(),
                io::ErrorKind::AddrInUse
            );
            let c = connect(&addr).await.unwrap();
            let s = l.accept().await.unwrap();
            (&c).write_all(b"ping").await.unwrap();
            let mut buf = [0u8; 4];
            (&s).read_exact(&mut buf).await.unwrap();
            assert_eq!(&buf, b"ping");
            drop(l);
            assert_eq!(
                connect(&addr).await.unwrap_err().kind(),
                io::ErrorKind::ConnectionRefused
            );
            assert!(LocalListener::bind(&addr).is_ok());
        });
    }
}

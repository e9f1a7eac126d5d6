//! TLS for the client's connections (rustls, ring provider, TLS 1.2+).
//!
//! The connection in `conn` reads without a reader task: whichever caller is
//! waiting does a non-blocking read and hands out what it found. TLS keeps
//! that shape: the handshake runs with futures-rustls, and then the session
//! ([`rustls::ClientConnection`]) sits behind a mutex beside the socket;
//! [`Socket::try_read`] reads ciphertext without waiting and returns
//! plaintext, and [`SocketWriter`] encrypts and writes. A read that comes back
//! short of its buffer has drained both rustls and the socket, so waiting for
//! the socket to become readable is right afterwards, as on plain TCP.

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::io::AsyncWrite;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

use crate::error::Error;
use flume_rt as rt;
use flume_rt::sync::lock;

/// TLS settings of a connection: start from [`TlsConfig::new`] (the server
/// is verified against the system's trust store, under the host name of the
/// broker address) and change what you need.
///
/// ```
/// let tls = flume_client::TlsConfig::new()
///     .ca_file("ca.pem")
///     .client_cert("client.pem", "client.key")
///     .server_name("broker.example.com");
/// let config = flume_client::ConnectionConfig::default().tls(tls);
/// # let _ = config;
/// ```
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct TlsConfig {
    /// CA certificates (PEM) the broker's certificate must chain to; `None`:
    /// the system's trust store.
    pub ca_file: Option<PathBuf>,
    /// A client certificate chain (PEM) for brokers that ask for one (mTLS).
    pub client_cert: Option<PathBuf>,
    /// The private key (PEM) of `client_cert`.
    pub client_key: Option<PathBuf>,
    /// The name the broker's certificate must carry; by default the host of
    /// the address connected to (a DNS name or an IP address).
    pub server_name: Option<String>,
    /// The rustls config made from the files on first use, shared by clones.
    loaded: Arc<Mutex<Option<Arc<ClientConfig>>>>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("ca_file", &self.ca_file)
            .field("client_cert", &self.client_cert)
            .field("client_key", &self.client_key)
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl TlsConfig {
    /// TLS verifying the broker against the system's trust store.
    pub fn new() -> Self {
        TlsConfig::default()
    }

    fn changed(mut self) -> Self {
        self.loaded = Arc::default();
        self
    }

    /// Sets [`TlsConfig::ca_file`].
    #[must_use]
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self.changed()
    }

    /// Sets [`TlsConfig::client_cert`] and [`TlsConfig::client_key`].
    #[must_use]
    pub fn client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.client_cert = Some(cert.into());
        self.client_key = Some(key.into());
        self.changed()
    }

    /// Sets [`TlsConfig::server_name`].
    #[must_use]
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// The rustls config, read from the files once (off the executor).
    async fn rustls(&self) -> Result<Arc<ClientConfig>, String> {
        if let Some(c) = lock(&self.loaded).as_ref() {
            return Ok(Arc::clone(c));
        }
        let this = self.clone();
        let built = Arc::new(rt::unblock(move || this.build()).await?);
        *lock(&self.loaded) = Some(Arc::clone(&built));
        Ok(built)
    }

    fn build(&self) -> Result<ClientConfig, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        match &self.ca_file {
            Some(path) => {
                for c in read_certs("CA file", path)? {
                    roots
                        .add(c)
                        .map_err(|e| format!("CA file {}: {e}", path.display()))?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                let (added, _) = roots.add_parsable_certificates(found.certs);
                if added == 0 {
                    return Err(
                        "no CA file given and no certificate in the system's trust store".into(),
                    );
                }
            }
        }
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
        match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => {
                let certs = read_certs("client certificate", cert)?;
                let pem = std::fs::read(key)
                    .map_err(|e| format!("cannot read client key {}: {e}", key.display()))?;
                let key = PrivateKeyDer::from_pem_slice(&pem)
                    .map_err(|e| format!("client key {}: {e}", key.display()))?;
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| format!("client certificate refused: {e}"))
            }
            (None, None) => Ok(builder.with_no_client_auth()),
            _ => Err("a client certificate needs its key, and a key its certificate".into()),
        }
    }
}

fn read_certs(what: &str, path: &std::path::Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem =
        std::fs::read(path).map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{what} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{what} {}: no CERTIFICATE in the file",
            path.display()
        ));
    }
    Ok(certs)
}

/// The host part of "host:port" ("[::1]:9092" gives "::1").
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// Opens a connection to `addr`: TCP with no delay, then TLS when `tls` is
/// given, both within `timeout` (Flume's and the Kafka client's connections).
///
/// # Errors
/// [`Error::Connect`] (refused, unreachable, timed out), [`Error::Tls`].
pub(crate) async fn open(
    addr: &str,
    timeout: std::time::Duration,
    tls: Option<&TlsConfig>,
) -> Result<Socket, Error> {
    let connect_err = |e: io::Error| Error::Connect {
        addr: addr.to_owned(),
        reason: Arc::new(e),
    };
    let timed_out = |what: &str| {
        connect_err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{what} timed out"),
        ))
    };
    if rt::local::is_local(addr) {
        // A broker in this process: its bytes never leave the process, so TLS
        // settings have nothing to protect and are not used.
        return rt::timeout(timeout, rt::local::connect(addr))
            .await
            .ok_or_else(|| timed_out("connect"))?
            .map(Socket::Local)
            .map_err(connect_err);
    }
    let started = std::time::Instant::now();
    let tcp = rt::timeout(timeout, rt::TcpStream::connect(addr))
        .await
        .ok_or_else(|| timed_out("connect"))?
        .map_err(connect_err)?;
    tcp.set_nodelay(true).map_err(connect_err)?;
    match tls {
        None => Ok(Socket::Plain(tcp)),
        Some(tls) => {
            let left = timeout.saturating_sub(started.elapsed());
            rt::timeout(left, connect(tls, addr, tcp))
                .await
                .ok_or_else(|| timed_out("TLS handshake"))?
        }
    }
}

/// Runs the client side of the handshake on `tcp` (the caller bounds it
/// with the connect timeout).
///
/// # Errors
/// [`Error::Tls`] when the files are unusable or the broker's certificate is
/// refused (or it refuses ours); [`Error::Connect`] when the connection
/// fails during the handshake.
pub(crate) async fn connect(
    tls: &TlsConfig,
    addr: &str,
    tcp: rt::TcpStream,
) -> Result<Socket, Error> {
    let tls_err = |reason: String| Error::Tls {
        addr: addr.to_owned(),
        reason,
    };
    let config = tls.rustls().await.map_err(tls_err)?;
    let name = tls.server_name.as_deref().unwrap_or_else(|| host_of(addr));
    let name = ServerName::try_from(name.to_owned())
        .map_err(|e| tls_err(format!("server name {name:?}: {e}")))?;
    let connector = futures_rustls::TlsConnector::from(config);
    let stream = connector.connect(name, tcp).await.map_err(|e| {
        if e.kind() == io::ErrorKind::InvalidData {
            tls_err(e.to_string())
        } else if e.kind() == io::ErrorKind::UnexpectedEof {
            tls_err(
                "the broker closed the connection during the TLS handshake (is its port TLS?)"
                    .into(),
            )
        } else {
            Error::Connect {
                addr: addr.to_owned(),
                reason: Arc::new(e),
            }
        }
    })?;
    let (tcp, conn) = stream.into_inner();
    Ok(Socket::Tls(Arc::new(TlsSocket {
        tcp,
        session: Mutex::new(conn),
    })))
}

/// A TLS session over a socket.
pub(crate) struct TlsSocket {
    tcp: rt::TcpStream,
    /// Locked only inside one non-blocking read or write, never across an `.await`.
    session: Mutex<ClientConnection>,
}

/// The socket of a connection: plain TCP, TLS, or an in-process stream to a
/// broker in the same process (`inproc://...`, [`rt::local`]). Both
/// transports' connections (`crate::flume::conn`, `crate::kafka::conn`) use a
/// socket only through its methods: [`Socket::try_read`] (a read that never
/// waits), [`Socket::readable`], [`Socket::shutdown`] and [`Socket::writer`]
/// (an `AsyncWrite`).
#[derive(Clone)]
pub(crate) enum Socket {
    Plain(rt::TcpStream),
    Tls(Arc<TlsSocket>),
    Local(rt::local::LocalStream),
}

/// `std::io::Read` over a non-blocking socket read.
struct TryRead<'a>(&'a rt::TcpStream);
impl Read for TryRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

/// `std::io::Write` over one poll of the socket's write: `WouldBlock` when it is full.
struct PollWrite<'a, 'b>(&'a rt::TcpStream, &'a mut Context<'b>);
impl Write for PollWrite<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match Pin::new(&mut &*self.0).poll_write(self.1, buf) {
            Poll::Ready(r) => r,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes what the session has encrypted; `Pending` (with `cx` woken when
/// the socket has room) while some is left.
fn flush_session(
    session: &mut ClientConnection,
    tcp: &rt::TcpStream,
    cx: &mut Context<'_>,
) -> Poll<io::Result<()>> {
    while session.wants_write() {
        match session.write_tls(&mut PollWrite(tcp, cx)) {
            Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
    Poll::Ready(Ok(()))
}

impl Socket {
    /// Reads what has arrived without waiting: `WouldBlock` when nothing has,
    /// `Ok(0)` at the end of the stream. Over TLS, a read shorter than `buf`
    /// means the socket had nothing more.
    pub(crate) fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Plain(s) => s.try_read(buf),
            Socket::Tls(t) => t.try_read(buf),
            Socket::Local(s) => s.try_read(buf),
        }
    }

    /// Waits until the socket is readable.
    pub(crate) async fn readable(&self) -> io::Result<()> {
        match self {
            Socket::Plain(s) => s.readable().await,
            Socket::Tls(t) => t.tcp.readable().await,
            Socket::Local(s) => s.readable().await,
        }
    }

    /// Shuts the socket down.
    pub(crate) fn shutdown(&self, how: std::net::Shutdown) -> io::Result<()> {
        match self {
            Socket::Plain(s) => s.shutdown(how),
            Socket::Tls(t) => t.tcp.shutdown(how),
            Socket::Local(s) => s.shutdown(how),
        }
    }

    /// The write side.
    pub(crate) fn writer(&self) -> SocketWriter {
        SocketWriter(self.clone())
    }
}

impl TlsSocket {
    fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut session = lock(&self.session);
        let mut filled = 0;
        loop {
            match session.reader().read(&mut buf[filled..]) {
                // The broker ended the session (close_notify).
                Ok(0) => return Ok(filled),
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The socket ended without close_notify: an end all the same.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(filled),
                Err(e) => return Err(e),
            }
            if filled == buf.len() {
                return Ok(filled);
            }
            match session.read_tls(&mut TryRead(&self.tcp)) {
                Ok(0) => return Ok(filled),
                Ok(_) => {
                    let processed = session.process_new_packets();
                    if session.wants_write() {
                        // An alert or a key update: sent now if the socket has room.
                        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
                        let _ = flush_session(&mut session, &self.tcp, &mut cx);
                    }
                    if let Err(e) = processed {
                        return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                    }
                }
                Err(e) if rt::retry(&e) && filled > 0 => return Ok(filled),
                Err(e) => return Err(e),
            }
        }
    }
}

/// The write side of a [`Socket`]: over TLS it encrypts into the session and
/// writes the records; `flush` writes what is left.
pub(crate) struct SocketWriter(Socket);

impl AsyncWrite for SocketWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &self.0 {
            Socket::Plain(s) => Pin::new(&mut &*s).poll_write(cx, buf),
            Socket::Local(s) => Pin::new(&mut &*s).poll_write(cx, buf),
            Socket::Tls(t) => {
                let mut session = lock(&t.session);
                // What is encrypted goes out first, so the session's buffer stays small.
                match flush_session(&mut session, &t.tcp, cx) {
                    Poll::Ready(Ok(())) => {}
                    other => return other.map(|r| r.map(|()| 0)),
                }
                let n = session.writer().write(buf)?;
                // Sent now if the socket has room; the rest by the next write or flush.
                if let Poll::Ready(Err(e)) = flush_session(&mut session, &t.tcp, cx) {
                    return Poll::Ready(Err(e));
                }
                Poll::Ready(Ok(n))
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &self.0 {
            Socket::Plain(s) => Pin::new(&mut &*s).poll_flush(cx),
            Socket::Local(s) => Pin::new(&mut &*s).poll_flush(cx),
            Socket::Tls(t) => flush_session(&mut lock(&t.session), &t.tcp, cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &self.0 {
            Socket::Plain(s) => Pin::new(&mut &*s).poll_close(cx),
            Socket::Local(s) => Pin::new(&mut &*s).poll_close(cx),
            Socket::Tls(t) => {
                let mut session = lock(&t.session);
                session.send_close_notify();
                flush_session(&mut session, &t.tcp, cx)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_name_is_the_host_of_the_address() {
        assert_eq!(host_of("localhost:9092"), "localhost");
        assert_eq!(host_of("127.0.0.1:9092"), "127.0.0.1");
        assert_eq!(host_of("[::1]:9092"), "::1");
        assert_eq!(host_of("broker"), "broker");
    }
}

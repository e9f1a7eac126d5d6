//! TLS on the broker's ports (the Flume listener, the Kafka listener, HTTP).
//!
//! rustls with the ring provider, TLS 1.2 and 1.3 only, driven by
//! futures-rustls on the runtime seam's [`TcpStream`] (any futures
//! `AsyncRead + AsyncWrite`), so nothing here names a runtime.
//!
//! - [`ServerTls`] holds the current `rustls::ServerConfig` behind a lock and
//!   the files it came from; [`ServerTls::reload`] reads them again and swaps
//!   the config (SIGHUP in flume-cli). Connections already open keep the
//!   session they negotiated; new handshakes use the new config. A reload
//!   that fails (a missing file, a key that does not match) keeps the old one.
//! - With a client CA, every client must present a certificate signed by it
//!   (mTLS), and the certificate's subject becomes the connection's
//!   [`Principal`].
//! - [`accept`] runs the handshake within a deadline (the broker's
//!   `read_timeout`), before the connection is charged to any request budget.
//! - [`Transport`] is a plain or a TLS stream: the connection loops match on
//!   it, so the plain path stays what it was.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use flume_rt::{self as rt, TcpStream};
use futures::io::{AsyncRead, AsyncWrite};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

use super::Principal;

/// The TLS stream type of an accepted connection.
pub type TlsStream = futures_rustls::server::TlsStream<TcpStream>;

pub use crate::error::TlsError;

/// The files TLS is made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The server's certificate chain (PEM, leaf first).
    pub cert: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates (PEM) that client certificates must chain to; `None`:
    /// clients present none.
    pub client_ca: Option<PathBuf>,
}

/// The server side of TLS, shared by every listener of a broker.
#[derive(Debug)]
pub struct ServerTls {
    files: TlsFiles,
    current: RwLock<Arc<ServerConfig>>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// TLS 1.2 and 1.3: nothing older is offered or accepted.
pub const VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

/// Every certificate in a PEM file; at least one.
///
/// # Errors
/// The file cannot be read, is not PEM, or holds no certificate.
pub fn load_certs(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            what,
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            what,
            path: path.to_owned(),
            reason: "no CERTIFICATE in the file".into(),
        });
    }
    Ok(certs)
}

/// The first private key in a PEM file.
///
/// # Errors
/// The file cannot be read or holds no key.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read("private key", path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::Pem {
        what: "private key",
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

/// A root store of every certificate in a PEM file.
///
/// # Errors
/// As [`load_certs`], or a certificate that is not a usable CA.
pub fn load_roots(what: &'static str, path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for c in load_certs(what, path)? {
        roots.add(c).map_err(|e| TlsError::Pem {
            what,
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    }
    Ok(roots)
}

fn build(files: &TlsFiles) -> Result<ServerConfig, TlsError> {
    let certs = load_certs("certificate", &files.cert)?;
    let key = load_key(&files.key)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(VERSIONS)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match &files.client_ca {
        Some(ca) => {
            let roots = load_roots("client CA", ca)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Config(e.to_string()))
}

impl ServerTls {
    /// Reads `files` and makes the first config.
    ///
    /// # Errors
    /// A file cannot be read or parsed, or rustls refuses what it holds.
    pub fn load(files: TlsFiles) -> Result<Self, TlsError> {
        let config = build(&files)?;
        Ok(ServerTls {
            files,
            current: RwLock::new(Arc::new(config)),
        })
    }

    /// Reads the files again and, if they make a valid config, uses it for
    /// every handshake from now on. Open connections are not touched.
    ///
    /// # Errors
    /// As [`ServerTls::load`]; the config in use stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = Arc::new(build(&self.files)?);
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = config;
        Ok(())
    }

    /// Whether clients must present a certificate.
    pub fn requires_client_cert(&self) -> bool {
        self.files.client_ca.is_some()
    }

    fn acceptor(&self) -> futures_rustls::TlsAcceptor {
        let config = Arc::clone(
            &self
                .current
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        futures_rustls::TlsAcceptor::from(config)
    }
}

/// Runs the server side of a TLS handshake on `stream` within `limit`; the
/// stream and the connection's principal (the client certificate's subject,
/// or anonymous).
///
/// # Errors
/// The handshake fails (a client that does not speak TLS, an untrusted
/// client certificate...) or does not finish within `limit` (`TimedOut`).
pub async fn accept(
    tls: &ServerTls,
    stream: TcpStream,
    limit: Duration,
) -> io::Result<(Transport, Principal)> {
    let acceptor = tls.acceptor();
    let stream = match rt::timeout(limit, acceptor.accept(stream)).await {
        Some(r) => r?,
        None => {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("TLS handshake not complete within {} ms", limit.as_millis()),
            ))
        }
    };
    let principal = match stream.get_ref().1.peer_certificates() {
        Some([leaf, ..]) => Principal::Certificate(subject(leaf).map_err(|reason| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("client certificate: {reason}"),
            )
        })?),
        _ => Principal::Anonymous,
    };
    Ok((Transport::Tls(Box::new(stream)), principal))
}

/// The subject of a DER certificate as RFC 4514 writes a distinguished name
/// (`CN=alice,O=Example`, in the certificate's order).
///
/// # Errors
/// The certificate does not parse, or a name is not a string.
pub fn subject(der: &[u8]) -> Result<String, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
    let registry = x509_parser::objects::oid_registry();
    let mut out = String::new();
    for rdn in cert.subject().iter_rdn() {
        let mut first = true;
        if !out.is_empty() {
            out.push(',');
        }
        for attr in rdn.iter() {
            if !first {
                out.push('+');
            }
            first = false;
            match x509_parser::objects::oid2abbrev(attr.attr_type(), registry) {
                Ok(name) => out.push_str(name),
                Err(_) => out.push_str(&attr.attr_type().to_id_string()),
            }
            out.push('=');
            let value = attr.as_str().map_err(|e| e.to_string())?;
            for (i, ch) in value.chars().enumerate() {
                let special = matches!(ch, ',' | '+' | '"' | '\\' | '<' | '>' | ';' | '=')
                    || (i == 0 && matches!(ch, '#' | ' '))
                    || (i + 1 == value.chars().count() && ch == ' ');
                if special {
                    out.push('\\');
                }
                out.push(ch);
            }
        }
    }
    Ok(out)
}

/// A connection's byte stream: plain TCP, TLS over it, or an in-process
/// stream from a client in the broker's own process ([`flume_rt::local`]).
#[derive(Debug)]
pub enum Transport {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS (boxed: the session state is a few KB).
    Tls(Box<TlsStream>),
    /// In-process: no socket, no TLS.
    Local(flume_rt::local::LocalStream),
}

impl Transport {
    /// Sends small writes at once (`TCP_NODELAY`); nothing to set in-process.
    ///
    /// # Errors
    /// The socket refuses the option.
    pub fn set_nodelay(&self) -> io::Result<()> {
        match self {
            Transport::Plain(s) => s.set_nodelay(true),
            Transport::Tls(t) => t.get_ref().0.set_nodelay(true),
            Transport::Local(_) => Ok(()),
        }
    }

    /// Waits until a read would not block (bytes, EOF or an error on the
    /// socket under the stream).
    ///
    /// # Errors
    /// The socket failed.
    pub async fn readable(&self) -> io::Result<()> {
        match self {
            Transport::Plain(s) => s.readable().await,
            Transport::Tls(t) => t.get_ref().0.readable().await,
            Transport::Local(s) => s.readable().await,
        }
    }
}

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Transport::Tls(t) => Pin::new(&mut **t).poll_read(cx, buf),
            Transport::Local(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Transport::Tls(t) => Pin::new(&mut **t).poll_write(cx, buf),
            Transport::Local(s) => Pin::new(s).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_flush(cx),
            Transport::Tls(t) => Pin::new(&mut **t).poll_flush(cx),
            Transport::Local(s) => Pin::new(s).poll_flush(cx),
        }
    }
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_close(cx),
            Transport::Tls(t) => Pin::new(&mut **t).poll_close(cx),
            Transport::Local(s) => Pin::new(s).poll_close(cx),
        }
    }
}

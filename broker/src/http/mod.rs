//! The HTTP side of the broker: `/metrics` (Prometheus), `/api/overview`
//! (JSON for the dashboard and for scripts), `/healthz` (probes) and the
//! dashboard page at `/`.
//!
//! HTTP/1.1 is served by hyper on the project's runtime: connections come
//! from [`rt::TcpListener`] and reach hyper through smol-hyper's
//! `FuturesIo` adapter (hyper's I/O traits over `futures-io`), timers are
//! async-io's. The listener obeys the same kinds of limits as the broker's:
//! at most [`max_http_connections`] connections (at the limit a new one closes
//! the oldest that is not serving a request, or the oldest, and that is
//! counted: no set of connections keeps a new one out), the request head must arrive within `read_timeout`, a connection
//! lives at most `read_timeout + write_timeout` (so a peer that does not read
//! its response cannot hold it), heads are at most [`MAX_HEAD_BYTES`], and
//! requests with a body are refused (413): every route is a GET.
//!
//! When the broker has TLS, so does this port (HTTPS): the handshake runs in
//! the connection's task within `read_timeout`, inside its lifetime.

mod overview;
pub(crate) mod scrape;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use flume_rt::{self as rt, TcpListener};
use futures::FutureExt;
use http_body_util::Full;
use hyper::body::{Body, Incoming};
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use tracing::Instrument;

use crate::engine::Engine;
use crate::error::BrokerError;
use crate::security::acl::{AclPrincipal, Protocol};
use crate::security::authz::Subject;
use crate::security::tls::ServerTls;
use crate::security::Principal;
pub use overview::{History, HISTORY_INTERVAL};
use scrape::{Probe, Scrape};

/// The dashboard page (HTML, CSS and JavaScript in one file, no external resources).
pub const DASHBOARD_HTML: &str = include_str!("dashboard/index.html");

/// Largest request head (request line and headers) accepted.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Most HTTP connections at once: the broker's connection limit, at most 128
/// (the HTTP side serves a few scrapers and browsers).
pub fn max_http_connections(max_connections: usize) -> usize {
    max_connections.clamp(1, 128)
}

struct State {
    engine: Arc<Engine>,
    probe: Probe,
    history: Mutex<History>,
    open: AtomicUsize,
    /// Every open connection by the order it came in: whether it is serving
    /// a request, and the sender whose drop closes it (at most
    /// [`max_http_connections`] entries).
    conns: Mutex<std::collections::BTreeMap<u64, OpenConn>>,
    next_id: std::sync::atomic::AtomicU64,
}

struct OpenConn {
    busy: Arc<std::sync::atomic::AtomicBool>,
    _close: async_channel::Sender<()>,
}

impl State {
    fn conns(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<u64, OpenConn>> {
        self.conns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// At the limit, makes room for a new connection: closes the oldest one
    /// that is not serving a request, or the oldest if every one is.
    /// False when there is none left to close (each is closing already).
    fn make_room(&self) -> bool {
        let mut conns = self.conns();
        let victim = conns
            .iter()
            .find(|(_, c)| !c.busy.load(Ordering::Acquire))
            .or_else(|| conns.iter().next())
            .map(|(id, _)| *id);
        victim.is_some_and(|id| conns.remove(&id).is_some())
    }
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("open", &self.open)
            .finish_non_exhaustive()
    }
}

/// A running HTTP server; it stops when the broker shuts down.
#[derive(Debug)]
pub struct HttpServer {
    addr: SocketAddr,
    _accept: rt::Task<()>,
    _sampler: rt::Task<()>,
}

impl HttpServer {
    /// Binds `addr` and serves until the engine shuts down, over TLS when
    /// `tls` is set.
    ///
    /// # Errors
    /// The address cannot be bound.
    pub async fn start(
        addr: &str,
        engine: Arc<Engine>,
        probe: Probe,
        tls: Option<Arc<ServerTls>>,
    ) -> Result<Self, BrokerError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| BrokerError::Io {
                what: format!("listen for HTTP on {addr}"),
                source,
            })?;
        let local = listener.local_addr().map_err(|source| BrokerError::Io {
            what: "read the HTTP listening address".into(),
            source,
        })?;
        tracing::info!(addr = %local, "HTTP listening (/metrics, /api/overview, /healthz, dashboard at /)");
        let state = Arc::new(State {
            engine,
            probe,
            history: Mutex::new(History::default()),
            open: AtomicUsize::new(0),
            conns: Mutex::new(std::collections::BTreeMap::new()),
            next_id: std::sync::atomic::AtomicU64::new(0),
        });
        let sampler = rt::spawn(sample_loop(Arc::clone(&state)));
        let accept = rt::spawn(accept_loop(listener, state, tls));
        Ok(HttpServer {
            addr: local,
            _accept: accept,
            _sampler: sampler,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

async fn sample_loop(state: Arc<State>) {
    let stop = state.engine.shutdown_signal();
    loop {
        // Off the executor: it takes the offset store's lock, which a commit
        // holds through its fsync.
        let engine = Arc::clone(&state.engine);
        let sample = rt::unblock(move || overview::sample(&engine)).await;
        state
            .history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(sample);
        futures::select! {
            () = rt::sleep(HISTORY_INTERVAL).fuse() => {}
            _ = stop.recv().fuse() => return,
        }
    }
}

struct Slot(Arc<State>, u64);
impl Drop for Slot {
    fn drop(&mut self) {
        self.0.conns().remove(&self.1);
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>, tls: Option<Arc<ServerTls>>) {
    let stop = state.engine.shutdown_signal();
    let cfg = state.engine.config().clone();
    let max = max_http_connections(cfg.max_connections);
    while let Some((stream, peer)) = crate::net::next_connection(&listener, &stop, "http").await {
        if state.open.load(Ordering::Acquire) >= max {
            // No set of connections keeps a new one out: the oldest idle one
            // (or the oldest) makes room; it ends as soon as its task sees it.
            tracing::info!(%peer, max, "HTTP connection limit reached; closing the oldest idle connection");
            state.engine.metrics().http_connection_refused();
            if !state.make_room() {
                // Every open one is already closing: this one waits for nothing.
                let _ = stream.shutdown(std::net::Shutdown::Both);
                continue;
            }
        }
        state.open.fetch_add(1, Ordering::AcqRel);
        let id = state.next_id.fetch_add(1, Ordering::Relaxed);
        let busy = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (close, closed) = async_channel::bounded::<()>(1);
        state.conns().insert(
            id,
            OpenConn {
                busy: Arc::clone(&busy),
                _close: close,
            },
        );
        let slot = Slot(Arc::clone(&state), id);
        let lifetime = cfg.read_timeout.saturating_add(cfg.write_timeout);
        let head_timeout = cfg.read_timeout;
        let stop = stop.clone();
        let tls = tls.clone();
        rt::spawn(async move {
            let state = Arc::clone(&slot.0);
            let serve = async move {
                let (stream, principal) =
                    match crate::net::secure(tls.as_deref(), stream, head_timeout).await {
                        Ok(x) => x,
                        Err(e) => {
                            tracing::debug!(%peer, error = %e, "HTTP TLS handshake failed");
                            return;
                        }
                    };
                let principal = Arc::new(principal);
                let service = hyper::service::service_fn(move |req| {
                    let state = Arc::clone(&state);
                    let principal = Arc::clone(&principal);
                    let busy = Arc::clone(&busy);
                    async move {
                        busy.store(true, Ordering::Release);
                        let resp = route(&state, &principal, req).await;
                        busy.store(false, Ordering::Release);
                        Ok::<_, Infallible>(resp)
                    }
                });
                let mut builder = hyper::server::conn::http1::Builder::new();
                builder
                    .timer(smol_hyper::rt::SmolTimer::new())
                    .header_read_timeout(head_timeout)
                    .max_buf_size(MAX_HEAD_BYTES);
                let conn =
                    builder.serve_connection(smol_hyper::rt::FuturesIo::new(stream), service);
                if let Err(e) = conn.await {
                    tracing::debug!(%peer, error = %e, "HTTP connection ended");
                }
            };
            // The handshake and the requests, within the connection's lifetime,
            // until it is closed to make room for a new one, or shutdown.
            futures::select! {
                () = serve.fuse() => {}
                () = rt::sleep(lifetime).fuse() => {
                    tracing::debug!(%peer, "HTTP connection reached its lifetime; closed");
                }
                _ = closed.recv().fuse() => {
                    tracing::debug!(%peer, "HTTP connection closed to make room for a new one");
                }
                _ = stop.recv().fuse() => {}
            }
            drop(slot);
        });
    }
}

type Resp = Response<Full<Bytes>>;

fn respond(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Resp {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Resp {
    respond(status, "text/plain; charset=utf-8", body)
}

async fn route(state: &Arc<State>, principal: &Principal, req: Request<Incoming>) -> Resp {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
    }
    let has_body = req.body().size_hint().lower() > 0
        || req.headers().contains_key(hyper::header::TRANSFER_ENCODING);
    if has_body {
        return text(StatusCode::PAYLOAD_TOO_LARGE, "requests carry no body\n");
    }
    let span = tracing::debug_span!("http", path = req.uri().path());
    let who = Subject::new(state.engine.acl(), principal, Protocol::Http);
    if needs_describe_cluster(req.uri().path()) && !who.describe_cluster() {
        return text(
            StatusCode::FORBIDDEN,
            format!(
                "{} may not describe the cluster (ACLs)\n",
                AclPrincipal::from(principal)
            ),
        );
    }
    route_get(state, req).instrument(span).await
}

/// The paths that show the broker's topics, groups and numbers: with the
/// authorizer on, they need DESCRIBE on the cluster (the principal of an
/// HTTP request is its client certificate's subject with mTLS, otherwise
/// ANONYMOUS). `/`, the page itself, and `/healthz` are open.
fn needs_describe_cluster(path: &str) -> bool {
    matches!(path, "/metrics" | "/api/overview")
}

async fn route_get(state: &Arc<State>, req: Request<Incoming>) -> Resp {
    match req.uri().path() {
        "/" | "/index.html" => respond(StatusCode::OK, "text/html; charset=utf-8", DASHBOARD_HTML),
        "/metrics" => {
            let openmetrics = req
                .headers()
                .get(hyper::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.contains("application/openmetrics-text"));
            let scrape = Scrape::new(Arc::clone(&state.engine), Arc::clone(&state.probe));
            let body = rt::unblock(move || scrape.render(openmetrics)).await;
            let ct = if openmetrics {
                "application/openmetrics-text; version=1.0.0; charset=utf-8"
            } else {
                "text/plain; version=0.0.4; charset=utf-8"
            };
            respond(StatusCode::OK, ct, body)
        }
        "/api/overview" => {
            let st = Arc::clone(state);
            let body = rt::unblock(move || {
                let server = (st.probe)();
                let history = st
                    .history
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .to_json();
                overview::overview(&st.engine, server, history).to_string()
            })
            .await;
            respond(StatusCode::OK, "application/json", body)
        }
        "/healthz" => match health(&state.engine).await {
            Ok(()) => text(StatusCode::OK, "ok\n"),
            Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
        },
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// The broker serves and its storage takes writes: not shutting down, no
/// partition stopped by a storage failure, and a probe file can be written,
/// fsynced and removed in the data directory (within 5 seconds).
async fn health(engine: &Arc<Engine>) -> Result<(), String> {
    if engine.is_shutting_down() {
        return Err("shutting down".into());
    }
    for t in engine.records().topics() {
        if let Some(p) = t.statuses(false).into_iter().find(|p| p.failed) {
            return Err(format!(
                "partition {}/{} stopped after a storage failure",
                p.topic, p.partition
            ));
        }
    }
    let dir = engine.data_dir();
    let probe = rt::unblock(move || {
        use std::io::Write;
        let path = dir.join(".healthz");
        let mut f = std::fs::File::create(&path)?;
        f.write_all(b"ok")?;
        f.sync_data()?;
        drop(f);
        std::fs::remove_file(&path)
    });
    match rt::timeout(Duration::from_secs(5), probe).await {
        Some(Ok(())) => Ok(()),
        Some(Err(e)) => Err(format!("data directory is not writable: {e}")),
        None => Err("data directory write took over 5 s".into()),
    }
}

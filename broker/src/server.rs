//! The TCP server: the listener, the connection limit, one task per
//! connection (its state machine is `flume::conn`), shutdown.
//!
//! Every connection's requests are charged to one broker-wide memory budget
//! ([`crate::budget`]), each connection to its share of it, from admission
//! until the response has been written; past the budget no connection reads
//! more.
//!
//! With TLS configured ([`crate::security::tls`]), each connection's task
//! first runs the handshake, within `read_timeout` and before any request
//! budget is charged; the Kafka and HTTP listeners share the same config.
//!
//! Shutdown stops accepting, lets connections finish their requests until
//! `shutdown_timeout`, and then cancels the connection tasks still running
//! (a peer that does not read its responses, say), so it returns on time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use flume_rt::sync::TaskSlot;
use flume_rt::{self as rt, TcpListener};

use crate::budget::MemoryUse;
use crate::config::{BrokerConfig, FD_MARGIN};
use crate::engine::Engine;
use crate::error::BrokerError;
use crate::flume::conn::serve;
use crate::net::{
    accept_local_loop, accept_loop, Accepted, Connections, Listening, COUNTING_BYTES,
};
use crate::security::auth::{AuthMode, Authenticator};
use crate::security::quota::{ConnQuota, Quotas};
use crate::security::tls::ServerTls;
use crate::security::Principal;

pub use crate::flume::{handle_request, MAX_FETCH_PARTITIONS};
use crate::http::scrape::ServerStats;

/// A running broker.
#[derive(Debug)]
pub struct Broker {
    engine: Arc<Engine>,
    addr: SocketAddr,
    conns: Arc<Connections>,
    accept: TaskSlot<()>,
    /// In-process connections' address (`inproc://...`; see [`Broker::in_process_address`]).
    in_process: String,
    /// Their accept loop.
    accept_local: TaskSlot<()>,
    /// The HTTP server (metrics, dashboard), when configured.
    http: Option<crate::http::HttpServer>,
    /// The Kafka listener, when configured.
    kafka: Option<crate::kafka::KafkaListener>,
    /// TLS of every listener, when configured.
    tls: Option<Arc<ServerTls>>,
    /// Authentication and the users.
    auth: Arc<Authenticator>,
}

impl Broker {
    /// Opens the data directory, binds `config.listen` and starts serving.
    ///
    /// # Errors
    /// Invalid settings, TLS files that cannot be used, storage that cannot
    /// be opened, or an address that cannot be bound.
    pub async fn start(config: BrokerConfig) -> Result<Broker, BrokerError> {
        let listen = config.listen.clone();
        let tls = match config.tls_files()? {
            Some(files) => Some(Arc::new(rt::unblock(move || ServerTls::load(files)).await?)),
            None => None,
        };
        let engine = Engine::open(config)?;
        let (dir, mode) = (engine.data_dir().to_path_buf(), engine.config().auth);
        let auth = Arc::new(rt::unblock(move || Authenticator::open(&dir, mode)).await?);
        let quotas = Arc::clone(engine.quotas());
        let listener = TcpListener::bind(&listen)
            .await
            .map_err(|source| BrokerError::Io {
                what: format!("listen on {listen}"),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| BrokerError::Io {
            what: "read the listening address".into(),
            source,
        })?;
        tracing::info!(%addr, data = %engine.data_dir().display(), tls = tls.is_some(), auth = %auth.mode(), "broker listening");
        if auth.mode() == AuthMode::Off && !addr.ip().is_loopback() {
            tracing::warn!(%addr, "listening beyond loopback with --auth off: anyone who can reach the port may read and write every topic");
        }
        let conns = Connections::new(engine.config().max_request_memory, COUNTING_BYTES);
        let http = match engine.config().http_listen.clone() {
            Some(http_addr) => {
                let probe_conns = Arc::clone(&conns);
                let probe = Arc::new(move || ServerStats {
                    connections_open: probe_conns.open(),
                    memory: probe_conns.memory.usage(),
                });
                let started = crate::http::HttpServer::start(
                    &http_addr,
                    Arc::clone(&engine),
                    probe,
                    tls.clone(),
                );
                Some(started.await?)
            }
            None => None,
        };
        let kafka = match engine.config().kafka_listen.clone() {
            Some(k) => {
                let adv = engine.config().kafka_advertised.clone();
                let started = crate::kafka::KafkaListener::start(
                    &k,
                    adv.as_deref(),
                    Arc::clone(&engine),
                    tls.clone(),
                    Arc::clone(&auth),
                    Arc::clone(&quotas),
                );
                Some(started.await?)
            }
            None => None,
        };
        let how = Listening {
            name: "flume",
            max_connections: engine.config().max_connections,
            connection_memory: engine
                .config()
                .max_connection_memory
                .max(engine.config().max_frame_bytes),
            handshake: engine.config().read_timeout,
            tls: tls.clone(),
            metrics: Arc::clone(engine.metrics()),
        };
        let served = (Arc::clone(&engine), Arc::clone(&auth), quotas);
        let serve = move |c| {
            let (engine, auth, quotas) = served.clone();
            serve_flume(engine, auth, quotas, c)
        };
        let local = rt::local::LocalListener::bind_unique("flume");
        let in_process = local.address();
        let accept_local = rt::spawn(accept_local_loop(
            local,
            Arc::clone(&conns),
            how.clone(),
            engine.shutdown_signal(),
            serve.clone(),
        ));
        let accept = rt::spawn(accept_loop(
            listener,
            Arc::clone(&conns),
            how,
            engine.shutdown_signal(),
            serve,
        ));
        Ok(Broker {
            engine,
            addr,
            conns,
            accept: TaskSlot::new(accept),
            in_process,
            accept_local: TaskSlot::new(accept_local),
            http,
            kafka,
            tls,
            auth,
        })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address at which clients in this same process reach the broker
    /// without TCP: `inproc://flume-<pid>-<n>`. The SDK connects to it as to
    /// `host:port` (`Producer::connect(broker.in_process_address())`); the
    /// connections are served exactly as TCP ones (limits, authentication,
    /// ACLs), without TLS. Valid until [`Broker::shutdown`].
    pub fn in_process_address(&self) -> &str {
        &self.in_process
    }

    /// Adds an ACL (false: it was there); durable and in force for every
    /// open connection when it returns.
    ///
    /// # Errors
    /// An invalid ACL, the limit reached, or the file cannot be written.
    pub async fn add_acl(
        &self,
        acl: crate::security::acl::Acl,
    ) -> Result<bool, crate::security::acl::AclError> {
        let authorizer = Arc::clone(self.engine.acl());
        rt::unblock(move || authorizer.add(acl)).await
    }

    /// Removes an ACL (false: there was no such ACL).
    ///
    /// # Errors
    /// The file cannot be written.
    pub async fn remove_acl(
        &self,
        acl: crate::security::acl::Acl,
    ) -> Result<bool, crate::security::acl::AclError> {
        let authorizer = Arc::clone(self.engine.acl());
        rt::unblock(move || authorizer.remove(&acl)).await
    }

    /// The ACLs, sorted.
    pub fn acls(&self) -> Vec<crate::security::acl::Acl> {
        self.engine.acl().list(None)
    }

    /// The address of the HTTP server, when `http_listen` is set.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(crate::http::HttpServer::local_addr)
    }

    /// The address of the Kafka listener, when `kafka_listen` is set.
    pub fn kafka_addr(&self) -> Option<SocketAddr> {
        self.kafka
            .as_ref()
            .map(crate::kafka::KafkaListener::local_addr)
    }

    /// The engine behind the server.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Open connections.
    pub fn connection_count(&self) -> usize {
        self.conns.open()
    }

    /// Reads the TLS certificate, key and client CA files again and uses them
    /// for every handshake from now on, on every port; open connections keep
    /// theirs. flume-cli calls it on SIGHUP. Without TLS it does nothing.
    ///
    /// # Errors
    /// [`BrokerError::Tls`] when the files do not make a valid config; the
    /// config in use stays.
    pub async fn reload_tls(&self) -> Result<(), BrokerError> {
        let Some(tls) = self.tls.clone() else {
            return Ok(());
        };
        rt::unblock(move || tls.reload()).await?;
        tracing::info!("TLS certificates reloaded");
        Ok(())
    }

    /// Adds user `name` with `password`, or sets a new password; takes effect
    /// for the next AUTHENTICATE (no restart), durable when it returns.
    /// Stores a SCRAM-SHA-256 and a SCRAM-SHA-512 verifier.
    ///
    /// # Errors
    /// A bad name, a full store, or the file cannot be written.
    pub async fn add_user(&self, name: &str, password: &str) -> Result<(), BrokerError> {
        let (auth, name, password) = (Arc::clone(&self.auth), name.to_owned(), password.to_owned());
        rt::unblock(move || {
            let v = crate::security::users::new_verifiers(&password)?;
            auth.users().put_all(&name, v)
        })
        .await
    }

    /// Removes user `name` (connections it opened stay authenticated);
    /// false when there was no such user.
    ///
    /// # Errors
    /// The file cannot be written.
    pub async fn remove_user(&self, name: &str) -> Result<bool, BrokerError> {
        let (auth, name) = (Arc::clone(&self.auth), name.to_owned());
        rt::unblock(move || auth.users().remove(&name)).await
    }

    /// The user names, sorted.
    pub fn users(&self) -> Vec<String> {
        self.auth.users().list()
    }

    /// Whether the broker's ports speak TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Who the open connections (Flume and Kafka) are, as far as known: one
    /// entry per connection past its TLS handshake, in no order.
    pub fn connection_principals(&self) -> Vec<Principal> {
        let mut all = self.conns.principals();
        if let Some(k) = &self.kafka {
            all.extend(k.connection_principals());
        }
        all
    }

    /// Memory of the requests being served (see [`BrokerConfig::max_request_memory`]).
    pub fn request_memory(&self) -> MemoryUse {
        self.conns.memory.usage()
    }

    /// Open Kafka connections (0 without a Kafka listener).
    pub fn kafka_connection_count(&self) -> usize {
        self.kafka
            .as_ref()
            .map_or(0, crate::kafka::KafkaListener::connection_count)
    }

    /// Memory of the requests the Kafka connections are serving (the Kafka
    /// listener has its own budget), when it is configured.
    pub fn kafka_request_memory(&self) -> Option<MemoryUse> {
        self.kafka
            .as_ref()
            .map(crate::kafka::KafkaListener::request_memory)
    }

    /// Graceful shutdown: stop accepting, let connections finish their
    /// in-flight requests (up to `shutdown_timeout`), cancel the connection
    /// tasks still running then, drain every partition queue to disk, fsync,
    /// close. Idempotent.
    pub async fn shutdown(&self) {
        self.engine.begin_shutdown();
        self.accept.join().await;
        self.accept_local.join().await;
        if let Some(k) = &self.kafka {
            k.shutdown().await;
        }
        let deadline = Instant::now() + self.engine.config().shutdown_timeout;
        let cancelled = self.conns.drain(deadline).await;
        if cancelled > 0 {
            tracing::warn!(
                open = cancelled,
                "shutdown timeout: closed connections with requests still in flight"
            );
        }
        self.engine.shutdown().await;
        tracing::info!("broker stopped");
    }
}

/// The Flume protocol served to clients of this process only, without a
/// TCP port: what [`crate::EmbeddedBroker::address`] starts. Its connections
/// are served as the TCP server's are (the same connection loop, limits,
/// memory budget, authentication and ACLs).
#[derive(Debug)]
pub(crate) struct InProcessServer {
    address: String,
    conns: Arc<Connections>,
    accept: TaskSlot<()>,
}

impl InProcessServer {
    /// Registers an `inproc://` name and serves it until the engine shuts down.
    ///
    /// # Errors
    /// The users file cannot be read.
    pub(crate) fn start(engine: &Arc<Engine>) -> Result<InProcessServer, BrokerError> {
        let auth = Arc::new(Authenticator::open(
            &engine.data_dir(),
            engine.config().auth,
        )?);
        let conns = Connections::new(engine.config().max_request_memory, COUNTING_BYTES);
        let how = Listening {
            name: "in-process",
            max_connections: engine.config().max_connections,
            connection_memory: engine
                .config()
                .max_connection_memory
                .max(engine.config().max_frame_bytes),
            handshake: engine.config().read_timeout,
            tls: None,
            metrics: Arc::clone(engine.metrics()),
        };
        let served = (Arc::clone(engine), auth, Arc::clone(engine.quotas()));
        let local = rt::local::LocalListener::bind_unique("flume-embedded");
        let address = local.address();
        let accept = rt::spawn(accept_local_loop(
            local,
            Arc::clone(&conns),
            how,
            engine.shutdown_signal(),
            move |c| {
                let (engine, auth, quotas) = served.clone();
                serve_flume(engine, auth, quotas, c)
            },
        ));
        Ok(InProcessServer {
            address,
            conns,
            accept: TaskSlot::new(accept),
        })
    }

    /// `inproc://flume-embedded-<pid>-<n>`.
    pub(crate) fn address(&self) -> &str {
        &self.address
    }

    /// After the engine's shutdown began: the accept loop ends, connections
    /// finish what they serve until `deadline`, the rest are cancelled.
    pub(crate) async fn stop(&self, deadline: Instant) {
        self.accept.join().await;
        self.conns.drain(deadline).await;
    }
}

/// Serves one accepted Flume-protocol connection until it ends.
async fn serve_flume(
    engine: Arc<Engine>,
    auth: Arc<Authenticator>,
    quotas: Arc<Quotas>,
    c: Accepted,
) {
    let peer = c.peer;
    let handle = Arc::new(c.handle);
    let sink: crate::flume::conn::PrincipalSink = Arc::new(move |p| handle.set_principal(p));
    let quota = ConnQuota::new(quotas, peer.ip(), &c.principal);
    let security = crate::flume::conn::Security {
        principal: c.principal,
        auth,
        sink,
        quota,
    };
    match serve(engine, c.memory, c.counting, c.stream, security).await {
        Ok(()) => tracing::debug!(%peer, "connection closed"),
        Err(e) if is_disconnect(&e) => {
            tracing::debug!(%peer, error = %e, "connection closed by peer")
        }
        Err(e) => tracing::warn!(%peer, error = %e, "connection closed"),
    }
}

fn is_disconnect(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
    )
}

/// The file-descriptor limit at start, from [`ensure_fd_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimit {
    /// What the settings may use (`max_open_files + max_connections + 64`).
    pub needed: u64,
    /// The soft limit now (raised towards `needed` if the hard limit allowed).
    pub soft: u64,
    /// The hard limit.
    pub hard: u64,
}

impl FdLimit {
    /// True when the soft limit covers what the settings may use.
    pub fn is_enough(&self) -> bool {
        self.soft >= self.needed
    }
}

impl std::fmt::Display for FdLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the settings need {} file descriptors (max_open_files + max_connections + {}); the limit is {} (hard {})",
            self.needed, FD_MARGIN, self.soft, self.hard
        )
    }
}

/// Raises the soft RLIMIT_NOFILE towards [`BrokerConfig::fd_needed`] (as far
/// as the hard limit allows) and reports what there is: a start-up system
/// call, made before the broker opens its topics.
pub fn ensure_fd_limit(config: &BrokerConfig) -> FdLimit {
    let needed = config.fd_needed();
    let current = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let soft = current.current.unwrap_or(u64::MAX);
    let hard = current.maximum.unwrap_or(u64::MAX);
    let mut now = soft;
    if soft < needed {
        let want = needed.min(hard);
        let raised = rustix::process::setrlimit(
            rustix::process::Resource::Nofile,
            rustix::process::Rlimit {
                current: Some(want),
                maximum: current.maximum,
            },
        );
        if raised.is_ok() {
            now = want;
        }
    }
    FdLimit {
        needed,
        soft: now,
        hard,
    }
}

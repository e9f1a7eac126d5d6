//! The TCP server: the listener, the connection limit, one task per
//! connection (its state machine is [`crate::conn`]), shutdown.
//!
//! Every connection's requests are charged to one broker-wide memory budget
//! ([`crate::budget`]), each connection to its share of it, from admission
//! until the response has been written; past the budget no connection reads
//! more.
//!
//! Shutdown stops accepting, lets connections finish their requests until
//! `shutdown_timeout`, and then cancels the connection tasks still running
//! (a peer that does not read its responses, say), so it returns on time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flume_rt::sync::TaskSlot;
use flume_rt::{self as rt, TcpListener};
use futures::FutureExt;

use crate::budget::{MemoryBudget, MemoryUse};
use crate::config::BrokerConfig;
use crate::conn::serve;
use crate::engine::Engine;
use crate::error::BrokerError;
use crate::flume::COUNTING_BYTES;
use crate::listener::Connections;

pub use crate::flume::{handle_request, MAX_FETCH_PARTITIONS};
use crate::metrics::ServerStats;

/// A running broker.
#[derive(Debug)]
pub struct Broker {
    engine: Arc<Engine>,
    addr: SocketAddr,
    conns: Arc<Connections>,
    accept: TaskSlot<()>,
    /// The HTTP server (metrics, dashboard), when configured.
    http: Option<crate::http::HttpServer>,
    /// The Kafka listener, when configured.
    kafka: Option<crate::kafka::KafkaListener>,
}

impl Broker {
    /// Opens the data directory, binds `config.listen` and starts serving.
    ///
    /// # Errors
    /// Invalid settings, storage that cannot be opened, or an address that cannot be bound.
    pub async fn start(config: BrokerConfig) -> Result<Broker, BrokerError> {
        let listen = config.listen.clone();
        let engine = Engine::open(config)?;
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
        tracing::info!(%addr, data = %engine.data_dir().display(), "broker listening");
        let conns = Connections::new(engine.config().max_request_memory, COUNTING_BYTES);
        let http = match engine.config().http_listen.clone() {
            Some(http_addr) => {
                let probe_conns = Arc::clone(&conns);
                let probe = Arc::new(move || ServerStats {
                    connections_open: probe_conns.open(),
                    memory: probe_conns.memory.usage(),
                });
                Some(crate::http::HttpServer::start(&http_addr, Arc::clone(&engine), probe).await?)
            }
            None => None,
        };
        let kafka = match engine.config().kafka_listen.clone() {
            Some(k) => {
                let adv = engine.config().kafka_advertised.clone();
                let started =
                    crate::kafka::KafkaListener::start(&k, adv.as_deref(), Arc::clone(&engine));
                Some(started.await?)
            }
            None => None,
        };
        let accept = rt::spawn(accept_loop(
            listener,
            Arc::clone(&engine),
            Arc::clone(&conns),
        ));
        Ok(Broker {
            engine,
            addr,
            conns,
            accept: TaskSlot::new(accept),
            http,
            kafka,
        })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
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

    /// Memory of the requests being served (see [`BrokerConfig::max_request_memory`]).
    pub fn request_memory(&self) -> MemoryUse {
        self.conns.memory.usage()
    }

    /// Graceful shutdown: stop accepting, let connections finish their
    /// in-flight requests (up to `shutdown_timeout`), cancel the connection
    /// tasks still running then, drain every partition queue to disk, fsync,
    /// close. Idempotent.
    pub async fn shutdown(&self) {
        self.engine.begin_shutdown();
        self.accept.join().await;
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

async fn accept_loop(listener: TcpListener, engine: Arc<Engine>, conns: Arc<Connections>) {
    let stop = engine.shutdown_signal();
    loop {
        let accepted = futures::select! {
            r = listener.accept().fuse() => r,
            _ = stop.recv().fuse() => break,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                rt::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let max = engine.config().max_connections;
        let memory = MemoryBudget::within(
            &conns.memory,
            engine
                .config()
                .max_connection_memory
                .max(engine.config().max_frame_bytes),
        );
        let counting = Arc::clone(&conns.counting);
        let served = Arc::clone(&engine);
        let admitted = conns.spawn(max, async move {
            tracing::debug!(%peer, "connection open");
            match serve(served, memory, counting, stream).await {
                Ok(()) => tracing::debug!(%peer, "connection closed"),
                Err(e) if is_disconnect(&e) => {
                    tracing::debug!(%peer, error = %e, "connection closed by peer")
                }
                Err(e) => tracing::warn!(%peer, error = %e, "connection closed"),
            }
        });
        if !admitted {
            tracing::warn!(%peer, max, "connection limit reached; closing the new connection");
            // The refused socket was moved into the unspawned task and closed with it.
            engine.metrics().connection_refused();
        }
    }
}

fn is_disconnect(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
    )
}

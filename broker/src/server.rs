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

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use event_listener::Event;
use flume_rt::sync::TaskSlot;
use flume_rt::{self as rt, TcpListener};
use futures::FutureExt;

use crate::budget::{MemoryBudget, MemoryUse};
use crate::config::BrokerConfig;
use crate::conn::serve;
use crate::engine::Engine;
use crate::error::BrokerError;
use crate::flume::COUNTING_BYTES;

pub use crate::flume::{handle_request, MAX_FETCH_PARTITIONS};
use crate::metrics::ServerStats;

#[derive(Debug)]
struct Connections {
    open: AtomicUsize,
    closed: Event,
    /// Requests being served, over all connections.
    memory: Arc<MemoryBudget>,
    /// Chunks that waiting fetches read to count what arrived, over all connections.
    counting: Arc<MemoryBudget>,
    /// The task of every open connection, by a sequence number, so shutdown
    /// can cancel those that outlive its deadline.
    tasks: Mutex<HashMap<u64, rt::Task<()>>>,
    next_id: AtomicU64,
}

impl Connections {
    fn tasks(&self) -> std::sync::MutexGuard<'_, HashMap<u64, rt::Task<()>>> {
        self.tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

struct ConnGuard(Arc<Connections>, u64);
impl Drop for ConnGuard {
    fn drop(&mut self) {
        // Dropping the handle of the task that is ending detaches it; nothing is lost.
        drop(self.0.tasks().remove(&self.1));
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        self.0.closed.notify(usize::MAX);
    }
}

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
        let conns = Arc::new(Connections {
            open: AtomicUsize::new(0),
            closed: Event::new(),
            memory: MemoryBudget::new(engine.config().max_request_memory),
            counting: MemoryBudget::new(COUNTING_BYTES),
            tasks: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
        });
        let http = match engine.config().http_listen.clone() {
            Some(http_addr) => {
                let probe_conns = Arc::clone(&conns);
                let probe = Arc::new(move || ServerStats {
                    connections_open: probe_conns.open.load(Ordering::Acquire),
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
        self.conns.open.load(Ordering::Acquire)
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
        loop {
            let listener = self.conns.closed.listen();
            let open = self.conns.open.load(Ordering::Acquire);
            if open == 0 {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                tracing::warn!(
                    open,
                    "shutdown timeout: closing connections with requests still in flight"
                );
                let tasks: Vec<rt::Task<()>> = self.conns.tasks().drain().map(|(_, t)| t).collect();
                for t in tasks {
                    t.cancel().await;
                }
                break;
            }
            rt::timeout(deadline - now, listener).await;
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
        if conns.open.load(Ordering::Acquire) >= max {
            tracing::warn!(%peer, max, "connection limit reached; closing the new connection");
            engine.metrics().connection_refused();
            let _ = stream.shutdown(std::net::Shutdown::Both);
            continue;
        }
        conns.open.fetch_add(1, Ordering::AcqRel);
        let id = conns.next_id.fetch_add(1, Ordering::Relaxed);
        let guard = ConnGuard(Arc::clone(&conns), id);
        let engine = Arc::clone(&engine);
        // The map is locked across the spawn, so a task that ends at once removes
        // its handle only after it was inserted.
        let mut tasks = conns.tasks();
        let task = rt::spawn(async move {
            let _guard = guard;
            tracing::debug!(%peer, "connection open");
            let memory = MemoryBudget::within(
                &_guard.0.memory,
                engine
                    .config()
                    .max_connection_memory
                    .max(engine.config().max_frame_bytes),
            );
            let counting = Arc::clone(&_guard.0.counting);
            match serve(engine, memory, counting, stream).await {
                Ok(()) => tracing::debug!(%peer, "connection closed"),
                Err(e) if is_disconnect(&e) => {
                    tracing::debug!(%peer, error = %e, "connection closed by peer")
                }
                Err(e) => tracing::warn!(%peer, error = %e, "connection closed"),
            }
        });
        tasks.insert(id, task);
    }
}

fn is_disconnect(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
    )
}

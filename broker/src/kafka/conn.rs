//! The Kafka listener and its connections: the accept loop (connection
//! limit, shutdown) and the connection loop (frame size checked before
//! allocating, memory budget, read/idle and write timeouts; one request at a
//! time per connection, as Kafka serves them, while the socket is watched
//! for the peer closing; SASL before other requests when logins are owed;
//! TLS when the broker has it, the handshake within the read timeout). Each
//! request frame goes to [`super::apis::handle`].

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flume_rt::sync::TaskSlot;
use flume_rt::{self as rt, TcpListener};
use futures::io::AsyncReadExt;
use futures::FutureExt;

use super::{apis, sasl, Ctx, NODE_ID};
use crate::config::broker_named::KafkaListeners;
use crate::engine::Engine;
use crate::error::BrokerError;
use crate::net::Connections;
use crate::security::auth::Authenticator;
use crate::security::quota::{ConnQuota, Quotas};
use crate::security::tls::{ServerTls, Transport};
use crate::security::Principal;

/// The running Kafka listener.
#[derive(Debug)]
pub struct KafkaListener {
    addr: SocketAddr,
    conns: Arc<Connections>,
    accept: TaskSlot<()>,
    shutdown_timeout: Duration,
}

impl KafkaListener {
    /// Binds `listen` and serves Kafka clients until the engine shuts down.
    /// `advertised` ("host:port") is what Metadata tells clients to connect
    /// to; by default the bound address. With `tls`, connections speak TLS
    /// (Kafka's `SSL` security protocol).
    ///
    /// # Errors
    /// An address that cannot be bound, or an advertised address without a port.
    pub async fn start(
        listen: &str,
        advertised: Option<&str>,
        engine: Arc<Engine>,
        tls: Option<Arc<ServerTls>>,
        auth: Arc<Authenticator>,
        quotas: Arc<Quotas>,
    ) -> Result<KafkaListener, BrokerError> {
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|source| BrokerError::Io {
                what: format!("kafka listener on {listen}"),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| BrokerError::Io {
            what: "read the kafka listener's address".into(),
            source,
        })?;
        let (host, port) = match advertised {
            Some(a) => split_host_port(a).ok_or_else(|| {
                BrokerError::Config(format!("kafka advertised address {a:?}: want HOST:PORT"))
            })?,
            None => (addr.ip().to_string(), addr.port()),
        };
        tracing::info!(%addr, advertised = %format!("{host}:{port}"), "kafka listener listening");
        let cfg = engine.config();
        let conns = Connections::new(cfg.max_request_memory, crate::net::COUNTING_BYTES);
        let shutdown_timeout = cfg.shutdown_timeout;
        let listeners = Arc::new(KafkaListeners::new(
            addr,
            &host,
            port,
            tls.is_some(),
            auth.mode() == crate::security::auth::AuthMode::Required,
        ));
        let proto = Proto {
            engine: Arc::clone(&engine),
            host,
            port,
            listeners,
            max_frame: cfg.max_frame_bytes,
            max_connections: cfg.max_connections,
            connection_memory: cfg.max_connection_memory.max(cfg.max_frame_bytes),
            read_timeout: cfg.read_timeout,
            idle_timeout: cfg.connections_max_idle,
            write_timeout: cfg.write_timeout,
            tls,
            auth,
            quotas,
        };
        let how = crate::net::Listening {
            name: "kafka",
            max_connections: proto.max_connections,
            connection_memory: proto.connection_memory,
            handshake: proto.read_timeout,
            tls: proto.tls.clone(),
            metrics: Arc::clone(engine.metrics()),
        };
        let stop = engine.shutdown_signal();
        let accept = rt::spawn(crate::net::accept_loop(
            listener,
            Arc::clone(&conns),
            how,
            stop,
            move |c| serve_kafka(proto.clone(), c),
        ));
        Ok(KafkaListener {
            addr,
            conns,
            accept: TaskSlot::new(accept),
            shutdown_timeout,
        })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Open Kafka connections.
    pub fn connection_count(&self) -> usize {
        self.conns.open()
    }

    /// Memory of the requests the Kafka connections are serving.
    pub fn request_memory(&self) -> crate::budget::MemoryUse {
        self.conns.memory.usage()
    }

    /// Who the open Kafka connections are (past their TLS handshake).
    pub fn connection_principals(&self) -> Vec<Principal> {
        self.conns.principals()
    }

    /// Stops accepting (the engine's shutdown signal already did, this waits
    /// for it), lets connections finish the request they serve until the
    /// shutdown timeout, then cancels the rest. Call after the engine began
    /// shutting down. Idempotent.
    pub async fn shutdown(&self) {
        self.accept.join().await;
        let deadline = Instant::now() + self.shutdown_timeout;
        self.conns.drain(deadline).await;
    }
}

fn split_host_port(a: &str) -> Option<(String, u16)> {
    let (host, port) = a.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return None;
    }
    Some((host.to_owned(), port.parse().ok()?))
}

#[derive(Debug, Clone)]
struct Proto {
    engine: Arc<Engine>,
    host: String,
    port: u16,
    listeners: Arc<KafkaListeners>,
    max_frame: usize,
    max_connections: usize,
    connection_memory: usize,
    read_timeout: Duration,
    idle_timeout: Duration,
    write_timeout: Duration,
    tls: Option<Arc<ServerTls>>,
    auth: Arc<Authenticator>,
    quotas: Arc<Quotas>,
}

/// Serves one accepted Kafka connection until it ends.
async fn serve_kafka(proto: Proto, c: crate::net::Accepted) {
    let peer = c.peer;
    let ctx = Ctx {
        engine: Arc::clone(&proto.engine),
        node_id: NODE_ID,
        advertised_host: proto.host.clone(),
        advertised_port: proto.port,
        listeners: Arc::clone(&proto.listeners),
        max_decoded_bytes: proto.max_frame,
        memory: c.memory,
        counting: c.counting,
        client_host: format!("/{}", peer.ip()),
        principal: Mutex::new(c.principal.clone()),
        throttle_ms: AtomicI32::new(0),
        auth: Some(Arc::clone(&proto.auth)),
    };
    let quota = ConnQuota::new(Arc::clone(&proto.quotas), peer.ip(), &c.principal);
    match serve(&ctx, &proto, c.stream, &c.handle, quota).await {
        Ok(()) => tracing::debug!(%peer, "kafka connection closed"),
        Err(e) => tracing::debug!(%peer, error = %e, "kafka connection closed"),
    }
}

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
enum ConnError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("frame size {size} is outside 8..={limit}")]
    FrameSize { size: i64, limit: usize },
    #[error("no request for {0:?}")]
    Idle(Duration),
    #[error("request not complete within {0:?}")]
    Slow(Duration),
    #[error(transparent)]
    Request(#[from] apis::RequestError),
    #[error("SASL request does not decode")]
    Sasl,
    #[error("API key {0} before a SASL login (--auth required)")]
    Unauthenticated(i16),
    #[error(transparent)]
    Quota(#[from] crate::security::quota::QuotaError),
}

/// Bytes read ahead per watching read.
const WATCH_READ_BYTES: usize = 16 * 1024;

/// The connection's byte stream, with the bytes read ahead while a request
/// was served and whether the peer has closed its side.
struct Inbox {
    stream: Transport,
    /// Read ahead, not yet consumed (at most [`crate::net::WATCH_AHEAD_BYTES`]).
    ahead: Vec<u8>,
    /// The peer closed its side (EOF seen by a watching read).
    eof: bool,
}

/// Keeps a buffer at `len` bytes when the read that grew it ends or is cancelled.
struct Truncate<'a> {
    buf: &'a mut Vec<u8>,
    len: usize,
}

impl Drop for Truncate<'_> {
    fn drop(&mut self) {
        self.buf.truncate(self.len);
    }
}

impl Inbox {
    /// Fills `buf`: from the bytes read ahead, then from the socket.
    async fn read_exact(&mut self, buf: &mut [u8]) -> std::io::Result<()> {
        let n = buf.len().min(self.ahead.len());
        let (from_ahead, rest) = buf.split_at_mut(n);
        from_ahead.copy_from_slice(&self.ahead[..n]);
        self.ahead.drain(..n);
        if self.ahead.is_empty() && self.ahead.capacity() > 0 {
            self.ahead = Vec::new();
        }
        if rest.is_empty() {
            return Ok(());
        }
        if self.eof {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.stream.read_exact(rest).await
    }

    /// Reads what arrives into `ahead`: `Ok(0)` is EOF. Never completes once
    /// EOF was seen or `ahead` is full. Cancel-safe: bytes read are kept.
    async fn watch(&mut self) -> std::io::Result<usize> {
        let len = self.ahead.len();
        let room = crate::net::WATCH_AHEAD_BYTES
            .saturating_sub(len)
            .min(WATCH_READ_BYTES);
        if self.eof || room == 0 {
            return futures::future::pending().await;
        }
        loop {
            // Room is made only once the socket has something (bytes or EOF):
            // most requests are served before anything arrives.
            self.stream.readable().await?;
            self.ahead.resize(len + room, 0);
            let mut kept = Truncate {
                buf: &mut self.ahead,
                len,
            };
            let r = match &mut self.stream {
                Transport::Plain(s) => s.try_read(&mut kept.buf[len..]),
                Transport::Local(s) => s.try_read(&mut kept.buf[len..]),
                // rustls keeps what it decrypted but was not read; a cancelled read loses nothing.
                Transport::Tls(t) => t.read(&mut kept.buf[len..]).await,
            };
            match r {
                Err(e) if rt::retry(&e) => continue,
                Ok(n) => {
                    kept.len += n;
                    return Ok(n);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Runs `work` (serving a request, or a throttle) while watching the
    /// socket: a reset ends the connection (an error); at EOF, `work` is
    /// dropped when `drop_at_eof` (`Ok(None)`), finished otherwise.
    async fn watching<F: std::future::Future>(
        &mut self,
        work: F,
        drop_at_eof: bool,
    ) -> std::io::Result<Option<F::Output>> {
        let work = work.fuse();
        futures::pin_mut!(work);
        loop {
            if self.eof {
                if drop_at_eof {
                    return Ok(None);
                }
                return Ok(Some(work.await));
            }
            futures::select_biased! {
                out = work => return Ok(Some(out)),
                r = self.watch().fuse() => {
                    if r? == 0 {
                        self.eof = true;
                    }
                }
            }
        }
    }
}

/// Whether a Kafka request may wait on others rather than only on the
/// broker's own work (new records, the other members, the leader's
/// assignment): once the peer has closed its side, it is dropped.
fn waits_on_others(key: i16) -> bool {
    use kafka_protocol::messages::ApiKey;
    key == ApiKey::Fetch as i16
        || key == ApiKey::JoinGroup as i16
        || key == ApiKey::SyncGroup as i16
}

/// One connection: read a frame, answer it, repeat. Between requests the
/// connection may stay idle up to `connections_max_idle` (the read timeout
/// while a login is owed); a started frame must be complete within the read
/// timeout.
///
/// While a request is served the socket is watched, so the peer closing is
/// noticed at once. A reset ends the connection there. EOF is a half-close:
/// the request being served is answered, and then the frames already
/// received, in order, until one that waits on others (Fetch, JoinGroup,
/// SyncGroup: [`waits_on_others`]) or a produce throttle: the connection
/// closes there, dropping it (Kafka closes on EOF outright).
async fn serve(
    ctx: &Ctx,
    limits: &Proto,
    stream: Transport,
    handle: &crate::net::ConnHandle,
    mut quota: ConnQuota,
) -> Result<(), ConnError> {
    let stop = ctx.engine.shutdown_signal();
    let mut sasl = sasl::KafkaSasl::new(Arc::clone(&limits.auth));
    let mut inbox = Inbox {
        stream,
        ahead: Vec::new(),
        eof: false,
    };
    loop {
        if inbox.eof && inbox.ahead.is_empty() {
            return Ok(());
        }
        // Idle between requests up to `connections.max.idle.ms` (the read
        // timeout before a login that is owed); a started frame's size must
        // then come within the read timeout.
        let idle = if sasl.allows(kafka_protocol::messages::ApiKey::Metadata as i16) {
            limits.idle_timeout
        } else {
            limits.read_timeout
        };
        let mut len = [0u8; 4];
        let read = futures::select! {
            r = rt::timeout(idle, inbox.read_exact(&mut len[..1])).fuse() => r,
            _ = stop.recv().fuse() => return Ok(()),
        };
        match read {
            None => return Err(ConnError::Idle(idle)),
            Some(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Some(r) => r?,
        }
        rt::timeout(limits.read_timeout, inbox.read_exact(&mut len[1..]))
            .await
            .ok_or(ConnError::Slow(limits.read_timeout))??;
        let size = i32::from_be_bytes(len);
        // After SaslHandshake v0 a frame is a raw SASL token (PLAIN's may be short).
        let raw = sasl.wants_raw_token();
        let min = if raw { 1 } else { 8 };
        let size = match usize::try_from(size) {
            Ok(s) if (min..=limits.max_frame).contains(&s) => s,
            _ => {
                return Err(ConnError::FrameSize {
                    size: i64::from(size),
                    limit: limits.max_frame,
                })
            }
        };
        // Room in the budget before the frame is read into memory: within the
        // connection's reserve however spent the shared budget is, beyond it
        // only while the shared budget has room (`crate::budget`).
        if !ctx.memory.may_admit(size) {
            // Watched too, so a reset ends the wait; EOF does not (the frame may be whole).
            inbox
                .watching(ctx.memory.wait_to_admit(size), false)
                .await?;
        }
        let mut charge = ctx.memory.charge(size);
        let mut frame = vec![0u8; size];
        rt::timeout(limits.read_timeout, inbox.read_exact(&mut frame))
            .await
            .ok_or(ConnError::Slow(limits.read_timeout))??;
        // The frame is at least 8 bytes (checked above): the API key is its first two.
        let key = if raw {
            kafka_protocol::messages::ApiKey::SaslAuthenticate as i16
        } else {
            i16::from_be_bytes([frame[0], frame[1]])
        };
        if sasl::is_sasl(key) {
            let outcome = if raw {
                Some(sasl.raw_token(&frame, &mut quota))
            } else {
                sasl.handle(Bytes::from(frame), &mut quota)
            };
            let (resp, close) = match outcome.ok_or(ConnError::Sasl)? {
                sasl::Outcome::Reply(r) => (r, false),
                sasl::Outcome::LoggedIn(r, principal) => {
                    ctx.set_principal(principal.clone());
                    handle.set_principal(principal);
                    (r, false)
                }
                sasl::Outcome::ReplyThenClose(r) => (r, true),
            };
            charge.add(resp.len());
            rt::write_all_timeout(&mut inbox.stream, &resp, limits.write_timeout).await?;
            if close {
                return Ok(());
            }
            continue;
        }
        if !sasl.allows(key) {
            return Err(ConnError::Unauthenticated(key));
        }
        if key != kafka_protocol::messages::ApiKey::ApiVersions as i16 {
            // Over its principal's connection limit: closed.
            quota.check().map_err(|e| ConnError::Quota(e.clone()))?;
        }
        let throttle = if key == kafka_protocol::messages::ApiKey::Produce as i16 {
            quota.produce(size)
        } else {
            Duration::ZERO
        };
        // The Produce response reports the throttle (per connection, so one field serves).
        let throttle_ms = i32::try_from(throttle.as_millis()).unwrap_or(i32::MAX);
        ctx.throttle_ms.store(throttle_ms, Ordering::Relaxed);
        let handled = apis::handle(ctx, Bytes::from(frame));
        let Some(response) = inbox.watching(handled, waits_on_others(key)).await? else {
            tracing::debug!(
                key,
                "peer closed: a request that waits is dropped unanswered"
            );
            return Ok(());
        };
        if let Some(resp) = response? {
            charge.add(resp.len());
            rt::write_all_timeout(&mut inbox.stream, &resp, limits.write_timeout).await?;
        }
        drop(charge);
        if !throttle.is_zero() {
            // Past its produce quota the connection reads no request for the
            // throttle time (KIP-219); the response said how long.
            let throttled = async {
                futures::select! {
                    () = rt::sleep(throttle).fuse() => true,
                    _ = stop.recv().fuse() => false,
                }
            };
            if inbox.watching(throttled, true).await? != Some(true) {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertised_addresses_parse() {
        assert_eq!(split_host_port("h:9092"), Some(("h".into(), 9092)));
        assert_eq!(split_host_port("[::1]:1"), Some(("::1".into(), 1)));
        assert_eq!(split_host_port("h"), None);
        assert_eq!(split_host_port(":1"), None);
        assert_eq!(split_host_port("h:x"), None);
    }
}

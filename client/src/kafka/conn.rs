//! One connection to one Kafka broker.
//!
//! Requests are written whole, one after another (a writer lock per
//! connection), each with a fresh correlation id, and any number may be in
//! flight (up to [`ConnectionConfig::max_in_flight`]): pipelining. One reader
//! task per connection reads the responses, checks each frame's size against
//! [`ConnectionConfig::max_frame_bytes`] before it takes the bytes, and
//! hands each payload to the request with its correlation id; the caller
//! decodes it with the response type its request names (kafka-protocol's
//! `Request::Response`), so nobody can read the wrong answer.
//!
//! When the connection breaks (end of stream, an I/O error, a bad frame, a
//! response nobody asked for, a request that timed out, or the last handle
//! dropped), every pending request fails with the same error and the socket
//! is shut down. The cluster (`cluster.rs`) then opens a new connection for
//! the next request to that broker.
//!
//! On connect: TLS if configured, ApiVersions (v3, or v0 after a broker that
//! answers UNSUPPORTED_VERSION, as Kafka answers a version it does not know)
//! to learn each API's range, then SASL (SaslHandshake v1 and
//! SaslAuthenticate: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512) when credentials
//! are set. Each request then goes at the highest version both sides speak
//! within [`SPOKEN`].
//!
//! ```text
//! request:  size i32 | api_key i16 | api_version i16 | correlation_id i32 | client_id
//!           | (tagged fields, flexible versions) | body
//! response: size i32 | correlation_id i32 | (tagged fields, flexible) | body
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::channel::oneshot;
use futures::lock::Mutex as AsyncMutex;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, RequestHeader, ResponseHeader, SaslAuthenticateRequest,
    SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

use super::errors;
use crate::error::{Error, Result};
use crate::tls::{Socket, SocketWriter};
use crate::types::connection::{ConnectionConfig, Credentials, SaslMechanism};
use flume_rt as rt;
use flume_rt::sync::lock;

/// The client id every request carries.
pub(crate) const CLIENT_ID: &str = "flume-client";

/// The APIs this client speaks and the versions it can build and read: the
/// lowest is what Kafka 4.0 still serves (KIP-896) or lower, the highest the
/// last whose shape the client fills in (Fetch 13+ names topics by id,
/// FindCoordinator 4+ batches keys, OffsetFetch 8+ batches groups, ...).
///
/// The group APIs stop at the versions librdkafka's consumers send
/// (JoinGroup v5, SyncGroup v3, Heartbeat v3; LeaveGroup v2, the fields of
/// librdkafka's v1), which Kafka 4 still serves. librdkafka's mock cluster
/// (2.3 and later, as in confluent-kafka's wheels) advertises more than it
/// reads: JoinGroup v6 and SyncGroup v4, their first flexible versions, are
/// read with the old array counts (the joining member is disconnected),
/// LeaveGroup v3+ as v0 (the leave names no member). The versions above
/// add nothing the SDK uses: tagged fields, the protocol type and name
/// again (JoinGroup v7+, SyncGroup v5), static members' batches (LeaveGroup v3+).
pub(crate) const SPOKEN: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 9),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 7),
    (ApiKey::FindCoordinator, 0, 3),
    (ApiKey::JoinGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 3),
    (ApiKey::LeaveGroup, 0, 2),
    (ApiKey::SyncGroup, 0, 3),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::SaslHandshake, 1, 1),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 5),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 1),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ShareGroupHeartbeat, 1, 1),
    (ApiKey::ShareFetch, 1, 1),
    (ApiKey::ShareAcknowledge, 1, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
];

/// The version to use of `key`, given what the broker advertised: the
/// highest both speak, or `None` when the ranges do not meet.
pub(crate) fn pick_version(key: ApiKey, broker: Option<(i16, i16)>) -> Option<i16> {
    let (_, min, max) = SPOKEN.iter().find(|(k, _, _)| *k == key)?;
    let (bmin, bmax) = broker?;
    let v = (*max).min(bmax);
    (v >= (*min).max(bmin)).then_some(v)
}

/// A connection to one Kafka broker; clones share it. The connection
/// closes when the last clone is dropped (or on [`KConn::close`]).
#[derive(Clone)]
pub(crate) struct KConn(Arc<Handle>);

impl std::fmt::Debug for KConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KConn")
            .field("addr", &self.0 .0.addr)
            .finish_non_exhaustive()
    }
}

/// Closes the connection when the last [`KConn`] goes (the reader task
/// holds the [`Inner`] itself, so it could not notice otherwise).
struct Handle(Arc<Inner>);

impl Drop for Handle {
    fn drop(&mut self) {
        self.0.fail(Error::Closed);
    }
}

struct Inner {
    addr: String,
    socket: Socket,
    /// Taken for a whole frame, so frames never interleave and go out in
    /// the order their callers took it.
    writer: AsyncMutex<SocketWriter>,
    pending: Mutex<Pending>,
    next_id: AtomicI32,
    /// Each API's version range as the broker advertised it.
    versions: Mutex<HashMap<i16, (i16, i16)>>,
    slots: (async_channel::Sender<()>, async_channel::Receiver<()>),
    config: ConnectionConfig,
}

struct Pending {
    /// Requests awaiting their responses; `None`: abandoned by its caller
    /// (a fetch given up for another's answer), its response is read and
    /// dropped. At most `max_in_flight` entries (each holds a slot).
    map: HashMap<i32, Option<oneshot::Sender<Result<Bytes>>>>,
    broken: Option<Error>,
}

impl Inner {
    /// Marks the connection broken, fails every pending request with `err`
    /// and shuts the socket down (which also ends the reader task).
    fn fail(&self, err: Error) {
        let drained: Vec<_> = {
            let mut p = lock(&self.pending);
            if p.broken.is_none() {
                p.broken = Some(err.clone());
            }
            p.map.drain().filter_map(|(_, tx)| tx).collect()
        };
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
        for tx in drained {
            let _ = tx.send(Err(err.clone()));
        }
    }

    fn broken(&self) -> Option<Error> {
        lock(&self.pending).broken.clone()
    }

    fn disconnected(&self, reason: impl Into<String>) -> Error {
        Error::Disconnected {
            addr: self.addr.clone(),
            reason: reason.into(),
        }
    }
}

/// Gives an in-flight slot back however the request ends.
struct SlotGuard(async_channel::Receiver<()>);
impl Drop for SlotGuard {
    fn drop(&mut self) {
        let _ = self.0.try_recv();
    }
}

/// Marks a request abandoned when its caller stops waiting before the
/// response came: the reader then drops the response (responses come in
/// order, so an unknown correlation id would mean a broken stream).
struct PendingGuard {
    inner: Arc<Inner>,
    id: i32,
}
impl Drop for PendingGuard {
    fn drop(&mut self) {
        if let Some(entry) = lock(&self.inner.pending).map.get_mut(&self.id) {
            *entry = None;
        }
    }
}

/// Reads responses until the connection breaks; each frame's size is
/// checked before its bytes are taken.
async fn read_loop(inner: Arc<Inner>) {
    let max = inner.config.max_frame_bytes;
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    // Responses read so far: a broker that closes at once says something.
    let mut frames = 0u64;
    let reason = 'read: loop {
        // Every whole frame in the buffer goes to its request.
        while let Some(head) = buf.first_chunk::<4>() {
            // Before the size: a TLS record's header reads as a frame of
            // 352-369 MB, which a high `max_frame_bytes` would wait for.
            if frames == 0 && inner.config.tls.is_none() && is_tls_record(head) {
                break 'read "the broker answered with TLS: this port needs a TLS \
                    connection (ConnectionConfig::tls)"
                    .to_owned();
            }
            let size = i32::from_be_bytes(*head);
            let Some(size) = usize::try_from(size).ok().filter(|s| (4..=max).contains(s)) else {
                break 'read format!("response frame of {size} bytes (the limit is {max})");
            };
            if buf.len() < 4 + size {
                buf.reserve(4 + size - buf.len());
                break;
            }
            frames += 1;
            let frame = buf.split_to(4 + size).freeze().slice(4..);
            let id = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
            let waiter = lock(&inner.pending).map.remove(&id);
            match waiter {
                Some(Some(tx)) => {
                    let _ = tx.send(Ok(frame));
                }
                Some(None) => {}
                None => {
                    break 'read format!(
                        "a response with correlation id {id}, which no request has"
                    )
                }
            }
        }
        if let Some(e) = inner.broken() {
            tracing::trace!(addr = %inner.addr, error = %e, "kafka connection closed");
            return;
        }
        match inner.socket.try_read(&mut chunk) {
            Ok(0)
                if frames == 1
                    && buf.is_empty()
                    && inner.config.credentials.is_none()
                    && !lock(&inner.pending).map.is_empty() =>
            {
                // ApiVersions answered, then closed at the first request: what a
                // Kafka broker does to a client that skips a required SASL login.
                break "the broker closed the connection at the first request after \
                    ApiVersions, as a broker that requires a SASL login does (no \
                    credentials were given: ConnectionConfig::credentials)"
                    .to_owned();
            }
            Ok(0) => break "the broker closed the connection".to_owned(),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if rt::retry(&e) => {
                if let Err(e) = inner.socket.readable().await {
                    break e.to_string();
                }
            }
            Err(e) => break e.to_string(),
        }
    };
    tracing::debug!(addr = %inner.addr, %reason, "kafka connection broken");
    let err = inner.disconnected(reason);
    inner.fail(err);
}

impl KConn {
    /// Connects to `addr`: TCP (and TLS), the versions, the login.
    ///
    /// # Errors
    /// [`Error::Connect`], [`Error::Tls`], [`Error::Auth`], or a broker that
    /// speaks no version this client knows of a needed API.
    pub(crate) async fn connect(addr: &str, config: &ConnectionConfig) -> Result<KConn> {
        let started = std::time::Instant::now();
        let socket = crate::tls::open(addr, config.connect_timeout, config.tls.as_ref()).await?;
        let inner = Arc::new(Inner {
            addr: addr.to_owned(),
            writer: AsyncMutex::new(socket.writer()),
            socket,
            pending: Mutex::new(Pending {
                map: HashMap::new(),
                broken: None,
            }),
            next_id: AtomicI32::new(1),
            versions: Mutex::new(HashMap::new()),
            slots: async_channel::bounded(config.max_in_flight.max(1)),
            config: config.clone(),
        });
        rt::spawn(read_loop(Arc::clone(&inner)));
        let conn = KConn(Arc::new(Handle(inner)));
        let left = config.connect_timeout.saturating_sub(started.elapsed());
        rt::timeout(left.max(Duration::from_millis(100)), conn.negotiate())
            .await
            .ok_or_else(|| Error::Connect {
                addr: addr.to_owned(),
                reason: Arc::new(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "ApiVersions timed out",
                )),
            })??;
        if let Some(creds) = &config.credentials {
            conn.login(creds).await?;
        }
        Ok(conn)
    }

    /// The broker's address.
    pub(crate) fn addr(&self) -> &str {
        &self.0 .0.addr
    }

    /// True once the connection has failed or was closed.
    pub(crate) fn is_broken(&self) -> bool {
        self.0 .0.broken().is_some()
    }

    /// Closes the connection; pending requests fail with [`Error::Closed`].
    pub(crate) fn close(&self) {
        self.0 .0.fail(Error::Closed);
    }

    /// The version to use of `key` on this broker.
    ///
    /// # Errors
    /// [`Error::Protocol`] when the broker does not serve a version this
    /// client speaks (the message names both ranges).
    pub(crate) fn version(&self, key: ApiKey) -> Result<i16> {
        let theirs = lock(&self.0 .0.versions).get(&(key as i16)).copied();
        pick_version(key, theirs).ok_or_else(|| {
            let ours = SPOKEN
                .iter()
                .find(|(k, _, _)| *k == key)
                .map_or("none".to_owned(), |(_, a, b)| format!("{a}..={b}"));
            let theirs = theirs.map_or("none".to_owned(), |(a, b)| format!("{a}..={b}"));
            Error::protocol(format!(
                "broker at {} serves {key:?} versions {theirs}; this client speaks {ours}",
                self.addr()
            ))
        })
    }

    /// Sends `req` at the best version and waits for its response.
    ///
    /// # Errors
    /// Connection failures, the timeout, a response that does not decode.
    /// Error codes inside the response are the caller's to read.
    pub(crate) async fn call<R: Request>(&self, req: &R) -> Result<R::Response> {
        let v = self.version(api_key::<R>()?)?;
        self.call_at(req, v, Duration::ZERO).await
    }

    /// Sends `req` at `version`, allowing `extra` time past the request
    /// timeout (a long-poll fetch's wait), and waits for the response.
    ///
    /// # Errors
    /// As [`KConn::call`].
    pub(crate) async fn call_at<R: Request>(
        &self,
        req: &R,
        version: i16,
        extra: Duration,
    ) -> Result<R::Response> {
        self.start(req, version, extra).await?.await
    }

    /// Writes `req` now and returns the future of its response: requests
    /// started one after another reach the broker in that order (the
    /// producer's ordering rests on it).
    ///
    /// # Errors
    /// A broken connection, a write that fails or times out (which breaks
    /// the connection).
    ///
    /// # Cancel safety
    /// Dropping the returned future abandons the response; dropping this
    /// future while the frame is half written breaks the connection.
    pub(crate) async fn start<R: Request>(
        &self,
        req: &R,
        version: i16,
        extra: Duration,
    ) -> Result<impl std::future::Future<Output = Result<R::Response>> + Send + 'static + use<R>>
    {
        let raw = self.start_raw(req, version, extra, true).await?;
        Ok(async move {
            let payload = match raw {
                Some(f) => f.await?,
                None => return Err(Error::protocol("no response expected")),
            };
            decode_response::<R>(payload, version)
        })
    }

    /// Sends `req` at `version` and returns the response frame undecoded
    /// (for [`decode_response`] after a fix-up).
    ///
    /// # Errors
    /// As [`KConn::call`].
    pub(crate) async fn call_raw<R: Request>(
        &self,
        req: &R,
        version: i16,
        extra: Duration,
    ) -> Result<Bytes> {
        self.start_raw(req, version, extra, true)
            .await?
            .ok_or_else(|| Error::protocol("no response expected"))?
            .await
    }

    /// Writes `req` (a Produce with acks 0) and expects no response.
    ///
    /// # Errors
    /// As [`KConn::start`].
    pub(crate) async fn send_only<R: Request>(&self, req: &R, version: i16) -> Result<()> {
        self.start_raw(req, version, Duration::ZERO, false)
            .await
            .map(|_| ())
    }

    async fn start_raw<R: Request>(
        &self,
        req: &R,
        version: i16,
        extra: Duration,
        answered: bool,
    ) -> Result<Option<impl std::future::Future<Output = Result<Bytes>> + Send + 'static + use<R>>>
    {
        let inner = Arc::clone(&self.0 .0);
        let key = api_key::<R>()?;
        inner.slots.0.send(()).await.map_err(|_| Error::Closed)?;
        let slot = SlotGuard(inner.slots.1.clone());
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed) & i32::MAX;
        let mut buf = BytesMut::with_capacity(256);
        buf.put_i32(0);
        RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(id)
            .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)))
            .encode(&mut buf, R::header_version(version))
            .map_err(|e| Error::protocol(format!("{key:?} v{version} header: {e:#}")))?;
        req.encode(&mut buf, version).map_err(|e| {
            Error::InvalidArgument(format!("{key:?} v{version} does not encode: {e:#}"))
        })?;
        let size = i32::try_from(buf.len() - 4).map_err(|_| {
            Error::InvalidArgument(format!("{key:?} request of {} bytes", buf.len()))
        })?;
        buf[..4].copy_from_slice(&size.to_be_bytes());
        let timeout = inner.config.request_timeout + extra;
        let rx = if answered {
            let (tx, rx) = oneshot::channel();
            let mut p = lock(&inner.pending);
            if let Some(e) = &p.broken {
                return Err(e.clone());
            }
            p.map.insert(id, Some(tx));
            Some((
                rx,
                PendingGuard {
                    inner: Arc::clone(&inner),
                    id,
                },
            ))
        } else {
            None
        };
        {
            let mut w = inner.writer.lock().await;
            if let Some(e) = inner.broken() {
                return Err(e);
            }
            let sent = AtomicUsize::new(0);
            let torn = TornWrite {
                inner: &inner,
                sent: &sent,
                len: buf.len(),
            };
            let written = rt::write_all_timeout_counted(&mut *w, &buf, timeout, &sent).await;
            std::mem::forget(torn);
            if let Err(e) = written {
                let err = if e.kind() == std::io::ErrorKind::TimedOut {
                    timeout_error(key, &inner.addr, timeout)
                } else {
                    inner.disconnected(e.to_string())
                };
                inner.fail(err.clone());
                return Err(err);
            }
        }
        let Some((rx, guard)) = rx else {
            return Ok(None);
        };
        let addr = inner.addr.clone();
        Ok(Some(async move {
            let _slot = slot;
            match rt::timeout(timeout, rx).await {
                Some(Ok(r)) => r,
                Some(Err(_)) => Err(guard
                    .inner
                    .broken()
                    .unwrap_or_else(|| guard.inner.disconnected("connection closed"))),
                None => {
                    // The connection is given up, as Kafka's own clients do:
                    // a late answer would be matched to nothing.
                    let err = timeout_error(key, &addr, timeout);
                    guard.inner.fail(err.clone());
                    Err(err)
                }
            }
        }))
    }

    /// ApiVersions: v3 first; a broker that does not know v3 answers
    /// UNSUPPORTED_VERSION in the v0 format, and v0 follows.
    async fn negotiate(&self) -> Result<()> {
        let req = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("flume-client"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let mut version = 3;
        let resp = loop {
            let raw = self
                .start_raw(&req, version, Duration::ZERO, true)
                .await?
                .ok_or_else(|| Error::protocol("no ApiVersions response"))?
                .await?;
            // The response header is v0 whatever the version (so the broker
            // can answer a version it does not know); the error code comes first.
            let code = raw.get(4..6).map(|b| i16::from_be_bytes([b[0], b[1]]));
            if code == Some(errors::UNSUPPORTED_VERSION) && version > 0 {
                version = 0;
                continue;
            }
            break decode_response::<ApiVersionsRequest>(raw, version)?;
        };
        errors::check(resp.error_code, || {
            format!("ApiVersions at {}", self.addr())
        })?;
        let mut versions = lock(&self.0 .0.versions);
        for k in &resp.api_keys {
            versions.insert(k.api_key, (k.min_version, k.max_version));
        }
        Ok(())
    }

    /// SaslHandshake v1, then SaslAuthenticate: PLAIN in one step, SCRAM in
    /// two with the broker's signature checked.
    async fn login(&self, creds: &Credentials) -> Result<()> {
        use base64::Engine as _;
        use flume_protocol::scram::{ClientExchange, ScramHash};
        let auth_err = |reason: String| Error::Auth {
            addr: self.addr().to_owned(),
            reason,
        };
        let mechanism = match creds.mechanism {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        };
        let hs = self
            .call(
                &SaslHandshakeRequest::default()
                    .with_mechanism(StrBytes::from_static_str(mechanism)),
            )
            .await?;
        if hs.error_code != errors::NONE {
            let offered: Vec<&str> = hs.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(auth_err(format!(
                "the broker does not take {mechanism} ({}; it offers {})",
                errors::name(hs.error_code),
                if offered.is_empty() {
                    "none".to_owned()
                } else {
                    offered.join(", ")
                }
            )));
        }
        let step = |bytes: Vec<u8>| async move {
            let resp = self
                .call(&SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(bytes)))
                .await?;
            if resp.error_code != errors::NONE {
                return Err(auth_err(format!(
                    "{} ({}){}",
                    errors::name(resp.error_code),
                    resp.error_code,
                    resp.error_message
                        .as_deref()
                        .map(|m| format!(": {m}"))
                        .unwrap_or_default()
                )));
            }
            Ok(resp.auth_bytes)
        };
        let hash = match creds.mechanism {
            SaslMechanism::Plain => {
                let mut msg = Vec::new();
                msg.push(0);
                msg.extend_from_slice(creds.username.as_bytes());
                msg.push(0);
                msg.extend_from_slice(creds.password().as_bytes());
                step(msg).await?;
                return Ok(());
            }
            SaslMechanism::ScramSha256 => ScramHash::Sha256,
            SaslMechanism::ScramSha512 => ScramHash::Sha512,
        };
        let mut nonce = [0u8; 18];
        getrandom::fill(&mut nonce).map_err(|e| auth_err(format!("no randomness: {e}")))?;
        let nonce = base64::engine::general_purpose::STANDARD_NO_PAD.encode(nonce);
        let (mut exchange, first) =
            ClientExchange::start_with(hash, &creds.username, creds.password(), &nonce)
                .map_err(|e| auth_err(e.to_string()))?;
        let server_first = step(first).await?;
        let fin = exchange
            .respond(&server_first)
            .map_err(|e| auth_err(e.to_string()))?;
        let server_final = step(fin).await?;
        exchange
            .verify(&server_final)
            .map_err(|e| auth_err(e.to_string()))
    }
}

/// Whether a response's first bytes are a TLS record (an alert or a
/// handshake, TLS 1.x) rather than a Kafka frame's size: a plain client on
/// a TLS port reads that.
fn is_tls_record(head: &[u8; 4]) -> bool {
    matches!(head[0], 0x15 | 0x16) && head[1] == 0x03 && head[2] <= 0x04
}

/// The [`ApiKey`] of request type `R`.
fn api_key<R: Request>() -> Result<ApiKey> {
    ApiKey::try_from(R::KEY).map_err(|()| Error::protocol(format!("unknown API key {}", R::KEY)))
}

/// Decodes a response frame (after its size) to `R`'s response at `version`.
pub(crate) fn decode_response<R: Request>(payload: Bytes, version: i16) -> Result<R::Response> {
    let mut b = payload;
    let bad = |e: anyhow_error::E| {
        Error::protocol(format!(
            "API {} v{version} response does not decode: {}",
            R::KEY,
            e.0
        ))
    };
    ResponseHeader::decode(&mut b, R::Response::header_version(version))
        .map_err(|e| bad(e.into()))?;
    R::Response::decode(&mut b, version).map_err(|e| bad(e.into()))
}

/// kafka-protocol's `anyhow` errors as text (the SDK does not depend on anyhow).
mod anyhow_error {
    pub struct E(pub String);
    impl<T: std::fmt::Display> From<T> for E {
        fn from(e: T) -> Self {
            E(format!("{e:#}"))
        }
    }
}

fn timeout_error(key: ApiKey, addr: &str, timeout: Duration) -> Error {
    Error::Timeout {
        api: api_name(key),
        addr: addr.to_owned(),
        timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
    }
}

/// A static name for the APIs the client sends (for [`Error::Timeout`]).
fn api_name(key: ApiKey) -> &'static str {
    match key {
        ApiKey::Produce => "Produce",
        ApiKey::Fetch => "Fetch",
        ApiKey::ListOffsets => "ListOffsets",
        ApiKey::Metadata => "Metadata",
        ApiKey::OffsetCommit => "OffsetCommit",
        ApiKey::OffsetFetch => "OffsetFetch",
        ApiKey::FindCoordinator => "FindCoordinator",
        ApiKey::JoinGroup => "JoinGroup",
        ApiKey::Heartbeat => "Heartbeat",
        ApiKey::LeaveGroup => "LeaveGroup",
        ApiKey::SyncGroup => "SyncGroup",
        ApiKey::DescribeGroups => "DescribeGroups",
        ApiKey::ListGroups => "ListGroups",
        ApiKey::SaslHandshake => "SaslHandshake",
        ApiKey::ApiVersions => "ApiVersions",
        ApiKey::CreateTopics => "CreateTopics",
        ApiKey::DeleteTopics => "DeleteTopics",
        ApiKey::DeleteRecords => "DeleteRecords",
        ApiKey::DescribeTransactions => "DescribeTransactions",
        ApiKey::ListTransactions => "ListTransactions",
        ApiKey::InitProducerId => "InitProducerId",
        ApiKey::DescribeConfigs => "DescribeConfigs",
        ApiKey::SaslAuthenticate => "SaslAuthenticate",
        ApiKey::CreatePartitions => "CreatePartitions",
        ApiKey::DeleteGroups => "DeleteGroups",
        ApiKey::OffsetDelete => "OffsetDelete",
        ApiKey::ConsumerGroupHeartbeat => "ConsumerGroupHeartbeat",
        ApiKey::ShareGroupHeartbeat => "ShareGroupHeartbeat",
        ApiKey::ShareFetch => "ShareFetch",
        ApiKey::ShareAcknowledge => "ShareAcknowledge",
        _ => "Kafka",
    }
}

/// Breaks the connection if dropped (the caller gave up mid-write) after
/// part of a frame went out: the stream would end in half a frame.
struct TornWrite<'a> {
    inner: &'a Inner,
    sent: &'a AtomicUsize,
    len: usize,
}

impl Drop for TornWrite<'_> {
    fn drop(&mut self) {
        let n = self.sent.load(Ordering::Relaxed);
        if n > 0 && n < self.len {
            self.inner.fail(self.inner.disconnected(format!(
                "request abandoned part-way through its write ({n} of {} bytes)",
                self.len
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_the_highest_both_speak() {
        assert_eq!(pick_version(ApiKey::Fetch, Some((0, 16))), Some(12));
        assert_eq!(pick_version(ApiKey::Fetch, Some((4, 8))), Some(8));
        assert_eq!(pick_version(ApiKey::Fetch, Some((13, 17))), None);
        assert_eq!(pick_version(ApiKey::Fetch, None), None);
        assert_eq!(pick_version(ApiKey::Produce, Some((0, 2))), None);
        assert_eq!(pick_version(ApiKey::EndTxn, Some((0, 4))), None);
        // The group APIs at librdkafka's versions: its mock cluster (2.3+)
        // misreads the flexible JoinGroup v6 and SyncGroup v4 it advertises.
        assert_eq!(pick_version(ApiKey::JoinGroup, Some((0, 6))), Some(5));
        assert_eq!(pick_version(ApiKey::SyncGroup, Some((0, 4))), Some(3));
        assert_eq!(pick_version(ApiKey::LeaveGroup, Some((0, 4))), Some(2));
        // Kafka 4 (JoinGroup v2-9) still meets them.
        assert_eq!(pick_version(ApiKey::JoinGroup, Some((2, 9))), Some(5));
        // Every spoken range is within the codec's.
        for (k, min, max) in SPOKEN {
            let v = k.valid_versions();
            assert!(v.min <= *min && *max <= v.max, "{k:?}");
        }
    }

    #[test]
    fn a_tls_record_is_told_from_a_frame_size() {
        // A TLS alert (TLS 1.2 record version) and a handshake record.
        assert!(is_tls_record(&[0x15, 0x03, 0x03, 0x00]));
        assert!(is_tls_record(&[0x16, 0x03, 0x01, 0x02]));
        // Kafka frame sizes: small ones, and a large one that is no TLS record.
        assert!(!is_tls_record(&[0x00, 0x00, 0x01, 0x00]));
        assert!(!is_tls_record(&[0x15, 0x00, 0x00, 0x00]));
    }
}

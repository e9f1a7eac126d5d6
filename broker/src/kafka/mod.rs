//! The Kafka wire-protocol listener.
//!
//! A second TCP listener on the broker's host that speaks Kafka's protocol
//! to the same engine, so Kafka clients (librdkafka and kcat, the Java
//! client, kafka-python, kafkajs, ...) produce to and consume from Flume's
//! topics. See `docs/kafka.md` for the APIs and versions served.
//!
//! Layout:
//! - this file: what a request handler is given ([`Ctx`]), and requests
//!   answered without a connection (for fuzzing and tests);
//! - [`conn`]: the listener (accept loop, connection limit, shutdown) and
//!   the connection loop (frame size checked before allocating, memory
//!   budget, read/idle and write timeouts; one request at a time per
//!   connection, as Kafka serves them, while the socket is watched for the
//!   peer closing; TLS when the broker has it, the handshake within the read
//!   timeout);
//! - `sasl`: SaslHandshake and SaslAuthenticate, before other requests;
//! - `apis`: the header, the version check and one module per API;
//! - [`records`]: Kafka record batches <-> Flume records;
//! - [`map`]: engine results as Kafka answers them, and Kafka requests as
//!   the engine is asked them (the API modules call the engine themselves,
//!   as the Flume front end's do);
//! - [`errors`]: Kafka's error codes, and the code for each engine error.
//!
//! Messages and record batches are encoded and decoded with the
//! `kafka-protocol` crate, generated from Kafka's own JSON schemas.

pub(crate) mod apis;
mod conn;
pub(crate) mod errors;
pub(crate) mod map;
pub mod records;
mod sasl;

pub use conn::KafkaListener;

use std::net::SocketAddr;
use std::sync::atomic::AtomicI32;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::budget::MemoryBudget;
use crate::config::broker_named::KafkaListeners;
use crate::engine::Engine;
use crate::security::acl::{Operation, Protocol, Resource};
use crate::security::auth::Authenticator;
use crate::security::authz::Subject;
use crate::security::quota::{ConnQuota, Quotas};
use crate::security::Principal;

/// The node id this broker gives itself in Kafka's metadata (it is also the
/// controller and every partition's leader).
pub const NODE_ID: i32 = 0;

/// The cluster id Metadata and DescribeCluster give.
pub const CLUSTER_ID: &str = "flume";

/// What a request handler needs: the engine, what
/// Metadata advertises, and the budgets a request is charged to.
#[derive(Debug)]
pub struct Ctx {
    /// The engine.
    pub engine: Arc<Engine>,
    /// This broker's node id.
    pub node_id: i32,
    /// Host clients are told to connect to.
    pub advertised_host: String,
    /// Port clients are told to connect to.
    pub advertised_port: u16,
    /// This listener by Kafka's `listeners` and `advertised.listeners`.
    pub listeners: Arc<KafkaListeners>,
    /// Most bytes a produced record set may decompress to.
    pub max_decoded_bytes: usize,
    /// The connection's memory budget (fetch responses are charged to it).
    pub memory: Arc<MemoryBudget>,
    /// The small budget waiting fetches count arrivals with.
    pub counting: Arc<MemoryBudget>,
    /// The peer's address as Kafka shows a member's host ("/127.0.0.1").
    pub client_host: String,
    /// Who the peer is (its certificate, then its SASL login), for the ACLs.
    pub principal: Mutex<Principal>,
    /// Produce quota throttle time to report in the Produce response.
    pub throttle_ms: AtomicI32,
    /// The user store SCRAM logins check (`None` where there is none:
    /// [`handle_request`]), which Describe/AlterUserScramCredentials serve.
    pub auth: Option<Arc<Authenticator>>,
}

impl Ctx {
    /// Runs `f` with the connection's principal as a [`Subject`] of the
    /// ACLs (the rules every front end shares).
    pub fn with_subject<T>(&self, f: impl FnOnce(Subject<'_>) -> T) -> T {
        let who = self.who();
        f(Subject::new(self.engine.acl(), &who, Protocol::Kafka))
    }

    /// Kafka's bit field of the operations the principal may do on `res`
    /// (`1 << code` per AclOperation code), over the operations Kafka
    /// defines for its type: what Metadata, DescribeGroups and
    /// DescribeCluster answer when asked to include authorized operations.
    /// Which operations are allowed is the rulebook's
    /// ([`Subject::authorized_operations`]); this maps them to Kafka's
    /// codes: DESCRIBE_CONFIGS and ALTER_CONFIGS follow Flume's DESCRIBE and
    /// ALTER, CLUSTER_ACTION its ALTER and IDEMPOTENT_WRITE its WRITE.
    pub fn authorized_operations(&self, res: Resource<'_>) -> i32 {
        use crate::security::acl::ResourceType;
        // (Kafka's AclOperation code, the Flume operation that grants it).
        const READ: (u32, Operation) = (3, Operation::Read);
        const WRITE: (u32, Operation) = (4, Operation::Write);
        const CREATE: (u32, Operation) = (5, Operation::Create);
        const DELETE: (u32, Operation) = (6, Operation::Delete);
        const ALTER: (u32, Operation) = (7, Operation::Alter);
        const DESCRIBE: (u32, Operation) = (8, Operation::Describe);
        const CLUSTER_ACTION: (u32, Operation) = (9, Operation::Alter);
        const DESCRIBE_CONFIGS: (u32, Operation) = (10, Operation::Describe);
        const ALTER_CONFIGS: (u32, Operation) = (11, Operation::Alter);
        const IDEMPOTENT_WRITE: (u32, Operation) = (12, Operation::Write);
        let ops: &[(u32, Operation)] = match res.kind {
            ResourceType::Topic => &[
                READ,
                WRITE,
                CREATE,
                DELETE,
                ALTER,
                DESCRIBE,
                DESCRIBE_CONFIGS,
                ALTER_CONFIGS,
            ],
            ResourceType::Group => &[READ, DELETE, DESCRIBE],
            ResourceType::Cluster => &[
                CREATE,
                ALTER,
                DESCRIBE,
                CLUSTER_ACTION,
                DESCRIBE_CONFIGS,
                ALTER_CONFIGS,
                IDEMPOTENT_WRITE,
            ],
        };
        let allowed = self.with_subject(|s| s.authorized_operations(res));
        ops.iter()
            .filter(|(_, op)| allowed.contains(op))
            .fold(0i32, |bits, (code, _)| bits | (1 << code))
    }

    fn who(&self) -> std::sync::MutexGuard<'_, Principal> {
        self.principal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set_principal(&self, p: Principal) {
        *self.who() = p;
    }
}

/// Answers one Kafka request frame (without its 4-byte length) against
/// `engine`, as a connection would: `Some(response frame)`, or `None` when
/// no response is due (acks 0) or the connection would be closed. For fuzzing
/// and tests.
pub async fn handle_request(engine: &Arc<Engine>, frame: &[u8]) -> Option<Vec<u8>> {
    let ctx = Ctx {
        engine: Arc::clone(engine),
        node_id: NODE_ID,
        advertised_host: "127.0.0.1".into(),
        advertised_port: 9092,
        listeners: Arc::new(KafkaListeners::new(
            SocketAddr::from(([127, 0, 0, 1], 9092)),
            "127.0.0.1",
            9092,
            false,
            false,
        )),
        max_decoded_bytes: engine.config().max_frame_bytes,
        memory: MemoryBudget::new(usize::MAX),
        counting: MemoryBudget::new(crate::net::COUNTING_BYTES),
        client_host: "/127.0.0.1".into(),
        principal: Mutex::new(Principal::Anonymous),
        throttle_ms: AtomicI32::new(0),
        auth: None,
    };
    apis::handle(&ctx, Bytes::copy_from_slice(frame))
        .await
        .ok()
        .flatten()
}

/// Runs one connection's SASL exchange (SaslHandshake, SaslAuthenticate,
/// or raw tokens after SaslHandshake v0) over `frames` (each without its
/// 4-byte size) against `auth`, as the
/// connection loop would, from 127.0.0.1 with no limits; each answer, until
/// one closes the connection (or a frame does not decode: `None`, closed).
/// For fuzzing and tests.
pub fn handle_sasl_frames<'a>(
    auth: &Arc<Authenticator>,
    frames: impl IntoIterator<Item = &'a [u8]>,
) -> Vec<Option<Vec<u8>>> {
    let peer = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    let mut quota = ConnQuota::new(Quotas::unlimited(), peer, &Principal::Anonymous);
    let mut sasl = sasl::KafkaSasl::new(Arc::clone(auth));
    let mut out = Vec::new();
    for f in frames {
        let outcome = if sasl.wants_raw_token() {
            Some(sasl.raw_token(f, &mut quota))
        } else {
            sasl.handle(Bytes::copy_from_slice(f), &mut quota)
        };
        match outcome {
            None => {
                out.push(None);
                break;
            }
            Some(sasl::Outcome::Reply(r) | sasl::Outcome::LoggedIn(r, _)) => out.push(Some(r)),
            Some(sasl::Outcome::ReplyThenClose(r)) => {
                out.push(Some(r));
                break;
            }
        }
    }
    out
}

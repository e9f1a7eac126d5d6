//! The Flume protocol front end: a connection ([`conn`]) reads frames and
//! hands each request here; [`admit`] dispatches it by API to its module in
//! [`apis`] (decode, authorize, call the engine, encode), and the wire <->
//! domain translations themselves are in [`map`].
//!
//! A PRODUCE is decoded from the shared frame, so its record batches reach
//! the partition writers as slices of the bytes the connection read (no
//! copy). A FETCH's records are read once from the log and copied once, into
//! the response.

use std::sync::Arc;

use bytes::Bytes;
use flume_protocol::{ApiKey, ErrorCode};
use futures::future::BoxFuture;

use crate::budget::MemoryBudget;
use crate::engine::{Engine, FetchMemory};
use crate::metrics::Tracked;
use crate::security::acl::Protocol;
use crate::security::authz::Subject;
use crate::security::Principal;
use tracing::Instrument;

mod apis;
pub(crate) mod conn;
pub(crate) mod map;

/// A response being prepared: resolves to its whole frame.
pub type InFlight = BoxFuture<'static, Vec<u8>>;

/// Most partitions one FETCH may name (each costs a lookup, a listener and a read).
pub const MAX_FETCH_PARTITIONS: usize = 10_000;

/// Handles one request end to end and returns its response frame: what a
/// connection does for each frame it reads (used by the fuzz target).
pub async fn handle_request(
    engine: &Arc<Engine>,
    api_key: i16,
    request_id: i32,
    payload: &[u8],
) -> Vec<u8> {
    let memory = MemoryBudget::new(usize::MAX);
    let counting = MemoryBudget::new(crate::net::COUNTING_BYTES);
    let budgets = FetchMemory {
        response: &memory,
        counting: &counting,
    };
    let request = Request {
        api_key,
        id: request_id,
        payload: Bytes::copy_from_slice(payload),
    };
    admit(engine, budgets, request, &Principal::Anonymous, &mut 0)
        .await
        .await
}

/// One request as a connection read it: the header's fields and the
/// payload, a slice of the frame.
#[derive(Debug, Clone)]
pub struct Request {
    /// The API called.
    pub api_key: i16,
    /// The request id the response carries.
    pub id: i32,
    /// The payload.
    pub payload: Bytes,
}

/// Admits one request: does what must happen in order now (queueing a
/// produce) and returns the future of its response frame. `decoded` is set
/// to the bytes the decoded request holds beyond its frame (an estimate).
/// `principal` is who sent it: with the authorizer on, a request it may not
/// make is answered AUTHORIZATION_FAILED and nothing is done (see
/// `docs/security.md` for what each API needs).
/// The request runs in its `tracing` span, and its latency and outcome go to
/// the metrics when the response is ready (see [`crate::metrics::Tracked`]).
pub async fn admit(
    engine: &Arc<Engine>,
    memory: FetchMemory<'_>,
    request: Request,
    principal: &Principal,
    decoded: &mut usize,
) -> InFlight {
    let tracked = engine.metrics().begin(request.api_key, request.id);
    let response = admit_request(engine, memory, request, principal, decoded, &tracked)
        .instrument(tracked.span().clone())
        .await;
    tracked.finish(response)
}

async fn admit_request(
    engine: &Arc<Engine>,
    memory: FetchMemory<'_>,
    Request {
        api_key,
        id,
        payload: shared,
    }: Request,
    principal: &Principal,
    decoded: &mut usize,
    tracked: &Tracked,
) -> InFlight {
    let payload: &[u8] = &shared;
    let Some(api) = ApiKey::from_i16(api_key) else {
        tracing::debug!(api_key, "unknown api key");
        return apis::error_frame(id, ErrorCode::UnsupportedApi);
    };
    let mut cx = apis::Cx {
        engine,
        who: Subject::new(engine.acl(), principal, Protocol::Flume),
        id,
        memory,
        decoded,
        tracked,
    };
    let cx = &mut cx;
    match api {
        ApiKey::Produce => apis::produce::handle(cx, &shared).await,
        ApiKey::Fetch => apis::fetch::handle(cx, payload),
        ApiKey::GroupFetch => apis::fetch::handle_group(cx, payload),
        ApiKey::JoinGroup => apis::join_group::handle(cx, payload),
        ApiKey::LeaveGroup => apis::leave_group::handle(cx, payload),
        ApiKey::Heartbeat => apis::heartbeat::handle(cx, payload),
        ApiKey::HeartbeatWait => apis::heartbeat_wait::handle(cx, payload),
        ApiKey::OffsetCommit => apis::offset_commit::handle(cx, payload),
        ApiKey::OffsetFetch => apis::offset_fetch::handle(cx, payload),
        ApiKey::CreateTopic => apis::create_topic::handle(cx, payload),
        ApiKey::Metadata => apis::metadata::handle(cx, payload),
        ApiKey::DeleteTopic => apis::delete_topic::handle(cx, payload),
        ApiKey::AlterTopic => apis::alter_topic::handle(cx, payload),
        ApiKey::DescribeTopicConfig => apis::describe_topic_config::handle(cx, payload),
        ApiKey::ListOffsets => apis::list_offsets::handle(cx, payload),
        ApiKey::DeleteGroup => apis::delete_group::handle(cx, payload),
        ApiKey::DeleteRecords => apis::delete_records::handle(cx, payload),
        ApiKey::CreatePartitions => apis::create_partitions::handle(cx, payload),
        ApiKey::DeleteOffsets => apis::delete_offsets::handle(cx, payload),
        ApiKey::ListGroups => apis::list_groups::handle(cx, payload),
        ApiKey::DescribeGroup => apis::describe_group::handle(cx, payload),
        ApiKey::Acls => apis::acls::handle(cx, payload),
        ApiKey::TopicConfigs => apis::topic_configs::handle(cx, payload),
        ApiKey::ListTransactions => apis::list_transactions::handle(cx, payload),
        ApiKey::ShareHeartbeat => apis::share_heartbeat::handle(cx, payload),
        ApiKey::ShareFetch => apis::share_fetch::handle(cx, payload),
        ApiKey::ShareAcknowledge => apis::share_fetch::handle_acknowledge(cx, payload),
        ApiKey::ShareGroupDescribe => apis::share_group_describe::handle(cx, payload),
        ApiKey::ConsumerGroupDescribe => apis::consumer_group_describe::handle(cx, payload),
        // A connection answers AUTHENTICATE and USERS itself (`conn`); here
        // there is no connection state to authenticate.
        ApiKey::Authenticate => apis::error_frame(id, ErrorCode::AuthenticationFailed),
        ApiKey::Users => apis::error_frame(id, ErrorCode::NotAuthorized),
    }
}

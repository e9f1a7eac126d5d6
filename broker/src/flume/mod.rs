//! The Flume protocol front end: decode a request, call the engine in the
//! domain's terms, encode the response. A connection ([`crate::flume::conn`]) hands
//! each frame here and writes back what comes out; the wire <-> domain
//! translations themselves are in [`map`].
//!
//! A PRODUCE is decoded from the shared frame, so its record batches reach
//! the partition writers as slices of the bytes the connection read (no
//! copy). A FETCH's records are read once from the log and copied once, into
//! the response.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flume_protocol::frame;
use flume_protocol::messages::{Decode, Empty, Encode};
use flume_protocol::{
    encode_response_frame, AlterTopicRequest, ApiKey, CreateTopicRequest, DeleteGroupRequest,
    DeleteGroupResponse, DeleteTopicRequest, DescribeTopicConfigRequest, ErrorCode, FetchRequest,
    GroupFetchRequest, HeartbeatRequest, HeartbeatWaitRequest, JoinGroupResponse,
    LeaveGroupRequest, ListOffsetsRequest, MetadataRequest, OffsetCommitRequest,
    OffsetFetchRequest, ProduceRequest, ProduceResponse, ProduceResult,
};
use flume_rt as rt;
use futures::future::BoxFuture;
use futures::FutureExt;

use crate::budget::MemoryBudget;
use crate::config::TopicConfig;
use crate::engine::{Engine, FetchMemory};
use crate::metrics::Tracked;
use crate::security::acl::{Operation, Protocol, Resource};
use crate::security::Principal;
use tracing::Instrument;

pub mod conn;
pub mod map;

/// A response being prepared: resolves to its whole frame.
pub type InFlight = BoxFuture<'static, Vec<u8>>;

/// Most bytes all waiting fetches read at once to count what has arrived (a
/// few chunks; see [`Engine::fetch`]).
pub const COUNTING_BYTES: usize = 4 << 20;

/// Most partitions one FETCH may name (each costs a lookup, a listener and a read).
pub const MAX_FETCH_PARTITIONS: usize = 10_000;

/// Bytes a decoded FETCH holds per partition beyond its topic name: the
/// decoded entry, its resolved partition and its counting state (an estimate).
const FETCH_DECODED_PER_PARTITION: usize = 160;
/// Bytes a decoded JOIN_GROUP holds per topic beyond the name (an estimate).
const JOIN_DECODED_PER_TOPIC: usize = 48;

/// Handles one request end to end and returns its response frame: what a
/// connection does for each frame it reads (used by the fuzz target).
pub async fn handle_request(
    engine: &Arc<Engine>,
    api_key: i16,
    request_id: i32,
    payload: &[u8],
) -> Vec<u8> {
    let memory = MemoryBudget::new(usize::MAX);
    let counting = MemoryBudget::new(COUNTING_BYTES);
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

/// Who asks, for the authorisation checks ([`crate::security::acl`]).
#[derive(Clone, Copy)]
struct Who<'a> {
    engine: &'a Engine,
    principal: &'a Principal,
}

impl Who<'_> {
    /// May the principal do `op` on `res`? (Always, with the authorizer off.)
    #[inline]
    fn may(&self, op: Operation, res: Resource<'_>) -> bool {
        self.engine
            .acl()
            .check(Protocol::Flume, self.principal, op, res)
    }

    /// May it do `op` on every topic named?
    fn may_topics<'t>(&self, op: Operation, mut topics: impl Iterator<Item = &'t str>) -> bool {
        !self.engine.acl().enabled() || topics.all(|t| self.may(op, Resource::topic(t)))
    }

    /// May it act in `group` on these topics (join, commit, read offsets):
    /// READ on the group and on every topic named?
    fn may_read_group<'t>(&self, group: &str, topics: impl Iterator<Item = &'t str>) -> bool {
        self.may(Operation::Read, Resource::group(group))
            && self.may_topics(Operation::Read, topics)
    }

    /// May it create `topic` (CREATE on the topic or on the cluster)?
    fn may_create(&self, topic: &str) -> bool {
        let acl = self.engine.acl();
        acl.permits(self.principal, Operation::Create, Resource::cluster())
            || self.may(Operation::Create, Resource::topic(topic))
    }
}

fn denied(id: i32) -> InFlight {
    error_frame(id, ErrorCode::AuthorizationFailed)
}

fn respond<R: Encode>(id: i32, result: Result<&R, ErrorCode>) -> Vec<u8> {
    let mut buf = Vec::new();
    encode_response_frame(&mut buf, id, result);
    buf
}

fn ready<R: Encode>(id: i32, result: Result<R, ErrorCode>) -> InFlight {
    futures::future::ready(respond(id, result.as_ref().map_err(|e| *e))).boxed()
}

fn error_frame(id: i32, code: ErrorCode) -> InFlight {
    ready::<Empty>(id, Err(code))
}

fn decode<T: Decode>(id: i32, payload: &[u8]) -> Result<T, InFlight> {
    T::decode_exact(payload).map_err(|e| {
        tracing::debug!(request_id = id, error = %e, "request payload does not decode");
        error_frame(id, ErrorCode::InvalidRequest)
    })
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
    let who = Who { engine, principal };
    let response = admit_request(engine, memory, request, who, decoded, &tracked)
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
    who: Who<'_>,
    decoded: &mut usize,
    tracked: &Tracked,
) -> InFlight {
    let payload: &[u8] = &shared;
    let Some(api) = ApiKey::from_i16(api_key) else {
        tracing::debug!(api_key, "unknown api key");
        return error_frame(id, ErrorCode::UnsupportedApi);
    };
    match api {
        ApiKey::Produce => produce(engine, who, id, &shared, tracked).await,
        ApiKey::Fetch => match decode::<FetchRequest>(id, payload) {
            Ok(req)
                if !who.may_topics(
                    Operation::Read,
                    req.partitions.iter().map(|p| p.topic.as_str()),
                ) =>
            {
                denied(id)
            }
            Ok(req) => fetch(engine, memory, id, req, None, decoded, tracked),
            Err(f) => f,
        },
        ApiKey::GroupFetch => match decode::<GroupFetchRequest>(id, payload) {
            Ok(req)
                if !who.may(Operation::Read, Resource::group(&req.group))
                    || !who.may_topics(
                        Operation::Read,
                        req.fetch.partitions.iter().map(|p| p.topic.as_str()),
                    ) =>
            {
                denied(id)
            }
            Ok(GroupFetchRequest {
                group,
                generation,
                member_id,
                fetch: req,
            }) => {
                let member = FetchingMember {
                    group,
                    member_id,
                    generation,
                };
                fetch(engine, memory, id, req, Some(member), decoded, tracked)
            }
            Err(f) => f,
        },
        ApiKey::JoinGroup => join(engine, who, id, payload, decoded),
        ApiKey::LeaveGroup => match decode::<LeaveGroupRequest>(id, payload) {
            Ok(req) if !who.may(Operation::Read, Resource::group(&req.group)) => denied(id),
            Ok(req) => ready(
                id,
                engine
                    .leave_group(&req.group, &req.member_id)
                    .map(|()| Empty),
            ),
            Err(f) => f,
        },
        ApiKey::Heartbeat => match decode::<HeartbeatRequest>(id, payload) {
            Ok(req) if !who.may(Operation::Read, Resource::group(&req.group)) => denied(id),
            Ok(req) => ready(
                id,
                engine
                    .heartbeat(&req.group, &req.member_id, req.generation)
                    .map(|()| Empty),
            ),
            Err(f) => f,
        },
        ApiKey::HeartbeatWait => match decode::<HeartbeatWaitRequest>(id, payload) {
            Ok(req) if !who.may(Operation::Read, Resource::group(&req.group)) => denied(id),
            Ok(req) => {
                let engine = Arc::clone(engine);
                let wait = Duration::from_millis(u64::try_from(req.max_wait_ms).unwrap_or(0));
                async move {
                    let r = engine
                        .heartbeat_wait(&req.group, &req.member_id, req.generation, wait)
                        .await;
                    respond(id, r.map(|()| Empty).as_ref().map_err(|e| *e))
                }
                .boxed()
            }
            Err(f) => f,
        },
        ApiKey::OffsetCommit => match decode::<OffsetCommitRequest>(id, payload) {
            Ok(req)
                if !who
                    .may_read_group(&req.group, req.offsets.iter().map(|o| o.topic.as_str())) =>
            {
                denied(id)
            }
            // The engine hands the write to the offsets writer (off the executor).
            Ok(req) => {
                let engine = Arc::clone(engine);
                async move {
                    let (member, offsets) = map::commit_parts(&req);
                    let r = engine.commit_offsets(member, &offsets).await;
                    let r = r.map(|outcomes| map::commit_response(&req, outcomes));
                    respond(id, r.as_ref().map_err(|e| *e))
                }
                .boxed()
            }
            Err(f) => f,
        },
        ApiKey::OffsetFetch => match decode::<OffsetFetchRequest>(id, payload) {
            Ok(req)
                if !who.may_read_group(&req.group, req.topics.iter().map(|t| t.topic.as_str())) =>
            {
                denied(id)
            }
            Ok(req) => {
                let mut positions = engine.positions(&req.group, map::position_query(&req));
                if engine.acl().enabled() {
                    // Every topic of the group (none named): those it may describe.
                    positions.retain(|p| {
                        engine.acl().permits(
                            who.principal,
                            Operation::Describe,
                            Resource::topic(&p.at.topic),
                        )
                    });
                }
                ready(id, Ok(map::offset_fetch_response(positions)))
            }
            Err(f) => f,
        },
        ApiKey::CreateTopic => match decode::<CreateTopicRequest>(id, payload) {
            Ok(req) if !who.may_create(&req.name) => denied(id),
            Ok(req) => create_topic(engine, id, req),
            Err(f) => f,
        },
        ApiKey::Metadata => match decode::<MetadataRequest>(id, payload) {
            Ok(req) => {
                let mut described = engine.describe(&req.topics);
                if engine.acl().enabled() {
                    // Only what the principal may describe: the rest is not there for it.
                    described.retain(|t| {
                        engine.acl().permits(
                            who.principal,
                            Operation::Describe,
                            Resource::topic(&t.name),
                        )
                    });
                }
                ready(id, Ok(map::metadata_response(described)))
            }
            Err(f) => f,
        },
        ApiKey::DeleteTopic => match decode::<DeleteTopicRequest>(id, payload) {
            Ok(req) if !who.may(Operation::Delete, Resource::topic(&req.name)) => denied(id),
            Ok(req) => {
                let engine = Arc::clone(engine);
                async move {
                    let r = engine.delete_topic(&req.name).await;
                    respond(id, r.map(|()| Empty).as_ref().map_err(|e| e.code()))
                }
                .boxed()
            }
            Err(f) => f,
        },
        ApiKey::AlterTopic => match decode::<AlterTopicRequest>(id, payload) {
            Ok(req) if !who.may(Operation::Alter, Resource::topic(&req.name)) => denied(id),
            Ok(req) => match map::topic_changes(&req) {
                Ok(changes) => {
                    let engine = Arc::clone(engine);
                    async move {
                        let r = engine.alter_topic(&req.name, &changes).await;
                        let r = r.map(|tc| map::topic_settings(&tc));
                        respond(id, r.as_ref().map_err(|e| e.code()))
                    }
                    .boxed()
                }
                Err(code) => error_frame(id, code),
            },
            Err(f) => f,
        },
        ApiKey::DescribeTopicConfig => match decode::<DescribeTopicConfigRequest>(id, payload) {
            Ok(req) if !who.may(Operation::Describe, Resource::topic(&req.name)) => denied(id),
            Ok(req) => ready(
                id,
                engine
                    .topic_config(&req.name)
                    .map(|tc| map::topic_settings(&tc))
                    .ok_or(ErrorCode::UnknownTopic),
            ),
            Err(f) => f,
        },
        ApiKey::ListOffsets => match decode::<ListOffsetsRequest>(id, payload) {
            Ok(req) if req.partitions.len() > MAX_FETCH_PARTITIONS => {
                error_frame(id, ErrorCode::InvalidRequest)
            }
            Ok(req)
                if !who.may_topics(
                    Operation::Read,
                    req.partitions.iter().map(|p| p.topic.as_str()),
                ) =>
            {
                denied(id)
            }
            Ok(req) => {
                *decoded = req
                    .partitions
                    .iter()
                    .map(|p| p.topic.len() + FETCH_DECODED_PER_PARTITION)
                    .sum();
                let engine = Arc::clone(engine);
                async move {
                    let queries = map::offset_queries(&req);
                    let asked: Vec<_> = queries.iter().filter_map(|q| q.clone().ok()).collect();
                    let found = engine.list_offsets(&asked).await;
                    respond(id, Ok(&map::list_offsets_response(&req, &queries, found)))
                }
                .boxed()
            }
            Err(f) => f,
        },
        ApiKey::DeleteGroup => match decode::<DeleteGroupRequest>(id, payload) {
            Ok(req) if !who.may(Operation::Delete, Resource::group(&req.group)) => denied(id),
            Ok(req) => {
                let engine = Arc::clone(engine);
                async move {
                    let r = engine.delete_group(&req.group).await;
                    let r = r.map(|n| DeleteGroupResponse {
                        offsets_dropped: i32::try_from(n).unwrap_or(i32::MAX),
                    });
                    respond(id, r.as_ref().map_err(|e| *e))
                }
                .boxed()
            }
            Err(f) => f,
        },
        ApiKey::ListGroups => match decode::<flume_protocol::ListGroupsRequest>(id, payload) {
            Ok(req) => {
                let mut groups = engine.list_groups();
                if engine.acl().enabled() {
                    groups.retain(|g| {
                        engine.acl().permits(
                            who.principal,
                            Operation::Describe,
                            Resource::group(&g.group),
                        )
                    });
                }
                ready(id, Ok(map::group_listings(groups, &req.states_filter)))
            }
            Err(f) => f,
        },
        ApiKey::DescribeGroup => {
            match decode::<flume_protocol::DescribeGroupRequest>(id, payload) {
                Ok(req) if !who.may(Operation::Describe, Resource::group(&req.group)) => denied(id),
                Ok(req) => {
                    let described = engine.describe_group(&req.group).map(|d| {
                        let end_of = |topic: &str, partition: i32| {
                            engine
                                .topic(topic)
                                .and_then(|t| t.partition(partition).map(|p| p.end_offset()))
                                .map_or(-1, |e| i64::try_from(e).unwrap_or(i64::MAX))
                        };
                        map::group_description(d, engine.committed_for_group(&req.group), &end_of)
                    });
                    ready(id, described.ok_or(ErrorCode::UnknownGroup))
                }
                Err(f) => f,
            }
        }
        // A connection answers AUTHENTICATE itself (crate::flume::conn); here there
        // is no connection state to authenticate.
        ApiKey::Authenticate => error_frame(id, ErrorCode::AuthenticationFailed),
        ApiKey::Users => error_frame(id, ErrorCode::NotAuthorized),
        ApiKey::Acls => acls(engine, who.principal, id, payload),
    }
}

/// ACLS: admins, and with the authorizer on whoever may ALTER the cluster.
fn acls(engine: &Arc<Engine>, principal: &Principal, id: i32, payload: &[u8]) -> InFlight {
    let acl = engine.acl();
    let allowed = acl.is_admin(principal)
        || (acl.enabled()
            && acl.check(
                Protocol::Flume,
                principal,
                Operation::Alter,
                Resource::cluster(),
            ));
    if !allowed {
        tracing::info!(%principal, "ACLS refused: not an admin");
        return denied(id);
    }
    let req = match decode::<flume_protocol::AclsRequest>(id, payload) {
        Ok(r) => r,
        Err(f) => return f,
    };
    let acl = Arc::clone(acl);
    let who = principal.to_string();
    async move {
        let r = rt::unblock(move || crate::security::acl::serve_request(&acl, &who, req)).await;
        respond(id, r.as_ref().map_err(|e| *e))
    }
    .boxed()
}

/// PRODUCE: every entry is queued on its partitions now, in order; the
/// response waits for their acknowledgements.
async fn produce(
    engine: &Arc<Engine>,
    who: Who<'_>,
    id: i32,
    shared: &Bytes,
    tracked: &Tracked,
) -> InFlight {
    let req = match ProduceRequest::decode_shared(shared) {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(request_id = id, error = %e, "request payload does not decode");
            return error_frame(id, ErrorCode::InvalidRequest);
        }
    };
    if let Some(e) = req.entries.first() {
        tracked.about(&e.topic, e.partition);
    }
    // Every entry is checked before any is queued: a denied request appends nothing.
    if engine.acl().enabled() {
        for e in &req.entries {
            let may = who.may(Operation::Write, Resource::topic(&e.topic))
                && (!engine.config().auto_create_topics
                    || engine.topic(&e.topic).is_some()
                    || who.may_create(&e.topic));
            if !may {
                return denied(id);
            }
        }
    }
    let mut pending = Vec::with_capacity(req.entries.len());
    for entry in req.entries {
        pending.push(engine.admit_produce(map::produce_batch(entry)).await);
    }
    let note = tracked.note();
    async move {
        let mut results = Vec::with_capacity(pending.len());
        for p in pending {
            let r = ProduceResult::from(p.finish().await);
            note.failed(r.error, &r.topic, r.partition);
            results.push(r);
        }
        respond(id, Ok(&ProduceResponse { results }))
    }
    .boxed()
}

/// Who sends a GROUP_FETCH: the fetch counts as this member's heartbeat.
struct FetchingMember {
    group: String,
    member_id: String,
    generation: i32,
}

fn fetch(
    engine: &Arc<Engine>,
    memory: FetchMemory<'_>,
    id: i32,
    req: FetchRequest,
    member: Option<FetchingMember>,
    decoded: &mut usize,
    tracked: &Tracked,
) -> InFlight {
    if req.partitions.len() > MAX_FETCH_PARTITIONS {
        tracing::debug!(
            request_id = id,
            partitions = req.partitions.len(),
            "fetch of too many partitions"
        );
        return error_frame(id, ErrorCode::InvalidRequest);
    }
    *decoded = req
        .partitions
        .iter()
        .map(|p| p.topic.len() + FETCH_DECODED_PER_PARTITION)
        .sum();
    if let Some(p) = req.partitions.first() {
        tracked.about(&p.topic, p.partition);
    }
    let mut spec = map::fetch_spec(&req);
    drop(req);
    let note = tracked.note();
    let engine = Arc::clone(engine);
    let response = Arc::clone(memory.response);
    let counting = Arc::clone(memory.counting);
    async move {
        let budgets = FetchMemory {
            response: &response,
            counting: &counting,
        };
        let fetched = match &member {
            None => engine.fetch(&spec, Some(budgets)).await,
            Some(m) => {
                let r = engine
                    .group_fetch(
                        &m.group,
                        &m.member_id,
                        m.generation,
                        &mut spec,
                        Some(budgets),
                    )
                    .await;
                match r {
                    Ok(f) => f,
                    Err(code) => return respond::<Empty>(id, Err(code)),
                }
            }
        };
        if let Some((i, code)) = fetched.first_error {
            if let Some(p) = spec.partitions.get(i) {
                note.failed(code, &p.at.topic, p.at.partition);
            }
        }
        let mut buf = Vec::new();
        let start = frame::begin_response(&mut buf, id);
        buf.extend_from_slice(&0i16.to_be_bytes());
        map::encode_fetched(&mut buf, &spec, fetched);
        frame::finish_frame(&mut buf, start);
        buf
    }
    .boxed()
}

fn join(
    engine: &Arc<Engine>,
    who: Who<'_>,
    id: i32,
    payload: &[u8],
    decoded: &mut usize,
) -> InFlight {
    let req = match map::decode_join(payload, engine.config().max_topics_per_join) {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(request_id = id, error = %e, "JOIN_GROUP refused");
            return error_frame(id, ErrorCode::InvalidRequest);
        }
    };
    if !who.may_read_group(&req.group, req.topics.iter().map(String::as_str)) {
        return denied(id);
    }
    *decoded = req
        .topics
        .iter()
        .map(|t| t.len() + JOIN_DECODED_PER_TOPIC)
        .sum();
    let spec = match map::join_spec(req) {
        Ok(s) => s,
        Err(code) => return error_frame(id, code),
    };
    let engine = Arc::clone(engine);
    async move {
        let r = engine.join_group(spec).await;
        respond(id, r.map(JoinGroupResponse::from).as_ref().map_err(|e| *e))
    }
    .boxed()
}

/// CREATE_TOPIC: -1 in a field takes the broker default, any other value must
/// be in the field's documented range (INVALID_REQUEST naming it otherwise).
fn create_topic(engine: &Arc<Engine>, id: i32, req: CreateTopicRequest) -> InFlight {
    let engine = Arc::clone(engine);
    async move {
        let r = match TopicConfig::from_request(&engine.config().default_topic, &req) {
            Ok(tc) => {
                let name = req.name;
                rt::unblock(move || engine.create_topic(&name, tc).map(|_| Empty))
                    .await
                    .map_err(|e| e.code())
            }
            Err(e) => {
                tracing::debug!(topic = %req.name, error = %e, "CREATE_TOPIC refused");
                Err(ErrorCode::InvalidRequest)
            }
        };
        respond(id, r.as_ref().map_err(|e| *e))
    }
    .boxed()
}

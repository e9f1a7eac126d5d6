//! FETCH and GROUP_FETCH: a long poll through the engine. A GROUP_FETCH is a
//! FETCH by a group member: it counts as the member's heartbeat and is
//! answered as soon as the group starts a rebalance.

use std::sync::Arc;

use flume_protocol::frame;
use flume_protocol::messages::Empty;
use flume_protocol::{ErrorCode, FetchRequest, GroupFetchRequest};
use futures::FutureExt;

use super::super::{map, InFlight, MAX_FETCH_PARTITIONS};
use super::{error_frame, respond, Cx};
use crate::engine::FetchMemory;

/// Bytes a decoded FETCH holds per partition beyond its topic name: the
/// decoded entry, its resolved partition and its counting state (an estimate).
pub(crate) const FETCH_DECODED_PER_PARTITION: usize = 160;

/// Who sends a GROUP_FETCH: the fetch counts as this member's heartbeat.
struct FetchingMember {
    group: String,
    member_id: String,
    generation: i32,
}

/// FETCH: READ on every topic named.
pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    match cx.decode::<FetchRequest>(payload) {
        Ok(req)
            if !cx
                .who
                .read_topics(req.partitions.iter().map(|p| p.topic.as_str())) =>
        {
            cx.denied()
        }
        Ok(req) => fetch(cx, req, None),
        Err(f) => f,
    }
}

/// GROUP_FETCH: READ on the group and on every topic named.
pub(crate) fn handle_group(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    match cx.decode::<GroupFetchRequest>(payload) {
        Ok(req)
            if !cx.who.group_member(
                &req.group,
                req.fetch.partitions.iter().map(|p| p.topic.as_str()),
            ) =>
        {
            cx.denied()
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
            fetch(cx, req, Some(member))
        }
        Err(f) => f,
    }
}

fn fetch(cx: &mut Cx<'_, '_>, req: FetchRequest, member: Option<FetchingMember>) -> InFlight {
    let id = cx.id;
    if req.partitions.len() > MAX_FETCH_PARTITIONS {
        tracing::debug!(
            request_id = id,
            partitions = req.partitions.len(),
            "fetch of too many partitions"
        );
        return error_frame(id, ErrorCode::InvalidRequest);
    }
    *cx.decoded = req
        .partitions
        .iter()
        .map(|p| p.topic.len() + FETCH_DECODED_PER_PARTITION)
        .sum();
    if let Some(p) = req.partitions.first() {
        cx.tracked.about(&p.topic, p.partition);
    }
    let mut spec = map::fetch_spec(&req);
    drop(req);
    let note = cx.tracked.note();
    let engine = Arc::clone(cx.engine);
    let response = Arc::clone(cx.memory.response);
    let counting = Arc::clone(cx.memory.counting);
    async move {
        let budgets = FetchMemory {
            response: &response,
            counting: &counting,
        };
        let fetched = match &member {
            None => engine.records().fetch(&spec, Some(budgets)).await,
            Some(m) => {
                let r = engine
                    .groups()
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

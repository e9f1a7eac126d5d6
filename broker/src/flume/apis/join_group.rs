//! JOIN_GROUP: READ on the group and on every topic it subscribes to; the
//! answer waits for the rebalance. The topic list is capped before its names
//! are decoded.

use std::sync::Arc;

use flume_protocol::{ErrorCode, JoinGroupResponse};
use futures::FutureExt;

use super::super::{map, InFlight};
use super::{error_frame, respond, Cx};

/// Bytes a decoded JOIN_GROUP holds per topic beyond the name (an estimate).
const JOIN_DECODED_PER_TOPIC: usize = 48;

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    let id = cx.id;
    let req = match map::decode_join(payload, cx.engine.config().max_topics_per_join) {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(request_id = id, error = %e, "JOIN_GROUP refused");
            return error_frame(id, ErrorCode::InvalidRequest);
        }
    };
    if !cx
        .who
        .group_member(&req.group, req.topics.iter().map(String::as_str))
    {
        return cx.denied();
    }
    *cx.decoded = req
        .topics
        .iter()
        .map(|t| t.len() + JOIN_DECODED_PER_TOPIC)
        .sum();
    let spec = match map::join_spec(req) {
        Ok(s) => s,
        Err(code) => return error_frame(id, code),
    };
    let engine = Arc::clone(cx.engine);
    async move {
        let r = engine.groups().join_group(spec).await;
        respond(id, r.map(JoinGroupResponse::from).as_ref().map_err(|e| *e))
    }
    .boxed()
}

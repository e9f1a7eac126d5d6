//! SHARE_HEARTBEAT: joins, keeps, updates or leaves a share group (READ on
//! the group and on every topic subscribed to); answers the member's epoch
//! and assignment.

use std::sync::Arc;

use flume_protocol::{ErrorCode, ShareHeartbeatRequest, ShareHeartbeatResponse};
use futures::FutureExt;

use super::super::{map, InFlight};
use super::{error_frame, respond, Cx};
use crate::engine::ShareHeartbeat;

/// Most topics one member subscribes to.
pub(crate) const MAX_SHARE_TOPICS: usize = 1000;

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    let id = cx.id;
    match cx.decode::<ShareHeartbeatRequest>(payload) {
        Ok(req)
            if !cx
                .who
                .group_member(&req.group, req.topics.iter().map(String::as_str)) =>
        {
            cx.denied()
        }
        Ok(req) if !crate::config::valid_group_id(&req.group) => {
            error_frame(id, ErrorCode::InvalidName)
        }
        Ok(req) if req.topics.len() > MAX_SHARE_TOPICS => {
            error_frame(id, ErrorCode::InvalidRequest)
        }
        Ok(mut req) => {
            *cx.decoded = req.topics.iter().map(|t| t.len() + 24).sum();
            let engine = Arc::clone(cx.engine);
            async move {
                let subscribed = if req.topics.is_empty() {
                    None
                } else {
                    req.topics.sort_unstable();
                    req.topics.dedup();
                    Some(std::mem::take(&mut req.topics))
                };
                let hb = ShareHeartbeat {
                    group: &req.group,
                    member_id: &req.member_id,
                    member_epoch: req.member_epoch,
                    subscribed,
                    client_id: &req.client_id,
                    client_host: "",
                };
                let r = engine
                    .shares()
                    .share_heartbeat(hb)
                    .await
                    .map(|b| ShareHeartbeatResponse {
                        member_id: b.member_id,
                        member_epoch: b.member_epoch,
                        heartbeat_interval_ms: i32::try_from(b.heartbeat_interval_ms)
                            .unwrap_or(i32::MAX),
                        assignment: map::topic_partitions(b.assignment),
                    })
                    .map_err(|e| map::share_error_code(&e));
                respond(id, r.as_ref().map_err(|e| *e))
            }
            .boxed()
        }
        Err(f) => f,
    }
}

//! Heartbeat: keeps a member's session alive; tells it to rejoin during a
//! rebalance (REBALANCE_IN_PROGRESS) or that it is fenced
//! (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID).

use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};

use super::super::{errors, Ctx};

pub(super) fn handle(ctx: &Ctx, req: HeartbeatRequest, _version: i16) -> HeartbeatResponse {
    let mut resp = HeartbeatResponse::default();
    if !ctx.with_subject(|s| s.in_group(req.group_id.0.as_str())) {
        resp.error_code = errors::GROUP_AUTHORIZATION_FAILED;
        return resp;
    }
    resp.error_code = ctx.backend.heartbeat(
        req.group_id.0.as_str(),
        req.member_id.as_str(),
        req.generation_id,
    );
    resp
}

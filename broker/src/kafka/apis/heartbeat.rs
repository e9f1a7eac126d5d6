//! Heartbeat: keeps a member's session alive; tells it to rejoin during a
//! rebalance (REBALANCE_IN_PROGRESS) or that it is fenced
//! (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID; v3+ a static member whose group
//! instance id has another member id now: FENCED_INSTANCE_ID).

use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};

use super::super::{errors, Ctx};

pub(super) fn handle(ctx: &Ctx, req: HeartbeatRequest, version: i16) -> HeartbeatResponse {
    let mut resp = HeartbeatResponse::default();
    if !ctx.with_subject(|s| s.in_group(req.group_id.0.as_str())) {
        resp.error_code = errors::GROUP_AUTHORIZATION_FAILED;
        return resp;
    }
    let instance = req
        .group_instance_id
        .as_ref()
        .filter(|_| version >= 3)
        .map(|i| i.as_str());
    resp.error_code = errors::group_result_code(ctx.engine.groups().heartbeat_as(
        req.group_id.0.as_str(),
        (req.member_id.as_str(), instance),
        req.generation_id,
    ));
    resp
}

//! LeaveGroup: the member goes at once and the others rebalance. v3+ names
//! several members, each answered on its own; a member named only by a
//! group instance id is unknown (static membership is not served).

use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse};

use super::super::{errors, Ctx};

pub(super) fn handle(ctx: &Ctx, req: LeaveGroupRequest, version: i16) -> LeaveGroupResponse {
    let group = req.group_id.0.as_str();
    let mut resp = LeaveGroupResponse::default();
    if !ctx.with_subject(|s| s.in_group(group)) {
        resp.error_code = errors::GROUP_AUTHORIZATION_FAILED;
        return resp;
    }
    if version < 3 {
        resp.error_code = ctx.backend.leave_group(group, req.member_id.as_str());
        return resp;
    }
    resp.members = req
        .members
        .into_iter()
        .map(|m| {
            let mut r = MemberResponse::default();
            r.error_code = if m.member_id.is_empty() {
                errors::UNKNOWN_MEMBER_ID
            } else {
                ctx.backend.leave_group(group, m.member_id.as_str())
            };
            r.member_id = m.member_id;
            r.group_instance_id = m.group_instance_id;
            r
        })
        .collect();
    resp
}

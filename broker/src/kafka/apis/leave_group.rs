//! LeaveGroup: the member goes at once and the others rebalance. v3+ names
//! several members, each answered on its own, by member id, by group
//! instance id (a static member; an empty member id removes whichever member
//! has the instance now, as `kafka-consumer-groups --remove-members` does),
//! or both (a static member whose instance has another member id now gets
//! FENCED_INSTANCE_ID and stays).

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
        resp.error_code = errors::group_result_code(
            ctx.engine
                .groups()
                .leave_group_as(group, (req.member_id.as_str(), None)),
        );
        return resp;
    }
    resp.members = req
        .members
        .into_iter()
        .map(|m| {
            let mut r = MemberResponse::default();
            let instance = m.group_instance_id.as_ref().map(|i| i.as_str());
            r.error_code = if m.member_id.is_empty() && instance.is_none() {
                errors::UNKNOWN_MEMBER_ID
            } else {
                errors::group_result_code(
                    ctx.engine
                        .groups()
                        .leave_group_as(group, (m.member_id.as_str(), instance)),
                )
            };
            r.member_id = m.member_id;
            r.group_instance_id = m.group_instance_id;
            r
        })
        .collect();
    resp
}

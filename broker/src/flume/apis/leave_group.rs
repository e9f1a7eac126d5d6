//! LEAVE_GROUP: READ on the group.

use flume_protocol::messages::Empty;
use flume_protocol::LeaveGroupRequest;

use super::super::InFlight;
use super::Cx;

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    match cx.decode::<LeaveGroupRequest>(payload) {
        Ok(req) if !cx.who.in_group(&req.group) => cx.denied(),
        Ok(req) => cx.ready(
            cx.engine
                .groups()
                .leave_group(&req.group, &req.member_id)
                .map(|()| Empty),
        ),
        Err(f) => f,
    }
}

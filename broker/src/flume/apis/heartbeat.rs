//! HEARTBEAT: READ on the group.

use flume_protocol::messages::Empty;
use flume_protocol::HeartbeatRequest;

use super::super::InFlight;
use super::Cx;

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    match cx.decode::<HeartbeatRequest>(payload) {
        Ok(req) if !cx.who.in_group(&req.group) => cx.denied(),
        Ok(req) => cx.ready(
            cx.engine
                .groups()
                .heartbeat(&req.group, &req.member_id, req.generation)
                .map(|()| Empty),
        ),
        Err(f) => f,
    }
}

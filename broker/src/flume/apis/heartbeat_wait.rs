//! HEARTBEAT_WAIT: a heartbeat answered at once with an error, or when the
//! group starts a rebalance (or the wait ends). READ on the group.

use std::sync::Arc;
use std::time::Duration;

use flume_protocol::messages::Empty;
use flume_protocol::HeartbeatWaitRequest;
use futures::FutureExt;

use super::super::InFlight;
use super::{respond, Cx};

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    let id = cx.id;
    match cx.decode::<HeartbeatWaitRequest>(payload) {
        Ok(req) if !cx.who.in_group(&req.group) => cx.denied(),
        Ok(req) => {
            let engine = Arc::clone(cx.engine);
            let wait = Duration::from_millis(u64::try_from(req.max_wait_ms).unwrap_or(0));
            async move {
                let r = engine
                    .groups()
                    .heartbeat_wait(&req.group, &req.member_id, req.generation, wait)
                    .await;
                respond(id, r.map(|()| Empty).as_ref().map_err(|e| *e))
            }
            .boxed()
        }
        Err(f) => f,
    }
}

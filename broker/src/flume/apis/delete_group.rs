//! DELETE_GROUP: DELETE on the group; only while it has no members.

use std::sync::Arc;

use flume_protocol::{DeleteGroupRequest, DeleteGroupResponse};
use futures::FutureExt;

use super::super::InFlight;
use super::{respond, Cx};

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    let id = cx.id;
    match cx.decode::<DeleteGroupRequest>(payload) {
        Ok(req) if !cx.who.delete_group(&req.group) => cx.denied(),
        Ok(req) => {
            let engine = Arc::clone(cx.engine);
            async move {
                let r = engine.groups().delete_group(&req.group).await;
                let r = r.map(|n| DeleteGroupResponse {
                    offsets_dropped: i32::try_from(n).unwrap_or(i32::MAX),
                });
                respond(id, r.as_ref().map_err(|e| *e))
            }
            .boxed()
        }
        Err(f) => f,
    }
}

//! OFFSET_COMMIT: READ on the group and on every topic committed; the engine
//! hands the write to the offsets writer (off the executor).

use std::sync::Arc;

use flume_protocol::OffsetCommitRequest;
use futures::FutureExt;

use super::super::{map, InFlight};
use super::{respond, Cx};

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    let id = cx.id;
    match cx.decode::<OffsetCommitRequest>(payload) {
        Ok(req)
            if !cx
                .who
                .group_member(&req.group, req.offsets.iter().map(|o| o.topic.as_str())) =>
        {
            cx.denied()
        }
        Ok(req) => {
            let engine = Arc::clone(cx.engine);
            async move {
                let (member, offsets) = map::commit_parts(&req);
                let r = engine.groups().commit_offsets(member, &offsets).await;
                let r = r.map(|outcomes| map::commit_response(&req, outcomes));
                respond(id, r.as_ref().map_err(|e| *e))
            }
            .boxed()
        }
        Err(f) => f,
    }
}

//! DELETE_TOPIC: DELETE on the topic.

use std::sync::Arc;

use flume_protocol::messages::Empty;
use flume_protocol::DeleteTopicRequest;
use futures::FutureExt;

use super::super::InFlight;
use super::{respond, Cx};

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    let id = cx.id;
    match cx.decode::<DeleteTopicRequest>(payload) {
        Ok(req) if !cx.who.delete_topic(&req.name) => cx.denied(),
        Ok(req) => {
            let engine = Arc::clone(cx.engine);
            async move {
                let r = engine.admin().delete_topic(&req.name).await;
                respond(id, r.map(|()| Empty).as_ref().map_err(|e| e.code()))
            }
            .boxed()
        }
        Err(f) => f,
    }
}

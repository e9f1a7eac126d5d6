//! ALTER_TOPIC: ALTER on the topic; the settings that change while it runs.

use std::sync::Arc;

use flume_protocol::AlterTopicRequest;
use futures::FutureExt;

use super::super::{map, InFlight};
use super::{error_frame, respond, Cx};

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    let id = cx.id;
    match cx.decode::<AlterTopicRequest>(payload) {
        Ok(req) if !cx.who.alter_topic(&req.name) => cx.denied(),
        Ok(req) => match map::topic_changes(&req) {
            Ok(changes) => {
                let engine = Arc::clone(cx.engine);
                async move {
                    let r = engine.admin().alter_topic(&req.name, &changes).await;
                    let r = r.map(|tc| map::topic_settings(&tc));
                    respond(id, r.as_ref().map_err(|e| e.code()))
                }
                .boxed()
            }
            Err(code) => error_frame(id, code),
        },
        Err(f) => f,
    }
}

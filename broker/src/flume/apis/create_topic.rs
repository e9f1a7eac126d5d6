//! CREATE_TOPIC: CREATE on the cluster or on the topic. -1 in a field takes
//! the broker default; any other value must be in the field's documented
//! range (INVALID_REQUEST naming it otherwise).

use std::sync::Arc;

use flume_protocol::messages::Empty;
use flume_protocol::{CreateTopicRequest, ErrorCode};
use flume_rt as rt;
use futures::FutureExt;

use super::super::InFlight;
use super::{respond, Cx};
use crate::config::TopicConfig;

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    let id = cx.id;
    let req = match cx.decode::<CreateTopicRequest>(payload) {
        Ok(req) if !cx.who.create_topic(&req.name) => return cx.denied(),
        Ok(req) => req,
        Err(f) => return f,
    };
    let engine = Arc::clone(cx.engine);
    async move {
        let r = match TopicConfig::from_request(&engine.records().default_topic(), &req) {
            Ok(tc) => {
                let name = req.name;
                rt::unblock(move || engine.records().create_topic(&name, tc).map(|_| Empty))
                    .await
                    .map_err(|e| e.code())
            }
            Err(e) => {
                tracing::debug!(topic = %req.name, error = %e, "CREATE_TOPIC refused");
                Err(ErrorCode::InvalidRequest)
            }
        };
        respond(id, r.as_ref().map_err(|e| *e))
    }
    .boxed()
}

//! CREATE_PARTITIONS: ALTER on the topic; grows it to the count asked (see
//! `crate::engine::Admin::create_partitions`).

use std::sync::Arc;

use flume_protocol::{CreatePartitionsRequest, CreatePartitionsResponse, ErrorCode};
use futures::FutureExt;

use super::super::InFlight;
use super::{error_frame, respond, Cx};

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    let id = cx.id;
    match cx.decode::<CreatePartitionsRequest>(payload) {
        Ok(req) if !cx.who.create_partitions(&req.topic) => cx.denied(),
        Ok(req) => match u32::try_from(req.partitions) {
            Ok(total) => {
                let engine = Arc::clone(cx.engine);
                async move {
                    let r = engine
                        .admin()
                        .create_partitions(&req.topic, total, req.validate_only != 0)
                        .await;
                    let r = r.map(|before| CreatePartitionsResponse {
                        before: i32::try_from(before).unwrap_or(i32::MAX),
                        partitions: req.partitions,
                    });
                    respond(id, r.as_ref().map_err(|e| e.code()))
                }
                .boxed()
            }
            Err(_) => error_frame(id, ErrorCode::InvalidRequest),
        },
        Err(f) => f,
    }
}

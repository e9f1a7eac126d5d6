//! DELETE_RECORDS: DELETE on the topic; the partition's log start moves
//! (the engine's `delete_records`, as Kafka's DeleteRecords).

use std::sync::Arc;

use flume_protocol::{DeleteRecordsRequest, DeleteRecordsResponse, ErrorCode};
use futures::FutureExt;

use super::super::InFlight;
use super::{respond, Cx};
use crate::domain::TopicPartition;

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    let id = cx.id;
    match cx.decode::<DeleteRecordsRequest>(payload) {
        Ok(req) if !cx.who.delete_records(&req.topic) => cx.denied(),
        Ok(req) => {
            let engine = Arc::clone(cx.engine);
            async move {
                let before = match req.before {
                    -1 => Ok(None),
                    b => u64::try_from(b)
                        .map(Some)
                        .map_err(|_| ErrorCode::OffsetOutOfRange),
                };
                let at = TopicPartition::new(&req.topic, req.partition);
                let r = match before {
                    Ok(before) => engine.admin().delete_records(&at, before).await,
                    Err(e) => Err(e),
                };
                let r = r.map(|start| DeleteRecordsResponse {
                    log_start: i64::try_from(start).unwrap_or(i64::MAX),
                });
                respond(id, r.as_ref().map_err(|e| *e))
            }
            .boxed()
        }
        Err(f) => f,
    }
}

//! LIST_OFFSETS: READ on every topic named; offsets by timestamp, earliest
//! or latest.

use std::sync::Arc;

use flume_protocol::{ErrorCode, ListOffsetsRequest};
use futures::FutureExt;

use super::super::{map, InFlight, MAX_FETCH_PARTITIONS};
use super::fetch::FETCH_DECODED_PER_PARTITION;
use super::{error_frame, respond, Cx};

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    let id = cx.id;
    match cx.decode::<ListOffsetsRequest>(payload) {
        Ok(req) if req.partitions.len() > MAX_FETCH_PARTITIONS => {
            error_frame(id, ErrorCode::InvalidRequest)
        }
        Ok(req)
            if !cx
                .who
                .read_topics(req.partitions.iter().map(|p| p.topic.as_str())) =>
        {
            cx.denied()
        }
        Ok(req) => {
            *cx.decoded = req
                .partitions
                .iter()
                .map(|p| p.topic.len() + FETCH_DECODED_PER_PARTITION)
                .sum();
            let engine = Arc::clone(cx.engine);
            async move {
                let queries = map::offset_queries(&req);
                let asked: Vec<_> = queries.iter().filter_map(|q| q.clone().ok()).collect();
                let found = engine.admin().list_offsets(&asked).await;
                respond(id, Ok(&map::list_offsets_response(&req, &queries, found)))
            }
            .boxed()
        }
        Err(f) => f,
    }
}

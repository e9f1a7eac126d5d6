//! DELETE_OFFSETS: DELETE on the group and READ on the topic (as Kafka's
//! OffsetDelete); the group's committed offsets on the partitions named, or
//! on every partition of the topic (see `crate::engine::Groups::delete_offsets`).

use std::sync::Arc;

use flume_protocol::messages::Empty;
use flume_protocol::{DeleteOffsetsRequest, DeleteOffsetsResponse, DeletedOffset, ErrorCode};
use futures::FutureExt;

use super::super::{InFlight, MAX_FETCH_PARTITIONS};
use super::{error_frame, respond, Cx};
use crate::domain::TopicPartition;

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    let id = cx.id;
    match cx.decode::<DeleteOffsetsRequest>(payload) {
        Ok(req) if req.partitions.len() > MAX_FETCH_PARTITIONS => {
            error_frame(id, ErrorCode::InvalidRequest)
        }
        Ok(req) if !cx.who.delete_group_offsets(&req.group) || !cx.who.read_topic(&req.topic) => {
            cx.denied()
        }
        Ok(req) => {
            let engine = Arc::clone(cx.engine);
            async move {
                let numbers: Vec<i32> = if req.partitions.is_empty() {
                    match engine.records().topic(&req.topic) {
                        Some(t) => {
                            (0..i32::try_from(t.partition_count()).unwrap_or(i32::MAX)).collect()
                        }
                        None => return respond::<Empty>(id, Err(ErrorCode::UnknownTopic)),
                    }
                } else {
                    req.partitions.clone()
                };
                let asked: Vec<TopicPartition> = numbers
                    .iter()
                    .map(|&p| TopicPartition::new(req.topic.clone(), p))
                    .collect();
                let r = engine.groups().delete_offsets(&req.group, &asked).await;
                let r = r.map(|codes| DeleteOffsetsResponse {
                    partitions: numbers
                        .iter()
                        .zip(codes)
                        .map(|(&partition, error)| DeletedOffset { partition, error })
                        .collect(),
                });
                respond(id, r.as_ref().map_err(|e| *e))
            }
            .boxed()
        }
        Err(f) => f,
    }
}

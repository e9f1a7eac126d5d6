//! SHARE_FETCH: a share group member's acknowledgements, applied first, then
//! records acquired for it (READ on the group and on every topic named).
//! SHARE_ACKNOWLEDGE: the acknowledgements alone.

use std::sync::Arc;
use std::time::Duration;

use flume_protocol::{
    AcquiredRecords, ErrorCode, ShareAcknowledgeRequest, ShareAcknowledgeResponse,
    ShareFetchPartition, ShareFetchRequest, ShareFetchResponse,
};
use futures::FutureExt;

use super::super::{map, InFlight, MAX_FETCH_PARTITIONS};
use super::{error_frame, respond, Cx};
use crate::engine::{ShareFetchSpec, ShareTp};

/// Most acknowledgements one request carries.
pub(crate) const MAX_SHARE_ACKS: usize = 10_000;

/// Bytes a decoded acknowledgement or partition holds beyond its topic name (an estimate).
const SHARE_DECODED_PER_ENTRY: usize = 64;

/// SHARE_FETCH.
pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    let id = cx.id;
    let req = match cx.decode::<ShareFetchRequest>(payload) {
        Ok(r) => r,
        Err(f) => return f,
    };
    let topics = req
        .partitions
        .iter()
        .map(|p| p.topic.as_str())
        .chain(req.acknowledgements.iter().map(|a| a.topic.as_str()));
    if !cx.who.group_member(&req.group, topics) {
        return cx.denied();
    }
    if req.partitions.len() > MAX_FETCH_PARTITIONS || req.acknowledgements.len() > MAX_SHARE_ACKS {
        tracing::debug!(
            request_id = id,
            partitions = req.partitions.len(),
            acknowledgements = req.acknowledgements.len(),
            "share fetch of too many partitions or acknowledgements"
        );
        return error_frame(id, ErrorCode::InvalidRequest);
    }
    *cx.decoded = req
        .partitions
        .iter()
        .map(|p| p.topic.len() + SHARE_DECODED_PER_ENTRY)
        .chain(
            req.acknowledgements
                .iter()
                .map(|a| a.topic.len() + SHARE_DECODED_PER_ENTRY),
        )
        .sum();
    if let Some(p) = req.partitions.first() {
        cx.tracked.about(&p.topic, p.partition);
    }
    // The response holds at most about half a frame of records (each
    // partition's first record whole), however many partitions are named.
    let frame_room = cx.engine.config().max_frame_bytes / 2;
    let per_partition = frame_room / req.partitions.len().max(1);
    let max_bytes = usize::try_from(req.max_bytes)
        .unwrap_or(1)
        .clamp(1, per_partition.max(1));
    let engine = Arc::clone(cx.engine);
    async move {
        let (acks, refused) = map::share_acks(req.acknowledgements);
        let acked = if acks.is_empty() && refused.is_empty() {
            Vec::new()
        } else {
            match engine
                .shares()
                .share_acknowledge(&req.group, &req.member_id, &acks)
                .await
            {
                Ok(results) => map::share_ack_codes(results, &refused),
                Err(e) => return respond::<ShareFetchResponse>(id, Err(map::share_error_code(&e))),
            }
        };
        let spec = ShareFetchSpec {
            group: req.group,
            member: req.member_id,
            partitions: req
                .partitions
                .into_iter()
                .map(|p| ShareTp {
                    topic: p.topic,
                    partition: p.partition,
                })
                .collect(),
            max_records: usize::try_from(req.max_records).unwrap_or(1).max(1),
            max_bytes,
            max_wait: Duration::from_millis(u64::try_from(req.max_wait_ms).unwrap_or(0)),
        };
        let fetched = match engine.shares().share_fetch(spec).await {
            Ok(f) => f,
            Err(e) => return respond::<ShareFetchResponse>(id, Err(map::share_error_code(&e))),
        };
        let partitions = fetched
            .into_iter()
            .map(|f| ShareFetchPartition {
                topic: f.tp.topic,
                partition: f.tp.partition,
                error: f
                    .error
                    .as_ref()
                    .map_or(ErrorCode::None, map::share_error_code),
                acquired: f
                    .acquired
                    .iter()
                    .map(|a| AcquiredRecords {
                        first_offset: a.first_offset,
                        last_offset: a.last_offset,
                        delivery_count: i16::try_from(a.delivery_count).unwrap_or(i16::MAX),
                    })
                    .collect(),
                records: f.records.into(),
            })
            .collect();
        let resp = ShareFetchResponse {
            acknowledgements: acked,
            partitions,
        };
        respond(id, Ok(&resp))
    }
    .boxed()
}

/// SHARE_ACKNOWLEDGE.
pub(crate) fn handle_acknowledge(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    let id = cx.id;
    let req = match cx.decode::<ShareAcknowledgeRequest>(payload) {
        Ok(r) => r,
        Err(f) => return f,
    };
    let topics = req.acknowledgements.iter().map(|a| a.topic.as_str());
    if !cx.who.group_member(&req.group, topics) {
        return cx.denied();
    }
    if req.acknowledgements.len() > MAX_SHARE_ACKS {
        return error_frame(id, ErrorCode::InvalidRequest);
    }
    *cx.decoded = req
        .acknowledgements
        .iter()
        .map(|a| a.topic.len() + SHARE_DECODED_PER_ENTRY)
        .sum();
    let engine = Arc::clone(cx.engine);
    async move {
        let (acks, refused) = map::share_acks(req.acknowledgements);
        let r = engine
            .shares()
            .share_acknowledge(&req.group, &req.member_id, &acks)
            .await
            .map(|results| ShareAcknowledgeResponse {
                results: map::share_ack_codes(results, &refused),
            })
            .map_err(|e| map::share_error_code(&e));
        respond(id, r.as_ref().map_err(|e| *e))
    }
    .boxed()
}

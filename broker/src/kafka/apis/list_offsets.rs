//! ListOffsets: earliest (-2), latest (-1), and a timestamp (0 or more): the
//! first offset whose record timestamp is at least it, with that timestamp,
//! or offset -1 and timestamp -1 when no record is that recent (as Kafka);
//! max timestamp (-3, v7+, KIP-734): the first record with the largest
//! timestamp, its offset and timestamp (-1 and -1 when the partition holds
//! none); the local log start (-4, v8+, KIP-1005) is the log start, as
//! this broker tiers nothing; the latest tiered offset (-5, v9+) is offset
//! -1 and timestamp -1, as Kafka answers without tiered storage. Other
//! negative values (and each of these before its version) are answered
//! INVALID_REQUEST. v10's `timeout_ms` bounds remote lookups Flume never
//! makes.

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use super::super::{errors, map, Ctx};
use crate::domain::{OffsetSpec, TopicPartition};

/// Kafka's "the record with the largest timestamp" (KIP-734).
const MAX_TIMESTAMP: i64 = -3;
/// Kafka's "the first offset in local storage" (KIP-1005).
const EARLIEST_LOCAL: i64 = -4;
/// Kafka's "the last offset in tiered storage" (KIP-1005).
const LATEST_TIERED: i64 = -5;

pub(super) async fn handle(
    ctx: &Ctx,
    req: ListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let mut resp = ListOffsetsResponse::default();
    // read_committed (v2+): the latest offset is the last stable one.
    let committed = version >= 2 && req.isolation_level == 1;
    for t in req.topics {
        let mut tr = ListOffsetsTopicResponse::default();
        let name = t.name.0.as_str().to_owned();
        let allowed = ctx.with_subject(|s| s.list_offsets(&name));
        for p in t.partitions {
            let mut pr = ListOffsetsPartitionResponse::default();
            pr.partition_index = p.partition_index;
            pr.timestamp = -1;
            pr.offset = -1;
            if !allowed {
                pr.error_code = errors::TOPIC_AUTHORIZATION_FAILED;
                tr.partitions.push(pr);
                continue;
            }
            let offsets = map::log_bounds(ctx.engine.records().log_bounds(
                &name,
                p.partition_index,
                committed,
            ));
            match offsets {
                Err(code) => pr.error_code = code,
                Ok((start, end)) => match p.timestamp {
                    -2 => pr.offset = start,
                    EARLIEST_LOCAL if version >= 8 => pr.offset = start,
                    LATEST_TIERED if version >= 9 => {}
                    -1 => pr.offset = end,
                    ts if ts >= 0 => {
                        match offset_for_time(ctx, &name, p.partition_index, ts).await {
                            Ok((offset, found)) => {
                                pr.offset = offset;
                                pr.timestamp = found;
                            }
                            Err(code) => pr.error_code = code,
                        }
                    }
                    MAX_TIMESTAMP if version >= 7 => {
                        match max_timestamp(ctx, &name, p.partition_index).await {
                            Ok((offset, found)) => {
                                pr.offset = offset;
                                pr.timestamp = found;
                            }
                            Err(code) => pr.error_code = code,
                        }
                    }
                    _ => pr.error_code = errors::INVALID_REQUEST,
                },
            }
            tr.partitions.push(pr);
        }
        tr.name = t.name;
        resp.topics.push(tr);
    }
    resp
}

/// The offset and timestamp of the first record with a partition's
/// largest timestamp; `(-1, -1)` when it holds none.
///
/// # Errors
/// A Kafka error code.
async fn max_timestamp(ctx: &Ctx, topic: &str, partition: i32) -> Result<(i64, i64), i16> {
    let query = [(
        TopicPartition::new(topic, partition),
        OffsetSpec::MaxTimestamp,
    )];
    let found = ctx.engine.admin().list_offsets(&query).await;
    match found.first() {
        Some(f) if f.error.is_ok() => Ok((f.offset, f.timestamp)),
        Some(f) => Err(errors::kafka_code(f.error)),
        None => Err(errors::UNKNOWN_SERVER_ERROR),
    }
}

/// The first offset of a partition whose record timestamp is at least
/// `timestamp` (ms) and that record's timestamp; `(-1, -1)` when no stored
/// record is that recent, as Kafka answers.
///
/// # Errors
/// A Kafka error code.
async fn offset_for_time(
    ctx: &Ctx,
    topic: &str,
    partition: i32,
    timestamp: i64,
) -> Result<(i64, i64), i16> {
    let query = [(
        TopicPartition::new(topic, partition),
        OffsetSpec::Time(timestamp),
    )];
    let found = ctx.engine.admin().list_offsets(&query).await;
    match found.first() {
        Some(f) if f.error.is_ok() && f.timestamp >= 0 => Ok((f.offset, f.timestamp)),
        Some(f) if f.error.is_ok() => Ok((-1, -1)),
        Some(f) => Err(errors::kafka_code(f.error)),
        None => Err(errors::UNKNOWN_SERVER_ERROR),
    }
}

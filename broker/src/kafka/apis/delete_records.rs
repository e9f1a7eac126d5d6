//! DeleteRecords (v0-2): each partition's log start moves to the offset
//! asked (-1: the high watermark, deleting every record), durably, through
//! the engine (`Log::delete_records`); the answer is the new log start (the
//! low watermark). Needs DELETE on the topic.

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use super::super::{errors, map, Ctx};
use crate::domain::TopicPartition;

pub(super) async fn handle(ctx: &Ctx, req: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let mut resp = DeleteRecordsResponse::default();
    for t in req.topics {
        let name = t.name.0.as_str().to_owned();
        let allowed = ctx.with_subject(|s| s.delete_records(&name));
        let mut out = DeleteRecordsTopicResult::default();
        for p in t.partitions {
            let mut r = DeleteRecordsPartitionResult::default();
            r.partition_index = p.partition_index;
            r.low_watermark = -1;
            let outcome = if !allowed {
                Err(errors::TOPIC_AUTHORIZATION_FAILED)
            } else {
                match p.offset {
                    -1 => delete_records(ctx, &name, p.partition_index, None).await,
                    o => match u64::try_from(o) {
                        Ok(o) => delete_records(ctx, &name, p.partition_index, Some(o)).await,
                        Err(_) => Err(errors::OFFSET_OUT_OF_RANGE),
                    },
                }
            };
            match outcome {
                Ok(start) => r.low_watermark = start,
                Err(code) => r.error_code = code,
            }
            out.partitions.push(r);
        }
        out.name = t.name;
        resp.topics.push(out);
    }
    resp
}

/// Moves a partition's log start to `before` (`None`: its end); the new
/// log start.
async fn delete_records(
    ctx: &Ctx,
    topic: &str,
    partition: i32,
    before: Option<u64>,
) -> Result<i64, i16> {
    ctx.engine
        .admin()
        .delete_records(&TopicPartition::new(topic, partition), before)
        .await
        .map(map::offset)
        .map_err(errors::kafka_code)
}

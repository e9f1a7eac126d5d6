//! DeleteRecords (v0-2): each partition's log start moves to the offset
//! asked (-1: the high watermark, deleting every record), durably, through
//! the engine (`Log::delete_records`); the answer is the new log start (the
//! low watermark). Needs DELETE on the topic.

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use super::super::{errors, Ctx};
use crate::security::acl::{Operation, Resource};

pub(super) async fn handle(ctx: &Ctx, req: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let mut resp = DeleteRecordsResponse::default();
    for t in req.topics {
        let name = t.name.0.as_str().to_owned();
        let allowed = ctx.may(Operation::Delete, Resource::topic(&name));
        let mut out = DeleteRecordsTopicResult::default();
        for p in t.partitions {
            let mut r = DeleteRecordsPartitionResult::default();
            r.partition_index = p.partition_index;
            r.low_watermark = -1;
            let outcome = if !allowed {
                Err(errors::TOPIC_AUTHORIZATION_FAILED)
            } else {
                match p.offset {
                    -1 => {
                        ctx.backend
                            .delete_records(&name, p.partition_index, None)
                            .await
                    }
                    o => match u64::try_from(o) {
                        Ok(o) => {
                            ctx.backend
                                .delete_records(&name, p.partition_index, Some(o))
                                .await
                        }
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

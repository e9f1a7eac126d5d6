//! ListOffsets: earliest (-2) and latest (-1). Flume has no timestamp
//! index, so any other timestamp is answered INVALID_REQUEST.

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use super::super::{errors, Ctx};

pub(super) fn handle(ctx: &Ctx, req: ListOffsetsRequest, _version: i16) -> ListOffsetsResponse {
    let mut resp = ListOffsetsResponse::default();
    resp.topics = req
        .topics
        .into_iter()
        .map(|t| {
            let mut tr = ListOffsetsTopicResponse::default();
            let name = t.name.0.as_str().to_owned();
            tr.partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let mut pr = ListOffsetsPartitionResponse::default();
                    pr.partition_index = p.partition_index;
                    pr.timestamp = -1;
                    match ctx.backend.offsets(&name, p.partition_index) {
                        Err(code) => {
                            pr.error_code = code;
                            pr.offset = -1;
                        }
                        Ok((start, end)) => match p.timestamp {
                            -2 => pr.offset = start,
                            -1 => pr.offset = end,
                            _ => {
                                pr.error_code = errors::INVALID_REQUEST;
                                pr.offset = -1;
                            }
                        },
                    }
                    pr
                })
                .collect();
            tr.name = t.name;
            tr
        })
        .collect();
    resp
}

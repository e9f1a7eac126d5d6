//! OffsetCommit: a group's offsets into Flume's committed-offset store (the
//! one `flume-cli groups lag` and the Flume SDK read), fenced by member and
//! generation as Flume's own commits are. Generation -1 with an empty member
//! id commits from outside the group, allowed while it has no members.
//! Commit metadata strings and leader epochs are not kept.

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};

use super::super::{errors, Ctx};
use crate::domain::TopicPartition;

pub(super) async fn handle(
    ctx: &Ctx,
    req: OffsetCommitRequest,
    _version: i16,
) -> OffsetCommitResponse {
    let offsets: Vec<(TopicPartition, i64)> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    TopicPartition::new(t.name.0.as_str(), p.partition_index),
                    p.committed_offset,
                )
            })
        })
        .collect();
    let result = ctx
        .backend
        .commit_offsets(
            req.group_id.0.as_str(),
            req.member_id.as_str(),
            req.generation_id_or_member_epoch,
            &offsets,
        )
        .await;
    let mut codes = match &result {
        Ok(codes) => codes.clone().into_iter(),
        Err(_) => Vec::new().into_iter(),
    };
    let mut resp = OffsetCommitResponse::default();
    resp.topics = req
        .topics
        .into_iter()
        .map(|t| {
            let mut tr = OffsetCommitResponseTopic::default();
            tr.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut pr = OffsetCommitResponsePartition::default();
                    pr.partition_index = p.partition_index;
                    pr.error_code = match &result {
                        Ok(_) => codes.next().unwrap_or(errors::UNKNOWN_SERVER_ERROR),
                        Err(code) => *code,
                    };
                    pr
                })
                .collect();
            tr.name = t.name;
            tr
        })
        .collect();
    resp
}

//! OffsetCommit: a group's offsets into Flume's committed-offset store (the
//! one `flume-cli groups lag` and the Flume SDK read), fenced by member and
//! generation as Flume's own commits are (v7+: a static member whose group
//! instance id has another member id now gets FENCED_INSTANCE_ID). Generation
//! -1 with an empty member id commits from outside the group, allowed while
//! it has no members. Each
//! offset's metadata string (at most 4096 bytes) and leader epoch are kept
//! with it and returned by OffsetFetch.

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};

use super::super::{errors, Ctx};
use crate::domain::{Member, TopicPartition};
use crate::engine::Committed;

pub(super) async fn handle(
    ctx: &Ctx,
    req: OffsetCommitRequest,
    version: i16,
) -> OffsetCommitResponse {
    // READ on the group (else every partition is GROUP_AUTHORIZATION_FAILED)
    // and on each topic (else its partitions are TOPIC_AUTHORIZATION_FAILED).
    let group_denied = !ctx.with_subject(|s| s.in_group(req.group_id.0.as_str()));
    let topic_denied: Vec<bool> = req
        .topics
        .iter()
        .map(|t| group_denied || !ctx.with_subject(|s| s.read_topic(t.name.0.as_str())))
        .collect();
    let offsets: Vec<(TopicPartition, Committed)> = req
        .topics
        .iter()
        .zip(&topic_denied)
        .filter(|(_, denied)| !**denied)
        .map(|(t, _)| t)
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    TopicPartition::new(t.name.0.as_str(), p.partition_index),
                    Committed {
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: p.committed_metadata.as_ref().map(|m| m.as_str().to_owned()),
                        // Set from the group by the engine.
                        protocol_type: String::new(),
                    },
                )
            })
        })
        .collect();
    let result = if offsets.is_empty() && !req.topics.is_empty() {
        Ok(Vec::new())
    } else {
        let member = Member {
            group: req.group_id.0.as_str(),
            member_id: req.member_id.as_str(),
            generation: req.generation_id_or_member_epoch,
        };
        let instance = req
            .group_instance_id
            .as_ref()
            .filter(|_| version >= 7)
            .map(|i| i.as_str());
        ctx.engine
            .groups()
            .commit_offsets_as(member, instance, &offsets)
            .await
            .map(|codes| codes.into_iter().map(errors::kafka_code).collect())
            .map_err(|e| errors::group_code(&e))
    };
    let mut codes = match &result {
        Ok(codes) => codes.clone().into_iter(),
        Err(_) => Vec::new().into_iter(),
    };
    let mut resp = OffsetCommitResponse::default();
    resp.topics = req
        .topics
        .into_iter()
        .zip(topic_denied)
        .map(|(t, denied)| {
            let mut tr = OffsetCommitResponseTopic::default();
            tr.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut pr = OffsetCommitResponsePartition::default();
                    pr.partition_index = p.partition_index;
                    pr.error_code = partition_code(group_denied, denied, &result, &mut codes);
                    pr
                })
                .collect();
            tr.name = t.name;
            tr
        })
        .collect();
    resp
}

/// One partition's code in an OffsetCommit or TxnOffsetCommit answer: the
/// group's or the topic's authorization failure, else its own code from
/// `result` (taken in request order from `codes`), or the whole commit's.
pub(super) fn partition_code(
    group_denied: bool,
    topic_denied: bool,
    result: &Result<Vec<i16>, i16>,
    codes: &mut impl Iterator<Item = i16>,
) -> i16 {
    match result {
        _ if group_denied => errors::GROUP_AUTHORIZATION_FAILED,
        _ if topic_denied => errors::TOPIC_AUTHORIZATION_FAILED,
        Ok(_) => codes.next().unwrap_or(errors::UNKNOWN_SERVER_ERROR),
        Err(code) => *code,
    }
}

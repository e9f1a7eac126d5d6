//! TxnOffsetCommit: offsets a transaction commits for a group (added with
//! AddOffsetsToTxn), stored in the group only if the transaction commits.
//! v3+ is fenced by the group as OffsetCommit is (KIP-447: the member id,
//! generation and group instance id must be the group's current ones;
//! earlier versions, and v3 with generation -1 and no member id, are not).
//! READ on the group (else every partition GROUP_AUTHORIZATION_FAILED) and
//! on each topic (else its partitions TOPIC_AUTHORIZATION_FAILED).

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};

use super::super::errors::txn_code;
use super::super::{errors, Ctx};
use super::offset_commit::partition_code;
use crate::domain::{Member, TopicPartition};
use crate::engine::TxnOffset;

pub(super) async fn handle(
    ctx: &Ctx,
    req: TxnOffsetCommitRequest,
    version: i16,
) -> TxnOffsetCommitResponse {
    let group = req.group_id.0.as_str();
    let group_denied = !ctx.with_subject(|s| s.in_group(group));
    let topic_denied: Vec<bool> = req
        .topics
        .iter()
        .map(|t| group_denied || !ctx.with_subject(|s| s.read_topic(t.name.0.as_str())))
        .collect();
    let offsets: Vec<(TopicPartition, TxnOffset)> = req
        .topics
        .iter()
        .zip(&topic_denied)
        .filter(|(_, denied)| !**denied)
        .flat_map(|(t, _)| {
            t.partitions.iter().map(|p| {
                (
                    TopicPartition::new(t.name.0.as_str(), p.partition_index),
                    TxnOffset {
                        offset: p.committed_offset,
                        leader_epoch: if version >= 2 {
                            p.committed_leader_epoch
                        } else {
                            -1
                        },
                        metadata: p.committed_metadata.as_ref().map(|m| m.as_str().to_owned()),
                    },
                )
            })
        })
        .collect();
    let (member, instance, generation) = if version >= 3 {
        (
            req.member_id.as_str(),
            req.group_instance_id.as_ref().map(|i| i.as_str()),
            req.generation_id,
        )
    } else {
        ("", None, -1)
    };
    let id = req.transactional_id.0.as_str();
    let result = if offsets.is_empty() {
        Ok(Vec::new())
    } else {
        let m = Member {
            group,
            member_id: member,
            generation,
        };
        ctx.engine
            .transactions().txn_offset_commit(id, req.producer_id.0, req.producer_epoch, m, instance, offsets)
            .await
            .map(|codes| codes.into_iter().map(errors::kafka_code).collect())
            .map_err(|e| {
                tracing::debug!(transactional_id = %id, group, error = %e, "kafka TxnOffsetCommit refused");
                txn_code(&e, version < 3)
            })
    };
    let mut codes = match &result {
        Ok(codes) => codes.clone().into_iter(),
        Err(_) => Vec::new().into_iter(),
    };
    let mut resp = TxnOffsetCommitResponse::default();
    resp.topics = req
        .topics
        .into_iter()
        .zip(topic_denied)
        .map(|(t, denied)| {
            let mut tr = TxnOffsetCommitResponseTopic::default();
            tr.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut pr = TxnOffsetCommitResponsePartition::default();
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

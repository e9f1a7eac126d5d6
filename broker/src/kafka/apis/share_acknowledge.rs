//! ShareAcknowledge (KIP-932): acknowledgements without a fetch (a
//! client's commit, or its close at session epoch -1). The request must fit
//! the member's share session as a ShareFetch does (and moves its epoch
//! on); epoch 0 is refused (a session opens with a fetch). Each partition
//! answers whether its acknowledgements were applied and stored; on close,
//! what the member still holds in the session's partitions is released.

use std::collections::BTreeMap;

use kafka_protocol::messages::share_acknowledge_response::{
    LeaderIdAndEpoch, PartitionData, ShareAcknowledgeTopicResponse,
};
use kafka_protocol::messages::{ShareAcknowledgeRequest, ShareAcknowledgeResponse};
use kafka_protocol::protocol::StrBytes;

use super::super::{errors, Ctx};
use super::share_fetch::{acks_of, apply_acks, group_by_topic, member_of, resolve, Answer, Named};
use crate::engine::{SessionStep, ShareTp};

pub(super) async fn handle(ctx: &Ctx, req: ShareAcknowledgeRequest) -> ShareAcknowledgeResponse {
    let engine = &ctx.engine;
    let mut resp = ShareAcknowledgeResponse::default();
    let (group, member) = match member_of(
        ctx,
        req.group_id.as_ref().map(|g| g.0.as_str()),
        req.member_id.as_ref().map(|m| m.as_str()),
    ) {
        Ok(w) => w,
        Err((code, why)) => {
            resp.error_code = code;
            resp.error_message = why;
            return resp;
        }
    };
    if req.share_session_epoch == 0 {
        resp.error_code = errors::INVALID_SHARE_SESSION_EPOCH;
        resp.error_message = Some(StrBytes::from_static_str(
            "acknowledgements need an open share session (epoch 0 opens one with ShareFetch)",
        ));
        return resp;
    }
    let mut answers: BTreeMap<Named, Answer> = BTreeMap::new();
    let mut acks = BTreeMap::new();
    for t in &req.topics {
        let name = resolve(ctx, t.topic_id);
        for p in &t.partitions {
            let named = Named {
                id: t.topic_id,
                partition: p.partition_index,
            };
            match &name {
                Err(code) => {
                    answers.entry(named).or_default().error = *code;
                }
                Ok(n) => {
                    let tp = ShareTp {
                        topic: n.clone(),
                        partition: p.partition_index,
                    };
                    let batches = p
                        .acknowledgement_batches
                        .iter()
                        .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()));
                    acks.insert(named.clone(), acks_of(&tp, batches));
                    answers.entry(named).or_default();
                }
            }
        }
    }
    // A close's acknowledgements go in while the session is still open: the
    // member may have left its group already (its leave heartbeat raced
    // this close), and its open session is what lets it acknowledge.
    let closing =
        req.share_session_epoch == -1 && engine.shares().share_session_open(group, member);
    let mut acks = Some(acks);
    if closing {
        if let Some(acks) = acks.take() {
            apply_acks(ctx, group, member, acks, &mut answers).await;
        }
    }
    let step = match engine
        .shares()
        .share_session(group, member, req.share_session_epoch, &[], &[])
    {
        Ok(s) => s,
        Err(e) => {
            resp.error_code = errors::share_code(&e);
            resp.error_message = Some(StrBytes::from_string(e.to_string()));
            return resp;
        }
    };
    if let Some(acks) = acks {
        apply_acks(ctx, group, member, acks, &mut answers).await;
    }
    if let SessionStep::Closed(parts) = step {
        if let Err(e) = engine
            .shares()
            .share_release_held(group, member, &parts)
            .await
        {
            resp.error_code = errors::share_code(&e);
            resp.error_message = Some(StrBytes::from_string(e.to_string()));
        }
    }
    resp.responses = group_by_topic(answers, |named, a| {
        // Here the acknowledgement's outcome is the partition's error.
        let (code, message) = if a.error != errors::NONE {
            (a.error, a.error_message)
        } else {
            (a.ack_error, a.ack_message)
        };
        PartitionData::default()
            .with_partition_index(named.partition)
            .with_error_code(code)
            .with_error_message(message.map(StrBytes::from_string))
            .with_current_leader(
                LeaderIdAndEpoch::default()
                    .with_leader_id(ctx.node_id)
                    .with_leader_epoch(0),
            )
    })
    .into_iter()
    .map(|(topic_id, partitions)| {
        ShareAcknowledgeTopicResponse::default()
            .with_topic_id(topic_id)
            .with_partitions(partitions)
    })
    .collect();
    resp
}

//! OffsetDelete (v0): a group's committed offsets on the partitions named
//! go, durably. DELETE on the group (else GROUP_AUTHORIZATION_FAILED for the
//! whole request) and READ on each topic (else TOPIC_AUTHORIZATION_FAILED
//! for its partitions), as Kafka checks. A partition of a topic that a
//! member of the group subscribes to keeps its offset:
//! GROUP_SUBSCRIBED_TO_TOPIC. An unknown group is GROUP_ID_NOT_FOUND.

use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};

use flume_protocol::ErrorCode;

use super::super::{errors, Ctx};
use crate::domain::TopicPartition;

pub(super) async fn handle(
    ctx: &Ctx,
    req: OffsetDeleteRequest,
    _version: i16,
) -> OffsetDeleteResponse {
    let mut resp = OffsetDeleteResponse::default();
    let group = req.group_id.0.as_str();
    if !ctx.with_subject(|s| s.delete_group_offsets(group)) {
        resp.error_code = errors::GROUP_AUTHORIZATION_FAILED;
        return resp;
    }
    // Each partition: Some(code) when answered without the engine.
    let mut asked = Vec::new();
    let mut plan: Vec<Vec<Option<i16>>> = Vec::new();
    for t in &req.topics {
        let name = t.name.0.as_str();
        let readable = ctx.with_subject(|s| s.read_topic(name));
        plan.push(
            t.partitions
                .iter()
                .map(|p| {
                    if readable {
                        asked.push(TopicPartition::new(name, p.partition_index));
                        None
                    } else {
                        Some(errors::TOPIC_AUTHORIZATION_FAILED)
                    }
                })
                .collect(),
        );
    }
    let deleted = match ctx.engine.groups().delete_offsets(group, &asked).await {
        Ok(codes) => Ok(codes
            .into_iter()
            .map(|c| match c {
                ErrorCode::GroupNotEmpty => errors::GROUP_SUBSCRIBED_TO_TOPIC,
                c => errors::kafka_code(c),
            })
            .collect::<Vec<_>>()),
        Err(ErrorCode::UnknownGroup) => Err(errors::GROUP_ID_NOT_FOUND),
        Err(ErrorCode::InvalidName) => Err(errors::INVALID_GROUP_ID),
        Err(c) => Err(errors::kafka_code(c)),
    };
    let mut codes = match deleted {
        Ok(codes) => codes.into_iter(),
        Err(code) => {
            resp.error_code = code;
            return resp;
        }
    };
    for (t, planned) in req.topics.into_iter().zip(plan) {
        let mut tr = OffsetDeleteResponseTopic::default();
        for (p, code) in t.partitions.iter().zip(planned) {
            let mut pr = OffsetDeleteResponsePartition::default();
            pr.partition_index = p.partition_index;
            pr.error_code = code
                .or_else(|| codes.next())
                .unwrap_or(errors::UNKNOWN_SERVER_ERROR);
            tr.partitions.push(pr);
        }
        tr.name = t.name;
        resp.topics.push(tr);
    }
    resp
}

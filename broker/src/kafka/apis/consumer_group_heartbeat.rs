//! ConsumerGroupHeartbeat (KIP-848, `group.protocol=consumer`): joins a
//! consumer-protocol group (epoch 0), keeps a member in it and moves its
//! assignment toward its target, or leaves (-1; -2 for a static member that
//! comes back). The answer carries the member's epoch, the heartbeat
//! interval and its assignment by topic id; the owned partitions the
//! member reports (by topic id) acknowledge revocations. READ on the group
//! is required; topics the member may not describe are left out of its
//! assignment. A regex subscription (`subscribed_topic_regex`, matched
//! against whole topic names) that does not compile gets
//! INVALID_REGULAR_EXPRESSION. v1 (client-made member ids) is served as v0.

use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse};
use kafka_protocol::protocol::StrBytes;

use super::super::map::kafka_id;
use super::super::{errors, Ctx};
use crate::domain::TopicId;
use crate::engine::{ConsumerError, ConsumerGroupError, ConsumerHeartbeat};

pub(super) fn handle(
    ctx: &Ctx,
    client_id: &str,
    req: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    let mut resp = ConsumerGroupHeartbeatResponse::default().with_member_epoch(req.member_epoch);
    let group = req.group_id.0.as_str();
    if !ctx.with_subject(|s| s.in_group(group)) {
        resp.error_code = errors::GROUP_AUTHORIZATION_FAILED;
        return resp;
    }
    let engine = &ctx.engine;
    // Owned partitions by topic name; ids of no topic are left out (nothing
    // of theirs can be assigned).
    let owned = req.topic_partitions.as_ref().map(|tps| {
        let mut owned = crate::engine::Assignment::new();
        for tp in tps {
            if let Some(t) = engine
                .records()
                .topic_by_id(TopicId(tp.topic_id.into_bytes()))
            {
                owned
                    .entry(t.name.clone())
                    .or_default()
                    .extend(tp.partitions.iter().copied());
            }
        }
        owned
    });
    let beat = engine.groups().consumer_heartbeat(ConsumerHeartbeat {
        group,
        member_id: req.member_id.as_str(),
        member_epoch: req.member_epoch,
        instance_id: req.instance_id.as_ref().map(|i| i.as_str()),
        rack_id: req.rack_id.as_ref().map(|r| r.as_str()),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        subscribed: req
            .subscribed_topic_names
            .as_ref()
            .map(|ts| ts.iter().map(|t| t.0.as_str().to_owned()).collect()),
        regex: req.subscribed_topic_regex.as_ref().map(|r| r.as_str()),
        server_assignor: req.server_assignor.as_ref().map(|a| a.as_str()),
        owned,
        client_id,
        client_host: &ctx.client_host,
    });
    match beat {
        Err(e) => {
            resp.error_code = code(&e);
            resp.error_message = Some(StrBytes::from_string(e.to_string()));
        }
        Ok(beat) => {
            resp.member_id = Some(StrBytes::from_string(beat.member_id));
            resp.member_epoch = beat.member_epoch;
            resp.heartbeat_interval_ms =
                i32::try_from(beat.heartbeat_interval_ms).unwrap_or(i32::MAX);
            resp.assignment = beat.assignment.map(|a| {
                let topic_partitions = a
                    .iter()
                    .filter(|(t, _)| ctx.with_subject(|s| s.describe_topic(t)))
                    .filter_map(|(t, ps)| {
                        engine.records().topic(t).map(|topic| {
                            TopicPartitions::default()
                                .with_topic_id(kafka_id(topic.id))
                                .with_partitions(ps.iter().copied().collect())
                        })
                    })
                    .collect();
                Assignment::default().with_topic_partitions(topic_partitions)
            });
        }
    }
    resp
}

/// Kafka's code for a refused heartbeat.
fn code(e: &ConsumerError) -> i16 {
    match e {
        ConsumerError::Group(g) => match g {
            ConsumerGroupError::UnknownMember(_) => errors::UNKNOWN_MEMBER_ID,
            ConsumerGroupError::FencedEpoch { .. } => errors::FENCED_MEMBER_EPOCH,
            ConsumerGroupError::StaleEpoch { .. } => errors::STALE_MEMBER_EPOCH,
            ConsumerGroupError::GroupFull { .. } | ConsumerGroupError::TooManyGroups(_) => {
                errors::GROUP_MAX_SIZE_REACHED
            }
            ConsumerGroupError::UnsupportedAssignor(_) => errors::UNSUPPORTED_ASSIGNOR,
            ConsumerGroupError::UnreleasedInstance(_) => errors::UNRELEASED_INSTANCE_ID,
            ConsumerGroupError::Invalid(_) => errors::INVALID_REQUEST,
            ConsumerGroupError::InvalidRegex(_) => errors::INVALID_REGULAR_EXPRESSION,
        },
        ConsumerError::NotConsumerGroup(_) => errors::GROUP_ID_NOT_FOUND,
        ConsumerError::InvalidGroupId(_) => errors::INVALID_GROUP_ID,
    }
}

//! DescribeTopicPartitions (v0, KIP-966): Metadata's answer for topics,
//! paged by partitions, as newer admin clients describe topics. Topics in
//! name order from the cursor's topic (`Cursor{TopicName, PartitionIndex}`)
//! on; at most `ResponsePartitionLimit` partitions per answer (at least 1,
//! at most [`MAX_PARTITIONS_PER_RESPONSE`], Kafka's default
//! `max.request.partition.size.limit`), and `NextCursor` where the next
//! answer starts when they did not all fit. An empty topic list means every
//! topic the principal may describe; a topic named without DESCRIBE on it is
//! TOPIC_AUTHORIZATION_FAILED (with no id), an unknown one
//! UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for a name Kafka
//! would refuse). A cursor naming a topic not in the list, or a negative
//! partition, is INVALID_REQUEST for every topic asked for, as Kafka answers.
//! Each partition: this broker leads it (epoch 0) and is its only replica,
//! in sync; no eligible leader replicas (KIP-966's ELR) beyond it.

use std::collections::BTreeSet;

use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::super::map::TopicBrief;
use super::super::{errors, Ctx};
use crate::security::acl::Resource;

/// Most partitions one answer lists (Kafka's default
/// `max.request.partition.size.limit`).
pub const MAX_PARTITIONS_PER_RESPONSE: i32 = 2000;

pub(super) fn handle(
    ctx: &Ctx,
    req: DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    let all = req.topics.is_empty();
    let cursor = req
        .cursor
        .as_ref()
        .map(|c| (c.topic_name.0.as_str().to_owned(), c.partition_index));
    let from = cursor.as_ref().map_or("", |(t, _)| t.as_str());
    // Sorted, each once, from the cursor's topic on.
    let names: BTreeSet<String> = if all {
        ctx.engine
            .records()
            .topics()
            .iter()
            .map(|t| t.name.clone())
            .filter(|n| n.as_str() >= from)
            .collect()
    } else {
        req.topics
            .iter()
            .map(|t| t.name.0.as_str().to_owned())
            .filter(|n| n.as_str() >= from)
            .collect()
    };
    if let Some((topic, partition)) = &cursor {
        if !all && !names.contains(topic) {
            return invalid(req, "the topic list does not contain the cursor's topic");
        }
        if *partition < 0 {
            return invalid(req, "the cursor's partition is negative");
        }
    }
    let mut resp = DescribeTopicPartitionsResponse::default();
    let mut denied = Vec::new();
    let mut allowed = Vec::with_capacity(names.len());
    for name in names {
        if all {
            if ctx.with_subject(|s| s.lists_topic(&name)) {
                allowed.push(name);
            }
        } else if ctx.with_subject(|s| s.describe_topic(&name)) {
            allowed.push(name);
        } else {
            // No id: the topic's existence is not disclosed.
            denied.push(topic_error(name, errors::TOPIC_AUTHORIZATION_FAILED));
        }
    }
    let limit = req
        .response_partition_limit
        .clamp(1, MAX_PARTITIONS_PER_RESPONSE);
    let mut remaining = limit;
    for name in allowed {
        if remaining == 0 {
            resp.next_cursor = Some(cursor_at(&name, 0));
            break;
        }
        let Some(t) = ctx
            .engine
            .records()
            .topic(&name)
            .map(|t| TopicBrief::of(&t))
        else {
            if !all {
                let code = if kafka_legal(&name) {
                    errors::UNKNOWN_TOPIC_OR_PARTITION
                } else {
                    errors::INVALID_TOPIC_EXCEPTION
                };
                let mut out = topic_error(name.clone(), code);
                out.topic_authorized_operations = ctx.authorized_operations(Resource::topic(&name));
                resp.topics.push(out);
            }
            continue;
        };
        let start = match &cursor {
            Some((topic, partition)) if *topic == name => *partition,
            _ => 0,
        };
        let end = t.partitions.min(start.saturating_add(remaining));
        let mut out = DescribeTopicPartitionsResponseTopic::default();
        out.name = Some(TopicName(StrBytes::from_string(name.clone())));
        out.topic_id = t.id;
        out.is_internal = false;
        out.topic_authorized_operations = ctx.authorized_operations(Resource::topic(&name));
        out.partitions = (start..end).map(|p| partition(ctx.node_id, p)).collect();
        let listed = i32::try_from(out.partitions.len()).unwrap_or(i32::MAX);
        resp.topics.push(out);
        if end < t.partitions {
            resp.next_cursor = Some(cursor_at(&name, end));
            break;
        }
        remaining -= listed;
    }
    resp.topics.extend(denied);
    resp
}

/// One partition: this broker leads it and is its one replica.
fn partition(node_id: i32, index: i32) -> DescribeTopicPartitionsResponsePartition {
    let mut p = DescribeTopicPartitionsResponsePartition::default();
    p.partition_index = index;
    p.leader_id = BrokerId(node_id);
    p.leader_epoch = 0;
    p.replica_nodes = vec![BrokerId(node_id)];
    p.isr_nodes = vec![BrokerId(node_id)];
    p.eligible_leader_replicas = Some(Vec::new());
    p.last_known_elr = Some(Vec::new());
    p
}

fn cursor_at(topic: &str, partition: i32) -> Cursor {
    let mut c = Cursor::default();
    c.topic_name = TopicName(StrBytes::from_string(topic.to_owned()));
    c.partition_index = partition;
    c
}

fn topic_error(name: String, code: i16) -> DescribeTopicPartitionsResponseTopic {
    let mut t = DescribeTopicPartitionsResponseTopic::default();
    t.name = Some(TopicName(StrBytes::from_string(name)));
    t.error_code = code;
    t.topic_authorized_operations = i32::MIN;
    t
}

/// INVALID_REQUEST for every topic asked for (Kafka's error answer).
fn invalid(req: DescribeTopicPartitionsRequest, why: &str) -> DescribeTopicPartitionsResponse {
    tracing::debug!(why, "kafka DescribeTopicPartitions refused");
    let mut resp = DescribeTopicPartitionsResponse::default();
    resp.topics = req
        .topics
        .into_iter()
        .map(|t| {
            let mut out = topic_error(String::new(), errors::INVALID_REQUEST);
            out.name = Some(t.name);
            out
        })
        .collect();
    resp
}

/// A name Kafka's `Topic.validate` takes: 1 to 249 of `[a-zA-Z0-9._-]`,
/// not `.` or `..` (Flume's own rule also refuses a leading `__`).
fn kafka_legal(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= crate::config::MAX_TOPIC_NAME_LEN
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

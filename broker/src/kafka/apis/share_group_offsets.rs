//! The share-group offsets (KIP-932's admin side): DescribeShareGroupOffsets
//! answers each share-partition's start offset (everything below it is
//! done; -1 where the group has no state for a partition asked for);
//! AlterShareGroupOffsets starts share-partitions afresh at an offset and
//! DeleteShareGroupOffsets forgets a group's state of topics, both only
//! while the group has no members (NON_EMPTY_GROUP). DESCRIBE on the group
//! and the topics to describe; ALTER on the group and READ on the topics to
//! alter; DELETE on the group and READ on the topics to delete.

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponsePartition, AlterShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic;
use kafka_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse, DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::super::map::kafka_id;
use super::super::{errors, Ctx};
use crate::engine::{ShareError, ShareTp};

fn topic_id(ctx: &Ctx, topic: &str) -> Uuid {
    ctx.engine
        .records()
        .topic(topic)
        .map_or(Uuid::nil(), |t| kafka_id(t.id))
}

/// Why a change to `group`'s offsets is refused before looking at them:
/// the principal may not (`allowed` false), or it is not a share group.
fn refused(ctx: &Ctx, group: &str, allowed: bool) -> Option<(i16, Option<StrBytes>)> {
    if !allowed {
        return Some((errors::GROUP_AUTHORIZATION_FAILED, None));
    }
    if !ctx.engine.shares().is_share_group(group) {
        return Some((
            errors::GROUP_ID_NOT_FOUND,
            Some(StrBytes::from_string(format!(
                "{group} is not a share group"
            ))),
        ));
    }
    None
}

fn message(e: &ShareError) -> Option<StrBytes> {
    Some(StrBytes::from_string(e.to_string()))
}

pub(super) fn describe(
    ctx: &Ctx,
    req: DescribeShareGroupOffsetsRequest,
) -> DescribeShareGroupOffsetsResponse {
    let engine = &ctx.engine;
    let groups = req
        .groups
        .iter()
        .map(|g| {
            let name = g.group_id.0.as_str();
            let out =
                DescribeShareGroupOffsetsResponseGroup::default().with_group_id(g.group_id.clone());
            if !ctx.with_subject(|s| s.describe_group_offsets(name)) {
                return out.with_error_code(errors::GROUP_AUTHORIZATION_FAILED);
            }
            let Some(view) = engine.shares().describe_share_group(name) else {
                return out
                    .with_error_code(errors::GROUP_ID_NOT_FOUND)
                    .with_error_message(Some(StrBytes::from_string(format!(
                        "{name} is not a share group"
                    ))));
            };
            let starts: BTreeMap<(String, i32), i64> = view
                .partitions
                .iter()
                .map(|p| ((p.tp.topic.clone(), p.tp.partition), p.start_offset))
                .collect();
            // The partitions asked for, or every one the group has state of.
            let asked: Vec<(String, Vec<i32>)> = match &g.topics {
                Some(ts) => ts
                    .iter()
                    .map(|t| (t.topic_name.0.as_str().to_owned(), t.partitions.clone()))
                    .collect(),
                None => {
                    let mut by: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                    for (t, p) in starts.keys() {
                        by.entry(t.clone()).or_default().push(*p);
                    }
                    by.into_iter().collect()
                }
            };
            let topics = asked
                .into_iter()
                .filter(|(t, _)| ctx.with_subject(|s| s.lists_topic(t)))
                .map(|(t, ps)| {
                    let known = engine.records().topic(&t).is_some();
                    let partitions = ps
                        .iter()
                        .map(|p| {
                            let part = DescribeShareGroupOffsetsResponsePartition::default()
                                .with_partition_index(*p)
                                .with_leader_epoch(0);
                            if !known {
                                return part
                                    .with_start_offset(-1)
                                    .with_error_code(errors::UNKNOWN_TOPIC_OR_PARTITION);
                            }
                            part.with_start_offset(
                                starts.get(&(t.clone(), *p)).copied().unwrap_or(-1),
                            )
                        })
                        .collect();
                    DescribeShareGroupOffsetsResponseTopic::default()
                        .with_topic_id(topic_id(ctx, &t))
                        .with_topic_name(TopicName(StrBytes::from_string(t)))
                        .with_partitions(partitions)
                })
                .collect();
            out.with_topics(topics)
        })
        .collect();
    DescribeShareGroupOffsetsResponse::default().with_groups(groups)
}

pub(super) async fn alter(
    ctx: &Ctx,
    req: AlterShareGroupOffsetsRequest,
) -> AlterShareGroupOffsetsResponse {
    let engine = &ctx.engine;
    let group = req.group_id.0.as_str();
    let resp = AlterShareGroupOffsetsResponse::default();
    if let Some((code, message)) = refused(
        ctx,
        group,
        ctx.with_subject(|s| s.alter_group_offsets(group)),
    ) {
        return resp.with_error_code(code).with_error_message(message);
    }
    // (topic index, partition index) of each start handed to the engine.
    let mut starts = Vec::new();
    let mut placed = Vec::new();
    let mut topics: Vec<AlterShareGroupOffsetsResponseTopic> = Vec::new();
    for (ti, t) in req.topics.iter().enumerate() {
        let name = t.topic_name.0.as_str();
        let allowed = ctx.with_subject(|s| s.read_topic(name));
        let mut partitions = Vec::new();
        for (pi, p) in t.partitions.iter().enumerate() {
            let part = AlterShareGroupOffsetsResponsePartition::default()
                .with_partition_index(p.partition_index);
            if allowed {
                starts.push((
                    ShareTp {
                        topic: name.to_owned(),
                        partition: p.partition_index,
                    },
                    p.start_offset,
                ));
                placed.push((ti, pi));
                partitions.push(part);
            } else {
                partitions.push(part.with_error_code(errors::TOPIC_AUTHORIZATION_FAILED));
            }
        }
        topics.push(
            AlterShareGroupOffsetsResponseTopic::default()
                .with_topic_name(t.topic_name.clone())
                .with_topic_id(topic_id(ctx, name))
                .with_partitions(partitions),
        );
    }
    match engine
        .shares()
        .alter_share_start_offsets(group, &starts)
        .await
    {
        Err(e) => resp
            .with_error_code(errors::share_code(&e))
            .with_error_message(message(&e)),
        Ok(results) => {
            for ((ti, pi), r) in placed.into_iter().zip(results) {
                if let (Err(e), Some(p)) =
                    (r, topics.get_mut(ti).and_then(|t| t.partitions.get_mut(pi)))
                {
                    p.error_code = errors::share_code(&e);
                    p.error_message = message(&e);
                }
            }
            resp.with_responses(topics)
        }
    }
}

pub(super) async fn delete(
    ctx: &Ctx,
    req: DeleteShareGroupOffsetsRequest,
) -> DeleteShareGroupOffsetsResponse {
    let engine = &ctx.engine;
    let group = req.group_id.0.as_str();
    let resp = DeleteShareGroupOffsetsResponse::default();
    if let Some((code, message)) = refused(
        ctx,
        group,
        ctx.with_subject(|s| s.delete_group_offsets(group)),
    ) {
        return resp.with_error_code(code).with_error_message(message);
    }
    let mut names = Vec::new();
    let mut placed = Vec::new();
    let mut topics = Vec::new();
    for (ti, t) in req.topics.iter().enumerate() {
        let name = t.topic_name.0.as_str();
        let out = DeleteShareGroupOffsetsResponseTopic::default()
            .with_topic_name(t.topic_name.clone())
            .with_topic_id(topic_id(ctx, name));
        if ctx.with_subject(|s| s.read_topic(name)) {
            names.push(name.to_owned());
            placed.push(ti);
            topics.push(out);
        } else {
            topics.push(out.with_error_code(errors::TOPIC_AUTHORIZATION_FAILED));
        }
    }
    match engine.shares().delete_share_offsets(group, &names).await {
        Err(e) => resp
            .with_error_code(errors::share_code(&e))
            .with_error_message(message(&e)),
        Ok(results) => {
            for (ti, r) in placed.into_iter().zip(results) {
                if let (Err(e), Some(t)) = (r, topics.get_mut(ti)) {
                    t.error_code = errors::share_code(&e);
                    t.error_message = message(&e);
                }
            }
            resp.with_responses(topics)
        }
    }
}

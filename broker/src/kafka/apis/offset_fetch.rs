//! OffsetFetch: a group's committed offsets from Flume's committed-offset
//! store (-1 where none), for the partitions named or (topics null) every
//! partition the group committed. v8+ asks for several groups at once. The
//! leader epoch and metadata string are those committed (-1 and empty when
//! the commit had none); v9's member id and epoch are not checked (classic
//! groups). `require_stable` (v7+): a partition for which an open
//! transaction holds an offset not committed yet gets UNSTABLE_OFFSET_COMMIT
//! (88) and -1, which the client retries (a plain commit is visible once
//! acknowledged).

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{OffsetFetchRequest, OffsetFetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::super::{errors, map, Ctx};
use crate::domain::TopicPartition;
use crate::engine::Committed;

/// One group's answer: per topic, (partition, what is committed, error).
type Answer = Vec<(TopicName, Vec<(i32, Committed, i16)>)>;

/// UNSTABLE_OFFSET_COMMIT: an open transaction commits an offset for the partition.
const UNSTABLE_OFFSET_COMMIT: i16 = 88;

fn fetch_group(
    ctx: &Ctx,
    group: &str,
    topics: Option<Vec<(TopicName, Vec<i32>)>>,
    require_stable: bool,
) -> Answer {
    let mut answer = fetch_committed(ctx, group, topics);
    if require_stable {
        for (name, rows) in &mut answer {
            for (p, c, e) in rows.iter_mut() {
                if *e == errors::NONE
                    && ctx
                        .engine
                        .transactions()
                        .pending_txn_offset(group, &TopicPartition::new(name.0.as_str(), *p))
                {
                    *c = Committed::at(-1);
                    *e = UNSTABLE_OFFSET_COMMIT;
                }
            }
        }
    }
    answer
}

fn fetch_committed(ctx: &Ctx, group: &str, topics: Option<Vec<(TopicName, Vec<i32>)>>) -> Answer {
    match topics {
        Some(ts) => ts
            .into_iter()
            .map(|(name, parts)| {
                let topic = name.0.as_str().to_owned();
                if !ctx.with_subject(|s| s.describe_topic(&topic)) {
                    let rows = parts
                        .into_iter()
                        .map(|p| (p, Committed::at(-1), errors::TOPIC_AUTHORIZATION_FAILED))
                        .collect();
                    return (name, rows);
                }
                let known = ctx
                    .engine
                    .records()
                    .topic(&topic)
                    .map(|t| map::configured_partitions(&t));
                let rows = parts
                    .into_iter()
                    .map(|p| match known {
                        Some(n) if (0..n).contains(&p) => (
                            p,
                            ctx.engine
                                .groups()
                                .committed_full(group, &topic, p)
                                .unwrap_or(Committed::at(-1)),
                            errors::NONE,
                        ),
                        // Kafka answers -1 without an error for a partition it has no commit of.
                        _ => (p, Committed::at(-1), errors::NONE),
                    })
                    .collect();
                (name, rows)
            })
            .collect(),
        None => {
            let mut out: Answer = Vec::new();
            for (topic, p, o) in ctx.engine.groups().committed_for_group_full(group) {
                if !ctx.with_subject(|s| s.lists_topic(&topic)) {
                    continue;
                }
                match out.last_mut() {
                    Some((name, rows)) if name.0.as_str() == topic => {
                        rows.push((p, o, errors::NONE))
                    }
                    _ => out.push((
                        TopicName(StrBytes::from_string(topic)),
                        vec![(p, o, errors::NONE)],
                    )),
                }
            }
            out
        }
    }
}

/// A commit's metadata as OffsetFetch answers it: empty when there was none.
fn metadata(m: Option<String>) -> StrBytes {
    m.map(StrBytes::from_string).unwrap_or_default()
}

fn group_error(ctx: &Ctx, group: &str) -> i16 {
    if !crate::config::valid_group_id(group) {
        errors::INVALID_GROUP_ID
    } else if !ctx.with_subject(|s| s.describe_group_offsets(group)) {
        errors::GROUP_AUTHORIZATION_FAILED
    } else {
        errors::NONE
    }
}

pub(super) fn handle(ctx: &Ctx, req: OffsetFetchRequest, version: i16) -> OffsetFetchResponse {
    let mut resp = OffsetFetchResponse::default();
    if version >= 8 {
        resp.groups = req
            .groups
            .into_iter()
            .map(|g| {
                let name = g.group_id.0.as_str().to_owned();
                let topics = g.topics.map(|ts| {
                    ts.into_iter()
                        .map(|t| (t.name, t.partition_indexes))
                        .collect()
                });
                let mut gr = OffsetFetchResponseGroup::default();
                gr.error_code = group_error(ctx, &name);
                if gr.error_code == errors::NONE {
                    gr.topics = fetch_group(ctx, &name, topics, req.require_stable)
                        .into_iter()
                        .map(|(tname, rows)| {
                            let mut tr = OffsetFetchResponseTopics::default();
                            tr.name = tname;
                            tr.partitions = rows
                                .into_iter()
                                .map(|(p, c, e)| {
                                    let mut pr = OffsetFetchResponsePartitions::default();
                                    pr.partition_index = p;
                                    pr.committed_offset = c.offset;
                                    pr.committed_leader_epoch = c.leader_epoch;
                                    pr.metadata = Some(metadata(c.metadata));
                                    pr.error_code = e;
                                    pr
                                })
                                .collect();
                            tr
                        })
                        .collect();
                }
                gr.group_id = g.group_id;
                gr
            })
            .collect();
        return resp;
    }
    let group = req.group_id.0.as_str().to_owned();
    let topics = req.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name, t.partition_indexes))
            .collect()
    });
    let error = group_error(ctx, &group);
    if version >= 2 {
        resp.error_code = error;
    }
    if error != errors::NONE {
        return resp;
    }
    resp.topics = fetch_group(ctx, &group, topics, version >= 7 && req.require_stable)
        .into_iter()
        .map(|(tname, rows)| {
            let mut tr = OffsetFetchResponseTopic::default();
            tr.name = tname;
            tr.partitions = rows
                .into_iter()
                .map(|(p, c, e)| {
                    let mut pr = OffsetFetchResponsePartition::default();
                    pr.partition_index = p;
                    pr.committed_offset = c.offset;
                    if version >= 5 {
                        pr.committed_leader_epoch = c.leader_epoch;
                    }
                    pr.metadata = Some(metadata(c.metadata));
                    pr.error_code = e;
                    pr
                })
                .collect();
            tr
        })
        .collect();
    resp
}

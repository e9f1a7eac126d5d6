//! Offsets over Kafka, shared by the admin and the consumers: ListOffsets
//! (by timestamp, earliest, latest) sent to each partition's leader, and a
//! group's committed offsets (OffsetFetch) and commits (OffsetCommit) at
//! its coordinator. Stale leaders and moved coordinators are refreshed and
//! the request sent again, a bounded number of times.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::{
    list_offsets_request, offset_commit_request, offset_fetch_request, ApiKey, BrokerId, GroupId,
    ListOffsetsRequest, OffsetCommitRequest, OffsetFetchRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::cluster::Cluster;
use super::errors;
use crate::error::{Error, Result};
use flume_protocol::ErrorCode;

/// How many times a request refused for a stale leader or coordinator is
/// sent again (after a metadata refresh each time).
pub(crate) const STALE_RETRIES: usize = 8;

pub(crate) fn topic_name(t: &str) -> TopicName {
    TopicName(StrBytes::from_string(t.to_owned()))
}

pub(crate) fn group_id(g: &str) -> GroupId {
    GroupId(StrBytes::from_string(g.to_owned()))
}

/// Flume's code for a Kafka error code inside an answer (per partition):
/// the equivalent, or UNKNOWN.
pub(crate) fn flume_code(code: i16) -> ErrorCode {
    errors::flume_equivalent(code).unwrap_or(ErrorCode::Unknown)
}

/// One partition's answer to ListOffsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Listed {
    pub partition: i32,
    /// Kafka's error code.
    pub error: i16,
    pub offset: i64,
    pub timestamp: i64,
}

/// ListOffsets for each (topic, partition, timestamp) at its leader;
/// answers in no particular order, one per partition asked. Partitions
/// whose leader is stale are asked again after a refresh.
///
/// # Errors
/// Connection failures that outlast the retries; per-partition refusals
/// are in the answers.
pub(crate) async fn list_offsets(
    cluster: &Cluster,
    asks: &[(String, i32, i64)],
) -> Result<Vec<(String, Listed)>> {
    let mut todo: Vec<(String, i32, i64)> = asks.to_vec();
    let mut done = Vec::new();
    for attempt in 0..=STALE_RETRIES {
        let mut by_leader: BTreeMap<i32, Vec<(String, i32, i64, i32)>> = BTreeMap::new();
        let mut stale = Vec::new();
        for (t, p, ts) in todo.drain(..) {
            match cluster.leader(&t, p).await {
                Ok(m) => by_leader
                    .entry(m.leader)
                    .or_default()
                    .push((t, p, ts, m.epoch)),
                Err(e) if e.is_retriable() && attempt < STALE_RETRIES => stale.push((t, p, ts)),
                Err(e) => match e.kafka_code() {
                    Some(code) => done.push((
                        t,
                        Listed {
                            partition: p,
                            error: code,
                            offset: -1,
                            timestamp: -1,
                        },
                    )),
                    None => return Err(e),
                },
            }
        }
        for (leader, parts) in by_leader {
            let conn = match cluster.broker(leader).await {
                Ok(c) => c,
                Err(e) if e.is_retriable() && attempt < STALE_RETRIES => {
                    stale.extend(parts.into_iter().map(|(t, p, ts, _)| (t, p, ts)));
                    continue;
                }
                Err(e) => return Err(e),
            };
            let v = conn.version(ApiKey::ListOffsets)?;
            let mut topics: BTreeMap<String, Vec<list_offsets_request::ListOffsetsPartition>> =
                BTreeMap::new();
            for (t, p, ts, epoch) in &parts {
                let mut lp = list_offsets_request::ListOffsetsPartition::default()
                    .with_partition_index(*p)
                    .with_timestamp(*ts);
                if v >= 4 {
                    lp.current_leader_epoch = *epoch;
                }
                topics.entry(t.clone()).or_default().push(lp);
            }
            let req = ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(t, ps)| {
                            list_offsets_request::ListOffsetsTopic::default()
                                .with_name(topic_name(&t))
                                .with_partitions(ps)
                        })
                        .collect(),
                );
            let resp = match conn.call_at(&req, v, Duration::ZERO).await {
                Ok(r) => r,
                Err(e) if e.is_retriable() && attempt < STALE_RETRIES => {
                    stale.extend(parts.into_iter().map(|(t, p, ts, _)| (t, p, ts)));
                    continue;
                }
                Err(e) => return Err(e),
            };
            for t in resp.topics {
                for p in t.partitions {
                    let asked = parts.iter().find(|(n, i, _, _)| {
                        n.as_str() == t.name.0.as_str() && *i == p.partition_index
                    });
                    let Some((name, _, ts, _)) = asked else {
                        continue;
                    };
                    if errors::is_stale_leader(p.error_code) && attempt < STALE_RETRIES {
                        stale.push((name.clone(), p.partition_index, *ts));
                        continue;
                    }
                    done.push((
                        name.clone(),
                        Listed {
                            partition: p.partition_index,
                            error: p.error_code,
                            offset: p.offset,
                            timestamp: p.timestamp,
                        },
                    ));
                }
            }
        }
        if stale.is_empty() {
            break;
        }
        let topics: Vec<String> = {
            let mut ts: Vec<String> = stale.iter().map(|(t, _, _)| t.clone()).collect();
            ts.sort();
            ts.dedup();
            ts
        };
        cluster.refresh_stale(&topics).await?;
        todo = stale;
    }
    Ok(done)
}

/// The earliest and latest offsets of every partition of `topics` (each
/// from its leader): (topic, partition) -> (log start, log end), -1 where
/// the partition's leader refused.
///
/// # Errors
/// As [`list_offsets`]; an unknown topic.
pub(crate) async fn watermarks(
    cluster: &Cluster,
    parts: &[(String, i32)],
) -> Result<BTreeMap<(String, i32), (i64, i64)>> {
    // Two requests: Kafka refuses a partition named twice in one.
    let mut out: BTreeMap<(String, i32), (i64, i64)> = parts
        .iter()
        .map(|(t, p)| ((t.clone(), *p), (-1, -1)))
        .collect();
    for (ts, latest) in [(-2, false), (-1, true)] {
        let asks: Vec<(String, i32, i64)> =
            parts.iter().map(|(t, p)| (t.clone(), *p, ts)).collect();
        for (t, l) in list_offsets(cluster, &asks).await? {
            if l.error != errors::NONE {
                continue;
            }
            if let Some(w) = out.get_mut(&(t, l.partition)) {
                if latest {
                    w.1 = l.offset;
                } else {
                    w.0 = l.offset;
                }
            }
        }
    }
    Ok(out)
}

/// A group's committed offsets: of `parts`, or (`None`) of every partition
/// it committed. (topic, partition) -> (offset, Kafka error code); -1
/// where nothing is committed.
///
/// # Errors
/// Connection failures, group-level refusals (GROUP_AUTHORIZATION_FAILED ...).
pub(crate) async fn committed(
    cluster: &Cluster,
    group: &str,
    parts: Option<&[(String, i32)]>,
) -> Result<BTreeMap<(String, i32), (i64, i16)>> {
    let mut last = None;
    for _ in 0..=STALE_RETRIES {
        let conn = cluster.coordinator(group).await?;
        let v = conn.version(ApiKey::OffsetFetch)?;
        let topics = match parts {
            None if v < 2 => {
                return Err(Error::protocol(
                    "the broker's OffsetFetch cannot list every partition (v2+)",
                ));
            }
            None => None,
            Some(parts) => {
                let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
                for (t, p) in parts {
                    by_topic.entry(t.as_str()).or_default().push(*p);
                }
                Some(
                    by_topic
                        .into_iter()
                        .map(|(t, ps)| {
                            offset_fetch_request::OffsetFetchRequestTopic::default()
                                .with_name(topic_name(t))
                                .with_partition_indexes(ps)
                        })
                        .collect(),
                )
            }
        };
        let req = OffsetFetchRequest::default()
            .with_group_id(group_id(group))
            .with_topics(topics);
        let resp = match conn.call_at(&req, v, Duration::ZERO).await {
            Ok(r) => r,
            Err(e) if e.is_retriable() => {
                cluster.forget_coordinator(group);
                last = Some(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        if errors::is_coordinator_moved(resp.error_code) {
            cluster.forget_coordinator(group);
            last = Some(errors::error(resp.error_code, format!("group {group}")));
            super::backoff(cluster).await;
            continue;
        }
        errors::check(resp.error_code, || format!("group {group}"))?;
        let mut out = BTreeMap::new();
        let mut moved = false;
        for t in resp.topics {
            for p in t.partitions {
                moved |= errors::is_coordinator_moved(p.error_code);
                out.insert(
                    (t.name.0.to_string(), p.partition_index),
                    (p.committed_offset, p.error_code),
                );
            }
        }
        if moved {
            cluster.forget_coordinator(group);
            super::backoff(cluster).await;
            continue;
        }
        return Ok(out);
    }
    Err(last.unwrap_or_else(|| errors::error(errors::COORDINATOR_NOT_AVAILABLE, group)))
}

/// Commits `offsets` for `group` as member `member` of `generation`
/// (-1 and "" from outside the group). Per-partition refusals come back as
/// the first error.
///
/// # Errors
/// ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS (Flume's
/// codes through [`Error::code`]), connection failures.
pub(crate) async fn commit(
    cluster: &Cluster,
    group: &str,
    generation: i32,
    member: &str,
    offsets: &[(String, i32, i64)],
) -> Result<()> {
    commit_as(cluster, group, generation, member, offsets, false).await
}

/// The highest OffsetCommit version sent outside the consumer group
/// protocol: v9 says the same as v8, for consumer-protocol members.
const CLASSIC_OFFSET_COMMIT_MAX: i16 = 8;

/// As [`commit`]; `consumer_protocol`: a KIP-848 member, whose `generation`
/// is its member epoch, commits with OffsetCommit v9 where the broker
/// serves it (Kafka refuses older versions from such members).
///
/// # Errors
/// As [`commit`]; STALE_MEMBER_EPOCH and FENCED_MEMBER_EPOCH too.
pub(crate) async fn commit_as(
    cluster: &Cluster,
    group: &str,
    generation: i32,
    member: &str,
    offsets: &[(String, i32, i64)],
    consumer_protocol: bool,
) -> Result<()> {
    if offsets.is_empty() {
        return Ok(());
    }
    let mut last = None;
    for _ in 0..=STALE_RETRIES {
        let conn = cluster.coordinator(group).await?;
        let mut v = conn.version(ApiKey::OffsetCommit)?;
        if !consumer_protocol {
            v = v.min(CLASSIC_OFFSET_COMMIT_MAX);
        }
        let mut by_topic: BTreeMap<&str, Vec<offset_commit_request::OffsetCommitRequestPartition>> =
            BTreeMap::new();
        for (t, p, o) in offsets {
            let mut part = offset_commit_request::OffsetCommitRequestPartition::default()
                .with_partition_index(*p)
                .with_committed_offset(*o)
                .with_committed_metadata(Some(StrBytes::new()));
            if v >= 6 {
                part.committed_leader_epoch = -1;
            }
            by_topic.entry(t.as_str()).or_default().push(part);
        }
        let mut req = OffsetCommitRequest::default()
            .with_group_id(group_id(group))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(StrBytes::from_string(member.to_owned()))
            .with_topics(
                by_topic
                    .into_iter()
                    .map(|(t, ps)| {
                        offset_commit_request::OffsetCommitRequestTopic::default()
                            .with_name(topic_name(t))
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        if (2..=4).contains(&v) {
            req.retention_time_ms = -1;
        }
        let resp = match conn.call_at(&req, v, Duration::ZERO).await {
            Ok(r) => r,
            Err(e) if e.is_retriable() => {
                cluster.forget_coordinator(group);
                last = Some(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut first_err = None;
        let mut moved = false;
        for t in &resp.topics {
            for p in &t.partitions {
                if errors::is_coordinator_moved(p.error_code) {
                    moved = true;
                } else if p.error_code != errors::NONE && first_err.is_none() {
                    first_err = Some(errors::error(
                        p.error_code,
                        format!("group {group} commit of {}/{}", t.name.0, p.partition_index),
                    ));
                }
            }
        }
        if moved {
            cluster.forget_coordinator(group);
            last = Some(errors::error(
                errors::NOT_COORDINATOR,
                format!("group {group}"),
            ));
            super::backoff(cluster).await;
            continue;
        }
        return first_err.map_or(Ok(()), Err);
    }
    Err(last.unwrap_or_else(|| errors::error(errors::COORDINATOR_NOT_AVAILABLE, group)))
}

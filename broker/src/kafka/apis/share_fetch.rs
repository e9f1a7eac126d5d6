//! ShareFetch (KIP-932): a share group member's long poll. The request
//! moves the member's share session (epoch 0 opens it with every partition
//! listed; later ones list only partitions added or with
//! acknowledgements, and those forgotten; -1 closes it), carries
//! acknowledgements of records fetched before (applied and stored before
//! anything is acquired), and acquires records from the session's
//! partitions: each partition answers the records acquired (only those:
//! read_committed, whole records, as uncompressed magic-2 batches) with
//! their runs and delivery counts, its fetch error, and its
//! acknowledgement error. A partition with nothing to say is left out;
//! one whose acknowledgements were in the request is always in.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, LeaderIdAndEpoch, PartitionData, ShareFetchableTopicResponse,
};
use kafka_protocol::messages::{ShareFetchRequest, ShareFetchResponse};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::super::map::kafka_id;
use super::super::{errors, records, Ctx};
use crate::domain::TopicId;
use crate::engine::{AckType, SessionStep, ShareAck, ShareFetchSpec, ShareTp};

/// Most bytes read for one partition of a share fetch.
const PARTITION_MAX_BYTES: usize = 1 << 20;
/// Records per response when the request says none (librdkafka's
/// `max.poll.records` default).
const DEFAULT_MAX_RECORDS: usize = 500;

/// A partition of a request, by the id it was named with.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Named {
    pub id: Uuid,
    pub partition: i32,
}

/// What one partition answers.
#[derive(Debug, Default)]
pub(super) struct Answer {
    pub error: i16,
    pub error_message: Option<String>,
    pub ack_error: i16,
    pub ack_message: Option<String>,
    pub records: Option<Vec<u8>>,
    pub acquired: Vec<AcquiredRecords>,
}

/// The name of the topic with `id` that the principal may read, or the
/// error its partitions get.
pub(super) fn resolve(ctx: &Ctx, id: Uuid) -> Result<String, i16> {
    let engine = &ctx.engine;
    let Some(topic) = engine.records().topic_by_id(TopicId(id.into_bytes())) else {
        return Err(errors::UNKNOWN_TOPIC_ID);
    };
    if !ctx.with_subject(|s| s.read_topic(&topic.name)) {
        return Err(errors::TOPIC_AUTHORIZATION_FAILED);
    }
    Ok(topic.name.clone())
}

/// A partition's acknowledgement batches as the engine's acknowledgements:
/// one type for the whole range, or one per offset (runs of one type
/// become one acknowledgement). `Err`: a batch that cannot be (an unknown
/// type, a range backwards, types not matching the range).
pub(super) fn acks_of(
    tp: &ShareTp,
    batches: impl Iterator<Item = (i64, i64, Vec<i8>)>,
) -> Result<Vec<ShareAck>, String> {
    let mut out = Vec::new();
    for (first, last, types) in batches {
        if last < first {
            return Err(format!(
                "acknowledgement batch {first}..{last} runs backwards"
            ));
        }
        let ty = |code: i8| {
            AckType::from_code(code).ok_or_else(|| format!("acknowledge type {code} is not known"))
        };
        match types.as_slice() {
            [one] => out.push(ShareAck {
                tp: tp.clone(),
                first,
                last,
                ack: ty(*one)?,
            }),
            many if i64::try_from(many.len()).ok() == last.checked_sub(first).map(|d| d + 1) => {
                let mut start = first;
                for (i, code) in many.iter().enumerate() {
                    let o = first + i64::try_from(i).unwrap_or(0);
                    let ends = many.get(i + 1).is_none_or(|next| next != code);
                    if ends {
                        out.push(ShareAck {
                            tp: tp.clone(),
                            first: start,
                            last: o,
                            ack: ty(*code)?,
                        });
                        start = o + 1;
                    }
                }
            }
            _ => {
                return Err(format!(
                    "acknowledgement batch {first}..{last} has {} types",
                    types.len()
                ))
            }
        }
    }
    Ok(out)
}

/// Applies `acks` (per partition) and records each partition's
/// acknowledgement error in `answers`.
pub(super) async fn apply_acks(
    ctx: &Ctx,
    group: &str,
    member: &str,
    acks: BTreeMap<Named, Result<Vec<ShareAck>, String>>,
    answers: &mut BTreeMap<Named, Answer>,
) {
    let mut flat = Vec::new();
    let mut owners = Vec::new();
    for (named, r) in acks {
        let a = answers.entry(named.clone()).or_default();
        match r {
            Err(why) => {
                a.ack_error = errors::INVALID_REQUEST;
                a.ack_message = Some(why);
            }
            Ok(list) => {
                for ack in list {
                    owners.push(named.clone());
                    flat.push(ack);
                }
            }
        }
    }
    if flat.is_empty() {
        return;
    }
    let engine = &ctx.engine;
    match engine
        .shares()
        .share_acknowledge_by_partition(group, member, &flat)
        .await
    {
        Err(e) => {
            let code = errors::share_code(&e);
            for named in owners {
                let a = answers.entry(named).or_default();
                a.ack_error = code;
                a.ack_message = Some(e.to_string());
            }
        }
        Ok(results) => {
            for (named, r) in owners.into_iter().zip(results) {
                if let Err(e) = r {
                    let a = answers.entry(named).or_default();
                    if a.ack_error == errors::NONE {
                        a.ack_error = errors::share_code(&e);
                        a.ack_message = Some(e.to_string());
                    }
                }
            }
        }
    }
}

/// The group and member a request names, once the principal may act in the
/// group (READ on it); else the top-level error and its message.
pub(super) fn member_of<'a>(
    ctx: &Ctx,
    group: Option<&'a str>,
    member: Option<&'a str>,
) -> Result<(&'a str, &'a str), (i16, Option<StrBytes>)> {
    match (group, member) {
        (Some(g), Some(m)) if !g.is_empty() && !m.is_empty() => {
            if ctx.with_subject(|s| s.in_group(g)) {
                Ok((g, m))
            } else {
                Err((errors::GROUP_AUTHORIZATION_FAILED, None))
            }
        }
        _ => Err((
            errors::INVALID_REQUEST,
            Some(StrBytes::from_static_str(
                "a share request names its group and member",
            )),
        )),
    }
}

pub(super) fn leader(ctx: &Ctx) -> LeaderIdAndEpoch {
    LeaderIdAndEpoch::default()
        .with_leader_id(ctx.node_id)
        .with_leader_epoch(0)
}

pub(super) async fn handle(ctx: &Ctx, req: ShareFetchRequest) -> ShareFetchResponse {
    let engine = &ctx.engine;
    let mut resp = ShareFetchResponse::default().with_acquisition_lock_timeout_ms(
        i32::try_from(engine.shares().share_settings().partition.lock_duration_ms)
            .unwrap_or(i32::MAX),
    );
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
    let epoch = req.share_session_epoch;
    let mut answers: BTreeMap<Named, Answer> = BTreeMap::new();
    let mut added = Vec::new();
    let mut acks = BTreeMap::new();
    let mut has_acks = false;
    for t in &req.topics {
        let name = resolve(ctx, t.topic_id);
        for p in &t.partitions {
            let named = Named {
                id: t.topic_id,
                partition: p.partition_index,
            };
            let name = match &name {
                Ok(n) => n.clone(),
                Err(code) => {
                    let a = answers.entry(named).or_default();
                    a.error = *code;
                    if !p.acknowledgement_batches.is_empty() {
                        a.ack_error = *code;
                    }
                    continue;
                }
            };
            let tp = ShareTp {
                topic: name.clone(),
                partition: p.partition_index,
            };
            added.push((name, p.partition_index));
            if !p.acknowledgement_batches.is_empty() {
                has_acks = true;
                let batches = p
                    .acknowledgement_batches
                    .iter()
                    .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()));
                acks.insert(named, acks_of(&tp, batches));
            }
        }
    }
    if epoch == 0 && has_acks {
        resp.error_code = errors::INVALID_REQUEST;
        resp.error_message = Some(StrBytes::from_static_str(
            "a share session's opening fetch (epoch 0) carries no acknowledgements",
        ));
        return resp;
    }
    let mut forgotten = Vec::new();
    for t in &req.forgotten_topics_data {
        if let Ok(name) = resolve(ctx, t.topic_id) {
            forgotten.extend(t.partitions.iter().map(|p| (name.clone(), *p)));
        }
    }
    let step = match engine
        .shares()
        .share_session(group, member, epoch, &added, &forgotten)
    {
        Ok(s) => s,
        Err(e) => {
            resp.error_code = errors::share_code(&e);
            resp.error_message = Some(StrBytes::from_string(e.to_string()));
            return resp;
        }
    };
    apply_acks(ctx, group, member, acks, &mut answers).await;
    match step {
        SessionStep::Closed(parts) => {
            if let Err(e) = engine
                .shares()
                .share_release_held(group, member, &parts)
                .await
            {
                resp.error_code = errors::share_code(&e);
                resp.error_message = Some(StrBytes::from_string(e.to_string()));
            }
        }
        SessionStep::Fetch(parts) => {
            let ids: BTreeMap<String, Uuid> = parts
                .iter()
                .filter_map(|(t, _)| {
                    engine
                        .records()
                        .topic(t)
                        .map(|topic| (t.clone(), kafka_id(topic.id)))
                })
                .collect();
            let partitions: Vec<ShareTp> = parts
                .into_iter()
                .filter(|(t, _)| ids.contains_key(t))
                .map(|(topic, partition)| ShareTp { topic, partition })
                .collect();
            let n = partitions.len().max(1);
            let max_records = usize::try_from(req.max_records)
                .ok()
                .filter(|n| *n > 0)
                .unwrap_or(DEFAULT_MAX_RECORDS);
            let per_partition = partition_max_bytes(req.max_bytes, n);
            let spec = ShareFetchSpec {
                group: group.to_owned(),
                member: member.to_owned(),
                partitions,
                max_records,
                max_bytes: per_partition,
                max_wait: Duration::from_millis(u64::try_from(req.max_wait_ms).unwrap_or(0)),
            };
            match engine.shares().share_fetch(spec).await {
                Err(e) => {
                    resp.error_code = errors::share_code(&e);
                    resp.error_message = Some(StrBytes::from_string(e.to_string()));
                }
                Ok(fetched) => {
                    for f in fetched {
                        let Some(id) = ids.get(&f.tp.topic) else {
                            continue;
                        };
                        let named = Named {
                            id: *id,
                            partition: f.tp.partition,
                        };
                        match f.error {
                            // Not (or no longer) the member's: nothing to say.
                            Some(crate::engine::ShareError::NotAssigned { .. }) => {}
                            Some(e) => {
                                let a = answers.entry(named).or_default();
                                a.error = errors::share_code(&e);
                                a.error_message = Some(e.to_string());
                            }
                            None if !f.acquired.is_empty() => {
                                let a = answers.entry(named).or_default();
                                a.records = Some(records::to_kafka(&f.records).to_vec());
                                a.acquired = f
                                    .acquired
                                    .iter()
                                    .map(|r| {
                                        AcquiredRecords::default()
                                            .with_first_offset(r.first_offset)
                                            .with_last_offset(r.last_offset)
                                            .with_delivery_count(
                                                i16::try_from(r.delivery_count).unwrap_or(i16::MAX),
                                            )
                                    })
                                    .collect();
                            }
                            None => {}
                        }
                    }
                }
            }
        }
    }
    resp.responses = group_by_topic(answers, |named, a| {
        PartitionData::default()
            .with_partition_index(named.partition)
            .with_error_code(a.error)
            .with_error_message(a.error_message.map(StrBytes::from_string))
            .with_acknowledge_error_code(a.ack_error)
            .with_acknowledge_error_message(a.ack_message.map(StrBytes::from_string))
            .with_current_leader(leader(ctx))
            .with_records(Some(a.records.map(bytes::Bytes::from).unwrap_or_default()))
            .with_acquired_records(a.acquired)
    })
    .into_iter()
    .map(|(topic_id, partitions)| {
        ShareFetchableTopicResponse::default()
            .with_topic_id(topic_id)
            .with_partitions(partitions)
    })
    .collect();
    resp
}

/// The answers grouped by topic id, each partition built by `part`.
pub(super) fn group_by_topic<P>(
    answers: BTreeMap<Named, Answer>,
    part: impl Fn(&Named, Answer) -> P,
) -> Vec<(Uuid, Vec<P>)> {
    let mut out: Vec<(Uuid, Vec<P>)> = Vec::new();
    for (named, a) in answers {
        let p = part(&named, a);
        match out.last_mut() {
            Some((id, ps)) if *id == named.id => ps.push(p),
            _ => out.push((named.id, vec![p])),
        }
    }
    out
}

/// Bytes read per partition for a request's `max_bytes` over `n` partitions:
/// Kafka's even split, each partition at least one batch (the read's first
/// whole batch, however small the share), none when `max_bytes` is 0 or
/// less (Kafka then answers no records).
fn partition_max_bytes(max_bytes: i32, n: usize) -> usize {
    match usize::try_from(max_bytes) {
        Ok(0) | Err(_) => 0,
        Ok(b) => (b / n.max(1)).clamp(1, PARTITION_MAX_BYTES),
    }
}

#[cfg(test)]
mod tests {
    use super::partition_max_bytes;

    #[test]
    fn max_bytes_is_split_evenly_with_one_batch_at_least_and_none_at_zero() {
        assert_eq!(partition_max_bytes(0, 1), 0);
        assert_eq!(partition_max_bytes(-1, 1), 0);
        assert_eq!(partition_max_bytes(1, 1), 1);
        assert_eq!(partition_max_bytes(5, 10), 1);
        assert_eq!(partition_max_bytes(1000, 4), 250);
        assert_eq!(partition_max_bytes(52_428_800, 2), 1 << 20);
        assert_eq!(partition_max_bytes(100, 0), 100);
    }
}

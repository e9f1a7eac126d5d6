//! Flume wire types to domain types and back: every translation the Flume
//! protocol front end makes, and nothing else.

use std::time::Duration;

use flume_protocol::messages::encode_fetch_partition;
use flume_protocol::wire::{Reader, WriteExt};
use flume_protocol::{
    AlterTopicRequest, ListOffsetsRequest, ListOffsetsResponse, ListedOffset, TopicSettings,
    EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP,
};
use flume_protocol::{
    ErrorCode, FetchRequest, JoinGroupRequest, JoinGroupResponse, MetadataResponse,
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchPartition, OffsetFetchRequest,
    OffsetFetchResponse, PartitionError, PartitionMetadata, ProduceEntry, ProduceResult, Span,
    TopicMetadata, TopicPartitions,
};

use crate::config::{fetch_wait, valid_group_id};
use crate::domain::Assignor;
use crate::domain::{
    Appended, FetchFrom, FetchSpec, Fetched, FoundOffset, GroupPosition, JoinSpec, Joined, Member,
    OffsetSpec, ProduceBatch, ReadAs, Route, TopicChanges, TopicDescription, TopicPartition,
};

/// A PRODUCE entry as a batch: partition -1 routes by key. The records stay
/// the slice of the frame they arrived in.
pub fn produce_batch(entry: ProduceEntry) -> ProduceBatch {
    ProduceBatch {
        topic: entry.topic,
        route: match entry.partition {
            -1 => Route::ByKey,
            p => Route::Partition(p),
        },
        records: entry.records,
    }
}

impl From<Appended> for ProduceResult {
    fn from(a: Appended) -> Self {
        ProduceResult {
            topic: a.topic,
            partition: match a.route {
                Route::ByKey => -1,
                Route::Partition(p) => p,
            },
            error: a.error,
            spans: a
                .spans
                .into_iter()
                .map(|s| Span {
                    partition: s.partition,
                    base_offset: s.base_offset,
                    count: s.count,
                })
                .collect(),
            record_partitions: a.record_partitions,
        }
    }
}

/// A wire byte count as a size: 0 and negative count as 1.
fn at_least_one(v: i32) -> usize {
    usize::try_from(v.max(1)).unwrap_or(1)
}

/// A FETCH as a fetch: `max_wait_ms` capped (see [`fetch_wait`]), byte
/// counts of 0 or less as 1.
pub fn fetch_spec(req: &FetchRequest) -> FetchSpec {
    FetchSpec {
        max_wait: fetch_wait(req.max_wait_ms),
        min_bytes: at_least_one(req.min_bytes),
        max_bytes: at_least_one(req.max_bytes),
        partitions: req
            .partitions
            .iter()
            .map(|p| FetchFrom {
                at: TopicPartition::new(p.topic.clone(), p.partition),
                offset: p.offset,
                max_bytes: at_least_one(p.max_bytes),
            })
            .collect(),
        // Flume's clients read records only: Kafka batches are read out for
        // them, as a read_committed reader sees them.
        read_as: ReadAs::Records,
        committed: true,
    }
}

/// Encodes the FETCH response body: each partition's records are copied once,
/// from the read into the response, and dropped as soon as they are.
pub fn encode_fetched(out: &mut Vec<u8>, spec: &FetchSpec, fetched: Fetched) {
    out.put_count(fetched.partitions.len());
    for (from, p) in spec.partitions.iter().zip(fetched.partitions) {
        encode_fetch_partition(
            out,
            &from.at.topic,
            from.at.partition,
            p.error,
            p.log_end,
            p.log_start,
            &p.records,
        );
    }
}

/// A JOIN_GROUP as a join.
///
/// # Errors
/// INVALID_REQUEST for an assignor Flume does not know (INVALID_NAME first
/// for a bad group name, as the engine checks).
pub fn join_spec(req: JoinGroupRequest) -> Result<JoinSpec, ErrorCode> {
    let Some(assignor) = Assignor::parse(&req.assignor) else {
        if !valid_group_id(&req.group) {
            return Err(ErrorCode::InvalidName);
        }
        return Err(ErrorCode::InvalidRequest);
    };
    let ms = |v: i32| Duration::from_millis(u64::try_from(v).unwrap_or(0));
    Ok(JoinSpec {
        group: req.group,
        member_id: req.member_id,
        topics: req.topics,
        session_timeout: ms(req.session_timeout_ms),
        rebalance_timeout: ms(req.rebalance_timeout_ms),
        assignor,
    })
}

impl From<Joined> for JoinGroupResponse {
    fn from(j: Joined) -> Self {
        JoinGroupResponse {
            generation: j.generation,
            member_id: j.member_id,
            leader_id: j.leader_id,
            members: j.members,
            assignment: j
                .assignment
                .into_iter()
                .map(|a| TopicPartitions {
                    topic: a.topic,
                    partitions: a.partitions,
                })
                .collect(),
        }
    }
}

/// Decodes a JOIN_GROUP, refusing a topic list longer than `max_topics`
/// before any of its names is decoded, and deduplicates the list.
pub fn decode_join(payload: &[u8], max_topics: usize) -> Result<JoinGroupRequest, String> {
    let mut r = Reader::new(payload);
    let mut req = JoinGroupRequest {
        group: r.string().map_err(|e| e.to_string())?,
        member_id: r.string().map_err(|e| e.to_string())?,
        session_timeout_ms: r.i32().map_err(|e| e.to_string())?,
        rebalance_timeout_ms: r.i32().map_err(|e| e.to_string())?,
        assignor: r.string().map_err(|e| e.to_string())?,
        topics: Vec::new(),
    };
    let n = r.count(2).map_err(|e| e.to_string())?;
    if n > max_topics {
        return Err(format!(
            "the topic list has {n} entries, max_topics_per_join is {max_topics}"
        ));
    }
    req.topics.reserve_exact(n);
    for _ in 0..n {
        req.topics.push(r.string().map_err(|e| e.to_string())?);
    }
    r.finish().map_err(|e| e.to_string())?;
    // A subscription is a set: duplicates would only cost memory and work.
    req.topics.sort_unstable();
    req.topics.dedup();
    Ok(req)
}

/// The member an OFFSET_COMMIT comes from, and its offsets.
pub fn commit_parts(req: &OffsetCommitRequest) -> (Member<'_>, Vec<(TopicPartition, i64)>) {
    let member = Member {
        group: &req.group,
        member_id: &req.member_id,
        generation: req.generation,
    };
    let offsets = req
        .offsets
        .iter()
        .map(|o| (TopicPartition::new(o.topic.clone(), o.partition), o.offset))
        .collect();
    (member, offsets)
}

/// The OFFSET_COMMIT response: one outcome per committed partition.
pub fn commit_response(
    req: &OffsetCommitRequest,
    outcomes: Vec<ErrorCode>,
) -> OffsetCommitResponse {
    OffsetCommitResponse {
        results: req
            .offsets
            .iter()
            .zip(outcomes)
            .map(|(o, error)| PartitionError {
                topic: o.topic.clone(),
                partition: o.partition,
                error,
            })
            .collect(),
    }
}

/// The topics an OFFSET_FETCH names, as the engine takes them.
pub fn position_query(req: &OffsetFetchRequest) -> impl Iterator<Item = (&str, &[i32])> {
    req.topics
        .iter()
        .map(|t| (t.topic.as_str(), t.partitions.as_slice()))
}

/// The OFFSET_FETCH response.
pub fn offset_fetch_response(positions: Vec<GroupPosition>) -> OffsetFetchResponse {
    OffsetFetchResponse {
        partitions: positions
            .into_iter()
            .map(|p| OffsetFetchPartition {
                topic: p.at.topic,
                partition: p.at.partition,
                error: p.error,
                committed: p.committed,
                log_start: p.log_start,
                log_end: p.log_end,
            })
            .collect(),
    }
}

/// The METADATA response.
pub fn metadata_response(topics: Vec<TopicDescription>) -> MetadataResponse {
    MetadataResponse {
        topics: topics
            .into_iter()
            .map(|t| {
                let (error, partitions) = match t.partitions {
                    Ok(ps) => (ErrorCode::None, ps),
                    Err(code) => (code, Vec::new()),
                };
                TopicMetadata {
                    name: t.name,
                    error,
                    partitions: partitions
                        .into_iter()
                        .map(|p| PartitionMetadata {
                            partition: p.partition,
                            log_start: p.log_start,
                            log_end: p.log_end,
                        })
                        .collect(),
                }
            })
            .collect(),
    }
}

// ------------------------------------------------------------ admin (keys 9-13)

/// A topic's settings on the wire (a retention of -1: no limit).
pub fn topic_settings(tc: &crate::config::TopicConfig) -> TopicSettings {
    let wide = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    TopicSettings {
        partitions: i32::try_from(tc.partitions).unwrap_or(i32::MAX),
        retention_bytes: tc.retention_bytes.map_or(-1, wide),
        retention_ms: tc.retention_ms.map_or(-1, wide),
        segment_bytes: wide(tc.segment_bytes),
        max_pending: i32::try_from(tc.max_pending).unwrap_or(i32::MAX),
        backpressure: match tc.backpressure {
            crate::config::Backpressure::Block => 0,
            crate::config::Backpressure::Reject => 1,
        },
    }
}

/// An ALTER_TOPIC's changes: -1 leaves a setting, 0 removes a retention
/// limit; anything else below -1 is INVALID_REQUEST (the segment size's range
/// is the engine's check).
pub fn topic_changes(req: &AlterTopicRequest) -> Result<TopicChanges, ErrorCode> {
    let retention = |v: i64| match v {
        -1 => Ok(None),
        0 => Ok(Some(None)),
        v => u64::try_from(v)
            .map(|v| Some(Some(v)))
            .map_err(|_| ErrorCode::InvalidRequest),
    };
    Ok(TopicChanges {
        retention_bytes: retention(req.retention_bytes)?,
        retention_ms: retention(req.retention_ms)?,
        segment_bytes: match req.segment_bytes {
            -1 => None,
            v => Some(u64::try_from(v).map_err(|_| ErrorCode::InvalidRequest)?),
        },
    })
}

/// A LIST_OFFSETS request as lookups: -1 latest, -2 earliest, -3 the
/// largest timestamp, 0 or more a time; `Err` at the index of a timestamp
/// below -3 (answered INVALID_REQUEST).
pub fn offset_queries(
    req: &ListOffsetsRequest,
) -> Vec<Result<(TopicPartition, OffsetSpec), usize>> {
    req.partitions
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let spec = match p.timestamp {
                LATEST_TIMESTAMP => OffsetSpec::Latest,
                EARLIEST_TIMESTAMP => OffsetSpec::Earliest,
                MAX_TIMESTAMP => OffsetSpec::MaxTimestamp,
                t if t >= 0 => OffsetSpec::Time(t),
                _ => return Err(i),
            };
            Ok((TopicPartition::new(p.topic.clone(), p.partition), spec))
        })
        .collect()
}

/// The LIST_OFFSETS response: the engine's answers, with INVALID_REQUEST
/// for the queries it was not asked.
pub fn list_offsets_response(
    req: &ListOffsetsRequest,
    queries: &[Result<(TopicPartition, OffsetSpec), usize>],
    found: Vec<FoundOffset>,
) -> ListOffsetsResponse {
    let mut found = found.into_iter();
    let partitions = req
        .partitions
        .iter()
        .zip(queries)
        .map(|(p, q)| match (q, found.next()) {
            (Ok(_), Some(f)) => ListedOffset {
                topic: f.at.topic,
                partition: f.at.partition,
                error: f.error,
                offset: f.offset,
                timestamp: f.timestamp,
            },
            _ => ListedOffset {
                topic: p.topic.clone(),
                partition: p.partition,
                error: ErrorCode::InvalidRequest,
                offset: -1,
                timestamp: -1,
            },
        })
        .collect();
    ListOffsetsResponse { partitions }
}

/// LIST_GROUPS: the engine's groups, those in `states` (every one when empty).
pub fn group_listings(
    groups: Vec<crate::domain::GroupListing>,
    states: &[String],
) -> flume_protocol::ListGroupsResponse {
    flume_protocol::ListGroupsResponse {
        groups: groups
            .into_iter()
            .filter(|g| states.is_empty() || states.iter().any(|s| s == g.phase.as_str()))
            .map(|g| flume_protocol::GroupListing {
                group: g.group,
                state: g.phase.as_str().to_owned(),
                protocol_type: g.protocol_type,
            })
            .collect(),
    }
}

/// DESCRIBE_GROUP: a group's description with its committed offsets, each
/// beside its partition's log end (`end_of` answers -1 for a partition gone).
pub fn group_description(
    d: crate::domain::GroupDescription,
    committed: Vec<(String, i32, i64)>,
    end_of: &dyn Fn(&str, i32) -> i64,
) -> flume_protocol::DescribeGroupResponse {
    flume_protocol::DescribeGroupResponse {
        group: d.group,
        state: d.phase.as_str().to_owned(),
        protocol_type: d.protocol_type,
        protocol: d.protocol,
        generation: d.generation,
        leader_id: d.leader_id,
        members: d
            .members
            .into_iter()
            .map(|m| flume_protocol::GroupMemberInfo {
                member_id: m.member_id,
                client_id: m.client_id,
                client_host: m.client_host,
                assignment: m
                    .assignment
                    .into_iter()
                    .map(|a| TopicPartitions {
                        topic: a.topic,
                        partitions: a.partitions,
                    })
                    .collect(),
            })
            .collect(),
        offsets: committed
            .into_iter()
            .map(
                |(topic, partition, committed)| flume_protocol::GroupOffsetInfo {
                    log_end: end_of(&topic, partition),
                    topic,
                    partition,
                    committed,
                },
            )
            .collect(),
    }
}

// ------------------------------------------------------------ share groups

/// The code a client sees for a share-group failure.
pub fn share_error_code(e: &crate::engine::ShareError) -> ErrorCode {
    use crate::engine::AckError;
    use crate::engine::ShareError as S;
    use crate::engine::ShareGroupError as G;
    match e {
        S::Group(G::UnknownMember(_)) => ErrorCode::UnknownMember,
        S::Group(G::FencedEpoch { .. }) => ErrorCode::IllegalGeneration,
        S::Group(G::GroupFull { .. } | G::TooManyGroups(_)) | S::Limit(_) => {
            ErrorCode::LimitReached
        }
        S::Group(G::Invalid(_)) | S::RecordState(AckError::BadRange { .. }) => {
            ErrorCode::InvalidRequest
        }
        S::NotAssigned { .. } => ErrorCode::NotAssigned,
        S::UnknownTopic(_) => ErrorCode::UnknownTopic,
        S::UnknownPartition { .. } => ErrorCode::UnknownPartition,
        S::RecordState(AckError::NotAcquired { .. }) => ErrorCode::InvalidRecordState,
        S::NotEmpty(_) => ErrorCode::GroupNotEmpty,
        S::Session(_) => ErrorCode::InvalidRequest,
        S::Broker(b) => b.code(),
    }
}

/// Acknowledgements as the engine takes them; one with an unknown type is
/// left out and answered INVALID_REQUEST (its index in `refused`).
pub fn share_acks(
    acks: Vec<flume_protocol::ShareAcknowledgement>,
) -> (Vec<crate::engine::ShareAck>, Vec<usize>) {
    use crate::engine::AckType;
    let mut out = Vec::with_capacity(acks.len());
    let mut refused = Vec::new();
    for (i, a) in acks.into_iter().enumerate() {
        match AckType::from_code(a.ack_type) {
            Some(ack) => out.push(crate::engine::ShareAck {
                tp: crate::engine::ShareTp {
                    topic: a.topic,
                    partition: a.partition,
                },
                first: a.first_offset,
                last: a.last_offset,
                ack,
            }),
            None => refused.push(i),
        }
    }
    (out, refused)
}

/// The per-acknowledgement codes in request order: the engine's results for
/// the acknowledgements it took, INVALID_REQUEST for those `refused`.
pub fn share_ack_codes(
    results: Vec<Result<(), crate::engine::ShareError>>,
    refused: &[usize],
) -> Vec<ErrorCode> {
    let mut results = results.into_iter();
    let total = results.len() + refused.len();
    (0..total)
        .map(|i| {
            if refused.binary_search(&i).is_ok() {
                ErrorCode::InvalidRequest
            } else {
                match results.next() {
                    Some(Ok(())) => ErrorCode::None,
                    Some(Err(e)) => share_error_code(&e),
                    None => ErrorCode::Unknown,
                }
            }
        })
        .collect()
}

/// An assignment by topic as the wire lists it.
pub fn topic_partitions(
    assignment: std::collections::BTreeMap<String, Vec<i32>>,
) -> Vec<TopicPartitions> {
    assignment
        .into_iter()
        .map(|(topic, partitions)| TopicPartitions { topic, partitions })
        .collect()
}

/// A share group as SHARE_GROUP_DESCRIBE answers it.
pub fn share_group_description(
    v: crate::engine::ShareGroupView,
) -> flume_protocol::ShareGroupDescribeResponse {
    let n = |x: usize| i64::try_from(x).unwrap_or(i64::MAX);
    flume_protocol::ShareGroupDescribeResponse {
        group: v.group,
        epoch: v.epoch,
        members: v
            .members
            .into_iter()
            .map(|m| flume_protocol::ShareMemberInfo {
                member_id: m.member_id,
                client_id: m.client_id,
                client_host: m.client_host,
                member_epoch: m.member_epoch,
                subscribed: m.subscribed,
                assignment: topic_partitions(m.assignment),
            })
            .collect(),
        partitions: v
            .partitions
            .into_iter()
            .map(|p| flume_protocol::SharePartitionInfo {
                topic: p.tp.topic,
                partition: p.tp.partition,
                start_offset: p.start_offset,
                log_end: p.log_end,
                in_flight: n(p.counts.in_flight),
                acquired: n(p.counts.acquired),
                available: n(p.counts.available),
                redelivered: n(p.counts.redelivered),
                archived: i64::try_from(p.archived).unwrap_or(i64::MAX),
            })
            .collect(),
    }
}

/// A consumer-protocol group as CONSUMER_GROUP_DESCRIBE answers it.
pub fn consumer_group_info(
    v: crate::engine::ConsumerGroupView,
) -> flume_protocol::ConsumerGroupInfo {
    let tps = |a: crate::engine::Assignment| -> Vec<TopicPartitions> {
        a.into_iter()
            .map(|(topic, ps)| TopicPartitions {
                topic,
                partitions: ps.into_iter().collect(),
            })
            .collect()
    };
    flume_protocol::ConsumerGroupInfo {
        group: v.group,
        state: v.state.to_owned(),
        epoch: v.epoch,
        assignment_epoch: v.assignment_epoch,
        assignor: v.assignor.to_owned(),
        members: v
            .members
            .into_iter()
            .map(|m| flume_protocol::ConsumerMemberInfo {
                member_id: m.member_id,
                instance_id: m.instance_id.unwrap_or_default(),
                rack_id: m.rack_id.unwrap_or_default(),
                member_epoch: m.member_epoch,
                client_id: m.client_id,
                client_host: m.client_host,
                subscribed: m.subscribed,
                regex: m.regex.unwrap_or_default(),
                assignment: tps(m.assignment),
                target: tps(m.target),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flume_protocol::messages::Encode;

    fn join(topics: &[&str]) -> Vec<u8> {
        let mut buf = Vec::new();
        JoinGroupRequest {
            group: "g".into(),
            member_id: String::new(),
            session_timeout_ms: 1000,
            rebalance_timeout_ms: 1000,
            assignor: String::new(),
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
        }
        .encode(&mut buf);
        buf
    }

    #[test]
    fn join_topic_lists_are_deduplicated_and_capped_before_decoding() {
        let req = decode_join(&join(&["b", "a", "b", "a", "b"]), 5).unwrap();
        assert_eq!(req.topics, vec!["a".to_owned(), "b".to_owned()]);
        let err = decode_join(&join(&["a"; 6]), 5).unwrap_err();
        assert!(
            err.contains("6 entries") && err.contains("max_topics_per_join is 5"),
            "{err}"
        );
        // The count is checked before the names: a list that claims more names
        // than the cap is refused even if its bytes are cut short.
        let mut cut = join(&["a"; 6]);
        cut.truncate(cut.len() - 4);
        assert!(decode_join(&cut, 5)
            .unwrap_err()
            .contains("max_topics_per_join"));
        assert!(decode_join(&join(&["a"]), 5).is_ok());
        let mut trailing = join(&["a"]);
        trailing.push(0);
        assert!(decode_join(&trailing, 5).is_err());
    }

    #[test]
    fn share_ack_codes_keep_request_order_around_refused_types() {
        use crate::engine::AckError;
        use crate::engine::ShareError;
        let results = vec![
            Ok(()),
            Err(ShareError::RecordState(AckError::NotAcquired {
                offset: 3,
                member: "m".into(),
            })),
        ];
        assert_eq!(
            share_ack_codes(results, &[0, 2]),
            vec![
                ErrorCode::InvalidRequest,
                ErrorCode::None,
                ErrorCode::InvalidRequest,
                ErrorCode::InvalidRecordState
            ]
        );
    }
}

//! Share groups (KIP-932) on the Kafka listener with raw `kafka-protocol`
//! frames, the parts a client library does not show: the member's
//! assignment by topic id, share sessions (epoch 0 opens, a wrong epoch or
//! no session is refused, -1 closes and gives back what the member held),
//! acknowledgements answered per partition (INVALID_RECORD_STATE for
//! records not held), ShareGroupDescribe, ListGroups with the share type,
//! the share-group offsets (describe; alter and delete only while the group
//! is empty) and DeleteGroups, and group configs through
//! IncrementalAlterConfigs/DescribeConfigs on a GROUP resource, kept across
//! a restart.

use crate::common;
use crate::common::kafka::Kc;

use std::path::Path;

use anyhow::{ensure, Context, Result};
use flume_broker::Broker;
use kafka_protocol::messages::alter_share_group_offsets_request::{
    AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::share_acknowledge_request::{
    AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch as AckBatch,
};
use kafka_protocol::messages::share_fetch_request::{
    AcknowledgementBatch, FetchPartition, FetchTopic,
};
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, ApiKey, ApiVersionsRequest, CreateTopicsRequest,
    DeleteGroupsRequest, DeleteShareGroupOffsetsRequest, DescribeConfigsRequest,
    DescribeShareGroupOffsetsRequest, GroupId, IncrementalAlterConfigsRequest, ListGroupsRequest,
    ShareAcknowledgeRequest, ShareFetchRequest, ShareFetchResponse, ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

const NONE: i16 = 0;
const NON_EMPTY_GROUP: i16 = 68;
const INVALID_CONFIG: i16 = 40;
const INVALID_RECORD_STATE: i16 = 121;
const SHARE_SESSION_NOT_FOUND: i16 = 122;
const INVALID_SHARE_SESSION_EPOCH: i16 = 123;
const GROUP: i8 = 32;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn start(dir: &Path) -> Result<(Broker, Kc)> {
    let mut c = common::config(dir);
    c.kafka_listen = Some("127.0.0.1:0".into());
    let broker = flume_rt::block_on(Broker::start(c)).context("broker starts")?;
    let k = Kc::connect(&broker.kafka_addr().context("kafka")?.to_string())?;
    Ok((broker, k))
}

fn create(k: &mut Kc, topic: &str) -> Result<Uuid> {
    let mut t = CreatableTopic::default();
    t.name = TopicName(s(topic));
    t.num_partitions = 1;
    t.replication_factor = 1;
    let mut r = CreateTopicsRequest::default();
    r.topics = vec![t];
    r.timeout_ms = 5_000;
    let resp = k.call(7, &r)?;
    ensure!(resp.topics[0].error_code == NONE, "{resp:?}");
    Ok(resp.topics[0].topic_id)
}

fn send(broker: &Broker, topic: &str, n: usize) -> Result<()> {
    flume_rt::block_on(async {
        let p = flume_client::Producer::connect(&broker.local_addr().to_string()).await?;
        for i in 0..n {
            p.send(topic, None, format!("v{i}").as_bytes()).await?;
        }
        anyhow::Ok(())
    })
}

/// Joins (epoch 0) or heartbeats: (error, member id, epoch, assigned topic ids).
fn heartbeat(
    k: &mut Kc,
    member: &str,
    epoch: i32,
    topics: Option<&[&str]>,
) -> Result<(i16, String, i32, Vec<Uuid>)> {
    let req = ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("sg")))
        .with_member_id(s(member))
        .with_member_epoch(epoch)
        .with_subscribed_topic_names(topics.map(|ts| ts.iter().map(|t| TopicName(s(t))).collect()));
    let resp = k.call(1, &req)?;
    let ids = resp
        .assignment
        .map(|a| a.topic_partitions.iter().map(|t| t.topic_id).collect())
        .unwrap_or_default();
    Ok((
        resp.error_code,
        resp.member_id.map(|m| m.to_string()).unwrap_or_default(),
        resp.member_epoch,
        ids,
    ))
}

fn share_fetch(
    k: &mut Kc,
    member: &str,
    epoch: i32,
    id: Uuid,
    acks: Vec<(i64, i64, i8)>,
) -> Result<ShareFetchResponse> {
    let batches = acks
        .into_iter()
        .map(|(f, l, t)| {
            AcknowledgementBatch::default()
                .with_first_offset(f)
                .with_last_offset(l)
                .with_acknowledge_types(vec![t])
        })
        .collect();
    let req = ShareFetchRequest::default()
        .with_group_id(Some(GroupId(s("sg"))))
        .with_member_id(Some(s(member)))
        .with_share_session_epoch(epoch)
        .with_max_wait_ms(200)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_max_records(3)
        .with_batch_size(3)
        .with_topics(vec![FetchTopic::default()
            .with_topic_id(id)
            .with_partitions(vec![FetchPartition::default()
                .with_partition_index(0)
                .with_acknowledgement_batches(batches)])]);
    k.call(1, &req)
}

/// The acquired runs of a fetch's one partition: (first, last, count).
fn acquired(resp: &ShareFetchResponse) -> Vec<(i64, i64, i16)> {
    resp.responses
        .iter()
        .flat_map(|t| &t.partitions)
        .flat_map(|p| &p.acquired_records)
        .map(|a| (a.first_offset, a.last_offset, a.delivery_count))
        .collect()
}

fn acknowledge(
    k: &mut Kc,
    member: &str,
    epoch: i32,
    id: Uuid,
    first: i64,
    last: i64,
    ty: i8,
) -> Result<(i16, Vec<i16>)> {
    acknowledge_all(k, member, epoch, id, &[(first, last, ty)])
}

/// One ShareAcknowledge of several batches of partition 0: (top-level
/// error, each partition's error).
fn acknowledge_all(
    k: &mut Kc,
    member: &str,
    epoch: i32,
    id: Uuid,
    batches: &[(i64, i64, i8)],
) -> Result<(i16, Vec<i16>)> {
    let batches = batches
        .iter()
        .map(|(first, last, ty)| {
            AckBatch::default()
                .with_first_offset(*first)
                .with_last_offset(*last)
                .with_acknowledge_types(vec![*ty])
        })
        .collect();
    let req = ShareAcknowledgeRequest::default()
        .with_group_id(Some(GroupId(s("sg"))))
        .with_member_id(Some(s(member)))
        .with_share_session_epoch(epoch)
        .with_topics(vec![AcknowledgeTopic::default()
            .with_topic_id(id)
            .with_partitions(vec![AcknowledgePartition::default()
                .with_partition_index(0)
                .with_acknowledgement_batches(batches)])]);
    let resp = k.call(1, &req)?;
    let parts = resp
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| p.error_code)
        .collect();
    Ok((resp.error_code, parts))
}

fn start_offset(k: &mut Kc) -> Result<i64> {
    let req = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(GroupId(s("sg")))
            .with_topics(None),
    ]);
    let resp = k.call(0, &req)?;
    let g = &resp.groups[0];
    ensure!(g.error_code == NONE, "{resp:?}");
    Ok(g.topics[0].partitions[0].start_offset)
}

#[test]
fn a_share_member_fetches_acknowledges_and_closes_through_its_session() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (broker, mut k) = start(dir.path())?;
    let versions = k.call(3, &ApiVersionsRequest::default())?;
    for key in [
        ApiKey::ShareGroupHeartbeat,
        ApiKey::ShareFetch,
        ApiKey::ShareAcknowledge,
    ] {
        ensure!(
            versions
                .api_keys
                .iter()
                .any(|a| a.api_key == key as i16 && (a.min_version, a.max_version) == (1, 1)),
            "{key:?} advertised at v1"
        );
    }
    let id = create(&mut k, "q")?;
    // Where a new share-partition starts is a group config: earliest here.
    let alter = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(GROUP)
            .with_resource_name(s("sg"))
            .with_configs(vec![AlterableConfig::default()
                .with_name(s("share.auto.offset.reset"))
                .with_config_operation(0)
                .with_value(Some(s("earliest")))]),
    ]);
    ensure!(k.call(1, &alter)?.responses[0].error_code == NONE);
    send(&broker, "q", 5)?;

    let (code, member, epoch, ids) = heartbeat(&mut k, "m-1", 0, Some(&["q"]))?;
    ensure!(
        code == NONE && member == "m-1" && epoch > 0,
        "{code} {member} {epoch}"
    );
    ensure!(ids == vec![id], "assigned by topic id: {ids:?}");
    // No session yet: a fetch at epoch 1 is refused.
    ensure!(share_fetch(&mut k, "m-1", 1, id, vec![])?.error_code == SHARE_SESSION_NOT_FOUND);
    let first = share_fetch(&mut k, "m-1", 0, id, vec![])?;
    ensure!(first.error_code == NONE, "{first:?}");
    ensure!(
        acquired(&first) == vec![(0, 2, 1)],
        "{:?}",
        acquired(&first)
    );
    // The records are Kafka batches holding exactly the acquired offsets.
    let records = first.responses[0].partitions[0]
        .records
        .clone()
        .unwrap_or_default();
    let mut offsets = Vec::new();
    for b in flume_protocol::kafka_batch::batches(&records) {
        let b = b?;
        let data = b.records(1 << 24)?;
        flume_protocol::kafka_batch::for_each_record::<flume_protocol::kafka_batch::BatchError>(
            &b.header,
            &data,
            &mut |r| {
                offsets.push(b.header.base_offset + i64::from(r.offset_delta));
                Ok(())
            },
        )?;
    }
    ensure!(offsets == vec![0, 1, 2], "{offsets:?}");
    // The wrong epoch is refused and does not move the session.
    ensure!(share_fetch(&mut k, "m-1", 5, id, vec![])?.error_code == INVALID_SHARE_SESSION_EPOCH);
    // Accept 0-1 and release 2 with the next fetch: 2 comes back (count 2) with 3-4.
    let second = share_fetch(&mut k, "m-1", 1, id, vec![(0, 1, 1), (2, 2, 2)])?;
    ensure!(second.error_code == NONE, "{second:?}");
    let p = &second.responses[0].partitions[0];
    ensure!(p.acknowledge_error_code == NONE, "{second:?}");
    ensure!(
        acquired(&second) == vec![(2, 2, 2), (3, 4, 1)],
        "{:?}",
        acquired(&second)
    );
    // Records not held: INVALID_RECORD_STATE for that partition only.
    // With one batch refused, the partition's other batches are not applied
    // either (its one error code says so): 3, still held, is accepted below.
    let (top, parts) = acknowledge_all(&mut k, "m-1", 2, id, &[(3, 3, 1), (0, 0, 1)])?;
    ensure!(
        top == NONE && parts == vec![INVALID_RECORD_STATE],
        "{top} {parts:?}"
    );
    ensure!(start_offset(&mut k)? == 2);
    // The group has a member: its offsets stay as they are.
    let alter = AlterShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(s("sg")))
        .with_topics(vec![AlterShareGroupOffsetsRequestTopic::default()
            .with_topic_name(TopicName(s("q")))
            .with_partitions(vec![
                AlterShareGroupOffsetsRequestPartition::default()
                    .with_partition_index(0)
                    .with_start_offset(0),
            ])]);
    ensure!(k.call(0, &alter)?.error_code == NON_EMPTY_GROUP);
    let described = k.call(
        1,
        &ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("sg"))]),
    )?;
    let g = &described.groups[0];
    ensure!(
        g.error_code == NONE && g.members.len() == 1,
        "{described:?}"
    );
    ensure!(g.members[0].member_id.as_str() == "m-1");
    ensure!(
        g.members[0].assignment.topic_partitions[0]
            .topic_name
            .0
            .as_str()
            == "q"
    );
    let listed = k.call(
        5,
        &ListGroupsRequest::default().with_types_filter(vec![s("share")]),
    )?;
    ensure!(
        listed.groups.len() == 1
            && listed.groups[0].group_type.as_str() == "share"
            && listed.groups[0].group_state.as_str() == "Stable",
        "{listed:?}"
    );
    // Accept 3 and close the session (epoch -1): 2 and 4, still held, go back.
    let (top, parts) = acknowledge(&mut k, "m-1", 3, id, 3, 3, 1)?;
    ensure!(top == NONE && parts == vec![NONE], "{top} {parts:?}");
    let (top, _) = acknowledge(&mut k, "m-1", -1, id, 3, 3, 1)?;
    ensure!(top == NONE);
    ensure!(acknowledge(&mut k, "m-1", 5, id, 2, 2, 1)?.0 == SHARE_SESSION_NOT_FOUND);
    let reopened = share_fetch(&mut k, "m-1", 0, id, vec![])?;
    ensure!(
        acquired(&reopened) == vec![(2, 2, 3), (4, 4, 2)],
        "{:?}",
        acquired(&reopened)
    );
    // Leaving: the group is empty, so its offsets can move and be deleted.
    ensure!(heartbeat(&mut k, "m-1", -1, None)?.0 == NONE);
    ensure!(k.call(0, &alter)?.error_code == NONE);
    ensure!(start_offset(&mut k)? == 0);
    create(&mut k, "q2")?;
    let mut alter_q2 = alter.clone();
    alter_q2.topics[0].topic_name = TopicName(s("q2"));
    ensure!(k.call(0, &alter_q2)?.error_code == NONE);
    let delete = DeleteShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(s("sg")))
        .with_topics(vec![
            DeleteShareGroupOffsetsRequestTopic::default().with_topic_name(TopicName(s("q")))
        ]);
    let deleted = k.call(0, &delete)?;
    ensure!(
        deleted.error_code == NONE && deleted.responses[0].error_code == NONE,
        "{deleted:?}"
    );
    let left = k.call(
        0,
        &DescribeShareGroupOffsetsRequest::default().with_groups(vec![
            DescribeShareGroupOffsetsRequestGroup::default()
                .with_group_id(GroupId(s("sg")))
                .with_topics(None),
        ]),
    )?;
    let topics: Vec<&str> = left.groups[0]
        .topics
        .iter()
        .map(|t| t.topic_name.0.as_str())
        .collect();
    ensure!(topics == vec!["q2"], "{left:?}");
    let groups = k.call(
        2,
        &DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("sg"))]),
    )?;
    ensure!(groups.results[0].error_code == NONE, "{groups:?}");
    let listed = k.call(
        5,
        &ListGroupsRequest::default().with_types_filter(vec![s("share")]),
    )?;
    ensure!(listed.groups.is_empty(), "{listed:?}");
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn group_configs_are_set_described_checked_and_kept() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let describe = |k: &mut Kc| -> Result<Vec<(String, String, i8)>> {
        let req = DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(GROUP)
                .with_resource_name(s("cfg"))
                .with_configuration_keys(None),
        ]);
        let resp = k.call(4, &req)?;
        ensure!(resp.results[0].error_code == NONE, "{resp:?}");
        Ok(resp.results[0]
            .configs
            .iter()
            .map(|c| {
                (
                    c.name.to_string(),
                    c.value.as_ref().map(|v| v.to_string()).unwrap_or_default(),
                    c.config_source,
                )
            })
            .collect())
    };
    let set = |k: &mut Kc, name: &str, value: &str| -> Result<i16> {
        let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(GROUP)
                .with_resource_name(s("cfg"))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(s(name))
                    .with_config_operation(0)
                    .with_value(Some(s(value)))]),
        ]);
        Ok(k.call(1, &req)?.responses[0].error_code)
    };
    {
        let (broker, mut k) = start(dir.path())?;
        let defaults = describe(&mut k)?;
        ensure!(
            defaults.contains(&("share.record.lock.duration.ms".into(), "30000".into(), 5)),
            "{defaults:?}"
        );
        ensure!(set(&mut k, "share.record.lock.duration.ms", "2000")? == NONE);
        ensure!(set(&mut k, "share.delivery.count.limit", "3")? == NONE);
        ensure!(set(&mut k, "share.delivery.count.limit", "11")? == INVALID_CONFIG);
        ensure!(set(&mut k, "share.no.such.config", "1")? == INVALID_CONFIG);
        ensure!(set(&mut k, "share.isolation.level", "read_uncommitted")? == NONE);
        ensure!(set(&mut k, "share.isolation.level", "uncommitted")? == INVALID_CONFIG);
        flume_rt::block_on(broker.shutdown());
    }
    let (broker, mut k) = start(dir.path())?;
    let kept = describe(&mut k)?;
    ensure!(
        kept.contains(&("share.record.lock.duration.ms".into(), "2000".into(), 8))
            && kept.contains(&("share.delivery.count.limit".into(), "3".into(), 8))
            && kept.contains(&("share.auto.offset.reset".into(), "latest".into(), 5))
            && kept.contains(&("share.isolation.level".into(), "read_uncommitted".into(), 8)),
        "{kept:?}"
    );
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

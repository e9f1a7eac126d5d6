//! What librdkafka's own test suite found on the Kafka listener
//! (docs/kafka-clients.md, "Conformance"), each as a test of its own: fetch answers within
//! `fetch.max.bytes`, any non-empty group id, commit metadata and leader
//! epochs kept, empty groups keeping their protocol type, authorized
//! operations, 249-character topic names. The initial rebalance delay's test
//! is in `e2e_kafka_groups.rs` (it needs the manual clock's helpers).

use crate::common;
use crate::common::kafka::Kc;

use anyhow::{ensure, Context, Result};
use flume_broker::Broker;
use flume_client::lowlevel::Client;
use flume_client::ConnectionConfig;
use flume_protocol::{self as protocol, ErrorCode};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, DeleteTopicsRequest, DescribeClusterRequest,
    DescribeGroupsRequest, FetchRequest, GroupId, JoinGroupRequest, LeaveGroupRequest,
    ListGroupsRequest, MetadataRequest, OffsetCommitRequest, OffsetFetchRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

const NONE: i16 = 0;
const MEMBER_ID_REQUIRED: i16 = 79;
const INVALID_TOPIC_EXCEPTION: i16 = 17;
const OFFSET_METADATA_TOO_LARGE: i16 = 12;

fn start(dir: &std::path::Path) -> Result<Broker> {
    let mut c = common::config(dir);
    c.kafka_listen = Some("127.0.0.1:0".into());
    flume_rt::block_on(Broker::start(c)).context("broker starts")
}

fn kafka(broker: &Broker) -> Result<Kc> {
    Kc::connect(&broker.kafka_addr().context("kafka listener")?.to_string())
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

fn group(s: &str) -> GroupId {
    GroupId(StrBytes::from_string(s.to_owned()))
}

/// Produces one record of `size` bytes to each partition of `topic` through
/// the Flume protocol.
fn fill(broker: &Broker, topic: &str, partitions: i32, size: usize) -> Result<()> {
    flume_rt::block_on(async {
        let c =
            Client::connect(broker.local_addr().to_string(), ConnectionConfig::default()).await?;
        for p in 0..partitions {
            let mut rec = Vec::new();
            protocol::record::encode(&mut rec, 0, 0, None, &vec![b'v'; size], &[]);
            let r = c
                .call(&protocol::ProduceRequest {
                    entries: vec![protocol::ProduceEntry {
                        topic: topic.into(),
                        partition: p,
                        records: rec.into(),
                    }],
                })
                .await?;
            ensure!(r.results[0].error == ErrorCode::None, "{:?}", r.results[0]);
        }
        Ok(())
    })
}

/// librdkafka 0082: three partitions each holding one 600 KB record, fetched
/// with `fetch.max.bytes` 1,000,512. Only the first record of the first
/// non-empty partition may pass a limit, so the answer holds one record, not
/// three (1.8 MB, which librdkafka takes for a broken frame and drops the
/// connection). The same through Flume's protocol.
#[test]
fn a_fetch_answer_stays_within_its_max_bytes_on_both_protocols() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    broker
        .engine()
        .records()
        .create_topic("big", common::topic(3))?;
    fill(&broker, "big", 3, 600_000)?;
    let max_bytes = 1_000_512;
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(100)
        .with_min_bytes(1)
        .with_max_bytes(max_bytes)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name("big"))
            .with_partitions(
                (0..3)
                    .map(|p| {
                        FetchPartition::default()
                            .with_partition(p)
                            .with_fetch_offset(0)
                            .with_partition_max_bytes(1 << 20)
                    })
                    .collect(),
            )]);
    let resp = kafka(&broker)?.call(11, &req)?;
    let sizes: Vec<usize> = resp.responses[0]
        .partitions
        .iter()
        .map(|p| p.records.as_ref().map_or(0, bytes::Bytes::len))
        .collect();
    let total: usize = sizes.iter().sum();
    ensure!(
        total <= usize::try_from(max_bytes)?,
        "Kafka fetch of {total} record bytes ({sizes:?}) past max_bytes {max_bytes}"
    );
    ensure!(
        sizes[0] > 0,
        "the first partition's record goes out: {sizes:?}"
    );
    // A record larger than the whole limit still goes out when it is first.
    let small = req.clone().with_max_bytes(1000);
    let resp = kafka(&broker)?.call(11, &small)?;
    let sizes: Vec<usize> = resp.responses[0]
        .partitions
        .iter()
        .map(|p| p.records.as_ref().map_or(0, bytes::Bytes::len))
        .collect();
    ensure!(sizes[0] > 600_000 && sizes[1..] == [0, 0], "{sizes:?}");
    // Flume's protocol: the same rule.
    let flume = flume_rt::block_on(async {
        let c =
            Client::connect(broker.local_addr().to_string(), ConnectionConfig::default()).await?;
        c.call(&protocol::FetchRequest {
            max_wait_ms: 100,
            min_bytes: 1,
            max_bytes,
            partitions: (0..3)
                .map(|partition| protocol::FetchPartition {
                    topic: "big".into(),
                    partition,
                    offset: 0,
                    max_bytes: 1 << 20,
                })
                .collect(),
        })
        .await
        .map_err(anyhow::Error::from)
    })?;
    let total: usize = flume.partitions.iter().map(|p| p.records.len()).sum();
    ensure!(
        total <= usize::try_from(max_bytes)? && !flume.partitions[0].records.is_empty(),
        "Flume fetch of {total} record bytes past max_bytes {max_bytes}"
    );
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

fn join(group_id: &str, member: &str) -> JoinGroupRequest {
    let mut p = JoinGroupRequestProtocol::default();
    p.name = StrBytes::from_static_str("range");
    p.metadata = bytes::Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 0]);
    let mut r = JoinGroupRequest::default();
    r.group_id = group(group_id);
    r.member_id = StrBytes::from_string(member.to_owned());
    r.session_timeout_ms = 6000;
    r.rebalance_timeout_ms = 10_000;
    r.protocol_type = StrBytes::from_static_str("consumer");
    r.protocols = vec![p];
    r
}

/// Joins `group_id` alone and syncs, as its leader (generation 1, stable):
/// its member id.
fn join_alone(k: &mut Kc, group_id: &str) -> Result<String> {
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
    use kafka_protocol::messages::SyncGroupRequest;
    let first = k.call(4, &join(group_id, ""))?;
    ensure!(first.error_code == MEMBER_ID_REQUIRED, "{first:?}");
    let r = k.call(4, &join(group_id, first.member_id.as_str()))?;
    ensure!(r.error_code == NONE && r.generation_id == 1, "{r:?}");
    let mut a = SyncGroupRequestAssignment::default();
    a.member_id = r.member_id.clone();
    let mut sync = SyncGroupRequest::default();
    sync.group_id = group(group_id);
    sync.member_id = r.member_id.clone();
    sync.generation_id = 1;
    sync.assignments = vec![a];
    let s = k.call(3, &sync)?;
    ensure!(s.error_code == NONE, "{s:?}");
    Ok(r.member_id.as_str().to_owned())
}

fn commit(
    group_id: &str,
    member: &str,
    generation: i32,
    metadata: Option<&str>,
) -> OffsetCommitRequest {
    let mut p = OffsetCommitRequestPartition::default();
    p.partition_index = 0;
    p.committed_offset = 1;
    p.committed_leader_epoch = 5;
    p.committed_metadata = metadata.map(|m| StrBytes::from_string(m.to_owned()));
    let mut t = OffsetCommitRequestTopic::default();
    t.name = name("t");
    t.partitions = vec![p];
    let mut r = OffsetCommitRequest::default();
    r.group_id = group(group_id);
    r.member_id = StrBytes::from_string(member.to_owned());
    r.generation_id_or_member_epoch = generation;
    r.topics = vec![t];
    r
}

/// (offset, leader epoch, metadata) committed for t/0, by OffsetFetch v7.
fn fetched(k: &mut Kc, group_id: &str) -> Result<(i64, i32, String)> {
    let mut t = OffsetFetchRequestTopic::default();
    t.name = name("t");
    t.partition_indexes = vec![0];
    let mut r = OffsetFetchRequest::default();
    r.group_id = group(group_id);
    r.topics = Some(vec![t]);
    let resp = k.call(7, &r)?;
    ensure!(resp.error_code == NONE, "{resp:?}");
    let p = &resp.topics[0].partitions[0];
    Ok((
        p.committed_offset,
        p.committed_leader_epoch,
        p.metadata
            .as_ref()
            .map(|m| m.as_str().to_owned())
            .unwrap_or_default(),
    ))
}

/// librdkafka 0132 uses the group id `roundrobin,range`: Kafka takes any
/// non-empty group id, and so does Flume now, through both protocols.
#[test]
fn any_non_empty_group_id_is_a_group() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    broker
        .engine()
        .records()
        .create_topic("t", common::topic(1))?;
    let mut k = kafka(&broker)?;
    for id in ["roundrobin,range", "my app/v2", "__group", "ünïcode"] {
        let member = join_alone(&mut k, id)?;
        let r = k.call(8, &commit(id, &member, 1, None))?;
        ensure!(r.topics[0].partitions[0].error_code == NONE, "{id}: {r:?}");
        ensure!(fetched(&mut k, id)?.0 == 1, "{id}");
    }
    let empty = k.call(4, &join("", ""))?;
    ensure!(empty.error_code == 24, "an empty group id: {empty:?}");
    // Flume's protocol joins such a group too.
    flume_rt::block_on(async {
        let c =
            Client::connect(broker.local_addr().to_string(), ConnectionConfig::default()).await?;
        let j = c
            .call(&protocol::JoinGroupRequest {
                group: "my app/v2 (flume)".into(),
                member_id: String::new(),
                session_timeout_ms: 10_000,
                rebalance_timeout_ms: 1_000,
                assignor: String::new(),
                topics: vec!["t".into()],
            })
            .await?;
        ensure!(j.generation == 1, "{j:?}");
        anyhow::Ok(())
    })?;
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

/// librdkafka 0099 and 0140 commit metadata, 0081 a leader epoch: OffsetFetch
/// returns what was committed, after a restart too; metadata past 4096 bytes
/// is OFFSET_METADATA_TOO_LARGE and changes nothing.
#[test]
fn commit_metadata_and_leader_epochs_are_kept_across_restarts() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    broker
        .engine()
        .records()
        .create_topic("t", common::topic(1))?;
    let mut k = kafka(&broker)?;
    let member = join_alone(&mut k, "meta")?;
    let r = k.call(8, &commit("meta", &member, 1, Some("checkpoint 42")))?;
    ensure!(r.topics[0].partitions[0].error_code == NONE, "{r:?}");
    ensure!(fetched(&mut k, "meta")? == (1, 5, "checkpoint 42".into()));
    let big = "m".repeat(4097);
    let r = k.call(8, &commit("meta", &member, 1, Some(&big)))?;
    ensure!(
        r.topics[0].partitions[0].error_code == OFFSET_METADATA_TOO_LARGE,
        "{r:?}"
    );
    ensure!(fetched(&mut k, "meta")? == (1, 5, "checkpoint 42".into()));
    drop(k);
    flume_rt::block_on(broker.shutdown());
    let broker = start(dir.path())?;
    let mut k = kafka(&broker)?;
    ensure!(
        fetched(&mut k, "meta")? == (1, 5, "checkpoint 42".into()),
        "after a restart"
    );
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

fn listed(k: &mut Kc, group_id: &str) -> Result<(String, String)> {
    let r = k.call(4, &ListGroupsRequest::default())?;
    let g = r
        .groups
        .iter()
        .find(|g| g.group_id.0.as_str() == group_id)
        .with_context(|| format!("{group_id} listed: {r:?}"))?;
    Ok((
        g.protocol_type.as_str().to_owned(),
        g.group_state.as_str().to_owned(),
    ))
}

/// librdkafka 0081 lists groups whose consumers have closed and expects
/// "consumer" groups in state Empty, not "simple" ones (an empty protocol
/// type): an empty group keeps its protocol type, and one known only by its
/// committed offsets (after the coordinator dropped it, or a restart) is
/// listed with the protocol type it committed with.
#[test]
fn an_empty_group_keeps_its_protocol_type_after_its_members_and_a_restart() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    broker
        .engine()
        .records()
        .create_topic("t", common::topic(1))?;
    let mut k = kafka(&broker)?;
    let member = join_alone(&mut k, "was-consumers")?;
    let r = k.call(8, &commit("was-consumers", &member, 1, None))?;
    ensure!(r.topics[0].partitions[0].error_code == NONE, "{r:?}");
    let mut leave = LeaveGroupRequest::default();
    leave.group_id = group("was-consumers");
    let mut who = MemberIdentity::default();
    who.member_id = StrBytes::from_string(member);
    leave.members = vec![who];
    ensure!(k.call(3, &leave)?.error_code == NONE);
    ensure!(listed(&mut k, "was-consumers")? == ("consumer".into(), "Empty".into()));
    let d = k.call(
        5,
        &DescribeGroupsRequest::default().with_groups(vec![group("was-consumers")]),
    )?;
    ensure!(d.groups[0].protocol_type.as_str() == "consumer", "{d:?}");
    // A tool's commit from outside any group stays a "simple" group.
    let r = k.call(8, &commit("tool", "", -1, None))?;
    ensure!(r.topics[0].partitions[0].error_code == NONE, "{r:?}");
    ensure!(listed(&mut k, "tool")? == (String::new(), "Empty".into()));
    drop(k);
    flume_rt::block_on(broker.shutdown());
    let broker = start(dir.path())?;
    let mut k = kafka(&broker)?;
    ensure!(
        listed(&mut k, "was-consumers")? == ("consumer".into(), "Empty".into()),
        "after a restart, from its offsets"
    );
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

/// librdkafka 0081 asks for authorized operations (Metadata v8+,
/// DescribeGroups v3+, DescribeCluster): with the authorizer off every
/// operation Kafka defines for the resource type is allowed; not asked,
/// Kafka's "omitted" value.
#[test]
fn authorized_operations_are_answered_when_asked_for() -> Result<()> {
    // AclOperation codes: READ 3 .. ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12.
    let bits = |codes: &[u32]| codes.iter().fold(0i32, |b, c| b | (1 << c));
    let topic_ops = bits(&[3, 4, 5, 6, 7, 8, 10, 11]);
    let cluster_ops = bits(&[5, 7, 8, 9, 10, 11, 12]);
    let group_ops = bits(&[3, 6, 8]);
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    broker
        .engine()
        .records()
        .create_topic("t", common::topic(1))?;
    let mut k = kafka(&broker)?;
    let m = k.call(
        8,
        &MetadataRequest::default()
            .with_topics(None)
            .with_include_cluster_authorized_operations(true)
            .with_include_topic_authorized_operations(true),
    )?;
    ensure!(m.cluster_authorized_operations == cluster_ops, "{m:?}");
    ensure!(
        m.topics[0].topic_authorized_operations == topic_ops,
        "{m:?}"
    );
    let m = k.call(9, &MetadataRequest::default().with_topics(None))?;
    ensure!(m.topics[0].topic_authorized_operations == i32::MIN, "{m:?}");
    let c = k.call(
        0,
        &DescribeClusterRequest::default().with_include_cluster_authorized_operations(true),
    )?;
    ensure!(
        c.error_code == NONE && c.cluster_id.as_str() == "flume",
        "{c:?}"
    );
    ensure!(
        c.brokers.len() == 1 && c.cluster_authorized_operations == cluster_ops,
        "{c:?}"
    );
    join_alone(&mut k, "ops")?;
    let d = k.call(
        3,
        &DescribeGroupsRequest::default()
            .with_groups(vec![group("ops")])
            .with_include_authorized_operations(true),
    )?;
    ensure!(d.groups[0].authorized_operations == group_ops, "{d:?}");
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

/// librdkafka 0028 probes the topic name limit: Kafka allows 249
/// characters. A topic of that length is created, used, deleted (its
/// tombstone's name has to fit a file name) and created again; 250 is refused.
#[test]
fn topic_names_of_249_characters_work_end_to_end() -> Result<()> {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    let mut k = kafka(&broker)?;
    let long = "t".repeat(249);
    let create = |n: &str| {
        let mut t = CreatableTopic::default();
        t.name = name(n);
        t.num_partitions = 1;
        t.replication_factor = 1;
        let mut r = CreateTopicsRequest::default();
        r.topics = vec![t];
        r.timeout_ms = 5000;
        r
    };
    for _ in 0..2 {
        let r = k.call(5, &create(&long))?;
        ensure!(r.topics[0].error_code == NONE, "{r:?}");
        fill(&broker, &long, 1, 10)?;
        let mut d = DeleteTopicsRequest::default();
        let mut s = DeleteTopicState::default();
        s.name = Some(name(&long));
        d.topics = vec![s];
        d.timeout_ms = 5000;
        let r = k.call(6, &d)?;
        ensure!(r.responses[0].error_code == NONE, "{r:?}");
    }
    let r = k.call(5, &create(&"t".repeat(250)))?;
    ensure!(r.topics[0].error_code == INVALID_TOPIC_EXCEPTION, "{r:?}");
    // Nothing of the deleted topic is left behind.
    let left: Vec<_> = std::fs::read_dir(dir.path())?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("__deleted") || n.starts_with("ttt"))
        .collect();
    ensure!(left.is_empty(), "{left:?}");
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

/// librdkafka 0118 saw its coordinator connection closed after 30 s without
/// a request: Kafka keeps an idle connection for `connections.max.idle.ms`
/// (10 minutes), and clients keep idle connections to the coordinator and
/// each leader. An idle connection outlives the read timeout (which still
/// bounds a started frame) and is closed at the idle limit.
#[test]
fn an_idle_kafka_connection_lives_until_connections_max_idle() -> Result<()> {
    use std::io::Read;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir()?;
    let mut c = common::config(dir.path());
    c.kafka_listen = Some("127.0.0.1:0".into());
    c.read_timeout = Duration::from_millis(200);
    c.connections_max_idle = Duration::from_millis(1500);
    let broker = flume_rt::block_on(Broker::start(c))?;
    let mut k = kafka(&broker)?;
    k.call(9, &MetadataRequest::default().with_topics(None))?;
    // Idle past the read timeout (the time passing is what is tested).
    std::thread::sleep(Duration::from_millis(600));
    let m = k.call(9, &MetadataRequest::default().with_topics(None))?;
    ensure!(m.brokers.len() == 1, "answered after an idle spell: {m:?}");
    // Idle past connections_max_idle: closed by the broker.
    let started = Instant::now();
    k.s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut byte = [0u8; 1];
    let n = k.s.read(&mut byte)?;
    ensure!(n == 0, "EOF expected");
    let took = started.elapsed();
    ensure!(
        took >= Duration::from_millis(1000),
        "closed after {took:?}, before the idle limit"
    );
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

/// One batch of records with these keys (`None`: no key) and values of
/// `value_bytes[i]` bytes.
fn keyed_batch(keys: &[Option<&str>], value_bytes: &[usize]) -> Result<bytes::Bytes> {
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let records: Vec<Record> = keys
        .iter()
        .zip(value_bytes)
        .enumerate()
        .map(|(i, (k, n))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i64::try_from(i).unwrap_or(0),
            sequence: -1,
            timestamp: 1_700_000_000_000,
            key: k.map(|k| bytes::Bytes::copy_from_slice(k.as_bytes())),
            value: Some(bytes::Bytes::from(vec![b'v'; *n])),
            headers: Default::default(),
        })
        .collect();
    let mut b = bytes::BytesMut::new();
    RecordBatchEncoder::encode(
        &mut b,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::Lz4,
        },
    )?;
    Ok(b.freeze())
}

/// Produce of one batch to partition 0 of `topic` at `version`.
fn produce_batch(
    k: &mut Kc,
    version: i16,
    topic: &str,
    records: bytes::Bytes,
) -> Result<kafka_protocol::messages::produce_response::PartitionProduceResponse> {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::ProduceRequest;
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    let resp = k.call(version, &req)?;
    resp.responses
        .into_iter()
        .next()
        .and_then(|t| t.partition_responses.into_iter().next())
        .context("a partition response")
}

/// librdkafka 2.15's test 0011 (KIP-467): one batch of 100 records to a
/// compacted topic, every tenth without a key. The answer names exactly
/// those ten (their batch index and why) and says what happened, so the
/// client fails them with INVALID_RECORD and the other 90 with "another
/// record of the batch was invalid"; nothing of the batch is stored. A
/// record over the broker's record limit is named the same way
/// (MESSAGE_TOO_LARGE). Before Produce v8 only the code is answered.
#[test]
fn a_refused_batch_names_its_bad_records() -> Result<()> {
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
    const INVALID_RECORD: i16 = 87;
    const MESSAGE_TOO_LARGE: i16 = 10;
    let dir = tempfile::tempdir()?;
    let mut c = common::config(dir.path());
    c.kafka_listen = Some("127.0.0.1:0".into());
    c.max_record_bytes = 4_000;
    let broker = flume_rt::block_on(Broker::start(c))?;
    let mut k = kafka(&broker)?;
    let topic = CreatableTopic::default()
        .with_name(name("compacted"))
        .with_num_partitions(1)
        .with_replication_factor(-1)
        .with_configs(vec![CreatableTopicConfig::default()
            .with_name(StrBytes::from_static_str("cleanup.policy"))
            .with_value(Some(StrBytes::from_static_str("compact")))]);
    let created = k.call(
        7,
        &CreateTopicsRequest::default()
            .with_topics(vec![topic])
            .with_timeout_ms(5_000),
    )?;
    ensure!(created.topics[0].error_code == NONE, "create");

    let keys: Vec<Option<&str>> = (0..100).map(|i| (i % 10 != 0).then_some("k")).collect();
    let p = produce_batch(&mut k, 9, "compacted", keyed_batch(&keys, &[20; 100])?)?;
    assert_eq!(p.error_code, INVALID_RECORD);
    assert_eq!(p.base_offset, -1);
    let bad: Vec<i32> = p.record_errors.iter().map(|e| e.batch_index).collect();
    assert_eq!(bad, (0..10).map(|i| i * 10).collect::<Vec<i32>>());
    assert!(p.record_errors.iter().all(|e| e
        .batch_index_error_message
        .as_ref()
        .is_some_and(|m| m.as_str() == "a record without a key on a compacted topic")));
    let message = p.error_message.as_ref().map(|m| m.as_str()).unwrap_or("");
    assert!(
        message
            .starts_with("10 of the batch's records are refused: record 0: a record without a key"),
        "{message}"
    );
    // v7 has no place for them: the code alone.
    let p = produce_batch(&mut k, 7, "compacted", keyed_batch(&keys, &[20; 100])?)?;
    assert_eq!((p.error_code, p.record_errors.len()), (INVALID_RECORD, 0));
    let keyed: Vec<Option<&str>> = vec![Some("k"); 3];
    let p = produce_batch(&mut k, 9, "compacted", keyed_batch(&keyed, &[20; 3])?)?;
    assert_eq!(
        (p.error_code, p.base_offset),
        (NONE, 0),
        "nothing of the refused batches was stored"
    );

    // A record over max_record_bytes, in the middle of its batch.
    let p = produce_batch(
        &mut k,
        9,
        "plain",
        keyed_batch(&[Some("a"), Some("b"), None], &[10, 5_000, 10])?,
    )?;
    assert_eq!(p.error_code, MESSAGE_TOO_LARGE);
    assert_eq!(p.record_errors.len(), 1);
    assert_eq!(p.record_errors[0].batch_index, 1);
    let why = p.record_errors[0]
        .batch_index_error_message
        .as_ref()
        .map(|m| m.as_str())
        .unwrap_or("");
    assert!(why.contains("above max_record_bytes (4000)"), "{why}");
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

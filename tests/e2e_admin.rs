//! The admin APIs Kafka tools use, through the Kafka listener (raw requests)
//! and through Flume's own SDK, with the engine's effects checked on both
//! sides and across a restart: CreatePartitions / CREATE_PARTITIONS,
//! DeleteGroups, OffsetDelete / DELETE_OFFSETS, ListOffsets' max timestamp
//! (-3, v7) and DescribeLogDirs.

use crate::common;
use crate::common::kafka::Kc;

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use bytes::{BufMut, Bytes, BytesMut};
use flume_broker::domain::{Member, TopicPartition};
use flume_broker::{Broker, BrokerConfig};
use flume_client::{Admin, ErrorCode, GroupConsumer, ListOffsetsPartition, MAX_TIMESTAMP};
use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsTopic,
};
use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition as KPartition, ListOffsetsTopic,
};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::{
    ApiVersionsRequest, BrokerId, ConsumerProtocolSubscription, CreatePartitionsRequest,
    DeleteGroupsRequest, DescribeLogDirsRequest, GroupId, HeartbeatRequest, JoinGroupRequest,
    ListOffsetsRequest, MetadataRequest, OffsetDeleteRequest, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};

const INVALID_PARTITIONS: i16 = 37;
const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const REBALANCE_IN_PROGRESS: i16 = 27;
const NON_EMPTY_GROUP: i16 = 68;
const GROUP_ID_NOT_FOUND: i16 = 69;
const MEMBER_ID_REQUIRED: i16 = 79;
const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;
const INVALID_REQUEST: i16 = 42;

fn cfg(dir: &std::path::Path) -> BrokerConfig {
    let mut c = common::config(dir);
    c.kafka_listen = Some("127.0.0.1:0".into());
    c
}

fn start(dir: &std::path::Path) -> Result<(Broker, String, String)> {
    let broker = flume_rt::block_on(Broker::start(cfg(dir))).context("broker starts")?;
    let kafka = broker.kafka_addr().context("kafka listener")?.to_string();
    let flume = broker.local_addr().to_string();
    Ok((broker, kafka, flume))
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

fn grow(topic: &str, count: i32, assignments: Option<Vec<Vec<i32>>>) -> CreatePartitionsTopic {
    let mut t = CreatePartitionsTopic::default();
    t.name = name(topic);
    t.count = count;
    t.assignments = assignments.map(|a| {
        a.into_iter()
            .map(|ids| {
                let mut x = CreatePartitionsAssignment::default();
                x.broker_ids = ids.into_iter().map(BrokerId).collect();
                x
            })
            .collect()
    });
    t
}

fn create_partitions(
    c: &mut Kc,
    version: i16,
    topics: Vec<CreatePartitionsTopic>,
    validate_only: bool,
) -> Result<Vec<(i16, String)>> {
    let mut r = CreatePartitionsRequest::default();
    r.topics = topics;
    r.timeout_ms = 5_000;
    r.validate_only = validate_only;
    Ok(c.call(version, &r)?
        .results
        .into_iter()
        .map(|t| {
            (
                t.error_code,
                t.error_message
                    .map(|m| m.as_str().to_owned())
                    .unwrap_or_default(),
            )
        })
        .collect())
}

/// Partitions of `topic` in a Kafka Metadata answer.
fn kafka_partitions(c: &mut Kc, topic: &str) -> Result<usize> {
    let mut t = MetadataRequestTopic::default();
    t.name = Some(name(topic));
    let mut r = MetadataRequest::default();
    r.topics = Some(vec![t]);
    let resp = c.call(12, &r)?;
    let t = resp.topics.first().context("one topic")?;
    ensure!(t.error_code == 0, "metadata: {t:?}");
    Ok(t.partitions.len())
}

async fn flume_partitions(admin: &Admin, topic: &str) -> Result<usize> {
    let t = admin.topics(&[topic.to_owned()]).await?;
    Ok(t.first().context("one topic")?.partitions.len())
}

#[test]
fn create_partitions_through_kafka_and_flume_grows_the_topic_for_both_and_persists() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (broker, kafka, flume) = start(dir.path())?;
    broker
        .engine()
        .records()
        .create_topic("t", common::topic(2))?;
    let mut c = Kc::connect(&kafka)?;
    for v in [0, 3] {
        let same = create_partitions(&mut c, v, vec![grow("t", 2, None)], false)?;
        ensure!(same[0].0 == INVALID_PARTITIONS, "{same:?}");
        ensure!(same[0].1.contains("has 2 partitions"), "{same:?}");
    }
    let answers = create_partitions(
        &mut c,
        2,
        vec![
            grow("t", 1, None),
            grow("nope", 3, None),
            grow("t", 4, Some(vec![vec![1], vec![0]])),
        ],
        false,
    );
    // A topic named twice is refused both times.
    let twice = answers?;
    ensure!(
        twice[0].0 == INVALID_REQUEST && twice[2].0 == INVALID_REQUEST,
        "{twice:?}"
    );
    ensure!(twice[1].0 == UNKNOWN_TOPIC_OR_PARTITION, "{twice:?}");
    let fewer = create_partitions(&mut c, 1, vec![grow("t", 1, None)], false)?;
    ensure!(fewer[0].0 == INVALID_PARTITIONS, "{fewer:?}");
    for bad in [
        vec![vec![1], vec![0]],
        vec![vec![0]],
        vec![vec![0, 0], vec![0]],
    ] {
        let r = create_partitions(&mut c, 1, vec![grow("t", 4, Some(bad.clone()))], false)?;
        ensure!(r[0].0 == INVALID_REPLICA_ASSIGNMENT, "{bad:?}: {r:?}");
    }
    let checked = create_partitions(&mut c, 1, vec![grow("t", 4, None)], true)?;
    ensure!(checked[0].0 == 0, "{checked:?}");
    ensure!(
        kafka_partitions(&mut c, "t")? == 2,
        "validate_only changed the topic"
    );
    let done = create_partitions(
        &mut c,
        1,
        vec![grow("t", 4, Some(vec![vec![0], vec![0]]))],
        false,
    )?;
    ensure!(done[0].0 == 0, "{done:?}");
    ensure!(kafka_partitions(&mut c, "t")? == 4);
    flume_rt::block_on(async {
        let admin = Admin::connect(&flume).await?;
        ensure!(
            flume_partitions(&admin, "t").await? == 4,
            "Flume sees the Kafka change"
        );
        ensure!(admin.create_partitions("t", 6, true).await? == 4);
        ensure!(
            flume_partitions(&admin, "t").await? == 4,
            "a dry run changed the topic"
        );
        ensure!(admin.create_partitions("t", 6, false).await? == 4);
        let again = admin.create_partitions("t", 6, false).await.unwrap_err();
        ensure!(again.code() == Some(ErrorCode::InvalidRequest), "{again}");
        let unknown = admin.create_partitions("nope", 6, false).await.unwrap_err();
        ensure!(unknown.code() == Some(ErrorCode::UnknownTopic), "{unknown}");
        anyhow::Ok(())
    })?;
    ensure!(
        kafka_partitions(&mut c, "t")? == 6,
        "Kafka sees the Flume change"
    );
    // The new partitions take records at once.
    let p5 = broker
        .engine()
        .records()
        .topic("t")
        .and_then(|t| t.partition(5).cloned())
        .context("partition 5")?;
    let mut rec = Vec::new();
    flume_protocol::record::encode(&mut rec, 0, 1, Some(b"k"), b"v", &[]);
    flume_rt::block_on(p5.append(Bytes::from(rec), 1, 1)).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    drop(c);
    flume_rt::block_on(broker.shutdown());
    let (broker, kafka, _) = start(dir.path())?;
    let mut c = Kc::connect(&kafka)?;
    ensure!(
        kafka_partitions(&mut c, "t")? == 6,
        "the count survives a restart"
    );
    let t = broker.engine().records().topic("t").context("topic")?;
    ensure!(t.partition(5).map(|p| p.end_offset()) == Some(1));
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

fn subscription(topic: &str) -> Bytes {
    let mut s = ConsumerProtocolSubscription::default();
    s.topics = vec![StrBytes::from_string(topic.to_owned())];
    let mut b = BytesMut::new();
    b.put_i16(0);
    s.encode(&mut b, 0).expect("subscription encodes");
    b.freeze()
}

fn join_req(group: &str, member: &str, topic: &str) -> JoinGroupRequest {
    let mut p = JoinGroupRequestProtocol::default();
    p.name = StrBytes::from_static_str("range");
    p.metadata = subscription(topic);
    let mut r = JoinGroupRequest::default();
    r.group_id = GroupId(StrBytes::from_string(group.to_owned()));
    r.member_id = StrBytes::from_string(member.to_owned());
    r.session_timeout_ms = 30_000;
    r.rebalance_timeout_ms = 10_000;
    r.protocol_type = StrBytes::from_static_str("consumer");
    r.protocols = vec![p];
    r
}

/// A Kafka member of `group` subscribed to `topic`, joined (the group's only
/// member, so its join completes at once): (member id, generation).
fn kafka_member(kafka: &str, group: &str, topic: &str) -> Result<(String, i32)> {
    let mut c = Kc::connect(kafka)?;
    let first = c.call(4, &join_req(group, "", topic))?;
    ensure!(first.error_code == MEMBER_ID_REQUIRED, "{first:?}");
    let id = first.member_id.as_str().to_owned();
    let joined = c.call(4, &join_req(group, &id, topic))?;
    ensure!(joined.error_code == 0, "{joined:?}");
    Ok((id, joined.generation_id))
}

fn heartbeat(kafka: &str, group: &str, member: &str, generation: i32) -> Result<i16> {
    let mut r = HeartbeatRequest::default();
    r.group_id = GroupId(StrBytes::from_string(group.to_owned()));
    r.member_id = StrBytes::from_string(member.to_owned());
    r.generation_id = generation;
    Ok(Kc::connect(kafka)?.call(3, &r)?.error_code)
}

fn commit(broker: &Broker, group: &str, at: &[(&str, i32, i64)]) -> Result<()> {
    let offsets: Vec<(TopicPartition, i64)> = at
        .iter()
        .map(|(t, p, o)| (TopicPartition::new(*t, *p), *o))
        .collect();
    let m = Member {
        group,
        member_id: "",
        generation: -1,
    };
    flume_rt::block_on(broker.engine().groups().commit_offsets(m, &offsets))
        .map_err(|e| anyhow::anyhow!("commit: {e:?}"))?;
    Ok(())
}

#[test]
fn growing_a_topic_rebalances_kafka_and_flume_groups_onto_the_new_partitions() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (broker, kafka, flume) = start(dir.path())?;
    broker
        .engine()
        .records()
        .create_topic("t", common::topic(2))?;
    let (member, generation) = kafka_member(&kafka, "kg", "t")?;
    ensure!(heartbeat(&kafka, "kg", &member, generation)? == 0);
    flume_rt::block_on(async {
        let mut consumer = GroupConsumer::builder(&flume, "fg")
            .topic("t")
            .session_timeout(Duration::from_secs(30))
            .build()
            .await?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while consumer.assignment().await.len() != 2 {
            ensure!(
                Instant::now() < deadline,
                "the Flume member never got its partitions"
            );
            let _ = flume_rt::timeout(Duration::from_millis(100), consumer.recv()).await;
        }
        let admin = Admin::connect(&flume).await?;
        admin.create_partitions("t", 5, false).await?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while consumer.assignment().await.len() != 5 {
            ensure!(
                Instant::now() < deadline,
                "the Flume member was not rebalanced onto the new partitions: {:?}",
                consumer.assignment().await
            );
            let _ = flume_rt::timeout(Duration::from_millis(100), consumer.recv()).await;
        }
        consumer.close().await?;
        anyhow::Ok(())
    })?;
    // The Kafka member learns of the rebalance from its heartbeat, and rejoins.
    ensure!(heartbeat(&kafka, "kg", &member, generation)? == REBALANCE_IN_PROGRESS);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn delete_groups_and_offset_delete_through_kafka_and_flume_survive_a_restart() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (broker, kafka, flume) = start(dir.path())?;
    broker
        .engine()
        .records()
        .create_topic("t", common::topic(2))?;
    broker
        .engine()
        .records()
        .create_topic("u", common::topic(1))?;
    commit(&broker, "idle", &[("t", 0, 5), ("t", 1, 6)])?;
    commit(&broker, "busy", &[("t", 0, 1), ("u", 0, 2)])?;
    commit(&broker, "flume-idle", &[("u", 0, 3)])?;
    commit(&broker, "partial", &[("t", 0, 7), ("t", 1, 8), ("u", 0, 9)])?;
    kafka_member(&kafka, "busy", "t")?;
    let mut c = Kc::connect(&kafka)?;
    let mut del = DeleteGroupsRequest::default();
    del.groups_names = ["idle", "never", "busy"]
        .iter()
        .map(|g| GroupId(StrBytes::from_static_str(g)))
        .collect();
    let codes: Vec<i16> = c
        .call(2, &del)?
        .results
        .iter()
        .map(|r| r.error_code)
        .collect();
    ensure!(
        codes == [0, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP],
        "{codes:?}"
    );
    ensure!(broker.engine().groups().committed("idle", "t", 0).is_none());
    ensure!(broker.engine().groups().committed("busy", "t", 0) == Some(1));

    let od = |group: &str, topics: &[(&str, &[i32])]| {
        let mut r = OffsetDeleteRequest::default();
        r.group_id = GroupId(StrBytes::from_string(group.to_owned()));
        r.topics = topics
            .iter()
            .map(|(t, ps)| {
                let mut x = OffsetDeleteRequestTopic::default();
                x.name = name(t);
                x.partitions = ps
                    .iter()
                    .map(|p| {
                        let mut y = OffsetDeleteRequestPartition::default();
                        y.partition_index = *p;
                        y
                    })
                    .collect();
                x
            })
            .collect();
        r
    };
    let resp = c.call(0, &od("busy", &[("t", &[0]), ("u", &[0])]))?;
    ensure!(resp.error_code == 0, "{resp:?}");
    let codes: Vec<i16> = resp
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
        .collect();
    ensure!(codes == [GROUP_SUBSCRIBED_TO_TOPIC, 0], "{codes:?}");
    ensure!(
        broker.engine().groups().committed("busy", "t", 0) == Some(1),
        "a subscribed topic's offset stays"
    );
    ensure!(broker.engine().groups().committed("busy", "u", 0).is_none());
    let resp = c.call(0, &od("never", &[("t", &[0])]))?;
    ensure!(resp.error_code == GROUP_ID_NOT_FOUND, "{resp:?}");
    let resp = c.call(0, &od("partial", &[("t", &[1, 7])]))?;
    let codes: Vec<i16> = resp.topics[0]
        .partitions
        .iter()
        .map(|p| p.error_code)
        .collect();
    ensure!(codes == [0, UNKNOWN_TOPIC_OR_PARTITION], "{codes:?}");

    flume_rt::block_on(async {
        let admin = Admin::connect(&flume).await?;
        let busy = admin.delete_group("busy").await.unwrap_err();
        ensure!(busy.code() == Some(ErrorCode::GroupNotEmpty), "{busy}");
        ensure!(admin.delete_group("flume-idle").await? == 1);
        let gone = admin.delete_offsets("partial", "t", &[]).await?;
        ensure!(
            gone.iter().all(|d| d.error == ErrorCode::None) && gone.len() == 2,
            "{gone:?}"
        );
        let in_use = admin.delete_offsets("busy", "t", &[0]).await?;
        ensure!(in_use[0].error == ErrorCode::GroupNotEmpty, "{in_use:?}");
        let unknown = admin.delete_offsets("never", "t", &[]).await.unwrap_err();
        ensure!(unknown.code() == Some(ErrorCode::UnknownGroup), "{unknown}");
        anyhow::Ok(())
    })?;
    ensure!(broker.engine().groups().committed("partial", "u", 0) == Some(9));
    drop(c);
    flume_rt::block_on(broker.shutdown());
    let (broker, _, _) = start(dir.path())?;
    let e = broker.engine();
    ensure!(
        e.groups().committed("idle", "t", 1).is_none(),
        "DeleteGroups is durable"
    );
    ensure!(e.groups().committed("flume-idle", "u", 0).is_none());
    ensure!(
        e.groups().committed("busy", "u", 0).is_none(),
        "OffsetDelete is durable"
    );
    ensure!(e.groups().committed("busy", "t", 0) == Some(1));
    ensure!(
        e.groups().committed("partial", "t", 0).is_none()
            && e.groups().committed("partial", "u", 0) == Some(9)
    );
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

fn list_offset(
    c: &mut Kc,
    version: i16,
    topic: &str,
    partition: i32,
    ts: i64,
) -> Result<(i16, i64, i64)> {
    let mut p = KPartition::default();
    p.partition_index = partition;
    p.timestamp = ts;
    let mut t = ListOffsetsTopic::default();
    t.name = name(topic);
    t.partitions = vec![p];
    let mut r = ListOffsetsRequest::default();
    r.replica_id = BrokerId(-1);
    r.topics = vec![t];
    let resp = c.call(version, &r)?;
    let p = &resp.topics[0].partitions[0];
    Ok((p.error_code, p.offset, p.timestamp))
}

#[test]
fn list_offsets_max_timestamp_and_describe_log_dirs() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (broker, kafka, flume) = start(dir.path())?;
    broker
        .engine()
        .records()
        .create_topic("t", common::topic(2))?;
    let p0 = broker
        .engine()
        .records()
        .topic("t")
        .and_then(|t| t.partition(0).cloned())
        .context("partition 0")?;
    for ts in [1_000, 5_000, 3_000, 5_000, 2_000] {
        let mut rec = Vec::new();
        flume_protocol::record::encode(&mut rec, 0, ts, None, b"value", &[]);
        flume_rt::block_on(p0.append(Bytes::from(rec), 1, ts))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    }
    let mut c = Kc::connect(&kafka)?;
    ensure!(list_offset(&mut c, 7, "t", 0, -3)? == (0, 1, 5_000));
    ensure!(
        list_offset(&mut c, 7, "t", 1, -3)? == (0, -1, -1),
        "an empty partition"
    );
    ensure!(
        list_offset(&mut c, 6, "t", 0, -3)?.0 == INVALID_REQUEST,
        "-3 is v7's"
    );
    let versions = c.call(3, &ApiVersionsRequest::default())?;
    for (key, max) in [(2, 10), (37, 3), (42, 2), (47, 0), (35, 4)] {
        ensure!(
            versions
                .api_keys
                .iter()
                .any(|k| k.api_key == key && k.max_version == max),
            "api {key} v{max} advertised"
        );
    }
    flume_rt::block_on(async {
        let admin = Admin::connect(&flume).await?;
        let found = admin
            .list_offsets(vec![ListOffsetsPartition {
                topic: "t".into(),
                partition: 0,
                timestamp: MAX_TIMESTAMP,
            }])
            .await?;
        ensure!(
            (found[0].offset, found[0].timestamp) == (1, 5_000),
            "{found:?}"
        );
        anyhow::Ok(())
    })?;
    for v in [1, 4] {
        // Null topics: every topic (an empty list asks for none).
        let mut all = DescribeLogDirsRequest::default();
        all.topics = None;
        let resp = c.call(v, &all)?;
        ensure!(resp.results.len() == 1, "{resp:?}");
        let d = &resp.results[0];
        let want = std::fs::canonicalize(dir.path())?;
        ensure!(
            d.log_dir.as_str() == want.display().to_string(),
            "{}",
            d.log_dir.as_str()
        );
        let t = d
            .topics
            .iter()
            .find(|t| t.name.0.as_str() == "t")
            .context("topic t")?;
        ensure!(t.partitions.len() == 2, "{t:?}");
        ensure!(t.partitions[0].partition_size > 0 && !t.partitions[0].is_future_key);
    }
    let mut only = DescribableLogDirTopic::default();
    only.topic = name("t");
    only.partitions = vec![1];
    let mut r = DescribeLogDirsRequest::default();
    r.topics = Some(vec![only]);
    let resp = c.call(2, &r)?;
    let parts: Vec<i32> = resp.results[0].topics[0]
        .partitions
        .iter()
        .map(|p| p.partition_index)
        .collect();
    ensure!(parts == [1], "{parts:?}");
    drop(c);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn the_admin_apis_follow_kafkas_acl_rules() -> Result<()> {
    use flume_broker::security::acl::{
        Acl, AclPrincipal, Operation, PatternType, Permission, ResourceType,
    };
    let dir = tempfile::tempdir()?;
    // Authentication off: every connection is User:ANONYMOUS.
    let mut c = cfg(dir.path());
    c.authorizer = true;
    let broker = flume_rt::block_on(Broker::start(c))?;
    for t in ["public", "secret"] {
        broker
            .engine()
            .records()
            .create_topic(t, common::topic(1))?;
    }
    commit(&broker, "g", &[("public", 0, 1), ("secret", 0, 2)])?;
    let allow = |operation, resource_type, name: &str| Acl {
        principal: AclPrincipal::Anonymous,
        permission: Permission::Allow,
        resource_type,
        pattern: PatternType::Literal,
        name: name.into(),
        operation,
    };
    flume_rt::block_on(broker.add_acl(allow(Operation::Read, ResourceType::Topic, "public")))?;
    let mut k = Kc::connect(&broker.kafka_addr().context("kafka")?.to_string())?;
    let r = create_partitions(&mut k, 1, vec![grow("public", 2, None)], false)?;
    ensure!(
        r[0].0 == 29,
        "CreatePartitions needs ALTER on the topic: {r:?}"
    );
    let mut del = DeleteGroupsRequest::default();
    del.groups_names = vec![GroupId(StrBytes::from_static_str("g"))];
    ensure!(
        k.call(1, &del)?.results[0].error_code == 30,
        "DeleteGroups needs DELETE on the group"
    );
    let od = |topic: &str| {
        let mut p = OffsetDeleteRequestPartition::default();
        p.partition_index = 0;
        let mut t = OffsetDeleteRequestTopic::default();
        t.name = name(topic);
        t.partitions = vec![p];
        let mut r = OffsetDeleteRequest::default();
        r.group_id = GroupId(StrBytes::from_static_str("g"));
        r.topics = vec![t];
        r
    };
    ensure!(k.call(0, &od("public"))?.error_code == 30);
    let mut logs = DescribeLogDirsRequest::default();
    logs.topics = None;
    ensure!(
        k.call(3, &logs)?.error_code == 31,
        "DescribeLogDirs needs DESCRIBE on the cluster"
    );
    flume_rt::block_on(async {
        let admin = Admin::connect(&broker.local_addr().to_string()).await?;
        let e = admin
            .create_partitions("public", 2, false)
            .await
            .unwrap_err();
        ensure!(e.code() == Some(ErrorCode::AuthorizationFailed), "{e}");
        anyhow::Ok(())
    })?;
    ensure!(
        broker
            .engine()
            .records()
            .topic("public")
            .map(|t| t.partition_count())
            == Some(1)
    );

    // Granted: DELETE on the group, and READ on the topic for OffsetDelete.
    flume_rt::block_on(broker.add_acl(allow(Operation::Delete, ResourceType::Group, "g")))?;
    let codes: Vec<i16> = [od("public"), od("secret")]
        .iter()
        .map(|r| Ok(k.call(0, r)?.topics[0].partitions[0].error_code))
        .collect::<Result<_>>()?;
    ensure!(codes == [0, 29], "{codes:?}");
    ensure!(broker.engine().groups().committed("g", "secret", 0) == Some(2));
    flume_rt::block_on(broker.add_acl(allow(Operation::Alter, ResourceType::Topic, "public")))?;
    let r = create_partitions(&mut k, 1, vec![grow("public", 2, None)], false)?;
    ensure!(r[0].0 == 0, "{r:?}");
    drop(k);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

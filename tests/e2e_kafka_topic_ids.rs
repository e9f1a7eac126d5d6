//! Topic ids (KIP-516) and DescribeTopicPartitions (KIP-966) on the Kafka
//! listener, with raw `kafka-protocol` frames: every topic has a random id
//! from its creation, the same after a restart and another once the topic
//! is deleted and created again, answered by CreateTopics, Metadata (and
//! Metadata by id), DescribeTopicPartitions and DeleteTopics (which deletes
//! by id too) and Fetch v13 (which reads by id: a stale id reads nothing);
//! DescribeTopicPartitions pages through every partition with its cursor,
//! within Kafka's limit, and follows the ACLs.

use crate::common;
use crate::common::kafka::Kc;

use std::path::Path;

use anyhow::{ensure, Context, Result};
use flume_broker::security::acl::{
    Acl, AclPrincipal, Operation, PatternType, Permission, ResourceType,
};
use flume_broker::Broker;
use flume_protocol::kafka_batch;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_topic_partitions_request::{Cursor, TopicRequest};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, BrokerId, CreateTopicsRequest, DeleteTopicsRequest,
    DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, FetchRequest, MetadataRequest,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

const NONE: i16 = 0;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const INVALID_TOPIC_EXCEPTION: i16 = 17;
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
const INVALID_REQUEST: i16 = 42;
const UNKNOWN_TOPIC_ID: i16 = 100;

fn start(dir: &Path, authorizer: bool) -> Result<(Broker, Kc)> {
    let mut c = common::config(dir);
    c.kafka_listen = Some("127.0.0.1:0".into());
    c.authorizer = authorizer;
    let broker = flume_rt::block_on(Broker::start(c)).context("broker starts")?;
    let k = Kc::connect(&broker.kafka_addr().context("kafka")?.to_string())?;
    Ok((broker, k))
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

/// Creates `topic` with CreateTopics v7: its id.
fn create(k: &mut Kc, topic: &str, partitions: i32) -> Result<Uuid> {
    let mut t = CreatableTopic::default();
    t.name = name(topic);
    t.num_partitions = partitions;
    t.replication_factor = 1;
    let mut r = CreateTopicsRequest::default();
    r.topics = vec![t];
    r.timeout_ms = 5_000;
    let resp = k.call(7, &r)?;
    ensure!(resp.topics[0].error_code == NONE, "{resp:?}");
    Ok(resp.topics[0].topic_id)
}

/// Every topic's id by Metadata v12: (name, id), by name.
fn metadata_ids(k: &mut Kc) -> Result<Vec<(String, Uuid)>> {
    let mut r = MetadataRequest::default();
    r.topics = None;
    let mut ids: Vec<(String, Uuid)> = k
        .call(13, &r)?
        .topics
        .iter()
        .map(|t| {
            let n = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
            (n, t.topic_id)
        })
        .collect();
    ids.sort();
    Ok(ids)
}

/// Metadata v12 for one topic by its id: (error code, name, id).
fn metadata_by_id(k: &mut Kc, id: Uuid) -> Result<(i16, Option<String>, Uuid)> {
    let mut t = MetadataRequestTopic::default();
    t.name = None;
    t.topic_id = id;
    let mut r = MetadataRequest::default();
    r.topics = Some(vec![t]);
    let resp = k.call(12, &r)?;
    let t = &resp.topics[0];
    Ok((
        t.error_code,
        t.name.as_ref().map(|n| n.0.to_string()),
        t.topic_id,
    ))
}

fn delete_v6(k: &mut Kc, by: &[(Option<&str>, Uuid)]) -> Result<Vec<(i16, Option<String>, Uuid)>> {
    let mut r = DeleteTopicsRequest::default();
    r.timeout_ms = 5_000;
    r.topics = by
        .iter()
        .map(|(n, id)| {
            let mut t = DeleteTopicState::default();
            t.name = n.map(name);
            t.topic_id = *id;
            t
        })
        .collect();
    Ok(k.call(6, &r)?
        .responses
        .iter()
        .map(|r| {
            (
                r.error_code,
                r.name.as_ref().map(|n| n.0.to_string()),
                r.topic_id,
            )
        })
        .collect())
}

fn describe(
    k: &mut Kc,
    topics: &[&str],
    limit: i32,
    cursor: Option<(&str, i32)>,
) -> Result<DescribeTopicPartitionsResponse> {
    let mut r = DescribeTopicPartitionsRequest::default();
    r.topics = topics
        .iter()
        .map(|t| {
            let mut x = TopicRequest::default();
            x.name = name(t);
            x
        })
        .collect();
    r.response_partition_limit = limit;
    r.cursor = cursor.map(|(t, p)| {
        let mut c = Cursor::default();
        c.topic_name = name(t);
        c.partition_index = p;
        c
    });
    k.call(0, &r)
}

/// (topic, error code, partitions) of each topic answered, and the next cursor.
#[allow(clippy::type_complexity)]
fn pages(
    r: &DescribeTopicPartitionsResponse,
) -> (Vec<(String, i16, Vec<i32>)>, Option<(String, i32)>) {
    (
        r.topics
            .iter()
            .map(|t| {
                (
                    t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default(),
                    t.error_code,
                    t.partitions.iter().map(|p| p.partition_index).collect(),
                )
            })
            .collect(),
        r.next_cursor
            .as_ref()
            .map(|c| (c.topic_name.0.to_string(), c.partition_index)),
    )
}

fn t(name: &str, code: i16, partitions: &[i32]) -> (String, i16, Vec<i32>) {
    (name.to_owned(), code, partitions.to_vec())
}

#[test]
fn topic_ids_are_random_kept_across_restarts_and_new_after_a_delete() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (broker, mut k) = start(dir.path(), false)?;
    let a = create(&mut k, "a", 2)?;
    // Through Flume's engine (Flume's protocol, auto-create) too.
    broker
        .engine()
        .records()
        .create_topic("b", common::topic(1))?;
    let ids = metadata_ids(&mut k)?;
    ensure!(ids.len() == 2 && ids[0] == ("a".to_owned(), a), "{ids:?}");
    let b = ids[1].1;
    for id in [a, b] {
        ensure!(!id.is_nil() && id.get_version_num() == 4, "{id}");
    }
    ensure!(a != b);
    // Kept in the topic's directory, as its text.
    let on_disk = std::fs::read_to_string(dir.path().join("a").join("topic-id"))?;
    ensure!(on_disk == format!("{a}\n"), "{on_disk:?}");
    // Metadata by id; DescribeTopicPartitions.
    ensure!(metadata_by_id(&mut k, a)? == (NONE, Some("a".to_owned()), a));
    let d = describe(&mut k, &["a", "b"], 100, None)?;
    let got: Vec<Uuid> = d.topics.iter().map(|t| t.topic_id).collect();
    ensure!(got == [a, b], "{d:?}");

    // A restart on the same directory: the same ids.
    drop(k);
    flume_rt::block_on(broker.shutdown());
    drop(broker);
    let (broker, mut k) = start(dir.path(), false)?;
    ensure!(metadata_ids(&mut k)? == ids, "after a restart");

    // Delete by id (v6): the name is answered; created again, a new id.
    ensure!(delete_v6(&mut k, &[(None, a)])? == [(NONE, Some("a".to_owned()), a)]);
    let gone = metadata_by_id(&mut k, a)?;
    ensure!(gone == (UNKNOWN_TOPIC_ID, None, a), "{gone:?}");
    let a2 = create(&mut k, "a", 1)?;
    ensure!(a2 != a && !a2.is_nil());
    ensure!(
        delete_v6(&mut k, &[(None, a)])? == [(UNKNOWN_TOPIC_ID, None, a)],
        "a stale id deletes nothing"
    );
    ensure!(broker.engine().records().topic("a").is_some());
    // By name and id at once, or by neither: INVALID_REQUEST.
    let r = delete_v6(&mut k, &[(Some("a"), a2), (None, Uuid::nil())])?;
    ensure!(
        r[0].0 == INVALID_REQUEST && r[1].0 == INVALID_REQUEST,
        "{r:?}"
    );
    // By name (v6 and v5): the deleted topic's id is answered at v6.
    ensure!(delete_v6(&mut k, &[(Some("a"), Uuid::nil())])? == [(NONE, Some("a".to_owned()), a2)]);
    let a3 = create(&mut k, "a", 1)?;
    let mut v5 = DeleteTopicsRequest::default();
    v5.topic_names = vec![name("a")];
    ensure!(k.call(5, &v5)?.responses[0].error_code == NONE);
    // The ids of deleted topics stay unknown after a restart.
    drop(k);
    flume_rt::block_on(broker.shutdown());
    drop(broker);
    let (broker, mut k) = start(dir.path(), false)?;
    for id in [a, a2, a3] {
        ensure!(metadata_by_id(&mut k, id)?.0 == UNKNOWN_TOPIC_ID);
    }
    ensure!(metadata_ids(&mut k)? == [("b".to_owned(), b)]);
    drop(k);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn describe_topic_partitions_pages_through_every_partition() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (broker, mut k) = start(dir.path(), false)?;
    let versions = k.call(3, &ApiVersionsRequest::default())?;
    ensure!(versions
        .api_keys
        .iter()
        .any(|a| a.api_key == ApiKey::DescribeTopicPartitions as i16
            && (a.min_version, a.max_version) == (0, 0)));
    for (topic, n) in [("c", 5), ("a", 3), ("b", 1)] {
        broker
            .engine()
            .records()
            .create_topic(topic, common::topic(n))?;
    }
    // Every topic (an empty list), 4 partitions an answer.
    let p1 = pages(&describe(&mut k, &[], 4, None)?);
    ensure!(
        p1 == (
            vec![t("a", NONE, &[0, 1, 2]), t("b", NONE, &[0])],
            Some(("c".to_owned(), 0))
        ),
        "{p1:?}"
    );
    let p2 = pages(&describe(&mut k, &[], 4, Some(("c", 0)))?);
    ensure!(
        p2 == (vec![t("c", NONE, &[0, 1, 2, 3])], Some(("c".to_owned(), 4))),
        "{p2:?}"
    );
    let p3 = pages(&describe(&mut k, &[], 4, Some(("c", 4)))?);
    ensure!(p3 == (vec![t("c", NONE, &[4])], None), "{p3:?}");
    // A limit below 1 is 1.
    let one = pages(&describe(&mut k, &["a"], 0, None)?);
    ensure!(
        one == (vec![t("a", NONE, &[0])], Some(("a".to_owned(), 1))),
        "{one:?}"
    );
    // Topics named: in name order, unknown and invalid names said so.
    // From a cursor on one of them: the topics before it are left out.
    let named = pages(&describe(
        &mut k,
        &["zz", "c", "a", "bad/name", "a"],
        100,
        Some(("bad/name", 0)),
    )?);
    ensure!(named.1.is_none(), "{named:?}");
    let want = [
        t("bad/name", INVALID_TOPIC_EXCEPTION, &[]),
        t("c", NONE, &[0, 1, 2, 3, 4]),
        t("zz", UNKNOWN_TOPIC_OR_PARTITION, &[]),
    ];
    ensure!(named.0 == want, "{named:?}");
    // Each partition: led by this broker, its one replica, in sync.
    let d = describe(&mut k, &["b"], 10, None)?;
    let p = &d.topics[0].partitions[0];
    ensure!(
        p.leader_id.0 == 0 && p.replica_nodes.len() == 1 && p.isr_nodes.len() == 1,
        "{p:?}"
    );
    // A cursor on a topic not asked for, or a negative partition: INVALID_REQUEST.
    for cursor in [("b", 0), ("a", -1)] {
        let r = pages(&describe(&mut k, &["a", "c"], 10, Some(cursor))?);
        ensure!(
            r == (
                vec![t("a", INVALID_REQUEST, &[]), t("c", INVALID_REQUEST, &[])],
                None
            ),
            "{cursor:?}: {r:?}"
        );
    }
    drop(k);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn describe_topic_partitions_answers_at_most_2000_partitions() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (broker, mut k) = start(dir.path(), false)?;
    broker
        .engine()
        .records()
        .create_topic("wide", common::topic(2_001))?;
    let r = describe(&mut k, &["wide"], i32::MAX, None)?;
    ensure!(
        r.topics[0].partitions.len() == 2_000,
        "{}",
        r.topics[0].partitions.len()
    );
    let (_, next) = pages(&r);
    ensure!(next == Some(("wide".to_owned(), 2_000)), "{next:?}");
    let (rest, next) = pages(&describe(
        &mut k,
        &["wide"],
        i32::MAX,
        Some(("wide", 2_000)),
    )?);
    ensure!(
        rest == [t("wide", NONE, &[2_000])] && next.is_none(),
        "{rest:?}"
    );
    drop(k);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn describe_topic_partitions_and_deletes_by_id_follow_the_acls() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // Authentication off: every connection is User:ANONYMOUS.
    let (broker, mut k) = start(dir.path(), true)?;
    for topic in ["open", "secret"] {
        broker
            .engine()
            .records()
            .create_topic(topic, common::topic(1))?;
    }
    let secret = broker
        .engine()
        .records()
        .topic("secret")
        .context("secret")?
        .id;
    let secret = Uuid::from_bytes(secret.0);
    let allow = |operation, name: &str| Acl {
        principal: AclPrincipal::Anonymous,
        permission: Permission::Allow,
        resource_type: ResourceType::Topic,
        pattern: PatternType::Literal,
        name: name.into(),
        operation,
    };
    flume_rt::block_on(broker.add_acl(allow(Operation::Describe, "open")))?;
    // Every topic: only what may be described.
    let all = pages(&describe(&mut k, &[], 100, None)?);
    ensure!(all == (vec![t("open", NONE, &[0])], None), "{all:?}");
    // Named: refused ones last, without their id.
    let r = describe(&mut k, &["secret", "open"], 100, None)?;
    ensure!(
        pages(&r).0
            == [
                t("open", NONE, &[0]),
                t("secret", TOPIC_AUTHORIZATION_FAILED, &[])
            ],
        "{r:?}"
    );
    ensure!(r.topics[1].topic_id.is_nil() && !r.topics[0].topic_id.is_nil());
    // Metadata by id of a topic not described: refused, the id but no name.
    ensure!(metadata_by_id(&mut k, secret)? == (TOPIC_AUTHORIZATION_FAILED, None, secret));
    // Delete by id without DELETE: refused, the name not disclosed.
    ensure!(delete_v6(&mut k, &[(None, secret)])? == [(TOPIC_AUTHORIZATION_FAILED, None, secret)]);
    ensure!(broker.engine().records().topic("secret").is_some());
    flume_rt::block_on(broker.add_acl(allow(Operation::Delete, "secret")))?;
    ensure!(delete_v6(&mut k, &[(None, secret)])? == [(NONE, Some("secret".to_owned()), secret)]);
    ensure!(broker.engine().records().topic("secret").is_none());
    drop(k);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

/// Fetch of partition 0 from offset 0, by id at v13, by name below: the
/// partition's error code and the values read.
fn fetch(k: &mut Kc, version: i16, topic: &str, id: Uuid) -> Result<(i16, Vec<String>)> {
    let mut t = FetchTopic::default().with_partitions(vec![FetchPartition::default()
        .with_partition(0)
        .with_fetch_offset(0)
        .with_partition_max_bytes(1 << 20)]);
    if version >= 13 {
        t.topic_id = id;
    } else {
        t.topic = name(topic);
    }
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![t]);
    let resp = k.call(version, &req)?;
    ensure!(resp.responses.len() == 1, "{resp:?}");
    if version >= 13 {
        ensure!(resp.responses[0].topic_id == id, "answered by its id");
    }
    let part = &resp.responses[0].partitions[0];
    let mut values = Vec::new();
    let records = part.records.clone().unwrap_or_default();
    for b in kafka_batch::batches(&records) {
        let b = b?;
        let data = b.records(1 << 24)?;
        kafka_batch::for_each_record::<kafka_batch::BatchError>(&b.header, &data, &mut |r| {
            values.push(String::from_utf8_lossy(r.value.unwrap_or_default()).into_owned());
            Ok(())
        })?;
    }
    Ok((part.error_code, values))
}

fn send(broker: &Broker, topic: &str, value: &str) -> Result<()> {
    flume_rt::block_on(async {
        let p = flume_client::Producer::connect(&broker.local_addr().to_string()).await?;
        p.send(topic, None, value.as_bytes()).await?;
        anyhow::Ok(())
    })
}

#[test]
fn fetch_v13_reads_by_topic_id_and_a_stale_id_reads_nothing() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (broker, mut k) = start(dir.path(), false)?;
    let versions = k.call(3, &ApiVersionsRequest::default())?;
    ensure!(versions
        .api_keys
        .iter()
        .any(|a| a.api_key == ApiKey::Fetch as i16 && (a.min_version, a.max_version) == (4, 18)));
    let old = create(&mut k, "f", 1)?;
    send(&broker, "f", "before")?;
    for v in 13..=18 {
        ensure!(
            fetch(&mut k, v, "", old)? == (NONE, vec!["before".to_owned()]),
            "fetch v{v}"
        );
    }
    ensure!(fetch(&mut k, 12, "f", Uuid::nil())? == (NONE, vec!["before".to_owned()]));
    // Deleted and created again under the same name: the old id is stale.
    ensure!(delete_v6(&mut k, &[(Some("f"), Uuid::nil())])?[0].0 == NONE);
    let new = create(&mut k, "f", 1)?;
    send(&broker, "f", "after")?;
    ensure!(fetch(&mut k, 13, "", old)? == (UNKNOWN_TOPIC_ID, vec![]));
    ensure!(fetch(&mut k, 13, "", new)? == (NONE, vec!["after".to_owned()]));
    // READ on the topic, once its id is known.
    drop(k);
    flume_rt::block_on(broker.shutdown());
    drop(broker);
    let (broker, mut k) = start(dir.path(), true)?;
    ensure!(fetch(&mut k, 13, "", new)?.0 == TOPIC_AUTHORIZATION_FAILED);
    ensure!(fetch(&mut k, 13, "", old)?.0 == UNKNOWN_TOPIC_ID);
    drop(k);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

/// One uncompressed batch of `values`, keyless.
fn batch(values: &[&str]) -> Result<bytes::Bytes> {
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
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
            key: None,
            value: Some(bytes::Bytes::copy_from_slice(v.as_bytes())),
            headers: Default::default(),
        })
        .collect();
    let mut b = bytes::BytesMut::new();
    RecordBatchEncoder::encode(
        &mut b,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )?;
    Ok(b.freeze())
}

/// Produce of `values` to partition 0 at `version`, by name before v13 and
/// by id from it: (the answer's topic name and id, error code, base offset).
fn produce(
    k: &mut Kc,
    version: i16,
    topic: &str,
    id: Uuid,
    values: &[&str],
) -> Result<(String, Uuid, i16, i64)> {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::ProduceRequest;
    let mut t =
        TopicProduceData::default().with_partition_data(vec![PartitionProduceData::default()
            .with_index(0)
            .with_records(Some(batch(values)?))]);
    if version >= 13 {
        t.topic_id = id;
    } else {
        t.name = name(topic);
    }
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5_000)
        .with_topic_data(vec![t]);
    let resp = k.call(version, &req)?;
    let t = resp.responses.into_iter().next().context("a topic")?;
    let p = t.partition_responses.first().context("a partition")?;
    Ok((
        t.name.0.to_string(),
        t.topic_id,
        p.error_code,
        p.base_offset,
    ))
}

/// Produce v13 names topics by id: records go to the topic with the id, the
/// answer names it by that id, a stale or unknown id gets UNKNOWN_TOPIC_ID
/// (and creates nothing); v9-12 by name as before. Advertised 3-13.
#[test]
fn produce_v13_writes_by_topic_id_and_a_stale_id_writes_nothing() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (broker, mut k) = start(dir.path(), false)?;
    let versions = k.call(3, &ApiVersionsRequest::default())?;
    let range = |key: ApiKey| {
        versions
            .api_keys
            .iter()
            .find(|a| a.api_key == key as i16)
            .map(|a| (a.min_version, a.max_version))
    };
    ensure!(range(ApiKey::Produce) == Some((3, 13)), "{versions:?}");
    ensure!(range(ApiKey::ListOffsets) == Some((1, 10)), "{versions:?}");
    ensure!(range(ApiKey::Metadata) == Some((0, 13)), "{versions:?}");
    let id = create(&mut k, "p", 1)?;
    ensure!(produce(&mut k, 13, "", id, &["a", "b"])? == (String::new(), id, NONE, 0));
    for v in 9..=12 {
        let (n, _, code, base) = produce(&mut k, v, "p", Uuid::nil(), &["c"])?;
        ensure!((n.as_str(), code) == ("p", NONE), "produce v{v}: {code}");
        ensure!(base == i64::from(v) - 7, "produce v{v}: base {base}");
    }
    ensure!(fetch(&mut k, 13, "", id)?.1 == ["a", "b", "c", "c", "c", "c"]);
    // A random id and, after delete + create, the old one: nothing written.
    let random = Uuid::from_u128(0x1234);
    ensure!(
        produce(&mut k, 13, "", random, &["x"])? == (String::new(), random, UNKNOWN_TOPIC_ID, -1)
    );
    ensure!(delete_v6(&mut k, &[(Some("p"), Uuid::nil())])?[0].0 == NONE);
    let new = create(&mut k, "p", 1)?;
    ensure!(produce(&mut k, 13, "", id, &["x"])?.2 == UNKNOWN_TOPIC_ID);
    ensure!(fetch(&mut k, 13, "", new)? == (NONE, vec![]));
    ensure!(
        metadata_ids(&mut k)? == [("p".to_owned(), new)],
        "no topic created"
    );
    drop(k);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

/// ListOffsets v8-10: the local log start (-4) is the log start (nothing
/// is tiered), the latest tiered offset (-5) is -1; before their versions
/// both are INVALID_REQUEST.
#[test]
fn list_offsets_answers_the_local_log_start_and_no_tiered_offset() -> Result<()> {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::ListOffsetsRequest;
    let dir = tempfile::tempdir()?;
    let (broker, mut k) = start(dir.path(), false)?;
    create(&mut k, "l", 1)?;
    send(&broker, "l", "one")?;
    send(&broker, "l", "two")?;
    let mut list = |version: i16, timestamp: i64| -> Result<(i16, i64)> {
        let req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name("l"))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(timestamp)])]);
        let resp = k.call(version, &req)?;
        let p = &resp.topics[0].partitions[0];
        Ok((p.error_code, p.offset))
    };
    ensure!(list(10, -2)? == (NONE, 0));
    ensure!(list(10, -1)? == (NONE, 2));
    for v in 8..=10 {
        ensure!(list(v, -4)? == (NONE, 0), "v{v}");
    }
    ensure!(list(7, -4)?.0 == INVALID_REQUEST);
    ensure!(list(9, -5)? == (NONE, -1));
    ensure!(list(10, -5)? == (NONE, -1));
    ensure!(list(8, -5)?.0 == INVALID_REQUEST);
    ensure!(list(10, -6)?.0 == INVALID_REQUEST);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

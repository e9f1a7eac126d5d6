//! Topic configs by Kafka's names through the Kafka listener (CreateTopics
//! with configs, DescribeConfigs of a topic and of the broker, AlterConfigs,
//! IncrementalAlterConfigs, ApiVersions), kept across a restart, and
//! `max.message.bytes` enforced on produce through both protocols.

use crate::common;
use crate::common::kafka::Kc;

use anyhow::{ensure, Context, Result};
use bytes::{Bytes, BytesMut};
use flume_broker::Broker;
use flume_client::{Admin, ErrorCode};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::messages::alter_configs_request::{
    AlterConfigsResource as ReplaceResource, AlterableConfig as ReplaceConfig,
};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AlterConfigsRequest, ApiVersionsRequest, CreateTopicsRequest, DescribeConfigsRequest,
    IncrementalAlterConfigsRequest, ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

const INVALID_CONFIG: i16 = 40;
const INVALID_REQUEST: i16 = 42;
const MESSAGE_TOO_LARGE: i16 = 10;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const TOPIC: i8 = 2;
const BROKER: i8 = 4;

fn start(dir: &std::path::Path) -> Result<Broker> {
    let mut c = common::config(dir);
    c.kafka_listen = Some("127.0.0.1:0".into());
    flume_rt::block_on(Broker::start(c)).context("broker starts")
}

fn kafka(broker: &Broker) -> Result<Kc> {
    Kc::connect(&broker.kafka_addr().context("kafka listener")?.to_string())
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// What CreateTopics answered for one topic: error code, message, and the
/// configs of the answer as (name, value, source).
type Created = (i16, Option<String>, Vec<(String, String, i8)>);

/// CreateTopics v7 of one topic with `configs`.
fn create(
    k: &mut Kc,
    topic: &str,
    configs: &[(&str, &str)],
    validate_only: bool,
) -> Result<Created> {
    let t = CreatableTopic::default()
        .with_name(TopicName(s(topic)))
        .with_num_partitions(1)
        .with_replication_factor(-1)
        .with_configs(
            configs
                .iter()
                .map(|(n, v)| {
                    CreatableTopicConfig::default()
                        .with_name(s(n))
                        .with_value(Some(s(v)))
                })
                .collect(),
        );
    let req = CreateTopicsRequest::default()
        .with_topics(vec![t])
        .with_timeout_ms(5_000)
        .with_validate_only(validate_only);
    let resp = k.call(7, &req)?;
    let r = resp.topics.into_iter().next().context("one result")?;
    let configs = r
        .configs
        .unwrap_or_default()
        .into_iter()
        .map(|c| {
            (
                c.name.to_string(),
                c.value.map(|v| v.to_string()).unwrap_or_default(),
                c.config_source,
            )
        })
        .collect();
    Ok((
        r.error_code,
        r.error_message.map(|m| m.to_string()),
        configs,
    ))
}

fn describe(k: &mut Kc, kind: i8, name: &str, version: i16) -> Result<DescribeConfigsResult> {
    let req = DescribeConfigsRequest::default()
        .with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(kind)
            .with_resource_name(s(name))
            .with_configuration_keys(None)])
        .with_include_synonyms(true);
    let resp = k.call(version, &req)?;
    resp.results.into_iter().next().context("one result")
}

/// The value and source of one config in a DescribeConfigs result.
fn value(r: &DescribeConfigsResult, name: &str) -> Option<(String, i8)> {
    r.configs.iter().find(|c| c.name.as_str() == name).map(|c| {
        (
            c.value.as_ref().map(|v| v.to_string()).unwrap_or_default(),
            c.config_source,
        )
    })
}

/// IncrementalAlterConfigs v1 of one resource: (error code, message).
fn alter(
    k: &mut Kc,
    kind: i8,
    name: &str,
    ops: &[(&str, i8, Option<&str>)],
) -> Result<(i16, Option<String>)> {
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(kind)
            .with_resource_name(s(name))
            .with_configs(
                ops.iter()
                    .map(|(n, op, v)| {
                        AlterableConfig::default()
                            .with_name(s(n))
                            .with_config_operation(*op)
                            .with_value(v.map(s))
                    })
                    .collect(),
            ),
    ]);
    let resp = k.call(1, &req)?;
    let r = resp.responses.into_iter().next().context("one response")?;
    Ok((r.error_code, r.error_message.map(|m| m.to_string())))
}

#[test]
fn create_topics_takes_kafka_configs_and_describe_configs_reports_them() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    let mut k = kafka(&broker)?;
    let (code, msg, configs) = create(
        &mut k,
        "changelog",
        &[
            ("cleanup.policy", "compact"),
            ("retention.ms", "3600000"),
            ("min.insync.replicas", "1"),
            ("segment.bytes", "1048576"),
        ],
        false,
    )?;
    ensure!(code == 0, "CreateTopics: {code} {msg:?}");
    ensure!(
        configs.contains(&("cleanup.policy".into(), "compact".into(), 1)),
        "{configs:?}"
    );
    ensure!(
        configs.contains(&("delete.retention.ms".into(), "86400000".into(), 5)),
        "{configs:?}"
    );
    let r = describe(&mut k, TOPIC, "changelog", 4)?;
    ensure!(r.error_code == 0, "{}", r.error_code);
    assert_eq!(value(&r, "cleanup.policy"), Some(("compact".into(), 1)));
    assert_eq!(value(&r, "retention.ms"), Some(("3600000".into(), 1)));
    assert_eq!(value(&r, "max.message.bytes"), Some(("1048588".into(), 5)));
    assert_eq!(
        value(&r, "min.cleanable.dirty.ratio"),
        Some(("0.5".into(), 5))
    );
    let policy = r
        .configs
        .iter()
        .find(|c| c.name.as_str() == "cleanup.policy")
        .context("cleanup.policy")?;
    assert_eq!(policy.config_type, 7, "LIST");
    assert!(!policy.read_only);
    let synonyms: Vec<(String, i8)> = policy
        .synonyms
        .iter()
        .map(|y| (y.name.to_string(), y.source))
        .collect();
    assert_eq!(
        synonyms,
        vec![
            ("cleanup.policy".into(), 1),
            ("log.cleanup.policy".into(), 5)
        ]
    );
    // v1 has no config types; a key filter lists only what it names.
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(TOPIC)
            .with_resource_name(s("changelog"))
            .with_configuration_keys(Some(vec![s("segment.bytes")]))]);
    let r1 = k.call(1, &req)?.results.remove(0);
    assert_eq!(r1.configs.len(), 1);
    assert_eq!(value(&r1, "segment.bytes"), Some(("1048576".into(), 1)));
    // The broker resource: the defaults for topics by the broker's names.
    let b = describe(&mut k, BROKER, "0", 4)?;
    ensure!(b.error_code == 0, "{}", b.error_code);
    assert_eq!(value(&b, "log.cleanup.policy"), Some(("delete".into(), 5)));
    assert_eq!(value(&b, "message.max.bytes"), Some(("1048588".into(), 5)));
    assert!(b.configs.iter().all(|c| c.read_only));
    let missing = describe(&mut k, TOPIC, "nope", 4)?;
    assert_eq!(missing.error_code, UNKNOWN_TOPIC_OR_PARTITION);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn create_topics_refuses_unknown_configs_and_bad_values_naming_them() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    let mut k = kafka(&broker)?;
    for (name, v) in [
        ("cleanup.policy", "shred"),
        ("retention.ms", "soon"),
        ("min.insync.replicas", "2"),
        ("no.such.config", "1"),
    ] {
        let (code, msg, _) = create(&mut k, "t", &[(name, v)], false)?;
        assert_eq!(code, INVALID_CONFIG, "{name}={v}");
        let msg = msg.unwrap_or_default();
        assert!(msg.contains(name) && msg.contains(v), "{name}={v}: {msg}");
    }
    // validate_only checks and creates nothing.
    let (code, _, configs) = create(&mut k, "t", &[("cleanup.policy", "compact")], true)?;
    assert_eq!(code, 0);
    assert!(configs.contains(&("cleanup.policy".into(), "compact".into(), 1)));
    assert_eq!(
        describe(&mut k, TOPIC, "t", 4)?.error_code,
        UNKNOWN_TOPIC_OR_PARTITION
    );
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn incremental_alter_configs_sets_deletes_appends_subtracts_and_survives_a_restart() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    let mut k = kafka(&broker)?;
    assert_eq!(create(&mut k, "t", &[], false)?.0, 0);
    let (code, msg) = alter(
        &mut k,
        TOPIC,
        "t",
        &[
            ("retention.ms", 0, Some("1000")),
            ("cleanup.policy", 2, Some("compact")),
            ("max.message.bytes", 0, Some("4096")),
        ],
    )?;
    ensure!(code == 0, "{code} {msg:?}");
    let r = describe(&mut k, TOPIC, "t", 4)?;
    assert_eq!(
        value(&r, "cleanup.policy"),
        Some(("compact,delete".into(), 1))
    );
    assert_eq!(value(&r, "retention.ms"), Some(("1000".into(), 1)));
    let (code, _) = alter(
        &mut k,
        TOPIC,
        "t",
        &[
            ("cleanup.policy", 3, Some("delete")),
            ("retention.ms", 1, None),
        ],
    )?;
    assert_eq!(code, 0);
    // A bad value changes nothing and names the config and value.
    let (code, msg) = alter(
        &mut k,
        TOPIC,
        "t",
        &[
            ("max.message.bytes", 0, Some("1")),
            ("segment.ms", 0, Some("-5")),
        ],
    )?;
    assert_eq!(code, INVALID_CONFIG);
    let msg = msg.unwrap_or_default();
    assert!(msg.contains("segment.ms") && msg.contains("-5"), "{msg}");
    assert!(
        !msg.contains("(21)"),
        "no Flume code in a Kafka message: {msg}"
    );
    // APPEND to a config that is not a list, an unknown op, a broker resource.
    assert_eq!(
        alter(&mut k, TOPIC, "t", &[("retention.ms", 2, Some("5"))])?.0,
        INVALID_CONFIG
    );
    assert_eq!(
        alter(&mut k, TOPIC, "t", &[("retention.ms", 9, Some("5"))])?.0,
        INVALID_REQUEST
    );
    assert_eq!(
        alter(&mut k, BROKER, "0", &[("log.retention.ms", 0, Some("5"))])?.0,
        INVALID_REQUEST
    );
    assert_eq!(
        alter(&mut k, TOPIC, "nope", &[("retention.ms", 0, Some("5"))])?.0,
        UNKNOWN_TOPIC_OR_PARTITION
    );
    flume_rt::block_on(broker.shutdown());
    let broker = start(dir.path())?;
    let mut k = kafka(&broker)?;
    let r = describe(&mut k, TOPIC, "t", 4)?;
    assert_eq!(value(&r, "cleanup.policy"), Some(("compact".into(), 1)));
    assert_eq!(value(&r, "retention.ms"), Some(("-1".into(), 5)));
    assert_eq!(value(&r, "max.message.bytes"), Some(("4096".into(), 1)));
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn alter_configs_replaces_the_topics_whole_set() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    let mut k = kafka(&broker)?;
    let (code, _, _) = create(&mut k, "t", &[("cleanup.policy", "compact")], false)?;
    assert_eq!(code, 0);
    let req = AlterConfigsRequest::default().with_resources(vec![ReplaceResource::default()
        .with_resource_type(TOPIC)
        .with_resource_name(s("t"))
        .with_configs(vec![ReplaceConfig::default()
            .with_name(s("retention.bytes"))
            .with_value(Some(s("1048576")))])]);
    let resp = k.call(1, &req)?;
    assert_eq!(resp.responses[0].error_code, 0);
    let r = describe(&mut k, TOPIC, "t", 4)?;
    assert_eq!(
        value(&r, "cleanup.policy"),
        Some(("delete".into(), 5)),
        "not named: default"
    );
    assert_eq!(value(&r, "retention.bytes"), Some(("1048576".into(), 1)));
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

/// What librdkafka's `test_AlterConfigs_simple` does (librdkafka's 0092):
/// DescribeConfigs, then AlterConfigs with every config read back plus the
/// change, so the changed name comes twice: the last value wins, as
/// Kafka's AlterConfigs did. IncrementalAlterConfigs still refuses a name
/// given twice.
#[test]
fn alter_configs_of_everything_read_back_plus_a_change_takes_the_change() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    let mut k = kafka(&broker)?;
    let (code, _, _) = create(&mut k, "t", &[("retention.ms", "60000")], false)?;
    assert_eq!(code, 0);
    let read = describe(&mut k, TOPIC, "t", 4)?;
    let mut configs: Vec<ReplaceConfig> = read
        .configs
        .iter()
        .map(|c| {
            ReplaceConfig::default()
                .with_name(c.name.clone())
                .with_value(c.value.clone())
        })
        .collect();
    assert!(configs.len() > 20, "{} configs read back", configs.len());
    configs.push(
        ReplaceConfig::default()
            .with_name(s("retention.ms"))
            .with_value(Some(s("120000"))),
    );
    let req = AlterConfigsRequest::default().with_resources(vec![ReplaceResource::default()
        .with_resource_type(TOPIC)
        .with_resource_name(s("t"))
        .with_configs(configs)]);
    let resp = k.call(1, &req)?;
    assert_eq!(
        resp.responses[0].error_code, 0,
        "{:?}",
        resp.responses[0].error_message
    );
    let r = describe(&mut k, TOPIC, "t", 4)?;
    assert_eq!(value(&r, "retention.ms"), Some(("120000".into(), 1)));
    let (code, message) = alter(
        &mut k,
        TOPIC,
        "t",
        &[
            ("retention.ms", 0, Some("1")),
            ("retention.ms", 0, Some("2")),
        ],
    )?;
    assert_eq!(code, INVALID_REQUEST, "{message:?}");
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

/// CreateTopics with a replica assignment (librdkafka's 0081): accepted
/// when it is the only one a one-broker cluster has (partitions 0..n, each
/// on this broker), refused with Kafka's codes otherwise.
#[test]
fn create_topics_takes_the_one_replica_assignment_a_single_broker_has() -> Result<()> {
    use kafka_protocol::messages::create_topics_request::CreatableReplicaAssignment;
    use kafka_protocol::messages::{BrokerId, MetadataRequest};
    const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    let mut k = kafka(&broker)?;
    let node = k.call(9, &MetadataRequest::default())?.brokers[0].node_id.0;
    let mut try_create = |name: &str, partitions: i32, assignment: &[(i32, Vec<i32>)]| {
        let t = CreatableTopic::default()
            .with_name(TopicName(s(name)))
            .with_num_partitions(partitions)
            .with_replication_factor(-1)
            .with_assignments(
                assignment
                    .iter()
                    .map(|(p, ids)| {
                        CreatableReplicaAssignment::default()
                            .with_partition_index(*p)
                            .with_broker_ids(ids.iter().map(|i| BrokerId(*i)).collect())
                    })
                    .collect(),
            );
        let req = CreateTopicsRequest::default()
            .with_topics(vec![t])
            .with_timeout_ms(5_000);
        let r = k.call(7, &req)?;
        anyhow::Ok((r.topics[0].error_code, r.topics[0].num_partitions))
    };
    assert_eq!(
        try_create("a", -1, &[(1, vec![node]), (0, vec![node])])?,
        (0, 2)
    );
    assert_eq!(
        broker
            .engine()
            .records()
            .topic("a")
            .context("created")?
            .partition_count(),
        2
    );
    let (code, _) = try_create("b", -1, &[(0, vec![node + 1])])?;
    assert_eq!(code, INVALID_REPLICA_ASSIGNMENT, "another broker");
    let (code, _) = try_create("c", -1, &[(0, vec![node]), (2, vec![node])])?;
    assert_eq!(code, INVALID_REPLICA_ASSIGNMENT, "a partition missing");
    let (code, _) = try_create("d", 3, &[(0, vec![node])])?;
    assert_eq!(code, INVALID_REQUEST, "a count beside an assignment");
    assert!(
        broker.engine().records().topic("b").is_none()
            && broker.engine().records().topic("d").is_none()
    );
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn api_versions_advertises_the_config_apis() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    let mut k = kafka(&broker)?;
    let resp = k.call(3, &ApiVersionsRequest::default())?;
    let range = |key: i16| {
        resp.api_keys
            .iter()
            .find(|a| a.api_key == key)
            .map(|a| (a.min_version, a.max_version))
    };
    assert_eq!(range(32), Some((1, 4)), "DescribeConfigs");
    assert_eq!(range(33), Some((0, 2)), "AlterConfigs");
    assert_eq!(range(44), Some((0, 1)), "IncrementalAlterConfigs");
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

/// One Kafka batch of one record with a value of `n` bytes.
fn batch(n: usize) -> Result<Bytes> {
    let r = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: 1_700_000_000_000,
        key: None,
        value: Some(Bytes::from(vec![b'v'; n])),
        headers: IndexMap::new(),
    };
    let mut b = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut b,
        &[r],
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )?;
    Ok(b.freeze())
}

/// Kafka Produce v9 of one batch: (error code, log_append_time_ms).
fn produce(k: &mut Kc, topic: &str, records: Bytes) -> Result<(i16, i64)> {
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(s(topic)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    let resp = k.call(9, &req)?;
    let p = resp
        .responses
        .first()
        .and_then(|t| t.partition_responses.first())
        .context("a partition response")?;
    Ok((p.error_code, p.log_append_time_ms))
}

#[test]
fn max_message_bytes_is_enforced_on_produce_in_both_protocols() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    let mut k = kafka(&broker)?;
    let (code, _, _) = create(&mut k, "small", &[("max.message.bytes", "1000")], false)?;
    assert_eq!(code, 0);
    assert_eq!(produce(&mut k, "small", batch(100)?)?.0, 0);
    assert_eq!(produce(&mut k, "small", batch(2000)?)?.0, MESSAGE_TOO_LARGE);
    flume_rt::block_on(async {
        let p = flume_client::Producer::connect(&broker.local_addr().to_string()).await?;
        let too_big = p.send("small", None, &[b'v'; 2000]).await;
        let code = too_big.err().and_then(|e| e.code());
        ensure!(code == Some(ErrorCode::RecordTooLarge), "{code:?}");
        p.send("small", None, &[b'v'; 100]).await?;
        Ok::<(), anyhow::Error>(())
    })?;
    // LogAppendTime: the response carries the append time.
    let (code, _, _) = create(
        &mut k,
        "stamped",
        &[("message.timestamp.type", "LogAppendTime")],
        false,
    )?;
    assert_eq!(code, 0);
    let before = chrono::Utc::now().timestamp_millis();
    let (code, append_time) = produce(&mut k, "stamped", batch(10)?)?;
    assert_eq!(code, 0);
    assert!(append_time >= before, "{append_time} < {before}");
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn the_flume_protocol_creates_alters_and_describes_named_configs() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    flume_rt::block_on(async {
        let admin = Admin::connect(&broker.local_addr().to_string()).await?;
        let created = admin
            .create_topic_with_configs("t", 2, &[("cleanup.policy", "compact")])
            .await?;
        assert_eq!(created.partitions, 2);
        let get = |r: &flume_client::TopicConfigsResponse, n: &str| {
            r.configs
                .iter()
                .find(|c| c.name == n)
                .map(|c| (c.value.clone(), c.source))
        };
        assert_eq!(get(&created, "cleanup.policy"), Some(("compact".into(), 1)));
        let bad = admin
            .create_topic_with_configs("u", 1, &[("retention.ms", "soon")])
            .await
            .unwrap_err();
        assert_eq!(bad.code(), Some(ErrorCode::InvalidConfig));
        assert!(bad.to_string().contains("retention.ms"), "{bad}");
        let altered = admin
            .alter_topic_configs("t", &[("retention.bytes", "4096")], &["cleanup.policy"])
            .await?;
        assert_eq!(get(&altered, "retention.bytes"), Some(("4096".into(), 1)));
        assert_eq!(get(&altered, "cleanup.policy"), Some(("delete".into(), 5)));
        let described = admin.describe_topic_configs("t").await?;
        assert_eq!(described.configs, altered.configs);
        // The old settings call sees the same retention.
        assert_eq!(admin.topic_settings("t").await?.retention_bytes, 4096);
        let missing = admin.describe_topic_configs("nope").await.unwrap_err();
        assert_eq!(missing.code(), Some(ErrorCode::UnknownTopic));
        Ok::<(), anyhow::Error>(())
    })?;
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn subtracting_the_last_cleanup_policy_leaves_none_and_keeps_every_segment() -> Result<()> {
    // confluent-kafka-python's integration test SUBTRACTs the last value of
    // cleanup.policy and expects ""; Kafka 4 reads that as "no cleanup".
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    let mut k = kafka(&broker)?;
    let small = [
        ("segment.bytes", "1024"),
        ("retention.bytes", "2048"),
        ("cleanup.policy", "delete"),
    ];
    for t in ["kept", "deleted"] {
        assert_eq!(create(&mut k, t, &small, false)?.0, 0, "{t}");
    }
    let (code, msg) = alter(
        &mut k,
        TOPIC,
        "kept",
        &[("cleanup.policy", 3, Some("delete"))],
    )?;
    ensure!(code == 0, "SUBTRACT of the last policy: {code} {msg:?}");
    let r = describe(&mut k, TOPIC, "kept", 4)?;
    assert_eq!(value(&r, "cleanup.policy"), Some((String::new(), 1)));
    // Neither retention nor compaction: every segment stays, unlike "deleted".
    for _ in 0..40 {
        for t in ["kept", "deleted"] {
            assert_eq!(produce(&mut k, t, batch(200)?)?.0, 0, "{t}");
        }
    }
    flume_rt::block_on(broker.engine().tick_now());
    assert!(
        log_start(&broker, "deleted")? > 0,
        "retention ran on the delete topic"
    );
    assert_eq!(
        log_start(&broker, "kept")?,
        0,
        "no cleanup policy keeps every record"
    );
    // APPEND brings a policy back; SET "" empties it again; both survive a restart.
    let (code, _) = alter(
        &mut k,
        TOPIC,
        "kept",
        &[("cleanup.policy", 2, Some("compact"))],
    )?;
    assert_eq!(code, 0);
    let r = describe(&mut k, TOPIC, "kept", 4)?;
    assert_eq!(value(&r, "cleanup.policy"), Some(("compact".into(), 1)));
    let (code, _) = alter(&mut k, TOPIC, "kept", &[("cleanup.policy", 0, Some(""))])?;
    assert_eq!(code, 0);
    flume_rt::block_on(broker.shutdown());
    let broker = start(dir.path())?;
    let mut k = kafka(&broker)?;
    let r = describe(&mut k, TOPIC, "kept", 4)?;
    assert_eq!(value(&r, "cleanup.policy"), Some((String::new(), 1)));
    flume_rt::block_on(broker.engine().tick_now());
    assert_eq!(log_start(&broker, "kept")?, 0, "still kept after a restart");
    // flume-cli topics describe shows it too (through Flume's protocol).
    let described = flume_rt::block_on(async {
        let admin = Admin::connect(&broker.local_addr().to_string()).await?;
        Ok::<_, anyhow::Error>(admin.describe_topic_configs("kept").await?)
    })?;
    let c = described
        .configs
        .iter()
        .find(|c| c.name == "cleanup.policy")
        .context("cleanup.policy")?;
    assert_eq!((c.value.as_str(), c.source), ("", 1));
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

/// The log start offset of partition 0 of `topic` (Flume's METADATA).
fn log_start(broker: &Broker, topic: &str) -> Result<i64> {
    flume_rt::block_on(async {
        let admin = Admin::connect(&broker.local_addr().to_string()).await?;
        let topics = admin.topics(&[topic.to_owned()]).await?;
        let p = topics
            .first()
            .and_then(|t| t.partitions.first())
            .context("partition 0")?;
        Ok(p.log_start)
    })
}

#[test]
fn describe_configs_of_the_broker_answers_its_settings_by_kafkas_names() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut c = common::config(dir.path());
    c.kafka_listen = Some("127.0.0.1:0".into());
    c.group_min_session_timeout = std::time::Duration::from_millis(3000);
    let broker = flume_rt::block_on(Broker::start(c)).context("broker starts")?;
    let addr = broker.kafka_addr().context("kafka listener")?;
    let mut k = kafka(&broker)?;
    let b = describe(&mut k, BROKER, "0", 4)?;
    assert_eq!(b.error_code, 0);
    let listener = format!("PLAINTEXT://{addr}");
    let data = dir.path().display().to_string();
    for (name, want, source) in [
        ("listeners", listener.as_str(), 4),
        ("advertised.listeners", listener.as_str(), 5),
        ("log.dirs", data.as_str(), 4),
        ("num.partitions", "3", 5),
        ("auto.create.topics.enable", "true", 5),
        ("log.retention.ms", "-1", 5),
        ("log.segment.bytes", "67108864", 5),
        // common::config forms groups at once: set, unlike Kafka's 3000.
        ("group.initial.rebalance.delay.ms", "0", 4),
        ("group.min.session.timeout.ms", "3000", 4),
        ("group.max.session.timeout.ms", "1800000", 5),
    ] {
        assert_eq!(
            value(&b, name),
            Some((want.to_owned(), source)),
            "{name} (value, source)"
        );
    }
    let min = b
        .configs
        .iter()
        .find(|c| c.name.as_str() == "group.min.session.timeout.ms")
        .context("group.min.session.timeout.ms")?;
    assert_eq!(min.config_type, 3, "INT");
    assert!(min.read_only);
    let synonyms: Vec<(String, i8)> = min
        .synonyms
        .iter()
        .map(|s| {
            (
                s.value.as_ref().map(|v| v.to_string()).unwrap_or_default(),
                s.source,
            )
        })
        .collect();
    assert_eq!(synonyms, [("3000".to_owned(), 4), ("6000".to_owned(), 5)]);
    let mut names: Vec<&str> = b.configs.iter().map(|c| c.name.as_str()).collect();
    let n = names.len();
    names.dedup();
    assert_eq!(names.len(), n, "each name once");
    // kafka-python's admin test asks for the listeners by name.
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(BROKER)
            .with_resource_name(s("0"))
            .with_configuration_keys(Some(vec![s("listeners"), s("advertised.listeners")]))]);
    let r = k.call(1, &req)?;
    let got: Vec<String> = r.results[0]
        .configs
        .iter()
        .map(|c| c.name.to_string())
        .collect();
    assert_eq!(got, ["advertised.listeners", "listeners"]);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

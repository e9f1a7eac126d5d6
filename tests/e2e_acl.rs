//! Authorisation end to end: ACLs with `--authorizer on` over the
//! Flume protocol, the Kafka protocol (raw `kafka-protocol` frames) and the
//! HTTP API; changes in force on open connections; kept across a restart; a
//! damaged `__acls` refused at start.

use crate::common;
use crate::common::kafka::Kc;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{Context, Result};
use flume_broker::security::acl::{
    Acl, AclPrincipal, Operation, PatternType, Permission, ResourceType,
};
use flume_broker::security::auth::AuthMode;
use flume_broker::{Broker, BrokerConfig};
use flume_client::lowlevel::Client;
use flume_client::{AclEntry, Admin, ConnectionConfig, ErrorCode, PartitionOffset, Producer};
use flume_client::{CreateTopicRequest, ProducerConfig};
use flume_protocol::{FetchPartition, FetchRequest, FetchResponse, JoinGroupRequest};
use flume_rt as rt;

fn config(dir: &std::path::Path) -> BrokerConfig {
    let mut c = common::config(dir);
    c.auth = AuthMode::Required;
    c.admin_users = vec!["admin".into()];
    c.authorizer = true;
    c
}

/// A broker with `--auth required --authorizer on`, users admin and alice.
async fn broker(dir: &std::path::Path) -> Result<(Broker, String)> {
    let broker = Broker::start(config(dir)).await?;
    broker.add_user("admin", "admin-pw").await?;
    broker.add_user("alice", "alice-pw").await?;
    let addr = broker.local_addr().to_string();
    Ok((broker, addr))
}

fn login(user: &str) -> ConnectionConfig {
    ConnectionConfig::default().credentials(user, format!("{user}-pw"))
}

fn entry(principal: &str, op: &str, kind: &str, name: &str, pattern: &str) -> AclEntry {
    AclEntry {
        principal: principal.into(),
        permission: "allow".into(),
        resource_type: kind.into(),
        pattern: pattern.into(),
        name: name.into(),
        operation: op.into(),
    }
}

fn fetch(topic: &str) -> FetchRequest {
    FetchRequest {
        max_wait_ms: 0,
        min_bytes: 1,
        max_bytes: 1 << 20,
        partitions: vec![FetchPartition {
            topic: topic.into(),
            partition: 0,
            offset: 0,
            max_bytes: 1 << 20,
        }],
    }
}

fn records(r: &FetchResponse) -> usize {
    r.partitions
        .iter()
        .map(|p| {
            flume_protocol::record::RecordIter::new(&p.records)
                .filter(Result::is_ok)
                .count()
        })
        .sum()
}

fn end_offset(broker: &Broker, topic: &str) -> u64 {
    broker
        .engine()
        .records()
        .topic(topic)
        .and_then(|t| t.partition(0).map(|p| p.end_offset()))
        .unwrap_or(0)
}

#[test]
fn flume_reads_writes_and_metadata_follow_the_acls_on_open_connections() -> Result<()> {
    rt::block_on(async {
        let dir = tempfile::tempdir()?;
        let (broker, addr) = broker(dir.path()).await?;
        let admin = Admin::connect_with(&addr, login("admin")).await?;
        for t in ["orders", "secret", "logs.app"] {
            admin
                .create_topic(CreateTopicRequest {
                    name: t.into(),
                    partitions: 1,
                    ..CreateTopicRequest::default()
                })
                .await?;
        }
        let admin_producer =
            Producer::with_config(&addr, ProducerConfig::default().connection(login("admin")))
                .await?;
        admin_producer.send("orders", None, b"o").await?;
        admin_producer.send("secret", None, b"s").await?;

        // Opened before any ACL: every change below applies to these connections.
        let alice = Client::connect(&addr, login("alice")).await?;
        let alice_admin = Admin::connect_with(&addr, login("alice")).await?;
        let alice_producer =
            Producer::with_config(&addr, ProducerConfig::default().connection(login("alice")))
                .await?;

        let err = alice
            .call(&fetch("secret"))
            .await
            .expect_err("no ACL, no read");
        assert_eq!(err.code(), Some(ErrorCode::AuthorizationFailed), "{err}");
        assert!(err.to_string().contains("FETCH"), "{err}");
        let err = alice_producer
            .send("orders", None, b"x")
            .await
            .expect_err("no ACL, no write");
        assert_eq!(err.code(), Some(ErrorCode::AuthorizationFailed), "{err}");
        assert_eq!(end_offset(&broker, "orders"), 1, "nothing appended");
        assert!(
            alice_admin.topics(&[]).await?.is_empty(),
            "METADATA hides every topic"
        );
        let err = alice_admin
            .add_acl(entry("User:alice", "all", "topic", "*", "literal"))
            .await
            .expect_err("alice is no admin");
        assert_eq!(err.code(), Some(ErrorCode::AuthorizationFailed), "{err}");
        assert!(err.to_string().contains("ACLS"), "{err}");

        assert!(
            admin
                .add_acl(entry("User:alice", "read", "topic", "orders", "literal"))
                .await?
        );
        assert!(
            !admin
                .add_acl(entry("User:alice", "read", "topic", "orders", "literal"))
                .await?
        );
        admin
            .add_acl(entry("User:alice", "write", "topic", "logs.", "prefixed"))
            .await?;

        let got = alice.call(&fetch("orders")).await?;
        assert_eq!(records(&got), 1);
        let err = alice
            .call(&fetch("secret"))
            .await
            .expect_err("still no read");
        assert_eq!(err.code(), Some(ErrorCode::AuthorizationFailed));
        let mut seen: Vec<String> = alice_admin
            .topics(&[])
            .await?
            .into_iter()
            .map(|t| t.name)
            .collect();
        seen.sort();
        assert_eq!(
            seen,
            vec!["logs.app", "orders"],
            "read and write imply describe"
        );

        alice_producer.send("logs.app", None, b"l").await?;
        assert_eq!(end_offset(&broker, "logs.app"), 1);
        let err = alice_producer
            .send("logs2", None, b"x")
            .await
            .expect_err("not under the prefix");
        assert_eq!(err.code(), Some(ErrorCode::AuthorizationFailed));
        assert!(
            broker.engine().records().topic("logs2").is_none(),
            "not auto-created"
        );
        let err = alice_producer
            .send("orders", None, b"x")
            .await
            .expect_err("read is not write");
        assert_eq!(err.code(), Some(ErrorCode::AuthorizationFailed));

        assert!(
            admin
                .remove_acl(entry("User:alice", "read", "topic", "orders", "literal"))
                .await?
        );
        let err = alice
            .call(&fetch("orders"))
            .await
            .expect_err("revoked at once");
        assert_eq!(err.code(), Some(ErrorCode::AuthorizationFailed));

        let listed = admin.list_acls(Some("User:alice")).await?;
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0].pattern, "prefixed");
        let denied = broker.engine().acl().denied_counts();
        assert!(
            denied
                .iter()
                .any(|(p, op, t, n)| (*p, *op, *t) == ("flume", "read", "topic") && *n >= 3),
            "{denied:?}"
        );
        broker.shutdown().await;
        Ok(())
    })
}

#[test]
fn group_acls_guard_joins_and_commits() -> Result<()> {
    rt::block_on(async {
        let dir = tempfile::tempdir()?;
        let (broker, addr) = broker(dir.path()).await?;
        broker
            .engine()
            .records()
            .create_topic("orders", common::topic(1))?;
        let admin = Admin::connect_with(&addr, login("admin")).await?;
        admin
            .add_acl(entry("User:alice", "read", "topic", "orders", "literal"))
            .await?;
        let alice_admin = Admin::connect_with(&addr, login("alice")).await?;
        let alice = Client::connect(&addr, login("alice")).await?;
        let commit = |group: &'static str| {
            let a = &alice_admin;
            async move {
                a.commit(
                    group,
                    vec![PartitionOffset {
                        topic: "orders".into(),
                        partition: 0,
                        offset: 1,
                    }],
                )
                .await
            }
        };
        let join = |group: &str| JoinGroupRequest {
            group: group.into(),
            member_id: String::new(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 1_000,
            assignor: "range".into(),
            topics: vec!["orders".into()],
        };
        let err = commit("team-a").await.expect_err("no group ACL");
        assert_eq!(err.code(), Some(ErrorCode::AuthorizationFailed), "{err}");
        let err = alice.call(&join("team-a")).await.expect_err("no group ACL");
        assert_eq!(err.code(), Some(ErrorCode::AuthorizationFailed), "{err}");

        admin
            .add_acl(entry("User:alice", "read", "group", "team-", "prefixed"))
            .await?;
        commit("team-a").await?;
        let offsets = alice_admin
            .group_offsets("team-a", &["orders".to_string()])
            .await?;
        assert_eq!(offsets[0].committed, 1);
        let err = commit("other").await.expect_err("not under the prefix");
        assert_eq!(err.code(), Some(ErrorCode::AuthorizationFailed));
        let err = alice
            .call(&join("other"))
            .await
            .expect_err("not under the prefix");
        assert_eq!(err.code(), Some(ErrorCode::AuthorizationFailed));
        // The group is allowed but not every topic: a commit to another topic is refused.
        broker
            .engine()
            .records()
            .create_topic("audit", common::topic(1))?;
        let err = alice_admin
            .commit(
                "team-a",
                vec![PartitionOffset {
                    topic: "audit".into(),
                    partition: 0,
                    offset: 0,
                }],
            )
            .await
            .expect_err("no read on audit");
        assert_eq!(err.code(), Some(ErrorCode::AuthorizationFailed));
        broker.shutdown().await;
        Ok(())
    })
}

#[test]
fn acls_survive_a_restart_and_a_damaged_file_stops_the_start() -> Result<()> {
    rt::block_on(async {
        let dir = tempfile::tempdir()?;
        let acl = Acl {
            principal: AclPrincipal::Name("CN=alice,O=Example".into()),
            permission: Permission::Deny,
            resource_type: ResourceType::Topic,
            pattern: PatternType::Literal,
            name: "orders".into(),
            operation: Operation::Write,
        };
        {
            let (broker, _) = broker(dir.path()).await?;
            assert!(broker.add_acl(acl.clone()).await?);
            broker.shutdown().await;
        }
        let broker = Broker::start(config(dir.path())).await?;
        assert_eq!(broker.acls(), vec![acl]);
        broker.shutdown().await;

        let path = dir.path().join("__acls");
        let text = std::fs::read_to_string(&path)?;
        std::fs::write(&path, text.replace(" write ", " scribble "))?;
        let err = Broker::start(config(dir.path()))
            .await
            .expect_err("a damaged __acls stops the start");
        let msg = err.to_string();
        assert!(
            msg.contains("__acls line 2") && msg.contains("scribble"),
            "{msg}"
        );
        assert_eq!(msg.lines().count(), 1, "{msg}");
        std::fs::write(&path, [0xff, 0xfe, 0x00])?;
        assert!(Broker::start(config(dir.path())).await.is_err());
        Ok(())
    })
}

// ---------------------------------------------------------------- Kafka

fn name(s: &str) -> kafka_protocol::messages::TopicName {
    kafka_protocol::messages::TopicName(kafka_protocol::protocol::StrBytes::from_string(
        s.to_owned(),
    ))
}

fn group_id(s: &str) -> kafka_protocol::messages::GroupId {
    kafka_protocol::messages::GroupId(kafka_protocol::protocol::StrBytes::from_string(
        s.to_owned(),
    ))
}

#[test]
fn kafka_answers_with_kafkas_authorization_codes() -> Result<()> {
    use kafka_protocol::messages::*;
    let dir = tempfile::tempdir()?;
    // Authentication off: every Kafka connection is User:ANONYMOUS.
    let mut c = common::config(dir.path());
    c.kafka_listen = Some("127.0.0.1:0".into());
    c.authorizer = true;
    let broker = rt::block_on(Broker::start(c))?;
    for t in ["public", "secret"] {
        broker
            .engine()
            .records()
            .create_topic(t, common::topic(1))?;
    }
    let read_public = Acl {
        principal: AclPrincipal::Anonymous,
        permission: Permission::Allow,
        resource_type: ResourceType::Topic,
        pattern: PatternType::Literal,
        name: "public".into(),
        operation: Operation::Read,
    };
    rt::block_on(broker.add_acl(read_public.clone()))?;
    let mut k = Kc::connect(&broker.kafka_addr().context("kafka")?.to_string())?;

    // Metadata of every topic: only what may be described; by name: 29.
    let all = k.call(4, &MetadataRequest::default().with_topics(None))?;
    let names: Vec<_> = all
        .topics
        .iter()
        .filter_map(|t| t.name.as_ref().map(|n| n.0.as_str().to_owned()))
        .collect();
    assert_eq!(names, vec!["public"]);
    let mut named = MetadataRequest::default();
    named.topics = Some(vec![
        metadata_request::MetadataRequestTopic::default().with_name(Some(name("secret")))
    ]);
    let one = k.call(4, &named)?;
    assert_eq!(one.topics[0].error_code, 29);

    // Fetch: 29 for the topic it may not read, records for the one it may.
    let fetch = |topic: &str| {
        let mut p = fetch_request::FetchPartition::default();
        p.partition = 0;
        p.partition_max_bytes = 1 << 20;
        let mut t = fetch_request::FetchTopic::default();
        t.topic = name(topic);
        t.partitions = vec![p];
        let mut r = FetchRequest::default();
        r.max_wait_ms = 0;
        r.min_bytes = 1;
        r.max_bytes = 1 << 20;
        r.topics = vec![t];
        r
    };
    let got = k.call(4, &fetch("secret"))?;
    assert_eq!(got.responses[0].partitions[0].error_code, 29);
    let got = k.call(4, &fetch("public"))?;
    assert_eq!(got.responses[0].partitions[0].error_code, 0);

    // Produce without WRITE: 29 and nothing appended.
    let mut pd = produce_request::PartitionProduceData::default();
    pd.index = 0;
    let mut td = produce_request::TopicProduceData::default();
    td.name = name("public");
    td.partition_data = vec![pd];
    let mut produce = ProduceRequest::default();
    produce.acks = 1;
    produce.timeout_ms = 1_000;
    produce.topic_data = vec![td];
    let r = k.call(3, &produce)?;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 29);

    // Groups: 30; the cluster: 31; creating a topic: 29.
    let mut join = JoinGroupRequest::default();
    join.group_id = group_id("g");
    join.session_timeout_ms = 10_000;
    join.protocol_type = kafka_protocol::protocol::StrBytes::from_static_str("consumer");
    let r = k.call(0, &join)?;
    assert_eq!(r.error_code, 30);
    let mut describe = DescribeGroupsRequest::default();
    describe.groups = vec![group_id("g")];
    assert_eq!(k.call(0, &describe)?.groups[0].error_code, 30);
    let mut commit = OffsetCommitRequest::default();
    commit.group_id = group_id("g");
    commit.generation_id_or_member_epoch = -1;
    let mut ct = offset_commit_request::OffsetCommitRequestTopic::default();
    ct.name = name("public");
    ct.partitions = vec![offset_commit_request::OffsetCommitRequestPartition::default()];
    commit.topics = vec![ct];
    let r = k.call(2, &commit)?;
    assert_eq!(r.topics[0].partitions[0].error_code, 30);
    let r = k.call(
        0,
        &InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000),
    )?;
    assert_eq!(r.error_code, 31);
    let mut create = CreateTopicsRequest::default();
    let mut ct = create_topics_request::CreatableTopic::default();
    ct.name = name("new");
    ct.num_partitions = 1;
    ct.replication_factor = 1;
    create.topics = vec![ct];
    create.timeout_ms = 1_000;
    assert_eq!(k.call(2, &create)?.topics[0].error_code, 29);
    assert!(broker.engine().records().topic("new").is_none());

    // Granted on the open connection: the same requests succeed.
    let mut write = read_public.clone();
    write.operation = Operation::Write;
    rt::block_on(broker.add_acl(write))?;
    let r = k.call(3, &produce)?;
    assert_ne!(
        r.responses[0].partition_responses[0].error_code, 29,
        "an empty record set is refused for what it is, not by the ACLs"
    );
    let mut group_read = read_public;
    group_read.resource_type = ResourceType::Group;
    group_read.name = "g".into();
    rt::block_on(broker.add_acl(group_read))?;
    let r = k.call(2, &commit)?;
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    let r = k.call(
        0,
        &InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000),
    )?;
    assert_eq!(r.error_code, 0, "WRITE on some topic is enough (Kafka 3)");

    let denied = broker.engine().acl().denied_counts();
    for (op, t) in [
        ("read", "topic"),
        ("write", "topic"),
        ("read", "group"),
        ("write", "cluster"),
    ] {
        assert!(
            denied.iter().any(|d| (d.0, d.1, d.2) == ("kafka", op, t)),
            "{op} {t}: {denied:?}"
        );
    }
    rt::block_on(broker.shutdown());
    Ok(())
}

// ---------------------------------------------------------------- HTTP

fn http_get(addr: std::net::SocketAddr, path: &str) -> Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("status line")?;
    Ok((status, out))
}

#[test]
fn http_metrics_need_describe_on_the_cluster() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut c = common::config(dir.path());
    c.http_listen = Some("127.0.0.1:0".into());
    c.authorizer = true;
    let broker = rt::block_on(Broker::start(c))?;
    let http = broker.http_addr().context("http")?;
    let (status, body) = http_get(http, "/metrics")?;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("User:ANONYMOUS may not describe the cluster"),
        "{body}"
    );
    assert_eq!(http_get(http, "/api/overview")?.0, 403);
    assert_eq!(http_get(http, "/healthz")?.0, 200, "health stays open");
    rt::block_on(broker.add_acl(Acl {
        principal: AclPrincipal::Anonymous,
        permission: Permission::Allow,
        resource_type: ResourceType::Cluster,
        pattern: PatternType::Literal,
        name: "kafka-cluster".into(),
        operation: Operation::Describe,
    }))?;
    let (status, body) = http_get(http, "/metrics")?;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(
            "flume_authorization_denied_total{protocol=\"http\",operation=\"describe\",resource_type=\"cluster\"} 2"
        ),
        "{body}"
    );
    assert_eq!(http_get(http, "/api/overview")?.0, 200);
    rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn kafka_create_describe_and_delete_acls() -> Result<()> {
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    let dir = tempfile::tempdir()?;
    let mut c = common::config(dir.path());
    c.kafka_listen = Some("127.0.0.1:0".into());
    c.authorizer = true;
    let broker = rt::block_on(Broker::start(c))?;
    let mut k = Kc::connect(&broker.kafka_addr().context("kafka")?.to_string())?;
    let mut creation = create_acls_request::AclCreation::default();
    creation.resource_type = 2; // TOPIC
    creation.resource_name = StrBytes::from_static_str("orders");
    creation.resource_pattern_type = 3; // LITERAL
    creation.principal = StrBytes::from_static_str("User:alice");
    creation.host = StrBytes::from_static_str("*");
    creation.operation = 3; // READ
    creation.permission_type = 3; // ALLOW
    let mut create = CreateAclsRequest::default();
    create.creations = vec![creation.clone()];
    assert_eq!(
        k.call(1, &create)?.results[0].error_code,
        31,
        "no ALTER on the cluster"
    );
    let mut describe = DescribeAclsRequest::default();
    describe.resource_type_filter = 1; // ANY
    describe.pattern_type_filter = 1;
    describe.operation = 1;
    describe.permission_type = 1;
    describe.resource_name_filter = None; // null: any
    describe.principal_filter = None;
    describe.host_filter = None;
    assert_eq!(k.call(1, &describe)?.error_code, 31);

    for op in [Operation::Alter, Operation::Describe] {
        rt::block_on(broker.add_acl(Acl {
            principal: AclPrincipal::Anonymous,
            permission: Permission::Allow,
            resource_type: ResourceType::Cluster,
            pattern: PatternType::Literal,
            name: "kafka-cluster".into(),
            operation: op,
        }))?;
    }
    let mut bad = creation.clone();
    bad.host = StrBytes::from_static_str("10.0.0.1");
    create.creations = vec![creation, bad];
    let r = k.call(1, &create)?;
    assert_eq!(r.results[0].error_code, 0);
    assert_eq!(r.results[1].error_code, 42, "Flume ACLs have no host");
    assert!(broker.acls().iter().any(|a| a.name == "orders"
        && a.principal == AclPrincipal::Name("alice".into())
        && a.operation == Operation::Read));

    let mut by_topic = describe.clone();
    by_topic.resource_type_filter = 2;
    by_topic.resource_name_filter = Some(StrBytes::from_static_str("orders"));
    by_topic.pattern_type_filter = 2; // MATCH
    let r = k.call(1, &by_topic)?;
    assert_eq!(r.error_code, 0);
    assert_eq!(r.resources.len(), 1);
    assert_eq!(r.resources[0].acls[0].principal.as_str(), "User:alice");
    assert_eq!(r.resources[0].acls[0].operation, 3);

    let mut filter = delete_acls_request::DeleteAclsFilter::default();
    filter.resource_type_filter = 2;
    filter.resource_name_filter = Some(StrBytes::from_static_str("orders"));
    filter.pattern_type_filter = 3;
    filter.principal_filter = Some(StrBytes::from_static_str("User:alice"));
    filter.operation = 1;
    filter.permission_type = 1;
    filter.host_filter = None;
    let mut delete = DeleteAclsRequest::default();
    delete.filters = vec![filter];
    let r = k.call(1, &delete)?;
    assert_eq!(r.filter_results[0].error_code, 0);
    assert_eq!(r.filter_results[0].matching_acls.len(), 1);
    assert!(!broker.acls().iter().any(|a| a.name == "orders"));
    rt::block_on(broker.shutdown());
    Ok(())
}

/// With the authorizer off no permission is missing: ACLs are not in use.
/// Kafka's ACL APIs answer SECURITY_DISABLED (54) with a message, as a
/// Kafka broker without an authorizer does, and Flume's ACLS answers its
/// SECURITY_DISABLED (44); an admin may still stage ACLs on both.
#[test]
fn with_the_authorizer_off_the_acl_apis_say_security_is_disabled() -> Result<()> {
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    let dir = tempfile::tempdir()?;
    let mut c = common::config(dir.path());
    c.kafka_listen = Some("127.0.0.1:0".into());
    c.auth = AuthMode::Optional;
    c.admin_users = vec!["admin".into()];
    let broker = rt::block_on(async {
        let b = Broker::start(c).await?;
        b.add_user("admin", "admin-pw").await?;
        b.add_user("alice", "alice-pw").await?;
        Ok::<_, anyhow::Error>(b)
    })?;
    let addr = broker.local_addr().to_string();
    rt::block_on(async {
        let alice = Admin::connect_with(&addr, login("alice")).await?;
        let err = alice
            .add_acl(entry("User:alice", "read", "topic", "orders", "literal"))
            .await
            .expect_err("not an admin");
        assert_eq!(err.code(), Some(ErrorCode::SecurityDisabled), "{err}");
        let err = alice.list_acls(None).await.expect_err("not an admin");
        assert_eq!(err.code(), Some(ErrorCode::SecurityDisabled), "{err}");
        let admin = Admin::connect_with(&addr, login("admin")).await?;
        assert!(
            admin
                .add_acl(entry("User:bob", "read", "topic", "staged", "literal"))
                .await?
        );
        Ok::<_, anyhow::Error>(())
    })?;

    let mut k = Kc::connect(&broker.kafka_addr().context("kafka")?.to_string())?;
    let mut creation = create_acls_request::AclCreation::default();
    creation.resource_type = 2;
    creation.resource_name = StrBytes::from_static_str("orders");
    creation.resource_pattern_type = 3;
    creation.principal = StrBytes::from_static_str("User:alice");
    creation.host = StrBytes::from_static_str("*");
    creation.operation = 3;
    creation.permission_type = 3;
    let mut create = CreateAclsRequest::default();
    create.creations = vec![creation];
    let r = k.call(2, &create)?;
    assert_eq!(r.results[0].error_code, 54, "SECURITY_DISABLED");
    let why = r.results[0].error_message.as_ref().map(|m| m.as_str());
    assert!(
        why.is_some_and(|m| m.contains("--authorizer off")),
        "{why:?}"
    );
    let mut describe = DescribeAclsRequest::default();
    describe.resource_type_filter = 1;
    describe.pattern_type_filter = 1;
    describe.operation = 1;
    describe.permission_type = 1;
    let r = k.call(2, &describe)?;
    assert_eq!(r.error_code, 54);
    assert!(r.error_message.is_some());
    let mut filter = delete_acls_request::DeleteAclsFilter::default();
    filter.resource_type_filter = 1;
    filter.pattern_type_filter = 1;
    filter.operation = 1;
    filter.permission_type = 1;
    let mut delete = DeleteAclsRequest::default();
    delete.filters = vec![filter];
    let r = k.call(2, &delete)?;
    assert_eq!(r.filter_results[0].error_code, 54);
    assert!(r.filter_results[0].matching_acls.is_empty());
    assert_eq!(broker.acls().len(), 1, "the admin's staged ACL stays");
    rt::block_on(broker.shutdown());
    Ok(())
}

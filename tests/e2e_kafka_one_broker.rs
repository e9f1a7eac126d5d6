//! The replica-placement APIs Kafka tools call (kafka-leader-election,
//! kafka-reassign-partitions), answered as a one-broker Kafka cluster does,
//! with raw `kafka-protocol` frames: ElectLeaders (the only replica already
//! leads), List/AlterPartitionReassignments (none in progress; `[this
//! broker]` is a no-op, any other replica set refused), AlterReplicaLogDirs
//! (the one log directory), each advertised and authorized as Kafka does.

use crate::common;
use crate::common::kafka::Kc;

use anyhow::{ensure, Context, Result};
use flume_broker::security::acl::{
    Acl, AclPrincipal, Operation, PatternType, Permission, ResourceType,
};
use flume_broker::Broker;
use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::alter_replica_log_dirs_request::{
    AlterReplicaLogDir, AlterReplicaLogDirTopic,
};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterReplicaLogDirsRequest, ApiKey, ApiVersionsRequest,
    BrokerId, DescribeLogDirsRequest, ElectLeadersRequest, ElectLeadersResponse,
    ListPartitionReassignmentsRequest, MetadataRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

const NONE: i16 = 0;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
const INVALID_REQUEST: i16 = 42;
const LOG_DIR_NOT_FOUND: i16 = 57;
const ELECTION_NOT_NEEDED: i16 = 84;
const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;

fn start(dir: &std::path::Path, authorizer: bool) -> Result<(Broker, Kc)> {
    let mut c = common::config(dir);
    c.kafka_listen = Some("127.0.0.1:0".into());
    c.authorizer = authorizer;
    let broker = flume_rt::block_on(Broker::start(c)).context("broker starts")?;
    broker
        .engine()
        .records()
        .create_topic("t", common::topic(2))?;
    broker
        .engine()
        .records()
        .create_topic("u", common::topic(1))?;
    let k = Kc::connect(&broker.kafka_addr().context("kafka")?.to_string())?;
    Ok((broker, k))
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

fn elect(topics: Option<&[(&str, &[i32])]>, election_type: i8) -> ElectLeadersRequest {
    let mut r = ElectLeadersRequest::default();
    r.election_type = election_type;
    r.timeout_ms = 5_000;
    r.topic_partitions = topics.map(|ts| {
        ts.iter()
            .map(|(t, ps)| {
                let mut x = TopicPartitions::default();
                x.topic = name(t);
                x.partitions = ps.to_vec();
                x
            })
            .collect()
    });
    r
}

/// (topic, partition, code) of every result, in order.
fn elected(r: &ElectLeadersResponse) -> Vec<(String, i32, i16)> {
    r.replica_election_results
        .iter()
        .flat_map(|t| {
            t.partition_result
                .iter()
                .map(|p| (t.topic.0.to_string(), p.partition_id, p.error_code))
        })
        .collect()
}

fn reassign(topic: &str, parts: &[(i32, Option<&[i32]>)]) -> AlterPartitionReassignmentsRequest {
    let mut t = ReassignableTopic::default();
    t.name = name(topic);
    t.partitions = parts
        .iter()
        .map(|(p, replicas)| {
            let mut x = ReassignablePartition::default();
            x.partition_index = *p;
            x.replicas = replicas.map(|r| r.iter().copied().map(BrokerId).collect());
            x
        })
        .collect();
    let mut r = AlterPartitionReassignmentsRequest::default();
    r.timeout_ms = 5_000;
    r.topics = vec![t];
    r
}

fn move_dirs(moves: &[(&str, &str, &[i32])]) -> AlterReplicaLogDirsRequest {
    let mut r = AlterReplicaLogDirsRequest::default();
    r.dirs = moves
        .iter()
        .map(|(path, topic, ps)| {
            let mut t = AlterReplicaLogDirTopic::default();
            t.name = name(topic);
            t.partitions = ps.to_vec();
            let mut d = AlterReplicaLogDir::default();
            d.path = StrBytes::from_string((*path).to_owned());
            d.topics = vec![t];
            d
        })
        .collect();
    r
}

/// (topic, partition, code) of an AlterReplicaLogDirs answer, in order.
fn moved(
    k: &mut Kc,
    version: i16,
    r: &AlterReplicaLogDirsRequest,
) -> Result<Vec<(String, i32, i16)>> {
    Ok(k.call(version, r)?
        .results
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.topic_name.0.to_string(), p.partition_index, p.error_code))
        })
        .collect())
}

/// (partition, code) of an AlterPartitionReassignments answer's one topic.
fn reassigned(
    k: &mut Kc,
    version: i16,
    r: &AlterPartitionReassignmentsRequest,
) -> Result<(i16, Vec<(i32, i16)>)> {
    let resp = k.call(version, r)?;
    ensure!(resp.responses.len() == 1, "{resp:?}");
    Ok((
        resp.error_code,
        resp.responses[0]
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.error_code))
            .collect(),
    ))
}

#[test]
fn leader_elections_reassignments_and_log_dirs_answer_as_one_broker() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (broker, mut k) = start(dir.path(), false)?;
    let versions = k.call(3, &ApiVersionsRequest::default())?;
    for (key, min, max) in [
        (ApiKey::ElectLeaders, 0, 2),
        (ApiKey::AlterPartitionReassignments, 0, 1),
        (ApiKey::ListPartitionReassignments, 0, 0),
        (ApiKey::AlterReplicaLogDirs, 1, 2),
    ] {
        ensure!(
            versions
                .api_keys
                .iter()
                .any(|a| a.api_key == key as i16 && (a.min_version, a.max_version) == (min, max)),
            "{key:?} v{min}-{max} advertised"
        );
    }

    // ElectLeaders: nothing to elect; unknown partitions said so.
    let named: &[(&str, &[i32])] = &[("t", &[0, 1, 2]), ("missing", &[0])];
    for (version, election_type) in [(0, 0), (1, 0), (2, 0), (2, 1)] {
        let r = k.call(version, &elect(Some(named), election_type))?;
        ensure!(r.error_code == NONE, "{r:?}");
        ensure!(
            elected(&r)
                == [
                    ("t".to_owned(), 0, ELECTION_NOT_NEEDED),
                    ("t".to_owned(), 1, ELECTION_NOT_NEEDED),
                    ("t".to_owned(), 2, UNKNOWN_TOPIC_OR_PARTITION),
                    ("missing".to_owned(), 0, UNKNOWN_TOPIC_OR_PARTITION),
                ],
            "v{version} type {election_type}: {r:?}"
        );
    }
    // Every partition: each topic, none needing an election (left out).
    let all = k.call(2, &elect(None, 0))?;
    let topics: Vec<String> = all
        .replica_election_results
        .iter()
        .map(|t| t.topic.0.to_string())
        .collect();
    ensure!(topics == ["t", "u"] && elected(&all).is_empty(), "{all:?}");
    let bad = k.call(2, &elect(Some(named), 7))?;
    ensure!(bad.error_code == INVALID_REQUEST, "{bad:?}");
    ensure!(elected(&bad).iter().all(|(_, _, c)| *c == INVALID_REQUEST));

    // ListPartitionReassignments: none in progress, whatever is asked.
    let mut list = ListPartitionReassignmentsRequest::default();
    list.topics = None;
    let r = k.call(0, &list)?;
    ensure!(r.error_code == NONE && r.topics.is_empty(), "{r:?}");
    let mut only = ListPartitionReassignmentsTopics::default();
    only.name = name("t");
    only.partition_indexes = vec![0, 1];
    list.topics = Some(vec![only]);
    let r = k.call(0, &list)?;
    ensure!(r.error_code == NONE && r.topics.is_empty(), "{r:?}");

    // AlterPartitionReassignments: [0] is where every partition is already.
    for version in [0, 1] {
        let r = reassigned(
            &mut k,
            version,
            &reassign(
                "t",
                &[
                    (0, Some(&[0])),
                    (1, Some(&[1])),
                    (0, Some(&[0, 0])),
                    (1, Some(&[])),
                    (1, Some(&[0, 1])),
                    (1, None),
                    (5, Some(&[0])),
                ],
            ),
        )?;
        ensure!(
            r == (
                NONE,
                vec![
                    (0, NONE),
                    (1, INVALID_REPLICA_ASSIGNMENT),
                    (0, INVALID_REPLICA_ASSIGNMENT),
                    (1, INVALID_REPLICA_ASSIGNMENT),
                    (1, INVALID_REPLICA_ASSIGNMENT),
                    (1, NO_REASSIGNMENT_IN_PROGRESS),
                    (5, UNKNOWN_TOPIC_OR_PARTITION),
                ]
            ),
            "v{version}: {r:?}"
        );
    }
    let r = reassigned(&mut k, 0, &reassign("missing", &[(0, Some(&[0]))]))?;
    ensure!(r == (NONE, vec![(0, UNKNOWN_TOPIC_OR_PARTITION)]), "{r:?}");

    // AlterReplicaLogDirs: the one log directory DescribeLogDirs gives.
    let mut logs = DescribeLogDirsRequest::default();
    logs.topics = None;
    let log_dir = k.call(4, &logs)?.results[0].log_dir.to_string();
    for version in [1, 2] {
        let r = moved(
            &mut k,
            version,
            &move_dirs(&[
                (&log_dir, "t", &[0, 1, 7]),
                ("/somewhere/else", "u", &[0]),
                (&log_dir, "missing", &[0]),
                // Named twice: the last path counts.
                ("/somewhere/else", "t", &[1]),
            ]),
        )?;
        ensure!(
            r == [
                ("missing".to_owned(), 0, UNKNOWN_TOPIC_OR_PARTITION),
                ("t".to_owned(), 0, NONE),
                ("t".to_owned(), 1, LOG_DIR_NOT_FOUND),
                ("t".to_owned(), 7, UNKNOWN_TOPIC_OR_PARTITION),
                ("u".to_owned(), 0, LOG_DIR_NOT_FOUND),
            ],
            "v{version}: {r:?}"
        );
    }

    // Nothing moved: each partition still has this broker as its one replica.
    let meta = k.call(12, &MetadataRequest::default())?;
    for t in &meta.topics {
        for p in &t.partitions {
            ensure!(
                p.replica_nodes == [BrokerId(0)] && p.leader_id == BrokerId(0),
                "{t:?}"
            );
        }
    }
    drop(k);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn replica_placement_needs_kafkas_cluster_permissions() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // Authentication off: every connection is User:ANONYMOUS, with no ACLs yet.
    let (broker, mut k) = start(dir.path(), true)?;
    let named: &[(&str, &[i32])] = &[("t", &[0])];
    let r = k.call(2, &elect(Some(named), 0))?;
    ensure!(
        r.error_code == CLUSTER_AUTHORIZATION_FAILED
            && elected(&r) == [("t".to_owned(), 0, CLUSTER_AUTHORIZATION_FAILED)],
        "{r:?}"
    );
    let mut list = ListPartitionReassignmentsRequest::default();
    list.topics = None;
    ensure!(k.call(0, &list)?.error_code == CLUSTER_AUTHORIZATION_FAILED);
    let r = reassigned(&mut k, 1, &reassign("t", &[(0, Some(&[0]))]))?;
    ensure!(
        r == (
            CLUSTER_AUTHORIZATION_FAILED,
            vec![(0, CLUSTER_AUTHORIZATION_FAILED)]
        ),
        "{r:?}"
    );
    let log_dir = std::fs::canonicalize(dir.path())?.display().to_string();
    let r = moved(&mut k, 2, &move_dirs(&[(&log_dir, "t", &[0])]))?;
    ensure!(
        r == [("t".to_owned(), 0, CLUSTER_AUTHORIZATION_FAILED)],
        "{r:?}"
    );

    let allow = |operation| Acl {
        principal: AclPrincipal::Anonymous,
        permission: Permission::Allow,
        resource_type: ResourceType::Cluster,
        pattern: PatternType::Literal,
        name: "kafka-cluster".into(),
        operation,
    };
    // DESCRIBE on the cluster: the list, not the changes.
    flume_rt::block_on(broker.add_acl(allow(Operation::Describe)))?;
    ensure!(k.call(0, &list)?.error_code == NONE);
    let r = k.call(2, &elect(Some(named), 0))?;
    ensure!(r.error_code == CLUSTER_AUTHORIZATION_FAILED, "{r:?}");
    // ALTER on the cluster: the changes.
    flume_rt::block_on(broker.add_acl(allow(Operation::Alter)))?;
    let r = k.call(2, &elect(Some(named), 0))?;
    ensure!(
        elected(&r) == [("t".to_owned(), 0, ELECTION_NOT_NEEDED)],
        "{r:?}"
    );
    let r = reassigned(&mut k, 1, &reassign("t", &[(0, Some(&[0]))]))?;
    ensure!(r == (NONE, vec![(0, NONE)]), "{r:?}");
    let r = moved(&mut k, 2, &move_dirs(&[(&log_dir, "t", &[0])]))?;
    ensure!(r == [("t".to_owned(), 0, NONE)], "{r:?}");
    drop(k);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

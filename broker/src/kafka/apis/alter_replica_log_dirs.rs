//! AlterReplicaLogDirs (v1-2), answered as a one-broker Kafka cluster with
//! one log directory does: a partition asked into that directory (the path
//! DescribeLogDirs gives) is already there (NONE); any other path is
//! LOG_DIR_NOT_FOUND (57); a partition that does not exist, in the right
//! directory, UNKNOWN_TOPIC_OR_PARTITION. A partition named twice takes the
//! last path, as Kafka's map of the request does; results by topic. ALTER
//! on the cluster, else CLUSTER_AUTHORIZATION_FAILED for each partition.

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
};
use kafka_protocol::messages::{
    AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::super::{errors, Ctx};
use crate::domain::TopicPartition;

pub(super) fn handle(ctx: &Ctx, req: AlterReplicaLogDirsRequest) -> AlterReplicaLogDirsResponse {
    let mut resp = AlterReplicaLogDirsResponse::default();
    if !ctx.with_subject(|s| s.place_replicas()) {
        // Kafka's error answer: every entry as asked, each refused.
        for dir in req.dirs {
            for t in dir.topics {
                let mut out = AlterReplicaLogDirTopicResult::default();
                out.partitions = t
                    .partitions
                    .iter()
                    .map(|&p| result(p, errors::CLUSTER_AUTHORIZATION_FAILED))
                    .collect();
                out.topic_name = t.name;
                resp.results.push(out);
            }
        }
        return resp;
    }
    // (topic, partition) -> whether the path asked for is the log
    // directory; the last one named wins.
    let mut wanted: BTreeMap<(String, i32), bool> = BTreeMap::new();
    let log_dir = ctx.engine.log_dir().display().to_string();
    for dir in req.dirs {
        let here = dir.path.as_str() == log_dir;
        for t in dir.topics {
            for p in t.partitions {
                wanted.insert((t.name.0.as_str().to_owned(), p), here);
            }
        }
    }
    let mut by_topic: BTreeMap<String, Vec<AlterReplicaLogDirPartitionResult>> = BTreeMap::new();
    for ((topic, p), here) in wanted {
        let code = if !here {
            errors::LOG_DIR_NOT_FOUND
        } else if ctx
            .engine
            .transactions()
            .partition_exists(&TopicPartition::new(topic.as_str(), p))
        {
            errors::NONE
        } else {
            errors::UNKNOWN_TOPIC_OR_PARTITION
        };
        by_topic.entry(topic).or_default().push(result(p, code));
    }
    resp.results = by_topic
        .into_iter()
        .map(|(topic, partitions)| {
            let mut out = AlterReplicaLogDirTopicResult::default();
            out.topic_name = TopicName(StrBytes::from_string(topic));
            out.partitions = partitions;
            out
        })
        .collect();
    resp
}

fn result(partition: i32, code: i16) -> AlterReplicaLogDirPartitionResult {
    let mut r = AlterReplicaLogDirPartitionResult::default();
    r.partition_index = partition;
    r.error_code = code;
    r
}

//! DescribeLogDirs (v1-4): one log directory, the data directory, with each
//! partition's bytes on disk, offset lag 0 (there are no future replicas
//! catching up) and `is_future_key` false. Every topic when `topics` is
//! null, else the partitions named (unknown ones left out, as Kafka does).
//! DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED (v3+; earlier
//! versions have no error field and get no directory). v4's total and
//! usable bytes of the volume are -1 (not known).

use std::collections::HashSet;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::super::{errors, map, Ctx};

pub(super) fn handle(
    ctx: &Ctx,
    req: DescribeLogDirsRequest,
    _version: i16,
) -> DescribeLogDirsResponse {
    let mut resp = DescribeLogDirsResponse::default();
    if !ctx.with_subject(|s| s.describe_log_dirs()) {
        resp.error_code = errors::CLUSTER_AUTHORIZATION_FAILED;
        return resp;
    }
    let wanted: Vec<(String, Option<HashSet<i32>>)> = match req.topics {
        None => ctx
            .engine
            .records()
            .topics()
            .iter()
            .map(|t| (t.name.clone(), None))
            .collect(),
        Some(topics) => topics
            .into_iter()
            .map(|t| {
                let only: HashSet<i32> = t.partitions.into_iter().collect();
                (t.topic.0.as_str().to_owned(), Some(only))
            })
            .collect(),
    };
    let mut dir = DescribeLogDirsResult::default();
    dir.log_dir = StrBytes::from_string(ctx.engine.log_dir().display().to_string());
    dir.total_bytes = -1;
    dir.usable_bytes = -1;
    for (name, only) in wanted {
        let Some(sizes) = ctx
            .engine
            .records()
            .topic(&name)
            .map(|t| map::partition_sizes(&t))
        else {
            continue;
        };
        let mut t = DescribeLogDirsTopic::default();
        for (partition, bytes) in sizes {
            if only.as_ref().is_some_and(|o| !o.contains(&partition)) {
                continue;
            }
            let mut p = DescribeLogDirsPartition::default();
            p.partition_index = partition;
            p.partition_size = bytes;
            p.offset_lag = 0;
            p.is_future_key = false;
            t.partitions.push(p);
        }
        if !t.partitions.is_empty() {
            t.name = TopicName(StrBytes::from_string(name));
            dir.topics.push(t);
        }
    }
    resp.results.push(dir);
    resp
}

//! CreatePartitions (v0-3): more partitions for existing topics, through the
//! engine's grow (`topic.conf` and the new partition directories, durable;
//! see `crate::engine::Admin::create_partitions`). ALTER on each topic. A count that is
//! not more than the topic has is INVALID_PARTITIONS (the same count too,
//! as Kafka answers); manual assignments must give each new partition one
//! replica, this broker (INVALID_REPLICA_ASSIGNMENT otherwise).
//! `validate_only` runs the checks only. `timeout_ms` needs no wait: the
//! partitions exist when the answer comes.

use std::collections::HashSet;

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};
use kafka_protocol::protocol::StrBytes;

use flume_protocol::ErrorCode;

use super::super::{errors, Ctx};

pub(super) async fn handle(
    ctx: &Ctx,
    req: CreatePartitionsRequest,
    _version: i16,
) -> CreatePartitionsResponse {
    let mut resp = CreatePartitionsResponse::default();
    // A topic named twice is refused both times, as Kafka does.
    let mut seen = HashSet::new();
    let duplicated: HashSet<String> = req
        .topics
        .iter()
        .map(|t| t.name.0.as_str().to_owned())
        .filter(|n| !seen.insert(n.clone()))
        .collect();
    for t in &req.topics {
        let name = t.name.0.as_str();
        let outcome = if duplicated.contains(name) {
            Err((
                errors::INVALID_REQUEST,
                format!("topic {name:?} is named more than once"),
            ))
        } else if !ctx.with_subject(|s| s.create_partitions(name)) {
            Err((
                errors::TOPIC_AUTHORIZATION_FAILED,
                format!("not authorized to alter topic {name:?}"),
            ))
        } else {
            grow(ctx, t, req.validate_only).await
        };
        let mut r = CreatePartitionsTopicResult::default();
        r.name = t.name.clone();
        if let Err((code, message)) = outcome {
            r.error_code = code;
            r.error_message = Some(StrBytes::from_string(message));
        }
        resp.results.push(r);
    }
    resp
}

async fn grow(
    ctx: &Ctx,
    t: &CreatePartitionsTopic,
    validate_only: bool,
) -> Result<(), (i16, String)> {
    let name = t.name.0.as_str();
    let Some(topic) = ctx.engine.records().topic(name) else {
        return Err((
            errors::UNKNOWN_TOPIC_OR_PARTITION,
            format!("topic {name:?} does not exist"),
        ));
    };
    let partitions = i32::try_from(topic.config.partitions).unwrap_or(i32::MAX);
    if t.count <= partitions {
        return Err((
            errors::INVALID_PARTITIONS,
            format!(
                "topic {name:?} has {} partitions; the count can only grow, and {} is not more",
                partitions, t.count
            ),
        ));
    }
    if let Some(assignments) = &t.assignments {
        let adding = i64::from(t.count) - i64::from(partitions);
        if i64::try_from(assignments.len()).unwrap_or(i64::MAX) != adding {
            return Err((
                errors::INVALID_REPLICA_ASSIGNMENT,
                format!(
                    "{} assignments for {adding} new partitions: one per new partition",
                    assignments.len()
                ),
            ));
        }
        for a in assignments {
            let ids: Vec<i32> = a.broker_ids.iter().map(|b| b.0).collect();
            if ids != [ctx.node_id] {
                return Err((
                    errors::INVALID_REPLICA_ASSIGNMENT,
                    format!(
                        "assignment {ids:?}: this cluster is one broker (node id {}), each new partition's replicas must be [{}]",
                        ctx.node_id, ctx.node_id
                    ),
                ));
            }
        }
    }
    let Ok(total) = u32::try_from(t.count) else {
        return Err((
            errors::INVALID_PARTITIONS,
            format!("{} partitions: a count is at least 1", t.count),
        ));
    };
    match ctx
        .engine
        .admin()
        .create_partitions(name, total, validate_only)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.code() == ErrorCode::InvalidRequest => {
            Err((errors::INVALID_PARTITIONS, e.to_string()))
        }
        Err(e) => Err(errors::coded(&e)),
    }
}

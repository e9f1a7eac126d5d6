//! CreateTopics: partitions (or the broker default), replication factor 1
//! (or -1), topic configs by Kafka's names (an unknown name or a bad value
//! is INVALID_CONFIG naming both; nothing is created then). validate_only
//! checks everything and creates nothing. v5+ answers with every config of
//! the topic and its source. A manual assignment is accepted when it is the
//! only one a one-broker cluster has: partitions 0..n, each with this broker
//! as its one replica (INVALID_REPLICA_ASSIGNMENT otherwise), with the
//! partition count and replication factor left at -1 (INVALID_REQUEST
//! otherwise, as Kafka answers). v7+ answers the new topic's id.

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use kafka_protocol::protocol::StrBytes;

use super::super::{errors, Ctx};

pub(super) async fn handle(
    ctx: &Ctx,
    req: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let mut resp = CreateTopicsResponse::default();
    for t in req.topics {
        let mut r = CreatableTopicResult::default();
        let name = t.name.0.as_str().to_owned();
        let outcome = if !ctx.with_subject(|s| s.create_topic(&name)) {
            Err((
                errors::TOPIC_AUTHORIZATION_FAILED,
                format!("not authorized to create topic {name:?}"),
            ))
        } else if let Err(e) = check_assignments(ctx.node_id, &t) {
            // Before the replication factor, as Kafka checks them.
            Err(e)
        } else if t.replication_factor != -1 && t.replication_factor != 1 {
            Err((
                errors::INVALID_REPLICATION_FACTOR,
                format!(
                    "replication factor {}: this broker keeps 1 copy",
                    t.replication_factor
                ),
            ))
        } else {
            let partitions = if t.assignments.is_empty() {
                t.num_partitions
            } else {
                i32::try_from(t.assignments.len()).unwrap_or(i32::MAX)
            };
            let configs: Vec<(String, Option<String>)> = t
                .configs
                .iter()
                .map(|c| {
                    (
                        c.name.as_str().to_owned(),
                        c.value.as_ref().map(|v| v.as_str().to_owned()),
                    )
                })
                .collect();
            ctx.backend
                .create_topic(&name, partitions, &configs, req.validate_only)
                .await
        };
        match outcome {
            Ok(info) => {
                // v7+ carries it (all zero for validate_only: nothing was created).
                r.topic_id = info.id;
                if version >= 5 {
                    r.num_partitions = info.partitions;
                    r.replication_factor = 1;
                    r.configs = Some(
                        info.configs
                            .into_iter()
                            .map(|c| {
                                let mut e = CreatableTopicConfigs::default();
                                e.name = StrBytes::from_static_str(c.name);
                                e.value = Some(StrBytes::from_string(c.value));
                                e.read_only = false;
                                e.config_source = c.source.code();
                                e.is_sensitive = false;
                                e
                            })
                            .collect(),
                    );
                }
            }
            Err((code, message)) => {
                tracing::debug!(topic = %name, code, %message, "kafka CreateTopics refused");
                r.error_code = code;
                if version >= 1 {
                    r.error_message = Some(StrBytes::from_string(message));
                }
                if version >= 5 {
                    r.num_partitions = -1;
                    r.replication_factor = -1;
                }
            }
        }
        r.name = t.name;
        resp.topics.push(r);
    }
    resp
}

/// A manual assignment's checks (none when there is none).
fn check_assignments(node_id: i32, t: &CreatableTopic) -> Result<(), (i16, String)> {
    if t.assignments.is_empty() {
        return Ok(());
    }
    if t.num_partitions != -1 || t.replication_factor != -1 {
        return Err((
            errors::INVALID_REQUEST,
            "a replica assignment goes with a partition count and replication factor of -1"
                .to_owned(),
        ));
    }
    let mut indexes: Vec<i32> = t.assignments.iter().map(|a| a.partition_index).collect();
    indexes.sort_unstable();
    if let Some((got, want)) = indexes.iter().zip(0..).find(|(i, want)| **i != *want) {
        return Err((
            errors::INVALID_REPLICA_ASSIGNMENT,
            format!(
                "partition {got} where {want} was due: an assignment names partitions 0 to n-1, once each"
            ),
        ));
    }
    for a in &t.assignments {
        let ids: Vec<i32> = a.broker_ids.iter().map(|b| b.0).collect();
        if ids != [node_id] {
            return Err((
                errors::INVALID_REPLICA_ASSIGNMENT,
                format!(
                    "partition {} on {ids:?}: this cluster is one broker (node id {node_id}), each partition's replicas must be [{node_id}]",
                    a.partition_index
                ),
            ));
        }
    }
    Ok(())
}

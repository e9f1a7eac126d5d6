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

use uuid::Uuid;

use super::super::map::TopicInfo;
use super::super::{errors, Ctx};
use crate::config::TopicConfig;

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
            create(ctx, &name, partitions, &configs, req.validate_only).await
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

/// Creates a topic; `partitions` -1 takes the broker default; `configs`
/// by Kafka's names (a null value is refused). With `validate_only` only
/// checks, and the answer has no id (all zero: Kafka's controller makes
/// one up).
///
/// # Errors
/// A Kafka error code and a message.
async fn create(
    ctx: &Ctx,
    name: &str,
    partitions: i32,
    configs: &[(String, Option<String>)],
    validate_only: bool,
) -> Result<TopicInfo, (i16, String)> {
    let defaults = ctx.engine.records().default_topic();
    let mut tc: TopicConfig = defaults.for_new_topic();
    if partitions != -1 {
        match u32::try_from(partitions) {
            Ok(p) if p >= 1 => tc.partitions = p,
            _ => {
                return Err((
                    errors::INVALID_PARTITIONS,
                    format!("{partitions} partitions: at least 1"),
                ))
            }
        }
    }
    for (k, v) in configs {
        let Some(v) = v else {
            return Err((
                errors::INVALID_CONFIG,
                format!("topic config {k} has a null value"),
            ));
        };
        tc.set_named(k, v)
            .map_err(|e| (errors::INVALID_CONFIG, e.to_string()))?;
    }
    if let Err(e) = tc.check() {
        let code = if e.starts_with("partitions") {
            errors::INVALID_PARTITIONS
        } else {
            errors::INVALID_CONFIG
        };
        return Err((code, e));
    }
    if validate_only {
        if !crate::config::valid_name(name) {
            return Err((
                errors::INVALID_TOPIC_EXCEPTION,
                format!("topic name {name:?}"),
            ));
        }
        if ctx.engine.records().topic(name).is_some() {
            return Err((errors::TOPIC_ALREADY_EXISTS, name.to_owned()));
        }
        return Ok(TopicInfo::from_config(name, Uuid::nil(), &tc, &defaults));
    }
    match ctx.engine.records().create_topic_async(name, tc).await {
        Ok(t) => Ok(TopicInfo::of(&t, &ctx.engine.records().default_topic())),
        Err(e) => Err(errors::coded(&e)),
    }
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

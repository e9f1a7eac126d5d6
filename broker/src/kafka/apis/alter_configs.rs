//! AlterConfigs and IncrementalAlterConfigs of topics by Kafka's names,
//! all or nothing per topic: `topic.conf` is rewritten atomically and the
//! partitions take the change (retention, cleanup policy, segment size) at
//! once; validate_only checks and stores nothing.
//!
//! IncrementalAlterConfigs' operations: SET (0), DELETE (1: back to the
//! broker's default), APPEND (2) and SUBTRACT (3) for list configs
//! (`cleanup.policy`); a name given twice is INVALID_REQUEST. AlterConfigs
//! replaces the topic's whole set: every config it does not name goes back
//! to the broker's default, and a name given twice takes its last value, as
//! Kafka's AlterConfigs did (tools read the configs back and append the
//! change: librdkafka's test suite).
//! A broker resource is refused (INVALID_REQUEST): the broker's defaults
//! for topics are set at start (`flume-cli broker --topic-config`).
//!
//! IncrementalAlterConfigs of a GROUP resource (type 32) SETs or DELETEs a
//! share group's configs (`share.record.lock.duration.ms`,
//! `share.delivery.count.limit`, `share.auto.offset.reset`), kept at once.
//!
//! Authorization: ALTER on the topic (Flume's ACLs have no separate
//! ALTER_CONFIGS operation), ALTER on the cluster for a broker, ALTER on
//! the group.

use std::collections::BTreeSet;

use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::super::{errors, Ctx};
use super::describe_configs::{BROKER, GROUP, TOPIC};
use crate::config::named::TOPIC_CONFIGS;
use crate::domain::ConfigOp;

/// The outcome of one resource: `(error code, message)`.
type Outcome = (i16, Option<String>);

pub(super) async fn incremental(
    ctx: &Ctx,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
    let mut resp = IncrementalAlterConfigsResponse::default();
    for res in req.resources {
        let ops: Result<Vec<ConfigOp>, Outcome> = res
            .configs
            .iter()
            .map(|c| {
                let name = c.name.as_str().to_owned();
                let value = c.value.as_ref().map(|v| v.as_str().to_owned());
                match (c.config_operation, value) {
                    (1, _) => Ok(ConfigOp::Delete(name)),
                    (0 | 2 | 3, None) => Err((
                        errors::INVALID_CONFIG,
                        Some(format!("topic config {name} has a null value")),
                    )),
                    (0, Some(v)) => Ok(ConfigOp::Set(name, v)),
                    (2, Some(v)) => Ok(ConfigOp::Append(name, v)),
                    (3, Some(v)) => Ok(ConfigOp::Subtract(name, v)),
                    (op, _) => Err((
                        errors::INVALID_REQUEST,
                        Some(format!("config operation {op} for {name}: 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT")),
                    )),
                }
            })
            .collect();
        // A name given twice is refused, as Kafka does here.
        let mut seen = BTreeSet::new();
        let ops = match res.configs.iter().find(|c| !seen.insert(c.name.as_str())) {
            Some(dup) => Err((
                errors::INVALID_REQUEST,
                Some(format!("config {} is named twice", dup.name.as_str())),
            )),
            None => ops,
        };
        let (code, message) = if res.resource_type == GROUP {
            alter_group(ctx, res.resource_name.as_str(), ops, req.validate_only).await
        } else {
            alter_one(
                ctx,
                res.resource_type,
                res.resource_name.as_str(),
                ops,
                req.validate_only,
            )
            .await
        };
        let mut r = AlterConfigsResourceResponse::default();
        r.error_code = code;
        r.error_message = message.map(StrBytes::from_string);
        r.resource_type = res.resource_type;
        r.resource_name = res.resource_name;
        resp.responses.push(r);
    }
    resp
}

/// A share group's configs (IncrementalAlterConfigs only).
async fn alter_group(
    ctx: &Ctx,
    group: &str,
    ops: Result<Vec<ConfigOp>, Outcome>,
    validate_only: bool,
) -> Outcome {
    if !ctx.with_subject(|s| s.alter_group_configs(group)) {
        return (
            errors::GROUP_AUTHORIZATION_FAILED,
            Some(format!(
                "not authorized to alter the configs of group {group:?}"
            )),
        );
    }
    let ops = match ops {
        Ok(ops) => ops,
        Err(e) => return e,
    };
    match ctx
        .engine
        .shares()
        .alter_share_group_configs(group, &ops, validate_only)
        .await
    {
        Ok(()) => (errors::NONE, None),
        Err(crate::engine::ShareError::Group(e)) => (errors::INVALID_CONFIG, Some(e.to_string())),
        Err(e) => (errors::share_code(&e), Some(e.to_string())),
    }
}

pub(super) async fn replace(ctx: &Ctx, req: AlterConfigsRequest) -> AlterConfigsResponse {
    use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
    let mut resp = AlterConfigsResponse::default();
    for res in req.resources {
        // Every config back to the default, then the ones given (a null value: the default).
        let mut ops: Vec<ConfigOp> = TOPIC_CONFIGS
            .iter()
            .map(|d| ConfigOp::Delete(d.name.to_owned()))
            .collect();
        ops.extend(res.configs.iter().filter_map(|c| {
            c.value
                .as_ref()
                .map(|v| ConfigOp::Set(c.name.as_str().to_owned(), v.as_str().to_owned()))
        }));
        // A name given with a null value must still be a topic config.
        let unknown = res.configs.iter().find(|c| {
            c.value.is_none() && crate::config::named::topic_config(c.name.as_str()).is_none()
        });
        let ops = match unknown {
            Some(c) => Err((
                errors::INVALID_CONFIG,
                Some(format!("unknown topic config {:?}", c.name.as_str())),
            )),
            None => Ok(ops),
        };
        // The last value of a name wins (the ops apply in order).
        let (code, message) = alter_one(
            ctx,
            res.resource_type,
            res.resource_name.as_str(),
            ops,
            req.validate_only,
        )
        .await;
        let mut r = AlterConfigsResourceResponse::default();
        r.error_code = code;
        r.error_message = message.map(StrBytes::from_string);
        r.resource_type = res.resource_type;
        r.resource_name = res.resource_name;
        resp.responses.push(r);
    }
    resp
}

/// Authorizes and applies one resource's changes.
async fn alter_one(
    ctx: &Ctx,
    resource_type: i8,
    name: &str,
    ops: Result<Vec<ConfigOp>, Outcome>,
    validate_only: bool,
) -> Outcome {
    match resource_type {
        TOPIC if !ctx.with_subject(|s| s.alter_topic_configs(name)) => (
            errors::TOPIC_AUTHORIZATION_FAILED,
            Some(format!("not authorized to alter the configs of topic {name:?}")),
        ),
        BROKER if !ctx.with_subject(|s| s.alter_broker_configs()) => (
            errors::CLUSTER_AUTHORIZATION_FAILED,
            Some("not authorized to alter the broker's configs".to_owned()),
        ),
        BROKER => (
            errors::INVALID_REQUEST,
            Some("broker configs are set at start (flume-cli broker --topic-config NAME=VALUE, or the configuration file) and cannot be altered while it runs".to_owned()),
        ),
        TOPIC => {
            let ops = match ops {
                Ok(ops) => ops,
                Err(e) => return e,
            };
            match ctx
                .engine
                .admin().alter_topic_configs(name, &ops, validate_only)
                .await
                .map(|_| ())
                .map_err(|e| (errors::kafka_code(e.code()), errors::detail(&e)))
            {
                Ok(()) => (errors::NONE, None),
                Err((code, message)) => {
                    tracing::debug!(topic = name, code, %message, "kafka alter configs refused");
                    (code, Some(message))
                }
            }
        }
        other => (
            errors::INVALID_REQUEST,
            Some(format!(
                "resource type {other}: only topics (2), and groups (32) with IncrementalAlterConfigs, are altered"
            )),
        ),
    }
}

//! TOPIC_CONFIGS: a topic's configs by Kafka's names. Describe needs
//! DESCRIBE on the topic, alter ALTER on it, create what CREATE_TOPIC needs.
//! The outcome and a message naming the config and value travel in the
//! body (the top-level code is for a payload that does not decode or a
//! principal not allowed).

use std::sync::Arc;

use flume_protocol::{
    ErrorCode, TopicConfigValue, TopicConfigsRequest, TopicConfigsResponse, TOPIC_CONFIGS_ALTER,
    TOPIC_CONFIGS_CREATE, TOPIC_CONFIGS_DESCRIBE,
};
use futures::FutureExt;

use super::super::InFlight;
use super::{respond, Cx};
use crate::config::named::describe_topic;
use crate::config::TopicConfig;
use crate::domain::ConfigOp;
use crate::engine::Engine;
use crate::error::BrokerError;

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    let id = cx.id;
    let req = match cx.decode::<TopicConfigsRequest>(payload) {
        Ok(req) => req,
        Err(f) => return f,
    };
    let allowed = match req.op {
        TOPIC_CONFIGS_DESCRIBE => cx.who.describe_topic_configs(&req.name),
        TOPIC_CONFIGS_ALTER => cx.who.alter_topic_configs(&req.name),
        TOPIC_CONFIGS_CREATE => cx.who.create_topic(&req.name),
        _ => {
            return cx.ready(Ok(failed(
                ErrorCode::InvalidRequest,
                format!("op {}: 0 describe, 1 alter, 2 create", req.op),
            )))
        }
    };
    if !allowed {
        return cx.denied();
    }
    let engine = Arc::clone(cx.engine);
    async move {
        let resp = match answer(&engine, req).await {
            Ok(resp) => resp,
            Err(e) => failed(e.code(), e.to_string()),
        };
        respond(id, Ok(&resp))
    }
    .boxed()
}

fn failed(error: ErrorCode, message: String) -> TopicConfigsResponse {
    TopicConfigsResponse {
        error,
        message,
        partitions: -1,
        configs: Vec::new(),
    }
}

async fn answer(
    engine: &Arc<Engine>,
    req: TopicConfigsRequest,
) -> Result<TopicConfigsResponse, BrokerError> {
    let validate_only = req.validate_only != 0;
    let tc = match req.op {
        TOPIC_CONFIGS_ALTER => {
            let ops: Vec<ConfigOp> = req
                .set
                .into_iter()
                .map(|c| ConfigOp::Set(c.name, c.value))
                .chain(req.delete.into_iter().map(ConfigOp::Delete))
                .collect();
            engine
                .admin()
                .alter_topic_configs(&req.name, &ops, validate_only)
                .await?
        }
        TOPIC_CONFIGS_CREATE => {
            let mut tc = engine.records().default_topic().for_new_topic();
            if req.partitions != -1 {
                tc.partitions = u32::try_from(req.partitions).map_err(|_| {
                    BrokerError::code_for(
                        ErrorCode::InvalidRequest,
                        format!(
                            "partitions is {}, it must be -1 (broker default) or 1..",
                            req.partitions
                        ),
                    )
                })?;
            }
            for c in &req.set {
                tc.set_named(&c.name, &c.value)?;
            }
            tc.check().map_err(|e| {
                let code = if e.starts_with("partitions") {
                    ErrorCode::InvalidRequest
                } else {
                    ErrorCode::InvalidConfig
                };
                BrokerError::code_for(code, e)
            })?;
            if validate_only {
                if engine.records().topic(&req.name).is_some() {
                    return Err(BrokerError::code_for(
                        ErrorCode::TopicAlreadyExists,
                        req.name,
                    ));
                }
                if !crate::config::valid_name(&req.name) {
                    return Err(BrokerError::code_for(ErrorCode::InvalidName, req.name));
                }
                tc
            } else {
                engine
                    .records()
                    .create_topic_async(&req.name, tc)
                    .await?
                    .config
                    .clone()
            }
        }
        _ => engine
            .admin()
            .topic_config(&req.name)
            .ok_or_else(|| BrokerError::code_for(ErrorCode::UnknownTopic, req.name.clone()))?,
    };
    Ok(described(&tc, &engine.records().default_topic()))
}

/// Every config of a topic on the wire.
pub(crate) fn described(tc: &TopicConfig, defaults: &TopicConfig) -> TopicConfigsResponse {
    TopicConfigsResponse {
        error: ErrorCode::None,
        message: String::new(),
        partitions: i32::try_from(tc.partitions).unwrap_or(i32::MAX),
        configs: describe_topic(tc, defaults)
            .into_iter()
            .map(|d| TopicConfigValue {
                name: d.name.to_owned(),
                value: d.value,
                source: d.source.code(),
            })
            .collect(),
    }
}

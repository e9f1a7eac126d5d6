//! CreateTopics: partitions (or the broker default), replication factor 1
//! (or -1). Manual assignments and topic configs are refused: Flume's topic
//! settings are set with `flume-cli topics create`.

use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use kafka_protocol::protocol::StrBytes;

use super::super::{errors, Ctx};

/// INVALID_CONFIG.
const INVALID_CONFIG: i16 = 40;

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
        } else if t.replication_factor != -1 && t.replication_factor != 1 {
            Err((
                errors::INVALID_REPLICATION_FACTOR,
                format!(
                    "replication factor {}: this broker keeps 1 copy",
                    t.replication_factor
                ),
            ))
        } else if !t.assignments.is_empty() {
            Err((
                errors::INVALID_REQUEST,
                "manual replica assignment is not supported".to_owned(),
            ))
        } else if let Some(c) = t.configs.first() {
            Err((
                INVALID_CONFIG,
                format!(
                    "topic config {} is not supported through Kafka; use flume-cli topics create",
                    c.name.as_str()
                ),
            ))
        } else {
            ctx.backend
                .create_topic(&name, t.num_partitions, req.validate_only)
                .await
        };
        match outcome {
            Ok(info) => {
                if version >= 5 {
                    r.num_partitions = info.partitions;
                    r.replication_factor = 1;
                    r.configs = Some(Vec::new());
                }
            }
            Err((code, message)) => {
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

//! DeleteTopics (v1-6): each topic goes through the engine's delete (its
//! files and committed offsets; see `docs/storage.md`). v1-5 name topics;
//! v6 names each by name or by id (KIP-516), answered with both: a name
//! with an id, or neither, is INVALID_REQUEST; an id no topic has
//! UNKNOWN_TOPIC_ID. DELETE on the topic (TOPIC_AUTHORIZATION_FAILED; for
//! a topic named by id the name is answered only to whom may describe it,
//! as Kafka does).

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use flume_protocol::ErrorCode;

use super::super::{errors, map, Ctx};

pub(super) async fn handle(
    ctx: &Ctx,
    req: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    // v1-5 name topics in `topic_names`, v6 in `topics` (a name or an id).
    let wanted: Vec<(Option<TopicName>, Uuid)> = if version >= 6 {
        req.topics
            .into_iter()
            .map(|t| (t.name, t.topic_id))
            .collect()
    } else {
        req.topic_names
            .into_iter()
            .map(|n| (Some(n), Uuid::nil()))
            .collect()
    };
    let mut resp = DeleteTopicsResponse::default();
    for (name, topic_id) in wanted {
        let mut r = DeletableTopicResult::default();
        let (answered_name, answered_id, outcome) = match (name, topic_id.is_nil()) {
            (Some(n), true) => {
                let outcome = if ctx.with_subject(|s| s.delete_topic(n.0.as_str())) {
                    ctx.engine
                        .admin()
                        .delete_topic_returning_id(n.0.as_str())
                        .await
                        .map(map::kafka_id)
                        .map_err(|e| errors::coded(&e))
                } else {
                    Err((
                        errors::TOPIC_AUTHORIZATION_FAILED,
                        format!("not authorized to delete topic {:?}", n.0.as_str()),
                    ))
                };
                let id = *outcome.as_ref().unwrap_or(&Uuid::nil());
                (Some(n), id, outcome.map(|_| ()))
            }
            (Some(n), false) => (
                Some(n),
                topic_id,
                Err((
                    errors::INVALID_REQUEST,
                    "a topic is named by its name or by its id, not both".to_owned(),
                )),
            ),
            (None, true) => (
                None,
                topic_id,
                Err((
                    errors::INVALID_REQUEST,
                    "neither a topic name nor an id".to_owned(),
                )),
            ),
            (None, false) => {
                let (name, outcome) = by_id(ctx, topic_id).await;
                (
                    name.map(|n| TopicName(StrBytes::from_string(n))),
                    topic_id,
                    outcome,
                )
            }
        };
        r.name = answered_name;
        r.topic_id = answered_id;
        if let Err((code, message)) = outcome {
            r.error_code = code;
            if version >= 5 {
                r.error_message = Some(StrBytes::from_string(message));
            }
        }
        resp.responses.push(r);
    }
    resp
}

/// Deletes the topic with this id: the name to answer (none when the
/// principal may not describe it, nor for an unknown id) and the outcome.
async fn by_id(ctx: &Ctx, id: Uuid) -> (Option<String>, Result<(), (i16, String)>) {
    let Some(topic) = ctx.engine.records().topic_by_id(map::topic_id(id)) else {
        return (
            None,
            Err((
                errors::UNKNOWN_TOPIC_ID,
                format!("no topic has the id {id}"),
            )),
        );
    };
    let name = topic.name.clone();
    if !ctx.with_subject(|s| s.delete_topic(&name)) {
        let shown = ctx.with_subject(|s| s.lists_topic(&name)).then_some(name);
        return (
            shown,
            Err((
                errors::TOPIC_AUTHORIZATION_FAILED,
                format!("not authorized to delete the topic with id {id}"),
            )),
        );
    }
    // By id again: a topic of that name created since has another id and stays.
    match ctx
        .engine
        .admin()
        .delete_topic_by_id(map::topic_id(id))
        .await
    {
        Ok(deleted) => (Some(deleted), Ok(())),
        Err(e) if e.code() == ErrorCode::UnknownTopic => (
            Some(name),
            Err((
                errors::UNKNOWN_TOPIC_ID,
                format!("no topic has the id {}", map::topic_id(id)),
            )),
        ),
        Err(e) => (Some(name), Err(errors::coded(&e))),
    }
}

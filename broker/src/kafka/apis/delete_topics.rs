//! DeleteTopics (v1-6): each topic by name goes through the engine's delete
//! (its files and committed offsets; see `docs/storage.md`). Flume has no
//! topic ids, so a v6 entry naming only an id gets UNKNOWN_TOPIC_ID.

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse};
use kafka_protocol::protocol::StrBytes;

use super::super::{errors, Ctx};
use crate::security::acl::{Operation, Resource};

pub(super) async fn handle(
    ctx: &Ctx,
    req: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    // v1-5 name topics in `topic_names`, v6 in `topics` (a name or an id).
    let wanted: Vec<(Option<_>, _)> = if version >= 6 {
        req.topics
            .into_iter()
            .map(|t| (t.name, t.topic_id))
            .collect()
    } else {
        req.topic_names
            .into_iter()
            .map(|n| (Some(n), Default::default()))
            .collect()
    };
    let mut resp = DeleteTopicsResponse::default();
    for (name, topic_id) in wanted {
        let mut r = DeletableTopicResult::default();
        r.topic_id = topic_id;
        let outcome = match &name {
            Some(n) if !ctx.may(Operation::Delete, Resource::topic(n.0.as_str())) => Err((
                errors::TOPIC_AUTHORIZATION_FAILED,
                format!("not authorized to delete topic {:?}", n.0.as_str()),
            )),
            Some(n) => ctx.backend.delete_topic(n.0.as_str()).await,
            None => Err((
                errors::UNKNOWN_TOPIC_ID,
                "topics are deleted by name on this broker (it has no topic ids)".to_owned(),
            )),
        };
        if let Err((code, message)) = outcome {
            r.error_code = code;
            if version >= 5 {
                r.error_message = Some(StrBytes::from_string(message));
            }
        }
        r.name = name;
        resp.responses.push(r);
    }
    resp
}

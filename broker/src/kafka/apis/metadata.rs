//! Metadata: this one broker leads every partition; topics asked for by
//! name are created when the broker auto-creates and the client allows it;
//! each topic's id (v10+), and topics asked for by id (v12+).
//! Authorized operations (v8+) are computed when asked for
//! ([`Ctx::authorized_operations`]).

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::super::map::{self, TopicInfo};
use super::super::{errors, Ctx};
use crate::security::acl::Resource;

fn topic(
    ctx: &Ctx,
    t: Result<TopicInfo, (String, i16)>,
    version: i16,
    with_operations: bool,
) -> MetadataResponseTopic {
    let mut out = MetadataResponseTopic::default();
    // Kafka's "not asked for" value.
    out.topic_authorized_operations = i32::MIN;
    match t {
        Ok(t) => {
            if with_operations {
                out.topic_authorized_operations =
                    ctx.authorized_operations(Resource::topic(&t.name));
            }
            out.name = Some(TopicName(StrBytes::from_string(t.name)));
            out.topic_id = t.id;
            out.partitions = (0..t.partitions)
                .map(|p| {
                    let mut mp = MetadataResponsePartition::default();
                    mp.partition_index = p;
                    mp.leader_id = BrokerId(ctx.node_id);
                    if version >= 7 {
                        mp.leader_epoch = 0;
                    }
                    mp.replica_nodes = vec![BrokerId(ctx.node_id)];
                    mp.isr_nodes = vec![BrokerId(ctx.node_id)];
                    mp
                })
                .collect();
        }
        Err((name, code)) => {
            out.name = Some(TopicName(StrBytes::from_string(name)));
            out.error_code = code;
        }
    }
    out
}

pub(super) async fn handle(ctx: &Ctx, req: MetadataRequest, version: i16) -> MetadataResponse {
    let mut resp = MetadataResponse::default();
    let mut b = MetadataResponseBroker::default();
    b.node_id = BrokerId(ctx.node_id);
    b.host = StrBytes::from_string(ctx.advertised_host.clone());
    b.port = i32::from(ctx.advertised_port);
    resp.brokers = vec![b];
    if version >= 1 {
        resp.controller_id = BrokerId(ctx.node_id);
    }
    if version >= 2 {
        resp.cluster_id = Some(StrBytes::from_static_str(super::super::CLUSTER_ID));
    }
    resp.cluster_authorized_operations =
        if (8..=10).contains(&version) && req.include_cluster_authorized_operations {
            ctx.authorized_operations(Resource::cluster())
        } else {
            i32::MIN
        };
    let with_operations = version >= 8 && req.include_topic_authorized_operations;
    // v0: an empty list means every topic; v1+: null means every topic.
    // v12+ may name a topic by its id alone (a null name).
    let names: Option<Vec<Result<String, Uuid>>> = match req.topics {
        None => None,
        Some(ts) if ts.is_empty() && version == 0 => None,
        Some(ts) => Some(
            ts.into_iter()
                .map(|t| t.name.map(|n| n.0.as_str().to_owned()).ok_or(t.topic_id))
                .collect(),
        ),
    };
    let allow_create = version < 4 || req.allow_auto_topic_creation;
    resp.topics = match names {
        None => ctx
            .engine
            .records()
            .topics()
            .iter()
            .map(|t| TopicInfo::of(t, &ctx.engine.records().default_topic()))
            // Only what the principal may describe: the rest is not there for it.
            .filter(|t| ctx.with_subject(|s| s.lists_topic(&t.name)))
            .map(|t| topic(ctx, Ok(t), version, with_operations))
            .collect(),
        Some(names) => {
            let mut out = Vec::with_capacity(names.len().min(1024));
            for name in names {
                let name = match name {
                    Ok(name) => name,
                    Err(id) => {
                        out.push(by_id(ctx, id, version, with_operations));
                        continue;
                    }
                };
                if !ctx.with_subject(|s| s.describe_topic(&name)) {
                    out.push(topic(
                        ctx,
                        Err((name, errors::TOPIC_AUTHORIZATION_FAILED)),
                        version,
                        false,
                    ));
                    continue;
                }
                let found = match ctx.engine.records().topic(&name) {
                    Some(t) => Ok(TopicInfo::of(&t, &ctx.engine.records().default_topic())),
                    None if allow_create
                        && ctx.engine.config().auto_create_topics
                        && ctx.with_subject(|s| s.create_topic(&name)) =>
                    {
                        ctx.engine
                            .records()
                            .auto_create(&name)
                            .await
                            .map(|t| TopicInfo::of(&t, &ctx.engine.records().default_topic()))
                            .map_err(|e| (name.clone(), errors::kafka_code(e.code())))
                    }
                    None => Err((name.clone(), errors::UNKNOWN_TOPIC_OR_PARTITION)),
                };
                out.push(topic(ctx, found, version, with_operations));
            }
            out
        }
    };
    resp
}

/// A topic asked for by its id (a null name, v12+): its metadata, or, as
/// Kafka answers (ids are not secret), UNKNOWN_TOPIC_ID with the id for an
/// id no topic has and TOPIC_AUTHORIZATION_FAILED with the id and no name
/// without DESCRIBE on the topic.
fn by_id(ctx: &Ctx, id: Uuid, version: i16, with_operations: bool) -> MetadataResponseTopic {
    let found = ctx
        .engine
        .records()
        .topic_by_id(map::topic_id(id))
        .map(|t| TopicInfo::of(&t, &ctx.engine.records().default_topic()));
    let code = match &found {
        None => errors::UNKNOWN_TOPIC_ID,
        Some(t) if !ctx.with_subject(|s| s.describe_topic(&t.name)) => {
            errors::TOPIC_AUTHORIZATION_FAILED
        }
        Some(_) => errors::NONE,
    };
    match found {
        Some(t) if code == errors::NONE => topic(ctx, Ok(t), version, with_operations),
        _ => {
            let mut t = MetadataResponseTopic::default();
            t.topic_authorized_operations = i32::MIN;
            t.error_code = code;
            t.topic_id = id;
            // Null from v12 (Kafka's answer); an empty name before, which
            // cannot carry a null.
            if version >= 12 {
                t.name = None;
            }
            t
        }
    }
}

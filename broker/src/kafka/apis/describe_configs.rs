//! DescribeConfigs: every config of a topic by Kafka's name with its value
//! and source (the topic's own, the broker's default set at start, or the
//! built-in default), its synonyms when asked, its type in v3+; for a broker
//! resource, the broker's settings with a Kafka equivalent (`listeners`,
//! `log.dirs`, `group.min.session.timeout.ms`, ...: `config::broker_named`)
//! and its defaults for topics (`log.retention.ms`, ...) by the broker's
//! names, read-only: they are set at start.
//!
//! A GROUP resource (type 32) answers a share group's configs (KIP-932:
//! lock duration, delivery-count limit, `share.auto.offset.reset`), the
//! group's own (source GROUP_CONFIG) or the broker's (DEFAULT_CONFIG).
//!
//! Authorization: DESCRIBE on the topic, DESCRIBE on the cluster for a
//! broker, DESCRIBE on the group (Flume's ACLs have no separate
//! DESCRIBE_CONFIGS operation).

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;

use super::super::map::TopicInfo;
use super::super::{errors, Ctx};
use crate::config::named::Described;

/// Resource type TOPIC.
pub(super) const TOPIC: i8 = 2;
/// Resource type BROKER.
pub(super) const BROKER: i8 = 4;
/// Resource type GROUP (KIP-848/932 group configs).
pub(super) const GROUP: i8 = 32;
/// Kafka's config source of a group's own config.
const SOURCE_GROUP_CONFIG: i8 = 8;
/// Kafka's config source of a default.
const SOURCE_DEFAULT_CONFIG: i8 = 5;

pub(super) fn handle(
    ctx: &Ctx,
    req: DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let mut resp = DescribeConfigsResponse::default();
    for res in req.resources {
        let mut r = DescribeConfigsResult::default();
        r.resource_type = res.resource_type;
        if res.resource_type == GROUP {
            let group = res.resource_name.as_str();
            if ctx.with_subject(|s| s.describe_group_configs(group)) {
                r.configs = ctx
                    .engine
                    .shares()
                    .share_group_configs(group)
                    .into_iter()
                    .filter(|(name, ..)| {
                        res.configuration_keys
                            .as_ref()
                            .is_none_or(|ks| ks.iter().any(|x| x.as_str() == *name))
                    })
                    .map(|(name, value, own)| {
                        let mut e = DescribeConfigsResourceResult::default();
                        e.name = StrBytes::from_static_str(name);
                        e.value = Some(StrBytes::from_string(value));
                        e.config_source = if own {
                            SOURCE_GROUP_CONFIG
                        } else {
                            SOURCE_DEFAULT_CONFIG
                        };
                        if version >= 3 {
                            // STRING (2) for the reset, INT (3) for the numbers.
                            e.config_type = if name.ends_with("reset") { 2 } else { 3 };
                        }
                        e
                    })
                    .collect();
            } else {
                r.error_code = errors::GROUP_AUTHORIZATION_FAILED;
                r.error_message = Some(StrBytes::from_static_str(
                    "not authorized to describe the group",
                ));
            }
            r.resource_name = res.resource_name;
            resp.results.push(r);
            continue;
        }
        let configs = match res.resource_type {
            TOPIC
                if !ctx.with_subject(|s| s.describe_topic_configs(res.resource_name.as_str())) =>
            {
                Err((
                    errors::TOPIC_AUTHORIZATION_FAILED,
                    "not authorized to describe the topic".to_owned(),
                ))
            }
            BROKER if !ctx.with_subject(|s| s.describe_broker_configs()) => Err((
                errors::CLUSTER_AUTHORIZATION_FAILED,
                "not authorized to describe the cluster".to_owned(),
            )),
            TOPIC => match ctx.engine.records().topic(res.resource_name.as_str()) {
                Some(t) => Ok((
                    TopicInfo::of(&t, &ctx.engine.records().default_topic()).configs,
                    false,
                )),
                None => Err((
                    errors::UNKNOWN_TOPIC_OR_PARTITION,
                    format!("no topic {:?}", res.resource_name.as_str()),
                )),
            },
            BROKER => Ok((
                crate::config::broker_named::describe_broker_all(
                    ctx.engine.config(),
                    &ctx.engine.records().default_topic(),
                    Some(&ctx.listeners),
                ),
                true,
            )),
            _ => Err((
                errors::INVALID_REQUEST,
                "only topic, broker and group resources are described".to_owned(),
            )),
        };
        match configs {
            Ok((configs, read_only)) => {
                r.configs = configs
                    .into_iter()
                    .filter(|c| {
                        res.configuration_keys
                            .as_ref()
                            .is_none_or(|ks| ks.iter().any(|x| x.as_str() == c.name))
                    })
                    .map(|c| entry(c, read_only, req.include_synonyms, version))
                    .collect();
            }
            Err((code, message)) => {
                r.error_code = code;
                r.error_message = Some(StrBytes::from_string(message));
            }
        }
        r.resource_name = res.resource_name;
        resp.results.push(r);
    }
    resp
}

fn entry(
    c: Described,
    read_only: bool,
    include_synonyms: bool,
    version: i16,
) -> DescribeConfigsResourceResult {
    let mut e = DescribeConfigsResourceResult::default();
    e.name = StrBytes::from_static_str(c.name);
    e.value = Some(StrBytes::from_string(c.value));
    e.read_only = read_only;
    e.config_source = c.source.code();
    e.is_sensitive = false;
    if include_synonyms {
        e.synonyms = c
            .synonyms
            .into_iter()
            .map(|s| {
                let mut y = DescribeConfigsSynonym::default();
                y.name = StrBytes::from_string(s.name);
                y.value = Some(StrBytes::from_string(s.value));
                y.source = s.source.code();
                y
            })
            .collect();
    }
    if version >= 3 {
        e.config_type = c.def.kind as i8;
    }
    e.documentation = None;
    e
}

//! DescribeConfigs: a topic's retention and segment settings as Kafka names
//! them (read-only: they are changed through Flume); a broker resource has
//! no configs listed.

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;

use super::super::{errors, Ctx};
use crate::security::acl::{Operation, Resource};

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
/// Config source DYNAMIC_TOPIC_CONFIG.
const SOURCE_TOPIC: i8 = 1;

pub(super) fn handle(
    ctx: &Ctx,
    req: DescribeConfigsRequest,
    _version: i16,
) -> DescribeConfigsResponse {
    let mut resp = DescribeConfigsResponse::default();
    for res in req.resources {
        let mut r = DescribeConfigsResult::default();
        r.resource_type = res.resource_type;
        match res.resource_type {
            TOPIC
                if !ctx.may(
                    Operation::Describe,
                    Resource::topic(res.resource_name.as_str()),
                ) =>
            {
                r.error_code = errors::TOPIC_AUTHORIZATION_FAILED;
            }
            BROKER if !ctx.may(Operation::Describe, Resource::cluster()) => {
                r.error_code = errors::CLUSTER_AUTHORIZATION_FAILED;
            }
            TOPIC => match ctx.backend.topic(res.resource_name.as_str()) {
                Some(t) => {
                    r.configs = t
                        .configs
                        .into_iter()
                        .filter(|(k, _)| {
                            res.configuration_keys
                                .as_ref()
                                .is_none_or(|ks| ks.iter().any(|x| x.as_str() == k))
                        })
                        .map(|(k, v)| {
                            let mut c = DescribeConfigsResourceResult::default();
                            c.name = StrBytes::from_string(k);
                            c.value = Some(StrBytes::from_string(v));
                            c.read_only = true;
                            c.config_source = SOURCE_TOPIC;
                            c
                        })
                        .collect();
                }
                None => r.error_code = errors::UNKNOWN_TOPIC_OR_PARTITION,
            },
            BROKER => {}
            _ => {
                r.error_code = errors::INVALID_REQUEST;
                r.error_message = Some(StrBytes::from_static_str(
                    "only topic and broker resources are described",
                ));
            }
        }
        r.resource_name = res.resource_name;
        resp.results.push(r);
    }
    resp
}

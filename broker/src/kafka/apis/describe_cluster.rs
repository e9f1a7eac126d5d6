//! DescribeCluster: this one broker, the cluster id Metadata gives, the
//! broker as controller, and (when asked) the principal's authorized
//! operations on the cluster. v1's endpoint type: brokers only.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;

use super::super::{errors, Ctx};
use crate::security::acl::Resource;

/// Kafka's endpoint type of brokers (v1; 2 is controllers, which a broker
/// answers MISMATCHED_ENDPOINT_TYPE, as Kafka's do).
const BROKERS: i8 = 1;

pub(super) fn handle(
    ctx: &Ctx,
    req: DescribeClusterRequest,
    version: i16,
) -> DescribeClusterResponse {
    let mut resp = DescribeClusterResponse::default();
    if version >= 1 {
        resp.endpoint_type = BROKERS;
        if req.endpoint_type != BROKERS {
            resp.error_code = errors::MISMATCHED_ENDPOINT_TYPE;
            resp.error_message = Some(StrBytes::from_static_str(
                "this is a broker endpoint: only brokers are described",
            ));
            return resp;
        }
    }
    if !ctx.with_subject(|s| s.describe_cluster()) {
        resp.error_code = errors::CLUSTER_AUTHORIZATION_FAILED;
        return resp;
    }
    resp.cluster_id = StrBytes::from_static_str(super::super::CLUSTER_ID);
    resp.controller_id = BrokerId(ctx.node_id);
    let mut b = DescribeClusterBroker::default();
    b.broker_id = BrokerId(ctx.node_id);
    b.host = StrBytes::from_string(ctx.advertised_host.clone());
    b.port = i32::from(ctx.advertised_port);
    resp.brokers = vec![b];
    resp.cluster_authorized_operations = if req.include_cluster_authorized_operations {
        ctx.authorized_operations(Resource::cluster())
    } else {
        i32::MIN
    };
    resp
}

//! DescribeGroups: each group's state, protocol type and protocol, and its
//! members with client id, host, group instance id (v4+, static members),
//! metadata and assignment. A group the broker
//! knows nothing of is "Dead" (v0-5) or GROUP_ID_NOT_FOUND (v6+), as Kafka
//! answers. Broker-assigned (Flume protocol) groups show protocol type
//! "flume" and their assignor. A consumer-protocol group (KIP-848) is
//! answered as Kafka does: not a classic group, "Dead" and (v6+)
//! GROUP_ID_NOT_FOUND.

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse};
use kafka_protocol::protocol::StrBytes;

use super::super::{errors, Ctx};
use crate::security::acl::Resource;

pub(super) fn handle(
    ctx: &Ctx,
    req: DescribeGroupsRequest,
    version: i16,
) -> DescribeGroupsResponse {
    let mut resp = DescribeGroupsResponse::default();
    resp.groups = req
        .groups
        .into_iter()
        .map(|id| {
            let mut g = DescribedGroup::default();
            let name = id.0.as_str().to_owned();
            g.group_id = id;
            if version >= 3 {
                g.authorized_operations = if req.include_authorized_operations {
                    ctx.authorized_operations(Resource::group(&name))
                } else {
                    // Kafka's "not requested" value.
                    i32::MIN
                };
            }
            if !ctx.with_subject(|s| s.describe_group(&name)) {
                g.error_code = errors::GROUP_AUTHORIZATION_FAILED;
                return g;
            }
            // A consumer-protocol group (KIP-848) is not a classic group:
            // Kafka answers it as not found (ConsumerGroupDescribe describes it).
            let consumer = ctx.engine.groups().is_consumer_group(&name);
            let Some(d) = ctx
                .engine
                .groups()
                .describe_group(&name)
                .filter(|_| !consumer)
            else {
                if version >= 6 {
                    g.error_code = errors::GROUP_ID_NOT_FOUND;
                    g.error_message = Some(StrBytes::from_string(if consumer {
                        format!("group {name:?} is not a classic group")
                    } else {
                        format!("group {name:?} not found")
                    }));
                }
                g.group_state = StrBytes::from_static_str("Dead");
                return g;
            };
            g.group_state = StrBytes::from_static_str(d.phase.as_str());
            g.protocol_type = StrBytes::from_string(d.protocol_type);
            g.protocol_data = StrBytes::from_string(d.protocol);
            g.members = d
                .members
                .into_iter()
                .map(|m| {
                    let mut dm = DescribedGroupMember::default();
                    dm.member_id = StrBytes::from_string(m.member_id);
                    if version >= 4 {
                        dm.group_instance_id = m.group_instance_id.map(StrBytes::from_string);
                    }
                    dm.client_id = StrBytes::from_string(m.client_id);
                    dm.client_host = StrBytes::from_string(m.client_host);
                    dm.member_metadata = m.metadata;
                    dm.member_assignment = m.assignment_bytes;
                    dm
                })
                .collect();
            g
        })
        .collect();
    resp
}

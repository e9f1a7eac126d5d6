//! ListGroups: every group with members or committed offsets, its protocol
//! type and (v4+) state; v4's states filter and v5's types filter (every
//! group here is "classic") are honoured.

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};
use kafka_protocol::protocol::StrBytes;

use super::super::Ctx;
use crate::security::acl::{Operation, Resource};

pub(super) fn handle(ctx: &Ctx, req: ListGroupsRequest, version: i16) -> ListGroupsResponse {
    let states: Vec<String> = if version >= 4 {
        req.states_filter
            .iter()
            .map(|s| s.as_str().to_ascii_lowercase())
            .collect()
    } else {
        Vec::new()
    };
    let types: Vec<String> = if version >= 5 {
        req.types_filter
            .iter()
            .map(|s| s.as_str().to_ascii_lowercase())
            .collect()
    } else {
        Vec::new()
    };
    let mut resp = ListGroupsResponse::default();
    if !types.is_empty() && !types.iter().any(|t| t == "classic") {
        return resp;
    }
    resp.groups = ctx
        .backend
        .list_groups()
        .into_iter()
        // Only the groups the principal may describe (Kafka's filter).
        .filter(|g| ctx.sees(Operation::Describe, Resource::group(&g.group)))
        .filter(|g| states.is_empty() || states.contains(&g.phase.as_str().to_ascii_lowercase()))
        .map(|g| {
            let mut l = ListedGroup::default();
            l.group_id = GroupId(StrBytes::from_string(g.group));
            l.protocol_type = StrBytes::from_string(g.protocol_type);
            if version >= 4 {
                l.group_state = StrBytes::from_static_str(g.phase.as_str());
            }
            if version >= 5 {
                l.group_type = StrBytes::from_static_str("classic");
            }
            l
        })
        .collect();
    resp
}

//! ListGroups: every group with members or committed offsets, its protocol
//! type and (v4+) state; v4's states filter and v5's types filter
//! ("classic" groups, and "share" groups, KIP-932) are honoured. Share
//! groups are listed to v4+ requests only (an older client would take them
//! for consumer groups). Consumer-protocol groups (KIP-848) with members
//! are listed with type "consumer" and state Stable or Reconciling; once
//! empty they are listed as their committed offsets leave them (classic,
//! Empty, protocol type "consumer").

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};
use kafka_protocol::protocol::StrBytes;

use super::super::Ctx;

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
    let wants = |t: &str| types.is_empty() || types.iter().any(|x| x == t);
    if version >= 4 && wants("share") {
        let engine = &ctx.engine;
        for name in engine.shares().list_share_groups() {
            if !ctx.with_subject(|s| s.lists_group(&name)) {
                continue;
            }
            let state = match engine.shares().describe_share_group(&name) {
                Some(v) if !v.members.is_empty() => "Stable",
                _ => "Empty",
            };
            if !states.is_empty() && !states.contains(&state.to_ascii_lowercase()) {
                continue;
            }
            let mut l = ListedGroup::default();
            l.group_id = GroupId(StrBytes::from_string(name));
            l.protocol_type = StrBytes::from_static_str("share");
            l.group_state = StrBytes::from_static_str(state);
            if version >= 5 {
                l.group_type = StrBytes::from_static_str("share");
            }
            resp.groups.push(l);
        }
    }
    // Consumer-protocol groups (KIP-848) with members: type "consumer".
    let consumer = ctx.engine.groups().list_consumer_groups();
    if wants("consumer") {
        let engine = &ctx.engine;
        for name in &consumer {
            if !ctx.with_subject(|s| s.lists_group(name)) {
                continue;
            }
            let state = engine
                .groups()
                .describe_consumer_group(name)
                .map_or("Empty", |v| v.state);
            if !states.is_empty() && !states.contains(&state.to_ascii_lowercase()) {
                continue;
            }
            let mut l = ListedGroup::default();
            l.group_id = GroupId(StrBytes::from_string(name.clone()));
            l.protocol_type = StrBytes::from_static_str("consumer");
            if version >= 4 {
                l.group_state = StrBytes::from_static_str(state);
            }
            if version >= 5 {
                l.group_type = StrBytes::from_static_str("consumer");
            }
            resp.groups.push(l);
        }
    }
    if !wants("classic") {
        return resp;
    }
    let classic: Vec<ListedGroup> = ctx
        .engine
        .groups()
        .list_groups()
        .into_iter()
        // Only the groups the principal may describe (Kafka's filter).
        .filter(|g| ctx.with_subject(|s| s.lists_group(&g.group)))
        .filter(|g| consumer.binary_search(&g.group).is_err())
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
    resp.groups.extend(classic);
    resp
}

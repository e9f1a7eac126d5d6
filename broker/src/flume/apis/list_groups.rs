//! LIST_GROUPS: every group the principal may describe, by state: consumer
//! groups, consumer-protocol groups (KIP-848: protocol type `consumer`, state
//! `Stable` or `Reconciling` while they have members; CONSUMER_GROUP_DESCRIBE
//! tells them from classic ones), and share groups (protocol type `share`,
//! state `Stable` with members, `Empty` without).

use flume_protocol::ListGroupsRequest;

use super::super::{map, InFlight};
use super::Cx;

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    match cx.decode::<ListGroupsRequest>(payload) {
        Ok(req) => {
            let consumer = cx.engine.groups().list_consumer_groups();
            let mut groups = cx.engine.groups().list_groups();
            // A consumer-protocol group with members is listed once, as such.
            groups.retain(|g| consumer.binary_search(&g.group).is_err());
            if cx.who.enforced() {
                groups.retain(|g| cx.who.lists_group(&g.group));
            }
            let mut listed = map::group_listings(groups, &req.states_filter);
            for name in consumer {
                if cx.who.enforced() && !cx.who.lists_group(&name) {
                    continue;
                }
                let Some(view) = cx.engine.groups().describe_consumer_group(&name) else {
                    continue;
                };
                if req.states_filter.is_empty() || req.states_filter.iter().any(|s| s == view.state)
                {
                    listed.groups.push(flume_protocol::GroupListing {
                        group: name,
                        state: view.state.to_owned(),
                        protocol_type: "consumer".to_owned(),
                    });
                }
            }
            for name in cx.engine.shares().list_share_groups() {
                if cx.who.enforced() && !cx.who.lists_group(&name) {
                    continue;
                }
                let members = cx
                    .engine
                    .shares()
                    .describe_share_group(&name)
                    .is_some_and(|d| !d.members.is_empty());
                let state = if members { "Stable" } else { "Empty" };
                if req.states_filter.is_empty() || req.states_filter.iter().any(|s| s == state) {
                    listed.groups.push(flume_protocol::GroupListing {
                        group: name,
                        state: state.to_owned(),
                        protocol_type: "share".to_owned(),
                    });
                }
            }
            listed
                .groups
                .sort_by(|a, b| (&a.group, &a.protocol_type).cmp(&(&b.group, &b.protocol_type)));
            cx.ready(Ok(listed))
        }
        Err(f) => f,
    }
}

//! LIST_GROUPS: every group the principal may describe, by state.

use flume_protocol::ListGroupsRequest;

use super::super::{map, InFlight};
use super::Cx;
use crate::security::acl::{Operation, Resource};

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    match cx.decode::<ListGroupsRequest>(payload) {
        Ok(req) => {
            let mut groups = cx.engine.list_groups();
            if cx.who.enforced() {
                groups.retain(|g| cx.who.sees(Operation::Describe, Resource::group(&g.group)));
            }
            cx.ready(Ok(map::group_listings(groups, &req.states_filter)))
        }
        Err(f) => f,
    }
}

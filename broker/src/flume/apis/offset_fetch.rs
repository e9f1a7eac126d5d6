//! OFFSET_FETCH: READ on the group and on every topic named; asked for every
//! topic of the group, only those it may describe are listed.

use flume_protocol::OffsetFetchRequest;

use super::super::{map, InFlight};
use super::Cx;
use crate::security::acl::{Operation, Resource};

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    match cx.decode::<OffsetFetchRequest>(payload) {
        Ok(req)
            if !cx
                .who
                .group_member(&req.group, req.topics.iter().map(|t| t.topic.as_str())) =>
        {
            cx.denied()
        }
        Ok(req) => {
            let mut positions = cx.engine.positions(&req.group, map::position_query(&req));
            if cx.who.enforced() {
                positions.retain(|p| {
                    cx.who
                        .sees(Operation::Describe, Resource::topic(&p.at.topic))
                });
            }
            cx.ready(Ok(map::offset_fetch_response(positions)))
        }
        Err(f) => f,
    }
}

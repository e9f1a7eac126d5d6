//! CONSUMER_GROUP_DESCRIBE: consumer-protocol groups (KIP-848) with their
//! epochs, assignor and each member's epoch, subscription, assignment and
//! target. Only groups the principal may DESCRIBE are answered (the others
//! are left out, as LIST_GROUPS leaves them out).

use flume_protocol::{ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ErrorCode};

use super::super::{map, InFlight};
use super::Cx;

/// Most group ids one request may name.
const MAX_GROUPS: usize = 10_000;

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    match cx.decode::<ConsumerGroupDescribeRequest>(payload) {
        Ok(req) if req.groups.len() > MAX_GROUPS => {
            cx.ready::<ConsumerGroupDescribeResponse>(Err(ErrorCode::InvalidRequest))
        }
        Ok(req) => {
            let mut names = if req.groups.is_empty() {
                cx.engine.groups().list_consumer_groups()
            } else {
                req.groups
            };
            names.sort();
            names.dedup();
            let groups = names
                .iter()
                .filter(|g| !cx.who.enforced() || cx.who.lists_group(g))
                .filter_map(|g| cx.engine.groups().describe_consumer_group(g))
                .map(map::consumer_group_info)
                .collect();
            cx.ready(Ok(ConsumerGroupDescribeResponse { groups }))
        }
        Err(f) => f,
    }
}

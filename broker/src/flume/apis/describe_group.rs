//! DESCRIBE_GROUP: DESCRIBE on the group; its state, members, assignments
//! and committed offsets with their lag.

use flume_protocol::{DescribeGroupRequest, ErrorCode};

use super::super::{map, InFlight};
use super::Cx;

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    match cx.decode::<DescribeGroupRequest>(payload) {
        Ok(req) if !cx.who.describe_group(&req.group) => cx.denied(),
        Ok(req) => {
            let engine = cx.engine;
            let described = engine.groups().describe_group(&req.group).map(|d| {
                let end_of = |topic: &str, partition: i32| {
                    engine
                        .records()
                        .topic(topic)
                        .and_then(|t| t.partition(partition).map(|p| p.end_offset()))
                        .map_or(-1, |e| i64::try_from(e).unwrap_or(i64::MAX))
                };
                map::group_description(d, engine.groups().committed_for_group(&req.group), &end_of)
            });
            cx.ready(described.ok_or(ErrorCode::UnknownGroup))
        }
        Err(f) => f,
    }
}

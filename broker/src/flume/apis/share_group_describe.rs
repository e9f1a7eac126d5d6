//! SHARE_GROUP_DESCRIBE: DESCRIBE on the group; its members and each
//! share-partition's start, log end and record counts.

use flume_protocol::{ErrorCode, ShareGroupDescribeRequest};

use super::super::{map, InFlight};
use super::Cx;

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    match cx.decode::<ShareGroupDescribeRequest>(payload) {
        Ok(req) if !cx.who.describe_group(&req.group) => cx.denied(),
        Ok(req) => {
            let described = cx
                .engine
                .shares()
                .describe_share_group(&req.group)
                .map(map::share_group_description);
            cx.ready(described.ok_or(ErrorCode::UnknownGroup))
        }
        Err(f) => f,
    }
}

//! METADATA: the topics named (or every topic), only those the principal
//! may describe: the rest is not there for it.

use flume_protocol::MetadataRequest;

use super::super::{map, InFlight};
use super::Cx;

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    match cx.decode::<MetadataRequest>(payload) {
        Ok(req) => {
            let mut described = cx.engine.records().describe(&req.topics);
            if cx.who.enforced() {
                described.retain(|t| cx.who.lists_topic(&t.name));
            }
            cx.ready(Ok(map::metadata_response(described)))
        }
        Err(f) => f,
    }
}

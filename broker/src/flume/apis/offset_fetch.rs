//! OFFSET_FETCH: READ on the group and on every topic named; asked for every
//! topic of the group, only those it may describe are listed.

use std::collections::BTreeSet;
use std::sync::Arc;

use flume_protocol::OffsetFetchRequest;
use futures::FutureExt;

use super::super::{map, InFlight};
use super::{respond, Cx};

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
            let engine = Arc::clone(cx.engine);
            let id = cx.id;
            // The topics the principal may describe, decided here (the
            // answer is built after the probes of `reader_positions`).
            let allowed: Option<BTreeSet<String>> = cx.who.enforced().then(|| {
                map::position_query(&req)
                    .map(|(topic, _)| topic)
                    .filter(|t| cx.who.lists_topic(t))
                    .map(str::to_owned)
                    .collect()
            });
            async move {
                let mut positions = engine
                    .groups()
                    .reader_positions(&req.group, map::position_query(&req))
                    .await;
                if let Some(allowed) = allowed {
                    positions.retain(|p| allowed.contains(&p.at.topic));
                }
                respond(id, Ok(&map::offset_fetch_response(positions)))
            }
            .boxed()
        }
        Err(f) => f,
    }
}

//! PRODUCE: every entry is queued on its partitions now, in order (so a
//! connection's order holds); the response waits for their acknowledgements.
//! Every entry is authorized before any is queued: a denied request appends
//! nothing.

use bytes::Bytes;
use flume_protocol::messages::Decode;
use flume_protocol::{ErrorCode, ProduceRequest, ProduceResponse, ProduceResult};
use futures::FutureExt;

use super::super::{map, InFlight};
use super::{error_frame, respond, Cx};

pub(crate) async fn handle(cx: &mut Cx<'_, '_>, shared: &Bytes) -> InFlight {
    let id = cx.id;
    let req = match ProduceRequest::decode_shared(shared) {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(request_id = id, error = %e, "request payload does not decode");
            return error_frame(id, ErrorCode::InvalidRequest);
        }
    };
    if let Some(e) = req.entries.first() {
        cx.tracked.about(&e.topic, e.partition);
    }
    if cx.who.enforced() {
        let auto_create = cx.engine.config().auto_create_topics;
        for e in &req.entries {
            let creates = auto_create && cx.engine.records().topic(&e.topic).is_none();
            if !cx.who.produce(&e.topic, creates) {
                return cx.denied();
            }
        }
    }
    let mut pending = Vec::with_capacity(req.entries.len());
    for entry in req.entries {
        pending.push(
            cx.engine
                .records()
                .admit_produce(map::produce_batch(entry))
                .await,
        );
    }
    let note = cx.tracked.note();
    async move {
        let mut results = Vec::with_capacity(pending.len());
        for p in pending {
            let r = ProduceResult::from(p.finish().await);
            note.failed(r.error, &r.topic, r.partition);
            results.push(r);
        }
        respond(id, Ok(&ProduceResponse { results }))
    }
    .boxed()
}

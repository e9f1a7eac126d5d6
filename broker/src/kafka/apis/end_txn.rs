//! EndTxn: commits or aborts the producer's transaction. Answered once the
//! transaction is complete: its end durable in the transaction state log,
//! its markers written to its partitions and, for a commit, its offsets
//! stored in their groups.
//!
//! Markers cannot be written yet (the log does not store Kafka control
//! records; see `engine/txn.rs`): a transaction with partitions gets
//! UNSUPPORTED_FOR_MESSAGE_FORMAT (43, Kafka's answer when the log's format
//! cannot hold transactions) and stays in PrepareCommit/PrepareAbort, its
//! end recorded and retried; a transaction of offsets only completes.

use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse};

use super::super::errors::txn_code;
use super::super::{errors, Ctx};

pub(super) async fn handle(ctx: &Ctx, req: EndTxnRequest, version: i16) -> EndTxnResponse {
    let mut resp = EndTxnResponse::default();
    if !ctx.with_subject(|s| s.end_transaction()) {
        resp.error_code = errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
        return resp;
    }
    let id = req.transactional_id.0.as_str();
    resp.error_code = match ctx
        .engine
        .transactions()
        .end_txn(id, req.producer_id.0, req.producer_epoch, req.committed)
        .await
    {
        Ok(()) => errors::NONE,
        Err(e) => {
            tracing::debug!(transactional_id = %id, commit = req.committed, error = %e, "kafka EndTxn not done");
            txn_code(&e, version < 2)
        }
    };
    resp
}

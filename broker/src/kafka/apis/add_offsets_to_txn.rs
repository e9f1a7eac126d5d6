//! AddOffsetsToTxn: the producer's transaction will commit offsets of a
//! group (TxnOffsetCommit); READ on the group, as Kafka.

use kafka_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse};

use super::super::errors::txn_code;
use super::super::{errors, Ctx};

pub(super) async fn handle(
    ctx: &Ctx,
    req: AddOffsetsToTxnRequest,
    version: i16,
) -> AddOffsetsToTxnResponse {
    let mut resp = AddOffsetsToTxnResponse::default();
    let group = req.group_id.0.as_str();
    if !ctx.with_subject(|s| s.in_group(group)) {
        resp.error_code = errors::GROUP_AUTHORIZATION_FAILED;
        return resp;
    }
    let id = req.transactional_id.0.as_str();
    resp.error_code = match ctx
        .engine
        .transactions()
        .add_offsets_to_txn(id, req.producer_id.0, req.producer_epoch, group)
        .await
    {
        Ok(()) => errors::NONE,
        Err(e) => {
            tracing::debug!(transactional_id = %id, error = %e, "kafka AddOffsetsToTxn refused");
            txn_code(&e, version < 2)
        }
    };
    resp
}

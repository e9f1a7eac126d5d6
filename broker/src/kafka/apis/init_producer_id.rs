//! InitProducerId: a producer id and epoch.
//!
//! Without a transactional id (an idempotent producer), as Kafka: every
//! request gets a fresh id with epoch 0, whatever id and epoch it names (an
//! epoch bump after UNKNOWN_PRODUCER_ID, KIP-360, thus gets a new id, and the
//! client starts its sequences over). Ids never repeat, across restarts too
//! ([`crate::coordinator::producer_ids`]).
//!
//! With a transactional id, through the transaction coordinator
//! (`coordinator::txn`): a new id gets a producer id and epoch 0, a known
//! one the next epoch, which fences every earlier producer of it (an open
//! transaction is aborted first: CONCURRENT_TRANSACTIONS, retry). v3+ may
//! name the producer id and epoch the producer had (KIP-360). A timeout
//! above the broker's maximum is INVALID_TRANSACTION_TIMEOUT; an empty
//! transactional id INVALID_REQUEST, as in Kafka. Before v4 a fenced
//! producer gets INVALID_PRODUCER_EPOCH instead of PRODUCER_FENCED.

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use super::super::errors::txn_code;
use super::super::{errors, Ctx};

pub(super) async fn handle(
    ctx: &Ctx,
    req: InitProducerIdRequest,
    version: i16,
) -> InitProducerIdResponse {
    let mut resp = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
        .with_ongoing_txn_producer_id(ProducerId(-1))
        .with_ongoing_txn_producer_epoch(-1);
    // As Kafka 3: WRITE on the cluster (Flume has no IDEMPOTENT_WRITE) or on
    // any topic; Flume's ACLs have no transactional-id resource, so the same
    // rule stands for a transactional producer.
    if !ctx.with_subject(|s| s.idempotent_write()) {
        resp.error_code = match req.transactional_id {
            Some(_) => errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            None => errors::CLUSTER_AUTHORIZATION_FAILED,
        };
        return resp;
    }
    if let Some(id) = &req.transactional_id {
        let expected = (version >= 3 && req.producer_id.0 >= 0)
            .then_some((req.producer_id.0, req.producer_epoch));
        match ctx
            .engine
            .transactions()
            .init_transactional_producer(
                id.0.as_str(),
                i64::from(req.transaction_timeout_ms),
                expected,
            )
            .await
        {
            Ok((pid, epoch)) => {
                resp.error_code = errors::NONE;
                resp.producer_id = ProducerId(pid);
                resp.producer_epoch = epoch;
            }
            Err(e) => {
                tracing::debug!(transactional_id = %id.0.as_str(), error = %e, "kafka InitProducerId refused");
                resp.error_code = txn_code(&e, version < 4);
            }
        }
        return resp;
    }
    match ctx
        .engine
        .records()
        .init_producer_id()
        .await
        .map_err(errors::kafka_code)
    {
        Ok(id) => {
            resp.error_code = errors::NONE;
            resp.producer_id = ProducerId(id);
            resp.producer_epoch = 0;
        }
        Err(code) => resp.error_code = code,
    }
    resp
}

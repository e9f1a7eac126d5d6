//! InitProducerId: a new producer id for an idempotent producer.
//!
//! Non-transactional only. Like Kafka for a request without a
//! transactional id, every request gets a fresh id with epoch 0, whatever
//! id and epoch it names (an epoch bump after UNKNOWN_PRODUCER_ID, KIP-360,
//! thus gets a new id, and the client starts its sequences over). Ids never
//! repeat, across restarts too ([`crate::partition::producers`]). A transactional id is
//! answered COORDINATOR_NOT_AVAILABLE, as FindCoordinator answers a request
//! for a transaction coordinator: what Kafka says while it has no
//! transaction coordinator to offer. An empty transactional id is
//! INVALID_REQUEST, as in Kafka.

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use super::super::{errors, Ctx};
use crate::security::acl::{Operation, ResourceType};

/// COORDINATOR_NOT_AVAILABLE: transactions are not served.
const COORDINATOR_NOT_AVAILABLE: i16 = 15;

pub(super) async fn handle(ctx: &Ctx, req: InitProducerIdRequest) -> InitProducerIdResponse {
    let mut resp = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
        .with_ongoing_txn_producer_id(ProducerId(-1))
        .with_ongoing_txn_producer_epoch(-1);
    match &req.transactional_id {
        None => {}
        // As Kafka: an empty transactional id is an invalid request.
        Some(t) if t.0.is_empty() => {
            resp.error_code = errors::INVALID_REQUEST;
            return resp;
        }
        Some(_) => {
            resp.error_code = COORDINATOR_NOT_AVAILABLE;
            return resp;
        }
    }
    // As Kafka 3: WRITE on the cluster (Flume has no IDEMPOTENT_WRITE) or on any topic.
    if !ctx.with_subject(|s| s.may_any(Operation::Write, ResourceType::Topic)) {
        resp.error_code = errors::CLUSTER_AUTHORIZATION_FAILED;
        return resp;
    }
    match ctx.backend.init_producer_id().await {
        Ok(id) => {
            resp.error_code = errors::NONE;
            resp.producer_id = ProducerId(id);
            resp.producer_epoch = 0;
        }
        Err(code) => resp.error_code = code,
    }
    resp
}

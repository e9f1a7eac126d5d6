//! AddPartitionsToTxn (v0-3, the client's form): the partitions the
//! producer's transaction will write to. All or nothing, as Kafka: a
//! partition that does not exist (UNKNOWN_TOPIC_OR_PARTITION) or whose topic
//! the principal may not write (TOPIC_AUTHORIZATION_FAILED) fails the
//! request, and every other partition gets OPERATION_NOT_ATTEMPTED. v4+ (the
//! brokers' batched form, KIP-890) is not served.

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse};

use super::super::errors::txn_code;
use super::super::{errors, Ctx};
use crate::domain::TopicPartition;

/// OPERATION_NOT_ATTEMPTED: another partition of the request failed.
const OPERATION_NOT_ATTEMPTED: i16 = 55;

pub(super) async fn handle(
    ctx: &Ctx,
    req: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    let id = req.v3_and_below_transactional_id.0.as_str().to_owned();
    // Each partition's own refusal, if any.
    let checked: Vec<(String, Vec<(i32, i16)>)> = req
        .v3_and_below_topics
        .iter()
        .map(|t| {
            let topic = t.name.0.as_str();
            let denied = !ctx.with_subject(|s| s.write_transaction(topic));
            let parts = t
                .partitions
                .iter()
                .map(|&p| {
                    let code = if denied {
                        errors::TOPIC_AUTHORIZATION_FAILED
                    } else if !ctx
                        .engine
                        .transactions()
                        .partition_exists(&TopicPartition::new(topic, p))
                    {
                        errors::UNKNOWN_TOPIC_OR_PARTITION
                    } else {
                        errors::NONE
                    };
                    (p, code)
                })
                .collect();
            (topic.to_owned(), parts)
        })
        .collect();
    let failed = checked
        .iter()
        .any(|(_, ps)| ps.iter().any(|(_, c)| *c != errors::NONE));
    let outcome = if failed {
        None
    } else {
        let partitions = checked
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(|(p, _)| TopicPartition::new(t.clone(), *p)))
            .collect();
        Some(
            ctx.engine
                .transactions().add_partitions_to_txn(
                    &id,
                    req.v3_and_below_producer_id.0,
                    req.v3_and_below_producer_epoch,
                    partitions,
                )
                .await
                .map_err(|e| {
                    tracing::debug!(transactional_id = %id, error = %e, "kafka AddPartitionsToTxn refused");
                    txn_code(&e, version < 2)
                })
                .err()
                .unwrap_or(errors::NONE),
        )
    };
    let mut resp = AddPartitionsToTxnResponse::default();
    resp.results_by_topic_v3_and_below = req
        .v3_and_below_topics
        .into_iter()
        .zip(checked)
        .map(|(t, (_, parts))| {
            let mut tr = AddPartitionsToTxnTopicResult::default();
            tr.name = t.name;
            tr.results_by_partition = parts
                .into_iter()
                .map(|(p, own)| {
                    let mut pr = AddPartitionsToTxnPartitionResult::default();
                    pr.partition_index = p;
                    pr.partition_error_code = match outcome {
                        Some(code) => code,
                        None if own != errors::NONE => own,
                        None => OPERATION_NOT_ATTEMPTED,
                    };
                    pr
                })
                .collect();
            tr
        })
        .collect();
    resp
}

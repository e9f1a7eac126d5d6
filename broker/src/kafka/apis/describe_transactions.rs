//! DescribeTransactions (`kafka-transactions.sh describe`): each named
//! transactional id's state, timeout, start time, producer id and epoch, and
//! the partitions of its open transaction; an unknown id gets
//! TRANSACTIONAL_ID_NOT_FOUND. DESCRIBE on the cluster (Flume's ACLs have
//! no transactional-id resource).

use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ProducerId, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::super::{errors, Ctx};

/// TRANSACTIONAL_ID_NOT_FOUND.
const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;

pub(super) fn handle(
    ctx: &Ctx,
    req: DescribeTransactionsRequest,
    _version: i16,
) -> DescribeTransactionsResponse {
    let allowed = ctx.with_subject(|s| s.describe_transactions());
    let mut resp = DescribeTransactionsResponse::default();
    resp.transaction_states = req
        .transactional_ids
        .into_iter()
        .map(|id| {
            let mut s = TransactionState::default();
            s.producer_id = ProducerId(-1);
            s.producer_epoch = -1;
            s.transaction_start_time_ms = -1;
            let found = allowed
                .then(|| {
                    ctx.engine
                        .transactions()
                        .describe_transaction(id.0.as_str())
                })
                .flatten();
            s.transactional_id = id;
            let Some(m) = found else {
                s.error_code = if allowed {
                    TRANSACTIONAL_ID_NOT_FOUND
                } else {
                    errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                };
                return s;
            };
            s.transaction_state = StrBytes::from_static_str(m.state.as_str());
            s.transaction_timeout_ms = i32::try_from(m.timeout_ms).unwrap_or(i32::MAX);
            s.transaction_start_time_ms = m.started_ms;
            s.producer_id = ProducerId(m.producer_id);
            s.producer_epoch = m.epoch;
            s.topics = m
                .partitions_by_topic()
                .into_iter()
                .map(|(topic, partitions)| {
                    let mut t = TopicData::default();
                    t.topic = TopicName(StrBytes::from_string(topic));
                    t.partitions = partitions;
                    t
                })
                .collect();
            s
        })
        .collect();
    resp
}

//! LIST_TRANSACTIONS: the transactional ids this broker coordinates, each
//! with its producer, state, age and partitions (what Kafka's
//! ListTransactions and DescribeTransactions answer together). DESCRIBE on
//! the cluster, as the Kafka listener asks.

use flume_protocol::{
    ErrorCode, ListTransactionsRequest, ListTransactionsResponse, TopicPartitions,
    TransactionListing,
};

use super::super::InFlight;
use super::Cx;
use crate::engine::TxnState;

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    match cx.decode::<ListTransactionsRequest>(payload) {
        Ok(_) if !cx.who.describe_transactions() => cx.denied(),
        Ok(req) => {
            let states: Option<Vec<TxnState>> = req
                .states_filter
                .iter()
                .map(|s| TxnState::parse(s))
                .collect();
            let Some(states) = states else {
                return cx.ready::<ListTransactionsResponse>(Err(ErrorCode::InvalidRequest));
            };
            let transactions = cx
                .engine
                .transactions()
                .list_transactions(&states, &[], req.min_age_ms)
                .into_iter()
                .map(|t| TransactionListing {
                    transactional_id: t.transactional_id,
                    producer_id: t.producer_id,
                    producer_epoch: t.epoch,
                    state: t.state.as_str().to_owned(),
                    started_ms: t.started_ms,
                    timeout_ms: i32::try_from(t.timeout_ms).unwrap_or(i32::MAX),
                    partitions: t
                        .partitions
                        .into_iter()
                        .map(|(topic, partitions)| TopicPartitions { topic, partitions })
                        .collect(),
                })
                .collect();
            cx.ready(Ok(ListTransactionsResponse { transactions }))
        }
        Err(f) => f,
    }
}

//! LIST_TRANSACTIONS: the transactional ids this broker coordinates, each
//! with its producer, state, age and partitions (what Kafka's
//! ListTransactions and DescribeTransactions answer together). DESCRIBE on
//! the cluster, as the Kafka listener asks.

use std::collections::BTreeMap;

use flume_protocol::{
    ErrorCode, ListTransactionsRequest, ListTransactionsResponse, TopicPartitions,
    TransactionListing,
};

use super::super::InFlight;
use super::Cx;
use crate::coordinator::txn::TxnState;
use crate::security::acl::{Operation, Resource};

pub(crate) fn handle(cx: &mut Cx<'_, '_>, payload: &[u8]) -> InFlight {
    match cx.decode::<ListTransactionsRequest>(payload) {
        Ok(_) if !cx.who.may(Operation::Describe, Resource::cluster()) => cx.denied(),
        Ok(req) => {
            let states: Option<Vec<TxnState>> = req
                .states_filter
                .iter()
                .map(|s| TxnState::parse(s))
                .collect();
            let Some(states) = states else {
                return cx.ready::<ListTransactionsResponse>(Err(ErrorCode::InvalidRequest));
            };
            let listed = cx.engine.list_transactions(&states, &[], req.min_age_ms);
            let transactions = listed
                .into_iter()
                .filter_map(|t| cx.engine.describe_transaction(&t.transactional_id))
                .map(|m| {
                    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                    for tp in &m.partitions {
                        by_topic
                            .entry(tp.topic.clone())
                            .or_default()
                            .push(tp.partition);
                    }
                    TransactionListing {
                        transactional_id: m.transactional_id,
                        producer_id: m.producer_id,
                        producer_epoch: m.epoch,
                        state: m.state.as_str().to_owned(),
                        started_ms: m.started_ms,
                        timeout_ms: i32::try_from(m.timeout_ms).unwrap_or(i32::MAX),
                        partitions: by_topic
                            .into_iter()
                            .map(|(topic, partitions)| TopicPartitions { topic, partitions })
                            .collect(),
                    }
                })
                .collect();
            cx.ready(Ok(ListTransactionsResponse { transactions }))
        }
        Err(f) => f,
    }
}

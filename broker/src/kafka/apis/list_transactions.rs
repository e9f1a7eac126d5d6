//! ListTransactions (`kafka-transactions.sh list`, Flink's abort of
//! lingering transactions): every transactional id the coordinator knows,
//! with its producer id and state, filtered by state names (an unknown name
//! is listed back in `unknown_state_filters`), producer ids and (v1+)
//! the least time its transaction has been open. DESCRIBE on the cluster
//! (Flume's ACLs have no transactional-id resource).

use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::{
    ListTransactionsRequest, ListTransactionsResponse, ProducerId, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;

use super::super::{errors, Ctx};
use crate::engine::TxnState;

pub(super) fn handle(
    ctx: &Ctx,
    req: ListTransactionsRequest,
    version: i16,
) -> ListTransactionsResponse {
    let mut resp = ListTransactionsResponse::default();
    if !ctx.with_subject(|s| s.describe_transactions()) {
        resp.error_code = errors::CLUSTER_AUTHORIZATION_FAILED;
        return resp;
    }
    let mut states = Vec::new();
    for name in &req.state_filters {
        match TxnState::parse(name.as_str()) {
            Some(s) => states.push(s),
            None => resp.unknown_state_filters.push(name.clone()),
        }
    }
    if !resp.unknown_state_filters.is_empty() && states.is_empty() {
        // Only unknown states asked for: nothing matches.
        return resp;
    }
    let producers: Vec<i64> = req.producer_id_filters.iter().map(|p| p.0).collect();
    let min_age = if version >= 1 {
        req.duration_filter
    } else {
        -1
    };
    resp.transaction_states = ctx
        .engine
        .transactions()
        .list_transactions(&states, &producers, min_age)
        .into_iter()
        .map(|t| {
            let mut s = TransactionState::default();
            s.transactional_id = TransactionalId(StrBytes::from_string(t.transactional_id));
            s.producer_id = ProducerId(t.producer_id);
            s.transaction_state = StrBytes::from_static_str(t.state.as_str());
            s
        })
        .collect();
    resp
}

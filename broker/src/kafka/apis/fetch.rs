//! Fetch: a long poll through the engine's fetch (max_wait_ms, min_bytes,
//! total and per-partition max bytes), answered with the stored batches as
//! they are (a Kafka producer's, compressed or not) and one uncompressed
//! magic-2 batch per run of records produced through Flume's protocol. No fetch sessions: every fetch is a full
//! one (session id 0), which Kafka's clients accept.

use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{FetchRequest, FetchResponse};

use super::super::backend::{FetchAsk, FetchWant};
use super::super::{errors, Ctx};
use crate::security::acl::{Operation, Resource};

pub(super) async fn handle(ctx: &Ctx, req: FetchRequest, version: i16) -> FetchResponse {
    let mut wants = Vec::new();
    // Per topic: its partitions, and whether READ on it is denied.
    let mut shape: Vec<(kafka_protocol::messages::TopicName, Vec<i32>, bool)> = Vec::new();
    for t in &req.topics {
        let name = t.topic.0.as_str().to_owned();
        let mut parts = Vec::with_capacity(t.partitions.len());
        if !ctx.may(Operation::Read, Resource::topic(&name)) {
            parts.extend(t.partitions.iter().map(|p| p.partition));
            shape.push((t.topic.clone(), parts, true));
            continue;
        }
        for p in &t.partitions {
            wants.push(FetchWant {
                topic: name.clone(),
                partition: p.partition,
                offset: p.fetch_offset,
                max_bytes: p.partition_max_bytes,
            });
            parts.push(p.partition);
        }
        shape.push((t.topic.clone(), parts, false));
    }
    let max_bytes = if version >= 3 {
        req.max_bytes
    } else {
        i32::MAX
    };
    let got = ctx
        .backend
        .fetch(
            FetchAsk {
                max_wait_ms: req.max_wait_ms,
                min_bytes: req.min_bytes,
                max_bytes,
                wants: &wants,
                committed: version >= 4 && req.isolation_level == 1,
            },
            &ctx.memory,
            &ctx.counting,
        )
        .await;
    let mut got = got.into_iter();
    let mut resp = FetchResponse::default();
    for (topic, parts, denied) in shape {
        let mut tr = FetchableTopicResponse::default();
        tr.topic = topic;
        for partition in parts {
            let mut pd = PartitionData::default();
            pd.partition_index = partition;
            if denied {
                pd.error_code = errors::TOPIC_AUTHORIZATION_FAILED;
                pd.high_watermark = -1;
                pd.last_stable_offset = -1;
                pd.records = Some(Default::default());
                if version >= 4 {
                    pd.aborted_transactions = Some(Vec::new());
                }
                tr.partitions.push(pd);
                continue;
            }
            match got.next() {
                Some(g) => {
                    pd.error_code = g.error;
                    pd.high_watermark = g.high_watermark;
                    pd.last_stable_offset = g.last_stable;
                    if version >= 5 {
                        pd.log_start_offset = g.log_start;
                    }
                    pd.records = Some(g.records);
                    if version >= 4 {
                        pd.aborted_transactions = Some(
                            g.aborted
                                .iter()
                                .map(|(pid, first)| {
                                    AbortedTransaction::default()
                                        .with_producer_id((*pid).into())
                                        .with_first_offset(*first)
                                })
                                .collect(),
                        );
                    }
                }
                None => {
                    pd.error_code = errors::UNKNOWN_SERVER_ERROR;
                    pd.records = Some(Default::default());
                }
            }
            if version >= 4 && pd.aborted_transactions.is_none() {
                pd.aborted_transactions = Some(Vec::new());
            }
            tr.partitions.push(pd);
        }
        resp.responses.push(tr);
    }
    resp
}

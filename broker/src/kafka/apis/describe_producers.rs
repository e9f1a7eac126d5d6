//! DescribeProducers (`kafka-transactions.sh describe-producers`, Flink's
//! search for lingering transactions): the idempotent and transactional
//! producers each partition tracks, with the offset where an open
//! transaction began (-1: none). READ on the topic, as Kafka asks.

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};

use super::super::{errors, Ctx};

pub(super) fn handle(ctx: &Ctx, req: DescribeProducersRequest) -> DescribeProducersResponse {
    let mut resp = DescribeProducersResponse::default();
    for t in req.topics {
        let name = t.name.0.as_str().to_owned();
        let allowed = ctx.with_subject(|s| s.describe_producers(&name));
        let mut tr = TopicResponse::default();
        tr.name = t.name;
        for p in t.partition_indexes {
            let mut pr = PartitionResponse::default();
            pr.partition_index = p;
            if !allowed {
                pr.error_code = errors::TOPIC_AUTHORIZATION_FAILED;
                tr.partitions.push(pr);
                continue;
            }
            match ctx
                .engine
                .records()
                .producers(&name, p)
                .ok_or(errors::UNKNOWN_TOPIC_OR_PARTITION)
            {
                Err(code) => pr.error_code = code,
                Ok(producers) => {
                    pr.active_producers = producers
                        .into_iter()
                        .map(|s| {
                            let mut ps = ProducerState::default();
                            ps.producer_id = ProducerId(s.producer_id);
                            ps.producer_epoch = i32::from(s.epoch);
                            ps.last_sequence = s.last_sequence;
                            ps.last_timestamp = -1;
                            ps.coordinator_epoch = 0;
                            ps.current_txn_start_offset = s
                                .txn_start
                                .and_then(|o| i64::try_from(o).ok())
                                .unwrap_or(-1);
                            ps
                        })
                        .collect();
                }
            }
            tr.partitions.push(pr);
        }
        resp.topics.push(tr);
    }
    resp
}

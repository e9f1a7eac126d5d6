//! Fetch: a long poll through the engine's fetch (max_wait_ms, min_bytes,
//! total and per-partition max bytes), answered with the stored batches as
//! they are (a Kafka producer's, compressed or not) and one uncompressed
//! magic-2 batch per run of records produced through Flume's protocol. No fetch sessions: every fetch is a full
//! one (session id 0), which Kafka's clients accept. v13+ names topics by
//! id (KIP-516): an id no topic has, or whose topic was deleted (and
//! perhaps created again) before the answer, gets UNKNOWN_TOPIC_ID for each
//! of its partitions, so a client holding a stale id never reads another
//! topic's records.

use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use uuid::Uuid;

use super::super::map::{self, FetchAsk, FetchGot, FetchWant};
use super::super::{errors, Ctx};
use crate::engine::FetchMemory;

/// One topic of the request as it will be answered.
struct Shape {
    /// As the request named it (v0-12).
    topic: TopicName,
    /// As the request named it (v13+).
    id: Uuid,
    /// Its name, when known (v13+: the name of the topic with the id).
    name: Option<String>,
    partitions: Vec<i32>,
    /// The error every partition gets instead of records (not read then).
    refused: Option<i16>,
}

pub(super) async fn handle(ctx: &Ctx, req: FetchRequest, version: i16) -> FetchResponse {
    let mut wants = Vec::new();
    let mut shape: Vec<Shape> = Vec::new();
    for t in &req.topics {
        let name = if version >= 13 {
            ctx.engine
                .records()
                .topic_by_id(map::topic_id(t.topic_id))
                .map(|t| t.name.clone())
        } else {
            Some(t.topic.0.as_str().to_owned())
        };
        let mut s = Shape {
            topic: t.topic.clone(),
            id: t.topic_id,
            name: name.clone(),
            partitions: Vec::with_capacity(t.partitions.len()),
            refused: None,
        };
        let refused = match &name {
            None => Some(errors::UNKNOWN_TOPIC_ID),
            Some(n) if !ctx.with_subject(|s| s.read_topic(n)) => {
                Some(errors::TOPIC_AUTHORIZATION_FAILED)
            }
            Some(_) => None,
        };
        let (Some(name), None) = (name, refused) else {
            s.partitions
                .extend(t.partitions.iter().map(|p| p.partition));
            s.refused = refused;
            shape.push(s);
            continue;
        };
        for p in &t.partitions {
            wants.push(FetchWant {
                topic: name.clone(),
                partition: p.partition,
                offset: p.fetch_offset,
                max_bytes: p.partition_max_bytes,
            });
            s.partitions.push(p.partition);
        }
        shape.push(s);
    }
    let max_bytes = if version >= 3 {
        req.max_bytes
    } else {
        i32::MAX
    };
    let spec = map::fetch_spec(FetchAsk {
        max_wait_ms: req.max_wait_ms,
        min_bytes: req.min_bytes,
        max_bytes,
        wants: &wants,
        committed: version >= 4 && req.isolation_level == 1,
    });
    let memory = FetchMemory {
        response: &ctx.memory,
        counting: &ctx.counting,
    };
    let fetched = ctx.engine.records().fetch(&spec, Some(memory)).await;
    // One answer per wanted partition, in order.
    let mut got = fetched.partitions.into_iter().map(FetchGot::from);
    let mut resp = FetchResponse::default();
    for s in shape {
        // By id: still the topic it was when the request came (a topic
        // deleted during the long poll, and perhaps created again, has
        // another id or none; what was read of it is not answered).
        let stale = version >= 13
            && s.refused.is_none()
            && s.name
                .as_deref()
                .and_then(|n| ctx.engine.records().topic(n))
                .map(|t| map::kafka_id(t.id))
                != Some(s.id);
        let refused = if stale {
            Some(errors::UNKNOWN_TOPIC_ID)
        } else {
            s.refused
        };
        let mut tr = FetchableTopicResponse::default();
        tr.topic = s.topic;
        tr.topic_id = s.id;
        for partition in s.partitions {
            let mut pd = PartitionData::default();
            pd.partition_index = partition;
            if let Some(code) = refused {
                if s.refused.is_none() {
                    // Read, not answered.
                    got.next();
                }
                pd.error_code = code;
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

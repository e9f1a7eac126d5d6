//! Produce: each partition's record set is checked here (every batch's CRC,
//! its records decompressed and walked) and stored as it came, one Kafka
//! batch entry per batch ([`records::prepare`]): a Kafka fetch serves it
//! back as it is, compressed or not. acks 0 gets no response.
//!
//! A set refused for some of its records (no key on a compacted topic, a
//! record above `max_record_bytes`, bad headers) names every one of them in
//! v8+'s `record_errors` (their index in the batch and why, KIP-467), with
//! `error_message` summing up: librdkafka then fails those records with
//! INVALID_RECORD (or MESSAGE_TOO_LARGE) and the others with "an invalid
//! record in the same batch". Flume checks no timestamp (the
//! `message.timestamp.*.max.ms` configs are stored, not applied).
//!
//! v13 names topics by id (KIP-516): an id no topic has gets
//! UNKNOWN_TOPIC_ID for each of its partitions (and creates nothing), and
//! the answer names the topic by the same id. v10-12 add nothing Flume
//! answers differently: the leader hints of KIP-951 go with
//! NOT_LEADER_OR_FOLLOWER, which one broker never answers, and v12 (a
//! client's sign that it may use Kafka's transactions v2, KIP-890) is
//! served as v11: the `transaction.version` feature is not advertised, so
//! clients keep adding partitions to their transactions themselves.
//!
//! An idempotent producer's batch carries its producer id, epoch and base
//! sequence to the partition, which checks the sequence as it appends (see
//! [`crate::partition::producers`]): a retry of a stored batch is answered with its
//! original base offset, a gap with OUT_OF_ORDER_SEQUENCE_NUMBER, an old
//! epoch with INVALID_PRODUCER_EPOCH (as Kafka 2.7+ answers every produce
//! version), an id this broker never issued with UNKNOWN_PRODUCER_ID.

use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;

use super::super::records::{self, RecordsError};
use bytes::Bytes;

use super::super::map::{self, ProduceLimits};
use super::super::{errors, Ctx};
use crate::domain::TopicPartition;
use crate::engine::TxnFailure;

pub(super) async fn handle(
    ctx: &Ctx,
    req: ProduceRequest,
    version: i16,
) -> Option<ProduceResponse> {
    let acks = req.acks;
    let transactional_id = req
        .transactional_id
        .as_ref()
        .map(|t| t.0.as_str().to_owned());
    let refuse = if transactional_id.as_deref() == Some("") {
        Some((errors::INVALID_REQUEST, "an empty transactional id"))
    } else if !(-1..=1).contains(&acks) {
        Some((errors::INVALID_REQUIRED_ACKS, "acks must be 0, 1 or -1"))
    } else {
        None
    };
    let mut resp = ProduceResponse::default()
        .with_throttle_time_ms(ctx.throttle_ms.load(std::sync::atomic::Ordering::Relaxed));
    for t in req.topic_data {
        // v13+: by id; None for an id no topic has.
        let named = if version >= 13 {
            ctx.engine
                .records()
                .topic_by_id(map::topic_id(t.topic_id))
                .map(|t| t.name.clone())
        } else {
            Some(t.name.0.as_str().to_owned())
        };
        let mut tr = TopicProduceResponse::default();
        let Some(name) = named else {
            for p in t.partition_data {
                let mut pr = PartitionProduceResponse::default();
                pr.index = p.index;
                pr.base_offset = -1;
                pr.log_append_time_ms = -1;
                pr.error_code = errors::UNKNOWN_TOPIC_ID;
                pr.error_message = Some(StrBytes::from_string(format!(
                    "no topic has the id {}",
                    t.topic_id
                )));
                tr.partition_responses.push(pr);
            }
            tr.topic_id = t.topic_id;
            resp.responses.push(tr);
            continue;
        };
        let denied = refuse.is_none()
            && ctx.engine.acl().enabled()
            && !ctx.with_subject(|s| {
                let creates = ctx.engine.config().auto_create_topics
                    && ctx.engine.records().topic(&name).is_none();
                s.produce(&name, creates)
            });
        for p in t.partition_data {
            let mut pr = PartitionProduceResponse::default();
            pr.index = p.index;
            pr.base_offset = -1;
            let result: Result<i64, (i16, String)> = if let Some((code, why)) = refuse {
                Err((code, why.to_owned()))
            } else if denied {
                Err((
                    errors::TOPIC_AUTHORIZATION_FAILED,
                    format!("not authorized to write to topic {name:?}"),
                ))
            } else {
                let set = p.records.unwrap_or_default();
                let limits = match ctx.engine.records().topic(&name) {
                    Some(t) => ProduceLimits::of(&t.config),
                    // Auto-created by the produce: the broker's defaults.
                    None => ProduceLimits::of(&ctx.engine.records().default_topic()),
                };
                let append_time = limits
                    .log_append_time
                    .then(|| ctx.engine.config().clock.wall_ms());
                pr.log_append_time_ms = append_time.unwrap_or(-1);
                let largest = records::largest_batch(&set);
                if largest > limits.max_message_bytes {
                    Err((
                        errors::MESSAGE_TOO_LARGE,
                        format!("a record batch of {largest} bytes is above the topic's max.message.bytes ({})", limits.max_message_bytes),
                    ))
                } else {
                    let rules = records::ProduceRules {
                        limit: ctx
                            .max_decoded_bytes
                            .min(crate::domain::MAX_BATCH_DECODED_BYTES),
                        max_record_bytes: ctx.engine.config().max_record_bytes,
                        append_time,
                        compression: limits.compression,
                        keyed_only: limits.keyed_only,
                        transactional: transactional_id.is_some(),
                    };
                    match records::prepare(&set, &rules) {
                        Err(RecordsError::TooLarge { limit }) => Err((
                            errors::MESSAGE_TOO_LARGE,
                            format!("records decompress to more than {limit} bytes"),
                        )),
                        Err(e @ RecordsError::Records { .. }) => {
                            let code = if e.has_too_large() {
                                errors::MESSAGE_TOO_LARGE
                            } else {
                                errors::INVALID_RECORD
                            };
                            if let RecordsError::Records { errors, .. } = &e {
                                pr.record_errors = record_errors(errors);
                            }
                            Err((code, e.to_string()))
                        }
                        Err(e @ RecordsError::Invalid(_)) => {
                            Err((errors::INVALID_RECORD, e.to_string()))
                        }
                        Err(e) => Err((errors::CORRUPT_MESSAGE, e.to_string())),
                        Ok(t) => match (&transactional_id, t.producer) {
                            (Some(_), None) => Err((
                                errors::INVALID_RECORD,
                                "a transactional produce without a producer id".to_owned(),
                            )),
                            (Some(tid), Some(pb)) => match ctx
                                .engine
                                .transactions()
                                .txn_may_write(
                                    tid,
                                    pb.id,
                                    pb.epoch,
                                    &TopicPartition::new(name.as_str(), p.index),
                                )
                                .map_err(|e| errors::txn_code(&TxnFailure::Refused(e), true))
                            {
                                Err(code) => {
                                    Err((code, format!("transaction {tid:?}: error {code}")))
                                }
                                Ok(()) => append(ctx, &name, p.index, t)
                                    .await
                                    .map_err(|c| (c, format!("error {c}"))),
                            },
                            (None, _) => append(ctx, &name, p.index, t)
                                .await
                                .map_err(|c| (c, format!("error {c}"))),
                        },
                    }
                }
            };
            match result {
                Ok(base) => {
                    pr.base_offset = base;
                    if version >= 5 {
                        pr.log_start_offset =
                            map::log_bounds(ctx.engine.records().log_bounds(&name, p.index, false))
                                .map_or(-1, |o| o.0);
                    }
                }
                Err((code, message)) => {
                    pr.log_append_time_ms = -1;
                    tracing::debug!(topic = %name, partition = p.index, code, %message, "kafka produce refused");
                    pr.error_code = code;
                    if version >= 8 {
                        pr.error_message = Some(StrBytes::from_string(message));
                    } else {
                        pr.record_errors.clear();
                    }
                }
            }
            tr.partition_responses.push(pr);
        }
        tr.name = t.name;
        tr.topic_id = t.topic_id;
        resp.responses.push(tr);
    }
    if acks == 0 {
        return None;
    }
    Some(resp)
}

/// Appends the entries prepared ([`records::prepare`]) to one partition and
/// waits until they are stored; the offset of the first record (see
/// [`map::produced`]).
///
/// # Errors
/// A Kafka error code.
async fn append(ctx: &Ctx, topic: &str, partition: i32, t: records::Prepared) -> Result<i64, i16> {
    if partition < 0 {
        return Err(errors::UNKNOWN_TOPIC_OR_PARTITION);
    }
    let result = ctx
        .engine
        .records()
        .admit_encoded(
            topic,
            partition,
            Bytes::from(t.entries),
            t.span,
            t.max_timestamp,
            t.producer,
        )
        .await
        .finish()
        .await;
    map::produced(&result)
}

/// The bad records of a refused set as Produce v8+ lists them (KIP-467):
/// each one's index and why, so a client fails exactly those records with
/// the partition's error and the others with "another record of the batch
/// was invalid".
fn record_errors(faults: &[records::RecordFault]) -> Vec<BatchIndexAndErrorMessage> {
    faults
        .iter()
        .map(|f| {
            let mut e = BatchIndexAndErrorMessage::default();
            e.batch_index = i32::try_from(f.index).unwrap_or(i32::MAX);
            e.batch_index_error_message = Some(StrBytes::from_string(f.kind.to_string()));
            e
        })
        .collect()
}

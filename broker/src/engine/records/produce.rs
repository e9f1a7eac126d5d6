//! Produce: check a batch, route its records, queue them on their partitions;
//! producer ids for idempotent producers.

use std::collections::BTreeMap;

use bytes::Bytes;
use flume_protocol::partition_for_key;
use flume_protocol::record::{self, RecordError, RecordIter};
use flume_protocol::ErrorCode;

use super::Records;
use crate::config::TimestampType;
use crate::coordinator::producer_ids::ProducerIdError;
use crate::domain::{Appended, AppendedSpan, ProduceBatch, ProducerBatch, ProducerError, Route};
use crate::partition::{Admission, Refusal};

/// A checked batch with every record's timestamp set to `ts` (the append
/// time of a topic with `message.timestamp.type=LogAppendTime`) and its CRC
/// computed again. The batch was checked ([`record::validate_batch`]), so
/// every record is whole; a record that were not would be left as it is.
fn with_timestamp(records: &Bytes, ts: i64) -> Bytes {
    let mut out = records.to_vec();
    let header = record::RECORD_HEADER_LEN;
    for raw in RecordIter::new(records).flatten() {
        let (start, end) = (raw.pos, raw.pos + raw.encoded_len());
        let Some(rec) = out.get_mut(start..end) else {
            continue;
        };
        // payload = [attributes u8][timestamp i64]...; crc at 12..16 covers the payload.
        if let Some(t) = rec.get_mut(header + 1..header + 9) {
            t.copy_from_slice(&ts.to_be_bytes());
        }
        let crc = crc32fast::hash(rec.get(header..).unwrap_or_default());
        if let Some(c) = rec.get_mut(12..16) {
            c.copy_from_slice(&crc.to_be_bytes());
        }
    }
    Bytes::from(out)
}

/// A batch admitted to its partition queues, waiting for acknowledgements.
#[derive(Debug)]
pub struct PendingProduce {
    topic: String,
    route: Route,
    error: ErrorCode,
    waits: Vec<(u32, u32, Admission)>,
    record_partitions: Vec<i32>,
    producer_error: Option<ProducerError>,
}

impl PendingProduce {
    fn failed(topic: &str, route: Route, error: ErrorCode) -> Self {
        PendingProduce {
            topic: topic.to_owned(),
            route,
            error,
            waits: Vec::new(),
            record_partitions: Vec::new(),
            producer_error: None,
        }
    }

    /// Waits for every partition writer and builds the result. A routed batch
    /// is appended partition by partition: when one partition fails the others
    /// may still be stored, so `spans` lists exactly the partitions appended and
    /// `record_partitions` is kept, telling which records those are.
    pub async fn finish(self) -> Appended {
        let mut error = self.error;
        let mut producer_error = self.producer_error;
        let mut duplicate = false;
        let mut spans = Vec::with_capacity(self.waits.len());
        for (p, count, rx) in self.waits {
            match rx.outcome().await {
                Ok(stored) => {
                    duplicate |= stored.duplicate;
                    spans.push(AppendedSpan {
                        partition: i32::try_from(p).unwrap_or(i32::MAX),
                        base_offset: i64::try_from(stored.base).unwrap_or(i64::MAX),
                        count: i32::try_from(count).unwrap_or(i32::MAX),
                    });
                }
                Err(Refusal::Code(e)) => error = e,
                Err(Refusal::Producer(e)) => {
                    error = ErrorCode::InvalidRequest;
                    producer_error = Some(e);
                }
            }
        }
        Appended {
            topic: self.topic,
            route: self.route,
            error,
            spans,
            record_partitions: self.record_partitions,
            producer_error,
            duplicate,
        }
    }
}

impl Records {
    /// Checks a batch (every record's length and CRC, the size limit), routes
    /// its records and queues them on their partitions (waiting for room in
    /// block mode). Call [`PendingProduce::finish`] for the offsets. Queueing
    /// happens in call order, so batches admitted one after another keep
    /// their order. A batch for one partition is queued as it is: its bytes
    /// (a slice of the request's frame, say) are not copied.
    pub async fn admit_produce(&self, batch: ProduceBatch) -> PendingProduce {
        self.admit_produce_as(batch, None).await
    }

    /// As [`Records::admit_produce`], for a batch an idempotent producer
    /// stamped (`producer`, one partition only): its sequence is checked
    /// when it is appended, atomically with the partition's other appends
    /// (see [`crate::partition`]); a retry of one of the producer's last five
    /// batches there is answered with that batch's offsets
    /// ([`Appended::duplicate`]) and not appended again; a gap, an old epoch
    /// or an id never issued is refused
    /// ([`Appended::producer_error`]).
    pub async fn admit_produce_as(
        &self,
        batch: ProduceBatch,
        producer: Option<ProducerBatch>,
    ) -> PendingProduce {
        let ProduceBatch {
            topic,
            route,
            records,
        } = batch;
        let fail = |code| PendingProduce::failed(&topic, route, code);
        if self.is_shutting_down() {
            return fail(ErrorCode::ShuttingDown);
        }
        let t = match self.auto_create(&topic).await {
            Ok(t) => t,
            Err(e) => return fail(e.code()),
        };
        // The broker's record limit, and the topic's max.message.bytes.
        let limit =
            (self.config.max_record_bytes as u64).min(u64::from(t.config.max_message_bytes));
        let mut info = match record::validate_batch(&records, limit) {
            Ok(i) => i,
            Err(RecordError::TooLarge { size, limit, .. }) => {
                tracing::debug!(topic = %topic, size, limit, "RECORD_TOO_LARGE: a record of {size} bytes (16-byte header included) is above the limit ({limit}: the smaller of max_record_bytes and the topic's max.message.bytes)");
                return fail(ErrorCode::RecordTooLarge);
            }
            Err(_) => return fail(ErrorCode::CorruptRecord),
        };
        if t.config.cleanup_policy.compacts() && has_keyless(&records) {
            tracing::debug!(topic = %topic, "INVALID_RECORD: a record without a key on a compacted topic");
            return fail(ErrorCode::InvalidRecord);
        }
        let records = if t.config.message_timestamp_type == TimestampType::LogAppendTime {
            let now = self.config.clock.wall_ms();
            info.max_timestamp = now;
            with_timestamp(&records, now)
        } else {
            records
        };
        let mut pending = PendingProduce::failed(&topic, route, ErrorCode::None);
        if let Some(pb) = &producer {
            if !matches!(route, Route::Partition(_)) {
                return fail(ErrorCode::InvalidRequest);
            }
            if !self.producer_ids.issued(pb.id) {
                let mut p = fail(ErrorCode::InvalidRequest);
                p.producer_error = Some(ProducerError::UnknownProducerId);
                return p;
            }
        }
        if let Route::Partition(partition) = route {
            let Some(p) = t.partition(partition) else {
                return fail(ErrorCode::UnknownPartition);
            };
            match p
                .enqueue_as(records, info.count, info.max_timestamp, producer)
                .await
            {
                Ok(rx) => pending.waits.push((p.id, info.count, rx)),
                Err(code) => pending.error = code,
            }
            return pending;
        }
        // Route: keyed records by FNV-1a, null keys to one partition per batch (sticky).
        let n = u32::try_from(t.partitions.len()).unwrap_or(1);
        let sticky = t.next_sticky() % n;
        let mut subs: BTreeMap<u32, (Vec<u8>, u32, i64)> = BTreeMap::new();
        for raw in RecordIter::new(&records).flatten() {
            let p = match raw.key_value() {
                Some((Some(key), _)) => partition_for_key(key, n),
                _ => sticky,
            };
            pending
                .record_partitions
                .push(i32::try_from(p).unwrap_or(i32::MAX));
            let e = subs.entry(p).or_insert_with(|| (Vec::new(), 0, i64::MIN));
            e.0.extend_from_slice(&records[raw.pos..raw.pos + raw.encoded_len()]);
            e.1 += 1;
            e.2 = e.2.max(raw.timestamp());
        }
        for (p, (batch, count, max_ts)) in subs {
            let Some(part) = t.partitions.get(p as usize) else {
                continue; // ok: partition_for_key and sticky are below n
            };
            match part.enqueue(Bytes::from(batch), count, max_ts).await {
                Ok(rx) => pending.waits.push((p, count, rx)),
                Err(code) => pending.error = code,
            }
        }
        pending
    }
}

impl Records {
    /// Queues log entries the front end made itself (the Kafka front end's
    /// batch entries, `kafka::records::prepare`) on one partition, without
    /// checking them again: the caller vouches for every entry's length,
    /// CRC and records, for the topic's rules (keys on a compacted topic,
    /// its timestamp type and codec), for `span` (the offsets the entries
    /// take) and `max_timestamp` (debug builds check the entries anyway).
    /// Otherwise as [`Records::admit_produce_as`] for [`Route::Partition`].
    pub async fn admit_encoded(
        &self,
        topic: &str,
        partition: i32,
        records: Bytes,
        span: u32,
        max_timestamp: i64,
        producer: Option<ProducerBatch>,
    ) -> PendingProduce {
        let count = span;
        let route = Route::Partition(partition);
        let fail = |code| PendingProduce::failed(topic, route, code);
        debug_assert!(
            RecordIter::new(&records)
                .map(|r| r.map(|r| (r.span(), r.timestamp())))
                .collect::<Result<Vec<_>, _>>()
                .is_ok_and(|es| es.iter().map(|e| e.0).sum::<u64>() == u64::from(span)
                    && es.iter().map(|e| e.1).max() == Some(max_timestamp)),
            "a front end's entries do not check"
        );
        if self.is_shutting_down() {
            return fail(ErrorCode::ShuttingDown);
        }
        if count == 0 {
            return fail(ErrorCode::CorruptRecord);
        }
        let t = match self.auto_create(topic).await {
            Ok(t) => t,
            Err(e) => return fail(e.code()),
        };
        if let Some(pb) = &producer {
            if !self.producer_ids.issued(pb.id) {
                let mut p = fail(ErrorCode::InvalidRequest);
                p.producer_error = Some(ProducerError::UnknownProducerId);
                return p;
            }
        }
        let Some(p) = t.partition(partition) else {
            return fail(ErrorCode::UnknownPartition);
        };
        let mut pending = fail(ErrorCode::None);
        match p.enqueue_as(records, count, max_timestamp, producer).await {
            Ok(rx) => pending.waits.push((p.id, count, rx)),
            Err(code) => pending.error = code,
        }
        pending
    }

    /// Issues a new producer id (epoch 0) for an idempotent producer. Ids
    /// never repeat, across restarts too (see `coordinator::producer_ids`).
    ///
    /// # Errors
    /// The id block could not be persisted (STORAGE_ERROR; no id is issued).
    pub async fn init_producer_id(&self) -> Result<i64, ErrorCode> {
        let ids = std::sync::Arc::clone(&self.producer_ids);
        flume_rt::unblock(move || ids.issue())
            .await
            .map_err(|e: ProducerIdError| {
                tracing::error!(error = %e, "issuing a producer id failed");
                ErrorCode::StorageError
            })
    }
}

/// True when a checked batch holds a record without a key: a compacted
/// topic keeps the newest record of each key, so it refuses those (as
/// Kafka does, INVALID_RECORD).
fn has_keyless(records: &[u8]) -> bool {
    RecordIter::new(records)
        .flatten()
        .any(|raw| !matches!(raw.key_value(), Some((Some(_), _))))
}

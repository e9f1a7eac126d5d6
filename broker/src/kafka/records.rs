//! Kafka record sets <-> the log's entries.
//!
//! Produce ([`prepare`]): each batch of a partition's record set is checked
//! (length, magic, CRC-32C), its records decompressed within a byte limit
//! and walked (offset deltas 0, 1, ..., sizes, headers, keys on a compacted
//! topic), and the batch is then stored whole, as the producer sent it
//! (compressed or not, producer id, epoch, base sequence and flags kept), as
//! one Kafka batch entry of the log (`docs/storage.md`). The broker changes
//! only what Kafka's broker changes: the leader epoch (0), the maxTimestamp
//! (the records' largest, or the append time of a LogAppendTime topic, with
//! its attribute bit), and the codec when the topic's `compression.type`
//! names another one (the batch is then built again).
//!
//! Fetch ([`to_kafka`]): a batch entry goes out as the batch it is; each run
//! of Flume records (produced through Flume's protocol) goes out as one
//! uncompressed batch. No fetch decompresses anything.
//!
//! The batch format and its codecs live in [`flume_protocol::kafka_batch`],
//! shared with the SDK's Kafka client.

use bytes::{Bytes, BytesMut};
use flume_protocol::kafka_batch::{
    self, BatchBuilder, BatchError, BatchMeta, Compression, ATTR_LOG_APPEND_TIME,
};
use flume_protocol::record::{self, RECORD_HEADER_LEN};

use crate::domain::ProducerBatch;

pub use flume_protocol::kafka_batch::largest_batch;

/// Why a produced record set was refused.
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    /// Not a valid magic-2 record batch (bad CRC, truncated, unknown codec, ...).
    #[error("corrupt record batch: {0}")]
    Corrupt(String),
    /// Decoded, the records are larger than the request may grow to.
    #[error("record batch decodes to more than {limit} bytes")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// A batch Flume does not accept from a producer (a control batch, a
    /// transactional one without a transactional id, ...).
    #[error("invalid record: {0}")]
    Invalid(String),
    /// Records of the set Flume refuses, each named by its index (Kafka's
    /// `batch_index`, KIP-467): the whole set is refused. Every record is
    /// walked, so all of them are found; the first [`MAX_RECORD_ERRORS`]
    /// are listed.
    #[error("{}", records_message(.errors, .total))]
    Records {
        /// The bad records, in order (at most [`MAX_RECORD_ERRORS`]).
        errors: Vec<RecordFault>,
        /// How many records are bad in all.
        total: u32,
    },
}

/// Most bad records a refusal lists (each costs a few dozen bytes in the
/// response); those past it are counted, and a client reports them as
/// failed because of another record.
pub const MAX_RECORD_ERRORS: usize = 1_000;

/// One record Flume refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordFault {
    /// Its index in the partition's record set (in its batch, for the one
    /// batch a client sends).
    pub index: u32,
    /// What is wrong with it.
    pub kind: FaultKind,
}

/// What is wrong with a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultKind {
    /// Stored, it would be larger than the broker's `max_record_bytes`
    /// (Kafka's MESSAGE_TOO_LARGE).
    #[error(
        "a record of {size} bytes (16-byte header included) is above max_record_bytes ({limit})"
    )]
    TooLarge {
        /// The record's stored size.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// No key on a compacted topic, too many headers, a header name too
    /// long (Kafka's INVALID_RECORD).
    #[error("{0}")]
    Invalid(String),
}

impl std::fmt::Display for RecordFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "record {}: {}", self.index, self.kind)
    }
}

/// "3 of the batch's records are refused: record 0: ..., record 4: ... (the
/// first 3 shown)": a refusal's message, naming at most three records.
fn records_message(errors: &[RecordFault], total: &u32) -> String {
    const SHOWN: usize = 3;
    let first: Vec<String> = errors.iter().take(SHOWN).map(ToString::to_string).collect();
    let more = match usize::try_from(*total).unwrap_or(usize::MAX) {
        n if n > SHOWN => format!(" (the first {SHOWN} shown)"),
        _ => String::new(),
    };
    format!(
        "{total} of the batch's records are refused: {}{more}",
        first.join("; ")
    )
}

impl RecordsError {
    /// Whether a record is over the size limit (the refusal is then Kafka's
    /// MESSAGE_TOO_LARGE; otherwise INVALID_RECORD).
    pub fn has_too_large(&self) -> bool {
        matches!(self, RecordsError::Records { errors, .. }
            if errors.iter().any(|e| matches!(e.kind, FaultKind::TooLarge { .. })))
    }
}

impl From<BatchError> for RecordsError {
    fn from(e: BatchError) -> Self {
        match e {
            BatchError::TooLarge { limit } => RecordsError::TooLarge { limit },
            other => RecordsError::Corrupt(match other {
                BatchError::Corrupt(why) => why,
                other => other.to_string(),
            }),
        }
    }
}

/// What a partition's produce must respect.
#[derive(Debug, Clone, Copy)]
pub struct ProduceRules {
    /// Most bytes the set's records may decompress to, over all its batches.
    pub limit: usize,
    /// Largest record, as Flume's format would store it (16-byte header
    /// included), so every stored record can also be read by Flume's
    /// consumers.
    pub max_record_bytes: usize,
    /// The append time of a LogAppendTime topic.
    pub append_time: Option<i64>,
    /// The topic's `compression.type` when it names a codec (`None`:
    /// `producer`, the batch keeps its own).
    pub compression: Option<Compression>,
    /// The topic compacts: every record needs a key.
    pub keyed_only: bool,
    /// The produce is a transactional producer's: its batches must be
    /// transactional (and only then may they be).
    pub transactional: bool,
}

/// A produced record set, checked and ready to append.
#[derive(Debug)]
pub struct Prepared {
    /// The log entries (one Kafka batch entry per batch; offsets 0, the log
    /// assigns them).
    pub entries: Vec<u8>,
    /// Offsets the entries take.
    pub span: u32,
    /// Records in them.
    pub records: u32,
    /// The largest timestamp.
    pub max_timestamp: i64,
    /// The idempotent producer's stamp, if any.
    pub producer: Option<ProducerBatch>,
}

fn invalid(what: impl Into<String>) -> RecordsError {
    RecordsError::Invalid(what.into())
}

/// The size Flume's record format gives a record (header included).
fn stored_len(r: &kafka_batch::RecordView<'_, '_>) -> usize {
    RECORD_HEADER_LEN
        + record::MIN_PAYLOAD_LEN
        + r.key.map_or(0, <[u8]>::len)
        + r.value.map_or(0, <[u8]>::len)
        + r.headers
            .iter()
            .map(|(k, v)| 6 + k.len() + v.map_or(0, <[u8]>::len))
            .sum::<usize>()
}

/// Checks a produced record set (one or more batches) and makes the log
/// entries that store it. A stamped batch (producer id 0 or more) must be
/// the set's only batch, with an epoch and a base sequence of 0 or more.
///
/// # Errors
/// [`RecordsError`]: `Corrupt` for a batch that does not check or decode,
/// `TooLarge` past `rules.limit`, `Invalid` for a batch Kafka's broker
/// refuses as INVALID_RECORD, `Records` for records it refuses (past
/// `max_record_bytes`, no key on a compacted topic, bad headers), every one
/// of them found.
pub fn prepare(set: &[u8], rules: &ProduceRules) -> Result<Prepared, RecordsError> {
    let mut out = Prepared {
        entries: Vec::with_capacity(set.len() + 64),
        span: 0,
        records: 0,
        max_timestamp: i64::MIN,
        producer: None,
    };
    let mut inflated = 0usize;
    let mut batches = 0usize;
    // Records walked so far (each one's index), and the bad ones.
    let mut walked = 0u32;
    let mut faults: Vec<RecordFault> = Vec::new();
    let mut faults_total = 0u32;
    for batch in kafka_batch::batches(set) {
        let batch = batch?;
        let h = batch.header;
        batches += 1;
        if h.producer_id >= 0 {
            if h.producer_epoch < 0 || h.base_sequence < 0 {
                return Err(RecordsError::Corrupt(format!(
                    "producer {} with epoch {} and base sequence {}",
                    h.producer_id, h.producer_epoch, h.base_sequence
                )));
            }
            out.producer = Some(ProducerBatch {
                id: h.producer_id,
                epoch: h.producer_epoch,
                base_sequence: h.base_sequence,
            });
        }
        if out.producer.is_some() && batches > 1 {
            return Err(RecordsError::Corrupt(
                "an idempotent producer's record set must hold exactly one batch".into(),
            ));
        }
        if h.is_control() {
            return Err(invalid("control batches are written by the broker only"));
        }
        if h.is_transactional() != rules.transactional {
            return Err(invalid(if rules.transactional {
                "a transactional producer's batch must be transactional"
            } else {
                "a transactional batch needs a transactional id"
            }));
        }
        if h.is_transactional() && h.producer_id < 0 {
            return Err(invalid("a transactional batch without a producer id"));
        }
        if h.has_delete_horizon() {
            return Err(invalid("a delete horizon is the broker's to set"));
        }
        if h.count < 1 || i64::from(h.last_offset_delta) + 1 != i64::from(h.count) {
            return Err(RecordsError::Corrupt(format!(
                "a batch of {} records with last offset delta {}",
                h.count, h.last_offset_delta
            )));
        }
        let codec = h.compression()?;
        let data = batch.records(rules.limit.saturating_sub(inflated))?;
        inflated += data.len();
        let mut max_ts = i64::MIN;
        let mut next_delta = 0i32;
        kafka_batch::for_each_record::<RecordsError>(&h, &data, &mut |r| {
            if r.offset_delta != next_delta {
                return Err(RecordsError::Corrupt(format!(
                    "record {next_delta} has offset delta {}",
                    r.offset_delta
                )));
            }
            next_delta += 1;
            let index = walked;
            walked = walked.saturating_add(1);
            let fault = if r.headers.len() > usize::from(u16::MAX) {
                Some(FaultKind::Invalid(format!("{} headers", r.headers.len())))
            } else if let Some((k, _)) = r
                .headers
                .iter()
                .find(|(k, _)| k.len() > usize::from(u16::MAX))
            {
                Some(FaultKind::Invalid(format!(
                    "header name of {} bytes",
                    k.len()
                )))
            } else if rules.keyed_only && r.key.is_none() {
                Some(FaultKind::Invalid(
                    "a record without a key on a compacted topic".to_owned(),
                ))
            } else {
                let size = stored_len(&r);
                (size > rules.max_record_bytes).then_some(FaultKind::TooLarge {
                    size,
                    limit: rules.max_record_bytes,
                })
            };
            if let Some(kind) = fault {
                faults_total = faults_total.saturating_add(1);
                if faults.len() < MAX_RECORD_ERRORS {
                    faults.push(RecordFault { index, kind });
                }
            }
            max_ts = max_ts.max(r.timestamp);
            Ok(())
        })?;
        if faults_total > 0 {
            // Refused: the rest of the set is only walked for its faults.
            continue;
        }
        let max_ts = rules.append_time.unwrap_or(max_ts);
        let flags = match rules.append_time {
            Some(_) => (h.attributes | ATTR_LOG_APPEND_TIME) & !kafka_batch::ATTR_CODEC_MASK,
            None => h.attributes & !(ATTR_LOG_APPEND_TIME | kafka_batch::ATTR_CODEC_MASK),
        };
        match rules.compression.filter(|c| *c != codec) {
            Some(target) => {
                // The topic's codec: the batch is built again with it.
                let mut b = BatchBuilder::new(Some(h.base_timestamp));
                kafka_batch::for_each_record::<BatchError>(&h, &data, &mut |r| {
                    b.push(
                        r.offset_delta,
                        r.timestamp,
                        r.key,
                        r.value,
                        r.headers.iter().copied(),
                    );
                    Ok(())
                })?;
                let meta = BatchMeta {
                    flags,
                    producer_id: h.producer_id,
                    producer_epoch: h.producer_epoch,
                    base_sequence: h.base_sequence,
                    max_timestamp: Some(max_ts),
                    ..BatchMeta::default()
                };
                let rebuilt = b.finish(&meta, target)?;
                record::encode_batch_entry(&mut out.entries, &rebuilt);
            }
            None => {
                let mut whole = batch.bytes.to_vec();
                let mut fixed = h;
                fixed.base_offset = 0;
                fixed.partition_leader_epoch = 0;
                fixed.attributes = flags | codec.bits();
                fixed.max_timestamp = max_ts;
                fixed.write(&mut whole);
                if fixed.attributes != h.attributes || fixed.max_timestamp != h.max_timestamp {
                    kafka_batch::reseal(&mut whole);
                }
                record::encode_batch_entry(&mut out.entries, &whole);
            }
        }
        out.span = out
            .span
            .checked_add(u32::try_from(h.count).unwrap_or(u32::MAX))
            .ok_or_else(|| invalid("too many records"))?;
        out.records = out.span;
        out.max_timestamp = out.max_timestamp.max(max_ts);
    }
    if faults_total > 0 {
        return Err(RecordsError::Records {
            errors: faults,
            total: faults_total,
        });
    }
    if out.records == 0 {
        return Err(RecordsError::Corrupt("no records".into()));
    }
    Ok(out)
}

/// Log entries (a checked read) as a Kafka record set: each Kafka batch
/// entry as the batch it holds, each run of Flume records as one
/// uncompressed batch (offset deltas keep any gaps between them).
pub fn to_kafka(entries: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(entries.len() + entries.len() / 8 + 64);
    let mut run: Option<(u64, BatchBuilder)> = None;
    let flush = |out: &mut BytesMut, run: &mut Option<(u64, BatchBuilder)>| {
        if let Some((base, b)) = run.take() {
            let meta = BatchMeta {
                base_offset: i64::try_from(base).unwrap_or(i64::MAX),
                ..BatchMeta::default()
            };
            if let Ok(batch) = b.finish(&meta, Compression::None) {
                out.extend_from_slice(&batch);
            }
        }
    };
    let mut pos = 0usize;
    while let Some((offset, size, _)) = record::peek_entry(entries, pos) {
        let end = pos
            .saturating_add(RECORD_HEADER_LEN)
            .saturating_add(usize::try_from(size).unwrap_or(usize::MAX));
        let Some(payload) = entries.get(pos + RECORD_HEADER_LEN..end) else {
            break;
        };
        let raw = record::RawRecord {
            pos,
            offset,
            payload,
        };
        pos = end;
        if payload.len() < record::MIN_PAYLOAD_LEN {
            break;
        }
        if raw.is_batch() {
            flush(&mut out, &mut run);
            out.extend_from_slice(&raw.kafka_prefix());
            out.extend_from_slice(raw.kafka_body());
            continue;
        }
        let Some(f) = raw.fields() else {
            break;
        };
        let (base, b) = run.get_or_insert_with(|| (offset, BatchBuilder::new(None)));
        let delta = i32::try_from(offset.saturating_sub(*base)).unwrap_or(i32::MAX);
        b.push(delta, f.timestamp, f.key, f.value, f.headers());
        if delta == i32::MAX {
            flush(&mut out, &mut run);
        }
    }
    flush(&mut out, &mut run);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flume_protocol::kafka_batch::ATTR_CONTROL;
    use kafka_protocol::indexmap::IndexMap;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{
        Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    fn rules() -> ProduceRules {
        ProduceRules {
            limit: 1 << 20,
            max_record_bytes: 1 << 20,
            append_time: None,
            compression: None,
            keyed_only: false,
            transactional: false,
        }
    }

    /// A batch as a Kafka client sends it, built by an independent encoder.
    fn client_batch(c: kafka_protocol::records::Compression, keys: &[Option<&str>]) -> Bytes {
        let recs: Vec<Record> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let mut h = IndexMap::new();
                h.insert(
                    StrBytes::from_static_str("h"),
                    Some(Bytes::from_static(b"v")),
                );
                Record {
                    transactional: false,
                    control: false,
                    delete_horizon: false,
                    partition_leader_epoch: -1,
                    producer_id: -1,
                    producer_epoch: -1,
                    timestamp_type: TimestampType::Creation,
                    offset: i as i64,
                    // offset - sequence the same for all: one batch.
                    sequence: i as i32,
                    timestamp: 1_700_000_000_000 + i as i64,
                    key: k.map(|k| Bytes::copy_from_slice(k.as_bytes())),
                    value: Some(Bytes::from(format!("value {i} value value value"))),
                    headers: h,
                }
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            &recs,
            &RecordEncodeOptions {
                version: 2,
                compression: c,
            },
        )
        .unwrap();
        buf.freeze()
    }

    fn stored(p: &Prepared, base: u64) -> Vec<u8> {
        let mut e = p.entries.clone();
        record::assign_offsets(&mut e, base);
        e
    }

    #[test]
    fn a_batch_is_stored_as_sent_and_served_back_with_its_offsets() {
        use kafka_protocol::records::Compression as C;
        for c in [C::None, C::Gzip, C::Snappy, C::Lz4, C::Zstd] {
            let sent = client_batch(c, &[Some("k0"), None, Some("k2")]);
            let p = prepare(&sent, &rules()).unwrap();
            assert_eq!((p.span, p.records), (3, 3));
            assert_eq!(p.max_timestamp, 1_700_000_000_002);
            let entries = stored(&p, 40);
            let served = to_kafka(&entries);
            // The records section is the producer's own bytes, compressed as it was.
            assert_eq!(&served[61..], &sent[61..], "{c:?}");
            let mut b = served.clone();
            let set = RecordBatchDecoder::decode(&mut b).unwrap();
            let offsets: Vec<i64> = set.records.iter().map(|r| r.offset).collect();
            assert_eq!(offsets, vec![40, 41, 42]);
            assert_eq!(set.records[1].key, None);
            // Flume's consumers read the same records out of the entry.
            let e = record::expand(&entries, 41, usize::MAX, 1 << 20).unwrap();
            let recs = record::decode_all(&Bytes::from(e.records.into_owned())).unwrap();
            assert_eq!(
                recs.iter().map(|r| r.offset).collect::<Vec<_>>(),
                vec![41, 42]
            );
            assert_eq!(recs[1].key.as_deref(), Some(&b"k2"[..]));
        }
    }

    #[test]
    fn flume_records_are_served_as_one_batch_keeping_gaps() {
        let mut entries = Vec::new();
        record::encode(
            &mut entries,
            0,
            5,
            Some(b"a"),
            b"x",
            &[flume_protocol::Header::new("h", "1")],
        );
        record::encode_nullable(&mut entries, 0, 7, Some(b"b"), None, &[]);
        record::assign_offsets(&mut entries, 10);
        // The second record sits after a gap (as the cleaner leaves it).
        let second = record::RecordIter::new(&entries)
            .next()
            .unwrap()
            .unwrap()
            .encoded_len();
        entries[second..second + 8].copy_from_slice(&20u64.to_be_bytes());
        let mut b = to_kafka(&entries);
        let set = RecordBatchDecoder::decode(&mut b).unwrap();
        assert_eq!(set.records.len(), 2);
        assert_eq!((set.records[0].offset, set.records[1].offset), (10, 20));
        assert_eq!(set.records[1].value, None);
        assert_eq!(
            set.records[0].headers.get(&b"h"[..]).unwrap().as_deref(),
            Some(&b"1"[..])
        );
    }

    #[test]
    fn append_time_and_the_topics_codec_are_applied() {
        use kafka_protocol::records::Compression as C;
        let sent = client_batch(C::Gzip, &[Some("a"), Some("b")]);
        let r = ProduceRules {
            append_time: Some(42),
            compression: Some(Compression::Zstd),
            ..rules()
        };
        let p = prepare(&sent, &r).unwrap();
        let entries = stored(&p, 0);
        let raw = record::RecordIter::new(&entries).next().unwrap().unwrap();
        let h = raw.batch_header().unwrap();
        assert_eq!(h.compression().unwrap(), Compression::Zstd);
        assert!(h.log_append_time());
        assert_eq!((h.max_timestamp, p.max_timestamp), (42, 42));
        let mut b = to_kafka(&entries);
        let set = RecordBatchDecoder::decode(&mut b).unwrap();
        assert_eq!(set.records.len(), 2);
        assert!(set
            .records
            .iter()
            .all(|r| r.timestamp_type == TimestampType::LogAppend));
        // What a consumer reads for each record's time: the append time.
        let e = record::expand(&entries, 0, usize::MAX, 1 << 20).unwrap();
        let recs = record::decode_all(&Bytes::from(e.records.into_owned())).unwrap();
        assert!(recs.iter().all(|r| r.timestamp == 42));
    }

    #[test]
    fn refusals() {
        use kafka_protocol::records::Compression as C;
        let keyless = client_batch(C::None, &[Some("a"), None]);
        let compacted = ProduceRules {
            keyed_only: true,
            ..rules()
        };
        match prepare(&keyless, &compacted) {
            Err(e @ RecordsError::Records { .. }) => assert!(!e.has_too_large(), "{e}"),
            other => panic!("{other:?}"),
        }
        let too_large = prepare(
            &keyless,
            &ProduceRules {
                max_record_bytes: 40,
                ..rules()
            },
        );
        assert!(
            matches!(&too_large, Err(e) if e.has_too_large()),
            "{too_large:?}"
        );
        assert!(matches!(
            prepare(
                &keyless,
                &ProduceRules {
                    limit: 10,
                    ..rules()
                }
            ),
            Err(RecordsError::TooLarge { .. })
        ));
        let mut bad = keyless.to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        assert!(matches!(
            prepare(&bad, &rules()),
            Err(RecordsError::Corrupt(_))
        ));
        assert!(matches!(
            prepare(&[], &rules()),
            Err(RecordsError::Corrupt(_))
        ));
        for cut in 1..keyless.len() {
            assert!(prepare(&keyless[..cut], &rules()).is_err());
        }
        // A control batch is the broker's.
        let mut b = BatchBuilder::new(None);
        b.push(0, 1, None, Some(&[0, 0, 0, 0][..]), []);
        let control = b
            .finish(
                &BatchMeta {
                    flags: ATTR_CONTROL,
                    ..BatchMeta::default()
                },
                Compression::None,
            )
            .unwrap();
        assert!(matches!(
            prepare(&control, &rules()),
            Err(RecordsError::Invalid(_))
        ));
    }

    #[test]
    fn every_bad_record_is_named_by_its_index_in_the_set() {
        use kafka_protocol::records::Compression as C;
        let compacted = ProduceRules {
            keyed_only: true,
            ..rules()
        };
        // Two batches: the indexes go on across them.
        let keys: Vec<Option<&str>> = (0..10).map(|i| (i % 4 != 0).then_some("k")).collect();
        let mut set = client_batch(C::Gzip, &keys).to_vec();
        set.extend_from_slice(&client_batch(C::None, &[Some("k"), None]));
        let Err(e) = prepare(&set, &compacted) else {
            panic!("keyless records on a compacted topic")
        };
        let RecordsError::Records { errors, total } = &e else {
            panic!("{e:?}")
        };
        let indexes: Vec<u32> = errors.iter().map(|f| f.index).collect();
        assert_eq!(indexes, vec![0, 4, 8, 11]);
        assert_eq!(*total, 4);
        assert!(errors
            .iter()
            .all(|f| f.kind.to_string() == "a record without a key on a compacted topic"));
        assert_eq!(
            e.to_string(),
            "4 of the batch's records are refused: record 0: a record without a key on a \
             compacted topic; record 4: a record without a key on a compacted topic; record 8: \
             a record without a key on a compacted topic (the first 3 shown)"
        );
        // Past the listing limit the rest are counted.
        let many: Vec<Option<&str>> = vec![None; MAX_RECORD_ERRORS + 5];
        match prepare(&client_batch(C::None, &many), &compacted) {
            Err(RecordsError::Records { errors, total }) => {
                assert_eq!(errors.len(), MAX_RECORD_ERRORS);
                assert_eq!(total as usize, MAX_RECORD_ERRORS + 5);
            }
            other => panic!("{other:?}"),
        }
    }

    proptest::proptest! {
        #[test]
        fn prepare_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = prepare(&bytes, &rules());
        }

        #[test]
        fn to_kafka_never_panics_on_damaged_entries(at in 0usize..200, byte in proptest::prelude::any::<u8>()) {
            let sent = client_batch(kafka_protocol::records::Compression::None, &[Some("k")]);
            let mut e = stored(&prepare(&sent, &rules()).unwrap(), 0);
            let i = at % e.len();
            e[i] = byte;
            let _ = to_kafka(&e);
        }
    }
}

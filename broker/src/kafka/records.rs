//! Kafka record batches <-> Flume records.
//!
//! Produce: every batch of a partition's record set is decoded (and
//! decompressed: gzip, snappy, lz4, zstd) by `kafka-protocol` into
//! [`Rec`]s, which the engine stores in Flume's own record format. Fetch:
//! stored records are encoded as one uncompressed magic-2 batch, which
//! every client decodes.
//!
//! Mapping: key, value, timestamp (CreateTime) and headers carry over; a
//! Kafka null value is stored as an empty value and a null header value as
//! an empty one; producer id, epoch and sequence are not kept (phase 2).

use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
    TimestampType, NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE,
};

use super::backend::Rec;

/// Why a produced record set was refused.
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    /// Not a valid magic-2 record batch (bad CRC, truncated, unknown codec, ...).
    #[error("corrupt record batch: {0}")]
    Corrupt(String),
    /// Decompressed, the batch is larger than the request may grow to.
    #[error("record batch decompresses to more than {limit} bytes")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
}

/// Decodes a produced record set (one or more batches) into records.
/// `limit` bounds the sum of keys, values and headers after decompression.
///
/// # Errors
/// [`RecordsError`].
pub fn decode(records: &Bytes, limit: usize) -> Result<Vec<Rec>, RecordsError> {
    let mut buf = records.clone();
    let sets = RecordBatchDecoder::decode_all(&mut buf)
        .map_err(|e| RecordsError::Corrupt(format!("{e:#}")))?;
    let mut out = Vec::new();
    let mut total = 0usize;
    for set in sets {
        if set.version != 2 {
            return Err(RecordsError::Corrupt(format!(
                "record batch magic {} (only 2 is accepted)",
                set.version
            )));
        }
        for r in set.records {
            if r.control {
                continue;
            }
            let headers: Vec<(String, Bytes)> = r
                .headers
                .into_iter()
                .map(|(k, v)| (k.as_str().to_owned(), v.unwrap_or_default()))
                .collect();
            let rec = Rec {
                offset: r.offset,
                timestamp: r.timestamp,
                key: r.key,
                value: r.value.unwrap_or_default(),
                headers,
            };
            total = total
                .saturating_add(rec.key.as_ref().map_or(0, Bytes::len))
                .saturating_add(rec.value.len())
                .saturating_add(rec.headers.iter().map(|(k, v)| k.len() + v.len()).sum());
            if total > limit {
                return Err(RecordsError::TooLarge { limit });
            }
            out.push(rec);
        }
    }
    Ok(out)
}

/// Encodes stored records as one uncompressed magic-2 batch (empty when
/// there are none). Offsets must be consecutive, as Flume's are.
///
/// # Errors
/// Only if the encoder refuses the records (it does not for valid ones).
pub fn encode(records: &[Rec]) -> Result<Bytes, RecordsError> {
    if records.is_empty() {
        return Ok(Bytes::new());
    }
    let krs: Vec<Record> = records
        .iter()
        .map(|r| {
            let mut headers = IndexMap::with_capacity(r.headers.len());
            for (k, v) in &r.headers {
                headers.insert(StrBytes::from_string(k.clone()), Some(v.clone()));
            }
            Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
                producer_id: NO_PRODUCER_ID,
                producer_epoch: NO_PRODUCER_EPOCH,
                timestamp_type: TimestampType::Creation,
                offset: r.offset,
                sequence: NO_SEQUENCE,
                timestamp: r.timestamp,
                key: r.key.clone(),
                value: Some(r.value.clone()),
                headers,
            }
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &krs,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| RecordsError::Corrupt(format!("{e:#}")))?;
    Ok(buf.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(offset: i64, key: Option<&str>, value: &str, headers: &[(&str, &str)]) -> Rec {
        Rec {
            offset,
            timestamp: 1_700_000_000_000 + offset,
            key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
            value: Bytes::copy_from_slice(value.as_bytes()),
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Bytes::copy_from_slice(v.as_bytes())))
                .collect(),
        }
    }

    #[test]
    fn records_round_trip_through_a_batch() {
        let rs = vec![
            rec(7, Some("k"), "v", &[("a", "1"), ("b", "")]),
            rec(8, None, "", &[]),
            rec(9, Some(""), "x", &[("c", "3")]),
        ];
        let batch = encode(&rs).unwrap();
        assert_eq!(decode(&batch, 1 << 20).unwrap(), rs);
    }

    #[test]
    fn every_codec_decodes() {
        let rs = vec![
            rec(0, Some("k0"), "hello hello hello", &[("h", "v")]),
            rec(1, Some("k1"), "world", &[]),
        ];
        for c in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let krs: Vec<Record> = rs
                .iter()
                .map(|r| {
                    let mut h = IndexMap::new();
                    for (k, v) in &r.headers {
                        h.insert(StrBytes::from_string(k.clone()), Some(v.clone()));
                    }
                    Record {
                        transactional: false,
                        control: false,
                        delete_horizon: false,
                        partition_leader_epoch: -1,
                        producer_id: -1,
                        producer_epoch: -1,
                        timestamp_type: TimestampType::Creation,
                        offset: r.offset,
                        sequence: -1,
                        timestamp: r.timestamp,
                        key: r.key.clone(),
                        value: Some(r.value.clone()),
                        headers: h,
                    }
                })
                .collect();
            let mut buf = BytesMut::new();
            RecordBatchEncoder::encode(
                &mut buf,
                &krs,
                &RecordEncodeOptions {
                    version: 2,
                    compression: c,
                },
            )
            .unwrap();
            assert_eq!(decode(&buf.freeze(), 1 << 20).unwrap(), rs, "{c:?}");
        }
    }

    #[test]
    fn corrupt_and_oversized_batches_are_refused() {
        let batch = encode(&[rec(0, Some("k"), "value", &[])]).unwrap();
        let mut bad = batch.to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 0xff; // CRC no longer matches
        assert!(matches!(
            decode(&Bytes::from(bad), 1 << 20),
            Err(RecordsError::Corrupt(_))
        ));
        for cut in 0..batch.len() {
            assert!(decode(&batch.slice(..cut), 1 << 20).map_or(true, |r| r.is_empty()));
        }
        assert!(matches!(
            decode(&batch, 3),
            Err(RecordsError::TooLarge { .. })
        ));
        assert!(decode(&Bytes::from_static(&[0xff; 80]), 1 << 20).is_err());
    }
}

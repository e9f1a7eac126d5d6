//! Kafka record batches (magic 2) <-> Flume records.
//!
//! Produce: each batch of a partition's record set is checked (length,
//! magic, CRC-32C), its records decompressed (gzip, snappy, lz4, zstd) and
//! parsed into `Rec`s, which the engine stores in Flume's own record format.
//!
//! Decompression is bounded: the codecs run as streams into a buffer that
//! stops growing at the record set's limit (`max_decoded_bytes`, counted over
//! all its batches), so a small batch that would inflate to gigabytes is
//! refused (MESSAGE_TOO_LARGE) after at most that many bytes were produced,
//! never allocated whole. The output buffer grows by doubling, so it holds
//! at most twice the limit; snappy blocks declare their length first and are
//! checked before they are allocated; zstd frames may use a window of at
//! most 2^[`ZSTD_WINDOW_LOG_MAX`] bytes (what Kafka clients' default levels
//! use is far below; a frame asking for more is CORRUPT_MESSAGE). Fetch: stored records go out as one
//! uncompressed magic-2 batch, which every client decodes.
//!
//! The batch and record layout is parsed here rather than with
//! `kafka-protocol`'s `RecordBatchDecoder` because that one keeps headers in
//! a map, which drops a repeated header name; Kafka keeps every header in
//! order, and so does Flume.
//!
//! Mapping: key, value, timestamp and headers carry over (a batch with
//! LogAppendTime gives its records the batch's max timestamp); a null value
//! (a tombstone) and a null header value stay null, distinct from empty
//! ones; control batches are skipped. The producer id, epoch and base
//! sequence of an idempotent producer's batch come out beside the records
//! ([`Decoded::producer`]) for the partition's sequence check; they are not
//! stored with the records.
//!
//! ```text
//! batch: baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 (2)
//!        | crc u32 (CRC-32C of what follows) | attributes i16 | lastOffsetDelta i32
//!        | baseTimestamp i64 | maxTimestamp i64 | producerId i64 | producerEpoch i16
//!        | baseSequence i32 | count i32 | records (compressed per attributes & 7)
//! record: length varint | attributes i8 | timestampDelta varlong | offsetDelta varint
//!         | keyLength varint (-1 null) | key | valueLength varint | value
//!         | headerCount varint | (keyLength varint | key | valueLength varint | value)*
//! ```

use std::io::Read;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::backend::Rec;
use crate::domain::ProducerBatch;

/// Largest zstd window accepted (2^23 = 8 MiB), bounding the decoder's memory.
pub const ZSTD_WINDOW_LOG_MAX: u32 = 23;

/// The start of a snappy stream in the xerial framing (Java clients' snappy).
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];

/// A produced record set, decoded.
#[derive(Debug, Default)]
pub struct Decoded {
    /// The records, in order.
    pub records: Vec<Rec>,
    /// The idempotent producer's stamp (of the one batch), if any.
    pub producer: Option<ProducerBatch>,
}

/// Bytes of a batch header, from baseOffset to count.
pub const BATCH_HEADER_LEN: usize = 61;
/// Where the CRC-covered part starts (attributes).
const CRC_START: usize = 21;

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
    /// One record, stored, would be larger than the broker's `max_record_bytes`.
    #[error(
        "a record of {size} bytes (16-byte header included) is above max_record_bytes ({limit})"
    )]
    RecordTooLarge {
        /// The record's stored size.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// A record Flume cannot store (too many headers, a header name too long).
    #[error("invalid record: {0}")]
    Invalid(String),
}

fn corrupt(what: impl Into<String>) -> RecordsError {
    RecordsError::Corrupt(what.into())
}

/// Reads `r` to its end, refusing as soon as the output passes `limit`.
fn read_capped(mut r: impl Read, limit: usize, codec: &str) -> Result<Vec<u8>, RecordsError> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = match r.read(&mut chunk) {
            Ok(0) => return Ok(out),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(corrupt(format!("{codec}: {e}"))),
        };
        if n > limit.saturating_sub(out.len()) {
            return Err(RecordsError::TooLarge { limit });
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// One raw snappy block appended to `out`, its declared length checked
/// against the room left before anything is allocated.
fn snappy_block(block: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), RecordsError> {
    let len = snap::raw::decompress_len(block).map_err(|e| corrupt(format!("snappy: {e}")))?;
    if len > limit.saturating_sub(out.len()) {
        return Err(RecordsError::TooLarge { limit });
    }
    let at = out.len();
    out.resize(at + len, 0);
    let n = snap::raw::Decoder::new()
        .decompress(block, &mut out[at..])
        .map_err(|e| corrupt(format!("snappy: {e}")))?;
    out.truncate(at + n);
    Ok(())
}

/// Snappy as Kafka clients send it: the xerial framing (a 16-byte header,
/// then blocks of a 4-byte length and raw snappy) or one raw snappy block.
fn snappy(data: &[u8], limit: usize) -> Result<Vec<u8>, RecordsError> {
    let mut out = Vec::new();
    if !data.starts_with(&XERIAL_MAGIC) {
        snappy_block(data, &mut out, limit)?;
        return Ok(out);
    }
    let mut rest = data
        .get(16..)
        .ok_or_else(|| corrupt("snappy: short xerial header"))?;
    while !rest.is_empty() {
        let (len, tail) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| corrupt("snappy: block length cut short"))?;
        let len = usize::try_from(u32::from_be_bytes(*len)).unwrap_or(usize::MAX);
        if len > tail.len() {
            return Err(corrupt(format!(
                "snappy: block of {len} bytes, {} left",
                tail.len()
            )));
        }
        let (block, tail) = tail.split_at(len);
        snappy_block(block, &mut out, limit)?;
        rest = tail;
    }
    Ok(out)
}

/// Decompresses a batch's records, producing at most `limit` bytes.
fn decompress(codec: i16, data: Bytes, limit: usize) -> Result<Bytes, RecordsError> {
    let out = match codec {
        0 => {
            if data.len() > limit {
                return Err(RecordsError::TooLarge { limit });
            }
            return Ok(data);
        }
        1 => read_capped(flate2::read::MultiGzDecoder::new(&data[..]), limit, "gzip")?,
        2 => snappy(&data, limit)?,
        3 => {
            let d = lz4::Decoder::new(&data[..]).map_err(|e| corrupt(format!("lz4: {e}")))?;
            read_capped(d, limit, "lz4")?
        }
        4 => {
            let mut d = zstd::stream::read::Decoder::new(&data[..])
                .map_err(|e| corrupt(format!("zstd: {e}")))?;
            d.window_log_max(ZSTD_WINDOW_LOG_MAX)
                .map_err(|e| corrupt(format!("zstd: {e}")))?;
            read_capped(d, limit, "zstd")?
        }
        c => return Err(corrupt(format!("compression codec {c}"))),
    };
    Ok(Bytes::from(out))
}

/// Decodes a produced record set (one or more batches) into records.
/// `limit` bounds the sum of keys, values and headers.
///
/// # Errors
/// [`RecordsError`].
pub fn decode(records: &Bytes, limit: usize) -> Result<Vec<Rec>, RecordsError> {
    decode_set(records, limit).map(|d| d.records)
}

/// Decodes a produced record set into records and the idempotent
/// producer's stamp (see [`parse_set`]).
///
/// # Errors
/// [`RecordsError`].
pub fn decode_set(records: &Bytes, limit: usize) -> Result<Decoded, RecordsError> {
    let mut out = Vec::new();
    let producer = parse_set(records, limit, &mut |r: RecordView<'_, '_>| {
        out.push(Rec {
            offset: -1,
            timestamp: r.timestamp,
            key: r.key.map(Bytes::copy_from_slice),
            value: r.value.map(Bytes::copy_from_slice),
            headers: r
                .headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.map(Bytes::copy_from_slice)))
                .collect(),
        });
        Ok(())
    })?;
    Ok(Decoded {
        records: out,
        producer,
    })
}

/// A produced record set in Flume's stored record format, ready to append.
#[derive(Debug)]
pub struct Transcoded {
    /// The records, encoded (offsets 0; the log assigns them).
    pub records: Vec<u8>,
    /// How many.
    pub count: u32,
    /// The largest timestamp.
    pub max_timestamp: i64,
    /// The idempotent producer's stamp, if any.
    pub producer: Option<ProducerBatch>,
}

/// Decodes a produced record set straight into Flume's stored record format
/// (`docs/storage.md`), one pass, no record copied twice: what the produce
/// path appends. Checks what the engine checks of a Flume batch: each
/// record's size against `max_record_bytes` (16-byte header included) and
/// at most `u16::MAX` headers with names of at most `u16::MAX` bytes. The
/// stored records together may not pass `limit` either (TooLarge).
///
/// # Errors
/// [`RecordsError`]: besides [`parse_set`]'s, `RecordTooLarge` and `Invalid`.
pub fn transcode(
    records: &Bytes,
    limit: usize,
    max_record_bytes: usize,
) -> Result<Transcoded, RecordsError> {
    transcode_at(records, limit, max_record_bytes, None)
}

/// As [`transcode`]; with `append_time`, every record gets that timestamp
/// (a topic whose `message.timestamp.type` is LogAppendTime).
///
/// # Errors
/// As [`transcode`].
pub fn transcode_at(
    records: &Bytes,
    limit: usize,
    max_record_bytes: usize,
    append_time: Option<i64>,
) -> Result<Transcoded, RecordsError> {
    let mut out: Vec<u8> = Vec::with_capacity(records.len().saturating_mul(2).min(limit));
    let mut count = 0u32;
    let mut max_timestamp = i64::MIN;
    let producer = parse_set(records, limit, &mut |r: RecordView<'_, '_>| {
        let n = u16::try_from(r.headers.len())
            .map_err(|_| RecordsError::Invalid(format!("{} headers", r.headers.len())))?;
        let start = out.len();
        out.extend_from_slice(&[0u8; 16]); // offset 0, size and CRC patched below
        out.push(0);
        let timestamp = append_time.unwrap_or(r.timestamp);
        out.extend_from_slice(&timestamp.to_be_bytes());
        put_stored(&mut out, r.key)?;
        put_stored(&mut out, r.value)?;
        out.extend_from_slice(&n.to_be_bytes());
        for (k, v) in r.headers {
            let kl = u16::try_from(k.len())
                .map_err(|_| RecordsError::Invalid(format!("header name of {} bytes", k.len())))?;
            out.extend_from_slice(&kl.to_be_bytes());
            out.extend_from_slice(k.as_bytes());
            put_stored(&mut out, *v)?;
        }
        let size = out.len() - start;
        if size > max_record_bytes {
            return Err(RecordsError::RecordTooLarge {
                size,
                limit: max_record_bytes,
            });
        }
        let payload = u32::try_from(size - 16).map_err(|_| RecordsError::RecordTooLarge {
            size,
            limit: max_record_bytes,
        })?;
        if out.len() > limit {
            // Stored, the set would be larger than a frame (many tiny records).
            return Err(RecordsError::TooLarge { limit });
        }
        let crc = crc32fast::hash(&out[start + 16..]);
        out[start + 8..start + 12].copy_from_slice(&payload.to_be_bytes());
        out[start + 12..start + 16].copy_from_slice(&crc.to_be_bytes());
        count = count.saturating_add(1);
        max_timestamp = max_timestamp.max(timestamp);
        Ok(())
    })?;
    Ok(Transcoded {
        records: out,
        count,
        max_timestamp,
        producer,
    })
}

fn len_i32(n: usize) -> Result<i32, RecordsError> {
    i32::try_from(n).map_err(|_| RecordsError::Invalid(format!("a field of {n} bytes")))
}

/// A nullable field in Flume's stored format: `[len i32, -1 = null][bytes]`.
fn put_stored(out: &mut Vec<u8>, b: Option<&[u8]>) -> Result<(), RecordsError> {
    match b {
        None => out.extend_from_slice(&(-1i32).to_be_bytes()),
        Some(b) => {
            out.extend_from_slice(&len_i32(b.len())?.to_be_bytes());
            out.extend_from_slice(b);
        }
    }
    Ok(())
}

/// One record of a produced batch, borrowed from the (decompressed) batch.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a, 'h> {
    /// The record's timestamp (the batch's max for LogAppendTime).
    pub timestamp: i64,
    /// Key (null: none).
    pub key: Option<&'a [u8]>,
    /// Value (`None`: null, a tombstone).
    pub value: Option<&'a [u8]>,
    /// Headers in order (`None`: a null value), names checked to be UTF-8.
    pub headers: &'h [(&'a str, Option<&'a [u8]>)],
}

/// A forward-only reader over a slice, for the records inside a batch.
struct Cur<'a> {
    b: &'a [u8],
}

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], RecordsError> {
        if n > self.b.len() {
            return Err(corrupt(format!(
                "{what} of {n} bytes, {} left",
                self.b.len()
            )));
        }
        let (head, tail) = self.b.split_at(n);
        self.b = tail;
        Ok(head)
    }

    fn varint_u64(&mut self) -> Result<u64, RecordsError> {
        let mut v = 0u64;
        for i in 0..10 {
            let Some((&b, rest)) = self.b.split_first() else {
                return Err(corrupt("varint cut short"));
            };
            self.b = rest;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(corrupt("varint longer than 10 bytes"))
    }

    fn varlong(&mut self) -> Result<i64, RecordsError> {
        let n = self.varint_u64()?;
        Ok(((n >> 1) as i64) ^ -((n & 1) as i64))
    }

    fn varint(&mut self) -> Result<i32, RecordsError> {
        i32::try_from(self.varlong()?).map_err(|_| corrupt("varint out of i32 range"))
    }

    /// A length-prefixed field; -1 is null.
    fn nullable(&mut self, what: &str) -> Result<Option<&'a [u8]>, RecordsError> {
        match self.varint()? {
            -1 => Ok(None),
            n => {
                let n = usize::try_from(n).map_err(|_| corrupt(format!("{what} length {n}")))?;
                self.take(n, what).map(Some)
            }
        }
    }
}

/// The size of the largest record batch in a produced record set, by the
/// batches' length fields (what Kafka compares with `max.message.bytes`);
/// stops at the first length that does not fit (the parse reports it).
pub fn largest_batch(records: &[u8]) -> usize {
    let mut at = 0usize;
    let mut largest = 0usize;
    while let Some(len) = records.get(at + 8..at + 12) {
        let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
        let Some(size) = usize::try_from(len).ok().and_then(|l| l.checked_add(12)) else {
            break;
        };
        largest = largest.max(size);
        at = match at.checked_add(size) {
            Some(next) => next,
            None => break,
        };
    }
    largest
}

/// Parses a produced record set (one or more batches), handing each record
/// to `sink` in order, and returns the idempotent producer's stamp. `limit`
/// bounds the sum of keys, values and headers and, over all batches, the
/// bytes decompression may produce. A stamped batch (producer id 0 or more)
/// must be the set's only batch, with an epoch and a base sequence of 0 or
/// more and one record per offset delta.
///
/// # Errors
/// [`RecordsError`], or the sink's.
pub fn parse_set(
    records: &Bytes,
    limit: usize,
    sink: &mut dyn FnMut(RecordView<'_, '_>) -> Result<(), RecordsError>,
) -> Result<Option<ProducerBatch>, RecordsError> {
    let mut buf = records.clone();
    let mut total = 0usize;
    let mut inflated = 0usize;
    let mut producer = None;
    let mut batches = 0usize;
    while buf.has_remaining() {
        if buf.remaining() < BATCH_HEADER_LEN {
            return Err(corrupt(format!(
                "{} bytes left, a batch header takes {BATCH_HEADER_LEN}",
                buf.remaining()
            )));
        }
        let len = i32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]);
        let size = usize::try_from(len)
            .ok()
            .and_then(|l| l.checked_add(12))
            .filter(|s| (BATCH_HEADER_LEN..=buf.remaining()).contains(s))
            .ok_or_else(|| {
                corrupt(format!(
                    "batch length {len}, {} bytes left",
                    buf.remaining()
                ))
            })?;
        let mut batch = buf.split_to(size);
        let magic = batch[16];
        if magic != 2 {
            return Err(corrupt(format!("magic {magic} (only 2 is accepted)")));
        }
        let crc = u32::from_be_bytes([batch[17], batch[18], batch[19], batch[20]]);
        let actual = crc32c::crc32c(&batch[CRC_START..]);
        if crc != actual {
            return Err(corrupt(format!(
                "CRC {crc:#010x}, the batch's is {actual:#010x}"
            )));
        }
        batch.advance(CRC_START);
        let attributes = batch.get_i16();
        let last_offset_delta = batch.get_i32();
        let base_ts = batch.get_i64();
        let max_ts = batch.get_i64();
        let producer_id = batch.get_i64();
        let producer_epoch = batch.get_i16();
        let base_sequence = batch.get_i32();
        let count = batch.get_i32();
        batches += 1;
        if producer_id >= 0 {
            if producer_epoch < 0 || base_sequence < 0 {
                return Err(corrupt(format!(
                    "producer {producer_id} with epoch {producer_epoch} and base sequence {base_sequence}"
                )));
            }
            if i64::from(last_offset_delta) + 1 != i64::from(count) {
                return Err(corrupt(format!(
                    "idempotent batch of {count} records with last offset delta {last_offset_delta}"
                )));
            }
            producer = Some(ProducerBatch {
                id: producer_id,
                epoch: producer_epoch,
                base_sequence,
            });
        }
        if producer.is_some() && batches > 1 {
            return Err(corrupt(
                "an idempotent producer's record set must hold exactly one batch",
            ));
        }
        if attributes & 0x20 != 0 {
            continue; // control batch (transaction markers)
        }
        let log_append_time = attributes & 0x08 != 0;
        let data = decompress(attributes & 0x07, batch, limit.saturating_sub(inflated))?;
        inflated += data.len();
        let count = usize::try_from(count).map_err(|_| corrupt(format!("record count {count}")))?;
        let mut cur = Cur { b: &data[..] };
        let mut headers: Vec<(&str, Option<&[u8]>)> = Vec::new();
        for i in 0..count {
            let rlen = cur.varint()?;
            let rlen =
                usize::try_from(rlen).map_err(|_| corrupt(format!("record {i} length {rlen}")))?;
            let mut r = Cur {
                b: cur.take(rlen, "record")?,
            };
            if r.b.is_empty() {
                return Err(corrupt(format!("record {i} is empty")));
            }
            r.take(1, "attributes")?;
            let ts_delta = r.varlong()?;
            let _offset_delta = r.varint()?;
            let key = r.nullable("key")?;
            let value = r.nullable("value")?;
            let n = r.varint()?;
            let n = usize::try_from(n).map_err(|_| corrupt(format!("header count {n}")))?;
            headers.clear();
            let mut size = key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len);
            for _ in 0..n {
                let k = r.nullable("header name")?.unwrap_or_default();
                let k = std::str::from_utf8(k).map_err(|_| corrupt("header name is not UTF-8"))?;
                let v = r.nullable("header value")?;
                size += k.len() + v.map_or(0, <[u8]>::len);
                headers.push((k, v));
            }
            if !r.b.is_empty() {
                return Err(corrupt(format!(
                    "record {i} has {} bytes past its end",
                    r.b.len()
                )));
            }
            total = total.saturating_add(size);
            if total > limit {
                return Err(RecordsError::TooLarge { limit });
            }
            sink(RecordView {
                timestamp: if log_append_time {
                    max_ts
                } else {
                    base_ts.wrapping_add(ts_delta)
                },
                key,
                value,
                headers: &headers,
            })?;
        }
        if !cur.b.is_empty() {
            return Err(corrupt(format!(
                "{} bytes past the batch's {count} records",
                cur.b.len()
            )));
        }
    }
    Ok(producer)
}

fn put_varlong(out: &mut BytesMut, v: i64) {
    let mut n = ((v << 1) ^ (v >> 63)) as u64;
    while n >= 0x80 {
        out.put_u8((n as u8) | 0x80);
        n >>= 7;
    }
    out.put_u8(n as u8);
}

fn put_nullable(out: &mut BytesMut, b: Option<&[u8]>) {
    match b {
        None => put_varlong(out, -1),
        Some(b) => {
            put_varlong(out, i64::try_from(b.len()).unwrap_or(i64::MAX));
            out.put_slice(b);
        }
    }
}

/// Encodes stored records as one uncompressed magic-2 batch (empty when
/// there are none). Offsets must increase; they need not be consecutive (a
/// compacted log's are not): each record's offset delta is its own.
pub fn encode(records: &[Rec]) -> Bytes {
    let Some(first) = records.first() else {
        return Bytes::new();
    };
    let base_ts = first.timestamp;
    let max_ts = records.iter().map(|r| r.timestamp).max().unwrap_or(base_ts);
    let mut out = BytesMut::with_capacity(
        BATCH_HEADER_LEN
            + records
                .iter()
                .map(|r| {
                    32 + r.key.as_ref().map_or(0, Bytes::len)
                        + r.value.as_ref().map_or(0, Bytes::len)
                        + r.headers
                            .iter()
                            .map(|(k, v)| 10 + k.len() + v.as_ref().map_or(0, Bytes::len))
                            .sum::<usize>()
                })
                .sum::<usize>(),
    );
    out.put_i64(first.offset);
    out.put_i32(0); // batch length, patched below
    out.put_i32(0); // partition leader epoch (Metadata says 0)
    out.put_i8(2);
    out.put_u32(0); // crc, patched below
    out.put_i16(0); // no compression, CreateTime
    let last = records.last().map_or(first.offset, |r| r.offset);
    out.put_i32(i32::try_from(last - first.offset).unwrap_or(i32::MAX));
    out.put_i64(base_ts);
    out.put_i64(max_ts);
    out.put_i64(-1); // producer id
    out.put_i16(-1); // producer epoch
    out.put_i32(-1); // base sequence
    out.put_i32(i32::try_from(records.len()).unwrap_or(i32::MAX));
    let mut rec = BytesMut::new();
    for r in records {
        rec.clear();
        rec.put_i8(0);
        put_varlong(&mut rec, r.timestamp.wrapping_sub(base_ts));
        put_varlong(&mut rec, r.offset - first.offset);
        put_nullable(&mut rec, r.key.as_deref());
        put_nullable(&mut rec, r.value.as_deref());
        put_varlong(&mut rec, i64::try_from(r.headers.len()).unwrap_or(i64::MAX));
        for (k, v) in &r.headers {
            put_nullable(&mut rec, Some(k.as_bytes()));
            put_nullable(&mut rec, v.as_deref());
        }
        put_varlong(&mut out, i64::try_from(rec.len()).unwrap_or(i64::MAX));
        out.put_slice(&rec);
    }
    let len = i32::try_from(out.len() - 12).unwrap_or(i32::MAX);
    out[8..12].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c::crc32c(&out[CRC_START..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::indexmap::IndexMap;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
        TimestampType,
    };

    fn rec(offset: i64, key: Option<&str>, value: &str, headers: &[(&str, &str)]) -> Rec {
        Rec {
            offset,
            timestamp: 1_700_000_000_000 + offset,
            key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
            value: Some(Bytes::copy_from_slice(value.as_bytes())),
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Some(Bytes::copy_from_slice(v.as_bytes()))))
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
        let batch = encode(&rs);
        let back: Vec<Rec> = decode(&batch, 1 << 20)
            .unwrap()
            .into_iter()
            .zip(&rs)
            .map(|(mut d, r)| {
                d.offset = r.offset;
                d
            })
            .collect();
        assert_eq!(back, rs);
        // An independent decoder (kafka-protocol's) reads the same batch.
        let mut b = batch.clone();
        let set = RecordBatchDecoder::decode(&mut b).unwrap();
        assert_eq!(set.records.len(), 3);
        assert_eq!(set.records[2].offset, 9);
        assert_eq!(set.records[0].timestamp, rs[0].timestamp);
    }

    #[test]
    fn repeated_header_names_are_kept_in_order() {
        let rs = vec![rec(
            0,
            Some("k"),
            "v",
            &[("h", "1"), ("x", "2"), ("h", "3")],
        )];
        let back = decode(&encode(&rs), 1 << 20).unwrap();
        assert_eq!(back[0].headers, rs[0].headers);
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
                        h.insert(StrBytes::from_string(k.clone()), v.clone());
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
                        value: r.value.clone(),
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
            let buf_copy = buf.freeze();
            let back: Vec<Rec> = decode(&buf_copy, 1 << 20)
                .unwrap()
                .into_iter()
                .zip(&rs)
                .map(|(mut d, r)| {
                    d.offset = r.offset;
                    d
                })
                .collect();
            assert_eq!(back, rs, "{c:?}");
            let t = transcode(&buf_copy, 1 << 20, 1 << 20).unwrap();
            assert_eq!(t.records, flume_encoded(&rs), "{c:?}");
        }
    }

    /// The stored format the transcoder writes, byte for byte as Flume's own
    /// encoder writes the decoded records.
    fn flume_encoded(rs: &[Rec]) -> Vec<u8> {
        let mut buf = Vec::new();
        for r in rs {
            let headers: Vec<flume_protocol::record::Header> = r
                .headers
                .iter()
                .map(|(k, v)| flume_protocol::record::Header {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect();
            flume_protocol::record::encode_nullable(
                &mut buf,
                0,
                r.timestamp,
                r.key.as_deref(),
                r.value.as_deref(),
                &headers,
            );
        }
        buf
    }

    #[test]
    fn transcode_writes_what_flumes_encoder_writes_and_checks_record_limits() {
        let rs = vec![
            rec(0, Some("k"), "v", &[("a", "1"), ("a", "")]),
            rec(1, None, "", &[]),
            rec(2, Some(""), "x", &[("c", "3")]),
        ];
        let batch = encode(&rs);
        let t = transcode(&batch, 1 << 20, 1 << 20).unwrap();
        assert_eq!(t.records, flume_encoded(&rs));
        assert_eq!((t.count, t.max_timestamp), (3, rs[2].timestamp));
        let info = flume_protocol::record::validate_batch(&t.records, 1 << 20).unwrap();
        assert_eq!(info.count, 3);
        assert!(t.producer.is_none());
        // 16 + 1 + 8 + 4 + 1 + 4 + 1 + 2 + 2 + 1 + 4 + 1 = the first record's stored size.
        let first = 16 + 1 + 8 + 4 + 1 + 4 + 1 + 2 + (2 + 1 + 4 + 1) + (2 + 1 + 4);
        assert!(transcode(&batch, 1 << 20, first).is_ok());
        assert!(matches!(
            transcode(&batch, 1 << 20, first - 1),
            Err(RecordsError::RecordTooLarge { .. })
        ));
        assert!(matches!(
            transcode(&batch, t.records.len() - 1, 1 << 20),
            Err(RecordsError::TooLarge { .. })
        ));
    }

    #[test]
    fn corrupt_and_oversized_batches_are_refused() {
        let batch = encode(&[rec(0, Some("k"), "value", &[])]);
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

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode(&Bytes::from(bytes), 1 << 20);
        }

        #[test]
        fn decode_never_panics_on_a_damaged_valid_batch(at in 0usize..200, byte in any::<u8>()) {
            let rs = vec![Rec { offset: 0, timestamp: 5, key: Some(Bytes::from_static(b"k")), value: Some(Bytes::from_static(b"value")), headers: vec![("h".into(), Some(Bytes::from_static(b"v")))] }];
            let mut b = encode(&rs).to_vec();
            let i = at % b.len();
            b[i] = byte;
            // Fix the CRC so the damage reaches the record parser.
            let crc = crc32c::crc32c(&b[CRC_START..]);
            b[17..21].copy_from_slice(&crc.to_be_bytes());
            let _ = decode(&Bytes::from(b), 1 << 20);
        }
    }
}

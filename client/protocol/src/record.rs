//! The record format, byte-identical on disk and on the wire.
//!
//! ```text
//! record  = [offset u64][size u32][crc u32][payload: size bytes]        (big-endian)
//! payload = [attributes u8][timestamp i64 ms]
//!           [key_len i32, -1 = null][key]
//!           [value_len i32, -1 = null][value]
//!           [header_count u16] header_count * ([name_len u16][name utf-8][value_len i32, -1 = null][value])
//! ```
//!
//! A null value is a tombstone (a delete of its key on a compacted topic),
//! distinct from an empty one; a header's value may be null too.
//! `attributes` is 0 in everything a producer sends. The broker sets
//! [`ATTR_AFTER_GAP`] on a record it stores after a gap in the offsets (a
//! compacted log keeps its records' offsets, so they need not be dense): a
//! reader then knows the jump is meant, and any other jump is damage.
//!
//! `crc` is CRC-32 (IEEE, as computed by `crc32fast`) of the payload only, so
//! the broker can fill in `offset` without touching the checksum: the CRC a
//! producer computes is the CRC a consumer checks.
//!
//! A batch of records is simply records back to back. Producers send offsets
//! as 0 (any value is accepted and overwritten).
//!
//! **Kafka batch entries (stored only).** In a log, an entry whose
//! attributes carry [`ATTR_KAFKA_BATCH`] holds a whole Kafka record batch as
//! a Kafka producer sent it (compressed or not, producer id, epoch, sequence
//! and flags kept):
//!
//! ```text
//! entry   = [offset u64 = the batch's baseOffset][size u32][crc u32][payload]
//! payload = [attributes u8 = 0x02 (| 0x01)][the Kafka batch from partitionLeaderEpoch on]
//! ```
//!
//! The batch's baseOffset is the entry's offset and its batchLength is
//! `size - 1`, so the Kafka batch is the entry with its first 12 bytes
//! rewritten ([`RawRecord::kafka_prefix`]). The entry covers offsets
//! `offset ..= offset + lastOffsetDelta` ([`RawRecord::span`]), and its
//! timestamp is the batch's maxTimestamp. Such entries never go to a Flume
//! client: the broker reads their records out for Flume's protocol.

use bytes::{BufMut, Bytes};

/// Bytes before the payload: offset, size, crc.
pub const RECORD_HEADER_LEN: usize = 16;

/// The default record size limit (`max_record_bytes`) of broker and producer:
/// 1 MiB, counting the record's 16-byte header (offset, size, crc) and its payload.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 1024 * 1024;
/// Smallest payload: attributes, timestamp, key len, value len, header count.
pub const MIN_PAYLOAD_LEN: usize = 1 + 8 + 4 + 4 + 2;

/// Attribute bit: the record's offset is more than one past the previous
/// record's in its segment (or the segment's base). Set by the broker only.
pub const ATTR_AFTER_GAP: u8 = 0x01;

/// Attribute bit: the entry is a Kafka record batch, not a record (stored
/// only; see the module docs). Set by the broker only.
pub const ATTR_KAFKA_BATCH: u8 = 0x02;

/// Smallest payload of a Kafka batch entry: attributes and the batch header
/// from partitionLeaderEpoch on.
pub const MIN_BATCH_PAYLOAD_LEN: usize =
    1 + crate::kafka_batch::BATCH_HEADER_LEN - crate::kafka_batch::LEADER_EPOCH_AT;

/// Where a payload field of a batch entry lies: its Kafka batch position
/// minus the 12 bytes the entry header stands for, plus the attributes byte.
const fn batch_field(kafka_at: usize) -> usize {
    kafka_at - crate::kafka_batch::LEADER_EPOCH_AT + 1
}

/// A record that fails validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The buffer ends inside a record (a torn write on disk, a short batch on the wire).
    #[error("record at byte {at} is torn: it needs {needed} bytes, {available} remain")]
    Torn {
        /// Position of the record in the buffer.
        at: usize,
        /// Bytes the record claims.
        needed: u64,
        /// Bytes that remain.
        available: usize,
    },
    /// The checksum does not match the payload.
    #[error("record at byte {at} (offset {offset}) is corrupt: crc {actual:#010x}, expected {expected:#010x}")]
    Corrupt {
        /// Position of the record in the buffer.
        at: usize,
        /// The offset field of the record.
        offset: u64,
        /// The stored CRC.
        expected: u32,
        /// The CRC of the payload as read.
        actual: u32,
    },
    /// The payload's inner fields do not add up.
    #[error("record at byte {at} (offset {offset}) has a malformed payload")]
    Malformed {
        /// Position of the record in the buffer.
        at: usize,
        /// The offset field of the record.
        offset: u64,
    },
    /// The record is larger than allowed.
    #[error("record at byte {at} is {size} bytes, limit is {limit}")]
    TooLarge {
        /// Position of the record in the buffer.
        at: usize,
        /// Its encoded size.
        size: u64,
        /// The configured limit.
        limit: u64,
    },
}

/// One record header, as in Kafka: a name and a value, which may be null.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Header name.
    pub key: String,
    /// Header value (`None`: null).
    pub value: Option<Bytes>,
}

impl Header {
    /// A header with a value.
    pub fn new(key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        Header {
            key: key.into(),
            value: Some(value.into()),
        }
    }

    /// The value's bytes (empty when null).
    pub fn value_bytes(&self) -> &[u8] {
        self.value.as_deref().unwrap_or_default()
    }
}

/// A decoded record, sharing the fetch buffer (no copy of key or value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Offset in its partition.
    pub offset: u64,
    /// Milliseconds since the Unix epoch, as set by the producer.
    pub timestamp: i64,
    /// The key, if any.
    pub key: Option<Bytes>,
    /// The value; `None` for a tombstone (a null value).
    pub value: Option<Bytes>,
    /// Headers, possibly none.
    pub headers: Vec<Header>,
}

impl Record {
    /// The value's bytes (empty for a tombstone).
    pub fn payload(&self) -> &[u8] {
        self.value.as_deref().unwrap_or_default()
    }

    /// Whether the value is null: a delete of the key on a compacted topic.
    pub fn is_tombstone(&self) -> bool {
        self.value.is_none()
    }
}

/// Borrowed view of one stored record, CRC already checked.
#[derive(Debug, Clone, Copy)]
pub struct RawRecord<'a> {
    /// Position of the record in the buffer it was read from.
    pub pos: usize,
    /// Offset field.
    pub offset: u64,
    /// The payload bytes.
    pub payload: &'a [u8],
}

impl<'a> RawRecord<'a> {
    /// The key and value (`None`: null), borrowed from the payload; `None`
    /// if the payload is malformed.
    #[allow(clippy::type_complexity)]
    pub fn key_value(&self) -> Option<(Option<&'a [u8]>, Option<&'a [u8]>)> {
        let mut r = crate::wire::Reader::new(self.payload);
        r.take(9).ok()?;
        let key = r.nullable_bytes().ok()?;
        let value = r.nullable_bytes().ok()?;
        Some((key, value))
    }

    /// The attributes byte (0, or [`ATTR_AFTER_GAP`] and [`ATTR_KAFKA_BATCH`]).
    pub fn attributes(&self) -> u8 {
        // Payload length was validated to be at least MIN_PAYLOAD_LEN.
        self.payload[0]
    }

    /// True for a Kafka batch entry (stored only), false for a record.
    pub fn is_batch(&self) -> bool {
        self.attributes() & ATTR_KAFKA_BATCH != 0
    }

    /// Encoded length of the whole record.
    pub fn encoded_len(&self) -> usize {
        RECORD_HEADER_LEN + self.payload.len()
    }

    fn field<const N: usize>(&self, at: usize) -> [u8; N] {
        let mut raw = [0u8; N];
        if let Some(b) = self.payload.get(at..at + N) {
            raw.copy_from_slice(b);
        }
        raw
    }

    /// The producer's timestamp, read from the payload; for a batch entry,
    /// its maxTimestamp.
    pub fn timestamp(&self) -> i64 {
        if self.is_batch() {
            // Batch payloads were validated to be at least MIN_BATCH_PAYLOAD_LEN.
            return i64::from_be_bytes(self.field(batch_field(35)));
        }
        // Payload length was validated to be at least MIN_PAYLOAD_LEN.
        i64::from_be_bytes(self.field(1))
    }

    /// How many offsets the entry covers: 1 for a record, lastOffsetDelta + 1
    /// for a batch entry.
    pub fn span(&self) -> u64 {
        if self.is_batch() {
            // check_record refused a negative delta.
            u64::try_from(i32::from_be_bytes(self.field(batch_field(23)))).map_or(1, |d| d + 1)
        } else {
            1
        }
    }

    /// The offset of the entry's last record (its own for a record).
    pub fn last_offset(&self) -> u64 {
        self.offset.saturating_add(self.span() - 1)
    }

    /// A batch entry's Kafka batch header, with its baseOffset and
    /// batchLength as the entry implies them; `None` for a record.
    pub fn batch_header(&self) -> Option<crate::kafka_batch::BatchHeader> {
        if !self.is_batch() {
            return None;
        }
        let mut raw = [0u8; crate::kafka_batch::BATCH_HEADER_LEN];
        raw[..12].copy_from_slice(&self.kafka_prefix());
        let body = self.payload.get(1..MIN_BATCH_PAYLOAD_LEN)?;
        raw[12..].copy_from_slice(body);
        crate::kafka_batch::BatchHeader::parse(&raw)
    }

    /// The 12 bytes that make a batch entry's payload (after its attributes
    /// byte) a whole Kafka batch again: baseOffset and batchLength.
    pub fn kafka_prefix(&self) -> [u8; 12] {
        let mut p = [0u8; 12];
        p[..8].copy_from_slice(&self.offset.to_be_bytes());
        let len = i32::try_from(self.payload.len().saturating_sub(1)).unwrap_or(i32::MAX);
        p[8..].copy_from_slice(&len.to_be_bytes());
        p
    }

    /// A batch entry's Kafka batch from partitionLeaderEpoch on (what follows
    /// [`RawRecord::kafka_prefix`]); empty for a record.
    pub fn kafka_body(&self) -> &'a [u8] {
        if self.is_batch() {
            self.payload.get(1..).unwrap_or_default()
        } else {
            &[]
        }
    }
}

/// A stored record's fields, borrowed from its payload: see [`RawRecord::fields`].
#[derive(Debug, Clone, Copy)]
pub struct RecordFields<'a> {
    /// The producer's timestamp.
    pub timestamp: i64,
    /// Key (`None`: null).
    pub key: Option<&'a [u8]>,
    /// Value (`None`: null, a tombstone).
    pub value: Option<&'a [u8]>,
    /// The headers' encoded bytes (see [`RecordFields::headers`]).
    headers: &'a [u8],
    count: u16,
}

impl<'a> RecordFields<'a> {
    /// The headers in order (`None` values: null), names as UTF-8;
    /// iteration ends at the first header that does not parse.
    pub fn headers(&self) -> impl Iterator<Item = (&'a str, Option<&'a [u8]>)> + 'a {
        let mut r = crate::wire::Reader::new(self.headers);
        (0..self.count).map_while(move |_| {
            let nl = usize::from(r.u16().ok()?);
            let name = std::str::from_utf8(r.take(nl).ok()?).ok()?;
            let value = r.nullable_bytes().ok()?;
            Some((name, value))
        })
    }
}

impl<'a> RawRecord<'a> {
    /// The fields of a record (not a batch entry), borrowed; `None` when
    /// the payload is malformed.
    pub fn fields(&self) -> Option<RecordFields<'a>> {
        if self.is_batch() {
            return None;
        }
        let mut r = crate::wire::Reader::new(self.payload);
        r.u8().ok()?;
        let timestamp = r.i64().ok()?;
        let key = r.nullable_bytes().ok()?;
        let value = r.nullable_bytes().ok()?;
        let count = r.u16().ok()?;
        let headers = self.payload.get(r.position()..)?;
        Some(RecordFields {
            timestamp,
            key,
            value,
            headers,
            count,
        })
    }
}

/// Size of a record once encoded.
pub fn encoded_len(key: Option<&[u8]>, value: &[u8], headers: &[Header]) -> usize {
    encoded_len_nullable(key, Some(value), headers)
}

/// Size of a record whose value may be null, once encoded.
pub fn encoded_len_nullable(key: Option<&[u8]>, value: Option<&[u8]>, headers: &[Header]) -> usize {
    RECORD_HEADER_LEN
        + MIN_PAYLOAD_LEN
        + key.map_or(0, <[u8]>::len)
        + value.map_or(0, <[u8]>::len)
        + headers
            .iter()
            .map(|h| 2 + h.key.len() + 4 + h.value_bytes().len())
            .sum::<usize>()
}

/// Appends one encoded record to `buf`.
pub fn encode(
    buf: &mut Vec<u8>,
    offset: u64,
    timestamp: i64,
    key: Option<&[u8]>,
    value: &[u8],
    headers: &[Header],
) {
    encode_nullable(buf, offset, timestamp, key, Some(value), headers);
}

fn put_nullable(buf: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => buf.put_i32(-1),
        Some(b) => {
            buf.put_i32(crate::wire::len_i32(b.len()));
            buf.put_slice(b);
        }
    }
}

/// Appends one encoded record whose value may be null (a tombstone) to `buf`.
pub fn encode_nullable(
    buf: &mut Vec<u8>,
    offset: u64,
    timestamp: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header],
) {
    let start = buf.len();
    buf.reserve(encoded_len_nullable(key, value, headers));
    buf.put_u64(offset);
    buf.put_u32(0); // size, patched below
    buf.put_u32(0); // crc, patched below
    let payload_start = buf.len();
    buf.put_u8(0);
    buf.put_i64(timestamp);
    put_nullable(buf, key);
    put_nullable(buf, value);
    buf.put_u16(u16::try_from(headers.len()).unwrap_or(u16::MAX));
    for h in headers.iter().take(u16::MAX as usize) {
        let name = h.key.as_bytes();
        let name = &name[..name.len().min(u16::MAX as usize)];
        buf.put_u16(name.len() as u16);
        buf.put_slice(name);
        put_nullable(buf, h.value.as_deref());
    }
    let size = u32::try_from(buf.len() - payload_start).unwrap_or(u32::MAX);
    let crc = crc32fast::hash(&buf[payload_start..]);
    buf[start + 8..start + 12].copy_from_slice(&size.to_be_bytes());
    buf[start + 12..start + 16].copy_from_slice(&crc.to_be_bytes());
}

/// A record as Flume's format stores it, from a Kafka batch's record: the
/// headers as borrowed pairs. Names longer than `u16::MAX` bytes or more than
/// `u16::MAX` headers cannot be stored (the broker refuses them on produce).
///
/// # Errors
/// [`RecordError::Malformed`] for a record Flume's format cannot hold.
pub fn encode_view(
    buf: &mut Vec<u8>,
    offset: u64,
    timestamp: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(&str, Option<&[u8]>)],
) -> Result<(), RecordError> {
    let start = buf.len();
    let malformed = RecordError::Malformed { at: start, offset };
    let n = u16::try_from(headers.len()).map_err(|_| malformed.clone())?;
    buf.put_u64(offset);
    buf.put_u32(0); // size, patched below
    buf.put_u32(0); // crc, patched below
    let payload_start = buf.len();
    buf.put_u8(0);
    buf.put_i64(timestamp);
    put_nullable(buf, key);
    put_nullable(buf, value);
    buf.put_u16(n);
    for (name, v) in headers {
        let nl = u16::try_from(name.len()).map_err(|_| malformed.clone())?;
        buf.put_u16(nl);
        buf.put_slice(name.as_bytes());
        put_nullable(buf, *v);
    }
    let size = u32::try_from(buf.len() - payload_start).map_err(|_| malformed)?;
    let crc = crc32fast::hash(&buf[payload_start..]);
    buf[start + 8..start + 12].copy_from_slice(&size.to_be_bytes());
    buf[start + 12..start + 16].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// Stored entries read out as Flume records: see [`expand`].
#[derive(Debug)]
pub struct Expanded<'a> {
    /// Flume records (offsets at or after the read's start), borrowed when
    /// the entries held no Kafka batch.
    pub records: std::borrow::Cow<'a, [u8]>,
    /// How many.
    pub count: usize,
    /// The offset after the last entry (or record) used: where the next
    /// read goes on. Equal to the read's start when nothing was there.
    pub next: u64,
}

/// Reads checked log entries (a log read) as Flume records: records as they
/// are, and the records of each Kafka batch entry (decompressed, producing
/// at most `limit` bytes per batch) as Flume records at their offsets, from
/// offset `from` on. Control batches and empty ones give no record. Output
/// stops once it holds `max_bytes` (at least one record is kept), possibly in
/// the middle of a batch; [`Expanded::next`] says where to go on. Entries
/// without any Kafka batch are borrowed as they are.
///
/// # Errors
/// [`RecordError::Malformed`] for a batch entry that does not decode.
pub fn expand(
    entries: &[u8],
    from: u64,
    max_bytes: usize,
    limit: usize,
) -> Result<Expanded<'_>, RecordError> {
    expand_filtered(entries, from, max_bytes, limit, &|_| false)
}

/// [`expand`], leaving out every Kafka batch entry `skip` says to (an
/// aborted transaction's, for a `read_committed` reader); `next` goes past
/// skipped entries too.
///
/// # Errors
/// As [`expand`].
pub fn expand_filtered<'e>(
    entries: &'e [u8],
    from: u64,
    max_bytes: usize,
    limit: usize,
    skip: &dyn Fn(&RawRecord<'_>) -> bool,
) -> Result<Expanded<'e>, RecordError> {
    let mut any_batch = false;
    let (mut pos, mut next, mut count) = (0usize, from, 0usize);
    while let Some((offset, size, span)) = peek_entry(entries, pos) {
        let end = pos
            .saturating_add(RECORD_HEADER_LEN)
            .saturating_add(usize::try_from(size).unwrap_or(usize::MAX));
        if end > entries.len() {
            break;
        }
        if entries[pos + RECORD_HEADER_LEN] & ATTR_KAFKA_BATCH != 0 {
            any_batch = true;
            break;
        }
        count += 1;
        next = next.max(offset.saturating_add(span));
        pos = end;
    }
    if !any_batch {
        return Ok(Expanded {
            records: std::borrow::Cow::Borrowed(&entries[..pos]),
            count,
            next,
        });
    }
    let mut out = Vec::with_capacity(entries.len().min(max_bytes.saturating_mul(2)));
    out.extend_from_slice(&entries[..pos]);
    let mut iter = RecordIter::new(&entries[pos..]);
    for raw in &mut iter {
        let raw = raw?;
        if !out.is_empty() && out.len() >= max_bytes {
            break;
        }
        let Some(header) = raw.batch_header() else {
            out.extend_from_slice(&entries[pos + raw.pos..pos + raw.pos + raw.encoded_len()]);
            count += 1;
            next = next.max(raw.offset.saturating_add(1));
            continue;
        };
        let malformed = RecordError::Malformed {
            at: pos + raw.pos,
            offset: raw.offset,
        };
        let mut stopped = false;
        if !header.is_control() && header.count > 0 && !skip(&raw) {
            let data = crate::kafka_batch::decompress(
                header.compression().map_err(|_| malformed.clone())?,
                raw.kafka_body()
                    .get(
                        crate::kafka_batch::BATCH_HEADER_LEN
                            - crate::kafka_batch::LEADER_EPOCH_AT..,
                    )
                    .unwrap_or_default(),
                limit,
            )
            .map_err(|_| malformed.clone())?;
            let mut sink = |r: crate::kafka_batch::RecordView<'_, '_>| -> Result<(), RecordError> {
                if stopped {
                    return Ok(());
                }
                let at = raw
                    .offset
                    .saturating_add(u64::try_from(r.offset_delta).unwrap_or(0));
                if at < from {
                    return Ok(());
                }
                if !out.is_empty() && out.len() >= max_bytes {
                    stopped = true;
                    return Ok(());
                }
                encode_view(&mut out, at, r.timestamp, r.key, r.value, r.headers)?;
                count += 1;
                next = next.max(at.saturating_add(1));
                Ok(())
            };
            crate::kafka_batch::for_each_record(&header, &data, &mut |r| {
                sink(r).map_err(|_| crate::kafka_batch::BatchError::Corrupt(String::new()))
            })
            .map_err(|_: crate::kafka_batch::BatchError| malformed.clone())?;
        }
        if stopped {
            break;
        }
        next = next.max(raw.last_offset().saturating_add(1));
    }
    Ok(Expanded {
        records: std::borrow::Cow::Owned(out),
        count,
        next,
    })
}

/// Reads the record header at `pos` of `buf` without checking the payload.
/// Returns `(offset, payload size)`, or `None` if fewer than 16 bytes remain.
pub fn peek_header(buf: &[u8], pos: usize) -> Option<(u64, u32)> {
    let h = buf.get(pos..pos.checked_add(RECORD_HEADER_LEN)?)?;
    let mut off = [0u8; 8];
    off.copy_from_slice(&h[0..8]);
    let mut size = [0u8; 4];
    size.copy_from_slice(&h[8..12]);
    Some((u64::from_be_bytes(off), u32::from_be_bytes(size)))
}

/// The number of records in the whole entries at the start of `buf`, from
/// their headers alone (a Kafka batch entry counts its batch's records): no
/// CRC is computed. For a buffer already checked (a read the log verified
/// entry by entry); [`RecordIter`] checks.
pub fn count_unchecked(buf: &[u8]) -> usize {
    let (mut at, mut n) = (0usize, 0usize);
    while let Some((_, size)) = peek_header(buf, at) {
        let next = usize::try_from(size)
            .ok()
            .and_then(|s| at.checked_add(RECORD_HEADER_LEN)?.checked_add(s));
        match next {
            Some(next) if next <= buf.len() => {
                n += match buf.get(at + RECORD_HEADER_LEN) {
                    Some(a) if a & ATTR_KAFKA_BATCH != 0 => {
                        let c = at + RECORD_HEADER_LEN + batch_field(57);
                        buf.get(c..c + 4)
                            .and_then(|b| b.try_into().ok())
                            .map_or(0, |b| usize::try_from(i32::from_be_bytes(b)).unwrap_or(0))
                    }
                    _ => 1,
                };
                at = next;
            }
            _ => break,
        }
    }
    n
}

/// Iterates over the records of a buffer, checking each CRC.
///
/// Stops with an error at the first torn or corrupt record; the error's `at`
/// is where the valid prefix ends.
#[derive(Debug, Clone)]
pub struct RecordIter<'a> {
    buf: &'a [u8],
    pos: usize,
    max_record: u64,
    failed: bool,
}

impl<'a> RecordIter<'a> {
    /// Iterates `buf`, allowing records of any size the buffer can hold.
    pub fn new(buf: &'a [u8]) -> Self {
        Self::with_limit(buf, u64::MAX)
    }

    /// Iterates `buf`, rejecting records whose encoded size exceeds `max_record`.
    pub fn with_limit(buf: &'a [u8], max_record: u64) -> Self {
        RecordIter {
            buf,
            pos: 0,
            max_record,
            failed: false,
        }
    }

    /// Bytes of valid records consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<RawRecord<'a>, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let at = self.pos;
        let result = check_record(self.buf, at, self.max_record);
        match &result {
            Ok(r) => self.pos += r.encoded_len(),
            Err(_) => self.failed = true,
        }
        Some(result)
    }
}

/// Validates the record that starts at `at`.
pub fn check_record(buf: &[u8], at: usize, max_record: u64) -> Result<RawRecord<'_>, RecordError> {
    let available = buf.len().saturating_sub(at);
    let Some((offset, size)) = peek_header(buf, at) else {
        return Err(RecordError::Torn {
            at,
            needed: RECORD_HEADER_LEN as u64,
            available,
        });
    };
    let total = RECORD_HEADER_LEN as u64 + u64::from(size);
    if total > max_record {
        return Err(RecordError::TooLarge {
            at,
            size: total,
            limit: max_record,
        });
    }
    if total > available as u64 {
        return Err(RecordError::Torn {
            at,
            needed: total,
            available,
        });
    }
    // total <= available <= usize::MAX, so the conversion is lossless.
    let end = at + total as usize;
    let payload = &buf[at + RECORD_HEADER_LEN..end];
    let mut crc = [0u8; 4];
    crc.copy_from_slice(&buf[at + 12..at + 16]);
    let expected = u32::from_be_bytes(crc);
    let actual = crc32fast::hash(payload);
    if expected != actual {
        return Err(RecordError::Corrupt {
            at,
            offset,
            expected,
            actual,
        });
    }
    if payload.len() < MIN_PAYLOAD_LEN {
        return Err(RecordError::Malformed { at, offset });
    }
    if payload[0] & ATTR_KAFKA_BATCH != 0
        && (payload.len() < MIN_BATCH_PAYLOAD_LEN
            || payload[batch_field(16)] != 2
            || payload[batch_field(23)] & 0x80 != 0)
    {
        // Too short for a batch header, not magic 2, or a negative lastOffsetDelta.
        return Err(RecordError::Malformed { at, offset });
    }
    Ok(RawRecord {
        pos: at,
        offset,
        payload,
    })
}

/// Parses a checked payload into key, value and headers, slicing `owner`
/// (the buffer the payload lives in) instead of copying.
fn parse_payload(owner: &Bytes, raw: &RawRecord<'_>) -> Option<Record> {
    let base = raw.pos + RECORD_HEADER_LEN;
    let mut r = crate::wire::Reader::new(raw.payload);
    let _attributes = r.u8().ok()?;
    let timestamp = r.i64().ok()?;
    let slice = |r: &crate::wire::Reader<'_>, len: usize| {
        let start = base + r.position() - len;
        owner.slice(start..start + len)
    };
    let key = r.nullable_bytes().ok()?.map(|k| slice(&r, k.len()));
    let value = r.nullable_bytes().ok()?.map(|v| slice(&r, v.len()));
    let n = r.u16().ok()?;
    let mut headers = Vec::new();
    for _ in 0..n {
        let nl = usize::from(r.u16().ok()?);
        let name = std::str::from_utf8(r.take(nl).ok()?).ok()?.to_owned();
        let value = r.nullable_bytes().ok()?.map(|hv| slice(&r, hv.len()));
        headers.push(Header { key: name, value });
    }
    r.finish().ok()?;
    Some(Record {
        offset: raw.offset,
        timestamp,
        key,
        value,
        headers,
    })
}

/// Decodes every record of a batch, checking each CRC; key and value share `buf`.
///
/// # Errors
/// The first torn, corrupt or malformed record.
pub fn decode_all(buf: &Bytes) -> Result<Vec<Record>, RecordError> {
    let mut out = Vec::new();
    for raw in RecordIter::new(buf) {
        let raw = raw?;
        let rec = parse_payload(buf, &raw).ok_or(RecordError::Malformed {
            at: raw.pos,
            offset: raw.offset,
        })?;
        out.push(rec);
    }
    Ok(out)
}

/// Summary of a validated batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchInfo {
    /// Number of records.
    pub count: u32,
    /// Largest timestamp in the batch.
    pub max_timestamp: i64,
}

/// Validates every record of `batch` (CRC, payload structure, size limit) and
/// returns its record count and largest timestamp. Rejects an empty batch.
///
/// # Errors
/// The first record that fails, with its position.
pub fn validate_batch(batch: &[u8], max_record: u64) -> Result<BatchInfo, RecordError> {
    let mut info = BatchInfo {
        count: 0,
        max_timestamp: i64::MIN,
    };
    for raw in RecordIter::with_limit(batch, max_record) {
        let raw = raw?;
        // What a producer sends carries no attribute: only the broker sets them.
        if raw.attributes() != 0 || !payload_is_well_formed(raw.payload) {
            return Err(RecordError::Malformed {
                at: raw.pos,
                offset: raw.offset,
            });
        }
        info.count = info.count.saturating_add(1);
        info.max_timestamp = info.max_timestamp.max(raw.timestamp());
    }
    if info.count == 0 {
        return Err(RecordError::Torn {
            at: 0,
            needed: RECORD_HEADER_LEN as u64,
            available: 0,
        });
    }
    Ok(info)
}

fn payload_is_well_formed(payload: &[u8]) -> bool {
    let mut r = crate::wire::Reader::new(payload);
    let ok = (|| -> Result<(), crate::wire::WireError> {
        r.u8()?;
        r.i64()?;
        r.nullable_bytes()?;
        r.nullable_bytes()?;
        for _ in 0..r.u16()? {
            let nl = usize::from(r.u16()?);
            let name = r.take(nl)?;
            if std::str::from_utf8(name).is_err() {
                return Err(crate::wire::WireError::InvalidUtf8 { at: 0 });
            }
            r.nullable_bytes()?;
        }
        r.finish()
    })();
    ok.is_ok()
}

/// Overwrites the offset field of every entry in a checked batch with
/// consecutive offsets from `base` (a Kafka batch entry takes as many as it
/// spans). The CRC covers only the payload, so it stays valid. Returns the
/// offset after the last entry.
pub fn assign_offsets(batch: &mut [u8], base: u64) -> u64 {
    let mut pos = 0usize;
    let mut next = base;
    while let Some((_, size, span)) = peek_entry(batch, pos) {
        batch[pos..pos + 8].copy_from_slice(&next.to_be_bytes());
        next = next.saturating_add(span);
        pos = pos.saturating_add(RECORD_HEADER_LEN + size as usize);
    }
    next
}

/// Reads the header of the entry at `pos` of `buf` without checking its
/// payload: `(offset, payload size, offsets spanned)`. `None` when fewer
/// than [`RECORD_HEADER_LEN`] bytes remain, or, for a Kafka batch entry,
/// fewer than its span field needs (every whole entry is longer).
pub fn peek_entry(buf: &[u8], pos: usize) -> Option<(u64, u32, u64)> {
    let (offset, size) = peek_header(buf, pos)?;
    let attributes = *buf.get(pos.checked_add(RECORD_HEADER_LEN)?)?;
    if attributes & ATTR_KAFKA_BATCH == 0 {
        return Some((offset, size, 1));
    }
    let at = pos.checked_add(RECORD_HEADER_LEN + batch_field(23))?;
    let delta = i32::from_be_bytes(buf.get(at..at.checked_add(4)?)?.try_into().ok()?);
    Some((offset, size, u64::try_from(delta).map_or(1, |d| d + 1)))
}

/// Bytes [`peek_entry`] needs to see of an entry to know its span.
pub const ENTRY_PEEK_LEN: usize = RECORD_HEADER_LEN + batch_field(27);

/// Appends a Kafka batch entry holding the whole batch `batch` (checked by
/// the caller: at least [`crate::kafka_batch::BATCH_HEADER_LEN`] bytes) to
/// `out`, with offset 0 (the log assigns it) and its CRC computed.
pub fn encode_batch_entry(out: &mut Vec<u8>, batch: &[u8]) {
    let body = batch
        .get(crate::kafka_batch::LEADER_EPOCH_AT..)
        .unwrap_or_default();
    let size = u32::try_from(body.len() + 1).unwrap_or(u32::MAX);
    out.extend_from_slice(&0u64.to_be_bytes());
    out.extend_from_slice(&size.to_be_bytes());
    let crc_at = out.len();
    out.extend_from_slice(&[0u8; 4]);
    out.push(ATTR_KAFKA_BATCH);
    out.extend_from_slice(body);
    let crc = crc32fast::hash(&out[crc_at + 4..]);
    out[crc_at..crc_at + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Marks the record that fills `rec` (header and payload, checked) as
/// stored after a gap in the offsets, or clears the mark, and recomputes its
/// CRC over the changed payload. For the broker's cleaner, which keeps
/// offsets and drops records between them. A `rec` too short to hold a
/// payload is left as it is.
pub fn set_after_gap(rec: &mut [u8], after_gap: bool) {
    let Some(attributes) = rec.get_mut(RECORD_HEADER_LEN) else {
        return;
    };
    if after_gap {
        *attributes |= ATTR_AFTER_GAP;
    } else {
        *attributes &= !ATTR_AFTER_GAP;
    }
    let crc = crc32fast::hash(&rec[RECORD_HEADER_LEN..]);
    rec[12..16].copy_from_slice(&crc.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut buf = Vec::new();
        encode(&mut buf, 0, 1_700_000_000_000, Some(b"k"), b"v1", &[]);
        encode(
            &mut buf,
            0,
            5,
            None,
            b"v2",
            &[Header {
                key: "h".into(),
                value: Some(Bytes::from_static(b"x")),
            }],
        );
        buf
    }

    #[test]
    fn count_unchecked_counts_whole_records_by_their_headers() {
        let buf = sample();
        assert_eq!(count_unchecked(&buf), 2);
        assert_eq!(count_unchecked(&[]), 0);
        // A torn last record is not counted; a short header ends the count.
        assert_eq!(count_unchecked(&buf[..buf.len() - 1]), 1);
        assert_eq!(count_unchecked(&buf[..RECORD_HEADER_LEN - 1]), 0);
        // A size that runs past the buffer (or overflows) ends it too.
        let mut huge = buf.clone();
        huge[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(count_unchecked(&huge), 0);
    }

    #[test]
    fn round_trip_and_assign() {
        let mut buf = sample();
        let info = validate_batch(&buf, u64::MAX).unwrap();
        assert_eq!(info.count, 2);
        assert_eq!(info.max_timestamp, 1_700_000_000_000);
        assign_offsets(&mut buf, 41);
        let recs = decode_all(&Bytes::from(buf)).unwrap();
        assert_eq!(recs[0].offset, 41);
        assert_eq!(recs[1].offset, 42);
        assert_eq!(recs[0].key.as_deref(), Some(&b"k"[..]));
        assert_eq!(recs[1].key, None);
        assert_eq!(recs[1].payload(), b"v2");
        assert_eq!(recs[1].headers[0].key, "h");
    }

    #[test]
    fn every_prefix_and_flip_is_detected() {
        let buf = sample();
        for cut in 0..buf.len() {
            if cut == 0 {
                assert!(validate_batch(&buf[..0], u64::MAX).is_err());
                continue;
            }
            let first_len = RECORD_HEADER_LEN + peek_header(&buf, 0).unwrap().1 as usize;
            if cut == first_len {
                continue; // a whole record
            }
            assert!(validate_batch(&buf[..cut], u64::MAX).is_err(), "cut {cut}");
        }
        let second = RECORD_HEADER_LEN + peek_header(&buf, 0).unwrap().1 as usize;
        for i in 8..buf.len() {
            if (second..second + 8).contains(&i) {
                continue; // offset fields are not covered by the CRC by design
            }
            let mut b = buf.clone();
            b[i] ^= 0x40;
            assert!(validate_batch(&b, u64::MAX).is_err(), "flip {i}");
        }
    }

    #[test]
    fn size_limit() {
        let buf = sample();
        assert!(matches!(
            validate_batch(&buf, 20),
            Err(RecordError::TooLarge { .. })
        ));
    }

    #[test]
    fn a_null_value_and_a_null_header_are_not_empty_ones() {
        let mut buf = Vec::new();
        let headers = [
            Header {
                key: "null".into(),
                value: None,
            },
            Header::new("empty", Bytes::new()),
        ];
        encode_nullable(&mut buf, 0, 5, Some(b"k"), None, &headers);
        encode(&mut buf, 0, 6, Some(b"k"), b"", &[]);
        assert_eq!(
            buf.len(),
            encoded_len_nullable(Some(b"k"), None, &headers) + encoded_len(Some(b"k"), b"", &[])
        );
        assert_eq!(validate_batch(&buf, u64::MAX).unwrap().count, 2);
        let recs = decode_all(&Bytes::from(buf.clone())).unwrap();
        assert!(recs[0].is_tombstone() && recs[0].payload().is_empty());
        assert_eq!(recs[0].headers[0].value, None);
        assert_eq!(recs[0].headers[1].value.as_deref(), Some(&b""[..]));
        assert!(!recs[1].is_tombstone());
        assert_eq!(recs[1].value.as_deref(), Some(&b""[..]));
        let raw = RecordIter::new(&buf).next().unwrap().unwrap();
        assert_eq!(raw.key_value(), Some((Some(&b"k"[..]), None)));
    }

    #[test]
    fn producers_may_not_set_attributes() {
        let mut buf = Vec::new();
        encode(&mut buf, 0, 5, None, b"v", &[]);
        // Set the after-gap bit and fix the CRC: a well-formed record a producer may not send.
        buf[RECORD_HEADER_LEN] = ATTR_AFTER_GAP;
        let crc = crc32fast::hash(&buf[RECORD_HEADER_LEN..]);
        buf[12..16].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            validate_batch(&buf, u64::MAX),
            Err(RecordError::Malformed { .. })
        ));
        let raw = RecordIter::new(&buf).next().unwrap().unwrap();
        assert_eq!(raw.attributes(), ATTR_AFTER_GAP);
    }

    #[test]
    fn a_kafka_batch_entry_spans_its_offsets_and_gives_the_batch_back() {
        use crate::kafka_batch::{self, BatchBuilder, BatchMeta, Compression};
        let mut b = BatchBuilder::new(None);
        b.push(0, 100, Some(b"a"), Some(b"1"), []);
        b.push(1, 130, Some(b"b"), None, []);
        b.push(2, 120, None, Some(b"3"), []);
        let meta = BatchMeta {
            producer_id: 9,
            producer_epoch: 1,
            base_sequence: 5,
            ..BatchMeta::default()
        };
        let batch = b.finish(&meta, Compression::Lz4).unwrap();
        let mut log = Vec::new();
        encode(&mut log, 0, 50, Some(b"k"), b"v", &[]);
        encode_batch_entry(&mut log, &batch);
        encode(&mut log, 0, 60, Some(b"k"), b"w", &[]);
        assert_eq!(assign_offsets(&mut log, 10), 15);
        let entries: Vec<_> = RecordIter::new(&log).collect::<Result<_, _>>().unwrap();
        assert_eq!(entries.len(), 3);
        let e = entries[1];
        assert!(e.is_batch() && !entries[0].is_batch());
        assert_eq!(
            (e.offset, e.span(), e.last_offset(), e.timestamp()),
            (11, 3, 13, 130)
        );
        assert_eq!(entries[2].offset, 14);
        assert_eq!(count_unchecked(&log), 5);
        let h = e.batch_header().unwrap();
        assert_eq!(
            (h.base_offset, h.producer_id, h.base_sequence, h.count),
            (11, 9, 5, 3)
        );
        // The prefix and body are the Kafka batch, with its base offset filled in.
        let mut back = e.kafka_prefix().to_vec();
        back.extend_from_slice(e.kafka_body());
        let checked = kafka_batch::check(&back).unwrap();
        assert_eq!(&back[12..], &batch[12..]);
        assert_eq!(checked.header.base_offset, 11);
        assert_eq!(
            peek_entry(&log, e.pos),
            Some((11, e.payload.len() as u32, 3))
        );
        // A negative lastOffsetDelta, or another magic, is malformed.
        for (field, value) in [(batch_field(23), 0xffu8), (batch_field(16), 1)] {
            let mut bad = log.clone();
            bad[e.pos + RECORD_HEADER_LEN + field] = value;
            let crc = crc32fast::hash(&bad[e.pos + RECORD_HEADER_LEN..e.pos + e.encoded_len()]);
            bad[e.pos + 12..e.pos + 16].copy_from_slice(&crc.to_be_bytes());
            assert!(matches!(
                check_record(&bad, e.pos, u64::MAX),
                Err(RecordError::Malformed { .. })
            ));
        }
        // Producers cannot send one: attributes are the broker's.
        assert!(validate_batch(&log, u64::MAX).is_err());
    }

    #[test]
    fn expand_reads_batch_entries_as_records_from_an_offset_within_a_size() {
        use crate::kafka_batch::{BatchBuilder, BatchMeta, Compression, ATTR_CONTROL};
        let batch = |n: i32, flags: i16, codec| {
            let mut b = BatchBuilder::new(None);
            for i in 0..n {
                let v = format!("v{i}");
                b.push(
                    i,
                    1000 + i64::from(i),
                    Some(b"k"),
                    Some(v.as_bytes()),
                    [("h", None)],
                );
            }
            let meta = BatchMeta {
                flags,
                last_offset_delta: Some(n.max(1) - 1),
                ..BatchMeta::default()
            };
            b.finish(&meta, codec).unwrap()
        };
        let mut log = Vec::new();
        encode(&mut log, 0, 5, Some(b"a"), b"plain", &[]); // 20
        encode_batch_entry(&mut log, &batch(4, 0, Compression::Zstd)); // 21..=24
        encode_batch_entry(&mut log, &batch(1, ATTR_CONTROL, Compression::None)); // 25
        encode_batch_entry(&mut log, &batch(0, 0, Compression::None)); // 26 (empty)
        encode(&mut log, 0, 6, Some(b"b"), b"after", &[]); // 27
        assert_eq!(assign_offsets(&mut log, 20), 28);
        let e = expand(&log, 20, usize::MAX, 1 << 20).unwrap();
        let recs = decode_all(&Bytes::from(e.records.into_owned())).unwrap();
        let offsets: Vec<u64> = recs.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![20, 21, 22, 23, 24, 27]);
        assert_eq!((e.count, e.next), (6, 28));
        assert_eq!(recs[2].value.as_deref(), Some(&b"v1"[..]));
        assert_eq!(recs[2].timestamp, 1001);
        assert_eq!(recs[2].headers[0].value, None);
        // From the middle of the batch: the batch's earlier records are skipped.
        let skip = RecordIter::new(&log).next().unwrap().unwrap().encoded_len();
        let e = expand(&log[skip..], 23, usize::MAX, 1 << 20).unwrap();
        let recs = decode_all(&Bytes::from(e.records.into_owned())).unwrap();
        assert_eq!(
            recs.iter().map(|r| r.offset).collect::<Vec<_>>(),
            vec![23, 24, 27]
        );
        // A size limit stops in the middle of the batch and says where to go on.
        let e = expand(&log, 20, 60, 1 << 20).unwrap();
        assert_eq!((e.count, e.next), (2, 22));
        // Entries that give no record still move `next` past them.
        let batches_only =
            &log[skip..log.len() - RecordIter::new(&log).last().unwrap().unwrap().encoded_len()];
        let e = expand(batches_only, 25, usize::MAX, 1 << 20).unwrap();
        assert_eq!((e.count, e.next), (0, 27));
        // Plain records are borrowed as they are.
        let mut plain = Vec::new();
        encode(&mut plain, 0, 1, None, b"x", &[]);
        assert!(matches!(
            expand(&plain, 0, 1, 1).unwrap().records,
            std::borrow::Cow::Borrowed(_)
        ));
        // A batch that decodes past the limit is malformed here, not a panic.
        assert!(expand(&log, 20, usize::MAX, 8).is_err());
    }
}

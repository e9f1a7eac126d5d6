//! Kafka record batches (magic 2), with no I/O: split a record set into
//! checked batches, decompress a batch's records within a byte limit, walk
//! its records, and build new batches (any of the four codecs).
//!
//! The broker stores a batch a Kafka producer sent as it came (see
//! `docs/storage.md`), serves it to Kafka consumers as it is, and reads its
//! records through this module for Flume's own consumers, the log cleaner
//! and time lookups; the SDK's Kafka client builds and reads batches with it.
//!
//! ```text
//! batch:  baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 (2)
//!         | crc u32 (CRC-32C of what follows) | attributes i16 | lastOffsetDelta i32
//!         | baseTimestamp i64 | maxTimestamp i64 | producerId i64 | producerEpoch i16
//!         | baseSequence i32 | count i32 | records (compressed per attributes & 7)
//! record: length varint | attributes i8 | timestampDelta varlong | offsetDelta varint
//!         | keyLength varint (-1 null) | key | valueLength varint (-1 null) | value
//!         | headerCount varint | (keyLength varint | key | valueLength varint | value)*
//! attributes: bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd),
//!         bit 3 LogAppendTime, bit 4 transactional, bit 5 control, bit 6 delete horizon
//! ```
//!
//! Decompression is bounded: the codecs run as streams into a buffer that
//! stops growing at the caller's limit, so a small batch that would inflate
//! to gigabytes is refused ([`BatchError::TooLarge`]) after at most that many
//! bytes were produced, never allocated whole. Snappy blocks declare their
//! length first and are checked before they are allocated; zstd frames may
//! use a window of at most 2^[`ZSTD_WINDOW_LOG_MAX`] bytes.
//!
//! Records are walked here rather than with `kafka-protocol`'s decoder
//! because that one keeps headers in a map, which drops a repeated header
//! name; Kafka keeps every header in order, and so does Flume.

use std::borrow::Cow;
use std::io::{Read, Write};

/// Bytes of a batch header, from baseOffset to count.
pub const BATCH_HEADER_LEN: usize = 61;
/// Where the CRC-covered part of a batch starts (attributes).
pub const CRC_START: usize = 21;
/// Where partitionLeaderEpoch starts: what comes before it (baseOffset and
/// batchLength) is implied by the log entry a stored batch lives in.
pub const LEADER_EPOCH_AT: usize = 12;

/// Attribute bits 0-2: the compression codec.
pub const ATTR_CODEC_MASK: i16 = 0x07;
/// Attribute bit 3: the batch's timestamps are the broker's append time
/// (its maxTimestamp), not the producer's.
pub const ATTR_LOG_APPEND_TIME: i16 = 0x08;
/// Attribute bit 4: part of a transaction.
pub const ATTR_TRANSACTIONAL: i16 = 0x10;
/// Attribute bit 5: a control batch (transaction markers).
pub const ATTR_CONTROL: i16 = 0x20;
/// Attribute bit 6: baseTimestamp is the delete horizon of its tombstones.
pub const ATTR_DELETE_HORIZON: i16 = 0x40;

/// Largest zstd window accepted (2^23 = 8 MiB), bounding the decoder's memory.
pub const ZSTD_WINDOW_LOG_MAX: u32 = 23;

/// The start of a snappy stream in the xerial framing (Java clients' snappy).
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];

/// Why a batch could not be read or built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BatchError {
    /// Not a valid magic-2 record batch (bad CRC, truncated, unknown codec, ...).
    #[error("corrupt record batch: {0}")]
    Corrupt(String),
    /// Decompressed, the records are larger than the caller allows.
    #[error("record batch decodes to more than {limit} bytes")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
}

fn corrupt(what: impl Into<String>) -> BatchError {
    BatchError::Corrupt(what.into())
}

/// A batch's compression codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Uncompressed.
    None,
    /// gzip.
    Gzip,
    /// Snappy (raw or in the xerial framing when reading; xerial when writing).
    Snappy,
    /// LZ4 frames.
    Lz4,
    /// Zstandard.
    Zstd,
}

impl Compression {
    /// The codec named by a batch's attributes.
    ///
    /// # Errors
    /// [`BatchError::Corrupt`] for codec bits 5-7.
    pub fn from_attributes(attributes: i16) -> Result<Self, BatchError> {
        Ok(match attributes & ATTR_CODEC_MASK {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            c => return Err(corrupt(format!("compression codec {c}"))),
        })
    }

    /// The codec's attribute bits.
    pub fn bits(self) -> i16 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }
}

/// The fixed header of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchHeader {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Bytes after the length field.
    pub length: i32,
    /// The leader epoch the batch was appended in.
    pub partition_leader_epoch: i32,
    /// Always 2 for a batch this module accepts.
    pub magic: i8,
    /// CRC-32C of the bytes from the attributes to the end.
    pub crc: u32,
    /// Codec, timestamp type, transactional, control, delete horizon.
    pub attributes: i16,
    /// The last record's offset minus the first's.
    pub last_offset_delta: i32,
    /// The first record's timestamp (or the delete horizon).
    pub base_timestamp: i64,
    /// The largest record timestamp (the append time under LogAppendTime).
    pub max_timestamp: i64,
    /// The idempotent producer's id, -1 when none.
    pub producer_id: i64,
    /// Its epoch, -1 when none.
    pub producer_epoch: i16,
    /// The sequence number of the first record, -1 when none.
    pub base_sequence: i32,
    /// Records in the batch.
    pub count: i32,
}

fn be<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}

impl BatchHeader {
    /// Reads the header at the start of `b`; `None` when `b` is shorter than
    /// [`BATCH_HEADER_LEN`]. Nothing is checked.
    pub fn parse(b: &[u8]) -> Option<BatchHeader> {
        Some(BatchHeader {
            base_offset: i64::from_be_bytes(be(b, 0)?),
            length: i32::from_be_bytes(be(b, 8)?),
            partition_leader_epoch: i32::from_be_bytes(be(b, 12)?),
            magic: i8::from_be_bytes(be(b, 16)?),
            crc: u32::from_be_bytes(be(b, 17)?),
            attributes: i16::from_be_bytes(be(b, 21)?),
            last_offset_delta: i32::from_be_bytes(be(b, 23)?),
            base_timestamp: i64::from_be_bytes(be(b, 27)?),
            max_timestamp: i64::from_be_bytes(be(b, 35)?),
            producer_id: i64::from_be_bytes(be(b, 43)?),
            producer_epoch: i16::from_be_bytes(be(b, 51)?),
            base_sequence: i32::from_be_bytes(be(b, 53)?),
            count: i32::from_be_bytes(be(b, 57)?),
        })
    }

    /// Writes the header into the first [`BATCH_HEADER_LEN`] bytes of `out`
    /// (nothing when `out` is shorter).
    pub fn write(&self, out: &mut [u8]) {
        let Some(h) = out.get_mut(..BATCH_HEADER_LEN) else {
            return;
        };
        h[0..8].copy_from_slice(&self.base_offset.to_be_bytes());
        h[8..12].copy_from_slice(&self.length.to_be_bytes());
        h[12..16].copy_from_slice(&self.partition_leader_epoch.to_be_bytes());
        h[16..17].copy_from_slice(&self.magic.to_be_bytes());
        h[17..21].copy_from_slice(&self.crc.to_be_bytes());
        h[21..23].copy_from_slice(&self.attributes.to_be_bytes());
        h[23..27].copy_from_slice(&self.last_offset_delta.to_be_bytes());
        h[27..35].copy_from_slice(&self.base_timestamp.to_be_bytes());
        h[35..43].copy_from_slice(&self.max_timestamp.to_be_bytes());
        h[43..51].copy_from_slice(&self.producer_id.to_be_bytes());
        h[51..53].copy_from_slice(&self.producer_epoch.to_be_bytes());
        h[53..57].copy_from_slice(&self.base_sequence.to_be_bytes());
        h[57..61].copy_from_slice(&self.count.to_be_bytes());
    }

    /// The codec.
    ///
    /// # Errors
    /// An unknown codec.
    pub fn compression(&self) -> Result<Compression, BatchError> {
        Compression::from_attributes(self.attributes)
    }

    /// A control batch (transaction markers).
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// Part of a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// The records' timestamps are the append time (`max_timestamp`).
    pub fn log_append_time(&self) -> bool {
        self.attributes & ATTR_LOG_APPEND_TIME != 0
    }

    /// baseTimestamp holds the delete horizon, not the first record's time.
    pub fn has_delete_horizon(&self) -> bool {
        self.attributes & ATTR_DELETE_HORIZON != 0
    }

    /// How many offsets the batch covers (`last_offset_delta + 1`, at least 1).
    pub fn span(&self) -> u64 {
        u64::try_from(self.last_offset_delta).map_or(1, |d| d + 1)
    }

    /// A record's timestamp from its delta, as a consumer reads it.
    pub fn timestamp_of(&self, delta: i64) -> i64 {
        if self.log_append_time() {
            self.max_timestamp
        } else if self.has_delete_horizon() {
            // The first record's time is not kept once the horizon is set.
            self.max_timestamp
        } else {
            self.base_timestamp.wrapping_add(delta)
        }
    }
}

/// One whole batch of a record set, its CRC checked.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    /// The header.
    pub header: BatchHeader,
    /// The whole batch, header included.
    pub bytes: &'a [u8],
}

impl<'a> Batch<'a> {
    /// The records section as stored (compressed per the codec).
    pub fn data(&self) -> &'a [u8] {
        self.bytes.get(BATCH_HEADER_LEN..).unwrap_or_default()
    }

    /// The records section, decompressed, producing at most `limit` bytes.
    ///
    /// # Errors
    /// An unknown codec, a corrupt stream, or more than `limit` bytes.
    pub fn records(&self, limit: usize) -> Result<Cow<'a, [u8]>, BatchError> {
        decompress(self.header.compression()?, self.data(), limit)
    }
}

/// The batches of a record set, in order, each checked: whole, magic 2,
/// CRC-32C. The iterator ends after the first error.
#[derive(Debug, Clone)]
pub struct Batches<'a> {
    rest: &'a [u8],
    failed: bool,
}

/// The batches of a record set (one or more magic-2 batches back to back).
pub fn batches(set: &[u8]) -> Batches<'_> {
    Batches {
        rest: set,
        failed: false,
    }
}

impl<'a> Iterator for Batches<'a> {
    type Item = Result<Batch<'a>, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let r = check(self.rest);
        match &r {
            Ok(b) => self.rest = self.rest.get(b.bytes.len()..).unwrap_or_default(),
            Err(_) => self.failed = true,
        }
        Some(r)
    }
}

/// Checks the batch at the start of `buf` (length, magic, CRC-32C).
///
/// # Errors
/// [`BatchError::Corrupt`] naming what is wrong.
pub fn check(buf: &[u8]) -> Result<Batch<'_>, BatchError> {
    let Some(header) = BatchHeader::parse(buf) else {
        return Err(corrupt(format!(
            "{} bytes left, a batch header takes {BATCH_HEADER_LEN}",
            buf.len()
        )));
    };
    let size = usize::try_from(header.length)
        .ok()
        .and_then(|l| l.checked_add(LEADER_EPOCH_AT))
        .filter(|s| (BATCH_HEADER_LEN..=buf.len()).contains(s))
        .ok_or_else(|| {
            corrupt(format!(
                "batch length {}, {} bytes left",
                header.length,
                buf.len()
            ))
        })?;
    if header.magic != 2 {
        return Err(corrupt(format!(
            "magic {} (only 2 is accepted)",
            header.magic
        )));
    }
    let bytes = &buf[..size];
    let actual = crc32c::crc32c(&bytes[CRC_START..]);
    if header.crc != actual {
        return Err(corrupt(format!(
            "CRC {:#010x}, the batch's is {actual:#010x}",
            header.crc
        )));
    }
    Ok(Batch { header, bytes })
}

/// The size of the largest batch in a record set, by the batches' length
/// fields (what Kafka compares with `max.message.bytes`); stops at the first
/// length that does not fit.
pub fn largest_batch(set: &[u8]) -> usize {
    let mut at = 0usize;
    let mut largest = 0usize;
    while let Some(len) = be::<4>(set, at + 8) {
        let len = i32::from_be_bytes(len);
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

// ------------------------------------------------------------ compression

/// Reads `r` to its end, refusing as soon as the output passes `limit`.
fn read_capped(mut r: impl Read, limit: usize, codec: &str) -> Result<Vec<u8>, BatchError> {
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
            return Err(BatchError::TooLarge { limit });
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// One raw snappy block appended to `out`, its declared length checked
/// against the room left before anything is allocated.
fn snappy_block(block: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), BatchError> {
    let len = snap::raw::decompress_len(block).map_err(|e| corrupt(format!("snappy: {e}")))?;
    if len > limit.saturating_sub(out.len()) {
        return Err(BatchError::TooLarge { limit });
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
fn snappy(data: &[u8], limit: usize) -> Result<Vec<u8>, BatchError> {
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

/// Decompresses a batch's records section, producing at most `limit` bytes
/// (an uncompressed section is borrowed as it is, within the same limit).
///
/// # Errors
/// A corrupt stream, or more than `limit` bytes.
pub fn decompress(
    codec: Compression,
    data: &[u8],
    limit: usize,
) -> Result<Cow<'_, [u8]>, BatchError> {
    let out = match codec {
        Compression::None => {
            if data.len() > limit {
                return Err(BatchError::TooLarge { limit });
            }
            return Ok(Cow::Borrowed(data));
        }
        Compression::Gzip => read_capped(flate2::read::MultiGzDecoder::new(data), limit, "gzip")?,
        Compression::Snappy => snappy(data, limit)?,
        Compression::Lz4 => {
            let d = lz4::Decoder::new(data).map_err(|e| corrupt(format!("lz4: {e}")))?;
            read_capped(d, limit, "lz4")?
        }
        Compression::Zstd => {
            let mut d = zstd::stream::read::Decoder::new(data)
                .map_err(|e| corrupt(format!("zstd: {e}")))?;
            d.window_log_max(ZSTD_WINDOW_LOG_MAX)
                .map_err(|e| corrupt(format!("zstd: {e}")))?;
            read_capped(d, limit, "zstd")?
        }
    };
    Ok(Cow::Owned(out))
}

/// Compresses a records section with `codec` (snappy in the xerial framing,
/// as Java clients write it; lz4 as LZ4 frames; each codec at its default
/// level).
///
/// # Errors
/// [`BatchError::Corrupt`] when a codec fails (out of memory in the C
/// library, in practice).
pub fn compress(codec: Compression, data: &[u8]) -> Result<Vec<u8>, BatchError> {
    let failed = |c: &str, e: std::io::Error| corrupt(format!("{c} compression: {e}"));
    match codec {
        Compression::None => Ok(data.to_vec()),
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(
                Vec::with_capacity(data.len() / 2 + 64),
                flate2::Compression::default(),
            );
            e.write_all(data).map_err(|e| failed("gzip", e))?;
            e.finish().map_err(|e| failed("gzip", e))
        }
        Compression::Snappy => {
            let mut out = Vec::with_capacity(data.len() / 2 + 64);
            out.extend_from_slice(&XERIAL_MAGIC);
            out.extend_from_slice(&1i32.to_be_bytes()); // xerial version
            out.extend_from_slice(&1i32.to_be_bytes()); // minimum compatible version
            let mut enc = snap::raw::Encoder::new();
            for chunk in data.chunks(32 * 1024) {
                let block = enc
                    .compress_vec(chunk)
                    .map_err(|e| corrupt(format!("snappy compression: {e}")))?;
                let len = u32::try_from(block.len()).unwrap_or(u32::MAX);
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(&block);
            }
            Ok(out)
        }
        Compression::Lz4 => {
            let mut e = lz4::EncoderBuilder::new()
                .build(Vec::with_capacity(data.len() / 2 + 64))
                .map_err(|e| failed("lz4", e))?;
            e.write_all(data).map_err(|e| failed("lz4", e))?;
            let (out, r) = e.finish();
            r.map_err(|e| failed("lz4", e))?;
            Ok(out)
        }
        Compression::Zstd => zstd::bulk::compress(data, 0).map_err(|e| failed("zstd", e)),
    }
}

// ------------------------------------------------------------ records

/// One record of a batch, borrowed from the (decompressed) records section.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a, 'h> {
    /// The record's offset delta from the batch's base offset.
    pub offset_delta: i32,
    /// The record's timestamp, as a consumer reads it (the batch's
    /// maxTimestamp under LogAppendTime).
    pub timestamp: i64,
    /// Key (`None`: null).
    pub key: Option<&'a [u8]>,
    /// Value (`None`: null, a tombstone).
    pub value: Option<&'a [u8]>,
    /// Headers in order (`None`: a null value), names checked to be UTF-8.
    pub headers: &'h [(&'a str, Option<&'a [u8]>)],
}

impl RecordView<'_, '_> {
    /// Bytes of keys, values, header names and header values.
    pub fn data_len(&self) -> usize {
        self.key.map_or(0, <[u8]>::len)
            + self.value.map_or(0, <[u8]>::len)
            + self
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.map_or(0, <[u8]>::len))
                .sum::<usize>()
    }
}

/// A forward-only reader over a slice, for the records inside a batch.
struct Cur<'a> {
    b: &'a [u8],
}

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], BatchError> {
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

    fn varint_u64(&mut self) -> Result<u64, BatchError> {
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

    fn varlong(&mut self) -> Result<i64, BatchError> {
        let n = self.varint_u64()?;
        Ok(((n >> 1) as i64) ^ -((n & 1) as i64))
    }

    fn varint(&mut self) -> Result<i32, BatchError> {
        i32::try_from(self.varlong()?).map_err(|_| corrupt("varint out of i32 range"))
    }

    /// A length-prefixed field; -1 is null.
    fn nullable(&mut self, what: &str) -> Result<Option<&'a [u8]>, BatchError> {
        match self.varint()? {
            -1 => Ok(None),
            n => {
                let n = usize::try_from(n).map_err(|_| corrupt(format!("{what} length {n}")))?;
                self.take(n, what).map(Some)
            }
        }
    }
}

/// Walks the `header.count` records of a decompressed records section,
/// handing each to `sink` in order. Every record must be whole and the
/// section must end with the last one; offset deltas must increase and stay
/// within `last_offset_delta`.
///
/// # Errors
/// [`BatchError::Corrupt`] (as `E`), or the sink's error.
pub fn for_each_record<E: From<BatchError>>(
    header: &BatchHeader,
    records: &[u8],
    sink: &mut dyn FnMut(RecordView<'_, '_>) -> Result<(), E>,
) -> Result<(), E> {
    let count = usize::try_from(header.count)
        .map_err(|_| corrupt(format!("record count {}", header.count)))?;
    let mut cur = Cur { b: records };
    let mut headers: Vec<(&str, Option<&[u8]>)> = Vec::new();
    let mut last_delta: i64 = -1;
    for i in 0..count {
        let rlen = cur.varint()?;
        let rlen =
            usize::try_from(rlen).map_err(|_| corrupt(format!("record {i} length {rlen}")))?;
        let mut r = Cur {
            b: cur.take(rlen, "record")?,
        };
        if r.b.is_empty() {
            return Err(corrupt(format!("record {i} is empty")).into());
        }
        r.take(1, "attributes")?;
        let ts_delta = r.varlong()?;
        let offset_delta = r.varint()?;
        if i64::from(offset_delta) <= last_delta || offset_delta > header.last_offset_delta {
            return Err(corrupt(format!(
                "record {i} has offset delta {offset_delta} (after {last_delta}, last {})",
                header.last_offset_delta
            ))
            .into());
        }
        last_delta = i64::from(offset_delta);
        let key = r.nullable("key")?;
        let value = r.nullable("value")?;
        let n = r.varint()?;
        let n = usize::try_from(n).map_err(|_| corrupt(format!("header count {n}")))?;
        headers.clear();
        for _ in 0..n {
            let k = r.nullable("header name")?.unwrap_or_default();
            let k = std::str::from_utf8(k).map_err(|_| corrupt("header name is not UTF-8"))?;
            let v = r.nullable("header value")?;
            headers.push((k, v));
        }
        if !r.b.is_empty() {
            return Err(corrupt(format!("record {i} has {} bytes past its end", r.b.len())).into());
        }
        sink(RecordView {
            offset_delta,
            timestamp: header.timestamp_of(ts_delta),
            key,
            value,
            headers: &headers,
        })?;
    }
    if !cur.b.is_empty() {
        return Err(corrupt(format!(
            "{} bytes past the batch's {count} records",
            cur.b.len()
        ))
        .into());
    }
    Ok(())
}

// ------------------------------------------------------------ building

fn put_varlong(out: &mut Vec<u8>, v: i64) {
    let mut n = ((v << 1) ^ (v >> 63)) as u64;
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn put_nullable(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => put_varlong(out, -1),
        Some(b) => {
            put_varlong(out, i64::try_from(b.len()).unwrap_or(i64::MAX));
            out.extend_from_slice(b);
        }
    }
}

/// What a new batch says of itself besides its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMeta {
    /// Offset of the first record (0 from a producer: the broker assigns it).
    pub base_offset: i64,
    /// Leader epoch (0 from a producer; -1 is "unknown" to Kafka too).
    pub partition_leader_epoch: i32,
    /// Attribute bits other than the codec's (timestamp type,
    /// transactional, control, delete horizon).
    pub flags: i16,
    /// Producer id, -1 for none.
    pub producer_id: i64,
    /// Producer epoch, -1 for none.
    pub producer_epoch: i16,
    /// Sequence of the first record, -1 for none.
    pub base_sequence: i32,
    /// The last offset delta when it is not the last record's (a batch
    /// whose last records the cleaner removed keeps its span); `None`: the
    /// last record's.
    pub last_offset_delta: Option<i32>,
    /// The maxTimestamp to write (LogAppendTime: the append time); `None`:
    /// the largest record timestamp.
    pub max_timestamp: Option<i64>,
    /// The baseTimestamp when it is not the first record's (a delete
    /// horizon); `None`: the first record's.
    pub base_timestamp: Option<i64>,
}

impl Default for BatchMeta {
    fn default() -> Self {
        BatchMeta {
            base_offset: 0,
            partition_leader_epoch: 0,
            flags: 0,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            last_offset_delta: None,
            max_timestamp: None,
            base_timestamp: None,
        }
    }
}

/// Builds one batch: records are pushed in order, then [`BatchBuilder::finish`]
/// compresses them and writes the header and CRC.
#[derive(Debug, Default)]
pub struct BatchBuilder {
    records: Vec<u8>,
    rec: Vec<u8>,
    count: i32,
    base_ts: Option<i64>,
    max_ts: i64,
    last_delta: i32,
}

impl BatchBuilder {
    /// An empty builder; `base_timestamp` is the time the records' deltas
    /// count from (`None`: the first record's).
    pub fn new(base_timestamp: Option<i64>) -> Self {
        BatchBuilder {
            base_ts: base_timestamp,
            max_ts: i64::MIN,
            ..BatchBuilder::default()
        }
    }

    /// Records pushed so far.
    pub fn count(&self) -> i32 {
        self.count
    }

    /// Bytes of the uncompressed records section so far.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True before the first record.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Appends a record (offset deltas must increase; not checked here).
    pub fn push<'a>(
        &mut self,
        offset_delta: i32,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: impl IntoIterator<Item = (&'a str, Option<&'a [u8]>)>,
    ) {
        let base = *self.base_ts.get_or_insert(timestamp);
        self.max_ts = self.max_ts.max(timestamp);
        self.last_delta = offset_delta;
        self.rec.clear();
        self.rec.push(0);
        put_varlong(&mut self.rec, timestamp.wrapping_sub(base));
        put_varlong(&mut self.rec, i64::from(offset_delta));
        put_nullable(&mut self.rec, key);
        put_nullable(&mut self.rec, value);
        let mut hs = Vec::new();
        let mut n = 0i64;
        for (k, v) in headers {
            put_nullable(&mut hs, Some(k.as_bytes()));
            put_nullable(&mut hs, v);
            n += 1;
        }
        put_varlong(&mut self.rec, n);
        self.rec.extend_from_slice(&hs);
        put_varlong(
            &mut self.records,
            i64::try_from(self.rec.len()).unwrap_or(i64::MAX),
        );
        self.records.extend_from_slice(&self.rec);
        self.count = self.count.saturating_add(1);
    }

    /// The whole batch: header, CRC-32C and the records compressed with `codec`.
    ///
    /// # Errors
    /// A codec failure.
    pub fn finish(self, meta: &BatchMeta, codec: Compression) -> Result<Vec<u8>, BatchError> {
        let data = match codec {
            Compression::None => self.records,
            c => compress(c, &self.records)?,
        };
        let base_ts = meta.base_timestamp.or(self.base_ts).unwrap_or(-1);
        let max_ts = meta.max_timestamp.unwrap_or(if self.count == 0 {
            base_ts
        } else {
            self.max_ts
        });
        let mut out = vec![0u8; BATCH_HEADER_LEN];
        out.extend_from_slice(&data);
        let header = BatchHeader {
            base_offset: meta.base_offset,
            length: i32::try_from(out.len() - LEADER_EPOCH_AT).unwrap_or(i32::MAX),
            partition_leader_epoch: meta.partition_leader_epoch,
            magic: 2,
            crc: 0,
            attributes: (meta.flags & !ATTR_CODEC_MASK) | codec.bits(),
            last_offset_delta: meta.last_offset_delta.unwrap_or(self.last_delta),
            base_timestamp: base_ts,
            max_timestamp: max_ts,
            producer_id: meta.producer_id,
            producer_epoch: meta.producer_epoch,
            base_sequence: meta.base_sequence,
            count: self.count,
        };
        header.write(&mut out);
        let crc = crc32c::crc32c(&out[CRC_START..]);
        out[17..21].copy_from_slice(&crc.to_be_bytes());
        Ok(out)
    }
}

/// Writes the header's CRC-32C again after a change to its covered fields
/// (attributes onward) of the batch that fills `batch`.
pub fn reseal(batch: &mut [u8]) {
    if let Some(covered) = batch.get(CRC_START..) {
        let crc = crc32c::crc32c(covered);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Rec = (
        i32,
        i64,
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        Vec<(String, Option<Vec<u8>>)>,
    );

    fn read_all(batch: &[u8]) -> Result<(BatchHeader, Vec<Rec>), BatchError> {
        let b = check(batch)?;
        let data = b.records(1 << 20)?;
        let mut out = Vec::new();
        for_each_record::<BatchError>(&b.header, &data, &mut |r| {
            out.push((
                r.offset_delta,
                r.timestamp,
                r.key.map(<[u8]>::to_vec),
                r.value.map(<[u8]>::to_vec),
                r.headers
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), v.map(<[u8]>::to_vec)))
                    .collect(),
            ));
            Ok(())
        })?;
        Ok((b.header, out))
    }

    fn sample(codec: Compression, meta: &BatchMeta) -> Vec<u8> {
        let mut b = BatchBuilder::new(None);
        b.push(
            0,
            1000,
            Some(b"k0"),
            Some(b"hello hello hello"),
            [("h", Some(&b"1"[..])), ("h", None)],
        );
        b.push(1, 990, None, None, []);
        b.push(3, 1005, Some(b""), Some(b""), [("x", Some(&b""[..]))]);
        b.finish(meta, codec).unwrap()
    }

    #[test]
    fn every_codec_round_trips_records_headers_nulls_and_gaps() {
        for codec in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let meta = BatchMeta {
                producer_id: 7,
                producer_epoch: 2,
                base_sequence: 40,
                flags: ATTR_TRANSACTIONAL,
                ..BatchMeta::default()
            };
            let batch = sample(codec, &meta);
            let (h, recs) = read_all(&batch).unwrap();
            assert_eq!(h.compression().unwrap(), codec);
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.base_sequence),
                (7, 2, 40)
            );
            assert!(h.is_transactional() && !h.is_control());
            assert_eq!((h.count, h.last_offset_delta, h.span()), (3, 3, 4));
            assert_eq!((h.base_timestamp, h.max_timestamp), (1000, 1005));
            assert_eq!(recs.len(), 3);
            assert_eq!(
                recs[0].4,
                vec![
                    ("h".to_owned(), Some(b"1".to_vec())),
                    ("h".to_owned(), None)
                ]
            );
            assert_eq!(
                (recs[1].1, recs[1].2.clone(), recs[1].3.clone()),
                (990, None, None)
            );
            assert_eq!((recs[2].0, recs[2].3.clone()), (3, Some(Vec::new())));
        }
    }

    #[test]
    fn kafka_protocols_decoder_reads_what_the_builder_writes() {
        use kafka_protocol::records::RecordBatchDecoder;
        for codec in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let batch = sample(codec, &BatchMeta::default());
            let mut b = bytes::Bytes::from(batch);
            let set = RecordBatchDecoder::decode(&mut b).unwrap();
            assert_eq!(set.records.len(), 3, "{codec:?}");
            assert_eq!(set.records[2].offset, 3);
            assert_eq!(set.records[1].timestamp, 990);
            assert!(set.records[1].value.is_none());
        }
    }

    #[test]
    fn log_append_time_gives_every_record_the_max_timestamp() {
        let meta = BatchMeta {
            flags: ATTR_LOG_APPEND_TIME,
            max_timestamp: Some(5000),
            ..BatchMeta::default()
        };
        let (h, recs) = read_all(&sample(Compression::Lz4, &meta)).unwrap();
        assert!(h.log_append_time());
        assert!(recs.iter().all(|r| r.1 == 5000));
    }

    #[test]
    fn damage_truncation_and_bombs_are_errors_not_panics() {
        let batch = sample(Compression::None, &BatchMeta::default());
        for cut in 0..batch.len() {
            assert!(check(&batch[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = batch.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        assert!(matches!(check(&bad), Err(BatchError::Corrupt(_))));
        // A zstd bomb: 64 MiB of zeros compressed to a few KB, read with a 1 MiB limit.
        let zeros = vec![0u8; 64 << 20];
        let z = compress(Compression::Zstd, &zeros).unwrap();
        assert!(z.len() < 64 << 10);
        assert_eq!(
            decompress(Compression::Zstd, &z, 1 << 20),
            Err(BatchError::TooLarge { limit: 1 << 20 })
        );
        // Offset deltas must increase.
        let mut b = BatchBuilder::new(None);
        b.push(1, 1, None, Some(b"a"), []);
        b.push(1, 1, None, Some(b"b"), []);
        let twice = b.finish(&BatchMeta::default(), Compression::None).unwrap();
        assert!(read_all(&twice).is_err());
    }

    #[test]
    fn a_set_of_batches_splits_and_largest_batch_sizes_it() {
        let a = sample(Compression::None, &BatchMeta::default());
        let b = sample(Compression::Gzip, &BatchMeta::default());
        let mut set = a.clone();
        set.extend_from_slice(&b);
        let got: Vec<_> = batches(&set).collect::<Result<_, _>>().unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].bytes, &b[..]);
        assert_eq!(largest_batch(&set), a.len().max(b.len()));
    }

    proptest::proptest! {
        #[test]
        fn reading_never_panics_on_damaged_batches(at in 0usize..400, byte in proptest::prelude::any::<u8>(), codec in 0usize..5) {
            let codec = [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd][codec];
            let mut b = sample(codec, &BatchMeta::default());
            let i = at % b.len();
            b[i] = byte;
            reseal(&mut b);
            let _ = read_all(&b);
        }

        #[test]
        fn reading_never_panics_on_noise(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            for b in batches(&bytes).flatten() {
                let _ = read_all(b.bytes);
            }
        }
    }
}

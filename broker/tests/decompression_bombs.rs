//! "Zip bombs" in produced Kafka batches, one per codec: small batches that
//! would inflate to gigabytes (32 GiB for gzip and zstd, more than this
//! machine's memory; 8 GiB for lz4; 4 GiB declared for raw snappy) are
//! refused with TooLarge. That nothing was inflated whole is checked by how
//! much decoding raised the process's peak resident memory (VmHWM, reset
//! before each decode), which stays far below any of those sizes: a decoder
//! that inflated first and checked afterwards would push it past them (or
//! run out of memory).

use std::io::Write;

use bytes::{BufMut, Bytes, BytesMut};
use flume_broker::kafka::records::{prepare, ProduceRules, RecordsError};

/// What a produce of `set` is held to here: decoding within `limit`.
fn decode(set: &[u8], limit: usize) -> Result<u32, RecordsError> {
    let rules = ProduceRules {
        limit,
        max_record_bytes: usize::MAX,
        append_time: None,
        compression: None,
        keyed_only: false,
        transactional: false,
    };
    prepare(set, &rules).map(|p| p.records)
}

const LIMIT: usize = 1 << 20;
const MIB: usize = 1 << 20;

/// A field of /proc/self/status in bytes (Linux), if known.
fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// One bomb at a time: the peak is measured for this process, so the tests
/// of this binary take turns while one is measured.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn assert_refused(set: &Bytes, inflated: u64, codec: &str) {
    let _turn = MEASURING.lock().unwrap_or_else(|p| p.into_inner());
    // Reset the peak (VmHWM) to the current resident size, so the peak below
    // is what decoding this bomb added (Linux: clear_refs "5").
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let base = status_bytes("VmRSS:");
    let r = decode(set, LIMIT);
    assert!(
        matches!(r, Err(RecordsError::TooLarge { limit: LIMIT })),
        "{codec}: {r:?}"
    );
    if let (true, Some(base), Some(peak)) = (reset, base, status_bytes("VmHWM:")) {
        let grown = peak.saturating_sub(base);
        assert!(
            grown < 256 << 20 && grown < inflated / 2,
            "{codec}: decoding grew the resident memory by {grown} bytes; the bomb of {} bytes inflates to {inflated}",
            set.len()
        );
    }
}

/// One magic-2 batch of `count` records whose (compressed) records are `payload`.
fn batch(codec: i16, payload: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(61 + payload.len());
    b.put_i64(0);
    b.put_i32(0); // length, patched
    b.put_i32(-1);
    b.put_i8(2);
    b.put_u32(0); // crc, patched
    b.put_i16(codec);
    b.put_i32(0);
    b.put_i64(1_700_000_000_000);
    b.put_i64(1_700_000_000_000);
    b.put_i64(-1);
    b.put_i16(-1);
    b.put_i32(-1);
    b.put_i32(1);
    b.put_slice(payload);
    let len = i32::try_from(b.len() - 12).expect("small");
    b[8..12].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

fn repeat(part: &[u8], times: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(part.len() * times);
    for _ in 0..times {
        v.extend_from_slice(part);
    }
    v
}

#[test]
fn a_gzip_bomb_is_refused_without_inflating_it() {
    // 32 768 gzip members of 1 MiB of zeros: 32 GiB from about 33 MB.
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(&vec![0u8; MIB]).expect("gzip");
    let member = e.finish().expect("gzip");
    let times = 32 * 1024;
    let set = batch(1, &repeat(&member, times));
    assert_refused(&set, (MIB * times) as u64, "gzip");
}

#[test]
fn a_zstd_bomb_is_refused_without_inflating_it() {
    // 32 768 zstd frames of 1 MiB of zeros: 32 GiB from a few MB.
    let frame = zstd::bulk::compress(&vec![0u8; MIB], 1).expect("zstd");
    let times = 32 * 1024;
    let set = batch(4, &repeat(&frame, times));
    assert_refused(&set, (MIB * times) as u64, "zstd");
}

#[test]
fn an_lz4_bomb_is_refused_without_inflating_it() {
    // One lz4 frame of 2 048 independent 4 MiB blocks of zeros: 8 GiB from about 33 MB.
    let mut e = lz4::EncoderBuilder::new()
        .block_size(lz4::BlockSize::Max4MB)
        .block_mode(lz4::BlockMode::Independent)
        .checksum(lz4::ContentChecksum::NoChecksum)
        .build(Vec::new())
        .expect("lz4");
    e.write_all(&vec![0u8; 4 * MIB]).expect("lz4");
    let (frame, r) = e.finish();
    r.expect("lz4");
    // magic, FLG, BD, header checksum | one block | end mark
    let (header, rest) = frame.split_at(7);
    let block = &rest[..rest.len() - 4];
    let times = 2048;
    let mut payload = header.to_vec();
    payload.extend_from_slice(&repeat(block, times));
    payload.extend_from_slice(&[0, 0, 0, 0]);
    let set = batch(3, &payload);
    assert_refused(&set, (4 * MIB * times) as u64, "lz4");
    // The same frame with one block is accepted by the decoder (and fails
    // only as records, being zeros): the splice is a valid lz4 frame.
    let mut one = header.to_vec();
    one.extend_from_slice(block);
    one.extend_from_slice(&[0, 0, 0, 0]);
    let r = decode(&batch(3, &one), LIMIT);
    assert!(
        matches!(r, Err(RecordsError::TooLarge { .. })),
        "4 MiB > 1 MiB: {r:?}"
    );
}

#[test]
fn a_snappy_bomb_is_refused_without_inflating_it() {
    // Xerial framing (Java's): 4 096 blocks of 64 KiB of zeros, 256 MiB.
    let block = snap::raw::Encoder::new()
        .compress_vec(&vec![0u8; 64 * 1024])
        .expect("snappy");
    let mut payload = vec![
        0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1,
    ];
    let mut framed = Vec::new();
    framed.extend_from_slice(&u32::try_from(block.len()).expect("small").to_be_bytes());
    framed.extend_from_slice(&block);
    let times = 4096;
    payload.extend_from_slice(&repeat(&framed, times));
    assert_refused(
        &batch(2, &payload),
        (64 * 1024 * times) as u64,
        "snappy xerial",
    );
    // Raw snappy (librdkafka's) declaring 4 GiB: refused before anything is allocated.
    let mut raw = vec![0xff, 0xff, 0xff, 0xff, 0x0f];
    raw.extend_from_slice(&[0u8; 64]);
    assert_refused(&batch(2, &raw), u64::from(u32::MAX), "snappy raw");
}

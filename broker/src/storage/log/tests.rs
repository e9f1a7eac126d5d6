//! Unit tests of the parent module, compiled only under #[cfg(test)].
use super::*;
use bytes::Bytes;
use flume_protocol::record::{decode_all, encode, Record};
use proptest::prelude::*;

fn batch(values: &[Vec<u8>], ts: i64) -> Vec<u8> {
    let mut buf = Vec::new();
    for v in values {
        encode(&mut buf, 0, ts, Some(b"key"), v, &[]);
    }
    buf
}

fn value(i: u64) -> Vec<u8> {
    format!("value-{i:06}").into_bytes()
}

fn small() -> LogConfig {
    LogConfig {
        segment_bytes: 600,
        index_interval_bytes: 100,
        ..LogConfig::default()
    }
}

fn read_all(log: &Log) -> Vec<Record> {
    let mut out = Vec::new();
    let mut next = log.start_offset();
    while next < log.end_offset() {
        let r = log.read(next, 1000).unwrap();
        let recs = decode_all(&Bytes::from(r.records)).unwrap();
        assert!(!recs.is_empty(), "no progress at {next}");
        next = recs.last().unwrap().offset + 1;
        out.extend(recs);
    }
    out
}

fn append_n(log: &mut Log, from: u64, n: u64) {
    for i in from..from + n {
        let base = log.append(&mut batch(&[value(i)], i as i64)).unwrap();
        assert_eq!(base, i);
    }
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    v.sort();
    v
}

#[test]
fn round_trip_over_rollovers_and_every_index_boundary() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small()).unwrap();
    append_n(&mut log, 0, 200);
    // batches too
    let vals: Vec<Vec<u8>> = (200..230).map(value).collect();
    assert_eq!(log.append(&mut batch(&vals, 7)).unwrap(), 200);
    assert!(
        log.segment_count() > 5,
        "rolled {} times",
        log.segment_count()
    );
    for off in 0..230u64 {
        // one record at a time: exercises lookup at every segment and index boundary
        let r = log.read(off, 1).unwrap();
        let recs = decode_all(&Bytes::from(r.records)).unwrap();
        assert_eq!(recs.len(), 1, "offset {off}");
        assert_eq!(recs[0].offset, off);
        assert_eq!(recs[0].payload(), &value(off)[..]);
    }
    let all = read_all(&log);
    assert_eq!(all.len(), 230);
    assert!(all.iter().enumerate().all(|(i, r)| r.offset == i as u64));
    assert_eq!(log.read(230, 100).unwrap().records.len(), 0);
    assert!(matches!(
        log.read(231, 100),
        Err(StorageError::OffsetOutOfRange {
            requested: 231,
            log_start: 0,
            log_end: 230
        })
    ));
}

#[test]
fn a_big_record_is_returned_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
    let big = vec![7u8; 10_000];
    log.append(&mut batch(&[big.clone(), b"small".to_vec()], 1))
        .unwrap();
    let r = log.read(0, 10).unwrap();
    let recs = decode_all(&Bytes::from(r.records)).unwrap();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].payload().len(), 10_000);
}

#[test]
fn reopen_after_clean_close_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small()).unwrap();
    append_n(&mut log, 0, 120);
    log.close().unwrap();
    let mut log = Log::open(dir.path(), small()).unwrap();
    assert_eq!(log.end_offset(), 120);
    append_n(&mut log, 120, 5);
    assert_eq!(read_all(&log).len(), 125);
}

#[test]
fn torn_write_keeps_whole_records_and_appends_continue() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small()).unwrap();
    append_n(&mut log, 0, 50);
    drop(log);
    let active = segment_files(dir.path()).pop().unwrap();
    let len = std::fs::metadata(&active).unwrap().len();
    // Cut 5 bytes off: the last record is torn.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&active)
        .unwrap()
        .set_len(len - 5)
        .unwrap();
    let mut log = Log::open(dir.path(), small()).unwrap();
    assert_eq!(log.end_offset(), 49);
    assert!(std::fs::metadata(&active).unwrap().len() < len - 5);
    append_n(&mut log, 49, 3);
    let all = read_all(&log);
    assert_eq!(all.len(), 52);
    assert_eq!(all[49].payload(), &value(49)[..]);
}

#[test]
fn flipped_byte_in_active_tail_is_truncated_there() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
    append_n(&mut log, 0, 20);
    drop(log);
    let active = segment_files(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&active).unwrap();
    let rec_len = (bytes.len() - 8) / 20;
    // Corrupt the payload of record 15.
    let at = 8 + 15 * rec_len + 20;
    bytes[at] ^= 0xff;
    std::fs::write(&active, &bytes).unwrap();
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    assert_eq!(log.end_offset(), 15);
    assert_eq!(read_all(&log).len(), 15);
}

#[test]
fn flipped_byte_in_sealed_segment_is_a_read_error_naming_the_offset() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small()).unwrap();
    append_n(&mut log, 0, 60);
    drop(log);
    let first = segment_files(dir.path()).remove(0);
    let mut bytes = std::fs::read(&first).unwrap();
    let last = bytes.len() - 3; // inside the last record's value
    bytes[last] ^= 0x01;
    std::fs::write(&first, &bytes).unwrap();
    let log = Log::open(dir.path(), small()).unwrap();
    assert_eq!(log.end_offset(), 60, "sealed segments are trusted on open");
    let mut bad = None;
    for off in 0..60 {
        if let Err(e) = log.read(off, 1) {
            bad = Some((off, e));
            break;
        }
    }
    let (off, err) = bad.expect("the corrupt record must not be served");
    match err {
        StorageError::Corrupt {
            offset, segment, ..
        } => {
            assert_eq!(offset, off);
            assert_eq!(segment, first);
        }
        other => panic!("unexpected error {other}"),
    }
    // verify_sealed refuses to open and says where.
    let err = Log::open(
        dir.path(),
        LogConfig {
            verify_sealed: true,
            ..small()
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("corrupt record"), "{err}");
}

#[test]
fn deleted_or_garbage_index_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small()).unwrap();
    append_n(&mut log, 0, 100);
    drop(log);
    let mut indexes: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "index"))
        .collect();
    indexes.sort();
    std::fs::remove_file(&indexes[0]).unwrap();
    std::fs::write(indexes.last().unwrap(), b"garbage!garbage!").unwrap();
    std::fs::write(
        &indexes[1],
        b"FLMIDX\x00\x01\xff\xff\xff\xff\xff\xff\xff\xff",
    )
    .unwrap();
    let log = Log::open(dir.path(), small()).unwrap();
    assert!(indexes[0].exists());
    assert_eq!(read_all(&log).len(), 100);
    for off in 0..100 {
        assert_eq!(
            decode_all(&Bytes::from(log.read(off, 1).unwrap().records)).unwrap()[0].offset,
            off
        );
    }
}

#[test]
fn retention_by_bytes_and_time_advances_start() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        retention_bytes: Some(1500),
        ..small()
    };
    let mut log = Log::open(dir.path(), cfg).unwrap();
    append_n(&mut log, 0, 100);
    let removed = log.enforce_retention(0).unwrap();
    assert!(removed > 0);
    assert!(log.size_bytes() <= 1500);
    let start = log.start_offset();
    assert!(start > 0);
    assert!(matches!(
        log.read(0, 10),
        Err(StorageError::OffsetOutOfRange { requested: 0, log_start, log_end: 100 }) if log_start == start
    ));
    assert_eq!(read_all(&log).first().unwrap().offset, start);
    drop(log);
    let log = Log::open(dir.path(), small()).unwrap();
    assert_eq!(log.start_offset(), start);

    // Time: records carry timestamp = offset; keep only what is newer than now - 10.
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        retention_ms: Some(10),
        ..small()
    };
    let mut log = Log::open(dir.path(), cfg).unwrap();
    append_n(&mut log, 0, 100);
    log.enforce_retention(100).unwrap();
    let start = log.start_offset();
    assert!(start > 50, "start {start}");
    // every remaining sealed segment has a record newer than the cut-off
    assert!(read_all(&log).iter().all(|r| r.offset >= start));
    // The active segment stays even if old.
    log.enforce_retention(1_000_000).unwrap();
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.end_offset(), 100);
}

#[derive(Debug, Clone)]
enum Op {
    Append(Vec<Vec<u8>>),
    Read(u64, usize),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..6).prop_map(Op::Append),
        3 => (0u64..200, 1usize..2000).prop_map(|(o, m)| Op::Read(o, m)),
        1 => Just(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn behaves_like_a_vec(ops in proptest::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LogConfig { segment_bytes: 1024, index_interval_bytes: 128, ..LogConfig::default() };
        let mut log = Log::open(dir.path(), cfg.clone()).unwrap();
        let mut model: Vec<Vec<u8>> = Vec::new();
        for op in ops {
            match op {
                Op::Append(vals) => {
                    let base = log.append(&mut batch(&vals, 1)).unwrap();
                    prop_assert_eq!(base, model.len() as u64);
                    model.extend(vals);
                }
                Op::Read(off, max) => {
                    let off = off % (model.len() as u64 + 2);
                    match log.read(off, max) {
                        Ok(r) => {
                            let recs = decode_all(&Bytes::from(r.records)).unwrap();
                            if off < model.len() as u64 {
                                prop_assert!(!recs.is_empty());
                            } else {
                                prop_assert!(recs.is_empty());
                            }
                            for (i, rec) in recs.iter().enumerate() {
                                prop_assert_eq!(rec.offset, off + i as u64);
                                prop_assert_eq!(rec.payload(), &model[(off as usize) + i][..]);
                            }
                        }
                        Err(StorageError::OffsetOutOfRange { .. }) => prop_assert!(off > model.len() as u64),
                        Err(e) => prop_assert!(false, "{}", e),
                    }
                }
                Op::Reopen => {
                    drop(log);
                    log = Log::open(dir.path(), cfg.clone()).unwrap();
                    prop_assert_eq!(log.end_offset(), model.len() as u64);
                }
            }
        }
    }
}

#[test]
fn reopening_a_segment_shorter_than_one_index_interval_leaves_its_index_alone() {
    // An empty index is valid below one interval; it used to be rebuilt (a
    // truncate and a write) at every open, most of a restart with many partitions.
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        index_interval_bytes: 4096,
        ..LogConfig::default()
    };
    let mut log = Log::open(dir.path(), cfg.clone()).unwrap();
    log.append(&mut batch(&[value(1)], 1)).unwrap();
    drop(log);
    let index = dir.path().join(segment::file_name(0, "index"));
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
    std::fs::File::options()
        .write(true)
        .open(&index)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let log = Log::open(dir.path(), cfg).unwrap();
    assert_eq!(log.end_offset(), 1);
    assert_eq!(
        std::fs::metadata(&index).unwrap().modified().unwrap(),
        old,
        "the index was rewritten"
    );
}

/// Timestamps that go back and forth, as several producers' clocks give.
fn wobbly_ts(i: u64) -> i64 {
    let i = i as i64;
    1_000 + i * 10 + if i % 7 == 3 { -45 } else { 0 } + if i % 11 == 5 { 60 } else { 0 }
}

fn append_wobbly(log: &mut Log, n: u64) -> Vec<i64> {
    (0..n)
        .map(|i| {
            let ts = wobbly_ts(i);
            log.append(&mut batch(&[value(i)], ts)).unwrap();
            ts
        })
        .collect()
}

/// The first offset whose timestamp is at least `t`, by brute force.
fn model_find(ts: &[i64], t: i64) -> Option<(u64, i64)> {
    ts.iter().position(|&x| x >= t).map(|i| (i as u64, ts[i]))
}

fn check_every_time(log: &Log, ts: &[i64]) {
    for t in 900..2_200 {
        assert_eq!(log.find_time(t).unwrap(), model_find(ts, t), "time {t}");
    }
}

#[test]
fn find_time_gives_the_first_offset_at_or_after_a_time_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small()).unwrap();
    let ts = append_wobbly(&mut log, 120);
    assert!(log.segment_count() > 3, "{}", log.segment_count());
    check_every_time(&log, &ts);
    assert_eq!(log.find_time(i64::MAX).unwrap(), None);
    assert_eq!(log.find_time(i64::MIN).unwrap(), Some((0, ts[0])));
    // The index's timestamps survive a reopen (and are not rebuilt).
    drop(log);
    let log = Log::open(dir.path(), small()).unwrap();
    check_every_time(&log, &ts);
}

#[test]
fn index_entries_carry_the_largest_earlier_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small()).unwrap();
    let ts = append_wobbly(&mut log, 40);
    drop(log);
    let raw = std::fs::read(dir.path().join(segment::file_name(0, "index"))).unwrap();
    assert_eq!(&raw[..8], b"FLMIDX\x00\x02");
    let entries: Vec<&[u8]> = raw[8..].chunks_exact(16).collect();
    assert!(!entries.is_empty());
    for e in entries {
        let rel = u32::from_be_bytes(e[0..4].try_into().unwrap()) as usize;
        let max_before = i64::from_be_bytes(e[8..16].try_into().unwrap());
        assert_eq!(
            max_before,
            *ts[..rel].iter().max().unwrap(),
            "entry at {rel}"
        );
    }
}

#[test]
fn a_version_1_index_of_an_old_data_directory_opens_and_is_rebuilt_with_timestamps() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small()).unwrap();
    let ts = append_wobbly(&mut log, 120);
    drop(log);
    // Turn every index into what a version 1 broker wrote: 8-byte entries, no timestamps.
    let mut converted = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "index") {
            let raw = std::fs::read(&path).unwrap();
            let mut old = b"FLMIDX\x00\x01".to_vec();
            for e in raw[8..].chunks_exact(16) {
                old.extend_from_slice(&e[..8]);
            }
            std::fs::write(&path, old).unwrap();
            converted += 1;
        }
    }
    assert!(converted > 3);
    let log = Log::open(dir.path(), small()).unwrap();
    assert_eq!(read_all(&log).len(), 120);
    check_every_time(&log, &ts);
    let raw = std::fs::read(dir.path().join(segment::file_name(0, "index"))).unwrap();
    assert_eq!(&raw[..8], b"FLMIDX\x00\x02", "rebuilt in the new version");
}

#[test]
fn find_time_reads_records_larger_than_its_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
    let big = vec![7u8; 300 * 1024];
    for (i, t) in [10i64, 20, 30].iter().enumerate() {
        let mut b = Vec::new();
        encode(&mut b, 0, *t, None, &big, &[]);
        assert_eq!(log.append(&mut b).unwrap(), i as u64);
    }
    assert_eq!(log.find_time(25).unwrap(), Some((2, 30)));
    assert_eq!(log.find_time(31).unwrap(), None);
}

#[test]
fn only_a_read_of_the_tail_this_process_just_wrote_is_hot() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = Duration::from_secs(3600);
    {
        let mut log = Log::open(dir.path(), small()).unwrap();
        assert!(!log.is_hot(0, 1 << 20, fresh), "an empty log has no tail");
        append_n(&mut log, 0, 20);
        let end = log.end_offset();
        let active_base = log.active().base;
        assert!(active_base > 0, "the small segments rolled");
        // The newest record: its index entry's position is within the segment.
        assert!(log.is_hot(end - 1, 1 << 20, fresh));
        // A window smaller than what the read would scan from its index entry.
        assert!(!log.is_hot(end - 1, 1, fresh));
        // A sealed segment, or no record there yet.
        assert!(!log.is_hot(active_base - 1, 1 << 20, fresh));
        assert!(!log.is_hot(end, 1 << 20, fresh));
        // The hot read is the ordinary read.
        let r = log.read(end - 1, 1000).unwrap();
        let recs = decode_all(&Bytes::from(r.records)).unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].payload(), &value(end - 1)[..]);
    }
    // Reopened: nothing was appended by this process, so its page cache is not
    // vouched for.
    let log = Log::open(dir.path(), small()).unwrap();
    assert!(!log.is_hot(log.end_offset() - 1, 1 << 20, fresh));
}

#[test]
fn index_entries_a_crash_lost_before_they_were_written_are_found_again() {
    // Entries reach the .index file INDEX_WRITE_EVERY at a time; a crash
    // loses the rest, and reopening finds them again from the log. Two logs
    // get the same appends: one closes cleanly, the other "crashes" (dropped
    // with entries pending). Both end with the same index file.
    let cfg = || LogConfig {
        segment_bytes: 1 << 20,
        index_interval_bytes: 100,
        ..LogConfig::default()
    };
    let (clean, crashed) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let index_file = |dir: &Path| std::fs::read(dir.join(segment::file_name(0, "index"))).unwrap();
    let mut a = Log::open(clean.path(), cfg()).unwrap();
    let mut b = Log::open(crashed.path(), cfg()).unwrap();
    let mut n = 0;
    // Enough entries for some to be written, and some left pending.
    while n < 200 || !b.index_pending() {
        append_n(&mut a, n, 1);
        append_n(&mut b, n, 1);
        n += 1;
    }
    let in_memory = b.active.index_len();
    let on_disk = (index_file(crashed.path()).len() - 8) / 16;
    assert!(on_disk >= segment::INDEX_WRITE_EVERY, "{on_disk} written");
    assert!(on_disk < in_memory, "{on_disk} of {in_memory} written");
    a.close().unwrap();
    assert_eq!(
        (index_file(clean.path()).len() - 8) / 16,
        in_memory,
        "close writes them"
    );
    drop(b);
    let b = Log::open(crashed.path(), cfg()).unwrap();
    assert_eq!(b.active.index_len(), in_memory);
    assert!(!b.index_pending(), "the reopened log wrote what it found");
    assert_eq!(index_file(crashed.path()), index_file(clean.path()));
    let all = read_all(&b);
    assert_eq!(all.len() as u64, n);
    assert!(all
        .iter()
        .enumerate()
        .all(|(i, r)| r.offset == i as u64 && *r.payload() == value(i as u64)[..]));
}

#[test]
fn a_rollback_with_index_entries_pending_leaves_the_index_file_valid() {
    // A failed append cuts the log back; pending entries past the mark go,
    // and the file is never extended to cover entries it does not hold.
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        segment_bytes: 1 << 20,
        index_interval_bytes: 100,
        ..LogConfig::default()
    };
    let mut log = Log::open(dir.path(), cfg.clone()).unwrap();
    let mut n = 0;
    while n < 50 || !log.index_pending() {
        append_n(&mut log, n, 1);
        n += 1;
    }
    let mark = log.active.mark();
    let entries_at_mark = log.active.index_len();
    append_n(&mut log, n, 40);
    // Entries past the mark reached the file: the rollback must cut them.
    assert!(log.active.index_written() > entries_at_mark);
    log.active.rollback(mark).unwrap();
    assert_eq!(log.active.index_len(), entries_at_mark);
    assert_eq!(log.active.index_written(), entries_at_mark);
    let index = std::fs::read(dir.path().join(segment::file_name(0, "index"))).unwrap();
    assert_eq!((index.len() - 8) / 16, log.active.index_written());
    drop(log);
    let log = Log::open(dir.path(), cfg).unwrap();
    assert_eq!(log.end_offset(), n);
    assert_eq!(read_all(&log).len() as u64, n);
}

#[test]
fn delete_records_moves_the_start_and_deletes_the_segments_below_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small()).unwrap();
    append_n(&mut log, 0, 40);
    let segments = log.segment_count();
    assert!(segments > 3);
    let second = log.sealed[1].base;
    // Inside the second segment: the first goes, the second stays but is
    // served from the new start.
    assert_eq!(log.delete_records(second + 1).unwrap(), second + 1);
    assert_eq!(log.segment_count(), segments - 1);
    assert!(matches!(
        log.read(second, 100),
        Err(StorageError::OffsetOutOfRange { log_start, .. }) if log_start == second + 1
    ));
    assert_eq!(read_all(&log).first().unwrap().offset, second + 1);
    assert_eq!(log.find_time(0).unwrap().map(|h| h.0), Some(second + 1));
    // Backwards is a no-op; past the end an error.
    assert_eq!(log.delete_records(1).unwrap(), second + 1);
    assert!(log.delete_records(41).is_err());
    drop(log);
    let mut log = Log::open(dir.path(), small()).unwrap();
    assert_eq!(log.start_offset(), second + 1);
    // Up to the end: every sealed segment goes, the active one stays empty of served records.
    assert_eq!(log.delete_records(40).unwrap(), 40);
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.read(40, 100).unwrap().records.len(), 0);
    append_n(&mut log, 40, 2);
    assert_eq!(read_all(&log).len(), 2);
}

/// A Kafka batch entry of `n` keyed records with timestamps `ts0 + i * step`.
fn batch_entry(
    n: usize,
    ts0: i64,
    step: i64,
    codec: flume_protocol::kafka_batch::Compression,
) -> Vec<u8> {
    use flume_protocol::kafka_batch::{BatchBuilder, BatchMeta};
    let mut b = BatchBuilder::new(None);
    for i in 0..n {
        let v = value(i as u64);
        b.push(
            i32::try_from(i).unwrap(),
            ts0 + i as i64 * step,
            Some(b"k"),
            Some(&v),
            [],
        );
    }
    let batch = b.finish(&BatchMeta::default(), codec).unwrap();
    let mut entry = Vec::new();
    flume_protocol::record::encode_batch_entry(&mut entry, &batch);
    entry
}

fn append_entry(log: &mut Log, mut entry: Vec<u8>) -> u64 {
    let raw = flume_protocol::record::check_record(&entry, 0, u64::MAX).unwrap();
    let (span, ts) = (raw.span(), raw.timestamp());
    log.append_validated(&mut entry, span, ts).unwrap()
}

/// Every Flume record read out of the log from `from`, as a Flume consumer reads.
fn read_records(log: &Log, from: u64, max: usize) -> Vec<Record> {
    let mut out = Vec::new();
    let mut next = from;
    while next < log.end_offset() {
        let r = log.read_as(next, max, ReadAs::Records).unwrap();
        let recs = decode_all(&Bytes::from(r.records)).unwrap();
        assert!(!recs.is_empty(), "no progress at {next}");
        assert!(recs[0].offset >= next);
        next = recs.last().unwrap().offset + 1;
        out.extend(recs);
    }
    out
}

#[test]
fn kafka_batch_entries_and_records_mix_through_rolls_reads_from_any_offset_and_recovery() {
    use flume_protocol::kafka_batch::Compression;
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small()).unwrap();
    let codecs = [
        Compression::None,
        Compression::Lz4,
        Compression::Zstd,
        Compression::Gzip,
    ];
    let mut expected = Vec::new(); // (offset, value index)
    for round in 0..12u64 {
        let base = log.append(&mut batch(&[value(1000 + round)], 5)).unwrap();
        expected.push((base, 1000 + round));
        let n = 1 + (round as usize % 6);
        let b = append_entry(
            &mut log,
            batch_entry(n, 100 * round as i64, 1, codecs[round as usize % 4]),
        );
        assert_eq!(b, base + 1);
        expected.extend((0..n as u64).map(|i| (b + i, i)));
    }
    assert!(log.segment_count() > 3, "rolled: {}", log.segment_count());
    let check = |log: &Log| {
        let got: Vec<(u64, Vec<u8>)> = read_records(log, 0, 200)
            .into_iter()
            .map(|r| (r.offset, r.value.unwrap().to_vec()))
            .collect();
        let want: Vec<(u64, Vec<u8>)> = expected.iter().map(|(o, v)| (*o, value(*v))).collect();
        assert_eq!(got, want);
        // From every offset, the first record a Flume reader gets is that one.
        for (o, _) in &expected {
            let r = log.read_as(*o, 1, ReadAs::Records).unwrap();
            assert_eq!(decode_all(&Bytes::from(r.records)).unwrap()[0].offset, *o);
            // The stored read starts at the entry holding it.
            let e = log.read(*o, 1).unwrap();
            let raw = flume_protocol::record::check_record(&e.records, 0, u64::MAX).unwrap();
            assert!(raw.offset <= *o && *o <= raw.last_offset());
        }
    };
    check(&log);
    let end = log.end_offset();
    // A torn batch entry at the tail is cut at restart; what came before stays.
    let last = segment_files(dir.path()).pop().unwrap();
    drop(log);
    let mut log = Log::open(
        dir.path(),
        LogConfig {
            verify_sealed: true,
            ..small()
        },
    )
    .unwrap();
    assert_eq!(log.end_offset(), end);
    check(&log);
    append_entry(&mut log, batch_entry(5, 7, 1, Compression::Zstd));
    drop(log);
    let len = std::fs::metadata(&last).map(|m| m.len()).unwrap_or(0);
    let tail = segment_files(dir.path()).pop().unwrap();
    let tail_len = std::fs::metadata(&tail).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&tail)
        .unwrap()
        .set_len(tail_len - 3)
        .unwrap();
    let log = Log::open(dir.path(), small()).unwrap();
    assert_eq!(
        log.end_offset(),
        end,
        "the torn batch is gone whole ({len})"
    );
    check(&log);
}

#[test]
fn a_time_lookup_finds_the_record_inside_a_batch() {
    use flume_protocol::kafka_batch::Compression;
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small()).unwrap();
    log.append(&mut batch(&[value(0)], 10)).unwrap(); // offset 0, ts 10
    append_entry(&mut log, batch_entry(5, 100, 10, Compression::Lz4)); // 1..=5, ts 100..140
    log.append(&mut batch(&[value(9)], 500)).unwrap(); // 6, ts 500
    assert_eq!(log.find_time(0).unwrap(), Some((0, 10)));
    assert_eq!(log.find_time(100).unwrap(), Some((1, 100)));
    assert_eq!(log.find_time(121).unwrap(), Some((4, 130)));
    assert_eq!(log.find_time(141).unwrap(), Some((6, 500)));
    assert_eq!(log.find_time(501).unwrap(), None);
}

#[test]
fn a_version_1_segment_is_read_and_its_active_one_upgraded_and_a_newer_version_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small()).unwrap();
    append_n(&mut log, 0, 20);
    drop(log);
    // Make every segment a version 1 file, as the previous release wrote them.
    for f in segment_files(dir.path()) {
        let file = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&file, &segment::LOG_MAGIC_V1, 0).unwrap();
    }
    let log = Log::open(dir.path(), small()).unwrap();
    assert_eq!(read_all(&log).len(), 20);
    drop(log);
    let files = segment_files(dir.path());
    let header = |f: &Path| std::fs::read(f).unwrap()[..8].to_vec();
    assert_eq!(
        header(files.last().unwrap()),
        segment::LOG_MAGIC.to_vec(),
        "active: upgraded"
    );
    assert_eq!(
        header(&files[0]),
        segment::LOG_MAGIC_V1.to_vec(),
        "sealed: read as it is"
    );
    // A file from a newer Flume is refused by name, not misread.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&files[0])
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, b"FLMLOG\x00\x03", 0).unwrap();
    let err = Log::open(dir.path(), small()).unwrap_err().to_string();
    assert!(
        err.contains("segment format version 3 was written by a newer Flume"),
        "{err}"
    );
}

#[test]
fn segment_ms_rolls_the_active_segment_at_the_first_append_past_its_age() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        segment_ms: Some(3_600_000),
        ..small()
    };
    let mut log = Log::open(dir.path(), cfg).unwrap();
    log.append(&mut batch(&[value(0)], 1)).unwrap();
    log.append(&mut batch(&[value(1)], 1)).unwrap();
    assert_eq!(log.segment_count(), 1, "an hour has not passed");
    // An age of 0: every append after the first of a segment rolls it.
    log.set_limits(None, None, small().segment_bytes, Some(0));
    log.append(&mut batch(&[value(2)], 1)).unwrap();
    assert_eq!((log.segment_count(), log.active_base()), (2, 2));
    log.append(&mut batch(&[value(3)], 1)).unwrap();
    assert_eq!((log.segment_count(), log.active_base()), (3, 3));
    // None: size alone decides again.
    log.set_limits(None, None, small().segment_bytes, None);
    log.append(&mut batch(&[value(4)], 1)).unwrap();
    assert_eq!(log.segment_count(), 3);
    assert_eq!(read_all(&log).len(), 5);
}

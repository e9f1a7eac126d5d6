//! Tests of fail-stop after injected write and fsync faults, of the directory
//! fsync at a roll, and of corrupt length fields on disk.
use super::*;
use bytes::Bytes;
use flume_protocol::record::{decode_all, encode};

fn batch(values: &[&[u8]]) -> Vec<u8> {
    let mut buf = Vec::new();
    for v in values {
        encode(&mut buf, 0, 1, None, v, &[]);
    }
    buf
}

fn active_file(dir: &Path) -> PathBuf {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    v.sort();
    v.pop().unwrap()
}

fn values(log: &Log, from: u64) -> Vec<Vec<u8>> {
    let r = log.read(from, 1 << 20).unwrap();
    decode_all(&Bytes::from(r.records))
        .unwrap()
        .into_iter()
        .map(|r| r.payload().to_vec())
        .collect()
}

/// Appends two acknowledged records, then one that fails as `arm` makes it
/// fail, and checks the fail-stop contract.
fn fails_stop(fsync: FsyncPolicy, arm: impl Fn(&FaultInjector)) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        fsync,
        ..LogConfig::default()
    };
    let mut log = Log::open(dir.path(), cfg.clone()).unwrap();
    assert_eq!(log.append(&mut batch(&[b"a", b"b"])).unwrap(), 0);
    let acked_size = std::fs::metadata(active_file(dir.path())).unwrap().len();

    arm(log.faults());
    let err = log.append(&mut batch(&[b"lost-1", b"lost-2"])).unwrap_err();
    assert!(matches!(err, StorageError::Io { .. }), "{err}");
    // The end offset stays at what was acknowledged, the bytes are gone.
    assert_eq!(log.end_offset(), 2);
    assert_eq!(
        std::fs::metadata(active_file(dir.path())).unwrap().len(),
        acked_size,
        "the file is cut back to the acknowledged size"
    );
    assert_eq!(values(&log, 0), vec![b"a".to_vec(), b"b".to_vec()]);
    assert!(log.read(2, 100).unwrap().records.is_empty());
    assert!(matches!(
        log.read(3, 100),
        Err(StorageError::OffsetOutOfRange { log_end: 2, .. })
    ));
    // Later appends are refused, though the disk would take them now.
    assert_eq!(log.faults().armed(), (0, 0, 0));
    let refused = log.append(&mut batch(&[b"later"])).unwrap_err();
    assert!(matches!(refused, StorageError::Failed { .. }), "{refused}");
    assert!(refused.to_string().contains("restart"), "{refused}");
    assert!(log.failure().is_some());
    assert!(matches!(log.sync(), Err(StorageError::Failed { .. })));
    assert_eq!(log.end_offset(), 2);
    // A restart (reopen) recovers: the acknowledged records, then appends again.
    drop(log);
    let mut log = Log::open(dir.path(), cfg).unwrap();
    assert_eq!(log.end_offset(), 2);
    assert_eq!(log.append(&mut batch(&[b"c"])).unwrap(), 2);
    assert_eq!(
        values(&log, 0),
        vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
    );
}

#[test]
fn a_failed_write_stops_the_log_at_the_acknowledged_end() {
    fails_stop(FsyncPolicy::Never, |f| f.fail_writes(1));
}

#[test]
fn a_failed_write_under_fsync_always_stops_the_log() {
    fails_stop(FsyncPolicy::Always, |f| f.fail_writes(1));
}

#[test]
fn a_failed_fsync_under_always_cuts_the_unacknowledged_batch_and_stops() {
    fails_stop(FsyncPolicy::Always, |f| f.fail_fsyncs(1));
}

#[test]
fn a_failed_interval_fsync_keeps_acknowledged_records_and_stops() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        fsync: FsyncPolicy::Interval(Duration::from_secs(3600)),
        ..LogConfig::default()
    };
    let mut log = Log::open(dir.path(), cfg).unwrap();
    log.append(&mut batch(&[b"a", b"b"])).unwrap();
    log.faults().fail_fsyncs(1);
    // The ticker's sync: the records were acknowledged (the interval policy
    // promises only process crashes), so they stay; appends stop.
    assert!(matches!(log.sync(), Err(StorageError::Io { .. })));
    assert_eq!(log.end_offset(), 2);
    assert_eq!(values(&log, 0).len(), 2);
    assert!(matches!(
        log.append(&mut batch(&[b"c"])),
        Err(StorageError::Failed { .. })
    ));
    assert!(
        log.sync_if_due().is_ok(),
        "the ticker does not retry an fsync"
    );
}

#[test]
fn a_roll_fsyncs_the_directory_under_fsync_always_and_a_failure_stops_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        segment_bytes: 200,
        fsync: FsyncPolicy::Always,
        ..LogConfig::default()
    };
    let mut log = Log::open(dir.path(), cfg).unwrap();
    let big = [b'x'; 150];
    log.append(&mut batch(&[&big])).unwrap();
    log.faults().fail_dir_fsyncs(1);
    // This append needs a new segment, whose name must be made durable.
    let err = log.append(&mut batch(&[&big])).unwrap_err();
    assert!(err.to_string().contains("fsync directory"), "{err}");
    assert_eq!(log.faults().armed(), (0, 0, 0), "the directory was fsynced");
    assert_eq!(log.end_offset(), 1);
    assert_eq!(log.segment_count(), 1);
    assert!(
        !dir.path().join(segment::file_name(1, "log")).exists(),
        "the new segment is removed again"
    );
    assert!(matches!(
        log.append(&mut batch(&[b"y"])),
        Err(StorageError::Failed { .. })
    ));
}

#[test]
fn a_roll_under_fsync_never_leaves_the_directory_to_the_os() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        segment_bytes: 200,
        ..LogConfig::default()
    };
    let mut log = Log::open(dir.path(), cfg).unwrap();
    let big = [b'x'; 150];
    log.faults().fail_dir_fsyncs(1);
    log.append(&mut batch(&[&big])).unwrap();
    log.append(&mut batch(&[&big])).unwrap();
    assert_eq!(log.segment_count(), 2);
    assert_eq!(log.faults().armed(), (0, 0, 1), "no directory fsync");
}

/// Overwrites the size field of the record at byte `pos` of `file`.
fn set_size_field(file: &Path, pos: usize, size: u32) {
    let mut bytes = std::fs::read(file).unwrap();
    bytes[pos + 8..pos + 12].copy_from_slice(&size.to_be_bytes());
    std::fs::write(file, &bytes).unwrap();
}

#[test]
fn a_corrupt_size_field_in_a_sealed_segment_is_a_corrupt_record_not_a_panic() {
    for size in [u32::MAX, u32::MAX - 15, 1 << 20, 30] {
        let dir = tempfile::tempdir().unwrap();
        // Three 40-byte records per segment, an index entry at the third: a
        // sealed segment with an index is trusted on open, so the bad field
        // is met only when a read scans past it.
        let cfg = LogConfig {
            segment_bytes: 130,
            index_interval_bytes: 60,
            ..LogConfig::default()
        };
        let mut log = Log::open(dir.path(), cfg.clone()).unwrap();
        for v in [b"first", b"secnd", b"third", b"forth", b"fifth", b"sixth"] {
            log.append(&mut batch(&[v])).unwrap();
        }
        assert!(log.segment_count() > 1);
        drop(log);
        let sealed = dir.path().join(segment::file_name(0, "log"));
        // Record 0 starts right after the file header.
        set_size_field(&sealed, segment::FILE_HEADER_LEN as usize, size);
        let log = Log::open(dir.path(), cfg).unwrap();
        for offset in [0, 1] {
            match log.read(offset, 1 << 16) {
                Err(StorageError::Corrupt { segment, .. }) => assert_eq!(segment, sealed),
                other => panic!("size {size}, offset {offset}: {other:?}"),
            }
        }
        assert_eq!(values(&log, 2)[0], b"third", "found through the index");
    }
}

#[test]
fn a_corrupt_size_field_in_the_active_segment_is_cut_off_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
    log.append(&mut batch(&[b"first", b"second", b"third"]))
        .unwrap();
    drop(log);
    let active = active_file(dir.path());
    let len = std::fs::metadata(&active).unwrap().len();
    let rec = (len as usize - segment::FILE_HEADER_LEN as usize) / 3;
    set_size_field(&active, segment::FILE_HEADER_LEN as usize + rec, u32::MAX);
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    assert_eq!(log.end_offset(), 1);
    assert_eq!(values(&log, 0), vec![b"first".to_vec()]);
}

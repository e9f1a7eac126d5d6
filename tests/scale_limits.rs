//! Scale limits: the partition limit's error names the limit and
//! its value; the file cache bounds the open segment files of many
//! partitions, and an evicted segment is reopened transparently, also while
//! reads and retention run at once.

use std::sync::Arc;

use flume_broker::config::{BrokerConfig, TopicConfig};
use flume_broker::embedded::EmbeddedBroker;
use flume_broker::storage::{FileCache, Log, LogConfig};
use flume_protocol::record;
use flume_protocol::ErrorCode;

fn config(dir: &std::path::Path) -> BrokerConfig {
    let mut c = BrokerConfig::new(dir);
    c.listen = "127.0.0.1:0".into();
    c
}

#[test]
fn the_partition_limit_error_names_the_limit_and_its_value() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.max_partitions = 6;
    let broker = EmbeddedBroker::with_config(cfg).unwrap();
    let four = TopicConfig {
        partitions: 4,
        ..TopicConfig::default()
    };
    broker.blocking().create_topic("a", four.clone()).unwrap();
    let err = broker.blocking().create_topic("b", four).unwrap_err();
    assert_eq!(err.code(), ErrorCode::LimitReached, "{err}");
    let msg = err.to_string();
    assert!(msg.contains("max_partitions is 6"), "{msg}");
    assert!(
        msg.contains("4 partitions") && msg.contains("would add 4"),
        "{msg}"
    );
}

#[test]
fn default_settings_take_far_more_topics_than_the_old_queue_slot_budget() {
    // The old budget (4 M preallocated slots, 1 024 per partition) refused partition 4 097.
    let cfg = BrokerConfig::new("unused");
    assert!(cfg.check_partition_limit("t", 49_996, 4).is_ok());
    assert!(cfg.max_partitions >= 50_000);
    assert!(cfg.fd_needed() >= (cfg.max_open_files + cfg.max_connections) as u64);
}

fn batch(values: &[&[u8]], ts: i64) -> Vec<u8> {
    let mut out = Vec::new();
    for v in values {
        record::encode(&mut out, 0, ts, None, v, &[]);
    }
    out
}

fn small(files: &Arc<FileCache>) -> LogConfig {
    LogConfig {
        segment_bytes: 400,
        index_interval_bytes: 64,
        files: Arc::clone(files),
        ..LogConfig::default()
    }
}

#[test]
fn many_logs_share_a_bounded_file_cache_and_read_back_everything() {
    let dir = tempfile::tempdir().unwrap();
    let files = FileCache::new(4);
    let mut logs: Vec<Log> = (0..20)
        .map(|i| Log::open(&dir.path().join(format!("p{i}")), small(&files)).unwrap())
        .collect();
    for round in 0..30u64 {
        for (i, log) in logs.iter_mut().enumerate() {
            let v = format!("log {i} record {round}");
            log.append(&mut batch(&[v.as_bytes()], 1)).unwrap();
            assert!(files.open_files() <= 4, "{} open", files.open_files());
        }
    }
    assert!(logs[0].segment_count() > 3, "several sealed segments");
    for (i, log) in logs.iter().enumerate() {
        for off in 0..30u64 {
            let r = log.read(off, 1).unwrap();
            let recs = record::decode_all(&r.records.into()).unwrap();
            assert_eq!(
                recs[0].payload(),
                format!("log {i} record {off}").as_bytes()
            );
            assert!(files.open_files() <= 4);
        }
    }
    assert!(files.opens() > 20, "evicted files were reopened");
    drop(logs);
    // Reopening after a restart goes through the cache too.
    let again = Log::open(&dir.path().join("p3"), small(&files)).unwrap();
    assert_eq!(again.end_offset(), 30);
    assert!(files.open_files() <= 4);
}

#[test]
fn evicted_segments_are_reopened_under_concurrent_reads_and_retention() {
    let dir = tempfile::tempdir().unwrap();
    let files = FileCache::new(3);
    let cfg = |files: &Arc<FileCache>| LogConfig {
        retention_bytes: Some(2_000),
        ..small(files)
    };
    let logs: Vec<Arc<std::sync::RwLock<Log>>> = (0..6)
        .map(|i| {
            Arc::new(std::sync::RwLock::new(
                Log::open(&dir.path().join(format!("p{i}")), cfg(&files)).unwrap(),
            ))
        })
        .collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = Vec::new();
    for t in 0..3 {
        let logs = logs.clone();
        let stop = Arc::clone(&stop);
        readers.push(std::thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                for log in &logs {
                    let l = log.read().unwrap();
                    let (start, end) = (l.start_offset(), l.end_offset());
                    if end == start {
                        continue;
                    }
                    let off = start + (reads + t) % (end - start);
                    let r = l.read(off, 64).expect("a read of a stored offset succeeds");
                    let recs = record::decode_all(&r.records.into()).unwrap();
                    assert_eq!(recs[0].offset, off);
                    assert_eq!(recs[0].payload(), format!("record {off}").as_bytes());
                    reads += 1;
                }
            }
            reads
        }));
    }
    for n in 0..150u64 {
        for log in &logs {
            let mut l = log.write().unwrap();
            let v = format!("record {n}");
            l.append(&mut batch(&[v.as_bytes()], 1)).unwrap();
            l.enforce_retention(0).unwrap();
        }
        assert!(files.open_files() <= 3);
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(reads > 0);
    for log in &logs {
        let l = log.read().unwrap();
        assert!(l.start_offset() > 0, "retention deleted segments");
        assert_eq!(l.end_offset(), 150);
        let r = l.read(l.start_offset(), 1 << 20).unwrap();
        assert!(!r.records.is_empty());
    }
    assert!(files.open_files() <= 3);
}

//! The data directory lock and fail-stop partitions, through the embedded
//! broker and the TCP broker in-process.

use flume_broker::storage::StorageError;
use flume_broker::{BrokerConfig, BrokerError, EmbeddedBroker, TopicConfig};
use flume_protocol::ErrorCode;
use flume_rt as rt;

fn topic(partitions: u32) -> TopicConfig {
    TopicConfig {
        partitions,
        ..TopicConfig::default()
    }
}

fn assert_locked(err: &BrokerError, dir: &std::path::Path) {
    match err {
        BrokerError::Storage(StorageError::DataDirLocked { dir: d, holder_pid }) => {
            assert_eq!(d, dir);
            assert_eq!(*holder_pid, Some(std::process::id()));
        }
        other => panic!("expected DataDirLocked, got {other}"),
    }
    let text = err.to_string();
    assert!(text.contains(&dir.display().to_string()), "{text}");
    assert!(
        text.contains(&format!("pid {}", std::process::id())),
        "{text}"
    );
}

#[test]
fn a_second_open_of_a_data_directory_is_refused_until_the_first_closes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = EmbeddedBroker::open(&data).unwrap();
    first
        .blocking()
        .create_topic("t", topic(1))
        .expect("the first broker works");
    first.blocking().produce("t", b"kept", None).unwrap();
    assert_locked(&EmbeddedBroker::open(&data).unwrap_err(), &data);
    // The TCP broker takes the same lock.
    let mut config = BrokerConfig::new(&data);
    config.listen = "127.0.0.1:0".into();
    let err = rt::block_on(flume_broker::Broker::start(config.clone())).unwrap_err();
    assert_locked(&err, &data);
    // Closed: released, though the value lives on.
    first.blocking().close();
    let second = rt::block_on(flume_broker::Broker::start(config)).unwrap();
    assert_eq!(
        second
            .engine()
            .records()
            .topic("t")
            .unwrap()
            .partition(0)
            .unwrap()
            .end_offset(),
        1
    );
    rt::block_on(second.shutdown());
    drop(second);
    // Dropped without close: released too.
    let third = EmbeddedBroker::open(&data).unwrap();
    drop(third);
    drop(EmbeddedBroker::open(&data).unwrap());
}

#[test]
fn a_directory_that_is_not_flumes_is_refused_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"mine").unwrap();
    let err = EmbeddedBroker::open(dir.path()).unwrap_err();
    assert!(
        matches!(
            &err,
            BrokerError::Storage(StorageError::ForeignDataDir { entry, .. }) if entry == "notes.txt"
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("not a Flume data directory"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "nothing created"
    );
    let mut config = BrokerConfig::new(dir.path());
    config.allow_foreign_data_dir = true;
    let b = EmbeddedBroker::with_config(config).unwrap();
    b.blocking().close();
    drop(b);
    // Marked as Flume's at that first open: no flag needed any more.
    EmbeddedBroker::open(dir.path()).unwrap().blocking().close();
}

fn code(err: BrokerError) -> ErrorCode {
    err.code()
}

/// Produces two records to partition 0, arms a fault, and checks fail-stop:
/// STORAGE_ERROR, the end offset unchanged, nothing unacknowledged readable,
/// later appends refused, other partitions unaffected; a reopen recovers.
fn partition_fails_stop(config: BrokerConfig, arm: impl Fn(&flume_broker::storage::FaultInjector)) {
    let data = config.data_dir.clone();
    let broker = EmbeddedBroker::with_config(config.clone()).unwrap();
    let b = broker.blocking();
    b.create_topic("t", topic(2)).unwrap();
    let produce = |p: u32, v: &[u8]| rt::block_on(broker.produce_with("t", None, v, &[], Some(p)));
    assert_eq!(produce(0, b"a").unwrap(), (0, 0));
    assert_eq!(produce(0, b"b").unwrap(), (0, 1));
    let t = broker.engine().records().topic("t").unwrap();
    let p0 = t.partition(0).unwrap();
    arm(&p0.faults());
    assert_eq!(
        code(produce(0, b"lost").unwrap_err()),
        ErrorCode::StorageError
    );
    assert_eq!(p0.end_offset(), 2);
    assert!(p0.has_failed_write());
    assert!(p0.read_now(2, 1 << 20).unwrap().records.is_empty());
    assert_eq!(p0.faults().armed(), (0, 0, 0), "the fault was met");
    assert_eq!(
        code(produce(0, b"later").unwrap_err()),
        ErrorCode::StorageError,
        "appends are refused until restart"
    );
    assert_eq!(p0.end_offset(), 2);
    assert_eq!(
        produce(1, b"other").unwrap(),
        (1, 0),
        "other partitions work"
    );
    let first = p0.read_now(0, 1 << 20).unwrap();
    let recs = flume_protocol::record::decode_all(&bytes::Bytes::from(first.records)).unwrap();
    assert_eq!(recs.len(), 2, "acknowledged records are still served");
    drop(t);
    b.close();
    drop(broker);
    // A restart recovers the partition.
    let broker = EmbeddedBroker::with_config(config).unwrap();
    let again = rt::block_on(broker.produce_with("t", None, b"c", &[], Some(0))).unwrap();
    assert_eq!(again, (0, 2));
    broker.blocking().close();
    assert!(data.join(".lock").exists());
}

#[test]
fn a_failed_write_stops_the_partition_with_storage_error() {
    let dir = tempfile::tempdir().unwrap();
    partition_fails_stop(BrokerConfig::new(dir.path()), |f| f.fail_writes(1));
}

#[test]
fn a_failed_fsync_under_fsync_always_stops_the_partition_with_storage_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = BrokerConfig::new(dir.path());
    config.fsync = flume_broker::storage::FsyncPolicy::Always;
    partition_fails_stop(config, |f| f.fail_fsyncs(1));
}

#[test]
fn a_restart_opens_every_topic_and_partition_and_refuses_a_damaged_topic_conf() {
    // Topics and partitions are opened on several threads at start: every record comes back in
    // its own partition, a directory without topic.conf is skipped, a damaged topic.conf fails
    // the start naming the file.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let b = EmbeddedBroker::open(&data).unwrap();
    for t in 0..12u32 {
        b.blocking()
            .create_topic(&format!("t{t}"), topic(1 + t % 5))
            .unwrap();
        for p in 0..=(t % 5) {
            for n in 0..=p {
                let value = format!("t{t}p{p}n{n}");
                rt::block_on(b.produce_with(
                    &format!("t{t}"),
                    None,
                    value.as_bytes(),
                    &[],
                    Some(p),
                ))
                .unwrap();
            }
        }
    }
    b.blocking().close();
    drop(b);
    std::fs::create_dir(data.join("not-a-topic")).unwrap();
    let b = EmbeddedBroker::open(&data).unwrap();
    let topics = b.engine().records().topics();
    assert_eq!(topics.len(), 12);
    for t in 0..12u32 {
        let topic = b.engine().records().topic(&format!("t{t}")).unwrap();
        assert_eq!(topic.partition_count(), 1 + t % 5);
        for (p, o) in topic.offsets().iter().enumerate() {
            assert_eq!(o.log_end, p as i64 + 1, "t{t} partition {p}");
        }
    }
    b.blocking().close();
    drop(b);
    std::fs::write(data.join("t7").join("topic.conf"), b"partitions=banana\n").unwrap();
    let err = EmbeddedBroker::open(&data).unwrap_err().to_string();
    assert!(err.contains("topic.conf"), "{err}");
}

//! The NanoKafka tests, in Rust, against the embedded broker.

use std::time::{Duration, Instant};

use flume_broker::{BrokerConfig, Clock, EmbeddedBroker, TopicConfig};

fn topic(partitions: u32) -> TopicConfig {
    TopicConfig {
        partitions,
        ..TopicConfig::default()
    }
}

#[test]
fn basic_produce_consume() {
    let dir = tempfile::tempdir().unwrap();
    let broker = EmbeddedBroker::open(dir.path()).unwrap();
    let b = broker.blocking();
    b.create_topic("test", topic(1)).unwrap();
    b.produce("test", b"hello", None).unwrap();
    b.join_group("test", "group1", "consumer1").unwrap();
    let (p, (offset, msg)) = b.poll("test", "group1", "consumer1").unwrap().unwrap();
    assert_eq!(msg.as_deref(), Some(&b"hello"[..]));
    b.commit("test", "group1", p, offset).unwrap();
    assert_eq!(b.lag("test", "group1").unwrap()[&0], 0);
    b.close();
}

#[test]
fn no_commit_reprocess() {
    let dir = tempfile::tempdir().unwrap();
    let broker = EmbeddedBroker::open(dir.path()).unwrap();
    let b = broker.blocking();
    b.create_topic("test", TopicConfig::default()).unwrap();
    b.produce("test", b"data", None).unwrap();
    b.join_group("test", "g1", "c1").unwrap();
    let (p, (offset, _)) = b.poll("test", "g1", "c1").unwrap().unwrap();
    let (p2, (offset2, msg2)) = b.poll("test", "g1", "c1").unwrap().unwrap();
    assert_eq!((p, offset), (p2, offset2));
    assert_eq!(msg2.as_deref(), Some(&b"data"[..]));
}

/// Retention is in bytes of whole segments (the active segment is never
/// deleted); with 1-byte segments every record is its own segment.
#[test]
fn retention() {
    let dir = tempfile::tempdir().unwrap();
    let broker = EmbeddedBroker::open(dir.path()).unwrap();
    let b = broker.blocking();
    b.create_topic(
        "test",
        TopicConfig {
            partitions: 1,
            retention_bytes: Some(2),
            segment_bytes: 1,
            ..TopicConfig::default()
        },
    )
    .unwrap();
    for v in [b"1", b"2", b"3"] {
        b.produce("test", v, None).unwrap();
    }
    // Retention runs on the broker's ticker about once a second; run its pass now.
    flume_rt::block_on(broker.engine().tick_now());
    let part = broker
        .engine()
        .records()
        .topic("test")
        .unwrap()
        .partition(0)
        .unwrap()
        .clone();
    let deadline = Instant::now() + Duration::from_secs(10);
    while part.start_offset() < 2 {
        assert!(Instant::now() < deadline, "retention never ran");
        std::thread::sleep(Duration::from_millis(10));
    }
    b.join_group("test", "g1", "c1").unwrap();
    let (p, (offset, msg)) = b.poll("test", "g1", "c1").unwrap().unwrap();
    assert_eq!(
        (offset, msg.as_deref()),
        (2, Some(&b"3"[..])),
        "records below the log start are gone"
    );
    b.commit("test", "g1", p, offset).unwrap();
    let lag = b.lag("test", "g1").unwrap();
    assert_eq!(lag.into_iter().collect::<Vec<_>>(), vec![(0, 0)]);
}

/// Retention by age follows the configured clock: a manual clock moved past
/// `retention_ms` deletes the old segments at the next maintenance pass.
#[test]
fn retention_by_age_follows_the_injected_clock() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = BrokerConfig::new(dir.path());
    let clock = Clock::manual();
    cfg.clock = clock.clone();
    // The ticker's own pass does not run during the test: only tick_now does.
    cfg.maintenance_interval = Duration::from_secs(3600);
    let broker = EmbeddedBroker::with_config(cfg).unwrap();
    let b = broker.blocking();
    b.create_topic(
        "aged",
        TopicConfig {
            partitions: 1,
            retention_ms: Some(60_000),
            segment_bytes: 1,
            ..TopicConfig::default()
        },
    )
    .unwrap();
    for v in [b"1", b"2", b"3"] {
        b.produce("aged", v, None).unwrap();
    }
    let part = broker
        .engine()
        .records()
        .topic("aged")
        .unwrap()
        .partition(0)
        .unwrap()
        .clone();
    flume_rt::block_on(broker.engine().tick_now());
    assert_eq!(part.start_offset(), 0, "no record is a minute old yet");
    clock.advance(Duration::from_secs(120));
    flume_rt::block_on(broker.engine().tick_now());
    assert!(
        part.start_offset() >= 2,
        "two minutes later by the broker's clock the sealed segments are gone (start {})",
        part.start_offset()
    );
}

#[test]
fn producer_and_consumer_threads() {
    let dir = tempfile::tempdir().unwrap();
    let broker = std::sync::Arc::new(EmbeddedBroker::open(dir.path()).unwrap());
    broker.blocking().create_topic("events", topic(2)).unwrap();
    broker
        .blocking()
        .join_group("events", "group1", "consumer1")
        .unwrap();
    let prod = {
        let broker = broker.clone();
        std::thread::spawn(move || {
            let mut sent = Vec::new();
            for i in 0..10u32 {
                let key = format!("k{}", i % 3);
                let (p, o) = broker
                    .blocking()
                    .produce(
                        "events",
                        format!("msg-{i}").as_bytes(),
                        Some(key.as_bytes()),
                    )
                    .unwrap();
                sent.push((p, o, format!("msg-{i}")));
            }
            sent
        })
    };
    let cons = {
        let broker = broker.clone();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(20);
            while got.len() < 10 {
                assert!(Instant::now() < deadline, "consumed only {}", got.len());
                match broker
                    .blocking()
                    .poll("events", "group1", "consumer1")
                    .unwrap()
                {
                    Some((p, (o, v))) => {
                        broker.blocking().commit("events", "group1", p, o).unwrap();
                        got.push((p, o, String::from_utf8(v.unwrap().to_vec()).unwrap()));
                    }
                    None => std::thread::yield_now(),
                }
            }
            got
        })
    };
    let mut sent = prod.join().unwrap();
    let got = cons.join().unwrap();
    // Once each, and in offset order within each partition.
    for p in 0..2 {
        let offs: Vec<u64> = got.iter().filter(|g| g.0 == p).map(|g| g.1).collect();
        assert!(
            offs.windows(2).all(|w| w[0] < w[1]),
            "partition {p}: {offs:?}"
        );
    }
    let mut got_sorted = got.clone();
    got_sorted.sort();
    sent.sort();
    assert_eq!(got_sorted, sent);
    assert!(broker
        .lag("events", "group1")
        .unwrap()
        .values()
        .all(|l| *l == 0));
}

#[test]
fn reopen_restores_topics_records_and_offsets() {
    let dir = tempfile::tempdir().unwrap();
    {
        let broker = EmbeddedBroker::open(dir.path()).unwrap();
        let b = broker.blocking();
        b.create_topic("t", topic(2)).unwrap();
        for i in 0..6u8 {
            b.produce("t", &[i], Some(&[i])).unwrap();
        }
        b.join_group("t", "g", "c").unwrap();
        let (p, (o, _)) = b.poll("t", "g", "c").unwrap().unwrap();
        b.commit("t", "g", p, o).unwrap();
        b.close();
    }
    let broker = EmbeddedBroker::open(dir.path()).unwrap();
    let b = broker.blocking();
    let lag = b.lag("t", "g").unwrap();
    assert_eq!(lag.values().sum::<u64>(), 5);
    assert_eq!(
        broker
            .engine()
            .records()
            .topic("t")
            .unwrap()
            .partition_count(),
        2
    );
    b.join_group("t", "g", "c").unwrap();
    let mut n = 0;
    while let Some((p, (o, _))) = b.poll("t", "g", "c").unwrap() {
        b.commit("t", "g", p, o).unwrap();
        n += 1;
    }
    assert_eq!(n, 5);
}

/// Queues in-process: consumers of one share group split a partition's
/// records record by record; a released record comes back with its
/// delivery count, a rejected one never; what a consumer that leaves still
/// holds goes to the others; the delivery limit archives a poison record;
/// every record is accepted exactly once, and the state survives a reopen.
#[test]
fn share_groups_in_process() {
    use flume_broker::embedded::AckType;
    let dir = tempfile::tempdir().unwrap();
    let mut c = BrokerConfig::new(dir.path());
    c.share.auto_offset_reset = flume_broker::engine::ShareReset::Earliest;
    c.share.partition.delivery_count_limit = 2;
    let none = Duration::ZERO;
    {
        let broker = EmbeddedBroker::with_config(c.clone()).unwrap();
        let b = broker.blocking();
        b.create_topic("jobs", topic(1)).unwrap();
        for i in 0..100u32 {
            b.produce("jobs", format!("job-{i}").as_bytes(), None)
                .unwrap();
        }
        // Two workers on one partition, five records at a time each.
        let first = b.share_poll("jobs", "w", "a", 5, none).unwrap();
        let second = b.share_poll("jobs", "w", "b", 5, none).unwrap();
        let offs = |rs: &[flume_broker::embedded::ShareRecord]| -> Vec<u64> {
            rs.iter().map(|r| r.record.offset).collect()
        };
        assert_eq!(offs(&first), vec![0, 1, 2, 3, 4]);
        assert_eq!(offs(&second), vec![5, 6, 7, 8, 9]);
        assert!(first.iter().all(|r| r.delivery_count == 1));
        // a: accepts 0-2, releases 3, rejects 4.
        for o in 0..3 {
            b.share_acknowledge("jobs", "w", "a", 0, o, AckType::Accept)
                .unwrap();
        }
        b.share_acknowledge("jobs", "w", "a", 0, 3, AckType::Release)
            .unwrap();
        b.share_acknowledge("jobs", "w", "a", 0, 4, AckType::Reject)
            .unwrap();
        // Not held any more: refused.
        assert!(b
            .share_acknowledge("jobs", "w", "a", 0, 0, AckType::Accept)
            .is_err());
        // b leaves holding 5-9: they go back.
        b.share_leave("w", "b").unwrap();
        let again = b.share_poll("jobs", "w", "a", 6, none).unwrap();
        assert_eq!(offs(&again), vec![3, 5, 6, 7, 8, 9]);
        assert_eq!(again[0].delivery_count, 2);
        assert_eq!(again[0].record.value.as_deref(), Some(&b"job-3"[..]));
        // 3 released a second time reaches the limit (2): archived.
        b.share_acknowledge("jobs", "w", "a", 0, 3, AckType::Release)
            .unwrap();
        for r in &again[1..] {
            b.share_acknowledge("jobs", "w", "a", 0, r.record.offset, AckType::Accept)
                .unwrap();
        }
        // Accept 10-49 and hold 50-59 across the reopen.
        let batch = b.share_poll("jobs", "w", "a", 40, none).unwrap();
        assert_eq!(offs(&batch), (10..50).collect::<Vec<_>>());
        for r in &batch {
            b.share_acknowledge("jobs", "w", "a", 0, r.record.offset, AckType::Accept)
                .unwrap();
        }
        let held = b.share_poll("jobs", "w", "a", 10, none).unwrap();
        assert_eq!(offs(&held), (50..60).collect::<Vec<_>>());
        b.close();
    }
    // Reopened: nothing accepted or rejected comes back; what was held does.
    let broker = EmbeddedBroker::with_config(c).unwrap();
    let b = broker.blocking();
    let mut seen = Vec::new();
    loop {
        let got = b.share_poll("jobs", "w", "c", 25, none).unwrap();
        if got.is_empty() {
            break;
        }
        for r in got {
            if r.record.offset < 60 {
                assert_eq!(r.delivery_count, 2, "{}", r.record.offset);
            }
            seen.push(r.record.offset);
            b.share_acknowledge("jobs", "w", "c", 0, r.record.offset, AckType::Accept)
                .unwrap();
        }
    }
    assert_eq!(seen, (50..100).collect::<Vec<_>>());
    b.close();
}

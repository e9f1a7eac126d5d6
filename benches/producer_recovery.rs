//! A broker's start time with many idempotent producers' states to recover
//! (`partition::producers`: a snapshot at a clean stop and after rolls, then the
//! Kafka batches of the log after it). Not criterion: each figure is one
//! start, timed with the clock, and printed with what was recovered.
//!
//!   cargo bench --bench producer_recovery [-- PRODUCERS]     (default 10000)
//!
//! PRODUCERS idempotent producers (InitProducerId) each append one stamped
//! batch of one 100 B record to a topic of 10 partitions (at most 1,000
//! producers a partition, the default limit), then the broker stops cleanly
//! and starts again: (1) with the snapshots written at the stop; (2) after a
//! kill (no stop: nothing written) once every producer appended a second
//! batch, so the states come from the snapshot and the log after it; (3)
//! with the snapshots deleted, so the active segments are read.

use std::path::Path;
use std::time::Instant;

use flume_broker::config::{BrokerConfig, TopicConfig};
use flume_broker::domain::ProducerBatch;
use flume_broker::engine::Engine;
use flume_protocol::kafka_batch::{BatchBuilder, BatchMeta, Compression};

const PARTITIONS: u32 = 10;

fn config(dir: &Path) -> BrokerConfig {
    let mut c = BrokerConfig::new(dir);
    c.max_producers_per_partition = 1_000;
    c
}

fn entry(pid: i64, seq: i32) -> bytes::Bytes {
    let mut b = BatchBuilder::new(None);
    b.push(0, 1_700_000_000_000, Some(b"key"), Some(&[b'x'; 100]), []);
    let meta = BatchMeta {
        producer_id: pid,
        producer_epoch: 0,
        base_sequence: seq,
        ..BatchMeta::default()
    };
    let mut out = Vec::new();
    let batch = b.finish(&meta, Compression::None).expect("a batch");
    flume_protocol::record::encode_batch_entry(&mut out, &batch);
    bytes::Bytes::from(out)
}

async fn append_all(e: &Engine, pids: &[i64], seq: i32) {
    for (i, pid) in pids.iter().enumerate() {
        let partition = i32::try_from(i as u32 % PARTITIONS).expect("small");
        let pb = ProducerBatch {
            id: *pid,
            epoch: 0,
            base_sequence: seq,
        };
        let r = e
            .records()
            .admit_encoded(
                "p",
                partition,
                entry(*pid, seq),
                1,
                1_700_000_000_000,
                Some(pb),
            )
            .await
            .finish()
            .await;
        assert_eq!(r.error, flume_protocol::ErrorCode::None, "{r:?}");
    }
}

fn tracked(e: &Engine) -> usize {
    let t = e.records().topic("p").expect("topic");
    (0..PARTITIONS)
        .map(|p| {
            t.partition(i32::try_from(p).expect("small"))
                .map_or(0, |p| p.producers().len())
        })
        .sum()
}

fn timed_open(dir: &Path) -> (std::sync::Arc<Engine>, f64) {
    let t0 = Instant::now();
    let e = Engine::open(config(dir)).expect("the broker starts");
    (e, t0.elapsed().as_secs_f64() * 1000.0)
}

fn main() {
    let producers: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10_000);
    let dir = tempfile::tempdir().expect("a temp dir");
    let e = Engine::open(config(dir.path())).expect("the broker starts");
    e.records()
        .create_topic(
            "p",
            TopicConfig {
                partitions: PARTITIONS,
                ..TopicConfig::default()
            },
        )
        .expect("topic");
    let pids: Vec<i64> = flume_rt::block_on(async {
        let mut v = Vec::with_capacity(producers);
        for _ in 0..producers {
            v.push(e.records().init_producer_id().await.expect("a producer id"));
        }
        append_all(&e, &v, 0).await;
        e.shutdown().await;
        v
    });
    drop(e);
    // An empty start for comparison: the same directory without any producer state.
    let (e, with_snapshot) = timed_open(dir.path());
    let n = tracked(&e);
    println!("start with {n} producer states from the snapshots written at a clean stop: {with_snapshot:.1} ms");
    flume_rt::block_on(append_all(&e, &pids, 1));
    // A kill: no stop, no new snapshot.
    drop(e);
    let (e, after_kill) = timed_open(dir.path());
    let n = tracked(&e);
    println!("start after a kill, {n} states from the snapshots and the log after them: {after_kill:.1} ms");
    flume_rt::block_on(e.shutdown());
    drop(e);
    for p in 0..PARTITIONS {
        let f = dir
            .path()
            .join("p")
            .join(format!("partition-{p}"))
            .join("producers.snapshot");
        let _ = std::fs::remove_file(f);
    }
    let (e, no_snapshot) = timed_open(dir.path());
    let n = tracked(&e);
    println!(
        "start without snapshots, {n} states read from the active segments: {no_snapshot:.1} ms"
    );
    flume_rt::block_on(e.shutdown());
    drop(e);
    // The same directory's start once no producer is tracked (the files alone).
    let empty = tempfile::tempdir().expect("a temp dir");
    let e = Engine::open(config(empty.path())).expect("starts");
    e.records()
        .create_topic(
            "p",
            TopicConfig {
                partitions: PARTITIONS,
                ..TopicConfig::default()
            },
        )
        .expect("topic");
    flume_rt::block_on(e.shutdown());
    drop(e);
    let (_e, bare) = timed_open(empty.path());
    println!("start of the same topic with no producer state: {bare:.1} ms");
}

//! Whole-system benches, client and broker in one process over loopback TCP, with the original
//! design's names and shapes plus batched throughput and commits. `cargo bench --bench broker`.
//! Run with `ASYNC_STD_THREAD_COUNT=1` as well to see the one-thread figures.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use flume_broker::domain::{Member, TopicPartition};
use flume_broker::{Broker, BrokerConfig, TopicConfig};
use flume_client::lowlevel::Client;
use flume_client::{
    ConnectionConfig, FetchConfig, PartitionConsumer, Producer, ProducerConfig, ProducerRecord,
    StartOffset,
};
use flume_protocol::{OffsetCommitRequest, PartitionOffset};
use flume_rt::{block_on, BusyPoll};

struct Env {
    _dir: tempfile::TempDir,
    broker: Broker,
    addr: String,
}

/// A broker with default settings (adaptive spinning).
fn env() -> Env {
    env_with(BusyPoll::default())
}

/// A broker whose connections spin as `busy_poll` says for their next request.
fn env_with(busy_poll: impl Into<BusyPoll>) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = BrokerConfig::new(dir.path());
    cfg.listen = "127.0.0.1:0".into();
    cfg.busy_poll = busy_poll.into();
    let broker = block_on(Broker::start(cfg)).unwrap();
    for (name, parts) in [("one", 1), ("four", 4)] {
        broker
            .engine()
            .records()
            .create_topic(
                name,
                TopicConfig {
                    partitions: parts,
                    ..TopicConfig::default()
                },
            )
            .unwrap();
    }
    let addr = broker.local_addr().to_string();
    Env {
        _dir: dir,
        broker,
        addr,
    }
}

async fn send(
    p: &Producer,
    topic: &str,
    key: Option<bytes::Bytes>,
    value: &bytes::Bytes,
) -> flume_client::Result<flume_client::RecordMetadata> {
    let rec = ProducerRecord::new(topic, value.clone());
    p.send_record(match key {
        Some(k) => rec.key(k),
        None => rec,
    })
    .await
}

/// Runs `fut` as a task on the runtime and waits for it from outside the runtime,
/// as a service does that runs its logic in tasks. The waiting thread then never
/// drives the reactor, so I/O wakes the task that needs it directly; with
/// `ASYNC_STD_THREAD_COUNT=1` client and broker share one thread.
fn on_runtime<T: Send + 'static>(fut: impl std::future::Future<Output = T> + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    flume_rt::spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv().expect("the task finishes")
}

/// A timed run of `n` sends, each waiting for its acknowledgement; keyed runs
/// cycle through 100 keys.
fn one_by_one(
    producer: &Arc<Producer>,
    topic: &'static str,
    value: &bytes::Bytes,
    keyed: bool,
) -> impl FnMut(u64) -> Duration {
    let (producer, value) = (Arc::clone(producer), value.clone());
    move |n| {
        let (p, v) = (producer.clone(), value.clone());
        on_runtime(async move {
            let t = Instant::now();
            for i in 0..n {
                let key = keyed.then(|| format!("user-{}", i % 100).into());
                send(&p, topic, key, &v).await.unwrap();
            }
            t.elapsed()
        })
    }
}

fn one_per_round_trip(c: &mut Criterion) {
    let e = env();
    let producer = Arc::new(block_on(Producer::connect(&e.addr)).unwrap());
    let small = bytes::Bytes::from(vec![b'x'; 100]);
    let large = bytes::Bytes::from(vec![b'x'; 10 * 1024]);
    let mut g = c.benchmark_group("round_trip");
    g.throughput(Throughput::Elements(1));
    // Default settings: both sides spin adaptively.
    g.bench_function("produce_100B", |b| {
        b.iter_custom(one_by_one(&producer, "one", &small, false))
    });
    // Neither side spins: every reply wakes a parked thread.
    let quiet_env = env_with(BusyPoll::Off);
    let quiet = Arc::new(
        block_on(Producer::with_config(
            &quiet_env.addr,
            ProducerConfig::default()
                .connection(ConnectionConfig::default().busy_poll(BusyPoll::Off)),
        ))
        .unwrap(),
    );
    g.bench_function("produce_100B_no_spin", |b| {
        b.iter_custom(one_by_one(&quiet, "one", &small, false))
    });
    drop(quiet);
    block_on(quiet_env.broker.shutdown());
    // Both sides spin up to 50 µs (yielding) before parking: with one executor
    // thread the request and the response then pass without the reactor, and on
    // the default executor no parked thread has to be woken.
    let spin = Duration::from_micros(50);
    let spinning_env = env_with(spin);
    let spinning = Arc::new(
        block_on(Producer::with_config(
            &spinning_env.addr,
            ProducerConfig::default().connection(ConnectionConfig::default().busy_poll(spin)),
        ))
        .unwrap(),
    );
    g.bench_function("produce_100B_busy_poll_50us", |b| {
        b.iter_custom(one_by_one(&spinning, "one", &small, false))
    });
    drop(spinning);
    block_on(spinning_env.broker.shutdown());
    g.bench_function("produce_with_key_100B", |b| {
        b.iter_custom(one_by_one(&producer, "four", &small, true))
    });
    g.throughput(Throughput::Bytes(large.len() as u64));
    g.bench_function("produce_large_10KB", |b| {
        b.iter_custom(one_by_one(&producer, "one", &large, false))
    });
    g.throughput(Throughput::Elements(4));
    let producers: Vec<Arc<Producer>> = (0..4)
        .map(|_| Arc::new(block_on(Producer::connect(&e.addr)).unwrap()))
        .collect();
    g.bench_function("concurrent_producers_4", |b| {
        b.iter_custom(|n| {
            let (ps, v) = (producers.clone(), small.clone());
            on_runtime(async move {
                let t = Instant::now();
                let tasks: Vec<_> = ps
                    .into_iter()
                    .map(|p| {
                        let v = v.clone();
                        flume_rt::spawn(async move {
                            for _ in 0..n {
                                send(&p, "four", None, &v).await.unwrap();
                            }
                        })
                    })
                    .collect();
                for task in tasks {
                    task.await;
                }
                t.elapsed()
            })
        })
    });
    g.throughput(Throughput::Elements(1));
    let client = Arc::new(block_on(Client::connect(&e.addr, ConnectionConfig::default())).unwrap());
    g.bench_function("produce_and_fetch_round_trip", |b| {
        b.iter_custom(|n| {
            let (p, v, client) = (producer.clone(), small.clone(), client.clone());
            on_runtime(async move {
                let t = Instant::now();
                for _ in 0..n {
                    let m = send(&p, "one", None, &v).await.unwrap();
                    let mut c = PartitionConsumer::with_client(
                        client.clone(),
                        "one",
                        0,
                        StartOffset::At(m.offset as u64),
                        FetchConfig::default(),
                    );
                    let got = c.poll_batch().await.unwrap();
                    assert_eq!(got[0].offset, m.offset as u64);
                }
                t.elapsed()
            })
        })
    });
    g.finish();
    block_on(e.broker.shutdown());
}

fn throughput(c: &mut Criterion) {
    let e = env();
    let producer = Arc::new(block_on(Producer::connect(&e.addr)).unwrap());
    let value = bytes::Bytes::from(vec![b'x'; 100]);
    let mut g = c.benchmark_group("throughput");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(5));
    let n = 100_000u64;
    g.throughput(Throughput::Elements(n));
    g.bench_function("produce_batched_100B_x100k", |b| {
        b.iter(|| {
            block_on(async {
                let mut pending = std::collections::VecDeque::new();
                for _ in 0..n {
                    let rec = ProducerRecord::new("four", value.clone());
                    pending.push_back(producer.enqueue(rec).await.unwrap());
                    if pending.len() > 20_000 {
                        pending.pop_front().unwrap().await.unwrap();
                    }
                }
                for p in pending {
                    p.await.unwrap();
                }
            })
        })
    });
    // A partition with 100k records to read back; 1 MB fetches.
    block_on(async {
        let mut pending = Vec::new();
        for _ in 0..n {
            let rec = ProducerRecord::new("one", value.clone());
            pending.push(producer.enqueue(rec).await.unwrap());
        }
        for p in pending {
            p.await.unwrap();
        }
    });
    let client = Arc::new(block_on(Client::connect(&e.addr, ConnectionConfig::default())).unwrap());
    let from_start = |config: FetchConfig| {
        PartitionConsumer::with_client(client.clone(), "one", 0, StartOffset::At(0), config)
    };
    g.bench_function("consume_100B_x100k", |b| {
        b.iter(|| {
            block_on(async {
                let mut c = from_start(FetchConfig::default());
                let mut got = 0;
                while got < n {
                    got += c.poll_batch().await.unwrap().len() as u64;
                }
            })
        })
    });
    g.throughput(Throughput::Bytes(1 << 20));
    g.sample_size(50);
    g.bench_function("fetch_1MB_of_100B_records", |b| {
        b.iter(|| {
            block_on(async {
                let mut c = from_start(FetchConfig::default().partition_max_bytes(1 << 20));
                c.poll_batch().await.unwrap().len()
            })
        })
    });
    g.finish();
    block_on(e.broker.shutdown());
}

fn commits(c: &mut Criterion) {
    let e = env();
    let client = Arc::new(block_on(Client::connect(&e.addr, ConnectionConfig::default())).unwrap());
    let mut g = c.benchmark_group("offset_commit");
    g.throughput(Throughput::Elements(1));
    let req = |i: u64| OffsetCommitRequest {
        group: format!("g{}", i % 16),
        generation: -1,
        member_id: String::new(),
        offsets: vec![PartitionOffset {
            topic: "four".into(),
            partition: (i % 4) as i32,
            offset: i as i64,
        }],
    };
    g.bench_function("engine_commit", |b| {
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            let group = format!("g{}", i % 16);
            let member = Member {
                group: &group,
                member_id: "",
                generation: -1,
            };
            let at = TopicPartition::new("four", (i % 4) as i32);
            block_on(
                e.broker
                    .engine()
                    .groups()
                    .commit_offsets(member, &[(at, i as i64)]),
            )
            .unwrap()
        })
    });
    g.bench_function("commit_over_tcp_64_in_flight", |b| {
        b.iter_custom(|n| {
            block_on(async {
                let t = Instant::now();
                let conn = client.connection().await.unwrap();
                let mut inflight = std::collections::VecDeque::new();
                for i in 0..n {
                    inflight.push_back(conn.start_call(&req(i), Duration::ZERO).await.unwrap());
                    if inflight.len() >= 64 {
                        inflight.pop_front().unwrap().await.unwrap();
                    }
                }
                for f in inflight {
                    f.await.unwrap();
                }
                t.elapsed()
            })
        })
    });
    g.finish();
    block_on(e.broker.shutdown());
}

criterion_group!(benches, one_per_round_trip, throughput, commits);
criterion_main!(benches);

//! Producer, partition consumer, routing, backpressure, long poll, shutdown, raw frames.

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use flume_broker::budget::CONNECTION_RESERVE_BYTES;
use flume_broker::{Backpressure, Broker, ProduceBatch, Route, TopicConfig};
use flume_client::lowlevel::Client;
use flume_client::BusyPoll;
use flume_client::{
    Admin, ConnectionConfig, PartitionConsumer, Producer, ProducerRecord, StartOffset,
};
use flume_protocol::{
    self as protocol, partition_for_key, record, ErrorCode, ProduceEntry, ProduceRequest,
};
use futures::io::{AsyncReadExt, AsyncWriteExt};
use futures::StreamExt;

#[test]
fn send_then_consume_with_keys_and_headers() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let broker = common::start(dir.path()).await;
        let addr = broker.local_addr().to_string();
        let producer = Producer::connect(&addr).await.unwrap();
        let m1 = producer
            .send("orders", Some(b"user-123"), br#"{"item":"widget"}"#)
            .await
            .unwrap();
        let m2 = producer
            .send_record(
                ProducerRecord::new("orders", "gadget")
                    .key("user-123")
                    .headers(vec![protocol::Header::new("trace", "abc")]),
            )
            .await
            .unwrap();
        assert_eq!(m1.partition, m2.partition, "same key, same partition");
        assert_eq!(m2.offset, m1.offset + 1);
        assert_eq!(
            m1.partition as u32,
            partition_for_key(b"user-123", 3),
            "client and broker routing agree"
        );
        let mut c =
            PartitionConsumer::connect(&addr, "orders", m1.partition, StartOffset::Earliest)
                .await
                .unwrap();
        let r1 = c.next().await.unwrap().unwrap();
        let r2 = c.next().await.unwrap().unwrap();
        assert_eq!(
            (r1.offset, r1.key.as_deref().unwrap(), r1.payload()),
            (0, &b"user-123"[..], &br#"{"item":"widget"}"#[..])
        );
        assert_eq!(r2.payload(), b"gadget");
        assert_eq!(r2.headers[0].key, "trace");
        producer.close().await;
        broker.shutdown().await;
    });
}

#[test]
fn a_tombstone_reads_back_null_and_an_empty_value_empty_after_a_restart() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let broker = common::start(dir.path()).await;
        broker
            .engine()
            .records()
            .create_topic("ch", common::topic(1))
            .unwrap();
        let addr = broker.local_addr().to_string();
        let producer = Producer::connect(&addr).await.unwrap();
        producer.send("ch", Some(b"k"), b"").await.unwrap();
        producer.send_tombstone("ch", b"k").await.unwrap();
        producer
            .send_record(
                ProducerRecord::new("ch", "v").headers(vec![protocol::Header {
                    key: "gone".into(),
                    value: None,
                }]),
            )
            .await
            .unwrap();
        producer.close().await;
        broker.shutdown().await;

        let broker = common::start(dir.path()).await;
        let addr = broker.local_addr().to_string();
        let mut c = PartitionConsumer::connect(&addr, "ch", 0, StartOffset::Earliest)
            .await
            .unwrap();
        let empty = c.next().await.unwrap().unwrap();
        let tomb = c.next().await.unwrap().unwrap();
        let with_header = c.next().await.unwrap().unwrap();
        assert_eq!(empty.value.as_deref(), Some(&b""[..]));
        assert!(!empty.is_tombstone());
        assert_eq!(
            (tomb.key.as_deref(), tomb.value.as_deref()),
            (Some(&b"k"[..]), None)
        );
        assert!(tomb.is_tombstone());
        assert_eq!(with_header.headers[0].value, None);
        broker.shutdown().await;
    });
}

#[test]
fn routing_agrees_for_many_keys() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let broker = common::start(dir.path()).await;
        broker
            .engine()
            .records()
            .create_topic("r", common::topic(7))
            .unwrap();
        let producer = Producer::connect(&broker.local_addr().to_string())
            .await
            .unwrap();
        for i in 0..200 {
            let key = format!("key-{i}");
            let m = producer
                .send("r", Some(key.as_bytes()), b"v")
                .await
                .unwrap();
            assert_eq!(
                m.partition as u32,
                partition_for_key(key.as_bytes(), 7),
                "{key}"
            );
        }
        broker.shutdown().await;
    });
}

#[test]
fn batching_many_tasks_dense_offsets_and_key_order() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let broker = common::start(dir.path()).await;
        broker
            .engine()
            .records()
            .create_topic("b", common::topic(4))
            .unwrap();
        let producer = Arc::new(
            Producer::connect(&broker.local_addr().to_string())
                .await
                .unwrap(),
        );
        let per_task = 12_500u32;
        let mut tasks = Vec::new();
        for t in 0..8u32 {
            let producer = producer.clone();
            tasks.push(flume_rt::spawn(async move {
                let key = format!("task-{t}");
                let mut acks = Vec::new();
                // Keep many sends in flight from one task.
                let mut pending = std::collections::VecDeque::new();
                for i in 0..per_task {
                    let rec = ProducerRecord::new("b", format!("{t}:{i}")).key(key.clone());
                    pending.push_back(producer.enqueue(rec).await.unwrap());
                    if pending.len() > 512 {
                        acks.push(pending.pop_front().unwrap().await.unwrap());
                    }
                }
                for p in pending {
                    acks.push(p.await.unwrap());
                }
                acks
            }));
        }
        let mut per_partition: HashMap<i32, Vec<i64>> = HashMap::new();
        for (t, task) in tasks.into_iter().enumerate() {
            let acks = task.await;
            assert_eq!(acks.len(), per_task as usize);
            // Same key: one partition, increasing offsets in send order.
            assert!(
                acks.iter().all(|a| a.partition == acks[0].partition),
                "task {t}"
            );
            assert!(
                acks.windows(2).all(|w| w[0].offset < w[1].offset),
                "task {t} order"
            );
            per_partition
                .entry(acks[0].partition)
                .or_default()
                .extend(acks.iter().map(|a| a.offset));
        }
        for (p, mut offs) in per_partition {
            offs.sort_unstable();
            let expect: Vec<i64> = (0..offs.len() as i64).collect();
            assert_eq!(offs, expect, "partition {p}: offsets distinct and dense");
        }
        broker.shutdown().await;
    });
}

/// Records spread thin over many partitions (the producer holds such
/// requests while one is in flight, `State::spread_thin`): every record is
/// acknowledged, each partition's offsets are dense and in send order.
#[test]
fn spread_over_many_partitions_every_record_lands_in_order() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let broker = common::start(dir.path()).await;
        let partitions = 64i32;
        broker
            .engine()
            .records()
            .create_topic("spread", common::topic(partitions as u32))
            .unwrap();
        let producer = Producer::connect(&broker.local_addr().to_string())
            .await
            .unwrap();
        let mut pending = std::collections::VecDeque::new();
        let mut acks: HashMap<i32, Vec<(i64, u32)>> = HashMap::new();
        for i in 0..20_000u32 {
            let p = (i % partitions as u32) as i32;
            let rec = ProducerRecord::new("spread", format!("{i}")).partition(p);
            pending.push_back((i, producer.enqueue(rec).await.unwrap()));
            // A window of in-flight records, as `perf produce` keeps.
            if pending.len() >= 2_000 {
                let (i, d) = pending.pop_front().unwrap();
                let m = d.await.unwrap();
                acks.entry(m.partition).or_default().push((m.offset, i));
            }
        }
        for (i, d) in pending {
            let m = d.await.unwrap();
            acks.entry(m.partition).or_default().push((m.offset, i));
        }
        assert_eq!(acks.len(), partitions as usize);
        for (p, got) in acks {
            let offsets: Vec<i64> = got.iter().map(|&(o, _)| o).collect();
            assert_eq!(
                offsets,
                (0..offsets.len() as i64).collect::<Vec<_>>(),
                "partition {p}"
            );
            assert!(
                got.windows(2).all(|w| w[0].1 < w[1].1),
                "partition {p}: send order"
            );
        }
        producer.close().await;
        broker.shutdown().await;
    });
}

#[test]
fn long_poll_wakes_on_new_data_and_times_out_empty() {
    long_poll(
        ConnectionConfig::default().busy_poll(BusyPoll::Off),
        BusyPoll::Off,
    );
}

/// The default: both sides spin adaptively (and fall back to waiting).
#[test]
fn adaptive_spinning_falls_back_to_waiting() {
    long_poll(ConnectionConfig::default(), BusyPoll::default());
}

/// A client and a broker that spin for their next message fall back to waiting
/// when it takes longer than their spin (a long poll always does), and miss nothing.
#[test]
fn busy_polling_falls_back_to_waiting() {
    let spin = Duration::from_micros(200);
    long_poll(ConnectionConfig::default().busy_poll(spin), spin.into());
}

fn long_poll(conn: ConnectionConfig, broker_busy_poll: BusyPoll) {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = common::config(dir.path());
        cfg.busy_poll = broker_busy_poll;
        let broker = Broker::start(cfg).await.unwrap();
        broker
            .engine()
            .records()
            .create_topic("lp", common::topic(1))
            .unwrap();
        let addr = broker.local_addr().to_string();
        let client = Arc::new(Client::connect(&addr, conn.clone()).await.unwrap());
        // Empty partition: returns empty after max_wait, no error.
        let mut c = PartitionConsumer::with_client(
            client.clone(),
            "lp",
            0,
            StartOffset::At(0),
            flume_client::FetchConfig::default().max_wait(Duration::from_millis(100)),
        );
        assert!(c.poll_batch().await.unwrap().is_empty());
        // A long wait wakes as soon as a record arrives.
        let mut c = PartitionConsumer::with_client(
            client,
            "lp",
            0,
            StartOffset::At(0),
            flume_client::FetchConfig::default().max_wait(Duration::from_secs(30)),
        );
        let waiter = flume_rt::spawn(async move { c.poll_batch().await });
        let producer = Producer::with_config(
            &addr,
            flume_client::ProducerConfig::default().connection(conn),
        )
        .await
        .unwrap();
        producer.send("lp", None, b"wake").await.unwrap();
        let got = flume_rt::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("long poll woke")
            .unwrap();
        assert_eq!(got[0].payload(), b"wake");
        broker.shutdown().await;
    });
}

fn batch_of(n: usize) -> bytes::Bytes {
    let mut buf = Vec::new();
    for i in 0..n {
        record::encode(&mut buf, 0, 0, None, format!("v{i}").as_bytes(), &[]);
    }
    buf.into()
}

/// A batch above the inline fast path's limit, so it always goes through the queue.
fn big_batch_of(n: usize) -> bytes::Bytes {
    let mut buf = Vec::new();
    let value = vec![b'v'; flume_broker::partition::INLINE_MAX_BYTES / n + 1];
    for _ in 0..n {
        record::encode(&mut buf, 0, 0, None, &value, &[]);
    }
    buf.into()
}

#[test]
fn reject_mode_returns_queue_full_and_block_mode_stays_bounded() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let broker = common::start(dir.path()).await;
        let e = broker.engine().clone();
        for (name, bp) in [("rej", Backpressure::Reject), ("blk", Backpressure::Block)] {
            e.records()
                .create_topic(
                    name,
                    TopicConfig {
                        partitions: 1,
                        max_pending: 2,
                        backpressure: bp,
                        ..TopicConfig::default()
                    },
                )
                .unwrap();
        }
        // Reject: many concurrent admissions against a queue of 2 meet QUEUE_FULL,
        // and every accepted record gets a distinct offset. The writer drains the
        // queue while admissions go on, so on a machine where it keeps up with one
        // round the test runs further rounds until the queue overflows.
        let batch = big_batch_of(50);
        let mut full = 0;
        let mut bases = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while full == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "a queue of 2 must overflow with rounds of 200 immediate admissions"
            );
            let admissions = (0..200).map(|_| {
                e.records().admit_produce(ProduceBatch {
                    topic: "rej".into(),
                    route: Route::Partition(0),
                    records: batch.clone(),
                })
            });
            for p in futures::future::join_all(admissions).await {
                let r = p.finish().await;
                match r.error {
                    ErrorCode::None => bases.push(r.spans[0].base_offset),
                    ErrorCode::QueueFull => full += 1,
                    other => panic!("unexpected {other}"),
                }
            }
        }
        bases.sort_unstable();
        assert!(bases.windows(2).all(|w| w[1] - w[0] == 50));
        // Block: the queue never holds more than max_pending, nothing is rejected.
        let part = e
            .records()
            .topic("blk")
            .unwrap()
            .partition(0)
            .unwrap()
            .clone();
        let watcher = {
            let part = part.clone();
            flume_rt::spawn(async move {
                let mut max = 0;
                for _ in 0..2000 {
                    max = max.max(part.queued());
                    flume_rt::yield_now().await;
                }
                max
            })
        };
        let mut pendings = Vec::new();
        for _ in 0..200 {
            pendings.push(
                e.records()
                    .admit_produce(ProduceBatch {
                        topic: "blk".into(),
                        route: Route::Partition(0),
                        records: big_batch_of(50),
                    })
                    .await,
            );
            assert!(part.queued() <= part.capacity());
        }
        for p in pendings {
            assert_eq!(p.finish().await.error, ErrorCode::None);
        }
        assert!(watcher.await <= 2);
        assert_eq!(part.end_offset(), 200 * 50);
        broker.shutdown().await;
    });
}

#[test]
fn graceful_shutdown_loses_no_acknowledged_record() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let broker = common::start(dir.path()).await;
        let producer = Producer::connect(&broker.local_addr().to_string())
            .await
            .unwrap();
        let mut acked = Vec::new();
        for i in 0..500 {
            acked.push(
                producer
                    .send(
                        "s",
                        Some(format!("k{}", i % 5).as_bytes()),
                        format!("v{i}").as_bytes(),
                    )
                    .await
                    .unwrap(),
            );
        }
        broker.shutdown().await;
        drop(producer);
        let broker = Broker::start(common::config(dir.path())).await.unwrap();
        let t = broker.engine().records().topic("s").unwrap();
        let total: u64 = t.offsets().iter().map(|o| o.log_end as u64).sum();
        assert_eq!(total, 500);
        for a in acked.iter().step_by(37) {
            let r = t
                .partition(a.partition)
                .unwrap()
                .read_now(a.offset as u64, 1)
                .unwrap();
            assert!(!r.records.is_empty());
        }
        broker.shutdown().await;
    });
}

#[test]
fn malformed_frames_cost_only_their_connection() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let broker = common::start(dir.path()).await;
        let addr = broker.local_addr().to_string();
        let producer = Producer::connect(&addr).await.unwrap();
        producer.send("m", None, b"before").await.unwrap();
        // A size of 2^31-1: closed without allocating.
        let mut bad = flume_rt::TcpStream::connect(&addr).await.unwrap();
        bad.write_all(&[0x7f, 0xff, 0xff, 0xff, 0, 0])
            .await
            .unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(
            bad.read(&mut buf).await.unwrap_or(0),
            0,
            "connection closed"
        );
        // A well-framed request that does not decode, and an unknown api key: error responses, connection stays.
        let mut s = flume_rt::TcpStream::connect(&addr).await.unwrap();
        let mut frame = Vec::new();
        let st = protocol::frame::begin_request(&mut frame, 0, 42);
        frame.extend_from_slice(&[0, 0, 0, 9, 1]);
        protocol::frame::finish_frame(&mut frame, st);
        let st = protocol::frame::begin_request(&mut frame, 99, 43);
        protocol::frame::finish_frame(&mut frame, st);
        protocol::encode_request(&mut frame, 44, &protocol::MetadataRequest::default());
        s.write_all(&frame).await.unwrap();
        let mut got = Vec::new();
        let mut codes = HashMap::new();
        while codes.len() < 3 {
            let mut chunk = [0u8; 4096];
            let n = s.read(&mut chunk).await.unwrap();
            assert!(n > 0, "connection must stay open");
            got.extend_from_slice(&chunk[..n]);
            while let Ok(protocol::frame::Decoded::Frame(f, used)) =
                protocol::frame::decode_response(&got, 1 << 20)
            {
                codes.insert(
                    f.request_id,
                    i16::from_be_bytes([f.payload[0], f.payload[1]]),
                );
                got.drain(..used);
            }
        }
        assert_eq!(codes[&42], ErrorCode::InvalidRequest.code());
        assert_eq!(codes[&43], ErrorCode::UnsupportedApi.code());
        assert_eq!(codes[&44], 0);
        // Other clients never noticed.
        producer.send("m", None, b"after").await.unwrap();
        let admin = Admin::connect(&addr).await.unwrap();
        let t = admin.topics(&["m".into()]).await.unwrap();
        assert_eq!(t[0].partitions.iter().map(|p| p.log_end).sum::<i64>(), 2);
        broker.shutdown().await;
    });
}

#[test]
fn produce_errors_are_typed() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let broker = common::start(dir.path()).await;
        let client = Client::connect(
            &broker.local_addr().to_string(),
            ConnectionConfig::default(),
        )
        .await
        .unwrap();
        let big = {
            let mut b = Vec::new();
            record::encode(&mut b, 0, 0, None, &vec![0u8; 2 * 1024 * 1024], &[]);
            bytes::Bytes::from(b)
        };
        let mut corrupt = batch_of(1).to_vec();
        let last = corrupt.len() - 1;
        corrupt[last] ^= 1;
        let req = ProduceRequest {
            entries: vec![
                ProduceEntry {
                    topic: "e".into(),
                    partition: 0,
                    records: big,
                },
                ProduceEntry {
                    topic: "e".into(),
                    partition: 0,
                    records: corrupt.into(),
                },
                ProduceEntry {
                    topic: "e".into(),
                    partition: 9,
                    records: batch_of(1),
                },
                ProduceEntry {
                    topic: "bad name".into(),
                    partition: 0,
                    records: batch_of(1),
                },
            ],
        };
        let resp = client.call(&req).await.unwrap();
        let codes: Vec<ErrorCode> = resp.results.iter().map(|r| r.error).collect();
        assert_eq!(
            codes,
            vec![
                ErrorCode::RecordTooLarge,
                ErrorCode::CorruptRecord,
                ErrorCode::UnknownPartition,
                ErrorCode::InvalidName
            ]
        );
        broker.shutdown().await;
    });
}

#[test]
fn inline_fast_path_never_overtakes_queued_appends() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let broker = common::start(dir.path()).await;
        let e = broker.engine().clone();
        e.records().create_topic("ord", common::topic(1)).unwrap();
        // Alternate batches that must queue (big) with ones that may go inline (small):
        // offsets must follow admission order.
        let mut pendings = Vec::new();
        for i in 0..300 {
            let records = if i % 3 == 0 {
                big_batch_of(4)
            } else {
                batch_of(1)
            };
            pendings.push(
                e.records()
                    .admit_produce(ProduceBatch {
                        topic: "ord".into(),
                        route: Route::Partition(0),
                        records,
                    })
                    .await,
            );
        }
        let mut last = -1;
        for p in pendings {
            let r = p.finish().await;
            assert_eq!(r.error, ErrorCode::None);
            assert!(r.spans[0].base_offset > last, "admission order kept");
            last = r.spans[0].base_offset;
        }
        broker.shutdown().await;
    });
}

/// Produce requests in flight are bounded by `max_request_memory`: once it is
/// spent a connection admits and reads nothing more until requests complete
/// (each may have admitted one frame while there was room), and every record
/// is still acknowledged, once, in order.
#[test]
fn produce_memory_in_flight_stays_within_its_budget() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = common::config(dir.path());
        cfg.max_frame_bytes = 4096;
        cfg.max_record_bytes = 2048;
        cfg.max_request_memory = 4096;
        // Every append waits for the disk, so requests pile up behind the writer.
        cfg.fsync = flume_broker::FsyncPolicy::Always;
        let broker = Broker::start(cfg).await.unwrap();
        broker
            .engine()
            .records()
            .create_topic("mem", common::topic(1))
            .unwrap();
        let addr = broker.local_addr().to_string();
        let producers = 4usize;
        let per_producer = 300usize;
        let mut tasks = Vec::new();
        for p in 0..producers {
            let producer = Producer::with_config(
                &addr,
                // One batch per request, under the broker's 4 KiB frames (a
                // larger request would cost the connection); enough of them in
                // flight to pass the connection's 64 KiB reserve.
                flume_client::ProducerConfig::default()
                    .batch_max_bytes(3000)
                    .max_in_flight(32)
                    .request_max_bytes(3500),
            )
            .await
            .unwrap();
            tasks.push(flume_rt::spawn(async move {
                let mut acks = Vec::new();
                for i in 0..per_producer {
                    let rec = ProducerRecord::new("mem", format!("{p}-{i:04}-{}", "x".repeat(200)))
                        .key(format!("p{p}"));
                    acks.push(producer.enqueue(rec).await.unwrap());
                }
                let mut offsets = Vec::new();
                for a in acks {
                    offsets.push(a.await.unwrap().offset);
                }
                offsets
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            let offsets = t.await;
            assert!(
                offsets.windows(2).all(|w| w[0] < w[1]),
                "per-producer order"
            );
            all.extend(offsets);
        }
        all.sort_unstable();
        let expected: Vec<i64> = (0..(producers * per_producer) as i64).collect();
        assert_eq!(all, expected, "dense offsets, nothing twice");
        let m = broker.request_memory();
        // Each connection's reserve is its own, outside the shared limit
        // (docs/internals.md, "Fair admission"), and each may have admitted one frame
        // past it while there was room.
        let bound = m.limit + producers * (CONNECTION_RESERVE_BYTES + 4096);
        assert!(
            m.shared_peak >= m.limit,
            "the load reached the shared budget (peak {}), else this shows nothing",
            m.shared_peak
        );
        assert!(
            m.peak <= bound,
            "peak {} over the budget {} plus a reserve and one frame per connection",
            m.peak,
            m.limit
        );
        common::wait_until("charges released", Duration::from_secs(10), || async {
            broker.request_memory().used == 0
        })
        .await;
        broker.shutdown().await;
    });
}

/// A request future polled once and then left alone, or dropped, holds
/// nothing another request needs: other requests on the same `Connection`
/// complete, and the one left alone still gets its answer when polled again.
#[test]
fn abandoned_request_futures_do_not_stall_the_connection() {
    use flume_client::lowlevel::Connection;
    use flume_protocol::{FetchPartition, FetchRequest, MetadataRequest};
    use std::future::Future;
    use std::task::Context;
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr) = common::with_topic(dir.path(), "ab", 1).await;
        let conn = Connection::connect(&addr, ConnectionConfig::default())
            .await
            .unwrap();
        // A long poll at the log end: the broker holds it until a record comes.
        let long = FetchRequest {
            max_wait_ms: 10_000,
            min_bytes: 1,
            max_bytes: 1 << 20,
            partitions: vec![FetchPartition {
                topic: "ab".into(),
                partition: 0,
                offset: 0,
                max_bytes: 1 << 20,
            }],
        };
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut left_alone = Box::pin(conn.call(&long, Duration::from_secs(10)));
        assert!(left_alone.as_mut().poll(&mut cx).is_pending());
        let mut dropped = Box::pin(conn.call(&long, Duration::from_secs(10)));
        assert!(dropped.as_mut().poll(&mut cx).is_pending());
        drop(dropped);
        let meta = MetadataRequest {
            topics: vec!["ab".into()],
        };
        for _ in 0..20 {
            let m = flume_rt::timeout(Duration::from_secs(1), conn.call(&meta, Duration::ZERO))
                .await
                .expect("a request behind an abandoned one is answered")
                .unwrap();
            assert_eq!(m.topics[0].name, "ab");
        }
        // A record completes the long polls; their answers arrive while nobody
        // polls `left_alone` and other requests go on.
        let producer = Producer::connect(&addr).await.unwrap();
        producer.send("ab", None, b"wake").await.unwrap();
        for _ in 0..5 {
            flume_rt::timeout(Duration::from_secs(1), conn.call(&meta, Duration::ZERO))
                .await
                .expect("answered")
                .unwrap();
        }
        let fetched = flume_rt::timeout(Duration::from_secs(1), left_alone)
            .await
            .expect("the future left alone completes once polled")
            .unwrap();
        let records = record::decode_all(&fetched.partitions[0].records).unwrap();
        assert_eq!(records[0].payload(), b"wake");
        producer.close().await;
        broker.shutdown().await;
    });
}

/// Reads request frames from the start of `got`: the whole ones, then what is left.
fn split_frames(got: &[u8]) -> (Vec<(i16, i32)>, &[u8]) {
    use flume_protocol::frame::{decode_request, Decoded};
    let mut frames = Vec::new();
    let mut rest = got;
    while let Ok(Decoded::Frame(f, used)) = decode_request(rest, 1 << 30) {
        frames.push((f.api_key, f.request_id));
        rest = &rest[used..];
    }
    (frames, rest)
}

/// 32 MiB of record bytes: more than the loopback socket buffers hold, so a
/// peer that reads nothing makes the write stop part-way.
fn huge_produce() -> ProduceRequest {
    ProduceRequest {
        entries: vec![ProduceEntry {
            topic: "t".into(),
            partition: 0,
            records: vec![0u8; 32 << 20].into(),
        }],
    }
}

/// A raw peer that reads nothing: a request write times out half-way. The
/// connection is failed at once (a request pending on it gets the error, not
/// its own timeout), the socket ends right after the torn frame, and the next
/// request goes out whole on a new connection.
#[test]
fn write_timed_out_part_way_fails_the_connection() {
    use flume_client::Error;
    use flume_protocol::{ApiKey, MetadataRequest, MetadataResponse};
    use flume_rt as rt;
    rt::block_on(async {
        let listener = rt::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let config = ConnectionConfig::default()
            .request_timeout(Duration::from_millis(300))
            .backoff_initial(Duration::from_millis(1));
        let client = Client::connect(&addr, config).await.unwrap();
        let (mut first, _) = listener.accept().await.unwrap();
        let conn = client.connection().await.unwrap();
        let meta = MetadataRequest { topics: vec![] };
        let pending = conn
            .start_call(&meta, Duration::from_secs(30))
            .await
            .unwrap();
        let err = client.call(&huge_produce()).await.unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        assert!(conn.is_broken(), "a torn frame breaks the connection");
        let err = rt::timeout(Duration::from_secs(1), pending)
            .await
            .expect("the pending request fails at once")
            .unwrap_err();
        assert!(matches!(err, Error::Disconnected { .. }), "{err}");
        let err = conn.call(&meta, Duration::ZERO).await.unwrap_err();
        assert!(matches!(err, Error::Disconnected { .. }), "{err}");
        // The next call opens a new connection and sends a whole frame on it.
        let serve = async {
            let (mut second, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            let mut chunk = [0u8; 1024];
            loop {
                let n = second.read(&mut chunk).await.unwrap();
                assert!(n > 0, "a whole request frame arrives");
                got.extend_from_slice(&chunk[..n]);
                let (frames, _) = split_frames(&got);
                if let Some(&(api, id)) = frames.first() {
                    assert_eq!(api, ApiKey::Metadata as i16);
                    let mut out = Vec::new();
                    protocol::encode_response_frame(&mut out, id, Ok(&MetadataResponse::default()));
                    second.write_all(&out).await.unwrap();
                    return second;
                }
            }
        };
        let (answer, _second) = futures::join!(
            rt::timeout(Duration::from_secs(2), client.call(&meta)),
            rt::timeout(Duration::from_secs(2), serve)
        );
        answer.expect("answered on the new connection").unwrap();
        // The first connection carried the pending request, then part of the
        // huge one, then its end: nothing was written after the torn frame.
        let mut got = Vec::new();
        rt::timeout(Duration::from_secs(2), first.read_to_end(&mut got))
            .await
            .expect("the first connection was shut down")
            .unwrap();
        let (frames, rest) = split_frames(&got);
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].0, ApiKey::Metadata as i16);
        assert!(!rest.is_empty(), "part of the huge frame went out");
        assert_eq!(rest[4..6], (ApiKey::Produce as i16).to_be_bytes());
        assert!(rest.len() < 32 << 20, "the huge frame is incomplete");
    });
}

/// A caller that gives up on a request while its frame is half written (a
/// timeout around the call) leaves the stream torn: the connection fails.
#[test]
fn write_dropped_part_way_fails_the_connection() {
    use flume_client::lowlevel::Connection;
    use flume_rt as rt;
    rt::block_on(async {
        let listener = rt::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let conn = Connection::connect(&addr, ConnectionConfig::default())
            .await
            .unwrap();
        let (_peer, _) = listener.accept().await.unwrap();
        let gave_up = rt::timeout(
            Duration::from_millis(100),
            conn.call(&huge_produce(), Duration::ZERO),
        )
        .await;
        assert!(gave_up.is_none(), "the peer reads nothing");
        assert!(conn.is_broken(), "a torn frame breaks the connection");
    });
}

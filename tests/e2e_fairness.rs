//! Fair admission: no set of connections, however greedy, keeps a fresh
//! connection from being served. Parked long polls, group waits, huge frames
//! sent slowly and peers that never read their responses hold the memory of
//! what they wait for; a new connection's ordinary request is admitted anyway
//! (docs/internals.md, "Fair admission"). Correctness tests: deadlines are generous and the
//! figures are printed, not asserted.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use common::abuse::{
    abuser, kafka_join, parked_flume_fetches, parked_kafka_fetches, Abuse, Ports, Rng, ALL_ABUSES,
};
use flume_broker::budget::{MemoryUse, CONNECTION_RESERVE_BYTES};
use flume_broker::{Broker, BrokerConfig};
use flume_client::lowlevel::Client;
use flume_client::ConnectionConfig;
use flume_protocol::{self as protocol, ErrorCode};
use flume_rt as rt;

/// How long a fresh connection's request may take before the test calls it starved.
const SERVED_WITHIN: Duration = Duration::from_secs(10);

fn record(value: &[u8]) -> bytes::Bytes {
    let mut rec = Vec::new();
    protocol::record::encode(&mut rec, 0, 0, None, value, &[]);
    rec.into()
}

async fn produce(c: &Client, topic: &str, partition: i32, value: &[u8]) -> Result<i64> {
    let r = c
        .call(&protocol::ProduceRequest {
            entries: vec![protocol::ProduceEntry {
                topic: topic.into(),
                partition,
                records: record(value),
            }],
        })
        .await?;
    let res = r.results.first().context("a result")?;
    ensure!(res.error == ErrorCode::None, "produce: {:?}", res.error);
    Ok(res.spans.first().context("a span")?.base_offset)
}

/// Fills each of the topic's `partitions` with `per_partition` bytes of 128 KiB records.
async fn fill(addr: &str, topic: &str, partitions: i32, per_partition: usize) -> Result<()> {
    let c = Client::connect(addr, ConnectionConfig::default()).await?;
    let value = vec![b'x'; 128 * 1024];
    for p in 0..partitions {
        for _ in 0..per_partition / value.len() {
            produce(&c, topic, p, &value).await?;
        }
    }
    Ok(())
}

/// A fresh connection's produce and fetch of one small record, to `topic`
/// (which may not exist yet): how long each took.
async fn fresh_round_trip(addr: &str, topic: &str) -> Result<(Duration, Duration)> {
    let t = Instant::now();
    let c = rt::timeout(
        SERVED_WITHIN,
        Client::connect(addr, ConnectionConfig::default()),
    )
    .await
    .context("connect within the deadline")??;
    let at = rt::timeout(SERVED_WITHIN, produce(&c, topic, 0, b"fresh"))
        .await
        .with_context(|| format!("the fresh produce to {topic} starved"))??;
    let produced = t.elapsed();
    let t = Instant::now();
    let f = rt::timeout(
        SERVED_WITHIN,
        c.call(&protocol::FetchRequest {
            max_wait_ms: 1000,
            min_bytes: 1,
            max_bytes: 1 << 20,
            partitions: vec![protocol::FetchPartition {
                topic: topic.into(),
                partition: 0,
                offset: at,
                max_bytes: 1 << 20,
            }],
        }),
    )
    .await
    .with_context(|| format!("the fresh fetch from {topic} starved"))??;
    let fetched = t.elapsed();
    let p = f.partitions.first().context("a partition")?;
    ensure!(p.error == ErrorCode::None, "fetch: {:?}", p.error);
    let got: Vec<_> = protocol::record::RecordIter::new(&p.records)
        .map(|r| r.map(|r| r.key_value().map(|(_, v)| v.unwrap_or_default().to_vec())))
        .collect::<Result<_, _>>()?;
    ensure!(
        got.first().cloned().flatten().as_deref() == Some(&b"fresh"[..]),
        "fetched {got:?}"
    );
    Ok((produced, fetched))
}

/// Waits until the hogs hold the whole shared budget (their responses,
/// unread): without the reserve, no other connection is admitted then.
async fn wait_until_spent(usage: impl Fn() -> MemoryUse) {
    let t = Instant::now();
    common::wait_until(
        "the hogs spend the shared budget",
        Duration::from_secs(120),
        || {
            let u = usage();
            async move { u.shared >= u.limit }
        },
    )
    .await;
    eprintln!(
        "the shared budget was spent after {:?}: {:?}",
        t.elapsed(),
        usage()
    );
}

fn broker_config(dir: &std::path::Path) -> BrokerConfig {
    let mut c = common::config(dir);
    c.kafka_listen = Some("127.0.0.1:0".into());
    c
}

/// The starving scenario on the Flume port: a topic of 4 partitions holding
/// 16 MiB, 8 connections that each pipeline 64 FETCHes of all of it that can
/// never be satisfied (and never read what they are sent), then a fresh
/// connection produces one record (to that topic and to a new one) and
/// fetches it.
#[test]
fn parked_fetches_on_eight_connections_do_not_starve_a_fresh_one() -> Result<()> {
    let _alone = common::exclusive();
    rt::block_on(async {
        let dir = tempfile::tempdir()?;
        let cfg = broker_config(dir.path());
        let total = cfg.max_request_memory;
        let broker = Broker::start(cfg).await?;
        broker
            .engine()
            .records()
            .create_topic("hog", common::topic(4))?;
        let addr = broker.local_addr().to_string();
        fill(&addr, "hog", 4, 4 << 20).await?;
        let fetches = parked_flume_fetches("hog", 4);
        let mut hogs = Vec::new();
        for _ in 0..8 {
            let mut s = std::net::TcpStream::connect(&addr)?;
            std::io::Write::write_all(&mut s, &fetches)?;
            hogs.push(s);
        }
        // The fetches' min_bytes is clamped to what they can receive, so once
        // they have counted the 16 MiB they read it, and their responses pile
        // up unread: wait until they hold the whole shared budget.
        wait_until_spent(|| broker.request_memory()).await;
        let held = broker.request_memory();
        let (p1, f1) = fresh_round_trip(&addr, "hog").await?;
        let (p2, f2) = fresh_round_trip(&addr, "new-topic").await?;
        let after = broker.request_memory();
        eprintln!(
            "flume port: fresh produce {p1:?} / fetch {f1:?} (existing topic), {p2:?} / {f2:?} (new topic); \
             budget while parked {held:?}, after {after:?}"
        );
        // Within the shared budget, plus each connection's reserve and, per
        // hog connection, one read begun while there was room (16 MiB at most).
        let bound = total + 9 * CONNECTION_RESERVE_BYTES + 8 * (16 << 20);
        ensure!(
            after.peak <= bound,
            "request memory peaked at {} bytes, bound {bound}",
            after.peak
        );
        drop(hogs);
        broker.shutdown().await;
        Ok(())
    })
}

// ------------------------------------------------------------- Kafka listener

/// The same scenario on the Kafka port: 8 connections with parked Fetches of
/// 16 MiB (Kafka serves a connection's requests one at a time, so the rest
/// wait in its socket), 4 more with JoinGroups waiting for a rebalance, then
/// a fresh Kafka client (rskafka) produces and fetches.
#[test]
fn parked_kafka_fetches_and_group_waits_do_not_starve_a_fresh_kafka_client() -> Result<()> {
    let _alone = common::exclusive();
    let dir = tempfile::tempdir()?;
    let cfg = broker_config(dir.path());
    let total = cfg.max_request_memory;
    let broker = rt::block_on(Broker::start(cfg))?;
    broker
        .engine()
        .records()
        .create_topic("hog", common::topic(4))?;
    let addr = broker.local_addr().to_string();
    rt::block_on(fill(&addr, "hog", 4, 4 << 20))?;
    let kafka = broker.kafka_addr().context("kafka listener")?.to_string();
    let fetches = parked_kafka_fetches("hog", 4);
    let mut hogs = Vec::new();
    for _ in 0..8 {
        let mut s = std::net::TcpStream::connect(&kafka)?;
        std::io::Write::write_all(&mut s, &fetches)?;
        hogs.push(s);
    }
    // Members of a group that wait in JoinGroup: the first join of a member id
    // waits for the rebalance the others' joins start.
    for i in 0..4 {
        let mut s = std::net::TcpStream::connect(&kafka)?;
        std::io::Write::write_all(&mut s, &kafka_join("waiters", &format!("m-{i}")))?;
        hogs.push(s);
    }
    rt::block_on(wait_until_spent(|| {
        broker.kafka_request_memory().unwrap_or(MemoryUse {
            used: 0,
            shared: 0,
            peak: 0,
            shared_peak: 0,
            limit: 1,
        })
    }));
    let held = broker.kafka_request_memory().context("kafka budget")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (produced, fetched) = runtime.block_on(async {
        let t = Instant::now();
        let client = tokio::time::timeout(
            SERVED_WITHIN,
            rskafka::client::ClientBuilder::new(vec![kafka.clone()]).build(),
        )
        .await
        .context("a fresh Kafka client connects within the deadline")??;
        let pc = client
            .partition_client(
                "hog",
                0,
                rskafka::client::partition::UnknownTopicHandling::Error,
            )
            .await?;
        let rec = rskafka::record::Record {
            key: Some(b"k".to_vec()),
            value: Some(b"fresh".to_vec()),
            headers: BTreeMap::new(),
            timestamp: chrono::DateTime::from_timestamp_millis(1_700_000_000_000)
                .context("timestamp")?,
        };
        let offsets = tokio::time::timeout(
            SERVED_WITHIN,
            pc.produce(
                vec![rec],
                rskafka::client::partition::Compression::NoCompression,
            ),
        )
        .await
        .context("the fresh Kafka produce starved")??;
        let produced = t.elapsed();
        let at = *offsets.first().context("an offset")?;
        let t = Instant::now();
        let (records, _) =
            tokio::time::timeout(SERVED_WITHIN, pc.fetch_records(at, 1..1 << 20, 1000))
                .await
                .context("the fresh Kafka fetch starved")??;
        let fetched = t.elapsed();
        let first = records.first().context("the record fetched")?;
        ensure!(first.record.value.as_deref() == Some(&b"fresh"[..]));
        anyhow::Ok((produced, fetched))
    })?;
    let after = broker.kafka_request_memory().context("kafka budget")?;
    eprintln!(
        "kafka port: fresh connect+produce {produced:?}, fetch {fetched:?}; budget while parked {held:?}, after {after:?}"
    );
    let bound = total + 13 * CONNECTION_RESERVE_BYTES + 8 * (16 << 20);
    ensure!(
        after.peak <= bound,
        "kafka request memory peaked at {} bytes, bound {bound}",
        after.peak
    );
    drop(hogs);
    rt::block_on(broker.shutdown());
    Ok(())
}

// ------------------------------------------------------------- randomized mix

/// A normal client's work beside the abusers: records produced one at a time
/// through the SDK and through a Kafka client, each within a deadline, then
/// every acknowledged record read back; and a scrape over HTTP. Returns the
/// slowest produce.
async fn normal_client(ports: &Ports, rounds: usize) -> Result<Duration> {
    use flume_client::{PartitionConsumer, Producer, StartOffset};
    use futures::StreamExt;
    let producer = rt::timeout(SERVED_WITHIN, Producer::connect(&ports.flume))
        .await
        .context("the producer connects")??;
    let mut acked = BTreeMap::new();
    let mut slowest = Duration::ZERO;
    for i in 0..rounds {
        let t = Instant::now();
        let value = format!("normal-{i}");
        let meta = rt::timeout(
            SERVED_WITHIN,
            producer.send(
                "normal",
                Some(format!("k{}", i % 7).as_bytes()),
                value.as_bytes(),
            ),
        )
        .await
        .with_context(|| format!("send {i} starved"))??;
        slowest = slowest.max(t.elapsed());
        acked.insert((meta.partition, meta.offset), value);
    }
    // Every acknowledged record is there, in its place.
    let mut read = BTreeMap::new();
    for partition in 0..3 {
        let want = acked.keys().filter(|(p, _)| *p == partition).count();
        if want == 0 {
            continue;
        }
        let mut c =
            PartitionConsumer::connect(&ports.flume, "normal", partition, StartOffset::Earliest)
                .await?;
        while read.keys().filter(|(p, _)| *p == partition).count() < want {
            let r = rt::timeout(SERVED_WITHIN, c.next())
                .await
                .context("a consumer starved")?
                .context("the consumer ended")??;
            let value = String::from_utf8(r.payload().to_vec())?;
            read.insert((partition, i64::try_from(r.offset)?), value);
        }
    }
    ensure!(
        read == acked,
        "read back differs from what was acknowledged"
    );
    // A fresh Kafka client is served too.
    let kafka = ports.kafka.clone();
    std::thread::spawn(move || -> Result<()> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let client = tokio::time::timeout(
                SERVED_WITHIN,
                rskafka::client::ClientBuilder::new(vec![kafka]).build(),
            )
            .await??;
            let pc = client
                .partition_client(
                    "normal",
                    0,
                    rskafka::client::partition::UnknownTopicHandling::Error,
                )
                .await?;
            let rec = rskafka::record::Record {
                key: None,
                value: Some(b"kafka".to_vec()),
                headers: BTreeMap::new(),
                timestamp: chrono::DateTime::from_timestamp_millis(1_700_000_000_000)
                    .context("timestamp")?,
            };
            let at = tokio::time::timeout(
                SERVED_WITHIN,
                pc.produce(
                    vec![rec],
                    rskafka::client::partition::Compression::NoCompression,
                ),
            )
            .await??;
            let (got, _) = tokio::time::timeout(
                SERVED_WITHIN,
                pc.fetch_records(*at.first().context("offset")?, 1..1 << 20, 1000),
            )
            .await??;
            ensure!(got.first().and_then(|r| r.record.value.as_deref()) == Some(&b"kafka"[..]));
            Ok(())
        })
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the Kafka client thread panicked"))??;
    // And a scrape, though the HTTP slots are full of half heads.
    let mut s = rt::timeout(SERVED_WITHIN, rt::TcpStream::connect(&ports.http))
        .await
        .context("HTTP connect")??;
    futures::io::AsyncWriteExt::write_all(
        &mut s,
        b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await?;
    let mut reply = Vec::new();
    rt::timeout(
        SERVED_WITHIN,
        futures::io::AsyncReadExt::read_to_end(&mut s, &mut reply),
    )
    .await
    .context("the scrape starved")??;
    ensure!(
        reply.starts_with(b"HTTP/1.1 200"),
        "healthz: {:?}",
        String::from_utf8_lossy(&reply)
    );
    Ok(slowest)
}

/// A seeded mix of 12 abusive kinds of connection (each kind at least once):
/// parked fetches, huge frames sent slowly, peers that never read, reconnect
/// loops, Kafka parked fetches and group waits, HTTP half heads. A normal
/// client is served beside them, and every record it was acknowledged is
/// read back. `FLUME_TEST_SEED` replays a run.
#[test]
fn a_random_mix_of_abusive_connections_starves_no_normal_client() -> Result<()> {
    let _alone = common::exclusive();
    let seed = std::env::var("FLUME_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x0fa1_4ad0_u64);
    let mut rng = Rng(seed | 1);
    let dir = tempfile::tempdir()?;
    let mut cfg = broker_config(dir.path());
    cfg.http_listen = Some("127.0.0.1:0".into());
    let (total, conns) = (cfg.max_request_memory, 64usize);
    let broker = rt::block_on(Broker::start(cfg))?;
    broker
        .engine()
        .records()
        .create_topic("hog", common::topic(4))?;
    broker
        .engine()
        .records()
        .create_topic("normal", common::topic(3))?;
    let ports = Ports {
        flume: broker.local_addr().to_string(),
        kafka: broker.kafka_addr().context("kafka")?.to_string(),
        http: broker.http_addr().context("http")?.to_string(),
    };
    rt::block_on(fill(&ports.flume, "hog", 4, 4 << 20))?;
    let mut mix: Vec<Abuse> = ALL_ABUSES.to_vec();
    while mix.len() < 12 {
        let i = usize::try_from(rng.below(ALL_ABUSES.len() as u64))?;
        mix.push(ALL_ABUSES[i]);
    }
    eprintln!("seed {seed}: {mix:?}");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let threads: Vec<_> = mix
        .iter()
        .map(|a| abuser(*a, &ports, seed, stop.clone()))
        .collect();
    // Served while the abusers hold both shared budgets.
    rt::block_on(wait_until_spent(|| broker.request_memory()));
    rt::block_on(wait_until_spent(|| {
        broker.kafka_request_memory().unwrap_or(MemoryUse {
            used: 0,
            shared: 0,
            peak: 0,
            shared_peak: 0,
            limit: 1,
        })
    }));
    let slowest = rt::block_on(normal_client(&ports, 200));
    stop.store(true, std::sync::atomic::Ordering::Release);
    for t in threads {
        let _ = t.join();
    }
    let slowest = slowest?;
    let (flume, kafka) = (
        broker.request_memory(),
        broker.kafka_request_memory().context("kafka budget")?,
    );
    eprintln!("slowest normal produce {slowest:?}; flume budget {flume:?}; kafka budget {kafka:?}");
    // The shared budget, each connection's reserve, and per abusive connection
    // one read begun while there was room.
    let bound = total + conns * CONNECTION_RESERVE_BYTES + 30 * (16 << 20);
    ensure!(
        flume.peak <= bound && kafka.peak <= bound,
        "peaks past {bound}"
    );
    rt::block_on(broker.shutdown());
    Ok(())
}

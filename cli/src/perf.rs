//! `flume-cli perf`: whole-system throughput and latency.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::{Args, Subcommand};
use flume_client::{
    Admin, Client, ConnectionConfig, GroupConsumer, PartitionConsumer, Producer, ProducerConfig,
    SendRecord, StartOffset,
};
use serde_json::json;

#[derive(Debug, Subcommand)]
pub enum PerfCommand {
    /// Produce N records as fast as possible and report throughput and latency.
    Produce(ProduceArgs),
    /// Consume N records as fast as possible and report throughput.
    Consume(ConsumeArgs),
    /// Produce at a fixed rate while a group consumer reads: latency from send to delivery.
    E2e(E2eArgs),
}

#[derive(Debug, Args)]
pub struct E2eArgs {
    /// Broker address.
    #[arg(long, default_value = "localhost:9092")]
    broker: String,
    /// Topic (use a fresh one: the consumer starts at the end).
    #[arg(long)]
    topic: String,
    /// Records to send.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    records: u64,
    /// Records per second.
    #[arg(long, default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    rate: u64,
    /// Value size in bytes (at least 8: the send time travels in the value).
    #[arg(long, default_value_t = 100)]
    record_size: usize,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Broker address.
    #[arg(long, default_value = "localhost:9092")]
    broker: String,
    /// Topic.
    #[arg(long)]
    topic: String,
    /// Records to send.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    records: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    record_size: usize,
    /// Distinct keys (0: no keys).
    #[arg(long, default_value_t = 0)]
    key_cardinality: u64,
    /// Producer connections, each driven by its own task.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    producers: u64,
    /// Linger before sending a batch (ms).
    #[arg(long, default_value_t = 0)]
    linger_ms: u64,
    /// Largest batch per partition (bytes).
    #[arg(long, default_value_t = 1024 * 1024)]
    batch_bytes: usize,
    /// Records in flight per producer (ignored with --sync).
    #[arg(long, default_value_t = 20_000)]
    window: usize,
    /// One record per round trip: wait for each acknowledgement before the next send.
    #[arg(long)]
    sync: bool,
    /// Spin this many microseconds reading for a response before parking the
    /// thread (the client's `ConnectionConfig::busy_poll`; 0: never spin).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    busy_poll_us: u64,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// Broker address.
    #[arg(long, default_value = "localhost:9092")]
    broker: String,
    /// Topic.
    #[arg(long)]
    topic: String,
    /// Records to read.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Read as a member of this group (default: every partition from the start).
    #[arg(long)]
    group: Option<String>,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
}

pub async fn run(cmd: PerfCommand) -> Result<()> {
    match cmd {
        PerfCommand::Produce(a) => produce(a).await,
        PerfCommand::Consume(a) => consume(a).await,
        PerfCommand::E2e(a) => e2e(a).await,
    }
}

fn progress(
    done: Arc<AtomicU64>,
    total: u64,
    start: Instant,
) -> Option<flume_client::rt::Task<()>> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    Some(flume_client::rt::spawn(async move {
        loop {
            flume_client::rt::sleep(Duration::from_millis(500)).await;
            let d = done.load(Ordering::Relaxed);
            let secs = start.elapsed().as_secs_f64();
            eprint!(
                "\r{d}/{total} records, {:.0} records/s   ",
                d as f64 / secs.max(1e-9)
            );
            if d >= total {
                eprintln!();
                return;
            }
        }
    }))
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)] as f64 / 1000.0
}

async fn produce(a: ProduceArgs) -> Result<()> {
    if a.records == 0 {
        bail!("--records must be at least 1");
    }
    let value = Bytes::from(vec![b'x'; a.record_size]);
    let config = ProducerConfig {
        linger: Duration::from_millis(a.linger_ms),
        batch_max_bytes: a.batch_bytes.max(1),
        connection: ConnectionConfig {
            busy_poll: Duration::from_micros(a.busy_poll_us),
            ..ConnectionConfig::default()
        },
        ..ProducerConfig::default()
    };
    let mut producers = Vec::new();
    for _ in 0..a.producers {
        producers.push(Arc::new(
            Producer::with_config(&a.broker, config.clone())
                .await
                .context("cannot reach the broker")?,
        ));
    }
    // Warm up: create the topic and the connections.
    producers[0]
        .send(&a.topic, None, b"warmup")
        .await
        .map_err(crate::commands::describe)?;
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let bar = progress(Arc::clone(&done), a.records, start);
    let mut tasks = Vec::new();
    for (i, producer) in producers.iter().enumerate() {
        let n = a.records / a.producers + u64::from((i as u64) < a.records % a.producers);
        let producer = Arc::clone(producer);
        let topic = a.topic.clone();
        let value = value.clone();
        let done = Arc::clone(&done);
        let (sync, window, keys) = (a.sync, a.window.max(1), a.key_cardinality);
        let work = async move {
            let mut lat = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
            let mut inflight = std::collections::VecDeque::with_capacity(window);
            for j in 0..n {
                let rec = SendRecord {
                    topic: topic.clone(),
                    key: (keys > 0).then(|| Bytes::from(format!("key-{}", (j + i as u64) % keys))),
                    value: value.clone(),
                    ..SendRecord::default()
                };
                if sync {
                    let t0 = Instant::now();
                    producer.send_record(rec).await?;
                    lat.push(t0.elapsed().as_micros() as u64);
                    done.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                // Latency is sampled (one record in 8) so the clock reads do not
                // slow down what is being measured.
                let t0 = (j % 8 == 0).then(Instant::now);
                let fut = producer.send_nowait(rec).await?;
                inflight.push_back((t0, fut));
                while inflight.len() >= window {
                    if let Some((t, f)) = inflight.pop_front() {
                        f.await?;
                        if let Some(t) = t {
                            lat.push(t.elapsed().as_micros() as u64);
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            // The remaining acknowledgements arrive in order: waiting for each in turn measures each.
            for (t, f) in inflight {
                f.await?;
                if let Some(t) = t {
                    lat.push(t.elapsed().as_micros() as u64);
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<Vec<u64>, flume_client::Error>(lat)
        };
        // One producer runs on this thread, which also drives the I/O reactor: a
        // response then wakes the task that waits for it directly.
        tasks.push(if a.producers == 1 {
            futures::future::Either::Left(work)
        } else {
            futures::future::Either::Right(flume_client::rt::spawn(work))
        });
    }
    let mut lat = Vec::with_capacity(usize::try_from(a.records).unwrap_or(0));
    for t in tasks {
        lat.extend(t.await.map_err(crate::commands::describe)?);
    }
    let secs = start.elapsed().as_secs_f64();
    if let Some(b) = bar {
        b.cancel().await;
        eprintln!();
    }
    for p in producers {
        p.close().await;
    }
    lat.sort_unstable();
    let sent = done.load(Ordering::Relaxed);
    let n = sent as f64;
    let mb = n * a.record_size as f64 / 1e6;
    let summary = json!({
        "records": sent,
        "latency_samples": lat.len(),
        "record_size": a.record_size,
        "seconds": secs,
        "records_per_s": n / secs,
        "mb_per_s": mb / secs,
        "mb": mb,
        "latency_ms": {
            "p50": percentile(&lat, 0.50),
            "p99": percentile(&lat, 0.99),
            "p999": percentile(&lat, 0.999),
            "max": percentile(&lat, 1.0),
        },
        "producers": a.producers,
        "sync": a.sync,
        "busy_poll_us": a.busy_poll_us,
    });
    if a.json {
        println!("{summary}");
    } else {
        println!(
            "{} records ({:.1} MB) in {:.2} s: {:.0} records/s, {:.1} MB/s; latency ms p50 {:.3} p99 {:.3} p99.9 {:.3} max {:.3}",
            sent,
            mb,
            secs,
            n / secs,
            mb / secs,
            percentile(&lat, 0.5),
            percentile(&lat, 0.99),
            percentile(&lat, 0.999),
            percentile(&lat, 1.0)
        );
    }
    Ok(())
}

async fn consume(a: ConsumeArgs) -> Result<()> {
    let done = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let start;
    if let Some(group) = &a.group {
        let mut c = GroupConsumer::builder(&a.broker, group)
            .topic(&a.topic)
            .build()
            .await
            .map_err(crate::commands::describe)?;
        start = Instant::now();
        let bar = progress(Arc::clone(&done), a.records, start);
        while done.load(Ordering::Relaxed) < a.records {
            let r = c
                .recv()
                .await
                .context("consumer stopped")?
                .map_err(crate::commands::describe)?;
            bytes.fetch_add(r.value.len() as u64, Ordering::Relaxed);
            done.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(b) = bar {
            b.cancel().await;
        }
        c.close().await?;
    } else {
        let admin = Admin::connect(&a.broker)
            .await
            .context("cannot reach the broker")?;
        let t = admin
            .topics(std::slice::from_ref(&a.topic))
            .await?
            .into_iter()
            .next();
        let Some(t) = t.filter(|t| t.error.is_ok()) else {
            bail!("topic {} does not exist", a.topic);
        };
        let available: i64 = t.partitions.iter().map(|p| p.log_end - p.log_start).sum();
        if available < i64::try_from(a.records).unwrap_or(i64::MAX) {
            bail!(
                "topic {} holds {available} records, fewer than --records {}",
                a.topic,
                a.records
            );
        }
        start = Instant::now();
        let bar = progress(Arc::clone(&done), a.records, start);
        let mut tasks = Vec::new();
        for p in t.partitions {
            let client = Arc::new(Client::connect(&a.broker, ConnectionConfig::default()).await?);
            let mut c = PartitionConsumer::with_client(
                client,
                &a.topic,
                p.partition,
                StartOffset::Earliest,
                flume_client::FetchConfig::default(),
            );
            let (done, bytes, total, end) =
                (Arc::clone(&done), Arc::clone(&bytes), a.records, p.log_end);
            tasks.push(flume_client::rt::spawn(async move {
                while done.load(Ordering::Relaxed) < total
                    && c.position()
                        .is_none_or(|pos| i64::try_from(pos).unwrap_or(i64::MAX) < end)
                {
                    let batch = c.poll_batch().await?;
                    let b: u64 = batch.iter().map(|r| r.value.len() as u64).sum();
                    bytes.fetch_add(b, Ordering::Relaxed);
                    done.fetch_add(batch.len() as u64, Ordering::Relaxed);
                }
                Ok::<(), flume_client::Error>(())
            }));
        }
        for t in tasks {
            t.await.map_err(crate::commands::describe)?;
        }
        if let Some(b) = bar {
            b.cancel().await;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let n = done.load(Ordering::Relaxed) as f64;
    let mb = bytes.load(Ordering::Relaxed) as f64 / 1e6;
    if a.json {
        println!(
            "{}",
            json!({"records": n as u64, "seconds": secs, "records_per_s": n / secs, "mb_per_s": mb / secs, "mb": mb})
        );
    } else {
        println!(
            "{} records ({:.1} MB of values) in {:.2} s: {:.0} records/s, {:.1} MB/s",
            n as u64,
            mb,
            secs,
            n / secs,
            mb / secs
        );
    }
    Ok(())
}

async fn e2e(a: E2eArgs) -> Result<()> {
    let size = a.record_size.max(8);
    let group = format!("perf-e2e-{}", std::process::id());
    let mut consumer = GroupConsumer::builder(&a.broker, &group)
        .topic(&a.topic)
        .start(StartOffset::Latest)
        .auto_commit(false)
        .max_wait(Duration::from_millis(500))
        .build()
        .await
        .map_err(crate::commands::describe)
        .context("cannot join the group")?;
    let producer = Producer::connect(&a.broker)
        .await
        .context("cannot reach the broker")?;
    let epoch = Instant::now();
    let total = a.records;
    let reader = flume_client::rt::spawn(async move {
        let mut lat = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
        while (lat.len() as u64) < total {
            let Some(r) = consumer.recv().await else {
                break;
            };
            let r = r?;
            let mut sent = [0u8; 8];
            sent.copy_from_slice(&r.value[..8]);
            let now = epoch.elapsed().as_micros() as u64;
            lat.push(now.saturating_sub(u64::from_be_bytes(sent)));
        }
        consumer.close().await?;
        Ok::<Vec<u64>, flume_client::Error>(lat)
    });
    let interval = Duration::from_secs_f64(1.0 / a.rate as f64);
    let topic = a.topic.clone();
    // The paced sender runs as a task like the reader, so with one executor thread
    // (a pinned client) handing a record to the producer wakes no other thread.
    let sender = flume_client::rt::spawn(async move {
        let start = Instant::now();
        let mut pending = std::collections::VecDeque::new();
        for i in 0..total {
            // Open loop: each record leaves at its scheduled time, however long the others take.
            let due = start + interval.mul_f64(i as f64);
            let now = Instant::now();
            if due > now {
                flume_client::rt::sleep(due - now).await;
            }
            let mut value = vec![b'x'; size];
            value[..8].copy_from_slice(&(epoch.elapsed().as_micros() as u64).to_be_bytes());
            let rec = SendRecord {
                topic: topic.clone(),
                value: value.into(),
                ..SendRecord::default()
            };
            pending.push_back(producer.send_nowait(rec).await?);
            while pending.len() > 10_000 {
                if let Some(f) = pending.pop_front() {
                    f.await?;
                }
            }
        }
        for f in pending {
            f.await?;
        }
        let sent_secs = start.elapsed().as_secs_f64();
        producer.close().await;
        Ok::<f64, flume_client::Error>(sent_secs)
    });
    let sent_secs = sender.await.map_err(crate::commands::describe)?;
    let mut lat = flume_client::rt::timeout(Duration::from_secs(60), reader)
        .await
        .context("the consumer did not receive every record within 60 s")?
        .map_err(crate::commands::describe)?;
    lat.sort_unstable();
    let summary = json!({
        "records": lat.len(),
        "rate_target": a.rate,
        "rate_achieved": lat.len() as f64 / sent_secs,
        "latency_ms": {
            "p50": percentile(&lat, 0.5),
            "p99": percentile(&lat, 0.99),
            "p999": percentile(&lat, 0.999),
            "max": percentile(&lat, 1.0),
        },
    });
    if a.json {
        println!("{summary}");
    } else {
        println!(
            "{} records at {:.0}/s, produce to group consumer latency ms: p50 {:.3} p99 {:.3} p99.9 {:.3} max {:.3}",
            lat.len(),
            lat.len() as f64 / sent_secs,
            percentile(&lat, 0.5),
            percentile(&lat, 0.99),
            percentile(&lat, 0.999),
            percentile(&lat, 1.0)
        );
    }
    Ok(())
}

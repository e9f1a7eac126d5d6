//! `flume-cli perf share`: a queue's throughput. C share consumers of one
//! group (explicit acknowledgement: every record accepted on its own) take
//! N records produced while they run: records/s from the first record sent
//! to the last one accepted, and each consumer's share. Records are
//! produced after every consumer polled once, so a new group (which starts
//! at the log end) sees all of them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use flume_client::{AckMode, Producer, ProducerConfig, ProducerRecord, ShareConsumer};
use serde_json::json;

use crate::args::perf::ShareArgs;
use crate::common::describe;

/// Most produce requests awaited at once.
const WINDOW: usize = 10_000;
/// A run with no record accepted for this long stops.
const IDLE: Duration = Duration::from_secs(30);

pub async fn run(a: ShareArgs) -> Result<()> {
    let group = a
        .group
        .clone()
        .unwrap_or_else(|| format!("perf-share-{}", std::process::id()));
    let accepted = Arc::new(AtomicU64::new(0));
    let consumers = join(&a, &group).await?;
    let tasks = consumers
        .into_iter()
        .map(|c| flume_rt::spawn(accept(c, Arc::clone(&accepted), a.records)))
        .collect::<Vec<_>>();
    let (start, produced_in) = produce(&a).await?;
    let mut per = Vec::new();
    let mut failure = None;
    for t in tasks {
        let (n, r) = t.await;
        per.push(n);
        if let Err(e) = r {
            failure.get_or_insert(e);
        }
    }
    report(
        &a,
        start,
        produced_in,
        accepted.load(Ordering::Relaxed),
        &per,
        failure,
    )
}

/// --consumers members of `group`, each polled once (which makes the
/// group's share-partitions, at the log end).
async fn join(a: &ShareArgs, group: &str) -> Result<Vec<ShareConsumer>> {
    let addr = &a.at.broker.addr;
    let mut consumers = Vec::new();
    for i in 0..a.consumers {
        let mut c = ShareConsumer::builder(addr, group)
            .connection(a.at.broker.connection()?)
            .subscribe([a.at.topic.clone()])
            .ack_mode(AckMode::Explicit)
            .max_records(usize::try_from(a.max_records)?)
            .max_wait(Duration::from_millis(100))
            .client_id(&format!("perf-share-{i}"))
            .build()
            .await
            .map_err(describe)
            .context("cannot join the share group")?;
        // The first poll makes the group's share-partitions (at the log end).
        let first = c.poll().await.map_err(describe)?;
        if !first.is_empty() {
            bail!("share group {group} already has records to read: use a new --group");
        }
        consumers.push(c);
    }
    Ok(consumers)
}

/// One consumer's task: accepts records one by one until `total` are
/// accepted in all, then commits and leaves: how many were its own, and
/// what stopped it.
async fn accept(mut c: ShareConsumer, accepted: Arc<AtomicU64>, total: u64) -> (u64, Result<()>) {
    let mut mine = 0u64;
    let mut last = Instant::now();
    while accepted.load(Ordering::Relaxed) < total {
        let got = match flume_rt::timeout(IDLE, c.poll()).await {
            Some(Ok(got)) => got,
            Some(Err(e)) => return (mine, Err(anyhow::Error::from(e))),
            None => {
                return (
                    mine,
                    Err(anyhow::anyhow!("no poll answered for {} s", IDLE.as_secs())),
                )
            }
        };
        if got.is_empty() {
            if last.elapsed() > IDLE {
                return (
                    mine,
                    Err(anyhow::anyhow!("no record for {} s", IDLE.as_secs())),
                );
            }
            continue;
        }
        last = Instant::now();
        for r in &got {
            r.accept();
        }
        mine += got.len() as u64;
        accepted.fetch_add(got.len() as u64, Ordering::Relaxed);
    }
    // The last acknowledgements go now, then the member leaves.
    let r = match c.commit().await {
        Ok(_) => c.close().await.map_err(anyhow::Error::from),
        Err(e) => Err(anyhow::Error::from(e)),
    };
    (mine, r)
}

/// Produces the --records records (while the consumers run): when the first
/// went (the run's clock starts then), and the seconds it took.
async fn produce(a: &ShareArgs) -> Result<(Instant, f64)> {
    let total = a.records;
    let producer = Producer::with_config(
        &a.at.broker.addr,
        ProducerConfig::default().connection(a.at.broker.connection()?),
    )
    .await
    .context("cannot reach the broker")?;
    let value = Bytes::from(vec![b'x'; usize::try_from(a.record_size)?]);
    let start = Instant::now();
    let mut inflight = std::collections::VecDeque::new();
    for _ in 0..total {
        let f = producer
            .enqueue(ProducerRecord::new(a.at.topic.clone(), value.clone()))
            .await
            .map_err(describe)?;
        inflight.push_back(f);
        if inflight.len() >= WINDOW {
            if let Some(f) = inflight.pop_front() {
                f.await.map_err(describe)?;
            }
        }
    }
    while let Some(f) = inflight.pop_front() {
        f.await.map_err(describe)?;
    }
    Ok((start, start.elapsed().as_secs_f64()))
}

/// The summary, as a line or one JSON object; the error that stopped a
/// consumer, if one did.
fn report(
    a: &ShareArgs,
    start: Instant,
    produced_in: f64,
    n: u64,
    per: &[u64],
    failure: Option<anyhow::Error>,
) -> Result<()> {
    let total = a.records;
    let secs = start.elapsed().as_secs_f64();
    if a.summary.json {
        println!(
            "{}",
            json!({"records": n, "consumers": a.consumers, "complete": failure.is_none() && n >= total,
                   "seconds": secs, "records_per_s": n as f64 / secs, "produce_seconds": produced_in,
                   "per_consumer": per})
        );
    } else {
        println!(
            "{n} records accepted one by one by {} share consumers in {secs:.2} s: {:.0} records/s (produced in {produced_in:.2} s); per consumer {per:?}",
            a.consumers,
            n as f64 / secs
        );
    }
    match failure {
        Some(e) => Err(e.context(format!("perf share stopped after {n} records"))),
        None => Ok(()),
    }
}

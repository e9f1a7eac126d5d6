//! `flume-cli perf consume`: N records as fast as possible; throughput.
//! Phases: check the topic holds enough (`available`), read as a group
//! member (`read_group`) or every partition at once (`read_partitions`),
//! print the summary (`report`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use flume_client::{lowlevel::Client, Admin, GroupConsumer, PartitionConsumer, StartOffset};
use flume_protocol::PartitionMetadata;
use serde_json::json;

use super::common::{end_progress, progress};
use crate::args::perf::ConsumeArgs;
use crate::common::describe;

/// With --group: stop when no record arrives for this long.
const GROUP_IDLE: Duration = Duration::from_secs(10);

/// Records and bytes of values read so far.
struct Counts {
    done: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
}

pub async fn run(a: ConsumeArgs) -> Result<()> {
    let counts = Counts {
        done: Arc::new(AtomicU64::new(0)),
        bytes: Arc::new(AtomicU64::new(0)),
    };
    // The admin connection stays open until the run ends.
    let (_admin, partitions) = available(&a).await?;
    let (start, failure) = if let Some(group) = &a.group {
        read_group(&a, group, &counts).await?
    } else {
        read_partitions(&a, partitions, &counts).await?
    };
    report(&a, start, failure, &counts)
}

/// The topic's partitions, once it is known to hold --records records to
/// read: everything, or for a group what follows its commits.
async fn available(a: &ConsumeArgs) -> Result<(Admin, Vec<PartitionMetadata>)> {
    let admin = Admin::connect_with(&a.at.broker.addr, a.at.broker.connection()?)
        .await
        .context("cannot reach the broker")?;
    let t = admin
        .topics(std::slice::from_ref(&a.at.topic))
        .await
        .map_err(describe)?
        .into_iter()
        .next();
    let Some(t) = t.filter(|t| t.error.is_ok()) else {
        bail!("topic {} does not exist", a.at.topic);
    };
    // What there is to read: everything, or for a group what follows its commits.
    let available: i64 = match &a.group {
        None => t.partitions.iter().map(|p| p.log_end - p.log_start).sum(),
        Some(g) => admin
            .group_offsets(g, std::slice::from_ref(&a.at.topic))
            .await
            .map_err(describe)?
            .iter()
            .map(flume_protocol::OffsetFetchPartition::lag)
            .sum(),
    };
    if available < i64::try_from(a.records).unwrap_or(i64::MAX) {
        bail!(
            "topic {} holds {available} records{}, fewer than --records {}",
            a.at.topic,
            if a.group.is_some() {
                " after the group's committed offsets"
            } else {
                ""
            },
            a.records
        );
    }
    Ok((admin, t.partitions))
}

/// Reads as a member of `group`: when the clock started, and what stopped
/// the run early.
async fn read_group(
    a: &ConsumeArgs,
    group: &str,
    counts: &Counts,
) -> Result<(Instant, Option<anyhow::Error>)> {
    let Counts { done, bytes } = counts;
    let mut failure: Option<anyhow::Error> = None;
    let mut c = GroupConsumer::builder(&a.at.broker.addr, group)
        .connection(a.at.broker.connection()?)
        .topic(&a.at.topic)
        .build()
        .await
        .map_err(describe)?;
    let start = Instant::now();
    let bar = progress(Arc::clone(done), a.records, start);
    while done.load(Ordering::Relaxed) < a.records {
        // Another consumer of the topic (or of the group) can take records counted as
        // available: stop after a quiet spell instead of waiting forever.
        let r = match flume_rt::timeout(GROUP_IDLE, c.recv()).await {
            None => {
                failure = Some(anyhow::anyhow!(
                    "no record for {} s after {} of --records {}",
                    GROUP_IDLE.as_secs(),
                    done.load(Ordering::Relaxed),
                    a.records
                ));
                break;
            }
            Some(None) => {
                failure = Some(anyhow::anyhow!("consumer stopped"));
                break;
            }
            Some(Some(Err(e))) => {
                failure = Some(describe(e));
                break;
            }
            Some(Some(Ok(r))) => r,
        };
        bytes.fetch_add(r.payload().len() as u64, Ordering::Relaxed);
        done.fetch_add(1, Ordering::Relaxed);
    }
    end_progress(bar).await;
    if failure.is_none() {
        c.close().await?;
    }
    Ok((start, failure))
}

/// Reads every partition from its start, one task each, until --records in
/// all: when the clock started, and what stopped the run early.
async fn read_partitions(
    a: &ConsumeArgs,
    partitions: Vec<PartitionMetadata>,
    counts: &Counts,
) -> Result<(Instant, Option<anyhow::Error>)> {
    let Counts { done, bytes } = counts;
    let mut failure: Option<anyhow::Error> = None;
    let start = Instant::now();
    let bar = progress(Arc::clone(done), a.records, start);
    let mut tasks = Vec::new();
    // Records still to be counted: each task claims what it read from this, so the
    // run stops at exactly --records however the partitions' batches fall.
    let left = Arc::new(AtomicU64::new(a.records));
    for p in partitions {
        let mut c = if a.at.broker.is_kafka() {
            PartitionConsumer::connect_with(
                &a.at.broker.addr,
                &a.at.topic,
                p.partition,
                StartOffset::Earliest,
                flume_client::FetchConfig::default(),
                a.at.broker.connection()?,
            )
            .await?
        } else {
            let client =
                Arc::new(Client::connect(&a.at.broker.addr, a.at.broker.connection()?).await?);
            PartitionConsumer::with_client(
                client,
                &a.at.topic,
                p.partition,
                StartOffset::Earliest,
                flume_client::FetchConfig::default(),
            )
        };
        let (done, bytes, left, end) = (
            Arc::clone(done),
            Arc::clone(bytes),
            Arc::clone(&left),
            p.log_end,
        );
        tasks.push(flume_rt::spawn(async move {
            while left.load(Ordering::Relaxed) > 0
                && c.position()
                    .is_none_or(|pos| i64::try_from(pos).unwrap_or(i64::MAX) < end)
            {
                let batch = c.poll_batch().await?;
                let want = batch.len() as u64;
                let claimed = match left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| {
                    Some(l.saturating_sub(want))
                }) {
                    Ok(before) | Err(before) => before.min(want),
                };
                let b: u64 = batch
                    .iter()
                    .take(usize::try_from(claimed).unwrap_or(usize::MAX))
                    .map(|r| r.payload().len() as u64)
                    .sum();
                bytes.fetch_add(b, Ordering::Relaxed);
                done.fetch_add(claimed, Ordering::Relaxed);
            }
            Ok::<(), flume_client::Error>(())
        }));
    }
    for t in tasks {
        if let Err(e) = t.await {
            failure.get_or_insert(describe(e));
        }
    }
    end_progress(bar).await;
    Ok((start, failure))
}

/// The summary, as a line or one JSON object; the error that stopped the
/// run, if one did.
fn report(
    a: &ConsumeArgs,
    start: Instant,
    failure: Option<anyhow::Error>,
    counts: &Counts,
) -> Result<()> {
    let Counts { done, bytes } = counts;
    let secs = start.elapsed().as_secs_f64();
    let n = done.load(Ordering::Relaxed) as f64;
    let mb = bytes.load(Ordering::Relaxed) as f64 / 1e6;
    if a.summary.json {
        println!(
            "{}",
            json!({"records": n as u64, "complete": failure.is_none(), "seconds": secs, "records_per_s": n / secs, "mb_per_s": mb / secs, "mb": mb})
        );
    } else {
        println!(
            "{}{} records ({:.1} MB of values) in {:.2} s: {:.0} records/s, {:.1} MB/s",
            if failure.is_some() {
                "PARTIAL (stopped by the error below): "
            } else {
                ""
            },
            n as u64,
            mb,
            secs,
            n / secs,
            mb / secs
        );
    }
    match failure {
        Some(e) => Err(e.context(format!("perf consume stopped after {} records", n as u64))),
        None => Ok(()),
    }
}

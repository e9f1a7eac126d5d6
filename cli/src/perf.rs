//! `flume-cli perf`: whole-system throughput and latency.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use flume_client::{
    lowlevel::Client, Admin, GroupConsumer, PartitionConsumer, Producer, ProducerConfig,
    ProducerRecord, StartOffset,
};
use serde_json::json;

use crate::args::perf::{ConsumeArgs, E2eArgs, ProduceArgs};
use crate::common::describe;

pub mod groups;
pub mod share;

/// Progress on stderr: on a terminal one line rewritten twice a second; otherwise
/// (a log file, CI) a new line every few seconds.
fn progress(done: Arc<AtomicU64>, total: u64, start: Instant) -> Option<flume_rt::Task<()>> {
    let tty = std::io::stderr().is_terminal();
    let every = if tty {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(PROGRESS_SECS)
    };
    Some(flume_rt::spawn(async move {
        loop {
            flume_rt::sleep(every).await;
            let d = done.load(Ordering::Relaxed);
            let secs = start.elapsed().as_secs_f64();
            let rate = d as f64 / secs.max(1e-9);
            if tty {
                eprint!("\r{d}/{total} records, {rate:.0} records/s   ");
            } else {
                eprintln!("progress: {d}/{total} records in {secs:.0} s, {rate:.0} records/s");
            }
            if d >= total {
                if tty {
                    eprintln!();
                }
                return;
            }
        }
    }))
}

/// Seconds between progress lines when stderr is not a terminal.
const PROGRESS_SECS: u64 = 5;

/// Stops the progress line, ending a terminal's rewritten line.
async fn end_progress(bar: Option<flume_rt::Task<()>>) {
    if let Some(b) = bar {
        b.cancel().await;
        if std::io::stderr().is_terminal() {
            eprintln!();
        }
    }
}

pub fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)] as f64 / 1000.0
}

/// One in this many records is timed when sends are pipelined.
const SAMPLE_EVERY: u64 = 8;

/// `perf produce` looks for acknowledgements that have arrived once every
/// this many records it sends (a look costs about as much as a send).
const ACK_CHECK_EVERY: u64 = 256;

/// Where `perf produce --topics-spread/--partitions-spread` sends record `j`.
#[derive(Debug, Clone)]
struct Spread {
    topic: String,
    topics: u64,
    partitions: u64,
}

impl Spread {
    fn target(&self, j: u64) -> (String, Option<i32>) {
        let topic = if self.topics > 0 {
            format!("{}-{}", self.topic, j % self.topics)
        } else {
            self.topic.clone()
        };
        let partition = (self.partitions > 0).then(|| {
            let p = (j / self.topics.max(1)) % self.partitions;
            i32::try_from(p).unwrap_or(i32::MAX)
        });
        (topic, partition)
    }
}

/// `rec` with `key`, when there is one.
fn with_key(rec: ProducerRecord, key: Option<Bytes>) -> ProducerRecord {
    match key {
        Some(k) => rec.key(k),
        None => rec,
    }
}

/// `rec` sent to `partition`, when one is given.
fn with_partition(rec: ProducerRecord, partition: Option<i32>) -> ProducerRecord {
    match partition {
        Some(p) => rec.partition(p),
        None => rec,
    }
}

pub async fn produce(a: ProduceArgs) -> Result<()> {
    if a.records == 0 {
        bail!("--records must be at least 1");
    }
    let value = Bytes::from(vec![b'x'; usize::try_from(a.record_size)?]);
    let config = a.kafka.apply(
        ProducerConfig::default()
            .linger(Duration::from_millis(a.linger_ms))
            .batch_max_bytes(usize::try_from(a.batch_bytes)?)
            .max_in_flight(usize::try_from(a.max_in_flight)?)
            .connection(a.at.broker.connection()?.busy_poll(a.busy_poll_us)),
    );
    let mut producers = Vec::new();
    for _ in 0..a.producers {
        producers.push(Arc::new(
            Producer::with_config(&a.at.broker.addr, config.clone())
                .await
                .context("cannot reach the broker")?,
        ));
    }
    // The first of the N records goes alone, before the clock starts: it creates the
    // topic if needed and warms the connection. It counts as one of the N (no extra
    // record lands in the topic) but not in the timing.
    let spread = Spread {
        topic: a.at.topic.clone(),
        topics: a.topics_spread,
        partitions: a.partitions_spread,
    };
    let (topic0, partition0) = spread.target(0);
    producers[0]
        .send_record(with_partition(
            with_key(
                ProducerRecord::new(topic0, value.clone()),
                (a.key_cardinality > 0).then(|| Bytes::from("key-0")),
            ),
            partition0,
        ))
        .await
        .map_err(describe)?;
    let timed = a.records - 1;
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let bar = progress(Arc::clone(&done), timed, start);
    let mut tasks = Vec::new();
    let window = match usize::try_from(a.window)? {
        0 => usize::MAX,
        n => n,
    };
    for (i, producer) in producers.iter().enumerate() {
        let i = i as u64;
        let n = timed / a.producers + u64::from(i < timed % a.producers);
        let producer = Arc::clone(producer);
        let spread = spread.clone();
        let value = value.clone();
        let done = Arc::clone(&done);
        let (sync, keys, producers_n) = (a.sync, a.key_cardinality, a.producers);
        let work = async move {
            let mut lat = Vec::with_capacity(usize::try_from(n / SAMPLE_EVERY + 1).unwrap_or(0));
            let mut inflight = std::collections::VecDeque::with_capacity(window.min(1 << 16));
            // Latencies measured so far are kept when the run fails half-way.
            let run = async {
                // An acknowledged record: counted, and its latency kept when it was timed.
                let mut acked = |t: Option<Instant>| {
                    if let Some(t) = t {
                        lat.push(t.elapsed().as_micros() as u64);
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                };
                for j in 0..n {
                    let (topic, partition) = spread.target(j * producers_n + i + 1);
                    let rec = with_partition(
                        with_key(
                            ProducerRecord::new(topic, value.clone()),
                            (keys > 0).then(|| Bytes::from(format!("key-{}", (j + 1 + i) % keys))),
                        ),
                        partition,
                    );
                    if sync {
                        let t0 = Instant::now();
                        producer.send_record(rec).await?;
                        acked(Some(t0));
                        continue;
                    }
                    // Latency is sampled (one record in SAMPLE_EVERY) so the clock reads do
                    // not slow down what is being measured.
                    let t0 = (j % SAMPLE_EVERY == 0).then(Instant::now);
                    let fut = producer.enqueue(rec).await?;
                    inflight.push_back((t0, fut));
                    // Acknowledgements that have arrived are taken every
                    // ACK_CHECK_EVERY records (a failure stops the run soon, and
                    // records acknowledged are not held); past the window, the
                    // oldest is waited for.
                    let check = j % ACK_CHECK_EVERY == 0;
                    loop {
                        let full = inflight.len() >= window;
                        if !full && !check {
                            break;
                        }
                        let Some((t, f)) = inflight.front_mut() else {
                            break;
                        };
                        let outcome = if full {
                            Some(f.await)
                        } else {
                            futures::FutureExt::now_or_never(f)
                        };
                        let Some(outcome) = outcome else { break };
                        outcome?;
                        acked(*t);
                        inflight.pop_front();
                    }
                }
                // The remaining acknowledgements arrive in order: waiting for each in turn measures each.
                while let Some((t, f)) = inflight.pop_front() {
                    f.await?;
                    acked(t);
                }
                Ok::<(), flume_client::Error>(())
            };
            let r = run.await;
            (lat, r.err())
        };
        // One producer runs on this thread, which also drives the I/O reactor: a
        // response then wakes the task that waits for it directly.
        tasks.push(if a.producers == 1 {
            futures::future::Either::Left(work)
        } else {
            futures::future::Either::Right(flume_rt::spawn(work))
        });
    }
    let mut lat = Vec::new();
    let mut failure = None;
    for t in tasks {
        let (l, e) = t.await;
        lat.extend(l);
        if failure.is_none() {
            failure = e;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    end_progress(bar).await;
    if failure.is_none() {
        for p in producers {
            p.close().await;
        }
    }
    lat.sort_unstable();
    let sent = done.load(Ordering::Relaxed) + 1;
    let n = (sent - 1) as f64;
    let mb = n * a.record_size as f64 / 1e6;
    let sampling = if a.sync {
        "every record timed".to_owned()
    } else {
        format!("1 in {SAMPLE_EVERY} records timed")
    };
    let summary = json!({
        "records": sent,
        "complete": failure.is_none(),
        "latency_samples": lat.len(),
        "latency_sampling": sampling,
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
        "topics_spread": a.topics_spread,
        "partitions_spread": a.partitions_spread,
        "sync": a.sync,
        "busy_poll_us": a.busy_poll_us.to_string(),
    });
    if a.summary.json {
        println!("{summary}");
    } else {
        println!(
            "{}{} records ({:.1} MB) in {:.2} s: {:.0} records/s, {:.1} MB/s; latency ms p50 {:.3} p99 {:.3} p99.9 {:.3} max {:.3} ({} samples, {sampling}; the first record, sent before the clock started, not counted in the rate)",
            if failure.is_some() { "PARTIAL (stopped by the error below): " } else { "" },
            sent,
            mb,
            secs,
            n / secs,
            mb / secs,
            percentile(&lat, 0.5),
            percentile(&lat, 0.99),
            percentile(&lat, 0.999),
            percentile(&lat, 1.0),
            lat.len(),
        );
    }
    match failure {
        Some(e) => Err(describe(e)).context(format!(
            "perf produce stopped after {sent} acknowledged records"
        )),
        None => Ok(()),
    }
}

/// With --group: stop when no record arrives for this long.
const GROUP_IDLE: Duration = Duration::from_secs(10);

pub async fn consume(a: ConsumeArgs) -> Result<()> {
    let done = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
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
    let start;
    let mut failure: Option<anyhow::Error> = None;
    if let Some(group) = &a.group {
        let mut c = GroupConsumer::builder(&a.at.broker.addr, group)
            .connection(a.at.broker.connection()?)
            .topic(&a.at.topic)
            .build()
            .await
            .map_err(describe)?;
        start = Instant::now();
        let bar = progress(Arc::clone(&done), a.records, start);
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
    } else {
        start = Instant::now();
        let bar = progress(Arc::clone(&done), a.records, start);
        let mut tasks = Vec::new();
        // Records still to be counted: each task claims what it read from this, so the
        // run stops at exactly --records however the partitions' batches fall.
        let left = Arc::new(AtomicU64::new(a.records));
        for p in t.partitions {
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
                Arc::clone(&done),
                Arc::clone(&bytes),
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
                    let claimed =
                        match left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| {
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
    }
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

/// Marks a perf e2e record.
const E2E_TAG: &[u8; 8] = b"flmE2E\x00\x01";

/// The send time (µs since the run's epoch) of one of this run's records, or `None`
/// for a record some other producer wrote to the topic.
fn e2e_sent_at(value: &[u8], run: u64) -> Option<u64> {
    let tag = value.get(..8)?;
    let id = value.get(8..16)?;
    let at = value.get(16..24)?;
    if tag != E2E_TAG || id != run.to_be_bytes() {
        return None;
    }
    let mut b = [0u8; 8];
    b.copy_from_slice(at);
    Some(u64::from_be_bytes(b))
}

pub async fn e2e(a: E2eArgs) -> Result<()> {
    let size = usize::try_from(a.record_size)?;
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id());
    let group = format!("perf-e2e-{}", std::process::id());
    let mut consumer = GroupConsumer::builder(&a.broker.addr, &group)
        .connection(a.broker.connection()?.busy_poll(a.busy_poll_us))
        .topic(&a.topic)
        .start(StartOffset::Latest)
        .auto_commit(false)
        .max_wait(Duration::from_millis(500))
        .build()
        .await
        .map_err(describe)
        .context("cannot join the group")?;
    let producer = Producer::with_config(
        &a.broker.addr,
        ProducerConfig::default().connection(a.broker.connection()?.busy_poll(a.busy_poll_us)),
    )
    .await
    .context("cannot reach the broker")?;
    let epoch = Instant::now();
    let total = a.records;
    let received = Arc::new(AtomicU64::new(0));
    let foreign = Arc::new(AtomicU64::new(0));
    let bar = progress(Arc::clone(&received), total, epoch);
    let (got, skipped) = (Arc::clone(&received), Arc::clone(&foreign));
    // Samples are shared, so a run cut short still reports what it measured.
    let samples = Arc::new(std::sync::Mutex::new(Vec::with_capacity(
        usize::try_from(total).unwrap_or(0),
    )));
    let lat = Arc::clone(&samples);
    let reader = flume_rt::spawn(async move {
        let mut err = None;
        while got.load(Ordering::Relaxed) < total {
            let Some(r) = consumer.recv().await else {
                break;
            };
            let r = match r {
                Ok(r) => r,
                Err(e) => {
                    err = Some(e);
                    break;
                }
            };
            // Records this run did not send (other producers, earlier runs) are counted
            // and skipped, never taken as latency samples.
            let Some(sent) = e2e_sent_at(r.payload(), run) else {
                skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let now = epoch.elapsed().as_micros() as u64;
            lat.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(now.saturating_sub(sent));
            got.fetch_add(1, Ordering::Relaxed);
        }
        if err.is_none() {
            if let Err(e) = consumer.close().await {
                err = Some(e);
            }
        }
        err
    });
    let interval = Duration::from_secs_f64(1.0 / a.rate as f64);
    let topic = a.topic.clone();
    // The paced sender runs as a task like the reader, so with one executor thread
    // (a pinned client) handing a record to the producer wakes no other thread.
    let sender = flume_rt::spawn(async move {
        let start = Instant::now();
        let mut pending = std::collections::VecDeque::new();
        let mut sent = 0u64;
        let run_result = async {
            for i in 0..total {
                // Open loop: each record leaves at its scheduled time, however long the others take.
                let due = start + interval.mul_f64(i as f64);
                let now = Instant::now();
                if due > now {
                    flume_rt::sleep(due - now).await;
                }
                let mut value = vec![b'x'; size];
                value[..8].copy_from_slice(E2E_TAG);
                value[8..16].copy_from_slice(&run.to_be_bytes());
                value[16..24].copy_from_slice(&(epoch.elapsed().as_micros() as u64).to_be_bytes());
                let rec = ProducerRecord::new(topic.clone(), value);
                pending.push_back(producer.enqueue(rec).await?);
                while pending.len() > 10_000 {
                    if let Some(f) = pending.pop_front() {
                        f.await?;
                        sent += 1;
                    }
                }
            }
            while let Some(f) = pending.pop_front() {
                f.await?;
                sent += 1;
            }
            Ok::<(), flume_client::Error>(())
        }
        .await;
        let sent_secs = start.elapsed().as_secs_f64();
        if run_result.is_ok() {
            producer.close().await;
        }
        (sent, sent_secs, run_result.err())
    });
    let (sent, sent_secs, send_err) = sender.await;
    let mut failure: Option<anyhow::Error> = send_err.map(describe);
    let read_err = if failure.is_some() {
        // Whatever the reader has by now; it is not waited for.
        reader.cancel().await;
        None
    } else {
        match flume_rt::timeout(Duration::from_secs(60), reader).await {
            Some(e) => e.map(describe),
            None => Some(anyhow::anyhow!(
                "the consumer did not receive every record within 60 s ({} of {total})",
                received.load(Ordering::Relaxed)
            )),
        }
    };
    let mut lat = std::mem::take(
        &mut *samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    end_progress(bar).await;
    if failure.is_none() {
        failure = read_err;
    }
    lat.sort_unstable();
    let skipped = foreign.load(Ordering::Relaxed);
    let summary = json!({
        "records": lat.len(),
        "sent": sent,
        "complete": failure.is_none(),
        "foreign_records_skipped": skipped,
        "latency_samples": lat.len(),
        "rate_target": a.rate,
        "rate_achieved": sent as f64 / sent_secs,
        "latency_ms": {
            "p50": percentile(&lat, 0.5),
            "p99": percentile(&lat, 0.99),
            "p999": percentile(&lat, 0.999),
            "max": percentile(&lat, 1.0),
        },
    });
    if a.summary.json {
        println!("{summary}");
    } else {
        println!(
            "{}{} records at {:.0}/s, produce to group consumer latency ms: p50 {:.3} p99 {:.3} p99.9 {:.3} max {:.3} (every record timed: {} samples; {skipped} records from other producers skipped)",
            if failure.is_some() { "PARTIAL (stopped by the error below): " } else { "" },
            lat.len(),
            sent as f64 / sent_secs,
            percentile(&lat, 0.5),
            percentile(&lat, 0.99),
            percentile(&lat, 0.999),
            percentile(&lat, 1.0),
            lat.len(),
        );
    }
    match failure {
        Some(e) => Err(e.context(format!(
            "perf e2e stopped after {sent} acknowledged records"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_reaches_every_partition_of_every_topic_once_per_round() {
        let s = Spread {
            topic: "t".into(),
            topics: 3,
            partitions: 4,
        };
        let mut seen: Vec<(String, Option<i32>)> = (0..12).map(|j| s.target(j)).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 12, "{seen:?}");
        assert_eq!(s.target(12), s.target(0));
        let one = Spread {
            topic: "t".into(),
            topics: 0,
            partitions: 0,
        };
        assert_eq!(one.target(5), ("t".to_owned(), None));
    }

    #[test]
    fn e2e_takes_only_its_own_records() {
        let mut v = vec![b'x'; 30];
        v[..8].copy_from_slice(E2E_TAG);
        v[8..16].copy_from_slice(&7u64.to_be_bytes());
        v[16..24].copy_from_slice(&99u64.to_be_bytes());
        assert_eq!(e2e_sent_at(&v, 7), Some(99));
        assert_eq!(e2e_sent_at(&v, 8), None, "another run's record");
        assert_eq!(e2e_sent_at(b"short", 7), None);
        assert_eq!(e2e_sent_at(&[0u8; 40], 7), None);
    }
}

//! `flume-cli perf produce`: N records as fast as possible; throughput and
//! latency. Phases: connect the producers, send the first record before the
//! clock starts (`warm_up`), time the rest (`measure`, each producer's share
//! in `send_share`), print the summary (`report`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use flume_client::{Producer, ProducerConfig, ProducerRecord};
use serde_json::json;

use super::common::{end_progress, percentile, progress};
use crate::args::perf::ProduceArgs;
use crate::common::describe;

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

pub async fn run(a: ProduceArgs) -> Result<()> {
    if a.records == 0 {
        bail!("--records must be at least 1");
    }
    let value = Bytes::from(vec![b'x'; usize::try_from(a.record_size)?]);
    let producers = connect(&a).await?;
    let spread = Spread {
        topic: a.at.topic.clone(),
        topics: a.topics_spread,
        partitions: a.partitions_spread,
    };
    warm_up(&producers[0], &spread, &value, a.key_cardinality).await?;
    let run = measure(&a, &producers, &spread, &value).await?;
    if run.failure.is_none() {
        for p in producers {
            p.close().await;
        }
    }
    report(&a, run)
}

/// `--producers` producers, each its own connection.
async fn connect(a: &ProduceArgs) -> Result<Vec<Arc<Producer>>> {
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
    Ok(producers)
}

/// The first of the N records goes alone, before the clock starts: it creates the
/// topic if needed and warms the connection. It counts as one of the N (no extra
/// record lands in the topic) but not in the timing.
async fn warm_up(producer: &Producer, spread: &Spread, value: &Bytes, keys: u64) -> Result<()> {
    let (topic0, partition0) = spread.target(0);
    producer
        .send_record(with_partition(
            with_key(
                ProducerRecord::new(topic0, value.clone()),
                (keys > 0).then(|| Bytes::from("key-0")),
            ),
            partition0,
        ))
        .await
        .map_err(describe)?;
    Ok(())
}

/// What the timed part of a run measured.
struct Measured {
    /// Latency samples (µs), sorted by `report`.
    lat: Vec<u64>,
    /// The first producer's error, if any stopped.
    failure: Option<flume_client::Error>,
    /// Records acknowledged after the first.
    done: u64,
    secs: f64,
}

/// Sends the N - 1 timed records, split between the producers, with the
/// progress line running.
async fn measure(
    a: &ProduceArgs,
    producers: &[Arc<Producer>],
    spread: &Spread,
    value: &Bytes,
) -> Result<Measured> {
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
        let work = send_share(Share {
            i,
            n,
            producer: Arc::clone(producer),
            spread: spread.clone(),
            value: value.clone(),
            done: Arc::clone(&done),
            sync: a.sync,
            keys: a.key_cardinality,
            producers: a.producers,
            window,
        });
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
    Ok(Measured {
        lat,
        failure,
        done: done.load(Ordering::Relaxed),
        secs,
    })
}

/// One producer's part of the timed records.
struct Share {
    /// Which producer (0-based).
    i: u64,
    /// Records it sends.
    n: u64,
    producer: Arc<Producer>,
    spread: Spread,
    value: Bytes,
    /// Acknowledged records, over every producer.
    done: Arc<AtomicU64>,
    sync: bool,
    /// `--key-cardinality`.
    keys: u64,
    /// `--producers`.
    producers: u64,
    /// Records in flight at most.
    window: usize,
}

/// Sends one producer's records, pipelined (or one by one with --sync):
/// its latency samples (µs), and the error that stopped it.
async fn send_share(s: Share) -> (Vec<u64>, Option<flume_client::Error>) {
    let Share {
        i,
        n,
        producer,
        spread,
        value,
        done,
        sync,
        keys,
        producers: producers_n,
        window,
    } = s;
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
}

/// The summary, as a line or one JSON object; the run's error, if it stopped.
fn report(a: &ProduceArgs, run: Measured) -> Result<()> {
    let Measured {
        mut lat,
        failure,
        done,
        secs,
    } = run;
    lat.sort_unstable();
    let sent = done + 1;
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
}

//! `flume-cli perf e2e`: records produced at a fixed rate while a group
//! consumer reads them; latency from send to delivery. Phases: join the
//! group and connect the producer, run the reader (`spawn_reader`) and the
//! paced sender (`spawn_sender`), wait for both (`finish`), print the
//! summary (`report`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use flume_client::{GroupConsumer, Producer, ProducerConfig, ProducerRecord, StartOffset};
use serde_json::json;

use super::common::{end_progress, percentile, progress};
use crate::args::perf::E2eArgs;
use crate::common::describe;

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

/// Latency samples (µs), shared, so a run cut short still reports what it measured.
type Samples = Arc<Mutex<Vec<u64>>>;

/// What the reader and the sender share: this run's id, its clock, the
/// records to send, and the counts and samples.
#[derive(Clone)]
struct Run {
    /// Tags this run's records (other runs' and producers' are skipped).
    id: u64,
    /// Send times are µs since this.
    epoch: Instant,
    total: u64,
    received: Arc<AtomicU64>,
    foreign: Arc<AtomicU64>,
    samples: Samples,
}

pub async fn run(a: E2eArgs) -> Result<()> {
    let size = usize::try_from(a.record_size)?;
    let id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id());
    let group = format!("perf-e2e-{}", std::process::id());
    let consumer = GroupConsumer::builder(&a.broker.addr, &group)
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
    let total = a.records;
    let run = Run {
        id,
        epoch: Instant::now(),
        total,
        received: Arc::new(AtomicU64::new(0)),
        foreign: Arc::new(AtomicU64::new(0)),
        samples: Arc::new(Mutex::new(Vec::with_capacity(
            usize::try_from(total).unwrap_or(0),
        ))),
    };
    let bar = progress(Arc::clone(&run.received), total, run.epoch);
    let reader = spawn_reader(consumer, run.clone());
    let interval = Duration::from_secs_f64(1.0 / a.rate as f64);
    let sender = spawn_sender(producer, run.clone(), a.topic.clone(), size, interval);
    let (sent, sent_secs, send_err) = sender.await;
    let (lat, failure) = finish(&run, reader, send_err.map(describe)).await;
    end_progress(bar).await;
    report(&a, &run, lat, failure, sent, sent_secs)
}

/// The group consumer's task: takes this run's records until all have come,
/// each a latency sample; its error, if one stopped it.
fn spawn_reader(
    mut consumer: GroupConsumer,
    run: Run,
) -> flume_rt::Task<Option<flume_client::Error>> {
    let Run {
        id: run,
        epoch,
        total,
        received: got,
        foreign: skipped,
        samples: lat,
    } = run;
    flume_rt::spawn(async move {
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
    })
}

/// The paced sender's task: records acknowledged, the seconds sending took,
/// and the error that stopped it.
fn spawn_sender(
    producer: Producer,
    run: Run,
    topic: String,
    size: usize,
    interval: Duration,
) -> flume_rt::Task<(u64, f64, Option<flume_client::Error>)> {
    let Run {
        id: run,
        epoch,
        total,
        ..
    } = run;
    // The paced sender runs as a task like the reader, so with one executor thread
    // (a pinned client) handing a record to the producer wakes no other thread.
    flume_rt::spawn(async move {
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
    })
}

/// Once the sender is done: waits for the reader (up to 60 s; not at all
/// after a send error), then takes the samples. The error that stopped the
/// run comes first from the sender, else from the reader.
async fn finish(
    run: &Run,
    reader: flume_rt::Task<Option<flume_client::Error>>,
    send_err: Option<anyhow::Error>,
) -> (Vec<u64>, Option<anyhow::Error>) {
    let total = run.total;
    let mut failure: Option<anyhow::Error> = send_err;
    let read_err = if failure.is_some() {
        // Whatever the reader has by now; it is not waited for.
        reader.cancel().await;
        None
    } else {
        match flume_rt::timeout(Duration::from_secs(60), reader).await {
            Some(e) => e.map(describe),
            None => Some(anyhow::anyhow!(
                "the consumer did not receive every record within 60 s ({} of {total})",
                run.received.load(Ordering::Relaxed)
            )),
        }
    };
    let lat = std::mem::take(
        &mut *run
            .samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    if failure.is_none() {
        failure = read_err;
    }
    (lat, failure)
}

/// The summary, as a line or one JSON object; the error that stopped the
/// run, if one did.
fn report(
    a: &E2eArgs,
    run: &Run,
    mut lat: Vec<u64>,
    failure: Option<anyhow::Error>,
    sent: u64,
    sent_secs: f64,
) -> Result<()> {
    lat.sort_unstable();
    let skipped = run.foreign.load(Ordering::Relaxed);
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

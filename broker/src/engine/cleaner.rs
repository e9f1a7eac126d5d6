//! The log cleaner's rounds: at most one at a time, started by the
//! maintenance ticker, each a pass over every compacted partition that is
//! due (`storage::compact`), one partition after another on one blocking
//! thread, off the request path. Its memory is the key map's bound
//! (`BrokerConfig::cleaner`), its disk share the I/O rate there, and its CPU
//! one thread. Shutdown stops a round between records and waits for it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use flume_rt as rt;
use flume_rt::sync::TaskSlot;

use super::records::{compaction_of, Records};
use crate::metrics::Metrics;

/// The cleaner service: its rounds over the records service's compacted
/// partitions, counted in the metrics.
#[derive(Debug)]
pub(crate) struct Cleaner {
    records: Arc<Records>,
    metrics: Arc<Metrics>,
    round: Round,
}

/// The round in progress and the flag that stops it.
#[derive(Debug, Default)]
struct Round {
    running: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    task: TaskSlot<()>,
}

impl Cleaner {
    pub(super) fn new(records: Arc<Records>, metrics: Arc<Metrics>) -> Self {
        Cleaner {
            records,
            metrics,
            round: Round::default(),
        }
    }

    /// Stops the round in progress (nothing it had not installed is kept)
    /// and waits for it; no round starts after this.
    pub(crate) async fn stop(&self) {
        self.round.stop.store(true, Ordering::Release);
        self.round.task.join().await;
    }
}

impl Drop for Round {
    /// An engine dropped without `shutdown` stops its cleaner's round too
    /// (between records; nothing it had not installed is kept), rather than
    /// letting it rewrite segments of a log nobody serves.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

impl Cleaner {
    /// Starts a cleaner round unless one is running, shutdown has begun, or
    /// no topic is compacted.
    pub(super) fn start(&self, now_ms: i64) {
        let c = &self.round;
        if c.stop.load(Ordering::Acquire) || self.records.is_shutting_down() {
            return;
        }
        let partitions: Vec<_> = self
            .records
            .topics()
            .iter()
            .filter(|t| compaction_of(&t.config).is_some())
            .flat_map(|t| t.partitions.iter().cloned())
            .collect();
        if partitions.is_empty() || c.running.swap(true, Ordering::AcqRel) {
            return;
        }
        let (running, stop) = (Arc::clone(&c.running), Arc::clone(&c.stop));
        let limits = self.records.config().cleaner.clone();
        let metrics = Arc::clone(&self.metrics);
        let task = rt::spawn(async move {
            rt::unblock(move || {
                for p in partitions {
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    let started = Instant::now();
                    match p.compact_blocking(now_ms, &limits, &stop) {
                        Ok(Some(s)) => metrics.cleaner.pass(
                            (s.bytes_read, s.bytes_written),
                            s.records_read.saturating_sub(s.records_kept),
                            s.tombstones_removed,
                            started.elapsed(),
                            now_ms,
                        ),
                        Ok(None) => {}
                        Err(e) => {
                            metrics.cleaner.failed();
                            tracing::error!(topic = %p.topic, partition = p.id, error = %e, "log cleaner pass failed; the partition keeps its segments as they were");
                        }
                    }
                }
                running.store(false, Ordering::Release);
            })
            .await;
        });
        c.task.set(task);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropping_the_cleaner_stops_a_round_in_progress() {
        let c = Round::default();
        // What a running round holds and checks between records.
        let stop = Arc::clone(&c.stop);
        assert!(!stop.load(Ordering::Acquire));
        drop(c);
        assert!(stop.load(Ordering::Acquire));
    }
}

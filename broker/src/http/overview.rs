//! `/api/overview`: the broker at a glance, as JSON, with a short history
//! (cumulative records in and out per topic and lag per group partition,
//! sampled every [`HISTORY_INTERVAL`]) so the page draws its charts at once.
//!
//! Everything is bounded: [`HISTORY_SAMPLES`] samples of at most
//! [`HISTORY_TOPICS`] topics and [`HISTORY_LAGS`] lag series; the partition
//! list stops at [`OVERVIEW_PARTITIONS`], the group offsets at
//! [`OVERVIEW_OFFSETS`] and the share-partitions at
//! [`OVERVIEW_SHARE_PARTITIONS`] (with `truncated: true`).

use std::collections::VecDeque;
use std::time::Duration;

use serde_json::{json, Value};

use super::scrape::{group_lags, process_stats, share_lag, ServerStats};
use crate::engine::Engine;

/// Time between history samples.
pub const HISTORY_INTERVAL: Duration = Duration::from_secs(2);
/// Samples kept (5 minutes at the interval).
pub const HISTORY_SAMPLES: usize = 150;
/// Topics with a history (the first by name).
pub const HISTORY_TOPICS: usize = 64;
/// (group, topic, partition) lag series with a history.
pub const HISTORY_LAGS: usize = 256;
/// Partitions listed in one overview.
pub const OVERVIEW_PARTITIONS: usize = 2000;
/// Committed offsets listed in one overview.
pub const OVERVIEW_OFFSETS: usize = 2000;
/// Share-partitions listed in one overview (over every share group).
pub const OVERVIEW_SHARE_PARTITIONS: usize = 2000;

/// One history sample.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    time_ms: i64,
    /// (topic, records in, records out), cumulative.
    topics: Vec<(String, u64, u64)>,
    /// ("group/topic/partition", lag).
    lags: Vec<(String, i64)>,
}

/// The last [`HISTORY_SAMPLES`] samples.
#[derive(Debug, Default)]
pub struct History {
    samples: VecDeque<Sample>,
}

impl History {
    /// Adds a sample, dropping the oldest past [`HISTORY_SAMPLES`].
    pub fn push(&mut self, s: Sample) {
        if self.samples.len() >= HISTORY_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back(s);
    }

    /// Samples kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// `{interval_ms, time_ms: [..], topics: {name: {in: [..], out: [..]}}, lag: {key: [..]}}`;
    /// a series missing from a sample has `null` there.
    pub fn to_json(&self) -> Value {
        let n = self.samples.len();
        let mut topics = serde_json::Map::new();
        let mut lags = serde_json::Map::new();
        for (i, s) in self.samples.iter().enumerate() {
            for (name, rin, rout) in &s.topics {
                let e = topics.entry(name.clone()).or_insert_with(
                    || json!({"in": vec![Value::Null; n], "out": vec![Value::Null; n]}),
                );
                e["in"][i] = json!(rin);
                e["out"][i] = json!(rout);
            }
            for (key, lag) in &s.lags {
                let e = lags
                    .entry(key.clone())
                    .or_insert_with(|| Value::Array(vec![Value::Null; n]));
                e[i] = json!(lag);
            }
        }
        json!({
            "interval_ms": HISTORY_INTERVAL.as_millis() as u64,
            "time_ms": self.samples.iter().map(|s| s.time_ms).collect::<Vec<_>>(),
            "topics": topics,
            "lag": lags,
        })
    }
}

/// Takes a history sample of `engine`.
pub fn sample(engine: &Engine) -> Sample {
    let topics = engine
        .records()
        .topics()
        .iter()
        .take(HISTORY_TOPICS)
        .map(|t| {
            let (rin, rout) = t.statuses(false).iter().fold((0u64, 0u64), |(a, b), p| {
                (a + p.counts.records_in, b + p.counts.records_out)
            });
            (t.name.clone(), rin, rout)
        })
        .collect();
    let lags = group_lags(engine)
        .into_iter()
        .take(HISTORY_LAGS)
        .map(|l| (format!("{}/{}/{}", l.group, l.topic, l.partition), l.lag))
        .collect();
    Sample {
        time_ms: engine.config().clock.wall_ms(),
        topics,
        lags,
    }
}

fn ms(seconds: Option<f64>) -> Value {
    seconds.map_or(Value::Null, |s| json!((s * 1e6).round() / 1e3))
}

/// Most consumer-protocol groups the overview describes, and members of each.
const OVERVIEW_CONSUMER_GROUPS: usize = 500;
const OVERVIEW_CONSUMER_MEMBERS: usize = 100;

/// Most open transactions the overview lists (the oldest).
const OVERVIEW_TRANSACTIONS: usize = 50;

/// The whole overview. Blocking (takes log locks, reads /proc).
pub fn overview(engine: &Engine, server: ServerStats, history: Value) -> Value {
    let m = engine.metrics();
    let mut listed = 0usize;
    let mut truncated = false;
    let topics: Vec<Value> = engine
        .records()
        .topics()
        .iter()
        .map(|t| {
            let room = OVERVIEW_PARTITIONS.saturating_sub(listed);
            let shown = usize::try_from(t.partition_count()).unwrap_or(usize::MAX);
            truncated |= shown > room;
            listed = listed.saturating_add(shown.min(room));
            let statuses = if room == 0 {
                Vec::new()
            } else {
                t.statuses(true)
            };
            let parts: Vec<Value> = statuses
                .into_iter()
                .take(room)
                .map(|p| {
                    let c = p.counts;
                    let (size, segments) = p.disk.unwrap_or_default();
                    json!({
                        "partition": p.partition,
                        "end_offset": p.log_end,
                        "log_start": p.log_start,
                        "size_bytes": size,
                        "segments": segments,
                        "queue_depth": p.queued,
                        "records_in": c.records_in,
                        "records_out": c.records_out,
                        "bytes_in": c.bytes_in,
                        "bytes_out": c.bytes_out,
                        "failed": p.failed,
                        "dirty_ratio": p.dirty_ppm.map(|ppm| f64::from(ppm) / 1e6),
                    })
                })
                .collect();
            json!({"name": t.name, "partition_count": t.partition_count(), "partitions": parts})
        })
        .collect();
    let lags = group_lags(engine);
    let consumer_names = engine.groups().list_consumer_groups();
    let mut groups: Vec<Value> = engine
        .groups()
        .group_summaries()
        .into_iter()
        // A consumer-protocol group is shown once, below, as such.
        .filter(|g| consumer_names.binary_search(&g.group).is_err())
        .map(|g| {
            json!({
                "group": g.group, "type": "classic", "state": g.state, "generation": g.generation,
                "members": g.members, "rebalances": g.rebalances,
            })
        })
        .collect();
    // Consumer-protocol groups (KIP-848): epochs, and each member's epoch,
    // partitions and (while it reconciles) target; bounded like the rest.
    groups.extend(
        consumer_names
            .iter()
            .filter_map(|name| engine.groups().describe_consumer_group(name))
            .take(OVERVIEW_CONSUMER_GROUPS)
            .map(|g| {
                let tps = |a: &crate::engine::Assignment| -> String {
                    a.iter()
                        .filter(|(_, ps)| !ps.is_empty())
                        .map(|(t, ps)| {
                            let ps: Vec<String> = ps.iter().map(i32::to_string).collect();
                            format!("{t}:{}", ps.join(","))
                        })
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                let members: Vec<Value> = g
                    .members
                    .iter()
                    .take(OVERVIEW_CONSUMER_MEMBERS)
                    .map(|m| {
                        json!({
                            "member_id": m.member_id, "member_epoch": m.member_epoch,
                            "client_id": m.client_id, "instance_id": m.instance_id,
                            "partitions": tps(&m.assignment), "target": tps(&m.target),
                        })
                    })
                    .collect();
                json!({
                    "group": g.group, "type": "consumer",
                    "state": g.state.to_ascii_lowercase(), "generation": g.epoch,
                    "epoch": g.epoch, "assignment_epoch": g.assignment_epoch,
                    "assignor": g.assignor, "members": g.members.len(),
                    "member_list": members,
                })
            }),
    );
    groups.sort_by(|a, b| a["group"].as_str().cmp(&b["group"].as_str()));
    let (share_views, share_truncated) = engine
        .shares()
        .describe_share_groups(OVERVIEW_SHARE_PARTITIONS);
    let share_groups: Vec<Value> = share_views
        .iter()
        .map(|g| {
            let parts: Vec<Value> = g
                .partitions
                .iter()
                .map(|p| {
                    let (c, t) = (p.counts, p.totals);
                    json!({
                        "topic": p.tp.topic, "partition": p.tp.partition,
                        "start_offset": p.start_offset, "end_offset": p.log_end,
                        "lag": share_lag(p), "in_flight": c.in_flight,
                        "acquired": c.acquired, "available": c.available,
                        "delivered": t.delivered, "redelivered": t.redelivered,
                        "accepted": t.accepted, "released": t.released,
                        "rejected": t.rejected, "lock_expired": t.lock_expired,
                        "archived": t.archived,
                    })
                })
                .collect();
            json!({
                "group": g.group, "epoch": g.epoch, "members": g.members.len(),
                "partitions": parts,
            })
        })
        .collect();
    let offsets: Vec<Value> = lags
        .iter()
        .take(OVERVIEW_OFFSETS)
        .map(|l| {
            json!({
                "group": l.group, "topic": l.topic, "partition": l.partition,
                "committed": l.committed, "end_offset": l.end, "lag": l.lag,
            })
        })
        .collect();
    let latency: Vec<Value> = m
        .latencies()
        .into_iter()
        .filter(|(_, s)| s.count() > 0)
        .map(|(api, s)| {
            json!({
                "api": api, "count": s.count(),
                "p50_ms": ms(s.quantile(0.5)), "p90_ms": ms(s.quantile(0.9)),
                "p99_ms": ms(s.quantile(0.99)),
            })
        })
        .collect();
    let requests: Vec<Value> = m
        .request_counts()
        .into_iter()
        .map(|(api, error, count)| json!({"api": api, "error": error, "count": count}))
        .collect();
    let errors: Vec<Value> = m
        .recent_errors()
        .into_iter()
        .rev()
        .map(|e| {
            let (topic, partition) = e.topic.map_or((Value::Null, Value::Null), |(t, p)| (json!(t), json!(p)));
            json!({"time_ms": e.time_ms, "api": e.api, "error": e.error, "topic": topic, "partition": partition})
        })
        .collect();
    let stats = engine.transactions().transaction_stats();
    let now = engine.config().clock.wall_ms();
    let mut open = engine.transactions().list_transactions(
        &[
            crate::engine::TxnState::Ongoing,
            crate::engine::TxnState::PrepareCommit,
            crate::engine::TxnState::PrepareAbort,
        ],
        &[],
        -1,
    );
    // The oldest first; at most OVERVIEW_TRANSACTIONS of them.
    open.sort_by_key(|t| (t.started_ms < 0, t.started_ms));
    let transactions = json!({
        "transactional_ids": stats.transactional_ids,
        "open": stats.open,
        "pending_completion": stats.pending_completions,
        "timed_out": stats.timed_out,
        "refused": {
            "transactional_ids": stats.refused_ids,
            "open_transactions": stats.refused_open,
            "partitions_per_transaction": stats.refused_partitions,
        },
        "oldest": open.iter().take(OVERVIEW_TRANSACTIONS).map(|t| json!({
            "transactional_id": t.transactional_id, "producer_id": t.producer_id,
            "state": t.state.as_str(),
            "age_ms": (t.started_ms >= 0).then(|| now.saturating_sub(t.started_ms)),
        })).collect::<Vec<Value>>(),
    });
    let (rss, fds) = process_stats();
    let (refused, http_refused) = m.connections_refused();
    let c = m.cleaner.totals();
    let cleaner = json!({
        "passes": c.passes, "failures": c.failures, "bytes_read": c.bytes_read,
        "bytes_written": c.bytes_written, "records_removed": c.records_removed,
        "tombstones_removed": c.tombstones_removed, "seconds": c.micros as f64 / 1e6,
        "last_pass_ms": (c.last_pass_ms > 0).then_some(c.last_pass_ms),
    });
    json!({
        "broker": {
            "version": env!("CARGO_PKG_VERSION"),
            "time_ms": engine.config().clock.wall_ms(),
            "uptime_s": m.uptime().as_secs(),
            "connections_open": server.connections_open,
            "connections_refused": refused,
            "http_connections_refused": http_refused,
            "request_memory_bytes": server.memory.used,
            "request_memory_limit_bytes": server.memory.limit,
            "rss_bytes": rss,
            "open_fds": fds,
        },
        "cleaner": cleaner,
        "topics": topics,
        "partitions_truncated": truncated,
        "groups": groups,
        "share_groups": share_groups,
        "share_groups_truncated": share_truncated,
        "transactions": transactions,
        "offsets": offsets,
        "offsets_truncated": lags.len() > OVERVIEW_OFFSETS,
        "latency": latency,
        "requests": requests,
        "errors": errors,
        "history": history,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_is_bounded_and_aligns_series() {
        let mut h = History::default();
        for i in 0..HISTORY_SAMPLES + 10 {
            let mut s = Sample {
                time_ms: i as i64,
                topics: vec![("a".into(), i as u64, 0)],
                lags: vec![],
            };
            if i == HISTORY_SAMPLES + 9 {
                s.topics.push(("b".into(), 7, 1));
            }
            h.push(s);
        }
        assert_eq!(h.len(), HISTORY_SAMPLES);
        let j = h.to_json();
        assert_eq!(j["time_ms"].as_array().unwrap().len(), HISTORY_SAMPLES);
        assert_eq!(j["topics"]["a"]["in"][0], json!(10));
        assert_eq!(j["topics"]["b"]["in"][0], Value::Null);
        assert_eq!(j["topics"]["b"]["in"][HISTORY_SAMPLES - 1], json!(7));
    }
}

//! The Prometheus scrape: every metric of one broker, read at scrape time
//! from the counters each layer keeps ([`crate::metrics`], the partitions'
//! stats, the coordinator's summaries, the ACLs' denials, the quotas) and
//! encoded with the official `prometheus-client` encoders. It sits at the top,
//! beside the HTTP front end, and is the only code that reads the engine
//! for metrics.

use std::fmt::Write as _;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

use crate::budget::MemoryUse;
use crate::domain::PartitionStatus;
use crate::engine::Engine;
use crate::metrics::{PartitionCounts, APPEND_LATENCY, FSYNC_LATENCY, MAX_GROUP_SERIES};
use crate::security::quota::QuotaStats;

/// What the server knows that the engine does not, read at scrape time.
#[derive(Debug, Clone, Copy)]
pub struct ServerStats {
    /// Open broker-protocol connections.
    pub connections_open: usize,
    /// The request memory budget.
    pub memory: MemoryUse,
}

/// Reads [`ServerStats`] from the running server.
pub type Probe = Arc<dyn Fn() -> ServerStats + Send + Sync>;

/// Resident memory and open file descriptors of this process, from /proc
/// (`None` where /proc is not there).
pub fn process_stats() -> (Option<u64>, Option<u64>) {
    let rss = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
            Some(pages.saturating_mul(4096))
        });
    let fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as u64);
    (rss, fds)
}

/// The metrics of one broker, encoded at scrape time.
pub struct Scrape {
    engine: Arc<Engine>,
    probe: Probe,
}

impl std::fmt::Debug for Scrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrape").finish_non_exhaustive()
    }
}

impl Scrape {
    /// A scrape of `engine`, with the server's numbers from `probe`.
    pub fn new(engine: Arc<Engine>, probe: Probe) -> Self {
        Scrape { engine, probe }
    }

    /// Encodes every metric: OpenMetrics text when `openmetrics`, else the
    /// Prometheus text format 0.0.4. Blocking (reads /proc, takes log locks).
    pub fn render(self, openmetrics: bool) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut out = String::new();
        let r = if openmetrics {
            prometheus_client::encoding::text::encode(&mut out, &registry)
        } else {
            prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
        };
        if let Err(e) = r {
            // Writing to a String does not fail; a collector error would be ours.
            tracing::error!(error = %e, "encoding metrics failed");
            let _ = writeln!(out, "# encoding failed");
        }
        out
    }
}

fn counter(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    v: u64,
) -> Result<(), std::fmt::Error> {
    let c = ConstCounter::new(v);
    c.encode(enc.encode_descriptor(name, help, None, c.metric_type())?)
}

fn gauge(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    v: i64,
) -> Result<(), std::fmt::Error> {
    let g = ConstGauge::new(v);
    g.encode(enc.encode_descriptor(name, help, None, g.metric_type())?)
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// One labelled family: every (labels, value) with the same descriptor.
fn family<L: prometheus_client::encoding::EncodeLabelSet, M: EncodeMetric + TypedMetric>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    items: impl IntoIterator<Item = (L, M)>,
) -> Result<(), std::fmt::Error> {
    let mut me = enc.encode_descriptor(name, help, None, M::TYPE)?;
    for (labels, m) in items {
        m.encode(me.encode_family(&labels)?)?;
    }
    Ok(())
}

/// The per-principal limits' and the logins' counters (labels: principal
/// class and mechanism, both bounded; never a user name).
fn quota_metrics(enc: &mut DescriptorEncoder<'_>, q: &QuotaStats) -> Result<(), std::fmt::Error> {
    use crate::security::quota::{Mechanism, PrincipalClass};
    family(
        enc,
        "flume_quota_throttle_seconds",
        "Seconds of produce throttling given (--produce-quota-bytes-per-sec), by principal class.",
        PrincipalClass::ALL.iter().map(|c| {
            let seconds = q.throttle_ms(*c) as f64 / 1000.0;
            ([("class", c.label())], ConstCounter::new(seconds))
        }),
    )?;
    counter(
        enc,
        "flume_quota_connections_refused",
        "Connections refused by --max-connections-per-principal (Flume and Kafka listeners).",
        q.connections_refused(),
    )?;
    counter(
        enc,
        "flume_logins_rate_limited",
        "Logins refused by the per-address limit on failed logins.",
        q.logins_limited(),
    )?;
    family(
        enc,
        "flume_logins",
        "Logins (Flume AUTHENTICATE, Kafka SASL) by mechanism and result.",
        Mechanism::ALL.iter().flat_map(|m| {
            let (ok, failed) = q.logins(*m);
            [
                (
                    [("mechanism", m.label()), ("result", "success")],
                    ConstCounter::new(ok),
                ),
                (
                    [("mechanism", m.label()), ("result", "failure")],
                    ConstCounter::new(failed),
                ),
            ]
        }),
    )
}

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let e = &self.engine;
        partition_metrics(&mut enc, e)?;
        group_metrics(&mut enc, e)?;
        share_metrics(&mut enc, e)?;
        txn_metrics(&mut enc, e.transactions().transaction_stats())?;
        broker_metrics(&mut enc, e, (self.probe)())
    }
}

/// The log cleaner's totals.
fn cleaner_metrics(
    enc: &mut DescriptorEncoder<'_>,
    t: crate::metrics::CleanerTotals,
) -> Result<(), std::fmt::Error> {
    let counters = [
        (
            "flume_cleaner_passes",
            "Log cleaner passes that installed cleaned segments.",
            t.passes,
        ),
        (
            "flume_cleaner_failures",
            "Log cleaner passes that failed (the partition kept its segments).",
            t.failures,
        ),
        (
            "flume_cleaner_read_bytes",
            "Bytes of segments the log cleaner read.",
            t.bytes_read,
        ),
        (
            "flume_cleaner_written_bytes",
            "Bytes of cleaned segments the log cleaner wrote.",
            t.bytes_written,
        ),
        (
            "flume_cleaner_records_removed",
            "Records the log cleaner removed (older values of a key and expired tombstones).",
            t.records_removed,
        ),
        (
            "flume_cleaner_tombstones_removed",
            "Tombstones the log cleaner removed once delete.retention.ms had passed.",
            t.tombstones_removed,
        ),
    ];
    for (name, help, v) in counters {
        counter(enc, name, help, v)?;
    }
    let secs = ConstCounter::new(t.micros as f64 / 1e6);
    secs.encode(enc.encode_descriptor(
        "flume_cleaner_seconds",
        "Time the log cleaner spent in passes.",
        None,
        secs.metric_type(),
    )?)?;
    gauge(
        enc,
        "flume_cleaner_last_pass_timestamp_seconds",
        "When the log cleaner's last pass ended (seconds since the epoch; 0: none yet).",
        to_i64(t.last_pass_ms / 1000),
    )
}

/// Per partition: records and bytes in and out, offsets, size on disk, queue depth.
fn partition_metrics(enc: &mut DescriptorEncoder<'_>, e: &Engine) -> Result<(), std::fmt::Error> {
    let parts: Vec<(PartitionStatus, String)> = e
        .records()
        .topics()
        .iter()
        .flat_map(|t| t.statuses(true))
        .map(|p| {
            let id = p.partition.to_string();
            (p, id)
        })
        .collect();
    let labels =
        |p: &PartitionStatus, id: &str| [("topic", p.topic.clone()), ("partition", id.to_owned())];
    type CounterOf = fn(&PartitionCounts) -> u64;
    let counters: [(&str, &str, CounterOf); 4] = [
        (
            "flume_partition_records_in",
            "Records appended to the partition.",
            |c| c.records_in,
        ),
        (
            "flume_partition_bytes_in",
            "Bytes appended to the partition (stored format).",
            |c| c.bytes_in,
        ),
        (
            "flume_partition_records_out",
            "Records served by fetches from the partition.",
            |c| c.records_out,
        ),
        (
            "flume_partition_bytes_out",
            "Bytes served by fetches from the partition (stored format).",
            |c| c.bytes_out,
        ),
    ];
    for (name, help, f) in counters {
        family(
            enc,
            name,
            help,
            parts
                .iter()
                .map(|(p, id)| (labels(p, id), ConstCounter::new(f(&p.counts)))),
        )?;
    }
    family(
        enc,
        "flume_partition_end_offset",
        "Offset the next record of the partition gets.",
        parts
            .iter()
            .map(|(p, id)| (labels(p, id), ConstGauge::new(to_i64(p.log_end)))),
    )?;
    family(
        enc,
        "flume_partition_log_start_offset",
        "Oldest offset still stored in the partition.",
        parts
            .iter()
            .map(|(p, id)| (labels(p, id), ConstGauge::new(to_i64(p.log_start)))),
    )?;
    let disk: Vec<(u64, usize)> = parts
        .iter()
        .map(|(p, _)| p.disk.unwrap_or_default())
        .collect();
    family(
        enc,
        "flume_partition_size_bytes",
        "Bytes of the partition's segment files on disk.",
        parts
            .iter()
            .zip(&disk)
            .map(|((p, id), d)| (labels(p, id), ConstGauge::new(to_i64(d.0)))),
    )?;
    family(
        enc,
        "flume_partition_segments",
        "Segment files of the partition.",
        parts
            .iter()
            .zip(&disk)
            .map(|((p, id), d)| (labels(p, id), ConstGauge::new(to_i64(d.1 as u64)))),
    )?;
    family(
        enc,
        "flume_partition_dirty_ratio",
        "Share of a compacted partition's sealed bytes the log cleaner has not cleaned yet.",
        parts.iter().filter_map(|(p, id)| {
            p.dirty_ppm
                .map(|ppm| (labels(p, id), ConstGauge::new(f64::from(ppm) / 1e6)))
        }),
    )?;
    family(
        enc,
        "flume_partition_queue_depth",
        "Append requests waiting in the partition's queue.",
        parts
            .iter()
            .map(|(p, id)| (labels(p, id), ConstGauge::new(to_i64(p.queued as u64)))),
    )?;

    Ok(())
}

/// The transaction coordinator: ids, open transactions, refusals at each bound, timeouts.
fn txn_metrics(
    enc: &mut DescriptorEncoder<'_>,
    t: crate::engine::TxnStats,
) -> Result<(), std::fmt::Error> {
    let n = |v: usize| to_i64(v as u64);
    gauge(
        enc,
        "flume_transactional_ids",
        "Transactional ids the transaction coordinator keeps.",
        n(t.transactional_ids),
    )?;
    gauge(
        enc,
        "flume_transactions_open",
        "Transactions open (ongoing, or being committed or aborted).",
        n(t.open),
    )?;
    gauge(
        enc,
        "flume_transactions_pending_completion",
        "Transactions whose end is decided but whose markers and offsets are not written yet.",
        n(t.pending_completions),
    )?;
    counter(
        enc,
        "flume_transactions_timed_out",
        "Transactions the broker aborted at their timeout.",
        t.timed_out,
    )?;
    family(
        enc,
        "flume_transactions_refused",
        "Transaction requests refused at a bound, by bound.",
        [
            ("transactional_ids", t.refused_ids),
            ("open_transactions", t.refused_open),
            ("partitions_per_transaction", t.refused_partitions),
        ]
        .into_iter()
        .map(|(bound, v)| ([("bound", bound)], ConstCounter::new(v))),
    )
}

/// Per group: state, generation, members, rebalances; committed offsets and lag.
fn group_metrics(enc: &mut DescriptorEncoder<'_>, e: &Engine) -> Result<(), std::fmt::Error> {
    let groups = e.groups().group_summaries();
    let states = [
        "empty",
        "preparing_rebalance",
        "completing_rebalance",
        "stable",
    ];
    family(
        enc,
        "flume_group_state",
        "1 for the group's current state, 0 for the others.",
        groups.iter().flat_map(|g| {
            states.iter().map(move |s| {
                (
                    [("group", g.group.clone()), ("state", (*s).to_owned())],
                    ConstGauge::new(i64::from(g.state == *s)),
                )
            })
        }),
    )?;
    family(
        enc,
        "flume_group_generation",
        "The group's generation.",
        groups.iter().map(|g| {
            (
                [("group", g.group.clone())],
                ConstGauge::new(i64::from(g.generation)),
            )
        }),
    )?;
    family(
        enc,
        "flume_group_members",
        "Members of the group.",
        groups.iter().map(|g| {
            (
                [("group", g.group.clone())],
                ConstGauge::new(to_i64(g.members as u64)),
            )
        }),
    )?;
    family(
        enc,
        "flume_group_rebalances",
        "Rebalances the group has started.",
        groups.iter().map(|g| {
            (
                [("group", g.group.clone())],
                ConstCounter::new(g.rebalances),
            )
        }),
    )?;
    let lags = group_lags(e);
    let lag_labels = |l: &GroupLag| {
        [
            ("group", l.group.clone()),
            ("topic", l.topic.clone()),
            ("partition", l.partition.to_string()),
        ]
    };
    family(
        enc,
        "flume_group_committed_offset",
        "The group's committed offset (the next offset it reads).",
        lags.iter()
            .map(|l| (lag_labels(l), ConstGauge::new(l.committed))),
    )?;
    family(
        enc,
        "flume_group_lag_records",
        "Records between the group's committed offset and the partition's end.",
        lags.iter().map(|l| (lag_labels(l), ConstGauge::new(l.lag))),
    )?;

    Ok(())
}

/// A metric's name, help and how to read it from a `T`.
type Field<T, V> = (&'static str, &'static str, fn(&T) -> V);

/// Records of a share-partition not yet done: from its start offset to the
/// log end, less those in flight already accepted or archived.
pub fn share_lag(p: &crate::engine::SharePartitionView) -> i64 {
    let c = p.counts;
    let done = c.in_flight.saturating_sub(c.acquired + c.available);
    let behind = p.log_end.saturating_sub(p.start_offset).max(0);
    behind
        .saturating_sub(i64::try_from(done).unwrap_or(i64::MAX))
        .max(0)
}

/// Per share group: members and epoch; per share-partition (at most
/// [`MAX_GROUP_SERIES`]): the start offset, the records in flight by state,
/// the lag, and what happened to the records since the broker started
/// (deliveries, redeliveries, acknowledgements by type, lock expiries,
/// archived records).
fn share_metrics(enc: &mut DescriptorEncoder<'_>, e: &Engine) -> Result<(), std::fmt::Error> {
    let (groups, _) = e.shares().describe_share_groups(MAX_GROUP_SERIES);
    family(
        enc,
        "flume_share_group_members",
        "Members of the share group.",
        groups.iter().map(|g| {
            (
                [("group", g.group.clone())],
                ConstGauge::new(to_i64(g.members.len() as u64)),
            )
        }),
    )?;
    family(
        enc,
        "flume_share_group_epoch",
        "The share group's epoch (0 without members).",
        groups.iter().map(|g| {
            (
                [("group", g.group.clone())],
                ConstGauge::new(i64::from(g.epoch)),
            )
        }),
    )?;
    let parts: Vec<([(&str, String); 3], &crate::engine::SharePartitionView)> = groups
        .iter()
        .flat_map(|g| {
            g.partitions.iter().map(|p| {
                (
                    [
                        ("group", g.group.clone()),
                        ("topic", p.tp.topic.clone()),
                        ("partition", p.tp.partition.to_string()),
                    ],
                    p,
                )
            })
        })
        .collect();
    let gauges: [Field<crate::engine::SharePartitionView, i64>; 5] = [
        (
            "flume_share_partition_start_offset",
            "Every record below is accepted, archived or a gap.",
            |p| p.start_offset,
        ),
        (
            "flume_share_partition_lag_records",
            "Records from the start offset to the log end not yet accepted or archived.",
            share_lag,
        ),
        (
            "flume_share_partition_in_flight_records",
            "Records tracked past the start offset (any state).",
            |p| to_i64(p.counts.in_flight as u64),
        ),
        (
            "flume_share_partition_acquired_records",
            "Records a member holds now.",
            |p| to_i64(p.counts.acquired as u64),
        ),
        (
            "flume_share_partition_available_records",
            "Records released or timed out, waiting to be delivered again.",
            |p| to_i64(p.counts.available as u64),
        ),
    ];
    for (name, help, f) in gauges {
        family(
            enc,
            name,
            help,
            parts
                .iter()
                .map(|(l, p)| (l.clone(), ConstGauge::new(f(p)))),
        )?;
    }
    let counters: [Field<crate::engine::ShareTotals, u64>; 4] = [
        (
            "flume_share_partition_deliveries",
            "Records handed to a member (each redelivery counts again).",
            |t| t.delivered,
        ),
        (
            "flume_share_partition_redeliveries",
            "Deliveries of a record delivered before.",
            |t| t.redelivered,
        ),
        (
            "flume_share_partition_lock_expiries",
            "Records whose lock ran out before their member acknowledged them.",
            |t| t.lock_expired,
        ),
        (
            "flume_share_partition_archived_records",
            "Records archived: rejected, or delivered the delivery-count limit of times.",
            |t| t.archived,
        ),
    ];
    for (name, help, f) in counters {
        family(
            enc,
            name,
            help,
            parts
                .iter()
                .map(|(l, p)| (l.clone(), ConstCounter::new(f(&p.totals)))),
        )?;
    }
    family(
        enc,
        "flume_share_partition_acknowledgements",
        "Records acknowledged by their member, by type (accept, release, reject).",
        parts.iter().flat_map(|(l, p)| {
            [
                ("accept", p.totals.accepted),
                ("release", p.totals.released),
                ("reject", p.totals.rejected),
            ]
            .into_iter()
            .map(move |(kind, v)| {
                let [g, t, n] = l.clone();
                ([g, t, n, ("type", kind.to_owned())], ConstCounter::new(v))
            })
        }),
    )
}

/// The broker as a whole: connections, limits, authorization, requests, latencies, memory, process.
fn broker_metrics(
    enc: &mut DescriptorEncoder<'_>,
    e: &Engine,
    server: ServerStats,
) -> Result<(), std::fmt::Error> {
    let m = e.metrics();
    gauge(
        enc,
        "flume_connections_open",
        "Open broker-protocol connections.",
        to_i64(server.connections_open as u64),
    )?;
    let (refused, http_refused) = m.connections_refused();
    counter(
        enc,
        "flume_connections_refused",
        "Connections closed at once by the connection limit.",
        refused,
    )?;
    counter(
        enc,
        "flume_http_connections_refused",
        "HTTP connections closed at once by the HTTP connection limit.",
        http_refused,
    )?;
    quota_metrics(enc, e.quotas().stats())?;
    cleaner_metrics(enc, m.cleaner.totals())?;
    family(
        enc,
        "flume_authorization_denied",
        "Requests (or parts of them) refused by the ACLs, by protocol, operation and resource type.",
        e.acl()
            .denied_counts()
            .into_iter()
            .map(|(protocol, operation, resource_type, n)| {
                (
                    [
                        ("protocol", protocol),
                        ("operation", operation),
                        ("resource_type", resource_type),
                    ],
                    ConstCounter::new(n),
                )
            }),
    )?;
    family(
        enc,
        "flume_requests",
        "Requests answered, by API and error code (the request's, else its first entry's or partition's).",
        m.request_counts().into_iter().map(|(api, error, n)| {
            (
                [("api", api.to_owned()), ("error", error.to_owned())],
                ConstCounter::new(n),
            )
        }),
    )?;
    {
        let mut me = enc.encode_descriptor(
            "flume_request_duration_seconds",
            "Time from a request's admission to its response, by API.",
            None,
            MetricType::Histogram,
        )?;
        for (api, l) in m.latency_histograms() {
            l.encode(me.encode_family(&[("api", api)])?)?;
        }
    }
    APPEND_LATENCY.encode(enc.encode_descriptor(
        "flume_append_duration_seconds",
        "Time to append one group commit to a partition log (process-wide).",
        None,
        MetricType::Histogram,
    )?)?;
    FSYNC_LATENCY.encode(enc.encode_descriptor(
        "flume_fsync_duration_seconds",
        "Time of one fdatasync of a segment (process-wide).",
        None,
        MetricType::Histogram,
    )?)?;
    gauge(
        enc,
        "flume_request_memory_bytes",
        "Bytes of produce requests being served (the request memory budget in use).",
        to_i64(server.memory.used as u64),
    )?;
    gauge(
        enc,
        "flume_request_memory_limit_bytes",
        "The request memory budget.",
        to_i64(server.memory.limit as u64),
    )?;
    gauge(
        enc,
        "flume_uptime_seconds",
        "Seconds since the broker started.",
        to_i64(m.uptime().as_secs()),
    )?;
    let (rss, fds) = process_stats();
    if let Some(rss) = rss {
        gauge(
            enc,
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            to_i64(rss),
        )?;
    }
    if let Some(fds) = fds {
        gauge(
            enc,
            "process_open_fds",
            "Number of open file descriptors.",
            to_i64(fds),
        )?;
    }
    Ok(())
}

/// The lag of one (group, topic, partition) with a committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupLag {
    /// Group id.
    pub group: String,
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Committed offset.
    pub committed: i64,
    /// End offset of the partition (-1 when the partition is gone).
    pub end: i64,
    /// `end - committed`, at least 0 (0 when the partition is gone).
    pub lag: i64,
}

/// Every committed offset (at most [`MAX_GROUP_SERIES`]) with its lag, sorted.
pub fn group_lags(e: &Engine) -> Vec<GroupLag> {
    let mut v: Vec<GroupLag> = e
        .groups()
        .committed_offsets(MAX_GROUP_SERIES)
        .into_iter()
        .map(|((group, topic, partition), committed)| {
            let offsets = e
                .records()
                .topic(&topic)
                .and_then(|t| t.partition(partition).map(|p| p.offsets()));
            let end = offsets.map_or(-1, |o| o.log_end);
            let lag = offsets.map_or(0, |o| {
                flume_protocol::lag(committed, o.log_start, o.log_end)
            });
            GroupLag {
                group,
                topic,
                partition,
                committed,
                end,
                lag,
            }
        })
        .collect();
    v.sort_by(|a, b| (&a.group, &a.topic, a.partition).cmp(&(&b.group, &b.topic, b.partition)));
    v
}

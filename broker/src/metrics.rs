//! Metrics and request tracing: counters that the serving code bumps at the
//! points where the work happens. This module is a leaf: every layer may
//! bump its counters, and it imports none of them. They are read at scrape
//! time by `http::scrape` (for Prometheus, through the official
//! `prometheus-client` encoders) and by `http::overview` (for the dashboard),
//! at the top.
//!
//! Layout:
//! - [`Latency`]: a fixed-bucket histogram of atomics (no lock, no allocation
//!   per observation) that encodes as a Prometheus histogram and gives
//!   percentiles for the page.
//! - [`PartitionStats`]: records and bytes in and out of one partition, held
//!   by the partition itself and bumped by its writer and by fetch.
//! - [`Metrics`]: the broker-wide counters (requests by API and error code,
//!   request latency by API, refused connections) and the recent errors.
//! - [`Tracked`]: one request's `tracing` span, clock and outcome; finishing
//!   it updates the metrics, so tracing and metrics come from the same point.
//! - [`APPEND_LATENCY`] and [`FSYNC_LATENCY`]: storage latencies, process-wide
//!   (the log engine has no broker handle; one broker runs per process).
//!
//! Every label is bounded: API (9 and "unknown"), error code (18 names),
//! topic and partition (bounded by `max_partitions`), group (bounded by the
//! offset store and the coordinator), and at most [`MAX_GROUP_SERIES`]
//! (group, topic, partition) series. No label carries a request id, a member
//! id or a key.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flume_protocol::{ApiKey, ErrorCode};
use futures::future::BoxFuture;
use futures::FutureExt;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::{MetricType, TypedMetric};
use tracing::Instrument;

/// Upper bounds of the latency buckets, in seconds (the last bucket is +Inf).
pub const LATENCY_BUCKETS: [f64; 17] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];
const NBUCKETS: usize = LATENCY_BUCKETS.len() + 1;

/// Most (group, topic, partition) series of committed offset and lag in one scrape.
pub const MAX_GROUP_SERIES: usize = 10_000;
/// Recent request errors kept for the dashboard.
pub const RECENT_ERRORS: usize = 50;

/// A latency histogram of atomics with fixed buckets ([`LATENCY_BUCKETS`]).
#[derive(Debug)]
pub struct Latency {
    buckets: [AtomicU64; NBUCKETS],
    sum_ns: AtomicU64,
}

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}

impl Latency {
    /// An empty histogram.
    pub const fn new() -> Self {
        Latency {
            buckets: [const { AtomicU64::new(0) }; NBUCKETS],
            sum_ns: AtomicU64::new(0),
        }
    }

    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(NBUCKETS - 1);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Per-bucket counts (not cumulative), the count and the sum in seconds.
    pub fn snapshot(&self) -> LatencySnapshot {
        let mut counts = [0u64; NBUCKETS];
        for (c, b) in counts.iter_mut().zip(&self.buckets) {
            *c = b.load(Ordering::Relaxed);
        }
        LatencySnapshot {
            counts,
            sum_seconds: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

/// A point-in-time copy of a [`Latency`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencySnapshot {
    /// Observations per bucket (the last is above the largest bound).
    pub counts: [u64; NBUCKETS],
    /// Sum of the observations, in seconds.
    pub sum_seconds: f64,
}

impl LatencySnapshot {
    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The `q` quantile (0..=1) in seconds, interpolated linearly inside its
    /// bucket (as Prometheus' `histogram_quantile` does); `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total as f64;
        let mut seen = 0u64;
        for (i, c) in self.counts.iter().enumerate() {
            if *c == 0 {
                continue;
            }
            if (seen + c) as f64 >= rank {
                let lo = if i == 0 { 0.0 } else { LATENCY_BUCKETS[i - 1] };
                let Some(hi) = LATENCY_BUCKETS.get(i) else {
                    return Some(lo);
                };
                let frac = ((rank - seen as f64) / *c as f64).clamp(0.0, 1.0);
                return Some(lo + (hi - lo) * frac);
            }
            seen += c;
        }
        LATENCY_BUCKETS.last().copied()
    }
}

impl TypedMetric for Latency {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Latency {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        let snap = self.snapshot();
        let mut cumulative = 0u64;
        let mut buckets = Vec::with_capacity(NBUCKETS);
        for (i, c) in snap.counts.iter().enumerate() {
            cumulative += c;
            buckets.push((
                LATENCY_BUCKETS.get(i).copied().unwrap_or(f64::MAX),
                cumulative,
            ));
        }
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            snap.sum_seconds,
            cumulative,
            &buckets,
            None,
        )
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// Time spent appending a group commit to a partition log (write, and fsync
/// when the policy is `always`).
pub static APPEND_LATENCY: Latency = Latency::new();
/// Time spent in fdatasync of a segment.
pub static FSYNC_LATENCY: Latency = Latency::new();

/// Records and bytes in and out of one partition.
#[derive(Debug, Default)]
pub struct PartitionStats {
    records_in: AtomicU64,
    bytes_in: AtomicU64,
    records_out: AtomicU64,
    bytes_out: AtomicU64,
}

/// A copy of [`PartitionStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionCounts {
    /// Records appended.
    pub records_in: u64,
    /// Bytes appended (stored format).
    pub bytes_in: u64,
    /// Records served by fetches.
    pub records_out: u64,
    /// Bytes served by fetches (stored format).
    pub bytes_out: u64,
}

impl PartitionStats {
    /// An append of `records` records, `bytes` bytes, succeeded.
    pub fn appended(&self, records: u64, bytes: usize) {
        self.records_in.fetch_add(records, Ordering::Relaxed);
        self.bytes_in.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// A fetch served `records` records, `bytes` bytes.
    pub fn served(&self, records: u64, bytes: usize) {
        self.records_out.fetch_add(records, Ordering::Relaxed);
        self.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// The current values.
    pub fn counts(&self) -> PartitionCounts {
        PartitionCounts {
            records_in: self.records_in.load(Ordering::Relaxed),
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            records_out: self.records_out.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
        }
    }
}

const NAPIS: usize = ApiKey::ALL.len() + 1;
/// Codes 0..=44 by number (Flume's codes end at 44, SECURITY_DISABLED),
/// the last row for every other code.
const NCODES: usize = 46;

/// A dense row per API key (the keys have gaps: 18-19 are unused), the
/// last row for keys the broker does not know.
fn api_index(api_key: i16) -> usize {
    ApiKey::from_i16(api_key)
        .and_then(|k| ApiKey::ALL.iter().position(|&a| a == k))
        .unwrap_or(NAPIS - 1)
}

/// The label value of an API row (`unknown` for the last).
pub fn api_name(index: usize) -> &'static str {
    ApiKey::ALL.get(index).map_or("unknown", |k| k.label())
}

fn code_index(code: ErrorCode) -> usize {
    match code {
        ErrorCode::Other(_) => NCODES - 1,
        c => usize::try_from(c.code()).map_or(NCODES - 1, |i| i.min(NCODES - 1)),
    }
}

fn code_name(index: usize) -> &'static str {
    if index == NCODES - 1 {
        return "UNRECOGNIZED";
    }
    ErrorCode::from_code(i16::try_from(index).unwrap_or(-1)).name()
}

/// One request that ended in an error, for the dashboard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentError {
    /// Wall-clock milliseconds since the Unix epoch.
    pub time_ms: i64,
    /// API label.
    pub api: &'static str,
    /// Error name.
    pub error: &'static str,
    /// Topic and partition the error is about, when it is about one.
    pub topic: Option<(String, i32)>,
}

/// Broker-wide counters, bumped by the server as requests finish.
#[derive(Debug)]
pub struct Metrics {
    requests: [[AtomicU64; NCODES]; NAPIS],
    latency: [Latency; NAPIS],
    connections_refused: AtomicU64,
    http_connections_refused: AtomicU64,
    recent: Mutex<VecDeque<RecentError>>,
    /// When a recent error happened (the broker's clock).
    clock: crate::clock::Clock,
    started: Instant,
    /// What the log cleaner did (see `storage::compact`).
    pub cleaner: CleanerCounters,
}

/// The log cleaner's totals since the broker started.
#[derive(Debug, Default)]
pub struct CleanerCounters {
    passes: AtomicU64,
    failures: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    records_removed: AtomicU64,
    tombstones_removed: AtomicU64,
    micros: AtomicU64,
    last_pass_ms: AtomicU64,
}

/// A copy of [`CleanerCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanerTotals {
    /// Passes that installed cleaned segments.
    pub passes: u64,
    /// Passes that failed (I/O, damage).
    pub failures: u64,
    /// Bytes of segments read.
    pub bytes_read: u64,
    /// Bytes of cleaned segments written.
    pub bytes_written: u64,
    /// Records removed (older values of a key, and tombstones).
    pub records_removed: u64,
    /// Tombstones removed.
    pub tombstones_removed: u64,
    /// Time spent in passes, in microseconds.
    pub micros: u64,
    /// Wall-clock time of the last pass's end, in ms since the epoch (0: none yet).
    pub last_pass_ms: u64,
}

impl CleanerCounters {
    /// A pass ended after `took` at `now_ms`: it read and wrote these
    /// bytes and removed `removed` records, `tombstones` of them tombstones.
    pub fn pass(
        &self,
        (read, written): (u64, u64),
        removed: u64,
        tombstones: u64,
        took: Duration,
        now_ms: i64,
    ) {
        self.passes.fetch_add(1, Ordering::Relaxed);
        self.bytes_read.fetch_add(read, Ordering::Relaxed);
        self.bytes_written.fetch_add(written, Ordering::Relaxed);
        self.records_removed.fetch_add(removed, Ordering::Relaxed);
        self.tombstones_removed
            .fetch_add(tombstones, Ordering::Relaxed);
        self.micros.fetch_add(
            u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.last_pass_ms
            .store(u64::try_from(now_ms).unwrap_or(0), Ordering::Relaxed);
    }

    /// A pass failed.
    pub fn failed(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    /// The totals now.
    pub fn totals(&self) -> CleanerTotals {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CleanerTotals {
            passes: get(&self.passes),
            failures: get(&self.failures),
            bytes_read: get(&self.bytes_read),
            bytes_written: get(&self.bytes_written),
            records_removed: get(&self.records_removed),
            tombstones_removed: get(&self.tombstones_removed),
            micros: get(&self.micros),
            last_pass_ms: get(&self.last_pass_ms),
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: [const { [const { AtomicU64::new(0) }; NCODES] }; NAPIS],
            latency: [const { Latency::new() }; NAPIS],
            connections_refused: AtomicU64::new(0),
            http_connections_refused: AtomicU64::new(0),
            recent: Mutex::new(VecDeque::with_capacity(RECENT_ERRORS)),
            clock: crate::clock::Clock::system(),
            started: Instant::now(),
            cleaner: CleanerCounters::default(),
        }
    }
}

impl Metrics {
    /// Counters whose recent errors carry `clock`'s wall time.
    pub fn with_clock(clock: crate::clock::Clock) -> Self {
        Metrics {
            clock,
            ..Metrics::default()
        }
    }

    /// Starts tracking a request: its span (API, request id; topic and
    /// partition are recorded as they become known) and its clock.
    pub fn begin(self: &Arc<Self>, api_key: i16, request_id: i32) -> Tracked {
        let api = api_index(api_key);
        let span = tracing::debug_span!(
            "request",
            api = api_name(api),
            request_id,
            topic = tracing::field::Empty,
            partition = tracing::field::Empty,
        );
        Tracked {
            metrics: Arc::clone(self),
            api,
            span,
            start: Instant::now(),
            note: Arc::new(Note::default()),
        }
    }

    /// A connection was turned away by the connection limit.
    pub fn connection_refused(&self) {
        self.connections_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// An HTTP connection was turned away by its connection limit.
    pub fn http_connection_refused(&self) {
        self.http_connections_refused
            .fetch_add(1, Ordering::Relaxed);
    }

    /// The request latency histogram of each API row (see [`api_name`]).
    pub fn latency_histograms(&self) -> impl Iterator<Item = (&'static str, &Latency)> {
        self.latency
            .iter()
            .enumerate()
            .map(|(i, l)| (api_name(i), l))
    }

    /// Connections refused so far (broker protocol, HTTP).
    pub fn connections_refused(&self) -> (u64, u64) {
        (
            self.connections_refused.load(Ordering::Relaxed),
            self.http_connections_refused.load(Ordering::Relaxed),
        )
    }

    /// Requests finished, as (api, error, count) for every non-zero count.
    pub fn request_counts(&self) -> Vec<(&'static str, &'static str, u64)> {
        let mut v = Vec::new();
        for (a, row) in self.requests.iter().enumerate() {
            for (c, n) in row.iter().enumerate() {
                let n = n.load(Ordering::Relaxed);
                if n > 0 {
                    v.push((api_name(a), code_name(c), n));
                }
            }
        }
        v
    }

    /// Request latency by API (every API, also those never called).
    pub fn latencies(&self) -> Vec<(&'static str, LatencySnapshot)> {
        self.latency
            .iter()
            .enumerate()
            .map(|(a, l)| (api_name(a), l.snapshot()))
            .collect()
    }

    /// The most recent request errors, oldest first.
    pub fn recent_errors(&self) -> Vec<RecentError> {
        self.recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    /// Time since the broker started.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    fn finish(&self, api: usize, error: ErrorCode, topic: Option<(String, i32)>, took: Duration) {
        if let Some(row) = self.requests.get(api) {
            row[code_index(error)].fetch_add(1, Ordering::Relaxed);
        }
        if let Some(l) = self.latency.get(api) {
            l.observe(took);
        }
        if !error.is_ok() {
            let mut recent = self
                .recent
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if recent.len() >= RECENT_ERRORS {
                recent.pop_front();
            }
            recent.push_back(RecentError {
                time_ms: self.clock.wall_ms(),
                api: api_name(api),
                error: error.name(),
                topic,
            });
        }
    }
}

/// The outcome of a request beyond its top-level error code: the first
/// per-entry or per-partition error, with the topic it concerns.
#[derive(Debug, Default)]
pub struct Note {
    code: AtomicI16,
    topic: Mutex<Option<(String, i32)>>,
}

impl Note {
    /// The request failed for `topic`/`partition` with `code` (the first failure is kept).
    pub fn failed(&self, code: ErrorCode, topic: &str, partition: i32) {
        if code.is_ok() {
            return;
        }
        if self
            .code
            .compare_exchange(0, code.code(), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            *self
                .topic
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some((topic.to_owned(), partition));
        }
    }
}

/// A request being served: its span, clock and outcome.
#[derive(Debug)]
pub struct Tracked {
    metrics: Arc<Metrics>,
    api: usize,
    span: tracing::Span,
    start: Instant,
    note: Arc<Note>,
}

impl Tracked {
    /// The request's span.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Records the topic and partition the request is about (the first one,
    /// for requests about several).
    pub fn about(&self, topic: &str, partition: i32) {
        self.span.record("topic", topic);
        self.span.record("partition", partition);
    }

    /// Where the branches report per-entry or per-partition failures.
    pub fn note(&self) -> Arc<Note> {
        Arc::clone(&self.note)
    }

    /// Wraps the response future: when it completes, the request's latency
    /// and outcome (the frame's top-level error code, else the first noted
    /// failure) go to the metrics and to a debug event in the span.
    pub fn finish(self, response: BoxFuture<'static, Vec<u8>>) -> BoxFuture<'static, Vec<u8>> {
        let span = self.span.clone();
        async move {
            let resp = response.await;
            // Response frame: size i32, request id i32, error code i16, body.
            let top = resp.get(8..10).map_or(ErrorCode::None, |b| {
                ErrorCode::from_code(i16::from_be_bytes([b[0], b[1]]))
            });
            let noted = ErrorCode::from_code(self.note.code.load(Ordering::Acquire));
            let error = if top.is_ok() { noted } else { top };
            let topic = if error.is_ok() || !top.is_ok() {
                None
            } else {
                self.note
                    .topic
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take()
            };
            let took = self.start.elapsed();
            tracing::debug!(
                error = error.name(),
                micros = took.as_micros() as u64,
                "request done"
            );
            self.metrics.finish(self.api, error, topic, took);
            resp
        }
        .instrument(span)
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_inside_buckets() {
        let l = Latency::new();
        assert_eq!(l.snapshot().quantile(0.5), None);
        for _ in 0..100 {
            l.observe(Duration::from_micros(700)); // bucket (0.0005, 0.001]
        }
        let s = l.snapshot();
        assert_eq!(s.count(), 100);
        let p50 = s.quantile(0.5).unwrap();
        assert!((0.0005..=0.001).contains(&p50), "{p50}");
        l.observe(Duration::from_secs(100)); // past the last bound
        assert_eq!(l.snapshot().quantile(1.0), Some(10.0));
    }

    #[test]
    fn codes_and_apis_have_bounded_indices() {
        assert_eq!(code_index(ErrorCode::Other(999)), NCODES - 1);
        assert_eq!(code_index(ErrorCode::Other(-3)), NCODES - 1);
        assert_eq!(code_name(code_index(ErrorCode::QueueFull)), "QUEUE_FULL");
        // Every code Flume answers has its own row.
        for c in [
            ErrorCode::NotAssigned,
            ErrorCode::AuthenticationFailed,
            ErrorCode::AuthorizationFailed,
            ErrorCode::SecurityDisabled,
        ] {
            assert_eq!(code_name(code_index(c)), c.name(), "{c:?}");
        }
        assert_eq!(api_name(api_index(-1)), "unknown");
        assert_eq!(api_name(api_index(0)), "produce");
        assert_eq!(api_name(api_index(8)), "metadata");
        assert_eq!(api_name(api_index(13)), "delete_group");
        assert_eq!(api_name(api_index(15)), "describe_group");
        assert_eq!(api_name(api_index(99)), "unknown");
        // Every API key the protocol knows has its own label (add it to the table).
        let mut seen = std::collections::HashSet::new();
        for k in 0..i16::MAX {
            if flume_protocol::ApiKey::from_i16(k).is_some() {
                assert_ne!(api_name(api_index(k)), "unknown", "api key {k}");
                assert!(seen.insert(api_index(k)), "api key {k} shares a row");
            }
        }
        assert_eq!(seen.len(), NAPIS - 1, "a row no key uses");
        assert_eq!(
            code_name(code_index(ErrorCode::UnknownGroup)),
            "UNKNOWN_GROUP"
        );
    }

    #[test]
    fn recent_errors_are_bounded() {
        let m = Metrics::default();
        for _ in 0..RECENT_ERRORS + 7 {
            m.finish(0, ErrorCode::QueueFull, None, Duration::ZERO);
        }
        assert_eq!(m.recent_errors().len(), RECENT_ERRORS);
        assert_eq!(
            m.request_counts(),
            vec![("produce", "QUEUE_FULL", (RECENT_ERRORS + 7) as u64)]
        );
    }
}

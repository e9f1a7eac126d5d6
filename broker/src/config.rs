//! Broker and topic settings. A topic's settings are stored in its directory
//! (`topic.conf`, `key=value` lines) and reloaded on restart.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use flume_protocol::ErrorCode;
pub use flume_rt::BusyPoll;

use crate::clock::Clock;
use crate::error::BrokerError;
use crate::storage::FsyncPolicy;

pub mod broker_named;
pub mod named;
pub use named::{CleanupPolicy, CompressionType, ConfigError, TimestampType};

/// What a producer meets when a partition queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backpressure {
    /// Wait for room; over TCP the connection stops reading further requests.
    Block,
    /// Fail at once with QUEUE_FULL.
    Reject,
}

impl std::str::FromStr for Backpressure {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "block" => Ok(Backpressure::Block),
            "reject" => Ok(Backpressure::Reject),
            other => Err(format!(
                "backpressure must be block or reject, not {other:?}"
            )),
        }
    }
}

impl std::fmt::Display for Backpressure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backpressure::Block => "block",
            Backpressure::Reject => "reject",
        })
    }
}

/// Most partitions one topic may have.
pub const MAX_PARTITIONS_PER_TOPIC: u32 = 10_000;
/// Largest partition queue capacity (queues allocate their slots as requests arrive).
pub const MAX_PENDING_LIMIT: usize = 100_000;
/// Smallest `segment_bytes` a CREATE_TOPIC request may ask for (as `--segment-bytes`).
pub const MIN_REQUEST_SEGMENT_BYTES: u64 = 1024;
/// Largest `segment_bytes` (2 GiB: positions in a segment must fit the index's u32).
pub const MAX_SEGMENT_BYTES: u64 = crate::storage::log::MAX_SEGMENT_BYTES;

/// Kafka's default `max.message.bytes` (1 MiB and a batch header).
pub const DEFAULT_MAX_MESSAGE_BYTES: u32 = 1_048_588;
/// Kafka's default `segment.ms` (7 days).
pub const DEFAULT_SEGMENT_MS: u64 = 604_800_000;
/// Kafka's default `delete.retention.ms` (1 day).
pub const DEFAULT_DELETE_RETENTION_MS: u64 = 86_400_000;

/// The Kafka configs with a typed field in [`TopicConfig`], stored in
/// `topic.conf` by their Kafka names.
const TYPED_CONFIGS: [&str; 9] = [
    "cleanup.policy",
    "compression.type",
    "delete.retention.ms",
    "max.compaction.lag.ms",
    "max.message.bytes",
    "message.timestamp.type",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "segment.ms",
];

/// The Kafka configs stored in `topic.conf` under Flume's own keys
/// (`retention_ms`, ...), as before named configs.
const FLUME_KEYED_CONFIGS: [&str; 3] = ["retention.bytes", "retention.ms", "segment.bytes"];

/// Settings of one topic: the partition count is fixed at creation, the
/// rest may change while it runs ([`crate::engine::Admin::alter_topic`],
/// [`crate::engine::Admin::alter_topic_configs`]). Kafka's topic configs are set
/// and read by name through [`TopicConfig::set_named`] and
/// [`TopicConfig::named_value`] ([`named::TOPIC_CONFIGS`] lists them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfig {
    /// Number of partitions.
    pub partitions: u32,
    /// Capacity of each partition's queue, in pending append requests
    /// (one produce entry for the partition, or one embedded record).
    pub max_pending: usize,
    /// Retention by size per partition, in bytes of segment files.
    pub retention_bytes: Option<u64>,
    /// Retention by age, by the newest timestamp in a segment.
    pub retention_ms: Option<u64>,
    /// Segment size.
    pub segment_bytes: u64,
    /// Behaviour when a partition queue is full.
    pub backpressure: Backpressure,
    /// `cleanup.policy`: whether retention deletes and whether the log is compacted.
    pub cleanup_policy: CleanupPolicy,
    /// `segment.ms`: the age at which the active segment is rolled (`None`:
    /// never). Stored and reported; segments are rolled by size only so far.
    pub segment_ms: Option<u64>,
    /// `min.compaction.lag.ms`: a record is not compacted away before this age.
    pub min_compaction_lag_ms: u64,
    /// `max.compaction.lag.ms`: a record is compacted by this age (`None`: no bound).
    pub max_compaction_lag_ms: Option<u64>,
    /// `delete.retention.ms`: how long a tombstone outlives compaction.
    pub delete_retention_ms: u64,
    /// `min.cleanable.dirty.ratio` in parts per million (0..=1 000 000), so
    /// the settings stay `Eq`: see [`TopicConfig::min_cleanable_dirty_ratio`].
    pub min_cleanable_dirty_ratio_ppm: u32,
    /// `max.message.bytes`: the largest record batch (Kafka) or record
    /// (Flume, its 16-byte header included) a produce may store.
    pub max_message_bytes: u32,
    /// `message.timestamp.type`: with LogAppendTime the broker gives each
    /// record its append time.
    pub message_timestamp_type: TimestampType,
    /// `compression.type`: stored and reported (records are stored uncompressed).
    pub compression_type: CompressionType,
    /// The other configs set on the topic that are accepted and reported
    /// only (see [`named::Support`]), by name, their values normalised.
    pub other_configs: BTreeMap<String, String>,
    /// The configs set on this topic by name (its overrides): DescribeConfigs
    /// reports them as the topic's own rather than the broker's defaults.
    pub overrides: BTreeSet<String>,
}

impl Default for TopicConfig {
    fn default() -> Self {
        TopicConfig {
            partitions: 3,
            max_pending: 1024,
            retention_bytes: None,
            retention_ms: None,
            segment_bytes: 64 * 1024 * 1024,
            backpressure: Backpressure::Block,
            cleanup_policy: CleanupPolicy::Delete,
            segment_ms: Some(DEFAULT_SEGMENT_MS),
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: None,
            delete_retention_ms: DEFAULT_DELETE_RETENTION_MS,
            min_cleanable_dirty_ratio_ppm: 500_000,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            message_timestamp_type: TimestampType::CreateTime,
            compression_type: CompressionType::Producer,
            other_configs: BTreeMap::new(),
            overrides: BTreeSet::new(),
        }
    }
}

impl TopicConfig {
    /// The file a topic's settings live in.
    pub fn path(topic_dir: &Path) -> PathBuf {
        topic_dir.join("topic.conf")
    }

    /// The `key=value` text stored on disk: Flume's own keys, then every
    /// served Kafka config by its Kafka name, the accepted-only ones set on
    /// the topic, and `overrides` (the names set on the topic itself).
    pub fn to_text(&self) -> String {
        use std::fmt::Write as _;
        let opt = |v: Option<u64>| v.map_or_else(|| "none".to_owned(), |v| v.to_string());
        let mut text = format!(
            "partitions={}\nmax_pending={}\nretention_bytes={}\nretention_ms={}\nsegment_bytes={}\nbackpressure={}\n",
            self.partitions,
            self.max_pending,
            opt(self.retention_bytes),
            opt(self.retention_ms),
            self.segment_bytes,
            self.backpressure
        );
        for name in TYPED_CONFIGS {
            let v = self.named_value(name).unwrap_or_default();
            let _ = writeln!(text, "{name}={v}");
        }
        for (k, v) in &self.other_configs {
            let _ = writeln!(text, "{k}={v}");
        }
        let overrides: Vec<&str> = self.overrides.iter().map(String::as_str).collect();
        let _ = writeln!(text, "overrides={}", overrides.join(","));
        text
    }

    /// Parses [`TopicConfig::to_text`]; unknown keys are ignored (newer versions).
    ///
    /// # Errors
    /// A value that does not parse.
    pub fn from_text(text: &str) -> Result<Self, String> {
        let mut c = TopicConfig::default();
        let num = |k: &str, v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{k}: {v:?} is not a number"))
        };
        let opt = |k: &str, v: &str| {
            if v == "none" {
                Ok(None)
            } else {
                num(k, v).map(Some)
            }
        };
        for line in text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let Some((k, v)) = line.split_once('=') else {
                return Err(format!("line {line:?} is not key=value"));
            };
            match k {
                "partitions" => {
                    c.partitions =
                        u32::try_from(num(k, v)?).map_err(|_| "partitions too large".to_owned())?
                }
                "max_pending" => {
                    c.max_pending = usize::try_from(num(k, v)?)
                        .map_err(|_| "max_pending too large".to_owned())?
                }
                "retention_bytes" => c.retention_bytes = opt(k, v)?,
                "retention_ms" => c.retention_ms = opt(k, v)?,
                "segment_bytes" => {
                    // Older brokers stored what CREATE_TOPIC asked for (even 0); the
                    // log always clamped it, so keep opening such topics.
                    let n = num(k, v)?;
                    c.segment_bytes = n.clamp(1, MAX_SEGMENT_BYTES);
                    if c.segment_bytes != n {
                        tracing::warn!(
                            segment_bytes = n,
                            used = c.segment_bytes,
                            "stored segment_bytes out of range; using the nearest valid value"
                        );
                    }
                }
                "backpressure" => c.backpressure = v.parse()?,
                "overrides" => {
                    c.overrides = v
                        .split(',')
                        .filter(|n| named::topic_config(n).is_some())
                        .map(str::to_owned)
                        .collect();
                }
                // Kafka's names; a name this version does not know is ignored.
                _ if named::topic_config(k).is_some() => {
                    c.apply_named(k, v).map_err(|e| e.to_string())?
                }
                _ => {}
            }
        }
        c.check()?;
        Ok(c)
    }

    /// Sets a config by its Kafka name and marks it as set on the topic.
    ///
    /// # Errors
    /// [`ConfigError`]: an unknown name or a value out of its range, named
    /// with the value.
    pub fn set_named(&mut self, name: &str, value: &str) -> Result<(), ConfigError> {
        self.apply_named(name, value)?;
        self.overrides.insert(name.to_owned());
        Ok(())
    }

    /// Takes a config back to its value in `defaults` (the broker's default
    /// topic settings) and forgets it was set on the topic.
    ///
    /// # Errors
    /// [`ConfigError::Unknown`].
    pub fn reset_named(&mut self, name: &str, defaults: &TopicConfig) -> Result<(), ConfigError> {
        let def = named::topic_config(name).ok_or_else(|| ConfigError::Unknown {
            name: name.to_owned(),
            value: String::new(),
        })?;
        if TYPED_CONFIGS.contains(&def.name) || FLUME_KEYED_CONFIGS.contains(&def.name) {
            let v = defaults.named_value(name).unwrap_or_default();
            self.apply_named(name, &v)?;
        } else {
            match defaults.other_configs.get(name) {
                Some(v) => self.other_configs.insert(name.to_owned(), v.clone()),
                None => self.other_configs.remove(name),
            };
        }
        self.overrides.remove(name);
        Ok(())
    }

    /// Sets a config by name without marking it as set on the topic.
    fn apply_named(&mut self, name: &str, value: &str) -> Result<(), ConfigError> {
        use named::{int_in, long_at_least};
        let def = named::topic_config(name).ok_or_else(|| ConfigError::Unknown {
            name: name.to_owned(),
            value: value.to_owned(),
        })?;
        let unsigned = |v: i64| u64::try_from(v).unwrap_or(0);
        let invalid = |why: String| ConfigError::invalid(name, value, why);
        match name {
            "cleanup.policy" => self.cleanup_policy = value.parse().map_err(invalid)?,
            "compression.type" => self.compression_type = value.trim().parse().map_err(invalid)?,
            "message.timestamp.type" => {
                self.message_timestamp_type = value.trim().parse().map_err(invalid)?
            }
            "retention.ms" => {
                let v = long_at_least(name, value, -1)?;
                self.retention_ms = (v >= 0).then(|| unsigned(v));
            }
            "retention.bytes" => {
                let v = long_at_least(name, value, -1)?;
                self.retention_bytes = (v >= 0).then(|| unsigned(v));
            }
            "segment.bytes" => {
                let v = int_in(
                    name,
                    value,
                    i64::try_from(MIN_REQUEST_SEGMENT_BYTES).unwrap_or(1024),
                    i64::try_from(MAX_SEGMENT_BYTES).unwrap_or(i64::MAX),
                )?;
                self.segment_bytes = unsigned(v);
            }
            "segment.ms" => {
                let v = long_at_least(name, value, 1)?;
                self.segment_ms = (v < i64::MAX).then(|| unsigned(v));
            }
            "min.compaction.lag.ms" => {
                self.min_compaction_lag_ms = unsigned(long_at_least(name, value, 0)?)
            }
            "max.compaction.lag.ms" => {
                let v = long_at_least(name, value, 1)?;
                self.max_compaction_lag_ms = (v < i64::MAX).then(|| unsigned(v));
            }
            "delete.retention.ms" => {
                self.delete_retention_ms = unsigned(long_at_least(name, value, 0)?)
            }
            "min.cleanable.dirty.ratio" => match value.trim().parse::<f64>() {
                Ok(r) if (0.0..=1.0).contains(&r) => {
                    // In range, so the product is 0..=1e6 and fits a u32.
                    self.min_cleanable_dirty_ratio_ppm = (r * 1e6).round() as u32;
                }
                _ => return Err(invalid("it must be a number in 0..=1".to_owned())),
            },
            "max.message.bytes" => {
                let v = int_in(name, value, 0, i64::from(i32::MAX))?;
                self.max_message_bytes = u32::try_from(v).unwrap_or(u32::MAX);
            }
            _ => {
                let v = named::check_other(def, value)?;
                self.other_configs.insert(name.to_owned(), v);
            }
        }
        Ok(())
    }

    /// A config's value by its Kafka name, as DescribeConfigs reports it
    /// (-1 for no retention limit); `None` for a name that is not a topic config.
    pub fn named_value(&self, name: &str) -> Option<String> {
        let long = |v: Option<u64>, none: i64| {
            v.map_or(none, |v| i64::try_from(v).unwrap_or(i64::MAX))
                .to_string()
        };
        named::topic_config(name)?;
        Some(match name {
            "cleanup.policy" => self.cleanup_policy.to_string(),
            "compression.type" => self.compression_type.to_string(),
            "message.timestamp.type" => self.message_timestamp_type.to_string(),
            "retention.ms" => long(self.retention_ms, -1),
            "retention.bytes" => long(self.retention_bytes, -1),
            "segment.bytes" => self.segment_bytes.to_string(),
            "segment.ms" => long(self.segment_ms, i64::MAX),
            "min.compaction.lag.ms" => self.min_compaction_lag_ms.to_string(),
            "max.compaction.lag.ms" => long(self.max_compaction_lag_ms, i64::MAX),
            "delete.retention.ms" => self.delete_retention_ms.to_string(),
            "min.cleanable.dirty.ratio" => self.min_cleanable_dirty_ratio().to_string(),
            "max.message.bytes" => self.max_message_bytes.to_string(),
            other => self
                .other_configs
                .get(other)
                .cloned()
                .unwrap_or_else(|| named::other_default(other).to_owned()),
        })
    }

    /// Every topic config by name with its value, sorted by name.
    pub fn named_values(&self) -> Vec<(&'static str, String)> {
        named::TOPIC_CONFIGS
            .iter()
            .map(|d| (d.name, self.named_value(d.name).unwrap_or_default()))
            .collect()
    }

    /// `min.cleanable.dirty.ratio`: the share of a log not yet compacted
    /// that makes it eligible for compaction, 0..=1.
    pub fn min_cleanable_dirty_ratio(&self) -> f64 {
        f64::from(self.min_cleanable_dirty_ratio_ppm) / 1e6
    }

    /// The retention partitions apply: `(bytes, ms)`, both `None` when the
    /// cleanup policy does not delete (a compact-only topic keeps every
    /// segment; compaction alone bounds it).
    pub fn log_retention(&self) -> (Option<u64>, Option<u64>) {
        if self.cleanup_policy.deletes() {
            (self.retention_bytes, self.retention_ms)
        } else {
            (None, None)
        }
    }

    /// Checks the settings against the hard limits.
    ///
    /// # Errors
    /// A message naming the setting.
    pub fn check(&self) -> Result<(), String> {
        if self.partitions == 0 || self.partitions > MAX_PARTITIONS_PER_TOPIC {
            return Err(format!(
                "partitions is {}, it must be 1..={MAX_PARTITIONS_PER_TOPIC}",
                self.partitions
            ));
        }
        if self.max_pending == 0 || self.max_pending > MAX_PENDING_LIMIT {
            return Err(format!(
                "max_pending is {}, it must be 1..={MAX_PENDING_LIMIT}",
                self.max_pending
            ));
        }
        if self.segment_bytes == 0 || self.segment_bytes > MAX_SEGMENT_BYTES {
            return Err(format!(
                "segment_bytes is {}, it must be 1..={MAX_SEGMENT_BYTES}",
                self.segment_bytes
            ));
        }
        if let Some(max) = self.max_compaction_lag_ms {
            if self.min_compaction_lag_ms > max {
                return Err(format!(
                    "min.compaction.lag.ms is {}, above max.compaction.lag.ms {max}",
                    self.min_compaction_lag_ms
                ));
            }
        }
        Ok(())
    }

    /// The settings a CREATE_TOPIC request asks for: -1 in a field takes the
    /// value from `defaults`, any other value must be in the field's range
    /// (docs/protocol.md lists them).
    ///
    /// # Errors
    /// A message naming the field, its value and its range.
    pub fn from_request(
        defaults: &TopicConfig,
        req: &flume_protocol::CreateTopicRequest,
    ) -> Result<TopicConfig, String> {
        // None for -1 (take the default), the value when in lo..=hi, else an error.
        let field = |name: &str, v: i64, lo: u64, hi: u64| -> Result<Option<u64>, String> {
            if v == -1 {
                return Ok(None);
            }
            match u64::try_from(v) {
                Ok(u) if (lo..=hi).contains(&u) => Ok(Some(u)),
                _ => Err(format!(
                    "{name} is {v}, it must be -1 (broker default) or {lo}..={hi}"
                )),
            }
        };
        let any = u64::try_from(i64::MAX).unwrap_or(u64::MAX);
        let max_partitions = u64::from(MAX_PARTITIONS_PER_TOPIC);
        let max_pending_limit = u64::try_from(MAX_PENDING_LIMIT).unwrap_or(u64::MAX);
        let mut overrides = BTreeSet::new();
        for (name, v) in [
            ("retention.bytes", req.retention_bytes),
            ("retention.ms", req.retention_ms),
            ("segment.bytes", req.segment_bytes),
        ] {
            if v != -1 {
                overrides.insert(name.to_owned());
            }
        }
        Ok(TopicConfig {
            partitions: match field("partitions", i64::from(req.partitions), 1, max_partitions)? {
                Some(v) => u32::try_from(v).unwrap_or(MAX_PARTITIONS_PER_TOPIC),
                None => defaults.partitions,
            },
            max_pending: match field("max_pending", i64::from(req.max_pending), 1, max_pending_limit)? {
                Some(v) => usize::try_from(v).unwrap_or(MAX_PENDING_LIMIT),
                None => defaults.max_pending,
            },
            retention_bytes: field("retention_bytes", req.retention_bytes, 0, any)?
                .or(defaults.retention_bytes),
            retention_ms: field("retention_ms", req.retention_ms, 0, any)?.or(defaults.retention_ms),
            segment_bytes: field(
                "segment_bytes",
                req.segment_bytes,
                MIN_REQUEST_SEGMENT_BYTES,
                MAX_SEGMENT_BYTES,
            )?
            .unwrap_or(defaults.segment_bytes),
            backpressure: match req.backpressure {
                -1 => defaults.backpressure,
                0 => Backpressure::Block,
                1 => Backpressure::Reject,
                other => {
                    return Err(format!(
                        "backpressure is {other}, it must be -1 (broker default), 0 (block) or 1 (reject)"
                    ))
                }
            },
            overrides,
            ..defaults.for_new_topic()
        })
    }

    /// These settings as the start of a new topic's: the broker's defaults
    /// with nothing marked as set on the topic.
    pub fn for_new_topic(&self) -> TopicConfig {
        TopicConfig {
            overrides: BTreeSet::new(),
            ..self.clone()
        }
    }
}

/// Broker settings. `BrokerConfig::new(dir)` gives the defaults of a bare
/// `flume-cli broker`.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Data directory.
    pub data_dir: PathBuf,
    /// Address to listen on (`127.0.0.1:0` picks a free port).
    pub listen: String,
    /// Settings for topics created without explicit ones (auto-create, defaults).
    pub default_topic: TopicConfig,
    /// Create a topic on first produce or group join (FETCH, METADATA and
    /// OFFSET_* never create one: they answer UNKNOWN_TOPIC).
    pub auto_create_topics: bool,
    /// When appended data is fsynced.
    pub fsync: FsyncPolicy,
    /// Sparse index spacing.
    pub index_interval_bytes: u64,
    /// Verify every sealed segment's records on open.
    pub verify_on_open: bool,
    /// Largest request frame accepted.
    pub max_frame_bytes: usize,
    /// Largest single record, counting its 16-byte header (default 1 MiB,
    /// [`flume_protocol::record::DEFAULT_MAX_RECORD_BYTES`]; the producer's default is the same).
    pub max_record_bytes: usize,
    /// Most concurrent connections; more are closed at once.
    pub max_connections: usize,
    /// Most partitions over all topics (default 100 000). An idle partition
    /// costs a few KB of memory and no file descriptor or task (see the
    /// README's Scale section); a topic that would go past it gets LIMIT_REACHED.
    pub max_partitions: u64,
    /// Most segment files kept open at once over all partitions (default
    /// 16 384, `storage::files::DEFAULT_MAX_OPEN_FILES`): an LRU,
    /// files are opened again on demand. Logs with an fsync policy other
    /// than `never` keep their active segment's two files open besides.
    /// The broker needs about `max_open_files + max_connections + 64`
    /// descriptors ([`BrokerConfig::fd_needed`]).
    pub max_open_files: usize,
    /// Most requests being served at once per connection; further requests
    /// are not read until one completes.
    pub max_in_flight_per_connection: usize,
    /// Most bytes of requests being served over all connections: frames,
    /// decoded requests and responses not yet written (see [`crate::budget`]);
    /// past it, connections stop reading until requests complete. At least
    /// `max_frame_bytes`.
    pub max_request_memory: usize,
    /// Most bytes of requests one connection may hold within
    /// `max_request_memory` (default 32 MiB); past it that connection reads
    /// nothing more until its requests complete and its responses are written,
    /// so a peer that does not read its responses holds at most this much
    /// (plus one response being built). Below `max_frame_bytes`, that is used.
    pub max_connection_memory: usize,
    /// Most consumer groups with members at once (default 10 000); a join that
    /// would create one more gets LIMIT_REACHED.
    pub max_groups: usize,
    /// Most members of one group (default 1 000); a new member past it gets
    /// LIMIT_REACHED.
    pub max_members_per_group: usize,
    /// How long a Kafka consumer group that has no members waits for more to
    /// join before it forms its first generation (Kafka's
    /// `group.initial.rebalance.delay.ms`, 3 s by default): members starting
    /// together get their partitions in one rebalance instead of one per
    /// arrival. Each member that joins meanwhile extends the wait by as much,
    /// up to the group's rebalance timeout. Groups of Flume's protocol form
    /// at once (the broker assigns and moves partitions itself).
    pub group_initial_rebalance_delay: Duration,
    /// The shortest session timeout a group member may ask for (Kafka's
    /// `group.min.session.timeout.ms`, 6 s by default; test setups lower
    /// it). A Kafka JoinGroup below it gets INVALID_SESSION_TIMEOUT; a
    /// Flume JOIN_GROUP below it gets this session instead.
    pub group_min_session_timeout: Duration,
    /// The longest session timeout a group member may ask for (Kafka's
    /// `group.max.session.timeout.ms`, 30 min by default): a Kafka JoinGroup
    /// above it gets INVALID_SESSION_TIMEOUT; a Flume JOIN_GROUP above it
    /// gets this session instead.
    pub group_max_session_timeout: Duration,
    /// The transaction coordinator's bounds and timeouts (see [`TransactionSettings`]).
    pub transactions: TransactionSettings,
    /// Share groups (queues): record locks, the delivery limit, where a new
    /// group starts, sessions and bounds (see [`ShareSettings`]).
    pub share: ShareSettings,
    /// Consumer-protocol groups (KIP-848): sessions, heartbeats and bounds.
    pub consumer_groups: ConsumerGroupLimits,
    /// Most topics one JOIN_GROUP may list, duplicates included (default 1 000);
    /// a longer list gets INVALID_REQUEST before its names are decoded.
    pub max_topics_per_join: usize,
    /// Most bytes one partition writer appends in one group commit.
    pub writer_batch_bytes: usize,
    /// A connection that sends part of a frame and then nothing for this long is closed.
    pub read_timeout: Duration,
    /// A Kafka connection that sends no request for this long is closed
    /// (Kafka's `connections.max.idle.ms`, 10 minutes): clients keep idle
    /// connections to the coordinator and to each leader. Until it has logged
    /// in (`--auth required`), `read_timeout` bounds it instead. Flume's own
    /// connections are never closed for being idle.
    pub connections_max_idle: Duration,
    /// A connection whose responses cannot be written for this long is closed.
    pub write_timeout: Duration,
    /// How often group session expiry and rebalance deadlines are checked
    /// (and, under an fsync policy other than `never`, the interval fsync).
    pub tick: Duration,
    /// How often retention (and under `--fsync never` the offsets check) runs;
    /// it runs on the first tick at least this long after the last run.
    pub maintenance_interval: Duration,
    /// The time source for the coordinator and retention. Tests pass
    /// [`Clock::manual`] and advance it instead of sleeping.
    pub clock: Clock,
    /// Time allowed for a graceful shutdown to drain.
    pub shutdown_timeout: Duration,
    /// After answering, a connection keeps trying to read its next request
    /// for a while (yielding to other tasks between tries) before it parks
    /// until the socket is readable: a request that comes within microseconds
    /// then costs no wake-up of a parked thread. [`BusyPoll::Adaptive`] spins
    /// only as long as spinning has recently paid off on that connection and
    /// falls to zero for a slow or idle peer (see [`flume_rt::spin`]);
    /// [`BusyPoll::Fixed`] always spins its time. The default is
    /// [`BusyPoll::Off`]: spinning connections delay the broker's other work
    /// (on a quiet 2-core VM, `perf e2e` at 50k records/s: p50 0.19 ms off,
    /// 1.0 ms adaptive), while the client's own adaptive spinning (on by
    /// default) already doubles one-at-a-time throughput.
    pub busy_poll: BusyPoll,
    /// Open a data directory that is not empty and not a Flume data directory
    /// (no `.flume-data-dir` marker, no topic with `topic.conf`, no
    /// `__consumer_offsets`). Off by default: such a directory is refused, so
    /// a mistyped `--data` cannot scatter files among someone else's.
    pub allow_foreign_data_dir: bool,
    /// Address of the HTTP server (`/metrics`, `/api/overview`, `/healthz`,
    /// the dashboard at `/`); `None` (the default) serves no HTTP.
    pub http_listen: Option<String>,
    /// Address of the Kafka wire-protocol listener (`host:port`), if any (see [`crate::kafka`]).
    pub kafka_listen: Option<String>,
    /// `host:port` the Kafka listener's Metadata advertises; by default the bound address.
    pub kafka_advertised: Option<String>,
    /// Most idempotent producers whose sequences one partition tracks
    /// (default 1 000); a new one evicts the least recently used (see
    /// [`crate::partition::producers`]).
    pub max_producers_per_partition: usize,
    /// Most idempotent producer entries over all partitions (default 100 000,
    /// a few hundred bytes each).
    pub max_producer_states: usize,
    /// A producer that has not produced to a partition for this long is
    /// forgotten there (default 1 day, Kafka's `producer.id.expiration.ms`),
    /// by [`BrokerConfig::clock`].
    pub producer_expiry: Duration,
    /// The server certificate chain (PEM): with [`BrokerConfig::tls_key`], every
    /// port (Flume, Kafka, HTTP) speaks TLS 1.2 or 1.3 only. Reloaded by
    /// [`crate::Broker::reload_tls`] (SIGHUP in flume-cli).
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of [`BrokerConfig::tls_cert`].
    pub tls_key: Option<PathBuf>,
    /// CA certificates (PEM): when set, every client must present a
    /// certificate signed by one of them (mTLS), and its subject becomes the
    /// connection's principal. Needs `tls_cert`.
    pub tls_client_ca: Option<PathBuf>,
    /// Authentication on the Flume listener (`off` by default; see
    /// [`crate::security::auth`]). Users live in `<data>/__users`.
    pub auth: crate::security::auth::AuthMode,
    /// Users who may manage users (USERS requests) once logged in. The first
    /// admin is added offline (`flume-cli users add NAME --data DIR`) or with
    /// [`crate::Broker::add_user`].
    pub admin_users: Vec<String>,
    /// Enforce ACLs (`--authorizer on`; see [`crate::security::acl`]): off by
    /// default, every client may do everything. On, a request is served only
    /// if an ACL in `<data>/__acls` allows it (admins may do everything).
    pub authorizer: bool,
    /// Most connections one principal may have open over the Flume and Kafka
    /// listeners (the anonymous principal: per peer IP address); see
    /// [`crate::security::quota`]. `None` (the default): `max_connections`,
    /// so one principal (or one client host, anonymous) may hold every
    /// connection, as Kafka's `max.connections.per.ip` allows; a
    /// multi-tenant broker sets it lower.
    pub max_connections_per_principal: Option<usize>,
    /// Produce bytes per second each principal may send before it is
    /// throttled (`None`: no produce quota, the default).
    pub produce_quota_bytes_per_sec: Option<u64>,
    /// The log cleaner's bounds: its key map's memory and its I/O rate
    /// (see `storage::compact`).
    pub cleaner: crate::storage::CleanerLimits,
}

impl BrokerConfig {
    /// The connection limit per principal in force:
    /// `max_connections_per_principal`, or `max_connections` when unset.
    pub fn connections_per_principal(&self) -> usize {
        self.max_connections_per_principal
            .unwrap_or(self.max_connections)
    }

    /// Defaults with the given data directory.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        BrokerConfig {
            data_dir: data_dir.into(),
            listen: "127.0.0.1:9092".into(),
            default_topic: TopicConfig::default(),
            auto_create_topics: true,
            fsync: FsyncPolicy::Never,
            index_interval_bytes: 4096,
            verify_on_open: false,
            max_frame_bytes: flume_protocol::frame::DEFAULT_MAX_FRAME_BYTES,
            max_record_bytes: flume_protocol::record::DEFAULT_MAX_RECORD_BYTES,
            max_connections: 10_000,
            max_partitions: 100_000,
            max_open_files: crate::storage::files::DEFAULT_MAX_OPEN_FILES,
            max_in_flight_per_connection: 256,
            max_request_memory: 64 * 1024 * 1024,
            max_connection_memory: 32 * 1024 * 1024,
            max_groups: 10_000,
            group_initial_rebalance_delay: Duration::from_secs(3),
            group_min_session_timeout: Duration::from_millis(
                6_000, /* Kafka's group.min.session.timeout.ms (domain::CLIENT_SESSION_TIMEOUT_MS) */
            ),
            group_max_session_timeout: Duration::from_millis(
                1_800_000, /* Kafka's group.max.session.timeout.ms */
            ),
            transactions: TransactionSettings::default(),
            share: ShareSettings::default(),
            consumer_groups: ConsumerGroupLimits::default(),
            max_members_per_group: 1_000,
            max_topics_per_join: 1_000,
            writer_batch_bytes: 4 * 1024 * 1024,
            read_timeout: Duration::from_secs(30),
            connections_max_idle: Duration::from_secs(600),
            write_timeout: Duration::from_secs(30),
            tick: Duration::from_millis(100),
            maintenance_interval: Duration::from_secs(1),
            clock: Clock::system(),
            shutdown_timeout: Duration::from_secs(10),
            busy_poll: BusyPoll::Off,
            allow_foreign_data_dir: false,
            http_listen: None,
            kafka_listen: None,
            kafka_advertised: None,
            max_producers_per_partition: 1_000,
            max_producer_states: 100_000,
            producer_expiry: Duration::from_secs(24 * 3600),
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            auth: crate::security::auth::AuthMode::Off,
            admin_users: Vec::new(),
            authorizer: false,
            max_connections_per_principal: None,
            produce_quota_bytes_per_sec: None,
            cleaner: crate::storage::CleanerLimits::default(),
        }
    }

    /// File descriptors the broker may need: the file cache, the
    /// connections, and a margin for listeners, directories and the lock.
    pub fn fd_needed(&self) -> u64 {
        (self.max_open_files as u64)
            .saturating_add(self.max_connections as u64)
            .saturating_add(FD_MARGIN)
    }

    /// Checks that a topic of `adding` partitions fits `max_partitions`
    /// with `existing` partitions already there.
    ///
    /// # Errors
    /// LIMIT_REACHED naming the limit and its value.
    pub fn check_partition_limit(
        &self,
        topic: &str,
        existing: u64,
        adding: u32,
    ) -> Result<(), BrokerError> {
        let total = existing.saturating_add(u64::from(adding));
        if total > self.max_partitions {
            let detail = format!(
                "max_partitions is {}: the broker has {existing} partitions and topic {topic} would add {adding}",
                self.max_partitions
            );
            tracing::warn!("{detail}; topic refused with LIMIT_REACHED");
            return Err(BrokerError::code_for(ErrorCode::LimitReached, detail));
        }
        Ok(())
    }

    /// The TLS files, when TLS is configured.
    ///
    /// # Errors
    /// A certificate without a key or the other way round, or a client CA without them.
    pub fn tls_files(&self) -> Result<Option<crate::security::tls::TlsFiles>, BrokerError> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Ok(Some(crate::security::tls::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.tls_client_ca.clone(),
            })),
            (None, None) if self.tls_client_ca.is_none() => Ok(None),
            (None, None) => Err(BrokerError::Config(
                "tls_client_ca needs tls_cert and tls_key".into(),
            )),
            _ => Err(BrokerError::Config(
                "tls_cert and tls_key go together: set both or neither".into(),
            )),
        }
    }

    /// Checks that the settings make sense together.
    ///
    /// # Errors
    /// [`BrokerError::Config`] naming the setting.
    pub fn validate(&self) -> Result<(), BrokerError> {
        let bad = |m: String| Err(BrokerError::Config(m));
        if let Err(e) = self.default_topic.check() {
            return bad(e);
        }
        if self.max_frame_bytes < 1024 {
            return bad(format!(
                "max_frame_bytes is {}, the minimum is 1024",
                self.max_frame_bytes
            ));
        }
        if self.max_request_memory < self.max_frame_bytes {
            return bad(format!(
                "max_request_memory ({}) must be at least max_frame_bytes ({})",
                self.max_request_memory, self.max_frame_bytes
            ));
        }
        if self.max_record_bytes + 1024 > self.max_frame_bytes {
            return bad(format!(
                "max_record_bytes ({}) must be at least 1024 bytes below max_frame_bytes ({})",
                self.max_record_bytes, self.max_frame_bytes
            ));
        }
        for (name, v) in [
            ("max_groups", self.max_groups),
            ("max_members_per_group", self.max_members_per_group),
            ("max_topics_per_join", self.max_topics_per_join),
            (
                "max_connections_per_principal",
                self.connections_per_principal(),
            ),
        ] {
            if v == 0 {
                return bad(format!("{name} is 0, it must be at least 1"));
            }
        }
        if self.group_min_session_timeout > self.group_max_session_timeout {
            return bad(format!(
                "group_min_session_timeout ({} ms) is above group_max_session_timeout ({} ms)",
                self.group_min_session_timeout.as_millis(),
                self.group_max_session_timeout.as_millis()
            ));
        }
        if self.max_open_files == 0 {
            return bad("max_open_files is 0, it must be at least 1".into());
        }
        self.tls_files()?;
        if self.max_connections == 0 || self.max_in_flight_per_connection == 0 {
            return bad(
                "max_connections and max_in_flight_per_connection must be at least 1".into(),
            );
        }
        Ok(())
    }
}

/// Descriptors besides the file cache and connections: listeners, the
/// HTTP server, directory handles while listing or fsyncing, the data
/// directory's lock, the poller.
pub const FD_MARGIN: u64 = 64;

/// Longest a FETCH may wait for `min_bytes`: a larger `max_wait_ms` is capped
/// to this, so every parked fetch, and the memory it holds, goes within it.
pub const MAX_FETCH_WAIT_MS: i32 = 30_000;

/// How long a FETCH with this `max_wait_ms` may wait: negative is 0, above
/// [`MAX_FETCH_WAIT_MS`] is that.
pub fn fetch_wait(max_wait_ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(max_wait_ms.clamp(0, MAX_FETCH_WAIT_MS)).unwrap_or(0))
}

/// The transaction coordinator's settings (Kafka's names in parentheses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransactionSettings {
    /// Most transactional ids the broker keeps (default 100 000); an
    /// InitProducerId for a new one past it is refused.
    pub max_transactional_ids: usize,
    /// Most transactions open at once (default 10 000); a transaction past
    /// it does not begin (AddPartitionsToTxn/AddOffsetsToTxn refused).
    pub max_open_transactions: usize,
    /// Most partitions one transaction writes to, and most groups and
    /// offsets it commits (default 10 000).
    pub max_partitions_per_transaction: usize,
    /// Longest transaction timeout a producer may ask for
    /// (`transaction.max.timeout.ms`, 15 minutes).
    pub max_timeout: Duration,
    /// A transactional id idle this long is forgotten
    /// (`transactional.id.expiration.ms`, 7 days).
    pub id_expiration: Duration,
}

impl Default for TransactionSettings {
    fn default() -> Self {
        TransactionSettings {
            max_transactional_ids: 100_000,
            max_open_transactions: 10_000,
            max_partitions_per_transaction: 10_000,
            max_timeout: Duration::from_secs(900),
            id_expiration: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// Longest topic name: Kafka's limit (a topic's directory name, 249 bytes,
/// leaves room in a 255-byte file name).
pub const MAX_TOPIC_NAME_LEN: usize = 249;

/// Longest group id, in bytes.
pub const MAX_GROUP_ID_LEN: usize = 1024;

/// Checks a topic name: 1 to 249 characters of `[A-Za-z0-9._-]`, not `.`
/// or `..`, not starting with `__` (reserved).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TOPIC_NAME_LEN
        && name != "."
        && name != ".."
        && !name.starts_with("__")
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

/// Checks a group id: any non-empty string of at most [`MAX_GROUP_ID_LEN`]
/// bytes, as Kafka takes them (`roundrobin,range`, `my app/v2`, ...). Group
/// ids name no file: they are keys of the offsets log.
pub fn valid_group_id(group: &str) -> bool {
    !group.is_empty() && group.len() <= MAX_GROUP_ID_LEN
}

// ------------------------------------------------------------ share groups

/// The settings of one share-partition (a share group's configs, by Kafka's
/// names in the comments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareConfig {
    /// How long an acquired record stays with its member
    /// (`share.record.lock.duration.ms`, default 30 s).
    pub lock_duration_ms: u64,
    /// Deliveries after which a released or timed-out record is archived
    /// (`share.delivery.count.limit`, default 5).
    pub delivery_count_limit: u16,
    /// Most records in flight between the start and the end
    /// (`share.partition.max.record.locks`, default 2000).
    pub max_in_flight: usize,
}

impl Default for ShareConfig {
    fn default() -> Self {
        ShareConfig {
            lock_duration_ms: 30_000,
            delivery_count_limit: 5,
            max_in_flight: 2_000,
        }
    }
}

/// Bounds and timing of share groups (broker settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareGroupLimits {
    /// Most share groups.
    pub max_groups: usize,
    /// Most members of one share group (`group.share.max.size`, default 200).
    pub max_members: usize,
    /// A member not heard from for this long is removed
    /// (`group.share.session.timeout.ms`, default 45 s).
    pub session_timeout_ms: u64,
    /// How often members heartbeat (`group.share.heartbeat.interval.ms`,
    /// default 5 s).
    pub heartbeat_interval_ms: u64,
}

impl Default for ShareGroupLimits {
    fn default() -> Self {
        ShareGroupLimits {
            max_groups: 10_000,
            max_members: 200,
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
        }
    }
}

/// Bounds and timing of consumer-protocol groups (KIP-848; broker settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerGroupLimits {
    /// Most consumer-protocol groups.
    pub max_groups: usize,
    /// Most members of one group (`group.consumer.max.size`).
    pub max_members: usize,
    /// A member not heard from for this long is removed
    /// (`group.consumer.session.timeout.ms`, default 45 s).
    pub session_timeout_ms: u64,
    /// How often members heartbeat (`group.consumer.heartbeat.interval.ms`,
    /// default 5 s).
    pub heartbeat_interval_ms: u64,
}

impl Default for ConsumerGroupLimits {
    fn default() -> Self {
        ConsumerGroupLimits {
            max_groups: 10_000,
            max_members: 1_000,
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
        }
    }
}

/// Where a new share group starts reading (`share.auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShareReset {
    /// At the log end: only records produced from now on (Kafka's default).
    #[default]
    Latest,
    /// At the log start.
    Earliest,
}

impl std::str::FromStr for ShareReset {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "latest" => Ok(ShareReset::Latest),
            "earliest" => Ok(ShareReset::Earliest),
            other => Err(format!(
                "share.auto.offset.reset is latest or earliest, not {other:?}"
            )),
        }
    }
}

/// The share-group settings of a broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShareSettings {
    /// Locks, the delivery limit, the in-flight bound.
    pub partition: ShareConfig,
    /// Members and groups, sessions, heartbeats.
    pub groups: ShareGroupLimits,
    /// Where new share groups start.
    pub auto_offset_reset: ShareReset,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_limit_per_principal_follows_max_connections_unless_set() {
        let mut c = BrokerConfig::new("/nonexistent");
        assert_eq!(c.connections_per_principal(), c.max_connections);
        // A broker raised for one big client host lets that host use it all.
        c.max_connections = 20_100;
        assert_eq!(c.connections_per_principal(), 20_100);
        c.max_connections_per_principal = Some(50);
        assert_eq!(c.connections_per_principal(), 50);
        c.max_connections_per_principal = Some(0);
        assert!(c.validate().is_err());
    }

    #[test]
    fn an_old_topic_conf_loads_with_kafka_defaults() {
        // What a broker before named configs wrote.
        let old = "partitions=2\nmax_pending=16\nretention_bytes=none\nretention_ms=3600000\nsegment_bytes=1048576\nbackpressure=block\n";
        let c = TopicConfig::from_text(old).unwrap();
        assert_eq!(
            (c.partitions, c.retention_ms, c.segment_bytes),
            (2, Some(3_600_000), 1_048_576)
        );
        assert_eq!(c.cleanup_policy, CleanupPolicy::Delete);
        assert_eq!(c.max_message_bytes, 1_048_588);
        assert_eq!(c.delete_retention_ms, 86_400_000);
        assert_eq!(c.min_compaction_lag_ms, 0);
        assert_eq!(c.max_compaction_lag_ms, None);
        assert_eq!(c.segment_ms, Some(604_800_000));
        assert!((c.min_cleanable_dirty_ratio() - 0.5).abs() < 1e-9);
        assert_eq!(c.message_timestamp_type, TimestampType::CreateTime);
        assert!(c.overrides.is_empty());
        assert_eq!(c.named_value("retention.ms").as_deref(), Some("3600000"));
        assert_eq!(c.named_value("retention.bytes").as_deref(), Some("-1"));
        assert_eq!(c.named_value("min.insync.replicas").as_deref(), Some("1"));
        // An unknown key (a newer broker's) is still ignored.
        assert!(TopicConfig::from_text("partitions=1\nsome.future.config=7\n").is_ok());
    }

    #[test]
    fn named_configs_round_trip_through_topic_conf() {
        let mut c = TopicConfig::default();
        for (k, v) in [
            ("cleanup.policy", "delete,compact"),
            ("retention.ms", "-1"),
            ("retention.bytes", "1048576"),
            ("segment.bytes", "2048"),
            ("segment.ms", "3600000"),
            ("min.compaction.lag.ms", "1000"),
            ("max.compaction.lag.ms", "60000"),
            ("delete.retention.ms", "5000"),
            ("min.cleanable.dirty.ratio", "0.25"),
            ("max.message.bytes", "2097152"),
            ("message.timestamp.type", "LogAppendTime"),
            ("compression.type", "zstd"),
            ("unclean.leader.election.enable", "true"),
            ("flush.messages", "100"),
            ("follower.replication.throttled.replicas", ""),
        ] {
            c.set_named(k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
        }
        assert_eq!(c.cleanup_policy, CleanupPolicy::CompactDelete);
        assert_eq!(c.retention_bytes, Some(1_048_576));
        assert_eq!(c.min_cleanable_dirty_ratio_ppm, 250_000);
        assert_eq!(c.max_compaction_lag_ms, Some(60_000));
        assert_eq!(
            c.named_value("cleanup.policy").as_deref(),
            Some("compact,delete")
        );
        assert_eq!(
            c.named_value("min.cleanable.dirty.ratio").as_deref(),
            Some("0.25")
        );
        assert!(c.overrides.contains("compression.type"));
        let back = TopicConfig::from_text(&c.to_text()).unwrap();
        assert_eq!(back, c);
        // DELETE takes the broker's default back and forgets the override.
        let defaults = TopicConfig::default();
        let mut r = back;
        r.reset_named("cleanup.policy", &defaults).unwrap();
        r.reset_named("flush.messages", &defaults).unwrap();
        assert_eq!(r.cleanup_policy, CleanupPolicy::Delete);
        assert_eq!(
            r.named_value("flush.messages").as_deref(),
            Some("9223372036854775807")
        );
        assert!(!r.overrides.contains("cleanup.policy"));
    }

    #[test]
    fn bad_named_configs_name_the_config_and_the_value() {
        let mut c = TopicConfig::default();
        for (k, v) in [
            ("cleanup.policy", "shred"),
            ("retention.ms", "-2"),
            ("retention.ms", "soon"),
            ("segment.bytes", "10"),
            ("segment.ms", "0"),
            ("min.cleanable.dirty.ratio", "1.5"),
            ("min.cleanable.dirty.ratio", "NaN"),
            ("max.message.bytes", "-1"),
            ("message.timestamp.type", "Now"),
            ("compression.type", "brotli"),
            ("min.insync.replicas", "2"),
            ("preallocate", "true"),
            ("max.compaction.lag.ms", "0"),
        ] {
            let e = c.set_named(k, v).expect_err(k).to_string();
            assert!(e.contains(k) && e.contains(v), "{k}={v}: {e}");
        }
        let e = c.set_named("replication.factor", "1").unwrap_err();
        assert!(matches!(e, ConfigError::Unknown { .. }), "{e}");
        assert_eq!(c, TopicConfig::default(), "nothing changed");
        c.set_named("min.compaction.lag.ms", "10").unwrap();
        c.set_named("max.compaction.lag.ms", "5").unwrap();
        assert!(c.check().is_err(), "min above max");
    }

    #[test]
    fn retention_is_not_applied_when_the_policy_does_not_delete() {
        let mut c = TopicConfig {
            retention_bytes: Some(100),
            retention_ms: Some(1000),
            ..TopicConfig::default()
        };
        assert_eq!(c.log_retention(), (Some(100), Some(1000)));
        c.set_named("cleanup.policy", "compact").unwrap();
        assert!(c.cleanup_policy.compacts() && !c.cleanup_policy.deletes());
        assert_eq!(c.log_retention(), (None, None));
        c.set_named("cleanup.policy", "compact,delete").unwrap();
        assert_eq!(c.log_retention(), (Some(100), Some(1000)));
    }

    #[test]
    fn sources_tell_topic_broker_and_default_apart() {
        use named::{describe_broker, describe_topic, ConfigSource};
        let mut defaults = TopicConfig::default();
        defaults.set_named("max.message.bytes", "2000000").unwrap();
        let mut t = defaults.for_new_topic();
        t.set_named("cleanup.policy", "compact").unwrap();
        let d = describe_topic(&t, &defaults);
        let get = |n: &str| d.iter().find(|c| c.name == n).unwrap().clone();
        assert_eq!(get("cleanup.policy").source, ConfigSource::Topic);
        assert_eq!(get("cleanup.policy").synonyms.len(), 2);
        assert_eq!(get("cleanup.policy").synonyms[1].name, "log.cleanup.policy");
        assert_eq!(get("max.message.bytes").source, ConfigSource::StaticBroker);
        assert_eq!(get("max.message.bytes").value, "2000000");
        assert_eq!(
            get("max.message.bytes").synonyms[0].name,
            "message.max.bytes"
        );
        assert_eq!(get("delete.retention.ms").source, ConfigSource::Default);
        assert_eq!(d.len(), named::TOPIC_CONFIGS.len());
        let b = describe_broker(&defaults);
        let m = b.iter().find(|c| c.name == "message.max.bytes").unwrap();
        assert_eq!(
            (m.value.as_str(), m.source),
            ("2000000", ConfigSource::StaticBroker)
        );
        assert!(b
            .iter()
            .any(|c| c.name == "log.cleanup.policy" && c.source == ConfigSource::Default));
    }

    #[test]
    fn topic_config_round_trips_through_text() {
        let c = TopicConfig {
            partitions: 6,
            max_pending: 10,
            retention_bytes: Some(99),
            retention_ms: None,
            segment_bytes: 4096,
            backpressure: Backpressure::Reject,
            ..TopicConfig::default()
        };
        assert_eq!(TopicConfig::from_text(&c.to_text()).unwrap(), c);
        assert!(TopicConfig::from_text("partitions=0").is_err());
        assert!(TopicConfig::from_text("partitions=10001").is_err());
        assert!(
            TopicConfig::from_text("max_pending=2147483647").is_err(),
            "queues preallocate"
        );
        assert!(TopicConfig::from_text("partitions=x").is_err());
    }

    #[test]
    fn create_topic_requests_are_checked_field_by_field() {
        use flume_protocol::CreateTopicRequest;
        let d = TopicConfig {
            retention_ms: Some(7),
            ..TopicConfig::default()
        };
        let req = |f: &dyn Fn(&mut CreateTopicRequest)| {
            let mut r = CreateTopicRequest::default();
            f(&mut r);
            TopicConfig::from_request(&d, &r)
        };
        // -1 everywhere: the broker defaults.
        assert_eq!(req(&|_| {}).unwrap(), d);
        // Each field out of range: an error naming the field, the value and the range.
        type Case<'a> = (&'a dyn Fn(&mut CreateTopicRequest), &'a str);
        let cases: [Case<'_>; 12] = [
            (
                &|r| r.partitions = -2,
                "partitions is -2, it must be -1 (broker default) or 1..=10000",
            ),
            (&|r| r.partitions = 0, "partitions is 0,"),
            (&|r| r.partitions = 10_001, "partitions is 10001,"),
            (
                &|r| r.max_pending = -2,
                "max_pending is -2, it must be -1 (broker default) or 1..=100000",
            ),
            (&|r| r.max_pending = 0, "max_pending is 0,"),
            (
                &|r| r.retention_bytes = -2,
                "retention_bytes is -2, it must be -1 (broker default) or 0..=9223372036854775807",
            ),
            (
                &|r| r.retention_ms = i64::MIN,
                "retention_ms is -9223372036854775808,",
            ),
            (
                &|r| r.segment_bytes = 0,
                "segment_bytes is 0, it must be -1 (broker default) or 1024..=2147483648",
            ),
            (&|r| r.segment_bytes = 1023, "segment_bytes is 1023,"),
            (
                &|r| r.segment_bytes = (1 << 31) + 1,
                "segment_bytes is 2147483649,",
            ),
            (
                &|r| r.backpressure = 2,
                "backpressure is 2, it must be -1 (broker default), 0 (block) or 1 (reject)",
            ),
            (&|r| r.backpressure = -2, "backpressure is -2,"),
        ];
        for (f, want) in cases {
            let err = req(f).unwrap_err();
            assert!(err.starts_with(want), "{err:?} should start with {want:?}");
        }
        // The ends of each range are accepted.
        let c = req(&|r| {
            r.partitions = 10_000;
            r.max_pending = 1;
            r.retention_bytes = 0;
            r.retention_ms = i64::MAX;
            r.segment_bytes = 1 << 31;
            r.backpressure = 1;
        })
        .unwrap();
        assert_eq!(c.partitions, 10_000);
        assert_eq!(c.max_pending, 1);
        assert_eq!(c.retention_bytes, Some(0));
        assert_eq!(c.retention_ms, Some(u64::try_from(i64::MAX).unwrap()));
        assert_eq!(c.segment_bytes, 1 << 31);
        assert_eq!(c.backpressure, Backpressure::Reject);
        assert_eq!(
            req(&|r| r.segment_bytes = 1024).unwrap().segment_bytes,
            1024
        );
        assert_eq!(
            req(&|r| r.backpressure = 0).unwrap().backpressure,
            Backpressure::Block
        );
        // Topics stored by older brokers with such values still open, clamped
        // as the log always did; an API caller is held to the limits.
        assert_eq!(
            TopicConfig::from_text("segment_bytes=0")
                .unwrap()
                .segment_bytes,
            1
        );
        assert_eq!(
            TopicConfig::from_text("segment_bytes=2147483649")
                .unwrap()
                .segment_bytes,
            MAX_SEGMENT_BYTES
        );
        assert!(TopicConfig {
            segment_bytes: 0,
            ..TopicConfig::default()
        }
        .check()
        .is_err());
    }

    #[test]
    fn names() {
        assert!(valid_name("orders.v1-eu_2"));
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "__consumer_offsets",
            "x y",
            &"a".repeat(250),
        ] {
            assert!(!valid_name(bad), "{bad}");
        }
        assert!(valid_name(&"a".repeat(249)));
        for good in ["g", "roundrobin,range", "my app/v2", "__group", "ünï"] {
            assert!(valid_group_id(good), "{good}");
        }
        assert!(valid_group_id(&"g".repeat(MAX_GROUP_ID_LEN)));
        assert!(!valid_group_id(""));
        assert!(!valid_group_id(&"g".repeat(MAX_GROUP_ID_LEN + 1)));
    }

    #[test]
    fn fetch_wait_is_capped() {
        assert_eq!(fetch_wait(-5), Duration::ZERO);
        assert_eq!(fetch_wait(250), Duration::from_millis(250));
        assert_eq!(fetch_wait(i32::MAX), Duration::from_secs(30));
        assert_eq!(fetch_wait(MAX_FETCH_WAIT_MS + 1), Duration::from_secs(30));
    }
}

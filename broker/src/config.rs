//! Broker and topic settings. A topic's settings are stored in its directory
//! (`topic.conf`, `key=value` lines) and reloaded on restart.

use std::path::{Path, PathBuf};
use std::time::Duration;

use flume_protocol::ErrorCode;
pub use flume_rt::BusyPoll;

use crate::clock::Clock;
use crate::error::BrokerError;
use crate::storage::FsyncPolicy;

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

/// Settings of one topic, fixed at creation.
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
        }
    }
}

impl TopicConfig {
    /// The file a topic's settings live in.
    pub fn path(topic_dir: &Path) -> PathBuf {
        topic_dir.join("topic.conf")
    }

    /// The `key=value` text stored on disk.
    pub fn to_text(&self) -> String {
        let opt = |v: Option<u64>| v.map_or_else(|| "none".to_owned(), |v| v.to_string());
        format!(
            "partitions={}\nmax_pending={}\nretention_bytes={}\nretention_ms={}\nsegment_bytes={}\nbackpressure={}\n",
            self.partitions,
            self.max_pending,
            opt(self.retention_bytes),
            opt(self.retention_ms),
            self.segment_bytes,
            self.backpressure
        )
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
                _ => {}
            }
        }
        c.check()?;
        Ok(c)
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
        })
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
    fn topic_config_round_trips_through_text() {
        let c = TopicConfig {
            partitions: 6,
            max_pending: 10,
            retention_bytes: Some(99),
            retention_ms: None,
            segment_bytes: 4096,
            backpressure: Backpressure::Reject,
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

//! Subcommands.

use std::io::Write;

use futures::FutureExt;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::builder::{BoolishValueParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use flume_broker::security::auth::AuthMode;
use flume_broker::{Backpressure, Broker, BrokerConfig, FsyncPolicy, TopicConfig};
use flume_client::{Admin, ConnectionConfig, TlsConfig};
use flume_protocol::{CreateTopicRequest, ErrorCode};

use crate::consume::ConsumeArgs;
use crate::produce::ProduceArgs;

/// Flume: a Kafka-style message streaming broker and its tools.
#[derive(Debug, Parser)]
#[command(name = "flume-cli", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// One value per process, parsed once: its size does not matter.
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Run a broker (Ctrl-C shuts it down gracefully).
    Broker(Box<BrokerArgs>),
    /// Send records: one --message or --value-file, or every line of stdin.
    Produce(ProduceArgs),
    /// Read records from a topic (every partition, or one), or as a member of a group.
    Consume(ConsumeArgs),
    /// List, create, describe, alter and delete topics.
    Topics {
        #[command(subcommand)]
        command: TopicsCommand,
    },
    /// Consumer-group tools.
    Groups {
        #[command(subcommand)]
        command: GroupsCommand,
    },
    /// Kafka transactions the broker coordinates: list them with their state and age.
    Transactions {
        #[command(subcommand)]
        command: TransactionsCommand,
    },
    /// Users who log in with SCRAM-SHA-256 (--auth): add, remove, list.
    Users {
        #[command(subcommand)]
        command: crate::users::UsersCommand,
    },
    /// ACLs (with `broker --authorizer on`): add, remove, list.
    Acls {
        #[command(subcommand)]
        command: crate::acls::AclsCommand,
    },
    /// Look at a stopped broker's data directory: check it, dump records,
    /// show its disk usage (read-only).
    Data {
        #[command(subcommand)]
        command: crate::data::DataCommand,
    },
    /// Measure whole-system throughput and latency.
    Perf {
        #[command(subcommand)]
        command: crate::perf::PerfCommand,
    },
}

/// Parses `always`, `never` or a number of milliseconds (1 to 1 hour).
fn parse_fsync(s: &str) -> Result<FsyncPolicy, String> {
    match s {
        "always" => Ok(FsyncPolicy::Always),
        "never" => Ok(FsyncPolicy::Never),
        ms => match ms.parse::<i64>() {
            Ok(0) => Err("--fsync 0 would sync without pause: use `always` (one fsync per batch) or an interval of at least 1 ms".to_owned()),
            Ok(n) if (1..=3_600_000).contains(&n) => Ok(FsyncPolicy::Interval(Duration::from_millis(n.unsigned_abs()))),
            Ok(n) => Err(format!("{n} is not in 1..=3600000 milliseconds")),
            Err(_) => Err(format!("--fsync must be always, never or milliseconds, not {ms:?}")),
        },
    }
}

/// A log filter `tracing_subscriber::EnvFilter` takes (a level or directives).
fn parse_log_level(s: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::builder()
        .parse(s)
        .map(|_| s.to_owned())
        .map_err(|e| format!("{s:?} is not a log level or filter ({e}): use error, warn, info, debug, trace or directives like info,flume_broker=debug"))
}

/// A whole number in `lo..=hi`: negative input reaches the parser (rather than looking
/// like a flag) and gets the same range error as any other number out of range.
pub fn range_u64(lo: i64, hi: i64) -> impl TypedValueParser<Value = u64> {
    clap::value_parser!(i64)
        .range(lo..=hi)
        .map(|v| u64::try_from(v).unwrap_or_default()) // ok: the range starts at or above 0
}

/// A partition number: 0 or more.
pub fn non_neg_i32() -> impl TypedValueParser<Value = i32> {
    clap::value_parser!(i32).range(0..)
}

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct BrokerArgs {
    /// Read settings from this TOML file, whose keys are these flags' long
    /// names (`port = 9092`, `fsync = "always"`, `admin-user = ["admin"]`).
    /// Each setting comes from its flag, else its FLUME_<FLAG> environment
    /// variable, else the file, else the default. SIGHUP reads the file again.
    #[arg(long, env = "FLUME_CONFIG", value_name = "PATH")]
    pub(crate) config: Option<PathBuf>,
    /// Print the effective settings as a TOML file (every key, with where its
    /// value came from as a comment) and exit: `--print-config > flume.toml`
    /// starts a configuration file.
    #[arg(long)]
    pub(crate) print_config: bool,
    /// Log format on stderr: human, or json (one object per line, for log
    /// shippers).
    #[arg(long, env = "FLUME_LOG_FORMAT", default_value = "human", value_parser = ["human", "json"])]
    pub(crate) log_format: String,
    /// What to log: a level (error, warn, info, debug, trace) or filter
    /// directives (`info,flume_broker=debug`) [default: RUST_LOG when set,
    /// else info]. SIGHUP applies a changed one.
    #[arg(long, env = "FLUME_LOG_LEVEL", value_name = "FILTER", value_parser = parse_log_level)]
    pub(crate) log_level: Option<String>,
    /// Address to listen on.
    #[arg(long, env = "FLUME_HOST", default_value = "127.0.0.1")]
    host: String,
    /// Port (0 picks a free one).
    #[arg(long, env = "FLUME_PORT", default_value_t = 9092, value_parser = range_u64(0, 65535))]
    port: u64,
    /// Data directory, held by one broker at a time (lock file `.lock`).
    #[arg(long, env = "FLUME_DATA", default_value = "./data")]
    data: PathBuf,
    /// Use a --data directory that is not empty and is not a Flume data
    /// directory (by default such a directory is refused).
    #[arg(long, env = "FLUME_ALLOW_FOREIGN_DATA_DIR", value_parser = BoolishValueParser::new())]
    allow_foreign_data_dir: bool,
    /// Partitions of auto-created topics.
    #[arg(long, env = "FLUME_PARTITIONS", default_value_t = 3, value_parser = range_u64(1, 10000))]
    partitions: u64,
    /// When to fsync appended records: always, never, or every N milliseconds.
    #[arg(long, env = "FLUME_FSYNC", default_value = "never", value_parser = parse_fsync)]
    fsync: FsyncPolicy,
    /// Retention by size per partition (bytes).
    #[arg(long, env = "FLUME_RETENTION_BYTES", value_parser = range_u64(1, i64::MAX))]
    retention_bytes: Option<u64>,
    /// Retention by age (milliseconds).
    #[arg(long, env = "FLUME_RETENTION_MS", value_parser = range_u64(1, i64::MAX))]
    retention_ms: Option<u64>,
    /// Segment size (bytes).
    #[arg(long, env = "FLUME_SEGMENT_BYTES", default_value_t = 64 * 1024 * 1024, value_parser = range_u64(1024, 1 << 31))]
    segment_bytes: u64,
    /// A default for topics created from then on by Kafka's topic config
    /// name, NAME=VALUE (repeat for more): `cleanup.policy=compact`,
    /// `max.message.bytes=2097152`, ... (`docs/kafka.md` lists them). It
    /// comes after the shorthand flags above (`--retention-ms`, ...).
    #[arg(long, env = "FLUME_TOPIC_CONFIG", value_name = "NAME=VALUE", value_parser = parse_config_pair)]
    topic_config: Vec<String>,
    /// Partition queue capacity (pending append requests).
    #[arg(long, env = "FLUME_MAX_PENDING", default_value_t = 1024, value_parser = range_u64(1, 100_000))]
    max_pending: u64,
    /// When a partition queue is full: block (wait) or reject (QUEUE_FULL).
    #[arg(long, env = "FLUME_BACKPRESSURE", default_value = "block")]
    backpressure: Backpressure,
    /// Largest request frame (bytes).
    #[arg(long, env = "FLUME_MAX_FRAME_BYTES", default_value_t = 16 * 1024 * 1024, value_parser = range_u64(4096, 1 << 30))]
    max_frame_bytes: u64,
    /// Largest record in bytes, counting its 16-byte header (offset, size,
    /// crc), 64 or more and at most max-frame-bytes - 1024 [default: 1048576
    /// (1 MiB), the producer's default too]. Larger records get RECORD_TOO_LARGE.
    #[arg(long, env = "FLUME_MAX_RECORD_BYTES", value_parser = range_u64(64, 1 << 30))]
    max_record_bytes: Option<u64>,
    /// Most concurrent connections; each holds a file descriptor, a task and
    /// its read/write buffers (a few KB idle, more while it has requests in
    /// flight: about 30 KB with a group member's waiting fetch and heartbeat).
    /// A GroupConsumer, Producer or Admin holds one each.
    #[arg(long, env = "FLUME_MAX_CONNECTIONS", default_value_t = 10_000, value_parser = range_u64(1, 1_000_000))]
    max_connections: u64,
    /// Most partitions over all topics; an idle partition costs a few KB of
    /// memory, no file descriptor and no task. A topic past it gets LIMIT_REACHED.
    #[arg(long, env = "FLUME_MAX_PARTITIONS", default_value_t = 100_000, value_parser = range_u64(1, 10_000_000))]
    max_partitions: u64,
    /// Most consumer groups with members at once. A group costs about 1 KB of
    /// coordinator state plus its members' (see --max-members-per-group) and
    /// no task; its members' heartbeats cost CPU, not memory (1,000 groups of
    /// 10: README, Scale). A join that would create one more gets
    /// LIMIT_REACHED, logged with the limit's name and value.
    #[arg(long, env = "FLUME_MAX_GROUPS", default_value_t = 10_000, value_parser = range_u64(1, 10_000_000))]
    max_groups: u64,
    /// Most members of one group. A member costs about 0.5 KB of coordinator
    /// state (its id, topics, assignment) plus its connection (see
    /// --max-connections; a GroupConsumer holds one); a rebalance of a group
    /// of N members takes O(N x partitions) work. A new member past it gets
    /// LIMIT_REACHED, logged with the limit's name and value.
    #[arg(long, env = "FLUME_MAX_MEMBERS_PER_GROUP", default_value_t = 1_000, value_parser = range_u64(1, 1_000_000))]
    max_members_per_group: u64,
    /// How long a Kafka consumer group that has no members waits for more to
    /// join before it forms its first generation, in milliseconds (Kafka's
    /// group.initial.rebalance.delay.ms); each member joining meanwhile
    /// extends it, up to the rebalance timeout. 0 forms it at once.
    #[arg(long, env = "FLUME_GROUP_INITIAL_REBALANCE_DELAY_MS", default_value_t = 3_000, value_parser = range_u64(0, 300_000))]
    group_initial_rebalance_delay_ms: u64,
    /// The shortest session timeout a group member may ask for, in
    /// milliseconds (Kafka's group.min.session.timeout.ms): a Kafka JoinGroup
    /// below it gets INVALID_SESSION_TIMEOUT, a Flume JOIN_GROUP gets this
    /// session instead. Test setups lower it for short sessions.
    #[arg(long, env = "FLUME_GROUP_MIN_SESSION_TIMEOUT_MS", default_value_t = 6_000, value_parser = range_u64(1, i64::from(i32::MAX)))]
    group_min_session_timeout_ms: u64,
    /// The longest session timeout a group member may ask for, in
    /// milliseconds (Kafka's group.max.session.timeout.ms): a Kafka JoinGroup
    /// above it gets INVALID_SESSION_TIMEOUT, a Flume JOIN_GROUP gets this
    /// session instead. At least --group-min-session-timeout-ms.
    #[arg(long, env = "FLUME_GROUP_MAX_SESSION_TIMEOUT_MS", default_value_t = 1_800_000, value_parser = range_u64(1, i64::from(i32::MAX)))]
    group_max_session_timeout_ms: u64,
    /// How long a share group's member holds a record it acquired before it
    /// goes back to the others, in milliseconds (Kafka's
    /// share.record.lock.duration.ms).
    #[arg(long, env = "FLUME_SHARE_RECORD_LOCK_DURATION_MS", default_value_t = 30_000, value_parser = range_u64(1_000, 3_600_000))]
    share_record_lock_duration_ms: u64,
    /// Deliveries after which a record a share group released or let time
    /// out is archived instead of delivered again (Kafka's
    /// share.delivery.count.limit): a poison record stops coming back.
    #[arg(long, env = "FLUME_SHARE_DELIVERY_COUNT_LIMIT", default_value_t = 5, value_parser = range_u64(2, 10))]
    share_delivery_count_limit: u64,
    /// Most records in flight (acquired, or released and not yet done) per
    /// share-partition; past it, nothing new is acquired until the lowest
    /// complete (Kafka's share.partition.max.record.locks).
    #[arg(long, env = "FLUME_SHARE_PARTITION_MAX_RECORD_LOCKS", default_value_t = 2_000, value_parser = range_u64(100, 10_000))]
    share_partition_max_record_locks: u64,
    /// Where a new share group starts reading: latest (records produced from
    /// its first fetch on, Kafka's default) or earliest
    /// (share.auto.offset.reset).
    #[arg(long, env = "FLUME_SHARE_AUTO_OFFSET_RESET", default_value = "latest", value_parser = ["latest", "earliest"])]
    share_auto_offset_reset: String,
    /// A share group's member not heard from for this long is removed and
    /// its records go back to the others, in milliseconds
    /// (group.share.session.timeout.ms).
    #[arg(long, env = "FLUME_SHARE_SESSION_TIMEOUT_MS", default_value_t = 45_000, value_parser = range_u64(1_000, 3_600_000))]
    share_session_timeout_ms: u64,
    /// A consumer-protocol group's member (KIP-848, group.protocol=consumer)
    /// not heard from for this long is removed and its partitions go to the
    /// others, in milliseconds (group.consumer.session.timeout.ms); members
    /// heartbeat every ninth of it, 0.5 to 5 s.
    #[arg(long, env = "FLUME_CONSUMER_SESSION_TIMEOUT_MS", default_value_t = 45_000, value_parser = range_u64(1_000, 3_600_000))]
    consumer_session_timeout_ms: u64,
    /// Close a Kafka connection that sends no request for this long, in
    /// milliseconds (Kafka's connections.max.idle.ms; clients keep idle
    /// connections to the coordinator and each leader). Flume's own
    /// connections are never closed for being idle.
    #[arg(long, env = "FLUME_CONNECTIONS_MAX_IDLE_MS", default_value_t = 600_000, value_parser = range_u64(1_000, 86_400_000))]
    connections_max_idle_ms: u64,
    /// Most segment files open at once over all partitions (an LRU; sealed and
    /// idle segments are opened again on demand). The broker needs about
    /// max-open-files + max-connections + 64 file descriptors and raises its
    /// soft RLIMIT_NOFILE towards that at start (warning if the hard limit is lower).
    #[arg(long, env = "FLUME_MAX_OPEN_FILES", default_value_t = 16_384, value_parser = range_u64(1, 10_000_000))]
    max_open_files: u64,
    /// Most bytes of requests being served at once; past it the broker stops
    /// reading until requests complete [default: 64 MiB, or max-frame-bytes if larger].
    #[arg(long, env = "FLUME_MAX_REQUEST_MEMORY", value_parser = range_u64(4096, 1 << 40))]
    max_request_memory: Option<u64>,
    /// Do not create topics on first use.
    #[arg(long, env = "FLUME_NO_AUTO_CREATE", value_parser = BoolishValueParser::new())]
    no_auto_create: bool,
    /// Check every record of sealed segments at startup.
    #[arg(long, env = "FLUME_VERIFY", value_parser = BoolishValueParser::new())]
    verify: bool,
    /// After each response, keep trying to read the connection's next request
    /// before parking: `0` never spins (the default: spinning connections
    /// delay the broker's other work, e.g. consumers' latency), `auto` spins
    /// only as long as it recently paid off (up to 50 µs; `auto:N` up to N
    /// µs; about 2x one-at-a-time throughput), N spins N µs every time.
    #[arg(long, env = "FLUME_BUSY_POLL_US", default_value = "0")]
    busy_poll_us: flume_broker::config::BusyPoll,
    /// Serve /metrics (Prometheus), /api/overview, /healthz and the dashboard
    /// (/) over HTTP on this port of --host (0 picks a free one).
    #[arg(long, env = "FLUME_HTTP_PORT")]
    http_port: Option<u16>,
    /// Also serve Kafka clients (the Kafka wire protocol, see docs/kafka.md)
    /// on this port of --host (0 picks a free one).
    #[arg(long, env = "FLUME_KAFKA_PORT")]
    kafka_port: Option<u16>,
    /// HOST:PORT that Kafka clients are told to connect to (Metadata), when
    /// --host:--kafka-port is not what they can reach [default: the bound address].
    #[arg(long, env = "FLUME_KAFKA_ADVERTISED", requires = "kafka_port")]
    kafka_advertised: Option<String>,
    /// Certificate chain (PEM) of the broker: every port (Flume, Kafka, HTTP)
    /// then speaks TLS 1.2 or 1.3 only. SIGHUP reads it (and the key and
    /// client CA) again; open connections keep their session.
    #[arg(long, env = "FLUME_TLS_CERT", value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// Private key (PEM) of --tls-cert.
    #[arg(long, env = "FLUME_TLS_KEY", value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// CA certificates (PEM): clients must present a certificate signed by
    /// one (mTLS); its subject becomes the connection's principal.
    #[arg(
        long,
        env = "FLUME_TLS_CLIENT_CA",
        value_name = "PEM",
        requires = "tls_cert"
    )]
    tls_client_ca: Option<PathBuf>,
    /// Authentication on the Flume port: off (the default; a warning when
    /// --host is not loopback), optional, or required (SCRAM-SHA-256 users,
    /// see `flume-cli users`).
    #[arg(long, env = "FLUME_AUTH", default_value = "off")]
    auth: AuthMode,
    /// A user who may add and remove users (repeat for more). Make the first
    /// one with `flume-cli users add NAME --data DIR` while the broker is stopped.
    #[arg(
        long,
        env = "FLUME_ADMIN_USER",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    admin_user: Vec<String>,
    /// Enforce ACLs (`flume-cli acls`): on, a request is served only if an
    /// ACL allows it (--admin-user admins may do everything); off (the
    /// default), every client may do everything.
    #[arg(long, env = "FLUME_AUTHORIZER", default_value = "off", value_parser = ["on", "off"])]
    authorizer: String,
    /// Most connections one principal (user, client certificate; anonymous
    /// clients: per IP address) may have open on the Flume and Kafka ports.
    /// By default --max-connections (one tenant may use them all); set it
    /// lower to keep tenants from starving each other.
    #[arg(long, env = "FLUME_MAX_CONNECTIONS_PER_PRINCIPAL", value_name = "N")]
    max_connections_per_principal: Option<usize>,
    /// Produce bytes per second each principal may send; past it, its
    /// connections are throttled (Kafka: throttle_time_ms). Off by default.
    #[arg(long, env = "FLUME_PRODUCE_QUOTA_BYTES_PER_SEC", value_name = "BYTES")]
    produce_quota_bytes_per_sec: Option<u64>,
    /// Memory of the log cleaner's key map (25 bytes a key): a compacted
    /// partition with more keys is cleaned in several passes.
    #[arg(long, env = "FLUME_CLEANER_KEY_MAP_BYTES", value_name = "BYTES", default_value_t = 32 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(4096..=1 << 40))]
    cleaner_key_map_bytes: u64,
    /// Bytes a second the log cleaner may read and write (its share of the
    /// disk). No limit by default; it runs on one thread either way.
    #[arg(long, env = "FLUME_CLEANER_IO_BYTES_PER_SEC", value_name = "BYTES",
          value_parser = clap::value_parser!(u64).range(1..))]
    cleaner_io_bytes_per_sec: Option<u64>,
}

/// `--broker`, the address every client command (topics, groups, produce,
/// consume, perf) connects to: one definition flattened into each.
#[derive(Debug, Clone, Args)]
pub struct BrokerAddr {
    /// Broker address: host:port for a Flume broker (its own protocol), or
    /// kafka://host:port[,host:port...] for any Kafka cluster (Apache Kafka,
    /// Redpanda, Flume's own Kafka listener).
    #[arg(
        long = "broker",
        value_name = "BROKER",
        default_value = "localhost:9092"
    )]
    pub addr: String,
    /// Connect with TLS, verifying the broker's certificate (against the
    /// system's trust store unless --tls-ca) and its name (the host of --broker).
    #[arg(long)]
    pub tls: bool,
    /// CA certificates (PEM) the broker's certificate must chain to (implies --tls).
    #[arg(long, value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for a broker that requires one (mTLS; implies --tls).
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM) of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Log in as this user (SCRAM-SHA-256); the password comes from
    /// --password-file, or else the FLUME_PASSWORD environment variable.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// File whose first line is the password of --user.
    #[arg(long, value_name = "FILE", requires = "user")]
    pub password_file: Option<PathBuf>,
    /// How --user logs in to a Kafka cluster (a kafka:// --broker):
    /// SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN (send it over --tls only).
    /// Flume's own protocol always uses SCRAM-SHA-256.
    #[arg(
        long,
        value_name = "MECHANISM",
        default_value = "SCRAM-SHA-256",
        requires = "user"
    )]
    pub sasl_mechanism: flume_client::SaslMechanism,
}

/// Producer settings that only a Kafka cluster (a kafka:// --broker) takes.
#[derive(Debug, Clone, Args)]
pub struct KafkaProduceFlags {
    /// Kafka only: batch compression (none, gzip, snappy, lz4, zstd).
    #[arg(long, value_enum, default_value = "none")]
    pub compression: CompressionArg,
    /// Kafka only: acknowledgement to wait for (0, 1 or all). Anything but
    /// all needs --no-idempotence.
    #[arg(long, default_value = "all")]
    pub acks: flume_client::RequiredAcks,
    /// Kafka only: turn the idempotent producer off (retries may then
    /// duplicate records).
    #[arg(long)]
    pub no_idempotence: bool,
    /// Kafka only: key routing, fnv1a (Flume's, the default: keys land where
    /// they do on a Flume broker) or murmur2 (the Java client's).
    #[arg(long, default_value = "fnv1a")]
    pub partitioner: flume_client::Partitioner,
}

/// A batch codec for --compression.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum CompressionArg {
    /// Uncompressed.
    None,
    /// gzip.
    Gzip,
    /// Snappy.
    Snappy,
    /// LZ4.
    Lz4,
    /// Zstandard.
    Zstd,
}

impl KafkaProduceFlags {
    /// `config` with these settings.
    pub fn apply(&self, config: flume_client::ProducerConfig) -> flume_client::ProducerConfig {
        use flume_client::Compression;
        let c = match self.compression {
            CompressionArg::None => Compression::None,
            CompressionArg::Gzip => Compression::Gzip,
            CompressionArg::Snappy => Compression::Snappy,
            CompressionArg::Lz4 => Compression::Lz4,
            CompressionArg::Zstd => Compression::Zstd,
        };
        config
            .compression(c)
            .acks(self.acks)
            .idempotence(!self.no_idempotence)
            .partitioner(self.partitioner)
    }
}

/// `--broker` (with its TLS and login flags) and `--topic`: what the
/// commands that move records (produce, consume, perf) start with.
#[derive(Debug, Clone, Args)]
pub struct TopicAt {
    #[command(flatten)]
    pub broker: BrokerAddr,
    /// Topic.
    #[arg(long)]
    pub topic: String,
}

/// A password from `file` (its first line), or else from the environment variable `var`.
pub fn read_password(file: Option<&std::path::Path>, var: &str) -> Result<String> {
    match file {
        Some(f) => {
            let text = std::fs::read_to_string(f)
                .with_context(|| format!("cannot read the password file {}", f.display()))?;
            Ok(text.lines().next().unwrap_or_default().to_owned())
        }
        None => std::env::var(var)
            .with_context(|| format!("no password: pass --password-file or set {var}")),
    }
}

impl BrokerAddr {
    /// Whether --broker names a Kafka cluster (kafka://...).
    pub fn is_kafka(&self) -> bool {
        self.addr
            .trim_start()
            .to_ascii_lowercase()
            .starts_with("kafka://")
    }

    /// Connection settings from the flags: TLS when asked for, a login with --user.
    pub fn connection(&self) -> Result<ConnectionConfig> {
        let mut config = ConnectionConfig::default();
        if let Some(user) = &self.user {
            let password = read_password(self.password_file.as_deref(), "FLUME_PASSWORD")?;
            config.credentials =
                Some(flume_client::Credentials::new(user, password).mechanism(self.sasl_mechanism));
        }
        if !self.tls && self.tls_ca.is_none() && self.tls_cert.is_none() {
            return Ok(config);
        }
        let mut tls = TlsConfig::new();
        if let Some(ca) = &self.tls_ca {
            tls = tls.ca_file(ca);
        }
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            tls = tls.client_cert(cert, key);
        }
        Ok(config.tls(tls))
    }
}

#[derive(Debug, Subcommand)]
pub enum TopicsCommand {
    /// List topics with their partition counts.
    List {
        #[command(flatten)]
        broker: BrokerAddr,
    },
    /// Create a topic.
    #[command(allow_negative_numbers = true)]
    Create {
        /// Topic name.
        name: String,
        /// Partitions.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=10000))]
        partitions: i32,
        /// Retention by size per partition (bytes).
        #[arg(long, value_parser = clap::value_parser!(i64).range(1..))]
        retention_bytes: Option<i64>,
        /// Retention by age (ms).
        #[arg(long, value_parser = clap::value_parser!(i64).range(1..))]
        retention_ms: Option<i64>,
        /// When a partition queue is full: block or reject (not with --config).
        #[arg(long, conflicts_with = "config")]
        backpressure: Option<Backpressure>,
        /// A topic config by Kafka's name, NAME=VALUE (repeat for more):
        /// `cleanup.policy=compact`, `retention.ms=86400000`, ...
        #[arg(long, value_name = "NAME=VALUE", value_parser = parse_config_pair)]
        config: Vec<String>,
        #[command(flatten)]
        broker: BrokerAddr,
    },
    /// Settings, every config with its source, and start and end offsets of
    /// every partition of a topic.
    Describe {
        /// Topic name.
        name: String,
        #[command(flatten)]
        broker: BrokerAddr,
    },
    /// Delete a topic: its records, its files and every group's committed
    /// offsets on it (readers get UNKNOWN_TOPIC afterwards).
    Delete {
        /// Topic name.
        name: String,
        #[command(flatten)]
        broker: BrokerAddr,
    },
    /// Delete a partition's records below an offset, as Kafka's
    /// DeleteRecords: its log start moves there, durably.
    DeleteRecords {
        /// Topic name.
        name: String,
        /// Partition.
        #[arg(long)]
        partition: i32,
        /// The first offset to keep (every record before it goes).
        #[arg(
            long,
            value_name = "OFFSET",
            required_unless_present = "all",
            conflicts_with = "all"
        )]
        before: Option<u64>,
        /// Delete every record of the partition (up to its log end).
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        broker: BrokerAddr,
    },
    /// Grow a topic to --partitions in all (never fewer; as `kafka-topics
    /// --alter --partitions`): the new partitions take records at once, and
    /// groups reading the topic rebalance onto them.
    AddPartitions {
        /// Topic name.
        name: String,
        /// The new partition count, in all (more than the topic has).
        #[arg(long, value_parser = clap::value_parser!(i32).range(1..=10000))]
        partitions: i32,
        /// Check only: say what would change, change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        broker: BrokerAddr,
    },
    /// Change a topic's retention or segment size while it runs (kept across
    /// restarts); prints the settings after the change.
    #[command(allow_negative_numbers = true)]
    #[command(group(clap::ArgGroup::new("change").required(true).multiple(true)
        .args(["retention_ms", "retention_bytes", "segment_bytes", "config", "delete_config"])))]
    Alter {
        /// Topic name.
        name: String,
        /// Retention by age in milliseconds, or `none` for no limit (applied
        /// at the next maintenance pass, in whole segments).
        #[arg(long)]
        retention_ms: Option<crate::admin::Limit>,
        /// Retention by size per partition in bytes, or `none` for no limit.
        #[arg(long)]
        retention_bytes: Option<crate::admin::Limit>,
        /// Segment size in bytes (taken at the next roll).
        #[arg(long, value_parser = range_u64(1024, 1 << 31))]
        segment_bytes: Option<u64>,
        /// Set a topic config by Kafka's name, NAME=VALUE (repeat for more).
        #[arg(long, value_name = "NAME=VALUE", value_parser = parse_config_pair)]
        config: Vec<String>,
        /// Take a topic config back to the broker's default (repeat for more).
        #[arg(long, value_name = "NAME")]
        delete_config: Vec<String>,
        #[command(flatten)]
        broker: BrokerAddr,
    },
}

/// A `NAME=VALUE` pair of `--config` and `--topic-config`.
fn parse_config_pair(s: &str) -> std::result::Result<String, String> {
    match s.split_once('=') {
        Some((name, _)) if !name.trim().is_empty() => Ok(s.to_owned()),
        _ => Err(format!("{s:?} is not NAME=VALUE")),
    }
}

/// The `(name, value)` of a checked `NAME=VALUE` pair.
fn config_pair(s: &str) -> (&str, &str) {
    s.split_once('=').map_or((s, ""), |(n, v)| (n.trim(), v))
}

#[derive(Debug, Subcommand)]
pub enum TransactionsCommand {
    /// Every transactional id with its producer, the state of its current
    /// (or last) transaction, how long an open one has been open, its
    /// timeout and the partitions it wrote to (`kafka-transactions.sh list`
    /// and `describe` in one).
    List {
        /// Only transactions in these states; repeatable.
        #[arg(long = "state", value_parser = ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead"])]
        states: Vec<String>,
        /// Only transactions open at least this many milliseconds (lingering ones).
        #[arg(long)]
        min_age_ms: Option<u64>,
        #[command(flatten)]
        broker: BrokerAddr,
    },
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)]
pub enum GroupsCommand {
    /// Committed offset, end offset and lag per partition.
    Lag {
        /// Group.
        #[arg(long)]
        group: String,
        /// Topic (default: every topic).
        #[arg(long)]
        topic: Option<String>,
        #[command(flatten)]
        broker: BrokerAddr,
    },
    /// Move a group's committed offsets on a topic (only while the group has
    /// no members, as Kafka requires): prints the plan, then commits it.
    ResetOffsets {
        /// Group.
        group: String,
        /// Topic (every partition of it).
        #[arg(long)]
        topic: String,
        /// earliest, latest, an offset (a number; brought into each
        /// partition's stored range), or a time: RFC 3339
        /// (2026-11-30T12:00:00Z) or @<ms since the epoch>, for the first
        /// offset at or after it (the log end where none is).
        #[arg(long)]
        to: crate::admin::ResetTo,
        /// Show the plan (and whether the group is empty) without committing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        broker: BrokerAddr,
    },
    /// Every group (Flume's and Kafka clients'), with its state.
    List {
        /// Only groups in these states (Empty, PreparingRebalance,
        /// CompletingRebalance, Stable); repeatable.
        #[arg(long = "state", value_parser = ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable"])]
        states: Vec<String>,
        #[command(flatten)]
        broker: BrokerAddr,
    },
    /// A group's state, generation, members and the partitions each owns, and
    /// its committed offset, end and lag per partition; for a share group its
    /// members and per partition its start, end and record counts (in
    /// flight, acquired, available, redelivered, archived).
    Describe {
        /// Group.
        group: String,
        #[command(flatten)]
        broker: BrokerAddr,
    },
    /// Delete a group with no members: drops its committed offsets on every topic.
    #[command(group(clap::ArgGroup::new("which").required(true).args(["group", "group_flag"])))]
    Delete {
        /// Group.
        group: Option<String>,
        /// Group (the same as the positional argument).
        #[arg(long = "group", value_name = "GROUP")]
        group_flag: Option<String>,
        #[command(flatten)]
        broker: BrokerAddr,
    },
    /// Delete a group's committed offsets on a topic (every partition of it,
    /// or --partition's): the group starts there from its reset policy. Not
    /// for a topic a member of the group reads (stop its consumers first).
    DeleteOffsets {
        /// Group.
        #[arg(long)]
        group: String,
        /// Topic.
        #[arg(long)]
        topic: String,
        /// Only these partitions (repeatable).
        #[arg(long = "partition")]
        partitions: Vec<i32>,
        #[command(flatten)]
        broker: BrokerAddr,
    },
}

pub async fn run(cli: Cli, settings: Option<crate::settings::Effective>) -> Result<()> {
    match cli.command {
        Command::Broker(a) => match settings {
            Some(s) => broker(*a, s).await,
            None => bail!("the broker's settings were not resolved"),
        },
        Command::Data { command } => crate::data::run(command),
        Command::Produce(a) => crate::produce::produce(a).await,
        Command::Consume(a) => crate::consume::consume(a).await,
        Command::Topics { command } => topics(command).await,
        Command::Groups { command } => groups(command).await,
        Command::Transactions {
            command:
                TransactionsCommand::List {
                    states,
                    min_age_ms,
                    broker,
                },
        } => crate::admin::list_transactions(&broker, &states, min_age_ms).await,
        Command::Perf { command } => crate::perf::run(command).await,
        Command::Users { command } => crate::users::run(command).await,
        Command::Acls { command } => crate::acls::run(command).await,
    }
}

/// A channel that closes on Ctrl-C or SIGTERM; a second one exits at once (status 130,
/// as a shell reports an interrupted command).
pub fn interrupt() -> Result<async_channel::Receiver<()>> {
    let (tx, rx) = async_channel::bounded::<()>(1);
    let tx = std::sync::Mutex::new(Some(tx));
    ctrlc::set_handler(move || {
        let first = tx.lock().map(|mut g| g.take().is_some()).unwrap_or(true);
        if !first {
            std::process::exit(130);
        }
    })
    .context("cannot install the Ctrl-C handler")?;
    Ok(rx)
}

/// The broker's signals: a channel that closes on Ctrl-C or SIGTERM, and
/// one that gets a message on each SIGHUP (at most one waits; more SIGHUPs
/// meanwhile ask for the same reload).
fn broker_signals() -> Result<(async_channel::Receiver<()>, async_channel::Receiver<()>)> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .context("cannot install the signal handlers")?;
    let (stop_tx, stop_rx) = async_channel::bounded::<()>(1);
    let (hup_tx, hup_rx) = async_channel::bounded::<()>(1);
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if sig == SIGHUP {
                    let _ = hup_tx.try_send(());
                } else {
                    stop_tx.close();
                    return;
                }
            }
        })
        .context("cannot start the signal thread")?;
    Ok((stop_rx, hup_rx))
}

/// The settings of topics created without explicit ones.
fn topic_defaults(a: &BrokerArgs) -> Result<TopicConfig> {
    let mut tc = TopicConfig {
        partitions: u32::try_from(a.partitions)?,
        retention_bytes: a.retention_bytes,
        retention_ms: a.retention_ms,
        segment_bytes: a.segment_bytes,
        max_pending: usize::try_from(a.max_pending)?,
        backpressure: a.backpressure,
        ..TopicConfig::default()
    };
    for pair in &a.topic_config {
        let (name, value) = config_pair(pair);
        tc.set_named(name, value)
            .with_context(|| format!("--topic-config {pair}"))?;
    }
    tc.check()
        .map_err(|e| anyhow::anyhow!("--topic-config: {e}"))?;
    Ok(tc)
}

fn broker_config(a: &BrokerArgs) -> Result<BrokerConfig> {
    let mut c = BrokerConfig::new(&a.data);
    c.listen = format!("{}:{}", a.host, a.port);
    c.default_topic = topic_defaults(a)?;
    c.fsync = a.fsync;
    c.max_frame_bytes = usize::try_from(a.max_frame_bytes)?;
    c.max_record_bytes = match a.max_record_bytes {
        Some(n) => usize::try_from(n)?,
        None => c.max_record_bytes.min(c.max_frame_bytes - 1024),
    };
    c.max_connections = usize::try_from(a.max_connections)?;
    c.max_partitions = a.max_partitions;
    c.max_groups = usize::try_from(a.max_groups)?;
    c.max_members_per_group = usize::try_from(a.max_members_per_group)?;
    c.group_initial_rebalance_delay = Duration::from_millis(a.group_initial_rebalance_delay_ms);
    c.group_min_session_timeout = Duration::from_millis(a.group_min_session_timeout_ms);
    c.group_max_session_timeout = Duration::from_millis(a.group_max_session_timeout_ms);
    c.share.partition.lock_duration_ms = a.share_record_lock_duration_ms;
    c.share.partition.delivery_count_limit = u16::try_from(a.share_delivery_count_limit)?;
    c.share.partition.max_in_flight = usize::try_from(a.share_partition_max_record_locks)?;
    c.share.auto_offset_reset = a
        .share_auto_offset_reset
        .parse()
        .map_err(anyhow::Error::msg)?;
    c.share.groups.session_timeout_ms = a.share_session_timeout_ms;
    c.share.groups.heartbeat_interval_ms = (a.share_session_timeout_ms / 9).clamp(500, 5_000);
    c.consumer_groups.session_timeout_ms = a.consumer_session_timeout_ms;
    c.consumer_groups.heartbeat_interval_ms = (a.consumer_session_timeout_ms / 9).clamp(500, 5_000);
    c.share.groups.max_groups = c.max_groups;
    c.connections_max_idle = Duration::from_millis(a.connections_max_idle_ms);
    c.max_open_files = usize::try_from(a.max_open_files)?;
    c.max_request_memory = match a.max_request_memory {
        Some(n) => usize::try_from(n)?,
        None => c.max_request_memory.max(c.max_frame_bytes),
    };
    c.auto_create_topics = !a.no_auto_create;
    c.verify_on_open = a.verify;
    c.busy_poll = a.busy_poll_us;
    c.allow_foreign_data_dir = a.allow_foreign_data_dir;
    c.http_listen = a.http_port.map(|p| format!("{}:{p}", a.host));
    c.kafka_listen = a.kafka_port.map(|p| format!("{}:{p}", a.host));
    c.kafka_advertised = a.kafka_advertised.clone();
    c.tls_cert = a.tls_cert.clone();
    c.tls_key = a.tls_key.clone();
    c.tls_client_ca = a.tls_client_ca.clone();
    c.auth = a.auth;
    c.admin_users = a.admin_user.clone();
    c.authorizer = a.authorizer == "on";
    c.max_connections_per_principal = a.max_connections_per_principal;
    c.produce_quota_bytes_per_sec = a.produce_quota_bytes_per_sec;
    c.cleaner = flume_broker::storage::CleanerLimits {
        key_map_bytes: usize::try_from(a.cleaner_key_map_bytes).unwrap_or(usize::MAX),
        io_bytes_per_sec: a.cleaner_io_bytes_per_sec,
    };
    Ok(c)
}

async fn broker(a: BrokerArgs, mut settings: crate::settings::Effective) -> Result<()> {
    if a.print_config {
        print!("{}", settings.to_toml());
        std::io::stdout().flush().ok();
        return Ok(());
    }
    if a.data.exists() && !a.data.is_dir() {
        bail!(
            "data path {} is not a directory (pass --data a directory, or a path to create one)",
            a.data.display()
        );
    }
    let c = broker_config(&a)?;
    // Raised before the broker opens its topics; reported once it has started.
    let fds = flume_broker::server::ensure_fd_limit(&c);
    let (stop, hup) = broker_signals()?;
    let broker = Broker::start(c)
        .await
        .with_context(|| format!("cannot start the broker on {}:{}", a.host, a.port))?;
    println!(
        "flume broker listening on {} (data {})",
        broker.local_addr(),
        a.data.display()
    );
    if let Some(http) = broker.http_addr() {
        println!("flume broker dashboard on http://{http}/ (metrics at /metrics)");
    }
    if let Some(kafka) = broker.kafka_addr() {
        println!("flume broker serving Kafka clients on {kafka}");
    }
    if let Some(file) = &settings.file {
        tracing::info!(file = %file.display(), "settings read from the configuration file (SIGHUP reads it again)");
    }
    if !fds.is_enough() {
        tracing::warn!(
            "{fds}: raise it (ulimit -n {}, LimitNOFILE= in a systemd unit) or lower --max-open-files/--max-connections, or opens and accepts will fail with EMFILE under load",
            fds.needed
        );
    }
    if broker.is_tls() {
        tracing::info!("TLS on every port (SIGHUP reloads the certificates)");
    }
    std::io::stdout().flush().ok();
    loop {
        futures::select! {
            _ = stop.recv().fuse() => break,
            r = hup.recv().fuse() => {
                if r.is_err() {
                    break;
                }
                match broker.reload_tls().await {
                    Ok(()) if broker.is_tls() => tracing::info!("SIGHUP: TLS certificates reloaded"),
                    Ok(()) => tracing::info!("SIGHUP: no TLS configured, nothing to reload"),
                    Err(e) => tracing::error!("SIGHUP: TLS reload failed, keeping the certificates in use: {e}"),
                }
                reload(&broker, &a, &mut settings);
            }
        }
    }
    tracing::info!("shutting down: draining queues to disk");
    broker.shutdown().await;
    Ok(())
}

/// SIGHUP: reads the settings again (the configuration file as it is now;
/// the command line and environment are the process's) and applies what can
/// change while running ([`crate::settings::RELOADABLE`]); every other change
/// is logged as needing a restart, and keeps its value until then.
fn reload(broker: &Broker, started: &BrokerArgs, settings: &mut crate::settings::Effective) {
    use crate::settings::{ParseError, RELOADABLE};
    let (new_args, new) = match settings.reread() {
        Ok(r) => r,
        Err(ParseError::Config(e)) => {
            tracing::error!("SIGHUP: {e}; keeping the settings in use");
            return;
        }
        Err(ParseError::Flags(e)) => {
            tracing::error!(
                "SIGHUP: {}; keeping the settings in use",
                e.render()
                    .to_string()
                    .lines()
                    .next()
                    .unwrap_or("invalid settings")
            );
            return;
        }
    };
    let changes = settings.changes(&new);
    if changes.is_empty() {
        tracing::info!("SIGHUP: settings unchanged");
        return;
    }
    let engine = broker.engine();
    let (reloadable, restart): (Vec<_>, Vec<_>) = changes
        .into_iter()
        .partition(|(k, _, _)| RELOADABLE.contains(&k.as_str()));
    let changed = |key: &str| reloadable.iter().any(|(k, _, _)| k == key);
    let topic_keys = [
        "partitions",
        "retention-bytes",
        "retention-ms",
        "segment-bytes",
        "topic-config",
        "max-pending",
        "backpressure",
    ];
    let mut applied: Vec<&str> = Vec::new();
    if topic_keys.iter().any(|k| changed(k)) {
        match topic_defaults(&new_args)
            .map_err(|e| e.to_string())
            .and_then(|tc| engine.set_default_topic(tc).map_err(|e| e.to_string()))
        {
            Ok(()) => applied.extend(topic_keys.iter().filter(|k| changed(k))),
            Err(e) => tracing::error!("SIGHUP: topic defaults not changed: {e}"),
        }
    }
    if changed("max-connections-per-principal") || changed("produce-quota-bytes-per-sec") {
        let per_principal = new_args
            .max_connections_per_principal
            .unwrap_or(usize::try_from(started.max_connections).unwrap_or(usize::MAX));
        engine
            .quotas()
            .set_limits(per_principal, new_args.produce_quota_bytes_per_sec);
        applied.extend(
            [
                "max-connections-per-principal",
                "produce-quota-bytes-per-sec",
            ]
            .iter()
            .filter(|k| changed(k)),
        );
    }
    if changed("log-level") {
        match crate::logging::set_level(new_args.log_level.as_deref()) {
            Ok(()) => applied.push("log-level"),
            Err(e) => tracing::error!("SIGHUP: log level not changed: {e}"),
        }
    }
    for (key, old, now) in &reloadable {
        if applied.contains(&key.as_str()) {
            settings.take(key, &new);
            let scope = if topic_keys.contains(&key.as_str()) {
                " (topics created from now on; existing topics keep theirs: flume-cli topics alter)"
            } else {
                ""
            };
            tracing::info!(setting = %key, "SIGHUP: {key} changed from {old} to {now}{scope}");
        }
    }
    for (key, old, now) in &restart {
        tracing::warn!(setting = %key, "SIGHUP: {key} changed from {old} to {now}: needs a restart, keeping {old} until then");
    }
}

/// Turns a client error into a message that says what to do.
pub fn describe(e: flume_client::Error) -> anyhow::Error {
    let code = e.code();
    // "for topic/-1" means "no partition chosen": name the topic alone.
    let e = match e {
        flume_client::Error::Broker {
            code,
            context: Some(c),
            ..
        } if c.ends_with("/-1") => anyhow::anyhow!(
            "broker error {code} for topic {}",
            c.trim_end_matches("/-1")
        ),
        e => anyhow::Error::new(e),
    };
    let hint = match code {
        Some(ErrorCode::UnknownTopic) => "the topic does not exist: create it with `flume-cli topics create`",
        Some(ErrorCode::QueueFull) => {
            "the broker is in reject mode and its partition queue is full; retry later"
        }
        // Said only when the error does not state the limit itself.
        Some(ErrorCode::RecordTooLarge)
            if !format!("{e:#}").contains("max_record_bytes") =>
        {
            "larger than the broker's --max-record-bytes, which is 1 MiB unless the broker was started with another value"
        }
        Some(ErrorCode::AuthorizationFailed) => {
            "the broker's ACLs do not allow this principal to do that: an admin can grant it with `flume-cli acls add`"
        }
        Some(ErrorCode::SecurityDisabled) => {
            "the broker runs with --authorizer off, so ACLs are not in use: only an admin (--admin-user) may list or stage them, and they apply once the broker runs with --authorizer on"
        }
        Some(ErrorCode::InvalidName) => {
            "topic names are 1 to 249 characters of A-Z a-z 0-9 . _ -, not `.` or `..`, and do not start with `__`; group ids are 1 to 1024 bytes"
        }
        _ => return e,
    };
    anyhow::anyhow!("{e:#} ({hint})")
}

async fn topics(cmd: TopicsCommand) -> Result<()> {
    match cmd {
        TopicsCommand::List { broker } => {
            let admin = Admin::connect_with(&broker.addr, broker.connection()?)
                .await
                .context("cannot reach the broker")?;
            let topics = admin.topics(&[]).await?;
            if topics.is_empty() {
                println!("no topics");
            }
            for t in topics {
                let records: i64 = t.partitions.iter().map(|p| p.log_end - p.log_start).sum();
                println!(
                    "{}\tpartitions={}\trecords={records}",
                    t.name,
                    t.partitions.len()
                );
            }
        }
        TopicsCommand::Create {
            name,
            partitions,
            retention_bytes,
            retention_ms,
            backpressure,
            config,
            broker,
        } => {
            let admin = Admin::connect_with(&broker.addr, broker.connection()?)
                .await
                .context("cannot reach the broker")?;
            if !config.is_empty() {
                let (rb, rm) = (
                    retention_bytes.map(|v| v.to_string()),
                    retention_ms.map(|v| v.to_string()),
                );
                let mut pairs: Vec<(&str, &str)> = Vec::new();
                if let Some(v) = &rb {
                    pairs.push(("retention.bytes", v));
                }
                if let Some(v) = &rm {
                    pairs.push(("retention.ms", v));
                }
                pairs.extend(config.iter().map(|p| config_pair(p)));
                admin
                    .create_topic_with_configs(&name, partitions, &pairs)
                    .await
                    .map_err(describe)?;
                println!("created topic {name} with {partitions} partitions");
                return Ok(());
            }
            admin
                .create_topic(CreateTopicRequest {
                    name: name.clone(),
                    partitions,
                    retention_bytes: retention_bytes.unwrap_or(-1),
                    retention_ms: retention_ms.unwrap_or(-1),
                    backpressure: match backpressure {
                        None => -1,
                        Some(Backpressure::Block) => 0,
                        Some(Backpressure::Reject) => 1,
                    },
                    ..CreateTopicRequest::default()
                })
                .await
                .map_err(describe)?;
            println!("created topic {name} with {partitions} partitions");
        }
        TopicsCommand::Describe { name, broker } => {
            let admin = Admin::connect_with(&broker.addr, broker.connection()?)
                .await
                .context("cannot reach the broker")?;
            let t = admin
                .topics(std::slice::from_ref(&name))
                .await?
                .into_iter()
                .next();
            let Some(t) = t.filter(|t| t.error.is_ok()) else {
                bail!("topic {name} does not exist");
            };
            println!("topic {name}: {} partitions", t.partitions.len());
            println!("{}", crate::admin::settings(&admin, &name).await?);
            crate::admin::print_configs(&admin, &name).await?;
            println!("{:>9} {:>12} {:>12}", "PARTITION", "START", "END");
            for p in t.partitions {
                println!("{:>9} {:>12} {:>12}", p.partition, p.log_start, p.log_end);
            }
        }
        TopicsCommand::Delete { name, broker } => {
            crate::admin::delete_topic(&broker, &name).await?;
        }
        TopicsCommand::DeleteRecords {
            name,
            partition,
            before,
            all: _,
            broker,
        } => {
            crate::admin::delete_records(&broker, &name, partition, before).await?;
        }
        TopicsCommand::AddPartitions {
            name,
            partitions,
            dry_run,
            broker,
        } => {
            crate::admin::add_partitions(&broker, &name, partitions, dry_run).await?;
        }
        TopicsCommand::Alter {
            name,
            retention_ms,
            retention_bytes,
            segment_bytes,
            config,
            delete_config,
            broker,
        } => {
            if config.is_empty() && delete_config.is_empty() {
                crate::admin::alter_topic(
                    &broker,
                    &name,
                    retention_ms,
                    retention_bytes,
                    segment_bytes,
                )
                .await?;
            } else {
                let limit = |l: Option<crate::admin::Limit>| {
                    l.map(|crate::admin::Limit(v)| v.map_or("-1".to_owned(), |v| v.to_string()))
                };
                let shorthands = [
                    ("retention.ms", limit(retention_ms)),
                    ("retention.bytes", limit(retention_bytes)),
                    ("segment.bytes", segment_bytes.map(|v| v.to_string())),
                ];
                let mut set: Vec<(&str, &str)> = shorthands
                    .iter()
                    .filter_map(|(k, v)| v.as_deref().map(|v| (*k, v)))
                    .collect();
                set.extend(config.iter().map(|p| config_pair(p)));
                let delete: Vec<&str> = delete_config.iter().map(String::as_str).collect();
                crate::admin::alter_topic_configs(&broker, &name, &set, &delete).await?;
            }
        }
    }
    Ok(())
}

async fn groups(cmd: GroupsCommand) -> Result<()> {
    let (group, topic, broker) = match cmd {
        GroupsCommand::Lag {
            group,
            topic,
            broker,
        } => (group, topic, broker),
        GroupsCommand::ResetOffsets {
            group,
            topic,
            to,
            dry_run,
            broker,
        } => return crate::admin::reset_offsets(&broker, &group, &topic, to, dry_run).await,
        GroupsCommand::Delete {
            group,
            group_flag,
            broker,
        } => {
            let group = group.or(group_flag).unwrap_or_default();
            return crate::admin::delete_group(&broker, &group).await;
        }
        GroupsCommand::DeleteOffsets {
            group,
            topic,
            partitions,
            broker,
        } => return crate::admin::delete_offsets(&broker, &group, &topic, &partitions).await,
        GroupsCommand::List { states, broker } => {
            return crate::admin::list_groups(&broker, &states).await
        }
        GroupsCommand::Describe { group, broker } => {
            return crate::admin::describe_group(&broker, &group).await
        }
    };
    let admin = Admin::connect_with(&broker.addr, broker.connection()?)
        .await
        .context("cannot reach the broker")?;
    let topics: Vec<String> = match &topic {
        Some(t) => {
            let known = admin
                .topics(std::slice::from_ref(t))
                .await
                .map_err(describe)?
                .into_iter()
                .any(|m| m.error.is_ok());
            if !known {
                bail!("topic {t} does not exist");
            }
            vec![t.clone()]
        }
        None => admin
            .topics(&[])
            .await
            .map_err(describe)?
            .into_iter()
            .map(|t| t.name)
            .collect(),
    };
    let parts = admin
        .group_offsets(&group, &topics)
        .await
        .map_err(describe)?;
    // A group is known by its commits: without --topic, show only the topics it committed on.
    let committed: std::collections::HashSet<&str> = parts
        .iter()
        .filter(|p| p.error.is_ok() && p.committed >= 0)
        .map(|p| p.topic.as_str())
        .collect();
    if committed.is_empty() {
        match &topic {
            Some(t) => bail!("group {group} has no committed offset on topic {t} (unknown group, or it never committed there)"),
            None => bail!("group {group} has no committed offsets (unknown group, or it never committed)"),
        }
    }
    println!(
        "{:<24} {:>9} {:>12} {:>12} {:>10}",
        "TOPIC", "PARTITION", "COMMITTED", "END", "LAG"
    );
    for p in parts
        .iter()
        .filter(|p| committed.contains(p.topic.as_str()))
    {
        if !p.error.is_ok() {
            println!("{:<24} {}", p.topic, p.error);
            continue;
        }
        let committed = if p.committed < 0 {
            "-".to_owned()
        } else {
            p.committed.to_string()
        };
        println!(
            "{:<24} {:>9} {:>12} {:>12} {:>10}",
            p.topic,
            p.partition,
            committed,
            p.log_end,
            p.lag()
        );
    }
    Ok(())
}

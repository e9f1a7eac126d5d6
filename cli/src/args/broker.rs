//! `flume-cli broker`'s flags: every setting of a broker (each also a
//! `FLUME_<FLAG>` variable and a key of `--config`'s file, `crate::settings`).

use std::path::PathBuf;

use clap::builder::BoolishValueParser;
use clap::Args;
use flume_broker::security::auth::AuthMode;
use flume_broker::{Backpressure, FsyncPolicy};

use super::parse::{parse_config_pair, parse_fsync, parse_log_level, range_u64};

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
    pub(crate) host: String,
    /// Port (0 picks a free one).
    #[arg(long, env = "FLUME_PORT", default_value_t = 9092, value_parser = range_u64(0, 65535))]
    pub(crate) port: u64,
    /// Data directory, held by one broker at a time (lock file `.lock`).
    #[arg(long, env = "FLUME_DATA", default_value = "./data")]
    pub(crate) data: PathBuf,
    /// Use a --data directory that is not empty and is not a Flume data
    /// directory (by default such a directory is refused).
    #[arg(long, env = "FLUME_ALLOW_FOREIGN_DATA_DIR", value_parser = BoolishValueParser::new())]
    pub(crate) allow_foreign_data_dir: bool,
    /// Partitions of auto-created topics.
    #[arg(long, env = "FLUME_PARTITIONS", default_value_t = 3, value_parser = range_u64(1, 10000))]
    pub(crate) partitions: u64,
    /// When to fsync appended records: always, never, or every N milliseconds.
    #[arg(long, env = "FLUME_FSYNC", default_value = "never", value_parser = parse_fsync)]
    pub(crate) fsync: FsyncPolicy,
    /// Retention by size per partition (bytes).
    #[arg(long, env = "FLUME_RETENTION_BYTES", value_parser = range_u64(1, i64::MAX))]
    pub(crate) retention_bytes: Option<u64>,
    /// Retention by age (milliseconds).
    #[arg(long, env = "FLUME_RETENTION_MS", value_parser = range_u64(1, i64::MAX))]
    pub(crate) retention_ms: Option<u64>,
    /// Segment size (bytes).
    #[arg(long, env = "FLUME_SEGMENT_BYTES", default_value_t = 64 * 1024 * 1024, value_parser = range_u64(1024, 1 << 31))]
    pub(crate) segment_bytes: u64,
    /// A default for topics created from then on by Kafka's topic config
    /// name, NAME=VALUE (repeat for more): `cleanup.policy=compact`,
    /// `max.message.bytes=2097152`, ... (`docs/kafka.md` lists them). It
    /// comes after the shorthand flags above (`--retention-ms`, ...).
    #[arg(long, env = "FLUME_TOPIC_CONFIG", value_name = "NAME=VALUE", value_parser = parse_config_pair)]
    pub(crate) topic_config: Vec<String>,
    /// Partition queue capacity (pending append requests).
    #[arg(long, env = "FLUME_MAX_PENDING", default_value_t = 1024, value_parser = range_u64(1, 100_000))]
    pub(crate) max_pending: u64,
    /// When a partition queue is full: block (wait) or reject (QUEUE_FULL).
    #[arg(long, env = "FLUME_BACKPRESSURE", default_value = "block")]
    pub(crate) backpressure: Backpressure,
    /// Largest request frame (bytes).
    #[arg(long, env = "FLUME_MAX_FRAME_BYTES", default_value_t = 16 * 1024 * 1024, value_parser = range_u64(4096, 1 << 30))]
    pub(crate) max_frame_bytes: u64,
    /// Largest record in bytes, counting its 16-byte header (offset, size,
    /// crc), 64 or more and at most max-frame-bytes - 1024 [default: 1048576
    /// (1 MiB), the producer's default too]. Larger records get RECORD_TOO_LARGE.
    #[arg(long, env = "FLUME_MAX_RECORD_BYTES", value_parser = range_u64(64, 1 << 30))]
    pub(crate) max_record_bytes: Option<u64>,
    /// Most concurrent connections; each holds a file descriptor, a task and
    /// its read/write buffers (a few KB idle, more while it has requests in
    /// flight: about 30 KB with a group member's waiting fetch and heartbeat).
    /// A GroupConsumer, Producer or Admin holds one each.
    #[arg(long, env = "FLUME_MAX_CONNECTIONS", default_value_t = 10_000, value_parser = range_u64(1, 1_000_000))]
    pub(crate) max_connections: u64,
    /// Most partitions over all topics; an idle partition costs a few KB of
    /// memory, no file descriptor and no task. A topic past it gets LIMIT_REACHED.
    #[arg(long, env = "FLUME_MAX_PARTITIONS", default_value_t = 100_000, value_parser = range_u64(1, 10_000_000))]
    pub(crate) max_partitions: u64,
    /// Most consumer groups with members at once. A group costs about 1 KB of
    /// coordinator state plus its members' (see --max-members-per-group) and
    /// no task; its members' heartbeats cost CPU, not memory (1,000 groups of
    /// 10: README, Scale). A join that would create one more gets
    /// LIMIT_REACHED, logged with the limit's name and value.
    #[arg(long, env = "FLUME_MAX_GROUPS", default_value_t = 10_000, value_parser = range_u64(1, 10_000_000))]
    pub(crate) max_groups: u64,
    /// Most members of one group. A member costs about 0.5 KB of coordinator
    /// state (its id, topics, assignment) plus its connection (see
    /// --max-connections; a GroupConsumer holds one); a rebalance of a group
    /// of N members takes O(N x partitions) work. A new member past it gets
    /// LIMIT_REACHED, logged with the limit's name and value.
    #[arg(long, env = "FLUME_MAX_MEMBERS_PER_GROUP", default_value_t = 1_000, value_parser = range_u64(1, 1_000_000))]
    pub(crate) max_members_per_group: u64,
    /// How long a Kafka consumer group that has no members waits for more to
    /// join before it forms its first generation, in milliseconds (Kafka's
    /// group.initial.rebalance.delay.ms); each member joining meanwhile
    /// extends it, up to the rebalance timeout. 0 forms it at once.
    #[arg(long, env = "FLUME_GROUP_INITIAL_REBALANCE_DELAY_MS", default_value_t = 3_000, value_parser = range_u64(0, 300_000))]
    pub(crate) group_initial_rebalance_delay_ms: u64,
    /// The shortest session timeout a group member may ask for, in
    /// milliseconds (Kafka's group.min.session.timeout.ms): a Kafka JoinGroup
    /// below it gets INVALID_SESSION_TIMEOUT, a Flume JOIN_GROUP gets this
    /// session instead. Test setups lower it for short sessions.
    #[arg(long, env = "FLUME_GROUP_MIN_SESSION_TIMEOUT_MS", default_value_t = 6_000, value_parser = range_u64(1, i64::from(i32::MAX)))]
    pub(crate) group_min_session_timeout_ms: u64,
    /// The longest session timeout a group member may ask for, in
    /// milliseconds (Kafka's group.max.session.timeout.ms): a Kafka JoinGroup
    /// above it gets INVALID_SESSION_TIMEOUT, a Flume JOIN_GROUP gets this
    /// session instead. At least --group-min-session-timeout-ms.
    #[arg(long, env = "FLUME_GROUP_MAX_SESSION_TIMEOUT_MS", default_value_t = 1_800_000, value_parser = range_u64(1, i64::from(i32::MAX)))]
    pub(crate) group_max_session_timeout_ms: u64,
    /// How long a share group's member holds a record it acquired before it
    /// goes back to the others, in milliseconds (Kafka's
    /// share.record.lock.duration.ms).
    #[arg(long, env = "FLUME_SHARE_RECORD_LOCK_DURATION_MS", default_value_t = 30_000, value_parser = range_u64(1_000, 3_600_000))]
    pub(crate) share_record_lock_duration_ms: u64,
    /// Deliveries after which a record a share group released or let time
    /// out is archived instead of delivered again (Kafka's
    /// share.delivery.count.limit): a poison record stops coming back.
    #[arg(long, env = "FLUME_SHARE_DELIVERY_COUNT_LIMIT", default_value_t = 5, value_parser = range_u64(2, 10))]
    pub(crate) share_delivery_count_limit: u64,
    /// Most records in flight (acquired, or released and not yet done) per
    /// share-partition; past it, nothing new is acquired until the lowest
    /// complete (Kafka's share.partition.max.record.locks).
    #[arg(long, env = "FLUME_SHARE_PARTITION_MAX_RECORD_LOCKS", default_value_t = 2_000, value_parser = range_u64(100, 10_000))]
    pub(crate) share_partition_max_record_locks: u64,
    /// Where a new share group starts reading: latest (records produced from
    /// its first fetch on, Kafka's default) or earliest
    /// (share.auto.offset.reset).
    #[arg(long, env = "FLUME_SHARE_AUTO_OFFSET_RESET", default_value = "latest", value_parser = ["latest", "earliest"])]
    pub(crate) share_auto_offset_reset: String,
    /// A share group's member not heard from for this long is removed and
    /// its records go back to the others, in milliseconds
    /// (group.share.session.timeout.ms).
    #[arg(long, env = "FLUME_SHARE_SESSION_TIMEOUT_MS", default_value_t = 45_000, value_parser = range_u64(1_000, 3_600_000))]
    pub(crate) share_session_timeout_ms: u64,
    /// A consumer-protocol group's member (KIP-848, group.protocol=consumer)
    /// not heard from for this long is removed and its partitions go to the
    /// others, in milliseconds (group.consumer.session.timeout.ms); members
    /// heartbeat every ninth of it, 0.5 to 5 s.
    #[arg(long, env = "FLUME_CONSUMER_SESSION_TIMEOUT_MS", default_value_t = 45_000, value_parser = range_u64(1_000, 3_600_000))]
    pub(crate) consumer_session_timeout_ms: u64,
    /// Close a Kafka connection that sends no request for this long, in
    /// milliseconds (Kafka's connections.max.idle.ms; clients keep idle
    /// connections to the coordinator and each leader). Flume's own
    /// connections are never closed for being idle.
    #[arg(long, env = "FLUME_CONNECTIONS_MAX_IDLE_MS", default_value_t = 600_000, value_parser = range_u64(1_000, 86_400_000))]
    pub(crate) connections_max_idle_ms: u64,
    /// Most segment files open at once over all partitions (an LRU; sealed and
    /// idle segments are opened again on demand). The broker needs about
    /// max-open-files + max-connections + 64 file descriptors and raises its
    /// soft RLIMIT_NOFILE towards that at start (warning if the hard limit is lower).
    #[arg(long, env = "FLUME_MAX_OPEN_FILES", default_value_t = 16_384, value_parser = range_u64(1, 10_000_000))]
    pub(crate) max_open_files: u64,
    /// Most bytes of requests being served at once; past it the broker stops
    /// reading until requests complete [default: 64 MiB, or max-frame-bytes if larger].
    #[arg(long, env = "FLUME_MAX_REQUEST_MEMORY", value_parser = range_u64(4096, 1 << 40))]
    pub(crate) max_request_memory: Option<u64>,
    /// Do not create topics on first use.
    #[arg(long, env = "FLUME_NO_AUTO_CREATE", value_parser = BoolishValueParser::new())]
    pub(crate) no_auto_create: bool,
    /// Check every record of sealed segments at startup.
    #[arg(long, env = "FLUME_VERIFY", value_parser = BoolishValueParser::new())]
    pub(crate) verify: bool,
    /// After each response, keep trying to read the connection's next request
    /// before parking: `0` never spins (the default: spinning connections
    /// delay the broker's other work, e.g. consumers' latency), `auto` spins
    /// only as long as it recently paid off (up to 50 µs; `auto:N` up to N
    /// µs; about 2x one-at-a-time throughput), N spins N µs every time.
    #[arg(long, env = "FLUME_BUSY_POLL_US", default_value = "0")]
    pub(crate) busy_poll_us: flume_broker::config::BusyPoll,
    /// Serve /metrics (Prometheus), /api/overview, /healthz and the dashboard
    /// (/) over HTTP on this port of --host (0 picks a free one).
    #[arg(long, env = "FLUME_HTTP_PORT")]
    pub(crate) http_port: Option<u16>,
    /// Also serve Kafka clients (the Kafka wire protocol, see docs/kafka.md)
    /// on this port of --host (0 picks a free one).
    #[arg(long, env = "FLUME_KAFKA_PORT")]
    pub(crate) kafka_port: Option<u16>,
    /// HOST:PORT that Kafka clients are told to connect to (Metadata), when
    /// --host:--kafka-port is not what they can reach [default: the bound address].
    #[arg(long, env = "FLUME_KAFKA_ADVERTISED", requires = "kafka_port")]
    pub(crate) kafka_advertised: Option<String>,
    /// Certificate chain (PEM) of the broker: every port (Flume, Kafka, HTTP)
    /// then speaks TLS 1.2 or 1.3 only. SIGHUP reads it (and the key and
    /// client CA) again; open connections keep their session.
    #[arg(long, env = "FLUME_TLS_CERT", value_name = "PEM", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// Private key (PEM) of --tls-cert.
    #[arg(long, env = "FLUME_TLS_KEY", value_name = "PEM", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// CA certificates (PEM): clients must present a certificate signed by
    /// one (mTLS); its subject becomes the connection's principal.
    #[arg(
        long,
        env = "FLUME_TLS_CLIENT_CA",
        value_name = "PEM",
        requires = "tls_cert"
    )]
    pub(crate) tls_client_ca: Option<PathBuf>,
    /// Authentication on the Flume port: off (the default; a warning when
    /// --host is not loopback), optional, or required (SCRAM-SHA-256 users,
    /// see `flume-cli users`).
    #[arg(long, env = "FLUME_AUTH", default_value = "off")]
    pub(crate) auth: AuthMode,
    /// A user who may add and remove users (repeat for more). Make the first
    /// one with `flume-cli users add NAME --data DIR` while the broker is stopped.
    #[arg(
        long,
        env = "FLUME_ADMIN_USER",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    pub(crate) admin_user: Vec<String>,
    /// Enforce ACLs (`flume-cli acls`): on, a request is served only if an
    /// ACL allows it (--admin-user admins may do everything); off (the
    /// default), every client may do everything.
    #[arg(long, env = "FLUME_AUTHORIZER", default_value = "off", value_parser = ["on", "off"])]
    pub(crate) authorizer: String,
    /// Most connections one principal (user, client certificate; anonymous
    /// clients: per IP address) may have open on the Flume and Kafka ports.
    /// By default --max-connections (one tenant may use them all); set it
    /// lower to keep tenants from starving each other.
    #[arg(long, env = "FLUME_MAX_CONNECTIONS_PER_PRINCIPAL", value_name = "N")]
    pub(crate) max_connections_per_principal: Option<usize>,
    /// Produce bytes per second each principal may send; past it, its
    /// connections are throttled (Kafka: throttle_time_ms). Off by default.
    #[arg(long, env = "FLUME_PRODUCE_QUOTA_BYTES_PER_SEC", value_name = "BYTES")]
    pub(crate) produce_quota_bytes_per_sec: Option<u64>,
    /// Memory of the log cleaner's key map (25 bytes a key): a compacted
    /// partition with more keys is cleaned in several passes.
    #[arg(long, env = "FLUME_CLEANER_KEY_MAP_BYTES", value_name = "BYTES", default_value_t = 32 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(4096..=1 << 40))]
    pub(crate) cleaner_key_map_bytes: u64,
    /// Bytes a second the log cleaner may read and write (its share of the
    /// disk). No limit by default; it runs on one thread either way.
    #[arg(long, env = "FLUME_CLEANER_IO_BYTES_PER_SEC", value_name = "BYTES",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) cleaner_io_bytes_per_sec: Option<u64>,
}

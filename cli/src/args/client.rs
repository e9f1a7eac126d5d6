//! The flags every client command shares: `--broker` with its TLS and login
//! flags, `--topic`, and the producer settings only a Kafka cluster takes.
//! What they do is `crate::common`'s.

use std::path::PathBuf;

use clap::Args;

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

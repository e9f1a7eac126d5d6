//! `flume-cli topics`.

use clap::Subcommand;
use flume_broker::Backpressure;

use super::client::BrokerAddr;
use super::parse::{parse_config_pair, range_u64, Limit};

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
        retention_ms: Option<Limit>,
        /// Retention by size per partition in bytes, or `none` for no limit.
        #[arg(long)]
        retention_bytes: Option<Limit>,
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

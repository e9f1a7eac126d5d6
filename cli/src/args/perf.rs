//! `flume-cli perf`'s tools and their flags.

use clap::{Args, Subcommand};

use super::client::{BrokerAddr, KafkaProduceFlags, TopicAt};
use super::parse::range_u64;

#[derive(Debug, Subcommand)]
pub enum PerfCommand {
    /// Produce N records as fast as possible and report throughput and latency.
    Produce(ProduceArgs),
    /// Consume N records as fast as possible and report throughput.
    Consume(ConsumeArgs),
    /// Produce at a fixed rate while a group consumer reads: latency from send to delivery.
    E2e(E2eArgs),
    /// Many consumer groups at once (default 1,000 x 10 members): the broker's
    /// idle CPU, RSS and descriptors, and one group's rebalance time while all run.
    Groups(GroupsArgs),
    /// A queue: share consumers of one group accept records one by one as
    /// they are produced; records/s and each consumer's share.
    Share(ShareArgs),
}

/// How every perf run prints its summary: one definition flattened into each.
#[derive(Debug, Args)]
pub struct Summary {
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Bytes at the start of each perf e2e value: the tag, this run's id, the send time.
pub const E2E_MIN_SIZE: usize = 24;

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct E2eArgs {
    #[command(flatten)]
    pub(crate) broker: BrokerAddr,
    /// Topic (use a fresh one: the consumer starts at the end).
    #[arg(long)]
    pub(crate) topic: String,
    /// Records to send.
    #[arg(long, default_value_t = 100_000, value_parser = range_u64(1, 100_000_000))]
    pub(crate) records: u64,
    /// Records per second.
    #[arg(long, default_value_t = 50_000, value_parser = range_u64(1, 10_000_000))]
    pub(crate) rate: u64,
    /// Value size in bytes, at least 24: a tag marking the record as this run's and
    /// the send time travel in the value.
    #[arg(long, default_value_t = 100, value_parser = range_u64(E2E_MIN_SIZE as i64, 64 * 1024 * 1024))]
    pub(crate) record_size: u64,
    /// Spinning of the producer's and the consumer's connections, as for
    /// `perf produce`: `auto`, `auto:N`, `0` (off) or N µs fixed.
    #[arg(long, default_value = "auto")]
    pub(crate) busy_poll_us: flume_client::BusyPoll,
    #[command(flatten)]
    pub(crate) summary: Summary,
}

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub(crate) at: TopicAt,
    #[command(flatten)]
    pub(crate) kafka: KafkaProduceFlags,
    /// Records to send (the first goes before the clock starts).
    #[arg(long, default_value_t = 1_000_000, value_parser = range_u64(1, 100_000_000))]
    pub(crate) records: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100, value_parser = range_u64(0, 64 * 1024 * 1024))]
    pub(crate) record_size: u64,
    /// Distinct keys (0: no keys).
    #[arg(long, default_value_t = 0, value_parser = range_u64(0, i64::MAX))]
    pub(crate) key_cardinality: u64,
    /// Spread records over partitions 0..N of each topic in turn (explicit
    /// partitions, so every one of them gets records; 0: the producer's
    /// partitioner decides). The topic must have at least N partitions.
    #[arg(long, default_value_t = 0, value_parser = range_u64(0, 100_000))]
    pub(crate) partitions_spread: u64,
    /// Spread records over T topics named `<topic>-0` .. `<topic>-<T-1>`
    /// (auto-created with the broker's default partitions if missing); with
    /// --partitions-spread N, record j goes to topic j % T, partition (j / T) % N.
    #[arg(long, default_value_t = 0, value_parser = range_u64(0, 1_000_000))]
    pub(crate) topics_spread: u64,
    /// Producer connections, each driven by its own task.
    #[arg(long, default_value_t = 1, value_parser = range_u64(1, 1024))]
    pub(crate) producers: u64,
    /// Linger before sending a batch (ms).
    #[arg(long, default_value_t = 0, value_parser = range_u64(0, 60_000))]
    pub(crate) linger_ms: u64,
    /// Largest batch per partition (bytes).
    #[arg(long, default_value_t = 1024 * 1024, value_parser = range_u64(1, 1 << 30))]
    pub(crate) batch_bytes: u64,
    /// PRODUCE requests outstanding per producer (the producer's `max_in_flight`).
    #[arg(long, default_value_t = 8, value_parser = range_u64(1, 1024))]
    pub(crate) max_in_flight: u64,
    /// Records in flight per producer (ignored with --sync); 0: no window of
    /// its own, the producer's buffer (32 MiB of records) bounds them, as in
    /// Kafka's producer-perf-test. A small window measures latency at less
    /// than full load; no window lets batches grow as large as the broker's
    /// pace allows, which a spread over many partitions needs.
    #[arg(long, default_value_t = 0, value_parser = range_u64(0, 10_000_000))]
    pub(crate) window: u64,
    /// One record per round trip: wait for each acknowledgement before the next send.
    #[arg(long)]
    pub(crate) sync: bool,
    /// Before parking the thread for a response, keep trying to read it
    /// (the client's `ConnectionConfig::busy_poll`): `auto` spins only as long
    /// as it recently paid off (up to 50 µs; `auto:N` up to N µs), `0` never
    /// spins, N spins N µs every time.
    #[arg(long, default_value = "auto")]
    pub(crate) busy_poll_us: flume_client::BusyPoll,
    #[command(flatten)]
    pub(crate) summary: Summary,
}

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub(crate) at: TopicAt,
    /// Records to read.
    #[arg(long, default_value_t = 1_000_000, value_parser = range_u64(1, i64::MAX))]
    pub(crate) records: u64,
    /// Read as a member of this group (default: every partition from the start).
    #[arg(long)]
    pub(crate) group: Option<String>,
    #[command(flatten)]
    pub(crate) summary: Summary,
}

#[derive(Debug, Args)]
pub struct GroupsArgs {
    #[command(flatten)]
    pub(crate) broker: BrokerAddr,
    /// Consumer groups.
    #[arg(long, default_value_t = 1000, value_parser = range_u64(1, 100_000))]
    pub(crate) groups: u64,
    /// Members per group.
    #[arg(long, default_value_t = 10, value_parser = range_u64(1, 10_000))]
    pub(crate) members: u64,
    /// Partitions of the topic every group subscribes to (created with them if missing).
    #[arg(long, default_value_t = 10, value_parser = range_u64(1, 100_000))]
    pub(crate) topic_partitions: u64,
    /// The topic (no records are written to it: the members idle in `next()`).
    #[arg(long, default_value = "perf-groups")]
    pub(crate) topic: String,
    /// Prefix of the group names (`<prefix>-0` ..).
    #[arg(long, default_value = "perf-group")]
    pub(crate) group_prefix: String,
    /// The broker's process id, to read its CPU, RSS and descriptors from /proc.
    #[arg(long)]
    pub(crate) broker_pid: Option<u32>,
    /// Seconds of idle heartbeating over which the broker's CPU is measured.
    #[arg(long, default_value_t = 30, value_parser = range_u64(1, 3600))]
    pub(crate) idle_secs: u64,
    /// Rebalances to time, each in another group (a member leaves, one joins).
    #[arg(long, default_value_t = 5, value_parser = range_u64(0, 1000))]
    pub(crate) rebalances: u64,
    /// How long a member's fetch waits at the broker (ms; by default the
    /// SDK's default, `GroupConsumerBuilder::max_wait`: 5,000, capped at the
    /// heartbeat interval, 3,333, since the fetches are the heartbeats).
    #[arg(long, value_parser = range_u64(0, 30_000))]
    pub(crate) fetch_wait_ms: Option<u64>,
    /// Members joining at once while the groups are built.
    #[arg(long, default_value_t = 256, value_parser = range_u64(1, 100_000))]
    pub(crate) join_concurrency: u64,
    /// Interval of the probe's heartbeats (ms).
    #[arg(long, default_value_t = 10, value_parser = range_u64(1, 10_000))]
    pub(crate) probe_ms: u64,
    /// Longest wait for every group to be stable (s).
    #[arg(long, default_value_t = 300, value_parser = range_u64(1, 3600))]
    pub(crate) settle_secs: u64,
    #[command(flatten)]
    pub(crate) summary: Summary,
}

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct ShareArgs {
    #[command(flatten)]
    pub(crate) at: TopicAt,
    /// Records to produce and accept.
    #[arg(long, default_value_t = 100_000, value_parser = range_u64(1, i64::MAX))]
    pub(crate) records: u64,
    /// Share consumers of the group, each its own connection.
    #[arg(long, default_value_t = 4, value_parser = range_u64(1, 1000))]
    pub(crate) consumers: u64,
    /// The share group (default: a new one for this run).
    #[arg(long)]
    pub(crate) group: Option<String>,
    /// Records a consumer takes per poll.
    #[arg(long, default_value_t = 500, value_parser = range_u64(1, 100_000))]
    pub(crate) max_records: u64,
    /// Bytes of each record's value.
    #[arg(long, default_value_t = 100, value_parser = range_u64(0, 1 << 20))]
    pub(crate) record_size: u64,
    #[command(flatten)]
    pub(crate) summary: Summary,
}

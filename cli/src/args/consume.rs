//! `flume-cli consume`'s flags.

use clap::Args;
use flume_client::StartOffset;

use super::client::TopicAt;
use super::parse::{non_neg_i32, TimeArg};
use crate::output::Format;

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub(crate) at: TopicAt,
    /// Read only this partition (default: every partition of the topic).
    #[arg(long, conflicts_with = "group", value_parser = non_neg_i32())]
    pub(crate) partition: Option<i32>,
    /// Start: earliest, latest or an offset (partition mode; for a new group, earliest or latest).
    #[arg(long, default_value = "earliest")]
    pub(crate) offset: StartOffset,
    /// Partition mode: start each partition at its first record whose timestamp is at or
    /// after this time: RFC 3339 (2026-11-30T12:00:00Z) or milliseconds since the epoch
    /// (bare or @<ms>). A partition with no such record starts at its end.
    #[arg(long, conflicts_with_all = ["group", "offset"])]
    pub(crate) from_time: Option<TimeArg>,
    /// Join this consumer group instead of reading partitions directly.
    #[arg(long)]
    pub(crate) group: Option<String>,
    /// Group mode: the group protocol on a kafka:// broker. classic (the
    /// default): JoinGroup and SyncGroup, the assignment made by a member;
    /// consumer: Kafka 4's consumer group protocol (KIP-848,
    /// group.protocol=consumer), the coordinator assigns and partitions move
    /// one at a time while the others keep reading. Ignored on a Flume
    /// address (Flume's groups are assigned by the broker).
    #[arg(long, value_enum, requires = "group")]
    pub(crate) group_protocol: Option<GroupProtocolArg>,
    /// Join this share group (a queue): its members share every partition of --topic
    /// (comma-separated topics for several), each record printed is accepted (or
    /// released or rejected: --release, --reject) and never handed to another member.
    /// Follows until --max, --timeout or Ctrl-C, then leaves.
    #[arg(long, conflicts_with_all = ["group", "partition", "from_time", "exit_at_end"])]
    pub(crate) share_group: Option<String>,
    /// Share mode: release each record printed (it is delivered again, to any member)
    /// instead of accepting it.
    #[arg(long, requires = "share_group", conflicts_with = "reject")]
    pub(crate) release: bool,
    /// Share mode: reject each record printed (never delivered again) instead of
    /// accepting it.
    #[arg(long, requires = "share_group")]
    pub(crate) reject: bool,
    /// Stop after N records. In group mode without --follow it also stops at the end of
    /// the assigned partitions, saying how many records there were.
    #[arg(long, visible_alias = "max-messages")]
    pub(crate) max: Option<u64>,
    /// Keep waiting for new records. Partition mode stops at the end otherwise; group
    /// mode follows unless --max or --exit-at-end is given.
    #[arg(long, conflicts_with = "exit_at_end")]
    pub(crate) follow: bool,
    /// Stop at the end of every partition read (every assigned partition in group mode).
    #[arg(short = 'e', long)]
    pub(crate) exit_at_end: bool,
    /// Stop when no record has arrived for this many milliseconds.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub(crate) timeout: Option<u64>,
    /// Output. plain: `partition=P offset=O key=K [headers=H=V,...] value=V`, where absent
    /// is `-`, empty is `""`, non-UTF-8 bytes are `0x…` hex, and text that could read as
    /// either, or holds control characters, is double-quoted with escapes; json: one object
    /// per record (partition, offset, timestamp, key, value, headers).
    #[arg(long, value_enum, default_value = "plain")]
    pub(crate) format: Format,
    /// Group mode: the broker drops this member if it hears nothing for this
    /// long (taken into the broker's --group-min/max-session-timeout-ms).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=300_000))]
    pub(crate) session_timeout_ms: u64,
    /// Group mode: commit what was printed this often (and on exit).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub(crate) commit_interval_ms: u64,
}

/// `--group-protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupProtocolArg {
    Classic,
    Consumer,
}

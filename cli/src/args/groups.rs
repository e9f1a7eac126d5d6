//! `flume-cli groups`.

use clap::Subcommand;

use super::client::BrokerAddr;
use super::parse::ResetTo;

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
        to: ResetTo,
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

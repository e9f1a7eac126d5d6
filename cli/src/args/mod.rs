//! The command line as clap sees it: `Cli`, its subcommands, every flag
//! struct and value parser. Nothing here acts on them (that is `crate::cmd`),
//! and nothing here imports a module above it (`tests/layers.rs`).

pub mod acls;
pub mod broker;
pub mod client;
pub mod consume;
pub mod data;
pub mod groups;
pub mod parse;
pub mod perf;
pub mod produce;
pub mod topics;
pub mod transactions;
pub mod users;

use clap::{Parser, Subcommand};

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
    Broker(Box<broker::BrokerArgs>),
    /// Send records: one --message or --value-file, or every line of stdin.
    Produce(produce::ProduceArgs),
    /// Read records from a topic (every partition, or one), or as a member of a group.
    Consume(consume::ConsumeArgs),
    /// List, create, describe, alter and delete topics.
    Topics {
        #[command(subcommand)]
        command: topics::TopicsCommand,
    },
    /// Consumer-group tools.
    Groups {
        #[command(subcommand)]
        command: groups::GroupsCommand,
    },
    /// Kafka transactions the broker coordinates: list them with their state and age.
    Transactions {
        #[command(subcommand)]
        command: transactions::TransactionsCommand,
    },
    /// Users who log in with SCRAM-SHA-256 (--auth): add, remove, list.
    Users {
        #[command(subcommand)]
        command: users::UsersCommand,
    },
    /// ACLs (with `broker --authorizer on`): add, remove, list.
    Acls {
        #[command(subcommand)]
        command: acls::AclsCommand,
    },
    /// Look at a stopped broker's data directory: check it, dump records,
    /// show its disk usage (read-only).
    Data {
        #[command(subcommand)]
        command: data::DataCommand,
    },
    /// Measure whole-system throughput and latency.
    Perf {
        #[command(subcommand)]
        command: perf::PerfCommand,
    },
}

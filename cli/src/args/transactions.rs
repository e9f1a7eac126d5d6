//! `flume-cli transactions`.

use clap::Subcommand;

use super::client::BrokerAddr;

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

//! `flume-cli produce`'s flags.

use std::path::PathBuf;

use clap::Args;

use super::client::{KafkaProduceFlags, TopicAt};
use super::parse::{non_neg_i32, parse_header};
use crate::output::{Format, InputFormat};

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub(crate) at: TopicAt,
    #[command(flatten)]
    pub(crate) kafka: KafkaProduceFlags,
    /// Key for every record (routes them to one partition); decoded per --key-format.
    #[arg(long)]
    pub(crate) key: Option<String>,
    /// Explicit partition.
    #[arg(long, value_parser = non_neg_i32())]
    pub(crate) partition: Option<i32>,
    /// The record value, decoded per --value-format; without it (and --value-file)
    /// every line of stdin is a record.
    #[arg(long, conflicts_with = "value_file")]
    pub(crate) message: Option<String>,
    /// Send the whole content of this file as one record's value (any bytes).
    #[arg(long)]
    pub(crate) value_file: Option<PathBuf>,
    /// Send one tombstone for --key: a record with a null value (not an empty one),
    /// which deletes the key from a compacted topic.
    #[arg(long, requires = "key", conflicts_with_all = ["message", "value_file"])]
    pub(crate) tombstone: bool,
    /// With stdin: split each line at the first S into key and value.
    #[arg(long)]
    pub(crate) key_separator: Option<String>,
    /// How values are written: text (the bytes as given), hex or base64.
    #[arg(long, value_enum, default_value = "text")]
    pub(crate) value_format: InputFormat,
    /// How keys are written: text (the bytes as given), hex or base64.
    #[arg(long, value_enum, default_value = "text")]
    pub(crate) key_format: InputFormat,
    /// A header for every record, as KEY=VALUE (repeatable).
    #[arg(short = 'H', long = "header", value_parser = parse_header)]
    pub(crate) headers: Vec<(String, String)>,
    /// With stdin: after a failed line, go on with the next lines instead of stopping
    /// (each failure is still reported, and the exit status is non-zero).
    #[arg(long)]
    pub(crate) keep_going: bool,
    /// Output of the acknowledgements. plain: `partition=P offset=O`, with `line=N` first
    /// for stdin; json: one object per record with line, partition, offset, key and value.
    #[arg(long, value_enum, default_value = "plain")]
    pub(crate) format: Format,
    /// Print only a summary.
    #[arg(long)]
    pub(crate) quiet: bool,
}

//! `flume-cli data`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::parse::non_neg_i32;
use crate::output::Format;

#[derive(Debug, Subcommand)]
pub enum DataCommand {
    /// Check every segment (each record's size, CRC, payload and offset; each
    /// index against its log; segments that meet), the committed-offsets
    /// file and the share-group state file. Prints a line per partition and
    /// one per problem, naming the file, offset and byte position; exits 1
    /// when anything is damaged.
    Check {
        #[command(flatten)]
        dir: DirArgs,
        /// Also print each segment.
        #[arg(long)]
        verbose: bool,
    },
    /// Print one partition's records as stored (as kafka-dump-log.sh does):
    /// `offset=O position=P timestamp=T size=S crc=C key=K [headers=..]
    /// value=V`, keys, values and headers written as `consume` writes them.
    #[command(allow_negative_numbers = true)]
    Dump {
        #[command(flatten)]
        dir: DirArgs,
        /// Topic.
        #[arg(long)]
        topic: String,
        /// Partition.
        #[arg(long, value_parser = non_neg_i32())]
        partition: i32,
        /// First offset [default: the log start, as consumers see it].
        #[arg(long, value_parser = clap::value_parser!(u64))]
        offset: Option<u64>,
        /// Most records to print [default: all].
        #[arg(long)]
        count: Option<u64>,
        /// plain, or json (consume's object plus position, size, crc and segment).
        #[arg(long, value_enum, default_value_t = Format::Plain)]
        format: Format,
    },
    /// Bytes and segments per topic and partition (segment files and their indexes).
    Usage {
        #[command(flatten)]
        dir: DirArgs,
    },
}

#[derive(Debug, Args)]
pub struct DirArgs {
    /// The data directory (a broker's --data).
    #[arg(value_name = "DIR")]
    pub(crate) dir: PathBuf,
    /// Read a directory a running broker holds (its active segments may
    /// change meanwhile; nothing is written either way).
    #[arg(long)]
    pub(crate) force_read_only: bool,
}

//! `flume-cli users`.

use std::path::PathBuf;

use clap::Subcommand;

use super::client::BrokerAddr;

#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// Add a user, or set a new password. The password comes from
    /// --new-password-file, or else FLUME_NEW_PASSWORD; only a SCRAM verifier
    /// is made of it (here, not on the broker) and stored.
    Add {
        /// User name.
        name: String,
        /// File whose first line is the new password.
        #[arg(long, value_name = "FILE")]
        new_password_file: Option<PathBuf>,
        /// Change this data directory's user store directly; the broker must
        /// be stopped (the directory's lock is taken).
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        #[command(flatten)]
        broker: BrokerAddr,
    },
    /// Remove a user (its open connections stay logged in).
    Remove {
        /// User name.
        name: String,
        /// As for `add`.
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        #[command(flatten)]
        broker: BrokerAddr,
    },
    /// List the users.
    List {
        /// As for `add`.
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        #[command(flatten)]
        broker: BrokerAddr,
    },
}

//! The commands: one file each, `run` dispatching to them. A command file
//! imports `args`, `common`, `output`, `settings` and `perf`, never another
//! command file (`tests/layers.rs`).

mod acls;
mod broker;
mod consume;
mod data;
mod groups;
mod perf;
mod produce;
mod topics;
mod transactions;
mod users;

use anyhow::{bail, Result};

use crate::args::{Cli, Command};

pub async fn run(cli: Cli, settings: Option<crate::settings::Effective>) -> Result<()> {
    match cli.command {
        Command::Broker(a) => match settings {
            Some(s) => broker::run(*a, s).await,
            None => bail!("the broker's settings were not resolved"),
        },
        Command::Data { command } => data::run(command),
        Command::Produce(a) => produce::run(a).await,
        Command::Consume(a) => consume::run(a).await,
        Command::Topics { command } => topics::run(command).await,
        Command::Groups { command } => groups::run(command).await,
        Command::Transactions { command } => transactions::run(command).await,
        Command::Perf { command } => perf::run(command).await,
        Command::Users { command } => users::run(command).await,
        Command::Acls { command } => acls::run(command).await,
    }
}

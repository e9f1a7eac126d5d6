//! `flume-cli perf`: runs one of the tools of `crate::perf`.

use anyhow::Result;

use crate::args::perf::PerfCommand;
use crate::perf;

pub async fn run(cmd: PerfCommand) -> Result<()> {
    match cmd {
        PerfCommand::Produce(a) => perf::produce::run(a).await,
        PerfCommand::Consume(a) => perf::consume::run(a).await,
        PerfCommand::E2e(a) => perf::e2e::run(a).await,
        PerfCommand::Groups(a) => perf::groups::run(a).await,
        PerfCommand::Share(a) => perf::share::run(a).await,
    }
}

//! `flume-cli perf`: runs one of the tools of `crate::perf`.

use anyhow::Result;

use crate::args::perf::PerfCommand;

pub async fn run(cmd: PerfCommand) -> Result<()> {
    match cmd {
        PerfCommand::Produce(a) => crate::perf::produce(a).await,
        PerfCommand::Consume(a) => crate::perf::consume(a).await,
        PerfCommand::E2e(a) => crate::perf::e2e(a).await,
        PerfCommand::Groups(a) => crate::perf::groups::groups(a).await,
        PerfCommand::Share(a) => crate::perf::share::share(a).await,
    }
}

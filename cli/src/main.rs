//! `flume-cli`: run a broker, produce, consume, manage topics and groups, measure.

mod args;
mod cmd;
mod common;
mod logging;
mod output;
mod perf;
mod settings;

use std::process::ExitCode;

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let (cli, effective) = match settings::parse(&argv) {
        Ok(parsed) => parsed,
        Err(settings::ParseError::Flags(e)) => return flag_error(&e),
        Err(settings::ParseError::Config(e)) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match &cli.command {
        args::Command::Broker(a) => {
            logging::init(a.log_format == "json", a.log_level.as_deref(), "info");
        }
        _ => logging::init(false, None, "warn"),
    }
    match flume_rt::block_on(cmd::run(cli, effective)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// Help and version go to stdout as clap prints them; a mistake gets one `error:` line
/// (clap's first line, with its tip if it has one) and exit status 2.
fn flag_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        };
    }
    let text = e.render().to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let mut first = lines
        .next()
        .unwrap_or("error: invalid arguments")
        .to_owned();
    // "the following required arguments were not provided:" lists them on the next lines.
    if first.ends_with(':') {
        let listed: Vec<&str> = text
            .lines()
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .map(str::trim)
            .collect();
        first = format!("{} {}", first, listed.join(", "));
    }
    // An invalid value of a flag with a fixed set: "[possible values: a, b]" kept.
    let rest: Vec<&str> = lines.collect();
    if let Some(values) = rest.iter().find(|l| l.starts_with("[possible values:")) {
        first = format!("{first} {values}");
    }
    let tip = rest
        .iter()
        .find_map(|l| l.strip_prefix("tip: "))
        .map(|t| format!("; {t}"))
        .unwrap_or_default();
    eprintln!("{first}{tip} (see --help)");
    ExitCode::from(2)
}

/// An error and its causes, each said once: a cause whose text its parent already
/// includes (an `io::Error` both shown and returned as the source) is skipped.
fn chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

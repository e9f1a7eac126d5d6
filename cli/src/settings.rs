//! The broker's settings from four places: each one comes from its flag,
//! else its `FLUME_<FLAG>` environment variable, else the TOML file of
//! `--config`, else its default. The file's keys are the flags' long names
//! and its values go through the flags' own parsers, so one definition
//! (`args::broker::BrokerArgs`) gives the flags, the variables, the file's keys,
//! their checks and `--print-config`.
//!
//! How: clap parses the command line and the environment
//! ([`ArgMatches::value_source`] tells them from defaults); every key of the
//! file that neither set is added as `--key=value` and the whole is parsed
//! again, so a value from the file meets the same checks as a flag. A
//! mistake in the file is one line naming the file, the key and what the key
//! takes.

use std::any::TypeId;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command, CommandFactory, FromArgMatches};

use crate::args::broker::BrokerArgs;
use crate::args::{Cli, Command as CliCommand};

/// Arguments of `broker` that are not settings: no key in the file.
const NOT_SETTINGS: &[&str] = &["help", "version", "config", "print_config"];

/// Settings a SIGHUP applies without a restart (the TLS files are read
/// again on every SIGHUP as well). The topic defaults apply to topics
/// created from then on.
pub const RELOADABLE: &[&str] = &[
    "partitions",
    "retention-bytes",
    "retention-ms",
    "segment-bytes",
    "topic-config",
    "max-pending",
    "backpressure",
    "max-connections-per-principal",
    "produce-quota-bytes-per-sec",
    "log-level",
];

/// What a setting's value is in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `true` or `false` (a switch flag).
    Bool,
    /// An array of strings (a repeatable flag).
    List,
    /// An integer.
    Int,
    /// A string.
    Str,
    /// A string or an integer (`fsync = "always"` or `fsync = 100`).
    IntOrStr,
}

impl Kind {
    fn of(arg: &Arg) -> Kind {
        match arg.get_action() {
            ArgAction::SetTrue => return Kind::Bool,
            ArgAction::Append => return Kind::List,
            _ => {}
        }
        let t = arg.get_value_parser().type_id();
        let ints = [
            TypeId::of::<u64>(),
            TypeId::of::<u16>(),
            TypeId::of::<usize>(),
            TypeId::of::<i64>(),
            TypeId::of::<i32>(),
        ];
        if ints.iter().any(|i| t == *i) {
            Kind::Int
        } else if t == TypeId::of::<String>() || t == TypeId::of::<PathBuf>() {
            Kind::Str
        } else {
            Kind::IntOrStr
        }
    }

    fn wanted(self) -> &'static str {
        match self {
            Kind::Bool => "true or false",
            Kind::List => "an array of strings, like [\"a\", \"b\"]",
            Kind::Int => "an integer",
            Kind::Str => "a string",
            Kind::IntOrStr => "a string or an integer",
        }
    }
}

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The command line.
    Flag,
    /// This environment variable.
    Env(String),
    /// The `--config` file.
    File,
    /// The flag's default.
    Default,
    /// Nowhere: the setting is off or derived (its help says from what).
    Unset,
}

/// One setting and its effective value.
#[derive(Debug, Clone)]
pub struct Setting {
    /// The key (the flag's long name).
    pub key: String,
    /// The value as the flag's parser took it (several for a list).
    pub values: Vec<String>,
    /// Where it came from.
    pub source: Source,
    kind: Kind,
    help: String,
    env: Option<String>,
}

impl Setting {
    /// The value as TOML (`None` when unset).
    pub fn toml(&self) -> Option<toml::Value> {
        if self.source == Source::Unset {
            return None;
        }
        let one = self.values.first().cloned().unwrap_or_default();
        Some(match self.kind {
            Kind::Bool => toml::Value::Boolean(one == "true"),
            Kind::List => toml::Value::Array(
                self.values
                    .iter()
                    .map(|v| toml::Value::String(v.clone()))
                    .collect(),
            ),
            Kind::Int | Kind::IntOrStr => match one.parse::<i64>() {
                Ok(n) => toml::Value::Integer(n),
                Err(_) => toml::Value::String(one),
            },
            Kind::Str => toml::Value::String(one),
        })
    }

    /// The value as a log line shows it.
    pub fn shown(&self) -> String {
        self.toml()
            .map_or_else(|| "not set".to_owned(), |v| v.to_string())
    }
}

/// The effective settings of a `broker` command.
#[derive(Debug, Clone)]
pub struct Effective {
    /// Every setting, in the order of `broker --help`.
    pub settings: Vec<Setting>,
    /// The `--config` file, if any.
    pub file: Option<PathBuf>,
    /// The command line, to resolve again on SIGHUP.
    argv: Vec<OsString>,
}

/// A mistake: in the flags (clap's error) or in the configuration file (one line).
#[derive(Debug)]
pub enum ParseError {
    /// A bad flag or environment variable, or `--help`/`--version`.
    Flags(clap::Error),
    /// A mistake in the configuration file.
    Config(String),
}

impl From<clap::Error> for ParseError {
    fn from(e: clap::Error) -> Self {
        ParseError::Flags(e)
    }
}

/// The command: `Cli` with `--version` naming the on-disk formats.
pub fn command() -> Command {
    Cli::command().long_version(long_version())
}

fn long_version() -> &'static str {
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let mut s = format!(
            "{}\non-disk formats (reads; writes):",
            env!("CARGO_PKG_VERSION")
        );
        for f in flume_broker::disk_formats() {
            let reads: Vec<String> = f.reads.iter().map(|v| format!("v{v}")).collect();
            s.push_str(&format!(
                "\n  {:<34} {}; v{}",
                f.name,
                reads.join(", "),
                f.writes
            ));
        }
        s
    })
}

/// Parses the command line; for `broker`, with the environment and the
/// configuration file, giving the effective settings too.
///
/// # Errors
/// [`ParseError::Flags`] for what clap refuses (and for help and version),
/// [`ParseError::Config`] for a mistake in the file.
pub fn parse(argv: &[OsString]) -> Result<(Cli, Option<Effective>), ParseError> {
    let mut cmd = command();
    cmd.build();
    let first = cmd.clone().try_get_matches_from(argv)?;
    let Some(("broker", bm)) = first.subcommand() else {
        return Ok((Cli::from_arg_matches(&first)?, None));
    };
    let broker = cmd
        .find_subcommand("broker")
        .ok_or_else(|| ParseError::Config("no broker command".into()))?;
    let file = bm.get_one::<PathBuf>("config").cloned();
    let mut full = argv.to_vec();
    let mut from_file = BTreeMap::new();
    if let Some(path) = &file {
        let table = read_file(path)?;
        for (key, value) in &table {
            let arg = setting_arg(broker, key).ok_or_else(|| unknown_key(path, broker, key))?;
            let kind = Kind::of(arg);
            let values = file_values(value, kind).ok_or_else(|| {
                ParseError::Config(format!(
                    "{}: {key} = {value}: must be {}",
                    path.display(),
                    kind.wanted()
                ))
            })?;
            let id = arg.get_id().as_str();
            if matches!(
                bm.value_source(id),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            ) {
                continue; // a flag or a variable decides
            }
            from_file.insert(key.clone(), value.to_string());
            match kind {
                Kind::Bool if values.first().is_some_and(|v| v == "true") => {
                    full.push(format!("--{key}").into());
                }
                Kind::Bool => {}
                _ => full.extend(
                    values
                        .iter()
                        .map(|v| OsString::from(format!("--{key}={v}"))),
                ),
            }
        }
    }
    let matches = if from_file.is_empty() {
        first
    } else {
        cmd.clone()
            .try_get_matches_from(&full)
            .map_err(|e| file_error(e, file.as_deref(), &from_file))?
    };
    let cli = Cli::from_arg_matches(&matches)?;
    let bm = matches
        .subcommand_matches("broker")
        .ok_or_else(|| ParseError::Config("no broker command".into()))?;
    let settings = settings_of(broker, bm, &from_file);
    Ok((
        cli,
        Some(Effective {
            settings,
            file,
            argv: argv.to_vec(),
        }),
    ))
}

impl Effective {
    /// The settings again, from the same command line and environment and
    /// the file as it is now (SIGHUP).
    ///
    /// # Errors
    /// As [`parse`].
    pub fn reread(&self) -> Result<(BrokerArgs, Effective), ParseError> {
        let (cli, effective) = parse(&self.argv)?;
        match (cli.command, effective) {
            (CliCommand::Broker(a), Some(e)) => Ok((*a, e)),
            _ => Err(ParseError::Config("not a broker command".into())),
        }
    }

    /// The setting of `key`.
    pub fn get(&self, key: &str) -> Option<&Setting> {
        self.settings.iter().find(|s| s.key == key)
    }

    /// Takes `key`'s setting from `other` (a reload applied it).
    pub fn take(&mut self, key: &str, other: &Effective) {
        if let (Some(mine), Some(theirs)) = (
            self.settings.iter_mut().find(|s| s.key == key),
            other.get(key),
        ) {
            *mine = theirs.clone();
        }
    }

    /// The keys whose values differ in `other`: (key, value here, value there).
    pub fn changes(&self, other: &Effective) -> Vec<(String, String, String)> {
        self.settings
            .iter()
            .filter_map(|s| {
                let o = other.get(&s.key)?;
                (s.toml() != o.toml()).then(|| (s.key.clone(), s.shown(), o.shown()))
            })
            .collect()
    }

    /// The settings as a TOML file: every key with its help as a comment and
    /// where its value came from after it; unset ones commented out.
    pub fn to_toml(&self) -> String {
        let mut out = String::from(
            "# Flume broker settings (flume-cli broker --print-config).\n\
             # Keys are the broker's long flag names. Each setting comes from its flag,\n\
             # else its FLUME_<KEY> environment variable (upper case, dashes as\n\
             # underscores), else this file (flume-cli broker --config FILE), else the\n\
             # default. The comment after each value says where it came from.\n",
        );
        if let Some(f) = &self.file {
            out.push_str(&format!("# Configuration file: {}\n", f.display()));
        }
        for s in &self.settings {
            out.push('\n');
            let mut help = s.help.trim().to_owned();
            if !help.ends_with(['.', ')', ']']) {
                help.push('.');
            }
            for line in wrap(&help, 86) {
                out.push_str(&format!("# {line}\n"));
            }
            if let Some(env) = &s.env {
                out.push_str(&format!("# Environment: {env}\n"));
            }
            let source = match &s.source {
                Source::Flag => "flag".to_owned(),
                Source::Env(v) => format!("environment {v}"),
                Source::File => "file".to_owned(),
                Source::Default => "default".to_owned(),
                Source::Unset => String::new(),
            };
            match s.toml() {
                Some(v) => out.push_str(&format!("{} = {v}  # {source}\n", s.key)),
                None => out.push_str(&format!("# {} =  (not set)\n", s.key)),
            }
        }
        out
    }
}

/// The settings `broker` takes, in the order of its help.
fn setting_args(broker: &Command) -> impl Iterator<Item = &Arg> {
    broker
        .get_arguments()
        .filter(|a| !NOT_SETTINGS.contains(&a.get_id().as_str()) && a.get_long().is_some())
}

fn setting_arg<'a>(broker: &'a Command, key: &str) -> Option<&'a Arg> {
    setting_args(broker).find(|a| a.get_long() == Some(key))
}

fn settings_of(
    broker: &Command,
    bm: &ArgMatches,
    from_file: &BTreeMap<String, String>,
) -> Vec<Setting> {
    setting_args(broker)
        .map(|arg| {
            let id = arg.get_id().as_str();
            let key = arg.get_long().unwrap_or(id).to_owned();
            let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
            let kind = Kind::of(arg);
            let values: Vec<String> = match kind {
                // The parsed switch: FLUME_VERIFY=1 or =yes is true.
                Kind::Bool => {
                    vec![matches!(bm.try_get_one::<bool>(id), Ok(Some(true))).to_string()]
                }
                _ => bm
                    .get_raw(id)
                    .map(|vs| vs.map(|v| v.to_string_lossy().into_owned()).collect())
                    .unwrap_or_default(),
            };
            let source = if from_file.contains_key(&key) {
                Source::File
            } else {
                match bm.value_source(id) {
                    Some(ValueSource::CommandLine) => Source::Flag,
                    Some(ValueSource::EnvVariable) => Source::Env(env.clone().unwrap_or_default()),
                    Some(ValueSource::DefaultValue) => Source::Default,
                    _ => Source::Unset,
                }
            };
            let help = arg
                .get_long_help()
                .or(arg.get_help())
                .map(ToString::to_string)
                .unwrap_or_default();
            Setting {
                key,
                values,
                source,
                kind,
                help,
                env,
            }
        })
        .collect()
}

fn read_file(path: &Path) -> Result<toml::Table, ParseError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ParseError::Config(format!("{}: cannot read it: {e}", path.display())))?;
    text.parse::<toml::Table>().map_err(|e| {
        let line = e
            .span()
            .and_then(|s| text.get(..s.start))
            .map_or(1, |before| before.matches('\n').count() + 1);
        ParseError::Config(format!(
            "{}: line {line}: not valid TOML: {}",
            path.display(),
            e.message().trim().replace('\n', "; ")
        ))
    })
}

/// A file value as the flag's arguments, when its type is the key's.
fn file_values(value: &toml::Value, kind: Kind) -> Option<Vec<String>> {
    use toml::Value as V;
    Some(match (kind, value) {
        (Kind::Bool, V::Boolean(b)) => vec![b.to_string()],
        (Kind::Int | Kind::IntOrStr, V::Integer(n)) => vec![n.to_string()],
        (Kind::Str | Kind::IntOrStr, V::String(s)) => vec![s.clone()],
        (Kind::List, V::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()?,
        _ => return None,
    })
}

fn unknown_key(path: &Path, broker: &Command, key: &str) -> ParseError {
    let nearest = setting_args(broker)
        .filter_map(Arg::get_long)
        .map(|k| (edit_distance(k, key), k))
        .min();
    let hint = match nearest {
        Some((d, k)) if d <= 2 => format!(" (did you mean {k}?)"),
        _ => String::new(),
    };
    let note = if NOT_SETTINGS.iter().any(|n| n.replace('_', "-") == key) {
        " (a command-line flag only)"
    } else {
        ""
    };
    ParseError::Config(format!(
        "{}: unknown key {key}{note}{hint}; the keys are the broker's long flag names, `flume-cli broker --print-config` lists them",
        path.display()
    ))
}

/// A value from the file that clap refused: one line naming the file and
/// the key; anything else stays clap's error.
fn file_error(
    e: clap::Error,
    file: Option<&Path>,
    from_file: &BTreeMap<String, String>,
) -> ParseError {
    let Some(file) = file else {
        return ParseError::Flags(e);
    };
    let arg = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => s.clone(),
        _ => String::new(),
    };
    // "--port <PORT>" or "--tls-key <PEM>": the key it names.
    let key = arg
        .trim_start_matches('-')
        .split([' ', '='])
        .next()
        .unwrap_or_default()
        .to_owned();
    let why = match (e.kind(), std::error::Error::source(&e)) {
        (_, Some(source)) => source.to_string(),
        (ErrorKind::InvalidValue, None) => match e.get(ContextKind::ValidValue) {
            Some(ContextValue::Strings(valid)) => format!("must be one of {}", valid.join(", ")),
            _ => message(&e),
        },
        _ => message(&e),
    };
    match from_file.get(&key) {
        Some(value) if e.kind() != ErrorKind::MissingRequiredArgument => {
            ParseError::Config(format!("{}: {key} = {value}: {why}", file.display()))
        }
        // A combination (a key that needs another one), with the file in play.
        _ => ParseError::Config(format!(
            "{}: {} (settings of the file, flags and environment together)",
            file.display(),
            message(&e)
        )),
    }
}

/// clap's message on one line, without its usage and tip.
fn message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("tip:"))
        .filter(|l| !l.is_empty())
        .collect();
    let joined = lines.join(" ");
    joined.strip_prefix("error: ").unwrap_or(&joined).to_owned()
}

/// Levenshtein distance, for "did you mean".
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// `text` in lines of at most `width` characters (longer words alone).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for para in text.split("\n\n") {
        let mut line = String::new();
        for word in para.split_whitespace() {
            if !line.is_empty() && line.len() + 1 + word.len() > width {
                lines.push(std::mem::take(&mut line));
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        if !line.is_empty() {
            lines.push(line);
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(args: &[&str]) -> Vec<OsString> {
        std::iter::once("flume-cli")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect()
    }

    #[test]
    fn every_setting_has_its_variable_and_a_kind() {
        let mut cmd = command();
        cmd.build();
        let broker = cmd.find_subcommand("broker").unwrap();
        let mut n = 0;
        for arg in setting_args(broker) {
            let key = arg.get_long().unwrap();
            let want = format!("FLUME_{}", key.to_uppercase().replace('-', "_"));
            assert_eq!(
                arg.get_env().map(|e| e.to_string_lossy().into_owned()),
                Some(want),
                "{key}"
            );
            n += 1;
        }
        assert!(n > 30, "{n} settings");
        let kind = |k: &str| Kind::of(setting_arg(broker, k).unwrap());
        assert_eq!(kind("port"), Kind::Int);
        assert_eq!(kind("data"), Kind::Str);
        assert_eq!(kind("verify"), Kind::Bool);
        assert_eq!(kind("admin-user"), Kind::List);
        assert_eq!(kind("fsync"), Kind::IntOrStr);
        assert_eq!(kind("authorizer"), Kind::Str);
        for r in RELOADABLE {
            assert!(setting_arg(broker, r).is_some(), "{r}");
        }
    }

    #[test]
    fn sources_without_a_file() {
        let (_, e) = parse(&argv(&["broker", "--port", "1234"])).unwrap();
        let e = e.unwrap();
        assert_eq!(e.get("port").unwrap().source, Source::Flag);
        assert_eq!(e.get("port").unwrap().values, ["1234"]);
        assert_eq!(e.get("host").unwrap().source, Source::Default);
        assert_eq!(
            e.get("verify").unwrap().toml(),
            Some(toml::Value::Boolean(false))
        );
        assert_eq!(e.get("retention-ms").unwrap().source, Source::Unset);
        assert!(e.get("config").is_none() && e.get("print-config").is_none());
        let (_, none) = parse(&argv(&["topics", "list"])).unwrap();
        assert!(none.is_none());
    }

    #[test]
    fn helpers() {
        assert_eq!(edit_distance("prot", "port"), 2);
        assert_eq!(edit_distance("port", "port"), 0);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(wrap("a bb ccc dddd", 6), ["a bb", "ccc", "dddd"]);
    }
}

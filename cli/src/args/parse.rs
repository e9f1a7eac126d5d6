//! Value parsers and the value types flags take: numbers in a range,
//! `--fsync`, log filters, `NAME=VALUE` pairs, times, `--to` and retention
//! limits.

use std::str::FromStr;
use std::time::Duration;

use clap::builder::TypedValueParser;
use flume_broker::FsyncPolicy;

/// Parses `always`, `never` or a number of milliseconds (1 to 1 hour).
pub fn parse_fsync(s: &str) -> Result<FsyncPolicy, String> {
    match s {
        "always" => Ok(FsyncPolicy::Always),
        "never" => Ok(FsyncPolicy::Never),
        ms => match ms.parse::<i64>() {
            Ok(0) => Err("--fsync 0 would sync without pause: use `always` (one fsync per batch) or an interval of at least 1 ms".to_owned()),
            Ok(n) if (1..=3_600_000).contains(&n) => Ok(FsyncPolicy::Interval(Duration::from_millis(n.unsigned_abs()))),
            Ok(n) => Err(format!("{n} is not in 1..=3600000 milliseconds")),
            Err(_) => Err(format!("--fsync must be always, never or milliseconds, not {ms:?}")),
        },
    }
}

/// A log filter `tracing_subscriber::EnvFilter` takes (a level or directives).
pub fn parse_log_level(s: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::builder()
        .parse(s)
        .map(|_| s.to_owned())
        .map_err(|e| format!("{s:?} is not a log level or filter ({e}): use error, warn, info, debug, trace or directives like info,flume_broker=debug"))
}

/// A whole number in `lo..=hi`: negative input reaches the parser (rather than looking
/// like a flag) and gets the same range error as any other number out of range.
pub fn range_u64(lo: i64, hi: i64) -> impl TypedValueParser<Value = u64> {
    clap::value_parser!(i64)
        .range(lo..=hi)
        .map(|v| u64::try_from(v).unwrap_or_default()) // ok: the range starts at or above 0
}

/// A partition number: 0 or more.
pub fn non_neg_i32() -> impl TypedValueParser<Value = i32> {
    clap::value_parser!(i32).range(0..)
}

/// A `NAME=VALUE` pair of `--config` and `--topic-config`.
pub fn parse_config_pair(s: &str) -> std::result::Result<String, String> {
    match s.split_once('=') {
        Some((name, _)) if !name.trim().is_empty() => Ok(s.to_owned()),
        _ => Err(format!("{s:?} is not NAME=VALUE")),
    }
}

/// A `KEY=VALUE` header of `produce --header`.
pub fn parse_header(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!(
            "a header is KEY=VALUE with a non-empty KEY, not {s:?}"
        )),
    }
}

/// A point in time as the CLI takes it: RFC 3339 (`2026-11-30T12:00:00Z`,
/// with any offset), or milliseconds since the Unix epoch, bare or as `@<ms>`
/// (kcat's notation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeArg(pub i64);

impl FromStr for TimeArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let ms = s.strip_prefix('@').unwrap_or(s);
        if let Ok(v) = ms.parse::<i64>() {
            return if v >= 0 {
                Ok(TimeArg(v))
            } else {
                Err(format!("{v} is before 1970: a time is milliseconds since the Unix epoch (0 or more) or RFC 3339"))
            };
        }
        match chrono::DateTime::parse_from_rfc3339(s) {
            Ok(t) if t.timestamp_millis() >= 0 => Ok(TimeArg(t.timestamp_millis())),
            Ok(_) => Err(format!("{s} is before 1970")),
            Err(e) => Err(format!(
                "{s:?} is not a time ({e}): give RFC 3339 such as 2026-11-30T12:00:00Z, or milliseconds since the Unix epoch (as 1764504000000 or @1764504000000)"
            )),
        }
    }
}

/// Where `groups reset-offsets --to` moves a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetTo {
    /// Each partition's log start.
    Earliest,
    /// Each partition's log end.
    Latest,
    /// This offset (brought into each partition's stored range).
    Offset(i64),
    /// The first offset at or after this time (ms).
    Time(i64),
}

impl FromStr for ResetTo {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "earliest" => return Ok(ResetTo::Earliest),
            "latest" => return Ok(ResetTo::Latest),
            _ => {}
        }
        if let Ok(o) = s.parse::<i64>() {
            return if o >= 0 {
                Ok(ResetTo::Offset(o))
            } else {
                Err(format!("offset {o} is negative"))
            };
        }
        if s.starts_with('@') || s.contains('T') {
            return TimeArg::from_str(s).map(|t| ResetTo::Time(t.0));
        }
        Err(format!(
            "{s:?}: --to takes earliest, latest, an offset (a number), or a time (RFC 3339 such as 2026-11-30T12:00:00Z, or @<ms since the epoch>)"
        ))
    }
}

/// A retention setting: a number, or `none` for no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit(pub Option<u64>);

impl FromStr for Limit {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "none" {
            return Ok(Limit(None));
        }
        match s.parse::<i64>() {
            Ok(v) if v >= 1 => Ok(Limit(Some(v.unsigned_abs()))),
            Ok(v) => Err(format!(
                "{v} is not 1 or more (use `none` to remove the limit)"
            )),
            Err(_) => Err(format!("{s:?} is not a number or `none`")),
        }
    }
}

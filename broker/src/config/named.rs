//! Topic configs by Kafka's names: the table of every config a topic
//! reports ([`TOPIC_CONFIGS`]), their parsing and validation, and the typed
//! values the broker acts on ([`CleanupPolicy`], [`TimestampType`],
//! [`CompressionType`]).
//!
//! Each config is one of three kinds ([`Support`]): served (the broker acts
//! on it), stored (accepted, persisted and reported, with no effect on a
//! single broker that stores records uncompressed), or fixed (only the one
//! value that is true of a single-broker log is accepted). Both protocols
//! and the CLI take configs through [`super::TopicConfig::set_named`]; one
//! place decides what a value may be.

use std::fmt;
use std::str::FromStr;

/// Which of a topic's segments retention removes and whether it is compacted
/// (Kafka's `cleanup.policy`, a list of `delete` and `compact`; the empty
/// list keeps every record, as in Kafka 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CleanupPolicy {
    /// Old segments are deleted by `retention.ms` / `retention.bytes`.
    #[default]
    Delete,
    /// The log is compacted by key; retention deletes nothing.
    Compact,
    /// Compacted, and old segments deleted by retention as well.
    CompactDelete,
    /// The empty list: no cleanup at all, every segment is kept (Kafka 4's
    /// "infinite retention": neither `retention.*` nor compaction applies).
    Keep,
}

impl CleanupPolicy {
    /// Whether the log is compacted.
    pub fn compacts(self) -> bool {
        matches!(self, CleanupPolicy::Compact | CleanupPolicy::CompactDelete)
    }

    /// Whether retention deletes old segments.
    pub fn deletes(self) -> bool {
        matches!(self, CleanupPolicy::Delete | CleanupPolicy::CompactDelete)
    }

    /// Kafka's spelling (`compact,delete` for both).
    pub fn as_str(self) -> &'static str {
        match self {
            CleanupPolicy::Delete => "delete",
            CleanupPolicy::Compact => "compact",
            CleanupPolicy::CompactDelete => "compact,delete",
            CleanupPolicy::Keep => "",
        }
    }

    fn from_parts(compact: bool, delete: bool) -> Self {
        match (compact, delete) {
            (true, true) => CleanupPolicy::CompactDelete,
            (true, false) => CleanupPolicy::Compact,
            (false, true) => CleanupPolicy::Delete,
            (false, false) => CleanupPolicy::Keep,
        }
    }

    /// The policy with the list's entries added (`APPEND`) or removed
    /// (`SUBTRACT`) as IncrementalAlterConfigs does; removing the last one
    /// leaves [`CleanupPolicy::Keep`].
    ///
    /// # Errors
    /// An entry that is neither `delete` nor `compact`.
    pub fn edited(self, list: &str, add: bool) -> Result<Self, String> {
        let (mut compact, mut delete) = (self.compacts(), self.deletes());
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match item {
                "compact" => compact = add,
                "delete" => delete = add,
                other => return Err(format!("{other:?} is neither delete nor compact")),
            }
        }
        Ok(Self::from_parts(compact, delete))
    }
}

impl FromStr for CleanupPolicy {
    type Err = String;
    /// A list of `delete` and `compact` in any order; the empty list (or
    /// only blanks) is [`CleanupPolicy::Keep`].
    fn from_str(s: &str) -> Result<Self, String> {
        let (mut compact, mut delete) = (false, false);
        if s.trim().is_empty() {
            return Ok(CleanupPolicy::Keep);
        }
        for item in s.split(',').map(str::trim) {
            match item {
                "compact" => compact = true,
                "delete" => delete = true,
                other => {
                    return Err(format!(
                        "{other:?} is not a cleanup policy: delete, compact or compact,delete"
                    ))
                }
            }
        }
        Ok(Self::from_parts(compact, delete))
    }
}

impl fmt::Display for CleanupPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which timestamp a stored record keeps (Kafka's `message.timestamp.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimestampType {
    /// The producer's.
    #[default]
    CreateTime,
    /// The broker's clock when the record is appended.
    LogAppendTime,
}

impl FromStr for TimestampType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "CreateTime" => Ok(TimestampType::CreateTime),
            "LogAppendTime" => Ok(TimestampType::LogAppendTime),
            other => Err(format!(
                "{other:?} is not a timestamp type: CreateTime or LogAppendTime"
            )),
        }
    }
}

impl fmt::Display for TimestampType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimestampType::CreateTime => "CreateTime",
            TimestampType::LogAppendTime => "LogAppendTime",
        })
    }
}

/// Kafka's `compression.type` of a topic. Flume stores records uncompressed
/// whatever it says: the value is kept and reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CompressionType {
    /// Whatever the producer used.
    #[default]
    Producer,
    /// None.
    Uncompressed,
    /// gzip.
    Gzip,
    /// Snappy.
    Snappy,
    /// LZ4.
    Lz4,
    /// Zstandard.
    Zstd,
}

impl FromStr for CompressionType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "producer" => CompressionType::Producer,
            "uncompressed" => CompressionType::Uncompressed,
            "gzip" => CompressionType::Gzip,
            "snappy" => CompressionType::Snappy,
            "lz4" => CompressionType::Lz4,
            "zstd" => CompressionType::Zstd,
            other => {
                return Err(format!(
                    "{other:?} is not a compression type: producer, uncompressed, gzip, snappy, lz4 or zstd"
                ))
            }
        })
    }
}

impl fmt::Display for CompressionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CompressionType::Producer => "producer",
            CompressionType::Uncompressed => "uncompressed",
            CompressionType::Gzip => "gzip",
            CompressionType::Snappy => "snappy",
            CompressionType::Lz4 => "lz4",
            CompressionType::Zstd => "zstd",
        })
    }
}

/// A config's type as DescribeConfigs v3+ reports it (Kafka's ConfigType codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i8)]
pub enum ConfigType {
    /// `true` or `false`.
    Boolean = 1,
    /// Text.
    String = 2,
    /// 32-bit integer.
    Int = 3,
    /// 64-bit integer.
    Long = 5,
    /// Floating point.
    Double = 6,
    /// Comma-separated list.
    List = 7,
}

/// What the broker does with a config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Acted upon.
    Served,
    /// Accepted, stored and reported; no effect on this broker.
    Stored,
    /// Only its one meaningful value on a single broker is accepted.
    Fixed,
}

/// One config a topic has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigDef {
    /// Kafka's topic config name.
    pub name: &'static str,
    /// The broker config it falls back to (Kafka's synonym), if any.
    pub broker_name: Option<&'static str>,
    /// Its type.
    pub kind: ConfigType,
    /// What the broker does with it.
    pub support: Support,
}

const fn def(
    name: &'static str,
    broker_name: Option<&'static str>,
    kind: ConfigType,
    support: Support,
) -> ConfigDef {
    ConfigDef {
        name,
        broker_name,
        kind,
        support,
    }
}

use ConfigType::{Boolean, Double, Int, List, Long};
use Support::{Fixed, Served, Stored};

/// Every topic config, sorted by name: what Kafka 3.x lists in a topic's
/// DescribeConfigs, less those of features a single broker does not have.
pub const TOPIC_CONFIGS: &[ConfigDef] = &[
    def("cleanup.policy", Some("log.cleanup.policy"), List, Served),
    def(
        "compression.type",
        Some("compression.type"),
        ConfigType::String,
        Stored,
    ),
    def(
        "delete.retention.ms",
        Some("log.cleaner.delete.retention.ms"),
        Long,
        Served,
    ),
    def(
        "file.delete.delay.ms",
        Some("log.segment.delete.delay.ms"),
        Long,
        Stored,
    ),
    def(
        "flush.messages",
        Some("log.flush.interval.messages"),
        Long,
        Stored,
    ),
    def("flush.ms", Some("log.flush.interval.ms"), Long, Stored),
    def("follower.replication.throttled.replicas", None, List, Fixed),
    def(
        "index.interval.bytes",
        Some("log.index.interval.bytes"),
        Int,
        Stored,
    ),
    def("leader.replication.throttled.replicas", None, List, Fixed),
    def(
        "local.retention.bytes",
        Some("log.local.retention.bytes"),
        Long,
        Stored,
    ),
    def(
        "local.retention.ms",
        Some("log.local.retention.ms"),
        Long,
        Stored,
    ),
    def(
        "max.compaction.lag.ms",
        Some("log.cleaner.max.compaction.lag.ms"),
        Long,
        Served,
    ),
    def("max.message.bytes", Some("message.max.bytes"), Int, Served),
    def(
        "message.downconversion.enable",
        Some("log.message.downconversion.enable"),
        Boolean,
        Stored,
    ),
    def(
        "message.format.version",
        Some("log.message.format.version"),
        ConfigType::String,
        Stored,
    ),
    def(
        "message.timestamp.after.max.ms",
        Some("log.message.timestamp.after.max.ms"),
        Long,
        Stored,
    ),
    def(
        "message.timestamp.before.max.ms",
        Some("log.message.timestamp.before.max.ms"),
        Long,
        Stored,
    ),
    def(
        "message.timestamp.difference.max.ms",
        Some("log.message.timestamp.difference.max.ms"),
        Long,
        Stored,
    ),
    def(
        "message.timestamp.type",
        Some("log.message.timestamp.type"),
        ConfigType::String,
        Served,
    ),
    def(
        "min.cleanable.dirty.ratio",
        Some("log.cleaner.min.cleanable.ratio"),
        Double,
        Served,
    ),
    def(
        "min.compaction.lag.ms",
        Some("log.cleaner.min.compaction.lag.ms"),
        Long,
        Served,
    ),
    def(
        "min.insync.replicas",
        Some("min.insync.replicas"),
        Int,
        Fixed,
    ),
    def("preallocate", Some("log.preallocate"), Boolean, Fixed),
    def("remote.storage.enable", None, Boolean, Fixed),
    def("retention.bytes", Some("log.retention.bytes"), Long, Served),
    def("retention.ms", Some("log.retention.ms"), Long, Served),
    def("segment.bytes", Some("log.segment.bytes"), Int, Served),
    def(
        "segment.index.bytes",
        Some("log.index.size.max.bytes"),
        Int,
        Stored,
    ),
    def(
        "segment.jitter.ms",
        Some("log.roll.jitter.ms"),
        Long,
        Stored,
    ),
    def("segment.ms", Some("log.roll.ms"), Long, Stored),
    def(
        "unclean.leader.election.enable",
        Some("unclean.leader.election.enable"),
        Boolean,
        Stored,
    ),
];

/// The definition of a topic config.
pub fn topic_config(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// The topic config a broker config name stands for (`log.retention.ms` is
/// `retention.ms`), or the name itself when it is a topic config.
pub fn topic_config_for_broker_name(name: &str) -> Option<&'static ConfigDef> {
    topic_config(name).or_else(|| TOPIC_CONFIGS.iter().find(|d| d.broker_name == Some(name)))
}

/// Why a config could not be set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Not a topic config.
    #[error("unknown topic config {name:?}{}", if value.is_empty() { String::new() } else { format!(" (value {value:?})") })]
    Unknown {
        /// The name given.
        name: String,
        /// The value given with it (empty for a delete).
        value: String,
    },
    /// A value out of range or of the wrong form.
    #[error("invalid value {value:?} for topic config {name}: {why}")]
    Invalid {
        /// The config.
        name: String,
        /// The value given.
        value: String,
        /// What it must be.
        why: String,
    },
    /// APPEND or SUBTRACT on a config that is not a list.
    #[error("topic config {name} is not a list: only SET and DELETE apply to it")]
    NotAList {
        /// The config.
        name: String,
    },
}

/// INVALID_CONFIG, with the message naming the config and the value.
impl From<ConfigError> for crate::error::BrokerError {
    fn from(e: ConfigError) -> Self {
        crate::error::BrokerError::code_for(flume_protocol::ErrorCode::InvalidConfig, e.to_string())
    }
}

impl ConfigError {
    /// An invalid value.
    pub fn invalid(name: &str, value: &str, why: impl Into<String>) -> Self {
        ConfigError::Invalid {
            name: name.to_owned(),
            value: value.to_owned(),
            why: why.into(),
        }
    }
}

/// A long (`i64`) in `lo..=i64::MAX`.
pub(crate) fn long_at_least(name: &str, value: &str, lo: i64) -> Result<i64, ConfigError> {
    match value.trim().parse::<i64>() {
        Ok(v) if v >= lo => Ok(v),
        Ok(_) => Err(ConfigError::invalid(
            name,
            value,
            format!("it must be at least {lo}"),
        )),
        Err(_) => Err(ConfigError::invalid(name, value, "not an integer")),
    }
}

/// An int (`i32`) in `lo..=hi`.
pub(crate) fn int_in(name: &str, value: &str, lo: i64, hi: i64) -> Result<i64, ConfigError> {
    match value.trim().parse::<i64>() {
        Ok(v) if (lo..=hi).contains(&v) => Ok(v),
        Ok(_) => Err(ConfigError::invalid(
            name,
            value,
            format!("it must be {lo}..={hi}"),
        )),
        Err(_) => Err(ConfigError::invalid(name, value, "not an integer")),
    }
}

/// `true` or `false` (any case, as Kafka's parser).
pub(crate) fn boolean(name: &str, value: &str) -> Result<bool, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ConfigError::invalid(
            name,
            value,
            "it must be true or false",
        )),
    }
}

/// Checks and normalises the value of a stored or fixed config (the served
/// ones have typed fields in [`super::TopicConfig`]).
pub(crate) fn check_other(def: &ConfigDef, value: &str) -> Result<String, ConfigError> {
    let name = def.name;
    let fixed = |ok: &str| {
        if value.trim() == ok {
            Ok(ok.to_owned())
        } else {
            Err(ConfigError::invalid(
                name,
                value,
                format!("a single broker keeps one copy of each partition: only {ok} is accepted"),
            ))
        }
    };
    match name {
        "min.insync.replicas" => fixed("1"),
        "preallocate" => {
            if boolean(name, value)? {
                Err(ConfigError::invalid(
                    name,
                    value,
                    "segment files are not preallocated: only false is accepted",
                ))
            } else {
                Ok("false".to_owned())
            }
        }
        "remote.storage.enable" => {
            if boolean(name, value)? {
                Err(ConfigError::invalid(
                    name,
                    value,
                    "there is no tiered storage: only false is accepted",
                ))
            } else {
                Ok("false".to_owned())
            }
        }
        "follower.replication.throttled.replicas" | "leader.replication.throttled.replicas" => {
            if value.trim().is_empty() {
                Ok(String::new())
            } else {
                Err(ConfigError::invalid(
                    name,
                    value,
                    "there are no replicas to throttle: only an empty list is accepted",
                ))
            }
        }
        "local.retention.bytes" | "local.retention.ms" => {
            long_at_least(name, value, -2).map(|v| v.to_string())
        }
        "flush.messages" => long_at_least(name, value, 1).map(|v| v.to_string()),
        "index.interval.bytes" => {
            int_in(name, value, 0, i64::from(i32::MAX)).map(|v| v.to_string())
        }
        "segment.index.bytes" => int_in(name, value, 4, i64::from(i32::MAX)).map(|v| v.to_string()),
        "message.format.version" => {
            if value.trim().is_empty() {
                Err(ConfigError::invalid(name, value, "an empty version"))
            } else {
                Ok(value.trim().to_owned())
            }
        }
        _ => match def.kind {
            Boolean => boolean(name, value).map(|b| b.to_string()),
            Long => long_at_least(name, value, 0).map(|v| v.to_string()),
            _ => Ok(value.trim().to_owned()),
        },
    }
}

/// Kafka's default of a stored or fixed config.
pub(crate) fn other_default(name: &str) -> &'static str {
    match name {
        "file.delete.delay.ms" => "60000",
        "flush.messages" | "flush.ms" => "9223372036854775807",
        "index.interval.bytes" => "4096",
        "local.retention.bytes" | "local.retention.ms" => "-2",
        "message.downconversion.enable" => "true",
        "message.format.version" => "3.0-IV1",
        "message.timestamp.after.max.ms"
        | "message.timestamp.before.max.ms"
        | "message.timestamp.difference.max.ms" => "9223372036854775807",
        "min.insync.replicas" => "1",
        "preallocate" | "remote.storage.enable" | "unclean.leader.election.enable" => "false",
        "segment.index.bytes" => "10485760",
        "segment.jitter.ms" => "0",
        _ => "",
    }
}

/// Where a config's value comes from (Kafka's ConfigSource codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i8)]
pub enum ConfigSource {
    /// Set on the topic (Kafka's DYNAMIC_TOPIC_CONFIG).
    Topic = 1,
    /// Set for the broker at start (STATIC_BROKER_CONFIG): `flume-cli broker
    /// --topic-config` or a shorthand flag such as `--retention-ms`.
    StaticBroker = 4,
    /// The built-in default (DEFAULT_CONFIG).
    Default = 5,
}

impl ConfigSource {
    /// Kafka's code.
    pub fn code(self) -> i8 {
        self as i8
    }

    /// A short name for people (`topic`, `broker`, `default`).
    pub fn label(self) -> &'static str {
        match self {
            ConfigSource::Topic => "topic",
            ConfigSource::StaticBroker => "broker",
            ConfigSource::Default => "default",
        }
    }

    /// The source of a code (unknown codes read as the default).
    pub fn from_code(code: i8) -> Self {
        match code {
            1 => ConfigSource::Topic,
            4 => ConfigSource::StaticBroker,
            _ => ConfigSource::Default,
        }
    }
}

/// One value a config falls back through (Kafka's synonyms), most specific first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Synonym {
    /// The config's name at that level (`log.retention.ms` for the broker's).
    pub name: String,
    /// Its value there.
    pub value: String,
    /// The level.
    pub source: ConfigSource,
}

/// A config as DescribeConfigs and `flume-cli topics describe` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    /// Its definition.
    pub def: ConfigDef,
    /// The name it is reported by (the broker's name for a broker resource).
    pub name: &'static str,
    /// The value in effect.
    pub value: String,
    /// Where it comes from.
    pub source: ConfigSource,
    /// The values it falls back through, the one in effect first.
    pub synonyms: Vec<Synonym>,
}

/// Every config of a topic with settings `tc` on a broker whose default
/// topic settings are `defaults`, sorted by name.
pub fn describe_topic(tc: &super::TopicConfig, defaults: &super::TopicConfig) -> Vec<Described> {
    let builtin = super::TopicConfig::default();
    TOPIC_CONFIGS
        .iter()
        .map(|d| {
            let value = tc.named_value(d.name).unwrap_or_default();
            let broker_value = defaults.named_value(d.name).unwrap_or_default();
            let default_value = builtin.named_value(d.name).unwrap_or_default();
            let broker_set = defaults.overrides.contains(d.name) || broker_value != default_value;
            let mut synonyms = Vec::new();
            let topic_set = tc.overrides.contains(d.name) || value != broker_value;
            if topic_set {
                synonyms.push(Synonym {
                    name: d.name.to_owned(),
                    value: value.clone(),
                    source: ConfigSource::Topic,
                });
            }
            let broker_name = d.broker_name.unwrap_or(d.name);
            if broker_set {
                synonyms.push(Synonym {
                    name: broker_name.to_owned(),
                    value: broker_value,
                    source: ConfigSource::StaticBroker,
                });
            }
            synonyms.push(Synonym {
                name: broker_name.to_owned(),
                value: default_value,
                source: ConfigSource::Default,
            });
            let source = synonyms.first().map_or(ConfigSource::Default, |s| s.source);
            Described {
                def: *d,
                name: d.name,
                value,
                source,
                synonyms,
            }
        })
        .collect()
}

/// The broker's defaults for topics, by the broker's config names
/// (`log.retention.ms`, `message.max.bytes`, ...), sorted by name; configs
/// with no broker-level name are left out.
pub fn describe_broker(defaults: &super::TopicConfig) -> Vec<Described> {
    let builtin = super::TopicConfig::default();
    let mut out: Vec<Described> = TOPIC_CONFIGS
        .iter()
        .filter_map(|d| {
            let name = d.broker_name?;
            let value = defaults.named_value(d.name).unwrap_or_default();
            let default_value = builtin.named_value(d.name).unwrap_or_default();
            let mut synonyms = Vec::new();
            if defaults.overrides.contains(d.name) || value != default_value {
                synonyms.push(Synonym {
                    name: name.to_owned(),
                    value: value.clone(),
                    source: ConfigSource::StaticBroker,
                });
            }
            synonyms.push(Synonym {
                name: name.to_owned(),
                value: default_value,
                source: ConfigSource::Default,
            });
            let source = synonyms.first().map_or(ConfigSource::Default, |s| s.source);
            Some(Described {
                def: *d,
                name,
                value,
                source,
                synonyms,
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(b.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleanup_policies_parse_in_either_order() {
        assert_eq!("delete".parse(), Ok(CleanupPolicy::Delete));
        assert_eq!("compact".parse(), Ok(CleanupPolicy::Compact));
        assert_eq!("compact,delete".parse(), Ok(CleanupPolicy::CompactDelete));
        assert_eq!("delete, compact".parse(), Ok(CleanupPolicy::CompactDelete));
        assert_eq!("".parse(), Ok(CleanupPolicy::Keep));
        assert_eq!(" ".parse(), Ok(CleanupPolicy::Keep));
        assert!(",".parse::<CleanupPolicy>().is_err());
        assert!("compact,shred".parse::<CleanupPolicy>().is_err());
        let keep = CleanupPolicy::Keep;
        assert!(!keep.compacts() && !keep.deletes());
        assert_eq!(keep.to_string(), "");
        let c = CleanupPolicy::Compact;
        assert!(c.compacts() && !c.deletes());
        assert!(CleanupPolicy::CompactDelete.compacts() && CleanupPolicy::CompactDelete.deletes());
        assert_eq!(c.edited("delete", true), Ok(CleanupPolicy::CompactDelete));
        assert_eq!(
            CleanupPolicy::CompactDelete.edited("compact", false),
            Ok(CleanupPolicy::Delete)
        );
        assert_eq!(c.edited("compact", false), Ok(CleanupPolicy::Keep));
        assert_eq!(keep.edited("delete", true), Ok(CleanupPolicy::Delete));
        assert!(c.edited("shred", true).is_err());
    }

    #[test]
    fn the_table_is_sorted_and_unique() {
        for w in TOPIC_CONFIGS.windows(2) {
            assert!(w[0].name < w[1].name, "{} before {}", w[0].name, w[1].name);
        }
        assert_eq!(
            topic_config_for_broker_name("log.retention.ms").map(|d| d.name),
            Some("retention.ms")
        );
        assert_eq!(
            topic_config_for_broker_name("retention.ms").map(|d| d.name),
            Some("retention.ms")
        );
        assert!(topic_config("replication.factor").is_none());
    }

    #[test]
    fn fixed_configs_take_only_their_one_value() {
        let d = topic_config("min.insync.replicas").copied().unwrap();
        assert_eq!(check_other(&d, "1"), Ok("1".to_owned()));
        assert!(check_other(&d, "2").is_err());
        let d = topic_config("preallocate").copied().unwrap();
        assert_eq!(check_other(&d, "FALSE"), Ok("false".to_owned()));
        assert!(check_other(&d, "true").is_err());
        let d = topic_config("leader.replication.throttled.replicas")
            .copied()
            .unwrap();
        assert!(check_other(&d, "").is_ok());
        assert!(check_other(&d, "0:1").is_err());
        let d = topic_config("unclean.leader.election.enable")
            .copied()
            .unwrap();
        assert_eq!(check_other(&d, "true"), Ok("true".to_owned()));
        assert!(check_other(&d, "yes").is_err());
        let d = topic_config("segment.jitter.ms").copied().unwrap();
        assert!(check_other(&d, "-5").is_err());
    }
}

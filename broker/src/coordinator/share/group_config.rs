//! Share-group configs by Kafka's names (KIP-932's group configs, set with
//! IncrementalAlterConfigs on a GROUP resource): a group's own lock
//! duration, delivery-count limit, `share.auto.offset.reset` and
//! `share.isolation.level`, over the broker's settings. Kept in `<data>/__share_state/group-configs`, one
//! line per set config, `<name>=<value> <group>` (the group last: it may
//! hold spaces, never a newline), rewritten atomically on each change.

use std::collections::BTreeMap;

use crate::config::{ShareConfig, ShareReset};

/// The group configs served, with what each means.
pub const GROUP_CONFIGS: &[(&str, &str)] = &[
    (
        "share.record.lock.duration.ms",
        "how long a member holds a record it acquired (1000-3600000)",
    ),
    (
        "share.delivery.count.limit",
        "deliveries after which a record is archived (2-10)",
    ),
    (
        "share.auto.offset.reset",
        "where a new share-partition starts: latest or earliest",
    ),
    (
        "share.isolation.level",
        "read_committed (records of aborted or open transactions are not delivered) or read_uncommitted",
    ),
];

/// Which records of transactions a share group delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShareIsolation {
    /// Only committed ones, up to the last stable offset (Flume's default).
    #[default]
    ReadCommitted,
    /// Every record up to the log end, aborted ones too.
    ReadUncommitted,
}

impl ShareIsolation {
    /// Kafka's name.
    pub fn name(self) -> &'static str {
        match self {
            ShareIsolation::ReadCommitted => "read_committed",
            ShareIsolation::ReadUncommitted => "read_uncommitted",
        }
    }
}

/// Most groups with configs of their own.
pub const MAX_CONFIGURED_GROUPS: usize = 10_000;

/// One group's configs (None: the broker's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShareGroupConfig {
    /// `share.record.lock.duration.ms`.
    pub lock_duration_ms: Option<u64>,
    /// `share.delivery.count.limit`.
    pub delivery_count_limit: Option<u16>,
    /// `share.auto.offset.reset`.
    pub auto_offset_reset: Option<ShareReset>,
    /// `share.isolation.level`.
    pub isolation: Option<ShareIsolation>,
}

impl ShareGroupConfig {
    /// Sets `name` to `value`.
    ///
    /// # Errors
    /// An unknown name or a value out of range, said in a sentence.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        let number = |lo: u64, hi: u64| -> Result<u64, String> {
            value
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|n| (lo..=hi).contains(n))
                .ok_or_else(|| format!("{name} is a number from {lo} to {hi}, not {value:?}"))
        };
        match name {
            "share.record.lock.duration.ms" => {
                self.lock_duration_ms = Some(number(1_000, 3_600_000)?);
            }
            "share.delivery.count.limit" => {
                self.delivery_count_limit = Some(u16::try_from(number(2, 10)?).unwrap_or(10));
            }
            "share.auto.offset.reset" => {
                self.auto_offset_reset = Some(value.trim().parse()?);
            }
            "share.isolation.level" => {
                self.isolation = Some(match value.trim() {
                    "read_committed" => ShareIsolation::ReadCommitted,
                    "read_uncommitted" => ShareIsolation::ReadUncommitted,
                    v => {
                        return Err(format!(
                            "{name} is read_committed or read_uncommitted, not {v:?}"
                        ))
                    }
                });
            }
            other => return Err(unknown(other)),
        }
        Ok(())
    }

    /// Puts `name` back to the broker's setting.
    ///
    /// # Errors
    /// An unknown name.
    pub fn delete(&mut self, name: &str) -> Result<(), String> {
        match name {
            "share.record.lock.duration.ms" => self.lock_duration_ms = None,
            "share.delivery.count.limit" => self.delivery_count_limit = None,
            "share.auto.offset.reset" => self.auto_offset_reset = None,
            "share.isolation.level" => self.isolation = None,
            other => return Err(unknown(other)),
        }
        Ok(())
    }

    /// The share-partition settings of the group over the broker's.
    pub fn partition(&self, base: ShareConfig) -> ShareConfig {
        ShareConfig {
            lock_duration_ms: self.lock_duration_ms.unwrap_or(base.lock_duration_ms),
            delivery_count_limit: self
                .delivery_count_limit
                .unwrap_or(base.delivery_count_limit),
            ..base
        }
    }

    /// Whether the group reads committed records only (its
    /// `share.isolation.level`, read_committed unless it says otherwise).
    pub fn read_committed(&self) -> bool {
        self.isolation.unwrap_or_default() == ShareIsolation::ReadCommitted
    }

    /// Where a new share-partition of the group starts.
    pub fn reset(&self, base: ShareReset) -> ShareReset {
        self.auto_offset_reset.unwrap_or(base)
    }

    /// Each config's value in force, and whether the group set it.
    pub fn entries(
        &self,
        base: ShareConfig,
        reset: ShareReset,
    ) -> Vec<(&'static str, String, bool)> {
        let p = self.partition(base);
        vec![
            (
                "share.record.lock.duration.ms",
                p.lock_duration_ms.to_string(),
                self.lock_duration_ms.is_some(),
            ),
            (
                "share.delivery.count.limit",
                p.delivery_count_limit.to_string(),
                self.delivery_count_limit.is_some(),
            ),
            (
                "share.auto.offset.reset",
                reset_name(self.reset(reset)).to_owned(),
                self.auto_offset_reset.is_some(),
            ),
            (
                "share.isolation.level",
                self.isolation.unwrap_or_default().name().to_owned(),
                self.isolation.is_some(),
            ),
        ]
    }

    fn is_empty(&self) -> bool {
        *self == ShareGroupConfig::default()
    }
}

fn unknown(name: &str) -> String {
    let names: Vec<&str> = GROUP_CONFIGS.iter().map(|(n, _)| *n).collect();
    format!(
        "unknown group config {name:?} (served: {})",
        names.join(", ")
    )
}

/// Kafka's name of a reset.
pub fn reset_name(r: ShareReset) -> &'static str {
    match r {
        ShareReset::Latest => "latest",
        ShareReset::Earliest => "earliest",
    }
}

/// The file's text for these configs.
pub fn to_text(configs: &BTreeMap<String, ShareGroupConfig>) -> String {
    let mut out = String::new();
    for (group, c) in configs {
        if c.is_empty() {
            continue;
        }
        for (name, value, set) in c.entries(ShareConfig::default(), ShareReset::Latest) {
            if set {
                out.push_str(&format!("{name}={value} {group}\n"));
            }
        }
    }
    out
}

/// The configs in a file's text; a line that does not read is skipped
/// (and said in the returned list of complaints).
pub fn from_text(text: &str) -> (BTreeMap<String, ShareGroupConfig>, Vec<String>) {
    let mut out: BTreeMap<String, ShareGroupConfig> = BTreeMap::new();
    let mut bad = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let parsed = line.split_once(' ').and_then(|(nv, group)| {
            let (name, value) = nv.split_once('=')?;
            Some((name, value, group))
        });
        let Some((name, value, group)) = parsed else {
            bad.push(format!("unreadable line {line:?}"));
            continue;
        };
        if let Err(e) = out.entry(group.to_owned()).or_default().set(name, value) {
            bad.push(e);
        }
    }
    out.retain(|_, c| !c.is_empty());
    (out, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_set_delete_and_read_back() {
        let mut c = ShareGroupConfig::default();
        c.set("share.record.lock.duration.ms", "2000").unwrap();
        c.set("share.delivery.count.limit", "3").unwrap();
        c.set("share.auto.offset.reset", "earliest").unwrap();
        assert!(c.read_committed());
        c.set("share.isolation.level", "read_uncommitted").unwrap();
        assert!(!c.read_committed());
        assert!(c.set("share.isolation.level", "uncommitted").is_err());
        assert!(c.set("share.delivery.count.limit", "11").is_err());
        assert!(c.set("share.record.lock.duration.ms", "999").is_err());
        assert!(c.set("share.auto.offset.reset", "none").is_err());
        assert!(c.set("share.heartbeat.interval.ms", "1").is_err());
        let base = ShareConfig::default();
        let p = c.partition(base);
        assert_eq!((p.lock_duration_ms, p.delivery_count_limit), (2000, 3));
        assert_eq!(p.max_in_flight, base.max_in_flight);
        assert_eq!(c.reset(ShareReset::Latest), ShareReset::Earliest);
        let mut all = BTreeMap::new();
        all.insert("a group".to_owned(), c);
        let mut other = ShareGroupConfig::default();
        other.set("share.delivery.count.limit", "4").unwrap();
        all.insert("g2".to_owned(), other);
        all.insert("empty".to_owned(), ShareGroupConfig::default());
        let (back, bad) = from_text(&to_text(&all));
        assert!(bad.is_empty(), "{bad:?}");
        all.remove("empty");
        assert_eq!(back, all);
        c.delete("share.delivery.count.limit").unwrap();
        assert_eq!(
            c.partition(base).delivery_count_limit,
            base.delivery_count_limit
        );
        let (_, bad) = from_text("nonsense\nshare.delivery.count.limit=99 g\n");
        assert_eq!(bad.len(), 2);
    }
}

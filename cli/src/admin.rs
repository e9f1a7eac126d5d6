//! Admin commands beyond create/list/describe: `topics delete`, `topics
//! alter`, `topics add-partitions`, `groups reset-offsets`, `groups delete`,
//! `groups delete-offsets`, and the time values
//! `consume --from-time` and `groups reset-offsets --to` take.

use crate::commands::BrokerAddr;
use std::collections::HashMap;
use std::str::FromStr;

use anyhow::{bail, Context, Result};
use flume_client::{Admin, AlterTopicRequest, ErrorCode, ListOffsetsPartition, PartitionOffset};
use flume_protocol::TopicSettings;

use crate::commands::describe;

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

fn settings_line(s: &TopicSettings) -> String {
    let limit = |v: i64| {
        if v < 0 {
            "none".to_owned()
        } else {
            v.to_string()
        }
    };
    format!(
        "partitions={} retention.ms={} retention.bytes={} segment.bytes={} max.pending={} backpressure={}",
        s.partitions,
        limit(s.retention_ms),
        limit(s.retention_bytes),
        s.segment_bytes,
        s.max_pending,
        if s.backpressure == 1 { "reject" } else { "block" }
    )
}

async fn connect(broker: &BrokerAddr) -> Result<Admin> {
    Admin::connect_with(&broker.addr, broker.connection()?)
        .await
        .context("cannot reach the broker")
}

/// `topics describe`'s settings line.
pub async fn settings(admin: &Admin, name: &str) -> Result<String> {
    Ok(settings_line(
        &admin.topic_settings(name).await.map_err(describe)?,
    ))
}

/// `topics describe`'s table of every config with its value and source; a
/// broker without TOPIC_CONFIGS (older) gets a note instead.
pub async fn print_configs(admin: &Admin, name: &str) -> Result<()> {
    match admin.describe_topic_configs(name).await {
        Ok(resp) => {
            println!("{:<40} {:<24} SOURCE", "CONFIG", "VALUE");
            for c in resp.configs {
                let source = match c.source {
                    flume_client::CONFIG_SOURCE_TOPIC => "topic",
                    flume_client::CONFIG_SOURCE_BROKER => "broker",
                    _ => "default",
                };
                // An empty list (`cleanup.policy` with no policy) is shown as "".
                let value = if c.value.is_empty() { "\"\"" } else { &c.value };
                println!("{:<40} {value:<24} {source}", c.name);
            }
            Ok(())
        }
        Err(e) if e.code() == Some(ErrorCode::UnsupportedApi) => {
            println!("(this broker does not list topic configs by name)");
            Ok(())
        }
        Err(e) => Err(describe(e)),
    }
}

/// `topics alter` with `--config` / `--delete-config`.
pub async fn alter_topic_configs(
    broker: &BrokerAddr,
    name: &str,
    set: &[(&str, &str)],
    delete: &[&str],
) -> Result<()> {
    let admin = connect(broker).await?;
    match admin.alter_topic_configs(name, set, delete).await {
        Ok(resp) => {
            let changed: Vec<String> = resp
                .configs
                .iter()
                .filter(|c| {
                    set.iter().any(|(k, _)| *k == c.name) || delete.contains(&c.name.as_str())
                })
                .map(|c| format!("{}={}", c.name, c.value))
                .collect();
            println!("altered topic {name}: {}", changed.join(" "));
            Ok(())
        }
        Err(e) if e.code() == Some(ErrorCode::UnknownTopic) => bail!("topic {name} does not exist"),
        Err(e) => Err(describe(e)),
    }
}

/// `topics delete`.
pub async fn delete_topic(broker: &BrokerAddr, name: &str) -> Result<()> {
    let admin = connect(broker).await?;
    match admin.delete_topic(name).await {
        Ok(()) => {
            println!("deleted topic {name}");
            Ok(())
        }
        Err(e) if e.code() == Some(ErrorCode::UnknownTopic) => bail!("topic {name} does not exist"),
        Err(e) => Err(describe(e)),
    }
}

/// `topics delete-records`.
pub async fn delete_records(
    broker: &BrokerAddr,
    name: &str,
    partition: i32,
    before: Option<u64>,
) -> Result<()> {
    let admin = connect(broker).await?;
    match admin.delete_records(name, partition, before).await {
        Ok(start) => {
            println!("topic {name} partition {partition}: log start {start}");
            Ok(())
        }
        Err(e) if e.code() == Some(ErrorCode::UnknownTopic) => bail!("topic {name} does not exist"),
        Err(e) if e.code() == Some(ErrorCode::UnknownPartition) => {
            bail!("topic {name} has no partition {partition}")
        }
        Err(e) if e.code() == Some(ErrorCode::OffsetOutOfRange) => {
            bail!(
                "offset {} is past the end of {name} partition {partition}",
                before.unwrap_or(0)
            )
        }
        Err(e) => Err(describe(e)),
    }
}

/// `topics alter`.
pub async fn alter_topic(
    broker: &BrokerAddr,
    name: &str,
    retention_ms: Option<Limit>,
    retention_bytes: Option<Limit>,
    segment_bytes: Option<u64>,
) -> Result<()> {
    let admin = connect(broker).await?;
    let wire = |l: Option<Limit>| match l {
        None => -1,
        Some(Limit(None)) => 0,
        Some(Limit(Some(v))) => i64::try_from(v).unwrap_or(i64::MAX),
    };
    let req = AlterTopicRequest {
        name: name.to_owned(),
        retention_ms: wire(retention_ms),
        retention_bytes: wire(retention_bytes),
        segment_bytes: segment_bytes.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX)),
    };
    match admin.alter_topic(req).await {
        Ok(s) => {
            println!("altered topic {name}: {}", settings_line(&s));
            Ok(())
        }
        Err(e) if e.code() == Some(ErrorCode::UnknownTopic) => bail!("topic {name} does not exist"),
        Err(e) => Err(describe(e)),
    }
}

/// `groups delete`.
pub async fn delete_group(broker: &BrokerAddr, group: &str) -> Result<()> {
    let admin = connect(broker).await?;
    match admin.delete_group(group).await {
        Ok(n) => {
            println!("deleted group {group} ({n} committed offsets dropped)");
            Ok(())
        }
        Err(e) if e.code() == Some(ErrorCode::GroupNotEmpty) => bail!(
            "group {group} has active members: stop its consumers (or wait until they leave) before deleting it"
        ),
        Err(e) if e.code() == Some(ErrorCode::UnknownGroup) => {
            bail!("group {group} does not exist (no members and no committed offsets)")
        }
        Err(e) => Err(describe(e)),
    }
}

/// `groups delete-offsets`.
pub async fn delete_offsets(
    broker: &BrokerAddr,
    group: &str,
    topic: &str,
    partitions: &[i32],
) -> Result<()> {
    let admin = connect(broker).await?;
    let done = match admin.delete_offsets(group, topic, partitions).await {
        Ok(done) => done,
        Err(e) if e.code() == Some(ErrorCode::UnknownGroup) => {
            bail!("group {group} does not exist (no members and no committed offsets)")
        }
        Err(e) if e.code() == Some(ErrorCode::UnknownTopic) => {
            bail!("topic {topic} does not exist")
        }
        Err(e) => return Err(describe(e)),
    };
    let mut refused = Vec::new();
    for d in &done {
        match d.error {
            ErrorCode::None => println!("deleted the committed offset of group {group} on {topic} partition {}", d.partition),
            ErrorCode::GroupNotEmpty => refused.push(format!("partition {}: a member of group {group} reads topic {topic}; stop its consumers first", d.partition)),
            ErrorCode::UnknownPartition => refused.push(format!("partition {}: topic {topic} has no such partition", d.partition)),
            other => refused.push(format!("partition {}: {other}", d.partition)),
        }
    }
    if !refused.is_empty() {
        bail!("{}", refused.join("; "));
    }
    Ok(())
}

/// `topics add-partitions`.
pub async fn add_partitions(
    broker: &BrokerAddr,
    name: &str,
    partitions: i32,
    dry_run: bool,
) -> Result<()> {
    let admin = connect(broker).await?;
    match admin.create_partitions(name, partitions, dry_run).await {
        Ok(before) if dry_run => {
            println!("topic {name} would grow from {before} to {partitions} partitions (dry run: nothing changed)");
            Ok(())
        }
        Ok(before) => {
            println!("topic {name} now has {partitions} partitions (it had {before})");
            Ok(())
        }
        Err(e) if e.code() == Some(ErrorCode::UnknownTopic) => bail!("topic {name} does not exist"),
        Err(e) if e.code() == Some(ErrorCode::InvalidRequest) => {
            let now = admin
                .topics(&[name.to_owned()])
                .await
                .ok()
                .and_then(|t| t.into_iter().next())
                .map(|t| t.partitions.len());
            match now {
                Some(n) => bail!("topic {name} has {n} partitions: --partitions is the new count in all and must be more than that (partitions are never removed)"),
                None => Err(describe(e)),
            }
        }
        Err(e) if e.code() == Some(ErrorCode::UnsupportedApi) => {
            bail!("the broker does not support adding partitions (it predates CREATE_PARTITIONS)")
        }
        Err(e) => Err(describe(e)),
    }
}

/// `groups reset-offsets`.
pub async fn reset_offsets(
    broker: &BrokerAddr,
    group: &str,
    topic: &str,
    to: ResetTo,
    dry_run: bool,
) -> Result<()> {
    let admin = connect(broker).await?;
    let meta = admin
        .topics(&[topic.to_owned()])
        .await
        .map_err(describe)?
        .into_iter()
        .next()
        .filter(|t| t.error.is_ok())
        .ok_or_else(|| anyhow::anyhow!("topic {topic} does not exist"))?;
    let by_time: HashMap<i32, i64> = match to {
        ResetTo::Time(ts) => {
            let found = admin
                .list_offsets(
                    meta.partitions
                        .iter()
                        .map(|p| ListOffsetsPartition {
                            topic: topic.to_owned(),
                            partition: p.partition,
                            timestamp: ts,
                        })
                        .collect(),
                )
                .await
                .map_err(describe)?;
            let mut m = HashMap::new();
            for f in found {
                if !f.error.is_ok() {
                    bail!(
                        "looking up partition {} of {topic} by time failed: {}",
                        f.partition,
                        f.error
                    );
                }
                m.insert(f.partition, f.offset);
            }
            m
        }
        _ => HashMap::new(),
    };
    let current: HashMap<i32, i64> = admin
        .group_offsets(group, &[topic.to_owned()])
        .await
        .map_err(describe)?
        .into_iter()
        .filter(|p| p.error.is_ok())
        .map(|p| (p.partition, p.committed))
        .collect();
    let mut plan = Vec::new();
    for p in &meta.partitions {
        let (new, note) = match to {
            ResetTo::Earliest => (p.log_start, ""),
            ResetTo::Latest => (p.log_end, ""),
            ResetTo::Offset(o) if o < p.log_start => {
                (p.log_start, "  (below the log start: moved up to it)")
            }
            ResetTo::Offset(o) if o > p.log_end => {
                (p.log_end, "  (past the log end: moved down to it)")
            }
            ResetTo::Offset(o) => (o, ""),
            ResetTo::Time(_) => match by_time.get(&p.partition) {
                Some(&o) if o >= p.log_end => {
                    (o, "  (no record at or after the time: the log end)")
                }
                Some(&o) => (o, ""),
                None => bail!("no answer for partition {} of {topic}", p.partition),
            },
        };
        plan.push((p.partition, new, note));
    }
    // The membership check: a commit outside membership is refused while the group has members.
    let empty = match admin.check_group_empty(group).await {
        Ok(()) => true,
        Err(e) if e.code() == Some(ErrorCode::RebalanceInProgress) => false,
        Err(e) => return Err(describe(e)),
    };
    if !empty && !dry_run {
        bail!("group {group} has active members: its offsets can be reset only while it has none (as Kafka requires); stop its consumers first, or see the plan with --dry-run");
    }
    println!(
        "{:<24} {:>9} {:>12} {:>12}",
        "TOPIC", "PARTITION", "CURRENT", "NEW"
    );
    for (partition, new, note) in &plan {
        let cur = match current.get(partition) {
            Some(c) if *c >= 0 => c.to_string(),
            _ => "-".to_owned(),
        };
        println!("{topic:<24} {partition:>9} {cur:>12} {new:>12}{note}");
    }
    if dry_run {
        if empty {
            println!("dry run: nothing committed (group {group} has no members, so the reset would be allowed)");
        } else {
            println!("dry run: nothing committed (group {group} has active members: a reset would be refused until they leave)");
        }
        return Ok(());
    }
    let offsets = plan
        .iter()
        .map(|(partition, new, _)| PartitionOffset {
            topic: topic.to_owned(),
            partition: *partition,
            offset: *new,
        })
        .collect();
    match admin.commit(group, offsets).await {
        Ok(()) => {
            println!("reset group {group} on {topic}: {} partitions", plan.len());
            Ok(())
        }
        Err(e) if e.code() == Some(ErrorCode::RebalanceInProgress) => bail!(
            "group {group} gained members while resetting: nothing was committed; stop its consumers first"
        ),
        Err(e) => Err(describe(e)),
    }
}

/// `groups list`: every group with its state and type: `flume` (Flume's
/// groups, which the broker assigns), `classic` (Kafka clients' classic
/// groups), `consumer` (Kafka clients' consumer-protocol groups, KIP-848),
/// `share` (share groups, queues), `-` (known by committed offsets only).
pub async fn list_groups(broker: &BrokerAddr, states: &[String]) -> Result<()> {
    let admin = connect(broker).await?;
    let states: Vec<&str> = states.iter().map(String::as_str).collect();
    let groups = admin.list_groups(&states).await.map_err(describe)?;
    // Consumer-protocol groups also say "consumer" as their protocol type:
    // the broker names them.
    let consumer: std::collections::HashSet<String> =
        if groups.iter().any(|g| g.protocol_type == "consumer") {
            admin
                .describe_consumer_groups(&[])
                .await
                .map_err(describe)?
                .into_iter()
                .map(|g| g.group)
                .collect()
        } else {
            std::collections::HashSet::new()
        };
    println!("{:<32} {:<20} TYPE", "GROUP", "STATE");
    for g in groups {
        let kind = match g.protocol_type.as_str() {
            "" => "-",
            "flume" => "flume",
            "share" => "share",
            "consumer" if consumer.contains(&g.group) => "consumer",
            _ => "classic",
        };
        println!("{:<32} {:<20} {kind}", g.group, g.state);
    }
    Ok(())
}

/// `transactions list`.
pub async fn list_transactions(
    broker: &BrokerAddr,
    states: &[String],
    min_age_ms: Option<u64>,
) -> Result<()> {
    let admin = connect(broker).await?;
    let states: Vec<&str> = states.iter().map(String::as_str).collect();
    let listed = admin
        .list_transactions(&states, min_age_ms.map(std::time::Duration::from_millis))
        .await
        .map_err(describe)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    println!(
        "{:<32} {:>12} {:>6} {:<15} {:>9} {:>8} PARTITIONS",
        "TRANSACTIONAL_ID", "PRODUCER_ID", "EPOCH", "STATE", "OPEN_FOR", "TIMEOUT"
    );
    for t in listed {
        let open_for = if t.started_ms < 0 {
            "-".to_owned()
        } else {
            seconds(now.saturating_sub(t.started_ms).max(0))
        };
        let partitions = if t.partitions.is_empty() {
            "-".to_owned()
        } else {
            t.partitions
                .iter()
                .map(|tp| {
                    let ps: Vec<String> = tp.partitions.iter().map(i32::to_string).collect();
                    format!("{}/{}", tp.topic, ps.join(","))
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        println!(
            "{:<32} {:>12} {:>6} {:<15} {:>9} {:>8} {partitions}",
            t.transactional_id,
            t.producer_id,
            t.producer_epoch,
            t.state,
            open_for,
            seconds(i64::from(t.timeout_ms)),
        );
    }
    Ok(())
}

/// Milliseconds as seconds with one decimal: `12.3s` (a negative count, which
/// only a confused broker would send, as `0.0s`).
fn seconds(ms: i64) -> String {
    let ms = ms.max(0);
    format!("{}.{}s", ms / 1000, (ms % 1000) / 100)
}

/// `groups describe`.
pub async fn describe_group(broker: &BrokerAddr, group: &str) -> Result<()> {
    let admin = connect(broker).await?;
    // A share group of the name (a namespace of its own) is shown too; a
    // Kafka address has none to show here.
    let share = if broker.is_kafka() {
        None
    } else {
        match admin.describe_share_group(group).await {
            Ok(d) => Some(d),
            Err(e) if e.code() == Some(ErrorCode::UnknownGroup) => None,
            Err(e) => return Err(describe(e)),
        }
    };
    let consumer = admin
        .describe_consumer_groups(&[group])
        .await
        .map_err(describe)?;
    if let Some(c) = consumer.into_iter().next() {
        print_consumer_protocol_group(&c);
        let offsets = committed_offsets(&admin, group).await?;
        print_offsets(
            &offsets,
            &owners(c.members.iter().map(|m| (&m.member_id, &m.assignment))),
        );
        if let Some(s) = share {
            println!();
            print_share_group(&s);
        }
        return Ok(());
    }
    let d = match admin.describe_group(group).await {
        Ok(d) => d,
        Err(e) if e.code() == Some(ErrorCode::UnknownGroup) => {
            if let Some(s) = share {
                print_share_group(&s);
                return Ok(());
            }
            bail!("group {group} does not exist (no members and no committed offsets)")
        }
        Err(e) => return Err(describe(e)),
    };
    print_consumer_group(&d);
    if let Some(s) = share {
        println!();
        print_share_group(&s);
    }
    Ok(())
}

/// A share group: its members, and per share-partition where it stands.
fn print_share_group(d: &flume_client::ShareGroupDescribeResponse) {
    println!(
        "share group {}: epoch {}, {} member(s)",
        d.group,
        d.epoch,
        d.members.len()
    );
    if !d.members.is_empty() {
        println!();
        println!(
            "{:<40} {:<20} {:>6}  PARTITIONS",
            "MEMBER", "CLIENT-ID", "EPOCH"
        );
        for m in &d.members {
            let parts: Vec<String> = m
                .assignment
                .iter()
                .map(|a| {
                    let ps: Vec<String> = a.partitions.iter().map(i32::to_string).collect();
                    format!("{}:{}", a.topic, ps.join(","))
                })
                .collect();
            println!(
                "{:<40} {:<20} {:>6}  {}",
                m.member_id,
                if m.client_id.is_empty() {
                    "-"
                } else {
                    &m.client_id
                },
                m.member_epoch,
                if parts.is_empty() {
                    "-".to_owned()
                } else {
                    parts.join(" ")
                }
            );
        }
    }
    println!();
    if d.partitions.is_empty() {
        println!("no share-partitions yet (nothing fetched)");
        return;
    }
    println!(
        "{:<24} {:>9} {:>12} {:>12} {:>9} {:>9} {:>9} {:>11} {:>9}",
        "TOPIC",
        "PARTITION",
        "START",
        "END",
        "IN-FLIGHT",
        "ACQUIRED",
        "AVAILABLE",
        "REDELIVERED",
        "ARCHIVED"
    );
    for p in &d.partitions {
        let end = if p.log_end < 0 {
            "-".to_owned()
        } else {
            p.log_end.to_string()
        };
        println!(
            "{:<24} {:>9} {:>12} {:>12} {:>9} {:>9} {:>9} {:>11} {:>9}",
            p.topic,
            p.partition,
            p.start_offset,
            end,
            p.in_flight,
            p.acquired,
            p.available,
            p.redelivered,
            p.archived
        );
    }
}

/// A consumer group: state, members and committed offsets with their lag.
fn print_consumer_group(d: &flume_client::DescribeGroupResponse) {
    println!(
        "group {}: state {}, generation {}, protocol {} ({}), {} member(s), leader {}",
        d.group,
        d.state,
        d.generation,
        or_dash(&d.protocol),
        or_dash(&d.protocol_type),
        d.members.len(),
        or_dash(&d.leader_id)
    );
    if !d.members.is_empty() {
        println!();
        println!(
            "{:<40} {:<20} {:<16} PARTITIONS",
            "MEMBER", "CLIENT-ID", "HOST"
        );
        for m in &d.members {
            println!(
                "{:<40} {:<20} {:<16} {}",
                m.member_id,
                or_dash(&m.client_id),
                or_dash(&m.client_host),
                partitions(&m.assignment)
            );
        }
    }
    print_offsets(
        &d.offsets,
        &owners(d.members.iter().map(|m| (&m.member_id, &m.assignment))),
    );
}

/// A consumer-protocol group (KIP-848): its epochs and assignor, and per
/// member its epoch, what it owns and, while it reconciles, its target.
fn print_consumer_protocol_group(g: &flume_client::ConsumerGroupInfo) {
    println!(
        "group {}: type consumer, state {}, epoch {}, assignment epoch {}, assignor {}, {} member(s)",
        g.group,
        g.state,
        g.epoch,
        g.assignment_epoch,
        or_dash(&g.assignor),
        g.members.len()
    );
    if g.members.is_empty() {
        return;
    }
    println!();
    println!(
        "{:<40} {:>6} {:<20} {:<16} {:<24} {:<24} TARGET",
        "MEMBER", "EPOCH", "CLIENT-ID", "HOST", "SUBSCRIPTION", "PARTITIONS"
    );
    for m in &g.members {
        let subscription = if m.regex.is_empty() {
            or_dash(&m.subscribed.join(","))
        } else {
            format!("/{}/", m.regex)
        };
        let owned = partitions(&m.assignment);
        let target = partitions(&m.target);
        println!(
            "{:<40} {:>6} {:<20} {:<16} {:<24} {:<24} {}",
            m.member_id,
            m.member_epoch,
            or_dash(&m.client_id),
            or_dash(&m.client_host),
            subscription,
            owned,
            // The target only while it differs: the member reconciles.
            if target == owned { "=" } else { &target }
        );
    }
}

/// `s`, or `-` for an empty string.
fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".to_owned()
    } else {
        s.to_owned()
    }
}

/// Partitions as `topic:0,1 other:2`, or `-` for none.
fn partitions(tps: &[flume_client::TopicPartitions]) -> String {
    let parts: Vec<String> = tps
        .iter()
        .filter(|a| !a.partitions.is_empty())
        .map(|a| {
            let ps: Vec<String> = a.partitions.iter().map(i32::to_string).collect();
            format!("{}:{}", a.topic, ps.join(","))
        })
        .collect();
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join(" ")
    }
}

/// Which member owns each partition.
fn owners<'a>(
    members: impl Iterator<Item = (&'a String, &'a Vec<flume_client::TopicPartitions>)>,
) -> std::collections::HashMap<(String, i32), String> {
    let mut owner = std::collections::HashMap::new();
    for (member, assignment) in members {
        for a in assignment {
            for p in &a.partitions {
                owner.insert((a.topic.clone(), *p), member.clone());
            }
        }
    }
    owner
}

/// A group's committed offsets beside each partition's end, with the lag
/// and the member owning the partition.
fn print_offsets(
    offsets: &[flume_client::GroupOffsetInfo],
    owner: &std::collections::HashMap<(String, i32), String>,
) {
    println!();
    if offsets.is_empty() {
        println!("no committed offsets");
        return;
    }
    println!(
        "{:<24} {:>9} {:>12} {:>12} {:>10}  OWNER",
        "TOPIC", "PARTITION", "COMMITTED", "END", "LAG"
    );
    for o in offsets {
        let (end, lag) = if o.log_end < 0 {
            ("-".to_owned(), "-".to_owned())
        } else {
            (
                o.log_end.to_string(),
                (o.log_end - o.committed).max(0).to_string(),
            )
        };
        let who = owner
            .get(&(o.topic.clone(), o.partition))
            .cloned()
            .unwrap_or_else(|| "-".to_owned());
        println!(
            "{:<24} {:>9} {:>12} {:>12} {:>10}  {who}",
            o.topic, o.partition, o.committed, end, lag
        );
    }
}

/// A group's committed offsets on every topic, each beside its partition's
/// end (for a consumer-protocol group, which DESCRIBE_GROUP does not describe).
async fn committed_offsets(
    admin: &Admin,
    group: &str,
) -> Result<Vec<flume_client::GroupOffsetInfo>> {
    let topics: Vec<String> = admin
        .topics(&[])
        .await
        .map_err(describe)?
        .into_iter()
        .map(|t| t.name)
        .collect();
    let parts = admin
        .group_offsets(group, &topics)
        .await
        .map_err(describe)?;
    Ok(parts
        .into_iter()
        .filter(|p| p.error.is_ok() && p.committed >= 0)
        .map(|p| flume_client::GroupOffsetInfo {
            topic: p.topic,
            partition: p.partition,
            committed: p.committed,
            log_end: p.log_end,
        })
        .collect())
}

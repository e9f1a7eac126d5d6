//! `flume-cli groups`: lag, reset-offsets, list, describe, delete,
//! delete-offsets.

use std::collections::HashMap;

use anyhow::{bail, Context, Result};
use flume_client::{Admin, ErrorCode, ListOffsetsPartition, PartitionOffset};

use crate::args::client::BrokerAddr;
use crate::args::groups::GroupsCommand;
use crate::args::parse::ResetTo;
use crate::common::{connect, describe};

pub async fn run(cmd: GroupsCommand) -> Result<()> {
    let (group, topic, broker) = match cmd {
        GroupsCommand::Lag {
            group,
            topic,
            broker,
        } => (group, topic, broker),
        GroupsCommand::ResetOffsets {
            group,
            topic,
            to,
            dry_run,
            broker,
        } => return reset_offsets(&broker, &group, &topic, to, dry_run).await,
        GroupsCommand::Delete {
            group,
            group_flag,
            broker,
        } => {
            let group = group.or(group_flag).unwrap_or_default();
            return delete_group(&broker, &group).await;
        }
        GroupsCommand::DeleteOffsets {
            group,
            topic,
            partitions,
            broker,
        } => return delete_offsets(&broker, &group, &topic, &partitions).await,
        GroupsCommand::List { states, broker } => return list_groups(&broker, &states).await,
        GroupsCommand::Describe { group, broker } => return describe_group(&broker, &group).await,
    };
    let admin = Admin::connect_with(&broker.addr, broker.connection()?)
        .await
        .context("cannot reach the broker")?;
    let topics: Vec<String> = match &topic {
        Some(t) => {
            let known = admin
                .topics(std::slice::from_ref(t))
                .await
                .map_err(describe)?
                .into_iter()
                .any(|m| m.error.is_ok());
            if !known {
                bail!("topic {t} does not exist");
            }
            vec![t.clone()]
        }
        None => admin
            .topics(&[])
            .await
            .map_err(describe)?
            .into_iter()
            .map(|t| t.name)
            .collect(),
    };
    let parts = admin
        .group_offsets(&group, &topics)
        .await
        .map_err(describe)?;
    // A group is known by its commits: without --topic, show only the topics it committed on.
    let committed: std::collections::HashSet<&str> = parts
        .iter()
        .filter(|p| p.error.is_ok() && p.committed >= 0)
        .map(|p| p.topic.as_str())
        .collect();
    if committed.is_empty() {
        match &topic {
            Some(t) => bail!("group {group} has no committed offset on topic {t} (unknown group, or it never committed there)"),
            None => bail!("group {group} has no committed offsets (unknown group, or it never committed)"),
        }
    }
    println!(
        "{:<24} {:>9} {:>12} {:>12} {:>10}",
        "TOPIC", "PARTITION", "COMMITTED", "END", "LAG"
    );
    for p in parts
        .iter()
        .filter(|p| committed.contains(p.topic.as_str()))
    {
        if !p.error.is_ok() {
            println!("{:<24} {}", p.topic, p.error);
            continue;
        }
        let committed = if p.committed < 0 {
            "-".to_owned()
        } else {
            p.committed.to_string()
        };
        println!(
            "{:<24} {:>9} {:>12} {:>12} {:>10}",
            p.topic,
            p.partition,
            committed,
            p.log_end,
            p.lag()
        );
    }
    Ok(())
}

/// `groups delete`.
async fn delete_group(broker: &BrokerAddr, group: &str) -> Result<()> {
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
async fn delete_offsets(
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

/// `groups reset-offsets`.
async fn reset_offsets(
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
async fn list_groups(broker: &BrokerAddr, states: &[String]) -> Result<()> {
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

/// `groups describe`.
async fn describe_group(broker: &BrokerAddr, group: &str) -> Result<()> {
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

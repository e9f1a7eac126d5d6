//! `flume-cli topics`: list, create, describe, delete, delete-records,
//! add-partitions, alter.

use anyhow::{bail, Context, Result};
use flume_broker::Backpressure;
use flume_client::{Admin, AlterTopicRequest, ErrorCode};
use flume_protocol::{CreateTopicRequest, TopicSettings};

use crate::args::client::BrokerAddr;
use crate::args::parse::Limit;
use crate::args::topics::TopicsCommand;
use crate::common::{config_pair, connect, describe};

pub async fn run(cmd: TopicsCommand) -> Result<()> {
    match cmd {
        TopicsCommand::List { broker } => {
            let admin = Admin::connect_with(&broker.addr, broker.connection()?)
                .await
                .context("cannot reach the broker")?;
            let topics = admin.topics(&[]).await?;
            if topics.is_empty() {
                println!("no topics");
            }
            for t in topics {
                let records: i64 = t.partitions.iter().map(|p| p.log_end - p.log_start).sum();
                println!(
                    "{}\tpartitions={}\trecords={records}",
                    t.name,
                    t.partitions.len()
                );
            }
        }
        TopicsCommand::Create {
            name,
            partitions,
            retention_bytes,
            retention_ms,
            backpressure,
            config,
            broker,
        } => {
            let admin = Admin::connect_with(&broker.addr, broker.connection()?)
                .await
                .context("cannot reach the broker")?;
            if !config.is_empty() {
                let (rb, rm) = (
                    retention_bytes.map(|v| v.to_string()),
                    retention_ms.map(|v| v.to_string()),
                );
                let mut pairs: Vec<(&str, &str)> = Vec::new();
                if let Some(v) = &rb {
                    pairs.push(("retention.bytes", v));
                }
                if let Some(v) = &rm {
                    pairs.push(("retention.ms", v));
                }
                pairs.extend(config.iter().map(|p| config_pair(p)));
                admin
                    .create_topic_with_configs(&name, partitions, &pairs)
                    .await
                    .map_err(describe)?;
                println!("created topic {name} with {partitions} partitions");
                return Ok(());
            }
            admin
                .create_topic(CreateTopicRequest {
                    name: name.clone(),
                    partitions,
                    retention_bytes: retention_bytes.unwrap_or(-1),
                    retention_ms: retention_ms.unwrap_or(-1),
                    backpressure: match backpressure {
                        None => -1,
                        Some(Backpressure::Block) => 0,
                        Some(Backpressure::Reject) => 1,
                    },
                    ..CreateTopicRequest::default()
                })
                .await
                .map_err(describe)?;
            println!("created topic {name} with {partitions} partitions");
        }
        TopicsCommand::Describe { name, broker } => {
            let admin = Admin::connect_with(&broker.addr, broker.connection()?)
                .await
                .context("cannot reach the broker")?;
            let t = admin
                .topics(std::slice::from_ref(&name))
                .await?
                .into_iter()
                .next();
            let Some(t) = t.filter(|t| t.error.is_ok()) else {
                bail!("topic {name} does not exist");
            };
            println!("topic {name}: {} partitions", t.partitions.len());
            println!("{}", settings(&admin, &name).await?);
            print_configs(&admin, &name).await?;
            println!("{:>9} {:>12} {:>12}", "PARTITION", "START", "END");
            for p in t.partitions {
                println!("{:>9} {:>12} {:>12}", p.partition, p.log_start, p.log_end);
            }
        }
        TopicsCommand::Delete { name, broker } => {
            delete_topic(&broker, &name).await?;
        }
        TopicsCommand::DeleteRecords {
            name,
            partition,
            before,
            all: _,
            broker,
        } => {
            delete_records(&broker, &name, partition, before).await?;
        }
        TopicsCommand::AddPartitions {
            name,
            partitions,
            dry_run,
            broker,
        } => {
            add_partitions(&broker, &name, partitions, dry_run).await?;
        }
        TopicsCommand::Alter {
            name,
            retention_ms,
            retention_bytes,
            segment_bytes,
            config,
            delete_config,
            broker,
        } => {
            if config.is_empty() && delete_config.is_empty() {
                alter_topic(&broker, &name, retention_ms, retention_bytes, segment_bytes).await?;
            } else {
                let limit = |l: Option<Limit>| {
                    l.map(|Limit(v)| v.map_or("-1".to_owned(), |v| v.to_string()))
                };
                let shorthands = [
                    ("retention.ms", limit(retention_ms)),
                    ("retention.bytes", limit(retention_bytes)),
                    ("segment.bytes", segment_bytes.map(|v| v.to_string())),
                ];
                let mut set: Vec<(&str, &str)> = shorthands
                    .iter()
                    .filter_map(|(k, v)| v.as_deref().map(|v| (*k, v)))
                    .collect();
                set.extend(config.iter().map(|p| config_pair(p)));
                let delete: Vec<&str> = delete_config.iter().map(String::as_str).collect();
                alter_topic_configs(&broker, &name, &set, &delete).await?;
            }
        }
    }
    Ok(())
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

/// `topics describe`'s settings line.
async fn settings(admin: &Admin, name: &str) -> Result<String> {
    Ok(settings_line(
        &admin.topic_settings(name).await.map_err(describe)?,
    ))
}

/// `topics describe`'s table of every config with its value and source; a
/// broker without TOPIC_CONFIGS (older) gets a note instead.
async fn print_configs(admin: &Admin, name: &str) -> Result<()> {
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
async fn alter_topic_configs(
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
async fn delete_topic(broker: &BrokerAddr, name: &str) -> Result<()> {
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
async fn delete_records(
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
async fn alter_topic(
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

/// `topics add-partitions`.
async fn add_partitions(
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

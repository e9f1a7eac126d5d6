//! Subcommands.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use flume_broker::{Backpressure, Broker, BrokerConfig, FsyncPolicy};
use flume_client::protocol::{CreateTopicRequest, ErrorCode};
use flume_client::{
    Admin, Client, ConnectionConfig, GroupConsumer, PartitionConsumer, Producer, SendRecord,
    StartOffset,
};
use serde_json::json;

use crate::output::{json_bytes, record_line, Format};

/// Flume: a Kafka-style message streaming broker and its tools.
#[derive(Debug, Parser)]
#[command(name = "flume-cli", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a broker (Ctrl-C shuts it down gracefully).
    Broker(BrokerArgs),
    /// Send records: one --message, or every line of stdin.
    Produce(ProduceArgs),
    /// Read records from a partition, or as a member of a group.
    Consume(ConsumeArgs),
    /// List, create and describe topics.
    Topics {
        #[command(subcommand)]
        command: TopicsCommand,
    },
    /// Consumer-group tools.
    Groups {
        #[command(subcommand)]
        command: GroupsCommand,
    },
    /// Measure whole-system throughput and latency.
    Perf {
        #[command(subcommand)]
        command: crate::perf::PerfCommand,
    },
}

/// Parses `always`, `never` or a number of milliseconds.
fn parse_fsync(s: &str) -> Result<FsyncPolicy, String> {
    match s {
        "always" => Ok(FsyncPolicy::Always),
        "never" => Ok(FsyncPolicy::Never),
        ms => ms
            .parse::<u64>()
            .map(|ms| FsyncPolicy::Interval(Duration::from_millis(ms)))
            .map_err(|_| format!("--fsync must be always, never or milliseconds, not {ms:?}")),
    }
}

#[derive(Debug, Args)]
pub struct BrokerArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port (0 picks a free one).
    #[arg(long, default_value_t = 9092)]
    port: u16,
    /// Data directory, held by one broker at a time (lock file `.lock`).
    #[arg(long, default_value = "./data")]
    data: PathBuf,
    /// Use a --data directory that is not empty and is not a Flume data
    /// directory (by default such a directory is refused).
    #[arg(long)]
    allow_foreign_data_dir: bool,
    /// Partitions of auto-created topics.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=10000))]
    partitions: u32,
    /// When to fsync appended records: always, never, or every N milliseconds.
    #[arg(long, default_value = "never", value_parser = parse_fsync)]
    fsync: FsyncPolicy,
    /// Retention by size per partition (bytes).
    #[arg(long)]
    retention_bytes: Option<u64>,
    /// Retention by age (milliseconds).
    #[arg(long)]
    retention_ms: Option<u64>,
    /// Segment size (bytes).
    #[arg(long, default_value_t = 64 * 1024 * 1024, value_parser = clap::value_parser!(u64).range(1024..=(1u64 << 31)))]
    segment_bytes: u64,
    /// Partition queue capacity (pending append requests).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    max_pending: u64,
    /// When a partition queue is full: block (wait) or reject (QUEUE_FULL).
    #[arg(long, default_value = "block")]
    backpressure: Backpressure,
    /// Largest request frame (bytes).
    #[arg(long, default_value_t = 16 * 1024 * 1024, value_parser = clap::value_parser!(u64).range(4096..=(1u64 << 30)))]
    max_frame_bytes: u64,
    /// Largest record (bytes); at most max-frame-bytes - 1024.
    #[arg(long)]
    max_record_bytes: Option<u64>,
    /// Most concurrent connections.
    #[arg(long, default_value_t = 4096)]
    max_connections: usize,
    /// Most bytes of requests being served at once; past it the broker stops
    /// reading until requests complete [default: 64 MiB, or max-frame-bytes if larger].
    #[arg(long, value_parser = clap::value_parser!(u64).range(4096..=(1u64 << 40)))]
    max_request_memory: Option<u64>,
    /// Do not create topics on first use.
    #[arg(long)]
    no_auto_create: bool,
    /// Check every record of sealed segments at startup.
    #[arg(long)]
    verify: bool,
    /// After each response, keep trying to read the connection's next request
    /// for this many microseconds before parking (0: never; costs a busy core).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    busy_poll_us: u64,
    /// Serve /metrics (Prometheus), /api/overview, /healthz and the dashboard
    /// (/) over HTTP on this port of --host (0 picks a free one).
    #[arg(long)]
    http_port: Option<u16>,
}

#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Broker address.
    #[arg(long, default_value = "localhost:9092")]
    broker: String,
    /// Topic.
    #[arg(long)]
    topic: String,
    /// Key for every record (routes them to one partition).
    #[arg(long)]
    key: Option<String>,
    /// Explicit partition.
    #[arg(long)]
    partition: Option<i32>,
    /// The record value; without it every line of stdin is a record.
    #[arg(long)]
    message: Option<String>,
    /// With stdin: split each line at the first S into key and value.
    #[arg(long)]
    key_separator: Option<String>,
    /// Output format of the acknowledgements.
    #[arg(long, value_enum, default_value = "plain")]
    format: Format,
    /// Print only a summary.
    #[arg(long)]
    quiet: bool,
}

#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// Broker address.
    #[arg(long, default_value = "localhost:9092")]
    broker: String,
    /// Topic.
    #[arg(long)]
    topic: String,
    /// Partition (partition mode; default 0).
    #[arg(long, conflicts_with = "group")]
    partition: Option<i32>,
    /// Start: earliest, latest or an offset (partition mode; for a new group, earliest or latest).
    #[arg(long, default_value = "earliest")]
    offset: StartOffset,
    /// Join this consumer group instead of reading one partition.
    #[arg(long)]
    group: Option<String>,
    /// Stop after N records.
    #[arg(long)]
    max: Option<u64>,
    /// Keep waiting for new records (partition mode stops at the end otherwise; group mode always follows).
    #[arg(long)]
    follow: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "plain")]
    format: Format,
    /// Group mode: the broker drops this member if it hears nothing for this long.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=300_000))]
    session_timeout_ms: u64,
}

#[derive(Debug, Subcommand)]
pub enum TopicsCommand {
    /// List topics with their partition counts.
    List {
        /// Broker address.
        #[arg(long, default_value = "localhost:9092")]
        broker: String,
    },
    /// Create a topic.
    Create {
        /// Topic name.
        name: String,
        /// Partitions.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=10000))]
        partitions: i32,
        /// Retention by size per partition (bytes).
        #[arg(long)]
        retention_bytes: Option<i64>,
        /// Retention by age (ms).
        #[arg(long)]
        retention_ms: Option<i64>,
        /// When a partition queue is full: block or reject.
        #[arg(long)]
        backpressure: Option<Backpressure>,
        /// Broker address.
        #[arg(long, default_value = "localhost:9092")]
        broker: String,
    },
    /// Start and end offsets of every partition of a topic.
    Describe {
        /// Topic name.
        name: String,
        /// Broker address.
        #[arg(long, default_value = "localhost:9092")]
        broker: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum GroupsCommand {
    /// Committed offset, end offset and lag per partition.
    Lag {
        /// Group.
        #[arg(long)]
        group: String,
        /// Topic (default: every topic).
        #[arg(long)]
        topic: Option<String>,
        /// Broker address.
        #[arg(long, default_value = "localhost:9092")]
        broker: String,
    },
}

pub async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Broker(a) => broker(a).await,
        Command::Produce(a) => produce(a).await,
        Command::Consume(a) => consume(a).await,
        Command::Topics { command } => topics(command).await,
        Command::Groups { command } => groups(command).await,
        Command::Perf { command } => crate::perf::run(command).await,
    }
}

/// A channel that closes on Ctrl-C or SIGTERM.
pub fn interrupt() -> Result<async_channel::Receiver<()>> {
    let (tx, rx) = async_channel::bounded::<()>(1);
    let tx = std::sync::Mutex::new(Some(tx));
    ctrlc::set_handler(move || {
        if let Ok(mut g) = tx.lock() {
            g.take();
        }
    })
    .context("cannot install the Ctrl-C handler")?;
    Ok(rx)
}

async fn broker(a: BrokerArgs) -> Result<()> {
    let mut c = BrokerConfig::new(&a.data);
    c.listen = format!("{}:{}", a.host, a.port);
    c.default_topic.partitions = a.partitions;
    c.default_topic.retention_bytes = a.retention_bytes;
    c.default_topic.retention_ms = a.retention_ms;
    c.default_topic.segment_bytes = a.segment_bytes;
    c.default_topic.max_pending = usize::try_from(a.max_pending)?;
    c.default_topic.backpressure = a.backpressure;
    c.fsync = a.fsync;
    c.max_frame_bytes = usize::try_from(a.max_frame_bytes)?;
    c.max_record_bytes = match a.max_record_bytes {
        Some(n) => usize::try_from(n)?,
        None => c.max_record_bytes.min(c.max_frame_bytes - 1024),
    };
    c.max_connections = a.max_connections;
    c.max_request_memory = match a.max_request_memory {
        Some(n) => usize::try_from(n)?,
        None => c.max_request_memory.max(c.max_frame_bytes),
    };
    c.auto_create_topics = !a.no_auto_create;
    c.verify_on_open = a.verify;
    c.busy_poll = Duration::from_micros(a.busy_poll_us);
    c.allow_foreign_data_dir = a.allow_foreign_data_dir;
    c.http_listen = a.http_port.map(|p| format!("{}:{p}", a.host));
    let stop = interrupt()?;
    let broker = Broker::start(c)
        .await
        .with_context(|| format!("cannot start the broker on {}:{}", a.host, a.port))?;
    println!(
        "flume broker listening on {} (data {})",
        broker.local_addr(),
        a.data.display()
    );
    if let Some(http) = broker.http_addr() {
        println!("flume broker dashboard on http://{http}/ (metrics at /metrics)");
    }
    std::io::stdout().flush().ok();
    let _ = stop.recv().await;
    eprintln!("shutting down: draining queues to disk");
    broker.shutdown().await;
    Ok(())
}

async fn produce(a: ProduceArgs) -> Result<()> {
    if a.topic.is_empty() {
        bail!("--topic must not be empty");
    }
    let producer = Producer::connect(&a.broker)
        .await
        .context("cannot reach the broker")?;
    let stdout = std::io::stdout();
    let report = |meta: flume_client::RecordMetadata, key: &Option<String>, value: &str| {
        if a.quiet {
            return;
        }
        let mut out = stdout.lock();
        let _ = match a.format {
            Format::Plain => writeln!(out, "partition={} offset={}", meta.partition, meta.offset),
            Format::Json => writeln!(
                out,
                "{}",
                json!({"partition": meta.partition, "offset": meta.offset, "key": json_bytes(key.as_deref().map(str::as_bytes)), "value": value})
            ),
        };
    };
    // One --message, or every line of stdin (split at --key-separator).
    let lines: Box<dyn Iterator<Item = std::io::Result<String>>> = match &a.message {
        Some(m) => Box::new(std::iter::once(Ok(m.clone()))),
        None => Box::new(std::io::stdin().lock().lines()),
    };
    let mut pending = std::collections::VecDeque::new();
    let mut sent = 0u64;
    for line in lines {
        let line = line.context("cannot read stdin")?;
        let (key, value) = match (&a.key_separator, &a.message) {
            (Some(sep), None) => match line.split_once(sep.as_str()) {
                Some((k, v)) => (Some(k.to_owned()), v.to_owned()),
                None => (a.key.clone(), line),
            },
            _ => (a.key.clone(), line),
        };
        let rec = SendRecord {
            topic: a.topic.clone(),
            key: key.clone().map(Into::into),
            value: value.clone().into(),
            partition: a.partition,
            ..SendRecord::default()
        };
        // Stream in batches: up to 10,000 sends in flight.
        pending.push_back((producer.send_nowait(rec).await?, key, value));
        if pending.len() >= 10_000 {
            if let Some((f, k, v)) = pending.pop_front() {
                report(f.await.map_err(describe)?, &k, &v);
                sent += 1;
            }
        }
    }
    for (f, k, v) in pending {
        report(f.await.map_err(describe)?, &k, &v);
        sent += 1;
    }
    producer.close().await;
    if a.quiet {
        println!("{sent} records sent to {}", a.topic);
    }
    Ok(())
}

/// Turns a client error into a message that says what to do.
pub fn describe(e: flume_client::Error) -> anyhow::Error {
    match e.code() {
        Some(ErrorCode::UnknownTopic) => {
            anyhow::anyhow!("{e} (create the topic first, or run the broker with auto-create)")
        }
        Some(ErrorCode::QueueFull) => anyhow::anyhow!(
            "{e} (the broker is in reject mode and its partition queue is full; retry later)"
        ),
        _ => anyhow::Error::new(e),
    }
}

async fn consume(a: ConsumeArgs) -> Result<()> {
    let stop = interrupt()?;
    let max = a.max.unwrap_or(u64::MAX);
    let mut n = 0u64;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if let Some(group) = &a.group {
        let start = match a.offset {
            StartOffset::At(_) => bail!("--offset with --group must be earliest or latest (a group resumes from its commits)"),
            s => s,
        };
        let mut c = GroupConsumer::builder(&a.broker, group)
            .topic(&a.topic)
            .start(start)
            .session_timeout(std::time::Duration::from_millis(a.session_timeout_ms))
            .auto_commit(false)
            .build()
            .await
            .map_err(describe)
            .context("cannot join the group")?;
        while n < max {
            let next = futures::select! {
                r = futures::FutureExt::fuse(c.recv()) => r,
                _ = futures::FutureExt::fuse(stop.recv()) => None,
            };
            let Some(r) = next else { break };
            let r = r.map_err(describe)?;
            writeln!(out, "{}", record_line(a.format, r.partition, &r.record))?;
            // Each record reaches the reader at once: group mode runs until stopped.
            out.flush()?;
            n += 1;
            if let Err(e) = c.commit(&r).await {
                tracing::warn!(error = %e, "commit failed; the record may be delivered again");
            }
        }
        out.flush()?;
        c.close().await.context("leaving the group")?;
        return Ok(());
    }
    let partition = a.partition.unwrap_or(0);
    let client = Arc::new(
        Client::connect(&a.broker, ConnectionConfig::default())
            .await
            .context("cannot reach the broker")?,
    );
    let mut c = PartitionConsumer::with_client(
        client,
        &a.topic,
        partition,
        a.offset,
        flume_client::FetchConfig::default(),
    );
    'outer: while n < max {
        let batch = futures::select! {
            r = futures::FutureExt::fuse(c.poll_batch()) => r.map_err(describe)?,
            _ = futures::FutureExt::fuse(stop.recv()) => break,
        };
        for r in &batch {
            writeln!(out, "{}", record_line(a.format, partition, r))?;
            n += 1;
            if n >= max {
                break 'outer;
            }
        }
        out.flush()?;
        if !a.follow
            && c.position()
                .is_some_and(|p| i64::try_from(p).unwrap_or(i64::MAX) >= c.high_watermark())
        {
            break;
        }
    }
    out.flush()?;
    Ok(())
}

async fn topics(cmd: TopicsCommand) -> Result<()> {
    match cmd {
        TopicsCommand::List { broker } => {
            let admin = Admin::connect(&broker)
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
            broker,
        } => {
            let admin = Admin::connect(&broker)
                .await
                .context("cannot reach the broker")?;
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
            let admin = Admin::connect(&broker)
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
            println!("{:>9} {:>12} {:>12}", "PARTITION", "START", "END");
            for p in t.partitions {
                println!("{:>9} {:>12} {:>12}", p.partition, p.log_start, p.log_end);
            }
        }
    }
    Ok(())
}

async fn groups(cmd: GroupsCommand) -> Result<()> {
    let GroupsCommand::Lag {
        group,
        topic,
        broker,
    } = cmd;
    let admin = Admin::connect(&broker)
        .await
        .context("cannot reach the broker")?;
    let topics: Vec<String> = match topic {
        Some(t) => vec![t],
        None => admin
            .topics(&[])
            .await?
            .into_iter()
            .map(|t| t.name)
            .collect(),
    };
    let parts = admin.group_offsets(&group, &topics).await?;
    println!(
        "{:<24} {:>9} {:>12} {:>12} {:>10}",
        "TOPIC", "PARTITION", "COMMITTED", "END", "LAG"
    );
    for p in parts {
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

//! `flume-cli consume`: partitions of a topic, a group member's share of them, or the
//! records a share group (a queue) hands a member.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use flume_client::{
    lowlevel::Client, AckMode, AcknowledgeType, Admin, FetchConfig, GroupConsumer, GroupProtocol,
    PartitionConsumer, Record, ShareConsumer, StartOffset,
};
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;

use crate::args::consume::{ConsumeArgs, GroupProtocolArg};
use crate::common::{describe, interrupt};
use crate::output::record_line;

/// Without --follow, how long to keep retrying a broker that went away before giving up.
const RECONNECT_WITHOUT_FOLLOW: Duration = Duration::from_secs(10);

/// Why reading stopped, for the message on stderr.
enum Stop {
    Max,
    End,
    Idle,
    Interrupted,
}

pub async fn run(a: ConsumeArgs) -> Result<()> {
    if a.share_group.is_some() {
        share(a).await
    } else if a.group.is_some() {
        group(a).await
    } else {
        partitions(a).await
    }
}

/// One fetch of one partition, giving the consumer back for the next.
type Poll = BoxFuture<'static, (i32, PartitionConsumer, flume_client::Result<Vec<Record>>)>;

fn poll(partition: i32, mut c: PartitionConsumer) -> Poll {
    async move {
        let r = c.poll_batch().await;
        (partition, c, r)
    }
    .boxed()
}

fn idle_timer(timeout: Option<u64>) -> futures::future::Fuse<BoxFuture<'static, ()>> {
    match timeout {
        Some(ms) => flume_rt::sleep(Duration::from_millis(ms)).boxed().fuse(),
        None => futures::future::Fuse::terminated(),
    }
}

async fn partitions(a: ConsumeArgs) -> Result<()> {
    let stop = interrupt()?;
    let admin = Admin::connect_with(&a.at.broker.addr, a.at.broker.connection()?)
        .await
        .context("cannot reach the broker")?;
    let meta = admin
        .topics(std::slice::from_ref(&a.at.topic))
        .await
        .map_err(describe)?
        .into_iter()
        .next()
        .filter(|t| t.error.is_ok())
        .ok_or_else(|| anyhow::anyhow!("topic {} does not exist", a.at.topic))?;
    let mut chosen: Vec<_> = meta.partitions.clone();
    if let Some(p) = a.partition {
        chosen.retain(|m| m.partition == p);
        if chosen.is_empty() {
            bail!(
                "topic {} has no partition {p} (it has partitions 0 to {})",
                a.at.topic,
                meta.partitions.len().saturating_sub(1)
            );
        }
    }
    // Over Kafka each partition is read from its own leader, by its own consumer.
    let client = if a.at.broker.is_kafka() {
        None
    } else {
        Some(Arc::new(
            Client::connect(&a.at.broker.addr, a.at.broker.connection()?)
                .await
                .context("cannot reach the broker")?,
        ))
    };
    // --from-time: each partition's first offset at or after the time.
    let mut by_time: HashMap<i32, i64> = HashMap::new();
    if let Some(t) = a.from_time {
        let found = admin
            .list_offsets(
                chosen
                    .iter()
                    .map(|m| flume_client::ListOffsetsPartition {
                        topic: a.at.topic.clone(),
                        partition: m.partition,
                        timestamp: t.0,
                    })
                    .collect(),
            )
            .await
            .map_err(describe)?;
        for f in found {
            if !f.error.is_ok() {
                bail!(
                    "looking up partition {} of {} by time failed: {}",
                    f.partition,
                    a.at.topic,
                    f.error
                );
            }
            by_time.insert(f.partition, f.offset);
        }
    }
    drop(admin);
    let follow = a.follow;
    let fetch = FetchConfig::default();
    let mut polls: FuturesUnordered<Poll> = FuturesUnordered::new();
    for m in &chosen {
        let from = match by_time.get(&m.partition) {
            Some(&o) => StartOffset::At(u64::try_from(o).unwrap_or(0)),
            None => a.offset,
        };
        let start = match from {
            StartOffset::Earliest => m.log_start,
            StartOffset::Latest => m.log_end,
            StartOffset::At(o) => i64::try_from(o).unwrap_or(i64::MAX),
        };
        // Without --follow a partition already read to its end is not fetched at all.
        if !follow && start >= m.log_end {
            continue;
        }
        let consumer = match &client {
            Some(client) => PartitionConsumer::with_client(
                Arc::clone(client),
                &a.at.topic,
                m.partition,
                from,
                fetch.clone(),
            ),
            None => PartitionConsumer::connect_with(
                &a.at.broker.addr,
                &a.at.topic,
                m.partition,
                from,
                fetch.clone(),
                a.at.broker.connection()?,
            )
            .await
            .context("cannot reach the cluster")?,
        };
        polls.push(poll(m.partition, consumer));
    }
    let max = a.max.unwrap_or(u64::MAX);
    let mut n = 0u64;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut idle = idle_timer(a.timeout);
    let mut down_since: Option<Instant> = None;
    let mut why = Stop::End;
    while n < max {
        if polls.is_empty() {
            break;
        }
        let (partition, c, r) = futures::select! {
            r = polls.select_next_some() => r,
            _ = idle => { why = Stop::Idle; break; }
            _ = stop.recv().fuse() => { why = Stop::Interrupted; break; }
        };
        let batch = match r {
            Ok(b) => {
                if down_since.take().is_some() {
                    eprintln!("reconnected to the broker at {}", a.at.broker.addr);
                }
                b
            }
            Err(e) if e.is_retriable() => {
                // The broker went away (restart, crash): the client reconnects with backoff
                // on the next fetch. Without --follow, give up after a while.
                let since = *down_since.get_or_insert_with(|| {
                    eprintln!(
                        "lost the broker at {} ({e}); reconnecting",
                        a.at.broker.addr
                    );
                    Instant::now()
                });
                if !follow && a.timeout.is_none() && since.elapsed() > RECONNECT_WITHOUT_FOLLOW {
                    return Err(describe(e)).context(format!(
                        "the broker did not come back within {} s",
                        RECONNECT_WITHOUT_FOLLOW.as_secs()
                    ));
                }
                flume_rt::sleep(Duration::from_millis(100)).await;
                polls.push(poll(partition, c));
                continue;
            }
            Err(e) => return Err(describe(e)),
        };
        if !batch.is_empty() {
            idle = idle_timer(a.timeout);
        }
        for r in &batch {
            writeln!(out, "{}", record_line(a.format, partition, r))?;
            n += 1;
            if n >= max {
                why = Stop::Max;
                break;
            }
        }
        out.flush()?;
        let at_end = c
            .position()
            .is_some_and(|p| i64::try_from(p).unwrap_or(i64::MAX) >= c.high_watermark());
        if follow || !at_end {
            polls.push(poll(partition, c));
        }
    }
    out.flush()?;
    drop(polls);
    report_stop(&why, n, a.max);
    Ok(())
}

fn report_stop(why: &Stop, n: u64, max: Option<u64>) {
    match (why, max) {
        (Stop::End, Some(m)) if n < m => {
            eprintln!("reached the end after {n} records (fewer than --max {m})");
        }
        (Stop::Idle, _) => eprintln!("no record within --timeout; stopped after {n} records"),
        _ => {}
    }
}

async fn group(a: ConsumeArgs) -> Result<()> {
    let stop = interrupt()?;
    let Some(group) = a.group.clone() else {
        bail!("--group is required in group mode");
    };
    let start = match a.offset {
        StartOffset::At(_) => bail!(
            "--offset with --group must be earliest or latest (a group resumes from its commits)"
        ),
        s => s,
    };
    let stop_at_end = a.exit_at_end || (a.max.is_some() && !a.follow);
    // Committed on an interval and on exit, always after the printed records are flushed:
    // at-least-once, without a round trip per record.
    let mut builder = GroupConsumer::builder(&a.at.broker.addr, &group)
        .connection(a.at.broker.connection()?)
        .topic(&a.at.topic)
        .start(start)
        .session_timeout(Duration::from_millis(a.session_timeout_ms))
        .group_protocol(match a.group_protocol {
            Some(GroupProtocolArg::Consumer) => GroupProtocol::Consumer,
            Some(GroupProtocolArg::Classic) | None => GroupProtocol::Classic,
        })
        .auto_commit(false);
    if !a.follow && (stop_at_end || a.timeout.is_some()) {
        // A run that is to end gives up on a group it cannot join; a follower keeps trying.
        builder = builder.join_attempts(JOIN_ATTEMPTS_WITHOUT_FOLLOW);
    }
    let Some(built) = interruptible(&stop, builder.build()).await else {
        // Interrupted while joining: no record was read, nothing is to commit.
        return Ok(());
    };
    let mut c = built.map_err(describe).context("cannot join the group")?;
    let admin = match interruptible(
        &stop,
        Admin::connect_with(&a.at.broker.addr, a.at.broker.connection()?),
    )
    .await
    {
        Some(admin) => Some(admin.context("cannot reach the broker")?),
        None => None,
    };
    let mut n = 0u64;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let why = match &admin {
        Some(admin) => {
            let read = read_group(&mut c, admin, &a, &group, start, &mut out, &mut n);
            interruptible(&stop, read).await.transpose()?
        }
        None => None,
    };
    let why = why.unwrap_or(Stop::Interrupted);
    out.flush()?;
    // The last commit and the leave, best effort within a deadline (a shorter one
    // after an interrupt, which also cuts the longer one short).
    let closing = async {
        commit(&c).await;
        c.close().await
    };
    let interrupted = matches!(why, Stop::Interrupted);
    let grace = if interrupted {
        INTERRUPT_GRACE
    } else {
        CLOSE_GRACE
    };
    let interrupt_now = async {
        if interrupted {
            futures::future::pending::<()>().await;
        }
        let _ = stop.recv().await;
    };
    let closed = futures::select! {
        r = closing.fuse() => Some(r),
        () = flume_rt::sleep(grace).fuse() => None,
        () = interrupt_now.fuse() => None,
    };
    match closed {
        Some(r) => r.context("leaving the group")?,
        None => tracing::warn!(
            "the group's coordinator did not take the last commit and the leave within {} ms; \
             exiting without (the group drops this member after --session-timeout-ms)",
            grace.as_millis()
        ),
    }
    report_stop(&why, n, a.max);
    Ok(())
}

/// Without --follow, how many failed joins in a row end a group-mode run: the pauses
/// between them double from 100 ms to 2 s, so about 11 s in all.
const JOIN_ATTEMPTS_WITHOUT_FOLLOW: u32 = 10;

/// After an interrupt, how long the last commit and the leave may take.
const INTERRUPT_GRACE: Duration = Duration::from_millis(500);

/// At the end of a run (--max, the end, --timeout), how long the last commit and the leave
/// may take.
const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// `f`'s output, or `None` once `stop` closes (Ctrl-C, SIGTERM): `f` is dropped then.
async fn interruptible<T>(
    stop: &async_channel::Receiver<()>,
    f: impl std::future::Future<Output = T>,
) -> Option<T> {
    futures::pin_mut!(f);
    futures::select! {
        r = f.fuse() => Some(r),
        _ = stop.recv().fuse() => None,
    }
}

/// Prints the group's records until --max, the end (--exit-at-end) or --timeout.
async fn read_group(
    c: &mut GroupConsumer,
    admin: &Admin,
    a: &ConsumeArgs,
    group: &str,
    start: StartOffset,
    out: &mut impl Write,
    n: &mut u64,
) -> Result<Stop> {
    let max = a.max.unwrap_or(u64::MAX);
    let stop_at_end = a.exit_at_end || (a.max.is_some() && !a.follow);
    let commit_every = Duration::from_millis(a.commit_interval_ms);
    let mut last_commit = Instant::now();
    // Next offset per partition, from the records printed.
    let mut next: HashMap<i32, u64> = HashMap::new();
    let mut last_record = Instant::now();
    // Records printed since the last commit. A commit abandons a `next` left half-way (a
    // join waiting for the other members is sent again), so an idle tick commits only
    // when there is something to commit.
    let mut uncommitted = false;
    let tick = Duration::from_millis(100);
    while *n < max {
        // Take what is ready without waiting; before waiting, flush the output so a
        // follower sees every record. The stop conditions are looked at only after a
        // quiet tick: looking costs round trips and restarts the fetch under way.
        let r = match c.next().now_or_never() {
            Some(r) => r,
            None => {
                out.flush()?;
                futures::select! {
                    r = c.next().fuse() => r,
                    _ = flume_rt::sleep(tick).fuse() => {
                        if uncommitted && last_commit.elapsed() >= commit_every {
                            commit(c).await;
                            uncommitted = false;
                            last_commit = Instant::now();
                        }
                        if a
                            .timeout
                            .is_some_and(|ms| last_record.elapsed() >= Duration::from_millis(ms))
                        {
                            return Ok(Stop::Idle);
                        }
                        if stop_at_end && at_end(c, admin, group, &a.at.topic, start, &next).await? {
                            return Ok(Stop::End);
                        }
                        continue;
                    }
                }
            }
        };
        let Some(r) = r else { break };
        let r = r.map_err(describe)?;
        last_record = Instant::now();
        writeln!(out, "{}", record_line(a.format, r.partition, &r.record))?;
        next.insert(r.partition, r.record.offset + 1);
        *n += 1;
        uncommitted = true;
        if last_commit.elapsed() >= commit_every {
            out.flush()?;
            commit(c).await;
            uncommitted = false;
            last_commit = Instant::now();
        }
    }
    Ok(Stop::Max)
}

/// Commits every record printed so far (the caller has flushed them).
async fn commit(c: &GroupConsumer) {
    if let Err(e) = c.commit_processed().await {
        tracing::warn!(error = %e, "commit failed; records may be delivered again");
    }
}

/// True when every assigned partition has been read to its current end.
async fn at_end(
    c: &GroupConsumer,
    admin: &Admin,
    group: &str,
    topic: &str,
    start: StartOffset,
    next: &HashMap<i32, u64>,
) -> Result<bool> {
    let assigned = c.assignment().await;
    if assigned.is_empty() {
        // Not joined yet, or more members than partitions.
        return Ok(c.generation().await >= 0);
    }
    let offsets = admin
        .group_offsets(group, &[topic.to_owned()])
        .await
        .map_err(describe)?;
    for (_, p) in &assigned {
        let Some(o) = offsets.iter().find(|o| o.partition == *p) else {
            return Ok(false);
        };
        let pos = match next.get(p) {
            Some(&n) => i64::try_from(n).unwrap_or(i64::MAX),
            None if o.committed >= 0 => o.committed.max(o.log_start),
            None if start == StartOffset::Latest => o.log_end,
            None => o.log_start,
        };
        if pos < o.log_end {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Share mode: prints the records the share group hands this member, acknowledging each
/// once printed, until --max, --timeout or an interrupt; then sends the last
/// acknowledgements and leaves (within a grace period).
async fn share(a: ConsumeArgs) -> Result<()> {
    let stop = interrupt()?;
    let Some(group) = a.share_group.clone() else {
        bail!("--share-group is required in share mode");
    };
    let topics: Vec<String> =
        a.at.topic
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect();
    let ack = if a.release {
        AcknowledgeType::Release
    } else if a.reject {
        AcknowledgeType::Reject
    } else {
        AcknowledgeType::Accept
    };
    let max = a.max.unwrap_or(u64::MAX);
    let batch = |left: u64| usize::try_from(left.min(500)).unwrap_or(500);
    let builder = ShareConsumer::builder(&a.at.broker.addr, &group)
        .connection(a.at.broker.connection()?)
        .subscribe(topics)
        .ack_mode(AckMode::Explicit)
        .max_records(batch(max))
        .max_wait(Duration::from_millis(500));
    let Some(built) = interruptible(&stop, builder.build()).await else {
        return Ok(());
    };
    let mut c = built
        .map_err(describe)
        .context("cannot join the share group")?;
    let mut n = 0u64;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut last_record = Instant::now();
    let mut why = Stop::Max;
    while n < max {
        c.set_max_records(batch(max - n));
        let Some(got) = interruptible(&stop, c.poll()).await else {
            why = Stop::Interrupted;
            break;
        };
        let got = got.map_err(describe)?;
        if got.is_empty() {
            if a.timeout
                .is_some_and(|ms| last_record.elapsed() >= Duration::from_millis(ms))
            {
                why = Stop::Idle;
                break;
            }
            continue;
        }
        last_record = Instant::now();
        let mut printed = Vec::with_capacity(got.len());
        for r in &got {
            if n >= max {
                // Not printed: another member (or the next run) gets it.
                r.release();
                continue;
            }
            writeln!(out, "{}", record_line(a.format, r.partition, &r.record))?;
            printed.push(r);
            n += 1;
        }
        // Acknowledged only once on stdout (at-least-once), and sent at once, so an
        // interrupt while the next poll waits loses none.
        out.flush()?;
        for r in printed {
            r.acknowledge(ack);
        }
        for o in c.commit().await.map_err(describe)? {
            if !o.error.is_ok() {
                tracing::warn!(
                    topic = %o.topic, partition = o.partition, offset = o.offset, error = %o.error,
                    "acknowledgement refused (the record's lock ran out: it is delivered again)"
                );
            }
        }
    }
    out.flush()?;
    let interrupted = matches!(why, Stop::Interrupted);
    let grace = if interrupted {
        INTERRUPT_GRACE
    } else {
        CLOSE_GRACE
    };
    let interrupt_now = async {
        if interrupted {
            futures::future::pending::<()>().await;
        }
        let _ = stop.recv().await;
    };
    let closed = futures::select! {
        r = c.close().fuse() => Some(r),
        () = flume_rt::sleep(grace).fuse() => None,
        () = interrupt_now.fuse() => None,
    };
    match closed {
        Some(r) => r.map_err(describe).context("leaving the share group")?,
        None => tracing::warn!(
            "the broker did not take the last acknowledgements and the leave within {} ms; \
             the records held come back when their locks run out",
            grace.as_millis()
        ),
    }
    report_stop(&why, n, a.max);
    Ok(())
}

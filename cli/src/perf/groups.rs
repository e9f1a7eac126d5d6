//! `flume-cli perf groups`: many consumer groups on one broker.
//!
//! Starts `--groups` x `--members` real [`GroupConsumer`]s in this process
//! (one connection each, all on one executor), every group subscribed to the
//! same topic, and waits until every group is stable with every partition
//! assigned. Then, while they all run:
//! - idle: the broker's CPU (utime + stime from `/proc/<pid>/stat`, so the
//!   broker must run on this machine and `--broker-pid` name it) over
//!   `--idle-secs`, its RSS and open descriptors, and this process's CPU;
//! - rebalances: in one group at a time, one member leaves (LEAVE_GROUP) and a
//!   new one joins; the time until that group is stable again with every
//!   partition assigned;
//! - all along, a probe member of a group of its own sends a plain HEARTBEAT
//!   every `--probe-ms` and times its round trip: the p50/p99 while idle and
//!   during the rebalances (and the 100 ms after each) show whether one group's rebalance slows the
//!   others' heartbeats; and whether any other group rebalanced meanwhile.

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use flume_client::{
    lowlevel::Client, Admin, ConnectionConfig, FetchConfig, GroupConsumer, RebalanceEvent,
};
use flume_protocol::{CreateTopicRequest, ErrorCode, HeartbeatRequest, JoinGroupRequest};
use futures::{FutureExt, StreamExt};
use serde_json::json;

use super::common::percentile;
use crate::args::perf::GroupsArgs;
use crate::common::describe;

/// What one member last saw; a slot is taken over by the member that
/// replaces its holder.
struct Slot {
    /// Generation of its last assignment (-1: none, or left).
    generation: AtomicI32,
    /// Partitions in that assignment.
    partitions: AtomicU32,
}

impl Slot {
    fn new() -> Self {
        Slot {
            generation: AtomicI32::new(-1),
            partitions: AtomicU32::new(0),
        }
    }
}

/// Every member's slot, `members` per group, and what went wrong.
struct Table {
    slots: Vec<Slot>,
    members: usize,
    partitions: u32,
    errors: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl Table {
    fn group(&self, g: usize) -> &[Slot] {
        let start = g * self.members;
        &self.slots[start..start + self.members]
    }

    /// The generation a group is stable at: every member on it, every
    /// partition assigned once.
    fn stable(&self, g: usize) -> Option<i32> {
        let slots = self.group(g);
        let generation = slots.first()?.generation.load(Ordering::Acquire);
        if generation <= 0 {
            return None;
        }
        let mut sum = 0u32;
        for s in slots {
            if s.generation.load(Ordering::Acquire) != generation {
                return None;
            }
            sum += s.partitions.load(Ordering::Acquire);
        }
        (sum == self.partitions).then_some(generation)
    }

    fn error(&self, e: impl std::fmt::Display) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        *self
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e.to_string());
    }
}

/// A running member: `stop` closes it (LEAVE_GROUP).
struct Running {
    stop: async_channel::Sender<()>,
    task: flume_rt::Task<()>,
}

/// What every member is built with.
#[derive(Clone)]
struct Spawner {
    addr: String,
    topic: String,
    conn: ConnectionConfig,
    fetch_wait: Duration,
    table: Arc<Table>,
    /// Join permits: one taken from the channel and put back after the join.
    permits: (async_channel::Sender<()>, async_channel::Receiver<()>),
}

/// Builds a member of `group` (once a join permit is free) and runs it until
/// told to stop: `next()` in a loop, its assignments noted in slot `slot`.
fn spawn_member(sp: &Spawner, group: String, slot: usize) -> Running {
    let Spawner {
        addr,
        topic,
        conn,
        fetch_wait,
        table,
        permits,
    } = sp.clone();
    let (stop, stop_rx) = async_channel::bounded::<()>(1);
    let task = flume_rt::spawn(async move {
        let built = {
            // A permit is a message taken from the channel and put back after the join.
            let Ok(()) = permits.1.recv().await else {
                return;
            };
            let mut attempt = 0;
            loop {
                let r = GroupConsumer::builder(&addr, &group)
                    .topic(&topic)
                    .connection(conn.clone())
                    .fetch_config(FetchConfig::default().max_wait(fetch_wait))
                    .build()
                    .await;
                match r {
                    Ok(c) => break Some(c),
                    Err(e) => {
                        table.error(format_args!("join {group}: {e}"));
                        attempt += 1;
                        if attempt >= 5 {
                            break None;
                        }
                        flume_rt::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        };
        let _ = permits.0.try_send(());
        let Some(mut c) = built else { return };
        let mut events = c.events().fuse();
        let s = &table.slots[slot];
        loop {
            futures::select! {
                r = c.next().fuse() => match r {
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        table.error(format_args!("member of {group}: {e}"));
                        flume_rt::sleep(Duration::from_millis(100)).await;
                    }
                    None => return,
                },
                ev = events.next() => {
                    if let Some(RebalanceEvent::Assigned { generation, partitions }) = ev {
                        s.partitions.store(u32::try_from(partitions.len()).unwrap_or(u32::MAX), Ordering::Release);
                        s.generation.store(generation, Ordering::Release);
                    }
                }
                _ = stop_rx.recv().fuse() => {
                    s.generation.store(-1, Ordering::Release);
                    s.partitions.store(0, Ordering::Release);
                    if let Err(e) = c.close().await {
                        table.error(format_args!("close in {group}: {e}"));
                    }
                    return;
                }
            }
        }
    });
    Running { stop, task }
}

/// Heartbeat round trips of the probe: (when, in µs since `start`; round trip µs).
type Probes = Arc<Mutex<Vec<(u64, u64)>>>;

/// Most probe samples kept (about 28 hours at one per 10 ms... bounded anyway).
const MAX_PROBES: usize = 1 << 20;

/// A member of a group of its own that sends plain HEARTBEATs every `every`
/// and records each round trip; rejoins when told to.
async fn probe(
    client: Client,
    group: String,
    topic: String,
    every: Duration,
    start: Instant,
    out: Probes,
) -> Result<()> {
    let join = |member_id: String| JoinGroupRequest {
        group: group.clone(),
        member_id,
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        assignor: String::new(),
        topics: vec![topic.clone()],
    };
    let mut joined = client.call(&join(String::new())).await?;
    loop {
        let req = HeartbeatRequest {
            group: group.clone(),
            generation: joined.generation,
            member_id: joined.member_id.clone(),
        };
        let t = Instant::now();
        let r = client.call(&req).await;
        let rtt = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
        let at = u64::try_from(t.duration_since(start).as_micros()).unwrap_or(u64::MAX);
        match r {
            Ok(_) => {
                let mut v = out
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if v.len() < MAX_PROBES {
                    v.push((at, rtt));
                }
            }
            Err(e)
                if matches!(
                    e.code(),
                    Some(ErrorCode::RebalanceInProgress | ErrorCode::IllegalGeneration)
                ) =>
            {
                joined = client.call(&join(joined.member_id.clone())).await?;
            }
            Err(e) if e.code() == Some(ErrorCode::UnknownMember) => {
                joined = client.call(&join(String::new())).await?;
            }
            Err(e) => return Err(e.into()),
        }
        flume_rt::sleep(every).await;
    }
}

/// p50, p99 and max (ms) of the probe round trips taken in `[from, to)` (µs since start).
fn window(probes: &Probes, from: u64, to: u64) -> (usize, f64, f64, f64) {
    let v = probes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut rtts: Vec<u64> = v
        .iter()
        .filter(|(at, _)| (from..to).contains(at))
        .map(|(_, r)| *r)
        .collect();
    rtts.sort_unstable();
    let max = rtts.last().map_or(0.0, |m| *m as f64 / 1000.0);
    (
        rtts.len(),
        percentile(&rtts, 0.5),
        percentile(&rtts, 0.99),
        max,
    )
}

/// Figures of a process from /proc (Linux).
struct ProcStat {
    pid: String,
}

impl ProcStat {
    /// CPU time (utime + stime) in clock ticks.
    fn ticks(&self) -> Option<u64> {
        let s = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
        // Fields after the command name (which may hold spaces): state is field 3.
        let rest = s.get(s.rfind(')')? + 2..)?;
        let f: Vec<&str> = rest.split_whitespace().collect();
        Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
    }

    fn rss_kb(&self) -> Option<u64> {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    }

    fn fds(&self) -> Option<usize> {
        Some(
            std::fs::read_dir(format!("/proc/{}/fd", self.pid))
                .ok()?
                .count(),
        )
    }
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux if that fails).
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .unwrap_or(100.0)
}

/// How long to wait between looks at the table.
const LOOK: Duration = Duration::from_millis(1);

pub async fn run(a: GroupsArgs) -> Result<()> {
    let groups = usize::try_from(a.groups)?;
    let members = usize::try_from(a.members)?;
    let partitions = u32::try_from(a.topic_partitions)?;
    let conn = a.broker.connection()?;
    let admin = Admin::connect_with(&a.broker.addr, conn.clone())
        .await
        .context("cannot reach the broker")?;
    ensure_topic(&a, &admin, partitions).await?;
    let broker = a.broker_pid.map(|p| ProcStat { pid: p.to_string() });
    let table = Arc::new(Table {
        slots: (0..groups * members).map(|_| Slot::new()).collect(),
        members,
        partitions,
        errors: AtomicU64::new(0),
        last_error: Mutex::new(None),
    });
    let fetch_wait = a
        .fetch_wait_ms
        .map_or(flume_client::DEFAULT_FETCH_WAIT, Duration::from_millis);
    let permits = async_channel::bounded(usize::try_from(a.join_concurrency)?);
    for _ in 0..a.join_concurrency {
        let _ = permits.0.try_send(());
    }
    let spawner = Spawner {
        addr: a.broker.addr.clone(),
        topic: a.topic.clone(),
        conn: conn.clone(),
        fetch_wait,
        table: Arc::clone(&table),
        permits,
    };
    let start = Instant::now();
    let (mut running, settled) = settle(&a, &spawner, start).await?;

    // The probe, in a group of its own.
    let probes: Probes = Arc::default();
    let probe_task = flume_rt::spawn(probe(
        Client::connect(&a.broker.addr, conn.clone())
            .await
            .context("probe connection")?,
        format!("{}-probe", a.group_prefix),
        a.topic.clone(),
        Duration::from_millis(a.probe_ms),
        start,
        Arc::clone(&probes),
    ));
    // Let the probe's group settle before the quiet window.
    flume_rt::sleep(Duration::from_millis(500)).await;

    let idle = idle(&a, &table, broker.as_ref(), &probes, start).await;
    print_idle(&a, &idle, fetch_wait, settled);
    let rebalanced = rebalances(&a, &spawner, &mut running, &probes, start).await?;
    let probe_state = probe_task.cancel().await;
    if let Some(Err(e)) = probe_state {
        eprintln!("note: the probe stopped: {e:#}");
    }
    report(&a, &table, &idle, &rebalanced, fetch_wait, settled);
    // Members are dropped with the process: their sessions expire at the broker.
    drop(running);
    Ok(())
}

/// Creates the topic with --topic-partitions, or checks the one there has as many.
async fn ensure_topic(a: &GroupsArgs, admin: &Admin, partitions: u32) -> Result<()> {
    match admin
        .create_topic(CreateTopicRequest {
            name: a.topic.clone(),
            partitions: i32::try_from(partitions)?,
            ..CreateTopicRequest::default()
        })
        .await
    {
        Ok(()) => {}
        Err(e) if e.code() == Some(ErrorCode::TopicAlreadyExists) => {
            let t = admin.topics(std::slice::from_ref(&a.topic)).await?;
            let have = t.first().map_or(0, |t| t.partitions.len());
            if have != partitions as usize {
                bail!(
                    "topic {} exists with {have} partitions, not --topic-partitions {partitions}",
                    a.topic
                );
            }
        }
        Err(e) => return Err(describe(e)),
    }
    Ok(())
}

/// The name of group `g`.
fn group_name(a: &GroupsArgs, g: usize) -> String {
    format!("{}-{g}", a.group_prefix)
}

/// Starts every member, group by group, and waits (up to --settle-secs)
/// until every group is stable: the members, and how long that took.
async fn settle(
    a: &GroupsArgs,
    spawner: &Spawner,
    start: Instant,
) -> Result<(Vec<Running>, Duration)> {
    let table = &spawner.table;
    let (groups, members) = (table.slots.len() / table.members, table.members);
    // Group by group, so that a group's members join together.
    let mut running: Vec<Running> = Vec::with_capacity(groups * members);
    for g in 0..groups {
        for m in 0..members {
            running.push(spawn_member(spawner, group_name(a, g), g * members + m));
        }
    }
    let total = groups * members;
    eprintln!("starting {total} members in {groups} groups ...");
    let deadline = start + Duration::from_secs(a.settle_secs);
    let mut last_report = Instant::now();
    loop {
        let stable = (0..groups).filter(|&g| table.stable(g).is_some()).count();
        if stable == groups {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "after {} s only {stable} of {groups} groups are stable ({} errors, last: {})",
                a.settle_secs,
                table.errors.load(Ordering::Relaxed),
                last_error(table)
            );
        }
        if last_report.elapsed() >= Duration::from_secs(5) {
            last_report = Instant::now();
            eprintln!(
                "progress: {stable}/{groups} groups stable after {:.0} s",
                start.elapsed().as_secs_f64()
            );
        }
        flume_rt::sleep(Duration::from_millis(50)).await;
    }
    let settled = start.elapsed();
    eprintln!(
        "all {groups} groups stable after {:.1} s; idle for {} s ...",
        settled.as_secs_f64(),
        a.idle_secs
    );
    Ok((running, settled))
}

/// What the idle window measured.
struct Idle {
    /// Its length (s).
    secs: f64,
    /// The broker's CPU and this process's, in % of a core.
    broker_cpu: Option<f64>,
    client_cpu: Option<f64>,
    /// Groups whose generation changed meanwhile.
    changed: usize,
    /// The probe's round trips: (samples, p50, p99, max) in ms.
    probe: (usize, f64, f64, f64),
    rss_kb: Option<u64>,
    fds: Option<usize>,
}

/// Every group idles for --idle-secs: the broker's CPU, RSS and
/// descriptors, this process's CPU, the probe's round trips.
async fn idle(
    a: &GroupsArgs,
    table: &Table,
    broker: Option<&ProcStat>,
    probes: &Probes,
    start: Instant,
) -> Idle {
    let groups = table.slots.len() / table.members;
    let me = ProcStat { pid: "self".into() };
    let hz = clock_ticks();
    let gens: Vec<Option<i32>> = (0..groups).map(|g| table.stable(g)).collect();
    let (b0, m0, t0) = (broker.and_then(ProcStat::ticks), me.ticks(), Instant::now());
    flume_rt::sleep(Duration::from_secs(a.idle_secs)).await;
    let (b1, m1, t1) = (broker.and_then(ProcStat::ticks), me.ticks(), Instant::now());
    let secs = t1.duration_since(t0).as_secs_f64();
    let pct = |x: Option<u64>, y: Option<u64>| match (x, y) {
        (Some(x), Some(y)) => Some(100.0 * y.saturating_sub(x) as f64 / hz / secs),
        _ => None,
    };
    Idle {
        secs,
        broker_cpu: pct(b0, b1),
        client_cpu: pct(m0, m1),
        changed: (0..groups).filter(|&g| table.stable(g) != gens[g]).count(),
        probe: window(probes, since(start, t0), since(start, t1)),
        rss_kb: broker.and_then(ProcStat::rss_kb),
        fds: broker.and_then(ProcStat::fds),
    }
}

/// µs from `start` to `t`.
fn since(start: Instant, t: Instant) -> u64 {
    u64::try_from(t.duration_since(start).as_micros()).unwrap_or(0)
}

/// The idle line.
fn print_idle(a: &GroupsArgs, idle: &Idle, fetch_wait: Duration, settled: Duration) {
    let (groups, members) = (a.groups, a.members);
    let total = groups * members;
    let partitions = a.topic_partitions;
    let Idle {
        secs,
        broker_cpu,
        client_cpu,
        changed: idle_changed,
        probe: idle_probe,
        rss_kb,
        fds,
    } = *idle;
    let fmt_pct =
        |p: Option<f64>| p.map_or("n/a (no --broker-pid)".into(), |p| format!("{p:.1} %"));
    println!(
        "idle, {total} members in {groups} groups x {members}, topic of {partitions} partitions, fetch wait {} ms: \
         broker CPU {} of a core over {secs:.0} s, RSS {} MB, {} fds; this process {}; \
         probe heartbeat round trip p50 {:.2} ms p99 {:.2} ms max {:.2} ms ({} samples); \
         groups that rebalanced meanwhile: {idle_changed}; joined in {:.1} s",
        fetch_wait.as_millis(),
        fmt_pct(broker_cpu),
        rss_kb.map_or("n/a".into(), |k| (k / 1024).to_string()),
        fds.map_or("n/a".into(), |f| f.to_string()),
        fmt_pct(client_cpu).replace(" (no --broker-pid)", ""),
        idle_probe.1,
        idle_probe.2,
        idle_probe.3,
        idle_probe.0,
        settled.as_secs_f64(),
    );
}

/// What the rebalances measured.
struct Rebalanced {
    /// Each one's time to stable (µs), sorted.
    sorted: Vec<u64>,
    /// Other groups that rebalanced meanwhile, over all runs.
    others_changed: usize,
    /// The probe's round trips during them: (samples, p50, p99, max) in ms.
    during: (usize, f64, f64, f64),
}

/// --rebalances rebalances, one group at a time while all run: a member
/// leaves and a new one joins; each timed until its group is stable again.
async fn rebalances(
    a: &GroupsArgs,
    spawner: &Spawner,
    running: &mut [Running],
    probes: &Probes,
    start: Instant,
) -> Result<Rebalanced> {
    let table = &spawner.table;
    let (groups, members) = (table.slots.len() / table.members, table.members);
    let since = |t: Instant| since(start, t);
    let mut times = Vec::new();
    let mut others_changed = 0usize;
    let (mut reb_from, mut reb_to) = (Vec::new(), Vec::new());
    for r in 0..usize::try_from(a.rebalances)? {
        let g = (r * groups / usize::try_from(a.rebalances)?.max(1)) % groups;
        let before: Vec<Option<i32>> = (0..groups).map(|g| table.stable(g)).collect();
        let Some(old) = before[g] else {
            bail!(
                "group {} is not stable before its rebalance",
                group_name(a, g)
            );
        };
        let slot = g * members;
        let leaver = std::mem::replace(
            &mut running[slot],
            spawn_member(spawner, group_name(a, g), slot),
        );
        let t0 = Instant::now();
        // The newcomer joins now (it has a permit waiting); the leaver leaves now.
        let _ = leaver.stop.try_send(());
        let deadline = t0 + Duration::from_secs(60);
        let done = loop {
            if table.stable(g).is_some_and(|n| n > old) {
                break Instant::now();
            }
            if Instant::now() > deadline {
                bail!(
                    "group {} was not stable again within 60 s",
                    group_name(a, g)
                );
            }
            flume_rt::sleep(LOOK).await;
        };
        leaver.task.await;
        let took = done.duration_since(t0);
        let changed = (0..groups)
            .filter(|&o| o != g && table.stable(o) != before[o])
            .count();
        others_changed += changed;
        eprintln!(
            "rebalance {r} (group {}): stable again after {:.1} ms, other groups that rebalanced: {changed}",
            group_name(a, g),
            took.as_secs_f64() * 1000.0
        );
        times.push(u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
        // The probe's window: the rebalance and the 100 ms after it (a rebalance of a
        // few ms would hold one sample or none).
        reb_from.push(since(t0));
        reb_to.push(since(done) + 100_000);
        // A quiet moment between rebalances, past the window.
        flume_rt::sleep(Duration::from_millis(300)).await;
    }
    let during = {
        let v = probes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut rtts: Vec<u64> = v
            .iter()
            .filter(|(at, _)| {
                reb_from
                    .iter()
                    .zip(&reb_to)
                    .any(|(f, t)| (*f..=*t).contains(at))
            })
            .map(|(_, r)| *r)
            .collect();
        rtts.sort_unstable();
        (
            rtts.len(),
            percentile(&rtts, 0.5),
            percentile(&rtts, 0.99),
            rtts.last().map_or(0.0, |m| *m as f64 / 1000.0),
        )
    };
    let mut sorted = times;
    sorted.sort_unstable();
    Ok(Rebalanced {
        sorted,
        others_changed,
        during,
    })
}

/// The rebalance line, a note of the members' errors, and with --json the
/// whole summary.
fn report(
    a: &GroupsArgs,
    table: &Table,
    idle: &Idle,
    rebalanced: &Rebalanced,
    fetch_wait: Duration,
    settled: Duration,
) {
    let (groups, members) = (table.slots.len() / table.members, table.members);
    let total = groups * members;
    let partitions = table.partitions;
    let Rebalanced {
        sorted,
        others_changed,
        during,
    } = rebalanced;
    let (others_changed, during) = (*others_changed, *during);
    let Idle {
        secs,
        broker_cpu,
        client_cpu,
        changed: idle_changed,
        probe: idle_probe,
        rss_kb,
        fds,
    } = *idle;
    if !sorted.is_empty() {
        println!(
            "rebalance of one group (a member leaves, one joins) while all run, {} runs: \
             median {:.1} ms, max {:.1} ms; probe heartbeat during them (and 100 ms after) p50 {:.2} ms p99 {:.2} ms max {:.2} ms ({} samples); \
             other groups that rebalanced: {others_changed}",
            sorted.len(),
            percentile(sorted, 0.5),
            percentile(sorted, 1.0),
            during.1,
            during.2,
            during.3,
            during.0,
        );
    }
    let errors = table.errors.load(Ordering::Relaxed);
    if errors > 0 {
        eprintln!(
            "note: {errors} member errors (joins retried, fetches); last: {}",
            last_error(table)
        );
    }
    if a.summary.json {
        println!(
            "{}",
            json!({
                "groups": groups,
                "members_per_group": members,
                "members": total,
                "topic_partitions": partitions,
                "fetch_wait_ms": u64::try_from(fetch_wait.as_millis()).unwrap_or(u64::MAX),
                "joined_s": settled.as_secs_f64(),
                "idle_s": secs,
                "broker_cpu_pct": broker_cpu,
                "client_cpu_pct": client_cpu,
                "broker_rss_kb": rss_kb,
                "broker_fds": fds,
                "idle_groups_rebalanced": idle_changed,
                "idle_probe_ms": {"samples": idle_probe.0, "p50": idle_probe.1, "p99": idle_probe.2, "max": idle_probe.3},
                "rebalance_ms": {
                    "runs": sorted.len(),
                    "median": percentile(sorted, 0.5),
                    "max": percentile(sorted, 1.0),
                },
                "rebalance_probe_ms": {"samples": during.0, "p50": during.1, "p99": during.2, "max": during.3},
                "rebalance_other_groups_rebalanced": others_changed,
                "member_errors": errors,
            })
        );
    }
}

fn last_error(t: &Table) -> String {
    t.last_error
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
        .unwrap_or_else(|| "none".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(members: usize, partitions: u32) -> Table {
        Table {
            slots: (0..2 * members).map(|_| Slot::new()).collect(),
            members,
            partitions,
            errors: AtomicU64::new(0),
            last_error: Mutex::new(None),
        }
    }

    fn set(t: &Table, slot: usize, generation: i32, partitions: u32) {
        t.slots[slot]
            .generation
            .store(generation, Ordering::Release);
        t.slots[slot]
            .partitions
            .store(partitions, Ordering::Release);
    }

    #[test]
    fn a_group_is_stable_when_all_share_a_generation_and_every_partition_is_assigned() {
        let t = table(3, 4);
        assert_eq!(t.stable(0), None, "nobody joined yet");
        set(&t, 0, 2, 2);
        set(&t, 1, 2, 1);
        set(&t, 2, 1, 1);
        assert_eq!(t.stable(0), None, "one member is a generation behind");
        set(&t, 2, 2, 0);
        assert_eq!(t.stable(0), None, "a partition is unassigned");
        set(&t, 2, 2, 1);
        assert_eq!(t.stable(0), Some(2));
        assert_eq!(t.stable(1), None, "the other group is its own");
        set(&t, 1, -1, 0);
        assert_eq!(t.stable(0), None, "a member left");
    }

    #[test]
    fn proc_stat_reads_this_process() {
        let me = ProcStat { pid: "self".into() };
        if std::path::Path::new("/proc/self/stat").exists() {
            assert!(me.ticks().is_some());
            assert!(me.rss_kb().is_some_and(|k| k > 0));
            assert!(me.fds().is_some_and(|n| n > 0));
        }
    }
}

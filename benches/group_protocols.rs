//! Kafka's two group protocols side by side on Flume's Kafka listener, with
//! the SDK's `GroupConsumer` over `kafka://` (issue #43): the classic
//! protocol (JoinGroup/SyncGroup, the leader member assigns; its default
//! assignor) against the consumer protocol (KIP-848: ConsumerGroupHeartbeat,
//! the broker assigns, `uniform`).
//!
//! For a group of N members on a topic of 2N partitions:
//! - **settle from empty**: all N start at once; the time until every
//!   member owns partitions, no partition has two owners and none is
//!   unowned (each member's view: its `Assigned` events less its `Revoked`);
//! - **after a leave**: one member closes (a clean leave); the time until
//!   the N-1 others own every partition between them again;
//! - **idle CPU**: with the group settled and nothing produced, the
//!   broker's CPU (its threads' time on a CPU, from /proc) over a window
//!   that starts 6 s after the group settled (past the fast heartbeats that
//!   follow a change), less the broker's CPU over as long a window before
//!   the group formed, per member per second. Needs the broker in its own process: with
//!   `--bootstrap HOST:PORT --broker-pid PID` (benches/group-protocols.sh
//!   starts one); in-process (the default) the CPU figure is left out.
//!
//! ```text
//! cargo bench --bench group_protocols -- [--members 10,100] [--protocols classic,consumer]
//!     [--runs N] [--idle-s S] [--bootstrap HOST:PORT --broker-pid PID]
//! ```
//! Prints one JSON line per (protocol, members, run).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use flume_broker::{Broker, BrokerConfig};
use flume_client::{Admin, CreateTopicRequest, GroupConsumer, GroupProtocol, RebalanceEvent};
use flume_rt as rt;
use futures::{FutureExt, StreamExt};

/// What each member owns now, by member index.
type Owned = Arc<Mutex<BTreeMap<usize, BTreeSet<i32>>>>;

struct Member {
    stop: async_channel::Sender<()>,
    task: rt::Task<()>,
}

fn spawn_member(i: usize, mut c: GroupConsumer, owned: Owned) -> Member {
    let (stop, stop_rx) = async_channel::bounded::<()>(1);
    let mut events = c.events().fuse();
    let task = rt::spawn(async move {
        loop {
            futures::select! {
                _ = c.next().fuse() => {}
                ev = events.next() => {
                    let mut o = owned.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    let mine = o.entry(i).or_default();
                    match ev {
                        Some(RebalanceEvent::Assigned { partitions, .. }) => {
                            *mine = partitions.iter().map(|tp| tp.1).collect();
                        }
                        Some(RebalanceEvent::Revoked(ps)) => {
                            for tp in ps {
                                mine.remove(&tp.1);
                            }
                        }
                        None => {}
                    }
                }
                _ = stop_rx.recv().fuse() => {
                    let _ = c.close().await;
                    owned.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&i);
                    return;
                }
            }
        }
    });
    Member { stop, task }
}

/// True when `members` (by index) own every partition of `partitions` once
/// between them, each owning at least one.
fn settled(owned: &Owned, members: &[usize], partitions: i32) -> bool {
    let o = owned
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut seen = BTreeSet::new();
    for m in members {
        let Some(ps) = o.get(m) else {
            return false;
        };
        if ps.is_empty() {
            return false;
        }
        for p in ps {
            if !seen.insert(*p) {
                return false;
            }
        }
    }
    seen.len() == usize::try_from(partitions).unwrap_or(0)
        && o.keys().all(|k| members.contains(k) || o[k].is_empty())
}

async fn wait_settled(owned: &Owned, members: &[usize], partitions: i32, what: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(180);
    while !settled(owned, members, partitions) {
        if Instant::now() > deadline {
            bail!("{what}: not settled in 180 s");
        }
        rt::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

/// The broker's CPU time so far: the sum over its threads of the time on
/// a CPU (/proc/PID/task/*/schedstat, nanoseconds; /proc/PID/stat counts
/// in 10 ms ticks, too coarse for an idle window).
fn cpu_of(pid: u32) -> Result<Duration> {
    let mut ns = 0u64;
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let Ok(stat) = std::fs::read_to_string(t?.path().join("schedstat")) else {
            continue; // a thread that ended
        };
        ns += stat
            .split_whitespace()
            .next()
            .context("schedstat")?
            .parse::<u64>()?;
    }
    Ok(Duration::from_nanos(ns))
}

struct RunResult {
    settle: Duration,
    after_leave: Duration,
    idle_cpu_us_per_member_s: Option<f64>,
}

async fn one_run(
    kafka: &str,
    protocol: GroupProtocol,
    n: usize,
    run: usize,
    idle: Duration,
    broker_pid: Option<u32>,
) -> Result<RunResult> {
    let partitions = i32::try_from(2 * n)?;
    let tag = format!("{}-{n}-{run}-{}", name(protocol), std::process::id());
    let topic = format!("gp-{tag}");
    let group = format!("gp-{tag}");
    let admin = Admin::connect(&format!("kafka://{kafka}")).await?;
    admin
        .create_topic(CreateTopicRequest {
            name: topic.clone(),
            partitions,
            retention_bytes: -1,
            retention_ms: -1,
            segment_bytes: -1,
            max_pending: -1,
            backpressure: -1,
        })
        .await
        .context("create the topic")?;
    admin.close().await;
    // The broker's own idle CPU (timers, sampling), without the group: taken
    // off the figure below, which is then the members' alone.
    let baseline = match broker_pid {
        Some(pid) if !idle.is_zero() => {
            let before = cpu_of(pid)?;
            rt::sleep(idle).await;
            Some(cpu_of(pid)?.saturating_sub(before))
        }
        _ => None,
    };
    let owned: Owned = Arc::default();
    let t0 = Instant::now();
    let builds = (0..n).map(|_| {
        GroupConsumer::builder(&format!("kafka://{kafka}"), &group)
            .topic(&topic)
            .group_protocol(protocol)
            .auto_commit(false)
            .build()
    });
    let consumers = futures::future::try_join_all(builds)
        .await
        .context("join")?;
    let mut members: Vec<Member> = consumers
        .into_iter()
        .enumerate()
        .map(|(i, c)| spawn_member(i, c, Arc::clone(&owned)))
        .collect();
    let all: Vec<usize> = (0..n).collect();
    wait_settled(&owned, &all, partitions, "from empty").await?;
    let settle = t0.elapsed();

    let idle_cpu = match broker_pid {
        Some(pid) if !idle.is_zero() => {
            // Past the fast heartbeats that follow a change (one interval,
            // 5 s by default): the group as it idles for hours.
            rt::sleep(Duration::from_secs(6)).await;
            let before = cpu_of(pid)?;
            rt::sleep(idle).await;
            let used = cpu_of(pid)?
                .saturating_sub(before)
                .saturating_sub(baseline.unwrap_or_default());
            #[allow(clippy::cast_precision_loss)] // ok: a figure
            Some(used.as_micros() as f64 / n as f64 / idle.as_secs_f64())
        }
        _ => None,
    };

    let leaver = members.remove(0);
    let t1 = Instant::now();
    leaver.stop.send(()).await.ok();
    let rest: Vec<usize> = (1..n).collect();
    wait_settled(&owned, &rest, partitions, "after a leave").await?;
    let after_leave = t1.elapsed();
    leaver.task.await;
    for m in &members {
        m.stop.send(()).await.ok();
    }
    for m in members {
        m.task.await;
    }
    Ok(RunResult {
        settle,
        after_leave,
        idle_cpu_us_per_member_s: idle_cpu,
    })
}

fn name(p: GroupProtocol) -> &'static str {
    match p {
        GroupProtocol::Classic => "classic",
        GroupProtocol::Consumer => "consumer",
    }
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut sizes = vec![10usize, 100];
    let mut protocols = vec![GroupProtocol::Classic, GroupProtocol::Consumer];
    let (mut runs, mut idle_s, mut bootstrap, mut pid) =
        (1usize, 10u64, None::<String>, None::<u32>);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--members" => {
                sizes = args
                    .next()
                    .context("--members N,N")?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?;
            }
            "--protocols" => {
                protocols = args
                    .next()
                    .context("--protocols classic,consumer")?
                    .split(',')
                    .map(|p| match p {
                        "classic" => Ok(GroupProtocol::Classic),
                        "consumer" => Ok(GroupProtocol::Consumer),
                        other => bail!("unknown protocol {other}"),
                    })
                    .collect::<Result<_>>()?;
            }
            "--runs" => runs = args.next().context("--runs N")?.parse()?,
            "--idle-s" => idle_s = args.next().context("--idle-s S")?.parse()?,
            "--bootstrap" => bootstrap = Some(args.next().context("--bootstrap HOST:PORT")?),
            "--broker-pid" => pid = Some(args.next().context("--broker-pid PID")?.parse()?),
            "--bench" => {}
            other => bail!("unknown argument {other}"),
        }
    }
    if sizes.iter().any(|&n| n < 2) || runs == 0 {
        bail!("--members must be at least 2 and --runs at least 1");
    }
    rt::block_on(async move {
        let dir = tempfile::tempdir()?;
        let (_broker, kafka) = match bootstrap {
            Some(b) => (None, b),
            None => {
                let mut cfg = BrokerConfig::new(dir.path());
                cfg.listen = "127.0.0.1:0".into();
                cfg.kafka_listen = Some("127.0.0.1:0".into());
                let broker = Broker::start(cfg).await?;
                let k = broker.kafka_addr().context("kafka listener")?.to_string();
                (Some(broker), k)
            }
        };
        for &n in &sizes {
            for &p in &protocols {
                for r in 0..runs {
                    let res = one_run(&kafka, p, n, r, Duration::from_secs(idle_s), pid).await?;
                    println!(
                        "{{\"protocol\":\"{}\",\"members\":{n},\"partitions\":{},\"run\":{r},\"settle_ms\":{},\"after_leave_ms\":{},\"idle_broker_cpu_us_per_member_s\":{}}}",
                        name(p),
                        2 * n,
                        res.settle.as_millis(),
                        res.after_leave.as_millis(),
                        res.idle_cpu_us_per_member_s
                            .map_or("null".to_owned(), |c| format!("{c:.1}")),
                    );
                }
            }
        }
        anyhow::Ok(())
    })
}

//! Rebalance time after a member goes, on loopback: three group
//! members share a 6-partition topic while a producer writes to every
//! partition; one member leaves (clean: LEAVE_GROUP; kill: it stops without
//! a word, as after SIGKILL, and its session expires); the time is from its
//! going until each of the two others has its new assignment (generation
//! n+1) and has fetched a record again. Median and max of the runs.
//!
//! ```text
//! cargo bench --bench rebalance -- [clean|kill] [--runs N] [--session-ms MS] [--plain]
//! ```
//! `--plain`: plain HEARTBEATs every session/3 (how members learned of a
//! rebalance before HEARTBEAT_WAIT), for the before figure.
//! See benches/rebalance.sh for the whole set.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use flume_broker::{Broker, BrokerConfig, TopicConfig};
use flume_client::{GroupConsumer, Producer, ProducerRecord, RebalanceEvent};
use flume_rt as rt;
use futures::{FutureExt, StreamExt};

const PARTITIONS: u32 = 6;

/// What a member saw: (generation, when assigned, when it first got a record since).
type Seen = Arc<Mutex<Vec<(i32, Instant, Option<Instant>)>>>;

struct Member {
    seen: Seen,
    /// Send `true` to close (leave), `false` to vanish (no leave).
    stop: async_channel::Sender<bool>,
    task: rt::Task<()>,
}

fn spawn_member(mut c: GroupConsumer) -> Member {
    let seen: Seen = Arc::default();
    let (stop, stop_rx) = async_channel::bounded::<bool>(1);
    let mut events = c.events().fuse();
    let s = Arc::clone(&seen);
    let task = rt::spawn(async move {
        loop {
            futures::select! {
                r = c.next().fuse() => {
                    if let Some(Ok(_)) = r {
                        let mut v = s.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        if let Some(last) = v.last_mut() {
                            last.2.get_or_insert_with(Instant::now);
                        }
                    }
                }
                ev = events.next() => {
                    if let Some(RebalanceEvent::Assigned { generation, .. }) = ev {
                        s.lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .push((generation, Instant::now(), None));
                    }
                }
                how = stop_rx.recv().fuse() => {
                    if how.unwrap_or(true) {
                        let _ = c.close().await;
                    }
                    // Otherwise dropped: heartbeats stop, connections close, no leave.
                    return;
                }
            }
        }
    });
    Member { seen, stop, task }
}

fn last_gen(m: &Member) -> i32 {
    m.seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .last()
        .map_or(0, |x| x.0)
}

/// When `m` had a generation above `n` and a record under it.
fn caught_up(m: &Member, n: i32) -> Option<Instant> {
    let v = m
        .seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    v.iter().rev().find(|x| x.0 > n).and_then(|x| x.2)
}

async fn one_run(
    addr: &str,
    group: &str,
    kill: bool,
    session: Duration,
    plain: bool,
) -> Result<Duration> {
    let mut members = Vec::new();
    for _ in 0..3 {
        let c = GroupConsumer::builder(addr, group)
            .topic("t")
            .session_timeout(session)
            .rebalance_timeout(Duration::from_secs(30))
            .heartbeat_wait(!plain)
            .build()
            .await
            .context("join")?;
        members.push(spawn_member(c));
    }
    // Stable: the three on one generation, each having fetched under it.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let g = last_gen(&members[0]);
        if g > 0
            && members
                .iter()
                .all(|m| last_gen(m) == g && caught_up(m, g - 1).is_some())
        {
            break;
        }
        if Instant::now() > deadline {
            bail!("the three members never settled");
        }
        rt::sleep(Duration::from_millis(5)).await;
    }
    let n = last_gen(&members[0]);
    let leaver = members.pop().context("three members")?;
    let t0 = Instant::now();
    leaver.stop.send(!kill).await.ok();
    leaver.task.await;
    let deadline = t0 + session * 3 + Duration::from_secs(30);
    let done = loop {
        let at: Vec<Option<Instant>> = members.iter().map(|m| caught_up(m, n)).collect();
        if at.iter().all(Option::is_some) {
            break at.into_iter().flatten().max().unwrap_or(t0);
        }
        if Instant::now() > deadline {
            bail!("the two others never caught up");
        }
        rt::sleep(Duration::from_millis(1)).await;
    };
    for m in members {
        m.stop.send(true).await.ok();
        m.task.await;
    }
    Ok(done.saturating_duration_since(t0))
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut kill, mut runs, mut session_ms, mut plain) = (false, 20usize, 10_000u64, false);
    while let Some(a) = args.next() {
        match a.as_str() {
            "clean" => kill = false,
            "kill" => kill = true,
            "--plain" => plain = true,
            "--runs" => runs = args.next().context("--runs N")?.parse()?,
            "--session-ms" => session_ms = args.next().context("--session-ms MS")?.parse()?,
            "--bench" => {}
            other => bail!("unknown argument {other}"),
        }
    }
    if runs == 0 {
        bail!("--runs must be at least 1");
    }
    let session = Duration::from_millis(session_ms);
    rt::block_on(async move {
        let dir = tempfile::tempdir()?;
        let mut cfg = BrokerConfig::new(dir.path());
        cfg.listen = "127.0.0.1:0".into();
        let broker = Broker::start(cfg).await?;
        broker.engine().records().create_topic(
            "t",
            TopicConfig {
                partitions: PARTITIONS,
                ..TopicConfig::default()
            },
        )?;
        let addr = broker.local_addr().to_string();
        // A record to every partition every few ms, so "fetches again" has something to fetch.
        let producer = Producer::connect(&addr).await?;
        let (quit, quit_rx) = async_channel::bounded::<()>(1);
        let writer = rt::spawn(async move {
            let mut i = 0u64;
            loop {
                for p in 0..PARTITIONS {
                    let p = i32::try_from(p).unwrap_or(0); // ok: PARTITIONS is small
                    let rec = ProducerRecord::new("t", i.to_string()).partition(p);
                    let _ = producer.send_record(rec).await;
                }
                i += 1;
                futures::select! {
                    () = rt::sleep(Duration::from_millis(2)).fuse() => {}
                    _ = quit_rx.recv().fuse() => break,
                }
            }
        });
        let mut times = Vec::new();
        for r in 0..runs {
            let t = one_run(&addr, &format!("g{r}"), kill, session, plain).await?;
            eprintln!("run {r}: {} ms", t.as_millis());
            times.push(t);
        }
        drop(quit);
        writer.await;
        times.sort();
        let median = times[times.len() / 2];
        let max = times[times.len() - 1];
        println!(
            "{}, session {} ms, {} heartbeats, {} runs: median {} ms, max {} ms",
            if kill {
                "kill (no leave, session expiry)"
            } else {
                "clean leave"
            },
            session_ms,
            if plain { "plain" } else { "waiting" },
            runs,
            median.as_millis(),
            max.as_millis()
        );
        broker.shutdown().await;
        Ok(())
    })
}

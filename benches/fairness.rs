//! Fair admission under abuse, against a running broker (see
//! `benches/fairness.sh`, which starts one and samples its memory).
//!
//! ```text
//! cargo bench --bench fairness -- rtt  --flume A --kafka K --http H [--rounds N] [--abusers N] [--seed S]
//! cargo bench --bench fairness -- soak --flume A --kafka K --http H [--seconds N] [--abusers N] [--seed S]
//! ```
//! `rtt`: a normal client's produce round trip (one 100-byte record, sent
//! and acknowledged, then the next) alone, then beside `--abusers` abusive
//! connections (`tests/common/abuse.rs`: parked fetches, peers that never
//! read, huge frames sent slowly, reconnect loops, Kafka parked fetches and
//! group waits, HTTP half heads): p50, p99 and the slowest.
//!
//! `soak`: for `--seconds`, abusers (a new seeded set every 10 s, so their
//! connections churn), 4 producers sending keyed records one at a time, a
//! group of 3 consumers committing as they go, and a client that connects,
//! sends one record and closes in a loop. Every produce and every receive is
//! timed; at the end every acknowledged record is read back from the log.
//! Prints the slowest normal request, how many waited over 1 s, and whether
//! any acknowledged record is missing (exit status 1 if one is, or if a
//! request waited over 1 s).

#[path = "../tests/common/abuse.rs"]
mod abuse;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use flume_client::{GroupConsumer, PartitionConsumer, Producer, StartOffset};
use flume_rt as rt;
use futures::{FutureExt, StreamExt};

use abuse::{abuser, Abuse, Ports, Rng, ALL_ABUSES};

const TOPIC: &str = "fair";
const PARTITIONS: i32 = 4;
/// What a normal request may wait before the soak calls it starved.
const STARVED: Duration = Duration::from_secs(1);

struct Args {
    mode: String,
    ports: Ports,
    rounds: usize,
    abusers: usize,
    seconds: u64,
    seed: u64,
}

fn args() -> Result<Args> {
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    let mode = it
        .next()
        .context("usage: fairness rtt|soak --flume A --kafka K --http H")?;
    let (mut flume, mut kafka, mut http) = (None, None, None);
    let (mut rounds, mut abusers, mut seconds, mut seed) = (2000, 12, 120, 0x5eed_fa17);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--flume" => flume = Some(value),
            "--kafka" => kafka = Some(value),
            "--http" => http = Some(value),
            "--rounds" => rounds = value.parse()?,
            "--abusers" => abusers = value.parse()?,
            "--seconds" => seconds = value.parse()?,
            "--seed" => seed = value.parse()?,
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(Args {
        mode,
        ports: Ports {
            flume: flume.context("--flume ADDR")?,
            kafka: kafka.context("--kafka ADDR")?,
            http: http.context("--http ADDR")?,
        },
        rounds,
        abusers,
        seconds,
        seed,
    })
}

/// A seeded set of `n` abusers (every kind once when `n` allows).
fn mix(n: usize, seed: u64) -> Vec<Abuse> {
    let mut rng = Rng(seed | 1);
    let mut out: Vec<Abuse> = ALL_ABUSES.iter().copied().take(n).collect();
    while out.len() < n {
        let i = usize::try_from(rng.below(ALL_ABUSES.len() as u64)).unwrap_or(0);
        out.push(ALL_ABUSES[i]);
    }
    out
}

struct Abusers {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Abusers {
    fn start(ports: &Ports, n: usize, seed: u64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = mix(n, seed)
            .into_iter()
            .map(|a| abuser(a, ports, seed, Arc::clone(&stop)))
            .collect();
        Abusers { stop, threads }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn summary(label: &str, mut times: Vec<Duration>) {
    times.sort();
    println!(
        "{label}: {} round trips, p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        times.len(),
        percentile(&times, 0.5).as_secs_f64() * 1e3,
        percentile(&times, 0.99).as_secs_f64() * 1e3,
        times.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
}

async fn round_trips(producer: &Producer, rounds: usize) -> Result<Vec<Duration>> {
    let value = [b'v'; 100];
    let mut times = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let t = Instant::now();
        producer
            .send(TOPIC, Some(format!("k{i}").as_bytes()), &value)
            .await?;
        times.push(t.elapsed());
    }
    Ok(times)
}

fn rtt(a: &Args) -> Result<()> {
    let producer = rt::block_on(Producer::connect(&a.ports.flume))?;
    rt::block_on(round_trips(&producer, a.rounds.min(200)))?; // warm up
    summary("alone", rt::block_on(round_trips(&producer, a.rounds))?);
    let abusers = Abusers::start(&a.ports, a.abusers, a.seed);
    // The abusers take a moment to park and fill the budget; this is a
    // benchmark, so a plain pause is fine here.
    std::thread::sleep(Duration::from_secs(2));
    let beside = rt::block_on(round_trips(&producer, a.rounds));
    abusers.stop();
    summary(
        &format!("beside {} abusive connections", a.abusers),
        beside?,
    );
    Ok(())
}

/// Acknowledged records: (partition, offset) -> value.
type Acked = Arc<Mutex<BTreeMap<(i32, i64), Vec<u8>>>>;

#[derive(Default)]
struct Waits {
    times: Vec<Duration>,
    over: usize,
}

impl Waits {
    fn add(&mut self, d: Duration) {
        self.times.push(d);
        if d > STARVED {
            self.over += 1;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn producer_loop(
    addr: String,
    id: usize,
    until: Instant,
    acked: Acked,
    waits: Arc<Mutex<Waits>>,
) -> Result<()> {
    let producer = Producer::connect(&addr).await?;
    let mut i = 0u64;
    while Instant::now() < until {
        let value = format!("p{id}-{i}").into_bytes();
        let t = Instant::now();
        let meta = producer
            .send(TOPIC, Some(format!("key-{}", i % 64).as_bytes()), &value)
            .await?;
        lock(&waits).add(t.elapsed());
        lock(&acked).insert((meta.partition, meta.offset), value);
        i += 1;
        rt::sleep(Duration::from_millis(2)).await;
    }
    producer.close().await;
    Ok(())
}

async fn churn_loop(
    addr: String,
    until: Instant,
    acked: Acked,
    waits: Arc<Mutex<Waits>>,
) -> Result<()> {
    let mut i = 0u64;
    while Instant::now() < until {
        let t = Instant::now();
        let producer = Producer::connect(&addr).await?;
        let value = format!("churn-{i}").into_bytes();
        let meta = producer.send(TOPIC, None, &value).await?;
        producer.close().await;
        lock(&waits).add(t.elapsed());
        lock(&acked).insert((meta.partition, meta.offset), value);
        i += 1;
    }
    Ok(())
}

async fn consumer_loop(addr: String, until: Instant, waits: Arc<Mutex<Waits>>) -> Result<usize> {
    let mut c = GroupConsumer::builder(&addr, "fair-group")
        .topic(TOPIC)
        .start(StartOffset::Latest)
        .build()
        .await?;
    let mut seen = 0usize;
    let mut last = Instant::now();
    // The group forms in its first seconds (joins, the initial rebalance):
    // gaps are counted from then on.
    let settled = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let left = until.saturating_duration_since(Instant::now());
        futures::select! {
            r = c.next().fuse() => {
                let Some(r) = r else { break };
                r?;
                // The producers send all the time, so a gap is a wait.
                let now = Instant::now();
                if now > settled {
                    lock(&waits).add(now - last);
                }
                last = now;
                seen += 1;
            }
            () = rt::sleep(left).fuse() => break,
        }
    }
    c.close().await?;
    Ok(seen)
}

/// Reads every partition from the start and checks each acknowledged record.
async fn missing(addr: &str, acked: &BTreeMap<(i32, i64), Vec<u8>>) -> Result<usize> {
    let mut missing = 0;
    for p in 0..PARTITIONS {
        let want: BTreeMap<_, _> = acked.range((p, 0)..(p + 1, 0)).collect();
        let Some(((_, last), _)) = want.last_key_value() else {
            continue;
        };
        let last = *last;
        let mut c = PartitionConsumer::connect(addr, TOPIC, p, StartOffset::Earliest).await?;
        let mut got = BTreeMap::new();
        while got.last_key_value().is_none_or(|(o, _)| *o < last) {
            let r = rt::timeout(Duration::from_secs(10), c.next())
                .await
                .context("read-back stalled")?
                .context("read-back ended")??;
            got.insert(i64::try_from(r.offset)?, r.payload().to_vec());
        }
        for ((_, o), v) in want {
            if got.get(o) != Some(v) {
                missing += 1;
            }
        }
    }
    Ok(missing)
}

fn soak(a: &Args) -> Result<()> {
    let until = Instant::now() + Duration::from_secs(a.seconds);
    let acked: Acked = Arc::default();
    let produce_waits: Arc<Mutex<Waits>> = Arc::default();
    let consume_waits: Arc<Mutex<Waits>> = Arc::default();
    let mut tasks = Vec::new();
    for id in 0..4 {
        let (addr, acked, waits) = (
            a.ports.flume.clone(),
            Arc::clone(&acked),
            Arc::clone(&produce_waits),
        );
        tasks.push(rt::spawn(producer_loop(addr, id, until, acked, waits)));
    }
    let churn = rt::spawn(churn_loop(
        a.ports.flume.clone(),
        until,
        Arc::clone(&acked),
        Arc::clone(&produce_waits),
    ));
    let consumers: Vec<_> = (0..3)
        .map(|_| {
            rt::spawn(consumer_loop(
                a.ports.flume.clone(),
                until,
                Arc::clone(&consume_waits),
            ))
        })
        .collect();
    // Abusers: a new seeded set every 10 s until the end.
    let mut round = 0u64;
    while Instant::now() < until {
        let abusers = Abusers::start(&a.ports, a.abusers, a.seed.wrapping_add(round));
        let left = until.saturating_duration_since(Instant::now());
        std::thread::sleep(left.min(Duration::from_secs(10)));
        abusers.stop();
        round += 1;
    }
    for t in tasks {
        rt::block_on(t)?;
    }
    rt::block_on(churn)?;
    let mut seen = 0;
    for c in consumers {
        seen += rt::block_on(c)?;
    }
    let acked = lock(&acked).clone();
    let missing = rt::block_on(missing(&a.ports.flume, &acked))?;
    let (p, c) = (lock(&produce_waits), lock(&consume_waits));
    let slowest = |w: &Waits| w.times.iter().max().copied().unwrap_or_default();
    println!(
        "soak {} s, {round} abuser rounds of {}: {} records acknowledged, {} consumed by the group, {missing} missing on read-back",
        a.seconds,
        a.abusers,
        acked.len(),
        seen
    );
    println!(
        "  produce: slowest {:.1} ms, {} over 1 s; consume gaps: slowest {:.1} ms, {} over 1 s",
        slowest(&p).as_secs_f64() * 1e3,
        p.over,
        slowest(&c).as_secs_f64() * 1e3,
        c.over
    );
    if missing > 0 || p.over > 0 || c.over > 0 {
        bail!("a normal request waited over 1 s or an acknowledged record is missing");
    }
    Ok(())
}

fn main() -> Result<()> {
    let a = args()?;
    match a.mode.as_str() {
        "rtt" => rtt(&a),
        "soak" => soak(&a),
        other => bail!("unknown mode {other} (rtt or soak)"),
    }
}

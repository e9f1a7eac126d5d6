//! The SDK's Kafka client against a multi-broker Kafka cluster that nobody
//! here wrote: librdkafka's mock cluster (`tests/kafka-mock/mock_cluster.c`,
//! built against Debian's librdkafka-dev by `tests/kafka-mock/run.sh`, which
//! runs these tests with `FLUME_KAFKA_MOCK` naming the program). Without
//! that variable each test says so and passes: `cargo test` alone does not
//! need librdkafka.
//!
//! The program starts three brokers, moves partition leaders and takes
//! brokers down on commands from stdin, and hosts librdkafka consumers that
//! share groups with the SDK's members.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use flume_client::{
    GroupConsumer, PartitionConsumer, Producer, ProducerConfig, ProducerRecord, StartOffset,
};
use futures::FutureExt;

/// The mock cluster process: commands in, lines out.
struct Mock {
    child: Child,
    stdin: ChildStdin,
    /// Every line the program printed after the bootstrap line.
    lines: Arc<Mutex<Vec<String>>>,
    /// `kafka://` address of its brokers.
    addr: String,
}

impl Mock {
    /// Starts the program named by `FLUME_KAFKA_MOCK` with `brokers`
    /// brokers; `None` when the variable is not set.
    fn start(brokers: u32) -> Result<Option<Mock>> {
        let Some(path) = std::env::var_os("FLUME_KAFKA_MOCK") else {
            eprintln!("FLUME_KAFKA_MOCK is not set: skipped (tests/kafka-mock/run.sh runs it)");
            return Ok(None);
        };
        let mut child = Command::new(path)
            .arg(brokers.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting the mock cluster")?;
        let stdin = child.stdin.take().context("stdin")?;
        let mut out = BufReader::new(child.stdout.take().context("stdout")?);
        let mut first = String::new();
        out.read_line(&mut first)?;
        let addr = first
            .trim()
            .strip_prefix("bootstrap ")
            .with_context(|| format!("mock said {first:?}"))?;
        let addr = format!("kafka://{addr}");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        std::thread::spawn(move || {
            for l in out.lines().map_while(std::result::Result::ok) {
                sink.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(l);
            }
        });
        Ok(Some(Mock {
            child,
            stdin,
            lines,
            addr,
        }))
    }

    fn lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Sends a command and waits for its "ok".
    fn cmd(&mut self, c: &str) -> Result<()> {
        let before = self.lines().iter().filter(|l| is_answer(l)).count();
        writeln!(self.stdin, "{c}")?;
        self.stdin.flush()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let answers: Vec<String> = self.lines().into_iter().filter(|l| is_answer(l)).collect();
            if let Some(a) = answers.get(before) {
                if a == "ok" {
                    return Ok(());
                }
                bail!("mock: {c}: {a}");
            }
            if Instant::now() > deadline {
                bail!("mock: no answer to {c}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The partitions of the last "assigned NAME ..." line of consumer `name`.
    fn assigned(&self, name: &str) -> Option<Vec<i32>> {
        let prefix = format!("assigned {name} ");
        let last = self
            .lines()
            .into_iter()
            .rev()
            .find(|l| l.starts_with(&prefix))?;
        let rest = &last[prefix.len()..];
        Some(if rest == "-" {
            Vec::new()
        } else {
            rest.split(',').filter_map(|p| p.parse().ok()).collect()
        })
    }
}

fn is_answer(l: &str) -> bool {
    l == "ok" || l.starts_with("error ")
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads `n` records of `topic` from every partition through `addr`:
/// (partition, offset, value) in order per partition.
async fn read_all(
    addr: &str,
    topic: &str,
    partitions: i32,
    n: usize,
) -> Result<Vec<(i32, u64, String)>> {
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut consumers = Vec::new();
    for p in 0..partitions {
        consumers.push(PartitionConsumer::connect(addr, topic, p, StartOffset::Earliest).await?);
    }
    while out.len() < n {
        anyhow::ensure!(
            Instant::now() < deadline,
            "read {} of {n} records",
            out.len()
        );
        for (p, c) in (0..).zip(consumers.iter_mut()) {
            if let Some(batch) = flume_rt::timeout(Duration::from_millis(300), c.poll_batch()).await
            {
                for r in batch? {
                    out.push((
                        p,
                        r.offset,
                        String::from_utf8_lossy(r.payload()).into_owned(),
                    ));
                }
            }
        }
    }
    Ok(out)
}

/// Every key's values must be 0, 1, 2, ... with nothing missing or twice.
fn check_per_key_order(records: &[(i32, u64, String)], keys: usize, per_key: usize) -> Result<()> {
    let mut by_key: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (_, _, v) in records {
        let (k, n) = v.split_once(':').context("value k:n")?;
        by_key.entry(k.parse()?).or_default().push(n.parse()?);
    }
    anyhow::ensure!(by_key.len() == keys, "{} keys of {keys}", by_key.len());
    for (k, ns) in by_key {
        let want: Vec<usize> = (0..per_key).collect();
        anyhow::ensure!(
            ns == want,
            "key {k}: {:?}... ({} values)",
            &ns[..ns.len().min(20)],
            ns.len()
        );
    }
    Ok(())
}

/// Keyed records to a six-partition topic whose leaders are spread over
/// three brokers, while every partition's leader moves twice: every
/// record is acknowledged once, none is lost or written twice, and each
/// key's records are in order.
#[test]
fn mock_leaders_move_while_producing() -> Result<()> {
    let Some(mut mock) = Mock::start(3)? else {
        return Ok(());
    };
    mock.cmd("topic lm 6")?;
    let (keys, per_key) = (24usize, 100usize);
    let addr = mock.addr.clone();
    flume_rt::block_on(async {
        let producer = Producer::with_config(
            &addr,
            ProducerConfig::default()
                .linger(Duration::from_millis(1))
                .batch_max_bytes(512)
                .delivery_timeout(Duration::from_secs(60)),
        )
        .await?;
        let mut deliveries = Vec::new();
        for n in 0..per_key {
            if n == per_key / 3 || n == 2 * per_key / 3 {
                for p in 0..6 {
                    let to = 1 + (p + n) % 3;
                    mock.cmd(&format!("leader lm {p} {to}"))?;
                }
            }
            for k in 0..keys {
                let rec = ProducerRecord::new("lm", format!("{k}:{n}")).key(format!("key-{k}"));
                deliveries.push(producer.enqueue(rec).await?);
            }
            if n % 10 == 0 {
                flume_rt::sleep(Duration::from_millis(2)).await;
            }
        }
        let mut offsets = std::collections::BTreeSet::new();
        for d in deliveries {
            let m = d.await?;
            anyhow::ensure!(
                offsets.insert((m.partition, m.offset)),
                "{m:?} acknowledged twice"
            );
        }
        producer.close().await;
        let records = read_all(&addr, "lm", 6, keys * per_key).await?;
        anyhow::ensure!(records.len() == keys * per_key, "{} records", records.len());
        check_per_key_order(&records, keys, per_key)
    })
}

/// A broker down while records are sent to partitions it leads: those
/// wait, the others are acknowledged; once it is back, every record is
/// there once, in order per key.
#[test]
fn mock_broker_down_and_back() -> Result<()> {
    let Some(mut mock) = Mock::start(3)? else {
        return Ok(());
    };
    mock.cmd("topic bd 3")?;
    for p in 0..3 {
        mock.cmd(&format!("leader bd {p} {}", p + 1))?;
    }
    let addr = mock.addr.clone();
    flume_rt::block_on(async {
        let producer = Producer::with_config(
            &addr,
            ProducerConfig::default()
                .linger(Duration::from_millis(1))
                .delivery_timeout(Duration::from_secs(60)),
        )
        .await?;
        // Metadata first, so the producer knows every leader.
        producer
            .send_record(ProducerRecord::new("bd", "9:0").partition(0))
            .await?;
        mock.cmd("down 2")?;
        let (keys, per_key) = (9usize, 30usize);
        let mut deliveries = Vec::new();
        for n in 0..per_key {
            for k in 0..keys {
                let rec =
                    ProducerRecord::new("bd", format!("{k}:{n}")).partition(i32::try_from(k % 3)?);
                deliveries.push((k % 3, producer.enqueue(rec).await?));
            }
        }
        // The partitions of brokers 1 and 3 are acknowledged while 2 is down.
        let (mut on_2, mut others): (Vec<_>, Vec<_>) =
            deliveries.into_iter().partition(|(p, _)| *p == 1);
        for (_, d) in others.drain(..) {
            d.await?;
        }
        let waiting = futures::future::join_all(on_2.iter_mut().map(|(_, d)| d)).now_or_never();
        anyhow::ensure!(
            waiting.is_none(),
            "partition 1 acknowledged while its leader was down"
        );
        mock.cmd("up 2")?;
        for (_, d) in on_2 {
            d.await?;
        }
        producer.close().await;
        let mut records = read_all(&addr, "bd", 3, keys * per_key + 1).await?;
        records.retain(|(_, _, v)| v != "9:0");
        check_per_key_order(&records, keys, per_key)
    })
}

/// An SDK member and a librdkafka consumer in one group (range, then
/// cooperative-sticky): they split the partitions; when the librdkafka
/// consumer leaves, the SDK member takes them all.
#[test]
fn mock_group_shared_with_librdkafka() -> Result<()> {
    let Some(mut mock) = Mock::start(3)? else {
        return Ok(());
    };
    mock.cmd("topic mx 4")?;
    let addr = mock.addr.clone();
    for (group, assignor) in [("mix-range", "range"), ("mix-coop", "cooperative-sticky")] {
        mock.cmd(&format!("consumer rk-{group} {group} mx {assignor}"))?;
        flume_rt::block_on(async {
            let mut sdk = GroupConsumer::builder(&addr, group)
                .topic("mx")
                .assignor(assignor)
                .session_timeout(Duration::from_secs(6))
                .heartbeat_interval(Duration::from_millis(100))
                .max_wait(Duration::from_millis(100))
                .build()
                .await?;
            let name = format!("rk-{group}");
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let _ = flume_rt::timeout(Duration::from_millis(100), sdk.recv()).await;
                let mine = sdk.assignment().await;
                let theirs = mock.assigned(&name).unwrap_or_default();
                let mut all: Vec<i32> = mine
                    .iter()
                    .map(|(_, p)| *p)
                    .chain(theirs.iter().copied())
                    .collect();
                all.sort_unstable();
                if !mine.is_empty() && !theirs.is_empty() && all == [0, 1, 2, 3] {
                    break;
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "{group}: no split: SDK {mine:?}, librdkafka {theirs:?}"
                );
            }
            mock.cmd(&format!("stop {name}"))?;
            loop {
                let _ = flume_rt::timeout(Duration::from_millis(100), sdk.recv()).await;
                if sdk.assignment().await.len() == 4 {
                    break;
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "{group}: the SDK member did not take every partition"
                );
            }
            sdk.close().await?;
            anyhow::Ok(())
        })?;
    }
    Ok(())
}

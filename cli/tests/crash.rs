//! Crash safety with the real binary: SIGKILL during produce and during commits, damaged files,
//! a failing disk. Every test prints its seed on failure (set FLUME_TEST_SEED to replay).

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{ok, BrokerProc};
use flume_client::lowlevel::Client;
use flume_client::{
    Admin, ConnectionConfig, FetchConfig, PartitionConsumer, Producer, ProducerRecord, StartOffset,
};
use flume_protocol::{CreateTopicRequest, PartitionOffset};
use flume_rt::block_on;

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

fn base_seed() -> u64 {
    std::env::var("FLUME_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0xf1u64 << 32 | 0x5eed)
}

#[derive(Debug, Clone)]
struct Ack {
    partition: i32,
    offset: i64,
    key: String,
    value: String,
}

/// Reads every record of every partition of `topic`: partition -> (offset, key, value).
fn read_all(addr: &str, topic: &str) -> HashMap<i32, Vec<(u64, String, String)>> {
    block_on(async {
        let admin = Admin::connect(addr).await.unwrap();
        let t = admin.topics(&[topic.to_owned()]).await.unwrap().remove(0);
        let client = Arc::new(
            Client::connect(addr, ConnectionConfig::default())
                .await
                .unwrap(),
        );
        let mut out = HashMap::new();
        for p in t.partitions {
            let mut c = PartitionConsumer::with_client(
                client.clone(),
                topic,
                p.partition,
                StartOffset::At(0),
                FetchConfig::default().max_wait(Duration::from_millis(10)),
            );
            let mut recs = Vec::new();
            while (recs.len() as i64) < p.log_end {
                // A CRC failure would be an error here: the test fails.
                for r in c.poll_batch().await.expect("no CRC error after recovery") {
                    let key = String::from_utf8(r.key.as_ref().unwrap().to_vec()).unwrap();
                    recs.push((
                        r.offset,
                        key,
                        String::from_utf8(r.payload().to_vec()).unwrap(),
                    ));
                }
            }
            out.insert(p.partition, recs);
        }
        out
    })
}

fn kill_during_produce(fsync: &str, seed: u64) {
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let flags = ["--fsync", fsync, "--segment-bytes", "65536"];
    let b = BrokerProc::start(&data, &flags);
    let addr = b.addr.clone();
    let acks = Arc::new(Mutex::new(Vec::<Ack>::new()));
    let count = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for t in 0..4 {
        let (addr, acks, count, stop) = (addr.clone(), acks.clone(), count.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            block_on(async move {
                let Ok(p) = Producer::connect(&addr).await else {
                    return;
                };
                let mut window = std::collections::VecDeque::new();
                let mut seq = 0u64;
                'send: while !stop.load(Ordering::Relaxed) {
                    let key = format!("p{t}-k{}", seq % 5);
                    let value = format!("{t}:{seq}");
                    seq += 1;
                    let rec = ProducerRecord::new("crash", value.clone()).key(key.clone());
                    let Ok(f) = p.enqueue(rec).await else {
                        break;
                    };
                    window.push_back((f, key, value));
                    while window.len() > 64 {
                        let (f, key, value) = window.pop_front().unwrap();
                        match f.await {
                            Ok(m) => {
                                acks.lock().unwrap().push(Ack {
                                    partition: m.partition,
                                    offset: m.offset,
                                    key,
                                    value,
                                });
                                count.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(_) => break 'send,
                        }
                    }
                }
                for (f, key, value) in window {
                    if let Ok(m) = f.await {
                        acks.lock().unwrap().push(Ack {
                            partition: m.partition,
                            offset: m.offset,
                            key,
                            value,
                        });
                    }
                }
            })
        }));
    }
    let kill_at = 500 + rng.below(if fsync == "always" { 1500 } else { 20_000 }) as usize;
    let deadline = Instant::now() + Duration::from_secs(60);
    while count.load(Ordering::Relaxed) < kill_at {
        assert!(
            Instant::now() < deadline,
            "seed {seed}: producers stalled at {}",
            count.load(Ordering::Relaxed)
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    b.kill();
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let acks = acks.lock().unwrap().clone();
    let b = BrokerProc::start(&data, &flags);
    let logs = read_all(&b.addr, "crash");
    // Dense offsets, each value at most once.
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (p, recs) in &logs {
        for (i, (off, _, v)) in recs.iter().enumerate() {
            assert_eq!(
                *off, i as u64,
                "seed {seed}: partition {p} offsets not dense"
            );
            *seen.entry(v.as_str()).or_default() += 1;
        }
    }
    assert!(
        seen.values().all(|n| *n == 1),
        "seed {seed}: a record appears twice"
    );
    // Every acknowledged record is at its acknowledged place.
    for a in &acks {
        let recs = &logs[&a.partition];
        let got = recs.get(a.offset as usize);
        assert_eq!(
            got.map(|r| (&r.1, &r.2)),
            Some((&a.key, &a.value)),
            "seed {seed}: acknowledged record {a:?} lost or moved (fsync {fsync}, {} acks)",
            acks.len()
        );
    }
    // Per key, send order is log order.
    let mut last: HashMap<&str, u64> = HashMap::new();
    for recs in logs.values() {
        for (_, k, v) in recs {
            let seq: u64 = v.split(':').nth(1).unwrap().parse().unwrap();
            if let Some(prev) = last.insert(k.as_str(), seq) {
                assert!(
                    prev < seq,
                    "seed {seed}: key {k} out of order ({prev} then {seq})"
                );
            }
        }
    }
    assert!(acks.len() >= kill_at, "seed {seed}");
}

#[test]
fn sigkill_during_produce_loses_nothing_acknowledged_fsync_never() {
    let base = base_seed();
    for i in 0..3 {
        kill_during_produce("never", base.wrapping_add(i) | 1);
    }
}

#[test]
fn sigkill_during_produce_loses_nothing_acknowledged_fsync_always() {
    let base = base_seed();
    for i in 0..2 {
        kill_during_produce("always", base.wrapping_add(100 + i) | 1);
    }
}

#[test]
fn sigkill_during_a_commit_storm_keeps_the_last_acknowledged_commit() {
    let base = base_seed();
    for round in 0..2u64 {
        let seed = base.wrapping_add(200 + round) | 1;
        let mut rng = Rng(seed);
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let b = BrokerProc::start(&data, &[]);
        let addr = b.addr.clone();
        block_on(async {
            let admin = Admin::connect(&addr).await.unwrap();
            admin
                .create_topic(CreateTopicRequest {
                    name: "c".into(),
                    partitions: 4,
                    ..CreateTopicRequest::default()
                })
                .await
                .unwrap();
        });
        let last_acked = Arc::new(Mutex::new(HashMap::<(u64, i32), i64>::new()));
        let count = Arc::new(AtomicUsize::new(0));
        let mut threads = Vec::new();
        for t in 0..4u64 {
            let (addr, last_acked, count) = (addr.clone(), last_acked.clone(), count.clone());
            threads.push(std::thread::spawn(move || {
                block_on(async move {
                    let Ok(admin) = Admin::connect(&addr).await else {
                        return;
                    };
                    for n in 1..i64::MAX {
                        let offsets = (0..4)
                            .map(|p| PartitionOffset {
                                topic: "c".into(),
                                partition: p,
                                offset: n,
                            })
                            .collect();
                        if admin.commit(&format!("g{t}"), offsets).await.is_err() {
                            return;
                        }
                        let mut l = last_acked.lock().unwrap();
                        for p in 0..4 {
                            l.insert((t, p), n);
                        }
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                })
            }));
        }
        let kill_at = 50 + rng.below(1500) as usize;
        let deadline = Instant::now() + Duration::from_secs(60);
        while count.load(Ordering::Relaxed) < kill_at {
            assert!(Instant::now() < deadline, "seed {seed}: commits stalled");
            std::thread::sleep(Duration::from_millis(1));
        }
        b.kill();
        for t in threads {
            t.join().unwrap();
        }
        let last_acked = last_acked.lock().unwrap().clone();
        let b = BrokerProc::start(&data, &[]);
        block_on(async {
            let admin = Admin::connect(&b.addr).await.unwrap();
            for t in 0..4u64 {
                for p in admin
                    .group_offsets(&format!("g{t}"), &["c".into()])
                    .await
                    .unwrap()
                {
                    let acked = last_acked.get(&(t, p.partition)).copied().unwrap_or(0);
                    // At least the last acknowledged commit; at most the one in flight at the kill.
                    assert!(
                        p.committed >= acked && p.committed <= acked + 1,
                        "seed {seed}: group g{t} partition {} committed {} but {acked} was acknowledged",
                        p.partition,
                        p.committed
                    );
                }
            }
        });
    }
}

#[test]
fn damaged_files_are_repaired_on_start_and_the_rest_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let b = BrokerProc::start(&data, &["--segment-bytes", "1024"]);
    let a = b.addr.clone();
    ok(&["topics", "create", "d", "--partitions", "1", "--broker", &a]);
    block_on(async {
        // One record per request, so segments roll every few records.
        let p = Producer::connect(&a).await.unwrap();
        for i in 0..200 {
            p.send("d", None, format!("record-{i:04}").as_bytes())
                .await
                .unwrap();
        }
    });
    ok(&[
        "consume", "--broker", &a, "--topic", "d", "--group", "dg", "--max", "10",
    ]);
    assert!(b.interrupt().success());
    let pdir = data.join("d").join("partition-0");
    let mut logs: Vec<_> = std::fs::read_dir(&pdir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    assert!(logs.len() > 3, "segments rolled");
    // Tear the tail of the active segment, delete a sealed segment's index, leave a stray offsets temp file.
    let active = logs.last().unwrap();
    let len = std::fs::metadata(active).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(active)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    std::fs::remove_file(logs[1].with_extension("index")).unwrap();
    std::fs::write(
        data.join("__consumer_offsets").join("offsets.log.tmp"),
        b"interrupted",
    )
    .unwrap();
    let b = BrokerProc::start(&data, &["--segment-bytes", "1024"]);
    let out = ok(&[
        "consume",
        "--broker",
        &b.addr,
        "--topic",
        "d",
        "--partition",
        "0",
    ]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.len(),
        199,
        "everything before the torn record is served"
    );
    assert!(lines[198].contains("record-0198"));
    assert!(logs[1].with_extension("index").exists(), "index rebuilt");
    assert!(!data
        .join("__consumer_offsets")
        .join("offsets.log.tmp")
        .exists());
    let p = ok(&[
        "produce",
        "--broker",
        &b.addr,
        "--topic",
        "d",
        "--partition",
        "0",
        "--message",
        "new",
    ]);
    assert!(
        p.contains("offset=199"),
        "appends resume at the truncation point: {p}"
    );
    let lag = ok(&[
        "groups", "lag", "--group", "dg", "--topic", "d", "--broker", &b.addr,
    ]);
    assert!(lag.contains(" 10 "), "committed offsets survived: {lag}");
}

#[test]
fn a_full_disk_fails_produce_cleanly_and_reads_keep_working() {
    // RLIMIT_FSIZE stands in for a full disk: writes past 256 KiB per file fail with EFBIG
    // (SIGXFSZ is ignored so the write returns an error instead of killing the process).
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 512; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_flume-cli"))
        .args(["broker", "--port", "0", "--data"])
        .arg(&data)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let addr = line
        .split_whitespace()
        .find(|w| w.starts_with("127.0.0.1:"))
        .unwrap()
        .to_owned();
    let b = BrokerProc { child, addr };
    let (acked, err, later) = block_on(async {
        let p = Producer::connect(&b.addr).await.unwrap();
        let value = vec![b'x'; 10_000];
        let mut acked = Vec::new();
        let (acked, err) = loop {
            match p
                .send_record(ProducerRecord::new("full", value.clone()).partition(0))
                .await
            {
                Ok(m) => acked.push(m.offset),
                Err(e) => break (acked, e),
            }
            assert!(acked.len() < 100, "the file size limit never hit");
        };
        // Fail-stop: the partition takes nothing more, not even a record that would fit.
        let later = p
            .send_record(ProducerRecord::new("full", b"x".to_vec()).partition(0))
            .await;
        (acked, err, later)
    });
    assert_eq!(
        err.code(),
        Some(flume_client::ErrorCode::StorageError),
        "{err}"
    );
    assert!(!acked.is_empty());
    match later {
        Err(e) => assert_eq!(e.code(), Some(flume_client::ErrorCode::StorageError), "{e}"),
        Ok(m) => panic!("a failed partition took a record at offset {}", m.offset),
    }
    // The broker is alive, and every acknowledged record is readable.
    let out = ok(&[
        "consume",
        "--broker",
        &b.addr,
        "--topic",
        "full",
        "--partition",
        "0",
    ]);
    assert_eq!(out.lines().count(), acked.len());
    // Other partitions (new files) still take writes.
    ok(&[
        "produce",
        "--broker",
        &b.addr,
        "--topic",
        "full",
        "--partition",
        "1",
        "--message",
        "ok",
    ]);
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[test]
fn memory_does_not_grow_with_the_sizes_peers_claim() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(&dir.path().join("data"), &[]);
    let before = rss_kib(b.child.id());
    // 300 connections, each claiming a 16 MB frame and sending 1 KB of it, held open.
    let mut conns = Vec::new();
    for _ in 0..300 {
        let mut s = std::net::TcpStream::connect(&b.addr).unwrap();
        let mut f = (16 * 1024 * 1024i32).to_be_bytes().to_vec();
        f.extend_from_slice(&[0u8; 1024]);
        s.write_all(&f).unwrap();
        conns.push(s);
    }
    // Let the broker read what was sent, then measure.
    ok(&["topics", "list", "--broker", &b.addr]);
    let after = rss_kib(b.child.id());
    let grown_mib = after.saturating_sub(before) / 1024;
    eprintln!("broker RSS {before} KiB before, {after} KiB after 300 claimed 16 MiB frames");
    assert!(
        grown_mib < 200,
        "RSS grew by {grown_mib} MiB for 300 peers claiming 16 MiB each (4.8 GiB claimed)"
    );
    drop(conns);
    ok(&[
        "produce",
        "--broker",
        &b.addr,
        "--topic",
        "alive",
        "--message",
        "yes",
    ]);
}

#[test]
fn a_stopped_consumer_process_loses_its_partitions_and_is_fenced_when_it_continues() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    // A's 400 ms session needs a lower minimum than Kafka's default 6 s.
    let b = BrokerProc::start(
        &dir.path().join("data"),
        &["--group-min-session-timeout-ms", "100"],
    );
    let addr = b.addr.clone();
    ok(&[
        "topics",
        "create",
        "st",
        "--partitions",
        "2",
        "--broker",
        &addr,
    ]);
    let produce = |from: usize, n: usize| {
        block_on(async {
            let p = Producer::connect(&addr).await.unwrap();
            for i in from..from + n {
                p.send("st", Some(format!("k{i}").as_bytes()), b"v")
                    .await
                    .unwrap();
            }
        })
    };
    produce(0, 20);
    // Consumer A: the real CLI in group mode, 400 ms session (what B waits out).
    let mut a = KillOnDrop(
        common::bin()
            .args([
                "consume",
                "--broker",
                &addr,
                "--topic",
                "st",
                "--group",
                "gst",
                "--session-timeout-ms",
                "400",
                "--format",
                "json",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Lines are read on a thread so that the test fails on a deadline instead of hanging.
    let stdout = a.0.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    for i in 0..20 {
        let line = lines.recv_timeout(Duration::from_secs(20));
        assert!(
            matches!(line, Ok(Ok(_))),
            "consumer A printed only {i} of 20 records"
        );
    }
    let pid = a.0.id().to_string();
    std::process::Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap();
    let (b_commits, mut bcons) = block_on(async {
        // B's join completes once A's session has expired: A cannot rejoin while stopped.
        let mut c = flume_client::GroupConsumer::builder(&addr, "gst")
            .topic("st")
            .session_timeout(Duration::from_secs(5))
            .max_wait(Duration::from_millis(100))
            .auto_commit(false)
            .build()
            .await
            .unwrap();
        assert_eq!(
            c.assignment().await.len(),
            2,
            "B owns both partitions of the stopped member"
        );
        produce(20, 10);
        for _ in 0..10 {
            let r = flume_rt::timeout(Duration::from_secs(20), c.recv())
                .await
                .expect("B receives the new records")
                .unwrap()
                .unwrap();
            c.commit(&r).await.unwrap();
        }
        let admin = Admin::connect(&addr).await.unwrap();
        let commits: HashMap<i32, i64> = admin
            .group_offsets("gst", &["st".into()])
            .await
            .unwrap()
            .into_iter()
            .map(|p| (p.partition, p.committed))
            .collect();
        (commits, c)
    });
    // A continues: it is fenced, rejoins, and the group splits the partitions again.
    std::process::Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap();
    block_on(async {
        let deadline = Instant::now() + Duration::from_secs(20);
        while bcons.assignment().await.len() != 1 {
            assert!(Instant::now() < deadline, "no rebalance after A came back");
            let _ = flume_rt::timeout(Duration::from_millis(100), bcons.recv()).await;
        }
        // No commit of A's stale generation overwrote B's: offsets never went backwards.
        let admin = Admin::connect(&addr).await.unwrap();
        for p in admin.group_offsets("gst", &["st".into()]).await.unwrap() {
            assert!(
                p.committed >= b_commits[&p.partition],
                "partition {}: committed {} is behind B's {}",
                p.partition,
                p.committed,
                b_commits[&p.partition]
            );
        }
    });
    drop(a);
}

/// A child process killed when the test ends, passed or failed.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

//! `consume --share-group` and `groups describe` of a share group against a
//! real broker: what one run accepts, rejects or releases is what the next
//! run gets, and the description counts it.

use crate::common;

use common::{ok, BrokerProc};
use flume_client::Producer;

/// The share-partition row of `groups describe`: (start, end, in flight,
/// acquired, available, redelivered, archived).
fn share_row(out: &str) -> Vec<i64> {
    let row = out
        .lines()
        .skip_while(|l| !l.contains("IN-FLIGHT"))
        .nth(1)
        .unwrap_or_else(|| panic!("a share-partition row: {out}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cols[..2], &["t", "0"], "{out}");
    cols[2..].iter().map(|c| c.parse().unwrap()).collect()
}

fn offsets(out: &str) -> Vec<u64> {
    out.lines()
        .map(|l| {
            l.split_whitespace()
                .find_map(|f| f.strip_prefix("offset="))
                .unwrap_or_else(|| panic!("a record line: {l}"))
                .parse()
                .unwrap()
        })
        .collect()
}

#[test]
fn consume_with_a_share_group_accepts_rejects_and_releases_what_it_prints() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(
        &dir.path().join("data"),
        &["--share-auto-offset-reset", "earliest"],
    );
    let addr = b.addr.clone();
    ok(&[
        "topics",
        "create",
        "t",
        "--partitions",
        "1",
        "--broker",
        &addr,
    ]);
    flume_rt::block_on(async {
        let p = Producer::connect(&addr).await.unwrap();
        for i in 0..10 {
            p.send("t", None, format!("v{i}").as_bytes()).await.unwrap();
        }
    });
    let consume = |extra: &[&str]| {
        let mut args = vec![
            "consume",
            "--topic",
            "t",
            "--share-group",
            "q",
            "--broker",
            &addr,
        ];
        args.extend_from_slice(extra);
        ok(&args)
    };
    let accepted = consume(&["--max-messages", "4"]);
    assert_eq!(offsets(&accepted), vec![0, 1, 2, 3], "{accepted}");
    assert!(
        accepted.lines().all(|l| l.contains("value=v")),
        "{accepted}"
    );
    let rejected = consume(&["--max", "3", "--reject"]);
    assert_eq!(offsets(&rejected), vec![4, 5, 6], "{rejected}");
    let released = consume(&["--max", "1", "--release"]);
    assert_eq!(offsets(&released), vec![7], "{released}");

    let list = ok(&["groups", "list", "--broker", &addr]);
    assert!(
        list.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["q", "Empty", "share"]),
        "{list}"
    );
    let out = ok(&["groups", "describe", "q", "--broker", &addr]);
    assert!(out.starts_with("share group q: epoch"), "{out}");
    assert!(out.contains("0 member(s)"), "{out}");
    // Start 7 (the released record is available again), end 10; one record
    // in flight, available; three archived.
    assert_eq!(share_row(&out), vec![7, 10, 1, 0, 1, 0, 3], "{out}");

    // The released record comes back first, then the two never delivered;
    // the rejected ones never do.
    let rest = consume(&["--max", "3"]);
    assert_eq!(offsets(&rest), vec![7, 8, 9], "{rest}");
    let out = ok(&["groups", "describe", "q", "--broker", &addr]);
    assert_eq!(share_row(&out), vec![10, 10, 0, 0, 0, 0, 3], "{out}");
    // Nothing is left: a run with --timeout ends with nothing printed.
    let none = consume(&["--timeout", "700"]);
    assert!(none.is_empty(), "{none}");
}

/// `consume --share-group` over a `kafka://` address (Kafka's share APIs
/// through the SDK): what it accepts or rejects there is done for the
/// group, whichever protocol its next member speaks.
#[test]
fn consume_with_a_share_group_over_kafka_accepts_and_rejects_what_it_prints() {
    let dir = tempfile::tempdir().unwrap();
    let (b, kafka) = BrokerProc::start_with_kafka(
        &dir.path().join("data"),
        &["--share-auto-offset-reset", "earliest"],
    );
    let addr = b.addr.clone();
    let kafka = format!("kafka://{kafka}");
    ok(&[
        "topics",
        "create",
        "t",
        "--partitions",
        "1",
        "--broker",
        &addr,
    ]);
    flume_rt::block_on(async {
        let p = Producer::connect(&addr).await.unwrap();
        for i in 0..6 {
            p.send("t", None, format!("v{i}").as_bytes()).await.unwrap();
        }
    });
    let consume = |broker: &str, extra: &[&str]| {
        let mut args = vec![
            "consume",
            "--topic",
            "t",
            "--share-group",
            "q",
            "--broker",
            broker,
        ];
        args.extend_from_slice(extra);
        ok(&args)
    };
    let accepted = consume(&kafka, &["--max", "3"]);
    assert_eq!(offsets(&accepted), vec![0, 1, 2], "{accepted}");
    let rejected = consume(&kafka, &["--max", "2", "--reject"]);
    assert_eq!(offsets(&rejected), vec![3, 4], "{rejected}");
    let rest = consume(&addr, &["--max", "1"]);
    assert_eq!(offsets(&rest), vec![5], "{rest}");
    let out = ok(&["groups", "describe", "q", "--broker", &addr]);
    assert_eq!(share_row(&out), vec![6, 6, 0, 0, 0, 0, 2], "{out}");
    drop(b);
}

/// A share-group consumer that follows is stopped by Ctrl-C: it exits 0,
/// the records it printed stay accepted and it has left the group.
#[test]
fn an_interrupt_stops_a_share_consumer_which_leaves() {
    use std::io::BufRead;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(
        &dir.path().join("data"),
        &["--share-auto-offset-reset", "earliest"],
    );
    let addr = b.addr.clone();
    ok(&[
        "topics",
        "create",
        "t",
        "--partitions",
        "1",
        "--broker",
        &addr,
    ]);
    flume_rt::block_on(async {
        let p = Producer::connect(&addr).await.unwrap();
        for i in 0..3 {
            p.send("t", None, format!("v{i}").as_bytes()).await.unwrap();
        }
    });
    let mut child = common::bin()
        .args([
            "consume",
            "--topic",
            "t",
            "--share-group",
            "w",
            "--broker",
            &addr,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn consume --share-group");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut lines = Vec::new();
    while lines.len() < 3 {
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the three records printed");
        lines.push(line);
    }
    assert_eq!(offsets(&lines.join("\n")), vec![0, 1, 2]);
    let out = ok(&["groups", "describe", "w", "--broker", &addr]);
    assert!(out.contains("1 member(s)"), "{out}");
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "still running 10 s after SIGINT");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "{status}");
    let out = ok(&["groups", "describe", "w", "--broker", &addr]);
    assert!(out.contains("0 member(s)"), "{out}");
    assert_eq!(share_row(&out), vec![3, 3, 0, 0, 0, 0, 0], "{out}");
}

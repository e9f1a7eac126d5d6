//! The admin commands as a user drives them against a real broker: topics
//! delete and alter, consume --from-time, groups reset-offsets and delete.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{bin, ok, run, stderr, stdout, BrokerProc};
use flume_client::{Producer, ProducerRecord};

fn create(addr: &str, topic: &str, partitions: &str) {
    ok(&[
        "topics",
        "create",
        topic,
        "--partitions",
        partitions,
        "--broker",
        addr,
    ]);
}

/// Sends `(partition, timestamp ms, value)` records with the SDK (the CLI
/// stamps records with the time of sending; these tests need chosen times).
fn send(addr: &str, topic: &str, records: &[(i32, i64, &str)]) {
    flume_rt::block_on(async {
        let p = Producer::connect(addr).await.expect("connect");
        for (partition, ts, value) in records {
            let rec = ProducerRecord::new(topic, value.as_bytes().to_vec())
                .partition(*partition)
                .timestamp(*ts);
            p.send_record(rec).await.expect("send");
        }
    });
}

/// (partition, offset) of every record `consume` printed, in output order, sorted.
fn consumed(args: &[&str]) -> Vec<(i64, i64)> {
    let out = ok(args);
    let mut v: Vec<(i64, i64)> = out
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json line");
            (
                v["partition"].as_i64().unwrap(),
                v["offset"].as_i64().unwrap(),
            )
        })
        .collect();
    v.sort_unstable();
    v
}

fn fails(args: &[&str]) -> String {
    let o = run(args);
    assert!(
        !o.status.success(),
        "flume-cli {args:?} succeeded: {}",
        stdout(&o)
    );
    stderr(&o)
}

/// The committed offset column of `groups lag` per partition.
fn committed(addr: &str, group: &str, topic: &str) -> Vec<String> {
    ok(&[
        "groups", "lag", "--group", group, "--topic", topic, "--broker", addr,
    ])
    .lines()
    .skip(1)
    .map(|l| l.split_whitespace().nth(2).unwrap_or("?").to_owned())
    .collect()
}

#[test]
fn help_lists_the_admin_commands() {
    let topics = ok(&["topics", "--help"]);
    for c in ["delete", "alter"] {
        assert!(topics.contains(c), "{topics}");
    }
    let groups = ok(&["groups", "--help"]);
    for c in ["reset-offsets", "delete"] {
        assert!(groups.contains(c), "{groups}");
    }
    assert!(ok(&["consume", "--help"]).contains("--from-time"));
    // alter needs something to change.
    let o = run(&["topics", "alter", "t"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn topics_delete_removes_the_topic_its_files_and_its_commits() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let b = BrokerProc::start(&data, &[]);
    let a = b.addr.as_str();
    create(a, "doomed", "2");
    send(a, "doomed", &[(0, 1, "a"), (1, 2, "b"), (1, 3, "c")]);
    ok(&[
        "groups",
        "reset-offsets",
        "g",
        "--topic",
        "doomed",
        "--to",
        "latest",
        "--broker",
        a,
    ]);
    assert_eq!(committed(a, "g", "doomed"), vec!["1", "2"]);
    assert!(data.join("doomed").exists());

    let out = ok(&["topics", "delete", "doomed", "--broker", a]);
    assert!(out.contains("deleted topic doomed"), "{out}");
    assert!(
        !data.join("doomed").exists(),
        "the topic's directory is still there"
    );
    assert!(fails(&["topics", "describe", "doomed", "--broker", a]).contains("does not exist"));
    let err = fails(&["topics", "delete", "doomed", "--broker", a]);
    assert!(err.contains("topic doomed does not exist"), "{err}");
    assert!(!ok(&["topics", "list", "--broker", a]).contains("doomed"));

    // The name is free again, and the old commits are gone with the old topic.
    create(a, "doomed", "1");
    let err = fails(&[
        "groups", "lag", "--group", "g", "--topic", "doomed", "--broker", a,
    ]);
    assert!(err.contains("no committed offset"), "{err}");
    send(a, "doomed", &[(0, 5, "new")]);
    assert_eq!(
        consumed(&["consume", "--topic", "doomed", "--format", "json", "--broker", a]),
        vec![(0, 0)]
    );
}

#[test]
fn topics_alter_changes_retention_and_the_change_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let b = BrokerProc::start(&data, &[]);
    let a = b.addr.clone();
    create(&a, "kept", "1");
    let before = ok(&["topics", "describe", "kept", "--broker", &a]);
    assert!(
        before.contains("retention.ms=none retention.bytes=none"),
        "{before}"
    );
    let out = ok(&[
        "topics",
        "alter",
        "kept",
        "--retention-ms",
        "3600000",
        "--retention-bytes",
        "1048576",
        "--broker",
        &a,
    ]);
    assert!(
        out.contains("retention.ms=3600000 retention.bytes=1048576"),
        "{out}"
    );
    let out = ok(&[
        "topics",
        "alter",
        "kept",
        "--retention-bytes",
        "none",
        "--broker",
        &a,
    ]);
    assert!(
        out.contains("retention.ms=3600000 retention.bytes=none"),
        "{out}"
    );
    assert!(fails(&[
        "topics",
        "alter",
        "nope",
        "--retention-ms",
        "5",
        "--broker",
        &a
    ])
    .contains("topic nope does not exist"));
    let o = run(&[
        "topics",
        "alter",
        "kept",
        "--retention-ms",
        "0",
        "--broker",
        &a,
    ]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "0 is refused (none removes the limit)"
    );
    assert!(b.interrupt().success());

    let b = BrokerProc::start(&data, &[]);
    let after = ok(&["topics", "describe", "kept", "--broker", &b.addr]);
    assert!(
        after.contains("retention.ms=3600000 retention.bytes=none"),
        "{after}"
    );
}

#[test]
fn consume_from_time_starts_each_partition_at_its_first_record_at_or_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(&dir.path().join("data"), &[]);
    let a = b.addr.as_str();
    create(a, "events", "2");
    // Partition 0: 1000, 3000 (a late clock), 2000, 4000; partition 1: 1500.
    send(
        a,
        "events",
        &[
            (0, 1_000, "a"),
            (0, 3_000, "b"),
            (0, 2_000, "c"),
            (0, 4_000, "d"),
            (1, 1_500, "e"),
        ],
    );
    let from = |t: &str| {
        consumed(&[
            "consume",
            "--topic",
            "events",
            "--from-time",
            t,
            "--format",
            "json",
            "--broker",
            a,
        ])
    };
    // The first offset whose timestamp is at or after the time, then everything after it.
    assert_eq!(from("1970-01-01T00:00:02Z"), vec![(0, 1), (0, 2), (0, 3)]);
    assert_eq!(from("@1500"), vec![(0, 1), (0, 2), (0, 3), (1, 0)]);
    assert_eq!(from("1000"), vec![(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]);
    assert_eq!(
        from("1970-01-01T01:00:00+01:00"),
        vec![(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]
    );
    assert!(from("2030-01-01T00:00:00Z").is_empty());
    let o = run(&[
        "consume",
        "--topic",
        "events",
        "--from-time",
        "yesterday",
        "--broker",
        a,
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("RFC 3339"), "{}", stderr(&o));
    let o = run(&[
        "consume",
        "--topic",
        "events",
        "--from-time",
        "5",
        "--group",
        "g",
        "--broker",
        a,
    ]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "--from-time is for partition mode"
    );
}

/// A group-mode consumer that follows until interrupted.
fn member(addr: &str, group: &str, topic: &str) -> Child {
    bin()
        .args([
            "consume", "--topic", topic, "--group", group, "--follow", "--broker", addr,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn consume --group")
}

fn interrupt(mut child: Child) {
    let pid = child.id().to_string();
    std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "consumer did not exit");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn groups_reset_offsets_and_delete_only_while_the_group_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(&dir.path().join("data"), &[]);
    let a = b.addr.as_str();
    create(a, "orders", "2");
    send(
        a,
        "orders",
        &[
            (0, 1_000, "a"),
            (0, 2_000, "b"),
            (0, 3_000, "c"),
            (1, 1_000, "d"),
            (1, 5_000, "e"),
        ],
    );
    let reset = |to: &str| {
        ok(&[
            "groups",
            "reset-offsets",
            "billing",
            "--topic",
            "orders",
            "--to",
            to,
            "--broker",
            a,
        ])
    };
    let out = reset("earliest");
    assert!(
        out.contains("reset group billing on orders: 2 partitions"),
        "{out}"
    );
    assert_eq!(committed(a, "billing", "orders"), vec!["0", "0"]);
    reset("latest");
    assert_eq!(committed(a, "billing", "orders"), vec!["3", "2"]);
    let out = reset("1");
    assert_eq!(committed(a, "billing", "orders"), vec!["1", "1"]);
    assert!(!out.contains("moved"), "{out}");
    let out = reset("9");
    assert!(out.contains("past the log end"), "{out}");
    assert_eq!(committed(a, "billing", "orders"), vec!["3", "2"]);
    reset("@2000");
    assert_eq!(committed(a, "billing", "orders"), vec!["1", "1"]);
    let out = reset("1970-01-01T00:00:04Z");
    assert_eq!(committed(a, "billing", "orders"), vec!["3", "1"]);
    assert!(out.contains("no record at or after the time"), "{out}");
    // --dry-run shows the plan and commits nothing.
    let out = ok(&[
        "groups",
        "reset-offsets",
        "billing",
        "--topic",
        "orders",
        "--to",
        "earliest",
        "--dry-run",
        "--broker",
        a,
    ]);
    assert!(out.contains("dry run: nothing committed"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["orders", "0", "3", "0"]),
        "{out}"
    );
    assert_eq!(committed(a, "billing", "orders"), vec!["3", "1"]);
    let o = run(&[
        "groups",
        "reset-offsets",
        "billing",
        "--topic",
        "orders",
        "--to",
        "soon",
        "--broker",
        a,
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(fails(&[
        "groups",
        "reset-offsets",
        "billing",
        "--topic",
        "nope",
        "--to",
        "earliest",
        "--broker",
        a
    ])
    .contains("topic nope does not exist"));

    // With a member in the group: both refused, with a clear message; the dry run says so.
    let mut m = member(a, "billing", "orders");
    let lines = BufReader::new(m.stdout.take().unwrap());
    let reader = std::thread::spawn(move || lines.lines().count());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let o = run(&[
            "groups",
            "reset-offsets",
            "billing",
            "--topic",
            "orders",
            "--to",
            "earliest",
            "--dry-run",
            "--broker",
            a,
        ]);
        if stdout(&o).contains("has active members") {
            break;
        }
        assert!(Instant::now() < deadline, "the member never joined");
        std::thread::sleep(Duration::from_millis(20));
    }
    let err = fails(&[
        "groups",
        "reset-offsets",
        "billing",
        "--topic",
        "orders",
        "--to",
        "earliest",
        "--broker",
        a,
    ]);
    assert!(err.contains("group billing has active members"), "{err}");
    let err = fails(&["groups", "delete", "billing", "--broker", a]);
    assert!(err.contains("group billing has active members"), "{err}");
    interrupt(m);
    reader.join().unwrap();

    // Empty again (the member left on Ctrl-C): the group and its commits go.
    let out = ok(&["groups", "delete", "billing", "--broker", a]);
    assert!(
        out.contains("deleted group billing (2 committed offsets dropped)"),
        "{out}"
    );
    let err = fails(&[
        "groups", "lag", "--group", "billing", "--topic", "orders", "--broker", a,
    ]);
    assert!(err.contains("no committed offset"), "{err}");
    let err = fails(&["groups", "delete", "billing", "--broker", a]);
    assert!(err.contains("group billing does not exist"), "{err}");
}

#[test]
fn topics_add_partitions_grows_a_topic_and_the_count_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let b = BrokerProc::start(&data, &[]);
    let a = b.addr.as_str();
    create(a, "grow", "2");
    let out = ok(&[
        "topics",
        "add-partitions",
        "grow",
        "--partitions",
        "5",
        "--dry-run",
        "--broker",
        a,
    ]);
    assert!(out.contains("would grow from 2 to 5"), "{out}");
    assert!(ok(&["topics", "describe", "grow", "--broker", a]).contains("2 partitions"));
    let out = ok(&[
        "topics",
        "add-partitions",
        "grow",
        "--partitions",
        "5",
        "--broker",
        a,
    ]);
    assert!(out.contains("now has 5 partitions (it had 2)"), "{out}");
    let err = fails(&[
        "topics",
        "add-partitions",
        "grow",
        "--partitions",
        "3",
        "--broker",
        a,
    ]);
    assert!(
        err.contains("has 5 partitions") && err.contains("never removed"),
        "{err}"
    );
    let err = fails(&[
        "topics",
        "add-partitions",
        "nope",
        "--partitions",
        "3",
        "--broker",
        a,
    ]);
    assert!(err.contains("topic nope does not exist"), "{err}");
    send(a, "grow", &[(4, 1, "on a new partition")]);
    b.interrupt();
    let b = BrokerProc::start(&data, &[]);
    let a = b.addr.as_str();
    let out = ok(&["topics", "describe", "grow", "--broker", a]);
    assert!(out.contains("topic grow: 5 partitions"), "{out}");
    assert_eq!(
        consumed(&["consume", "--topic", "grow", "--format", "json", "--broker", a]),
        vec![(4, 0)]
    );
}

#[test]
fn groups_delete_offsets_drops_one_topics_commits_and_groups_delete_takes_group_flag() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let b = BrokerProc::start(&data, &[]);
    let a = b.addr.as_str();
    create(a, "t", "2");
    create(a, "u", "1");
    send(a, "t", &[(0, 1, "a"), (1, 2, "b")]);
    send(a, "u", &[(0, 3, "c")]);
    for topic in ["t", "u"] {
        ok(&[
            "groups",
            "reset-offsets",
            "g",
            "--topic",
            topic,
            "--to",
            "latest",
            "--broker",
            a,
        ]);
    }
    let out = ok(&[
        "groups",
        "delete-offsets",
        "--group",
        "g",
        "--topic",
        "t",
        "--partition",
        "1",
        "--broker",
        a,
    ]);
    assert!(out.contains("on t partition 1"), "{out}");
    assert_eq!(committed(a, "g", "t"), vec!["1", "-"]);
    ok(&[
        "groups",
        "delete-offsets",
        "--group",
        "g",
        "--topic",
        "t",
        "--broker",
        a,
    ]);
    let err = fails(&[
        "groups", "lag", "--group", "g", "--topic", "t", "--broker", a,
    ]);
    assert!(err.contains("no committed offset"), "{err}");
    assert_eq!(
        committed(a, "g", "u"),
        vec!["1"],
        "other topics keep theirs"
    );
    let err = fails(&[
        "groups",
        "delete-offsets",
        "--group",
        "g",
        "--topic",
        "t",
        "--partition",
        "9",
        "--broker",
        a,
    ]);
    assert!(err.contains("no such partition"), "{err}");
    let err = fails(&[
        "groups",
        "delete-offsets",
        "--group",
        "nobody",
        "--topic",
        "t",
        "--broker",
        a,
    ]);
    assert!(err.contains("group nobody does not exist"), "{err}");
    let out = ok(&["groups", "delete", "--group", "g", "--broker", a]);
    assert!(
        out.contains("deleted group g (1 committed offsets dropped)"),
        "{out}"
    );
    let err = fails(&["groups", "delete", "--group", "g", "--broker", a]);
    assert!(err.contains("does not exist"), "{err}");
}

#[test]
fn topics_delete_records_moves_the_log_start() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(&dir.path().join("data"), &[]);
    let a = b.addr.as_str();
    create(a, "dr", "1");
    send(
        a,
        "dr",
        &[(0, 1, "a"), (0, 2, "b"), (0, 3, "c"), (0, 4, "d")],
    );
    let out = ok(&[
        "topics",
        "delete-records",
        "dr",
        "--partition",
        "0",
        "--before",
        "2",
        "--broker",
        a,
    ]);
    assert_eq!(out.trim(), "topic dr partition 0: log start 2");
    assert_eq!(
        consumed(&["consume", "--topic", "dr", "--format", "json", "--broker", a]),
        vec![(0, 2), (0, 3)]
    );
    // `data dump` starts where consumers do, and refuses below it.
    let data = dir.path().join("data");
    let d = data.to_str().unwrap();
    let dump = [
        "data",
        "dump",
        d,
        "--topic",
        "dr",
        "--partition",
        "0",
        "--force-read-only",
    ];
    let offsets: Vec<String> = ok(&dump)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    assert_eq!(offsets, ["offset=2", "offset=3"]);
    let err = fails(&[&dump[..], &["--offset", "1"]].concat());
    assert!(err.contains("below the log start, 2"), "{err}");
    let err = fails(&[
        "topics",
        "delete-records",
        "dr",
        "--partition",
        "0",
        "--before",
        "9",
        "--broker",
        a,
    ]);
    assert!(
        err.contains("offset 9 is past the end of dr partition 0"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let out = ok(&[
        "topics",
        "delete-records",
        "dr",
        "--partition",
        "0",
        "--all",
        "--broker",
        a,
    ]);
    assert_eq!(out.trim(), "topic dr partition 0: log start 4");
    let err = fails(&[
        "topics",
        "delete-records",
        "dr",
        "--partition",
        "0",
        "--broker",
        a,
    ]);
    assert!(err.contains("--before"), "{err}");
}

/// The line of `topics describe`'s config table for `name`: (value, source).
fn config_row(describe: &str, name: &str) -> Option<(String, String)> {
    describe.lines().find_map(|l| {
        let mut cols = l.split_whitespace();
        if cols.next() != Some(name) {
            return None;
        }
        let value = cols.next()?.to_owned();
        Some((value, cols.next()?.to_owned()))
    })
}

#[test]
fn topics_create_alter_and_describe_take_kafka_config_names() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let b = BrokerProc::start(&data, &["--topic-config", "max.message.bytes=2000000"]);
    let a = b.addr.clone();
    ok(&[
        "topics",
        "create",
        "changelog",
        "--partitions",
        "2",
        "--retention-ms",
        "3600000",
        "--config",
        "cleanup.policy=compact",
        "--config",
        "min.compaction.lag.ms=1000",
        "--broker",
        &a,
    ]);
    let d = ok(&["topics", "describe", "changelog", "--broker", &a]);
    let row = |n: &str| config_row(&d, n).unwrap_or_else(|| panic!("{n} in {d}"));
    assert_eq!(row("cleanup.policy"), ("compact".into(), "topic".into()));
    assert_eq!(row("retention.ms"), ("3600000".into(), "topic".into()));
    assert_eq!(
        row("min.compaction.lag.ms"),
        ("1000".into(), "topic".into())
    );
    assert_eq!(
        row("max.message.bytes"),
        ("2000000".into(), "broker".into())
    );
    assert_eq!(
        row("delete.retention.ms"),
        ("86400000".into(), "default".into())
    );
    let err = fails(&[
        "topics",
        "create",
        "bad",
        "--config",
        "cleanup.policy=shred",
        "--broker",
        &a,
    ]);
    assert!(
        err.contains("cleanup.policy") && err.contains("shred"),
        "{err}"
    );
    let err = fails(&[
        "topics", "create", "bad", "--config", "novalue", "--broker", &a,
    ]);
    assert!(err.contains("NAME=VALUE"), "{err}");
    let out = ok(&[
        "topics",
        "alter",
        "changelog",
        "--config",
        "cleanup.policy=compact,delete",
        "--delete-config",
        "min.compaction.lag.ms",
        "--broker",
        &a,
    ]);
    assert!(out.contains("cleanup.policy=compact,delete"), "{out}");
    assert!(out.contains("min.compaction.lag.ms=0"), "{out}");
    let err = fails(&[
        "topics",
        "alter",
        "changelog",
        "--config",
        "no.such.config=1",
        "--broker",
        &a,
    ]);
    assert!(err.contains("no.such.config"), "{err}");
    assert!(b.interrupt().success());

    let b = BrokerProc::start(&data, &[]);
    let d = ok(&["topics", "describe", "changelog", "--broker", &b.addr]);
    assert_eq!(
        config_row(&d, "cleanup.policy"),
        Some(("compact,delete".into(), "topic".into()))
    );
    assert_eq!(
        config_row(&d, "min.compaction.lag.ms"),
        Some(("0".into(), "default".into()))
    );
    // Set on the topic at creation, kept when the broker default is gone.
    assert_eq!(
        config_row(&d, "max.message.bytes"),
        Some(("2000000".into(), "topic".into()))
    );
    // The empty list: no cleanup at all (Kafka 4), shown as "".
    ok(&[
        "topics",
        "alter",
        "changelog",
        "--config",
        "cleanup.policy=",
        "--broker",
        &b.addr,
    ]);
    let d = ok(&["topics", "describe", "changelog", "--broker", &b.addr]);
    assert_eq!(
        config_row(&d, "cleanup.policy"),
        Some(("\"\"".into(), "topic".into()))
    );
    assert!(b.interrupt().success());
}

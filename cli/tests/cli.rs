//! The binary as a user drives it.

use crate::common;

use std::io::Write;
use std::process::Stdio;

use common::{ok, run, stderr, BrokerProc};

#[test]
fn quick_start_produce_and_consume_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(&dir.path().join("data"), &[]);
    let a = b.addr.as_str();
    let p1 = ok(&[
        "produce",
        "--broker",
        a,
        "--topic",
        "orders",
        "--key",
        "user-123",
        "--message",
        r#"{"item": "widget"}"#,
    ]);
    let p2 = ok(&[
        "produce",
        "--broker",
        a,
        "--topic",
        "orders",
        "--key",
        "user-123",
        "--message",
        r#"{"item": "gadget"}"#,
    ]);
    let part = |s: &str| {
        s.split_whitespace()
            .find_map(|w| w.strip_prefix("partition="))
            .unwrap()
            .to_owned()
    };
    assert_eq!(part(&p1), part(&p2), "same key, same partition");
    assert!(p2.contains("offset=1"));
    let out = ok(&[
        "consume",
        "--broker",
        a,
        "--topic",
        "orders",
        "--partition",
        &part(&p1),
        "--offset",
        "0",
    ]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].contains("widget")
            && lines[0].contains("offset=0")
            && lines[0].contains("key=user-123")
    );
    assert!(lines[1].contains("gadget") && lines[1].contains("offset=1"));
    let json = ok(&[
        "consume",
        "--broker",
        a,
        "--topic",
        "orders",
        "--partition",
        &part(&p1),
        "--offset",
        "1",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(v["offset"], 1);
    assert_eq!(v["key"], "user-123");
    assert_eq!(v["value"], r#"{"item": "gadget"}"#);
    assert!(v["timestamp"].as_i64().unwrap() > 0);
}

#[test]
fn stdin_lines_topics_groups_and_lag() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(&dir.path().join("data"), &[]);
    let a = b.addr.as_str();
    assert!(
        ok(&["topics", "create", "ev", "--partitions", "2", "--broker", a]).contains("created")
    );
    let err = run(&["topics", "create", "ev", "--partitions", "2", "--broker", a]);
    assert!(!err.status.success());
    assert!(stderr(&err).contains("TOPIC_ALREADY_EXISTS"));
    let mut child = common::bin()
        .args([
            "produce",
            "--broker",
            a,
            "--topic",
            "ev",
            "--key-separator",
            ":",
            "--quiet",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for i in 0..50 {
            writeln!(stdin, "k{}:value-{i}", i % 4).unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("50 records sent"));
    let list = ok(&["topics", "list", "--broker", a]);
    assert!(list.contains("ev\tpartitions=2\trecords=50"), "{list}");
    let desc = ok(&["topics", "describe", "ev", "--broker", a]);
    // The topic line, its settings, a table of every config, then the
    // partitions' header and one line per partition.
    let partitions = desc
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("PARTITION"))
        .count();
    assert_eq!(partitions, 3, "{desc}");
    assert!(desc.contains("cleanup.policy"), "{desc}");
    assert!(
        desc.lines()
            .nth(1)
            .unwrap()
            .starts_with("partitions=2 retention.ms=none"),
        "{desc}"
    );
    // A group reads 30, commits them, leaves; lag shows 20 left.
    let got = ok(&[
        "consume", "--broker", a, "--topic", "ev", "--group", "g1", "--max", "30", "--format",
        "json",
    ]);
    assert_eq!(got.lines().count(), 30);
    let lag = ok(&[
        "groups", "lag", "--group", "g1", "--topic", "ev", "--broker", a,
    ]);
    let total: i64 = lag
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().last().unwrap().parse::<i64>().unwrap())
        .sum();
    assert_eq!(total, 20, "{lag}");
    // The group resumes where it left off.
    let rest = ok(&[
        "consume", "--broker", a, "--topic", "ev", "--group", "g1", "--max", "20",
    ]);
    assert_eq!(rest.lines().count(), 20);
    let lag = ok(&[
        "groups", "lag", "--group", "g1", "--topic", "ev", "--broker", a,
    ]);
    assert!(lag.lines().skip(1).all(|l| l.ends_with(" 0")), "{lag}");
}

#[test]
fn mistakes_get_one_clear_line_and_a_nonzero_exit() {
    for args in [
        vec!["broker", "--fsync", "sometimes"],
        vec!["broker", "--partitions", "0"],
        vec!["broker", "--busy-poll-us", "2000000"],
        vec!["consume", "--topic"],
        vec![
            "produce",
            "--broker",
            "127.0.0.1:1",
            "--topic",
            "t",
            "--message",
            "m",
        ],
        vec!["topics", "list", "--broker", "127.0.0.1:1"],
        vec![
            "perf",
            "produce",
            "--broker",
            "127.0.0.1:1",
            "--topic",
            "t",
            "--records",
            "10",
        ],
        vec!["nonsense"],
    ] {
        let o = run(&args);
        assert!(!o.status.success(), "{args:?} should fail");
        let e = stderr(&o);
        assert!(
            e.lines().next().unwrap_or("").starts_with("error:"),
            "{args:?}: {e}"
        );
        assert!(
            !e.contains("panicked") && !e.contains("RUST_BACKTRACE"),
            "{args:?}: {e}"
        );
    }
    let o = run(&[
        "produce",
        "--broker",
        "127.0.0.1:1",
        "--topic",
        "t",
        "--message",
        "m",
    ]);
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot connect to broker at 127.0.0.1:1"));
    // Settings that do not fit together are named, before anything is opened.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let o = run(&[
        "broker",
        "--port",
        "0",
        "--data",
        data.to_str().unwrap(),
        "--max-request-memory",
        "5000",
    ]);
    assert!(!o.status.success());
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("max_request_memory (5000) must be at least max_frame_bytes"),
        "{}",
        stderr(&o)
    );
    assert!(
        !data.exists(),
        "nothing is created for a refused configuration"
    );
}

#[test]
fn ctrl_c_shuts_down_gracefully_and_data_survives() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let b = BrokerProc::start(&data, &[]);
    let a = b.addr.clone();
    for i in 0..20 {
        ok(&[
            "produce",
            "--broker",
            &a,
            "--topic",
            "keep",
            "--partition",
            "0",
            "--message",
            &format!("m{i}"),
            "--quiet",
        ]);
    }
    let st = b.interrupt();
    assert!(st.success(), "{st:?}");
    let b = BrokerProc::start(&data, &[]);
    let out = ok(&[
        "consume",
        "--broker",
        &b.addr,
        "--topic",
        "keep",
        "--partition",
        "0",
    ]);
    assert_eq!(out.lines().count(), 20);
    assert!(out.lines().last().unwrap().contains("value=m19"));
}

#[test]
fn perf_tools_report_summaries() {
    let dir = tempfile::tempdir().unwrap();
    // Both sides spin briefly for their next message (a tuning, not a behaviour change).
    let b = BrokerProc::start(&dir.path().join("data"), &["--busy-poll-us", "20"]);
    let a = b.addr.as_str();
    let out = ok(&[
        "perf",
        "produce",
        "--broker",
        a,
        "--topic",
        "p",
        "--records",
        "2000",
        "--record-size",
        "50",
        "--key-cardinality",
        "10",
        "--producers",
        "2",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["records"], 2000);
    assert!(v["latency_ms"]["p99"].as_f64().unwrap() >= v["latency_ms"]["p50"].as_f64().unwrap());
    let out = ok(&[
        "perf",
        "produce",
        "--broker",
        a,
        "--topic",
        "p",
        "--records",
        "50",
        "--sync",
        "--busy-poll-us",
        "20",
    ]);
    assert!(out.contains("50 records"), "{out}");
    let out = ok(&[
        "perf",
        "consume",
        "--broker",
        a,
        "--topic",
        "p",
        "--records",
        "2000",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(v["records"].as_u64().unwrap() >= 2000);
    let out = ok(&[
        "perf",
        "consume",
        "--broker",
        a,
        "--topic",
        "p",
        "--records",
        "1000",
        "--group",
        "pg",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["records"], 1000);
    // Produce-to-group-consumer latency: every record sent is received and timed.
    let out = ok(&[
        "perf",
        "e2e",
        "--broker",
        a,
        "--topic",
        "lat",
        "--records",
        "500",
        "--rate",
        "5000",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["records"], 500);
    let ms = |k: &str| v["latency_ms"][k].as_f64().unwrap();
    assert!(ms("p50") <= ms("p99") && ms("p99") <= ms("max"), "{v}");
}

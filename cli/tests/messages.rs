//! What the binary says when something is wrong, and what its help promises.

use crate::common;

use std::net::TcpListener;

use common::{ok, run, stderr, stdout, BrokerProc};

/// One line on stderr, starting with `error:`, and a non-zero exit.
fn one_error_line(args: &[&str]) -> String {
    let o = run(args);
    assert!(!o.status.success(), "{args:?} should fail");
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{args:?}: {e}");
    assert!(e.starts_with("error:"), "{args:?}: {e}");
    e
}

#[test]
fn a_cause_is_said_once() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let e = one_error_line(&["broker", "--port", &port, "--data", data.to_str().unwrap()]);
    assert_eq!(e.matches("Address already in use").count(), 1, "{e}");
}

#[test]
fn a_data_path_that_is_a_file_is_not_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let e = one_error_line(&["broker", "--port", "0", "--data", file.to_str().unwrap()]);
    assert!(e.contains("is not a directory"), "{e}");
}

#[test]
fn broker_errors_name_the_rules_and_no_partition_minus_one() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(&dir.path().join("data"), &[]);
    let a = b.addr.as_str();
    let e = one_error_line(&[
        "produce",
        "--broker",
        a,
        "--topic",
        "../escape",
        "--message",
        "m",
    ]);
    assert!(!e.contains("-1"), "{e}");
    assert!(
        e.contains("INVALID_NAME") && e.contains("1 to 249 characters"),
        "{e}"
    );
    // Auto-create is on: consuming a missing topic does not suggest turning it on.
    let e = one_error_line(&["consume", "--broker", a, "--topic", "missing"]);
    assert!(
        e.contains("topic missing does not exist") && !e.contains("auto-create"),
        "{e}"
    );
    let b2 = BrokerProc::start(&dir.path().join("data2"), &["--no-auto-create"]);
    let e = one_error_line(&[
        "produce",
        "--broker",
        &b2.addr,
        "--topic",
        "nope",
        "--message",
        "m",
    ]);
    assert!(
        e.contains("UNKNOWN_TOPIC") && e.contains("topics create"),
        "{e}"
    );
    assert!(!e.contains("-1"), "{e}");
}

#[test]
fn numbers_out_of_range_get_a_range_error() {
    for (args, want) in [
        (
            vec!["topics", "create", "t", "--partitions", "-1"],
            "-1 is not in 1..=10000",
        ),
        (
            vec!["broker", "--partitions", "-1"],
            "-1 is not in 1..=10000",
        ),
        (
            vec!["perf", "produce", "--topic", "t", "--records", "-5"],
            "-5 is not in 1..",
        ),
        (
            vec!["consume", "--topic", "t", "--partition", "-1"],
            "-1 is not in 0..",
        ),
        (
            vec!["broker", "--max-record-bytes", "0"],
            "0 is not in 64..",
        ),
        (vec!["broker", "--fsync", "0"], "use `always`"),
    ] {
        let e = one_error_line(&args);
        assert!(e.contains(want), "{args:?}: {e}");
        assert!(!e.contains("unexpected argument"), "{args:?}: {e}");
    }
    // A flag mistake keeps clap's tip, on the same line.
    let e = one_error_line(&["consume", "--topc", "x"]);
    assert!(e.contains("similar argument exists: '--topic'"), "{e}");
    let help = ok(&["--help"]);
    assert!(help.contains("Usage:"));
}

#[test]
fn produce_help_describes_what_it_prints() {
    let help = ok(&["produce", "--help"]);
    assert!(!help.contains("key=K value=V"), "{help}");
    assert!(
        help.contains("line=N") && help.contains("partition=P offset=O"),
        "{help}"
    );
    let help = ok(&["consume", "--help"]);
    assert!(
        help.contains("absent") && help.contains("--exit-at-end"),
        "{help}"
    );
}

#[test]
fn perf_says_how_latency_was_sampled() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(&dir.path().join("data"), &[]);
    let out = ok(&[
        "perf",
        "produce",
        "--broker",
        &b.addr,
        "--topic",
        "s",
        "--records",
        "200",
    ]);
    assert!(
        out.contains("1 in 8 records timed") && out.contains(" samples"),
        "{out}"
    );
    let out = ok(&[
        "perf",
        "produce",
        "--broker",
        &b.addr,
        "--topic",
        "s",
        "--records",
        "20",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(v["latency_samples"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["latency_sampling"], "1 in 8 records timed");
    let o = run(&[
        "perf",
        "produce",
        "--broker",
        &b.addr,
        "--topic",
        "s",
        "--records",
        "0",
    ]);
    assert!(!o.status.success());
    assert!(stdout(&o).is_empty());
}

#[test]
fn perf_prints_a_partial_summary_when_the_broker_goes_away() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(&dir.path().join("data"), &[]);
    let child = common::bin()
        .args([
            "perf",
            "produce",
            "--broker",
            &b.addr,
            "--topic",
            "gone",
            "--records",
            "50000000",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Kill the broker once records are flowing.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let list = ok(&["topics", "list", "--broker", &b.addr]);
        let records = list
            .split("records=")
            .nth(1)
            .and_then(|r| r.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if records > 1000 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no records flowing: {list}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    b.kill();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let so = stdout(&out);
    assert!(so.starts_with("PARTIAL") && so.contains(" samples"), "{so}");
    let e = stderr(&out);
    assert!(
        e.lines()
            .last()
            .unwrap_or("")
            .starts_with("error: perf produce stopped after"),
        "{e}"
    );
}

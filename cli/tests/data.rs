//! `flume-cli data check|dump|usage` on a stopped broker's data directory.

use crate::common;

use std::io::Write;
use std::process::Stdio;

use common::{bin, ok, run, stderr, stdout, BrokerProc};

fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn dump_prints_what_a_consumer_gets_and_check_names_each_damage() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = data.to_str().unwrap();
    let b = BrokerProc::start(&data, &["--segment-bytes", "1024", "--partitions", "1"]);
    let mut child = bin()
        .args([
            "produce",
            "--broker",
            &b.addr,
            "--topic",
            "t",
            "--key-separator",
            ":",
            "-H",
            "source=test",
            "--quiet",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = String::new();
    for i in 0..40 {
        lines.push_str(&format!(
            "k{i}:value {i} \"quoted\" {}\n",
            "x".repeat(i * 3)
        ));
    }
    child
        .stdin
        .take()
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
    // No key, bytes that are not UTF-8.
    ok(&[
        "produce",
        "--broker",
        &b.addr,
        "--topic",
        "t",
        "--value-format",
        "hex",
        "--message",
        "00ff7f",
    ]);
    let consumed = ok(&[
        "consume",
        "--broker",
        &b.addr,
        "--topic",
        "t",
        "--partition",
        "0",
        "--format",
        "json",
    ]);
    let consumed_plain = ok(&[
        "consume",
        "--broker",
        &b.addr,
        "--topic",
        "t",
        "--partition",
        "0",
        "--offset",
        "5",
    ]);

    // While the broker runs: refused, naming it; forced, read.
    let refused = run(&["data", "check", d]);
    assert!(!refused.status.success());
    let err = stderr(&refused);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&format!("pid {}", b.child.id())), "{err}");
    assert!(err.contains("--force-read-only"), "{err}");
    let forced = run(&["data", "check", d, "--force-read-only"]);
    assert!(forced.status.success(), "{}", stderr(&forced));
    assert!(stderr(&forced).contains("reading it anyway"));
    assert!(b.interrupt().success());

    let before = snapshot(&data);
    let dumped = ok(&[
        "data",
        "dump",
        d,
        "--topic",
        "t",
        "--partition",
        "0",
        "--format",
        "json",
    ]);
    let (want, got) = (json_lines(&consumed), json_lines(&dumped));
    assert_eq!(want.len(), 41);
    assert_eq!(got.len(), want.len());
    for (c, g) in want.iter().zip(&got) {
        for field in [
            "partition",
            "offset",
            "timestamp",
            "key",
            "value",
            "headers",
        ] {
            assert_eq!(c[field], g[field], "{field}: {c} vs {g}");
        }
        assert!(
            g["position"].as_u64().is_some() && g["crc"].as_u64().is_some(),
            "{g}"
        );
    }
    assert_eq!(got[40]["value"]["hex"], "00ff7f");
    assert!(got[40]["key"].is_null());
    // Plain: consume's fields after the place of each record.
    let plain = ok(&[
        "data",
        "dump",
        d,
        "--topic",
        "t",
        "--partition",
        "0",
        "--offset",
        "5",
        "--count",
        "2",
    ]);
    let plain: Vec<&str> = plain.lines().collect();
    assert_eq!(plain.len(), 2, "{plain:?}");
    for (i, line) in plain.iter().enumerate() {
        let o = 5 + i;
        let c = consumed_plain.lines().nth(i).unwrap();
        let fields = c.strip_prefix(&format!("partition=0 offset={o} ")).unwrap();
        let g = &got[o];
        let head = format!(
            "offset={o} position={} timestamp={} size={} crc={:#010x} ",
            g["position"],
            g["timestamp"],
            g["size"],
            g["crc"].as_u64().unwrap()
        );
        assert_eq!(*line, format!("{head}{fields}"));
    }
    assert!(
        plain[0].contains("key=k5 headers=source=test value="),
        "{}",
        plain[0]
    );

    let clean = run(&["data", "check", d]);
    assert!(
        clean.status.success(),
        "{}{}",
        stdout(&clean),
        stderr(&clean)
    );
    let report = stdout(&clean);
    assert!(report.contains("t/0: "), "{report}");
    assert!(report.contains("offsets 0..41"), "{report}");
    assert!(report.contains("0 damaged, 0 problems"), "{report}");
    let usage = ok(&["data", "usage", d]);
    assert!(
        usage
            .lines()
            .any(|l| l.split_whitespace().take(2).eq(["t", "0"])),
        "{usage}"
    );
    assert_eq!(snapshot(&data), before, "the data tools wrote nothing");

    // A flipped byte in a sealed segment: file, offset and byte position.
    let victim = &got[3];
    let segment = data
        .join("t/partition-0")
        .join(victim["segment"].as_str().unwrap());
    let pos = victim["position"].as_u64().unwrap();
    let mut raw = std::fs::read(&segment).unwrap();
    raw[usize::try_from(pos).unwrap() + 20] ^= 0x40;
    std::fs::write(&segment, &raw).unwrap();
    // The active segment's last record torn.
    let last = &got[40];
    let active = data
        .join("t/partition-0")
        .join(last["segment"].as_str().unwrap());
    assert_ne!(active, segment, "two segments at least");
    let len = std::fs::metadata(&active).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&active)
        .unwrap()
        .set_len(len - 2)
        .unwrap();
    let damaged = run(&["data", "check", d]);
    assert_eq!(damaged.status.code(), Some(1));
    let report = stdout(&damaged);
    let flipped = format!(
        "problem: {}: offset 3: byte {pos}: CRC mismatch",
        segment.display()
    );
    assert!(report.contains(&flipped), "{report}\nwants {flipped}");
    let torn = format!(
        "problem: {}: offset 40: byte {}: torn tail",
        active.display(),
        last["position"]
    );
    assert!(report.contains(&torn), "{report}\nwants {torn}");
    assert!(
        stderr(&damaged).contains("2 problems"),
        "{}",
        stderr(&damaged)
    );
    // The dump stops at the damage, saying where.
    let out = run(&["data", "dump", d, "--topic", "t", "--partition", "0"]);
    assert!(!out.status.success());
    assert_eq!(stdout(&out).lines().count(), 3);
    let err = stderr(&out);
    assert!(
        err.contains("offset 3") && err.contains(&format!("byte {pos}")),
        "{err}"
    );
}

fn snapshot(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// The share-group state file is checked beside the offsets file: its
/// records counted, a torn tail named with its byte position.
#[test]
fn check_reads_the_share_state_file_and_names_its_damage() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let share = data.join("__share_state");
    std::fs::create_dir_all(&share).unwrap();
    std::fs::write(
        data.join(".flume-data-dir"),
        b"flume data directory, layout 1\n",
    )
    .unwrap();
    let d = data.to_str().unwrap();
    let report = ok(&["data", "check", d]);
    assert!(report.contains("share-group state: none"), "{report}");
    // One update of g/t/0 (full: start 3, end 5, records 3 and 4 available,
    // delivered once), then the same record torn.
    let mut value = vec![1u8, 0, 1, b't', 0, 0, 0, 0, 1];
    value.extend(3i64.to_be_bytes());
    value.extend(5i64.to_be_bytes());
    value.extend(1u32.to_be_bytes());
    value.extend(3i64.to_be_bytes());
    value.extend(2u32.to_be_bytes());
    value.extend([0u8, 0, 1]);
    let mut raw = b"FLMSHR\x00\x01".to_vec();
    flume_protocol::record::encode(&mut raw, 0, 1, Some(b"g"), &value, &[]);
    let good = raw.len();
    let path = share.join("share.log");
    std::fs::write(&path, &raw).unwrap();
    let report = ok(&["data", "check", d]);
    let line = format!(
        "share-group state: {} (version 1, {good} bytes, 1 records, 1 share-partitions) ok",
        path.display()
    );
    assert!(report.contains(&line), "{report}\nwants {line}");
    flume_protocol::record::encode(&mut raw, 0, 1, Some(b"g"), &value, &[]);
    raw.truncate(raw.len() - 3);
    std::fs::write(&path, &raw).unwrap();
    let damaged = run(&["data", "check", d]);
    assert_eq!(damaged.status.code(), Some(1));
    let report = stdout(&damaged);
    let torn = format!("problem: {}: byte {good}: torn record", path.display());
    assert!(report.contains(&torn), "{report}\nwants {torn}");
    assert_eq!(std::fs::read(&path).unwrap(), raw, "checked, not changed");
}

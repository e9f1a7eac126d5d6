//! Running the real `flume-cli` binary in tests.
#![allow(dead_code)]

pub mod fake_kafka;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test; `FLUME_CLI_BIN` points the tests at another build (to check
/// that a test fails against a binary without the fix it covers).
pub fn bin() -> Command {
    match std::env::var_os("FLUME_CLI_BIN") {
        Some(path) => Command::new(path),
        None => Command::new(env!("CARGO_BIN_EXE_flume-cli")),
    }
}

/// A broker subprocess, killed when dropped.
pub struct BrokerProc {
    pub child: Child,
    pub addr: String,
}

impl BrokerProc {
    /// Starts `flume-cli broker --port 0 --data DIR` plus `extra` flags and waits for its address.
    pub fn start(data: &Path, extra: &[&str]) -> BrokerProc {
        Self::start_on(data, "0", extra)
    }

    pub fn start_on(data: &Path, port: &str, extra: &[&str]) -> BrokerProc {
        let mut child = bin()
            .args(["broker", "--port", port, "--data"])
            .arg(data)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn flume-cli broker");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("broker prints its address");
        let addr = line
            .split_whitespace()
            .find(|w| w.starts_with("127.0.0.1:"))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_owned();
        BrokerProc { child, addr }
    }

    /// As [`BrokerProc::start`], with a Kafka listener on port 0 too: the
    /// broker and the Kafka listener's address.
    pub fn start_with_kafka(data: &Path, extra: &[&str]) -> (BrokerProc, String) {
        let mut child = bin()
            .args(["broker", "--port", "0", "--kafka-port", "0", "--data"])
            .arg(data)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn flume-cli broker");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut addr = None;
        let mut kafka = None;
        while kafka.is_none() {
            let line = lines
                .next()
                .expect("the broker prints its addresses")
                .expect("stdout");
            let found = line
                .split_whitespace()
                .find(|w| w.starts_with("127.0.0.1:"))
                .map(str::to_owned);
            if line.contains("serving Kafka clients") {
                kafka = found;
            } else if addr.is_none() {
                addr = found;
            }
        }
        // Keep reading, so a later line does not meet a closed pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let b = BrokerProc {
            child,
            addr: addr.expect("the broker's address"),
        };
        (b, kafka.expect("the Kafka listener's address"))
    }

    pub fn port(&self) -> &str {
        self.addr.rsplit(':').next().unwrap()
    }

    /// SIGKILL, no cleanup.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGINT (Ctrl-C) and wait for a clean exit.
    pub fn interrupt(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .expect("kill -INT");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "broker did not exit after SIGINT"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for BrokerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn run(args: &[&str]) -> Output {
    bin()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run flume-cli")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(
        o.status.success(),
        "flume-cli {args:?} failed: {}",
        stderr(&o)
    );
    stdout(&o)
}

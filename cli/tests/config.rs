//! `flume-cli broker --config`: the file, FLUME_* variables, their
//! precedence, `--print-config`, mistakes, JSON logs and SIGHUP.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{bin, ok};

/// `flume-cli broker ARGS` with only `envs` of the FLUME_* variables set.
fn broker_cmd(args: &[&str], envs: &[(&str, &str)]) -> Command {
    let mut cmd = bin();
    cmd.arg("broker").args(args).stdin(Stdio::null());
    for (k, _) in std::env::vars() {
        if k.starts_with("FLUME_") && k != "FLUME_CLI_BIN" {
            cmd.env_remove(k);
        }
    }
    cmd.env_remove("RUST_LOG");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd
}

/// The `key = value` lines of a `--print-config`, with their source comments.
fn printed(args: &[&str], envs: &[(&str, &str)]) -> BTreeMap<String, (String, String)> {
    let out = broker_cmd(args, envs)
        .arg("--print-config")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .filter(|l| !l.starts_with('#') && l.contains(" = "))
        .map(|l| {
            let (kv, source) = l.rsplit_once("  # ").unwrap_or((l, ""));
            let (k, v) = kv.split_once(" = ").unwrap();
            (k.to_owned(), (v.to_owned(), source.to_owned()))
        })
        .collect()
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

#[test]
fn flags_then_environment_then_the_file_then_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("flume.toml");
    write(
        &file,
        "port = 1111\nkafka-port = 2222\nfsync = \"always\"\n",
    );
    let f = file.to_str().unwrap();
    let get = |args: &[&str], envs: &[(&str, &str)], key: &str| printed(args, envs)[key].clone();
    let env = [("FLUME_PORT", "3333")];
    assert_eq!(
        get(&["--config", f, "--port", "4444"], &env, "port"),
        ("4444".into(), "flag".into())
    );
    assert_eq!(
        get(&["--config", f], &env, "port"),
        ("3333".into(), "environment FLUME_PORT".into())
    );
    assert_eq!(
        get(&["--config", f], &[], "port"),
        ("1111".into(), "file".into())
    );
    assert_eq!(get(&[], &[], "port"), ("9092".into(), "default".into()));
    // FLUME_CONFIG names the file; dashes become underscores in variables.
    let cfg = [("FLUME_CONFIG", f), ("FLUME_KAFKA_PORT", "5555")];
    let all = printed(&[], &cfg);
    assert_eq!(
        all["kafka-port"],
        ("5555".into(), "environment FLUME_KAFKA_PORT".into())
    );
    assert_eq!(all["fsync"], ("\"always\"".into(), "file".into()));
    assert_eq!(all["host"], ("\"127.0.0.1\"".into(), "default".into()));
    // A switch and a list from variables.
    let all = printed(&[], &[("FLUME_VERIFY", "1"), ("FLUME_ADMIN_USER", "a,b")]);
    assert_eq!(all["verify"].0, "true");
    assert_eq!(all["admin-user"].0, "[\"a\", \"b\"]");

    // The file really drives the broker: its port and data directory.
    let data = dir.path().join("data");
    write(
        &file,
        &format!(
            "port = 0\ndata = {:?}\npartitions = 2\n",
            data.to_str().unwrap()
        ),
    );
    let mut b = Broker::start(&["--config", f], &[]);
    let out = ok(&[
        "produce",
        "--broker",
        &b.addr,
        "--topic",
        "t",
        "--message",
        "m",
    ]);
    assert!(out.contains("offset=0"), "{out}");
    let topics = ok(&["topics", "list", "--broker", &b.addr]);
    assert!(topics.contains("partitions=2"), "{topics}");
    assert!(data.join("t").is_dir());
    b.stop();
}

/// A valid value other than the default for every setting.
const EVERY_KEY: &str = r#"
log-format = "json"
log-level = "debug"
host = "127.0.0.2"
port = 1234
data = "/srv/flume"
allow-foreign-data-dir = true
partitions = 5
fsync = 100
retention-bytes = 1000000
retention-ms = 60000
segment-bytes = 1048576
max-pending = 10
backpressure = "reject"
max-frame-bytes = 8388608
max-record-bytes = 65536
max-connections = 100
max-partitions = 1000
max-groups = 100
max-members-per-group = 10
group-initial-rebalance-delay-ms = 0
group-min-session-timeout-ms = 3000
group-max-session-timeout-ms = 600000
share-record-lock-duration-ms = 15000
share-delivery-count-limit = 7
share-partition-max-record-locks = 500
share-auto-offset-reset = "earliest"
share-session-timeout-ms = 20000
consumer-session-timeout-ms = 30000
connections-max-idle-ms = 5000
max-open-files = 1000
max-request-memory = 16777216
no-auto-create = true
verify = true
busy-poll-us = "auto:20"
http-port = 9100
kafka-port = 9093
kafka-advertised = "broker.example:9093"
tls-cert = "/etc/flume/broker.pem"
tls-key = "/etc/flume/broker.key"
tls-client-ca = "/etc/flume/ca.pem"
auth = "required"
admin-user = ["admin", "ops"]
authorizer = "on"
max-connections-per-principal = 10
produce-quota-bytes-per-sec = 1000000
cleaner-key-map-bytes = 1048576
cleaner-io-bytes-per-sec = 10485760
"#;

#[test]
fn every_key_round_trips_through_print_config() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first.toml");
    write(&first, EVERY_KEY);
    let once = printed(&["--config", first.to_str().unwrap()], &[]);
    let want: BTreeMap<&str, &str> = EVERY_KEY
        .lines()
        .filter_map(|l| l.split_once(" = "))
        .collect();
    let keys: Vec<&String> = once.keys().collect();
    let wanted: Vec<&str> = want.keys().copied().collect();
    assert_eq!(
        keys, wanted,
        "every setting is printed, and this test sets each one"
    );
    for (k, v) in &want {
        assert_eq!(once[*k], ((*v).to_owned(), "file".to_owned()), "{k}");
    }
    // The printed file, read back, gives the same settings.
    let out = broker_cmd(
        &["--config", first.to_str().unwrap(), "--print-config"],
        &[],
    )
    .output()
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for k in once.keys() {
        let var = format!("FLUME_{}", k.to_uppercase().replace('-', "_"));
        assert!(
            text.contains(&format!("# Environment: {var}")),
            "{k} has no {var}"
        );
    }
    let second = dir.path().join("second.toml");
    std::fs::write(&second, &out.stdout).unwrap();
    assert_eq!(printed(&["--config", second.to_str().unwrap()], &[]), once);
    // And the defaults, printed, read back as the defaults (unset ones stay unset).
    let out = broker_cmd(&["--print-config"], &[]).output().unwrap();
    let defaults = dir.path().join("defaults.toml");
    std::fs::write(&defaults, &out.stdout).unwrap();
    let from_file = printed(&["--config", defaults.to_str().unwrap()], &[]);
    let plain = printed(&[], &[]);
    assert_eq!(
        from_file
            .iter()
            .map(|(k, (v, _))| (k, v))
            .collect::<Vec<_>>(),
        plain.iter().map(|(k, (v, _))| (k, v)).collect::<Vec<_>>()
    );
    assert!(
        !plain.contains_key("retention-ms"),
        "unset is commented out"
    );
}

#[test]
fn each_mistake_is_one_line_naming_the_file_and_the_key_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("flume.toml");
    let f = file.to_str().unwrap();
    let cases: &[(&str, &[&str])] = &[
        ("prot = 9092\n", &["unknown key prot", "did you mean port?"]),
        (
            "port = 70000\n",
            &["port = 70000", "70000 is not in 0..=65535"],
        ),
        (
            "port = \"9092\"\n",
            &["port = \"9092\"", "must be an integer"],
        ),
        (
            "verify = \"yes\"\n",
            &["verify = \"yes\"", "must be true or false"],
        ),
        (
            "admin-user = \"admin\"\n",
            &["admin-user", "must be an array of strings"],
        ),
        (
            "fsync = \"sometimes\"\n",
            &["fsync = \"sometimes\"", "always, never or milliseconds"],
        ),
        (
            "auth = \"maybe\"\n",
            &["auth = \"maybe\"", "off, optional or required"],
        ),
        ("[tls]\ncert = \"x\"\n", &["unknown key tls"]),
        ("port = 9092\nport = 9093\n", &["line 2", "not valid TOML"]),
        ("tls-key = \"k.pem\"\n", &["--tls-cert"]),
    ];
    for (text, wants) in cases {
        write(&file, text);
        let out = broker_cmd(&["--config", f], &[]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{text:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{text:?}: one line: {err}");
        assert!(err.starts_with(&format!("error: {f}: ")), "{text:?}: {err}");
        for w in *wants {
            assert!(err.contains(w), "{text:?}: {err} should say {w:?}");
        }
        assert!(!err.contains("panicked"), "{err}");
    }
    let out = broker_cmd(&["--config", "/nonexistent/flume.toml"], &[])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("/nonexistent/flume.toml: cannot read it"),
        "{err}"
    );
    assert!(!dir.path().join("data").exists(), "nothing started");
}

#[test]
fn the_shipped_example_file_is_every_setting_with_its_defaults() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/flume.toml");
    let shipped = printed(&["--config", example.to_str().unwrap()], &[]);
    let defaults = printed(&[], &[]);
    for (k, (v, _)) in &defaults {
        if k == "data" || k == "admin-user" {
            continue; // the deployment's own
        }
        assert_eq!(&shipped[k].0, v, "{k}: the example shows the default");
    }
    assert_eq!(shipped["data"].0, "\"/var/lib/flume\"");
    // The unit's descriptor limit is what the broker asks for with these settings.
    let unit = std::fs::read_to_string(example.with_file_name("flume.service")).unwrap();
    let limit: u64 = unit
        .lines()
        .find_map(|l| l.strip_prefix("LimitNOFILE="))
        .unwrap()
        .parse()
        .unwrap();
    let n = |k: &str| shipped[k].0.parse::<u64>().unwrap();
    assert_eq!(limit, n("max-open-files") + n("max-connections") + 64);
    let text = std::fs::read_to_string(&example).unwrap();
    for k in defaults.keys() {
        assert!(text.contains(&format!("{k} =")), "{k} is in the example");
    }
}

/// A broker subprocess whose stderr lines arrive on a channel.
struct Broker {
    child: Child,
    addr: String,
    stderr: mpsc::Receiver<String>,
}

impl Broker {
    fn start(args: &[&str], envs: &[(&str, &str)]) -> Broker {
        let mut child = broker_cmd(args, envs)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, stderr) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .split_whitespace()
            .find(|w| w.starts_with("127.0.0.1:"))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_owned();
        Broker {
            child,
            addr,
            stderr,
        }
    }

    /// Waits (up to 20 s) for a stderr line containing every one of `parts`.
    fn wait_for(&self, parts: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(l) if parts.iter().all(|p| l.contains(p)) => return l,
                Ok(_) => {}
                Err(_) => panic!("no stderr line with {parts:?} within 20 s"),
            }
        }
    }

    fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    }

    fn stop(&mut self) {
        self.signal("-INT");
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "broker did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn sighup_applies_what_it_says_and_names_what_needs_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("flume.toml");
    let data = dir.path().join("data");
    let base = format!("port = 0\ndata = {:?}\n", data.to_str().unwrap());
    write(&file, &base);
    let b = Broker::start(&["--config", file.to_str().unwrap()], &[]);
    let addr = b.addr.clone();
    let produce = |topic: &str| {
        ok(&[
            "produce",
            "--broker",
            &addr,
            "--topic",
            topic,
            "--message",
            "m",
        ]);
    };
    let describe = |topic: &str| ok(&["topics", "describe", topic, "--broker", &addr]);
    produce("before");

    // Unchanged: said so.
    b.signal("-HUP");
    b.wait_for(&["SIGHUP: settings unchanged"]);

    write(
        &file,
        &format!(
            "{base}partitions = 1\nretention-ms = 60000\nlog-level = \"info,flume_broker=debug\"\nmax-connections = 50\n"
        ),
    );
    b.signal("-HUP");
    // In the order of `broker --help`, then what needs a restart.
    b.wait_for(&["SIGHUP: log-level changed from not set to \"info,flume_broker=debug\""]);
    b.wait_for(&[
        "SIGHUP: partitions changed from 3 to 1",
        "topics created from now on",
    ]);
    b.wait_for(&["SIGHUP: retention-ms changed from not set to 60000"]);
    b.wait_for(&["SIGHUP: max-connections changed from 10000 to 50: needs a restart"]);
    // The new defaults apply to a topic created now, not to the one before.
    produce("after");
    let after = describe("after");
    assert!(after.contains("1 partitions"), "{after}");
    assert!(after.contains("retention.ms=60000"), "{after}");
    let before = describe("before");
    assert!(before.contains("3 partitions"), "{before}");
    // (`describe` also lists every config: file.delete.delay.ms is 60000 by default.)
    assert!(before.contains("retention.ms=none"), "{before}");
    // The log level took effect: requests are logged at debug now.
    b.wait_for(&["DEBUG", "flume_broker"]);

    // A broken file keeps the settings in use.
    write(&file, "port = \"x\"\n");
    b.signal("-HUP");
    b.wait_for(&["SIGHUP:", "port = \"x\"", "keeping the settings in use"]);
    produce("after");
}

#[test]
fn json_logs_are_one_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut b = Broker::start(
        &["--port", "0", "--data", data.to_str().unwrap()],
        &[("FLUME_LOG_FORMAT", "json")],
    );
    ok(&[
        "produce",
        "--broker",
        &b.addr,
        "--topic",
        "t",
        "--message",
        "m",
    ]);
    let line = b.wait_for(&["topic created"]);
    let v: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(v["level"], "INFO", "{line}");
    assert_eq!(v["fields"]["message"], "topic created", "{line}");
    assert_eq!(v["fields"]["topic"], "t", "{line}");
    assert!(
        v["target"].as_str().unwrap().starts_with("flume_broker"),
        "{line}"
    );
    assert!(v["timestamp"].as_str().unwrap().contains('T'), "{line}");
    b.stop();
    let last = b.wait_for(&["broker stopped"]);
    assert!(
        serde_json::from_str::<serde_json::Value>(&last).is_ok(),
        "{last}"
    );
}

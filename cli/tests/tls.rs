//! `flume-cli` with TLS: the broker's --tls-cert/--tls-key, the client
//! commands' --tls-ca, and SIGHUP reloading the certificate.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::bin;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

/// A CA (its PEM written to `dir/name.pem`) and a server certificate for
/// localhost and 127.0.0.1 that it signed, written to `cert` and `key`.
fn ca_and_server(dir: &Path, name: &str, cert: &Path, key: &Path) -> PathBuf {
    let ca_key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let ca = params.self_signed(&ca_key).unwrap();
    let server_key = KeyPair::generate().unwrap();
    let params =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    let server = params.signed_by(&server_key, &ca, &ca_key).unwrap();
    std::fs::write(cert, server.pem()).unwrap();
    std::fs::write(key, server_key.serialize_pem()).unwrap();
    let ca_file = dir.join(format!("{name}.pem"));
    std::fs::write(&ca_file, ca.pem()).unwrap();
    ca_file
}

fn produce(addr: &str, tls: &[&str], message: &str) -> std::process::Output {
    bin()
        .args([
            "produce",
            "--broker",
            addr,
            "--topic",
            "t",
            "--message",
            message,
        ])
        .args(tls)
        .output()
        .unwrap()
}

#[test]
fn tls_flags_and_sighup_reload() {
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("server.pem");
    let key = dir.path().join("server.key");
    let ca1 = ca_and_server(dir.path(), "ca1", &cert, &key);
    let data = dir.path().join("data");
    let mut child = bin()
        .args(["broker", "--port", "0", "--data"])
        .arg(&data)
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("127.0.0.1:"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    let addr = format!("localhost:{port}");
    let (tx, stderr) = std::sync::mpsc::channel::<String>();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });

    let ca1s = ca1.to_str().unwrap();
    let out = produce(&addr, &["--tls-ca", ca1s], "hello");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = produce(&addr, &[], "plain");
    assert!(
        !out.status.success(),
        "a plain client is refused on the TLS port"
    );

    // New certificate from another CA in the same files, then SIGHUP.
    let ca2 = ca_and_server(dir.path(), "ca2", &cert, &key);
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let l = stderr
            .recv_timeout(left)
            .expect("the broker reports the reload");
        if l.contains("SIGHUP: TLS certificates reloaded") {
            break;
        }
    }
    let ca2s = ca2.to_str().unwrap();
    let out = produce(&addr, &["--tls-ca", ca2s], "world");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = produce(&addr, &["--tls-ca", ca1s], "stale");
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.starts_with("error: ") && text.contains("UnknownIssuer"),
        "{text}"
    );

    let out = bin()
        .args([
            "consume", "--broker", &addr, "--tls-ca", ca2s, "--topic", "t",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("value=hello") && text.contains("value=world"),
        "{text}"
    );
    assert!(!text.contains("plain") && !text.contains("stale"), "{text}");

    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "broker did not exit after SIGINT"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

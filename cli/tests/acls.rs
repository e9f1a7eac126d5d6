//! `flume-cli acls` and `broker --authorizer on`: an admin grants a user
//! read on one topic; the user reads it and nothing else; a non-admin cannot
//! change ACLs.

use crate::common;

use common::{bin, BrokerProc};

fn run(args: &[&str], envs: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = bin();
    cmd.args(args)
        .env_remove("FLUME_PASSWORD")
        .env_remove("FLUME_NEW_PASSWORD");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn an_admin_grants_read_on_one_topic() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let d = data.to_str().unwrap();
    for (user, pw) in [("admin", "admin-pw"), ("alice", "alice-pw")] {
        let out = run(
            &["users", "add", user, "--data", d],
            &[("FLUME_NEW_PASSWORD", pw)],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let broker = BrokerProc::start(
        &data,
        &[
            "--auth",
            "required",
            "--admin-user",
            "admin",
            "--authorizer",
            "on",
        ],
    );
    let addr = broker.addr.clone();
    let admin = [("FLUME_PASSWORD", "admin-pw")];
    let alice = [("FLUME_PASSWORD", "alice-pw")];
    let as_admin = |args: &[&str]| {
        let mut v = args.to_vec();
        v.extend(["--broker", &addr, "--user", "admin"]);
        run(&v, &admin)
    };
    let as_alice = |args: &[&str]| {
        let mut v = args.to_vec();
        v.extend(["--broker", &addr, "--user", "alice"]);
        run(&v, &alice)
    };
    for topic in ["orders", "secret"] {
        let out = as_admin(&["produce", "--topic", topic, "--message", "m"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }

    // No ACL yet: alice reads nothing; METADATA does not even show her the topic.
    let consume = ["consume", "--topic", "orders"];
    let out = as_alice(&consume);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("does not exist"),
        "{}",
        text(&out.stderr)
    );

    let grant = [
        "acls",
        "add",
        "--principal",
        "User:alice",
        "--operation",
        "read",
        "--topic",
        "orders",
    ];
    let out = as_alice(&grant);
    assert!(!out.status.success(), "alice is no admin");
    assert!(
        text(&out.stderr).contains("AUTHORIZATION_FAILED"),
        "{}",
        text(&out.stderr)
    );
    let out = as_admin(&grant);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("added User:alice"),
        "{}",
        text(&out.stdout)
    );

    let out = as_alice(&consume);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("value=m"),
        "{}",
        text(&out.stdout)
    );
    let out = as_alice(&["consume", "--topic", "secret"]);
    assert!(!out.status.success());
    let out = as_alice(&["produce", "--topic", "orders", "--message", "x"]);
    assert!(!out.status.success(), "read is not write");

    let out = as_admin(&["acls", "list"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.starts_with("PRINCIPAL"), "{table}");
    assert!(
        table.contains("User:alice") && table.contains("orders") && table.contains("read"),
        "{table}"
    );

    let mut revoke = grant.to_vec();
    revoke[1] = "remove";
    let out = as_admin(&revoke);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = as_admin(&revoke);
    assert!(!out.status.success(), "removed already");
    let out = as_admin(&["acls", "list", "--principal", "User:alice"]);
    assert_eq!(text(&out.stdout), "no ACLs\n");
    assert!(broker.interrupt().success());
    assert!(data.join("__acls").exists());
}

//! `flume-cli users` and `--auth required`: the first admin made offline,
//! users added through the broker by that admin, logins from client commands.

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
fn first_admin_offline_then_users_through_the_broker() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let d = data.to_str().unwrap();
    let out = run(
        &["users", "add", "admin", "--data", d],
        &[("FLUME_NEW_PASSWORD", "admin-pw")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));

    let broker = BrokerProc::start(&data, &["--auth", "required", "--admin-user", "admin"]);
    let addr = broker.addr.clone();
    let admin = [
        ("FLUME_PASSWORD", "admin-pw"),
        ("FLUME_NEW_PASSWORD", "alice-pw"),
    ];
    let out = run(
        &[
            "users", "add", "alice", "--broker", &addr, "--user", "admin",
        ],
        &admin,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("user alice saved"));

    let alice = [("FLUME_PASSWORD", "alice-pw")];
    let produce = [
        "produce",
        "--broker",
        &addr,
        "--topic",
        "t",
        "--message",
        "hi",
    ];
    let mut as_alice = produce.to_vec();
    as_alice.extend(["--user", "alice"]);
    let out = run(&as_alice, &alice);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let out = run(&produce, &[]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("AUTHENTICATION_REQUIRED"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&as_alice, &[("FLUME_PASSWORD", "wrong")]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("AUTHENTICATION_FAILED"),
        "{}",
        text(&out.stderr)
    );

    let out = run(
        &["users", "list", "--broker", &addr, "--user", "alice"],
        &alice,
    );
    assert!(!out.status.success(), "alice is no admin");
    assert!(
        text(&out.stderr).contains("NOT_AUTHORIZED"),
        "{}",
        text(&out.stderr)
    );
    let out = run(
        &["users", "list", "--broker", &addr, "--user", "admin"],
        &admin,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "admin\nalice\n");

    let out = run(
        &["users", "add", "eve", "--data", d],
        &[("FLUME_NEW_PASSWORD", "x")],
    );
    assert!(
        !out.status.success(),
        "the running broker holds the directory"
    );
    assert!(broker.interrupt().success());
}

/// docs/security-guide.md, on a new machine: the first admin is made before the
/// broker's first start, in a data directory that does not exist yet.
#[test]
fn the_readmes_first_admin_order_works_on_an_empty_machine() {
    let dir = tempfile::tempdir().unwrap();
    let in_dir = |args: &[&str], envs: &[(&str, &str)]| {
        let mut cmd = bin();
        cmd.current_dir(dir.path())
            .args(args)
            .env_remove("FLUME_PASSWORD")
            .env_remove("FLUME_NEW_PASSWORD");
        for (k, v) in envs {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    // `FLUME_NEW_PASSWORD=s3cret flume-cli users add admin --data ./data`
    let out = in_dir(
        &["users", "add", "admin", "--data", "./data"],
        &[("FLUME_NEW_PASSWORD", "s3cret")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "user admin saved\n");
    let data = dir.path().join("data");
    assert!(
        data.join(".flume-data-dir").is_file(),
        "created and marked as the broker does"
    );
    // Reading a directory that is not there creates nothing.
    let out = in_dir(&["users", "list", "--data", "./elsewhere"], &[]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("./elsewhere does not exist"),
        "{}",
        text(&out.stderr)
    );
    assert!(!dir.path().join("elsewhere").exists());

    // `flume-cli broker --auth required --admin-user admin`, then the admin logs in.
    let broker = BrokerProc::start(&data, &["--auth", "required", "--admin-user", "admin"]);
    let out = in_dir(
        &["users", "list", "--broker", &broker.addr, "--user", "admin"],
        &[("FLUME_PASSWORD", "s3cret")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "admin\n");
    assert!(broker.interrupt().success());
}

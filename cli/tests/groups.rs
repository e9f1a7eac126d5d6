//! `groups list` and `groups describe` against a real broker, with a group
//! whose member runs in this process (the SDK's GroupConsumer).

use crate::common;

use std::time::Duration;

use common::{ok, run, stderr, stdout, BrokerProc};
use flume_client::{GroupConsumer, Producer};

#[test]
fn groups_list_and_describe_show_state_members_partitions_and_lag() {
    let dir = tempfile::tempdir().unwrap();
    let b = BrokerProc::start(&dir.path().join("data"), &[]);
    let addr = b.addr.clone();
    ok(&[
        "topics",
        "create",
        "t",
        "--partitions",
        "2",
        "--broker",
        &addr,
    ]);
    flume_rt::block_on(async {
        let p = Producer::connect(&addr).await.unwrap();
        for i in 0..6 {
            p.send("t", Some(format!("k{i}").as_bytes()), b"v")
                .await
                .unwrap();
        }
    });
    // An empty group known by its commits only.
    ok(&[
        "groups",
        "reset-offsets",
        "old",
        "--topic",
        "t",
        "--to",
        "earliest",
        "--broker",
        &addr,
    ]);
    let consumer = flume_rt::block_on(async {
        let mut c = GroupConsumer::builder(&addr, "live")
            .topic("t")
            .auto_commit(false)
            .max_wait(Duration::from_millis(50))
            .build()
            .await
            .unwrap();
        let r = flume_rt::timeout(Duration::from_secs(20), c.recv())
            .await
            .expect("a record in time")
            .unwrap()
            .unwrap();
        c.commit(&r).await.unwrap();
        c
    });
    let list = ok(&["groups", "list", "--broker", &addr]);
    let rows: Vec<Vec<&str>> = list
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        vec![vec!["live", "Stable", "flume"], vec!["old", "Empty", "-"]],
        "{list}"
    );
    let empty = ok(&["groups", "list", "--state", "Empty", "--broker", &addr]);
    assert!(empty.contains("old") && !empty.contains("live"), "{empty}");

    let out = ok(&["groups", "describe", "live", "--broker", &addr]);
    assert!(
        out.starts_with(
            "group live: state Stable, generation 1, protocol sticky (flume), 1 member(s)"
        ),
        "{out}"
    );
    let member_line = out
        .lines()
        .find(|l| l.contains("t:0,1"))
        .unwrap_or_else(|| panic!("the member owns both partitions: {out}"));
    let member = member_line.split_whitespace().next().unwrap();
    // One committed partition: committed + lag = end, owned by the member.
    let offsets: Vec<Vec<&str>> = out
        .lines()
        .skip_while(|l| !l.starts_with("TOPIC"))
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(offsets.len(), 1, "{out}");
    let o = &offsets[0];
    let (committed, end, lag): (i64, i64, i64) = (
        o[2].parse().unwrap(),
        o[3].parse().unwrap(),
        o[4].parse().unwrap(),
    );
    assert_eq!(o[0], "t");
    assert_eq!(committed + lag, end, "{out}");
    assert_eq!(o[5], member, "{out}");

    let old = ok(&["groups", "describe", "old", "--broker", &addr]);
    assert!(
        old.starts_with("group old: state Empty, generation 0"),
        "{old}"
    );
    assert_eq!(
        old.lines().filter(|l| l.starts_with("t ")).count(),
        2,
        "{old}"
    );

    let o = run(&["groups", "describe", "nobody", "--broker", &addr]);
    assert!(!o.status.success(), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("group nobody does not exist"),
        "{}",
        stderr(&o)
    );
    let o = run(&["groups", "list", "--state", "Sleeping", "--broker", &addr]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("Sleeping"), "{}", stderr(&o));
    drop(consumer);
}

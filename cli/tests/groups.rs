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

/// A consumer-protocol group (KIP-848) of two SDK members over kafka://,
/// beside a group known by commits only: `groups list` says which type each
/// is (over Flume's protocol and over kafka://), and `groups describe`
/// shows the group's epochs, assignor and each member's epoch and
/// partitions, then its committed offsets with their owners.
#[test]
fn groups_list_and_describe_show_a_consumer_protocol_group_with_member_epochs() {
    use flume_client::GroupProtocol;
    let dir = tempfile::tempdir().unwrap();
    let (b, kafka) = BrokerProc::start_with_kafka(&dir.path().join("data"), &[]);
    let addr = b.addr.clone();
    let kafka = format!("kafka://{kafka}");
    ok(&[
        "topics",
        "create",
        "t",
        "--partitions",
        "4",
        "--broker",
        &addr,
    ]);
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
    let members = flume_rt::block_on(async {
        let p = Producer::connect(&addr).await.unwrap();
        for i in 0..8 {
            p.send("t", Some(format!("k{i}").as_bytes()), b"v")
                .await
                .unwrap();
        }
        let mut ms = Vec::new();
        for _ in 0..2 {
            let c = GroupConsumer::builder(&kafka, "cg")
                .topic("t")
                .group_protocol(GroupProtocol::Consumer)
                .auto_commit(false)
                .max_wait(Duration::from_millis(50))
                .build()
                .await
                .unwrap();
            ms.push(c);
        }
        // Both own two partitions: each receives (and one commits) a record.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let mut owned = Vec::new();
            for c in &ms {
                owned.push(c.assignment().await.len());
            }
            if owned == [2, 2] {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "never split: {owned:?}"
            );
            for c in &mut ms {
                let _ = flume_rt::timeout(Duration::from_millis(100), c.recv()).await;
            }
        }
        let r = loop {
            if let Some(Some(Ok(r))) =
                flume_rt::timeout(Duration::from_millis(500), ms[0].recv()).await
            {
                break r;
            }
            assert!(std::time::Instant::now() < deadline, "no record");
        };
        ms[0].commit(&r).await.unwrap();
        ms
    });
    for broker in [&addr, &kafka] {
        let list = ok(&["groups", "list", "--broker", broker]);
        let rows: Vec<Vec<&str>> = list
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert!(
            rows.contains(&vec!["cg", "Stable", "consumer"]),
            "{broker}: {list}"
        );
        assert!(
            rows.iter().any(|r| r[0] == "old" && r[2] != "consumer"),
            "{broker}: {list}"
        );
        let out = ok(&["groups", "describe", "cg", "--broker", broker]);
        assert!(
            out.starts_with("group cg: type consumer, state Stable, epoch 2, assignment epoch 2, assignor uniform, 2 member(s)"),
            "{broker}: {out}"
        );
        let member_rows: Vec<Vec<&str>> = out
            .lines()
            .skip_while(|l| !l.starts_with("MEMBER"))
            .skip(1)
            .take_while(|l| !l.is_empty())
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(member_rows.len(), 2, "{broker}: {out}");
        for m in &member_rows {
            // member, epoch 2, client, host, subscription t, two partitions, target "=".
            assert_eq!((m[1], m[4], m[6]), ("2", "t", "="), "{broker}: {out}");
            assert_eq!(m[5].split(',').count(), 2, "{broker}: {out}");
        }
        let offsets: Vec<Vec<&str>> = out
            .lines()
            .skip_while(|l| !l.starts_with("TOPIC"))
            .skip(1)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(offsets.len(), 1, "{broker}: {out}");
        assert!(
            member_rows.iter().any(|m| m[0] == offsets[0][5]),
            "the committed partition's owner is a member: {out}"
        );
    }
    flume_rt::block_on(async {
        for c in members {
            c.close().await.unwrap();
        }
    });
}

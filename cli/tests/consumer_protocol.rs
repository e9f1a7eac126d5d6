//! `consume --group --group-protocol consumer` over kafka:// against a real
//! broker: a member of a consumer-protocol group (KIP-848) reads, commits
//! and leaves; the next run resumes from its commits; a bad value is a
//! one-line usage error.

use std::collections::BTreeSet;

use crate::common;

use common::{ok, run, stderr, BrokerProc};
use flume_client::Producer;

fn values(out: &str) -> Vec<String> {
    out.lines()
        .map(|l| {
            l.split_whitespace()
                .find_map(|f| f.strip_prefix("value="))
                .unwrap_or_else(|| panic!("a record line: {l}"))
                .to_owned()
        })
        .collect()
}

#[test]
fn consume_with_the_consumer_group_protocol_over_kafka_reads_commits_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    // Members heartbeat every 500 ms (a ninth of the session).
    let (b, kafka) = BrokerProc::start_with_kafka(
        &dir.path().join("data"),
        &["--consumer-session-timeout-ms", "4500"],
    );
    let addr = b.addr.clone();
    let kafka = format!("kafka://{kafka}");
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
            p.send(
                "t",
                Some(format!("k{i}").as_bytes()),
                format!("v{i}").as_bytes(),
            )
            .await
            .unwrap();
        }
    });
    let consume = |max: &str| {
        ok(&[
            "consume",
            "--topic",
            "t",
            "--group",
            "g",
            "--group-protocol",
            "consumer",
            "--max",
            max,
            "--broker",
            &kafka,
        ])
    };
    let first = values(&consume("4"));
    assert_eq!(first.len(), 4, "{first:?}");
    let rest = values(&consume("2"));
    assert_eq!(rest.len(), 2, "{rest:?}");
    let all: BTreeSet<String> = first.iter().chain(&rest).cloned().collect();
    let want: BTreeSet<String> = (0..6).map(|i| format!("v{i}")).collect();
    assert_eq!(all, want, "every record once over the two runs");
    // The group's commits are at the end of both partitions.
    let lag = ok(&["groups", "lag", "--group", "g", "--broker", &addr]);
    assert!(
        lag.lines().count() == 3
            && lag
                .lines()
                .skip(1)
                .all(|l| l.split_whitespace().last() == Some("0")),
        "{lag}"
    );

    let bad = run(&[
        "consume",
        "--topic",
        "t",
        "--group",
        "g",
        "--group-protocol",
        "eager",
        "--broker",
        &kafka,
    ]);
    assert!(!bad.status.success());
    let err = stderr(&bad);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("invalid value 'eager'")
            && err.contains("--group-protocol")
            && err.contains("[possible values: classic, consumer]"),
        "{err}"
    );
}

//! Share groups through a running engine (manual clock): members sharing a
//! partition, release and redelivery, lock expiry, session expiry, the
//! delivery limit, where a new group starts, and a restart in each state.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flume_protocol::record;
use flume_rt as rt;

use super::share::{ShareAck, ShareFetchSpec, ShareReset, ShareTp};
use super::Engine;
use crate::clock::Clock;
use crate::config::{BrokerConfig, TopicConfig};
use crate::coordinator::share::group::ShareHeartbeat;
use crate::coordinator::share::partition::AckType;
use crate::domain::{ProduceBatch, Route};

fn engine(dir: &Path, clock: &Clock, reset: ShareReset) -> Arc<Engine> {
    let mut c = BrokerConfig::new(dir);
    c.clock = clock.clone();
    c.tick = Duration::from_secs(3600);
    c.share.auto_offset_reset = reset;
    c.share.partition.lock_duration_ms = 1_000;
    c.share.partition.delivery_count_limit = 3;
    c.share.groups.session_timeout_ms = 10_000;
    let e = Engine::open(c).unwrap();
    if e.records().topic("t").is_none() {
        e.records()
            .create_topic(
                "t",
                TopicConfig {
                    partitions: 1,
                    ..TopicConfig::default()
                },
            )
            .unwrap();
    }
    e
}

async fn produce(e: &Engine, n: usize) {
    let mut buf = Vec::new();
    for i in 0..n {
        record::encode(&mut buf, 0, 1, None, format!("v{i}").as_bytes(), &[]);
    }
    let r = e
        .records()
        .admit_produce(ProduceBatch {
            topic: "t".into(),
            route: Route::Partition(0),
            records: Bytes::from(buf),
        })
        .await
        .finish()
        .await;
    assert!(r.error.is_ok(), "{:?}", r.error);
}

async fn join(e: &Engine, member: &str) -> i32 {
    e.shares()
        .share_heartbeat(ShareHeartbeat {
            group: "g",
            member_id: member,
            member_epoch: 0,
            subscribed: Some(vec!["t".into()]),
            client_id: "test",
            client_host: "/127.0.0.1",
        })
        .await
        .unwrap()
        .member_epoch
}

fn tp() -> ShareTp {
    ShareTp {
        topic: "t".into(),
        partition: 0,
    }
}

/// Acquires up to `max` records for `member`; returns (offset, delivery count) of each.
async fn fetch(e: &Engine, member: &str, max: usize) -> Vec<(i64, u16)> {
    fetch_bytes(e, member, max, 1 << 20).await
}

/// As [`fetch`], reading at most `max_bytes` (at least one batch unless 0).
async fn fetch_bytes(e: &Engine, member: &str, max: usize, max_bytes: usize) -> Vec<(i64, u16)> {
    let got = e
        .shares()
        .share_fetch(ShareFetchSpec {
            group: "g".into(),
            member: member.into(),
            partitions: vec![tp()],
            max_records: max,
            max_bytes,
            max_wait: Duration::ZERO,
        })
        .await
        .unwrap();
    let mut out = Vec::new();
    for f in got {
        assert!(f.error.is_none(), "{:?}", f.error);
        let recs = record::decode_all(&Bytes::from(f.records)).unwrap();
        let offsets: Vec<i64> = recs.iter().map(|r| r.offset as i64).collect();
        let mut acquired = Vec::new();
        for a in f.acquired {
            for o in a.first_offset..=a.last_offset {
                acquired.push((o, a.delivery_count));
            }
        }
        assert_eq!(
            offsets,
            acquired.iter().map(|(o, _)| *o).collect::<Vec<_>>(),
            "the records sent are the ones acquired"
        );
        out.extend(acquired);
    }
    out
}

async fn ack(e: &Engine, member: &str, first: i64, last: i64, ack: AckType) -> bool {
    let r = e
        .shares()
        .share_acknowledge(
            "g",
            member,
            &[ShareAck {
                tp: tp(),
                first,
                last,
                ack,
            }],
        )
        .await
        .unwrap();
    r[0].is_ok()
}

#[test]
fn three_members_share_one_partition_and_each_record_is_accepted_once() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual();
    let e = engine(dir.path(), &clock, ShareReset::Earliest);
    rt::block_on(async {
        produce(&e, 30).await;
        for m in ["a", "b", "c"] {
            join(&e, m).await;
        }
        let mut seen = std::collections::BTreeSet::new();
        for round in 0..10 {
            for m in ["a", "b", "c"] {
                for (o, d) in fetch(&e, m, 4).await {
                    assert_eq!(d, 1);
                    assert!(seen.insert(o), "{o} delivered twice (round {round})");
                    assert!(ack(&e, m, o, o, AckType::Accept).await);
                }
            }
        }
        assert_eq!(seen.len(), 30);
        let view = e.shares().describe_share_group("g").unwrap();
        assert_eq!(view.members.len(), 3);
        assert_eq!(view.partitions[0].start_offset, 30);
        assert_eq!(view.partitions[0].counts.in_flight, 0);
    });
}

#[test]
fn a_released_record_goes_to_another_member_with_its_delivery_count() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual();
    let e = engine(dir.path(), &clock, ShareReset::Earliest);
    rt::block_on(async {
        produce(&e, 3).await;
        join(&e, "a").await;
        join(&e, "b").await;
        assert_eq!(fetch(&e, "a", 10).await, vec![(0, 1), (1, 1), (2, 1)]);
        assert!(fetch(&e, "b", 10).await.is_empty(), "all three are with a");
        assert!(ack(&e, "a", 1, 1, AckType::Release).await);
        assert!(
            !ack(&e, "b", 0, 0, AckType::Accept).await,
            "b holds nothing"
        );
        assert_eq!(fetch(&e, "b", 10).await, vec![(1, 2)]);
    });
}

#[test]
fn a_lock_that_runs_out_and_a_member_that_goes_silent_give_records_back() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual();
    let e = engine(dir.path(), &clock, ShareReset::Earliest);
    rt::block_on(async {
        produce(&e, 4).await;
        join(&e, "a").await;
        join(&e, "b").await;
        assert_eq!(fetch(&e, "a", 2).await, vec![(0, 1), (1, 1)]);
        clock.advance(Duration::from_millis(1_000));
        e.tick_now().await;
        // a's lock ran out: b gets them, counted twice.
        assert_eq!(fetch(&e, "b", 2).await, vec![(0, 2), (1, 2)]);
        assert!(!ack(&e, "a", 0, 1, AckType::Accept).await);
        // b goes silent past its session: everything it holds comes back.
        let epoch = join(&e, "c").await;
        assert!(epoch > 0);
        clock.advance(Duration::from_millis(9_000));
        // keep a and c alive
        for m in ["a", "c"] {
            let beat = e
                .shares()
                .share_heartbeat(ShareHeartbeat {
                    group: "g",
                    member_id: m,
                    member_epoch: e
                        .shares()
                        .describe_share_group("g")
                        .unwrap()
                        .members
                        .iter()
                        .find(|x| x.member_id == m)
                        .unwrap()
                        .member_epoch,
                    subscribed: None,
                    client_id: "test",
                    client_host: "h",
                })
                .await;
            assert!(beat.is_ok(), "{beat:?}");
        }
        clock.advance(Duration::from_millis(1_500));
        e.tick_now().await;
        let members: Vec<String> = e
            .shares()
            .describe_share_group("g")
            .unwrap()
            .members
            .into_iter()
            .map(|m| m.member_id)
            .collect();
        assert_eq!(members, vec!["a".to_string(), "c".to_string()]);
        assert_eq!(
            fetch(&e, "c", 10).await,
            vec![(0, 3), (1, 3), (2, 1), (3, 1)]
        );
    });
}

#[test]
fn a_record_is_archived_at_the_delivery_limit() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual();
    let e = engine(dir.path(), &clock, ShareReset::Earliest);
    rt::block_on(async {
        produce(&e, 2).await;
        join(&e, "a").await;
        for d in 1..=3u16 {
            assert_eq!(fetch(&e, "a", 1).await, vec![(0, d)]);
            assert!(ack(&e, "a", 0, 0, AckType::Release).await);
        }
        // Archived after three deliveries: the next fetch starts past it.
        assert_eq!(fetch(&e, "a", 1).await, vec![(1, 1)]);
        assert!(ack(&e, "a", 1, 1, AckType::Reject).await);
        let view = e.shares().describe_share_group("g").unwrap();
        assert_eq!(view.partitions[0].start_offset, 2);
        assert_eq!(view.partitions[0].archived, 2);
    });
}

#[test]
fn a_small_max_bytes_acquires_one_batch_and_zero_acquires_none() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual();
    let e = engine(dir.path(), &clock, ShareReset::Earliest);
    rt::block_on(async {
        for _ in 0..3 {
            produce(&e, 1).await;
        }
        join(&e, "a").await;
        assert!(fetch_bytes(&e, "a", 10, 0).await.is_empty());
        assert_eq!(fetch_bytes(&e, "a", 10, 1).await, vec![(0, 1)]);
        assert_eq!(fetch_bytes(&e, "a", 10, 1).await, vec![(1, 1)]);
        assert_eq!(fetch(&e, "a", 10).await, vec![(2, 1)]);
    });
}

#[test]
fn a_member_that_leaves_with_its_session_open_acknowledges_until_it_closes_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual();
    let e = engine(dir.path(), &clock, ShareReset::Earliest);
    rt::block_on(async {
        produce(&e, 2).await;
        join(&e, "a").await;
        e.shares()
            .share_session("g", "a", 0, &[("t".into(), 0)], &[])
            .unwrap();
        assert_eq!(fetch(&e, "a", 10).await, vec![(0, 1), (1, 1)]);
        // Its leave heartbeat comes before its close.
        e.shares()
            .share_heartbeat(ShareHeartbeat {
                group: "g",
                member_id: "a",
                member_epoch: -1,
                subscribed: None,
                client_id: "test",
                client_host: "/127.0.0.1",
            })
            .await
            .unwrap();
        join(&e, "b").await;
        assert!(
            fetch(&e, "b", 10).await.is_empty(),
            "a's session still holds them"
        );
        assert!(ack(&e, "a", 0, 0, AckType::Accept).await);
        let closed = e.shares().share_session("g", "a", -1, &[], &[]).unwrap();
        let super::SessionStep::Closed(parts) = closed else {
            panic!("{closed:?}")
        };
        e.shares()
            .share_release_held("g", "a", &parts)
            .await
            .unwrap();
        assert_eq!(fetch(&e, "b", 10).await, vec![(1, 2)]);
        assert!(
            e.shares().share_acknowledge("g", "a", &[]).await.is_err(),
            "a stranger once its session closed"
        );
    });
}

#[test]
fn a_new_group_starts_at_the_log_end_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual();
    let e = engine(dir.path(), &clock, ShareReset::Latest);
    rt::block_on(async {
        produce(&e, 5).await;
        join(&e, "a").await;
        assert!(fetch(&e, "a", 10).await.is_empty());
        produce(&e, 2).await;
        assert_eq!(fetch(&e, "a", 10).await, vec![(5, 1), (6, 1)]);
    });
}

#[test]
fn a_restart_keeps_done_records_done_and_brings_the_rest_back_counted() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual();
    {
        let e = engine(dir.path(), &clock, ShareReset::Earliest);
        rt::block_on(async {
            produce(&e, 6).await;
            join(&e, "a").await;
            assert_eq!(fetch(&e, "a", 6).await.len(), 6);
            assert!(ack(&e, "a", 0, 0, AckType::Accept).await);
            assert!(ack(&e, "a", 2, 2, AckType::Reject).await);
            assert!(ack(&e, "a", 3, 3, AckType::Release).await);
            assert!(ack(&e, "a", 5, 5, AckType::Accept).await);
            // 1 and 4 still acquired.
            e.shutdown().await;
        });
    }
    let e = engine(dir.path(), &clock, ShareReset::Earliest);
    rt::block_on(async {
        join(&e, "b").await;
        assert_eq!(fetch(&e, "b", 10).await, vec![(1, 2), (3, 2), (4, 2)]);
        assert_eq!(e.shares().list_share_groups(), vec!["g".to_string()]);
    });
}

#[test]
fn fetches_and_acknowledgements_of_strangers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual();
    let e = engine(dir.path(), &clock, ShareReset::Earliest);
    rt::block_on(async {
        produce(&e, 1).await;
        let r = e
            .shares()
            .share_fetch(ShareFetchSpec {
                group: "g".into(),
                member: "nobody".into(),
                partitions: vec![tp()],
                max_records: 1,
                max_bytes: 1 << 20,
                max_wait: Duration::ZERO,
            })
            .await;
        assert!(r.is_err());
        assert!(e
            .shares()
            .share_acknowledge("g", "nobody", &[])
            .await
            .is_err());
        join(&e, "a").await;
        // A partition it is not assigned.
        let r = e
            .shares()
            .share_fetch(ShareFetchSpec {
                group: "g".into(),
                member: "a".into(),
                partitions: vec![ShareTp {
                    topic: "t".into(),
                    partition: 7,
                }],
                max_records: 1,
                max_bytes: 1 << 20,
                max_wait: Duration::ZERO,
            })
            .await
            .unwrap();
        assert!(r[0].error.is_some());
        // Deleting a group with members is refused; without, its state goes.
        assert!(e.shares().delete_share_group("g").await.is_err());
    });
}

#[test]
fn a_deleted_topic_takes_its_share_state_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual();
    {
        let e = engine(dir.path(), &clock, ShareReset::Earliest);
        rt::block_on(async {
            produce(&e, 3).await;
            join(&e, "a").await;
            assert_eq!(fetch(&e, "a", 10).await.len(), 3);
            assert!(ack(&e, "a", 0, 2, AckType::Accept).await);
            e.admin().delete_topic("t").await.unwrap();
            e.records()
                .create_topic(
                    "t",
                    TopicConfig {
                        partitions: 1,
                        ..TopicConfig::default()
                    },
                )
                .unwrap();
            produce(&e, 1).await;
            // The group reads the new topic from its start, not from 3.
            assert_eq!(fetch(&e, "a", 10).await, vec![(0, 1)]);
            e.shutdown().await;
        });
    }
    // And after a restart too.
    let e = engine(dir.path(), &clock, ShareReset::Earliest);
    rt::block_on(async {
        join(&e, "b").await;
        assert_eq!(fetch(&e, "b", 10).await, vec![(0, 2)]);
    });
}

/// A share group reads committed records by default: an aborted
/// transaction's records are never acquired (gaps), an open one's wait
/// until it ends; with `share.isolation.level=read_uncommitted` (a group
/// config) every record up to the log end is.
#[test]
fn a_share_group_reads_committed_records_unless_its_isolation_level_says_otherwise() {
    for uncommitted in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let clock = Clock::manual();
        let e = engine(dir.path(), &clock, ShareReset::Earliest);
        rt::block_on(async {
            if uncommitted {
                let op = crate::domain::ConfigOp::Set(
                    "share.isolation.level".into(),
                    "read_uncommitted".into(),
                );
                e.shares()
                    .alter_share_group_configs("g", &[op], false)
                    .await
                    .unwrap();
            }
            produce(&e, 2).await;
            let (pid, epoch) = e
                .transactions()
                .init_transactional_producer("tx", 60_000, None)
                .await
                .unwrap();
            let tps = vec![crate::domain::TopicPartition::new("t", 0)];
            e.transactions()
                .add_partitions_to_txn("tx", pid, epoch, tps.clone())
                .await
                .unwrap();
            super::txn_tests::produce_txn(&e, pid, epoch, 0, &["x", "y"]).await;
            produce(&e, 1).await;
            join(&e, "a").await;
            let open: Vec<i64> = fetch(&e, "a", 10).await.iter().map(|r| r.0).collect();
            if uncommitted {
                assert_eq!(open, [0, 1, 2, 3, 4]);
            } else {
                assert_eq!(open, [0, 1], "stops at the open transaction");
            }
            e.transactions()
                .end_txn("tx", pid, epoch, false)
                .await
                .unwrap();
            let rest: Vec<i64> = fetch(&e, "a", 10).await.iter().map(|r| r.0).collect();
            if uncommitted {
                assert!(rest.is_empty(), "{rest:?}");
            } else {
                assert_eq!(rest, [4], "the aborted records are gaps");
            }
            e.shutdown().await;
        });
    }
}

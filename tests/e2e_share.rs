//! Share groups (queues) over Flume's protocol, end to end: the SDK's
//! [`ShareConsumer`] against a broker on port 0 (accept, release, reject,
//! held records coming back, the delivery-count limit), and the wire's
//! per-acknowledgement and per-partition codes through the low-level client.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flume_broker::config::ShareReset;
use flume_broker::Broker;
use flume_client::lowlevel::Client;
use flume_client::{
    AckMode, Admin, ConnectionConfig, ErrorCode, Producer, ShareConsumer, ShareConsumerBuilder,
};
use flume_protocol::{
    ShareAcknowledgeRequest, ShareAcknowledgement, ShareFetchRequest, ShareHeartbeatRequest,
    SharePartitionRef, ACK_ACCEPT,
};

/// A broker whose share groups start at the log start, with these lock and
/// delivery limits, and a topic `q` of `partitions` holding `n` records
/// (values "0", "1", ...).
async fn broker(
    dir: &std::path::Path,
    lock_ms: u64,
    delivery_limit: u16,
    n: usize,
) -> (Broker, String) {
    let mut c = common::config(dir);
    c.share.auto_offset_reset = ShareReset::Earliest;
    c.share.partition.lock_duration_ms = lock_ms;
    c.share.partition.delivery_count_limit = delivery_limit;
    c.share.groups.heartbeat_interval_ms = 200;
    let broker = Broker::start(c).await.expect("broker starts");
    broker
        .engine()
        .records()
        .create_topic("q", common::topic(1))
        .expect("topic created");
    let addr = broker.local_addr().to_string();
    if n > 0 {
        let p = Producer::connect(&addr).await.unwrap();
        let mut futs = Vec::new();
        for i in 0..n {
            futs.push(
                p.enqueue(flume_client::ProducerRecord::new("q", format!("{i}")))
                    .await
                    .unwrap(),
            );
        }
        for f in futs {
            f.await.unwrap();
        }
        p.close().await;
    }
    (broker, addr)
}

fn member(addr: &str, group: &str) -> ShareConsumerBuilder {
    ShareConsumer::builder(addr, group)
        .subscribe(["q"])
        .max_wait(Duration::from_millis(100))
}

/// Three members of one share group on one partition of 3,000 records:
/// every record is handed out exactly once over the three, each member gets
/// some, and once they close every record is done (the start offset is at
/// the end).
#[test]
fn three_members_accept_every_record_of_one_partition_exactly_once() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr) = broker(dir.path(), 30_000, 5, 3_000).await;
        let seen: Arc<Mutex<HashMap<u64, u32>>> = Arc::default();
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let mut c = member(&addr, "workers")
                .max_records(50)
                .build()
                .await
                .unwrap();
            let seen = Arc::clone(&seen);
            tasks.push(flume_rt::spawn(async move {
                let deadline = Instant::now() + Duration::from_secs(60);
                let mut mine = 0usize;
                while lock_len(&seen) < 3_000 {
                    assert!(Instant::now() < deadline, "records stopped coming");
                    for r in c.poll().await.unwrap() {
                        assert_eq!(r.delivery_count, 1, "offset {}", r.offset);
                        assert_eq!(r.payload(), r.offset.to_string().as_bytes());
                        *seen.lock().unwrap().entry(r.offset).or_default() += 1;
                        mine += 1;
                    }
                }
                c.close().await.unwrap();
                mine
            }));
        }
        let mut per_member = Vec::new();
        for t in tasks {
            per_member.push(t.await);
        }
        {
            let seen = seen.lock().unwrap();
            assert_eq!(seen.len(), 3_000);
            assert!(seen.values().all(|&n| n == 1), "a record came twice");
        }
        assert!(per_member.iter().all(|&n| n > 0), "{per_member:?}");
        let admin = Admin::connect(&addr).await.unwrap();
        common::wait_until("every record accepted", Duration::from_secs(10), || async {
            let d = admin.describe_share_group("workers").await.unwrap();
            d.members.is_empty()
                && d.partitions.len() == 1
                && d.partitions[0].start_offset == 3_000
                && d.partitions[0].in_flight == 0
        })
        .await;
        broker.shutdown().await;
    });
}

fn lock_len(m: &Mutex<HashMap<u64, u32>>) -> usize {
    m.lock().unwrap().len()
}

/// A member that releases every tenth record on its first delivery gets
/// those back, with delivery count 2, and accepts them then.
#[test]
fn released_records_come_back_with_delivery_count_two() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr) = broker(dir.path(), 30_000, 5, 100).await;
        let mut c = member(&addr, "g")
            .ack_mode(AckMode::Explicit)
            .max_records(7)
            .build()
            .await
            .unwrap();
        let mut deliveries: BTreeMap<u64, Vec<u16>> = BTreeMap::new();
        let mut accepted = 0;
        let deadline = Instant::now() + Duration::from_secs(30);
        while accepted < 100 {
            assert!(Instant::now() < deadline, "accepted only {accepted}");
            for r in c.poll().await.unwrap() {
                deliveries
                    .entry(r.offset)
                    .or_default()
                    .push(r.delivery_count);
                if r.offset % 10 == 0 && r.delivery_count == 1 {
                    r.release();
                } else {
                    r.accept();
                    accepted += 1;
                }
            }
        }
        let outcomes = c.commit().await.unwrap();
        assert!(outcomes.iter().all(|o| o.error == ErrorCode::None));
        for (o, d) in &deliveries {
            if o % 10 == 0 {
                assert_eq!(d, &vec![1, 2], "offset {o}");
            } else {
                assert_eq!(d, &vec![1], "offset {o}");
            }
        }
        c.close().await.unwrap();
        broker.shutdown().await;
    });
}

/// Records a member holds without acknowledging come back to another: at
/// once when it closes (it leaves), and when their lock runs out when it is
/// dropped (it just goes silent).
#[test]
fn held_records_come_back_when_their_member_closes_or_is_dropped() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr) = broker(dir.path(), 500, 5, 20).await;
        let explicit = |n| {
            member(&addr, "g")
                .ack_mode(AckMode::Explicit)
                .max_records(n)
        };
        let mut a = explicit(10).build().await.unwrap();
        let held: Vec<u64> = a.poll().await.unwrap().iter().map(|r| r.offset).collect();
        assert_eq!(held, (0..10).collect::<Vec<_>>());
        // Closing leaves the group: its records are available at once, well
        // before their 500 ms lock runs out, so a member that asks at once
        // gets them again (before the ten never delivered).
        a.close().await.unwrap();
        let mut b = explicit(10).build().await.unwrap();
        let again = b.poll().await.unwrap();
        assert_eq!(
            again.iter().map(|r| r.offset).collect::<Vec<_>>(),
            held,
            "the closed member's records come back first"
        );
        assert!(again.iter().all(|r| r.delivery_count == 2));
        for r in &again {
            r.accept();
        }
        // The next ten, held by a member that is dropped.
        let mut c = explicit(10).build().await.unwrap();
        let held: Vec<u64> = c.poll().await.unwrap().iter().map(|r| r.offset).collect();
        assert_eq!(held, (10..20).collect::<Vec<_>>());
        drop(c);
        let mut back = BTreeMap::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while back.len() < 10 {
            assert!(
                Instant::now() < deadline,
                "the dropped member's records did not come back"
            );
            for r in b.poll().await.unwrap() {
                back.insert(r.offset, r.delivery_count);
                r.accept();
            }
        }
        assert_eq!(back.keys().copied().collect::<Vec<_>>(), held);
        assert!(back.values().all(|&d| d == 2), "{back:?}");
        b.close().await.unwrap();
        broker.shutdown().await;
    });
}

/// A rejected record is never delivered again, to anyone; commit answers
/// each record's outcome.
#[test]
fn rejected_records_never_come_back() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr) = broker(dir.path(), 30_000, 5, 10).await;
        let mut c = member(&addr, "g")
            .ack_mode(AckMode::Explicit)
            .build()
            .await
            .unwrap();
        let got = c.poll().await.unwrap();
        assert_eq!(got.len(), 10);
        for r in &got {
            if r.offset < 5 {
                r.reject();
            } else {
                r.release();
            }
        }
        let outcomes = c.commit().await.unwrap();
        assert_eq!(outcomes.len(), 10);
        assert!(
            outcomes.iter().all(|o| o.error == ErrorCode::None),
            "{outcomes:?}"
        );
        let mut other = member(&addr, "g").build().await.unwrap();
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            seen.extend(other.poll().await.unwrap().iter().map(|r| r.offset));
            seen.extend(c.poll().await.unwrap().iter().map(|r| r.offset));
        }
        seen.sort_unstable();
        assert_eq!(seen, (5..10).collect::<Vec<_>>());
        other.close().await.unwrap();
        c.close().await.unwrap();
        let d = Admin::connect(&addr)
            .await
            .unwrap()
            .describe_share_group("g")
            .await
            .unwrap();
        assert_eq!(d.partitions[0].start_offset, 10);
        assert_eq!(d.partitions[0].archived, 5);
        broker.shutdown().await;
    });
}

/// A record released on every delivery is archived at the delivery-count
/// limit: delivered exactly that many times, then never again.
#[test]
fn the_delivery_count_limit_archives_a_record_released_every_time() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr) = broker(dir.path(), 30_000, 3, 4).await;
        let mut c = member(&addr, "g")
            .ack_mode(AckMode::Explicit)
            .build()
            .await
            .unwrap();
        let mut deliveries: BTreeMap<u64, Vec<u16>> = BTreeMap::new();
        let admin = Admin::connect(&addr).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            for r in c.poll().await.unwrap() {
                deliveries
                    .entry(r.offset)
                    .or_default()
                    .push(r.delivery_count);
                r.release();
            }
            c.commit().await.unwrap();
            let d = admin.describe_share_group("g").await.unwrap();
            if d.partitions[0].archived == 4 {
                break;
            }
            assert!(Instant::now() < deadline, "{deliveries:?} {d:?}");
        }
        assert_eq!(deliveries.len(), 4);
        assert!(
            deliveries.values().all(|d| d == &vec![1, 2, 3]),
            "{deliveries:?}"
        );
        assert!(c.poll().await.unwrap().is_empty());
        c.close().await.unwrap();
        broker.shutdown().await;
    });
}

/// The wire's codes: an acknowledgement of records not acquired is
/// INVALID_RECORD_STATE and one of an unknown type INVALID_REQUEST, each on
/// its own; a partition not assigned is NOT_ASSIGNED; a member not in the
/// group UNKNOWN_MEMBER; a join without topics INVALID_REQUEST.
#[test]
fn share_requests_answer_each_acknowledgement_and_partition() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr) = broker(dir.path(), 30_000, 5, 3).await;
        let client = Client::connect(addr.clone(), ConnectionConfig::default())
            .await
            .unwrap();
        let join = |topics: Vec<String>| ShareHeartbeatRequest {
            group: "g".into(),
            member_id: String::new(),
            member_epoch: 0,
            client_id: "raw".into(),
            topics,
        };
        let e = client.call(&join(vec![])).await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::InvalidRequest), "{e}");
        let joined = client.call(&join(vec!["q".into()])).await.unwrap();
        assert!(joined.member_epoch > 0);
        assert_eq!(joined.assignment.len(), 1);
        assert_eq!(joined.assignment[0].partitions, vec![0]);
        let ack = |first, last, ack_type| ShareAcknowledgement {
            topic: "q".into(),
            partition: 0,
            first_offset: first,
            last_offset: last,
            ack_type,
        };
        let fetch = ShareFetchRequest {
            group: "g".into(),
            member_id: joined.member_id.clone(),
            max_wait_ms: 0,
            max_records: 2,
            max_bytes: 1 << 20,
            partitions: vec![
                SharePartitionRef {
                    topic: "q".into(),
                    partition: 7,
                },
                SharePartitionRef {
                    topic: "q".into(),
                    partition: 0,
                },
            ],
            // Nothing is acquired yet: the acknowledgement comes first.
            acknowledgements: vec![ack(0, 0, ACK_ACCEPT)],
        };
        let r = client.call(&fetch).await.unwrap();
        assert_eq!(r.acknowledgements, vec![ErrorCode::InvalidRecordState]);
        assert_eq!(r.partitions[0].error, ErrorCode::NotAssigned);
        let p = &r.partitions[1];
        assert_eq!(p.error, ErrorCode::None);
        assert_eq!(p.acquired.len(), 1);
        assert_eq!(
            (
                p.acquired[0].first_offset,
                p.acquired[0].last_offset,
                p.acquired[0].delivery_count
            ),
            (0, 1, 1)
        );
        let records = flume_protocol::record::decode_all(&p.records).unwrap();
        assert_eq!(
            records.iter().map(|r| r.offset).collect::<Vec<_>>(),
            vec![0, 1]
        );
        let acked = client
            .call(&ShareAcknowledgeRequest {
                group: "g".into(),
                member_id: joined.member_id.clone(),
                acknowledgements: vec![ack(0, 1, ACK_ACCEPT), ack(2, 2, ACK_ACCEPT), ack(1, 1, 9)],
            })
            .await
            .unwrap();
        assert_eq!(
            acked.results,
            vec![
                ErrorCode::None,
                ErrorCode::InvalidRecordState,
                ErrorCode::InvalidRequest
            ]
        );
        let e = client
            .call(&ShareAcknowledgeRequest {
                group: "g".into(),
                member_id: "nobody".into(),
                acknowledgements: vec![ack(2, 2, ACK_ACCEPT)],
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::UnknownMember), "{e}");
        let d = Admin::connect(&addr)
            .await
            .unwrap()
            .describe_share_group("g")
            .await
            .unwrap();
        assert_eq!(d.members.len(), 1);
        assert_eq!(d.members[0].client_id, "raw");
        assert_eq!(d.partitions[0].start_offset, 2);
        let e = Admin::connect(&addr)
            .await
            .unwrap()
            .describe_share_group("nope")
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::UnknownGroup));
        broker.shutdown().await;
    });
}

/// The consumer as a stream: records one at a time, accepted by the next
/// fetch (implicit mode).
#[test]
fn a_share_consumer_is_a_stream_of_records() {
    use futures::StreamExt;
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr) = broker(dir.path(), 30_000, 5, 6).await;
        let c = member(&addr, "g").max_records(4).build().await.unwrap();
        let got: Vec<u64> = c
            .into_stream()
            .take(6)
            .map(|r| r.unwrap().offset)
            .collect()
            .await;
        assert_eq!(got, (0..6).collect::<Vec<_>>());
        // The first four were accepted by the fetch of the last two.
        let d = Admin::connect(&addr)
            .await
            .unwrap()
            .describe_share_group("g")
            .await
            .unwrap();
        assert_eq!(d.partitions[0].start_offset, 4);
        broker.shutdown().await;
    });
}

/// A member the broker dropped (here made to leave behind its back) joins
/// again at its next poll and goes on: the records it held come back to it.
#[test]
fn a_dropped_member_joins_again_and_gets_its_records_back() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr) = broker(dir.path(), 30_000, 5, 5).await;
        let mut c = member(&addr, "g")
            .ack_mode(AckMode::Explicit)
            .build()
            .await
            .unwrap();
        assert_eq!(c.poll().await.unwrap().len(), 5);
        let raw = Client::connect(addr.clone(), ConnectionConfig::default())
            .await
            .unwrap();
        let left = raw
            .call(&ShareHeartbeatRequest {
                group: "g".into(),
                member_id: c.member_id(),
                member_epoch: -1,
                client_id: String::new(),
                topics: vec![],
            })
            .await
            .unwrap();
        assert_eq!(left.member_epoch, -1);
        let mut back = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while back.len() < 5 {
            assert!(Instant::now() < deadline, "got back only {back:?}");
            for r in c.poll().await.unwrap() {
                assert_eq!(r.delivery_count, 2);
                back.push(r.offset);
                r.accept();
            }
        }
        assert_eq!(back, (0..5).collect::<Vec<_>>());
        let outcomes = c.commit().await.unwrap();
        assert!(
            outcomes.iter().all(|o| o.error == ErrorCode::None),
            "{outcomes:?}"
        );
        c.close().await.unwrap();
        broker.shutdown().await;
    });
}

/// A poll waits at the broker for records (long polling) and is answered
/// as soon as one is produced, well before its wait ends.
#[test]
fn a_waiting_poll_is_answered_when_a_record_arrives() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr) = broker(dir.path(), 30_000, 5, 0).await;
        let mut c = member(&addr, "g")
            .max_wait(Duration::from_secs(20))
            .build()
            .await
            .unwrap();
        let start = Instant::now();
        let poll = flume_rt::spawn(async move {
            let got = c.poll().await.unwrap();
            (got.iter().map(|r| r.offset).collect::<Vec<_>>(), c)
        });
        let p = Producer::connect(&addr).await.unwrap();
        p.send("q", None, b"late").await.unwrap();
        let (got, c) = poll.await;
        assert_eq!(got, vec![0]);
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        c.close().await.unwrap();
        broker.shutdown().await;
    });
}

/// With the authorizer on, a share group's member needs READ on the group
/// and on every topic it subscribes to or names; describing needs DESCRIBE
/// on the group (READ implies it).
#[test]
fn share_groups_follow_the_acls() {
    use flume_broker::security::auth::AuthMode;
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let mut c = common::config(dir.path());
        c.auth = AuthMode::Required;
        c.admin_users = vec!["admin".into()];
        c.authorizer = true;
        let broker = Broker::start(c).await.unwrap();
        broker.add_user("admin", "admin-pw").await.unwrap();
        broker.add_user("alice", "alice-pw").await.unwrap();
        for t in ["q", "audit"] {
            broker
                .engine()
                .records()
                .create_topic(t, common::topic(1))
                .unwrap();
        }
        let addr = broker.local_addr().to_string();
        let login = |u: &str| ConnectionConfig::default().credentials(u, format!("{u}-pw"));
        let allow = |op: &str, kind: &str, name: &str, pattern: &str| flume_client::AclEntry {
            principal: "User:alice".into(),
            permission: "allow".into(),
            resource_type: kind.into(),
            pattern: pattern.into(),
            name: name.into(),
            operation: op.into(),
        };
        let admin = Admin::connect_with(&addr, login("admin")).await.unwrap();
        admin
            .add_acl(allow("read", "topic", "q", "literal"))
            .await
            .unwrap();
        let alice = |group: &str| member(&addr, group).connection(login("alice")).build();
        let e = alice("team-a").await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::AuthorizationFailed), "{e}");
        admin
            .add_acl(allow("read", "group", "team-", "prefixed"))
            .await
            .unwrap();
        let mut m = alice("team-a").await.unwrap();
        assert!(m.poll().await.unwrap().is_empty());
        let raw = Client::connect(addr.clone(), login("alice")).await.unwrap();
        let e = raw
            .call(&ShareFetchRequest {
                group: "team-a".into(),
                member_id: m.member_id(),
                max_wait_ms: 0,
                max_records: 1,
                max_bytes: 1 << 20,
                partitions: vec![SharePartitionRef {
                    topic: "audit".into(),
                    partition: 0,
                }],
                acknowledgements: vec![],
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::AuthorizationFailed), "{e}");
        let alice_admin = Admin::connect_with(&addr, login("alice")).await.unwrap();
        let d = alice_admin.describe_share_group("team-a").await.unwrap();
        assert_eq!(d.members.len(), 1);
        let e = alice_admin.describe_share_group("other").await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::AuthorizationFailed), "{e}");
        m.close().await.unwrap();
        broker.shutdown().await;
    });
}

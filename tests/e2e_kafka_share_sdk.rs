//! The SDK's [`ShareConsumer`] over Kafka's share APIs (`kafka://`
//! addresses: ShareGroupHeartbeat, share sessions with ShareFetch,
//! ShareAcknowledge) against the broker's Kafka listener, in process: the
//! scenarios `e2e_share` runs over Flume's protocol, with only the address
//! changed. The group's state is read back through Flume's admin.

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
use flume_protocol::ShareHeartbeatRequest;
use kafka_protocol::messages::{GroupId, ShareAcknowledgeRequest};
use kafka_protocol::protocol::StrBytes;

/// A broker with both listeners whose share groups start at the log start,
/// with these lock and delivery limits, and a topic `q` of one partition
/// holding `n` records (values "0", "1", ...): (broker, "kafka://...",
/// Flume's "host:port").
async fn broker(
    dir: &std::path::Path,
    lock_ms: u64,
    delivery_limit: u16,
    n: usize,
) -> (Broker, String, String) {
    let mut c = common::config(dir);
    c.kafka_listen = Some("127.0.0.1:0".into());
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
    let native = broker.local_addr().to_string();
    let kafka = format!(
        "kafka://{}",
        broker.kafka_addr().expect("the Kafka listener")
    );
    if n > 0 {
        let p = Producer::connect(&kafka).await.unwrap();
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
    (broker, kafka, native)
}

fn member(addr: &str, group: &str) -> ShareConsumerBuilder {
    ShareConsumer::builder(addr, group)
        .subscribe(["q"])
        .max_wait(Duration::from_millis(100))
}

fn seen_len(m: &Mutex<HashMap<u64, u32>>) -> usize {
    m.lock().unwrap().len()
}

/// Two members over Kafka share one partition of 2,000 records: every
/// record is handed out exactly once over the two, each gets some, and
/// once they close every record is done.
#[test]
fn two_members_over_kafka_accept_every_record_exactly_once() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, kafka, native) = broker(dir.path(), 30_000, 5, 2_000).await;
        let seen: Arc<Mutex<HashMap<u64, u32>>> = Arc::default();
        // Both join before either polls, so neither can take everything first.
        let mut members = Vec::new();
        for _ in 0..2 {
            let c = member(&kafka, "workers")
                .max_records(50)
                .build()
                .await
                .unwrap();
            assert_eq!(c.assignment(), vec![("q".to_owned(), 0)]);
            members.push(c);
        }
        let mut tasks = Vec::new();
        for mut c in members {
            let seen = Arc::clone(&seen);
            tasks.push(flume_rt::spawn(async move {
                let deadline = Instant::now() + Duration::from_secs(60);
                let mut mine = 0usize;
                while seen_len(&seen) < 2_000 {
                    assert!(Instant::now() < deadline, "records stopped coming");
                    for r in c.poll().await.unwrap() {
                        assert_eq!(r.delivery_count, 1, "offset {}", r.offset);
                        assert_eq!(r.payload(), r.offset.to_string().as_bytes());
                        *seen.lock().unwrap().entry(r.offset).or_default() += 1;
                        mine += 1;
                    }
                    // Let the other member's poll in between (one runtime thread may
                    // run both).
                    flume_rt::yield_now().await;
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
            assert_eq!(seen.len(), 2_000);
            assert!(seen.values().all(|&n| n == 1), "a record came twice");
        }
        assert!(per_member.iter().all(|&n| n > 0), "{per_member:?}");
        let admin = Admin::connect(&native).await.unwrap();
        common::wait_until("every record accepted", Duration::from_secs(10), || async {
            let d = admin.describe_share_group("workers").await.unwrap();
            d.members.is_empty()
                && d.partitions.len() == 1
                && d.partitions[0].start_offset == 2_000
                && d.partitions[0].in_flight == 0
        })
        .await;
        broker.shutdown().await;
    });
}

/// A member that releases every tenth record on its first delivery gets
/// those back, with delivery count 2, and accepts them then; commit
/// answers every record's outcome.
#[test]
fn released_records_come_back_over_kafka_with_delivery_count_two() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, kafka, _) = broker(dir.path(), 30_000, 5, 100).await;
        let mut c = member(&kafka, "g")
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
        assert!(!outcomes.is_empty());
        assert!(
            outcomes.iter().all(|o| o.error == ErrorCode::None),
            "{outcomes:?}"
        );
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
/// once when it closes (its share session closes and it leaves), and when
/// their lock runs out when it is dropped.
#[test]
fn held_records_come_back_when_a_kafka_member_closes_or_is_dropped() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, kafka, _) = broker(dir.path(), 500, 5, 20).await;
        let explicit = |n| {
            member(&kafka, "g")
                .ack_mode(AckMode::Explicit)
                .max_records(n)
        };
        let mut a = explicit(10).build().await.unwrap();
        let held: Vec<u64> = a.poll().await.unwrap().iter().map(|r| r.offset).collect();
        assert_eq!(held, (0..10).collect::<Vec<_>>());
        a.close().await.unwrap();
        // Available at once, before the ten never delivered.
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
/// each record's outcome; an acknowledgement of records whose lock ran out
/// (another member holds them now) is INVALID_RECORD_STATE.
#[test]
fn rejected_records_never_come_back_over_kafka() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, kafka, native) = broker(dir.path(), 30_000, 5, 10).await;
        let mut c = member(&kafka, "g")
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
        assert_eq!(
            outcomes.iter().map(|o| o.offset).collect::<Vec<_>>(),
            (0..10).collect::<Vec<_>>()
        );
        assert!(
            outcomes.iter().all(|o| o.error == ErrorCode::None),
            "{outcomes:?}"
        );
        let mut other = member(&kafka, "g").build().await.unwrap();
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
        let d = Admin::connect(&native)
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

/// Acknowledging records whose lock ran out and that another member holds
/// now: commit answers INVALID_RECORD_STATE for each, and nothing of it
/// applies (the other member accepts them).
#[test]
fn a_commit_of_records_another_member_took_is_invalid_record_state() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, kafka, _) = broker(dir.path(), 500, 5, 3).await;
        let mut slow = member(&kafka, "g")
            .ack_mode(AckMode::Explicit)
            .build()
            .await
            .unwrap();
        let mine = slow.poll().await.unwrap();
        assert_eq!(mine.len(), 3);
        // The locks run out; another member acquires the records.
        let mut fast = member(&kafka, "g")
            .ack_mode(AckMode::Explicit)
            .build()
            .await
            .unwrap();
        let mut taken = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while taken.len() < 3 {
            assert!(Instant::now() < deadline, "the records did not come back");
            taken.extend(fast.poll().await.unwrap());
        }
        for r in &mine {
            r.accept();
        }
        let outcomes = slow.commit().await.unwrap();
        assert_eq!(outcomes.len(), 3);
        assert!(
            outcomes
                .iter()
                .all(|o| o.error == ErrorCode::InvalidRecordState),
            "{outcomes:?}"
        );
        for r in &taken {
            assert_eq!(r.delivery_count, 2);
            r.accept();
        }
        let outcomes = fast.commit().await.unwrap();
        assert!(
            outcomes.iter().all(|o| o.error == ErrorCode::None),
            "{outcomes:?}"
        );
        slow.close().await.unwrap();
        fast.close().await.unwrap();
        broker.shutdown().await;
    });
}

/// Implicit mode over Kafka, as a stream: the records one at a time, the
/// first four accepted by the fetch (its piggy-backed acknowledgements) of
/// the last two.
#[test]
fn a_kafka_share_consumer_is_a_stream_with_implicit_acceptance() {
    use futures::StreamExt;
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, kafka, native) = broker(dir.path(), 30_000, 5, 6).await;
        let c = member(&kafka, "g").max_records(4).build().await.unwrap();
        let got: Vec<u64> = c
            .into_stream()
            .take(6)
            .map(|r| r.unwrap().offset)
            .collect()
            .await;
        assert_eq!(got, (0..6).collect::<Vec<_>>());
        let d = Admin::connect(&native)
            .await
            .unwrap()
            .describe_share_group("g")
            .await
            .unwrap();
        assert_eq!(d.partitions[0].start_offset, 4);
        broker.shutdown().await;
    });
}

/// A member made to leave behind its back joins again (its heartbeat is
/// refused, it joins with epoch 0 and the same id) and goes on in the same
/// share session: over Kafka the records it held stay its own while its
/// session is open (the broker gives them back when the session closes), so
/// it still acknowledges them, and it gets the records produced later.
#[test]
fn a_kafka_member_made_to_leave_joins_again_and_goes_on() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, kafka, native) = broker(dir.path(), 30_000, 5, 5).await;
        let mut c = member(&kafka, "g")
            .ack_mode(AckMode::Explicit)
            .build()
            .await
            .unwrap();
        let held = c.poll().await.unwrap();
        assert_eq!(held.len(), 5);
        let raw = Client::connect(native.clone(), ConnectionConfig::default())
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
        let admin = Admin::connect(&native).await.unwrap();
        let id = c.member_id();
        common::wait_until(
            "the member joins again",
            Duration::from_secs(10),
            || async {
                let d = admin.describe_share_group("g").await.unwrap();
                d.members.len() == 1 && d.members[0].member_id == id
            },
        )
        .await;
        for r in &held {
            r.accept();
        }
        let outcomes = c.commit().await.unwrap();
        assert_eq!(outcomes.len(), 5);
        assert!(
            outcomes.iter().all(|o| o.error == ErrorCode::None),
            "{outcomes:?}"
        );
        let p = Producer::connect(&kafka).await.unwrap();
        p.send("q", None, b"5").await.unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while got.is_empty() {
            assert!(Instant::now() < deadline, "the new record did not come");
            got = c.poll().await.unwrap();
        }
        assert_eq!(
            got.iter()
                .map(|r| (r.offset, r.delivery_count))
                .collect::<Vec<_>>(),
            vec![(5, 1)]
        );
        got[0].accept();
        c.close().await.unwrap();
        let d = admin.describe_share_group("g").await.unwrap();
        assert_eq!(d.partitions[0].start_offset, 6);
        broker.shutdown().await;
    });
}

/// A share session out of step (its epoch moved on behind the member's
/// back, as when a poll is cancelled after its request went out): the
/// next poll opens a new session at once and still gets records, and the
/// acknowledgements the refused fetch carried follow the opening one.
#[test]
fn a_share_session_out_of_step_is_opened_again_within_the_poll() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, kafka, native) = broker(dir.path(), 30_000, 5, 6).await;
        let mut c = member(&kafka, "g")
            .ack_mode(AckMode::Explicit)
            .max_records(3)
            .build()
            .await
            .unwrap();
        let first = c.poll().await.unwrap();
        assert_eq!(
            first.iter().map(|r| r.offset).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        for r in &first {
            r.accept();
        }
        // The opening fetch was epoch 0; the broker expects 1 next. A
        // ShareAcknowledge of nothing at epoch 1 moves it to 2.
        let addr = kafka.trim_start_matches("kafka://").to_owned();
        let mut raw = common::kafka::Kc::connect(&addr).unwrap();
        let moved = raw
            .call(
                1,
                &ShareAcknowledgeRequest::default()
                    .with_group_id(Some(GroupId(StrBytes::from_static_str("g"))))
                    .with_member_id(Some(StrBytes::from_string(c.member_id())))
                    .with_share_session_epoch(1),
            )
            .unwrap();
        assert_eq!(moved.error_code, 0, "{moved:?}");
        let second = c.poll().await.unwrap();
        assert_eq!(
            second.iter().map(|r| r.offset).collect::<Vec<_>>(),
            vec![3, 4, 5]
        );
        for r in &second {
            r.accept();
        }
        let outcomes = c.commit().await.unwrap();
        assert_eq!(outcomes.len(), 3);
        assert!(
            outcomes.iter().all(|o| o.error == ErrorCode::None),
            "{outcomes:?}"
        );
        let d = Admin::connect(&native)
            .await
            .unwrap()
            .describe_share_group("g")
            .await
            .unwrap();
        assert_eq!(d.partitions[0].start_offset, 6, "{d:?}");
        c.close().await.unwrap();
        broker.shutdown().await;
    });
}

/// A poll waits at the broker (ShareFetch's max wait) and is answered as
/// soon as a record is produced.
#[test]
fn a_waiting_kafka_poll_is_answered_when_a_record_arrives() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, kafka, _) = broker(dir.path(), 30_000, 5, 0).await;
        let mut c = member(&kafka, "g")
            .max_wait(Duration::from_secs(20))
            .build()
            .await
            .unwrap();
        // The first poll opens the share session; it answers at once or
        // after its wait only if nothing came.
        let start = Instant::now();
        let poll = flume_rt::spawn(async move {
            let got = c.poll().await.unwrap();
            (got.iter().map(|r| r.offset).collect::<Vec<_>>(), c)
        });
        let p = Producer::connect(&kafka).await.unwrap();
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

/// A subscription to a topic that does not exist: the member joins with
/// nothing assigned, polls answer nothing, and records come once the topic
/// is made.
#[test]
fn a_kafka_member_of_a_topic_made_later_gets_its_records() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, kafka, _) = broker(dir.path(), 30_000, 5, 0).await;
        let mut c = ShareConsumer::builder(&kafka, "late")
            .subscribe(["later"])
            .max_wait(Duration::from_millis(100))
            .build()
            .await
            .unwrap();
        assert!(c.assignment().is_empty());
        assert!(c.poll().await.unwrap().is_empty());
        broker
            .engine()
            .records()
            .create_topic("later", common::topic(2))
            .unwrap();
        let p = Producer::connect(&kafka).await.unwrap();
        for part in 0..2 {
            p.send_record(flume_client::ProducerRecord::new("later", "x").partition(part))
                .await
                .unwrap();
        }
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while got.len() < 2 {
            assert!(Instant::now() < deadline, "got only {got:?}");
            got.extend(c.poll().await.unwrap().iter().map(|r| r.partition));
        }
        got.sort_unstable();
        assert_eq!(got, vec![0, 1]);
        c.close().await.unwrap();
        broker.shutdown().await;
    });
}

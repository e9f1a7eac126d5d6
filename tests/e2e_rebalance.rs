//! Rebalances reach the members at once (HEARTBEAT_WAIT, extension key 16;
//! GROUP_FETCH, key 17): a clean leave completes without waiting a heartbeat
//! interval, waiting heartbeats are bounded and released when their
//! connection closes, the plain HEARTBEAT still works, and a member's fetches
//! are its heartbeats.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use flume_broker::domain::Assignor;
use flume_broker::domain::{FetchFrom, FetchSpec, JoinSpec, TopicPartition};
use flume_broker::Broker;
use flume_client::{GroupConsumer, RebalanceEvent};
use flume_protocol::{
    self as protocol, ErrorCode, FetchPartition, FetchRequest, GroupFetchRequest, HeartbeatRequest,
    HeartbeatWaitRequest,
};
use flume_rt::{self as rt, TcpStream};
use futures::io::AsyncWriteExt;
use futures::{FutureExt, StreamExt};

type Assigned = std::sync::Arc<std::sync::Mutex<(i32, BTreeSet<i32>)>>;

/// A member consuming in its own task; its latest assignment is in `assigned`.
struct Member {
    assigned: Assigned,
    stop: async_channel::Sender<()>,
    task: rt::Task<()>,
}

fn spawn_member(mut c: GroupConsumer) -> Member {
    let assigned: Assigned = Default::default();
    let (stop, stop_rx) = async_channel::bounded::<()>(1);
    let events = c.events();
    let seen = assigned.clone();
    let task = rt::spawn(async move {
        let mut events = events.fuse();
        loop {
            // The consumer's own stream keeps its pending poll across these
            // selects: an event or the stop abandons nothing half-done.
            futures::select! {
                _ = c.next().fuse() => {}
                ev = events.next() => {
                    if let Some(RebalanceEvent::Assigned { generation, partitions }) = ev {
                        *seen.lock().unwrap() =
                            (generation, partitions.iter().map(|p| p.1).collect());
                    }
                }
                _ = stop_rx.recv().fuse() => break,
            }
        }
        c.close().await.unwrap();
    });
    // The first assignment came before the task started.
    Member {
        assigned,
        stop,
        task,
    }
}

impl Member {
    fn now(&self) -> (i32, BTreeSet<i32>) {
        self.assigned.lock().unwrap().clone()
    }
}

/// Heartbeat interval and session timeout long enough that no heartbeat but
/// the waiting one can tell a member of a rebalance during the test.
fn slow_heartbeats(addr: &str) -> flume_client::GroupConsumerBuilder {
    GroupConsumer::builder(addr, "g")
        .topic("t")
        .session_timeout(Duration::from_secs(300))
        .heartbeat_interval(Duration::from_secs(3600))
        .rebalance_timeout(Duration::from_secs(60))
        .auto_commit(false)
}

/// A clean leave reaches the other members at once: with a heartbeat
/// interval of an hour and a manual clock (no deadline passes), the two that
/// stay rejoin and get generation n+1, keeping their partitions (sticky).
#[test]
fn clean_leave_rebalances_without_waiting_a_heartbeat_interval() {
    rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr, _clock) = common::with_topic_manual(dir.path(), "t", 6).await;
        let engine = broker.engine().clone();
        // Members join one by one; each join is a rebalance the earlier ones learn of.
        let mut members = Vec::new();
        for _ in 0..3 {
            // Each join completes only once the members before it rejoined.
            let c = rt::timeout(Duration::from_secs(5), slow_heartbeats(&addr).build())
                .await
                .expect("the earlier members learn of the join at once")
                .unwrap();
            members.push(spawn_member(c));
        }
        let stable = |ms: &[Member], n: usize| {
            let now: Vec<_> = ms.iter().map(Member::now).collect();
            let gen = now[0].0;
            let all: BTreeSet<i32> = now.iter().flat_map(|a| a.1.iter().copied()).collect();
            let count: usize = now.iter().map(|a| a.1.len()).sum();
            (gen > 0 && now.iter().all(|a| a.0 == gen) && all.len() == 6 && count == 6)
                .then_some(gen)
                .filter(|_| ms.len() == n)
        };
        common::wait_until(
            "three members share six partitions",
            Duration::from_secs(10),
            || {
                let ok = stable(&members, 3).is_some();
                async move { ok }
            },
        )
        .await;
        let before = stable(&members, 3).unwrap();
        let kept: Vec<BTreeSet<i32>> = members[..2].iter().map(|m| m.now().1).collect();
        let leaver = members.pop().unwrap();
        drop(leaver.stop);
        leaver.task.await;
        common::wait_until(
            "the two others have generation n+1 with every partition",
            Duration::from_secs(5),
            || {
                let ok = stable(&members, 2).is_some_and(|g| g > before);
                async move { ok }
            },
        )
        .await;
        // Sticky: the leaver's two partitions move, and at most one more
        // (group.rs: a leave moves at most as many as there were members).
        let stayed: usize = members
            .iter()
            .zip(&kept)
            .map(|(m, old)| m.now().1.intersection(old).count())
            .sum();
        assert!(
            stayed >= 3,
            "the members that stayed kept {stayed} of 4 partitions"
        );
        assert_eq!(engine.groups().group_members("g"), Some(2));
        for m in members {
            drop(m.stop);
            m.task.await;
        }
        broker.shutdown().await;
    });
}

async fn join_one(engine: &flume_broker::Engine) -> (String, i32) {
    // Boxed: the join's future is large for a test thread's stack in debug builds.
    let j = Box::pin(engine.groups().join_group(JoinSpec {
        group: "g".into(),
        member_id: String::new(),
        topics: vec!["t".into()],
        session_timeout: Duration::from_secs(300),
        rebalance_timeout: Duration::from_secs(10),
        assignor: Assignor::Sticky,
    }))
    .await
    .unwrap();
    (j.member_id, j.generation)
}

async fn send<R: protocol::Request>(s: &mut TcpStream, id: i32, req: &R) {
    let mut buf = Vec::new();
    protocol::encode_request(&mut buf, id, req);
    s.write_all(&buf).await.unwrap();
}

/// The next response's request id and error code (boxed: the reader holds a
/// 64 KiB buffer, too much for a test thread's stack in a debug build).
async fn read(s: &mut TcpStream, got: &mut Vec<u8>) -> (i32, ErrorCode) {
    Box::pin(common::read_response_code(s, got)).await.unwrap()
}

fn wait_req(member: &str, generation: i32, max_wait_ms: i32) -> HeartbeatWaitRequest {
    HeartbeatWaitRequest {
        group: "g".into(),
        generation,
        member_id: member.into(),
        max_wait_ms,
    }
}

/// Waiting heartbeats take at most `max_connections` places broker-wide (one
/// past that is answered at once, as a HEARTBEAT); a connection that closes
/// gives its places back; a leave answers the waiting ones at once.
#[test]
fn waiting_heartbeats_are_bounded_and_released_on_close() {
    rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (mut cfg, _clock) = common::manual_config(dir.path());
        cfg.max_connections = 2;
        let broker = Broker::start(cfg).await.unwrap();
        let engine = broker.engine().clone();
        engine
            .records()
            .create_topic("t", common::topic(2))
            .unwrap();
        let addr = broker.local_addr().to_string();
        let (member, generation) = join_one(&engine).await;

        let mut s = TcpStream::connect(&addr).await.unwrap();
        for id in 1..=3 {
            send(&mut s, id, &wait_req(&member, generation, 600_000)).await;
        }
        let mut got = Vec::new();
        let (id, code) = read(&mut s, &mut got).await;
        assert_eq!(
            (id, code),
            (3, ErrorCode::None),
            "the third is answered at once"
        );
        common::wait_until("two heartbeats wait", Duration::from_secs(2), || {
            let n = engine.groups().parked_heartbeats();
            async move { n == 2 }
        })
        .await;
        drop(s);
        common::wait_until(
            "a closed connection's heartbeats stop waiting",
            Duration::from_secs(2),
            || {
                let n = engine.groups().parked_heartbeats();
                async move { n == 0 }
            },
        )
        .await;

        // A leave answers a waiting heartbeat at once.
        let mut s = TcpStream::connect(&addr).await.unwrap();
        send(&mut s, 7, &wait_req(&member, generation, 600_000)).await;
        common::wait_until("one heartbeat waits", Duration::from_secs(2), || {
            let n = engine.groups().parked_heartbeats();
            async move { n == 1 }
        })
        .await;
        engine.groups().leave_group("g", &member).unwrap();
        let (id, code) = read(&mut s, &mut got).await;
        assert_eq!((id, code), (7, ErrorCode::UnknownMember));
        assert_eq!(engine.groups().parked_heartbeats(), 0);
        broker.shutdown().await;
    });
}

/// The plain HEARTBEAT (key 4) is unchanged; a HEARTBEAT_WAIT is answered
/// with the error at once when there is one, and NONE at its deadline.
#[test]
fn plain_heartbeat_still_works_and_a_wait_ends_at_its_deadline() {
    rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr, _clock) = common::with_topic_manual(dir.path(), "t", 2).await;
        let engine = broker.engine().clone();
        let (member, generation) = join_one(&engine).await;
        let mut s = TcpStream::connect(&addr).await.unwrap();
        let mut got = Vec::new();
        let hb = |generation| HeartbeatRequest {
            group: "g".into(),
            generation,
            member_id: member.clone(),
        };
        send(&mut s, 1, &hb(generation)).await;
        let r = read(&mut s, &mut got).await;
        assert_eq!(r, (1, ErrorCode::None));
        send(&mut s, 2, &hb(generation + 1)).await;
        let r = read(&mut s, &mut got).await;
        assert_eq!(r, (2, ErrorCode::IllegalGeneration));
        send(&mut s, 3, &wait_req(&member, generation + 1, 600_000)).await;
        let r = read(&mut s, &mut got).await;
        assert_eq!(
            r,
            (3, ErrorCode::IllegalGeneration),
            "an error is answered at once"
        );
        send(&mut s, 4, &wait_req("nobody", generation, 600_000)).await;
        let r = read(&mut s, &mut got).await;
        assert_eq!(r, (4, ErrorCode::UnknownMember));
        send(&mut s, 5, &wait_req(&member, generation, 20)).await;
        let r = read(&mut s, &mut got).await;
        assert_eq!(
            r,
            (5, ErrorCode::None),
            "a wait without a rebalance ends with NONE"
        );
        assert_eq!(engine.groups().parked_heartbeats(), 0);
        broker.shutdown().await;
    });
}

/// A waiting heartbeat is answered when shutdown begins (woken through its
/// group, not a listener on the shutdown signal of its own), and one sent
/// after that does not wait at all.
#[test]
fn waiting_heartbeats_end_when_shutdown_begins() {
    rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, _addr, _clock) = common::with_topic_manual(dir.path(), "t", 2).await;
        let engine = broker.engine().clone();
        let (member, generation) = join_one(&engine).await;
        let e = engine.clone();
        let m = member.clone();
        let waiting = rt::spawn(async move {
            e.groups()
                .heartbeat_wait("g", &m, generation, Duration::from_secs(600))
                .await
        });
        common::wait_until("the heartbeat waits", Duration::from_secs(2), || {
            let n = engine.groups().parked_heartbeats();
            async move { n == 1 }
        })
        .await;
        engine.begin_shutdown();
        let r = rt::timeout(Duration::from_secs(2), waiting)
            .await
            .expect("the waiting heartbeat is answered at shutdown");
        assert_eq!(r, Ok(()));
        assert_eq!(engine.groups().parked_heartbeats(), 0);
        let r = rt::timeout(
            Duration::from_secs(2),
            engine
                .groups()
                .heartbeat_wait("g", &member, generation, Duration::from_secs(600)),
        )
        .await
        .expect("a heartbeat after shutdown began does not wait");
        assert_eq!(r, Ok(()));
        assert_eq!(engine.groups().parked_heartbeats(), 0);
        broker.shutdown().await;
    });
}

/// A GroupConsumer holds one connection at the broker: its heartbeats share
/// it with its fetches and commits. On a broker that admits one connection,
/// the member keeps its session alive (10,000 members fit the default
/// `max_connections` of 10,000; with a heartbeat connection of their own they
/// would need twice that).
#[test]
fn a_group_member_needs_one_connection() {
    rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (mut cfg, clock) = common::manual_config(dir.path());
        cfg.max_connections = 1;
        let broker = Broker::start(cfg).await.unwrap();
        let engine = broker.engine().clone();
        engine
            .records()
            .create_topic("t", common::topic(2))
            .unwrap();
        let addr = broker.local_addr().to_string();
        let c = GroupConsumer::builder(&addr, "g")
            .topic("t")
            .session_timeout(Duration::from_millis(1000))
            .heartbeat_interval(Duration::from_millis(20))
            .build()
            .await
            .unwrap();
        let member = c.member_id().await;
        let generation = c.generation().await;
        // Five session timeouts on the broker's clock: only heartbeats keep it a member.
        common::advance_keeping_alive(
            &engine,
            &clock,
            "g",
            std::slice::from_ref(&member),
            Duration::from_secs(5),
            Duration::from_millis(500),
        )
        .await;
        assert_eq!(engine.groups().group_members("g"), Some(1));
        assert_eq!(c.generation().await, generation, "no rebalance");
        c.close().await.unwrap();
        broker.shutdown().await;
    });
}

fn group_fetch(
    member: &str,
    generation: i32,
    max_wait_ms: i32,
    partitions: &[i32],
) -> GroupFetchRequest {
    GroupFetchRequest {
        group: "g".into(),
        generation,
        member_id: member.into(),
        fetch: FetchRequest {
            max_wait_ms,
            min_bytes: 1,
            max_bytes: 1 << 20,
            partitions: partitions
                .iter()
                .map(|&partition| FetchPartition {
                    topic: "t".into(),
                    partition,
                    offset: 0,
                    max_bytes: 1 << 20,
                })
                .collect(),
        },
    }
}

/// A GROUP_FETCH (extension key 17) counts as the member's heartbeat when it
/// arrives, is answered with the member's error at once, and while it waits
/// for records is answered REBALANCE_IN_PROGRESS the moment another member
/// joins; one with no partitions waits for that alone, up to its wait.
#[test]
fn a_group_fetch_is_a_heartbeat_and_ends_when_the_group_rebalances() {
    rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr, clock) = common::with_topic_manual(dir.path(), "t", 2).await;
        let engine = broker.engine().clone();
        let (member, generation) = join_one(&engine).await;
        let mut s = TcpStream::connect(&addr).await.unwrap();
        let mut got = Vec::new();
        send(
            &mut s,
            1,
            &group_fetch(&member, generation + 1, 600_000, &[0]),
        )
        .await;
        assert_eq!(
            read(&mut s, &mut got).await,
            (1, ErrorCode::IllegalGeneration)
        );
        send(&mut s, 2, &group_fetch("nobody", generation, 600_000, &[0])).await;
        assert_eq!(read(&mut s, &mut got).await, (2, ErrorCode::UnknownMember));
        send(&mut s, 3, &group_fetch(&member, generation, 20, &[])).await;
        assert_eq!(
            read(&mut s, &mut got).await,
            (3, ErrorCode::None),
            "a wait with no partitions and no rebalance ends with NONE"
        );
        // A fetch that waits for records counts as a heartbeat when it arrives.
        let now = clock.advance(Duration::from_secs(100));
        send(
            &mut s,
            4,
            &group_fetch(&member, generation, 600_000, &[0, 1]),
        )
        .await;
        common::wait_until(
            "the fetch counted as a heartbeat",
            Duration::from_secs(5),
            || {
                let seen = engine.groups().member_last_seen("g", &member);
                async move { seen == Some(now) }
            },
        )
        .await;
        // Another member joins: the waiting fetch is answered at once.
        let e = engine.clone();
        let second = rt::spawn(async move { join_one(&e).await });
        let r = rt::timeout(Duration::from_secs(5), read(&mut s, &mut got))
            .await
            .expect("the waiting fetch is answered when the group rebalances");
        assert_eq!(r, (4, ErrorCode::RebalanceInProgress));
        drop(s);
        engine.groups().leave_group("g", &member).unwrap();
        let _ = rt::timeout(Duration::from_secs(5), second).await;
        broker.shutdown().await;
    });
}

/// A GROUP_FETCH gets records as a FETCH does (at once when they are there).
#[test]
fn a_group_fetch_returns_records() {
    rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr, _clock) = common::with_topic_manual(dir.path(), "t", 1).await;
        let engine = broker.engine().clone();
        let (member, generation) = join_one(&engine).await;
        let producer = flume_client::Producer::connect(&addr).await.unwrap();
        producer
            .send("t", Some(b"k".as_slice()), b"v")
            .await
            .unwrap();
        let mut spec = FetchSpec {
            max_wait: Duration::from_secs(600),
            min_bytes: 1,
            max_bytes: 1 << 20,
            partitions: vec![FetchFrom {
                at: TopicPartition::new("t".to_owned(), 0),
                offset: 0,
                max_bytes: 1 << 20,
            }],
            read_as: flume_broker::domain::ReadAs::Records,
            committed: true,
        };
        let fetched = rt::timeout(
            Duration::from_secs(5),
            engine
                .groups()
                .group_fetch("g", &member, generation, &mut spec, None),
        )
        .await
        .expect("records there are answered at once")
        .unwrap();
        let records = protocol::record::decode_all(&bytes::Bytes::from(
            fetched.partitions[0].records.clone(),
        ))
        .unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].payload(), b"v");
        broker.shutdown().await;
    });
}

/// Idle members (each `recv` waiting) heartbeat with their fetches alone: no
/// HEARTBEAT or HEARTBEAT_WAIT goes out while GROUP_FETCHes do (two allowed
/// for a test thread held up past the 100 ms grace on a loaded machine), and
/// nobody's session expires (900 ms sessions; the fetches span more than one).
#[test]
fn idle_members_heartbeat_with_their_fetches() {
    rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr) = common::with_topic(dir.path(), "t", 2).await;
        let engine = broker.engine().clone();
        let build = || {
            GroupConsumer::builder(&addr, "g")
                .topic("t")
                .session_timeout(Duration::from_millis(900))
                .auto_commit(false)
                .build()
        };
        let a = spawn_member(build().await.unwrap());
        let b = spawn_member(build().await.unwrap());
        common::wait_until(
            "both members have a partition",
            Duration::from_secs(10),
            || {
                let (na, nb) = (a.now(), b.now());
                async move { na.1.len() == 1 && nb.1.len() == 1 && na.0 == nb.0 }
            },
        )
        .await;
        let generation = a.now().0;
        let count = |api: &str| -> u64 {
            engine
                .metrics()
                .request_counts()
                .iter()
                .filter(|(a, _, _)| *a == api)
                .map(|(_, _, n)| n)
                .sum()
        };
        let beats = || count("heartbeat") + count("heartbeat_wait");
        // Past the joins (a heartbeat may wait beside the first fetches).
        let first = count("group_fetch");
        common::wait_until("the members fetch", Duration::from_secs(20), || {
            let n = count("group_fetch");
            async move { n >= first + 4 }
        })
        .await;
        let (fetches, before) = (count("group_fetch"), beats());
        common::wait_until(
            "a few intervals of group fetches (over a session timeout)",
            Duration::from_secs(20),
            || {
                let n = count("group_fetch");
                async move { n >= fetches + 8 }
            },
        )
        .await;
        assert!(
            beats() <= before + 2,
            "heartbeats went out beside the fetches: {} -> {}",
            before,
            beats()
        );
        assert_eq!(engine.groups().group_members("g"), Some(2));
        assert_eq!(
            (a.now().0, b.now().0),
            (generation, generation),
            "no rebalance"
        );
        for m in [a, b] {
            drop(m.stop);
            m.task.await;
        }
        broker.shutdown().await;
    });
}

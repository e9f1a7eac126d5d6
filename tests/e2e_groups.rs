//! Consumer groups end to end: assignment, close, kill, commits, broker restart.

use crate::common;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use flume_broker::Broker;
use flume_client::{Admin, GroupConsumer, Producer, RebalanceEvent};

async fn produce(addr: &str, topic: &str, n: usize) {
    let p = Producer::connect(addr).await.unwrap();
    let mut futs = Vec::new();
    for i in 0..n {
        futs.push(
            p.enqueue(
                flume_client::ProducerRecord::new(topic, format!("{i}")).key(format!("k{i}")),
            )
            .await
            .unwrap(),
        );
    }
    for f in futs {
        f.await.unwrap();
    }
    p.close().await;
}

fn consumer(addr: &str, group: &str, topic: &str) -> flume_client::GroupConsumerBuilder {
    GroupConsumer::builder(addr, group)
        .topic(topic)
        .session_timeout(Duration::from_millis(1500))
        .heartbeat_interval(Duration::from_millis(100))
        .rebalance_timeout(Duration::from_secs(5))
        .max_wait(Duration::from_millis(100))
        .auto_commit(false)
}

/// Reads records until `n` arrive, committing each; returns (partition, offset, value).
async fn take(c: &mut GroupConsumer, n: usize) -> Vec<(i32, u64, String)> {
    let mut out = Vec::new();
    while out.len() < n {
        let r = flume_rt::timeout(Duration::from_secs(20), c.recv())
            .await
            .expect("records keep coming")
            .unwrap()
            .unwrap();
        if let Err(e) = c.commit(&r).await {
            // After a rebalance or a broker restart the commit is fenced; the record comes again.
            // (or it fails with a connection error while the broker restarts).
            assert!(
                e.is_retriable()
                    || matches!(
                        e.code(),
                        Some(
                            flume_client::ErrorCode::UnknownMember
                                | flume_client::ErrorCode::IllegalGeneration
                                | flume_client::ErrorCode::RebalanceInProgress
                        )
                    ),
                "{e}"
            );
        }
        out.push((
            r.partition,
            r.offset,
            String::from_utf8(r.payload().to_vec()).unwrap(),
        ));
    }
    out
}

/// A consumer driven by its own task from its join on; the test watches its
/// rebalance events.
struct Member {
    /// The consumer's events and member id, handed over once it has joined.
    joined: async_channel::Receiver<(flume_client::RebalanceEvents, String)>,
    events: Option<flume_client::RebalanceEvents>,
    id: Option<String>,
    stop: async_channel::Sender<bool>,
    task: flume_rt::Task<()>,
    assigned: Vec<(String, i32)>,
    generation: i32,
}

/// Every delivery: (member, generation, partition, offset).
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(usize, i32, i32, u64)>>>;

/// Joins with `builder` in a task of its own that then keeps polling, so a
/// member that joined first rejoins promptly when the next one joins (no
/// member waits out the rebalance deadline).
fn spawn_member(builder: flume_client::GroupConsumerBuilder, me: usize, seen: Seen) -> Member {
    let (stop, cmd) = async_channel::bounded::<bool>(1);
    let (hand, joined) = async_channel::bounded(1);
    let task = flume_rt::spawn(async move {
        let mut c = builder.build().await.unwrap();
        hand.send((c.events(), c.member_id().await)).await.unwrap();
        loop {
            futures::select! {
                r = futures::FutureExt::fuse(c.recv()) => {
                    if let Some(Ok(r)) = r {
                        let generation = c.generation().await;
                        seen.lock().unwrap().push((me, generation, r.partition, r.offset));
                        let _ = c.commit(&r).await;
                    }
                }
                graceful = futures::FutureExt::fuse(cmd.recv()) => {
                    if graceful == Ok(true) {
                        c.close().await.unwrap();
                    }
                    return; // dropped without close: heartbeats stop
                }
            }
        }
    });
    Member {
        joined,
        events: None,
        id: None,
        stop,
        task,
        assigned: Vec::new(),
        generation: -1,
    }
}

impl Member {
    fn update(&mut self) {
        if let Ok((events, id)) = self.joined.try_recv() {
            self.events = Some(events);
            self.id = Some(id);
        }
        let Some(events) = &self.events else { return };
        while let Some(ev) = events.try_recv() {
            match ev {
                RebalanceEvent::Assigned {
                    generation,
                    partitions,
                } => {
                    self.assigned = partitions;
                    self.generation = generation;
                }
                RebalanceEvent::Revoked(_) => self.assigned.clear(),
            }
        }
    }
    async fn stop(self, graceful: bool) {
        self.stop.send(graceful).await.unwrap();
        self.task.await;
    }
}

async fn wait_for(
    what: &str,
    members: &mut [&mut Member],
    limit: Duration,
    cond: impl Fn(&[&mut Member]) -> bool,
) {
    let deadline = Instant::now() + limit;
    loop {
        for m in members.iter_mut() {
            m.update();
        }
        if cond(members) {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        flume_rt::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn three_consumers_split_six_partitions_then_close_and_kill_move_them() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr, clock) = common::with_topic_manual(dir.path(), "t6", 6).await;
        produce(&addr, "t6", 600).await;
        // Three concurrent joins.
        let seen: Seen = Default::default();
        let (mut a, mut b, mut c) = (
            spawn_member(consumer(&addr, "g", "t6"), 0, seen.clone()),
            spawn_member(consumer(&addr, "g", "t6"), 1, seen.clone()),
            spawn_member(consumer(&addr, "g", "t6"), 2, seen.clone()),
        );
        wait_for(
            "a 3-way split",
            &mut [&mut a, &mut b, &mut c],
            Duration::from_secs(20),
            |m| {
                m.iter()
                    .all(|x| x.assigned.len() == 2 && x.generation == m[0].generation)
            },
        )
        .await;
        let mut all: Vec<(String, i32)> = [&a, &b, &c]
            .iter()
            .flat_map(|m| m.assigned.clone())
            .collect();
        all.sort();
        all.dedup();
        assert_eq!(
            all.len(),
            6,
            "no partition twice within a generation, none missing"
        );

        // Close c: its partitions move to a and b at once (well before the 1.5 s session timeout).
        c.stop(true).await;
        wait_for(
            "a and b take over after close",
            &mut [&mut a, &mut b],
            Duration::from_secs(5),
            |m| m.iter().all(|x| x.assigned.len() == 3),
        )
        .await;

        // Kill b (dropped without close): a gets everything after the session timeout.
        // The broker's clock moves 2 s (past b's 1.5 s session) while a keeps heartbeating.
        let a_id = a.id.clone().expect("a joined");
        b.stop(false).await;
        common::advance_keeping_alive(
            broker.engine(),
            &clock,
            "g",
            &[a_id],
            Duration::from_secs(2),
            Duration::from_millis(500),
        )
        .await;
        wait_for(
            "a owns all six after b expires",
            &mut [&mut a],
            Duration::from_secs(15),
            |m| m[0].assigned.len() == 6,
        )
        .await;
        // With commits after every record, the group consumes all 600: lag reaches 0.
        let admin = Admin::connect(&addr).await.unwrap();
        common::wait_until("lag 0", Duration::from_secs(20), || {
            let admin = &admin;
            async move {
                let offs = admin.group_offsets("g", &["t6".into()]).await.unwrap();
                offs.iter().map(|p| p.lag()).sum::<i64>() == 0
            }
        })
        .await;
        a.stop(true).await;
        // No record went to two members within one generation, and every record was delivered.
        let seen = seen.lock().unwrap().clone();
        let mut owner: HashMap<(i32, i32, u64), usize> = HashMap::new();
        for (m, g, p, o) in &seen {
            if let Some(prev) = owner.insert((*g, *p, *o), *m) {
                assert_eq!(
                    prev, *m,
                    "generation {g}: {p}@{o} handed to members {prev} and {m}"
                );
            }
        }
        let delivered: std::collections::HashSet<(i32, u64)> =
            seen.iter().map(|(_, _, p, o)| (*p, *o)).collect();
        let t = broker.engine().records().topic("t6").unwrap();
        let parts: Vec<_> = (0..t.partition_count())
            .filter_map(|p| t.partition(p as i32))
            .collect();
        let total: u64 = parts.iter().map(|p| p.end_offset()).sum();
        assert_eq!(total, 600);
        for p in &parts {
            for o in 0..p.end_offset() {
                assert!(
                    delivered.contains(&(p.id as i32, o)),
                    "{}@{o} never delivered",
                    p.id
                );
            }
        }
        broker.shutdown().await;
    });
}

#[test]
fn group_consumes_everything_once_and_resumes_from_commits() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr) = common::with_topic(dir.path(), "t", 3).await;
        produce(&addr, "t", 300).await;
        let mut c = consumer(&addr, "g2", "t").build().await.unwrap();
        let events = c.events();
        let first = take(&mut c, 120).await;
        c.close().await.unwrap();
        assert!(matches!(
            events.try_recv(),
            Some(RebalanceEvent::Assigned { .. })
        ));
        // Per partition, offsets come in order.
        let mut by_p: HashMap<i32, Vec<u64>> = HashMap::new();
        for (p, o, _) in &first {
            by_p.entry(*p).or_default().push(*o);
        }
        assert!(by_p.values().all(|v| v.windows(2).all(|w| w[0] < w[1])));
        // A new member resumes from the commits: the rest, nothing lost, nothing twice.
        let mut c = consumer(&addr, "g2", "t").build().await.unwrap();
        let rest = take(&mut c, 180).await;
        let mut values: Vec<String> = first.iter().chain(&rest).map(|r| r.2.clone()).collect();
        values.sort();
        let unique: BTreeSet<_> = values.iter().cloned().collect();
        assert_eq!(unique.len(), 300);
        assert_eq!(values.len(), 300);
        // Lag is one call away.
        let admin = Admin::connect(&addr).await.unwrap();
        let offs = admin.group_offsets("g2", &["t".into()]).await.unwrap();
        assert_eq!(offs.iter().map(|p| p.lag()).sum::<i64>(), 0);
        c.close().await.unwrap();
        broker.shutdown().await;
    });
}

#[test]
fn consumer_survives_a_broker_restart() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr) = common::with_topic(dir.path(), "r", 2).await;
        produce(&addr, "r", 100).await;
        let mut c = consumer(&addr, "g3", "r").build().await.unwrap();
        let mut seen: HashSet<String> = take(&mut c, 50).await.into_iter().map(|r| r.2).collect();
        broker.shutdown().await;
        // Same port, same data.
        let mut cfg = common::config(dir.path());
        cfg.listen = addr.clone();
        let broker = Broker::start(cfg).await.unwrap();
        produce(&addr, "r", 0).await;
        let deadline = Instant::now() + Duration::from_secs(20);
        while seen.len() < 100 {
            assert!(
                Instant::now() < deadline,
                "only {} distinct records after the restart",
                seen.len()
            );
            for r in take(&mut c, 1).await {
                seen.insert(r.2);
            }
        }
        assert_eq!(
            seen.len(),
            100,
            "every record, none lost across the restart"
        );
        c.close().await.unwrap();
        broker.shutdown().await;
    });
}

#[test]
fn stale_member_commits_are_fenced() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        // A manual clock: no session lapses while a loaded machine delays heartbeats.
        let (broker, addr, _clock) = common::with_topic_manual(dir.path(), "f", 1).await;
        produce(&addr, "f", 10).await;
        let mut old = consumer(&addr, "g4", "f").build().await.unwrap();
        let r = old.recv().await.unwrap().unwrap();
        let old_member = old.member_id().await;
        // The broker drops the old member (as a session expiry would) while the old consumer
        // is not polled, so it does not know yet; a new member takes the partition.
        let e = broker.engine().clone();
        e.groups().leave_group("g4", &old_member).unwrap();
        let mut new = consumer(&addr, "g4", "f").build().await.unwrap();
        let n = new.recv().await.unwrap().unwrap();
        new.commit(&n).await.unwrap();
        let err = old.commit(&r).await.unwrap_err();
        assert!(
            matches!(
                err.code(),
                Some(
                    flume_client::ErrorCode::UnknownMember
                        | flume_client::ErrorCode::IllegalGeneration
                )
            ),
            "{err}"
        );
        assert_eq!(
            e.groups().committed("g4", "f", 0),
            Some(n.offset as i64 + 1),
            "the new owner's commit stands"
        );
        // Member ids are never reused, so the old one is fenced even when the group went empty and
        // its state was dropped in between (its generation then starts again at 1).
        assert_ne!(new.member_id().await, old_member);
        assert!(new.generation().await >= 1);
        new.close().await.unwrap();
        broker.shutdown().await;
    });
}

#[test]
fn manual_commit_on_revoke_commits_what_was_handed_out() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr) = common::with_topic(dir.path(), "rv", 1).await;
        produce(&addr, "rv", 20).await;
        let mut a = consumer(&addr, "grv", "rv")
            .commit_on_revoke(true)
            .build()
            .await
            .unwrap();
        let events = a.events();
        let mut handed = 0i64;
        for _ in 0..5 {
            a.recv().await.unwrap().unwrap();
            handed += 1;
        }
        // B joins; A notices through its heartbeat on its next call, commits, and rejoins.
        let b = flume_rt::spawn({
            let addr = addr.clone();
            async move { consumer(&addr, "grv", "rv").build().await.unwrap() }
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if std::iter::from_fn(|| events.try_recv())
                .any(|e| matches!(e, RebalanceEvent::Revoked(_)))
            {
                break;
            }
            assert!(Instant::now() < deadline, "A never saw the rebalance");
            if let Some(Some(Ok(_))) = flume_rt::timeout(Duration::from_millis(100), a.recv()).await
            {
                handed += 1;
            }
        }
        let b = b.await;
        assert_eq!(
            broker.engine().groups().committed("grv", "rv", 0),
            Some(handed),
            "every record handed out before the revoke was committed"
        );
        drop(b);
        broker.shutdown().await;
    });
}

#[test]
fn slow_processing_during_a_rebalance_keeps_the_membership() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr, clock) = common::with_topic_manual(dir.path(), "slow", 2).await;
        produce(&addr, "slow", 10).await;
        let mut a = GroupConsumer::builder(&addr, "gs")
            .topic("slow")
            .session_timeout(Duration::from_millis(400))
            .heartbeat_interval(Duration::from_millis(50))
            .rebalance_timeout(Duration::from_secs(10))
            .max_wait(Duration::from_millis(50))
            .build()
            .await
            .unwrap();
        let id = a.member_id().await;
        a.recv().await.unwrap().unwrap();
        // B joins; A is "processing" (not calling recv) for several session timeouts.
        let b = flume_rt::spawn({
            let addr = addr.clone();
            async move { consumer(&addr, "gs", "slow").build().await.unwrap() }
        });
        // Simulated processing: the broker's clock moves 1.5 s (several session
        // timeouts) in 300 ms steps; only A's background heartbeats keep it a member.
        common::wait_until("B's join is parked", Duration::from_secs(20), || async {
            broker.engine().groups().group_members("gs") == Some(2)
        })
        .await;
        common::advance_keeping_alive(
            broker.engine(),
            &clock,
            "gs",
            std::slice::from_ref(&id),
            Duration::from_millis(1500),
            Duration::from_millis(300),
        )
        .await;
        // A comes back: it rejoins with the same membership, and both get a partition.
        let deadline = Instant::now() + Duration::from_secs(10);
        while a.assignment().await.len() != 1 {
            assert!(Instant::now() < deadline, "A never rejoined");
            let _ = flume_rt::timeout(Duration::from_millis(100), a.recv()).await;
        }
        assert_eq!(
            a.member_id().await,
            id,
            "heartbeats kept A's session alive during the rebalance"
        );
        let b = b.await;
        assert_eq!(b.assignment().await.len(), 1);
        broker.shutdown().await;
    });
}

#[test]
fn an_abandoned_stream_poll_does_not_lock_the_consumer() {
    use futures::StreamExt;
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr) = common::with_topic(dir.path(), "idle", 1).await;
        let mut c = consumer(&addr, "gi", "idle").build().await.unwrap();
        // Nothing to read: the poll is cut off by a timeout while it waits on a fetch.
        assert!(flume_rt::timeout(Duration::from_millis(30), c.next())
            .await
            .is_none());
        let a = flume_rt::timeout(Duration::from_secs(5), c.assignment()).await;
        assert_eq!(a.expect("the consumer is still usable").len(), 1);
        produce(&addr, "idle", 1).await;
        let r = flume_rt::timeout(Duration::from_secs(10), c.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        c.commit(&r).await.unwrap();
        c.close().await.unwrap();
        broker.shutdown().await;
    });
}

/// A fetch fills partitions in the order it lists them until its total
/// `max_bytes` is used up; with a small `max_bytes` and every partition full,
/// a consumer that always listed them in one order would read only the first
/// until it ran dry. The consumer rotates the order, so every partition
/// delivers within a few fetches.
#[test]
fn small_fetch_budget_serves_every_partition_in_turn() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (broker, addr) = common::with_topic(dir.path(), "rot", 4).await;
        let p = Producer::connect(&addr).await.unwrap();
        let mut acks = Vec::new();
        for partition in 0..4 {
            for i in 0..100 {
                acks.push(
                    p.enqueue(
                        flume_client::ProducerRecord::new("rot", vec![b'x'; 200 + i % 2])
                            .partition(partition),
                    )
                    .await
                    .unwrap(),
                );
            }
        }
        for a in acks {
            a.await.unwrap();
        }
        p.close().await;
        // Room for about two records per fetch.
        let mut c = consumer(&addr, "rot-g", "rot")
            .fetch_config(
                flume_client::FetchConfig::default()
                    .max_wait(Duration::from_millis(100))
                    .partition_max_bytes(1024 * 1024)
                    .max_bytes(500),
            )
            .build()
            .await
            .unwrap();
        let mut seen = BTreeSet::new();
        // Eight fetches' worth at most, far less than one partition holds.
        for _ in 0..24 {
            let r = flume_rt::timeout(Duration::from_secs(2), c.recv())
                .await
                .expect("records come")
                .unwrap()
                .unwrap();
            seen.insert(r.partition);
        }
        assert_eq!(
            seen,
            (0..4).collect::<BTreeSet<i32>>(),
            "every partition delivers"
        );
        c.close().await.unwrap();
        broker.shutdown().await;
    });
}

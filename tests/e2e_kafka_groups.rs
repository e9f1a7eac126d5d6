//! Kafka consumer groups on the Kafka listener, end to end: raw Kafka
//! requests (encoded with the `kafka-protocol` crate) over TCP to a broker on
//! port 0. The broker runs on a manual clock, so sessions expire only when a
//! test moves it; a request that parks (JoinGroup, SyncGroup) runs on its own
//! thread and the test waits for the group's state with a deadline.

use crate::common;
use crate::common::kafka::Kc;

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use flume_broker::domain::{GroupPhase, JoinSpec};
use flume_broker::{Broker, Clock, Engine};
use flume_client::Admin;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    consumer_protocol_assignment, ApiKey, ConsumerProtocolAssignment, ConsumerProtocolSubscription,
    DescribeGroupsRequest, GroupId, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, ListGroupsRequest, OffsetCommitRequest, OffsetFetchRequest,
    SyncGroupRequest, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

const NONE: i16 = 0;
const ILLEGAL_GENERATION: i16 = 22;
const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
const UNKNOWN_MEMBER_ID: i16 = 25;
const INVALID_SESSION_TIMEOUT: i16 = 26;
const REBALANCE_IN_PROGRESS: i16 = 27;
const GROUP_ID_NOT_FOUND: i16 = 69;
const MEMBER_ID_REQUIRED: i16 = 79;

const TOPIC: &str = "t";

fn start() -> Result<(tempfile::TempDir, Broker, String, Clock)> {
    let dir = tempfile::tempdir()?;
    let (mut cfg, clock) = common::manual_config(dir.path());
    cfg.kafka_listen = Some("127.0.0.1:0".into());
    let broker = flume_rt::block_on(Broker::start(cfg)).context("broker starts")?;
    broker
        .engine()
        .records()
        .create_topic(TOPIC, common::topic(4))
        .context("topic")?;
    let kafka = broker.kafka_addr().context("kafka listener")?.to_string();
    Ok((dir, broker, kafka, clock))
}

fn subscription() -> Bytes {
    let mut s = ConsumerProtocolSubscription::default();
    s.topics = vec![StrBytes::from_static_str(TOPIC)];
    let mut b = BytesMut::new();
    b.put_i16(0);
    s.encode(&mut b, 0).expect("subscription encodes");
    b.freeze()
}

fn assignment(partitions: &[i32]) -> Bytes {
    let mut tp = consumer_protocol_assignment::TopicPartition::default();
    tp.topic = TopicName(StrBytes::from_static_str(TOPIC));
    tp.partitions = partitions.to_vec();
    let mut a = ConsumerProtocolAssignment::default();
    a.assigned_partitions = vec![tp];
    let mut b = BytesMut::new();
    b.put_i16(0);
    a.encode(&mut b, 0).expect("assignment encodes");
    b.freeze()
}

fn partitions_of(assignment: &Bytes) -> Vec<i32> {
    let mut b = assignment.clone();
    if b.len() < 2 {
        return Vec::new();
    }
    let version = b.get_i16();
    ConsumerProtocolAssignment::decode(&mut b, version)
        .map(|a| {
            a.assigned_partitions
                .into_iter()
                .flat_map(|t| t.partitions)
                .collect()
        })
        .unwrap_or_default()
}

fn join_req(group: &str, member: &str, protocol: &str) -> JoinGroupRequest {
    let mut p = JoinGroupRequestProtocol::default();
    p.name = StrBytes::from_string(protocol.to_owned());
    p.metadata = subscription();
    let mut r = JoinGroupRequest::default();
    r.group_id = GroupId(StrBytes::from_string(group.to_owned()));
    r.member_id = StrBytes::from_string(member.to_owned());
    r.session_timeout_ms = 6000;
    r.rebalance_timeout_ms = 10_000;
    r.protocol_type = StrBytes::from_static_str("consumer");
    r.protocols = vec![p];
    r
}

/// JoinGroup v4 twice: the first answers MEMBER_ID_REQUIRED with an id,
/// the second (with it) runs on a thread, as it parks until the rebalance completes.
fn join_new(addr: &str, group: &str) -> Result<JoinHandle<Result<JoinGroupResponse>>> {
    let mut c = Kc::connect(addr)?;
    let first = c.call(4, &join_req(group, "", "range"))?;
    ensure!(first.error_code == MEMBER_ID_REQUIRED, "{first:?}");
    ensure!(first.member_id.starts_with("e2e-"), "{first:?}");
    let id = first.member_id.as_str().to_owned();
    let group = group.to_owned();
    Ok(std::thread::spawn(move || {
        c.call(4, &join_req(&group, &id, "range"))
    }))
}

/// A rejoin of a known member, on a thread.
fn rejoin(addr: &str, group: &str, member: &str) -> JoinHandle<Result<JoinGroupResponse>> {
    let (addr, group, member) = (addr.to_owned(), group.to_owned(), member.to_owned());
    std::thread::spawn(move || Kc::connect(&addr)?.call(4, &join_req(&group, &member, "range")))
}

fn joined(h: JoinHandle<Result<JoinGroupResponse>>) -> Result<JoinGroupResponse> {
    let r = h
        .join()
        .map_err(|_| anyhow::anyhow!("join thread panicked"))??;
    ensure!(r.error_code == NONE, "join failed: {r:?}");
    Ok(r)
}

fn sync_req(
    group: &str,
    member: &str,
    generation: i32,
    assign: &[(&str, &[i32])],
) -> SyncGroupRequest {
    let mut r = SyncGroupRequest::default();
    r.group_id = GroupId(StrBytes::from_string(group.to_owned()));
    r.member_id = StrBytes::from_string(member.to_owned());
    r.generation_id = generation;
    r.assignments = assign
        .iter()
        .map(|(m, p)| {
            let mut a = SyncGroupRequestAssignment::default();
            a.member_id = StrBytes::from_string((*m).to_owned());
            a.assignment = assignment(p);
            a
        })
        .collect();
    r
}

/// A follower's SyncGroup on a thread (it parks until the leader's).
fn sync_follower(
    addr: &str,
    group: &str,
    member: &str,
    generation: i32,
) -> JoinHandle<Result<Vec<i32>>> {
    let (addr, group, member) = (addr.to_owned(), group.to_owned(), member.to_owned());
    std::thread::spawn(move || {
        let r = Kc::connect(&addr)?.call(3, &sync_req(&group, &member, generation, &[]))?;
        ensure!(r.error_code == NONE, "follower sync: {r:?}");
        Ok(partitions_of(&r.assignment))
    })
}

fn heartbeat(c: &mut Kc, group: &str, member: &str, generation: i32) -> Result<i16> {
    let mut r = HeartbeatRequest::default();
    r.group_id = GroupId(StrBytes::from_string(group.to_owned()));
    r.member_id = StrBytes::from_string(member.to_owned());
    r.generation_id = generation;
    Ok(c.call(3, &r)?.error_code)
}

fn phase(engine: &Engine, group: &str) -> Option<GroupPhase> {
    engine.groups().describe_group(group).map(|d| d.phase)
}

/// Waits (with a deadline) until the group has `members` members and is in `want`.
fn wait_for(engine: &Arc<Engine>, group: &str, members: usize, want: GroupPhase) {
    flume_rt::block_on(common::wait_until(
        "the group's state",
        Duration::from_secs(5),
        || async {
            engine
                .groups()
                .describe_group(group)
                .is_some_and(|d| d.members.len() == members && d.phase == want)
        },
    ));
}

/// Moves the clock by 1 ms, runs `start` (which sends requests from
/// `members` that park), and waits until the coordinator heard from every
/// one of them at the new time: their requests are parked, not in flight.
fn parked<T>(
    engine: &Arc<Engine>,
    clock: &Clock,
    group: &str,
    members: &[&str],
    start: impl FnOnce() -> T,
) -> T {
    let now = clock.advance(Duration::from_millis(1));
    let out = start();
    flume_rt::block_on(common::wait_until(
        "the requests to park",
        Duration::from_secs(5),
        || async {
            members.iter().all(|m| {
                engine
                    .groups()
                    .member_last_seen(group, m)
                    .is_some_and(|t| t >= now)
            })
        },
    ));
    out
}

/// A single member that joined and synced (generation 1), with all four partitions.
fn one_member(addr: &str, group: &str) -> Result<(Kc, String)> {
    let a = joined(join_new(addr, group)?)?;
    ensure!(a.generation_id == 1 && a.leader == a.member_id, "{a:?}");
    let id = a.member_id.as_str().to_owned();
    let mut c = Kc::connect(addr)?;
    let s = c.call(3, &sync_req(group, &id, 1, &[(&id, &[0, 1, 2, 3])]))?;
    ensure!(s.error_code == NONE, "{s:?}");
    ensure!(partitions_of(&s.assignment) == vec![0, 1, 2, 3]);
    Ok((c, id))
}

/// Two members A (leader) and B in generation 2, A with 0,1 and B with 2,3.
fn two_members(
    addr: &str,
    engine: &Arc<Engine>,
    clock: &Clock,
    group: &str,
) -> Result<(Kc, String, String)> {
    let (mut c, a) = one_member(addr, group)?;
    let b_join = join_new(addr, group)?;
    wait_for(engine, group, 2, GroupPhase::PreparingRebalance);
    ensure!(heartbeat(&mut c, group, &a, 1)? == REBALANCE_IN_PROGRESS);
    let a_join = joined(rejoin(addr, group, &a))?;
    let b_join = joined(b_join)?;
    ensure!(a_join.generation_id == 2 && b_join.generation_id == 2);
    ensure!(
        a_join.leader.as_str() == a && b_join.leader.as_str() == a,
        "A stays leader"
    );
    let b = b_join.member_id.as_str().to_owned();
    let listed: Vec<&str> = a_join
        .members
        .iter()
        .map(|m| m.member_id.as_str())
        .collect();
    ensure!(
        listed == vec![a.as_str(), b.as_str()],
        "leader sees every member: {listed:?}"
    );
    ensure!(a_join.members.iter().all(|m| m.metadata == subscription()));
    ensure!(b_join.members.is_empty(), "followers get no member list");
    let b_sync = parked(engine, clock, group, &[&b], || {
        sync_follower(addr, group, &b, 2)
    });
    assert_eq!(phase(engine, group), Some(GroupPhase::CompletingRebalance));
    let s = c.call(3, &sync_req(group, &a, 2, &[(&a, &[0, 1]), (&b, &[2, 3])]))?;
    ensure!(s.error_code == NONE && partitions_of(&s.assignment) == vec![0, 1]);
    let got = b_sync
        .join()
        .map_err(|_| anyhow::anyhow!("sync thread panicked"))??;
    ensure!(got == vec![2, 3], "B's assignment from the leader: {got:?}");
    Ok((c, a, b))
}

#[test]
fn two_members_join_the_leader_assigns_a_third_rebalances_everyone_and_one_leaves() -> Result<()> {
    let (_dir, broker, addr, clock) = start()?;
    let engine = Arc::clone(broker.engine());
    let g = "g1";
    let (mut c, a, b) = two_members(&addr, &engine, &clock, g)?;
    assert_eq!(phase(&engine, g), Some(GroupPhase::Stable));
    assert_eq!(heartbeat(&mut c, g, &a, 2)?, NONE);
    assert_eq!(
        heartbeat(&mut c, g, &a, 1)?,
        ILLEGAL_GENERATION,
        "a stale generation"
    );
    assert_eq!(heartbeat(&mut c, g, "nobody", 2)?, UNKNOWN_MEMBER_ID);
    assert_eq!(
        heartbeat(&mut c, "no-such-group", &a, 2)?,
        UNKNOWN_MEMBER_ID
    );

    // A third member (JoinGroup v3: no MEMBER_ID_REQUIRED round trip) joins: everyone rebalances.
    let c_join = {
        let addr = addr.clone();
        std::thread::spawn(move || Kc::connect(&addr)?.call(3, &join_req(g, "", "range")))
    };
    wait_for(&engine, g, 3, GroupPhase::PreparingRebalance);
    assert_eq!(heartbeat(&mut c, g, &a, 2)?, REBALANCE_IN_PROGRESS);
    assert_eq!(heartbeat(&mut c, g, &b, 2)?, REBALANCE_IN_PROGRESS);
    let a3 = rejoin(&addr, g, &a);
    let b3 = joined(rejoin(&addr, g, &b))?;
    let a3 = joined(a3)?;
    let c3 = joined(c_join)?;
    assert_eq!(
        (a3.generation_id, b3.generation_id, c3.generation_id),
        (3, 3, 3)
    );
    assert_eq!(a3.members.len(), 3, "the leader sees all three");
    let cm = c3.member_id.as_str().to_owned();
    let (bs, cs) = parked(&engine, &clock, g, &[&b, &cm], || {
        (
            sync_follower(&addr, g, &b, 3),
            sync_follower(&addr, g, &cm, 3),
        )
    });
    assert_eq!(phase(&engine, g), Some(GroupPhase::CompletingRebalance));
    let s = c.call(
        3,
        &sync_req(g, &a, 3, &[(&a, &[0, 1]), (&b, &[2]), (&cm, &[3])]),
    )?;
    assert_eq!(s.error_code, NONE);
    assert_eq!(
        bs.join().map_err(|_| anyhow::anyhow!("panicked"))??,
        vec![2]
    );
    assert_eq!(
        cs.join().map_err(|_| anyhow::anyhow!("panicked"))??,
        vec![3]
    );

    // Describe and list show the group as Kafka tools read it.
    let mut d = DescribeGroupsRequest::default();
    d.groups = vec![
        GroupId(StrBytes::from_static_str(g)),
        GroupId(StrBytes::from_static_str("unknown")),
    ];
    let resp = c.call(5, &d)?;
    let g1 = &resp.groups[0];
    assert_eq!(
        (
            g1.error_code,
            g1.group_state.as_str(),
            g1.protocol_type.as_str(),
            g1.protocol_data.as_str()
        ),
        (NONE, "Stable", "consumer", "range")
    );
    assert_eq!(g1.members.len(), 3);
    for m in &g1.members {
        assert_eq!(m.client_id.as_str(), "e2e");
        assert_eq!(m.client_host.as_str(), "/127.0.0.1");
        assert_eq!(m.member_metadata, subscription());
    }
    let mine = g1
        .members
        .iter()
        .find(|m| m.member_id.as_str() == cm)
        .context("C")?;
    assert_eq!(partitions_of(&mine.member_assignment), vec![3]);
    assert_eq!(resp.groups[1].group_state.as_str(), "Dead");
    assert_eq!(c.call(6, &d)?.groups[1].error_code, GROUP_ID_NOT_FOUND);
    let listed = c.call(4, &ListGroupsRequest::default())?;
    let l = listed
        .groups
        .iter()
        .find(|l| l.group_id.0.as_str() == g)
        .context("listed")?;
    assert_eq!(
        (l.protocol_type.as_str(), l.group_state.as_str()),
        ("consumer", "Stable")
    );
    let engine_view = engine.groups().describe_group(g).context("described")?;
    let c_view = engine_view
        .members
        .iter()
        .find(|m| m.member_id == cm)
        .context("C")?;
    assert_eq!(c_view.assignment[0].partitions, vec![3]);
    assert_eq!(c_view.topics, vec![TOPIC.to_owned()]);

    // C leaves (LeaveGroup v3, with an unknown member beside it): A and B rebalance.
    let mut leave = LeaveGroupRequest::default();
    leave.group_id = GroupId(StrBytes::from_static_str(g));
    leave.members = [cm.as_str(), "ghost"]
        .iter()
        .map(|m| {
            let mut i = MemberIdentity::default();
            i.member_id = StrBytes::from_string((*m).to_owned());
            i
        })
        .collect();
    let r = c.call(3, &leave)?;
    let codes: Vec<i16> = r.members.iter().map(|m| m.error_code).collect();
    assert_eq!(codes, vec![NONE, UNKNOWN_MEMBER_ID]);
    assert_eq!(heartbeat(&mut c, g, &a, 3)?, REBALANCE_IN_PROGRESS);
    let a4 = rejoin(&addr, g, &a);
    let b4 = joined(rejoin(&addr, g, &b))?;
    let a4 = joined(a4)?;
    assert_eq!(
        (a4.generation_id, b4.generation_id, a4.members.len()),
        (4, 4, 2)
    );
    // A v0 LeaveGroup of both: the group is empty.
    for m in [&a, &b] {
        let mut l = LeaveGroupRequest::default();
        l.group_id = GroupId(StrBytes::from_static_str(g));
        l.member_id = StrBytes::from_string(m.clone());
        assert_eq!(c.call(0, &l)?.error_code, NONE);
    }
    // Empty, or already dropped by the broker's own 100 ms ticker (an idle group goes).
    let left = phase(&engine, g);
    assert!(
        matches!(left, Some(GroupPhase::Empty) | None),
        "after the last leave: {left:?}"
    );
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn a_silent_member_expires_on_the_manual_clock_and_the_other_rebalances() -> Result<()> {
    let (_dir, broker, addr, clock) = start()?;
    let engine = Arc::clone(broker.engine());
    let g = "g2";
    let (mut c, a, b) = two_members(&addr, &engine, &clock, g)?;
    // A heartbeats as the clock moves; B (6 s session) stays silent. Once B's
    // 6 s are up the broker's own 100 ms ticker may expire it before A's
    // heartbeat, which then answers that the group rebalances.
    for step in 0..2 {
        clock.advance(Duration::from_millis(3500));
        let r = heartbeat(&mut c, g, &a, 2)?;
        assert!(
            r == NONE || (step == 1 && r == REBALANCE_IN_PROGRESS),
            "A's heartbeat at step {step}: {r}"
        );
        flume_rt::block_on(engine.tick_now());
    }
    assert_eq!(heartbeat(&mut c, g, &b, 2)?, UNKNOWN_MEMBER_ID, "B expired");
    assert_eq!(heartbeat(&mut c, g, &a, 2)?, REBALANCE_IN_PROGRESS);
    let a3 = joined(rejoin(&addr, g, &a))?;
    assert_eq!((a3.generation_id, a3.members.len()), (3, 1));
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

fn commit_req(
    group: &str,
    member: &str,
    generation: i32,
    offsets: &[(i32, i64)],
) -> OffsetCommitRequest {
    let mut t = OffsetCommitRequestTopic::default();
    t.name = TopicName(StrBytes::from_static_str(TOPIC));
    t.partitions = offsets
        .iter()
        .map(|(p, o)| {
            let mut x = OffsetCommitRequestPartition::default();
            x.partition_index = *p;
            x.committed_offset = *o;
            x
        })
        .collect();
    let mut r = OffsetCommitRequest::default();
    r.group_id = GroupId(StrBytes::from_string(group.to_owned()));
    r.member_id = StrBytes::from_string(member.to_owned());
    r.generation_id_or_member_epoch = generation;
    r.topics = vec![t];
    r
}

#[test]
fn offsets_committed_over_kafka_are_fetched_back_and_seen_by_the_flume_sdk() -> Result<()> {
    let (_dir, broker, addr, _clock) = start()?;
    let g = "g3";
    let (mut c, a) = one_member(&addr, g)?;
    let r = c.call(8, &commit_req(g, &a, 1, &[(0, 5), (1, 7), (9, 1)]))?;
    let codes: Vec<i16> = r.topics[0]
        .partitions
        .iter()
        .map(|p| p.error_code)
        .collect();
    assert_eq!(codes, vec![NONE, NONE, 3], "partition 9 does not exist");
    // Fenced: a stale generation, an unknown member.
    let r = c.call(8, &commit_req(g, &a, 0, &[(0, 6)]))?;
    assert_eq!(r.topics[0].partitions[0].error_code, ILLEGAL_GENERATION);
    let r = c.call(2, &commit_req(g, "ghost", 1, &[(0, 6)]))?;
    assert_eq!(r.topics[0].partitions[0].error_code, UNKNOWN_MEMBER_ID);

    // OffsetFetch v7 (one group, named partitions) and v8 (several groups; topics null: all).
    let mut f = OffsetFetchRequest::default();
    f.group_id = GroupId(StrBytes::from_static_str(g));
    let mut t = OffsetFetchRequestTopic::default();
    t.name = TopicName(StrBytes::from_static_str(TOPIC));
    t.partition_indexes = vec![0, 1, 2];
    f.topics = Some(vec![t]);
    let r = c.call(7, &f)?;
    let got: Vec<(i32, i64)> = r.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.committed_offset))
        .collect();
    assert_eq!(got, vec![(0, 5), (1, 7), (2, -1)]);
    let mut f8 = OffsetFetchRequest::default();
    let mut mine = OffsetFetchRequestGroup::default();
    mine.group_id = GroupId(StrBytes::from_static_str(g));
    mine.topics = None;
    let mut other = OffsetFetchRequestGroup::default();
    other.group_id = GroupId(StrBytes::from_static_str("nobody"));
    let mut tt = OffsetFetchRequestTopics::default();
    tt.name = TopicName(StrBytes::from_static_str(TOPIC));
    tt.partition_indexes = vec![3];
    other.topics = Some(vec![tt]);
    f8.groups = vec![mine, other];
    let r = c.call(8, &f8)?;
    assert_eq!(r.groups.len(), 2);
    let all: Vec<(i32, i64)> = r.groups[0].topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.committed_offset))
        .collect();
    assert_eq!(all, vec![(0, 5), (1, 7)]);
    assert_eq!(r.groups[1].topics[0].partitions[0].committed_offset, -1);

    // The same store as Flume's own commits: the SDK's Admin (and so `flume-cli groups lag`) sees them.
    let native = broker.local_addr().to_string();
    let seen = flume_rt::block_on(async {
        let admin = Admin::connect(&native).await?;
        admin.group_offsets(g, &[TOPIC.to_owned()]).await
    })?;
    let seen: Vec<(i32, i64)> = seen.iter().map(|p| (p.partition, p.committed)).collect();
    assert_eq!(seen, vec![(0, 5), (1, 7), (2, -1), (3, -1)]);
    assert_eq!(broker.engine().groups().committed(g, TOPIC, 1), Some(7));

    // Once the group is empty, a commit from outside it (generation -1, no member) is allowed.
    let mut l = LeaveGroupRequest::default();
    l.group_id = GroupId(StrBytes::from_static_str(g));
    l.member_id = StrBytes::from_string(a.clone());
    assert_eq!(c.call(1, &l)?.error_code, NONE);
    let r = c.call(8, &commit_req(g, "", -1, &[(3, 2)]))?;
    assert_eq!(r.topics[0].partitions[0].error_code, NONE);
    assert_eq!(broker.engine().groups().committed(g, TOPIC, 3), Some(2));
    let listed = c.call(3, &ListGroupsRequest::default())?;
    assert!(
        listed.groups.iter().any(|l| l.group_id.0.as_str() == g),
        "a group with committed offsets is listed"
    );
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn mismatched_protocols_other_modes_and_bad_session_timeouts_are_refused() -> Result<()> {
    let (_dir, broker, addr, _clock) = start()?;
    let g = "g4";
    let (_c, _a) = one_member(&addr, g)?;
    let mut c = Kc::connect(&addr)?;
    let r = c.call(3, &join_req(g, "", "roundrobin"))?;
    assert_eq!(
        r.error_code, INCONSISTENT_GROUP_PROTOCOL,
        "no protocol in common"
    );
    let mut bad = join_req("g5", "", "range");
    // Below the test brokers' group.min.session.timeout.ms (100 ms, common::config).
    bad.session_timeout_ms = 99;
    assert_eq!(c.call(3, &bad)?.error_code, INVALID_SESSION_TIMEOUT);
    bad.session_timeout_ms = -1;
    assert_eq!(c.call(3, &bad)?.error_code, INVALID_SESSION_TIMEOUT);
    assert_eq!(
        c.call(3, &join_req(g, "ghost", "range"))?.error_code,
        UNKNOWN_MEMBER_ID
    );
    // A Flume-protocol member cannot join the Kafka group.
    let flume = JoinSpec {
        group: g.into(),
        member_id: String::new(),
        topics: vec![TOPIC.into()],
        session_timeout: Duration::from_secs(6),
        rebalance_timeout: Duration::from_secs(6),
        assignor: Default::default(),
    };
    let r = flume_rt::block_on(broker.engine().groups().join_group(flume));
    assert_eq!(r.unwrap_err(), flume_protocol::ErrorCode::InvalidRequest);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn the_group_apis_are_advertised_with_their_versions() -> Result<()> {
    let (_dir, broker, addr, _clock) = start()?;
    let mut c = Kc::connect(&addr)?;
    let r = c.call(3, &kafka_protocol::messages::ApiVersionsRequest::default())?;
    let range = |k: ApiKey| {
        r.api_keys
            .iter()
            .find(|v| v.api_key == k as i16)
            .map(|v| (v.min_version, v.max_version))
    };
    assert_eq!(range(ApiKey::JoinGroup), Some((0, 9)));
    assert_eq!(range(ApiKey::SyncGroup), Some((0, 5)));
    assert_eq!(range(ApiKey::Heartbeat), Some((0, 4)));
    assert_eq!(range(ApiKey::LeaveGroup), Some((0, 5)));
    assert_eq!(range(ApiKey::OffsetCommit), Some((2, 9)));
    assert_eq!(range(ApiKey::OffsetFetch), Some((1, 9)));
    assert_eq!(range(ApiKey::DescribeGroups), Some((0, 6)));
    assert_eq!(range(ApiKey::ListGroups), Some((0, 5)));
    // KIP-848's consumer-protocol groups (tests/e2e_kafka_consumer_protocol.rs).
    assert_eq!(range(ApiKey::ConsumerGroupHeartbeat), Some((0, 1)));
    assert_eq!(range(ApiKey::ConsumerGroupDescribe), Some((0, 1)));
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

/// A group that has no members waits `group.initial.rebalance.delay.ms`
/// for more before its first generation (librdkafka's tests 0113 and 0118):
/// two members that start together are both in generation 1, with one
/// rebalance, instead of the first forming generation 1 alone and the
/// second starting generation 2.
#[test]
fn members_starting_together_form_the_first_generation_together() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (mut cfg, clock) = common::manual_config(dir.path());
    cfg.kafka_listen = Some("127.0.0.1:0".into());
    cfg.group_initial_rebalance_delay = Duration::from_secs(3);
    let broker = flume_rt::block_on(Broker::start(cfg)).context("broker starts")?;
    broker
        .engine()
        .records()
        .create_topic(TOPIC, common::topic(4))?;
    let addr = broker.kafka_addr().context("kafka listener")?.to_string();
    let engine = Arc::clone(broker.engine());
    let g = "together";
    let a = join_new(&addr, g)?;
    wait_for(&engine, g, 1, GroupPhase::PreparingRebalance);
    // Within the delay the first member is still waiting for others.
    clock.advance(Duration::from_millis(2000));
    flume_rt::block_on(engine.tick_now());
    assert!(
        !a.is_finished(),
        "answered before the initial delay ran out"
    );
    let b = join_new(&addr, g)?;
    wait_for(&engine, g, 2, GroupPhase::PreparingRebalance);
    // The second arrival extended the delay by 3 s from its join.
    clock.advance(Duration::from_millis(2500));
    flume_rt::block_on(engine.tick_now());
    wait_for(&engine, g, 2, GroupPhase::PreparingRebalance);
    clock.advance(Duration::from_millis(600));
    flume_rt::block_on(engine.tick_now());
    let (ra, rb) = (joined(a)?, joined(b)?);
    assert_eq!((ra.generation_id, rb.generation_id), (1, 1));
    assert_eq!(ra.leader, rb.leader);
    let leader = if ra.leader == ra.member_id { &ra } else { &rb };
    assert_eq!(
        leader.members.len(),
        2,
        "the leader assigns to both at once"
    );
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

const FENCED_INSTANCE_ID: i16 = 82;

/// A JoinGroup of a static member (`group.instance.id`).
fn static_join(group: &str, member: &str, instance: &str) -> JoinGroupRequest {
    let mut r = join_req(group, member, "range");
    r.group_instance_id = Some(StrBytes::from_string(instance.to_owned()));
    r
}

fn static_sync(group: &str, member: &str, instance: &str, generation: i32) -> SyncGroupRequest {
    let mut r = sync_req(group, member, generation, &[]);
    r.group_instance_id = Some(StrBytes::from_string(instance.to_owned()));
    r
}

/// A static member's heartbeat (v4) in generation 2.
fn static_heartbeat(c: &mut Kc, group: &str, member: &str, instance: &str) -> Result<i16> {
    let mut r = HeartbeatRequest::default();
    r.group_id = GroupId(StrBytes::from_string(group.to_owned()));
    r.member_id = StrBytes::from_string(member.to_owned());
    r.group_instance_id = Some(StrBytes::from_string(instance.to_owned()));
    r.generation_id = 2;
    Ok(c.call(4, &r)?.error_code)
}

/// Static membership (KIP-345) over the wire: two static members form a
/// generation; one "restarts" (a new connection, no member id, the same
/// instance id) and gets its partitions back in the same generation with no
/// rebalance, while the process it replaced is fenced (FENCED_INSTANCE_ID on
/// heartbeat and commit); a JoinGroup v9 leader restart is told to skip the
/// assignment; describe shows the instance ids; LeaveGroup by instance id
/// alone removes a member.
#[test]
fn a_static_member_restarts_without_a_rebalance_and_fences_the_old_process() -> Result<()> {
    let (_dir, broker, addr, _clock) = start()?;
    let engine = Arc::clone(broker.engine());
    let g = "static";
    let mut c = Kc::connect(&addr)?;
    // A alone: no MEMBER_ID_REQUIRED for a static member; generation 1 at once.
    let a1 = c.call(5, &static_join(g, "", "a"))?;
    ensure!(a1.error_code == NONE && a1.generation_id == 1, "{a1:?}");
    let a = a1.member_id.as_str().to_owned();
    ensure!(a.starts_with("a-"), "{a}");
    // B joins: a rebalance; A hears of it and rejoins.
    let b_join = {
        let addr = addr.clone();
        std::thread::spawn(move || Kc::connect(&addr)?.call(5, &static_join(g, "", "b")))
    };
    wait_for(&engine, g, 2, GroupPhase::PreparingRebalance);
    ensure!(heartbeat(&mut c, g, &a, 1)? == REBALANCE_IN_PROGRESS);
    let a2 = c.call(5, &static_join(g, &a, "a"))?;
    let b2 = joined(b_join)?;
    ensure!(a2.generation_id == 2 && b2.generation_id == 2 && a2.leader.as_str() == a);
    let instances: Vec<Option<&str>> = a2
        .members
        .iter()
        .map(|m| m.group_instance_id.as_ref().map(|i| i.as_str()))
        .collect();
    ensure!(instances == vec![Some("a"), Some("b")], "{instances:?}");
    let b = b2.member_id.as_str().to_owned();
    let mut lead = static_sync(g, &a, "a", 2);
    lead.assignments = sync_req(g, &a, 2, &[(&a, &[0, 1]), (&b, &[2, 3])]).assignments;
    let s = c.call(3, &lead)?;
    ensure!(s.error_code == NONE && partitions_of(&s.assignment) == vec![0, 1]);
    let mut old_b = Kc::connect(&addr)?;
    let s = old_b.call(3, &static_sync(g, &b, "b", 2))?;
    ensure!(s.error_code == NONE && partitions_of(&s.assignment) == vec![2, 3]);
    let rebalances = |e: &Engine| {
        e.groups()
            .group_summaries()
            .into_iter()
            .find(|s| s.group == g)
            .map(|s| (s.generation, s.rebalances))
    };
    let before = rebalances(&engine);

    // B's process restarts: a new connection, no member id, the same instance id.
    let mut new_b = Kc::connect(&addr)?;
    let b3 = new_b.call(5, &static_join(g, "", "b"))?;
    ensure!(b3.error_code == NONE, "{b3:?}");
    ensure!(b3.generation_id == 2, "the same generation: {b3:?}");
    ensure!(b3.member_id.as_str() != b && b3.leader.as_str() == a);
    let b_new = b3.member_id.as_str().to_owned();
    let s = new_b.call(3, &static_sync(g, &b_new, "b", 2))?;
    ensure!(s.error_code == NONE && partitions_of(&s.assignment) == vec![2, 3]);
    ensure!(rebalances(&engine) == before, "no rebalance");
    ensure!(phase(&engine, g) == Some(GroupPhase::Stable));
    ensure!(static_heartbeat(&mut c, g, &a, "a")? == NONE);
    ensure!(static_heartbeat(&mut new_b, g, &b_new, "b")? == NONE);

    // The old process is fenced: heartbeat and commit.
    ensure!(static_heartbeat(&mut old_b, g, &b, "b")? == FENCED_INSTANCE_ID);
    let mut commit = OffsetCommitRequest::default();
    commit.group_id = GroupId(StrBytes::from_static_str(g));
    commit.member_id = StrBytes::from_string(b.clone());
    commit.group_instance_id = Some(StrBytes::from_static_str("b"));
    commit.generation_id_or_member_epoch = 2;
    let mut t = OffsetCommitRequestTopic::default();
    t.name = TopicName(StrBytes::from_static_str(TOPIC));
    let mut p = OffsetCommitRequestPartition::default();
    p.partition_index = 2;
    p.committed_offset = 1;
    t.partitions = vec![p];
    commit.topics = vec![t];
    let r = old_b.call(7, &commit)?;
    ensure!(
        r.topics[0].partitions[0].error_code == FENCED_INSTANCE_ID,
        "{r:?}"
    );
    commit.member_id = StrBytes::from_string(b_new.clone());
    let r = new_b.call(7, &commit)?;
    ensure!(r.topics[0].partitions[0].error_code == NONE, "{r:?}");

    // The leader restarts with JoinGroup v9: told the members, and to skip the assignment.
    let mut new_a = Kc::connect(&addr)?;
    let a3 = new_a.call(9, &static_join(g, "", "a"))?;
    ensure!(a3.error_code == NONE && a3.generation_id == 2, "{a3:?}");
    ensure!(a3.skip_assignment && a3.leader == a3.member_id && a3.members.len() == 2);
    ensure!(a3.protocol_type.as_ref().map(|t| t.as_str()) == Some("consumer"));
    ensure!(rebalances(&engine) == before, "no rebalance");

    // Describe shows each member's instance id.
    let mut d = DescribeGroupsRequest::default();
    d.groups = vec![GroupId(StrBytes::from_static_str(g))];
    let r = c.call(5, &d)?;
    let mut seen: Vec<(String, String)> = r.groups[0]
        .members
        .iter()
        .map(|m| {
            (
                m.group_instance_id
                    .as_ref()
                    .map_or(String::new(), |i| i.as_str().to_owned()),
                m.member_id.as_str().to_owned(),
            )
        })
        .collect();
    seen.sort();
    ensure!(
        seen == vec![
            ("a".to_owned(), a3.member_id.as_str().to_owned()),
            ("b".to_owned(), b_new.clone())
        ],
        "{seen:?}"
    );

    // LeaveGroup by instance id alone (what an administrator's tool sends).
    let mut leave = LeaveGroupRequest::default();
    leave.group_id = GroupId(StrBytes::from_static_str(g));
    let mut who = MemberIdentity::default();
    who.group_instance_id = Some(StrBytes::from_static_str("b"));
    leave.members = vec![who];
    let r = c.call(3, &leave)?;
    ensure!(
        r.error_code == NONE && r.members[0].error_code == NONE,
        "{r:?}"
    );
    wait_for(&engine, g, 1, GroupPhase::PreparingRebalance);
    ensure!(static_heartbeat(&mut new_b, g, &b_new, "b")? == UNKNOWN_MEMBER_ID);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

/// `group.min.session.timeout.ms` and `group.max.session.timeout.ms` are the
/// broker's settings (kafka-python's own `test_group` joins with 3000 ms
/// against a broker whose minimum its fixture lowered): a Kafka JoinGroup
/// (dynamic or static) within them joins, outside gets
/// INVALID_SESSION_TIMEOUT; a Flume JOIN_GROUP's session is taken into them.
#[test]
fn the_session_timeout_bounds_are_broker_settings_for_both_protocols() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (mut cfg, clock) = common::manual_config(dir.path());
    cfg.kafka_listen = Some("127.0.0.1:0".into());
    cfg.group_min_session_timeout = Duration::from_millis(3000);
    cfg.group_max_session_timeout = Duration::from_millis(20_000);
    let broker = flume_rt::block_on(Broker::start(cfg)).context("broker starts")?;
    broker
        .engine()
        .records()
        .create_topic(TOPIC, common::topic(4))?;
    let addr = broker.kafka_addr().context("kafka listener")?.to_string();
    let mut c = Kc::connect(&addr)?;
    let with_session = |mut r: JoinGroupRequest, ms: i32| {
        r.session_timeout_ms = ms;
        r
    };
    for (ms, want) in [
        (2999, INVALID_SESSION_TIMEOUT),
        (20_001, INVALID_SESSION_TIMEOUT),
        (3000, NONE),
    ] {
        let r = c.call(3, &with_session(join_req("kg", "", "range"), ms))?;
        assert_eq!(r.error_code, want, "dynamic member, session {ms} ms");
    }
    for (ms, want) in [
        (2999, INVALID_SESSION_TIMEOUT),
        (20_001, INVALID_SESSION_TIMEOUT),
        (20_000, NONE),
    ] {
        let r = c.call(5, &with_session(static_join("ks", "", "i1"), ms))?;
        assert_eq!(r.error_code, want, "static member, session {ms} ms");
    }
    // Flume's protocol: 500 ms is raised to the 3 s minimum, 60 s lowered to
    // the 20 s maximum.
    let engine = broker.engine();
    let flume_join = |group: &str, session: Duration| {
        flume_rt::block_on(engine.groups().join_group(JoinSpec {
            group: group.into(),
            member_id: String::new(),
            topics: vec![TOPIC.into()],
            session_timeout: session,
            rebalance_timeout: Duration::from_secs(10),
            assignor: Default::default(),
        }))
        .map_err(|e| anyhow::anyhow!("join: {e:?}"))
    };
    flume_join("short", Duration::from_millis(500))?;
    flume_join("long", Duration::from_secs(60))?;
    let members = |group: &str| {
        engine
            .groups()
            .describe_group(group)
            .map_or(0, |d| d.members.len())
    };
    clock.advance(Duration::from_millis(2_000));
    flume_rt::block_on(engine.tick_now());
    assert_eq!(
        members("short"),
        1,
        "a 500 ms session lasts the 3 s minimum"
    );
    clock.advance(Duration::from_millis(1_500));
    flume_rt::block_on(engine.tick_now());
    assert_eq!(members("short"), 0, "and expires after it");
    assert_eq!(members("long"), 1);
    clock.advance(Duration::from_millis(17_000));
    flume_rt::block_on(engine.tick_now());
    assert_eq!(
        members("long"),
        0,
        "a 60 s session ends at the 20 s maximum"
    );
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

//! Unit tests of client-assigned groups (Kafka's JoinGroup/SyncGroup), no sleeping: time is `now`.
use super::*;
use std::time::Duration;

fn none(_: &str) -> u32 {
    0
}

fn kjoin(id: &str, protocols: &[&str]) -> ClientJoinParams {
    ClientJoinParams {
        join: crate::domain::ClientJoinSpec {
            group: "g".into(),
            member_id: id.to_owned(),
            require_member_id: false,
            client_id: "app".into(),
            group_instance_id: None,
            skip_assignment_supported: false,
            client_host: "/127.0.0.1".into(),
            protocol_type: "consumer".into(),
            protocols: protocols
                .iter()
                .map(|p| ((*p).to_owned(), Bytes::from(format!("md-{p}-{id}"))))
                .collect(),
            topics: vec!["t".into()],
            session_timeout: Duration::from_millis(6000),
            rebalance_timeout: Duration::from_millis(10_000),
        },
        limits: GroupLimits::default(),
    }
}

fn joined(r: Ready<u32>) -> (u32, ClientJoined) {
    match r.1 {
        Ok(Answer::ClientJoined(j)) => (r.0, j),
        other => panic!("not a client join: {other:?}"),
    }
}

fn synced(r: &Ready<u32>) -> Bytes {
    match &r.1 {
        Ok(Answer::Synced(s)) => s.assignment.clone(),
        other => panic!("not a sync: {other:?}"),
    }
}

fn assignment(member: &str, bytes: &str) -> MemberAssignment {
    MemberAssignment {
        member_id: member.to_owned(),
        assignment: Bytes::from(bytes.to_owned()),
        partitions: vec![TopicAssignment {
            topic: "t".into(),
            partitions: vec![0],
        }],
    }
}

/// One member joins (generation 1) and, as leader, syncs.
fn first(c: &mut Coordinator<u32>) -> String {
    let (_, j) = joined(c.join_client("g", kjoin("", &["range"]), 0, 1).remove(0));
    assert_eq!(j.generation, 1);
    assert_eq!(j.leader_id, j.member_id);
    assert_eq!(j.protocol, "range");
    assert_eq!(
        j.members.len(),
        1,
        "the leader sees every member's metadata"
    );
    let r = c.sync(
        "g",
        (&j.member_id, None),
        1,
        Some("consumer"),
        Some("range"),
        vec![assignment(&j.member_id, "all")],
        usize::MAX,
        1,
        2,
    );
    assert_eq!(synced(&r[0]), Bytes::from("all"));
    assert_eq!(c.state("g").unwrap().0, GroupState::Stable);
    j.member_id
}

#[test]
fn a_first_join_without_id_gets_one_to_rejoin_with_then_joins() {
    let mut c = Coordinator::new(7);
    let mut p = kjoin("", &["range"]);
    p.join.require_member_id = true;
    let r = c.join_client("g", p, 0, 1);
    let Err(GroupError::MemberIdRequired(id)) = &r[0].1 else {
        panic!("{r:?}")
    };
    assert!(id.starts_with("app-"), "{id}");
    assert_eq!(c.state("g").unwrap().2, 0, "not a member yet");
    let (_, j) = joined(c.join_client("g", kjoin(id, &["range"]), 1, 2).remove(0));
    assert_eq!(&j.member_id, id);
    assert_eq!(j.generation, 1);
    // An id never handed out is unknown.
    let r = c.join_client("g", kjoin("made-up", &["range"]), 2, 3);
    assert_eq!(r[0].1, Err(GroupError::Code(ErrorCode::UnknownMember)));
}

#[test]
fn a_handed_out_id_lapses_after_the_session_timeout() {
    let mut c = Coordinator::new(7);
    let mut p = kjoin("", &["range"]);
    p.join.require_member_id = true;
    let r = c.join_client("g", p, 0, 1);
    let Err(GroupError::MemberIdRequired(id)) = r[0].1.clone() else {
        panic!("{r:?}")
    };
    assert!(c.tick(6_001, &none).is_empty());
    assert!(c.state("g").is_none(), "nothing left of the group");
    let r = c.join_client("g", kjoin(&id, &["range"]), 6_002, 2);
    assert_eq!(r[0].1, Err(GroupError::Code(ErrorCode::UnknownMember)));
}

#[test]
fn followers_sync_waits_for_the_leader_and_a_new_member_rebalances_everyone() {
    let mut c = Coordinator::new(7);
    let a = first(&mut c);
    // b joins: a rebalance starts; a hears of it by heartbeat and rejoins.
    assert!(c.join_client("g", kjoin("", &["range"]), 10, 3).is_empty());
    assert_eq!(
        c.heartbeat("g", &a, 1, 11),
        Err(ErrorCode::RebalanceInProgress)
    );
    let r = c.join_client("g", kjoin(&a, &["range"]), 12, 4);
    assert_eq!(r.len(), 2);
    let (mut leader, mut follower) = (None, None);
    for x in r {
        let (t, j) = joined(x);
        assert_eq!(j.generation, 2);
        assert_eq!(j.leader_id, a, "the leader stays the leader");
        if t == 4 {
            leader = Some(j);
        } else {
            follower = Some(j);
        }
    }
    let (leader, follower) = (leader.unwrap(), follower.unwrap());
    let b = follower.member_id.clone();
    assert_eq!(
        leader
            .members
            .iter()
            .map(|m| m.member_id.clone())
            .collect::<Vec<_>>(),
        vec![a.clone(), b.clone()],
        "in join order"
    );
    assert_eq!(leader.members[1].metadata, Bytes::from("md-range-"));
    assert!(
        follower.members.is_empty(),
        "only the leader gets the metadata"
    );
    // Heartbeats are fine while the leader assigns; commits wait.
    assert_eq!(c.heartbeat("g", &b, 2, 13), Ok(()));
    assert_eq!(
        c.check_commit("g", &b, 2),
        Err(ErrorCode::RebalanceInProgress)
    );
    // The follower's sync parks until the leader's.
    assert!(c
        .sync(
            "g",
            (&b, None),
            2,
            None,
            None,
            Vec::new(),
            usize::MAX,
            14,
            5
        )
        .is_empty());
    let r = c.sync(
        "g",
        (&a, None),
        2,
        None,
        None,
        vec![assignment(&a, "for-a"), assignment(&b, "for-b")],
        usize::MAX,
        15,
        6,
    );
    assert_eq!(r.len(), 2);
    for x in &r {
        let want = if x.0 == 5 { "for-b" } else { "for-a" };
        assert_eq!(synced(x), Bytes::from(want));
    }
    assert_eq!(c.check_commit("g", &b, 2), Ok("consumer".to_owned()));
    // Stable: a late sync gets the stored assignment at once.
    let r = c.sync(
        "g",
        (&b, None),
        2,
        None,
        None,
        Vec::new(),
        usize::MAX,
        16,
        7,
    );
    assert_eq!(synced(&r[0]), Bytes::from("for-b"));
    let d = c.describe("g").unwrap();
    assert_eq!(d.phase, GroupPhase::Stable);
    assert_eq!(d.protocol_type, "consumer");
    assert_eq!(d.protocol, "range");
    assert_eq!(d.members.len(), 2);
    assert!(d.members.iter().all(|m| m.assignment.len() == 1));
    assert_eq!(c.list()[0].protocol_type, "consumer");
}

#[test]
fn a_stale_generation_is_illegal_even_during_a_rebalance() {
    let mut c = Coordinator::new(7);
    let a = first(&mut c);
    assert_eq!(
        c.heartbeat("g", &a, 0, 5),
        Err(ErrorCode::IllegalGeneration)
    );
    assert!(c.join_client("g", kjoin("", &["range"]), 10, 3).is_empty());
    assert_eq!(
        c.heartbeat("g", &a, 0, 11),
        Err(ErrorCode::IllegalGeneration)
    );
    assert_eq!(
        c.heartbeat("g", &a, 1, 11),
        Err(ErrorCode::RebalanceInProgress)
    );
    assert_eq!(
        c.heartbeat("g", "nobody", 1, 11),
        Err(ErrorCode::UnknownMember)
    );
    let r = c.sync(
        "g",
        (&a, None),
        1,
        None,
        None,
        Vec::new(),
        usize::MAX,
        12,
        9,
    );
    assert_eq!(
        r[0].1,
        Err(GroupError::Code(ErrorCode::RebalanceInProgress))
    );
    let r = c.sync(
        "g",
        (&a, None),
        0,
        None,
        None,
        Vec::new(),
        usize::MAX,
        12,
        9,
    );
    assert_eq!(r[0].1, Err(GroupError::Code(ErrorCode::IllegalGeneration)));
}

#[test]
fn a_leader_that_never_syncs_is_removed_and_the_waiting_follower_rejoins() {
    let mut c = Coordinator::new(7);
    let a = first(&mut c);
    assert!(c.join_client("g", kjoin("", &["range"]), 10, 3).is_empty());
    let r = c.join_client("g", kjoin(&a, &["range"]), 12, 4);
    let b = r
        .into_iter()
        .map(joined)
        .find(|(t, _)| *t == 3)
        .unwrap()
        .1
        .member_id;
    assert!(c
        .sync(
            "g",
            (&b, None),
            2,
            None,
            None,
            Vec::new(),
            usize::MAX,
            13,
            5
        )
        .is_empty());
    // Both keep heartbeating; a (the leader) never syncs. The deadline is the rebalance timeout.
    assert_eq!(c.heartbeat("g", &b, 2, 5_000), Ok(()));
    assert_eq!(c.heartbeat("g", &a, 2, 5_000), Ok(()));
    assert!(c.tick(5_000, &none).is_empty());
    let r = c.tick(12 + 10_000, &none);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].0, 5);
    assert_eq!(
        r[0].1,
        Err(GroupError::Code(ErrorCode::RebalanceInProgress))
    );
    assert!(c.last_seen("g", &a).is_none(), "the leader was removed");
    // b rejoins alone and leads generation 3.
    let (_, j) = joined(
        c.join_client("g", kjoin(&b, &["range"]), 10_020, 6)
            .remove(0),
    );
    assert_eq!((j.generation, j.leader_id.as_str()), (3, b.as_str()));
}

#[test]
fn members_without_a_common_protocol_or_of_the_other_mode_are_refused() {
    let mut c = Coordinator::new(7);
    let _a = first(&mut c);
    let r = c.join_client("g", kjoin("", &["roundrobin"]), 5, 3);
    assert_eq!(r[0].1, Err(GroupError::InconsistentProtocol));
    let mut other = kjoin("", &["range"]);
    other.join.protocol_type = "connect".into();
    let r = c.join_client("g", other, 5, 3);
    assert_eq!(r[0].1, Err(GroupError::InconsistentProtocol));
    let mut empty = kjoin("", &[]);
    empty.join.protocols.clear();
    let r = c.join_client("h", empty, 5, 3);
    assert_eq!(r[0].1, Err(GroupError::InconsistentProtocol));
    // A Flume (broker-assigned) member meets a Kafka group, and the other way round.
    let flume = JoinParams {
        member_id: String::new(),
        topics: vec!["t".into()],
        session_timeout_ms: 1000,
        rebalance_timeout_ms: 1000,
        assignor: Assignor::Range,
        limits: GroupLimits::default(),
    };
    let r = c.join("g", flume.clone(), 5, 4, &none);
    assert_eq!(r[0].1, Err(GroupError::InconsistentProtocol));
    let r = c.join("f", flume, 5, 5, &|_| 2);
    assert!(matches!(r[0].1, Ok(Answer::Joined(_))));
    let r = c.join_client("f", kjoin("", &["range"]), 5, 6);
    assert_eq!(r[0].1, Err(GroupError::InconsistentProtocol));
    let d = c.describe("f").unwrap();
    assert_eq!(d.protocol_type, BROKER_ASSIGNED_PROTOCOL_TYPE);
    assert_eq!(d.protocol, "range");
    assert_eq!(d.members[0].assignment[0].partitions, vec![0, 1]);
}

#[test]
fn the_protocol_most_members_prefer_among_those_all_support_wins() {
    let mut c = Coordinator::new(7);
    let (_, a) = joined(
        c.join_client("g", kjoin("", &["sticky", "range"]), 0, 1)
            .remove(0),
    );
    assert_eq!(a.protocol, "sticky");
    let _ = c.sync(
        "g",
        (&a.member_id, None),
        1,
        None,
        None,
        Vec::new(),
        usize::MAX,
        0,
        2,
    );
    assert!(c
        .join_client("g", kjoin("", &["range", "roundrobin"]), 1, 3)
        .is_empty());
    let r = c.join_client("g", kjoin(&a.member_id, &["sticky", "range"]), 2, 4);
    for x in r {
        assert_eq!(joined(x).1.protocol, "range", "the only one both support");
    }
}

#[test]
fn a_silent_member_expires_and_the_others_rebalance_and_a_leave_rebalances_too() {
    let mut c = Coordinator::new(7);
    let a = first(&mut c);
    assert!(c.join_client("g", kjoin("", &["range"]), 10, 3).is_empty());
    let r = c.join_client("g", kjoin(&a, &["range"]), 12, 4);
    let b = r
        .into_iter()
        .map(joined)
        .find(|(t, _)| *t == 3)
        .unwrap()
        .1
        .member_id;
    let _ = c.sync(
        "g",
        (&b, None),
        2,
        None,
        None,
        Vec::new(),
        usize::MAX,
        13,
        5,
    );
    let _ = c.sync(
        "g",
        (&a, None),
        2,
        None,
        None,
        Vec::new(),
        usize::MAX,
        13,
        6,
    );
    // b heartbeats, a goes silent past its session timeout (6 s).
    for t in [3_000, 6_000, 6_014] {
        assert_eq!(c.heartbeat("g", &b, 2, t), Ok(()));
        let _ = c.tick(t, &none);
    }
    assert!(c.last_seen("g", &a).is_none(), "a expired");
    assert_eq!(
        c.heartbeat("g", &b, 2, 6_020),
        Err(ErrorCode::RebalanceInProgress)
    );
    let (_, j) = joined(
        c.join_client("g", kjoin(&b, &["range"]), 6_021, 7)
            .remove(0),
    );
    assert_eq!((j.generation, j.leader_id.as_str()), (3, b.as_str()));
    // b leaves: the group is empty and forgotten at the next tick.
    assert!(c.leave("g", &b, 6_030, &none).unwrap().is_empty());
    assert_eq!(c.state("g").unwrap().0, GroupState::Empty);
    assert_eq!(c.check_commit("g", "", -1), Ok("consumer".to_owned()));
    let _ = c.tick(6_031, &none);
    assert!(c.describe("g").is_none());
}

#[test]
fn a_leave_answers_the_parked_sync_of_the_member_and_rebalances_the_rest() {
    let mut c = Coordinator::new(7);
    let a = first(&mut c);
    assert!(c.join_client("g", kjoin("", &["range"]), 10, 3).is_empty());
    let r = c.join_client("g", kjoin(&a, &["range"]), 12, 4);
    let b = r
        .into_iter()
        .map(joined)
        .find(|(t, _)| *t == 3)
        .unwrap()
        .1
        .member_id;
    assert!(c
        .sync(
            "g",
            (&b, None),
            2,
            None,
            None,
            Vec::new(),
            usize::MAX,
            13,
            5
        )
        .is_empty());
    let r = c.leave("g", &b, 14, &none).unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].1, Err(GroupError::Code(ErrorCode::UnknownMember)));
    assert!(matches!(
        c.state("g").unwrap().0,
        GroupState::PreparingRebalance { .. }
    ));
    assert_eq!(
        c.leave("g", &b, 15, &none).unwrap_err(),
        ErrorCode::UnknownMember
    );
}

#[test]
fn the_bytes_client_members_hold_are_capped_and_freed_when_they_go() {
    let mut c = Coordinator::new(7);
    let big = |id: &str, size: usize| {
        let mut p = kjoin(id, &["range"]);
        p.join.protocols[0].1 = Bytes::from(vec![0u8; size]);
        p.limits.max_client_bytes = 10_000;
        p
    };
    let (_, a) = joined(c.join_client("g", big("", 6_000), 0, 1).remove(0));
    // A second member whose metadata does not fit is refused; the group is untouched.
    let r = c.join_client("h", big("", 6_000), 1, 2);
    assert_eq!(r[0].1, Err(GroupError::Code(ErrorCode::LimitReached)));
    // The leader's assignment must fit too.
    let huge = MemberAssignment {
        member_id: a.member_id.clone(),
        assignment: Bytes::from(vec![0u8; 5_000]),
        partitions: Vec::new(),
    };
    let r = c.sync(
        "g",
        (&a.member_id, None),
        1,
        None,
        None,
        vec![huge],
        10_000,
        2,
        3,
    );
    assert_eq!(r[0].1, Err(GroupError::Code(ErrorCode::LimitReached)));
    let r = c.sync(
        "g",
        (&a.member_id, None),
        1,
        None,
        None,
        vec![assignment(&a.member_id, "x")],
        10_000,
        2,
        4,
    );
    assert_eq!(synced(&r[0]), Bytes::from("x"));
    // Once the member leaves, its share is free again.
    assert!(c.leave("g", &a.member_id, 3, &none).unwrap().is_empty());
    let r = c.join_client("h", big("", 6_000), 4, 5);
    assert!(matches!(r[0].1, Ok(Answer::ClientJoined(_))), "{r:?}");
}

fn delayed(id: &str, delay_ms: u64) -> ClientJoinParams {
    let mut p = kjoin(id, &["range"]);
    p.limits.initial_rebalance_delay_ms = delay_ms;
    p
}

#[test]
fn a_forming_group_waits_the_initial_delay_and_each_arrival_extends_it() {
    let mut c: Coordinator<u32> = Coordinator::new(1);
    // The first member of an empty group is not answered at once.
    assert!(c.join_client("g", delayed("", 3000), 0, 1).is_empty());
    assert_eq!(
        c.state("g").unwrap().0,
        GroupState::PreparingRebalance { deadline: 10_000 }
    );
    // A second arrives within the delay: it moves the end to 1000 + 3000.
    assert!(c.join_client("g", delayed("", 3000), 1000, 2).is_empty());
    assert!(c.tick(3500, &none).is_empty(), "the delay was extended");
    // At its end both form generation 1 together: one rebalance, not two.
    let ready = c.tick(4000, &none);
    assert_eq!(ready.len(), 2);
    let gens: Vec<i32> = ready.into_iter().map(|r| joined(r).1.generation).collect();
    assert_eq!(gens, vec![1, 1]);
    assert_eq!(c.describe("g").unwrap().members.len(), 2);
}

#[test]
fn the_initial_delay_never_passes_the_rebalance_timeout() {
    let mut c: Coordinator<u32> = Coordinator::new(1);
    assert!(c.join_client("g", delayed("", 3000), 0, 1).is_empty());
    // Members keep arriving every 2 s: each extends the delay, but the
    // group forms by its rebalance timeout (10 s) at the latest.
    let mut now = 0;
    let mut answered = Vec::new();
    for i in 2..10 {
        now += 2000;
        answered.extend(c.join_client("g", delayed("", 3000), now, i));
        answered.extend(c.tick(now, &none));
        if !answered.is_empty() {
            break;
        }
    }
    assert!(!answered.is_empty(), "formed");
    assert!(
        now <= 10_000,
        "formed at {now} ms, past the rebalance timeout"
    );
    assert!(answered
        .iter()
        .all(|r| matches!(&r.1, Ok(Answer::ClientJoined(j)) if j.generation == 1)));
}

#[test]
fn without_the_delay_or_once_formed_a_group_rebalances_as_before() {
    let mut c: Coordinator<u32> = Coordinator::new(1);
    // Delay 0: the first member forms generation 1 at once.
    let r = c.join_client("g", delayed("", 0), 0, 1);
    assert_eq!(joined(r.into_iter().next().unwrap()).1.generation, 1);
    // A delay applies only to a group forming from empty: a member joining a
    // live group starts an ordinary rebalance.
    let mut c: Coordinator<u32> = Coordinator::new(1);
    let a = first(&mut c);
    assert!(c.join_client("g", delayed("", 3000), 10, 3).is_empty());
    let r = c.join_client("g", delayed(&a, 3000), 20, 4);
    assert_eq!(r.len(), 2, "both answered once every known member rejoined");
}

//! Unit tests of the parent module, compiled only under #[cfg(test)].
use super::*;

fn six(_: &str) -> u32 {
    6
}

fn params(id: &str) -> JoinParams {
    JoinParams {
        member_id: id.to_owned(),
        topics: vec!["t".into()],
        session_timeout_ms: 1000,
        rebalance_timeout_ms: 5000,
        assignor: Assignor::Range,
        limits: GroupLimits::default(),
    }
}

fn ok(ready: Vec<Ready<u32>>) -> Vec<(u32, Joined)> {
    ready
        .into_iter()
        .map(|(r, res)| match res.expect("join succeeds") {
            Answer::Joined(j) => (r, j),
            other => panic!("not a broker-assigned join: {other:?}"),
        })
        .collect()
}

fn parts(r: &Joined) -> Vec<i32> {
    r.assignment
        .iter()
        .flat_map(|t| t.partitions.clone())
        .collect()
}

#[test]
fn first_join_completes_at_once_with_everything() {
    let mut c = Coordinator::new(1);
    let r = ok(c.join("g", params(""), 0, 1, &six));
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].1.generation, 1);
    assert_eq!(parts(&r[0].1), vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(r[0].1.leader_id, r[0].1.member_id);
}

/// Three members on six partitions; returns their ids.
fn three(c: &mut Coordinator<u32>) -> Vec<String> {
    let a = ok(c.join("g", params(""), 0, 1, &six))[0]
        .1
        .member_id
        .clone();
    // b joins: a rebalance starts, a learns of it by heartbeat.
    assert!(c.join("g", params(""), 10, 2, &six).is_empty());
    assert_eq!(
        c.heartbeat("g", &a, 1, 20),
        Err(ErrorCode::RebalanceInProgress)
    );
    let r = ok(c.join("g", params(&a), 30, 1, &six));
    assert_eq!(r.len(), 2);
    let b = r.iter().find(|(t, _)| *t == 2).unwrap().1.member_id.clone();
    assert!(c.join("g", params(""), 40, 3, &six).is_empty());
    assert!(c.join("g", params(&a), 41, 1, &six).is_empty());
    let r = ok(c.join("g", params(&b), 42, 2, &six));
    assert_eq!(r.len(), 3);
    let mut all: Vec<i32> = Vec::new();
    for (_, resp) in &r {
        assert_eq!(resp.generation, 3);
        assert_eq!(parts(resp).len(), 2);
        all.extend(parts(resp));
    }
    all.sort_unstable();
    assert_eq!(
        all,
        vec![0, 1, 2, 3, 4, 5],
        "no partition twice, none missing"
    );
    let c_id = r.iter().find(|(t, _)| *t == 3).unwrap().1.member_id.clone();
    vec![a, b, c_id]
}

#[test]
fn joins_rebalance_with_generations_and_disjoint_assignments() {
    let mut c = Coordinator::new(1);
    let ids = three(&mut c);
    for id in &ids {
        assert_eq!(c.heartbeat("g", id, 3, 50), Ok(()));
        assert_eq!(
            c.heartbeat("g", id, 2, 50),
            Err(ErrorCode::IllegalGeneration)
        );
    }
}

#[test]
fn leave_rebalances_the_others() {
    let mut c = Coordinator::new(1);
    let ids = three(&mut c);
    assert!(c.leave("g", &ids[2], 100, &six).unwrap().is_empty());
    assert_eq!(
        c.heartbeat("g", &ids[0], 3, 101),
        Err(ErrorCode::RebalanceInProgress)
    );
    assert!(c.join("g", params(&ids[0]), 102, 1, &six).is_empty());
    let r = ok(c.join("g", params(&ids[1]), 103, 2, &six));
    assert_eq!(r.len(), 2);
    assert!(r
        .iter()
        .all(|(_, resp)| resp.generation == 4 && parts(resp).len() == 3));
    assert_eq!(
        c.leave("g", "nobody", 104, &six).unwrap_err(),
        ErrorCode::UnknownMember
    );
}

#[test]
fn session_expiry_removes_a_silent_member() {
    let mut c = Coordinator::new(1);
    let ids = three(&mut c);
    // a and b heartbeat, c is silent.
    for t in (100..=1100).step_by(100) {
        c.heartbeat("g", &ids[0], 3, t).unwrap();
        c.heartbeat("g", &ids[1], 3, t).unwrap();
        assert!(c.tick(t, &six).is_empty());
    }
    // c was last seen at 42: past 1042 it is gone.
    assert_eq!(c.state("g").unwrap().2, 2);
    assert!(matches!(
        c.state("g").unwrap().0,
        GroupState::PreparingRebalance { .. }
    ));
    assert_eq!(
        c.check_commit("g", &ids[2], 3),
        Err(ErrorCode::UnknownMember)
    );
    assert!(c.join("g", params(&ids[0]), 1200, 1, &six).is_empty());
    let r = ok(c.join("g", params(&ids[1]), 1201, 2, &six));
    assert!(r.iter().all(|(_, resp)| parts(resp).len() == 3));
}

/// A join that waited for the others longer than its session timeout does
/// not cost the member its session when the rebalance completes: the answer
/// starts the session again (as in Kafka).
#[test]
fn a_join_that_waited_long_restarts_the_session() {
    let mut c = Coordinator::new(1);
    let a = ok(c.join("g", params(""), 0, 1, &six))[0]
        .1
        .member_id
        .clone();
    assert!(c.join("g", params(""), 10, 2, &six).is_empty());
    let r = ok(c.join("g", params(&a), 20, 1, &six));
    let b = r.iter().find(|(t, _)| *t == 2).unwrap().1.member_id.clone();
    // c joins at 100; a rejoins at 110 and waits for b, which heartbeats but
    // never rejoins: the rebalance completes at its deadline (5100), without b.
    assert!(c.join("g", params(""), 100, 3, &six).is_empty());
    assert!(c.join("g", params(&a), 110, 1, &six).is_empty());
    let mut answered = Vec::new();
    let mut done = 0;
    for t in (200..=6000).step_by(100) {
        let _ = c.heartbeat("g", &b, 2, t);
        answered.extend(c.tick(t, &six));
        if !answered.is_empty() {
            done = t;
            break;
        }
    }
    let r = ok(answered);
    assert_eq!(r.len(), 2, "a's and c's joins answered at {done}");
    assert!(
        done >= 5100,
        "a waited {} ms, past its 1 s session",
        done - 110
    );
    assert_eq!(
        c.last_seen("g", &a),
        Some(done),
        "the answer restarted a's session"
    );
    assert!(
        c.tick(done + 500, &six).is_empty(),
        "nobody expired right after"
    );
    assert_eq!(c.state("g").unwrap().2, 2);
}

#[test]
fn rebalance_deadline_drops_members_that_do_not_rejoin() {
    let mut c = Coordinator::new(1);
    let ids = three(&mut c);
    assert!(c.join("g", params(""), 100, 4, &six).is_empty());
    assert!(c.join("g", params(&ids[0]), 101, 1, &six).is_empty());
    // b and c keep heartbeating (they are told to rejoin) but never rejoin.
    for t in (500..=5000).step_by(500) {
        assert_eq!(
            c.heartbeat("g", &ids[1], 3, t),
            Err(ErrorCode::RebalanceInProgress)
        );
        assert_eq!(
            c.heartbeat("g", &ids[2], 3, t),
            Err(ErrorCode::RebalanceInProgress)
        );
        assert!(
            c.tick(t, &six).is_empty(),
            "before the deadline nothing completes"
        );
    }
    let r = ok(c.tick(5100, &six));
    assert_eq!(r.len(), 2);
    assert_eq!(c.state("g").unwrap().2, 2);
    assert_eq!(
        c.check_commit("g", &ids[1], 3),
        Err(ErrorCode::UnknownMember)
    );
    let gen = r[0].1.generation;
    assert_eq!(
        c.check_commit("g", &ids[0], gen),
        Ok(BROKER_ASSIGNED_PROTOCOL_TYPE.to_owned())
    );
    assert_eq!(
        c.check_commit("g", &ids[0], gen - 1),
        Err(ErrorCode::IllegalGeneration)
    );
}

#[test]
fn fencing_and_tool_commits() {
    let mut c: Coordinator<u32> = Coordinator::new(1);
    assert_eq!(
        c.check_commit("g", "", -1),
        Ok(String::new()),
        "no group: a tool may commit, outside any protocol"
    );
    assert_eq!(
        c.check_commit("g", "a-client-made-id", -1),
        Ok(String::new()),
        "no group: a consumer with assign() and its own member id (KIP-1082) too"
    );
    let ids = three(&mut c);
    assert_eq!(
        c.check_commit("g", "a-client-made-id", -1),
        Err(ErrorCode::UnknownMember),
        "not while the group has members"
    );
    assert_eq!(
        c.check_commit("g", "", -1),
        Err(ErrorCode::RebalanceInProgress)
    );
    assert_eq!(
        c.check_commit("g", "ghost", 3),
        Err(ErrorCode::UnknownMember)
    );
    assert_eq!(
        c.heartbeat("g", "ghost", 3, 0),
        Err(ErrorCode::UnknownMember)
    );
    for id in &ids {
        c.leave("g", id, 0, &six).unwrap();
    }
    assert_eq!(c.state("g").unwrap().0, GroupState::Empty);
    // The empty group keeps its protocol type, which the commit records.
    assert_eq!(
        c.check_commit("g", "", -1),
        Ok(BROKER_ASSIGNED_PROTOCOL_TYPE.to_owned())
    );
    assert_eq!(
        c.check_commit("g", &ids[0], -1),
        Ok(BROKER_ASSIGNED_PROTOCOL_TYPE.to_owned()),
        "an empty group: any member id with a negative generation, as Kafka"
    );
    // A stale member id must rejoin from scratch.
    let r = c.join("g", params(&ids[0]), 0, 9, &six);
    assert_eq!(r[0].1, Err(GroupError::Code(ErrorCode::UnknownMember)));
}

#[test]
fn groups_and_members_per_group_are_capped() {
    let mut c: Coordinator<u32> = Coordinator::new(1);
    let capped = |id: &str| JoinParams {
        limits: GroupLimits {
            max_groups: 2,
            max_members: 2,
            ..GroupLimits::default()
        },
        ..params(id)
    };
    let a = ok(c.join("g1", capped(""), 0, 1, &six))[0]
        .1
        .member_id
        .clone();
    assert!(
        c.join("g1", capped(""), 1, 2, &six).is_empty(),
        "second member parks"
    );
    // A third member of g1 is refused; the parked join and the members stay.
    let r = c.join("g1", capped(""), 2, 3, &six);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].1, Err(GroupError::Code(ErrorCode::LimitReached)));
    assert_eq!(c.state("g1").map(|s| s.2), Some(2));
    // A known member rejoining is not a new member.
    assert_eq!(ok(c.join("g1", capped(&a), 3, 1, &six)).len(), 2);
    // A second group fits, a third does not.
    assert_eq!(ok(c.join("g2", capped(""), 4, 4, &six)).len(), 1);
    let r = c.join("g3", capped(""), 5, 5, &six);
    assert_eq!(r[0].1, Err(GroupError::Code(ErrorCode::LimitReached)));
    assert!(c.state("g3").is_none(), "a refused group holds no state");
    // Once a group empties and is dropped, there is room again.
    let g2 = c.state("g2").map(|s| s.2);
    assert_eq!(g2, Some(1));
    c.tick(1_000_000, &six);
    assert_eq!(ok(c.join("g3", capped(""), 1_000_001, 6, &six)).len(), 1);
}

// ------------------------------------------------------------ the sticky assignor

/// A waiting heartbeat's listener fires when the group starts a rebalance
/// (a leave, a join) or loses a member to expiry, and not otherwise; the end
/// of a wait checks the member without counting as a heartbeat.
#[test]
fn waiting_heartbeats_wake_on_leave_join_and_expiry() {
    use futures::FutureExt;
    let mut c = Coordinator::new(1);
    let ids = three(&mut c);
    let (quiet, session) = c.heartbeat_listen("g", &ids[0], 3, 50).unwrap();
    assert_eq!(session, 1000);
    let (woken, _) = c.heartbeat_listen("g", &ids[1], 3, 50).unwrap();
    // Heartbeats and ticks within the sessions change nothing.
    c.heartbeat("g", &ids[2], 3, 60).unwrap();
    assert!(c.tick(70, &six).is_empty());
    let mut quiet = Box::pin(quiet);
    assert!(quiet.as_mut().now_or_never().is_none(), "nothing changed");
    assert_eq!(c.check_member("g", &ids[0], 3), Ok(()));
    // A leave wakes every waiting member of the group.
    assert!(c.leave("g", &ids[2], 100, &six).unwrap().is_empty());
    assert!(quiet.now_or_never().is_some());
    assert!(woken.now_or_never().is_some());
    assert_eq!(
        c.check_member("g", &ids[0], 3),
        Err(ErrorCode::RebalanceInProgress)
    );
    assert_eq!(
        c.heartbeat_listen("g", &ids[0], 3, 101).map(|_| ()),
        Err(ErrorCode::RebalanceInProgress),
        "an error is answered at once"
    );
    // The check at the end of a wait is not a heartbeat: last_seen stays.
    assert_eq!(c.last_seen("g", &ids[1]), Some(50));
    assert!(c.join("g", params(&ids[0]), 102, 1, &six).is_empty());
    let r = ok(c.join("g", params(&ids[1]), 103, 2, &six));
    assert_eq!(r.len(), 2);
    // A join starts a rebalance: it wakes the waiting ones.
    let (w, _) = c.heartbeat_listen("g", &ids[0], 4, 110).unwrap();
    assert!(c.join("g", params(""), 111, 3, &six).is_empty());
    assert!(w.now_or_never().is_some());
    // Expiry wakes them too.
    let mut c = Coordinator::new(1);
    let ids = three(&mut c);
    let (w, _) = c.heartbeat_listen("g", &ids[0], 3, 1000).unwrap();
    c.heartbeat("g", &ids[1], 3, 1000).unwrap();
    assert!(c.tick(1060, &six).is_empty());
    assert!(w.now_or_never().is_some(), "the silent member expired");
    // Places: bounded, given back.
    assert!(c.park_heartbeat(1));
    assert!(!c.park_heartbeat(1));
    c.unpark_heartbeat();
    assert_eq!(c.parked_heartbeats(), 0);
}

/// The tick looks into a group only when something there is due: with every
/// member heartbeating, about once per session timeout, not every tick; a
/// silent member still expires on the first tick past its session, and a
/// change (a join, a leave) has the group looked into at the next tick.
#[test]
fn tick_skips_groups_with_nothing_due() {
    let mut c = Coordinator::new(1);
    let mut members = Vec::new();
    for g in 0..100 {
        let name = format!("g{g}");
        let r = ok(c.join(&name, params(""), 0, 1, &six));
        members.push((name, r[0].1.member_id.clone()));
    }
    assert!(c.tick(1, &six).is_empty());
    assert_eq!(c.last_tick_checked(), 100, "new groups are looked into");
    // Sessions of 1000 ms from 0: nothing due before 1001, whatever the heartbeats.
    for t in (100..=1000).step_by(100) {
        for (g, m) in &members {
            c.heartbeat(g, m, 1, t - 50).unwrap();
        }
        assert!(c.tick(t, &six).is_empty());
        assert_eq!(c.last_tick_checked(), 0, "tick at {t}");
    }
    // At 1001 each group is looked into once, finds its member alive (seen at
    // 950), and is next due at 1951.
    assert!(c.tick(1001, &six).is_empty());
    assert_eq!(c.last_tick_checked(), 100);
    assert!(c.tick(1500, &six).is_empty());
    assert_eq!(c.last_tick_checked(), 0);
    // A leave has its group looked into at the next tick (and dropped: it is empty).
    let (g0, m0) = members.remove(0);
    c.leave(&g0, &m0, 1600, &six).unwrap();
    assert!(c.tick(1601, &six).is_empty());
    assert_eq!(c.last_tick_checked(), 1);
    assert!(c.state(&g0).is_none(), "an empty group is dropped");
    // Only g1's member heartbeats from here on: everyone else expires at 1951.
    let (g1, m1) = members[0].clone();
    c.heartbeat(&g1, &m1, 1, 1900).unwrap();
    assert!(c.tick(1950, &six).is_empty());
    assert_eq!(c.last_tick_checked(), 0);
    assert!(c.tick(1951, &six).is_empty());
    assert_eq!(c.last_tick_checked(), 99);
    assert_eq!(c.state(&g1).map(|s| s.2), Some(1), "g1's member is alive");
    for (g, _) in &members[1..] {
        assert!(c.state(g).is_none(), "{g}'s silent member expired");
    }
    // A join makes its group due at once, and its rebalance deadline is kept.
    assert!(c.join(&g1, params(""), 2000, 2, &six).is_empty());
    assert!(c.tick(2001, &six).is_empty());
    assert_eq!(c.last_tick_checked(), 1);
    assert!(matches!(
        c.state(&g1).unwrap().0,
        GroupState::PreparingRebalance { deadline: 7000 }
    ));
    // g1's first member does not rejoin: at the deadline the rebalance completes
    // without it (its session, kept alive by heartbeats, is not what ends it).
    for t in (2100..7000).step_by(300) {
        let _ = c.heartbeat(&g1, &m1, 1, t);
        assert!(c.tick(t, &six).is_empty());
    }
    let r = ok(c.tick(7000, &six));
    assert_eq!(r.len(), 1, "the parked join completes at the deadline");
    assert_eq!(
        c.state(&g1).map(|s| (s.0, s.2)),
        Some((GroupState::Stable, 1))
    );
}

/// Waves of groups whose members all go (LEAVE_GROUP in
/// half of them, silence until the session lapses in the others) leave no
/// state behind in the coordinator: its memory follows the live groups, so the
/// RSS a broker keeps after such waves is not Flume's (see README, RSS row).
#[test]
fn waves_of_members_that_come_and_go_leave_no_state_behind() {
    let mut c = Coordinator::new(1);
    for wave in 0..3u64 {
        let t0 = wave * 100_000;
        for g in 0..20 {
            let group = format!("w{wave}-g{g}");
            for m in 0..5 {
                let _ = c.join(&group, params(""), t0, m, &six);
            }
        }
        // The rebalances complete at their deadline with the parked joins.
        assert!(!c.tick(t0 + 5_000, &six).is_empty());
        assert_eq!(c.live_groups(), 20, "wave {wave}: every group is live");
        // The even groups' members leave; the odd ones' go silent.
        for g in (0..20).step_by(2) {
            let group = format!("w{wave}-g{g}");
            while let Some(id) = c
                .describe(&group)
                .and_then(|d| d.members.first().map(|m| m.member_id.clone()))
            {
                let _ = c
                    .leave(&group, &id, t0 + 5_100, &six)
                    .expect("a member leaves");
            }
        }
        let _ = c.tick(t0 + 50_000, &six);
        assert!(
            c.groups.is_empty(),
            "wave {wave}: the coordinator still holds {} groups after every member went",
            c.groups.len()
        );
        assert_eq!(c.held(), 0);
        assert_eq!(c.parked_heartbeats(), 0);
    }
}

#[test]
fn a_topic_growing_rebalances_its_subscribers_onto_every_partition() {
    let mut c = Coordinator::new(1);
    let two = |_: &str| 2;
    let r = ok(c.join("g", params(""), 0, 1, &two));
    let a = r[0].1.member_id.clone();
    assert_eq!(parts(&r[0].1), vec![0, 1]);
    let mut other = params("");
    other.topics = vec!["u".into()];
    let r = ok(c.join("h", other, 0, 2, &two));
    let h = r[0].1.member_id.clone();
    let (ready, rebalanced) = c.topic_grew("t", 10);
    assert!(ready.is_empty());
    assert_eq!(rebalanced, vec!["g".to_owned()], "only t's subscribers");
    assert!(c.subscribes("g", "t") && !c.subscribes("h", "t"));
    assert_eq!(
        c.heartbeat("g", &a, 1, 20),
        Err(ErrorCode::RebalanceInProgress)
    );
    assert_eq!(c.heartbeat("h", &h, 1, 20), Ok(()), "h is not touched");
    let five = |_: &str| 5;
    let r = ok(c.join("g", params(&a), 30, 1, &five));
    assert_eq!(r[0].1.generation, 2);
    assert_eq!(parts(&r[0].1), vec![0, 1, 2, 3, 4]);
    // A group already rebalancing is left to complete with the new count.
    let (_, again) = c.topic_grew("nobody-reads-this", 40);
    assert!(again.is_empty());
}

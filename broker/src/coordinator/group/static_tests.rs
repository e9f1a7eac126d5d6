//! Unit tests of static membership (KIP-345), no sleeping: time is `now`.
use super::*;
use std::time::Duration;

fn sjoin(id: &str, instance: Option<&str>, protocols: &[&str]) -> ClientJoinParams {
    ClientJoinParams {
        join: crate::domain::ClientJoinSpec {
            group: "g".into(),
            member_id: id.to_owned(),
            require_member_id: true,
            client_id: "app".into(),
            client_host: "/127.0.0.1".into(),
            group_instance_id: instance.map(str::to_owned),
            skip_assignment_supported: false,
            protocol_type: "consumer".into(),
            protocols: protocols
                .iter()
                .map(|p| ((*p).to_owned(), Bytes::from(format!("md-{p}"))))
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

fn give(member: &str, bytes: &str) -> MemberAssignment {
    MemberAssignment {
        member_id: member.to_owned(),
        assignment: Bytes::from(bytes.to_owned()),
        partitions: Vec::new(),
    }
}

fn sync(
    c: &mut Coordinator<u32>,
    member: (&str, Option<&str>),
    generation: i32,
    assignments: Vec<MemberAssignment>,
    now: u64,
    tag: u32,
) -> Vec<Ready<u32>> {
    c.sync(
        "g",
        member,
        generation,
        None,
        None,
        assignments,
        usize::MAX,
        now,
        tag,
    )
}

/// The instance ids the group maps are exactly its static members'.
fn consistent(c: &Coordinator<u32>) {
    let Some(g) = c.groups.get("g") else { return };
    let from_members: BTreeMap<String, String> = g
        .members
        .iter()
        .filter_map(|(id, m)| {
            m.client
                .as_ref()
                .and_then(|c| c.instance.clone())
                .map(|i| (i, id.clone()))
        })
        .collect();
    assert_eq!(g.statics, from_members);
}

/// Static members "a" (leader, joined first) and "b" in a stable generation
/// 1, with assignments "A" and "B". Returns their member ids.
fn stable_pair(c: &mut Coordinator<u32>) -> (String, String) {
    let (_, a) = joined(
        c.join_client("g", sjoin("", Some("a"), &["range"]), 0, 1)
            .remove(0),
    );
    assert!(a.member_id.starts_with("a-"), "{}", a.member_id);
    assert_eq!(a.generation, 1);
    // b's join starts a rebalance; a's rejoin completes it.
    assert!(c
        .join_client("g", sjoin("", Some("b"), &["range"]), 1, 2)
        .is_empty());
    let r = c.join_client("g", sjoin(&a.member_id, Some("a"), &["range"]), 2, 3);
    assert_eq!(r.len(), 2);
    let mut b = String::new();
    for x in r {
        let (_, j) = joined(x);
        assert_eq!(j.generation, 2);
        assert_eq!(j.leader_id, a.member_id);
        if j.member_id != a.member_id {
            b = j.member_id;
        }
    }
    let leader_sync = sync(
        c,
        (&a.member_id, Some("a")),
        2,
        vec![give(&a.member_id, "A"), give(&b, "B")],
        3,
        4,
    );
    assert_eq!(synced(&leader_sync[0]), Bytes::from("A"));
    let r = sync(c, (&b, Some("b")), 2, Vec::new(), 3, 5);
    assert_eq!(synced(&r[0]), Bytes::from("B"));
    assert_eq!(c.state("g").unwrap().0, GroupState::Stable);
    consistent(c);
    (a.member_id, b)
}

fn rebalances(c: &Coordinator<u32>) -> u64 {
    c.summaries()
        .iter()
        .find(|s| s.group == "g")
        .map_or(0, |s| s.rebalances)
}

#[test]
fn a_static_member_joins_without_the_member_id_round_trip() {
    let mut c = Coordinator::new(7);
    let r = c.join_client("g", sjoin("", Some("inst-1"), &["range"]), 0, 1);
    let (_, j) = joined(r.into_iter().next().unwrap());
    assert!(j.member_id.starts_with("inst-1-"), "{}", j.member_id);
    // A dynamic member still makes the round trip.
    let r = c.join_client("g", sjoin("", None, &["range"]), 1, 2);
    assert!(
        matches!(r[0].1, Err(GroupError::MemberIdRequired(_))),
        "{r:?}"
    );
    let d = c.describe("g").unwrap();
    assert_eq!(d.members[0].group_instance_id.as_deref(), Some("inst-1"));
    consistent(&c);
}

#[test]
fn a_restarted_static_follower_gets_its_assignment_back_without_a_rebalance() {
    let mut c = Coordinator::new(7);
    let (a, b) = stable_pair(&mut c);
    let before = rebalances(&c);
    // b's process restarts: no member id, the same instance id.
    let r = c.join_client("g", sjoin("", Some("b"), &["range"]), 100, 10);
    assert_eq!(r.len(), 1, "answered at once: {r:?}");
    let (tag, j) = joined(r.into_iter().next().unwrap());
    assert_eq!(tag, 10);
    assert_eq!(j.generation, 2, "the same generation");
    assert_ne!(j.member_id, b, "a new member id");
    assert_eq!(j.leader_id, a);
    assert!(j.members.is_empty());
    assert_eq!(c.state("g").unwrap().0, GroupState::Stable);
    assert_eq!(rebalances(&c), before, "no rebalance");
    // Its SyncGroup gets the assignment the old process had.
    let r = sync(&mut c, (&j.member_id, Some("b")), 2, Vec::new(), 101, 11);
    assert_eq!(synced(&r[0]), Bytes::from("B"));
    // The leader noticed nothing.
    assert_eq!(c.heartbeat_as("g", (&a, Some("a")), 2, 102), Ok(()));
    consistent(&c);
}

#[test]
fn the_replaced_process_is_fenced_everywhere() {
    let mut c = Coordinator::new(7);
    let (_, b) = stable_pair(&mut c);
    let (_, j) = joined(
        c.join_client("g", sjoin("", Some("b"), &["range"]), 100, 10)
            .remove(0),
    );
    let fenced = GroupError::FencedInstanceId;
    assert_eq!(
        c.heartbeat_as("g", (&b, Some("b")), 2, 101),
        Err(fenced.clone())
    );
    let r = sync(&mut c, (&b, Some("b")), 2, Vec::new(), 101, 12);
    assert_eq!(r[0].1, Err(fenced.clone()));
    let r = c.join_client("g", sjoin(&b, Some("b"), &["range"]), 101, 13);
    assert_eq!(r[0].1, Err(fenced.clone()));
    assert_eq!(c.check_commit_as("g", (&b, Some("b")), 2), Err(fenced));
    assert_eq!(
        c.leave_as("g", (&b, Some("b")), 101, &|_| 0).err(),
        Some(GroupError::FencedInstanceId)
    );
    // Without its instance id the old id is just unknown.
    assert_eq!(
        c.heartbeat_as("g", (&b, None), 2, 101),
        Err(GroupError::Code(ErrorCode::UnknownMember))
    );
    // The new process is untouched by all that.
    assert_eq!(
        c.heartbeat_as("g", (&j.member_id, Some("b")), 2, 102),
        Ok(())
    );
    assert_eq!(
        c.check_commit_as("g", (&j.member_id, Some("b")), 2),
        Ok("consumer".to_owned())
    );
    assert_eq!(c.state("g").unwrap().0, GroupState::Stable);
    // An instance id the group never saw is unknown.
    assert_eq!(
        c.heartbeat_as("g", (&j.member_id, Some("zz")), 2, 102),
        Err(GroupError::Code(ErrorCode::UnknownMember))
    );
    let r = c.join_client("g", sjoin(&j.member_id, Some("zz"), &["range"]), 102, 14);
    assert_eq!(r[0].1, Err(GroupError::Code(ErrorCode::UnknownMember)));
    consistent(&c);
}

#[test]
fn a_restarted_static_leader_is_not_asked_to_assign() {
    let mut c = Coordinator::new(7);
    let (a, b) = stable_pair(&mut c);
    // Before KIP-814 (JoinGroup < v9): named leader under its old id.
    let (_, j) = joined(
        c.join_client("g", sjoin("", Some("a"), &["range"]), 100, 10)
            .remove(0),
    );
    assert_ne!(j.member_id, a);
    assert_eq!(j.leader_id, a, "the old id: the client does not assign");
    assert!(j.members.is_empty() && !j.skip_assignment);
    let r = sync(&mut c, (&j.member_id, Some("a")), 2, Vec::new(), 101, 11);
    assert_eq!(synced(&r[0]), Bytes::from("A"));
    // JoinGroup v9: the leader is told the members and to skip the assignment.
    let mut p = sjoin("", Some("a"), &["range"]);
    p.join.skip_assignment_supported = true;
    let (_, k) = joined(c.join_client("g", p, 102, 12).remove(0));
    assert_eq!(k.leader_id, k.member_id);
    assert!(k.skip_assignment);
    let ids: BTreeSet<&str> = k.members.iter().map(|m| m.member_id.as_str()).collect();
    assert_eq!(ids, BTreeSet::from([k.member_id.as_str(), b.as_str()]));
    assert!(k
        .members
        .iter()
        .all(|m| m.group_instance_id.is_some() && m.metadata == "md-range"));
    assert_eq!(c.state("g").unwrap().0, GroupState::Stable);
    let r = sync(&mut c, (&k.member_id, Some("a")), 2, Vec::new(), 103, 13);
    assert_eq!(synced(&r[0]), Bytes::from("A"));
    consistent(&c);
}

#[test]
fn a_replacement_that_changes_the_protocol_rebalances() {
    let mut c = Coordinator::new(7);
    let (_, a) = joined(
        c.join_client("g", sjoin("", Some("a"), &["range"]), 0, 1)
            .remove(0),
    );
    assert_eq!(a.generation, 1);
    let r = sync(
        &mut c,
        (&a.member_id, Some("a")),
        1,
        vec![give(&a.member_id, "A")],
        1,
        2,
    );
    assert_eq!(synced(&r[0]), Bytes::from("A"));
    let (_, j) = joined(
        c.join_client("g", sjoin("", Some("a"), &["roundrobin"]), 10, 3)
            .remove(0),
    );
    assert_eq!(j.generation, 2, "a new generation");
    assert_eq!(j.protocol, "roundrobin");
    assert_eq!(j.leader_id, j.member_id, "the only member leads");
    assert_eq!(j.members.len(), 1);
    consistent(&c);
}

#[test]
fn a_replacement_while_the_leader_assigns_fences_the_parked_sync_and_rebalances() {
    let mut c = Coordinator::new(7);
    // A new dynamic member: rebalance; a and b rejoin; generation 3 waits for the leader.
    let (a2, b2) = stable_pair(&mut c);
    let mut dynamic = sjoin("", None, &["range"]);
    dynamic.join.require_member_id = false;
    assert!(c.join_client("g", dynamic, 10, 20).is_empty());
    assert!(c
        .join_client("g", sjoin(&b2, Some("b"), &["range"]), 11, 21)
        .is_empty());
    let r = c.join_client("g", sjoin(&a2, Some("a"), &["range"]), 12, 22);
    assert_eq!(r.len(), 3);
    assert!(matches!(
        c.state("g").unwrap().0,
        GroupState::CompletingRebalance { .. }
    ));
    // b's follower sync parks, waiting for the leader's.
    assert!(sync(&mut c, (&b2, Some("b")), 3, Vec::new(), 13, 23).is_empty());
    // b restarts meanwhile.
    let r = c.join_client("g", sjoin("", Some("b"), &["range"]), 14, 24);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0], (23, Err(GroupError::FencedInstanceId)));
    assert!(matches!(
        c.state("g").unwrap().0,
        GroupState::PreparingRebalance { .. }
    ));
    consistent(&c);
}

#[test]
fn a_rebalance_deadline_keeps_an_absent_static_member_and_its_session_ends_it() {
    let mut c = Coordinator::new(7);
    let (a, b) = stable_pair(&mut c);
    // A dynamic member joins at 1000; a rejoins, b (its process gone) does not.
    let mut dynamic = sjoin("", None, &["range"]);
    dynamic.join.require_member_id = false;
    assert!(c.join_client("g", dynamic, 1000, 20).is_empty());
    assert!(c
        .join_client("g", sjoin(&a, Some("a"), &["range"]), 1001, 21)
        .is_empty());
    // Keep b's session alive past the rebalance deadline (1000 + 10 000).
    assert_eq!(
        c.heartbeat_as("g", (&b, Some("b")), 2, 5000),
        Err(GroupError::Code(ErrorCode::RebalanceInProgress))
    );
    let r = c.tick(10_500, &|_| 0);
    assert!(r.is_empty(), "b's session has not lapsed: {r:?}");
    let r = c.tick(11_000, &|_| 0);
    assert_eq!(r.len(), 2, "the two that rejoined are answered");
    let (_, leader) = r.into_iter().map(joined).find(|(t, _)| *t == 21).unwrap();
    assert_eq!(leader.generation, 3);
    assert_eq!(leader.leader_id, a);
    assert_eq!(leader.members.len(), 3, "b stays in the generation");
    assert!(leader.members.iter().any(|m| m.member_id == b));
    consistent(&c);
    // b never comes back: its session (6 s from 5000) ends it, and the group rebalances.
    let sync_a = sync(&mut c, (&a, Some("a")), 3, Vec::new(), 11_001, 30);
    assert_eq!(sync_a.len(), 1);
    assert!(c.tick(11_002, &|_| 0).is_empty());
    assert!(c
        .describe("g")
        .unwrap()
        .members
        .iter()
        .all(|m| m.member_id != b));
    assert!(matches!(
        c.state("g").unwrap().0,
        GroupState::PreparingRebalance { .. }
    ));
    consistent(&c);
}

#[test]
fn a_rebalance_that_no_member_rejoined_waits_for_the_sessions() {
    let mut c = Coordinator::new(7);
    let (_, a) = joined(
        c.join_client("g", sjoin("", Some("a"), &["range"]), 0, 1)
            .remove(0),
    );
    let r = sync(
        &mut c,
        (&a.member_id, Some("a")),
        1,
        vec![give(&a.member_id, "A")],
        1,
        2,
    );
    assert_eq!(r.len(), 1);
    // The topic grows: a rebalance starts; the process is gone and never rejoins.
    c.groups
        .get_mut("g")
        .unwrap()
        .members
        .get_mut(&a.member_id)
        .unwrap()
        .topics = vec!["t".into()];
    let (_, groups) = c.topic_grew("t", 2);
    assert_eq!(groups, vec!["g".to_owned()]);
    // Its heartbeat keeps the session: the deadline passes with no one rejoined.
    assert!(c
        .heartbeat_as("g", (&a.member_id, Some("a")), 1, 9_000)
        .is_err());
    assert!(c.tick(10_002, &|_| 0).is_empty());
    assert_eq!(c.state("g").unwrap().2, 1, "the static member stays");
    assert!(matches!(
        c.state("g").unwrap().0,
        GroupState::PreparingRebalance { deadline } if deadline > 10_002
    ));
    // Its session lapses: the group is empty and goes.
    assert!(c.tick(15_001, &|_| 0).is_empty());
    assert!(c.state("g").is_none());
}

#[test]
fn a_static_member_can_be_removed_by_its_instance_id_alone() {
    let mut c = Coordinator::new(7);
    let (a, b) = stable_pair(&mut c);
    assert_eq!(
        c.leave_as("g", ("", Some("nope")), 10, &|_| 0).err(),
        Some(GroupError::Code(ErrorCode::UnknownMember))
    );
    assert_eq!(
        c.leave_as("g", ("", None), 10, &|_| 0).err(),
        Some(GroupError::Code(ErrorCode::UnknownMember))
    );
    assert!(c.leave_as("g", ("", Some("b")), 10, &|_| 0).is_ok());
    let d = c.describe("g").unwrap();
    assert_eq!(d.members.len(), 1);
    assert_eq!(d.members[0].member_id, a);
    assert!(matches!(
        c.state("g").unwrap().0,
        GroupState::PreparingRebalance { .. }
    ));
    consistent(&c);
    // The instance id is free again: a new process with it is a new member.
    assert!(c
        .join_client("g", sjoin("", Some("b"), &["range"]), 11, 5)
        .is_empty());
    let d = c.describe("g").unwrap();
    assert_eq!(d.members.len(), 2);
    assert!(d.members.iter().all(|m| m.member_id != b));
    consistent(&c);
}

#[test]
fn a_replacement_counts_its_metadata_against_the_limit() {
    let mut c = Coordinator::new(7);
    let (_, b) = stable_pair(&mut c);
    let held = c.held();
    let mut p = sjoin("", Some("b"), &["range"]);
    p.join.protocols = vec![("range".into(), Bytes::from(vec![0u8; 4096]))];
    p.limits.max_client_bytes = held + 100;
    let r = c.join_client("g", p, 100, 10);
    assert_eq!(r[0].1, Err(GroupError::Code(ErrorCode::LimitReached)));
    // Nothing changed: the old process is still the member.
    assert_eq!(c.heartbeat_as("g", (&b, Some("b")), 2, 101), Ok(()));
    assert_eq!(c.held(), held);
    consistent(&c);
}

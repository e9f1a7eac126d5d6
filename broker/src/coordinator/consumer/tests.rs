use super::*;
use proptest::prelude::*;

fn topics(t: &str) -> Option<i32> {
    match t {
        "a" => Some(4),
        "b" => Some(2),
        _ => None,
    }
}

fn limits() -> ConsumerGroupLimits {
    ConsumerGroupLimits {
        session_timeout_ms: 1_000,
        ..ConsumerGroupLimits::default()
    }
}

fn join<'a>(member: &'a str, subs: &[&str]) -> ConsumerHeartbeat<'a> {
    ConsumerHeartbeat {
        group: "g",
        member_id: member,
        member_epoch: 0,
        rebalance_timeout_ms: 500,
        subscribed: Some(subs.iter().map(|s| s.to_string()).collect()),
        owned: Some(Assignment::new()),
        ..ConsumerHeartbeat::default()
    }
}

fn beat(member: &str, epoch: i32, owned: Option<Assignment>) -> ConsumerHeartbeat<'_> {
    ConsumerHeartbeat {
        group: "g",
        member_id: member,
        member_epoch: epoch,
        rebalance_timeout_ms: -1,
        owned,
        ..ConsumerHeartbeat::default()
    }
}

fn count(a: &Assignment) -> usize {
    a.values().map(BTreeSet::len).sum()
}

/// A client: heartbeats, takes what it is given, reports it as owned.
fn step(g: &mut ConsumerGroups, m: &str, now: u64) -> ConsumerBeat {
    let (epoch, owned) = {
        let x = g.group("g").unwrap().members.get(m).unwrap();
        (x.member_epoch, x.assigned.clone())
    };
    g.heartbeat(beat(m, epoch, Some(owned)), &topics, now)
        .unwrap()
}

fn assert_no_double_owner(g: &ConsumerGroups) {
    let Some(group) = g.group("g") else { return };
    let mut seen = BTreeSet::new();
    for m in group.members() {
        for a in [&m.assigned, &m.revoking] {
            for (t, ps) in a {
                for p in ps {
                    assert!(seen.insert((t.clone(), *p)), "{t}-{p} owned twice");
                }
            }
        }
    }
}

#[test]
fn a_lone_member_gets_everything_and_a_second_waits_for_the_revocation() {
    let mut g = ConsumerGroups::new(limits(), 1);
    let a = g.heartbeat(join("m1", &["a"]), &topics, 0).unwrap();
    assert_eq!(count(a.assignment.as_ref().unwrap()), 4);
    assert_eq!(a.member_epoch, 1);
    let b = g.heartbeat(join("m2", &["a"]), &topics, 1).unwrap();
    // m1 still owns all four: m2 gets nothing yet, at the new epoch.
    assert_eq!(count(b.assignment.as_ref().unwrap()), 0);
    assert_eq!(b.member_epoch, 2);
    assert_no_double_owner(&g);
    // m1 heartbeats: two are revoked, its epoch stays.
    let a2 = g
        .heartbeat(
            beat("m1", 1, Some(a.assignment.clone().unwrap())),
            &topics,
            2,
        )
        .unwrap();
    assert_eq!(count(a2.assignment.as_ref().unwrap()), 2);
    assert_eq!(a2.member_epoch, 1);
    // m2 still waits: m1 has not said it gave them up.
    let b2 = step(&mut g, "m2", 3);
    assert_eq!(count(b2.assignment.as_ref().unwrap()), 0);
    assert_no_double_owner(&g);
    // m1 acknowledges: it reaches the target epoch.
    let a3 = g
        .heartbeat(beat("m1", 1, a2.assignment.clone()), &topics, 4)
        .unwrap();
    assert_eq!(a3.member_epoch, 2);
    let b3 = step(&mut g, "m2", 5);
    assert_eq!(count(b3.assignment.as_ref().unwrap()), 2);
    assert!(g.group("g").unwrap().is_stable());
    assert_no_double_owner(&g);
}

#[test]
fn fencing_unknown_members_and_a_lost_answer() {
    let mut g = ConsumerGroups::new(limits(), 1);
    let a = g.heartbeat(join("m1", &["a"]), &topics, 0).unwrap();
    assert_eq!(
        g.heartbeat(beat("m1", 7, None), &topics, 1),
        Err(ConsumerGroupError::FencedEpoch {
            sent: 7,
            current: 1
        })
    );
    assert_eq!(
        g.heartbeat(beat("zz", 1, None), &topics, 1),
        Err(ConsumerGroupError::UnknownMember("zz".into()))
    );
    // A subscription change moves the epoch; the previous one is still
    // taken once (the answer may have been lost).
    let mut hb = beat("m1", a.member_epoch, None);
    hb.subscribed = Some(vec!["a".into(), "b".into()]);
    let moved = g.heartbeat(hb, &topics, 2).unwrap();
    assert_eq!(moved.member_epoch, 2);
    assert_eq!(count(moved.assignment.as_ref().unwrap()), 6);
    assert!(g.heartbeat(beat("m1", 1, None), &topics, 3).is_ok());
    assert!(matches!(
        g.heartbeat(beat("m1", 0 - 3, None), &topics, 3),
        Err(ConsumerGroupError::Invalid(_))
    ));
    // Commits: the member's epoch; older is stale, newer fenced.
    assert_eq!(g.check_commit("g", "m1", 2), Ok(true));
    assert!(matches!(
        g.check_commit("g", "m1", 1),
        Err(ConsumerGroupError::StaleEpoch { .. })
    ));
    assert!(matches!(
        g.check_commit("g", "m1", 3),
        Err(ConsumerGroupError::FencedEpoch { .. })
    ));
    assert!(g.check_commit("g", "", -1).is_err());
    assert_eq!(g.check_commit("other", "", -1), Ok(false));
}

#[test]
fn leaving_frees_partitions_and_an_empty_group_goes() {
    let mut g = ConsumerGroups::new(limits(), 1);
    g.heartbeat(join("m1", &["a"]), &topics, 0).unwrap();
    g.heartbeat(join("m2", &["a"]), &topics, 0).unwrap();
    let left = g.heartbeat(beat("m1", -1, None), &topics, 1).unwrap();
    assert_eq!(left.member_epoch, -1);
    assert!(g.heartbeat(beat("m1", -1, None), &topics, 1).is_err());
    let b = step(&mut g, "m2", 2);
    assert_eq!(count(b.assignment.as_ref().unwrap()), 4);
    g.heartbeat(beat("m2", -1, None), &topics, 3).unwrap();
    assert!(g.group("g").is_none());
}

#[test]
fn a_member_that_never_acknowledges_is_removed_after_its_rebalance_timeout() {
    let mut g = ConsumerGroups::new(limits(), 1);
    let a = g.heartbeat(join("m1", &["a"]), &topics, 0).unwrap();
    g.heartbeat(join("m2", &["a"]), &topics, 0).unwrap();
    // m1 is told to revoke (rebalance timeout 500) and keeps reporting all four.
    for now in [100, 300, 550] {
        g.heartbeat(beat("m1", 1, a.assignment.clone()), &topics, now)
            .unwrap();
        step(&mut g, "m2", now);
    }
    assert!(g.expire(599).is_empty());
    assert_eq!(g.expire(600), vec![("g".into(), "m1".into())]);
    let b = step(&mut g, "m2", 601);
    assert_eq!(count(b.assignment.as_ref().unwrap()), 4);
}

#[test]
fn session_expiry_removes_a_silent_member() {
    let mut g = ConsumerGroups::new(limits(), 1);
    g.heartbeat(join("m1", &["a"]), &topics, 0).unwrap();
    g.heartbeat(join("m2", &["a"]), &topics, 0).unwrap();
    step(&mut g, "m2", 900);
    assert_eq!(g.expire(1_000), vec![("g".into(), "m1".into())]);
    let b = step(&mut g, "m2", 1_001);
    assert_eq!(count(b.assignment.as_ref().unwrap()), 4);
    assert!(g.expire(2_000).is_empty());
    assert_eq!(g.expire(2_001), vec![("g".into(), "m2".into())]);
    assert!(g.group("g").is_none());
}

#[test]
fn a_static_member_keeps_its_place_and_a_restart_takes_it_over() {
    let mut g = ConsumerGroups::new(limits(), 1);
    let mut j = join("s1", &["a"]);
    j.instance_id = Some("i");
    let a = g.heartbeat(j, &topics, 0).unwrap();
    g.heartbeat(join("m2", &["a"]), &topics, 0).unwrap();
    let a = g
        .heartbeat(beat("s1", a.member_epoch, a.assignment), &topics, 1)
        .unwrap();
    g.heartbeat(beat("s1", 1, a.assignment.clone()), &topics, 2)
        .unwrap();
    step(&mut g, "m2", 3);
    let before = g.group("g").unwrap().members.get("s1").unwrap().clone();
    let epoch = g.group("g").unwrap().epoch;
    // Leaves for now: keeps its partitions; nothing rebalances.
    let mut leave = beat("s1", before.member_epoch, None);
    leave.instance_id = Some("i");
    leave.member_epoch = -2;
    assert_eq!(g.heartbeat(leave, &topics, 10).unwrap().member_epoch, -2);
    assert_eq!(g.group("g").unwrap().epoch, epoch);
    // The restarted one takes its place, with its partitions and epoch.
    let mut back = join("s1b", &["a"]);
    back.instance_id = Some("i");
    let b = g.heartbeat(back, &topics, 12).unwrap();
    assert_eq!(b.member_epoch, before.member_epoch);
    assert!(!g.group("g").unwrap().members.contains_key("s1"));
    assert_eq!(b.assignment.as_ref(), Some(&before.assigned));
    assert_eq!(g.group("g").unwrap().epoch, epoch, "no rebalance");
    // Another member may not take the instance id while it is held.
    let mut dup = join("s1c", &["a"]);
    dup.instance_id = Some("i");
    assert_eq!(
        g.heartbeat(dup, &topics, 13),
        Err(ConsumerGroupError::UnreleasedInstance("i".into()))
    );
    assert_no_double_owner(&g);
}

#[test]
fn a_static_member_that_does_not_come_back_is_removed_after_its_session() {
    let mut g = ConsumerGroups::new(limits(), 1);
    let mut j = join("s1", &["a"]);
    j.instance_id = Some("i");
    let a = g.heartbeat(j, &topics, 0).unwrap();
    let mut leave = beat("s1", a.member_epoch, None);
    leave.instance_id = Some("i");
    leave.member_epoch = -2;
    g.heartbeat(leave, &topics, 500).unwrap();
    assert!(g.expire(1_499).is_empty());
    assert_eq!(g.expire(1_500).len(), 1);
}

#[test]
fn assignors_bounds_and_bad_input() {
    let mut g = ConsumerGroups::new(
        ConsumerGroupLimits {
            max_groups: 1,
            max_members: 2,
            ..limits()
        },
        1,
    );
    let mut r = join("m1", &["a"]);
    r.server_assignor = Some("range");
    g.heartbeat(r, &topics, 0).unwrap();
    assert_eq!(g.group("g").unwrap().assignor, Assignor::Range);
    let mut bad = join("m2", &["a"]);
    bad.server_assignor = Some("cooperative-sticky");
    assert_eq!(
        g.heartbeat(bad, &topics, 0),
        Err(ConsumerGroupError::UnsupportedAssignor(
            "cooperative-sticky".into()
        ))
    );
    g.heartbeat(join("m2", &["a"]), &topics, 0).unwrap();
    assert!(matches!(
        g.heartbeat(join("m3", &["a"]), &topics, 0),
        Err(ConsumerGroupError::GroupFull { limit: 2, .. })
    ));
    let mut other = join("m1", &["a"]);
    other.group = "h";
    assert_eq!(
        g.heartbeat(other, &topics, 0),
        Err(ConsumerGroupError::TooManyGroups(1))
    );
    let long = "x".repeat(MAX_ID_LEN + 1);
    assert!(g.heartbeat(join(&long, &["a"]), &topics, 0).is_err());
    let mut none = join("m1", &[]);
    none.subscribed = None;
    assert!(g.heartbeat(none, &topics, 0).is_err());
}

#[test]
fn new_partitions_move_the_group_epoch() {
    let mut g = ConsumerGroups::new(limits(), 1);
    let a = g.heartbeat(join("m1", &["a"]), &topics, 0).unwrap();
    let more = |t: &str| (t == "a").then_some(6);
    let b = g
        .heartbeat(beat("m1", a.member_epoch, a.assignment), &more, 1)
        .unwrap();
    assert_eq!(count(b.assignment.as_ref().unwrap()), 6);
    assert!(b.member_epoch > a.member_epoch);
}

/// Topics with names, for regex subscriptions.
struct Named(Vec<(&'static str, i32)>);

impl TopicSource for Named {
    fn partitions(&self, topic: &str) -> Option<i32> {
        self.0.iter().find(|(t, _)| *t == topic).map(|(_, n)| *n)
    }
    fn names(&self) -> Vec<String> {
        self.0.iter().map(|(t, _)| t.to_string()).collect()
    }
}

#[test]
fn a_regex_subscription_matches_whole_names_and_new_topics() {
    let mut g = ConsumerGroups::new(limits(), 1);
    let mut j = join("m1", &[]);
    j.subscribed = None;
    j.regex = Some("orders-.*");
    let two = Named(vec![("orders-eu", 2), ("orders-us", 1), ("xorders-eu", 5)]);
    let a = g.heartbeat(j, &two, 0).unwrap();
    let got = a.assignment.unwrap();
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        vec!["orders-eu", "orders-us"]
    );
    // A topic created later joins the subscription.
    let three = Named(vec![("orders-eu", 2), ("orders-us", 1), ("orders-ap", 3)]);
    let b = g
        .heartbeat(beat("m1", a.member_epoch, Some(got)), &three, 1)
        .unwrap();
    assert_eq!(count(b.assignment.as_ref().unwrap()), 6);
    assert!(b.member_epoch > a.member_epoch);
    // Clearing it (an empty regex) leaves the member nothing.
    let mut clear = beat("m1", b.member_epoch, b.assignment.clone());
    clear.regex = Some("");
    let c = g.heartbeat(clear, &three, 2).unwrap();
    assert!(c.assignment.unwrap().is_empty());
    // An invalid or oversized one is refused.
    let mut bad = join("m2", &[]);
    bad.regex = Some("(unclosed");
    assert!(matches!(
        g.heartbeat(bad, &three, 3),
        Err(ConsumerGroupError::InvalidRegex(_))
    ));
    let long = "a".repeat(MAX_REGEX_LEN + 1);
    let mut big = join("m2", &[]);
    big.regex = Some(&long);
    assert!(matches!(
        g.heartbeat(big, &three, 3),
        Err(ConsumerGroupError::InvalidRegex(_))
    ));
}

#[derive(Debug, Clone)]
enum Op {
    Join(usize),
    Beat(usize),
    /// Heartbeats without acknowledging (reports its old owned set).
    Stubborn(usize),
    Leave(usize),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..4usize).prop_map(Op::Join),
        (0..4usize).prop_map(Op::Beat),
        (0..4usize).prop_map(Op::Beat),
        (0..4usize).prop_map(Op::Stubborn),
        (0..4usize).prop_map(Op::Leave),
        (1..700u64).prop_map(Op::Advance),
    ]
}

proptest! {
    /// Whatever members do, no partition is ever owned by two of them, and
    /// a group left alone to heartbeat settles with every partition given.
    #[test]
    fn no_partition_has_two_owners(ops in proptest::collection::vec(op(), 1..60)) {
        let names = ["m0", "m1", "m2", "m3"];
        let mut g = ConsumerGroups::new(limits(), 1);
        let mut now = 0u64;
        // What each client believes it owns.
        let mut owned: BTreeMap<&str, (i32, Assignment)> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Join(i) => {
                    if let Ok(b) = g.heartbeat(join(names[i], &["a", "b"]), &topics, now) {
                        owned.insert(names[i], (b.member_epoch, b.assignment.unwrap_or_default()));
                    }
                }
                Op::Beat(i) | Op::Stubborn(i) => {
                    let stubborn = matches!(op, Op::Stubborn(_));
                    if let Some((epoch, own)) = owned.get(names[i]).cloned() {
                        match g.heartbeat(beat(names[i], epoch, Some(own.clone())), &topics, now) {
                            Ok(b) => {
                                let next = if stubborn { own } else { b.assignment.unwrap_or_default() };
                                owned.insert(names[i], (b.member_epoch, next));
                            }
                            Err(_) => { owned.remove(names[i]); }
                        }
                    }
                }
                Op::Leave(i) => {
                    if let Some((epoch, _)) = owned.remove(names[i]) {
                        let _ = epoch;
                        let _ = g.heartbeat(beat(names[i], -1, None), &topics, now);
                    }
                }
                Op::Advance(ms) => {
                    now += ms;
                    for (_, m) in g.expire(now) {
                        owned.remove(m.as_str());
                    }
                }
            }
            assert_no_double_owner(&g);
            // What a live client holds, the broker counts as its own.
            if let Some(group) = g.group("g") {
                for (name, (_, own)) in &owned {
                    if let Some(m) = group.members.get(*name) {
                        for (t, ps) in own {
                            for p in ps {
                                prop_assert!(m.owns(t, *p), "{name} holds {t}-{p} the broker gave away");
                            }
                        }
                    }
                }
            }
        }
        // Everyone left heartbeats honestly a few rounds: the group settles.
        for _ in 0..4 {
            let live: Vec<&str> = owned.keys().copied().collect();
            for name in live {
                if let Some((epoch, own)) = owned.get(name).cloned() {
                    if let Ok(b) = g.heartbeat(beat(name, epoch, Some(own)), &topics, now) {
                        owned.insert(name, (b.member_epoch, b.assignment.unwrap_or_default()));
                    }
                }
            }
        }
        if let Some(group) = g.group("g") {
            prop_assert!(group.is_stable());
            let total: usize = group.members().map(|m| count(&m.assigned)).sum();
            prop_assert_eq!(total, 6);
        }
    }
}

#[test]
fn members_heartbeat_fast_while_the_group_changes_and_at_the_interval_once_settled() {
    let lim = ConsumerGroupLimits {
        session_timeout_ms: 60_000,
        heartbeat_interval_ms: 5_000,
        ..ConsumerGroupLimits::default()
    };
    let mut g = ConsumerGroups::new(lim, 1);
    // A join is a change: fast.
    let a = g.heartbeat(join("m1", &["a"]), &topics, 0).unwrap();
    assert_eq!(a.heartbeat_interval_ms, FAST_HEARTBEAT_MS);
    // Stable, but within one interval of the change: still fast.
    assert_eq!(
        step(&mut g, "m1", 1_000).heartbeat_interval_ms,
        FAST_HEARTBEAT_MS
    );
    // Stable for an interval: the configured one.
    assert_eq!(step(&mut g, "m1", 6_000).heartbeat_interval_ms, 5_000);
    // m2 joins: the group reconciles (m1 must give two up), both fast.
    let b = g.heartbeat(join("m2", &["a"]), &topics, 7_000).unwrap();
    assert_eq!(b.heartbeat_interval_ms, FAST_HEARTBEAT_MS);
    let mut now = 7_000;
    for _ in 0..4 {
        now += FAST_HEARTBEAT_MS;
        for m in ["m1", "m2"] {
            assert_eq!(
                step(&mut g, m, now).heartbeat_interval_ms,
                FAST_HEARTBEAT_MS
            );
        }
    }
    assert!(g.group("g").unwrap().is_stable());
    // An interval after the last change, stable: back to 5 s.
    now += 5_000;
    for m in ["m1", "m2"] {
        assert_eq!(step(&mut g, m, now).heartbeat_interval_ms, 5_000);
    }
    // A configured interval below the fast one is kept.
    let mut g = ConsumerGroups::new(
        ConsumerGroupLimits {
            heartbeat_interval_ms: 100,
            ..lim
        },
        1,
    );
    let a = g.heartbeat(join("m1", &["a"]), &topics, 0).unwrap();
    assert_eq!(a.heartbeat_interval_ms, 100);
}

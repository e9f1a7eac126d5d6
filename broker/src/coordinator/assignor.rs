//! The assignors of broker-assigned groups (Flume's protocol): pure
//! functions from the members' subscriptions, the partition counts and the
//! group's last assignment to the next one. Deterministic, so every test and
//! every broker computes the same assignment.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::domain::Assignor;

/// A member's subscription for assignment.
#[derive(Debug, Clone)]
pub struct Subscription {
    /// Member id.
    pub member: String,
    /// Topics.
    pub topics: Vec<String>,
}

/// An assignment: member -> topic -> partitions.
pub type Assignment = BTreeMap<String, BTreeMap<String, Vec<i32>>>;

/// Computes an assignment from scratch. Deterministic.
pub fn assign(
    assignor: Assignor,
    subs: &[Subscription],
    partitions_of: &dyn Fn(&str) -> u32,
) -> Assignment {
    assign_from(assignor, subs, partitions_of, &Assignment::new())
}

/// Computes an assignment that follows `prev` (the group's last one) as far
/// as the assignor allows: with [`Assignor::Sticky`] a member keeps what it
/// had up to its share, so a member leaving moves only its partitions (and
/// the few a change of the shares moves). Deterministic.
pub fn assign_from(
    assignor: Assignor,
    subs: &[Subscription],
    partitions_of: &dyn Fn(&str) -> u32,
    prev: &Assignment,
) -> Assignment {
    let mut out: BTreeMap<String, BTreeMap<String, Vec<i32>>> = subs
        .iter()
        .map(|s| (s.member.clone(), BTreeMap::new()))
        .collect();
    let topics: BTreeSet<&str> = subs
        .iter()
        .flat_map(|s| s.topics.iter().map(String::as_str))
        .collect();
    match assignor {
        Assignor::Range => {
            for topic in topics {
                let mut members: Vec<&str> = subs
                    .iter()
                    .filter(|s| s.topics.iter().any(|t| t == topic))
                    .map(|s| s.member.as_str())
                    .collect();
                members.sort_unstable();
                let n = partitions_of(topic) as usize;
                let m = members.len();
                if m == 0 {
                    continue;
                }
                let (per, extra) = (n / m, n % m);
                let mut next = 0usize;
                for (i, member) in members.iter().enumerate() {
                    let take = per + usize::from(i < extra);
                    let parts: Vec<i32> = (next..next + take)
                        .filter_map(|p| i32::try_from(p).ok())
                        .collect();
                    next += take;
                    if let Some(a) = out.get_mut(*member) {
                        a.insert(topic.to_owned(), parts);
                    }
                }
            }
        }
        Assignor::Sticky => {
            for topic in topics {
                let members: Vec<&str> = subs
                    .iter()
                    .filter(|s| s.topics.iter().any(|t| t == topic))
                    .map(|s| s.member.as_str())
                    .collect();
                let owners: BTreeMap<i32, &str> = prev
                    .iter()
                    .flat_map(|(member, topics)| {
                        topics
                            .get(topic)
                            .into_iter()
                            .flatten()
                            .map(move |p| (*p, member.as_str()))
                    })
                    .collect();
                for (member, parts) in sticky_topic(topic, &members, partitions_of(topic), &owners)
                {
                    if let Some(a) = out.get_mut(member) {
                        a.insert(topic.to_owned(), parts);
                    }
                }
            }
        }
        Assignor::RoundRobin => {
            let mut members: Vec<&Subscription> = subs.iter().collect();
            members.sort_unstable_by(|a, b| a.member.cmp(&b.member));
            let mut turn = 0usize;
            for topic in topics {
                for p in 0..partitions_of(topic) {
                    // The next member, in turn, that subscribes to this topic.
                    for step in 0..members.len() {
                        let cand = members[(turn + step) % members.len()];
                        if cand.topics.iter().any(|t| t == topic) {
                            if let (Some(a), Ok(p)) = (out.get_mut(&cand.member), i32::try_from(p))
                            {
                                a.entry(topic.to_owned()).or_default().push(p);
                            }
                            turn = (turn + step + 1) % members.len();
                            break;
                        }
                    }
                }
            }
        }
    }
    out
}

/// A 64-bit score of `parts` (FNV-1a, then a finalizer so nearby inputs
/// spread): the same on every broker and every run.
fn score(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.iter().chain(std::iter::once(&0xff)) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The sticky assignor for one topic: rendezvous (highest-random-weight)
/// hashing with bounded loads. Each partition prefers the member with the
/// highest `score(topic, partition, member)`; every member takes `n / m` or
/// one more (the extra ones go to the members with the highest
/// `score(topic, member)`); a member above its share gives up the partitions
/// it prefers least, each to the next member in that partition's order with
/// room. A partition's preferences do not depend on the other members, so
/// a member that joins takes about its share, from everyone.
///
/// `prev` (partition -> its owner in the last assignment) comes first: a
/// partition stays with its owner while the owner is a member, and only
/// then do the preferences above place it (a member over its new share
/// gives up what it had before last). So when a member leaves, the others
/// keep everything they had and share the leaver's partitions. The
/// preferences alone did not ensure that: a partition its favourite had
/// given up for lack of room went back to the favourite once there was
/// room, away from a member that stayed.
fn sticky_topic<'a>(
    topic: &str,
    members: &[&'a str],
    n: u32,
    prev: &BTreeMap<i32, &str>,
) -> BTreeMap<&'a str, Vec<i32>> {
    let mut members: Vec<&'a str> = members.to_vec();
    members.sort_unstable();
    members.dedup();
    let mut out: BTreeMap<&'a str, Vec<i32>> = members.iter().map(|m| (*m, Vec::new())).collect();
    let m = members.len();
    if m == 0 {
        return out;
    }
    let n_us = n as usize;
    let (base, extra) = (n_us / m, n_us % m);
    let mut by_extra: Vec<usize> = (0..m).collect();
    by_extra.sort_unstable_by_key(|&i| {
        (
            std::cmp::Reverse(score(&[topic.as_bytes(), members[i].as_bytes()])),
            members[i],
        )
    });
    let mut cap = vec![base; m];
    for &i in by_extra.iter().take(extra) {
        cap[i] += 1;
    }
    let pscore = |p: u32, i: usize| {
        (
            score(&[topic.as_bytes(), &p.to_be_bytes(), members[i].as_bytes()]),
            std::cmp::Reverse(members[i]),
        )
    };
    // 1. Every partition to its last owner if still here, else its favourite member.
    let index: HashMap<&str, usize> = members.iter().enumerate().map(|(i, m)| (*m, i)).collect();
    let mut owned: Vec<Vec<u32>> = vec![Vec::new(); m];
    let mut kept = vec![false; n_us];
    for p in 0..n {
        let owner = i32::try_from(p)
            .ok()
            .and_then(|p| prev.get(&p))
            .and_then(|owner| index.get(owner).copied());
        if let (Some(_), Some(k)) = (owner, kept.get_mut(p as usize)) {
            *k = true;
        }
        if let Some(best) = owner.or_else(|| (0..m).max_by_key(|&i| pscore(p, i))) {
            owned[best].push(p);
        }
    }
    // 2. Members above their share give up what they prefer least, what they
    //    had before last.
    let mut released = Vec::new();
    for (i, parts) in owned.iter_mut().enumerate() {
        if parts.len() > cap[i] {
            parts.sort_unstable_by_key(|&p| {
                std::cmp::Reverse((kept.get(p as usize).copied().unwrap_or(false), pscore(p, i)))
            });
            released.extend(parts.drain(cap[i]..));
        }
    }
    // 3. Each released partition to its most preferred member with room.
    released.sort_unstable();
    for p in released {
        let taker = (0..m)
            .filter(|&i| owned[i].len() < cap[i])
            .max_by_key(|&i| pscore(p, i));
        if let Some(i) = taker {
            owned[i].push(p);
        }
    }
    for (i, parts) in owned.into_iter().enumerate() {
        let mut parts: Vec<i32> = parts
            .into_iter()
            .filter_map(|p| i32::try_from(p).ok())
            .collect();
        parts.sort_unstable();
        out.insert(members[i], parts);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignors_are_deterministic_and_complete() {
        let subs: Vec<Subscription> = ["c", "a", "b"]
            .iter()
            .map(|m| Subscription {
                member: (*m).into(),
                topics: vec!["x".into(), "y".into()],
            })
            .collect();
        let n = |t: &str| if t == "x" { 7 } else { 2 };
        let range = assign(Assignor::Range, &subs, &n);
        assert_eq!(range["a"]["x"], vec![0, 1, 2]);
        assert_eq!(range["b"]["x"], vec![3, 4]);
        assert_eq!(range["c"]["x"], vec![5, 6]);
        assert_eq!(range["c"]["y"], Vec::<i32>::new());
        let rr = assign(Assignor::RoundRobin, &subs, &n);
        let count = |m: &str| rr[m].values().map(Vec::len).sum::<usize>();
        assert_eq!((count("a"), count("b"), count("c")), (3, 3, 3));
        assert_eq!(assign(Assignor::RoundRobin, &subs, &n), rr);
    }

    fn subs_of(members: &[&str], topics: &[&str]) -> Vec<Subscription> {
        members
            .iter()
            .map(|m| Subscription {
                member: (*m).into(),
                topics: topics.iter().map(|t| (*t).to_owned()).collect(),
            })
            .collect()
    }

    type Owners = BTreeMap<(String, i32), String>;

    fn owners(a: &BTreeMap<String, BTreeMap<String, Vec<i32>>>) -> Owners {
        let mut o = BTreeMap::new();
        for (member, topics) in a {
            for (topic, parts) in topics {
                for p in parts {
                    assert!(
                        o.insert((topic.clone(), *p), member.clone()).is_none(),
                        "{topic}/{p} assigned twice"
                    );
                }
            }
        }
        o
    }

    /// Partitions whose owner changed although the owner is still a member.
    fn moved(before: &Owners, after: &Owners) -> usize {
        before
            .iter()
            .filter(|(tp, m)| after.values().any(|x| x == *m) && after.get(*tp) != Some(*m))
            .count()
    }

    #[test]
    fn sticky_is_complete_balanced_and_independent_of_member_order() {
        for n in [0u32, 1, 2, 5, 7, 12, 64, 100] {
            for m in 1..=7usize {
                let names: Vec<String> = (0..m).map(|i| format!("member-{i}")).collect();
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                let subs = subs_of(&refs, &["x", "y"]);
                let parts = |t: &str| if t == "x" { n } else { 3 };
                let a = assign(Assignor::Sticky, &subs, &parts);
                let o = owners(&a);
                assert_eq!(o.len(), n as usize + 3, "n={n} m={m}");
                for topic in ["x", "y"] {
                    let loads: Vec<usize> = a.values().map(|t| t[topic].len()).collect();
                    let (lo, hi) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
                    assert!(hi - lo <= 1, "n={n} m={m} {topic}: {loads:?}");
                }
                let mut reversed = subs.clone();
                reversed.reverse();
                assert_eq!(assign(Assignor::Sticky, &reversed, &parts), a);
            }
        }
    }

    #[test]
    fn sticky_keeps_partitions_of_members_that_stay_when_one_leaves_or_joins() {
        let names: Vec<String> = (0..6).map(|i| format!("consumer-{i}")).collect();
        let (mut sticky_moves, mut range_moves) = (0, 0);
        for n in [6u32, 12, 24, 48] {
            let parts = |_: &str| n;
            for m in 2..=6usize {
                let all: Vec<&str> = names[..m].iter().map(String::as_str).collect();
                for leaver in 0..m {
                    let stay: Vec<&str> =
                        all.iter().copied().filter(|x| *x != all[leaver]).collect();
                    for assignor in [Assignor::Sticky, Assignor::Range] {
                        let before = owners(&assign(assignor, &subs_of(&all, &["t"]), &parts));
                        let after = owners(&assign(assignor, &subs_of(&stay, &["t"]), &parts));
                        let mv = moved(&before, &after);
                        if assignor == Assignor::Sticky {
                            // A leave moves the leaver's partitions and at most a few more.
                            assert!(mv <= m, "n={n} m={m} leaver={leaver}: {mv} moved");
                            sticky_moves += mv;
                        } else {
                            range_moves += mv;
                        }
                    }
                }
                // A member that joins takes about its share; the rest stay.
                let before = owners(&assign(
                    Assignor::Sticky,
                    &subs_of(&all[..m - 1], &["t"]),
                    &parts,
                ));
                let after = owners(&assign(Assignor::Sticky, &subs_of(&all, &["t"]), &parts));
                let taken = after.values().filter(|x| **x == all[m - 1]).count();
                assert!(
                    moved(&before, &after) <= taken + m,
                    "n={n} m={m}: {} moved for a join that takes {taken}",
                    moved(&before, &after)
                );
            }
        }
        assert!(
            sticky_moves * 3 < range_moves,
            "sticky moved {sticky_moves}, range {range_moves}"
        );
        assert_eq!(Assignor::parse("sticky"), Some(Assignor::Sticky));
    }

    #[test]
    fn with_the_last_assignment_a_leave_moves_only_the_leavers_partitions() {
        // Member ids are random in the coordinator (nonce + sequence): try many.
        for seed in 0..200u32 {
            let names: Vec<String> = (0..5).map(|i| format!("member-{seed:x}-{i}")).collect();
            for n in [6u32, 7, 12, 30] {
                let parts = |_: &str| n;
                for m in 2..=5usize {
                    let all: Vec<&str> = names[..m].iter().map(String::as_str).collect();
                    let first = assign(Assignor::Sticky, &subs_of(&all, &["t"]), &parts);
                    let leaver = (seed as usize) % m;
                    let stay: Vec<&str> =
                        all.iter().copied().filter(|x| *x != all[leaver]).collect();
                    let after =
                        assign_from(Assignor::Sticky, &subs_of(&stay, &["t"]), &parts, &first);
                    let (b, a) = (owners(&first), owners(&after));
                    assert_eq!(moved(&b, &a), 0, "seed={seed} n={n} m={m}");
                    assert_eq!(a.len(), n as usize);
                    let loads: Vec<usize> = after.values().map(|t| t["t"].len()).collect();
                    let (lo, hi) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
                    assert!(hi - lo <= 1, "balanced: {loads:?}");
                    // A join takes its share; the others lose only what it takes.
                    let back =
                        assign_from(Assignor::Sticky, &subs_of(&all, &["t"]), &parts, &after);
                    let o = owners(&back);
                    let taken = o.values().filter(|x| **x == all[leaver]).count();
                    assert!(moved(&a, &o) <= taken, "seed={seed} n={n} m={m}");
                    let loads: Vec<usize> = back.values().map(|t| t["t"].len()).collect();
                    let (lo, hi) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
                    assert!(hi - lo <= 1, "balanced after the join: {loads:?}");
                }
            }
        }
    }
}

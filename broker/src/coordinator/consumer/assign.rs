//! The server-side assignors of consumer-protocol groups (KIP-848), pure
//! functions from the members' subscriptions, the topics' partition counts
//! and the previous target to the next target.
//!
//! - `uniform` (the default): every partition to one of the members that
//!   subscribe to its topic, the members' counts within one of each other
//!   where their subscriptions allow it, a partition staying with its
//!   previous owner where that keeps the balance (sticky);
//! - `range`: per topic, its subscribers in member-id order each take a
//!   contiguous range, the first ones one more when it does not divide.

use std::collections::{BTreeMap, BTreeSet};

/// A member's partitions by topic.
pub type Assignment = BTreeMap<String, BTreeSet<i32>>;

/// The assignors served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Assignor {
    /// Balanced and sticky.
    #[default]
    Uniform,
    /// Contiguous ranges per topic.
    Range,
}

impl Assignor {
    /// The assignor Kafka names `name`, if served.
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "uniform" => Some(Assignor::Uniform),
            "range" => Some(Assignor::Range),
            _ => None,
        }
    }

    /// Its Kafka name.
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Uniform => "uniform",
            Assignor::Range => "range",
        }
    }

    /// The next target: `subscriptions` by member, `partitions` by topic
    /// (topics missing from it get nobody), `previous` the target before.
    /// Every member of `subscriptions` has an entry, maybe empty.
    pub fn assign(
        self,
        subscriptions: &BTreeMap<String, Vec<String>>,
        partitions: &BTreeMap<String, i32>,
        previous: &BTreeMap<String, Assignment>,
    ) -> BTreeMap<String, Assignment> {
        match self {
            Assignor::Uniform => uniform(subscriptions, partitions, previous),
            Assignor::Range => range(subscriptions, partitions),
        }
    }
}

/// Members subscribing to each topic, in member-id order.
fn subscribers<'a>(
    subscriptions: &'a BTreeMap<String, Vec<String>>,
    partitions: &BTreeMap<String, i32>,
) -> BTreeMap<&'a str, Vec<&'a str>> {
    let mut by_topic: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (member, topics) in subscriptions {
        for t in topics {
            if partitions.get(t).is_some_and(|n| *n > 0) {
                let v = by_topic.entry(t.as_str()).or_default();
                if v.last() != Some(&member.as_str()) {
                    v.push(member.as_str());
                }
            }
        }
    }
    by_topic
}

fn range(
    subscriptions: &BTreeMap<String, Vec<String>>,
    partitions: &BTreeMap<String, i32>,
) -> BTreeMap<String, Assignment> {
    let mut out: BTreeMap<String, Assignment> = subscriptions
        .keys()
        .map(|m| (m.clone(), Assignment::new()))
        .collect();
    for (topic, members) in subscribers(subscriptions, partitions) {
        let n = partitions.get(topic).copied().unwrap_or(0);
        let k = i32::try_from(members.len()).unwrap_or(i32::MAX).max(1);
        let (each, extra) = (n / k, n % k);
        let mut next = 0;
        for (i, m) in (0..).zip(members) {
            let take = each + i32::from(i < extra);
            if take > 0 {
                if let Some(a) = out.get_mut(m) {
                    a.entry(topic.to_owned())
                        .or_default()
                        .extend(next..next + take);
                }
            }
            next += take;
        }
    }
    out
}

/// The member of `members` with the fewest partitions (ties: the first id).
fn least<'a>(members: &[&'a str], count: &BTreeMap<&str, usize>) -> Option<&'a str> {
    members
        .iter()
        .min_by_key(|m| (count.get(**m).copied().unwrap_or(0), **m))
        .copied()
}

fn uniform(
    subscriptions: &BTreeMap<String, Vec<String>>,
    partitions: &BTreeMap<String, i32>,
    previous: &BTreeMap<String, Assignment>,
) -> BTreeMap<String, Assignment> {
    let by_topic = subscribers(subscriptions, partitions);
    // The owner of every partition, kept from the previous target where
    // the owner still subscribes.
    let mut owner: BTreeMap<(&str, i32), &str> = BTreeMap::new();
    let mut count: BTreeMap<&str, usize> = subscriptions.keys().map(|m| (m.as_str(), 0)).collect();
    for (topic, members) in &by_topic {
        for p in 0..partitions.get(*topic).copied().unwrap_or(0) {
            let kept = members.iter().find(|m| {
                previous
                    .get(**m)
                    .and_then(|a| a.get(*topic))
                    .is_some_and(|ps| ps.contains(&p))
            });
            if let Some(m) = kept {
                owner.insert((topic, p), m);
                *count.entry(m).or_default() += 1;
            }
        }
    }
    // The rest to the least loaded subscriber.
    for (topic, members) in &by_topic {
        for p in 0..partitions.get(*topic).copied().unwrap_or(0) {
            if owner.contains_key(&(*topic, p)) {
                continue;
            }
            if let Some(m) = least(members, &count) {
                owner.insert((topic, p), m);
                *count.entry(m).or_default() += 1;
            }
        }
    }
    // Balance: move a partition from its owner to the least loaded of its
    // subscribers while that one has two fewer. Each move lowers the sum
    // of the squared counts, so this ends; the bound is a guard.
    let keys: Vec<(&str, i32)> = owner.keys().copied().collect();
    let mut rounds = keys
        .len()
        .saturating_add(1)
        .saturating_mul(count.len().max(1));
    let mut moved = true;
    while moved && rounds > 0 {
        moved = false;
        rounds -= 1;
        for key in &keys {
            let Some(members) = by_topic.get(key.0) else {
                continue;
            };
            let (Some(from), Some(to)) = (owner.get(key).copied(), least(members, &count)) else {
                continue;
            };
            let (cf, ct) = (
                count.get(from).copied().unwrap_or(0),
                count.get(to).copied().unwrap_or(0),
            );
            if cf > ct + 1 {
                owner.insert(*key, to);
                *count.entry(from).or_default() -= 1;
                *count.entry(to).or_default() += 1;
                moved = true;
            }
        }
    }
    let mut out: BTreeMap<String, Assignment> = subscriptions
        .keys()
        .map(|m| (m.clone(), Assignment::new()))
        .collect();
    for ((topic, p), m) in owner {
        if let Some(a) = out.get_mut(m) {
            a.entry(topic.to_owned()).or_default().insert(p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subs(v: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        v.iter()
            .map(|(m, ts)| (m.to_string(), ts.iter().map(|t| t.to_string()).collect()))
            .collect()
    }

    fn sizes(a: &BTreeMap<String, Assignment>) -> Vec<usize> {
        a.values()
            .map(|x| x.values().map(BTreeSet::len).sum())
            .collect()
    }

    #[test]
    fn range_gives_contiguous_ranges_per_topic() {
        let parts = BTreeMap::from([("t".to_string(), 5)]);
        let a = Assignor::Range.assign(
            &subs(&[("a", &["t"]), ("b", &["t"])]),
            &parts,
            &BTreeMap::new(),
        );
        assert_eq!(a["a"]["t"], BTreeSet::from([0, 1, 2]));
        assert_eq!(a["b"]["t"], BTreeSet::from([3, 4]));
    }

    #[test]
    fn uniform_balances_and_sticks() {
        let parts = BTreeMap::from([("t".to_string(), 4), ("u".to_string(), 2)]);
        let two = subs(&[("a", &["t", "u"]), ("b", &["t", "u"])]);
        let first = Assignor::Uniform.assign(&two, &parts, &BTreeMap::new());
        assert_eq!(sizes(&first), vec![3, 3]);
        let three = subs(&[("a", &["t", "u"]), ("b", &["t", "u"]), ("c", &["t", "u"])]);
        let next = Assignor::Uniform.assign(&three, &parts, &first);
        assert_eq!(sizes(&next), vec![2, 2, 2]);
        // a and b each keep two of their three.
        for m in ["a", "b"] {
            let kept = next[m]
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p)))
                .filter(|(t, p)| first[m].get(t).is_some_and(|s| s.contains(p)))
                .count();
            assert_eq!(kept, 2, "{m}");
        }
        // Unknown topics and members without subscriptions get nothing.
        let odd = subs(&[("a", &["nope"]), ("b", &[])]);
        let none = Assignor::Uniform.assign(&odd, &parts, &first);
        assert_eq!(sizes(&none), vec![0, 0]);
        assert_eq!(Assignor::named("uniform"), Some(Assignor::Uniform));
        assert_eq!(Assignor::named("sticky"), None);
        assert_eq!(Assignor::Range.name(), "range");
    }
}

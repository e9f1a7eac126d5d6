//! Kafka's consumer protocol (the subscription and assignment bytes that
//! JoinGroup and SyncGroup carry for `protocol_type` "consumer") and the
//! assignors the group leader runs: pure functions from the members'
//! subscriptions and the partition counts to an assignment, no I/O.
//!
//! - `range` (Kafka's RangeAssignor): per topic, the members subscribed
//!   to it sorted by member id each take a consecutive range, the first
//!   ones one partition more when the count does not divide.
//! - `roundrobin`: every subscribed partition, sorted, dealt to the members
//!   in turn (members not subscribed to its topic skipped).
//! - `cooperative-sticky` (KIP-429): members keep what they own where the
//!   balance allows, the rest goes to the least loaded; a partition that
//!   moves from a member that still owns it is assigned to nobody this
//!   generation: its owner revokes it and rejoins, and the next rebalance
//!   gives it to its new member. The partitions that do not move are never
//!   revoked, so members keep consuming them through the rebalance.
//!
//! librdkafka and the Java client name the same protocols, so the SDK's
//! members share groups with theirs.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ConsumerProtocolAssignment, ConsumerProtocolSubscription};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::offsets::topic_name;
use crate::error::{Error, Result};

/// A (topic, partition).
pub(crate) type Tp = (String, i32);

/// The protocols this client can run, by Kafka's names.
pub(crate) const RANGE: &str = "range";
pub(crate) const ROUNDROBIN: &str = "roundrobin";
pub(crate) const COOPERATIVE_STICKY: &str = "cooperative-sticky";

/// The protocols to offer for the builder's `assignor` setting: a name or
/// a comma-separated list in order of preference; empty: range, then
/// cooperative-sticky (the Java client's default); `sticky` (Flume's) is
/// Kafka's cooperative-sticky.
///
/// # Errors
/// [`Error::InvalidArgument`] for a name this client cannot run.
pub(crate) fn protocols(setting: &str) -> Result<Vec<&'static str>> {
    if setting.trim().is_empty() {
        return Ok(vec![RANGE, COOPERATIVE_STICKY]);
    }
    let mut out = Vec::new();
    for name in setting.split(',') {
        let p = match name.trim() {
            RANGE => RANGE,
            ROUNDROBIN => ROUNDROBIN,
            COOPERATIVE_STICKY | "sticky" => COOPERATIVE_STICKY,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "assignor {other:?}: over Kafka the SDK runs range, roundrobin and cooperative-sticky"
                )));
            }
        };
        if !out.contains(&p) {
            out.push(p);
        }
    }
    Ok(out)
}

/// Whether `protocol` is a cooperative one (members keep their partitions
/// while they rejoin).
pub(crate) fn is_cooperative(protocol: &str) -> bool {
    protocol == COOPERATIVE_STICKY
}

/// The consumer protocol's versions this client reads and writes.
const SUBSCRIPTION_VERSION: i16 = 1;
const MAX_KNOWN_VERSION: i16 = 3;

/// One member's subscription as the leader reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Member {
    pub id: String,
    pub topics: Vec<String>,
    /// What it owns now (cooperative protocols; v1+).
    pub owned: Vec<Tp>,
    /// The generation its `owned` is from (-1: unknown).
    pub generation: i32,
}

/// This member's subscription: v1, with the partitions it owns.
pub(crate) fn encode_subscription(topics: &[String], owned: &[Tp]) -> Bytes {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in owned {
        by_topic.entry(t.as_str()).or_default().push(*p);
    }
    let sub = ConsumerProtocolSubscription::default()
        .with_topics(
            topics
                .iter()
                .map(|t| StrBytes::from_string(t.clone()))
                .collect(),
        )
        .with_owned_partitions(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    kafka_protocol::messages::consumer_protocol_subscription::TopicPartition::default()
                        .with_topic(topic_name(t))
                        .with_partitions(ps)
                })
                .collect(),
        );
    let mut buf = BytesMut::new();
    buf.put_i16(SUBSCRIPTION_VERSION);
    // Cannot fail: every field set exists at v1.
    let _ = sub.encode(&mut buf, SUBSCRIPTION_VERSION);
    buf.freeze()
}

/// A member's subscription from its JoinGroup metadata: any version (one
/// newer than this client knows is read as the newest it knows: the
/// consumer protocol only appends fields).
///
/// # Errors
/// [`Error::Protocol`] for bytes that do not decode.
pub(crate) fn decode_subscription(id: &str, metadata: &Bytes) -> Result<Member> {
    let (version, mut body) = split_version(metadata, "subscription")?;
    let sub = ConsumerProtocolSubscription::decode(&mut body, version.min(MAX_KNOWN_VERSION))
        .map_err(|e| Error::protocol(format!("member {id}'s subscription: {e:#}")))?;
    Ok(Member {
        id: id.to_owned(),
        topics: sub.topics.iter().map(|t| t.to_string()).collect(),
        owned: sub
            .owned_partitions
            .iter()
            .flat_map(|tp| tp.partitions.iter().map(|p| (tp.topic.0.to_string(), *p)))
            .collect(),
        generation: if version >= 2 { sub.generation_id } else { -1 },
    })
}

/// An assignment as SyncGroup carries it (v0: partitions, no user data).
pub(crate) fn encode_assignment(parts: &[Tp]) -> Bytes {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in parts {
        by_topic.entry(t.as_str()).or_default().push(*p);
    }
    let a = ConsumerProtocolAssignment::default().with_assigned_partitions(
        by_topic
            .into_iter()
            .map(|(t, ps)| {
                kafka_protocol::messages::consumer_protocol_assignment::TopicPartition::default()
                    .with_topic(topic_name(t))
                    .with_partitions(ps)
            })
            .collect(),
    );
    let mut buf = BytesMut::new();
    buf.put_i16(0);
    let _ = a.encode(&mut buf, 0);
    buf.freeze()
}

/// The partitions of an assignment (empty bytes: none), by topic.
///
/// # Errors
/// [`Error::Protocol`] for bytes that do not decode.
pub(crate) fn decode_assignment(bytes: &Bytes) -> Result<Vec<(String, Vec<i32>)>> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let (version, mut body) = split_version(bytes, "assignment")?;
    let a = ConsumerProtocolAssignment::decode(&mut body, version.min(MAX_KNOWN_VERSION))
        .map_err(|e| Error::protocol(format!("assignment: {e:#}")))?;
    Ok(a.assigned_partitions
        .into_iter()
        .map(|tp| (tp.topic.0.to_string(), tp.partitions))
        .collect())
}

fn split_version(bytes: &Bytes, what: &str) -> Result<(i16, Bytes)> {
    let v = bytes
        .first_chunk::<2>()
        .map(|b| i16::from_be_bytes(*b))
        .ok_or_else(|| Error::protocol(format!("{what} of {} bytes", bytes.len())))?;
    if v < 0 {
        return Err(Error::protocol(format!("{what} version {v}")));
    }
    Ok((v, bytes.slice(2..)))
}

/// Runs `protocol` for `members` over topics with these partition counts
/// (topics missing from `counts` are skipped). Every member gets an entry.
pub(crate) fn assign(
    protocol: &str,
    members: &[Member],
    counts: &BTreeMap<String, i32>,
) -> BTreeMap<String, Vec<Tp>> {
    let mut out: BTreeMap<String, Vec<Tp>> =
        members.iter().map(|m| (m.id.clone(), Vec::new())).collect();
    match protocol {
        ROUNDROBIN => roundrobin(members, counts, &mut out),
        COOPERATIVE_STICKY => cooperative_sticky(members, counts, &mut out),
        _ => range(members, counts, &mut out),
    }
    for parts in out.values_mut() {
        parts.sort();
    }
    out
}

fn range(members: &[Member], counts: &BTreeMap<String, i32>, out: &mut BTreeMap<String, Vec<Tp>>) {
    for (topic, &n) in counts {
        let mut subs: Vec<&str> = members
            .iter()
            .filter(|m| m.topics.contains(topic))
            .map(|m| m.id.as_str())
            .collect();
        subs.sort_unstable();
        if subs.is_empty() || n <= 0 {
            continue;
        }
        let consumers = i32::try_from(subs.len()).unwrap_or(i32::MAX);
        let (each, extra) = (n / consumers, n % consumers);
        for (i, id) in (0..).zip(subs) {
            let start = each * i + i.min(extra);
            let len = each + i32::from(i < extra);
            if let Some(parts) = out.get_mut(id) {
                parts.extend((start..start + len).map(|p| (topic.clone(), p)));
            }
        }
    }
}

fn all_partitions(members: &[Member], counts: &BTreeMap<String, i32>) -> Vec<Tp> {
    let subscribed: BTreeSet<&String> = members.iter().flat_map(|m| m.topics.iter()).collect();
    counts
        .iter()
        .filter(|(t, _)| subscribed.contains(t))
        .flat_map(|(t, &n)| (0..n.max(0)).map(move |p| (t.clone(), p)))
        .collect()
}

fn roundrobin(
    members: &[Member],
    counts: &BTreeMap<String, i32>,
    out: &mut BTreeMap<String, Vec<Tp>>,
) {
    let mut ids: Vec<&Member> = members.iter().collect();
    ids.sort_by(|a, b| a.id.cmp(&b.id));
    if ids.is_empty() {
        return;
    }
    let mut next = 0usize;
    for tp in all_partitions(members, counts) {
        for k in 0..ids.len() {
            let m = ids[(next + k) % ids.len()];
            if m.topics.contains(&tp.0) {
                if let Some(parts) = out.get_mut(&m.id) {
                    parts.push(tp.clone());
                }
                next = (next + k + 1) % ids.len();
                break;
            }
        }
    }
}

fn cooperative_sticky(
    members: &[Member],
    counts: &BTreeMap<String, i32>,
    out: &mut BTreeMap<String, Vec<Tp>>,
) {
    let all: BTreeSet<Tp> = all_partitions(members, counts).into_iter().collect();
    let by_id: BTreeMap<&str, &Member> = members.iter().map(|m| (m.id.as_str(), m)).collect();
    // Who owns what now: a partition claimed twice goes to the claim of the
    // newest generation (then the lowest member id).
    let mut owner: BTreeMap<Tp, (&str, i32)> = BTreeMap::new();
    for m in members {
        for tp in &m.owned {
            if !all.contains(tp) || !m.topics.contains(&tp.0) {
                continue;
            }
            let better = owner.get(tp).is_none_or(|(id, g)| {
                m.generation > *g || (m.generation == *g && m.id.as_str() < *id)
            });
            if better {
                owner.insert(tp.clone(), (m.id.as_str(), m.generation));
            }
        }
    }
    let mut load: BTreeMap<&str, BTreeSet<Tp>> = members
        .iter()
        .map(|m| (m.id.as_str(), BTreeSet::new()))
        .collect();
    for (tp, (id, _)) in &owner {
        if let Some(s) = load.get_mut(id) {
            s.insert(tp.clone());
        }
    }
    // Members that hold more than their share give the excess back first,
    // so owned partitions never all stay with the first members.
    let total = all.len();
    let n = members.len().max(1);
    let ceil = total.div_ceil(n);
    for parts in load.values_mut() {
        while parts.len() > ceil {
            let Some(last) = parts.iter().next_back().cloned() else {
                break;
            };
            parts.remove(&last);
        }
    }
    let taken: BTreeSet<Tp> = load.values().flatten().cloned().collect();
    // The rest goes to the least loaded member subscribed to its topic.
    for tp in all.iter().filter(|tp| !taken.contains(*tp)) {
        let target = load
            .iter()
            .filter(|(id, _)| by_id.get(*id).is_some_and(|m| m.topics.contains(&tp.0)))
            .min_by(|a, b| a.1.len().cmp(&b.1.len()).then(a.0.cmp(b.0)))
            .map(|(id, _)| *id);
        if let Some(id) = target
            && let Some(s) = load.get_mut(id)
        {
            s.insert(tp.clone());
        }
    }
    // Balance: move from the most to the least loaded while they differ by
    // more than one and the least loaded can take one of its partitions.
    for _ in 0..=total {
        let mut order: Vec<(&str, usize)> = load.iter().map(|(id, s)| (*id, s.len())).collect();
        order.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let mut moved = false;
        'pairs: for &(from, hi) in &order {
            for &(to, lo) in order.iter().rev() {
                if hi <= lo + 1 {
                    break;
                }
                let Some(m) = by_id.get(to) else { continue };
                let candidate = load
                    .get(from)
                    .and_then(|s| s.iter().rev().find(|tp| m.topics.contains(&tp.0)).cloned());
                if let Some(tp) = candidate {
                    if let Some(s) = load.get_mut(from) {
                        s.remove(&tp);
                    }
                    if let Some(s) = load.get_mut(to) {
                        s.insert(tp);
                    }
                    moved = true;
                    break 'pairs;
                }
            }
        }
        if !moved {
            break;
        }
    }
    // Cooperative: a partition moving away from a member that owns it now is
    // assigned to nobody this generation (its owner revokes it first).
    for (id, parts) in load {
        let keep = parts.into_iter().filter(|tp| {
            owner
                .get(tp)
                .is_none_or(|(prev, _)| *prev == id || !by_id.contains_key(prev))
        });
        if let Some(o) = out.get_mut(id) {
            o.extend(keep);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, topics: &[&str], owned: &[(&str, i32)]) -> Member {
        Member {
            id: id.into(),
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
            owned: owned.iter().map(|(t, p)| ((*t).to_owned(), *p)).collect(),
            generation: 1,
        }
    }

    fn counts(ts: &[(&str, i32)]) -> BTreeMap<String, i32> {
        ts.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect()
    }

    fn parts(a: &BTreeMap<String, Vec<Tp>>, id: &str) -> Vec<i32> {
        a[id].iter().map(|(_, p)| *p).collect()
    }

    #[test]
    fn range_gives_consecutive_ranges_the_first_members_one_more() {
        let ms = [
            member("b", &["t"], &[]),
            member("a", &["t"], &[]),
            member("c", &["t"], &[]),
        ];
        let a = assign(RANGE, &ms, &counts(&[("t", 7)]));
        assert_eq!(parts(&a, "a"), [0, 1, 2]);
        assert_eq!(parts(&a, "b"), [3, 4]);
        assert_eq!(parts(&a, "c"), [5, 6]);
        // A topic only some subscribe to is split among those.
        let ms = [member("a", &["t", "u"], &[]), member("b", &["t"], &[])];
        let a = assign(RANGE, &ms, &counts(&[("t", 2), ("u", 2)]));
        assert_eq!(
            a["a"],
            [("t".to_owned(), 0), ("u".into(), 0), ("u".into(), 1)]
        );
        assert_eq!(a["b"], [("t".to_owned(), 1)]);
    }

    #[test]
    fn roundrobin_deals_partitions_in_turn() {
        let ms = [member("a", &["t"], &[]), member("b", &["t"], &[])];
        let a = assign(ROUNDROBIN, &ms, &counts(&[("t", 5)]));
        assert_eq!(parts(&a, "a"), [0, 2, 4]);
        assert_eq!(parts(&a, "b"), [1, 3]);
    }

    #[test]
    fn cooperative_sticky_keeps_owners_and_withholds_what_moves() {
        // a owned all four; b joins: a keeps two, the two that move to b are
        // withheld this generation (a revokes them), then given next time.
        let ms = [
            member("a", &["t"], &[("t", 0), ("t", 1), ("t", 2), ("t", 3)]),
            member("b", &["t"], &[]),
        ];
        let c = counts(&[("t", 4)]);
        let first = assign(COOPERATIVE_STICKY, &ms, &c);
        assert_eq!(parts(&first, "a"), [0, 1]);
        assert!(first["b"].is_empty(), "{first:?}");
        let ms = [
            member("a", &["t"], &[("t", 0), ("t", 1)]),
            member("b", &["t"], &[]),
        ];
        let second = assign(COOPERATIVE_STICKY, &ms, &c);
        assert_eq!(parts(&second, "a"), [0, 1]);
        assert_eq!(parts(&second, "b"), [2, 3]);
        // A member leaving: its partitions go to the others at once.
        let ms = [member("a", &["t"], &[("t", 0), ("t", 1)])];
        assert_eq!(
            parts(&assign(COOPERATIVE_STICKY, &ms, &c), "a"),
            [0, 1, 2, 3]
        );
        // Nobody owns anything: balanced.
        let ms = [
            member("x", &["t"], &[]),
            member("y", &["t"], &[]),
            member("z", &["t"], &[]),
        ];
        let a = assign(COOPERATIVE_STICKY, &ms, &counts(&[("t", 7)]));
        let mut sizes: Vec<usize> = a.values().map(Vec::len).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, [2, 2, 3]);
    }

    #[test]
    fn every_partition_once_and_balanced_for_any_membership() {
        use proptest::prelude::*;
        proptest!(ProptestConfig::with_cases(64), |(n in 1usize..6, parts_n in 0i32..20, owned_seed in proptest::collection::vec(0usize..6, 0..20))| {
            let c = counts(&[("t", parts_n)]);
            let ms: Vec<Member> = (0..n).map(|i| Member {
                id: format!("m{i}"),
                topics: vec!["t".into()],
                owned: owned_seed.iter().enumerate().filter(|(_, o)| **o == i).map(|(p, _)| ("t".to_owned(), i32::try_from(p).unwrap())).collect(),
                generation: 1,
            }).collect();
            for proto in [RANGE, ROUNDROBIN, COOPERATIVE_STICKY] {
                let a = assign(proto, &ms, &c);
                let mut seen: Vec<&Tp> = a.values().flatten().collect();
                let count = seen.len();
                seen.sort();
                seen.dedup();
                prop_assert_eq!(seen.len(), count, "{} assigned a partition twice", proto);
                if proto != COOPERATIVE_STICKY {
                    prop_assert_eq!(count, usize::try_from(parts_n).unwrap());
                    let max = a.values().map(Vec::len).max().unwrap_or(0);
                    let min = a.values().map(Vec::len).min().unwrap_or(0);
                    prop_assert!(max - min <= 1);
                }
            }
            // Cooperative, run again with what it assigned as owned: complete and balanced.
            let first = assign(COOPERATIVE_STICKY, &ms, &c);
            let again: Vec<Member> = ms.iter().map(|m| Member { owned: first[&m.id].clone(), ..m.clone() }).collect();
            let second = assign(COOPERATIVE_STICKY, &again, &c);
            prop_assert_eq!(second.values().map(Vec::len).sum::<usize>(), usize::try_from(parts_n).unwrap());
            let max = second.values().map(Vec::len).max().unwrap_or(0);
            let min = second.values().map(Vec::len).min().unwrap_or(0);
            prop_assert!(max - min <= 1, "{:?}", second);
            for m in &again {
                for tp in &m.owned {
                    prop_assert!(second[&m.id].contains(tp) || max - min <= 1);
                }
            }
        });
    }

    #[test]
    fn subscriptions_and_assignments_round_trip() {
        let b = encode_subscription(&["t".into(), "u".into()], &[("t".into(), 3)]);
        let m = decode_subscription("m1", &b).unwrap();
        assert_eq!(m.topics, ["t", "u"]);
        assert_eq!(m.owned, [("t".to_owned(), 3)]);
        let a = encode_assignment(&[("t".into(), 1), ("t".into(), 0), ("u".into(), 2)]);
        assert_eq!(
            decode_assignment(&a).unwrap(),
            [("t".to_owned(), vec![1, 0]), ("u".to_owned(), vec![2])]
        );
        assert!(decode_assignment(&Bytes::new()).unwrap().is_empty());
        assert!(decode_subscription("x", &Bytes::from_static(&[0])).is_err());
        for cut in 0..b.len() {
            let _ = decode_subscription("x", &b.slice(..cut));
        }
        assert_eq!(protocols("").unwrap(), [RANGE, COOPERATIVE_STICKY]);
        assert_eq!(
            protocols("sticky,range").unwrap(),
            [COOPERATIVE_STICKY, RANGE]
        );
        assert!(protocols("foo").is_err());
    }
}

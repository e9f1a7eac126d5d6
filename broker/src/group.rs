//! The consumer-group coordinator: a state machine per group, with time
//! passed in (`now_ms`) so rebalances and session expiry are tested without
//! sleeping.
//!
//! States: `Empty` (no members), `PreparingRebalance` (waiting for the known
//! members to rejoin, until a deadline), `Stable` (a generation with an
//! assignment). A JOIN_GROUP parks its responder `R` until the rebalance
//! completes; every operation returns the responses that became ready.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use flume_protocol::ErrorCode;

use crate::domain::{Joined, TopicAssignment};

/// How partitions are spread over members.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Assignor {
    /// Per topic, consecutive ranges of partitions to members sorted by id.
    Range,
    /// Every (topic, partition), sorted, dealt to members in turn.
    RoundRobin,
    /// Balanced like range, but a member keeps its partitions across
    /// rebalances where it can: when one member leaves only its partitions
    /// (and few others) move (see `sticky_topic`). The default.
    #[default]
    Sticky,
}

impl Assignor {
    /// Parses the JOIN_GROUP assignor string ("" means sticky, the default).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "" | "sticky" => Some(Assignor::Sticky),
            "range" => Some(Assignor::Range),
            "roundrobin" => Some(Assignor::RoundRobin),
            _ => None,
        }
    }
}

/// A member's subscription for assignment.
#[derive(Debug, Clone)]
pub struct Subscription {
    /// Member id.
    pub member: String,
    /// Topics.
    pub topics: Vec<String>,
}

/// Computes an assignment: member -> topic -> partitions. Deterministic.
pub fn assign(
    assignor: Assignor,
    subs: &[Subscription],
    partitions_of: &dyn Fn(&str) -> u32,
) -> BTreeMap<String, BTreeMap<String, Vec<i32>>> {
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
                for (member, parts) in sticky_topic(topic, &members, partitions_of(topic)) {
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
/// when a member leaves, the others keep what they had (only the leaver's
/// partitions, and the few a change of the shares moves, go elsewhere), and
/// a member that joins takes about its share, from everyone. The coordinator
/// needs no memory of the previous assignment for this.
fn sticky_topic<'a>(topic: &str, members: &[&'a str], n: u32) -> BTreeMap<&'a str, Vec<i32>> {
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
    // 1. Every partition to its favourite member.
    let mut owned: Vec<Vec<u32>> = vec![Vec::new(); m];
    for p in 0..n {
        if let Some(best) = (0..m).max_by_key(|&i| pscore(p, i)) {
            owned[best].push(p);
        }
    }
    // 2. Members above their share give up what they prefer least.
    let mut released = Vec::new();
    for (i, parts) in owned.iter_mut().enumerate() {
        if parts.len() > cap[i] {
            parts.sort_unstable_by_key(|&p| std::cmp::Reverse(pscore(p, i)));
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

/// A join to start.
#[derive(Debug, Clone)]
pub struct JoinParams {
    /// Member id, empty on first join.
    pub member_id: String,
    /// Subscribed topics.
    pub topics: Vec<String>,
    /// Session timeout.
    pub session_timeout_ms: u64,
    /// Rebalance timeout.
    pub rebalance_timeout_ms: u64,
    /// Assignor requested.
    pub assignor: Assignor,
    /// Caps on groups and members the join must fit in.
    pub limits: GroupLimits,
}

/// Caps on the coordinator's state, so its memory follows the configuration,
/// not the peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupLimits {
    /// Most groups with members or parked joins.
    pub max_groups: usize,
    /// Most members of one group.
    pub max_members: usize,
}

impl Default for GroupLimits {
    fn default() -> Self {
        GroupLimits {
            max_groups: usize::MAX,
            max_members: usize::MAX,
        }
    }
}

#[derive(Debug)]
struct Member {
    topics: Vec<String>,
    session_timeout_ms: u64,
    rebalance_timeout_ms: u64,
    last_seen: u64,
    joined_at: u64,
}

/// The state of one group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    /// No members.
    Empty,
    /// Waiting for members to rejoin until `deadline` (ms).
    PreparingRebalance {
        /// When the rebalance completes regardless.
        deadline: u64,
    },
    /// A generation is in force.
    Stable,
}

#[derive(Debug)]
struct Group<R> {
    state: GroupState,
    generation: i32,
    members: BTreeMap<String, Member>,
    pending: BTreeMap<String, R>,
    assignor: Assignor,
    assignment: BTreeMap<String, BTreeMap<String, Vec<i32>>>,
    leader: String,
    /// Rebalances started, for metrics.
    rebalances: u64,
}

impl<R> Group<R> {
    fn new() -> Self {
        Group {
            state: GroupState::Empty,
            generation: 0,
            members: BTreeMap::new(),
            pending: BTreeMap::new(),
            assignor: Assignor::Range,
            assignment: BTreeMap::new(),
            leader: String::new(),
            rebalances: 0,
        }
    }
}

/// A response that became ready: send `result` to `responder`.
pub type Ready<R> = (R, Result<Joined, ErrorCode>);

/// Every group, keyed by group id.
#[derive(Debug)]
pub struct Coordinator<R> {
    groups: HashMap<String, Group<R>>,
    seq: u64,
    nonce: u64,
}

impl<R> Coordinator<R> {
    /// A coordinator; `nonce` makes member ids unique across broker restarts.
    pub fn new(nonce: u64) -> Self {
        Coordinator {
            groups: HashMap::new(),
            seq: 0,
            nonce,
        }
    }

    /// Every group's state, generation, members and rebalances, by group id.
    pub fn summaries(&self) -> Vec<crate::metrics::GroupSummary> {
        let mut v: Vec<_> = self
            .groups
            .iter()
            .map(|(id, g)| crate::metrics::GroupSummary {
                group: id.clone(),
                state: match g.state {
                    GroupState::Empty => "empty",
                    GroupState::PreparingRebalance { .. } => "preparing_rebalance",
                    GroupState::Stable => "stable",
                },
                generation: g.generation,
                members: g.members.len(),
                rebalances: g.rebalances,
            })
            .collect();
        v.sort_by(|a, b| a.group.cmp(&b.group));
        v
    }

    /// The state of a group, if it exists.
    pub fn state(&self, group: &str) -> Option<(GroupState, i32, usize)> {
        self.groups
            .get(group)
            .map(|g| (g.state, g.generation, g.members.len()))
    }

    /// Handles JOIN_GROUP. The responder parks until the rebalance completes.
    pub fn join(
        &mut self,
        group: &str,
        p: JoinParams,
        now: u64,
        responder: R,
        partitions_of: &dyn Fn(&str) -> u32,
    ) -> Vec<Ready<R>> {
        if !self.groups.contains_key(group) {
            if !p.member_id.is_empty() {
                return vec![(responder, Err(ErrorCode::UnknownMember))];
            }
            // Groups without members are dropped at the next tick; only live ones count.
            let live = self
                .groups
                .values()
                .filter(|g| !(g.members.is_empty() && g.pending.is_empty()))
                .count();
            if live >= p.limits.max_groups {
                tracing::warn!(
                    group,
                    max_groups = p.limits.max_groups,
                    "join refused: the broker has max_groups ({}) groups",
                    p.limits.max_groups
                );
                return vec![(responder, Err(ErrorCode::LimitReached))];
            }
        }
        let g = self
            .groups
            .entry(group.to_owned())
            .or_insert_with(Group::new);
        if !p.member_id.is_empty() && !g.members.contains_key(&p.member_id) {
            return vec![(responder, Err(ErrorCode::UnknownMember))];
        }
        if p.member_id.is_empty() && g.members.len() >= p.limits.max_members {
            tracing::warn!(
                group,
                max_members_per_group = p.limits.max_members,
                "join refused: the group has max_members_per_group ({}) members",
                p.limits.max_members
            );
            return vec![(responder, Err(ErrorCode::LimitReached))];
        }
        let id = if p.member_id.is_empty() {
            self.seq += 1;
            format!("member-{:x}-{}", self.nonce, self.seq)
        } else {
            p.member_id.clone()
        };
        let mut ready = Vec::new();
        let known = g.members.get(&id).map(|m| (m.topics.clone(), m.joined_at));
        // A member that rejoins with the same subscription while the group is
        // stable just gets its current assignment back.
        if g.state == GroupState::Stable {
            if let Some((topics, _)) = &known {
                if *topics == p.topics {
                    if let Some(m) = g.members.get_mut(&id) {
                        m.last_seen = now;
                    }
                    let resp = response(g, &id);
                    return vec![(responder, Ok(resp))];
                }
            }
        }
        g.members.insert(
            id.clone(),
            Member {
                topics: p.topics,
                session_timeout_ms: p.session_timeout_ms,
                rebalance_timeout_ms: p.rebalance_timeout_ms,
                last_seen: now,
                joined_at: known.map_or(now, |k| k.1),
            },
        );
        g.assignor = p.assignor;
        if let Some(old) = g.pending.insert(id, responder) {
            ready.push((old, Err(ErrorCode::RebalanceInProgress)));
        }
        if !matches!(g.state, GroupState::PreparingRebalance { .. }) {
            start_rebalance(g, now);
        }
        ready.extend(try_complete(g, now, false, partitions_of));
        ready
    }

    /// When a member was last heard from (join or heartbeat), if it is one.
    pub fn last_seen(&self, group: &str, member: &str) -> Option<u64> {
        self.groups
            .get(group)
            .and_then(|g| g.members.get(member))
            .map(|m| m.last_seen)
    }

    /// Handles HEARTBEAT.
    ///
    /// # Errors
    /// UNKNOWN_MEMBER, REBALANCE_IN_PROGRESS (rejoin), ILLEGAL_GENERATION.
    pub fn heartbeat(
        &mut self,
        group: &str,
        member: &str,
        generation: i32,
        now: u64,
    ) -> Result<(), ErrorCode> {
        let g = self.groups.get_mut(group).ok_or(ErrorCode::UnknownMember)?;
        let m = g.members.get_mut(member).ok_or(ErrorCode::UnknownMember)?;
        m.last_seen = now;
        if matches!(g.state, GroupState::PreparingRebalance { .. }) {
            return Err(ErrorCode::RebalanceInProgress);
        }
        if generation != g.generation {
            return Err(ErrorCode::IllegalGeneration);
        }
        Ok(())
    }

    /// Handles LEAVE_GROUP: the member goes at once and the others rebalance.
    ///
    /// # Errors
    /// UNKNOWN_MEMBER.
    pub fn leave(
        &mut self,
        group: &str,
        member: &str,
        now: u64,
        partitions_of: &dyn Fn(&str) -> u32,
    ) -> Result<Vec<Ready<R>>, ErrorCode> {
        let g = self.groups.get_mut(group).ok_or(ErrorCode::UnknownMember)?;
        if g.members.remove(member).is_none() {
            return Err(ErrorCode::UnknownMember);
        }
        tracing::info!(group, member, "member left");
        let mut ready = Vec::new();
        if let Some(r) = g.pending.remove(member) {
            ready.push((r, Err(ErrorCode::UnknownMember)));
        }
        ready.extend(after_removal(g, now, partitions_of));
        Ok(ready)
    }

    /// Checks that a member may commit offsets. Generation -1 with an empty
    /// member id is allowed only while the group has no members.
    ///
    /// # Errors
    /// UNKNOWN_MEMBER, ILLEGAL_GENERATION.
    pub fn check_commit(
        &self,
        group: &str,
        member: &str,
        generation: i32,
    ) -> Result<(), ErrorCode> {
        let g = self.groups.get(group);
        if generation == -1 && member.is_empty() {
            return match g {
                Some(g) if !g.members.is_empty() => Err(ErrorCode::RebalanceInProgress),
                _ => Ok(()),
            };
        }
        let g = g.ok_or(ErrorCode::UnknownMember)?;
        if !g.members.contains_key(member) {
            return Err(ErrorCode::UnknownMember);
        }
        if generation != g.generation {
            return Err(ErrorCode::IllegalGeneration);
        }
        Ok(())
    }

    /// Expires silent members and completes rebalances past their deadline.
    pub fn tick(&mut self, now: u64, partitions_of: &dyn Fn(&str) -> u32) -> Vec<Ready<R>> {
        let mut ready = Vec::new();
        for (name, g) in &mut self.groups {
            let expired: Vec<String> = g
                .members
                .iter()
                .filter(|(id, m)| {
                    !g.pending.contains_key(*id)
                        && now.saturating_sub(m.last_seen) > m.session_timeout_ms
                })
                .map(|(id, _)| id.clone())
                .collect();
            for id in &expired {
                g.members.remove(id);
                tracing::info!(group = %name, member = %id, "session expired; member removed");
            }
            if !expired.is_empty() {
                ready.extend(after_removal(g, now, partitions_of));
            }
            if let GroupState::PreparingRebalance { deadline } = g.state {
                if now >= deadline {
                    ready.extend(try_complete(g, now, true, partitions_of));
                }
            }
        }
        // Empty groups hold no state worth keeping (their offsets live in the offset
        // store), so memory follows the live groups, not every name ever used.
        self.groups
            .retain(|_, g| !(g.members.is_empty() && g.pending.is_empty()));
        ready
    }

    /// Answers every parked join with `code` (shutdown).
    pub fn drain(&mut self, code: ErrorCode) -> Vec<Ready<R>> {
        self.groups
            .values_mut()
            .flat_map(|g| {
                std::mem::take(&mut g.pending)
                    .into_values()
                    .map(|r| (r, Err(code)))
            })
            .collect()
    }
}

fn start_rebalance<R>(g: &mut Group<R>, now: u64) {
    g.rebalances += 1;
    let timeout = g
        .members
        .values()
        .map(|m| m.rebalance_timeout_ms)
        .max()
        .unwrap_or(0);
    g.state = GroupState::PreparingRebalance {
        deadline: now.saturating_add(timeout),
    };
}

fn after_removal<R>(
    g: &mut Group<R>,
    now: u64,
    partitions_of: &dyn Fn(&str) -> u32,
) -> Vec<Ready<R>> {
    if g.members.is_empty() {
        g.state = GroupState::Empty;
        g.assignment.clear();
        return Vec::new();
    }
    if !matches!(g.state, GroupState::PreparingRebalance { .. }) {
        start_rebalance(g, now);
    }
    try_complete(g, now, false, partitions_of)
}

/// Completes the rebalance when every known member has rejoined, or when
/// `force` (deadline passed): members that did not rejoin are dropped.
fn try_complete<R>(
    g: &mut Group<R>,
    _now: u64,
    force: bool,
    partitions_of: &dyn Fn(&str) -> u32,
) -> Vec<Ready<R>> {
    let all_joined = g.members.keys().all(|id| g.pending.contains_key(id));
    if !all_joined && !force {
        return Vec::new();
    }
    let missing: Vec<String> = g
        .members
        .keys()
        .filter(|id| !g.pending.contains_key(*id))
        .cloned()
        .collect();
    for id in missing {
        tracing::info!(member = %id, "member did not rejoin before the rebalance timeout; removed");
        g.members.remove(&id);
    }
    if g.members.is_empty() {
        g.state = GroupState::Empty;
        g.assignment.clear();
        return Vec::new();
    }
    g.generation = g.generation.wrapping_add(1).max(1);
    let subs: Vec<Subscription> = g
        .members
        .iter()
        .map(|(id, m)| Subscription {
            member: id.clone(),
            topics: m.topics.clone(),
        })
        .collect();
    g.assignment = assign(g.assignor, &subs, partitions_of);
    g.leader = g
        .members
        .iter()
        .min_by_key(|(id, m)| (m.joined_at, (*id).clone()))
        .map(|(id, _)| id.clone())
        .unwrap_or_default();
    g.state = GroupState::Stable;
    tracing::info!(
        generation = g.generation,
        members = g.members.len(),
        "rebalance complete"
    );
    let pending = std::mem::take(&mut g.pending);
    pending
        .into_iter()
        .map(|(id, r)| (r, Ok(response(g, &id))))
        .collect()
}

fn response<R>(g: &Group<R>, id: &str) -> Joined {
    Joined {
        generation: g.generation,
        member_id: id.to_owned(),
        leader_id: g.leader.clone(),
        members: g.members.keys().cloned().collect(),
        assignment: g
            .assignment
            .get(id)
            .map(|a| {
                a.iter()
                    .map(|(t, p)| TopicAssignment {
                        topic: t.clone(),
                        partitions: p.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests;

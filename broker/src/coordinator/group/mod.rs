//! The consumer-group coordinator: a state machine per group, with time
//! passed in (`now_ms`) so rebalances and session expiry are tested without
//! sleeping.
//!
//! Two modes, chosen by a group's first member and kept while it has
//! members (a member of the other mode is refused with
//! [`GroupError::InconsistentProtocol`]):
//! - broker-assigned (Flume's protocol): the coordinator spreads the
//!   partitions with an [`Assignor`] when the rebalance completes;
//! - client-assigned (Kafka's protocol): the coordinator picks a protocol
//!   every member supports, hands the leader every member's metadata, and the
//!   leader's SyncGroup brings everyone's assignment.
//!
//! Both share generations, fencing, session expiry and rebalance timeouts.
//!
//! Client-assigned members may be static (Kafka's KIP-345, see
//! `statics.rs`): a member with a group instance id that comes back under a
//! new member id takes the old one's place and assignment, without a
//! rebalance while the group is stable, and fences the old one
//! ([`GroupError::FencedInstanceId`]); a rebalance's deadline does not remove
//! a static member that has not rejoined (its session does).
//!
//! States: `Empty` (no members), `PreparingRebalance` (waiting for the known
//! members to rejoin, until a deadline), `CompletingRebalance` (client-
//! assigned only: waiting for the leader's SyncGroup, until a deadline),
//! `Stable` (a generation with an assignment). A JOIN_GROUP (and a SyncGroup
//! waiting for the leader's) parks its responder `R` until the step
//! completes; every operation returns the responses that became ready.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use flume_protocol::ErrorCode;

use crate::coordinator::assignor::{assign_from, Subscription};
use crate::domain::{
    Assignor, ClientJoined, GroupDescription, GroupError, GroupListing, GroupPhase, Joined,
    JoinedMember, MemberAssignment, MemberDescription, Synced, TopicAssignment,
    BROKER_ASSIGNED_PROTOCOL_TYPE,
};

mod client_join;
mod statics;

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

/// A join to a client-assigned group (Kafka's JoinGroup): the member's
/// request, its timeouts already checked by the engine (the session within
/// the broker's `group.min/max.session.timeout.ms`, the rebalance at most 5 min).
#[derive(Debug, Clone)]
pub struct ClientJoinParams {
    /// The request (its `group` is the one joined).
    pub join: crate::domain::ClientJoinSpec,
    /// Caps on groups and members the join must fit in.
    pub limits: GroupLimits,
}

impl ClientJoinParams {
    fn session_timeout_ms(&self) -> u64 {
        u64::try_from(self.join.session_timeout.as_millis()).unwrap_or(u64::MAX)
    }

    fn rebalance_timeout_ms(&self) -> u64 {
        u64::try_from(self.join.rebalance_timeout.as_millis()).unwrap_or(u64::MAX)
    }
}

/// The group a join goes to: created if new, due for a check at the next tick.
fn join_target<'a, R>(groups: &'a mut HashMap<String, Group<R>>, group: &str) -> &'a mut Group<R> {
    let g = groups.entry(group.to_owned()).or_insert_with(Group::new);
    g.check_at = 0;
    g
}

/// Caps on the coordinator's state, so its memory follows the configuration,
/// not the peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupLimits {
    /// Most groups with members or parked joins.
    pub max_groups: usize,
    /// Most members of one group.
    pub max_members: usize,
    /// Most bytes of protocol metadata and assignments that client-assigned
    /// members hold, over all groups (the peers choose those sizes).
    pub max_client_bytes: usize,
    /// How long a client-assigned group that had no members waits for more
    /// to join before it forms its first generation (Kafka's
    /// `group.initial.rebalance.delay.ms`); each member that joins meanwhile
    /// extends the wait by as much, up to the rebalance timeout. 0: none.
    pub initial_rebalance_delay_ms: u64,
}

impl Default for GroupLimits {
    fn default() -> Self {
        GroupLimits {
            max_groups: usize::MAX,
            max_members: usize::MAX,
            max_client_bytes: usize::MAX,
            initial_rebalance_delay_ms: 0,
        }
    }
}

/// What a client-assigned member brings: who it is, what it supports, what
/// the leader gave it.
#[derive(Debug, Clone, Default)]
struct ClientMember {
    client_id: String,
    client_host: String,
    /// The group instance id of a static member.
    instance: Option<String>,
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    partitions: Vec<TopicAssignment>,
}

impl ClientMember {
    /// What the member's peer-chosen data costs (its budget share).
    fn bytes(&self) -> usize {
        self.client_id.len()
            + self.client_host.len()
            + self.instance.as_ref().map_or(0, String::len)
            + self
                .protocols
                .iter()
                .map(|(n, md)| n.len() + md.len())
                .sum::<usize>()
            + self.assignment.len()
            + self
                .partitions
                .iter()
                .map(|t| t.topic.len() + 4 * t.partitions.len())
                .sum::<usize>()
    }
}

#[derive(Debug)]
struct Member {
    topics: Vec<String>,
    session_timeout_ms: u64,
    rebalance_timeout_ms: u64,
    last_seen: u64,
    joined_at: u64,
    /// Join order (the leader of a client-assigned group is the earliest).
    seq: u64,
    /// Client-assigned groups only.
    client: Option<ClientMember>,
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
    /// Client-assigned groups: the generation is formed, waiting for the
    /// leader's SyncGroup until `deadline` (ms); members that have not sent
    /// their SyncGroup by then are removed and the group rebalances.
    CompletingRebalance {
        /// When the members that have not synced are removed.
        deadline: u64,
    },
    /// A generation is in force.
    Stable,
}

impl GroupState {
    fn phase(self) -> GroupPhase {
        match self {
            GroupState::Empty => GroupPhase::Empty,
            GroupState::PreparingRebalance { .. } => GroupPhase::PreparingRebalance,
            GroupState::CompletingRebalance { .. } => GroupPhase::CompletingRebalance,
            GroupState::Stable => GroupPhase::Stable,
        }
    }
}

/// Who assigns a group's partitions. A group takes the mode of its first
/// member and keeps it while it has members.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    /// The coordinator, with an [`Assignor`] (Flume's protocol).
    Broker,
    /// The leader, through SyncGroup (Kafka's protocol).
    Client {
        /// Every member's protocol type.
        protocol_type: String,
    },
}

/// A parked request: a join or (client-assigned groups) a sync.
#[derive(Debug)]
struct Parked<R> {
    responder: R,
}

#[derive(Debug)]
struct Group<R> {
    state: GroupState,
    generation: i32,
    members: BTreeMap<String, Member>,
    pending: BTreeMap<String, Parked<R>>,
    assignor: Assignor,
    assignment: BTreeMap<String, BTreeMap<String, Vec<i32>>>,
    leader: String,
    /// Rebalances started, for metrics.
    rebalances: u64,
    mode: Mode,
    /// Client-assigned: the generation's protocol.
    protocol: String,
    /// Client-assigned: parked SyncGroups (CompletingRebalance only).
    syncs: BTreeMap<String, Parked<R>>,
    /// Client-assigned: members that have not sent SyncGroup this generation.
    unsynced: BTreeSet<String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, not joined yet, and
    /// when they lapse (ms).
    new_ids: BTreeMap<String, u64>,
    /// Static members: group instance id -> member id, one entry per member
    /// whose `ClientMember::instance` is set (kept so by `remove_member`).
    statics: BTreeMap<String, String>,
    /// Bytes its client-assigned members hold (see [`ClientMember::bytes`]);
    /// recounted after every change of this group's members or assignments.
    held: usize,
    /// Notified when a rebalance starts or a member is removed: wakes the
    /// members' waiting heartbeats (HEARTBEAT_WAIT), which then answer.
    changed: event_listener::Event,
    /// The earliest time (ms) the tick has anything to do here: a session
    /// that may lapse, a rebalance or sync deadline, a handed-out id to drop
    /// (see [`Group::next_check`]); 0 after any change but a heartbeat. A
    /// heartbeat only moves a session's end later, so this stays a safe lower
    /// bound without being touched on the hot path, and the tick skips the
    /// group until then: its work per tick follows the groups with something
    /// due, not every member of every group.
    check_at: u64,
    /// A client-assigned group forming from empty: its first generation is
    /// not formed before `until` (ms), which each new member moves later by
    /// the initial delay, never past `cap` (the rebalance's deadline).
    initial: Option<InitialDelay>,
}

/// The initial rebalance delay of a forming group ([`GroupLimits::initial_rebalance_delay_ms`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct InitialDelay {
    until: u64,
    cap: u64,
    delay: u64,
}

impl<R> Group<R> {
    /// How long a rebalance waits: the longest of the members' rebalance
    /// timeouts (0 without members).
    fn rebalance_timeout(&self) -> u64 {
        self.members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0)
    }

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
            mode: Mode::Broker,
            protocol: String::new(),
            syncs: BTreeMap::new(),
            unsynced: BTreeSet::new(),
            new_ids: BTreeMap::new(),
            statics: BTreeMap::new(),
            held: 0,
            changed: event_listener::Event::new(),
            check_at: 0,
            initial: None,
        }
    }

    /// When the tick next has something to do in this group, as of its
    /// current members, state and handed-out ids: the first moment a session
    /// could have lapsed (`now - last_seen > session_timeout`), the state's
    /// deadline, the first moment a handed-out id is past its lapse.
    fn next_check(&self) -> u64 {
        let sessions = self.members.values().map(|m| {
            m.last_seen
                .saturating_add(m.session_timeout_ms)
                .saturating_add(1)
        });
        let ids = self.new_ids.values().map(|lapse| lapse.saturating_add(1));
        let state = match self.state {
            GroupState::PreparingRebalance { deadline }
            | GroupState::CompletingRebalance { deadline } => deadline,
            GroupState::Empty | GroupState::Stable => u64::MAX,
        };
        let initial = self.initial.map_or(u64::MAX, |i| i.until);
        sessions.chain(ids).fold(state.min(initial), u64::min)
    }

    fn recount(&mut self) {
        self.held = self
            .members
            .values()
            .filter_map(|m| m.client.as_ref())
            .map(ClientMember::bytes)
            .sum();
    }

    /// No members, nothing parked, no member id handed out: nothing to keep.
    fn is_idle(&self) -> bool {
        self.members.is_empty()
            && self.pending.is_empty()
            && self.syncs.is_empty()
            && self.new_ids.is_empty()
    }

    fn is_client(&self) -> bool {
        matches!(self.mode, Mode::Client { .. })
    }

    fn protocol_type(&self) -> String {
        match &self.mode {
            Mode::Broker => BROKER_ASSIGNED_PROTOCOL_TYPE.to_owned(),
            Mode::Client { protocol_type } => protocol_type.clone(),
        }
    }
}

/// What a parked or immediate request gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A broker-assigned join completed.
    Joined(Joined),
    /// A client-assigned join completed.
    ClientJoined(ClientJoined),
    /// A SyncGroup completed.
    Synced(Synced),
}

/// A response that became ready: send `result` to `responder`.
pub type Ready<R> = (R, Result<Answer, GroupError>);

/// Whether a group of `members` (members and ids handed out) has room for
/// no new one; a refusal is logged with the limit and its value.
fn is_full(group: &str, members: usize, limits: &GroupLimits) -> bool {
    let full = members >= limits.max_members;
    if full {
        tracing::warn!(
            group,
            max_members_per_group = limits.max_members,
            "join refused: the group has max_members_per_group ({}) members",
            limits.max_members
        );
    }
    full
}

fn fail<R>(r: R, code: ErrorCode) -> Ready<R> {
    (r, Err(GroupError::Code(code)))
}

/// Removes a member and what refers to it: its place among the members that
/// owe a SyncGroup and its instance id. Its parked requests are the caller's.
fn remove_member<R>(g: &mut Group<R>, id: &str) -> Option<Member> {
    let m = g.members.remove(id)?;
    g.unsynced.remove(id);
    if let Some(i) = m.client.as_ref().and_then(|c| c.instance.as_ref()) {
        if g.statics.get(i).is_some_and(|cur| cur == id) {
            g.statics.remove(i);
        }
    }
    Some(m)
}

/// Every group, keyed by group id.
#[derive(Debug)]
pub struct Coordinator<R> {
    groups: HashMap<String, Group<R>>,
    seq: u64,
    nonce: u64,
    /// Heartbeats waiting (HEARTBEAT_WAIT), over all groups.
    parked_heartbeats: usize,
    /// Groups the last [`Coordinator::tick`] looked into (tests, metrics).
    last_tick_checked: usize,
}

impl<R> Coordinator<R> {
    /// A coordinator; `nonce` makes member ids unique across broker restarts.
    pub fn new(nonce: u64) -> Self {
        Coordinator {
            groups: HashMap::new(),
            seq: 0,
            nonce,
            parked_heartbeats: 0,
            last_tick_checked: 0,
        }
    }

    /// Heartbeats waiting now (HEARTBEAT_WAIT), over all groups.
    pub fn parked_heartbeats(&self) -> usize {
        self.parked_heartbeats
    }

    /// Takes one of `limit` places for a waiting heartbeat; false when all
    /// are taken (the heartbeat is then answered at once).
    pub fn park_heartbeat(&mut self, limit: usize) -> bool {
        if self.parked_heartbeats >= limit {
            return false;
        }
        self.parked_heartbeats += 1;
        true
    }

    /// Gives back a place taken with [`Coordinator::park_heartbeat`].
    pub fn unpark_heartbeat(&mut self) {
        self.parked_heartbeats = self.parked_heartbeats.saturating_sub(1);
    }

    /// Every group's state, generation, members and rebalances, by group id.
    pub fn summaries(&self) -> Vec<crate::domain::GroupSummary> {
        let mut v: Vec<_> = self
            .groups
            .iter()
            .map(|(id, g)| crate::domain::GroupSummary {
                group: id.clone(),
                state: match g.state {
                    GroupState::Empty => "empty",
                    GroupState::PreparingRebalance { .. } => "preparing_rebalance",
                    GroupState::CompletingRebalance { .. } => "completing_rebalance",
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

    /// A group's state, protocol, generation and members with their
    /// assignments; `None` if the coordinator does not know it.
    pub fn describe(&self, group: &str) -> Option<GroupDescription> {
        let g = self.groups.get(group)?;
        let members = g
            .members
            .iter()
            .map(|(id, m)| match &m.client {
                Some(c) => MemberDescription {
                    member_id: id.clone(),
                    group_instance_id: c.instance.clone(),
                    client_id: c.client_id.clone(),
                    client_host: c.client_host.clone(),
                    topics: m.topics.clone(),
                    metadata: c
                        .protocols
                        .iter()
                        .find(|(p, _)| *p == g.protocol)
                        .map(|(_, md)| md.clone())
                        .unwrap_or_default(),
                    assignment_bytes: c.assignment.clone(),
                    assignment: c.partitions.clone(),
                },
                None => MemberDescription {
                    member_id: id.clone(),
                    group_instance_id: None,
                    client_id: String::new(),
                    client_host: String::new(),
                    topics: m.topics.clone(),
                    metadata: Bytes::new(),
                    assignment_bytes: Bytes::new(),
                    assignment: broker_assignment(g, id),
                },
            })
            .collect();
        Some(GroupDescription {
            group: group.to_owned(),
            phase: g.state.phase(),
            // An empty group keeps its protocol type, as Kafka's does.
            protocol_type: g.protocol_type(),
            protocol: if g.members.is_empty() {
                String::new()
            } else if g.is_client() {
                g.protocol.clone()
            } else {
                format!("{:?}", g.assignor).to_lowercase()
            },
            generation: g.generation,
            leader_id: if g.members.is_empty() {
                String::new()
            } else {
                g.leader.clone()
            },
            members,
        })
    }

    /// Every group the coordinator knows (with members, parked requests or
    /// member ids handed out), sorted by name.
    pub fn list(&self) -> Vec<GroupListing> {
        let mut v: Vec<GroupListing> = self
            .groups
            .iter()
            .map(|(id, g)| GroupListing {
                group: id.clone(),
                phase: g.state.phase(),
                protocol_type: g.protocol_type(),
            })
            .collect();
        v.sort_by(|a, b| a.group.cmp(&b.group));
        v
    }

    /// Bytes client-assigned members hold over all groups.
    fn held(&self) -> usize {
        self.groups.values().map(|g| g.held).sum()
    }

    /// Whether a join may go on as far as the group goes: a group that does
    /// not exist yet is made only for a new member (an id it never gave out
    /// is UNKNOWN_MEMBER_ID) and only under `max_groups` live groups.
    fn admit_group(
        &self,
        group: &str,
        member_id: &str,
        limits: &GroupLimits,
    ) -> Result<(), ErrorCode> {
        if self.groups.contains_key(group) {
            return Ok(());
        }
        if !member_id.is_empty() {
            return Err(ErrorCode::UnknownMember);
        }
        // Groups without members are dropped at the next tick; only live ones count.
        if self.live_groups() >= limits.max_groups {
            tracing::warn!(
                group,
                max_groups = limits.max_groups,
                "join refused: the broker has max_groups ({}) groups",
                limits.max_groups
            );
            return Err(ErrorCode::LimitReached);
        }
        Ok(())
    }

    fn live_groups(&self) -> usize {
        self.groups.values().filter(|g| !g.is_idle()).count()
    }

    /// A new member id for a first join (no `member_id`), made from
    /// `client_id`; `None` for a rejoin.
    fn first_join_id(&mut self, member_id: &str, client_id: &str) -> Option<(String, u64)> {
        member_id.is_empty().then(|| self.new_member_id(client_id))
    }

    fn new_member_id(&mut self, prefix: &str) -> (String, u64) {
        self.seq += 1;
        let id = if prefix.is_empty() {
            format!("member-{:x}-{}", self.nonce, self.seq)
        } else {
            // Kafka's ids are "<client id>-<uuid>"; a long client id is cut.
            let mut end = prefix.len().min(64);
            while !prefix.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}-{:x}-{}", &prefix[..end], self.nonce, self.seq)
        };
        (id, self.seq)
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
        if let Err(code) = self.admit_group(group, &p.member_id, &p.limits) {
            return vec![fail(responder, code)];
        }
        let seq = self.first_join_id(&p.member_id, "");
        let g = join_target(&mut self.groups, group);
        if g.is_client() {
            if !g.is_idle() {
                return vec![(responder, Err(GroupError::InconsistentProtocol))];
            }
            g.mode = Mode::Broker;
        }
        if !p.member_id.is_empty() && !g.members.contains_key(&p.member_id) {
            return vec![fail(responder, ErrorCode::UnknownMember)];
        }
        if p.member_id.is_empty() && is_full(group, g.members.len(), &p.limits) {
            return vec![fail(responder, ErrorCode::LimitReached)];
        }
        let (id, order) = match seq {
            Some(s) => s,
            None => (p.member_id.clone(), 0),
        };
        let mut ready = Vec::new();
        let known = g
            .members
            .get(&id)
            .map(|m| (m.topics.clone(), m.joined_at, m.seq));
        // A member that rejoins with the same subscription while the group is
        // stable just gets its current assignment back.
        if g.state == GroupState::Stable {
            if let Some((topics, _, _)) = &known {
                if *topics == p.topics {
                    if let Some(m) = g.members.get_mut(&id) {
                        m.last_seen = now;
                    }
                    let resp = response(g, &id);
                    return vec![(responder, Ok(Answer::Joined(resp)))];
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
                joined_at: known.as_ref().map_or(now, |k| k.1),
                seq: known.as_ref().map_or(order, |k| k.2),
                client: None,
            },
        );
        g.assignor = p.assignor;
        if let Some(old) = g.pending.insert(id, Parked { responder }) {
            ready.push(fail(old.responder, ErrorCode::RebalanceInProgress));
        }
        if !matches!(g.state, GroupState::PreparingRebalance { .. }) {
            ready.extend(start_rebalance(g, now));
        }
        ready.extend(try_complete(g, now, false, partitions_of));
        ready
    }

    /// Handles a client-assigned JOIN_GROUP (Kafka's). The responder parks
    /// until the rebalance completes; a first join without a member id may
    /// be answered at once with [`GroupError::MemberIdRequired`] (not a
    /// static member's). A static member without a member id whose instance
    /// id the group knows takes the place of the member that had it (see
    /// `statics.rs`); with a member id that is no longer its instance's it
    /// gets [`GroupError::FencedInstanceId`].
    pub fn join_client(
        &mut self,
        group: &str,
        p: ClientJoinParams,
        now: u64,
        responder: R,
    ) -> Vec<Ready<R>> {
        if p.join.protocol_type.is_empty() || p.join.protocols.is_empty() {
            return vec![(responder, Err(GroupError::InconsistentProtocol))];
        }
        if let Err(code) = self.admit_group(group, &p.join.member_id, &p.limits) {
            return vec![fail(responder, code)];
        }
        let held = self.held();
        // Kafka's member ids start with the instance id of a static member.
        let prefix = p
            .join
            .group_instance_id
            .as_deref()
            .unwrap_or(&p.join.client_id);
        let fresh = self.first_join_id(&p.join.member_id, prefix);
        let g = join_target(&mut self.groups, group);
        // A static member coming back without its member id: the member it replaces.
        let replacing = p
            .join
            .group_instance_id
            .as_ref()
            .filter(|_| p.join.member_id.is_empty())
            .and_then(|i| g.statics.get(i).cloned());
        let me = replacing.as_deref().unwrap_or(&p.join.member_id);
        if let Err(e) = client_join::fit_protocols(g, &p.join, me) {
            return vec![(responder, Err(e))];
        }
        let (id, fresh) = match client_join::identify(g, group, fresh, replacing, &p, now) {
            Err(e) => return vec![(responder, Err(e))],
            Ok(client_join::Identity::Replaces { old, new }) => {
                let ready = statics::replace(g, group, &old, new, p, held, now, responder);
                g.recount();
                return ready;
            }
            Ok(client_join::Identity::Member { id, fresh }) => (id, fresh),
        };
        let order = client_join::join_order(g, &id, fresh, &mut self.seq);
        if let Some(current) = client_join::current_generation(g, &id, &p.join, now) {
            return vec![(responder, Ok(Answer::ClientJoined(current)))];
        }
        let forming = g.members.is_empty() && g.state == GroupState::Empty;
        let delay = p.limits.initial_rebalance_delay_ms;
        let new_member = match client_join::enter(g, group, (&id, order), p, held, now) {
            Ok(new_member) => new_member,
            Err(e) => return vec![(responder, Err(e))],
        };
        let mut ready = Vec::new();
        if let Some(old) = g.pending.insert(id, Parked { responder }) {
            ready.push(fail(old.responder, ErrorCode::RebalanceInProgress));
        }
        if !matches!(g.state, GroupState::PreparingRebalance { .. }) {
            ready.extend(start_rebalance(g, now));
        }
        client_join::delay_initial_rebalance(g, forming, new_member, delay, now);
        ready.extend(try_complete(g, now, false, &|_| 0));
        g.recount();
        ready
    }

    /// Handles a SyncGroup of a client-assigned group: the leader's brings
    /// every member's assignment and completes the generation; the others
    /// park until it does (or get their assignment at once when stable). A
    /// static member names its instance id beside its member id, and is
    /// fenced when the instance has another member id now.
    #[allow(clippy::too_many_arguments)]
    pub fn sync(
        &mut self,
        group: &str,
        (member, instance): (&str, Option<&str>),
        generation: i32,
        protocol_type: Option<&str>,
        protocol: Option<&str>,
        assignments: Vec<MemberAssignment>,
        max_client_bytes: usize,
        now: u64,
        responder: R,
    ) -> Vec<Ready<R>> {
        let held = self.held();
        let Some(g) = self.groups.get_mut(group) else {
            return vec![fail(responder, ErrorCode::UnknownMember)];
        };
        g.check_at = 0;
        if let Err(e) = statics::check(g, member, instance) {
            return vec![(responder, Err(e))];
        }
        let Some(m) = g.members.get_mut(member) else {
            return vec![fail(responder, ErrorCode::UnknownMember)];
        };
        m.last_seen = now;
        if !g.is_client() {
            return vec![(responder, Err(GroupError::InconsistentProtocol))];
        }
        if generation != g.generation {
            return vec![fail(responder, ErrorCode::IllegalGeneration)];
        }
        if protocol_type.is_some_and(|t| t != g.protocol_type())
            || protocol.is_some_and(|p| p != g.protocol)
        {
            return vec![(responder, Err(GroupError::InconsistentProtocol))];
        }
        match g.state {
            GroupState::Empty => vec![fail(responder, ErrorCode::UnknownMember)],
            GroupState::PreparingRebalance { .. } => {
                vec![fail(responder, ErrorCode::RebalanceInProgress)]
            }
            GroupState::Stable => vec![(responder, Ok(Answer::Synced(synced(g, member))))],
            GroupState::CompletingRebalance { .. } => {
                if member == g.leader {
                    let adding: usize = assignments
                        .iter()
                        .filter(|a| g.members.contains_key(&a.member_id))
                        .map(|a| {
                            a.assignment.len()
                                + a.partitions
                                    .iter()
                                    .map(|t| t.topic.len() + 4 * t.partitions.len())
                                    .sum::<usize>()
                        })
                        .sum();
                    if held.saturating_add(adding) > max_client_bytes {
                        tracing::warn!(
                            group,
                            bytes = adding,
                            held,
                            "leader's assignment refused: client-assigned members would hold more than {max_client_bytes} bytes"
                        );
                        return vec![fail(responder, ErrorCode::LimitReached)];
                    }
                }
                let mut ready = Vec::new();
                g.unsynced.remove(member);
                if let Some(old) = g.syncs.insert(member.to_owned(), Parked { responder }) {
                    ready.push(fail(old.responder, ErrorCode::RebalanceInProgress));
                }
                if member == g.leader {
                    for a in assignments {
                        if let Some(c) = g
                            .members
                            .get_mut(&a.member_id)
                            .and_then(|m| m.client.as_mut())
                        {
                            c.assignment = a.assignment;
                            c.partitions = a.partitions;
                        }
                    }
                    g.state = GroupState::Stable;
                    tracing::info!(
                        group,
                        generation = g.generation,
                        members = g.members.len(),
                        "leader's assignment received; group stable"
                    );
                    let parked = std::mem::take(&mut g.syncs);
                    for (id, p) in parked {
                        ready.push((p.responder, Ok(Answer::Synced(synced(g, &id)))));
                    }
                    g.recount();
                }
                ready
            }
        }
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
    /// UNKNOWN_MEMBER, REBALANCE_IN_PROGRESS (rejoin), ILLEGAL_GENERATION. A
    /// client-assigned group checks the generation first (a stale member is
    /// told ILLEGAL_GENERATION even during a rebalance, as Kafka does) and
    /// accepts heartbeats while it waits for the leader's assignment.
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
        if g.is_client() {
            if generation != g.generation {
                return Err(ErrorCode::IllegalGeneration);
            }
            return match g.state {
                GroupState::PreparingRebalance { .. } => Err(ErrorCode::RebalanceInProgress),
                GroupState::Empty => Err(ErrorCode::UnknownMember),
                GroupState::CompletingRebalance { .. } | GroupState::Stable => Ok(()),
            };
        }
        if matches!(g.state, GroupState::PreparingRebalance { .. }) {
            return Err(ErrorCode::RebalanceInProgress);
        }
        if generation != g.generation {
            return Err(ErrorCode::IllegalGeneration);
        }
        Ok(())
    }

    /// A heartbeat that waits (HEARTBEAT_WAIT): checks and records it as
    /// [`Coordinator::heartbeat`] does, and on success returns a listener
    /// that fires when the group starts a rebalance or loses a member, and
    /// the member's session timeout (the longest the wait may last). Taken
    /// under the same lock as the check, so no rebalance slips between them;
    /// the listener holds nothing of the coordinator's (dropping it is all
    /// the clean-up there is).
    ///
    /// # Errors
    /// As [`Coordinator::heartbeat`].
    pub fn heartbeat_listen(
        &mut self,
        group: &str,
        member: &str,
        generation: i32,
        now: u64,
    ) -> Result<(event_listener::EventListener, u64), ErrorCode> {
        self.heartbeat(group, member, generation, now)?;
        let g = self.groups.get(group).ok_or(ErrorCode::UnknownMember)?;
        let m = g.members.get(member).ok_or(ErrorCode::UnknownMember)?;
        Ok((g.changed.listen(), m.session_timeout_ms))
    }

    /// What a heartbeat would answer now, without counting as one (the end
    /// of a HEARTBEAT_WAIT: a wait whose peer is gone must not keep its
    /// session alive).
    ///
    /// # Errors
    /// As [`Coordinator::heartbeat`].
    pub fn check_member(
        &self,
        group: &str,
        member: &str,
        generation: i32,
    ) -> Result<(), ErrorCode> {
        let g = self.groups.get(group).ok_or(ErrorCode::UnknownMember)?;
        if !g.members.contains_key(member) {
            return Err(ErrorCode::UnknownMember);
        }
        if g.is_client() && generation != g.generation {
            return Err(ErrorCode::IllegalGeneration);
        }
        match g.state {
            GroupState::PreparingRebalance { .. } => Err(ErrorCode::RebalanceInProgress),
            GroupState::Empty => Err(ErrorCode::UnknownMember),
            _ if generation != g.generation => Err(ErrorCode::IllegalGeneration),
            _ => Ok(()),
        }
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
        g.check_at = 0;
        if g.new_ids.remove(member).is_some() {
            return Ok(Vec::new());
        }
        if remove_member(g, member).is_none() {
            return Err(ErrorCode::UnknownMember);
        }
        tracing::info!(group, member, "member left");
        let mut ready = Vec::new();
        if let Some(p) = g.pending.remove(member) {
            ready.push(fail(p.responder, ErrorCode::UnknownMember));
        }
        if let Some(p) = g.syncs.remove(member) {
            ready.push(fail(p.responder, ErrorCode::UnknownMember));
        }
        g.unsynced.remove(member);
        ready.extend(after_removal(g, now, partitions_of));
        g.recount();
        Ok(ready)
    }

    /// Checks that a member may commit offsets. Generation -1 with an empty
    /// member id is allowed only while the group has no members.
    ///
    /// # Errors
    /// UNKNOWN_MEMBER, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS (a broker-
    /// assigned group with members, for a commit from outside it; a
    /// client-assigned group waiting for its leader's assignment).
    pub fn check_commit(
        &self,
        group: &str,
        member: &str,
        generation: i32,
    ) -> Result<String, ErrorCode> {
        let g = self.groups.get(group);
        // A commit outside group management (a negative generation) is
        // taken while the group has no members, whatever member id it
        // names: as Kafka, for librdkafka's consumers with `assign()` under
        // the consumer protocol, which send their own member id (KIP-1082).
        if generation < 0 && g.is_none_or(|g| g.members.is_empty()) {
            return Ok(g.map_or_else(String::new, |g| g.protocol_type()));
        }
        if generation == -1 && member.is_empty() {
            return match g {
                Some(g) if !g.members.is_empty() => Err(if g.is_client() {
                    ErrorCode::UnknownMember
                } else {
                    ErrorCode::RebalanceInProgress
                }),
                Some(g) => Ok(g.protocol_type()),
                None => Ok(String::new()),
            };
        }
        let g = g.ok_or(ErrorCode::UnknownMember)?;
        if !g.members.contains_key(member) {
            return Err(ErrorCode::UnknownMember);
        }
        if generation != g.generation {
            return Err(ErrorCode::IllegalGeneration);
        }
        if let GroupState::CompletingRebalance { .. } = g.state {
            return Err(ErrorCode::RebalanceInProgress);
        }
        Ok(g.protocol_type())
    }

    /// Expires silent members and member ids handed out but never used,
    /// completes rebalances past their deadline, and removes the members of
    /// a client-assigned group that did not send SyncGroup in time.
    ///
    /// Looks only into the groups with something due by now (`check_at`):
    /// with every member heartbeating, a group is looked into about once
    /// per session timeout, not on every tick.
    pub fn tick(&mut self, now: u64, partitions_of: &dyn Fn(&str) -> u32) -> Vec<Ready<R>> {
        let mut ready = Vec::new();
        let mut checked = 0;
        let mut emptied = false;
        for (name, g) in &mut self.groups {
            if now < g.check_at {
                continue;
            }
            checked += 1;
            g.new_ids.retain(|_, lapse| *lapse >= now);
            let expired: Vec<String> = g
                .members
                .iter()
                .filter(|(id, m)| {
                    !g.pending.contains_key(*id)
                        && !g.syncs.contains_key(*id)
                        && now.saturating_sub(m.last_seen) > m.session_timeout_ms
                })
                .map(|(id, _)| id.clone())
                .collect();
            for id in &expired {
                remove_member(g, id);
                tracing::info!(group = %name, member = %id, "session expired; member removed");
            }
            if let GroupState::CompletingRebalance { deadline } = g.state {
                if now >= deadline {
                    let late: Vec<String> = std::mem::take(&mut g.unsynced).into_iter().collect();
                    for id in &late {
                        if remove_member(g, id).is_some() {
                            tracing::info!(group = %name, member = %id, "no SyncGroup before the rebalance timeout; member removed");
                        }
                    }
                    if !late.is_empty() && expired.is_empty() {
                        ready.extend(after_removal(g, now, partitions_of));
                    }
                }
            }
            if !expired.is_empty() {
                ready.extend(after_removal(g, now, partitions_of));
            }
            if let GroupState::PreparingRebalance { deadline } = g.state {
                if now >= deadline {
                    ready.extend(try_complete(g, now, true, partitions_of));
                } else if g.initial.is_some_and(|i| now >= i.until) {
                    ready.extend(try_complete(g, now, false, partitions_of));
                }
            }
            // Members that left or expired free their share.
            g.recount();
            emptied |= g.is_idle();
            g.check_at = g.next_check();
        }
        self.last_tick_checked = checked;
        // Empty groups hold no state worth keeping (their offsets live in the offset
        // store), so memory follows the live groups, not every name ever used. A group
        // becomes idle only through a change, which has it looked into at this tick.
        if emptied {
            self.groups.retain(|_, g| !g.is_idle());
        }
        ready
    }

    /// A topic gained partitions: every group with a member subscribed to it
    /// rebalances, so the new partitions get assigned. A broker-assigned
    /// group's members learn of it from their next heartbeat
    /// (REBALANCE_IN_PROGRESS) and rejoin; a client-assigned group's as well,
    /// which is what Kafka's clients would do on their own once their
    /// metadata shows the new count, only sooner. A group already waiting
    /// for rejoins completes with the new count anyway. Returns the parked
    /// SyncGroups that now get REBALANCE_IN_PROGRESS, and the groups rebalanced.
    pub fn topic_grew(&mut self, topic: &str, now: u64) -> (Vec<Ready<R>>, Vec<String>) {
        let mut ready = Vec::new();
        let mut rebalanced = Vec::new();
        for (name, g) in &mut self.groups {
            let subscribed = g
                .members
                .values()
                .any(|m| m.topics.iter().any(|t| t == topic));
            if !subscribed {
                continue;
            }
            if let GroupState::Stable | GroupState::CompletingRebalance { .. } = g.state {
                g.check_at = 0;
                ready.extend(start_rebalance(g, now));
                rebalanced.push(name.clone());
            }
        }
        rebalanced.sort_unstable();
        (ready, rebalanced)
    }

    /// Whether a member of `group` subscribes to `topic` (a group's
    /// committed offsets on such a topic are in use: OffsetDelete refuses them).
    pub fn subscribes(&self, group: &str, topic: &str) -> bool {
        self.groups.get(group).is_some_and(|g| {
            g.members
                .values()
                .any(|m| m.topics.iter().any(|t| t == topic))
        })
    }

    /// Groups the last [`Coordinator::tick`] looked into.
    #[cfg(test)]
    pub fn last_tick_checked(&self) -> usize {
        self.last_tick_checked
    }

    /// Answers every parked join and sync with `code` (shutdown).
    pub fn drain(&mut self, code: ErrorCode) -> Vec<Ready<R>> {
        let mut out = Vec::new();
        for g in self.groups.values_mut() {
            // Waiting heartbeats answer now (they check for shutdown under this lock).
            g.changed.notify(usize::MAX);
            for p in std::mem::take(&mut g.pending).into_values() {
                out.push(fail(p.responder, code));
            }
            for p in std::mem::take(&mut g.syncs).into_values() {
                out.push(fail(p.responder, code));
            }
        }
        out
    }
}

/// The protocols every member (but `except`) supports; `None` without such members.
fn candidates<R>(g: &Group<R>, except: Option<&str>) -> Option<BTreeSet<String>> {
    let mut set: Option<BTreeSet<String>> = None;
    for (id, m) in &g.members {
        if Some(id.as_str()) == except {
            continue;
        }
        let Some(c) = &m.client else { continue };
        let mine: BTreeSet<String> = c.protocols.iter().map(|(n, _)| n.clone()).collect();
        set = Some(match set {
            None => mine,
            Some(s) => s.intersection(&mine).cloned().collect(),
        });
    }
    set
}

/// The protocol of a new generation: among those every member supports, the
/// one most members prefer (each votes for its first supported one); ties go
/// to the name first in order.
fn choose_protocol<R>(g: &Group<R>) -> String {
    let Some(cands) = candidates(g, None) else {
        return String::new();
    };
    let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
    for m in g.members.values() {
        if let Some(c) = &m.client {
            if let Some((n, _)) = c.protocols.iter().find(|(n, _)| cands.contains(n)) {
                *votes.entry(n.as_str()).or_default() += 1;
            }
        }
    }
    let best = votes.values().copied().max().unwrap_or(0);
    votes
        .into_iter()
        .find(|(_, v)| *v == best)
        .map(|(n, _)| n.to_owned())
        .or_else(|| cands.into_iter().next())
        .unwrap_or_default()
}

fn start_rebalance<R>(g: &mut Group<R>, now: u64) -> Vec<Ready<R>> {
    g.rebalances += 1;
    g.changed.notify(usize::MAX);
    g.state = GroupState::PreparingRebalance {
        deadline: now.saturating_add(g.rebalance_timeout()),
    };
    // Syncs waiting for a generation that will not complete: rejoin.
    g.unsynced.clear();
    std::mem::take(&mut g.syncs)
        .into_values()
        .map(|p| fail(p.responder, ErrorCode::RebalanceInProgress))
        .collect()
}

fn after_removal<R>(
    g: &mut Group<R>,
    now: u64,
    partitions_of: &dyn Fn(&str) -> u32,
) -> Vec<Ready<R>> {
    g.changed.notify(usize::MAX);
    if g.members.is_empty() {
        g.state = GroupState::Empty;
        g.initial = None;
        g.assignment.clear();
        g.unsynced.clear();
        return std::mem::take(&mut g.syncs)
            .into_values()
            .map(|p| fail(p.responder, ErrorCode::UnknownMember))
            .collect();
    }
    let mut ready = Vec::new();
    if !matches!(g.state, GroupState::PreparingRebalance { .. }) {
        ready.extend(start_rebalance(g, now));
    }
    ready.extend(try_complete(g, now, false, partitions_of));
    ready
}

/// Completes the rebalance when every known member has rejoined, or when
/// `force` (deadline passed): members that did not rejoin are dropped.
fn try_complete<R>(
    g: &mut Group<R>,
    now: u64,
    force: bool,
    partitions_of: &dyn Fn(&str) -> u32,
) -> Vec<Ready<R>> {
    let all_joined = g.members.keys().all(|id| g.pending.contains_key(id));
    if !all_joined && !force {
        return Vec::new();
    }
    if !force && g.initial.is_some_and(|i| now < i.until) {
        // Forming: more members may come within the initial delay.
        return Vec::new();
    }
    g.initial = None;
    // Members that did not rejoin go, but static ones (KIP-345): those stay
    // in the generation with their last metadata until their session lapses.
    let missing: Vec<String> = g
        .members
        .iter()
        .filter(|(id, m)| !g.pending.contains_key(*id) && !statics::is_static(m))
        .map(|(id, _)| id.clone())
        .collect();
    for id in missing {
        tracing::info!(member = %id, "member did not rejoin before the rebalance timeout; removed");
        remove_member(g, &id);
    }
    if g.members.is_empty() {
        g.state = GroupState::Empty;
        g.assignment.clear();
        return Vec::new();
    }
    if g.pending.is_empty() {
        // Only static members that have not rejoined: wait another rebalance
        // timeout for one to come back (or for their sessions to lapse).
        g.state = GroupState::PreparingRebalance {
            deadline: now.saturating_add(g.rebalance_timeout()),
        };
        return Vec::new();
    }
    g.generation = g.generation.wrapping_add(1).max(1);
    if g.is_client() {
        g.protocol = choose_protocol(g);
        // The leader stays while it is a member that rejoined; otherwise the
        // earliest joined of those that did.
        if !g.pending.contains_key(&g.leader) {
            g.leader = g
                .members
                .iter()
                .filter(|(id, _)| g.pending.contains_key(*id))
                .min_by_key(|(id, m)| (m.seq, (*id).clone()))
                .map(|(id, _)| id.clone())
                .unwrap_or_default();
        }
        for m in g.members.values_mut() {
            if let Some(c) = m.client.as_mut() {
                c.assignment = Bytes::new();
                c.partitions.clear();
            }
        }
        g.state = GroupState::CompletingRebalance {
            deadline: now.saturating_add(g.rebalance_timeout()),
        };
        g.unsynced = g.members.keys().cloned().collect();
        tracing::info!(
            generation = g.generation,
            members = g.members.len(),
            protocol = %g.protocol,
            leader = %g.leader,
            "members joined; waiting for the leader's assignment"
        );
        let pending = answered_joins(g, now);
        return pending
            .into_iter()
            .map(|(id, p)| {
                (
                    p.responder,
                    Ok(Answer::ClientJoined(client_response(g, &id))),
                )
            })
            .collect();
    }
    let subs: Vec<Subscription> = g
        .members
        .iter()
        .map(|(id, m)| Subscription {
            member: id.clone(),
            topics: m.topics.clone(),
        })
        .collect();
    g.assignment = assign_from(g.assignor, &subs, partitions_of, &g.assignment);
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
    let pending = answered_joins(g, now);
    pending
        .into_iter()
        .map(|(id, p)| (p.responder, Ok(Answer::Joined(response(g, &id)))))
        .collect()
}

/// Takes the joins a completed rebalance answers. Their members are heard
/// from now: a join may have waited longer than the session timeout for the
/// others (the session does not run while it waits), and the member's
/// session starts again with the answer, as in Kafka.
fn answered_joins<R>(g: &mut Group<R>, now: u64) -> BTreeMap<String, Parked<R>> {
    let pending = std::mem::take(&mut g.pending);
    for id in pending.keys() {
        if let Some(m) = g.members.get_mut(id) {
            m.last_seen = now;
        }
    }
    pending
}

fn broker_assignment<R>(g: &Group<R>, id: &str) -> Vec<TopicAssignment> {
    g.assignment
        .get(id)
        .map(|a| {
            a.iter()
                .map(|(t, p)| TopicAssignment {
                    topic: t.clone(),
                    partitions: p.clone(),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn response<R>(g: &Group<R>, id: &str) -> Joined {
    Joined {
        generation: g.generation,
        member_id: id.to_owned(),
        leader_id: g.leader.clone(),
        members: g.members.keys().cloned().collect(),
        assignment: broker_assignment(g, id),
    }
}

fn client_response<R>(g: &Group<R>, id: &str) -> ClientJoined {
    let members = if id == g.leader {
        let mut ms: Vec<(&String, &Member)> = g.members.iter().collect();
        ms.sort_by_key(|(mid, m)| (m.seq, (*mid).clone()));
        ms.into_iter()
            .map(|(mid, m)| {
                let c = m.client.as_ref();
                JoinedMember {
                    member_id: mid.clone(),
                    group_instance_id: c.and_then(|c| c.instance.clone()),
                    metadata: c
                        .and_then(|c| c.protocols.iter().find(|(n, _)| *n == g.protocol))
                        .map(|(_, md)| md.clone())
                        .unwrap_or_default(),
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    ClientJoined {
        generation: g.generation,
        protocol_type: g.protocol_type(),
        protocol: g.protocol.clone(),
        leader_id: g.leader.clone(),
        member_id: id.to_owned(),
        members,
        skip_assignment: false,
    }
}

fn synced<R>(g: &Group<R>, id: &str) -> Synced {
    Synced {
        protocol_type: g.protocol_type(),
        protocol: g.protocol.clone(),
        assignment: g
            .members
            .get(id)
            .and_then(|m| m.client.as_ref())
            .map(|c| c.assignment.clone())
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod client_tests;

#[cfg(test)]
mod static_tests;

//! Consumer-protocol groups (Kafka's KIP-848, `group.protocol=consumer`):
//! membership and incremental reconciliation with time passed in (`now_ms`).
//!
//! A member joins with epoch 0, heartbeats with the epoch it was last
//! given, leaves with -1 (a static member, `group.instance.id`, with -2:
//! it keeps its place and its partitions for the session timeout, and a
//! member joining with its instance id takes them over). Every change of
//! membership, of a subscription, of the assignor or of a subscribed
//! topic's partition count moves the **group epoch**; the **target
//! assignment** is then computed again by the group's assignor
//! ([`assign`]) at that epoch (the assignment epoch).
//!
//! Each member's **current assignment** moves toward its target one
//! heartbeat at a time:
//! 1. partitions it has and should not keep are *revoked*: its assignment
//!    shrinks, its epoch stays, and the partitions stay its own until a
//!    heartbeat reports them no longer owned (`owned`); a member that does
//!    not do so within its rebalance timeout is removed;
//! 2. then it takes the target's epoch and the target's partitions that
//!    nobody else owns; the others (still being revoked from their previous
//!    owner) are given on a later heartbeat, once released.
//!
//! So no partition is ever owned by two members at once: a partition is
//! owned by a member while it is in its assignment or being revoked from
//! it, and is given only when no other member owns it.
//!
//! A member not heard from for the session timeout is removed
//! ([`ConsumerGroups::expire`]); its partitions are free at once.
//!
//! A member subscribes by topic names, by a regular expression (Kafka takes
//! RE2 syntax; the `regex` crate's is close: linear time, no look-around or
//! back-references), or both: the expression must match a whole topic name,
//! and the topics it matches are looked at again on every heartbeat of the
//! group, so a topic created later joins the subscription.

pub(crate) mod assign;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};

pub use crate::config::ConsumerGroupLimits;
pub use assign::{Assignment, Assignor};

/// Longest member or instance id taken (a client makes a UUID).
pub const MAX_ID_LEN: usize = 128;

/// Longest regex subscription taken, in bytes.
pub const MAX_REGEX_LEN: usize = 1_024;

/// Most memory a compiled regex subscription may take.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Longest rebalance timeout taken from a member (Kafka's default
/// max.poll.interval.ms is 5 minutes).
pub const MAX_REBALANCE_TIMEOUT_MS: u64 = 3_600_000;

/// The heartbeat interval answered while a group reconciles, and for one
/// configured interval after it changed (the configured one, if shorter).
/// Kafka answers its configured interval (5 s) throughout, so a member
/// learns of a change up to 5 s late; clients take the interval of every
/// answer (librdkafka, the Java client), so this costs nothing once stable.
pub const FAST_HEARTBEAT_MS: u64 = 250;

/// Why a heartbeat or a commit was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumerGroupError {
    /// Not a member (never joined, left, or removed).
    #[error("member {0} is not in the group")]
    UnknownMember(String),
    /// The epoch sent is not the member's (a heartbeat's, or a newer one).
    #[error("member epoch {sent} is not the member's epoch {current}")]
    FencedEpoch {
        /// What the member sent.
        sent: i32,
        /// What it has.
        current: i32,
    },
    /// A commit with an epoch older than the member's.
    #[error("member epoch {sent} is older than the member's epoch {current}")]
    StaleEpoch {
        /// What the member sent.
        sent: i32,
        /// What it has.
        current: i32,
    },
    /// The group is at its member limit.
    #[error("consumer group {group} has {limit} members, its limit")]
    GroupFull {
        /// The group.
        group: String,
        /// The limit.
        limit: usize,
    },
    /// The broker is at its consumer-group limit.
    #[error("the broker has {0} consumer groups, its limit")]
    TooManyGroups(usize),
    /// An assignor the broker does not have.
    #[error("server assignor {0:?} is not served (uniform, range)")]
    UnsupportedAssignor(String),
    /// A static member's instance id held by a member that has not left.
    #[error("instance id {0} is held by a member that has not left")]
    UnreleasedInstance(String),
    /// A malformed heartbeat.
    #[error("invalid consumer group heartbeat: {0}")]
    Invalid(String),
    /// A regex subscription that does not compile (or is too long or big).
    #[error("invalid regular expression: {0}")]
    InvalidRegex(String),
}

/// A regex subscription: the expression as sent and compiled to match a
/// whole topic name.
#[derive(Debug, Clone)]
pub struct TopicRegex {
    /// As the member sent it.
    pub pattern: String,
    matcher: regex::Regex,
}

impl TopicRegex {
    /// Compiles `pattern`, anchored at both ends.
    ///
    /// # Errors
    /// [`ConsumerGroupError::InvalidRegex`]: too long, too big, or not valid.
    pub fn new(pattern: &str) -> Result<Self, ConsumerGroupError> {
        if pattern.len() > MAX_REGEX_LEN {
            return Err(ConsumerGroupError::InvalidRegex(format!(
                "{} bytes, limit {MAX_REGEX_LEN}",
                pattern.len()
            )));
        }
        let matcher = regex::RegexBuilder::new(&format!("^(?:{pattern})$"))
            .size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|e| ConsumerGroupError::InvalidRegex(e.to_string()))?;
        Ok(TopicRegex {
            pattern: pattern.to_owned(),
            matcher,
        })
    }

    /// True when it matches the whole of `topic`.
    pub fn matches(&self, topic: &str) -> bool {
        self.matcher.is_match(topic)
    }
}

/// What the coordinator reads of the topics: partition counts, and every
/// topic's name (asked only while a member subscribes by regex).
pub trait TopicSource {
    /// A topic's partition count; None: no such topic.
    fn partitions(&self, topic: &str) -> Option<i32>;
    /// Every topic's name.
    fn names(&self) -> Vec<String>;
}

/// Topics by a partition-count function, with no names to match a regex.
impl<F: Fn(&str) -> Option<i32>> TopicSource for F {
    fn partitions(&self, topic: &str) -> Option<i32> {
        self(topic)
    }
    fn names(&self) -> Vec<String> {
        Vec::new()
    }
}

/// One member.
#[derive(Debug, Clone)]
pub struct ConsumerMember {
    /// Its id.
    pub member_id: String,
    /// A static member's instance id.
    pub instance_id: Option<String>,
    /// Its rack.
    pub rack_id: Option<String>,
    /// The client's id.
    pub client_id: String,
    /// The client's address.
    pub client_host: String,
    /// Its epoch.
    pub member_epoch: i32,
    /// The epoch before, taken once more (a lost answer).
    previous_epoch: i32,
    /// Topics it subscribes to by name.
    pub subscribed: Vec<String>,
    /// Its regex subscription, if any.
    pub regex: Option<TopicRegex>,
    /// The assignor it asked for, if any.
    pub assignor: Option<Assignor>,
    /// Its current assignment.
    pub assigned: Assignment,
    /// Partitions being revoked from it: still its own until it says so.
    pub revoking: Assignment,
    revoke_deadline_ms: Option<u64>,
    rebalance_timeout_ms: u64,
    last_seen_ms: u64,
    /// A static member that left with epoch -2, keeping its place.
    pub left: bool,
}

impl ConsumerMember {
    /// True when it subscribes to `topic`, by name or by its regex.
    pub fn subscribes(&self, topic: &str) -> bool {
        self.subscribed.iter().any(|t| t == topic)
            || self.regex.as_ref().is_some_and(|r| r.matches(topic))
    }

    /// True when it owns `topic`'s `partition` (assigned or being revoked).
    pub fn owns(&self, topic: &str, partition: i32) -> bool {
        [&self.assigned, &self.revoking]
            .iter()
            .any(|a| a.get(topic).is_some_and(|ps| ps.contains(&partition)))
    }
}

/// One consumer-protocol group.
#[derive(Debug, Clone, Default)]
pub struct ConsumerGroup {
    /// Moves on every change of membership, subscription or metadata.
    pub epoch: i32,
    /// The group epoch the target was computed at.
    pub assignment_epoch: i32,
    /// The assignor of the last target.
    pub assignor: Assignor,
    members: BTreeMap<String, ConsumerMember>,
    target: BTreeMap<String, Assignment>,
    /// The subscribed topics' partition counts the target was made from.
    partitions: BTreeMap<String, i32>,
    /// The epoch as of the last heartbeat, and when that heartbeat first
    /// saw it: how recently the group changed (for the heartbeat interval).
    seen_epoch: i32,
    seen_epoch_ms: u64,
}

impl ConsumerGroup {
    /// Its members by id.
    pub fn members(&self) -> impl Iterator<Item = &ConsumerMember> {
        self.members.values()
    }

    /// A member's target assignment.
    pub fn target_of(&self, member: &str) -> Assignment {
        self.target.get(member).cloned().unwrap_or_default()
    }

    /// Stable when every member has its target at the assignment epoch.
    pub fn is_stable(&self) -> bool {
        self.assignment_epoch == self.epoch
            && self.members.values().all(|m| {
                m.member_epoch == self.assignment_epoch
                    && m.revoking.is_empty()
                    && self
                        .target
                        .get(&m.member_id)
                        .is_none_or(|t| *t == m.assigned)
            })
    }

    fn owned_by_other(&self, member: &str, topic: &str, partition: i32) -> bool {
        self.members
            .values()
            .any(|m| m.member_id != member && m.owns(topic, partition))
    }

    fn remove(&mut self, member: &str) -> bool {
        let gone = self.members.remove(member).is_some();
        if gone {
            self.target.remove(member);
            self.epoch += 1;
        }
        gone
    }

    /// The assignor most members asked for (ties: uniform first).
    fn chosen_assignor(&self) -> Assignor {
        let mut votes: BTreeMap<Assignor, usize> = BTreeMap::new();
        for a in self.members.values().filter_map(|m| m.assignor) {
            *votes.entry(a).or_default() += 1;
        }
        votes
            .into_iter()
            .max_by_key(|(a, n)| (*n, std::cmp::Reverse(*a)))
            .map_or(Assignor::Uniform, |(a, _)| a)
    }

    /// Takes the partition counts of the subscribed topics now; true when
    /// they changed (the caller moves the group epoch).
    fn refresh_metadata(&mut self, topics: &dyn TopicSource) -> bool {
        let mut names: BTreeSet<String> = self
            .members
            .values()
            .flat_map(|m| m.subscribed.iter().cloned())
            .collect();
        let regexes: Vec<&TopicRegex> = self
            .members
            .values()
            .filter_map(|m| m.regex.as_ref())
            .collect();
        if !regexes.is_empty() {
            names.extend(
                topics
                    .names()
                    .into_iter()
                    .filter(|t| regexes.iter().any(|r| r.matches(t))),
            );
        }
        let now: BTreeMap<String, i32> = names
            .into_iter()
            .filter_map(|t| topics.partitions(&t).map(|n| (t, n)))
            .collect();
        if now == self.partitions {
            return false;
        }
        self.partitions = now;
        true
    }

    /// Computes the target again if the group epoch moved.
    fn refresh_target(&mut self) {
        if self.assignment_epoch == self.epoch {
            return;
        }
        self.assignor = self.chosen_assignor();
        let subscriptions: BTreeMap<String, Vec<String>> = self
            .members
            .values()
            .map(|m| {
                let topics = self
                    .partitions
                    .keys()
                    .filter(|t| m.subscribes(t))
                    .cloned()
                    .collect();
                (m.member_id.clone(), topics)
            })
            .collect();
        self.target = self
            .assignor
            .assign(&subscriptions, &self.partitions, &self.target);
        self.assignment_epoch = self.epoch;
    }

    /// Moves a member's assignment toward its target (see the module docs).
    /// `owned`: what this heartbeat says the member owns, if it says.
    fn reconcile(&mut self, member: &str, owned: Option<&Assignment>, now_ms: u64) {
        let target = self.target_of(member);
        let epoch = self.assignment_epoch;
        let Some(m) = self.members.get_mut(member) else {
            return;
        };
        if !m.revoking.is_empty() {
            let released = owned.is_some_and(|o| {
                !o.iter().any(|(t, ps)| {
                    m.revoking
                        .get(t)
                        .is_some_and(|r| ps.iter().any(|p| r.contains(p)))
                })
            });
            if !released {
                return;
            }
            m.revoking.clear();
            m.revoke_deadline_ms = None;
        }
        let mut keep = Assignment::new();
        let mut revoke = Assignment::new();
        for (t, ps) in &m.assigned {
            for p in ps {
                let into = if target.get(t).is_some_and(|x| x.contains(p)) {
                    &mut keep
                } else {
                    &mut revoke
                };
                into.entry(t.clone()).or_default().insert(*p);
            }
        }
        if !revoke.is_empty() {
            m.assigned = keep;
            m.revoking = revoke;
            m.revoke_deadline_ms = Some(now_ms.saturating_add(m.rebalance_timeout_ms));
            return;
        }
        let missing: Vec<(String, i32)> = target
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p)))
            .filter(|(t, p)| !m.assigned.get(t).is_some_and(|x| x.contains(p)))
            .collect();
        let free: Vec<(String, i32)> = missing
            .into_iter()
            .filter(|(t, p)| !self.owned_by_other(member, t, *p))
            .collect();
        let Some(m) = self.members.get_mut(member) else {
            return;
        };
        for (t, p) in free {
            m.assigned.entry(t).or_default().insert(p);
        }
        if m.member_epoch != epoch {
            m.previous_epoch = m.member_epoch;
            m.member_epoch = epoch;
        }
    }
}

/// A heartbeat (Kafka's ConsumerGroupHeartbeat request, in names).
#[derive(Debug, Clone, Default)]
pub struct ConsumerHeartbeat<'a> {
    /// The group.
    pub group: &'a str,
    /// The member's id (empty when joining: one is made for it).
    pub member_id: &'a str,
    /// 0 to join, -1 to leave, -2 for a static member to leave for now,
    /// else the epoch it was given.
    pub member_epoch: i32,
    /// A static member's instance id.
    pub instance_id: Option<&'a str>,
    /// Its rack.
    pub rack_id: Option<&'a str>,
    /// How long it may take to revoke (-1: unchanged).
    pub rebalance_timeout_ms: i32,
    /// Its subscription (None: unchanged; required when joining).
    pub subscribed: Option<Vec<String>>,
    /// A regex subscription (None: unchanged; empty: none).
    pub regex: Option<&'a str>,
    /// The assignor it asks for (None: unchanged).
    pub server_assignor: Option<&'a str>,
    /// What it owns now (None: unchanged since its last heartbeat).
    pub owned: Option<Assignment>,
    /// The client's id.
    pub client_id: &'a str,
    /// The client's address.
    pub client_host: &'a str,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerBeat {
    /// The member's id (made here for a member that joined without one).
    pub member_id: String,
    /// Its epoch now (-1 or -2 after a leave).
    pub member_epoch: i32,
    /// How often to heartbeat.
    pub heartbeat_interval_ms: u64,
    /// Its assignment (None after a leave).
    pub assignment: Option<Assignment>,
}

/// Every consumer-protocol group.
#[derive(Debug, Default)]
pub struct ConsumerGroups {
    groups: HashMap<String, ConsumerGroup>,
    limits: ConsumerGroupLimits,
    next_id: u64,
    nonce: u64,
}

impl ConsumerGroups {
    /// No groups; `nonce` makes member ids made here unique across restarts.
    pub fn new(limits: ConsumerGroupLimits, nonce: u64) -> Self {
        ConsumerGroups {
            groups: HashMap::new(),
            limits,
            next_id: 0,
            nonce,
        }
    }

    /// A group, if it has members.
    pub fn group(&self, group: &str) -> Option<&ConsumerGroup> {
        self.groups.get(group)
    }

    /// The groups with members, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut n: Vec<String> = self.groups.keys().cloned().collect();
        n.sort_unstable();
        n
    }

    /// Applies a heartbeat. `topics` gives the topics' partition counts
    /// (and their names, for regex subscriptions).
    ///
    /// # Errors
    /// See [`ConsumerGroupError`].
    pub fn heartbeat(
        &mut self,
        hb: ConsumerHeartbeat<'_>,
        topics: &dyn TopicSource,
        now_ms: u64,
    ) -> Result<ConsumerBeat, ConsumerGroupError> {
        let group = hb.group;
        let mut beat = self.apply(hb, topics, now_ms)?;
        if let Some(g) = self.groups.get_mut(group) {
            if g.seen_epoch != g.epoch {
                g.seen_epoch = g.epoch;
                g.seen_epoch_ms = now_ms;
            }
            // While the group moves partitions, and for one interval after
            // its last change (members joining one after another), members
            // heartbeat often: each learns of its new partitions (or of
            // those to give up) within FAST_HEARTBEAT_MS, not within the
            // configured interval. A stable group heartbeats at the interval.
            let interval = self.limits.heartbeat_interval_ms;
            if !g.is_stable() || now_ms.saturating_sub(g.seen_epoch_ms) < interval {
                beat.heartbeat_interval_ms = interval.min(FAST_HEARTBEAT_MS);
            }
        }
        Ok(beat)
    }

    fn apply(
        &mut self,
        hb: ConsumerHeartbeat<'_>,
        topics: &dyn TopicSource,
        now_ms: u64,
    ) -> Result<ConsumerBeat, ConsumerGroupError> {
        let invalid = |m: String| Err(ConsumerGroupError::Invalid(m));
        if hb.member_id.len() > MAX_ID_LEN || hb.instance_id.is_some_and(|i| i.len() > MAX_ID_LEN) {
            return invalid(format!("a member or instance id over {MAX_ID_LEN} bytes"));
        }
        let regex = match hb.regex {
            None => None,
            Some("") => Some(None),
            Some(r) => Some(Some(TopicRegex::new(r)?)),
        };
        let assignor = match hb.server_assignor.filter(|a| !a.is_empty()) {
            None => None,
            Some(a) => Some(
                Assignor::named(a)
                    .ok_or_else(|| ConsumerGroupError::UnsupportedAssignor(a.to_owned()))?,
            ),
        };
        let interval = self.limits.heartbeat_interval_ms;
        let beat = |member_id: String, member_epoch: i32, assignment| ConsumerBeat {
            member_id,
            member_epoch,
            heartbeat_interval_ms: interval,
            assignment,
        };
        match hb.member_epoch {
            -1 | -2 => {
                let g = self
                    .groups
                    .get_mut(hb.group)
                    .ok_or_else(|| ConsumerGroupError::UnknownMember(hb.member_id.to_owned()))?;
                let m = g
                    .members
                    .get_mut(hb.member_id)
                    .ok_or_else(|| ConsumerGroupError::UnknownMember(hb.member_id.to_owned()))?;
                if hb.member_epoch == -2 && m.instance_id.is_some() {
                    // A static member keeps its place for its session.
                    m.left = true;
                    m.last_seen_ms = now_ms;
                } else {
                    g.remove(hb.member_id);
                    if g.members.is_empty() {
                        self.groups.remove(hb.group);
                    }
                }
                Ok(beat(hb.member_id.to_owned(), hb.member_epoch, None))
            }
            0 => self.join(hb, assignor, regex, topics, now_ms),
            e if e < 0 => invalid(format!("member epoch {e}")),
            sent => {
                let g = self
                    .groups
                    .get_mut(hb.group)
                    .ok_or_else(|| ConsumerGroupError::UnknownMember(hb.member_id.to_owned()))?;
                let m = g
                    .members
                    .get_mut(hb.member_id)
                    .filter(|m| !m.left)
                    .ok_or_else(|| ConsumerGroupError::UnknownMember(hb.member_id.to_owned()))?;
                let lost_answer = sent == m.previous_epoch
                    && hb.owned.as_ref().is_none_or(|o| {
                        o.iter().all(|(t, ps)| {
                            ps.is_empty() || m.assigned.get(t).is_some_and(|a| ps.is_subset(a))
                        })
                    });
                if sent != m.member_epoch && !lost_answer {
                    return Err(ConsumerGroupError::FencedEpoch {
                        sent,
                        current: m.member_epoch,
                    });
                }
                m.last_seen_ms = now_ms;
                if let Ok(t) = u64::try_from(hb.rebalance_timeout_ms) {
                    m.rebalance_timeout_ms = t.min(MAX_REBALANCE_TIMEOUT_MS);
                }
                let mut changed = false;
                if let Some(s) = hb
                    .subscribed
                    .as_deref()
                    .map(dedup)
                    .filter(|s| *s != m.subscribed)
                {
                    m.subscribed = s;
                    changed = true;
                }
                if assignor.is_some() && assignor != m.assignor {
                    m.assignor = assignor;
                    changed = true;
                }
                if let Some(r) = regex {
                    if r.as_ref().map(|r| &r.pattern) != m.regex.as_ref().map(|r| &r.pattern) {
                        m.regex = r;
                        changed = true;
                    }
                }
                if g.refresh_metadata(topics) || changed {
                    g.epoch += 1;
                }
                g.refresh_target();
                g.reconcile(hb.member_id, hb.owned.as_ref(), now_ms);
                let m = g
                    .members
                    .get(hb.member_id)
                    .ok_or_else(|| ConsumerGroupError::UnknownMember(hb.member_id.to_owned()))?;
                Ok(beat(
                    m.member_id.clone(),
                    m.member_epoch,
                    Some(m.assigned.clone()),
                ))
            }
        }
    }

    fn join(
        &mut self,
        hb: ConsumerHeartbeat<'_>,
        assignor: Option<Assignor>,
        regex: Option<Option<TopicRegex>>,
        topics: &dyn TopicSource,
        now_ms: u64,
    ) -> Result<ConsumerBeat, ConsumerGroupError> {
        if !self.groups.contains_key(hb.group) && self.groups.len() >= self.limits.max_groups {
            return Err(ConsumerGroupError::TooManyGroups(self.limits.max_groups));
        }
        let member_id = if hb.member_id.is_empty() {
            self.next_id += 1;
            format!("consumer-{:x}-{}", self.nonce, self.next_id)
        } else {
            hb.member_id.to_owned()
        };
        let limits = self.limits;
        let g = self.groups.entry(hb.group.to_owned()).or_default();
        // A static member coming back takes its place over; one still in the
        // group under another id keeps it.
        let replaced = match hb.instance_id {
            Some(i) => match g
                .members
                .values()
                .find(|m| m.instance_id.as_deref() == Some(i))
            {
                Some(old) if old.left || old.member_id == member_id => Some(old.member_id.clone()),
                Some(_) => return Err(ConsumerGroupError::UnreleasedInstance(i.to_owned())),
                None => None,
            },
            None => None,
        };
        let old = replaced.and_then(|id| {
            let m = g.members.remove(&id)?;
            let t = g.target.remove(&id).unwrap_or_default();
            Some((m, t))
        });
        // A member joining again under its id starts over.
        if old.is_none() {
            g.remove(&member_id);
        }
        if g.members.len() >= limits.max_members {
            if g.members.is_empty() {
                self.groups.remove(hb.group);
            }
            return Err(ConsumerGroupError::GroupFull {
                group: hb.group.to_owned(),
                limit: limits.max_members,
            });
        }
        let regex = match (regex, &old) {
            (Some(r), _) => r,
            (None, Some((m, _))) => m.regex.clone(),
            (None, None) => None,
        };
        let subscribed = match (&hb.subscribed, &old) {
            (Some(s), _) => dedup(s),
            (None, Some((m, _))) => m.subscribed.clone(),
            (None, None) if regex.is_some() => Vec::new(),
            (None, None) => {
                if g.members.is_empty() {
                    self.groups.remove(hb.group);
                }
                return Err(ConsumerGroupError::Invalid(
                    "a joining member names its topics or a regex".into(),
                ));
            }
        };
        let rebalance_timeout_ms = u64::try_from(hb.rebalance_timeout_ms)
            .map_or(limits.session_timeout_ms, |t| {
                t.min(MAX_REBALANCE_TIMEOUT_MS)
            });
        let mut m = ConsumerMember {
            member_id: member_id.clone(),
            instance_id: hb.instance_id.map(str::to_owned),
            rack_id: hb.rack_id.map(str::to_owned),
            client_id: hb.client_id.to_owned(),
            client_host: hb.client_host.to_owned(),
            member_epoch: 0,
            previous_epoch: 0,
            subscribed,
            regex,
            assignor,
            assigned: Assignment::new(),
            revoking: Assignment::new(),
            revoke_deadline_ms: None,
            rebalance_timeout_ms,
            last_seen_ms: now_ms,
            left: false,
        };
        let changed = match old {
            Some((o, target)) => {
                // Its partitions, epoch and target go to the new member id.
                m.member_epoch = o.member_epoch;
                m.previous_epoch = o.member_epoch;
                m.assigned = o.assigned;
                m.revoking = o.revoking;
                m.revoke_deadline_ms = o.revoke_deadline_ms;
                g.target.insert(member_id.clone(), target);
                o.subscribed != m.subscribed
                    || o.assignor != m.assignor
                    || o.regex.as_ref().map(|r| &r.pattern) != m.regex.as_ref().map(|r| &r.pattern)
            }
            None => true,
        };
        g.members.insert(member_id.clone(), m);
        if g.refresh_metadata(topics) || changed {
            g.epoch += 1;
        }
        g.refresh_target();
        g.reconcile(&member_id, hb.owned.as_ref(), now_ms);
        let m = g
            .members
            .get(&member_id)
            .ok_or_else(|| ConsumerGroupError::UnknownMember(member_id.clone()))?;
        Ok(ConsumerBeat {
            member_id,
            member_epoch: m.member_epoch,
            heartbeat_interval_ms: limits.heartbeat_interval_ms,
            assignment: Some(m.assigned.clone()),
        })
    }

    /// Removes the members whose session ran out by `now_ms` and those that
    /// did not give up a revoked partition within their rebalance timeout;
    /// returns (group, member) of each.
    pub fn expire(&mut self, now_ms: u64) -> Vec<(String, String)> {
        let timeout = self.limits.session_timeout_ms;
        let mut gone = Vec::new();
        self.groups.retain(|name, g| {
            let out: Vec<String> = g
                .members
                .values()
                .filter(|m| {
                    now_ms.saturating_sub(m.last_seen_ms) >= timeout
                        || m.revoke_deadline_ms.is_some_and(|d| d <= now_ms)
                })
                .map(|m| m.member_id.clone())
                .collect();
            for id in out {
                g.remove(&id);
                gone.push((name.clone(), id));
            }
            !g.members.is_empty()
        });
        gone
    }

    /// Checks an offset commit (or a fetch with a member epoch): `Ok(true)`
    /// when the group is a consumer-protocol group and the member may
    /// commit, `Ok(false)` when the group is not one (the classic checks
    /// apply). An empty member id with a negative epoch commits from
    /// outside the group, only while it has no members.
    ///
    /// # Errors
    /// [`ConsumerGroupError::UnknownMember`], [`ConsumerGroupError::StaleEpoch`],
    /// [`ConsumerGroupError::FencedEpoch`] (a newer epoch than the member's).
    pub fn check_commit(
        &self,
        group: &str,
        member_id: &str,
        epoch: i32,
    ) -> Result<bool, ConsumerGroupError> {
        let Some(g) = self.groups.get(group) else {
            return Ok(false);
        };
        if member_id.is_empty() && epoch < 0 {
            return Err(ConsumerGroupError::UnknownMember(String::new()));
        }
        let m = g
            .members
            .get(member_id)
            .filter(|m| !m.left)
            .ok_or_else(|| ConsumerGroupError::UnknownMember(member_id.to_owned()))?;
        match epoch.cmp(&m.member_epoch) {
            std::cmp::Ordering::Equal => Ok(true),
            std::cmp::Ordering::Less => Err(ConsumerGroupError::StaleEpoch {
                sent: epoch,
                current: m.member_epoch,
            }),
            std::cmp::Ordering::Greater => Err(ConsumerGroupError::FencedEpoch {
                sent: epoch,
                current: m.member_epoch,
            }),
        }
    }
}

/// A subscription without repeats, sorted.
fn dedup(s: &[String]) -> Vec<String> {
    let mut v = s.to_vec();
    v.sort_unstable();
    v.dedup();
    v
}

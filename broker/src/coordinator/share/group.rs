//! Share groups' membership: who is in a group, what it subscribes to and
//! which partitions it reads, with time passed in (`now_ms`).
//!
//! A member joins with epoch 0 (and the member id it chose, or none: then
//! one is made for it), heartbeats with the epoch it was last given, and
//! leaves with epoch -1; a member not heard from for the group's session
//! timeout is removed. Every change of membership, of a subscription or of
//! a subscribed topic's partitions moves the group's epoch; a member's
//! epoch is the group epoch its assignment was computed at.
//!
//! The assignment: every member reads every partition of the topics it
//! subscribes to. A share-partition hands each record to one member at a
//! time ([`super::partition`]), so members of one partition share its
//! records instead of splitting the partitions: more workers than
//! partitions is the point of a queue.

use std::collections::{BTreeMap, HashMap};

/// Why a heartbeat was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShareGroupError {
    /// Not a member (never joined, left, or removed after its session).
    #[error("member {0} is not in the group")]
    UnknownMember(String),
    /// The epoch sent is not the member's.
    #[error("member epoch {sent} is not the member's epoch {current}")]
    FencedEpoch {
        /// What the member sent.
        sent: i32,
        /// What it has.
        current: i32,
    },
    /// The group is at its member limit.
    #[error("share group {group} has {limit} members, its limit")]
    GroupFull {
        /// The group.
        group: String,
        /// The limit.
        limit: usize,
    },
    /// The broker is at its share-group limit.
    #[error("the broker has {0} share groups, its limit")]
    TooManyGroups(usize),
    /// A member id longer than the limit or an epoch below -1.
    #[error("invalid share group heartbeat: {0}")]
    Invalid(String),
}

pub use crate::config::ShareGroupLimits;

/// Longest member id taken (a client makes a UUID: 22 to 36 characters).
pub const MAX_MEMBER_ID_LEN: usize = 128;

/// One member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareMember {
    /// Its id.
    pub member_id: String,
    /// The client's id.
    pub client_id: String,
    /// The client's address.
    pub client_host: String,
    /// The group epoch its assignment was computed at.
    pub member_epoch: i32,
    /// The epoch before, still taken once (a lost response).
    previous_epoch: i32,
    /// Topics it subscribes to.
    pub subscribed: Vec<String>,
    /// Its partitions by topic.
    pub assignment: BTreeMap<String, Vec<i32>>,
    last_seen_ms: u64,
}

/// One share group's membership.
#[derive(Debug, Clone, Default)]
pub struct ShareGroup {
    /// Moves on every change of membership or assignment.
    pub epoch: i32,
    members: BTreeMap<String, ShareMember>,
}

impl ShareGroup {
    /// Its members by id.
    pub fn members(&self) -> impl Iterator<Item = &ShareMember> {
        self.members.values()
    }

    /// The union of its members' subscriptions.
    #[cfg(test)]
    pub fn subscribed_topics(&self) -> Vec<String> {
        let mut t: Vec<String> = self
            .members
            .values()
            .flat_map(|m| m.subscribed.iter().cloned())
            .collect();
        t.sort_unstable();
        t.dedup();
        t
    }

    /// True when `member` is in the group and is assigned `topic`'s `partition`.
    pub fn is_assigned(&self, member: &str, topic: &str, partition: i32) -> bool {
        self.members
            .get(member)
            .and_then(|m| m.assignment.get(topic))
            .is_some_and(|ps| ps.contains(&partition))
    }
}

/// A heartbeat: who, with which epoch, subscribing to what.
#[derive(Debug, Clone)]
pub struct ShareHeartbeat<'a> {
    /// The group.
    pub group: &'a str,
    /// The member's id (empty: one is made for it on joining).
    pub member_id: &'a str,
    /// 0 to join, -1 to leave, else the epoch it was given.
    pub member_epoch: i32,
    /// Its subscription (None: unchanged; required when joining).
    pub subscribed: Option<Vec<String>>,
    /// The client's id and address (for describe).
    pub client_id: &'a str,
    /// The client's address.
    pub client_host: &'a str,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareBeat {
    /// The member's id (made here for a member that joined without one).
    pub member_id: String,
    /// Its epoch now (-1 after a leave).
    pub member_epoch: i32,
    /// How often to heartbeat.
    pub heartbeat_interval_ms: u64,
    /// Its partitions by topic (empty after a leave).
    pub assignment: BTreeMap<String, Vec<i32>>,
}

/// Every share group's membership.
#[derive(Debug, Default)]
pub struct ShareGroups {
    groups: HashMap<String, ShareGroup>,
    limits: ShareGroupLimits,
    next_id: u64,
    nonce: u64,
}

impl ShareGroups {
    /// No groups; `nonce` makes member ids made here unique across restarts.
    pub fn new(limits: ShareGroupLimits, nonce: u64) -> Self {
        ShareGroups {
            groups: HashMap::new(),
            limits,
            next_id: 0,
            nonce,
        }
    }

    /// A group, if it has members.
    pub fn group(&self, group: &str) -> Option<&ShareGroup> {
        self.groups.get(group)
    }

    /// The groups with members.
    pub fn names(&self) -> Vec<String> {
        let mut n: Vec<String> = self.groups.keys().cloned().collect();
        n.sort_unstable();
        n
    }

    /// Applies a heartbeat. `partitions_of` gives a topic's partition count
    /// (None: no such topic, assigned nothing). Returns the answer and the
    /// members that left (their records go back to the others).
    ///
    /// # Errors
    /// See [`ShareGroupError`].
    pub fn heartbeat(
        &mut self,
        hb: ShareHeartbeat<'_>,
        partitions_of: &dyn Fn(&str) -> Option<i32>,
        now_ms: u64,
    ) -> Result<(ShareBeat, Vec<String>), ShareGroupError> {
        if hb.member_id.len() > MAX_MEMBER_ID_LEN {
            return Err(ShareGroupError::Invalid(format!(
                "member id of {} bytes, limit {MAX_MEMBER_ID_LEN}",
                hb.member_id.len()
            )));
        }
        let interval = self.limits.heartbeat_interval_ms;
        match hb.member_epoch {
            -1 => {
                let left = self.leave(hb.group, hb.member_id);
                if left.is_empty() {
                    return Err(ShareGroupError::UnknownMember(hb.member_id.to_owned()));
                }
                Ok((
                    ShareBeat {
                        member_id: hb.member_id.to_owned(),
                        member_epoch: -1,
                        heartbeat_interval_ms: interval,
                        assignment: BTreeMap::new(),
                    },
                    left,
                ))
            }
            0 => {
                let subscribed = hb.subscribed.clone().ok_or_else(|| {
                    ShareGroupError::Invalid("a joining member names its subscription".into())
                })?;
                if !self.groups.contains_key(hb.group)
                    && self.groups.len() >= self.limits.max_groups
                {
                    return Err(ShareGroupError::TooManyGroups(self.limits.max_groups));
                }
                let member_id = if hb.member_id.is_empty() {
                    self.next_id += 1;
                    format!("share-{:x}-{}", self.nonce, self.next_id)
                } else {
                    hb.member_id.to_owned()
                };
                let max_members = self.limits.max_members;
                let g = self.groups.entry(hb.group.to_owned()).or_default();
                if !g.members.contains_key(&member_id) && g.members.len() >= max_members {
                    let empty = g.members.is_empty();
                    if empty {
                        self.groups.remove(hb.group);
                    }
                    return Err(ShareGroupError::GroupFull {
                        group: hb.group.to_owned(),
                        limit: max_members,
                    });
                }
                // A member joining again (epoch 0 with a known id) starts over.
                g.members.insert(
                    member_id.clone(),
                    ShareMember {
                        member_id: member_id.clone(),
                        client_id: hb.client_id.to_owned(),
                        client_host: hb.client_host.to_owned(),
                        member_epoch: 0,
                        previous_epoch: 0,
                        subscribed,
                        assignment: BTreeMap::new(),
                        last_seen_ms: now_ms,
                    },
                );
                g.epoch += 1;
                let beat = Self::beat(g, &member_id, partitions_of, interval);
                Ok((beat, Vec::new()))
            }
            e if e < -1 => Err(ShareGroupError::Invalid(format!("member epoch {e}"))),
            sent => {
                let g = self
                    .groups
                    .get_mut(hb.group)
                    .ok_or_else(|| ShareGroupError::UnknownMember(hb.member_id.to_owned()))?;
                let m = g
                    .members
                    .get_mut(hb.member_id)
                    .ok_or_else(|| ShareGroupError::UnknownMember(hb.member_id.to_owned()))?;
                if sent != m.member_epoch && sent != m.previous_epoch {
                    return Err(ShareGroupError::FencedEpoch {
                        sent,
                        current: m.member_epoch,
                    });
                }
                m.last_seen_ms = now_ms;
                if let Some(s) = hb.subscribed.clone() {
                    if s != m.subscribed {
                        m.subscribed = s;
                        g.epoch += 1;
                    }
                }
                let beat = Self::beat(g, hb.member_id, partitions_of, interval);
                Ok((beat, Vec::new()))
            }
        }
    }

    /// Computes the member's assignment now; a change (or a join) gives
    /// it the group's epoch, moved first when the change came from a topic
    /// rather than from a member.
    fn beat(
        g: &mut ShareGroup,
        member_id: &str,
        partitions_of: &dyn Fn(&str) -> Option<i32>,
        heartbeat_interval_ms: u64,
    ) -> ShareBeat {
        let gone = || ShareBeat {
            member_id: member_id.to_owned(),
            member_epoch: -1,
            heartbeat_interval_ms,
            assignment: BTreeMap::new(),
        };
        let Some(m) = g.members.get(member_id) else {
            return gone();
        };
        let mut assignment = BTreeMap::new();
        for t in &m.subscribed {
            if let Some(n) = partitions_of(t).filter(|n| *n > 0) {
                assignment.insert(t.clone(), (0..n).collect::<Vec<i32>>());
            }
        }
        let joined = m.member_epoch == 0;
        let changed = assignment != m.assignment;
        if changed && !joined {
            g.epoch += 1;
        }
        let epoch = g.epoch;
        let Some(m) = g.members.get_mut(member_id) else {
            return gone();
        };
        if changed || joined {
            m.previous_epoch = m.member_epoch;
            m.member_epoch = epoch;
            m.assignment = assignment;
        }
        ShareBeat {
            member_id: member_id.to_owned(),
            member_epoch: m.member_epoch,
            heartbeat_interval_ms,
            assignment: m.assignment.clone(),
        }
    }

    /// Removes a member; returns it (in a vector: empty when unknown).
    pub fn leave(&mut self, group: &str, member_id: &str) -> Vec<String> {
        let Some(g) = self.groups.get_mut(group) else {
            return Vec::new();
        };
        if g.members.remove(member_id).is_none() {
            return Vec::new();
        }
        g.epoch += 1;
        if g.members.is_empty() {
            self.groups.remove(group);
        }
        vec![member_id.to_owned()]
    }

    /// Removes the members whose session ran out by `now_ms`; returns
    /// (group, member) of each.
    pub fn expire(&mut self, now_ms: u64) -> Vec<(String, String)> {
        let timeout = self.limits.session_timeout_ms;
        let mut gone = Vec::new();
        self.groups.retain(|name, g| {
            let before = g.members.len();
            g.members.retain(|id, m| {
                let keep = now_ms.saturating_sub(m.last_seen_ms) < timeout;
                if !keep {
                    gone.push((name.clone(), id.clone()));
                }
                keep
            });
            if g.members.len() != before {
                g.epoch += 1;
            }
            !g.members.is_empty()
        });
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topics(t: &str) -> Option<i32> {
        match t {
            "a" => Some(3),
            "b" => Some(1),
            _ => None,
        }
    }

    fn join<'a>(group: &'a str, member: &'a str, subs: &[&str]) -> ShareHeartbeat<'a> {
        ShareHeartbeat {
            group,
            member_id: member,
            member_epoch: 0,
            subscribed: Some(subs.iter().map(|s| s.to_string()).collect()),
            client_id: "c",
            client_host: "h",
        }
    }

    fn beat<'a>(group: &'a str, member: &'a str, epoch: i32) -> ShareHeartbeat<'a> {
        ShareHeartbeat {
            group,
            member_id: member,
            member_epoch: epoch,
            subscribed: None,
            client_id: "c",
            client_host: "h",
        }
    }

    #[test]
    fn every_member_reads_every_partition_of_its_topics() {
        let mut g = ShareGroups::new(ShareGroupLimits::default(), 1);
        let (a, _) = g
            .heartbeat(join("g", "m1", &["a", "nope"]), &topics, 0)
            .unwrap();
        assert_eq!(a.assignment.get("a"), Some(&vec![0, 1, 2]));
        assert!(!a.assignment.contains_key("nope"));
        assert!(a.member_epoch >= 1);
        let (b, _) = g
            .heartbeat(join("g", "m2", &["a", "b"]), &topics, 0)
            .unwrap();
        assert_eq!(b.assignment.len(), 2);
        assert!(g.group("g").unwrap().is_assigned("m1", "a", 2));
        assert!(g.group("g").unwrap().is_assigned("m2", "b", 0));
        assert!(!g.group("g").unwrap().is_assigned("m1", "b", 0));
        assert_eq!(
            g.group("g").unwrap().subscribed_topics(),
            vec!["a", "b", "nope"]
        );
    }

    #[test]
    fn a_member_id_is_made_for_a_member_without_one() {
        let mut g = ShareGroups::new(ShareGroupLimits::default(), 7);
        let (a, _) = g.heartbeat(join("g", "", &["a"]), &topics, 0).unwrap();
        assert!(a.member_id.starts_with("share-7-"));
        let (b, _) = g.heartbeat(join("g", "", &["a"]), &topics, 0).unwrap();
        assert_ne!(a.member_id, b.member_id);
    }

    #[test]
    fn epochs_fence_and_a_lost_response_is_forgiven_once() {
        let mut g = ShareGroups::new(ShareGroupLimits::default(), 1);
        let (a, _) = g.heartbeat(join("g", "m1", &["a"]), &topics, 0).unwrap();
        let e1 = a.member_epoch;
        let (same, _) = g.heartbeat(beat("g", "m1", e1), &topics, 1).unwrap();
        assert_eq!(same.member_epoch, e1);
        // A subscription change moves the epoch.
        let mut hb = beat("g", "m1", e1);
        hb.subscribed = Some(vec!["a".into(), "b".into()]);
        let (moved, _) = g.heartbeat(hb, &topics, 2).unwrap();
        assert!(moved.member_epoch > e1);
        // The previous epoch is still taken (the answer may have been lost)...
        assert!(g.heartbeat(beat("g", "m1", e1), &topics, 3).is_ok());
        // ...an older or a future one is not.
        assert_eq!(
            g.heartbeat(beat("g", "m1", moved.member_epoch + 5), &topics, 3),
            Err(ShareGroupError::FencedEpoch {
                sent: moved.member_epoch + 5,
                current: moved.member_epoch
            })
        );
        assert_eq!(
            g.heartbeat(beat("g", "zz", 1), &topics, 3),
            Err(ShareGroupError::UnknownMember("zz".into()))
        );
        assert!(g.heartbeat(beat("g", "m1", -2), &topics, 3).is_err());
    }

    #[test]
    fn a_new_partition_reaches_the_assignment() {
        let mut g = ShareGroups::new(ShareGroupLimits::default(), 1);
        let (a, _) = g.heartbeat(join("g", "m1", &["a"]), &topics, 0).unwrap();
        let more = |t: &str| if t == "a" { Some(5) } else { None };
        let (b, _) = g
            .heartbeat(beat("g", "m1", a.member_epoch), &more, 1)
            .unwrap();
        assert_eq!(b.assignment["a"], vec![0, 1, 2, 3, 4]);
        assert!(b.member_epoch > a.member_epoch);
    }

    #[test]
    fn leaving_and_session_expiry_remove_members() {
        let limits = ShareGroupLimits {
            session_timeout_ms: 100,
            ..ShareGroupLimits::default()
        };
        let mut g = ShareGroups::new(limits, 1);
        g.heartbeat(join("g", "m1", &["a"]), &topics, 0).unwrap();
        let (m2, _) = g.heartbeat(join("g", "m2", &["a"]), &topics, 0).unwrap();
        let (left, gone) = g.heartbeat(beat("g", "m1", -1), &topics, 10).unwrap();
        assert_eq!(left.member_epoch, -1);
        assert_eq!(gone, vec!["m1".to_string()]);
        assert!(g.heartbeat(beat("g", "m1", -1), &topics, 10).is_err());
        g.heartbeat(beat("g", "m2", m2.member_epoch), &topics, 50)
            .unwrap();
        assert!(g.expire(149).is_empty());
        assert_eq!(g.expire(150), vec![("g".to_string(), "m2".to_string())]);
        assert!(g.group("g").is_none(), "an empty group is forgotten");
    }

    #[test]
    fn bounds_on_members_and_groups() {
        let limits = ShareGroupLimits {
            max_groups: 1,
            max_members: 2,
            ..ShareGroupLimits::default()
        };
        let mut g = ShareGroups::new(limits, 1);
        g.heartbeat(join("g", "m1", &["a"]), &topics, 0).unwrap();
        g.heartbeat(join("g", "m2", &["a"]), &topics, 0).unwrap();
        assert!(matches!(
            g.heartbeat(join("g", "m3", &["a"]), &topics, 0),
            Err(ShareGroupError::GroupFull { limit: 2, .. })
        ));
        // A member rejoining takes no new place.
        assert!(g.heartbeat(join("g", "m2", &["a"]), &topics, 0).is_ok());
        assert_eq!(
            g.heartbeat(join("h", "m1", &["a"]), &topics, 0),
            Err(ShareGroupError::TooManyGroups(1))
        );
        let long = "x".repeat(MAX_MEMBER_ID_LEN + 1);
        assert!(matches!(
            g.heartbeat(join("g", &long, &["a"]), &topics, 0),
            Err(ShareGroupError::Invalid(_))
        ));
        let mut no_subs = join("g", "m9", &[]);
        no_subs.subscribed = None;
        assert!(g.heartbeat(no_subs, &topics, 0).is_err());
    }
}

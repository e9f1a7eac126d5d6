//! Static membership of client-assigned groups (Kafka's KIP-345).
//!
//! A member may bring a group instance id (`group.instance.id`) beside its
//! member id. The group keeps one member per instance id (`Group::statics`),
//! and guarantees:
//! - **A restart within the session keeps the assignment.** A join without a
//!   member id but with a known instance id takes the place of the member
//!   that had it: a new member id, the same place in the join order, the same
//!   assignment. While the group is stable, and the protocol the group would
//!   choose stays the same, it is answered at once with the current
//!   generation and no rebalance happens; its SyncGroup then returns the
//!   assignment it had. (In `CompletingRebalance` the group rebalances, since
//!   the leader may be assigning to the old member id; in
//!   `PreparingRebalance` the join simply waits with the others.)
//! - **The newer process fences the older.** The replaced member's parked
//!   join or sync is answered [`GroupError::FencedInstanceId`], and so is
//!   every later request naming the instance id with the old member id
//!   (join, sync, heartbeat, leave, commit).
//! - **No eviction by a rebalance.** A rebalance that reaches its deadline
//!   keeps a static member that did not rejoin (its session ends it, as
//!   Kafka does); if no member at all rejoined, the rebalance waits another
//!   rebalance timeout.
//! - **Leaving by instance id.** LeaveGroup may name a static member by its
//!   instance id alone (an administrator's removal, Kafka's
//!   `--remove-members`).
//!
//! The leader is told of the replacement without being asked to assign: the
//! answer to a static leader names its old member id as the leader (so the
//! client does not assign), or, for a client that understands it (JoinGroup
//! v9, KIP-814), names it leader with every member's metadata and
//! `skip_assignment` set.

use flume_protocol::ErrorCode;

use super::{
    choose_protocol, client_response, fail, start_rebalance, try_complete, Answer,
    ClientJoinParams, ClientMember, Coordinator, Group, GroupState, Member, Parked, Ready,
};
use crate::domain::GroupError;

/// Whether a member is static (has a group instance id).
pub(super) fn is_static(m: &Member) -> bool {
    m.client.as_ref().is_some_and(|c| c.instance.is_some())
}

/// Checks a request naming `member` and, for a static member, its
/// `instance`: the instance must be the group's and still belong to this
/// member id (Kafka's `validateCurrentMember`). Without an instance id
/// there is nothing to check here.
///
/// # Errors
/// UNKNOWN_MEMBER for an instance id the group does not know,
/// [`GroupError::FencedInstanceId`] for one that has another member id now.
pub(super) fn check<R>(
    g: &Group<R>,
    member: &str,
    instance: Option<&str>,
) -> Result<(), GroupError> {
    let Some(instance) = instance else {
        return Ok(());
    };
    match g.statics.get(instance) {
        None => Err(ErrorCode::UnknownMember.into()),
        Some(current) if current != member => Err(GroupError::FencedInstanceId),
        Some(_) => Ok(()),
    }
}

/// A static member comes back without a member id: `new` takes the place of
/// `old` (see the module docs). `held` is what client-assigned members hold
/// over all groups, checked against the limit with the new metadata.
#[allow(clippy::too_many_arguments)]
pub(super) fn replace<R>(
    g: &mut Group<R>,
    group: &str,
    old: &str,
    new: String,
    p: ClientJoinParams,
    held: usize,
    now: u64,
    responder: R,
) -> Vec<Ready<R>> {
    let (session_timeout_ms, rebalance_timeout_ms) =
        (p.session_timeout_ms(), p.rebalance_timeout_ms());
    let Some(instance) = p.join.group_instance_id.clone() else {
        return vec![fail(responder, ErrorCode::UnknownMember)];
    };
    let Some(current) = g.members.get(old) else {
        // `statics` names only members: not reached.
        g.statics.remove(&instance);
        return vec![fail(responder, ErrorCode::UnknownMember)];
    };
    let kept = current.client.as_ref();
    let client = ClientMember {
        client_id: p.join.client_id,
        client_host: p.join.client_host,
        instance: Some(instance.clone()),
        protocols: p.join.protocols,
        // The assignment stays with the instance.
        assignment: kept.map(|c| c.assignment.clone()).unwrap_or_default(),
        partitions: kept.map(|c| c.partitions.clone()).unwrap_or_default(),
    };
    let before = kept.map_or(0, ClientMember::bytes);
    if held.saturating_sub(before).saturating_add(client.bytes()) > p.limits.max_client_bytes {
        tracing::warn!(
            group,
            bytes = client.bytes(),
            held,
            "static rejoin refused: client-assigned members would hold more than {} bytes of metadata and assignments",
            p.limits.max_client_bytes
        );
        return vec![fail(responder, ErrorCode::LimitReached)];
    }
    let Some(mut m) = g.members.remove(old) else {
        return vec![fail(responder, ErrorCode::UnknownMember)];
    };
    let mut ready = Vec::new();
    // The old process's parked requests: it is fenced.
    if let Some(parked) = g.pending.remove(old) {
        ready.push((parked.responder, Err(GroupError::FencedInstanceId)));
    }
    if let Some(parked) = g.syncs.remove(old) {
        ready.push((parked.responder, Err(GroupError::FencedInstanceId)));
    }
    let old_leader = g.leader.clone();
    if g.leader == old {
        g.leader.clone_from(&new);
    }
    if g.unsynced.remove(old) {
        g.unsynced.insert(new.clone());
    }
    m.client = Some(client);
    m.session_timeout_ms = session_timeout_ms;
    m.rebalance_timeout_ms = rebalance_timeout_ms;
    m.topics = p.join.topics;
    m.last_seen = now;
    g.members.insert(new.clone(), m);
    g.statics.insert(instance.clone(), new.clone());
    tracing::info!(group, instance = %instance, old, new = %new, state = ?g.state, "static member rejoined under a new member id; the old one is fenced");
    g.changed.notify(usize::MAX);
    if g.state == GroupState::Stable && choose_protocol(g) == g.protocol {
        let mut answer = client_response(g, &new);
        if new == g.leader {
            if p.join.skip_assignment_supported {
                answer.skip_assignment = true;
            } else {
                // Named leader under its old id, it does not assign (the
                // group is stable: an assignment would reach no one).
                answer.leader_id = old_leader;
                answer.members.clear();
            }
        }
        ready.push((responder, Ok(Answer::ClientJoined(answer))));
        return ready;
    }
    // The protocol changes, or the leader may be assigning to the old id: rebalance.
    g.pending.insert(new, Parked { responder });
    if !matches!(g.state, GroupState::PreparingRebalance { .. }) {
        ready.extend(start_rebalance(g, now));
    }
    ready.extend(try_complete(g, now, false, &|_| 0));
    ready
}

impl<R> Coordinator<R> {
    /// A heartbeat that may name the member's group instance id (checked
    /// first, as Kafka does), else as [`Coordinator::heartbeat`].
    ///
    /// # Errors
    /// [`GroupError::FencedInstanceId`], and the codes of [`Coordinator::heartbeat`].
    pub fn heartbeat_as(
        &mut self,
        group: &str,
        (member, instance): (&str, Option<&str>),
        generation: i32,
        now: u64,
    ) -> Result<(), GroupError> {
        if let Some(g) = self.groups.get(group) {
            check(g, member, instance)?;
        }
        Ok(self.heartbeat(group, member, generation, now)?)
    }

    /// A LeaveGroup naming a member by id, by group instance id (an empty
    /// member id: whichever member has that instance now), or both (the
    /// instance must still be the member's).
    ///
    /// # Errors
    /// [`GroupError::FencedInstanceId`], UNKNOWN_MEMBER.
    pub fn leave_as(
        &mut self,
        group: &str,
        (member, instance): (&str, Option<&str>),
        now: u64,
        partitions_of: &dyn Fn(&str) -> u32,
    ) -> Result<Vec<Ready<R>>, GroupError> {
        let g = self.groups.get(group).ok_or(ErrorCode::UnknownMember)?;
        let member = if member.is_empty() {
            let instance = instance.ok_or(ErrorCode::UnknownMember)?;
            g.statics
                .get(instance)
                .cloned()
                .ok_or(ErrorCode::UnknownMember)?
        } else {
            check(g, member, instance)?;
            member.to_owned()
        };
        Ok(self.leave(group, &member, now, partitions_of)?)
    }

    /// [`Coordinator::check_commit`] for a member that may name its group
    /// instance id: an instance the group knows under another member id is
    /// fenced (a commit naming an instance the group does not know goes on
    /// to the usual checks, as in Kafka).
    ///
    /// # Errors
    /// [`GroupError::FencedInstanceId`], and the codes of [`Coordinator::check_commit`].
    pub fn check_commit_as(
        &self,
        group: &str,
        (member, instance): (&str, Option<&str>),
        generation: i32,
    ) -> Result<String, GroupError> {
        if let (Some(g), Some(i)) = (self.groups.get(group), instance) {
            if g.statics.get(i).is_some_and(|current| current != member) {
                return Err(GroupError::FencedInstanceId);
            }
        }
        Ok(self.check_commit(group, member, generation)?)
    }
}

//! The phases of a client-assigned join (Kafka's JoinGroup), in order:
//! [`fit_protocols`] (the group's mode and protocols must fit),
//! [`identify`] (which member the join is: a fresh one, a known one, one
//! whose id was handed out, or a static member's replacement),
//! [`join_order`], [`current_generation`] (a known member with the same
//! metadata gets the generation back), [`enter`] (the member's metadata,
//! within the coordinator's limit) and [`delay_initial_rebalance`].
//! `Coordinator::join_client` runs them and parks the join.

use bytes::Bytes;
use flume_protocol::ErrorCode;

use super::{
    candidates, client_response, is_full, statics, ClientJoinParams, ClientMember, Group,
    GroupState, InitialDelay, Member, Mode,
};
use crate::domain::{ClientJoinSpec, ClientJoined, GroupError};

/// Who a join is, once [`identify`] has checked it.
pub(super) enum Identity {
    /// A static member coming back without its member id: `new` takes the
    /// place of `old` (see `statics.rs`).
    Replaces { old: String, new: String },
    /// A member joining as `id`; `fresh` is the join order of an id made by
    /// this join.
    Member { id: String, fresh: Option<u64> },
}

/// The group's mode and protocols must fit the join's while it has members;
/// a group without members takes the join's. `me` is the member the join is
/// (its candidates are left out).
pub(super) fn fit_protocols<R>(
    g: &mut Group<R>,
    join: &ClientJoinSpec,
    me: &str,
) -> Result<(), GroupError> {
    if !g.members.is_empty() || !g.pending.is_empty() {
        let fits = match &g.mode {
            Mode::Broker => false,
            Mode::Client { protocol_type } => {
                *protocol_type == join.protocol_type
                    && candidates(g, Some(me))
                        .is_none_or(|c| join.protocols.iter().any(|(n, _)| c.contains(n)))
            }
        };
        if !fits {
            return Err(GroupError::InconsistentProtocol);
        }
    } else if !g.is_client() || g.protocol_type() != join.protocol_type {
        g.mode = Mode::Client {
            protocol_type: join.protocol_type.clone(),
        };
    }
    Ok(())
}

/// Which member the join is. `fresh` is the id (and join order) made for a
/// join without a member id; `replacing` the member a returning static
/// member replaces. A fresh id of a group that asks for member ids first
/// (not a static member's) is handed out and refused with
/// [`GroupError::MemberIdRequired`].
pub(super) fn identify<R>(
    g: &mut Group<R>,
    group: &str,
    fresh: Option<(String, u64)>,
    replacing: Option<String>,
    p: &ClientJoinParams,
    now: u64,
) -> Result<Identity, GroupError> {
    let instance = p.join.group_instance_id.as_deref();
    let (id, fresh) = match (fresh, replacing) {
        (Some((new, _)), Some(old)) => return Ok(Identity::Replaces { old, new }),
        (Some((id, order)), None) => {
            if is_full(group, g.members.len() + g.new_ids.len(), &p.limits) {
                return Err(GroupError::Code(ErrorCode::LimitReached));
            }
            if p.join.require_member_id && instance.is_none() {
                g.new_ids
                    .insert(id.clone(), now.saturating_add(p.session_timeout_ms()));
                return Err(GroupError::MemberIdRequired(id));
            }
            (id, Some(order))
        }
        (None, _) => {
            statics::check(g, &p.join.member_id, instance)?;
            (p.join.member_id.clone(), None)
        }
    };
    let handed_out = fresh.is_none() && g.new_ids.remove(&id).is_some();
    if fresh.is_none() && !handed_out && !g.members.contains_key(&id) {
        return Err(GroupError::Code(ErrorCode::UnknownMember));
    }
    Ok(Identity::Member { id, fresh })
}

/// The member's place in the join order: a member keeps its place; a fresh
/// id has its own; a handed-out id takes the next place now.
pub(super) fn join_order<R>(g: &Group<R>, id: &str, fresh: Option<u64>, seq: &mut u64) -> u64 {
    match (g.members.get(id), fresh) {
        (Some(m), _) => m.seq,
        (None, Some(o)) => o,
        (None, None) => {
            *seq += 1;
            *seq
        }
    }
}

/// A known member with the same metadata, while no rebalance is needed,
/// gets the current generation back (the leader re-forms the generation
/// instead while stable: its rejoin is how it asks for a rebalance).
pub(super) fn current_generation<R>(
    g: &mut Group<R>,
    id: &str,
    join: &ClientJoinSpec,
    now: u64,
) -> Option<ClientJoined> {
    let same = g.members.get(id).is_some_and(|m| {
        m.client
            .as_ref()
            .is_some_and(|c| c.protocols == join.protocols)
    });
    let answers = match g.state {
        GroupState::Stable => id != g.leader,
        GroupState::CompletingRebalance { .. } => true,
        _ => false,
    };
    if !(same && answers) {
        return None;
    }
    if let Some(m) = g.members.get_mut(id) {
        m.last_seen = now;
    }
    Some(client_response(g, id))
}

/// Enters the member with the join's metadata, refused with LIMIT_REACHED
/// when client-assigned members would then hold more than the limit
/// (`held` is what they hold over all groups now). A known static member
/// rejoining without its instance id stays static. Returns whether the
/// member is new to the group.
pub(super) fn enter<R>(
    g: &mut Group<R>,
    group: &str,
    (id, order): (&str, u64),
    p: ClientJoinParams,
    held: usize,
    now: u64,
) -> Result<bool, GroupError> {
    let (session_timeout_ms, rebalance_timeout_ms) =
        (p.session_timeout_ms(), p.rebalance_timeout_ms());
    let instance = p.join.group_instance_id.or_else(|| {
        g.members
            .get(id)
            .and_then(|m| m.client.as_ref())
            .and_then(|c| c.instance.clone())
    });
    let client = ClientMember {
        client_id: p.join.client_id,
        client_host: p.join.client_host,
        instance: instance.clone(),
        protocols: p.join.protocols,
        assignment: Bytes::new(),
        partitions: Vec::new(),
    };
    let before = g
        .members
        .get(id)
        .and_then(|m| m.client.as_ref())
        .map_or(0, ClientMember::bytes);
    if held.saturating_sub(before).saturating_add(client.bytes()) > p.limits.max_client_bytes {
        tracing::warn!(
            group,
            bytes = client.bytes(),
            held,
            "join refused: client-assigned members would hold more than {} bytes of metadata and assignments",
            p.limits.max_client_bytes
        );
        return Err(GroupError::Code(ErrorCode::LimitReached));
    }
    let old = g.members.remove(id);
    g.members.insert(
        id.to_owned(),
        Member {
            topics: p.join.topics,
            session_timeout_ms,
            rebalance_timeout_ms,
            last_seen: now,
            joined_at: old.as_ref().map_or(now, |m| m.joined_at),
            seq: order,
            client: Some(client),
        },
    );
    if let Some(i) = instance {
        g.statics.insert(i, id.to_owned());
    }
    Ok(old.is_none())
}

/// The initial rebalance delay (`group.initial.rebalance.delay.ms`): a group
/// that `forming` waits `delay` for more members (within its rebalance
/// timeout), and each new member restarts the wait.
pub(super) fn delay_initial_rebalance<R>(
    g: &mut Group<R>,
    forming: bool,
    new_member: bool,
    delay: u64,
    now: u64,
) {
    if forming && delay > 0 {
        let cap = now.saturating_add(g.rebalance_timeout());
        g.initial = Some(InitialDelay {
            until: now.saturating_add(delay).min(cap),
            cap,
            delay,
        });
    } else if let Some(i) = g.initial.as_mut().filter(|_| new_member) {
        i.until = now.saturating_add(i.delay).min(i.cap);
    }
}

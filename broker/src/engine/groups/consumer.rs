//! Consumer-protocol groups (KIP-848) in the engine: heartbeats through the
//! state machine of [`crate::coordinator::consumer`] with the configured
//! clock's time, session expiry on the ticker, describe and list, and the
//! fencing of their members' offset commits (in `groups.rs`).
//!
//! A group id is either a classic group's (JoinGroup, or Flume's own
//! groups), a share group's or a consumer-protocol group's: a consumer
//! heartbeat joining a group that a classic group with members or a share
//! group holds is refused ([`ConsumerError::NotConsumerGroup`], Kafka's
//! GROUP_ID_NOT_FOUND), and so is a classic join of a consumer-protocol
//! group with members (INCONSISTENT_GROUP_PROTOCOL). An empty classic group
//! (committed offsets only) is taken over; the offsets stay.

use flume_rt::sync::lock;

use super::Groups;
use crate::coordinator::consumer::TopicSource;
pub use crate::coordinator::consumer::{
    Assignment, ConsumerBeat, ConsumerGroupError, ConsumerHeartbeat,
};
use crate::engine::records::Records;

/// Why a consumer heartbeat was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumerError {
    /// See [`ConsumerGroupError`].
    #[error(transparent)]
    Group(#[from] ConsumerGroupError),
    /// The group id is a classic group's with members, or a share group's.
    #[error("group {0} is not a consumer-protocol group")]
    NotConsumerGroup(String),
    /// Not a valid group id.
    #[error("invalid group id {0:?}")]
    InvalidGroupId(String),
}

/// One member as describe reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerMemberView {
    /// Its id.
    pub member_id: String,
    /// A static member's instance id.
    pub instance_id: Option<String>,
    /// Its rack.
    pub rack_id: Option<String>,
    /// Its epoch.
    pub member_epoch: i32,
    /// The client's id.
    pub client_id: String,
    /// The client's address.
    pub client_host: String,
    /// Its subscription by name.
    pub subscribed: Vec<String>,
    /// Its regex subscription.
    pub regex: Option<String>,
    /// Its current assignment.
    pub assignment: Assignment,
    /// Its target assignment.
    pub target: Assignment,
}

/// A consumer-protocol group as describe reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupView {
    /// Its id.
    pub group: String,
    /// "Stable" or "Reconciling" (Kafka's names).
    pub state: &'static str,
    /// The group epoch.
    pub epoch: i32,
    /// The epoch of the target assignment.
    pub assignment_epoch: i32,
    /// The assignor of the target.
    pub assignor: &'static str,
    /// Its members, by id.
    pub members: Vec<ConsumerMemberView>,
}

impl Groups {
    /// A consumer-protocol heartbeat (KIP-848): joins, keeps, reconciles or
    /// removes a member and answers its epoch and assignment.
    ///
    /// # Errors
    /// See [`ConsumerError`].
    pub fn consumer_heartbeat(
        &self,
        hb: ConsumerHeartbeat<'_>,
    ) -> Result<ConsumerBeat, ConsumerError> {
        if !crate::config::valid_group_id(hb.group) {
            return Err(ConsumerError::InvalidGroupId(hb.group.to_owned()));
        }
        let now = self.mono_ms();
        // The classic groups' lock first, as commits take them.
        let classic = lock(&self.classic);
        let mut consumers = lock(&self.consumer);
        if consumers.group(hb.group).is_none()
            && (classic.state(hb.group).is_some_and(|(_, _, n)| n > 0)
                || self.shares.is_share_group(hb.group))
        {
            return Err(ConsumerError::NotConsumerGroup(hb.group.to_owned()));
        }
        drop(classic);
        Ok(consumers.heartbeat(hb, &RecordsTopics(&self.records), now)?)
    }

    /// True when `group` is a consumer-protocol group with members.
    pub fn is_consumer_group(&self, group: &str) -> bool {
        lock(&self.consumer).group(group).is_some()
    }

    /// The consumer-protocol groups with members, sorted.
    pub fn list_consumer_groups(&self) -> Vec<String> {
        lock(&self.consumer).names()
    }

    /// Describes a consumer-protocol group; `None` if it has no members.
    pub fn describe_consumer_group(&self, group: &str) -> Option<ConsumerGroupView> {
        let groups = lock(&self.consumer);
        let g = groups.group(group)?;
        Some(ConsumerGroupView {
            group: group.to_owned(),
            state: if g.is_stable() {
                "Stable"
            } else {
                "Reconciling"
            },
            epoch: g.epoch,
            assignment_epoch: g.assignment_epoch,
            assignor: g.assignor.name(),
            members: g
                .members()
                .map(|m| ConsumerMemberView {
                    member_id: m.member_id.clone(),
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack_id.clone(),
                    member_epoch: m.member_epoch,
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed: m.subscribed.clone(),
                    regex: m.regex.as_ref().map(|r| r.pattern.clone()),
                    assignment: m.assigned.clone(),
                    target: g.target_of(&m.member_id),
                })
                .collect(),
        })
    }

    /// Removes consumer-protocol members whose session ran out or that did
    /// not give up revoked partitions in time. Run by the ticker.
    pub(in crate::engine) fn tick_consumer_groups(&self) {
        let now = self.mono_ms();
        for (group, member) in lock(&self.consumer).expire(now) {
            tracing::info!(%group, %member, "consumer-protocol member removed (session or rebalance timeout)");
        }
    }
}

/// The topics as the coordinator reads them.
struct RecordsTopics<'a>(&'a Records);

impl TopicSource for RecordsTopics<'_> {
    fn partitions(&self, topic: &str) -> Option<i32> {
        self.0
            .topic(topic)
            .map(|t| i32::try_from(t.partitions.len()).unwrap_or(i32::MAX))
    }

    fn names(&self) -> Vec<String> {
        self.0.topics().iter().map(|t| t.name.clone()).collect()
    }
}

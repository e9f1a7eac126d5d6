//! The groups service: classic groups (Flume's broker-assigned groups and
//! Kafka's client-assigned ones, through the coordinator of
//! [`crate::coordinator::group`]), consumer-protocol groups (KIP-848,
//! [`crate::coordinator::consumer`]) and the committed offsets of both. It
//! owns the two coordinators and the offsets store.
//!
//! - `classic.rs`: joins (parked until their rebalance completes), syncs,
//!   heartbeats, leaves, fenced commits, committed positions, describe, list.
//! - `consumer.rs`: consumer-protocol heartbeats, session expiry, describe
//!   and list.
//! - here: the service, deleting a group or its offsets, what topic
//!   changes do to groups, maintenance and shutdown.

use std::sync::{Arc, Mutex};

use flume_protocol::ErrorCode;
use flume_rt::sync::lock;
use futures::channel::oneshot;

use super::records::Records;
use super::share::Shares;
use super::Shutdown;
use crate::config::{valid_group_id, BrokerConfig};
use crate::coordinator::consumer::ConsumerGroups;
use crate::coordinator::group::{Answer, Coordinator, Ready};
use crate::coordinator::offsets::{OffsetKey, Offsets};
use crate::domain::{GroupError, GroupSummary, TopicPartition};
use crate::error::BrokerError;

mod classic;
mod consumer;

pub use classic::{CLIENT_GROUP_BYTES, READER_END_PROBE};
pub use consumer::{
    Assignment, ConsumerBeat, ConsumerError, ConsumerGroupError, ConsumerGroupView,
    ConsumerHeartbeat, ConsumerMemberView,
};

type JoinReply = oneshot::Sender<Result<Answer, GroupError>>;

/// The groups service: both coordinators and the committed offsets.
#[derive(Debug)]
pub struct Groups {
    config: Arc<BrokerConfig>,
    records: Arc<Records>,
    /// A group id is a classic group's, a consumer-protocol group's or a
    /// share group's: the consumer heartbeat asks the share groups.
    shares: Arc<Shares>,
    classic: Mutex<Coordinator<JoinReply>>,
    /// Consumer-protocol groups (KIP-848; see `consumer.rs`). Taken after
    /// `classic` when both are held.
    consumer: Mutex<ConsumerGroups>,
    offsets: Offsets,
    shutdown: Shutdown,
}

impl Groups {
    /// The service over the offsets store opened at start; `nonce` makes
    /// member ids unique across restarts.
    pub(in crate::engine) fn new(
        config: Arc<BrokerConfig>,
        records: Arc<Records>,
        shares: Arc<Shares>,
        offsets: Offsets,
        shutdown: Shutdown,
        nonce: u64,
    ) -> Self {
        let consumer = ConsumerGroups::new(config.consumer_groups, nonce);
        Groups {
            config,
            records,
            shares,
            classic: Mutex::new(Coordinator::new(nonce)),
            consumer: Mutex::new(consumer),
            offsets,
            shutdown,
        }
    }

    fn deliver(ready: Vec<Ready<JoinReply>>) {
        for (tx, result) in ready {
            let _ = tx.send(result);
        }
    }

    /// The coordinators' time, from the configured [`crate::Clock`].
    fn mono_ms(&self) -> u64 {
        self.config.clock.mono_ms()
    }

    fn is_shutting_down(&self) -> bool {
        self.shutdown.is_begun()
    }

    /// Expires silent members of classic and consumer-protocol groups and
    /// completes rebalances past their deadline. Run by the ticker.
    pub(in crate::engine) fn tick(&self) {
        self.tick_classic();
        self.tick_consumer_groups();
    }

    /// Answers every parked join and sync with `code` (shutdown).
    pub(in crate::engine) fn begin_shutdown(&self) {
        let ready = lock(&self.classic).drain(ErrorCode::ShuttingDown);
        Self::deliver(ready);
    }

    /// A topic got more partitions: the groups subscribed to it rebalance.
    /// Returns the groups that did.
    pub(in crate::engine) fn topic_grew(&self, topic: &str) -> Vec<String> {
        let now = self.mono_ms();
        let (ready, rebalanced) = lock(&self.classic).topic_grew(topic, now);
        Self::deliver(ready);
        rebalanced
    }

    /// Drops every committed offset of a deleted topic; returns how many.
    ///
    /// # Errors
    /// The offsets store could not be written.
    pub(in crate::engine) async fn forget_topic(&self, topic: &str) -> Result<usize, BrokerError> {
        let owned = topic.to_owned();
        self.offsets.remove_where(move |k| k.1 == owned).await
    }

    /// Writes what is due of the committed offsets (the interval fsync, compaction).
    pub(in crate::engine) async fn maintain(&self) {
        self.offsets.maintain().await;
    }

    /// Flushes the committed offsets to disk.
    pub(in crate::engine) async fn shutdown(&self) {
        self.offsets.shutdown().await;
    }

    /// KIP-447's fencing of a TxnOffsetCommit: the member must be in the
    /// group's current generation, and a static member's instance must
    /// still be its own.
    ///
    /// # Errors
    /// As the group's own commits.
    pub(in crate::engine) fn fence_txn_commit(
        &self,
        member: crate::domain::Member<'_>,
        instance: Option<&str>,
    ) -> Result<(), GroupError> {
        lock(&self.classic)
            .check_commit_as(
                member.group,
                (member.member_id, instance),
                member.generation,
            )
            .map(drop)
    }

    /// Stores a committed transaction's offsets (the transaction's
    /// completion: its fencing was checked when the offsets were added).
    ///
    /// # Errors
    /// The offsets store could not be written.
    pub(in crate::engine) async fn store_txn_offsets(
        &self,
        group: &str,
        offsets: Vec<(String, i32, crate::coordinator::offsets::Committed)>,
    ) -> Result<(), BrokerError> {
        self.offsets.commit(group, offsets).await
    }

    /// Every group's state, generation, members and rebalances.
    pub fn group_summaries(&self) -> Vec<GroupSummary> {
        lock(&self.classic).summaries()
    }

    /// Up to `limit` committed offsets: ((group, topic, partition), offset).
    pub fn committed_offsets(&self, limit: usize) -> Vec<(OffsetKey, i64)> {
        self.offsets.entries(limit)
    }

    /// Deletes a group's committed offsets (every topic), durably; only
    /// while it has no members, as Kafka's DeleteGroups. Returns how many
    /// offsets went.
    ///
    /// # Errors
    /// INVALID_NAME, GROUP_NOT_EMPTY, UNKNOWN_GROUP (no members and no
    /// committed offsets: nothing to delete), STORAGE_ERROR.
    pub async fn delete_group(&self, group: &str) -> Result<usize, ErrorCode> {
        if !valid_group_id(group) {
            return Err(ErrorCode::InvalidName);
        }
        let members = self.group_members(group);
        if members.is_some_and(|n| n > 0) {
            return Err(ErrorCode::GroupNotEmpty);
        }
        let g = group.to_owned();
        let n = self
            .offsets
            .remove_where(move |k| k.0 == g)
            .await
            .map_err(|e| {
                tracing::error!(group, error = %e, "deleting the group's offsets failed");
                e.code()
            })?;
        if n == 0 {
            // Nothing to delete: a group without members is known by its commits alone.
            return Err(ErrorCode::UnknownGroup);
        }
        tracing::info!(group, committed_offsets_dropped = n, "group deleted");
        Ok(n)
    }

    /// Deletes a group's committed offsets on the partitions named (Kafka's
    /// OffsetDelete), durably, as [`Groups::delete_group`] does for all of
    /// them. A partition of a topic a member of the group subscribes to
    /// keeps its offset and gets GROUP_NOT_EMPTY (Kafka's
    /// GROUP_SUBSCRIBED_TO_TOPIC): it is in use. A partition with nothing
    /// committed is answered NONE (nothing is left to delete), as Kafka does.
    /// One code per partition, in order.
    ///
    /// # Errors
    /// INVALID_NAME, UNKNOWN_GROUP (no members and no committed offsets),
    /// STORAGE_ERROR (nothing deleted then).
    pub async fn delete_offsets(
        &self,
        group: &str,
        partitions: &[TopicPartition],
    ) -> Result<Vec<ErrorCode>, ErrorCode> {
        if !valid_group_id(group) {
            return Err(ErrorCode::InvalidName);
        }
        if self.group_members(group).is_none_or(|n| n == 0) && !self.offsets.has_group(group) {
            return Err(ErrorCode::UnknownGroup);
        }
        let mut codes = Vec::with_capacity(partitions.len());
        let mut gone = std::collections::HashSet::new();
        {
            let groups = lock(&self.classic);
            for tp in partitions {
                let code = match self.records.topic(&tp.topic) {
                    None => ErrorCode::UnknownTopic,
                    Some(t) if t.partition(tp.partition).is_none() => ErrorCode::UnknownPartition,
                    Some(_) if groups.subscribes(group, &tp.topic) => ErrorCode::GroupNotEmpty,
                    Some(_) => {
                        gone.insert((group.to_owned(), tp.topic.clone(), tp.partition));
                        ErrorCode::None
                    }
                };
                codes.push(code);
            }
        }
        if gone.is_empty() {
            return Ok(codes);
        }
        let n = self
            .offsets
            .remove_where(move |k| gone.contains(k))
            .await
            .map_err(|e| {
                tracing::error!(group, error = %e, "deleting the group's offsets failed");
                e.code()
            })?;
        tracing::info!(
            group,
            committed_offsets_dropped = n,
            "committed offsets deleted"
        );
        Ok(codes)
    }
}

/// Positions and lag, from the committed offsets and the logs.
impl Groups {
    /// Where `group` reads `partition` of `topic` next: its committed offset,
    /// or the log start when nothing is committed or retention has passed
    /// the commit (the rule [`flume_protocol::lag`] counts from).
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, UNKNOWN_PARTITION.
    pub fn resume_offset(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
    ) -> Result<u64, ErrorCode> {
        let t = self.records.topic(topic).ok_or(ErrorCode::UnknownTopic)?;
        let part = t.partition(partition).ok_or(ErrorCode::UnknownPartition)?;
        let committed = self
            .committed(group, topic, partition)
            .and_then(|c| u64::try_from(c).ok())
            .unwrap_or(0);
        Ok(committed.max(part.start_offset()))
    }

    /// A group's lag on every partition of `topic` ([`flume_protocol::lag`]).
    ///
    /// # Errors
    /// UNKNOWN_TOPIC.
    pub fn group_lag(
        &self,
        group: &str,
        topic: &str,
    ) -> Result<std::collections::BTreeMap<u32, u64>, ErrorCode> {
        let t = self.records.topic(topic).ok_or(ErrorCode::UnknownTopic)?;
        Ok(t.offsets()
            .into_iter()
            .map(|o| {
                let committed = self.committed(group, topic, o.partition).unwrap_or(-1);
                let lag = flume_protocol::lag(committed, o.log_start, o.log_end);
                (
                    u32::try_from(o.partition).unwrap_or(0),
                    u64::try_from(lag).unwrap_or(0),
                )
            })
            .collect())
    }
}

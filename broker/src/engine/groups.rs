//! Groups and offsets: joins (parked until their rebalance completes),
//! heartbeats, leaves, fenced commits and committed positions.

use std::time::Duration;

use flume_protocol::ErrorCode;
use futures::channel::oneshot;

use super::{lock, Engine, JoinReply};
use crate::config::valid_name;
use crate::domain::{GroupPosition, JoinSpec, Joined, Member, TopicPartition};
use crate::error::BrokerError;
use crate::group::{GroupLimits, JoinParams, Ready};
use crate::offsets::{NotQueued, Offsets};

impl Engine {
    pub(super) fn deliver(ready: Vec<Ready<JoinReply>>) {
        for (tx, result) in ready {
            let _ = tx.send(result);
        }
    }

    /// Joins a member to a group and waits until the rebalance completes;
    /// the subscribed topics are created if auto-create is on.
    ///
    /// # Errors
    /// INVALID_NAME, INVALID_REQUEST (no topics, or more than
    /// `max_topics_per_join`), UNKNOWN_MEMBER, LIMIT_REACHED, SHUTTING_DOWN.
    pub async fn join_group(&self, req: JoinSpec) -> Result<Joined, ErrorCode> {
        if !valid_name(&req.group) {
            return Err(ErrorCode::InvalidName);
        }
        let max_topics = self.config.max_topics_per_join;
        if req.topics.len() > max_topics {
            tracing::debug!(
                group = %req.group,
                topics = req.topics.len(),
                "join refused: the topic list is longer than max_topics_per_join ({max_topics})"
            );
            return Err(ErrorCode::InvalidRequest);
        }
        if req.topics.is_empty() {
            return Err(ErrorCode::InvalidRequest);
        }
        for t in &req.topics {
            if let Err(e) = self.auto_create(t).await {
                return Err(e.code());
            }
        }
        let ms = |d: Duration, lo: u64, hi: u64| {
            u64::try_from(d.as_millis()).unwrap_or(hi).clamp(lo, hi)
        };
        let params = JoinParams {
            member_id: req.member_id,
            topics: req.topics,
            session_timeout_ms: ms(req.session_timeout, 100, 300_000),
            rebalance_timeout_ms: ms(req.rebalance_timeout, 0, 300_000),
            assignor: req.assignor,
            limits: GroupLimits {
                max_groups: self.config.max_groups,
                max_members: self.config.max_members_per_group,
            },
        };
        let (tx, rx) = oneshot::channel();
        if self.is_shutting_down() {
            return Err(ErrorCode::ShuttingDown);
        }
        let ready = {
            let now = self.mono_ms();
            let mut g = lock(&self.groups);
            g.join(&req.group, params, now, tx, &|t| self.partitions_of(t))
        };
        Self::deliver(ready);
        rx.await.unwrap_or(Err(ErrorCode::ShuttingDown))
    }

    /// A member's heartbeat.
    ///
    /// # Errors
    /// UNKNOWN_MEMBER, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS.
    pub fn heartbeat(&self, group: &str, member: &str, generation: i32) -> Result<(), ErrorCode> {
        let now = self.mono_ms();
        lock(&self.groups).heartbeat(group, member, generation, now)
    }

    /// A member leaves its group (its partitions go to the others).
    ///
    /// # Errors
    /// UNKNOWN_MEMBER.
    pub fn leave_group(&self, group: &str, member: &str) -> Result<(), ErrorCode> {
        let now = self.mono_ms();
        let ready = lock(&self.groups).leave(group, member, now, &|t| self.partitions_of(t))?;
        Self::deliver(ready);
        Ok(())
    }

    /// How many members a group has, counting those whose join is parked
    /// waiting for a rebalance; `None` if the group does not exist.
    pub fn group_members(&self, group: &str) -> Option<usize> {
        lock(&self.groups)
            .state(group)
            .map(|(_, _, members)| members)
    }

    /// When the coordinator last heard from a member (join or heartbeat), in
    /// the clock's [`crate::Clock::mono_ms`]; `None` if it is not a member.
    /// Lets a test on a manual clock wait until a live member has heartbeated
    /// before moving the clock again.
    pub fn member_last_seen(&self, group: &str, member: &str) -> Option<u64> {
        lock(&self.groups).last_seen(group, member)
    }

    pub(super) fn tick_groups(&self) {
        let now = self.mono_ms();
        let ready = lock(&self.groups).tick(now, &|t| self.partitions_of(t));
        Self::deliver(ready);
    }

    // ------------------------------------------------------------ offsets

    /// Commits offsets, fenced by member and generation (-1 and an empty
    /// member id commit outside membership). Returns each partition's
    /// outcome, in order: UNKNOWN_TOPIC, UNKNOWN_PARTITION or
    /// OFFSET_OUT_OF_RANGE (a negative offset) leave that partition alone.
    ///
    /// The fencing check and the hand-off to the offsets writer happen under
    /// the groups lock, so a rebalance cannot slip between them and commits
    /// reach the file in the order they were checked; the write and its fsync
    /// happen after the lock is released, off the executor. Answers once the
    /// commit is written (and fsynced under `--fsync always`).
    ///
    /// # Errors
    /// INVALID_NAME, UNKNOWN_MEMBER, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS,
    /// STORAGE_ERROR, INVALID_REQUEST (offset store full), SHUTTING_DOWN.
    pub async fn commit_offsets(
        &self,
        member: Member<'_>,
        offsets: &[(TopicPartition, i64)],
    ) -> Result<Vec<ErrorCode>, ErrorCode> {
        if !valid_name(member.group) {
            return Err(ErrorCode::InvalidName);
        }
        let mut results = Vec::with_capacity(offsets.len());
        let mut store = Vec::with_capacity(offsets.len());
        for (tp, offset) in offsets {
            results.push(match self.topic(&tp.topic) {
                None => ErrorCode::UnknownTopic,
                Some(t) if t.partition(tp.partition).is_none() => ErrorCode::UnknownPartition,
                Some(_) if *offset < 0 => ErrorCode::OffsetOutOfRange,
                Some(_) => {
                    store.push((tp.topic.clone(), tp.partition, *offset));
                    ErrorCode::None
                }
            });
        }
        let rx = loop {
            let room = self.offsets.room();
            let queued = {
                let groups = lock(&self.groups);
                groups.check_commit(member.group, member.member_id, member.generation)?;
                if store.is_empty() {
                    return Ok(results);
                }
                self.offsets.try_queue(member.group, store)
            };
            match queued {
                Ok(rx) => break rx,
                // The queue is full: wait for the writer, then check the fencing again.
                Err(NotQueued::Full(back)) => {
                    store = back;
                    room.await;
                }
                Err(NotQueued::Closed) => return Err(ErrorCode::ShuttingDown),
            }
        };
        if let Err(e) = crate::offsets::finish(rx).await {
            tracing::error!(group = %member.group, error = %e, "offset commit failed");
            return Err(e.code());
        }
        Ok(results)
    }

    /// Stores offsets outside group membership (embedded mode), on the calling thread.
    ///
    /// # Errors
    /// Storage errors.
    pub fn store_offsets(
        &self,
        group: &str,
        offsets: &[(String, i32, i64)],
    ) -> Result<(), BrokerError> {
        self.offsets.commit_now(group, offsets)
    }

    /// The committed offset of one partition, if any.
    pub fn committed(&self, group: &str, topic: &str, partition: i32) -> Option<i64> {
        self.offsets.get(group, topic, partition)
    }

    /// The committed offsets (tests, observability).
    pub fn offsets(&self) -> &Offsets {
        &self.offsets
    }

    /// A group's committed offset and the log bounds of each partition of
    /// the topics named (an empty list: every partition of the topic), in
    /// order. A topic that does not exist gives one UNKNOWN_TOPIC entry.
    pub fn positions<'a>(
        &self,
        group: &str,
        topics: impl IntoIterator<Item = (&'a str, &'a [i32])>,
    ) -> Vec<GroupPosition> {
        let mut out = Vec::new();
        for (topic, wanted) in topics {
            let Some(t) = self.topic(topic) else {
                out.push(GroupPosition {
                    at: TopicPartition::new(topic, -1),
                    error: ErrorCode::UnknownTopic,
                    committed: -1,
                    log_start: -1,
                    log_end: -1,
                });
                continue;
            };
            let all: Vec<i32>;
            let list = if wanted.is_empty() {
                all = (0..t.partitions.len())
                    .filter_map(|p| i32::try_from(p).ok())
                    .collect();
                &all
            } else {
                wanted
            };
            for &p in list {
                let (error, log_start, log_end) = match t.partition(p) {
                    Some(part) => {
                        let o = part.offsets();
                        (ErrorCode::None, o.log_start, o.log_end)
                    }
                    None => (ErrorCode::UnknownPartition, 0, 0),
                };
                out.push(GroupPosition {
                    at: TopicPartition::new(topic, p),
                    error,
                    committed: self.offsets.get(group, topic, p).unwrap_or(-1),
                    log_start,
                    log_end,
                });
            }
        }
        out
    }
}

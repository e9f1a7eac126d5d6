//! Groups and offsets: joins (parked until their rebalance completes),
//! syncs of client-assigned groups (parked until the leader's assignment),
//! heartbeats, leaves, fenced commits, committed positions, describe and list.

use std::sync::Arc;
use std::time::Duration;

use flume_protocol::ErrorCode;
use flume_rt as rt;
use futures::channel::oneshot;
use futures::FutureExt;

use super::Groups;
use crate::engine::records::FetchMemory;
use flume_rt::sync::lock;

/// How close to the log end a committed offset must be for
/// [`Groups::reader_positions`] to look at what lies between (a partition
/// lagging further is not probed; a probe stops at the first record).
pub const READER_END_PROBE: u64 = 4096;
use crate::config::valid_group_id;
use crate::coordinator::group::{Answer, ClientJoinParams, GroupLimits, JoinParams};
use crate::coordinator::offsets::{Committed, NotQueued, Offsets};
use crate::domain::{
    ClientJoinSpec, ClientJoined, FetchSpec, Fetched, GroupDescription, GroupError, GroupListing,
    GroupPhase, GroupPosition, JoinSpec, Joined, Member, SyncSpec, Synced, TopicPartition,
};
use crate::error::BrokerError;

/// Most bytes of protocol metadata and assignments (chosen by the peers)
/// that the members of client-assigned (Kafka) groups hold, over all groups.
/// A join or a leader's assignment past it is refused (LIMIT_REACHED; Kafka's
/// GROUP_MAX_SIZE_REACHED) and logged.
pub const CLIENT_GROUP_BYTES: usize = 64 << 20;

/// A waiting heartbeat's place, given back when it is dropped (answered,
/// or its connection closed).
struct ParkedHeartbeat(Arc<Groups>);

impl Drop for ParkedHeartbeat {
    fn drop(&mut self) {
        lock(&self.0.classic).unpark_heartbeat();
    }
}

impl Groups {
    /// Joins a member to a group and waits until the rebalance completes;
    /// the subscribed topics are created if auto-create is on. The session
    /// timeout is taken into the broker's bounds
    /// ([`Groups::session_bounds_ms`]): Flume's JOIN_GROUP has always
    /// adjusted it rather than refused it.
    ///
    /// # Errors
    /// INVALID_NAME, INVALID_REQUEST (no topics, or more than
    /// `max_topics_per_join`), UNKNOWN_MEMBER, LIMIT_REACHED, SHUTTING_DOWN.
    pub async fn join_group(&self, req: JoinSpec) -> Result<Joined, ErrorCode> {
        if !valid_group_id(&req.group) {
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
            if let Err(e) = self.records.auto_create(t).await {
                return Err(e.code());
            }
        }
        let ms = |d: Duration, lo: u64, hi: u64| {
            u64::try_from(d.as_millis()).unwrap_or(hi).clamp(lo, hi)
        };
        let (session_lo, session_hi) = self.session_bounds_ms();
        let params = JoinParams {
            member_id: req.member_id,
            topics: req.topics,
            session_timeout_ms: ms(req.session_timeout, session_lo, session_hi),
            rebalance_timeout_ms: ms(req.rebalance_timeout, 0, 300_000),
            assignor: req.assignor,
            limits: self.limits(),
        };
        let (tx, rx) = oneshot::channel();
        if self.is_shutting_down() {
            return Err(ErrorCode::ShuttingDown);
        }
        let ready = {
            let now = self.mono_ms();
            let mut g = lock(&self.classic);
            g.join(&req.group, params, now, tx, &|t| {
                self.records.partitions_of(t)
            })
        };
        Self::deliver(ready);
        match rx.await {
            Ok(Ok(Answer::Joined(j))) => Ok(j),
            Ok(Ok(_)) => Err(ErrorCode::Unknown),
            Ok(Err(e)) => Err(e.code()),
            Err(_) => Err(ErrorCode::ShuttingDown),
        }
    }

    /// The session timeouts a member may have, in ms: the broker's
    /// `group.min.session.timeout.ms` and `group.max.session.timeout.ms`
    /// (a maximum below the minimum is taken as the minimum).
    pub fn session_bounds_ms(&self) -> (u64, u64) {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let lo = ms(self.config.group_min_session_timeout);
        (lo, ms(self.config.group_max_session_timeout).max(lo))
    }

    fn limits(&self) -> GroupLimits {
        GroupLimits {
            max_groups: self.config.max_groups,
            max_members: self.config.max_members_per_group,
            max_client_bytes: CLIENT_GROUP_BYTES,
            initial_rebalance_delay_ms: u64::try_from(
                self.config.group_initial_rebalance_delay.as_millis(),
            )
            .unwrap_or(u64::MAX),
        }
    }

    /// Joins a member to a group whose leader assigns the partitions
    /// (Kafka's JoinGroup) and waits until every known member has joined (or
    /// the rebalance timeout passed): the answer names the generation, the
    /// protocol chosen and the leader, and gives the leader every member's
    /// metadata.
    ///
    /// A static member (with a group instance id) that comes back under a
    /// new member id takes the place and assignment of the one before it
    /// (`coordinator::group`'s `statics.rs`).
    ///
    /// # Errors
    /// [`GroupError::MemberIdRequired`] (join again with that id),
    /// [`GroupError::InconsistentProtocol`], [`GroupError::InvalidSessionTimeout`],
    /// [`GroupError::FencedInstanceId`], and the codes INVALID_NAME,
    /// INVALID_REQUEST (an empty group instance id, or one longer than a
    /// group id may be), UNKNOWN_MEMBER, LIMIT_REACHED, SHUTTING_DOWN.
    pub async fn join_client_group(&self, req: ClientJoinSpec) -> Result<ClientJoined, GroupError> {
        if !valid_group_id(&req.group) {
            return Err(ErrorCode::InvalidName.into());
        }
        if req
            .group_instance_id
            .as_deref()
            .is_some_and(|i| !valid_group_id(i))
        {
            return Err(ErrorCode::InvalidRequest.into());
        }
        let session = u64::try_from(req.session_timeout.as_millis()).unwrap_or(u64::MAX);
        let (min, max) = self.session_bounds_ms();
        if !(min..=max).contains(&session) {
            return Err(GroupError::InvalidSessionTimeout {
                ms: session,
                min,
                max,
            });
        }
        let mut join = req;
        join.rebalance_timeout = join.rebalance_timeout.min(Duration::from_secs(300));
        let group = join.group.clone();
        let params = ClientJoinParams {
            join,
            limits: self.limits(),
        };
        let (tx, rx) = oneshot::channel();
        if self.is_shutting_down() {
            return Err(ErrorCode::ShuttingDown.into());
        }
        let ready = {
            let now = self.mono_ms();
            let mut groups = lock(&self.classic);
            // A consumer-protocol group with members is not joined this way.
            if lock(&self.consumer).group(&group).is_some() {
                return Err(GroupError::InconsistentProtocol);
            }
            groups.join_client(&group, params, now, tx)
        };
        Self::deliver(ready);
        match rx.await {
            Ok(Ok(Answer::ClientJoined(j))) => Ok(j),
            Ok(Ok(_)) => Err(ErrorCode::Unknown.into()),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ErrorCode::ShuttingDown.into()),
        }
    }

    /// A client-assigned group's SyncGroup: the leader's brings every
    /// member's assignment; every member waits (at most until the rebalance
    /// timeout) for the leader's and gets its own assignment.
    ///
    /// # Errors
    /// [`GroupError::InconsistentProtocol`], [`GroupError::FencedInstanceId`],
    /// and the codes UNKNOWN_MEMBER, ILLEGAL_GENERATION,
    /// REBALANCE_IN_PROGRESS, SHUTTING_DOWN.
    pub async fn sync_group(&self, req: SyncSpec) -> Result<Synced, GroupError> {
        let (tx, rx) = oneshot::channel();
        if self.is_shutting_down() {
            return Err(ErrorCode::ShuttingDown.into());
        }
        let ready = {
            let now = self.mono_ms();
            lock(&self.classic).sync(
                &req.group,
                (&req.member_id, req.group_instance_id.as_deref()),
                req.generation,
                req.protocol_type.as_deref(),
                req.protocol.as_deref(),
                req.assignments,
                CLIENT_GROUP_BYTES,
                now,
                tx,
            )
        };
        Self::deliver(ready);
        match rx.await {
            Ok(Ok(Answer::Synced(s))) => Ok(s),
            Ok(Ok(_)) => Err(ErrorCode::Unknown.into()),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ErrorCode::ShuttingDown.into()),
        }
    }

    /// A group's state, protocol, generation and members with their
    /// assignments. A group the coordinator does not know but with committed
    /// offsets is described as empty; `None` if neither.
    pub fn describe_group(&self, group: &str) -> Option<GroupDescription> {
        if let Some(d) = lock(&self.classic).describe(group) {
            return Some(d);
        }
        self.offsets.has_group(group).then(|| GroupDescription {
            group: group.to_owned(),
            phase: GroupPhase::Empty,
            protocol_type: self.offsets.group_protocol_type(group),
            protocol: String::new(),
            generation: 0,
            leader_id: String::new(),
            members: Vec::new(),
        })
    }

    /// Every group: those the coordinator knows and those with committed
    /// offsets only (listed as empty), sorted by name.
    pub fn list_groups(&self) -> Vec<GroupListing> {
        let mut v = lock(&self.classic).list();
        let known: std::collections::BTreeSet<String> = v.iter().map(|l| l.group.clone()).collect();
        for (g, protocol_type) in self.offsets.groups_with_type() {
            if !known.contains(&g) {
                v.push(GroupListing {
                    group: g,
                    phase: GroupPhase::Empty,
                    protocol_type,
                });
            }
        }
        v.sort_by(|a, b| a.group.cmp(&b.group));
        v
    }

    /// Every committed offset of a group: (topic, partition, offset), sorted.
    pub fn committed_for_group(&self, group: &str) -> Vec<(String, i32, i64)> {
        self.offsets.for_group(group)
    }

    /// A member's heartbeat.
    ///
    /// # Errors
    /// UNKNOWN_MEMBER, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS.
    pub fn heartbeat(&self, group: &str, member: &str, generation: i32) -> Result<(), ErrorCode> {
        let now = self.mono_ms();
        lock(&self.classic).heartbeat(group, member, generation, now)
    }

    /// A heartbeat of a member that may be static: its group instance id,
    /// if given, must still be the member's.
    ///
    /// # Errors
    /// [`GroupError::FencedInstanceId`], UNKNOWN_MEMBER, ILLEGAL_GENERATION,
    /// REBALANCE_IN_PROGRESS.
    pub fn heartbeat_as(
        &self,
        group: &str,
        member: (&str, Option<&str>),
        generation: i32,
    ) -> Result<(), GroupError> {
        let now = self.mono_ms();
        lock(&self.classic).heartbeat_as(group, member, generation, now)
    }

    /// A member's heartbeat that waits (HEARTBEAT_WAIT): answered at once
    /// with the error a HEARTBEAT would get, otherwise when the group starts
    /// a rebalance or loses a member (REBALANCE_IN_PROGRESS, or what the
    /// member's state is then), or after `max_wait` (capped at the member's
    /// session timeout; Ok if nothing changed), or at shutdown.
    ///
    /// At most [`BrokerConfig::max_connections`](crate::config::BrokerConfig)
    /// heartbeats wait at once, broker-wide (a client parks one per
    /// connection); past that one is answered at once, as a HEARTBEAT. A
    /// waiting heartbeat holds its place until its future is dropped (the
    /// connection closing drops it), and only the start of the wait counts
    /// as a sign of life: a peer that is gone is not kept alive by it.
    ///
    /// # Errors
    /// UNKNOWN_MEMBER, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS.
    pub async fn heartbeat_wait(
        self: &Arc<Self>,
        group: &str,
        member: &str,
        generation: i32,
        max_wait: Duration,
    ) -> Result<(), ErrorCode> {
        let (listener, session_ms) = {
            let now = self.mono_ms();
            let mut g = lock(&self.classic);
            let listened = g.heartbeat_listen(group, member, generation, now)?;
            // Shutdown begins by closing the signal, then notifies every group's
            // listeners under this lock (`Coordinator::drain`): a wait that starts
            // after that returns here, one that started before is woken. So a
            // waiting heartbeat needs no listener on the shutdown signal of its
            // own (10,000 of those on one event cost more than the heartbeats).
            if max_wait.is_zero()
                || self.is_shutting_down()
                || !g.park_heartbeat(self.config.max_connections)
            {
                return Ok(());
            }
            listened
        };
        let place = ParkedHeartbeat(Arc::clone(self));
        let wait = max_wait.min(Duration::from_millis(session_ms));
        futures::select! {
            () = listener.fuse() => {},
            () = rt::sleep_coarse(wait).fuse() => {},
        }
        // A statement of its own: the guard goes before `place` takes the lock.
        let answer = lock(&self.classic).check_member(group, member, generation);
        drop(place);
        answer
    }

    /// A group member's fetch (GROUP_FETCH): checked and recorded as a
    /// heartbeat when it starts (the member's error at once if it is not in
    /// its generation), then served as [`Records::fetch`], except that while
    /// it waits for records it ends when the group starts a rebalance or
    /// loses a member: answered then with what a heartbeat would answer
    /// (usually REBALANCE_IN_PROGRESS), or, if that is nothing, with the
    /// records there are at once. Only the wait ends so (a fetch reading what
    /// arrived finishes, its reads charged). With no partitions it waits for
    /// that alone, up to the fetch's wait. The wait is capped at the member's
    /// session timeout; as with HEARTBEAT_WAIT, only the start counts as a
    /// sign of life.
    ///
    /// # Errors
    /// UNKNOWN_MEMBER, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS.
    pub async fn group_fetch(
        &self,
        group: &str,
        member: &str,
        generation: i32,
        spec: &mut FetchSpec,
        memory: Option<FetchMemory<'_>>,
    ) -> Result<Fetched, ErrorCode> {
        let (listener, session_ms) = {
            let now = self.mono_ms();
            lock(&self.classic).heartbeat_listen(group, member, generation, now)?
        };
        let mut changed = listener.fuse();
        spec.max_wait = spec.max_wait.min(Duration::from_millis(session_ms));
        if !spec.max_wait.is_zero() && !self.is_shutting_down() {
            // Shutdown wakes every group's listeners (`Coordinator::drain`) and
            // every partition's readers, so neither wait outlives it.
            if spec.partitions.is_empty() {
                futures::select! {
                    () = changed => {},
                    () = rt::sleep_coarse(spec.max_wait).fuse() => {},
                }
            } else if let Ok(f) = self.records.fetch_unless(spec, memory, &mut changed).await {
                return Ok(f);
            }
        }
        lock(&self.classic).check_member(group, member, generation)?;
        spec.max_wait = Duration::ZERO;
        Ok(self.records.fetch(spec, memory).await)
    }

    /// How many heartbeats wait now (HEARTBEAT_WAIT).
    pub fn parked_heartbeats(&self) -> usize {
        lock(&self.classic).parked_heartbeats()
    }

    /// A member leaves its group (its partitions go to the others).
    ///
    /// # Errors
    /// UNKNOWN_MEMBER.
    pub fn leave_group(&self, group: &str, member: &str) -> Result<(), ErrorCode> {
        let now = self.mono_ms();
        let ready =
            lock(&self.classic).leave(group, member, now, &|t| self.records.partitions_of(t))?;
        Self::deliver(ready);
        Ok(())
    }

    /// A member leaves, named by its member id, its group instance id (an
    /// empty member id: whichever member has that instance now), or both.
    ///
    /// # Errors
    /// [`GroupError::FencedInstanceId`], UNKNOWN_MEMBER.
    pub fn leave_group_as(
        &self,
        group: &str,
        member: (&str, Option<&str>),
    ) -> Result<(), GroupError> {
        let now = self.mono_ms();
        let ready =
            lock(&self.classic).leave_as(group, member, now, &|t| self.records.partitions_of(t))?;
        Self::deliver(ready);
        Ok(())
    }

    /// How many members a group has, counting those whose join is parked
    /// waiting for a rebalance; `None` if the group does not exist.
    pub fn group_members(&self, group: &str) -> Option<usize> {
        lock(&self.classic)
            .state(group)
            .map(|(_, _, members)| members)
    }

    /// When the coordinator last heard from a member (join or heartbeat), in
    /// the clock's [`crate::Clock::mono_ms`]; `None` if it is not a member.
    /// Lets a test on a manual clock wait until a live member has heartbeated
    /// before moving the clock again.
    pub fn member_last_seen(&self, group: &str, member: &str) -> Option<u64> {
        lock(&self.classic).last_seen(group, member)
    }

    pub(in crate::engine) fn tick_classic(&self) {
        let now = self.mono_ms();
        let ready = lock(&self.classic).tick(now, &|t| self.records.partitions_of(t));
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
        let offsets: Vec<(TopicPartition, Committed)> = offsets
            .iter()
            .map(|(tp, o)| (tp.clone(), Committed::at(*o)))
            .collect();
        self.commit_offsets_with(member, &offsets).await
    }

    /// [`Groups::commit_offsets`] with what Kafka clients keep beside each
    /// offset (its leader epoch and metadata string, returned as committed by
    /// [`Groups::committed_full`]): metadata over
    /// `coordinator::offsets::MAX_METADATA_BYTES` leaves that partition alone
    /// with OFFSET_METADATA_TOO_LARGE.
    ///
    /// # Errors
    /// As [`Groups::commit_offsets`].
    pub async fn commit_offsets_with(
        &self,
        member: Member<'_>,
        offsets: &[(TopicPartition, Committed)],
    ) -> Result<Vec<ErrorCode>, ErrorCode> {
        self.commit_offsets_as(member, None, offsets)
            .await
            .map_err(|e| e.code())
    }

    /// [`Groups::commit_offsets_with`] from a member that may be static: a
    /// group instance id that the group knows under another member id is
    /// fenced.
    ///
    /// # Errors
    /// [`GroupError::FencedInstanceId`], and as [`Groups::commit_offsets`].
    pub async fn commit_offsets_as(
        &self,
        member: Member<'_>,
        instance: Option<&str>,
        offsets: &[(TopicPartition, Committed)],
    ) -> Result<Vec<ErrorCode>, GroupError> {
        if !valid_group_id(member.group) {
            return Err(ErrorCode::InvalidName.into());
        }
        let mut results = Vec::with_capacity(offsets.len());
        let mut store = Vec::with_capacity(offsets.len());
        for (tp, c) in offsets {
            let too_long = c
                .metadata
                .as_ref()
                .is_some_and(|m| m.len() > crate::coordinator::offsets::MAX_METADATA_BYTES);
            results.push(match self.records.topic(&tp.topic) {
                None => ErrorCode::UnknownTopic,
                Some(t) if t.partition(tp.partition).is_none() => ErrorCode::UnknownPartition,
                Some(_) if c.offset < 0 => ErrorCode::OffsetOutOfRange,
                Some(_) if too_long => ErrorCode::OffsetMetadataTooLarge,
                Some(_) => {
                    store.push((tp.topic.clone(), tp.partition, c.clone()));
                    ErrorCode::None
                }
            });
        }
        let rx = loop {
            let room = self.offsets.room();
            let queued = {
                let groups = lock(&self.classic);
                // A consumer-protocol group's members commit with their
                // member epoch (KIP-848); the consumer groups' lock is held
                // to the hand-off, as the classic one is.
                let consumers = lock(&self.consumer);
                let protocol_type =
                    match consumers.check_commit(member.group, member.member_id, member.generation)
                    {
                        Ok(true) => CONSUMER_PROTOCOL_TYPE.to_owned(),
                        Ok(false) => groups.check_commit_as(
                            member.group,
                            (member.member_id, instance),
                            member.generation,
                        )?,
                        Err(e) => return Err(consumer_commit_error(e)),
                    };
                if store.is_empty() {
                    return Ok(results);
                }
                for (_, _, c) in &mut store {
                    c.protocol_type.clone_from(&protocol_type);
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
                Err(NotQueued::Closed) => return Err(ErrorCode::ShuttingDown.into()),
            }
        };
        if let Err(e) = crate::coordinator::offsets::finish(rx).await {
            tracing::error!(group = %member.group, error = %e, "offset commit failed");
            return Err(e.code().into());
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

    /// What is committed for one partition (offset, leader epoch, metadata), if anything.
    pub fn committed_full(&self, group: &str, topic: &str, partition: i32) -> Option<Committed> {
        self.offsets.get_committed(group, topic, partition)
    }

    /// Every commit of a group, epochs and metadata included, sorted.
    pub fn committed_for_group_full(&self, group: &str) -> Vec<(String, i32, Committed)> {
        self.offsets.for_group_committed(group)
    }

    /// The committed offsets (tests, observability).
    pub fn offsets(&self) -> &Offsets {
        &self.offsets
    }

    /// [`Groups::positions`] as a Flume reader sees them: where the group
    /// reads from (its committed offset, or the log start), when short of
    /// the log end with nothing a Flume reader can read in between
    /// (transaction markers, aborted transactions), is its end: `log_end`
    /// is reported as that offset there (lag 0; a
    /// Flume consumer's position stays on such entries, as its protocol
    /// cannot move it past them). Looked at by a read of at most one record,
    /// only within [`READER_END_PROBE`] offsets of the end.
    pub async fn reader_positions<'a>(
        &self,
        group: &str,
        topics: impl IntoIterator<Item = (&'a str, &'a [i32])>,
    ) -> Vec<GroupPosition> {
        let mut positions = self.positions(group, topics);
        for p in &mut positions {
            // Where the group reads from: its commit, or the log start.
            let from = p.committed.max(p.log_start);
            let (Ok(c), Ok(end)) = (u64::try_from(from), u64::try_from(p.log_end)) else {
                continue;
            };
            if p.error != ErrorCode::None || c >= end || end - c > READER_END_PROBE {
                continue;
            }
            let Some(part) = self
                .records
                .topic(&p.at.topic)
                .and_then(|t| t.partition(p.at.partition).cloned())
            else {
                continue;
            };
            if part.nothing_to_read_from(c).await {
                p.log_end = from;
            }
        }
        positions
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
            let Some(t) = self.records.topic(topic) else {
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

/// The protocol type kept with a consumer-protocol group's commits.
const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// A consumer-protocol member's refused commit, in the group vocabulary.
fn consumer_commit_error(e: crate::coordinator::consumer::ConsumerGroupError) -> GroupError {
    use crate::coordinator::consumer::ConsumerGroupError as E;
    match e {
        E::StaleEpoch { sent, current } => GroupError::StaleMemberEpoch { sent, current },
        E::FencedEpoch { sent, current } => GroupError::FencedMemberEpoch { sent, current },
        _ => ErrorCode::UnknownMember.into(),
    }
}

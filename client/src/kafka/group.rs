//! `GroupConsumer` over Kafka: the classic group protocol (JoinGroup,
//! SyncGroup, Heartbeat, LeaveGroup) at the group's coordinator, with the
//! SDK computing the assignment when it is elected leader (`assignor`), a
//! background heartbeat task, commits (auto and manual) and positions
//! resumed from the committed offsets or reset by `auto.offset.reset`
//! ([`StartOffset`]).
//!
//! - Eager protocols (range, roundrobin): before rejoining, the member
//!   commits (auto-commit or `commit_on_revoke`), emits `Revoked` with its
//!   whole assignment and drops what it fetched.
//! - Cooperative (cooperative-sticky, KIP-429): the member keeps its
//!   partitions while it rejoins and sends them as "owned"; after the sync
//!   it revokes only those the new assignment lacks (commits, `Revoked`
//!   with just those) and, if there were any, rejoins at once so they can
//!   go to their new member. `Assigned` always carries the whole new
//!   assignment.
//! - The heartbeat task heartbeats every interval while the member has an
//!   id (also while a rejoin is due, so the session outlives a slow
//!   application, as in Kafka); REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION
//!   and UNKNOWN_MEMBER_ID make the next `recv` rejoin (a fetch waiting
//!   for records is cut short); NOT_COORDINATOR sends the next request to
//!   a newly found coordinator.
//! - A join that fails outside a rebalance's own steps (no coordinator, a
//!   connection closed or timed out) is tried again after a pause that
//!   doubles up to `backoff_max`, with a warning at the 3rd failure in a
//!   row, the 6th, the 12th, ...; at the builder's `join_attempts` it is
//!   the consumer's error ([`Error::JoinFailed`], `join_failures.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::lock::Mutex as AsyncMutex;
use futures::FutureExt;
use kafka_protocol::messages::{
    join_group_request, leave_group_request, sync_group_request, ApiKey, HeartbeatRequest,
    JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::StrBytes;

use super::assignor::{self, Tp};
use super::cluster::Cluster;
use super::conn::decode_response;
use super::errors;
use super::fetch::{Fetcher, RETRY_PAUSE};
use super::group_consumer::{self, Member};
use super::membership::Shared;
use super::offsets::{self, group_id};
use crate::error::{Error, Result};
use crate::join_failures::{self, JoinFailures};
use crate::types::consumer::StartOffset;
use crate::types::group::{ConsumerRecord, GroupConsumerBuilder, GroupProtocol, RebalanceEvent};
use flume_rt as rt;
use flume_rt::sync::lock;

/// The consumer's state, behind the consumer's lock.
pub(super) struct State {
    cluster: Arc<Cluster>,
    pub(super) cfg: GroupConsumerBuilder,
    protocols: Vec<&'static str>,
    /// The protocol the coordinator chose at the last join.
    protocol: &'static str,
    pub(super) shared: Arc<Shared>,
    fetcher: Fetcher,
    pub(super) assignment: Vec<Tp>,
    positions: HashMap<Tp, i64>,
    processed: BTreeMap<Tp, i64>,
    committed: BTreeMap<Tp, i64>,
    last_delivered: Option<(Tp, i64)>,
    buffer: VecDeque<ConsumerRecord>,
    last_commit: Instant,
    events: async_channel::Sender<RebalanceEvent>,
    /// SyncGroups refused with INVALID_REQUEST in a row.
    sync_refusals: u32,
    join_failures: JoinFailures,
    /// The coordinator of the last join attempt, for messages.
    join_broker: Option<String>,
    /// The consumer protocol's member (KIP-848), or `None` for the classic
    /// protocol.
    consumer: Option<Arc<Member>>,
}

/// How many SyncGroups in a row may be refused with INVALID_REQUEST before
/// the refusal is the consumer's error.
const MAX_SYNC_REFUSALS: u32 = 5;

/// A group member on a Kafka cluster.
pub(crate) struct KafkaGroup {
    state: AsyncMutex<State>,
    shared: Arc<Shared>,
    cluster: Arc<Cluster>,
    group: String,
}

impl KafkaGroup {
    /// Finds the coordinator, joins (waiting for the first assignment) and
    /// starts heartbeating.
    pub(crate) async fn start(
        cfg: GroupConsumerBuilder,
        brokers: Vec<String>,
        events: async_channel::Sender<RebalanceEvent>,
    ) -> Result<Arc<KafkaGroup>> {
        let consumer_protocol = cfg.protocol_setting() == GroupProtocol::Consumer;
        let protocols = if consumer_protocol {
            group_consumer::server_assignor(cfg.assignor_setting())?;
            Vec::new()
        } else {
            assignor::protocols(cfg.assignor_setting())?
        };
        let cluster = Cluster::connect(brokers, cfg.connection_config().clone()).await?;
        let shared = Arc::new(Shared {
            member: Mutex::new((String::new(), -1)),
            assignment: Mutex::new(Vec::new()),
            // The classic protocol joins at the first `ensure_joined`; the
            // consumer protocol's member joins in `start` and never rejoins so.
            rejoin: AtomicBool::new(!consumer_protocol),
            rebalance: event_listener::Event::new(),
            stop: AtomicBool::new(false),
            stopped: event_listener::Event::new(),
        });
        let fetcher = Fetcher::new(
            Arc::clone(&cluster),
            cfg.fetch_settings().clone(),
            cfg.start_offset(),
        );
        let group = cfg.group_name().to_owned();
        let interval = cfg.interval();
        let join_failures = cfg.join_failures();
        let consumer = if consumer_protocol {
            Some(Arc::new(Member::new(
                Arc::clone(&cluster),
                &cfg,
                Arc::clone(&shared),
            )?))
        } else {
            None
        };
        let state = State {
            cluster: Arc::clone(&cluster),
            protocol: protocols.first().copied().unwrap_or(assignor::RANGE),
            protocols,
            cfg,
            shared: Arc::clone(&shared),
            fetcher,
            assignment: Vec::new(),
            positions: HashMap::new(),
            processed: BTreeMap::new(),
            committed: BTreeMap::new(),
            last_delivered: None,
            buffer: VecDeque::new(),
            last_commit: Instant::now(),
            events,
            sync_refusals: 0,
            join_failures,
            join_broker: None,
            consumer: consumer.clone(),
        };
        let g = Arc::new(KafkaGroup {
            state: AsyncMutex::new(state),
            shared: Arc::clone(&shared),
            cluster: Arc::clone(&cluster),
            group: group.clone(),
        });
        if let Some(member) = consumer {
            let joined = {
                let mut st = g.state.lock().await;
                let mut failures = st.cfg.join_failures();
                match member.join(&mut failures).await {
                    Ok(()) => st.ensure_joined().await,
                    Err(e) => Err(e),
                }
            };
            if let Err(e) = joined {
                cluster.close().await;
                return Err(e);
            }
            let failures = g.state.lock().await.cfg.join_failures();
            rt::spawn(group_consumer::heartbeat_loop(member, failures));
            return Ok(g);
        }
        g.state.lock().await.ensure_joined().await?;
        rt::spawn(heartbeat_loop(cluster, group, shared, interval));
        Ok(g)
    }

    pub(crate) async fn next(&self) -> Option<Result<ConsumerRecord>> {
        let mut st = self.state.lock().await;
        st.mark_last_processed();
        loop {
            if self.shared.stop.load(Ordering::Acquire) {
                return Some(Err(Error::Closed));
            }
            if let Err(e) = st.ensure_joined().await {
                if e.is_retriable() {
                    rt::sleep(RETRY_PAUSE).await;
                    continue;
                }
                return Some(Err(e));
            }
            if let Err(e) = st.maybe_auto_commit().await
                && !is_fencing(&e)
                && !e.is_retriable()
            {
                return Some(Err(e));
            }
            if let Some(r) = st.buffer.pop_front() {
                st.last_delivered = Some((
                    (r.topic.clone(), r.partition),
                    i64::try_from(r.offset).unwrap_or(i64::MAX),
                ));
                return Some(Ok(r));
            }
            if let Err(e) = st.fetch().await {
                if e.is_retriable() {
                    rt::sleep(RETRY_PAUSE).await;
                    continue;
                }
                return Some(Err(e));
            }
        }
    }

    pub(crate) fn assignment(&self) -> Vec<(String, i32)> {
        lock(&self.shared.assignment).clone()
    }

    pub(crate) fn generation(&self) -> i32 {
        self.shared.member().1
    }

    pub(crate) fn member_id(&self) -> String {
        self.shared.member().0
    }

    pub(crate) async fn commit(&self, record: &ConsumerRecord) -> Result<()> {
        let mut st = self.state.lock().await;
        let tp = (record.topic.clone(), record.partition);
        let next = i64::try_from(record.offset).unwrap_or(i64::MAX) + 1;
        st.commit_offsets(vec![(tp, next)]).await
    }

    pub(crate) async fn commit_processed(&self) -> Result<()> {
        let mut st = self.state.lock().await;
        st.mark_last_processed();
        st.commit_pending().await
    }

    /// Commits (auto-commit), leaves the group, stops the heartbeats.
    pub(crate) async fn close(&self) -> Result<()> {
        let mut st = self.state.lock().await;
        let commit = if st.cfg.auto_commit_on() {
            st.mark_last_processed();
            st.commit_pending().await
        } else {
            Ok(())
        };
        let (member, _) = self.shared.member();
        self.shared.stop.store(true, Ordering::Release);
        self.shared.stopped.notify(usize::MAX);
        if let Some(m) = st.consumer.clone() {
            m.leave().await;
        } else if !member.is_empty()
            && let Ok(conn) = self.cluster.coordinator(&self.group).await
            && let Ok(v) = conn.version(ApiKey::LeaveGroup)
        {
            let mut req = LeaveGroupRequest::default().with_group_id(group_id(&self.group));
            if v >= 3 {
                req.members = vec![leave_group_request::MemberIdentity::default()
                    .with_member_id(StrBytes::from_string(member))];
            } else {
                req.member_id = StrBytes::from_string(member);
            }
            let _ = conn.call_at(&req, v, Duration::ZERO).await;
        }
        st.fetcher.abandon();
        self.cluster.close().await;
        commit
    }
}

impl Drop for KafkaGroup {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.stopped.notify(usize::MAX);
    }
}

fn is_fencing(e: &Error) -> bool {
    matches!(
        e.kafka_code(),
        Some(
            errors::REBALANCE_IN_PROGRESS
                | errors::ILLEGAL_GENERATION
                | errors::UNKNOWN_MEMBER_ID
                | errors::FENCED_MEMBER_EPOCH
                | group_consumer::STALE_MEMBER_EPOCH
        )
    )
}

/// Heartbeats every `interval` until the consumer stops.
async fn heartbeat_loop(
    cluster: Arc<Cluster>,
    group: String,
    shared: Arc<Shared>,
    interval: Duration,
) {
    loop {
        let stopped = shared.stopped.listen();
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        futures::select! {
            () = rt::sleep(interval).fuse() => {}
            () = stopped.fuse() => return,
        }
        let (member, generation) = shared.member();
        if member.is_empty() || generation < 0 {
            continue;
        }
        let conn = match cluster.coordinator(&group).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(%group, error = %e, "no coordinator for the heartbeat");
                continue;
            }
        };
        let Ok(v) = conn.version(ApiKey::Heartbeat) else {
            continue;
        };
        let req = HeartbeatRequest::default()
            .with_group_id(group_id(&group))
            .with_generation_id(generation)
            .with_member_id(StrBytes::from_string(member.clone()));
        match conn.call_at(&req, v, Duration::ZERO).await {
            Ok(r) if r.error_code == errors::NONE => {}
            Ok(r) if errors::is_coordinator_moved(r.error_code) => {
                cluster.forget_coordinator(&group)
            }
            Ok(r) => {
                tracing::debug!(%group, code = r.error_code, "heartbeat refused; rejoining");
                shared.fenced(&member, generation, r.error_code);
            }
            Err(e) => {
                tracing::debug!(%group, error = %e, "heartbeat failed");
                cluster.forget_coordinator(&group);
            }
        }
    }
}

impl State {
    pub(super) fn emit(&self, ev: RebalanceEvent) {
        if let Err(async_channel::TrySendError::Full(ev)) = self.events.try_send(ev) {
            tracing::debug!(
                ?ev,
                "rebalance event dropped: nobody reads the event channel"
            );
        }
    }

    fn mark_last_processed(&mut self) {
        if let Some((tp, off)) = self.last_delivered.take()
            && self.assignment.contains(&tp)
        {
            self.processed.insert(tp, off + 1);
        }
    }

    /// Forgets what was fetched of `parts` and, when `commit`, commits what
    /// was processed of them (auto-commit or commit-on-revoke; not for
    /// partitions lost to a fence).
    pub(super) async fn revoke(&mut self, parts: &[Tp], commit: bool) {
        if parts.is_empty() {
            return;
        }
        if commit && (self.cfg.auto_commit_on() || self.cfg.commit_on_revoke_on()) {
            let todo: Vec<(Tp, i64)> = self
                .processed
                .iter()
                .filter(|(tp, o)| {
                    parts.contains(tp) && self.committed.get(*tp).is_none_or(|c| c < *o)
                })
                .map(|(tp, o)| (tp.clone(), *o))
                .collect();
            if let Err(e) = self.commit_offsets(todo).await {
                tracing::debug!(error = %e, "commit before revoking failed");
            }
        }
        self.buffer.retain(|r| {
            !parts
                .iter()
                .any(|(t, p)| *t == r.topic && *p == r.partition)
        });
        for tp in parts {
            self.positions.remove(tp);
            self.processed.remove(tp);
            self.committed.remove(tp);
        }
        if self
            .last_delivered
            .as_ref()
            .is_some_and(|(tp, _)| parts.contains(tp))
        {
            self.last_delivered = None;
        }
        self.fetcher.abandon();
        lock(&self.shared.assignment).retain(|tp| !parts.contains(tp));
        self.emit(RebalanceEvent::Revoked(parts.to_vec()));
    }

    async fn ensure_joined(&mut self) -> Result<()> {
        if let Some(m) = self.consumer.clone() {
            return reconcile(self, &m).await;
        }
        while self.shared.rejoin.load(Ordering::Acquire) {
            let cooperative = assignor::is_cooperative(self.protocol);
            if !cooperative {
                let all = std::mem::take(&mut self.assignment);
                self.revoke(&all, true).await;
                self.buffer.clear();
                self.positions.clear();
            }
            self.fetcher.abandon();
            let owned = if cooperative {
                self.assignment.clone()
            } else {
                Vec::new()
            };
            let (generation, new) = match self.join(&owned).await {
                Ok(j) => {
                    self.join_failures.succeeded();
                    j
                }
                // A rebalance's own steps: again at once, nearly.
                Err(e) if is_fencing(&e) => {
                    tracing::debug!(error = %e, "join interrupted by a rebalance; again");
                    rt::sleep(RETRY_PAUSE).await;
                    continue;
                }
                Err(e) if e.is_retriable() => {
                    let broker = self.join_broker.clone().unwrap_or_else(|| {
                        format!("not found; asked {}", self.cluster.bootstrap().join(","))
                    });
                    let group = self.cfg.group_name().to_owned();
                    join_failures::after_failure(&mut self.join_failures, &group, &broker, e)
                        .await?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let revoked: Vec<Tp> = self
                .assignment
                .iter()
                .filter(|tp| !new.contains(tp))
                .cloned()
                .collect();
            self.revoke(&revoked, true).await;
            self.assignment = new;
            lock(&self.shared.assignment).clone_from(&self.assignment);
            if assignor::is_cooperative(self.protocol) && !revoked.is_empty() {
                // KIP-429: what was given up goes to its new member in a second round.
                self.shared.rejoin.store(true, Ordering::Release);
            }
            let missing: Vec<Tp> = self
                .assignment
                .iter()
                .filter(|tp| !self.positions.contains_key(*tp))
                .cloned()
                .collect();
            if let Err(e) = self.load_positions(&missing).await {
                if e.is_retriable() || is_fencing(&e) {
                    self.shared.rejoin.store(true, Ordering::Release);
                    continue;
                }
                return Err(e);
            }
            tracing::debug!(group = %self.cfg.group_name(), generation, protocol = self.protocol, assignment = ?self.assignment, "joined group");
            self.emit(RebalanceEvent::Assigned {
                generation,
                partitions: self.assignment.clone(),
            });
        }
        Ok(())
    }

    /// JoinGroup then SyncGroup (assigning first when elected leader).
    /// Returns the generation and this member's partitions.
    async fn join(&mut self, owned: &[Tp]) -> Result<(i32, Vec<Tp>)> {
        let group = self.cfg.group_name().to_owned();
        self.join_broker = None;
        let conn = self.cluster.coordinator(&group).await?;
        self.join_broker = Some(conn.addr().to_owned());
        let v = conn.version(ApiKey::JoinGroup)?;
        let topics = self.cfg.topic_names().to_vec();
        let (member_id, _) = self.shared.member();
        let protocols = self
            .protocols
            .iter()
            .map(|p| {
                let owned = if assignor::is_cooperative(p) {
                    owned
                } else {
                    &[]
                };
                join_group_request::JoinGroupRequestProtocol::default()
                    .with_name(StrBytes::from_static_str(p))
                    .with_metadata(assignor::encode_subscription(&topics, owned))
            })
            .collect();
        let mut req = JoinGroupRequest::default()
            .with_group_id(group_id(&group))
            .with_session_timeout_ms(ms(self.cfg.session()))
            .with_member_id(StrBytes::from_string(member_id))
            .with_protocol_type(StrBytes::from_static_str("consumer"))
            .with_protocols(protocols);
        if v >= 1 {
            req.rebalance_timeout_ms = ms(self.cfg.rebalance());
        }
        let resp = match conn.call_at(&req, v, self.cfg.rebalance()).await {
            Ok(r) => r,
            Err(e) => {
                self.cluster.forget_coordinator(&group);
                return Err(e);
            }
        };
        match resp.error_code {
            errors::NONE => {}
            errors::MEMBER_ID_REQUIRED => {
                *lock(&self.shared.member) = (resp.member_id.to_string(), -1);
                return Err(errors::error(
                    errors::REBALANCE_IN_PROGRESS,
                    "member id assigned",
                ));
            }
            errors::UNKNOWN_MEMBER_ID => {
                *lock(&self.shared.member) = (String::new(), -1);
                return Err(errors::error(
                    errors::UNKNOWN_MEMBER_ID,
                    format!("group {group}"),
                ));
            }
            c if errors::is_coordinator_moved(c) => {
                self.cluster.forget_coordinator(&group);
                return Err(errors::error(c, format!("group {group}")));
            }
            c => return Err(errors::error(c, format!("joining group {group}"))),
        }
        let generation = resp.generation_id;
        let me = resp.member_id.to_string();
        let chosen = resp
            .protocol_name
            .as_ref()
            .map(|p| p.to_string())
            .unwrap_or_default();
        self.protocol = self
            .protocols
            .iter()
            .copied()
            .find(|p| *p == chosen)
            .ok_or_else(|| {
                Error::protocol(format!(
                    "the coordinator chose protocol {chosen:?}, which this member did not offer"
                ))
            })?;
        *lock(&self.shared.member) = (me.clone(), generation);
        let assignments = if resp.leader.as_str() == me {
            self.assign(&resp.members).await?
        } else {
            Vec::new()
        };
        let sv = conn.version(ApiKey::SyncGroup)?;
        let mut sync = SyncGroupRequest::default()
            .with_group_id(group_id(&group))
            .with_generation_id(generation)
            .with_member_id(StrBytes::from_string(me.clone()))
            .with_assignments(
                assignments
                    .into_iter()
                    .map(|(m, a)| {
                        sync_group_request::SyncGroupRequestAssignment::default()
                            .with_member_id(StrBytes::from_string(m))
                            .with_assignment(a)
                    })
                    .collect(),
            );
        if sv >= 5 {
            sync.protocol_type = Some(StrBytes::from_static_str("consumer"));
            sync.protocol_name = Some(StrBytes::from_static_str(self.protocol));
        }
        let raw = match conn.call_raw(&sync, sv, self.cfg.rebalance()).await {
            Ok(r) => r,
            Err(e) => {
                self.cluster.forget_coordinator(&group);
                return Err(e);
            }
        };
        let resp = match decode_response::<SyncGroupRequest>(raw.clone(), sv) {
            Ok(r) => r,
            // librdkafka's mock cluster answers a member left without
            // partitions a null assignment (length -1, the last field up to
            // v3), which Kafka's schema does not allow: read it as empty.
            Err(_) if sv <= 3 && raw.ends_with(&[0xff; 4]) => {
                let mut fixed = raw.to_vec();
                let n = fixed.len();
                fixed[n - 4..].fill(0);
                decode_response::<SyncGroupRequest>(Bytes::from(fixed), sv)?
            }
            Err(e) => return Err(e),
        };
        match resp.error_code {
            errors::NONE => {}
            errors::UNKNOWN_MEMBER_ID => {
                *lock(&self.shared.member) = (String::new(), -1);
                return Err(errors::error(
                    errors::UNKNOWN_MEMBER_ID,
                    format!("group {group}"),
                ));
            }
            c if errors::is_coordinator_moved(c) => {
                self.cluster.forget_coordinator(&group);
                return Err(errors::error(c, format!("group {group}")));
            }
            // librdkafka's mock coordinator answers a SyncGroup that crossed
            // a rebalance with INVALID_REQUEST: join again, a few times.
            errors::INVALID_REQUEST if self.sync_refusals < MAX_SYNC_REFUSALS => {
                self.sync_refusals += 1;
                return Err(errors::error(
                    errors::REBALANCE_IN_PROGRESS,
                    format!("group {group}: SyncGroup answered INVALID_REQUEST; joining again"),
                ));
            }
            c => return Err(errors::error(c, format!("syncing group {group}"))),
        }
        self.sync_refusals = 0;
        let mut parts: Vec<Tp> = assignor::decode_assignment(&resp.assignment)?
            .into_iter()
            .flat_map(|(t, ps)| ps.into_iter().map(move |p| (t.clone(), p)))
            .collect();
        parts.sort();
        parts.dedup();
        self.shared.rejoin.store(false, Ordering::Release);
        Ok((generation, parts))
    }

    /// The leader's part: every member's subscription, the partition
    /// counts of every topic subscribed to (fresh metadata), the assignor.
    async fn assign(
        &mut self,
        members: &[kafka_protocol::messages::join_group_response::JoinGroupResponseMember],
    ) -> Result<Vec<(String, Bytes)>> {
        let subs: Vec<assignor::Member> = members
            .iter()
            .map(|m| assignor::decode_subscription(&m.member_id, &m.metadata))
            .collect::<Result<_>>()?;
        let topics: BTreeSet<String> = subs.iter().flat_map(|m| m.topics.iter().cloned()).collect();
        let topics: Vec<String> = topics.into_iter().collect();
        let meta = self.cluster.refresh(Some(&topics), false).await?;
        let counts: BTreeMap<String, i32> = meta
            .topics
            .iter()
            .filter(|t| t.error_code == errors::NONE)
            .filter_map(|t| {
                let n = i32::try_from(t.partitions.len()).ok()?;
                Some((t.name.as_ref()?.0.to_string(), n))
            })
            .collect();
        let plan = assignor::assign(self.protocol, &subs, &counts);
        tracing::debug!(protocol = self.protocol, ?plan, "assigned as group leader");
        Ok(plan
            .into_iter()
            .map(|(m, parts)| (m, assignor::encode_assignment(&parts)))
            .collect())
    }

    /// Positions of `parts` from the group's committed offsets, or by
    /// `auto.offset.reset` where none is committed.
    pub(super) async fn load_positions(&mut self, parts: &[Tp]) -> Result<()> {
        if parts.is_empty() {
            return Ok(());
        }
        let group = self.cfg.group_name().to_owned();
        let committed = offsets::committed(&self.cluster, &group, Some(parts)).await?;
        let mut none = Vec::new();
        for tp in parts {
            match committed.get(tp) {
                Some(&(off, code)) if code == errors::NONE && off >= 0 => {
                    self.committed.insert(tp.clone(), off);
                    self.positions.insert(tp.clone(), off);
                }
                _ => none.push(tp.clone()),
            }
        }
        match self.cfg.start_offset() {
            StartOffset::At(o) => {
                for tp in none {
                    self.positions
                        .insert(tp, i64::try_from(o).unwrap_or(i64::MAX));
                }
            }
            _ => {
                let mut positions = std::mem::take(&mut self.positions);
                let r = self.fetcher.reset_positions(&none, &mut positions).await;
                self.positions = positions;
                r?;
            }
        }
        Ok(())
    }

    /// Whether a rejoin (classic) or a reconciliation (consumer protocol)
    /// is due: fetching waits for it.
    fn rebalance_due(&self) -> bool {
        self.shared.rejoin.load(Ordering::Acquire)
            || self.consumer.as_ref().is_some_and(|m| m.pending())
    }

    async fn fetch(&mut self) -> Result<()> {
        let rebalance = self.shared.rebalance.listen();
        if self.rebalance_due() {
            return Ok(());
        }
        if self.assignment.is_empty() {
            futures::select! {
                () = rt::sleep(self.cfg.fetch_settings().max_wait.min(Duration::from_millis(200))).fuse() => {}
                () = rebalance.fuse() => {}
            }
            return Ok(());
        }
        let mut positions: HashMap<Tp, i64> = self
            .assignment
            .iter()
            .filter_map(|tp| self.positions.get(tp).map(|o| (tp.clone(), *o)))
            .collect();
        let got = {
            let poll = self.fetcher.poll(&mut positions);
            futures::pin_mut!(poll);
            futures::select! {
                r = poll.fuse() => Some(r),
                () = rebalance.fuse() => None,
            }
        };
        let Some(got) = got else { return Ok(()) };
        let got = got?;
        if self.rebalance_due() {
            return Ok(());
        }
        for (tp, off) in positions {
            self.positions.insert(tp, off);
        }
        for g in got {
            for r in g.records {
                self.buffer.push_back(ConsumerRecord {
                    topic: g.tp.0.clone(),
                    partition: g.tp.1,
                    record: r,
                });
            }
        }
        Ok(())
    }

    async fn maybe_auto_commit(&mut self) -> Result<()> {
        match self.cfg.auto_commit_every() {
            Some(iv) if self.last_commit.elapsed() >= iv => {
                self.last_commit = Instant::now();
                self.commit_pending().await
            }
            _ => Ok(()),
        }
    }

    async fn commit_pending(&mut self) -> Result<()> {
        let todo: Vec<(Tp, i64)> = self
            .processed
            .iter()
            .filter(|(tp, o)| self.committed.get(*tp).is_none_or(|c| c < *o))
            .map(|(tp, o)| (tp.clone(), *o))
            .collect();
        self.commit_offsets(todo).await
    }

    async fn commit_offsets(&mut self, todo: Vec<(Tp, i64)>) -> Result<()> {
        if todo.is_empty() {
            return Ok(());
        }
        let offs: Vec<(String, i32, i64)> =
            todo.iter().map(|((t, p), o)| (t.clone(), *p, *o)).collect();
        let group = self.cfg.group_name().to_owned();
        let consumer_protocol = self.consumer.is_some();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (member, generation) = self.shared.member();
            let r = offsets::commit_as(
                &self.cluster,
                &group,
                generation,
                &member,
                &offs,
                consumer_protocol,
            )
            .await;
            let e = match r {
                Ok(()) => {
                    for (tp, o) in todo {
                        self.committed.insert(tp, o);
                    }
                    return Ok(());
                }
                Err(e) => e,
            };
            if let Some(m) = &self.consumer {
                // A heartbeat moved the epoch while the commit was on its way:
                // once more with the new one. Else the heartbeat finds out.
                if e.kafka_code() == Some(group_consumer::STALE_MEMBER_EPOCH)
                    && self.shared.member().1 != generation
                    && attempt < 2
                {
                    continue;
                }
                if is_fencing(&e) {
                    m.wake();
                }
                return Err(e);
            }
            if let Some(code) = e.kafka_code()
                && is_fencing(&e)
            {
                self.shared.fenced(&member, generation, code);
            }
            return Err(e);
        }
    }
}

fn ms(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

/// Brings the consumer's partitions to the member's assignment: lost ones
/// dropped, revoked ones given up, new ones taken (see the module docs).
///
/// # Errors
/// The error that ended the member; positions that could not be loaded.
async fn reconcile(st: &mut State, m: &Arc<Member>) -> Result<()> {
    loop {
        if let Some(e) = lock(&m.fatal).clone() {
            return Err(e);
        }
        let Some(work) = lock(&m.rec).work() else {
            return Ok(());
        };
        if work.lost {
            st.revoke(&work.revoke, false).await;
            st.assignment.clear();
            lock(&st.shared.assignment).clear();
            lock(&m.rec).lost(Instant::now());
            m.wake();
            continue;
        }
        if !work.revoke.is_empty() {
            st.revoke(&work.revoke, true).await;
            st.assignment.retain(|tp| !work.revoke.contains(tp));
            lock(&m.rec).revoked(&work.revoke, Instant::now());
            m.wake();
        }
        if !work.assign.is_empty() {
            st.load_positions(&work.assign).await?;
        }
        let (epoch, owned) = {
            let mut rec = lock(&m.rec);
            rec.assigned(&work.assign, Instant::now());
            (rec.epoch(), rec.owned.iter().cloned().collect::<Vec<Tp>>())
        };
        m.wake();
        st.assignment.clone_from(&owned);
        lock(&st.shared.assignment).clone_from(&owned);
        tracing::debug!(group = %st.cfg.group_name(), epoch, assignment = ?owned, revoked = ?work.revoke, "reconciled");
        st.emit(RebalanceEvent::Assigned {
            generation: epoch,
            partitions: owned,
        });
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::AtomicU32;

    use bytes::BytesMut;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
    use kafka_protocol::messages::{
        ApiVersionsResponse, BrokerId, FindCoordinatorResponse, MetadataResponse, RequestHeader,
        ResponseHeader,
    };
    use kafka_protocol::protocol::{Decodable, Encodable};

    use super::*;
    use crate::group::GroupConsumer;
    use crate::types::connection::ConnectionConfig;

    /// A Kafka broker that answers ApiVersions, Metadata and FindCoordinator
    /// (itself, node 0) and closes the connection at every JoinGroup, as
    /// librdkafka's mock cluster does at a JoinGroup it misreads.
    pub(in crate::kafka) struct Fake {
        pub(in crate::kafka) addr: String,
        joins: Arc<AtomicU32>,
    }

    impl Fake {
        pub(in crate::kafka) fn start() -> Fake {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let joins = Arc::new(AtomicU32::new(0));
            let counted = Arc::clone(&joins);
            std::thread::spawn(move || {
                for s in listener.incoming().map_while(std::result::Result::ok) {
                    let joins = Arc::clone(&counted);
                    std::thread::spawn(move || serve(s, i32::from(addr.port()), &joins));
                }
            });
            Fake {
                addr: addr.to_string(),
                joins,
            }
        }
    }

    fn serve(mut s: TcpStream, port: i32, joins: &AtomicU32) -> std::io::Result<()> {
        loop {
            let mut size = [0u8; 4];
            s.read_exact(&mut size)?;
            let mut frame = vec![0u8; usize::try_from(i32::from_be_bytes(size)).unwrap()];
            s.read_exact(&mut frame)?;
            let api = ApiKey::try_from(i16::from_be_bytes([frame[0], frame[1]])).unwrap();
            let version = i16::from_be_bytes([frame[2], frame[3]]);
            let mut buf = Bytes::from(frame);
            let header =
                RequestHeader::decode(&mut buf, api.request_header_version(version)).unwrap();
            let mut body = BytesMut::new();
            let host = StrBytes::from_static_str("127.0.0.1");
            match api {
                ApiKey::ApiVersions => ApiVersionsResponse::default()
                    .with_api_keys(
                        [
                            (ApiKey::ApiVersions, 3),
                            (ApiKey::Metadata, 12),
                            (ApiKey::FindCoordinator, 3),
                            (ApiKey::JoinGroup, 9),
                        ]
                        .into_iter()
                        .map(|(k, max)| {
                            ApiVersion::default()
                                .with_api_key(k as i16)
                                .with_max_version(max)
                        })
                        .collect(),
                    )
                    .encode(&mut body, version),
                ApiKey::Metadata => MetadataResponse::default()
                    .with_brokers(vec![MetadataResponseBroker::default()
                        .with_node_id(BrokerId(0))
                        .with_host(host)
                        .with_port(port)])
                    .with_controller_id(BrokerId(0))
                    .encode(&mut body, version),
                ApiKey::FindCoordinator => FindCoordinatorResponse::default()
                    .with_node_id(BrokerId(0))
                    .with_host(host)
                    .with_port(port)
                    .encode(&mut body, version),
                _ => {
                    if api == ApiKey::JoinGroup {
                        joins.fetch_add(1, Ordering::SeqCst);
                    }
                    return Ok(());
                }
            }
            .unwrap();
            let mut head = BytesMut::new();
            ResponseHeader::default()
                .with_correlation_id(header.correlation_id)
                .encode(&mut head, api.response_header_version(version))
                .unwrap();
            let size = i32::try_from(head.len() + body.len()).unwrap();
            s.write_all(&size.to_be_bytes())?;
            s.write_all(&head)?;
            s.write_all(&body)?;
        }
    }

    /// A coordinator that closes the connection at every JoinGroup: after
    /// the set number of attempts, with pauses that double between them,
    /// joining is an error that names the group, the coordinator and why.
    #[test]
    fn a_join_that_keeps_failing_is_an_error_after_the_set_attempts() {
        let fake = Fake::start();
        rt::block_on(async {
            let started = Instant::now();
            let err = GroupConsumer::builder(&format!("kafka://{}", fake.addr), "g")
                .topic("t")
                .join_attempts(3)
                .connection(ConnectionConfig::default().backoff_max(Duration::from_millis(150)))
                .build()
                .await
                .expect_err("joined a group whose coordinator closes every join");
            match &err {
                Error::JoinFailed {
                    group,
                    attempts,
                    broker,
                    last,
                } => {
                    assert_eq!((group.as_str(), *attempts), ("g", 3));
                    assert_eq!(broker, &fake.addr);
                    assert!(
                        matches!(**last, Error::Disconnected { .. }),
                        "last attempt: {last}"
                    );
                }
                other => panic!("not JoinFailed: {other}"),
            }
            assert!(!err.is_retriable(), "{err}");
            assert_eq!(fake.joins.load(Ordering::SeqCst), 3);
            // 100 ms, then 150 (doubled, at most backoff_max) between the three.
            assert!(started.elapsed() >= Duration::from_millis(250));
        });
    }
}

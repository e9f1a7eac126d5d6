//! `ShareConsumer` over Kafka: a share group member (KIP-932) speaking
//! Kafka's share APIs at v1, what Kafka 4.1+ and librdkafka 2.15's share
//! consumer speak.
//!
//! - Membership: ShareGroupHeartbeat at the group's coordinator
//!   (FindCoordinator, key type GROUP): epoch 0 joins with the subscription
//!   and a member id made here (Kafka's clients make their own), the
//!   answer's epoch goes into the next heartbeat, -1 leaves. A background
//!   task heartbeats at the interval the coordinator answers;
//!   UNKNOWN_MEMBER_ID or FENCED_MEMBER_EPOCH make the member join again
//!   (epoch 0, same id). The assignment names topics by id: Metadata (v10+)
//!   of the subscribed topics gives their names.
//! - Fetching: one ShareFetch per partition leader, each in its own share
//!   session (per broker): epoch 0 opens it listing every assigned
//!   partition, later requests carry the epoch the broker expects (the last
//!   plus one, wrapping to 1) and list only partitions added or with
//!   acknowledgements, and those forgotten. A session the broker refuses
//!   (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH: a poll
//!   cancelled after its request went out) is opened again within the same
//!   poll, with the refused request's acknowledgements; after a connection
//!   lost mid-request the next poll opens a new one.
//!   Acknowledgements ride on the fetch to the leader whose session holds
//!   the partition; an opening fetch carries none (the broker refuses
//!   them), so they follow it in a ShareAcknowledge. Only records inside
//!   the answer's acquired runs are handed out (a Kafka broker sends whole
//!   batches), with the run's delivery count.
//! - `commit` is a ShareAcknowledge per session; `close` closes every
//!   session with a ShareAcknowledge at epoch -1 carrying the last
//!   acknowledgements (the broker gives back what the member still holds),
//!   then leaves.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::share_acknowledge_request::{
    AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch as AckBatch,
};
use kafka_protocol::messages::share_fetch_request::{
    AcknowledgementBatch, FetchPartition, FetchTopic, ForgottenTopic,
};
use kafka_protocol::messages::{
    ApiKey, GroupId, ShareAcknowledgeRequest, ShareAcknowledgeResponse, ShareFetchRequest,
    ShareFetchResponse, ShareGroupHeartbeatRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::cluster::Cluster;
use super::errors;
use super::fetch::decode_records;
use crate::error::{Error, Result};
use crate::types::connection::ConnectionConfig;
use crate::types::share::{FetchLimits, Fetched, FetchedPartition};
use flume_protocol::record::Record;
use flume_protocol::{ErrorCode, ShareAcknowledgement};
use flume_rt as rt;
use flume_rt::sync::lock;

/// A (topic, partition).
type Tp = (String, i32);

/// The subscribed topics' ids, both ways, from the last Metadata.
#[derive(Debug, Default)]
struct TopicIds {
    by_id: HashMap<Uuid, String>,
    by_name: HashMap<String, Uuid>,
}

#[derive(Debug)]
struct Membership {
    member_id: String,
    epoch: i32,
    interval: Duration,
    /// The assignment as the coordinator answered it, by topic id.
    assigned: Vec<(Uuid, Vec<i32>)>,
}

/// The membership, shared by the consumer and its heartbeat task.
#[derive(Debug)]
struct Member {
    cluster: Arc<Cluster>,
    group: String,
    topics: Vec<String>,
    state: Mutex<Membership>,
    ids: Mutex<TopicIds>,
}

/// Whether a heartbeat's (or a share request's) code says the coordinator
/// no longer knows the member or its epoch: join again.
fn is_fenced_code(code: i16) -> bool {
    matches!(
        code,
        errors::UNKNOWN_MEMBER_ID | errors::FENCED_MEMBER_EPOCH
    )
}

fn is_fenced(e: &Error) -> bool {
    e.kafka_code().is_some_and(is_fenced_code)
}

/// A member id as Kafka's clients make one: 16 random bytes, base64url.
fn new_member_id() -> Result<String> {
    use base64::Engine as _;
    let mut b = [0u8; 16];
    getrandom::fill(&mut b)
        .map_err(|e| Error::InvalidArgument(format!("no randomness for a member id: {e}")))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b))
}

impl Member {
    /// One ShareGroupHeartbeat: a join (epoch 0, with the subscription)
    /// when `join`, a leave at `leave`, else a heartbeat at the member's epoch.
    async fn beat(&self, join: bool, leave: bool) -> Result<()> {
        let conn = self.cluster.coordinator(&self.group).await?;
        let v = conn.version(ApiKey::ShareGroupHeartbeat)?;
        let (member_id, epoch) = {
            let st = lock(&self.state);
            let epoch = if leave {
                -1
            } else if join {
                0
            } else {
                st.epoch
            };
            (st.member_id.clone(), epoch)
        };
        let req = ShareGroupHeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(self.group.clone())))
            .with_member_id(StrBytes::from_string(member_id))
            .with_member_epoch(epoch)
            .with_subscribed_topic_names(join.then(|| {
                self.topics
                    .iter()
                    .map(|t| TopicName(StrBytes::from_string(t.clone())))
                    .collect()
            }));
        let r = match conn.call_at(&req, v, Duration::ZERO).await {
            Ok(r) => r,
            Err(e) => {
                self.cluster.forget_coordinator(&self.group);
                return Err(e);
            }
        };
        if errors::is_coordinator_moved(r.error_code) {
            self.cluster.forget_coordinator(&self.group);
        }
        if r.error_code != errors::NONE {
            return Err(errors::error_with(
                r.error_code,
                format!("share group {}", self.group),
                r.error_message.as_deref(),
            ));
        }
        if leave {
            return Ok(());
        }
        {
            let mut st = lock(&self.state);
            if let Some(m) = r.member_id.filter(|m| !m.is_empty()) {
                st.member_id = m.to_string();
            }
            st.epoch = r.member_epoch;
            st.interval =
                Duration::from_millis(u64::try_from(r.heartbeat_interval_ms).unwrap_or(0))
                    .max(Duration::from_millis(10));
            // No assignment in the answer: unchanged.
            if let Some(a) = r.assignment {
                st.assigned = a
                    .topic_partitions
                    .into_iter()
                    .map(|t| (t.topic_id, t.partitions))
                    .collect();
            }
        }
        self.resolve_ids().await
    }

    /// Joins; a coordinator that is loading or moving is asked again, up
    /// to the request timeout.
    async fn join(&self) -> Result<()> {
        let config = self.cluster.config();
        let deadline = Instant::now() + config.request_timeout;
        loop {
            match self.beat(true, false).await {
                Err(e) if e.is_retriable() && Instant::now() < deadline => {
                    tracing::debug!(group = %self.group, error = %e, "share group join; trying again");
                    super::backoff(&self.cluster).await;
                }
                r => return r,
            }
        }
    }

    /// A heartbeat that joins again when the coordinator no longer knows
    /// the member or its epoch; `true` when it joined again.
    async fn keep(&self) -> Result<bool> {
        match self.beat(false, false).await {
            Err(e) if is_fenced(&e) => self.beat(true, false).await.map(|()| true),
            r => r.map(|()| false),
        }
    }

    /// Names the assigned topic ids the cache does not know: Metadata of
    /// the subscription.
    async fn resolve_ids(&self) -> Result<()> {
        let missing = {
            let st = lock(&self.state);
            let ids = lock(&self.ids);
            st.assigned
                .iter()
                .any(|(id, _)| !ids.by_id.contains_key(id))
        };
        if !missing {
            return Ok(());
        }
        let resp = self.cluster.refresh(Some(&self.topics), false).await?;
        let mut ids = TopicIds::default();
        for t in resp.topics {
            if t.error_code != errors::NONE || t.topic_id.is_nil() {
                continue;
            }
            if let Some(name) = t.name {
                ids.by_id.insert(t.topic_id, name.0.to_string());
                ids.by_name.insert(name.0.to_string(), t.topic_id);
            }
        }
        *lock(&self.ids) = ids;
        Ok(())
    }

    fn member_id(&self) -> String {
        lock(&self.state).member_id.clone()
    }

    /// The assignment by name (topics whose id Metadata did not name are
    /// left out), sorted.
    fn assignment(&self) -> Vec<Tp> {
        let st = lock(&self.state);
        let ids = lock(&self.ids);
        let mut out: Vec<Tp> = st
            .assigned
            .iter()
            .filter_map(|(id, ps)| ids.by_id.get(id).map(|n| (n, ps)))
            .flat_map(|(n, ps)| ps.iter().map(move |p| (n.clone(), *p)))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    fn id_of(&self, topic: &str) -> Option<Uuid> {
        lock(&self.ids).by_name.get(topic).copied()
    }

    fn name_of(&self, id: &Uuid) -> Option<String> {
        lock(&self.ids).by_id.get(id).cloned()
    }
}

async fn heartbeat_loop(member: Arc<Member>, stop: async_channel::Receiver<()>) {
    use futures::FutureExt;
    loop {
        let wait = lock(&member.state).interval;
        futures::select! {
            _ = stop.recv().fuse() => return,
            () = rt::sleep(wait).fuse() => {}
        }
        if let Err(e) = member.keep().await {
            tracing::warn!(group = %member.group, error = %e, "share group heartbeat failed");
        }
    }
}

/// A share session at one broker: the epoch its next request carries (0:
/// none open) and the partitions it fetches from.
#[derive(Debug, Default)]
struct Session {
    epoch: i32,
    partitions: BTreeSet<Tp>,
}

fn next_epoch(e: i32) -> i32 {
    if e == i32::MAX {
        1
    } else {
        e + 1
    }
}

/// A partition's acknowledgement batches: (first, last, type).
type Batches = Vec<(i64, i64, i8)>;

/// What one ShareFetch lists, given the session at its broker.
#[derive(Debug, Default, PartialEq, Eq)]
struct Diff {
    /// Partitions listed, with their acknowledgements (first, last, type).
    listed: BTreeMap<Tp, Batches>,
    /// Partitions the session drops.
    forgotten: Vec<Tp>,
    /// Acknowledgements held back: a session's opening request carries none.
    deferred: Vec<ShareAcknowledgement>,
}

/// The request's lists: with no open session every partition of `parts`
/// and no acknowledgements; else the partitions added, those with
/// acknowledgements, and those forgotten (but not one that carries
/// acknowledgements: it is forgotten by the next request).
fn diff(session: Option<&Session>, parts: &BTreeSet<Tp>, acks: &[ShareAcknowledgement]) -> Diff {
    let mut d = Diff::default();
    match session.filter(|s| s.epoch != 0) {
        None => {
            for tp in parts {
                d.listed.entry(tp.clone()).or_default();
            }
            d.deferred = acks.to_vec();
        }
        Some(s) => {
            for tp in parts.difference(&s.partitions) {
                d.listed.entry(tp.clone()).or_default();
            }
            for a in acks {
                d.listed
                    .entry((a.topic.clone(), a.partition))
                    .or_default()
                    .push((a.first_offset, a.last_offset, a.ack_type));
            }
            d.forgotten = s
                .partitions
                .difference(parts)
                .filter(|tp| !d.listed.contains_key(*tp))
                .cloned()
                .collect();
        }
    }
    d
}

/// One request to one broker, built from its session.
struct Planned {
    node: i32,
    req: ShareFetchRequest,
    /// The partitions the session holds once the request is answered.
    partitions: BTreeSet<Tp>,
    /// The partitions asked for and every acknowledgement for this broker
    /// (to send again when the session is opened again).
    wanted: BTreeSet<Tp>,
    acks: Vec<ShareAcknowledgement>,
    /// Acknowledgements held back from an opening request, sent after it.
    deferred: Vec<ShareAcknowledgement>,
    /// The partitions whose acknowledgements the request carries.
    acked: BTreeSet<Tp>,
}

/// A share group member over Kafka's protocol.
#[derive(Debug)]
pub(crate) struct KafkaShare {
    cluster: Arc<Cluster>,
    member: Arc<Member>,
    /// By broker node id.
    sessions: HashMap<i32, Session>,
    stop: Option<async_channel::Sender<()>>,
    heartbeat: rt::sync::TaskSlot<()>,
}

impl KafkaShare {
    /// Connects to the cluster, joins the group and starts heartbeating.
    ///
    /// # Errors
    /// Connection failures, no coordinator, the coordinator's refusal, a
    /// broker that does not serve ShareGroupHeartbeat v1.
    pub(crate) async fn join(
        brokers: Vec<String>,
        connection: ConnectionConfig,
        group: &str,
        _client_id: &str,
        topics: &[String],
    ) -> Result<KafkaShare> {
        let cluster = Cluster::connect(brokers, connection).await?;
        let member = Arc::new(Member {
            cluster: Arc::clone(&cluster),
            group: group.to_owned(),
            topics: topics.to_vec(),
            state: Mutex::new(Membership {
                member_id: new_member_id()?,
                epoch: 0,
                interval: Duration::from_secs(5),
                assigned: Vec::new(),
            }),
            ids: Mutex::new(TopicIds::default()),
        });
        if let Err(e) = member.join().await {
            cluster.close().await;
            return Err(e);
        }
        let (stop_tx, stop_rx) = async_channel::bounded::<()>(1);
        let task = rt::spawn(heartbeat_loop(Arc::clone(&member), stop_rx));
        Ok(KafkaShare {
            cluster,
            member,
            sessions: HashMap::new(),
            stop: Some(stop_tx),
            heartbeat: rt::sync::TaskSlot::new(task),
        })
    }

    pub(crate) fn member_id(&self) -> String {
        self.member.member_id()
    }

    pub(crate) fn assignment(&self) -> Vec<Tp> {
        self.member.assignment()
    }

    /// The broker whose open session holds `tp`.
    fn session_of(&self, tp: &Tp) -> Option<i32> {
        self.sessions
            .iter()
            .find(|(_, s)| s.epoch > 0 && s.partitions.contains(tp))
            .map(|(n, _)| *n)
    }

    /// Sends `acks` with a ShareFetch to each leader of the assignment and
    /// acquires records.
    pub(crate) async fn fetch(
        &mut self,
        acks: Vec<ShareAcknowledgement>,
        limits: FetchLimits,
    ) -> Result<Fetched> {
        let assignment = self.member.assignment();
        if assignment.is_empty() {
            // Nothing assigned yet (a topic that does not exist, an
            // assignment on its way): send the acknowledgements, ask again
            // after a wait.
            if !acks.is_empty() {
                self.acknowledge(&acks).await?;
            }
            rt::sleep(limits.max_wait.min(Duration::from_millis(200))).await;
            let dropped = self.member.keep().await?;
            if dropped {
                self.sessions.clear();
            }
            return Ok(Fetched {
                partitions: Vec::new(),
                dropped,
            });
        }
        let mut wanted: BTreeMap<i32, BTreeSet<Tp>> = BTreeMap::new();
        let mut stale: Vec<String> = Vec::new();
        for tp in assignment {
            match self.cluster.leader(&tp.0, tp.1).await {
                Ok(m) => {
                    wanted.entry(m.leader).or_default().insert(tp);
                }
                Err(e) if e.is_retriable() => stale.push(tp.0),
                Err(e) => return Err(e),
            }
        }
        let mut acks_at: BTreeMap<i32, Vec<ShareAcknowledgement>> = BTreeMap::new();
        for a in acks {
            let tp = (a.topic.clone(), a.partition);
            let node = self.session_of(&tp).or_else(|| {
                wanted
                    .iter()
                    .find(|(_, ps)| ps.contains(&tp))
                    .map(|(n, _)| *n)
            });
            match node {
                Some(n) => acks_at.entry(n).or_default().push(a),
                None => tracing::warn!(
                    topic = %a.topic, partition = a.partition, first = a.first_offset,
                    last = a.last_offset,
                    "share acknowledgement dropped: no broker to send it to (the records come back)"
                ),
            }
        }
        let mut nodes: BTreeSet<i32> = wanted.keys().copied().collect();
        nodes.extend(acks_at.keys().copied());
        let mut round: Vec<(i32, BTreeSet<Tp>, Vec<ShareAcknowledgement>)> = nodes
            .into_iter()
            .map(|n| {
                (
                    n,
                    wanted.remove(&n).unwrap_or_default(),
                    acks_at.remove(&n).unwrap_or_default(),
                )
            })
            .collect();
        if round.is_empty() {
            // No leader known for any assigned partition: pause before the
            // caller asks again.
            super::backoff(&self.cluster).await;
        }
        let mut out = Fetched::default();
        let mut fatal = None;
        let mut opened = Vec::new();
        // A session the broker refuses for its epoch (a poll cancelled after
        // its request went out, a broker that dropped it) is opened again
        // at once, its acknowledgements following the opening fetch: the
        // refused request applied none of them.
        for attempt in 0..2 {
            if round.is_empty() {
                break;
            }
            let mut limits = limits;
            if attempt > 0 && !out.partitions.is_empty() {
                limits.max_wait = Duration::ZERO;
            }
            let plans: Vec<Planned> = round
                .drain(..)
                .map(|(node, parts, acks)| self.plan(node, parts, acks, limits))
                .collect();
            let cluster = &self.cluster;
            let sent = futures::future::join_all(plans.into_iter().map(|p| async move {
                let r = async {
                    let conn = cluster.broker(p.node).await?;
                    let v = conn.version(ApiKey::ShareFetch)?;
                    conn.call_at(&p.req, v, limits.max_wait).await
                }
                .await;
                (p, r)
            }))
            .await;
            for (p, r) in sent {
                let session = self.sessions.entry(p.node).or_default();
                let resp = match r {
                    Ok(resp) => resp,
                    Err(e) => {
                        // Whether the broker took the request is unknown: the
                        // next fetch opens a new session.
                        *session = Session::default();
                        if e.is_retriable() {
                            tracing::debug!(node = p.node, error = %e, "share fetch failed");
                            stale.extend(p.wanted.iter().map(|(t, _)| t.clone()));
                        } else {
                            fatal.get_or_insert(e);
                        }
                        continue;
                    }
                };
                match resp.error_code {
                    errors::NONE => {
                        session.epoch = next_epoch(p.req.share_session_epoch);
                        session.partitions = p.partitions.clone();
                        if !p.deferred.is_empty() {
                            opened.push((p.node, p.deferred.clone()));
                        }
                    }
                    c if is_fenced_code(c) => {
                        out.dropped = true;
                        continue;
                    }
                    c if matches!(
                        c,
                        errors::SHARE_SESSION_NOT_FOUND | errors::INVALID_SHARE_SESSION_EPOCH
                    ) && attempt == 0 =>
                    {
                        tracing::debug!(node = p.node, code = c, "share session opened again");
                        *session = Session::default();
                        round.push((p.node, p.wanted, p.acks));
                        continue;
                    }
                    c => {
                        *session = Session::default();
                        if matches!(
                            c,
                            errors::SHARE_SESSION_NOT_FOUND | errors::INVALID_SHARE_SESSION_EPOCH
                        ) || errors::is_retriable(c)
                        {
                            tracing::debug!(
                                node = p.node,
                                code = c,
                                "share session to be opened again"
                            );
                            stale.extend(p.wanted.iter().map(|(t, _)| t.clone()));
                        } else {
                            fatal.get_or_insert(errors::error_with(
                                c,
                                format!("ShareFetch of share group {}", self.member.group),
                                resp.error_message.as_deref(),
                            ));
                        }
                        continue;
                    }
                }
                self.take_records(&p, resp, limits, &mut out, &mut stale)?;
            }
            if out.dropped {
                break;
            }
        }
        if out.dropped {
            // The coordinator dropped the member and gave its records back.
            self.sessions.clear();
            self.member.join().await?;
            return Ok(out);
        }
        for (node, acks) in opened {
            match self.acknowledge_at(node, &acks, false).await {
                Ok(codes) => warn_refused(&acks, &codes),
                Err(e) => tracing::warn!(node, error = %e, "share acknowledgements lost"),
            }
        }
        if !stale.is_empty() {
            stale.sort();
            stale.dedup();
            if let Err(e) = self.cluster.refresh_stale(&stale).await {
                tracing::debug!(error = %e, "metadata refresh failed");
            }
        }
        match fatal {
            Some(e) if out.partitions.is_empty() => Err(e),
            Some(e) => {
                tracing::warn!(error = %e, "share fetch refused at a broker");
                Ok(out)
            }
            None => Ok(out),
        }
    }

    /// The ShareFetch to `node`: the whole list when its session is to be
    /// opened (the acknowledgements then follow it), else what changed.
    fn plan(
        &self,
        node: i32,
        parts: BTreeSet<Tp>,
        acks: Vec<ShareAcknowledgement>,
        limits: FetchLimits,
    ) -> Planned {
        let session = self.sessions.get(&node);
        let epoch = session.map_or(0, |s| s.epoch);
        let Diff {
            listed,
            forgotten,
            deferred,
        } = diff(session, &parts, &acks);
        let acked: BTreeSet<Tp> = listed
            .iter()
            .filter(|(_, b)| !b.is_empty())
            .map(|(tp, _)| tp.clone())
            .collect();
        let wanted = parts.clone();
        let mut topics: Vec<FetchTopic> = Vec::new();
        // A partition listed for its acknowledgements joins the session at
        // the broker (and is forgotten by the next request if not assigned).
        let mut partitions = parts;
        if epoch != 0 {
            partitions.extend(acked.iter().cloned());
        }
        for ((topic, partition), batches) in listed {
            let Some(id) = self.member.id_of(&topic) else {
                partitions.remove(&(topic, partition));
                continue;
            };
            let batches = batches
                .into_iter()
                .map(|(first, last, ty)| {
                    AcknowledgementBatch::default()
                        .with_first_offset(first)
                        .with_last_offset(last)
                        .with_acknowledge_types(vec![ty])
                })
                .collect();
            let fp = FetchPartition::default()
                .with_partition_index(partition)
                .with_acknowledgement_batches(batches);
            match topics.last_mut() {
                Some(t) if t.topic_id == id => t.partitions.push(fp),
                _ => topics.push(
                    FetchTopic::default()
                        .with_topic_id(id)
                        .with_partitions(vec![fp]),
                ),
            }
        }
        let mut forgotten_topics: Vec<ForgottenTopic> = Vec::new();
        for (topic, partition) in forgotten {
            let Some(id) = self.member.id_of(&topic) else {
                continue;
            };
            match forgotten_topics.last_mut() {
                Some(t) if t.topic_id == id => t.partitions.push(partition),
                _ => forgotten_topics.push(
                    ForgottenTopic::default()
                        .with_topic_id(id)
                        .with_partitions(vec![partition]),
                ),
            }
        }
        let req = ShareFetchRequest::default()
            .with_group_id(Some(GroupId(StrBytes::from_string(
                self.member.group.clone(),
            ))))
            .with_member_id(Some(StrBytes::from_string(self.member.member_id())))
            .with_share_session_epoch(epoch)
            .with_max_wait_ms(i32::try_from(limits.max_wait.as_millis()).unwrap_or(i32::MAX))
            .with_min_bytes(1)
            .with_max_bytes(limits.max_bytes)
            .with_max_records(limits.max_records)
            .with_batch_size(limits.max_records)
            .with_topics(topics)
            .with_forgotten_topics_data(forgotten_topics);
        Planned {
            node,
            req,
            partitions,
            wanted,
            acks,
            deferred,
            acked,
        }
    }

    /// The acquired records of one broker's answer.
    fn take_records(
        &self,
        p: &Planned,
        resp: ShareFetchResponse,
        limits: FetchLimits,
        out: &mut Fetched,
        stale: &mut Vec<String>,
    ) -> Result<()> {
        for t in resp.responses {
            let Some(topic) = self.member.name_of(&t.topic_id) else {
                tracing::debug!(topic_id = %t.topic_id, "share fetch answered an unknown topic id");
                continue;
            };
            for part in t.partitions {
                let tp = (topic.clone(), part.partition_index);
                if part.acknowledge_error_code != errors::NONE && p.acked.contains(&tp) {
                    tracing::warn!(
                        topic = %topic, partition = part.partition_index,
                        error = %errors::name(part.acknowledge_error_code),
                        "share acknowledgements refused (the records come back or were taken)"
                    );
                }
                if part.error_code != errors::NONE {
                    tracing::debug!(
                        topic = %topic, partition = part.partition_index,
                        error = %errors::name(part.error_code), "share fetch partition"
                    );
                    if errors::is_stale_leader(part.error_code) {
                        stale.push(topic.clone());
                    }
                    continue;
                }
                if part.acquired_records.is_empty() {
                    continue;
                }
                let bytes = part.records.unwrap_or_default();
                let (records, _) = decode_records(&bytes, 0, limits.max_bytes).map_err(|e| {
                    Error::CorruptRecord {
                        detail: format!("{topic}/{}: {e}", part.partition_index),
                    }
                })?;
                let records: Vec<(Record, u16)> = records
                    .into_iter()
                    .filter_map(|r| {
                        let o = i64::try_from(r.offset).ok()?;
                        let run = part
                            .acquired_records
                            .iter()
                            .find(|a| a.first_offset <= o && o <= a.last_offset)?;
                        Some((r, u16::try_from(run.delivery_count).unwrap_or(1).max(1)))
                    })
                    .collect();
                if !records.is_empty() {
                    out.partitions.push(FetchedPartition {
                        topic: topic.clone(),
                        partition: part.partition_index,
                        records,
                    });
                }
            }
        }
        Ok(())
    }

    /// ShareAcknowledge of `acks` at the broker whose session holds each
    /// partition; one outcome per acknowledgement, in order (the
    /// partition's code: Kafka answers acknowledgements per partition).
    ///
    /// # Errors
    /// Connection failures; UNKNOWN_MEMBER_ID and FENCED_MEMBER_EPOCH (the
    /// member was dropped: its records went back).
    pub(crate) async fn acknowledge(
        &mut self,
        acks: &[ShareAcknowledgement],
    ) -> Result<Vec<ErrorCode>> {
        let mut by_node: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
        let mut out = vec![to_flume(errors::SHARE_SESSION_NOT_FOUND); acks.len()];
        for (i, a) in acks.iter().enumerate() {
            if let Some(n) = self.session_of(&(a.topic.clone(), a.partition)) {
                by_node.entry(n).or_default().push(i);
            }
        }
        for (node, idx) in by_node {
            let these: Vec<ShareAcknowledgement> = idx.iter().map(|&i| acks[i].clone()).collect();
            let codes = self.acknowledge_at(node, &these, false).await?;
            for (i, code) in idx.into_iter().zip(codes) {
                out[i] = code;
            }
        }
        Ok(out)
    }

    /// One ShareAcknowledge at `node` in its session (`close`: epoch -1,
    /// which closes it); one outcome per acknowledgement.
    async fn acknowledge_at(
        &mut self,
        node: i32,
        acks: &[ShareAcknowledgement],
        close: bool,
    ) -> Result<Vec<ErrorCode>> {
        let epoch = self.sessions.get(&node).map_or(0, |s| s.epoch);
        if epoch == 0 {
            return Ok(vec![to_flume(errors::SHARE_SESSION_NOT_FOUND); acks.len()]);
        }
        let mut topics: Vec<AcknowledgeTopic> = Vec::new();
        let mut unnamed = BTreeSet::new();
        for a in acks {
            let Some(id) = self.member.id_of(&a.topic) else {
                unnamed.insert((a.topic.clone(), a.partition));
                continue;
            };
            let batch = AckBatch::default()
                .with_first_offset(a.first_offset)
                .with_last_offset(a.last_offset)
                .with_acknowledge_types(vec![a.ack_type]);
            let t = match topics.iter_mut().position(|t| t.topic_id == id) {
                Some(i) => &mut topics[i],
                None => {
                    topics.push(AcknowledgeTopic::default().with_topic_id(id));
                    let last = topics.len() - 1;
                    &mut topics[last]
                }
            };
            match t
                .partitions
                .iter_mut()
                .find(|p| p.partition_index == a.partition)
            {
                Some(p) => p.acknowledgement_batches.push(batch),
                None => t.partitions.push(
                    AcknowledgePartition::default()
                        .with_partition_index(a.partition)
                        .with_acknowledgement_batches(vec![batch]),
                ),
            }
        }
        let req = ShareAcknowledgeRequest::default()
            .with_group_id(Some(GroupId(StrBytes::from_string(
                self.member.group.clone(),
            ))))
            .with_member_id(Some(StrBytes::from_string(self.member.member_id())))
            .with_share_session_epoch(if close { -1 } else { epoch })
            .with_topics(topics);
        let r: Result<ShareAcknowledgeResponse> = async {
            let conn = self.cluster.broker(node).await?;
            let v = conn.version(ApiKey::ShareAcknowledge)?;
            conn.call_at(&req, v, Duration::ZERO).await
        }
        .await;
        let session = self.sessions.entry(node).or_default();
        let resp = match r {
            Ok(resp) => resp,
            Err(e) => {
                *session = Session::default();
                return Err(e);
            }
        };
        match resp.error_code {
            errors::NONE if close => *session = Session::default(),
            errors::NONE => session.epoch = next_epoch(epoch),
            c => {
                *session = Session::default();
                if is_fenced_code(c)
                    || !matches!(
                        c,
                        errors::SHARE_SESSION_NOT_FOUND | errors::INVALID_SHARE_SESSION_EPOCH
                    )
                {
                    return Err(errors::error_with(
                        c,
                        format!("ShareAcknowledge of share group {}", self.member.group),
                        resp.error_message.as_deref(),
                    ));
                }
                return Ok(vec![to_flume(c); acks.len()]);
            }
        }
        let mut codes: HashMap<(Uuid, i32), i16> = HashMap::new();
        for t in &resp.responses {
            for p in &t.partitions {
                codes.insert((t.topic_id, p.partition_index), p.error_code);
            }
        }
        Ok(acks
            .iter()
            .map(|a| {
                if unnamed.contains(&(a.topic.clone(), a.partition)) {
                    return to_flume(errors::UNKNOWN_TOPIC_OR_PARTITION);
                }
                let code = self
                    .member
                    .id_of(&a.topic)
                    .and_then(|id| codes.get(&(id, a.partition)).copied())
                    // A partition the answer leaves out: nothing said
                    // against it (Kafka answers every partition sent).
                    .unwrap_or(errors::NONE);
                to_flume(code)
            })
            .collect())
    }

    /// Closes every share session (its acknowledgements with it: the
    /// broker gives back what the member still holds), stops the
    /// heartbeats, leaves the group and closes the connections.
    ///
    /// # Errors
    /// The first failure of the acknowledgements or the leave.
    pub(crate) async fn close(&mut self, acks: Vec<ShareAcknowledgement>) -> Result<()> {
        let mut first_err = None;
        let mut by_node: BTreeMap<i32, Vec<ShareAcknowledgement>> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.epoch > 0)
            .map(|(n, _)| (*n, Vec::new()))
            .collect();
        for a in acks {
            match self.session_of(&(a.topic.clone(), a.partition)) {
                Some(n) => by_node.entry(n).or_default().push(a),
                None => tracing::warn!(
                    topic = %a.topic, partition = a.partition,
                    "share acknowledgement dropped at close: no open session for its partition"
                ),
            }
        }
        for (node, acks) in by_node {
            match self.acknowledge_at(node, &acks, true).await {
                Ok(codes) => warn_refused(&acks, &codes),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        self.sessions.clear();
        self.stop.take();
        let _ = self.heartbeat.cancel().await;
        if let Err(e) = self.member.beat(false, true).await {
            first_err.get_or_insert(e);
        }
        self.cluster.close().await;
        first_err.map_or(Ok(()), Err)
    }
}

/// Logs the acknowledgements a broker refused.
fn warn_refused(acks: &[ShareAcknowledgement], codes: &[ErrorCode]) {
    for (a, code) in acks.iter().zip(codes) {
        if !code.is_ok() {
            tracing::warn!(
                topic = %a.topic, partition = a.partition, first = a.first_offset,
                last = a.last_offset, error = %code,
                "share acknowledgement refused (the records come back or were taken)"
            );
        }
    }
}

/// Flume's code for a Kafka code where there is one (INVALID_RECORD_STATE
/// is [`ErrorCode::InvalidRecordState`]), else the Kafka code as
/// [`ErrorCode::Other`].
fn to_flume(code: i16) -> ErrorCode {
    errors::flume_equivalent(code).unwrap_or(ErrorCode::Other(code))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(t: &str, p: i32) -> Tp {
        (t.to_owned(), p)
    }

    fn ack(t: &str, p: i32, first: i64, last: i64, ty: i8) -> ShareAcknowledgement {
        ShareAcknowledgement {
            topic: t.to_owned(),
            partition: p,
            first_offset: first,
            last_offset: last,
            ack_type: ty,
        }
    }

    #[test]
    fn an_opening_fetch_lists_every_partition_and_holds_acknowledgements_back() {
        let parts: BTreeSet<Tp> = [tp("a", 0), tp("a", 1)].into_iter().collect();
        let acks = vec![ack("a", 0, 3, 4, 1)];
        for session in [
            None,
            Some(Session {
                epoch: 0,
                partitions: BTreeSet::new(),
            }),
        ] {
            let d = diff(session.as_ref(), &parts, &acks);
            assert_eq!(
                d.listed.keys().cloned().collect::<Vec<_>>(),
                vec![tp("a", 0), tp("a", 1)]
            );
            assert!(d.listed.values().all(Vec::is_empty));
            assert!(d.forgotten.is_empty());
            assert_eq!(d.deferred, acks);
        }
    }

    #[test]
    fn an_incremental_fetch_lists_what_changed_and_carries_acknowledgements() {
        let session = Session {
            epoch: 3,
            partitions: [tp("a", 0), tp("a", 1), tp("b", 0)].into_iter().collect(),
        };
        // a/1 no longer assigned, c/0 new; acknowledgements on a/0 and on b/0,
        // which is no longer assigned either: forgotten next time.
        let parts: BTreeSet<Tp> = [tp("a", 0), tp("c", 0)].into_iter().collect();
        let acks = vec![
            ack("a", 0, 0, 1, 1),
            ack("a", 0, 2, 2, 2),
            ack("b", 0, 7, 7, 3),
        ];
        let d = diff(Some(&session), &parts, &acks);
        let listed: Vec<(Tp, Batches)> = d.listed.into_iter().collect();
        assert_eq!(
            listed,
            vec![
                (tp("a", 0), vec![(0, 1, 1), (2, 2, 2)]),
                (tp("b", 0), vec![(7, 7, 3)]),
                (tp("c", 0), vec![]),
            ]
        );
        assert_eq!(d.forgotten, vec![tp("a", 1)]);
        assert!(d.deferred.is_empty());
        // Nothing changed, nothing acknowledged: an empty list.
        let same = diff(Some(&session), &session.partitions, &[]);
        assert_eq!(same, Diff::default());
    }

    #[test]
    fn session_epochs_wrap_to_one() {
        assert_eq!(next_epoch(0), 1);
        assert_eq!(next_epoch(41), 42);
        assert_eq!(next_epoch(i32::MAX), 1);
    }

    #[test]
    fn member_ids_are_kafka_style_and_differ() {
        let a = new_member_id().unwrap();
        let b = new_member_id().unwrap();
        assert_eq!(a.len(), 22);
        assert_ne!(a, b);
    }

    #[test]
    fn kafka_codes_map_to_flume_codes() {
        assert_eq!(to_flume(0), ErrorCode::None);
        assert_eq!(to_flume(121), ErrorCode::InvalidRecordState);
        assert_eq!(to_flume(25), ErrorCode::UnknownMember);
        assert_eq!(to_flume(122), ErrorCode::Other(122));
    }
}

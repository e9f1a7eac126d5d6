//! `GroupConsumer` over Kafka's consumer group protocol (KIP-848,
//! [`GroupProtocol::Consumer`](crate::GroupProtocol::Consumer)): membership
//! by ConsumerGroupHeartbeat at the group's coordinator, the assignment
//! computed there, and incremental reconciliation in the member. What the
//! classic member has besides (fetching, positions, commits, the revoke
//! step, events) is `group.rs`'s; this file is the membership.
//!
//! - Joining: epoch 0 with a member id made here (a UUID v4, as Kafka's
//!   clients make their own; one the coordinator answers replaces it), the
//!   subscribed topic names, the server assignor if one was named
//!   (`uniform`, `range`) and the rebalance timeout. Every heartbeat
//!   carries the same and the partitions the member owns (by topic id), so
//!   the coordinator always answers the whole assignment.
//! - Heartbeats: a task sends one every `heartbeat_interval_ms` the
//!   coordinator answers, and at once after the member gave partitions up
//!   or took new ones (the acknowledgement). Heartbeats go on while the
//!   application is busy, so the session outlives slow processing; a
//!   revocation waits for the application's next `recv` (the coordinator
//!   bounds that wait by the rebalance timeout).
//! - Reconciliation ([`Reconciler`], pure, time passed in): the assignment
//!   answered names topics by id (resolved through Metadata v10+); the
//!   partitions owned and no longer assigned are revoked first (committed
//!   with auto-commit or commit-on-revoke, `Revoked` with just those), the
//!   heartbeat reports what is left (the coordinator then hands them to
//!   their new owner), then the newly assigned partitions are taken
//!   (positions from the committed offsets or `auto.offset.reset`) and
//!   `Assigned` carries the whole assignment with the member epoch.
//! - FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID: the member lost its partitions
//!   (dropped without committing, as Kafka's clients do; `Revoked`), then
//!   joins again with epoch 0 and the same id. NOT_COORDINATOR and
//!   COORDINATOR_NOT_AVAILABLE: the coordinator is found again. A failing
//!   join backs off as the classic member's does (`join_failures.rs`).
//!   A cluster without ConsumerGroupHeartbeat, an unknown assignor and the
//!   like are the consumer's error.
//! - Commits carry the member epoch as generation (OffsetCommit v9, which
//!   Kafka requires of consumer-protocol members); a commit refused with
//!   STALE_MEMBER_EPOCH while a heartbeat moved the epoch is sent again
//!   with the new one. `close` commits, then leaves with epoch -1.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::lock::Mutex as AsyncMutex;
use futures::FutureExt;
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::{ApiKey, ConsumerGroupHeartbeatRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::assignor::Tp;
use super::cluster::Cluster;
use super::errors;
use super::membership::Shared;
use super::offsets::group_id;
use crate::error::{Error, Result};
use crate::join_failures::{self, JoinFailures};
use flume_rt as rt;
use flume_rt::sync::lock;

/// Kafka's STALE_MEMBER_EPOCH: a commit with an epoch older than the member's.
pub(crate) const STALE_MEMBER_EPOCH: i16 = 113;

/// The server assignors a member may name.
pub(crate) const SERVER_ASSIGNORS: &[&str] = &["uniform", "range"];

/// The builder's assignor as a server assignor: none for an empty name.
///
/// # Errors
/// [`Error::InvalidArgument`] for a name that is not a server assignor (the
/// classic protocol's client-side names among them).
pub(crate) fn server_assignor(name: &str) -> Result<Option<&'static str>> {
    let name = name.trim();
    if name.is_empty() {
        return Ok(None);
    }
    SERVER_ASSIGNORS
        .iter()
        .copied()
        .find(|a| *a == name)
        .map(Some)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "assignor {name:?} is not a server assignor of the consumer group protocol \
                 (uniform, range; or none for the coordinator's default)"
            ))
        })
}

/// A member id as Kafka's clients make one for ConsumerGroupHeartbeat v1:
/// a random UUID (v4).
fn new_member_id() -> Result<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b)
        .map_err(|e| Error::InvalidArgument(format!("no randomness for a member id: {e}")))?;
    Ok(uuid::Builder::from_random_bytes(b).into_uuid().to_string())
}

/// Where the member stands in the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// The next heartbeat joins (epoch 0).
    Joining,
    /// In the group, at `epoch`.
    Member,
    /// Fenced: the application drops its partitions, then the member joins
    /// again. No heartbeat meanwhile.
    Fenced,
    /// Left, or failed for good: no more heartbeats.
    Done,
}

/// One heartbeat to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Beat {
    pub(crate) member_id: String,
    pub(crate) epoch: i32,
    /// The partitions the member owns, sorted.
    pub(crate) owned: Vec<Tp>,
}

/// A heartbeat's answer, with topic names resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    /// The member id the coordinator knows the member by, if it said.
    pub(crate) member_id: Option<String>,
    pub(crate) epoch: i32,
    pub(crate) interval: Duration,
    /// The assignment; `None`: unchanged.
    pub(crate) assignment: Option<BTreeSet<Tp>>,
}

/// What the application is to do next with its partitions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Work {
    /// The member was fenced: `revoke` (everything it owns) is lost, not
    /// committed, and the member joins again.
    pub(crate) lost: bool,
    /// Owned and no longer assigned: give up (after committing).
    pub(crate) revoke: Vec<Tp>,
    /// Assigned and not yet owned: take.
    pub(crate) assign: Vec<Tp>,
}

/// The member's side of KIP-848's reconciliation, without I/O: what to
/// send in the next heartbeat and when, what the answers change, and what
/// the application is to revoke and take. Time is passed in.
#[derive(Debug, Clone)]
pub(crate) struct Reconciler {
    member_id: String,
    epoch: i32,
    phase: Phase,
    /// The partitions the application holds (fetches, commits).
    pub(super) owned: BTreeSet<Tp>,
    /// The assignment last answered.
    target: Option<BTreeSet<Tp>>,
    /// Whether the application has been told of its assignment since it
    /// (last) joined: the first answer is announced even when it assigns
    /// nothing.
    announced: bool,
    interval: Duration,
    next_beat: Instant,
}

/// The shortest pause between heartbeats, whatever a coordinator answers.
const MIN_INTERVAL: Duration = Duration::from_millis(10);

impl Reconciler {
    /// A member about to join as `member_id`.
    pub(crate) fn new(member_id: String, now: Instant) -> Self {
        Reconciler {
            member_id,
            epoch: 0,
            phase: Phase::Joining,
            owned: BTreeSet::new(),
            target: None,
            announced: false,
            interval: Duration::from_secs(5),
            next_beat: now,
        }
    }

    pub(crate) fn member_id(&self) -> &str {
        &self.member_id
    }

    /// The member epoch (0 while joining).
    pub(crate) fn epoch(&self) -> i32 {
        self.epoch
    }

    pub(crate) fn phase(&self) -> Phase {
        self.phase
    }

    /// How long until the next heartbeat is due; `None`: none is, until
    /// the application acts (fenced) or ever (done).
    pub(crate) fn until_beat(&self, now: Instant) -> Option<Duration> {
        match self.phase {
            Phase::Fenced | Phase::Done => None,
            Phase::Joining | Phase::Member => Some(self.next_beat.saturating_duration_since(now)),
        }
    }

    /// The heartbeat to send now, if the member sends one. The next is due
    /// an interval on unless an answer or the application says otherwise.
    pub(crate) fn beat(&mut self, now: Instant) -> Option<Beat> {
        let epoch = match self.phase {
            Phase::Joining => 0,
            Phase::Member => self.epoch,
            Phase::Fenced | Phase::Done => return None,
        };
        self.next_beat = now + self.interval;
        Some(Beat {
            member_id: self.member_id.clone(),
            epoch,
            owned: self.owned.iter().cloned().collect(),
        })
    }

    /// The coordinator took a heartbeat. True when the application has work.
    pub(crate) fn answered(&mut self, now: Instant, a: Answer) -> bool {
        if self.phase == Phase::Done || self.phase == Phase::Fenced {
            return self.has_work();
        }
        if let Some(id) = a.member_id.filter(|m| !m.is_empty()) {
            self.member_id = id;
        }
        self.epoch = a.epoch;
        if a.interval > Duration::ZERO {
            self.interval = a.interval.max(MIN_INTERVAL);
        }
        self.phase = Phase::Member;
        self.next_beat = now + self.interval;
        if let Some(t) = a.assignment {
            self.target = Some(t);
        }
        self.has_work()
    }

    /// The coordinator no longer knows the member or its epoch
    /// (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID): what it owns is lost.
    pub(crate) fn fenced(&mut self, now: Instant) {
        if self.phase == Phase::Done {
            return;
        }
        self.epoch = 0;
        self.target = None;
        self.announced = false;
        if self.owned.is_empty() {
            self.phase = Phase::Joining;
            self.next_beat = now;
        } else {
            self.phase = Phase::Fenced;
        }
    }

    /// The heartbeat failed (a connection, a coordinator that moved): the
    /// next one at `at`.
    pub(crate) fn retry_at(&mut self, at: Instant) {
        self.next_beat = at;
    }

    /// No more heartbeats (left, or a failure that ends the consumer).
    pub(crate) fn done(&mut self) {
        self.phase = Phase::Done;
    }

    /// What the application is to do, if anything.
    pub(crate) fn work(&self) -> Option<Work> {
        match self.phase {
            Phase::Fenced => Some(Work {
                lost: true,
                revoke: self.owned.iter().cloned().collect(),
                assign: Vec::new(),
            }),
            Phase::Member => {
                let target = self.target.as_ref()?;
                let w = Work {
                    lost: false,
                    revoke: self.owned.difference(target).cloned().collect(),
                    assign: target.difference(&self.owned).cloned().collect(),
                };
                (!self.announced || !w.revoke.is_empty() || !w.assign.is_empty()).then_some(w)
            }
            Phase::Joining | Phase::Done => None,
        }
    }

    pub(crate) fn has_work(&self) -> bool {
        self.work().is_some()
    }

    /// The application dropped what it owned after a fence: join again.
    pub(crate) fn lost(&mut self, now: Instant) {
        self.owned.clear();
        if self.phase == Phase::Fenced {
            self.phase = Phase::Joining;
            self.next_beat = now;
        }
    }

    /// The application gave `parts` up: acknowledged at once.
    pub(crate) fn revoked(&mut self, parts: &[Tp], now: Instant) {
        for tp in parts {
            self.owned.remove(tp);
        }
        self.next_beat = now;
    }

    /// The application took `parts` (those still assigned are kept) and
    /// has been told of its assignment: the coordinator hears at once.
    pub(crate) fn assigned(&mut self, parts: &[Tp], now: Instant) {
        if self.phase != Phase::Member {
            return;
        }
        let target = self.target.clone().unwrap_or_default();
        self.owned
            .extend(parts.iter().filter(|tp| target.contains(*tp)).cloned());
        self.announced = true;
        self.next_beat = now;
    }

    /// The leave heartbeat (epoch -1), if the member is in the group;
    /// no heartbeat follows.
    pub(crate) fn leave(&mut self) -> Option<Beat> {
        let in_group = self.phase == Phase::Member;
        self.phase = Phase::Done;
        in_group.then(|| Beat {
            member_id: self.member_id.clone(),
            epoch: -1,
            owned: Vec::new(),
        })
    }
}

/// The topic ids of the subscription, both ways, from the last Metadata.
#[derive(Debug, Default)]
struct TopicIds {
    by_id: HashMap<Uuid, String>,
    by_name: HashMap<String, Uuid>,
}

/// A consumer-protocol member: shared by the consumer (reconciliation,
/// under its lock) and its heartbeat task.
pub(crate) struct Member {
    cluster: Arc<Cluster>,
    group: String,
    topics: Vec<String>,
    assignor: Option<&'static str>,
    rebalance_timeout: Duration,
    pub(super) rec: Mutex<Reconciler>,
    ids: Mutex<TopicIds>,
    /// Held while a heartbeat is in flight: the leave waits for it.
    beating: AsyncMutex<()>,
    /// Notified when a heartbeat is due at once (the application acted).
    wake: event_listener::Event,
    /// The error that ends the consumer, once there is one.
    pub(super) fatal: Mutex<Option<Error>>,
    /// The consumer's: member id and epoch for commits, `rebalance` to cut
    /// a waiting fetch short, `stop`.
    shared: Arc<Shared>,
}

impl Member {
    /// A member of `cfg`'s group, not yet joined.
    ///
    /// # Errors
    /// An assignor that is not a server assignor.
    pub(super) fn new(
        cluster: Arc<Cluster>,
        cfg: &crate::types::group::GroupConsumerBuilder,
        shared: Arc<Shared>,
    ) -> Result<Member> {
        let assignor = server_assignor(cfg.assignor_setting())?;
        Ok(Member {
            cluster,
            group: cfg.group_name().to_owned(),
            topics: cfg.topic_names().to_vec(),
            assignor,
            rebalance_timeout: cfg.rebalance(),
            rec: Mutex::new(Reconciler::new(new_member_id()?, Instant::now())),
            ids: Mutex::new(TopicIds::default()),
            beating: AsyncMutex::new(()),
            wake: event_listener::Event::new(),
            fatal: Mutex::new(None),
            shared,
        })
    }

    /// Whether the consumer has reconciling to do (or an error to return).
    pub(crate) fn pending(&self) -> bool {
        lock(&self.rec).has_work() || lock(&self.fatal).is_some()
    }

    /// Makes the heartbeat task send one at once.
    pub(crate) fn wake(&self) {
        self.wake.notify(usize::MAX);
    }

    fn fail(&self, e: Error) {
        lock(&self.rec).done();
        lock(&self.fatal).get_or_insert(e);
        self.shared.rebalance.notify(usize::MAX);
    }

    fn unsupported(&self, addr: &str) -> Error {
        errors::error(
            errors::UNSUPPORTED_VERSION,
            format!(
                "group {}: the broker at {addr} does not serve ConsumerGroupHeartbeat: the \
                 cluster does not serve the consumer group protocol (KIP-848, Kafka 4.0+); \
                 use GroupProtocol::Classic",
                self.group
            ),
        )
    }

    /// Sends the heartbeat due (if one is) and takes its answer in.
    ///
    /// # Errors
    /// A connection failure, a coordinator that moved (both retriable: the
    /// next heartbeat after a pause), a refusal that ends the consumer.
    async fn beat_once(&self, leave: bool) -> Result<()> {
        let _one = self.beating.lock().await;
        if !leave && self.shared.stop.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        let conn = self.cluster.coordinator(&self.group).await?;
        let v = conn
            .version(ApiKey::ConsumerGroupHeartbeat)
            .map_err(|_| self.unsupported(conn.addr()))?;
        let beat = {
            let mut rec = lock(&self.rec);
            if leave {
                rec.leave()
            } else {
                rec.beat(Instant::now())
            }
        };
        let Some(beat) = beat else { return Ok(()) };
        let owned: Vec<TopicPartitions> = {
            let ids = lock(&self.ids);
            let mut by_topic: std::collections::BTreeMap<Uuid, Vec<i32>> = Default::default();
            for (t, p) in &beat.owned {
                if let Some(id) = ids.by_name.get(t) {
                    by_topic.entry(*id).or_default().push(*p);
                }
            }
            by_topic
                .into_iter()
                .map(|(id, ps)| {
                    TopicPartitions::default()
                        .with_topic_id(id)
                        .with_partitions(ps)
                })
                .collect()
        };
        let mut req = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(group_id(&self.group))
            .with_member_id(StrBytes::from_string(beat.member_id.clone()))
            .with_member_epoch(beat.epoch);
        if !leave {
            req = req
                .with_rebalance_timeout_ms(
                    i32::try_from(self.rebalance_timeout.as_millis()).unwrap_or(i32::MAX),
                )
                .with_subscribed_topic_names(Some(
                    self.topics
                        .iter()
                        .map(|t| TopicName(StrBytes::from_string(t.clone())))
                        .collect(),
                ))
                .with_server_assignor(self.assignor.map(StrBytes::from_static_str))
                .with_topic_partitions(Some(owned));
        }
        let resp = match conn.call_at(&req, v, Duration::ZERO).await {
            Ok(r) => r,
            Err(e) => {
                self.cluster.forget_coordinator(&self.group);
                return Err(e);
            }
        };
        let code = resp.error_code;
        let context = || format!("group {}", self.group);
        if leave {
            return errors::check(code, context);
        }
        match code {
            errors::NONE => {}
            errors::FENCED_MEMBER_EPOCH | errors::UNKNOWN_MEMBER_ID => {
                tracing::debug!(group = %self.group, member = %beat.member_id, epoch = beat.epoch, code, "fenced; the member's partitions are lost, joining again");
                lock(&self.rec).fenced(Instant::now());
                self.publish();
                return Ok(());
            }
            errors::UNSUPPORTED_VERSION => return Err(self.unsupported(conn.addr())),
            c => {
                if errors::is_coordinator_moved(c) {
                    self.cluster.forget_coordinator(&self.group);
                }
                return Err(errors::error_with(
                    c,
                    context(),
                    resp.error_message.as_deref(),
                ));
            }
        }
        let assignment = match resp.assignment {
            None => None,
            Some(a) => Some(self.resolve(a.topic_partitions).await?),
        };
        let answer = Answer {
            member_id: resp.member_id.map(|m| m.to_string()),
            epoch: resp.member_epoch,
            interval: Duration::from_millis(u64::try_from(resp.heartbeat_interval_ms).unwrap_or(0)),
            assignment,
        };
        lock(&self.rec).answered(Instant::now(), answer);
        self.publish();
        Ok(())
    }

    /// Tells the consumer of the membership: its id and epoch (commits
    /// carry them), and a rebalance when it has work.
    fn publish(&self) {
        let (id, epoch, work) = {
            let rec = lock(&self.rec);
            (rec.member_id().to_owned(), rec.epoch(), rec.has_work())
        };
        *lock(&self.shared.member) = (id, epoch);
        if work {
            self.shared.rebalance.notify(usize::MAX);
        }
    }

    /// Names the assigned topic ids (Metadata of the subscription when the
    /// cache lacks one); ids still unknown are left out until a later answer.
    async fn resolve(
        &self,
        parts: Vec<kafka_protocol::messages::consumer_group_heartbeat_response::TopicPartitions>,
    ) -> Result<BTreeSet<Tp>> {
        let missing = {
            let ids = lock(&self.ids);
            parts.iter().any(|t| !ids.by_id.contains_key(&t.topic_id))
        };
        if missing {
            let resp = self.cluster.refresh(Some(&self.topics), false).await?;
            let mut ids = lock(&self.ids);
            for t in resp.topics {
                if t.error_code != errors::NONE || t.topic_id.is_nil() {
                    continue;
                }
                if let Some(name) = t.name {
                    ids.by_id.insert(t.topic_id, name.0.to_string());
                    ids.by_name.insert(name.0.to_string(), t.topic_id);
                }
            }
        }
        let ids = lock(&self.ids);
        let mut out = BTreeSet::new();
        for t in parts {
            match ids.by_id.get(&t.topic_id) {
                Some(name) => out.extend(t.partitions.iter().map(|p| (name.clone(), *p))),
                None => {
                    tracing::debug!(group = %self.group, topic_id = %t.topic_id, "assigned a topic Metadata does not name; later");
                }
            }
        }
        Ok(out)
    }

    /// Joins: the first heartbeat, again after failures that may pass
    /// (backing off as `join_failures` says).
    ///
    /// # Errors
    /// The coordinator's refusal, [`Error::JoinFailed`] at the builder's
    /// limit of attempts.
    pub(crate) async fn join(&self, failures: &mut JoinFailures) -> Result<()> {
        loop {
            match self.beat_once(false).await {
                Ok(()) if lock(&self.rec).phase() == Phase::Member => {
                    failures.succeeded();
                    return Ok(());
                }
                // Fenced while joining (a stale id): again.
                Ok(()) => rt::sleep(super::fetch::RETRY_PAUSE).await,
                Err(e) if e.is_retriable() => {
                    let broker = self.cluster.bootstrap().join(",");
                    join_failures::after_failure(failures, &self.group, &broker, e).await?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Leaves the group (epoch -1) after any heartbeat in flight; no
    /// heartbeat follows.
    pub(crate) async fn leave(&self) {
        if let Err(e) = self.beat_once(true).await {
            tracing::debug!(group = %self.group, error = %e, "leaving the group failed");
        }
    }
}

/// Heartbeats until the consumer stops: when one is due, or at once when
/// the application acted. Failures that may pass are tried again after a
/// pause (a join by `join_failures`, whose limit ends the consumer); others
/// end the consumer.
pub(crate) async fn heartbeat_loop(member: Arc<Member>, mut failures: JoinFailures) {
    use std::sync::atomic::Ordering;
    let shared = Arc::clone(&member.shared);
    let mut pause = member.cluster.config().backoff_initial.max(MIN_INTERVAL);
    loop {
        let stopped = shared.stopped.listen();
        let woken = member.wake.listen();
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        let wait = lock(&member.rec).until_beat(Instant::now());
        match wait {
            Some(d) if d.is_zero() => {}
            Some(d) => {
                futures::select! {
                    () = rt::sleep(d).fuse() => {}
                    () = woken.fuse() => {}
                    () = stopped.fuse() => return,
                }
                continue;
            }
            None => {
                futures::select! {
                    () = woken.fuse() => {}
                    () = stopped.fuse() => return,
                }
                continue;
            }
        }
        let joining = lock(&member.rec).phase() == Phase::Joining;
        match member.beat_once(false).await {
            Ok(()) => {
                if lock(&member.rec).phase() == Phase::Member {
                    failures.succeeded();
                }
                pause = member.cluster.config().backoff_initial.max(MIN_INTERVAL);
            }
            Err(e) if e.is_retriable() && joining => {
                let broker = member.cluster.bootstrap().join(",");
                let group = member.group.clone();
                let retry = join_failures::after_failure(&mut failures, &group, &broker, e);
                let r = futures::select! {
                    r = retry.fuse() => r,
                    () = shared.stopped.listen().fuse() => return,
                };
                if let Err(e) = r {
                    member.fail(e);
                    return;
                }
            }
            Err(e) if e.is_retriable() => {
                tracing::debug!(group = %member.group, error = %e, "heartbeat failed; again");
                lock(&member.rec).retry_at(Instant::now() + pause);
                pause = (pause * 2).min(member.cluster.config().backoff_max.max(pause));
            }
            Err(e) => {
                tracing::warn!(group = %member.group, error = %e, "the group member stops");
                member.fail(e);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(t: &str, p: i32) -> Tp {
        (t.to_owned(), p)
    }

    fn set(parts: &[Tp]) -> BTreeSet<Tp> {
        parts.iter().cloned().collect()
    }

    fn answer(epoch: i32, assignment: Option<&[Tp]>) -> Answer {
        Answer {
            member_id: None,
            epoch,
            interval: Duration::from_millis(500),
            assignment: assignment.map(set),
        }
    }

    /// Joins with epoch 0, takes the first assignment, heartbeats at the
    /// interval answered, and acknowledges what it took at once.
    #[test]
    fn joins_takes_its_assignment_and_heartbeats_at_the_interval() {
        let t0 = Instant::now();
        let mut r = Reconciler::new("m".into(), t0);
        assert_eq!(r.until_beat(t0), Some(Duration::ZERO));
        let b = r.beat(t0).unwrap();
        assert_eq!((b.member_id.as_str(), b.epoch, b.owned.len()), ("m", 0, 0));
        assert!(r.work().is_none(), "nothing before an answer");
        let a = Answer {
            member_id: Some("broker-made".into()),
            ..answer(3, Some(&[tp("a", 0), tp("a", 1)]))
        };
        assert!(r.answered(t0, a));
        assert_eq!(r.member_id(), "broker-made");
        let w = r.work().unwrap();
        assert_eq!(w.assign, vec![tp("a", 0), tp("a", 1)]);
        assert!(w.revoke.is_empty() && !w.lost);
        // The positions are loaded meanwhile: a beat goes out at its time.
        assert_eq!(r.until_beat(t0), Some(Duration::from_millis(500)));
        r.assigned(&w.assign, t0);
        assert!(r.work().is_none());
        assert_eq!(
            r.until_beat(t0),
            Some(Duration::ZERO),
            "acknowledged at once"
        );
        let b = r.beat(t0).unwrap();
        assert_eq!(b.epoch, 3);
        assert_eq!(b.owned, vec![tp("a", 0), tp("a", 1)]);
        // Unchanged answers: nothing to do, the next beat an interval on.
        assert!(!r.answered(t0, answer(3, Some(&[tp("a", 0), tp("a", 1)]))));
        assert!(!r.answered(t0, answer(3, None)));
        assert_eq!(r.until_beat(t0), Some(Duration::from_millis(500)));
    }

    /// A member whose first answer assigns nothing is still told so once.
    #[test]
    fn an_empty_first_assignment_is_announced_once() {
        let t0 = Instant::now();
        let mut r = Reconciler::new("m".into(), t0);
        r.beat(t0);
        assert!(r.answered(t0, answer(1, Some(&[]))));
        let w = r.work().unwrap();
        assert!(w.assign.is_empty() && w.revoke.is_empty());
        r.assigned(&[], t0);
        assert!(r.work().is_none());
    }

    /// A shrunk assignment revokes only what it lost; the acknowledgement
    /// reports the rest; new partitions come with a later answer.
    #[test]
    fn revokes_only_what_is_no_longer_assigned_then_takes_what_is_new() {
        let t0 = Instant::now();
        let mut r = Reconciler::new("m".into(), t0);
        r.beat(t0);
        r.answered(t0, answer(1, Some(&[tp("a", 0), tp("a", 1), tp("b", 0)])));
        let w = r.work().unwrap();
        r.assigned(&w.assign, t0);
        r.beat(t0);
        // The coordinator takes a/1 away (same epoch while revoking).
        assert!(r.answered(t0, answer(1, Some(&[tp("a", 0), tp("b", 0)]))));
        let w = r.work().unwrap();
        assert_eq!(w.revoke, vec![tp("a", 1)]);
        assert!(w.assign.is_empty());
        let t1 = t0 + Duration::from_millis(100);
        r.revoked(&w.revoke, t1);
        r.assigned(&w.assign, t1);
        assert_eq!(r.until_beat(t1), Some(Duration::ZERO));
        let b = r.beat(t1).unwrap();
        assert_eq!((b.epoch, b.owned), (1, vec![tp("a", 0), tp("b", 0)]));
        // Then a new epoch gives c/0.
        assert!(r.answered(t1, answer(2, Some(&[tp("a", 0), tp("b", 0), tp("c", 0)]))));
        let w = r.work().unwrap();
        assert_eq!((w.revoke.len(), w.assign.clone()), (0, vec![tp("c", 0)]));
        r.assigned(&w.assign, t1);
        assert_eq!(r.beat(t1).unwrap().owned.len(), 3);
        assert_eq!(r.epoch(), 2);
    }

    /// Partitions an answer takes away before the application took them
    /// are not taken.
    #[test]
    fn takes_only_what_is_still_assigned() {
        let t0 = Instant::now();
        let mut r = Reconciler::new("m".into(), t0);
        r.beat(t0);
        r.answered(t0, answer(1, Some(&[tp("a", 0), tp("a", 1)])));
        let w = r.work().unwrap();
        r.answered(t0, answer(1, Some(&[tp("a", 0)])));
        r.assigned(&w.assign, t0);
        assert_eq!(r.beat(t0).unwrap().owned, vec![tp("a", 0)]);
        assert!(r.work().is_none());
    }

    /// Fenced: no heartbeat until the application dropped its partitions
    /// (lost, all of them), then a join with epoch 0 and the same id.
    #[test]
    fn a_fenced_member_drops_everything_then_joins_again() {
        let t0 = Instant::now();
        let mut r = Reconciler::new("m".into(), t0);
        r.beat(t0);
        r.answered(t0, answer(4, Some(&[tp("a", 0), tp("a", 1)])));
        let w = r.work().unwrap();
        r.assigned(&w.assign, t0);
        r.fenced(t0);
        assert_eq!(r.phase(), Phase::Fenced);
        assert_eq!(r.until_beat(t0), None);
        assert!(r.beat(t0).is_none());
        let w = r.work().unwrap();
        assert!(w.lost);
        assert_eq!(w.revoke, vec![tp("a", 0), tp("a", 1)]);
        let t1 = t0 + Duration::from_secs(1);
        r.lost(t1);
        assert_eq!(r.until_beat(t1), Some(Duration::ZERO));
        let b = r.beat(t1).unwrap();
        assert_eq!((b.member_id.as_str(), b.epoch, b.owned.len()), ("m", 0, 0));
        // The new membership's first answer is announced.
        r.answered(t1, answer(6, Some(&[tp("a", 1)])));
        assert_eq!(r.work().unwrap().assign, vec![tp("a", 1)]);
        // A member fenced with nothing joins again without waiting.
        let mut r = Reconciler::new("n".into(), t0);
        r.beat(t0);
        r.fenced(t0);
        assert_eq!(r.phase(), Phase::Joining);
        assert_eq!(r.beat(t0).unwrap().epoch, 0);
    }

    /// A failed heartbeat is tried again at the time given; the leave is
    /// epoch -1 and ends the heartbeats; a member that never joined sends
    /// no leave.
    #[test]
    fn retries_at_the_time_given_and_leaves_with_epoch_minus_one() {
        let t0 = Instant::now();
        let mut r = Reconciler::new("m".into(), t0);
        r.beat(t0);
        r.retry_at(t0 + Duration::from_millis(40));
        assert_eq!(r.until_beat(t0), Some(Duration::from_millis(40)));
        r.answered(t0, answer(2, Some(&[])));
        let b = r.leave().unwrap();
        assert_eq!((b.epoch, b.member_id.as_str()), (-1, "m"));
        assert_eq!(r.until_beat(t0), None);
        assert!(r.beat(t0).is_none());
        assert!(Reconciler::new("n".into(), t0).leave().is_none());
    }

    /// A cluster whose brokers do not advertise ConsumerGroupHeartbeat (a
    /// Kafka before 4.0): `build` says the consumer group protocol is not
    /// served, with Flume's UNSUPPORTED_API.
    #[test]
    fn a_cluster_without_the_consumer_group_protocol_is_a_clear_error() {
        use crate::group::GroupConsumer;
        use crate::types::group::GroupProtocol;
        let fake = super::super::group::tests::Fake::start();
        rt::block_on(async {
            let err = GroupConsumer::builder(&format!("kafka://{}", fake.addr), "g")
                .topic("t")
                .group_protocol(GroupProtocol::Consumer)
                .build()
                .await
                .expect_err("joined without ConsumerGroupHeartbeat");
            assert_eq!(err.kafka_code(), Some(errors::UNSUPPORTED_VERSION), "{err}");
            assert_eq!(
                err.code(),
                Some(flume_protocol::ErrorCode::UnsupportedApi),
                "{err}"
            );
            assert!(
                err.to_string()
                    .contains("does not serve the consumer group protocol"),
                "{err}"
            );
            assert!(!err.is_retriable(), "{err}");
        });
    }

    #[test]
    fn server_assignors_are_checked_and_member_ids_are_uuids() {
        assert_eq!(server_assignor("").unwrap(), None);
        assert_eq!(server_assignor("uniform").unwrap(), Some("uniform"));
        assert_eq!(server_assignor("range").unwrap(), Some("range"));
        for bad in ["cooperative-sticky", "roundrobin", "sticky", "Uniform"] {
            let e = server_assignor(bad).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{bad}: {e}");
            assert!(e.to_string().contains(bad), "{e}");
        }
        let id = new_member_id().unwrap();
        let u = Uuid::parse_str(&id).unwrap();
        assert_eq!(u.get_version_num(), 4);
        assert_ne!(id, new_member_id().unwrap());
    }
}

//! A group consumer's types and settings: what it hands out
//! ([`ConsumerRecord`], [`RebalanceEvent`]) and its builder's settings, read
//! by both transports' group members (the builder's `build` is the facade's,
//! `crate::group`).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use flume_protocol::record::Record;
use futures::Stream;

use crate::join_failures::JoinFailures;
use crate::types::connection::ConnectionConfig;
use crate::types::consumer::{FetchConfig, StartOffset};

/// A (topic, partition).
pub type TopicPartition = (String, i32);

/// A record with the partition it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The record.
    pub record: Record,
}

impl std::ops::Deref for ConsumerRecord {
    type Target = Record;
    fn deref(&self) -> &Record {
        &self.record
    }
}

/// A change of assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RebalanceEvent {
    /// These partitions were taken away (before rejoining; commits already done).
    Revoked(Vec<TopicPartition>),
    /// These partitions are now this member's, in `generation`.
    Assigned {
        /// The generation.
        generation: i32,
        /// The partitions.
        partitions: Vec<TopicPartition>,
    },
}

/// The [`RebalanceEvent`]s of a [`GroupConsumer`], from
/// [`GroupConsumer::events`]: a [`Stream`] that ends when the consumer is
/// dropped or closed, or polled without waiting with
/// [`RebalanceEvents::try_recv`].
#[derive(Debug)]
pub struct RebalanceEvents(pub(crate) Pin<Box<async_channel::Receiver<RebalanceEvent>>>);

impl Clone for RebalanceEvents {
    fn clone(&self) -> Self {
        RebalanceEvents(Box::pin((*self.0).clone()))
    }
}

impl RebalanceEvents {
    /// The next event if one is waiting, without waiting.
    pub fn try_recv(&self) -> Option<RebalanceEvent> {
        self.0.try_recv().ok()
    }
}

impl Stream for RebalanceEvents {
    type Item = RebalanceEvent;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<RebalanceEvent>> {
        self.0.as_mut().poll_next(cx)
    }
}

/// How long a group member's fetch waits on the broker by default: 5 s
/// (Kafka's consumers: 500 ms, also [`FetchConfig`]'s default), capped at
/// the heartbeat interval while fetches are heartbeats (GROUP_FETCH: 3.3 s
/// with the default 10 s session). A waiting fetch returns as soon as a
/// record arrives and a rebalance breaks it off, so a longer wait costs no
/// latency; it only makes an idle member ask again every few seconds
/// instead of twice a second, which is most of what many idle members cost
/// the broker (`flume-cli perf groups`, README "Scale").
pub const DEFAULT_FETCH_WAIT: Duration = Duration::from_secs(5);

/// Builder for [`GroupConsumer`].
#[derive(Debug, Clone)]
pub struct GroupConsumerBuilder {
    pub(crate) addr: String,
    pub(crate) group: String,
    pub(crate) topics: Vec<String>,
    pub(crate) session_timeout: Duration,
    pub(crate) rebalance_timeout: Duration,
    pub(crate) heartbeat_interval: Option<Duration>,
    pub(crate) heartbeat_wait: bool,
    pub(crate) join_attempts: Option<u32>,
    pub(crate) auto_commit: Option<Duration>,
    pub(crate) commit_on_revoke: bool,
    pub(crate) start: StartOffset,
    pub(crate) assignor: String,
    pub(crate) group_protocol: GroupProtocol,
    pub(crate) fetch: FetchConfig,
    pub(crate) connection: ConnectionConfig,
}

/// Which of Kafka's group protocols a [`GroupConsumer`] on a `kafka://`
/// address speaks ([`GroupConsumerBuilder::group_protocol`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GroupProtocol {
    /// The classic protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup),
    /// with the assignment computed by the member elected leader: what
    /// every Kafka broker serves (Kafka's `group.protocol=classic`).
    #[default]
    Classic,
    /// The consumer group protocol of KIP-848 (Kafka's
    /// `group.protocol=consumer`, Kafka 4.0+ and Flume's Kafka listener):
    /// ConsumerGroupHeartbeat, the assignment computed by the coordinator,
    /// partitions moved between members one at a time without stopping
    /// the others.
    Consumer,
}

impl GroupConsumerBuilder {
    /// The defaults ([`GroupConsumer::builder`](crate::GroupConsumer::builder)).
    pub(crate) fn new(addr: &str, group: &str) -> Self {
        GroupConsumerBuilder {
            addr: addr.to_owned(),
            group: group.to_owned(),
            topics: Vec::new(),
            session_timeout: Duration::from_secs(10),
            rebalance_timeout: Duration::from_secs(30),
            heartbeat_interval: None,
            join_attempts: None,
            heartbeat_wait: true,
            auto_commit: Some(Duration::from_secs(1)),
            commit_on_revoke: false,
            start: StartOffset::Earliest,
            assignor: String::new(),
            group_protocol: GroupProtocol::Classic,
            fetch: FetchConfig::default().max_wait(DEFAULT_FETCH_WAIT),
            connection: ConnectionConfig::default(),
        }
    }

    /// Subscribes to a topic (call again for more).
    pub fn topic(mut self, t: &str) -> Self {
        self.topics.push(t.to_owned());
        self
    }
    /// Session timeout (default 10 s).
    pub fn session_timeout(mut self, d: Duration) -> Self {
        self.session_timeout = d;
        self
    }
    /// Rebalance timeout (default 30 s).
    pub fn rebalance_timeout(mut self, d: Duration) -> Self {
        self.rebalance_timeout = d;
        self
    }
    /// Whether the member's requests wait at the broker for a rebalance (the
    /// default: the member learns of one at once) or are plain FETCHes and
    /// HEARTBEATs every interval (it learns of one at the next heartbeat).
    /// On, its fetches are GROUP_FETCHes, which count as heartbeats and wait
    /// at most an interval, and a HEARTBEAT_WAIT waits at the broker only
    /// while no fetch does (the application is processing); a broker without
    /// GROUP_FETCH gets plain fetches and HEARTBEAT_WAITs, one without either
    /// plain fetches and HEARTBEATs.
    pub fn heartbeat_wait(mut self, on: bool) -> Self {
        self.heartbeat_wait = on;
        self
    }

    /// Heartbeat interval (default a third of the session timeout).
    pub fn heartbeat_interval(mut self, d: Duration) -> Self {
        self.heartbeat_interval = Some(d);
        self
    }
    /// Gives up joining after `n` failed attempts in a row (at least 1):
    /// [`build`](Self::build) or [`GroupConsumer::recv`] then fails with
    /// [`Error::JoinFailed`], which names the coordinator and the last
    /// attempt's error. An attempt fails when the coordinator cannot be
    /// reached or found, closes the connection or does not answer in time;
    /// the steps of a rebalance (a member id handed out,
    /// REBALANCE_IN_PROGRESS) are no failures. Without a limit (the
    /// default, as in Kafka's own consumers) the member keeps trying. Either
    /// way the pause between attempts doubles from 100 ms up to the
    /// connection's `backoff_max`, and a warning (`tracing`) names the
    /// coordinator and the error at the 3rd failure in a row, the 6th, the
    /// 12th, ...
    pub fn join_attempts(mut self, n: u32) -> Self {
        self.join_attempts = Some(n.max(1));
        self
    }
    /// Auto-commit on (default, every 1 s) or off.
    pub fn auto_commit(mut self, on: bool) -> Self {
        self.auto_commit = on.then_some(Duration::from_secs(1));
        self
    }
    /// With manual commits, still commit every record handed out when partitions
    /// are revoked (a record counts as processed once the next one is asked for).
    /// Auto-commit always does this.
    pub fn commit_on_revoke(mut self, on: bool) -> Self {
        self.commit_on_revoke = on;
        self
    }
    /// Auto-commit interval.
    pub fn auto_commit_interval(mut self, d: Duration) -> Self {
        self.auto_commit = Some(d);
        self
    }
    /// Where to start when the group has no committed offset: earliest (default) or latest.
    pub fn start(mut self, s: StartOffset) -> Self {
        self.start = s;
        self
    }
    /// `"sticky"` (the broker's default: members keep their partitions across
    /// rebalances where they can), `"range"` or `"roundrobin"`.
    ///
    /// Over Kafka's classic protocol (`kafka://`, the default) the member
    /// offers `"range"` (the default), `"roundrobin"` or
    /// `"cooperative-sticky"` and computes the assignment when elected
    /// leader. With [`GroupProtocol::Consumer`] it names the coordinator's
    /// server assignor: `"uniform"` or `"range"`, or none (empty, the
    /// default: the coordinator's default, uniform); any other name is an
    /// [`Error::InvalidArgument`] from [`build`](Self::build).
    pub fn assignor(mut self, a: &str) -> Self {
        a.clone_into(&mut self.assignor);
        self
    }
    /// Longest a fetch waits on the broker for a record (default
    /// [`DEFAULT_FETCH_WAIT`]; at most the heartbeat interval while fetches
    /// are heartbeats). A fetch returns as soon as a record arrives and a
    /// rebalance breaks it off, so a long wait costs no latency; it sets how
    /// often an idle member asks again.
    pub fn max_wait(mut self, d: Duration) -> Self {
        self.fetch.max_wait = d;
        self
    }
    /// Fetch settings: wait, bytes per partition and per fetch (see
    /// [`FetchConfig`]). Each fetch lists the assigned partitions starting one
    /// further on than the last, so a small `max_bytes` serves every partition
    /// in turn.
    pub fn fetch_config(mut self, f: FetchConfig) -> Self {
        self.fetch = f;
        self
    }
    /// The group protocol on a `kafka://` address: [`GroupProtocol::Classic`]
    /// (the default) or [`GroupProtocol::Consumer`] (KIP-848).
    ///
    /// With `Consumer` the member heartbeats with ConsumerGroupHeartbeat at
    /// the interval the coordinator answers, the coordinator computes the
    /// assignment (see [`assignor`](Self::assignor)), and partitions move
    /// incrementally: a partition taken away is revoked alone (committed
    /// first with auto-commit or [`commit_on_revoke`](Self::commit_on_revoke),
    /// [`RebalanceEvent::Revoked`] with just it), acknowledged to the
    /// coordinator, and only then handed to its new member; the member
    /// keeps reading the rest meanwhile. [`RebalanceEvent::Assigned`] carries
    /// the whole assignment and the member epoch, which
    /// [`GroupConsumer::generation`] returns and commits carry. A fenced
    /// member (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID) drops its partitions
    /// without committing ([`RebalanceEvent::Revoked`]) and joins again. The
    /// session timeout is the coordinator's (`group.consumer.session.timeout.ms`):
    /// [`session_timeout`](Self::session_timeout) and
    /// [`heartbeat_interval`](Self::heartbeat_interval) are not used; the
    /// rebalance timeout is sent. A cluster that does not serve
    /// ConsumerGroupHeartbeat is an error from [`build`](Self::build) that
    /// says so ([`ErrorCode::UnsupportedApi`](crate::ErrorCode::UnsupportedApi)).
    ///
    /// On a Flume address (`flume://`, `host:port`) the setting is accepted
    /// and ignored: Flume's own groups are assigned by the broker already
    /// and move their partitions as their protocol does.
    pub fn group_protocol(mut self, p: GroupProtocol) -> Self {
        self.group_protocol = p;
        self
    }
    /// Connection settings (timeouts, TLS) of the consumer's connection
    /// (fetches, commits and heartbeats share it).
    pub fn connection(mut self, c: ConnectionConfig) -> Self {
        self.connection = c;
        self
    }

    // The settings, for the Kafka client (`crate::kafka::group`).
    pub(crate) fn group_name(&self) -> &str {
        &self.group
    }
    pub(crate) fn topic_names(&self) -> &[String] {
        &self.topics
    }
    pub(crate) fn session(&self) -> Duration {
        self.session_timeout
    }
    pub(crate) fn rebalance(&self) -> Duration {
        self.rebalance_timeout
    }
    pub(crate) fn interval(&self) -> Duration {
        self.heartbeat_interval
            .unwrap_or(self.session_timeout / 3)
            .max(Duration::from_millis(10))
    }
    pub(crate) fn auto_commit_every(&self) -> Option<Duration> {
        self.auto_commit
    }
    pub(crate) fn auto_commit_on(&self) -> bool {
        self.auto_commit.is_some()
    }
    pub(crate) fn commit_on_revoke_on(&self) -> bool {
        self.commit_on_revoke
    }
    pub(crate) fn start_offset(&self) -> StartOffset {
        self.start
    }
    pub(crate) fn assignor_setting(&self) -> &str {
        &self.assignor
    }
    pub(crate) fn protocol_setting(&self) -> GroupProtocol {
        self.group_protocol
    }
    pub(crate) fn fetch_settings(&self) -> &FetchConfig {
        &self.fetch
    }
    pub(crate) fn connection_config(&self) -> &ConnectionConfig {
        &self.connection
    }
    /// Failed joins in a row, with this member's limit and pauses.
    pub(crate) fn join_failures(&self) -> JoinFailures {
        JoinFailures::new(
            self.join_attempts,
            JOIN_RETRY_PAUSE,
            self.connection.backoff_max,
        )
    }
}

/// The first pause after a failed join (doubled after each further failure
/// in a row, up to the connection's `backoff_max`).
const JOIN_RETRY_PAUSE: Duration = Duration::from_millis(100);

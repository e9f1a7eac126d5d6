//! The cluster as the client sees it: the brokers, each partition's leader,
//! one connection per broker, and each group's coordinator.
//!
//! - Bootstrap: the addresses of the `kafka://` list are tried in turn until
//!   one answers Metadata; from then on the brokers Metadata names are used
//!   (the bootstrap list only again when none of them answers).
//! - Connections: one per broker (node id), opened on first use and again
//!   after it breaks, with exponential backoff between failed attempts to the
//!   same broker (`ConnectionConfig::backoff_initial` doubling to
//!   `backoff_max`). Each broker has its own lock, so a broker that is down
//!   delays only the requests meant for it.
//! - Metadata: cached per topic (partitions, leaders, leader epochs) and
//!   refreshed on demand: when a topic is unknown, and when a request is
//!   refused with NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH and the like
//!   (callers call [`Cluster::refresh`] and retry). Refreshes are single
//!   flight: callers that ask while one runs share its result, and a forced
//!   refresh waits at least `backoff_initial` after the previous one, so a
//!   storm of refusals costs one Metadata request per interval.
//! - Coordinators: FindCoordinator per group, cached until a request to it
//!   says NOT_COORDINATOR or the connection breaks. A group's requests go
//!   on a connection of their own to the coordinator, apart from that
//!   broker's fetches, as Kafka's Java client and librdkafka do: a broker
//!   answers a connection's requests in order, so a heartbeat, a commit or
//!   the leave would otherwise wait behind a Fetch waiting at that broker
//!   for records (up to its `max_wait`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::lock::Mutex as AsyncMutex;
use kafka_protocol::messages::{
    metadata_request::MetadataRequestTopic, ApiKey, FindCoordinatorRequest, MetadataRequest,
    MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::conn::KConn;
use super::errors;
use crate::error::{Error, Result};
use crate::types::connection::ConnectionConfig;
use flume_rt as rt;
use flume_rt::sync::lock;

/// One partition as Metadata last described it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PartitionMeta {
    /// Its index.
    pub id: i32,
    /// The leader's node id (-1: none now).
    pub leader: i32,
    /// The leader epoch (-1 when the broker does not say).
    pub epoch: i32,
    /// The partition's own error code in Metadata (LEADER_NOT_AVAILABLE ...).
    pub error: i16,
}

/// One topic as Metadata last described it.
#[derive(Debug, Clone, Default)]
pub(crate) struct TopicMeta {
    /// The topic's error code (UNKNOWN_TOPIC_OR_PARTITION ...).
    pub error: i16,
    /// Partitions by index (sorted, one per index).
    pub partitions: Vec<PartitionMeta>,
}

#[derive(Debug, Default)]
struct Meta {
    /// Node id -> "host:port".
    brokers: HashMap<i32, String>,
    controller: i32,
    topics: HashMap<String, TopicMeta>,
    /// When the last refresh finished.
    refreshed: Option<Instant>,
}

/// A broker's connection, behind its own lock.
#[derive(Default)]
struct NodeSlot {
    conn: Option<KConn>,
    failures: u32,
    last_failure: Option<Instant>,
}

/// The cluster: metadata cache and connections. Shared by every part of
/// one SDK object (a producer, a consumer, an admin).
pub(crate) struct Cluster {
    bootstrap: Vec<String>,
    config: ConnectionConfig,
    meta: Mutex<Meta>,
    nodes: Mutex<HashMap<i32, Arc<AsyncMutex<NodeSlot>>>>,
    /// The coordinators' connections, by node id, apart from `nodes`.
    coordinator_nodes: Mutex<HashMap<i32, Arc<AsyncMutex<NodeSlot>>>>,
    /// Held while a Metadata request runs (single flight).
    refreshing: AsyncMutex<()>,
    /// Counts finished refreshes, so a waiter knows one ran while it waited.
    refreshes: std::sync::atomic::AtomicU64,
    coordinators: Mutex<HashMap<String, i32>>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("bootstrap", &self.bootstrap)
            .finish_non_exhaustive()
    }
}

/// "host:port", with brackets around an IPv6 host.
fn host_port(host: &str, port: i32) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Bootstrap connections are kept under negative node ids (-1 for the
/// first address, ...), apart from the brokers' own.
fn bootstrap_node(i: usize) -> i32 {
    -1 - i32::try_from(i).unwrap_or(i32::MAX - 1)
}

impl Cluster {
    /// Connects to the cluster: Metadata (brokers only) from the first
    /// bootstrap address that answers.
    ///
    /// # Errors
    /// The last bootstrap address's error when none answers.
    pub(crate) async fn connect(
        bootstrap: Vec<String>,
        config: ConnectionConfig,
    ) -> Result<Arc<Cluster>> {
        if bootstrap.is_empty() {
            return Err(Error::InvalidArgument("no bootstrap broker".into()));
        }
        let cluster = Arc::new(Cluster {
            bootstrap,
            config,
            meta: Mutex::new(Meta {
                controller: -1,
                ..Meta::default()
            }),
            nodes: Mutex::new(HashMap::new()),
            coordinator_nodes: Mutex::new(HashMap::new()),
            refreshing: AsyncMutex::new(()),
            refreshes: std::sync::atomic::AtomicU64::new(0),
            coordinators: Mutex::new(HashMap::new()),
        });
        cluster.refresh(Some(&[]), false).await?;
        Ok(cluster)
    }

    /// The connection settings.
    pub(crate) fn config(&self) -> &ConnectionConfig {
        &self.config
    }

    /// The bootstrap addresses, for messages.
    pub(crate) fn bootstrap(&self) -> &[String] {
        &self.bootstrap
    }

    fn slot(
        slots: &Mutex<HashMap<i32, Arc<AsyncMutex<NodeSlot>>>>,
        node: i32,
    ) -> Arc<AsyncMutex<NodeSlot>> {
        Arc::clone(lock(slots).entry(node).or_default())
    }

    fn addr_of(&self, node: i32) -> Option<String> {
        if node < 0 {
            let i = usize::try_from(-1 - i64::from(node)).ok()?;
            return self.bootstrap.get(i).cloned();
        }
        lock(&self.meta).brokers.get(&node).cloned()
    }

    /// The connection to broker `node` (a negative id: a bootstrap
    /// address), opened if needed.
    ///
    /// # Errors
    /// An unknown node, or the connection's error.
    pub(crate) async fn broker(&self, node: i32) -> Result<KConn> {
        self.open(&self.nodes, node).await
    }

    /// The connection in `slots` to broker `node`, opened if needed (with
    /// backoff after failures).
    async fn open(
        &self,
        slots: &Mutex<HashMap<i32, Arc<AsyncMutex<NodeSlot>>>>,
        node: i32,
    ) -> Result<KConn> {
        let addr = self.addr_of(node).ok_or_else(|| {
            errors::error(
                errors::LEADER_NOT_AVAILABLE,
                format!("broker {node} is not in the cluster's metadata"),
            )
        })?;
        let slot = Self::slot(slots, node);
        let mut s = slot.lock().await;
        if let Some(c) = &s.conn
            && !c.is_broken()
            && c.addr() == addr
        {
            return Ok(c.clone());
        }
        s.conn = None;
        if s.failures > 0
            && let Some(at) = s.last_failure
        {
            let exp = s.failures.min(10) - 1;
            let delay = self
                .config
                .backoff_initial
                .saturating_mul(1 << exp)
                .min(self.config.backoff_max);
            let wait = delay.saturating_sub(at.elapsed());
            if !wait.is_zero() {
                rt::sleep(wait).await;
            }
        }
        match KConn::connect(&addr, &self.config).await {
            Ok(c) => {
                s.failures = 0;
                s.conn = Some(c.clone());
                Ok(c)
            }
            Err(e) => {
                s.failures = s.failures.saturating_add(1);
                s.last_failure = Some(Instant::now());
                Err(e)
            }
        }
    }

    /// Candidates for a request any broker can answer: brokers with a live
    /// connection first, then the other known brokers, then the bootstrap
    /// addresses.
    fn candidates(&self) -> Vec<i32> {
        let mut known: Vec<i32> = lock(&self.meta).brokers.keys().copied().collect();
        known.sort_unstable();
        let live: Vec<i32> = {
            let nodes = lock(&self.nodes);
            known
                .iter()
                .copied()
                .filter(|n| {
                    nodes.get(n).is_some_and(|s| {
                        s.try_lock()
                            .is_some_and(|s| s.conn.as_ref().is_some_and(|c| !c.is_broken()))
                    })
                })
                .collect()
        };
        let mut out = live.clone();
        out.extend(known.into_iter().filter(|n| !live.contains(n)));
        out.extend((0..self.bootstrap.len()).map(bootstrap_node));
        out
    }

    /// A connection to any broker that answers (see [`Cluster::candidates`]).
    ///
    /// # Errors
    /// The last error when none answers.
    pub(crate) async fn any(&self) -> Result<KConn> {
        let mut last = None;
        for node in self.candidates() {
            match self.broker(node).await {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::InvalidArgument("no broker".into())))
    }

    /// The controller's connection (CreateTopics, DeleteTopics and
    /// CreatePartitions go there), or any broker's when Metadata named none.
    ///
    /// # Errors
    /// As [`Cluster::broker`].
    pub(crate) async fn controller(&self) -> Result<KConn> {
        let c = lock(&self.meta).controller;
        if c >= 0
            && let Ok(conn) = self.broker(c).await
        {
            return Ok(conn);
        }
        self.any().await
    }

    /// Asks a broker for metadata: `topics` `None` for every topic, `Some(&[])`
    /// for the brokers only; `create` lets the broker create unknown topics
    /// (when it auto-creates). Updates the cache and returns the answer.
    /// Tries the next broker when one fails.
    ///
    /// # Errors
    /// The last broker's error when none answers.
    pub(crate) async fn refresh(
        &self,
        topics: Option<&[String]>,
        create: bool,
    ) -> Result<MetadataResponse> {
        let _single = self.refreshing.lock().await;
        let mut last = None;
        for node in self.candidates() {
            let conn = match self.broker(node).await {
                Ok(c) => c,
                Err(e) => {
                    last = Some(e);
                    continue;
                }
            };
            match self.metadata_from(&conn, topics, create).await {
                Ok(resp) => {
                    self.absorb(&resp, topics.is_none());
                    self.refreshes
                        .fetch_add(1, std::sync::atomic::Ordering::Release);
                    return Ok(resp);
                }
                Err(e) if e.is_retriable() => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::InvalidArgument("no broker".into())))
    }

    async fn metadata_from(
        &self,
        conn: &KConn,
        topics: Option<&[String]>,
        create: bool,
    ) -> Result<MetadataResponse> {
        let v = conn.version(ApiKey::Metadata)?;
        let mut req = MetadataRequest::default().with_topics(topics.map(|ts| {
            ts.iter()
                .map(|t| {
                    MetadataRequestTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_string(t.clone()))))
                })
                .collect()
        }));
        if v >= 4 {
            req.allow_auto_topic_creation = create;
        }
        conn.call_at(&req, v, Duration::ZERO).await
    }

    /// Takes a Metadata answer into the cache; `all` replaces the topic list.
    fn absorb(&self, resp: &MetadataResponse, all: bool) {
        let mut m = lock(&self.meta);
        if !resp.brokers.is_empty() {
            m.brokers = resp
                .brokers
                .iter()
                .map(|b| (b.node_id.0, host_port(&b.host, b.port)))
                .collect();
        }
        m.controller = resp.controller_id.0;
        if all {
            m.topics.clear();
        }
        for t in &resp.topics {
            let Some(name) = &t.name else { continue };
            let mut partitions: Vec<PartitionMeta> = t
                .partitions
                .iter()
                .map(|p| PartitionMeta {
                    id: p.partition_index,
                    leader: p.leader_id.0,
                    epoch: p.leader_epoch,
                    error: p.error_code,
                })
                .collect();
            partitions.sort_by_key(|p| p.id);
            partitions.dedup_by_key(|p| p.id);
            m.topics.insert(
                name.0.to_string(),
                TopicMeta {
                    error: t.error_code,
                    partitions,
                },
            );
        }
        m.refreshed = Some(Instant::now());
    }

    /// Refreshes `topics` after a refusal that says the cache is stale,
    /// at most once per `backoff_initial`: callers that ask while one runs
    /// or right after share it.
    ///
    /// # Errors
    /// As [`Cluster::refresh`].
    pub(crate) async fn refresh_stale(&self, topics: &[String]) -> Result<()> {
        let seen = self.refreshes.load(std::sync::atomic::Ordering::Acquire);
        let recent = lock(&self.meta)
            .refreshed
            .map(|t| t.elapsed())
            .unwrap_or(Duration::MAX);
        let gap = self.config.backoff_initial.max(Duration::from_millis(10));
        if recent < gap {
            rt::sleep(gap - recent).await;
        }
        // Someone else refreshed while we waited: theirs is new enough.
        if self.refreshes.load(std::sync::atomic::Ordering::Acquire) != seen
            && lock(&self.meta)
                .refreshed
                .is_some_and(|t| t.elapsed() < gap)
        {
            return Ok(());
        }
        self.refresh(Some(topics), false).await.map(|_| ())
    }

    /// The cached description of `topic`, if Metadata described it.
    pub(crate) fn topic(&self, topic: &str) -> Option<TopicMeta> {
        lock(&self.meta).topics.get(topic).cloned()
    }

    /// How many partitions `topic` has: [`Cluster::topic_meta`]'s count,
    /// without copying the cached partition list (a producer asks for every
    /// record).
    ///
    /// # Errors
    /// As [`Cluster::topic_meta`].
    pub(crate) async fn partition_count(&self, topic: &str, create: bool) -> Result<usize> {
        let cached = lock(&self.meta)
            .topics
            .get(topic)
            .filter(|t| t.error == errors::NONE && !t.partitions.is_empty())
            .map(|t| t.partitions.len());
        match cached {
            Some(n) => Ok(n),
            None => Ok(self.topic_meta(topic, create).await?.partitions.len()),
        }
    }

    /// The topic's partitions, from the cache or a Metadata request
    /// (`create`: let the broker create it when it auto-creates).
    ///
    /// # Errors
    /// UNKNOWN_TOPIC_OR_PARTITION (Kafka's code; [`Error::code`] says
    /// UNKNOWN_TOPIC) and the like, connection failures.
    pub(crate) async fn topic_meta(&self, topic: &str, create: bool) -> Result<TopicMeta> {
        if let Some(t) = self.topic(topic)
            && t.error == errors::NONE
            && !t.partitions.is_empty()
        {
            return Ok(t);
        }
        let resp = self.refresh(Some(&[topic.to_owned()]), create).await?;
        let t = resp
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
            .ok_or_else(|| errors::error(errors::UNKNOWN_TOPIC_OR_PARTITION, topic))?;
        errors::check(t.error_code, || topic.to_owned())?;
        self.topic(topic)
            .filter(|t| !t.partitions.is_empty())
            .ok_or_else(|| errors::error(errors::LEADER_NOT_AVAILABLE, topic))
    }

    /// The leader's node id of `topic`/`partition` from the cache (a
    /// Metadata request when the topic is not cached).
    ///
    /// # Errors
    /// UNKNOWN_TOPIC_OR_PARTITION for a partition past the topic's count,
    /// LEADER_NOT_AVAILABLE while it has none.
    pub(crate) async fn leader(&self, topic: &str, partition: i32) -> Result<PartitionMeta> {
        // From the cache without copying the topic's partition list (a producer asks
        // for every batch).
        let cached = {
            let m = lock(&self.meta);
            m.topics
                .get(topic)
                .filter(|t| t.error == errors::NONE)
                .and_then(|t| t.partitions.iter().find(|p| p.id == partition).copied())
        };
        let p = match cached {
            Some(p) => Some(p),
            None => self
                .topic_meta(topic, false)
                .await?
                .partitions
                .iter()
                .find(|p| p.id == partition)
                .copied(),
        };
        let p = p.ok_or_else(|| {
            errors::error(
                errors::UNKNOWN_TOPIC_OR_PARTITION,
                format!("{topic}/{partition}"),
            )
        })?;
        if p.leader < 0 {
            return Err(errors::error(
                errors::LEADER_NOT_AVAILABLE,
                format!("{topic}/{partition}"),
            ));
        }
        Ok(p)
    }

    /// The connection to the coordinator of `group` (its own, apart from
    /// that broker's fetches), found with FindCoordinator and cached.
    /// Retries while the coordinator is loading or not yet available, up
    /// to the request timeout.
    ///
    /// # Errors
    /// GROUP_AUTHORIZATION_FAILED and the like; connection failures.
    pub(crate) async fn coordinator(&self, group: &str) -> Result<KConn> {
        let cached = lock(&self.coordinators).get(group).copied();
        if let Some(node) = cached {
            match self.open(&self.coordinator_nodes, node).await {
                Ok(c) => return Ok(c),
                Err(_) => self.forget_coordinator(group),
            }
        }
        let deadline = Instant::now() + self.config.request_timeout;
        let mut delay = self.config.backoff_initial.max(Duration::from_millis(10));
        loop {
            let conn = self.any().await?;
            let v = conn.version(ApiKey::FindCoordinator)?;
            let req =
                FindCoordinatorRequest::default().with_key(StrBytes::from_string(group.to_owned()));
            let resp = conn.call_at(&req, v, Duration::ZERO).await?;
            if resp.error_code == errors::NONE {
                let node = resp.node_id.0;
                lock(&self.meta)
                    .brokers
                    .entry(node)
                    .or_insert_with(|| host_port(&resp.host, resp.port));
                lock(&self.coordinators).insert(group.to_owned(), node);
                return self.open(&self.coordinator_nodes, node).await;
            }
            let err = errors::error_with(
                resp.error_code,
                format!("coordinator of group {group}"),
                resp.error_message.as_deref(),
            );
            if !errors::is_retriable(resp.error_code) || Instant::now() + delay > deadline {
                return Err(err);
            }
            rt::sleep(delay).await;
            delay = (delay * 2).min(self.config.backoff_max);
        }
    }

    /// Forgets `group`'s coordinator (NOT_COORDINATOR, a broken connection):
    /// the next [`Cluster::coordinator`] asks again.
    pub(crate) fn forget_coordinator(&self, group: &str) {
        lock(&self.coordinators).remove(group);
    }

    /// Closes every connection.
    pub(crate) async fn close(&self) {
        let mut slots: Vec<_> = lock(&self.nodes).values().cloned().collect();
        slots.extend(lock(&self.coordinator_nodes).values().cloned());
        for s in slots {
            if let Some(c) = s.lock().await.conn.take() {
                c.close();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_bootstrap_ids() {
        assert_eq!(host_port("b1", 9092), "b1:9092");
        assert_eq!(host_port("::1", 9092), "[::1]:9092");
        assert_eq!(bootstrap_node(0), -1);
        assert_eq!(bootstrap_node(2), -3);
    }
}

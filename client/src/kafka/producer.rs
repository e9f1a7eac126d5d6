//! `Producer` over Kafka: records are routed in the client (the
//! [`Partitioner`] for keyed records, one partition per batch for keyless
//! ones), batched per partition into Kafka record batches (compressed with
//! the configured codec), and sent by one task to each partition's leader,
//! several requests in flight per broker.
//!
//! Idempotence (on by default): the producer takes a producer id
//! (InitProducerId) and stamps every batch with it and the partition's next
//! sequence number the first time the batch is sent. A batch refused for a
//! stale leader (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, ...), a lost
//! connection or a timeout goes back to its partition's queue, in sequence
//! order, the metadata is refreshed, and once every batch of that partition
//! in flight has come back the queue is sent again from the first
//! unacknowledged batch, with the same sequence numbers: the new leader
//! appends what it does not have and answers what it has with its offsets,
//! so a leader change neither loses nor duplicates a record, and records of
//! one key stay in order. Up to 5 batches per partition are in flight (as
//! Kafka allows an idempotent producer); without idempotence, one.
//!
//! When the broker no longer knows the producer (UNKNOWN_PRODUCER_ID, an
//! out-of-order sequence at the head of a partition, a fenced epoch) or a
//! stamped batch fails for good, the producer waits for every request in
//! flight, takes a new producer id and stamps what is left from sequence 0.
//!
//! Memory is bounded as over Flume's protocol: `buffer_max_bytes` of records
//! (each counted at its Flume-format size) wait in the client; a send waits
//! for room or fails with `BufferFull`. A batch still unacknowledged after
//! `delivery_timeout` fails with [`Error::Timeout`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use event_listener::Event;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use kafka_protocol::messages::{
    produce_request, ApiKey, InitProducerIdRequest, ProduceRequest, ProduceResponse,
};

use super::cluster::Cluster;
use super::errors;
use super::offsets::topic_name;
use crate::error::{Error, Result};
use crate::types::delivery::{Acks, Delivery, Outcome};
use crate::types::producer::{ProducerConfig, ProducerRecord, RecordMetadata, RequiredAcks};
use flume_protocol::kafka_batch::{self, BatchBuilder, BatchHeader, BatchMeta};
use flume_protocol::record;
use flume_rt as rt;
use flume_rt::sync::lock;

type Tp = (String, i32);

/// Batches in flight per partition with idempotence (Kafka's limit).
const MAX_IN_FLIGHT_IDEMPOTENT: usize = 5;

/// A batch being filled.
struct Open {
    builder: BatchBuilder,
    acks: Acks,
    /// Bytes counted against the buffer.
    size: usize,
    created: Instant,
}

/// A batch closed to new records, waiting to be sent (again).
struct Sealed {
    /// The encoded batch; `None` until first sent (encoded and stamped then).
    bytes: Option<Bytes>,
    builder: Option<BatchBuilder>,
    count: i32,
    acks: Acks,
    size: usize,
    /// The first record's sequence once stamped (-1 before).
    base_seq: i32,
    deadline: Instant,
}

#[derive(Default)]
struct PartQ {
    open: Option<Open>,
    /// Sealed batches in the order they go out (retries first, by sequence).
    ready: VecDeque<Sealed>,
    inflight: usize,
    /// Sent batches came back for a retry: nothing new goes out until every
    /// batch in flight has returned.
    draining: bool,
    next_seq: i32,
    /// Sequences of the batches in flight, to put retries back in order.
    inflight_seqs: Vec<i32>,
    /// A retry waits until then (the connection's first backoff).
    retry_at: Option<Instant>,
}

struct State {
    parts: BTreeMap<Tp, PartQ>,
    buffered: usize,
    closed: bool,
    /// Keyless records of a topic go to this partition (of that many)
    /// until its batch is sealed.
    sticky: HashMap<String, (i32, i32)>,
    producer_id: i64,
    epoch: i16,
    /// A new producer id is needed before anything more is sent.
    reset_pid: bool,
    /// Requests in flight, all brokers.
    requests: usize,
}

struct Shared {
    cluster: Arc<Cluster>,
    config: ProducerConfig,
    state: Mutex<State>,
    added: Event,
    freed: Event,
}

/// The producer over Kafka.
pub(crate) struct KafkaProducer {
    sh: Arc<Shared>,
    sender: rt::sync::TaskSlot<()>,
}

impl std::fmt::Debug for KafkaProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaProducer")
            .field("bootstrap", &self.sh.cluster.bootstrap())
            .finish_non_exhaustive()
    }
}

impl KafkaProducer {
    pub(crate) async fn connect(brokers: Vec<String>, config: ProducerConfig) -> Result<Self> {
        if config.idempotence && config.acks != RequiredAcks::All {
            return Err(Error::InvalidArgument(
                "an idempotent producer needs acks=all (turn idempotence off for other acks)"
                    .into(),
            ));
        }
        let cluster = Cluster::connect(brokers, config.connection.clone()).await?;
        let sh = Arc::new(Shared {
            cluster,
            config,
            state: Mutex::new(State {
                parts: BTreeMap::new(),
                buffered: 0,
                closed: false,
                sticky: HashMap::new(),
                producer_id: -1,
                epoch: -1,
                reset_pid: false,
                requests: 0,
            }),
            added: Event::new(),
            freed: Event::new(),
        });
        if sh.config.idempotence {
            init_producer_id(&sh).await?;
        }
        let sender = rt::spawn(sender_loop(Arc::clone(&sh)));
        Ok(KafkaProducer {
            sh,
            sender: rt::sync::TaskSlot::new(sender),
        })
    }

    /// Whether a send waits for buffer room (no `fail_when_full`).
    pub(crate) fn waits_for_room(&self) -> bool {
        !self.sh.config.fail_when_full
    }

    /// Routes and buffers one record (waiting for room when `wait`).
    pub(crate) async fn enqueue(&self, rec: ProducerRecord, wait: bool) -> Result<Delivery> {
        let sh = &self.sh;
        let (topic, key, value, headers, partition, timestamp) = rec.into_parts();
        if topic.is_empty() {
            return Err(Error::InvalidArgument("topic must not be empty".into()));
        }
        let len = record::encoded_len_nullable(key.as_deref(), value.as_deref(), &headers);
        let limit = sh
            .config
            .max_record_bytes
            .min(sh.config.buffer_max_bytes)
            .min(sh.config.connection.max_frame_bytes.saturating_sub(1024));
        if len > limit {
            return Err(errors::error(
                10,
                format!("a record of {len} bytes: the limit is {limit} bytes (max_record_bytes)"),
            ));
        }
        let count = sh.cluster.partition_count(&topic, true).await?;
        let count = u32::try_from(count).unwrap_or(0).max(1);
        let partition = match (partition, &key) {
            (Some(p), _) => {
                if p < 0 || u32::try_from(p).is_ok_and(|p| p >= count) {
                    return Err(errors::error(
                        errors::UNKNOWN_TOPIC_OR_PARTITION,
                        format!("{topic}/{p}: the topic has {count} partitions"),
                    ));
                }
                Some(p)
            }
            (None, Some(k)) => {
                Some(i32::try_from(sh.config.partitioner.partition(k, count)).unwrap_or(0))
            }
            (None, None) => None,
        };
        let timestamp = timestamp.unwrap_or_else(crate::clock::now_ms);
        // The record's (topic, partition), the partition chosen below.
        let mut tp: Tp = (topic, 0);
        let mut listener: Option<event_listener::EventListener> = None;
        loop {
            {
                let mut st = lock(&sh.state);
                if st.closed {
                    return Err(Error::Closed);
                }
                if st.buffered + len <= sh.config.buffer_max_bytes {
                    st.buffered += len;
                    let n = i32::try_from(count).unwrap_or(1);
                    let p = match partition {
                        Some(p) => p,
                        None => {
                            let start = || {
                                i32::try_from(crate::clock::now_ms().rem_euclid(i64::from(n)))
                                    .unwrap_or(0)
                            };
                            match st.sticky.get_mut(&tp.0) {
                                Some(sticky) => {
                                    if sticky.1 != n {
                                        *sticky = (start(), n);
                                    }
                                    sticky.0
                                }
                                None => {
                                    let s = start();
                                    st.sticky.insert(tp.0.clone(), (s, n));
                                    s
                                }
                            }
                        }
                    };
                    let max = sh.config.batch_max_bytes;
                    // Looked up by the record's own topic string: no copy of it
                    // unless the partition is new to the producer.
                    tp.1 = p;
                    if !st.parts.contains_key(&tp) {
                        st.parts.insert(tp.clone(), PartQ::default());
                    }
                    let Some(q) = st.parts.get_mut(&tp) else {
                        return Err(Error::Closed);
                    };
                    if q.open
                        .as_ref()
                        .is_some_and(|o| o.size + len > max && o.size > 0)
                    {
                        seal(q, &sh.config);
                    }
                    // The sender is woken only when its plans change: a new batch
                    // (whose linger starts now) or a full one; a record joining an open
                    // batch changes nothing it waits for.
                    let fresh = q.open.is_none();
                    let o = q.open.get_or_insert_with(|| Open {
                        builder: BatchBuilder::new(Some(timestamp)),
                        acks: Acks::new(),
                        size: 0,
                        created: Instant::now(),
                    });
                    let delta = o.builder.count();
                    o.builder.push(
                        delta,
                        timestamp,
                        key.as_deref(),
                        value.as_deref(),
                        headers.iter().map(|h| (h.key.as_str(), h.value.as_deref())),
                    );
                    o.size += len;
                    let delivery = o.acks.add();
                    let full = o.size >= max;
                    if full {
                        seal(q, &sh.config);
                    }
                    if full {
                        next_sticky(&mut st.sticky, &tp.0, p);
                    }
                    drop(st);
                    if fresh || full {
                        sh.added.notify(1);
                    }
                    return Ok(delivery);
                }
            }
            if !wait {
                return Err(Error::BufferFull {
                    limit: sh.config.buffer_max_bytes,
                });
            }
            match listener.take() {
                Some(l) => l.await,
                None => listener = Some(sh.freed.listen()),
            }
        }
    }

    pub(crate) async fn flush(&self) {
        let sh = &self.sh;
        loop {
            let listener = sh.freed.listen();
            if lock(&sh.state).buffered == 0 {
                return;
            }
            sh.added.notify(1);
            listener.await;
        }
    }

    pub(crate) async fn close(&self) {
        self.flush().await;
        lock(&self.sh.state).closed = true;
        self.sh.added.notify(usize::MAX);
        self.sender.join().await;
        self.sh.cluster.close().await;
    }

    pub(crate) fn shut(&self) {
        lock(&self.sh.state).closed = true;
        self.sh.added.notify(usize::MAX);
    }
}

/// Keyless records of `topic` move on from partition `p` (its batch is sealed).
fn next_sticky(sticky: &mut HashMap<String, (i32, i32)>, topic: &str, p: i32) {
    if let Some(s) = sticky.get_mut(topic)
        && s.0 == p
    {
        s.0 = (p + 1).rem_euclid(s.1.max(1));
    }
}

/// Closes the partition's open batch: it waits in `ready` to be sent.
fn seal(q: &mut PartQ, config: &ProducerConfig) {
    if let Some(o) = q.open.take() {
        q.ready.push_back(Sealed {
            bytes: None,
            count: o.builder.count(),
            builder: Some(o.builder),
            acks: o.acks,
            size: o.size,
            base_seq: -1,
            deadline: o.created + config.delivery_timeout,
        });
    }
}

/// Takes a producer id (InitProducerId at any broker) and starts every
/// partition's sequence over.
async fn init_producer_id(sh: &Shared) -> Result<()> {
    let mut delay = sh
        .config
        .connection
        .backoff_initial
        .max(Duration::from_millis(10));
    let deadline = Instant::now() + sh.config.delivery_timeout;
    loop {
        let conn = sh.cluster.any().await?;
        let v = conn.version(ApiKey::InitProducerId)?;
        let req = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000);
        let resp = conn.call_at(&req, v, Duration::ZERO).await?;
        if resp.error_code == errors::NONE {
            let mut st = lock(&sh.state);
            st.producer_id = resp.producer_id.0;
            st.epoch = resp.producer_epoch;
            st.reset_pid = false;
            for q in st.parts.values_mut() {
                q.next_seq = 0;
            }
            tracing::debug!(
                producer_id = resp.producer_id.0,
                epoch = resp.producer_epoch,
                "producer id"
            );
            return Ok(());
        }
        if !errors::is_retriable(resp.error_code) || Instant::now() + delay > deadline {
            return Err(errors::error(resp.error_code, "InitProducerId"));
        }
        rt::sleep(delay).await;
        delay = (delay * 2).min(sh.config.connection.backoff_max);
    }
}

/// A batch on its way: where it goes back on a retry.
struct Sent {
    tp: Tp,
    batch: Sealed,
}

type Done = (i32, Vec<Sent>, Result<Option<ProduceResponse>>);

async fn sender_loop(sh: Arc<Shared>) {
    let mut inflight: FuturesUnordered<BoxFuture<'static, Done>> = FuturesUnordered::new();
    loop {
        let listener = sh.added.listen();
        // Every answer already in.
        while let Some(Some(d)) = inflight.next().now_or_never() {
            complete(&sh, d).await;
        }
        let (closed, idle, reset, next_linger) = {
            let mut st = lock(&sh.state);
            expire(&mut st, &sh);
            let idle = st
                .parts
                .values()
                .all(|q| q.open.is_none() && q.ready.is_empty());
            let next = st
                .parts
                .values()
                .filter_map(|q| {
                    let linger = q.open.as_ref().map(|o| o.created + sh.config.linger);
                    match (linger, q.retry_at) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        (a, None) => a,
                        (None, Some(b)) if !q.ready.is_empty() => Some(b),
                        (None, Some(_)) => None,
                    }
                })
                .min();
            (st.closed, idle, st.reset_pid, next)
        };
        if closed && idle && inflight.is_empty() {
            return;
        }
        if reset {
            if inflight.is_empty() {
                if let Err(e) = init_producer_id(&sh).await {
                    tracing::warn!(error = %e, "no new producer id; retrying");
                    rt::sleep(sh.config.connection.backoff_max).await;
                }
                restamp_all(&sh);
            } else if let Some(d) = inflight.next().await {
                complete(&sh, d).await;
            }
            continue;
        }
        let requests = take_requests(&sh, closed).await;
        let sent_any = !requests.is_empty();
        for (leader, sent, req) in requests {
            match start(&sh, leader, sent, req).await {
                Ok(f) => inflight.push(f),
                Err((sent, e)) => complete(&sh, (leader, sent, Err(e))).await,
            }
        }
        if sent_any {
            continue;
        }
        // Nothing to send now: wait for a record, an answer, or a linger to pass.
        let wait = next_linger.map(|t| t.saturating_duration_since(Instant::now()));
        let next = async {
            if inflight.is_empty() {
                futures::future::pending().await
            } else {
                inflight.next().await
            }
        };
        let timer = async {
            match wait {
                Some(w) => rt::sleep(w.max(Duration::from_micros(100))).await,
                None => futures::future::pending().await,
            }
        };
        let done = futures::select! {
            _ = listener.fuse() => None,
            d = next.fuse() => d,
            () = timer.fuse() => None,
        };
        if let Some(d) = done {
            complete(&sh, d).await;
        }
    }
}

/// Fails batches past their delivery timeout that are not in flight.
fn expire(st: &mut State, sh: &Shared) {
    let now = Instant::now();
    let mut stamped_failed = false;
    for ((t, p), q) in &mut st.parts {
        while q.ready.front().is_some_and(|b| b.deadline <= now) {
            if let Some(b) = q.ready.pop_front() {
                stamped_failed |= b.base_seq >= 0;
                st.buffered = st.buffered.saturating_sub(b.size);
                b.acks.complete(Outcome::failed(Error::Timeout {
                    api: "Produce",
                    addr: format!("{t}/{p}"),
                    timeout_ms: u64::try_from(sh.config.delivery_timeout.as_millis())
                        .unwrap_or(u64::MAX),
                }));
                sh.freed.notify(usize::MAX);
            }
        }
    }
    if stamped_failed && sh.config.idempotence {
        st.reset_pid = true;
    }
}

/// After a new producer id: every batch not in flight is stamped again
/// from sequence 0, in order.
fn restamp_all(sh: &Shared) {
    let mut st = lock(&sh.state);
    let (pid, epoch) = (st.producer_id, st.epoch);
    for q in st.parts.values_mut() {
        q.next_seq = 0;
        q.draining = false;
        for b in &mut q.ready {
            if let Some(bytes) = b.bytes.take() {
                let seq = q.next_seq;
                let mut v = bytes.to_vec();
                stamp(&mut v, pid, epoch, seq);
                b.bytes = Some(Bytes::from(v));
                b.base_seq = seq;
                q.next_seq = q.next_seq.wrapping_add(b.count);
            }
        }
    }
}

fn stamp(bytes: &mut [u8], pid: i64, epoch: i16, seq: i32) {
    if let Some(mut h) = BatchHeader::parse(bytes) {
        h.producer_id = pid;
        h.producer_epoch = epoch;
        h.base_sequence = seq;
        h.write(bytes);
        kafka_batch::reseal(bytes);
    }
}

/// Takes what can go now, grouped by leader into requests of at most
/// `request_max_bytes`: per partition, batches that are sealed (or open
/// past their linger, or all when closing), up to the in-flight limit.
async fn take_requests(sh: &Shared, closing: bool) -> Vec<(i32, Vec<Sent>, ProduceRequest)> {
    let per_partition = if sh.config.idempotence {
        MAX_IN_FLIGHT_IDEMPOTENT
    } else {
        1
    };
    let max_requests = sh.config.max_in_flight.max(1);
    // Leaders first (the cache, refreshed for topics not in it).
    let wanted: Vec<Tp> = {
        let st = lock(&sh.state);
        if st.requests >= max_requests {
            return Vec::new();
        }
        st.parts
            .iter()
            .filter(|(_, q)| {
                !q.draining
                    && q.inflight < per_partition
                    && (q.open.is_some() || !q.ready.is_empty())
            })
            .map(|(tp, _)| tp.clone())
            .collect()
    };
    let mut leaders: HashMap<Tp, i32> = HashMap::new();
    for tp in wanted {
        match sh.cluster.leader(&tp.0, tp.1).await {
            Ok(m) => {
                leaders.insert(tp, m.leader);
            }
            Err(e) => {
                tracing::debug!(topic = %tp.0, partition = tp.1, error = %e, "no leader yet");
                let _ = sh.cluster.refresh_stale(std::slice::from_ref(&tp.0)).await;
            }
        }
    }
    let now = Instant::now();
    let limit = sh
        .config
        .connection
        .max_frame_bytes
        .saturating_sub(64 * 1024)
        .min(sh.config.request_max_bytes)
        .max(1);
    let mut st = lock(&sh.state);
    let (pid, epoch) = (st.producer_id, st.epoch);
    // Per leader: bytes so far, the batches, and those still to encode
    // (outside the lock: compression takes time).
    let mut by_leader: BTreeMap<i32, (usize, Vec<Sent>)> = BTreeMap::new();
    let mut requests = st.requests;
    let State { parts, sticky, .. } = &mut *st;
    for (tp, q) in parts.iter_mut() {
        let Some(&leader) = leaders.get(tp) else {
            continue;
        };
        if q.draining || q.retry_at.is_some_and(|t| now < t) {
            continue;
        }
        q.retry_at = None;
        if q.open
            .as_ref()
            .is_some_and(|o| closing || now >= o.created + sh.config.linger)
        {
            seal(q, &sh.config);
            next_sticky(sticky, &tp.0, tp.1);
        }
        // One batch per partition per request (Kafka takes no more since
        // v3); the partition's next batches go in the next requests.
        if q.inflight < per_partition && !q.ready.is_empty() {
            let entry = by_leader.entry(leader).or_insert((0, Vec::new()));
            if entry.1.is_empty() {
                if requests >= max_requests {
                    continue;
                }
                requests += 1;
            }
            let Some(mut b) = q.ready.pop_front() else {
                continue;
            };
            let size = match (&b.bytes, &b.builder) {
                (Some(bytes), _) => bytes.len(),
                (None, Some(builder)) => builder.len() + kafka_batch::BATCH_HEADER_LEN,
                (None, None) => 0,
            };
            if entry.0 > 0 && entry.0 + size > limit {
                q.ready.push_front(b);
                continue;
            }
            if b.bytes.is_none() && sh.config.idempotence {
                // The sequence is taken now, in order; the batch is encoded below.
                b.base_seq = q.next_seq;
                q.next_seq = q.next_seq.wrapping_add(b.count);
            }
            entry.0 += size;
            q.inflight += 1;
            q.inflight_seqs.push(b.base_seq);
            entry.1.push(Sent {
                tp: tp.clone(),
                batch: b,
            });
        }
    }
    st.requests = requests;
    drop(st);
    let mut out = Vec::new();
    for (leader, (_, sent)) in by_leader {
        let mut ready = Vec::with_capacity(sent.len());
        for mut s in sent {
            if let Some(builder) = s.batch.builder.take() {
                let meta = BatchMeta {
                    producer_id: if sh.config.idempotence { pid } else { -1 },
                    producer_epoch: if sh.config.idempotence { epoch } else { -1 },
                    base_sequence: s.batch.base_seq,
                    ..BatchMeta::default()
                };
                match builder.finish(&meta, sh.config.compression) {
                    Ok(bytes) => s.batch.bytes = Some(Bytes::from(bytes)),
                    Err(e) => {
                        let err = Error::protocol(format!(
                            "cannot encode a batch for {}/{}: {e}",
                            s.tp.0, s.tp.1
                        ));
                        fail_unsent(sh, s, err);
                        continue;
                    }
                }
            }
            ready.push(s);
        }
        if ready.is_empty() {
            lock(&sh.state).requests -= 1;
            continue;
        }
        let mut topics: Vec<produce_request::TopicProduceData> = Vec::new();
        for s in &ready {
            let data = produce_request::PartitionProduceData::default()
                .with_index(s.tp.1)
                .with_records(s.batch.bytes.clone());
            match topics.last_mut() {
                Some(t) if t.name.0.as_str() == s.tp.0 => t.partition_data.push(data),
                _ => topics.push(
                    produce_request::TopicProduceData::default()
                        .with_name(topic_name(&s.tp.0))
                        .with_partition_data(vec![data]),
                ),
            }
        }
        let req = ProduceRequest::default()
            .with_acks(sh.config.acks.code())
            .with_timeout_ms(
                i32::try_from(sh.config.connection.request_timeout.as_millis()).unwrap_or(i32::MAX),
            )
            .with_topic_data(topics);
        out.push((leader, ready, req));
    }
    out
}

/// A batch taken for a request that could not be encoded: it fails, and
/// its sequence (if it took one) leaves a hole, so a new id follows.
fn fail_unsent(sh: &Shared, s: Sent, err: Error) {
    let mut st = lock(&sh.state);
    if let Some(q) = st.parts.get_mut(&s.tp) {
        q.inflight = q.inflight.saturating_sub(1);
        if let Some(i) = q.inflight_seqs.iter().position(|&x| x == s.batch.base_seq) {
            q.inflight_seqs.swap_remove(i);
        }
    }
    if s.batch.base_seq >= 0 {
        st.reset_pid = true;
    }
    st.buffered = st.buffered.saturating_sub(s.batch.size);
    drop(st);
    s.batch.acks.complete(Outcome::failed(err));
    sh.freed.notify(usize::MAX);
}

/// Writes a request to `leader`; the future of its answer.
async fn start(
    sh: &Arc<Shared>,
    leader: i32,
    sent: Vec<Sent>,
    req: ProduceRequest,
) -> std::result::Result<BoxFuture<'static, Done>, (Vec<Sent>, Error)> {
    let conn = match sh.cluster.broker(leader).await {
        Ok(c) => c,
        Err(e) => return Err((sent, e)),
    };
    let v = match conn.version(ApiKey::Produce) {
        Ok(v) => v,
        Err(e) => return Err((sent, e)),
    };
    if sh.config.acks == RequiredAcks::None {
        return match conn.send_only(&req, v).await {
            Ok(()) => Ok(async move { (leader, sent, Ok(None)) }.boxed()),
            Err(e) => Err((sent, e)),
        };
    }
    match conn.start(&req, v, Duration::ZERO).await {
        Ok(answer) => Ok(async move { (leader, sent, answer.await.map(Some)) }.boxed()),
        Err(e) => Err((sent, e)),
    }
}

/// What became of one batch.
enum Fate {
    Done(Outcome),
    Retry,
    /// Retry, after a new producer id.
    RetryNewId,
    /// OUT_OF_ORDER_SEQUENCE_NUMBER: a retry if an earlier batch of the
    /// partition is on its way again, else (the broker lost the producer's
    /// state) a retry after a new producer id.
    OutOfOrder,
}

async fn complete(sh: &Shared, (leader, sent, result): Done) {
    let mut fates: Vec<(Sent, Fate)> = Vec::with_capacity(sent.len());
    let mut stale_topics: Vec<String> = Vec::new();
    match result {
        Ok(None) => {
            // acks 0: written, no offsets.
            for s in sent {
                let placed = (0..s.batch.count)
                    .map(|_| RecordMetadata {
                        partition: s.tp.1,
                        offset: -1,
                    })
                    .collect();
                fates.push((s, Fate::Done(Outcome { placed, rest: None })));
            }
        }
        Ok(Some(resp)) => {
            let mut answers: HashMap<Tp, (i16, i64, Option<String>)> = HashMap::new();
            for t in resp.responses {
                for p in t.partition_responses {
                    answers.insert(
                        (t.name.0.to_string(), p.index),
                        (
                            p.error_code,
                            p.base_offset,
                            p.error_message.map(|m| m.to_string()),
                        ),
                    );
                }
            }
            for s in sent {
                let fate = match answers.get(&s.tp) {
                    None => Fate::Done(Outcome::failed(Error::protocol(format!(
                        "Produce answer from broker {leader} lacks {}/{}",
                        s.tp.0, s.tp.1
                    )))),
                    Some((code, base, msg)) => match *code {
                        errors::NONE | errors::DUPLICATE_SEQUENCE_NUMBER => {
                            let placed = (0..s.batch.count)
                                .map(|i| RecordMetadata {
                                    partition: s.tp.1,
                                    offset: if *base >= 0 { base + i64::from(i) } else { -1 },
                                })
                                .collect();
                            Fate::Done(Outcome { placed, rest: None })
                        }
                        c if errors::is_stale_leader(c) => {
                            stale_topics.push(s.tp.0.clone());
                            Fate::Retry
                        }
                        errors::UNKNOWN_PRODUCER_ID | errors::INVALID_PRODUCER_EPOCH
                            if sh.config.idempotence =>
                        {
                            Fate::RetryNewId
                        }
                        errors::OUT_OF_ORDER_SEQUENCE_NUMBER if sh.config.idempotence => {
                            // Decided below: a retry behind an earlier batch of the
                            // partition, a new id at its head.
                            Fate::OutOfOrder
                        }
                        c if errors::is_retriable(c) => Fate::Retry,
                        c => Fate::Done(Outcome::failed(errors::error_with(
                            c,
                            format!("{}/{}", s.tp.0, s.tp.1),
                            msg.as_deref(),
                        ))),
                    },
                };
                fates.push((s, fate));
            }
        }
        Err(e) => {
            tracing::debug!(leader, error = %e, "produce request failed");
            let retry = e.is_retriable();
            for s in sent {
                stale_topics.push(s.tp.0.clone());
                let fate = if retry {
                    Fate::Retry
                } else {
                    Fate::Done(Outcome::failed(e.clone()))
                };
                fates.push((s, fate));
            }
        }
    }
    let mut freed = 0usize;
    {
        let mut st = lock(&sh.state);
        st.requests = st.requests.saturating_sub(1);
        for (s, fate) in fates {
            let idempotence = sh.config.idempotence;
            let mut new_id = false;
            let State { parts, .. } = &mut *st;
            let q = parts.entry(s.tp.clone()).or_default();
            q.inflight = q.inflight.saturating_sub(1);
            if let Some(i) = q.inflight_seqs.iter().position(|&x| x == s.batch.base_seq) {
                q.inflight_seqs.swap_remove(i);
            }
            match fate {
                Fate::Done(outcome) => {
                    if idempotence && outcome.rest.is_some() && s.batch.base_seq >= 0 {
                        new_id = true; // a stamped batch failed: the sequence has a hole
                    }
                    freed += s.batch.size;
                    s.batch.acks.complete(outcome);
                }
                Fate::Retry | Fate::RetryNewId | Fate::OutOfOrder => {
                    let seq = s.batch.base_seq;
                    let earlier = q.inflight_seqs.iter().any(|&x| x >= 0 && x < seq)
                        || q.ready.iter().any(|b| b.base_seq >= 0 && b.base_seq < seq);
                    new_id = match fate {
                        Fate::RetryNewId => true,
                        Fate::OutOfOrder => !earlier,
                        _ => false,
                    };
                    q.retry_at = Some(Instant::now() + sh.config.connection.backoff_initial);
                    if Instant::now() >= s.batch.deadline {
                        freed += s.batch.size;
                        new_id |= idempotence && s.batch.base_seq >= 0;
                        s.batch.acks.complete(Outcome::failed(Error::Timeout {
                            api: "Produce",
                            addr: format!("{}/{}", s.tp.0, s.tp.1),
                            timeout_ms: u64::try_from(sh.config.delivery_timeout.as_millis())
                                .unwrap_or(u64::MAX),
                        }));
                    } else {
                        q.draining = true;
                        // Back in sequence order, before what was never sent.
                        let at = q
                            .ready
                            .iter()
                            .position(|b| b.base_seq < 0 || b.base_seq > s.batch.base_seq)
                            .unwrap_or(q.ready.len());
                        q.ready.insert(at, s.batch);
                    }
                }
            }
            if q.inflight == 0 && q.draining {
                // Every batch of the partition is back: send again, in order.
                q.draining = false;
            }
            if new_id {
                st.reset_pid = true;
            }
        }
        st.buffered = st.buffered.saturating_sub(freed);
    }
    if freed > 0 {
        sh.freed.notify(usize::MAX);
    }
    if !stale_topics.is_empty() {
        stale_topics.sort();
        stale_topics.dedup();
        if let Err(e) = sh.cluster.refresh_stale(&stale_topics).await {
            tracing::debug!(error = %e, "metadata refresh after a refused produce failed");
        }
    }
}

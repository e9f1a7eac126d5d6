//! Fetching over Kafka, shared by the group consumer and the partition
//! consumer: one Fetch in flight per leader, kept across calls (so a fetch
//! waiting at an idle leader is not abandoned each time another leader
//! answers), answers matched to the positions they were asked for, and the
//! record batches read with `flume-protocol`'s Kafka batch codec.
//!
//! - A partition's answer is taken only if its position has not moved since
//!   the fetch was sent (a seek, a reset, a revoke): else it is dropped and
//!   fetched again.
//! - NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH and the like refresh the
//!   metadata (at most once per backoff) and the partition goes to its new
//!   leader next time.
//! - OFFSET_OUT_OF_RANGE moves the position to the log start (or, with
//!   [`StartOffset::Latest`], the log end), Kafka's `auto.offset.reset`.
//! - A batch cut off at the end of an answer (the broker fills
//!   `partition_max_bytes` with whole bytes, not whole batches) is fetched
//!   again from its start; a batch wholly below the position (a compressed
//!   batch the position points into) gives only its later records.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use kafka_protocol::messages::{fetch_request, ApiKey, BrokerId, FetchRequest, FetchResponse};

use super::cluster::Cluster;
use super::errors;
use super::offsets::{self, topic_name};
use crate::error::{Error, Result};
use crate::types::consumer::{FetchConfig, StartOffset};
use flume_protocol::record::{Header, Record};

/// A (topic, partition).
pub(crate) type Tp = (String, i32);

/// What one fetch asked for: each partition and the offset.
type Asked = Vec<(Tp, i64)>;

type InFlight = BoxFuture<'static, (i32, Asked, Result<FetchResponse>)>;

/// Records of one partition from one answer.
#[derive(Debug)]
pub(crate) struct Got {
    pub tp: Tp,
    pub records: Vec<Record>,
    pub high_watermark: i64,
}

/// The fetch state of one consumer.
pub(crate) struct Fetcher {
    cluster: Arc<Cluster>,
    config: FetchConfig,
    /// Where to go when a position is out of range.
    reset: StartOffset,
    /// In a `Mutex` only to make the fetcher `Sync` (the futures are `Send`,
    /// not `Sync`); always reached through `&mut self`, never locked.
    inflight: std::sync::Mutex<FuturesUnordered<InFlight>>,
    /// Leaders with a fetch in flight.
    busy: Vec<i32>,
    /// Where each fetch starts in the partition list of its leader (turns,
    /// so a small `max_bytes` serves every partition in turn).
    rotation: usize,
}

impl Fetcher {
    pub(crate) fn new(cluster: Arc<Cluster>, config: FetchConfig, reset: StartOffset) -> Self {
        Fetcher {
            cluster,
            config,
            reset,
            inflight: std::sync::Mutex::new(FuturesUnordered::new()),
            busy: Vec::new(),
            rotation: 0,
        }
    }

    fn inflight_mut(&mut self) -> &mut FuturesUnordered<InFlight> {
        self.inflight
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Drops every fetch in flight (their answers are discarded): after a
    /// rebalance, a seek.
    pub(crate) fn abandon(&mut self) {
        *self.inflight_mut() = FuturesUnordered::new();
        self.busy.clear();
    }

    /// Starts a fetch at each leader of `positions` that has none in
    /// flight, waits for the first answer (up to `max_wait` at the broker),
    /// takes every answer already there, and returns their records;
    /// `positions` move past them.
    ///
    /// # Errors
    /// Per-partition refusals other than stale leaders and out-of-range
    /// offsets; connection failures are answered by a metadata refresh and
    /// an empty result (the next call fetches again).
    ///
    /// # Cancel safety
    /// Fetches in flight stay in the fetcher; dropping this future loses
    /// nothing (a fetch being written when dropped breaks its connection,
    /// which is then reopened).
    pub(crate) async fn poll(&mut self, positions: &mut HashMap<Tp, i64>) -> Result<Vec<Got>> {
        self.start(positions).await?;
        let Some(first) = self.inflight_mut().next().await else {
            return Ok(Vec::new());
        };
        let mut done = vec![first];
        while let Some(Some(more)) = self.inflight_mut().next().now_or_never() {
            done.push(more);
        }
        let mut out = Vec::new();
        let mut stale: Vec<String> = Vec::new();
        let mut reset: Vec<Tp> = Vec::new();
        for (leader, asked, result) in done {
            self.busy.retain(|l| *l != leader);
            let resp = match result {
                Ok(r) => r,
                Err(e) if e.is_retriable() => {
                    tracing::debug!(leader, error = %e, "fetch failed; refreshing metadata");
                    stale.extend(asked.iter().map(|((t, _), _)| t.clone()));
                    continue;
                }
                Err(e) => return Err(e),
            };
            if resp.error_code != errors::NONE {
                return Err(errors::error(
                    resp.error_code,
                    format!("Fetch at broker {leader}"),
                ));
            }
            for t in resp.responses {
                let topic = t.topic.0.to_string();
                for p in t.partitions {
                    let tp = (topic.clone(), p.partition_index);
                    let Some(&(_, from)) = asked.iter().find(|(a, _)| *a == tp) else {
                        continue;
                    };
                    if positions.get(&tp) != Some(&from) {
                        continue; // moved since: fetched again from there
                    }
                    match p.error_code {
                        errors::NONE => {}
                        errors::OFFSET_OUT_OF_RANGE => {
                            reset.push(tp);
                            continue;
                        }
                        c if errors::is_stale_leader(c) || errors::is_retriable(c) => {
                            stale.push(topic.clone());
                            continue;
                        }
                        c => {
                            return Err(errors::error(
                                c,
                                format!("{}/{} at offset {from}", tp.0, tp.1),
                            ));
                        }
                    }
                    let bytes = p.records.unwrap_or_default();
                    let (records, next) = decode_records(&bytes, from, self.config.max_bytes)
                        .map_err(|e| Error::CorruptRecord {
                            detail: format!("{}/{} at offset {from}: {e}", tp.0, tp.1),
                        })?;
                    if let Some(next) = next {
                        positions.insert(tp.clone(), next.max(from));
                    }
                    out.push(Got {
                        tp,
                        records,
                        high_watermark: p.high_watermark,
                    });
                }
            }
        }
        if !stale.is_empty() {
            stale.sort();
            stale.dedup();
            if let Err(e) = self.cluster.refresh_stale(&stale).await {
                tracing::debug!(error = %e, "metadata refresh failed");
            }
        }
        if !reset.is_empty() {
            self.reset_positions(&reset, positions).await?;
        }
        Ok(out)
    }

    /// Moves `parts` to the log start (or end, for [`StartOffset::Latest`]).
    pub(crate) async fn reset_positions(
        &mut self,
        parts: &[Tp],
        positions: &mut HashMap<Tp, i64>,
    ) -> Result<()> {
        let ts = if self.reset == StartOffset::Latest {
            -1
        } else {
            -2
        };
        let asks: Vec<(String, i32, i64)> =
            parts.iter().map(|(t, p)| (t.clone(), *p, ts)).collect();
        for (t, l) in offsets::list_offsets(&self.cluster, &asks).await? {
            if l.error == errors::NONE && l.offset >= 0 {
                tracing::debug!(topic = %t, partition = l.partition, offset = l.offset, "position reset");
                positions.insert((t, l.partition), l.offset);
            } else if l.error != errors::NONE && !errors::is_retriable(l.error) {
                return Err(errors::error(l.error, format!("{t}/{}", l.partition)));
            }
        }
        Ok(())
    }

    async fn start(&mut self, positions: &HashMap<Tp, i64>) -> Result<()> {
        let mut by_leader: BTreeMap<i32, Vec<(Tp, i64, i32)>> = BTreeMap::new();
        let mut sorted: Vec<(&Tp, &i64)> = positions.iter().collect();
        sorted.sort();
        let mut unknown = Vec::new();
        for (tp, off) in sorted {
            match self.cluster.leader(&tp.0, tp.1).await {
                Ok(m) if !self.busy.contains(&m.leader) => {
                    by_leader
                        .entry(m.leader)
                        .or_default()
                        .push((tp.clone(), *off, m.epoch));
                }
                Ok(_) => {}
                Err(e) if e.is_retriable() => unknown.push(tp.0.clone()),
                Err(e) => return Err(e),
            }
        }
        if !unknown.is_empty() && by_leader.is_empty() && self.inflight_mut().is_empty() {
            unknown.sort();
            unknown.dedup();
            self.cluster.refresh_stale(&unknown).await?;
            return Ok(());
        }
        let rotation = self.rotation;
        self.rotation = self.rotation.wrapping_add(1);
        for (leader, mut parts) in by_leader {
            if !parts.is_empty() {
                let first = rotation % parts.len();
                parts.rotate_left(first);
            }
            match self.start_one(leader, parts).await {
                Ok(f) => {
                    self.busy.push(leader);
                    self.inflight_mut().push(f);
                }
                Err(e) if e.is_retriable() => {
                    tracing::debug!(leader, error = %e, "cannot fetch from broker");
                }
                Err(e) => return Err(e),
            }
        }
        if self.inflight_mut().is_empty() {
            // Nothing could be sent: wait a little before the next round.
            super::backoff(&self.cluster).await;
        }
        Ok(())
    }

    async fn start_one(&self, leader: i32, parts: Vec<(Tp, i64, i32)>) -> Result<InFlight> {
        let conn = self.cluster.broker(leader).await?;
        let v = conn.version(ApiKey::Fetch)?;
        let wait = self.config.max_wait;
        let mut topics: Vec<fetch_request::FetchTopic> = Vec::new();
        for ((t, p), off, epoch) in &parts {
            let mut fp = fetch_request::FetchPartition::default()
                .with_partition(*p)
                .with_fetch_offset(*off)
                .with_partition_max_bytes(self.config.partition_max_bytes);
            if v >= 9 {
                fp.current_leader_epoch = *epoch;
            }
            if v >= 12 {
                fp.last_fetched_epoch = -1;
            }
            if v >= 5 {
                fp.log_start_offset = -1;
            }
            match topics.last_mut() {
                Some(last) if last.topic.0.as_str() == t => last.partitions.push(fp),
                _ => topics.push(
                    fetch_request::FetchTopic::default()
                        .with_topic(topic_name(t))
                        .with_partitions(vec![fp]),
                ),
            }
        }
        let mut req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(i32::try_from(wait.as_millis()).unwrap_or(i32::MAX))
            .with_min_bytes(1)
            .with_max_bytes(self.config.max_bytes)
            .with_topics(topics);
        if v >= 7 {
            req.session_epoch = -1; // a full fetch, no session
        }
        let answer = conn.start(&req, v, wait).await?;
        let asked: Asked = parts.into_iter().map(|(tp, off, _)| (tp, off)).collect();
        Ok(async move { (leader, asked, answer.await) }.boxed())
    }
}

/// The records at or past `from` in a fetched record set, and the offset
/// to fetch next (`None`: nothing whole was there). A batch cut off at the
/// end is left for the next fetch; control batches are skipped.
///
/// # Errors
/// A corrupt batch (bad CRC, a record that does not parse), or one whose
/// records inflate past `limit` bytes.
pub(crate) fn decode_records(
    set: &Bytes,
    from: i64,
    limit: i32,
) -> std::result::Result<(Vec<Record>, Option<i64>), String> {
    use flume_protocol::kafka_batch::{self, BatchHeader, BATCH_HEADER_LEN};
    let limit = usize::try_from(limit).unwrap_or(0).max(1 << 20);
    let mut out = Vec::new();
    let mut next = None;
    let mut rest: &[u8] = set;
    while !rest.is_empty() {
        let Some(h) = BatchHeader::parse(rest) else {
            break;
        };
        let whole = usize::try_from(h.length)
            .ok()
            .and_then(|l| l.checked_add(12))
            .is_some_and(|size| size <= rest.len());
        if !whole {
            // Cut off by the broker's byte limit: fetched again next time.
            if rest.len() >= BATCH_HEADER_LEN && h.length < 0 {
                return Err(format!("batch length {}", h.length));
            }
            break;
        }
        let batch = kafka_batch::check(rest).map_err(|e| e.to_string())?;
        rest = &rest[batch.bytes.len()..];
        let end = h
            .base_offset
            .saturating_add(i64::from(h.last_offset_delta))
            .saturating_add(1);
        next = Some(end);
        if h.is_control() || end <= from {
            continue;
        }
        // Keys, values and header values are slices of the fetched bytes (or
        // of the batch's decompressed records): no allocation or copy per record.
        let data = match batch.records(limit).map_err(|e| e.to_string())? {
            std::borrow::Cow::Borrowed(d) => set.slice_ref(d),
            std::borrow::Cow::Owned(v) => Bytes::from(v),
        };
        let piece = |s: &[u8]| data.slice_ref(s);
        kafka_batch::for_each_record::<kafka_batch::BatchError>(&h, &data, &mut |r| {
            let offset = h.base_offset.saturating_add(i64::from(r.offset_delta));
            if offset >= from {
                out.push(Record {
                    offset: u64::try_from(offset).unwrap_or(0),
                    timestamp: r.timestamp,
                    key: r.key.map(piece),
                    value: r.value.map(piece),
                    headers: r
                        .headers
                        .iter()
                        .map(|(k, v)| Header {
                            key: (*k).to_owned(),
                            value: v.map(piece),
                        })
                        .collect(),
                });
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    }
    Ok((out, next))
}

/// How long a consumer backs off after an error it retries.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(100);

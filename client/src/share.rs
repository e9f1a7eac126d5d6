//! [`ShareConsumer`]: a member of a share group (a queue, KIP-932): the
//! members of a group share the records of every partition of the topics
//! they subscribe to, each record handed to one member at a time, and each
//! record is acknowledged on its own.
//!
//! - Every member is assigned every partition of its subscription; the
//!   broker hands each record to one member at a time, locked for the
//!   broker's lock duration. More members than partitions is the point.
//! - A record is *accepted* (done, never delivered again), *released*
//!   (delivered again, to any member, its delivery count one higher) or
//!   *rejected* (never delivered again, not processed). A record not
//!   acknowledged before its lock runs out, or held by a member that leaves
//!   or is dropped, comes back; one delivered too often (the broker's
//!   delivery-count limit) is archived.
//! - [`AckMode::Implicit`] (the default): every record handed out by one
//!   [`ShareConsumer::poll`] (or [`ShareConsumer::next`]) that the
//!   application did not acknowledge itself is accepted by the next poll.
//!   [`AckMode::Explicit`]: only what the application acknowledges
//!   ([`ShareRecord::accept`], [`ShareRecord::release`],
//!   [`ShareRecord::reject`], [`ShareConsumer::acknowledge`]) is sent; an
//!   unacknowledged record comes back when its lock runs out.
//! - Acknowledgements ride on the next fetch; [`ShareConsumer::commit`]
//!   sends them at once and answers each record's outcome.
//! - Heartbeats run in a background task at the interval the broker
//!   answers; [`ShareConsumer::close`] sends the pending acknowledgements
//!   and leaves, so the records it still holds come back at once. Dropping
//!   the consumer stops the heartbeats; the broker then gives its records
//!   back when their locks or its session run out.
//!
//! Two transports sit behind one API, chosen by the address as elsewhere
//! in the SDK (`crate::kafka::endpoint`):
//! - `host:port`: Flume's protocol (SHARE_HEARTBEAT, SHARE_FETCH,
//!   SHARE_ACKNOWLEDGE), the `FlumeShare` transport below.
//! - `kafka://host:port[,host:port…]`: Kafka's share APIs at v1
//!   (ShareGroupHeartbeat at the group's coordinator, ShareFetch in a share
//!   session at each partition leader, ShareAcknowledge), what Kafka 4.1+
//!   and Flume's Kafka listener serve: `crate::kafka::share`. There a
//!   commit's outcomes are per partition (Kafka answers acknowledgements
//!   per partition: one refused range marks the partition's others too),
//!   a Kafka code without a Flume equivalent is [`ErrorCode::Other`] with
//!   Kafka's number, [`AcknowledgeType::Renew`] needs a broker that takes
//!   it (Flume's does; Kafka's ShareFetch v1 does not know it), and the
//!   group's description shows the SDK's Kafka client id (`flume-client`),
//!   not the builder's. A member whose share session is open keeps the
//!   records it holds when it is dropped from the group behind its back
//!   (they come back when the session closes or their locks run out).
//!
//! Cancel safety: a [`ShareConsumer::poll`] dropped while it waits has sent
//! (or lost) the acknowledgements it carried, and the records it acquired
//! come back when their locks run out; call [`ShareConsumer::commit`]
//! before a poll that may be cancelled to keep acknowledgements from being
//! lost (they would be delivered again: at-least-once). Over `kafka://`
//! the share session is then out of step: the next poll opens a new one.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::conn::Client;
use crate::error::{Error, Result};
use crate::kafka::share::KafkaShare;
use crate::types::connection::ConnectionConfig;
use crate::types::share::{AckBook, FetchLimits, Fetched, FetchedPartition, RecordKey};
use crate::types::share::{
    AckMode, AckOutcome, AcknowledgeType, ShareConsumerBuilder, ShareRecord,
};
use flume_protocol::record;
use flume_protocol::{
    ErrorCode, ShareAcknowledgeRequest, ShareAcknowledgement, ShareFetchRequest,
    ShareHeartbeatRequest, SharePartitionRef,
};
use flume_rt as rt;
use flume_rt::sync::lock;

impl ShareConsumerBuilder {
    /// Connects and joins the group: over Flume's protocol for a
    /// `host:port` address, over Kafka's share APIs for a `kafka://` one.
    ///
    /// # Errors
    /// No topic, a bad address, connection failures, the broker's refusal
    /// (INVALID_NAME, LIMIT_REACHED, AUTHORIZATION_FAILED, UNSUPPORTED_API
    /// from a broker without share groups; over Kafka, the Kafka codes, with
    /// [`Error::code`] giving Flume's equivalent where there is one, and a
    /// protocol error naming the versions when the broker does not serve
    /// the share APIs at v1).
    pub async fn build(self) -> Result<ShareConsumer> {
        if self.topics.is_empty() {
            return Err(Error::InvalidArgument(
                "subscribe to at least one topic".into(),
            ));
        }
        let transport = match crate::types::endpoint::endpoint(&self.addr)? {
            crate::types::endpoint::Endpoint::Kafka(brokers) => Transport::Kafka(
                KafkaShare::join(
                    brokers,
                    self.connection.clone(),
                    &self.group,
                    &self.client_id,
                    &self.topics,
                )
                .await?,
            ),
            crate::types::endpoint::Endpoint::Flume(addr) => Transport::Flume(
                FlumeShare::join(
                    &addr,
                    self.connection.clone(),
                    &self.group,
                    &self.client_id,
                    &self.topics,
                )
                .await?,
            ),
        };
        Ok(ShareConsumer {
            transport,
            cfg: self,
            book: Arc::new(Mutex::new(AckBook::default())),
            buffer: VecDeque::new(),
        })
    }
}

#[derive(Debug)]
enum Transport {
    Flume(FlumeShare),
    Kafka(KafkaShare),
}

impl Transport {
    fn member_id(&self) -> String {
        match self {
            Transport::Flume(t) => t.member_id(),
            Transport::Kafka(t) => t.member_id(),
        }
    }

    fn assignment(&self) -> Vec<(String, i32)> {
        match self {
            Transport::Flume(t) => t.assignment(),
            Transport::Kafka(t) => t.assignment(),
        }
    }

    /// Sends `acks` and acquires records.
    async fn fetch(
        &mut self,
        acks: Vec<ShareAcknowledgement>,
        limits: FetchLimits,
    ) -> Result<Fetched> {
        match self {
            Transport::Flume(t) => t.fetch(acks, limits).await,
            Transport::Kafka(t) => t.fetch(acks, limits).await,
        }
    }

    /// Sends `acks` now; one outcome per acknowledgement, in order.
    async fn acknowledge(&mut self, acks: &[ShareAcknowledgement]) -> Result<Vec<ErrorCode>> {
        if acks.is_empty() {
            return Ok(Vec::new());
        }
        match self {
            Transport::Flume(t) => t.acknowledge(acks).await,
            Transport::Kafka(t) => t.acknowledge(acks).await,
        }
    }

    /// Sends `acks`, leaves the group, stops the heartbeats, closes the
    /// connections.
    async fn close(&mut self, acks: Vec<ShareAcknowledgement>) -> Result<()> {
        match self {
            Transport::Flume(t) => t.close(acks).await,
            Transport::Kafka(t) => t.close(acks).await,
        }
    }
}

/// A member of a share group (see the module docs).
#[derive(Debug)]
pub struct ShareConsumer {
    transport: Transport,
    cfg: ShareConsumerBuilder,
    book: Arc<Mutex<AckBook>>,
    buffer: VecDeque<ShareRecord>,
}

impl ShareConsumer {
    /// A builder for a member of `group` at `addr` (`host:port` for Flume's
    /// protocol, `kafka://host:port[,host:port…]` for Kafka's).
    pub fn builder(addr: &str, group: &str) -> ShareConsumerBuilder {
        ShareConsumerBuilder::new(addr, group)
    }

    /// This member's id this member by.
    pub fn member_id(&self) -> String {
        self.transport.member_id()
    }

    /// The partitions assigned (every partition of the subscription).
    pub fn assignment(&self) -> Vec<(String, i32)> {
        self.transport.assignment()
    }

    /// Most records the next polls acquire (as the builder's `max_records`).
    pub fn set_max_records(&mut self, n: usize) {
        self.cfg.max_records = i32::try_from(n.max(1)).unwrap_or(i32::MAX);
    }

    /// Marks `record` as `ack` says (as [`ShareRecord::acknowledge`]).
    pub fn acknowledge(&self, record: &ShareRecord, ack: AcknowledgeType) {
        record.acknowledge(ack);
    }

    /// The next batch of records: sends the acknowledgements pending (in
    /// implicit mode every record handed out before is accepted), then
    /// acquires records, waiting up to the builder's `max_wait` for some.
    /// Records already fetched and not yet handed out by
    /// [`next`](Self::next) come first.
    ///
    /// # Errors
    /// Connection failures; the broker's refusal (AUTHORIZATION_FAILED, ...).
    /// A member the broker dropped (its session ran out) joins again and the
    /// poll answers what it acquires then.
    pub async fn poll(&mut self) -> Result<Vec<ShareRecord>> {
        if !self.buffer.is_empty() {
            return Ok(self.buffer.drain(..).collect());
        }
        self.fetch().await
    }

    /// The next record, waiting for one (as [`poll`](Self::poll), one at a time).
    ///
    /// # Errors
    /// As [`poll`](Self::poll).
    pub async fn next(&mut self) -> Result<ShareRecord> {
        loop {
            if let Some(r) = self.buffer.pop_front() {
                return Ok(r);
            }
            let got = self.fetch().await?;
            self.buffer.extend(got);
        }
    }

    async fn fetch(&mut self) -> Result<Vec<ShareRecord>> {
        let acks = lock(&self.book).take(self.cfg.mode == AckMode::Implicit);
        let fetched = self.transport.fetch(acks, self.cfg.limits()).await?;
        let mut book = lock(&self.book);
        if fetched.dropped {
            book.held.clear();
        }
        let mut out = Vec::new();
        for p in fetched.partitions {
            for (r, count) in p.records {
                let o = i64::try_from(r.offset).unwrap_or(i64::MAX);
                book.held.insert((p.topic.clone(), p.partition, o), None);
                out.push(ShareRecord {
                    topic: p.topic.clone(),
                    partition: p.partition,
                    delivery_count: count,
                    record: r,
                    book: Arc::clone(&self.book),
                });
            }
        }
        Ok(out)
    }

    /// The records one at a time as a [`Stream`](futures::Stream) (each
    /// [`next`](Self::next)); it ends after the first error. The consumer is
    /// not closed when the stream is dropped (as dropping it: the records it
    /// holds come back when their locks run out).
    pub fn into_stream(self) -> impl futures::Stream<Item = Result<ShareRecord>> {
        futures::stream::unfold(Some(self), |c| async move {
            let mut c = c?;
            match c.next().await {
                Ok(r) => Some((Ok(r), Some(c))),
                Err(e) => Some((Err(e), None)),
            }
        })
    }

    /// Sends the acknowledgements pending now (SHARE_ACKNOWLEDGE, Kafka's
    /// ShareAcknowledge) and answers each record's outcome. In implicit mode
    /// every record handed out so far counts as accepted, except those
    /// buffered and not yet handed out.
    ///
    /// # Errors
    /// Connection failures; UNKNOWN_MEMBER when the broker dropped the
    /// member (its records went back).
    pub async fn commit(&mut self) -> Result<Vec<AckOutcome>> {
        let acks = {
            let mut book = lock(&self.book);
            // Buffered records were not handed out: not accepted yet.
            let buffered: Vec<RecordKey> = self
                .buffer
                .iter()
                .map(|r| (r.topic.clone(), r.partition, r.offset_i64()))
                .collect();
            let kept: Vec<(RecordKey, Option<AcknowledgeType>)> = buffered
                .into_iter()
                .filter_map(|k| book.held.remove(&k).map(|v| (k, v)))
                .collect();
            let acks = book.take(self.cfg.mode == AckMode::Implicit);
            book.held.extend(kept);
            acks
        };
        let codes = self.transport.acknowledge(&acks).await?;
        if codes.len() != acks.len() {
            return Err(Error::protocol(format!(
                "{} acknowledgement outcomes for {} acknowledgements",
                codes.len(),
                acks.len()
            )));
        }
        let mut out = Vec::new();
        for (a, code) in acks.into_iter().zip(codes) {
            for offset in a.first_offset..=a.last_offset {
                out.push(AckOutcome {
                    topic: a.topic.clone(),
                    partition: a.partition,
                    offset,
                    ack: a.ack_type,
                    error: code,
                });
            }
        }
        Ok(out)
    }

    /// Sends the pending acknowledgements (as [`commit`](Self::commit); the
    /// records fetched and not handed out are released), leaves the group and
    /// stops the heartbeats.
    ///
    /// # Errors
    /// The acknowledgements or the leave failed (the broker gives the
    /// records back when the member's session runs out).
    pub async fn close(mut self) -> Result<()> {
        for r in std::mem::take(&mut self.buffer) {
            r.release();
        }
        let acks = lock(&self.book).take(self.cfg.mode == AckMode::Implicit);
        self.transport.close(acks).await
    }
}

// ---------------------------------------------------------------------------
// Flume's protocol: SHARE_HEARTBEAT, SHARE_FETCH, SHARE_ACKNOWLEDGE.

#[derive(Debug, Default)]
struct MemberState {
    member_id: String,
    epoch: i32,
    interval: Duration,
    assignment: Vec<(String, i32)>,
}

/// The membership, shared by the consumer and its heartbeat task.
#[derive(Debug)]
struct Member {
    group: String,
    client_id: String,
    topics: Vec<String>,
    state: Mutex<MemberState>,
}

impl Member {
    /// One heartbeat: a join (epoch 0, with the subscription) when `join`.
    async fn beat(&self, client: &Client, join: bool) -> Result<()> {
        let (member_id, epoch) = {
            let st = lock(&self.state);
            (st.member_id.clone(), if join { 0 } else { st.epoch })
        };
        let r = client
            .call(&ShareHeartbeatRequest {
                group: self.group.clone(),
                member_id,
                member_epoch: epoch,
                client_id: self.client_id.clone(),
                topics: if join {
                    self.topics.clone()
                } else {
                    Vec::new()
                },
            })
            .await?;
        let mut st = lock(&self.state);
        st.member_id = r.member_id;
        st.epoch = r.member_epoch;
        st.interval = Duration::from_millis(u64::try_from(r.heartbeat_interval_ms).unwrap_or(0))
            .max(Duration::from_millis(10));
        st.assignment = r
            .assignment
            .into_iter()
            .flat_map(|tp| {
                let t = tp.topic;
                tp.partitions.into_iter().map(move |p| (t.clone(), p))
            })
            .collect();
        Ok(())
    }

    async fn join(&self, client: &Client) -> Result<()> {
        self.beat(client, true).await
    }

    /// A heartbeat that joins again when the broker no longer knows the
    /// member or its epoch.
    async fn keep(&self, client: &Client) -> Result<()> {
        match self.beat(client, false).await {
            Err(e) if fenced(&e) => self.join(client).await,
            r => r,
        }
    }
}

fn fenced(e: &Error) -> bool {
    matches!(
        e.code(),
        Some(ErrorCode::UnknownMember | ErrorCode::IllegalGeneration)
    )
}

async fn heartbeat_loop(
    client: Arc<Client>,
    member: Arc<Member>,
    stop: async_channel::Receiver<()>,
) {
    use futures::FutureExt;
    loop {
        let wait = lock(&member.state).interval;
        futures::select! {
            _ = stop.recv().fuse() => return,
            () = rt::sleep(wait).fuse() => {}
        }
        if let Err(e) = member.keep(&client).await {
            tracing::warn!(group = %member.group, error = %e, "share group heartbeat failed");
        }
    }
}

/// A share group member over Flume's protocol.
#[derive(Debug)]
struct FlumeShare {
    client: Arc<Client>,
    member: Arc<Member>,
    stop: Option<async_channel::Sender<()>>,
    heartbeat: rt::sync::TaskSlot<()>,
    rotation: usize,
}

impl FlumeShare {
    async fn join(
        addr: &str,
        connection: ConnectionConfig,
        group: &str,
        client_id: &str,
        topics: &[String],
    ) -> Result<FlumeShare> {
        let client = Arc::new(Client::connect(addr, connection).await?);
        let member = Arc::new(Member {
            group: group.to_owned(),
            client_id: client_id.to_owned(),
            topics: topics.to_vec(),
            state: Mutex::new(MemberState::default()),
        });
        member.join(&client).await?;
        let (stop_tx, stop_rx) = async_channel::bounded::<()>(1);
        let task = rt::spawn(heartbeat_loop(
            Arc::clone(&client),
            Arc::clone(&member),
            stop_rx,
        ));
        Ok(FlumeShare {
            client,
            member,
            stop: Some(stop_tx),
            heartbeat: rt::sync::TaskSlot::new(task),
            rotation: 0,
        })
    }

    fn member_id(&self) -> String {
        lock(&self.member.state).member_id.clone()
    }

    fn assignment(&self) -> Vec<(String, i32)> {
        lock(&self.member.state).assignment.clone()
    }

    async fn fetch(
        &mut self,
        acks: Vec<ShareAcknowledgement>,
        limits: FetchLimits,
    ) -> Result<Fetched> {
        let (member_id, mut partitions) = {
            let st = lock(&self.member.state);
            (st.member_id.clone(), st.assignment.clone())
        };
        if partitions.is_empty() {
            // Nothing assigned (the topics do not exist yet): send the
            // acknowledgements, ask again after a wait.
            if !acks.is_empty() {
                self.acknowledge(&acks).await?;
            }
            rt::sleep(limits.max_wait.min(Duration::from_millis(200))).await;
            self.member.keep(&self.client).await?;
            return Ok(Fetched::default());
        }
        // Start one partition further on each time, so none starves the others.
        self.rotation = self.rotation.wrapping_add(1);
        let n = partitions.len();
        partitions.rotate_left(self.rotation % n);
        let req = ShareFetchRequest {
            group: self.member.group.clone(),
            member_id,
            max_wait_ms: i32::try_from(limits.max_wait.as_millis()).unwrap_or(i32::MAX),
            max_records: limits.max_records,
            max_bytes: limits.max_bytes,
            partitions: partitions
                .into_iter()
                .map(|(topic, partition)| SharePartitionRef { topic, partition })
                .collect(),
            acknowledgements: acks.clone(),
        };
        let resp = match self.client.call_with_extra(&req, limits.max_wait).await {
            Ok(r) => r,
            Err(e) if fenced(&e) => {
                // The broker dropped the member and gave its records back:
                // nothing held is ours to acknowledge any more.
                self.member.join(&self.client).await?;
                return Ok(Fetched {
                    partitions: Vec::new(),
                    dropped: true,
                });
            }
            Err(e) => return Err(e),
        };
        for (a, code) in acks.iter().zip(&resp.acknowledgements) {
            if !code.is_ok() {
                tracing::warn!(
                    topic = %a.topic, partition = a.partition, first = a.first_offset,
                    last = a.last_offset, error = %code,
                    "share acknowledgement refused (the records come back or were taken)"
                );
            }
        }
        let mut out = Fetched::default();
        let mut refresh = false;
        for p in resp.partitions {
            if !p.error.is_ok() {
                tracing::debug!(topic = %p.topic, partition = p.partition, error = %p.error, "share fetch partition");
                refresh |= p.error == ErrorCode::NotAssigned;
                continue;
            }
            let records = record::decode_all(&p.records).map_err(|e| Error::CorruptRecord {
                detail: format!("{}-{}: {e}", p.topic, p.partition),
            })?;
            let records = records
                .into_iter()
                .map(|r| {
                    let o = i64::try_from(r.offset).unwrap_or(i64::MAX);
                    let count = p
                        .acquired
                        .iter()
                        .find(|a| a.first_offset <= o && o <= a.last_offset)
                        .map_or(1, |a| u16::try_from(a.delivery_count).unwrap_or(1));
                    (r, count)
                })
                .collect();
            out.partitions.push(FetchedPartition {
                topic: p.topic,
                partition: p.partition,
                records,
            });
        }
        if refresh {
            self.member.keep(&self.client).await?;
        }
        Ok(out)
    }

    async fn acknowledge(&self, acks: &[ShareAcknowledgement]) -> Result<Vec<ErrorCode>> {
        let resp = self
            .client
            .call(&ShareAcknowledgeRequest {
                group: self.member.group.clone(),
                member_id: self.member_id(),
                acknowledgements: acks.to_vec(),
            })
            .await?;
        Ok(resp.results)
    }

    async fn close(&mut self, acks: Vec<ShareAcknowledgement>) -> Result<()> {
        let acked = if acks.is_empty() {
            Ok(Vec::new())
        } else {
            self.acknowledge(&acks).await
        };
        self.stop.take();
        let _ = self.heartbeat.cancel().await;
        let left = self
            .client
            .call(&ShareHeartbeatRequest {
                group: self.member.group.clone(),
                member_id: self.member_id(),
                member_epoch: -1,
                client_id: self.member.client_id.clone(),
                topics: Vec::new(),
            })
            .await;
        self.client.close().await;
        acked?;
        left.map(|_| ())
    }
}

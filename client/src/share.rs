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
//! in the SDK (`crate::types::endpoint`):
//! - `host:port`: Flume's protocol (SHARE_HEARTBEAT, SHARE_FETCH,
//!   SHARE_ACKNOWLEDGE), `crate::flume::share`.
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

use crate::error::{Error, Result};
use crate::flume::share::FlumeShare;
use crate::kafka::share::KafkaShare;
use crate::types::share::{AckBook, FetchLimits, Fetched, RecordKey};
use crate::types::share::{
    AckMode, AckOutcome, AcknowledgeType, ShareConsumerBuilder, ShareRecord,
};
use flume_protocol::{ErrorCode, ShareAcknowledgement};
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

/// The protocol under a [`ShareConsumer`]: Flume's share requests, or
/// Kafka's share APIs (`crate::flume::share`, `crate::kafka::share`).
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

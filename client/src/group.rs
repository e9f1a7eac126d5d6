//! [`GroupConsumer`], the facade: a member of a consumer group, as a
//! [`Stream`] of records, over one of two transports chosen by the address
//! (`crate::types::endpoint`):
//! - `host:port` (or `flume://`): Flume's group protocol,
//!   `crate::flume::group` (the broker assigns; fetches that are heartbeats).
//! - `kafka://host:port[,host:port…]`: Kafka's classic or consumer group
//!   protocol, `crate::kafka::group`.
//!
//! Both hand out [`ConsumerRecord`]s and report [`RebalanceEvent`]s on the
//! channel this facade keeps; the builder's settings are
//! `crate::types::group`'s.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::{FutureExt, Stream};

use crate::error::{Error, Result};
use crate::flume::group::FlumeGroup;
use crate::kafka::group::KafkaGroup;
use crate::types::endpoint::{endpoint, Endpoint};
use crate::types::group::{
    ConsumerRecord, GroupConsumerBuilder, RebalanceEvent, RebalanceEvents, TopicPartition,
};
use flume_rt::sync::lock;

impl GroupConsumerBuilder {
    /// Connects and joins the group (waits for the first assignment).
    ///
    /// # Errors
    /// Connection failures, INVALID_NAME, ...
    pub async fn build(self) -> Result<GroupConsumer> {
        if self.topics.is_empty() {
            return Err(Error::InvalidArgument(
                "subscribe to at least one topic".into(),
            ));
        }
        let (ev_tx, ev_rx) = async_channel::bounded(64);
        let inner = match endpoint(&self.addr)? {
            Endpoint::Kafka(brokers) => {
                Inner::Kafka(KafkaGroup::start(self, brokers, ev_tx).await?)
            }
            Endpoint::Flume(addr) => Inner::Flume(FlumeGroup::start(self, &addr, ev_tx).await?),
        };
        Ok(GroupConsumer {
            inner,
            events: ev_rx,
            pending: Mutex::new(None),
        })
    }
}

/// A group member. Use it as a `futures::Stream` of records, or with [`GroupConsumer::recv`].
///
/// ```
/// # flume_rt::block_on(async {
/// # let dir = tempfile::tempdir().unwrap();
/// # let mut cfg = flume_broker::BrokerConfig::new(dir.path());
/// # cfg.listen = "127.0.0.1:0".into();
/// # let broker = flume_broker::Broker::start(cfg).await.unwrap();
/// # let addr = broker.local_addr().to_string();
/// use futures::StreamExt;
/// use flume_client::{GroupConsumer, Producer};
///
/// Producer::connect(&addr).await?.send("orders", None, b"widget").await?;
///
/// let mut consumer = GroupConsumer::builder(&addr, "billing")
///     .topic("orders")
///     .auto_commit(false)
///     .build()
///     .await?;
/// let record = consumer.next().await.expect("open while not closed")?;
/// assert_eq!(record.payload(), b"widget");
/// consumer.commit(&record).await?; // stores record.offset + 1 for its partition
/// consumer.close().await?;
/// # broker.shutdown().await;
/// # Ok::<(), flume_client::Error>(())
/// # }).unwrap();
/// ```
pub struct GroupConsumer {
    inner: Inner,
    events: async_channel::Receiver<RebalanceEvent>,
    // A Mutex only to make the consumer Sync (the future is Send, not Sync); never contended.
    pending: Mutex<Option<BoxFuture<'static, Option<Result<ConsumerRecord>>>>>,
}

/// Flume's own group protocol, or Kafka's (a `kafka://` address).
enum Inner {
    Flume(FlumeGroup),
    Kafka(Arc<KafkaGroup>),
}

impl std::fmt::Debug for GroupConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupConsumer").finish_non_exhaustive()
    }
}

impl GroupConsumer {
    /// Starts building a consumer of `group` on the broker at `addr`.
    pub fn builder(addr: &str, group: &str) -> GroupConsumerBuilder {
        GroupConsumerBuilder::new(addr, group)
    }

    /// Assigned and revoked partitions, as they happen (the last 64 are kept
    /// if nobody reads; handles share one queue, so each event goes to one of them).
    pub fn events(&self) -> RebalanceEvents {
        RebalanceEvents(Box::pin(self.events.clone()))
    }

    /// Abandons a `next()` that was left half-way (a `Stream` poll dropped
    /// by a timeout or a `select!`): over Flume's protocol that future may
    /// hold the consumer's lock and would otherwise never give it back.
    /// Abandoning it is safe: what it was fetching is fetched again, a join
    /// it sent is sent again.
    fn abandon_pending(&self) {
        let abandoned = lock(&self.pending).take();
        drop(abandoned);
    }

    /// The current assignment.
    pub async fn assignment(&self) -> Vec<TopicPartition> {
        match &self.inner {
            Inner::Flume(f) => {
                self.abandon_pending();
                f.assignment().await
            }
            Inner::Kafka(k) => k.assignment(),
        }
    }

    /// The current generation (-1 before the first join); with
    /// [`GroupProtocol::Consumer`](crate::GroupProtocol::Consumer) the member
    /// epoch (0 while joining).
    pub async fn generation(&self) -> i32 {
        match &self.inner {
            Inner::Flume(f) => {
                self.abandon_pending();
                f.generation().await
            }
            Inner::Kafka(k) => k.generation(),
        }
    }

    /// This member's id.
    pub async fn member_id(&self) -> String {
        match &self.inner {
            Inner::Flume(f) => {
                self.abandon_pending();
                f.member_id().await
            }
            Inner::Kafka(k) => k.member_id(),
        }
    }

    /// The next record; `None` never happens while the consumer is open.
    ///
    /// # Cancel safety
    /// A `recv` dropped half-way (a timeout, a `select!`) leaves its work
    /// (a fetch, a join) to the next `recv` or stream poll, which picks it
    /// up where it stopped; `commit`, `commit_processed` and `close` abandon
    /// it instead (a fetch is then sent again, a join again).
    pub async fn recv(&mut self) -> Option<Result<ConsumerRecord>> {
        futures::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    fn next_future(&self) -> BoxFuture<'static, Option<Result<ConsumerRecord>>> {
        match &self.inner {
            Inner::Flume(f) => f.next(),
            Inner::Kafka(k) => {
                let k = Arc::clone(k);
                async move { k.next().await }.boxed()
            }
        }
    }

    /// Commits `record.offset + 1` for its partition.
    ///
    /// # Errors
    /// ILLEGAL_GENERATION / UNKNOWN_MEMBER after a rebalance (the record's
    /// partition may belong to another member now; it will be redelivered there).
    pub async fn commit(&self, record: &ConsumerRecord) -> Result<()> {
        self.abandon_pending();
        match &self.inner {
            Inner::Flume(f) => f.commit(record).await,
            Inner::Kafka(k) => k.commit(record).await,
        }
    }

    /// Commits every record handed out so far.
    ///
    /// # Errors
    /// As [`GroupConsumer::commit`].
    pub async fn commit_processed(&self) -> Result<()> {
        self.abandon_pending();
        match &self.inner {
            Inner::Flume(f) => f.commit_processed().await,
            Inner::Kafka(k) => k.commit_processed().await,
        }
    }

    /// Commits (auto-commit mode), leaves the group so the others rebalance at once, and stops heartbeats.
    ///
    /// # Errors
    /// A failed final commit (the group is left regardless).
    pub async fn close(self) -> Result<()> {
        self.abandon_pending();
        match &self.inner {
            Inner::Flume(f) => f.close().await,
            Inner::Kafka(k) => k.close().await,
        }
    }
}

// No field is pinned in place: the pending future is boxed.
impl Unpin for GroupConsumer {}

impl Stream for GroupConsumer {
    type Item = Result<ConsumerRecord>;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let fresh = if lock(&this.pending).is_none() {
            Some(this.next_future())
        } else {
            None
        };
        let slot = this
            .pending
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let fut = slot
            .get_or_insert_with(|| fresh.unwrap_or_else(|| futures::future::ready(None).boxed()));
        match fut.as_mut().poll(cx) {
            Poll::Ready(r) => {
                *slot = None;
                Poll::Ready(r)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

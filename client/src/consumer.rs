//! [`PartitionConsumer`], the facade: a stream of one partition's records,
//! by long-poll fetch, over Flume's protocol (`crate::flume::consumer`) or
//! from the partition's leader in a Kafka cluster (`crate::kafka::consumer`).

use std::collections::VecDeque;
use std::sync::Arc;

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::{FutureExt, Stream};

use flume_protocol::record::Record;

use crate::error::{Error, Result};
use crate::flume::conn::Client;
use crate::flume::consumer::FlumeFetcher;
use crate::kafka::consumer::KafkaPartition;
use crate::types::connection::ConnectionConfig;
use crate::types::consumer::{FetchConfig, StartOffset};
use crate::types::endpoint::{endpoint, Endpoint};

/// Reads one partition from a start offset, as a [`Stream`] of records (or
/// one fetch at a time with [`PartitionConsumer::poll_batch`]).
///
/// The stream never ends: an error (a lost connection, an unknown topic) is
/// one item, and the next poll fetches again from the same position, as
/// [`GroupConsumer`](crate::GroupConsumer) does.
///
/// ```
/// # flume_rt::block_on(async {
/// # let dir = tempfile::tempdir().unwrap();
/// # let mut cfg = flume_broker::BrokerConfig::new(dir.path());
/// # cfg.listen = "127.0.0.1:0".into();
/// # let broker = flume_broker::Broker::start(cfg).await.unwrap();
/// # let addr = broker.local_addr().to_string();
/// use futures::StreamExt;
/// use flume_client::{PartitionConsumer, Producer, StartOffset};
///
/// let producer = Producer::connect(&addr).await?;
/// let sent = producer.send("orders", Some(b"user-1"), b"widget").await?;
///
/// let mut consumer =
///     PartitionConsumer::connect(&addr, "orders", sent.partition, StartOffset::Earliest).await?;
/// let record = consumer.next().await.expect("the stream is open")?;
/// assert_eq!(record.payload(), b"widget");
/// # broker.shutdown().await;
/// # Ok::<(), flume_client::Error>(())
/// # }).unwrap();
/// ```
pub struct PartitionConsumer {
    /// `None` while a fetch is in flight in `pending` (it owns the fetcher).
    fetcher: Option<Fetcher>,
    pending: Option<BoxFuture<'static, (Fetcher, Result<Vec<Record>>)>>,
    buffer: VecDeque<Record>,
    next: Option<u64>,
    high_watermark: i64,
}

impl std::fmt::Debug for PartitionConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionConsumer")
            .field("next", &self.next)
            .field("buffered", &self.buffer.len())
            .finish_non_exhaustive()
    }
}

/// The transport of a [`PartitionConsumer`]: what one fetch needs, moved
/// into the fetch future while it runs.
enum Fetcher {
    Flume(FlumeFetcher),
    Kafka(KafkaPartition),
}

impl Fetcher {
    async fn fetch(&mut self) -> Result<Vec<Record>> {
        match self {
            Fetcher::Flume(f) => f.fetch().await,
            Fetcher::Kafka(k) => k.fetch().await,
        }
    }

    fn position(&self) -> Option<u64> {
        match self {
            Fetcher::Flume(f) => f.position(),
            Fetcher::Kafka(k) => k.position(),
        }
    }

    fn high_watermark(&self) -> i64 {
        match self {
            Fetcher::Flume(f) => f.high_watermark(),
            Fetcher::Kafka(k) => k.high_watermark(),
        }
    }
}

impl PartitionConsumer {
    /// Connects and prepares to read `topic`/`partition` from `start`.
    ///
    /// # Errors
    /// [`Error::Connect`].
    pub async fn connect(
        addr: &str,
        topic: &str,
        partition: i32,
        start: StartOffset,
    ) -> Result<Self> {
        Self::connect_with(
            addr,
            topic,
            partition,
            start,
            FetchConfig::default(),
            ConnectionConfig::default(),
        )
        .await
    }

    /// Connects with fetch and connection settings (TLS, credentials).
    /// `addr` may be `kafka://host:port[,host:port…]`: the partition is then
    /// read from its leader in a Kafka cluster.
    ///
    /// # Errors
    /// [`Error::Connect`], [`Error::Tls`], [`Error::Auth`].
    pub async fn connect_with(
        addr: &str,
        topic: &str,
        partition: i32,
        start: StartOffset,
        fetch: FetchConfig,
        connection: ConnectionConfig,
    ) -> Result<Self> {
        let fetcher = match endpoint(addr)? {
            Endpoint::Flume(addr) => {
                let client = Arc::new(Client::connect(addr, connection).await?);
                Fetcher::Flume(FlumeFetcher::new(client, topic, partition, start, fetch))
            }
            Endpoint::Kafka(brokers) => Fetcher::Kafka(
                KafkaPartition::connect(brokers, connection, topic, partition, start, fetch)
                    .await?,
            ),
        };
        Ok(Self::over(fetcher))
    }

    /// Reads over an existing [`crate::lowlevel::Client`] (Flume's protocol), so consumers of
    /// several partitions can share one connection.
    pub fn with_client(
        client: Arc<Client>,
        topic: &str,
        partition: i32,
        start: StartOffset,
        fetch: FetchConfig,
    ) -> Self {
        Self::over(Fetcher::Flume(FlumeFetcher::new(
            client, topic, partition, start, fetch,
        )))
    }

    fn over(fetcher: Fetcher) -> Self {
        PartitionConsumer {
            next: fetcher.position(),
            high_watermark: fetcher.high_watermark(),
            fetcher: Some(fetcher),
            pending: None,
            buffer: VecDeque::new(),
        }
    }

    /// The next offset this consumer will fetch, once known.
    pub fn position(&self) -> Option<u64> {
        self.next
    }

    /// The log end offset seen in the last fetch.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// Fetches once (waiting up to `max_wait`) and returns the records, possibly none.
    ///
    /// # Errors
    /// Connection failures and broker errors (UNKNOWN_TOPIC, OFFSET_OUT_OF_RANGE, ...).
    ///
    /// # Cancel safety
    /// Dropping the future half-way loses nothing: the fetch it started is
    /// finished by the next call (or the stream).
    pub async fn poll_batch(&mut self) -> Result<Vec<Record>> {
        if !self.buffer.is_empty() {
            return Ok(self.buffer.drain(..).collect());
        }
        futures::future::poll_fn(|cx| self.poll_fetch(cx)).await
    }

    fn poll_fetch(&mut self, cx: &mut Context<'_>) -> Poll<Result<Vec<Record>>> {
        let pending = match self.pending.take() {
            Some(p) => p,
            None => {
                let Some(mut f) = self.fetcher.take() else {
                    return Poll::Ready(Err(Error::Closed));
                };
                async move {
                    let r = f.fetch().await;
                    (f, r)
                }
                .boxed()
            }
        };
        let pending = self.pending.insert(pending);
        let (f, r) = futures::ready!(pending.as_mut().poll(cx));
        self.pending = None;
        self.next = f.position();
        self.high_watermark = f.high_watermark();
        self.fetcher = Some(f);
        Poll::Ready(r)
    }
}

impl Stream for PartitionConsumer {
    type Item = Result<Record>;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(r) = this.buffer.pop_front() {
                return Poll::Ready(Some(Ok(r)));
            }
            match futures::ready!(this.poll_fetch(cx)) {
                Ok(batch) => this.buffer.extend(batch),
                Err(e) => return Poll::Ready(Some(Err(e))),
            }
        }
    }
}

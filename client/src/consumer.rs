//! [`PartitionConsumer`]: a stream of one partition's records, by long-poll fetch.

use std::collections::VecDeque;
use std::sync::Arc;

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::{FutureExt, Stream};

use crate::conn::Client;
use crate::error::{Error, Result};
use crate::types::connection::ConnectionConfig;
use crate::types::consumer::{FetchConfig, StartOffset};
use flume_protocol::record::{self, Record};
use flume_protocol::{ErrorCode, FetchPartition, FetchRequest};

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

/// What one fetch needs; moved into the fetch future while it runs.
struct Fetcher {
    /// Kafka's protocol instead of Flume's (a `kafka://` address): the
    /// fields below but `next` and `high_watermark` are then unused.
    kafka: Option<crate::kafka::consumer::KafkaPartition>,
    client: Arc<Client>,
    topic: String,
    partition: i32,
    start: StartOffset,
    next: Option<u64>,
    fetch: FetchConfig,
    high_watermark: i64,
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
        let addr = match crate::types::endpoint::endpoint(addr)? {
            crate::types::endpoint::Endpoint::Flume(a) => a,
            crate::types::endpoint::Endpoint::Kafka(brokers) => {
                let k = crate::kafka::consumer::KafkaPartition::connect(
                    brokers,
                    connection.clone(),
                    topic,
                    partition,
                    start,
                    fetch.clone(),
                )
                .await?;
                let mut c = Self::with_client(
                    Arc::new(Client::new("kafka", connection)),
                    topic,
                    partition,
                    start,
                    fetch,
                );
                if let Some(f) = c.fetcher.as_mut() {
                    f.kafka = Some(k);
                }
                return Ok(c);
            }
        };
        let client = Arc::new(Client::connect(addr, connection).await?);
        Ok(Self::with_client(client, topic, partition, start, fetch))
    }

    /// Reads over an existing [`crate::lowlevel::Client`], so consumers of
    /// several partitions can share one connection.
    pub fn with_client(
        client: Arc<Client>,
        topic: &str,
        partition: i32,
        start: StartOffset,
        fetch: FetchConfig,
    ) -> Self {
        let next = match start {
            StartOffset::At(o) => Some(o),
            _ => None,
        };
        PartitionConsumer {
            fetcher: Some(Fetcher {
                kafka: None,
                client,
                topic: topic.to_owned(),
                partition,
                start,
                next,
                fetch,
                high_watermark: -1,
            }),
            pending: None,
            buffer: VecDeque::new(),
            next,
            high_watermark: -1,
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
        self.next = f.next;
        self.high_watermark = f.high_watermark;
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

impl Fetcher {
    async fn fetch(&mut self) -> Result<Vec<Record>> {
        if let Some(k) = self.kafka.as_mut() {
            return k.fetch(&mut self.next, &mut self.high_watermark).await;
        }
        let offset = match self.next {
            Some(o) => o,
            None => self.resolve_start().await?,
        };
        let req = FetchRequest {
            max_wait_ms: i32::try_from(self.fetch.max_wait.as_millis()).unwrap_or(i32::MAX),
            min_bytes: 1,
            max_bytes: self.fetch.max_bytes,
            partitions: vec![FetchPartition {
                topic: self.topic.clone(),
                partition: self.partition,
                offset: i64::try_from(offset).unwrap_or(i64::MAX),
                max_bytes: self.fetch.partition_max_bytes,
            }],
        };
        let resp = self
            .client
            .call_with_extra(&req, self.fetch.max_wait)
            .await?;
        let Some(p) = resp.partitions.into_iter().next() else {
            return Ok(Vec::new());
        };
        if !p.error.is_ok() {
            return Err(Error::broker(
                p.error,
                format!("{}/{} at offset {offset}", self.topic, self.partition),
            ));
        }
        self.high_watermark = p.high_watermark;
        let records: Vec<Record> = record::decode_all(&p.records)?
            .into_iter()
            .filter(|r| r.offset >= offset)
            .collect();
        if let Some(last) = records.last() {
            self.next = Some(last.offset + 1);
        }
        Ok(records)
    }

    async fn resolve_start(&mut self) -> Result<u64> {
        let meta = self
            .client
            .call(&flume_protocol::MetadataRequest {
                topics: vec![self.topic.clone()],
            })
            .await?;
        let t = meta
            .topics
            .into_iter()
            .next()
            .ok_or_else(|| Error::broker(ErrorCode::UnknownTopic, self.topic.clone()))?;
        if !t.error.is_ok() {
            return Err(Error::broker(t.error, self.topic.clone()));
        }
        let p = t
            .partitions
            .iter()
            .find(|p| p.partition == self.partition)
            .ok_or_else(|| {
                Error::broker(
                    ErrorCode::UnknownPartition,
                    format!("{}/{}", self.topic, self.partition),
                )
            })?;
        let o = match self.start {
            StartOffset::Earliest => p.log_start,
            StartOffset::Latest => p.log_end,
            StartOffset::At(o) => i64::try_from(o).unwrap_or(i64::MAX),
        };
        let o = u64::try_from(o).unwrap_or(0);
        self.next = Some(o);
        Ok(o)
    }
}

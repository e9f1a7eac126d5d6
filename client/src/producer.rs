//! [`Producer`], the facade: one API over two transports, chosen by the
//! address (`crate::types::endpoint`):
//! - `host:port` (or `flume://`): Flume's protocol, `crate::flume::producer`
//!   (batching per partition, one sender task, direct writes when idle).
//! - `kafka://host:port[,host:port…]`: a Kafka cluster,
//!   `crate::kafka::producer` (routing and batching in the client,
//!   idempotent by default).
//!
//! The settings, records and acknowledgements are the transports' common
//! types (`crate::types`).

use bytes::Bytes;

use crate::error::Result;
use crate::flume::producer::FlumeProducer;
use crate::kafka::producer::KafkaProducer;
use crate::types::delivery::Delivery;
use crate::types::endpoint::{endpoint, Endpoint};
use crate::types::producer::{ProducerConfig, ProducerRecord, RecordMetadata};

/// A batching producer. Cheap to share behind an `Arc`; `send` takes `&self`.
///
/// With a `kafka://host:port[,host:port…]` address it produces to a Kafka
/// cluster (`crate::kafka::producer`): the same calls, routed and batched
/// in the client, idempotent by default.
pub struct Producer {
    inner: Inner,
}

/// The transport behind a [`Producer`].
enum Inner {
    Flume(FlumeProducer),
    Kafka(KafkaProducer),
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            Inner::Flume(p) => p.fmt(f),
            Inner::Kafka(k) => f.debug_struct("Producer").field("kafka", k).finish(),
        }
    }
}

impl Producer {
    /// Connects with default settings.
    ///
    /// # Errors
    /// [`Error::Connect`](crate::Error::Connect) when the broker cannot be reached.
    pub async fn connect(addr: &str) -> Result<Self> {
        Self::with_config(addr, ProducerConfig::default()).await
    }

    /// Connects with explicit settings.
    ///
    /// # Errors
    /// [`Error::Connect`](crate::Error::Connect) when the broker cannot be reached.
    pub async fn with_config(addr: &str, mut config: ProducerConfig) -> Result<Self> {
        config.max_in_flight = config.max_in_flight.max(1);
        config.connection.max_in_flight = config.connection.max_in_flight.max(config.max_in_flight);
        let inner = match endpoint(addr)? {
            Endpoint::Flume(addr) => Inner::Flume(FlumeProducer::connect(addr, config).await?),
            Endpoint::Kafka(brokers) => {
                Inner::Kafka(KafkaProducer::connect(brokers, config).await?)
            }
        };
        Ok(Producer { inner })
    }

    /// Sends a record and waits for the broker's acknowledgement.
    ///
    /// # Errors
    /// Connection failures, broker errors (QUEUE_FULL, RECORD_TOO_LARGE, ...),
    /// [`Error::Closed`](crate::Error::Closed).
    pub async fn send(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: &[u8],
    ) -> Result<RecordMetadata> {
        self.send_record(ProducerRecord {
            topic: topic.to_owned(),
            key: key.map(Bytes::copy_from_slice),
            value: Some(Bytes::copy_from_slice(value)),
            ..ProducerRecord::default()
        })
        .await
    }

    /// Sends a tombstone for `key` (a null value: a delete of the key on a
    /// compacted topic) and waits for the acknowledgement.
    ///
    /// # Errors
    /// As [`Producer::send`].
    pub async fn send_tombstone(&self, topic: &str, key: &[u8]) -> Result<RecordMetadata> {
        self.send_record(ProducerRecord::tombstone(
            topic,
            Bytes::copy_from_slice(key),
        ))
        .await
    }

    /// Sends a record with headers, partition or timestamp.
    ///
    /// # Errors
    /// As [`Producer::send`].
    pub async fn send_record(&self, rec: ProducerRecord) -> Result<RecordMetadata> {
        match &self.inner {
            Inner::Flume(p) => p.send_record(rec).await,
            Inner::Kafka(k) => k.enqueue(rec, k.waits_for_room()).await?.await,
        }
    }

    /// Hands a record to the producer and returns once it is buffered
    /// (waiting for room, unless [`ProducerConfig::fail_when_full`]); the
    /// returned [`Delivery`] resolves to its acknowledgement. This is how one
    /// task keeps many records in flight: records enqueued one after another
    /// keep their order per partition.
    ///
    /// ```no_run
    /// # async fn run(producer: &flume_client::Producer) -> flume_client::Result<()> {
    /// use flume_client::ProducerRecord;
    /// let mut deliveries = Vec::new();
    /// for i in 0..1000 {
    ///     deliveries.push(producer.enqueue(ProducerRecord::new("events", format!("{i}"))).await?);
    /// }
    /// for d in deliveries {
    ///     d.await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Closed`](crate::Error::Closed), [`Error::BufferFull`](crate::Error::BufferFull)
    /// (with `fail_when_full`), an empty topic, a record above
    /// `max_record_bytes` (RECORD_TOO_LARGE).
    pub async fn enqueue(&self, rec: ProducerRecord) -> Result<Delivery> {
        match &self.inner {
            Inner::Flume(p) => p.enqueue(rec).await,
            Inner::Kafka(k) => k.enqueue(rec, k.waits_for_room()).await,
        }
    }

    /// Waits until every record sent before the call is acknowledged (or failed).
    pub async fn flush(&self) {
        match &self.inner {
            Inner::Flume(p) => p.flush().await,
            Inner::Kafka(k) => k.flush().await,
        }
    }

    /// Flushes, then stops the sender task and closes the connection.
    pub async fn close(&self) {
        match &self.inner {
            Inner::Flume(p) => p.close().await,
            Inner::Kafka(k) => k.close().await,
        }
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        match &self.inner {
            Inner::Flume(p) => p.shut(),
            Inner::Kafka(k) => k.shut(),
        }
    }
}

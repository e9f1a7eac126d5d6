//! What a producer is given: its settings ([`ProducerConfig`]), records
//! ([`ProducerRecord`]) and where they landed ([`RecordMetadata`]), for
//! both transports.

use std::time::Duration;

use bytes::Bytes;
pub use flume_protocol::kafka_batch::Compression;
use flume_protocol::record::{self, Header};

pub use crate::types::connection::ConnectionConfig;
pub use crate::types::partitioner::Partitioner;

/// Producer settings: start from [`ProducerConfig::default`] and change what
/// you need with the builder methods.
///
/// ```
/// use std::time::Duration;
/// use flume_client::ProducerConfig;
///
/// let config = ProducerConfig::default()
///     .linger(Duration::from_millis(5))
///     .buffer_max_bytes(64 << 20);
/// assert_eq!(config.linger, Duration::from_millis(5));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProducerConfig {
    /// Extra wait to fill batches before sending (0: send what is there now).
    pub linger: Duration,
    /// A batch this large is sent at once; also the most bytes per (topic, partition) per request.
    pub batch_max_bytes: usize,
    /// Most bytes of records waiting in the client.
    pub buffer_max_bytes: usize,
    /// When the buffer is full, fail a send at once with [`Error::BufferFull`]
    /// instead of waiting for room (the default is to wait).
    pub fail_when_full: bool,
    /// Most PRODUCE requests in flight.
    pub max_in_flight: usize,
    /// Largest record, counting its 16-byte header: larger ones fail at once
    /// with RECORD_TOO_LARGE. The default is the broker's default
    /// `max_record_bytes` (1 MiB); keep the two equal.
    pub max_record_bytes: usize,
    /// Largest PRODUCE request: batches of several partitions (or several
    /// batches of one) share a request up to this size (a single batch may
    /// exceed it). Always kept 64 KiB under `connection.max_frame_bytes`.
    pub request_max_bytes: usize,
    /// Connection settings.
    pub connection: ConnectionConfig,
    /// Kafka only (a `kafka://` address): the acknowledgement a send waits
    /// for (default [`RequiredAcks::All`]). A Flume broker acknowledges once
    /// the records are in its log, whatever this says.
    pub acks: RequiredAcks,
    /// Kafka only: idempotence (default on): retries after a leader change
    /// or a lost connection neither duplicate nor reorder records. Needs
    /// `acks` [`RequiredAcks::All`].
    pub idempotence: bool,
    /// Kafka only: the codec of record batches (default none; lz4 and zstd
    /// are the fast ones). A Flume broker stores records uncompressed.
    pub compression: Compression,
    /// Kafka only: how a keyed record's partition is chosen (default
    /// [`Partitioner::Fnv1a`], Flume's, so keys land where they do on a
    /// Flume broker; [`Partitioner::Murmur2`] co-partitions with the Java
    /// client). A Flume broker routes by FNV-1a itself.
    pub partitioner: Partitioner,
    /// Kafka only: how long a record may wait for its acknowledgement,
    /// retries included (Kafka's `delivery.timeout.ms`, default 120 s).
    pub delivery_timeout: Duration,
}

/// The acknowledgement a Kafka broker sends a produce after (Kafka's
/// `acks`); see [`ProducerConfig::acks`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RequiredAcks {
    /// No answer at all (`acks=0`): the send completes once written, with
    /// offset -1.
    None,
    /// The leader has the records (`acks=1`).
    Leader,
    /// Every in-sync replica has them (`acks=all`, the default).
    #[default]
    All,
}

impl RequiredAcks {
    /// Kafka's number for it (0, 1, -1).
    pub fn code(self) -> i16 {
        match self {
            RequiredAcks::None => 0,
            RequiredAcks::Leader => 1,
            RequiredAcks::All => -1,
        }
    }
}

impl std::str::FromStr for RequiredAcks {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "0" => Ok(RequiredAcks::None),
            "1" => Ok(RequiredAcks::Leader),
            "all" | "-1" => Ok(RequiredAcks::All),
            _ => Err(format!("acks must be 0, 1 or all, not {s:?}")),
        }
    }
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            linger: Duration::ZERO,
            batch_max_bytes: 1024 * 1024,
            buffer_max_bytes: 32 * 1024 * 1024,
            fail_when_full: false,
            max_in_flight: 8,
            max_record_bytes: record::DEFAULT_MAX_RECORD_BYTES,
            request_max_bytes: 4 * 1024 * 1024,
            connection: ConnectionConfig::default(),
            acks: RequiredAcks::All,
            idempotence: true,
            compression: Compression::None,
            partitioner: Partitioner::Fnv1a,
            delivery_timeout: Duration::from_secs(120),
        }
    }
}

impl ProducerConfig {
    /// Sets [`ProducerConfig::linger`].
    #[must_use]
    pub fn linger(mut self, d: Duration) -> Self {
        self.linger = d;
        self
    }
    /// Sets [`ProducerConfig::batch_max_bytes`].
    #[must_use]
    pub fn batch_max_bytes(mut self, n: usize) -> Self {
        self.batch_max_bytes = n;
        self
    }
    /// Sets [`ProducerConfig::buffer_max_bytes`].
    #[must_use]
    pub fn buffer_max_bytes(mut self, n: usize) -> Self {
        self.buffer_max_bytes = n;
        self
    }
    /// Sets [`ProducerConfig::fail_when_full`].
    #[must_use]
    pub fn fail_when_full(mut self, on: bool) -> Self {
        self.fail_when_full = on;
        self
    }
    /// Sets [`ProducerConfig::max_in_flight`].
    #[must_use]
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n;
        self
    }
    /// Sets [`ProducerConfig::max_record_bytes`].
    #[must_use]
    pub fn max_record_bytes(mut self, n: usize) -> Self {
        self.max_record_bytes = n;
        self
    }
    /// Sets [`ProducerConfig::request_max_bytes`].
    #[must_use]
    pub fn request_max_bytes(mut self, n: usize) -> Self {
        self.request_max_bytes = n;
        self
    }
    /// Sets [`ProducerConfig::connection`].
    #[must_use]
    pub fn connection(mut self, c: ConnectionConfig) -> Self {
        self.connection = c;
        self
    }
    /// Sets [`ProducerConfig::acks`].
    #[must_use]
    pub fn acks(mut self, a: RequiredAcks) -> Self {
        self.acks = a;
        self
    }
    /// Sets [`ProducerConfig::idempotence`].
    #[must_use]
    pub fn idempotence(mut self, on: bool) -> Self {
        self.idempotence = on;
        self
    }
    /// Sets [`ProducerConfig::compression`].
    #[must_use]
    pub fn compression(mut self, c: Compression) -> Self {
        self.compression = c;
        self
    }
    /// Sets [`ProducerConfig::partitioner`].
    #[must_use]
    pub fn partitioner(mut self, p: Partitioner) -> Self {
        self.partitioner = p;
        self
    }
    /// Sets [`ProducerConfig::delivery_timeout`].
    #[must_use]
    pub fn delivery_timeout(mut self, d: Duration) -> Self {
        self.delivery_timeout = d;
        self
    }
}

/// Where an acknowledged record landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
}

/// A record to send with [`Producer::send_record`] or [`Producer::enqueue`]:
/// a topic and a value, plus whichever of key, headers, partition and
/// timestamp you set.
///
/// ```
/// use flume_client::ProducerRecord;
///
/// let rec = ProducerRecord::new("orders", "widget")
///     .key("user-123")
///     .header("trace", "abc")
///     .partition(2)
///     .timestamp(1_700_000_000_000);
/// assert_eq!(rec.topic(), "orders");
/// ```
#[derive(Debug, Clone, Default)]
pub struct ProducerRecord {
    pub(crate) topic: String,
    pub(crate) key: Option<Bytes>,
    /// `None`: a tombstone (a null value).
    pub(crate) value: Option<Bytes>,
    pub(crate) headers: Vec<Header>,
    pub(crate) partition: Option<i32>,
    pub(crate) timestamp: Option<i64>,
}

impl ProducerRecord {
    /// A record of `value` for `topic`, with no key (the broker picks the partition).
    pub fn new(topic: impl Into<String>, value: impl Into<Bytes>) -> Self {
        ProducerRecord {
            topic: topic.into(),
            value: Some(value.into()),
            ..ProducerRecord::default()
        }
    }

    /// A tombstone for `key` in `topic`: a record with a null value, which
    /// deletes the key on a compacted topic (distinct from an empty value).
    pub fn tombstone(topic: impl Into<String>, key: impl Into<Bytes>) -> Self {
        ProducerRecord {
            topic: topic.into(),
            key: Some(key.into()),
            ..ProducerRecord::default()
        }
    }
    /// A record whose value may be null (`None`), as Kafka's records are.
    pub fn nullable(topic: impl Into<String>, value: Option<Bytes>) -> Self {
        ProducerRecord {
            topic: topic.into(),
            value,
            ..ProducerRecord::default()
        }
    }
    /// Sets the key, which routes the record when no partition is given.
    #[must_use]
    pub fn key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }
    /// Adds a header (headers keep their order; names may repeat).
    #[must_use]
    pub fn header(mut self, key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        self.headers.push(Header::new(key, value));
        self
    }
    /// Adds these headers after any already set.
    #[must_use]
    pub fn headers(mut self, headers: impl IntoIterator<Item = Header>) -> Self {
        self.headers.extend(headers);
        self
    }
    /// Sends to this partition instead of routing by key.
    #[must_use]
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }
    /// Sets the timestamp (ms since the Unix epoch); the default is the send time.
    #[must_use]
    pub fn timestamp(mut self, ms: i64) -> Self {
        self.timestamp = Some(ms);
        self
    }
    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Topic, key, value, headers, partition and timestamp.
    #[allow(clippy::type_complexity)]
    pub(crate) fn into_parts(
        self,
    ) -> (
        String,
        Option<Bytes>,
        Option<Bytes>,
        Vec<Header>,
        Option<i32>,
        Option<i64>,
    ) {
        (
            self.topic,
            self.key,
            self.value,
            self.headers,
            self.partition,
            self.timestamp,
        )
    }
}

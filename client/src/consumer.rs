//! [`PartitionConsumer`]: a stream of one partition's records, by long-poll fetch.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, Stream};

use crate::conn::{Client, ConnectionConfig};
use crate::error::{Error, Result};
use crate::protocol::record::{self, Record};
use crate::protocol::{ErrorCode, FetchPartition, FetchRequest};

/// Where to start reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartOffset {
    /// The oldest stored record.
    Earliest,
    /// Only records produced from now on.
    Latest,
    /// This offset.
    At(u64),
}

impl std::str::FromStr for StartOffset {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "earliest" => Ok(StartOffset::Earliest),
            "latest" => Ok(StartOffset::Latest),
            n => n
                .parse::<u64>()
                .map(StartOffset::At)
                .map_err(|_| format!("offset must be earliest, latest or a number, not {n:?}")),
        }
    }
}

/// Fetch settings shared by the consumers.
#[derive(Debug, Clone)]
pub struct FetchConfig {
    /// Longest a fetch waits on the broker for new records.
    pub max_wait: Duration,
    /// Most record bytes per partition per fetch.
    pub partition_max_bytes: i32,
    /// Most record bytes per fetch.
    pub max_bytes: i32,
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig {
            max_wait: Duration::from_millis(500),
            partition_max_bytes: 1024 * 1024,
            max_bytes: 8 * 1024 * 1024,
        }
    }
}

/// Reads one partition from a start offset.
#[derive(Debug)]
pub struct PartitionConsumer {
    client: Arc<Client>,
    topic: String,
    partition: i32,
    start: StartOffset,
    next: Option<u64>,
    buffer: VecDeque<Record>,
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
        let client = Arc::new(Client::connect(addr, ConnectionConfig::default()).await?);
        Ok(Self::with_client(
            client,
            topic,
            partition,
            start,
            FetchConfig::default(),
        ))
    }

    /// Uses an existing client.
    pub fn with_client(
        client: Arc<Client>,
        topic: &str,
        partition: i32,
        start: StartOffset,
        fetch: FetchConfig,
    ) -> Self {
        PartitionConsumer {
            client,
            topic: topic.to_owned(),
            partition,
            start,
            next: match start {
                StartOffset::At(o) => Some(o),
                _ => None,
            },
            buffer: VecDeque::new(),
            fetch,
            high_watermark: -1,
        }
    }

    /// The next offset this consumer will read, once known.
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
    pub async fn poll_batch(&mut self) -> Result<Vec<Record>> {
        if !self.buffer.is_empty() {
            return Ok(self.buffer.drain(..).collect());
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
            .call(&crate::protocol::MetadataRequest {
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

    /// The next record, waiting for one to arrive.
    ///
    /// # Errors
    /// As [`PartitionConsumer::poll_batch`].
    pub async fn recv(&mut self) -> Result<Record> {
        loop {
            if let Some(r) = self.buffer.pop_front() {
                return Ok(r);
            }
            let batch = self.poll_batch().await?;
            self.buffer.extend(batch);
        }
    }

    /// The records as a `futures::Stream`; it ends after the first error.
    pub fn into_stream(self) -> impl Stream<Item = Result<Record>> {
        stream::unfold(Some(self), |state| async move {
            let mut c = state?;
            match c.recv().await {
                Ok(r) => Some((Ok(r), Some(c))),
                Err(e) => Some((Err(e), None)),
            }
        })
    }
}

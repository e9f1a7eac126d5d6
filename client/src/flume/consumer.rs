//! The partition consumer over Flume's protocol (`crate::consumer` is the
//! facade): long-poll FETCHes of one partition from a position, the start
//! resolved from the partition's metadata.

use std::sync::Arc;

use flume_protocol::record::{self, Record};
use flume_protocol::{ErrorCode, FetchPartition, FetchRequest};

use super::conn::Client;
use crate::error::{Error, Result};
use crate::types::consumer::{FetchConfig, StartOffset};

/// One partition's reader on a Flume broker: what one fetch needs, moved
/// into the fetch future while it runs.
pub(crate) struct FlumeFetcher {
    client: Arc<Client>,
    topic: String,
    partition: i32,
    start: StartOffset,
    next: Option<u64>,
    fetch: FetchConfig,
    high_watermark: i64,
}

impl FlumeFetcher {
    /// A reader of `topic`/`partition` over `client`, from `start`.
    pub(crate) fn new(
        client: Arc<Client>,
        topic: &str,
        partition: i32,
        start: StartOffset,
        fetch: FetchConfig,
    ) -> Self {
        FlumeFetcher {
            client,
            topic: topic.to_owned(),
            partition,
            start,
            next: start.offset(),
            fetch,
            high_watermark: -1,
        }
    }

    /// The next offset to fetch, once known.
    pub(crate) fn position(&self) -> Option<u64> {
        self.next
    }

    /// The log end offset seen in the last fetch.
    pub(crate) fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// One fetch from the position (resolving the start first when unknown).
    pub(crate) async fn fetch(&mut self) -> Result<Vec<Record>> {
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

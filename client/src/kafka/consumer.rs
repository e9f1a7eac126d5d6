//! `PartitionConsumer` over Kafka: one partition read from its leader
//! through the shared fetcher (leader changes followed, out-of-range
//! positions reset to the log start or, from [`StartOffset::Latest`], the
//! log end).

use std::collections::HashMap;
use std::sync::Arc;

use super::cluster::Cluster;
use super::errors;
use super::fetch::Fetcher;
use super::offsets;
use crate::error::Result;
use crate::types::consumer::{FetchConfig, StartOffset};
use flume_protocol::record::Record;

/// One partition's reader on a Kafka cluster.
pub(crate) struct KafkaPartition {
    cluster: Arc<Cluster>,
    fetcher: Fetcher,
    topic: String,
    partition: i32,
    start: StartOffset,
    /// The next offset to fetch, once known.
    next: Option<u64>,
    /// The log end offset seen in the last fetch.
    high_watermark: i64,
}

impl KafkaPartition {
    pub(crate) async fn connect(
        brokers: Vec<String>,
        config: crate::types::connection::ConnectionConfig,
        topic: &str,
        partition: i32,
        start: StartOffset,
        fetch: FetchConfig,
    ) -> Result<Self> {
        let cluster = Cluster::connect(brokers, config).await?;
        let reset = if start == StartOffset::Latest {
            StartOffset::Latest
        } else {
            StartOffset::Earliest
        };
        Ok(KafkaPartition {
            fetcher: Fetcher::new(Arc::clone(&cluster), fetch, reset),
            cluster,
            topic: topic.to_owned(),
            partition,
            start,
            next: start.offset(),
            high_watermark: -1,
        })
    }

    /// The next offset to fetch, once known.
    pub(crate) fn position(&self) -> Option<u64> {
        self.next
    }

    /// The log end offset seen in the last fetch.
    pub(crate) fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// One fetch from the position (resolving the start first when
    /// unknown): the records, with the position and high watermark moved on.
    pub(crate) async fn fetch(&mut self) -> Result<Vec<Record>> {
        let (mut next, mut high_watermark) = (self.next, self.high_watermark);
        let r = self.fetch_from(&mut next, &mut high_watermark).await;
        self.next = next;
        self.high_watermark = high_watermark;
        r
    }

    async fn fetch_from(
        &mut self,
        next: &mut Option<u64>,
        high_watermark: &mut i64,
    ) -> Result<Vec<Record>> {
        let from = match *next {
            Some(o) => i64::try_from(o).unwrap_or(i64::MAX),
            None => {
                let ts = match self.start {
                    StartOffset::Latest => -1,
                    _ => -2,
                };
                let asked = [(self.topic.clone(), self.partition, ts)];
                let answers = offsets::list_offsets(&self.cluster, &asked).await?;
                let (_, l) = answers.into_iter().next().ok_or_else(|| {
                    errors::error(
                        errors::UNKNOWN_TOPIC_OR_PARTITION,
                        format!("{}/{}", self.topic, self.partition),
                    )
                })?;
                errors::check(l.error, || format!("{}/{}", self.topic, self.partition))?;
                *next = Some(u64::try_from(l.offset).unwrap_or(0));
                l.offset
            }
        };
        let tp = (self.topic.clone(), self.partition);
        let mut positions = HashMap::from([(tp.clone(), from)]);
        let got = self.fetcher.poll(&mut positions).await?;
        if let Some(p) = positions.get(&tp) {
            *next = Some(u64::try_from(*p).unwrap_or(0));
        }
        let mut out = Vec::new();
        for g in got {
            *high_watermark = g.high_watermark;
            out.extend(g.records);
        }
        Ok(out)
    }
}

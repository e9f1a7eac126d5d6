//! Administrative calls: topics, metadata, committed offsets and lag.

use crate::conn::{Client, ConnectionConfig};
use crate::error::{Error, Result};
use crate::protocol::{
    CreateTopicRequest, MetadataRequest, OffsetCommitRequest, OffsetFetchPartition,
    OffsetFetchRequest, PartitionOffset, TopicMetadata, TopicPartitions,
};

/// Administrative calls: create and describe topics, read and set a group's
/// committed offsets.
///
/// ```
/// # flume_rt::block_on(async {
/// # let dir = tempfile::tempdir().unwrap();
/// # let mut cfg = flume_broker::BrokerConfig::new(dir.path());
/// # cfg.listen = "127.0.0.1:0".into();
/// # let broker = flume_broker::Broker::start(cfg).await.unwrap();
/// # let addr = broker.local_addr().to_string();
/// use flume_client::{Admin, CreateTopicRequest};
///
/// let admin = Admin::connect(&addr).await?;
/// admin
///     .create_topic(CreateTopicRequest {
///         name: "orders".into(),
///         partitions: 2,
///         ..CreateTopicRequest::default()
///     })
///     .await?;
/// let topics = admin.topics(&["orders".to_string()]).await?;
/// assert_eq!(topics[0].partitions.len(), 2);
/// # broker.shutdown().await;
/// # Ok::<(), flume_client::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct Admin {
    client: Client,
}

impl Admin {
    /// Connects.
    ///
    /// # Errors
    /// [`Error::Connect`].
    pub async fn connect(addr: &str) -> Result<Self> {
        Self::connect_with(addr, ConnectionConfig::default()).await
    }

    /// Connects with `config` (timeouts, TLS).
    ///
    /// # Errors
    /// [`Error::Connect`], or [`Error::Tls`](crate::Error::Tls).
    pub async fn connect_with(addr: &str, config: ConnectionConfig) -> Result<Self> {
        Ok(Admin {
            client: Client::connect(addr, config).await?,
        })
    }

    /// Creates a topic (other settings at the broker's defaults unless set in `req`).
    ///
    /// # Errors
    /// TOPIC_ALREADY_EXISTS, INVALID_NAME, ...
    pub async fn create_topic(&self, req: CreateTopicRequest) -> Result<()> {
        let name = req.name.clone();
        self.client
            .call(&req)
            .await
            .map(|_| ())
            .map_err(|e| with_context(e, &name))
    }

    /// Every topic (or those named) with its partitions' start and end offsets.
    ///
    /// # Errors
    /// Connection failures.
    pub async fn topics(&self, names: &[String]) -> Result<Vec<TopicMetadata>> {
        Ok(self
            .client
            .call(&MetadataRequest {
                topics: names.to_vec(),
            })
            .await?
            .topics)
    }

    /// Committed offset, log start and log end per partition of `topic` for `group`.
    ///
    /// # Errors
    /// Connection failures.
    pub async fn group_offsets(
        &self,
        group: &str,
        topics: &[String],
    ) -> Result<Vec<OffsetFetchPartition>> {
        let req = OffsetFetchRequest {
            group: group.to_owned(),
            topics: topics
                .iter()
                .map(|t| TopicPartitions {
                    topic: t.clone(),
                    partitions: Vec::new(),
                })
                .collect(),
        };
        Ok(self.client.call(&req).await?.partitions)
    }

    /// Commits offsets outside group membership (allowed while the group has no members).
    ///
    /// # Errors
    /// REBALANCE_IN_PROGRESS when the group has members.
    pub async fn commit(&self, group: &str, offsets: Vec<PartitionOffset>) -> Result<()> {
        let req = OffsetCommitRequest {
            group: group.to_owned(),
            generation: -1,
            member_id: String::new(),
            offsets,
        };
        let resp = self.client.call(&req).await?;
        match resp.results.iter().find(|r| !r.error.is_ok()) {
            Some(r) => Err(Error::broker(
                r.error,
                format!("{}/{}", r.topic, r.partition),
            )),
            None => Ok(()),
        }
    }
}

fn with_context(e: Error, ctx: &str) -> Error {
    match e {
        Error::Broker {
            code,
            context: None,
        } => Error::broker(code, ctx),
        other => other,
    }
}

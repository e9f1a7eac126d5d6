//! Flume's async client SDK.
//!
//! ```
//! # flume_rt::block_on(async {
//! # let dir = tempfile::tempdir().unwrap();
//! # let mut cfg = flume_broker::BrokerConfig::new(dir.path());
//! # cfg.listen = "127.0.0.1:0".into();
//! # let broker = flume_broker::Broker::start(cfg).await.unwrap();
//! # let addr = broker.local_addr().to_string();
//! use flume_client::Producer;
//! let producer = Producer::connect(&addr).await?;
//! let meta = producer.send("orders", Some(b"user-123"), br#"{"item":"widget"}"#).await?;
//! println!("partition {} offset {}", meta.partition, meta.offset);
//! # broker.shutdown().await;
//! # Ok::<(), flume_client::Error>(())
//! # }).unwrap();
//! ```
//!
//! What you use:
//! - [`Producer`] sends records ([`Producer::send`], or [`Producer::send_record`]
//!   with a [`ProducerRecord`] for headers, partition and timestamp), batching
//!   them per partition; settings in [`ProducerConfig`].
//! - [`GroupConsumer`] (built with [`GroupConsumerBuilder`]) is a
//!   [`Stream`](futures::Stream) of [`ConsumerRecord`]s for a consumer group,
//!   with heartbeats, rebalances ([`RebalanceEvents`]) and commits.
//! - [`PartitionConsumer`] is a [`Stream`](futures::Stream) of [`Record`]s of
//!   one partition from a [`StartOffset`].
//! - [`ShareConsumer`] is a member of a share group (a queue): records of
//!   shared partitions, each acknowledged on its own ([`ShareRecord`]).
//! - [`Admin`] creates topics, reads metadata, committed offsets and lag.
//! - Every call fails with an [`Error`]; [`Error::code`] gives the broker's
//!   [`ErrorCode`] when the broker refused.
//!
//! [`lowlevel`] is the request-level client under all of these, for tools
//! that speak the wire protocol (`flume-protocol`) themselves.
//!
//! Layout (private modules), in layers that import only downwards
//! (`client/tests/layers.rs` checks it):
//! - The leaf, transport-neutral: `error` ([`Error`]), `types` (records,
//!   settings and builders' settings, offsets, rebalance events, deliveries,
//!   broker addresses), and the pieces both transports share: `tls` (TLS
//!   settings and the socket, plain or TLS, that both connections read and
//!   write through), `clock`, `join_failures`.
//! - The transports, which import the leaf and never each other: `flume`
//!   (Flume's protocol: `flume::conn`, one multiplexed connection and the
//!   reconnecting client, and over it the producer's batching and sender,
//!   the partition consumer's fetches, the group member, the share member,
//!   the admin calls) and `kafka` (Kafka's protocol to a cluster, for a
//!   `kafka://` address).
//! - The facades, one per SDK type, each holding one transport chosen by
//!   the address: `producer`, `consumer` (the partition consumer), `group`
//!   (the group consumer), `share` (the share consumer), `admin`.
//!
//! The wire format lives in the `flume-protocol` crate (no I/O) and the
//! runtime seam in `flume-rt` (the only crate that names async-std).
//!
//! Delivery is at-least-once, in order per partition.

#![warn(missing_docs)]

mod admin;
mod clock;
mod consumer;
mod error;
mod flume;
mod group;
mod join_failures;
mod kafka;
mod producer;
mod share;
mod tls;
mod types;

pub use admin::Admin;
pub use consumer::PartitionConsumer;
pub use error::{Error, Result};
pub use group::GroupConsumer;
pub use producer::Producer;
pub use share::ShareConsumer;
pub use types::connection::{BusyPoll, ConnectionConfig, Credentials, SaslMechanism};
pub use types::consumer::{FetchConfig, StartOffset};
pub use types::delivery::Delivery;
pub use types::group::{
    ConsumerRecord, GroupConsumerBuilder, GroupProtocol, RebalanceEvent, RebalanceEvents,
    TopicPartition, DEFAULT_FETCH_WAIT,
};
pub use types::producer::{
    Compression, Partitioner, ProducerConfig, ProducerRecord, RecordMetadata, RequiredAcks,
};
pub use types::share::{AckMode, AckOutcome, AcknowledgeType, ShareConsumerBuilder, ShareRecord};

/// Value types of the wire protocol that the SDK's signatures use, re-exported
/// so an SDK user needs no other crate.
pub use flume_protocol::{
    AclEntry, AlterTopicRequest, ConsumerGroupInfo, ConsumerMemberInfo, CreateTopicRequest,
    DeletedOffset, DescribeGroupResponse, ErrorCode, GroupListing, GroupMemberInfo,
    GroupOffsetInfo, Header, ListOffsetsPartition, ListedOffset, OffsetFetchPartition,
    PartitionMetadata, PartitionOffset, Record, ShareGroupDescribeResponse, ShareMemberInfo,
    SharePartitionInfo, TopicConfigValue, TopicConfigsResponse, TopicMetadata, TopicPartitions,
    TopicSettings, TransactionListing, CONFIG_SOURCE_BROKER, CONFIG_SOURCE_DEFAULT,
    CONFIG_SOURCE_TOPIC, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP,
};
pub use tls::TlsConfig;

/// The request-level client the SDK types are built on.
///
/// [`Client`](lowlevel::Client) sends any request type of the `flume-protocol`
/// crate and returns its typed response, reconnecting with backoff after a
/// failure; [`Connection`](lowlevel::Connection) is one multiplexed TCP
/// connection. Applications should not need them: they are public for tools
/// that measure or test the protocol itself (the CLI's `perf`, the end-to-end
/// tests, the benchmarks) and for sharing one connection between
/// [`PartitionConsumer`]s ([`PartitionConsumer::with_client`]).
///
/// ```
/// # flume_rt::block_on(async {
/// # let dir = tempfile::tempdir().unwrap();
/// # let mut cfg = flume_broker::BrokerConfig::new(dir.path());
/// # cfg.listen = "127.0.0.1:0".into();
/// # let broker = flume_broker::Broker::start(cfg).await.unwrap();
/// # let addr = broker.local_addr().to_string();
/// use flume_client::{lowlevel::Client, ConnectionConfig};
/// use flume_protocol::MetadataRequest;
///
/// let client = Client::connect(addr.clone(), ConnectionConfig::default()).await?;
/// let meta = client.call(&MetadataRequest { topics: vec![] }).await?;
/// assert!(meta.topics.is_empty());
/// # broker.shutdown().await;
/// # Ok::<(), flume_client::Error>(())
/// # }).unwrap();
/// ```
pub mod lowlevel {
    pub use crate::flume::conn::{Client, Connection};
}

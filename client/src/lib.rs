//! Flume's client: the wire protocol (no I/O) and the async SDK.
//!
//! ```no_run
//! # async fn run() -> flume_client::Result<()> {
//! use flume_client::Producer;
//! let producer = Producer::connect("127.0.0.1:9092").await?;
//! let meta = producer.send("orders", Some(b"user-123"), br#"{"item":"widget"}"#).await?;
//! println!("partition {} offset {}", meta.partition, meta.offset);
//! # Ok(()) }
//! ```
//!
//! Layout:
//! - [`conn`]: one multiplexed connection, and [`Client`], which reconnects.
//! - [`producer`]: [`Producer`], batching sends per partition.
//! - [`consumer`]: [`PartitionConsumer`], a stream over one partition.
//! - [`group`]: [`GroupConsumer`], group membership with heartbeats and rebalances.
//! - [`admin`]: topics, metadata, committed offsets and lag.
//!
//! The wire format lives in the `flume-protocol` crate (no I/O) and the
//! runtime seam in `flume-rt` (the only crate that names async-std).
//!
//! Delivery is at-least-once, in order per partition.

pub mod admin;
pub mod conn;
pub mod consumer;
pub mod error;
pub mod group;
pub mod producer;

use flume_protocol as protocol;
use flume_rt as rt;

pub use admin::Admin;
pub use conn::{Client, Connection, ConnectionConfig};
pub use consumer::{FetchConfig, PartitionConsumer, StartOffset};
pub use error::{Error, Result};
pub use group::{ConsumerRecord, GroupConsumer, GroupConsumerBuilder, RebalanceEvent};
pub use producer::{Producer, ProducerConfig, RecordMetadata, SendRecord};
pub use protocol::{ErrorCode, Header, Record};

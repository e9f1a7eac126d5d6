//! The SDK's Kafka client: what `Producer`, `GroupConsumer`,
//! `PartitionConsumer` and `Admin` use behind a `kafka://host:port[,host:port…]`
//! address. A plain `host:port` is Flume's own protocol (`crate::conn`).
//!
//! It speaks Apache Kafka's protocol to any cluster of brokers that do
//! (Apache Kafka, Redpanda, Flume's own Kafka listener), with the message
//! codec the broker's Kafka listener uses (`kafka-protocol`, patched in
//! `third_party/`) and the record-batch codec of `flume-protocol`, on the
//! runtime seam (`flume-rt`) like the rest of the SDK.
//!
//! Layout:
//! - `conn`: one connection to one broker (pipelined requests matched by
//!   correlation id, a reader task that fails every pending request when
//!   the connection breaks, version negotiation, SASL).
//! - `cluster`: bootstrap, the metadata cache (leaders and their epochs),
//!   one connection per broker, refresh with backoff, group coordinators.
//! - `errors`: Kafka's error codes as the SDK's `Error`.
//! - `offsets`: ListOffsets at each leader, a group's commits and committed
//!   offsets at its coordinator (shared by the admin and the consumers).
//! - `admin`: `Admin`'s calls over Kafka.
//! - `producer`: routing (the `Partitioner` of `crate::types`), batching per
//!   partition, idempotence, retries.
//! - `fetch`: one Fetch in flight per leader, shared by `consumer` (the
//!   partition consumer) and `group` (the classic group protocol), whose
//!   leader runs the pure assignors of `assignor`.
//! - `membership`: what a group consumer and its heartbeat task share.
//! - `group_consumer`: the same consumer with Kafka 4's consumer group
//!   protocol (KIP-848): ConsumerGroupHeartbeat membership and a pure
//!   reconciler; fetching, positions and commits stay `group`'s.
//! - `share`: `ShareConsumer` over Kafka's share APIs (KIP-932):
//!   ShareGroupHeartbeat at the coordinator, share sessions and ShareFetch
//!   at each leader, ShareAcknowledge.
//!
//! docs/kafka-client.md lists the APIs and versions.

pub(crate) mod admin;
pub(crate) mod assignor;
pub(crate) mod cluster;
pub(crate) mod conn;
pub(crate) mod consumer;
pub(crate) mod errors;
pub(crate) mod fetch;
pub(crate) mod group;
pub(crate) mod group_consumer;
pub(crate) mod membership;
pub(crate) mod offsets;
pub(crate) mod producer;
pub(crate) mod share;

/// A pause before asking again after a refusal that says "not now" (a
/// coordinator loading or moving): the connection's first backoff.
pub(crate) async fn backoff(cluster: &cluster::Cluster) {
    flume_rt::sleep(
        cluster
            .config()
            .backoff_initial
            .max(std::time::Duration::from_millis(10)),
    )
    .await;
}

//! Flume's own protocol: the transport behind a `host:port` (or
//! `flume://host:port`) address. It imports the leaf (`crate::types`,
//! `crate::error`, the shared `crate::tls`, `crate::clock`,
//! `crate::join_failures`) and never the Kafka transport or a facade
//! (`client/tests/layers.rs` checks it).
//!
//! Layout:
//! - `conn`: one multiplexed connection (`Connection`) and the reconnecting
//!   `Client` over it, the request-level client under everything here
//!   (public as `flume_client::lowlevel`).
//! - `producer`: batching per partition, one sender task, direct writes
//!   when idle.
//! - `consumer`: one partition's long-poll fetches.
//! - `group`: a group member (join, GROUP_FETCHes that are heartbeats, the
//!   heartbeat task, commits).
//! - `share`: a share-group member (SHARE_HEARTBEAT, SHARE_FETCH,
//!   SHARE_ACKNOWLEDGE).
//! - `admin`: the administrative calls.

pub(crate) mod admin;
pub(crate) mod conn;
pub(crate) mod consumer;
pub(crate) mod group;
pub(crate) mod producer;
pub(crate) mod share;

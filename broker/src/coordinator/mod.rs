//! The coordinator layer: what the broker keeps about its clients rather
//! than their records.
//!
//! - [`group`]: the consumer-group coordinator, a state machine per group
//!   with time passed in (joins, rebalances, generations, fencing, session
//!   expiry), for broker-assigned (Flume) and client-assigned (Kafka) groups;
//! - [`consumer`]: consumer-protocol groups (KIP-848): members with epochs,
//!   a target assignment by a server-side assignor, incremental
//!   reconciliation, time passed in;
//! - [`assignor`]: the assignors of broker-assigned groups, pure functions;
//! - [`offsets`]: committed offsets, the file ([`offsets::OffsetStore`]) and
//!   the writer task that group-commits them ([`offsets::Offsets`]);
//! - [`producer_ids`]: idempotent producers' ids, never issued twice;
//! - [`share`]: share groups (KIP-932): each share-partition's records,
//!   acquired by one member at a time and acknowledged one by one;
//! - [`txn`]: the transaction coordinator, a state machine with time passed
//!   in, and its state log ([`txn::log`]).
//!
//! It sits on the storage layer and the domain types, below the engine,
//! which owns one of each and is the only caller.

pub(crate) mod assignor;
pub(crate) mod consumer;
pub(crate) mod group;
pub(crate) mod offsets;
pub(crate) mod producer_ids;
pub(crate) mod share;
pub(crate) mod txn;

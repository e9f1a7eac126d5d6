//! The Flume broker.
//!
//! Layout:
//! - [`storage`]: the log engine (segments, sparse index, recovery, retention).
//! - [`partition`]: a log plus its bounded queue and writer task (group commit).
//! - [`group`]: the consumer-group coordinator state machine.
//! - [`offsets`]: the committed-offset store.
//! - [`config`]: broker and topic settings.
//! - [`clock`]: the injected clock (system, or manual for tests).
//! - [`domain`]: the types the engine speaks (topics, batches, offsets, members).
//! - [`engine`]: topics, produce, fetch, groups and offsets, shared by every front end.
//! - [`flume`]: the Flume protocol front end (wire <-> domain).
//! - [`conn`]: one connection as a state machine (admit, respond, wait, apply).
//! - [`server`]: the TCP server (listener, connection limit, shutdown).
//! - [`embedded`]: the in-process API, no network (the other front end).
//! - [`metrics`]: counters, latency histograms, request spans, the Prometheus scrape.
//! - [`http`]: `/metrics`, `/api/overview`, `/healthz` and the dashboard.
//! - [`kafka`]: the Kafka wire-protocol listener (second front end).

pub mod budget;
pub mod clock;
pub mod config;
pub mod coordinator;
pub mod domain;
pub mod embedded;
pub mod engine;
pub mod error;
pub mod flume;
pub mod http;
pub mod kafka;
pub mod metrics;
mod net;
pub mod partition;
pub mod security;
pub mod server;
pub mod storage;

pub use server::Broker;

pub use clock::Clock;
pub use config::{Backpressure, BrokerConfig, TopicConfig};
pub use domain::{ProduceBatch, Route};
pub use embedded::EmbeddedBroker;
pub use engine::Engine;
pub use error::BrokerError;
pub use net::allocator_trims;
pub use storage::FsyncPolicy;

/// Wall-clock milliseconds since the Unix epoch (record timestamps, retention).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

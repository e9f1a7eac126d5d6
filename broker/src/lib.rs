//! The Flume broker.
//!
//! Layout, bottom to top: a module imports only from the layers below it
//! (checked by `tests/layers.rs`).
//!
//! | Layer | Modules | What it holds |
//! |---|---|---|
//! | leaves | [`clock`], [`budget`], [`metrics`] | the injected clock; memory budgets with each connection's reserve; the counters every layer bumps |
//! | storage | [`storage`] | the log engine: segments, sparse index, recovery, retention, the data directory's lock |
//! | errors | [`error`] | [`BrokerError`] |
//! | security | [`security`] | TLS, principals, logins, ACLs and the rule of each domain action (`security::authz`), per-principal limits |
//! | settings, domain | [`config`], [`domain`] | plain settings; the types the engine speaks |
//! | partitions | [`partition`] | a log with its bounded queue, writer task (group commit) and idempotent producers' state |
//! | coordinator | `coordinator` | consumer groups (a state machine with time passed in), the assignors, committed offsets (file and writer), producer ids |
//! | engine | [`engine`] | topics, produce, fetch, groups and offsets for every front end, in the domain's terms |
//! | network | `net` | the accept loop, connection limit, TLS handshake, per-connection budgets, shutdown drain, memory trim |
//! | front ends | `flume`, [`kafka`], `http`, [`embedded`] | the Flume protocol (one module per API), Kafka's, `/metrics` and the dashboard, the in-process API |
//! | server | [`server`] | [`Broker`]: the engine and its listeners, started and stopped together |

pub mod budget;
pub mod clock;
pub mod config;
pub(crate) mod coordinator;
pub mod domain;
pub mod embedded;
pub mod engine;
pub mod error;
pub(crate) mod flume;
pub(crate) mod http;
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

/// The committed-offsets file read without changing it (`flume-cli data
/// check`); the segments are in [`storage::inspect`].
pub use coordinator::offsets::{check_offsets_file, OffsetsFileReport};
/// The share-state file read without changing it (`flume-cli data check`).
pub use coordinator::share::store::{check_share_file, ShareFileReport};

/// Every on-disk format this build reads and writes (`flume-cli --version`).
pub fn disk_formats() -> Vec<storage::inspect::DiskFormat> {
    let mut formats = storage::inspect::storage_formats();
    formats.push(coordinator::offsets::offsets_format());
    formats.push(coordinator::share::store::share_format());
    formats
}

/// Wall-clock milliseconds since the Unix epoch (record timestamps, retention).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

//! `flume-cli perf`: whole-system throughput and latency, one file per tool
//! (each with its `run`, in phases), what they share in `common.rs`. A tool
//! imports `common.rs` and the layers below (`crate::args`, `crate::common`),
//! never another tool or a command (`tests/layers.rs`).

pub mod common;
pub mod consume;
pub mod e2e;
pub mod groups;
pub mod produce;
pub mod share;

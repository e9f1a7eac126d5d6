//! The Flume broker.
//!
//! Layout:
//! - [`storage`]: the log engine (segments, sparse index, recovery, retention).

pub mod storage;

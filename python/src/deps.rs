//! The wire types and the runtime seam, from wherever the workspace keeps
//! them: today `flume_client` re-exports both. If they move into crates of
//! their own (a `flume-protocol` and a `flume-rt`), point these two lines at
//! those crates and add them to Cargo.toml; nothing else in the binding changes.

pub use flume_client::protocol;
pub use flume_client::rt;

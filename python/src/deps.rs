//! The wire types and the runtime seam, from their own crates.

pub use flume_protocol as protocol;
pub use flume_rt as rt;

//! Share groups (Kafka's KIP-932, "queues"): many members read the same
//! partitions and each record is handed to one of them at a time.
//!
//! - [`group`]: membership: who is in a share group, with which epoch, and
//!   the partitions each member reads (all of its topics', shared);
//! - [`partition`]: one share-partition's state, a state machine with time
//!   passed in: which records are acquired, by whom and until when, which
//!   are done, how often each was delivered, and the start offset below
//!   which everything is done.
//!
//! Like the rest of the coordinator layer, nothing here does I/O or reads a
//! clock: the engine feeds it the offsets it read from the log and `now`.

// The engine's share-group service and the front ends' APIs build on this
// state machine (issue 44); until they land, parts of it are used by its
// tests only.
#![allow(dead_code)]

pub(crate) mod group;
pub(crate) mod partition;

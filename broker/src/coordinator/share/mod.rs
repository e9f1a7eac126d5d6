//! Share groups (Kafka's KIP-932, "queues"): many members read the same
//! partitions and each record is handed to one of them at a time.
//!
//! - [`group`]: membership: who is in a share group, with which epoch, and
//!   the partitions each member reads (all of its topics', shared);
//! - [`partition`]: one share-partition's state, a state machine with time
//!   passed in: which records are acquired, by whom and until when, which
//!   are done, how often each was delivered, and the start offset below
//!   which everything is done.
//! - [`store`]: the share-state file, `<data>/__share_state/share.log`:
//!   each share-partition's updates appended as runs of offsets, replayed
//!   (a torn or corrupt tail cut) on open, compacted into full states.
//! - [`group_config`]: a group's own settings by Kafka's names (lock
//!   duration, delivery-count limit, where a new share-partition starts).
//! - [`session`]: share sessions, which partitions each member fetches
//!   from and the epoch its next request carries (Kafka's ShareFetch).
//! - [`writer`]: [`writer::ShareState`], the store behind a bounded queue and
//!   a writer task that group-commits, so the engine awaits a write and
//!   answers a client once its acknowledgements are stored.
//!
//! Like the rest of the coordinator layer, the state machine does no I/O and
//! reads no clock: the engine feeds it the offsets it read from the log and
//! `now`; the store and its writer do the file work.

pub(crate) mod group;
pub(crate) mod group_config;
pub(crate) mod partition;
pub(crate) mod session;
pub(crate) mod store;
pub(crate) mod writer;

//! What a Kafka group consumer (`group`) and its heartbeat task (the
//! classic protocol's, or the consumer protocol's member in
//! `group_consumer`) share: the membership, the assignment for readers
//! that must not wait, and the signals between them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use flume_rt::sync::lock;

use super::assignor::Tp;
use super::errors;

/// What the consumer and its heartbeat task share.
pub(super) struct Shared {
    /// Member id and generation (the member epoch with the consumer
    /// protocol), changed together.
    pub(super) member: Mutex<(String, i32)>,
    /// The assignment as of the last join, for readers that must not wait
    /// for the consumer's lock.
    pub(super) assignment: Mutex<Vec<Tp>>,
    pub(super) rejoin: AtomicBool,
    /// Notified when `rejoin` is set (or the consumer protocol's member has
    /// work): a waiting fetch stops waiting.
    pub(super) rebalance: event_listener::Event,
    pub(super) stop: AtomicBool,
    pub(super) stopped: event_listener::Event,
}

impl Shared {
    pub(super) fn member(&self) -> (String, i32) {
        lock(&self.member).clone()
    }

    /// Acts on a membership error about (`member`, `generation`), unless a
    /// rejoin has replaced that membership since.
    pub(super) fn fenced(&self, member: &str, generation: i32, code: i16) {
        let mut m = lock(&self.member);
        if m.0 != member || m.1 != generation {
            return;
        }
        if code == errors::UNKNOWN_MEMBER_ID {
            m.0.clear();
        }
        drop(m);
        self.rejoin.store(true, Ordering::Release);
        self.rebalance.notify(usize::MAX);
    }
}

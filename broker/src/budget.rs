//! A broker-wide budget for the memory of the requests being served.
//!
//! A PRODUCE request keeps its frame in memory until its records are written
//! (the batches are slices of the frame), so its frame is charged to the budget
//! from admission until its acknowledgement; other requests are decoded into
//! small owned values at once and hold no charge (a long poll costs nothing).
//! While the budget is spent, connections admit and read nothing more, so TCP
//! pushes back on the clients and the memory of requests in flight is bounded by
//! this setting (plus at most one frame per connection, admitted while there was
//! room) rather than by how much the clients send. Charges are released by the
//! partition writers completing requests, never by reading more, so a spent
//! budget always recovers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use event_listener::Event;

/// Bytes of requests in flight against a limit.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: usize,
    used: AtomicUsize,
    peak: AtomicUsize,
    freed: Event,
}

/// What a budget holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryUse {
    /// Bytes charged now.
    pub used: usize,
    /// Most bytes charged at once so far.
    pub peak: usize,
    /// The limit reading stops at.
    pub limit: usize,
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(MemoryBudget {
            limit,
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            freed: Event::new(),
        })
    }

    /// Charges `bytes` until the returned guard is dropped. Never waits: the
    /// bytes are already in memory.
    pub fn charge(self: &Arc<Self>, bytes: usize) -> Charge {
        let now = self.used.fetch_add(bytes, Ordering::AcqRel) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
        Charge {
            budget: Arc::clone(self),
            bytes,
        }
    }

    /// True while the charged bytes are at or above the limit.
    pub fn is_spent(&self) -> bool {
        self.used.load(Ordering::Acquire) >= self.limit
    }

    /// Waits until the charged bytes are below the limit.
    pub async fn wait_for_room(&self) {
        loop {
            if !self.is_spent() {
                return;
            }
            let listener = self.freed.listen();
            if !self.is_spent() {
                return;
            }
            listener.await;
        }
    }

    /// What the budget holds now.
    pub fn usage(&self) -> MemoryUse {
        MemoryUse {
            used: self.used.load(Ordering::Acquire),
            peak: self.peak.load(Ordering::Relaxed),
            limit: self.limit,
        }
    }
}

/// Bytes charged to a [`MemoryBudget`]; released on drop.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<MemoryBudget>,
    bytes: usize,
}

impl Drop for Charge {
    fn drop(&mut self) {
        let before = self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
        if before >= self.budget.limit && before - self.bytes < self.budget.limit {
            self.budget.freed.notify(usize::MAX);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn charges_add_up_and_release_wakes_waiters() {
        let b = MemoryBudget::new(100);
        let a = b.charge(60);
        assert!(!b.is_spent());
        assert!(b.wait_for_room().now_or_never().is_some());
        let c = b.charge(60);
        assert!(b.is_spent(), "a frame in hand is admitted past the limit");
        let mut wait = Box::pin(b.wait_for_room());
        assert!(wait.as_mut().now_or_never().is_none());
        drop(a);
        assert!(!b.is_spent());
        assert!(wait.now_or_never().is_some(), "the release woke the waiter");
        drop(c);
        assert_eq!(
            b.usage(),
            MemoryUse {
                used: 0,
                peak: 120,
                limit: 100
            }
        );
    }
}

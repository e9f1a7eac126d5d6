//! A broker-wide budget for the memory of the requests being served.
//!
//! Every request is charged from admission until its response has been
//! written: its frame, an estimate of its decoded form (which can be several
//! times the frame: a string of the wire becomes a heap allocation), and then
//! its response bytes. A PRODUCE keeps its frame (the batches are slices of
//! it) until its records are written; a FETCH parks holding only its decoded
//! request and reserves room for its records only when it completes (see
//! [`crate::engine::Engine::fetch`]). While the budget is spent,
//! connections admit and read nothing more, so TCP pushes back on the clients
//! and the memory of requests in flight is bounded by this setting (plus at
//! most one frame per connection, admitted while there was room) rather than
//! by how much the clients send.
//!
//! A spent budget always recovers without reading more: produce charges go as
//! the partition writers complete requests, parked fetches answer by their
//! capped `max_wait_ms` (with one record if the budget has no room for more),
//! parked joins by their rebalance timeout, and response charges go as the
//! responses are written (a peer that does not read is cut off after
//! `write_timeout`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use event_listener::Event;

/// Bytes of requests in flight against a limit, optionally within a parent
/// budget (a connection's share of the broker's).
#[derive(Debug)]
pub struct MemoryBudget {
    limit: usize,
    used: AtomicUsize,
    peak: AtomicUsize,
    freed: Event,
    parent: Option<Arc<MemoryBudget>>,
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
            parent: None,
        })
    }

    /// A budget of `limit` bytes within `parent`: its charges count in both,
    /// and it is spent when either is.
    pub fn within(parent: &Arc<MemoryBudget>, limit: usize) -> Arc<Self> {
        Arc::new(MemoryBudget {
            limit,
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            freed: Event::new(),
            parent: Some(Arc::clone(parent)),
        })
    }

    fn add(&self, bytes: usize) {
        let now = self.used.fetch_add(bytes, Ordering::AcqRel) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
        if let Some(p) = &self.parent {
            p.add(bytes);
        }
    }

    fn sub(&self, bytes: usize) {
        let before = self.used.fetch_sub(bytes, Ordering::AcqRel);
        if before >= self.limit && before - bytes < self.limit {
            self.freed.notify(usize::MAX);
        }
        if let Some(p) = &self.parent {
            p.sub(bytes);
        }
    }

    /// Charges `bytes` until the returned guard is dropped. Never waits: the
    /// bytes are already in memory.
    pub fn charge(self: &Arc<Self>, bytes: usize) -> Charge {
        self.add(bytes);
        Charge {
            budget: Arc::clone(self),
            bytes,
        }
    }

    /// True while the charged bytes are at or above the limit (this budget's
    /// or its parent's).
    pub fn is_spent(&self) -> bool {
        self.used.load(Ordering::Acquire) >= self.limit
            || self.parent.as_ref().is_some_and(|p| p.is_spent())
    }

    /// Waits until neither this budget nor its parent is spent.
    pub async fn wait_for_room(&self) {
        loop {
            if !self.is_spent() {
                return;
            }
            let own = self.freed.listen();
            let parent = self.parent.as_ref().map(|p| p.freed.listen());
            if !self.is_spent() {
                return;
            }
            match parent {
                Some(p) => {
                    futures::future::select(own, p).await;
                }
                None => own.await,
            }
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

impl Charge {
    /// Charges `bytes` more to the same budget, released with the rest. Never waits.
    pub fn add(&mut self, bytes: usize) {
        self.budget.add(bytes);
        self.bytes += bytes;
    }

    /// Releases what this charge holds beyond `bytes`.
    pub fn shrink_to(&mut self, bytes: usize) {
        if bytes < self.bytes {
            self.budget.sub(self.bytes - bytes);
            self.bytes = bytes;
        }
    }

    /// Bytes this charge holds.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.sub(self.bytes);
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
        let mut c = c;
        c.add(40);
        assert_eq!(c.bytes(), 100);
        assert!(b.is_spent());
        c.shrink_to(30);
        assert!(!b.is_spent());
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

    #[test]
    fn a_share_counts_in_its_parent_and_is_spent_with_it() {
        let broker = MemoryBudget::new(100);
        let conn = MemoryBudget::within(&broker, 50);
        let a = conn.charge(50);
        assert!(conn.is_spent(), "its own limit");
        assert!(!broker.is_spent());
        assert_eq!(broker.usage().used, 50);
        let mut wait = Box::pin(conn.wait_for_room());
        assert!(wait.as_mut().now_or_never().is_none());
        drop(a);
        assert!(wait.now_or_never().is_some());
        let other = broker.charge(100);
        assert!(conn.is_spent(), "the parent's limit");
        let mut wait = Box::pin(conn.wait_for_room());
        assert!(wait.as_mut().now_or_never().is_none());
        drop(other);
        assert!(
            wait.now_or_never().is_some(),
            "the parent's release wakes it"
        );
        assert_eq!(broker.usage().used, 0);
    }
}

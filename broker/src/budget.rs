//! The memory budgets of the requests being served.
//!
//! Every request is charged from admission until its response has been
//! written: its frame, an estimate of its decoded form (which can be several
//! times the frame: a string of the wire becomes a heap allocation), and then
//! its response bytes. A PRODUCE keeps its frame (the batches are slices of
//! it) until its records are written; a FETCH parks holding only its decoded
//! request, and its records are charged only as they are read, once it
//! completes (see [`crate::engine::Records::fetch`]).
//!
//! Each listener has a shared budget (`max_request_memory`), and each of its
//! connections a share of it ([`MemoryBudget::within`]: `max_connection_memory`)
//! whose first [`CONNECTION_RESERVE_BYTES`] are the connection's own: they
//! count in its share but not in the shared budget. This is the fairness rule:
//! a connection holding less than its reserve always admits its next request
//! if the request fits in what is left of the reserve, and a fetch it sent
//! reads up to what is left of it, however full the shared budget is;
//! everything beyond the reserve is admitted only while the shared budget
//! has room. So no set of connections can starve a new one, and memory is
//! bounded by the shared budget plus each open connection's reserve (plus at
//! most one request per connection admitted while there was room, and one
//! record per fetch read from a reserve: the first record of a read goes out
//! whole).
//!
//! While a connection may not admit, it reads nothing more than what it
//! watches ahead for the peer closing (as much as a reserve), so TCP pushes
//! back on the clients. A spent budget always recovers without reading more:
//! produce charges go as the partition writers complete requests, parked
//! fetches answer by their capped `max_wait_ms` and read what they return
//! only when there is room, parked joins answer by their rebalance timeout,
//! and response charges go as the responses are written (a peer that does not
//! read is cut off after `write_timeout`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use event_listener::Event;

/// The bytes of a connection's charges that are its own, outside the shared
/// budget: as much as the connection reads ahead while it may not admit, so a
/// request that fits is whole in its read buffer.
pub const CONNECTION_RESERVE_BYTES: usize = 64 * 1024;

/// Bytes of requests in flight against a limit, optionally within a parent
/// budget (a connection's share of its listener's).
#[derive(Debug)]
pub struct MemoryBudget {
    limit: usize,
    /// Of this budget's charges, the first `reserve` bytes do not count in
    /// the parent's limit (0 for a budget without a parent).
    reserve: usize,
    /// Every byte charged to this budget (and, for a parent, to the budgets
    /// within it, reserves included).
    used: AtomicUsize,
    /// The bytes counted against `limit`: for a budget within a parent all of
    /// `used`; for a parent, its children's charges beyond their reserves.
    counted: AtomicUsize,
    peak: AtomicUsize,
    shared_peak: AtomicUsize,
    freed: Event,
    parent: Option<Arc<MemoryBudget>>,
}

/// What a budget holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryUse {
    /// Bytes charged now, the connections' reserves included.
    pub used: usize,
    /// Of those, the bytes counted against the limit (beyond the reserves).
    pub shared: usize,
    /// Most bytes charged at once so far.
    pub peak: usize,
    /// Most bytes counted against the limit at once so far.
    pub shared_peak: usize,
    /// The limit admission stops at.
    pub limit: usize,
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(MemoryBudget {
            limit,
            reserve: 0,
            used: AtomicUsize::new(0),
            counted: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            shared_peak: AtomicUsize::new(0),
            freed: Event::new(),
            parent: None,
        })
    }

    /// A budget of `limit` bytes within `parent`: its charges count in both,
    /// except that its first `reserve` bytes do not count in the parent's
    /// limit. It is spent when either is; what is left of its reserve may
    /// still be charged ([`MemoryBudget::may_admit`]).
    pub fn within(parent: &Arc<MemoryBudget>, limit: usize, reserve: usize) -> Arc<Self> {
        Arc::new(MemoryBudget {
            limit,
            reserve: reserve.min(limit),
            used: AtomicUsize::new(0),
            counted: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            shared_peak: AtomicUsize::new(0),
            freed: Event::new(),
            parent: Some(Arc::clone(parent)),
        })
    }

    /// Charges `bytes`, of which `counted` count against the limit.
    fn add_counted(&self, bytes: usize, counted: usize) {
        let before = self.used.fetch_add(bytes, Ordering::AcqRel);
        let was = self.counted.fetch_add(counted, Ordering::AcqRel);
        self.peak.fetch_max(before + bytes, Ordering::Relaxed);
        self.shared_peak.fetch_max(was + counted, Ordering::Relaxed);
        if let Some(p) = &self.parent {
            p.add_counted(bytes, beyond(self.reserve, before, before + bytes));
        }
    }

    fn sub_counted(&self, bytes: usize, counted: usize) {
        let before = self.used.fetch_sub(bytes, Ordering::AcqRel);
        let was = self.counted.fetch_sub(counted, Ordering::AcqRel);
        if self.parent.is_some() {
            // Only this connection waits here: for its share or its reserve.
            self.freed.notify(usize::MAX);
        } else if was >= self.limit && was - counted < self.limit {
            self.freed.notify(usize::MAX);
        }
        if let Some(p) = &self.parent {
            p.sub_counted(bytes, beyond(self.reserve, before - bytes, before));
        }
    }

    fn add(&self, bytes: usize) {
        self.add_counted(bytes, bytes);
    }

    fn sub(&self, bytes: usize) {
        self.sub_counted(bytes, bytes);
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

    /// True while the bytes counted are at or above the limit (this budget's
    /// or its parent's).
    pub fn is_spent(&self) -> bool {
        self.counted.load(Ordering::Acquire) >= self.limit
            || self.parent.as_ref().is_some_and(|p| p.is_spent())
    }

    /// What is left of the reserve: bytes that may be charged however spent
    /// the parent is.
    pub fn reserve_left(&self) -> usize {
        self.reserve
            .saturating_sub(self.used.load(Ordering::Acquire))
    }

    /// Whether a request of `bytes` may be admitted now: while the budget
    /// is not spent (it may take it past the limit), or when it fits in what
    /// is left of the reserve.
    pub fn may_admit(&self, bytes: usize) -> bool {
        !self.is_spent() || bytes <= self.reserve_left()
    }

    /// Waits until neither this budget nor its parent is spent.
    pub async fn wait_for_room(&self) {
        self.wait_until(|b| !b.is_spent()).await;
    }

    /// Waits until a request of `bytes` may be admitted ([`MemoryBudget::may_admit`]).
    pub async fn wait_to_admit(&self, bytes: usize) {
        self.wait_until(|b| b.may_admit(bytes)).await;
    }

    async fn wait_until(&self, ready: impl Fn(&Self) -> bool) {
        loop {
            if ready(self) {
                return;
            }
            let own = self.freed.listen();
            let parent = self.parent.as_ref().map(|p| p.freed.listen());
            if ready(self) {
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
            shared: self.counted.load(Ordering::Acquire),
            peak: self.peak.load(Ordering::Relaxed),
            shared_peak: self.shared_peak.load(Ordering::Relaxed),
            limit: self.limit,
        }
    }
}

/// Of a change of a budget's charges from `from` to `to` bytes (either way),
/// the part beyond its first `reserve` bytes.
fn beyond(reserve: usize, from: usize, to: usize) -> usize {
    let (lo, hi) = if from <= to { (from, to) } else { (to, from) };
    hi.saturating_sub(reserve) - lo.saturating_sub(reserve)
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
                shared: 0,
                peak: 120,
                shared_peak: 120,
                limit: 100
            }
        );
    }

    #[test]
    fn a_share_counts_in_its_parent_and_is_spent_with_it() {
        let broker = MemoryBudget::new(100);
        let conn = MemoryBudget::within(&broker, 50, 0);
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

    #[test]
    fn a_connections_reserve_is_its_own_and_admits_however_full_the_shared_budget() {
        let shared = MemoryBudget::new(100);
        let hog = MemoryBudget::within(&shared, 1000, 10);
        let fresh = MemoryBudget::within(&shared, 1000, 10);
        // The hog's first 10 bytes are its own; the rest fills the shared budget.
        let held = hog.charge(110);
        assert_eq!(shared.usage().shared, 100);
        assert_eq!(shared.usage().used, 110);
        assert!(shared.is_spent() && hog.is_spent() && fresh.is_spent());
        assert!(!hog.may_admit(1), "the hog has used its reserve");
        // A fresh connection admits what fits in its reserve, nothing larger.
        assert!(fresh.may_admit(10) && !fresh.may_admit(11));
        let mut small = fresh.charge(6);
        assert_eq!(
            shared.usage().shared,
            100,
            "a reserve is outside the shared budget"
        );
        assert_eq!(fresh.reserve_left(), 4);
        assert!(fresh.may_admit(4) && !fresh.may_admit(5));
        // Charges past the reserve count in the shared budget.
        small.add(8);
        assert_eq!(shared.usage().shared, 104);
        let mut wait = Box::pin(fresh.wait_to_admit(10));
        assert!(wait.as_mut().now_or_never().is_none());
        drop(small);
        assert!(wait.now_or_never().is_some(), "its own release wakes it");
        assert_eq!(shared.usage().shared, 100);
        // The shared budget's release wakes a wait for more than the reserve.
        let mut wait = Box::pin(fresh.wait_to_admit(50));
        assert!(wait.as_mut().now_or_never().is_none());
        drop(held);
        assert!(wait.now_or_never().is_some());
        assert_eq!(
            shared.usage(),
            MemoryUse {
                used: 0,
                shared: 0,
                peak: 124,
                shared_peak: 104,
                limit: 100
            }
        );
    }

    #[test]
    fn partial_releases_move_the_shared_part_exactly() {
        // A charge that grows and shrinks across the reserve's edge leaves the
        // shared count where it started, whatever the order.
        let shared = MemoryBudget::new(1 << 20);
        let conn = MemoryBudget::within(&shared, 1 << 20, 100);
        let mut a = conn.charge(60);
        let mut b = conn.charge(60);
        assert_eq!(shared.usage().shared, 20);
        a.add(30);
        b.shrink_to(10);
        assert_eq!(conn.usage().used, 100);
        assert_eq!(shared.usage().shared, 0);
        a.add(5);
        assert_eq!(shared.usage().shared, 5);
        drop(b);
        assert_eq!(shared.usage().shared, 0);
        drop(a);
        assert_eq!(
            shared.usage(),
            MemoryUse {
                used: 0,
                shared: 0,
                peak: 150,
                shared_peak: 50,
                limit: 1 << 20
            }
        );
    }
}

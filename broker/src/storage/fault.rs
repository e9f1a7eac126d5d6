//! Fault injection for tests: each [`Log`](super::Log) has a [`FaultInjector`]
//! that is inert until a test arms it, so the fail-stop paths (a failed
//! write, a failed fsync) can be driven without a broken disk. Unarmed, a
//! check is one relaxed atomic load.

use std::sync::atomic::{AtomicU32, Ordering};

/// Faults armed for one log's segment files.
#[derive(Debug, Default)]
pub struct FaultInjector {
    writes: AtomicU32,
    fsyncs: AtomicU32,
    dir_fsyncs: AtomicU32,
}

impl FaultInjector {
    /// The next `n` writes of records fail with EIO after writing half of their
    /// bytes (a short write, as a full disk gives).
    pub fn fail_writes(&self, n: u32) {
        self.writes.store(n, Ordering::Release);
    }

    /// The next `n` fsyncs of segment files fail with EIO, writing nothing.
    pub fn fail_fsyncs(&self, n: u32) {
        self.fsyncs.store(n, Ordering::Release);
    }

    /// The next `n` fsyncs of the log's directory (after a segment is
    /// created) fail with EIO.
    pub fn fail_dir_fsyncs(&self, n: u32) {
        self.dir_fsyncs.store(n, Ordering::Release);
    }

    /// Faults armed and not yet consumed: (writes, fsyncs, directory fsyncs).
    pub fn armed(&self) -> (u32, u32, u32) {
        (
            self.writes.load(Ordering::Acquire),
            self.fsyncs.load(Ordering::Acquire),
            self.dir_fsyncs.load(Ordering::Acquire),
        )
    }

    /// Consumes one armed directory fsync fault.
    pub(crate) fn dir_fsync_fault(&self) -> bool {
        take(&self.dir_fsyncs)
    }

    /// Consumes one armed write fault.
    pub(crate) fn write_fault(&self) -> bool {
        take(&self.writes)
    }

    /// Consumes one armed fsync fault.
    pub(crate) fn fsync_fault(&self) -> bool {
        take(&self.fsyncs)
    }
}

fn take(n: &AtomicU32) -> bool {
    n.load(Ordering::Relaxed) != 0
        && n.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1))
            .is_ok()
}

/// The error an armed fault returns.
pub(crate) fn injected(what: &str) -> std::io::Error {
    std::io::Error::other(format!("injected {what} fault (EIO)"))
}

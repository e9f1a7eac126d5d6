//! The broker's clock: every `now` the engine feeds the group coordinator
//! (session expiry, rebalance deadlines) and retention comes from here.
//!
//! [`Clock::system`] (the default) reads the machine's clocks. [`Clock::manual`]
//! stands still until [`Clock::advance`] moves it, so a test can expire a
//! session or pass a rebalance deadline at once instead of sleeping through
//! it; [`crate::Engine::tick_now`] then runs one maintenance pass without
//! waiting for the ticker. Socket read/write timeouts, the long-poll wait and
//! the interval fsync stay on real time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A source of time; cheap to clone (clones of a manual clock share its time).
#[derive(Debug, Clone)]
pub struct Clock(Inner);

#[derive(Debug, Clone)]
enum Inner {
    System { origin: Instant },
    Manual(Arc<Manual>),
}

#[derive(Debug)]
struct Manual {
    /// Milliseconds advanced since creation.
    elapsed_ms: AtomicU64,
    /// Wall-clock milliseconds since the Unix epoch at creation.
    wall_origin_ms: i64,
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

impl Clock {
    /// The machine's clocks: a monotonic one for the coordinator, the wall
    /// clock for retention.
    pub fn system() -> Self {
        Clock(Inner::System {
            origin: Instant::now(),
        })
    }

    /// A clock that starts at the current wall time and moves only when
    /// [`Clock::advance`] is called.
    pub fn manual() -> Self {
        Clock(Inner::Manual(Arc::new(Manual {
            elapsed_ms: AtomicU64::new(0),
            wall_origin_ms: crate::now_ms(),
        })))
    }

    /// True for a [`Clock::manual`] clock.
    pub fn is_manual(&self) -> bool {
        matches!(self.0, Inner::Manual(_))
    }

    /// Moves a manual clock forward by `d` (whole milliseconds) and returns
    /// its new [`Clock::mono_ms`]. A system clock is not moved: it returns
    /// its current reading.
    pub fn advance(&self, d: Duration) -> u64 {
        match &self.0 {
            Inner::System { .. } => self.mono_ms(),
            Inner::Manual(m) => {
                let by = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
                let before = m
                    .elapsed_ms
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                        Some(v.saturating_add(by))
                    })
                    .unwrap_or_else(|v| v); // ok: the closure always returns Some
                before.saturating_add(by)
            }
        }
    }

    /// Monotonic milliseconds since the clock was made (the coordinator's time).
    pub fn mono_ms(&self) -> u64 {
        match &self.0 {
            Inner::System { origin } => {
                u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX)
            }
            Inner::Manual(m) => m.elapsed_ms.load(Ordering::Acquire),
        }
    }

    /// Wall-clock milliseconds since the Unix epoch (retention by age).
    pub fn wall_ms(&self) -> i64 {
        match &self.0 {
            Inner::System { .. } => crate::now_ms(),
            Inner::Manual(m) => m.wall_origin_ms.saturating_add(
                i64::try_from(m.elapsed_ms.load(Ordering::Acquire)).unwrap_or(i64::MAX),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced_and_clones_share_it() {
        let c = Clock::manual();
        let wall = c.wall_ms();
        assert_eq!(c.mono_ms(), 0);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(c.mono_ms(), 0, "real time does not move it");
        let d = c.clone();
        assert_eq!(d.advance(Duration::from_millis(1500)), 1500);
        assert_eq!(c.mono_ms(), 1500);
        assert_eq!(c.wall_ms(), wall + 1500);
        assert!(c.is_manual());
    }

    #[test]
    fn the_system_clock_is_not_advanced() {
        let c = Clock::system();
        let before = c.mono_ms();
        assert!(c.advance(Duration::from_secs(3600)) < before + 3_600_000);
        assert!(!c.is_manual());
        assert!(c.wall_ms() > 0);
    }
}

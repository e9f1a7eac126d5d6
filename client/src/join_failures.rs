//! A group member's failed joins in a row: how long to pause before the
//! next attempt, when to warn, and when to give up
//! ([`GroupConsumerBuilder::join_attempts`](crate::GroupConsumerBuilder::join_attempts)).
//!
//! Pure (no clock, no I/O): both protocols' group members report each
//! attempt that failed for a reason outside the group protocol's normal
//! course (the coordinator unreachable, a connection closed or timed out, a
//! coordinator that moved or is loading), and a join that succeeds. The
//! steps of a rebalance (a member id handed out, REBALANCE_IN_PROGRESS, a
//! fenced generation) are not failures.
//!
//! - Pause: `initial`, doubled after each failure up to `max`.
//! - Warning: at the [`WARN_AFTER`]th failure in a row, then at twice as many
//!   each time (3, 6, 12, ...), so a member that cannot join says so within
//!   a second or so and then ever more rarely.
//! - Giving up: at the `limit`th failure in a row, when there is a limit.

use std::time::Duration;

use crate::error::{Error, Result};
use flume_rt as rt;

/// The failure in a row that first gets a warning.
pub(crate) const WARN_AFTER: u32 = 3;

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Pause this long, then try again; `warn`: log a warning first.
    Retry {
        /// The pause.
        pause: Duration,
        /// Whether this failure gets a warning.
        warn: bool,
    },
    /// The limit is reached: the last attempt's error is the member's.
    GiveUp,
}

/// Failed joins in a row.
#[derive(Debug, Clone)]
pub(crate) struct JoinFailures {
    count: u32,
    next_warning: u32,
    limit: Option<u32>,
    initial: Duration,
    max: Duration,
}

impl JoinFailures {
    /// No failure yet; at most `limit` in a row (`None`: no limit), pauses
    /// from `initial` doubling up to `max`.
    pub(crate) fn new(limit: Option<u32>, initial: Duration, max: Duration) -> Self {
        JoinFailures {
            count: 0,
            next_warning: WARN_AFTER,
            limit,
            initial,
            max: max.max(initial),
        }
    }

    /// Counts a failed attempt and says what follows.
    pub(crate) fn failed(&mut self) -> Next {
        self.count = self.count.saturating_add(1);
        if self.limit.is_some_and(|l| self.count >= l) {
            return Next::GiveUp;
        }
        let warn = self.count == self.next_warning;
        if warn {
            self.next_warning = self.next_warning.saturating_mul(2);
        }
        let doublings = (self.count - 1).min(20);
        let pause = self.initial.saturating_mul(1 << doublings).min(self.max);
        Next::Retry { pause, warn }
    }

    /// A join succeeded: the count starts again.
    pub(crate) fn succeeded(&mut self) {
        self.count = 0;
        self.next_warning = WARN_AFTER;
    }

    /// Failures in a row so far.
    pub(crate) fn count(&self) -> u32 {
        self.count
    }
}

/// Acts on a failed attempt to join `group` at `broker` (the coordinator,
/// or the brokers asked for one): a warning when one is due, then the pause;
/// or, at the limit, the error to give up with ([`Error::JoinFailed`]).
///
/// # Errors
/// [`Error::JoinFailed`] at the limit.
pub(crate) async fn after_failure(
    failures: &mut JoinFailures,
    group: &str,
    broker: &str,
    error: Error,
) -> Result<()> {
    let attempts = failures.count().saturating_add(1);
    match failures.failed() {
        Next::GiveUp => Err(Error::JoinFailed {
            group: group.to_owned(),
            attempts,
            broker: broker.to_owned(),
            last: Box::new(error),
        }),
        Next::Retry { pause, warn } => {
            if warn {
                tracing::warn!(
                    "joining group {group} failed {attempts} times in a row (coordinator \
                     {broker}): {error}; trying again in {} ms",
                    pause.as_millis()
                );
            } else {
                tracing::debug!(%group, %broker, attempts, %error, ?pause, "join failed; again");
            }
            rt::sleep(pause).await;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn run(f: &mut JoinFailures, n: u32) -> Vec<Next> {
        (0..n).map(|_| f.failed()).collect()
    }

    #[test]
    fn pauses_double_up_to_the_maximum() {
        let mut f = JoinFailures::new(None, 100 * MS, 2000 * MS);
        let pauses: Vec<Duration> = run(&mut f, 8)
            .into_iter()
            .map(|n| match n {
                Next::Retry { pause, .. } => pause,
                Next::GiveUp => panic!("no limit"),
            })
            .collect();
        let ms: Vec<u128> = pauses.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1600, 2000, 2000, 2000]);
        // Far past the shift width, still the maximum.
        for _ in 0..100 {
            f.failed();
        }
        assert_eq!(
            f.failed(),
            Next::Retry {
                pause: 2000 * MS,
                warn: false
            }
        );
    }

    #[test]
    fn warnings_come_after_a_few_failures_then_ever_more_rarely() {
        let mut f = JoinFailures::new(None, MS, MS);
        let warned: Vec<u32> = (1..=100)
            .filter(|_| matches!(f.failed(), Next::Retry { warn: true, .. }))
            .collect();
        assert_eq!(warned, [3, 6, 12, 24, 48, 96]);
        assert_eq!(f.count(), 100);
    }

    #[test]
    fn a_success_starts_the_count_again() {
        let mut f = JoinFailures::new(Some(4), 100 * MS, 2000 * MS);
        run(&mut f, 3);
        f.succeeded();
        assert_eq!(f.count(), 0);
        assert_eq!(
            f.failed(),
            Next::Retry {
                pause: 100 * MS,
                warn: false
            }
        );
        let next: Vec<Next> = run(&mut f, 2);
        assert_eq!(
            next[1],
            Next::Retry {
                pause: 400 * MS,
                warn: true
            }
        );
    }

    #[test]
    fn the_limit_gives_up_at_that_failure() {
        let mut f = JoinFailures::new(Some(3), MS, MS);
        assert!(matches!(f.failed(), Next::Retry { .. }));
        assert!(matches!(f.failed(), Next::Retry { .. }));
        assert_eq!(f.failed(), Next::GiveUp);
        let mut one = JoinFailures::new(Some(1), MS, MS);
        assert_eq!(one.failed(), Next::GiveUp);
    }
}

//! Spinning before parking: how long a side that waits for its peer's next
//! message keeps polling (yielding to its thread's other tasks, never
//! parking the thread) before it waits for the reactor to wake it.
//!
//! Waking a parked thread costs tens of microseconds on a VM, more than a
//! whole small request; a reply that arrives within a few microseconds of
//! the request is caught far sooner by a thread that keeps polling. Spinning
//! costs a core while it lasts, so the default, [`BusyPoll::Adaptive`], spins
//! only as long as spinning has recently paid off (in the spirit of Go's
//! scheduler and Linux's adaptive busy polling): [`SpinBudget`] keeps that
//! budget, and its tests run without a clock (time is passed in).
//!
//! ```text
//! budget()            the spin for this wait: the current budget, or (once it
//!                     has fallen to zero) a probe of `max` every 16th wait
//! caught(after)       the message came `after` into the spin:
//!                     budget = max(1.25 x budget, 2 x after, 2 us), at most `max`
//! missed()            the spin ran out: budget halves; under 2 us it is zero
//! ```
//!
//! An idle peer costs at most one spin (the one after its last message); a
//! slow one costs one spin of `max` every 16 messages. A quick one keeps the
//! budget at `max` as long as fewer than about one wait in five misses (a
//! reply late because a thread was preempted on a busy machine): growing by
//! a quarter per catch and halving per miss balance at 24 % misses.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The longest adaptive spin while the process is crowded (see [`crowded`]).
pub const CROWDED_MAX: Duration = Duration::from_micros(10);

/// Connections of this process with a request waiting for its response.
static WAITING: AtomicUsize = AtomicUsize::new(0);

/// Marks a connection as waiting (one or more of its requests await their
/// responses) while it lives: create one when the connection's first waiter
/// starts, drop it when its last one ends.
#[derive(Debug)]
pub struct Waiting(());

impl Waiting {
    /// Counts one more waiting connection.
    pub fn start() -> Self {
        WAITING.fetch_add(1, Ordering::Relaxed);
        Waiting(())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        WAITING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// True when more connections of this process wait at once than it may run
/// threads (its CPU affinity and quota: `available_parallelism`). A spinning
/// waiter then holds a CPU the others' tasks, and the reactor thread that
/// wakes them, need: a producer and a consumer pinned to one CPU delay each
/// other's records by milliseconds (`perf e2e` shows it; README,
/// "Benchmarks"). Go's scheduler spins only with a processor to spare for
/// the same reason. Adaptive spins are then capped at [`CROWDED_MAX`].
pub fn crowded() -> bool {
    crowded_with(WAITING.load(Ordering::Relaxed), cpus())
}

/// [`crowded`] for `waiting` connections and `cpus` CPUs.
pub fn crowded_with(waiting: usize, cpus: usize) -> bool {
    waiting > cpus
}

fn cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

/// How a connection waits for its peer's next message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BusyPoll {
    /// Never spin: park at once.
    Off,
    /// Spin this long every time, then park.
    Fixed(Duration),
    /// Spin for as long as spinning has recently paid off, at most `max`
    /// (see [`SpinBudget`]). The default, with `max` 50 µs.
    Adaptive {
        /// The longest spin.
        max: Duration,
    },
}

impl BusyPoll {
    /// The default's longest spin: a little longer than a loopback round
    /// trip through a broker that spins too, far shorter than a wake-up
    /// costs when the peer is slow.
    pub const DEFAULT_MAX: Duration = Duration::from_micros(50);
}

impl Default for BusyPoll {
    fn default() -> Self {
        BusyPoll::Adaptive {
            max: BusyPoll::DEFAULT_MAX,
        }
    }
}

/// A fixed spin; zero is [`BusyPoll::Off`].
impl From<Duration> for BusyPoll {
    fn from(d: Duration) -> Self {
        if d.is_zero() {
            BusyPoll::Off
        } else {
            BusyPoll::Fixed(d)
        }
    }
}

/// `auto` (adaptive, up to 50 µs), `auto:N` (adaptive, up to N µs), `0`
/// (off) or `N` (a fixed spin of N µs).
impl FromStr for BusyPoll {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let micros = |v: &str| {
            v.parse::<u64>()
                .ok()
                .filter(|&n| n <= 1_000_000)
                .map(Duration::from_micros)
                .ok_or_else(|| {
                    format!("`{s}`: expected `auto`, `auto:MICROS` or MICROS (0 to 1000000)")
                })
        };
        match s {
            "auto" => Ok(BusyPoll::default()),
            _ => match s.strip_prefix("auto:") {
                Some(max) => Ok(match micros(max)? {
                    d if d.is_zero() => BusyPoll::Off,
                    max => BusyPoll::Adaptive { max },
                }),
                None => micros(s).map(BusyPoll::from),
            },
        }
    }
}

/// The form [`BusyPoll::from_str`] reads.
impl fmt::Display for BusyPoll {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BusyPoll::Off => write!(f, "0"),
            BusyPoll::Fixed(d) => write!(f, "{}", d.as_micros()),
            BusyPoll::Adaptive { max } if *max == BusyPoll::DEFAULT_MAX => write!(f, "auto"),
            BusyPoll::Adaptive { max } => write!(f, "auto:{}", max.as_micros()),
        }
    }
}

/// The spin budget of one waiting side (see the module docs). Time is passed
/// in, so it is deterministic; the caller measures its spins.
#[derive(Clone, Debug)]
pub struct SpinBudget {
    policy: BusyPoll,
    /// The adaptive budget now (unused by the other policies).
    budget: Duration,
    /// Waits since the last probe while the budget is zero.
    since_probe: u32,
}

/// Under this an adaptive budget is zero (a spin this short catches nothing
/// a yield would not).
pub const MIN_SPIN: Duration = Duration::from_micros(2);

/// With its budget at zero, an adaptive waiter spins `max` once every this
/// many waits, to find out whether spinning pays again.
pub const PROBE_EVERY: u32 = 16;

impl SpinBudget {
    /// A budget following `policy`; an adaptive one starts at its `max`.
    pub fn new(policy: BusyPoll) -> Self {
        let budget = match policy {
            BusyPoll::Off => Duration::ZERO,
            BusyPoll::Fixed(d) => d,
            BusyPoll::Adaptive { max } => max,
        };
        SpinBudget {
            policy,
            budget,
            since_probe: 0,
        }
    }

    /// The policy it follows.
    pub fn policy(&self) -> BusyPoll {
        self.policy
    }

    /// How long to spin in this wait (zero: park at once). Call it once per
    /// wait, and report a non-zero spin's outcome with [`SpinBudget::caught`]
    /// or [`SpinBudget::missed`] (or neither, when the wait was cut short).
    pub fn budget(&mut self) -> Duration {
        self.budget_within(Duration::MAX)
    }

    /// [`SpinBudget::budget`], an adaptive spin capped at `cap` (a fixed one
    /// is what its user asked for and stays as it is): see [`crowded`].
    pub fn budget_within(&mut self, cap: Duration) -> Duration {
        match self.policy {
            BusyPoll::Off => Duration::ZERO,
            BusyPoll::Fixed(d) => d,
            BusyPoll::Adaptive { max } => {
                if !self.budget.is_zero() {
                    return self.budget.min(cap);
                }
                self.since_probe += 1;
                if self.since_probe >= PROBE_EVERY {
                    self.since_probe = 0;
                    max.min(cap)
                } else {
                    Duration::ZERO
                }
            }
        }
    }

    /// The message came `after` into the spin: spinning paid. The budget
    /// grows by a quarter, or to twice that wait if that is more.
    pub fn caught(&mut self, after: Duration) {
        if let BusyPoll::Adaptive { max } = self.policy {
            self.budget = (self.budget + self.budget / 4)
                .max(after.saturating_mul(2))
                .max(MIN_SPIN)
                .min(max);
        }
    }

    /// The spin ran out before the message came: the budget halves.
    pub fn missed(&mut self) {
        if let BusyPoll::Adaptive { .. } = self.policy {
            self.budget /= 2;
            if self.budget < MIN_SPIN {
                self.budget = Duration::ZERO;
                self.since_probe = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    fn adaptive(max_us: u32) -> SpinBudget {
        SpinBudget::new(BusyPoll::Adaptive { max: US * max_us })
    }

    #[test]
    fn off_never_spins_and_fixed_always_spins_its_budget() {
        let mut off = SpinBudget::new(BusyPoll::Off);
        let mut fixed = SpinBudget::new(BusyPoll::Fixed(US * 30));
        for _ in 0..100 {
            assert_eq!(off.budget(), Duration::ZERO);
            off.caught(US);
            assert_eq!(fixed.budget(), US * 30);
            fixed.missed();
        }
        fixed.caught(US);
        assert_eq!(fixed.budget(), US * 30);
    }

    #[test]
    fn adaptive_starts_at_max_and_keeps_it_while_replies_come_in_time() {
        let mut s = adaptive(50);
        for _ in 0..1000 {
            assert_eq!(s.budget(), US * 50);
            s.caught(US * 10);
        }
    }

    #[test]
    fn adaptive_falls_to_zero_when_spinning_does_not_pay() {
        let mut s = adaptive(50);
        let mut spins = Vec::new();
        loop {
            let b = s.budget();
            if b.is_zero() {
                break;
            }
            spins.push(b.as_nanos());
            s.missed();
        }
        // 50, 25, 12.5, 6.25, 3.125 µs, then under 2 µs: zero.
        assert_eq!(spins, [50_000, 25_000, 12_500, 6_250, 3_125]);
    }

    #[test]
    fn an_idle_or_slow_peer_costs_a_probe_in_sixteen_waits() {
        let mut s = adaptive(50);
        while !s.budget().is_zero() {
            s.missed();
        }
        // Zero now: 15 waits park at once, the 16th probes with `max`.
        let mut spent = Duration::ZERO;
        for wait in 1..=(16 * 100) {
            let b = s.budget();
            if !b.is_zero() {
                assert_eq!(b, US * 50, "wait {wait}");
                spent += b;
                s.missed();
            }
        }
        // The one wait that zeroed it is counted as the first of its 16.
        assert_eq!(spent, US * 50 * 100);
    }

    #[test]
    fn a_probe_that_pays_brings_spinning_back() {
        let mut s = adaptive(50);
        while !s.budget().is_zero() {
            s.missed();
        }
        let mut waits = 1; // the wait that found it zero
        loop {
            waits += 1;
            if !s.budget().is_zero() {
                break;
            }
        }
        assert_eq!(waits, PROBE_EVERY);
        s.caught(US * 8);
        assert_eq!(s.budget(), US * 16, "twice the reply time");
        s.caught(US * 12);
        assert_eq!(s.budget(), US * 24, "grows with slower replies");
        s.caught(US * 3);
        assert_eq!(
            s.budget(),
            US * 30,
            "grows by a quarter while replies come within it"
        );
        s.caught(US * 40);
        assert_eq!(s.budget(), US * 50, "never past max");
        s.caught(Duration::ZERO);
        s.missed();
        assert_eq!(s.budget(), US * 25);
    }

    /// A reply now and then later than the spin (a preempted thread) does not
    /// stop the spinning; a peer that misses every other spin does.
    #[test]
    fn occasional_misses_keep_the_budget_frequent_ones_zero_it() {
        let mut s = adaptive(50);
        for wait in 0..10_000 {
            assert!(s.budget() >= US * 12, "wait {wait}: {:?}", s.budget());
            if wait % 8 == 7 {
                s.missed();
            } else {
                s.caught(US * 5);
            }
        }
        let mut s = adaptive(50);
        for wait in 0..40 {
            let b = s.budget();
            if b.is_zero() {
                assert!(wait > 4, "not at once: wait {wait}");
                return;
            }
            if wait % 2 == 1 {
                s.missed();
            } else {
                s.caught(US);
            }
        }
        panic!("a miss in two did not zero the budget");
    }

    #[test]
    fn a_message_already_there_keeps_a_minimal_budget() {
        let mut s = adaptive(50);
        while !s.budget().is_zero() {
            s.missed();
        }
        while s.budget().is_zero() {}
        s.caught(Duration::ZERO);
        assert_eq!(s.budget(), MIN_SPIN);
    }

    #[test]
    fn settings_parse_and_print() {
        let cases = [
            ("auto", BusyPoll::default()),
            (
                "auto:200",
                BusyPoll::Adaptive {
                    max: Duration::from_micros(200),
                },
            ),
            ("0", BusyPoll::Off),
            ("auto:0", BusyPoll::Off),
            ("50", BusyPoll::Fixed(Duration::from_micros(50))),
        ];
        for (text, want) in cases {
            let got: BusyPoll = text.parse().unwrap();
            assert_eq!(got, want, "{text}");
            assert_eq!(got.to_string().parse::<BusyPoll>().unwrap(), want);
        }
        assert_eq!(BusyPoll::default().to_string(), "auto");
        for bad in ["", "fast", "auto:", "-1", "1000001", "auto:x"] {
            assert!(bad.parse::<BusyPoll>().is_err(), "{bad}");
        }
        assert_eq!(BusyPoll::from(Duration::ZERO), BusyPoll::Off);
    }

    #[test]
    fn a_crowded_process_caps_adaptive_spins_but_not_fixed_ones() {
        assert!(
            !crowded_with(1, 1),
            "one waiting connection on one CPU spins"
        );
        assert!(crowded_with(2, 1));
        assert!(!crowded_with(2, 2));
        let mut b = SpinBudget::new(BusyPoll::default());
        b.caught(40 * US);
        assert_eq!(b.budget(), BusyPoll::DEFAULT_MAX);
        assert_eq!(b.budget_within(CROWDED_MAX), CROWDED_MAX);
        let mut f = SpinBudget::new(BusyPoll::Fixed(30 * US));
        assert_eq!(f.budget_within(CROWDED_MAX), 30 * US);
        let mut off = SpinBudget::new(BusyPoll::Off);
        assert_eq!(off.budget_within(CROWDED_MAX), Duration::ZERO);
    }
}

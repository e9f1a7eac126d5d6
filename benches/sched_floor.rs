//! The machine's scheduling floor for `perf e2e`: what a process that does
//! nothing but wake on time sees, pinned like the broker. Events are due every
//! `1/rate` seconds; the thread sleeps until each one is due and records how
//! late it woke. No broker, no network, no allocation in the loop: whatever
//! tail this prints, no server pinned to the same CPU can beat.
//!
//! `benches/compare.sh` runs it on the broker's CPU, alone and while a second
//! copy (`--spin`) keeps the client's CPU busy as the e2e client does, beside
//! the `perf e2e` rows:
//!
//! ```text
//! cargo bench --bench sched_floor -- [events] [rate]
//! cargo bench --bench sched_floor -- --spin SECONDS
//! ```
//!
//! Not a criterion benchmark: it reports percentiles of one run.

use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let usage = || -> ! {
        eprintln!("usage: sched_floor [events] [rate] | sched_floor --spin SECONDS");
        std::process::exit(2)
    };
    let num = |i: usize, default: u64| match args.get(i) {
        None => default,
        Some(a) => a.parse::<u64>().unwrap_or_else(|_| usage()),
    };
    if args.first().is_some_and(|a| a == "--spin") {
        // The busy neighbour (the e2e client keeps its CPU busy): pin it to the
        // other CPU and run the floor beside it.
        let until = Instant::now() + Duration::from_secs(num(1, 5));
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        return;
    }
    let events = usize::try_from(num(0, 200_000))
        .unwrap_or(usize::MAX)
        .max(1);
    let rate = num(1, 50_000).max(1);
    let period = Duration::from_secs_f64(1.0 / rate as f64);
    let mut late = Vec::with_capacity(events);
    let start = Instant::now() + Duration::from_millis(1);
    for i in 0..events {
        let due = start + period.mul_f64(i as f64);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        late.push(Instant::now().saturating_duration_since(due));
    }
    late.sort_unstable();
    let at = |q: f64| {
        let i = ((late.len() as f64 * q) as usize).min(late.len() - 1);
        late[i].as_secs_f64() * 1e3
    };
    println!(
        "scheduling floor: {events} wake-ups at {rate}/s, lateness ms: p50 {:.3} p99 {:.3} p99.9 {:.3} max {:.3}",
        at(0.5),
        at(0.99),
        at(0.999),
        at(1.0)
    );
}

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
//! cargo bench --bench sched_floor -- --relay-server ADDR          # pinned like the broker
//! cargo bench --bench sched_floor -- --relay ADDR [events] [rate] # pinned like the client
//! cargo bench --bench sched_floor -- --hiccup SECONDS
//! ```
//!
//! The relay is the floor of the whole e2e path, done by bare threads with
//! only the syscalls no broker can avoid: a sender thread writes each 100-byte
//! message into a loopback TCP connection at its due time; the server (one
//! thread, on the broker's CPU) reads what arrived, appends it to a file with
//! one `pwrite` (the log's page-cache write) and writes it back; a receiver
//! thread beside the sender (the consumer shares the client's CPU with the
//! producer) reads it and records the time since it was sent. No executor,
//! no framing, no allocation per message.
//!
//! The hiccup meter (`--hiccup`) is the floor under all of them: a thread that
//! never makes a syscall, only reads the clock in a loop, and counts the gaps
//! between two readings: time its CPU was taken from it (by the guest's
//! kernel, or by the host from the whole virtual CPU). compare.sh runs it on
//! one CPU with the other idle and on both CPUs at once, as a `perf e2e` run
//! keeps them. A gap of `g` ms on the broker's CPU delays every record of a
//! 50,000/s stream that arrives in it, about `50 x (g - 2)` of them past 2 ms.
//!
//! Not a criterion benchmark: it reports percentiles of one run.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// Bytes per relayed message (as `perf e2e`'s records).
const MESSAGE: usize = 100;

/// Percentiles of `ms`, in ms.
fn percentiles(mut v: Vec<Duration>) -> [f64; 4] {
    v.sort_unstable();
    let at = |q: f64| {
        let i = ((v.len() as f64 * q) as usize).min(v.len().saturating_sub(1));
        v.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    [at(0.5), at(0.99), at(0.999), at(1.0)]
}

/// The server side of the relay: one connection, each read appended to a
/// file and written back.
fn relay_server(addr: &str) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr)?;
    let (mut conn, _) = listener.accept()?;
    conn.set_nodelay(true)?;
    let path = std::env::temp_dir().join(format!("sched_floor_relay.{}", std::process::id()));
    let file = std::fs::File::create(&path)?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut at = 0u64;
    let result = loop {
        let n = match conn.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(n) => n,
            Err(e) => break Err(e),
        };
        if let Err(e) = file.write_all_at(&buf[..n], at) {
            break Err(e);
        }
        at += n as u64;
        if let Err(e) = conn.write_all(&buf[..n]) {
            break Err(e);
        }
    };
    let _ = std::fs::remove_file(&path);
    result
}

/// The client side of the relay: a paced sender and a receiver thread.
fn relay_client(addr: &str, events: usize, rate: u64) -> std::io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let conn = loop {
        match TcpStream::connect(addr) {
            Ok(c) => break c,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(e),
        }
    };
    conn.set_nodelay(true)?;
    let mut reader = conn.try_clone()?;
    let epoch = Instant::now();
    let receiver = std::thread::spawn(move || -> std::io::Result<Vec<Duration>> {
        let mut lat = Vec::with_capacity(events);
        let mut buf = vec![0u8; 64 * 1024];
        let mut have = 0usize;
        while lat.len() < events {
            let n = reader.read(&mut buf[have..])?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            have += n;
            let now = epoch.elapsed();
            let whole = have / MESSAGE * MESSAGE;
            for m in buf[..whole].chunks_exact(MESSAGE) {
                let mut sent = [0u8; 8];
                sent.copy_from_slice(&m[..8]);
                lat.push(now.saturating_sub(Duration::from_nanos(u64::from_be_bytes(sent))));
            }
            buf.copy_within(whole..have, 0);
            have -= whole;
        }
        Ok(lat)
    });
    let mut writer = conn;
    let period = Duration::from_secs_f64(1.0 / rate as f64);
    let start = Instant::now() + Duration::from_millis(1);
    let mut msg = [0u8; MESSAGE];
    for i in 0..events {
        let due = start + period.mul_f64(i as f64);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        let sent = u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        msg[..8].copy_from_slice(&sent.to_be_bytes());
        writer.write_all(&msg)?;
    }
    let lat = receiver
        .join()
        .map_err(|_| std::io::Error::other("the receiver panicked"))??;
    writer.shutdown(std::net::Shutdown::Both)?;
    let [p50, p99, p999, max] = percentiles(lat);
    println!(
        "relay floor: {events} messages of {MESSAGE} B at {rate}/s through a bare thread that appends each to a file, latency ms: p50 {p50:.3} p99 {p99:.3} p99.9 {p999:.3} max {max:.3}"
    );
    Ok(())
}

/// Reads the clock in a loop for `secs` and reports the gaps between two
/// readings: how often, and for how long, the thread lost its CPU.
fn hiccup(secs: Duration) {
    // Upper bounds of the buckets, in microseconds; the last is open.
    const BOUNDS: [u64; 5] = [500, 1_000, 2_000, 4_000, 8_000];
    let mut counts = [0u64; BOUNDS.len() + 1];
    let (mut lost, mut max) = (Duration::ZERO, Duration::ZERO);
    let start = Instant::now();
    let mut prev = start;
    loop {
        let now = Instant::now();
        let gap = now - prev;
        prev = now;
        if gap >= Duration::from_micros(100) {
            lost += gap;
            max = max.max(gap);
            let us = u64::try_from(gap.as_micros()).unwrap_or(u64::MAX);
            let bucket = BOUNDS.iter().position(|&b| us < b).unwrap_or(BOUNDS.len());
            counts[bucket] += 1;
        }
        if now - start >= secs {
            break;
        }
    }
    let s = secs.as_secs_f64();
    println!(
        "hiccups over {s:.0} s: gaps 0.1-0.5 ms {}, 0.5-1 ms {}, 1-2 ms {}, 2-4 ms {}, 4-8 ms {}, >= 8 ms {}; lost {:.2} %, longest {:.2} ms",
        counts[0],
        counts[1],
        counts[2],
        counts[3],
        counts[4],
        counts[5],
        100.0 * lost.as_secs_f64() / s,
        max.as_secs_f64() * 1e3
    );
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let usage = || -> ! {
        eprintln!(
            "usage: sched_floor [events] [rate] | --spin SECONDS | --hiccup SECONDS | --relay-server ADDR | --relay ADDR [events] [rate]"
        );
        std::process::exit(2)
    };
    let num = |i: usize, default: u64| match args.get(i) {
        None => default,
        Some(a) => a.parse::<u64>().unwrap_or_else(|_| usage()),
    };
    let relay = |r: std::io::Result<()>| {
        if let Err(e) = r {
            eprintln!("sched_floor relay: {e}");
            std::process::exit(1)
        }
    };
    match args.first().map(String::as_str) {
        Some("--relay-server") => {
            let Some(addr) = args.get(1) else { usage() };
            relay(relay_server(addr));
            return;
        }
        Some("--relay") => {
            let Some(addr) = args.get(1) else { usage() };
            let events = usize::try_from(num(2, 200_000))
                .unwrap_or(usize::MAX)
                .max(1);
            relay(relay_client(addr, events, num(3, 50_000).max(1)));
            return;
        }
        _ => {}
    }
    if args.first().is_some_and(|a| a == "--hiccup") {
        hiccup(Duration::from_secs(num(1, 10)));
        return;
    }
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
    let [p50, p99, p999, max] = percentiles(late);
    println!(
        "scheduling floor: {events} wake-ups at {rate}/s, lateness ms: p50 {p50:.3} p99 {p99:.3} p99.9 {p999:.3} max {max:.3}"
    );
}

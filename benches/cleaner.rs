//! The log cleaner's throughput and memory (`storage::compact`): a
//! partition of 100-byte records over a key space, every segment sealed,
//! cleaned to the end with a key map that holds every key, then with one
//! that holds a tenth of them (several passes). Prints MB/s of dirty log
//! cleaned and the process's peak RSS growth against the map's setting.
//!
//! `cargo bench --bench cleaner [-- RECORDS KEYS]` (default 2,000,000 records, 200,000 keys).

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use flume_broker::storage::compact::{self, CleanerLimits, CompactionConfig};
use flume_broker::storage::{Log, LogConfig};
use flume_protocol::record;

fn vm_hwm_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn fill(dir: &std::path::Path, records: u64, keys: u64) -> Log {
    let config = LogConfig {
        segment_bytes: 64 * 1024 * 1024,
        compaction: Some(CompactionConfig {
            min_dirty_ratio: 0.0,
            ..CompactionConfig::default()
        }),
        ..LogConfig::default()
    };
    let mut log = Log::open(dir, config).expect("open");
    let value = [b'x'; 100];
    let mut batch = Vec::new();
    let mut i = 0u64;
    while i < records {
        batch.clear();
        for _ in 0..1000 {
            let key = format!("key-{:08}", (i.wrapping_mul(2_654_435_761)) % keys);
            record::encode(
                &mut batch,
                0,
                1_700_000_000_000,
                Some(key.as_bytes()),
                &value,
                &[],
            );
            i += 1;
        }
        log.append(&mut batch).expect("append");
    }
    // One record in a fresh active segment: everything before it is sealed.
    log.set_limits(None, None, 1, None);
    let mut last = Vec::new();
    record::encode(&mut last, 0, 1_700_000_000_000, Some(b"roll"), b"", &[]);
    log.append(&mut last).expect("append");
    log
}

fn clean(log: &mut Log, limits: &CleanerLimits) -> (u64, u64, usize, f64) {
    let stop = AtomicBool::new(false);
    let (mut read, mut written, mut passes) = (0u64, 0u64, 0usize);
    let started = Instant::now();
    while let Some(plan) = log.clean_plan(1_800_000_000_000) {
        let Some(c) = compact::prepare(&plan, limits, 1_800_000_000_000, &stop).expect("prepare")
        else {
            break;
        };
        read += c.stats.bytes_read;
        written += c.stats.bytes_written;
        passes += 1;
        log.install_cleaned(c).expect("install");
    }
    (read, written, passes, started.elapsed().as_secs_f64())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    // One configuration per process, so that each peak RSS is its own.
    if args.first().map(String::as_str) == Some("one") {
        one(num(1, 0), num(2, 0), num(3, 0) as usize);
        return;
    }
    let numbers: Vec<u64> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let records = numbers.first().copied().unwrap_or(2_000_000);
    let keys = numbers.get(1).copied().unwrap_or(200_000);
    let exe = std::env::current_exe().expect("the bench's path");
    for map_bytes in [32 * 1024 * 1024, (keys as usize / 10) * 25 * 8 / 7 * 2] {
        let status = std::process::Command::new(&exe)
            .args([
                "one",
                &records.to_string(),
                &keys.to_string(),
                &map_bytes.to_string(),
            ])
            .status()
            .expect("run one configuration");
        assert!(status.success());
    }
}

fn one(records: u64, keys: u64, map_bytes: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = fill(dir.path(), records, keys);
    let dirty: u64 = log.size_bytes();
    let limits = CleanerLimits {
        key_map_bytes: map_bytes,
        io_bytes_per_sec: None,
    };
    let before = vm_hwm_kb();
    let (read, written, passes, secs) = clean(&mut log, &limits);
    let grew_mb = vm_hwm_kb().saturating_sub(before) as f64 / 1024.0;
    println!(
        "cleaner, key map setting {:.1} MB ({} keys): {records} records over {keys} keys, {:.0} MB of log; \
         {passes} passes in {secs:.2} s = {:.0} MB/s of log cleaned ({:.0} MB read and {:.1} MB written in all); \
         peak RSS grew {grew_mb:.1} MB",
        map_bytes as f64 / 1e6,
        limits.max_keys(),
        dirty as f64 / 1e6,
        dirty as f64 / 1e6 / secs,
        read as f64 / 1e6,
        written as f64 / 1e6,
    );
}

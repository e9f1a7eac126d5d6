//! What the perf tools share: the progress line and percentiles.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Progress on stderr: on a terminal one line rewritten twice a second; otherwise
/// (a log file, CI) a new line every few seconds.
pub fn progress(done: Arc<AtomicU64>, total: u64, start: Instant) -> Option<flume_rt::Task<()>> {
    let tty = std::io::stderr().is_terminal();
    let every = if tty {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(PROGRESS_SECS)
    };
    Some(flume_rt::spawn(async move {
        loop {
            flume_rt::sleep(every).await;
            let d = done.load(Ordering::Relaxed);
            let secs = start.elapsed().as_secs_f64();
            let rate = d as f64 / secs.max(1e-9);
            if tty {
                eprint!("\r{d}/{total} records, {rate:.0} records/s   ");
            } else {
                eprintln!("progress: {d}/{total} records in {secs:.0} s, {rate:.0} records/s");
            }
            if d >= total {
                if tty {
                    eprintln!();
                }
                return;
            }
        }
    }))
}

/// Seconds between progress lines when stderr is not a terminal.
const PROGRESS_SECS: u64 = 5;

/// Stops the progress line, ending a terminal's rewritten line.
pub async fn end_progress(bar: Option<flume_rt::Task<()>>) {
    if let Some(b) = bar {
        b.cancel().await;
        if std::io::stderr().is_terminal() {
            eprintln!();
        }
    }
}

/// The `p` quantile (0 to 1) of `sorted` microseconds, in milliseconds.
pub fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)] as f64 / 1000.0
}

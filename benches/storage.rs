//! Storage engine throughput: append (batches of 1 and 1000, fsync never and always) and
//! sequential read. `cargo bench --bench storage`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use flume_broker::storage::{FsyncPolicy, Log, LogConfig};
use flume_protocol::record;

fn batch(n: usize) -> Vec<u8> {
    let value = [b'x'; 100];
    let mut buf = Vec::with_capacity(n * 140);
    for _ in 0..n {
        record::encode(&mut buf, 0, 1_700_000_000_000, None, &value, &[]);
    }
    buf
}

fn append(c: &mut Criterion) {
    let mut g = c.benchmark_group("storage_append_100B");
    for (n, fsync) in [
        (1usize, FsyncPolicy::Never),
        (1000, FsyncPolicy::Never),
        (1, FsyncPolicy::Always),
        (1000, FsyncPolicy::Always),
    ] {
        let b = batch(n);
        let info = record::validate_batch(&b, u64::MAX).unwrap();
        g.throughput(Throughput::Elements(n as u64));
        if fsync == FsyncPolicy::Always {
            g.sample_size(10);
        }
        // The engine's cost with the page cache absorbing the writes: every 64 MiB the
        // log is deleted (outside the timed region), so dirty pages never pile up to the
        // kernel's writeback threshold. Sustained beyond that, appends run at the disk's
        // write speed; the `sustained` variant measures that.
        for sustained in [false, true] {
            if sustained && !(n == 1000 && fsync == FsyncPolicy::Never) {
                continue;
            }
            let name = format!(
                "batch_{n}_fsync_{fsync:?}{}",
                if sustained { "_sustained" } else { "" }
            );
            let mut dir = tempfile::tempdir().unwrap();
            let cfg = LogConfig {
                fsync,
                ..LogConfig::default()
            };
            let mut log = Log::open(dir.path(), cfg.clone()).unwrap();
            g.bench_function(name, |bench| {
                bench.iter_custom(|iters| {
                    let mut buf = b.clone();
                    let mut total = std::time::Duration::ZERO;
                    for _ in 0..iters {
                        if !sustained && log.size_bytes() > 64 << 20 {
                            drop(std::mem::replace(&mut dir, tempfile::tempdir().unwrap()));
                            log = Log::open(dir.path(), cfg.clone()).unwrap();
                        }
                        let t = std::time::Instant::now();
                        log.append_validated(&mut buf, u64::from(info.count), info.max_timestamp)
                            .unwrap();
                        total += t.elapsed();
                    }
                    total
                })
            });
        }
    }
    g.finish();
}

fn read(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), LogConfig::default()).unwrap();
    let b = batch(1000);
    for _ in 0..500 {
        log.append(&mut b.clone()).unwrap();
    }
    let total_bytes = log.size_bytes();
    let mut g = c.benchmark_group("storage_read");
    g.throughput(Throughput::Bytes(total_bytes));
    g.sample_size(20);
    g.bench_function("sequential_1MiB_reads_500k_records", |bench| {
        bench.iter(|| {
            let mut next = 0;
            let end = log.end_offset();
            while next < end {
                let r = log.read(next, 1 << 20).unwrap();
                // Count records by walking headers (as a consumer's decoder would).
                let mut n = 0;
                let mut pos = 0;
                while let Some((_, size)) = record::peek_header(&r.records, pos) {
                    pos += record::RECORD_HEADER_LEN + size as usize;
                    n += 1;
                }
                next += n;
            }
        })
    });
    g.finish();
}

criterion_group!(benches, append, read);
criterion_main!(benches);

//! Unit and property tests of the cleaner, compiled only under #[cfg(test)].
use super::*;
use crate::storage::{Log, LogConfig, ReadAs};
use bytes::Bytes;
use flume_protocol::record::{decode_all, encode_nullable, Record};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// Time of the test's appends; "now" for the cleaner is later.
const T0: i64 = 1_700_000_000_000;

fn compacted(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        index_interval_bytes: 96,
        compaction: Some(CompactionConfig {
            min_dirty_ratio: 0.0,
            delete_retention_ms: u64::MAX / 4,
            ..CompactionConfig::default()
        }),
        ..LogConfig::default()
    }
}

/// One appended record: a key (or none) and a value (or a tombstone).
#[derive(Debug, Clone)]
struct Op {
    key: Option<u8>,
    value: Option<u16>,
}

/// Appends `ops` as one Kafka batch entry (the codec picked by `codec`,
/// stamped with a producer id when `producer` is set); returns the base offset.
fn append_batch(log: &mut Log, ops: &[Op], ts: i64, codec: u8, producer: Option<i64>) -> u64 {
    use flume_protocol::kafka_batch::{BatchBuilder, BatchMeta, Compression};
    let codec = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ][usize::from(codec) % 5];
    let mut b = BatchBuilder::new(None);
    for (i, op) in ops.iter().enumerate() {
        let key = op.key.map(|k| format!("key-{k}").into_bytes());
        let value = op.value.map(|v| format!("value-{v:05}").into_bytes());
        b.push(
            i32::try_from(i).unwrap(),
            ts,
            key.as_deref(),
            value.as_deref(),
            [],
        );
    }
    let meta = BatchMeta {
        producer_id: producer.unwrap_or(-1),
        producer_epoch: if producer.is_some() { 0 } else { -1 },
        base_sequence: if producer.is_some() { 0 } else { -1 },
        ..BatchMeta::default()
    };
    let batch = b.finish(&meta, codec).unwrap();
    let mut entry = Vec::new();
    flume_protocol::record::encode_batch_entry(&mut entry, &batch);
    log.append_validated(&mut entry, ops.len() as u64, ts)
        .unwrap()
}

fn append(log: &mut Log, op: &Op, ts: i64) -> u64 {
    let mut buf = Vec::new();
    let key = op.key.map(|k| format!("key-{k}").into_bytes());
    let value = op.value.map(|v| format!("value-{v:05}").into_bytes());
    encode_nullable(&mut buf, 0, ts, key.as_deref(), value.as_deref(), &[]);
    log.append(&mut buf).unwrap()
}

/// Every record from the log start, reading on from each answer's last
/// offset; checks that each read at a missing offset starts at the next record.
fn read_all(log: &Log) -> Vec<Record> {
    let mut out: Vec<Record> = Vec::new();
    let mut next = log.start_offset();
    while next < log.end_offset() {
        let r = log.read_as(next, 300, ReadAs::Records).unwrap();
        let recs = decode_all(&Bytes::from(r.records)).unwrap();
        if recs.is_empty() {
            // Only emptied batches (kept for their producers) are left.
            assert!(
                r.next >= log.end_offset(),
                "a read at {next} returned nothing before the end"
            );
            break;
        }
        assert!(recs[0].offset >= next);
        next = recs.last().unwrap().offset + 1;
        out.extend(recs);
    }
    out
}

fn pass(log: &mut Log, limits: &CleanerLimits, now: i64) -> Option<CleanStats> {
    let plan = log.clean_plan(now)?;
    let cleaned = prepare(&plan, limits, now, &AtomicBool::new(false)).unwrap()?;
    let stats = cleaned.stats.clone();
    log.install_cleaned(cleaned).unwrap();
    Some(stats)
}

/// Passes until the cleaner has nothing left to do (bounded).
fn clean_fully(log: &mut Log, limits: &CleanerLimits, now: i64) -> Vec<CleanStats> {
    let mut all = Vec::new();
    for _ in 0..200 {
        match pass(log, limits, now) {
            Some(s) => all.push(s),
            None => return all,
        }
    }
    panic!("the cleaner never finished");
}

/// The reference: of the records before `sealed_end`, the newest of each
/// key and every keyless one; every record from `sealed_end` on.
fn model(ops: &[(u64, Op)], sealed_end: u64) -> Vec<(u64, Option<u8>, Option<u16>)> {
    let mut newest: BTreeMap<u8, u64> = BTreeMap::new();
    for (o, op) in ops {
        if let (Some(k), true) = (op.key, *o < sealed_end) {
            newest.insert(k, *o);
        }
    }
    ops.iter()
        .filter(|(o, op)| *o >= sealed_end || op.key.is_none_or(|k| newest.get(&k) == Some(o)))
        .map(|(o, op)| (*o, op.key, op.value))
        .collect()
}

fn seen(records: &[Record]) -> Vec<(u64, Option<u8>, Option<u16>)> {
    records
        .iter()
        .map(|r| {
            let key = r.key.as_ref().map(|k| {
                std::str::from_utf8(k).unwrap()["key-".len()..]
                    .parse()
                    .unwrap()
            });
            let value = r.value.as_ref().map(|v| {
                std::str::from_utf8(v).unwrap()["value-".len()..]
                    .parse()
                    .unwrap()
            });
            (r.offset, key, value)
        })
        .collect()
}

fn op() -> impl Strategy<Value = Op> {
    (
        prop_oneof![9 => (0u8..12).prop_map(Some), 1 => Just(None)],
        prop_oneof![8 => any::<u16>().prop_map(Some), 2 => Just(None)],
    )
        .prop_map(|(key, value)| Op { key, value })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]
    /// Random keys, values, tombstones and segment rolls, cleaned with a
    /// key map of 4 keys (so in many passes) or a large one: the log equals
    /// the reference, reads from every offset land on the next record, and
    /// a reopen (verifying every sealed segment) serves the same.
    #[test]
    fn a_cleaned_log_equals_the_reference_model(
        ops in proptest::collection::vec(op(), 1..160),
        tiny_map in any::<bool>(),
        groups in proptest::collection::vec((0usize..6, any::<u8>(), any::<bool>()), 0..40),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), compacted(400)).unwrap();
        let mut appended = Vec::new();
        // Runs of records alternate with Kafka batch entries (of `groups`'
        // sizes, codecs and producers) until every op is appended.
        let mut groups = groups.into_iter();
        let mut i = 0;
        while i < ops.len() {
            match groups.next() {
                Some((n, codec, producer)) if n > 0 => {
                    let chunk = &ops[i..(i + n).min(ops.len())];
                    let base = append_batch(&mut log, chunk, T0 + i as i64, codec, producer.then_some(7));
                    for (j, op) in chunk.iter().enumerate() {
                        appended.push((base + j as u64, op.clone()));
                    }
                    i += chunk.len();
                }
                _ => {
                    let o = append(&mut log, &ops[i], T0 + i as i64);
                    appended.push((o, ops[i].clone()));
                    i += 1;
                }
            }
        }
        let limits = CleanerLimits {
            key_map_bytes: if tiny_map { 8 * MAP_SLOT_BYTES } else { 1 << 20 },
            io_bytes_per_sec: None,
        };
        let passes = clean_fully(&mut log, &limits, T0 + 1_000_000);
        if tiny_map {
            prop_assert!(passes.iter().all(|p| p.keys <= limits.max_keys()));
        }
        let sealed_end = log.active_base();
        let want = model(&appended, sealed_end);
        prop_assert_eq!(seen(&read_all(&log)), want.clone());
        // A read at every offset starts at the first record at or after it.
        for at in log.start_offset()..log.end_offset() {
            let r = log.read_as(at, 1, ReadAs::Records).unwrap();
            let first = decode_all(&Bytes::from(r.records)).unwrap().first().map(|r| r.offset);
            let expected = want.iter().map(|w| w.0).find(|o| *o >= at);
            prop_assert_eq!(first, expected);
        }
        let end = log.end_offset();
        drop(log);
        let reopened = Log::open(dir.path(), LogConfig { verify_sealed: true, ..compacted(400) }).unwrap();
        prop_assert_eq!(reopened.end_offset(), end);
        prop_assert_eq!(seen(&read_all(&reopened)), want);
    }
}

#[test]
fn tombstones_stay_until_cleaned_and_delete_retention_old_then_go() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = compacted(200);
    if let Some(c) = cfg.compaction.as_mut() {
        c.delete_retention_ms = 60_000;
    }
    let mut log = Log::open(dir.path(), cfg).unwrap();
    let put = |log: &mut Log, k: u8, v: Option<u16>, ts: i64| {
        append(
            log,
            &Op {
                key: Some(k),
                value: v,
            },
            ts,
        )
    };
    put(&mut log, 1, Some(1), T0);
    put(&mut log, 2, Some(2), T0);
    let deleted = put(&mut log, 1, None, T0);
    for i in 0..8 {
        put(&mut log, 3, Some(i), T0);
    }
    let limits = CleanerLimits::default();
    // First pass: the tombstone is the newest of key 1 and dirty: it stays.
    clean_fully(&mut log, &limits, T0 + 120_000);
    let after_first = seen(&read_all(&log));
    assert!(
        after_first.contains(&(deleted, Some(1), None)),
        "{after_first:?}"
    );
    assert!(!after_first.iter().any(|r| r.1 == Some(1) && r.2.is_some()));
    // More records roll the segment: the next pass finds the tombstone in
    // the cleaned part; at T0 + 30 s it is not old enough yet.
    for i in 0..8 {
        put(&mut log, 4, Some(i), T0 + 10);
    }
    clean_fully(&mut log, &limits, T0 + 30_000);
    assert!(seen(&read_all(&log)).contains(&(deleted, Some(1), None)));
    for i in 0..8 {
        put(&mut log, 5, Some(i), T0 + 20);
    }
    let stats = clean_fully(&mut log, &limits, T0 + 120_000);
    assert_eq!(stats.iter().map(|s| s.tombstones_removed).sum::<u64>(), 1);
    let last = seen(&read_all(&log));
    assert!(!last.iter().any(|r| r.1 == Some(1)), "{last:?}");
    assert!(
        last.contains(&(1, Some(2), Some(2))),
        "key 2 keeps its only value"
    );
}

#[test]
fn a_segment_younger_than_the_minimum_lag_and_the_ones_after_it_wait() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = compacted(200);
    if let Some(c) = cfg.compaction.as_mut() {
        c.min_lag_ms = 10_000;
    }
    let mut log = Log::open(dir.path(), cfg).unwrap();
    for i in 0..20u16 {
        append(
            &mut log,
            &Op {
                key: Some(1),
                value: Some(i),
            },
            T0 + i64::from(i) * 1_000,
        );
    }
    let before = read_all(&log).len();
    // At T0 + 5 s every segment holds a record younger than 10 s.
    assert!(pass(&mut log, &CleanerLimits::default(), T0 + 5_000).is_none());
    assert_eq!(read_all(&log).len(), before);
    // Much later, every sealed segment may be cleaned.
    clean_fully(&mut log, &CleanerLimits::default(), T0 + 1_000_000);
    let sealed_end = log.active_base();
    let left: Vec<_> = read_all(&log)
        .iter()
        .map(|r| r.offset)
        .filter(|o| *o < sealed_end)
        .collect();
    assert_eq!(
        left,
        vec![sealed_end - 1],
        "one record of the key before the active segment"
    );
}

#[test]
fn the_dirty_ratio_decides_when_a_log_is_due() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = compacted(200);
    if let Some(c) = cfg.compaction.as_mut() {
        c.min_dirty_ratio = 0.5;
    }
    let mut log = Log::open(dir.path(), cfg).unwrap();
    for i in 0..30u16 {
        append(
            &mut log,
            &Op {
                key: Some((i % 3) as u8),
                value: Some(i),
            },
            T0,
        );
    }
    assert_eq!(log.dirty_ratio(), 1.0);
    clean_fully(&mut log, &CleanerLimits::default(), T0);
    assert_eq!(log.dirty_ratio(), 0.0);
    assert!(log.clean_plan(T0).is_none());
    let checkpoint = log.cleaned_to();
    assert!(checkpoint > 0);
    drop(log);
    // The checkpoint survives a restart.
    let log = Log::open(dir.path(), compacted(200)).unwrap();
    assert_eq!(log.cleaned_to(), checkpoint);
    assert_eq!(read_checkpoint(dir.path()), Some(checkpoint));
}

#[test]
fn a_log_that_is_not_compacted_is_never_planned() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(
        dir.path(),
        LogConfig {
            compaction: None,
            ..compacted(200)
        },
    )
    .unwrap();
    for i in 0..30u16 {
        append(
            &mut log,
            &Op {
                key: Some(1),
                value: Some(i),
            },
            T0,
        );
    }
    assert!(log.clean_plan(T0).is_none());
}

/// The states a kill can leave a swap in, in its order (see `install_cleaned`).
#[derive(Debug, Clone, Copy)]
enum Crash {
    /// The cleaned files are written, nothing is swapped.
    BeforeSwap,
    /// The old index is gone.
    IndexRemoved,
    /// The cleaned log is in place, its index is not.
    LogRenamed,
    /// Both are in place, the checkpoint is not written.
    BeforeCheckpoint,
}

#[test]
fn a_kill_at_any_step_of_a_swap_keeps_what_compaction_keeps_and_brings_nothing_back() {
    for crash in [
        Crash::BeforeSwap,
        Crash::IndexRemoved,
        Crash::LogRenamed,
        Crash::BeforeCheckpoint,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), compacted(300)).unwrap();
        let mut appended = Vec::new();
        for i in 0..60u16 {
            let op = Op {
                key: Some((i % 5) as u8),
                value: Some(i),
            };
            appended.push((append(&mut log, &op, T0), op));
        }
        let original = seen(&read_all(&log));
        let sealed_end = log.active_base();
        let want = model(&appended, sealed_end);
        let plan = log.clean_plan(T0).unwrap();
        let cleaned = prepare(
            &plan,
            &CleanerLimits::default(),
            T0,
            &AtomicBool::new(false),
        )
        .unwrap()
        .unwrap();
        assert!(cleaned.segments.len() > 1);
        // Swap the first segment whole, the second up to the crash.
        let second = cleaned.segments[1].base;
        drop(log);
        let name = |ext: &str| dir.path().join(segment::file_name(second, ext));
        let cleaned_name = |ext: &str| dir.path().join(cleaned_name(second, ext));
        let first = cleaned.segments[0].base;
        std::fs::remove_file(dir.path().join(segment::file_name(first, "index"))).unwrap();
        std::fs::rename(
            dir.path().join(super::cleaned_name(first, "log")),
            dir.path().join(segment::file_name(first, "log")),
        )
        .unwrap();
        std::fs::rename(
            dir.path().join(super::cleaned_name(first, "index")),
            dir.path().join(segment::file_name(first, "index")),
        )
        .unwrap();
        match crash {
            Crash::BeforeSwap => {}
            Crash::IndexRemoved => std::fs::remove_file(name("index")).unwrap(),
            Crash::LogRenamed => {
                std::fs::remove_file(name("index")).unwrap();
                std::fs::rename(cleaned_name("log"), name("log")).unwrap();
            }
            Crash::BeforeCheckpoint => {
                for c in &cleaned.segments {
                    let n = |ext: &str| dir.path().join(segment::file_name(c.base, ext));
                    let cn = |ext: &str| dir.path().join(super::cleaned_name(c.base, ext));
                    if c.base != first {
                        std::fs::remove_file(n("index")).unwrap();
                        std::fs::rename(cn("log"), n("log")).unwrap();
                        std::fs::rename(cn("index"), n("index")).unwrap();
                    }
                }
            }
        }
        let mut log = Log::open(
            dir.path(),
            LogConfig {
                verify_sealed: true,
                ..compacted(300)
            },
        )
        .unwrap();
        let got = seen(&read_all(&log));
        // Everything compaction keeps is there; everything there was appended,
        // in order, and nothing removed from a swapped segment came back.
        for w in &want {
            assert!(got.contains(w), "{crash:?}: {w:?} lost");
        }
        assert!(got.iter().all(|g| original.contains(g)), "{crash:?}");
        assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "{crash:?}");
        let first_end = cleaned.segments[1].base;
        assert!(
            got.iter()
                .filter(|g| g.0 < first_end)
                .all(|g| want.contains(g)),
            "{crash:?}: the swapped segment serves only what it kept"
        );
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".cleaned"))
            .collect();
        assert!(leftovers.is_empty(), "{crash:?}: {leftovers:?}");
        // The next pass finishes the job.
        clean_fully(&mut log, &CleanerLimits::default(), T0);
        assert_eq!(seen(&read_all(&log)), want, "{crash:?}");
    }
}

#[test]
fn a_stopped_pass_installs_nothing_and_leaves_no_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), compacted(300)).unwrap();
    for i in 0..60u16 {
        append(
            &mut log,
            &Op {
                key: Some(1),
                value: Some(i),
            },
            T0,
        );
    }
    let before = seen(&read_all(&log));
    let plan = log.clean_plan(T0).unwrap();
    let stop = AtomicBool::new(true);
    assert!(prepare(&plan, &CleanerLimits::default(), T0, &stop).is_err());
    assert_eq!(seen(&read_all(&log)), before);
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.ends_with(".cleaned")), "{names:?}");
}

#[test]
fn a_time_lookup_and_retention_work_across_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), compacted(300)).unwrap();
    for i in 0..60u16 {
        append(
            &mut log,
            &Op {
                key: Some((i % 2) as u8),
                value: Some(i),
            },
            T0 + i64::from(i),
        );
    }
    clean_fully(&mut log, &CleanerLimits::default(), T0 + 1_000);
    let kept: Vec<u64> = read_all(&log).iter().map(|r| r.offset).collect();
    // Timestamps equal T0 + offset: a lookup of a removed record's time
    // finds the next record kept.
    for o in 0..60u64 {
        let hit = log.find_time(T0 + o as i64).unwrap().map(|h| h.0);
        assert_eq!(
            hit,
            kept.iter().copied().find(|k| *k >= o),
            "time of offset {o}"
        );
    }
    // Retention by size still drops whole segments from the start.
    log.set_limits(Some(1), None, 300, None);
    log.enforce_retention(T0).unwrap();
    assert_eq!(log.start_offset(), log.active_base());
}

#[test]
fn the_map_bound_is_what_the_setting_allows() {
    for bytes in [0usize, 100, 1000, 1 << 20, 32 << 20] {
        let limits = CleanerLimits {
            key_map_bytes: bytes,
            io_bytes_per_sec: None,
        };
        let keys = limits.max_keys();
        assert!(keys >= 7);
        let buckets = (keys / 7 * 8).next_power_of_two();
        assert!(
            bytes < 8 * MAP_SLOT_BYTES || buckets * MAP_SLOT_BYTES <= bytes,
            "{bytes}: {keys} keys"
        );
        // The table the map allocates for that many keys is the one counted.
        let map: HashMap<u128, u64> = HashMap::with_capacity(keys);
        assert!(map.capacity() >= keys);
        assert!(
            map.capacity() < keys * 2 + 8,
            "{bytes}: capacity {}",
            map.capacity()
        );
    }
}

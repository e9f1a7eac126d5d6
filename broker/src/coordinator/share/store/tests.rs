//! The share-state file: round trips, replay against
//! [`ShareSnapshot::apply`], torn and corrupt tails, compaction and its
//! crash points, removals, bounds.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use flume_protocol::record::RecordIter;
use proptest::prelude::*;

use super::*;
use crate::coordinator::share::partition::{AckType, ShareConfig, SharePartition};

use SnapshotState::{Acknowledged as K, Archived as R, Available as V};

type Model = HashMap<ShareKey, ShareSnapshot>;

fn key(g: &str, t: &str, p: i32) -> ShareKey {
    (g.to_owned(), t.to_owned(), p)
}

fn upd(full: bool, start: i64, end: i64, records: &[(i64, SnapshotState, u16)]) -> ShareUpdate {
    ShareUpdate {
        full,
        state: ShareSnapshot {
            start_offset: start,
            end_offset: end,
            records: records.to_vec(),
        },
    }
}

fn w(k: &ShareKey, u: ShareUpdate) -> ShareWrite {
    (k.0.clone(), k.1.clone(), k.2, u)
}

fn open(dir: &Path) -> ShareStore {
    ShareStore::open(dir, FsyncPolicy::Never).unwrap()
}

/// Writes `updates` to the store and applies them to the model.
fn write(s: &mut ShareStore, m: &mut Model, updates: Vec<ShareWrite>) {
    s.write_batch(&updates).unwrap();
    for (g, t, p, u) in &updates {
        m.entry(key(g, t, *p)).or_default().apply(u);
    }
}

fn assert_holds(s: &ShareStore, m: &Model) {
    assert_eq!(s.len(), m.len(), "entries");
    for ((g, t, p), snap) in m {
        assert_eq!(s.get(g, t, *p).as_ref(), Some(snap), "{g}/{t}/{p}");
    }
}

fn file(dir: &Path) -> std::path::PathBuf {
    dir.join(SHARE_LOG_FILE)
}

/// A fresh directory holding the first `len` bytes of `dir`'s file.
fn copy_cut(dir: &Path, len: usize) -> tempfile::TempDir {
    let raw = std::fs::read(file(dir)).unwrap();
    let to = tempfile::tempdir().unwrap();
    std::fs::write(file(to.path()), &raw[..len]).unwrap();
    to
}

#[test]
fn updates_and_full_snapshots_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(dir.path());
    let mut m = Model::new();
    let a = key("g", "t", 0);
    let b = key("g", "u", 3);
    write(
        &mut s,
        &mut m,
        vec![
            w(&a, upd(true, 0, 0, &[])),
            w(&b, upd(true, 5, 9, &[(5, V, 1), (6, K, 1), (8, R, 5)])),
        ],
    );
    write(
        &mut s,
        &mut m,
        vec![w(&a, upd(false, 0, 4, &[(0, V, 1), (1, V, 1), (3, V, 2)]))],
    );
    write(&mut s, &mut m, vec![w(&a, upd(false, 1, 5, &[(4, K, 1)]))]);
    assert_eq!(
        s.get("g", "t", 0).unwrap(),
        ShareSnapshot {
            start_offset: 1,
            end_offset: 5,
            records: vec![(1, V, 1), (3, V, 2), (4, K, 1)],
        }
    );
    assert_holds(&s, &m);
    assert_eq!(s.groups(), vec!["g".to_owned()]);
    assert_eq!(
        s.partitions_of("g"),
        vec![("t".to_owned(), 0), ("u".to_owned(), 3)]
    );
    assert!(s.partitions_of("h").is_empty());
    drop(s);
    let s = open(dir.path());
    assert_holds(&s, &m);
    assert_eq!(s.get("g", "t", 1), None);
}

#[test]
fn a_run_of_records_is_stored_in_a_few_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(dir.path());
    let k = key("g", "t", 0);
    let same: Vec<(i64, SnapshotState, u16)> = (1000..3000).map(|o| (o, V, 1)).collect();
    let before = s.file_bytes();
    s.write_batch(&[w(&k, upd(true, 1000, 3000, &same))])
        .unwrap();
    let one = s.file_bytes() - before;
    // 16 (entry header) + 19 (payload fields) + 1 (group) + 44 (value, one run).
    assert_eq!(one, 80, "2000 available records in one run");
    // Every tenth accepted: 400 runs.
    let mixed: Vec<(i64, SnapshotState, u16)> = (1000..3000)
        .map(|o| (o, if o % 10 == 0 { K } else { V }, 1))
        .collect();
    let before = s.file_bytes();
    s.write_batch(&[w(&k, upd(true, 1000, 3000, &mixed))])
        .unwrap();
    let more_runs = (s.file_bytes() - before - one) / 15;
    assert_eq!(more_runs, 399, "400 runs: one per change of state");
    drop(s);
    let s = open(dir.path());
    assert_eq!(s.get("g", "t", 0).unwrap().records, mixed);
}

/// The bytes of one update record's value, as `docs/storage.md` shows them.
#[test]
fn an_update_record_has_the_documented_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(dir.path());
    let u = upd(false, 10, 13, &[(10, V, 1), (11, V, 1), (12, K, 1)]);
    s.write_batch(&[w(&key("g", "t", 7), u)]).unwrap();
    let raw = std::fs::read(file(dir.path())).unwrap();
    assert_eq!(raw[..8], *b"FLMSHR\x00\x01");
    let records: Vec<_> = RecordIter::new(&raw[8..]).map(|r| r.unwrap()).collect();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].offset, 0);
    let (k, v) = records[0].key_value().unwrap();
    assert_eq!(k, Some(&b"g"[..]));
    let mut want = vec![1u8, 0, 1, b't', 0, 0, 0, 7, 0];
    want.extend(10i64.to_be_bytes());
    want.extend(13i64.to_be_bytes());
    want.extend(2u32.to_be_bytes());
    want.extend(10i64.to_be_bytes());
    want.extend(2u32.to_be_bytes());
    want.extend([0u8, 0, 1]);
    want.extend(12i64.to_be_bytes());
    want.extend(1u32.to_be_bytes());
    want.extend([1u8, 0, 1]);
    assert_eq!(v.unwrap(), &want[..]);
}

#[test]
fn a_torn_last_record_is_cut_at_every_byte_and_the_file_stays_appendable() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(dir.path());
    let mut m = Model::new();
    let k = key("g", "t", 0);
    write(
        &mut s,
        &mut m,
        vec![w(&k, upd(true, 0, 4, &[(0, V, 1), (2, V, 1)]))],
    );
    write(
        &mut s,
        &mut m,
        vec![w(&k, upd(false, 0, 6, &[(4, V, 1), (5, V, 1)]))],
    );
    let kept = m.clone();
    let good = usize::try_from(s.file_bytes()).unwrap();
    write(
        &mut s,
        &mut m,
        vec![w(&k, upd(false, 2, 6, &[(0, K, 1), (4, R, 3)]))],
    );
    let end = usize::try_from(s.file_bytes()).unwrap();
    drop(s);
    for cut in good..end {
        let d = copy_cut(dir.path(), cut);
        let mut s = open(d.path());
        assert_holds(&s, &kept);
        assert_eq!(
            std::fs::metadata(file(d.path())).unwrap().len(),
            good as u64,
            "cut {cut}"
        );
        // Appendable after the cut: a new write is read back after a reopen.
        let mut again = kept.clone();
        write(
            &mut s,
            &mut again,
            vec![w(&k, upd(false, 0, 7, &[(6, V, 1)]))],
        );
        drop(s);
        assert_holds(&open(d.path()), &again);
    }
    // A file cut inside its header starts again, empty.
    let d = copy_cut(dir.path(), 5);
    assert!(open(d.path()).is_empty());
    assert_eq!(std::fs::read(file(d.path())).unwrap(), SHARE_MAGIC);
}

#[test]
fn a_flipped_byte_stops_the_replay_at_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(dir.path());
    let mut m = Model::new();
    let k = key("g", "t", 0);
    write(
        &mut s,
        &mut m,
        vec![w(&k, upd(true, 0, 3, &[(0, V, 1), (1, K, 1)]))],
    );
    let first = m.clone();
    let at = usize::try_from(s.file_bytes()).unwrap();
    write(&mut s, &mut m, vec![w(&k, upd(false, 0, 5, &[(3, V, 1)]))]);
    let next = usize::try_from(s.file_bytes()).unwrap();
    write(
        &mut s,
        &mut m,
        vec![w(&key("h", "t", 1), upd(true, 9, 9, &[]))],
    );
    drop(s);
    let raw = std::fs::read(file(dir.path())).unwrap();
    for pos in at..next {
        let d = tempfile::tempdir().unwrap();
        let mut bad = raw.clone();
        bad[pos] ^= 0x20;
        std::fs::write(file(d.path()), &bad).unwrap();
        let r = check_share_file(&file(d.path())).unwrap().unwrap();
        assert_eq!(
            r.damage.map(|p| p.position),
            Some(Some(at as u64)),
            "byte {pos}"
        );
        assert_eq!(
            std::fs::read(file(d.path())).unwrap(),
            bad,
            "checked, not changed"
        );
        let s = open(d.path());
        assert_holds(&s, &first);
        assert_eq!(s.get("h", "t", 1), None, "nothing after the damaged record");
        assert_eq!(s.file_bytes(), at as u64, "byte {pos}");
    }
}

#[test]
fn the_file_is_checked_without_being_changed() {
    let dir = tempfile::tempdir().unwrap();
    assert!(check_share_file(&file(dir.path())).unwrap().is_none());
    let mut s = open(dir.path());
    s.write_batch(&[
        w(&key("g", "t", 0), upd(true, 4, 6, &[(4, V, 2)])),
        w(&key("g", "t", 1), upd(true, 0, 0, &[])),
    ])
    .unwrap();
    s.remove_partition("g", "t", 1).unwrap();
    drop(s);
    let r = check_share_file(&file(dir.path())).unwrap().unwrap();
    assert_eq!((r.version, r.records), (1, 3));
    assert_eq!(r.partitions, vec![(key("g", "t", 0), 4, 1)]);
    assert!(r.damage.is_none());
    std::fs::write(file(dir.path()), b"FLMSHR\x00\x07").unwrap();
    let d = check_share_file(&file(dir.path()))
        .unwrap()
        .unwrap()
        .damage
        .unwrap();
    assert!(d.what.contains("newer"), "{d}");
}

#[test]
fn a_newer_or_foreign_file_is_refused_and_left_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    for bytes in [&b"FLMSHR\x00\x02"[..], b"FLMOFS\x00\x02", b"something else"] {
        std::fs::write(file(dir.path()), bytes).unwrap();
        let e = ShareStore::open(dir.path(), FsyncPolicy::Never).unwrap_err();
        assert!(
            e.to_string().contains("newer Flume") || e.to_string().contains("bad magic"),
            "{e}"
        );
        assert_eq!(std::fs::read(file(dir.path())).unwrap(), bytes);
    }
}

#[test]
fn removed_groups_partitions_and_topics_stay_removed_after_reopen_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(dir.path());
    let mut m = Model::new();
    let keys = [
        key("g1", "t", 0),
        key("g1", "t", 1),
        key("g1", "u", 0),
        key("g2", "t", 0),
        key("g2", "u", 0),
        key("g3", "v", 2),
    ];
    let all: Vec<ShareWrite> = keys
        .iter()
        .map(|k| w(k, upd(true, 1, 3, &[(1, V, 1), (2, K, 1)])))
        .collect();
    write(&mut s, &mut m, all);
    s.remove_group("g1").unwrap();
    m.retain(|k, _| k.0 != "g1");
    s.remove_partition("g2", "t", 0).unwrap();
    m.remove(&key("g2", "t", 0));
    s.remove_topic("u").unwrap();
    m.retain(|k, _| k.1 != "u");
    assert_holds(&s, &m);
    assert_eq!(s.groups(), vec!["g3".to_owned()]);
    // Removing what is not there writes nothing.
    let size = s.file_bytes();
    s.remove_group("g1").unwrap();
    s.remove_partition("g9", "t", 0).unwrap();
    s.remove_topic("nope").unwrap();
    assert_eq!(s.file_bytes(), size);
    // A group written again after its removal is back.
    write(
        &mut s,
        &mut m,
        vec![w(&key("g1", "t", 0), upd(false, 0, 2, &[(1, R, 1)]))],
    );
    drop(s);
    let mut s = open(dir.path());
    assert_holds(&s, &m);
    s.compact().unwrap();
    drop(s);
    assert_holds(&open(dir.path()), &m);
}

#[test]
fn bounds_refuse_a_write_with_limit_reached_and_keep_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(dir.path());
    s.set_limits(2, 100);
    let mut m = Model::new();
    let sixty: Vec<(i64, SnapshotState, u16)> = (0..60).map(|o| (o, V, 1)).collect();
    write(
        &mut s,
        &mut m,
        vec![w(&key("g", "t", 0), upd(true, 0, 60, &sixty))],
    );
    write(
        &mut s,
        &mut m,
        vec![w(&key("g", "t", 1), upd(true, 0, 0, &[]))],
    );
    let size = s.file_bytes();
    // A third entry.
    let e = s
        .write_batch(&[w(&key("h", "t", 0), upd(true, 0, 0, &[]))])
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::LimitReached);
    assert!(
        e.to_string()
            .contains("2 (group, topic, partition) entries"),
        "{e}"
    );
    // Records past the total.
    let e = s
        .write_batch(&[w(&key("g", "t", 1), upd(false, 0, 50, &sixty))])
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::LimitReached);
    assert!(e.to_string().contains("100"), "{e}");
    // An update past the per-partition bound, whatever the store's room.
    let many: Vec<(i64, SnapshotState, u16)> = (0..=i64::try_from(MAX_PARTITION_RECORDS).unwrap())
        .map(|o| (o, V, 1))
        .collect();
    let e = s
        .write_batch(&[w(&key("g", "t", 0), upd(true, 0, 1 << 20, &many))])
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::LimitReached);
    assert_eq!(s.file_bytes(), size, "nothing of a refused write is stored");
    assert_holds(&s, &m);
    // In a batch of jobs only the one past the bound is refused.
    let ok1 = [ShareOp::Update(w(
        &key("g", "t", 1),
        upd(false, 0, 10, &[(0, V, 1)]),
    ))];
    let bad = [
        ShareOp::Update(w(&key("g", "t", 0), upd(false, 0, 60, &[(59, K, 1)]))),
        ShareOp::Update(w(&key("h", "t", 0), upd(true, 0, 0, &[]))),
    ];
    let ok2 = [ShareOp::RemovePartition(key("g", "t", 0))];
    let r = s.commit(&[&ok1, &bad, &ok2]);
    assert!(r[0].is_ok() && r[2].is_ok(), "{r:?}");
    assert_eq!(r[1].as_ref().unwrap_err().code(), ErrorCode::LimitReached);
    m.get_mut(&key("g", "t", 1))
        .unwrap()
        .apply(&upd(false, 0, 10, &[(0, V, 1)]));
    m.remove(&key("g", "t", 0));
    assert_holds(&s, &m);
    // Room again after the removal.
    write(
        &mut s,
        &mut m,
        vec![w(&key("h", "t", 0), upd(true, 0, 0, &[]))],
    );
    drop(s);
    assert_holds(&open(dir.path()), &m);
}

#[test]
fn a_failed_append_is_cut_back_and_nothing_of_it_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = ShareStore::open(dir.path(), FsyncPolicy::Always).unwrap();
    let mut m = Model::new();
    let k = key("g", "t", 0);
    write(&mut s, &mut m, vec![w(&k, upd(true, 0, 2, &[(0, V, 1)]))]);
    let size = s.file_bytes();
    for fault in ["write", "fsync"] {
        match fault {
            "write" => s.faults().fail_writes(1),
            _ => s.faults().fail_fsyncs(1),
        }
        let e = s
            .write_batch(&[w(&k, upd(false, 0, 3, &[(0, K, 1), (2, V, 1)]))])
            .unwrap_err();
        assert!(e.to_string().contains("injected"), "{e}");
        assert_holds(&s, &m);
        assert_eq!(std::fs::metadata(file(dir.path())).unwrap().len(), size);
    }
    write(&mut s, &mut m, vec![w(&k, upd(false, 0, 3, &[(2, V, 1)]))]);
    drop(s);
    assert_holds(&open(dir.path()), &m);
}

#[test]
fn always_fsyncs_before_returning_and_interval_at_most_once_per_interval() {
    let dir = tempfile::tempdir().unwrap();
    let k = key("g", "t", 0);
    let mut a = ShareStore::open(dir.path(), FsyncPolicy::Always).unwrap();
    a.write_batch(&[w(&k, upd(true, 0, 0, &[]))]).unwrap();
    assert_eq!(
        a.fsync_count(),
        1,
        "always: fsynced before the write returns"
    );
    a.remove_group("g").unwrap();
    assert_eq!(a.fsync_count(), 2);
    drop(a);
    let hour = std::time::Duration::from_secs(3600);
    let mut s = ShareStore::open(dir.path(), FsyncPolicy::Interval(hour)).unwrap();
    let t0 = Instant::now();
    s.write_batch(&[w(&k, upd(true, 0, 0, &[]))]).unwrap();
    assert_eq!(
        s.fsync_count(),
        0,
        "not due: the store was synced when opened"
    );
    s.sync_if_due(t0 + hour).unwrap();
    assert_eq!(s.fsync_count(), 1, "due once the interval has passed");
    s.sync_if_due(t0 + 3 * hour).unwrap();
    assert_eq!(s.fsync_count(), 1, "nothing written since: no fsync");
}

/// Copies the store's directory (what a crash at this point leaves).
fn copy_dir(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.path().join(e.file_name())).unwrap();
    }
    to
}

/// Many small updates to a few partitions.
fn churn(s: &mut ShareStore, m: &mut Model, rounds: i64) {
    for i in 0..rounds {
        let k = key("g", "t", i32::try_from(i % 3).unwrap());
        let u = upd(false, i / 2, i + 10, &[(i + 9, V, 1), (i / 2 + 1, K, 2)]);
        write(s, m, vec![w(&k, u)]);
    }
}

#[test]
fn compaction_keeps_the_state_and_a_crash_at_any_step_leaves_a_whole_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(dir.path());
    let mut m = Model::new();
    churn(&mut s, &mut m, 200);
    let big = s.file_bytes();
    let copies: Arc<Mutex<Vec<(CompactStep, tempfile::TempDir)>>> = Arc::default();
    let (c, d) = (Arc::clone(&copies), dir.path().to_path_buf());
    s.set_step_hook(move |step| c.lock().unwrap().push((step, copy_dir(&d))));
    s.compact().unwrap();
    assert!(s.file_bytes() < big / 4, "{} of {big}", s.file_bytes());
    assert_eq!(s.file_bytes(), s.live_bytes());
    let steps: Vec<CompactStep> = copies.lock().unwrap().iter().map(|c| c.0).collect();
    use CompactStep::*;
    assert_eq!(steps, vec![Written, Synced, Renamed, Done]);
    for (step, copy) in copies.lock().unwrap().iter() {
        let tmp_left = copy.path().join("share.log.tmp").exists();
        assert_eq!(tmp_left, matches!(step, Written | Synced), "{step:?}");
        let mut c = open(copy.path());
        assert_holds(&c, &m);
        assert!(
            !copy.path().join("share.log.tmp").exists(),
            "removed on open"
        );
        // And it goes on from there.
        let mut after = m.clone();
        churn(&mut c, &mut after, 5);
        drop(c);
        assert_holds(&open(copy.path()), &after);
    }
    // Appends after the compaction go to the new file.
    churn(&mut s, &mut m, 20);
    drop(s);
    assert_holds(&open(dir.path()), &m);
}

#[test]
fn a_failed_compaction_leaves_the_old_file_and_the_store_working() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = ShareStore::open(dir.path(), FsyncPolicy::Always).unwrap();
    let mut m = Model::new();
    churn(&mut s, &mut m, 60);
    for fault in ["write", "fsync"] {
        let size = s.file_bytes();
        match fault {
            "write" => s.faults().fail_writes(1),
            _ => s.faults().fail_fsyncs(1),
        }
        let e = s.compact().unwrap_err();
        assert!(e.to_string().contains("injected"), "{e}");
        assert_eq!(s.file_bytes(), size);
        assert!(!dir.path().join("share.log.tmp").exists());
        churn(&mut s, &mut m, 3);
        assert_holds(&s, &m);
    }
    // A failed directory fsync after the rename: the compaction stands, and
    // the next fsync of an append does the directory first.
    s.faults().fail_dir_fsyncs(1);
    s.compact().unwrap();
    assert!(s.dir_unsynced);
    churn(&mut s, &mut m, 1);
    assert!(!s.dir_unsynced);
    drop(s);
    assert_holds(&open(dir.path()), &m);
}

#[test]
fn the_file_is_compacted_when_four_times_its_live_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(dir.path());
    s.set_compact_min(4096);
    let mut m = Model::new();
    let mut most = 0;
    for _ in 0..20 {
        churn(&mut s, &mut m, 50);
        most = most.max(s.file_bytes());
        let live = s.live_bytes();
        assert!(
            s.file_bytes() <= (4 * live).max(4096) * 5 / 4 + 200,
            "{} with {live} live",
            s.file_bytes()
        );
    }
    // 1000 writes of about 95 bytes each went in.
    assert!(
        most < 10_000,
        "compacted along the way: at most {most} bytes"
    );
    drop(s);
    assert_holds(&open(dir.path()), &m);
}

#[test]
fn the_updates_of_a_share_partition_replay_to_its_snapshot() {
    // Updates as the state machine gives them, through the file and back.
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(dir.path());
    let config = ShareConfig::default();
    let mut p = SharePartition::new(config, 100);
    let offsets: Vec<i64> = (100..140).collect();
    let runs = p.acquire("m", &offsets, 140, 40, 0);
    assert_eq!(runs.len(), 1);
    let mut store = |p: &mut SharePartition| {
        if let Some(u) = p.take_update() {
            s.write_batch(&[("g".into(), "t".into(), 0, u)]).unwrap();
        }
    };
    store(&mut p);
    p.acknowledge("m", 100, 104, AckType::Accept, 1).unwrap();
    p.acknowledge("m", 110, 119, AckType::Release, 1).unwrap();
    p.acknowledge("m", 120, 121, AckType::Reject, 1).unwrap();
    store(&mut p);
    drop(s);
    let s = open(dir.path());
    let kept = s.get("g", "t", 0).unwrap();
    assert_eq!(kept, p.snapshot());
    let back = SharePartition::restore(config, &kept);
    assert_eq!(back.start_offset(), 105);
    assert_eq!(back.snapshot(), p.snapshot());
}

/// A quick timing of recovery, printed (`--nocapture`), not asserted:
/// 10,000 share-partitions, each a full state of 100 in-flight records in
/// mixed states and five partial updates.
#[test]
fn recovery_of_ten_thousand_share_partitions_is_timed() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(dir.path());
    s.set_limits(MAX_SHARE_PARTITIONS, MAX_KEPT_RECORDS);
    let n = 10_000;
    let mut batch = Vec::new();
    for i in 0..n {
        let k = key(
            &format!("group-{}", i % 100),
            &format!("topic-{}", i / 100),
            i % 7,
        );
        let base = i64::from(i) * 1000;
        let records: Vec<(i64, SnapshotState, u16)> = (base..base + 100)
            .map(|o| {
                (
                    o,
                    if o % 7 == 0 { K } else { V },
                    1 + u16::try_from(o % 3).unwrap(),
                )
            })
            .collect();
        batch.push(w(&k, upd(true, base, base + 100, &records)));
        if batch.len() == 500 {
            s.write_batch(&batch).unwrap();
            batch.clear();
        }
    }
    for round in 0..5i64 {
        for i in 0..n {
            let k = key(
                &format!("group-{}", i % 100),
                &format!("topic-{}", i / 100),
                i % 7,
            );
            let base = i64::from(i) * 1000;
            let o = base + 100 + round;
            batch.push(w(
                &k,
                upd(false, base + round, o + 1, &[(o, V, 1), (base + 50, R, 5)]),
            ));
            if batch.len() == 500 {
                s.write_batch(&batch).unwrap();
                batch.clear();
            }
        }
    }
    let bytes = s.file_bytes();
    let live = s.live_bytes();
    drop(s);
    let started = Instant::now();
    let s = open(dir.path());
    let took = started.elapsed();
    assert_eq!(s.len(), 10_000);
    println!(
        "share-state recovery: {} share-partitions, {} records kept, file {bytes} bytes ({live} live), open took {took:?}",
        s.len(),
        s.kept
    );
}

// ---- replay against ShareSnapshot::apply ----

#[derive(Debug, Clone)]
enum Step {
    Write(Vec<(u8, ShareUpdate)>),
    RemoveGroup(u8),
    RemovePartition(u8),
    RemoveTopic(u8),
    Reopen,
    Compact,
}

/// One of 8 keys: 2 groups, 2 topics, 2 partitions.
fn key_of(i: u8) -> ShareKey {
    key(
        &format!("g{}", i & 1),
        &format!("t{}", (i >> 1) & 1),
        i32::from(i >> 2 & 1),
    )
}

fn state() -> impl Strategy<Value = SnapshotState> {
    prop_oneof![Just(V), Just(K), Just(R)]
}

fn update() -> impl Strategy<Value = ShareUpdate> {
    let full = (0i64..50, 0i64..40)
        .prop_flat_map(|(start, len)| {
            (
                Just(start),
                Just(start + len),
                proptest::collection::btree_map(
                    start..start + len.max(1),
                    (state(), 0u16..4),
                    0..30,
                ),
            )
        })
        .prop_map(|(start, end, recs)| {
            let records = recs
                .into_iter()
                .filter(|(o, _)| *o < end)
                .map(|(o, (s, d))| (o, s, d))
                .collect::<Vec<_>>();
            upd(true, start, end, &records)
        });
    // Partial updates as anything: out of range, unsorted, repeated offsets.
    let partial = (
        0i64..60,
        0i64..100,
        proptest::collection::vec((0i64..100, state(), 0u16..4), 0..20),
    )
        .prop_map(|(start, end, records)| upd(false, start, end, &records));
    prop_oneof![1 => full, 3 => partial]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => proptest::collection::vec((0u8..8, update()), 1..4).prop_map(Step::Write),
        1 => (0u8..2).prop_map(Step::RemoveGroup),
        1 => (0u8..8).prop_map(Step::RemovePartition),
        1 => (0u8..2).prop_map(Step::RemoveTopic),
        1 => Just(Step::Reopen),
        1 => Just(Step::Compact),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn replay_equals_applying_the_updates_in_memory(steps in proptest::collection::vec(step(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open(dir.path());
        s.set_compact_min(1500);
        let mut m = Model::new();
        for st in steps {
            match st {
                Step::Write(ups) => {
                    let ws: Vec<ShareWrite> = ups.into_iter().map(|(i, u)| w(&key_of(i), u)).collect();
                    s.write_batch(&ws).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    for (g, t, p, u) in &ws {
                        m.entry(key(g, t, *p)).or_default().apply(u);
                    }
                }
                Step::RemoveGroup(g) => {
                    let g = format!("g{g}");
                    s.remove_group(&g).unwrap();
                    m.retain(|k, _| k.0 != g);
                }
                Step::RemovePartition(i) => {
                    let k = key_of(i);
                    s.remove_partition(&k.0, &k.1, k.2).unwrap();
                    m.remove(&k);
                }
                Step::RemoveTopic(t) => {
                    let t = format!("t{t}");
                    s.remove_topic(&t).unwrap();
                    m.retain(|k, _| k.1 != t);
                }
                Step::Reopen => {
                    drop(s);
                    s = open(dir.path());
                    s.set_compact_min(1500);
                }
                Step::Compact => s.compact().unwrap(),
            }
            prop_assert_eq!(s.len(), m.len());
            for ((g, t, p), snap) in &m {
                prop_assert_eq!(s.get(g, t, *p), Some(snap.clone()), "{}/{}/{}", g, t, p);
            }
        }
        drop(s);
        let s = open(dir.path());
        prop_assert_eq!(s.len(), m.len());
        for ((g, t, p), snap) in &m {
            prop_assert_eq!(s.get(g, t, *p), Some(snap.clone()), "after reopen: {}/{}/{}", g, t, p);
        }
        let kept: usize = m.values().map(|v| v.records.len()).sum();
        prop_assert_eq!(s.kept, kept);
    }
}

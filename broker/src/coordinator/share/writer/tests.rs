//! The share-state writer: a write is answered once stored, writes waiting
//! behind a busy writer share one fsync, the queue is bounded, shutdown.

use crate::coordinator::offsets::finish;
use std::time::{Duration, Instant};

use flume_protocol::ErrorCode;
use flume_rt as rt;
use flume_rt::sync::lock;

use super::*;
use crate::coordinator::share::partition::{ShareUpdate, SnapshotState};

fn update(g: &str, p: i32, end: i64) -> ShareWrite {
    (
        g.to_owned(),
        "t".to_owned(),
        p,
        ShareUpdate {
            full: false,
            state: ShareSnapshot {
                start_offset: 0,
                end_offset: end,
                records: vec![(end - 1, SnapshotState::Available, 1)],
            },
        },
    )
}

fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_write_is_answered_once_stored_and_synced() {
    let dir = tempfile::tempdir().unwrap();
    let s = ShareState::open(dir.path(), FsyncPolicy::Always).unwrap();
    rt::block_on(s.write(vec![update("g", 0, 5), update("g", 1, 3)])).unwrap();
    assert_eq!(
        s.fsync_count(),
        1,
        "one fsync for the write, before its answer"
    );
    assert_eq!(s.get("g", "t", 0).unwrap().end_offset, 5);
    assert_eq!(s.partitions_of("g"), vec![("t".into(), 0), ("t".into(), 1)]);
    rt::block_on(s.remove_partition("g", "t", 1)).unwrap();
    rt::block_on(s.remove_topic("u")).unwrap();
    s.apply_now(&[ShareOp::Update(update("h", 0, 2))]).unwrap();
    assert_eq!(s.groups(), vec!["g".to_owned(), "h".to_owned()]);
    rt::block_on(s.remove_group("h")).unwrap();
    rt::block_on(s.shutdown());
    let e = rt::block_on(s.write(vec![update("g", 0, 6)])).unwrap_err();
    assert_eq!(e.code(), ErrorCode::ShuttingDown);
    drop(s);
    let back = ShareStore::open(dir.path(), FsyncPolicy::Never).unwrap();
    assert_eq!(back.groups(), vec!["g".to_owned()]);
    assert_eq!(back.get("g", "t", 0).unwrap().end_offset, 5);
    assert_eq!(back.get("g", "t", 1), None);
}

#[test]
fn writes_waiting_behind_a_busy_writer_share_the_next_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let s = ShareState::open(dir.path(), FsyncPolicy::Always).unwrap();
    // Holding the store stalls the writer inside its first batch.
    let held = lock(s.store());
    let first = s
        .try_queue(vec![ShareOp::Update(update("g0", 0, 1))])
        .unwrap();
    wait_until("the writer to take the first write", || s.queued() == 0);
    let rest: Vec<_> = (1..=10)
        .map(|i| {
            s.try_queue(vec![ShareOp::Update(update(&format!("g{i}"), 0, 1))])
                .unwrap()
        })
        .collect();
    assert_eq!(s.queued(), 10);
    assert_eq!(s.get("g0", "t", 0), None, "not visible before it is stored");
    drop(held);
    rt::block_on(finish(first)).unwrap();
    for rx in rest {
        rt::block_on(finish(rx)).unwrap();
    }
    // One for the first write and one for the ten behind it; or one in all
    // when the writer gathered the ten into its first batch before it
    // reached the held store (the scheduler decides): never one per write.
    let fsyncs = s.fsync_count();
    assert!(
        (1..=2).contains(&fsyncs),
        "{fsyncs} fsyncs: the ten behind the first share one"
    );
    assert_eq!(s.groups().len(), 11);
    rt::block_on(s.shutdown());
}

#[test]
fn a_full_queue_makes_writers_wait_for_room() {
    let dir = tempfile::tempdir().unwrap();
    let s = std::sync::Arc::new(ShareState::open(dir.path(), FsyncPolicy::Never).unwrap());
    let held = lock(s.store());
    let first = s
        .try_queue(vec![ShareOp::Update(update("g", 0, 1))])
        .unwrap();
    wait_until("the writer to take the first write", || s.queued() == 0);
    let end = i64::try_from(SHARE_QUEUE_CAPACITY).unwrap() + 1;
    let queued: Vec<_> = (2..=end)
        .map(|e| {
            s.try_queue(vec![ShareOp::Update(update("g", 0, e))])
                .unwrap()
        })
        .collect();
    assert!(
        matches!(
            s.try_queue(vec![ShareOp::Update(update("g", 0, 1))]),
            Err(NotQueued::Full(_))
        ),
        "bounded"
    );
    // A writer that finds the queue full waits for room.
    let s2 = std::sync::Arc::clone(&s);
    let waiting = rt::spawn(async move { s2.write(vec![update("g", 0, end + 1)]).await });
    drop(held);
    rt::block_on(finish(first)).unwrap();
    for rx in queued {
        rt::block_on(finish(rx)).unwrap();
    }
    rt::block_on(waiting).unwrap();
    assert_eq!(s.get("g", "t", 0).unwrap().end_offset, end + 1);
    rt::block_on(s.shutdown());
}

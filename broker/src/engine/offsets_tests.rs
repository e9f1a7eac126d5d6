//! The offsets writer inside a running engine: lock-free heartbeats and
//! joins while a commit waits for its fsync, group commit, fsync policies.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::domain::Assignor;
use crate::domain::{JoinSpec, Member, TopicPartition};

use flume_protocol::ErrorCode;
use flume_rt as rt;
use flume_rt::sync::lock;

use crate::config::{BrokerConfig, TopicConfig};
use crate::coordinator::offsets::*;
use crate::engine::Engine;
use crate::storage::FsyncPolicy;

fn engine(dir: &Path, fsync: FsyncPolicy) -> Arc<Engine> {
    let mut c = BrokerConfig::new(dir);
    c.fsync = fsync;
    c.tick = Duration::from_millis(10);
    let e = Engine::open(c).unwrap();
    e.records()
        .create_topic(
            "t",
            TopicConfig {
                partitions: 2,
                ..TopicConfig::default()
            },
        )
        .unwrap();
    e
}

/// Commits `offset` for partition 0 of "t" outside group membership.
async fn commit_at(e: &Engine, group: &str, offset: i64) -> Result<Vec<ErrorCode>, ErrorCode> {
    let member = Member {
        group,
        member_id: "",
        generation: -1,
    };
    e.groups()
        .commit_offsets(member, &[(TopicPartition::new("t", 0), offset)])
        .await
}

fn join(group: &str) -> JoinSpec {
    JoinSpec {
        group: group.into(),
        member_id: String::new(),
        topics: vec!["t".into()],
        session_timeout: Duration::from_secs(10),
        rebalance_timeout: Duration::ZERO,
        assignor: Assignor::Range,
    }
}

/// A gate for the fsync hook: `entered` reports each fsync that starts;
/// every fsync waits until `release` is dropped (at most 10 s, so a
/// failing test cannot hang).
fn gate(e: &Engine) -> (mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<()>();
    let entered_tx = Mutex::new(entered_tx);
    let release_rx = Mutex::new(release_rx);
    e.groups().offsets().set_fsync_hook(Arc::new(move || {
        let _ = lock(&entered_tx).send(());
        let _ = lock(&release_rx).recv_timeout(Duration::from_secs(10));
        Ok(())
    }));
    (entered, release)
}

/// Runs `f` on its own thread; its result, or None if it took longer than `limit`.
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).ok()
}

#[test]
fn a_commit_stuck_in_fsync_stalls_neither_heartbeats_nor_joins() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path(), FsyncPolicy::Always);
    let member = rt::block_on(rt::timeout(
        Duration::from_secs(5),
        e.groups().join_group(join("g1")),
    ))
    .expect("first join completes")
    .unwrap();
    let (entered, release) = gate(&e);
    let ec = Arc::clone(&e);
    let stuck = rt::spawn(async move { commit_at(&ec, "tools", 5).await });
    entered
        .recv_timeout(Duration::from_secs(5))
        .expect("the commit reaches its fsync");

    let eh = Arc::clone(&e);
    let hb = within(Duration::from_secs(1), move || {
        eh.groups()
            .heartbeat("g1", &member.member_id, member.generation)
    });
    let ej = Arc::clone(&e);
    let joined = within(Duration::from_secs(1), move || {
        rt::block_on(rt::timeout(
            Duration::from_secs(5),
            ej.groups().join_group(join("g2")),
        ))
    });
    // Not acknowledged (nor visible) before it is durable.
    let visible_early = e.groups().committed("tools", "t", 0);
    drop(release);
    assert_eq!(
        hb,
        Some(Ok(())),
        "a heartbeat completes while a commit waits for its fsync"
    );
    assert!(
        matches!(joined, Some(Some(Ok(_)))),
        "a JOIN of another group completes while a commit waits for its fsync: {joined:?}"
    );
    assert_eq!(visible_early, None);
    let r = rt::block_on(stuck).unwrap();
    assert!(r.iter().all(|p| p.is_ok()));
    assert_eq!(e.groups().committed("tools", "t", 0), Some(5));
    rt::block_on(e.shutdown());
}

#[test]
fn commits_waiting_behind_an_fsync_share_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path(), FsyncPolicy::Always);
    let (entered, release) = gate(&e);
    let ec = Arc::clone(&e);
    let first = rt::spawn(async move { commit_at(&ec, "g0", 1).await });
    entered.recv_timeout(Duration::from_secs(5)).unwrap();
    let before = e.groups().offsets().fsync_count();
    let rest: Vec<_> = (1..=10)
        .map(|i| {
            let ec = Arc::clone(&e);
            rt::spawn(async move { commit_at(&ec, &format!("g{i}"), i).await })
        })
        .collect();
    // Wait until all ten are queued behind the stuck writer.
    let deadline = Instant::now() + Duration::from_secs(5);
    while e.groups().offsets().queued() < 10 {
        assert!(Instant::now() < deadline, "commits did not queue");
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(release);
    rt::block_on(first).unwrap();
    for t in rest {
        rt::block_on(t).unwrap();
    }
    assert_eq!(before, 0);
    assert_eq!(
        e.groups().offsets().fsync_count(),
        2,
        "one fsync for the first commit, one for the ten queued behind it"
    );
    for i in 0..=10 {
        assert_eq!(
            e.groups().committed(&format!("g{i}"), "t", 0),
            Some(i.max(1))
        );
    }
    rt::block_on(e.shutdown());
}

/// A full commit queue makes further commits wait for room (nothing is
/// dropped or refused); they complete once the writer moves on.
#[test]
fn a_full_commit_queue_makes_commits_wait_for_room() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path(), FsyncPolicy::Always);
    let (entered, release) = gate(&e);
    let ec = Arc::clone(&e);
    let first = rt::spawn(async move { commit_at(&ec, "g", 0).await });
    entered.recv_timeout(Duration::from_secs(5)).unwrap();
    let n = i64::try_from(COMMIT_QUEUE_CAPACITY).unwrap() + 1;
    let waiting: Vec<_> = (1..=n)
        .map(|i| {
            let ec = Arc::clone(&e);
            rt::spawn(async move { commit_at(&ec, "g", i).await })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    while e.groups().offsets().queued() < COMMIT_QUEUE_CAPACITY {
        assert!(Instant::now() < deadline, "the queue did not fill");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        e.groups().offsets().queued(),
        COMMIT_QUEUE_CAPACITY,
        "bounded"
    );
    drop(release);
    rt::block_on(first).unwrap();
    for t in waiting {
        rt::block_on(t).unwrap();
    }
    let c = e.groups().committed("g", "t", 0).unwrap();
    assert!((1..=n).contains(&c), "{c}");
    rt::block_on(e.shutdown());
}

#[test]
fn interval_policy_fsyncs_committed_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path(), FsyncPolicy::Interval(Duration::from_millis(20)));
    rt::block_on(commit_at(&e, "g", 3)).unwrap();
    // The ticker (every 10 ms) fsyncs what is older than the interval.
    let deadline = Instant::now() + Duration::from_secs(5);
    while e.groups().offsets().fsync_count() == 0 {
        assert!(Instant::now() < deadline, "committed offsets never fsynced");
        std::thread::sleep(Duration::from_millis(2));
    }
    rt::block_on(e.shutdown());
}

/// Auto-creation (first PRODUCE or JOIN_GROUP of a topic) does its file
/// work on the blocking pool, not on the thread running the request.
#[test]
fn auto_creation_does_its_file_work_off_the_calling_thread() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path(), FsyncPolicy::Never);
    let name = format!("auto-{}", std::process::id());
    let caller = std::thread::current().id();
    rt::block_on(e.records().auto_create(&name)).unwrap();
    let threads: Vec<_> = lock(&crate::engine::FILE_WORK_THREADS)
        .iter()
        .filter(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .collect();
    assert_eq!(threads.len(), 1);
    assert_ne!(threads[0], caller, "file work ran on the request's thread");
    assert!(e.records().topic(&name).is_some());
}

/// A failed fsync answers STORAGE_ERROR, and the commit is neither
/// visible nor found in the file after a restart.
#[test]
fn a_failed_fsync_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path(), FsyncPolicy::Always);
    rt::block_on(commit_at(&e, "g", 1)).unwrap();
    let fail = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let f = Arc::clone(&fail);
    e.groups().offsets().set_fsync_hook(Arc::new(move || {
        if f.swap(false, Ordering::AcqRel) {
            Err(std::io::Error::other("injected fsync failure"))
        } else {
            Ok(())
        }
    }));
    let err = rt::block_on(commit_at(&e, "g", 2)).unwrap_err();
    assert_eq!(err, ErrorCode::StorageError);
    assert_eq!(e.groups().committed("g", "t", 0), Some(1));
    rt::block_on(e.shutdown());
    drop(e);
    let s = OffsetStore::open(&dir.path().join("__consumer_offsets"), FsyncPolicy::Never).unwrap();
    assert_eq!(
        s.get("g", "t", 0),
        Some(1),
        "the failed commit is not in the file"
    );
}

#[test]
fn never_policy_leaves_commits_to_the_os() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path(), FsyncPolicy::Never);
    rt::block_on(commit_at(&e, "g", 3)).unwrap();
    assert_eq!(e.groups().offsets().fsync_count(), 0);
    assert_eq!(e.groups().committed("g", "t", 0), Some(3));
}

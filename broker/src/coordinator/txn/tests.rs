//! Unit tests of the transaction coordinator: every transition with time
//! passed in, fencing, timeouts, bounds, and restarts in each state through
//! the state log (torn tails, compaction).

use super::log::{TxnLog, TxnLogError, TxnStore};
use super::*;

fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition::new(topic, partition)
}

/// A producer id source counting from 1000.
fn ids() -> impl FnMut() -> Result<i64, String> {
    let mut next = 1000;
    move || {
        next += 1;
        Ok(next - 1)
    }
}

/// Installs an outcome's step (as the engine does once it is durable) and
/// returns its answer.
macro_rules! run {
    ($c:ident, $op:expr $(,)?) => {{
        let o = $op;
        installed(&mut $c, o)
    }};
}

fn installed<T>(c: &mut TxnCoordinator, o: Outcome<T>) -> Result<T, TxnError> {
    if let Some(step) = &o.step {
        c.apply(step);
    }
    o.result
}

fn offset(o: i64) -> TxnOffset {
    TxnOffset {
        offset: o,
        leader_epoch: 3,
        metadata: Some("m".into()),
    }
}

fn state(c: &TxnCoordinator, id: &str) -> TxnState {
    c.describe(id).map_or(TxnState::Dead, |m| m.state)
}

/// A coordinator with "t1" initialised: (coordinator, producer id, epoch).
fn with_producer() -> (TxnCoordinator, i64, i16) {
    let mut c = TxnCoordinator::new(TxnLimits::default());
    let (pid, epoch) = run!(c, c.init_producer_id("t1", 60_000, None, 0, &mut ids())).unwrap();
    (c, pid, epoch)
}

#[test]
fn a_new_id_gets_a_producer_id_and_each_init_bumps_the_epoch_fencing_the_last() {
    let (mut c, pid, epoch) = with_producer();
    assert_eq!((pid, epoch), (1000, 0));
    assert_eq!(state(&c, "t1"), TxnState::Empty);
    let again = run!(c, c.init_producer_id("t1", 60_000, None, 1, &mut ids())).unwrap();
    assert_eq!(again, (1000, 1), "the same producer id, the next epoch");
    // The first producer is fenced.
    let r = run!(c, c.add_partitions("t1", pid, 0, &[tp("a", 0)], 2));
    assert!(
        matches!(
            r,
            Err(TxnError::ProducerFenced {
                epoch: 0,
                current: 1,
                ..
            })
        ),
        "{r:?}"
    );
    let r = run!(c, c.add_partitions("t1", 7, 1, &[tp("a", 0)], 2));
    assert_eq!(r, Err(TxnError::InvalidProducerIdMapping("t1".into())));
    let r = run!(c, c.add_partitions("nope", pid, 1, &[tp("a", 0)], 2));
    assert_eq!(r, Err(TxnError::InvalidProducerIdMapping("nope".into())));
    assert_eq!(state(&c, "t1"), TxnState::Empty);
}

#[test]
fn a_commit_goes_ongoing_prepare_commit_complete_commit_with_markers_and_offsets() {
    let (mut c, pid, e) = with_producer();
    run!(
        c,
        c.add_partitions("t1", pid, e, &[tp("a", 0), tp("b", 1)], 100)
    )
    .unwrap();
    let m = c.describe("t1").unwrap();
    assert_eq!((m.state, m.started_ms), (TxnState::Ongoing, 100));
    // Adding what is there already records nothing.
    let o = c.add_partitions("t1", pid, e, &[tp("a", 0)], 101);
    assert!(o.step.is_none() && o.result.is_ok());
    run!(c, c.add_partitions("t1", pid, e, &[tp("a", 1)], 102)).unwrap();
    run!(c, c.add_offsets("t1", pid, e, "g", 103)).unwrap();
    run!(
        c,
        c.commit_offsets("t1", pid, e, "g", &[(tp("in", 0), offset(42))], 104),
    )
    .unwrap();
    assert!(c.has_pending_offset("g", &tp("in", 0)));
    assert!(!c.has_pending_offset("g", &tp("in", 1)));
    let o = c.end("t1", pid, e, true, 105);
    let completion = o.step.as_ref().and_then(|s| s.completion.clone()).unwrap();
    run!(c, o).unwrap();
    assert_eq!(state(&c, "t1"), TxnState::PrepareCommit);
    assert_eq!(
        completion,
        Completion {
            transactional_id: "t1".into(),
            producer_id: pid,
            epoch: e,
            commit: true,
            partitions: vec![tp("a", 0), tp("a", 1), tp("b", 1)],
            offsets: vec![("g".into(), vec![(tp("in", 0), offset(42))])],
        }
    );
    // While the markers are written: the same end retries, the other is refused,
    // and the next transaction waits.
    assert_eq!(
        run!(c, c.end("t1", pid, e, true, 106)),
        Err(TxnError::ConcurrentTransactions("t1".into()))
    );
    assert!(matches!(
        run!(c, c.end("t1", pid, e, false, 106)),
        Err(TxnError::InvalidTxnState {
            state: TxnState::PrepareCommit,
            ..
        })
    ));
    assert_eq!(
        run!(c, c.add_partitions("t1", pid, e, &[tp("a", 0)], 106)),
        Err(TxnError::ConcurrentTransactions("t1".into()))
    );
    assert_eq!(
        run!(c, c.init_producer_id("t1", 60_000, None, 106, &mut ids())),
        Err(TxnError::ConcurrentTransactions("t1".into()))
    );
    // A stale completion report changes nothing.
    assert!(run!(c, c.complete("t1", pid, e, false, 107)).is_err());
    assert!(run!(c, c.complete("t1", pid, e + 1, true, 107)).is_err());
    run!(c, c.complete("t1", pid, e, true, 108)).unwrap();
    let m = c.describe("t1").unwrap();
    assert_eq!(m.state, TxnState::CompleteCommit);
    assert!(m.partitions.is_empty() && m.groups.is_empty() && m.started_ms == -1);
    assert!(!c.has_pending_offset("g", &tp("in", 0)));
    // A retried commit is answered as it was; an abort now is refused.
    let o = c.end("t1", pid, e, true, 109);
    assert!(o.step.is_none() && o.result.is_ok());
    assert!(run!(c, c.end("t1", pid, e, false, 109)).is_err());
    // The next transaction begins with the next add.
    run!(c, c.add_partitions("t1", pid, e, &[tp("c", 0)], 110)).unwrap();
    let m = c.describe("t1").unwrap();
    assert_eq!(
        (m.state, m.started_ms, m.partitions.len()),
        (TxnState::Ongoing, 110, 1)
    );
}

#[test]
fn an_abort_writes_abort_markers_and_drops_the_offsets() {
    let (mut c, pid, e) = with_producer();
    run!(c, c.add_offsets("t1", pid, e, "g", 1)).unwrap();
    assert_eq!(
        state(&c, "t1"),
        TxnState::Ongoing,
        "AddOffsets begins a transaction too"
    );
    run!(c, c.add_partitions("t1", pid, e, &[tp("a", 0)], 2)).unwrap();
    run!(
        c,
        c.commit_offsets("t1", pid, e, "g", &[(tp("in", 0), offset(5))], 3),
    )
    .unwrap();
    let o = c.end("t1", pid, e, false, 4);
    let done = o.step.as_ref().and_then(|s| s.completion.clone()).unwrap();
    assert!(!done.commit && done.offsets.is_empty());
    assert_eq!(done.partitions, vec![tp("a", 0)]);
    run!(c, o).unwrap();
    assert_eq!(state(&c, "t1"), TxnState::PrepareAbort);
    assert_eq!(
        run!(c, c.end("t1", pid, e, false, 5)),
        Err(TxnError::ConcurrentTransactions("t1".into()))
    );
    run!(c, c.complete("t1", pid, e, false, 6)).unwrap();
    assert_eq!(state(&c, "t1"), TxnState::CompleteAbort);
    assert!(
        run!(c, c.end("t1", pid, e, false, 7)).is_ok(),
        "a retried abort"
    );
    assert!(run!(c, c.end("t1", pid, e, true, 7)).is_err());
}

#[test]
fn offsets_need_an_open_transaction_and_their_group_added() {
    let (mut c, pid, e) = with_producer();
    let offsets = [(tp("in", 0), offset(1))];
    assert!(matches!(
        run!(c, c.commit_offsets("t1", pid, e, "g", &offsets, 1)),
        Err(TxnError::InvalidTxnState {
            state: TxnState::Empty,
            ..
        })
    ));
    run!(c, c.add_partitions("t1", pid, e, &[tp("a", 0)], 1)).unwrap();
    assert_eq!(
        run!(c, c.commit_offsets("t1", pid, e, "g", &offsets, 2)),
        Err(TxnError::GroupNotInTransaction("g".into()))
    );
    assert!(matches!(
        run!(c, c.commit_offsets("t1", pid, e + 1, "g", &offsets, 2)),
        Err(TxnError::ProducerFenced { .. })
    ));
    assert!(matches!(
        run!(c, c.end("t1", pid, e, true, 2)).and_then(|()| run!(c, c.end("t1", pid, e, true, 2))),
        Err(TxnError::ConcurrentTransactions(_))
    ));
    // An EndTxn with nothing open is refused.
    let (mut d, pid, e) = with_producer();
    assert!(matches!(
        run!(d, d.end("t1", pid, e, true, 1)),
        Err(TxnError::InvalidTxnState {
            state: TxnState::Empty,
            ..
        })
    ));
}

#[test]
fn an_init_that_finds_a_transaction_open_fences_and_aborts_it_then_the_retry_succeeds() {
    let (mut c, pid, e) = with_producer();
    run!(c, c.add_partitions("t1", pid, e, &[tp("a", 0)], 10)).unwrap();
    // A second process with the same transactional id.
    let o = c.init_producer_id("t1", 60_000, None, 20, &mut ids());
    assert_eq!(o.result, Err(TxnError::ConcurrentTransactions("t1".into())));
    let done = o.step.as_ref().and_then(|s| s.completion.clone()).unwrap();
    assert_eq!(
        (done.commit, done.epoch),
        (false, e + 1),
        "aborted under a bumped epoch"
    );
    assert_eq!(done.partitions, vec![tp("a", 0)]);
    run!(c, o).ok();
    assert_eq!(state(&c, "t1"), TxnState::PrepareAbort);
    // The zombie cannot commit.
    assert!(matches!(
        run!(c, c.end("t1", pid, e, true, 21)),
        Err(TxnError::ProducerFenced { .. })
    ));
    // Until the abort is complete the new producer retries.
    assert_eq!(
        run!(c, c.init_producer_id("t1", 60_000, None, 22, &mut ids())),
        Err(TxnError::ConcurrentTransactions("t1".into()))
    );
    run!(c, c.complete("t1", pid, e + 1, false, 23)).unwrap();
    let got = run!(c, c.init_producer_id("t1", 60_000, None, 24, &mut ids())).unwrap();
    assert_eq!(got, (pid, e + 2));
    assert_eq!(state(&c, "t1"), TxnState::Empty);
}

#[test]
fn a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced_but_may_reinit() {
    let mut c = TxnCoordinator::new(TxnLimits::default());
    let (pid, e) = run!(c, c.init_producer_id("t1", 1000, None, 0, &mut ids())).unwrap();
    run!(c, c.add_partitions("t1", pid, e, &[tp("a", 0)], 100)).unwrap();
    assert!(c.expire(1100).is_empty(), "not past the timeout yet");
    let steps = c.expire(1101);
    assert_eq!(steps.len(), 1);
    let done = steps[0].completion.clone().unwrap();
    assert_eq!((done.commit, done.epoch), (false, e + 1));
    c.apply(&steps[0]);
    assert_eq!(state(&c, "t1"), TxnState::PrepareAbort);
    assert!(c.expire(5000).is_empty(), "aborted once");
    run!(c, c.complete("t1", pid, e + 1, false, 1102)).unwrap();
    // The producer that left it is fenced...
    assert!(matches!(
        run!(c, c.add_partitions("t1", pid, e, &[tp("a", 0)], 1103)),
        Err(TxnError::ProducerFenced { .. })
    ));
    // ...and re-initialises with its producer id and epoch (KIP-360): it gets
    // the bumped epoch as it is, a retry needs no record.
    let o = c.init_producer_id("t1", 1000, Some((pid, e)), 1104, &mut ids());
    assert!(o.step.is_none());
    assert_eq!(o.result, Ok((pid, e + 1)));
    // With the current epoch it bumps; with an older one it is fenced.
    let next = run!(
        c,
        c.init_producer_id("t1", 1000, Some((pid, e + 1)), 1105, &mut ids())
    );
    assert_eq!(next, Ok((pid, e + 2)));
    assert!(matches!(
        run!(
            c,
            c.init_producer_id("t1", 1000, Some((pid, e)), 1106, &mut ids())
        ),
        Err(TxnError::ProducerFenced { .. })
    ));
    assert_eq!(
        run!(
            c,
            c.init_producer_id("t1", 1000, Some((pid, e + 1)), 1106, &mut ids())
        ),
        Ok((pid, e + 2)),
        "a retry of the bump gets the same answer"
    );
}

#[test]
fn timeouts_outside_the_broker_maximum_are_refused() {
    let c = TxnCoordinator::new(TxnLimits {
        max_timeout_ms: 5000,
        ..TxnLimits::default()
    });
    for t in [0, -1, 5001, i64::MAX] {
        let r = c.init_producer_id("t1", t, None, 0, &mut ids()).result;
        assert_eq!(
            r,
            Err(TxnError::InvalidTransactionTimeout {
                requested: t,
                max: 5000
            })
        );
    }
    assert!(c
        .init_producer_id("t1", 5000, None, 0, &mut ids())
        .result
        .is_ok());
    for bad in [String::new(), "x".repeat(1025)] {
        assert!(matches!(
            c.init_producer_id(&bad, 1000, None, 0, &mut ids()).result,
            Err(TxnError::InvalidTransactionalId { .. })
        ));
    }
    let mut failing = || Err("disk full".to_owned());
    assert_eq!(
        c.init_producer_id("t1", 1000, None, 0, &mut failing).result,
        Err(TxnError::ProducerIds("disk full".into()))
    );
}

#[test]
fn an_exhausted_epoch_gets_a_new_producer_id() {
    let meta = TxnMeta {
        transactional_id: "t1".into(),
        producer_id: 5,
        epoch: EPOCH_EXHAUSTED - 1,
        last_producer_id: -1,
        last_epoch: -1,
        state: TxnState::CompleteCommit,
        timeout_ms: 1000,
        started_ms: -1,
        updated_ms: 0,
        partitions: BTreeSet::new(),
        groups: BTreeMap::new(),
    };
    let (mut c, redo) = TxnCoordinator::recover(TxnLimits::default(), [meta], 0);
    assert!(redo.is_empty());
    let a = run!(c, c.init_producer_id("t1", 1000, None, 1, &mut ids())).unwrap();
    assert_eq!(a, (5, EPOCH_EXHAUSTED));
    let b = run!(c, c.init_producer_id("t1", 1000, Some(a), 2, &mut ids())).unwrap();
    assert_eq!(b, (1000, 0), "a new producer id");
    let m = c.describe("t1").unwrap();
    assert_eq!((m.last_producer_id, m.last_epoch), (5, EPOCH_EXHAUSTED));
    // A retry with the old producer id and epoch gets the new ones.
    assert_eq!(
        run!(c, c.init_producer_id("t1", 1000, Some(a), 3, &mut ids())),
        Ok((1000, 0))
    );
}

#[test]
fn the_bounds_refuse_with_their_own_errors_and_leave_the_state_alone() {
    let limits = TxnLimits {
        max_transactional_ids: 2,
        max_open_transactions: 1,
        max_partitions_per_transaction: 2,
        ..TxnLimits::default()
    };
    let mut c = TxnCoordinator::new(limits);
    let mut issue = ids();
    let (p1, e1) = run!(c, c.init_producer_id("t1", 1000, None, 0, &mut issue)).unwrap();
    let (p2, e2) = run!(c, c.init_producer_id("t2", 1000, None, 0, &mut issue)).unwrap();
    assert_eq!(
        run!(c, c.init_producer_id("t3", 1000, None, 0, &mut issue)),
        Err(TxnError::TooManyTransactionalIds { limit: 2 })
    );
    run!(c, c.add_partitions("t1", p1, e1, &[tp("a", 0)], 1)).unwrap();
    assert_eq!(
        run!(c, c.add_partitions("t2", p2, e2, &[tp("a", 0)], 1)),
        Err(TxnError::TooManyOpenTransactions { limit: 1 })
    );
    assert_eq!(state(&c, "t2"), TxnState::Empty);
    assert_eq!(
        run!(
            c,
            c.add_partitions("t1", p1, e1, &[tp("b", 0), tp("c", 0)], 2)
        ),
        Err(TxnError::TooManyPartitions {
            what: "partitions",
            limit: 2
        })
    );
    assert_eq!(c.describe("t1").unwrap().partitions.len(), 1, "unchanged");
    run!(c, c.add_offsets("t1", p1, e1, "g1", 3)).unwrap();
    run!(c, c.add_offsets("t1", p1, e1, "g2", 3)).unwrap();
    assert_eq!(
        run!(c, c.add_offsets("t1", p1, e1, "g3", 3)),
        Err(TxnError::TooManyPartitions {
            what: "groups",
            limit: 2
        })
    );
    let three = [
        (tp("i", 0), offset(1)),
        (tp("i", 1), offset(1)),
        (tp("i", 2), offset(1)),
    ];
    assert_eq!(
        run!(c, c.commit_offsets("t1", p1, e1, "g1", &three, 4)),
        Err(TxnError::TooManyPartitions {
            what: "offsets",
            limit: 2
        })
    );
    assert_eq!(c.counts(), (2, 1));
    // Once t1's transaction ends, t2 may open one.
    run!(c, c.end("t1", p1, e1, false, 5)).unwrap();
    run!(c, c.complete("t1", p1, e1, false, 6)).unwrap();
    assert_eq!(c.counts(), (2, 0));
    run!(c, c.add_partitions("t2", p2, e2, &[tp("a", 0)], 7)).unwrap();
    assert_eq!(c.counts(), (2, 1));
}

#[test]
fn idle_ids_are_forgotten_after_the_expiration_but_not_open_ones() {
    let limits = TxnLimits {
        id_expiration_ms: 10_000,
        ..TxnLimits::default()
    };
    let mut c = TxnCoordinator::new(limits);
    let mut issue = ids();
    run!(c, c.init_producer_id("idle", 1000, None, 0, &mut issue)).unwrap();
    let (p, e) = run!(c, c.init_producer_id("busy", 600_000, None, 0, &mut issue)).unwrap();
    run!(c, c.add_partitions("busy", p, e, &[tp("a", 0)], 0)).unwrap();
    assert!(c.expire(10_000).is_empty());
    let steps = c.expire(80_000);
    assert_eq!(
        steps.iter().map(|s| s.record.clone()).collect::<Vec<_>>(),
        vec![Some(TxnRecord::Remove("idle".into()))]
    );
    for s in &steps {
        c.apply(s);
    }
    assert!(c.describe("idle").is_none());
    assert_eq!(state(&c, "busy"), TxnState::Ongoing);
}

#[test]
fn list_filters_by_state_producer_and_age() {
    let (mut c, pid, e) = with_producer();
    run!(c, c.init_producer_id("t2", 1000, None, 0, &mut || Ok(7))).unwrap();
    run!(c, c.add_partitions("t1", pid, e, &[tp("a", 0)], 100)).unwrap();
    let names = |l: Vec<TxnListing>| {
        l.into_iter()
            .map(|t| t.transactional_id)
            .collect::<Vec<_>>()
    };
    assert_eq!(names(c.list(&[], &[], -1, 200)), vec!["t1", "t2"]);
    assert_eq!(
        names(c.list(&[TxnState::Ongoing], &[], -1, 200)),
        vec!["t1"]
    );
    assert_eq!(names(c.list(&[], &[7], -1, 200)), vec!["t2"]);
    assert_eq!(
        names(c.list(&[], &[], 100, 200)),
        vec!["t1"],
        "open for 100 ms"
    );
    assert!(c.list(&[], &[], 101, 200).is_empty());
    assert_eq!(
        TxnState::parse("PrepareCommit"),
        Some(TxnState::PrepareCommit)
    );
    assert_eq!(TxnState::parse("Nope"), None);
}

// ------------------------------------------------------------ the state log

/// A store in `dir` with "t1" driven to `target` (a committed transaction
/// with partitions a-0 and a-1 and group g's offset, or an aborted one).
fn drive(dir: &std::path::Path, target: TxnState) -> (i64, i16) {
    let (mut s, redo) = TxnStore::open(dir, TxnLimits::default(), 0).unwrap();
    assert!(redo.is_empty());
    let step = |s: &mut TxnStore, o: Outcome<()>| {
        if let Some(st) = &o.step {
            s.commit(st).unwrap();
        }
        o.result.unwrap();
    };
    let o = s
        .coordinator
        .init_producer_id("t1", 60_000, None, 1, &mut ids());
    s.commit(o.step.as_ref().unwrap()).unwrap();
    let (pid, e) = o.result.unwrap();
    if target == TxnState::Empty {
        return (pid, e);
    }
    let o = s
        .coordinator
        .add_partitions("t1", pid, e, &[tp("a", 0), tp("a", 1)], 2);
    step(&mut s, o);
    let o = s.coordinator.add_offsets("t1", pid, e, "g", 3);
    step(&mut s, o);
    let o = s
        .coordinator
        .commit_offsets("t1", pid, e, "g", &[(tp("in", 0), offset(9))], 4);
    step(&mut s, o);
    if target == TxnState::Ongoing {
        return (pid, e);
    }
    let commit = matches!(target, TxnState::PrepareCommit | TxnState::CompleteCommit);
    let o = s.coordinator.end("t1", pid, e, commit, 5);
    step(&mut s, o);
    if matches!(target, TxnState::PrepareCommit | TxnState::PrepareAbort) {
        return (pid, e);
    }
    let o = s.coordinator.complete("t1", pid, e, commit, 6);
    step(&mut s, o);
    (pid, e)
}

#[test]
fn a_restart_in_each_state_ends_every_transaction_committed_or_aborted() {
    for target in [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (pid, e) = drive(dir.path(), target);
        let (mut s, redo) = TxnStore::open(dir.path(), TxnLimits::default(), 100).unwrap();
        let m = s.coordinator.describe("t1").unwrap().clone();
        let markers = vec![tp("a", 0), tp("a", 1)];
        match target {
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                assert!(redo.is_empty(), "{target:?}: {redo:?}");
                assert_eq!((m.state, m.epoch), (target, e), "{target:?}");
            }
            TxnState::PrepareCommit => {
                assert_eq!(m.state, TxnState::PrepareCommit);
                assert_eq!(
                    redo,
                    vec![Completion {
                        transactional_id: "t1".into(),
                        producer_id: pid,
                        epoch: e,
                        commit: true,
                        partitions: markers.clone(),
                        offsets: vec![("g".into(), vec![(tp("in", 0), offset(9))])],
                    }],
                    "the commit is finished, offsets included"
                );
            }
            TxnState::PrepareAbort => {
                assert_eq!(m.state, TxnState::PrepareAbort);
                assert_eq!(redo.len(), 1);
                assert!(!redo[0].commit && redo[0].epoch == e && redo[0].partitions == markers);
                assert!(redo[0].offsets.is_empty());
            }
            TxnState::Ongoing => {
                // Aborted, under a bumped epoch, and the abort is recorded.
                assert_eq!((m.state, m.epoch), (TxnState::PrepareAbort, e + 1));
                assert_eq!(redo.len(), 1);
                assert!(!redo[0].commit && redo[0].epoch == e + 1 && redo[0].partitions == markers);
            }
            _ => unreachable!(),
        }
        // The completions are carried out and reported; a second restart finds nothing to do.
        for done in &redo {
            let o = s.coordinator.complete(
                &done.transactional_id,
                done.producer_id,
                done.epoch,
                done.commit,
                101,
            );
            s.commit(o.step.as_ref().unwrap()).unwrap();
        }
        drop(s);
        let (s, redo) = TxnStore::open(dir.path(), TxnLimits::default(), 200).unwrap();
        assert!(redo.is_empty(), "{target:?}");
        let state = s.coordinator.describe("t1").unwrap().state;
        assert!(
            matches!(
                state,
                TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
            ),
            "{target:?}: {state:?}"
        );
    }
}

#[test]
fn a_restart_while_an_ongoing_abort_was_recorded_does_not_bump_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (_, e) = drive(dir.path(), TxnState::Ongoing);
    let (_, first) = TxnStore::open(dir.path(), TxnLimits::default(), 10).unwrap();
    // Crash before the markers were written: the abort is redone, same epoch.
    let (s, second) = TxnStore::open(dir.path(), TxnLimits::default(), 20).unwrap();
    assert_eq!(first, second);
    assert_eq!(second[0].epoch, e + 1);
    assert_eq!(s.coordinator.counts(), (1, 1));
}

#[test]
fn a_torn_or_damaged_tail_is_cut_and_what_came_before_stays() {
    let dir = tempfile::tempdir().unwrap();
    drive(dir.path(), TxnState::PrepareCommit);
    let path = dir.path().join(super::log::TXN_LOG_FILE);
    let whole = std::fs::read(&path).unwrap();
    // Torn: the last record cut anywhere after its first byte.
    let (_, replayed) = TxnLog::open(dir.path()).unwrap();
    assert_eq!(replayed.states["t1"].state, TxnState::PrepareCommit);
    for cut in [1, 5, 9, 30] {
        std::fs::write(&path, &whole[..whole.len() - cut]).unwrap();
        let (log, replayed) = TxnLog::open(dir.path()).unwrap();
        assert_eq!(replayed.states["t1"].state, TxnState::Ongoing, "cut {cut}");
        let size = log.size();
        assert!(size < (whole.len() - cut) as u64, "the torn record went");
        // The cut is in the file: it holds whole records only now.
        drop(log);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
        let (again, _) = TxnLog::open(dir.path()).unwrap();
        assert_eq!(again.size(), size);
    }
    // Damaged: one flipped byte in the last record's payload.
    let mut bad = whole.clone();
    let last = bad.len() - 3;
    bad[last] ^= 0xff;
    std::fs::write(&path, &bad).unwrap();
    let (_, replayed) = TxnLog::open(dir.path()).unwrap();
    assert_eq!(replayed.states["t1"].state, TxnState::Ongoing);
    // A length that cannot be: cut as well, nothing allocated for it.
    let mut huge = whole.clone();
    huge.extend_from_slice(&u32::MAX.to_be_bytes());
    huge.extend_from_slice(&[0; 12]);
    std::fs::write(&path, &huge).unwrap();
    let (_, replayed) = TxnLog::open(dir.path()).unwrap();
    assert_eq!(replayed.states["t1"].state, TxnState::PrepareCommit);
    // Not a state log at all: refused, and said why.
    std::fs::write(&path, b"something else entirely").unwrap();
    let err = TxnLog::open(dir.path()).unwrap_err();
    assert!(matches!(err, TxnLogError::NotALog { .. }), "{err}");
    assert!(err.to_string().contains("not a transaction state log"));
}

#[test]
fn the_log_is_compacted_when_it_grows_and_replays_to_the_same_states() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, _) = TxnStore::open(dir.path(), TxnLimits::default(), 0).unwrap();
    s.log().set_compact_min_bytes(4096);
    let mut issue = ids();
    let mut sizes = Vec::new();
    for round in 0..200i64 {
        let id = format!("t{}", round % 3);
        let o = s
            .coordinator
            .init_producer_id(&id, 1000, None, round, &mut issue);
        s.commit(o.step.as_ref().unwrap()).unwrap();
        sizes.push(s.log().size());
    }
    assert!(
        sizes.windows(2).any(|w| w[1] < w[0]),
        "compacted at least once"
    );
    assert!(s.log().size() < 8192, "{}", s.log().size());
    let before: Vec<TxnMeta> = s.coordinator.all().cloned().collect();
    drop(s);
    let (s, redo) = TxnStore::open(dir.path(), TxnLimits::default(), 1000).unwrap();
    assert!(redo.is_empty());
    assert_eq!(s.coordinator.all().cloned().collect::<Vec<_>>(), before);
    assert!(!dir.path().join("txn.log.tmp").exists());
}

#[test]
fn a_failed_append_installs_nothing_and_leaves_the_file_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, _) = TxnStore::open(dir.path(), TxnLimits::default(), 0).unwrap();
    let o = s
        .coordinator
        .init_producer_id("t1", 1000, None, 0, &mut ids());
    let size = s.log().size();
    s.log().fail_next_append();
    assert!(matches!(
        s.commit(o.step.as_ref().unwrap()),
        Err(TxnLogError::Io { .. })
    ));
    assert_eq!(s.coordinator.counts(), (0, 0));
    assert_eq!(s.log().size(), size);
    s.commit(o.step.as_ref().unwrap()).unwrap();
    assert_eq!(s.coordinator.counts(), (1, 0));
    drop(s);
    let (s, _) = TxnStore::open(dir.path(), TxnLimits::default(), 1).unwrap();
    assert_eq!(s.coordinator.counts(), (1, 0));
}

#[test]
fn a_record_round_trips_and_every_truncated_prefix_is_refused() {
    let mut groups = BTreeMap::new();
    groups.insert(
        "gröup".to_owned(),
        BTreeMap::from([
            (tp("in", 0), offset(5)),
            (
                tp("in", 1),
                TxnOffset {
                    offset: i64::MAX,
                    leader_epoch: -1,
                    metadata: None,
                },
            ),
        ]),
    );
    groups.insert("empty".to_owned(), BTreeMap::new());
    let meta = TxnMeta {
        transactional_id: "tx-ü".into(),
        producer_id: 12,
        epoch: 3,
        last_producer_id: 11,
        last_epoch: i16::MAX,
        state: TxnState::PrepareCommit,
        timeout_ms: u32::MAX,
        started_ms: -1,
        updated_ms: i64::MIN,
        partitions: BTreeSet::from([tp("a", 0), tp("b", i32::MAX)]),
        groups,
    };
    for record in [TxnRecord::Put(meta), TxnRecord::Remove("gone".into())] {
        let mut payload = Vec::new();
        super::log::encode_payload(&mut payload, &record);
        assert_eq!(super::log::decode_payload(&payload), Ok(record.clone()));
        for cut in 0..payload.len() {
            assert!(
                super::log::decode_payload(&payload[..cut]).is_err(),
                "a prefix of {cut} bytes decoded"
            );
        }
        let mut longer = payload.clone();
        longer.push(0);
        assert!(
            super::log::decode_payload(&longer).is_err(),
            "trailing bytes"
        );
    }
    // An unknown kind or state byte is refused too.
    assert!(super::log::decode_payload(&[9, 0, 0]).is_err());
}

#[test]
fn a_fenced_producer_cannot_abort_its_successors_transaction() {
    let (mut c, pid, e0) = with_producer();
    let e1 = run!(c, c.init_producer_id("t1", 60_000, None, 1, &mut ids()))
        .unwrap()
        .1;
    let e2 = run!(
        c,
        c.init_producer_id("t1", 60_000, Some((pid, e1)), 2, &mut ids())
    )
    .unwrap()
    .1;
    assert_eq!((e0, e1, e2), (0, 1, 2));
    run!(c, c.add_partitions("t1", pid, e2, &[tp("a", 0)], 3)).unwrap();
    // The zombie, two epochs behind, re-initialising with what it had.
    let o = c.init_producer_id("t1", 60_000, Some((pid, e0)), 4, &mut ids());
    assert!(o.step.is_none());
    assert!(matches!(
        o.result,
        Err(TxnError::ProducerFenced {
            epoch: 0,
            current: 2,
            ..
        })
    ));
    assert_eq!(
        state(&c, "t1"),
        TxnState::Ongoing,
        "the successor's transaction goes on"
    );
}

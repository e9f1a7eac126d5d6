use std::collections::{BTreeSet, HashMap};

use proptest::prelude::*;

use super::*;

fn cfg() -> ShareConfig {
    ShareConfig {
        lock_duration_ms: 1_000,
        delivery_count_limit: 3,
        max_in_flight: 10,
    }
}

fn all(from: i64, to: i64) -> Vec<i64> {
    (from..to).collect()
}

fn run(first: i64, last: i64, delivery_count: u16) -> Acquired {
    Acquired {
        first_offset: first,
        last_offset: last,
        delivery_count,
    }
}

#[test]
fn acquires_new_records_in_runs_and_locks_them() {
    let mut p = SharePartition::new(cfg(), 0);
    assert_eq!(p.next_fetch_offset(), Some(0));
    let got = p.acquire("a", &all(0, 4), 4, 100, 0);
    assert_eq!(got, vec![run(0, 3, 1)]);
    assert_eq!(p.end_offset(), 4);
    assert_eq!(p.start_offset(), 0);
    // Another member gets the next ones, not these.
    assert_eq!(p.next_fetch_offset(), Some(4));
    assert_eq!(p.acquire("b", &all(4, 6), 6, 100, 0), vec![run(4, 5, 1)]);
    assert_eq!(p.counts().acquired, 6);
}

#[test]
fn accepting_the_lowest_records_moves_the_start() {
    let mut p = SharePartition::new(cfg(), 0);
    p.acquire("a", &all(0, 4), 4, 100, 0);
    p.acknowledge("a", 1, 2, AckType::Accept, 0).unwrap();
    assert_eq!(p.start_offset(), 0, "0 is still acquired");
    p.acknowledge("a", 0, 0, AckType::Accept, 0).unwrap();
    assert_eq!(p.start_offset(), 3);
    p.acknowledge("a", 3, 3, AckType::Reject, 0).unwrap();
    assert_eq!(p.start_offset(), 4);
    assert_eq!(p.counts(), ShareCounts::default());
    assert_eq!(p.totals().archived, 1);
}

#[test]
fn a_released_record_is_delivered_again_first_with_its_count() {
    let mut p = SharePartition::new(cfg(), 0);
    p.acquire("a", &all(0, 3), 3, 100, 0);
    p.acknowledge("a", 1, 1, AckType::Release, 0).unwrap();
    p.acknowledge("a", 0, 0, AckType::Accept, 0).unwrap();
    assert_eq!(p.next_fetch_offset(), Some(1));
    // The engine reads from 1: 1 is available again, 2 is still with a.
    let got = p.acquire("b", &all(1, 5), 5, 100, 10);
    assert_eq!(got, vec![run(1, 1, 2), run(3, 4, 1)]);
    assert!(matches!(
        p.state_of(1),
        Some((RecordState::Acquired { member, .. }, 2)) if member == "b"
    ));
    assert_eq!(p.counts().redelivered, 1);
}

#[test]
fn only_the_holder_acknowledges_and_all_or_nothing() {
    let mut p = SharePartition::new(cfg(), 0);
    p.acquire("a", &all(0, 2), 2, 100, 0);
    p.acquire("b", &all(2, 4), 4, 100, 0);
    assert_eq!(
        p.acknowledge("b", 0, 0, AckType::Accept, 0),
        Err(AckError::NotAcquired {
            offset: 0,
            member: "b".into()
        })
    );
    // 1..=2 spans a's and b's: nothing applied.
    assert!(p.acknowledge("a", 1, 2, AckType::Accept, 0).is_err());
    assert!(matches!(
        p.state_of(1),
        Some((RecordState::Acquired { .. }, 1))
    ));
    // Twice: the second is refused.
    p.acknowledge("a", 0, 1, AckType::Accept, 0).unwrap();
    assert!(p.acknowledge("a", 0, 1, AckType::Accept, 0).is_err());
    assert_eq!(
        p.acknowledge("a", 5, 4, AckType::Accept, 0),
        Err(AckError::BadRange { first: 5, last: 4 })
    );
    // Offsets never handed out.
    assert!(p.acknowledge("a", 50, 60, AckType::Accept, 0).is_err());
}

#[test]
fn a_lock_runs_out_and_the_record_comes_back() {
    let mut p = SharePartition::new(cfg(), 0);
    p.acquire("a", &all(0, 2), 2, 100, 0);
    assert_eq!(p.next_deadline(), Some(1_000));
    assert_eq!(p.expire(999), 0);
    assert_eq!(p.expire(1_000), 2);
    assert_eq!(p.next_deadline(), None);
    // a's late acknowledgement is refused: the records are not its own now.
    assert!(p.acknowledge("a", 0, 1, AckType::Accept, 1_001).is_err());
    assert_eq!(
        p.acquire("b", &all(0, 2), 2, 100, 1_001),
        vec![run(0, 1, 2)]
    );
}

#[test]
fn renewing_a_lock_keeps_the_record() {
    let mut p = SharePartition::new(cfg(), 0);
    p.acquire("a", &all(0, 1), 1, 100, 0);
    p.acknowledge("a", 0, 0, AckType::Renew, 900).unwrap();
    assert_eq!(p.expire(1_000), 0);
    assert_eq!(p.next_deadline(), Some(1_900));
    p.acknowledge("a", 0, 0, AckType::Accept, 1_500).unwrap();
    assert_eq!(p.start_offset(), 1);
}

#[test]
fn a_record_delivered_to_the_limit_is_archived() {
    let mut p = SharePartition::new(cfg(), 0);
    for delivery in 1..=3u16 {
        let got = p.acquire("a", &all(0, 1), 1, 100, 0);
        assert_eq!(got, vec![run(0, 0, delivery)]);
        if delivery < 3 {
            p.acknowledge("a", 0, 0, AckType::Release, 0).unwrap();
        } else {
            // The third delivery times out: archived, not released.
            assert_eq!(p.expire(u64::MAX), 1);
        }
    }
    assert_eq!(p.start_offset(), 1);
    assert_eq!(p.totals().archived, 1);
    assert!(p.acquire("a", &[], 1, 100, 0).is_empty());
    assert_eq!(
        p.totals(),
        ShareTotals {
            delivered: 3,
            redelivered: 2,
            released: 2,
            lock_expired: 1,
            archived: 1,
            ..ShareTotals::default()
        }
    );
}

#[test]
fn totals_count_deliveries_and_acknowledgements_by_type() {
    let mut p = SharePartition::new(cfg(), 0);
    p.acquire("a", &all(0, 6), 6, 100, 0);
    p.acknowledge("a", 0, 2, AckType::Accept, 0).unwrap();
    p.acknowledge("a", 3, 3, AckType::Reject, 0).unwrap();
    p.acknowledge("a", 4, 4, AckType::Release, 0).unwrap();
    p.acknowledge("a", 5, 5, AckType::Renew, 0).unwrap();
    // A refused acknowledgement counts nothing.
    assert!(p.acknowledge("b", 5, 5, AckType::Accept, 0).is_err());
    p.acquire("b", &all(4, 5), 5, 100, 0);
    assert_eq!(
        p.totals(),
        ShareTotals {
            delivered: 7,
            redelivered: 1,
            accepted: 3,
            released: 1,
            rejected: 1,
            lock_expired: 0,
            archived: 1,
        }
    );
}

#[test]
fn a_member_that_leaves_gives_its_records_back() {
    let mut p = SharePartition::new(cfg(), 0);
    p.acquire("a", &all(0, 2), 2, 100, 0);
    p.acquire("b", &all(2, 3), 3, 100, 0);
    assert_eq!(p.release_member("a"), 2);
    assert_eq!(p.counts().available, 2);
    assert_eq!(p.counts().acquired, 1);
    assert_eq!(p.next_fetch_offset(), Some(0));
}

#[test]
fn gaps_are_skipped_and_count_as_done() {
    let mut p = SharePartition::new(cfg(), 10);
    // Records at 10, 12, 15; the read covered up to 20.
    let got = p.acquire("a", &[10, 12, 15], 20, 100, 0);
    assert_eq!(got, vec![run(10, 10, 1), run(12, 12, 1), run(15, 15, 1)]);
    assert_eq!(p.end_offset(), 20);
    assert_eq!(p.counts().in_flight, 3);
    // A gap acknowledgement over offsets with no record is fine.
    p.acknowledge("a", 11, 11, AckType::Gap, 0).unwrap();
    p.acknowledge("a", 10, 15, AckType::Accept, 0).unwrap();
    assert_eq!(p.start_offset(), 20);
}

#[test]
fn at_most_max_in_flight_and_the_window_reopens_as_records_complete() {
    let mut p = SharePartition::new(cfg(), 0);
    let got = p.acquire("a", &all(0, 15), 15, 100, 0);
    assert_eq!(got, vec![run(0, 9, 1)]);
    assert_eq!(
        p.end_offset(),
        10,
        "stopped at the bound, not at the read's end"
    );
    assert_eq!(p.next_fetch_offset(), None);
    assert!(!p.can_acquire());
    p.acknowledge("a", 0, 1, AckType::Accept, 0).unwrap();
    assert_eq!(p.next_fetch_offset(), Some(10));
    assert_eq!(
        p.acquire("a", &all(10, 15), 15, 100, 0),
        vec![run(10, 11, 1)]
    );
    assert_eq!(p.end_offset(), 12);
}

#[test]
fn max_records_stops_an_acquisition_where_it_is() {
    let mut p = SharePartition::new(cfg(), 0);
    assert_eq!(p.acquire("a", &all(0, 8), 8, 3, 0), vec![run(0, 2, 1)]);
    assert_eq!(p.end_offset(), 3);
    assert_eq!(p.acquire("b", &all(3, 8), 8, 3, 0), vec![run(3, 5, 1)]);
}

#[test]
fn retention_past_in_flight_records_drops_them() {
    let mut p = SharePartition::new(cfg(), 0);
    p.acquire("a", &all(0, 5), 5, 100, 0);
    p.log_start_moved(3);
    assert_eq!(p.start_offset(), 3);
    assert_eq!(p.counts().in_flight, 2);
    assert!(p.acknowledge("a", 0, 0, AckType::Accept, 0).is_err());
    p.log_start_moved(100);
    assert_eq!((p.start_offset(), p.end_offset()), (100, 100));
    assert_eq!(p.next_fetch_offset(), Some(100));
}

#[test]
fn a_restart_in_each_state_keeps_done_records_done_and_brings_back_the_rest() {
    let mut p = SharePartition::new(cfg(), 0);
    p.acquire("a", &all(0, 6), 6, 100, 0);
    p.acknowledge("a", 1, 1, AckType::Accept, 0).unwrap();
    p.acknowledge("a", 2, 2, AckType::Reject, 0).unwrap();
    p.acknowledge("a", 3, 3, AckType::Release, 0).unwrap();
    // 0, 4, 5 still acquired; 3 available with one delivery.
    let snap = p.snapshot();
    assert_eq!(snap.start_offset, 0);
    assert_eq!(snap.end_offset, 6);
    let mut q = SharePartition::restore(cfg(), &snap);
    assert_eq!(q.start_offset(), 0);
    assert_eq!(q.counts().acquired, 0);
    assert_eq!(q.counts().available, 4);
    let got = q.acquire("b", &all(0, 6), 6, 100, 0);
    assert_eq!(got, vec![run(0, 0, 2), run(3, 5, 2)]);
    // Accepted and rejected ones never come back.
    assert!(matches!(
        q.state_of(1),
        Some((RecordState::Acknowledged, 1))
    ));
    assert!(matches!(q.state_of(2), Some((RecordState::Archived, 1))));
    // An empty partition's snapshot restores to its start.
    let e = SharePartition::restore(cfg(), &SharePartition::new(cfg(), 7).snapshot());
    assert_eq!((e.start_offset(), e.end_offset()), (7, 7));
}

#[test]
fn updates_carry_only_what_changed_and_add_up_to_the_state() {
    let mut p = SharePartition::new(cfg(), 5);
    let first = p.take_update().unwrap();
    assert!(first.full, "a new partition writes its start");
    let mut disk = ShareSnapshot::default();
    disk.apply(&first);
    assert_eq!(p.take_update(), None);
    p.acquire("a", &all(5, 9), 9, 100, 0);
    let u = p.take_update().unwrap();
    assert!(!u.full);
    assert_eq!(u.state.records.len(), 4);
    disk.apply(&u);
    // A renewal keeps nothing new.
    p.acknowledge("a", 5, 8, AckType::Renew, 10).unwrap();
    assert_eq!(p.take_update(), None);
    p.acknowledge("a", 6, 6, AckType::Accept, 10).unwrap();
    let u = p.take_update().unwrap();
    assert_eq!(u.state.records, vec![(6, SnapshotState::Acknowledged, 1)]);
    disk.apply(&u);
    p.acknowledge("a", 5, 5, AckType::Accept, 10).unwrap();
    disk.apply(&p.take_update().unwrap());
    assert_eq!(disk, p.snapshot());
    assert_eq!(disk.start_offset, 7);
    p.reset_to(100);
    let u = p.take_update().unwrap();
    assert!(u.full);
    disk.apply(&u);
    assert_eq!(disk, p.snapshot());
    // Restored, nothing is pending.
    let mut q = SharePartition::restore(cfg(), &disk);
    assert_eq!(q.take_update(), None);
}

#[test]
fn reset_forgets_everything_in_flight() {
    let mut p = SharePartition::new(cfg(), 0);
    p.acquire("a", &all(0, 5), 5, 100, 0);
    p.reset_to(2);
    assert_eq!((p.start_offset(), p.end_offset()), (2, 2));
    assert_eq!(p.counts(), ShareCounts::default());
}

#[test]
fn ack_codes_from_the_wire() {
    assert_eq!(AckType::from_code(0), Some(AckType::Gap));
    assert_eq!(AckType::from_code(1), Some(AckType::Accept));
    assert_eq!(AckType::from_code(2), Some(AckType::Release));
    assert_eq!(AckType::from_code(3), Some(AckType::Reject));
    assert_eq!(AckType::from_code(4), Some(AckType::Renew));
    assert_eq!(AckType::from_code(5), None);
    assert_eq!(AckType::from_code(-1), None);
}

// ---- property test against a simple model ----

#[derive(Debug, Clone)]
enum Op {
    /// Member fetches up to n records, reading a span of `span` offsets.
    Acquire { member: u8, max: usize, span: i64 },
    /// Member acknowledges each record it holds with the given kind, or
    /// picks the k-th held record.
    Ack { member: u8, pick: usize, kind: u8 },
    /// Time passes.
    Advance(u64),
    /// A member leaves.
    Leave(u8),
    /// The broker restarts from the snapshot.
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3, 1usize..6, 1i64..12).prop_map(|(member, max, span)| Op::Acquire { member, max, span }),
        5 => (0u8..3, 0usize..8, 0u8..5).prop_map(|(member, pick, kind)| Op::Ack { member, pick, kind }),
        2 => (0u64..1_500).prop_map(Op::Advance),
        1 => (0u8..3).prop_map(Op::Leave),
        1 => Just(Op::Restart),
    ]
}

/// What the model knows: which offsets are done for good, who holds what.
#[derive(Default)]
struct Model {
    accepted: BTreeSet<i64>,
    archived: BTreeSet<i64>,
    held: HashMap<i64, u8>,
}

fn member_name(m: u8) -> String {
    format!("m{m}")
}

/// Reads the log as the engine does: records in the span from the next
/// fetch offset.
fn read(
    p: &SharePartition,
    log: &BTreeSet<i64>,
    log_end: i64,
    span: i64,
) -> Option<(Vec<i64>, i64)> {
    let from = p.next_fetch_offset()?;
    let to = (from + span).min(log_end);
    Some((log.range(from..to).copied().collect(), to.max(from)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn no_record_is_accepted_twice_or_handed_out_after_it_is_done(
        gaps in proptest::collection::btree_set(0i64..40, 0..10),
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let log_end = 40i64;
        let log: BTreeSet<i64> = (0..log_end).filter(|o| !gaps.contains(o)).collect();
        let config = ShareConfig { lock_duration_ms: 1_000, delivery_count_limit: 3, max_in_flight: 8 };
        let mut p = SharePartition::new(config, 0);
        let mut m = Model::default();
        let mut now = 0u64;
        let mut last_start = 0i64;
        let mut deliveries: HashMap<i64, u16> = HashMap::new();
        // What the store holds: the updates applied as a replay does.
        let mut disk = ShareSnapshot::default();
        for op in ops {
            match op {
                Op::Acquire { member, max, span } => {
                    let Some((offsets, read_end)) = read(&p, &log, log_end, span) else { continue };
                    for r in p.acquire(&member_name(member), &offsets, read_end, max, now) {
                        for o in r.first_offset..=r.last_offset {
                            prop_assert!(log.contains(&o), "handed out a gap {o}");
                            prop_assert!(!m.accepted.contains(&o), "{o} handed out after it was accepted");
                            prop_assert!(!m.archived.contains(&o), "{o} handed out after it was archived");
                            prop_assert!(!m.held.contains_key(&o), "{o} handed to two members");
                            let d = deliveries.entry(o).or_insert(0);
                            *d += 1;
                            prop_assert_eq!(r.delivery_count, *d);
                            prop_assert!(*d <= config.delivery_count_limit);
                            m.held.insert(o, member);
                        }
                    }
                }
                Op::Ack { member, pick, kind } => {
                    let mine: Vec<i64> = {
                        let mut v: Vec<i64> = m.held.iter().filter(|(_, h)| **h == member).map(|(o, _)| *o).collect();
                        v.sort_unstable();
                        v
                    };
                    if mine.is_empty() {
                        // What a member does not hold, it cannot acknowledge.
                        let o = pick as i64;
                        prop_assert!(p.acknowledge(&member_name(member), o, o, AckType::Accept, now).is_err());
                        continue;
                    }
                    let o = mine[pick % mine.len()];
                    let kind = [AckType::Accept, AckType::Release, AckType::Reject, AckType::Renew, AckType::Accept][kind as usize];
                    p.acknowledge(&member_name(member), o, o, kind, now).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    match kind {
                        AckType::Accept => { prop_assert!(m.accepted.insert(o), "{o} accepted twice"); m.held.remove(&o); }
                        AckType::Reject => { m.archived.insert(o); m.held.remove(&o); }
                        AckType::Release => {
                            m.held.remove(&o);
                            if deliveries[&o] >= config.delivery_count_limit { m.archived.insert(o); }
                        }
                        _ => {}
                    }
                }
                Op::Advance(ms) => {
                    now += ms;
                    p.expire(now);
                    m.held.retain(|o, _| matches!(p.state_of(*o), Some((RecordState::Acquired { .. }, _))));
                    for (o, d) in &deliveries {
                        if *d >= config.delivery_count_limit && matches!(p.state_of(*o), Some((RecordState::Archived, _))) {
                            m.archived.insert(*o);
                        }
                    }
                }
                Op::Leave(member) => {
                    p.release_member(&member_name(member));
                    m.held.retain(|_, h| *h != member);
                }
                Op::Restart => {
                    p = SharePartition::restore(config, &disk);
                    m.held.clear();
                }
            }
            // Records that were archived at their limit when released.
            for (o, d) in &deliveries {
                if *d >= config.delivery_count_limit && !m.held.contains_key(o) && !m.accepted.contains(o) {
                    m.archived.insert(*o);
                }
            }
            if let Some(u) = p.take_update() {
                disk.apply(&u);
            }
            prop_assert_eq!(&disk, &p.snapshot(), "the kept state is not what the updates add up to");
            prop_assert!(p.start_offset() >= last_start, "start moved back");
            last_start = p.start_offset();
            prop_assert!(p.counts().in_flight <= config.max_in_flight);
            prop_assert_eq!(p.counts().acquired, m.held.len());
        }
        // Liveness: one member that accepts everything drains the partition.
        p.expire(u64::MAX);
        for (o, d) in &deliveries {
            if *d >= config.delivery_count_limit && m.held.contains_key(o) {
                m.archived.insert(*o);
            }
        }
        m.held.clear();
        for _ in 0..1_000 {
            let Some((offsets, read_end)) = read(&p, &log, log_end, 7) else { break };
            if offsets.is_empty() && read_end >= log_end && p.next_fetch_offset() == Some(log_end) { break }
            for r in p.acquire("drain", &offsets, read_end, 5, now) {
                for o in r.first_offset..=r.last_offset {
                    prop_assert!(m.accepted.insert(o), "{o} accepted twice");
                }
                p.acknowledge("drain", r.first_offset, r.last_offset, AckType::Accept, now)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
        }
        prop_assert_eq!(p.start_offset(), log_end);
        for o in &log {
            prop_assert!(m.accepted.contains(o) || m.archived.contains(o), "{o} neither accepted nor archived");
        }
    }
}

#[test]
fn the_read_budget_follows_the_record_size_of_the_last_read() {
    let mut p = SharePartition::new(cfg(), 0);
    assert_eq!(p.read_budget(10, 1 << 20), 1 << 20, "nothing read yet");
    p.note_read(100_000, 1_000);
    // 500 records of 100 bytes, a quarter more.
    assert_eq!(p.read_budget(500, 1 << 20), 62_500);
    assert_eq!(p.read_budget(1, 1 << 20), 16 << 10, "at least 16 KiB");
    assert_eq!(
        p.read_budget(100_000, 1 << 20),
        1 << 20,
        "at most max_bytes"
    );
    assert_eq!(p.read_budget(usize::MAX, 1 << 20), 1 << 20);
    p.note_read(0, 0);
    assert_eq!(
        p.read_budget(500, 1 << 20),
        62_500,
        "an empty read changes nothing"
    );
}

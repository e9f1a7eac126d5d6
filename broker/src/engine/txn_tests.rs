//! Transactions through a running engine (manual clock): a transaction of
//! offsets only commits them into the group; one with partitions ends with
//! its markers, which move the partition's last stable offset (an abort
//! hides its records from read_committed readers); an open one a crash left
//! is aborted at restart; a timeout aborts through the maintenance pass; the
//! state survives a restart.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use flume_protocol::ErrorCode;
use flume_rt as rt;

use super::{Engine, TxnFailure};
use crate::clock::Clock;
use crate::config::{BrokerConfig, TopicConfig};
use crate::coordinator::txn::{TxnError, TxnOffset, TxnState};
use crate::domain::{Member, TopicPartition};

fn engine(dir: &Path, clock: &Clock) -> Arc<Engine> {
    let mut c = BrokerConfig::new(dir);
    c.clock = clock.clone();
    c.tick = Duration::from_secs(3600);
    let e = Engine::open(c).unwrap();
    if e.records().topic("t").is_none() {
        e.records()
            .create_topic(
                "t",
                TopicConfig {
                    partitions: 2,
                    ..TopicConfig::default()
                },
            )
            .unwrap();
    }
    e
}

fn outside(group: &str) -> Member<'_> {
    Member {
        group,
        member_id: "",
        generation: -1,
    }
}

fn state(e: &Engine, id: &str) -> Option<TxnState> {
    e.transactions().describe_transaction(id).map(|m| m.state)
}

#[test]
fn an_offsets_only_transaction_commits_its_offsets_into_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual();
    let e = engine(dir.path(), &clock);
    rt::block_on(async {
        let (pid, epoch) = e
            .transactions()
            .init_transactional_producer("tx", 60_000, None)
            .await
            .unwrap();
        e.transactions()
            .add_offsets_to_txn("tx", pid, epoch, "g")
            .await
            .unwrap();
        let codes = e
            .transactions()
            .txn_offset_commit(
                "tx",
                pid,
                epoch,
                outside("g"),
                None,
                vec![
                    (
                        TopicPartition::new("t", 1),
                        TxnOffset {
                            offset: 7,
                            leader_epoch: -1,
                            metadata: None,
                        },
                    ),
                    (
                        TopicPartition::new("nope", 0),
                        TxnOffset {
                            offset: 1,
                            leader_epoch: -1,
                            metadata: None,
                        },
                    ),
                ],
            )
            .await
            .unwrap();
        assert_eq!(codes, vec![ErrorCode::None, ErrorCode::UnknownTopic]);
        assert!(e
            .transactions()
            .pending_txn_offset("g", &TopicPartition::new("t", 1)));
        assert_eq!(
            e.groups().committed("g", "t", 1),
            None,
            "not visible before the commit"
        );
        e.transactions()
            .end_txn("tx", pid, epoch, true)
            .await
            .unwrap();
        assert_eq!(e.groups().committed("g", "t", 1), Some(7));
        assert!(!e
            .transactions()
            .pending_txn_offset("g", &TopicPartition::new("t", 1)));
        assert_eq!(state(&e, "tx"), Some(TxnState::CompleteCommit));
        // An aborted one leaves the group's offsets alone.
        e.transactions()
            .add_offsets_to_txn("tx", pid, epoch, "g")
            .await
            .unwrap();
        let offset = TxnOffset {
            offset: 99,
            leader_epoch: -1,
            metadata: None,
        };
        e.transactions()
            .txn_offset_commit(
                "tx",
                pid,
                epoch,
                outside("g"),
                None,
                vec![(TopicPartition::new("t", 1), offset)],
            )
            .await
            .unwrap();
        e.transactions()
            .end_txn("tx", pid, epoch, false)
            .await
            .unwrap();
        assert_eq!(e.groups().committed("g", "t", 1), Some(7));
        assert_eq!(state(&e, "tx"), Some(TxnState::CompleteAbort));
        e.shutdown().await;
    });
}

/// A transactional batch entry of `values` from (pid, epoch), sequence `seq`.
pub(super) fn txn_batch(pid: i64, epoch: i16, seq: i32, values: &[&str]) -> bytes::Bytes {
    use flume_protocol::kafka_batch::{BatchBuilder, BatchMeta, Compression, ATTR_TRANSACTIONAL};
    let mut b = BatchBuilder::new(None);
    for (i, v) in values.iter().enumerate() {
        b.push(
            i32::try_from(i).unwrap(),
            5,
            Some(b"k"),
            Some(v.as_bytes()),
            [],
        );
    }
    let meta = BatchMeta {
        flags: ATTR_TRANSACTIONAL,
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: seq,
        ..BatchMeta::default()
    };
    let mut entry = Vec::new();
    flume_protocol::record::encode_batch_entry(
        &mut entry,
        &b.finish(&meta, Compression::Zstd).unwrap(),
    );
    bytes::Bytes::from(entry)
}

pub(super) async fn produce_txn(e: &Engine, pid: i64, epoch: i16, seq: i32, values: &[&str]) {
    let n = u32::try_from(values.len()).unwrap();
    let pb = crate::domain::ProducerBatch {
        id: pid,
        epoch,
        base_sequence: seq,
    };
    let r = e
        .records()
        .admit_encoded("t", 0, txn_batch(pid, epoch, seq, values), n, 5, Some(pb))
        .await
        .finish()
        .await;
    assert_eq!(r.error, ErrorCode::None, "{r:?}");
}

fn values(e: &Engine) -> Vec<String> {
    e.records()
        .read_now("t", 0, 0, 100)
        .unwrap()
        .into_iter()
        .map(|r| String::from_utf8_lossy(r.payload()).into_owned())
        .collect()
}

#[test]
fn markers_end_transactions_and_move_the_last_stable_offset_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual();
    let e = engine(dir.path(), &clock);
    let part = |e: &Engine| {
        e.records()
            .topic("t")
            .unwrap()
            .partition(0)
            .cloned()
            .unwrap()
    };
    rt::block_on(async {
        let (pid, epoch) = e
            .transactions()
            .init_transactional_producer("tx", 60_000, None)
            .await
            .unwrap();
        let tp = vec![TopicPartition::new("t", 0)];
        // A transaction that commits: hidden from read_committed readers until then.
        e.transactions()
            .add_partitions_to_txn("tx", pid, epoch, tp.clone())
            .await
            .unwrap();
        assert!(e
            .transactions()
            .txn_may_write("tx", pid, epoch, &tp[0])
            .is_ok());
        assert!(e
            .transactions()
            .txn_may_write("tx", pid, epoch, &TopicPartition::new("t", 1))
            .is_err());
        produce_txn(&e, pid, epoch, 0, &["a", "b"]).await;
        assert_eq!((part(&e).stable_offset(), part(&e).end_offset()), (0, 2));
        // DescribeProducers' view: the producer, its last sequence, where its transaction began.
        let described = part(&e).producers();
        assert_eq!(described.len(), 1);
        assert_eq!(
            (
                described[0].producer_id,
                described[0].epoch,
                described[0].last_sequence,
                described[0].txn_start
            ),
            (pid, epoch, 1, Some(0))
        );
        assert!(values(&e).is_empty(), "open: not stable yet");
        e.transactions()
            .end_txn("tx", pid, epoch, true)
            .await
            .unwrap();
        assert_eq!(state(&e, "tx"), Some(TxnState::CompleteCommit));
        assert_eq!((part(&e).stable_offset(), part(&e).end_offset()), (3, 3));
        assert_eq!(part(&e).producers()[0].txn_start, None);
        assert_eq!(values(&e), ["a", "b"]);
        // One that aborts: its records are never read by read_committed readers.
        e.transactions()
            .add_partitions_to_txn("tx", pid, epoch, tp.clone())
            .await
            .unwrap();
        produce_txn(&e, pid, epoch, 2, &["x"]).await;
        e.transactions()
            .end_txn("tx", pid, epoch, false)
            .await
            .unwrap();
        assert_eq!(part(&e).stable_offset(), 5);
        assert_eq!(values(&e), ["a", "b"]);
        // A read of entries lists the aborted transaction beside them.
        let read = part(&e)
            .read(0, 1 << 20, crate::domain::ReadAs::Entries, true)
            .await
            .unwrap();
        assert_eq!(read.aborted.len(), 1);
        assert_eq!(
            (read.aborted[0].producer_id, read.aborted[0].first_offset),
            (pid, 3)
        );
        e.shutdown().await;
    });
    drop(e);
    // After a restart: the same stable offset and the abort remembered.
    let e = engine(dir.path(), &clock);
    assert_eq!(part(&e).stable_offset(), 5);
    assert_eq!(values(&e), ["a", "b"]);
    rt::block_on(e.shutdown());
}

#[test]
fn an_open_transaction_left_by_a_crash_is_aborted_at_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual();
    let e = engine(dir.path(), &clock);
    let part = |e: &Engine| {
        e.records()
            .topic("t")
            .unwrap()
            .partition(0)
            .cloned()
            .unwrap()
    };
    rt::block_on(async {
        let (pid, epoch) = e
            .transactions()
            .init_transactional_producer("tx", 60_000, None)
            .await
            .unwrap();
        e.transactions()
            .add_partitions_to_txn("tx", pid, epoch, vec![TopicPartition::new("t", 0)])
            .await
            .unwrap();
        produce_txn(&e, pid, epoch, 0, &["lost"]).await;
        assert_eq!(part(&e).stable_offset(), 0);
    });
    // No shutdown: as after a kill.
    drop(e);
    let e = engine(dir.path(), &clock);
    assert_eq!(
        part(&e).stable_offset(),
        0,
        "still open until the abort is written"
    );
    rt::block_on(async {
        e.tick_now().await;
        assert_eq!(state(&e, "tx"), Some(TxnState::CompleteAbort));
        assert_eq!(part(&e).stable_offset(), part(&e).end_offset());
        assert!(values(&e).is_empty());
        e.shutdown().await;
    });
}

#[test]
fn a_timed_out_transaction_is_aborted_by_the_maintenance_pass() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual();
    let e = engine(dir.path(), &clock);
    rt::block_on(async {
        let (pid, epoch) = e
            .transactions()
            .init_transactional_producer("tx", 1000, None)
            .await
            .unwrap();
        e.transactions()
            .add_offsets_to_txn("tx", pid, epoch, "g")
            .await
            .unwrap();
        assert_eq!(
            e.transactions()
                .list_transactions(&[TxnState::Ongoing], &[], -1)
                .len(),
            1
        );
        clock.advance(Duration::from_millis(1001));
        e.tick_now().await;
        let m = e.transactions().describe_transaction("tx").unwrap();
        // No partitions: the abort needs no marker and completes at once.
        assert_eq!((m.state, m.epoch), (TxnState::CompleteAbort, epoch + 1));
        assert!(matches!(
            e.transactions()
                .add_offsets_to_txn("tx", pid, epoch, "g")
                .await,
            Err(TxnFailure::Refused(TxnError::ProducerFenced { .. }))
        ));
        assert_eq!(e.transactions().transaction_stats().timed_out, 1);
        e.shutdown().await;
    });
}

#[test]
fn refusals_at_the_bounds_are_counted_per_bound() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual();
    let mut c = BrokerConfig::new(dir.path());
    c.clock = clock.clone();
    c.transactions.max_transactional_ids = 1;
    c.transactions.max_partitions_per_transaction = 1;
    let e = Engine::open(c).unwrap();
    rt::block_on(async {
        let (pid, epoch) = e
            .transactions()
            .init_transactional_producer("a", 1000, None)
            .await
            .unwrap();
        assert!(matches!(
            e.transactions()
                .init_transactional_producer("b", 1000, None)
                .await,
            Err(TxnFailure::Refused(TxnError::TooManyTransactionalIds {
                limit: 1
            }))
        ));
        e.transactions()
            .add_offsets_to_txn("a", pid, epoch, "g1")
            .await
            .unwrap();
        assert!(matches!(
            e.transactions()
                .add_offsets_to_txn("a", pid, epoch, "g2")
                .await,
            Err(TxnFailure::Refused(TxnError::TooManyPartitions { .. }))
        ));
        let s = e.transactions().transaction_stats();
        assert_eq!(
            (
                s.transactional_ids,
                s.open,
                s.refused_ids,
                s.refused_open,
                s.refused_partitions
            ),
            (1, 1, 1, 0, 1)
        );
        e.shutdown().await;
    });
}

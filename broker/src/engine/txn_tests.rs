//! Transactions through a running engine (manual clock): a transaction of
//! offsets only commits them into the group; one with partitions records its
//! end but cannot complete until the log stores markers (and says so); a
//! timeout aborts through the maintenance pass; the state survives a restart.

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
    if e.topic("t").is_none() {
        e.create_topic(
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
    e.describe_transaction(id).map(|m| m.state)
}

#[test]
fn an_offsets_only_transaction_commits_its_offsets_into_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual();
    let e = engine(dir.path(), &clock);
    rt::block_on(async {
        let (pid, epoch) = e
            .init_transactional_producer("tx", 60_000, None)
            .await
            .unwrap();
        e.add_offsets_to_txn("tx", pid, epoch, "g").await.unwrap();
        let codes = e
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
        assert!(e.pending_txn_offset("g", &TopicPartition::new("t", 1)));
        assert_eq!(
            e.committed("g", "t", 1),
            None,
            "not visible before the commit"
        );
        e.end_txn("tx", pid, epoch, true).await.unwrap();
        assert_eq!(e.committed("g", "t", 1), Some(7));
        assert!(!e.pending_txn_offset("g", &TopicPartition::new("t", 1)));
        assert_eq!(state(&e, "tx"), Some(TxnState::CompleteCommit));
        // An aborted one leaves the group's offsets alone.
        e.add_offsets_to_txn("tx", pid, epoch, "g").await.unwrap();
        let offset = TxnOffset {
            offset: 99,
            leader_epoch: -1,
            metadata: None,
        };
        e.txn_offset_commit(
            "tx",
            pid,
            epoch,
            outside("g"),
            None,
            vec![(TopicPartition::new("t", 1), offset)],
        )
        .await
        .unwrap();
        e.end_txn("tx", pid, epoch, false).await.unwrap();
        assert_eq!(e.committed("g", "t", 1), Some(7));
        assert_eq!(state(&e, "tx"), Some(TxnState::CompleteAbort));
        e.shutdown().await;
    });
}

#[test]
fn a_transaction_with_partitions_records_its_end_but_says_markers_cannot_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual();
    let e = engine(dir.path(), &clock);
    let (pid, epoch) = rt::block_on(async {
        let (pid, epoch) = e
            .init_transactional_producer("tx", 60_000, None)
            .await
            .unwrap();
        e.add_partitions_to_txn("tx", pid, epoch, vec![TopicPartition::new("t", 0)])
            .await
            .unwrap();
        let r = e.end_txn("tx", pid, epoch, true).await;
        assert_eq!(
            r,
            Err(TxnFailure::MarkersNotStored(TxnState::PrepareCommit))
        );
        assert_eq!(state(&e, "tx"), Some(TxnState::PrepareCommit));
        // Retried, it is being completed; a new producer must wait.
        assert!(matches!(
            e.end_txn("tx", pid, epoch, true).await,
            Err(TxnFailure::Refused(TxnError::ConcurrentTransactions(_)))
        ));
        assert!(matches!(
            e.init_transactional_producer("tx", 60_000, None).await,
            Err(TxnFailure::Refused(TxnError::ConcurrentTransactions(_)))
        ));
        e.tick_now().await;
        assert_eq!(
            state(&e, "tx"),
            Some(TxnState::PrepareCommit),
            "never faked"
        );
        e.shutdown().await;
        (pid, epoch)
    });
    drop(e);
    // After a restart the decision stands and is still waiting for its markers.
    let e = engine(dir.path(), &clock);
    let m = e.describe_transaction("tx").unwrap();
    assert_eq!(
        (m.state, m.producer_id, m.epoch),
        (TxnState::PrepareCommit, pid, epoch)
    );
    assert_eq!(e.transaction_counts(), (1, 1));
    rt::block_on(e.shutdown());
}

#[test]
fn a_timed_out_transaction_is_aborted_by_the_maintenance_pass() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual();
    let e = engine(dir.path(), &clock);
    rt::block_on(async {
        let (pid, epoch) = e
            .init_transactional_producer("tx", 1000, None)
            .await
            .unwrap();
        e.add_offsets_to_txn("tx", pid, epoch, "g").await.unwrap();
        assert_eq!(e.list_transactions(&[TxnState::Ongoing], &[], -1).len(), 1);
        clock.advance(Duration::from_millis(1001));
        e.tick_now().await;
        let m = e.describe_transaction("tx").unwrap();
        // No partitions: the abort needs no marker and completes at once.
        assert_eq!((m.state, m.epoch), (TxnState::CompleteAbort, epoch + 1));
        assert!(matches!(
            e.add_offsets_to_txn("tx", pid, epoch, "g").await,
            Err(TxnFailure::Refused(TxnError::ProducerFenced { .. }))
        ));
        assert_eq!(e.transaction_stats().timed_out, 1);
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
            .init_transactional_producer("a", 1000, None)
            .await
            .unwrap();
        assert!(matches!(
            e.init_transactional_producer("b", 1000, None).await,
            Err(TxnFailure::Refused(TxnError::TooManyTransactionalIds {
                limit: 1
            }))
        ));
        e.add_offsets_to_txn("a", pid, epoch, "g1").await.unwrap();
        assert!(matches!(
            e.add_offsets_to_txn("a", pid, epoch, "g2").await,
            Err(TxnFailure::Refused(TxnError::TooManyPartitions { .. }))
        ));
        let s = e.transaction_stats();
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

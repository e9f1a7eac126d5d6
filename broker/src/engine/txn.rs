//! Transactions: the engine's side of the transaction coordinator
//! (`coordinator::txn`). Every operation runs on the blocking pool under the
//! store's lock: the coordinator decides, the state log makes the decision
//! durable (fsync), and only then is it installed and answered. What ends a
//! transaction (a [`Completion`]: markers, and a commit's offsets) is
//! carried out after that; until it is, the transaction waits in
//! `PrepareCommit`/`PrepareAbort` and the completion is retried at every
//! maintenance pass (and redone after a restart).
//!
//! **Markers.** A transaction ends with a COMMIT or ABORT marker (a Kafka
//! control batch with its producer id and epoch) written to each of its
//! partitions ([`Transactions::write_txn_markers`]); each partition's transaction
//! index (`partition::txns`) then moves its last stable offset and, for an
//! abort, records the aborted range for `read_committed` readers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use flume_protocol::ErrorCode;
use flume_rt as rt;
use flume_rt::sync::lock;

use super::groups::Groups;
use super::records::Records;
use super::Shutdown;
use crate::config::BrokerConfig;
use crate::coordinator::offsets::Committed;
use crate::coordinator::producer_ids::ProducerIds;
use crate::coordinator::txn::log::{TxnLogError, TxnStore};
use crate::coordinator::txn::TxnOffset;
use crate::coordinator::txn::{
    Completion, Outcome, TxnCoordinator, TxnError, TxnLimits, TxnListing, TxnMeta, TxnState,
};
use crate::domain::{Member, TopicPartition};

/// Why a transaction request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TxnFailure {
    /// The coordinator refused it.
    #[error(transparent)]
    Refused(#[from] TxnError),
    /// The state log could not be written: nothing changed.
    #[error("the transaction state log could not be written: {0}")]
    Log(String),
    /// The transaction's end is recorded, but a marker could not be written
    /// (retried at every maintenance pass until it is).
    #[error("a transaction marker could not be written: {0:?}")]
    Markers(ErrorCode),
    /// A commit's offsets could not be stored (retried).
    #[error("the committed transaction's offsets could not be stored: {0:?}")]
    Offsets(ErrorCode),
    /// The group's own fencing refused a TxnOffsetCommit (KIP-447: the
    /// member is not in the group's current generation, or its instance is
    /// another member's now).
    #[error("the group refused the commit: {0}")]
    Group(crate::domain::GroupError),
    /// The broker is stopping.
    #[error("shutting down")]
    ShuttingDown,
}

impl From<TxnLogError> for TxnFailure {
    fn from(e: TxnLogError) -> Self {
        TxnFailure::Log(e.to_string())
    }
}

/// The transactions service: the transaction store and the completions
/// not carried out yet; it writes markers through the records service and
/// a commit's offsets through the groups service.
#[derive(Debug)]
pub struct Transactions {
    config: Arc<BrokerConfig>,
    records: Arc<Records>,
    groups: Arc<Groups>,
    producer_ids: Arc<ProducerIds>,
    shutdown: Shutdown,
    store: Arc<Mutex<TxnStore>>,
    /// Completions waiting to be carried out (at most one per open
    /// transaction, so bounded by `max_open_transactions`).
    pending: Mutex<Vec<Completion>>,
    /// Requests refused by each bound: transactional ids, open
    /// transactions, partitions (groups, offsets) per transaction.
    refused: [AtomicU64; 3],
    /// Transactions the broker aborted at their timeout.
    timed_out: AtomicU64,
}

/// The transaction coordinator's figures (metrics, dashboard).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TxnStats {
    /// Transactional ids known.
    pub transactional_ids: usize,
    /// Transactions open (Ongoing or being completed).
    pub open: usize,
    /// Transactions whose end is decided but not carried out yet.
    pub pending_completions: usize,
    /// Requests refused at `max_transactional_ids`.
    pub refused_ids: u64,
    /// Requests refused at `max_open_transactions`.
    pub refused_open: u64,
    /// Requests refused at `max_partitions_per_transaction`.
    pub refused_partitions: u64,
    /// Transactions aborted by the broker at their timeout.
    pub timed_out: u64,
}

impl Transactions {
    /// Opens the state log in `dir` and recovers: the completions to redo
    /// wait in `pending` for the first maintenance pass.
    pub(super) fn open(
        records: Arc<Records>,
        groups: Arc<Groups>,
        producer_ids: Arc<ProducerIds>,
        shutdown: Shutdown,
    ) -> Result<Self, TxnLogError> {
        let config = Arc::clone(records.config());
        let (store, redo) = TxnStore::open(
            &config.data_dir.join("__transaction_state"),
            limits(&config.transactions),
            config.clock.wall_ms(),
        )?;
        if !redo.is_empty() {
            tracing::warn!(
                transactions = redo.len(),
                "transactions left open or unfinished by the last run: completing them"
            );
        }
        Ok(Transactions {
            config,
            records,
            groups,
            producer_ids,
            shutdown,
            store: Arc::new(Mutex::new(store)),
            pending: Mutex::new(redo),
            refused: Default::default(),
            timed_out: AtomicU64::new(0),
        })
    }
}

/// The coordinator's limits from the broker's settings.
fn limits(s: &crate::config::TransactionSettings) -> TxnLimits {
    let ms = |d: std::time::Duration| d.as_millis();
    TxnLimits {
        max_transactional_ids: s.max_transactional_ids,
        max_open_transactions: s.max_open_transactions,
        max_partitions_per_transaction: s.max_partitions_per_transaction,
        max_timeout_ms: u32::try_from(ms(s.max_timeout)).unwrap_or(u32::MAX),
        id_expiration_ms: i64::try_from(ms(s.id_expiration)).unwrap_or(i64::MAX),
        ..TxnLimits::default()
    }
}

impl Transactions {
    async fn txn_op<T: Send + 'static>(
        &self,
        op: impl FnOnce(&TxnCoordinator, i64) -> Outcome<T> + Send + 'static,
    ) -> Result<T, TxnFailure> {
        if self.shutdown.is_begun() {
            return Err(TxnFailure::ShuttingDown);
        }
        let store = Arc::clone(&self.store);
        let now = self.config.clock.wall_ms();
        let (result, completion) = rt::unblock(move || {
            let mut s = lock(&store);
            let outcome = op(&s.coordinator, now);
            let mut completion = None;
            if let Some(step) = &outcome.step {
                if let Err(e) = s.commit(step) {
                    return (Err(TxnFailure::from(e)), None);
                }
                completion.clone_from(&step.completion);
            }
            (outcome.result.map_err(TxnFailure::from), completion)
        })
        .await;
        if let Err(TxnFailure::Refused(e)) = &result {
            let bound = match e {
                TxnError::TooManyTransactionalIds { .. } => Some(0),
                TxnError::TooManyOpenTransactions { .. } => Some(1),
                TxnError::TooManyPartitions { .. } => Some(2),
                _ => None,
            };
            if let Some(i) = bound {
                self.refused[i].fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "transaction request refused at a bound");
            }
        }
        if let Some(c) = completion {
            // Decided and durable: carry it out now (it stays pending if it cannot be).
            self.pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(c.clone());
            if let Err(e) = self.finish_txn(&c).await {
                tracing::debug!(transactional_id = %c.transactional_id, error = %e, "transaction not completed yet");
                if result.is_ok() {
                    return Err(e);
                }
            }
        }
        result
    }

    /// InitProducerId with a transactional id: the producer id and the next
    /// epoch (fencing earlier producers of the id; see
    /// [`TxnCoordinator::init_producer_id`]). `expected` is the producer id
    /// and epoch the producer had (KIP-360), if any.
    ///
    /// # Errors
    /// [`TxnFailure`]: the coordinator's refusal, the state log, shutdown.
    pub async fn init_transactional_producer(
        &self,
        transactional_id: &str,
        timeout_ms: i64,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), TxnFailure> {
        let id = transactional_id.to_owned();
        let ids = Arc::clone(&self.producer_ids);
        self.txn_op(move |c, now| {
            c.init_producer_id(&id, timeout_ms, expected, now, &mut || {
                ids.issue().map_err(|e| e.to_string())
            })
        })
        .await
    }

    /// AddPartitionsToTxn: the partitions must exist (else UNKNOWN_TOPIC for
    /// the request, nothing added).
    ///
    /// # Errors
    /// [`TxnFailure`]; [`TxnFailure::Refused`] with the coordinator's reason.
    pub async fn add_partitions_to_txn(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: Vec<TopicPartition>,
    ) -> Result<(), TxnFailure> {
        let id = transactional_id.to_owned();
        self.txn_op(move |c, now| c.add_partitions(&id, producer_id, epoch, &partitions, now))
            .await
    }

    /// Whether a partition exists (for AddPartitionsToTxn's per-partition answers).
    pub fn partition_exists(&self, at: &TopicPartition) -> bool {
        self.records
            .topic(&at.topic)
            .is_some_and(|t| t.partition(at.partition).is_some())
    }

    /// AddOffsetsToTxn: the transaction will commit offsets of `group`.
    ///
    /// # Errors
    /// [`TxnFailure`].
    pub async fn add_offsets_to_txn(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        group: &str,
    ) -> Result<(), TxnFailure> {
        if !crate::config::valid_group_id(group) {
            return Err(TxnFailure::Offsets(ErrorCode::InvalidName));
        }
        let (id, group) = (transactional_id.to_owned(), group.to_owned());
        self.txn_op(move |c, now| c.add_offsets(&id, producer_id, epoch, &group, now))
            .await
    }

    /// EndTxn: commits or aborts the open transaction, and answers once it
    /// is complete: its markers written (see the module docs: refused until
    /// the log stores control records) and, for a commit, its offsets stored.
    ///
    /// # Errors
    /// [`TxnFailure`]; [`TxnFailure::MarkersNotStored`] for a transaction
    /// with partitions (its end is recorded and will be carried out).
    pub async fn end_txn(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
    ) -> Result<(), TxnFailure> {
        let id = transactional_id.to_owned();
        self.txn_op(move |c, now| c.end(&id, producer_id, epoch, commit, now))
            .await
    }

    /// TxnOffsetCommit: offsets the open transaction commits for a group
    /// added with AddOffsetsToTxn, stored in the group if the transaction
    /// commits. Fenced first by the group (KIP-447): the member and its
    /// generation (and instance id) must be the group's current ones, unless
    /// the request names none (generation -1, no member id: older clients).
    /// Returns each offset's outcome in order: UNKNOWN_TOPIC or
    /// UNKNOWN_PARTITION leave that one out.
    ///
    /// # Errors
    /// [`TxnFailure::Group`], and as the other operations.
    pub async fn txn_offset_commit(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        member: Member<'_>,
        instance: Option<&str>,
        offsets: Vec<(TopicPartition, TxnOffset)>,
    ) -> Result<Vec<ErrorCode>, TxnFailure> {
        if !crate::config::valid_group_id(member.group) {
            return Err(TxnFailure::Offsets(ErrorCode::InvalidName));
        }
        if member.generation >= 0 || !member.member_id.is_empty() {
            self.groups
                .fence_txn_commit(member, instance)
                .map_err(TxnFailure::Group)?;
        }
        let mut codes = Vec::with_capacity(offsets.len());
        let mut kept = Vec::with_capacity(offsets.len());
        for (tp, o) in offsets {
            codes.push(match self.records.topic(&tp.topic) {
                None => ErrorCode::UnknownTopic,
                Some(t) if t.partition(tp.partition).is_none() => ErrorCode::UnknownPartition,
                Some(_) if o.offset < 0 => ErrorCode::OffsetOutOfRange,
                Some(_)
                    if o.metadata.as_ref().is_some_and(|m| {
                        m.len() > crate::coordinator::offsets::MAX_METADATA_BYTES
                    }) =>
                {
                    ErrorCode::OffsetMetadataTooLarge
                }
                Some(_) => {
                    kept.push((tp, o));
                    ErrorCode::None
                }
            });
        }
        if kept.is_empty() {
            return Ok(codes);
        }
        let (id, group) = (transactional_id.to_owned(), member.group.to_owned());
        self.txn_op(move |c, now| c.commit_offsets(&id, producer_id, epoch, &group, &kept, now))
            .await?;
        Ok(codes)
    }

    /// Whether an open transaction holds an offset of `group` for
    /// `partition` not committed yet (OffsetFetch's `require_stable`).
    pub fn pending_txn_offset(&self, group: &str, partition: &TopicPartition) -> bool {
        lock(&self.store)
            .coordinator
            .has_pending_offset(group, partition)
    }

    /// ListTransactions (see [`TxnCoordinator::list`]).
    pub fn list_transactions(
        &self,
        states: &[TxnState],
        producer_ids: &[i64],
        min_age_ms: i64,
    ) -> Vec<TxnListing> {
        let now = self.config.clock.wall_ms();
        lock(&self.store)
            .coordinator
            .list(states, producer_ids, min_age_ms, now)
    }

    /// DescribeTransactions: one transactional id's state, if known.
    pub fn describe_transaction(&self, transactional_id: &str) -> Option<TxnMeta> {
        lock(&self.store)
            .coordinator
            .describe(transactional_id)
            .cloned()
    }

    /// Transactional ids known and transactions open (metrics, dashboard).
    pub fn transaction_counts(&self) -> (usize, usize) {
        lock(&self.store).coordinator.counts()
    }

    /// The transaction coordinator's figures.
    pub fn transaction_stats(&self) -> TxnStats {
        let (transactional_ids, open) = self.transaction_counts();
        let t = &self;
        TxnStats {
            transactional_ids,
            open,
            pending_completions: t.pending.lock().unwrap_or_else(|p| p.into_inner()).len(),
            refused_ids: t.refused[0].load(Ordering::Relaxed),
            refused_open: t.refused[1].load(Ordering::Relaxed),
            refused_partitions: t.refused[2].load(Ordering::Relaxed),
            timed_out: t.timed_out.load(Ordering::Relaxed),
        }
    }

    /// Writes the COMMIT or ABORT marker (a control batch with the
    /// completion's producer id and epoch) to each of its partitions, one
    /// after another, each queued behind the appends before it. A partition
    /// that is gone (its topic deleted) needs none. Writing a marker twice
    /// (a completion retried after a failure part way) is harmless: the
    /// second finds no transaction of the producer open there.
    ///
    /// # Errors
    /// [`TxnFailure::Markers`] with the first partition's error; the
    /// completion stays pending and is retried.
    pub async fn write_txn_markers(&self, c: &Completion) -> Result<(), TxnFailure> {
        let marker = if c.commit {
            crate::partition::txns::Marker::Commit
        } else {
            crate::partition::txns::Marker::Abort
        };
        let now = self.config.clock.wall_ms();
        for tp in &c.partitions {
            let Some(part) = self
                .records
                .topic(&tp.topic)
                .and_then(|t| t.partition(tp.partition).cloned())
            else {
                continue;
            };
            part.write_marker(c.producer_id, c.epoch, marker, now)
                .await
                .map_err(TxnFailure::Markers)?;
        }
        Ok(())
    }

    /// Whether the transaction of `transactional_id` may write to
    /// `partition`: the producer id and epoch are the id's current ones,
    /// its transaction is open and the partition was added to it
    /// (AddPartitionsToTxn). A transactional Produce is checked with it.
    ///
    /// # Errors
    /// [`TxnError::InvalidProducerIdMapping`] (unknown id or another producer
    /// id), [`TxnError::ProducerFenced`] (an older epoch),
    /// [`TxnError::InvalidTxnState`] (no open transaction, or the partition
    /// is not in it).
    pub fn txn_may_write(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        partition: &TopicPartition,
    ) -> Result<(), TxnError> {
        let store = lock(&self.store);
        let meta = store
            .coordinator
            .describe(transactional_id)
            .filter(|m| m.producer_id == producer_id)
            .ok_or_else(|| TxnError::InvalidProducerIdMapping(transactional_id.to_owned()))?;
        if meta.epoch != epoch {
            return Err(TxnError::ProducerFenced {
                transactional_id: transactional_id.to_owned(),
                epoch,
                current: meta.epoch,
            });
        }
        if meta.state != TxnState::Ongoing || !meta.partitions.contains(partition) {
            return Err(TxnError::InvalidTxnState {
                what: "a transactional produce to a partition not added to the transaction",
                state: meta.state,
            });
        }
        Ok(())
    }

    /// Carries out a completion: markers, a commit's offsets, then records
    /// the transaction complete. On success it leaves `pending`.
    async fn finish_txn(&self, c: &Completion) -> Result<(), TxnFailure> {
        if !c.partitions.is_empty() {
            self.write_txn_markers(c).await?;
        }
        for (group, offsets) in &c.offsets {
            let store: Vec<(String, i32, Committed)> = offsets
                .iter()
                .map(|(tp, o)| {
                    (
                        tp.topic.clone(),
                        tp.partition,
                        Committed {
                            offset: o.offset,
                            leader_epoch: o.leader_epoch,
                            metadata: o.metadata.clone(),
                            protocol_type: "consumer".to_owned(),
                        },
                    )
                })
                .collect();
            self.groups
                .store_txn_offsets(group, store)
                .await
                .map_err(|e| TxnFailure::Offsets(e.code()))?;
        }
        let store = Arc::clone(&self.store);
        let now = self.config.clock.wall_ms();
        let done = c.clone();
        let recorded = rt::unblock(move || {
            let mut s = lock(&store);
            let o = s.coordinator.complete(
                &done.transactional_id,
                done.producer_id,
                done.epoch,
                done.commit,
                now,
            );
            match &o.step {
                Some(step) => s.commit(step).map_err(TxnFailure::from),
                // Already complete (a stale or doubled completion): nothing to record.
                None => Ok(()),
            }
        })
        .await;
        recorded?;
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|p| p != c);
        Ok(())
    }

    /// The maintenance pass's share: aborts transactions past their
    /// timeout, forgets idle ids, and retries the completions still pending.
    pub(super) async fn maintain_txns(&self) {
        let store = Arc::clone(&self.store);
        let now = self.config.clock.wall_ms();
        let expired = rt::unblock(move || {
            let mut s = lock(&store);
            let steps = s.coordinator.expire(now);
            let mut completions = Vec::new();
            for step in steps {
                match s.commit(&step) {
                    Ok(()) => completions.extend(step.completion),
                    Err(e) => {
                        tracing::warn!(error = %e, "could not record a transaction timeout; tried again at the next pass");
                        break;
                    }
                }
            }
            completions
        })
        .await;
        for c in &expired {
            self.timed_out.fetch_add(1, Ordering::Relaxed);
            tracing::info!(transactional_id = %c.transactional_id, producer_id = c.producer_id, epoch = c.epoch, "transaction timed out: aborted, its producer fenced");
        }
        let pending: Vec<Completion> = {
            let mut p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            p.extend(expired);
            p.clone()
        };
        for c in pending {
            if let Err(e) = self.finish_txn(&c).await {
                tracing::trace!(transactional_id = %c.transactional_id, error = %e, "transaction completion still pending");
            }
        }
    }
}

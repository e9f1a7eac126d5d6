//! The transaction coordinator (Kafka's KIP-98 and KIP-447) as a state
//! machine with time passed in and no I/O.
//!
//! One [`TxnMeta`] per transactional id: the producer id and epoch it was
//! given, the state of its current transaction, the partitions and groups
//! that transaction touched, the offsets it commits, its timeout and start.
//!
//! ```text
//!            InitProducerId (epoch + 1)            AddPartitions / AddOffsets
//!   (new) ───────────────────────────────> Empty ────────────────────────────> Ongoing
//!                                            ^                                  │   │
//!                     InitProducerId         │            EndTxn(commit)        │   │ EndTxn(abort), timeout,
//!                     (epoch + 1)            │      ┌───────────────────────────┘   │ InitProducerId (fence),
//!        CompleteCommit / CompleteAbort ─────┘      v                               v restart
//!                  ^          ^             PrepareCommit                      PrepareAbort
//!                  │          └── complete ─────┘   (markers, offsets)     (markers) │
//!                  └───────────────────────────── complete ──────────────────────────┘
//! ```
//!
//! How it is driven: every operation reads the state (`&self`) and returns
//! an [`Outcome`]: the answer for the client and, when the state changes, a
//! [`Step`]. The caller makes the step's record durable (the state log,
//! [`log::TxnLog`]) and only then installs it ([`TxnCoordinator::apply`]) and
//! answers, so a client is never told of a state that a crash could lose;
//! the caller holds the coordinator's lock from the operation to `apply`. A
//! step may carry a [`Completion`]: the markers and offsets that end a
//! transaction, which the caller writes (the engine's log writes) and then
//! reports with [`TxnCoordinator::complete`]. A transaction waits in
//! `PrepareCommit`/`PrepareAbort` until then: requests for it get
//! [`TxnError::ConcurrentTransactions`] and retry.
//!
//! Guarantees:
//! - **Fencing.** Every InitProducerId of an id bumps its epoch (a new
//!   producer id when the epoch is exhausted); requests with an older epoch
//!   get [`TxnError::ProducerFenced`]. An InitProducerId that finds a
//!   transaction open aborts it under a bumped epoch first (and answers
//!   CONCURRENT_TRANSACTIONS: the producer retries once the abort is done).
//! - **Timeouts.** A transaction open longer than its timeout is aborted by
//!   [`TxnCoordinator::expire`] under a bumped epoch, so the producer that
//!   left it cannot add to it; timeouts above the broker's maximum are
//!   refused at InitProducerId.
//! - **Restarts.** [`TxnCoordinator::recover`] takes the states the log
//!   replayed and returns what must be redone: every `Prepare*` transaction's
//!   completion (markers and offsets are idempotent to write again), and an
//!   abort (epoch bumped) of every `Ongoing` one, whose producer may be gone.
//!   So after a crash at any point each transaction ends committed or
//!   aborted on all its partitions, offsets included.
//! - **Bounds.** Transactional ids, open transactions and the partitions,
//!   groups and offsets of one transaction are capped ([`TxnLimits`]), each
//!   with its own [`TxnError`]; ids unused for `id_expiration_ms` are
//!   forgotten (Kafka's `transactional.id.expiration.ms`).

use std::collections::{BTreeMap, BTreeSet};

use crate::domain::TopicPartition;

pub mod log;

#[cfg(test)]
mod tests;

/// An epoch at or above this is exhausted: the next InitProducerId gives the
/// id a new producer id with epoch 0 (Kafka keeps `i16::MAX` for a fence).
pub const EPOCH_EXHAUSTED: i16 = i16::MAX - 1;

/// Where a transactional id's current transaction is (Kafka's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TxnState {
    /// No transaction since the producer id was issued.
    Empty,
    /// A transaction is open: partitions or groups were added.
    Ongoing,
    /// Committing: the markers and offsets are being written.
    PrepareCommit,
    /// Aborting: the markers are being written.
    PrepareAbort,
    /// The last transaction committed.
    CompleteCommit,
    /// The last transaction aborted.
    CompleteAbort,
    /// Forgotten (expired); never stored, named for listing filters.
    Dead,
}

impl TxnState {
    /// Every state, in order.
    pub const ALL: [TxnState; 7] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
    ];

    /// Kafka's name of the state (ListTransactions, DescribeTransactions).
    pub fn as_str(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
        }
    }

    /// The state Kafka names so.
    pub fn parse(name: &str) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// A transaction is open (counts against `max_open_transactions`).
    pub fn is_open(self) -> bool {
        matches!(
            self,
            TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort
        )
    }

    /// The state's byte in the state log.
    pub(crate) fn code(self) -> u8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
        }
    }

    /// The state of a state-log byte.
    pub(crate) fn from_code(c: u8) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.code() == c)
    }
}

/// An offset a transaction commits for a group (TxnOffsetCommit): it becomes
/// the group's committed offset only if the transaction commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOffset {
    /// The next offset to read.
    pub offset: i64,
    /// The leader epoch the client saw (-1: none).
    pub leader_epoch: i32,
    /// The client's metadata string.
    pub metadata: Option<String>,
}

/// Everything the coordinator keeps about one transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMeta {
    /// The transactional id.
    pub transactional_id: String,
    /// The producer id it was given.
    pub producer_id: i64,
    /// The current epoch: requests with another one are fenced.
    pub epoch: i16,
    /// The producer id before the last rotation (-1: none); with
    /// `last_epoch`, lets a retried InitProducerId get the same answer.
    pub last_producer_id: i64,
    /// The epoch before the last bump (-1: none).
    pub last_epoch: i16,
    /// The state of the current (or last) transaction.
    pub state: TxnState,
    /// The transaction timeout the producer asked for (at most the broker's).
    pub timeout_ms: u32,
    /// When the current transaction began (wall clock, ms); -1 when none is open.
    pub started_ms: i64,
    /// When the state last changed (wall clock, ms).
    pub updated_ms: i64,
    /// The partitions the current transaction wrote to.
    pub partitions: BTreeSet<TopicPartition>,
    /// The groups whose offsets it commits (AddOffsetsToTxn), with the
    /// offsets given so far (TxnOffsetCommit).
    pub groups: BTreeMap<String, BTreeMap<TopicPartition, TxnOffset>>,
}

impl TxnMeta {
    /// The current transaction's partitions, grouped by topic (sorted).
    pub fn partitions_by_topic(&self) -> Vec<(String, Vec<i32>)> {
        let mut topics: Vec<(String, Vec<i32>)> = Vec::new();
        for tp in &self.partitions {
            match topics.last_mut() {
                Some((t, ps)) if *t == tp.topic => ps.push(tp.partition),
                _ => topics.push((tp.topic.clone(), vec![tp.partition])),
            }
        }
        topics
    }

    fn offsets(&self) -> usize {
        self.groups.values().map(BTreeMap::len).sum()
    }

    /// The current transaction's deadline (ms), if one is open.
    fn deadline(&self) -> Option<i64> {
        (self.state == TxnState::Ongoing)
            .then(|| self.started_ms.saturating_add(i64::from(self.timeout_ms)))
    }
}

/// What the log records of a transactional id after a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnRecord {
    /// Its state is now this.
    Put(TxnMeta),
    /// It is forgotten (expired).
    Remove(String),
}

impl TxnRecord {
    /// The transactional id it is about.
    pub fn transactional_id(&self) -> &str {
        match self {
            TxnRecord::Put(m) => &m.transactional_id,
            TxnRecord::Remove(id) => id,
        }
    }
}

/// What ends a transaction, for the caller to carry out before it calls
/// [`TxnCoordinator::complete`]: a commit or abort marker for (producer id,
/// epoch) on every partition, and for a commit every group's offsets. Both
/// may be written more than once (a restart redoes them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The transactional id.
    pub transactional_id: String,
    /// The producer id the markers carry.
    pub producer_id: i64,
    /// The epoch the markers carry (bumped already for a fencing abort).
    pub epoch: i16,
    /// Commit (true) or abort.
    pub commit: bool,
    /// Every partition that gets a marker.
    pub partitions: Vec<TopicPartition>,
    /// For a commit: each group's offsets to store (empty for an abort).
    pub offsets: Vec<(String, Vec<(TopicPartition, TxnOffset)>)>,
}

/// A change of state: the record to make durable, then install with
/// [`TxnCoordinator::apply`], and the completion to carry out after that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The id's new state (`None`: nothing to record, e.g. a completion
    /// redone after a restart).
    pub record: Option<TxnRecord>,
    /// The markers and offsets to write once `record` is durable.
    pub completion: Option<Completion>,
}

/// An operation's result: the step to persist (if the state changes) and
/// the answer, which holds only once the step is durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome<T> {
    /// The change to persist and install, if any.
    pub step: Option<Step>,
    /// The answer for the client.
    pub result: Result<T, TxnError>,
}

impl<T> Outcome<T> {
    fn fail(e: TxnError) -> Self {
        Outcome {
            step: None,
            result: Err(e),
        }
    }

    fn ok(step: Option<Step>, value: T) -> Self {
        Outcome {
            step,
            result: Ok(value),
        }
    }
}

/// Why a transaction request was refused (each maps to one Kafka code).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TxnError {
    /// An empty transactional id, or one over [`TxnLimits::max_id_bytes`].
    #[error("transactional id of {len} bytes: 1 to {max} bytes")]
    InvalidTransactionalId {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A timeout of 0 or less, or above the broker's maximum (INVALID_TRANSACTION_TIMEOUT).
    #[error("transaction timeout {requested} ms is outside 1..={max} ms")]
    InvalidTransactionTimeout {
        /// What the producer asked for.
        requested: i64,
        /// The broker's maximum.
        max: u32,
    },
    /// The transactional id is unknown or has another producer id
    /// (INVALID_PRODUCER_ID_MAPPING).
    #[error("transactional id {0:?} does not have that producer id")]
    InvalidProducerIdMapping(String),
    /// A newer producer took the transactional id over (PRODUCER_FENCED).
    #[error("producer epoch {epoch} of {transactional_id:?} is fenced (current {current})")]
    ProducerFenced {
        /// The transactional id.
        transactional_id: String,
        /// The request's epoch.
        epoch: i16,
        /// The current one.
        current: i16,
    },
    /// The previous transaction is still being completed; retry
    /// (CONCURRENT_TRANSACTIONS).
    #[error("transaction of {0:?} is being completed; retry")]
    ConcurrentTransactions(String),
    /// The request does not fit the transaction's state (INVALID_TXN_STATE).
    #[error("{what} in state {state:?}")]
    InvalidTxnState {
        /// What was asked.
        what: &'static str,
        /// The state it found.
        state: TxnState,
    },
    /// TxnOffsetCommit for a group that AddOffsetsToTxn did not add.
    #[error("group {0:?} was not added to the transaction (AddOffsetsToTxn)")]
    GroupNotInTransaction(String),
    /// `max_transactional_ids` ids are known: a new one is refused.
    #[error("the broker has {limit} transactional ids (max_transactional_ids)")]
    TooManyTransactionalIds {
        /// The limit.
        limit: usize,
    },
    /// `max_open_transactions` transactions are open: another may not begin.
    #[error("the broker has {limit} open transactions (max_open_transactions)")]
    TooManyOpenTransactions {
        /// The limit.
        limit: usize,
    },
    /// The transaction would have more than `max_partitions_per_transaction`
    /// partitions (or groups, or offsets).
    #[error("a transaction may have at most {limit} {what} (max_partitions_per_transaction)")]
    TooManyPartitions {
        /// Partitions, groups or offsets.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// No producer id could be issued (the id file, or ids exhausted).
    #[error("no producer id could be issued: {0}")]
    ProducerIds(String),
}

/// Caps and settings of the coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnLimits {
    /// Most transactional ids known at once (a new one past it is refused).
    pub max_transactional_ids: usize,
    /// Most transactions open (Ongoing or being completed) at once.
    pub max_open_transactions: usize,
    /// Most partitions one transaction writes to; also most groups and most
    /// offsets it commits.
    pub max_partitions_per_transaction: usize,
    /// The longest transaction timeout a producer may ask for (Kafka's
    /// `transaction.max.timeout.ms`, 15 minutes).
    pub max_timeout_ms: u32,
    /// An id with no transaction open and no request for this long is
    /// forgotten (Kafka's `transactional.id.expiration.ms`, 7 days).
    pub id_expiration_ms: i64,
    /// Longest transactional id, in bytes.
    pub max_id_bytes: usize,
}

impl Default for TxnLimits {
    fn default() -> Self {
        TxnLimits {
            max_transactional_ids: 100_000,
            max_open_transactions: 10_000,
            max_partitions_per_transaction: 10_000,
            max_timeout_ms: 900_000,
            id_expiration_ms: 7 * 24 * 3600 * 1000,
            max_id_bytes: 1024,
        }
    }
}

/// A transaction as ListTransactions shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnListing {
    /// The transactional id.
    pub transactional_id: String,
    /// Its producer id.
    pub producer_id: i64,
    /// Its state.
    pub state: TxnState,
    /// When the open transaction began (-1: none open).
    pub started_ms: i64,
    /// Its producer epoch.
    pub epoch: i16,
    /// The transaction timeout its producer asked for (ms).
    pub timeout_ms: u32,
    /// The current transaction's partitions by topic.
    pub partitions: Vec<(String, Vec<i32>)>,
}

/// Every transactional id's state.
#[derive(Debug)]
pub struct TxnCoordinator {
    txns: BTreeMap<String, TxnMeta>,
    limits: TxnLimits,
    /// Open transactions (states where [`TxnState::is_open`]).
    open: usize,
    /// No transaction times out before this (ms): [`TxnCoordinator::expire`]
    /// skips the scan until then (or until `next_idle_scan`).
    next_due: i64,
    /// When [`TxnCoordinator::expire`] next looks for idle ids (ms).
    next_idle_scan: i64,
}

impl TxnCoordinator {
    /// A coordinator with no transactional ids.
    pub fn new(limits: TxnLimits) -> Self {
        TxnCoordinator {
            txns: BTreeMap::new(),
            limits,
            open: 0,
            next_due: i64::MAX,
            next_idle_scan: 0,
        }
    }

    /// The coordinator over the states a log replayed, and what must be
    /// done before it serves: each `Prepare*` transaction's completion
    /// again, and each `Ongoing` one aborted under a bumped epoch (its
    /// producer cannot go on with it: its next request is fenced).
    pub fn recover(
        limits: TxnLimits,
        states: impl IntoIterator<Item = TxnMeta>,
        now: i64,
    ) -> (Self, Vec<Step>) {
        let mut c = TxnCoordinator::new(limits);
        for m in states {
            if m.state.is_open() {
                c.open += 1;
            }
            c.txns.insert(m.transactional_id.clone(), m);
        }
        let mut redo = Vec::new();
        for m in c.txns.values() {
            match m.state {
                TxnState::PrepareCommit | TxnState::PrepareAbort => redo.push(Step {
                    record: None,
                    completion: Some(completion(m)),
                }),
                TxnState::Ongoing => redo.push(fence_and_abort(m, now)),
                _ => {}
            }
        }
        c.next_due = 0;
        (c, redo)
    }

    /// Installs a step whose record is durable.
    pub fn apply(&mut self, step: &Step) {
        let Some(record) = &step.record else { return };
        let id = record.transactional_id();
        if self.txns.get(id).is_some_and(|m| m.state.is_open()) {
            self.open = self.open.saturating_sub(1);
        }
        match record {
            TxnRecord::Put(m) => {
                if m.state.is_open() {
                    self.open += 1;
                }
                if let Some(d) = m.deadline() {
                    self.next_due = self.next_due.min(d);
                }
                self.txns.insert(id.to_owned(), m.clone());
            }
            TxnRecord::Remove(_) => {
                self.txns.remove(id);
            }
        }
    }

    /// One transactional id's state.
    pub fn describe(&self, transactional_id: &str) -> Option<&TxnMeta> {
        self.txns.get(transactional_id)
    }

    /// Every transactional id (sorted), for compaction of the log.
    pub fn all(&self) -> impl Iterator<Item = &TxnMeta> {
        self.txns.values()
    }

    /// How many ids are known and how many transactions are open (metrics).
    pub fn counts(&self) -> (usize, usize) {
        (self.txns.len(), self.open)
    }

    /// ListTransactions: the ids in one of `states` (all when empty), of
    /// one of `producer_ids` (all when empty), whose open transaction began
    /// at least `min_age_ms` ago (-1: any), sorted.
    pub fn list(
        &self,
        states: &[TxnState],
        producer_ids: &[i64],
        min_age_ms: i64,
        now: i64,
    ) -> Vec<TxnListing> {
        self.txns
            .values()
            .filter(|m| states.is_empty() || states.contains(&m.state))
            .filter(|m| producer_ids.is_empty() || producer_ids.contains(&m.producer_id))
            .filter(|m| {
                min_age_ms < 0
                    || (m.started_ms >= 0 && now.saturating_sub(m.started_ms) >= min_age_ms)
            })
            .map(|m| TxnListing {
                transactional_id: m.transactional_id.clone(),
                producer_id: m.producer_id,
                state: m.state,
                started_ms: m.started_ms,
                epoch: m.epoch,
                timeout_ms: m.timeout_ms,
                partitions: m.partitions_by_topic(),
            })
            .collect()
    }

    /// Whether an open transaction holds an offset for `group` and
    /// `partition` that is not committed yet (OffsetFetch `require_stable`).
    pub fn has_pending_offset(&self, group: &str, partition: &TopicPartition) -> bool {
        self.txns.values().any(|m| {
            m.state.is_open()
                && m.groups
                    .get(group)
                    .is_some_and(|offsets| offsets.contains_key(partition))
        })
    }

    fn check_id(&self, id: &str) -> Result<(), TxnError> {
        if id.is_empty() || id.len() > self.limits.max_id_bytes {
            return Err(TxnError::InvalidTransactionalId {
                len: id.len(),
                max: self.limits.max_id_bytes,
            });
        }
        Ok(())
    }

    /// The transaction of a request naming (producer id, epoch): checked
    /// that the id maps to the producer id and the epoch is current.
    fn current(&self, id: &str, producer_id: i64, epoch: i16) -> Result<&TxnMeta, TxnError> {
        let m = self
            .txns
            .get(id)
            .filter(|m| m.producer_id == producer_id)
            .ok_or_else(|| TxnError::InvalidProducerIdMapping(id.to_owned()))?;
        if epoch != m.epoch {
            return Err(TxnError::ProducerFenced {
                transactional_id: id.to_owned(),
                epoch,
                current: m.epoch,
            });
        }
        Ok(m)
    }

    /// InitProducerId with a transactional id: a new id gets a producer id
    /// (from `issue`) and epoch 0; a known one the next epoch, which fences
    /// the producers before it (a new producer id and epoch 0 once the
    /// epoch is exhausted). `expected` is the producer id and epoch the
    /// producer had (KIP-360; `None` or epoch -1 for a fresh producer): it
    /// must be the current ones (then bumped) or the ones before the last
    /// bump (a retry: the current ones are returned as they are).
    ///
    /// An open transaction is aborted first under a bumped epoch (the
    /// answer is then CONCURRENT_TRANSACTIONS: retry once it is done); one
    /// being completed answers CONCURRENT_TRANSACTIONS.
    ///
    /// # Errors
    /// [`TxnError::InvalidTransactionalId`], [`TxnError::InvalidTransactionTimeout`],
    /// [`TxnError::ConcurrentTransactions`], [`TxnError::ProducerFenced`],
    /// [`TxnError::TooManyTransactionalIds`], [`TxnError::ProducerIds`].
    pub fn init_producer_id(
        &self,
        id: &str,
        timeout_ms: i64,
        expected: Option<(i64, i16)>,
        now: i64,
        issue: &mut dyn FnMut() -> Result<i64, String>,
    ) -> Outcome<(i64, i16)> {
        if let Err(e) = self.check_id(id) {
            return Outcome::fail(e);
        }
        let max = self.limits.max_timeout_ms;
        let timeout = match u32::try_from(timeout_ms) {
            Ok(t) if t >= 1 && t <= max => t,
            _ => {
                return Outcome::fail(TxnError::InvalidTransactionTimeout {
                    requested: timeout_ms,
                    max,
                })
            }
        };
        let expected = expected.filter(|(_, e)| *e >= 0);
        let Some(m) = self.txns.get(id) else {
            if self.txns.len() >= self.limits.max_transactional_ids {
                return Outcome::fail(TxnError::TooManyTransactionalIds {
                    limit: self.limits.max_transactional_ids,
                });
            }
            let producer_id = match issue() {
                Ok(p) => p,
                Err(e) => return Outcome::fail(TxnError::ProducerIds(e)),
            };
            let meta = TxnMeta {
                transactional_id: id.to_owned(),
                producer_id,
                epoch: 0,
                last_producer_id: -1,
                last_epoch: -1,
                state: TxnState::Empty,
                timeout_ms: timeout,
                started_ms: -1,
                updated_ms: now,
                partitions: BTreeSet::new(),
                groups: BTreeMap::new(),
            };
            return Outcome::ok(put(meta), (producer_id, 0));
        };
        // A producer naming its producer id and epoch must be the current
        // one, or the one before the last bump (checked first, so a fenced
        // producer cannot abort its successor's transaction).
        let mut retry_of_bump = false;
        if let Some((pid, epoch)) = expected {
            let current = pid == m.producer_id && epoch == m.epoch;
            // The producer's epoch is the one before the last bump: a retry
            // of an InitProducerId that succeeded, or the producer whose
            // transaction the broker aborted (timeout, restart) re-initialising.
            let previous = (pid == m.producer_id || pid == m.last_producer_id)
                && epoch == m.last_epoch
                && m.last_epoch >= 0;
            if !current && !previous {
                return Outcome::fail(TxnError::ProducerFenced {
                    transactional_id: id.to_owned(),
                    epoch,
                    current: m.epoch,
                });
            }
            retry_of_bump = !current;
        }
        match m.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                return Outcome::fail(TxnError::ConcurrentTransactions(id.to_owned()))
            }
            TxnState::Ongoing => {
                // Fence the producer of the open transaction and abort it;
                // this producer retries once the abort is complete.
                return Outcome {
                    step: Some(fence_and_abort(m, now)),
                    result: Err(TxnError::ConcurrentTransactions(id.to_owned())),
                };
            }
            TxnState::Empty
            | TxnState::CompleteCommit
            | TxnState::CompleteAbort
            | TxnState::Dead => {}
        }
        if retry_of_bump && m.epoch < EPOCH_EXHAUSTED {
            return Outcome::ok(None, (m.producer_id, m.epoch));
        }
        let mut next = m.clone();
        next.timeout_ms = timeout;
        next.state = TxnState::Empty;
        next.started_ms = -1;
        next.updated_ms = now;
        next.partitions.clear();
        next.groups.clear();
        if m.epoch >= EPOCH_EXHAUSTED {
            let producer_id = match issue() {
                Ok(p) => p,
                Err(e) => return Outcome::fail(TxnError::ProducerIds(e)),
            };
            next.last_producer_id = m.producer_id;
            next.last_epoch = m.epoch;
            next.producer_id = producer_id;
            next.epoch = 0;
        } else {
            next.last_producer_id = m.producer_id;
            next.last_epoch = m.epoch;
            next.epoch = m.epoch + 1;
        }
        let answer = (next.producer_id, next.epoch);
        Outcome::ok(put(next), answer)
    }

    /// The state a transaction goes on in when a producer adds to it: its
    /// current `Ongoing` one, or a new one (which must fit under
    /// `max_open_transactions`).
    fn begin_or_continue(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        what: &'static str,
        now: i64,
    ) -> Result<TxnMeta, TxnError> {
        let m = self.current(id, producer_id, epoch)?;
        match m.state {
            TxnState::Ongoing => Ok(m.clone()),
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                Err(TxnError::ConcurrentTransactions(id.to_owned()))
            }
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                if self.open >= self.limits.max_open_transactions {
                    return Err(TxnError::TooManyOpenTransactions {
                        limit: self.limits.max_open_transactions,
                    });
                }
                let mut next = m.clone();
                next.state = TxnState::Ongoing;
                next.started_ms = now;
                next.partitions.clear();
                next.groups.clear();
                Ok(next)
            }
            TxnState::Dead => Err(TxnError::InvalidTxnState {
                what,
                state: m.state,
            }),
        }
    }

    /// AddPartitionsToTxn: the partitions the transaction will write to
    /// (begins the transaction if none is open).
    ///
    /// # Errors
    /// [`TxnError::InvalidProducerIdMapping`], [`TxnError::ProducerFenced`],
    /// [`TxnError::ConcurrentTransactions`], [`TxnError::TooManyOpenTransactions`],
    /// [`TxnError::TooManyPartitions`].
    pub fn add_partitions(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[TopicPartition],
        now: i64,
    ) -> Outcome<()> {
        let mut next = match self.begin_or_continue(id, producer_id, epoch, "AddPartitions", now) {
            Ok(n) => n,
            Err(e) => return Outcome::fail(e),
        };
        let was_ongoing = self.txns.get(id).map(|m| m.state) == Some(TxnState::Ongoing);
        let before = next.partitions.len();
        next.partitions.extend(partitions.iter().cloned());
        let limit = self.limits.max_partitions_per_transaction;
        if next.partitions.len() > limit {
            return Outcome::fail(TxnError::TooManyPartitions {
                what: "partitions",
                limit,
            });
        }
        if was_ongoing && next.partitions.len() == before {
            // Nothing new: nothing to record.
            return Outcome::ok(None, ());
        }
        next.updated_ms = now;
        Outcome::ok(put(next), ())
    }

    /// AddOffsetsToTxn: the transaction commits offsets of `group` (begins
    /// the transaction if none is open).
    ///
    /// # Errors
    /// As [`TxnCoordinator::add_partitions`].
    pub fn add_offsets(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        group: &str,
        now: i64,
    ) -> Outcome<()> {
        let mut next = match self.begin_or_continue(id, producer_id, epoch, "AddOffsets", now) {
            Ok(n) => n,
            Err(e) => return Outcome::fail(e),
        };
        let was_ongoing = self.txns.get(id).map(|m| m.state) == Some(TxnState::Ongoing);
        if was_ongoing && next.groups.contains_key(group) {
            return Outcome::ok(None, ());
        }
        next.groups.entry(group.to_owned()).or_default();
        let limit = self.limits.max_partitions_per_transaction;
        if next.groups.len() > limit {
            return Outcome::fail(TxnError::TooManyPartitions {
                what: "groups",
                limit,
            });
        }
        next.updated_ms = now;
        Outcome::ok(put(next), ())
    }

    /// TxnOffsetCommit: offsets of a group added with AddOffsetsToTxn,
    /// stored if the transaction commits. (The group's own fencing, by
    /// generation and member, KIP-447, is the group coordinator's check.)
    ///
    /// # Errors
    /// [`TxnError::InvalidProducerIdMapping`], [`TxnError::ProducerFenced`],
    /// [`TxnError::ConcurrentTransactions`], [`TxnError::InvalidTxnState`]
    /// (no transaction open), [`TxnError::GroupNotInTransaction`],
    /// [`TxnError::TooManyPartitions`].
    pub fn commit_offsets(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        group: &str,
        offsets: &[(TopicPartition, TxnOffset)],
        now: i64,
    ) -> Outcome<()> {
        let m = match self.current(id, producer_id, epoch) {
            Ok(m) => m,
            Err(e) => return Outcome::fail(e),
        };
        match m.state {
            TxnState::Ongoing => {}
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                return Outcome::fail(TxnError::ConcurrentTransactions(id.to_owned()))
            }
            state => {
                return Outcome::fail(TxnError::InvalidTxnState {
                    what: "TxnOffsetCommit",
                    state,
                })
            }
        }
        if !m.groups.contains_key(group) {
            return Outcome::fail(TxnError::GroupNotInTransaction(group.to_owned()));
        }
        let mut next = m.clone();
        if let Some(held) = next.groups.get_mut(group) {
            for (tp, o) in offsets {
                held.insert(tp.clone(), o.clone());
            }
        }
        let limit = self.limits.max_partitions_per_transaction;
        if next.offsets() > limit {
            return Outcome::fail(TxnError::TooManyPartitions {
                what: "offsets",
                limit,
            });
        }
        next.updated_ms = now;
        Outcome::ok(put(next), ())
    }

    /// EndTxn: commit or abort the open transaction. The answer comes once
    /// `PrepareCommit`/`PrepareAbort` is durable; the step's completion then
    /// writes the markers (and offsets) and [`TxnCoordinator::complete`]
    /// records the end. A retry of an end already done is answered as it
    /// was.
    ///
    /// # Errors
    /// [`TxnError::InvalidProducerIdMapping`], [`TxnError::ProducerFenced`],
    /// [`TxnError::ConcurrentTransactions`] (the same end is being
    /// completed), [`TxnError::InvalidTxnState`] (no transaction open, or
    /// the other end under way or done).
    pub fn end(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        now: i64,
    ) -> Outcome<()> {
        let m = match self.current(id, producer_id, epoch) {
            Ok(m) => m,
            Err(e) => return Outcome::fail(e),
        };
        let what = if commit {
            "EndTxn(commit)"
        } else {
            "EndTxn(abort)"
        };
        match (m.state, commit) {
            (TxnState::Ongoing, _) => {
                let mut next = m.clone();
                next.state = if commit {
                    TxnState::PrepareCommit
                } else {
                    TxnState::PrepareAbort
                };
                next.updated_ms = now;
                let done = completion(&next);
                Outcome::ok(
                    Some(Step {
                        record: Some(TxnRecord::Put(next)),
                        completion: Some(done),
                    }),
                    (),
                )
            }
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
                Outcome::fail(TxnError::ConcurrentTransactions(id.to_owned()))
            }
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => {
                Outcome::ok(None, ())
            }
            (state, _) => Outcome::fail(TxnError::InvalidTxnState { what, state }),
        }
    }

    /// The caller wrote a transaction's markers and offsets: it is
    /// `CompleteCommit`/`CompleteAbort` now. A report for another producer
    /// id, epoch or end than the one being completed is stale: ignored.
    ///
    /// # Errors
    /// [`TxnError::InvalidTxnState`] for a stale report.
    pub fn complete(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        now: i64,
    ) -> Outcome<()> {
        let want = if commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        let Some(m) = self
            .txns
            .get(id)
            .filter(|m| m.producer_id == producer_id && m.epoch == epoch && m.state == want)
        else {
            return Outcome::fail(TxnError::InvalidTxnState {
                what: "complete",
                state: self.txns.get(id).map_or(TxnState::Dead, |m| m.state),
            });
        };
        let mut next = m.clone();
        next.state = if commit {
            TxnState::CompleteCommit
        } else {
            TxnState::CompleteAbort
        };
        next.started_ms = -1;
        next.updated_ms = now;
        next.partitions.clear();
        next.groups.clear();
        Outcome::ok(put(next), ())
    }

    /// Aborts (epoch bumped, see [`TxnCoordinator::recover`]) every
    /// transaction open past its timeout, and forgets ids idle past
    /// `id_expiration_ms` with no transaction open. Scans only when some
    /// deadline may have passed. The steps are for the caller to persist
    /// and apply, as any operation's.
    pub fn expire(&mut self, now: i64) -> Vec<Step> {
        let idle_scan = now >= self.next_idle_scan;
        if now < self.next_due && !idle_scan {
            return Vec::new();
        }
        let expiry = self.limits.id_expiration_ms;
        let mut steps = Vec::new();
        let mut next_due = i64::MAX;
        for m in self.txns.values() {
            match m.deadline() {
                Some(d) if now > d => {
                    steps.push(fence_and_abort(m, now));
                    // Looked at again next time if the abort is not installed by then.
                    next_due = next_due.min(now.saturating_add(1));
                }
                Some(d) => next_due = next_due.min(d.saturating_add(1)),
                None if idle_scan
                    && !m.state.is_open()
                    && now.saturating_sub(m.updated_ms) > expiry =>
                {
                    steps.push(Step {
                        record: Some(TxnRecord::Remove(m.transactional_id.clone())),
                        completion: None,
                    });
                }
                None => {}
            }
        }
        self.next_due = next_due;
        if idle_scan {
            self.next_idle_scan = now.saturating_add(IDLE_SCAN_MS);
        }
        steps
    }
}

/// How often [`TxnCoordinator::expire`] looks for idle ids to forget (ms).
const IDLE_SCAN_MS: i64 = 60_000;

fn put(meta: TxnMeta) -> Option<Step> {
    Some(Step {
        record: Some(TxnRecord::Put(meta)),
        completion: None,
    })
}

/// The markers and offsets that end `m`'s transaction (in a `Prepare*` state).
fn completion(m: &TxnMeta) -> Completion {
    let commit = m.state == TxnState::PrepareCommit;
    Completion {
        transactional_id: m.transactional_id.clone(),
        producer_id: m.producer_id,
        epoch: m.epoch,
        commit,
        partitions: m.partitions.iter().cloned().collect(),
        offsets: if commit {
            m.groups
                .iter()
                .filter(|(_, o)| !o.is_empty())
                .map(|(g, o)| {
                    (
                        g.clone(),
                        o.iter().map(|(tp, x)| (tp.clone(), x.clone())).collect(),
                    )
                })
                .collect()
        } else {
            Vec::new()
        },
    }
}

/// Aborts `m`'s open transaction under the next epoch, so the producer that
/// opened it is fenced (its requests name the old epoch); the previous epoch
/// is kept as `last_epoch`, so that producer may still re-initialise with
/// it (KIP-360) and get the bumped one.
fn fence_and_abort(m: &TxnMeta, now: i64) -> Step {
    let mut next = m.clone();
    if m.epoch < i16::MAX {
        next.last_producer_id = m.producer_id;
        next.last_epoch = m.epoch;
        next.epoch = m.epoch + 1;
    }
    next.state = TxnState::PrepareAbort;
    next.updated_ms = now;
    next.groups.clear();
    let done = completion(&next);
    Step {
        record: Some(TxnRecord::Put(next)),
        completion: Some(done),
    }
}

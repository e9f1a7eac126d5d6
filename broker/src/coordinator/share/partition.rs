//! One share-partition: the records of one partition as a share group works
//! through them (KIP-932).
//!
//! ```text
//!   log:   ... | 40 41 42 43 44 45 46 47 | 48 49 50 ...
//!                ^start                     ^end
//!   state:     A  K  .  Q  Q  V  R  A
//!   A acquired (by a member, until a deadline)   V available (released)
//!   K acknowledged (accepted)    R archived (rejected, or delivered too often)
//!   .  a gap: no record at that offset (compaction, a transaction marker)
//! ```
//!
//! - Everything below `start` is done; nothing at or past `end` was ever
//!   handed out. The records in between are *in flight*, each with its state
//!   and delivery count; their number is bounded
//!   ([`ShareConfig::max_in_flight`]): past it, nothing new is acquired until
//!   the lowest records complete and `start` moves up.
//! - [`SharePartition::acquire`] hands a member the available records of
//!   what the engine read from the log (released ones first, as they come
//!   in offset order, then new ones from `end`), each locked for
//!   [`ShareConfig::lock_duration_ms`] and counted as one more delivery.
//! - [`SharePartition::acknowledge`]: the member that holds a record accepts
//!   it (done), releases it (available again, to anyone) or rejects it
//!   (archived); a lock can be renewed (KIP-1222). A record released or
//!   timed out after [`ShareConfig::delivery_count_limit`] deliveries is
//!   archived: a poison record stops coming back.
//! - [`SharePartition::expire`] releases the records whose lock ran out,
//!   [`SharePartition::release_member`] those of a member that left.
//! - [`SharePartition::snapshot`] is what is kept on disk: the start offset
//!   and every in-flight record that is done or was delivered, acquired ones
//!   as available (a lock does not outlive the broker). After a restart the
//!   accepted and rejected records are never delivered again and the others
//!   come back, with their delivery counts.

use std::collections::{BTreeMap, BTreeSet};

pub use crate::config::ShareConfig;

/// How a member acknowledges records (the codes of ShareAcknowledge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckType {
    /// Offsets with no record (code 0): nothing to do but allowed.
    Gap,
    /// Done: never delivered again (code 1).
    Accept,
    /// Back to available, delivered again (code 2).
    Release,
    /// Archived: never delivered again (code 3).
    Reject,
    /// Keep the lock for another lock duration (code 4, KIP-1222).
    Renew,
}

impl AckType {
    /// From the wire's code.
    pub fn from_code(code: i8) -> Option<AckType> {
        Some(match code {
            0 => AckType::Gap,
            1 => AckType::Accept,
            2 => AckType::Release,
            3 => AckType::Reject,
            4 => AckType::Renew,
            _ => return None,
        })
    }
}

/// The state of an in-flight record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordState {
    /// Waiting to be acquired (released, or its lock ran out).
    Available,
    /// With `member` until `deadline_ms`.
    Acquired {
        /// The member holding it.
        member: String,
        /// When its lock runs out.
        deadline_ms: u64,
    },
    /// Accepted: done.
    Acknowledged,
    /// Rejected or delivered too often: done, not processed.
    Archived,
}

impl RecordState {
    fn is_done(&self) -> bool {
        matches!(self, RecordState::Acknowledged | RecordState::Archived)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct InFlight {
    state: RecordState,
    delivery_count: u16,
}

/// A run of acquired offsets with one delivery count (what ShareFetch's
/// AcquiredRecords carries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquired {
    /// First offset of the run.
    pub first_offset: i64,
    /// Last offset of the run (inclusive).
    pub last_offset: i64,
    /// How many times these records have been delivered, this one included.
    pub delivery_count: u16,
}

/// Why an acknowledgement was refused (nothing of it was applied).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AckError {
    /// A record of the range is not acquired by this member (never handed
    /// to it, already acknowledged, or its lock ran out): Kafka's
    /// INVALID_RECORD_STATE.
    #[error("offset {offset} is not acquired by member {member}")]
    NotAcquired {
        /// The first offending offset.
        offset: i64,
        /// The member that acknowledged.
        member: String,
    },
    /// The range is empty or reversed: INVALID_REQUEST.
    #[error("acknowledgement range {first}..={last} is empty")]
    BadRange {
        /// First offset sent.
        first: i64,
        /// Last offset sent.
        last: i64,
    },
}

/// What a restart keeps of a share-partition (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShareSnapshot {
    /// Everything below is done.
    pub start_offset: i64,
    /// One past the last offset handed out.
    pub end_offset: i64,
    /// In-flight records by offset: (state, delivery count); the state is
    /// one of available, acknowledged or archived.
    pub records: Vec<(i64, SnapshotState, u16)>,
}

/// A record's state as kept on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotState {
    /// To be delivered (again).
    Available,
    /// Accepted.
    Acknowledged,
    /// Rejected or delivered too often.
    Archived,
}

/// Counts for describing a share-partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShareCounts {
    /// Records in flight (any state) between start and end.
    pub in_flight: usize,
    /// Of those, acquired by a member now.
    pub acquired: usize,
    /// Of those, available for (re)delivery.
    pub available: usize,
    /// Of those, delivered more than once and not done.
    pub redelivered: usize,
}

/// What happened to a share-partition's records since its state was created
/// or restored (for metrics; not kept across restarts). Each counts records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShareTotals {
    /// Deliveries: records acquired by a member (a redelivery counts again).
    pub delivered: u64,
    /// Of those, deliveries of a record delivered before.
    pub redelivered: u64,
    /// Records accepted (gaps acknowledged as such are not counted).
    pub accepted: u64,
    /// Records released by their member.
    pub released: u64,
    /// Records rejected by their member.
    pub rejected: u64,
    /// Records whose lock ran out before their member acknowledged them.
    pub lock_expired: u64,
    /// Records archived: rejected, or at the delivery-count limit.
    pub archived: u64,
}

/// One share-partition's state (see the module docs).
#[derive(Debug, Clone)]
pub struct SharePartition {
    config: ShareConfig,
    start: i64,
    end: i64,
    in_flight: BTreeMap<i64, InFlight>,
    /// What happened here since the state was created or restored.
    totals: ShareTotals,
    /// Bytes per record of the last read of the log (0: none yet), to read
    /// about what an acquisition of some records takes (not kept).
    bytes_per_record: usize,
    /// Offsets whose kept state (done or not, delivery count) changed since
    /// the last [`SharePartition::take_update`].
    changed: BTreeSet<i64>,
    /// The whole state must be written again (a reset forgot records).
    full: bool,
    /// Start and end as last written.
    written: (i64, i64),
}

impl SharePartition {
    /// A share-partition that starts at `start_offset` (the log end for
    /// `share.auto.offset.reset=latest`, the log start for earliest).
    pub fn new(config: ShareConfig, start_offset: i64) -> Self {
        SharePartition {
            config,
            start: start_offset,
            end: start_offset,
            in_flight: BTreeMap::new(),
            totals: ShareTotals::default(),
            bytes_per_record: 0,
            changed: BTreeSet::new(),
            full: true,
            written: (start_offset, start_offset),
        }
    }

    /// A share-partition as a snapshot left it: acquired records come back
    /// available (their locks did not survive), done ones stay done.
    pub fn restore(config: ShareConfig, snapshot: &ShareSnapshot) -> Self {
        let mut p = SharePartition::new(config, snapshot.start_offset);
        p.end = snapshot.end_offset.max(snapshot.start_offset);
        for &(offset, state, delivery_count) in &snapshot.records {
            if offset < p.start || offset >= p.end {
                continue;
            }
            let state = match state {
                SnapshotState::Available => RecordState::Available,
                SnapshotState::Acknowledged => RecordState::Acknowledged,
                SnapshotState::Archived => RecordState::Archived,
            };
            p.in_flight.insert(
                offset,
                InFlight {
                    state,
                    delivery_count,
                },
            );
        }
        p.advance();
        p.full = false;
        p.written = (p.start, p.end);
        p
    }

    /// Changes the settings; they apply to the next acquisition and lock.
    pub fn set_config(&mut self, config: ShareConfig) {
        self.config = config;
    }

    /// Everything below is done.
    pub fn start_offset(&self) -> i64 {
        self.start
    }

    /// One past the last offset handed out.
    pub fn end_offset(&self) -> i64 {
        self.end
    }

    /// Where the engine reads the log from for the next acquisition: the
    /// lowest available in-flight record, else the end. `None` when the
    /// in-flight window is full and nothing in it is available.
    pub fn next_fetch_offset(&self) -> Option<i64> {
        if let Some((&offset, _)) = self
            .in_flight
            .iter()
            .find(|(_, r)| r.state == RecordState::Available)
        {
            return Some(offset);
        }
        (self.in_flight.len() < self.config.max_in_flight).then_some(self.end)
    }

    /// How many bytes of the log to read for an acquisition of up to
    /// `max_records` records, at most `max_bytes`: a quarter more than the
    /// records took in the last read, at least 16 KiB (all of `max_bytes`
    /// before any read). A short read hands out fewer records; the member
    /// asks again.
    pub fn read_budget(&self, max_records: usize, max_bytes: usize) -> usize {
        if self.bytes_per_record == 0 {
            return max_bytes;
        }
        let want = self
            .bytes_per_record
            .saturating_mul(max_records)
            .saturating_add(self.bytes_per_record.saturating_mul(max_records) / 4);
        want.max(16 << 10).min(max_bytes)
    }

    /// Notes what a read of the log found (`bytes` over `records`) for
    /// [`Self::read_budget`].
    pub fn note_read(&mut self, bytes: usize, records: usize) {
        if records > 0 {
            self.bytes_per_record = bytes.div_ceil(records).max(1);
        }
    }

    /// True when an acquisition could hand something out if the log has it.
    #[cfg(test)]
    pub fn can_acquire(&self) -> bool {
        self.next_fetch_offset().is_some()
    }

    /// Hands `member` up to `max_records` available records among those the
    /// engine read from the log: `offsets` are the records found (ascending)
    /// reading from [`Self::next_fetch_offset`] up to `read_end` (exclusive;
    /// offsets in that span with no record are gaps). Returns the runs
    /// acquired, each locked until `now_ms` plus the lock duration.
    pub fn acquire(
        &mut self,
        member: &str,
        offsets: &[i64],
        read_end: i64,
        max_records: usize,
        now_ms: u64,
    ) -> Vec<Acquired> {
        let deadline_ms = now_ms.saturating_add(self.config.lock_duration_ms);
        let mut runs: Vec<Acquired> = Vec::new();
        let mut taken = 0usize;
        let mut push = |offset: i64, delivery_count: u16| match runs.last_mut() {
            Some(run) if run.last_offset + 1 == offset && run.delivery_count == delivery_count => {
                run.last_offset = offset;
            }
            _ => runs.push(Acquired {
                first_offset: offset,
                last_offset: offset,
                delivery_count,
            }),
        };
        let mut stopped_at = None;
        for &offset in offsets {
            if taken >= max_records {
                stopped_at = Some(offset);
                break;
            }
            if offset < self.start {
                continue;
            }
            if offset < self.end {
                if let Some(r) = self.in_flight.get_mut(&offset) {
                    if r.state == RecordState::Available
                        && r.delivery_count >= self.config.delivery_count_limit
                    {
                        // The limit was lowered since it was released.
                        r.state = RecordState::Archived;
                        self.totals.archived += 1;
                        self.changed.insert(offset);
                    } else if r.state == RecordState::Available {
                        r.delivery_count = r.delivery_count.saturating_add(1);
                        self.totals.delivered += 1;
                        if r.delivery_count > 1 {
                            self.totals.redelivered += 1;
                        }
                        r.state = RecordState::Acquired {
                            member: member.to_owned(),
                            deadline_ms,
                        };
                        push(offset, r.delivery_count);
                        self.changed.insert(offset);
                        taken += 1;
                    }
                }
                continue;
            }
            if self.in_flight.len() >= self.config.max_in_flight {
                stopped_at = Some(offset);
                break;
            }
            self.in_flight.insert(
                offset,
                InFlight {
                    state: RecordState::Acquired {
                        member: member.to_owned(),
                        deadline_ms,
                    },
                    delivery_count: 1,
                },
            );
            self.totals.delivered += 1;
            // Offsets between the old end and this record are gaps: done.
            self.end = offset + 1;
            self.changed.insert(offset);
            push(offset, 1);
            taken += 1;
        }
        // The span read past the last new record holds no record (gaps)
        // unless the acquisition stopped before reaching it.
        if stopped_at.is_none() && read_end > self.end {
            self.end = read_end;
        } else if let Some(offset) = stopped_at {
            if offset > self.end {
                self.end = offset;
            }
        }
        self.advance();
        runs
    }

    /// Applies one acknowledgement of `first..=last` by `member`. Every
    /// record of the range must be acquired by that member (gaps excepted):
    /// otherwise nothing is applied.
    /// Whether [`Self::acknowledge`] would take this acknowledgement (every
    /// record of the range held by `member`), changing nothing: how a
    /// request's acknowledgements of one partition are checked together
    /// before any is applied.
    ///
    /// # Errors
    /// As [`Self::acknowledge`].
    pub fn check_acknowledge(
        &self,
        member: &str,
        first: i64,
        last: i64,
        ack: AckType,
    ) -> Result<(), AckError> {
        if last < first {
            return Err(AckError::BadRange { first, last });
        }
        for (&offset, r) in self.in_flight.range(first..=last) {
            if !matches!(&r.state, RecordState::Acquired { member: m, .. } if m == member) {
                return Err(AckError::NotAcquired {
                    offset,
                    member: member.to_owned(),
                });
            }
        }
        let held = self.in_flight.range(first..=last).count();
        if held == 0 && ack != AckType::Gap {
            return Err(AckError::NotAcquired {
                offset: first,
                member: member.to_owned(),
            });
        }
        Ok(())
    }

    pub fn acknowledge(
        &mut self,
        member: &str,
        first: i64,
        last: i64,
        ack: AckType,
        now_ms: u64,
    ) -> Result<(), AckError> {
        // Check first, then apply: an acknowledgement is all or nothing.
        self.check_acknowledge(member, first, last, ack)?;
        let limit = self.config.delivery_count_limit;
        let lock = self.config.lock_duration_ms;
        let mut archived = 0u64;
        let mut applied = 0u64;
        if ack != AckType::Renew {
            self.changed
                .extend(self.in_flight.range(first..=last).map(|(&o, _)| o));
        }
        for r in self.in_flight.range_mut(first..=last).map(|(_, r)| r) {
            applied += 1;
            match ack {
                AckType::Gap | AckType::Accept => r.state = RecordState::Acknowledged,
                AckType::Reject => {
                    r.state = RecordState::Archived;
                    archived += 1;
                }
                AckType::Release => {
                    if r.delivery_count >= limit {
                        r.state = RecordState::Archived;
                        archived += 1;
                    } else {
                        r.state = RecordState::Available;
                    }
                }
                AckType::Renew => {
                    if let RecordState::Acquired { deadline_ms, .. } = &mut r.state {
                        *deadline_ms = now_ms.saturating_add(lock);
                    }
                }
            }
        }
        match ack {
            AckType::Accept => self.totals.accepted += applied,
            AckType::Release => self.totals.released += applied,
            AckType::Reject => self.totals.rejected += applied,
            AckType::Gap | AckType::Renew => {}
        }
        self.totals.archived += archived;
        self.advance();
        Ok(())
    }

    /// Releases every record whose lock ran out by `now_ms` (archiving those
    /// at the delivery limit). Returns how many were released or archived.
    pub fn expire(&mut self, now_ms: u64) -> usize {
        let n = self.release_where(|state| {
            matches!(state, RecordState::Acquired { deadline_ms, .. } if *deadline_ms <= now_ms)
        });
        self.totals.lock_expired += n as u64;
        n
    }

    /// Releases every record `member` holds (it left or was fenced).
    pub fn release_member(&mut self, member: &str) -> usize {
        self.release_where(
            |state| matches!(state, RecordState::Acquired { member: m, .. } if m == member),
        )
    }

    fn release_where(&mut self, pick: impl Fn(&RecordState) -> bool) -> usize {
        let limit = self.config.delivery_count_limit;
        let mut n = 0;
        let mut archived = 0;
        for (&offset, r) in self.in_flight.iter_mut() {
            if pick(&r.state) {
                n += 1;
                self.changed.insert(offset);
                if r.delivery_count >= limit {
                    r.state = RecordState::Archived;
                    archived += 1;
                } else {
                    r.state = RecordState::Available;
                }
            }
        }
        self.totals.archived += archived;
        if n > 0 {
            self.advance();
        }
        n
    }

    /// The earliest lock deadline, for the engine's timer.
    pub fn next_deadline(&self) -> Option<u64> {
        self.in_flight
            .values()
            .filter_map(|r| match r.state {
                RecordState::Acquired { deadline_ms, .. } => Some(deadline_ms),
                _ => None,
            })
            .min()
    }

    /// The log's start moved to `log_start` (retention, DeleteRecords):
    /// records below it are gone, whatever their state.
    pub fn log_start_moved(&mut self, log_start: i64) {
        if log_start <= self.start {
            return;
        }
        self.in_flight = self.in_flight.split_off(&log_start);
        self.start = log_start;
        self.end = self.end.max(log_start);
        self.advance();
    }

    /// Moves the start to `offset` as an administrator's reset does
    /// (AlterShareGroupOffsets; the group must have no members): every
    /// in-flight record is forgotten.
    #[cfg(test)]
    pub fn reset_to(&mut self, offset: i64) {
        self.in_flight.clear();
        self.start = offset;
        self.end = offset;
        self.full = true;
    }

    /// The state of the record at `offset`, if in flight.
    #[cfg(test)]
    pub fn state_of(&self, offset: i64) -> Option<(&RecordState, u16)> {
        self.in_flight
            .get(&offset)
            .map(|r| (&r.state, r.delivery_count))
    }

    /// Counts for describing the partition.
    pub fn counts(&self) -> ShareCounts {
        let mut c = ShareCounts {
            in_flight: self.in_flight.len(),
            ..ShareCounts::default()
        };
        for r in self.in_flight.values() {
            match r.state {
                RecordState::Acquired { .. } => c.acquired += 1,
                RecordState::Available => c.available += 1,
                _ => {}
            }
            if !r.state.is_done() && r.delivery_count > 1 {
                c.redelivered += 1;
            }
        }
        c
    }

    /// What happened here since this state was created or restored.
    pub fn totals(&self) -> ShareTotals {
        self.totals
    }

    /// What a restart keeps (see the module docs).
    pub fn snapshot(&self) -> ShareSnapshot {
        ShareSnapshot {
            start_offset: self.start,
            end_offset: self.end,
            records: self
                .in_flight
                .iter()
                .map(|(&offset, r)| (offset, kept_state(&r.state), r.delivery_count))
                .collect(),
        }
    }

    /// What changed in the kept state since the last call, to write before
    /// the change is acknowledged to anyone: `None` when nothing did. A lock
    /// renewal changes nothing kept.
    pub fn take_update(&mut self) -> Option<ShareUpdate> {
        if self.full {
            self.full = false;
            self.changed.clear();
            self.written = (self.start, self.end);
            return Some(ShareUpdate {
                full: true,
                state: self.snapshot(),
            });
        }
        if self.changed.is_empty() && self.written == (self.start, self.end) {
            return None;
        }
        let changed = std::mem::take(&mut self.changed);
        self.written = (self.start, self.end);
        let records = changed
            .into_iter()
            .filter_map(|offset| {
                let r = self.in_flight.get(&offset)?;
                Some((offset, kept_state(&r.state), r.delivery_count))
            })
            .collect();
        Some(ShareUpdate {
            full: false,
            state: ShareSnapshot {
                start_offset: self.start,
                end_offset: self.end,
                records,
            },
        })
    }

    /// Drops the done records at the front and moves the start past them.
    fn advance(&mut self) {
        while let Some(entry) = self.in_flight.first_entry() {
            if entry.get().state.is_done() {
                let offset = *entry.key();
                entry.remove();
                self.start = offset + 1;
            } else {
                self.start = *entry.key();
                return;
            }
        }
        self.start = self.end.max(self.start);
    }
}

/// A record's state as kept: a lock does not outlive the broker.
fn kept_state(state: &RecordState) -> SnapshotState {
    match state {
        RecordState::Available | RecordState::Acquired { .. } => SnapshotState::Available,
        RecordState::Acknowledged => SnapshotState::Acknowledged,
        RecordState::Archived => SnapshotState::Archived,
    }
}

/// One write of a share-partition's kept state: the whole of it (`full`) or
/// the records that changed, with the start and end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareUpdate {
    /// The state replaces what was kept (else it is applied onto it).
    pub full: bool,
    /// The start, the end and the records written.
    pub state: ShareSnapshot,
}

impl ShareSnapshot {
    /// Applies a write onto this kept state, as replaying the store does.
    #[cfg(test)]
    pub fn apply(&mut self, update: &ShareUpdate) {
        if update.full {
            *self = update.state.clone();
            return;
        }
        let u = &update.state;
        self.start_offset = self.start_offset.max(u.start_offset);
        self.end_offset = u.end_offset.max(self.start_offset);
        let mut map: BTreeMap<i64, (SnapshotState, u16)> =
            self.records.iter().map(|&(o, s, d)| (o, (s, d))).collect();
        for &(o, s, d) in &u.records {
            map.insert(o, (s, d));
        }
        let start = self.start_offset;
        let end = self.end_offset;
        self.records = map
            .into_iter()
            .filter(|(o, _)| *o >= start && *o < end)
            .map(|(o, (s, d))| (o, s, d))
            .collect();
    }
}

#[cfg(test)]
mod tests;

//! Idempotent producers' per-partition sequence state.
//!
//! Kafka's idempotent producer stamps every batch with a producer id, an
//! epoch and the sequence number of its first record (counted per producer
//! and partition). The broker appends a batch whose sequence follows the last
//! one it appended for that producer, answers a retry of one of the last
//! [`CACHED_BATCHES`] batches with the offsets it got the first time (and does
//! not append it again), and refuses a gap.
//!
//! - Producer ids are issued by `crate::coordinator::producer_ids`.
//! - [`ProducerTable`]: one per partition, kept under the partition's log
//!   lock, so the check and the append are one step for every append of the
//!   partition (see [`crate::partition`]). Per producer: its epoch and its
//!   last [`CACHED_BATCHES`] batches (first and last sequence, base offset).
//!
//! Bounds ([`ProducerLimits`]): at most `per_partition` producers per
//! partition and `total` over the broker; an entry idle for `expiry_ms` (by
//! the broker's [`Clock`]) is dropped at the next maintenance pass. When a
//! new producer arrives at a full partition, the partition's least recently
//! used producer is evicted; when the broker-wide total is reached, the new
//! producer takes the place of the partition's least recently used one, or,
//! at a partition that tracks none, is appended untracked (no duplicate
//! check for it there until room is made). A producer whose entry is gone is
//! treated as Kafka treats one whose state has expired: its next batch is
//! accepted whatever its sequence, and tracked from there. A retry of a batch
//! appended before the eviction is then appended again: that is the one
//! place, besides a restart, where a duplicate can appear.
//!
//! **Across restarts** the state is rebuilt, as Kafka rebuilds it: from a
//! snapshot ([`encode_snapshot`], `producers.snapshot` in the partition's
//! directory, written at clean shutdown and after each segment roll) and
//! then from the Kafka batch entries of the log after the snapshot's offset,
//! which carry each batch's producer id, epoch and sequences
//! ([`ProducerTable::replay`]). Without a snapshot (a crash before the first
//! roll, or a data directory from before batches were stored) the active
//! segment is read. So a retry of a batch appended just before a crash is
//! answered with its original offsets. A producer whose state is still gone
//! (evicted, expired, or older than what was read) is treated as Kafka
//! treats one whose state expired: its next batch is accepted whatever its
//! sequence. (Answering such producers UNKNOWN_PRODUCER_ID instead was
//! tried: librdkafka then stalls and kafka-python fails the batches.)

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::clock::Clock;
use crate::domain::{ProducerBatch, ProducerError};

/// Batches remembered per producer and partition (as Kafka: 5, the most a
/// client may have in flight with idempotence on).
pub const CACHED_BATCHES: usize = 5;

/// Name of a partition's producer-state snapshot file.
pub const SNAPSHOT_FILE: &str = "producers.snapshot";

/// Magic and version of a snapshot:
/// `[magic][end u64][count u32] count x ([id i64][epoch i16][n u8] n x
/// ([first_seq i32][last_seq i32][base_offset u64])) [crc32 u32 of all after the magic]`.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"FLMPRD\x00\x01";

/// Limits on producer state, shared by every partition of a broker.
#[derive(Debug)]
pub struct ProducerLimits {
    /// Most producers tracked by one partition.
    pub per_partition: usize,
    /// Most producer entries over all partitions.
    pub total: usize,
    /// An entry idle this long (milliseconds, [`Clock::mono_ms`]) is dropped.
    pub expiry_ms: u64,
    /// The clock entries are stamped with.
    pub clock: Clock,
    tracked: AtomicUsize,
}

impl ProducerLimits {
    /// Limits with the given bounds.
    pub fn new(per_partition: usize, total: usize, expiry_ms: u64, clock: Clock) -> Self {
        ProducerLimits {
            per_partition: per_partition.max(1),
            total: total.max(1),
            expiry_ms,
            clock,
            tracked: AtomicUsize::new(0),
        }
    }

    /// Producer entries tracked over all partitions.
    pub fn tracked(&self) -> usize {
        self.tracked.load(Ordering::Acquire)
    }

    /// Takes a slot of the total, if one is free.
    fn take_slot(&self) -> bool {
        self.tracked
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.total).then_some(n + 1)
            })
            .is_ok()
    }

    fn release(&self, n: usize) {
        self.tracked.fetch_sub(n, Ordering::AcqRel);
    }
}

/// What to do with an idempotent batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Append it (then [`ProducerTable::record`] its offset).
    Append,
    /// A retry of a batch already appended at this base offset: answer that,
    /// append nothing.
    Duplicate(u64),
    /// Refuse it.
    Refuse(ProducerError),
}

#[derive(Debug, Clone, Copy)]
struct BatchMeta {
    first_seq: i32,
    last_seq: i32,
    base_offset: u64,
}

#[derive(Debug)]
struct Entry {
    epoch: i16,
    batches: VecDeque<BatchMeta>,
    last_used_ms: u64,
    /// Order of last use, for LRU eviction.
    touch: u64,
}

/// The last sequence of a batch of `count` records from `first` (sequences
/// wrap from `i32::MAX` to 0, as Kafka's do).
pub fn last_sequence(first: i32, count: u32) -> i32 {
    let span = i64::from(count.max(1)) - 1;
    let last = (i64::from(first) + span) % (i64::from(i32::MAX) + 1);
    i32::try_from(last).unwrap_or(0) // ok: below i32::MAX + 1 by the modulo
}

fn follows(last: i32, first: i32) -> bool {
    if last == i32::MAX {
        first == 0
    } else {
        first == last + 1
    }
}

/// The producers of one partition.
#[derive(Debug)]
pub struct ProducerTable {
    entries: HashMap<i64, Entry>,
    touches: u64,
    limits: std::sync::Arc<ProducerLimits>,
}

impl Drop for ProducerTable {
    fn drop(&mut self) {
        self.limits.release(self.entries.len());
    }
}

impl ProducerTable {
    /// An empty table under `limits`.
    pub fn new(limits: std::sync::Arc<ProducerLimits>) -> Self {
        ProducerTable {
            entries: HashMap::new(),
            touches: 0,
            limits,
        }
    }

    /// Producers tracked.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no producer is tracked.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Decides on a batch of `count` records from `p`, in Kafka's order:
    /// a duplicate of a cached batch first, then the epoch, then the sequence.
    pub fn check(&self, p: &ProducerBatch, count: u32) -> Verdict {
        let Some(e) = self.entries.get(&p.id) else {
            // Unknown here (new, or its state expired): accepted whatever the sequence.
            return Verdict::Append;
        };
        let last = last_sequence(p.base_sequence, count);
        if p.epoch == e.epoch {
            if let Some(b) = e
                .batches
                .iter()
                .find(|b| b.first_seq == p.base_sequence && b.last_seq == last)
            {
                return Verdict::Duplicate(b.base_offset);
            }
        }
        if p.epoch < e.epoch {
            return Verdict::Refuse(ProducerError::InvalidEpoch);
        }
        if p.epoch > e.epoch {
            // A new epoch starts its sequences at 0.
            return if p.base_sequence == 0 {
                Verdict::Append
            } else {
                Verdict::Refuse(ProducerError::OutOfOrderSequence)
            };
        }
        match e.batches.back() {
            Some(b) if !follows(b.last_seq, p.base_sequence) => {
                Verdict::Refuse(ProducerError::OutOfOrderSequence)
            }
            _ => Verdict::Append,
        }
    }

    /// Records an appended batch of `count` records from `p` at `base_offset`.
    /// Returns false when the producer could not be tracked (the broker-wide
    /// limit is reached and this partition tracks no one to evict).
    pub fn record(&mut self, p: &ProducerBatch, count: u32, base_offset: u64) -> bool {
        let now = self.limits.clock.mono_ms();
        self.touches += 1;
        let touch = self.touches;
        if !self.entries.contains_key(&p.id) && !self.make_room() {
            return false;
        }
        let e = self.entries.entry(p.id).or_insert_with(|| Entry {
            epoch: p.epoch,
            batches: VecDeque::with_capacity(CACHED_BATCHES),
            last_used_ms: now,
            touch,
        });
        if p.epoch != e.epoch {
            e.epoch = p.epoch;
            e.batches.clear();
        }
        if e.batches.len() >= CACHED_BATCHES {
            e.batches.pop_front();
        }
        e.batches.push_back(BatchMeta {
            first_seq: p.base_sequence,
            last_seq: last_sequence(p.base_sequence, count),
            base_offset,
        });
        e.last_used_ms = now;
        e.touch = touch;
        true
    }

    /// Makes room for one new entry: a slot of the total, evicting this
    /// partition's least recently used producer when the partition is full or
    /// the total is reached. False when there is neither.
    fn make_room(&mut self) -> bool {
        if self.entries.len() < self.limits.per_partition && self.limits.take_slot() {
            return true;
        }
        // Full here or broker-wide: the new producer takes the LRU one's place
        // (its slot of the total stays taken).
        let Some(lru) = self
            .entries
            .iter()
            .min_by_key(|(_, e)| e.touch)
            .map(|(id, _)| *id)
        else {
            return false;
        };
        self.entries.remove(&lru);
        tracing::debug!(
            producer = lru,
            "producer state evicted (least recently used)"
        );
        true
    }

    /// Takes in one batch read from the log: the state an append of it
    /// would have left (its epoch, its place among the producer's last
    /// batches), without any check. For rebuilding the table at start.
    pub fn replay(&mut self, p: &ProducerBatch, count: u32, base_offset: u64) {
        let stale = self.entries.get(&p.id).is_some_and(|e| p.epoch < e.epoch);
        if !stale {
            self.record(p, count, base_offset);
        }
    }

    /// The table, with the partition's transactions, as a snapshot taken at
    /// log offset `end` (see the module docs).
    pub fn encode_snapshot(&self, end: u64, txns: &super::txns::TxnIndex) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + self.entries.len() * (11 + 16 * CACHED_BATCHES));
        out.extend_from_slice(&SNAPSHOT_MAGIC);
        out.extend_from_slice(&end.to_be_bytes());
        out.extend_from_slice(
            &u32::try_from(self.entries.len())
                .unwrap_or(u32::MAX)
                .to_be_bytes(),
        );
        let mut by_use: Vec<(&i64, &Entry)> = self.entries.iter().collect();
        by_use.sort_by_key(|(_, e)| e.touch);
        for (id, e) in by_use {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&e.epoch.to_be_bytes());
            out.push(u8::try_from(e.batches.len()).unwrap_or(u8::MAX));
            for b in &e.batches {
                out.extend_from_slice(&b.first_seq.to_be_bytes());
                out.extend_from_slice(&b.last_seq.to_be_bytes());
                out.extend_from_slice(&b.base_offset.to_be_bytes());
            }
        }
        txns.encode(&mut out);
        let crc = crc32fast::hash(&out[SNAPSHOT_MAGIC.len()..]);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// Loads a snapshot into an empty table (least recently used first, so
    /// the limits keep the most recent ones); returns the log offset it was
    /// taken at and the partition's transactions then. `None` (nothing
    /// loaded) for a damaged snapshot, one of another version, or one taken
    /// past `log_end` (the log lost its tail since: the snapshot may hold
    /// batches that are gone).
    pub fn load_snapshot(
        &mut self,
        raw: &[u8],
        log_end: u64,
    ) -> Option<(u64, super::txns::TxnIndex)> {
        let (body, crc) = raw.split_at_checked(raw.len().checked_sub(4)?)?;
        let body = body.strip_prefix(&SNAPSHOT_MAGIC[..])?;
        if crc32fast::hash(body).to_be_bytes() != crc {
            return None;
        }
        let mut r = flume_protocol::wire::Reader::new(body);
        let end = r.u64().ok()?;
        let count = r.u32().ok()?;
        let mut loaded = Vec::new();
        for _ in 0..count {
            let id = r.i64().ok()?;
            let epoch = r.i16().ok()?;
            let n = r.u8().ok()?;
            let mut batches = Vec::new();
            for _ in 0..n {
                let first_seq = r.i32().ok()?;
                let last_seq = r.i32().ok()?;
                let base_offset = r.u64().ok()?;
                batches.push((first_seq, last_seq, base_offset));
            }
            loaded.push((id, epoch, batches));
        }
        let txns = super::txns::TxnIndex::decode(&mut r)?;
        r.finish().ok()?;
        if end > log_end {
            return None;
        }
        for (id, epoch, batches) in loaded {
            if batches.is_empty() {
                // Known by its epoch alone (a marker fenced it).
                self.fence(id, epoch);
            }
            for (first_seq, last_seq, base_offset) in batches {
                // The count that gives this last sequence from the first.
                let span = (i64::from(last_seq) - i64::from(first_seq))
                    .rem_euclid(i64::from(i32::MAX) + 1)
                    + 1;
                let count = u32::try_from(span).unwrap_or(1);
                self.record(
                    &ProducerBatch {
                        id,
                        epoch,
                        base_sequence: first_seq,
                    },
                    count,
                    base_offset,
                );
            }
        }
        Some((end, txns))
    }

    /// A transaction marker of producer `id` at `epoch` (written by the
    /// transaction coordinator): a newer epoch than the one known fences the
    /// older one here, as Kafka's markers do (its batches are refused with
    /// INVALID_PRODUCER_EPOCH from now on).
    pub fn fence(&mut self, id: i64, epoch: i16) {
        let now = self.limits.clock.mono_ms();
        self.touches += 1;
        let touch = self.touches;
        if let Some(e) = self.entries.get_mut(&id) {
            if epoch > e.epoch {
                e.epoch = epoch;
                e.batches.clear();
            }
            e.last_used_ms = now;
            e.touch = touch;
            return;
        }
        if self.make_room() {
            self.entries.insert(
                id,
                Entry {
                    epoch,
                    batches: VecDeque::new(),
                    last_used_ms: now,
                    touch,
                },
            );
        }
    }

    /// Each producer tracked here: id, epoch and the last sequence appended
    /// (-1 when only its epoch is known).
    pub fn describe(&self) -> Vec<(i64, i16, i32)> {
        let mut out: Vec<(i64, i16, i32)> = self
            .entries
            .iter()
            .map(|(id, e)| (*id, e.epoch, e.batches.back().map_or(-1, |b| b.last_seq)))
            .collect();
        out.sort_unstable();
        out
    }

    /// Drops the producers idle for longer than the expiry. Returns how many.
    pub fn expire(&mut self) -> usize {
        let now = self.limits.clock.mono_ms();
        let expiry = self.limits.expiry_ms;
        let before = self.entries.len();
        self.entries
            .retain(|_, e| now.saturating_sub(e.last_used_ms) <= expiry);
        let gone = before - self.entries.len();
        self.limits.release(gone);
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn limits(per: usize, total: usize) -> (Arc<ProducerLimits>, Clock) {
        let clock = Clock::manual();
        (
            Arc::new(ProducerLimits::new(per, total, 1000, clock.clone())),
            clock,
        )
    }

    fn pb(id: i64, epoch: i16, seq: i32) -> ProducerBatch {
        ProducerBatch {
            id,
            epoch,
            base_sequence: seq,
        }
    }

    /// Checks and, when appended, records at `*end`; returns the verdict.
    fn offer(t: &mut ProducerTable, p: ProducerBatch, count: u32, end: &mut u64) -> Verdict {
        let v = t.check(&p, count);
        if v == Verdict::Append {
            t.record(&p, count, *end);
            *end += u64::from(count);
        }
        v
    }

    #[test]
    fn in_order_batches_append_and_retries_get_their_original_offsets() {
        let (l, _) = limits(10, 100);
        let mut t = ProducerTable::new(l);
        let mut end = 100;
        assert_eq!(offer(&mut t, pb(1, 0, 0), 3, &mut end), Verdict::Append);
        assert_eq!(offer(&mut t, pb(1, 0, 3), 2, &mut end), Verdict::Append);
        assert_eq!(end, 105);
        assert_eq!(
            offer(&mut t, pb(1, 0, 0), 3, &mut end),
            Verdict::Duplicate(100)
        );
        assert_eq!(
            offer(&mut t, pb(1, 0, 3), 2, &mut end),
            Verdict::Duplicate(103)
        );
        assert_eq!(end, 105, "nothing appended for a retry");
        assert_eq!(offer(&mut t, pb(1, 0, 5), 1, &mut end), Verdict::Append);
    }

    #[test]
    fn only_the_last_five_batches_are_remembered() {
        let (l, _) = limits(10, 100);
        let mut t = ProducerTable::new(l);
        let mut end = 0;
        for seq in 0..7 {
            assert_eq!(offer(&mut t, pb(1, 0, seq), 1, &mut end), Verdict::Append);
        }
        assert_eq!(
            offer(&mut t, pb(1, 0, 2), 1, &mut end),
            Verdict::Duplicate(2)
        );
        assert_eq!(
            offer(&mut t, pb(1, 0, 1), 1, &mut end),
            Verdict::Refuse(ProducerError::OutOfOrderSequence),
            "older than the cache: refused, not appended again"
        );
    }

    #[test]
    fn a_gap_or_a_partial_overlap_is_out_of_order() {
        let (l, _) = limits(10, 100);
        let mut t = ProducerTable::new(l);
        let mut end = 0;
        offer(&mut t, pb(1, 0, 0), 2, &mut end);
        assert_eq!(
            offer(&mut t, pb(1, 0, 3), 1, &mut end),
            Verdict::Refuse(ProducerError::OutOfOrderSequence)
        );
        assert_eq!(
            offer(&mut t, pb(1, 0, 0), 3, &mut end),
            Verdict::Refuse(ProducerError::OutOfOrderSequence),
            "same first sequence, different length: not a duplicate"
        );
        assert_eq!(offer(&mut t, pb(1, 0, 2), 1, &mut end), Verdict::Append);
    }

    #[test]
    fn epochs_fence_older_ones_and_a_new_epoch_starts_at_zero() {
        let (l, _) = limits(10, 100);
        let mut t = ProducerTable::new(l);
        let mut end = 0;
        offer(&mut t, pb(1, 1, 0), 1, &mut end);
        assert_eq!(
            offer(&mut t, pb(1, 0, 1), 1, &mut end),
            Verdict::Refuse(ProducerError::InvalidEpoch)
        );
        assert_eq!(
            offer(&mut t, pb(1, 2, 5), 1, &mut end),
            Verdict::Refuse(ProducerError::OutOfOrderSequence)
        );
        assert_eq!(offer(&mut t, pb(1, 2, 0), 1, &mut end), Verdict::Append);
        assert_eq!(
            offer(&mut t, pb(1, 1, 1), 1, &mut end),
            Verdict::Refuse(ProducerError::InvalidEpoch)
        );
    }

    #[test]
    fn sequences_wrap_at_i32_max() {
        assert_eq!(last_sequence(i32::MAX - 1, 3), 0);
        let (l, _) = limits(10, 100);
        let mut t = ProducerTable::new(l);
        let mut end = 0;
        offer(&mut t, pb(1, 0, i32::MAX - 1), 2, &mut end);
        assert_eq!(offer(&mut t, pb(1, 0, 0), 1, &mut end), Verdict::Append);
    }

    #[test]
    fn producers_interleave_independently() {
        let (l, _) = limits(10, 100);
        let mut t = ProducerTable::new(l);
        let mut end = 0;
        assert_eq!(offer(&mut t, pb(1, 0, 0), 1, &mut end), Verdict::Append);
        assert_eq!(offer(&mut t, pb(2, 0, 0), 1, &mut end), Verdict::Append);
        assert_eq!(offer(&mut t, pb(1, 0, 1), 1, &mut end), Verdict::Append);
        assert_eq!(
            offer(&mut t, pb(2, 0, 0), 1, &mut end),
            Verdict::Duplicate(1)
        );
        assert_eq!(
            offer(&mut t, pb(1, 0, 0), 1, &mut end),
            Verdict::Duplicate(0)
        );
    }

    #[test]
    fn a_full_partition_evicts_its_least_recently_used_producer() {
        let (l, _) = limits(2, 100);
        let mut t = ProducerTable::new(Arc::clone(&l));
        let mut end = 0;
        offer(&mut t, pb(1, 0, 0), 1, &mut end);
        offer(&mut t, pb(2, 0, 0), 1, &mut end);
        offer(&mut t, pb(1, 0, 1), 1, &mut end); // 1 used last: 2 is the LRU
        offer(&mut t, pb(3, 0, 0), 1, &mut end);
        assert_eq!(t.len(), 2);
        assert_eq!(l.tracked(), 2);
        // 2 was evicted: its retry is accepted again (the documented duplicate window).
        assert_eq!(offer(&mut t, pb(2, 0, 0), 1, &mut end), Verdict::Append);
        // ... and 1 (the LRU by then) made room for it; 3 is still tracked.
        assert_eq!(
            offer(&mut t, pb(3, 0, 0), 1, &mut end),
            Verdict::Duplicate(3)
        );
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn the_broker_wide_limit_bounds_every_partition_together() {
        let (l, _) = limits(10, 2);
        let mut a = ProducerTable::new(Arc::clone(&l));
        let mut b = ProducerTable::new(Arc::clone(&l));
        let mut end = 0;
        offer(&mut a, pb(1, 0, 0), 1, &mut end);
        offer(&mut a, pb(2, 0, 0), 1, &mut end);
        assert_eq!(l.tracked(), 2);
        // b tracks no one to evict: appended untracked.
        assert!(!b.record(&pb(3, 0, 0), 1, 9));
        assert_eq!(b.len(), 0);
        // a evicts its own LRU for a new producer.
        assert!(a.record(&pb(4, 0, 0), 1, 10));
        assert_eq!((a.len(), l.tracked()), (2, 2));
        drop(a);
        assert_eq!(l.tracked(), 0, "a dropped table gives its slots back");
        assert!(b.record(&pb(3, 0, 1), 1, 11));
        assert_eq!(l.tracked(), 1);
    }

    #[test]
    fn idle_producers_expire_by_the_injected_clock() {
        let (l, clock) = limits(10, 100);
        let mut t = ProducerTable::new(Arc::clone(&l));
        let mut end = 0;
        offer(&mut t, pb(1, 0, 0), 1, &mut end);
        clock.advance(Duration::from_millis(600));
        offer(&mut t, pb(2, 0, 0), 1, &mut end);
        assert_eq!(t.expire(), 0);
        clock.advance(Duration::from_millis(600));
        assert_eq!(t.expire(), 1, "1 was idle 1200 ms > 1000");
        assert_eq!((t.len(), l.tracked()), (1, 1));
        assert_eq!(offer(&mut t, pb(1, 0, 7), 1, &mut end), Verdict::Append);
    }

    #[test]
    fn a_snapshot_round_trips_and_a_damaged_or_later_one_is_refused() {
        let (l, _) = limits(10, 100);
        let mut t = ProducerTable::new(Arc::clone(&l));
        let mut end = 0;
        for seq in 0..7 {
            offer(&mut t, pb(1, 3, seq * 2), 2, &mut end);
        }
        offer(&mut t, pb(2, 0, i32::MAX), 2, &mut end); // wraps to 0
        let mut txns = super::super::txns::TxnIndex::default();
        txns.on_batch(9, 3);
        let raw = t.encode_snapshot(end, &txns);
        let mut back = ProducerTable::new(Arc::clone(&l));
        assert_eq!(back.load_snapshot(&raw, end), Some((end, txns)));
        assert_eq!(back.len(), 2);
        for (p, count) in [(pb(1, 3, 12), 2), (pb(1, 3, 4), 2), (pb(2, 0, i32::MAX), 2)] {
            assert_eq!(back.check(&p, count), t.check(&p, count), "{p:?}");
        }
        assert_eq!(back.check(&pb(1, 3, 14), 1), Verdict::Append);
        assert_eq!(
            back.check(&pb(1, 2, 14), 1),
            Verdict::Refuse(ProducerError::InvalidEpoch)
        );
        // Taken past the log's end (a lost tail), damaged, cut or of another version: not loaded.
        let mut fresh = ProducerTable::new(Arc::clone(&l));
        assert_eq!(fresh.load_snapshot(&raw, end - 1), None);
        for cut in 0..raw.len() {
            assert_eq!(fresh.load_snapshot(&raw[..cut], end), None);
        }
        let mut bad = raw.clone();
        bad[12] ^= 1;
        assert_eq!(fresh.load_snapshot(&bad, end), None);
        assert_eq!(fresh.len(), 0);
        // A replayed batch of an older epoch than the one known changes nothing.
        back.replay(&pb(1, 2, 100), 1, 500);
        assert_eq!(back.check(&pb(1, 3, 12), 2), Verdict::Duplicate(12));
    }
}

//! A partition's transactions, as its log holds them: which producers have a
//! transaction open here (from the offset of its first batch), and which
//! ended in an abort (from its first batch to its ABORT marker), so that
//! `read_committed` readers stop at the last stable offset and skip aborted
//! records.
//!
//! - A transactional batch (Kafka's transactional attribute) of a producer
//!   with no transaction open here opens one at the batch's offset.
//! - A control batch (a COMMIT or ABORT marker, written by the broker's
//!   transaction coordinator, `engine::txn`) closes the producer's open
//!   transaction; an ABORT records the aborted range.
//! - The last stable offset ([`TxnIndex::stable_offset`]) is the first
//!   offset of the oldest open transaction, or the log end when none is.
//!
//! The index is rebuilt like the producer table (`super::producers`): it
//! travels in the producer snapshot and is replayed from the log after it.
//! Aborted ranges below the log start are dropped ([`TxnIndex::trim`]);
//! open transactions are bounded by the coordinator's open-transaction limit
//! (every open transaction here is one the coordinator tracks).

use std::collections::HashMap;

use flume_protocol::kafka_batch::{self, BatchError, BatchHeader};

pub use crate::storage::AbortedTxn;

/// What a control batch says (Kafka's control record key: version, type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    /// The transaction's records are aborted.
    Abort,
    /// The transaction's records are committed.
    Commit,
}

impl Marker {
    /// The control record's key: `[version i16 = 0][type i16]` (0 abort, 1 commit).
    pub fn key(self) -> [u8; 4] {
        let t: i16 = match self {
            Marker::Abort => 0,
            Marker::Commit => 1,
        };
        let mut k = [0u8; 4];
        k[2..].copy_from_slice(&t.to_be_bytes());
        k
    }

    /// The marker a control batch's (uncompressed) records section holds.
    ///
    /// # Errors
    /// A section that does not decode, or a control type other than 0 and 1.
    pub fn of(header: &BatchHeader, records: &[u8]) -> Result<Marker, String> {
        let mut found = None;
        kafka_batch::for_each_record::<BatchError>(header, records, &mut |r| {
            let t = r
                .key
                .and_then(|k| k.get(2..4))
                .map(|b| i16::from_be_bytes([b[0], b[1]]));
            found = found.or(t);
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        match found {
            Some(0) => Ok(Marker::Abort),
            Some(1) => Ok(Marker::Commit),
            other => Err(format!("control record type {other:?}")),
        }
    }
}

/// A partition's open and aborted transactions.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TxnIndex {
    /// Producer id -> the offset of its open transaction's first batch here.
    open: HashMap<i64, u64>,
    /// Aborted transactions, in the order of their markers.
    aborted: Vec<AbortedTxn>,
}

impl TxnIndex {
    /// A transactional batch of `producer_id` at `offset`.
    pub fn on_batch(&mut self, producer_id: i64, offset: u64) {
        self.open.entry(producer_id).or_insert(offset);
    }

    /// A marker of `producer_id` at `offset`.
    pub fn on_marker(&mut self, producer_id: i64, offset: u64, marker: Marker) {
        if let Some(first) = self.open.remove(&producer_id) {
            if marker == Marker::Abort {
                self.aborted.push(AbortedTxn {
                    producer_id,
                    first_offset: first,
                    last_offset: offset,
                });
            }
        }
    }

    /// The last stable offset: below it every transaction has ended.
    pub fn stable_offset(&self, log_end: u64) -> u64 {
        self.open
            .values()
            .copied()
            .min()
            .map_or(log_end, |f| f.min(log_end))
    }

    /// Whether any transaction is open here.
    pub fn has_open(&self) -> bool {
        !self.open.is_empty()
    }

    /// The aborted transactions a read of `from..to` may meet: those whose
    /// range reaches `from` and starts before `to`.
    pub fn aborted_in(&self, from: u64, to: u64) -> Vec<AbortedTxn> {
        self.aborted
            .iter()
            .filter(|a| a.last_offset >= from && a.first_offset < to)
            .copied()
            .collect()
    }

    /// The producers with a transaction open here, and where each began.
    pub fn open(&self) -> impl Iterator<Item = (i64, u64)> + '_ {
        self.open.iter().map(|(p, o)| (*p, *o))
    }

    /// Drops the aborted ranges that end below the log start.
    pub fn trim(&mut self, log_start: u64) {
        self.aborted.retain(|a| a.last_offset >= log_start);
    }

    /// Appends the index to a snapshot: `[open u32] open x ([pid i64][first u64])
    /// [aborted u32] aborted x ([pid i64][first u64][last u64])`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX).to_be_bytes();
        out.extend_from_slice(&n(self.open.len()));
        let mut open: Vec<_> = self.open.iter().collect();
        open.sort_unstable();
        for (p, o) in open {
            out.extend_from_slice(&p.to_be_bytes());
            out.extend_from_slice(&o.to_be_bytes());
        }
        out.extend_from_slice(&n(self.aborted.len()));
        for a in &self.aborted {
            out.extend_from_slice(&a.producer_id.to_be_bytes());
            out.extend_from_slice(&a.first_offset.to_be_bytes());
            out.extend_from_slice(&a.last_offset.to_be_bytes());
        }
    }

    /// Reads what [`TxnIndex::encode`] wrote.
    pub fn decode(r: &mut flume_protocol::wire::Reader<'_>) -> Option<TxnIndex> {
        let mut t = TxnIndex::default();
        for _ in 0..r.u32().ok()? {
            let p = r.i64().ok()?;
            let o = r.u64().ok()?;
            t.open.insert(p, o);
        }
        for _ in 0..r.u32().ok()? {
            t.aborted.push(AbortedTxn {
                producer_id: r.i64().ok()?,
                first_offset: r.u64().ok()?,
                last_offset: r.u64().ok()?,
            });
        }
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_transactions_hold_the_stable_offset_and_aborts_are_remembered() {
        let mut t = TxnIndex::default();
        assert_eq!(t.stable_offset(10), 10);
        t.on_batch(1, 10);
        t.on_batch(1, 12); // a later batch of the same transaction
        t.on_batch(2, 11);
        assert_eq!(t.stable_offset(20), 10);
        t.on_marker(1, 20, Marker::Commit);
        assert_eq!(t.stable_offset(21), 11);
        t.on_marker(2, 21, Marker::Abort);
        assert_eq!(t.stable_offset(22), 22);
        assert!(!t.has_open());
        let a = AbortedTxn {
            producer_id: 2,
            first_offset: 11,
            last_offset: 21,
        };
        assert_eq!(t.aborted_in(0, 100), vec![a]);
        assert_eq!(t.aborted_in(21, 22), vec![a]);
        assert!(t.aborted_in(22, 30).is_empty());
        assert!(t.aborted_in(0, 11).is_empty());
        // A marker for a producer with nothing open here changes nothing.
        t.on_marker(3, 22, Marker::Abort);
        assert_eq!(t.aborted_in(0, 100).len(), 1);
        let mut raw = Vec::new();
        t.on_batch(4, 30);
        t.encode(&mut raw);
        let back = TxnIndex::decode(&mut flume_protocol::wire::Reader::new(&raw)).unwrap();
        assert_eq!(back, t);
        t.trim(22);
        assert!(t.aborted_in(0, 100).is_empty());
        assert_eq!(t.stable_offset(40), 30);
    }

    #[test]
    fn a_marker_reads_its_control_record() {
        use kafka_batch::{BatchBuilder, BatchMeta, Compression, ATTR_CONTROL, ATTR_TRANSACTIONAL};
        for m in [Marker::Abort, Marker::Commit] {
            let mut b = BatchBuilder::new(None);
            b.push(0, 1, Some(&m.key()), Some(&[0, 0, 0, 0, 0, 0]), []);
            let batch = b
                .finish(
                    &BatchMeta {
                        flags: ATTR_CONTROL | ATTR_TRANSACTIONAL,
                        producer_id: 5,
                        producer_epoch: 1,
                        ..BatchMeta::default()
                    },
                    Compression::None,
                )
                .unwrap();
            let checked = kafka_batch::check(&batch).unwrap();
            assert_eq!(Marker::of(&checked.header, checked.data()), Ok(m));
        }
    }
}

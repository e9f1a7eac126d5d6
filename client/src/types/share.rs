//! A share consumer's types and settings: the records it hands out and
//! their acknowledgements ([`ShareRecord`], [`AckOutcome`], the book of
//! what is held), the builder's settings, and what one fetch brings back,
//! shared by both transports (the builder's `build` is the facade's,
//! `crate::share`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flume_protocol::record::Record;
use flume_protocol::{
    ErrorCode, ShareAcknowledgement, ACK_ACCEPT, ACK_REJECT, ACK_RELEASE, ACK_RENEW,
};
use flume_rt::sync::lock;

use crate::types::connection::ConnectionConfig;

/// How a [`ShareConsumer`] acknowledges what it handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AckMode {
    /// What the application did not acknowledge itself is accepted by the next poll.
    #[default]
    Implicit,
    /// Only what the application acknowledges is sent.
    Explicit,
}

/// What to do with a record of a share group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcknowledgeType {
    /// Processed: never delivered again.
    Accept,
    /// Not processed now: delivered again (to any member).
    Release,
    /// Not processable: never delivered again.
    Reject,
    /// Still processing: keep the lock another lock duration.
    Renew,
}

impl AcknowledgeType {
    fn code(self) -> i8 {
        match self {
            AcknowledgeType::Accept => ACK_ACCEPT,
            AcknowledgeType::Release => ACK_RELEASE,
            AcknowledgeType::Reject => ACK_REJECT,
            AcknowledgeType::Renew => ACK_RENEW,
        }
    }
}

/// (topic, partition, offset) of a record handed out.
pub(crate) type RecordKey = (String, i32, i64);

/// The records handed out and not yet acknowledged to the broker, with what
/// the application chose for them (`None`: nothing yet).
#[derive(Debug, Default)]
pub(crate) struct AckBook {
    pub(crate) held: BTreeMap<RecordKey, Option<AcknowledgeType>>,
}

impl AckBook {
    /// Takes the acknowledgements to send: those chosen, and with
    /// `accept_rest` every other record held, as accepted. Consecutive
    /// offsets of one partition with one type become one range.
    pub(crate) fn take(&mut self, accept_rest: bool) -> Vec<ShareAcknowledgement> {
        let mut out: Vec<ShareAcknowledgement> = Vec::new();
        let mut keep = BTreeMap::new();
        for (key, choice) in std::mem::take(&mut self.held) {
            let ack = match choice {
                Some(a) => a,
                None if accept_rest => AcknowledgeType::Accept,
                None => {
                    keep.insert(key, None);
                    continue;
                }
            };
            if ack == AcknowledgeType::Renew {
                keep.insert(key.clone(), None);
            }
            let (topic, partition, offset) = key;
            match out.last_mut() {
                Some(l)
                    if l.topic == topic
                        && l.partition == partition
                        && l.last_offset + 1 == offset
                        && l.ack_type == ack.code() =>
                {
                    l.last_offset = offset;
                }
                _ => out.push(ShareAcknowledgement {
                    topic,
                    partition,
                    first_offset: offset,
                    last_offset: offset,
                    ack_type: ack.code(),
                }),
            }
        }
        self.held = keep;
        out
    }
}

/// A record of a share group, with how many times it has been delivered.
#[derive(Debug, Clone)]
pub struct ShareRecord {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Deliveries of this record, this one included (1 the first time).
    pub delivery_count: u16,
    /// The record (offset, timestamp, key, value, headers).
    pub record: Record,
    pub(crate) book: Arc<Mutex<AckBook>>,
}

impl std::ops::Deref for ShareRecord {
    type Target = Record;
    fn deref(&self) -> &Record {
        &self.record
    }
}

impl ShareRecord {
    /// Marks the record processed (sent with the next poll or commit).
    pub fn accept(&self) {
        self.acknowledge(AcknowledgeType::Accept);
    }
    /// Marks the record to be delivered again (sent with the next poll or commit).
    pub fn release(&self) {
        self.acknowledge(AcknowledgeType::Release);
    }
    /// Marks the record never to be delivered again (sent with the next poll or commit).
    pub fn reject(&self) {
        self.acknowledge(AcknowledgeType::Reject);
    }
    /// Marks the record as `ack` says (sent with the next poll or commit).
    /// A record already acknowledged to the broker is left as it is.
    pub fn acknowledge(&self, ack: AcknowledgeType) {
        let key = (self.topic.clone(), self.partition, self.offset_i64());
        if let Some(slot) = lock(&self.book).held.get_mut(&key) {
            *slot = Some(ack);
        }
    }
    pub(crate) fn offset_i64(&self) -> i64 {
        i64::try_from(self.record.offset).unwrap_or(i64::MAX)
    }
}

/// The outcome of one record's acknowledgement ([`ShareConsumer::commit`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckOutcome {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The record's offset.
    pub offset: i64,
    /// What was sent.
    pub ack: i8,
    /// NONE, or why the broker refused (INVALID_RECORD_STATE: the lock ran
    /// out and the record went back, or another member holds it now).
    pub error: ErrorCode,
}

/// Builder for [`ShareConsumer`].
#[derive(Debug, Clone)]
pub struct ShareConsumerBuilder {
    pub(crate) addr: String,
    pub(crate) group: String,
    pub(crate) topics: Vec<String>,
    pub(crate) mode: AckMode,
    pub(crate) max_records: i32,
    pub(crate) max_bytes: i32,
    pub(crate) max_wait: Duration,
    pub(crate) client_id: String,
    pub(crate) connection: ConnectionConfig,
}

impl ShareConsumerBuilder {
    /// The defaults ([`ShareConsumer::builder`](crate::ShareConsumer::builder)).
    pub(crate) fn new(addr: &str, group: &str) -> Self {
        ShareConsumerBuilder {
            addr: addr.to_owned(),
            group: group.to_owned(),
            topics: Vec::new(),
            mode: AckMode::Implicit,
            max_records: 500,
            max_bytes: 1 << 20,
            max_wait: Duration::from_secs(1),
            client_id: "flume-share".into(),
            connection: ConnectionConfig::default(),
        }
    }

    /// Subscribes to these topics (adds to those given before).
    pub fn subscribe<I, S>(mut self, topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.topics.extend(topics.into_iter().map(Into::into));
        self
    }
    /// How records are acknowledged (default [`AckMode::Implicit`]).
    pub fn ack_mode(mut self, mode: AckMode) -> Self {
        self.mode = mode;
        self
    }
    /// Most records one poll acquires (default 500).
    pub fn max_records(mut self, n: usize) -> Self {
        self.max_records = i32::try_from(n.max(1)).unwrap_or(i32::MAX);
        self
    }
    /// Most record bytes one poll reads per partition (default 1 MiB).
    pub fn max_bytes(mut self, n: usize) -> Self {
        self.max_bytes = i32::try_from(n.max(1)).unwrap_or(i32::MAX);
        self
    }
    /// How long a poll waits at the broker for records (default 1 s).
    pub fn max_wait(mut self, d: Duration) -> Self {
        self.max_wait = d;
        self
    }
    /// The client id shown by the group's description (default
    /// `flume-share`; Flume's protocol only: over `kafka://` every request
    /// carries the SDK's Kafka client id).
    pub fn client_id(mut self, id: &str) -> Self {
        id.clone_into(&mut self.client_id);
        self
    }
    /// Connection settings (timeouts, TLS, credentials).
    pub fn connection(mut self, c: ConnectionConfig) -> Self {
        self.connection = c;
        self
    }

    pub(crate) fn limits(&self) -> FetchLimits {
        FetchLimits {
            max_records: self.max_records,
            max_bytes: self.max_bytes,
            max_wait: self.max_wait,
        }
    }
}

/// The limits of one fetch, as the builder set them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FetchLimits {
    pub max_records: i32,
    pub max_bytes: i32,
    pub max_wait: Duration,
}

/// The records one fetch acquired from one partition, each with its
/// delivery count.
#[derive(Debug)]
pub(crate) struct FetchedPartition {
    pub topic: String,
    pub partition: i32,
    pub records: Vec<(Record, u16)>,
}

/// What one fetch answered.
#[derive(Debug, Default)]
pub(crate) struct Fetched {
    pub partitions: Vec<FetchedPartition>,
    /// The broker had dropped the member (it joined again): the records it
    /// held went back, nothing held is its to acknowledge any more.
    pub dropped: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(book: &mut AckBook, t: &str, p: i32, o: i64, a: Option<AcknowledgeType>) {
        book.held.insert((t.into(), p, o), a);
    }

    #[test]
    fn acks_coalesce_consecutive_offsets_of_one_type() {
        let mut b = AckBook::default();
        for o in 0..5 {
            held(&mut b, "t", 0, o, Some(AcknowledgeType::Accept));
        }
        held(&mut b, "t", 0, 5, Some(AcknowledgeType::Release));
        held(&mut b, "t", 0, 7, Some(AcknowledgeType::Accept));
        held(&mut b, "t", 1, 8, None);
        let acks = b.take(false);
        let runs: Vec<(i32, i64, i64, i8)> = acks
            .iter()
            .map(|a| (a.partition, a.first_offset, a.last_offset, a.ack_type))
            .collect();
        assert_eq!(
            runs,
            vec![
                (0, 0, 4, ACK_ACCEPT),
                (0, 5, 5, ACK_RELEASE),
                (0, 7, 7, ACK_ACCEPT)
            ]
        );
        // Explicit mode keeps what was not acknowledged; implicit accepts it.
        assert_eq!(b.held.len(), 1);
        let acks = b.take(true);
        assert_eq!(acks.len(), 1);
        assert_eq!(acks[0].ack_type, ACK_ACCEPT);
        assert!(b.held.is_empty());
    }

    #[test]
    fn a_renewed_record_stays_held() {
        let mut b = AckBook::default();
        held(&mut b, "t", 0, 3, Some(AcknowledgeType::Renew));
        let acks = b.take(false);
        assert_eq!(acks[0].ack_type, ACK_RENEW);
        assert_eq!(b.held.get(&("t".into(), 0, 3)), Some(&None));
    }
}

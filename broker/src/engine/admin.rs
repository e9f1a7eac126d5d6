//! Topic and group administration: deleting a topic (its files removed
//! safely while readers and the writer may be active), changing a topic's
//! settings at run time, offsets by timestamp, deleting a group's committed
//! offsets. `docs/storage.md` ("Deleting a topic") describes the steps of a
//! delete and what a crash in the middle leaves.

use std::path::Path;
use std::sync::Arc;

use flume_protocol::ErrorCode;
use flume_rt as rt;

use super::groups::Groups;
use super::records::{Records, Topic};
use super::share::Shares;
use crate::config::named::{self, ConfigError, ConfigType};
use crate::config::BrokerConfig;
use crate::config::{valid_name, TopicConfig, MAX_SEGMENT_BYTES, MIN_REQUEST_SEGMENT_BYTES};
use crate::domain::{ConfigOp, FoundOffset, OffsetSpec, TopicChanges, TopicId, TopicPartition};
use crate::error::BrokerError;
use crate::storage::write_atomic;

/// Prefix of a deleted topic's directory until it is removed:
/// `__deleted-<ms>-<topic>`. Never a topic name (`__` is reserved), so a
/// broker that finds one at start never loads it; it finishes the delete.
pub const TOMBSTONE_PREFIX: &str = "__deleted-";

/// In a tombstone whose directory name could not hold the whole topic name
/// (a name is at most 255 bytes, a topic name 249): the topic's name.
const TOMBSTONE_TOPIC_FILE: &str = "deleted-topic";

/// Longest file name the data directory's file systems take.
const MAX_FILE_NAME: usize = 255;

/// The directory name of `topic`'s tombstone, deleted at `ms`: the topic's
/// whole name when it fits, else its first bytes and a hash of it (the whole
/// name is then written into the directory first: [`TOMBSTONE_TOPIC_FILE`]).
fn tombstone_dir_name(topic: &str, ms: i64) -> (String, bool) {
    let whole = format!("{TOMBSTONE_PREFIX}{ms}-{topic}");
    if whole.len() <= MAX_FILE_NAME {
        return (whole, false);
    }
    let hash = flume_protocol::fnv1a(topic.as_bytes());
    // Topic names are ASCII, so any byte is a character boundary.
    let head = topic.get(..160).unwrap_or(topic);
    (format!("{TOMBSTONE_PREFIX}{ms}-{head}~{hash:08x}"), true)
}

/// Whether a directory name is a tombstone's.
pub(super) fn is_tombstone(dir_name: &str) -> bool {
    dir_name
        .strip_prefix(TOMBSTONE_PREFIX)
        .and_then(|rest| rest.split_once('-'))
        .is_some()
}

/// The topic the tombstone at `path` belongs to: from the name file in it,
/// else from the directory's name.
pub(super) fn tombstone_topic(path: &Path) -> Option<String> {
    if let Ok(name) = std::fs::read_to_string(path.join(TOMBSTONE_TOPIC_FILE)) {
        return Some(name.trim_end().to_owned());
    }
    let dir_name = path.file_name()?.to_str()?;
    let rest = dir_name.strip_prefix(TOMBSTONE_PREFIX)?;
    let (_, topic) = rest.split_once('-')?;
    Some(topic.to_owned())
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> BrokerError {
    move |source| BrokerError::Io { what, source }
}

/// Removes a tombstone directory, then makes its removal durable.
pub(super) fn remove_tombstone(data_dir: &Path, tomb: &Path) -> Result<(), BrokerError> {
    std::fs::remove_dir_all(tomb).map_err(io(format!("remove {}", tomb.display())))?;
    crate::storage::fsync_dir(data_dir)?;
    Ok(())
}

/// The administration service: a topic's removal, its settings and
/// partitions changed at run time, offsets by timestamp, records deleted
/// below an offset. It changes topics through the records service and tells
/// the groups and share groups what a change means to them.
#[derive(Debug)]
pub struct Admin {
    config: Arc<BrokerConfig>,
    records: Arc<Records>,
    groups: Arc<Groups>,
    shares: Arc<Shares>,
}

impl Admin {
    pub(super) fn new(records: Arc<Records>, groups: Arc<Groups>, shares: Arc<Shares>) -> Self {
        Admin {
            config: Arc::clone(records.config()),
            records,
            groups,
            shares,
        }
    }
}

impl Admin {
    /// Deletes a topic: its partitions, their files and every group's
    /// committed offsets on it. Reads that had started finish on intact
    /// files; later requests get UNKNOWN_TOPIC. A crash in the middle leaves
    /// the whole topic or a tombstone that the next start removes.
    ///
    /// # Errors
    /// INVALID_NAME, UNKNOWN_TOPIC, or storage errors (the topic stays then,
    /// unless the rename to the tombstone was done: then it is gone, and the
    /// next start finishes the cleanup).
    pub async fn delete_topic(&self, name: &str) -> Result<(), BrokerError> {
        self.delete_topic_returning_id(name).await.map(|_| ())
    }

    /// [`Admin::delete_topic`], answering the deleted topic's id.
    ///
    /// # Errors
    /// As [`Admin::delete_topic`].
    pub async fn delete_topic_returning_id(&self, name: &str) -> Result<TopicId, BrokerError> {
        if !valid_name(name) {
            return Err(BrokerError::code_for(
                ErrorCode::InvalidName,
                format!("topic name {name:?}"),
            ));
        }
        // No create (nor an auto-create) of the name while its files go.
        let _guard = self.records.changing_topics().await;
        let topic = self
            .records
            .take_topic(name)
            .ok_or_else(|| BrokerError::code_for(ErrorCode::UnknownTopic, name))?;
        let id = topic.id;
        self.delete_removed(topic).await.map(|()| id)
    }

    /// Deletes the topic with this id, as [`Admin::delete_topic`] does (a
    /// topic of the same name created since has another id and stays);
    /// returns its name.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC (no topic has this id), else as [`Admin::delete_topic`].
    pub async fn delete_topic_by_id(&self, id: TopicId) -> Result<String, BrokerError> {
        let _guard = self.records.changing_topics().await;
        let topic = self
            .records
            .take_topic_by_id(id)
            .ok_or_else(|| BrokerError::code_for(ErrorCode::UnknownTopic, format!("id {id}")))?;
        let name = topic.name.clone();
        self.delete_removed(topic).await.map(|()| name)
    }

    /// Steps 2 to 5 of a delete (docs/storage.md, "Deleting a topic") for a
    /// topic just taken out of the map, under the create lock.
    async fn delete_removed(&self, topic: Arc<Topic>) -> Result<(), BrokerError> {
        let name = topic.name.as_str();
        for p in &topic.partitions {
            p.close_for_delete().await;
        }
        let data = self.config.data_dir.clone();
        let dir = data.join(name);
        let (tomb_name, name_file) = tombstone_dir_name(name, self.config.clock.wall_ms());
        let tomb = data.join(tomb_name);
        let renamed = {
            let (data, tomb, owned) = (data.clone(), tomb.clone(), name.to_owned());
            rt::unblock(move || {
                if name_file {
                    write_atomic(&dir.join(TOMBSTONE_TOPIC_FILE), owned.as_bytes())?;
                }
                std::fs::rename(&dir, &tomb).map_err(io(format!(
                    "rename {} to {}",
                    dir.display(),
                    tomb.display()
                )))?;
                Ok::<(), BrokerError>(crate::storage::fsync_dir(&data)?)
            })
            .await
        };
        if let Err(e) = renamed {
            tracing::error!(topic = name, error = %e, "deleting the topic failed; it is opened again");
            if tomb.exists() {
                // Renamed but not known durable: it is gone now, the next start cleans up.
                return Err(e);
            }
            let (config, shared) = (self.config.clone(), self.records.shared());
            let (owned, id, tc) = (name.to_owned(), topic.id, topic.config.clone());
            match rt::unblock(move || Records::open_topic(&config, &shared, &owned, id, tc)).await {
                Ok(t) => {
                    self.records.install_topic(Arc::new(t));
                }
                Err(e2) => {
                    tracing::error!(topic = name, error = %e2, "reopening the topic failed; it comes back at the next start")
                }
            }
            return Err(e);
        }
        if let Err(e) = self.shares.forget_share_topic(name).await {
            tracing::error!(topic = name, error = %e, "forgetting the deleted topic's share-group state failed");
        }
        let dropped = self.groups.forget_topic(name).await;
        match dropped {
            Ok(n) => {
                rt::unblock(move || remove_tombstone(&data, &tomb)).await?;
                tracing::info!(topic = name, committed_offsets_dropped = n, "topic deleted");
                Ok(())
            }
            Err(e) => {
                // The tombstone stays: the next start drops the offsets and removes it.
                tracing::error!(topic = name, error = %e, "dropping the deleted topic's committed offsets failed; the next start retries");
                Err(e)
            }
        }
    }

    /// A topic's settings.
    pub fn topic_config(&self, name: &str) -> Option<TopicConfig> {
        self.records.topic(name).map(|t| t.config.clone())
    }

    /// Changes a topic's settings that can change while it runs: retention
    /// by size and age (applied at the next maintenance pass) and the segment
    /// size (at the next roll). `topic.conf` is rewritten atomically first,
    /// so the change survives a restart. Returns the settings after the change.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, INVALID_REQUEST (a segment size out of
    /// 1024..=2^31), storage errors (nothing changed then).
    pub async fn alter_topic(
        &self,
        name: &str,
        changes: &TopicChanges,
    ) -> Result<TopicConfig, BrokerError> {
        let _guard = self.records.changing_topics().await;
        let topic = self
            .records
            .topic(name)
            .ok_or_else(|| BrokerError::code_for(ErrorCode::UnknownTopic, name))?;
        let mut tc = topic.config.clone();
        if let Some(v) = changes.retention_bytes {
            tc.retention_bytes = v;
            tc.overrides.insert("retention.bytes".to_owned());
        }
        if let Some(v) = changes.retention_ms {
            tc.retention_ms = v;
            tc.overrides.insert("retention.ms".to_owned());
        }
        if let Some(v) = changes.segment_bytes {
            if !(MIN_REQUEST_SEGMENT_BYTES..=MAX_SEGMENT_BYTES).contains(&v) {
                return Err(BrokerError::code_for(
                    ErrorCode::InvalidRequest,
                    format!("segment_bytes is {v}, it must be {MIN_REQUEST_SEGMENT_BYTES}..={MAX_SEGMENT_BYTES}"),
                ));
            }
            tc.segment_bytes = v;
            tc.overrides.insert("segment.bytes".to_owned());
        }
        self.store_topic_config(name, &topic, tc).await
    }

    /// Changes a topic's configs by their Kafka names, in order: all or
    /// nothing. Retention, the cleanup policy and the segment size reach the
    /// partitions as [`Admin::alter_topic`]'s changes do; the rest is read
    /// from the topic's settings where it is used (the produce path's
    /// `max.message.bytes` and `message.timestamp.type`). With
    /// `validate_only` nothing is stored. Returns the settings after the change.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC; INVALID_CONFIG naming
    /// the config and the value; storage errors (nothing changed then).
    pub async fn alter_topic_configs(
        &self,
        name: &str,
        ops: &[ConfigOp],
        validate_only: bool,
    ) -> Result<TopicConfig, BrokerError> {
        let _guard = self.records.changing_topics().await;
        let topic = self
            .records
            .topic(name)
            .ok_or_else(|| BrokerError::code_for(ErrorCode::UnknownTopic, name))?;
        let defaults = self.records.default_topic();
        let mut tc = topic.config.clone();
        for op in ops {
            apply_config_op(&mut tc, op, &defaults)?;
        }
        tc.check()
            .map_err(|e| BrokerError::code_for(ErrorCode::InvalidConfig, e))?;
        if validate_only {
            return Ok(tc);
        }
        self.store_topic_config(name, &topic, tc).await
    }

    /// Stores a topic's new settings (`topic.conf` rewritten atomically
    /// first, so they survive a restart), hands retention and the segment
    /// size to its partitions and swaps the topic's settings.
    async fn store_topic_config(
        &self,
        name: &str,
        topic: &super::Topic,
        tc: TopicConfig,
    ) -> Result<TopicConfig, BrokerError> {
        if tc == topic.config {
            return Ok(tc);
        }
        let path = TopicConfig::path(&self.config.data_dir.join(name));
        let text = tc.to_text();
        rt::unblock(move || write_atomic(&path, text.as_bytes())).await?;
        let (retention_bytes, retention_ms) = tc.log_retention();
        let compaction = super::records::compaction_of(&tc);
        for p in &topic.partitions {
            p.set_limits(
                retention_bytes,
                retention_ms,
                tc.segment_bytes,
                tc.segment_ms,
            )
            .await;
            p.set_compaction(compaction).await;
        }
        let altered = Arc::new(topic.with_config(tc.clone()));
        self.records.install_topic(altered);
        tracing::info!(topic = name, retention_bytes = ?tc.retention_bytes, retention_ms = ?tc.retention_ms, segment_bytes = tc.segment_bytes, cleanup_policy = %tc.cleanup_policy, "topic settings changed");
        Ok(tc)
    }

    /// Grows a topic to `total` partitions (never fewer: Kafka's
    /// CreatePartitions and `flume-cli topics add-partitions`); with
    /// `validate_only` only the checks run. Returns the count before.
    ///
    /// The order on disk makes a crash anywhere leave a topic that opens:
    /// the new `partition-<n>` directories are created and opened first
    /// (made durable by an fsync of the topic's directory), then
    /// `topic.conf` is rewritten atomically with the new count. A crash
    /// before the rewrite leaves the old count and empty directories past it,
    /// which a start ignores and the next attempt reuses; nothing is written
    /// to a new partition before the rewrite is durable, since the topic
    /// with the new partitions is put in the map only after it. Groups
    /// subscribed to the topic then rebalance (see
    /// [`crate::coordinator::group::Coordinator::topic_grew`]).
    ///
    /// # Errors
    /// INVALID_NAME, UNKNOWN_TOPIC, INVALID_REQUEST (`total` not above the
    /// current count, or above [`crate::config::MAX_PARTITIONS_PER_TOPIC`]),
    /// LIMIT_REACHED (`max_partitions`), storage errors (the topic keeps its
    /// partitions then).
    pub async fn create_partitions(
        &self,
        name: &str,
        total: u32,
        validate_only: bool,
    ) -> Result<u32, BrokerError> {
        if !valid_name(name) {
            return Err(BrokerError::code_for(
                ErrorCode::InvalidName,
                format!("topic name {name:?}"),
            ));
        }
        // One change of a topic at a time (create, delete, alter, grow).
        let _guard = self.records.changing_topics().await;
        let topic = self
            .records
            .topic(name)
            .ok_or_else(|| BrokerError::code_for(ErrorCode::UnknownTopic, name))?;
        let before = topic.partition_count();
        if total <= before {
            return Err(BrokerError::code_for(
                ErrorCode::InvalidRequest,
                format!("topic {name} has {before} partitions; a new count must be more than that (partitions are never removed), {total} is not"),
            ));
        }
        let mut tc = topic.config.clone();
        tc.partitions = total;
        if let Err(e) = tc.check() {
            return Err(BrokerError::code_for(ErrorCode::InvalidRequest, e));
        }
        let existing: u64 = self
            .records
            .topics()
            .iter()
            .map(|t| u64::from(t.partition_count()))
            .sum();
        self.config
            .check_partition_limit(name, existing, total - before)?;
        if validate_only {
            return Ok(before);
        }
        let (config, shared) = (self.config.clone(), self.records.shared());
        let (owned, conf) = (name.to_owned(), tc.clone());
        let opened = rt::unblock(move || {
            let dir = config.data_dir.join(&owned);
            for p in before..total {
                let pdir = dir.join(format!("partition-{p}"));
                match std::fs::create_dir(&pdir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(source) => {
                        return Err(BrokerError::Io {
                            what: format!("create {}", pdir.display()),
                            source,
                        })
                    }
                }
            }
            crate::storage::fsync_dir(&dir)?;
            let numbers: Vec<u32> = (before..total).collect();
            let results = super::records::parallel_map(&numbers, |&p| {
                Topic::open_partition(&config, &shared, &owned, &conf, p)
            });
            let mut added = Vec::with_capacity(numbers.len());
            let mut failed = None;
            for r in results {
                match r {
                    Ok(p) => added.push(p),
                    Err(e) => failed = failed.or(Some(e)),
                }
            }
            let written = match failed {
                Some(e) => Err(e),
                None => write_atomic(&TopicConfig::path(&dir), conf.to_text().as_bytes())
                    .map_err(BrokerError::from),
            };
            Ok((added, written))
        })
        .await;
        let (added, written) = opened?;
        if let Err(e) = written {
            // Nothing refers to the new partitions: stop their writers. Their
            // directories stay, empty, for the next attempt.
            for p in &added {
                p.shutdown().await;
            }
            tracing::error!(topic = name, error = %e, "adding partitions failed; the topic keeps {before}");
            return Err(e);
        }
        let grown = Arc::new(topic.with_partitions(tc, added));
        self.records.install_topic(grown);
        let rebalanced = self.groups.topic_grew(name);
        tracing::info!(
            topic = name,
            before,
            partitions = total,
            ?rebalanced,
            "partitions added"
        );
        Ok(before)
    }

    /// Looks up offsets: the earliest, the latest, or the first whose
    /// record timestamp is at least a time (see [`OffsetSpec`]); one answer
    /// per query, in order. Time lookups read the log off the executor.
    pub async fn list_offsets(&self, queries: &[(TopicPartition, OffsetSpec)]) -> Vec<FoundOffset> {
        let mut out = Vec::with_capacity(queries.len());
        for (at, spec) in queries {
            let failed = |error| FoundOffset {
                at: at.clone(),
                error,
                offset: -1,
                timestamp: -1,
            };
            let Some(topic) = self.records.topic(&at.topic) else {
                out.push(failed(ErrorCode::UnknownTopic));
                continue;
            };
            let Some(p) = topic.partition(at.partition) else {
                out.push(failed(ErrorCode::UnknownPartition));
                continue;
            };
            let o = p.offsets();
            let found = match *spec {
                OffsetSpec::Earliest => Ok((o.log_start, -1)),
                OffsetSpec::Latest => Ok((o.log_end, -1)),
                OffsetSpec::Time(ts) => match p.offset_for_time(ts).await {
                    Ok(Some((offset, ts))) => Ok((i64::try_from(offset).unwrap_or(i64::MAX), ts)),
                    Ok(None) => Ok((p.offsets().log_end, -1)),
                    Err(e) => Err(e.code()),
                },
                OffsetSpec::MaxTimestamp => match p.max_timestamp().await {
                    Ok(Some((offset, ts))) => Ok((i64::try_from(offset).unwrap_or(i64::MAX), ts)),
                    Ok(None) => Ok((-1, -1)),
                    Err(e) => Err(e.code()),
                },
            };
            out.push(match found {
                Ok((offset, timestamp)) => FoundOffset {
                    at: at.clone(),
                    error: ErrorCode::None,
                    offset,
                    timestamp,
                },
                Err(code) => failed(code),
            });
        }
        out
    }

    /// Kafka's DeleteRecords for one partition: its log start moves to
    /// `before` (`None`: the log end, deleting every record), durably.
    /// Returns the new log start (Kafka's low watermark).
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, UNKNOWN_PARTITION, OFFSET_OUT_OF_RANGE past the log
    /// end, STORAGE_ERROR.
    pub async fn delete_records(
        &self,
        at: &TopicPartition,
        before: Option<u64>,
    ) -> Result<u64, ErrorCode> {
        let topic = self
            .records
            .topic(&at.topic)
            .ok_or(ErrorCode::UnknownTopic)?;
        let p = topic
            .partition(at.partition)
            .ok_or(ErrorCode::UnknownPartition)?;
        let before = before.unwrap_or_else(|| p.end_offset());
        let start = p.delete_records(before).await.map_err(|e| e.code())?;
        tracing::info!(topic = %at.topic, partition = at.partition, log_start = start, "records deleted below the log start");
        Ok(start)
    }
}

/// Applies one config change to `tc`; DELETE takes the value of `defaults`.
///
/// # Errors
/// [`ConfigError`]: an unknown name, a bad value, APPEND or SUBTRACT on a
/// config that is not a list. A SUBTRACT of the last cleanup policy leaves
/// the empty list (every record kept, as in Kafka 4).
pub fn apply_config_op(
    tc: &mut TopicConfig,
    op: &ConfigOp,
    defaults: &TopicConfig,
) -> Result<(), ConfigError> {
    match op {
        ConfigOp::Set(n, v) => tc.set_named(n, v),
        ConfigOp::Delete(n) => tc.reset_named(n, defaults),
        ConfigOp::Append(n, v) | ConfigOp::Subtract(n, v) => {
            let add = matches!(op, ConfigOp::Append(..));
            let def = named::topic_config(n).ok_or_else(|| ConfigError::Unknown {
                name: n.clone(),
                value: v.clone(),
            })?;
            if def.kind != ConfigType::List {
                return Err(ConfigError::NotAList { name: n.clone() });
            }
            if n == "cleanup.policy" {
                let policy = tc
                    .cleanup_policy
                    .edited(v, add)
                    .map_err(|why| ConfigError::invalid(n, v, why))?;
                tc.set_named(n, policy.as_str())
            } else if add {
                // The replication throttles: only the empty list is accepted.
                tc.set_named(n, v)
            } else {
                tc.set_named(n, "")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::Engine;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    use bytes::Bytes;
    use flume_protocol::record;

    use super::*;
    use crate::config::BrokerConfig;
    use crate::domain::{FetchFrom, FetchSpec};

    fn config(dir: &Path) -> BrokerConfig {
        let mut c = BrokerConfig::new(dir);
        c.tick = Duration::from_millis(10);
        c.index_interval_bytes = 64;
        c
    }

    fn open(dir: &Path) -> Arc<Engine> {
        Engine::open(config(dir)).unwrap()
    }

    fn create(e: &Engine, name: &str, partitions: u32) {
        let tc = TopicConfig {
            partitions,
            segment_bytes: 1024,
            ..TopicConfig::default()
        };
        e.records().create_topic(name, tc).unwrap();
    }

    fn one(value: &[u8], ts: i64) -> Bytes {
        let mut b = Vec::new();
        record::encode(&mut b, 0, ts, Some(b"k"), value, &[]);
        Bytes::from(b)
    }

    fn append(
        e: &Engine,
        topic: &str,
        partition: i32,
        value: &[u8],
        ts: i64,
    ) -> Result<u64, ErrorCode> {
        let p = e.records().topic(topic).ok_or(ErrorCode::UnknownTopic)?;
        let p = Arc::clone(p.partition(partition).ok_or(ErrorCode::UnknownPartition)?);
        rt::block_on(p.append(one(value, ts), 1, ts))
    }

    fn wait_for(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn delete_while_readers_and_a_writer_run_never_tears_a_read_and_ends_in_unknown_topic() {
        let dir = tempfile::tempdir().unwrap();
        let e = open(dir.path());
        create(&e, "t", 2);
        for i in 0..200u32 {
            append(
                &e,
                "t",
                i32::try_from(i % 2).unwrap(),
                format!("v{i:05}").as_bytes(),
                1000,
            )
            .unwrap();
        }
        let parts: Vec<_> = e.records().topic("t").unwrap().partitions.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let mut readers = Vec::new();
        // Readers that have read at least once: the delete waits for all of them.
        let reading = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        for p in parts.clone() {
            let stop = Arc::clone(&stop);
            let reading = Arc::clone(&reading);
            readers.push(std::thread::spawn(move || {
                let mut reads = 0u64;
                loop {
                    match p.read_now(0, 1 << 20) {
                        Ok(r) => {
                            // Every read is whole records with intact CRCs.
                            let recs = record::decode_all(&Bytes::from(r.records)).unwrap();
                            assert!(!recs.is_empty());
                            if reads == 0 {
                                reading.fetch_add(1, Ordering::AcqRel);
                            }
                            reads += 1;
                        }
                        Err(e) => {
                            assert_eq!(e.code(), ErrorCode::UnknownTopic, "{e}");
                            return reads;
                        }
                    }
                    if stop.load(Ordering::Relaxed) {
                        return reads;
                    }
                }
            }));
        }
        let writer = {
            let p = Arc::clone(&parts[0]);
            std::thread::spawn(move || loop {
                match rt::block_on(p.append(one(b"late", 2000), 1, 2000)) {
                    Ok(_) => {}
                    Err(code) => {
                        assert_eq!(code, ErrorCode::UnknownTopic);
                        return;
                    }
                }
            })
        };
        // A long poll waiting at the end of partition 1 is woken by the delete.
        let waiting = {
            let e = Arc::clone(&e);
            let end = parts[1].offsets().log_end;
            std::thread::spawn(move || {
                let spec = FetchSpec {
                    max_wait: Duration::from_secs(20),
                    min_bytes: 1,
                    max_bytes: 1 << 20,
                    partitions: vec![FetchFrom {
                        at: TopicPartition::new("t", 1),
                        offset: end,
                        max_bytes: 1 << 20,
                    }],
                    read_as: crate::domain::ReadAs::Records,
                    committed: true,
                };
                let started = Instant::now();
                let f = rt::block_on(e.records().fetch(&spec, None));
                (f.partitions[0].error, started.elapsed())
            })
        };
        wait_for("the writer to append", || parts[0].offsets().log_end > 110);
        wait_for("every reader to read", || {
            reading.load(Ordering::Acquire) == parts.len()
        });
        rt::block_on(e.groups().commit_offsets(
            crate::domain::Member {
                group: "g",
                member_id: "",
                generation: -1,
            },
            &[
                (TopicPartition::new("t", 0), 5),
                (TopicPartition::new("t", 1), 7),
            ],
        ))
        .unwrap();
        rt::block_on(e.admin().delete_topic("t")).unwrap();
        writer.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
        let (code, took) = waiting.join().unwrap();
        assert_eq!(code, ErrorCode::UnknownTopic);
        assert!(
            took < Duration::from_secs(15),
            "the long poll was not woken: {took:?}"
        );
        // Gone: the map, the files, the committed offsets; requests get UNKNOWN_TOPIC.
        assert!(e.records().topic("t").is_none());
        assert_eq!(
            parts[0].read_now(0, 100).unwrap_err().code(),
            ErrorCode::UnknownTopic
        );
        assert!(!dir.path().join("t").exists());
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(TOMBSTONE_PREFIX))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        assert_eq!(e.groups().committed("g", "t", 0), None);
        assert_eq!(
            rt::block_on(e.admin().delete_topic("t"))
                .unwrap_err()
                .code(),
            ErrorCode::UnknownTopic
        );
        // The name can be used again, from offset 0, with no old commits.
        create(&e, "t", 1);
        assert_eq!(append(&e, "t", 0, b"new", 1).unwrap(), 0);
        rt::block_on(e.shutdown());
        drop(e);
        let e = open(dir.path());
        assert_eq!(e.records().topic("t").unwrap().partitions.len(), 1);
        assert_eq!(e.groups().committed("g", "t", 1), None);
        rt::block_on(e.shutdown());
    }

    #[test]
    fn topic_ids_are_kept_given_to_old_directories_and_a_damaged_one_stops_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let e = open(dir.path());
        create(&e, "a", 1);
        create(&e, "b", 1);
        let (a, b) = (
            e.records().topic("a").unwrap().id,
            e.records().topic("b").unwrap().id,
        );
        assert_ne!(a, b);
        assert_eq!(e.records().topic_by_id(a).unwrap().name, "a");
        rt::block_on(e.shutdown());
        drop(e);
        // "b" as a release before topic ids left it: no id file.
        let b_file = dir.path().join("b").join(super::super::TOPIC_ID_FILE);
        std::fs::remove_file(&b_file).unwrap();
        let e = open(dir.path());
        assert_eq!(
            e.records().topic("a").unwrap().id,
            a,
            "kept across a restart"
        );
        let b2 = e.records().topic("b").unwrap().id;
        assert_ne!(b2, a);
        assert_eq!(std::fs::read_to_string(&b_file).unwrap(), format!("{b2}\n"));
        // Deleted by id: gone, and a stale id deletes nothing.
        assert_eq!(rt::block_on(e.admin().delete_topic_by_id(a)).unwrap(), "a");
        assert!(e.records().topic("a").is_none() && e.records().topic_by_id(a).is_none());
        create(&e, "a", 1);
        let a2 = e.records().topic("a").unwrap().id;
        assert_ne!(a2, a, "a topic created again has a new id");
        let stale = rt::block_on(e.admin().delete_topic_by_id(a)).unwrap_err();
        assert_eq!(stale.code(), ErrorCode::UnknownTopic);
        assert!(e.records().topic("a").is_some());
        rt::block_on(e.shutdown());
        drop(e);
        let e = open(dir.path());
        assert_eq!(
            e.records().topic("b").unwrap().id,
            b2,
            "the id given at the upgrade is kept"
        );
        rt::block_on(e.shutdown());
        drop(e);
        // A damaged id file: the broker does not start, and says which file.
        std::fs::write(&b_file, "not an id\n").unwrap();
        let err = Engine::open(config(dir.path())).unwrap_err().to_string();
        assert!(
            err.contains("topic-id") && err.contains("not a topic id"),
            "{err}"
        );
    }

    #[test]
    fn a_crash_between_the_rename_and_the_removal_leaves_a_tombstone_the_next_start_finishes() {
        let dir = tempfile::tempdir().unwrap();
        let e = open(dir.path());
        create(&e, "gone", 2);
        create(&e, "kept", 1);
        append(&e, "gone", 0, b"x", 1).unwrap();
        rt::block_on(e.groups().commit_offsets(
            crate::domain::Member {
                group: "g",
                member_id: "",
                generation: -1,
            },
            &[
                (TopicPartition::new("gone", 0), 1),
                (TopicPartition::new("kept", 0), 0),
            ],
        ))
        .unwrap();
        rt::block_on(e.shutdown());
        drop(e);
        // What a crash right after step 3 of a delete leaves: the renamed directory, offsets kept.
        let tomb = dir.path().join(format!("{TOMBSTONE_PREFIX}123-gone"));
        std::fs::rename(dir.path().join("gone"), &tomb).unwrap();
        let e = open(dir.path());
        assert!(e.records().topic("gone").is_none());
        assert!(e.records().topic("kept").is_some());
        assert!(!tomb.exists(), "the tombstone was not removed");
        assert_eq!(e.groups().committed("g", "gone", 0), None);
        assert_eq!(e.groups().committed("g", "kept", 0), Some(0));
        rt::block_on(e.shutdown());
        drop(e);
        // A tombstone of a name that lives again (deleted, then created anew) keeps the new offsets.
        let e = open(dir.path());
        create(&e, "gone", 1);
        rt::block_on(e.groups().commit_offsets(
            crate::domain::Member {
                group: "g",
                member_id: "",
                generation: -1,
            },
            &[(TopicPartition::new("gone", 0), 0)],
        ))
        .unwrap();
        rt::block_on(e.shutdown());
        drop(e);
        std::fs::create_dir(dir.path().join(format!("{TOMBSTONE_PREFIX}456-gone"))).unwrap();
        let e = open(dir.path());
        assert_eq!(e.groups().committed("g", "gone", 0), Some(0));
        assert_eq!(e.records().topic("gone").unwrap().partitions.len(), 1);
        rt::block_on(e.shutdown());
    }

    #[test]
    fn new_topic_defaults_apply_to_topics_created_after_them() {
        let dir = tempfile::tempdir().unwrap();
        let e = open(dir.path());
        rt::block_on(e.records().auto_create("before")).unwrap();
        let changed = TopicConfig {
            partitions: 2,
            retention_ms: Some(60_000),
            retention_bytes: Some(1 << 20),
            ..e.records().default_topic()
        };
        e.records().set_default_topic(changed.clone()).unwrap();
        assert_eq!(e.records().default_topic(), changed);
        rt::block_on(e.records().auto_create("after")).unwrap();
        assert_eq!(e.admin().topic_config("after").unwrap(), changed);
        let before = e.admin().topic_config("before").unwrap();
        assert_eq!(before.retention_ms, None, "existing topics keep theirs");
        assert_eq!(before.partitions, 3);
        let bad = TopicConfig {
            partitions: 0,
            ..changed.clone()
        };
        assert!(e.records().set_default_topic(bad).is_err());
        assert_eq!(
            e.records().default_topic(),
            changed,
            "a refused change changes nothing"
        );
    }

    #[test]
    fn alter_changes_retention_at_run_time_and_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let e = open(dir.path());
        create(&e, "t", 1);
        let big = vec![b'x'; 200];
        for _ in 0..40 {
            append(&e, "t", 0, &big, 1).unwrap();
        }
        let p = Arc::clone(&e.records().topic("t").unwrap().partitions[0]);
        rt::block_on(e.tick_now());
        assert_eq!(p.start_offset(), 0, "no retention yet");
        let tc = rt::block_on(e.admin().alter_topic(
            "t",
            &TopicChanges {
                retention_bytes: Some(Some(2048)),
                segment_bytes: Some(2048),
                ..TopicChanges::default()
            },
        ))
        .unwrap();
        assert_eq!(tc.retention_bytes, Some(2048));
        assert_eq!(e.admin().topic_config("t").unwrap().segment_bytes, 2048);
        rt::block_on(e.tick_now());
        assert!(p.start_offset() > 0, "retention did not run");
        assert!(p.disk_usage().0 <= 2048 + 1024, "{:?}", p.disk_usage());
        let bad = rt::block_on(e.admin().alter_topic(
            "t",
            &TopicChanges {
                segment_bytes: Some(10),
                ..TopicChanges::default()
            },
        ))
        .unwrap_err();
        assert_eq!(bad.code(), ErrorCode::InvalidRequest);
        assert_eq!(
            rt::block_on(e.admin().alter_topic("nope", &TopicChanges::default()))
                .unwrap_err()
                .code(),
            ErrorCode::UnknownTopic
        );
        rt::block_on(e.shutdown());
        drop(e);
        let e = open(dir.path());
        let tc = e.admin().topic_config("t").unwrap();
        assert_eq!((tc.retention_bytes, tc.segment_bytes), (Some(2048), 2048));
        // Removing the limit.
        let tc = rt::block_on(e.admin().alter_topic(
            "t",
            &TopicChanges {
                retention_bytes: Some(None),
                ..TopicChanges::default()
            },
        ))
        .unwrap();
        assert_eq!(tc.retention_bytes, None);
        rt::block_on(e.shutdown());
    }

    #[test]
    fn a_compact_only_topic_keeps_its_segments_under_retention() {
        let dir = tempfile::tempdir().unwrap();
        let e = open(dir.path());
        // Retention alone: a cleaner round, started by a tick, would compact
        // the compacted topic's keyless records away at its own pace and race
        // the second tick's retention (seen on a loaded CI machine).
        rt::block_on(e.cleaner.stop());
        let mut tc = TopicConfig {
            partitions: 1,
            segment_bytes: 1024,
            retention_bytes: Some(2048),
            ..TopicConfig::default()
        };
        tc.set_named("cleanup.policy", "compact").unwrap();
        e.records().create_topic("c", tc.clone()).unwrap();
        tc.set_named("cleanup.policy", "").unwrap();
        e.records().create_topic("k", tc.clone()).unwrap();
        tc.set_named("cleanup.policy", "delete").unwrap();
        e.records().create_topic("d", tc).unwrap();
        let big = vec![b'x'; 200];
        for _ in 0..40 {
            append(&e, "c", 0, &big, 1).unwrap();
            append(&e, "k", 0, &big, 1).unwrap();
            append(&e, "d", 0, &big, 1).unwrap();
        }
        rt::block_on(e.tick_now());
        let start = |t: &str| e.records().topic(t).unwrap().partitions[0].start_offset();
        assert!(start("d") > 0, "retention ran on the delete topic");
        assert_eq!(start("c"), 0, "a compact-only topic keeps every segment");
        assert_eq!(start("k"), 0, "an empty cleanup.policy keeps every segment");
        // Adding delete to the policy at run time hands retention to the partition.
        let ops = [ConfigOp::Append("cleanup.policy".into(), "delete".into())];
        let tc = rt::block_on(e.admin().alter_topic_configs("c", &ops, false)).unwrap();
        assert_eq!(
            tc.cleanup_policy,
            crate::config::CleanupPolicy::CompactDelete
        );
        rt::block_on(e.tick_now());
        assert!(start("c") > 0, "retention runs once the policy deletes");
        rt::block_on(e.shutdown());
    }

    #[test]
    fn named_config_changes_are_all_or_nothing_and_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let e = open(dir.path());
        create(&e, "t", 1);
        let set = |k: &str, v: &str| ConfigOp::Set(k.into(), v.into());
        let ops = [
            set("cleanup.policy", "compact"),
            set("max.message.bytes", "500"),
        ];
        let dry = rt::block_on(e.admin().alter_topic_configs("t", &ops, true)).unwrap();
        assert_eq!(dry.max_message_bytes, 500);
        assert_eq!(
            e.admin().topic_config("t").unwrap().max_message_bytes,
            1_048_588,
            "validate_only stores nothing"
        );
        let bad = [
            set("retention.ms", "1000"),
            set("max.message.bytes", "lots"),
        ];
        let err = rt::block_on(e.admin().alter_topic_configs("t", &bad, false)).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidConfig);
        assert!(
            err.to_string().contains("max.message.bytes") && err.to_string().contains("lots"),
            "{err}"
        );
        assert_eq!(
            e.admin().topic_config("t").unwrap().retention_ms,
            None,
            "nothing changed"
        );
        rt::block_on(e.admin().alter_topic_configs("t", &ops, false)).unwrap();
        let sub = [ConfigOp::Subtract(
            "cleanup.policy".into(),
            "compact".into(),
        )];
        assert_eq!(
            rt::block_on(e.admin().alter_topic_configs("t", &sub, false))
                .unwrap()
                .cleanup_policy,
            crate::config::CleanupPolicy::Keep,
            "the last policy subtracted leaves the empty list (Kafka 4)"
        );
        let not_a_list = [ConfigOp::Append("retention.ms".into(), "5".into())];
        assert_eq!(
            rt::block_on(e.admin().alter_topic_configs("t", &not_a_list, false))
                .unwrap_err()
                .code(),
            ErrorCode::InvalidConfig
        );
        // A record above max.message.bytes is refused on the Flume path.
        let refused = rt::block_on(async {
            e.records()
                .admit_produce(crate::domain::ProduceBatch {
                    topic: "t".into(),
                    route: crate::domain::Route::Partition(0),
                    records: one(&[b'v'; 600], 1),
                })
                .await
                .finish()
                .await
        });
        assert_eq!(refused.error, ErrorCode::RecordTooLarge);
        rt::block_on(e.shutdown());
        drop(e);
        let e = open(dir.path());
        let tc = e.admin().topic_config("t").unwrap();
        assert_eq!(
            (tc.cleanup_policy, tc.max_message_bytes),
            (crate::config::CleanupPolicy::Keep, 500),
            "the empty policy is kept in topic.conf"
        );
        assert!(tc.overrides.contains("cleanup.policy"));
        let del = [ConfigOp::Delete("max.message.bytes".into())];
        let tc = rt::block_on(e.admin().alter_topic_configs("t", &del, false)).unwrap();
        assert_eq!(tc.max_message_bytes, 1_048_588);
        assert!(!tc.overrides.contains("max.message.bytes"));
        rt::block_on(e.shutdown());
    }

    #[test]
    fn log_append_time_gives_records_the_broker_clock() {
        let dir = tempfile::tempdir().unwrap();
        let clock = crate::clock::Clock::manual();
        // An hour ahead of the system's: the stamp is the engine's clock.
        clock.advance(std::time::Duration::from_secs(3600));
        let mut c = config(dir.path());
        c.clock = clock.clone();
        let e = Engine::open(c).unwrap();
        let mut tc = TopicConfig {
            partitions: 1,
            ..TopicConfig::default()
        };
        tc.set_named("message.timestamp.type", "LogAppendTime")
            .unwrap();
        e.records().create_topic("t", tc).unwrap();
        let stored = rt::block_on(async {
            e.records()
                .admit_produce(crate::domain::ProduceBatch {
                    topic: "t".into(),
                    route: crate::domain::Route::Partition(0),
                    records: one(b"v", 7),
                })
                .await
                .finish()
                .await
        });
        assert_eq!(stored.error, ErrorCode::None);
        let p = Arc::clone(&e.records().topic("t").unwrap().partitions[0]);
        let read = p.read_now(0, 1 << 20).unwrap();
        let recs = record::decode_all(&Bytes::from(read.records)).unwrap();
        assert_eq!(recs[0].timestamp, clock.wall_ms());
        rt::block_on(e.shutdown());
    }

    #[test]
    fn list_offsets_by_time_earliest_and_latest() {
        let dir = tempfile::tempdir().unwrap();
        let e = open(dir.path());
        create(&e, "t", 2);
        for i in 0..50i64 {
            append(&e, "t", 0, format!("v{i}").as_bytes(), 1_000 + i * 10).unwrap();
        }
        let q = |p: i32, spec| (TopicPartition::new("t", p), spec);
        let found = rt::block_on(e.admin().list_offsets(&[
            q(0, OffsetSpec::Time(1_095)),
            q(0, OffsetSpec::Time(1_100)),
            q(0, OffsetSpec::Time(99_999)),
            q(0, OffsetSpec::Earliest),
            q(0, OffsetSpec::Latest),
            q(1, OffsetSpec::Time(0)),
            q(7, OffsetSpec::Time(0)),
            (TopicPartition::new("nope", 0), OffsetSpec::Latest),
        ]));
        let got: Vec<_> = found
            .iter()
            .map(|f| (f.error, f.offset, f.timestamp))
            .collect();
        assert_eq!(
            got,
            vec![
                (ErrorCode::None, 10, 1_100),
                (ErrorCode::None, 10, 1_100),
                (ErrorCode::None, 50, -1),
                (ErrorCode::None, 0, -1),
                (ErrorCode::None, 50, -1),
                (ErrorCode::None, 0, -1),
                (ErrorCode::UnknownPartition, -1, -1),
                (ErrorCode::UnknownTopic, -1, -1),
            ]
        );
        rt::block_on(e.shutdown());
    }

    #[test]
    fn delete_group_only_when_empty_and_drops_its_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let e = open(dir.path());
        create(&e, "t", 1);
        rt::block_on(e.groups().commit_offsets(
            crate::domain::Member {
                group: "g",
                member_id: "",
                generation: -1,
            },
            &[(TopicPartition::new("t", 0), 0)],
        ))
        .unwrap();
        rt::block_on(e.groups().commit_offsets(
            crate::domain::Member {
                group: "h",
                member_id: "",
                generation: -1,
            },
            &[(TopicPartition::new("t", 0), 0)],
        ))
        .unwrap();
        let joined = {
            let e = Arc::clone(&e);
            std::thread::spawn(move || {
                rt::block_on(e.groups().join_group(crate::domain::JoinSpec {
                    group: "h".into(),
                    member_id: String::new(),
                    topics: vec!["t".into()],
                    session_timeout: Duration::from_secs(30),
                    rebalance_timeout: Duration::from_secs(1),
                    assignor: crate::domain::Assignor::Range,
                }))
            })
        };
        let member = joined.join().unwrap().unwrap();
        assert_eq!(
            rt::block_on(e.groups().delete_group("h")),
            Err(ErrorCode::GroupNotEmpty)
        );
        assert_eq!(e.groups().committed("h", "t", 0), Some(0));
        assert_eq!(rt::block_on(e.groups().delete_group("g")), Ok(1));
        assert_eq!(e.groups().committed("g", "t", 0), None);
        assert_eq!(
            rt::block_on(e.groups().delete_group("g")),
            Err(ErrorCode::UnknownGroup)
        );
        assert_eq!(
            rt::block_on(e.groups().delete_group("")),
            Err(ErrorCode::InvalidName)
        );
        e.groups().leave_group("h", &member.member_id).unwrap();
        assert_eq!(rt::block_on(e.groups().delete_group("h")), Ok(1));
        rt::block_on(e.shutdown());
        drop(e);
        let e = open(dir.path());
        assert_eq!(e.groups().committed("h", "t", 0), None);
        rt::block_on(e.shutdown());
    }

    #[test]
    fn create_partitions_grows_a_topic_never_shrinks_it_and_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let e = open(dir.path());
        create(&e, "t", 2);
        append(&e, "t", 0, b"old", 1).unwrap();
        let code = |r: Result<u32, BrokerError>| r.unwrap_err().code();
        assert_eq!(
            code(rt::block_on(e.admin().create_partitions("t", 2, false))),
            ErrorCode::InvalidRequest,
            "the same count"
        );
        let fewer = rt::block_on(e.admin().create_partitions("t", 1, false)).unwrap_err();
        assert_eq!(fewer.code(), ErrorCode::InvalidRequest);
        assert!(fewer.to_string().contains("has 2 partitions"), "{fewer}");
        assert_eq!(
            code(rt::block_on(e.admin().create_partitions("nope", 3, false))),
            ErrorCode::UnknownTopic
        );
        assert_eq!(
            code(rt::block_on(
                e.admin().create_partitions("t", 20_000, false)
            )),
            ErrorCode::InvalidRequest
        );
        assert_eq!(
            rt::block_on(e.admin().create_partitions("t", 4, true)).unwrap(),
            2
        );
        assert_eq!(
            e.records().topic("t").unwrap().partition_count(),
            2,
            "validate only"
        );
        assert!(!dir.path().join("t").join("partition-2").exists());
        assert_eq!(
            rt::block_on(e.admin().create_partitions("t", 4, false)).unwrap(),
            2
        );
        assert_eq!(e.records().topic("t").unwrap().partition_count(), 4);
        assert_eq!(e.admin().topic_config("t").unwrap().partitions, 4);
        assert_eq!(append(&e, "t", 3, b"new", 2).unwrap(), 0);
        assert_eq!(
            e.records().describe(&["t".into()])[0]
                .partitions
                .as_ref()
                .unwrap()
                .len(),
            4
        );
        rt::block_on(e.shutdown());
        drop(e);
        let e = open(dir.path());
        let t = e.records().topic("t").unwrap();
        assert_eq!(t.partition_count(), 4);
        assert_eq!(t.partition(0).unwrap().end_offset(), 1);
        assert_eq!(t.partition(3).unwrap().end_offset(), 1);
        rt::block_on(e.shutdown());
    }

    #[test]
    fn a_crash_before_topic_conf_is_rewritten_leaves_the_old_count_and_a_retry_works() {
        let dir = tempfile::tempdir().unwrap();
        let e = open(dir.path());
        create(&e, "t", 2);
        append(&e, "t", 1, b"kept", 1).unwrap();
        rt::block_on(e.shutdown());
        drop(e);
        // What the first step of growing to 4 leaves: the new directories,
        // one of them opened (its first segment written), topic.conf as it was.
        let tdir = dir.path().join("t");
        std::fs::create_dir(tdir.join("partition-2")).unwrap();
        std::fs::create_dir(tdir.join("partition-3")).unwrap();
        {
            let c = config(dir.path());
            let shared = super::super::records::Shared::new(&c);
            let tc = TopicConfig {
                partitions: 4,
                segment_bytes: 1024,
                ..TopicConfig::default()
            };
            let p = Topic::open_partition(&c, &shared, "t", &tc, 2).unwrap();
            rt::block_on(p.shutdown());
        }
        let e = open(dir.path());
        assert_eq!(e.records().topic("t").unwrap().partition_count(), 2);
        assert_eq!(
            e.records()
                .topic("t")
                .unwrap()
                .partition(1)
                .unwrap()
                .end_offset(),
            1
        );
        assert_eq!(
            rt::block_on(e.admin().create_partitions("t", 4, false)).unwrap(),
            2
        );
        let t = e.records().topic("t").unwrap();
        assert_eq!(
            (
                t.partition(2).unwrap().end_offset(),
                t.partition(3).unwrap().end_offset()
            ),
            (0, 0)
        );
        rt::block_on(e.shutdown());
        drop(e);
        assert_eq!(
            open(dir.path())
                .records()
                .topic("t")
                .unwrap()
                .partition_count(),
            4
        );
    }

    #[test]
    fn growing_a_topic_rebalances_the_groups_subscribed_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = open(dir.path());
        create(&e, "t", 2);
        let joined = {
            let e = Arc::clone(&e);
            std::thread::spawn(move || {
                rt::block_on(e.groups().join_group(crate::domain::JoinSpec {
                    group: "g".into(),
                    member_id: String::new(),
                    topics: vec!["t".into()],
                    session_timeout: Duration::from_secs(30),
                    rebalance_timeout: Duration::from_secs(5),
                    assignor: crate::domain::Assignor::Range,
                }))
            })
        };
        let member = joined.join().unwrap().unwrap();
        let owned: usize = member.assignment.iter().map(|a| a.partitions.len()).sum();
        assert_eq!(owned, 2);
        assert_eq!(
            e.groups()
                .heartbeat("g", &member.member_id, member.generation),
            Ok(())
        );
        rt::block_on(e.admin().create_partitions("t", 3, false)).unwrap();
        assert_eq!(
            e.groups()
                .heartbeat("g", &member.member_id, member.generation),
            Err(ErrorCode::RebalanceInProgress)
        );
        let again = rt::block_on(e.groups().join_group(crate::domain::JoinSpec {
            group: "g".into(),
            member_id: member.member_id.clone(),
            topics: vec!["t".into()],
            session_timeout: Duration::from_secs(30),
            rebalance_timeout: Duration::from_secs(5),
            assignor: crate::domain::Assignor::Range,
        }))
        .unwrap();
        let owned: Vec<i32> = again
            .assignment
            .iter()
            .flat_map(|a| a.partitions.clone())
            .collect();
        assert_eq!(owned, vec![0, 1, 2]);
        rt::block_on(e.shutdown());
    }

    #[test]
    fn delete_offsets_drops_named_partitions_but_not_a_subscribed_topic() {
        let dir = tempfile::tempdir().unwrap();
        let e = open(dir.path());
        create(&e, "t", 2);
        create(&e, "u", 1);
        let commit = |g: &str, at: &[(TopicPartition, i64)]| {
            rt::block_on(e.groups().commit_offsets(
                crate::domain::Member {
                    group: g,
                    member_id: "",
                    generation: -1,
                },
                at,
            ))
            .unwrap();
        };
        commit(
            "g",
            &[
                (TopicPartition::new("t", 0), 1),
                (TopicPartition::new("t", 1), 2),
                (TopicPartition::new("u", 0), 3),
            ],
        );
        let codes = rt::block_on(e.groups().delete_offsets(
            "g",
            &[
                TopicPartition::new("t", 0),
                TopicPartition::new("nope", 0),
                TopicPartition::new("t", 9),
            ],
        ))
        .unwrap();
        assert_eq!(
            codes,
            vec![
                ErrorCode::None,
                ErrorCode::UnknownTopic,
                ErrorCode::UnknownPartition
            ]
        );
        assert_eq!(e.groups().committed("g", "t", 0), None);
        assert_eq!(e.groups().committed("g", "t", 1), Some(2));
        assert_eq!(
            rt::block_on(
                e.groups()
                    .delete_offsets("nobody", &[TopicPartition::new("t", 0)])
            ),
            Err(ErrorCode::UnknownGroup)
        );
        let joined = {
            let e = Arc::clone(&e);
            std::thread::spawn(move || {
                rt::block_on(e.groups().join_group(crate::domain::JoinSpec {
                    group: "g".into(),
                    member_id: String::new(),
                    topics: vec!["u".into()],
                    session_timeout: Duration::from_secs(30),
                    rebalance_timeout: Duration::from_secs(1),
                    assignor: crate::domain::Assignor::Range,
                }))
            })
        };
        joined.join().unwrap().unwrap();
        let codes = rt::block_on(e.groups().delete_offsets(
            "g",
            &[TopicPartition::new("u", 0), TopicPartition::new("t", 1)],
        ))
        .unwrap();
        assert_eq!(codes, vec![ErrorCode::GroupNotEmpty, ErrorCode::None]);
        assert_eq!(e.groups().committed("g", "u", 0), Some(3));
        rt::block_on(e.shutdown());
        drop(e);
        let e = open(dir.path());
        assert_eq!(
            (
                e.groups().committed("g", "t", 0),
                e.groups().committed("g", "t", 1)
            ),
            (None, None)
        );
        assert_eq!(e.groups().committed("g", "u", 0), Some(3));
        rt::block_on(e.shutdown());
    }

    #[test]
    fn max_timestamp_is_the_first_record_with_the_largest_timestamp() {
        let dir = tempfile::tempdir().unwrap();
        let e = open(dir.path());
        create(&e, "t", 2);
        // Enough records for several segments (1 KiB each) and index entries.
        for i in 0..200i64 {
            let ts = if i == 77 || i == 150 {
                9_000
            } else {
                1_000 + (i * 37) % 500
            };
            append(&e, "t", 0, format!("value-{i:04}").as_bytes(), ts).unwrap();
        }
        append(&e, "t", 0, b"negative", -5).unwrap();
        let found = rt::block_on(e.admin().list_offsets(&[
            (TopicPartition::new("t", 0), OffsetSpec::MaxTimestamp),
            (TopicPartition::new("t", 1), OffsetSpec::MaxTimestamp),
        ]));
        let got: Vec<_> = found
            .iter()
            .map(|f| (f.error, f.offset, f.timestamp))
            .collect();
        assert_eq!(
            got,
            vec![(ErrorCode::None, 77, 9_000), (ErrorCode::None, -1, -1)]
        );
        rt::block_on(e.shutdown());
    }
}

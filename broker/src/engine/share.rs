//! Share groups (queues, KIP-932) as the engine serves them to every front
//! end: membership ([`crate::coordinator::share::group`]), each
//! share-partition's records ([`crate::coordinator::share::partition`])
//! acquired from the log, and their kept state
//! ([`crate::coordinator::share::store`]).
//!
//! An acquisition reads the log from the share-partition's next fetch
//! offset (read_committed: a share group never sees an open or aborted
//! transaction's records), hands the records found to the state machine,
//! writes what changed (delivery counts) and only then returns the records.
//! An acknowledgement is applied, written, and only then answered: after a
//! crash, an accepted or rejected record is never delivered again and
//! every other comes back, with its delivery count.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use flume_protocol::record::RecordIter;
use flume_rt as rt;
use futures::FutureExt;

use std::sync::Arc;

use flume_rt::sync::lock;

use super::records::Records;
use super::Shutdown;
use crate::coordinator::share::group::ShareGroups;
pub use crate::coordinator::share::group::{ShareBeat, ShareGroupError, ShareHeartbeat};
use crate::coordinator::share::group_config::{self, ShareGroupConfig};
pub use crate::coordinator::share::partition::{
    AckError, AckType, Acquired, ShareCounts, ShareTotals,
};
use crate::coordinator::share::partition::{SharePartition, ShareUpdate};
pub use crate::coordinator::share::session::{SessionError, SessionStep};
use crate::coordinator::share::session::{SessionTp, ShareSessions};
use crate::coordinator::share::writer::ShareState;
use crate::domain::ReadAs;
use crate::error::BrokerError;

/// Most share-partitions (group, topic, partition) the broker keeps.
pub const MAX_SHARE_PARTITIONS: usize = 100_000;

/// Most share sessions (Kafka's ShareFetch) the broker keeps; past it, the
/// sessions of members no longer in their group make room, else a new one
/// is refused (Kafka's `share.max.share.sessions` is 2,000).
pub const MAX_SHARE_SESSIONS: usize = 10_000;

pub use crate::config::{ShareReset, ShareSettings};

/// Why a share-group request failed.
#[derive(Debug, thiserror::Error)]
pub enum ShareError {
    /// Membership refused the request.
    #[error(transparent)]
    Group(#[from] ShareGroupError),
    /// The member is not assigned that partition (or not in the group).
    #[error("member {member} is not assigned {topic}-{partition}")]
    NotAssigned {
        /// The member.
        member: String,
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
    },
    /// No such topic.
    #[error("unknown topic {0}")]
    UnknownTopic(String),
    /// No such partition.
    #[error("unknown partition {topic}-{partition}")]
    UnknownPartition {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
    },
    /// An acknowledgement of records the member does not hold.
    #[error(transparent)]
    RecordState(#[from] AckError),
    /// Past a bound (share-partitions).
    #[error("{0}")]
    Limit(String),
    /// The group has members (deleting or moving its state needs none).
    #[error("share group {0} has members")]
    NotEmpty(String),
    /// The request does not fit the member's share session.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The state could not be read or written.
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

/// One partition of a share fetch.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShareTp {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
}

/// What a share fetch asks for.
#[derive(Debug, Clone)]
pub struct ShareFetchSpec {
    /// The group.
    pub group: String,
    /// The member.
    pub member: String,
    /// The partitions to acquire from (each must be assigned to the member).
    pub partitions: Vec<ShareTp>,
    /// Most records over all partitions.
    pub max_records: usize,
    /// Most bytes read per partition (at least one batch, unless 0: then
    /// nothing is acquired, as Kafka answers a ShareFetch of `max_bytes` 0).
    pub max_bytes: usize,
    /// How long to wait for records when there are none.
    pub max_wait: Duration,
}

/// The records acquired from one partition.
#[derive(Debug)]
pub struct ShareFetched {
    /// The partition.
    pub tp: ShareTp,
    /// Why nothing was acquired here, if it failed.
    pub error: Option<ShareError>,
    /// The acquired records, in Flume's stored format (whole records, in
    /// offset order; a front end converts them as its FETCH does).
    pub records: Vec<u8>,
    /// The runs acquired, with their delivery counts.
    pub acquired: Vec<Acquired>,
}

/// One acknowledgement.
#[derive(Debug, Clone)]
pub struct ShareAck {
    /// The partition.
    pub tp: ShareTp,
    /// First offset.
    pub first: i64,
    /// Last offset (inclusive).
    pub last: i64,
    /// What to do with them.
    pub ack: AckType,
}

/// A share-partition as described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharePartitionView {
    /// The partition.
    pub tp: ShareTp,
    /// Everything below is done.
    pub start_offset: i64,
    /// Counts of its in-flight records.
    pub counts: ShareCounts,
    /// Records archived since the broker started.
    pub archived: u64,
    /// What happened to its records since the broker started (metrics).
    pub totals: ShareTotals,
    /// The partition's log end (for the lag: records not yet done).
    pub log_end: i64,
}

/// A share group as described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGroupView {
    /// Its name.
    pub group: String,
    /// Its epoch (0 when it has no members).
    pub epoch: i32,
    /// Its members: id, client id, host, epoch, subscription, assignment.
    pub members: Vec<ShareMemberView>,
    /// Its share-partitions.
    pub partitions: Vec<SharePartitionView>,
}

/// A member as described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareMemberView {
    /// Its id.
    pub member_id: String,
    /// The client's id.
    pub client_id: String,
    /// The client's address.
    pub client_host: String,
    /// Its epoch.
    pub member_epoch: i32,
    /// Its topics.
    pub subscribed: Vec<String>,
    /// Its partitions by topic.
    pub assignment: BTreeMap<String, Vec<i32>>,
}

type SpKey = (String, String, i32);

/// The share-groups service: membership, share-partitions and their kept
/// state; it reads the logs through the records service.
#[derive(Debug)]
pub struct Shares {
    records: Arc<Records>,
    clock: crate::clock::Clock,
    shutdown: Shutdown,
    settings: ShareSettings,
    groups: Mutex<ShareGroups>,
    partitions: Mutex<HashMap<SpKey, SharePartition>>,
    /// Notified when records become available again (released, expired),
    /// so waiting share fetches look again.
    available: event_listener::Event,
    store: ShareState,
    sessions: Mutex<ShareSessions>,
    /// Groups' own configs (IncrementalAlterConfigs on a GROUP resource).
    group_configs: Mutex<BTreeMap<String, ShareGroupConfig>>,
    /// Where they are kept.
    group_configs_path: std::path::PathBuf,
}

/// The file of the groups' own configs, in the share-state directory.
const GROUP_CONFIGS_FILE: &str = "group-configs";

impl Shares {
    /// The share groups of a data directory, their kept state replayed.
    pub(crate) fn open(
        records: Arc<Records>,
        shutdown: Shutdown,
        nonce: u64,
    ) -> Result<Self, BrokerError> {
        let config = Arc::clone(records.config());
        let (dir, settings, clock) = (&config.data_dir, config.share, config.clock.clone());
        let topic_exists = |t: &str| records.topic(t).is_some();
        let store =
            ShareState::open_with_clock(&dir.join("__share_state"), config.fsync, clock.clone())?;
        let group_configs_path = dir.join("__share_state").join(GROUP_CONFIGS_FILE);
        let (group_configs, bad) = group_config::from_text(
            &crate::storage::dirs::read_optional(&group_configs_path).map_err(BrokerError::from)?,
        );
        for why in bad {
            tracing::warn!(file = %group_configs_path.display(), %why, "share group config skipped");
        }
        // The state of topics deleted while a crash interrupted the delete
        // goes now, so a topic made again under the name starts afresh.
        let mut gone: Vec<String> = store
            .groups()
            .iter()
            .flat_map(|g| store.partitions_of(g))
            .map(|(t, _)| t)
            .filter(|t| !topic_exists(t))
            .collect();
        gone.sort_unstable();
        gone.dedup();
        for t in gone {
            store.apply_now(&[crate::coordinator::share::store::ShareOp::RemoveTopic(t)])?;
        }
        let mut partitions = HashMap::new();
        for g in store.groups() {
            for (t, p) in store.partitions_of(&g) {
                if let Some(snap) = store.get(&g, &t, p) {
                    let cfg = group_configs
                        .get(&g)
                        .map_or(settings.partition, |c| c.partition(settings.partition));
                    let sp = SharePartition::restore(cfg, &snap);
                    partitions.insert((g.clone(), t, p), sp);
                }
            }
        }
        Ok(Shares {
            records,
            clock,
            shutdown,
            settings,
            groups: Mutex::new(ShareGroups::new(settings.groups, nonce)),
            partitions: Mutex::new(partitions),
            available: event_listener::Event::new(),
            store,
            sessions: Mutex::new(ShareSessions::new(MAX_SHARE_SESSIONS)),
            group_configs: Mutex::new(group_configs),
            group_configs_path,
        })
    }

    pub(crate) async fn shutdown(&self) {
        self.store.shutdown().await;
    }

    /// The interval fsync and compaction of the kept state.
    pub(crate) async fn maintain(&self) {
        self.store.maintain().await;
    }
}

impl Shares {
    /// The share-group settings in force.
    pub fn share_settings(&self) -> ShareSettings {
        self.settings
    }

    /// A share-group heartbeat: joins, keeps, updates or removes a member
    /// and answers its assignment. A member that leaves gives its records
    /// back (written before the answer), unless its share session is still
    /// open: then, as with Kafka, the session keeps what the member holds
    /// until it closes (a client's close sends its last acknowledgements at
    /// session epoch -1, and may send them after its leave) or the records'
    /// locks run out.
    ///
    /// # Errors
    /// See [`ShareGroupError`]; a storage failure.
    pub async fn share_heartbeat(&self, hb: ShareHeartbeat<'_>) -> Result<ShareBeat, ShareError> {
        if !crate::config::valid_group_id(hb.group) {
            return Err(ShareGroupError::Invalid(format!("group id {:?}", hb.group)).into());
        }
        let now = self.clock.mono_ms();
        let group = hb.group.to_owned();
        let (beat, left) = {
            let partitions_of = |t: &str| {
                self.records
                    .topic(t)
                    .map(|t| i32::try_from(t.partitions.len()).unwrap_or(i32::MAX))
            };
            lock(&self.groups).heartbeat(hb, &partitions_of, now)?
        };
        if !left.is_empty() {
            let gone: Vec<(String, String)> = {
                let sessions = lock(&self.sessions);
                left.into_iter()
                    .filter(|m| !sessions.is_open(&group, m))
                    .map(|m| (group.clone(), m))
                    .collect()
            };
            self.release_members(&gone).await?;
        }
        Ok(beat)
    }

    /// Applies a request to the member's share session (Kafka's ShareFetch
    /// and ShareAcknowledge; see [`ShareSessions::step`]): the partitions to
    /// fetch from, or that the session closed. Sessions of members no longer
    /// in their group make room when the table is full.
    ///
    /// # Errors
    /// [`SessionError`]: no session, the wrong epoch, the table full.
    pub fn share_session(
        &self,
        group: &str,
        member: &str,
        epoch: i32,
        added: &[SessionTp],
        forgotten: &[SessionTp],
    ) -> Result<SessionStep, ShareError> {
        let live = |g: &str, m: &str| {
            lock(&self.groups)
                .group(g)
                .is_some_and(|g| g.members().any(|x| x.member_id == m))
        };
        Ok(lock(&self.sessions).step(group, member, epoch, added, forgotten, &live)?)
    }

    /// True when the member has a share session open (it may have left its
    /// group since: see [`Shares::share_heartbeat`]).
    pub fn share_session_open(&self, group: &str, member: &str) -> bool {
        lock(&self.sessions).is_open(group, member)
    }

    /// Gives back what `member` holds in these partitions (its share
    /// session closed), written before it returns.
    ///
    /// # Errors
    /// A storage failure.
    pub async fn share_release_held(
        &self,
        group: &str,
        member: &str,
        partitions: &[SessionTp],
    ) -> Result<(), ShareError> {
        let updates = {
            let mut parts = lock(&self.partitions);
            let mut updates = Vec::new();
            for (t, p) in partitions {
                let key: SpKey = (group.to_owned(), t.clone(), *p);
                if let Some(sp) = parts.get_mut(&key) {
                    sp.release_member(member);
                    if let Some(u) = sp.take_update() {
                        updates.push((key.0, key.1, key.2, u));
                    }
                }
            }
            updates
        };
        Ok(self.write_share(updates).await?)
    }

    /// Gives back the records of members that left or were removed.
    async fn release_members(&self, gone: &[(String, String)]) -> Result<(), BrokerError> {
        let updates = {
            let mut parts = lock(&self.partitions);
            let mut updates = Vec::new();
            for ((g, t, p), sp) in parts.iter_mut() {
                for (group, member) in gone {
                    if g == group {
                        sp.release_member(member);
                    }
                }
                if let Some(u) = sp.take_update() {
                    updates.push((g.clone(), t.clone(), *p, u));
                }
            }
            updates
        };
        self.write_share(updates).await
    }

    async fn write_share(
        &self,
        updates: Vec<(String, String, i32, ShareUpdate)>,
    ) -> Result<(), BrokerError> {
        if updates.is_empty() {
            return Ok(());
        }
        let released = updates.iter().any(|(.., u)| {
            u.state
                .records
                .iter()
                .any(|r| r.1 == crate::coordinator::share::partition::SnapshotState::Available)
        });
        self.store.write(updates).await?;
        if released {
            self.available.notify(usize::MAX);
        }
        Ok(())
    }

    /// Acquires records for a member: from each partition of the request
    /// (each must be assigned to it) up to `max_records` in all, waiting up
    /// to `max_wait` when none are available. Each partition answers its
    /// records or why it has none.
    ///
    /// # Errors
    /// The member is not in the group (or was fenced).
    pub async fn share_fetch(&self, req: ShareFetchSpec) -> Result<Vec<ShareFetched>, ShareError> {
        let deadline = std::time::Instant::now()
            + req.max_wait.min(Duration::from_millis(
                u64::try_from(crate::config::MAX_FETCH_WAIT_MS).unwrap_or(0),
            ));
        loop {
            {
                let groups = lock(&self.groups);
                if groups
                    .group(&req.group)
                    .is_none_or(|g| !g.members().any(|m| m.member_id == req.member))
                {
                    return Err(ShareGroupError::UnknownMember(req.member.clone()).into());
                }
            }
            // Listen before looking, so records that arrive in between wake us.
            let mut listeners = vec![self.available.listen()];
            for tp in &req.partitions {
                listeners.extend(
                    self.records
                        .listen(&tp.topic, &[u32::try_from(tp.partition).unwrap_or(0)]),
                );
            }
            let mut out = Vec::with_capacity(req.partitions.len());
            let mut left = req.max_records.max(1);
            for tp in &req.partitions {
                if left == 0 {
                    out.push(ShareFetched {
                        tp: tp.clone(),
                        error: None,
                        records: Vec::new(),
                        acquired: Vec::new(),
                    });
                    continue;
                }
                match self.acquire_from(&req, tp, left).await {
                    Ok((records, acquired)) => {
                        let n: usize = acquired
                            .iter()
                            .map(|a| {
                                usize::try_from(a.last_offset - a.first_offset + 1).unwrap_or(0)
                            })
                            .sum();
                        left = left.saturating_sub(n);
                        out.push(ShareFetched {
                            tp: tp.clone(),
                            error: None,
                            records,
                            acquired,
                        });
                    }
                    Err(e) => out.push(ShareFetched {
                        tp: tp.clone(),
                        error: Some(e),
                        records: Vec::new(),
                        acquired: Vec::new(),
                    }),
                }
            }
            let got = out
                .iter()
                .any(|f| !f.acquired.is_empty() || f.error.is_some());
            let now = std::time::Instant::now();
            if got || now >= deadline || self.shutdown.is_begun() {
                return Ok(out);
            }
            // Wake at the earliest of: records, a release, a lock running
            // out (looked at by the ticker), the deadline.
            let wait = (deadline - now).min(Duration::from_millis(100));
            let any = futures::future::select_all(listeners.into_iter().map(Box::pin));
            futures::select! {
                _ = any.fuse() => {},
                _ = rt::sleep(wait).fuse() => {},
            }
        }
    }

    /// One partition's acquisition (see [`Shares::share_fetch`]).
    async fn acquire_from(
        &self,
        req: &ShareFetchSpec,
        tp: &ShareTp,
        max_records: usize,
    ) -> Result<(Vec<u8>, Vec<Acquired>), ShareError> {
        let assigned = lock(&self.groups)
            .group(&req.group)
            .is_some_and(|g| g.is_assigned(&req.member, &tp.topic, tp.partition));
        if !assigned {
            return Err(ShareError::NotAssigned {
                member: req.member.clone(),
                topic: tp.topic.clone(),
                partition: tp.partition,
            });
        }
        let topic = self
            .records
            .topic(&tp.topic)
            .ok_or_else(|| ShareError::UnknownTopic(tp.topic.clone()))?;
        let part = topic
            .partition(tp.partition)
            .ok_or_else(|| ShareError::UnknownPartition {
                topic: tp.topic.clone(),
                partition: tp.partition,
            })?;
        let key: SpKey = (req.group.clone(), tp.topic.clone(), tp.partition);
        let log_start = i64::try_from(part.start_offset()).unwrap_or(i64::MAX);
        let log_end = i64::try_from(part.end_offset()).unwrap_or(i64::MAX);
        let (from, budget, created) = {
            let mut parts = lock(&self.partitions);
            let mut created = None;
            if !parts.contains_key(&key) {
                if parts.len() >= MAX_SHARE_PARTITIONS {
                    return Err(ShareError::Limit(format!(
                        "the broker keeps {MAX_SHARE_PARTITIONS} share-partitions, its limit"
                    )));
                }
                let own = self.share_group_config(&req.group);
                let start = match own.reset(self.settings.auto_offset_reset) {
                    ShareReset::Latest => log_end,
                    ShareReset::Earliest => log_start,
                };
                let mut sp = SharePartition::new(own.partition(self.settings.partition), start);
                created = sp.take_update();
                parts.insert(key.clone(), sp);
            }
            let sp = parts
                .get_mut(&key)
                .ok_or_else(|| ShareError::Limit("share-partition gone".into()))?;
            if sp.start_offset() < log_start {
                sp.log_start_moved(log_start);
            }
            (
                sp.next_fetch_offset(),
                sp.read_budget(max_records, req.max_bytes),
                created,
            )
        };
        if let Some(u) = created {
            self.write_share(vec![(key.0.clone(), key.1.clone(), key.2, u)])
                .await?;
        }
        let Some(from) = from else {
            return Ok((Vec::new(), Vec::new()));
        };
        if from >= log_end || req.max_bytes == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        // read_committed (the default): up to the last stable offset, the
        // records of aborted transactions left out (gaps to the share-partition).
        let committed = self.share_group_config(&req.group).read_committed();
        let read = part
            .read(
                u64::try_from(from).unwrap_or(0),
                budget,
                ReadAs::Records,
                committed,
            )
            .await?;
        let mut offsets = Vec::new();
        for raw in RecordIter::new(&read.records) {
            let raw = raw.map_err(|e| {
                BrokerError::code_for(flume_protocol::ErrorCode::CorruptRecord, e.to_string())
            })?;
            offsets.push(i64::try_from(raw.offset).unwrap_or(i64::MAX));
        }
        let read_end = i64::try_from(read.next).unwrap_or(i64::MAX);
        let now = self.clock.mono_ms();
        let (acquired, update) = {
            let mut parts = lock(&self.partitions);
            let Some(sp) = parts.get_mut(&key) else {
                return Ok((Vec::new(), Vec::new()));
            };
            // A reset since the read moved the end below where it began:
            // what was read no longer says where the gaps are.
            if from > sp.end_offset() {
                return Ok((Vec::new(), Vec::new()));
            }
            sp.note_read(read.records.len(), offsets.len());
            let acquired = sp.acquire(&req.member, &offsets, read_end, max_records, now);
            (acquired, sp.take_update())
        };
        if let Some(u) = update {
            self.write_share(vec![(key.0, key.1, key.2, u)]).await?;
        }
        if acquired.is_empty() {
            return Ok((Vec::new(), acquired));
        }
        // Only the acquired records go out.
        let mut records = Vec::new();
        let mut runs = acquired.iter().peekable();
        for raw in RecordIter::new(&read.records).flatten() {
            let o = i64::try_from(raw.offset).unwrap_or(i64::MAX);
            while runs.peek().is_some_and(|r| r.last_offset < o) {
                runs.next();
            }
            if runs.peek().is_some_and(|r| r.first_offset <= o) {
                if let Some(bytes) = read.records.get(raw.pos..raw.pos + raw.encoded_len()) {
                    records.extend_from_slice(bytes);
                }
            }
        }
        Ok((records, acquired))
    }

    /// Applies a member's acknowledgements; each answers for itself (a
    /// refused one changes nothing). Answers once what changed is written.
    /// A member that left its group with its share session open still
    /// acknowledges what it holds.
    ///
    /// # Errors
    /// The member is not in the group (nor has a session); a storage failure.
    pub async fn share_acknowledge(
        &self,
        group: &str,
        member: &str,
        acks: &[ShareAck],
    ) -> Result<Vec<Result<(), ShareError>>, ShareError> {
        self.acknowledge_shares(group, member, acks, false).await
    }

    /// As [`Shares::share_acknowledge`], but each partition's
    /// acknowledgements are all or nothing (Kafka's ShareFetch and
    /// ShareAcknowledge answer one error per partition): if one of a
    /// partition's is refused, none of that partition's is applied and each
    /// answers the refusal.
    ///
    /// # Errors
    /// As [`Shares::share_acknowledge`].
    pub async fn share_acknowledge_by_partition(
        &self,
        group: &str,
        member: &str,
        acks: &[ShareAck],
    ) -> Result<Vec<Result<(), ShareError>>, ShareError> {
        self.acknowledge_shares(group, member, acks, true).await
    }

    async fn acknowledge_shares(
        &self,
        group: &str,
        member: &str,
        acks: &[ShareAck],
        by_partition: bool,
    ) -> Result<Vec<Result<(), ShareError>>, ShareError> {
        let live = lock(&self.groups)
            .group(group)
            .is_some_and(|g| g.members().any(|m| m.member_id == member));
        if !live && !self.share_session_open(group, member) {
            return Err(ShareGroupError::UnknownMember(member.to_owned()).into());
        }
        let now = self.clock.mono_ms();
        let (results, updates) = {
            let mut parts = lock(&self.partitions);
            let mut results = Vec::with_capacity(acks.len());
            // Partitions one of whose acknowledgements is refused: none of theirs applies.
            let mut refused: BTreeMap<&ShareTp, AckError> = BTreeMap::new();
            if by_partition {
                for a in acks {
                    let key: SpKey = (group.to_owned(), a.tp.topic.clone(), a.tp.partition);
                    let check = match parts.get(&key) {
                        Some(sp) => sp.check_acknowledge(member, a.first, a.last, a.ack),
                        None => Err(AckError::NotAcquired {
                            offset: a.first,
                            member: member.to_owned(),
                        }),
                    };
                    if let Err(e) = check {
                        refused.entry(&a.tp).or_insert(e);
                    }
                }
            }
            for a in acks {
                if let Some(e) = refused.get(&a.tp) {
                    results.push(Err(ShareError::RecordState(e.clone())));
                    continue;
                }
                let key: SpKey = (group.to_owned(), a.tp.topic.clone(), a.tp.partition);
                let r = match parts.get_mut(&key) {
                    Some(sp) => sp
                        .acknowledge(member, a.first, a.last, a.ack, now)
                        .map_err(ShareError::from),
                    None => Err(ShareError::RecordState(AckError::NotAcquired {
                        offset: a.first,
                        member: member.to_owned(),
                    })),
                };
                results.push(r);
            }
            let mut updates = Vec::new();
            let mut touched: Vec<&ShareTp> = acks.iter().map(|a| &a.tp).collect();
            touched.sort_unstable();
            touched.dedup();
            for tp in touched {
                let key: SpKey = (group.to_owned(), tp.topic.clone(), tp.partition);
                if let Some(u) = parts.get_mut(&key).and_then(SharePartition::take_update) {
                    updates.push((key.0, key.1, key.2, u));
                }
            }
            (results, updates)
        };
        self.write_share(updates).await?;
        Ok(results)
    }

    /// The share groups' maintenance: members whose session ran out leave,
    /// locks that ran out release their records. Run by the ticker.
    pub(super) async fn tick_shares(&self) {
        let now = self.clock.mono_ms();
        let gone = lock(&self.groups).expire(now);
        if !gone.is_empty() {
            lock(&self.sessions).drop_members(&gone);
        }
        let updates = {
            let mut parts = lock(&self.partitions);
            let mut updates = Vec::new();
            for ((g, t, p), sp) in parts.iter_mut() {
                for (group, member) in &gone {
                    if g == group {
                        sp.release_member(member);
                    }
                }
                if sp.next_deadline().is_some_and(|d| d <= now) {
                    sp.expire(now);
                }
                if let Some(u) = sp.take_update() {
                    updates.push((g.clone(), t.clone(), *p, u));
                }
            }
            updates
        };
        if let Err(e) = self.write_share(updates).await {
            tracing::error!(error = %e, "share-group state not written");
        }
    }

    /// Forgets every share group's state of a deleted topic.
    pub(super) async fn forget_share_topic(&self, topic: &str) -> Result<(), BrokerError> {
        lock(&self.partitions).retain(|(_, t, _), _| t != topic);
        self.store.remove_topic(topic).await
    }

    /// Describes a share group: its members and its share-partitions.
    pub fn describe_share_group(&self, group: &str) -> Option<ShareGroupView> {
        let (epoch, members) = {
            let groups = lock(&self.groups);
            match groups.group(group) {
                Some(g) => (
                    g.epoch,
                    g.members()
                        .map(|m| ShareMemberView {
                            member_id: m.member_id.clone(),
                            client_id: m.client_id.clone(),
                            client_host: m.client_host.clone(),
                            member_epoch: m.member_epoch,
                            subscribed: m.subscribed.clone(),
                            assignment: m.assignment.clone(),
                        })
                        .collect(),
                ),
                None => (0, Vec::new()),
            }
        };
        let mut partitions: Vec<SharePartitionView> = lock(&self.partitions)
            .iter()
            .filter(|((g, _, _), _)| g == group)
            .map(|((_, t, p), sp)| SharePartitionView {
                tp: ShareTp {
                    topic: t.clone(),
                    partition: *p,
                },
                start_offset: sp.start_offset(),
                counts: sp.counts(),
                archived: sp.totals().archived,
                totals: sp.totals(),
                log_end: self
                    .records
                    .topic(t)
                    .and_then(|t| {
                        t.partition(*p)
                            .map(|p| i64::try_from(p.end_offset()).unwrap_or(i64::MAX))
                    })
                    .unwrap_or(-1),
            })
            .collect();
        if members.is_empty() && partitions.is_empty() {
            return None;
        }
        partitions.sort_unstable_by(|a, b| a.tp.cmp(&b.tp));
        Some(ShareGroupView {
            group: group.to_owned(),
            epoch,
            members,
            partitions,
        })
    }

    /// Every share group described (by name), for metrics and the
    /// dashboard: at most `max_partitions` share-partitions in all (the
    /// first by group, topic and partition); true when some were left out.
    pub fn describe_share_groups(&self, max_partitions: usize) -> (Vec<ShareGroupView>, bool) {
        let mut parts: Vec<(String, ShareTp, i64, ShareCounts, ShareTotals)> =
            lock(&self.partitions)
                .iter()
                .map(|((g, t, p), sp)| {
                    let tp = ShareTp {
                        topic: t.clone(),
                        partition: *p,
                    };
                    (g.clone(), tp, sp.start_offset(), sp.counts(), sp.totals())
                })
                .collect();
        parts.sort_unstable_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        let truncated = parts.len() > max_partitions;
        parts.truncate(max_partitions);
        let mut views: BTreeMap<String, ShareGroupView> = BTreeMap::new();
        {
            let groups = lock(&self.groups);
            for name in groups.names() {
                if let Some(g) = groups.group(&name) {
                    let members = g
                        .members()
                        .map(|m| ShareMemberView {
                            member_id: m.member_id.clone(),
                            client_id: m.client_id.clone(),
                            client_host: m.client_host.clone(),
                            member_epoch: m.member_epoch,
                            subscribed: m.subscribed.clone(),
                            assignment: m.assignment.clone(),
                        })
                        .collect();
                    let view = ShareGroupView {
                        group: name.clone(),
                        epoch: g.epoch,
                        members,
                        partitions: Vec::new(),
                    };
                    views.insert(name, view);
                }
            }
        }
        for (group, tp, start_offset, counts, totals) in parts {
            let log_end = self
                .records
                .topic(&tp.topic)
                .and_then(|t| {
                    t.partition(tp.partition)
                        .map(|p| i64::try_from(p.end_offset()).unwrap_or(i64::MAX))
                })
                .unwrap_or(-1);
            let view = views
                .entry(group.clone())
                .or_insert_with(|| ShareGroupView {
                    group,
                    epoch: 0,
                    members: Vec::new(),
                    partitions: Vec::new(),
                });
            view.partitions.push(SharePartitionView {
                tp,
                start_offset,
                counts,
                archived: totals.archived,
                totals,
                log_end,
            });
        }
        (views.into_values().collect(), truncated)
    }

    /// Every share group: those with members or kept state.
    pub fn list_share_groups(&self) -> Vec<String> {
        let mut names = lock(&self.groups).names();
        names.extend(lock(&self.partitions).keys().map(|(g, _, _)| g.clone()));
        names.sort_unstable();
        names.dedup();
        names
    }

    /// Deletes a share group's kept state; refused while it has members.
    ///
    /// # Errors
    /// The group has members ([`ShareGroupError::Invalid`]); a storage failure.
    pub async fn delete_share_group(&self, group: &str) -> Result<bool, ShareError> {
        if lock(&self.groups).group(group).is_some() {
            return Err(ShareError::NotEmpty(group.to_owned()));
        }
        let existed = {
            let mut parts = lock(&self.partitions);
            let before = parts.len();
            parts.retain(|(g, _, _), _| g != group);
            parts.len() != before
        };
        lock(&self.sessions).drop_group(group);
        // Its configs go with it (as Kafka's DeleteGroups deletes them).
        let text = {
            let mut all = lock(&self.group_configs);
            all.remove(group).map(|_| group_config::to_text(&all))
        };
        if let Some(text) = text {
            let path = self.group_configs_path.clone();
            rt::unblock(move || crate::storage::dirs::write_atomic(&path, text.as_bytes()))
                .await
                .map_err(BrokerError::from)?;
        }
        if existed {
            self.store.remove_group(group).await?;
        }
        Ok(existed)
    }

    /// True when `group` is a share group: it has members or kept state.
    pub fn is_share_group(&self, group: &str) -> bool {
        lock(&self.groups).group(group).is_some()
            || lock(&self.partitions).keys().any(|(g, _, _)| g == group)
    }

    /// Moves share-partitions' start offsets (Kafka's
    /// AlterShareGroupOffsets): each starts afresh at its offset (clamped
    /// into the log), its in-flight state gone. Only while the group has
    /// no members; each partition answers for itself.
    ///
    /// # Errors
    /// [`ShareError::NotEmpty`]; a storage failure.
    pub async fn alter_share_start_offsets(
        &self,
        group: &str,
        starts: &[(ShareTp, i64)],
    ) -> Result<Vec<Result<(), ShareError>>, ShareError> {
        if lock(&self.groups).group(group).is_some() {
            return Err(ShareError::NotEmpty(group.to_owned()));
        }
        let mut results = Vec::with_capacity(starts.len());
        for (tp, offset) in starts {
            let r = async {
                let topic = self
                    .records
                    .topic(&tp.topic)
                    .ok_or_else(|| ShareError::UnknownTopic(tp.topic.clone()))?;
                let part =
                    topic
                        .partition(tp.partition)
                        .ok_or_else(|| ShareError::UnknownPartition {
                            topic: tp.topic.clone(),
                            partition: tp.partition,
                        })?;
                if *offset < 0 {
                    return Err(ShareError::Group(ShareGroupError::Invalid(format!(
                        "start offset {offset}"
                    ))));
                }
                let log_start = i64::try_from(part.start_offset()).unwrap_or(i64::MAX);
                let log_end = i64::try_from(part.end_offset()).unwrap_or(i64::MAX);
                let start = (*offset).clamp(log_start, log_end.max(log_start));
                let key: SpKey = (group.to_owned(), tp.topic.clone(), tp.partition);
                let update = {
                    let mut parts = lock(&self.partitions);
                    if !parts.contains_key(&key) && parts.len() >= MAX_SHARE_PARTITIONS {
                        return Err(ShareError::Limit(format!(
                            "the broker keeps {MAX_SHARE_PARTITIONS} share-partitions, its limit"
                        )));
                    }
                    let cfg = self
                        .share_group_config(group)
                        .partition(self.settings.partition);
                    let mut sp = SharePartition::new(cfg, start);
                    let u = sp.take_update();
                    parts.insert(key.clone(), sp);
                    u
                };
                self.store.remove_partition(&key.0, &key.1, key.2).await?;
                if let Some(u) = update {
                    self.write_share(vec![(key.0, key.1, key.2, u)]).await?;
                }
                Ok(())
            }
            .await;
            results.push(r);
        }
        Ok(results)
    }

    /// Forgets a share group's state of these topics (Kafka's
    /// DeleteShareGroupOffsets): the next member starts them afresh. Only
    /// while the group has no members; each topic answers for itself.
    ///
    /// # Errors
    /// [`ShareError::NotEmpty`]; a storage failure.
    pub async fn delete_share_offsets(
        &self,
        group: &str,
        topics: &[String],
    ) -> Result<Vec<Result<(), ShareError>>, ShareError> {
        if lock(&self.groups).group(group).is_some() {
            return Err(ShareError::NotEmpty(group.to_owned()));
        }
        let mut results = Vec::with_capacity(topics.len());
        for t in topics {
            if self.records.topic(t).is_none() {
                results.push(Err(ShareError::UnknownTopic(t.clone())));
                continue;
            }
            let gone: Vec<i32> = {
                let mut parts = lock(&self.partitions);
                let gone = parts
                    .keys()
                    .filter(|(g, tt, _)| g == group && tt == t)
                    .map(|(_, _, p)| *p)
                    .collect::<Vec<_>>();
                for p in &gone {
                    parts.remove(&(group.to_owned(), t.clone(), *p));
                }
                gone
            };
            let mut r = Ok(());
            for p in gone {
                if let Err(e) = self.store.remove_partition(group, t, p).await {
                    r = Err(e.into());
                }
            }
            results.push(r);
        }
        Ok(results)
    }

    /// A group's own configs (all unset for most groups).
    fn share_group_config(&self, group: &str) -> ShareGroupConfig {
        lock(&self.group_configs)
            .get(group)
            .copied()
            .unwrap_or_default()
    }

    /// A group's configs by Kafka's names: each value in force, and
    /// whether the group set it (else it is the broker's).
    pub fn share_group_configs(&self, group: &str) -> Vec<(&'static str, String, bool)> {
        self.share_group_config(group)
            .entries(self.settings.partition, self.settings.auto_offset_reset)
    }

    /// Changes a group's configs (SET, DELETE; all or nothing), kept
    /// before it returns; its share-partitions take the lock duration and
    /// the delivery limit at once (records acquired before keep their
    /// deadline). `validate_only` checks and keeps nothing.
    ///
    /// # Errors
    /// An unknown config or a value out of range; past the bound of groups
    /// with configs; a storage failure.
    pub async fn alter_share_group_configs(
        &self,
        group: &str,
        ops: &[crate::domain::ConfigOp],
        validate_only: bool,
    ) -> Result<(), ShareError> {
        use crate::domain::ConfigOp;
        let invalid = |m: String| ShareError::Group(ShareGroupError::Invalid(m));
        if !crate::config::valid_group_id(group) {
            return Err(invalid(format!("group id {group:?}")));
        }
        let mut c = self.share_group_config(group);
        for op in ops {
            match op {
                ConfigOp::Set(n, v) => c.set(n, v).map_err(invalid)?,
                ConfigOp::Delete(n) => c.delete(n).map_err(invalid)?,
                ConfigOp::Append(n, _) | ConfigOp::Subtract(n, _) => {
                    return Err(invalid(format!("{n} is not a list: SET or DELETE it")))
                }
            }
        }
        if validate_only {
            return Ok(());
        }
        let text = {
            let mut all = lock(&self.group_configs).clone();
            if !all.contains_key(group) && all.len() >= group_config::MAX_CONFIGURED_GROUPS {
                return Err(ShareError::Limit(format!(
                    "{} share groups have configs of their own, the limit",
                    group_config::MAX_CONFIGURED_GROUPS
                )));
            }
            all.insert(group.to_owned(), c);
            group_config::to_text(&all)
        };
        let path = self.group_configs_path.clone();
        rt::unblock(move || crate::storage::dirs::write_atomic(&path, text.as_bytes()))
            .await
            .map_err(BrokerError::from)?;
        lock(&self.group_configs).insert(group.to_owned(), c);
        let cfg = c.partition(self.settings.partition);
        for ((g, _, _), sp) in lock(&self.partitions).iter_mut() {
            if g == group {
                sp.set_config(cfg);
            }
        }
        Ok(())
    }
}

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
//!
//! - here: the service, membership (heartbeats), share sessions, writes
//!   of the kept state, lock expiry on the ticker;
//! - `fetch.rs`: acquisitions from the log;
//! - `ack.rs`: acknowledgements;
//! - `admin.rs`: describe, list and delete; start offsets; groups' own configs.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

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
use crate::error::BrokerError;

mod ack;
mod admin;
mod fetch;

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

impl ShareMemberView {
    /// The view of a member of the membership state machine.
    fn of(m: &crate::coordinator::share::group::ShareMember) -> Self {
        ShareMemberView {
            member_id: m.member_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            member_epoch: m.member_epoch,
            subscribed: m.subscribed.clone(),
            assignment: m.assignment.clone(),
        }
    }
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

    /// A group's own configs (all unset for most groups).
    fn share_group_config(&self, group: &str) -> ShareGroupConfig {
        lock(&self.group_configs)
            .get(group)
            .copied()
            .unwrap_or_default()
    }
}

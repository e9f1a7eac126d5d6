//! Describing, listing and deleting share groups; their start offsets
//! and their own configs.

use std::collections::BTreeMap;

use flume_rt as rt;
use flume_rt::sync::lock;

use super::{
    ShareCounts, ShareError, ShareGroupError, ShareGroupView, ShareMemberView, SharePartitionView,
    ShareTotals, ShareTp, Shares, SpKey, MAX_SHARE_PARTITIONS,
};
use crate::coordinator::share::group_config;
use crate::coordinator::share::partition::SharePartition;
use crate::error::BrokerError;

impl Shares {
    /// Describes a share group: its members and its share-partitions.
    pub fn describe_share_group(&self, group: &str) -> Option<ShareGroupView> {
        let (epoch, members) = {
            let groups = lock(&self.groups);
            match groups.group(group) {
                Some(g) => (g.epoch, g.members().map(ShareMemberView::of).collect()),
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
                    let members = g.members().map(ShareMemberView::of).collect();
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

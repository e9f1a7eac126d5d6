//! Acknowledgements of acquired records: applied, written, then answered.

use std::collections::BTreeMap;

use flume_rt::sync::lock;

use super::{AckError, ShareAck, ShareError, ShareGroupError, ShareTp, Shares, SpKey};
use crate::coordinator::share::partition::SharePartition;

impl Shares {
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
}

//! Share fetches: acquiring records for a member from the log, waiting
//! while none are available.

use std::time::Duration;

use flume_protocol::record::RecordIter;
use flume_rt as rt;
use flume_rt::sync::lock;
use futures::FutureExt;

use super::{
    Acquired, ShareError, ShareFetchSpec, ShareFetched, ShareGroupError, ShareReset, ShareTp,
    Shares, SpKey, MAX_SHARE_PARTITIONS,
};
use crate::coordinator::share::partition::SharePartition;
use crate::domain::ReadAs;
use crate::error::BrokerError;

impl Shares {
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
}

//! The share consumer over Flume's protocol (`crate::share` is the
//! facade): SHARE_HEARTBEAT (a background task at the interval the broker
//! answers), SHARE_FETCH with the acknowledgements riding on it,
//! SHARE_ACKNOWLEDGE.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use flume_protocol::record;
use flume_protocol::{
    ErrorCode, ShareAcknowledgeRequest, ShareAcknowledgement, ShareFetchRequest,
    ShareHeartbeatRequest, SharePartitionRef,
};
use flume_rt as rt;
use flume_rt::sync::lock;

use super::conn::Client;
use crate::error::{Error, Result};
use crate::types::connection::ConnectionConfig;
use crate::types::share::{FetchLimits, Fetched, FetchedPartition};

#[derive(Debug, Default)]
struct MemberState {
    member_id: String,
    epoch: i32,
    interval: Duration,
    assignment: Vec<(String, i32)>,
}

/// The membership, shared by the consumer and its heartbeat task.
#[derive(Debug)]
struct Member {
    group: String,
    client_id: String,
    topics: Vec<String>,
    state: Mutex<MemberState>,
}

impl Member {
    /// One heartbeat: a join (epoch 0, with the subscription) when `join`.
    async fn beat(&self, client: &Client, join: bool) -> Result<()> {
        let (member_id, epoch) = {
            let st = lock(&self.state);
            (st.member_id.clone(), if join { 0 } else { st.epoch })
        };
        let r = client
            .call(&ShareHeartbeatRequest {
                group: self.group.clone(),
                member_id,
                member_epoch: epoch,
                client_id: self.client_id.clone(),
                topics: if join {
                    self.topics.clone()
                } else {
                    Vec::new()
                },
            })
            .await?;
        let mut st = lock(&self.state);
        st.member_id = r.member_id;
        st.epoch = r.member_epoch;
        st.interval = Duration::from_millis(u64::try_from(r.heartbeat_interval_ms).unwrap_or(0))
            .max(Duration::from_millis(10));
        st.assignment = r
            .assignment
            .into_iter()
            .flat_map(|tp| {
                let t = tp.topic;
                tp.partitions.into_iter().map(move |p| (t.clone(), p))
            })
            .collect();
        Ok(())
    }

    async fn join(&self, client: &Client) -> Result<()> {
        self.beat(client, true).await
    }

    /// A heartbeat that joins again when the broker no longer knows the
    /// member or its epoch.
    async fn keep(&self, client: &Client) -> Result<()> {
        match self.beat(client, false).await {
            Err(e) if fenced(&e) => self.join(client).await,
            r => r,
        }
    }
}

fn fenced(e: &Error) -> bool {
    matches!(
        e.code(),
        Some(ErrorCode::UnknownMember | ErrorCode::IllegalGeneration)
    )
}

async fn heartbeat_loop(
    client: Arc<Client>,
    member: Arc<Member>,
    stop: async_channel::Receiver<()>,
) {
    use futures::FutureExt;
    loop {
        let wait = lock(&member.state).interval;
        futures::select! {
            _ = stop.recv().fuse() => return,
            () = rt::sleep(wait).fuse() => {}
        }
        if let Err(e) = member.keep(&client).await {
            tracing::warn!(group = %member.group, error = %e, "share group heartbeat failed");
        }
    }
}

/// A share group member over Flume's protocol.
#[derive(Debug)]
pub(crate) struct FlumeShare {
    client: Arc<Client>,
    member: Arc<Member>,
    stop: Option<async_channel::Sender<()>>,
    heartbeat: rt::sync::TaskSlot<()>,
    rotation: usize,
}

impl FlumeShare {
    pub(crate) async fn join(
        addr: &str,
        connection: ConnectionConfig,
        group: &str,
        client_id: &str,
        topics: &[String],
    ) -> Result<FlumeShare> {
        let client = Arc::new(Client::connect(addr, connection).await?);
        let member = Arc::new(Member {
            group: group.to_owned(),
            client_id: client_id.to_owned(),
            topics: topics.to_vec(),
            state: Mutex::new(MemberState::default()),
        });
        member.join(&client).await?;
        let (stop_tx, stop_rx) = async_channel::bounded::<()>(1);
        let task = rt::spawn(heartbeat_loop(
            Arc::clone(&client),
            Arc::clone(&member),
            stop_rx,
        ));
        Ok(FlumeShare {
            client,
            member,
            stop: Some(stop_tx),
            heartbeat: rt::sync::TaskSlot::new(task),
            rotation: 0,
        })
    }

    pub(crate) fn member_id(&self) -> String {
        lock(&self.member.state).member_id.clone()
    }

    pub(crate) fn assignment(&self) -> Vec<(String, i32)> {
        lock(&self.member.state).assignment.clone()
    }

    pub(crate) async fn fetch(
        &mut self,
        acks: Vec<ShareAcknowledgement>,
        limits: FetchLimits,
    ) -> Result<Fetched> {
        let (member_id, mut partitions) = {
            let st = lock(&self.member.state);
            (st.member_id.clone(), st.assignment.clone())
        };
        if partitions.is_empty() {
            // Nothing assigned (the topics do not exist yet): send the
            // acknowledgements, ask again after a wait.
            if !acks.is_empty() {
                self.acknowledge(&acks).await?;
            }
            rt::sleep(limits.max_wait.min(Duration::from_millis(200))).await;
            self.member.keep(&self.client).await?;
            return Ok(Fetched::default());
        }
        // Start one partition further on each time, so none starves the others.
        self.rotation = self.rotation.wrapping_add(1);
        let n = partitions.len();
        partitions.rotate_left(self.rotation % n);
        let req = ShareFetchRequest {
            group: self.member.group.clone(),
            member_id,
            max_wait_ms: i32::try_from(limits.max_wait.as_millis()).unwrap_or(i32::MAX),
            max_records: limits.max_records,
            max_bytes: limits.max_bytes,
            partitions: partitions
                .into_iter()
                .map(|(topic, partition)| SharePartitionRef { topic, partition })
                .collect(),
            acknowledgements: acks.clone(),
        };
        let resp = match self.client.call_with_extra(&req, limits.max_wait).await {
            Ok(r) => r,
            Err(e) if fenced(&e) => {
                // The broker dropped the member and gave its records back:
                // nothing held is ours to acknowledge any more.
                self.member.join(&self.client).await?;
                return Ok(Fetched {
                    partitions: Vec::new(),
                    dropped: true,
                });
            }
            Err(e) => return Err(e),
        };
        for (a, code) in acks.iter().zip(&resp.acknowledgements) {
            if !code.is_ok() {
                tracing::warn!(
                    topic = %a.topic, partition = a.partition, first = a.first_offset,
                    last = a.last_offset, error = %code,
                    "share acknowledgement refused (the records come back or were taken)"
                );
            }
        }
        let mut out = Fetched::default();
        let mut refresh = false;
        for p in resp.partitions {
            if !p.error.is_ok() {
                tracing::debug!(topic = %p.topic, partition = p.partition, error = %p.error, "share fetch partition");
                refresh |= p.error == ErrorCode::NotAssigned;
                continue;
            }
            let records = record::decode_all(&p.records).map_err(|e| Error::CorruptRecord {
                detail: format!("{}-{}: {e}", p.topic, p.partition),
            })?;
            let records = records
                .into_iter()
                .map(|r| {
                    let o = i64::try_from(r.offset).unwrap_or(i64::MAX);
                    let count = p
                        .acquired
                        .iter()
                        .find(|a| a.first_offset <= o && o <= a.last_offset)
                        .map_or(1, |a| u16::try_from(a.delivery_count).unwrap_or(1));
                    (r, count)
                })
                .collect();
            out.partitions.push(FetchedPartition {
                topic: p.topic,
                partition: p.partition,
                records,
            });
        }
        if refresh {
            self.member.keep(&self.client).await?;
        }
        Ok(out)
    }

    pub(crate) async fn acknowledge(
        &self,
        acks: &[ShareAcknowledgement],
    ) -> Result<Vec<ErrorCode>> {
        let resp = self
            .client
            .call(&ShareAcknowledgeRequest {
                group: self.member.group.clone(),
                member_id: self.member_id(),
                acknowledgements: acks.to_vec(),
            })
            .await?;
        Ok(resp.results)
    }

    pub(crate) async fn close(&mut self, acks: Vec<ShareAcknowledgement>) -> Result<()> {
        let acked = if acks.is_empty() {
            Ok(Vec::new())
        } else {
            self.acknowledge(&acks).await
        };
        self.stop.take();
        let _ = self.heartbeat.cancel().await;
        let left = self
            .client
            .call(&ShareHeartbeatRequest {
                group: self.member.group.clone(),
                member_id: self.member_id(),
                member_epoch: -1,
                client_id: self.member.client_id.clone(),
                topics: Vec::new(),
            })
            .await;
        self.client.close().await;
        acked?;
        left.map(|_| ())
    }
}

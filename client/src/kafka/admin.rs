//! `Admin` over Kafka: topics (create with configs, delete, describe with
//! their offsets, configs), offsets by timestamp, groups (list, describe,
//! committed offsets and lag, commit from outside, delete), records and
//! partitions. Answers use the SDK's own types, so a tool prints the same
//! way whichever protocol it spoke.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{
    consumer_group_describe_response, create_partitions_request, create_topics_request,
    delete_records_request, delete_topics_request, describe_configs_request, offset_delete_request,
    ApiKey, ConsumerGroupDescribeRequest, CreatePartitionsRequest, CreateTopicsRequest,
    DeleteGroupsRequest, DeleteRecordsRequest, DeleteTopicsRequest, DescribeConfigsRequest,
    DescribeGroupsRequest, DescribeTransactionsRequest, ListGroupsRequest, ListTransactionsRequest,
    OffsetDeleteRequest, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;

use super::cluster::Cluster;
use super::errors;
use super::offsets::{self, flume_code, group_id, topic_name};
use crate::error::{Error, Result};
use flume_protocol::{
    ConsumerGroupInfo, ConsumerMemberInfo, CreateTopicRequest, DeletedOffset,
    DescribeGroupResponse, ErrorCode, GroupListing, GroupMemberInfo, GroupOffsetInfo,
    ListOffsetsPartition, ListedOffset, OffsetFetchPartition, PartitionMetadata, PartitionOffset,
    TopicConfigValue, TopicConfigsResponse, TopicMetadata, TopicPartitions, TransactionListing,
    CONFIG_SOURCE_BROKER, CONFIG_SOURCE_DEFAULT, CONFIG_SOURCE_TOPIC,
};

/// How long the brokers may take over topic and partition changes.
const ADMIN_TIMEOUT_MS: i32 = 30_000;

/// Kafka's resource type of a topic in DescribeConfigs.
const RESOURCE_TOPIC: i8 = 2;

/// `Admin` on a Kafka cluster.
#[derive(Debug)]
pub(crate) struct KafkaAdmin {
    cluster: Arc<Cluster>,
}

impl KafkaAdmin {
    /// Connects to the cluster of `brokers` (bootstrap).
    ///
    /// # Errors
    /// [`Error::Connect`] when no bootstrap broker answers, TLS and login failures.
    pub(crate) async fn connect(
        brokers: Vec<String>,
        config: crate::types::connection::ConnectionConfig,
    ) -> Result<Self> {
        Ok(Self::new(Cluster::connect(brokers, config).await?))
    }

    pub(crate) fn new(cluster: Arc<Cluster>) -> Self {
        KafkaAdmin { cluster }
    }

    pub(crate) async fn close(&self) {
        self.cluster.close().await;
    }

    /// CreateTopics at the controller; returns the configs the broker
    /// reported (v5+), else none.
    async fn create(
        &self,
        name: &str,
        partitions: i32,
        configs: &[(String, String)],
    ) -> Result<Option<Vec<TopicConfigValue>>> {
        let conn = self.cluster.controller().await?;
        let v = conn.version(ApiKey::CreateTopics)?;
        if v < 4 && partitions < 0 {
            return Err(Error::InvalidArgument(format!(
                "{name}: the broker needs a partition count (CreateTopics v{v} has no broker default)"
            )));
        }
        let topic = create_topics_request::CreatableTopic::default()
            .with_name(topic_name(name))
            .with_num_partitions(partitions)
            .with_replication_factor(-1)
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        create_topics_request::CreatableTopicConfig::default()
                            .with_name(StrBytes::from_string(k.clone()))
                            .with_value(Some(StrBytes::from_string(v.clone())))
                    })
                    .collect(),
            );
        let mut topic = topic;
        if v < 4 {
            // Before v4 the replication factor must be given: one copy.
            topic.replication_factor = 1;
        }
        let req = CreateTopicsRequest::default()
            .with_topics(vec![topic])
            .with_timeout_ms(ADMIN_TIMEOUT_MS);
        let resp = conn.call_at(&req, v, Duration::ZERO).await?;
        let r = resp
            .topics
            .into_iter()
            .next()
            .ok_or_else(|| Error::protocol("CreateTopics answered no topic"))?;
        if r.error_code != errors::NONE {
            return Err(errors::error_with(
                r.error_code,
                name,
                r.error_message.as_deref(),
            ));
        }
        Ok(r.configs.map(|cs| {
            cs.into_iter()
                .map(|c| TopicConfigValue {
                    name: c.name.to_string(),
                    value: c.value.map(|v| v.to_string()).unwrap_or_default(),
                    source: config_source(c.config_source),
                })
                .collect()
        }))
    }

    pub(crate) async fn create_topic(&self, req: CreateTopicRequest) -> Result<()> {
        // Flume's own queue settings have no Kafka topic config: refused, not dropped.
        if req.max_pending >= 0 || req.backpressure >= 0 {
            return Err(Error::InvalidArgument(format!(
                "topic {:?}: max_pending and backpressure are Flume's own settings; a Kafka \
                 cluster (a kafka:// address) has no such topic config",
                req.name
            )));
        }
        let mut configs = Vec::new();
        if req.retention_ms > 0 {
            configs.push(("retention.ms".to_owned(), req.retention_ms.to_string()));
        }
        if req.retention_bytes > 0 {
            configs.push((
                "retention.bytes".to_owned(),
                req.retention_bytes.to_string(),
            ));
        }
        if req.segment_bytes > 0 {
            configs.push(("segment.bytes".to_owned(), req.segment_bytes.to_string()));
        }
        let partitions = if req.partitions > 0 {
            req.partitions
        } else {
            -1
        };
        self.create(&req.name, partitions, &configs)
            .await
            .map(|_| ())
    }

    pub(crate) async fn create_topic_with_configs(
        &self,
        name: &str,
        partitions: i32,
        configs: &[(&str, &str)],
    ) -> Result<TopicConfigsResponse> {
        let configs: Vec<(String, String)> = configs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        match self.create(name, partitions, &configs).await? {
            Some(configs) => {
                let partitions = self
                    .cluster
                    .topic_meta(name, false)
                    .await
                    .map_or(partitions, |t| {
                        i32::try_from(t.partitions.len()).unwrap_or(-1)
                    });
                Ok(TopicConfigsResponse {
                    error: ErrorCode::None,
                    message: String::new(),
                    partitions,
                    configs,
                })
            }
            None => self.describe_topic_configs(name).await,
        }
    }

    pub(crate) async fn describe_topic_configs(&self, name: &str) -> Result<TopicConfigsResponse> {
        let conn = self.cluster.any().await?;
        let v = conn.version(ApiKey::DescribeConfigs)?;
        let req = DescribeConfigsRequest::default().with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(RESOURCE_TOPIC)
                .with_resource_name(StrBytes::from_string(name.to_owned()))
                .with_configuration_keys(None),
        ]);
        let resp = conn.call_at(&req, v, Duration::ZERO).await?;
        let r = resp
            .results
            .into_iter()
            .next()
            .ok_or_else(|| Error::protocol("DescribeConfigs answered no resource"))?;
        if r.error_code != errors::NONE {
            return Err(errors::error_with(
                r.error_code,
                name,
                r.error_message.as_deref(),
            ));
        }
        let mut configs: Vec<TopicConfigValue> = r
            .configs
            .into_iter()
            .map(|c| TopicConfigValue {
                name: c.name.to_string(),
                value: c.value.map(|v| v.to_string()).unwrap_or_default(),
                source: config_source(c.config_source),
            })
            .collect();
        configs.sort_by(|a, b| a.name.cmp(&b.name));
        let partitions = self
            .cluster
            .topic_meta(name, false)
            .await
            .map_or(-1, |t| i32::try_from(t.partitions.len()).unwrap_or(-1));
        Ok(TopicConfigsResponse {
            error: ErrorCode::None,
            message: String::new(),
            partitions,
            configs,
        })
    }

    pub(crate) async fn delete_topic(&self, name: &str) -> Result<()> {
        let conn = self.cluster.controller().await?;
        let v = conn.version(ApiKey::DeleteTopics)?;
        let mut req = DeleteTopicsRequest::default().with_timeout_ms(ADMIN_TIMEOUT_MS);
        if v >= 6 {
            req.topics = vec![delete_topics_request::DeleteTopicState::default()
                .with_name(Some(topic_name(name)))];
        } else {
            req.topic_names = vec![topic_name(name)];
        }
        let resp = conn.call_at(&req, v, Duration::ZERO).await?;
        for r in resp.responses {
            if r.error_code != errors::NONE {
                return Err(errors::error_with(
                    r.error_code,
                    name,
                    r.error_message.as_deref(),
                ));
            }
        }
        Ok(())
    }

    /// Every topic (or those named, in that order) with each partition's
    /// earliest and latest offsets. Kafka's internal topics
    /// (`__consumer_offsets`, ...) are left out of the full list.
    pub(crate) async fn topics(&self, names: &[String]) -> Result<Vec<TopicMetadata>> {
        let resp = self
            .cluster
            .refresh((!names.is_empty()).then_some(names), false)
            .await?;
        let mut out = Vec::new();
        let mut parts = Vec::new();
        for t in &resp.topics {
            let Some(name) = &t.name else { continue };
            if names.is_empty() && t.is_internal {
                continue;
            }
            let mut ps: Vec<i32> = t.partitions.iter().map(|p| p.partition_index).collect();
            ps.sort_unstable();
            parts.extend(ps.iter().map(|p| (name.0.to_string(), *p)));
            out.push((name.0.to_string(), t.error_code, ps));
        }
        let marks = offsets::watermarks(&self.cluster, &parts).await?;
        let mut topics: Vec<TopicMetadata> = out
            .into_iter()
            .map(|(name, code, ps)| TopicMetadata {
                error: flume_code(code),
                partitions: ps
                    .into_iter()
                    .map(|p| {
                        let (log_start, log_end) =
                            marks.get(&(name.clone(), p)).copied().unwrap_or((-1, -1));
                        PartitionMetadata {
                            partition: p,
                            log_start,
                            log_end,
                        }
                    })
                    .collect(),
                name,
            })
            .collect();
        if names.is_empty() {
            topics.sort_by(|a, b| a.name.cmp(&b.name));
        }
        Ok(topics)
    }

    pub(crate) async fn list_offsets(
        &self,
        partitions: Vec<ListOffsetsPartition>,
    ) -> Result<Vec<ListedOffset>> {
        let asks: Vec<(String, i32, i64)> = partitions
            .iter()
            .map(|p| (p.topic.clone(), p.partition, p.timestamp))
            .collect();
        let answers = offsets::list_offsets(&self.cluster, &asks).await?;
        // In the order asked.
        let mut by_key: BTreeMap<(String, i32), offsets::Listed> = answers
            .into_iter()
            .map(|(t, l)| ((t, l.partition), l))
            .collect();
        Ok(partitions
            .into_iter()
            .map(|p| {
                let l = by_key.remove(&(p.topic.clone(), p.partition));
                ListedOffset {
                    error: l.map_or(ErrorCode::UnknownPartition, |l| flume_code(l.error)),
                    offset: l.map_or(-1, |l| l.offset),
                    timestamp: l.map_or(-1, |l| l.timestamp),
                    topic: p.topic,
                    partition: p.partition,
                }
            })
            .collect())
    }

    /// The partitions of `topics` (every partition the group committed when
    /// `topics` is empty) with the group's committed offset and the log's
    /// start and end.
    pub(crate) async fn group_offsets(
        &self,
        group: &str,
        topics: &[String],
    ) -> Result<Vec<OffsetFetchPartition>> {
        let committed = if topics.is_empty() {
            offsets::committed(&self.cluster, group, None).await?
        } else {
            let mut parts = Vec::new();
            for t in topics {
                let meta = self.cluster.topic_meta(t, false).await?;
                parts.extend(meta.partitions.iter().map(|p| (t.clone(), p.id)));
            }
            offsets::committed(&self.cluster, group, Some(&parts)).await?
        };
        let parts: Vec<(String, i32)> = committed.keys().cloned().collect();
        let marks = offsets::watermarks(&self.cluster, &parts).await?;
        Ok(committed
            .into_iter()
            .map(|((topic, partition), (offset, code))| {
                let (log_start, log_end) = marks
                    .get(&(topic.clone(), partition))
                    .copied()
                    .unwrap_or((-1, -1));
                OffsetFetchPartition {
                    topic,
                    partition,
                    error: flume_code(code),
                    committed: offset,
                    log_start,
                    log_end,
                }
            })
            .collect())
    }

    pub(crate) async fn commit(&self, group: &str, offsets_: Vec<PartitionOffset>) -> Result<()> {
        let offs: Vec<(String, i32, i64)> = offsets_
            .into_iter()
            .map(|o| (o.topic, o.partition, o.offset))
            .collect();
        offsets::commit(&self.cluster, group, -1, "", &offs).await
    }

    /// Ok when the group has no members; REBALANCE_IN_PROGRESS (as Flume
    /// answers a commit from outside a live group) when it has.
    pub(crate) async fn check_group_empty(&self, group: &str) -> Result<()> {
        let d = self.describe_raw(group).await?;
        if d.members.is_empty() {
            Ok(())
        } else {
            Err(errors::error(
                errors::REBALANCE_IN_PROGRESS,
                format!("group {group} has {} members", d.members.len()),
            ))
        }
    }

    /// DeleteGroups at the coordinator; Kafka does not say how many
    /// offsets went, so the count is 0.
    pub(crate) async fn delete_group(&self, group: &str) -> Result<i32> {
        let conn = self.cluster.coordinator(group).await?;
        let v = conn.version(ApiKey::DeleteGroups)?;
        let req = DeleteGroupsRequest::default().with_groups_names(vec![group_id(group)]);
        let resp = conn.call_at(&req, v, Duration::ZERO).await?;
        for r in resp.results {
            errors::check(r.error_code, || format!("group {group}"))?;
        }
        Ok(0)
    }

    pub(crate) async fn delete_records(
        &self,
        topic: &str,
        partition: i32,
        before: Option<u64>,
    ) -> Result<u64> {
        let leader = self.cluster.leader(topic, partition).await?;
        let conn = self.cluster.broker(leader.leader).await?;
        let v = conn.version(ApiKey::DeleteRecords)?;
        let offset = before.map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX));
        let req = DeleteRecordsRequest::default()
            .with_timeout_ms(ADMIN_TIMEOUT_MS)
            .with_topics(vec![delete_records_request::DeleteRecordsTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(vec![
                    delete_records_request::DeleteRecordsPartition::default()
                        .with_partition_index(partition)
                        .with_offset(offset),
                ])]);
        let resp = conn.call_at(&req, v, Duration::ZERO).await?;
        let p = resp
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == partition)
            .ok_or_else(|| Error::protocol("DeleteRecords answered no partition"))?;
        errors::check(p.error_code, || format!("{topic}/{partition}"))?;
        Ok(u64::try_from(p.low_watermark).unwrap_or(0))
    }

    pub(crate) async fn create_partitions(
        &self,
        topic: &str,
        partitions: i32,
        validate_only: bool,
    ) -> Result<i32> {
        let before = self.cluster.topic_meta(topic, false).await?;
        let conn = self.cluster.controller().await?;
        let v = conn.version(ApiKey::CreatePartitions)?;
        let req = CreatePartitionsRequest::default()
            .with_timeout_ms(ADMIN_TIMEOUT_MS)
            .with_validate_only(validate_only)
            .with_topics(vec![
                create_partitions_request::CreatePartitionsTopic::default()
                    .with_name(topic_name(topic))
                    .with_count(partitions),
            ]);
        let resp = conn.call_at(&req, v, Duration::ZERO).await?;
        for r in resp.results {
            if r.error_code != errors::NONE {
                return Err(errors::error_with(
                    r.error_code,
                    topic,
                    r.error_message.as_deref(),
                ));
            }
        }
        Ok(i32::try_from(before.partitions.len()).unwrap_or(i32::MAX))
    }

    pub(crate) async fn delete_offsets(
        &self,
        group: &str,
        topic: &str,
        partitions: &[i32],
    ) -> Result<Vec<DeletedOffset>> {
        let parts: Vec<i32> = if partitions.is_empty() {
            let t = self.cluster.topic_meta(topic, false).await?;
            t.partitions.iter().map(|p| p.id).collect()
        } else {
            partitions.to_vec()
        };
        let conn = self.cluster.coordinator(group).await?;
        let v = conn.version(ApiKey::OffsetDelete)?;
        let req = OffsetDeleteRequest::default()
            .with_group_id(group_id(group))
            .with_topics(vec![
                offset_delete_request::OffsetDeleteRequestTopic::default()
                    .with_name(topic_name(topic))
                    .with_partitions(
                        parts
                            .iter()
                            .map(|p| {
                                offset_delete_request::OffsetDeleteRequestPartition::default()
                                    .with_partition_index(*p)
                            })
                            .collect(),
                    ),
            ]);
        let resp = conn.call_at(&req, v, Duration::ZERO).await?;
        errors::check(resp.error_code, || format!("group {group}"))?;
        Ok(resp
            .topics
            .into_iter()
            .flat_map(|t| t.partitions)
            .map(|p| DeletedOffset {
                partition: p.partition_index,
                error: match p.error_code {
                    86 => ErrorCode::GroupNotEmpty,
                    c => flume_code(c),
                },
            })
            .collect())
    }

    /// ListGroups at every broker (each lists the groups it coordinates).
    pub(crate) async fn list_groups(&self, states: &[&str]) -> Result<Vec<GroupListing>> {
        let brokers = self.cluster.refresh(Some(&[]), false).await?.brokers;
        let mut out = BTreeMap::new();
        for b in brokers {
            let conn = self.cluster.broker(b.node_id.0).await?;
            let v = conn.version(ApiKey::ListGroups)?;
            let mut req = ListGroupsRequest::default();
            if v >= 4 {
                req.states_filter = states
                    .iter()
                    .map(|s| StrBytes::from_string((*s).to_owned()))
                    .collect();
            }
            let resp = conn.call_at(&req, v, Duration::ZERO).await?;
            errors::check(resp.error_code, || format!("ListGroups at {}", conn.addr()))?;
            for g in resp.groups {
                let state = g.group_state.to_string();
                if v < 4 && !states.is_empty() && !states.contains(&state.as_str()) {
                    continue;
                }
                out.insert(
                    g.group_id.0.to_string(),
                    GroupListing {
                        group: g.group_id.0.to_string(),
                        state,
                        protocol_type: g.protocol_type.to_string(),
                    },
                );
            }
        }
        Ok(out.into_values().collect())
    }

    /// ListTransactions at every broker (each lists the transactional ids
    /// it coordinates), then DescribeTransactions of those at the same
    /// broker for their epoch, timeout, start and partitions. An unknown
    /// state name is refused as by a Flume broker (INVALID_REQUEST).
    pub(crate) async fn list_transactions(
        &self,
        states: &[&str],
        min_age_ms: i64,
    ) -> Result<Vec<TransactionListing>> {
        let brokers = self.cluster.refresh(Some(&[]), false).await?.brokers;
        let mut out = BTreeMap::new();
        for b in brokers {
            let conn = self.cluster.broker(b.node_id.0).await?;
            let v = conn.version(ApiKey::ListTransactions)?;
            let mut req = ListTransactionsRequest::default().with_state_filters(
                states
                    .iter()
                    .map(|s| StrBytes::from_string((*s).to_owned()))
                    .collect(),
            );
            if v >= 1 {
                req.duration_filter = min_age_ms;
            }
            let resp = conn.call_at(&req, v, Duration::ZERO).await?;
            errors::check(resp.error_code, || {
                format!("ListTransactions at {}", conn.addr())
            })?;
            if let Some(unknown) = resp.unknown_state_filters.first() {
                return Err(Error::broker(
                    ErrorCode::InvalidRequest,
                    format!("unknown transaction state {unknown}"),
                ));
            }
            let ids: Vec<TransactionalId> = resp
                .transaction_states
                .into_iter()
                .map(|t| t.transactional_id)
                .collect();
            if ids.is_empty() {
                continue;
            }
            let dv = conn.version(ApiKey::DescribeTransactions)?;
            let req = DescribeTransactionsRequest::default().with_transactional_ids(ids);
            let resp = conn.call_at(&req, dv, Duration::ZERO).await?;
            for t in resp.transaction_states {
                // Gone between the two calls, or moved to another coordinator.
                if t.error_code != 0 {
                    continue;
                }
                let open = matches!(
                    t.transaction_state.as_str(),
                    "Ongoing" | "PrepareCommit" | "PrepareAbort"
                );
                // Kafka keeps a completed transaction's start time, so an age
                // filter also keeps only open ones here (as a Flume broker
                // does); a v0 ListTransactions did not filter by age at all.
                let started_ms = if open {
                    t.transaction_start_time_ms
                } else {
                    -1
                };
                if min_age_ms >= 0
                    && (started_ms < 0
                        || crate::clock::now_ms().saturating_sub(started_ms) < min_age_ms)
                {
                    continue;
                }
                let id = t.transactional_id.0.to_string();
                out.insert(
                    id.clone(),
                    TransactionListing {
                        transactional_id: id,
                        producer_id: t.producer_id.0,
                        producer_epoch: t.producer_epoch,
                        state: t.transaction_state.to_string(),
                        started_ms,
                        timeout_ms: t.transaction_timeout_ms,
                        partitions: t
                            .topics
                            .into_iter()
                            .map(|tp| TopicPartitions {
                                topic: tp.topic.0.to_string(),
                                partitions: tp.partitions,
                            })
                            .collect(),
                    },
                );
            }
        }
        Ok(out.into_values().collect())
    }

    async fn describe_raw(
        &self,
        group: &str,
    ) -> Result<kafka_protocol::messages::describe_groups_response::DescribedGroup> {
        let conn = self.cluster.coordinator(group).await?;
        let v = conn.version(ApiKey::DescribeGroups)?;
        let req = DescribeGroupsRequest::default().with_groups(vec![group_id(group)]);
        let resp = conn.call_at(&req, v, Duration::ZERO).await?;
        let g = resp
            .groups
            .into_iter()
            .next()
            .ok_or_else(|| Error::protocol("DescribeGroups answered no group"))?;
        if g.error_code != errors::NONE {
            return Err(errors::error_with(
                g.error_code,
                format!("group {group}"),
                g.error_message.as_deref(),
            ));
        }
        Ok(g)
    }

    /// Consumer-protocol groups (KIP-848) by ConsumerGroupDescribe at each
    /// group's coordinator; with `groups` empty, those ListGroups (v5+, type
    /// "consumer") lists at every broker. A group that is not one (Kafka's
    /// GROUP_ID_NOT_FOUND) is left out; a cluster without the API has none.
    pub(crate) async fn describe_consumer_groups(
        &self,
        groups: &[&str],
    ) -> Result<Vec<ConsumerGroupInfo>> {
        let names: Vec<String> = if groups.is_empty() {
            self.consumer_group_names().await?
        } else {
            groups.iter().map(|g| (*g).to_owned()).collect()
        };
        let mut out = BTreeMap::new();
        for group in names {
            let conn = self.cluster.coordinator(&group).await?;
            let Ok(v) = conn.version(ApiKey::ConsumerGroupDescribe) else {
                continue;
            };
            let req =
                ConsumerGroupDescribeRequest::default().with_group_ids(vec![group_id(&group)]);
            let resp = conn.call_at(&req, v, Duration::ZERO).await?;
            for g in resp.groups {
                if g.error_code == errors::GROUP_ID_NOT_FOUND {
                    continue;
                }
                if g.error_code != errors::NONE {
                    return Err(errors::error_with(
                        g.error_code,
                        format!("group {group}"),
                        g.error_message.as_deref(),
                    ));
                }
                let tps =
                    |a: &consumer_group_describe_response::Assignment| -> Vec<TopicPartitions> {
                        let mut v: Vec<TopicPartitions> = a
                            .topic_partitions
                            .iter()
                            .map(|t| TopicPartitions {
                                topic: t.topic_name.0.to_string(),
                                partitions: t.partitions.clone(),
                            })
                            .collect();
                        v.sort_by(|a, b| a.topic.cmp(&b.topic));
                        v
                    };
                let mut members: Vec<ConsumerMemberInfo> = g
                    .members
                    .iter()
                    .map(|m| ConsumerMemberInfo {
                        member_id: m.member_id.to_string(),
                        instance_id: m
                            .instance_id
                            .as_ref()
                            .map(ToString::to_string)
                            .unwrap_or_default(),
                        rack_id: m
                            .rack_id
                            .as_ref()
                            .map(ToString::to_string)
                            .unwrap_or_default(),
                        member_epoch: m.member_epoch,
                        client_id: m.client_id.to_string(),
                        client_host: m.client_host.to_string(),
                        subscribed: m
                            .subscribed_topic_names
                            .iter()
                            .map(|t| t.0.to_string())
                            .collect(),
                        regex: m
                            .subscribed_topic_regex
                            .as_ref()
                            .map(ToString::to_string)
                            .unwrap_or_default(),
                        assignment: tps(&m.assignment),
                        target: tps(&m.target_assignment),
                    })
                    .collect();
                members.sort_by(|a, b| a.member_id.cmp(&b.member_id));
                let name = g.group_id.0.to_string();
                out.insert(
                    name.clone(),
                    ConsumerGroupInfo {
                        group: name,
                        state: g.group_state.to_string(),
                        epoch: g.group_epoch,
                        assignment_epoch: g.assignment_epoch,
                        assignor: g.assignor_name.to_string(),
                        members,
                    },
                );
            }
        }
        Ok(out.into_values().collect())
    }

    /// The ids of consumer-protocol groups, by ListGroups v5 (type
    /// "consumer") at every broker; none from brokers older than v5.
    async fn consumer_group_names(&self) -> Result<Vec<String>> {
        let brokers = self.cluster.refresh(Some(&[]), false).await?.brokers;
        let mut out = std::collections::BTreeSet::new();
        for b in brokers {
            let conn = self.cluster.broker(b.node_id.0).await?;
            let v = conn.version(ApiKey::ListGroups)?;
            if v < 5 {
                continue;
            }
            let req = ListGroupsRequest::default()
                .with_types_filter(vec![StrBytes::from_static_str("consumer")]);
            let resp = conn.call_at(&req, v, Duration::ZERO).await?;
            errors::check(resp.error_code, || format!("ListGroups at {}", conn.addr()))?;
            out.extend(resp.groups.into_iter().map(|g| g.group_id.0.to_string()));
        }
        Ok(out.into_iter().collect())
    }

    /// The group's state and members (with their partitions, read from the
    /// consumer protocol's assignments), and its committed offsets beside
    /// each partition's log end.
    pub(crate) async fn describe_group(&self, group: &str) -> Result<DescribeGroupResponse> {
        let g = self.describe_raw(group).await?;
        let consumer = g.protocol_type.as_str() == "consumer";
        let members = g
            .members
            .iter()
            .map(|m| GroupMemberInfo {
                member_id: m.member_id.to_string(),
                client_id: m.client_id.to_string(),
                client_host: m.client_host.to_string(),
                assignment: if consumer {
                    super::assignor::decode_assignment(&m.member_assignment)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(topic, partitions)| TopicPartitions { topic, partitions })
                        .collect()
                } else {
                    Vec::new()
                },
            })
            .collect();
        let committed = offsets::committed(&self.cluster, group, None).await?;
        let parts: Vec<(String, i32)> = committed.keys().cloned().collect();
        let marks = offsets::watermarks(&self.cluster, &parts).await?;
        let offsets = committed
            .into_iter()
            .filter(|(_, (o, _))| *o >= 0)
            .map(|((topic, partition), (committed, _))| GroupOffsetInfo {
                log_end: marks.get(&(topic.clone(), partition)).map_or(-1, |m| m.1),
                topic,
                partition,
                committed,
            })
            .collect();
        Ok(DescribeGroupResponse {
            group: g.group_id.0.to_string(),
            state: g.group_state.to_string(),
            protocol_type: g.protocol_type.to_string(),
            protocol: g.protocol_data.to_string(),
            generation: -1,
            leader_id: String::new(),
            members,
            offsets,
        })
    }
}

/// Kafka's config source as Flume's: set on the topic, a broker default,
/// or the built-in default.
fn config_source(kafka: i8) -> i8 {
    match kafka {
        1 => CONFIG_SOURCE_TOPIC,
        5 => CONFIG_SOURCE_DEFAULT,
        _ => CONFIG_SOURCE_BROKER,
    }
}

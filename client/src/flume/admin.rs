//! `Admin`'s calls over Flume's protocol (`crate::admin` is the facade):
//! one request each on one reconnecting connection, with the resource named
//! in a refusal.

use super::conn::Client;
use crate::error::{Error, Result};
use crate::types::connection::ConnectionConfig;
use flume_protocol::{
    AclEntry, AclsRequest, AlterTopicRequest, ConsumerGroupDescribeRequest, ConsumerGroupInfo,
    CreatePartitionsRequest, CreateTopicRequest, DeleteGroupRequest, DeleteOffsetsRequest,
    DeleteRecordsRequest, DeleteTopicRequest, DeletedOffset, DescribeGroupRequest,
    DescribeGroupResponse, DescribeTopicConfigRequest, ErrorCode, GroupListing, ListGroupsRequest,
    ListOffsetsPartition, ListOffsetsRequest, ListTransactionsRequest, ListedOffset,
    MetadataRequest, OffsetCommitRequest, OffsetFetchPartition, OffsetFetchRequest,
    PartitionOffset, ShareGroupDescribeRequest, ShareGroupDescribeResponse, TopicMetadata,
    TopicPartitions, TopicSettings, TransactionListing, ACLS_ADD, ACLS_LIST, ACLS_REMOVE,
};
use flume_protocol::{
    ConfigEntry, TopicConfigsRequest, TopicConfigsResponse, TOPIC_CONFIGS_ALTER,
    TOPIC_CONFIGS_CREATE, TOPIC_CONFIGS_DESCRIBE,
};

/// The admin client over Flume's protocol.
#[derive(Debug)]
pub(crate) struct FlumeAdmin {
    client: Client,
}

impl FlumeAdmin {
    /// Connects to the broker at `addr` (`host:port`).
    ///
    /// # Errors
    /// [`Error::Connect`], [`Error::Tls`].
    pub(crate) async fn connect(addr: String, config: ConnectionConfig) -> Result<Self> {
        Ok(FlumeAdmin {
            client: Client::connect(addr, config).await?,
        })
    }

    /// Closes the connection.
    pub(crate) async fn close(&self) {
        self.client.close().await;
    }

    /// `Admin::create_topic` over Flume's protocol.
    pub(crate) async fn create_topic(&self, req: CreateTopicRequest) -> Result<()> {
        let client = &self.client;
        let name = req.name.clone();
        client
            .call(&req)
            .await
            .map(|_| ())
            .map_err(|e| with_context(e, &name))
    }

    /// `Admin::topics` over Flume's protocol.
    pub(crate) async fn topics(&self, names: &[String]) -> Result<Vec<TopicMetadata>> {
        let client = &self.client;
        Ok(client
            .call(&MetadataRequest {
                topics: names.to_vec(),
            })
            .await?
            .topics)
    }

    /// `Admin::group_offsets` over Flume's protocol.
    pub(crate) async fn group_offsets(
        &self,
        group: &str,
        topics: &[String],
    ) -> Result<Vec<OffsetFetchPartition>> {
        let client = &self.client;
        let req = OffsetFetchRequest {
            group: group.to_owned(),
            topics: topics
                .iter()
                .map(|t| TopicPartitions {
                    topic: t.clone(),
                    partitions: Vec::new(),
                })
                .collect(),
        };
        Ok(client.call(&req).await?.partitions)
    }

    /// `Admin::commit` over Flume's protocol.
    pub(crate) async fn commit(&self, group: &str, offsets: Vec<PartitionOffset>) -> Result<()> {
        let client = &self.client;
        let req = OffsetCommitRequest {
            group: group.to_owned(),
            generation: -1,
            member_id: String::new(),
            offsets,
        };
        let resp = client.call(&req).await?;
        match resp.results.iter().find(|r| !r.error.is_ok()) {
            Some(r) => Err(Error::broker(
                r.error,
                format!("{}/{}", r.topic, r.partition),
            )),
            None => Ok(()),
        }
    }

    /// `Admin::delete_topic` over Flume's protocol.
    pub(crate) async fn delete_topic(&self, name: &str) -> Result<()> {
        let client = &self.client;
        client
            .call(&DeleteTopicRequest {
                name: name.to_owned(),
            })
            .await
            .map(|_| ())
            .map_err(|e| with_context(e, name))
    }

    /// `Admin::alter_topic` over Flume's protocol.
    pub(crate) async fn alter_topic(&self, req: AlterTopicRequest) -> Result<TopicSettings> {
        let client = &self.client;
        let name = req.name.clone();
        client.call(&req).await.map_err(|e| with_context(e, &name))
    }

    /// `Admin::create_topic_with_configs` over Flume's protocol.
    pub(crate) async fn create_topic_with_configs(
        &self,
        name: &str,
        partitions: i32,
        configs: &[(&str, &str)],
    ) -> Result<TopicConfigsResponse> {
        self.topic_configs(TopicConfigsRequest {
            op: TOPIC_CONFIGS_CREATE,
            name: name.to_owned(),
            partitions,
            set: entries(configs),
            ..TopicConfigsRequest::default()
        })
        .await
    }

    /// `Admin::alter_topic_configs` over Flume's protocol.
    pub(crate) async fn alter_topic_configs(
        &self,
        name: &str,
        set: &[(&str, &str)],
        delete: &[&str],
    ) -> Result<TopicConfigsResponse> {
        self.topic_configs(TopicConfigsRequest {
            op: TOPIC_CONFIGS_ALTER,
            name: name.to_owned(),
            partitions: -1,
            set: entries(set),
            delete: delete.iter().map(|d| (*d).to_owned()).collect(),
            ..TopicConfigsRequest::default()
        })
        .await
    }

    /// `Admin::describe_topic_configs` over Flume's protocol.
    pub(crate) async fn describe_topic_configs(&self, name: &str) -> Result<TopicConfigsResponse> {
        self.topic_configs(TopicConfigsRequest {
            op: TOPIC_CONFIGS_DESCRIBE,
            name: name.to_owned(),
            partitions: -1,
            ..TopicConfigsRequest::default()
        })
        .await
    }

    async fn topic_configs(&self, req: TopicConfigsRequest) -> Result<TopicConfigsResponse> {
        let client = &self.client;
        let name = req.name.clone();
        let resp = client
            .call(&req)
            .await
            .map_err(|e| with_context(e, &name))?;
        if resp.error.is_ok() {
            Ok(resp)
        } else if resp.message.is_empty() {
            Err(Error::broker(resp.error, name))
        } else {
            Err(Error::broker(
                resp.error,
                format!("{name}: {}", resp.message),
            ))
        }
    }

    /// `Admin::topic_settings` over Flume's protocol.
    pub(crate) async fn topic_settings(&self, name: &str) -> Result<TopicSettings> {
        let client = &self.client;
        client
            .call(&DescribeTopicConfigRequest {
                name: name.to_owned(),
            })
            .await
            .map_err(|e| with_context(e, name))
    }

    /// `Admin::list_offsets` over Flume's protocol.
    pub(crate) async fn list_offsets(
        &self,
        partitions: Vec<ListOffsetsPartition>,
    ) -> Result<Vec<ListedOffset>> {
        let client = &self.client;
        Ok(client
            .call(&ListOffsetsRequest { partitions })
            .await?
            .partitions)
    }

    /// `Admin::check_group_empty` over Flume's protocol.
    pub(crate) async fn check_group_empty(&self, group: &str) -> Result<()> {
        self.commit(group, Vec::new())
            .await
            .map_err(|e| with_context(e, group))
    }

    /// `Admin::delete_group` over Flume's protocol.
    pub(crate) async fn delete_group(&self, group: &str) -> Result<i32> {
        let client = &self.client;
        client
            .call(&DeleteGroupRequest {
                group: group.to_owned(),
            })
            .await
            .map(|r| r.offsets_dropped)
            .map_err(|e| with_context(e, group))
    }

    /// `Admin::delete_records` over Flume's protocol.
    pub(crate) async fn delete_records(
        &self,
        topic: &str,
        partition: i32,
        before: Option<u64>,
    ) -> Result<u64> {
        let client = &self.client;
        client
            .call(&DeleteRecordsRequest {
                topic: topic.to_owned(),
                partition,
                before: before.map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX)),
            })
            .await
            .map(|r| u64::try_from(r.log_start).unwrap_or(0))
            .map_err(|e| with_context(e, topic))
    }

    /// `Admin::create_partitions` over Flume's protocol.
    pub(crate) async fn create_partitions(
        &self,
        topic: &str,
        partitions: i32,
        validate_only: bool,
    ) -> Result<i32> {
        let client = &self.client;
        client
            .call(&CreatePartitionsRequest {
                topic: topic.to_owned(),
                partitions,
                validate_only: i8::from(validate_only),
            })
            .await
            .map(|r| r.before)
            .map_err(|e| with_context(e, topic))
    }

    /// `Admin::delete_offsets` over Flume's protocol.
    pub(crate) async fn delete_offsets(
        &self,
        group: &str,
        topic: &str,
        partitions: &[i32],
    ) -> Result<Vec<DeletedOffset>> {
        let client = &self.client;
        client
            .call(&DeleteOffsetsRequest {
                group: group.to_owned(),
                topic: topic.to_owned(),
                partitions: partitions.to_vec(),
            })
            .await
            .map(|r| r.partitions)
            .map_err(|e| with_context(e, group))
    }

    /// `Admin::list_groups` over Flume's protocol.
    pub(crate) async fn list_groups(&self, states: &[&str]) -> Result<Vec<GroupListing>> {
        let client = &self.client;
        client
            .call(&ListGroupsRequest {
                states_filter: states.iter().map(|s| (*s).to_owned()).collect(),
            })
            .await
            .map(|r| r.groups)
    }

    /// `Admin::describe_group` over Flume's protocol.
    pub(crate) async fn describe_group(&self, group: &str) -> Result<DescribeGroupResponse> {
        let client = &self.client;
        client
            .call(&DescribeGroupRequest {
                group: group.to_owned(),
            })
            .await
            .map_err(|e| with_context(e, group))
    }

    /// `Admin::describe_share_group` over Flume's protocol.
    pub(crate) async fn describe_share_group(
        &self,
        group: &str,
    ) -> Result<ShareGroupDescribeResponse> {
        self.client
            .call(&ShareGroupDescribeRequest {
                group: group.to_owned(),
            })
            .await
            .map_err(|e| with_context(e, group))
    }

    /// `Admin::describe_consumer_groups` over Flume's protocol.
    pub(crate) async fn describe_consumer_groups(
        &self,
        groups: &[&str],
    ) -> Result<Vec<ConsumerGroupInfo>> {
        let client = &self.client;
        match client
            .call(&ConsumerGroupDescribeRequest {
                groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            })
            .await
        {
            Ok(r) => Ok(r.groups),
            // A broker from before consumer-protocol groups has none.
            Err(e) if e.code() == Some(ErrorCode::UnsupportedApi) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// `Admin::list_transactions` over Flume's protocol.
    pub(crate) async fn list_transactions(
        &self,
        states: &[&str],
        min_age_ms: i64,
    ) -> Result<Vec<TransactionListing>> {
        let client = &self.client;
        client
            .call(&ListTransactionsRequest {
                states_filter: states.iter().map(|s| (*s).to_owned()).collect(),
                min_age_ms,
            })
            .await
            .map(|r| r.transactions)
    }

    /// `Admin::add_acl` over Flume's protocol.
    pub(crate) async fn add_acl(&self, acl: AclEntry) -> Result<bool> {
        self.acls_call(ACLS_ADD, acl)
            .await
            .map(|(changed, _)| changed)
    }

    /// `Admin::remove_acl` over Flume's protocol.
    pub(crate) async fn remove_acl(&self, acl: AclEntry) -> Result<bool> {
        self.acls_call(ACLS_REMOVE, acl)
            .await
            .map(|(changed, _)| changed)
    }

    /// `Admin::list_acls` over Flume's protocol.
    pub(crate) async fn list_acls(&self, principal: Option<&str>) -> Result<Vec<AclEntry>> {
        let acl = AclEntry {
            principal: principal.unwrap_or_default().to_owned(),
            ..AclEntry::default()
        };
        self.acls_call(ACLS_LIST, acl).await.map(|(_, acls)| acls)
    }

    async fn acls_call(&self, op: i8, acl: AclEntry) -> Result<(bool, Vec<AclEntry>)> {
        let client = &self.client;
        let what = if acl.name.is_empty() {
            "the ACLs".to_owned()
        } else {
            format!("{} {}", acl.resource_type, acl.name)
        };
        let resp = client
            .call(&AclsRequest { op, acl })
            .await
            .map_err(|e| with_context(e, &what))?;
        Ok((resp.changed != 0, resp.acls))
    }
}

fn with_context(e: Error, ctx: &str) -> Error {
    match e {
        Error::Broker {
            code: code @ ErrorCode::AuthorizationFailed,
            context: Some(c),
        } => match c.split_once(": ") {
            Some((api, why)) => Error::broker(code, format!("{api} of {ctx}: {why}")),
            None => Error::broker(code, format!("{c} ({ctx})")),
        },
        Error::Broker {
            code,
            context: None,
        } => Error::broker(code, ctx),
        other => other,
    }
}

fn entries(configs: &[(&str, &str)]) -> Vec<ConfigEntry> {
    configs
        .iter()
        .map(|(name, value)| ConfigEntry {
            name: (*name).to_owned(),
            value: (*value).to_owned(),
        })
        .collect()
}

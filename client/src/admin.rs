//! Administrative calls: topics (create, describe, alter, delete), offsets
//! by timestamp, committed offsets and lag, groups.

use std::time::Duration;

use crate::conn::Client;
use crate::error::{Error, Result};
use crate::kafka::admin::KafkaAdmin;
use crate::kafka::cluster::Cluster;
use crate::types::connection::ConnectionConfig;
use crate::types::endpoint::Endpoint;
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

/// Administrative calls: create, describe, alter and delete topics, look up
/// offsets by timestamp, read and set a group's committed offsets, delete a
/// group.
///
/// ```
/// # flume_rt::block_on(async {
/// # let dir = tempfile::tempdir().unwrap();
/// # let mut cfg = flume_broker::BrokerConfig::new(dir.path());
/// # cfg.listen = "127.0.0.1:0".into();
/// # let broker = flume_broker::Broker::start(cfg).await.unwrap();
/// # let addr = broker.local_addr().to_string();
/// use flume_client::{Admin, CreateTopicRequest};
///
/// let admin = Admin::connect(&addr).await?;
/// admin
///     .create_topic(CreateTopicRequest {
///         name: "orders".into(),
///         partitions: 2,
///         ..CreateTopicRequest::default()
///     })
///     .await?;
/// let topics = admin.topics(&["orders".to_string()]).await?;
/// assert_eq!(topics[0].partitions.len(), 2);
/// # broker.shutdown().await;
/// # Ok::<(), flume_client::Error>(())
/// # }).unwrap();
/// ```
///
/// With a `kafka://` address the same calls go to a Kafka cluster (see
/// the README's "Kafka clusters" for what differs); the calls that are
/// Flume's own (`alter_topic`, `topic_settings`, `alter_topic_configs`, the
/// ACLs) fail there with [`Error::InvalidArgument`].
#[derive(Debug)]
pub struct Admin {
    backend: Backend,
}

#[derive(Debug)]
enum Backend {
    Flume(Box<Client>),
    Kafka(KafkaAdmin),
}

impl Admin {
    /// Connects.
    ///
    /// # Errors
    /// [`Error::Connect`].
    pub async fn connect(addr: &str) -> Result<Self> {
        Self::connect_with(addr, ConnectionConfig::default()).await
    }

    /// Connects with `config` (timeouts, TLS).
    ///
    /// # Errors
    /// [`Error::Connect`], or [`Error::Tls`](crate::Error::Tls).
    pub async fn connect_with(addr: &str, config: ConnectionConfig) -> Result<Self> {
        let backend = match crate::types::endpoint::endpoint(addr)? {
            Endpoint::Flume(addr) => Backend::Flume(Box::new(Client::connect(addr, config).await?)),
            Endpoint::Kafka(brokers) => {
                Backend::Kafka(KafkaAdmin::new(Cluster::connect(brokers, config).await?))
            }
        };
        Ok(Admin { backend })
    }

    /// Closes the connections.
    pub async fn close(&self) {
        match &self.backend {
            Backend::Flume(c) => c.close().await,
            Backend::Kafka(k) => k.close().await,
        }
    }

    /// The Flume client, or the error for a call that has no Kafka counterpart.
    fn flume(&self, what: &str) -> Result<&Client> {
        match &self.backend {
            Backend::Flume(c) => Ok(c),
            Backend::Kafka(_) => Err(Error::InvalidArgument(format!(
                "Admin::{what} is Flume's own and has no Kafka counterpart here (a kafka:// address)"
            ))),
        }
    }

    /// Creates a topic (other settings at the broker's defaults unless set in `req`).
    ///
    /// # Errors
    /// TOPIC_ALREADY_EXISTS, INVALID_NAME, ...
    pub async fn create_topic(&self, req: CreateTopicRequest) -> Result<()> {
        let client = match &self.backend {
            Backend::Flume(c) => c,
            Backend::Kafka(k) => return k.create_topic(req).await,
        };
        let name = req.name.clone();
        client
            .call(&req)
            .await
            .map(|_| ())
            .map_err(|e| with_context(e, &name))
    }

    /// Every topic (or those named) with its partitions' start and end offsets.
    ///
    /// # Errors
    /// Connection failures.
    pub async fn topics(&self, names: &[String]) -> Result<Vec<TopicMetadata>> {
        let client = match &self.backend {
            Backend::Flume(c) => c,
            Backend::Kafka(k) => return k.topics(names).await,
        };
        Ok(client
            .call(&MetadataRequest {
                topics: names.to_vec(),
            })
            .await?
            .topics)
    }

    /// Committed offset, log start and log end per partition of `topic` for `group`.
    ///
    /// # Errors
    /// Connection failures.
    pub async fn group_offsets(
        &self,
        group: &str,
        topics: &[String],
    ) -> Result<Vec<OffsetFetchPartition>> {
        let client = match &self.backend {
            Backend::Flume(c) => c,
            Backend::Kafka(k) => return k.group_offsets(group, topics).await,
        };
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

    /// Commits offsets outside group membership (allowed while the group has no members).
    ///
    /// # Errors
    /// REBALANCE_IN_PROGRESS when the group has members.
    pub async fn commit(&self, group: &str, offsets: Vec<PartitionOffset>) -> Result<()> {
        let client = match &self.backend {
            Backend::Flume(c) => c,
            Backend::Kafka(k) => return k.commit(group, offsets).await,
        };
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
}

impl Admin {
    /// Deletes a topic: its records, its files and every group's committed
    /// offsets on it. Requests on it get UNKNOWN_TOPIC afterwards; a topic of
    /// the same name can be created again.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, INVALID_NAME, STORAGE_ERROR, connection failures.
    pub async fn delete_topic(&self, name: &str) -> Result<()> {
        let client = match &self.backend {
            Backend::Flume(c) => c,
            Backend::Kafka(k) => return k.delete_topic(name).await,
        };
        client
            .call(&DeleteTopicRequest {
                name: name.to_owned(),
            })
            .await
            .map(|_| ())
            .map_err(|e| with_context(e, name))
    }

    /// Changes a topic's retention or segment size (fields left at -1 stay
    /// as they are; a retention of 0 removes the limit), durably. Returns
    /// the topic's settings after the change.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, INVALID_REQUEST (a value out of range), STORAGE_ERROR.
    pub async fn alter_topic(&self, req: AlterTopicRequest) -> Result<TopicSettings> {
        let client = self.flume("alter_topic")?;
        let name = req.name.clone();
        client.call(&req).await.map_err(|e| with_context(e, &name))
    }

    /// Creates a topic with configs by Kafka's names (`cleanup.policy`,
    /// `retention.ms`, ...; `partitions` -1 takes the broker's default).
    /// Returns every config of the new topic with its source.
    ///
    /// # Errors
    /// INVALID_CONFIG naming the config and value, TOPIC_ALREADY_EXISTS,
    /// INVALID_NAME, UNSUPPORTED_API from a broker older than TOPIC_CONFIGS.
    pub async fn create_topic_with_configs(
        &self,
        name: &str,
        partitions: i32,
        configs: &[(&str, &str)],
    ) -> Result<TopicConfigsResponse> {
        if let Backend::Kafka(k) = &self.backend {
            return k.create_topic_with_configs(name, partitions, configs).await;
        }
        self.topic_configs(TopicConfigsRequest {
            op: TOPIC_CONFIGS_CREATE,
            name: name.to_owned(),
            partitions,
            set: entries(configs),
            ..TopicConfigsRequest::default()
        })
        .await
    }

    /// Sets (`set`) and takes back to the broker's default (`delete`) a
    /// topic's configs by Kafka's names, all or nothing and durably; the
    /// partitions take retention, cleanup policy and segment size at once.
    /// Returns every config after the change.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, INVALID_CONFIG naming the config and value.
    pub async fn alter_topic_configs(
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

    /// Every config of a topic by Kafka's name, with its value and source
    /// ([`crate::CONFIG_SOURCE_TOPIC`], ...), sorted by name.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, connection failures.
    pub async fn describe_topic_configs(&self, name: &str) -> Result<TopicConfigsResponse> {
        if let Backend::Kafka(k) = &self.backend {
            return k.describe_topic_configs(name).await;
        }
        self.topic_configs(TopicConfigsRequest {
            op: TOPIC_CONFIGS_DESCRIBE,
            name: name.to_owned(),
            partitions: -1,
            ..TopicConfigsRequest::default()
        })
        .await
    }

    async fn topic_configs(&self, req: TopicConfigsRequest) -> Result<TopicConfigsResponse> {
        let client = self.flume(match req.op {
            TOPIC_CONFIGS_ALTER => "alter_topic_configs",
            _ => "topic_configs",
        })?;
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

    /// A topic's settings.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, connection failures.
    pub async fn topic_settings(&self, name: &str) -> Result<TopicSettings> {
        let client = self.flume("topic_settings")?;
        client
            .call(&DescribeTopicConfigRequest {
                name: name.to_owned(),
            })
            .await
            .map_err(|e| with_context(e, name))
    }

    /// Looks up offsets: per partition, the first offset whose record
    /// timestamp is at least `timestamp` (ms since the epoch; the log end when
    /// no record is that recent, with timestamp -1), or with
    /// [`crate::LATEST_TIMESTAMP`] / [`crate::EARLIEST_TIMESTAMP`]
    /// the log end or start. Per-partition errors are in each answer's `error`.
    ///
    /// # Errors
    /// Connection failures.
    pub async fn list_offsets(
        &self,
        partitions: Vec<ListOffsetsPartition>,
    ) -> Result<Vec<ListedOffset>> {
        let client = match &self.backend {
            Backend::Flume(c) => c,
            Backend::Kafka(k) => return k.list_offsets(partitions).await,
        };
        Ok(client
            .call(&ListOffsetsRequest { partitions })
            .await?
            .partitions)
    }

    /// Ok when the group has no members (its offsets may be reset then).
    ///
    /// # Errors
    /// REBALANCE_IN_PROGRESS when the group has members; connection failures.
    pub async fn check_group_empty(&self, group: &str) -> Result<()> {
        if let Backend::Kafka(k) = &self.backend {
            return k.check_group_empty(group).await;
        }
        self.commit(group, Vec::new())
            .await
            .map_err(|e| with_context(e, group))
    }

    /// Deletes a group with no members: drops its committed offsets on every
    /// topic. Returns how many (topic, partition) offsets went.
    ///
    /// # Errors
    /// GROUP_NOT_EMPTY (members are still in it), UNKNOWN_GROUP (no members
    /// and no committed offsets), INVALID_NAME, STORAGE_ERROR.
    pub async fn delete_group(&self, group: &str) -> Result<i32> {
        let client = match &self.backend {
            Backend::Flume(c) => c,
            Backend::Kafka(k) => return k.delete_group(group).await,
        };
        client
            .call(&DeleteGroupRequest {
                group: group.to_owned(),
            })
            .await
            .map(|r| r.offsets_dropped)
            .map_err(|e| with_context(e, group))
    }

    /// Deletes the records of a partition below `before` (`None`: every
    /// record): its log start moves there, durably, as Kafka's
    /// DeleteRecords. Returns the log start now (a `before` below it leaves
    /// it where it is).
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, UNKNOWN_PARTITION, OFFSET_OUT_OF_RANGE (past the log
    /// end), NOT_AUTHORIZED, STORAGE_ERROR.
    pub async fn delete_records(
        &self,
        topic: &str,
        partition: i32,
        before: Option<u64>,
    ) -> Result<u64> {
        let client = match &self.backend {
            Backend::Flume(c) => c,
            Backend::Kafka(k) => return k.delete_records(topic, partition, before).await,
        };
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

    /// Grows a topic to `partitions` in all (never fewer); with
    /// `validate_only` the broker only checks. Returns the count before.
    /// Groups subscribed to the topic rebalance onto the new partitions;
    /// producers route keys over the new count from the next metadata.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, INVALID_REQUEST (not more than the topic has, or over
    /// 10,000), LIMIT_REACHED (the broker's `max_partitions`),
    /// AUTHORIZATION_FAILED (ALTER on the topic), UNSUPPORTED_API (a broker
    /// that predates this request), STORAGE_ERROR.
    pub async fn create_partitions(
        &self,
        topic: &str,
        partitions: i32,
        validate_only: bool,
    ) -> Result<i32> {
        let client = match &self.backend {
            Backend::Flume(c) => c,
            Backend::Kafka(k) => {
                return k.create_partitions(topic, partitions, validate_only).await
            }
        };
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

    /// Deletes a group's committed offsets on some partitions of a topic
    /// (every partition of it when `partitions` is empty), as Kafka's
    /// OffsetDelete. One outcome per partition: NONE (gone, or nothing was
    /// committed), UNKNOWN_PARTITION, or GROUP_NOT_EMPTY (a member of the
    /// group subscribes to the topic: its offsets stay).
    ///
    /// # Errors
    /// UNKNOWN_GROUP, UNKNOWN_TOPIC, INVALID_NAME, AUTHORIZATION_FAILED
    /// (DELETE on the group and READ on the topic), UNSUPPORTED_API,
    /// STORAGE_ERROR.
    pub async fn delete_offsets(
        &self,
        group: &str,
        topic: &str,
        partitions: &[i32],
    ) -> Result<Vec<DeletedOffset>> {
        let client = match &self.backend {
            Backend::Flume(c) => c,
            Backend::Kafka(k) => return k.delete_offsets(group, topic, partitions).await,
        };
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

    /// Every group the broker knows (with members, or with committed
    /// offsets only), sorted by id; with `states` non-empty, only those in
    /// one of them (Kafka's names: `Empty`, `PreparingRebalance`,
    /// `CompletingRebalance`, `Stable`). Kafka clients' groups are listed too.
    ///
    /// # Errors
    /// Connection failures.
    pub async fn list_groups(&self, states: &[&str]) -> Result<Vec<GroupListing>> {
        let client = match &self.backend {
            Backend::Flume(c) => c,
            Backend::Kafka(k) => return k.list_groups(states).await,
        };
        client
            .call(&ListGroupsRequest {
                states_filter: states.iter().map(|s| (*s).to_owned()).collect(),
            })
            .await
            .map(|r| r.groups)
    }

    /// A group's state, generation, members with their partitions, and
    /// committed offsets beside each partition's log end (lag is
    /// `log_end - committed`).
    ///
    /// # Errors
    /// UNKNOWN_GROUP (neither members nor committed offsets); connection failures.
    pub async fn describe_group(&self, group: &str) -> Result<DescribeGroupResponse> {
        let client = match &self.backend {
            Backend::Flume(c) => c,
            Backend::Kafka(k) => return k.describe_group(group).await,
        };
        client
            .call(&DescribeGroupRequest {
                group: group.to_owned(),
            })
            .await
            .map_err(|e| with_context(e, group))
    }

    /// A share group (a queue): its members with their subscriptions and
    /// assignments, and per share-partition its start offset, the log end
    /// and the counts of records in flight, acquired, available,
    /// redelivered and archived. Flume's own (SHARE_GROUP_DESCRIBE).
    ///
    /// # Errors
    /// UNKNOWN_GROUP (no members and no kept state); a `kafka://` address;
    /// connection failures.
    pub async fn describe_share_group(&self, group: &str) -> Result<ShareGroupDescribeResponse> {
        self.flume("describe_share_group")?
            .call(&ShareGroupDescribeRequest {
                group: group.to_owned(),
            })
            .await
            .map_err(|e| with_context(e, group))
    }

    /// Consumer-protocol groups (Kafka clients with `group.protocol=consumer`,
    /// KIP-848), sorted by id: state, group epoch, assignor, and each
    /// member's epoch, subscription, assignment and target assignment. With
    /// `groups` empty, every such group with members (on Kafka, those
    /// ListGroups v5 lists with type "consumer"). A named group that is not
    /// one (a classic group, or none) is left out, so `groups list` can tell
    /// the types apart. Flume's CONSUMER_GROUP_DESCRIBE, or Kafka's
    /// ConsumerGroupDescribe; a broker or cluster that serves neither has
    /// none to describe (an empty answer).
    ///
    /// # Errors
    /// INVALID_REQUEST for more than 10,000 names; connection failures.
    pub async fn describe_consumer_groups(
        &self,
        groups: &[&str],
    ) -> Result<Vec<ConsumerGroupInfo>> {
        let client = match &self.backend {
            Backend::Flume(c) => c,
            Backend::Kafka(k) => return k.describe_consumer_groups(groups).await,
        };
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

    /// The transactional ids the broker coordinates (every broker of a
    /// Kafka cluster), sorted by id, each with its producer id and epoch, the
    /// state of its current (or last) transaction, when an open one began
    /// and the partitions it wrote to: what `kafka-transactions.sh list` and
    /// `describe` show. `states` (Kafka's names: `Empty`, `Ongoing`,
    /// `PrepareCommit`, `PrepareAbort`, `CompleteCommit`, `CompleteAbort`,
    /// `Dead`) keeps those in one of them; `min_age` keeps transactions open
    /// at least that long.
    ///
    /// # Errors
    /// INVALID_REQUEST for an unknown state name, NOT_AUTHORIZED without
    /// DESCRIBE on the cluster, connection failures.
    pub async fn list_transactions(
        &self,
        states: &[&str],
        min_age: Option<Duration>,
    ) -> Result<Vec<TransactionListing>> {
        let min_age_ms = min_age.map_or(-1, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let client = match &self.backend {
            Backend::Flume(c) => c,
            Backend::Kafka(k) => return k.list_transactions(states, min_age_ms).await,
        };
        client
            .call(&ListTransactionsRequest {
                states_filter: states.iter().map(|s| (*s).to_owned()).collect(),
                min_age_ms,
            })
            .await
            .map(|r| r.transactions)
    }
}

/// ACLs (admins, or with the authorizer on whoever may ALTER the cluster).
impl Admin {
    /// Adds an ACL; false when it was there already. In force on every open
    /// connection when this returns.
    ///
    /// # Errors
    /// AUTHORIZATION_FAILED for a principal who may not manage ACLs,
    /// SECURITY_DISABLED for one who is not an admin when the broker runs
    /// with `--authorizer off`, INVALID_REQUEST for an ACL that does not parse, LIMIT_REACHED at the
    /// broker's limit (10,000).
    pub async fn add_acl(&self, acl: AclEntry) -> Result<bool> {
        self.acls_call(ACLS_ADD, acl)
            .await
            .map(|(changed, _)| changed)
    }

    /// Removes an ACL; false when there was no such ACL.
    ///
    /// # Errors
    /// As [`Admin::add_acl`].
    pub async fn remove_acl(&self, acl: AclEntry) -> Result<bool> {
        self.acls_call(ACLS_REMOVE, acl)
            .await
            .map(|(changed, _)| changed)
    }

    /// The ACLs (of `principal`, `User:NAME`, when given), sorted.
    ///
    /// # Errors
    /// As [`Admin::add_acl`].
    pub async fn list_acls(&self, principal: Option<&str>) -> Result<Vec<AclEntry>> {
        let acl = AclEntry {
            principal: principal.unwrap_or_default().to_owned(),
            ..AclEntry::default()
        };
        self.acls_call(ACLS_LIST, acl).await.map(|(_, acls)| acls)
    }

    async fn acls_call(&self, op: i8, acl: AclEntry) -> Result<(bool, Vec<AclEntry>)> {
        let client = self.flume("acls")?;
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

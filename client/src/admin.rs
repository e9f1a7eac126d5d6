//! [`Admin`], the facade: administrative calls: topics (create, describe, alter, delete), offsets
//! by timestamp, committed offsets and lag, groups.

//!
//! One API over two transports chosen by the address
//! (`crate::types::endpoint`): Flume's protocol (`crate::flume::admin`) or a
//! Kafka cluster (`crate::kafka::admin`). Flume's own calls (`alter_topic`,
//! `topic_settings`, `alter_topic_configs`, `describe_share_group`, the
//! ACLs) fail over Kafka with [`Error::InvalidArgument`].

use std::time::Duration;

use crate::error::{Error, Result};
use crate::flume::admin::FlumeAdmin;
use crate::kafka::admin::KafkaAdmin;
use crate::types::connection::ConnectionConfig;
use crate::types::endpoint::{endpoint, Endpoint};
use flume_protocol::{
    AclEntry, AlterTopicRequest, ConsumerGroupInfo, CreateTopicRequest, DeletedOffset,
    DescribeGroupResponse, GroupListing, ListOffsetsPartition, ListedOffset, OffsetFetchPartition,
    PartitionOffset, ShareGroupDescribeResponse, TopicConfigsResponse, TopicMetadata,
    TopicSettings, TransactionListing,
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
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Flume(Box<FlumeAdmin>),
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
        let inner = match endpoint(addr)? {
            Endpoint::Flume(addr) => {
                Inner::Flume(Box::new(FlumeAdmin::connect(addr, config).await?))
            }
            Endpoint::Kafka(brokers) => Inner::Kafka(KafkaAdmin::connect(brokers, config).await?),
        };
        Ok(Admin { inner })
    }

    /// Closes the connections.
    pub async fn close(&self) {
        match &self.inner {
            Inner::Flume(f) => f.close().await,
            Inner::Kafka(k) => k.close().await,
        }
    }

    /// The Flume transport, or the error for a call that has no Kafka counterpart.
    fn flume_only(&self, what: &str) -> Result<&FlumeAdmin> {
        match &self.inner {
            Inner::Flume(f) => Ok(f),
            Inner::Kafka(_) => Err(Error::InvalidArgument(format!(
                "Admin::{what} is Flume's own and has no Kafka counterpart here (a kafka:// address)"
            ))),
        }
    }

    /// Creates a topic (other settings at the broker's defaults unless set in `req`).
    ///
    /// # Errors
    /// TOPIC_ALREADY_EXISTS, INVALID_NAME, ...
    pub async fn create_topic(&self, req: CreateTopicRequest) -> Result<()> {
        match &self.inner {
            Inner::Flume(f) => f.create_topic(req).await,
            Inner::Kafka(k) => k.create_topic(req).await,
        }
    }

    /// Every topic (or those named) with its partitions' start and end offsets.
    ///
    /// # Errors
    /// Connection failures.
    pub async fn topics(&self, names: &[String]) -> Result<Vec<TopicMetadata>> {
        match &self.inner {
            Inner::Flume(f) => f.topics(names).await,
            Inner::Kafka(k) => k.topics(names).await,
        }
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
        match &self.inner {
            Inner::Flume(f) => f.group_offsets(group, topics).await,
            Inner::Kafka(k) => k.group_offsets(group, topics).await,
        }
    }

    /// Commits offsets outside group membership (allowed while the group has no members).
    ///
    /// # Errors
    /// REBALANCE_IN_PROGRESS when the group has members.
    pub async fn commit(&self, group: &str, offsets: Vec<PartitionOffset>) -> Result<()> {
        match &self.inner {
            Inner::Flume(f) => f.commit(group, offsets).await,
            Inner::Kafka(k) => k.commit(group, offsets).await,
        }
    }

    /// Deletes a topic: its records, its files and every group's committed
    /// offsets on it. Requests on it get UNKNOWN_TOPIC afterwards; a topic of
    /// the same name can be created again.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, INVALID_NAME, STORAGE_ERROR, connection failures.
    pub async fn delete_topic(&self, name: &str) -> Result<()> {
        match &self.inner {
            Inner::Flume(f) => f.delete_topic(name).await,
            Inner::Kafka(k) => k.delete_topic(name).await,
        }
    }

    /// Changes a topic's retention or segment size (fields left at -1 stay
    /// as they are; a retention of 0 removes the limit), durably. Returns
    /// the topic's settings after the change.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, INVALID_REQUEST (a value out of range), STORAGE_ERROR.
    pub async fn alter_topic(&self, req: AlterTopicRequest) -> Result<TopicSettings> {
        self.flume_only("alter_topic")?.alter_topic(req).await
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
        match &self.inner {
            Inner::Flume(f) => f.create_topic_with_configs(name, partitions, configs).await,
            Inner::Kafka(k) => k.create_topic_with_configs(name, partitions, configs).await,
        }
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
        self.flume_only("alter_topic_configs")?
            .alter_topic_configs(name, set, delete)
            .await
    }

    /// Every config of a topic by Kafka's name, with its value and source
    /// ([`crate::CONFIG_SOURCE_TOPIC`], ...), sorted by name.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, connection failures.
    pub async fn describe_topic_configs(&self, name: &str) -> Result<TopicConfigsResponse> {
        match &self.inner {
            Inner::Flume(f) => f.describe_topic_configs(name).await,
            Inner::Kafka(k) => k.describe_topic_configs(name).await,
        }
    }

    /// A topic's settings.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC, connection failures.
    pub async fn topic_settings(&self, name: &str) -> Result<TopicSettings> {
        self.flume_only("topic_settings")?
            .topic_settings(name)
            .await
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
        match &self.inner {
            Inner::Flume(f) => f.list_offsets(partitions).await,
            Inner::Kafka(k) => k.list_offsets(partitions).await,
        }
    }

    /// Ok when the group has no members (its offsets may be reset then).
    ///
    /// # Errors
    /// REBALANCE_IN_PROGRESS when the group has members; connection failures.
    pub async fn check_group_empty(&self, group: &str) -> Result<()> {
        match &self.inner {
            Inner::Flume(f) => f.check_group_empty(group).await,
            Inner::Kafka(k) => k.check_group_empty(group).await,
        }
    }

    /// Deletes a group with no members: drops its committed offsets on every
    /// topic. Returns how many (topic, partition) offsets went.
    ///
    /// # Errors
    /// GROUP_NOT_EMPTY (members are still in it), UNKNOWN_GROUP (no members
    /// and no committed offsets), INVALID_NAME, STORAGE_ERROR.
    pub async fn delete_group(&self, group: &str) -> Result<i32> {
        match &self.inner {
            Inner::Flume(f) => f.delete_group(group).await,
            Inner::Kafka(k) => k.delete_group(group).await,
        }
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
        match &self.inner {
            Inner::Flume(f) => f.delete_records(topic, partition, before).await,
            Inner::Kafka(k) => k.delete_records(topic, partition, before).await,
        }
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
        match &self.inner {
            Inner::Flume(f) => f.create_partitions(topic, partitions, validate_only).await,
            Inner::Kafka(k) => k.create_partitions(topic, partitions, validate_only).await,
        }
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
        match &self.inner {
            Inner::Flume(f) => f.delete_offsets(group, topic, partitions).await,
            Inner::Kafka(k) => k.delete_offsets(group, topic, partitions).await,
        }
    }

    /// Every group the broker knows (with members, or with committed
    /// offsets only), sorted by id; with `states` non-empty, only those in
    /// one of them (Kafka's names: `Empty`, `PreparingRebalance`,
    /// `CompletingRebalance`, `Stable`). Kafka clients' groups are listed too.
    ///
    /// # Errors
    /// Connection failures.
    pub async fn list_groups(&self, states: &[&str]) -> Result<Vec<GroupListing>> {
        match &self.inner {
            Inner::Flume(f) => f.list_groups(states).await,
            Inner::Kafka(k) => k.list_groups(states).await,
        }
    }

    /// A group's state, generation, members with their partitions, and
    /// committed offsets beside each partition's log end (lag is
    /// `log_end - committed`).
    ///
    /// # Errors
    /// UNKNOWN_GROUP (neither members nor committed offsets); connection failures.
    pub async fn describe_group(&self, group: &str) -> Result<DescribeGroupResponse> {
        match &self.inner {
            Inner::Flume(f) => f.describe_group(group).await,
            Inner::Kafka(k) => k.describe_group(group).await,
        }
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
        self.flume_only("describe_share_group")?
            .describe_share_group(group)
            .await
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
        match &self.inner {
            Inner::Flume(f) => f.describe_consumer_groups(groups).await,
            Inner::Kafka(k) => k.describe_consumer_groups(groups).await,
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
        match &self.inner {
            Inner::Flume(f) => f.list_transactions(states, min_age_ms).await,
            Inner::Kafka(k) => k.list_transactions(states, min_age_ms).await,
        }
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
        self.flume_only("acls")?.add_acl(acl).await
    }

    /// Removes an ACL; false when there was no such ACL.
    ///
    /// # Errors
    /// As [`Admin::add_acl`].
    pub async fn remove_acl(&self, acl: AclEntry) -> Result<bool> {
        self.flume_only("acls")?.remove_acl(acl).await
    }

    /// The ACLs (of `principal`, `User:NAME`, when given), sorted.
    ///
    /// # Errors
    /// As [`Admin::add_acl`].
    pub async fn list_acls(&self, principal: Option<&str>) -> Result<Vec<AclEntry>> {
        self.flume_only("acls")?.list_acls(principal).await
    }
}

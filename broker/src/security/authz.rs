//! Authorization as one rule per domain action, the same for every front
//! end (the Flume protocol, the Kafka listener, HTTP): a front end names what
//! a request does ("produce to these topics", "act in this group") and
//! [`Subject`] answers with the ACLs ([`super::acl`]). Which Kafka and Flume
//! APIs need which action is in `docs/security.md`.
//!
//! With the authorizer off every rule allows everything (admins may do
//! everything with it on); a denial is counted by protocol, operation and
//! resource type, except for the `lists_*` filters, which only leave out of
//! a listing what may not be described, and [`Subject::authorized_operations`].
//!
//! The primitives (`may`, `sees`, `may_topics`, `may_any`) are private to
//! this file: a front end names the action, never an operation on a
//! resource. Only the ACL administration APIs name [`Operation`]s and
//! resources, to translate ACL bindings.

use super::acl::{Authorizer, Operation, Protocol, Resource, ResourceType};
use super::Principal;

/// Who asks, through which protocol, and the ACLs that decide.
#[derive(Clone, Copy)]
pub struct Subject<'a> {
    acl: &'a Authorizer,
    principal: &'a Principal,
    protocol: Protocol,
}

impl std::fmt::Debug for Subject<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subject")
            .field("principal", self.principal)
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

impl<'a> Subject<'a> {
    /// `principal` asking through `protocol`, decided by `acl`.
    pub fn new(acl: &'a Authorizer, principal: &'a Principal, protocol: Protocol) -> Self {
        Subject {
            acl,
            principal,
            protocol,
        }
    }

    /// Who asks.
    pub fn principal(&self) -> &'a Principal {
        self.principal
    }

    /// Whether ACLs are enforced at all (off: every rule allows everything).
    pub fn enforced(&self) -> bool {
        self.acl.enabled()
    }

    /// May it do `op` on `res`? The primitive every rule is made of; a
    /// denial is counted. Private: front ends ask a named rule.
    #[inline]
    fn may(&self, op: Operation, res: Resource<'_>) -> bool {
        self.acl.check(self.protocol, self.principal, op, res)
    }

    /// May it do `op` on every topic named?
    fn may_topics<'t>(&self, op: Operation, mut topics: impl Iterator<Item = &'t str>) -> bool {
        !self.acl.enabled() || topics.all(|t| self.may(op, Resource::topic(t)))
    }

    /// May it do `op` on the cluster or on some resource of type `kind`
    /// (Kafka 3's rule for InitProducerId: WRITE on any topic)?
    fn may_any(&self, op: Operation, kind: ResourceType) -> bool {
        self.acl.check_any(self.protocol, self.principal, op, kind)
    }

    /// Whether `res` is listed for it (DESCRIBE), without counting a denial:
    /// what a listing (every topic's metadata, the groups) leaves out.
    fn sees(&self, op: Operation, res: Resource<'_>) -> bool {
        self.acl.permits(self.principal, op, res)
    }

    /// Produce to `topic`: WRITE on it, and, when the produce would create it
    /// (`creates`: it does not exist and the broker auto-creates), CREATE.
    pub fn produce(&self, topic: &str, creates: bool) -> bool {
        self.may(Operation::Write, Resource::topic(topic)) && (!creates || self.create_topic(topic))
    }

    /// Read records of every topic named (FETCH, ListOffsets).
    pub fn read_topics<'t>(&self, topics: impl Iterator<Item = &'t str>) -> bool {
        self.may_topics(Operation::Read, topics)
    }

    /// Act in `group` on these topics (join, fetch as a member, commit, read
    /// its offsets): READ on the group and on every topic named.
    pub fn group_member<'t>(&self, group: &str, topics: impl Iterator<Item = &'t str>) -> bool {
        self.may(Operation::Read, Resource::group(group)) && self.read_topics(topics)
    }

    /// Be a member of `group` without naming topics (heartbeat, leave).
    pub fn in_group(&self, group: &str) -> bool {
        self.may(Operation::Read, Resource::group(group))
    }

    /// Create `topic`: CREATE on the cluster (not counted as a denial when
    /// absent) or on the topic.
    pub fn create_topic(&self, topic: &str) -> bool {
        self.sees(Operation::Create, Resource::cluster())
            || self.may(Operation::Create, Resource::topic(topic))
    }

    /// Describe `topic` (its partitions, leaders and id, as Metadata and
    /// DescribeTopicPartitions answer for a topic named): DESCRIBE on it.
    pub fn describe_topic(&self, topic: &str) -> bool {
        self.may(Operation::Describe, Resource::topic(topic))
    }

    /// Whether a listing of every topic shows `topic`: DESCRIBE on it, a
    /// denial not counted (the topic is left out, as if absent).
    pub fn lists_topic(&self, topic: &str) -> bool {
        self.sees(Operation::Describe, Resource::topic(topic))
    }

    /// Delete `topic` (its records and committed offsets): DELETE on it.
    pub fn delete_topic(&self, topic: &str) -> bool {
        self.may(Operation::Delete, Resource::topic(topic))
    }

    /// Place replicas: elect leaders, reassign partitions to brokers, move a
    /// replica to another log directory (Kafka's ElectLeaders,
    /// AlterPartitionReassignments, AlterReplicaLogDirs): ALTER on the
    /// cluster.
    pub fn place_replicas(&self) -> bool {
        self.may(Operation::Alter, Resource::cluster())
    }

    /// See where replicas are going (Kafka's ListPartitionReassignments):
    /// DESCRIBE on the cluster.
    pub fn describe_placement(&self) -> bool {
        self.may(Operation::Describe, Resource::cluster())
    }

    // ------------------------------------------------------------ topics

    /// Read records of `topic` (Kafka's Fetch, a commit of its offsets, a
    /// share group's reads and offsets, the topic side of deleting offsets):
    /// READ on it.
    pub fn read_topic(&self, topic: &str) -> bool {
        self.may(Operation::Read, Resource::topic(topic))
    }

    /// Change `topic`'s settings (Flume's ALTER_TOPIC): ALTER on it.
    pub fn alter_topic(&self, topic: &str) -> bool {
        self.may(Operation::Alter, Resource::topic(topic))
    }

    /// Add partitions to `topic`: ALTER on it.
    pub fn create_partitions(&self, topic: &str) -> bool {
        self.may(Operation::Alter, Resource::topic(topic))
    }

    /// Read `topic`'s configs (DescribeConfigs, DESCRIBE_TOPIC_CONFIG):
    /// DESCRIBE on it.
    pub fn describe_topic_configs(&self, topic: &str) -> bool {
        self.may(Operation::Describe, Resource::topic(topic))
    }

    /// Change `topic`'s configs (AlterConfigs, IncrementalAlterConfigs,
    /// TOPIC_CONFIGS): ALTER on it.
    pub fn alter_topic_configs(&self, topic: &str) -> bool {
        self.may(Operation::Alter, Resource::topic(topic))
    }

    /// Delete records of `topic` (move its log start): DELETE on it.
    pub fn delete_records(&self, topic: &str) -> bool {
        self.may(Operation::Delete, Resource::topic(topic))
    }

    /// Look up `topic`'s offsets by position or time (Kafka's ListOffsets;
    /// Flume's LIST_OFFSETS asks [`Subject::read_topics`]): DESCRIBE on it.
    pub fn list_offsets(&self, topic: &str) -> bool {
        self.may(Operation::Describe, Resource::topic(topic))
    }

    /// See the producers writing to `topic` (DescribeProducers): READ on it.
    pub fn describe_producers(&self, topic: &str) -> bool {
        self.may(Operation::Read, Resource::topic(topic))
    }

    // ------------------------------------------------------------ groups

    /// Describe `group` (its members, state and assignments): DESCRIBE on it.
    pub fn describe_group(&self, group: &str) -> bool {
        self.may(Operation::Describe, Resource::group(group))
    }

    /// Whether a listing of the groups shows `group`: DESCRIBE on it, a
    /// denial not counted (the group is left out, as if absent).
    pub fn lists_group(&self, group: &str) -> bool {
        self.sees(Operation::Describe, Resource::group(group))
    }

    /// Delete `group` (with its committed offsets): DELETE on it.
    pub fn delete_group(&self, group: &str) -> bool {
        self.may(Operation::Delete, Resource::group(group))
    }

    /// Read `group`'s committed offsets from outside it (Kafka's
    /// OffsetFetch): DESCRIBE on the group.
    pub fn describe_group_offsets(&self, group: &str) -> bool {
        self.may(Operation::Describe, Resource::group(group))
    }

    /// Delete some of `group`'s committed offsets (OffsetDelete,
    /// DELETE_OFFSETS, DeleteShareGroupOffsets): DELETE on the group (and
    /// [`Subject::read_topic`] on each topic).
    pub fn delete_group_offsets(&self, group: &str) -> bool {
        self.may(Operation::Delete, Resource::group(group))
    }

    /// Set where `group` starts reading (AlterShareGroupOffsets): ALTER on
    /// the group (and [`Subject::read_topic`] on each topic).
    pub fn alter_group_offsets(&self, group: &str) -> bool {
        self.may(Operation::Alter, Resource::group(group))
    }

    /// Read `group`'s configs (DescribeConfigs of a group): DESCRIBE on it.
    pub fn describe_group_configs(&self, group: &str) -> bool {
        self.may(Operation::Describe, Resource::group(group))
    }

    /// Change `group`'s configs (IncrementalAlterConfigs of a group): ALTER
    /// on it.
    pub fn alter_group_configs(&self, group: &str) -> bool {
        self.may(Operation::Alter, Resource::group(group))
    }

    // ------------------------------------------------------------ transactions

    /// Get a producer id for idempotent or transactional writes
    /// (InitProducerId): WRITE on the cluster or on any topic (Kafka 3's
    /// rule).
    pub fn idempotent_write(&self) -> bool {
        self.may_any(Operation::Write, ResourceType::Topic)
    }

    /// Write to `topic` in a transaction (AddPartitionsToTxn): WRITE on it.
    pub fn write_transaction(&self, topic: &str) -> bool {
        self.may(Operation::Write, Resource::topic(topic))
    }

    /// Commit or abort a transaction (EndTxn): WRITE on the cluster or on
    /// any topic, as [`Subject::idempotent_write`].
    pub fn end_transaction(&self) -> bool {
        self.may_any(Operation::Write, ResourceType::Topic)
    }

    /// List and describe the transactions (ListTransactions,
    /// DescribeTransactions, LIST_TRANSACTIONS): DESCRIBE on the cluster.
    pub fn describe_transactions(&self) -> bool {
        self.may(Operation::Describe, Resource::cluster())
    }

    // ------------------------------------------------------------ the cluster

    /// See the cluster: its brokers (DescribeCluster) and the HTTP pages of
    /// its topics, groups and numbers: DESCRIBE on the cluster.
    pub fn describe_cluster(&self) -> bool {
        self.may(Operation::Describe, Resource::cluster())
    }

    /// Read the broker's configs (DescribeConfigs of a broker): DESCRIBE on
    /// the cluster.
    pub fn describe_broker_configs(&self) -> bool {
        self.may(Operation::Describe, Resource::cluster())
    }

    /// Change the broker's configs (AlterConfigs of a broker): ALTER on the
    /// cluster.
    pub fn alter_broker_configs(&self) -> bool {
        self.may(Operation::Alter, Resource::cluster())
    }

    /// See the log directories and the partitions' sizes in them
    /// (DescribeLogDirs): DESCRIBE on the cluster.
    pub fn describe_log_dirs(&self) -> bool {
        self.may(Operation::Describe, Resource::cluster())
    }

    /// The operations it may do on `res` (of Read, Write, Create, Delete,
    /// Alter and Describe; each as a filter would ask, a denial not
    /// counted): what Kafka's `authorized_operations` fields report, which
    /// the Kafka front end maps to Kafka's operation codes.
    pub fn authorized_operations(&self, res: Resource<'_>) -> Vec<Operation> {
        super::acl::OPERATIONS
            .into_iter()
            .filter(|op| *op != Operation::All && self.sees(*op, res))
            .collect()
    }

    // ------------------------------------------------------------ administration

    /// List the users of SCRAM logins (DescribeUserScramCredentials): see
    /// [`Subject::manage_users`] with DESCRIBE.
    pub fn describe_users(&self) -> bool {
        self.manage_users(Operation::Describe)
    }

    /// Add, change or remove users of SCRAM logins
    /// (AlterUserScramCredentials): see [`Subject::manage_users`] with ALTER.
    pub fn alter_users(&self) -> bool {
        self.manage_users(Operation::Alter)
    }

    /// Manage the ACLs (list them: DESCRIBE; change them: ALTER): admins
    /// (with the authorizer off too: they may stage ACLs before turning it
    /// on), and with the authorizer on whoever the ACLs allow `op` on the
    /// cluster.
    ///
    /// # Errors
    /// [`AclsRefused::Disabled`] with the authorizer off (Kafka's
    /// SECURITY_DISABLED: no permission is missing, the ACLs are not in
    /// use), [`AclsRefused::Denied`] when the ACLs do not allow it.
    pub fn manage_acls(&self, op: Operation) -> Result<(), AclsRefused> {
        if self.acl.is_admin(self.principal) {
            Ok(())
        } else if !self.acl.enabled() {
            Err(AclsRefused::Disabled)
        } else if self
            .acl
            .check(self.protocol, self.principal, op, Resource::cluster())
        {
            Ok(())
        } else {
            Err(AclsRefused::Denied)
        }
    }

    /// Manage the users of SCRAM logins (list them: DESCRIBE; add, change or
    /// remove them: ALTER on the cluster, as Kafka's
    /// Describe/AlterUserScramCredentials): admins, and with the authorizer
    /// on whoever the ACLs allow `op` on the cluster. With it off only
    /// admins, as Flume's USERS (Kafka would let anyone).
    fn manage_users(&self, op: Operation) -> bool {
        self.acl.is_admin(self.principal)
            || (self.acl.enabled()
                && self
                    .acl
                    .check(self.protocol, self.principal, op, Resource::cluster()))
    }
}

/// Why a principal may not list or change the ACLs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AclsRefused {
    /// The authorizer is off: ACLs are not enforced, and only admins may
    /// list or stage them.
    Disabled,
    /// The ACLs do not allow this principal `op` on the cluster.
    Denied,
}

impl AclsRefused {
    /// What the refusal says to the client.
    pub fn message(self) -> &'static str {
        match self {
            AclsRefused::Disabled => {
                "ACLs are not enforced: the broker runs with --authorizer off (only an admin, --admin-user, may list or stage ACLs)"
            }
            AclsRefused::Denied => "not authorized: no ACL allows this principal to manage the ACLs (ALTER on the cluster to change them, DESCRIBE to list them)",
        }
    }
}

//! Authorization as one rule per domain action, the same for every front
//! end (the Flume protocol, the Kafka listener, HTTP): a front end names what
//! a request does ("produce to these topics", "act in this group") and
//! [`Subject`] answers with the ACLs ([`super::acl`]). Which Kafka and Flume
//! APIs need which action is in `docs/security.md`.
//!
//! With the authorizer off every rule allows everything (admins may do
//! everything with it on); a denial is counted by protocol, operation and
//! resource type, except for the `sees_*` filters, which only leave out of a
//! listing what may not be described.

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
    /// denial is counted.
    #[inline]
    pub fn may(&self, op: Operation, res: Resource<'_>) -> bool {
        self.acl.check(self.protocol, self.principal, op, res)
    }

    /// May it do `op` on every topic named?
    pub fn may_topics<'t>(&self, op: Operation, mut topics: impl Iterator<Item = &'t str>) -> bool {
        !self.acl.enabled() || topics.all(|t| self.may(op, Resource::topic(t)))
    }

    /// May it do `op` on the cluster or on some resource of type `kind`
    /// (Kafka 3's rule for InitProducerId: WRITE on any topic)?
    pub fn may_any(&self, op: Operation, kind: ResourceType) -> bool {
        self.acl.check_any(self.protocol, self.principal, op, kind)
    }

    /// Whether `res` is listed for it (DESCRIBE), without counting a denial:
    /// what a listing (every topic's metadata, the groups) leaves out.
    pub fn sees(&self, op: Operation, res: Resource<'_>) -> bool {
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
    pub fn manage_users(&self, op: Operation) -> bool {
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

//! `flume-cli acls`.

use clap::{Args, Subcommand};

use super::client::BrokerAddr;

#[derive(Debug, Subcommand)]
pub enum AclsCommand {
    /// Add an ACL: `acls add --principal User:alice --operation read --topic orders`.
    Add {
        #[command(flatten)]
        acl: AclArgs,
        #[command(flatten)]
        broker: BrokerAddr,
    },
    /// Remove an ACL (the same flags as it was added with).
    Remove {
        #[command(flatten)]
        acl: AclArgs,
        #[command(flatten)]
        broker: BrokerAddr,
    },
    /// List the ACLs (of one principal with --principal).
    List {
        /// Only this principal's (User:NAME, User:* or User:ANONYMOUS).
        #[arg(long, value_name = "PRINCIPAL")]
        principal: Option<String>,
        #[command(flatten)]
        broker: BrokerAddr,
    },
}

/// One ACL on the command line.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("resource").required(true).args(["topic", "group", "cluster"])))]
pub struct AclArgs {
    /// Whom it is for: User:NAME (a SCRAM user, or a certificate subject such
    /// as User:CN=alice,O=Example), User:* (anyone authenticated) or
    /// User:ANONYMOUS.
    #[arg(long, value_name = "PRINCIPAL")]
    pub(crate) principal: String,
    /// read, write, create, delete, describe, alter or all.
    #[arg(long, value_name = "OP", value_parser = ["read", "write", "create", "delete", "describe", "alter", "all"])]
    pub(crate) operation: String,
    /// Deny instead of allow (a deny wins over every allow).
    #[arg(long)]
    pub(crate) deny: bool,
    /// A topic (`*`: every topic).
    #[arg(long, value_name = "NAME")]
    pub(crate) topic: Option<String>,
    /// A consumer group (`*`: every group).
    #[arg(long, value_name = "NAME")]
    pub(crate) group: Option<String>,
    /// The cluster (creating topics, managing users and ACLs, the HTTP API).
    #[arg(long)]
    pub(crate) cluster: bool,
    /// The topic or group name is a prefix: every name that starts with it.
    #[arg(long)]
    pub(crate) prefixed: bool,
}

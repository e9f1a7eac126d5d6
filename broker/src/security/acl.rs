//! Authorisation: ACLs per principal and resource, as Kafka names them, and
//! the one function every front end asks ([`Authorizer::check`]).
//!
//! An ACL is `(principal, permission, resource type, pattern, name,
//! operation)`:
//!
//! - principal: `User:alice` (a SCRAM user, or a certificate subject written
//!   as RFC 4514 does: `User:CN=alice,O=Example`, as Kafka's default SSL
//!   principal builder names it), `User:*` (anyone authenticated: a user or
//!   a certificate) or `User:ANONYMOUS` (no login, no certificate);
//! - permission: `allow` or `deny` (deny wins, as in Kafka);
//! - resource type: `topic`, `group`, `cluster` (whose one name is
//!   [`CLUSTER_NAME`]);
//! - pattern: `literal` (the name exactly; `*` is any name) or `prefixed`
//!   (every name that starts with it);
//! - operation: `read`, `write`, `create`, `delete`, `describe`, `alter` or
//!   `all`. As in Kafka, an allowed read, write, delete or alter implies
//!   describe.
//!
//! With the authorizer on (`--authorizer on`), a request is allowed only if
//! some ACL allows it and none denies it; admins (`--admin-user`) are
//! superusers. Off (the default), [`Authorizer::check`] is one branch.
//!
//! The ACLs are kept in `<data>/__acls`, rewritten atomically on every
//! change before it takes effect (see [`super::users`]); every connection
//! asks the same index, so a change applies to open connections at once.
//! File format (text, one ACL a line; the principal is last and is the rest
//! of the line, since a certificate subject may hold spaces):
//!
//! ```text
//! flume-acls 1
//! <allow|deny> <resource type> <literal|prefixed> <name> <operation> <principal>
//! ```
//!
//! The lookup does not scan the ACLs: the index is by principal, then
//! resource type, then the exact name (one hash lookup), `*`, and each prefix
//! of the name that some prefixed ACL has (one lookup per prefix length in
//! use). No allocation per check.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use flume_protocol::ErrorCode;

use super::Principal;
use crate::error::BrokerError;
use crate::storage::write_atomic;

/// The file's name in the data directory.
pub const ACLS_FILE: &str = "__acls";
const HEADER: &str = "flume-acls 1";
/// Most ACLs the broker holds.
pub const MAX_ACLS: usize = 10_000;
/// The name of the one cluster resource (Kafka's).
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// Longest principal name (after `User:`), in bytes.
pub const MAX_PRINCIPAL_BYTES: usize = 1024;
/// Longest resource name or prefix, in bytes.
pub const MAX_RESOURCE_BYTES: usize = 255;

/// What a request does to a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    /// Every operation.
    All,
    /// Fetch, list offsets; join a group, commit to it.
    Read,
    /// Produce.
    Write,
    /// Create a topic.
    Create,
    /// Delete a topic or a group.
    Delete,
    /// Change a topic's settings; manage users and ACLs (on the cluster).
    Alter,
    /// See that it exists and how it is.
    Describe,
}

/// Every operation, in the order of [`Operation::index`].
pub const OPERATIONS: [Operation; 7] = [
    Operation::All,
    Operation::Read,
    Operation::Write,
    Operation::Create,
    Operation::Delete,
    Operation::Alter,
    Operation::Describe,
];

impl Operation {
    /// Its name (`read`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Operation::All => "all",
            Operation::Read => "read",
            Operation::Write => "write",
            Operation::Create => "create",
            Operation::Delete => "delete",
            Operation::Alter => "alter",
            Operation::Describe => "describe",
        }
    }
    /// A dense index, 0..7.
    pub fn index(self) -> usize {
        self as usize
    }
    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// The kind of thing an ACL is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceType {
    /// A topic.
    Topic,
    /// A consumer group.
    Group,
    /// The broker as a whole ([`CLUSTER_NAME`]).
    Cluster,
}

/// Every resource type, in the order of [`ResourceType::index`].
pub const RESOURCE_TYPES: [ResourceType; 3] = [
    ResourceType::Topic,
    ResourceType::Group,
    ResourceType::Cluster,
];

impl ResourceType {
    /// Its name (`topic`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ResourceType::Topic => "topic",
            ResourceType::Group => "group",
            ResourceType::Cluster => "cluster",
        }
    }
    /// A dense index, 0..3.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// How an ACL's name matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PatternType {
    /// The name exactly (`*`: any name).
    Literal,
    /// Every name that starts with it.
    Prefixed,
}

impl PatternType {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            PatternType::Literal => "literal",
            PatternType::Prefixed => "prefixed",
        }
    }
}

/// Allow or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Permission {
    /// Allows the operation.
    Allow,
    /// Denies it, whatever else allows it.
    Deny,
}

impl Permission {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Permission::Allow => "allow",
            Permission::Deny => "deny",
        }
    }
}

macro_rules! parse_by_name {
    ($t:ty, $what:literal, $all:expr) => {
        impl FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                let lower = s.to_ascii_lowercase();
                if let Some(v) = $all.into_iter().find(|v| lower == v.name()) {
                    return Ok(v);
                }
                let names: Vec<&str> = $all.iter().map(|v| v.name()).collect();
                Err(format!(
                    concat!("unknown ", $what, " {:?} (one of: {})"),
                    s,
                    names.join(", ")
                ))
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

parse_by_name!(Operation, "operation", OPERATIONS);
parse_by_name!(
    ResourceType,
    "resource type",
    [
        ResourceType::Topic,
        ResourceType::Group,
        ResourceType::Cluster
    ]
);
parse_by_name!(
    PatternType,
    "pattern type",
    [PatternType::Literal, PatternType::Prefixed]
);
parse_by_name!(
    Permission,
    "permission",
    [Permission::Allow, Permission::Deny]
);

/// Whom an ACL is for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AclPrincipal {
    /// `User:ANONYMOUS`: a connection with no login and no certificate.
    Anonymous,
    /// `User:*`: anyone authenticated (a user or a certificate).
    AnyAuthenticated,
    /// `User:NAME`: the user NAME, or the certificate whose subject is NAME.
    Name(String),
}

impl FromStr for AclPrincipal {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let Some(name) = s.strip_prefix("User:") else {
            return Err(format!(
                "a principal is User:NAME, User:* or User:ANONYMOUS, not {s:?}"
            ));
        };
        match name {
            "*" => Ok(AclPrincipal::AnyAuthenticated),
            "ANONYMOUS" => Ok(AclPrincipal::Anonymous),
            "" => Err("a principal's name is empty".into()),
            n if n.len() > MAX_PRINCIPAL_BYTES => Err(format!(
                "a principal's name is at most {MAX_PRINCIPAL_BYTES} bytes, not {}",
                n.len()
            )),
            n if n.chars().any(char::is_control) => {
                Err("a principal's name has no control characters".into())
            }
            n => Ok(AclPrincipal::Name(n.to_owned())),
        }
    }
}

impl fmt::Display for AclPrincipal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AclPrincipal::Anonymous => f.write_str("User:ANONYMOUS"),
            AclPrincipal::AnyAuthenticated => f.write_str("User:*"),
            AclPrincipal::Name(n) => write!(f, "User:{n}"),
        }
    }
}

impl From<&Principal> for AclPrincipal {
    fn from(p: &Principal) -> Self {
        match p {
            Principal::User(n) | Principal::Certificate(n) => AclPrincipal::Name(n.clone()),
            _ => AclPrincipal::Anonymous,
        }
    }
}

/// One ACL.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Acl {
    /// Whom it is for.
    pub principal: AclPrincipal,
    /// Allow or deny.
    pub permission: Permission,
    /// Topic, group or cluster.
    pub resource_type: ResourceType,
    /// Literal or prefixed.
    pub pattern: PatternType,
    /// The name, the prefix, or `*`.
    pub name: String,
    /// What it allows or denies.
    pub operation: Operation,
}

impl Acl {
    /// Checks the ACL makes sense: a name of valid characters (or `*`,
    /// literal only), the cluster's name for the cluster.
    ///
    /// # Errors
    /// What is wrong.
    pub fn validate(&self) -> Result<(), String> {
        let n = &self.name;
        if self.resource_type == ResourceType::Cluster {
            if n != CLUSTER_NAME || self.pattern != PatternType::Literal {
                return Err(format!(
                    "the cluster resource is the literal name {CLUSTER_NAME:?}"
                ));
            }
            return Ok(());
        }
        if n == "*" {
            if self.pattern == PatternType::Prefixed {
                return Err("`*` is a literal name (any name), not a prefix".into());
            }
            return Ok(());
        }
        if n.is_empty() || n.len() > MAX_RESOURCE_BYTES {
            return Err(format!(
                "a resource name is 1 to {MAX_RESOURCE_BYTES} bytes, not {}",
                n.len()
            ));
        }
        if !n
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
        {
            return Err(format!(
                "a resource name has only [A-Za-z0-9._-], not {n:?}"
            ));
        }
        Ok(())
    }

    fn render(&self) -> String {
        format!(
            "{} {} {} {} {} {}",
            self.permission,
            self.resource_type,
            self.pattern,
            self.name,
            self.operation,
            self.principal
        )
    }

    fn parse(line: &str) -> Result<Acl, String> {
        let f: Vec<&str> = line.splitn(6, ' ').collect();
        let [permission, resource_type, pattern, name, operation, principal] = f.as_slice() else {
            return Err("expected 6 fields".into());
        };
        let acl = Acl {
            principal: principal.parse()?,
            permission: permission.parse()?,
            resource_type: resource_type.parse()?,
            pattern: pattern.parse()?,
            name: (*name).to_owned(),
            operation: operation.parse()?,
        };
        acl.validate()?;
        Ok(acl)
    }
}

/// What a request is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resource<'a> {
    /// Topic, group or cluster.
    pub kind: ResourceType,
    /// Its name ([`CLUSTER_NAME`] for the cluster).
    pub name: &'a str,
}

impl<'a> Resource<'a> {
    /// The topic `name`.
    pub fn topic(name: &'a str) -> Self {
        Resource {
            kind: ResourceType::Topic,
            name,
        }
    }
    /// The group `name`.
    pub fn group(name: &'a str) -> Self {
        Resource {
            kind: ResourceType::Group,
            name,
        }
    }
    /// The cluster.
    pub fn cluster() -> Resource<'static> {
        Resource {
            kind: ResourceType::Cluster,
            name: CLUSTER_NAME,
        }
    }
}

/// The front end a request came through (a label of the denial counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// The Flume protocol.
    Flume,
    /// The Kafka protocol.
    Kafka,
    /// The HTTP API.
    Http,
}

/// Every protocol, in the order of `Protocol::index`.
pub const PROTOCOLS: [Protocol; 3] = [Protocol::Flume, Protocol::Kafka, Protocol::Http];

impl Protocol {
    /// Its label.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Flume => "flume",
            Protocol::Kafka => "kafka",
            Protocol::Http => "http",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// Why an ACL change was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AclError {
    /// The ACL does not make sense.
    #[error("invalid ACL: {0}")]
    Invalid(String),
    /// The broker holds [`MAX_ACLS`] already.
    #[error("the broker holds {limit} ACLs, its limit")]
    Limit {
        /// The limit.
        limit: usize,
    },
    /// The file could not be written (nothing changed).
    #[error(transparent)]
    Io(#[from] BrokerError),
}

impl AclError {
    /// The Flume error code a client sees.
    pub fn code(&self) -> ErrorCode {
        match self {
            AclError::Invalid(_) => ErrorCode::InvalidRequest,
            AclError::Limit { .. } => ErrorCode::LimitReached,
            AclError::Io(e) => e.code(),
        }
    }
}

/// Allowed and denied operations (bits of [`Operation::bit`]).
#[derive(Debug, Clone, Copy, Default)]
struct Perms {
    allow: u8,
    deny: u8,
}

const ALL: u8 = 1 << (Operation::All as u8);
const IMPLY_DESCRIBE: u8 = (1 << (Operation::Read as u8))
    | (1 << (Operation::Write as u8))
    | (1 << (Operation::Delete as u8))
    | (1 << (Operation::Alter as u8));

impl Perms {
    fn add(&mut self, permission: Permission, op: Operation) {
        match permission {
            Permission::Allow => self.allow |= op.bit(),
            Permission::Deny => self.deny |= op.bit(),
        }
    }
    fn merge(&mut self, other: Perms) {
        self.allow |= other.allow;
        self.deny |= other.deny;
    }
    fn permits(self, op: Operation) -> bool {
        let want = op.bit() | ALL;
        if self.deny & want != 0 {
            return false;
        }
        self.allow & want != 0 || (op == Operation::Describe && self.allow & IMPLY_DESCRIBE != 0)
    }
}

/// One principal's ACLs on one resource type.
#[derive(Debug, Default)]
struct Rules {
    any: Perms,
    literal: HashMap<String, Perms>,
    prefixed: HashMap<String, Perms>,
    /// The lengths of the prefixes in `prefixed` (few: one lookup each).
    prefix_lens: Vec<usize>,
}

impl Rules {
    fn add(&mut self, acl: &Acl) {
        let perms = match (acl.pattern, acl.name.as_str()) {
            (PatternType::Literal, "*") => &mut self.any,
            (PatternType::Literal, n) => self.literal.entry(n.to_owned()).or_default(),
            (PatternType::Prefixed, n) => {
                if !self.prefix_lens.contains(&n.len()) {
                    self.prefix_lens.push(n.len());
                }
                self.prefixed.entry(n.to_owned()).or_default()
            }
        };
        perms.add(acl.permission, acl.operation);
    }

    fn collect(&self, name: &str, out: &mut Perms) {
        out.merge(self.any);
        if let Some(p) = self.literal.get(name) {
            out.merge(*p);
        }
        for &len in &self.prefix_lens {
            if let Some(p) = name.get(..len).and_then(|prefix| self.prefixed.get(prefix)) {
                out.merge(*p);
            }
        }
    }
}

type ByType = [Rules; 3];

/// The ACLs arranged for lookups.
#[derive(Debug, Default)]
struct Index {
    anonymous: ByType,
    any_authenticated: ByType,
    names: HashMap<String, ByType>,
}

impl Index {
    fn build(acls: &BTreeSet<Acl>) -> Index {
        let mut index = Index::default();
        for acl in acls {
            let by_type = match &acl.principal {
                AclPrincipal::Anonymous => &mut index.anonymous,
                AclPrincipal::AnyAuthenticated => &mut index.any_authenticated,
                AclPrincipal::Name(n) => index.names.entry(n.clone()).or_default(),
            };
            by_type[acl.resource_type.index()].add(acl);
        }
        index
    }

    fn permits(&self, principal: &Principal, op: Operation, res: Resource<'_>) -> bool {
        let t = res.kind.index();
        let mut perms = Perms::default();
        match principal {
            Principal::User(n) | Principal::Certificate(n) => {
                if let Some(by_type) = self.names.get(n.as_str()) {
                    by_type[t].collect(res.name, &mut perms);
                }
                self.any_authenticated[t].collect(res.name, &mut perms);
            }
            _ => self.anonymous[t].collect(res.name, &mut perms),
        }
        perms.permits(op)
    }

    /// Does some ACL allow `op` on some resource of type `t`?
    fn allows_any(&self, principal: &Principal, op: Operation, t: ResourceType) -> bool {
        let want = op.bit() | ALL;
        let some = |rules: &Rules| {
            rules.any.allow & want != 0
                || rules.literal.values().any(|p| p.allow & want != 0)
                || rules.prefixed.values().any(|p| p.allow & want != 0)
        };
        match principal {
            Principal::User(n) | Principal::Certificate(n) => {
                self.names
                    .get(n.as_str())
                    .is_some_and(|by_type| some(&by_type[t.index()]))
                    || some(&self.any_authenticated[t.index()])
            }
            _ => some(&self.anonymous[t.index()]),
        }
    }
}

/// The broker's ACLs and the check every front end calls.
#[derive(Debug)]
pub struct Authorizer {
    enabled: bool,
    admins: HashSet<String>,
    path: PathBuf,
    /// The ACLs (changes are made under this lock, then the index is rebuilt).
    acls: Mutex<BTreeSet<Acl>>,
    index: RwLock<Index>,
    /// Denials by protocol, resource type and operation.
    denied: [[[AtomicU64; 7]; 3]; 3],
}

fn bad(path: &Path, line: usize, why: &str) -> BrokerError {
    BrokerError::Config(format!("{} line {line}: {why}", path.display()))
}

impl Authorizer {
    /// Loads `<data_dir>/__acls` (none yet: no ACLs). `enabled` is
    /// `--authorizer on`; `admins` are superusers. Blocking.
    ///
    /// # Errors
    /// The file cannot be read or does not parse (the line that is wrong).
    pub fn open(data_dir: &Path, enabled: bool, admins: &[String]) -> Result<Self, BrokerError> {
        let path = data_dir.join(ACLS_FILE);
        let text = crate::storage::read_optional(&path)?;
        let acls = Self::parse(&path, &text)?;
        Ok(Authorizer {
            enabled,
            admins: admins.iter().cloned().collect(),
            path,
            index: RwLock::new(Index::build(&acls)),
            acls: Mutex::new(acls),
            denied: Default::default(),
        })
    }

    fn parse(path: &Path, text: &str) -> Result<BTreeSet<Acl>, BrokerError> {
        let mut acls = BTreeSet::new();
        let mut lines = text.lines().enumerate();
        match lines.next() {
            None => return Ok(acls),
            Some((_, HEADER)) => {}
            Some(_) => return Err(bad(path, 1, &format!("expected {HEADER:?}"))),
        }
        for (i, line) in lines {
            if line.is_empty() {
                continue;
            }
            let acl = Acl::parse(line).map_err(|why| bad(path, i + 1, &why))?;
            if acls.len() >= MAX_ACLS {
                return Err(bad(path, i + 1, &format!("more than {MAX_ACLS} ACLs")));
            }
            acls.insert(acl);
        }
        Ok(acls)
    }

    fn render(acls: &BTreeSet<Acl>) -> String {
        let mut out = format!("{HEADER}\n");
        for acl in acls {
            out.push_str(&acl.render());
            out.push('\n');
        }
        out
    }

    /// Whether ACLs are enforced (`--authorizer on`).
    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether `principal` is an admin (a superuser, allowed everything).
    pub fn is_admin(&self, principal: &Principal) -> bool {
        matches!(principal, Principal::User(n) if self.admins.contains(n.as_str()))
    }

    /// May `principal` do `op` on `res`? Always yes with the authorizer off
    /// (one branch) and for admins; otherwise some ACL must allow it and none
    /// deny it. A denial is counted (by `protocol`) and logged at debug.
    #[inline]
    pub fn check(
        &self,
        protocol: Protocol,
        principal: &Principal,
        op: Operation,
        res: Resource<'_>,
    ) -> bool {
        !self.enabled || self.decide(protocol, principal, op, res)
    }

    /// [`Authorizer::check`] without counting a denial: for filters
    /// (METADATA leaves out what may not be described).
    #[inline]
    pub fn permits(&self, principal: &Principal, op: Operation, res: Resource<'_>) -> bool {
        !self.enabled || self.is_admin(principal) || self.read_index().permits(principal, op, res)
    }

    /// May `principal` do `op` on the cluster, or on some resource of type
    /// `kind` (Kafka 3's check for InitProducerId: WRITE on any topic)? A
    /// denial is counted as one on the cluster.
    pub fn check_any(
        &self,
        protocol: Protocol,
        principal: &Principal,
        op: Operation,
        kind: ResourceType,
    ) -> bool {
        if !self.enabled
            || self.is_admin(principal)
            || self.read_index().allows_any(principal, op, kind)
        {
            return true;
        }
        self.decide(protocol, principal, op, Resource::cluster())
    }

    fn decide(
        &self,
        protocol: Protocol,
        principal: &Principal,
        op: Operation,
        res: Resource<'_>,
    ) -> bool {
        if self.is_admin(principal) || self.read_index().permits(principal, op, res) {
            return true;
        }
        self.denied[protocol.index()][res.kind.index()][op.index()].fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%principal, operation = op.name(), resource_type = res.kind.name(), resource = res.name, protocol = protocol.name(), "authorization denied");
        false
    }

    fn read_index(&self) -> std::sync::RwLockReadGuard<'_, Index> {
        self.index
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock_acls(&self) -> std::sync::MutexGuard<'_, BTreeSet<Acl>> {
        self.acls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Denials so far, as (protocol, operation, resource type, count) for
    /// every non-zero count.
    pub fn denied_counts(&self) -> Vec<(&'static str, &'static str, &'static str, u64)> {
        let mut v = Vec::new();
        for p in PROTOCOLS {
            for t in RESOURCE_TYPES {
                for op in OPERATIONS {
                    let n = self.denied[p.index()][t.index()][op.index()].load(Ordering::Relaxed);
                    if n > 0 {
                        v.push((p.name(), op.name(), t.name(), n));
                    }
                }
            }
        }
        v
    }

    fn change(
        &self,
        f: impl FnOnce(&mut BTreeSet<Acl>) -> Result<bool, AclError>,
    ) -> Result<bool, AclError> {
        let mut acls = self.lock_acls();
        let mut next = acls.clone();
        if !f(&mut next)? {
            return Ok(false);
        }
        write_atomic(&self.path, Self::render(&next).as_bytes()).map_err(BrokerError::from)?;
        let index = Index::build(&next);
        *self
            .index
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = index;
        *acls = next;
        Ok(true)
    }

    /// Adds `acl` (false: it was there). Durable and in force when it
    /// returns. Blocking file I/O: call off the executor.
    ///
    /// # Errors
    /// An invalid ACL, [`MAX_ACLS`] reached, or the file cannot be written
    /// (then nothing changed).
    pub fn add(&self, acl: Acl) -> Result<bool, AclError> {
        acl.validate().map_err(AclError::Invalid)?;
        self.change(|next| {
            if next.contains(&acl) {
                return Ok(false);
            }
            if next.len() >= MAX_ACLS {
                return Err(AclError::Limit { limit: MAX_ACLS });
            }
            Ok(next.insert(acl))
        })
    }

    /// Removes `acl` (false: there was no such ACL). Durable and in force
    /// when it returns. Blocking.
    ///
    /// # Errors
    /// The file cannot be written (then nothing changed).
    pub fn remove(&self, acl: &Acl) -> Result<bool, AclError> {
        self.change(|next| Ok(next.remove(acl)))
    }

    /// The ACLs, sorted; only `principal`'s when given.
    pub fn list(&self, principal: Option<&AclPrincipal>) -> Vec<Acl> {
        self.lock_acls()
            .iter()
            .filter(|a| principal.is_none_or(|p| &a.principal == p))
            .cloned()
            .collect()
    }
}

/// An ACL from its wire form.
///
/// # Errors
/// What does not parse.
pub fn from_entry(e: &flume_protocol::AclEntry) -> Result<Acl, String> {
    let acl = Acl {
        principal: e.principal.parse()?,
        permission: e.permission.parse()?,
        resource_type: e.resource_type.parse()?,
        pattern: e.pattern.parse()?,
        name: e.name.clone(),
        operation: e.operation.parse()?,
    };
    acl.validate()?;
    Ok(acl)
}

/// An ACL in its wire form.
pub fn to_entry(a: &Acl) -> flume_protocol::AclEntry {
    flume_protocol::AclEntry {
        principal: a.principal.to_string(),
        permission: a.permission.name().into(),
        resource_type: a.resource_type.name().into(),
        pattern: a.pattern.name().into(),
        name: a.name.clone(),
        operation: a.operation.name().into(),
    }
}

/// Serves an ACLS request of an admin `who` (checked by the caller).
/// Blocking: an add or remove writes the file.
///
/// # Errors
/// INVALID_REQUEST for an ACL that does not parse, LIMIT_REACHED at
/// [`MAX_ACLS`], STORAGE_ERROR when the file cannot be written.
pub fn serve_request(
    authorizer: &Authorizer,
    who: &str,
    req: flume_protocol::AclsRequest,
) -> Result<flume_protocol::AclsResponse, ErrorCode> {
    use flume_protocol::{ACLS_ADD, ACLS_LIST, ACLS_REMOVE};
    let invalid = |why: String| {
        tracing::info!(by = who, error = %why, "ACLS refused");
        ErrorCode::InvalidRequest
    };
    let failed = |e: AclError| {
        tracing::warn!(by = who, error = %e, "ACLS failed");
        e.code()
    };
    let (changed, filter) = match req.op {
        ACLS_LIST => {
            let filter = match req.acl.principal.as_str() {
                "" => None,
                p => Some(p.parse::<AclPrincipal>().map_err(invalid)?),
            };
            (false, filter)
        }
        ACLS_ADD | ACLS_REMOVE => {
            let acl = from_entry(&req.acl).map_err(invalid)?;
            let changed = if req.op == ACLS_ADD {
                authorizer.add(acl.clone()).map_err(failed)?
            } else {
                authorizer.remove(&acl).map_err(failed)?
            };
            let verb = if req.op == ACLS_ADD {
                "added"
            } else {
                "removed"
            };
            tracing::info!(by = who, acl = %acl.render(), changed, "ACL {verb}");
            (changed, None)
        }
        _ => return Err(ErrorCode::InvalidRequest),
    };
    Ok(flume_protocol::AclsResponse {
        changed: i8::from(changed),
        acls: authorizer
            .list(filter.as_ref())
            .iter()
            .map(to_entry)
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(
        principal: &str,
        permission: Permission,
        res: ResourceType,
        pattern: PatternType,
        name: &str,
        op: Operation,
    ) -> Acl {
        Acl {
            principal: principal.parse().unwrap(),
            permission,
            resource_type: res,
            pattern,
            name: name.into(),
            operation: op,
        }
    }

    fn allow_topic(principal: &str, pattern: PatternType, name: &str, op: Operation) -> Acl {
        acl(
            principal,
            Permission::Allow,
            ResourceType::Topic,
            pattern,
            name,
            op,
        )
    }

    fn user(n: &str) -> Principal {
        Principal::User(n.into())
    }

    fn open(dir: &Path) -> Authorizer {
        Authorizer::open(dir, true, &["admin".to_owned()]).unwrap()
    }

    #[test]
    fn literal_prefixed_and_any_names_match_as_kafka_does() {
        let dir = tempfile::tempdir().unwrap();
        let a = open(dir.path());
        let alice = user("alice");
        let read = |name: &str| {
            a.check(
                Protocol::Flume,
                &alice,
                Operation::Read,
                Resource::topic(name),
            )
        };
        assert!(!read("orders"), "nothing is allowed without an ACL");
        a.add(allow_topic(
            "User:alice",
            PatternType::Literal,
            "orders",
            Operation::Read,
        ))
        .unwrap();
        assert!(read("orders"));
        assert!(!read("orders2") && !read("order"));
        assert!(
            a.check(
                Protocol::Flume,
                &alice,
                Operation::Describe,
                Resource::topic("orders")
            ),
            "read implies describe"
        );
        assert!(!a.check(
            Protocol::Flume,
            &alice,
            Operation::Write,
            Resource::topic("orders")
        ));
        assert!(!a.check(
            Protocol::Flume,
            &user("bob"),
            Operation::Read,
            Resource::topic("orders")
        ));
        a.add(allow_topic(
            "User:alice",
            PatternType::Prefixed,
            "logs.",
            Operation::All,
        ))
        .unwrap();
        assert!(read("logs.a") && read("logs.") && !read("logs"));
        assert!(a.check(
            Protocol::Flume,
            &alice,
            Operation::Delete,
            Resource::topic("logs.x")
        ));
        a.add(allow_topic(
            "User:*",
            PatternType::Literal,
            "*",
            Operation::Describe,
        ))
        .unwrap();
        assert!(a.check(
            Protocol::Flume,
            &user("bob"),
            Operation::Describe,
            Resource::topic("x")
        ));
        assert!(a.check(
            Protocol::Flume,
            &Principal::Certificate("CN=c".into()),
            Operation::Describe,
            Resource::topic("x")
        ));
        assert!(
            !a.check(
                Protocol::Flume,
                &Principal::Anonymous,
                Operation::Describe,
                Resource::topic("x")
            ),
            "User:* is the authenticated only"
        );
        a.add(allow_topic(
            "User:ANONYMOUS",
            PatternType::Literal,
            "public",
            Operation::Read,
        ))
        .unwrap();
        assert!(a.check(
            Protocol::Flume,
            &Principal::Anonymous,
            Operation::Read,
            Resource::topic("public")
        ));
        // A group ACL is not a topic ACL.
        assert!(!a.check(
            Protocol::Flume,
            &alice,
            Operation::Read,
            Resource::group("orders")
        ));
        // Deny wins.
        a.add(acl(
            "User:alice",
            Permission::Deny,
            ResourceType::Topic,
            PatternType::Literal,
            "logs.secret",
            Operation::Read,
        ))
        .unwrap();
        assert!(!read("logs.secret") && read("logs.other"));
        // Admins are superusers; off allows everything.
        assert!(a.check(
            Protocol::Kafka,
            &user("admin"),
            Operation::Alter,
            Resource::cluster()
        ));
        let off = Authorizer::open(dir.path(), false, &[]).unwrap();
        assert!(off.check(
            Protocol::Flume,
            &user("bob"),
            Operation::Write,
            Resource::topic("orders")
        ));
        // Certificates are named by their subject.
        a.add(allow_topic(
            "User:CN=alice,O=Example",
            PatternType::Literal,
            "orders",
            Operation::Write,
        ))
        .unwrap();
        assert!(a.check(
            Protocol::Flume,
            &Principal::Certificate("CN=alice,O=Example".into()),
            Operation::Write,
            Resource::topic("orders")
        ));
        let denied = a.denied_counts();
        assert!(
            denied
                .iter()
                .any(|(p, op, t, n)| *p == "flume" && *op == "read" && *t == "topic" && *n >= 3),
            "{denied:?}"
        );
    }

    #[test]
    fn acls_survive_a_reopen_and_a_damaged_file_names_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let a = open(dir.path());
        let x = allow_topic(
            "User:CN=Flume Test CA",
            PatternType::Literal,
            "orders",
            Operation::Read,
        );
        assert!(a.add(x.clone()).unwrap());
        assert!(!a.add(x.clone()).unwrap());
        let y = allow_topic("User:bob", PatternType::Prefixed, "b", Operation::Write);
        a.add(y.clone()).unwrap();
        assert!(a.remove(&y).unwrap());
        assert!(!a.remove(&y).unwrap());
        let again = open(dir.path());
        assert_eq!(again.list(None), vec![x.clone()]);
        assert_eq!(again.list(Some(&"User:bob".parse().unwrap())), vec![]);
        assert!(again.check(
            Protocol::Flume,
            &Principal::Certificate("CN=Flume Test CA".into()),
            Operation::Read,
            Resource::topic("orders")
        ));
        let path = dir.path().join(ACLS_FILE);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace(" read ", " reed ")).unwrap();
        let err = Authorizer::open(dir.path(), true, &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2") && err.contains("reed"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        for garbage in [
            "\u{0}\u{1}",
            "flume-acls 1\nallow",
            "flume-acls 1\nallow topic prefixed * read User:x",
            "flume-acls 1\nallow cluster literal c alter User:x",
            "flume-acls 1\nallow topic literal x read Group:x",
        ] {
            std::fs::write(&path, garbage).unwrap();
            assert!(
                Authorizer::open(dir.path(), true, &[]).is_err(),
                "{garbage:?}"
            );
        }
    }

    #[test]
    fn the_number_of_acls_is_capped() {
        let dir = tempfile::tempdir().unwrap();
        let a = open(dir.path());
        // Fill the set directly (one write per add would be slow), then add through the API.
        {
            let mut acls = a.lock_acls();
            for i in 0..MAX_ACLS - 1 {
                acls.insert(allow_topic(
                    "User:u",
                    PatternType::Literal,
                    &format!("t{i}"),
                    Operation::Read,
                ));
            }
        }
        a.add(allow_topic(
            "User:u",
            PatternType::Literal,
            "last",
            Operation::Read,
        ))
        .unwrap();
        let err = a
            .add(allow_topic(
                "User:u",
                PatternType::Literal,
                "one-more",
                Operation::Read,
            ))
            .unwrap_err();
        assert!(matches!(err, AclError::Limit { limit: MAX_ACLS }), "{err}");
        assert!(err.to_string().contains("10000"), "{err}");
        assert_eq!(err.code(), ErrorCode::LimitReached);
        assert_eq!(open(dir.path()).list(None).len(), MAX_ACLS);
        // Removing one makes room.
        a.remove(&allow_topic(
            "User:u",
            PatternType::Literal,
            "t0",
            Operation::Read,
        ))
        .unwrap();
        a.add(allow_topic(
            "User:u",
            PatternType::Literal,
            "one-more",
            Operation::Read,
        ))
        .unwrap();
    }

    #[test]
    fn names_parse_and_print_as_kafka_writes_them() {
        for s in ["User:alice", "User:*", "User:ANONYMOUS", "User:CN=a b,O=c"] {
            assert_eq!(s.parse::<AclPrincipal>().unwrap().to_string(), s);
        }
        assert!("alice".parse::<AclPrincipal>().is_err());
        assert!("User:".parse::<AclPrincipal>().is_err());
        assert!("User:a\nb".parse::<AclPrincipal>().is_err());
        assert_eq!("READ".parse::<Operation>(), Ok(Operation::Read));
        assert!("fly".parse::<Operation>().unwrap_err().contains("describe"));
        let mut x = allow_topic("User:a", PatternType::Literal, "bad name", Operation::Read);
        assert!(x.validate().is_err());
        x.name = "*".into();
        assert!(x.validate().is_ok());
    }
}

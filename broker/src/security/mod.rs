//! Security of the broker's listeners: TLS on every port ([`tls`]), who a
//! connection is ([`Principal`]), logins ([`auth`], [`users`]), the ACLs
//! ([`acl`]) and the rule of each domain action built on them ([`authz`]),
//! and per-principal limits ([`quota`]).
//!
//! A connection's principal is known after the TLS handshake (a client
//! certificate's subject) and replaced by the user after a login, and is kept
//! with the connection in the listener (see `Broker::connection_principals`),
//! so authorisation and per-principal limits can hang off it.

pub mod acl;
pub mod auth;
pub mod authz;
pub mod quota;
pub mod tls;
pub mod users;

use std::fmt;

/// Who is on the other end of a connection.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Principal {
    /// Nobody in particular: no client certificate and no login.
    Anonymous,
    /// A client certificate's subject (mTLS), as RFC 4514 writes a
    /// distinguished name: `CN=alice,O=Example`.
    Certificate(String),
    /// A user who authenticated (SCRAM) under this name.
    User(String),
}

impl Principal {
    /// True for [`Principal::Anonymous`].
    pub fn is_anonymous(&self) -> bool {
        matches!(self, Principal::Anonymous)
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::Anonymous => f.write_str("ANONYMOUS"),
            Principal::Certificate(dn) => write!(f, "cert:{dn}"),
            Principal::User(name) => write!(f, "user:{name}"),
        }
    }
}

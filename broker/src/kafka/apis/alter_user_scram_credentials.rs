//! AlterUserScramCredentials (v0): add, change and remove the SCRAM
//! credentials of users in Flume's user store ([`crate::security::users`],
//! the one `flume-cli users` manages and SCRAM logins check), so any Kafka
//! admin client manages users (`kafka-configs.sh --alter --add-config
//! 'SCRAM-SHA-256=[...]'`, confluent-kafka's `alter_user_scram_credentials`).
//!
//! An upsertion carries the salt, the iterations and the SaltedPassword
//! (PBKDF2 of the password, never the password); the store keeps what a
//! login needs of it: StoredKey and ServerKey, with the salt and the
//! iterations (the same verifier `flume-cli users add` makes from a
//! password). Each mechanism is a credential of its own, as in Kafka: an
//! upsertion of SCRAM-SHA-256 keeps the user's SCRAM-SHA-512 one, and a user
//! whose last credential is deleted is removed.
//!
//! One answer per user, as Kafka's: a user with any bad alteration has none
//! applied. An empty name, a name Flume refuses (whitespace, control
//! characters, over 256 bytes), iterations outside 4096..=16384 (Kafka's
//! bounds for both mechanisms), a salt outside 1..=256 bytes or a
//! SaltedPassword not of the hash's length (32 or 64 bytes):
//! UNACCEPTABLE_CREDENTIAL; a mechanism other than 1 (SCRAM-SHA-256) or 2
//! (SCRAM-SHA-512): UNSUPPORTED_SASL_MECHANISM; a user's mechanism altered
//! twice: DUPLICATE_RESOURCE; the deletion of a credential the user does not
//! have: RESOURCE_NOT_FOUND. The store's file is written once per request,
//! durable when answered; a login started later checks the new credential.
//!
//! ALTER on the cluster ([`crate::security::authz::Subject::alter_users`]:
//! admins, or with the authorizer on whom the ACLs allow), else every user
//! gets CLUSTER_AUTHORIZATION_FAILED.

use std::sync::Arc;

use flume_protocol::scram::{Verifier, Verifier512, MIN_ITERATIONS};
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::super::{errors, Ctx};
use super::describe_user_scram_credentials::{SCRAM_SHA_256, SCRAM_SHA_512};
use crate::security::users::{check_name, Verifiers, MAX_USERS};

/// Most iterations a credential may have (Kafka's bound for both hashes;
/// a login costs the client that many HMACs).
pub(super) const MAX_ITERATIONS: u32 = 16_384;
/// Longest salt accepted, in bytes (Kafka's tools send 20 to 64).
pub(super) const MAX_SALT_BYTES: usize = 256;

/// One change to a user's credentials.
#[derive(Debug)]
enum Change {
    Delete(i8),
    Sha256(Verifier),
    Sha512(Verifier512),
}

impl Change {
    fn mechanism(&self) -> i8 {
        match self {
            Change::Delete(m) => *m,
            Change::Sha256(_) => SCRAM_SHA_256,
            Change::Sha512(_) => SCRAM_SHA_512,
        }
    }
}

/// A user named in the request: its changes, or why none is made.
#[derive(Debug)]
struct UserAlter {
    name: String,
    changes: Vec<Change>,
    error: Option<(i16, String)>,
}

type Refusal = (i16, String);

fn unacceptable(why: impl Into<String>) -> Refusal {
    (errors::UNACCEPTABLE_CREDENTIAL, why.into())
}

fn mechanism(code: i8) -> Result<i8, Refusal> {
    match code {
        SCRAM_SHA_256 | SCRAM_SHA_512 => Ok(code),
        other => Err((
            errors::UNSUPPORTED_SASL_MECHANISM,
            format!("unknown SCRAM mechanism {other}: 1 (SCRAM-SHA-256) or 2 (SCRAM-SHA-512)"),
        )),
    }
}

fn user_name(name: &str) -> Result<(), Refusal> {
    if name.is_empty() {
        return Err(unacceptable("a user name must not be empty"));
    }
    check_name(name).map_err(unacceptable)
}

/// The verifier an upsertion makes, checked.
fn upsertion(
    mech: i8,
    iterations: i32,
    salt: &[u8],
    salted_password: &[u8],
) -> Result<Change, Refusal> {
    let mech = mechanism(mech)?;
    let iterations = match u32::try_from(iterations) {
        Ok(i) if i < MIN_ITERATIONS => Err(format!(
            "too few iterations: {i}, at least {MIN_ITERATIONS}"
        )),
        Ok(i) if i > MAX_ITERATIONS => Err(format!(
            "too many iterations: {i}, at most {MAX_ITERATIONS}"
        )),
        Ok(i) => Ok(i),
        Err(_) => Err(format!(
            "too few iterations: {iterations}, at least {MIN_ITERATIONS}"
        )),
    }
    .map_err(unacceptable)?;
    if salt.is_empty() || salt.len() > MAX_SALT_BYTES {
        return Err(unacceptable(format!(
            "a salt of {} bytes: 1 to {MAX_SALT_BYTES} are accepted",
            salt.len()
        )));
    }
    let wrong_length = |want: usize| {
        unacceptable(format!(
            "a salted password of {} bytes: the hash's is {want}",
            salted_password.len()
        ))
    };
    Ok(if mech == SCRAM_SHA_256 {
        let salted: &[u8; 32] = salted_password.try_into().map_err(|_| wrong_length(32))?;
        Change::Sha256(Verifier::from_salted_password(salted, salt, iterations))
    } else {
        let salted: &[u8; 64] = salted_password.try_into().map_err(|_| wrong_length(64))?;
        Change::Sha512(Verifier512::from_salted_password(salted, salt, iterations))
    })
}

/// The request's users, in the order first named, each with its checked
/// changes or the first thing wrong with them.
fn plan(req: &AlterUserScramCredentialsRequest) -> Vec<UserAlter> {
    let mut users: Vec<UserAlter> = Vec::new();
    let mut add = |name: &str, change: Result<Change, Refusal>| {
        let i = match users.iter().position(|u| u.name == name) {
            Some(i) => i,
            None => {
                users.push(UserAlter {
                    name: name.to_owned(),
                    changes: Vec::new(),
                    error: None,
                });
                users.len() - 1
            }
        };
        let u = &mut users[i];
        match user_name(name).and(change) {
            Ok(c) => u.changes.push(c),
            Err(e) => {
                u.error.get_or_insert(e);
            }
        }
    };
    for d in &req.deletions {
        add(d.name.as_str(), mechanism(d.mechanism).map(Change::Delete));
    }
    for u in &req.upsertions {
        let change = upsertion(u.mechanism, u.iterations, &u.salt, &u.salted_password);
        add(u.name.as_str(), change);
    }
    for u in &mut users {
        let twice = u.changes.iter().enumerate().any(|(i, c)| {
            u.changes[..i]
                .iter()
                .any(|earlier| earlier.mechanism() == c.mechanism())
        });
        if twice && u.error.is_none() {
            u.error = Some((
                errors::DUPLICATE_RESOURCE,
                "a user credential cannot be altered twice in the same request".into(),
            ));
        }
    }
    users
}

/// Applies the users' changes to the store's users (those with an error
/// are left alone; a deletion of a credential the user does not have, or a
/// new user past the store's limit, sets one).
fn apply(all: &mut std::collections::BTreeMap<String, Verifiers>, users: &mut [UserAlter]) {
    for u in users.iter_mut().filter(|u| u.error.is_none()) {
        let mut v = all.get(&u.name).cloned().unwrap_or_default();
        let exists = all.contains_key(&u.name);
        let mut missing = false;
        for c in u.changes.drain(..) {
            match c {
                Change::Delete(SCRAM_SHA_256) => missing |= v.sha256.take().is_none(),
                Change::Delete(_) => missing |= v.sha512.take().is_none(),
                Change::Sha256(x) => v.sha256 = Some(x),
                Change::Sha512(x) => v.sha512 = Some(x),
            }
        }
        if missing {
            u.error = Some((
                errors::RESOURCE_NOT_FOUND,
                "attempt to delete a user credential that does not exist".into(),
            ));
        } else if !exists && all.len() >= MAX_USERS {
            u.error = Some((
                errors::POLICY_VIOLATION,
                format!("the broker holds at most {MAX_USERS} users"),
            ));
        } else {
            all.insert(u.name.clone(), v);
        }
    }
}

pub(super) async fn handle(
    ctx: &Ctx,
    req: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let mut users = plan(&req);
    let who = ctx.with_subject(|s| s.principal().to_string());
    let refusal = if !ctx.with_subject(|s| s.alter_users()) {
        Some((
            errors::CLUSTER_AUTHORIZATION_FAILED,
            "not authorized: altering SCRAM credentials needs ALTER on the cluster (admins may)"
                .to_owned(),
        ))
    } else if ctx.auth.is_none() {
        Some((
            errors::UNKNOWN_SERVER_ERROR,
            "no user store here".to_owned(),
        ))
    } else {
        None
    };
    if let Some(r) = refusal {
        for u in &mut users {
            u.error = Some(r.clone());
        }
    } else if let Some(auth) = &ctx.auth {
        let auth = Arc::clone(auth);
        let todo = std::mem::take(&mut users);
        let (back, written) = flume_rt::unblock(move || {
            let mut todo = todo;
            let written = auth.users().alter(|all| apply(all, &mut todo));
            (todo, written)
        })
        .await;
        users = back;
        for u in users.iter_mut().filter(|u| u.error.is_none()) {
            match &written {
                Ok(()) => {
                    tracing::info!(user = %u.name, by = %who, "SCRAM credentials changed (Kafka AlterUserScramCredentials)");
                }
                Err(e) => {
                    tracing::warn!(user = %u.name, error = %e, "SCRAM credentials not changed");
                    u.error = Some((errors::UNKNOWN_SERVER_ERROR, e.to_string()));
                }
            }
        }
    }
    let mut resp = AlterUserScramCredentialsResponse::default();
    resp.results = users
        .into_iter()
        .map(|u| {
            let mut r = AlterUserScramCredentialsResult::default()
                .with_user(StrBytes::from_string(u.name));
            if let Some((code, message)) = u.error {
                tracing::debug!(user = %r.user.as_str(), code, %message, "AlterUserScramCredentials refused");
                r.error_code = code;
                r.error_message = Some(StrBytes::from_string(message));
            }
            r
        })
        .collect();
    resp
}

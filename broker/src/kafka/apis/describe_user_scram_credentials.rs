//! DescribeUserScramCredentials (v0): the users of SCRAM logins
//! ([`crate::security::users`], what `flume-cli users` manages), each with
//! its mechanisms and iterations, never a key. Every user with a credential
//! when `users` is null or empty; else those named, each once (a user with
//! none: RESOURCE_NOT_FOUND; named twice: DUPLICATE_RESOURCE; an empty name:
//! RESOURCE_NOT_FOUND), as Kafka answers. DESCRIBE on the cluster
//! ([`crate::security::authz::Subject::describe_users`]), else
//! CLUSTER_AUTHORIZATION_FAILED for the request.

use std::collections::HashMap;

use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::super::{errors, Ctx};
use crate::security::users::Verifiers;

/// Kafka's ScramMechanism type of SCRAM-SHA-256.
pub(super) const SCRAM_SHA_256: i8 = 1;
/// Kafka's ScramMechanism type of SCRAM-SHA-512.
pub(super) const SCRAM_SHA_512: i8 = 2;

fn infos(v: &Verifiers) -> Vec<CredentialInfo> {
    let info = |mechanism, iterations: u32| {
        CredentialInfo::default()
            .with_mechanism(mechanism)
            .with_iterations(i32::try_from(iterations).unwrap_or(i32::MAX))
    };
    let mut out = Vec::with_capacity(2);
    if let Some(v) = &v.sha256 {
        out.push(info(SCRAM_SHA_256, v.iterations));
    }
    if let Some(v) = &v.sha512 {
        out.push(info(SCRAM_SHA_512, v.iterations));
    }
    out
}

fn failed(user: &str, code: i16, message: String) -> DescribeUserScramCredentialsResult {
    DescribeUserScramCredentialsResult::default()
        .with_user(StrBytes::from_string(user.to_owned()))
        .with_error_code(code)
        .with_error_message(Some(StrBytes::from_string(message)))
}

pub(super) fn handle(
    ctx: &Ctx,
    req: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let mut resp = DescribeUserScramCredentialsResponse::default();
    if !ctx.with_subject(|s| s.describe_users()) {
        resp.error_code = errors::CLUSTER_AUTHORIZATION_FAILED;
        resp.error_message = Some(StrBytes::from_static_str(
            "not authorized: describing SCRAM credentials needs DESCRIBE on the cluster (admins may)",
        ));
        return resp;
    }
    let Some(auth) = &ctx.auth else {
        resp.error_code = errors::UNKNOWN_SERVER_ERROR;
        resp.error_message = Some(StrBytes::from_static_str("no user store here"));
        return resp;
    };
    let store = auth.users();
    let named = req.users.unwrap_or_default();
    if named.is_empty() {
        resp.results = store
            .list()
            .into_iter()
            .filter_map(|name| {
                let v = store.verifiers(&name)?;
                Some(
                    DescribeUserScramCredentialsResult::default()
                        .with_user(StrBytes::from_string(name))
                        .with_credential_infos(infos(&v)),
                )
            })
            .collect();
        return resp;
    }
    let mut times: HashMap<&str, usize> = HashMap::new();
    for u in &named {
        *times.entry(u.name.as_str()).or_default() += 1;
    }
    for u in &named {
        let name = u.name.as_str();
        // Each user once, where it is first named.
        let Some(n) = times.remove(name) else {
            continue;
        };
        let result = if name.is_empty() {
            failed(
                name,
                errors::RESOURCE_NOT_FOUND,
                "cannot describe SCRAM credentials of an empty user name".into(),
            )
        } else if n > 1 {
            failed(
                name,
                errors::DUPLICATE_RESOURCE,
                format!(
                    "cannot describe SCRAM credentials of the same user twice in a request: {name}"
                ),
            )
        } else {
            match store.verifiers(name) {
                Some(v) => DescribeUserScramCredentialsResult::default()
                    .with_user(u.name.clone())
                    .with_credential_infos(infos(&v)),
                None => failed(
                    name,
                    errors::RESOURCE_NOT_FOUND,
                    format!("attempt to describe a user credential that does not exist: {name}"),
                ),
            }
        };
        resp.results.push(result);
    }
    resp
}

//! SASL on the Kafka listener (#20, part 3): SaslHandshake v1 and
//! SaslAuthenticate v0-2 with PLAIN and SCRAM-SHA-256, against the same
//! users as the Flume protocol's AUTHENTICATE (`--auth`, `<data>/__users`).
//!
//! The connection loop asks [`KafkaSasl::allows`] before serving a request:
//! with `--auth required`, only ApiVersions, SaslHandshake and
//! SaslAuthenticate are served before a successful login; anything else
//! closes the connection, as a Kafka broker does. A failed login is answered
//! with SASL_AUTHENTICATION_FAILED and the connection is closed after it.
//! SaslHandshake v0 (raw tokens after the handshake) is not served: clients
//! of the last years use v1.
//!
//! PLAIN sends the password (use it over TLS only); the broker checks it
//! against the user's SCRAM verifier (PBKDF2 with the stored salt, StoredKey
//! compared in constant time; an unknown user is checked against a decoy).

use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use flume_protocol::scram::{self, ClientFirst, ServerExchange, Verifier};
use kafka_protocol::messages::{
    ApiKey, RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use subtle::ConstantTimeEq;

use crate::security::auth::{AuthMode, Authenticator};
use crate::security::Principal;

/// Kafka's UNSUPPORTED_SASL_MECHANISM.
const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
/// Kafka's ILLEGAL_SASL_STATE.
const ILLEGAL_SASL_STATE: i16 = 34;
/// Kafka's SASL_AUTHENTICATION_FAILED.
const SASL_AUTHENTICATION_FAILED: i16 = 58;

const PLAIN: &str = "PLAIN";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mechanism {
    Plain,
    Scram,
}

/// One Kafka connection's SASL state.
#[derive(Debug)]
pub(crate) struct KafkaSasl {
    auth: Arc<Authenticator>,
    mechanism: Option<Mechanism>,
    scram: Option<ServerExchange>,
    user: Option<String>,
}

/// What to do with a SASL request.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Write the response and go on.
    Reply(Vec<u8>),
    /// Logged in as this principal: write the response and go on.
    LoggedIn(Vec<u8>, Principal),
    /// Write the response, then close the connection.
    ReplyThenClose(Vec<u8>),
}

/// Whether `key` is one of the SASL APIs this module answers.
pub(crate) fn is_sasl(key: i16) -> bool {
    key == ApiKey::SaslHandshake as i16 || key == ApiKey::SaslAuthenticate as i16
}

fn frame<T: Encodable>(api: ApiKey, version: i16, correlation: i32, body: &T) -> Option<Vec<u8>> {
    let mut out = BytesMut::new();
    out.put_i32(0);
    ResponseHeader::default()
        .with_correlation_id(correlation)
        .encode(&mut out, api.response_header_version(version))
        .ok()?;
    body.encode(&mut out, version).ok()?;
    let size = i32::try_from(out.len() - 4).ok()?;
    out[..4].copy_from_slice(&size.to_be_bytes());
    Some(out.to_vec())
}

impl KafkaSasl {
    pub(crate) fn new(auth: Arc<Authenticator>) -> Self {
        KafkaSasl {
            auth,
            mechanism: None,
            scram: None,
            user: None,
        }
    }

    /// Whether a request with this API key may be served now.
    pub(crate) fn allows(&self, key: i16) -> bool {
        self.auth.mode() != AuthMode::Required
            || self.user.is_some()
            || key == ApiKey::ApiVersions as i16
            || is_sasl(key)
    }

    fn mechanisms(&self) -> Vec<StrBytes> {
        if self.auth.mode() == AuthMode::Off {
            return Vec::new();
        }
        vec![
            StrBytes::from_static_str(PLAIN),
            StrBytes::from_static_str(scram::MECHANISM),
        ]
    }

    /// Answers a SaslHandshake or SaslAuthenticate frame (without its length
    /// prefix); `None` when it does not decode (the connection is closed).
    pub(crate) fn handle(&mut self, frame_bytes: Bytes) -> Option<Outcome> {
        let mut fixed = frame_bytes.get(..8)?;
        let key = fixed.get_i16();
        let version = fixed.get_i16();
        let correlation = fixed.get_i32();
        let mut buf = frame_bytes;
        if key == ApiKey::SaslHandshake as i16 {
            let api = ApiKey::SaslHandshake;
            if version != 1 {
                // v0 would be followed by raw tokens, which this listener does not read.
                return Some(Outcome::ReplyThenClose(super::apis::unsupported(
                    correlation,
                    Some(api),
                )));
            }
            RequestHeader::decode(&mut buf, api.request_header_version(version)).ok()?;
            let req = SaslHandshakeRequest::decode(&mut buf, version).ok()?;
            let offered = self.mechanisms();
            let chosen = match req.mechanism.as_str() {
                PLAIN if !offered.is_empty() => Some(Mechanism::Plain),
                m if m == scram::MECHANISM && !offered.is_empty() => Some(Mechanism::Scram),
                _ => None,
            };
            let error_code = match (chosen, self.user.is_some()) {
                (_, true) => ILLEGAL_SASL_STATE,
                (None, _) => UNSUPPORTED_SASL_MECHANISM,
                (Some(_), _) => 0,
            };
            self.mechanism = chosen;
            self.scram = None;
            let resp = SaslHandshakeResponse::default()
                .with_error_code(error_code)
                .with_mechanisms(offered);
            let out = frame(api, version, correlation, &resp)?;
            return Some(if error_code == 0 {
                Outcome::Reply(out)
            } else {
                Outcome::ReplyThenClose(out)
            });
        }
        let api = ApiKey::SaslAuthenticate;
        if !(0..=2).contains(&version) {
            return Some(Outcome::ReplyThenClose(super::apis::unsupported(
                correlation,
                Some(api),
            )));
        }
        RequestHeader::decode(&mut buf, api.request_header_version(version)).ok()?;
        let req = SaslAuthenticateRequest::decode(&mut buf, version).ok()?;
        let result = match (self.mechanism, self.user.is_some()) {
            (_, true) | (None, _) => Err(ILLEGAL_SASL_STATE),
            (Some(Mechanism::Plain), _) => self.plain(&req.auth_bytes).map(|()| Bytes::new()),
            (Some(Mechanism::Scram), _) => self.scram_step(&req.auth_bytes),
        };
        match result {
            Ok(bytes) => {
                let resp = SaslAuthenticateResponse::default().with_auth_bytes(bytes);
                let out = frame(api, version, correlation, &resp)?;
                Some(match &self.user {
                    Some(u) => Outcome::LoggedIn(out, Principal::User(u.clone())),
                    None => Outcome::Reply(out),
                })
            }
            Err(code) => {
                tracing::info!(code, "kafka SASL login failed");
                let resp = SaslAuthenticateResponse::default()
                    .with_error_code(code)
                    .with_error_message(Some(StrBytes::from_static_str(
                        "authentication failed: wrong user name or password",
                    )));
                Some(Outcome::ReplyThenClose(frame(
                    api,
                    version,
                    correlation,
                    &resp,
                )?))
            }
        }
    }

    /// PLAIN: `authzid NUL user NUL password`, checked against the verifier.
    fn plain(&mut self, token: &[u8]) -> Result<(), i16> {
        let mut parts = token.split(|b| *b == 0);
        let (Some(authzid), Some(user), Some(password), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(SASL_AUTHENTICATION_FAILED);
        };
        let (Ok(user), Ok(password)) = (std::str::from_utf8(user), std::str::from_utf8(password))
        else {
            return Err(SASL_AUTHENTICATION_FAILED);
        };
        if !authzid.is_empty() && authzid != user.as_bytes() {
            return Err(SASL_AUTHENTICATION_FAILED);
        }
        let known = self.auth.users().get(user);
        let v = known.clone().unwrap_or_else(|| self.auth.decoy().clone());
        let tried = Verifier::new(password, &v.salt, v.iterations);
        if bool::from(tried.stored_key.ct_eq(&v.stored_key)) && known.is_some() {
            self.user = Some(user.to_owned());
            Ok(())
        } else {
            Err(SASL_AUTHENTICATION_FAILED)
        }
    }

    /// SCRAM-SHA-256: client-first, then client-final.
    fn scram_step(&mut self, token: &[u8]) -> Result<Bytes, i16> {
        use base64::Engine as _;
        match self.scram.take() {
            None => {
                let first = ClientFirst::parse(token).map_err(|_| SASL_AUTHENTICATION_FAILED)?;
                let nonce = crate::security::users::random_bytes::<18>()
                    .map_err(|_| SASL_AUTHENTICATION_FAILED)?;
                let nonce = base64::engine::general_purpose::STANDARD_NO_PAD.encode(nonce);
                let verifier = self.auth.users().get(&first.username);
                let (ex, msg) =
                    ServerExchange::start(&first, verifier, self.auth.decoy().clone(), &nonce)
                        .map_err(|_| SASL_AUTHENTICATION_FAILED)?;
                self.scram = Some(ex);
                Ok(Bytes::from(msg))
            }
            Some(ex) => {
                let msg = ex.finish(token).map_err(|_| SASL_AUTHENTICATION_FAILED)?;
                self.user = Some(ex.username().to_owned());
                Ok(Bytes::from(msg))
            }
        }
    }
}

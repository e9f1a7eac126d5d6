//! SASL on the Kafka listener: SaslHandshake v0-1 and
//! SaslAuthenticate v0-2 with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, against the same
//! users as the Flume protocol's AUTHENTICATE (`--auth`, `<data>/__users`;
//! a user without a SHA-512 verifier fails SCRAM-SHA-512 like a wrong password).
//!
//! Limits ([`crate::security::quota`]): a new login from an address with too
//! many failed ones is refused before any password is checked, and a login
//! as a principal at its connection limit fails with a message naming the
//! limit; both close the connection.
//!
//! The connection loop asks [`KafkaSasl::allows`] before serving a request:
//! with `--auth required`, only ApiVersions, SaslHandshake and
//! SaslAuthenticate are served before a successful login; anything else
//! closes the connection, as a Kafka broker does. A failed login is answered
//! with SASL_AUTHENTICATION_FAILED and the connection is closed after it.
//! SaslHandshake v0 is served too: the tokens then follow as raw frames
//! (a 4-byte size and the token, each way) instead of SaslAuthenticate
//! requests (librdkafka before 2.x requires v0 to be advertised even though
//! it uses v1).
//!
//! PLAIN sends the password (use it over TLS only); the broker checks it
//! against the user's SCRAM verifier (PBKDF2 with the stored salt, StoredKey
//! compared in constant time; an unknown user is checked against a decoy).

use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use flume_protocol::scram::{self, ClientFirst, ScramHash, ServerExchange, Verifier};
use kafka_protocol::messages::{
    ApiKey, RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use subtle::ConstantTimeEq;

use crate::security::auth::{AuthMode, Authenticator};
use crate::security::quota::{self, ConnQuota};
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
    Scram(ScramHash),
}

impl Mechanism {
    fn label(self) -> quota::Mechanism {
        match self {
            Mechanism::Plain => quota::Mechanism::Plain,
            Mechanism::Scram(ScramHash::Sha256) => quota::Mechanism::ScramSha256,
            Mechanism::Scram(ScramHash::Sha512) => quota::Mechanism::ScramSha512,
        }
    }
}

/// What a failed login answers: the error code and message.
type Failure = (i16, String);

fn failed() -> Failure {
    (
        SASL_AUTHENTICATION_FAILED,
        "authentication failed: wrong user name or password".into(),
    )
}

/// One Kafka connection's SASL state.
#[derive(Debug)]
pub(crate) struct KafkaSasl {
    auth: Arc<Authenticator>,
    mechanism: Option<Mechanism>,
    scram: Option<ServerExchange>,
    user: Option<String>,
    /// After SaslHandshake v0: the next frames are raw SASL tokens.
    raw: bool,
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
            raw: false,
        }
    }

    /// Whether the next frame is a raw SASL token (after SaslHandshake v0),
    /// not a Kafka request.
    pub(crate) fn wants_raw_token(&self) -> bool {
        self.raw && self.user.is_none()
    }

    /// One raw SASL token of the v0 flow: the answer is the server's token
    /// with a 4-byte size (empty after PLAIN); a failure closes the
    /// connection without an answer, as Kafka does.
    pub(crate) fn raw_token(&mut self, token: &[u8], quota: &mut ConnQuota) -> Outcome {
        let Some(mech) = self.mechanism else {
            return Outcome::ReplyThenClose(Vec::new());
        };
        match self.login_step(mech, token, quota) {
            Ok(bytes) => {
                let mut out = Vec::with_capacity(4 + bytes.len());
                out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(0).to_be_bytes());
                out.extend_from_slice(&bytes);
                match &self.user {
                    Some(u) => {
                        self.raw = false;
                        Outcome::LoggedIn(out, Principal::User(u.clone()))
                    }
                    None => Outcome::Reply(out),
                }
            }
            Err((code, message)) => {
                tracing::info!(code, %message, "kafka SASL (v0) login failed");
                Outcome::ReplyThenClose(Vec::new())
            }
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
            StrBytes::from_static_str(scram::MECHANISM_SHA512),
        ]
    }

    /// Answers a SaslHandshake or SaslAuthenticate frame (without its length
    /// prefix); `None` when it does not decode (the connection is closed).
    pub(crate) fn handle(&mut self, frame_bytes: Bytes, quota: &mut ConnQuota) -> Option<Outcome> {
        let mut fixed = frame_bytes.get(..8)?;
        let key = fixed.get_i16();
        let version = fixed.get_i16();
        let correlation = fixed.get_i32();
        let mut buf = frame_bytes;
        if key == ApiKey::SaslHandshake as i16 {
            let api = ApiKey::SaslHandshake;
            if !(0..=1).contains(&version) {
                return Some(Outcome::ReplyThenClose(super::apis::unsupported(
                    correlation,
                    Some(api),
                )));
            }
            RequestHeader::decode(&mut buf, api.request_header_version(version)).ok()?;
            let req = SaslHandshakeRequest::decode(&mut buf, version).ok()?;
            let offered = self.mechanisms();
            let chosen = match req.mechanism.as_str() {
                _ if offered.is_empty() => None,
                PLAIN => Some(Mechanism::Plain),
                m => ScramHash::from_mechanism(m).map(Mechanism::Scram),
            };
            let error_code = match (chosen, self.user.is_some()) {
                (_, true) => ILLEGAL_SASL_STATE,
                (None, _) => UNSUPPORTED_SASL_MECHANISM,
                (Some(_), _) => 0,
            };
            self.mechanism = chosen;
            self.scram = None;
            // v0: the exchange goes on in raw tokens, not SaslAuthenticate.
            self.raw = version == 0 && error_code == 0;
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
            (_, true) | (None, _) => Err((ILLEGAL_SASL_STATE, "no SASL login expected now".into())),
            (Some(mech), _) => self.login_step(mech, &req.auth_bytes, quota),
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
            Err((code, message)) => {
                tracing::info!(code, %message, "kafka SASL login failed");
                let resp = SaslAuthenticateResponse::default()
                    .with_error_code(code)
                    .with_error_message(Some(StrBytes::from_string(message)));
                Some(Outcome::ReplyThenClose(frame(
                    api,
                    version,
                    correlation,
                    &resp,
                )?))
            }
        }
    }

    /// One SaslAuthenticate token of `mech`, with the limits: a new login
    /// from an address past its failed logins is refused unchecked; a
    /// success as a principal at its connection limit fails.
    fn login_step(
        &mut self,
        mech: Mechanism,
        token: &[u8],
        quota: &mut ConnQuota,
    ) -> Result<Bytes, Failure> {
        if self.scram.is_none() {
            quota
                .login_allowed()
                .map_err(|e| (SASL_AUTHENTICATION_FAILED, e.to_string()))?;
        }
        let result = match mech {
            Mechanism::Plain => self.plain(token).map(|()| Bytes::new()),
            Mechanism::Scram(hash) => self.scram_step(hash, token),
        };
        if result.is_err() {
            quota.login_result(mech.label(), false);
            return result.map_err(|code| (code, failed().1));
        }
        if let Some(user) = &self.user {
            quota.login_result(mech.label(), true);
            if let Err(e) = quota.login(&Principal::User(user.clone())) {
                self.user = None;
                return Err((SASL_AUTHENTICATION_FAILED, e.to_string()));
            }
        }
        result.map_err(|code| (code, failed().1))
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

    /// SCRAM: client-first, then client-final.
    fn scram_step(&mut self, hash: ScramHash, token: &[u8]) -> Result<Bytes, i16> {
        use base64::Engine as _;
        match self.scram.take() {
            None => {
                let first = ClientFirst::parse(token).map_err(|_| SASL_AUTHENTICATION_FAILED)?;
                let nonce = crate::security::users::random_bytes::<18>()
                    .map_err(|_| SASL_AUTHENTICATION_FAILED)?;
                let nonce = base64::engine::general_purpose::STANDARD_NO_PAD.encode(nonce);
                let users = self.auth.users();
                let (ex, msg) = match hash {
                    ScramHash::Sha256 => ServerExchange::start(
                        &first,
                        users.get(&first.username),
                        self.auth.decoy().clone(),
                        &nonce,
                    ),
                    ScramHash::Sha512 => ServerExchange::start_sha512(
                        &first,
                        users.get512(&first.username),
                        self.auth.decoy512().clone(),
                        &nonce,
                    ),
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::protocol::Encodable;

    fn request<T: Encodable>(key: ApiKey, version: i16, body: &T) -> Vec<u8> {
        let mut out = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(7)
            .encode(&mut out, key.request_header_version(version))
            .unwrap();
        body.encode(&mut out, version).unwrap();
        out.to_vec()
    }

    fn auth() -> &'static Arc<Authenticator> {
        static AUTH: std::sync::OnceLock<(tempfile::TempDir, Arc<Authenticator>)> =
            std::sync::OnceLock::new();
        &AUTH
            .get_or_init(|| {
                let dir = tempfile::tempdir().unwrap();
                let auth = Authenticator::open(dir.path(), AuthMode::Optional).unwrap();
                auth.users()
                    .put_all("u", crate::security::users::new_verifiers("pw").unwrap())
                    .unwrap();
                (dir, Arc::new(auth))
            })
            .1
    }

    fn authenticate(token: &[u8]) -> Vec<u8> {
        request(
            ApiKey::SaslAuthenticate,
            1,
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::copy_from_slice(token)),
        )
    }

    fn handshake(m: &'static str) -> Vec<u8> {
        request(
            ApiKey::SaslHandshake,
            1,
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(m)),
        )
    }

    /// A SaslAuthenticate v1 response frame, decoded (size, correlation id, body).
    fn auth_response(frame: &[u8]) -> SaslAuthenticateResponse {
        let mut b = Bytes::copy_from_slice(&frame[8..]);
        SaslAuthenticateResponse::decode(&mut b, 1).unwrap()
    }

    #[test]
    fn scram_sha512_logs_in_and_a_user_without_a_512_verifier_cannot() {
        use flume_protocol::scram::ClientExchange;
        auth()
            .users()
            .put("old", crate::security::users::new_verifier("pw").unwrap())
            .unwrap();
        for (user, ok) in [("u", true), ("old", false)] {
            let peer = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
            let mut quota = ConnQuota::new(
                crate::security::quota::Quotas::unlimited(),
                peer,
                &Principal::Anonymous,
            );
            let mut sasl = KafkaSasl::new(Arc::clone(auth()));
            let (mut c, first) =
                ClientExchange::start_with(ScramHash::Sha512, user, "pw", "nonce").unwrap();
            let hs = Bytes::from(handshake("SCRAM-SHA-512"));
            assert!(matches!(
                sasl.handle(hs, &mut quota),
                Some(Outcome::Reply(_))
            ));
            let Some(Outcome::Reply(r1)) =
                sasl.handle(Bytes::from(authenticate(&first)), &mut quota)
            else {
                panic!("no server-first")
            };
            let fin = c.respond(&auth_response(&r1).auth_bytes).unwrap();
            match sasl.handle(Bytes::from(authenticate(&fin)), &mut quota) {
                Some(Outcome::LoggedIn(r, p)) => {
                    assert!(ok, "{user} logged in");
                    assert_eq!(p, Principal::User(user.into()));
                    c.verify(&auth_response(&r).auth_bytes).unwrap();
                }
                Some(Outcome::ReplyThenClose(r)) => {
                    assert!(!ok, "{user} should log in");
                    assert_eq!(auth_response(&r).error_code, SASL_AUTHENTICATION_FAILED);
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn handshake_v0_goes_on_in_raw_tokens() {
        let peer = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
        let mut quota = ConnQuota::new(
            crate::security::quota::Quotas::unlimited(),
            peer,
            &Principal::Anonymous,
        );
        for (password, ok) in [("pw", true), ("nope", false)] {
            let mut sasl = KafkaSasl::new(Arc::clone(auth()));
            let hs = request(
                ApiKey::SaslHandshake,
                0,
                &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
            );
            assert!(matches!(
                sasl.handle(Bytes::from(hs), &mut quota),
                Some(Outcome::Reply(_))
            ));
            assert!(sasl.wants_raw_token());
            match sasl.raw_token(format!("\0u\0{password}").as_bytes(), &mut quota) {
                Outcome::LoggedIn(r, p) => {
                    assert!(ok);
                    assert_eq!(r, [0, 0, 0, 0], "PLAIN's answer is an empty token");
                    assert_eq!(p, Principal::User("u".into()));
                    assert!(!sasl.wants_raw_token());
                }
                Outcome::ReplyThenClose(r) => {
                    assert!(!ok);
                    assert!(r.is_empty(), "v0 failures close without an answer");
                }
                Outcome::Reply(_) => panic!("PLAIN is one step"),
            }
        }
    }

    proptest::proptest! {
        /// Any bytes as SASL frames, and any tokens after each mechanism's
        /// handshake: an answer or a close, never a panic.
        #[test]
        fn garbage_sasl_frames_never_panic(
            raw in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64), 0..4),
            tokens in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200), 1..3),
            mech in 0usize..4,
        ) {
            let _ = crate::kafka::handle_sasl_frames(auth(), raw.iter().map(Vec::as_slice));
            let mut frames = vec![handshake(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OTHER"][mech])];
            frames.extend(tokens.iter().map(|t| authenticate(t)));
            let out = crate::kafka::handle_sasl_frames(auth(), frames.iter().map(Vec::as_slice));
            proptest::prop_assert!(!out.is_empty());
            // SaslHandshake v0, then the tokens raw.
            let m = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OTHER"][mech];
            let mut raw = vec![request(
                ApiKey::SaslHandshake,
                0,
                &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(m)),
            )];
            raw.extend(tokens.iter().cloned());
            let out = crate::kafka::handle_sasl_frames(auth(), raw.iter().map(Vec::as_slice));
            proptest::prop_assert!(!out.is_empty());
        }
    }
}

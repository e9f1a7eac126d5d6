//! Authentication on the Flume protocol: `--auth off|optional|required`,
//! the user store, and one connection's AUTHENTICATE exchange (SCRAM-SHA-256,
//! see [`flume_protocol::scram`]).
//!
//! - `off` (the default): AUTHENTICATE is refused, every request is served.
//! - `optional`: a connection may authenticate (its principal becomes the
//!   user); one that does not is served as `ANONYMOUS`.
//! - `required`: every request but AUTHENTICATE, before a successful one,
//!   gets AUTHENTICATION_REQUIRED and nothing else happens.
//!
//! A failed attempt is answered after a delay that doubles with each failure
//! on the connection (25 ms, 50, 100, ... up to 2 s), and the connection is closed after
//! [`MAX_FAILURES`]: a guesser gets a handful of tries per TCP handshake
//! (and per TLS handshake, with TLS). The proof is checked in constant time,
//! and an unknown user fails exactly like a wrong password.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD_NO_PAD as B64;
use base64::Engine as _;
use bytes::Bytes;
use flume_protocol::scram::{self, ClientFirst, ServerExchange, Verifier, Verifier512};
use flume_protocol::{AuthenticateRequest, AuthenticateResponse, ErrorCode};

use super::users::{random_bytes, UserStore};
use super::Principal;
use crate::error::BrokerError;

/// Failed AUTHENTICATE attempts after which a connection is closed.
pub const MAX_FAILURES: u32 = 5;
/// Delay before answering the first failure; doubles with each, up to [`MAX_DELAY`].
pub const FIRST_DELAY: Duration = Duration::from_millis(25);
/// Longest delay before answering a failure.
pub const MAX_DELAY: Duration = Duration::from_secs(2);

/// Whether clients must, may or cannot authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthMode {
    /// No authentication (the default; the broker warns when it listens
    /// beyond loopback like this).
    #[default]
    Off,
    /// Clients may authenticate; those that do not are anonymous.
    Optional,
    /// Every request before a successful AUTHENTICATE is refused.
    Required,
}

impl FromStr for AuthMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(AuthMode::Off),
            "optional" => Ok(AuthMode::Optional),
            "required" => Ok(AuthMode::Required),
            other => Err(format!(
                "--auth must be off, optional or required, not {other:?}"
            )),
        }
    }
}

impl std::fmt::Display for AuthMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AuthMode::Off => "off",
            AuthMode::Optional => "optional",
            AuthMode::Required => "required",
        })
    }
}

/// The broker's side of authentication: the mode and the users.
#[derive(Debug)]
pub struct Authenticator {
    mode: AuthMode,
    users: UserStore,
    /// Stands in for unknown users, so they fail like a wrong password.
    decoy: Verifier,
    /// The same for SCRAM-SHA-512 (on the Kafka listener), and for users
    /// without a SHA-512 verifier.
    decoy512: Verifier512,
}

impl Authenticator {
    /// Opens the user store of `data_dir`. Blocking: call off the executor.
    ///
    /// # Errors
    /// The store cannot be read, or there is no randomness.
    pub fn open(data_dir: &std::path::Path, mode: AuthMode) -> Result<Self, BrokerError> {
        let users = UserStore::open(data_dir)?;
        let decoy = Verifier::new(
            &B64.encode(random_bytes::<16>()?),
            &random_bytes::<16>()?,
            super::users::ITERATIONS,
        );
        let decoy512 = Verifier512::new(
            &B64.encode(random_bytes::<16>()?),
            &random_bytes::<16>()?,
            super::users::ITERATIONS,
        );
        Ok(Authenticator {
            mode,
            users,
            decoy,
            decoy512,
        })
    }

    /// The mode.
    pub fn mode(&self) -> AuthMode {
        self.mode
    }

    /// The users.
    pub fn users(&self) -> &UserStore {
        &self.users
    }

    /// The verifier that stands in for unknown users.
    pub(crate) fn decoy(&self) -> &Verifier {
        &self.decoy
    }

    /// The SCRAM-SHA-512 verifier that stands in for unknown users.
    pub(crate) fn decoy512(&self) -> &Verifier512 {
        &self.decoy512
    }
}

/// What one AUTHENTICATE step comes to.
#[derive(Debug)]
pub enum Step {
    /// The next server message; the exchange goes on.
    Continue(AuthenticateResponse),
    /// The exchange succeeded: the last server message and the new principal.
    Done(AuthenticateResponse, Principal),
    /// It failed: answer with the code after `delay`; `close` after the answer.
    Failed {
        /// The error code.
        code: ErrorCode,
        /// Wait this long before answering.
        delay: Duration,
        /// Close the connection once answered.
        close: bool,
    },
}

/// Serves a USERS request from `principal` (blocking: the store writes its
/// file). Only a logged-in user named in `admins` may.
pub fn users_request(
    auth: &Authenticator,
    admins: &[String],
    principal: &super::Principal,
    payload: &[u8],
) -> Result<flume_protocol::UsersResponse, ErrorCode> {
    use flume_protocol::{
        Decode, UsersRequest, UsersResponse, USERS_LIST, USERS_PUT, USERS_REMOVE,
    };
    let super::Principal::User(who) = principal else {
        return Err(ErrorCode::NotAuthorized);
    };
    if !admins.iter().any(|a| a == who) {
        tracing::info!(user = %who, "USERS refused: not an admin");
        return Err(ErrorCode::NotAuthorized);
    }
    let req = UsersRequest::decode_exact(payload).map_err(|_| ErrorCode::InvalidRequest)?;
    match req.op {
        USERS_LIST => {}
        USERS_PUT => {
            let key =
                |b: &Bytes| <[u8; 32]>::try_from(b.as_ref()).map_err(|_| ErrorCode::InvalidRequest);
            let iterations = u32::try_from(req.iterations)
                .ok()
                .filter(|i| *i >= scram::MIN_ITERATIONS)
                .ok_or(ErrorCode::InvalidRequest)?;
            let verifier = Verifier {
                salt: req.salt.to_vec(),
                iterations,
                stored_key: key(&req.stored_key)?,
                server_key: key(&req.server_key)?,
            };
            auth.users.put(&req.name, verifier).map_err(|e| match e {
                BrokerError::Config(_) => ErrorCode::InvalidRequest,
                e => e.code(),
            })?;
            tracing::info!(user = %req.name, by = %who, "user added or changed");
        }
        USERS_REMOVE => {
            auth.users.remove(&req.name).map_err(|e| e.code())?;
            tracing::info!(user = %req.name, by = %who, "user removed");
        }
        _ => return Err(ErrorCode::InvalidRequest),
    }
    Ok(UsersResponse {
        users: auth.users.list(),
    })
}

/// One connection's authentication state.
#[derive(Debug)]
pub struct ConnAuth {
    auth: Arc<Authenticator>,
    exchange: Option<ServerExchange>,
    user: Option<String>,
    failures: u32,
}

impl ConnAuth {
    /// A connection that has not authenticated.
    pub fn new(auth: Arc<Authenticator>) -> Self {
        ConnAuth {
            auth,
            exchange: None,
            user: None,
            failures: 0,
        }
    }

    /// The broker's authenticator.
    pub fn authenticator(&self) -> &Arc<Authenticator> {
        &self.auth
    }

    /// Whether an exchange is under way (its first message was answered).
    pub fn in_exchange(&self) -> bool {
        self.exchange.is_some()
    }

    /// Whether a request other than AUTHENTICATE may be served now.
    pub fn allows_requests(&self) -> bool {
        self.auth.mode != AuthMode::Required || self.user.is_some()
    }

    fn fail(&mut self, why: &str) -> Step {
        self.exchange = None;
        self.failures = self.failures.saturating_add(1);
        tracing::info!(
            failures = self.failures,
            reason = why,
            "AUTHENTICATE failed"
        );
        let exp = (self.failures - 1).min(8);
        Step::Failed {
            code: ErrorCode::AuthenticationFailed,
            delay: FIRST_DELAY.saturating_mul(1 << exp).min(MAX_DELAY),
            close: self.failures >= MAX_FAILURES,
        }
    }

    /// Takes one AUTHENTICATE request (its payload, undecoded).
    pub fn step(&mut self, payload: &[u8]) -> Step {
        use flume_protocol::Decode;
        if self.auth.mode == AuthMode::Off {
            return self.fail("authentication is off");
        }
        let req = match AuthenticateRequest::decode_exact(payload) {
            Ok(r) => r,
            Err(_) => return self.fail("the request does not decode"),
        };
        if req.mechanism != scram::MECHANISM {
            return self.fail("unsupported mechanism");
        }
        match self.exchange.take() {
            None => {
                if self.user.is_some() {
                    return self.fail("already authenticated");
                }
                let first = match ClientFirst::parse(&req.payload) {
                    Ok(f) => f,
                    Err(_) => return self.fail("malformed client-first"),
                };
                let nonce = match random_bytes::<18>() {
                    Ok(b) => B64.encode(b),
                    Err(_) => return self.fail("no randomness"),
                };
                let verifier = self.auth.users.get(&first.username);
                match ServerExchange::start(&first, verifier, self.auth.decoy.clone(), &nonce) {
                    Ok((ex, msg)) => {
                        self.exchange = Some(ex);
                        Step::Continue(AuthenticateResponse {
                            payload: Bytes::from(msg),
                        })
                    }
                    Err(_) => self.fail("bad server nonce"),
                }
            }
            Some(ex) => match ex.finish(&req.payload) {
                Ok(msg) => {
                    let name = ex.username().to_owned();
                    self.user = Some(name.clone());
                    self.failures = 0;
                    tracing::debug!(user = %name, "authenticated");
                    Step::Done(
                        AuthenticateResponse {
                            payload: Bytes::from(msg),
                        },
                        Principal::User(name),
                    )
                }
                Err(_) => self.fail("wrong user name or password"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authenticator(mode: AuthMode) -> (tempfile::TempDir, Arc<Authenticator>) {
        let dir = tempfile::tempdir().unwrap();
        let auth = Authenticator::open(dir.path(), mode).unwrap();
        auth.users()
            .put("u", super::super::users::new_verifier("pw").unwrap())
            .unwrap();
        (dir, Arc::new(auth))
    }

    #[test]
    fn failures_are_delayed_more_each_time_and_then_close() {
        let (_dir, auth) = authenticator(AuthMode::Required);
        let mut conn = ConnAuth::new(auth);
        assert!(!conn.allows_requests());
        let mut delays = Vec::new();
        for i in 1..=MAX_FAILURES {
            match conn.step(b"garbage") {
                Step::Failed { delay, close, .. } => {
                    delays.push(delay);
                    assert_eq!(close, i == MAX_FAILURES);
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(delays[0], FIRST_DELAY);
        assert!(delays.windows(2).all(|w| w[1] == (w[0] * 2).min(MAX_DELAY)));
    }

    proptest::proptest! {
        /// Any bytes as a first or second AUTHENTICATE: an answer, never a panic.
        #[test]
        fn garbage_authenticate_payloads_never_panic(
            a in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
        ) {
            use flume_protocol::Encode;
            static AUTH: std::sync::OnceLock<(tempfile::TempDir, Arc<Authenticator>)> =
                std::sync::OnceLock::new();
            let (_, auth) = AUTH.get_or_init(|| authenticator(AuthMode::Optional));
            let mut conn = ConnAuth::new(Arc::clone(auth));
            let _ = conn.step(&a);
            let mut wrapped = Vec::new();
            AuthenticateRequest { mechanism: scram::MECHANISM.into(), payload: Bytes::from(b.clone()) }
                .encode(&mut wrapped);
            let _ = conn.step(&wrapped);
            let mut first = Vec::new();
            AuthenticateRequest { mechanism: scram::MECHANISM.into(), payload: Bytes::from_static(b"n,,n=u,r=abc") }
                .encode(&mut first);
            let mut conn = ConnAuth::new(Arc::clone(auth));
            let _ = conn.step(&first);
            let _ = conn.step(&wrapped);
            proptest::prop_assert!(conn.user.is_none());
        }
    }
}

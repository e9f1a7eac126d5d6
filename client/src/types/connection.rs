//! Connection settings, the same for both transports: timeouts, in-flight
//! limits, busy polling, TLS and credentials.

use std::time::Duration;

pub use flume_rt::BusyPoll;

use crate::tls::TlsConfig;

/// Connection settings, shared by every client type: start from
/// [`ConnectionConfig::default`] and change fields with the builder methods.
///
/// ```
/// use std::time::Duration;
/// let c = flume_client::ConnectionConfig::default().request_timeout(Duration::from_secs(5));
/// assert_eq!(c.request_timeout, Duration::from_secs(5));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConnectionConfig {
    /// Time allowed for one request (long-poll fetches add their wait to it).
    pub request_timeout: Duration,
    /// Time allowed to open the TCP connection.
    pub connect_timeout: Duration,
    /// Most requests in flight on the connection; further calls wait.
    pub max_in_flight: usize,
    /// Largest response frame accepted.
    pub max_frame_bytes: usize,
    /// Reconnect backoff: first delay, doubled up to `backoff_max`.
    pub backoff_initial: Duration,
    /// Largest reconnect delay.
    pub backoff_max: Duration,
    /// Before waiting for a response the usual way (parking the thread until
    /// the reactor reports the socket readable), keep trying to read for a
    /// while, yielding to other tasks between tries: a reply that comes within
    /// microseconds then costs no wake-up of a parked thread (tens of
    /// microseconds on a VM). The default, [`BusyPoll::Adaptive`] up to 50 µs,
    /// spins only as long as spinning has recently paid off and falls to zero
    /// for a slow or idle broker (see [`flume_rt::spin`]); [`BusyPoll::Off`]
    /// never spins; [`BusyPoll::Fixed`] always spins its time. One waiter of a
    /// connection spins at a time (its reads hand the others their responses),
    /// and while more of the process's connections wait than it has CPUs, an
    /// adaptive spin lasts at most 10 µs (it would hold the CPU the others
    /// need: [`flume_rt::spin::crowded`]).
    /// The builder takes a [`Duration`] too: zero is off, more is fixed.
    pub busy_poll: BusyPoll,
    /// TLS, off by default: with it, the connection runs a TLS handshake
    /// (within `connect_timeout`) and verifies the broker's certificate.
    pub tls: Option<TlsConfig>,
    /// A user name and password: every connection (and every reconnect)
    /// logs in with SCRAM-SHA-256 (AUTHENTICATE) before its first request.
    /// The password never crosses the network.
    pub credentials: Option<Credentials>,
}

/// A user name and password for [`ConnectionConfig::credentials`]
/// (`Debug` does not show the password).
#[derive(Clone)]
pub struct Credentials {
    /// The user name.
    pub username: String,
    password: String,
    /// How to log in to a Kafka broker (a `kafka://` address); Flume's own
    /// protocol always uses SCRAM-SHA-256.
    pub mechanism: SaslMechanism,
}

/// The SASL mechanism [`Credentials`] log in with on a Kafka broker (a
/// `kafka://` address). Flume's own protocol logs in with SCRAM-SHA-256
/// whatever this says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SaslMechanism {
    /// SCRAM-SHA-256 (the default): the password never crosses the network.
    #[default]
    ScramSha256,
    /// SCRAM-SHA-512.
    ScramSha512,
    /// PLAIN: the password is sent as is (use it over TLS only).
    Plain,
}

impl std::str::FromStr for SaslMechanism {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_uppercase().as_str() {
            "SCRAM-SHA-256" => Ok(SaslMechanism::ScramSha256),
            "SCRAM-SHA-512" => Ok(SaslMechanism::ScramSha512),
            "PLAIN" => Ok(SaslMechanism::Plain),
            _ => Err(format!(
                "SASL mechanism must be SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN, not {s:?}"
            )),
        }
    }
}

impl Credentials {
    /// A user name and its password.
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> Self {
        Credentials {
            username: username.into(),
            password: password.into(),
            mechanism: SaslMechanism::default(),
        }
    }

    /// Sets [`Credentials::mechanism`].
    #[must_use]
    pub fn mechanism(mut self, m: SaslMechanism) -> Self {
        self.mechanism = m;
        self
    }

    pub(crate) fn password(&self) -> &str {
        &self.password
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("mechanism", &self.mechanism)
            .finish_non_exhaustive()
    }
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        ConnectionConfig {
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            max_in_flight: 64,
            max_frame_bytes: flume_protocol::frame::DEFAULT_MAX_FRAME_BYTES,
            backoff_initial: Duration::from_millis(50),
            backoff_max: Duration::from_secs(2),
            busy_poll: BusyPoll::default(),
            tls: None,
            credentials: None,
        }
    }
}

impl ConnectionConfig {
    /// Sets [`ConnectionConfig::request_timeout`].
    #[must_use]
    pub fn request_timeout(mut self, v: Duration) -> Self {
        self.request_timeout = v;
        self
    }
    /// Sets [`ConnectionConfig::connect_timeout`].
    #[must_use]
    pub fn connect_timeout(mut self, v: Duration) -> Self {
        self.connect_timeout = v;
        self
    }
    /// Sets [`ConnectionConfig::max_in_flight`].
    #[must_use]
    pub fn max_in_flight(mut self, v: usize) -> Self {
        self.max_in_flight = v;
        self
    }
    /// Sets [`ConnectionConfig::max_frame_bytes`].
    #[must_use]
    pub fn max_frame_bytes(mut self, v: usize) -> Self {
        self.max_frame_bytes = v;
        self
    }
    /// Sets [`ConnectionConfig::backoff_initial`].
    #[must_use]
    pub fn backoff_initial(mut self, v: Duration) -> Self {
        self.backoff_initial = v;
        self
    }
    /// Sets [`ConnectionConfig::backoff_max`].
    #[must_use]
    pub fn backoff_max(mut self, v: Duration) -> Self {
        self.backoff_max = v;
        self
    }
    /// Sets [`ConnectionConfig::busy_poll`].
    #[must_use]
    pub fn busy_poll(mut self, v: impl Into<BusyPoll>) -> Self {
        self.busy_poll = v.into();
        self
    }
    /// Sets [`ConnectionConfig::tls`]: connect with TLS.
    #[must_use]
    pub fn tls(mut self, v: TlsConfig) -> Self {
        self.tls = Some(v);
        self
    }
    /// Sets [`ConnectionConfig::credentials`]: log in as `username`.
    #[must_use]
    pub fn credentials(mut self, username: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some(Credentials::new(username, password));
        self
    }
}

//! Limits per principal, so one tenant cannot starve
//! another, and the per-address login rate limit.
//!
//! - **Connections per principal** (`--max-connections-per-principal`,
//!   by default the broker's `--max-connections`, so out of the box one
//!   principal, or one client host, may hold every connection, as Kafka's
//!   `max.connections.per.ip` allows; a fixed default would refuse the members
//!   of many groups run from one host), counted over the Flume and Kafka
//!   listeners together. A user counts from its login, a
//!   client certificate's subject from the TLS handshake; the anonymous
//!   principal counts *per peer IP address* (many unrelated clients share
//!   it). A connection over the limit is refused once its principal is final:
//!   its login is answered with the protocol's error and the connection is
//!   closed, and an anonymous connection over its address' limit may still log
//!   in (it then counts as its user) but any other request closes it (Flume:
//!   LIMIT_REACHED first).
//! - **Produce bytes per second per principal**
//!   (`--produce-quota-bytes-per-sec`, default off): a token bucket per
//!   principal on the broker's [`Clock`], holding one second of the rate.
//!   A produce request is always served; when it takes the bucket below
//!   zero, the time the rate needs to pay the debt back is the throttle
//!   time: Kafka's Produce response carries it (`throttle_time_ms`), and the
//!   connection reads nothing for that long (what Kafka does since KIP-219).
//!   The debt is capped at [`MAX_THROTTLE`].
//! - **Failed logins per peer address** ([`LOGIN_BURST`] failures, then one
//!   more every [`LOGIN_REFILL`]), over every connection and both protocols:
//!   past them, a login from that address is refused before any password is
//!   checked.
//!
//! Every map is bounded: the connection counts by the open connections (an
//! entry goes when its last connection does), the buckets by
//! [`MAX_TRACKED`] keys each; when full, idle buckets (full again) are
//! dropped first, then the least recently used one, whose debt is forgiven.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flume_rt::sync::lock;

use super::Principal;
use crate::clock::Clock;

/// Most keys a bucket map tracks (principals for produce, addresses for logins).
pub const MAX_TRACKED: usize = 10_000;
/// Longest throttle time: the most debt a principal's bucket can run up.
pub const MAX_THROTTLE: Duration = Duration::from_secs(30);
/// Failed logins an address may make at once.
pub const LOGIN_BURST: u64 = 10;
/// One more failed login is allowed per this much time.
pub const LOGIN_REFILL: Duration = Duration::from_secs(5);

/// A limit that refused something.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuotaError {
    /// The principal has as many connections open as it may.
    #[error("connection limit per principal reached: {principal} already has {limit} connections open (--max-connections-per-principal {limit})")]
    Connections {
        /// The principal (for the anonymous one, with its address).
        principal: String,
        /// The limit.
        limit: usize,
    },
    /// Too many failed logins from the peer's address.
    #[error("too many failed logins from {addr}; retry in {} ms", retry.as_millis())]
    Logins {
        /// The peer's address.
        addr: IpAddr,
        /// When the next attempt is allowed.
        retry: Duration,
    },
}

/// What the limits are kept per: a principal, or for the anonymous one, the
/// peer's address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum QuotaKey {
    /// The anonymous principal, from this address.
    Anonymous(IpAddr),
    /// Any other principal.
    Principal(Principal),
}

impl QuotaKey {
    /// The key of `principal` connected from `peer`.
    pub fn new(principal: &Principal, peer: IpAddr) -> QuotaKey {
        if principal.is_anonymous() {
            QuotaKey::Anonymous(peer)
        } else {
            QuotaKey::Principal(principal.clone())
        }
    }

    /// The principal's class, the only label metrics carry (user names are
    /// not bounded).
    pub fn class(&self) -> PrincipalClass {
        match self {
            QuotaKey::Anonymous(_) => PrincipalClass::Anonymous,
            QuotaKey::Principal(Principal::Certificate(_)) => PrincipalClass::Certificate,
            QuotaKey::Principal(_) => PrincipalClass::User,
        }
    }
}

impl std::fmt::Display for QuotaKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QuotaKey::Anonymous(ip) => write!(f, "ANONYMOUS from {ip}"),
            QuotaKey::Principal(p) => write!(f, "{p}"),
        }
    }
}

/// The kinds of principal, as metrics label them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrincipalClass {
    /// No certificate and no login.
    Anonymous = 0,
    /// A client certificate's subject.
    Certificate = 1,
    /// A logged-in user.
    User = 2,
}

impl PrincipalClass {
    /// Every class, in label order.
    pub const ALL: [PrincipalClass; 3] = [
        PrincipalClass::Anonymous,
        PrincipalClass::Certificate,
        PrincipalClass::User,
    ];

    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            PrincipalClass::Anonymous => "anonymous",
            PrincipalClass::Certificate => "certificate",
            PrincipalClass::User => "user",
        }
    }
}

/// A token bucket in millionths of a unit (a byte, a login), on a clock in
/// milliseconds. It may go into debt (down to `-max_debt`); the throttle
/// time is how long the rate takes to pay the debt back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBucket {
    /// Millionths of a unit in the bucket (negative: debt).
    tokens: i128,
    /// The bucket's size, in millionths.
    capacity: i128,
    /// The most debt, in millionths.
    max_debt: i128,
    /// Millionths of a unit added per millisecond (= thousandths of a unit per second).
    per_ms: i128,
    /// When the bucket was last brought up to date.
    last_ms: u64,
}

impl TokenBucket {
    /// A full bucket of `capacity` units, refilled with `milli_per_sec`
    /// thousandths of a unit per second (at least 1), that may owe up to
    /// `max_debt` units.
    pub fn new(capacity: u64, milli_per_sec: u64, max_debt: u64, now_ms: u64) -> TokenBucket {
        let capacity = i128::from(capacity) * 1_000_000;
        TokenBucket {
            tokens: capacity,
            capacity,
            max_debt: i128::from(max_debt) * 1_000_000,
            per_ms: i128::from(milli_per_sec.max(1)),
            last_ms: now_ms,
        }
    }

    fn refill(&mut self, now_ms: u64) {
        let elapsed = i128::from(now_ms.saturating_sub(self.last_ms));
        self.tokens = self
            .tokens
            .saturating_add(elapsed.saturating_mul(self.per_ms))
            .min(self.capacity);
        self.last_ms = self.last_ms.max(now_ms);
    }

    /// How long until the bucket holds `units` (zero: it does now).
    fn wait_for(&self, units: i128) -> Duration {
        let missing = units.saturating_sub(self.tokens);
        if missing <= 0 {
            return Duration::ZERO;
        }
        // Rounded up: after this long the debt is paid.
        let ms = (missing + self.per_ms - 1) / self.per_ms;
        Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
    }

    /// Takes `units` at `now_ms` (into debt if need be); the throttle time:
    /// how long until the bucket is out of debt (zero when it is not in debt).
    pub fn take(&mut self, units: u64, now_ms: u64) -> Duration {
        self.refill(now_ms);
        self.tokens = self
            .tokens
            .saturating_sub(i128::from(units).saturating_mul(1_000_000))
            .max(-self.max_debt);
        self.wait_for(0)
    }

    /// Whether one unit may be taken at `now_ms`; if not, how long until it may.
    pub fn check(&mut self, now_ms: u64) -> Result<(), Duration> {
        self.refill(now_ms);
        match self.wait_for(1_000_000) {
            d if d.is_zero() => Ok(()),
            d => Err(d),
        }
    }

    /// Whether the bucket is full at `now_ms` (forgetting it changes nothing).
    pub fn is_idle(&self, now_ms: u64) -> bool {
        let elapsed = i128::from(now_ms.saturating_sub(self.last_ms));
        self.tokens
            .saturating_add(elapsed.saturating_mul(self.per_ms))
            >= self.capacity
    }
}

/// Token buckets by key, at most `cap` of them.
#[derive(Debug)]
struct Buckets<K> {
    map: HashMap<K, TokenBucket>,
    cap: usize,
}

impl<K: Hash + Eq + Clone> Buckets<K> {
    fn new(cap: usize) -> Self {
        Buckets {
            map: HashMap::new(),
            cap: cap.max(1),
        }
    }

    /// The bucket of `key`, made by `make` if there is none; when the map is
    /// full, idle buckets go first, then the least recently used one.
    fn get(
        &mut self,
        key: &K,
        now_ms: u64,
        make: impl FnOnce() -> TokenBucket,
    ) -> &mut TokenBucket {
        if !self.map.contains_key(key) && self.map.len() >= self.cap {
            self.map.retain(|_, b| !b.is_idle(now_ms));
            if self.map.len() >= self.cap {
                let oldest = self
                    .map
                    .iter()
                    .min_by_key(|(_, b)| b.last_ms)
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    self.map.remove(&k);
                }
            }
        }
        self.map.entry(key.clone()).or_insert_with(make)
    }

    fn len(&self) -> usize {
        self.map.len()
    }
}

/// Counters of the limits, for `/metrics` (labels are bounded: principal
/// classes and mechanisms, never names).
#[derive(Debug, Default)]
pub struct QuotaStats {
    throttle_ms: [AtomicU64; 3],
    connections_refused: AtomicU64,
    logins_limited: AtomicU64,
    /// By mechanism ([`Mechanism`] order), successes then failures.
    logins: [[AtomicU64; 2]; 3],
}

/// A login mechanism, as metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    /// SCRAM-SHA-256 (Flume AUTHENTICATE or Kafka SASL).
    ScramSha256 = 0,
    /// SCRAM-SHA-512 (Kafka SASL).
    ScramSha512 = 1,
    /// PLAIN (Kafka SASL).
    Plain = 2,
}

impl Mechanism {
    /// Every mechanism, in label order.
    pub const ALL: [Mechanism; 3] = [
        Mechanism::ScramSha256,
        Mechanism::ScramSha512,
        Mechanism::Plain,
    ];

    /// The SASL name.
    pub fn label(self) -> &'static str {
        match self {
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
            Mechanism::Plain => "PLAIN",
        }
    }
}

impl QuotaStats {
    /// Milliseconds of throttling given to principals of `class`.
    pub fn throttle_ms(&self, class: PrincipalClass) -> u64 {
        self.throttle_ms[class as usize].load(Ordering::Relaxed)
    }

    /// Connections refused by the per-principal limit.
    pub fn connections_refused(&self) -> u64 {
        self.connections_refused.load(Ordering::Relaxed)
    }

    /// Logins refused by the per-address rate limit.
    pub fn logins_limited(&self) -> u64 {
        self.logins_limited.load(Ordering::Relaxed)
    }

    /// Successful and failed logins with `m`.
    pub fn logins(&self, m: Mechanism) -> (u64, u64) {
        let [ok, failed] = &self.logins[m as usize];
        (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed))
    }
}

/// The broker's limits (one for every listener).
#[derive(Debug)]
pub struct Quotas {
    /// Most connections per principal (changed by [`Quotas::set_limits`]).
    max_connections: AtomicUsize,
    connections: Mutex<HashMap<QuotaKey, usize>>,
    /// Bytes per second, when produce quotas are on (0: off).
    produce_rate: AtomicU64,
    produce: Mutex<Buckets<QuotaKey>>,
    logins: Mutex<Buckets<IpAddr>>,
    clock: Clock,
    /// What the limits did, for `/metrics`.
    stats: QuotaStats,
}

impl Quotas {
    /// Limits of `max_connections` per principal and, when set, a produce
    /// rate in bytes per second per principal, on `clock`.
    pub fn new(max_connections: usize, produce_rate: Option<u64>, clock: Clock) -> Arc<Quotas> {
        Self::with_cap(max_connections, produce_rate, clock, MAX_TRACKED)
    }

    /// As [`Quotas::new`] with bucket maps of at most `cap` keys (tests).
    pub fn with_cap(
        max_connections: usize,
        produce_rate: Option<u64>,
        clock: Clock,
        cap: usize,
    ) -> Arc<Quotas> {
        Arc::new(Quotas {
            max_connections: AtomicUsize::new(max_connections),
            connections: Mutex::new(HashMap::new()),
            produce_rate: AtomicU64::new(produce_rate.unwrap_or(0)),
            produce: Mutex::new(Buckets::new(cap)),
            logins: Mutex::new(Buckets::new(cap)),
            clock,
            stats: QuotaStats::default(),
        })
    }

    /// No limits worth the name (tests and fuzzing).
    pub fn unlimited() -> Arc<Quotas> {
        Self::new(usize::MAX, None, Clock::system())
    }

    /// Changes the limits while the broker runs (a configuration reload):
    /// connections already open stay open, a principal above the new limit
    /// opens no more until it is below; produce buckets start again at the
    /// new rate.
    pub fn set_limits(&self, max_connections: usize, produce_rate: Option<u64>) {
        self.max_connections
            .store(max_connections.max(1), Ordering::Relaxed);
        let rate = produce_rate.unwrap_or(0);
        if self.produce_rate.swap(rate, Ordering::Relaxed) != rate {
            lock(&self.produce).map.clear();
        }
    }

    /// The limits in force: connections per principal, produce bytes per second.
    pub fn limits(&self) -> (usize, Option<u64>) {
        let rate = self.produce_rate.load(Ordering::Relaxed);
        (
            self.max_connections.load(Ordering::Relaxed),
            (rate > 0).then_some(rate),
        )
    }

    /// The counters.
    pub fn stats(&self) -> &QuotaStats {
        &self.stats
    }

    /// Takes a connection slot for `key`.
    ///
    /// # Errors
    /// [`QuotaError::Connections`] when `key` has the most connections open.
    pub fn connect(self: &Arc<Self>, key: QuotaKey) -> Result<ConnSlot, QuotaError> {
        let mut conns = lock(&self.connections);
        let n = conns.entry(key.clone()).or_insert(0);
        let limit = self.max_connections.load(Ordering::Relaxed);
        if *n >= limit {
            if *n == 0 {
                conns.remove(&key);
            }
            self.stats()
                .connections_refused
                .fetch_add(1, Ordering::Relaxed);
            return Err(QuotaError::Connections {
                principal: key.to_string(),
                limit,
            });
        }
        *n += 1;
        Ok(ConnSlot {
            quotas: Arc::clone(self),
            key,
        })
    }

    /// Connections `key` has open.
    pub fn connections(&self, key: &QuotaKey) -> usize {
        lock(&self.connections).get(key).copied().unwrap_or(0)
    }

    /// Charges `bytes` of produce requests to `key`; the throttle time.
    pub fn produce(&self, key: &QuotaKey, bytes: usize) -> Duration {
        let rate = self.produce_rate.load(Ordering::Relaxed);
        if rate == 0 {
            return Duration::ZERO;
        }
        let now = self.clock.mono_ms();
        let max_debt = rate.saturating_mul(MAX_THROTTLE.as_secs());
        let throttle = lock(&self.produce)
            .get(key, now, || {
                TokenBucket::new(rate, rate.saturating_mul(1000), max_debt, now)
            })
            .take(u64::try_from(bytes).unwrap_or(u64::MAX), now);
        if !throttle.is_zero() {
            let ms = u64::try_from(throttle.as_millis()).unwrap_or(u64::MAX);
            self.stats().throttle_ms[key.class() as usize].fetch_add(ms, Ordering::Relaxed);
        }
        throttle
    }

    /// Whether `addr` may try to log in now.
    ///
    /// # Errors
    /// [`QuotaError::Logins`] with when it may again.
    pub fn login_allowed(&self, addr: IpAddr) -> Result<(), QuotaError> {
        let now = self.clock.mono_ms();
        let mut logins = lock(&self.logins);
        let Some(b) = logins.map.get_mut(&addr) else {
            return Ok(());
        };
        b.check(now).map_err(|retry| {
            self.stats().logins_limited.fetch_add(1, Ordering::Relaxed);
            QuotaError::Logins { addr, retry }
        })
    }

    /// Records a login with `mechanism` from `addr`: a failure takes one
    /// from the address' allowance.
    pub fn login_result(&self, addr: IpAddr, mechanism: Mechanism, ok: bool) {
        self.stats().logins[mechanism as usize][usize::from(!ok)].fetch_add(1, Ordering::Relaxed);
        if ok {
            return;
        }
        let now = self.clock.mono_ms();
        let per_sec_milli = u64::try_from(1_000_000 / LOGIN_REFILL.as_millis().max(1)).unwrap_or(1);
        lock(&self.logins)
            .get(&addr, now, || {
                TokenBucket::new(LOGIN_BURST, per_sec_milli, 0, now)
            })
            .take(1, now);
    }

    /// Addresses with failed logins on record.
    pub fn tracked_addresses(&self) -> usize {
        lock(&self.logins).len()
    }

    /// Principals with a produce bucket.
    pub fn tracked_producers(&self) -> usize {
        lock(&self.produce).len()
    }
}

/// One connection counted against its principal's limit until dropped.
#[derive(Debug)]
pub struct ConnSlot {
    quotas: Arc<Quotas>,
    key: QuotaKey,
}

impl ConnSlot {
    /// Whose slot this is.
    pub fn key(&self) -> &QuotaKey {
        &self.key
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        let mut conns = lock(&self.quotas.connections);
        if let Some(n) = conns.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                conns.remove(&self.key);
            }
        }
    }
}

/// One connection's standing with the limits.
#[derive(Debug)]
pub struct ConnQuota {
    quotas: Arc<Quotas>,
    peer: IpAddr,
    key: QuotaKey,
    /// Held while the connection is within its principal's limit.
    slot: Option<ConnSlot>,
    /// Why it is not.
    refused: Option<QuotaError>,
}

impl ConnQuota {
    /// A new connection from `peer` as `principal` (after its TLS handshake).
    pub fn new(quotas: Arc<Quotas>, peer: IpAddr, principal: &Principal) -> ConnQuota {
        let key = QuotaKey::new(principal, peer);
        let (slot, refused) = match quotas.connect(key.clone()) {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e)),
        };
        ConnQuota {
            quotas,
            peer,
            key,
            slot,
            refused,
        }
    }

    /// The peer's address.
    pub fn peer(&self) -> IpAddr {
        self.peer
    }

    /// The limits.
    pub fn quotas(&self) -> &Arc<Quotas> {
        &self.quotas
    }

    /// Whether the connection is within its principal's connection limit.
    ///
    /// # Errors
    /// The limit it is over.
    pub fn check(&self) -> Result<(), &QuotaError> {
        match &self.refused {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The connection logged in as `principal`: it now counts as that one.
    ///
    /// # Errors
    /// [`QuotaError::Connections`]: `principal` has the most connections
    /// open (the connection is to be closed).
    pub fn login(&mut self, principal: &Principal) -> Result<(), QuotaError> {
        let key = QuotaKey::new(principal, self.peer);
        let slot = self.quotas.connect(key.clone())?;
        self.slot = Some(slot);
        self.key = key;
        self.refused = None;
        Ok(())
    }

    /// Charges a produce request of `bytes`; the throttle time.
    pub fn produce(&self, bytes: usize) -> Duration {
        self.quotas.produce(&self.key, bytes)
    }

    /// Whether a login may be tried now from the peer's address.
    ///
    /// # Errors
    /// [`QuotaError::Logins`].
    pub fn login_allowed(&self) -> Result<(), QuotaError> {
        self.quotas.login_allowed(self.peer)
    }

    /// Records a login attempt's result.
    pub fn login_result(&self, mechanism: Mechanism, ok: bool) {
        self.quotas.login_result(self.peer, mechanism, ok);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    fn user(n: &str) -> Principal {
        Principal::User(n.into())
    }

    #[test]
    fn the_bucket_throttles_by_the_debt_and_refills_with_time() {
        // 1000 bytes/s, one second of burst, at most 5 s of debt.
        let mut b = TokenBucket::new(1000, 1_000_000, 5000, 0);
        assert_eq!(b.take(1000, 0), Duration::ZERO, "the burst is free");
        assert_eq!(b.take(500, 0), Duration::from_millis(500));
        assert_eq!(
            b.take(0, 250),
            Duration::from_millis(250),
            "paid back with time"
        );
        assert_eq!(b.take(0, 500), Duration::ZERO);
        assert!(!b.is_idle(500));
        assert!(b.is_idle(1500), "full again after a second");
        assert_eq!(
            b.take(1_000_000, 1500),
            Duration::from_secs(5),
            "the debt is capped"
        );
        assert_eq!(b.take(1, 1500), Duration::from_secs(5));
        // A clock that goes back changes nothing.
        assert_eq!(b.take(0, 10), Duration::from_secs(5));
    }

    #[test]
    fn produce_throttle_is_per_principal_on_the_injected_clock() {
        let clock = Clock::manual();
        let q = Quotas::new(10, Some(1000), clock.clone());
        let (a, b) = (QuotaKey::new(&user("a"), A), QuotaKey::new(&user("b"), A));
        assert_eq!(q.produce(&a, 1000), Duration::ZERO);
        assert_eq!(q.produce(&a, 2000), Duration::from_secs(2));
        assert_eq!(
            q.produce(&b, 1000),
            Duration::ZERO,
            "another tenant is not throttled"
        );
        clock.advance(Duration::from_millis(1500));
        assert_eq!(q.produce(&a, 0), Duration::from_millis(500));
        assert_eq!(q.stats().throttle_ms(PrincipalClass::User), 2500);
        assert_eq!(q.stats().throttle_ms(PrincipalClass::Anonymous), 0);
        // Off: never throttled.
        let off = Quotas::new(10, None, clock);
        assert_eq!(off.produce(&a, usize::MAX), Duration::ZERO);
        assert_eq!(off.tracked_producers(), 0);
    }

    #[test]
    fn limits_change_while_running() {
        let clock = Clock::manual();
        let q = Quotas::new(1, None, clock.clone());
        let a = QuotaKey::new(&user("a"), A);
        let first = q.connect(a.clone()).unwrap();
        assert!(q.connect(a.clone()).is_err());
        assert_eq!(q.produce(&a, 1_000_000), Duration::ZERO, "no quota yet");
        q.set_limits(2, Some(1000));
        assert_eq!(q.limits(), (2, Some(1000)));
        let second = q.connect(a.clone()).unwrap();
        assert_eq!(q.produce(&a, 3000), Duration::from_secs(2), "the new rate");
        q.set_limits(1, None);
        assert_eq!(q.limits(), (1, None));
        assert!(
            q.connect(a.clone()).is_err(),
            "above the new limit: open ones stay, no new one"
        );
        assert_eq!(q.connections(&a), 2);
        assert_eq!(q.produce(&a, 1_000_000), Duration::ZERO, "quota off again");
        assert_eq!(q.tracked_producers(), 0);
        drop((first, second));
    }

    #[test]
    fn the_bucket_map_is_bounded_and_drops_idle_entries_first() {
        let clock = Clock::manual();
        let q = Quotas::with_cap(10, Some(100), clock.clone(), 3);
        let key = |n: &str| QuotaKey::new(&user(n), A);
        q.produce(&key("busy"), 1000); // in debt for 9 s
        clock.advance(Duration::from_millis(10));
        q.produce(&key("idle1"), 1);
        q.produce(&key("idle2"), 1);
        clock.advance(Duration::from_secs(2));
        q.produce(&key("new"), 1);
        assert_eq!(q.tracked_producers(), 2, "the idle ones went");
        assert!(
            q.produce(&key("busy"), 0) > Duration::ZERO,
            "the busy one kept its debt"
        );
        q.produce(&key("new2"), 1000);
        q.produce(&key("new3"), 1);
        assert_eq!(
            q.tracked_producers(),
            3,
            "full: the least recently used went"
        );
    }

    #[test]
    fn connections_are_limited_per_principal_and_anonymous_per_address() {
        let q = Quotas::new(2, None, Clock::manual());
        let anon = Principal::Anonymous;
        let c1 = ConnQuota::new(Arc::clone(&q), A, &anon);
        let c2 = ConnQuota::new(Arc::clone(&q), A, &anon);
        let mut c3 = ConnQuota::new(Arc::clone(&q), A, &anon);
        let c4 = ConnQuota::new(Arc::clone(&q), B, &anon);
        assert!(c1.check().is_ok() && c2.check().is_ok() && c4.check().is_ok());
        let err = c3.check().unwrap_err().to_string();
        assert!(
            err.contains("ANONYMOUS from 10.0.0.1") && err.contains("2"),
            "{err}"
        );
        // The refused anonymous connection may log in and count as its user.
        c3.login(&user("u")).unwrap();
        assert!(c3.check().is_ok());
        let mut c5 = ConnQuota::new(Arc::clone(&q), B, &anon);
        c5.login(&user("u")).unwrap();
        assert_eq!(
            q.connections(&QuotaKey::new(&anon, B)),
            1,
            "c5 left the address' count"
        );
        let mut c6 = ConnQuota::new(Arc::clone(&q), B, &anon);
        let err = c6.login(&user("u")).unwrap_err();
        assert!(err.to_string().contains("user:u"), "{err}");
        assert_eq!(q.stats().connections_refused(), 2);
        drop((c1, c2, c3, c4, c5, c6));
        assert!(
            lock(&q.connections).is_empty(),
            "counts go with their connections"
        );
    }

    #[test]
    fn failed_logins_are_limited_per_address_on_the_injected_clock() {
        let clock = Clock::manual();
        let q = Quotas::new(10, None, clock.clone());
        let (ca, cb) = (
            ConnQuota::new(Arc::clone(&q), A, &Principal::Anonymous),
            ConnQuota::new(Arc::clone(&q), B, &Principal::Anonymous),
        );
        for _ in 0..LOGIN_BURST {
            ca.login_allowed().unwrap();
            ca.login_result(Mechanism::ScramSha256, false);
        }
        let Err(QuotaError::Logins { retry, .. }) = ca.login_allowed() else {
            panic!("not limited")
        };
        assert_eq!(retry, LOGIN_REFILL);
        // Another connection from the same address is limited too; another address is not.
        let ca2 = ConnQuota::new(Arc::clone(&q), A, &Principal::Anonymous);
        assert!(ca2.login_allowed().is_err());
        cb.login_allowed().unwrap();
        cb.login_result(Mechanism::Plain, true);
        clock.advance(LOGIN_REFILL);
        ca.login_allowed().unwrap();
        ca.login_result(Mechanism::ScramSha512, false);
        assert!(ca.login_allowed().is_err());
        assert_eq!(q.stats().logins(Mechanism::ScramSha256), (0, LOGIN_BURST));
        assert_eq!(q.stats().logins(Mechanism::Plain), (1, 0));
        assert_eq!(q.stats().logins_limited(), 3);
    }

    #[test]
    fn the_login_map_is_bounded() {
        let q = Quotas::with_cap(10, None, Clock::manual(), 100);
        for i in 0..1000u32 {
            q.login_result(IpAddr::V4(i.into()), Mechanism::Plain, false);
        }
        assert_eq!(q.tracked_addresses(), 100);
    }
}

//! Helpers for the end-to-end tests: a broker on port 0 in a temp dir, and
//! waiting for a condition with a deadline (never a fixed sleep).
#![allow(dead_code)]

pub mod abuse;
pub mod kafka;
pub mod pki;

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use flume_broker::{Broker, BrokerConfig, Clock, TopicConfig};

pub fn config(dir: &Path) -> BrokerConfig {
    let mut c = BrokerConfig::new(dir);
    c.listen = "127.0.0.1:0".into();
    c.tick = Duration::from_millis(20);
    // Kafka groups form at once in tests, as in Kafka's own test setups; the
    // tests of the delay set it.
    c.group_initial_rebalance_delay = Duration::ZERO;
    // Short sessions, as Kafka's test fixtures lower group.min.session.timeout.ms:
    // 100 ms was the floor Flume's JOIN_GROUP took before the bound was a setting.
    c.group_min_session_timeout = Duration::from_millis(100);
    c
}

pub async fn start(dir: &Path) -> Broker {
    Broker::start(config(dir)).await.expect("broker starts")
}

pub fn topic(partitions: u32) -> TopicConfig {
    TopicConfig {
        partitions,
        ..TopicConfig::default()
    }
}

/// Polls `cond` until it is true, failing the test after `limit`.
pub async fn wait_until<F, Fut>(what: &str, limit: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if cond().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        flume_rt::sleep(Duration::from_millis(10)).await;
    }
}

/// A broker on port 0 with one topic created, and its address.
pub async fn with_topic(dir: &Path, name: &str, partitions: u32) -> (flume_broker::Broker, String) {
    let broker = start(dir).await;
    broker
        .engine()
        .records()
        .create_topic(name, topic(partitions))
        .expect("topic created");
    let addr = broker.local_addr().to_string();
    (broker, addr)
}

/// Settings for a broker on a manual clock: group sessions expire and
/// rebalance deadlines pass only when the test moves the clock.
pub fn manual_config(dir: &Path) -> (BrokerConfig, Clock) {
    let mut c = config(dir);
    let clock = Clock::manual();
    c.clock = clock.clone();
    (c, clock)
}

/// A broker on a manual clock with one topic created, its address and its clock.
pub async fn with_topic_manual(
    dir: &Path,
    name: &str,
    partitions: u32,
) -> (flume_broker::Broker, String, Clock) {
    let (cfg, clock) = manual_config(dir);
    let broker = Broker::start(cfg).await.expect("broker starts");
    broker
        .engine()
        .records()
        .create_topic(name, topic(partitions))
        .expect("topic created");
    let addr = broker.local_addr().to_string();
    (broker, addr, clock)
}

/// Moves a manual clock forward by `total` in steps of `step` (keep it below
/// the live members' session timeout). After each step it waits until every
/// member in `live` has been heard from at the new time (its heartbeats go on
/// in real time), then runs one maintenance pass: members that stay silent
/// expire once `total` exceeds their session timeout, the live ones never do.
pub async fn advance_keeping_alive(
    engine: &flume_broker::Engine,
    clock: &Clock,
    group: &str,
    live: &[String],
    total: Duration,
    step: Duration,
) {
    let mut moved = Duration::ZERO;
    while moved < total {
        let by = step.min(total - moved);
        let now = clock.advance(by);
        moved += by;
        wait_until(
            "live members heartbeat",
            Duration::from_secs(20),
            || async {
                live.iter().all(|m| {
                    engine
                        .groups()
                        .member_last_seen(group, m)
                        .is_some_and(|t| t >= now)
                })
            },
        )
        .await;
        engine.tick_now().await;
    }
}

/// This process's resident set size, from `/proc/self/status` (`VmRSS`); the
/// broker runs in-process, so this is its memory plus the test's.
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .expect("VmRSS in /proc/self/status")
}

/// Reads whole response frames from a raw connection until one arrives and
/// returns its request id and error code.
pub async fn read_response_code(
    s: &mut flume_rt::TcpStream,
    got: &mut Vec<u8>,
) -> std::io::Result<(i32, flume_protocol::ErrorCode)> {
    use flume_protocol::{frame, ErrorCode};
    use futures::io::AsyncReadExt;
    loop {
        if let Ok(frame::Decoded::Frame(f, used)) = frame::decode_response(got, 64 << 20) {
            let code = ErrorCode::from_code(i16::from_be_bytes([f.payload[0], f.payload[1]]));
            let id = f.request_id;
            got.drain(..used);
            return Ok((id, code));
        }
        let mut chunk = [0u8; 64 * 1024];
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        got.extend_from_slice(&chunk[..n]);
    }
}

static MEMORY_TEST: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Held by a test that measures this process's memory: no other test of its
/// binary that takes [`shared`] runs meanwhile.
pub fn exclusive() -> std::sync::RwLockWriteGuard<'static, ()> {
    MEMORY_TEST
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Held by the other tests of a binary with a memory-measuring test.
pub fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    MEMORY_TEST
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

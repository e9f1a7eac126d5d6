//! Helpers for the end-to-end tests: a broker on port 0 in a temp dir, and
//! waiting for a condition with a deadline (never a fixed sleep).
#![allow(dead_code)]

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use flume_broker::{Broker, BrokerConfig, Clock, TopicConfig};

pub fn config(dir: &Path) -> BrokerConfig {
    let mut c = BrokerConfig::new(dir);
    c.listen = "127.0.0.1:0".into();
    c.tick = Duration::from_millis(20);
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
                live.iter()
                    .all(|m| engine.member_last_seen(group, m).is_some_and(|t| t >= now))
            },
        )
        .await;
        engine.tick_now().await;
    }
}

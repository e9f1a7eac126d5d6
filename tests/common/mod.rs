//! Helpers for the end-to-end tests: a broker on port 0 in a temp dir, and
//! waiting for a condition with a deadline (never a fixed sleep).
#![allow(dead_code)]

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use flume_broker::{Broker, BrokerConfig, TopicConfig};

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

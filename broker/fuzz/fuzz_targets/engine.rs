//! The engine the request targets share: one per process, in a temp dir of
//! its own, with small segments (so appends roll them) and two partitions
//! per auto-created topic.

use std::sync::{Arc, OnceLock};

use flume_broker::{BrokerConfig, Engine};

/// The process's engine, opened at the first call in
/// `<tmp>/flume-<name>-<pid>`.
pub fn engine(name: &str) -> &'static Arc<Engine> {
    static ENGINE: OnceLock<Arc<Engine>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("flume-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut cfg = BrokerConfig::new(dir);
        cfg.default_topic.segment_bytes = 4096;
        cfg.default_topic.partitions = 2;
        Engine::open(cfg).expect("engine opens")
    })
}

//! A request's tracing span, in a test binary of its own: `tracing` caches
//! per call site whether anyone listens, process-wide, so a subscriber set
//! for one thread (`with_default`) can miss events while other tests run
//! beside it in the same process (as they do in the `e2e` binary).

mod common;

use bytes::Bytes;
use flume_protocol::record;
use flume_protocol::{ProduceEntry, ProduceRequest};
use flume_rt as rt;

fn records(n: usize) -> Bytes {
    let mut buf = Vec::new();
    for i in 0..n {
        record::encode(&mut buf, 0, 1, None, format!("value-{i}").as_bytes(), &[]);
    }
    Bytes::from(buf)
}

/// Collects what a `tracing` subscriber writes.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_request_runs_in_a_span_with_its_api_topic_and_partition() {
    use flume_protocol::messages::Encode;
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter("flume_broker=debug")
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let dir = tempfile::tempdir().unwrap();
    tracing::subscriber::with_default(subscriber, || {
        rt::block_on(async {
            let engine = flume_broker::Engine::open(common::config(dir.path())).unwrap();
            engine
                .records()
                .create_topic("traced", common::topic(2))
                .unwrap();
            let mut payload = Vec::new();
            ProduceRequest {
                entries: vec![ProduceEntry {
                    topic: "traced".into(),
                    partition: 1,
                    records: records(3),
                }],
            }
            .encode(&mut payload);
            flume_broker::server::handle_request(&engine, 0, 42, &payload).await;
            engine.shutdown().await;
        })
    });
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let line = log
        .lines()
        .find(|l| l.contains("request done"))
        .unwrap_or_else(|| panic!("no request event in {log}"));
    assert!(
        line.contains(r#"request{api="produce" request_id=42 topic="traced" partition=1}"#),
        "{line}"
    );
    assert!(line.contains(r#"error="NONE""#), "{line}");
}

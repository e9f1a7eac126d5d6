//! In-process connections (`inproc://`, `flume_rt::local`): the Flume
//! protocol served to a client of the broker's own process without TCP, by
//! the same connection loop as a socket. Raw frames here; the SDK's use of
//! it is in the root `tests/e2e_in_process.rs`.

use std::io;
use std::time::Duration;

use flume_broker::{Broker, BrokerConfig, EmbeddedBroker, TopicConfig};
use flume_protocol::frame::{self, Decoded};
use flume_protocol::{self as protocol, MetadataRequest, MetadataResponse};
use flume_rt::local::{self, LocalStream};
use futures::io::{AsyncReadExt, AsyncWriteExt};

/// Sends one METADATA request and returns the topic names answered.
async fn metadata(s: &LocalStream, request_id: i32) -> io::Result<Vec<String>> {
    let mut buf = Vec::new();
    protocol::encode_request(&mut buf, request_id, &MetadataRequest { topics: vec![] });
    let mut w = s;
    w.write_all(&buf).await?;
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Ok(Decoded::Frame(f, _)) = frame::decode_response(&got, 1 << 20) {
            assert_eq!(f.request_id, request_id);
            let meta: MetadataResponse = protocol::decode_response(f.payload)
                .expect("a well-formed answer")
                .expect("no error");
            return Ok(meta.topics.into_iter().map(|t| t.name).collect());
        }
        let mut r = s;
        let n = r.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got.extend_from_slice(&chunk[..n]);
    }
}

fn config(dir: &std::path::Path) -> BrokerConfig {
    let mut cfg = BrokerConfig::new(dir);
    cfg.listen = "127.0.0.1:0".into();
    cfg
}

#[test]
fn a_tcp_broker_serves_its_in_process_address_until_shutdown() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let broker = Broker::start(config(dir.path())).await.unwrap();
        broker
            .engine()
            .records()
            .create_topic("orders", TopicConfig::default())
            .unwrap();
        let addr = broker.in_process_address().to_owned();
        assert!(addr.starts_with("inproc://flume-"), "{addr}");

        let s = local::connect(&addr).await.unwrap();
        assert_eq!(metadata(&s, 1).await.unwrap(), ["orders"]);
        assert_eq!(metadata(&s, 2).await.unwrap(), ["orders"]);

        // A bad frame (an unknown API key with a bogus size) costs that
        // connection only.
        let bad = local::connect(&addr).await.unwrap();
        (&bad)
            .write_all(&[0x7f, 0xff, 0xff, 0xff, 0, 0])
            .await
            .unwrap();
        let mut sink = Vec::new();
        flume_rt::timeout(Duration::from_secs(10), (&bad).read_to_end(&mut sink))
            .await
            .expect("the broker closes a connection that sent a bad frame")
            .unwrap();
        assert!(sink.is_empty(), "no answer to a bad frame: {sink:?}");
        assert_eq!(metadata(&s, 3).await.unwrap(), ["orders"]);

        broker.shutdown().await;
        assert_eq!(
            local::connect(&addr).await.unwrap_err().kind(),
            io::ErrorKind::ConnectionRefused
        );
    });
}

#[test]
fn an_embedded_broker_serves_the_flume_protocol_in_process() {
    flume_rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let broker = EmbeddedBroker::open(dir.path()).unwrap();
        broker
            .create_topic("ticks", TopicConfig::default())
            .await
            .unwrap();
        let addr = broker.address().unwrap();
        assert_eq!(broker.address().unwrap(), addr, "one address per broker");
        let s = local::connect(&addr).await.unwrap();
        assert_eq!(metadata(&s, 9).await.unwrap(), ["ticks"]);
        broker.close().await;
        // Closed: the connection ends and the name is free.
        let mut rest = Vec::new();
        let _ = flume_rt::timeout(Duration::from_secs(10), (&s).read_to_end(&mut rest))
            .await
            .expect("close ends in-process connections");
        assert_eq!(
            local::connect(&addr).await.unwrap_err().kind(),
            io::ErrorKind::ConnectionRefused
        );
    });
}

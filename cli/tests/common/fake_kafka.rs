//! A Kafka broker that lets a client find it (ApiVersions, Metadata,
//! FindCoordinator: itself, node 0) and never lets it join a group: every
//! JoinGroup is either dropped with the connection, as librdkafka's mock
//! cluster does with a JoinGroup it misreads, or left unanswered.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, FindCoordinatorResponse, MetadataResponse,
    RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// What the fake does with a JoinGroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnJoin {
    /// Closes the connection.
    Close,
    /// Never answers (the connection stays open).
    Hang,
}

pub struct FakeKafka {
    /// host:port.
    pub addr: String,
    joins: Arc<AtomicU32>,
}

impl FakeKafka {
    /// Listens on a free port of 127.0.0.1, serving each connection in a thread.
    pub fn start(on_join: OnJoin) -> FakeKafka {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let joins = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&joins);
        std::thread::spawn(move || {
            for s in listener.incoming().map_while(Result::ok) {
                let joins = Arc::clone(&counted);
                std::thread::spawn(move || serve(s, i32::from(addr.port()), &joins, on_join));
            }
        });
        FakeKafka {
            addr: addr.to_string(),
            joins,
        }
    }

    /// JoinGroups received so far.
    pub fn joins(&self) -> u32 {
        self.joins.load(Ordering::SeqCst)
    }
}

fn serve(mut s: TcpStream, port: i32, joins: &AtomicU32, on_join: OnJoin) -> std::io::Result<()> {
    loop {
        let mut size = [0u8; 4];
        s.read_exact(&mut size)?;
        let mut frame = vec![0u8; usize::try_from(i32::from_be_bytes(size)).expect("size")];
        s.read_exact(&mut frame)?;
        let api = ApiKey::try_from(i16::from_be_bytes([frame[0], frame[1]])).expect("api key");
        let version = i16::from_be_bytes([frame[2], frame[3]]);
        let mut buf = Bytes::from(frame);
        let header =
            RequestHeader::decode(&mut buf, api.request_header_version(version)).expect("header");
        let mut body = BytesMut::new();
        let host = StrBytes::from_static_str("127.0.0.1");
        let encoded = match api {
            ApiKey::ApiVersions => ApiVersionsResponse::default()
                .with_api_keys(
                    [
                        (ApiKey::ApiVersions, 3),
                        (ApiKey::Metadata, 12),
                        (ApiKey::FindCoordinator, 3),
                        (ApiKey::JoinGroup, 9),
                        (ApiKey::Heartbeat, 4),
                        (ApiKey::LeaveGroup, 5),
                    ]
                    .into_iter()
                    .map(|(k, max)| {
                        ApiVersion::default()
                            .with_api_key(k as i16)
                            .with_max_version(max)
                    })
                    .collect(),
                )
                .encode(&mut body, version),
            ApiKey::Metadata => MetadataResponse::default()
                .with_brokers(vec![MetadataResponseBroker::default()
                    .with_node_id(BrokerId(0))
                    .with_host(host)
                    .with_port(port)])
                .with_controller_id(BrokerId(0))
                .encode(&mut body, version),
            ApiKey::FindCoordinator => FindCoordinatorResponse::default()
                .with_node_id(BrokerId(0))
                .with_host(host)
                .with_port(port)
                .encode(&mut body, version),
            ApiKey::JoinGroup => {
                joins.fetch_add(1, Ordering::SeqCst);
                match on_join {
                    OnJoin::Close => return Ok(()),
                    // Reads on (and answers nothing) until the client hangs up.
                    OnJoin::Hang => {
                        let mut sink = [0u8; 4096];
                        while s.read(&mut sink)? > 0 {}
                        return Ok(());
                    }
                }
            }
            _ => return Ok(()),
        };
        encoded.expect("encode");
        let mut head = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(header.correlation_id)
            .encode(&mut head, api.response_header_version(version))
            .expect("encode header");
        let size = i32::try_from(head.len() + body.len()).expect("small");
        s.write_all(&size.to_be_bytes())?;
        s.write_all(&head)?;
        s.write_all(&body)?;
    }
}

//! Abusive connections, for the fairness tests (`tests/e2e_fairness.rs`) and
//! the fairness benchmark (`benches/fairness.rs`): parked long polls, peers
//! that never read, huge frames sent slowly, reconnect loops, Kafka group
//! waits, HTTP half heads. Each runs on a thread of its own with blocking
//! sockets until told to stop.
#![allow(dead_code)]

use std::time::Duration;

use bytes::{BufMut, BytesMut};
use flume_protocol as protocol;
use kafka_protocol::messages::{ApiKey, FetchRequest, JoinGroupRequest, RequestHeader, TopicName};
use kafka_protocol::protocol::{Encodable, StrBytes};

/// The parked requests' wait: far longer than a test.
pub const PARKED_WAIT_MS: i32 = 30_000;

/// 64 pipelined FETCH requests of every partition of `topic` from offset 0,
/// that can never be satisfied: `min_bytes` 2^31-1, 16 MiB `max_bytes`, a 30 s wait.
pub fn parked_flume_fetches(topic: &str, partitions: i32) -> Vec<u8> {
    let mut out = Vec::new();
    for id in 0..64 {
        protocol::encode_request(
            &mut out,
            id,
            &protocol::FetchRequest {
                max_wait_ms: PARKED_WAIT_MS,
                min_bytes: i32::MAX,
                max_bytes: 16 << 20,
                partitions: (0..partitions)
                    .map(|partition| protocol::FetchPartition {
                        topic: topic.into(),
                        partition,
                        offset: 0,
                        max_bytes: 16 << 20,
                    })
                    .collect(),
            },
        );
    }
    out
}

pub fn kafka_frame<R: Encodable>(key: ApiKey, version: i16, correlation: i32, req: &R) -> Vec<u8> {
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation)
        .with_client_id(Some(StrBytes::from_static_str("hog")))
        .encode(&mut buf, key.request_header_version(version))
        .expect("header encodes");
    req.encode(&mut buf, version).expect("request encodes");
    let size = i32::try_from(buf.len() - 4).expect("small frame");
    buf[..4].copy_from_slice(&size.to_be_bytes());
    buf.to_vec()
}

/// 64 pipelined Kafka Fetch v11 requests of every partition of `topic` from
/// offset 0 that can never be satisfied.
pub fn parked_kafka_fetches(topic: &str, partitions: i32) -> Vec<u8> {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    let req = FetchRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_max_wait_ms(PARKED_WAIT_MS)
        .with_min_bytes(i32::MAX)
        .with_max_bytes(16 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.into())))
            .with_partitions(
                (0..partitions)
                    .map(|p| {
                        FetchPartition::default()
                            .with_partition(p)
                            .with_fetch_offset(0)
                            .with_partition_max_bytes(16 << 20)
                    })
                    .collect(),
            )]);
    (0..64)
        .flat_map(|c| kafka_frame(ApiKey::Fetch, 11, c, &req))
        .collect()
}

/// A JoinGroup v4 of a new member of `group` (after its MEMBER_ID_REQUIRED
/// round the join waits for the group's other members).
pub fn kafka_join(group: &str, member: &str) -> Vec<u8> {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    let req = JoinGroupRequest::default()
        .with_group_id(kafka_protocol::messages::GroupId(StrBytes::from_string(
            group.into(),
        )))
        .with_session_timeout_ms(30_000)
        .with_rebalance_timeout_ms(PARKED_WAIT_MS)
        .with_member_id(StrBytes::from_string(member.into()))
        .with_protocol_type(StrBytes::from_static_str("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(StrBytes::from_static_str("range"))
            .with_metadata(vec![0u8; 1024].into())]);
    kafka_frame(ApiKey::JoinGroup, 4, 1, &req)
}

/// A tiny deterministic generator (xorshift64*), so a failure replays from its seed.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// What one abusive connection (or set of them) does until told to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abuse {
    /// Flume port: 64 pipelined unsatisfiable FETCHes of everything, never read.
    ParkFetches,
    /// Flume port: 128 pipelined FETCHes answered at once, never read.
    NeverRead,
    /// Flume port: a 15 MiB PRODUCE frame sent 16 KiB at a time.
    HugeFrameSlowly,
    /// Flume and Kafka ports: connect, send a parked fetch, close, again.
    Reconnect,
    /// Kafka port: pipelined unsatisfiable Fetches, never read.
    KafkaParkFetches,
    /// Kafka port: JoinGroups that wait for a rebalance.
    KafkaGroupWait,
    /// HTTP port: as many connections as it takes, each with half a request head.
    HttpHalfHeads,
}

pub const ALL_ABUSES: [Abuse; 7] = [
    Abuse::ParkFetches,
    Abuse::NeverRead,
    Abuse::HugeFrameSlowly,
    Abuse::Reconnect,
    Abuse::KafkaParkFetches,
    Abuse::KafkaGroupWait,
    Abuse::HttpHalfHeads,
];

pub struct Ports {
    /// The Flume protocol's address.
    pub flume: String,
    /// The Kafka listener's address.
    pub kafka: String,
    /// The HTTP address.
    pub http: String,
}

pub fn never_read_fetches(topic: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for id in 0..128 {
        protocol::encode_request(
            &mut out,
            id,
            &protocol::FetchRequest {
                max_wait_ms: 0,
                min_bytes: 1,
                max_bytes: 1 << 20,
                partitions: vec![protocol::FetchPartition {
                    topic: topic.into(),
                    partition: 0,
                    offset: 0,
                    max_bytes: 1 << 20,
                }],
            },
        );
    }
    out
}

/// Runs `abuse` on a thread until `stop`; what it holds is closed when it returns.
pub fn abuser(
    abuse: Abuse,
    ports: &Ports,
    seed: u64,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    use std::io::Write;
    use std::net::TcpStream as Std;
    let (flume, kafka, http) = (ports.flume.clone(), ports.kafka.clone(), ports.http.clone());
    let stopped = move || stop.load(std::sync::atomic::Ordering::Acquire);
    std::thread::spawn(move || {
        // Every write may block (that is the point): a timeout keeps the thread stoppable.
        let open = |addr: &str| {
            let s = Std::connect(addr).ok()?;
            s.set_write_timeout(Some(Duration::from_millis(200))).ok()?;
            Some(s)
        };
        let mut held = Vec::new();
        let pause = || std::thread::sleep(Duration::from_millis(5));
        match abuse {
            Abuse::ParkFetches | Abuse::NeverRead | Abuse::KafkaParkFetches => {
                let (addr, bytes) = match abuse {
                    Abuse::ParkFetches => (&flume, parked_flume_fetches("hog", 4)),
                    Abuse::NeverRead => (&flume, never_read_fetches("hog")),
                    _ => (&kafka, parked_kafka_fetches("hog", 4)),
                };
                // Kafka serves a connection's requests one at a time: more of them.
                let n = if abuse == Abuse::KafkaParkFetches {
                    5
                } else {
                    2
                };
                for _ in 0..n {
                    if let Some(mut s) = open(addr) {
                        let _ = s.write_all(&bytes);
                        held.push(s);
                    }
                }
            }
            Abuse::KafkaGroupWait => {
                for i in 0..3 {
                    if let Some(mut s) = open(&kafka) {
                        let _ =
                            s.write_all(&kafka_join(&format!("wait-{seed}"), &format!("m-{i}")));
                        held.push(s);
                    }
                }
            }
            Abuse::HttpHalfHeads => {
                for _ in 0..160 {
                    if let Some(mut s) = open(&http) {
                        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n");
                        held.push(s);
                    }
                }
            }
            Abuse::HugeFrameSlowly | Abuse::Reconnect => {}
        }
        let mut sent = 0usize;
        let mut slow = None;
        while !stopped() {
            match abuse {
                Abuse::HugeFrameSlowly => {
                    let s = slow.get_or_insert_with(|| {
                        let mut s = open(&flume);
                        if let Some(s) = s.as_mut() {
                            // PRODUCE (key 0) of 15 MiB, request id 1: the frame never ends.
                            let mut head = Vec::new();
                            head.extend_from_slice(&(15i32 << 20).to_be_bytes());
                            head.extend_from_slice(&0i16.to_be_bytes());
                            head.extend_from_slice(&1i32.to_be_bytes());
                            let _ = s.write_all(&head);
                        }
                        s
                    });
                    if let Some(s) = s.as_mut() {
                        if sent < 15 << 20 && s.write_all(&[b'z'; 16 * 1024]).is_ok() {
                            sent += 16 * 1024;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Abuse::Reconnect => {
                    let (addr, bytes) = if sent.is_multiple_of(2) {
                        (&flume, parked_flume_fetches("hog", 1))
                    } else {
                        (&kafka, parked_kafka_fetches("hog", 1))
                    };
                    if let Some(mut s) = open(addr) {
                        let _ = s.write_all(&bytes[..bytes.len() / 64]);
                    }
                    sent += 1;
                    pause();
                }
                _ => pause(),
            }
        }
        drop(held);
    })
}

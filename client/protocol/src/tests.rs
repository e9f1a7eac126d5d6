//! Unit tests of the parent module, compiled only under #[cfg(test)].
//! Protocol tests: round trips (proptest), truncated prefixes, exact bytes of the doc's examples.

use bytes::Bytes;
use proptest::prelude::*;

use super::messages::*;
use super::record;
use super::wire::Reader;
use super::*;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The PRODUCE example of docs/protocol.md.
pub(crate) fn doc_produce_request() -> Vec<u8> {
    let mut records = Vec::new();
    record::encode(
        &mut records,
        0,
        1_700_000_000_000,
        Some(b"user-123"),
        b"widget",
        &[],
    );
    let req = ProduceRequest {
        entries: vec![ProduceEntry {
            topic: "orders".into(),
            partition: -1,
            records: records.into(),
        }],
    };
    let mut buf = Vec::new();
    encode_request(&mut buf, 7, &req);
    buf
}

#[test]
fn doc_example_bytes() {
    assert_eq!(
        hex(&doc_produce_request()),
        concat!(
            "0000004b",
            "0000",
            "00000007", // size 75, api PRODUCE, request id 7
            "00000001",
            "00066f7264657273",
            "ffffffff", // 1 entry, "orders", partition -1
            "00000031", // records: 49 bytes
            "0000000000000000",
            "00000021",
            "917526d1", // offset 0, payload size 33, crc32 of the payload
            "00",
            "0000018bcfe56800", // attributes, timestamp 1700000000000
            "00000008",
            "757365722d313233", // key "user-123"
            "00000006",
            "776964676574", // value "widget"
            "0000"          // no headers
        )
    );
    let resp = ProduceResponse {
        results: vec![ProduceResult {
            topic: "orders".into(),
            partition: -1,
            error: ErrorCode::None,
            spans: vec![Span {
                partition: 2,
                base_offset: 41,
                count: 1,
            }],
            record_partitions: vec![2],
        }],
    };
    let mut buf = Vec::new();
    encode_response_frame(&mut buf, 7, Ok(&resp));
    assert_eq!(
        hex(&buf),
        concat!(
            "00000034",
            "00000007",
            "0000", // size 52, request id 7, top-level error NONE
            "00000001",
            "00066f7264657273",
            "ffffffff",
            "0000", // 1 result, "orders", partition -1, NONE
            "00000001",
            "00000002",
            "0000000000000029",
            "00000001", // 1 span: partition 2, base 41, count 1
            "00000001",
            "00000002" // record_partitions [2]
        )
    );
    let Ok(frame::Decoded::Frame(f, _)) = frame::decode_response(&buf, 1 << 20) else {
        panic!("frame")
    };
    let back = decode_response::<ProduceResponse>(f.payload)
        .unwrap()
        .unwrap();
    assert_eq!(back.results[0].record_offsets(), vec![(2, 41)]);
}

fn name() -> impl Strategy<Value = String> {
    "[a-z0-9._-]{0,12}"
}

fn records() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(
        (
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
            proptest::collection::vec(any::<u8>(), 0..32),
            any::<i64>(),
        ),
        0..4,
    )
    .prop_map(|rs| {
        let mut buf = Vec::new();
        for (k, v, ts) in rs {
            record::encode(&mut buf, 0, ts, k.as_deref(), &v, &[]);
        }
        Bytes::from(buf)
    })
}

fn check<T: Encode + Decode + PartialEq + std::fmt::Debug>(v: &T) -> Result<(), TestCaseError> {
    let mut buf = Vec::new();
    v.encode(&mut buf);
    let back = T::decode_exact(&buf).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&back, v);
    // Every strict prefix fails cleanly (no panic, an error).
    for cut in 0..buf.len() {
        prop_assert!(
            T::decode_exact(&buf[..cut]).is_err(),
            "prefix {} of {} decoded",
            cut,
            buf.len()
        );
    }
    // Trailing bytes are rejected.
    let mut longer = buf.clone();
    longer.push(0);
    prop_assert!(T::decode_exact(&longer).is_err());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn produce_round_trip(entries in proptest::collection::vec((name(), -1i32..8, records()), 0..4)) {
        check(&ProduceRequest { entries: entries.into_iter().map(|(topic, partition, records)| ProduceEntry { topic, partition, records }).collect() })?;
    }

    #[test]
    fn produce_response_round_trip(rs in proptest::collection::vec((name(), any::<i32>(), 0i16..17, proptest::collection::vec((any::<i32>(), any::<i64>(), any::<i32>()), 0..3), proptest::collection::vec(any::<i32>(), 0..5)), 0..3)) {
        check(&ProduceResponse { results: rs.into_iter().map(|(topic, partition, e, spans, rp)| ProduceResult {
            topic, partition, error: ErrorCode::from_code(e),
            spans: spans.into_iter().map(|(p, b, c)| Span { partition: p, base_offset: b, count: c }).collect(),
            record_partitions: rp,
        }).collect() })?;
    }

    #[test]
    fn fetch_round_trip(w in any::<i32>(), m in any::<i32>(), x in any::<i32>(), ps in proptest::collection::vec((name(), any::<i32>(), any::<i64>(), any::<i32>()), 0..4)) {
        check(&FetchRequest { max_wait_ms: w, min_bytes: m, max_bytes: x, partitions: ps.into_iter().map(|(topic, partition, offset, max_bytes)| FetchPartition { topic, partition, offset, max_bytes }).collect() })?;
    }

    #[test]
    fn fetch_response_round_trip(ps in proptest::collection::vec((name(), any::<i32>(), 0i16..17, any::<i64>(), any::<i64>(), records()), 0..3)) {
        check(&FetchResponse { partitions: ps.into_iter().map(|(topic, partition, e, hw, ls, records)| FetchPartitionResponse { topic, partition, error: ErrorCode::from_code(e), high_watermark: hw, log_start: ls, records }).collect() })?;
    }

    #[test]
    fn join_round_trip(g in name(), m in name(), s in any::<i32>(), r in any::<i32>(), a in name(), ts in proptest::collection::vec(name(), 0..4)) {
        check(&JoinGroupRequest { group: g, member_id: m, session_timeout_ms: s, rebalance_timeout_ms: r, assignor: a, topics: ts })?;
    }

    #[test]
    fn join_response_round_trip(gen in any::<i32>(), m in name(), l in name(), ms in proptest::collection::vec(name(), 0..4), a in proptest::collection::vec((name(), proptest::collection::vec(any::<i32>(), 0..4)), 0..3)) {
        check(&JoinGroupResponse { generation: gen, member_id: m, leader_id: l, members: ms, assignment: a.into_iter().map(|(topic, partitions)| TopicPartitions { topic, partitions }).collect() })?;
    }

    #[test]
    fn small_requests_round_trip(g in name(), m in name(), gen in any::<i32>()) {
        check(&LeaveGroupRequest { group: g.clone(), member_id: m.clone() })?;
        check(&HeartbeatRequest { group: g, generation: gen, member_id: m })?;
    }

    #[test]
    fn commit_round_trip(g in name(), m in name(), gen in any::<i32>(), os in proptest::collection::vec((name(), any::<i32>(), any::<i64>()), 0..4), es in proptest::collection::vec((name(), any::<i32>(), 0i16..17), 0..4)) {
        check(&OffsetCommitRequest { group: g, generation: gen, member_id: m, offsets: os.into_iter().map(|(topic, partition, offset)| PartitionOffset { topic, partition, offset }).collect() })?;
        check(&OffsetCommitResponse { results: es.into_iter().map(|(topic, partition, e)| PartitionError { topic, partition, error: ErrorCode::from_code(e) }).collect() })?;
    }

    #[test]
    fn offset_fetch_round_trip(g in name(), ts in proptest::collection::vec((name(), proptest::collection::vec(any::<i32>(), 0..3)), 0..3), ps in proptest::collection::vec((name(), any::<i32>(), 0i16..17, any::<i64>(), any::<i64>(), any::<i64>()), 0..3)) {
        check(&OffsetFetchRequest { group: g, topics: ts.into_iter().map(|(topic, partitions)| TopicPartitions { topic, partitions }).collect() })?;
        check(&OffsetFetchResponse { partitions: ps.into_iter().map(|(topic, partition, e, c, s, l)| OffsetFetchPartition { topic, partition, error: ErrorCode::from_code(e), committed: c, log_start: s, log_end: l }).collect() })?;
    }

    #[test]
    fn admin_round_trip(n in name(), p in any::<i32>(), rb in any::<i64>(), rm in any::<i64>(), sb in any::<i64>(), mp in any::<i32>(), bp in any::<i8>(), ts in proptest::collection::vec((name(), 0i16..17, proptest::collection::vec((any::<i32>(), any::<i64>(), any::<i64>()), 0..3)), 0..3)) {
        check(&CreateTopicRequest { name: n.clone(), partitions: p, retention_bytes: rb, retention_ms: rm, segment_bytes: sb, max_pending: mp, backpressure: bp })?;
        check(&MetadataRequest { topics: vec![n] })?;
        check(&MetadataResponse { topics: ts.into_iter().map(|(name, e, ps)| TopicMetadata { name, error: ErrorCode::from_code(e), partitions: ps.into_iter().map(|(partition, log_start, log_end)| PartitionMetadata { partition, log_start, log_end }).collect() }).collect() })?;
    }

    #[test]
    fn decoders_never_panic_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = ProduceRequest::decode_exact(&bytes);
        let _ = FetchRequest::decode_exact(&bytes);
        let _ = JoinGroupRequest::decode_exact(&bytes);
        let _ = OffsetCommitRequest::decode_exact(&bytes);
        let _ = OffsetFetchRequest::decode_exact(&bytes);
        let _ = CreateTopicRequest::decode_exact(&bytes);
        let _ = decode_response::<FetchResponse>(&bytes);
        let _ = decode_response::<JoinGroupResponse>(&bytes);
        let _ = record::validate_batch(&bytes, u64::MAX);
        let _ = record::decode_all(&Bytes::from(bytes.clone()));
        let _ = frame::decode_request(&bytes, 1 << 20);
        let _ = frame::decode_response(&bytes, 1 << 20);
        let mut r = Reader::new(&bytes);
        let _ = r.count(1);
    }
}

#[test]
fn a_huge_count_allocates_nothing() {
    // count = 2^31-1 items with 4 bytes left: rejected before any allocation.
    let mut buf = vec![0x7f, 0xff, 0xff, 0xff];
    buf.extend_from_slice(&[0, 0, 0, 0]);
    assert!(MetadataRequest::decode_exact(&buf).is_err());
    assert!(FetchResponse::decode_exact(&buf).is_err());
}

#[test]
fn fnv1a_reference_values() {
    // Reference vectors of FNV-1a 32.
    assert_eq!(fnv1a(b""), 0x811c_9dc5);
    assert_eq!(fnv1a(b"a"), 0xe40c_292c);
    assert_eq!(fnv1a(b"foobar"), 0xbf9c_f968);
    assert_eq!(partition_for_key(b"user-123", 3), fnv1a(b"user-123") % 3);
}

/// One value of every message, with every field set to something non-default.
fn every_message() -> Vec<(&'static str, Vec<u8>)> {
    fn enc<T: Encode>(name: &'static str, v: &T) -> (&'static str, Vec<u8>) {
        let mut buf = Vec::new();
        v.encode(&mut buf);
        (name, buf)
    }
    let recs = Bytes::from_static(b"\x01\x02\x03");
    vec![
        enc(
            "produce_request",
            &ProduceRequest {
                entries: vec![ProduceEntry {
                    topic: "t".into(),
                    partition: -1,
                    records: recs.clone(),
                }],
            },
        ),
        enc(
            "produce_response",
            &ProduceResponse {
                results: vec![ProduceResult {
                    topic: "t".into(),
                    partition: 3,
                    error: ErrorCode::QueueFull,
                    spans: vec![Span {
                        partition: 1,
                        base_offset: 0x0102_0304_0506,
                        count: 2,
                    }],
                    record_partitions: vec![1, 1],
                }],
            },
        ),
        enc(
            "fetch_request",
            &FetchRequest {
                max_wait_ms: 500,
                min_bytes: 1,
                max_bytes: 1 << 20,
                partitions: vec![FetchPartition {
                    topic: "ab".into(),
                    partition: 2,
                    offset: 77,
                    max_bytes: 4096,
                }],
            },
        ),
        enc(
            "fetch_response",
            &FetchResponse {
                partitions: vec![FetchPartitionResponse {
                    topic: "ab".into(),
                    partition: 2,
                    error: ErrorCode::OffsetOutOfRange,
                    high_watermark: 90,
                    log_start: 10,
                    records: recs,
                }],
            },
        ),
        enc(
            "join_request",
            &JoinGroupRequest {
                group: "g".into(),
                member_id: "m".into(),
                session_timeout_ms: 10_000,
                rebalance_timeout_ms: 20_000,
                assignor: "range".into(),
                topics: vec!["a".into(), "b".into()],
            },
        ),
        enc(
            "join_response",
            &JoinGroupResponse {
                generation: 4,
                member_id: "m".into(),
                leader_id: "l".into(),
                members: vec!["l".into(), "m".into()],
                assignment: vec![TopicPartitions {
                    topic: "a".into(),
                    partitions: vec![0, 2],
                }],
            },
        ),
        enc(
            "leave_request",
            &LeaveGroupRequest {
                group: "g".into(),
                member_id: "m".into(),
            },
        ),
        enc(
            "heartbeat_request",
            &HeartbeatRequest {
                group: "g".into(),
                generation: 4,
                member_id: "m".into(),
            },
        ),
        enc(
            "commit_request",
            &OffsetCommitRequest {
                group: "g".into(),
                generation: -1,
                member_id: String::new(),
                offsets: vec![PartitionOffset {
                    topic: "a".into(),
                    partition: 0,
                    offset: 5,
                }],
            },
        ),
        enc(
            "commit_response",
            &OffsetCommitResponse {
                results: vec![PartitionError {
                    topic: "a".into(),
                    partition: 0,
                    error: ErrorCode::UnknownPartition,
                }],
            },
        ),
        enc(
            "offset_fetch_request",
            &OffsetFetchRequest {
                group: "g".into(),
                topics: vec![TopicPartitions {
                    topic: "a".into(),
                    partitions: vec![],
                }],
            },
        ),
        enc(
            "offset_fetch_response",
            &OffsetFetchResponse {
                partitions: vec![OffsetFetchPartition {
                    topic: "a".into(),
                    partition: 1,
                    error: ErrorCode::None,
                    committed: -1,
                    log_start: 3,
                    log_end: 9,
                }],
            },
        ),
        enc(
            "create_topic_request",
            &CreateTopicRequest {
                name: "t".into(),
                partitions: 3,
                retention_bytes: 1 << 30,
                retention_ms: -1,
                segment_bytes: 1 << 20,
                max_pending: 64,
                backpressure: 1,
            },
        ),
        enc(
            "metadata_request",
            &MetadataRequest {
                topics: vec!["t".into()],
            },
        ),
        enc(
            "metadata_response",
            &MetadataResponse {
                topics: vec![TopicMetadata {
                    name: "t".into(),
                    error: ErrorCode::Other(300),
                    partitions: vec![PartitionMetadata {
                        partition: 0,
                        log_start: 1,
                        log_end: 2,
                    }],
                }],
            },
        ),
        enc("empty", &Empty),
    ]
}

/// The bytes of [`every_message`], recorded from the hand-written codec before it was replaced
/// by the `message!` macro: the macro must produce exactly these.
const GOLDEN: &[(&str, &str)] = &[
    ("produce_request", "00000001000174ffffffff00000003010203"),
    ("produce_response", "000000010001740000000300090000000100000001000001020304050600000002000000020000000100000001"),
    ("fetch_request", "000001f40000000100100000000000010002616200000002000000000000004d00001000"),
    ("fetch_response", "0000000100026162000000020005000000000000005a000000000000000a00000003010203"),
    ("join_request", "00016700016d0000271000004e20000572616e676500000002000161000162"),
    ("join_response", "0000000400016d00016c0000000200016c00016d00000001000161000000020000000000000002"),
    ("leave_request", "00016700016d"),
    ("heartbeat_request", "0001670000000400016d"),
    ("commit_request", "000167ffffffff000000000001000161000000000000000000000005"),
    ("commit_response", "00000001000161000000000004"),
    ("offset_fetch_request", "0001670000000100016100000000"),
    ("offset_fetch_response", "00000001000161000000010000ffffffffffffffff00000000000000030000000000000009"),
    ("create_topic_request", "000174000000030000000040000000ffffffffffffffff00000000001000000000004001"),
    ("metadata_request", "00000001000174"),
    ("metadata_response", "00000001000174012c000000010000000000000000000000010000000000000002"),
    ("empty", ""),
];

#[test]
fn every_message_keeps_its_golden_bytes() {
    let got = every_message();
    assert_eq!(got.len(), GOLDEN.len());
    for ((name, bytes), (gname, ghex)) in got.iter().zip(GOLDEN) {
        assert_eq!(name, gname);
        assert_eq!(&hex(bytes), ghex, "{name}");
    }
}

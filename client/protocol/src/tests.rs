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
        check(&HeartbeatRequest { group: g.clone(), generation: gen, member_id: m.clone() })?;
        check(&HeartbeatWaitRequest { group: g.clone(), generation: gen, member_id: m.clone(), max_wait_ms: gen })?;
        let fetch = FetchRequest { max_wait_ms: gen, min_bytes: 1, max_bytes: gen, partitions: vec![FetchPartition { topic: g.clone(), partition: gen, offset: i64::from(gen), max_bytes: 7 }] };
        check(&GroupFetchRequest { group: g, generation: gen, member_id: m, fetch })?;
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

#[test]
fn derived_min_bytes_match_the_hand_counted_ones() {
    use crate::codec::WireField;
    // The per-item minimums the hand-written decoders passed to `array_of`:
    // a count is refused when count * MIN_BYTES exceeds the bytes left.
    assert_eq!(ProduceEntry::MIN_BYTES, 10);
    assert_eq!(ProduceResult::MIN_BYTES, 16);
    assert_eq!(Span::MIN_BYTES, 16);
    assert_eq!(FetchPartition::MIN_BYTES, 18);
    assert_eq!(FetchPartitionResponse::MIN_BYTES, 28);
    assert_eq!(TopicPartitions::MIN_BYTES, 6);
    assert_eq!(PartitionOffset::MIN_BYTES, 14);
    assert_eq!(PartitionError::MIN_BYTES, 8);
    assert_eq!(OffsetFetchPartition::MIN_BYTES, 32);
    assert_eq!(TopicMetadata::MIN_BYTES, 8);
    assert_eq!(PartitionMetadata::MIN_BYTES, 20);
    assert_eq!(String::MIN_BYTES, 2);
    assert_eq!(i32::MIN_BYTES, 4);
    assert_eq!(Empty::MIN_BYTES, 0);
}

#[test]
fn encode_fetch_partition_matches_the_message() {
    let p = FetchPartitionResponse {
        topic: "orders".into(),
        partition: 7,
        error: ErrorCode::CorruptRecord,
        high_watermark: 1 << 40,
        log_start: 3,
        records: Bytes::from_static(b"abcdef"),
    };
    let mut derived = Vec::new();
    p.encode(&mut derived);
    let mut by_hand = Vec::new();
    encode_fetch_partition(
        &mut by_hand,
        &p.topic,
        p.partition,
        p.error,
        p.high_watermark,
        p.log_start,
        &p.records,
    );
    assert_eq!(hex(&derived), hex(&by_hand));
}

#[test]
fn shared_decoding_slices_the_frame() {
    // Record batches decoded from a shared payload point into it: no copy.
    let mut buf = Vec::new();
    ProduceRequest {
        entries: vec![ProduceEntry {
            topic: "t".into(),
            partition: 0,
            records: Bytes::from_static(b"0123456789"),
        }],
    }
    .encode(&mut buf);
    let frame = Bytes::from(buf);
    let req = ProduceRequest::decode_shared(&frame).unwrap();
    let recs = &req.entries[0].records;
    assert_eq!(&recs[..], b"0123456789");
    let at = recs.as_ptr() as usize - frame.as_ptr() as usize;
    assert_eq!(at, frame.len() - 10);

    let mut payload = Vec::new();
    encode_response(
        &mut payload,
        Ok(&FetchResponse {
            partitions: vec![FetchPartitionResponse {
                topic: "t".into(),
                partition: 0,
                error: ErrorCode::None,
                high_watermark: 1,
                log_start: 0,
                records: Bytes::from_static(b"xyz"),
            }],
        }),
    );
    let payload = Bytes::from(payload);
    let resp = decode_response_shared::<FetchResponse>(&payload)
        .unwrap()
        .unwrap();
    let recs = &resp.partitions[0].records;
    assert_eq!(
        recs.as_ptr() as usize - payload.as_ptr() as usize,
        payload.len() - 3
    );
}

#[test]
fn errors_name_the_byte_offset() {
    use crate::wire::WireError;
    // FETCH: 12 bytes of header, a count of 1, then a topic whose length says 5 but 2 bytes follow.
    let mut buf = vec![0u8; 12];
    buf.extend_from_slice(&[0, 0, 0, 1, 0, 5, b'a', b'b']);
    // The count check (18 bytes per partition) fires first, at the count's offset.
    assert_eq!(
        FetchRequest::decode_exact(&buf),
        Err(WireError::InvalidLength { at: 12, len: 1 })
    );
    // Enough bytes for the count check, but the offset (byte 30) has 4 of its 8 bytes.
    let mut buf = vec![0u8; 12];
    buf.extend_from_slice(&[0, 0, 0, 1, 0, 8]);
    buf.extend_from_slice(b"abcdefgh");
    buf.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 0]);
    assert_eq!(
        FetchRequest::decode_exact(&buf),
        Err(WireError::Truncated {
            at: 30,
            needed: 8,
            remaining: 4
        })
    );
    // Trailing bytes after a whole message are counted.
    let mut whole = buf.clone();
    whole.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 9]);
    assert_eq!(
        FetchRequest::decode_exact(&whole),
        Err(WireError::TrailingBytes { extra: 3 })
    );
    // A negative string length at byte 16.
    let mut buf = vec![0u8; 12];
    buf.extend_from_slice(&[0, 0, 0, 1, 0xff, 0xfe]);
    buf.extend_from_slice(&[0; 16]);
    assert_eq!(
        FetchRequest::decode_exact(&buf),
        Err(WireError::InvalidLength { at: 16, len: -2 })
    );
    // Invalid UTF-8 in a JOIN_GROUP member id, which starts at byte 3.
    let buf = [0, 1, b'g', 0, 1, 0xff];
    assert_eq!(
        JoinGroupRequest::decode_exact(&buf),
        Err(WireError::InvalidUtf8 { at: 3 })
    );
    // OFFSET_COMMIT whose count (at byte 9: group "g" 3, generation 4, member "" 2) claims
    // more 14-byte items than the bytes left can hold.
    let buf = [
        0, 1, b'g', 0, 0, 0, 1, 0, 0, 0, 0, 0, 2, 0, 1, b'a', 0, 0, 0, 0,
    ];
    assert_eq!(
        OffsetCommitRequest::decode_exact(&buf),
        Err(WireError::InvalidLength { at: 9, len: 2 })
    );
}

#[test]
fn nullable_bytes_field() {
    use crate::codec::WireField;
    for v in [None, Some(Bytes::new()), Some(Bytes::from_static(b"ab"))] {
        let mut buf = Vec::new();
        v.put(&mut buf);
        let mut r = Reader::new(&buf);
        assert_eq!(Option::<Bytes>::get(&mut r).unwrap(), v);
        assert_eq!(r.remaining(), 0);
    }
    let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xfe]);
    assert_eq!(
        Option::<Bytes>::get(&mut r),
        Err(crate::wire::WireError::InvalidLength { at: 0, len: -2 })
    );
}

/// Decodes `bytes` as `T` every way there is; none may panic, and whatever
/// decodes re-encodes to exactly the same bytes (the encoding is canonical).
fn survives<T: Encode + Decode + PartialEq + std::fmt::Debug>(
    bytes: &[u8],
) -> Result<(), TestCaseError> {
    let shared = Bytes::copy_from_slice(bytes);
    let exact = T::decode_exact(bytes);
    prop_assert_eq!(&exact, &T::decode_shared(&shared));
    if let Ok(v) = exact {
        let mut again = Vec::new();
        v.encode(&mut again);
        prop_assert_eq!(hex(&again), hex(bytes));
    }
    let resp = decode_response::<T>(bytes);
    prop_assert_eq!(&resp, &decode_response_shared::<T>(&shared));
    if let Ok(r) = resp {
        let mut again = Vec::new();
        encode_response(&mut again, r.as_ref().map_err(|c| *c));
        prop_assert_eq!(hex(&again), hex(bytes));
    }
    let mut r = Reader::new(bytes);
    let _ = T::decode(&mut r);
    Ok(())
}

/// [`survives`] for every message type.
fn every_decoder_survives(bytes: &[u8]) -> Result<(), TestCaseError> {
    survives::<ProduceRequest>(bytes)?;
    survives::<ProduceResponse>(bytes)?;
    survives::<FetchRequest>(bytes)?;
    survives::<FetchResponse>(bytes)?;
    survives::<JoinGroupRequest>(bytes)?;
    survives::<JoinGroupResponse>(bytes)?;
    survives::<LeaveGroupRequest>(bytes)?;
    survives::<HeartbeatRequest>(bytes)?;
    survives::<HeartbeatWaitRequest>(bytes)?;
    survives::<GroupFetchRequest>(bytes)?;
    survives::<OffsetCommitRequest>(bytes)?;
    survives::<OffsetCommitResponse>(bytes)?;
    survives::<OffsetFetchRequest>(bytes)?;
    survives::<OffsetFetchResponse>(bytes)?;
    survives::<CreateTopicRequest>(bytes)?;
    survives::<TopicConfigsRequest>(bytes)?;
    survives::<TopicConfigsResponse>(bytes)?;
    survives::<MetadataRequest>(bytes)?;
    survives::<MetadataResponse>(bytes)?;
    survives::<Empty>(bytes)?;
    // The nested types are messages too.
    survives::<ProduceEntry>(bytes)?;
    survives::<ProduceResult>(bytes)?;
    survives::<FetchPartition>(bytes)?;
    survives::<FetchPartitionResponse>(bytes)?;
    survives::<TopicPartitions>(bytes)?;
    survives::<PartitionOffset>(bytes)?;
    survives::<PartitionError>(bytes)?;
    survives::<OffsetFetchPartition>(bytes)?;
    survives::<TopicMetadata>(bytes)?;
    survives::<PartitionMetadata>(bytes)?;
    // Extensions 9-15.
    survives::<DeleteTopicRequest>(bytes)?;
    survives::<AlterTopicRequest>(bytes)?;
    survives::<DescribeTopicConfigRequest>(bytes)?;
    survives::<TopicSettings>(bytes)?;
    survives::<ListOffsetsRequest>(bytes)?;
    survives::<ListOffsetsResponse>(bytes)?;
    survives::<DeleteGroupRequest>(bytes)?;
    survives::<DeleteGroupResponse>(bytes)?;
    survives::<DeleteRecordsRequest>(bytes)?;
    survives::<DeleteRecordsResponse>(bytes)?;
    survives::<ListGroupsRequest>(bytes)?;
    survives::<ListGroupsResponse>(bytes)?;
    survives::<DescribeGroupRequest>(bytes)?;
    survives::<DescribeGroupResponse>(bytes)?;
    survives::<CreatePartitionsRequest>(bytes)?;
    survives::<CreatePartitionsResponse>(bytes)?;
    survives::<DeleteOffsetsRequest>(bytes)?;
    survives::<DeleteOffsetsResponse>(bytes)?;
    survives::<ShareHeartbeatRequest>(bytes)?;
    survives::<ShareHeartbeatResponse>(bytes)?;
    survives::<ShareFetchRequest>(bytes)?;
    survives::<ShareFetchResponse>(bytes)?;
    survives::<ShareAcknowledgeRequest>(bytes)?;
    survives::<ShareAcknowledgeResponse>(bytes)?;
    survives::<ShareGroupDescribeRequest>(bytes)?;
    survives::<ShareGroupDescribeResponse>(bytes)?;
    survives::<ConsumerGroupDescribeRequest>(bytes)?;
    survives::<ConsumerGroupDescribeResponse>(bytes)?;
    survives::<Span>(bytes)
}

#[test]
fn group_listing_and_description_round_trip() {
    let list = ListGroupsResponse {
        groups: vec![GroupListing {
            group: "g".into(),
            state: "Stable".into(),
            protocol_type: "consumer".into(),
        }],
    };
    let mut buf = Vec::new();
    list.encode(&mut buf);
    assert_eq!(ListGroupsResponse::decode_exact(&buf).unwrap(), list);
    let described = DescribeGroupResponse {
        group: "g".into(),
        state: "Stable".into(),
        protocol_type: "flume".into(),
        protocol: "range".into(),
        generation: 3,
        leader_id: "m1".into(),
        members: vec![GroupMemberInfo {
            member_id: "m1".into(),
            client_id: String::new(),
            client_host: String::new(),
            assignment: vec![TopicPartitions {
                topic: "t".into(),
                partitions: vec![0, 2],
            }],
        }],
        offsets: vec![GroupOffsetInfo {
            topic: "t".into(),
            partition: 2,
            committed: 5,
            log_end: 9,
        }],
    };
    let mut buf = Vec::new();
    described.encode(&mut buf);
    assert_eq!(
        DescribeGroupResponse::decode_exact(&buf).unwrap(),
        described
    );
    let req = ListGroupsRequest {
        states_filter: vec!["Empty".into()],
    };
    let mut buf = Vec::new();
    req.encode(&mut buf);
    assert_eq!(buf, [0, 0, 0, 1, 0, 5, b'E', b'm', b'p', b't', b'y']);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_decoder_survives_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
        every_decoder_survives(&bytes)?;
    }

    /// Garbage that gets past the first count: a valid message with a few bytes
    /// overwritten, then cut, then extended.
    #[test]
    fn every_decoder_survives_damaged_messages(
        which in 0usize..16,
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        cut in any::<usize>(),
        tail in proptest::collection::vec(any::<u8>(), 0..6),
    ) {
        let (_, mut bytes) = every_message().swap_remove(which);
        if !bytes.is_empty() {
            for (at, b) in flips {
                let i = at % bytes.len();
                bytes[i] = b;
            }
            bytes.truncate(cut % (bytes.len() + 1));
        }
        bytes.extend_from_slice(&tail);
        every_decoder_survives(&bytes)?;
    }
}

#[test]
fn topic_configs_messages_round_trip_with_exact_bytes() {
    let req = TopicConfigsRequest {
        op: TOPIC_CONFIGS_ALTER,
        name: "t".into(),
        partitions: -1,
        validate_only: 1,
        set: vec![ConfigEntry {
            name: "a".into(),
            value: "b".into(),
        }],
        delete: vec!["c".into()],
    };
    check(&req).unwrap();
    let mut buf = Vec::new();
    req.encode(&mut buf);
    #[rustfmt::skip]
    let want: &[u8] = &[
        1,                                   // op
        0, 1, b't',                          // name
        0xff, 0xff, 0xff, 0xff,              // partitions -1
        1,                                   // validate_only
        0, 0, 0, 1, 0, 1, b'a', 0, 1, b'b',  // set: one entry
        0, 0, 0, 1, 0, 1, b'c',              // delete: one name
    ];
    assert_eq!(buf, want);
    let resp = TopicConfigsResponse {
        error: ErrorCode::InvalidConfig,
        message: "bad".into(),
        partitions: 2,
        configs: vec![TopicConfigValue {
            name: "cleanup.policy".into(),
            value: "compact".into(),
            source: CONFIG_SOURCE_TOPIC,
        }],
    };
    check(&resp).unwrap();
    assert_eq!(ApiKey::from_i16(23), Some(ApiKey::TopicConfigs));
}

#[test]
fn share_messages_round_trip_with_exact_bytes() {
    let fetch = ShareFetchRequest {
        group: "g".into(),
        member_id: "m".into(),
        max_wait_ms: 500,
        max_records: 10,
        max_bytes: 1024,
        partitions: vec![SharePartitionRef {
            topic: "t".into(),
            partition: 0,
        }],
        acknowledgements: vec![ShareAcknowledgement {
            topic: "t".into(),
            partition: 0,
            first_offset: 3,
            last_offset: 5,
            ack_type: ACK_ACCEPT,
        }],
    };
    let mut buf = Vec::new();
    fetch.encode(&mut buf);
    assert_eq!(
        hex(&buf),
        concat!(
            "000167",
            "00016d",
            "000001f4",
            "0000000a",
            "00000400",
            "00000001",
            "000174",
            "00000000",
            "00000001",
            "000174",
            "00000000",
            "0000000000000003",
            "0000000000000005",
            "01"
        )
    );
    check(&fetch).unwrap();
    let fetched = ShareFetchResponse {
        acknowledgements: vec![ErrorCode::InvalidRecordState],
        partitions: vec![ShareFetchPartition {
            topic: "t".into(),
            partition: 0,
            error: ErrorCode::None,
            acquired: vec![AcquiredRecords {
                first_offset: 3,
                last_offset: 4,
                delivery_count: 2,
            }],
            records: Bytes::from_static(b"\x01\x02\x03"),
        }],
    };
    let mut buf = Vec::new();
    fetched.encode(&mut buf);
    assert_eq!(
        hex(&buf),
        concat!(
            "00000001",
            "0017",
            "00000001",
            "000174",
            "00000000",
            "0000",
            "00000001",
            "0000000000000003",
            "0000000000000004",
            "0002",
            "00000003",
            "010203"
        )
    );
    check(&fetched).unwrap();
    check(&ShareHeartbeatRequest {
        group: "g".into(),
        member_id: String::new(),
        member_epoch: 0,
        client_id: "c".into(),
        topics: vec!["t".into(), "u".into()],
    })
    .unwrap();
    check(&ShareHeartbeatResponse {
        member_id: "m".into(),
        member_epoch: 3,
        heartbeat_interval_ms: 5000,
        assignment: vec![TopicPartitions {
            topic: "t".into(),
            partitions: vec![0, 1],
        }],
    })
    .unwrap();
    check(&ShareAcknowledgeResponse {
        results: vec![ErrorCode::None, ErrorCode::NotAssigned],
    })
    .unwrap();
    check(&ShareGroupDescribeResponse {
        group: "g".into(),
        epoch: 2,
        members: vec![ShareMemberInfo {
            member_id: "m".into(),
            client_id: "c".into(),
            client_host: String::new(),
            member_epoch: 2,
            subscribed: vec!["t".into()],
            assignment: vec![],
        }],
        partitions: vec![SharePartitionInfo {
            topic: "t".into(),
            partition: 0,
            start_offset: 7,
            log_end: 10,
            in_flight: 1,
            acquired: 0,
            available: 1,
            redelivered: 0,
            archived: 3,
        }],
    })
    .unwrap();
    check(&ConsumerGroupDescribeRequest {
        groups: vec!["g".into()],
    })
    .unwrap();
    check(&ConsumerGroupDescribeResponse {
        groups: vec![ConsumerGroupInfo {
            group: "g".into(),
            state: "Reconciling".into(),
            epoch: 3,
            assignment_epoch: 3,
            assignor: "uniform".into(),
            members: vec![ConsumerMemberInfo {
                member_id: "m".into(),
                instance_id: String::new(),
                rack_id: "r1".into(),
                member_epoch: 2,
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                subscribed: vec!["t".into()],
                regex: String::new(),
                assignment: vec![TopicPartitions {
                    topic: "t".into(),
                    partitions: vec![0, 1],
                }],
                target: vec![TopicPartitions {
                    topic: "t".into(),
                    partitions: vec![0],
                }],
            }],
        }],
    })
    .unwrap();
    assert_eq!(ApiKey::from_i16(29), Some(ApiKey::ShareFetch));
    assert_eq!(ApiKey::from_i16(32), Some(ApiKey::ConsumerGroupDescribe));
    assert_eq!(ApiKey::from_i16(33), None);
}

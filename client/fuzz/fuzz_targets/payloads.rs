//! Every payload decoder on arbitrary bytes; whatever decodes must re-encode to the same bytes.
#![no_main]

use flume_protocol::messages::*;
use flume_protocol::record;
use libfuzzer_sys::fuzz_target;

fn round_trip<T: Encode + Decode + PartialEq + std::fmt::Debug>(data: &[u8]) {
    if let Ok(v) = T::decode_exact(data) {
        let mut buf = Vec::new();
        v.encode(&mut buf);
        let again = T::decode_exact(&buf).expect("re-encoded message decodes");
        assert_eq!(again, v);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else { return };
    match which % 18 {
        0 => round_trip::<ProduceRequest>(body),
        1 => round_trip::<ProduceResponse>(body),
        2 => round_trip::<FetchRequest>(body),
        3 => round_trip::<FetchResponse>(body),
        4 => round_trip::<JoinGroupRequest>(body),
        5 => round_trip::<JoinGroupResponse>(body),
        6 => round_trip::<LeaveGroupRequest>(body),
        7 => round_trip::<HeartbeatRequest>(body),
        8 => round_trip::<OffsetCommitRequest>(body),
        9 => round_trip::<OffsetCommitResponse>(body),
        10 => round_trip::<OffsetFetchRequest>(body),
        11 => round_trip::<OffsetFetchResponse>(body),
        12 => round_trip::<CreateTopicRequest>(body),
        13 => round_trip::<MetadataResponse>(body),
        14 => {
            let _ = decode_response::<FetchResponse>(body);
            let _ = decode_response::<JoinGroupResponse>(body);
        }
        15 => round_trip::<HeartbeatWaitRequest>(body),
        16 => round_trip::<GroupFetchRequest>(body),
        _ => {
            if record::validate_batch(body, u64::MAX).is_ok() {
                let recs = record::decode_all(&bytes::Bytes::copy_from_slice(body)).expect("a valid batch decodes");
                assert!(!recs.is_empty());
            }
        }
    }
});

//! The broker's request handling (decode, validate, produce, fetch, groups, offsets, admin) on
//! arbitrary requests against a real engine in a temp dir. Each input is a series of
//! `[api_key:u8][len:u8][payload]` requests; every one must produce a well-formed response frame
//! with its request id, and nothing may panic.
#![no_main]

mod engine;

use std::time::Duration;

use flume_protocol::frame::{decode_response, Decoded};
use flume_rt as rt;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let e = engine::engine("fuzz");
    let mut rest = data;
    let mut id = 0i32;
    while rest.len() >= 2 {
        // Keys 0-17: the original seven, the admin extensions, HEARTBEAT_WAIT, GROUP_FETCH.
        let api = i16::from(rest[0] % 18);
        let len = usize::from(rest[1]).min(rest.len() - 2);
        let payload = &rest[2..2 + len];
        rest = &rest[2 + len..];
        id += 1;
        let resp = rt::block_on(rt::timeout(
            Duration::from_millis(50),
            flume_broker::server::handle_request(e, api, id, payload),
        ));
        // A long poll or a join that waits for others may time out here; that is not a failure.
        if let Some(frame) = resp {
            match decode_response(&frame, 1 << 24) {
                Ok(Decoded::Frame(f, used)) => {
                    assert_eq!(used, frame.len());
                    assert_eq!(f.request_id, id);
                    assert!(f.payload.len() >= 2, "every response starts with an error code");
                }
                other => panic!("malformed response frame: {other:?}"),
            }
        }
    }
});

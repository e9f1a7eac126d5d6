//! The framer on arbitrary bytes: a frame, need-more, or an error; never a panic, and a frame
//! never claims more bytes than it was given.
#![no_main]

use flume_protocol::frame::{decode_request, decode_response, Decoded};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    while let Ok(Decoded::Frame(f, used)) = decode_request(rest, 1 << 16) {
        assert!(used <= rest.len() && used >= 10 && f.payload.len() == used - 10);
        rest = &rest[used..];
    }
    let mut rest = data;
    while let Ok(Decoded::Frame(f, used)) = decode_response(rest, 1 << 16) {
        assert!(used <= rest.len() && f.payload.len() == used - 8);
        rest = &rest[used..];
    }
});

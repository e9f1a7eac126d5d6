//! The Kafka listener's request handling (header, version check, every
//! served API, record batches) on arbitrary frames against a real engine in
//! a temp dir. Each input is a series of `[len:u8][frame]` requests (the
//! frame without its 4-byte size); nothing may panic or hang, and every
//! answer carries the request's correlation id.
#![no_main]

mod engine;

use std::time::Duration;

use flume_rt as rt;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let e = engine::engine("kafka-fuzz");
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let len = usize::from(len).min(tail.len());
        let frame = &tail[..len];
        rest = &tail[len..];
        let resp = rt::block_on(rt::timeout(
            Duration::from_millis(200),
            flume_broker::kafka::handle_request(e, frame),
        ));
        // Fetch may long-poll up to its max_wait; a timeout here is not a hang
        // of the connection (the listener applies the same bound), so only
        // check what answered.
        if let Some(Some(resp)) = resp {
            assert!(resp.len() >= 8, "a response has a size and a correlation id");
            let size = i32::from_be_bytes([resp[0], resp[1], resp[2], resp[3]]);
            assert_eq!(usize::try_from(size).ok(), Some(resp.len() - 4));
            assert_eq!(resp[4..8], frame[4..8], "correlation id");
        }
    }
});

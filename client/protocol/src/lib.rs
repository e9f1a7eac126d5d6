//! The Flume wire protocol, with no I/O: framing, the record format, the
//! typed messages and the error-code table. The broker depends on this module.
//!
//! ```text
//! request  = [size i32][api_key i16][request_id i32][payload]
//! response = [size i32][request_id i32][payload = [error_code i16][body]]
//! ```
//! All integers are big-endian; `size` counts the bytes after itself. A
//! connection carries many requests at once; responses are matched by
//! `request_id` and may come back in any order.
//!
//! Layout:
//! - [`frame`]: the framer (need more / malformed / frame) and frame builders.
//! - [`wire`]: bounds-checked primitives.
//! - [`codec`]: how each field type is encoded ([`codec::WireField`]) and the
//!   `message!` macro that derives a message's encoding from its field list.
//! - [`record`]: the record format, identical on disk and on the wire.
//! - [`kafka_batch`]: Kafka record batches (magic 2): checked splitting,
//!   bounded decompression, record walking, building with any codec.
//! - [`messages`]: request and response types; each request names its response.
//! - [`error_code`]: the stable error-code table.
//! - [`scram`]: SCRAM-SHA-256 messages and proofs (AUTHENTICATE).
//!
//! `docs/protocol.md` describes every message byte by byte.

pub mod codec;
pub mod error_code;
pub mod frame;
pub mod kafka_batch;
pub mod messages;
pub mod record;
pub mod scram;
pub mod wire;

#[cfg(test)]
mod tests;

pub use error_code::ErrorCode;
pub use messages::*;
pub use record::{Header, Record};

/// FNV-1a, 32 bit, of `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The partition a key is routed to: FNV-1a of the key bytes modulo the
/// partition count. The broker and the client both use this function.
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    fnv1a(key) % partitions.max(1)
}

/// A group's lag on one partition, the one definition every tool shares
/// (the CLI, the SDK's `Admin`, the dashboard and `/metrics`, embedded mode,
/// Python): the offsets from where the group reads next to the log end.
/// Where the group reads next is its committed offset, or the log start when
/// nothing is committed (`committed` < 0) or retention has passed the commit;
/// never negative.
pub fn lag(committed: i64, log_start: i64, log_end: i64) -> i64 {
    let from = if committed < 0 {
        log_start
    } else {
        committed.max(log_start)
    };
    (log_end - from).max(0)
}

/// Encodes a whole request frame into `buf`.
pub fn encode_request<R: Request>(buf: &mut Vec<u8>, request_id: i32, req: &R) {
    let start = frame::begin_request(buf, R::API_KEY as i16, request_id);
    req.encode(buf);
    frame::finish_frame(buf, start);
}

/// Encodes a whole response frame into `buf`.
pub fn encode_response_frame<R: Encode>(
    buf: &mut Vec<u8>,
    request_id: i32,
    result: Result<&R, ErrorCode>,
) {
    let start = frame::begin_response(buf, request_id);
    messages::encode_response(buf, result);
    frame::finish_frame(buf, start);
}

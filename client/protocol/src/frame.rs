//! Framing: `[size i32][api_key i16][request_id i32][payload]` for requests,
//! `[size i32][request_id i32][payload]` for responses; `size` counts the bytes after itself.

use bytes::BufMut;

/// Default largest frame, in bytes after the size field.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;
/// Request header after the size: api key and request id.
pub const REQUEST_HEADER_LEN: usize = 6;
/// Response header after the size: request id.
pub const RESPONSE_HEADER_LEN: usize = 4;

/// Why a frame cannot be accepted. The connection must be closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// Size is negative or smaller than the header.
    #[error("frame size {size} is impossible (header needs {min} bytes)")]
    TooSmall {
        /// The size read.
        size: i32,
        /// The smallest valid size.
        min: usize,
    },
    /// Size exceeds the configured maximum.
    #[error("frame of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// The size read.
        size: usize,
        /// The limit.
        max: usize,
    },
}

/// A framed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestFrame<'a> {
    /// API key.
    pub api_key: i16,
    /// Correlation id chosen by the client.
    pub request_id: i32,
    /// Payload.
    pub payload: &'a [u8],
}

/// A framed response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseFrame<'a> {
    /// Correlation id of the request.
    pub request_id: i32,
    /// Payload.
    pub payload: &'a [u8],
}

/// What the framer found at the start of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded<T> {
    /// A whole frame and the bytes it used.
    Frame(T, usize),
    /// More bytes are needed; the value is the total the frame needs, when known.
    NeedMore(Option<usize>),
}

fn frame_len(buf: &[u8], header: usize, max: usize) -> Result<Option<usize>, FrameError> {
    let Some(size) = buf.get(..4) else {
        return Ok(None);
    };
    let size = i32::from_be_bytes([size[0], size[1], size[2], size[3]]);
    let len = usize::try_from(size).map_err(|_| FrameError::TooSmall { size, min: header })?;
    if len < header {
        return Err(FrameError::TooSmall { size, min: header });
    }
    if len > max {
        return Err(FrameError::TooLarge { size: len, max });
    }
    Ok(Some(len))
}

/// Looks for a request frame at the start of `buf`.
///
/// # Errors
/// A size that is negative, smaller than the header or above `max`: the
/// connection cannot be resynchronised and must be closed.
pub fn decode_request(buf: &[u8], max: usize) -> Result<Decoded<RequestFrame<'_>>, FrameError> {
    let Some(len) = frame_len(buf, REQUEST_HEADER_LEN, max)? else {
        return Ok(Decoded::NeedMore(None));
    };
    let total = 4 + len;
    let Some(frame) = buf.get(4..total) else {
        return Ok(Decoded::NeedMore(Some(total)));
    };
    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
    let request_id = i32::from_be_bytes([frame[2], frame[3], frame[4], frame[5]]);
    Ok(Decoded::Frame(
        RequestFrame {
            api_key,
            request_id,
            payload: &frame[REQUEST_HEADER_LEN..],
        },
        total,
    ))
}

/// Looks for a response frame at the start of `buf`.
///
/// # Errors
/// As [`decode_request`].
pub fn decode_response(buf: &[u8], max: usize) -> Result<Decoded<ResponseFrame<'_>>, FrameError> {
    let Some(len) = frame_len(buf, RESPONSE_HEADER_LEN, max)? else {
        return Ok(Decoded::NeedMore(None));
    };
    let total = 4 + len;
    let Some(frame) = buf.get(4..total) else {
        return Ok(Decoded::NeedMore(Some(total)));
    };
    let request_id = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
    Ok(Decoded::Frame(
        ResponseFrame {
            request_id,
            payload: &frame[RESPONSE_HEADER_LEN..],
        },
        total,
    ))
}

/// Starts a request frame in `buf`; returns the position to pass to [`finish_frame`].
pub fn begin_request(buf: &mut Vec<u8>, api_key: i16, request_id: i32) -> usize {
    let start = buf.len();
    buf.put_i32(0);
    buf.put_i16(api_key);
    buf.put_i32(request_id);
    start
}

/// Starts a response frame in `buf`; returns the position to pass to [`finish_frame`].
pub fn begin_response(buf: &mut Vec<u8>, request_id: i32) -> usize {
    let start = buf.len();
    buf.put_i32(0);
    buf.put_i32(request_id);
    start
}

/// Writes the size field of the frame begun at `start`.
pub fn finish_frame(buf: &mut [u8], start: usize) {
    let size = crate::wire::len_i32(buf.len() - start - 4);
    buf[start..start + 4].copy_from_slice(&size.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_outcomes() {
        let mut buf = Vec::new();
        let s = begin_request(&mut buf, 4, 77);
        buf.extend_from_slice(b"abc");
        finish_frame(&mut buf, s);
        for cut in 0..buf.len() {
            assert!(matches!(
                decode_request(&buf[..cut], 1024).unwrap(),
                Decoded::NeedMore(_)
            ));
        }
        let Decoded::Frame(f, n) = decode_request(&buf, 1024).unwrap() else {
            panic!("expected a frame")
        };
        assert_eq!(
            (f.api_key, f.request_id, f.payload, n),
            (4, 77, &b"abc"[..], buf.len())
        );
        assert!(decode_request(&[0xff, 0xff, 0xff, 0xff], 1024).is_err());
        assert!(decode_request(&[0, 0, 0, 5], 1024).is_err());
        assert!(decode_request(&[0x7f, 0xff, 0xff, 0xff], 1024).is_err());
        assert!(decode_response(&[0, 0, 0, 3], 1024).is_err());
    }
}

//! Bounds-checked big-endian primitives shared by every message.
//!
//! Strings are `[len i16][utf-8]`, byte strings are `[len i32][bytes]` with
//! `-1` meaning null, arrays are `[count i32][items]`. Every read checks the
//! bytes that remain before it touches them, and reports the byte offset at
//! which decoding failed; nothing is preallocated from a peer's count.

use bytes::{BufMut, Bytes};

/// A payload that does not decode. Carries the byte offset of the failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The payload ended before a field was complete.
    #[error("truncated at byte {at}: needed {needed} more bytes, {remaining} remain")]
    Truncated {
        /// Offset of the field that did not fit.
        at: usize,
        /// Bytes the field needed.
        needed: usize,
        /// Bytes that were left.
        remaining: usize,
    },
    /// A length or count that cannot be valid (negative other than -1, too large).
    #[error("invalid length {len} at byte {at}")]
    InvalidLength {
        /// Offset of the length field.
        at: usize,
        /// The value read.
        len: i64,
    },
    /// A string that is not UTF-8.
    #[error("string at byte {at} is not valid utf-8")]
    InvalidUtf8 {
        /// Offset of the string.
        at: usize,
    },
    /// Bytes left over after the message was decoded.
    #[error("{extra} trailing bytes after the message")]
    TrailingBytes {
        /// How many bytes were left.
        extra: usize,
    },
    /// A field whose value is outside what the protocol allows.
    #[error("invalid value for {field} at byte {at}")]
    InvalidValue {
        /// The field name.
        field: &'static str,
        /// Offset of the field.
        at: usize,
    },
}

/// A cursor over a received payload.
///
/// Its methods are `#[inline]` (the ones that take bytes `always`): message
/// decoders are generic over the field types and are instantiated in the
/// calling crate, where these must inline to match a hand-written decoder.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    owner: Option<&'a Bytes>,
}

impl<'a> Reader<'a> {
    /// Starts reading `buf` at its first byte.
    #[inline]
    pub fn new(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            pos: 0,
            owner: None,
        }
    }

    /// Reads a shared buffer: byte strings taken with [`Reader::blob`] are
    /// zero-copy slices of it instead of copies.
    #[inline]
    pub fn shared(buf: &'a Bytes) -> Self {
        Reader {
            buf,
            pos: 0,
            owner: Some(buf),
        }
    }

    /// Reads `[len i32][bytes]` as an owned `Bytes`: a slice of the shared
    /// buffer when there is one, else a copy.
    #[inline(always)]
    pub fn blob(&mut self) -> Result<Bytes, WireError> {
        let owner = self.owner;
        let b = self.bytes()?;
        Ok(match owner {
            Some(o) => o.slice_ref(b),
            None => Bytes::copy_from_slice(b),
        })
    }

    /// Reads `[len i32][bytes]` where `-1` is null, as [`Reader::blob`] does.
    #[inline]
    pub fn nullable_blob(&mut self) -> Result<Option<Bytes>, WireError> {
        let owner = self.owner;
        Ok(self.nullable_bytes()?.map(|b| match owner {
            Some(o) => o.slice_ref(b),
            None => Bytes::copy_from_slice(b),
        }))
    }

    /// Bytes consumed so far.
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not yet consumed.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Fails unless every byte was consumed.
    #[inline]
    pub fn finish(&self) -> Result<(), WireError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(WireError::TrailingBytes { extra }),
        }
    }

    /// Takes the next `n` bytes.
    #[inline(always)]
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.remaining() < n {
            return Err(WireError::Truncated {
                at: self.pos,
                needed: n,
                remaining: self.remaining(),
            });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    #[inline]
    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// Reads a u8.
    #[inline]
    pub fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }
    /// Reads a big-endian i16.
    #[inline]
    pub fn i16(&mut self) -> Result<i16, WireError> {
        Ok(i16::from_be_bytes(self.array()?))
    }
    /// Reads a big-endian u16.
    #[inline]
    pub fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_be_bytes(self.array()?))
    }
    /// Reads a big-endian i32.
    #[inline]
    pub fn i32(&mut self) -> Result<i32, WireError> {
        Ok(i32::from_be_bytes(self.array()?))
    }
    /// Reads a big-endian u32.
    #[inline]
    pub fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    /// Reads a big-endian i64.
    #[inline]
    pub fn i64(&mut self) -> Result<i64, WireError> {
        Ok(i64::from_be_bytes(self.array()?))
    }
    /// Reads a big-endian u64.
    #[inline]
    pub fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// Reads `[len i16][utf-8]`.
    #[inline(always)]
    pub fn string(&mut self) -> Result<String, WireError> {
        let at = self.pos;
        let len = self.i16()?;
        let len = usize::try_from(len).map_err(|_| WireError::InvalidLength {
            at,
            len: len.into(),
        })?;
        let raw = self.take(len)?;
        std::str::from_utf8(raw)
            .map(str::to_owned)
            .map_err(|_| WireError::InvalidUtf8 { at })
    }

    /// Reads `[len i32][bytes]` where `-1` is null.
    #[inline(always)]
    pub fn nullable_bytes(&mut self) -> Result<Option<&'a [u8]>, WireError> {
        let at = self.pos;
        let len = self.i32()?;
        if len == -1 {
            return Ok(None);
        }
        let len = usize::try_from(len).map_err(|_| WireError::InvalidLength {
            at,
            len: len.into(),
        })?;
        self.take(len).map(Some)
    }

    /// Reads `[len i32][bytes]`, null not allowed.
    #[inline(always)]
    pub fn bytes(&mut self) -> Result<&'a [u8], WireError> {
        let at = self.pos;
        self.nullable_bytes()?
            .ok_or(WireError::InvalidLength { at, len: -1 })
    }

    /// Reads an array count and checks it against the bytes that remain,
    /// given the smallest encoded size of one item.
    #[inline]
    pub fn count(&mut self, min_item_bytes: usize) -> Result<usize, WireError> {
        let at = self.pos;
        let n = self.i32()?;
        let n = usize::try_from(n).map_err(|_| WireError::InvalidLength { at, len: n.into() })?;
        if n.saturating_mul(min_item_bytes.max(1)) > self.remaining() {
            return Err(WireError::InvalidLength { at, len: n as i64 });
        }
        Ok(n)
    }

    /// Reads an array of items with `item`.
    #[inline]
    pub fn array_of<T>(
        &mut self,
        min_item_bytes: usize,
        mut item: impl FnMut(&mut Self) -> Result<T, WireError>,
    ) -> Result<Vec<T>, WireError> {
        let n = self.count(min_item_bytes)?;
        // `n` is bounded by the bytes that remain, so this cannot be a peer-driven
        // allocation larger than the frame itself.
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(item(self)?);
        }
        Ok(out)
    }
}

/// Writing helpers on any `BufMut`.
pub trait WriteExt: BufMut {
    /// Writes `[len i16][utf-8]`; strings longer than `i16::MAX` are truncated
    /// at a char boundary (callers validate names well before that).
    fn put_string(&mut self, s: &str) {
        let mut end = s.len().min(i16::MAX as usize);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.put_i16(end as i16);
        self.put_slice(&s.as_bytes()[..end]);
    }
    /// Writes `[len i32][bytes]`, `-1` for `None`.
    fn put_nullable_bytes(&mut self, b: Option<&[u8]>) {
        match b {
            None => self.put_i32(-1),
            Some(b) => {
                self.put_i32(len_i32(b.len()));
                self.put_slice(b);
            }
        }
    }
    /// Writes `[len i32][bytes]`.
    fn put_blob(&mut self, b: &[u8]) {
        self.put_nullable_bytes(Some(b));
    }
    /// Writes an array count.
    fn put_count(&mut self, n: usize) {
        self.put_i32(len_i32(n));
    }
}

impl<B: BufMut + ?Sized> WriteExt for B {}

/// Converts a length to the wire's i32, saturating (frames are far smaller
/// than 2 GiB, enforced by `max_frame_bytes`).
pub fn len_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

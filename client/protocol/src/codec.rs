//! Per-type encoding: every field type of a message knows how to write and
//! read itself, so a message is only its list of fields (the crate-internal
//! `message!` macro below derives the rest).
//!
//! | Rust type | wire (see `docs/protocol.md`, "Primitive types") |
//! |---|---|
//! | `i8`, `i16`, `i32`, `i64` | big-endian two's complement |
//! | [`ErrorCode`] | `i16` |
//! | `String` | `len:i16` then UTF-8, `len` ≥ 0 |
//! | [`Bytes`] | `len:i32` then bytes (a zero-copy slice when decoding a shared frame) |
//! | `Option<Bytes>` | nullable bytes, `len` -1 = null |
//! | `Vec<T>` | `count:i32` then `count` items |
//! | a struct declared with `message!` | its fields in order |
//!
//! Hostile input: every read is bounds-checked by [`Reader`] and reports the
//! byte offset of the failure; a `Vec` count is checked against the bytes that
//! remain, using the item type's [`WireField::MIN_BYTES`], before anything is
//! allocated.

use bytes::{BufMut, Bytes};

use crate::error_code::ErrorCode;
use crate::wire::{Reader, WireError, WriteExt};

/// A type that is a field of a message on the wire.
pub trait WireField: Sized {
    /// The fewest bytes one encoded value takes. A `Vec<Self>` count is
    /// rejected when `count * MIN_BYTES` exceeds the bytes that remain, so
    /// this must never be larger than the true minimum.
    const MIN_BYTES: usize;

    /// Appends the encoded value to `buf`.
    fn put(&self, buf: &mut Vec<u8>);

    /// Reads one value.
    ///
    /// # Errors
    /// When the bytes do not form a valid value.
    fn get(r: &mut Reader<'_>) -> Result<Self, WireError>;
}

impl WireField for i8 {
    const MIN_BYTES: usize = 1;
    #[inline]
    fn put(&self, buf: &mut Vec<u8>) {
        buf.put_i8(*self);
    }
    #[inline]
    fn get(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(i8::from_be_bytes([r.u8()?]))
    }
}

/// The fixed-size integers.
macro_rules! int_field {
    ($($t:ty => $put:ident, $get:ident;)*) => {$(
        impl WireField for $t {
            const MIN_BYTES: usize = std::mem::size_of::<$t>();
            #[inline]
            fn put(&self, buf: &mut Vec<u8>) {
                buf.$put(*self);
            }
            #[inline]
            fn get(r: &mut Reader<'_>) -> Result<Self, WireError> {
                r.$get()
            }
        }
    )*};
}

int_field! {
    i16 => put_i16, i16;
    i32 => put_i32, i32;
    i64 => put_i64, i64;
}

impl WireField for ErrorCode {
    const MIN_BYTES: usize = 2;
    #[inline]
    fn put(&self, buf: &mut Vec<u8>) {
        buf.put_i16(self.code());
    }
    #[inline]
    fn get(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(ErrorCode::from_code(r.i16()?))
    }
}

impl WireField for String {
    const MIN_BYTES: usize = 2;
    #[inline]
    fn put(&self, buf: &mut Vec<u8>) {
        buf.put_string(self);
    }
    #[inline]
    fn get(r: &mut Reader<'_>) -> Result<Self, WireError> {
        r.string()
    }
}

impl WireField for Bytes {
    const MIN_BYTES: usize = 4;
    #[inline]
    fn put(&self, buf: &mut Vec<u8>) {
        buf.put_blob(self);
    }
    #[inline]
    fn get(r: &mut Reader<'_>) -> Result<Self, WireError> {
        r.blob()
    }
}

impl WireField for Option<Bytes> {
    const MIN_BYTES: usize = 4;
    #[inline]
    fn put(&self, buf: &mut Vec<u8>) {
        buf.put_nullable_bytes(self.as_deref());
    }
    #[inline]
    fn get(r: &mut Reader<'_>) -> Result<Self, WireError> {
        r.nullable_blob()
    }
}

impl<T: WireField> WireField for Vec<T> {
    const MIN_BYTES: usize = 4;
    #[inline]
    fn put(&self, buf: &mut Vec<u8>) {
        buf.put_count(self.len());
        for item in self {
            item.put(buf);
        }
    }
    #[inline]
    fn get(r: &mut Reader<'_>) -> Result<Self, WireError> {
        r.array_of(T::MIN_BYTES, T::get)
    }
}

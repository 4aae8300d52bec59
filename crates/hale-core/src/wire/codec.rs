//! The wire's primitives: size limits, the errors of decoding, the
//! bounds-checked reader, LEB128 varints, and the writer ([`Sink`]) that
//! both encodes and counts.

/// Largest datagram hale ever sends (fits a 1280-byte IPv6 minimum MTU with
/// headers to spare).
pub const MAX_DATAGRAM: usize = 1200;
/// Largest user metadata a member may carry.
pub const MAX_META: usize = 512;
/// Largest stream frame accepted (a full-state sync of a very large cluster).
pub const MAX_STREAM_FRAME: usize = 32 * 1024 * 1024;
/// Most messages in one packet.
pub const MAX_MESSAGES: usize = 255;

/// Why bytes could not be decoded. Nothing is changed by a failed decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The input ended inside a field.
    #[error("packet truncated")]
    Truncated,
    /// The first bytes were not hale's magic.
    #[error("not a hale packet (bad magic)")]
    BadMagic,
    /// The packet speaks a wire version this build does not.
    #[error("unsupported wire version {0}")]
    Version(u8),
    /// The packet belongs to another cluster.
    #[error("packet from another cluster")]
    ForeignCluster,
    /// A field held a value outside its range.
    #[error("invalid field: {0}")]
    Invalid(&'static str),
    /// The packet was larger than allowed for its channel.
    #[error("packet of {0} bytes exceeds the limit")]
    Oversize(usize),
    /// Bytes were left over after the last message (version 2, whose
    /// header counts its messages; from version 3 on, messages run to the
    /// end of the packet).
    #[error("trailing bytes after the last message")]
    Trailing,
}

/// A cursor over input bytes; every read is bounds-checked.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }
    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }
    /// Reads one byte.
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        let (&b, rest) = self.buf.split_first().ok_or(DecodeError::Truncated)?;
        self.buf = rest;
        Ok(b)
    }
    /// Reads `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.buf.len() {
            return Err(DecodeError::Truncated);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    /// Reads a fixed-size array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let b = self.bytes(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }
    /// Reads a LEB128 varint of at most 64 bits.
    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut out = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            out |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                if shift == 63 && b > 1 {
                    return Err(DecodeError::Invalid("varint overflow"));
                }
                if b == 0 && shift > 0 {
                    // Canonical encoding only: every value has exactly one form.
                    return Err(DecodeError::Invalid("overlong varint"));
                }
                return Ok(out);
            }
        }
        Err(DecodeError::Invalid("varint too long"))
    }
    /// Reads a varint that must fit a `u32`.
    pub fn varint32(&mut self) -> Result<u32, DecodeError> {
        u32::try_from(self.varint()?).map_err(|_| DecodeError::Invalid("varint exceeds u32"))
    }
}

/// Appends a LEB128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes `put_varint` writes for `v`.
pub fn varint_len(v: u64) -> usize {
    let bits = 64 - v.max(1).leading_zeros() as usize;
    bits.div_ceil(7).max(1)
}

/// Where a packet is written: a buffer (`encode`), or [`Len`], which only
/// counts the bytes (`encoded_len`), so that the length always agrees with
/// the encoding.
pub(crate) trait Sink {
    fn bytes(&mut self, b: &[u8]);
    fn byte(&mut self, b: u8) {
        self.bytes(&[b]);
    }
    fn varint(&mut self, v: u64);
    /// Something whose encoding takes `len()` bytes and is written by
    /// `encode` (an identity: see `crate::identity::SinkId`).
    fn encoded(&mut self, len: impl FnOnce() -> usize, encode: impl FnOnce(&mut Vec<u8>));
}

impl Sink for Vec<u8> {
    fn bytes(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
    fn varint(&mut self, v: u64) {
        put_varint(self, v);
    }
    fn encoded(&mut self, _len: impl FnOnce() -> usize, encode: impl FnOnce(&mut Vec<u8>)) {
        encode(self);
    }
}

/// A [`Sink`] that counts.
pub(crate) struct Len(pub(crate) usize);

impl Sink for Len {
    fn bytes(&mut self, b: &[u8]) {
        self.0 += b.len();
    }
    fn varint(&mut self, v: u64) {
        self.0 += varint_len(v);
    }
    fn encoded(&mut self, len: impl FnOnce() -> usize, _encode: impl FnOnce(&mut Vec<u8>)) {
        self.0 += len();
    }
}

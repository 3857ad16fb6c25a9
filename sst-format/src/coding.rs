//! Integer encodings of RocksDB's `util/coding.h`: little-endian fixed-width integers and
//! LEB128 varints, decoded without panicking.
//!
//! Varints are decoded **strictly**: a redundant trailing `0x00` continuation group (e.g.
//! `85 00` for 5) and bits beyond the target width are rejected. RocksDB's encoders only ever
//! produce the canonical form, so this rejects no file RocksDB writes, and it makes a bit flip
//! in an unchecksummed fv <= 5 footer handle detectable.

use crate::error::{Error, Result};

/// A forward-only reader over a byte slice.
#[derive(Debug, Clone)]
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// Bytes not yet consumed.
    pub(crate) fn remaining(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or(&[])
    }

    /// Offset of the next unread byte.
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.remaining().is_empty()
    }

    /// Consumes `n` bytes.
    pub(crate) fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        let rest = self.remaining();
        match rest.get(..n) {
            Some(s) => {
                self.pos += n; // n <= rest.len(), so pos + n <= buf.len()
                Ok(s)
            }
            None => Err(Error::corrupt(format!(
                "{what}: needs {n} bytes, {} left",
                rest.len()
            ))),
        }
    }

    pub(crate) fn varint64(&mut self, what: &'static str) -> Result<u64> {
        // One byte below 0x80 is a whole canonical varint (most lengths in savepoints and
        // manifests): no loop, no call.
        if let Some(&byte) = self.remaining().first() {
            if byte < 0x80 {
                self.pos += 1;
                return Ok(u64::from(byte));
            }
        }
        let (v, n) = decode_varint(self.remaining(), 64, what)?;
        self.pos += n;
        Ok(v)
    }

    pub(crate) fn varint32(&mut self, what: &'static str) -> Result<u32> {
        let (v, n) = decode_varint(self.remaining(), 32, what)?;
        self.pos += n;
        // decode_varint with bits = 32 never returns a value above u32::MAX.
        u32::try_from(v).map_err(|_| Error::corrupt(format!("{what}: varint32 overflow")))
    }
}

/// Decodes one canonical LEB128 varint of at most `bits` bits from the start of `buf`.
/// Returns the value and the number of bytes consumed.
pub(crate) fn decode_varint(buf: &[u8], bits: u32, what: &'static str) -> Result<(u64, usize)> {
    let max_len = bits.div_ceil(7) as usize; // 5 for 32 bits, 10 for 64
    let mut value: u64 = 0;
    for (i, &byte) in buf.iter().enumerate().take(max_len) {
        let shift = 7 * i as u32;
        let group = u64::from(byte & 0x7f);
        // Bits that would fall beyond the target width.
        let room = bits - shift; // shift < bits because i < max_len
        if room < 7 && (group >> room) != 0 {
            return Err(Error::corrupt(format!(
                "{what}: varint overflows {bits} bits"
            )));
        }
        value |= group << shift;
        if byte & 0x80 == 0 {
            if i > 0 && byte == 0 {
                return Err(Error::corrupt(format!("{what}: non-canonical varint")));
            }
            return Ok((value, i + 1));
        }
    }
    if buf.len() < max_len {
        Err(Error::corrupt(format!("{what}: truncated varint")))
    } else {
        Err(Error::corrupt(format!(
            "{what}: varint longer than {max_len} bytes"
        )))
    }
}

/// Reads a little-endian u32 at `off`.
pub(crate) fn fixed32(buf: &[u8], off: usize) -> Option<u32> {
    let b = buf.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Reads a little-endian u64 at `off`.
pub(crate) fn fixed64(buf: &[u8], off: usize) -> Option<u64> {
    let b = buf.get(off..off.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Some(u64::from_le_bytes(a))
}

/// Appends the canonical LEB128 encoding of `v` (the savepoint writer, tests).
pub(crate) fn put_varint64(dst: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        dst.push((v as u8) | 0x80);
        v >>= 7;
    }
    dst.push(v as u8);
}

/// The bytes [`put_varint64`] writes for `v`.
pub(crate) fn varint64_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint64_len_is_what_put_writes() {
        for v in [
            0u64,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut b = Vec::new();
            put_varint64(&mut b, v);
            assert_eq!(varint64_len(v), b.len(), "{v}");
        }
    }

    #[test]
    fn varint_roundtrip_and_strictness() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put_varint64(&mut b, v);
            assert_eq!(decode_varint(&b, 64, "t").unwrap(), (v, b.len()));
        }
        assert!(decode_varint(&[0x85, 0x00], 64, "t").is_err());
        assert!(decode_varint(&[0x80], 64, "t").is_err());
        assert!(decode_varint(&[], 64, "t").is_err());
        // u32::MAX is ff ff ff ff 0f; 0x10 in the 5th byte overflows.
        assert_eq!(
            decode_varint(&[0xff, 0xff, 0xff, 0xff, 0x0f], 32, "t").unwrap(),
            (u32::MAX as u64, 5)
        );
        assert!(decode_varint(&[0xff, 0xff, 0xff, 0xff, 0x1f], 32, "t").is_err());
        // u64::MAX ends with 0x01 in the 10th byte; 0x02 overflows.
        let mut b = vec![0xff; 9];
        b.push(0x01);
        assert_eq!(decode_varint(&b, 64, "t").unwrap(), (u64::MAX, 10));
        b[9] = 0x02;
        assert!(decode_varint(&b, 64, "t").is_err());
        assert!(decode_varint(&[0xff; 11], 64, "t").is_err());
    }

    #[test]
    fn fixed_reads_are_bounds_checked() {
        assert_eq!(fixed32(&[1, 0, 0, 0], 0), Some(1));
        assert_eq!(fixed32(&[1, 0, 0], 0), None);
        assert_eq!(fixed32(&[1, 0, 0, 0], usize::MAX), None);
        assert_eq!(fixed64(&[0; 8], 1), None);
    }
}

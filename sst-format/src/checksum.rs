//! RocksDB's built-in block checksums and the format_version >= 6 context modifier.
//!
//! This module owns [`ChecksumType`] and the exact arithmetic of RocksDB's
//! `ComputeBuiltinChecksum` (`table/format.cc`), `crc32c::Mask` (`util/crc32c.h`) and
//! `ChecksumModifierForContext` (`table/format.h`). Nothing here reads files.

use crate::error::{Error, Result};

/// `kMaskDelta` of `util/crc32c.h`.
const CRC32C_MASK_DELTA: u32 = 0xa282_ead8;

/// `kRandomPrime` of `ModifyChecksumForLastByte` in `table/format.cc`.
const XXH3_LAST_BYTE_PRIME: u32 = 0x6b90_83d9;

/// The checksum algorithm of a block-based table, stored in byte 0 of the footer
/// (`enum ChecksumType` in `include/rocksdb/table.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ChecksumType {
    /// `kNoChecksum` (0): every checksum is computed as 0 (RocksDB still compares it).
    NoChecksum = 0,
    /// `kCRC32c` (1): masked CRC-32C (Castagnoli), the default before RocksDB 8.
    Crc32c = 1,
    /// `kxxHash` (2): XXH32 with seed 0.
    XxHash32 = 2,
    /// `kxxHash64` (3): lower 32 bits of XXH64 with seed 0.
    XxHash64 = 3,
    /// `kXXH3` (4, the default): lower 32 bits of XXH3-64 over all but the last byte, mixed
    /// with the last byte.
    Xxh3 = 4,
}

impl ChecksumType {
    /// Decodes the footer's checksum-type byte.
    pub fn from_u8(b: u8) -> Result<Self> {
        Ok(match b {
            0 => ChecksumType::NoChecksum,
            1 => ChecksumType::Crc32c,
            2 => ChecksumType::XxHash32,
            3 => ChecksumType::XxHash64,
            4 => ChecksumType::Xxh3,
            other => return Err(Error::UnknownChecksumType(other)),
        })
    }

    /// The on-disk byte.
    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// `ComputeBuiltinChecksum(type, data, data.len())`: the checksum of `data`, where for a
    /// block `data` is its contents followed by the compression-type byte.
    pub fn compute(self, data: &[u8]) -> u32 {
        match self {
            ChecksumType::NoChecksum => 0,
            ChecksumType::Crc32c => crc32c_mask(crc32c::crc32c(data)),
            ChecksumType::XxHash32 => xxhash_rust::xxh32::xxh32(data, 0),
            ChecksumType::XxHash64 => xxhash_rust::xxh64::xxh64(data, 0) as u32,
            ChecksumType::Xxh3 => match data.split_last() {
                None => 0,
                Some((&last, head)) => {
                    let v = xxhash_rust::xxh3::xxh3_64(head) as u32;
                    v ^ u32::from(last).wrapping_mul(XXH3_LAST_BYTE_PRIME)
                }
            },
        }
    }
}

impl std::fmt::Display for ChecksumType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ChecksumType::NoChecksum => "none",
            ChecksumType::Crc32c => "crc32c",
            ChecksumType::XxHash32 => "xxhash32",
            ChecksumType::XxHash64 => "xxhash64",
            ChecksumType::Xxh3 => "xxh3",
        })
    }
}

/// `crc32c::Mask`: rotate right by 15 and add `0xa282ead8` (wrapping).
pub fn crc32c_mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(CRC32C_MASK_DELTA)
}

/// `crc32c::Unmask`, the inverse of [`crc32c_mask`].
pub fn crc32c_unmask(masked: u32) -> u32 {
    masked.wrapping_sub(CRC32C_MASK_DELTA).rotate_left(15)
}

/// `ChecksumModifierForContext(base, offset)`: added (wrapping) to every stored checksum of a
/// format_version >= 6 file so that a valid block copied to the wrong offset (or into another
/// file) fails verification. Zero when `base` is zero (fv <= 5).
pub fn context_modifier(base_context_checksum: u32, offset: u64) -> u32 {
    if base_context_checksum == 0 {
        return 0;
    }
    let lower = offset as u32;
    let upper = (offset >> 32) as u32;
    base_context_checksum ^ lower.wrapping_add(upper)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_roundtrip() {
        for c in [0u32, 1, 0xdead_beef, u32::MAX] {
            assert_eq!(crc32c_unmask(crc32c_mask(c)), c);
        }
    }

    #[test]
    fn known_values() {
        // CRC-32C check value of "123456789" is 0xe3069283.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        // XXH32("", 0) and XXH64("", 0) reference values.
        assert_eq!(ChecksumType::XxHash32.compute(b""), 0x02cc_5d05);
        assert_eq!(
            ChecksumType::XxHash64.compute(b""),
            0xef46_db37_51d8_e999u64 as u32
        );
        assert_eq!(ChecksumType::Xxh3.compute(b""), 0);
        // XXH3 of one byte: XXH3_64("") = 0x2d06800538d394c2, low 32 = 0x38d394c2.
        assert_eq!(
            ChecksumType::Xxh3.compute(&[0]),
            0x38d3_94c2 ^ 0u32.wrapping_mul(XXH3_LAST_BYTE_PRIME)
        );
        assert_eq!(
            ChecksumType::Xxh3.compute(&[2]),
            0x38d3_94c2 ^ 2u32.wrapping_mul(XXH3_LAST_BYTE_PRIME)
        );
        assert_eq!(ChecksumType::NoChecksum.compute(b"abc"), 0);
    }

    #[test]
    fn modifier() {
        assert_eq!(context_modifier(0, 12345), 0);
        assert_eq!(context_modifier(7, 0), 7);
        assert_eq!(context_modifier(7, (1u64 << 32) | 1), 7 ^ 2);
        assert_eq!(
            context_modifier(1, u64::MAX),
            1 ^ u32::MAX.wrapping_add(u32::MAX)
        );
    }

    #[test]
    fn type_byte() {
        for b in 0..=4u8 {
            assert_eq!(ChecksumType::from_u8(b).unwrap().as_u8(), b);
        }
        assert!(matches!(
            ChecksumType::from_u8(5),
            Err(Error::UnknownChecksumType(5))
        ));
    }
}

//! Block trailers and the key/value block encoding used by the metaindex and properties blocks.
//!
//! This module owns two things from RocksDB: the 5-byte block trailer and its verification
//! (`VerifyBlockChecksum` in `table/block_based/reader_common.cc`), and the decoding of an
//! uncompressed block's entries and restart array (`table/block_based/block_builder.cc`,
//! `block_util.h` `DecodeEntry`, `data_block_footer.cc`). Decoding is stricter than RocksDB's
//! iterator: every entry is walked, the restart array must point at entry boundaries with no
//! shared prefix, and the block-footer feature bits (hash index, separated values, uniform
//! keys) must be clear, since RocksDB never sets them on meta blocks.

use std::ops::Range;

use crate::checksum::context_modifier;
use crate::coding::{fixed32, Cursor};
use crate::error::{Error, Result};
use crate::footer::{Footer, BLOCK_TRAILER_LEN};

/// `DataBlockFooter::kMaxNumRestarts`: the low 28 bits of a block's last u32.
const MAX_NUM_RESTARTS: u32 = (1 << 28) - 1;

/// Decoded keys of one block may total at most this many times the block's size (or
/// [`MIN_KEY_BYTES_BUDGET`], whichever is larger). Prefix compression could otherwise make a
/// block of `n` bytes expand to ~n²/4 key bytes; real meta blocks expand by less than 3×.
const MAX_KEY_EXPANSION: usize = 16;

/// Floor of the decoded-key budget of one block.
const MIN_KEY_BYTES_BUDGET: usize = 1 << 20;

/// Compression-type byte meaning "not compressed" (`kNoCompression`).
pub(crate) const NO_COMPRESSION: u8 = 0;

/// Verifies the trailer of one block. `block_with_trailer` is the block's contents followed
/// by its 5-byte trailer; `offset` is the block's file offset (the fv >= 6 context).
/// Returns the compression-type byte.
pub(crate) fn verify_trailer(
    footer: &Footer,
    block_with_trailer: &[u8],
    offset: u64,
    block: &'static str,
    verify: bool,
) -> Result<u8> {
    let (covered, stored) = split_trailer(block_with_trailer, block)?;
    // The checksum covers the contents and the compression-type byte.
    let compression = covered.last().copied().unwrap_or(NO_COMPRESSION);
    if verify {
        let computed = footer.checksum_type.compute(covered);
        let stored = stored.wrapping_sub(context_modifier(footer.base_context_checksum, offset));
        if computed != stored {
            return Err(Error::ChecksumMismatch {
                block,
                offset,
                stored,
                computed,
            });
        }
    }
    Ok(compression)
}

/// Whether the trailer checksum of `block_with_trailer` matches (no error detail).
pub(crate) fn trailer_matches(footer: &Footer, block_with_trailer: &[u8], offset: u64) -> bool {
    match split_trailer(block_with_trailer, "block") {
        Ok((covered, stored)) => {
            footer.checksum_type.compute(covered)
                == stored.wrapping_sub(context_modifier(footer.base_context_checksum, offset))
        }
        Err(_) => false,
    }
}

/// Splits into (contents + compression byte, stored checksum).
fn split_trailer<'a>(block_with_trailer: &'a [u8], block: &'static str) -> Result<(&'a [u8], u32)> {
    let n = block_with_trailer.len();
    if (n as u64) < BLOCK_TRAILER_LEN {
        return Err(Error::corrupt(format!(
            "{block} block shorter than its trailer"
        )));
    }
    let covered_len = n - 4;
    let stored = fixed32(block_with_trailer, covered_len)
        .ok_or_else(|| Error::corrupt(format!("{block} block trailer")))?;
    Ok((&block_with_trailer[..covered_len], stored))
}

/// One key/value entry of a block; `value` is a byte range inside the block contents.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub key: Vec<u8>,
    pub value: Range<usize>,
}

/// Decodes every entry of an uncompressed block (contents without trailer), checking the
/// structure (see the module docs) and that keys are strictly increasing bytewise (RocksDB's
/// "properties unsorted" check; the metaindex is written from a `std::map`, so it holds too):
/// `entry* | restarts: u32[num_restarts] | num_restarts: u32`, where
/// `entry = varint32 shared | varint32 non_shared | varint32 value_len | key_delta | value`.
#[cfg(test)]
pub(crate) fn decode_entries(contents: &[u8], block: &'static str) -> Result<Vec<Entry>> {
    let mut entries = Vec::new();
    walk_entries(contents, block, |key, value| {
        entries.push(Entry {
            key: key.to_vec(),
            value,
        });
        Ok(())
    })?;
    Ok(entries)
}

/// Walks the entries of a block, checking its structure as the tests' `decode_entries` does,
/// calling `f(full_key, value_range)` for each, without allocating per entry.
pub(crate) fn walk_entries(
    contents: &[u8],
    block: &'static str,
    mut f: impl FnMut(&[u8], Range<usize>) -> Result<()>,
) -> Result<()> {
    let len = contents.len();
    let packed = len
        .checked_sub(4)
        .and_then(|p| fixed32(contents, p))
        .ok_or_else(|| Error::corrupt(format!("{block} block too small for its footer")))?;
    if packed > MAX_NUM_RESTARTS {
        return Err(Error::corrupt(format!(
            "{block} block footer {packed:#010x} sets feature bits (hash index, uniform keys, separated values or reserved)"
        )));
    }
    let num_restarts = packed as usize; // < 2^28
    let restarts_start = (len - 4) // len >= 4 checked above
        .checked_sub(num_restarts * 4)
        .ok_or_else(|| {
            Error::corrupt(format!(
                "{block} block declares {num_restarts} restarts, more than fit in {len} bytes"
            ))
        })?;
    let restart = |j: usize| -> Option<usize> {
        (j < num_restarts)
            .then(|| fixed32(contents, restarts_start + 4 * j))
            .flatten()
            .map(|r| r as usize)
    };
    let bad_restart = |j: usize| {
        Error::corrupt(format!(
            "{block} block restart point {j} is not the start of an entry with no shared prefix"
        ))
    };
    // The restart array must list, in increasing order starting at 0, offsets of entries
    // with shared == 0. BlockBuilder always writes at least one (an empty block: one, at 0).
    if restart(0) != Some(0) {
        return Err(bad_restart(0));
    }
    let data = &contents[..restarts_start];

    let mut cur = Cursor::new(data);
    let mut prev_key: Vec<u8> = Vec::new();
    let mut key_bytes: usize = 0;
    let key_budget = MAX_KEY_EXPANSION
        .saturating_mul(len)
        .max(MIN_KEY_BYTES_BUDGET);
    let mut next_restart = 0usize; // index of the next restart point to meet
    let mut first = true;
    while !cur.is_empty() {
        let start = cur.position();
        let shared = cur.varint32("block entry shared length")? as usize;
        let non_shared = cur.varint32("block entry key length")? as usize;
        let value_len = cur.varint32("block entry value length")? as usize;
        let Some(prev_tail) = prev_key.get(shared..) else {
            return Err(Error::corrupt(format!(
                "{block} block entry at {start} shares {shared} bytes of a {}-byte previous key",
                prev_key.len()
            )));
        };
        let delta = cur.take(non_shared, "block entry key")?;
        let value_start = cur.position();
        cur.take(value_len, "block entry value")?;
        // key = prev[..shared] ++ delta, so key > prev iff delta > prev[shared..].
        if !first && delta <= prev_tail {
            return Err(Error::corrupt(format!(
                "{block} block keys not strictly increasing at entry offset {start}"
            )));
        }
        match restart(next_restart) {
            Some(r) if r == start => {
                if shared != 0 {
                    return Err(bad_restart(next_restart));
                }
                next_restart += 1;
            }
            Some(r) if r < start => return Err(bad_restart(next_restart)),
            _ => {}
        }
        prev_key.truncate(shared);
        prev_key.extend_from_slice(delta);
        // Prefix compression lets a small block describe long keys; cap what we materialize.
        key_bytes = key_bytes.saturating_add(prev_key.len());
        if key_bytes > key_budget {
            return Err(Error::corrupt(format!(
                "{block} block keys expand to more than {key_budget} bytes"
            )));
        }
        f(&prev_key, value_start..cur.position())?;
        first = false;
    }
    // Every restart point must have been met (an empty block's single restart at 0 counts).
    if first {
        if num_restarts != 1 {
            return Err(bad_restart(1));
        }
    } else if next_restart != num_restarts {
        return Err(bad_restart(next_restart));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::coding::put_varint64;

    /// Builds a block like RocksDB's `BlockBuilder` with the given restart interval.
    pub(crate) fn build_block(kvs: &[(&[u8], &[u8])], restart_interval: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut restarts = vec![0u32];
        let mut prev: &[u8] = &[];
        for (i, (k, v)) in kvs.iter().enumerate() {
            let shared = if i % restart_interval == 0 {
                if i > 0 {
                    restarts.push(out.len() as u32);
                }
                0
            } else {
                prev.iter()
                    .zip(k.iter())
                    .take_while(|(a, b)| a == b)
                    .count()
            };
            put_varint64(&mut out, shared as u64);
            put_varint64(&mut out, (k.len() - shared) as u64);
            put_varint64(&mut out, v.len() as u64);
            out.extend_from_slice(&k[shared..]);
            out.extend_from_slice(v);
            prev = k;
        }
        for r in &restarts {
            out.extend_from_slice(&r.to_le_bytes());
        }
        out.extend_from_slice(&(restarts.len() as u32).to_le_bytes());
        out
    }

    #[test]
    fn decode_roundtrip() {
        let kvs: Vec<(&[u8], &[u8])> = vec![
            (b"rocksdb.a", b"1"),
            (b"rocksdb.abc", b"22"),
            (b"rocksdb.b", b""),
        ];
        for interval in [1, 2, i32::MAX as usize] {
            let b = build_block(&kvs, interval);
            let e = decode_entries(&b, "t").unwrap();
            assert_eq!(e.len(), 3);
            for (got, (k, v)) in e.iter().zip(&kvs) {
                assert_eq!(&got.key[..], *k);
                assert_eq!(&b[got.value.clone()], *v);
            }
        }
        let empty = build_block(&[], 1);
        assert_eq!(empty.len(), 8);
        assert!(decode_entries(&empty, "t").unwrap().is_empty());
    }

    #[test]
    fn decode_rejects_bad_restarts_and_flags() {
        let kvs: Vec<(&[u8], &[u8])> = vec![(b"a", b"1"), (b"ab", b"2")];
        let good = build_block(&kvs, 1);
        let n = good.len();
        let mut b = good.clone();
        b[n - 1] |= 0x80; // hash index bit
        assert!(decode_entries(&b, "t").is_err());
        let mut b = good.clone();
        b[n - 8] = 1; // second restart no longer at an entry boundary
        assert!(decode_entries(&b, "t").is_err());
        let mut b = good.clone();
        b[n - 4] = 200; // too many restarts
        assert!(decode_entries(&b, "t").is_err());
        assert!(decode_entries(&[1, 0, 0], "t").is_err());
        for (interval, kvs) in [
            (1, vec![(&b"b"[..], &b""[..]), (b"a", b"")]),
            (1, vec![(b"a", b""), (b"a", b"")]),
            (16, vec![(b"ab", b""), (b"a", b"")]),
            (16, vec![(b"ab", b""), (b"ab", b"")]),
        ] {
            let unsorted = build_block(&kvs, interval);
            assert!(decode_entries(&unsorted, "t").is_err());
        }
    }

    #[test]
    fn prefix_compression_bomb_is_refused() {
        // One 64 KiB key, then 60 000 entries each sharing all of it plus one new byte:
        // ~240 KB of block describing ~4 GB of keys.
        let mut out = Vec::new();
        put_varint64(&mut out, 0);
        put_varint64(&mut out, 65_536);
        put_varint64(&mut out, 0);
        out.extend(std::iter::repeat_n(b'a', 65_536));
        for len in 65_536u64..65_536 + 60_000 {
            put_varint64(&mut out, len);
            put_varint64(&mut out, 1);
            put_varint64(&mut out, 0);
            out.push(b'b');
        }
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&1u32.to_le_bytes());
        match decode_entries(&out, "t") {
            Err(Error::Corrupt { what }) => assert!(what.contains("expand"), "{what}"),
            other => panic!("{other:?}"),
        }
    }
}

//! Key groups: the unit of state ownership and rescaling (docs/architecture.md §8, invariant 7).
//!
//! A key's group is `murmur3_x86_32(serialized key, seed 0) % max_parallelism`. Operator
//! instance `i` of `p` owns a contiguous range of groups, so a rescale is an intersection of
//! ranges. Every RocksDB key starts with its group, big-endian, so one group is one contiguous
//! key range. Changing any function here is a checkpoint format break.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Largest supported max parallelism (number of key groups), as in Flink.
pub const MAX_MAX_PARALLELISM: u32 = 32768;

/// MurmurHash3 x86 32-bit, the hash that assigns keys to key groups.
pub fn murmur3_x86_32(data: &[u8], seed: u32) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut h = seed;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut k: u32 = 0;
        for (i, b) in tail.iter().enumerate() {
            k |= u32::from(*b) << (8 * i);
        }
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
    }
    // Length is mixed in modulo 2^32, as the reference implementation does.
    h ^= data.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// The key group of a serialized key.
pub fn key_group_of(serialized_key: &[u8], max_parallelism: u32) -> u16 {
    // max_parallelism is validated to be in 1..=32768, so the result fits in u16.
    (murmur3_x86_32(serialized_key, 0) % max_parallelism.max(1)) as u16
}

/// Flink's default: `clamp(next_pow2(p + p/2), 128, 32768)`.
pub fn default_max_parallelism(parallelism: u32) -> u32 {
    let wanted = parallelism.saturating_add(parallelism / 2).max(1);
    wanted
        .checked_next_power_of_two()
        .unwrap_or(MAX_MAX_PARALLELISM)
        .clamp(128, MAX_MAX_PARALLELISM)
}

/// Checks that `max_parallelism` is usable.
pub fn validate_max_parallelism(max_parallelism: u32) -> Result<()> {
    if max_parallelism == 0 || max_parallelism > MAX_MAX_PARALLELISM {
        return Err(Error::InvalidKeyGroups(format!(
            "max parallelism {max_parallelism} is not in 1..={MAX_MAX_PARALLELISM}"
        )));
    }
    Ok(())
}

/// Width in bytes of the key-group prefix: 1 when `max_parallelism <= 128`, else 2 (as Flink).
pub fn prefix_len(max_parallelism: u32) -> usize {
    if max_parallelism <= 128 {
        1
    } else {
        2
    }
}

/// How many leading key bytes compaction cuts its output files at (RocksDB's fixed-prefix
/// SST partitioner), for a backend of `max_parallelism` that owns `range`: the whole
/// key-group prefix, so every compacted file holds one key group, unless that would make
/// more than 256 files per level (two-byte prefixes, more than 256 owned groups); then the
/// first byte, so a file holds at most 256 neighbouring groups and a level at most 128
/// files. See `DbOptions::key_group_files`.
pub fn file_partition_prefix_len(max_parallelism: u32, range: KeyGroupRange) -> usize {
    if prefix_len(max_parallelism) == 2 && range.len() > 256 {
        1
    } else {
        prefix_len(max_parallelism)
    }
}

/// Writes the big-endian key-group prefix.
pub fn write_prefix(out: &mut impl Extend<u8>, key_group: u16, max_parallelism: u32) {
    if prefix_len(max_parallelism) == 1 {
        out.extend([key_group as u8]);
    } else {
        out.extend(key_group.to_be_bytes());
    }
}

/// The big-endian key-group prefix of group `group` as a key, which may be `max_parallelism`:
/// the prefix right after the last group, the exclusive end of a range's keys. `group` is at
/// most `max_parallelism`, at most 32768 once validated, so it fits in 16 bits.
pub(crate) fn group_prefix(group: u32, max_parallelism: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(2);
    write_prefix(&mut out, group as u16, max_parallelism);
    out
}

/// Reads the key-group prefix from a stored key.
pub fn read_prefix(key: &[u8], max_parallelism: u32) -> Result<u16> {
    match (prefix_len(max_parallelism), key) {
        (1, [g, ..]) => Ok(u16::from(*g)),
        (2, [a, b, ..]) => Ok(u16::from_be_bytes([*a, *b])),
        _ => Err(Error::decode("key-group prefix", "key shorter than prefix")),
    }
}

/// An inclusive range of key groups `[start, end]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KeyGroupRange {
    /// First group (inclusive).
    pub start: u16,
    /// Last group (inclusive).
    pub end: u16,
}

impl KeyGroupRange {
    /// A range `[start, end]`; `start > end` is an error.
    pub fn new(start: u16, end: u16) -> Result<Self> {
        if start > end {
            return Err(Error::InvalidKeyGroups(format!(
                "range start {start} is after end {end}"
            )));
        }
        Ok(KeyGroupRange { start, end })
    }

    /// Every group of a job with `max_parallelism` groups.
    pub fn all(max_parallelism: u32) -> Result<Self> {
        validate_max_parallelism(max_parallelism)?;
        Self::new(0, (max_parallelism - 1) as u16)
    }

    /// The range operator `index` of `parallelism` owns:
    /// `[ceil(i·M/p), floor(((i+1)·M − 1)/p)]`.
    pub fn for_operator(max_parallelism: u32, parallelism: u32, index: u32) -> Result<Self> {
        validate_max_parallelism(max_parallelism)?;
        if parallelism == 0 || parallelism > max_parallelism || index >= parallelism {
            return Err(Error::InvalidKeyGroups(format!(
                "operator {index} of parallelism {parallelism} with max parallelism {max_parallelism}"
            )));
        }
        let (m, p, i) = (
            u64::from(max_parallelism),
            u64::from(parallelism),
            u64::from(index),
        );
        let start = (i * m).div_ceil(p);
        let end = ((i + 1) * m - 1) / p;
        Self::new(start as u16, end as u16)
    }

    /// Whether `group` lies in the range.
    pub fn contains(&self, group: u16) -> bool {
        self.start <= group && group <= self.end
    }

    /// Number of groups.
    pub fn len(&self) -> u32 {
        u32::from(self.end) - u32::from(self.start) + 1
    }

    /// Always false: a range holds at least one group.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Groups in both ranges, if any.
    pub fn intersect(&self, other: &KeyGroupRange) -> Option<KeyGroupRange> {
        let start = self.start.max(other.start);
        let end = self.end.min(other.end);
        (start <= end).then_some(KeyGroupRange { start, end })
    }

    /// Iterates the groups in order.
    pub fn iter(&self) -> impl Iterator<Item = u16> {
        self.start..=self.end
    }
}

impl fmt::Display for KeyGroupRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {}]", self.start, self.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_partitions_follow_key_groups_up_to_256_per_level() {
        let r = |s, e| KeyGroupRange::new(s, e).unwrap();
        // One-byte prefixes: always the whole prefix (at most 128 groups).
        assert_eq!(file_partition_prefix_len(128, r(0, 127)), 1);
        assert_eq!(file_partition_prefix_len(2, r(0, 1)), 1);
        // Two-byte prefixes: per key group while at most 256 are owned...
        assert_eq!(file_partition_prefix_len(32768, r(0, 255)), 2);
        assert_eq!(file_partition_prefix_len(4096, r(1000, 1255)), 2);
        // ...and per 256 groups above that.
        assert_eq!(file_partition_prefix_len(32768, r(0, 256)), 1);
        assert_eq!(file_partition_prefix_len(32768, r(0, 32767)), 1);
    }

    #[test]
    fn operator_ranges_partition_all_groups() {
        for m in [128u32, 200, 256, 1000, 32768] {
            for p in [1u32, 2, 3, 7, 64, 128] {
                let mut next = 0u32;
                for i in 0..p {
                    let r = KeyGroupRange::for_operator(m, p, i).unwrap();
                    assert_eq!(u32::from(r.start), next, "m={m} p={p} i={i}");
                    next = u32::from(r.end) + 1;
                }
                assert_eq!(next, m);
            }
        }
    }

    #[test]
    fn default_max_parallelism_follows_flink() {
        assert_eq!(default_max_parallelism(1), 128);
        assert_eq!(default_max_parallelism(100), 256);
        assert_eq!(default_max_parallelism(1000), 2048);
        assert_eq!(default_max_parallelism(100_000), 32768);
    }

    #[test]
    fn prefix_round_trips_and_orders() {
        for m in [128u32, 256, 257, 32768] {
            let mut prev: Vec<u8> = Vec::new();
            for g in [0u16, 1, 127, 255.min((m - 1) as u16), (m - 1) as u16] {
                let mut buf = Vec::new();
                write_prefix(&mut buf, g, m);
                assert_eq!(buf.len(), prefix_len(m));
                assert_eq!(read_prefix(&buf, m).unwrap(), g);
                assert!(buf >= prev);
                prev = buf;
            }
        }
        assert!(read_prefix(&[], 128).is_err());
        assert!(read_prefix(&[1], 1024).is_err());
    }

    #[test]
    fn rejects_bad_configuration() {
        assert!(KeyGroupRange::new(5, 4).is_err());
        assert!(KeyGroupRange::for_operator(128, 0, 0).is_err());
        assert!(KeyGroupRange::for_operator(128, 2, 2).is_err());
        assert!(KeyGroupRange::for_operator(128, 129, 0).is_err());
        assert!(KeyGroupRange::for_operator(0, 1, 0).is_err());
        assert!(KeyGroupRange::for_operator(40000, 1, 0).is_err());
    }

    #[test]
    fn intersect() {
        let a = KeyGroupRange::new(0, 63).unwrap();
        let b = KeyGroupRange::new(32, 127).unwrap();
        assert_eq!(a.intersect(&b), Some(KeyGroupRange::new(32, 63).unwrap()));
        let c = KeyGroupRange::new(64, 127).unwrap();
        assert_eq!(a.intersect(&c), None);
    }
}

//! The data block size of each column family, chosen from the entries its first writes carry
//! (docs/decisions/0051-block-size-follows-entry-size.md).
//!
//! A point read that misses the block cache reads and checksums a whole data block from the
//! file, and a block in the cache holds its neighbours' entries too. With entries of about
//! 1 KiB a 16 KiB block (the default, right for 100-byte entries) holds 15 of them: a read of
//! one reads 16 times its bytes, and the cache keeps 15 entries nobody asked for beside it.
//! A state's value size is not known when its column family is made, so each column family
//! counts the bytes of its first [`SAMPLE_WRITES`] puts after the database opens; where they
//! average at least [`LARGE_ENTRY_BYTES`], the column family gets
//! `DbOptions::large_entry_block_size` through RocksDB's `SetOptions` (flushes and compactions
//! from then on write blocks of that size; files already written keep theirs until compacted).
//! Each open decides again: RocksDB opens every column family with the shared options. List
//! column families are kept out ([`BlockSizes::keep`]): their entries are runs of elements,
//! read by iterator seeks, and wrote slower in smaller blocks without reading faster.

use std::sync::atomic::{AtomicU64, Ordering};

/// Puts of a column family counted before its block size is decided.
pub(super) const SAMPLE_WRITES: u64 = 1024;

/// Mean bytes of key and value per put from which a column family's entries count as large.
/// At 512 B a 16 KiB block holds 32 entries or fewer.
pub(super) const LARGE_ENTRY_BYTES: u64 = 512;

/// A sample's put count once its column family keeps the shared block size: above
/// [`SAMPLE_WRITES`], and far enough below `u64::MAX` that counting puts never wraps it.
const KEPT: u64 = u64::MAX / 2;

/// Bytes counted of one put at most, so a sample's sum cannot overflow (1024 puts of at most
/// 2^32 bytes each).
const MAX_COUNTED_BYTES: u64 = u32::MAX as u64;

/// The sample of one column family: its puts counted so far and their bytes.
#[derive(Debug, Default)]
struct Sample {
    puts: AtomicU64,
    bytes: AtomicU64,
}

/// The block-size samples of every column family of one open database, by slot.
#[derive(Debug)]
pub(super) struct BlockSizes {
    /// The block size given to a column family of large entries; `None`: every column family
    /// keeps the shared `block_size`.
    large: Option<usize>,
    samples: Box<[Sample]>,
}

impl BlockSizes {
    /// Samples for `slots` column families. `large`: the block size for large entries (`None`
    /// decides nothing: no sample is counted).
    pub(super) fn new(slots: usize, large: Option<usize>) -> Self {
        BlockSizes {
            large,
            samples: (0..if large.is_some() { slots } else { 0 })
                .map(|_| Sample::default())
                .collect(),
        }
    }

    /// Counts a put of `bytes` (key and value) to the column family in `slot`. Returns the
    /// block size to give it when this put completes its sample and the entries are large;
    /// exactly one put of a sample completes it, even with puts counted on several threads.
    #[inline]
    pub(super) fn note(&self, slot: usize, bytes: usize) -> Option<usize> {
        let sample = self.samples.get(slot)?;
        if sample.puts.load(Ordering::Relaxed) >= SAMPLE_WRITES {
            return None;
        }
        let counted = (bytes as u64).min(MAX_COUNTED_BYTES);
        let total = sample.bytes.fetch_add(counted, Ordering::Relaxed) + counted;
        if sample.puts.fetch_add(1, Ordering::Relaxed) + 1 != SAMPLE_WRITES {
            return None;
        }
        // Another thread's put may have added its bytes without yet counting itself, or the
        // other way round: the mean is of about SAMPLE_WRITES puts either way.
        (total / SAMPLE_WRITES >= LARGE_ENTRY_BYTES)
            .then_some(self.large)
            .flatten()
    }

    /// Decides nothing for the column family in `slot` from now on: it keeps the shared block
    /// size (called before its first put).
    pub(super) fn keep(&self, slot: usize) {
        if let Some(sample) = self.samples.get(slot) {
            sample.puts.store(KEPT, Ordering::Relaxed);
        }
    }
}

/// RocksDB's `SetOptions` pair that gives a column family data blocks of `bytes`.
pub(super) fn block_size_option(bytes: usize) -> [(&'static str, String); 1] {
    [(
        "block_based_table_factory",
        format!("{{block_size={bytes}}}"),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(sizes: &BlockSizes, slot: usize, bytes: usize) -> Vec<Option<usize>> {
        (0..SAMPLE_WRITES + 10)
            .map(|_| sizes.note(slot, bytes))
            .collect()
    }

    #[test]
    fn large_entries_get_the_large_block_size_once_the_sample_is_complete() {
        let sizes = BlockSizes::new(4, Some(4096));
        let decided = fill(&sizes, 1, 1040);
        let at: Vec<usize> = (0..decided.len())
            .filter(|&i| decided[i].is_some())
            .collect();
        assert_eq!(at, vec![SAMPLE_WRITES as usize - 1]);
        assert_eq!(decided[at[0]], Some(4096));
    }

    #[test]
    fn small_entries_and_the_threshold() {
        let sizes = BlockSizes::new(4, Some(4096));
        assert!(fill(&sizes, 0, 120).iter().all(Option::is_none));
        assert!(fill(&sizes, 2, LARGE_ENTRY_BYTES as usize - 1)
            .iter()
            .all(Option::is_none));
        assert_eq!(
            fill(&sizes, 3, LARGE_ENTRY_BYTES as usize)
                .iter()
                .flatten()
                .count(),
            1
        );
    }

    #[test]
    fn the_mean_decides_not_the_last_put() {
        let sizes = BlockSizes::new(1, Some(8192));
        // 1023 puts of 100 bytes and a last one of 1 MiB: mean about 1.1 KiB.
        for _ in 0..SAMPLE_WRITES - 1 {
            assert_eq!(sizes.note(0, 100), None);
        }
        assert_eq!(sizes.note(0, 1 << 20), Some(8192));
        // A put counts at most 2^32 - 1 bytes: a sample of the largest puts does not overflow.
        let sizes = BlockSizes::new(1, Some(8192));
        assert_eq!(fill(&sizes, 0, usize::MAX).iter().flatten().count(), 1);
    }

    #[test]
    fn a_kept_column_family_decides_nothing() {
        let sizes = BlockSizes::new(2, Some(4096));
        sizes.keep(1);
        sizes.keep(7);
        assert!(fill(&sizes, 1, 4096).iter().all(Option::is_none));
        assert_eq!(fill(&sizes, 0, 4096).iter().flatten().count(), 1);
    }

    #[test]
    fn off_and_unknown_slots_decide_nothing() {
        let off = BlockSizes::new(4, None);
        assert!(fill(&off, 0, 4096).iter().all(Option::is_none));
        let sizes = BlockSizes::new(2, Some(4096));
        assert!(fill(&sizes, 5, 4096).iter().all(Option::is_none));
    }

    #[test]
    fn puts_on_several_threads_complete_the_sample_once() {
        let sizes = BlockSizes::new(1, Some(4096));
        let decided = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..SAMPLE_WRITES {
                        if sizes.note(0, 2000).is_some() {
                            decided.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(decided.load(Ordering::Relaxed), 1);
    }
}

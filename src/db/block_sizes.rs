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
//! RocksDB opens every column family with the shared options, so each open decides again:
//! from the entries the column family's files hold when they are [`SAMPLE_WRITES`] or more
//! ([`BlockSizes::decide_stored`], from RocksDB's aggregated table properties: a reopened or
//! restored state that is only read, or written fewer times, still writes its compactions in
//! the size its entries call for), and otherwise from its first puts. List column families are
//! kept out ([`BlockSizes::keep`]): their entries are runs of elements, read by iterator
//! seeks, and wrote slower in smaller blocks without reading faster.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::options::DbOptions;

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

/// The sample of one column family: its puts counted so far and their bytes, and whether it
/// was given the block size for large entries.
#[derive(Debug, Default)]
struct Sample {
    puts: AtomicU64,
    bytes: AtomicU64,
    given: AtomicBool,
}

/// What a column family's files hold, from RocksDB's `rocksdb.aggregated-table-properties`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StoredEntries {
    /// Entries (puts, deletions and merge operands) of every file.
    pub(super) entries: u64,
    /// Their key and value bytes, as written.
    pub(super) bytes: u64,
}

impl StoredEntries {
    /// Reads the property's text (`# entries=N; ... raw key size=N; ... raw value size=N;
    /// ...`, RocksDB's `TableProperties::ToString`); `None` when a figure is missing or not
    /// a number.
    pub(super) fn parse(text: &str) -> Option<StoredEntries> {
        let figure = |name: &str| {
            text.split(';')
                .filter_map(|pair| pair.split_once('='))
                .find(|(k, _)| k.trim() == name)
                .and_then(|(_, v)| v.trim().parse::<u64>().ok())
        };
        Some(StoredEntries {
            entries: figure("# entries")?,
            bytes: figure("raw key size")?.saturating_add(figure("raw value size")?),
        })
    }
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
        self.give(sample, SAMPLE_WRITES, total)
    }

    /// Whether the column family in `slot` is still to be decided (neither its puts nor its
    /// files decided it, and it is not kept).
    pub(super) fn deciding(&self, slot: usize) -> bool {
        self.samples
            .get(slot)
            .is_some_and(|s| s.puts.load(Ordering::Relaxed) < SAMPLE_WRITES)
    }

    /// Decides the block size of the column family in `slot` from what its files hold,
    /// unless it is decided already (by its puts, by an earlier call, or kept) or they hold
    /// fewer than [`SAMPLE_WRITES`] entries (its puts decide then). Returns the block size to
    /// give it, as [`BlockSizes::note`] does; from then on its puts are not counted.
    pub(super) fn decide_stored(&self, slot: usize, stored: StoredEntries) -> Option<usize> {
        let sample = self.samples.get(slot)?;
        if stored.entries < SAMPLE_WRITES {
            return None;
        }
        // Exactly one decision: a put completing the sample at the same time sees a count
        // past SAMPLE_WRITES, or this sees the count it completed.
        if sample.puts.fetch_max(SAMPLE_WRITES, Ordering::Relaxed) >= SAMPLE_WRITES {
            return None;
        }
        self.give(sample, stored.entries, stored.bytes)
    }

    /// The block size for a column family whose `entries` carry `bytes`, noted as given.
    fn give(&self, sample: &Sample, entries: u64, bytes: u64) -> Option<usize> {
        let size = entries_are_large(entries, bytes)
            .then_some(self.large)
            .flatten()?;
        sample.given.store(true, Ordering::Relaxed);
        Some(size)
    }

    /// Decides nothing for the column family in `slot` from now on: it keeps the shared block
    /// size. Returns whether it had been given the block size for large entries (from its
    /// files, when the database opened): the caller sets the shared size back.
    pub(super) fn keep(&self, slot: usize) -> bool {
        let Some(sample) = self.samples.get(slot) else {
            return false;
        };
        sample.puts.store(KEPT, Ordering::Relaxed);
        sample.given.swap(false, Ordering::Relaxed)
    }
}

/// Whether `entries` carrying `bytes` of key and value average [`LARGE_ENTRY_BYTES`] or more
/// (none: not large). The one rule of column families and of the files written outside
/// RocksDB's flushes (`super::sst_writer`).
pub(super) fn entries_are_large(entries: u64, bytes: u64) -> bool {
    entries > 0 && bytes / entries >= LARGE_ENTRY_BYTES
}

/// The block size `options` give large entries: `None` when they keep the shared
/// `block_size` (`large_entry_block_size` 0, or equal to `block_size`).
pub(super) fn large_entry_block_size(options: &DbOptions) -> Option<usize> {
    let size = options.large_entry_block_size;
    (size != 0 && size != options.block_size).then_some(size)
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

    /// The property's text as RocksDB 11.8 writes it (shortened after the sizes).
    const PROPERTIES: &str = "# data blocks=4114; # data blocks compression rejected=0; \
        # data blocks compression bypassed=0; # uniform blocks=0; # entries=588160; \
        # deletions=0; # merge operands=0; # range deletions=0; raw key size=9410560; \
        raw average key size=16.000000; raw value size=58816000; raw average value \
        size=100.000000; data block size=67114475; ";

    #[test]
    fn stored_entries_are_read_from_the_aggregated_table_properties() {
        assert_eq!(
            StoredEntries::parse(PROPERTIES),
            Some(StoredEntries {
                entries: 588_160,
                bytes: 9_410_560 + 58_816_000
            })
        );
        assert_eq!(StoredEntries::parse(""), None);
        assert_eq!(StoredEntries::parse("# entries=12; raw key size=3"), None);
        assert_eq!(
            StoredEntries::parse("# entries=x; raw key size=3; raw value size=4"),
            None
        );
    }

    fn stored(entries: u64, mean: u64) -> StoredEntries {
        StoredEntries {
            entries,
            bytes: entries * mean,
        }
    }

    #[test]
    fn stored_entries_decide_once_and_before_the_puts() {
        let sizes = BlockSizes::new(4, Some(4096));
        // Large stored entries: decided, and the puts decide nothing more.
        assert_eq!(
            sizes.decide_stored(0, stored(SAMPLE_WRITES, 1000)),
            Some(4096)
        );
        assert_eq!(sizes.decide_stored(0, stored(SAMPLE_WRITES, 1000)), None);
        assert!(fill(&sizes, 0, 4096).iter().all(Option::is_none));
        // Small stored entries: decided too (the shared size), large puts change nothing.
        assert_eq!(sizes.decide_stored(1, stored(1 << 20, 100)), None);
        assert!(fill(&sizes, 1, 4096).iter().all(Option::is_none));
        // Too few stored entries: the puts decide.
        assert_eq!(
            sizes.decide_stored(2, stored(SAMPLE_WRITES - 1, 4096)),
            None
        );
        assert_eq!(fill(&sizes, 2, 4096).iter().flatten().count(), 1);
        // Decided by its puts already: the files change nothing.
        assert_eq!(fill(&sizes, 3, 100).iter().flatten().count(), 0);
        assert_eq!(sizes.decide_stored(3, stored(1 << 20, 4096)), None);
        // Off: nothing.
        let off = BlockSizes::new(1, None);
        assert_eq!(off.decide_stored(0, stored(1 << 20, 4096)), None);
    }

    #[test]
    fn keeping_a_column_family_given_the_large_size_asks_for_the_shared_one_back() {
        let sizes = BlockSizes::new(3, Some(4096));
        assert_eq!(sizes.decide_stored(0, stored(1 << 20, 1000)), Some(4096));
        assert!(sizes.keep(0));
        assert!(!sizes.keep(0));
        // Given by its puts: the same.
        assert_eq!(fill(&sizes, 1, 1000).iter().flatten().count(), 1);
        assert!(sizes.keep(1));
        // Never given: nothing to set back.
        assert_eq!(sizes.decide_stored(2, stored(1 << 20, 100)), None);
        assert!(!sizes.keep(2));
        assert!(!sizes.keep(9));
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

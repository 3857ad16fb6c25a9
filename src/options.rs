//! Plain, serde-able settings for a backend's RocksDB instance and the process-wide memory
//! budget. Injected components (the shared cache, the clock) live elsewhere; this module is data.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Block compression for SST files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Compression {
    /// No compression.
    None,
    /// LZ4: cheap to write and read; the default.
    Lz4,
    /// Zstandard: smaller files, more CPU.
    Zstd,
}

/// Which values read from RocksDB a backend's value cache keeps (what writes do to it is
/// [`ValueCacheWrites`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ValueCacheAdmission {
    /// Every value a point read finds in RocksDB (the default).
    EveryRead,
    /// A value only on its key's second read within a window of about as many reads as the
    /// cache holds entries (TinyLFU's doorkeeper): a key read once, as most are when reads
    /// are spread over state larger than memory, costs no copy into the cache and evicts
    /// nothing; a key read again is kept.
    SecondRead,
}

/// What a write drained to RocksDB does to a backend's value cache
/// (docs/decisions/0036-value-cache-refreshed-by-writes.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ValueCacheWrites {
    /// A write replaces the entry of a key the cache holds and adds no other key: a key
    /// enters the cache when it is read (the default). A read-modify-write keeps its key
    /// cached; a write whose key was never read costs one index probe and no copy.
    Refresh,
    /// Every write becomes its key's entry, so a key's first read after its write is served
    /// from the cache too, for a copy into the cache on every write.
    Fill,
    /// As [`ValueCacheWrites::Refresh`], and a write of a key written before within a
    /// doorkeeper's memory (one bit per hash bucket, forgotten when an eighth of the bits
    /// are set: about as many keys as the cache holds entries) becomes its key's entry too.
    /// Keys written often (the hot keys of skewed updates) are cached before their first
    /// read; a write of a new key costs one bit test. Over `bench matrix` gets ×1.09 at the
    /// median, updates ×0.90 and inserts ×0.92
    /// (docs/decisions/0052-second-write-admission-not-default.md).
    SecondWrite,
}

/// RocksDB settings applied to every column family of a backend. Defaults are tuned for
/// point-access keyed state on a small machine; each field says its default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DbOptions {
    /// Data block size in bytes. Default 16 KiB (4 KiB blocks make the index larger than it is worth
    /// for state that is mostly point-read).
    pub block_size: usize,
    /// Data block size of a column family whose entries carry 512 bytes or more of key and
    /// value on average: those its files hold when the backend opens (1,024 or more), or else
    /// its first 1,024 puts; the files a savepoint restore or a rescale's rewrite writes are
    /// sized the same way, each from its own first entries. List states keep `block_size`,
    /// and 0 keeps it for every column family and file. Default 4 KiB (Flink's block size):
    /// a point read that misses the block cache reads one whole block, so large values read
    /// faster from smaller blocks (gets of 1 KiB values beyond the budget +11–27 % in
    /// `bench matrix`), while 100-byte entries keep 16 KiB; iterating a map of large values
    /// runs 25–36 % slower (docs/decisions/0051-block-size-follows-entry-size.md).
    pub large_entry_block_size: usize,
    /// Bloom filter bits per key; 0 disables filters. Default 10 (≈1% false positives), which makes
    /// reads of missing keys nearly free.
    pub bloom_bits_per_key: f64,
    /// Memtable size per column family in bytes. Default 16 MiB: smaller skip lists make
    /// random writes and reads after writes cheaper, and a checkpoint's sync phase flushes at
    /// most this much (docs/decisions/0010-16-mib-memtables.md: 64 → 32 → 16 MiB, each step
    /// measured with `bench ops` / `bench checkpoint`, 1M × 100 B).
    pub write_buffer_size: usize,
    /// Memtables per column family before writes stall. Default 4.
    pub max_write_buffer_number: i32,
    /// Compression of all levels. Default LZ4.
    pub compression: Compression,
    /// SST `format_version`. Default 6, so checkpoints open in RocksDB tools from 8.x on; 7 is
    /// selectable. Accepted: 2..=7.
    pub sst_format_version: u32,
    /// Write-ahead log. Default off: durability comes from checkpoints, as in Flink.
    pub wal: bool,
    /// Background flush + compaction threads. Default 2. At most 256.
    pub max_background_jobs: i32,
    /// Target SST size at level 1 in bytes. Default 64 MiB.
    pub target_file_size_base: u64,
    /// Target size of the base level (the level L0 compacts into) in bytes. Default 256 MiB,
    /// RocksDB's own.
    pub max_bytes_for_level_base: u64,
    /// Number of L0 files that triggers their compaction into the base level. Default 4,
    /// RocksDB's own.
    pub level0_file_num_compaction_trigger: i32,
    /// Index and filter blocks live in the block cache, charged to the memory budget (default
    /// on, as Flink's managed memory does). Off, each open SST holds them outside the budget:
    /// reads skip two cache lookups, but memory is no longer bounded by the budget.
    pub cache_index_and_filter_blocks: bool,
    /// Leave the bloom filter out of the last level's SSTs (default off). Saves the filter
    /// probe (and about 10 bits per key of memory) on reads of keys that exist; reads of missing
    /// keys then search the last level's index and data block.
    pub optimize_filters_for_hits: bool,
    /// Largest stored value (value, list element, map entry, accumulator) in bytes. Default 64 MiB.
    pub max_value_bytes: usize,
    /// Size of a whole-key bloom filter in each memtable, as a fraction of `write_buffer_size`;
    /// 0 disables it. Default 0.02 (about 0.34 MB per 16 MiB memtable, ≈20 bits per 100-byte
    /// entry): a point read of a key that is not in the memtable skips the skip-list search,
    /// which is the costliest part of reads right after writes (read-modify-write).
    pub memtable_bloom_ratio: f64,
    /// Memtable inserts remember, per key-group prefix (the first two key bytes), where the last
    /// insert went and start the next search there. Default on: keys that arrive in ascending
    /// order within a key group (sequence numbers, timestamps, the bulk load of a restore) then
    /// skip most of the skip-list search; random keys pay one small hash lookup.
    pub memtable_insert_hint: bool,
    /// Every SST's index and filter block stays pinned in the block cache while the file is
    /// open (still charged to the memory budget). Default on: a point read then takes no cache
    /// lookup for them, which is most of the cost of reading a missing key. The price: pinned
    /// blocks are never evicted, so once the index and filter blocks of all open SSTs outgrow
    /// the cache (about 1.5 % of the stored bytes with 100-byte values and 10 bloom bits per
    /// key, more with smaller entries), memory grows past the budget with the state.
    /// `RocksDbMetrics::block_cache_pinned_bytes` shows how close that is; turn this off for
    /// state much larger than the budget (Flink's bound: only L0's blocks pinned, the rest
    /// evictable). Only takes effect with `cache_index_and_filter_blocks` (otherwise every
    /// open SST holds its blocks outside the cache anyway).
    pub pin_index_and_filter_blocks: bool,
    /// Compaction cuts a state's files at key-group boundaries (RocksDB's fixed-prefix SST
    /// partitioner on the key-group prefix), so every compacted file holds one key group.
    /// Default off (it was on until `key_bounds` came). What it gives: a rescale that
    /// gives key groups away drops their compacted files whole (`DeleteFilesInRange`) instead
    /// of leaving them to range tombstones and a compaction, so a restored instance holds
    /// only its own groups' bytes at once; and a point read of a key outside its group's
    /// stored range skips the file without a filter probe (`key_bounds` now answers the
    /// common case, keys above every stored one, without RocksDB at all). What it costs: more,
    /// smaller files (one per owned key group per level per state, at most 256: above 256
    /// owned groups files are cut every 256 groups, see `keygroup::file_partition_prefix_len`;
    /// a small state of many groups has many tiny files, and checkpoints upload more files),
    /// and every point read of a stored key searches a level of 128 files instead of a few:
    /// in `bench ops` (1M keys, interleaved), raw RocksDB storing rockstate's key layout read
    /// stored keys at 0.89–0.97 of raw keys with the cuts and 1.01–1.02 without; over 11
    /// alternating solo pairs, insert and read-modify-write medians were 0.85 and 0.94 of
    /// those without it (docs/decisions/0014-key-group-file-cuts.md). Turn it on for jobs
    /// that rescale often from large compacted state.
    pub key_group_files: bool,
    /// Bytes of writes (puts and deletes, with their keys) a backend holds in memory before
    /// writing them to RocksDB as one batch in key order; 0 writes every put straight
    /// through. Default 2 MiB (Flink's own write-batch size for its bulk writes); never more
    /// than an eighth of `write_buffer_size`, so one batch cannot overfill a memtable. Reads see
    /// cached writes at once; the cache is written out before every scan, checkpoint,
    /// flush and close, so nothing but the cost changes (`write_cache` module docs). With the
    /// `wal` on, writes always go straight through (a cached write would not be logged).
    /// Taken out of the memory budget's block cache while the backend is open; the write
    /// caches of all backends on one budget share an eighth of it evenly, each taking at most
    /// this (`RocksDbMetrics::write_cache_limit_bytes` shows what it has now). `bench ops
    /// --solo-only` (1M × 100 B, two alternating pairs with and without): insert 873k / 769k
    /// vs 542k / 521k ops/s, update 660k / 722k vs 344k / 288k, read-modify-write 125k / 97k
    /// vs 88k / 73k; reads unchanged (docs/decisions/0015-write-cache.md).
    pub write_cache_bytes: usize,
    /// Keeps, per state and key group, a key at least as large as every stored key of the
    /// group, so a point read of a key above it answers "absent" without asking RocksDB, and
    /// a list or map read (or the scan a list `update` makes) of a key above it is empty
    /// without an iterator. Default on. Every key starts with its key group, so in ascending
    /// key spaces (sequence numbers, event times, new ids) a lookup of a new key lies above
    /// every stored key of its group, yet RocksDB would still probe the filter of every
    /// flushed file (each spans all groups) and search each level's files; without the
    /// prefix, the files' key ranges would rule it out. Lookups of keys below the bound
    /// (existing keys, random missing ones) pay one hash lookup and key comparison more;
    /// writes pay one bound update per key group and write-cache drain (with the cache off,
    /// one per put, under the lock point reads share). A bound is learned from RocksDB (one
    /// reverse seek in the group) on the first read of its group after the backend opens or
    /// after SST ingestion (restore, rescale); memory is one key per state and key group read
    /// or written (`key_bounds` module docs).
    pub key_bounds: bool,
    /// Bytes of memory in which a backend keeps the values it most recently read from
    /// RocksDB (and wrote to it, as [`DbOptions::value_cache_writes`] says), to answer point
    /// reads without RocksDB (`value_cache` module docs): a ring of entries, oldest
    /// overwritten first, and a hash index. A hit costs one index probe instead of RocksDB's
    /// read path (memtables, a filter probe per flushed file, an index and a data-block
    /// search); every write drained to RocksDB pays one probe, and a copy into the ring where
    /// it changes an entry. The budget's value caches share a quarter of it evenly among the
    /// open backends that have one (each gets the most this allows; `MemoryBudget`), so this
    /// is a cap: default 128 MiB, the whole quarter of the default 512 MiB budget for a
    /// backend alone in its process; 0 turns the cache off. `bench ops` solo, 1M keys x 100 B,
    /// uniform keys, the cache filled by every write, three alternating pairs on the idle
    /// machine: get 764k-790k against 411k-430k ops/s off, read-modify-write 330k-334k
    /// against 256k-265k, insert 1.52M-1.56M against 1.74M-1.75M, update 1.17M-1.21M against
    /// 1.35M-1.39M
    /// (docs/decisions/0018-value-cache-filled-by-writes.md). Taken out of the memory
    /// budget's block cache while the backend is open. A quarter of a cache's bytes at most
    /// goes to the index (8 bytes a slot, at most half of the slots used), the rest to the
    /// ring; each entry takes a 12-byte header plus its key and value, rounded up to 8 bytes.
    /// Entries above an eighth of the ring are not kept; below 2 KiB the cache is off.
    pub value_cache_bytes: usize,
    /// Which values read from RocksDB the value cache keeps. Default
    /// [`ValueCacheAdmission::EveryRead`]: `bench matrix` (state 0.5× and 4× a 128 MiB budget,
    /// uniform and Zipf keys, 100 B values, three alternating rounds) found no phase where
    /// either policy's ratio to raw RocksDB moved beyond the spread of the other's
    /// (docs/decisions/0028-value-cache-admission.md).
    pub value_cache_admission: ValueCacheAdmission,
    /// What a write does to the value cache. Default [`ValueCacheWrites::Refresh`]: over
    /// `bench matrix` (16 cells, 64 MiB budget, three alternating rounds) it raised insert
    /// 11–55 % and update 7–34 % against raw RocksDB in every cell, while gets right after the
    /// writes, before any read, lost up to 19 % in the Zipf cells that fit the budget
    /// (docs/decisions/0036-value-cache-refreshed-by-writes.md).
    pub value_cache_writes: ValueCacheWrites,
    /// Whether the SST files a savepoint restore, a rescale's rewrite or a changelog
    /// restore's replay writes are read back into the page cache on a thread of their own
    /// after they are ingested, where they fit in memory (at most half of the memory the
    /// kernel reports available, bounded by the process's cgroup memory limit, less what the
    /// process's other open backends warmed). RocksDB's SST writer drops what it writes
    /// from the page cache, so without it every block-cache miss right after such a restore
    /// reads the device: the first 300,000 gets of 1M × 1 KiB restored on 128 MiB ran 4×
    /// faster with it. Default on
    /// (docs/decisions/0053-restored-files-read-into-the-page-cache.md).
    pub warm_restored_files: bool,
}

impl Default for DbOptions {
    fn default() -> Self {
        DbOptions {
            block_size: 16 * 1024,
            large_entry_block_size: 4 * 1024,
            bloom_bits_per_key: 10.0,
            write_buffer_size: 16 << 20,
            max_write_buffer_number: 4,
            compression: Compression::Lz4,
            sst_format_version: 6,
            wal: false,
            max_background_jobs: 2,
            target_file_size_base: 64 << 20,
            max_bytes_for_level_base: 256 << 20,
            level0_file_num_compaction_trigger: 4,
            cache_index_and_filter_blocks: true,
            optimize_filters_for_hits: false,
            max_value_bytes: 64 << 20,
            memtable_bloom_ratio: 0.02,
            memtable_insert_hint: true,
            pin_index_and_filter_blocks: true,
            key_group_files: false,
            write_cache_bytes: 2 << 20,
            key_bounds: true,
            value_cache_bytes: 128 << 20,
            value_cache_admission: ValueCacheAdmission::EveryRead,
            value_cache_writes: ValueCacheWrites::Refresh,
            warm_restored_files: true,
        }
    }
}

impl DbOptions {
    /// Checks every field's range.
    pub fn validate(&self) -> Result<()> {
        let bad = |name, detail: String| Err(Error::InvalidOption { name, detail });
        if !(2..=7).contains(&self.sst_format_version) {
            return bad(
                "sst_format_version",
                format!("{} is not in 2..=7", self.sst_format_version),
            );
        }
        if !(self.bloom_bits_per_key >= 0.0 && self.bloom_bits_per_key <= 64.0) {
            return bad("bloom_bits_per_key", format!("{}", self.bloom_bits_per_key));
        }
        if self.block_size < 256 || self.block_size > (64 << 20) {
            return bad("block_size", format!("{}", self.block_size));
        }
        if self.large_entry_block_size != 0
            && (self.large_entry_block_size < 256 || self.large_entry_block_size > (64 << 20))
        {
            return bad(
                "large_entry_block_size",
                format!("{}", self.large_entry_block_size),
            );
        }
        if self.write_buffer_size < (64 << 10) {
            return bad("write_buffer_size", format!("{}", self.write_buffer_size));
        }
        if self.target_file_size_base < (64 << 10) || self.max_bytes_for_level_base < (1 << 20) {
            return bad(
                "target_file_size_base/max_bytes_for_level_base",
                "must be ≥ 64 KiB / ≥ 1 MiB".into(),
            );
        }
        if !(1..=64).contains(&self.level0_file_num_compaction_trigger) {
            return bad(
                "level0_file_num_compaction_trigger",
                format!(
                    "{} is not in 1..=64",
                    self.level0_file_num_compaction_trigger
                ),
            );
        }
        if self.max_write_buffer_number < 2 || self.max_background_jobs < 1 {
            return bad(
                "max_write_buffer_number/max_background_jobs",
                "must be ≥ 2 / ≥ 1".into(),
            );
        }
        // RocksDB grows its process-wide thread pools to about this many threads; past
        // what a process can start, its C++ exception aborts the process.
        if self.max_background_jobs > MAX_BACKGROUND_JOBS {
            return bad(
                "max_background_jobs",
                format!(
                    "{} is above {MAX_BACKGROUND_JOBS}",
                    self.max_background_jobs
                ),
            );
        }
        if !(0.0..=0.25).contains(&self.memtable_bloom_ratio) {
            return bad(
                "memtable_bloom_ratio",
                format!("{} is not in 0..=0.25", self.memtable_bloom_ratio),
            );
        }
        if self.value_cache_bytes as u64 > (16u64 << 30) {
            return bad(
                "value_cache_bytes",
                format!("{} is above 16 GiB", self.value_cache_bytes),
            );
        }
        if self.write_cache_bytes > (1 << 30) {
            return bad(
                "write_cache_bytes",
                format!("{} is above 1 GiB", self.write_cache_bytes),
            );
        }
        // RocksDB's own hard limit on a value is 2^32 - 1 bytes; ours must stay below it.
        if self.max_value_bytes == 0 || self.max_value_bytes >= (u32::MAX as usize) {
            return bad("max_value_bytes", format!("{}", self.max_value_bytes));
        }
        Ok(())
    }
}

/// The block cache implementation behind a [`MemoryBudgetConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CacheKind {
    /// RocksDB's sharded LRU cache: every lookup takes a shard mutex.
    Lru,
    /// RocksDB's hyper clock cache (auto-sized table): lock-free lookups; the default.
    HyperClock,
}

/// Size of the process-wide memory budget shared by every backend that uses it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryBudgetConfig {
    /// Total bytes for the block cache and memtables together. Default 512 MiB. 8 MiB to
    /// 4 TiB.
    pub total_bytes: usize,
    /// Share of the total that memtables may use before RocksDB flushes. Default 0.5. In
    /// (0, 1), and at least 64 KiB of the total.
    pub write_buffer_ratio: f64,
    /// Block cache implementation. Default [`CacheKind::HyperClock`].
    pub cache: CacheKind,
}

impl Default for MemoryBudgetConfig {
    fn default() -> Self {
        MemoryBudgetConfig {
            total_bytes: 512 << 20,
            write_buffer_ratio: 0.5,
            cache: CacheKind::HyperClock,
        }
    }
}

/// The largest `MemoryBudgetConfig::total_bytes`: 4 TiB.
const MAX_BUDGET_BYTES: usize = 1 << 42;

/// The largest `DbOptions::max_background_jobs`.
const MAX_BACKGROUND_JOBS: i32 = 256;

impl MemoryBudgetConfig {
    /// Checks every field's range.
    pub fn validate(&self) -> Result<()> {
        if self.total_bytes < (8 << 20) {
            return Err(Error::InvalidOption {
                name: "total_bytes",
                detail: format!("{} is below 8 MiB", self.total_bytes),
            });
        }
        // RocksDB reserves address space for a clock cache in proportion to its capacity: a
        // capacity near the address space aborts the process.
        if self.total_bytes > MAX_BUDGET_BYTES {
            return Err(Error::InvalidOption {
                name: "total_bytes",
                detail: format!("{} is above 4 TiB", self.total_bytes),
            });
        }
        if !(self.write_buffer_ratio > 0.0 && self.write_buffer_ratio < 1.0) {
            return Err(Error::InvalidOption {
                name: "write_buffer_ratio",
                detail: format!("{} is not in (0, 1)", self.write_buffer_ratio),
            });
        }
        // A memtable share that rounds to nothing (0 bytes is "no limit" to RocksDB's write
        // buffer manager) would leave memtables unbounded: at least 64 KiB.
        if ((self.total_bytes as f64) * self.write_buffer_ratio) < f64::from(64u32 << 10) {
            return Err(Error::InvalidOption {
                name: "write_buffer_ratio",
                detail: format!(
                    "{} of {} bytes leaves memtables less than 64 KiB",
                    self.write_buffer_ratio, self.total_bytes
                ),
            });
        }
        Ok(())
    }
}

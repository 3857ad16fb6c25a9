//! RocksDB options as rockstate builds them from [`DbOptions`]: the table and column-family
//! options every column family shares, the key-group file cuts and TTL filter of state column
//! families, the database-wide options, and the column-family descriptors of an existing
//! database.

use super::l0_triggers::Base;
use std::path::Path;
use std::sync::Arc;

use rocksdb::{
    BlockBasedOptions, BlockBasedTablePinningTier, DBCompressionType, DBWithThreadMode,
    DataBlockIndexType, Env, MultiThreaded, Options,
};

use super::budget::{BloomGrant, MemoryBudget};
use super::compaction_filter::{FilterFactory, FilterRegistry};
use super::rocks_error;
use crate::error::Result;
use crate::options::{Compression, DbOptions};

fn compression(c: Compression) -> DBCompressionType {
    match c {
        Compression::None => DBCompressionType::None,
        Compression::Lz4 => DBCompressionType::Lz4,
        Compression::Zstd => DBCompressionType::Zstd,
    }
}

/// The options every column family gets (identical table options everywhere).
pub(super) fn cf_options(o: &DbOptions, budget: &MemoryBudget) -> Result<Options> {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(&budget.cache);
    table.set_block_size(o.block_size);
    if o.bloom_bits_per_key > 0.0 {
        table.set_bloom_filter(o.bloom_bits_per_key, false);
        table.set_whole_key_filtering(true);
    }
    // Index and filter blocks are charged to the budget like data blocks, at high priority.
    // L0's stay pinned while their file is open, and with `pin_index_and_filter_blocks` every
    // level's do, so point reads take no cache lookup for them.
    table.set_cache_index_and_filter_blocks(o.cache_index_and_filter_blocks);
    table.set_cache_index_and_filter_blocks_with_high_priority(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    if o.pin_index_and_filter_blocks {
        table.set_unpartitioned_pinning_tier(BlockBasedTablePinningTier::All);
    }
    table.set_format_version(o.sst_format_version as i32);
    table.set_data_block_index_type(DataBlockIndexType::BinaryAndHash);
    table.set_data_block_hash_ratio(0.75);

    let mut opts = Options::default();
    opts.set_block_based_table_factory(&table);
    opts.set_write_buffer_size(o.write_buffer_size);
    opts.set_max_write_buffer_number(o.max_write_buffer_number);
    opts.set_compression_type(compression(o.compression));
    opts.set_bottommost_compression_type(compression(o.compression));
    opts.set_target_file_size_base(o.target_file_size_base);
    opts.set_max_bytes_for_level_base(o.max_bytes_for_level_base);
    opts.set_optimize_filters_for_hits(o.optimize_filters_for_hits);
    opts.set_level_zero_file_num_compaction_trigger(o.level0_file_num_compaction_trigger);
    // RocksDB's defaults (raised to the compaction trigger, as RocksDB itself would), set so
    // that what an ingestion raises (`super::l0_triggers`) is set back to exactly these.
    set_level0_triggers(&mut opts, Base::new(o.level0_file_num_compaction_trigger));
    opts.set_level_compaction_dynamic_level_bytes(true);
    if o.memtable_insert_hint {
        // Not in the C API as a setter; RocksDB's option-string parser sets it on a copy of
        // `opts` (the copy shares the table factory and cache through C++ shared pointers).
        // Two bytes: the key group (one byte up to max parallelism 128) plus the first byte
        // of the key's length, or the whole two-byte key group above 128.
        opts = opts
            .get_options_from_string(
                "memtable_insert_with_hint_prefix_extractor=rocksdb.CappedPrefix.2",
            )
            .map_err(rocks_error)?;
    }
    Ok(opts)
}

/// Makes compaction cut its output files wherever the first `prefix_len` key bytes change
/// (0: no cuts beyond size). With `prefix_len` the key-group prefix, every compacted file
/// holds one key group, so a file's key range is one group's range and a point read of a
/// key past a group's last key (or before its first) skips the file without a filter probe,
/// as it would with keys that are not prefixed. Only with `DbOptions::key_group_files`.
pub(super) fn partition_files(
    o: &DbOptions,
    mut opts: Options,
    prefix_len: usize,
) -> Result<Options> {
    if !o.key_group_files || prefix_len == 0 {
        return Ok(opts);
    }
    // Not in the C API as a setter; as for the insert hint, RocksDB's option-string parser
    // sets it on a copy of `opts` (which shares the cache, the write-buffer manager and the
    // table factory with it through C++ shared pointers).
    opts.get_options_from_string(format!(
        "sst_partitioner_factory={{id=SstPartitionerFixedPrefixFactory;length={prefix_len}}}"
    ))
    .map_err(rocks_error)
}

/// Bytes of one memtable's whole-key bloom filter under `o` (0: none), what a column family
/// asks the budget for (`MemoryBudget::grant_bloom`).
pub(super) fn memtable_bloom_bytes(o: &DbOptions) -> usize {
    if o.memtable_bloom_ratio > 0.0 {
        (o.memtable_bloom_ratio * o.write_buffer_size as f64) as usize
    } else {
        0
    }
}

/// A state column family's options: the shared ones, the file partitioning, the TTL filter,
/// and with `bloom` (granted by the budget) the memtable bloom filter.
pub(super) fn state_cf_options(
    o: &DbOptions,
    budget: &MemoryBudget,
    name: &str,
    registry: &FilterRegistry,
    partition_prefix: usize,
    bloom: bool,
) -> Result<Options> {
    let mut opts = cf_options(o, budget)?;
    if bloom && o.memtable_bloom_ratio > 0.0 {
        opts.set_memtable_prefix_bloom_ratio(o.memtable_bloom_ratio);
        opts.set_memtable_whole_key_filtering(true);
    }
    if name != rocksdb::DEFAULT_COLUMN_FAMILY_NAME {
        opts = partition_files(o, opts, partition_prefix)?;
        opts.set_compaction_filter_factory(FilterFactory {
            cf: name.to_string(),
            registry: Arc::clone(registry),
        });
    }
    Ok(opts)
}

/// Database-wide options: the column-family options plus the shared budget and threads.
pub(super) fn db_options(o: &DbOptions, budget: &MemoryBudget) -> Result<Options> {
    let mut opts = cf_options(o, budget)?;
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    opts.set_write_buffer_manager(&budget.write_buffers);
    opts.set_max_background_jobs(o.max_background_jobs);
    opts.set_keep_log_file_num(2);
    opts.set_max_file_opening_threads(file_opening_threads());
    Ok(opts)
}

/// Threads RocksDB opens a column family's table files with when the database opens: one per
/// core, at most RocksDB's default of 16. RocksDB starts that many threads less one for every
/// column family at every open, whatever its file count, and the files of a freshly restored
/// checkpoint are in the page cache, so on two cores its default of 16 spends the open on
/// starting threads: RocksDB's open of a restored 1M × 100 B checkpoint (3 column families,
/// 14 table files) took 6–10 ms with 16 and 4.5–6 ms with 2, and whole restores 7–17 % less
/// (docs/decisions/0046-table-opening-threads.md).
fn file_opening_threads() -> i32 {
    std::thread::available_parallelism().map_or(1, |n| i32::try_from(n.get().min(16)).unwrap_or(16))
}

/// Runs RocksDB's compactions at the lowest CPU priority (nice 19) from now on, in the whole
/// process: every rockstate database runs its compactions in RocksDB's one default
/// compaction pool, so this cannot be limited to one database, and RocksDB offers no way to
/// raise the pool back. Each pool thread applies it before its next job; flushes keep normal
/// priority. Engines call it once at start-up when the task threads should get the cores
/// first: on 2 cores it raised `bench ops` insert throughput by 13-16 %
/// (docs/decisions/0013-low-priority-compaction.md). Under sustained overload compaction
/// then falls behind and RocksDB slows writers at 20 L0 files. Calling it again does nothing
/// more.
pub fn lower_compaction_priority() -> Result<()> {
    // Dropping `env` releases only the handle, never the default environment itself.
    let mut env = Env::new().map_err(rocks_error)?;
    env.lower_thread_pool_cpu_priority();
    Ok(())
}

/// Sets the level-0 stall triggers of `opts`.
pub(super) fn set_level0_triggers(opts: &mut Options, l0: Base) {
    opts.set_level_zero_slowdown_writes_trigger(i32::try_from(l0.slowdown).unwrap_or(i32::MAX));
    opts.set_level_zero_stop_writes_trigger(i32::try_from(l0.stop).unwrap_or(i32::MAX));
}

/// The names of every column family of the database at `path`, the default one first when
/// the database is new.
pub(super) fn cf_names(path: &Path, opts: &Options) -> Result<Vec<String>> {
    let mut existing = if path.join("CURRENT").exists() {
        DBWithThreadMode::<MultiThreaded>::list_cf(opts, path).map_err(rocks_error)?
    } else {
        Vec::new()
    };
    // rust-rocksdb only hands out handles for the column families it was opened with.
    if !existing
        .iter()
        .any(|n| n == rocksdb::DEFAULT_COLUMN_FAMILY_NAME)
    {
        existing.insert(0, rocksdb::DEFAULT_COLUMN_FAMILY_NAME.to_string());
    }
    Ok(existing)
}

/// The column families of [`descriptors`]: names, descriptors, and the memtable blooms the
/// budget granted them.
pub(super) type Descriptors = (
    Vec<String>,
    Vec<rocksdb::ColumnFamilyDescriptor>,
    Vec<BloomGrant>,
);

/// [`cf_names`] and their descriptors with rockstate's options, their level-0 stall triggers
/// `level0`. With `blooms`, each state column family asks the budget for a memtable bloom
/// (the metadata's `default` has none: it is read at open and by checkpoints only). With
/// `compactions_off`, automatic compactions are off (a restore's database, `super::quiet`).
#[allow(clippy::too_many_arguments)]
pub(super) fn descriptors(
    path: &Path,
    opts: &Options,
    options: &DbOptions,
    budget: &MemoryBudget,
    filters: &FilterRegistry,
    partition_prefix: usize,
    level0: Base,
    blooms: bool,
    compactions_off: bool,
) -> Result<Descriptors> {
    let existing = cf_names(path, opts)?;
    let mut grants = Vec::new();
    let descriptors = existing
        .iter()
        .map(|name| {
            let grant = (blooms && name != rocksdb::DEFAULT_COLUMN_FAMILY_NAME)
                .then(|| budget.grant_bloom(memtable_bloom_bytes(options)))
                .flatten();
            let bloom = grant.is_some();
            grants.extend(grant);
            let mut cf = state_cf_options(options, budget, name, filters, partition_prefix, bloom)?;
            set_level0_triggers(&mut cf, level0);
            if compactions_off {
                cf.set_disable_auto_compactions(true);
            }
            Ok(rocksdb::ColumnFamilyDescriptor::new(name, cf))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((existing, descriptors, grants))
}

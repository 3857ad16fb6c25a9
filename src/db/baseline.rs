//! Raw RocksDB, the baseline benchmarks measure rockstate against in the same run: a plain
//! rust-rocksdb database in rockstate's configuration or in a reference one, behind a few
//! byte-slice calls, so no `rocksdb::` type leaves the database layer.

use std::path::Path;

use rocksdb::{
    BlockBasedOptions, Cache, DBCompressionType, Options, ReadOptions, WriteOptions, DB,
};

use super::budget::MemoryBudget;
use super::options;
use super::rocks_error;
use crate::error::Result;
use crate::options::DbOptions;

/// A raw rust-rocksdb database (its default column family only, no front, no key groups).
pub struct RawRocksDb {
    db: DB,
    write: WriteOptions,
    read: ReadOptions,
}

impl RawRocksDb {
    /// Opens (or creates) a database at `path` with exactly the RocksDB options rockstate
    /// builds from `options` for a state column family on `budget`, files cut every
    /// `partition_prefix` key bytes as [`crate::keygroup::file_partition_prefix_len`] gives
    /// them for the compared backend (0: no cuts), and the WAL as `options.wal` says.
    pub fn open_like_rockstate(
        path: &Path,
        options: &DbOptions,
        budget: &MemoryBudget,
        partition_prefix: usize,
    ) -> Result<Self> {
        options.validate()?;
        let opts = options::partition_files(
            options,
            options::db_options(options, budget)?,
            partition_prefix,
        )?;
        Self::open(path, &opts, !options.wal)
    }

    /// Opens (or creates) a database at `path` with RocksDB's default options plus a 10-bit
    /// bloom filter, a 256 MiB LRU block cache and LZ4, the WAL off: a configuration
    /// independent of rockstate's tuning.
    pub fn open_reference(path: &Path) -> Result<Self> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        let mut table = BlockBasedOptions::default();
        table.set_bloom_filter(10.0, false);
        table.set_block_cache(&Cache::new_lru_cache(256 << 20));
        opts.set_block_based_table_factory(&table);
        opts.set_compression_type(DBCompressionType::Lz4);
        Self::open(path, &opts, true)
    }

    fn open(path: &Path, opts: &Options, disable_wal: bool) -> Result<Self> {
        let db = DB::open(opts, path).map_err(rocks_error)?;
        let mut write = WriteOptions::default();
        write.disable_wal(disable_wal);
        Ok(RawRocksDb {
            db,
            write,
            read: ReadOptions::default(),
        })
    }

    /// The value stored under `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self
            .db
            .get_pinned_opt(key, &self.read)
            .map_err(rocks_error)?
            .map(|v| v.to_vec()))
    }

    /// Stores `value` under `key`.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.db
            .put_opt(key, value, &self.write)
            .map_err(rocks_error)
    }

    /// An integer RocksDB property, e.g. `rocksdb.num-files-at-level0`.
    pub fn property_u64(&self, name: &str) -> Result<Option<u64>> {
        self.db.property_int_value(name).map_err(rocks_error)
    }

    /// Compacts the whole key space into the last level (memtables first) with the same
    /// options as `KeyedBackend::compact_state` uses for a state. rust-rocksdb reports no
    /// error from a manual compaction, so neither does this.
    pub fn compact_all(&self) {
        let mut opts = rocksdb::CompactOptions::default();
        opts.set_bottommost_level_compaction(rocksdb::BottommostLevelCompaction::ForceOptimized);
        self.db
            .compact_range_opt(None::<&[u8]>, None::<&[u8]>, &opts);
    }

    /// Flushes the memtables and waits until no compaction is pending or running.
    pub fn wait_for_compactions(&self) -> Result<()> {
        let mut opts = rocksdb::WaitForCompactOptions::default();
        opts.set_flush(true);
        self.db.wait_for_compact(&opts).map_err(rocks_error)
    }
}

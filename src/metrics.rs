//! Plain-data figures a backend exposes for monitoring (`KeyedBackend::metrics`): its RocksDB
//! figures, read from RocksDB properties and the live-file list by `db`, and the figures of its
//! last checkpoint, recorded by the checkpoint code. No registry, no exporter: an engine maps
//! these onto whatever metrics system it uses.

use std::time::Duration;

/// SST files of one LSM level (all column families together).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LevelMetrics {
    /// The level (0 = newest).
    pub level: u32,
    /// Number of SST files.
    pub sst_files: u64,
    /// Their total size in bytes.
    pub sst_bytes: u64,
}

/// RocksDB figures of one backend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RocksDbMetrics {
    /// Bytes in memtables (active and immutable), all column families
    /// (`rocksdb.cur-size-all-mem-tables`).
    pub memtable_bytes: u64,
    /// Bytes in the block cache (`rocksdb.block-cache-usage`; the cache is shared by every
    /// backend on the same memory budget).
    pub block_cache_bytes: u64,
    /// Bytes of the block cache held pinned (`rocksdb.block-cache-pinned-usage`): the
    /// memtables' charge, index and filter blocks of open SSTs with
    /// `DbOptions::pin_index_and_filter_blocks`, and blocks readers hold. Pinned blocks
    /// cannot be evicted, so once they outgrow the cache the process uses more memory than
    /// its budget (the same cache, shared by every backend).
    pub block_cache_pinned_bytes: u64,
    /// The block cache's capacity (`rocksdb.block-cache-capacity`): the memory budget minus
    /// the write caches and value caches of the backends open on it.
    pub block_cache_capacity_bytes: u64,
    /// The bytes this backend's write cache may hold before it writes them to RocksDB
    /// now (`DbOptions::write_cache_bytes`, bounded by the memtable size and by its even share
    /// of the budget's eighth for write caches); 0 when writes go straight through.
    pub write_cache_limit_bytes: u64,
    /// The bytes this backend's value cache may hold now (`DbOptions::value_cache_bytes`,
    /// bounded by its even share of the budget's quarter for value caches, which changes as
    /// backends open and close); 0 when it is off.
    pub value_cache_limit_bytes: u64,
    /// Bytes the value cache has allocated now: its ring (all of it from the first entry on;
    /// the system maps its pages as they fill) and its index (`value_cache` module docs).
    pub value_cache_bytes: u64,
    /// Keys whose values the value cache holds (counted over its index when asked).
    pub value_cache_entries: u64,
    /// Estimated number of keys, all column families (`rocksdb.estimate-num-keys`).
    pub estimated_keys: u64,
    /// Bytes compaction still has to rewrite (`rocksdb.estimate-pending-compaction-bytes`).
    pub pending_compaction_bytes: u64,
    /// SST files per level, ascending, only levels that hold files.
    pub levels: Vec<LevelMetrics>,
    /// Bytes of the files savepoint restores, rescale rewrites and changelog replays wrote
    /// that were handed to the thread reading them into the page cache since the backend
    /// opened (`DbOptions::warm_restored_files`; 0 where they did not fit in memory).
    pub restored_bytes_warmed: u64,
}

impl RocksDbMetrics {
    /// Total number of SST files.
    pub fn sst_files(&self) -> u64 {
        self.levels.iter().map(|l| l.sst_files).sum()
    }

    /// Total SST bytes.
    pub fn sst_bytes(&self) -> u64 {
        self.levels.iter().map(|l| l.sst_bytes).sum()
    }
}

/// Figures of the last checkpoint this backend uploaded (in this process).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointMetrics {
    /// Id of the last uploaded checkpoint.
    pub last_checkpoint_id: Option<u64>,
    /// Its sync phase duration.
    pub last_sync_duration: Duration,
    /// Its async phase duration.
    pub last_async_duration: Duration,
    /// Bytes it uploaded.
    pub last_bytes_uploaded: u64,
    /// Shared files (SSTs) its manifest references, reused or new.
    pub shared_files_referenced: u64,
    /// SSTs it reused from the previous checkpoint.
    pub last_files_reused: u64,
    /// Checkpoints uploaded by this process so far.
    pub checkpoints_uploaded: u64,
    /// Bytes uploaded by this process so far.
    pub total_bytes_uploaded: u64,
    /// Last completed checkpoint id.
    pub last_completed: Option<u64>,
}

/// Everything [`crate::KeyedBackend::metrics`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackendMetrics {
    /// RocksDB figures.
    pub rocksdb: RocksDbMetrics,
    /// Checkpoint figures.
    pub checkpoint: CheckpointMetrics,
}

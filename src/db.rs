//! The one module that touches `rocksdb::` types: opening a database with rockstate's options,
//! column families, point reads and writes, bounded scans, write batches, flushes, compaction
//! and RocksDB checkpoints. Everything above it works with plain byte slices and [`Cf`].

use std::collections::HashMap;
use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use parking_lot::RwLock;
use rocksdb::compaction_filter::{CompactionFilter, Decision};
use rocksdb::compaction_filter_factory::{CompactionFilterContext, CompactionFilterFactory};
use rocksdb::{
    BlockBasedOptions, BlockBasedTablePinningTier, BoundColumnFamily, Cache, DBCompressionType,
    DBWithThreadMode, DataBlockIndexType, Env, MultiThreaded, Options, ReadOptions, WriteBatch,
    WriteBufferManager, WriteOptions,
};

use crate::clock::Clock;
use crate::error::{Error, ErrorKind, Result};
use crate::key_bounds::{Check, KeyBounds};
use crate::keygroup::{self, KeyGroupRange};
use crate::options::{CacheKind, Compression, DbOptions, MemoryBudgetConfig};
use crate::ttl::{self, TtlCounters};
use crate::value_cache::ValueCache;
use crate::write_cache::{CachedWrite, WriteCache};

impl From<rocksdb::Error> for Error {
    fn from(e: rocksdb::Error) -> Self {
        use rocksdb::ErrorKind as R;
        let kind = match e.kind() {
            R::NotFound => ErrorKind::NotFound,
            R::Corruption => ErrorKind::Corruption,
            R::NotSupported => ErrorKind::Unsupported,
            R::InvalidArgument => ErrorKind::InvalidInput,
            R::Busy
            | R::TimedOut
            | R::TryAgain
            | R::Incomplete
            | R::MergeInProgress
            | R::Expired
            | R::ShutdownInProgress => ErrorKind::Transient,
            R::Aborted | R::ColumnFamilyDropped => ErrorKind::Conflict,
            R::IOError | R::CompactionTooLarge | R::Unknown => ErrorKind::Io,
        };
        Error::RocksDb {
            kind,
            detail: e.into_string(),
        }
    }
}

/// One memory budget for a whole process, shared by every backend and state that uses it:
/// a block cache, and a write-buffer manager that charges memtables to that same cache, so
/// N operator instances cannot add up past `total_bytes` (Flink's "managed memory"). Every
/// backend flushes as soon as the memtables of all of them exceed their share. Writers are not
/// stalled (a stall deadlocks a task that drives several backends from one thread), so
/// memtables awaiting their flush may overshoot briefly. Each open backend's write cache
/// (`DbOptions::write_cache_bytes`) is taken out of the block cache's capacity while the
/// backend is open; together the write caches get at most an eighth of the budget, and a
/// backend opened when that share is used up writes straight through. The value caches
/// (`DbOptions::value_cache_bytes`) share a quarter of the budget evenly: each open backend
/// with one gets the quarter divided by their number, or what it asks if less, and the caches
/// are resized (emptied) whenever a backend opens or closes; what they hold is taken out of
/// the block cache's capacity too.
#[derive(Clone)]
pub struct MemoryBudget {
    cache: Cache,
    write_buffers: WriteBufferManager,
    config: MemoryBudgetConfig,
    /// Bytes granted to open backends' write caches and value caches.
    reserved: Arc<parking_lot::Mutex<Reserved>>,
}

/// Bytes of a [`MemoryBudget`] granted out of its block cache.
#[derive(Default)]
struct Reserved {
    write_caches: usize,
    /// The open databases with a value cache, and what each was granted; the grants add up to
    /// `value_caches`.
    value_users: Vec<ValueUser>,
    value_caches: usize,
    next_user: u64,
}

/// A database on the budget whose value cache takes a share of the value caches' quarter.
struct ValueUser {
    id: u64,
    /// `DbOptions::value_cache_bytes`: the most it takes.
    want: usize,
    granted: usize,
    /// Its front, not the database: the budget must never be what keeps a closed database
    /// (its RocksDB handle, its directory lock) alive.
    front: Weak<RwLock<Front>>,
}

/// Bytes of a [`MemoryBudget`] granted to one backend's write cache; given back on drop.
struct Reservation {
    budget: MemoryBudget,
    bytes: usize,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut reserved = self.budget.reserved.lock();
        reserved.write_caches -= self.bytes;
        self.budget.resize_cache(&reserved);
    }
}

/// A database's place among the value caches of a [`MemoryBudget`]; leaving (on drop) gives
/// its share to the others.
struct ValueShare {
    budget: MemoryBudget,
    id: u64,
}

impl Drop for ValueShare {
    fn drop(&mut self) {
        let mut reserved = self.budget.reserved.lock();
        reserved.value_users.retain(|u| u.id != self.id);
        self.budget.share_values(&mut reserved);
    }
}

impl MemoryBudget {
    /// Creates a budget; share it by cloning (clones share the same memory).
    pub fn new(config: MemoryBudgetConfig) -> Result<Self> {
        config.validate()?;
        let cache = match config.cache {
            CacheKind::Lru => Cache::new_lru_cache(config.total_bytes),
            // 0 = let the cache size its table itself (RocksDB's AutoHyperClockCache).
            CacheKind::HyperClock => Cache::new_hyper_clock_cache(config.total_bytes, 0),
        };
        let memtable_bytes = (config.total_bytes as f64 * config.write_buffer_ratio) as usize;
        let write_buffers = WriteBufferManager::new_write_buffer_manager_with_cache(
            memtable_bytes,
            false,
            cache.clone(),
        );
        Ok(MemoryBudget {
            cache,
            write_buffers,
            config,
            reserved: Arc::new(parking_lot::Mutex::new(Reserved::default())),
        })
    }

    /// Grants up to `want` bytes out of the write caches' eighth of the budget, shrinking the
    /// block cache by what it grants.
    fn reserve(&self, want: usize) -> Reservation {
        let mut reserved = self.reserved.lock();
        let bytes = want.min((self.config.total_bytes / 8).saturating_sub(reserved.write_caches));
        reserved.write_caches += bytes;
        self.resize_cache(&reserved);
        Reservation {
            budget: self.clone(),
            bytes,
        }
    }

    /// Adds a database's `front` (its value cache empty so far) whose value cache may take
    /// up to `want` bytes to the value caches' quarter of the budget, which is split evenly
    /// among them; sizes every cache to its new share, this one included.
    fn join_values(&self, front: &Arc<RwLock<Front>>, want: usize) -> ValueShare {
        let mut reserved = self.reserved.lock();
        let id = reserved.next_user;
        reserved.next_user += 1;
        reserved.value_users.push(ValueUser {
            id,
            want,
            granted: 0,
            front: Arc::downgrade(front),
        });
        self.share_values(&mut reserved);
        ValueShare {
            budget: self.clone(),
            id,
        }
    }

    /// Splits the value caches' quarter evenly among their databases (each takes at most what
    /// it wants), resizes each cache whose grant changed, and sizes the block cache by what
    /// is granted. A front already gone (its database is being dropped) keeps its grant
    /// counted until the database leaves.
    fn share_values(&self, reserved: &mut Reserved) {
        let n = reserved.value_users.len().max(1);
        let share = self.config.total_bytes / 4 / n;
        for u in &mut reserved.value_users {
            let grant = u.want.min(share);
            if u.granted != grant {
                if let Some(front) = u.front.upgrade() {
                    front.write().values.resize(grant);
                    u.granted = grant;
                }
            }
        }
        reserved.value_caches = reserved.value_users.iter().map(|u| u.granted).sum();
        self.resize_cache(reserved);
    }

    /// Sets the block cache's capacity to the budget minus the caches' bytes. The caller
    /// holds the `reserved` lock, so capacity changes apply in order.
    fn resize_cache(&self, reserved: &Reserved) {
        // Never negative: the shares add up to at most three eighths of the budget.
        self.cache.clone().set_capacity(
            self.config
                .total_bytes
                .saturating_sub(reserved.write_caches + reserved.value_caches),
        );
    }
    /// The process-wide default budget (`MemoryBudgetConfig::default()`, created on first
    /// use), shared by every backend opened without a budget of its own.
    pub(crate) fn process_default() -> Result<MemoryBudget> {
        static BUDGET: std::sync::OnceLock<MemoryBudget> = std::sync::OnceLock::new();
        if let Some(b) = BUDGET.get() {
            return Ok(b.clone());
        }
        let budget = MemoryBudget::new(MemoryBudgetConfig::default())?;
        Ok(BUDGET.get_or_init(|| budget).clone())
    }

    /// The budget's settings.
    pub fn config(&self) -> &MemoryBudgetConfig {
        &self.config
    }

    /// Bytes currently charged to the shared cache (blocks and memtables).
    pub fn usage_bytes(&self) -> usize {
        self.cache.get_usage()
    }

    /// Bytes the memtables of every backend on this budget use now.
    pub fn memtable_bytes(&self) -> usize {
        self.write_buffers.get_usage()
    }
}

impl std::fmt::Debug for MemoryBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBudget")
            .field("config", &self.config)
            .field("usage_bytes", &self.usage_bytes())
            .finish()
    }
}

fn compression(c: Compression) -> DBCompressionType {
    match c {
        Compression::None => DBCompressionType::None,
        Compression::Lz4 => DBCompressionType::Lz4,
        Compression::Zstd => DBCompressionType::Zstd,
    }
}

/// The options every column family gets (identical table options everywhere).
fn cf_options(o: &DbOptions, budget: &MemoryBudget) -> Result<Options> {
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
    opts.set_level_compaction_dynamic_level_bytes(true);
    if o.memtable_bloom_ratio > 0.0 {
        opts.set_memtable_prefix_bloom_ratio(o.memtable_bloom_ratio);
        opts.set_memtable_whole_key_filtering(true);
    }
    if o.memtable_insert_hint {
        // Not in the C API as a setter; RocksDB's option-string parser sets it on a copy of
        // `opts` (the copy shares the table factory and cache through C++ shared pointers).
        // Two bytes: the key group (one byte up to max parallelism 128) plus the first byte
        // of the key's length, or the whole two-byte key group above 128.
        opts = opts.get_options_from_string(
            "memtable_insert_with_hint_prefix_extractor=rocksdb.CappedPrefix.2",
        )?;
    }
    Ok(opts)
}

/// What the TTL compaction filter of one column family needs; set when a TTL state registers.
pub(crate) struct TtlFilter {
    pub(crate) ttl_ms: u64,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) refresh_every: u64,
    pub(crate) counters: Arc<TtlCounters>,
}

/// Column family name → its TTL filter. States register lazily (after open), so each column
/// family gets a factory at open that looks its filter up here at the start of each compaction.
type FilterRegistry = Arc<RwLock<HashMap<String, Arc<TtlFilter>>>>;

struct TtlFilterFactory {
    cf: String,
    registry: FilterRegistry,
}

impl CompactionFilterFactory for TtlFilterFactory {
    type Filter = TtlCompactionFilter;

    fn create(&mut self, _context: CompactionFilterContext) -> TtlCompactionFilter {
        TtlCompactionFilter {
            spec: self.registry.read().get(&self.cf).cloned(),
            now: 0,
            countdown: 0,
            examined: 0,
            removed: 0,
        }
    }

    fn name(&self) -> &CStr {
        c"rockstate.ttl.factory"
    }
}

/// Drops entries whose TTL timestamp is expired; re-reads the clock every `refresh_every`
/// entries (the first entry reads it). Its counts are added to the state's counters when the
/// compaction ends (drop), so the per-entry path touches no shared memory.
struct TtlCompactionFilter {
    spec: Option<Arc<TtlFilter>>,
    now: u64,
    countdown: u64,
    examined: u64,
    removed: u64,
}

impl Drop for TtlCompactionFilter {
    fn drop(&mut self) {
        if let Some(spec) = &self.spec {
            let c = &spec.counters;
            c.compaction_filters.fetch_add(1, Ordering::Relaxed);
            c.examined_by_compaction
                .fetch_add(self.examined, Ordering::Relaxed);
            c.dropped_by_compaction
                .fetch_add(self.removed, Ordering::Relaxed);
        }
    }
}

impl CompactionFilter for TtlCompactionFilter {
    fn filter(&mut self, _level: u32, _key: &[u8], value: &[u8]) -> Decision {
        let Some(spec) = &self.spec else {
            return Decision::Keep;
        };
        if self.countdown == 0 {
            self.now = spec.clock.now_ms();
            self.countdown = spec.refresh_every.max(1);
        }
        self.countdown -= 1;
        self.examined += 1;
        if ttl::stored_is_expired(value, spec.ttl_ms, self.now) {
            self.removed += 1;
            Decision::Remove
        } else {
            Decision::Keep
        }
    }

    fn name(&self) -> &CStr {
        c"rockstate.ttl"
    }
}

/// Makes compaction cut its output files wherever the first `prefix_len` key bytes change
/// (0: no cuts beyond size). With `prefix_len` the key-group prefix, every compacted file
/// holds one key group, so a file's key range is one group's range and a point read of a
/// key past a group's last key (or before its first) skips the file without a filter probe,
/// as it would with keys that are not prefixed. Only with `DbOptions::key_group_files`.
fn partition_files(o: &DbOptions, mut opts: Options, prefix_len: usize) -> Result<Options> {
    if !o.key_group_files || prefix_len == 0 {
        return Ok(opts);
    }
    // Not in the C API as a setter; as for the insert hint, RocksDB's option-string parser
    // sets it on a copy of `opts` (which shares the cache, the write-buffer manager and the
    // table factory with it through C++ shared pointers).
    Ok(opts.get_options_from_string(format!(
        "sst_partitioner_factory={{id=SstPartitionerFixedPrefixFactory;length={prefix_len}}}"
    ))?)
}

/// A state column family's options: the shared ones, the file partitioning, the TTL filter.
fn state_cf_options(
    o: &DbOptions,
    budget: &MemoryBudget,
    name: &str,
    registry: &FilterRegistry,
    partition_prefix: usize,
) -> Result<Options> {
    let mut opts = cf_options(o, budget)?;
    if name != rocksdb::DEFAULT_COLUMN_FAMILY_NAME {
        opts = partition_files(o, opts, partition_prefix)?;
        opts.set_compaction_filter_factory(TtlFilterFactory {
            cf: name.to_string(),
            registry: Arc::clone(registry),
        });
    }
    Ok(opts)
}

/// Database-wide options: the column-family options plus the shared budget and threads.
fn db_options(o: &DbOptions, budget: &MemoryBudget) -> Result<Options> {
    let mut opts = cf_options(o, budget)?;
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    opts.set_write_buffer_manager(&budget.write_buffers);
    opts.set_max_background_jobs(o.max_background_jobs);
    opts.set_keep_log_file_num(2);
    if o.low_priority_compaction {
        // Every database without an environment of its own (all of ours) runs its compactions
        // in the default environment's one LOW thread pool, so this lowers them process-wide;
        // each pool thread applies it before its next job. Flushes (the HIGH pool) keep
        // normal priority. Dropping `env` releases only the handle, never the default
        // environment itself.
        let mut env = Env::new()?;
        env.lower_thread_pool_cpu_priority();
    }
    Ok(opts)
}

/// RocksDB options exactly as rockstate builds them for a state column family, for
/// benchmarks that compare a raw rust-rocksdb database (its default column family) against
/// rockstate under identical settings; `partition_prefix` as
/// [`crate::keygroup::file_partition_prefix_len`] gives it for the compared backend.
#[doc(hidden)]
pub fn rocksdb_options_for_benchmarks(
    o: &DbOptions,
    budget: &MemoryBudget,
    partition_prefix: usize,
) -> Result<Options> {
    partition_files(o, db_options(o, budget)?, partition_prefix)
}

/// Write options shared by every write of one database.
struct SharedWriteOptions(WriteOptions);
// SAFETY: rocksdb::WriteOptions is Send but not Sync only because it wraps a raw pointer.
// The C++ WriteOptions it points to is a plain struct that RocksDB only reads during a write;
// we never mutate it after construction, so shared `&` access from many threads is sound.
unsafe impl Sync for SharedWriteOptions {}

/// Read options shared by every point read of one database (see [`SharedWriteOptions`]).
struct SharedReadOptions(ReadOptions);
// SAFETY: as for SharedWriteOptions: never mutated after construction; RocksDB only reads it.
unsafe impl Sync for SharedReadOptions {}

/// The names of every column family of the database at `path` (the default one first when
/// the database is new) and their descriptors with rockstate's options.
fn descriptors(
    path: &Path,
    opts: &Options,
    options: &DbOptions,
    budget: &MemoryBudget,
    filters: &FilterRegistry,
    partition_prefix: usize,
) -> Result<(Vec<String>, Vec<rocksdb::ColumnFamilyDescriptor>)> {
    let mut existing = if path.join("CURRENT").exists() {
        DBWithThreadMode::<MultiThreaded>::list_cf(opts, path)?
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
    let descriptors = existing
        .iter()
        .map(|name| {
            Ok(rocksdb::ColumnFamilyDescriptor::new(
                name,
                state_cf_options(options, budget, name, filters, partition_prefix)?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((existing, descriptors))
}

/// An open RocksDB database.
pub(crate) struct Db {
    db: DBWithThreadMode<MultiThreaded>,
    /// Writes not yet in RocksDB, values recently in it, and the key bounds: read before
    /// RocksDB by every point read. Declared before the budget shares below, so its memory is
    /// freed before they hand it back to the budget. The budget holds it weakly, to resize
    /// the value cache.
    front: Arc<RwLock<Front>>,
    /// The write cache's share of the memory budget (held while the database is open).
    reservation: Reservation,
    /// The value cache's place among the budget's value caches (`None`: no value cache).
    value_share: Option<ValueShare>,
    /// Names of every column family (kept here so a flush needs no directory read).
    cf_names: parking_lot::Mutex<Vec<String>>,
    filters: FilterRegistry,
    write: SharedWriteOptions,
    read: SharedReadOptions,
    options: DbOptions,
    budget: MemoryBudget,
    /// Key bytes at which compaction cuts files of state column families (0: none).
    partition_prefix: usize,
    /// Whether point reads are bounded per key group (`Front::bounds` is `Some`).
    bounded: bool,
    path: PathBuf,
}

/// What a point read consults before RocksDB, under one lock.
struct Front {
    /// Writes not yet in RocksDB (see [`crate::write_cache`]); drained before every other
    /// access to RocksDB's data, except the reverse seek that learns a key bound (which the
    /// drain's raise of the bound covers).
    cache: WriteCache,
    /// Values recently written to RocksDB or read from it (see [`crate::value_cache`]): each
    /// entry equals RocksDB's value for its key once `cache` has nothing newer for it.
    values: ValueCache,
    /// Bounds of each key group's keys in RocksDB (see [`crate::key_bounds`]; a point read
    /// looks in `cache` first, and a drain raises them for what it writes); `None` when the
    /// keys' layout is not known or `DbOptions::key_bounds` is off.
    bounds: Option<KeyBounds>,
}

impl Front {
    /// What the bounds say about `key` in column family `slot`.
    #[inline]
    fn check(&self, slot: usize, key: &[u8]) -> Check {
        match &self.bounds {
            Some(b) => b.check(slot, key),
            None => Check::Maybe,
        }
    }

    /// Counts a put of `key` that goes straight to RocksDB (the write cache is off) in the
    /// bounds, before the key gets there.
    #[inline]
    fn raise(&mut self, slot: usize, key: &[u8]) {
        if let Some(b) = &mut self.bounds {
            b.raise(slot, key);
        }
    }
}

/// How the keys of a database's state column families begin: with their key-group prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyLayout {
    /// Bytes of the key-group prefix (1 or 2).
    group_prefix: usize,
    /// Key bytes at which compaction cuts state files
    /// ([`crate::keygroup::file_partition_prefix_len`]).
    file_prefix: usize,
}

impl KeyLayout {
    /// The layout of a backend owning `key_groups` of `max_parallelism`.
    pub(crate) fn new(max_parallelism: u32, key_groups: KeyGroupRange) -> Self {
        KeyLayout {
            group_prefix: keygroup::prefix_len(max_parallelism),
            file_prefix: keygroup::file_partition_prefix_len(max_parallelism, key_groups),
        }
    }
}

/// A column family handle that keeps its database alive.
#[derive(Clone)]
pub(crate) struct Cf {
    // Field order matters: the handle is dropped before the database it belongs to.
    handle: Arc<BoundColumnFamily<'static>>,
    db: Arc<Db>,
    name: Arc<str>,
    /// Position of the column family in `Db::cf_names`: its slot in the write cache.
    slot: usize,
}

/// A batch of writes applied atomically by [`Db::write`].
pub(crate) struct Batch(Vec<BatchOp>);

/// One write of a [`Batch`].
struct BatchOp {
    /// The column family's slot ([`Cf`]).
    slot: usize,
    key: Box<[u8]>,
    /// `None`: a delete.
    value: Option<Box<[u8]>>,
}

impl Db {
    /// Opens (or creates) the database at `path` with every column family it already has.
    /// With the keys' `layout`, compaction cuts state files at key-group boundaries
    /// (`DbOptions::key_group_files`) and point reads are bounded per key group
    /// (`DbOptions::key_bounds`); `None` does neither.
    pub(crate) fn open(
        path: &Path,
        options: &DbOptions,
        budget: &MemoryBudget,
        layout: Option<KeyLayout>,
    ) -> Result<Arc<Db>> {
        Self::open_with(path, options, budget, layout, false)
    }

    /// Opens the existing database at `path` read-only: nothing is written, no compaction
    /// runs, so its live files stay as they are while it is open (rescale sources).
    pub(crate) fn open_read_only(
        path: &Path,
        options: &DbOptions,
        budget: &MemoryBudget,
    ) -> Result<Arc<Db>> {
        Self::open_with(path, options, budget, None, true)
    }

    fn open_with(
        path: &Path,
        options: &DbOptions,
        budget: &MemoryBudget,
        layout: Option<KeyLayout>,
        read_only: bool,
    ) -> Result<Arc<Db>> {
        options.validate()?;
        let partition_prefix = layout.map_or(0, |l| l.file_prefix);
        let opts = db_options(options, budget)?;
        let filters = FilterRegistry::default();
        let (existing, descriptors) =
            descriptors(path, &opts, options, budget, &filters, partition_prefix)?;
        let db = if read_only {
            DBWithThreadMode::<MultiThreaded>::open_cf_descriptors_read_only(
                &opts,
                path,
                descriptors,
                false,
            )?
        } else {
            DBWithThreadMode::<MultiThreaded>::open_cf_descriptors(&opts, path, descriptors)?
        };
        let cf_names = parking_lot::Mutex::new(existing);
        let mut write = WriteOptions::default();
        write.disable_wal(!options.wal);
        // A batch larger than a memtable would overfill it: at most an eighth of one.
        let want = if options.wal || read_only {
            0
        } else {
            options.write_cache_bytes.min(options.write_buffer_size / 8)
        };
        let reservation = budget.reserve(want);
        let value_want = if read_only {
            0
        } else {
            options.value_cache_bytes
        };
        // One hasher for both caches: a key hashed for one serves the other.
        let hasher = std::hash::RandomState::new();
        let bounds = layout
            .filter(|_| options.key_bounds && !read_only)
            .map(|l| l.group_prefix);
        let front = Arc::new(RwLock::new(Front {
            cache: WriteCache::new(reservation.bytes, hasher.clone()),
            // Sized by the budget as it joins (below).
            values: ValueCache::new(0, hasher),
            // Every bound starts unknown: the database may hold keys already.
            bounds: bounds.map(KeyBounds::new),
        }));
        let value_share = (value_want > 0).then(|| budget.join_values(&front, value_want));
        Ok(Arc::new(Db {
            db,
            front,
            bounded: bounds.is_some(),
            reservation,
            value_share,
            cf_names,
            filters,
            write: SharedWriteOptions(write),
            read: SharedReadOptions(ReadOptions::default()),
            options: options.clone(),
            budget: budget.clone(),
            partition_prefix,
            path: path.to_path_buf(),
        }))
    }

    /// The directory of the database.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The column family `name`, if it exists.
    pub(crate) fn cf(self: &Arc<Self>, name: &str) -> Option<Cf> {
        let slot = self.cf_names.lock().iter().position(|n| n == name)?;
        let bound = self.db.cf_handle(name)?;
        // SAFETY: this only erases the lifetime that ties the handle to `self.db`. The `Cf`
        // stores an `Arc<Db>` next to the handle and drops the handle first (field order), so
        // the database outlives every use and the drop of the handle. Column families are
        // never dropped while rockstate runs.
        let handle: Arc<BoundColumnFamily<'static>> = unsafe { std::mem::transmute(bound) };
        Some(Cf {
            handle,
            db: Arc::clone(self),
            name: name.into(),
            slot,
        })
    }

    /// The column family `name`, created with rockstate's options when missing.
    pub(crate) fn create_cf(self: &Arc<Self>, name: &str) -> Result<Cf> {
        {
            // Held across the creation, so `cf` never sees a column family RocksDB has but
            // `cf_names` (which gives it its write-cache slot) does not yet.
            let mut names = self.cf_names.lock();
            if !names.iter().any(|n| n == name) {
                self.db.create_cf(
                    name,
                    &state_cf_options(
                        &self.options,
                        &self.budget,
                        name,
                        &self.filters,
                        self.partition_prefix,
                    )?,
                )?;
                names.push(name.to_string());
            }
        }
        self.cf(name)
            .ok_or_else(|| Error::Internal(format!("column family {name} vanished after creation")))
    }

    /// The default column family (rockstate keeps its metadata there).
    pub(crate) fn default_cf(self: &Arc<Self>) -> Result<Cf> {
        self.cf(rocksdb::DEFAULT_COLUMN_FAMILY_NAME)
            .ok_or_else(|| Error::Internal("default column family missing".into()))
    }

    /// Applies a batch atomically: readers see all of it or none of it. With the cache on,
    /// a full cache is drained first (an error leaves the batch undone), then the batch is
    /// cached under one lock.
    pub(crate) fn write(&self, batch: Batch) -> Result<()> {
        if self.cache_on() {
            let mut front = self.front.write();
            if front.cache.is_full() {
                self.write_cached(&mut front)?;
            }
            for op in &batch.0 {
                front.cache.write(op.slot, &op.key, op.value.as_deref());
            }
            return Ok(());
        }
        let ops = batch
            .0
            .iter()
            .map(|op| (op.slot, &*op.key, op.value.as_deref()));
        let wb = self.write_batch(ops, 0)?;
        let mut front = self.tracking_front();
        if let Some(front) = &mut front {
            for op in batch.0.iter().filter(|op| op.value.is_some()) {
                front.raise(op.slot, &op.key);
            }
        }
        self.db.write_opt(wb, &self.write.0)?;
        if let Some(front) = &mut front {
            for op in &batch.0 {
                front
                    .values
                    .record_write(op.slot, &op.key, op.value.as_deref());
            }
        }
        Ok(())
    }

    /// For a write that bypasses the write cache: the front lock, when the front tracks what
    /// RocksDB holds (key bounds or a value cache), to hold across the write as a drain
    /// does. Bounds are raised before RocksDB has the keys; the value cache records the write
    /// after, and no read can record an older value in between or find one after.
    fn tracking_front(&self) -> Option<parking_lot::RwLockWriteGuard<'_, Front>> {
        (self.bounded || self.values_on()).then(|| self.front.write())
    }

    /// Whether point reads may be served from a value cache: the database has a share of
    /// the budget's value caches (its size may change, to 0 too, as databases open and
    /// close; writes that bypass the write cache lock the front whenever it could be on).
    #[inline]
    fn values_on(&self) -> bool {
        self.value_share.is_some()
    }

    /// Whether a point read takes the front lock: something in front of RocksDB may answer.
    #[inline]
    fn fronted(&self) -> bool {
        self.cache_on() || self.bounded || self.values_on()
    }

    /// Whether writes go through the write cache: the WAL is off, the database writable, and
    /// the memory budget granted the cache bytes.
    #[inline]
    fn cache_on(&self) -> bool {
        self.reservation.bytes > 0
    }

    /// A RocksDB write batch of `writes` (slot, key, value or `None` for a delete), with
    /// `capacity` bytes reserved up front.
    fn write_batch<'a>(
        &self,
        writes: impl Iterator<Item = CachedWrite<'a>>,
        capacity: usize,
    ) -> Result<WriteBatch> {
        // Lock order: the cache (held by some callers), then `cf_names`; never the reverse.
        let names = self.cf_names.lock();
        let mut handles: Vec<Option<Arc<BoundColumnFamily<'_>>>> = Vec::new();
        let mut wb = WriteBatch::with_capacity_bytes(capacity);
        for (slot, key, value) in writes {
            if handles.len() <= slot {
                handles.resize(slot + 1, None);
            }
            let handle = match &handles[slot] {
                Some(h) => h,
                None => handles[slot].insert(
                    names
                        .get(slot)
                        .and_then(|name| self.db.cf_handle(name))
                        .ok_or_else(|| {
                            Error::Internal(format!("no column family in slot {slot}"))
                        })?,
                ),
            };
            match value {
                Some(v) => wb.put_cf(handle, key, v),
                None => wb.delete_cf(handle, key),
            }
        }
        Ok(wb)
    }

    /// Writes every cached write to RocksDB in one batch, in key order, records them in the
    /// value cache and forgets them once RocksDB has them; raises each key group's bound to
    /// the largest key put in it. On an error nothing is forgotten: the next drain writes them
    /// again. The caller holds the lock across the write, so no reader finds a key in neither
    /// place, nor a key in RocksDB above its group's bound, nor an older value in the value
    /// cache with nothing newer in the write cache.
    fn write_cached(&self, front: &mut Front) -> Result<()> {
        let Front {
            cache,
            bounds,
            values,
        } = front;
        if cache.is_empty() {
            return Ok(());
        }
        // Sorted by slot, then key: the last put of each (slot, group) run is its largest. A
        // bound raised for a write RocksDB then refuses is only higher than it needs to be.
        let mut run: Option<(usize, &[u8])> = None;
        let writes = cache.sorted().inspect(|&(slot, key, value)| {
            let Some(b) = bounds.as_mut() else { return };
            if let Some((s, k)) = run {
                if s != slot || b.group(k) != b.group(key) {
                    b.raise(s, k);
                    run = None;
                }
            }
            if value.is_some() {
                run = Some((slot, key));
            }
        });
        let wb = self.write_batch(writes, cache.bytes())?;
        if let (Some(b), Some((slot, key))) = (bounds.as_mut(), run) {
            b.raise(slot, key);
        }
        self.db.write_opt(wb, &self.write.0)?;
        values.record_drained(cache.writes());
        cache.clear();
        Ok(())
    }

    /// Writes every cached write to RocksDB (see [`crate::write_cache`]): before anything
    /// that reads RocksDB's data other than a point read (or a key bound's reverse seek).
    pub(crate) fn drain(&self) -> Result<()> {
        if !self.cache_on() {
            return Ok(());
        }
        let mut front = self.front.write();
        self.write_cached(&mut front)
    }

    /// Flushes every column family's memtable to SST files.
    pub(crate) fn flush_all(&self) -> Result<()> {
        self.drain()?;
        let handles: Vec<_> = self
            .cf_names
            .lock()
            .iter()
            .filter_map(|n| self.db.cf_handle(n))
            .collect();
        let refs: Vec<_> = handles.iter().collect();
        self.db
            .flush_cfs_opt(&refs, &rocksdb::FlushOptions::default())?;
        Ok(())
    }

    /// Flushes memtables and waits until no compaction is pending or running.
    pub(crate) fn wait_for_compactions(&self) -> Result<()> {
        self.drain()?;
        let mut opts = rocksdb::WaitForCompactOptions::default();
        opts.set_flush(true);
        self.db.wait_for_compact(&opts)?;
        Ok(())
    }

    /// RocksDB figures of the whole database: integer properties summed over every column
    /// family, and SST counts and sizes per level from the live-file list.
    pub(crate) fn metrics(&self) -> Result<crate::metrics::RocksDbMetrics> {
        self.drain()?;
        let handles: Vec<_> = self
            .cf_names
            .lock()
            .iter()
            .filter_map(|n| self.db.cf_handle(n))
            .collect();
        let sum = |prop: &str| -> Result<u64> {
            let mut total = 0u64;
            for h in &handles {
                total = total.saturating_add(self.db.property_int_value_cf(h, prop)?.unwrap_or(0));
            }
            Ok(total)
        };
        let (value_cache_limit_bytes, value_cache_bytes, value_cache_entries) = {
            let values = &self.front.read().values;
            (
                values.limit() as u64,
                values.bytes() as u64,
                values.len() as u64,
            )
        };
        let mut m = crate::metrics::RocksDbMetrics {
            memtable_bytes: sum("rocksdb.cur-size-all-mem-tables")?,
            // One cache for the whole budget: read it once.
            block_cache_bytes: self
                .db
                .property_int_value("rocksdb.block-cache-usage")?
                .unwrap_or(0),
            block_cache_pinned_bytes: self
                .db
                .property_int_value("rocksdb.block-cache-pinned-usage")?
                .unwrap_or(0),
            block_cache_capacity_bytes: self
                .db
                .property_int_value("rocksdb.block-cache-capacity")?
                .unwrap_or(0),
            write_cache_limit_bytes: self.reservation.bytes as u64,
            value_cache_limit_bytes,
            value_cache_bytes,
            value_cache_entries,
            estimated_keys: sum("rocksdb.estimate-num-keys")?,
            pending_compaction_bytes: sum("rocksdb.estimate-pending-compaction-bytes")?,
            levels: Vec::new(),
        };
        let mut levels: std::collections::BTreeMap<u32, (u64, u64)> = Default::default();
        for f in self.db.live_files()? {
            let e = levels.entry(f.level.max(0) as u32).or_default();
            e.0 += 1;
            e.1 += f.size as u64;
        }
        m.levels = levels
            .into_iter()
            .map(
                |(level, (sst_files, sst_bytes))| crate::metrics::LevelMetrics {
                    level,
                    sst_files,
                    sst_bytes,
                },
            )
            .collect();
        Ok(m)
    }

    /// Creates a RocksDB checkpoint in `dir` (which must not exist): memtables are flushed, SST
    /// files hard-linked, MANIFEST/CURRENT/OPTIONS copied.
    pub(crate) fn checkpoint(&self, dir: &Path) -> Result<()> {
        self.drain()?;
        rocksdb::checkpoint::Checkpoint::new(&self.db)?.create_checkpoint(dir)?;
        Ok(())
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        // Closing writes out the memtables (WAL off); cached writes go there first. An error
        // here has nowhere to go: `KeyedBackend::close` drains through `flush_all` and
        // returns it, so only a backend dropped without `close` can end here with one.
        if let Err(e) = self.drain() {
            tracing::error!(
                path = %self.path.display(),
                error = %e,
                "cached writes lost: the database was dropped without close and could not take them"
            );
        }
    }
}

impl Cf {
    /// Writes the cached writes to RocksDB (every column family's: one sorted batch is as
    /// cheap as one per column family): before anything that reads this column family's data
    /// from RocksDB other than a point read (or a key bound's reverse seek).
    fn drain(&self) -> Result<()> {
        self.db.drain()
    }

    /// Caches a put or a delete (only with the cache on). A full cache is drained first, so
    /// an error of that drain leaves this write undone.
    #[inline]
    fn write(&self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        let mut front = self.db.front.write();
        if front.cache.is_full() {
            self.db.write_cached(&mut front)?;
        }
        front.cache.write(self.slot, key, value);
        Ok(())
    }

    /// Calls `f` with the stored value of `key`, without copying it out of RocksDB. A value
    /// found in the write cache is copied out first, so `f` runs with no lock held and may
    /// call back into the database; a key not in the cache and above its group's bound is
    /// absent without asking RocksDB.
    #[inline]
    pub(crate) fn get_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        let mut epoch = None;
        if self.db.fronted() {
            let front = self.db.front.read();
            // The caches share their hasher: one hash serves both.
            let hash = front.cache.hash(self.slot, key);
            let cached: Option<Option<smallvec::SmallVec<[u8; 256]>>> = front
                .cache
                .get(hash, self.slot, key)
                .map(|v| v.map(smallvec::SmallVec::from_slice));
            if let Some(pending) = cached {
                drop(front);
                return Ok(pending.map(|v| f(&v)));
            }
            // Not in the write cache: RocksDB has the answer, unless the key is above its
            // group's bound (then no value can be cached either), or the value cache holds it.
            let check = front.check(self.slot, key);
            if check == Check::Absent {
                return Ok(None);
            }
            if let Some(v) = front.values.get(hash, self.slot, key) {
                let v = smallvec::SmallVec::<[u8; 256]>::from_slice(v);
                drop(front);
                return Ok(Some(f(&v)));
            }
            epoch = front.values.is_on().then(|| (front.values.epoch(), hash));
            drop(front);
            if let Check::Unknown { losses } = check {
                self.learn_bound(key, losses)?;
            }
        }
        self.read_rocksdb(key, epoch, f)
    }

    /// The point read of `key` in RocksDB; with `epoch` (the value cache's when the read
    /// looked there, and the key's hash), a value found is recorded in the value cache.
    #[inline]
    fn read_rocksdb<R>(
        &self,
        key: &[u8],
        epoch: Option<(u64, u64)>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>> {
        let value = self
            .db
            .db
            .get_pinned_cf_opt(&self.handle, key, &self.db.read.0)?;
        if let (Some((epoch, hash)), Some(v)) = (epoch, &value) {
            self.db
                .front
                .write()
                .values
                .record_read(epoch, hash, self.slot, key, v);
        }
        Ok(value.map(|v| f(&v)))
    }

    /// Asks RocksDB for the largest key of `key`'s group and installs it as the group's bound
    /// (see [`crate::key_bounds`]): `losses` is the column family's loss count when the bound
    /// was found unknown. Reads RocksDB without draining the write cache: cached keys are
    /// found in the cache before the bound is looked at, and the drain that writes them
    /// raises the bound.
    #[cold]
    fn learn_bound(&self, key: &[u8], losses: u64) -> Result<()> {
        let Some((group, (lower, upper))) = self
            .db
            .front
            .read()
            .bounds
            .as_ref()
            .and_then(|b| b.group(key).map(|g| (g, b.group_range(g))))
        else {
            return Ok(());
        };
        let mut read = ReadOptions::default();
        read.set_iterate_lower_bound(lower);
        if let Some(upper) = upper {
            read.set_iterate_upper_bound(upper);
        }
        let mut it = self.db.db.raw_iterator_cf_opt(&self.handle, read);
        it.seek_to_last();
        it.status()?;
        let stored_max = it.key().map(<[u8]>::to_vec);
        drop(it);
        if let Some(b) = &mut self.db.front.write().bounds {
            b.learn(self.slot, group, losses, stored_max.as_deref());
        }
        Ok(())
    }

    /// Stores `value` under `key`.
    #[inline]
    pub(crate) fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        if self.db.cache_on() {
            return self.write(key, Some(value));
        }
        let mut front = self.db.tracking_front();
        if let Some(front) = &mut front {
            front.raise(self.slot, key);
        }
        self.db
            .db
            .put_cf_opt(&self.handle, key, value, &self.db.write.0)?;
        if let Some(front) = &mut front {
            front.values.record_write(self.slot, key, Some(value));
        }
        Ok(())
    }

    /// Deletes `key`.
    pub(crate) fn delete(&self, key: &[u8]) -> Result<()> {
        if self.db.cache_on() {
            return self.write(key, None);
        }
        let mut front = self.db.tracking_front();
        self.db
            .db
            .delete_cf_opt(&self.handle, key, &self.db.write.0)?;
        if let Some(front) = &mut front {
            front.values.record_write(self.slot, key, None);
        }
        Ok(())
    }

    /// Calls `f` for every entry with `lower <= key < upper` in key order until it returns
    /// `Ok(false)`. `upper = None` scans to the end of the column family.
    pub(crate) fn scan(
        &self,
        lower: &[u8],
        upper: Option<&[u8]>,
        f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        self.scan_with(ReadOptions::default(), lower, upper, f)
    }

    /// [`Cf::scan`] with `read` (its bounds are set here).
    fn scan_with(
        &self,
        mut read: ReadOptions,
        lower: &[u8],
        upper: Option<&[u8]>,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        self.drain()?;
        read.set_iterate_lower_bound(lower.to_vec());
        if let Some(upper) = upper {
            read.set_iterate_upper_bound(upper.to_vec());
        }
        let mut it = self.db.db.raw_iterator_cf_opt(&self.handle, read);
        it.seek(lower);
        while let Some((k, v)) = it.item() {
            if !f(k, v)? {
                return Ok(());
            }
            it.next();
        }
        it.status()?;
        Ok(())
    }

    /// [`Cf::scan`] for one long sequential pass over many entries (savepoints, whole key
    /// groups): the blocks read are not added to the block cache (a bulk scan would evict the
    /// hot working set and pay for the inserts) and files are read ahead in 2 MiB steps.
    pub(crate) fn scan_bulk(
        &self,
        lower: &[u8],
        upper: Option<&[u8]>,
        f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let mut read = ReadOptions::default();
        read.fill_cache(false);
        read.set_readahead_size(2 << 20);
        self.scan_with(read, lower, upper, f)
    }

    /// Compacts the whole column family (runs compaction filters on every entry).
    pub(crate) fn compact_all(&self) -> Result<()> {
        self.drain()?;
        let mut opts = rocksdb::CompactOptions::default();
        opts.set_bottommost_level_compaction(rocksdb::BottommostLevelCompaction::ForceOptimized);
        self.db
            .db
            .compact_range_cf_opt(&self.handle, None::<&[u8]>, None::<&[u8]>, &opts);
        Ok(())
    }

    /// An integer RocksDB property of this column family (e.g. `rocksdb.estimate-num-keys`).
    pub(crate) fn property_u64(&self, name: &str) -> Result<Option<u64>> {
        self.drain()?;
        Ok(self.db.db.property_int_value_cf(&self.handle, name)?)
    }

    /// The database this column family belongs to.
    pub(crate) fn db(&self) -> &Arc<Db> {
        &self.db
    }

    /// Keeps this column family's values out of the value cache from now on (a state whose
    /// reads may return expired entries until compaction drops them: a cached copy would
    /// outlive the drop).
    pub(crate) fn keep_out_of_value_cache(&self) {
        self.db.front.write().values.keep_out(self.slot);
    }

    /// Installs the TTL compaction filter for this column family (used from the next
    /// compaction on) and sets RocksDB's periodic compaction so every file is filtered at
    /// least every `periodic_secs` seconds (0 = off).
    pub(crate) fn set_ttl_filter(&self, filter: TtlFilter, periodic_secs: u64) -> Result<()> {
        self.db
            .filters
            .write()
            .insert(self.name.to_string(), Arc::new(filter));
        let secs = periodic_secs.to_string();
        self.db.db.set_options_cf(
            &self.handle,
            &[("periodic_compaction_seconds", secs.as_str())],
        )?;
        Ok(())
    }
}

/// Rescale support (docs/rescale.md): range deletion, file-level clipping, range compaction and
/// SST ingestion of one column family.
impl Cf {
    /// Drops the SST files that lie entirely inside `[from, to)` (they are then no longer part
    /// of the database); keys in other files stay. RocksDB selects those files with `to`
    /// *inclusive*: callers pass a key-group prefix, which no stored key equals (stored keys
    /// are longer than their prefix).
    pub(crate) fn drop_files_in_range(&self, from: &[u8], to: &[u8]) -> Result<()> {
        if from >= to {
            return Ok(());
        }
        self.drop_files(&mut self.db.front.write(), from, to)
    }

    /// [`Cf::drop_files_in_range`] for a caller that holds `front` (and may go on changing
    /// RocksDB under it).
    fn drop_files(&self, front: &mut Front, from: &[u8], to: &[u8]) -> Result<()> {
        self.changing_rocksdb(front)?;
        self.db.db.delete_file_in_range_cf(&self.handle, from, to)?;
        Ok(())
    }

    /// Readies the front for a change of RocksDB's data other than a write (dropped files,
    /// range deletion, ingestion), made while the caller keeps holding `front`: drains the
    /// write cache (so the change is newer than every cached write) and empties the value
    /// cache. With the lock held across the change, a read that looked before it cannot
    /// record what it found (the emptying moved the epoch), and none looks during it.
    fn changing_rocksdb(&self, front: &mut Front) -> Result<()> {
        self.db.write_cached(front)?;
        front.values.clear();
        Ok(())
    }

    /// Deletes every key in `[from, to)` with a range tombstone; first drops the SST files that
    /// lie entirely inside the range ([`Cf::drop_files_in_range`]).
    pub(crate) fn delete_range(&self, from: &[u8], to: &[u8]) -> Result<()> {
        if from >= to {
            return Ok(());
        }
        // One hold of the lock across both changes: no read records a value in between.
        let mut front = self.db.front.write();
        self.drop_files(&mut front, from, to)?;
        self.db
            .db
            .delete_range_cf_opt(&self.handle, from, to, &self.db.write.0)?;
        Ok(())
    }

    /// Compacts `[from, to)` down to the bottom level, so range tombstones and the entries they
    /// cover are dropped from disk.
    pub(crate) fn compact_range(&self, from: &[u8], to: &[u8]) -> Result<()> {
        if from >= to {
            return Ok(());
        }
        self.drain()?;
        let mut opts = rocksdb::CompactOptions::default();
        opts.set_bottommost_level_compaction(rocksdb::BottommostLevelCompaction::ForceOptimized);
        self.db
            .db
            .compact_range_cf_opt(&self.handle, Some(from), Some(to), &opts);
        Ok(())
    }

    /// Ingests SST files written by [`Db::write_sst`] into this column family, moving them
    /// (hard link) into the database directory. Their entries get sequence numbers above
    /// everything already in the database, so they win over earlier range tombstones.
    pub(crate) fn ingest(&self, files: &[PathBuf]) -> Result<()> {
        if files.is_empty() {
            return Ok(());
        }
        let mut opts = rocksdb::IngestExternalFileOptions::default();
        opts.set_move_files(true);
        let mut front = self.db.front.write();
        self.changing_rocksdb(&mut front)?;
        // Keys enter around the puts: every bound of the column family is unknown from
        // before RocksDB takes the files until a read asks RocksDB after it has them.
        if let Some(b) = &mut front.bounds {
            b.begin_ingest(self.slot);
        }
        let ingested = self
            .db
            .db
            .ingest_external_file_cf_opts(&self.handle, &opts, files.to_vec());
        if let Some(b) = &mut front.bounds {
            b.end_ingest(self.slot);
        }
        ingested?;
        Ok(())
    }
}

/// One live SST file of a column family ([`Cf::live_files`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LiveSst {
    /// The file's path.
    pub(crate) path: PathBuf,
    /// Its LSM level.
    pub(crate) level: i32,
    /// Smallest user key, range tombstone starts included.
    pub(crate) smallest: Vec<u8>,
    /// Largest user key, range tombstone ends (exclusive bounds) included.
    pub(crate) largest: Vec<u8>,
}

impl Cf {
    /// The live SST files of this column family, in the order [`ingest_db_generated`] must
    /// get them: the deepest level first, L0 oldest first. For any key in several of them the
    /// older version then comes first, as RocksDB requires (options.h,
    /// `allow_db_generated_files`). A file without key bounds is an error.
    pub(crate) fn live_files(&self) -> Result<Vec<LiveSst>> {
        self.drain()?;
        let mut out = Vec::new();
        for f in self.db.db.live_files()? {
            if f.column_family_name != *self.name {
                continue;
            }
            let (Some(smallest), Some(largest)) = (f.start_key, f.end_key) else {
                return Err(Error::Internal(format!(
                    "live file {} has no key range",
                    f.name
                )));
            };
            // `name` is relative to the database directory, with a leading '/'.
            out.push(LiveSst {
                path: self.db.path.join(f.name.trim_start_matches('/')),
                level: f.level,
                smallest,
                largest,
            });
        }
        // RocksDB lists levels top-down and L0 newest first: reversing the whole list gives the
        // deepest level first and L0 oldest first. The stable sort only guards the level order.
        out.reverse();
        out.sort_by_key(|f| std::cmp::Reverse(f.level));
        Ok(out)
    }

    /// Whether this column family's memtables (active and immutable) hold no entries, so its
    /// live SST files hold all of its data.
    pub(crate) fn memtables_empty(&self) -> Result<bool> {
        for prop in [
            "rocksdb.num-entries-active-mem-table",
            "rocksdb.num-entries-imm-mem-tables",
        ] {
            if self.property_u64(prop)?.unwrap_or(1) > 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// SST files written by another database, for one column family of [`ingest_db_generated`].
#[derive(Debug, Clone)]
pub(crate) struct ForeignFiles {
    /// The column family to ingest into (it must exist).
    pub(crate) cf: String,
    /// The files, in [`Cf::live_files`] order.
    pub(crate) files: Vec<PathBuf>,
}

/// Owns a `rocksdb_ingestexternalfileoptions_t` of the C API.
struct RawIngestOptions(*mut librocksdb_sys::rocksdb_ingestexternalfileoptions_t);

impl Drop for RawIngestOptions {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `rocksdb_ingestexternalfileoptions_create`, is non-null
        // (checked at creation) and is destroyed exactly once, here.
        unsafe { librocksdb_sys::rocksdb_ingestexternalfileoptions_destroy(self.0) }
    }
}

/// Ingests SST files written by *other* databases into the closed database at `path`, keeping
/// their sequence numbers (RocksDB's `allow_db_generated_files`, which rust-rocksdb does not
/// wrap; the C API is called directly). The files are hard-linked (`link_files`): the sources
/// stay intact. Each entry is one ingestion call, atomic on its own; RocksDB refuses one whose
/// files overlap any data already in the column family (that is the caller's fallback case,
/// returned as `Err(reason)` per entry; the database is then unchanged by that entry). The
/// database's last sequence number is raised to the largest ingested one (and persisted in its
/// MANIFEST), so later writes, range tombstones included, are newer than every ingested entry.
///
/// The database is opened single-threaded for this: only that handle type exposes its raw
/// pointer in rust-rocksdb 0.25 (`AsRawPtr`). Nothing else may have it open.
pub(crate) fn ingest_db_generated(
    path: &Path,
    options: &DbOptions,
    budget: &MemoryBudget,
    batches: &[ForeignFiles],
) -> Result<Vec<std::result::Result<(), String>>> {
    use rocksdb::{AsColumnFamilyRef, AsRawPtr};
    options.validate()?;
    let opts = db_options(options, budget)?;
    // No file partitioning: the database is open only for the ingestion, and file cuts
    // change where compaction splits files, never what a read sees.
    let filters = FilterRegistry::default();
    let (_, descriptors) = descriptors(path, &opts, options, budget, &filters, 0)?;
    let db = rocksdb::DB::open_cf_descriptors(&opts, path, descriptors)?;
    // SAFETY: creates a fresh options object; null (allocation failure) is checked below.
    let raw =
        RawIngestOptions(unsafe { librocksdb_sys::rocksdb_ingestexternalfileoptions_create() });
    if raw.0.is_null() {
        return Err(Error::Internal("cannot create ingestion options".into()));
    }
    // SAFETY: `raw.0` is a valid, exclusively owned options object (created above).
    unsafe {
        librocksdb_sys::rocksdb_ingestexternalfileoptions_set_allow_db_generated_files(raw.0, 1);
        librocksdb_sys::rocksdb_ingestexternalfileoptions_set_link_files(raw.0, 1);
        // Both as options.h's setting guide asks for DB-generated files: they cannot get a
        // global sequence number, and must not overlap a memtable (ours are empty).
        librocksdb_sys::rocksdb_ingestexternalfileoptions_set_snapshot_consistency(raw.0, 0);
        librocksdb_sys::rocksdb_ingestexternalfileoptions_set_allow_blocking_flush(raw.0, 0);
    }
    let mut out = Vec::with_capacity(batches.len());
    for batch in batches {
        if batch.files.is_empty() {
            out.push(Ok(()));
            continue;
        }
        let cf = db.cf_handle(&batch.cf).ok_or_else(|| {
            Error::Internal(format!("column family {} missing for ingestion", batch.cf))
        })?;
        let paths = batch
            .files
            .iter()
            .map(|p| {
                p.to_str()
                    .and_then(|s| std::ffi::CString::new(s).ok())
                    .ok_or_else(|| Error::InvalidOption {
                        name: "path",
                        detail: format!("{} is not valid UTF-8 without NUL", p.display()),
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        let ptrs: Vec<*const std::ffi::c_char> = paths.iter().map(|p| p.as_ptr()).collect();
        let mut err: *mut std::ffi::c_char = std::ptr::null_mut();
        // SAFETY: `db` (and so its raw pointer and the column family handle `cf`) lives until
        // the end of this function; `ptrs` points into `paths`, NUL-terminated strings alive
        // across the call, and has `ptrs.len()` entries; `raw.0` is a valid options object;
        // `err` is a valid out-pointer RocksDB sets to a malloc'ed message on failure.
        unsafe {
            librocksdb_sys::rocksdb_ingest_external_file_cf(
                db.as_raw_ptr(),
                cf.inner(),
                ptrs.as_ptr(),
                ptrs.len(),
                raw.0,
                &mut err,
            );
        }
        if err.is_null() {
            out.push(Ok(()));
        } else {
            // SAFETY: non-null `err` is a NUL-terminated C string RocksDB allocated with
            // malloc; it is read once and freed once with `rocksdb_free`.
            let message = unsafe {
                let m = CStr::from_ptr(err).to_string_lossy().into_owned();
                librocksdb_sys::rocksdb_free(err.cast());
                m
            };
            out.push(Err(message));
        }
    }
    Ok(out)
}

/// Receives the sorted entries of one SST file being written by [`Db::write_sst`].
pub(crate) struct SstSink<'a, 'w> {
    writer: &'a mut rocksdb::SstFileWriter<'w>,
    entries: u64,
    tombstones: u64,
}

impl SstSink<'_, '_> {
    /// Appends an entry; keys must be strictly increasing.
    pub(crate) fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.writer.put(key, value)?;
        self.entries += 1;
        Ok(())
    }

    /// Adds a range tombstone for `[from, to)`. Once ingested it deletes what the database
    /// held in that range before, but not the entries of this same file (RocksDB's
    /// `SstFileWriter::DeleteRange` contract: all get one sequence number, and a tombstone
    /// only covers older ones).
    pub(crate) fn delete_range(&mut self, from: &[u8], to: &[u8]) -> Result<()> {
        self.writer.delete_range(from, to)?;
        self.tombstones += 1;
        Ok(())
    }
}

impl Db {
    /// Writes an SST file at `path` with this database's table options, filled by `fill`.
    /// Returns the number of entries (puts) if a file was written; with neither entries nor
    /// tombstones, `None` and no file is left behind (RocksDB refuses to finish an empty SST).
    pub(crate) fn write_sst(
        &self,
        path: &Path,
        fill: impl FnOnce(&mut SstSink<'_, '_>) -> Result<()>,
    ) -> Result<Option<u64>> {
        // One path, so exactly one sink.
        let written = self.write_ssts(&[path], |sinks| match sinks.first_mut() {
            Some(sink) => fill(sink),
            None => Ok(()),
        })?;
        Ok(written.into_iter().next().flatten())
    }

    /// Writes one SST file per path at once, filled by `fill` through one sink per path (in
    /// the same order); returns per path what [`Db::write_sst`] returns. Every writer is open
    /// until `fill` returns: one file descriptor each, and each holds its filter's key hashes
    /// (about 8 bytes per key) until it finishes.
    pub(crate) fn write_ssts(
        &self,
        paths: &[&Path],
        fill: impl FnOnce(&mut [SstSink<'_, '_>]) -> Result<()>,
    ) -> Result<Vec<Option<u64>>> {
        let opts = cf_options(&self.options, &self.budget)?;
        let mut writers = Vec::with_capacity(paths.len());
        for path in paths {
            let writer = rocksdb::SstFileWriter::create(&opts);
            writer.open(path)?;
            writers.push(writer);
        }
        let mut sinks: Vec<SstSink<'_, '_>> = writers
            .iter_mut()
            .map(|writer| SstSink {
                writer,
                entries: 0,
                tombstones: 0,
            })
            .collect();
        fill(&mut sinks)?;
        let counts: Vec<(u64, u64)> = sinks.iter().map(|s| (s.entries, s.tombstones)).collect();
        drop(sinks);
        let mut out = Vec::with_capacity(paths.len());
        for ((mut writer, path), (entries, tombstones)) in
            writers.into_iter().zip(paths).zip(counts)
        {
            if entries == 0 && tombstones == 0 {
                drop(writer);
                let _ = std::fs::remove_file(path);
                out.push(None);
            } else {
                writer.finish()?;
                out.push(Some(entries));
            }
        }
        Ok(out)
    }

    /// The names of every column family of the database.
    pub(crate) fn cf_names(&self) -> Vec<String> {
        self.cf_names.lock().clone()
    }
}

impl Batch {
    /// An empty batch.
    pub(crate) fn new() -> Self {
        Batch(Vec::new())
    }

    /// Adds a put.
    pub(crate) fn put(&mut self, cf: &Cf, key: &[u8], value: &[u8]) {
        self.0.push(BatchOp {
            slot: cf.slot,
            key: Box::from(key),
            value: Some(Box::from(value)),
        });
    }

    /// Adds a delete.
    pub(crate) fn delete(&mut self, cf: &Cf, key: &[u8]) {
        self.0.push(BatchOp {
            slot: cf.slot,
            key: Box::from(key),
            value: None,
        });
    }

    /// Number of operations in the batch.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Write options without a WAL; with `sync`, RocksDB refuses every write ("Sync writes
    /// has to enable WAL"), which makes a drain fail on demand.
    fn write_options(sync: bool) -> SharedWriteOptions {
        let mut w = WriteOptions::default();
        w.disable_wal(true);
        w.set_sync(sync);
        SharedWriteOptions(w)
    }

    #[test]
    fn a_failed_drain_keeps_every_cached_write_and_refuses_the_next() {
        let dir = tempfile::tempdir().unwrap();
        // 64 KiB memtables: the cache holds 8 KiB.
        let options = DbOptions {
            write_buffer_size: 64 << 10,
            ..DbOptions::default()
        };
        let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
        let mut db = Db::open(dir.path(), &options, &budget, None).unwrap();
        Arc::get_mut(&mut db).unwrap().write = write_options(true);
        let cf = db.default_cf().unwrap();
        let value = vec![7u8; 1000];
        let mut n = 0u32;
        // Cached only: nothing has reached RocksDB, so nothing fails yet.
        while !db.front.read().cache.is_full() {
            cf.put(&n.to_be_bytes(), &value).unwrap();
            n += 1;
        }
        let read = |cf: &Cf, k: &[u8]| cf.get_with(k, |v| v.to_vec()).unwrap();
        // The next write drains first; the drain fails, so this write is refused...
        assert!(matches!(cf.put(b"late", b"x"), Err(Error::RocksDb { .. })));
        assert!(matches!(
            cf.delete(&0u32.to_be_bytes()),
            Err(Error::RocksDb { .. })
        ));
        assert_eq!(read(&cf, b"late"), None);
        // ...every cached write is still there, and so is the failure.
        for i in 0..n {
            assert_eq!(read(&cf, &i.to_be_bytes()), Some(value.clone()));
        }
        assert!(cf.scan(b"", None, |_, _| Ok(true)).is_err());
        assert!(db.drain().is_err());
        // Once RocksDB takes writes again, a drain writes them all.
        drop(cf);
        Arc::get_mut(&mut db).unwrap().write = write_options(false);
        db.drain().unwrap();
        assert!(db.front.read().cache.is_empty());
        let cf = db.default_cf().unwrap();
        let mut scanned = 0u32;
        cf.scan(b"", None, |k, v| {
            assert_eq!(k, scanned.to_be_bytes());
            assert_eq!(v, &value[..]);
            scanned += 1;
            Ok(true)
        })
        .unwrap();
        assert_eq!(scanned, n);
    }

    /// A backend-like layout: 128 key groups, one-byte prefixes.
    fn layout() -> Option<KeyLayout> {
        Some(KeyLayout::new(128, KeyGroupRange::all(128).unwrap()))
    }

    fn open_bounded(dir: &Path, write_cache_bytes: usize) -> Arc<Db> {
        let options = DbOptions {
            write_cache_bytes,
            ..DbOptions::default()
        };
        let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
        Db::open(dir, &options, &budget, layout()).unwrap()
    }

    /// A database at `dir` whose state `s` holds `puts`, closed and opened again: every bound
    /// is unknown, and only RocksDB knows the keys.
    fn reopened_with(dir: &Path, puts: &[(&[u8], &[u8])]) -> (Arc<Db>, Cf) {
        {
            let db = open_bounded(dir, 2 << 20);
            let cf = db.create_cf("s").unwrap();
            for (k, v) in puts {
                cf.put(k, v).unwrap();
            }
        }
        let db = open_bounded(dir, 2 << 20);
        let cf = db.cf("s").unwrap();
        (db, cf)
    }

    fn read(cf: &Cf, key: &[u8]) -> Option<Vec<u8>> {
        cf.get_with(key, |v| v.to_vec()).unwrap()
    }

    /// Whether the bound of `key`'s group rules `key` out (a read would not ask RocksDB).
    fn ruled_out(cf: &Cf, key: &[u8]) -> bool {
        cf.db.front.read().check(cf.slot, key) == Check::Absent
    }

    #[test]
    fn every_put_raises_its_groups_bound_with_the_cache_on_and_off() {
        for cache in [0, 2 << 20] {
            let dir = tempfile::tempdir().unwrap();
            let db = open_bounded(dir.path(), cache);
            let cf = db.create_cf("s").unwrap();
            // A read learns that group 7 is empty: every key of it is ruled out.
            assert_eq!(read(&cf, b"\x07a"), None);
            assert!(ruled_out(&cf, b"\x07a"));
            cf.put(b"\x07m", b"1").unwrap();
            let mut batch = Batch::new();
            batch.put(&cf, b"\x07z", b"2");
            batch.delete(&cf, b"\x07zz");
            db.write(batch).unwrap();
            // Found in the cache or (cache off) in RocksDB above the old bound.
            assert_eq!(read(&cf, b"\x07m"), Some(b"1".to_vec()), "cache {cache}");
            assert_eq!(read(&cf, b"\x07z"), Some(b"2".to_vec()), "cache {cache}");
            // After the drain only RocksDB has them: the drain raised the bound.
            db.drain().unwrap();
            assert_eq!(read(&cf, b"\x07m"), Some(b"1".to_vec()), "cache {cache}");
            assert_eq!(read(&cf, b"\x07z"), Some(b"2".to_vec()), "cache {cache}");
            assert!(!ruled_out(&cf, b"\x07y"));
            // A delete does not raise it.
            assert!(ruled_out(&cf, b"\x07zz"));
        }
    }

    #[test]
    fn a_drain_raises_each_groups_bound_to_its_largest_put() {
        let dir = tempfile::tempdir().unwrap();
        let db = open_bounded(dir.path(), 2 << 20);
        let (a, b) = (db.create_cf("a").unwrap(), db.create_cf("b").unwrap());
        for (cf, key) in [(&a, b"\x01"), (&a, b"\x02"), (&b, b"\x01")] {
            assert_eq!(read(cf, key), None);
            assert!(ruled_out(cf, key));
        }
        // Runs by slot, then group, each ending in a different way.
        a.put(b"\x01a", b"1").unwrap();
        a.put(b"\x01c", b"2").unwrap();
        a.delete(b"\x01d").unwrap();
        a.put(b"\x02b", b"3").unwrap();
        b.put(b"\x01z", b"4").unwrap();
        db.drain().unwrap();
        assert_eq!(read(&a, b"\x01a"), Some(b"1".to_vec()));
        assert_eq!(read(&a, b"\x01c"), Some(b"2".to_vec()));
        assert_eq!(read(&a, b"\x02b"), Some(b"3".to_vec()));
        assert_eq!(read(&b, b"\x01z"), Some(b"4".to_vec()));
        assert!(ruled_out(&a, b"\x01d"));
        assert!(ruled_out(&a, b"\x02c"));
        assert!(!ruled_out(&b, b"\x01y"));
    }

    #[test]
    fn bounds_are_learned_from_rocksdb_after_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let (_db, cf) = reopened_with(dir.path(), &[(b"\x03k", b"1"), (b"\x04k", b"2")]);
        assert!(!ruled_out(&cf, b"\x03k"));
        assert_eq!(read(&cf, b"\x03k"), Some(b"1".to_vec()));
        assert_eq!(read(&cf, b"\x03l"), None);
        assert!(ruled_out(&cf, b"\x03l"));
        assert!(!ruled_out(&cf, b"\x03k"));
        assert_eq!(read(&cf, b"\x04k"), Some(b"2".to_vec()));
    }

    #[test]
    fn a_put_cached_while_its_bound_is_learned_is_found_before_and_after_the_drain() {
        let dir = tempfile::tempdir().unwrap();
        let (db, cf) = reopened_with(dir.path(), &[(b"\x05k", b"1")]);
        // Put while the bound is unknown, still cached when RocksDB is asked (it knows `k`).
        cf.put(b"\x05x", b"2").unwrap();
        assert_eq!(read(&cf, b"\x05a"), None);
        assert!(!db.front.read().cache.is_empty());
        assert!(
            ruled_out(&cf, b"\x05x"),
            "the bound covers RocksDB's keys only"
        );
        assert_eq!(read(&cf, b"\x05x"), Some(b"2".to_vec()));
        db.drain().unwrap();
        assert_eq!(read(&cf, b"\x05x"), Some(b"2".to_vec()));
        assert!(ruled_out(&cf, b"\x05y"));
    }

    /// Whether `key`'s value is in the value cache (a read would not ask RocksDB).
    fn value_cached(cf: &Cf, key: &[u8]) -> Option<Vec<u8>> {
        cf.db
            .front
            .read()
            .values
            .get(cf.db.front.read().values.hash(cf.slot, key), cf.slot, key)
            .map(<[u8]>::to_vec)
    }

    #[test]
    fn writes_and_reads_fill_the_value_cache_and_keep_it_true() {
        for (cache, wal) in [(2 << 20, false), (0, false), (0, true)] {
            let dir = tempfile::tempdir().unwrap();
            let options = DbOptions {
                write_cache_bytes: cache,
                wal,
                value_cache_bytes: 1 << 20,
                ..DbOptions::default()
            };
            let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
            let db = Db::open(dir.path(), &options, &budget, layout()).unwrap();
            let cf = db.create_cf("s").unwrap();
            let case = format!("cache {cache}, wal {wal}");
            cf.put(b"\x05a", b"1").unwrap();
            cf.put(b"\x05b", b"2").unwrap();
            if cache > 0 {
                assert_eq!(
                    value_cached(&cf, b"\x05a"),
                    None,
                    "{case}: a cached write reaches the value cache with its drain"
                );
            }
            db.drain().unwrap();
            assert_eq!(
                value_cached(&cf, b"\x05a"),
                Some(b"1".to_vec()),
                "{case}: writes add their keys"
            );
            db.front.write().values.clear();
            assert_eq!(read(&cf, b"\x05a"), Some(b"1".to_vec()));
            assert_eq!(
                value_cached(&cf, b"\x05a"),
                Some(b"1".to_vec()),
                "{case}: reads add their keys"
            );
            // A put of a cached key: the value cache follows once RocksDB has it.
            cf.put(b"\x05a", b"3").unwrap();
            assert_eq!(read(&cf, b"\x05a"), Some(b"3".to_vec()), "{case}");
            db.drain().unwrap();
            assert_eq!(value_cached(&cf, b"\x05a"), Some(b"3".to_vec()), "{case}");
            assert_eq!(read(&cf, b"\x05a"), Some(b"3".to_vec()), "{case}");
            // A batch, then a delete.
            assert_eq!(read(&cf, b"\x05b"), Some(b"2".to_vec()));
            let mut batch = Batch::new();
            batch.put(&cf, b"\x05b", b"longer");
            batch.put(&cf, b"\x05c", b"4");
            db.write(batch).unwrap();
            db.drain().unwrap();
            assert_eq!(
                value_cached(&cf, b"\x05b"),
                Some(b"longer".to_vec()),
                "{case}"
            );
            assert_eq!(value_cached(&cf, b"\x05c"), Some(b"4".to_vec()), "{case}");
            cf.delete(b"\x05a").unwrap();
            assert_eq!(read(&cf, b"\x05a"), None, "{case}");
            db.drain().unwrap();
            assert_eq!(value_cached(&cf, b"\x05a"), None, "{case}");
            assert_eq!(read(&cf, b"\x05a"), None, "{case}");
        }
    }

    #[test]
    fn range_deletion_dropped_files_and_ingestion_empty_the_value_cache() {
        let dir = tempfile::tempdir().unwrap();
        // Files cut per key group, so each group's keys can be dropped as a whole file.
        let options = DbOptions {
            key_group_files: true,
            value_cache_bytes: 1 << 20,
            ..DbOptions::default()
        };
        let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
        let db = Db::open(&dir.path().join("db"), &options, &budget, layout()).unwrap();
        let cf = db.create_cf("s").unwrap();
        let keys: [&[u8]; 3] = [b"\x03a", b"\x04a", b"\x05a"];
        for k in keys {
            cf.put(k, b"old").unwrap();
        }
        cf.compact_all().unwrap();
        let read_all = |cf: &Cf| {
            for k in keys {
                if read(cf, k).is_some() {
                    assert!(value_cached(cf, k).is_some());
                }
            }
        };
        read_all(&cf);
        let sst = dir.path().join("in.sst");
        db.write_sst(&sst, |sink| sink.put(b"\x05a", b"new"))
            .unwrap();
        cf.ingest(&[sst]).unwrap();
        assert_eq!(read(&cf, b"\x05a"), Some(b"new".to_vec()));
        read_all(&cf);
        cf.delete_range(b"\x04", b"\x05").unwrap();
        assert_eq!(read(&cf, b"\x04a"), None);
        read_all(&cf);
        assert_eq!(value_cached(&cf, b"\x03a"), Some(b"old".to_vec()));
        cf.drop_files_in_range(b"\x03", b"\x04").unwrap();
        assert_eq!(read(&cf, b"\x03a"), None, "its file was dropped");
        assert_eq!(read(&cf, b"\x05a"), Some(b"new".to_vec()));
    }

    #[test]
    fn ingested_keys_above_a_known_bound_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let db = open_bounded(&dir.path().join("db"), 2 << 20);
        let cf = db.create_cf("s").unwrap();
        cf.put(b"\x09a", b"1").unwrap();
        assert_eq!(read(&cf, b"\x09b"), None);
        assert!(ruled_out(&cf, b"\x09b"));
        let sst = dir.path().join("in.sst");
        db.write_sst(&sst, |sink| {
            sink.put(b"\x09b", b"2")?;
            sink.put(b"\x0ab", b"3")
        })
        .unwrap();
        cf.ingest(&[sst]).unwrap();
        assert_eq!(read(&cf, b"\x09b"), Some(b"2".to_vec()));
        assert_eq!(read(&cf, b"\x0ab"), Some(b"3".to_vec()));
        assert_eq!(read(&cf, b"\x09a"), Some(b"1".to_vec()));
        assert!(ruled_out(&cf, b"\x09c"));
    }

    #[test]
    fn without_a_layout_or_with_the_option_off_nothing_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
        let off = DbOptions {
            key_bounds: false,
            ..DbOptions::default()
        };
        let a = Db::open(&dir.path().join("a"), &off, &budget, layout()).unwrap();
        let b = Db::open(&dir.path().join("b"), &DbOptions::default(), &budget, None).unwrap();
        for db in [a, b] {
            assert!(!db.bounded);
            assert!(db.front.read().bounds.is_none());
        }
    }
}

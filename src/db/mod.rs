//! The database layer, the one part of the crate that names `rocksdb::` types: opening a
//! database with rockstate's options, column families, point reads and writes through the
//! front, bounded scans, write batches, flushes, compaction, RocksDB checkpoints, file-level
//! surgery and SST writing. Everything above it works with plain byte slices and [`Cf`].
//!
//! | module | owns |
//! |---|---|
//! | `baseline` | [`RawRocksDb`], raw RocksDB for benchmarks to compare against |
//! | `block_sizes` | each column family's data block size, chosen from the entries its files or its first puts carry |
//! | `budget` | [`MemoryBudget`] and the shares of it granted to open databases |
//! | `options` | RocksDB options built from [`DbOptions`] |
//! | `compaction_filter` | the compaction filter: TTL expiry, dead list entries |
//! | `front` | the open RocksDB handle and the write cache, value cache and key bounds in front of it; every read of RocksDB's data goes through its drain |
//! | `maintenance` | reads of whole column families and databases: scans, properties, flushes, compaction, metrics, RocksDB checkpoints |
//! | `scan_iters` | the iterators kept between bounded scans of one column family |
//! | `files` | file-level changes: dropping files, range deletion, ingestion, live files, ingestion of other databases' files |
//! | `sst_writer` | writing SST files with the database's table options, at the block size their entries call for |
//! | `page_cache` | reading the files a restore wrote back into the page cache, where they fit in memory |

mod baseline;
mod block_sizes;
mod budget;
mod compaction_filter;
mod files;
mod front;
mod l0_triggers;
mod maintenance;
mod options;
mod page_cache;
mod quiet;
mod raw;
mod scan_iters;
mod sst_writer;

#[cfg(test)]
mod scan_iters_tests;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{MappedRwLockReadGuard, RwLock, RwLockReadGuard};

pub use baseline::RawRocksDb;
pub use budget::MemoryBudget;

/// The name of RocksDB's default column family, which holds the backend's own metadata.
pub(crate) const DEFAULT_CF_NAME: &str = rocksdb::DEFAULT_COLUMN_FAMILY_NAME;
pub(crate) use compaction_filter::{CfFilter, TtlFilter};
pub(crate) use files::{FileSurgery, ForeignFiles, LiveSst};
pub(crate) use maintenance::BulkCursor;
pub use options::lower_compaction_priority;
pub(crate) use page_cache::ToWarm;
pub(crate) use sst_writer::{write_ssts, BlockSizing};

use compaction_filter::FilterRegistry;
use front::{FrontSettings, Open};

/// The RocksDB handle type rockstate uses.
type Rocks = rocksdb::DBWithThreadMode<rocksdb::MultiThreaded>;

/// A column-family handle whose lifetime is erased; it lives inside the [`Open`] that owns its
/// database and is dropped before it (`Open::handles`).
type Handle = Arc<rocksdb::BoundColumnFamily<'static>>;

use crate::change_log::{ChangeLog, LogCut};
use crate::error::{Error, ErrorKind, Result};
use crate::keygroup::{self, KeyGroupRange};
use crate::options::DbOptions;

/// Entries between restart points in the data blocks of a state read by iterator seeks
/// ([`Cf::tune_for_scans`]); RocksDB's default, which every other column family keeps, is
/// 16.
const SCAN_RESTART_INTERVAL: u32 = 2;

/// RocksDB's error as rockstate's, its status code mapped to a kind.
pub(crate) fn rocks_error(e: rocksdb::Error) -> Error {
    Error::RocksDb {
        kind: error_kind(e.kind()),
        detail: e.into_string(),
    }
}

/// Rockstate's kind of a RocksDB status code.
fn error_kind(code: rocksdb::ErrorKind) -> ErrorKind {
    use rocksdb::ErrorKind as R;
    match code {
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
    }
}

/// A RocksDB database, open until [`Db::close`] (or its last holder's drop).
pub(crate) struct Db {
    /// The open database; `None` once closed. Every operation holds a read lock across its
    /// use of RocksDB (taken recursively, so callbacks may call back in); `close` takes the
    /// write lock, so it waits for operations in flight and none starts on a closed database.
    open: RwLock<Option<Open>>,
    /// Set while `close` waits for the write lock: new calls answer `Closed` at once instead
    /// of taking the lock shared (`read_recursive` lets readers past a waiting writer, so a
    /// steady stream of calls would keep `close` waiting for ever).
    closing: std::sync::atomic::AtomicBool,
    filters: FilterRegistry,
    options: DbOptions,
    budget: MemoryBudget,
    /// Key bytes at which compaction cuts files of state column families (0: none).
    partition_prefix: usize,
    path: PathBuf,
    /// Reads the files restores wrote into the page cache; stopped by `close` and on drop.
    warmer: page_cache::Warmer,
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

/// A column family of a database; keeps the database (not RocksDB) alive. Once the database
/// is closed, every call returns [`Error::Closed`].
#[derive(Clone)]
pub(crate) struct Cf {
    db: Arc<Db>,
    name: Arc<str>,
    /// Position of the column family among the database's: its slot in the write cache.
    slot: usize,
}

/// A batch of writes applied atomically by [`Db::write`].
pub(crate) struct Batch(Vec<BatchOp>);

/// One write of a [`Batch`].
pub(crate) struct BatchOp {
    /// The column family's slot ([`Cf`]).
    slot: usize,
    key: Box<[u8]>,
    /// `None`: a delete.
    value: Option<Box<[u8]>>,
}

/// How [`Db::open_with`] opens a database.
struct Opening {
    /// RocksDB read-only.
    read_only: bool,
    /// RocksDB's `paranoid_checks` (off: table files may be missing).
    paranoid_checks: bool,
    /// A restore's bound on a column family's level-0 files ([`Db::open_restored`]).
    level0: Option<u64>,
    /// Automatic compactions off until [`Db::after_restore`].
    compactions_off: bool,
}

impl Default for Opening {
    fn default() -> Self {
        Opening {
            read_only: false,
            paranoid_checks: true,
            level0: None,
            compactions_off: false,
        }
    }
}

impl Opening {
    /// A database a restore ingests into, with `level0` as in [`Db::open_restored`].
    fn for_restore(level0: Option<u64>) -> Self {
        Opening {
            level0,
            compactions_off: true,
            ..Opening::default()
        }
    }
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
        Self::open_with(path, options, budget, layout, Opening::default())
    }

    /// [`Db::open`] of a database a restore ingests files into: automatic compactions are
    /// off on every column family until [`Db::after_restore`] turns them on, so no
    /// ingestion of the restore has to turn them off and on ([`quiet`]).
    pub(crate) fn open_for_restore(
        path: &Path,
        options: &DbOptions,
        budget: &MemoryBudget,
        layout: Option<KeyLayout>,
    ) -> Result<Arc<Db>> {
        Self::open_with(path, options, budget, layout, Opening::for_restore(None))
    }

    /// [`Db::open`] of a restored database that will hold up to `level0` files in a column
    /// family's level 0 once the restore has placed its files: every column family opens
    /// with its stall triggers raised above them (`l0_triggers`), so the restore's files do
    /// not slow its first writes down, and they are set back once compaction has taken
    /// level 0 below the slowdown count, without an options change during the restore.
    /// Automatic compactions are off until [`Db::after_restore`], as with
    /// [`Db::open_for_restore`].
    pub(crate) fn open_restored(
        path: &Path,
        options: &DbOptions,
        budget: &MemoryBudget,
        layout: Option<KeyLayout>,
        level0: u64,
    ) -> Result<Arc<Db>> {
        Self::open_with(
            path,
            options,
            budget,
            layout,
            Opening::for_restore(Some(level0)),
        )
    }

    /// [`Db::open`] of a restored checkpoint some of whose SST files were deliberately not
    /// downloaded (`crate::rescale`): RocksDB's `paranoid_checks` off, so opening tolerates
    /// table files that are missing. The caller must drop those files from the database
    /// (`Cf::drop_files_in_range`) before anything reads them, and reopen with [`Db::open`]
    /// or [`Db::open_for_restore`]. Automatic compactions stay off while it is open.
    pub(crate) fn open_missing_files(
        path: &Path,
        options: &DbOptions,
        budget: &MemoryBudget,
        layout: Option<KeyLayout>,
    ) -> Result<Arc<Db>> {
        Self::open_with(
            path,
            options,
            budget,
            layout,
            Opening {
                paranoid_checks: false,
                ..Opening::for_restore(None)
            },
        )
    }

    /// Opens the existing database at `path` read-only: nothing is written, no compaction
    /// runs, so its live files stay as they are while it is open (rescale sources). With
    /// `missing_files`, RocksDB's `paranoid_checks` are off, so opening tolerates table files
    /// deliberately not downloaded; the caller must never read a key range one of them covers.
    pub(crate) fn open_read_only(
        path: &Path,
        options: &DbOptions,
        budget: &MemoryBudget,
        missing_files: bool,
    ) -> Result<Arc<Db>> {
        Self::open_with(
            path,
            options,
            budget,
            None,
            Opening {
                read_only: true,
                paranoid_checks: !missing_files,
                ..Opening::default()
            },
        )
    }

    fn open_with(
        path: &Path,
        options: &DbOptions,
        budget: &MemoryBudget,
        layout: Option<KeyLayout>,
        opening: Opening,
    ) -> Result<Arc<Db>> {
        let Opening {
            read_only,
            paranoid_checks,
            level0,
            compactions_off,
        } = opening;
        options.validate()?;
        let base = l0_triggers::Base::new(options.level0_file_num_compaction_trigger);
        let opened_with = level0.map_or(base, |n| base.for_level0(n));
        let partition_prefix = layout.map_or(0, |l| l.file_prefix);
        let mut opts = options::db_options(options, budget)?;
        if !paranoid_checks {
            opts.set_paranoid_checks(false);
        }
        let filters = FilterRegistry::default();
        let (existing, descriptors, blooms) = options::descriptors(
            path,
            &opts,
            options,
            budget,
            &filters,
            partition_prefix,
            opened_with,
            !read_only,
            compactions_off,
        )?;
        let rocks = if read_only {
            Rocks::open_cf_descriptors_read_only(&opts, path, descriptors, false)
                .map_err(rocks_error)?
        } else {
            Rocks::open_cf_descriptors(&opts, path, descriptors).map_err(rocks_error)?
        };
        let settings = FrontSettings {
            disable_wal: !options.wal,
            level0_triggers: base,
            level0_opened_with: opened_with,
            // A batch larger than a memtable would overfill it: at most an eighth of one.
            write_cache_bytes: if options.wal || read_only {
                0
            } else {
                options.write_cache_bytes.min(options.write_buffer_size / 8)
            },
            value_cache_bytes: if read_only {
                0
            } else {
                options.value_cache_bytes
            },
            value_cache_admission: options.value_cache_admission,
            value_cache_writes: options.value_cache_writes,
            bounds_prefix: layout
                .filter(|_| options.key_bounds && !read_only)
                .map(|l| l.group_prefix),
            scan_sweep_bytes: options.write_buffer_size / 8,
            read_only,
            compactions_off,
            large_entry_block_size: block_sizes::large_entry_block_size(options)
                .filter(|_| !read_only),
            block_size: options.block_size,
        };
        let open = Open::new(rocks, existing, blooms, budget, settings, path)?;
        Ok(Arc::new(Db {
            open: RwLock::new(Some(open)),
            closing: std::sync::atomic::AtomicBool::new(false),
            filters,
            options: options.clone(),
            budget: budget.clone(),
            partition_prefix,
            path: path.to_path_buf(),
            warmer: page_cache::Warmer::default(),
        }))
    }

    /// The open database, held open until the guard is dropped; [`Error::Closed`] once
    /// [`Db::close`] ran.
    #[inline]
    fn opened(&self) -> Result<MappedRwLockReadGuard<'_, Open>> {
        if self.closing.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Error::Closed {
                path: self.path.clone(),
            });
        }
        RwLockReadGuard::try_map(self.open.read_recursive(), Option::as_ref).map_err(|_| {
            Error::Closed {
                path: self.path.clone(),
            }
        })
    }

    /// Drains the write cache, flushes every memtable and closes RocksDB, releasing its
    /// directory lock and the database's shares of the memory budget: the path can be opened
    /// again at once. Waits for operations in flight; every later call on this database or
    /// its column families returns [`Error::Closed`]. Closing a closed database does nothing.
    /// On an error the database stays open (the caller may retry; dropping it tries once
    /// more).
    pub(crate) fn close(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        self.closing.store(true, Ordering::Release);
        self.warmer.stop();
        let mut open = self.open.write();
        if let Some(o) = open.as_ref() {
            if let Err(e) = o.drain_and_flush() {
                self.closing.store(false, Ordering::Release);
                return Err(e);
            }
        }
        // Dropping the `Open` closes RocksDB.
        *open = None;
        Ok(())
    }

    /// Reads `files` a restore wrote with [`write_ssts`] (opened by
    /// [`Db::open_for_warming`] before an ingestion moved them) into the page cache on a
    /// thread of its own, where they fit in memory ([`page_cache`]); the job's reads do not
    /// wait for it. Returns the bytes it warms.
    pub(crate) fn warm_restored(&self, files: ToWarm) -> u64 {
        self.warmer.warm(files, None)
    }

    /// `paths` of files [`write_ssts`] wrote, open for [`Db::warm_restored`] (none where
    /// `DbOptions::warm_restored_files` is off); a file that cannot be opened is left out
    /// (its ingestion will report it).
    pub(crate) fn open_for_warming<'p>(
        &self,
        paths: impl IntoIterator<Item = &'p PathBuf>,
    ) -> ToWarm {
        if !self.options.warm_restored_files {
            return ToWarm::default();
        }
        ToWarm::open(paths)
    }

    /// Waits until the files handed to [`Db::warm_restored`] so far have been read.
    pub(crate) fn wait_for_warming(&self) {
        self.warmer.wait();
    }

    /// Bytes of restored files read into the page cache since the database opened.
    pub(crate) fn warmed_bytes(&self) -> u64 {
        self.warmer.warmed()
    }

    /// The directory of the database.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The options the database was opened with.
    pub(crate) fn options(&self) -> &DbOptions {
        &self.options
    }

    /// The memory budget the database draws on.
    pub(crate) fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// The column family `name`, if it exists (`Ok(None)`), on an open database.
    pub(crate) fn cf(self: &Arc<Self>, name: &str) -> Result<Option<Cf>> {
        let slot = self.opened()?.slot(name);
        Ok(slot.map(|slot| Cf {
            db: Arc::clone(self),
            name: name.into(),
            slot,
        }))
    }

    /// The column family `name`, created with rockstate's options when missing.
    pub(crate) fn create_cf(self: &Arc<Self>, name: &str) -> Result<Cf> {
        let open = self.opened()?;
        let mut grant = None;
        let slot = open.create_cf(name, || {
            grant = self
                .budget
                .grant_bloom(options::memtable_bloom_bytes(&self.options));
            options::state_cf_options(
                &self.options,
                &self.budget,
                name,
                &self.filters,
                self.partition_prefix,
                grant.is_some(),
            )
        })?;
        // Kept while the database is open (given back when it closes); a creation that
        // failed gave it back already.
        if let Some(grant) = grant {
            open.keep_bloom(grant);
        }
        drop(open);
        Ok(Cf {
            db: Arc::clone(self),
            name: name.into(),
            slot,
        })
    }

    /// The default column family (rockstate keeps its metadata there).
    pub(crate) fn default_cf(self: &Arc<Self>) -> Result<Cf> {
        self.cf(rocksdb::DEFAULT_COLUMN_FAMILY_NAME)?
            .ok_or_else(|| Error::Internal("default column family missing".into()))
    }

    /// The names of every column family of the database.
    pub(crate) fn cf_names(&self) -> Result<Vec<String>> {
        Ok(self.opened()?.names())
    }

    /// Applies a batch atomically: readers see all of it or none of it.
    pub(crate) fn write(&self, batch: Batch) -> Result<()> {
        self.opened()?.write(&batch.0)
    }

    /// Writes every cached write to RocksDB (see [`crate::write_cache`]).
    #[cfg(test)]
    pub(crate) fn drain(&self) -> Result<()> {
        self.opened()?.drain()
    }

    /// Changelog mode: records every change RocksDB takes from now on (see
    /// [`crate::change_log`]), numbered from `first_seq`; keys of every column family but
    /// `default` start with the key-group prefix of `max_parallelism`; at most `max_bytes`
    /// are held between two cuts.
    pub(crate) fn start_changelog(
        &self,
        first_seq: u64,
        max_parallelism: u32,
        max_bytes: usize,
    ) -> Result<()> {
        let open = self.opened()?;
        let unkeyed = open.slot(DEFAULT_CF_NAME);
        open.start_log(ChangeLog::new(
            first_seq,
            unkeyed,
            max_parallelism,
            max_bytes,
        ))
    }

    /// Cuts the changelog (see [`ChangeLog::cut`]) after draining the write cache into
    /// RocksDB; `None` unless [`Db::start_changelog`] ran.
    pub(crate) fn cut_changelog(&self) -> Result<Option<LogCut>> {
        self.opened()?.cut_log()
    }
}

impl Cf {
    /// Calls `f` with the stored value of `key`, without copying it out of RocksDB (see
    /// [`front`]'s point read: the write cache, the key bound and the value cache first).
    #[inline]
    pub(crate) fn get_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        self.db.opened()?.get_with(self.slot, key, f)
    }

    /// Stores `value` under `key`.
    #[inline]
    pub(crate) fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.db.opened()?.put(self.slot, key, value)
    }

    /// Stores the value `head` followed by `tail` under `key`, without joining them first
    /// when the write cache is on.
    #[inline]
    pub(crate) fn put_parts(&self, key: &[u8], head: &[u8], tail: &[u8]) -> Result<()> {
        self.db.opened()?.put_parts(self.slot, key, head, tail)
    }

    /// Deletes `key`.
    pub(crate) fn delete(&self, key: &[u8]) -> Result<()> {
        self.db.opened()?.delete(self.slot, key)
    }

    /// In changelog mode, records that every key in `[start, end)` is deleted as of now
    /// (`ChangeLog::record_range`), without changing RocksDB; otherwise nothing.
    pub(crate) fn log_range_deletion(&self, start: &[u8], end: &[u8]) -> Result<()> {
        self.db.opened()?.log_range_deletion(self.slot, start, end)
    }

    /// The database this column family belongs to.
    pub(crate) fn db(&self) -> &Arc<Db> {
        &self.db
    }

    /// Keeps this column family's values out of the value cache from now on (a state whose
    /// reads may return expired entries until compaction drops them: a cached copy would
    /// outlive the drop).
    pub(crate) fn keep_out_of_value_cache(&self) -> Result<()> {
        self.db.opened()?.keep_out_of_value_cache(self.slot);
        Ok(())
    }

    /// Shapes the SSTs this column family writes from now on for a state read by iterator
    /// seeks (lists), whose entries are large: a restart point every
    /// [`SCAN_RESTART_INTERVAL`] entries instead of every 16, so a seek decodes fewer of them
    /// after its binary search (docs/decisions/0041-list-restart-interval.md), and the shared
    /// block size whatever its entries' size: lists of runs of about 900
    /// bytes filled 29 % and updated 14 % slower in 4 KiB blocks, and read no faster
    /// (docs/decisions/0051-block-size-follows-entry-size.md).
    pub(crate) fn tune_for_scans(&self) -> Result<()> {
        let open = self.db.opened()?;
        open.keep_block_size(self.slot);
        let interval = format!("{{block_restart_interval={SCAN_RESTART_INTERVAL}}}");
        open.set_options_cf(
            self.slot,
            &[("block_based_table_factory", interval.as_str())],
        )
    }

    /// Installs this column family's compaction filter (used from the next compaction on).
    /// With a TTL part it also sets RocksDB's periodic compaction so every file is filtered
    /// at least every `periodic_secs` seconds (0 = off).
    pub(crate) fn set_filter(&self, filter: CfFilter, periodic_secs: Option<u64>) -> Result<()> {
        let open = self.db.opened()?;
        self.db
            .filters
            .write()
            .insert(self.name.to_string(), Arc::new(filter));
        match periodic_secs {
            Some(secs) => {
                let secs = secs.to_string();
                open.set_options_cf(self.slot, &[("periodic_compaction_seconds", secs.as_str())])
            }
            None => Ok(()),
        }
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

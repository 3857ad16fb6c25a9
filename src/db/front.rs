//! An open database: the RocksDB handle and, in front of it under one lock, the write cache,
//! the value cache and the key bounds that point reads consult first.
//!
//! This module is the only one that holds the RocksDB handle, and it hands it out in two ways
//! only, so a read of RocksDB's data that skips the write cache does not compile:
//!
//! - [`Open::drained`] drains the write cache and returns a [`Drained`] token, the way to every
//!   read of RocksDB's data (scans, properties, live files, flushes, checkpoints);
//!   [`Open::drained_for`] drains only when the cache holds a write to the one column family
//!   a bounded scan reads;
//! - [`Open::changing`] drains, empties the value cache and returns a [`Changing`] guard that
//!   holds the front lock across a change of RocksDB's data other than a write (dropped
//!   files, range deletion, ingestion).
//!
//! The writes themselves ([`Open::put`], [`Open::delete`], [`Open::write`]) and two reads
//! that may bypass the drain live here too, each with its reason: the point read
//! ([`Open::get_with`], which looks in the write cache before RocksDB) and a key bound's
//! reverse seek ([`Open::get_with`]'s learning step, covered by the drain's raise of the bound).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::{Mutex, RwLock, RwLockWriteGuard};
use rocksdb::{BoundColumnFamily, Options, ReadOptions, WriteBatch, WriteOptions};

use super::block_sizes::{block_size_option, BlockSizes, StoredEntries};
use super::budget::{BloomGrant, MemoryBudget, ValueShare, WriteShare};
use super::l0_triggers::{Base, L0Triggers};
use super::quiet::{Held, Quiet};
use super::scan_iters::{RawIter, ScanIters, Taken};
use super::BatchOp;
use super::{rocks_error, Handle, Rocks};
use crate::change_log::{ChangeLog, LogCut};
use crate::error::{Error, Result};
use crate::key_bounds::{Check, KeyBounds};
use crate::options::{ValueCacheAdmission, ValueCacheWrites};
use crate::value_cache::ValueCache;
use crate::write_cache::{CachedWrite, WriteCache};

/// Bytes of one RocksDB write batch when the write cache drains. One batch per drain (the
/// cache's 2 MiB at most) made a fresh allocation of the whole size per drain, whose pages the
/// kernel faulted in and zeroed on every drain: a fifth of a 1 KiB put's time in the write
/// path (`perf` over `rockstate-bench matrix --only fits/uniform/1024B/plain`). A batch this
/// size reuses memory the allocator keeps, and still holds hundreds of 100-byte writes, so a
/// write-group round is still paid once for many of them.
pub(crate) const DRAIN_BATCH_BYTES: usize = 64 << 10;

/// The most column families one database holds (rockstate's metadata and 1023 states). The
/// handle table is allocated at this size, so a state registered while other threads read
/// (a scan, a savepoint) takes a free slot without waiting for them.
pub(super) const MAX_COLUMN_FAMILIES: usize = 1024;

/// What a point read consults before RocksDB, under one lock.
pub(super) struct Front {
    /// Writes not yet in RocksDB (see [`crate::write_cache`]); drained before every other
    /// access to RocksDB's data, except the reverse seek that learns a key bound (which the
    /// drain's raise of the bound covers).
    pub(super) cache: WriteCache,
    /// Values recently written to RocksDB or read from it (see [`crate::value_cache`]): each
    /// entry equals RocksDB's value for its key once `cache` has nothing newer for it.
    pub(super) values: ValueCache,
    /// Bounds of each key group's keys in RocksDB (see [`crate::key_bounds`]; a point read
    /// looks in `cache` first, and a drain raises them for what it writes); `None` when the
    /// keys' layout is not known or `DbOptions::key_bounds` is off.
    pub(super) bounds: Option<KeyBounds>,
    /// In changelog mode, every change RocksDB takes, in its order (see
    /// [`crate::change_log`]); recorded under this lock as the change reaches RocksDB.
    pub(super) log: Option<ChangeLog>,
}

impl Front {
    /// What the bounds say about `key` in column family `slot`.
    #[inline]
    pub(super) fn check(&self, slot: usize, key: &[u8]) -> Check {
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

/// Write options shared by every write of one database.
pub(super) struct SharedWriteOptions(WriteOptions);
// SAFETY: rocksdb::WriteOptions is Send but not Sync only because it wraps a raw pointer.
// The C++ WriteOptions it points to is a plain struct that RocksDB only reads during a write;
// we never mutate it after construction, so shared `&` access from many threads is sound.
unsafe impl Sync for SharedWriteOptions {}

/// Read options shared by every point read of one database (see [`SharedWriteOptions`]).
struct SharedReadOptions(ReadOptions);
// SAFETY: as for SharedWriteOptions: never mutated after construction; RocksDB only reads it.
unsafe impl Sync for SharedReadOptions {}

/// An open RocksDB database with its front and its shares of the memory budget. Dropping it
/// drains the write cache, closes RocksDB (releasing its directory lock) and hands the shares
/// back to the budget.
pub(super) struct Open {
    /// Iterators kept between bounded scans. Declared first: their lifetimes are erased, and
    /// every one is dropped before the handles and the database they read.
    scan_iters: ScanIters,
    /// Handles of every column family, by slot (the slot is a column family's place in the
    /// write cache); [`MAX_COLUMN_FAMILIES`] slots, filled in order. Declared before `rocks`:
    /// every handle is dropped before the database it belongs to, and no handle is ever
    /// reachable without the `Open` that owns its database.
    handles: Box<[OnceLock<Handle>]>,
    /// The names of the column families, by slot; held while a column family is created.
    names: Mutex<Vec<String>>,
    rocks: Rocks,
    /// The memtable blooms the budget granted the column families; declared after `rocks`,
    /// so they are given back once RocksDB freed them.
    blooms: Mutex<Vec<BloomGrant>>,
    /// Declared before the budget shares below, so its memory is freed before they hand it
    /// back to the budget. The budget holds it weakly, to resize the write and value caches.
    front: Arc<RwLock<Front>>,
    /// The write cache's place among the budget's write caches (`None`: writes go straight
    /// to RocksDB).
    write_share: Option<WriteShare>,
    /// The value cache's place among the budget's value caches (`None`: no value cache).
    value_share: Option<ValueShare>,
    write: SharedWriteOptions,
    read: SharedReadOptions,
    /// Whether point reads are bounded per key group (`Front::bounds` is `Some`).
    bounded: bool,
    /// RocksDB was opened read-only (`FrontSettings::read_only`).
    read_only: bool,
    /// Whether `Front::log` is `Some`: writes that bypass the write cache then take the front
    /// lock to record themselves.
    logging: AtomicBool,
    /// Column families whose level-0 stall triggers an ingestion raised.
    l0: L0Triggers,
    /// Each column family's block size, decided from its files or its first puts.
    block_sizes: BlockSizes,
    /// `DbOptions::block_size`.
    shared_block_size: usize,
    /// Flushes and compactions held off while files are ingested.
    quiet: Quiet,
    path: std::path::PathBuf,
    /// RocksDB writes left before the next one fails (tests of partial drains).
    #[cfg(test)]
    writes_before_failing: std::sync::atomic::AtomicUsize,
    /// Flushes and compactions found running as ingestions began, summed (tests).
    #[cfg(test)]
    jobs_at_ingestion: std::sync::atomic::AtomicU64,
}

/// Settings of an [`Open`] database's front.
pub(super) struct FrontSettings {
    /// Whether writes skip the WAL.
    pub(super) disable_wal: bool,
    /// Bytes the write cache asks of the budget (0: writes go straight to RocksDB).
    pub(super) write_cache_bytes: usize,
    /// Bytes the value cache asks of the budget (0: no value cache).
    pub(super) value_cache_bytes: usize,
    /// The database's own level-0 stall triggers.
    pub(super) level0_triggers: Base,
    /// The triggers its column families were opened with: [`FrontSettings::level0_triggers`]
    /// or, for a restore, raised above the files it places.
    pub(super) level0_opened_with: Base,
    /// Which values read from RocksDB the value cache keeps.
    pub(super) value_cache_admission: ValueCacheAdmission,
    /// What writes do to the value cache.
    pub(super) value_cache_writes: ValueCacheWrites,
    /// Bytes of the key-group prefix when point reads are bounded per key group.
    pub(super) bounds_prefix: Option<usize>,
    /// Bytes of writes after which the iterators kept between scans are refreshed.
    pub(super) scan_sweep_bytes: usize,
    /// Whether RocksDB was opened read-only: no iterator is kept between scans (RocksDB
    /// refreshes none of a read-only database), and nothing is flushed when it is dropped.
    pub(super) read_only: bool,
    /// Whether every column family was opened with automatic compactions off, until the
    /// restore that opened it is done ([`super::quiet`]).
    pub(super) compactions_off: bool,
    /// The block size given to a column family whose files or first puts carry large
    /// entries ([`super::block_sizes`]); `None`: every column family keeps the shared one.
    pub(super) large_entry_block_size: Option<usize>,
    /// The shared block size (`DbOptions::block_size`), set back on a column family that
    /// is kept at it after its files gave it the one for large entries.
    pub(super) block_size: usize,
}

impl Open {
    /// Takes over `rocks`, opened with the column families `names` (all of its column
    /// families), and puts a front on the budget in front of it.
    pub(super) fn new(
        rocks: Rocks,
        names: Vec<String>,
        blooms: Vec<BloomGrant>,
        budget: &MemoryBudget,
        settings: FrontSettings,
        path: &Path,
    ) -> Result<Open> {
        if names.len() > MAX_COLUMN_FAMILIES {
            return Err(too_many_column_families());
        }
        let names_len = names.len();
        let handles: Box<[OnceLock<Handle>]> =
            (0..MAX_COLUMN_FAMILIES).map(|_| OnceLock::new()).collect();
        for (slot, name) in names.iter().enumerate() {
            // Fresh cells: setting cannot fail.
            let _ = handles[slot].set(handle(&rocks, name)?);
        }
        let mut write = WriteOptions::default();
        write.disable_wal(settings.disable_wal);
        // One hasher for both caches: a key hashed for one serves the other.
        let hasher = crate::write_cache::KeyHasher::default();
        let front = Arc::new(RwLock::new(Front {
            // Sized by the budget as it joins (below).
            cache: WriteCache::new(0, hasher.clone()),
            // Sized by the budget as it joins (below).
            values: ValueCache::new(
                0,
                hasher,
                settings.value_cache_admission,
                settings.value_cache_writes,
            ),
            // Every bound starts unknown: the database may hold keys already.
            bounds: settings.bounds_prefix.map(KeyBounds::new),
            log: None,
        }));
        let write_share = (settings.write_cache_bytes > 0)
            .then(|| budget.join_writes(&front, settings.write_cache_bytes));
        let value_share = (settings.value_cache_bytes > 0)
            .then(|| budget.join_values(&front, settings.value_cache_bytes));
        let open = Open {
            scan_iters: ScanIters::new(
                MAX_COLUMN_FAMILIES,
                settings.scan_sweep_bytes,
                !settings.read_only,
            ),
            handles,
            names: Mutex::new(names),
            rocks,
            blooms: Mutex::new(blooms),
            bounded: settings.bounds_prefix.is_some(),
            read_only: settings.read_only,
            logging: AtomicBool::new(false),
            l0: L0Triggers::new(
                settings.level0_triggers,
                settings.level0_opened_with,
                names_len,
            ),
            quiet: Quiet::new(settings.compactions_off),
            block_sizes: BlockSizes::new(MAX_COLUMN_FAMILIES, settings.large_entry_block_size),
            #[cfg(test)]
            writes_before_failing: std::sync::atomic::AtomicUsize::new(usize::MAX),
            #[cfg(test)]
            jobs_at_ingestion: std::sync::atomic::AtomicU64::new(0),
            front,
            write_share,
            value_share,
            write: SharedWriteOptions(write),
            read: SharedReadOptions(ReadOptions::default()),
            path: path.to_path_buf(),
            shared_block_size: settings.block_size,
        };
        for slot in 0..names_len {
            open.size_blocks_from_files(slot);
        }
        Ok(open)
    }

    /// The slot of column family `name`, if it exists.
    pub(super) fn slot(&self, name: &str) -> Option<usize> {
        self.names.lock().iter().position(|n| n == name)
    }

    /// The names of every column family, by slot.
    pub(super) fn names(&self) -> Vec<String> {
        self.names.lock().clone()
    }

    /// Creates column family `name` with `options` (unless it exists) and returns its slot;
    /// `options` is called only when it is created.
    pub(super) fn create_cf(
        &self,
        name: &str,
        options: impl FnOnce() -> Result<Options>,
    ) -> Result<usize> {
        // Held across the creation: a restore's compactions are not turned on meanwhile.
        let compactions_off = self.quiet.creating();
        // Held across the creation, so no one sees a slot without its handle.
        let mut names = self.names.lock();
        if let Some(slot) = names.iter().position(|n| n == name) {
            return Ok(slot);
        }
        let slot = names.len();
        if slot >= MAX_COLUMN_FAMILIES {
            return Err(too_many_column_families());
        }
        let mut options = options()?;
        if *compactions_off {
            options.set_disable_auto_compactions(true);
        }
        self.rocks.create_cf(name, &options).map_err(rocks_error)?;
        // A fresh cell (slots fill in order under `names`): setting cannot fail.
        let _ = self.handles[slot].set(handle(&self.rocks, name)?);
        names.push(name.to_string());
        Ok(slot)
    }

    /// Holds every flush and compaction off for an ingestion ([`super::quiet`]); take it
    /// before the front's lock, then [`Open::settle_jobs`] under it.
    pub(super) fn hold_jobs(&self) -> Result<Held<'_>> {
        self.quiet.hold(&self.rocks, self.all_handles().collect())
    }

    /// [`Held::settle`] for an ingestion into the column families `targets`.
    pub(super) fn settle_jobs(&self, held: &Held<'_>, targets: &[usize]) -> Result<()> {
        let targets = targets
            .iter()
            .map(|&slot| self.handle(slot))
            .collect::<Result<Vec<_>>>()?;
        held.settle(&targets)
    }

    /// Flushes and compactions running now (tests).
    #[cfg(test)]
    pub(super) fn running_jobs(&self) -> u64 {
        let count = |p: &str| self.rocks.property_int_value(p).ok().flatten().unwrap_or(0);
        count("rocksdb.num-running-compactions") + count("rocksdb.num-running-flushes")
    }

    /// Adds the flushes and compactions running as an ingestion begins to
    /// [`Open::jobs_at_ingestion`] (tests).
    #[cfg(test)]
    pub(super) fn note_jobs_at_ingestion(&self) {
        self.jobs_at_ingestion
            .fetch_add(self.running_jobs(), Ordering::Relaxed);
    }

    /// The flushes and compactions found running as ingestions began, summed (tests).
    #[cfg(test)]
    pub(super) fn jobs_at_ingestion(&self) -> u64 {
        self.jobs_at_ingestion.load(Ordering::Relaxed)
    }

    /// Held by a manual flush or compaction for its whole length ([`Quiet::job`]); take it
    /// before the front's lock.
    pub(super) fn manual_job(&self) -> parking_lot::RwLockReadGuard<'_, ()> {
        self.quiet.job()
    }

    /// Turns automatic compactions on if a restore opened the database with them off.
    pub(super) fn resume_compactions(&self) -> Result<()> {
        let handles: Vec<&Handle> = self.all_handles().collect();
        self.quiet.resume(&self.rocks, &handles)
    }

    /// Keeps a column family's memtable bloom grant until the database closes.
    pub(super) fn keep_bloom(&self, grant: BloomGrant) {
        self.blooms.lock().push(grant);
    }

    /// The handle of the column family in `slot`.
    #[inline]
    fn handle(&self, slot: usize) -> Result<&Handle> {
        self.handles
            .get(slot)
            .and_then(OnceLock::get)
            .ok_or_else(|| Error::Internal(format!("no column family in slot {slot}")))
    }

    /// The handles of every column family, in slot order.
    fn all_handles(&self) -> impl Iterator<Item = &Handle> {
        self.handles.iter().map_while(OnceLock::get)
    }

    /// The number of level-0 files of the column family in `slot`.
    pub(super) fn level0_files(&self, slot: usize) -> Result<u64> {
        Ok(self
            .rocks
            .property_int_value_cf(self.handle(slot)?, "rocksdb.num-files-at-level0")
            .map_err(rocks_error)?
            .unwrap_or(0))
    }

    /// Raises the level-0 stall triggers of the column family in `slot` above `l0` files an
    /// ingestion or a restore put there, if they reach the slowdown count and the triggers
    /// are not that high yet ([`super::l0_triggers`]). Each raise rewrites RocksDB's OPTIONS
    /// file (1.5-2 ms here). A raise that fails is logged, never an error: the ingestion or
    /// restore it follows has its data in, and writes would only be slowed down.
    pub(super) fn raise_level0(&self, slot: usize, l0: u64) {
        if let Some(raised) = self.l0.raise_for(slot, l0) {
            if let Err(e) = self.set_triggers(slot, raised) {
                tracing::warn!(slot, error = %e, "level-0 triggers not raised");
            }
        }
    }

    /// [`Open::raise_level0`] for every column family at its level-0 count: a restored
    /// database's level 0 holds what its sources held and what the restore ingested, none of
    /// it a sign of compaction falling behind this database's writes.
    pub(super) fn after_restore(&self) {
        for slot in 0..self.all_handles().count() {
            match self.level0_files(slot) {
                Ok(l0) => self.raise_level0(slot, l0),
                Err(e) => tracing::warn!(slot, error = %e, "level 0 not counted"),
            }
        }
    }

    /// After a write to RocksDB: now and then, while an ingestion's triggers are raised, sets
    /// back those of every column family whose level 0 compaction has taken below the
    /// slowdown count. A failure leaves them raised for a later write to retry; the write
    /// itself succeeded.
    #[inline]
    fn after_write(&self, bytes: usize) {
        self.scan_iters.wrote(bytes);
        for slot in self.l0.due() {
            let base = self.l0.base();
            let settled = self.level0_files(slot).and_then(|l0| {
                if l0 >= base.slowdown {
                    return Ok(false);
                }
                self.set_triggers(slot, base).map(|()| true)
            });
            match settled {
                Ok(true) => self.l0.settled(slot),
                Ok(false) => {}
                Err(e) => tracing::warn!(slot, error = %e, "level-0 triggers stay raised"),
            }
        }
    }

    /// Counts a put of `bytes` to the column family in `slot` towards its block size, and
    /// gives the column family the block size for large entries when this put completes a
    /// sample of them ([`super::block_sizes`]). A refused change is logged and leaves the
    /// shared block size: it costs speed, never data.
    #[inline]
    fn note_put(&self, slot: usize, bytes: usize) {
        if let Some(size) = self.block_sizes.note(slot, bytes) {
            self.give_block_size(slot, size);
        }
    }

    /// Keeps the shared block size for the column family in `slot`, whatever its entries
    /// (a list's, read by iterator seeks); sets it back if its files had given it the one for
    /// large entries.
    pub(super) fn keep_block_size(&self, slot: usize) {
        if self.block_sizes.keep(slot) {
            self.give_block_size(slot, self.shared_block_size);
        }
    }

    /// Decides the block size of the column family in `slot` from the entries its files hold
    /// (when the database opens, and after files are ingested into it), unless its puts or an
    /// earlier look decided it ([`BlockSizes::decide_stored`]). A property RocksDB does not
    /// give leaves the decision to the puts: it costs speed, never data.
    pub(super) fn size_blocks_from_files(&self, slot: usize) {
        if !self.block_sizes.deciding(slot) {
            return;
        }
        let text = self.handle(slot).and_then(|h| {
            self.rocks
                .property_value_cf(h, "rocksdb.aggregated-table-properties")
                .map_err(rocks_error)
        });
        let stored = match text {
            Ok(text) => text.as_deref().and_then(StoredEntries::parse),
            Err(e) => {
                tracing::warn!(slot, error = %e, "stored entries not read for the block size");
                None
            }
        };
        if let Some(size) = stored.and_then(|s| self.block_sizes.decide_stored(slot, s)) {
            self.give_block_size(slot, size);
        }
    }

    /// Gives the column family in `slot` data blocks of `size` bytes from its next flush or
    /// compaction on.
    #[cold]
    fn give_block_size(&self, slot: usize, size: usize) {
        let option = block_size_option(size);
        let pairs = option.each_ref().map(|(k, v)| (*k, v.as_str()));
        match self.set_options_cf(slot, &pairs) {
            Ok(()) => tracing::debug!(slot, size, "large entries: block size set"),
            Err(e) => {
                tracing::warn!(slot, size, error = %e, "block size for large entries not set")
            }
        }
    }

    /// Sets the level-0 stall triggers of the column family in `slot`.
    fn set_triggers(&self, slot: usize, triggers: Base) -> Result<()> {
        let options = triggers.options();
        let pairs = options.each_ref().map(|(k, v)| (*k, v.as_str()));
        self.set_options_cf(slot, &pairs)
    }

    /// The slots whose level-0 triggers are raised (tests).
    #[cfg(test)]
    pub(super) fn l0_raised(&self) -> Vec<usize> {
        self.l0.raised()
    }

    /// Sets RocksDB options of the column family in `slot` at run time (no data is read).
    pub(super) fn set_options_cf(&self, slot: usize, options: &[(&str, &str)]) -> Result<()> {
        self.rocks
            .set_options_cf(self.handle(slot)?, options)
            .map_err(rocks_error)?;
        Ok(())
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
        self.write_share.is_some()
    }

    /// Bytes the write cache may hold (0 without one).
    pub(super) fn write_cache_limit(&self) -> usize {
        match self.cache_on() {
            true => self.front.read().cache.limit(),
            false => 0,
        }
    }

    /// The value cache's limit, bytes and entries.
    pub(super) fn value_cache_figures(&self) -> (usize, usize, usize) {
        let values = &self.front.read().values;
        (values.limit(), values.bytes(), values.len())
    }

    /// For a write that bypasses the write cache: the front lock, when the front tracks what
    /// RocksDB holds (key bounds or a value cache), to hold across the write as a drain
    /// does. Bounds are raised before RocksDB has the keys; the value cache records the write
    /// after, and no read can record an older value in between or find one after.
    fn tracking_front(&self) -> Option<RwLockWriteGuard<'_, Front>> {
        (self.bounded || self.values_on() || self.logging.load(Ordering::Acquire))
            .then(|| self.front.write())
    }

    /// Records in the change log (changelog mode; nothing otherwise) that every key in
    /// `[start, end)` of the column family in `slot` is deleted as of now
    /// ([`ChangeLog::record_range`]), without changing RocksDB. The column family's cached
    /// writes are drained first, so every earlier change of the range is in the log before it.
    pub(super) fn log_range_deletion(&self, slot: usize, start: &[u8], end: &[u8]) -> Result<()> {
        if !self.logging.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut front = self.front.write();
        if front.cache.holds_slot(slot) {
            self.write_cached(&mut front)?;
        }
        if let Some(log) = front.log.as_mut() {
            log.record_range(slot, start, end);
        }
        Ok(())
    }

    /// Starts recording every change in `log` (changelog mode); the write cache is drained
    /// first, so the log holds every change RocksDB takes from now on.
    pub(super) fn start_log(&self, log: ChangeLog) -> Result<()> {
        let mut front = self.front.write();
        self.write_cached(&mut front)?;
        front.log = Some(log);
        self.logging.store(true, Ordering::Release);
        Ok(())
    }

    /// Drains the write cache (recording its writes) and cuts the log: what RocksDB took
    /// since the previous cut. `None` when the database records no log.
    pub(super) fn cut_log(&self) -> Result<Option<LogCut>> {
        let mut front = self.front.write();
        self.write_cached(&mut front)?;
        Ok(front.log.as_mut().map(ChangeLog::cut))
    }

    /// Writes `writes` (slot, key, value or `None` for a delete) to RocksDB in order, in
    /// batches of about [`DRAIN_BATCH_BYTES`] each (one entry more at most).
    fn write_in_batches<'a>(&self, writes: impl Iterator<Item = CachedWrite<'a>>) -> Result<()> {
        let mut wb = WriteBatch::with_capacity_bytes(DRAIN_BATCH_BYTES);
        for write in writes {
            self.add(&mut wb, write)?;
            if wb.size_in_bytes() >= DRAIN_BATCH_BYTES {
                let full =
                    std::mem::replace(&mut wb, WriteBatch::with_capacity_bytes(DRAIN_BATCH_BYTES));
                self.write_rocks(full)?;
            }
        }
        if !wb.is_empty() {
            self.write_rocks(wb)?;
        }
        Ok(())
    }

    /// One write of `wb` to RocksDB.
    fn write_rocks(&self, wb: WriteBatch) -> Result<()> {
        #[cfg(test)]
        if self
            .writes_before_failing
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_err()
        {
            return Err(Error::RocksDb {
                kind: crate::error::ErrorKind::Io,
                detail: "write made to fail by the test".into(),
            });
        }
        let bytes = wb.size_in_bytes();
        self.rocks
            .write_opt(wb, &self.write.0)
            .map_err(rocks_error)?;
        self.after_write(bytes);
        Ok(())
    }

    /// A RocksDB write batch of `writes` (slot, key, value or `None` for a delete).
    fn write_batch<'a>(&self, writes: impl Iterator<Item = CachedWrite<'a>>) -> Result<WriteBatch> {
        let mut wb = WriteBatch::default();
        for write in writes {
            self.add(&mut wb, write)?;
        }
        Ok(wb)
    }

    /// Adds one write (slot, key, value or `None` for a delete) to `wb`.
    fn add(&self, wb: &mut WriteBatch, (slot, key, value): CachedWrite<'_>) -> Result<()> {
        let handle = self.handle(slot)?;
        match value {
            Some(v) => wb.put_cf(handle, key, v),
            None => wb.delete_cf(handle, key),
        }
        Ok(())
    }

    /// Writes every cached write to RocksDB in key order (in batches of about
    /// [`DRAIN_BATCH_BYTES`]), records them in the value cache and forgets them once RocksDB
    /// has them all; raises each key group's bound to the largest key put in it. On an error
    /// nothing is forgotten: the next drain writes them all again, over the batches that went
    /// in, which leaves what one drain would have. The caller holds the lock across the
    /// writes, so no reader finds a key in neither place, nor a key in RocksDB above its
    /// group's bound, nor an older value in the value cache with nothing newer in the write
    /// cache.
    fn write_cached(&self, front: &mut Front) -> Result<()> {
        let Front {
            cache,
            bounds,
            values,
            log,
        } = front;
        if cache.is_empty() {
            return Ok(());
        }
        // Sorted by slot, then key: the last put of each (slot, group) run is its largest. A
        // bound raised for a write RocksDB then refuses is only higher than it needs to be.
        // The log records each write in the same pass, before RocksDB has it: on a failed
        // write the cache keeps them and the next drain records them again, after, and
        // replaying a put or delete twice in order leaves what the later one left.
        let mut run: Option<(usize, &[u8])> = None;
        let mut sized: Vec<(usize, usize)> = Vec::new();
        let writes = cache.sorted().inspect(|&(slot, key, value)| {
            if let Some(log) = log.as_mut() {
                log.record(slot, key, value);
            }
            if let Some(v) = value {
                if let Some(size) = self.block_sizes.note(slot, key.len() + v.len()) {
                    sized.push((slot, size));
                }
            }
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
        let written = self.write_in_batches(writes);
        // Given whether or not the writes went in: the sample is of puts made.
        for (slot, size) in sized {
            self.give_block_size(slot, size);
        }
        written?;
        if let (Some(b), Some((slot, key))) = (bounds.as_mut(), run) {
            b.raise(slot, key);
        }
        values.record_drained(cache.writes());
        cache.clear();
        Ok(())
    }

    /// Writes every cached write to RocksDB (every column family's: one sorted batch is as
    /// cheap as one per column family; see [`crate::write_cache`]).
    pub(super) fn drain(&self) -> Result<()> {
        if !self.cache_on() {
            return Ok(());
        }
        let mut front = self.front.write();
        self.write_cached(&mut front)
    }

    /// Drains the write cache and hands out RocksDB for reading its data: what was written
    /// before this call is in RocksDB. Writes made while the token is held go to the write
    /// cache again; a read through the token does not see them.
    pub(super) fn drained(&self) -> Result<Drained<'_>> {
        self.drain()?;
        Ok(Drained { open: self })
    }

    /// [`Open::drained`] for a read of column family `slot` only: what was written to it
    /// before this call is in RocksDB. The cache is drained only when it holds a write to
    /// `slot`, so reads of one state do not push the other states' writes into RocksDB one
    /// by one (a batch over several column families is drained whole, as ever).
    pub(super) fn drained_for(&self, slot: usize) -> Result<Drained<'_>> {
        if self.cache_on() && !self.front.read().cache.holds_slot(slot) {
            return Ok(Drained { open: self });
        }
        self.drained()
    }

    /// Readies the front for a change of RocksDB's data other than a write (dropped files,
    /// range deletion, ingestion) and holds its lock until the guard is dropped: drains the
    /// write cache (so the change is newer than every cached write) and empties the value
    /// cache. With the lock held across the change, a read that looked before it cannot
    /// record what it found (the emptying moved the epoch), and none looks during it.
    pub(super) fn changing(&self) -> Result<Changing<'_>> {
        let mut front = self.front.write();
        self.write_cached(&mut front)?;
        front.values.clear();
        // The change replaces files a kept iterator would go on holding.
        self.scan_iters.clear();
        // A change the log cannot express: the next checkpoint materializes instead.
        if let Some(log) = front.log.as_mut() {
            log.lose();
        }
        Ok(Changing { open: self, front })
    }

    /// Applies a batch atomically: readers see all of it or none of it. With the cache on,
    /// a full cache is drained first (an error leaves the batch undone), then the batch is
    /// cached under one lock.
    pub(super) fn write(&self, batch: &[BatchOp]) -> Result<()> {
        if self.cache_on() {
            let mut front = self.front.write();
            if front.cache.is_full() {
                self.write_cached(&mut front)?;
            }
            for op in batch {
                front.cache.write(op.slot, &op.key, op.value.as_deref());
            }
            return Ok(());
        }
        let ops = batch
            .iter()
            .map(|op| (op.slot, &*op.key, op.value.as_deref()));
        let wb = self.write_batch(ops)?;
        for op in batch {
            if let Some(v) = &op.value {
                self.note_put(op.slot, op.key.len() + v.len());
            }
        }
        let mut front = self.tracking_front();
        if let Some(front) = &mut front {
            for op in batch.iter().filter(|op| op.value.is_some()) {
                front.raise(op.slot, &op.key);
            }
        }
        let bytes = wb.size_in_bytes();
        self.rocks
            .write_opt(wb, &self.write.0)
            .map_err(rocks_error)?;
        self.after_write(bytes);
        if let Some(front) = &mut front {
            // Logged once RocksDB took it (the front's lock keeps the log in RocksDB's
            // order): a refused write never happened.
            if let Some(log) = front.log.as_mut() {
                for op in batch {
                    log.record(op.slot, &op.key, op.value.as_deref());
                }
            }
            for op in batch {
                front
                    .values
                    .record_write(op.slot, &op.key, op.value.as_deref());
            }
        }
        Ok(())
    }

    /// Caches a put or a delete (only with the cache on). A full cache is drained first, so
    /// an error of that drain leaves this write undone.
    #[inline]
    fn write_one(&self, slot: usize, key: &[u8], value: Option<(&[u8], &[u8])>) -> Result<()> {
        let mut front = self.front.write();
        if front.cache.is_full() {
            self.write_cached(&mut front)?;
        }
        front.cache.write_parts(slot, key, value);
        Ok(())
    }

    /// Stores `value` under `key` in the column family in `slot`.
    #[inline]
    pub(super) fn put(&self, slot: usize, key: &[u8], value: &[u8]) -> Result<()> {
        self.put_parts(slot, key, &[], value)
    }

    /// Stores the value `head` then `tail` under `key` in the column family in `slot`. With
    /// the write cache on, the two parts are copied into it as they are (a TTL state's
    /// timestamp and payload are never joined in a buffer of their own first).
    #[inline]
    pub(super) fn put_parts(
        &self,
        slot: usize,
        key: &[u8],
        head: &[u8],
        tail: &[u8],
    ) -> Result<()> {
        if self.cache_on() {
            return self.write_one(slot, key, Some((head, tail)));
        }
        let joined: Vec<u8>;
        let value = if head.is_empty() {
            tail
        } else {
            joined = [head, tail].concat();
            &joined
        };
        let handle = self.handle(slot)?;
        let mut front = self.tracking_front();
        if let Some(front) = &mut front {
            front.raise(slot, key);
        }
        self.rocks
            .put_cf_opt(handle, key, value, &self.write.0)
            .map_err(rocks_error)?;
        self.after_write(key.len() + value.len());
        self.note_put(slot, key.len() + value.len());
        if let Some(front) = &mut front {
            if let Some(log) = front.log.as_mut() {
                log.record(slot, key, Some(value));
            }
            front.values.record_write(slot, key, Some(value));
        }
        Ok(())
    }

    /// Deletes `key` from the column family in `slot`.
    pub(super) fn delete(&self, slot: usize, key: &[u8]) -> Result<()> {
        if self.cache_on() {
            return self.write_one(slot, key, None);
        }
        let handle = self.handle(slot)?;
        let mut front = self.tracking_front();
        self.rocks
            .delete_cf_opt(handle, key, &self.write.0)
            .map_err(rocks_error)?;
        self.after_write(key.len());
        if let Some(front) = &mut front {
            if let Some(log) = front.log.as_mut() {
                log.record(slot, key, None);
            }
            front.values.record_write(slot, key, None);
        }
        Ok(())
    }

    /// Calls `f` with the stored value of `key` in the column family in `slot`, without
    /// copying it out of RocksDB. A value found in the write cache or the value cache is
    /// copied out first, so `f` runs with no front lock held and may call back into the
    /// database; a key not in the write cache and above its group's bound is absent without
    /// asking RocksDB.
    ///
    /// One of the two reads of RocksDB that do not drain: the write cache is looked at first,
    /// so a key it holds never reaches RocksDB.
    #[inline]
    pub(super) fn get_with<R>(
        &self,
        slot: usize,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>> {
        let mut epoch = None;
        if self.fronted() {
            let front = self.front.read();
            // The caches share their hasher: one hash serves both.
            let hash = front.cache.hash(slot, key);
            let cached: Option<Option<smallvec::SmallVec<[u8; 256]>>> = front
                .cache
                .get(hash, slot, key)
                .map(|v| v.map(smallvec::SmallVec::from_slice));
            if let Some(pending) = cached {
                drop(front);
                return Ok(pending.map(|v| f(&v)));
            }
            // Not in the write cache: RocksDB has the answer, unless the key is above its
            // group's bound (then no value can be cached either), or the value cache holds it.
            let check = front.check(slot, key);
            if check == Check::Absent {
                return Ok(None);
            }
            if let Some(v) = front.values.get(hash, slot, key) {
                front.values.note_hit(hash);
                let v = smallvec::SmallVec::<[u8; 256]>::from_slice(v);
                drop(front);
                return Ok(Some(f(&v)));
            }
            epoch = front
                .values
                .admits_read(hash)
                .then(|| (front.values.epoch(), hash));
            drop(front);
            if let Check::Unknown { losses } = check {
                self.learn_bound(slot, key, losses)?;
            }
        }
        let value = self
            .rocks
            .get_pinned_cf_opt(self.handle(slot)?, key, &self.read.0)
            .map_err(rocks_error)?;
        if let (Some((epoch, hash)), Some(v)) = (epoch, &value) {
            self.front
                .write()
                .values
                .record_read(epoch, hash, slot, key, v);
        }
        Ok(value.map(|v| f(&v)))
    }

    /// Asks RocksDB for the largest key of `key`'s group and installs it as the group's bound
    /// (see [`crate::key_bounds`]): `losses` is the column family's loss count when the bound
    /// was found unknown.
    ///
    /// The other read of RocksDB that does not drain: cached keys are found in the cache
    /// before the bound is looked at, and the drain that writes them raises the bound.
    #[cold]
    fn learn_bound(&self, slot: usize, key: &[u8], losses: u64) -> Result<()> {
        let Some((group, (lower, upper))) = self
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
        let mut it = self.rocks.raw_iterator_cf_opt(self.handle(slot)?, read);
        it.seek_to_last();
        it.status().map_err(rocks_error)?;
        let stored_max = it.key().map(<[u8]>::to_vec);
        drop(it);
        if let Some(b) = &mut self.front.write().bounds {
            b.learn(slot, group, losses, stored_max.as_deref());
        }
        Ok(())
    }

    /// Keeps the values of the column family in `slot` out of the value cache from now on.
    pub(super) fn keep_out_of_value_cache(&self, slot: usize) {
        self.front.write().values.keep_out(slot);
    }

    /// How many iterators are kept between scans (tests).
    #[cfg(test)]
    pub(super) fn kept_iterators(&self) -> usize {
        self.scan_iters.count()
    }

    /// The front, for the module's tests.
    #[cfg(test)]
    pub(super) fn front(&self) -> &RwLock<Front> {
        &self.front
    }

    /// Whether point reads are bounded, for the module's tests.
    #[cfg(test)]
    pub(super) fn bounded(&self) -> bool {
        self.bounded
    }

    /// Lets `n` more RocksDB writes of the write path through, then fails every one after
    /// (`usize::MAX`: none fails), for the module's tests.
    #[cfg(test)]
    pub(super) fn fail_after_writes(&self, n: usize) {
        self.writes_before_failing.store(n, Ordering::Relaxed);
    }

    /// Makes every later write to RocksDB fail (RocksDB refuses a synced write without a
    /// WAL) or succeed again, for the module's tests.
    #[cfg(test)]
    pub(super) fn fail_writes(&mut self, fail: bool) {
        let mut w = WriteOptions::default();
        w.disable_wal(true);
        w.set_sync(fail);
        self.write = SharedWriteOptions(w);
    }
}

impl Open {
    /// Drains the write cache and flushes every memtable; a flush refused for want of disk
    /// space is tried again for up to [`NO_SPACE_WAIT`]. RocksDB stops writing after such a
    /// failure and only takes writes again once it has seen space come back (it looks every
    /// few seconds), so a close right after space was freed would otherwise fail again, and a
    /// drop would close RocksDB with its memtables unwritten (WAL off: lost).
    pub(super) fn drain_and_flush(&self) -> Result<()> {
        let start = std::time::Instant::now();
        loop {
            match self.drained().and_then(|d| d.flush_all()) {
                Err(e) if no_space(&e) && start.elapsed() < NO_SPACE_WAIT => {
                    std::thread::sleep(Duration::from_millis(250));
                }
                other => return other,
            }
        }
    }
}

/// How long a close waits for disk space before it reports the failed flush
/// ([`Open::drain_and_flush`]): above RocksDB's 5 s between looks at free space.
const NO_SPACE_WAIT: Duration = Duration::from_secs(12);

/// Whether RocksDB refused a write or flush for want of disk space (`ENOSPC`).
fn no_space(e: &Error) -> bool {
    match e {
        Error::RocksDb { detail, .. } => {
            detail.contains("No space left on device") || detail.contains("NoSpace")
        }
        Error::Io { source, .. } => source.raw_os_error() == Some(libc::ENOSPC),
        _ => false,
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        // Closing writes out the memtables (WAL off); cached writes go there first. An error
        // here has nowhere to go: `Db::close` flushes first and returns it, so only a
        // database dropped without a successful `close` can end here with one. A read-only
        // database has nothing to write out (and refuses a flush).
        if self.read_only {
            return;
        }
        if let Err(e) = self.drain_and_flush() {
            tracing::error!(
                path = %self.path.display(),
                error = %e,
                "writes since the last flush lost: the database was dropped without close and could not write them out"
            );
        }
    }
}

/// RocksDB after a drain: the only way to read its data other than a point read.
pub(super) struct Drained<'a> {
    open: &'a Open,
}

impl<'a> Drained<'a> {
    /// The database.
    pub(super) fn rocks(&self) -> &'a Rocks {
        &self.open.rocks
    }

    /// Whether the key bounds show that column family `slot` holds no key in
    /// `[lower, upper)`, a range inside one key group (a list's or map's entries): `lower`
    /// lies above every key RocksDB holds in that group, and the write cache held no write
    /// to `slot` once this guard was taken ([`Open::drained`], [`Open::drained_for`]). Learns
    /// the group's bound first when it is not known (one reverse seek in the group, once).
    /// `false` when reads are not bounded or the range leaves its group.
    pub(super) fn empty_by_bound(&self, slot: usize, lower: &[u8], upper: &[u8]) -> Result<bool> {
        if !self.open.bounded {
            return Ok(false);
        }
        let check = {
            let front = self.open.front.read();
            let Some(bounds) = &front.bounds else {
                return Ok(false);
            };
            match (bounds.group(lower), bounds.group(upper)) {
                (Some(a), Some(b)) if a == b => {}
                _ => return Ok(false),
            }
            front.check(slot, lower)
        };
        match check {
            Check::Absent => Ok(true),
            Check::Maybe => Ok(false),
            Check::Unknown { losses } => {
                self.open.learn_bound(slot, lower, losses)?;
                Ok(self.open.front.read().check(slot, lower) == Check::Absent)
            }
        }
    }

    /// The handle of the column family in `slot`.
    pub(super) fn handle(&self, slot: usize) -> Result<&'a Handle> {
        self.open.handle(slot)
    }

    /// The handles of every column family.
    pub(super) fn handles(&self) -> Vec<&'a Handle> {
        self.open.all_handles().collect()
    }

    /// Flushes every column family's memtable to SST files, without waiting for compactions
    /// to clear a write stall first ([`super::raw::flush_now`]).
    pub(super) fn flush_all(&self) -> Result<()> {
        self.release_kept_iterators();
        super::raw::flush_now(&self.open.rocks, &self.handles())
    }

    /// An iterator over column family `slot` for a scan that stops at its upper bound itself:
    /// the one kept from the last scan of `slot`, refreshed, or a new one
    /// ([`super::scan_iters`]). Dropping the returned guard keeps the iterator for the next
    /// scan. `None` where no iterator is kept (a read-only database).
    pub(super) fn kept_iterator(&self, slot: usize) -> Result<Option<KeptIterator<'a>>> {
        let iters = &self.open.scan_iters;
        if !iters.enabled() {
            return Ok(None);
        }
        // The iterator's view is fixed here: not while a drain is half written.
        let at_rest = self.at_rest();
        let taken = match iters.take(slot) {
            Some(taken) => taken,
            None => {
                let epoch = iters.epoch();
                let it = self
                    .open
                    .rocks
                    .raw_iterator_cf_opt(self.open.handle(slot)?, ScanIters::read_options());
                // SAFETY: the guard below owns it until it goes back to `scan_iters`, which
                // `Open` declares before its handles and database, or is dropped; meanwhile
                // the guard borrows the `Open` for `'a`.
                Taken::new(unsafe { ScanIters::erase(it) }, epoch)
            }
        };
        drop(at_rest);
        Ok(Some(KeptIterator {
            open: self.open,
            slot,
            it: Some(taken),
        }))
    }

    /// Holds off drains while the guard lives: a drain writes the cache to RocksDB in several
    /// batches ([`DRAIN_BATCH_BYTES`]) under the front's write lock, so an iterator or a
    /// checkpoint that takes its view of RocksDB while holding this sees all of a drain or
    /// none of it (a batch made through the cache stays whole, as it is written straight
    /// through). The caller must hold no lock of the front.
    pub(super) fn at_rest(&self) -> parking_lot::RwLockReadGuard<'a, Front> {
        self.open.front.read()
    }

    /// Drops the iterators kept between scans, so that none holds memtables or files on
    /// through a flush or compaction about to replace them.
    pub(super) fn release_kept_iterators(&self) {
        self.open.scan_iters.clear();
    }
}

/// A RocksDB iterator for one bounded scan ([`Drained::kept_iterator`]); kept for the next
/// scan of its column family when dropped, unless [`KeptIterator::discard`]ed.
pub(super) struct KeptIterator<'a> {
    open: &'a Open,
    slot: usize,
    /// `Some` until dropped or discarded.
    it: Option<Taken>,
}

impl KeptIterator<'_> {
    /// The iterator.
    pub(super) fn get(&mut self) -> &mut RawIter {
        // `it` is `Some` until `discard` or `drop` take it, and both consume the guard.
        &mut self
            .it
            .as_mut()
            .expect("a kept iterator is present until its guard goes")
            .it
    }

    /// Drops the iterator instead of keeping it (it failed).
    pub(super) fn discard(mut self) {
        self.it = None;
    }
}

impl Drop for KeptIterator<'_> {
    fn drop(&mut self) {
        if let Some(it) = self.it.take() {
            self.open.scan_iters.give_back(self.slot, it);
        }
    }
}

/// The front's lock held across a change of RocksDB's data other than a write
/// ([`Open::changing`]).
pub(super) struct Changing<'a> {
    open: &'a Open,
    front: RwLockWriteGuard<'a, Front>,
}

impl<'a> Changing<'a> {
    /// The database.
    pub(super) fn rocks(&self) -> &'a Rocks {
        &self.open.rocks
    }

    /// The handle of the column family in `slot`.
    pub(super) fn handle(&self, slot: usize) -> Result<&'a Handle> {
        self.open.handle(slot)
    }

    /// The write options of the database's writes.
    pub(super) fn write_options(&self) -> &'a WriteOptions {
        &self.open.write.0
    }

    /// The key bounds (`None`: reads are not bounded).
    pub(super) fn bounds(&mut self) -> Option<&mut KeyBounds> {
        self.front.bounds.as_mut()
    }
}

fn too_many_column_families() -> Error {
    Error::Unsupported(format!(
        "more than {} states in one backend",
        MAX_COLUMN_FAMILIES - 1
    ))
}

/// The handle of column family `name` of `rocks`, its lifetime erased.
fn handle(rocks: &Rocks, name: &str) -> Result<Handle> {
    let bound = rocks
        .cf_handle(name)
        .ok_or_else(|| Error::Internal(format!("column family {name} has no handle")))?;
    // SAFETY: this only erases the lifetime that ties the handle to `rocks`. Handles are kept
    // only in `Open::handles`, declared before `Open::rocks`, so every handle is dropped
    // before the database; they are reached only through a live `Open`. Column families are
    // never dropped while rockstate runs.
    Ok(unsafe { std::mem::transmute::<Arc<BoundColumnFamily<'_>>, Handle>(bound) })
}

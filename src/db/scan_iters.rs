//! Iterators kept between bounded scans: per column family one RocksDB iterator that the next
//! scan of a list's or map's entries refreshes and seeks, instead of building a new one.
//!
//! Building a RocksDB iterator (a super version reference, an arena, one child iterator per
//! memtable and level) and tearing it down took a quarter of a list read's time
//! (docs/decisions/0042-kept-scan-iterators.md). `Iterator::Refresh` on a kept iterator only
//! moves its sequence number forward while the column family's super version is the one it
//! holds (new writes to the same memtable are then visible to it), and rebuilds it otherwise.
//!
//! A kept iterator holds its super version: the memtables and SST files of that moment stay
//! allocated and on disk while it rests here. Memtables leave a column family only through
//! this database's writes (a full memtable, or the memory budget's write buffer manager
//! flushing on a write) or through flushes this crate asks for; compactions follow either or
//! a restore's ingestion. So every kept iterator is refreshed once the database has taken an
//! eighth of a memtable's size in writes, and all are dropped before a flush, compaction or
//! checkpoint this crate asks for, before a change of files (ingestion, dropped files, range
//! deletion) and when the database closes; an iterator a scan still used then is dropped
//! instead of kept when that scan ends. A compaction RocksDB starts with no write (periodic
//! compaction) leaves its input files referenced until the next of these. When the last
//! reference to replaced files goes, RocksDB deletes them on a background thread.
//!
//! A kept iterator has no upper bound (its read options are fixed when it is built), so the
//! scan stops at its bound itself. Without the bound RocksDB would skip deleted entries past
//! it: a kept iterator gives up after [`MAX_SKIPPED`] hidden entries in one step
//! (`Incomplete`), and the scan goes on from a new bounded iterator (`Cf::scan`).
//!
//! A read-only database keeps none: RocksDB does not refresh its iterators.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use rocksdb::{DBRawIteratorWithThreadMode, ReadOptions};

use super::Rocks;

/// Deleted or overwritten entries a kept iterator skips before it gives up with
/// `Incomplete`; the scan then runs on a bounded iterator.
pub(super) const MAX_SKIPPED: u64 = 256;

/// A RocksDB iterator whose lifetime is erased (see [`ScanIters`]).
pub(super) type RawIter = DBRawIteratorWithThreadMode<'static, Rocks>;

/// One kept iterator.
struct Kept(RawIter);

// SAFETY: a RocksDB iterator may be used from any thread as long as one thread at a time
// uses it; `Kept` is only reached through its slot's mutex or moved out of it whole.
unsafe impl Send for Kept {}

/// The kept iterators of one database, by column-family slot. It must be declared in
/// [`super::front::Open`] before the column-family handles and the database, so that every
/// iterator is dropped before them: the iterators' lifetimes are erased.
pub(super) struct ScanIters {
    /// Whether iterators are kept at all (not on a read-only database).
    enabled: bool,
    /// Boxed, so a slot without one takes 16 bytes (a database has room for 1024).
    slots: Box<[Mutex<Option<Box<Kept>>>]>,
    /// How many slots hold an iterator (sweeps skip the walk when none does).
    kept: AtomicUsize,
    /// Bytes written since the last sweep.
    written: AtomicUsize,
    /// Bytes of writes after which every kept iterator is refreshed.
    sweep_bytes: usize,
    /// Moves at every [`ScanIters::clear`]: an iterator taken out before it is not kept.
    epoch: AtomicU64,
}

/// An iterator out of [`ScanIters`] for one scan, with the epoch it was taken in.
pub(super) struct Taken {
    /// The iterator.
    pub(super) it: RawIter,
    epoch: u64,
}

impl Taken {
    /// A new iterator `it`, built after [`ScanIters::epoch`] returned `epoch`.
    pub(super) fn new(it: RawIter, epoch: u64) -> Self {
        Taken { it, epoch }
    }
}

impl ScanIters {
    /// Room for `slots` column families, none kept; kept iterators are refreshed after every
    /// `sweep_bytes` of writes (an eighth of the write buffer size: a flushed memtable or a
    /// compacted file then stays referenced for at most that much writing after it left the
    /// column family).
    pub(super) fn new(slots: usize, sweep_bytes: usize, enabled: bool) -> Self {
        ScanIters {
            enabled,
            epoch: AtomicU64::new(0),
            slots: (0..slots).map(|_| Mutex::new(None)).collect(),
            kept: AtomicUsize::new(0),
            written: AtomicUsize::new(0),
            sweep_bytes: sweep_bytes.max(1),
        }
    }

    /// Whether iterators are kept (not on a read-only database).
    pub(super) fn enabled(&self) -> bool {
        self.enabled
    }

    /// The read options of a kept iterator: no bounds, a limit on the hidden entries it
    /// skips, and the files it was the last to hold deleted in the background (a sweep or a
    /// clear may release them while the front's lock is held).
    pub(super) fn read_options() -> ReadOptions {
        let mut read = ReadOptions::default();
        read.set_max_skippable_internal_keys(MAX_SKIPPED);
        read.set_background_purge_on_iterator_cleanup(true);
        read
    }

    /// The current epoch, to be read before a new iterator is built ([`Taken::new`]).
    pub(super) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Erases the lifetime of `it`, an iterator of the database these iterators belong to.
    ///
    /// # Safety
    /// `it` must be given back to this `ScanIters` or dropped while the database it borrows
    /// is open; `ScanIters` itself is dropped before the database (see the type's docs).
    pub(super) unsafe fn erase(it: DBRawIteratorWithThreadMode<'_, Rocks>) -> RawIter {
        // SAFETY: only the lifetime changes; the caller keeps the database alive (above).
        unsafe { std::mem::transmute::<DBRawIteratorWithThreadMode<'_, Rocks>, RawIter>(it) }
    }

    /// The iterator kept for `slot`, refreshed to see every write made before this call;
    /// `None` when none is kept (or its refresh failed, which drops it).
    pub(super) fn take(&self, slot: usize) -> Option<Taken> {
        let epoch = self.epoch.load(Ordering::Acquire);
        let Kept(mut it) = *self.slots.get(slot)?.lock().take()?;
        self.kept.fetch_sub(1, Ordering::Relaxed);
        it.refresh().ok()?;
        Some(Taken { it, epoch })
    }

    /// Keeps `taken` for the next scan of `slot`; drops it when one is kept already or when
    /// the iterators were cleared since it was taken (it may hold what the clear let go of).
    pub(super) fn give_back(&self, slot: usize, taken: Taken) {
        let Some(cell) = self.slots.get(slot) else {
            return;
        };
        let mut cell = cell.lock();
        if cell.is_none() && taken.epoch == self.epoch.load(Ordering::Acquire) {
            *cell = Some(Box::new(Kept(taken.it)));
            self.kept.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts `bytes` written to the database; past `sweep_bytes` since the last sweep,
    /// refreshes every kept iterator (one that fails to refresh is dropped), which lets go
    /// of memtables and files that left the column family since.
    #[inline]
    pub(super) fn wrote(&self, bytes: usize) {
        if self.kept.load(Ordering::Relaxed) == 0 {
            return;
        }
        let total = self.written.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if total < self.sweep_bytes {
            return;
        }
        self.written.store(0, Ordering::Relaxed);
        for cell in self.slots.iter() {
            let mut cell = cell.lock();
            if let Some(kept) = cell.as_mut() {
                if kept.0.refresh().is_err() {
                    *cell = None;
                    self.kept.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Drops every kept iterator, and every one out for a scan once that scan ends.
    pub(super) fn clear(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        if self.kept.load(Ordering::Relaxed) == 0 {
            return;
        }
        for cell in self.slots.iter() {
            if cell.lock().take().is_some() {
                self.kept.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// How many iterators are kept (tests).
    #[cfg(test)]
    pub(super) fn count(&self) -> usize {
        self.kept.load(Ordering::Relaxed)
    }
}

impl Drop for ScanIters {
    fn drop(&mut self) {
        self.clear();
    }
}

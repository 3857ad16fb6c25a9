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
//! allocated and on disk while it rests here. So every kept iterator is refreshed once the
//! database has taken an eighth of a memtable's size in writes (a memtable switch, and the
//! flushes and compactions after it, follow a full memtable), and all are dropped before a
//! flush this crate asks for, before a change of files (ingestion, dropped files, range
//! deletion) and before the database closes.
//!
//! A kept iterator has no upper bound (its read options are fixed when it is built), so the
//! scan stops at its bound itself. Without the bound RocksDB would skip deleted entries past
//! it: a kept iterator gives up after [`MAX_SKIPPED`] hidden entries (`Incomplete`), and the
//! scan starts again on a new iterator bounded as before.

use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use rocksdb::{DBRawIteratorWithThreadMode, ReadOptions};

use super::front::Rocks;

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
    /// Boxed, so a slot without one takes 16 bytes (a database has room for 1024).
    slots: Box<[Mutex<Option<Box<Kept>>>]>,
    /// How many slots hold an iterator (sweeps skip the walk when none does).
    kept: AtomicUsize,
    /// Bytes written since the last sweep.
    written: AtomicUsize,
    /// Bytes of writes after which every kept iterator is refreshed.
    sweep_bytes: usize,
}

impl ScanIters {
    /// Room for `slots` column families, none kept; kept iterators are refreshed after every
    /// `sweep_bytes` of writes (an eighth of the write buffer size: a flushed memtable or a
    /// compacted file then stays referenced for at most that much writing after it left the
    /// column family).
    pub(super) fn new(slots: usize, sweep_bytes: usize) -> Self {
        ScanIters {
            slots: (0..slots).map(|_| Mutex::new(None)).collect(),
            kept: AtomicUsize::new(0),
            written: AtomicUsize::new(0),
            sweep_bytes: sweep_bytes.max(1),
        }
    }

    /// The read options of a kept iterator: no bounds, and a limit on the hidden entries it
    /// skips.
    pub(super) fn read_options() -> ReadOptions {
        let mut read = ReadOptions::default();
        read.set_max_skippable_internal_keys(MAX_SKIPPED);
        read
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
    pub(super) fn take(&self, slot: usize) -> Option<RawIter> {
        let Kept(mut it) = *self.slots.get(slot)?.lock().take()?;
        self.kept.fetch_sub(1, Ordering::Relaxed);
        it.refresh().ok()?;
        Some(it)
    }

    /// Keeps `it` for the next scan of `slot` (drops it when one is kept already).
    pub(super) fn give_back(&self, slot: usize, it: RawIter) {
        let Some(cell) = self.slots.get(slot) else {
            return;
        };
        let mut cell = cell.lock();
        if cell.is_none() {
            *cell = Some(Box::new(Kept(it)));
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

    /// Drops every kept iterator.
    pub(super) fn clear(&self) {
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

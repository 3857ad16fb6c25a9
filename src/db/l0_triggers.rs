//! Level-0 write-stall triggers of column families that an ingestion filled with level-0
//! files.
//!
//! RocksDB slows writes down once a column family holds [`L0_SLOWDOWN`] level-0 files and
//! stops them at [`L0_STOP`] (or at the compaction trigger, when that is higher: [`Base`]),
//! taking so many files for compaction falling behind the writes. An ingestion of files that
//! overlap the data (a changelog restore's log tables over its materialization) adds them all
//! to level 0 at once: 13 tables over a materialization with 11 level-0 files put a restored
//! backend past the slowdown, and its first 250,000 puts took 4 times as long as after an
//! SST-only restore of the same state
//! (`docs/decisions/0038-ingested-level-0-files-do-not-stall-writes.md`). Those files say
//! nothing about compaction keeping up, so the column family's triggers are raised above them
//! ([`L0Triggers::raise_for`]) until compaction has taken level 0 back below the slowdown
//! count; writes then set them back ([`L0Triggers::due`]).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use parking_lot::Mutex;

/// RocksDB's default `level0_slowdown_writes_trigger`, set explicitly so it is known here.
pub(crate) const L0_SLOWDOWN: u64 = 20;
/// RocksDB's default `level0_stop_writes_trigger`.
pub(crate) const L0_STOP: u64 = 36;

/// Writes between two looks at the raised column families' level 0 (each look reads a
/// RocksDB property, which takes the database's mutex).
const WRITES_PER_CHECK: u32 = 64;

/// A database's own level-0 triggers, as RocksDB applies them: RocksDB's defaults, raised to
/// the compaction trigger where that is higher (RocksDB never slows down before it compacts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Base {
    /// `level0_slowdown_writes_trigger`.
    pub(crate) slowdown: u64,
    /// `level0_stop_writes_trigger`.
    pub(crate) stop: u64,
}

impl Base {
    /// The triggers of a column family whose level-0 compaction starts at
    /// `compaction_trigger` files.
    pub(crate) fn new(compaction_trigger: i32) -> Self {
        let slowdown = L0_SLOWDOWN.max(u64::try_from(compaction_trigger).unwrap_or(0));
        Base {
            slowdown,
            stop: L0_STOP.max(slowdown),
        }
    }

    /// The triggers for a column family holding `l0` level-0 files: these, or, once `l0`
    /// reaches the slowdown count, the slowdown 8 files above `l0` and the stop 16 above
    /// that: room for the flushes made while compaction takes the ingested files.
    pub(super) fn for_level0(self, l0: u64) -> Base {
        if l0 < self.slowdown {
            return self;
        }
        let slowdown = l0 + 8;
        Base {
            slowdown,
            stop: (slowdown + 16).max(self.stop),
        }
    }

    /// RocksDB's option strings for these triggers.
    pub(super) fn options(self) -> [(&'static str, String); 2] {
        [
            ("level0_slowdown_writes_trigger", self.slowdown.to_string()),
            ("level0_stop_writes_trigger", self.stop.to_string()),
        ]
    }
}

/// The column families (by slot) whose triggers an ingestion raised.
#[derive(Debug)]
pub(super) struct L0Triggers {
    base: Base,
    /// Whether any slot is raised: the only thing a write reads while none is.
    any: AtomicBool,
    /// Writes since the last look.
    writes: AtomicU32,
    /// The raised slots and the triggers each was given.
    slots: Mutex<Vec<(usize, Base)>>,
}

impl L0Triggers {
    /// The triggers of a database whose own are `base`, its `column_families` opened with
    /// `opened_with` (raised from the start where that is higher than `base`).
    pub(super) fn new(base: Base, opened_with: Base, column_families: usize) -> Self {
        let slots: Vec<(usize, Base)> = if opened_with.slowdown > base.slowdown {
            (0..column_families).map(|s| (s, opened_with)).collect()
        } else {
            Vec::new()
        };
        L0Triggers {
            base,
            any: AtomicBool::new(!slots.is_empty()),
            writes: AtomicU32::new(0),
            slots: Mutex::new(slots),
        }
    }

    /// The database's own triggers.
    pub(super) fn base(&self) -> Base {
        self.base
    }

    /// Column family `slot` holds (or is about to hold) `l0` level-0 files put there by an
    /// ingestion or a restore: the triggers to set, when `l0` reaches the slowdown count and
    /// the slot's triggers are not that high yet (the slot is then raised until
    /// [`L0Triggers::due`] finds it back below), else `None`.
    pub(super) fn raise_for(&self, slot: usize, l0: u64) -> Option<Base> {
        if l0 < self.base.slowdown {
            return None;
        }
        let wanted = self.base.for_level0(l0);
        let mut slots = self.slots.lock();
        match slots.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, set)) if set.slowdown >= wanted.slowdown => return None,
            Some((_, set)) => *set = wanted,
            None => slots.push((slot, wanted)),
        }
        self.any.store(true, Ordering::Release);
        Some(wanted)
    }

    /// Called after each write: every [`WRITES_PER_CHECK`] writes while a slot is raised,
    /// the raised slots, for the caller to look at their level 0 and, once one is below the
    /// slowdown count, set [`L0Triggers::base`] back and call [`L0Triggers::settled`]. Empty
    /// otherwise (one atomic load when nothing is raised).
    #[inline]
    pub(super) fn due(&self) -> Vec<usize> {
        if !self.any.load(Ordering::Acquire) {
            return Vec::new();
        }
        if !self
            .writes
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(WRITES_PER_CHECK)
        {
            return Vec::new();
        }
        self.slots.lock().iter().map(|&(s, _)| s).collect()
    }

    /// Column family `slot` is back below the slowdown count, its triggers the base again.
    pub(super) fn settled(&self, slot: usize) {
        let mut slots = self.slots.lock();
        slots.retain(|&(s, _)| s != slot);
        if slots.is_empty() {
            self.any.store(false, Ordering::Release);
        }
    }

    /// The raised slots (tests).
    #[cfg(test)]
    pub(super) fn raised(&self) -> Vec<usize> {
        self.slots.lock().iter().map(|&(s, _)| s).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triggers_rise_above_an_ingested_level_0_and_come_back() {
        let base = Base::new(4);
        assert_eq!((base.slowdown, base.stop), (L0_SLOWDOWN, L0_STOP));
        let t = L0Triggers::new(base, base, 3);
        assert!(t.raise_for(1, L0_SLOWDOWN - 1).is_none());
        assert!(t.due().is_empty());
        let raised = t.raise_for(1, 24).expect("24 files reach the slowdown");
        assert_eq!((raised.slowdown, raised.stop), (32, 48));
        // Raised already: as many files again, or fewer, change nothing; more raise further.
        assert!(t.raise_for(1, 24).is_none());
        assert!(t.raise_for(1, 21).is_none());
        assert_eq!(t.raise_for(1, 26).map(|b| b.slowdown), Some(34));
        assert_eq!(base.for_level0(40).stop, 64);
        assert_eq!(
            raised.options()[0],
            ("level0_slowdown_writes_trigger", "32".to_string())
        );
        // The first write looks, the next ones until the period ends do not.
        assert_eq!(t.due(), vec![1]);
        for _ in 1..WRITES_PER_CHECK {
            assert!(t.due().is_empty());
        }
        assert_eq!(t.due(), vec![1]);
        t.raise_for(3, 30);
        assert_eq!(t.raised(), vec![1, 3]);
        t.settled(1);
        assert_eq!(t.raised(), vec![3]);
        t.settled(3);
        assert!(t.raised().is_empty());
        for _ in 0..2 * WRITES_PER_CHECK {
            assert!(t.due().is_empty());
        }
    }

    #[test]
    fn a_restored_database_opens_raised() {
        let base = Base::new(4);
        let opened_with = base.for_level0(30);
        let t = L0Triggers::new(base, opened_with, 2);
        assert_eq!(t.raised(), vec![0, 1]);
        // Up to the files it was opened for, nothing is raised again.
        assert!(t.raise_for(1, 30).is_none());
        assert_eq!(t.raise_for(1, 31).map(|b| b.slowdown), Some(39));
        assert_eq!(t.due(), vec![0, 1]);
    }

    #[test]
    fn a_compaction_trigger_above_the_slowdown_raises_the_base() {
        // RocksDB slows down no earlier than it compacts.
        let base = Base::new(64);
        assert_eq!((base.slowdown, base.stop), (64, 64));
        let t = L0Triggers::new(base, base, 1);
        assert!(t.raise_for(0, 40).is_none());
        let raised = t.raise_for(0, 64).expect("at the base's slowdown");
        assert_eq!((raised.slowdown, raised.stop), (72, 88));
        assert_eq!(Base::new(-1), Base::new(0));
    }
}

//! Key bounds: for each column family and key group, a key at least as large as every key
//! stored in that group, so a point read of a key above it is answered "absent" without
//! asking RocksDB, and so is a scan of one list or map (a range inside one group) that starts
//! above it, once the write cache is drained.
//!
//! Keys start with their key group, so the keys `N..2N` a dedup or a join looks up when ids,
//! sequence numbers or event times grow are, in each group, above every stored key; yet each
//! such read costs RocksDB a filter probe per flushed (L0) file, since those span every group,
//! and a file search per level. Raw keys without the prefix pay neither: their files' key
//! ranges already rule such keys out. A bound per group gives the prefixed layout the same
//! shortcut, and a cheaper one (no RocksDB call at all).
//!
//! This module only holds the data; `db` owns it (under the same lock as the write cache) and
//! keeps it true for the keys in RocksDB (a point read looks in the write cache first, and
//! only a key not cached is checked against the bound):
//! - a drain of the write cache raises each group's bound to the largest key it puts there
//!   (once per group and batch: the batch is sorted), under the lock it holds across its
//!   RocksDB write; a put that goes straight to RocksDB (cache off) raises the bound before
//!   it gets there. Deletes need not lower it: a bound may be higher than the largest stored
//!   key, never lower;
//! - a bound starts *unknown* when the database is opened, and every bound of a column family
//!   becomes unknown again when keys enter it around the puts (SST ingestion): from before
//!   RocksDB takes the files until the ingestion ends, no bound of it is learned, so reads
//!   meanwhile ask RocksDB, which takes the files all at once. An unknown bound still
//!   collects raises, and a read that finds it unknown asks RocksDB for the group's largest
//!   key ([`KeyBounds::learn`]) and installs the larger of the two, unless the column family
//!   lost its bounds again meanwhile (its loss count changed), in which case the answer is
//!   dropped and the next read asks again;
//! - removals (deletes, range deletes, dropped files, TTL compaction) leave bounds as they
//!   are.
//!
//! Reads of keys below a group's bound (random missing keys, every existing key) cost one
//! hash lookup and one key comparison more and go to RocksDB as before; a drain costs one
//! bound update per group it writes to. The bounds help only where keys grow bytewise:
//! big-endian integers (Flink's serializers and the raw-bytes API's users write them), not
//! the typed API's postcard varints. Memory: one entry per column family and key group
//! touched, holding one key.

use std::hash::{BuildHasherDefault, Hasher};

use hashbrown::HashMap;

/// What a bound says about a key ([`KeyBounds::check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// The key is above every stored key of its group: it is not stored.
    Absent,
    /// The key may be stored: ask RocksDB.
    Maybe,
    /// The group's bound is not known: learn it ([`KeyBounds::learn`]) with the column
    /// family's loss count given here, then ask RocksDB.
    Unknown {
        /// The column family's loss count when the bound was found unknown.
        losses: u64,
    },
}

/// One group's bound.
#[derive(Debug, Default)]
struct Bound {
    /// Whether `max` is at least every key of the group in RocksDB. When not, it is at least
    /// every key raised since the bound was lost (or since the database was opened).
    known: bool,
    /// The largest key counted; empty when none is (stored keys are never empty: they are at
    /// least a prefix long).
    max: Vec<u8>,
}

/// Mixes a (slot, key group) map key into a hash whose low bits (the bucket) and high bits
/// (hashbrown's tag) both depend on every input bit (splitmix64's finalizer).
#[derive(Debug, Default, Clone, Copy)]
struct SlotGroupHasher(u64);

impl Hasher for SlotGroupHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }

    fn finish(&self) -> u64 {
        let mut z = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The key bounds of every column family of one database. A column family is named by its
/// slot, as in the write cache.
#[derive(Debug)]
pub(crate) struct KeyBounds {
    /// Bytes of the key-group prefix every key starts with (1 or 2).
    prefix: usize,
    /// Keyed by `slot << 16 | group`.
    bounds: HashMap<u64, Bound, BuildHasherDefault<SlotGroupHasher>>,
    /// Per slot (missing: 0): how many times the column family lost its bounds, and how many
    /// ingestions into it are running.
    slots: Vec<SlotState>,
}

/// A column family's loss count and running ingestions.
#[derive(Debug, Default, Clone, Copy)]
struct SlotState {
    losses: u64,
    ingesting: u32,
}

impl KeyBounds {
    /// Bounds of keys that start with a `prefix`-byte key group (1 or 2), all unknown.
    pub(crate) fn new(prefix: usize) -> Self {
        debug_assert!(prefix == 1 || prefix == 2);
        KeyBounds {
            prefix,
            bounds: HashMap::default(),
            slots: Vec::new(),
        }
    }

    /// The key group `key` starts with, or `None` for a key shorter than the prefix (such
    /// keys are not bounded).
    pub(crate) fn group(&self, key: &[u8]) -> Option<u16> {
        match (self.prefix, key) {
            (1, [g, ..]) => Some(u16::from(*g)),
            (2, [a, b, ..]) => Some(u16::from_be_bytes([*a, *b])),
            _ => None,
        }
    }

    fn map_key(slot: usize, group: u16) -> u64 {
        (slot as u64) << 16 | u64::from(group)
    }

    fn slot(&self, slot: usize) -> SlotState {
        self.slots.get(slot).copied().unwrap_or_default()
    }

    fn slot_mut(&mut self, slot: usize) -> &mut SlotState {
        if self.slots.len() <= slot {
            self.slots.resize(slot + 1, SlotState::default());
        }
        &mut self.slots[slot]
    }

    /// What the bound of `key`'s group says about `key` in column family `slot`.
    #[inline]
    pub(crate) fn check(&self, slot: usize, key: &[u8]) -> Check {
        let Some(group) = self.group(key) else {
            return Check::Maybe;
        };
        match self.bounds.get(&Self::map_key(slot, group)) {
            Some(b) if b.known => {
                if key > b.max.as_slice() {
                    Check::Absent
                } else {
                    Check::Maybe
                }
            }
            _ => Check::Unknown {
                losses: self.slot(slot).losses,
            },
        }
    }

    /// Counts a put of `key` in column family `slot`: called before the key is in RocksDB,
    /// or under the lock that keeps readers out until it is.
    #[inline]
    pub(crate) fn raise(&mut self, slot: usize, key: &[u8]) {
        let Some(group) = self.group(key) else {
            return;
        };
        let b = self.bounds.entry(Self::map_key(slot, group)).or_default();
        if key > b.max.as_slice() {
            b.max.clear();
            b.max.extend_from_slice(key);
        }
    }

    /// Called before SST files are ingested into column family `slot`: every bound of it
    /// becomes unknown and none is learned until [`KeyBounds::end_ingest`], so while RocksDB
    /// takes the files (all at once) every read asks RocksDB and sees all of them or none.
    pub(crate) fn begin_ingest(&mut self, slot: usize) {
        self.lose(slot);
        self.slot_mut(slot).ingesting += 1;
    }

    /// Called after an ingestion into column family `slot` ends (with an error too): bounds
    /// may be learned again, from answers asked for from now on only.
    pub(crate) fn end_ingest(&mut self, slot: usize) {
        let state = self.slot_mut(slot);
        state.ingesting = state.ingesting.saturating_sub(1);
        self.lose(slot);
    }

    /// Makes every bound of column family `slot` unknown and voids answers asked for before.
    /// What each bound counted stays counted (those keys are in RocksDB unless removed since).
    fn lose(&mut self, slot: usize) {
        self.slot_mut(slot).losses += 1;
        for (k, b) in self.bounds.iter_mut() {
            if (k >> 16) as usize == slot {
                b.known = false;
            }
        }
    }

    /// Installs the bound of `group` in column family `slot` from `stored_max`, the largest
    /// key RocksDB held in the group when asked (`None`: no key), which the caller asked for
    /// after finding the bound unknown with loss count `losses`. Ignored while an ingestion
    /// into the column family runs, when the column family lost its bounds since (RocksDB's
    /// answer may predate keys that entered since), or when another reader installed the
    /// bound first.
    pub(crate) fn learn(
        &mut self,
        slot: usize,
        group: u16,
        losses: u64,
        stored_max: Option<&[u8]>,
    ) {
        let state = self.slot(slot);
        if state.losses != losses || state.ingesting > 0 {
            return;
        }
        let b = self.bounds.entry(Self::map_key(slot, group)).or_default();
        if b.known {
            return;
        }
        if let Some(m) = stored_max {
            if m > b.max.as_slice() {
                b.max.clear();
                b.max.extend_from_slice(m);
            }
        }
        b.known = true;
    }

    /// The keys of `group`: from its prefix (inclusive) to the next group's prefix
    /// (exclusive; `None` past the last prefix).
    pub(crate) fn group_range(&self, group: u16) -> (Vec<u8>, Option<Vec<u8>>) {
        if self.prefix == 1 {
            let g = group as u8;
            (vec![g], g.checked_add(1).map(|n| vec![n]))
        } else {
            (
                group.to_be_bytes().to_vec(),
                group.checked_add(1).map(|n| n.to_be_bytes().to_vec()),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_is_unknown_until_learned_and_then_answers_above_it() {
        let mut b = KeyBounds::new(1);
        assert_eq!(b.check(0, b"\x05abc"), Check::Unknown { losses: 0 });
        b.learn(0, 5, 0, Some(b"\x05m"));
        assert_eq!(b.check(0, b"\x05m"), Check::Maybe);
        assert_eq!(b.check(0, b"\x05a"), Check::Maybe);
        assert_eq!(b.check(0, b"\x05n"), Check::Absent);
        assert_eq!(b.check(0, b"\x05m\x00"), Check::Absent);
        // Other groups and other column families are unknown still.
        assert_eq!(b.check(0, b"\x06a"), Check::Unknown { losses: 0 });
        assert_eq!(b.check(1, b"\x05n"), Check::Unknown { losses: 0 });
        // Keys shorter than the prefix are never bounded.
        assert_eq!(b.check(0, b""), Check::Maybe);
    }

    #[test]
    fn a_learned_empty_group_holds_nothing_until_a_put() {
        let mut b = KeyBounds::new(2);
        b.learn(3, 0x0102, 0, None);
        assert_eq!(b.check(3, b"\x01\x02"), Check::Absent);
        assert_eq!(b.check(3, b"\x01\x02z"), Check::Absent);
        b.raise(3, b"\x01\x02k");
        assert_eq!(b.check(3, b"\x01\x02k"), Check::Maybe);
        assert_eq!(b.check(3, b"\x01\x02l"), Check::Absent);
        // A lower put does not lower it.
        b.raise(3, b"\x01\x02a");
        assert_eq!(b.check(3, b"\x01\x02j"), Check::Maybe);
    }

    #[test]
    fn puts_while_unknown_count_when_the_bound_is_learned() {
        let mut b = KeyBounds::new(1);
        b.raise(0, b"\x01z");
        assert_eq!(b.check(0, b"\x01a"), Check::Unknown { losses: 0 });
        // RocksDB's answer predates the put (a drain raised the bound after the seek).
        b.learn(0, 1, 0, Some(b"\x01c"));
        assert_eq!(b.check(0, b"\x01z"), Check::Maybe);
        assert_eq!(b.check(0, b"\x01za"), Check::Absent);
    }

    #[test]
    fn an_ingestion_makes_every_bound_of_the_column_family_unknown_and_voids_answers_begun_before_its_end(
    ) {
        let mut b = KeyBounds::new(1);
        b.learn(0, 1, 0, Some(b"\x01c"));
        b.learn(0, 2, 0, Some(b"\x02c"));
        b.learn(1, 1, 0, Some(b"\x01c"));
        let Check::Unknown { losses } = b.check(0, b"\x03a") else {
            panic!("group 3 was never learned");
        };
        b.begin_ingest(0);
        assert_eq!(b.check(0, b"\x01z"), Check::Unknown { losses: 1 });
        assert_eq!(b.check(0, b"\x02z"), Check::Unknown { losses: 1 });
        assert_eq!(b.check(1, b"\x01z"), Check::Absent);
        // An answer asked for before the ingestion is dropped...
        b.learn(0, 3, losses, Some(b"\x03c"));
        assert_eq!(b.check(0, b"\x03z"), Check::Unknown { losses: 1 });
        // ...so is one asked for while it runs (RocksDB may not have the files yet)...
        b.learn(0, 3, 1, Some(b"\x03c"));
        assert_eq!(b.check(0, b"\x03z"), Check::Unknown { losses: 1 });
        b.end_ingest(0);
        b.learn(0, 3, 1, Some(b"\x03c"));
        assert_eq!(b.check(0, b"\x03z"), Check::Unknown { losses: 2 });
        // ...one asked for after it is installed, above what was put before.
        b.raise(0, b"\x01x");
        b.learn(0, 1, 2, Some(b"\x01d"));
        assert_eq!(b.check(0, b"\x01x"), Check::Maybe);
        assert_eq!(b.check(0, b"\x01y"), Check::Absent);
    }

    #[test]
    fn group_ranges_cover_one_group_each() {
        let b1 = KeyBounds::new(1);
        assert_eq!(b1.group_range(7), (vec![7], Some(vec![8])));
        assert_eq!(b1.group_range(255), (vec![255], None));
        let b2 = KeyBounds::new(2);
        assert_eq!(b2.group_range(0x01ff), (vec![1, 0xff], Some(vec![2, 0])));
        assert_eq!(b2.group_range(u16::MAX), (vec![0xff, 0xff], None));
    }

    #[test]
    fn slots_and_groups_do_not_share_bounds() {
        let mut b = KeyBounds::new(2);
        // Same low 16 bits of the map key in different slots.
        b.learn(0, 0x0001, 0, Some(b"\x00\x01a"));
        b.learn(1, 0x0001, 0, Some(b"\x00\x01z"));
        assert_eq!(b.check(0, b"\x00\x01b"), Check::Absent);
        assert_eq!(b.check(1, b"\x00\x01b"), Check::Maybe);
    }
}

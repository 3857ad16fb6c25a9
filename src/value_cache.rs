//! The value cache: the values a backend most recently read from RocksDB (and, as
//! `DbOptions::value_cache_writes` says, wrote to it), kept in memory in the order they came
//! and served to later point reads without asking RocksDB.
//!
//! A point read that RocksDB answers walks its read path: the memtables, a filter probe per
//! flushed file, an index search and a data-block search in the file that holds the key, a
//! block-cache lookup for that block. That costs microseconds even when every block is
//! cached, and Flink's RocksDB backend pays it on every state access (its users see reads
//! several times slower than on the heap backend). Streaming state is mostly read soon after
//! it was written, and mostly by a read-modify-write (a window's aggregate, a counter, a dedup
//! set): this cache keeps the last values read, refreshed by the writes that follow them, as
//! many as its memory holds, and answers a point read with one hash lookup. Kafka Streams'
//! record cache and RisingWave's operator caches sit in front of their state stores for the
//! same reason.
//!
//! This module only holds the data. `db` owns the cache, under the same lock as the write
//! cache, and keeps one rule: an entry always equals what RocksDB holds for its key, once the
//! write cache has nothing newer for the key (reads look in the write cache first).
//! - Every write to RocksDB holds the lock exclusively from before RocksDB takes it until
//!   it is recorded here: a drain of the write cache, and a write that bypasses the write
//!   cache (the WAL on). A recorded put replaces the key's entry, and under
//!   [`ValueCacheWrites::Fill`] becomes the entry of a key the cache did not hold; a delete
//!   drops the key.
//! - A value RocksDB returns to a point read (which reads RocksDB without the lock) is added
//!   only if nothing was recorded or emptied since the read looked here
//!   ([`ValueCache::epoch`]), so a read that raced a write cannot put back an older value.
//! - Anything else that changes RocksDB's data (range deletion, dropped files, ingestion)
//!   empties the cache and holds the lock across the change.
//! - A state whose reads may return expired entries until compaction drops them
//!   (`Visibility::ReturnExpiredIfNotCleanedUp`) is kept out ([`ValueCache::keep_out`]):
//!   its compaction filter changes RocksDB's data behind the lock. For every other TTL
//!   state, a cached expired value reads as absent, as RocksDB's copy would.
//!
//! **Layout.** Entries are appended to one byte ring at an ever-growing logical position
//! (the ring's offset is that position modulo its length): a 12-byte header (column-family
//! slot, key and value lengths) and the key and value, padded to 8 bytes. An entry that
//! would cross the ring's end starts at the next lap instead. Writing at the head overwrites
//! the oldest bytes, so eviction is free: an entry is intact while its position is within
//! one ring length of the head (and above `floor`, see below). One open-addressing index
//! (linear probing, deletion by backward shift) maps (slot, key) to the position of its
//! latest entry, with 32 bits of the hash beside it (they place the slot and spare most key
//! comparisons). A later write of a key takes over its index slot; a slot whose entry was
//! overwritten stays until a probe reuses it or a sweep (when the index is half full)
//! drops it. So a write costs one index probe and a copy into the ring, with no
//! allocation, and the memory held is exactly the ring and the index, fixed by the limit
//! and allocated with the first entry: a quarter of it at most for the index, the rest for
//! the ring. When small entries fill the index before the ring, `floor`
//! rises by an eighth of the ring at a time (dropping the oldest entries) until a sweep
//! leaves room. An entry above an eighth of the ring is not kept (one large value would
//! empty the cache).
//! Its bytes come out of the memory budget, as the write cache's do.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::options::{ValueCacheAdmission, ValueCacheWrites};
use crate::write_cache::{HashedWrite, KeyHasher};
use crate::zero_pages::ZeroPages;

/// Bytes of an entry's header: slot (4), key length (4), value length (4).
const HEADER: usize = 12;

/// Entries start at multiples of this.
const ALIGN: usize = 8;

/// Index slots at the least: a smaller limit leaves the cache off.
const MIN_SLOTS: usize = 64;

/// Index slots at most: the 32 hash bits a slot keeps place it (24 of them at the most
/// slots) and spare key comparisons (the rest).
const MAX_SLOTS: usize = 1 << 24;

/// The index is swept at least once per this many bytes written, so a stale slot's 32-bit
/// position (in units of [`ALIGN`], so it wraps every 32 GiB) is never mistaken for a live one.
const SWEEP_BYTES: u64 = 8 << 30;

/// Ring bytes of an entry with `data` key and value bytes.
fn entry_size(data: usize) -> usize {
    (HEADER + data).div_ceil(ALIGN) * ALIGN
}

/// The 32 hash bits an index slot keeps; bit 0 is set so no slot is 0 (empty).
fn tag(hash: u64) -> u64 {
    (hash & 0xffff_ffff) | 1
}

/// An index slot: the low 32 bits of the entry's position in units of [`ALIGN`], above its
/// hash's [`tag`].
fn index_slot(pos: u64, hash: u64) -> u64 {
    ((pos / ALIGN as u64) << 32) | tag(hash)
}

/// TinyLFU's doorkeeper, the admission filter of values read from RocksDB
/// ([`ValueCacheAdmission::SecondRead`]) and of values written to it
/// ([`ValueCacheWrites::SecondWrite`], a doorkeeper of its own): one bit per hash bucket, set
/// by the first read (write) of a key the cache did not hold; a value is admitted when its
/// bit was set already. The
/// bits are atomics, so the check runs under the front's read lock and the exclusive lock is
/// taken only for values that will be kept. When an eighth of the bits are set they are all
/// cleared, so it remembers about the last `bits / 8` keys read (for 100-byte values about as
/// many as the ring holds).
#[derive(Debug, Default)]
struct Doorkeeper {
    /// A power of two of words (or none: every read is admitted).
    words: Vec<AtomicU64>,
    set: AtomicUsize,
    /// Bits set at which all are cleared.
    reset_at: usize,
}

impl Doorkeeper {
    /// Two bits per index slot (so a byte per four slots).
    fn new(index_slots: usize) -> Self {
        let words = (index_slots * 2 / 64).max(1);
        Doorkeeper {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            set: AtomicUsize::new(0),
            reset_at: (words * 64 / 8).max(1),
        }
    }

    fn bytes(&self) -> usize {
        self.words.len() * std::mem::size_of::<AtomicU64>()
    }

    /// Whether a read of the key with `hash` was seen since the last clear; marks it seen.
    /// Concurrent readers may race a clear: a key then reads as seen or unseen once more
    /// than it should, which admits or defers one value and breaks nothing.
    fn seen(&self, hash: u64) -> bool {
        if self.words.is_empty() {
            return true;
        }
        // The high half of the hash: the index places slots by the low half.
        let bit = (hash >> 32) as usize & (self.words.len() * 64 - 1);
        let (word, mask) = (&self.words[bit / 64], 1u64 << (bit % 64));
        if word.load(Ordering::Relaxed) & mask != 0 {
            return true;
        }
        word.fetch_or(mask, Ordering::Relaxed);
        // Exactly one reader sees the count reach `reset_at`, and it clears.
        if self.set.fetch_add(1, Ordering::Relaxed) + 1 == self.reset_at {
            for w in &self.words {
                w.store(0, Ordering::Relaxed);
            }
            self.set.store(0, Ordering::Relaxed);
        }
        false
    }
}

/// Cached values of every column family of one database, keyed by (slot, key) as the write
/// cache is.
#[derive(Debug)]
pub(crate) struct ValueCache {
    /// `ring_len` bytes from the first entry on, empty before.
    ring: ZeroPages<u8>,
    ring_len: usize,
    /// Logical position of the next entry; starts at one ring length, so the oldest intact
    /// position, `head - ring_len`, is never below 0.
    head: u64,
    /// Entries below this position are dropped even if their bytes are intact.
    floor: u64,
    /// `head` at the last sweep.
    swept_at: u64,
    /// Open addressing, linear probing; 0 is an empty slot. Its length is a power of two.
    index: ZeroPages<u64>,
    max_slots: usize,
    /// Non-empty index slots, stale ones included.
    occupied: usize,
    hasher: KeyHasher,
    limit: usize,
    epoch: u64,
    /// Slots whose values are never cached ([`ValueCache::keep_out`]).
    kept_out: Vec<bool>,
    admission: ValueCacheAdmission,
    writes: ValueCacheWrites,
    /// Empty unless `admission` is [`ValueCacheAdmission::SecondRead`] and the cache is on.
    door: Doorkeeper,
    /// The keys written lately, for [`ValueCacheWrites::SecondWrite`]: empty unless `writes`
    /// says so and the cache is on.
    write_door: Doorkeeper,
}

impl ValueCache {
    /// An empty cache holding at most `limit` bytes (0, or too little for a useful ring: the
    /// cache is off and holds nothing). `hasher` is the write cache's, so one hash of a key
    /// serves both.
    pub(crate) fn new(
        limit: usize,
        hasher: KeyHasher,
        admission: ValueCacheAdmission,
        writes: ValueCacheWrites,
    ) -> Self {
        // The index takes at most a quarter, in a power of two of slots.
        let quarter_slots = limit / 4 / std::mem::size_of::<u64>();
        let max_slots = if quarter_slots < MIN_SLOTS {
            0
        } else {
            (1usize << (usize::BITS - 1 - quarter_slots.leading_zeros())).min(MAX_SLOTS)
        };
        let door = match admission {
            ValueCacheAdmission::SecondRead if max_slots > 0 => Doorkeeper::new(max_slots),
            _ => Doorkeeper::default(),
        };
        let write_door = match writes {
            ValueCacheWrites::SecondWrite if max_slots > 0 => Doorkeeper::new(max_slots),
            _ => Doorkeeper::default(),
        };
        let ring_len = if max_slots == 0 {
            0
        } else {
            // Each doorkeeper takes a byte per four index slots (1/32 of the index), out of
            // the ring.
            (limit - max_slots * std::mem::size_of::<u64>() - door.bytes() - write_door.bytes())
                / ALIGN
                * ALIGN
        };
        ValueCache {
            ring: ZeroPages::empty(),
            ring_len,
            head: ring_len as u64,
            floor: 0,
            swept_at: ring_len as u64,
            index: ZeroPages::empty(),
            max_slots,
            occupied: 0,
            hasher,
            limit: if max_slots == 0 { 0 } else { limit },
            epoch: 0,
            kept_out: Vec::new(),
            admission,
            writes,
            door,
            write_door,
        }
    }

    /// Whether the cache may hold anything.
    pub(crate) fn is_on(&self) -> bool {
        self.limit > 0
    }

    /// The bytes it may hold (0: off).
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Empties the cache and gives it `limit` bytes from now on; the epoch moves on, so a
    /// read that looked before records nothing.
    pub(crate) fn resize(&mut self, limit: usize) {
        let resized = ValueCache::new(limit, self.hasher.clone(), self.admission, self.writes);
        *self = ValueCache {
            epoch: self.epoch + 1,
            kept_out: std::mem::take(&mut self.kept_out),
            ..resized
        };
    }

    /// The hash of (slot, key) that [`ValueCache::get`] and the `record_` calls take: the
    /// same as the write cache's.
    pub(crate) fn hash(&self, slot: usize, key: &[u8]) -> u64 {
        self.hasher.hash_one((slot, key))
    }

    fn mask(&self) -> usize {
        self.index.len() - 1
    }

    /// The index position where a slot with `tag` starts its probe.
    fn home(&self, tag: u64) -> usize {
        (tag as usize >> 1) & self.mask()
    }

    /// The logical position of a slot's entry, if it is intact (not overwritten, not below
    /// the floor). Stale slots are at most [`SWEEP_BYTES`] plus a ring length old, so the 32
    /// bits they keep name one position within the last 32 GiB.
    fn live(&self, s: u64) -> Option<u64> {
        let head8 = self.head / ALIGN as u64;
        let back = head8.wrapping_sub(s >> 32) & 0xffff_ffff;
        let pos = head8.checked_sub(back)? * ALIGN as u64;
        (pos + self.ring_len as u64 >= self.head && pos >= self.floor).then_some(pos)
    }

    fn offset(&self, pos: u64) -> usize {
        (pos % self.ring_len as u64) as usize
    }

    fn header(&self, at: usize) -> (usize, usize, usize) {
        let word = |i: usize| {
            let mut b = [0; 4];
            b.copy_from_slice(&self.ring[at + i..at + i + 4]);
            u32::from_le_bytes(b) as usize
        };
        (word(0), word(4), word(8))
    }

    /// The index position of (slot, key)'s live slot and the ring offset of its entry.
    fn find(&self, hash: u64, slot: usize, key: &[u8]) -> Option<(usize, usize)> {
        if self.occupied == 0 {
            return None;
        }
        let (tag, mask) = (tag(hash), self.mask());
        let mut i = self.home(tag);
        loop {
            let s = self.index[i];
            if s == 0 {
                return None;
            }
            if s & 0xffff_ffff == tag {
                if let Some(pos) = self.live(s) {
                    let at = self.offset(pos);
                    if self.holds(at, slot, key) {
                        return Some((i, at));
                    }
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Whether the entry at ring offset `at` holds `key` of `slot`.
    fn holds(&self, at: usize, slot: usize, key: &[u8]) -> bool {
        let (s, key_len, _) = self.header(at);
        s == slot && key_len == key.len() && self.ring[at + HEADER..at + HEADER + key_len] == *key
    }

    /// The cached value of `key` in `slot` (`hash` is [`ValueCache::hash`] of them), `None`
    /// when the cache does not hold the key.
    #[inline]
    pub(crate) fn get(&self, hash: u64, slot: usize, key: &[u8]) -> Option<&[u8]> {
        let (_, at) = self.find(hash, slot, key)?;
        let (_, key_len, value_len) = self.header(at);
        let start = at + HEADER + key_len;
        Some(&self.ring[start..start + value_len])
    }

    /// Counts every recorded write and every clear; a read's value is recorded only if this
    /// has not moved since the read looked in the cache.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Records that RocksDB now holds `value` for `key` in `slot` (`None`: no value): the
    /// value replaces the key's entry, or becomes it as [`ValueCacheWrites`] says (a delete
    /// drops the key).
    pub(crate) fn record_write(&mut self, slot: usize, key: &[u8], value: Option<&[u8]>) {
        if !self.is_on() {
            return;
        }
        self.epoch += 1;
        self.store_written(self.hash(slot, key), slot, key, value);
    }

    /// [`ValueCache::store`] for a write: under [`ValueCacheWrites::Refresh`] a put of a key
    /// the cache does not hold leaves it out (the probe that finds it absent is all it costs),
    /// under [`ValueCacheWrites::SecondWrite`] too unless the key was written before within
    /// the doorkeeper's memory.
    /// A cached key is probed again by the store, after its append: the append may sweep the
    /// index, so the slot the lookup found is not kept across it.
    fn store_written(&mut self, hash: u64, slot: usize, key: &[u8], value: Option<&[u8]>) {
        let leave_out = match self.writes {
            ValueCacheWrites::Fill => false,
            ValueCacheWrites::Refresh => value.is_some() && self.find(hash, slot, key).is_none(),
            // The bit is tested only for a key the cache does not hold: a cached key is
            // refreshed whatever the doorkeeper says.
            ValueCacheWrites::SecondWrite => {
                value.is_some()
                    && self.find(hash, slot, key).is_none()
                    && !self.write_door.seen(hash)
            }
        };
        if leave_out {
            return;
        }
        self.store(hash, slot, key, value);
    }

    /// [`ValueCache::record_write`] for each of a drained batch, as (hash, slot, key,
    /// value). The index slots the batch will probe, and the entries they point at, are
    /// loaded a group ahead, so their cache misses overlap instead of coming one after
    /// another.
    pub(crate) fn record_drained<'a>(&mut self, writes: impl Iterator<Item = HashedWrite<'a>>) {
        if !self.is_on() {
            return;
        }
        self.epoch += 1;
        const GROUP: usize = 32;
        let mut group = Vec::with_capacity(GROUP);
        let mut writes = writes.peekable();
        while writes.peek().is_some() {
            group.clear();
            group.extend(writes.by_ref().take(GROUP));
            self.touch(&group);
            for &(hash, slot, key, value) in &group {
                self.store_written(hash, slot, key, value);
            }
        }
    }

    /// Loads the home index slots of `group`'s keys, then the headers of the live entries
    /// whose tags match, so the stores that follow find them in the CPU cache (each round's
    /// loads are independent, so their misses overlap).
    fn touch(&self, group: &[HashedWrite<'_>]) {
        if self.index.is_empty() {
            return;
        }
        let mut sum = 0;
        for w in group {
            sum ^= self.index[self.home(tag(w.0))];
        }
        for w in group {
            let s = self.index[self.home(tag(w.0))];
            if s & 0xffff_ffff == tag(w.0) {
                if let Some(pos) = self.live(s) {
                    sum ^= u64::from(self.ring[self.offset(pos)]);
                }
            }
        }
        std::hint::black_box(sum);
    }

    /// Whether a value RocksDB is about to return for the key with `hash` (which the cache
    /// does not hold) should be recorded: always under [`ValueCacheAdmission::EveryRead`],
    /// on the key's second read within the doorkeeper's memory under
    /// [`ValueCacheAdmission::SecondRead`] (the first marks it). Runs under a shared lock.
    pub(crate) fn admits_read(&self, hash: u64) -> bool {
        self.is_on() && self.door.seen(hash)
    }

    /// Notes that a read found the key with `hash` in the cache: under
    /// [`ValueCacheAdmission::SecondRead`] its doorkeeper bit is set, so a key read often is
    /// admitted again on its first miss after the ring overwrites it, as under
    /// [`ValueCacheAdmission::EveryRead`]. Runs under a shared lock.
    pub(crate) fn note_hit(&self, hash: u64) {
        self.door.seen(hash);
    }

    /// Records a value RocksDB returned for `key` to a read that looked in the cache at
    /// `epoch`; dropped if a write was recorded since (it may be older than that write).
    pub(crate) fn record_read(
        &mut self,
        epoch: u64,
        hash: u64,
        slot: usize,
        key: &[u8],
        value: &[u8],
    ) {
        if !self.is_on() || epoch != self.epoch {
            return;
        }
        self.store(hash, slot, key, Some(value));
    }

    /// Never caches values of `slot` from now on, and forgets what is cached.
    pub(crate) fn keep_out(&mut self, slot: usize) {
        if self.kept_out.len() <= slot {
            self.kept_out.resize(slot + 1, false);
        }
        self.kept_out[slot] = true;
        self.clear();
    }

    /// Forgets everything (RocksDB's data changed other than by a recorded write).
    pub(crate) fn clear(&mut self) {
        self.resize(self.limit);
    }

    /// Bytes held: the ring, the index and the doorkeeper as allocated; at most the limit.
    pub(crate) fn bytes(&self) -> usize {
        self.ring.len()
            + self.index.len() * std::mem::size_of::<u64>()
            + self.door.bytes()
            + self.write_door.bytes()
    }

    /// Number of keys cached (counted over the index).
    pub(crate) fn len(&self) -> usize {
        self.index
            .iter()
            .filter(|&&s| s != 0 && self.live(s).is_some())
            .count()
    }

    /// Makes `value` the entry of `key` (`None`: drops the key). A value too large to keep
    /// drops the key too.
    fn store(&mut self, hash: u64, slot: usize, key: &[u8], value: Option<&[u8]>) {
        let fits = |v: &[u8]| {
            entry_size(key.len() + v.len()) <= self.ring_len / 8
                && self.kept_out.get(slot) != Some(&true)
        };
        let (Some(value), Ok(slot32)) = (value.filter(|v| fits(v)), u32::try_from(slot)) else {
            if let Some((i, _)) = self.find(hash, slot, key) {
                self.remove_slot(i);
                self.occupied -= 1;
            }
            return;
        };
        self.make_index_room();
        let pos = self.append(slot32, key, value);
        // One probe: the key's older slot (taken over), else the first stale or empty one.
        let (tag, mask) = (tag(hash), self.mask());
        let mut i = self.home(tag);
        let mut reuse = None;
        loop {
            let s = self.index[i];
            if s == 0 {
                if reuse.is_none() {
                    self.occupied += 1;
                }
                break;
            }
            match self.live(s) {
                None => {
                    reuse.get_or_insert(i);
                }
                Some(old) => {
                    if s & 0xffff_ffff == tag && self.holds(self.offset(old), slot, key) {
                        // Taken over; a stale slot seen on the way stays for a sweep.
                        reuse = None;
                        break;
                    }
                }
            }
            i = (i + 1) & mask;
        }
        self.index[reuse.unwrap_or(i)] = index_slot(pos, hash);
    }

    /// Writes an entry at the head and returns its position; the bytes it overwrites (the
    /// oldest) are evicted by that alone.
    fn append(&mut self, slot: u32, key: &[u8], value: &[u8]) -> u64 {
        if self.ring.is_empty() {
            // Mapped fresh (`ZeroPages`): a page costs nothing until an entry first reaches
            // it.
            self.ring = ZeroPages::new(self.ring_len);
        }
        let size = entry_size(key.len() + value.len());
        let mut at = self.offset(self.head);
        if at + size > self.ring_len {
            // Not across the end: the rest of this lap stays unused.
            self.head += (self.ring_len - at) as u64;
            at = 0;
        }
        let pos = self.head;
        self.head += size as u64;
        // Both below an eighth of the ring, which is at most 16 GiB (`DbOptions::validate`).
        let (key_len, value_len) = (key.len() as u32, value.len() as u32);
        self.ring[at..at + 4].copy_from_slice(&slot.to_le_bytes());
        self.ring[at + 4..at + 8].copy_from_slice(&key_len.to_le_bytes());
        self.ring[at + 8..at + 12].copy_from_slice(&value_len.to_le_bytes());
        let data = at + HEADER;
        self.ring[data..data + key.len()].copy_from_slice(key);
        self.ring[data + key.len()..data + key.len() + value.len()].copy_from_slice(value);
        if self.head - self.swept_at > SWEEP_BYTES {
            self.sweep();
        }
        pos
    }

    /// Makes sure one more slot fits the index at most half full: sweeps stale slots out,
    /// and if live entries alone fill it, drops the oldest eighth of the ring until they do
    /// not.
    fn make_index_room(&mut self) {
        if self.index.is_empty() {
            self.index = ZeroPages::new(self.max_slots);
        }
        if 2 * (self.occupied + 1) <= self.index.len() {
            return;
        }
        self.sweep();
        while 2 * (self.occupied + 1) > self.index.len() {
            let oldest = self.floor.max(self.head - self.ring_len as u64);
            self.floor = (oldest + self.ring_len as u64 / 8).min(self.head);
            self.sweep();
        }
    }

    /// Drops every stale slot from the index, in place.
    fn sweep(&mut self) {
        self.swept_at = self.head;
        if self.occupied == 0 {
            return;
        }
        // Start after an empty slot (the index is at most half full): every probe run then
        // lies ahead, and a backward shift only moves slots not yet looked at.
        let mask = self.mask();
        let Some(start) = self.index.iter().position(|&s| s == 0) else {
            return;
        };
        for step in 1..=self.index.len() {
            let i = (start + step) & mask;
            while self.index[i] != 0 && self.live(self.index[i]).is_none() {
                self.remove_slot(i);
                self.occupied -= 1;
            }
        }
    }

    /// Empties index position `i`, shifting later slots of the run back so every slot stays
    /// reachable from its home.
    fn remove_slot(&mut self, mut hole: usize) {
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let s = self.index[j];
            if s == 0 {
                break;
            }
            let home = self.home(s & 0xffff_ffff);
            // `s` may fill the hole unless its home lies cyclically in (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.index[hole] = s;
                hole = j;
            }
        }
        self.index[hole] = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache of `limit` bytes under [`ValueCacheAdmission::EveryRead`], filled by every
    /// write ([`ValueCacheWrites::Fill`]), so writes alone can put entries in place.
    fn every_read(limit: usize) -> ValueCache {
        ValueCache::new(
            limit,
            KeyHasher::default(),
            ValueCacheAdmission::EveryRead,
            ValueCacheWrites::Fill,
        )
    }

    /// Adds `key` as a read does that raced nothing.
    fn read(c: &mut ValueCache, key: &[u8], value: &[u8]) {
        c.record_read(c.epoch(), c.hash(0, key), 0, key, value);
    }

    /// The cached value of `key` in `slot`.
    fn get<'a>(c: &'a ValueCache, slot: usize, key: &[u8]) -> Option<&'a [u8]> {
        c.get(c.hash(slot, key), slot, key)
    }

    /// Checks the index: every live slot's entry is found by its key at that slot, one live
    /// slot per key, the counts and bounds hold.
    fn check(c: &ValueCache) {
        let mut keys = std::collections::HashSet::new();
        let mut occupied = 0;
        for (i, &s) in c.index.iter().enumerate() {
            if s == 0 {
                continue;
            }
            occupied += 1;
            if let Some(pos) = c.live(s) {
                let at = c.offset(pos);
                let (slot, key_len, _) = c.header(at);
                let key = c.ring[at + HEADER..at + HEADER + key_len].to_vec();
                let found = c.find(c.hash(slot, &key), slot, &key).map(|f| f.0);
                assert_eq!(found, Some(i), "slot {i}");
                assert!(keys.insert((slot, key)), "one live slot per key");
            }
        }
        assert_eq!(occupied, c.occupied);
        assert_eq!(keys.len(), c.len());
        assert!(c.bytes() <= c.limit, "{} > {}", c.bytes(), c.limit);
        assert!(2 * c.occupied <= c.index.len() || c.index.is_empty());
    }

    #[test]
    fn second_read_admission_admits_a_key_on_its_second_read() {
        let c = ValueCache::new(
            1 << 20,
            KeyHasher::default(),
            ValueCacheAdmission::SecondRead,
            ValueCacheWrites::Fill,
        );
        let h = c.hash(0, b"k");
        assert!(!c.admits_read(h));
        assert!(c.admits_read(h));
        // A key found in the cache is admitted on its first miss after the ring drops it.
        let hot = c.hash(0, b"hot");
        c.note_hit(hot);
        assert!(c.admits_read(hot));
        let every = every_read(1 << 20);
        assert!(every.admits_read(every.hash(0, b"k")));
        let off = every_read(0);
        assert!(!off.admits_read(off.hash(0, b"k")));
    }

    #[test]
    fn the_doorkeeper_forgets_every_key_when_an_eighth_of_its_bits_are_set() {
        let c = ValueCache::new(
            64 * 1024,
            KeyHasher::default(),
            ValueCacheAdmission::SecondRead,
            ValueCacheWrites::Fill,
        );
        let h = c.hash(0, b"k");
        assert!(!c.admits_read(h));
        let mut cleared = false;
        for i in 0u64..(c.door.reset_at as u64 * 16) {
            c.admits_read(c.hash(0, &i.to_le_bytes()));
            if c.door.set.load(Ordering::Relaxed) == 0 {
                cleared = true;
                break;
            }
        }
        assert!(cleared, "the doorkeeper never cleared");
        assert!(!c.admits_read(h), "a cleared doorkeeper remembered a key");
    }

    #[test]
    fn refreshing_writes_replace_cached_keys_and_add_none() {
        let mut c = ValueCache::new(
            1 << 20,
            KeyHasher::default(),
            ValueCacheAdmission::EveryRead,
            ValueCacheWrites::Refresh,
        );
        c.record_write(0, b"k", Some(b"v0"));
        assert_eq!(
            get(&c, 0, b"k"),
            None,
            "a write of a key not cached adds nothing"
        );
        read(&mut c, b"k", b"v0");
        assert_eq!(get(&c, 0, b"k"), Some(&b"v0"[..]), "a read adds its key");
        c.record_write(0, b"k", Some(b"v1"));
        assert_eq!(
            get(&c, 0, b"k"),
            Some(&b"v1"[..]),
            "a write replaces a cached key"
        );
        let epoch = c.epoch();
        c.record_drained(
            [
                (c.hash(0, b"k"), 0, &b"k"[..], Some(&b"v2"[..])),
                (c.hash(0, b"j"), 0, &b"j"[..], Some(&b"w"[..])),
            ]
            .into_iter(),
        );
        assert_eq!(
            get(&c, 0, b"k"),
            Some(&b"v2"[..]),
            "a drain replaces cached keys"
        );
        assert_eq!(get(&c, 0, b"j"), None, "and adds no other");
        // A read that looked before the drain records nothing, as under `Fill`.
        c.record_read(epoch, c.hash(0, b"j"), 0, b"j", b"stale");
        assert_eq!(get(&c, 0, b"j"), None);
        c.record_write(0, b"k", None);
        assert_eq!(get(&c, 0, b"k"), None, "a delete drops the key");
        assert_eq!(c.len(), 0);
        check(&c);
    }

    #[test]
    fn writes_and_reads_add_and_later_ones_replace() {
        let mut c = every_read(1 << 20);
        assert_eq!(get(&c, 0, b"k"), None);
        c.record_write(0, b"k", Some(b"v0"));
        assert_eq!(get(&c, 0, b"k"), Some(&b"v0"[..]), "a write adds its key");
        assert_eq!(get(&c, 1, b"k"), None, "slots are separate");
        c.record_write(0, b"k", Some(b"longer value"));
        assert_eq!(get(&c, 0, b"k"), Some(&b"longer value"[..]));
        assert_eq!(c.len(), 1);
        c.record_write(0, b"k", None);
        assert_eq!(get(&c, 0, b"k"), None, "a delete drops the value");
        assert_eq!(c.len(), 0);
        read(&mut c, b"k", b"again");
        read(&mut c, b"k", b"twice");
        assert_eq!(get(&c, 0, b"k"), Some(&b"twice"[..]), "the later read wins");
        assert_eq!(c.len(), 1);
        check(&c);
    }

    #[test]
    fn a_read_that_raced_a_write_is_not_recorded() {
        let mut c = every_read(1 << 20);
        read(&mut c, b"k", b"old");
        let before = c.epoch();
        c.record_write(0, b"k", None);
        c.record_read(before, c.hash(0, b"k"), 0, b"k", b"old");
        assert_eq!(get(&c, 0, b"k"), None, "the read began before the delete");
        let before = c.epoch();
        c.record_write(0, b"unrelated", Some(b"v"));
        c.record_read(before, c.hash(0, b"k"), 0, b"k", b"old");
        assert_eq!(get(&c, 0, b"k"), None, "any recorded write moves the epoch");
        read(&mut c, b"j", b"read");
        assert_eq!(get(&c, 0, b"j"), Some(&b"read"[..]));
        let before = c.epoch();
        c.clear();
        assert_eq!(get(&c, 0, b"j"), None);
        c.record_read(before, c.hash(0, b"j"), 0, b"j", b"read");
        assert_eq!(get(&c, 0, b"j"), None, "a clear moves the epoch too");
    }

    #[test]
    fn the_oldest_entries_leave_first() {
        let mut c = every_read(1 << 20);
        let fit = c.ring_len / entry_size(4 + 100);
        let n = 2 * fit as u32 + 7;
        for i in 0..n {
            c.record_write(0, &i.to_be_bytes(), Some(&[i as u8; 100]));
        }
        // The newest entries, as many as the ring holds (less the unused end of a lap).
        let kept: Vec<u32> = (0..n)
            .filter(|i| get(&c, 0, &i.to_be_bytes()).is_some())
            .collect();
        assert!(
            kept.len() + 1 >= fit && kept.len() <= fit,
            "{} of {fit}",
            kept.len()
        );
        assert_eq!(kept, (n - kept.len() as u32..n).collect::<Vec<_>>());
        assert_eq!(
            get(&c, 0, &(n - 1).to_be_bytes()),
            Some(&[(n - 1) as u8; 100][..])
        );
        check(&c);
    }

    #[test]
    fn an_oversized_value_is_not_cached_and_drops_the_older_one() {
        let mut c = every_read(64 * 1024);
        read(&mut c, b"k", b"small");
        c.record_write(0, b"k", Some(&[0; 8192]));
        assert_eq!(get(&c, 0, b"k"), None);
        read(&mut c, b"k", &[0; 8192]);
        assert_eq!(get(&c, 0, b"k"), None);
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn a_kept_out_slot_is_never_cached() {
        let mut c = every_read(1 << 20);
        read(&mut c, b"k", b"v");
        c.keep_out(3);
        assert_eq!(
            get(&c, 0, b"k"),
            None,
            "keeping a slot out forgets everything"
        );
        c.record_read(c.epoch(), c.hash(3, b"k"), 3, b"k", b"v");
        c.record_write(3, b"w", Some(b"v"));
        assert_eq!(get(&c, 3, b"k"), None);
        assert_eq!(get(&c, 3, b"w"), None);
        read(&mut c, b"k", b"v");
        assert_eq!(get(&c, 0, b"k"), Some(&b"v"[..]), "other slots are cached");
    }

    #[test]
    fn a_resize_empties_the_cache_and_moves_the_epoch() {
        let mut c = every_read(1 << 20);
        c.keep_out(2);
        read(&mut c, b"k", b"v");
        let before = c.epoch();
        c.resize(64 << 10);
        assert_eq!((c.limit(), c.len(), c.bytes()), (64 << 10, 0, 0));
        c.record_read(before, c.hash(0, b"k"), 0, b"k", b"v");
        assert_eq!(get(&c, 0, b"k"), None, "a read from before the resize");
        c.record_write(2, b"k", Some(b"v"));
        assert_eq!(get(&c, 2, b"k"), None, "slot 2 is still kept out");
        c.record_write(0, b"k", Some(b"v"));
        assert_eq!(get(&c, 0, b"k"), Some(&b"v"[..]));
        c.resize(0);
        assert!(!c.is_on());
        assert_eq!(get(&c, 0, b"k"), None);
    }

    #[test]
    fn an_off_cache_holds_nothing() {
        for limit in [0, 1000] {
            let mut c = every_read(limit);
            assert!(!c.is_on(), "{limit}");
            read(&mut c, b"k", b"v");
            c.record_write(0, b"k", Some(b"v"));
            assert_eq!(get(&c, 0, b"k"), None);
            assert_eq!(c.bytes(), 0);
        }
    }

    #[test]
    fn the_index_stays_within_a_quarter_and_half_full() {
        // Tiny entries: the index, not the ring, bounds the count.
        let mut c = every_read(64 * 1024);
        assert_eq!(c.max_slots, 2048);
        assert!(
            c.ring_len / entry_size(4) > 2048,
            "the ring could hold more"
        );
        for i in 0..10_000u32 {
            c.record_write(0, &i.to_be_bytes(), Some(b""));
            assert!(2 * c.occupied <= c.index.len());
        }
        assert_eq!(c.index.len(), 2048);
        let kept = c.len();
        assert!((512..1024).contains(&kept), "{kept}");
        for i in 10_000 - kept as u32..10_000 {
            assert!(get(&c, 0, &i.to_be_bytes()).is_some(), "{i}");
        }
        check(&c);
    }

    /// Random writes, deletes, reads and clears against a model of every key's latest
    /// write; the cache must never contradict it and its index must stay true.
    fn churn(c: &mut ValueCache, steps: usize) {
        let mut model = std::collections::HashMap::new();
        let mut x: u64 = 1;
        for step in 0..steps {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = [(x % 251) as u8, (x >> 40) as u8 % 3];
            let v = vec![(x >> 8) as u8; (x >> 16) as usize % 300];
            match (x >> 24) % 6 {
                0 => {
                    c.record_write(0, &key, None);
                    model.insert(key, None);
                }
                1 => {
                    if let Some(Some(stored)) = model.get(&key) {
                        let stored: Vec<u8> = Vec::clone(stored);
                        read(c, &key, &stored);
                    }
                }
                2 if step % 5000 == 0 => c.clear(),
                3 => {
                    let hash = c.hash(0, &key);
                    c.record_drained(std::iter::once((hash, 0, &key[..], Some(&v[..]))));
                    model.insert(key, Some(v));
                }
                _ => {
                    c.record_write(0, &key, Some(&v));
                    model.insert(key, Some(v));
                }
            }
            if step % 97 == 0 {
                check(c);
            }
            if step % 1001 == 0 {
                c.sweep();
                assert_eq!(c.occupied, c.len(), "a sweep leaves live slots only");
            }
            for (k, want) in &model {
                if let Some(got) = get(c, 0, k) {
                    assert_eq!(Some(got), want.as_deref(), "step {step}");
                }
            }
        }
        assert!(c.len() > 10, "writes kept keys");
        check(c);
    }

    #[test]
    fn churn_keeps_the_index_and_the_ring_true() {
        churn(&mut every_read(16 * 1024), 40_000);
    }

    #[test]
    fn positions_past_32_bits_of_index_units_read_true() {
        // The index keeps the low 32 bits of a position / 8, so they wrap every 32 GiB
        // written: start just below the first wrap.
        let mut c = every_read(16 * 1024);
        c.head = (1 << 35) - 64 * 1024;
        c.swept_at = c.head;
        churn(&mut c, 20_000);
        assert!(c.head > 1 << 35, "crossed the wrap");
    }
}

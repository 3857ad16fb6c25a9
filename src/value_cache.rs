//! The value cache: values a backend recently read from RocksDB, kept current by its writes
//! and served to later point reads without asking RocksDB.
//!
//! A point read that RocksDB answers walks its read path: the memtables, a filter probe per
//! flushed file, an index search and a data-block search in the file that holds the key, a
//! block-cache lookup for that block. That costs microseconds even when every block is
//! cached, and Flink's RocksDB backend pays it on every state access (its users see reads
//! several times slower than on the heap backend). Keyed workloads are skewed: a hot key's
//! value sits in a block-cache block among a hundred colder entries, so the block cache
//! holds it at a hundred times its size. This cache holds the value alone, found with one
//! hash lookup. RisingWave keeps operator caches in front of its state store for the same
//! reason; Kafka Streams' record cache serves reads too.
//!
//! This module only holds the data. `db` owns the cache, under the same lock as the write
//! cache, and keeps one rule: an entry always equals what RocksDB holds for its key, once the
//! write cache has nothing newer for the key (reads look in the write cache first).
//! - Every write to RocksDB holds the lock exclusively from before RocksDB takes it until
//!   it is recorded here: a drain of the write cache, and a write that bypasses the write
//!   cache (the WAL on). A recorded put replaces the cached value of its key (in place), a
//!   delete drops it; keys not cached are not added (writes would otherwise push out what
//!   reads asked for, and pay for it).
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
//! Eviction is CLOCK (FIFO with a second chance): a hit sets the entry's reference bit
//! (an atomic, so hits need only the shared lock); the oldest entry is dropped when the cache
//! is over its limit, unless its bit is set, in which case it goes to the back with the bit
//! cleared. The limit counts key and value bytes plus [`ENTRY_OVERHEAD`] per entry, which
//! covers the index and queue slots at the most their growth can leave allocated (the index
//! is shrunk and the queue compacted when deletes leave them emptier than that); an entry
//! above an eighth of the limit is not cached (one large value would empty the cache).
//! Its bytes come out of the memory budget, as the write cache's do.

use std::collections::VecDeque;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, Ordering};

use hashbrown::HashTable;

/// Bytes the allocator adds to each entry's key-and-value allocation (glibc: a 16-byte
/// header and rounding).
const ALLOCATION_OVERHEAD: usize = 16;

/// Bytes of one index slot: the entry and its control byte.
const INDEX_SLOT: usize = std::mem::size_of::<Entry>() + 1;

/// Index slots counted per entry. The index grows when more than 7/8 of its slots are
/// taken and then has about 16/7 slots per entry; it is shrunk when it has more than three
/// per entry (plus [`INDEX_BASE_SLOTS`]), so three always covers it.
const INDEX_SLOTS_PER_ENTRY: usize = 3;

/// Index slots counted on top, so a nearly empty cache is not shrunk at every removal.
const INDEX_BASE_SLOTS: usize = 64;

/// Bytes of one queue slot, counted twice: the queue doubles when it is full.
const QUEUE_SLOT: usize = 2 * std::mem::size_of::<u64>();

/// Bytes counted per entry on top of its key and value bytes: its index slots, its queue
/// slot and the allocator's overhead, at the most the containers' growth can cost.
pub(crate) const ENTRY_OVERHEAD: usize =
    INDEX_SLOTS_PER_ENTRY * INDEX_SLOT + QUEUE_SLOT + ALLOCATION_OVERHEAD;

/// One cached value, held in its index slot, so a hit reads the index and the bytes only.
#[derive(Debug)]
struct Entry {
    /// Its position in the queue (see [`ValueCache::queue`]).
    seq: u64,
    slot: u32,
    key_len: u32,
    /// The key's bytes, then the value's.
    bytes: Box<[u8]>,
    /// Set by a hit, cleared when the entry gets its second chance.
    referenced: AtomicBool,
}

impl Entry {
    fn key(&self) -> &[u8] {
        &self.bytes[..self.key_len as usize]
    }
}

/// Cached values of every column family of one database, keyed by (slot, key) as the write
/// cache is.
#[derive(Debug)]
pub(crate) struct ValueCache {
    /// The cached entries, by hash of (slot, key).
    index: HashTable<Entry>,
    /// Eviction order, oldest first: the hash of the entry with sequence number `first + i`
    /// at `i`. The slot of a dropped entry stays until it reaches the front or the queue is
    /// compacted (when such slots outnumber the entries).
    queue: VecDeque<u64>,
    first: u64,
    /// Queue slots whose entry was dropped.
    stale: usize,
    hasher: RandomState,
    /// Key and value bytes of the entries.
    data: usize,
    limit: usize,
    epoch: u64,
    /// Slots whose values are never cached ([`ValueCache::keep_out`]).
    kept_out: Vec<bool>,
}

impl ValueCache {
    /// An empty cache holding at most `limit` bytes (0: the cache is off and holds nothing).
    pub(crate) fn new(limit: usize) -> Self {
        ValueCache {
            index: HashTable::new(),
            queue: VecDeque::new(),
            first: 0,
            stale: 0,
            hasher: RandomState::new(),
            data: 0,
            limit,
            epoch: 0,
            kept_out: Vec::new(),
        }
    }

    /// Whether the cache may hold anything.
    pub(crate) fn is_on(&self) -> bool {
        self.limit > 0
    }

    fn hash(&self, slot: usize, key: &[u8]) -> u64 {
        self.hasher.hash_one((slot, key))
    }

    /// The cached value of `key` in `slot`, `None` when the cache does not hold the key.
    #[inline]
    pub(crate) fn get(&self, slot: usize, key: &[u8]) -> Option<&[u8]> {
        if self.index.is_empty() {
            return None;
        }
        let e = self.index.find(self.hash(slot, key), |e| {
            e.slot as usize == slot && e.key() == key
        })?;
        if !e.referenced.load(Ordering::Relaxed) {
            e.referenced.store(true, Ordering::Relaxed);
        }
        Some(&e.bytes[e.key_len as usize..])
    }

    /// Counts every recorded write and every clear; a read's value is recorded only if this
    /// has not moved since the read looked in the cache.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Records that RocksDB now holds `value` for `key` in `slot` (`None`: no value): a
    /// cached value of the key is replaced (or dropped, for a delete). A key the cache does
    /// not hold is not added: writes are kept only where reads asked for the key.
    pub(crate) fn record_write(&mut self, slot: usize, key: &[u8], value: Option<&[u8]>) {
        if !self.is_on() {
            return;
        }
        self.epoch += 1;
        if !self.index.is_empty() {
            self.store(slot, key, value, false);
        }
    }

    /// Records a value RocksDB returned for `key` to a read that looked in the cache at
    /// `epoch`; dropped if a write was recorded since (it may be older than that write), or
    /// if the key's slot is kept out.
    pub(crate) fn record_read(&mut self, epoch: u64, slot: usize, key: &[u8], value: &[u8]) {
        if !self.is_on() || epoch != self.epoch || self.kept_out.get(slot) == Some(&true) {
            return;
        }
        self.store(slot, key, Some(value), true);
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
        self.epoch += 1;
        self.index = HashTable::new();
        self.queue = VecDeque::new();
        self.first = 0;
        self.stale = 0;
        self.data = 0;
    }

    /// Bytes held, as counted against the limit: the entries' key and value bytes plus
    /// [`ENTRY_OVERHEAD`] each, the slots of dropped entries still queued, and a few spare
    /// index slots. This covers what the containers have allocated, however they grew.
    pub(crate) fn bytes(&self) -> usize {
        let base = if self.index.allocation_size() > 0 {
            INDEX_BASE_SLOTS * INDEX_SLOT
        } else {
            0
        };
        self.data + self.index.len() * ENTRY_OVERHEAD + self.stale * QUEUE_SLOT + base
    }

    /// Number of keys cached.
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// Sets `key`'s value in place (`Some`), drops it (`None`), or, with `add`, adds a key
    /// the cache does not hold; then evicts down to the limit. A value whose entry would cost
    /// more than an eighth of the limit is not kept (an older one is dropped).
    fn store(&mut self, slot: usize, key: &[u8], value: Option<&[u8]>, add: bool) {
        let hash = self.hash(slot, key);
        let cost = key.len() + value.map_or(0, <[u8]>::len);
        let fits = cost + ENTRY_OVERHEAD <= self.limit / 8;
        match self
            .index
            .find_entry(hash, |e| e.slot as usize == slot && e.key() == key)
        {
            Ok(found) => match value {
                Some(v) if fits => {
                    let e = found.into_mut();
                    let old = e.bytes.len();
                    if old - e.key_len as usize == v.len() {
                        // Same length (a counter, a fixed-size record): no allocation.
                        e.bytes[e.key_len as usize..].copy_from_slice(v);
                    } else {
                        let mut bytes = Vec::with_capacity(cost);
                        bytes.extend_from_slice(key);
                        bytes.extend_from_slice(v);
                        e.bytes = bytes.into_boxed_slice();
                    }
                    self.data = self.data - old + cost;
                }
                _ => {
                    let (gone, _) = found.remove();
                    self.data -= gone.bytes.len();
                    self.stale += 1;
                }
            },
            Err(_) => {
                let (Some(v), true, Ok(slot), Ok(key_len)) = (
                    value,
                    add && fits,
                    u32::try_from(slot),
                    u32::try_from(key.len()),
                ) else {
                    return;
                };
                let mut bytes = Vec::with_capacity(cost);
                bytes.extend_from_slice(key);
                bytes.extend_from_slice(v);
                let seq = self.first + self.queue.len() as u64;
                self.queue.push_back(hash);
                let hasher = &self.hasher;
                self.index.insert_unique(
                    hash,
                    Entry {
                        seq,
                        slot,
                        key_len,
                        bytes: bytes.into_boxed_slice(),
                        referenced: AtomicBool::new(false),
                    },
                    |e| hasher.hash_one((e.slot as usize, e.key())),
                );
                self.data += cost;
            }
        }
        self.evict();
    }

    /// Drops entries from the front until the cache is within its limit, giving each
    /// referenced entry one more round.
    fn evict(&mut self) {
        while self.bytes() > self.limit {
            let Some(hash) = self.queue.pop_front() else {
                // Nothing queued means nothing counted but the base.
                return;
            };
            let seq = self.first;
            self.first += 1;
            let Ok(found) = self.index.find_entry(hash, |e| e.seq == seq) else {
                // The slot of a dropped entry.
                self.stale -= 1;
                continue;
            };
            if found.get().referenced.swap(false, Ordering::Relaxed) {
                // Second chance: to the back of the queue.
                found.into_mut().seq = self.first + self.queue.len() as u64;
                self.queue.push_back(hash);
            } else {
                let (gone, _) = found.remove();
                self.data -= gone.bytes.len();
            }
        }
        self.tidy();
    }

    /// Keeps the containers within what [`ValueCache::bytes`] counts: rebuilds the queue
    /// when the slots of dropped entries outnumber the entries, and shrinks the index when it
    /// has more than [`INDEX_SLOTS_PER_ENTRY`] slots per entry.
    fn tidy(&mut self) {
        if self.stale > self.index.len() + INDEX_BASE_SLOTS {
            // Each entry's new sequence number is its rank among the old ones.
            let mut order: Vec<u64> = self.index.iter().map(|e| e.seq).collect();
            order.sort_unstable();
            let mut queue = VecDeque::from(vec![0; order.len()]);
            for e in self.index.iter_mut() {
                // Every entry's seq is in `order`, which was built from the same entries.
                if let Ok(rank) = order.binary_search(&e.seq) {
                    e.seq = rank as u64;
                    queue[rank] = self.hasher.hash_one((e.slot as usize, e.key()));
                }
            }
            self.queue = queue;
            self.first = 0;
            self.stale = 0;
        }
        let slots = self.index.allocation_size() / INDEX_SLOT;
        if slots > INDEX_SLOTS_PER_ENTRY * self.index.len() + INDEX_BASE_SLOTS {
            let hasher = &self.hasher;
            self.index.shrink_to(self.index.len(), |e| {
                hasher.hash_one((e.slot as usize, e.key()))
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an entry adds to [`ValueCache::data`].
    fn entry_data(key: &[u8], value: &[u8]) -> usize {
        key.len() + value.len()
    }

    /// Adds `key` as a read does that raced nothing.
    fn read(c: &mut ValueCache, key: &[u8], value: &[u8]) {
        c.record_read(c.epoch(), 0, key, value);
    }

    #[test]
    fn reads_add_and_writes_replace_or_drop() {
        let mut c = ValueCache::new(1 << 20);
        assert_eq!(c.get(0, b"k"), None);
        c.record_write(0, b"k", Some(b"v0"));
        assert_eq!(c.get(0, b"k"), None, "a write does not add a key");
        read(&mut c, b"k", b"v1");
        assert_eq!(c.get(0, b"k"), Some(&b"v1"[..]));
        assert_eq!(c.get(1, b"k"), None, "slots are separate");
        c.record_write(0, b"k", Some(b"v2"));
        assert_eq!(c.get(0, b"k"), Some(&b"v2"[..]), "same length: in place");
        assert_eq!(c.data, entry_data(b"k", b"v2"));
        c.record_write(0, b"k", Some(b"longer"));
        assert_eq!(c.get(0, b"k"), Some(&b"longer"[..]));
        assert_eq!(c.len(), 1);
        assert_eq!(c.data, entry_data(b"k", b"longer"));
        assert_eq!(c.queue.len(), 1, "replaced in place, in its queue slot");
        c.record_write(0, b"k", None);
        assert_eq!(c.get(0, b"k"), None, "a delete drops the value");
        assert_eq!(c.len(), 0);
        assert_eq!(
            (c.data, c.stale),
            (0, 1),
            "its queue slot stays until the front"
        );
        read(&mut c, b"k", b"again");
        read(&mut c, b"k", b"twice");
        assert_eq!(c.get(0, b"k"), Some(&b"twice"[..]), "the later read wins");
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn a_read_that_raced_a_write_is_not_recorded() {
        let mut c = ValueCache::new(1 << 20);
        read(&mut c, b"k", b"old");
        let before = c.epoch();
        c.record_write(0, b"k", None);
        c.record_read(before, 0, b"k", b"old");
        assert_eq!(c.get(0, b"k"), None, "the read began before the delete");
        let before = c.epoch();
        c.record_write(0, b"unrelated", Some(b"v"));
        c.record_read(before, 0, b"k", b"old");
        assert_eq!(c.get(0, b"k"), None, "any recorded write moves the epoch");
        read(&mut c, b"j", b"read");
        assert_eq!(c.get(0, b"j"), Some(&b"read"[..]));
        let before = c.epoch();
        c.clear();
        assert_eq!(c.get(0, b"j"), None);
        c.record_read(before, 0, b"j", b"read");
        assert_eq!(c.get(0, b"j"), None, "a clear moves the epoch too");
    }

    #[test]
    fn the_oldest_unreferenced_entries_leave_first() {
        let mut c = ValueCache::new(1 << 20);
        for i in 0..10u8 {
            read(&mut c, &[b'k', b'0' + i], &[7; 100]);
        }
        // Exactly these ten fit from now on (the containers have room for more entries:
        // one more read adds only its own bytes).
        c.limit = c.bytes();
        assert_eq!(c.len(), 10);
        assert!(c.get(0, b"k0").is_some(), "k0 is referenced");
        read(&mut c, b"kA", &[7; 100]);
        assert_eq!(c.len(), 10);
        assert!(c.get(0, b"k0").is_some(), "k0 got a second chance");
        assert!(c.get(0, b"k1").is_none(), "k1 was the oldest unreferenced");
        assert!(c.bytes() <= c.limit);
        // Queue now k2..k9, kA, k0 (referenced again): nine more reads drop k2..kA.
        for i in 0..9u8 {
            read(&mut c, &[b'm', b'0' + i], &[7; 100]);
        }
        assert!(c.get(0, b"k2").is_none());
        assert!(c.get(0, b"kA").is_none());
        assert!(c.get(0, b"k0").is_some());
        assert!(c.get(0, b"m0").is_some());
        assert_eq!(c.len(), 10);
        assert!(c.bytes() <= c.limit);
    }

    #[test]
    fn an_oversized_value_is_not_cached_and_drops_the_older_one() {
        let mut c = ValueCache::new(8 * 1024);
        read(&mut c, b"k", b"small");
        c.record_write(0, b"k", Some(&[0; 2048]));
        assert_eq!(c.get(0, b"k"), None);
        read(&mut c, b"k", &[0; 2048]);
        assert_eq!(c.get(0, b"k"), None);
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn a_kept_out_slot_is_never_cached() {
        let mut c = ValueCache::new(1 << 20);
        read(&mut c, b"k", b"v");
        c.keep_out(3);
        assert_eq!(
            c.get(0, b"k"),
            None,
            "keeping a slot out forgets everything"
        );
        c.record_read(c.epoch(), 3, b"k", b"v");
        assert_eq!(c.get(3, b"k"), None);
        read(&mut c, b"k", b"v");
        assert_eq!(c.get(0, b"k"), Some(&b"v"[..]), "other slots are cached");
    }

    #[test]
    fn deletes_and_rereads_do_not_grow_the_queue_without_bound() {
        let mut c = ValueCache::new(1 << 20);
        for i in 0..10_000u32 {
            let key = (i % 7).to_be_bytes();
            read(&mut c, &key, b"value");
            c.record_write(0, &key, None);
        }
        assert_eq!(c.len(), 0);
        assert!(c.queue.len() <= INDEX_BASE_SLOTS + 2, "{}", c.queue.len());
        assert!(c.index.allocation_size() <= (INDEX_BASE_SLOTS + 8) * INDEX_SLOT);
    }

    #[test]
    #[cfg(target_pointer_width = "64")]
    fn the_entry_overhead_is_the_documented_one() {
        // `DbOptions::value_cache_bytes` names this figure.
        assert_eq!(ENTRY_OVERHEAD, 155);
    }

    #[test]
    fn an_off_cache_holds_nothing() {
        let mut c = ValueCache::new(0);
        read(&mut c, b"k", b"v");
        c.record_write(0, b"k", Some(b"v"));
        assert_eq!(c.get(0, b"k"), None);
        assert_eq!(c.bytes(), 0);
    }

    #[test]
    fn churn_keeps_the_index_and_the_count_true() {
        // A model of every key's latest write; the cache must never contradict it and must
        // stay within its limit.
        let mut c = ValueCache::new(8192);
        let mut model = std::collections::HashMap::new();
        let mut x: u64 = 1;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = [(x % 61) as u8];
            let v = vec![(x >> 8) as u8; (x >> 16) as usize % 40];
            match (x >> 24) % 4 {
                0 => {
                    c.record_write(0, &key, None);
                    model.insert(key, None);
                }
                1 => {
                    if let Some(Some(stored)) = model.get(&key) {
                        let stored: Vec<u8> = Vec::clone(stored);
                        read(&mut c, &key, &stored);
                    }
                }
                _ => {
                    c.record_write(0, &key, Some(&v));
                    model.insert(key, Some(v));
                }
            }
            assert!(c.bytes() <= 8192);
            assert!(c.stale <= c.len() + INDEX_BASE_SLOTS + 1, "queue compacted");
            let slots = c.index.allocation_size() / INDEX_SLOT;
            assert!(slots <= INDEX_SLOTS_PER_ENTRY * c.len() + INDEX_BASE_SLOTS);
            for (k, want) in &model {
                if let Some(got) = c.get(0, k) {
                    assert_eq!(Some(got), want.as_deref());
                }
            }
        }
        assert!(c.len() > 0, "reads kept some keys");
        let counted: usize = c.index.iter().map(|e| e.bytes.len()).sum();
        assert_eq!(counted, c.data);
        assert_eq!(c.queue.len(), c.len() + c.stale);
        for e in c.index.iter() {
            let at = (e.seq - c.first) as usize;
            assert_eq!(
                c.queue[at],
                c.hash(e.slot as usize, e.key()),
                "queue slot of {e:?}"
            );
        }
    }
}

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
//! - A value RocksDB returns to a point read is added only if no write was recorded since
//!   the read looked here ([`ValueCache::epoch`]), so a read that raced a drain cannot put
//!   back an older value.
//! - A drain of the write cache records every write it puts into RocksDB here, under the
//!   lock it holds across its RocksDB write; a write that bypasses the write cache is
//!   recorded after RocksDB has it. A recorded put replaces the cached value of its key
//!   (in place when the length is the same), a delete drops it; keys not cached are not
//!   added (writes would otherwise push out what reads asked for, and pay for it).
//! - Anything else that changes RocksDB's data (range deletion, dropped files, ingestion)
//!   empties the cache.
//!
//! Eviction is CLOCK (FIFO with a second chance): a hit sets the entry's reference bit
//! (an atomic, so hits need only the shared lock); the oldest entry is dropped when the cache
//! is over its limit, unless its bit is set, in which case it goes to the back with the bit
//! cleared. The limit counts key and value bytes plus [`ENTRY_OVERHEAD`] per entry; an entry
//! above an eighth of the limit is not cached (one large value would empty the cache).
//! Its bytes come out of the memory budget, as the write cache's do.

use std::collections::VecDeque;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, Ordering};

use hashbrown::HashTable;

/// Bytes the allocator adds to each entry's key-and-value allocation (glibc: a 16-byte
/// header and rounding), counted with the entry's bytes.
const ALLOCATION_OVERHEAD: usize = 16;

/// Bytes of one index slot: the entry and its control byte.
const INDEX_SLOT: usize = std::mem::size_of::<Entry>() + 1;

/// Bytes of one queue slot.
const QUEUE_SLOT: usize = std::mem::size_of::<u64>();

/// The least an entry costs besides its key and value bytes, with both containers full:
/// an index slot, a queue slot and the allocator's overhead. Entries whose own cost is above
/// an eighth of the limit are not cached.
pub(crate) const ENTRY_OVERHEAD: usize = INDEX_SLOT + QUEUE_SLOT + ALLOCATION_OVERHEAD;

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
    /// at `i`. A slot whose entry left the index (replaced or dropped) stays until it reaches
    /// the front.
    queue: VecDeque<u64>,
    first: u64,
    hasher: RandomState,
    /// Key and value bytes of the entries, plus [`ALLOCATION_OVERHEAD`] each. With the two
    /// containers' allocated capacity, this is what the limit bounds ([`ValueCache::bytes`]).
    data: usize,
    limit: usize,
    epoch: u64,
}

impl ValueCache {
    /// An empty cache holding at most `limit` bytes (0: the cache is off and holds nothing).
    pub(crate) fn new(limit: usize) -> Self {
        ValueCache {
            index: HashTable::new(),
            queue: VecDeque::new(),
            first: 0,
            hasher: RandomState::new(),
            data: 0,
            limit,
            epoch: 0,
        }
    }

    /// Whether the cache may hold anything.
    pub(crate) fn is_on(&self) -> bool {
        self.limit > 0
    }

    fn hash(&self, slot: usize, key: &[u8]) -> u64 {
        self.hasher.hash_one((slot, key))
    }

    fn find(&self, hash: u64, slot: usize, key: &[u8]) -> Option<&Entry> {
        self.index
            .find(hash, |e| e.slot as usize == slot && e.key() == key)
    }

    /// The cached value of `key` in `slot`, `None` when the cache does not hold the key.
    #[inline]
    pub(crate) fn get(&self, slot: usize, key: &[u8]) -> Option<&[u8]> {
        if self.index.is_empty() {
            return None;
        }
        let e = self.find(self.hash(slot, key), slot, key)?;
        if !e.referenced.load(Ordering::Relaxed) {
            e.referenced.store(true, Ordering::Relaxed);
        }
        Some(&e.bytes[e.key_len as usize..])
    }

    /// Counts every recorded write; a read's value is recorded only if this has not moved
    /// since the read looked in the cache.
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
        if self.index.is_empty() {
            return;
        }
        let hash = self.hash(slot, key);
        let Ok(found) = self
            .index
            .find_entry(hash, |e| e.slot as usize == slot && e.key() == key)
        else {
            return;
        };
        let key_len = found.get().key_len as usize;
        match value {
            // Same length (a counter, a fixed-size record): overwritten in place.
            Some(v) if found.get().bytes.len() - key_len == v.len() => {
                found.into_mut().bytes[key_len..].copy_from_slice(v);
            }
            _ => {
                let (gone, _) = found.remove();
                self.forget(&gone);
                if let Some(v) = value {
                    self.insert(hash, slot, key, v);
                }
            }
        }
    }

    /// Records a value RocksDB returned for `key` to a read that looked in the cache at
    /// `epoch`; dropped if a write was recorded since (it may be older than that write).
    pub(crate) fn record_read(&mut self, epoch: u64, slot: usize, key: &[u8], value: &[u8]) {
        if !self.is_on() || epoch != self.epoch {
            return;
        }
        let hash = self.hash(slot, key);
        // Two reads that both missed may both get here; the later one replaces the first's.
        if let Ok(found) = self
            .index
            .find_entry(hash, |e| e.slot as usize == slot && e.key() == key)
        {
            let (gone, _) = found.remove();
            self.forget(&gone);
        }
        self.insert(hash, slot, key, value);
    }

    /// Forgets everything (RocksDB's data changed other than by a recorded write).
    pub(crate) fn clear(&mut self) {
        self.epoch += 1;
        self.index.clear();
        self.queue.clear();
        self.data = 0;
    }

    /// Bytes held, as counted against the limit: the entries' bytes and the memory both
    /// containers have allocated (a hash table keeps up to an eighth of its slots empty and
    /// both double when full, so this can be up to about twice the entries' own overhead).
    pub(crate) fn bytes(&self) -> usize {
        self.data + self.index.capacity() * INDEX_SLOT * 8 / 7 + self.queue.capacity() * QUEUE_SLOT
    }

    /// Number of keys cached.
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// Uncounts an entry taken out of the index; its queue slot stays until it reaches the
    /// front.
    fn forget(&mut self, gone: &Entry) {
        self.data -= gone.bytes.len() + ALLOCATION_OVERHEAD;
    }

    /// Adds `key`'s value (the cache holds nothing for the key), unless it is above an
    /// eighth of the limit; then evicts down to the limit.
    fn insert(&mut self, hash: u64, slot: usize, key: &[u8], value: &[u8]) {
        let data = key.len() + value.len();
        let (Ok(slot), Ok(key_len)) = (u32::try_from(slot), u32::try_from(key.len())) else {
            return;
        };
        if data + ENTRY_OVERHEAD > self.limit / 8 {
            return;
        }
        let mut bytes = Vec::with_capacity(data);
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(value);
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
        self.data += data + ALLOCATION_OVERHEAD;
        self.evict();
    }

    /// Drops entries from the front until the cache is within its limit, giving each
    /// referenced entry one more round.
    fn evict(&mut self) {
        while self.bytes() > self.limit {
            let Some(hash) = self.queue.pop_front() else {
                // Empty, yet the containers' capacity alone is over the limit (they grew
                // while slots of replaced entries piled up): give it back.
                self.index.shrink_to(0, |_| 0);
                self.queue.shrink_to_fit();
                return;
            };
            let seq = self.first;
            self.first += 1;
            let Ok(found) = self.index.find_entry(hash, |e| e.seq == seq) else {
                // Its entry was replaced or dropped earlier.
                continue;
            };
            if found.get().referenced.swap(false, Ordering::Relaxed) {
                // Second chance: to the back of the queue.
                let back = self.first + self.queue.len() as u64;
                found.into_mut().seq = back;
                self.queue.push_back(hash);
            } else {
                let (gone, _) = found.remove();
                self.forget(&gone);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an entry adds to [`ValueCache::data`].
    fn entry_data(key: &[u8], value: &[u8]) -> usize {
        key.len() + value.len() + ALLOCATION_OVERHEAD
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
        assert_eq!(
            c.queue.len(),
            2,
            "a replaced entry keeps only its queue slot until it reaches the front"
        );
        c.record_write(0, b"k", None);
        assert_eq!(c.get(0, b"k"), None, "a delete drops the value");
        assert_eq!(c.len(), 0);
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
        let mut c = ValueCache::new(4096);
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
            assert!(c.bytes() <= 4096);
            for (k, want) in &model {
                if let Some(got) = c.get(0, k) {
                    assert_eq!(Some(got), want.as_deref());
                }
            }
        }
        assert!(c.len() > 0, "reads kept some keys");
        let counted: usize = c
            .index
            .iter()
            .map(|e| e.bytes.len() + ALLOCATION_OVERHEAD)
            .sum();
        assert_eq!(counted, c.data);
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

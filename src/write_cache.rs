//! The write cache: a backend's latest puts and deletes, held in memory until they go to
//! RocksDB together, sorted by column family and key, in write batches of 64 KiB.
//!
//! A single put costs RocksDB one write-group round and one skip-list search from the top of
//! the memtable; keys prefixed by a hashed key group land all over it. A few thousand puts
//! written in key order pay the round once per batch and walk the memtable front to back
//! (with the insert hint, each key group's run starts where the last one ended). Repeated
//! writes of a key in the cache overwrite each other, so RocksDB sees only the last.
//! Flink's users hurt here (every state write is a separate RocksDB put); Kafka Streams keeps
//! a record cache in front of its stores for the same reason.
//!
//! This module only holds the data. `db` owns the cache, looks keys up in it before RocksDB,
//! and drains it (writes it to RocksDB and empties it) when a write finds it full, before
//! taking that write, and before anything that reads RocksDB other than a point read (scans,
//! checkpoints, flushes, properties, compactions, ingestion): RocksDB never answers a read
//! while a newer write waits here. The one exception is the reverse seek that learns a key
//! bound (`key_bounds`): its answer only bounds RocksDB's keys, a point read looks here
//! first, and the drain raises the bound for what it writes.
//! Point reads take `db`'s lock on the cache shared, so they run side by side; writes and
//! drains take it exclusively, and a drain holds it across its RocksDB writes, so a reader
//! waits for at most one drain (about a millisecond for the default 2 MiB).
//! Its bytes come out of the memory budget (`db::MemoryBudget` shrinks the block cache by
//! each open backend's share).
//! Nothing is lost from the cache that RocksDB's memtables would have kept: with the WAL off
//! (the default, as in Flink), neither survives a crash and both are written out on close
//! and by every checkpoint; with the WAL on, `db` writes through and the cache stays empty.

use std::hash::BuildHasher;
use std::ops::Range;

use hashbrown::HashTable;

/// The hasher of both caches' keys: foldhash, seeded at random per backend (so crafted keys
/// cannot aim at its buckets across processes). std's SipHash took 9 % of a put through the
/// write cache (`perf` over `rockstate-bench matrix --only beyond/uniform/100B/plain`).
pub(crate) type KeyHasher = foldhash::fast::RandomState;

/// Bytes counted per cached entry on top of its key and value bytes: the entry record and its
/// index slot, so the bound holds for small entries too.
pub(crate) const ENTRY_OVERHEAD: usize = std::mem::size_of::<Entry>() + 8;

/// A cached write as [`WriteCache::sorted`] yields it: (slot, key, value or `None` for a
/// delete).
pub(crate) type CachedWrite<'a> = (usize, &'a [u8], Option<&'a [u8]>);

/// A cached write with its key's hash, as [`WriteCache::writes`] yields it: (hash, slot, key,
/// value or `None` for a delete).
pub(crate) type HashedWrite<'a> = (u64, usize, &'a [u8], Option<&'a [u8]>);

/// One cached write. Its key and value bytes live in the cache's arena.
#[derive(Debug)]
struct Entry {
    hash: u64,
    slot: usize,
    key: Range<usize>,
    /// `None`: a delete.
    value: Option<Range<usize>>,
}

/// Cached writes of every column family of one database. A column family is named by its
/// slot (its position in the database's list of column families). Keys and values are
/// copied into one arena (no allocation per write once it has grown); a hash index (keyed
/// with a random seed, so crafted keys cannot degrade it) finds a key's latest write.
#[derive(Debug)]
pub(crate) struct WriteCache {
    arena: Vec<u8>,
    entries: Vec<Entry>,
    /// Indexes into `entries`.
    index: HashTable<usize>,
    hasher: KeyHasher,
    /// The cache counts as full from this many bytes on.
    limit: usize,
    /// One bit per slot that has a write here, so a read of one column family can tell
    /// whether it needs a drain ([`WriteCache::holds_slot`]).
    slots: Vec<u64>,
}

impl WriteCache {
    /// An empty cache that counts as full from `limit` bytes on, hashing keys with `hasher`
    /// (the value cache's too, so one hash serves both).
    pub(crate) fn new(limit: usize, hasher: KeyHasher) -> Self {
        WriteCache {
            arena: Vec::new(),
            entries: Vec::new(),
            index: HashTable::new(),
            hasher,
            limit,
            slots: Vec::new(),
        }
    }

    /// Whether a write to column family `slot` is here.
    #[inline]
    pub(crate) fn holds_slot(&self, slot: usize) -> bool {
        self.slots
            .get(slot / 64)
            .is_some_and(|w| w & (1 << (slot % 64)) != 0)
    }

    /// The hash of (slot, key) that [`WriteCache::get`] takes.
    pub(crate) fn hash(&self, slot: usize, key: &[u8]) -> u64 {
        self.hasher.hash_one((slot, key))
    }

    fn find(&self, hash: u64, slot: usize, key: &[u8]) -> Option<usize> {
        let (entries, arena) = (&self.entries, &self.arena);
        self.index
            .find(hash, |&i| {
                let e = &entries[i];
                e.slot == slot && arena[e.key.clone()] == *key
            })
            .copied()
    }

    fn append(&mut self, bytes: &[u8]) -> Range<usize> {
        let start = self.arena.len();
        self.arena.extend_from_slice(bytes);
        start..self.arena.len()
    }

    /// The cached write of `key` in `slot` (`hash` is [`WriteCache::hash`] of them):
    /// `Some(Some(value))` for a put, `Some(None)` for a delete, `None` when the cache has
    /// nothing for the key (RocksDB has the answer).
    #[inline]
    pub(crate) fn get(&self, hash: u64, slot: usize, key: &[u8]) -> Option<Option<&[u8]>> {
        if self.entries.is_empty() {
            return None;
        }
        let i = self.find(hash, slot, key)?;
        Some(self.entries[i].value.clone().map(|r| &self.arena[r]))
    }

    /// Caches a put (`Some(value)`) or a delete (`None`) of `key` in `slot`, replacing an
    /// earlier cached write of the key (whose value bytes stay in the arena, counted, until
    /// the cache is cleared). The caller drains a full cache before writing to it, so the
    /// cache holds at most its limit plus one write (or one batch).
    pub(crate) fn write(&mut self, slot: usize, key: &[u8], value: Option<&[u8]>) {
        self.write_parts(slot, key, value.map(|v| (&[][..], v)));
    }

    /// [`WriteCache::write`] of a value given as two parts, `head` then `tail` (a TTL
    /// state's timestamp and payload), copied straight into the arena, so a caller holding
    /// them apart never joins them first.
    #[inline]
    pub(crate) fn write_parts(&mut self, slot: usize, key: &[u8], value: Option<(&[u8], &[u8])>) {
        let hash = self.hasher.hash_one((slot, key));
        let value = value.map(|(head, tail)| {
            let start = self.arena.len();
            self.arena.extend_from_slice(head);
            self.arena.extend_from_slice(tail);
            start..self.arena.len()
        });
        match self.find(hash, slot, key) {
            Some(i) => self.entries[i].value = value,
            None => {
                if self.slots.len() <= slot / 64 {
                    self.slots.resize(slot / 64 + 1, 0);
                }
                self.slots[slot / 64] |= 1 << (slot % 64);
                let key = self.append(key);
                let i = self.entries.len();
                self.entries.push(Entry {
                    hash,
                    slot,
                    key,
                    value,
                });
                let entries = &self.entries;
                self.index.insert_unique(hash, i, |&j| entries[j].hash);
            }
        }
    }

    /// The bytes from which the cache counts as full.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Counts the cache as full from `limit` bytes on (the memory budget's share changed). A
    /// cache holding more already drains at its next write.
    pub(crate) fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
    }

    /// Whether the cache holds `limit` bytes or more.
    pub(crate) fn is_full(&self) -> bool {
        self.bytes() >= self.limit
    }

    /// Whether the cache holds no write.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes held, as counted against the limit: arena bytes plus [`ENTRY_OVERHEAD`] per key.
    pub(crate) fn bytes(&self) -> usize {
        self.arena.len() + self.entries.len() * ENTRY_OVERHEAD
    }

    /// Every cached write, latest per key, as (slot, key, value or `None` for a delete),
    /// ordered by slot, then key.
    ///
    /// The sort runs over one contiguous array of (slot, [`key_head`], entry index): most
    /// comparisons are two integer compares there, and only keys whose first 16 bytes agree
    /// are compared whole in the arena. Sorting the entry indexes by their keys in the arena
    /// took two cache misses per comparison and was 40 % of a drain with 100-byte values
    /// (`perf` over `rockstate-bench matrix --only beyond/uniform/100B/plain`).
    pub(crate) fn sorted(&self) -> impl Iterator<Item = CachedWrite<'_>> {
        let mut order: Vec<(usize, u128, usize)> = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.slot, key_head(&self.arena[e.key.clone()]), i))
            .collect();
        let key = |i: usize| &self.arena[self.entries[i].key.clone()];
        order.sort_unstable_by(|a, b| {
            (a.0, a.1)
                .cmp(&(b.0, b.1))
                .then_with(|| key(a.2).cmp(key(b.2)))
        });
        order
            .into_iter()
            .map(move |(_, _, i)| self.view(&self.entries[i]))
    }

    /// Every cached write, latest per key, as (hash, slot, key, value or `None` for a
    /// delete), in the order the keys were first written.
    pub(crate) fn writes(&self) -> impl Iterator<Item = HashedWrite<'_>> {
        self.entries.iter().map(|e| {
            let (slot, key, value) = self.view(e);
            (e.hash, slot, key, value)
        })
    }

    /// An entry as (slot, key, value or `None` for a delete), its bytes in the arena.
    fn view(&self, e: &Entry) -> CachedWrite<'_> {
        (
            e.slot,
            &self.arena[e.key.clone()],
            e.value.clone().map(|r| &self.arena[r]),
        )
    }

    /// Forgets every write (after they reached RocksDB). The arena keeps its memory for the
    /// next round unless one oversized value had grown it past twice the limit.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.index.clear();
        self.arena.clear();
        self.slots.fill(0);
        if self.arena.capacity() > 2 * self.limit {
            self.arena = Vec::new();
        }
    }
}

/// The first 16 bytes of `key` (zero-padded) as a big-endian integer. Two keys whose heads
/// differ are ordered as their heads are: at the first byte where the heads differ, either
/// both keys have that byte, or only one has it (the other is shorter: a prefix of it up to
/// there, so smaller) and it is not zero (the padding is). Equal heads say nothing.
fn key_head(key: &[u8]) -> u128 {
    let mut head = [0u8; 16];
    let n = key.len().min(16);
    head[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cached write of `key` in `slot`.
    fn get<'a>(c: &'a WriteCache, slot: usize, key: &[u8]) -> Option<Option<&'a [u8]>> {
        c.get(c.hash(slot, key), slot, key)
    }

    #[test]
    fn latest_write_wins_and_bytes_follow_it() {
        let mut c = WriteCache::new(1 << 20, KeyHasher::default());
        assert_eq!(get(&c, 0, b"k"), None);
        c.write(2, b"k", Some(b"v1"));
        assert_eq!(get(&c, 2, b"k"), Some(Some(&b"v1"[..])));
        assert_eq!(get(&c, 0, b"k"), None, "slots are separate");
        assert_eq!(c.bytes(), 1 + 2 + ENTRY_OVERHEAD);
        c.write(2, b"k", None);
        assert_eq!(get(&c, 2, b"k"), Some(None));
        assert_eq!(c.bytes(), 1 + 2 + ENTRY_OVERHEAD, "a delete adds no bytes");
        c.write(2, b"k", Some(b"longer value"));
        assert_eq!(get(&c, 2, b"k"), Some(Some(&b"longer value"[..])));
        assert_eq!(
            c.bytes(),
            1 + 2 + 12 + ENTRY_OVERHEAD,
            "overwritten bytes stay counted"
        );
        assert!(!c.is_empty());
    }

    #[test]
    fn a_value_in_two_parts_is_stored_joined() {
        let mut c = WriteCache::new(1 << 20, KeyHasher::default());
        c.write_parts(1, b"k", Some((b"head-", b"tail")));
        assert_eq!(get(&c, 1, b"k"), Some(Some(&b"head-tail"[..])));
        assert_eq!(c.bytes(), 1 + 9 + ENTRY_OVERHEAD);
        c.write_parts(1, b"k", Some((b"", b"whole")));
        c.write_parts(1, b"j", Some((b"only head", b"")));
        let all: Vec<_> = c.sorted().collect();
        assert_eq!(
            all,
            [
                (1, &b"j"[..], Some(&b"only head"[..])),
                (1, &b"k"[..], Some(&b"whole"[..]))
            ]
        );
        c.write_parts(1, b"k", None);
        assert_eq!(get(&c, 1, b"k"), Some(None));
    }

    #[test]
    fn sorted_by_slot_then_key_latest_only_then_cleared() {
        let mut c = WriteCache::new(1 << 20, KeyHasher::default());
        for k in [&b"c"[..], b"a", b"bb", b"b"] {
            c.write(1, k, Some(k));
        }
        c.write(0, b"z", None);
        c.write(1, b"a", Some(b"A"));
        let all: Vec<CachedWrite<'_>> = c.sorted().collect();
        assert_eq!(
            all,
            vec![
                (0, &b"z"[..], None),
                (1, b"a", Some(&b"A"[..])),
                (1, b"b", Some(b"b")),
                (1, b"bb", Some(b"bb")),
                (1, b"c", Some(b"c")),
            ]
        );
        c.clear();
        assert!(c.is_empty());
        assert_eq!(c.bytes(), 0);
        assert_eq!(get(&c, 1, b"a"), None);
        assert_eq!(c.sorted().count(), 0);
    }

    proptest::proptest! {
        /// Keys around the 16-byte head, of zero bytes and common prefixes (where the head
        /// ties or pads), come out in the order of (slot, whole key), latest write per key.
        #[test]
        fn sorted_matches_ordering_whole_keys(
            writes in proptest::collection::vec(
                (
                    0usize..3,
                    proptest::collection::vec(proptest::sample::select(vec![0u8, 1, 0xff]), 0..20),
                    proptest::option::of(0u8..4),
                ),
                0..200,
            )
        ) {
            let mut c = WriteCache::new(usize::MAX, KeyHasher::default());
            let mut want = std::collections::BTreeMap::new();
            for (slot, key, value) in &writes {
                let value = value.map(|v| vec![v]);
                c.write(*slot, key, value.as_deref());
                want.insert((*slot, key.clone()), value);
            }
            let got: Vec<(usize, Vec<u8>, Option<Vec<u8>>)> = c
                .sorted()
                .map(|(s, k, v)| (s, k.to_vec(), v.map(<[u8]>::to_vec)))
                .collect();
            let want: Vec<(usize, Vec<u8>, Option<Vec<u8>>)> =
                want.into_iter().map(|((s, k), v)| (s, k, v)).collect();
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn key_heads_order_as_keys_do_where_they_differ() {
        let keys: [&[u8]; 7] = [
            b"",
            b"\0",
            b"a",
            b"a\0",
            b"a\x01",
            b"0123456789abcdef",
            b"0123456789abcdeg",
        ];
        for a in keys {
            for b in keys {
                let (ha, hb) = (key_head(a), key_head(b));
                if ha != hb {
                    assert_eq!(ha.cmp(&hb), a.cmp(b), "{a:?} {b:?}");
                }
            }
        }
        assert_eq!(key_head(b"a"), key_head(b"a\0"), "padding ties");
        assert_eq!(
            key_head(b"0123456789abcdefX"),
            key_head(b"0123456789abcdefY")
        );
    }

    #[test]
    fn full_from_the_limit_on() {
        let mut c = WriteCache::new(2 * (4 + ENTRY_OVERHEAD), KeyHasher::default());
        c.write(0, b"aa", Some(b"11"));
        assert!(!c.is_full());
        c.write(0, b"aa", None);
        assert!(!c.is_full());
        c.write(0, b"bb", Some(b"33"));
        assert!(c.is_full());
        c.clear();
        assert!(!c.is_full());
        // A zero limit is full at once (db does not use the cache then).
        assert!(WriteCache::new(0, KeyHasher::default()).is_full());
    }

    #[test]
    fn many_keys_each_found() {
        let mut c = WriteCache::new(usize::MAX, KeyHasher::default());
        for i in 0u32..10_000 {
            c.write((i % 3) as usize, &i.to_be_bytes(), Some(&i.to_le_bytes()));
        }
        for i in 0u32..10_000 {
            let want = i.to_le_bytes();
            assert_eq!(
                get(&c, (i % 3) as usize, &i.to_be_bytes()),
                Some(Some(&want[..]))
            );
            assert_eq!(get(&c, (i % 3 + 1) as usize, &i.to_be_bytes()), None);
        }
        let sorted: Vec<_> = c.sorted().map(|(s, k, _)| (s, k.to_vec())).collect();
        assert!(sorted.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(sorted.len(), 10_000);
    }
}

//! The heap backend's storage (docs/heap-backend.md): one in-memory ordered map per state,
//! holding exactly the bytes RocksDB would (same keys `[kg][len][key][len][ns][suffix]`, same
//! values `[ttl ts]?[payload]`), so every state kind, TTL and the savepoint code work
//! unchanged through [`crate::store::Table`].
//!
//! The map is a persistent B-tree ([`imbl::OrdMap`]): cloning it clones the root pointer
//! (O(1)), and a write to a map whose nodes are shared copies only the nodes on its path. A
//! snapshot therefore freezes a state by cloning its map under the table's lock, and the
//! snapshot can be serialized on another thread while the task keeps writing; the task pays
//! the path copies of its first writes into shared nodes, never a full copy.
//!
//! Keys and values are `Arc<[u8]>`, so the node copies a copy-on-write makes are reference
//! count bumps, not byte copies. No user code ever runs under a table's lock: reads clone the
//! value's `Arc` out, scans iterate a frozen clone of the map.

use std::ops::Bound;
use std::sync::Arc;

use imbl::OrdMap;
use parking_lot::Mutex;

use crate::error::Result;

/// Stored bytes: shared so that copy-on-write node copies are cheap.
pub(crate) type Bytes = Arc<[u8]>;

/// The persistent map of one table.
pub(crate) type Map = OrdMap<Bytes, Bytes>;

/// One state's entries (or the backend's metadata) in memory. Clones share the same map.
#[derive(Clone, Default)]
pub(crate) struct HeapTable {
    map: Arc<Mutex<Map>>,
}

/// One operation of a heap batch.
pub(crate) enum HeapOp {
    Put(Bytes, Bytes),
    Delete(Bytes),
}

impl HeapTable {
    /// An empty table.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The stored value of `key` (a reference-count bump, no copy).
    #[inline]
    pub(crate) fn get(&self, key: &[u8]) -> Option<Bytes> {
        self.map.lock().get(key).cloned()
    }

    /// Stores `value` under `key`.
    #[inline]
    pub(crate) fn put(&self, key: &[u8], value: &[u8]) {
        let (k, v): (Bytes, Bytes) = (Arc::from(key), Arc::from(value));
        self.map.lock().insert(k, v);
    }

    /// Deletes `key`.
    pub(crate) fn delete(&self, key: &[u8]) {
        self.map.lock().remove(key);
    }

    /// Applies `ops` in order under one lock, so readers see all or none of them.
    pub(crate) fn apply(&self, ops: Vec<HeapOp>) {
        let mut map = self.map.lock();
        for op in ops {
            match op {
                HeapOp::Put(k, v) => {
                    map.insert(k, v);
                }
                HeapOp::Delete(k) => {
                    map.remove(&k);
                }
            }
        }
    }

    /// The map as it is now: O(1), later writes to this table do not show in it.
    pub(crate) fn frozen(&self) -> Map {
        self.map.lock().clone()
    }

    /// A new, independent table starting as this one's current content (O(1)).
    pub(crate) fn snapshot(&self) -> HeapTable {
        HeapTable {
            map: Arc::new(Mutex::new(self.frozen())),
        }
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.map.lock().len()
    }

    /// Visits entries in `[lower, upper)` in key order until `f` returns `Ok(false)`. Iterates
    /// a frozen clone, so `f` may write to this table.
    pub(crate) fn scan(
        &self,
        lower: &[u8],
        upper: Option<&[u8]>,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let map = self.frozen();
        let upper = match upper {
            Some(u) => Bound::Excluded(u),
            None => Bound::Unbounded,
        };
        for (k, v) in map.range::<_, [u8]>((Bound::Included(lower), upper)) {
            if !f(k, v)? {
                break;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_is_ordered_bounded_and_frozen() {
        let t = HeapTable::new();
        for k in [&b"b2"[..], b"a", b"b1", b"c"] {
            t.put(k, k);
        }
        let snap = t.snapshot();
        let mut seen = Vec::new();
        t.scan(b"b", Some(b"c"), |k, v| {
            assert_eq!(k, v);
            seen.push(k.to_vec());
            // Writing during a scan neither deadlocks nor shows up in it.
            t.put(b"b3", b"x");
            Ok(true)
        })
        .unwrap();
        assert_eq!(seen, vec![b"b1".to_vec(), b"b2".to_vec()]);
        t.apply(vec![HeapOp::Delete(Arc::from(&b"a"[..]))]);
        assert_eq!(t.get(b"a"), None);
        assert_eq!(t.len(), 4);
        assert_eq!(snap.len(), 4);
        assert_eq!(snap.get(b"a").as_deref(), Some(&b"a"[..]));
        assert_eq!(snap.get(b"b3"), None);
    }
}

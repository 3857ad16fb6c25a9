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
use std::path::Path;
use std::sync::Arc;

use imbl::OrdMap;
use parking_lot::{Mutex, RwLock};

use crate::error::{Error, Result};

/// Stored bytes: shared so that copy-on-write node copies are cheap.
pub(crate) type Bytes = Arc<[u8]>;

/// The persistent map of one table.
pub(crate) type Map = OrdMap<Bytes, Bytes>;

/// One state's entries (or the backend's metadata) in memory. Clones share the same map.
#[derive(Clone)]
pub(crate) struct HeapTable {
    /// The entries; `None` once the backend closed the table ([`HeapTable::close`]).
    map: Arc<Mutex<Option<Map>>>,
    /// The backend's directory, for [`Error::Closed`].
    path: Arc<Path>,
    /// Shared by every table of one backend: each access holds it shared, a full snapshot
    /// holds it exclusively while it freezes all tables, so the snapshot is one cut.
    gate: Arc<RwLock<()>>,
}

/// One operation of a heap batch.
pub(crate) enum HeapOp {
    Put(Bytes, Bytes),
    Delete(Bytes),
}

impl HeapTable {
    /// An empty table of its own (unit tests).
    #[cfg(test)]
    pub(crate) fn new(path: &Path) -> Self {
        Self::with_gate(path, Arc::new(RwLock::new(())))
    }

    /// An empty table of the backend at `path`, sharing the backend's snapshot `gate`.
    pub(crate) fn with_gate(path: &Path, gate: Arc<RwLock<()>>) -> Self {
        HeapTable {
            map: Arc::new(Mutex::new(Some(Map::new()))),
            path: path.into(),
            gate,
        }
    }

    /// The backend's snapshot gate.
    pub(crate) fn gate(&self) -> &Arc<RwLock<()>> {
        &self.gate
    }

    /// Runs `f` on the map; [`Error::Closed`] once the table is closed.
    #[inline]
    fn with<R>(&self, f: impl FnOnce(&mut Map) -> R) -> Result<R> {
        // Recursive: a caller may hold it already (a read inside a scan's closure) while a
        // snapshot waits for it.
        let _gate = self.gate.read_recursive();
        self.with_ungated(f)
    }

    /// [`HeapTable::with`] without the gate.
    fn with_ungated<R>(&self, f: impl FnOnce(&mut Map) -> R) -> Result<R> {
        match self.map.lock().as_mut() {
            Some(map) => Ok(f(map)),
            None => Err(Error::Closed {
                path: self.path.to_path_buf(),
            }),
        }
    }

    /// The stored value of `key` (a reference-count bump, no copy).
    #[inline]
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.with(|map| map.get(key).cloned())
    }

    /// Stores `value` under `key`.
    #[inline]
    pub(crate) fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let (k, v): (Bytes, Bytes) = (Arc::from(key), Arc::from(value));
        self.with(|map| {
            map.insert(k, v);
        })
    }

    /// Deletes `key`.
    pub(crate) fn delete(&self, key: &[u8]) -> Result<()> {
        self.with(|map| {
            map.remove(key);
        })
    }

    /// Deletes `key` if it still holds `stored` (an expired value a read found); whether it did.
    pub(crate) fn delete_if(&self, key: &[u8], stored: &[u8]) -> Result<bool> {
        self.with(|map| {
            if map.get(key).is_some_and(|v| &v[..] == stored) {
                map.remove(key);
                true
            } else {
                false
            }
        })
    }

    /// Drops the entries (their memory is freed once no snapshot holds them); every later call
    /// on this table or a clone of it returns [`Error::Closed`].
    pub(crate) fn close(&self) {
        *self.map.lock() = None;
    }

    /// Applies `ops` in order under one lock, so readers see all or none of them.
    pub(crate) fn apply(&self, ops: Vec<HeapOp>) -> Result<()> {
        self.with(|map| {
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
        })
    }

    /// Examines up to `limit` entries from `from` on and removes those `remove` selects, all
    /// under one lock, so a write another thread makes meanwhile is either examined or left
    /// alone (a scan of a frozen copy followed by deletes would delete a value written in
    /// between). Returns how many it removed and the last key examined (`None`: it reached
    /// the end).
    pub(crate) fn remove_some(
        &self,
        from: &[u8],
        limit: usize,
        remove: impl Fn(&[u8]) -> bool,
    ) -> Result<(usize, Option<Bytes>)> {
        self.with(|map| {
            let mut doomed: Vec<Bytes> = Vec::new();
            let mut last = None;
            for (seen, (k, v)) in map
                .range::<_, [u8]>((Bound::Included(from), Bound::Unbounded))
                .enumerate()
            {
                if remove(v) {
                    doomed.push(Arc::clone(k));
                }
                if seen + 1 == limit {
                    last = Some(Arc::clone(k));
                    break;
                }
            }
            for k in &doomed {
                map.remove(k);
            }
            (doomed.len(), last)
        })
    }

    /// The map as it is now: O(1), later writes to this table do not show in it.
    pub(crate) fn frozen(&self) -> Result<Map> {
        self.with(|map| map.clone())
    }

    /// A new, independent table starting as this one's current content (O(1)). It does not
    /// take the gate (the map's lock makes the copy of one table consistent), so a caller
    /// that wants one cut of several tables holds the gate exclusively around the copies.
    pub(crate) fn snapshot(&self) -> Result<HeapTable> {
        Ok(HeapTable {
            map: Arc::new(Mutex::new(Some(self.with_ungated(|map| map.clone())?))),
            path: Arc::clone(&self.path),
            gate: Arc::new(RwLock::new(())),
        })
    }

    /// Whether the table holds no entry, without the gate (a caller holding it exclusively
    /// may ask); a closed table counts as empty.
    pub(crate) fn is_empty_ungated(&self) -> bool {
        self.with_ungated(|map| map.is_empty()).unwrap_or(true)
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> Result<usize> {
        self.with(|map| map.len())
    }

    /// Visits entries in `[lower, upper)` in key order until `f` returns `Ok(false)`. Iterates
    /// a frozen clone, so `f` may write to this table.
    pub(crate) fn scan(
        &self,
        lower: &[u8],
        upper: Option<&[u8]>,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let map = self.frozen()?;
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
        let t = HeapTable::new(Path::new("heap"));
        for k in [&b"b2"[..], b"a", b"b1", b"c"] {
            t.put(k, k).unwrap();
        }
        let snap = t.snapshot().unwrap();
        let mut seen = Vec::new();
        t.scan(b"b", Some(b"c"), |k, v| {
            assert_eq!(k, v);
            seen.push(k.to_vec());
            // Writing during a scan neither deadlocks nor shows up in it.
            t.put(b"b3", b"x")?;
            Ok(true)
        })
        .unwrap();
        assert_eq!(seen, vec![b"b1".to_vec(), b"b2".to_vec()]);
        t.apply(vec![HeapOp::Delete(Arc::from(&b"a"[..]))]).unwrap();
        assert_eq!(t.get(b"a").unwrap(), None);
        assert_eq!(t.len().unwrap(), 4);
        assert_eq!(snap.len().unwrap(), 4);
        assert_eq!(snap.get(b"a").unwrap().as_deref(), Some(&b"a"[..]));
        assert_eq!(snap.get(b"b3").unwrap(), None);
    }

    #[test]
    fn a_closed_table_and_its_clones_answer_closed_and_snapshots_live_on() {
        let t = HeapTable::new(Path::new("heap"));
        t.put(b"k", b"v").unwrap();
        let (clone, snap) = (t.clone(), t.snapshot().unwrap());
        t.close();
        for table in [&t, &clone] {
            assert!(matches!(table.get(b"k"), Err(Error::Closed { .. })));
            assert!(matches!(table.put(b"k", b"w"), Err(Error::Closed { .. })));
            assert!(matches!(table.delete(b"k"), Err(Error::Closed { .. })));
            assert!(matches!(
                table.scan(b"", None, |_, _| Ok(true)),
                Err(Error::Closed { .. })
            ));
        }
        assert_eq!(snap.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    }
}

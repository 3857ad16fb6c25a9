//! Where a state's entries live: a RocksDB column family, or an in-memory ordered map for the
//! heap backend. Both hold the same byte layout (`codec`), so every state kind, TTL, savepoints
//! and key-group scans work unchanged on either.
//!
//! The heap table is a persistent (structurally shared) ordered map: taking a snapshot is an
//! O(1) clone under a short lock, after which writers copy the paths they touch — a snapshot
//! never blocks the task for longer than that clone.

use std::ops::Bound;
use std::sync::Arc;

use imbl::OrdMap;
use parking_lot::RwLock;

use crate::db::{self, Cf};
use crate::error::Result;

/// An immutable view of a heap table.
pub(crate) type HeapMap = OrdMap<Vec<u8>, Vec<u8>>;

/// An in-memory table.
#[derive(Default)]
pub(crate) struct HeapTable {
    map: RwLock<HeapMap>,
}

impl HeapTable {
    /// The current contents, frozen: later writes do not show in it.
    pub(crate) fn snapshot(&self) -> HeapMap {
        self.map.read().clone()
    }
}

/// The storage of one state (or of the backend's metadata).
#[derive(Clone)]
pub(crate) enum Table {
    /// A RocksDB column family.
    Rocks(Cf),
    /// An in-memory table.
    Heap(Arc<HeapTable>),
}

/// Writes to one table, applied atomically by [`TableBatch::commit`]. A batch carries its
/// table, so it can only ever be applied to the table it was made for.
pub(crate) enum TableBatch {
    Rocks(Cf, db::Batch),
    Heap(Arc<HeapTable>, Vec<(Vec<u8>, Option<Vec<u8>>)>),
}

impl TableBatch {
    /// Adds a put.
    pub(crate) fn put(&mut self, key: &[u8], value: &[u8]) {
        match self {
            TableBatch::Rocks(cf, b) => b.put(cf, key, value),
            TableBatch::Heap(_, ops) => ops.push((key.to_vec(), Some(value.to_vec()))),
        }
    }

    /// Adds a delete.
    pub(crate) fn delete(&mut self, key: &[u8]) {
        match self {
            TableBatch::Rocks(cf, b) => b.delete(cf, key),
            TableBatch::Heap(_, ops) => ops.push((key.to_vec(), None)),
        }
    }

    /// Number of operations.
    pub(crate) fn len(&self) -> usize {
        match self {
            TableBatch::Rocks(_, b) => b.len(),
            TableBatch::Heap(_, ops) => ops.len(),
        }
    }

    /// Applies the batch atomically (nothing to do when empty).
    pub(crate) fn commit(self) -> Result<()> {
        match self {
            TableBatch::Rocks(_, b) if b.len() == 0 => Ok(()),
            TableBatch::Rocks(cf, b) => cf.db().write(b),
            TableBatch::Heap(t, ops) => {
                let mut map = t.map.write();
                for (k, v) in ops {
                    match v {
                        Some(v) => {
                            map.insert(k, v);
                        }
                        None => {
                            map.remove(&k);
                        }
                    }
                }
                Ok(())
            }
        }
    }
}

/// Visits `map` entries in `[lower, upper)` in key order until `f` returns `Ok(false)`.
pub(crate) fn scan_map(
    map: &HeapMap,
    lower: &[u8],
    upper: Option<&[u8]>,
    mut f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
) -> Result<()> {
    let upper = match upper {
        Some(u) => Bound::Excluded(u.to_vec()),
        None => Bound::Unbounded,
    };
    for (k, v) in map.range((Bound::Included(lower.to_vec()), upper)) {
        if !f(k, v)? {
            break;
        }
    }
    Ok(())
}

impl Table {
    /// Calls `f` with the stored value of `key`.
    #[inline]
    pub(crate) fn get_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        match self {
            Table::Rocks(cf) => cf.get_with(key, f),
            Table::Heap(t) => Ok(t.map.read().get(key).map(|v| f(v))),
        }
    }

    /// Stores `value` under `key`.
    #[inline]
    pub(crate) fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        match self {
            Table::Rocks(cf) => cf.put(key, value),
            Table::Heap(t) => {
                t.map.write().insert(key.to_vec(), value.to_vec());
                Ok(())
            }
        }
    }

    /// Deletes `key`.
    pub(crate) fn delete(&self, key: &[u8]) -> Result<()> {
        match self {
            Table::Rocks(cf) => cf.delete(key),
            Table::Heap(t) => {
                t.map.write().remove(key);
                Ok(())
            }
        }
    }

    /// Visits entries in `[lower, upper)` in key order until `f` returns `Ok(false)`. The heap
    /// table scans a frozen view, so `f` may write to the same table.
    pub(crate) fn scan(
        &self,
        lower: &[u8],
        upper: Option<&[u8]>,
        f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        match self {
            Table::Rocks(cf) => cf.scan(lower, upper, f),
            Table::Heap(t) => scan_map(&t.snapshot(), lower, upper, f),
        }
    }

    /// An empty batch for this table.
    pub(crate) fn batch(&self) -> TableBatch {
        match self {
            Table::Rocks(cf) => TableBatch::Rocks(cf.clone(), db::Batch::new()),
            Table::Heap(t) => TableBatch::Heap(Arc::clone(t), Vec::new()),
        }
    }

    /// Compacts a RocksDB column family fully (running TTL filters); nothing for heap tables.
    pub(crate) fn compact_all(&self) -> Result<()> {
        match self {
            Table::Rocks(cf) => cf.compact_all(),
            Table::Heap(_) => Ok(()),
        }
    }

    /// A RocksDB integer property; for heap tables only `rocksdb.estimate-num-keys` (exact).
    pub(crate) fn property_u64(&self, name: &str) -> Result<Option<u64>> {
        match self {
            Table::Rocks(cf) => cf.property_u64(name),
            Table::Heap(t) => Ok((name == "rocksdb.estimate-num-keys").then(|| t.map.read().len() as u64)),
        }
    }
}

//! Where a state's entries live. Today: a RocksDB column family. The state layer goes through
//! this seam (point reads and writes, bounded scans, batches) rather than through `db` directly
//! so that the heap backend (an in-memory persistent ordered map holding the same byte layout)
//! can slot in as a second variant with every state kind, TTL and savepoints unchanged.

use crate::db::{self, Cf};
use crate::error::Result;

/// The storage of one state (or of the backend's metadata).
#[derive(Clone)]
pub(crate) enum Table {
    /// A RocksDB column family.
    Rocks(Cf),
}

/// Writes to one table, applied atomically by [`TableBatch::commit`]. A batch carries its
/// table, so it can only ever be applied to the table it was made for.
pub(crate) enum TableBatch {
    Rocks(Cf, db::Batch),
}

impl TableBatch {
    /// Adds a put.
    pub(crate) fn put(&mut self, key: &[u8], value: &[u8]) {
        match self {
            TableBatch::Rocks(cf, b) => b.put(cf, key, value),
        }
    }

    /// Adds a delete.
    pub(crate) fn delete(&mut self, key: &[u8]) {
        match self {
            TableBatch::Rocks(cf, b) => b.delete(cf, key),
        }
    }

    /// Number of operations.
    pub(crate) fn len(&self) -> usize {
        match self {
            TableBatch::Rocks(_, b) => b.len(),
        }
    }

    /// Applies the batch atomically (nothing to do when empty).
    pub(crate) fn commit(self) -> Result<()> {
        match self {
            TableBatch::Rocks(_, b) if b.len() == 0 => Ok(()),
            TableBatch::Rocks(cf, b) => cf.db().write(b),
        }
    }
}

impl Table {
    /// Calls `f` with the stored value of `key`.
    #[inline]
    pub(crate) fn get_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        match self {
            Table::Rocks(cf) => cf.get_with(key, f),
        }
    }

    /// Stores `value` under `key`.
    #[inline]
    pub(crate) fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        match self {
            Table::Rocks(cf) => cf.put(key, value),
        }
    }

    /// Deletes `key`.
    pub(crate) fn delete(&self, key: &[u8]) -> Result<()> {
        match self {
            Table::Rocks(cf) => cf.delete(key),
        }
    }

    /// Visits entries in `[lower, upper)` in key order until `f` returns `Ok(false)`.
    pub(crate) fn scan(
        &self,
        lower: &[u8],
        upper: Option<&[u8]>,
        f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        match self {
            Table::Rocks(cf) => cf.scan(lower, upper, f),
        }
    }

    /// An empty batch for this table.
    pub(crate) fn batch(&self) -> TableBatch {
        match self {
            Table::Rocks(cf) => TableBatch::Rocks(cf.clone(), db::Batch::new()),
        }
    }

    /// Compacts the column family fully (running TTL filters).
    pub(crate) fn compact_all(&self) -> Result<()> {
        match self {
            Table::Rocks(cf) => cf.compact_all(),
        }
    }

    /// A RocksDB integer property.
    pub(crate) fn property_u64(&self, name: &str) -> Result<Option<u64>> {
        match self {
            Table::Rocks(cf) => cf.property_u64(name),
        }
    }
}

//! Where a state's entries live: a RocksDB column family, or (heap backend) an in-memory
//! persistent ordered map holding the same byte layout. The state layer goes through this seam
//! (point reads and writes, bounded scans, batches) rather than through `db` directly, so every
//! state kind, TTL and savepoints work unchanged on both.

use std::iter::Peekable;
use std::ops::Bound;
use std::sync::Arc;

use crate::db::{self, BulkCursor, Cf};
use crate::error::{Error, Result};
use crate::heap::{HeapOp, HeapTable};

/// The storage of one state (or of the backend's metadata).
#[derive(Clone)]
pub(crate) enum Table {
    /// A RocksDB column family.
    Rocks(Cf),
    /// An in-memory copy-on-write map (heap backend).
    Heap(HeapTable),
}

/// Writes to one table, applied atomically by [`TableBatch::commit`]. A batch carries its
/// table, so it can only ever be applied to the table it was made for.
pub(crate) enum TableBatch {
    Rocks(Cf, db::Batch),
    Heap(HeapTable, Vec<HeapOp>),
}

impl TableBatch {
    /// Adds a put.
    pub(crate) fn put(&mut self, key: &[u8], value: &[u8]) {
        match self {
            TableBatch::Rocks(cf, b) => b.put(cf, key, value),
            TableBatch::Heap(_, ops) => ops.push(HeapOp::Put(Arc::from(key), Arc::from(value))),
        }
    }

    /// Adds a delete.
    pub(crate) fn delete(&mut self, key: &[u8]) {
        match self {
            TableBatch::Rocks(cf, b) => b.delete(cf, key),
            TableBatch::Heap(_, ops) => ops.push(HeapOp::Delete(Arc::from(key))),
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
            TableBatch::Heap(t, ops) => t.apply(ops),
        }
    }
}

impl Table {
    /// Calls `f` with the stored value of `key`.
    #[inline]
    pub(crate) fn get_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        match self {
            Table::Rocks(cf) => cf.get_with(key, f),
            Table::Heap(t) => Ok(t.get(key)?.map(|v| f(&v))),
        }
    }

    /// Stores `value` under `key`.
    #[inline]
    pub(crate) fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        match self {
            Table::Rocks(cf) => cf.put(key, value),
            Table::Heap(t) => t.put(key, value),
        }
    }

    /// Stores the value `head` followed by `tail` under `key` (a TTL state's timestamp and
    /// payload), joining them only where the storage needs one buffer.
    #[inline]
    pub(crate) fn put_parts(&self, key: &[u8], head: &[u8], tail: &[u8]) -> Result<()> {
        match self {
            Table::Rocks(cf) => cf.put_parts(key, head, tail),
            Table::Heap(t) => t.put(key, &[head, tail].concat()),
        }
    }

    /// Deletes `key`.
    pub(crate) fn delete(&self, key: &[u8]) -> Result<()> {
        match self {
            Table::Rocks(cf) => cf.delete(key),
            Table::Heap(t) => t.delete(key),
        }
    }

    /// Deletes `key`, which a read found holding the expired value `stored`; whether this
    /// removed it (the heap: only if it still holds `stored`, so an entry removed meanwhile
    /// is not counted twice and a value written meanwhile stays).
    pub(crate) fn delete_expired(&self, key: &[u8], stored: &[u8]) -> Result<bool> {
        match self {
            Table::Rocks(cf) => cf.delete(key).map(|()| true),
            Table::Heap(t) => t.delete_if(key, stored),
        }
    }

    /// In changelog mode, records that every key in `[start, end)` is deleted as of now,
    /// changing nothing stored (see `Cf::log_range_deletion`); nothing on the heap.
    pub(crate) fn log_range_deletion(&self, start: &[u8], end: &[u8]) -> Result<()> {
        match self {
            Table::Rocks(cf) => cf.log_range_deletion(start, end),
            Table::Heap(_) => Ok(()),
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
            Table::Heap(t) => t.scan(lower, upper, f),
        }
    }

    /// [`Table::scan`] for a caller that writes to the entries it has read (a TTL read's
    /// refresh or cleanup): see [`Cf::scan_writing_back`].
    pub(crate) fn scan_writing_back(
        &self,
        lower: &[u8],
        upper: Option<&[u8]>,
        f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        match self {
            Table::Rocks(cf) => cf.scan_writing_back(lower, upper, f),
            Table::Heap(t) => t.scan(lower, upper, f),
        }
    }

    /// [`Table::scan`] for one long sequential pass (RocksDB: no block-cache fill, readahead).
    pub(crate) fn scan_bulk(
        &self,
        lower: &[u8],
        upper: Option<&[u8]>,
        f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        match self {
            Table::Rocks(cf) => cf.scan_bulk(lower, upper, f),
            Table::Heap(t) => t.scan(lower, upper, f),
        }
    }

    /// Reads `tables` (the states of one backend: all RocksDB column families of one database,
    /// or all heap tables) together, each between its own `bounds` (lower, upper; one pair per
    /// table): `f` gets one cursor per table, in `tables`' order, each at its first entry (see
    /// [`Cf::bulk_cursors`]). A pair whose upper bound is not above its lower one reads nothing.
    pub(crate) fn bulk_cursors<R>(
        tables: &[&Table],
        bounds: &[(Vec<u8>, Option<Vec<u8>>)],
        f: impl FnOnce(&mut [TableCursor<'_>]) -> Result<R>,
    ) -> Result<R> {
        if bounds.len() != tables.len() {
            return Err(Error::Internal(
                "bulk cursors without one pair of bounds per table".into(),
            ));
        }
        // An empty range as RocksDB and `BTreeMap::range` both take it: from `lower` to `lower`.
        let bounds: Vec<(Vec<u8>, Option<Vec<u8>>)> = bounds
            .iter()
            .map(|(lower, upper)| match upper {
                Some(u) if u <= lower => (lower.clone(), Some(lower.clone())),
                _ => (lower.clone(), upper.clone()),
            })
            .collect();
        let cfs: Vec<&Cf> = tables
            .iter()
            .filter_map(|t| match t {
                Table::Rocks(cf) => Some(cf),
                Table::Heap(_) => None,
            })
            .collect();
        if cfs.len() == tables.len() {
            return Cf::bulk_cursors(&cfs, &bounds, |cursors| {
                let mut cursors: Vec<TableCursor<'_>> =
                    cursors.into_iter().map(TableCursor::Rocks).collect();
                f(&mut cursors)
            });
        }
        if !cfs.is_empty() {
            return Err(Error::Internal(
                "bulk cursors over RocksDB and heap tables together".into(),
            ));
        }
        let maps = tables
            .iter()
            .map(|t| match t {
                Table::Heap(h) => h.frozen(),
                Table::Rocks(_) => Err(Error::Internal("a RocksDB table among heap tables".into())),
            })
            .collect::<Result<Vec<_>>>()?;
        let mut cursors: Vec<TableCursor<'_>> = maps
            .iter()
            .zip(&bounds)
            .map(|(m, (lower, upper))| {
                let upper = match upper {
                    Some(u) => Bound::Excluded(&u[..]),
                    None => Bound::Unbounded,
                };
                let range: HeapRange<'_> = Box::new(
                    m.range::<_, [u8]>((Bound::Included(&lower[..]), upper))
                        .map(|(k, v)| (&k[..], &v[..])),
                );
                TableCursor::Heap(range.peekable())
            })
            .collect();
        f(&mut cursors)
    }

    /// This table as of now: for the heap an O(1) copy-on-write clone that later writes do not
    /// change; for RocksDB the live column family (no isolation).
    pub(crate) fn frozen(&self) -> Result<Table> {
        Ok(match self {
            Table::Rocks(cf) => Table::Rocks(cf.clone()),
            Table::Heap(t) => Table::Heap(t.snapshot()?),
        })
    }

    /// An empty batch for this table.
    pub(crate) fn batch(&self) -> TableBatch {
        match self {
            Table::Rocks(cf) => TableBatch::Rocks(cf.clone(), db::Batch::new()),
            Table::Heap(t) => TableBatch::Heap(t.clone(), Vec::new()),
        }
    }

    /// Flushes the column family's memtable (with the WAL off, what must survive a crash
    /// before the next checkpoint). Nothing to do on the heap.
    pub(crate) fn flush(&self) -> Result<()> {
        match self {
            Table::Rocks(cf) => cf.flush(),
            Table::Heap(_) => Ok(()),
        }
    }

    /// Compacts the column family fully (running TTL filters). Nothing to do on the heap.
    pub(crate) fn compact_all(&self) -> Result<()> {
        match self {
            Table::Rocks(cf) => cf.compact_all(),
            Table::Heap(_) => Ok(()),
        }
    }

    /// A RocksDB integer property. On the heap only `rocksdb.estimate-num-keys` is known (the
    /// exact entry count).
    pub(crate) fn property_u64(&self, name: &str) -> Result<Option<u64>> {
        match self {
            Table::Rocks(cf) => cf.property_u64(name),
            Table::Heap(t) => Ok(if name == "rocksdb.estimate-num-keys" {
                Some(t.len()? as u64)
            } else {
                None
            }),
        }
    }
}

/// A heap table's entries in a bounded range, in key order.
type HeapRange<'a> = Box<dyn Iterator<Item = (&'a [u8], &'a [u8])> + 'a>;

/// One table's cursor in a [`Table::bulk_cursors`] pass.
pub(crate) enum TableCursor<'a> {
    /// A RocksDB column family's iterator.
    Rocks(BulkCursor<'a>),
    /// A heap table's range.
    Heap(Peekable<HeapRange<'a>>),
}

impl TableCursor<'_> {
    /// The entry at the cursor; `None` past the pass's upper bound.
    pub(crate) fn current(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        match self {
            TableCursor::Rocks(c) => c.current(),
            TableCursor::Heap(r) => Ok(r.peek().copied()),
        }
    }

    /// Moves to the next entry.
    pub(crate) fn advance(&mut self) {
        match self {
            TableCursor::Rocks(c) => c.advance(),
            TableCursor::Heap(r) => {
                r.next();
            }
        }
    }
}

//! Reads and upkeep of whole column families and databases, each through a drained front
//! ([`super::front::Drained`]): bounded scans, integer properties, flushes, full compaction,
//! waiting for compactions, metrics and RocksDB checkpoints.

use std::hash::{BuildHasher, Hasher};
use std::path::Path;

use rocksdb::ReadOptions;

use super::front::Drained;
use super::rocks_error;
use super::Rocks;
use super::{Cf, Db};
use crate::error::{Error, ErrorKind, Result};
use crate::metrics::{LevelMetrics, RocksDbMetrics};

impl Db {
    /// Flushes every column family's memtable to SST files.
    pub(crate) fn flush_all(&self) -> Result<()> {
        let open = self.opened()?;
        let _job = open.manual_job();
        open.drained()?.flush_all()
    }

    /// Flushes memtables and waits until no compaction is pending or running.
    pub(crate) fn wait_for_compactions(&self) -> Result<()> {
        let open = self.opened()?;
        let _job = open.manual_job();
        let drained = open.drained()?;
        drained.release_kept_iterators();
        let mut opts = rocksdb::WaitForCompactOptions::default();
        opts.set_flush(true);
        drained
            .rocks()
            .wait_for_compact(&opts)
            .map_err(rocks_error)?;
        Ok(())
    }

    /// RocksDB figures of the whole database: integer properties summed over every column
    /// family, and SST counts and sizes per level from the live-file list.
    pub(crate) fn metrics(&self) -> Result<RocksDbMetrics> {
        let open = self.opened()?;
        let drained = open.drained()?;
        let rocks = drained.rocks();
        let handles = drained.handles();
        let sum = |prop: &str| -> Result<u64> {
            let mut total = 0u64;
            for h in &handles {
                total = total.saturating_add(
                    rocks
                        .property_int_value_cf(*h, prop)
                        .map_err(rocks_error)?
                        .unwrap_or(0),
                );
            }
            Ok(total)
        };
        let (value_cache_limit_bytes, value_cache_bytes, value_cache_entries) =
            open.value_cache_figures();
        let mut m = RocksDbMetrics {
            memtable_bytes: sum("rocksdb.cur-size-all-mem-tables")?,
            // One cache for the whole budget: read it once.
            block_cache_bytes: rocks
                .property_int_value("rocksdb.block-cache-usage")
                .map_err(rocks_error)?
                .unwrap_or(0),
            block_cache_pinned_bytes: rocks
                .property_int_value("rocksdb.block-cache-pinned-usage")
                .map_err(rocks_error)?
                .unwrap_or(0),
            block_cache_capacity_bytes: rocks
                .property_int_value("rocksdb.block-cache-capacity")
                .map_err(rocks_error)?
                .unwrap_or(0),
            write_cache_limit_bytes: open.write_cache_limit() as u64,
            value_cache_limit_bytes: value_cache_limit_bytes as u64,
            value_cache_bytes: value_cache_bytes as u64,
            value_cache_entries: value_cache_entries as u64,
            estimated_keys: sum("rocksdb.estimate-num-keys")?,
            pending_compaction_bytes: sum("rocksdb.estimate-pending-compaction-bytes")?,
            levels: Vec::new(),
            restored_bytes_warmed: self.warmed_bytes(),
        };
        let mut levels: std::collections::BTreeMap<u32, (u64, u64)> = Default::default();
        for f in rocks.live_files().map_err(rocks_error)? {
            let e = levels.entry(f.level.max(0) as u32).or_default();
            e.0 += 1;
            e.1 += f.size as u64;
        }
        m.levels = levels
            .into_iter()
            .map(|(level, (sst_files, sst_bytes))| LevelMetrics {
                level,
                sst_files,
                sst_bytes,
            })
            .collect();
        Ok(m)
    }

    /// Creates a RocksDB checkpoint in `dir` (which must not exist): memtables are flushed, SST
    /// files hard-linked, MANIFEST/CURRENT/OPTIONS copied.
    ///
    /// Without a WAL the memtables are flushed first (`Drained::flush_all`, which does not
    /// wait for compactions to clear a write stall as RocksDB's own flush does: a sync phase
    /// behind a compaction backlog waited seconds for it), and the checkpoint then flushes
    /// nothing. No write lands in between: drains wait for `at_rest`, and a write
    /// made straight through meanwhile is one made after the checkpoint. With a WAL, the
    /// checkpoint flushes itself (a checkpoint not flushing would copy the WAL files).
    pub(crate) fn checkpoint(&self, dir: &Path) -> Result<()> {
        let open = self.opened()?;
        // The checkpoint flushes: not during an ingestion.
        let _job = open.manual_job();
        let drained = open.drained()?;
        // The checkpoint flushes every memtable.
        drained.release_kept_iterators();
        // Not while another thread's drain is half written.
        let _at_rest = drained.at_rest();
        let checkpoint =
            rocksdb::checkpoint::Checkpoint::new(drained.rocks()).map_err(rocks_error)?;
        if self.options().wal {
            checkpoint.create_checkpoint(dir).map_err(rocks_error)?;
        } else {
            drained.flush_all()?;
            // `u64::MAX`: RocksDB's checkpoint flushes no memtable (it would wait as above).
            checkpoint
                .create_checkpoint_with_log_size(dir, u64::MAX)
                .map_err(rocks_error)?;
        }
        Ok(())
    }
}

impl Cf {
    /// Calls `f` for every entry with `lower <= key < upper` in key order until it returns
    /// `Ok(false)`. `upper = None` scans to the end of the column family. A bounded scan
    /// runs on the iterator kept from the last one of this column family
    /// ([`super::scan_iters`]). Every scan reads one consistent state: the writes made before
    /// it, and none or all of a batch made during it.
    pub(crate) fn scan(
        &self,
        lower: &[u8],
        upper: Option<&[u8]>,
        f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        self.scan_giving_up(lower, upper, GiveUp::Verify, f)
    }

    /// [`Cf::scan`] for a caller that writes to the entries it has read (a TTL read's refresh
    /// or removal of an expired entry): where the kept iterator gives up, the scan goes on
    /// past the last entry it gave, reading the entries after it as they are then, instead of
    /// failing because its own writes changed the entries it gave. It then reads one state
    /// only as far as no other thread writes the range meanwhile.
    pub(crate) fn scan_writing_back(
        &self,
        lower: &[u8],
        upper: Option<&[u8]>,
        f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        self.scan_giving_up(lower, upper, GiveUp::Resume, f)
    }

    fn scan_giving_up(
        &self,
        lower: &[u8],
        upper: Option<&[u8]>,
        give_up: GiveUp,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let Some(upper) = upper else {
            return self.scan_with(ReadOptions::default(), lower, None, f);
        };
        let open = self.db.opened()?;
        let drained = open.drained_for(self.slot)?;
        // A list or map above every key its group holds (keys that grow, as new ids do)
        // needs no iterator: the key bounds answer as they do for point reads.
        if drained.empty_by_bound(self.slot, lower, upper)? {
            return Ok(());
        }
        let Some(mut kept) = drained.kept_iterator(self.slot)? else {
            return self.scan_drained(&drained, ReadOptions::default(), lower, Some(upper), f);
        };
        let it = kept.get();
        it.seek(lower);
        // What went to `f`: how many entries, and a digest of them, to go on consistently
        // if the iterator gives up.
        let mut given = Given::default();
        let mut gave_any = false;
        let mut last_key: Vec<u8> = Vec::new();
        while let Some((k, v)) = it.item() {
            if k >= upper {
                break;
            }
            match give_up {
                GiveUp::Verify => given.add(k, v),
                GiveUp::Resume => {
                    last_key.clear();
                    last_key.extend_from_slice(k);
                    gave_any = true;
                }
            }
            if !f(k, v)? {
                return Ok(());
            }
            it.next();
        }
        match it.status() {
            Ok(()) => Ok(()),
            // More hidden entries in one step than a kept iterator skips (it has no upper
            // bound, so they may lie past `upper`): a new bounded iterator reads the range
            // again, which skips only those inside it, and the scan goes on from it past the
            // entries `f` had. If they differ from what it reads (a write landed in the range
            // in between), no single state holds both: the scan fails, to be retried. A caller
            // that writes to what it read goes on past the last entry it had instead.
            Err(e) if e.kind() == rocksdb::ErrorKind::Incomplete && give_up == GiveUp::Resume => {
                kept.discard();
                let from = if gave_any {
                    last_key.push(0);
                    last_key
                } else {
                    lower.to_vec()
                };
                self.scan_drained(&drained, ReadOptions::default(), &from, Some(upper), f)
            }
            Err(e) if e.kind() == rocksdb::ErrorKind::Incomplete => {
                kept.discard();
                let mut again = Given::default();
                let mut changed = false;
                self.scan_drained(
                    &drained,
                    ReadOptions::default(),
                    lower,
                    Some(upper),
                    |k, v| {
                        if again.count < given.count {
                            again.add(k, v);
                            if again.count == given.count && again.digest() != given.digest() {
                                changed = true;
                                return Ok(false);
                            }
                            return Ok(true);
                        }
                        f(k, v)
                    },
                )?;
                if changed || again.count < given.count {
                    return Err(Error::RocksDb {
                        kind: ErrorKind::Transient,
                        detail: "the entries of a scan changed while it ran past deleted \
                                 entries; retry the read"
                            .into(),
                    });
                }
                Ok(())
            }
            Err(e) => {
                kept.discard();
                Err(rocks_error(e))
            }
        }
    }

    /// [`Cf::scan`] with `read` (its bounds are set here).
    fn scan_with(
        &self,
        read: ReadOptions,
        lower: &[u8],
        upper: Option<&[u8]>,
        f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let open = self.db.opened()?;
        let drained = open.drained()?;
        if let Some(upper) = upper {
            // A list or map above every key its group holds (keys that grow, as new ids
            // do) needs no iterator: the key bounds answer as they do for point reads.
            if drained.empty_by_bound(self.slot, lower, upper)? {
                return Ok(());
            }
        }
        self.scan_drained(&drained, read, lower, upper, f)
    }

    /// [`Cf::scan_with`] through `drained`, on a new iterator.
    fn scan_drained(
        &self,
        drained: &Drained<'_>,
        mut read: ReadOptions,
        lower: &[u8],
        upper: Option<&[u8]>,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        read.set_iterate_lower_bound(lower.to_vec());
        if let Some(upper) = upper {
            read.set_iterate_upper_bound(upper.to_vec());
        }
        let at_rest = drained.at_rest();
        let mut it = drained
            .rocks()
            .raw_iterator_cf_opt(drained.handle(self.slot)?, read);
        drop(at_rest);
        it.seek(lower);
        while let Some((k, v)) = it.item() {
            if !f(k, v)? {
                return Ok(());
            }
            it.next();
        }
        it.status().map_err(rocks_error)?;
        Ok(())
    }

    /// [`Cf::scan`] for one long sequential pass over many entries (savepoints, whole key
    /// groups): the blocks read are not added to the block cache (a bulk scan would evict the
    /// hot working set and pay for the inserts) and files are read ahead in 2 MiB steps.
    pub(crate) fn scan_bulk(
        &self,
        lower: &[u8],
        upper: Option<&[u8]>,
        f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        self.scan_with(bulk_read_options(), lower, upper, f)
    }

    /// Reads the column families `cfs` (of one database) together, each between its own
    /// `bounds` (lower, upper; one pair per column family): `f` gets one cursor per column
    /// family, in `cfs`' order, each at its first key, and moves them as it likes (a savepoint
    /// takes one key group of every state before the next). Bulk reads as [`Cf::scan_bulk`]:
    /// no block-cache fill, 2 MiB readahead.
    pub(crate) fn bulk_cursors<R>(
        cfs: &[&Cf],
        bounds: &[(Vec<u8>, Option<Vec<u8>>)],
        f: impl FnOnce(Vec<BulkCursor<'_>>) -> Result<R>,
    ) -> Result<R> {
        let Some(first) = cfs.first() else {
            return f(Vec::new());
        };
        if cfs
            .iter()
            .any(|cf| !std::sync::Arc::ptr_eq(&cf.db, &first.db))
            || bounds.len() != cfs.len()
        {
            return Err(Error::Internal(
                "bulk cursors over column families of different databases, or not one pair of \
                 bounds each"
                    .into(),
            ));
        }
        let open = first.db.opened()?;
        let drained = open.drained()?;
        let at_rest = drained.at_rest();
        let mut cursors = Vec::with_capacity(cfs.len());
        for (cf, (lower, upper)) in cfs.iter().zip(bounds) {
            let mut read = bulk_read_options();
            read.set_iterate_lower_bound(lower.clone());
            if let Some(upper) = upper {
                read.set_iterate_upper_bound(upper.clone());
            }
            let it = drained
                .rocks()
                .raw_iterator_cf_opt(drained.handle(cf.slot)?, read);
            cursors.push(BulkCursor { it });
        }
        drop(at_rest);
        for (c, (lower, _)) in cursors.iter_mut().zip(bounds) {
            c.it.seek(lower);
        }
        f(cursors)
    }

    /// RocksDB's estimate of the bytes this column family's SST files hold between `lower`
    /// and `upper` (memtables not counted): index positions, not a scan, so it costs a few
    /// index lookups per file the range touches. Drains only this column family's cached
    /// writes (a bisection asks many times).
    pub(crate) fn approximate_file_bytes(&self, lower: &[u8], upper: &[u8]) -> Result<u64> {
        let open = self.db.opened()?;
        let drained = open.drained_for(self.slot)?;
        let handle = drained.handle(self.slot)?;
        let sizes = drained
            .rocks()
            .get_approximate_sizes_cf(handle, &[rocksdb::Range::new(lower, upper)]);
        Ok(sizes.first().copied().unwrap_or(0))
    }

    /// The first key at or after `from` and below `upper`, if any.
    pub(crate) fn first_key_from(
        &self,
        from: &[u8],
        upper: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>> {
        let mut out = None;
        self.scan_with(ReadOptions::default(), from, upper, |k, _| {
            out = Some(k.to_vec());
            Ok(false)
        })?;
        Ok(out)
    }

    /// Flushes this column family's memtable to an SST file (WAL off: what must survive a
    /// crash without a checkpoint).
    pub(crate) fn flush(&self) -> Result<()> {
        let open = self.db.opened()?;
        let _job = open.manual_job();
        let drained = open.drained()?;
        drained
            .rocks()
            .flush_cf_opt(
                drained.handle(self.slot)?,
                &rocksdb::FlushOptions::default(),
            )
            .map_err(rocks_error)
    }

    /// Compacts the whole column family (runs compaction filters on every entry).
    pub(crate) fn compact_all(&self) -> Result<()> {
        self.compact(None, None)
    }

    /// Compacts `[from, to)` down to the bottom level, so range tombstones and the entries they
    /// cover are dropped from disk.
    pub(crate) fn compact_range(&self, from: &[u8], to: &[u8]) -> Result<()> {
        if from >= to {
            return Ok(());
        }
        self.compact(Some(from), Some(to))
    }

    /// Compacts the keys between `from` and `to` (`None`: unbounded) to the bottom level.
    fn compact(&self, from: Option<&[u8]>, to: Option<&[u8]>) -> Result<()> {
        let open = self.db.opened()?;
        let _job = open.manual_job();
        let drained = open.drained()?;
        drained.release_kept_iterators();
        let mut opts = rocksdb::CompactOptions::default();
        opts.set_bottommost_level_compaction(rocksdb::BottommostLevelCompaction::ForceOptimized);
        drained
            .rocks()
            .compact_range_cf_opt(drained.handle(self.slot)?, from, to, &opts);
        Ok(())
    }

    /// An integer RocksDB property of this column family (e.g. `rocksdb.estimate-num-keys`).
    pub(crate) fn property_u64(&self, name: &str) -> Result<Option<u64>> {
        let open = self.db.opened()?;
        let drained = open.drained()?;
        drained
            .rocks()
            .property_int_value_cf(drained.handle(self.slot)?, name)
            .map_err(rocks_error)
    }

    /// Whether this column family's memtables (active and immutable) hold no entries, so its
    /// live SST files hold all of its data.
    pub(crate) fn memtables_empty(&self) -> Result<bool> {
        for prop in [
            "rocksdb.num-entries-active-mem-table",
            "rocksdb.num-entries-imm-mem-tables",
        ] {
            if self.property_u64(prop)?.unwrap_or(1) > 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// What a bounded scan on a kept iterator does where the iterator gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GiveUp {
    /// Read the range again and go on only if the entries given are unchanged.
    Verify,
    /// Go on past the last entry given.
    Resume,
}

/// The entries a scan gave its caller: how many, and a 64-bit hash over their keys and
/// values with their lengths (a CRC-32 cost map scans a tenth of their time).
struct Given {
    count: usize,
    hash: foldhash::quality::FoldHasher<'static>,
}

impl Default for Given {
    fn default() -> Self {
        Given {
            count: 0,
            hash: foldhash::quality::FixedState::with_seed(0).build_hasher(),
        }
    }
}

impl Given {
    fn add(&mut self, key: &[u8], value: &[u8]) {
        self.count += 1;
        self.hash.write_usize(key.len());
        self.hash.write(key);
        self.hash.write_usize(value.len());
        self.hash.write(value);
    }

    fn digest(&self) -> u64 {
        self.hash.finish()
    }
}

/// Reads of one long sequential pass: the blocks read are not added to the block cache (a
/// bulk scan would evict the hot working set and pay for the inserts) and files are read
/// ahead in 2 MiB steps.
fn bulk_read_options() -> ReadOptions {
    let mut read = ReadOptions::default();
    read.fill_cache(false);
    read.set_readahead_size(2 << 20);
    read
}

/// One column family's iterator in a [`Cf::bulk_cursors`] pass.
pub(crate) struct BulkCursor<'a> {
    it: rocksdb::DBRawIteratorWithThreadMode<'a, Rocks>,
}

impl BulkCursor<'_> {
    /// The entry at the cursor, `None` past the pass's upper bound; an error the iterator met
    /// (an unreadable file) instead of its end.
    pub(crate) fn current(&self) -> Result<Option<(&[u8], &[u8])>> {
        match self.it.item() {
            Some(entry) => Ok(Some(entry)),
            None => {
                self.it.status().map_err(rocks_error)?;
                Ok(None)
            }
        }
    }

    /// Moves to the next entry.
    pub(crate) fn advance(&mut self) {
        self.it.next();
    }
}

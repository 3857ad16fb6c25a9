//! File-level changes of one column family (docs/rescale.md): dropping the SST files inside a
//! range, range deletion, ingestion of SSTs written by [`super::Db::write_sst`], the live file
//! list, and, through RocksDB's C API on a closed database ([`FileSurgery`]), ingestion of
//! files written by *other* databases with their sequence numbers and the rebuild of a column
//! family without some of its files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::budget::MemoryBudget;
use super::compaction_filter::FilterRegistry;
use super::rocks_error;
use super::Cf;
use crate::error::{Error, Result};
use crate::options::DbOptions;

impl Cf {
    /// Drops the SST files that lie entirely inside `[from, to)` (they are then no longer part
    /// of the database); keys in other files stay. RocksDB selects those files with `to`
    /// *inclusive*: callers pass a key-group prefix, which no stored key equals (stored keys
    /// are longer than their prefix).
    pub(crate) fn drop_files_in_range(&self, from: &[u8], to: &[u8]) -> Result<()> {
        self.delete_in_range(from, to, RangeChange::DropFiles)
    }

    /// Deletes every key in `[from, to)` with a range tombstone; first drops the SST files that
    /// lie entirely inside the range ([`Cf::drop_files_in_range`]).
    pub(crate) fn delete_range(&self, from: &[u8], to: &[u8]) -> Result<()> {
        self.delete_in_range(from, to, RangeChange::DropFilesAndTombstone)
    }

    /// Deletes every key in `[from, to)` with a range tombstone only: no file is dropped, so
    /// `to` may be any key (a file whose largest key is `to` itself keeps it, which
    /// [`Cf::delete_range`]'s drop of whole files, `to` inclusive, would not).
    pub(crate) fn range_tombstone(&self, from: &[u8], to: &[u8]) -> Result<()> {
        self.delete_in_range(from, to, RangeChange::Tombstone)
    }

    /// Applies `change` to `[from, to)`: one hold of the front lock across the file drop and
    /// the tombstone, so no read records a value in between.
    fn delete_in_range(&self, from: &[u8], to: &[u8], change: RangeChange) -> Result<()> {
        if from >= to {
            return Ok(());
        }
        let open = self.db.opened()?;
        let changing = open.changing()?;
        let handle = changing.handle(self.slot)?;
        if change != RangeChange::Tombstone {
            changing
                .rocks()
                .delete_file_in_range_cf(handle, from, to)
                .map_err(rocks_error)?;
        }
        if change != RangeChange::DropFiles {
            changing
                .rocks()
                .delete_range_cf_opt(handle, from, to, changing.write_options())
                .map_err(rocks_error)?;
        }
        Ok(())
    }

    /// Ingests SST files written by [`super::Db::write_sst`] into this column family, moving
    /// them (hard link) into the database directory. Their entries get sequence numbers above
    /// everything already in the database, so they win over earlier range tombstones.
    pub(crate) fn ingest(&self, files: &[PathBuf]) -> Result<()> {
        Cf::ingest_each(&[(self, files)])
    }

    /// [`Cf::ingest`] into several column families of one database at once: under one hold
    /// of the front lock, each column family's files in one ingestion on a thread of its own.
    /// RocksDB links and syncs an ingestion's files one after another before it takes the
    /// database's lock, so ingestions into different column families overlap those syncs
    /// (each a device flush); the files of one column family keep their order. Every `Cf`
    /// must be of one database, each at most once. Column families without files are left
    /// alone, and without any files nothing happens (no drain, no cache emptied).
    pub(crate) fn ingest_each(batches: &[(&Cf, &[PathBuf])]) -> Result<()> {
        let mut seen: Vec<usize> = Vec::with_capacity(batches.len());
        for (cf, _) in batches {
            if !Arc::ptr_eq(&cf.db, &batches[0].0.db) || seen.contains(&cf.slot) {
                return Err(Error::Internal(
                    "an ingestion into one column family twice, or into two databases".into(),
                ));
            }
            seen.push(cf.slot);
        }
        let batches: Vec<(&Cf, &[PathBuf])> = batches
            .iter()
            .copied()
            .filter(|(_, files)| !files.is_empty())
            .collect();
        let Some((first, _)) = batches.first() else {
            return Ok(());
        };
        let slots: Vec<usize> = batches.iter().map(|(cf, _)| cf.slot).collect();
        let open = first.db.opened()?;
        // No flush or compaction may finish during the ingestion (`super::quiet`): held
        // before the front's lock, settled under it (the drain below fills memtables).
        let held = open.hold_jobs()?;
        let mut changing = open.changing()?;
        open.settle_jobs(&held, &slots)?;
        if let Some(b) = changing.bounds() {
            for &slot in &slots {
                b.begin_ingest(slot);
            }
        }
        let rocks = changing.rocks();
        let ingested = (|| {
            let handles = batches
                .iter()
                .map(|(cf, _)| changing.handle(cf.slot))
                .collect::<Result<Vec<_>>>()?;
            // Each column family's level 0 as it will be if every file lands there (files
            // that overlap the data do): its triggers are raised beside the ingestion, so the
            // stall the files would start never begins, and the OPTIONS file RocksDB rewrites
            // for the raise is written while the ingestion syncs its files.
            let predicted = batches
                .iter()
                .map(|(cf, files)| Ok((cf.slot, open.level0_files(cf.slot)? + files.len() as u64)))
                .collect::<Result<Vec<_>>>()?;
            #[cfg(test)]
            open.note_jobs_at_ingestion();
            // The raise first, then one ingestion per column family, side by side; the
            // calling thread takes part, so a process out of threads ingests on fewer.
            let steps: Vec<IngestStep<'_>> = std::iter::once(IngestStep::Raise)
                .chain(
                    batches
                        .iter()
                        .zip(handles)
                        .map(|((_, files), handle)| IngestStep::Files(handle, files)),
                )
                .collect();
            crate::parallel::run_parallel(&steps, steps.len(), |step| match step {
                IngestStep::Raise => {
                    for &(slot, l0) in &predicted {
                        open.raise_level0(slot, l0);
                    }
                    Ok(())
                }
                IngestStep::Files(handle, files) => {
                    let mut opts = rocksdb::IngestExternalFileOptions::default();
                    opts.set_move_files(true);
                    rocks
                        .ingest_external_file_cf_opts(*handle, &opts, files.to_vec())
                        .map_err(rocks_error)
                }
            })
            .map(drop)
        })();
        if let Some(b) = changing.bounds() {
            for &slot in &slots {
                b.end_ingest(slot);
            }
        }
        drop(changing);
        let released = held.release();
        if ingested.is_ok() {
            // Files of large entries (a restore's, a savepoint's) size the blocks of the
            // column family's compactions before any put could.
            for &slot in &slots {
                open.size_blocks_from_files(slot);
            }
        }
        ingested.and(released)
    }

    /// The live SST files of this column family, in the order [`FileSurgery::ingest`] must
    /// get them: the deepest level first, L0 oldest first. For any key in several of them the
    /// older version then comes first, as RocksDB requires (options.h,
    /// `allow_db_generated_files`). A file without key bounds is an error.
    pub(crate) fn live_files(&self) -> Result<Vec<LiveSst>> {
        let open = self.db.opened()?;
        let drained = open.drained()?;
        let mut out = Vec::new();
        for f in drained.rocks().live_files().map_err(rocks_error)? {
            if f.column_family_name != *self.name {
                continue;
            }
            let (Some(smallest), Some(largest)) = (f.start_key, f.end_key) else {
                return Err(Error::Internal(format!(
                    "live file {} has no key range",
                    f.name
                )));
            };
            // `name` is relative to the database directory, with a leading '/'.
            out.push(LiveSst {
                path: self.db.path.join(f.name.trim_start_matches('/')),
                level: f.level,
                smallest,
                largest,
            });
        }
        // RocksDB lists levels top-down and L0 newest first: reversing the whole list gives the
        // deepest level first and L0 oldest first. The stable sort only guards the level order.
        out.reverse();
        out.sort_by_key(|f| std::cmp::Reverse(f.level));
        Ok(out)
    }
}

/// What [`Cf::delete_in_range`] does to a key range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RangeChange {
    /// Drops the files wholly inside it (RocksDB takes the end inclusive).
    DropFiles,
    /// Drops those files, then deletes the rest with a range tombstone.
    DropFilesAndTombstone,
    /// Only the range tombstone: no file is dropped.
    Tombstone,
}

/// One live SST file of a column family ([`Cf::live_files`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LiveSst {
    /// The file's path.
    pub(crate) path: PathBuf,
    /// Its LSM level.
    pub(crate) level: i32,
    /// Smallest user key, range tombstone starts included.
    pub(crate) smallest: Vec<u8>,
    /// Largest user key, range tombstone ends (exclusive bounds) included.
    pub(crate) largest: Vec<u8>,
}

/// SST files written by another database, for one column family of [`FileSurgery::ingest`].
#[derive(Debug, Clone)]
pub(crate) struct ForeignFiles {
    /// The column family to ingest into (it must exist).
    pub(crate) cf: String,
    /// The files, in [`Cf::live_files`] order.
    pub(crate) files: Vec<PathBuf>,
}

/// One step of [`Cf::ingest_each`]: raising the level-0 triggers, or one column family's
/// files.
enum IngestStep<'a> {
    /// Raise the level-0 stall triggers above the predicted level 0.
    Raise,
    /// Ingest these files into this column family.
    Files(&'a super::Handle, &'a [PathBuf]),
}

/// Owns a `rocksdb_ingestexternalfileoptions_t` of the C API.
struct RawIngestOptions(*mut librocksdb_sys::rocksdb_ingestexternalfileoptions_t);

impl Drop for RawIngestOptions {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `rocksdb_ingestexternalfileoptions_create`, is non-null
        // (checked at creation) and is destroyed exactly once, here.
        unsafe { librocksdb_sys::rocksdb_ingestexternalfileoptions_destroy(self.0) }
    }
}

impl super::Db {
    /// Raises the level-0 stall triggers of every column family whose level 0 a restore
    /// filled past the slowdown count, until compaction has taken it back below
    /// (`super::l0_triggers`): what the restore placed there is not compaction falling
    /// behind this database's writes. Turns automatic compactions on where the restore
    /// opened the database with them off (`Db::open_for_restore`, `super::quiet`).
    pub(crate) fn after_restore(&self) -> Result<()> {
        let open = self.opened()?;
        open.after_restore();
        open.resume_compactions()
    }
}

/// A closed database opened for file-level surgery with RocksDB's C API, which rust-rocksdb
/// does not wrap: ingesting SST files written by *other* databases with their sequence numbers
/// ([`FileSurgery::ingest`]), and rebuilding a column family from a subset of its own files
/// ([`FileSurgery::rebuild`]). Both use RocksDB's `allow_db_generated_files` ingestion with
/// `link_files`: the files are hard-linked, their sources stay intact.
///
/// The database is opened single-threaded, with automatic compactions off (its live files
/// stay as listed while it is open): only that handle type exposes its raw pointer in
/// rust-rocksdb 0.25 (`AsRawPtr`). Nothing else may have it open.
pub(crate) struct FileSurgery {
    db: rocksdb::DB,
    options: DbOptions,
    budget: MemoryBudget,
    filters: FilterRegistry,
    level0: super::l0_triggers::Base,
    ingest: RawIngestOptions,
}

impl FileSurgery {
    /// Opens the closed database at `path`.
    pub(crate) fn open(path: &Path, options: &DbOptions, budget: &MemoryBudget) -> Result<Self> {
        options.validate()?;
        let opts = super::options::db_options(options, budget)?;
        let filters = FilterRegistry::default();
        let level0 = super::l0_triggers::Base::new(options.level0_file_num_compaction_trigger);
        let descriptors = super::options::cf_names(path, &opts)?
            .into_iter()
            .map(|name| {
                let cf = surgery_cf_options(options, budget, &name, &filters, level0)?;
                Ok(rocksdb::ColumnFamilyDescriptor::new(name, cf))
            })
            .collect::<Result<Vec<_>>>()?;
        let db = rocksdb::DB::open_cf_descriptors(&opts, path, descriptors).map_err(rocks_error)?;
        // SAFETY: creates a fresh options object; null (allocation failure) is checked below.
        let ingest =
            RawIngestOptions(unsafe { librocksdb_sys::rocksdb_ingestexternalfileoptions_create() });
        if ingest.0.is_null() {
            return Err(Error::Internal("cannot create ingestion options".into()));
        }
        // SAFETY: `ingest.0` is a valid, exclusively owned options object (created above).
        unsafe {
            librocksdb_sys::rocksdb_ingestexternalfileoptions_set_allow_db_generated_files(
                ingest.0, 1,
            );
            librocksdb_sys::rocksdb_ingestexternalfileoptions_set_link_files(ingest.0, 1);
            // Both as options.h's setting guide asks for DB-generated files: they cannot get a
            // global sequence number, and must not overlap a memtable (ours are empty).
            librocksdb_sys::rocksdb_ingestexternalfileoptions_set_snapshot_consistency(ingest.0, 0);
            librocksdb_sys::rocksdb_ingestexternalfileoptions_set_allow_blocking_flush(ingest.0, 0);
        }
        Ok(FileSurgery {
            db,
            options: options.clone(),
            budget: budget.clone(),
            filters,
            level0,
            ingest,
        })
    }

    /// Ingests `batch` in one call, atomic on its own. RocksDB refuses files that overlap any
    /// data already in the column family (the caller's fallback case, returned as
    /// `Err(reason)`; the database is then unchanged). The database's last sequence number is
    /// raised to the largest ingested one (and persisted in its MANIFEST), so later writes,
    /// range tombstones included, are newer than every ingested entry.
    pub(crate) fn ingest(&self, batch: &ForeignFiles) -> Result<std::result::Result<(), String>> {
        if batch.files.is_empty() {
            return Ok(Ok(()));
        }
        self.ingest_files(&batch.cf, &batch.files)
    }

    fn ingest_files(&self, cf: &str, files: &[PathBuf]) -> Result<std::result::Result<(), String>> {
        use rocksdb::{AsColumnFamilyRef, AsRawPtr};
        let handle = self
            .db
            .cf_handle(cf)
            .ok_or_else(|| Error::Internal(format!("column family {cf} missing for ingestion")))?;
        let paths = files
            .iter()
            .map(|p| {
                p.to_str()
                    .and_then(|s| std::ffi::CString::new(s).ok())
                    .ok_or_else(|| Error::InvalidOption {
                        name: "path",
                        detail: format!("{} is not valid UTF-8 without NUL", p.display()),
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        let ptrs: Vec<*const std::ffi::c_char> = paths.iter().map(|p| p.as_ptr()).collect();
        let mut err: *mut std::ffi::c_char = std::ptr::null_mut();
        // SAFETY: `self.db` (and so its raw pointer and the column family handle) outlives the
        // call; `ptrs` points into `paths`, NUL-terminated strings alive across the call, and
        // has `ptrs.len()` entries; `self.ingest.0` is a valid options object; `err` is a
        // valid out-pointer RocksDB sets to a malloc'ed message on failure.
        unsafe {
            librocksdb_sys::rocksdb_ingest_external_file_cf(
                self.db.as_raw_ptr(),
                handle.inner(),
                ptrs.as_ptr(),
                ptrs.len(),
                self.ingest.0,
                &mut err,
            );
        }
        // SAFETY: `err` is null or RocksDB's malloc'ed message, taken once.
        match unsafe { super::raw::take_message(err) } {
            None => Ok(Ok(())),
            Some(message) => Ok(Err(message)),
        }
    }

    /// Rebuilds column family `cf` without its files `drop`: its files are hard-linked into
    /// `scratch`, the column family is dropped and created again with the same options, and
    /// the others are ingested into it as they are, with their sequence numbers, deepest level
    /// first and level 0 oldest first (so for any key the older version comes first, as
    /// RocksDB requires). This drops level-0 files, which RocksDB's `DeleteFilesInRange`
    /// never does. `expect` is the column family's live files ([`Cf::live_files`], in its
    /// order) as the caller planned with; every file but `drop` must have been written by
    /// RocksDB itself (a file an `SstFileWriter` wrote holds sequence number 0 and got its
    /// real one from the MANIFEST, which the new column family would not know).
    ///
    /// Returns `Ok(Err(reason))`, the column family as it was, when its live files are not
    /// `expect` (a compaction ran since) or a link fails, and when RocksDB refuses the
    /// ingestion: then every file of `expect` is ingested back, which gives the column
    /// family's entries as they were. `Err` if dropping or creating the column family fails
    /// or RocksDB refuses its files back too: the database is then unusable and the restore
    /// fails (it removes its target). Its memtables must be empty (the caller checks; a flush
    /// here would add a file nobody planned with). Every kept file must read the same ingested
    /// again (`crate::rescale` checks: written by RocksDB, no range tombstone).
    pub(crate) fn rebuild(
        &mut self,
        cf: &str,
        expect: &[PathBuf],
        drop: &[PathBuf],
        scratch: &Path,
    ) -> Result<std::result::Result<(), String>> {
        let name_of = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
        let mut live: Vec<String> = self
            .db
            .live_files()
            .map_err(rocks_error)?
            .into_iter()
            .filter(|f| f.column_family_name == cf)
            .map(|f| f.name.trim_start_matches('/').to_string())
            .collect();
        let mut planned: Vec<String> = expect.iter().filter_map(|p| name_of(p)).collect();
        live.sort();
        planned.sort();
        if live != planned || planned.len() != expect.len() {
            return Ok(Err(format!(
                "the live files of {cf} changed since the rescale was planned"
            )));
        }
        // Links under names of their own: the dropped column family's files go when it does.
        let mut links: Vec<PathBuf> = Vec::with_capacity(expect.len());
        for (i, file) in expect.iter().enumerate() {
            let link = scratch.join(format!("rebuild-{}-{i}.sst", links_tag(cf)));
            if let Err(e) = std::fs::hard_link(file, &link) {
                remove_all(&links);
                return Ok(Err(format!("cannot link {}: {e}", file.display())));
            }
            links.push(link);
        }
        let keep: Vec<PathBuf> = expect
            .iter()
            .zip(&links)
            .filter(|(f, _)| !drop.contains(f))
            .map(|(_, l)| l.clone())
            .collect();
        let outcome = self.replace_files(cf, &keep, &links);
        remove_all(&links);
        outcome
    }

    /// Empties column family `cf` and ingests `keep` into it; if RocksDB refuses them, ingests
    /// `all` (what it held) instead.
    fn replace_files(
        &mut self,
        cf: &str,
        keep: &[PathBuf],
        all: &[PathBuf],
    ) -> Result<std::result::Result<(), String>> {
        self.recreate(cf)?;
        if keep.is_empty() {
            // RocksDB refuses an ingestion of no files.
            return Ok(Ok(()));
        }
        let Err(reason) = self.ingest_files(cf, keep)? else {
            return Ok(Ok(()));
        };
        // A refused ingestion changes nothing: the column family is empty again.
        match self.ingest_files(cf, all)? {
            Ok(()) => Ok(Err(reason)),
            Err(again) => Err(Error::Internal(format!(
                "rebuilding {cf}: RocksDB refused its files ({reason}) and then refused them \
                 back ({again})"
            ))),
        }
    }

    /// Drops column family `cf` and creates it again, empty, with the options it was opened
    /// with.
    fn recreate(&mut self, cf: &str) -> Result<()> {
        let opts = surgery_cf_options(&self.options, &self.budget, cf, &self.filters, self.level0)?;
        self.db.drop_cf(cf).map_err(rocks_error)?;
        self.db.create_cf(cf, &opts).map_err(rocks_error)
    }
}

/// The options of column family `name` in a [`FileSurgery`]: as the backend opens it, but
/// without file partitioning (cuts change where compaction splits files, never what a read
/// sees) and without automatic compactions (its live files stay as listed).
fn surgery_cf_options(
    options: &DbOptions,
    budget: &MemoryBudget,
    name: &str,
    filters: &FilterRegistry,
    level0: super::l0_triggers::Base,
) -> Result<rocksdb::Options> {
    // A short-lived database of the surgery: no memtable bloom.
    let mut cf = super::options::state_cf_options(options, budget, name, filters, 0, false)?;
    super::options::set_level0_triggers(&mut cf, level0);
    cf.set_disable_auto_compactions(true);
    Ok(cf)
}

/// `cf` as a file-name fragment (state names may hold any character).
fn links_tag(cf: &str) -> String {
    cf.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Removes the scratch links (a missing one is no error: nothing is left to clean).
fn remove_all(links: &[PathBuf]) {
    for l in links {
        let _ = std::fs::remove_file(l);
    }
}

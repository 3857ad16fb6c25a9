//! Canonical savepoints (docs/savepoint-format.md): writing a backend's keyed state into the
//! portable format of `sst_format::savepoint`, and restoring one into an empty backend at any
//! parallelism (entries of key groups outside the backend's range are skipped).
//!
//! Writing scans runs of consecutive key groups, every state once per run, on a pool of
//! encoder threads, and writes the blocks in key-group order (see
//! [`FullSnapshot::write_savepoint`] and docs/decisions/0020-savepoint-writer.md); expired
//! TTL entries are dropped while writing when the state's `Cleanup::full_snapshot` is on (only
//! states registered with their TTL settings in this session are filtered: the TTL duration is
//! not persisted). List elements are written with their position; restore gives them fresh
//! sequence numbers in the same order. Restore into RocksDB ingests sorted SSTs built from the
//! verified blocks; into the heap it applies write batches.
//!
//! The heap backend writes the same format from a [`FullSnapshot`]: a copy-on-write view taken
//! in O(number of states) on the task thread and serialized on any thread while the task keeps
//! writing (docs/heap-backend.md). State therefore moves between the heap and RocksDB backends,
//! both ways and at any parallelism, through a savepoint.

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use sst_format::{
    BlockBuilder, BlockCompressor, EncodedBlock, SavepointEntry, SavepointHeader, SavepointReader,
    SavepointStats, SavepointWriter,
};

use crate::clock::{Clock, ManualClock};
use crate::codec;
use crate::db::{BlockSizing, Db};
use crate::error::{Error, Result};
use crate::keygroup::KeyGroupRange;
use crate::list_entry::{self, Entry, ListCursor};
use crate::meta::{SequenceAllocator, META_WATERMARK};
use crate::operator_state::OperatorState;
use crate::savepoint_runs::{self, Run};
use crate::state::{self, StateCore, StateKind, StateMeta};
use crate::store::Table;
use crate::ttl;

/// zstd level of savepoint blocks: fast to write, still compact.
pub const SAVEPOINT_ZSTD_LEVEL: i32 = 1;

/// What a savepoint is written from or restored into: the backend's key groups, its
/// database (none for the heap backend), and how to reach its states. The backend facade
/// builds it; this module never names the backend types.
pub(crate) struct SavepointTarget<'a> {
    /// The job's number of key groups.
    pub(crate) max_parallelism: u32,
    /// The backend's key groups.
    pub(crate) key_groups: KeyGroupRange,
    /// The RocksDB instance; `None` for the heap backend.
    pub(crate) db: Option<&'a Arc<Db>>,
    /// The backend's directory (restore stages SSTs next to it).
    pub(crate) path: &'a Path,
    /// The backend's list-element sequence numbers.
    pub(crate) list_seq: &'a SequenceAllocator,
    /// The processing-time clock (the time a savepoint records).
    pub(crate) clock: &'a dyn Clock,
    /// The event-time watermark: a savepoint records it, a restore raises it to the highest
    /// of its files'.
    pub(crate) watermark: &'a ManualClock,
    /// The registered states' metadata.
    pub(crate) states: Vec<StateMeta>,
    /// The state registered under `meta` (registering it if new; other metadata under the
    /// same name is an error).
    pub(crate) core_for: &'a dyn Fn(&StateMeta) -> Result<Arc<StateCore>>,
    /// Raises the stored TTL timestamp mark of list state `name` to at least the given
    /// timestamp (`crate::meta::StampFloor`): a restore brought in entries stamped up to it.
    pub(crate) raise_ttl_floor: &'a dyn Fn(&str, u64) -> Result<()>,
}

/// Every state's metadata, table view and TTL expiry rule as of now: the view a savepoint is
/// written from. For the heap backend the tables are copy-on-write clones; for RocksDB, the
/// live column families (the caller does not write while the savepoint is written). `None`
/// if `unlisted`, asked under the heap's gate, says a state not in `t.states` holds entries:
/// list the states again and retry.
pub(crate) fn snapshot_view(
    t: &SavepointTarget<'_>,
    unlisted: &dyn Fn(&[StateMeta]) -> bool,
) -> Result<Option<FullSnapshot>> {
    let start = Instant::now();
    let cores = t
        .states
        .iter()
        .map(|meta| Ok((meta, (t.core_for)(meta)?)))
        .collect::<Result<Vec<_>>>()?;
    // Heap: every table frozen under the backend's gate held exclusively, so the view is one
    // cut of all states even while other threads write.
    let gate = cores.iter().find_map(|(_, c)| match &c.table {
        Table::Heap(h) => Some(Arc::clone(h.gate())),
        Table::Rocks(_) => None,
    });
    let _held = gate.as_ref().map(|g| g.write());
    // A state registered and written since `t.states` was listed holds writes that precede
    // others this cut holds: the caller lists the states again.
    if unlisted(&t.states) {
        return Ok(None);
    }
    let mut states = Vec::new();
    for (meta, core) in cores {
        let expiry = core
            .ttl
            .as_ref()
            .filter(|t| t.config.cleanup.full_snapshot && t.config.expires())
            .map(|t| (t.ttl_ms, t.clock.now_ms()));
        states.push(SnapshotState {
            table: core.table.frozen()?,
            meta: meta.clone(),
            expiry,
        });
    }
    Ok(Some(FullSnapshot {
        max_parallelism: t.max_parallelism,
        key_groups: t.key_groups,
        states,
        taken_in: start.elapsed(),
        taken_at_ms: t.clock.now_ms(),
        watermark_ms: t.watermark.now_ms(),
    }))
}

/// Loads the savepoints at `paths` into the backend `t` describes, which must hold no state
/// yet (see `KeyedBackend::restore_savepoints`).
pub(crate) fn restore_savepoints(
    t: &SavepointTarget<'_>,
    paths: &[&Path],
) -> Result<SavepointStats> {
    if !t.states.is_empty() {
        return Err(Error::InvalidOption {
            name: "restore_savepoint",
            detail: "the backend already holds state; restore into an empty backend".into(),
        });
    }
    let max_parallelism = t.max_parallelism;
    let range = t.key_groups;
    let mut readers = Vec::with_capacity(paths.len());
    for path in paths {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let reader = SavepointReader::open(BufReader::new(file)).map_err(Error::format)?;
        let h = reader.header();
        if h.max_parallelism != max_parallelism {
            return Err(Error::BackendMismatch {
                path: path.to_path_buf(),
                existing: format!("max parallelism {}", h.max_parallelism),
                requested: format!("max parallelism {max_parallelism}"),
            });
        }
        let groups = KeyGroupRange::new(h.key_group_start, h.key_group_end)?;
        for (other, _) in &readers {
            if groups.intersect(other).is_some() {
                return Err(Error::InvalidKeyGroups(format!(
                    "savepoint {} holds key groups {groups}, overlapping another one's {other}",
                    path.display()
                )));
            }
        }
        readers.push((groups, reader));
    }
    // Together the files must hold every key group of the backend: a missing old instance
    // would leave its key groups empty without a word (the operator states refuse it too).
    let mut missing = Vec::new();
    let mut next = u32::from(range.start);
    let mut covered: Vec<KeyGroupRange> = readers
        .iter()
        .filter_map(|(g, _)| g.intersect(&range))
        .collect();
    covered.sort_by_key(|g| g.start);
    for g in &covered {
        if u32::from(g.start) > next {
            missing.push(format!("{next}..={}", g.start - 1));
        }
        next = next.max(u32::from(g.end) + 1);
    }
    if next <= u32::from(range.end) {
        missing.push(format!("{next}..={}", range.end));
    }
    if !missing.is_empty() {
        return Err(Error::InvalidKeyGroups(format!(
            "the savepoints hold none of the backend's key groups {}: restore the files of \
             every old instance whose key groups this backend owns",
            missing.join(", ")
        )));
    }
    // The files' state metadata must agree, name by name, and every name be one the
    // backend accepts (registration after the pass must not fail halfway on a name).
    let mut metas: BTreeMap<&str, &StateMeta> = BTreeMap::new();
    for (_, reader) in &readers {
        for meta in &reader.header().states {
            crate::state::check_state_name(&meta.name)?;
            if let Some(seen) = metas.insert(&meta.name, meta) {
                if !crate::state::same_state(seen, meta) {
                    return Err(crate::state::mismatch_error(seen, meta));
                }
            }
        }
    }
    // Event-time TTL goes on from the highest watermark among the files (a value touched
    // before the engine's first `advance_watermark` is stamped there, not at 0).
    let watermark = readers
        .iter()
        .map(|(_, r)| r.header().event_time_watermark_ms)
        .max()
        .unwrap_or(0);
    let mut stats = SavepointStats::default();
    match t.db {
        Some(db) => restore_into_rocksdb(t, db, watermark, &mut readers, paths, range, &mut stats)?,
        None => restore_into_heap(t, &mut readers, range, &mut stats)?,
    }
    t.watermark.set(watermark);
    for path in paths {
        stats.file_bytes += std::fs::metadata(path)
            .map_err(|e| Error::io(path, e))?
            .len();
    }
    Ok(stats)
}

/// One pass over each file decompresses and verifies every block (checksum, decompression,
/// entry structure, key groups) while writing its entries into SSTs (entries come sorted by
/// stored key, and list elements' fresh sequence numbers ascend in that order). Only when
/// every file has passed are the states registered and the SSTs ingested, so a corrupt file
/// leaves the backend without states, and the entries never pass through the memtable. (An
/// I/O error while creating a column family or ingesting after that point can still leave
/// some states registered: discard such a backend.) The SSTs are staged inside the database's
/// directory (same file system: ingestion moves them; RocksDB ignores names it did not
/// write) in a directory removed on drop, success or not; one a killed process left behind
/// is removed when the backend next opens ([`sweep_staging`]).
///
/// Each file's blocks are cut into up to [`RESTORE_THREADS`] runs of consecutive key groups
/// of about equal bytes, read on as many threads, each with its own file handle and one SST
/// per state: decompression, verification (a murmur3 hash per key) and SST building run in
/// parallel. The runs cover disjoint, ascending key ranges, so one state's SSTs never overlap
/// and go in one ingestion. A list's elements all lie in one key group, so one run gives
/// them their fresh sequence numbers, in order.
/// Name prefix of the directory a savepoint restore stages its SSTs in, inside the
/// backend's directory.
const STAGING_PREFIX: &str = ".rockstate-savepoint-restore-";

/// Removes the staging directories a savepoint restore killed midway left in the backend
/// directory `dir`. Called while opening the backend, with RocksDB's lock on `dir` held, so
/// no restore into it is running.
pub(crate) fn sweep_staging(dir: &Path) -> Result<()> {
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let e = e.map_err(|e| Error::io(dir, e))?;
        if e.file_name().to_string_lossy().starts_with(STAGING_PREFIX) {
            let path = e.path();
            std::fs::remove_dir_all(&path).map_err(|err| Error::io(&path, err))?;
        }
    }
    Ok(())
}

fn restore_into_rocksdb(
    t: &SavepointTarget<'_>,
    db: &Arc<Db>,
    watermark: u64,
    readers: &mut [(KeyGroupRange, SavepointReader<BufReader<File>>)],
    paths: &[&Path],
    range: KeyGroupRange,
    stats: &mut SavepointStats,
) -> Result<()> {
    let staging = tempfile::Builder::new()
        .prefix(STAGING_PREFIX)
        .tempdir_in(t.path)
        .map_err(|e| Error::io(t.path, e))?;
    let max_parallelism = t.max_parallelism;
    let list_seq = t.list_seq;
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, RESTORE_THREADS);
    // Per state (by name): its metadata and its SSTs, one per file and run, in key order.
    let mut ingest: BTreeMap<String, (StateMeta, Vec<std::path::PathBuf>)> = BTreeMap::new();
    // Per TTL list state (by name): the largest timestamp restored (0 for none), which
    // becomes its mark: the restore holds no head, and the mark covers what it wrote.
    let mut stamps: BTreeMap<String, u64> = BTreeMap::new();
    for (file_no, ((_, reader), path)) in readers.iter_mut().zip(paths).enumerate() {
        let states = reader.header().states.clone();
        let blocks = blocks_in(reader, range);
        stats.blocks += blocks.len() as u64;
        let runs = runs_of_equal_bytes(&blocks, threads);
        let sst_paths: Vec<Vec<std::path::PathBuf>> = (0..runs.len())
            .map(|run| {
                (0..states.len())
                    .map(|state| staging.path().join(format!("{file_no}-{run}-{state}.sst")))
                    .collect()
            })
            .collect();
        let path: &Path = path;
        let index = reader.index().to_vec();
        let index = index.as_slice();
        // Each run's list sequence numbers, reserved in file order.
        let mut seqs = runs
            .iter()
            .map(|blocks| SeqRange::reserve(list_seq, blocks))
            .collect::<Result<Vec<_>>>()?
            .into_iter();
        let first_seqs = seqs.next();
        let results: Vec<Result<RestoredRun>> = std::thread::scope(|scope| {
            // Runs after the first on threads of their own, each with its own handle
            // (opening it verifies the header and index again, a few reads)...
            let spawned: Vec<_> = runs
                .iter()
                .zip(&sst_paths)
                .skip(1)
                .zip(seqs)
                .map(|((blocks, ssts), seqs)| {
                    // Without a thread of its own, a run is restored after the first.
                    crate::parallel::beside(scope, move || {
                        let file = File::open(path).map_err(|e| Error::io(path, e))?;
                        let mut own =
                            SavepointReader::open(BufReader::new(file)).map_err(Error::format)?;
                        if own.index() != index {
                            return Err(Error::Decode {
                                what: "savepoint",
                                detail: format!("{} changed while it was read", path.display()),
                            });
                        }
                        restore_run(db, &mut own, blocks, ssts, max_parallelism, seqs)
                    })
                })
                .collect();
            // ... the first one here, through the reader already open.
            let mut results = Vec::with_capacity(runs.len());
            if let (Some(blocks), Some(ssts), Some(seqs)) =
                (runs.first(), sst_paths.first(), first_seqs)
            {
                results.push(restore_run(db, reader, blocks, ssts, max_parallelism, seqs));
            }
            for handle in spawned {
                results.push(handle.join().unwrap_or_else(|_| {
                    Err(Error::Internal("a savepoint reader thread panicked".into()))
                }));
            }
            results
        });
        let runs: Vec<RestoredRun> = results.into_iter().collect::<Result<_>>()?;
        check_run_edges(&runs.iter().map(|r| &r.edges).collect::<Vec<_>>())?;
        for (run, ssts) in runs.into_iter().zip(&sst_paths) {
            stats.entries += run.stats.entries;
            stats.raw_bytes += run.stats.raw_bytes;
            for (meta, &stamp) in states.iter().zip(&run.stamps) {
                if meta.kind == StateKind::List && meta.ttl {
                    let high = stamps.entry(meta.name.clone()).or_insert(0);
                    *high = (*high).max(stamp);
                }
            }
            for ((meta, sst), written) in states.iter().zip(ssts).zip(run.written) {
                if written.is_some() {
                    ingest
                        .entry(meta.name.clone())
                        .or_insert_with(|| (meta.clone(), Vec::new()))
                        .1
                        .push(sst.clone());
                }
            }
        }
    }
    // From here on the directory changes: it carries the restore marker until every state,
    // its metadata and the list-sequence mark are durable, so a process killed midway leaves
    // a directory `open` refuses (`Error::RestoreIncomplete`), never half the savepoint.
    crate::restore::mark_restore(t.path)?;
    // Every state of every file is registered, also those without entries here.
    for (_, reader) in readers.iter() {
        for meta in &reader.header().states {
            (t.core_for)(meta)?;
        }
    }
    // The restored lists' timestamps are covered before their entries go in, so no head
    // written later can sort as older than an entry it replaces.
    for (name, &stamp) in &stamps {
        (t.raise_ttl_floor)(name, stamp)?;
    }
    // One ingestion of every state: flushes and compactions are held off once for all of
    // them (`db::quiet`), and the states' files go in side by side.
    let mut cfs = Vec::with_capacity(ingest.len());
    for (meta, paths) in ingest.values() {
        match &(t.core_for)(meta)?.table {
            Table::Rocks(cf) => cfs.push((cf.clone(), paths)),
            Table::Heap(_) => {
                return Err(Error::Unsupported(
                    "a RocksDB backend holding a heap state".into(),
                ))
            }
        }
    }
    let batches: Vec<(&crate::db::Cf, &[std::path::PathBuf])> =
        cfs.iter().map(|(cf, paths)| (cf, &paths[..])).collect();
    // Opened before the ingestion moves them: the SST writer dropped them from the page
    // cache, and a handle reads them wherever they now lie.
    let warm = db.open_for_warming(ingest.values().flat_map(|(_, paths)| paths));
    crate::db::Cf::ingest_each(&batches)?;
    let watermark = watermark.max(t.watermark.now_ms());
    if watermark > 0 {
        db.default_cf()?
            .put(META_WATERMARK, &watermark.to_be_bytes())?;
    }
    // The metadata written above (states, list-sequence and TTL marks, the watermark) sits
    // in the memtable with the WAL off: durable before the marker goes.
    db.flush_all()?;
    crate::restore::unmark_restore(t.path)?;
    // The restore is complete: its files are read back beside the job from here on.
    db.warm_restored(warm);
    Ok(())
}

/// Most threads one savepoint file is restored on.
const RESTORE_THREADS: usize = 4;

/// Reads `blocks` (consecutive key groups) through `reader` into one SST per state at `ssts`.
fn restore_run(
    db: &Db,
    reader: &mut SavepointReader<BufReader<File>>,
    blocks: &[sst_format::IndexEntry],
    ssts: &[std::path::PathBuf],
    max_parallelism: u32,
    mut seqs: SeqRange,
) -> Result<RestoredRun> {
    let mut stats = SavepointStats::default();
    // A list's runs keep the shared block size, as its column family does; every other
    // state's file is sized by its entries (1 KiB values: 4 KiB blocks).
    let files: Vec<(&Path, BlockSizing)> = ssts
        .iter()
        .zip(&reader.header().states)
        .map(|(p, m)| {
            let sizing = match m.kind {
                StateKind::List => BlockSizing::Shared,
                _ => BlockSizing::FromEntries,
            };
            (p.as_path(), sizing)
        })
        .collect();
    let ttl_lists: Vec<bool> = reader
        .header()
        .states
        .iter()
        .map(|m| m.kind == StateKind::List && m.ttl)
        .collect();
    let mut stamps = vec![0u64; ttl_lists.len()];
    // One sink per state of the header, and `restore_entries` passes only indices of the
    // header's states.
    let mut edges = RunEdges::default();
    let written = db.write_ssts(&files, |sinks| {
        edges = restore_entries(
            reader,
            blocks,
            max_parallelism,
            Some(&mut seqs),
            &mut stats,
            |state, k, v| {
                if ttl_lists[state] {
                    if let Some((stamp, _)) = ttl::split(v) {
                        stamps[state] = stamps[state].max(stamp);
                    }
                }
                sinks[state].put(k, v)
            },
        )?;
        Ok(())
    })?;
    Ok(RestoredRun {
        written,
        stats,
        stamps,
        edges,
    })
}

/// The list sequence numbers a run of blocks gives its list entries in file order: a range
/// reserved for as many entries as its blocks hold (the reader checks every block against the
/// count its index gives), ranges reserved run after run.
struct SeqRange {
    next: u64,
    end: u64,
}

impl SeqRange {
    /// A range for every entry of `blocks` from `seq`.
    fn reserve(
        seq: &crate::meta::SequenceAllocator,
        blocks: &[sst_format::IndexEntry],
    ) -> Result<Self> {
        let count: u64 = blocks.iter().map(|b| u64::from(b.entries)).sum();
        let next = seq.reserve(count)?;
        Ok(SeqRange {
            next,
            end: next + count,
        })
    }

    fn take(&mut self) -> Result<u64> {
        if self.next >= self.end {
            return Err(Error::Decode {
                what: "savepoint",
                detail: "a block holds more entries than its index entry counts".into(),
            });
        }
        self.next += 1;
        Ok(self.next - 1)
    }
}

/// An entry as the order check sees it: key group, state, stored key as the file holds it.
type Edge = (u16, u32, Vec<u8>);

/// The first and last entries of a run of blocks ([`EntryOrder`]): where a key group is cut
/// between two runs, the first run's last entry must come before the next run's first.
#[derive(Default)]
struct RunEdges {
    first: Option<Edge>,
    last: Option<Edge>,
}

/// Checks that consecutive runs of one file continue in order where a key group is cut
/// between them, as one pass over their blocks would have.
fn check_run_edges(edges: &[&RunEdges]) -> Result<()> {
    // The last entry of the runs so far (a run of empty blocks has none).
    let mut last: Option<&Edge> = None;
    for run in edges {
        if let (Some(last), Some(first)) = (last, &run.first) {
            let ordered = last.0 != first.0 || (last.1, &last.2) < (first.1, &first.2);
            if !ordered {
                return Err(Error::format(sst_format::Error::Corrupt {
                    what: format!(
                        "savepoint entries of key group {} out of order (state {})",
                        first.0, first.1
                    ),
                }));
            }
        }
        last = run.last.as_ref().or(last);
    }
    Ok(())
}

/// What [`restore_run`] wrote.
struct RestoredRun {
    /// What [`Db::write_ssts`] returns, one per state of the header.
    written: Vec<Option<u64>>,
    /// The run's entry and byte counts.
    stats: SavepointStats,
    /// Per state of the header, the largest TTL timestamp of a list entry (0 for none and
    /// for other states).
    stamps: Vec<u64>,
    /// Its first and last entries.
    edges: RunEdges,
}

/// `blocks` cut into at most `parts` non-empty runs of consecutive blocks, each of about the
/// same number of bytes; no run when there is no block. A key group continuing over several
/// blocks may be cut too (one huge key group restores on several threads): each run numbers
/// its list entries from a range of its own, reserved in file order ([`SeqRange`]).
fn runs_of_equal_bytes(
    blocks: &[sst_format::IndexEntry],
    parts: usize,
) -> Vec<&[sst_format::IndexEntry]> {
    let total: u64 = blocks.iter().map(|b| u64::from(b.len)).sum();
    let parts = parts.clamp(1, blocks.len().max(1)) as u64;
    let mut runs = Vec::new();
    let (mut start, mut acc) = (0, 0u64);
    for (i, b) in blocks.iter().enumerate() {
        acc += u64::from(b.len);
        // Cut where the bytes so far reach the next share of the total.
        if acc * parts >= total * (runs.len() as u64 + 1) && (runs.len() as u64) < parts - 1 {
            runs.push(&blocks[start..=i]);
            start = i + 1;
        }
    }
    if start < blocks.len() {
        runs.push(&blocks[start..]);
    }
    runs
}

/// Verifies every block of every file first (a dry run), then registers the states,
/// builds one batch per state and file, and commits them all at the end.
fn restore_into_heap(
    t: &SavepointTarget<'_>,
    readers: &mut [(KeyGroupRange, SavepointReader<BufReader<File>>)],
    range: KeyGroupRange,
    stats: &mut SavepointStats,
) -> Result<()> {
    let max_parallelism = t.max_parallelism;
    for (_, reader) in readers.iter_mut() {
        let blocks = blocks_in(reader, range);
        // Counted by the second pass.
        let mut dry = SavepointStats::default();
        restore_entries(
            reader,
            &blocks,
            max_parallelism,
            None,
            &mut dry,
            |_, _, _| Ok(()),
        )?;
    }
    let mut all_batches = Vec::new();
    for (_, reader) in readers.iter_mut() {
        let cores = reader
            .header()
            .states
            .iter()
            .map(|m| (t.core_for)(m))
            .collect::<Result<Vec<_>>>()?;
        let blocks = blocks_in(reader, range);
        stats.blocks += blocks.len() as u64;
        let mut batches: Vec<_> = cores.iter().map(|c| c.table.batch()).collect();
        // One batch per state (see `restore_into_rocksdb`).
        let mut seqs = SeqRange::reserve(t.list_seq, &blocks)?;
        restore_entries(
            reader,
            &blocks,
            max_parallelism,
            Some(&mut seqs),
            stats,
            |state, k, v| {
                batches[state].put(k, v);
                Ok(())
            },
        )?;
        all_batches.extend(batches);
    }
    // Nothing is applied before every file's second pass succeeded (the files are read
    // again, so an I/O error there still leaves the states registered but empty).
    for batch in all_batches {
        batch.commit()?;
    }
    Ok(())
}

/// The index entries of `reader`'s blocks of key groups in `range`.
fn blocks_in<R: std::io::Read + std::io::Seek>(
    reader: &SavepointReader<R>,
    range: KeyGroupRange,
) -> Vec<sst_format::IndexEntry> {
    reader
        .index()
        .iter()
        .filter(|b| range.contains(b.key_group))
        .copied()
        .collect()
}

/// Verifies every entry of `blocks` (its block's checksum and structure, and that its key
/// hashes to the block's key group) and, given `list_seq`, calls `put(state, stored key,
/// value)` for it (`state` always indexes the header's states), rebuilding the stored key
/// (list elements get fresh sequence numbers from `list_seq` in savepoint order) and
/// counting the entries and raw bytes into `stats`. Without `list_seq` it only verifies.
fn restore_entries<R: std::io::Read + std::io::Seek>(
    reader: &mut SavepointReader<R>,
    blocks: &[sst_format::IndexEntry],
    max_parallelism: u32,
    mut list_seq: Option<&mut SeqRange>,
    stats: &mut SavepointStats,
    mut put: impl FnMut(usize, &[u8], &[u8]) -> Result<()>,
) -> Result<RunEdges> {
    let kinds: Vec<(StateKind, bool)> = reader
        .header()
        .states
        .iter()
        .map(|m| (m.kind, m.ttl))
        .collect();
    // A `Vec`, not a `KeyBuf`: `Vec`'s `Extend` of a slice's bytes is one copy, a small
    // vector's goes byte by byte (measured: 3 % of a restore's samples).
    let mut key: Vec<u8> = Vec::with_capacity(64);
    let mut order = EntryOrder::default();
    for block in blocks {
        let mut failure: Option<Error> = None;
        let read = reader.for_each_entry(block, |e| {
            if crate::keygroup::key_group_of(e.key, max_parallelism) != block.key_group {
                return Err(sst_format::Error::Corrupt {
                    what: format!(
                        "savepoint entry stored under key group {} hashes elsewhere",
                        block.key_group
                    ),
                });
            }
            // Everything the writing pass relies on is checked in the verifying pass too, so
            // that a file it would refuse is refused before any state is registered.
            let Some(&(kind, ttl)) = kinds.get(e.state as usize) else {
                return Err(sst_format::Error::Corrupt {
                    what: format!("savepoint entry of unknown state {}", e.state),
                });
            };
            if ttl && e.value.len() < ttl::TS_LEN {
                return Err(sst_format::Error::Corrupt {
                    what: format!(
                        "savepoint entry of a TTL state with a value of {} bytes, shorter than \
                         its timestamp",
                        e.value.len()
                    ),
                });
            }
            // A list entry's suffix is its position, followed by the run mark when it holds a
            // run of elements (`state::list`); a map entry's is its user key; other states
            // have none.
            let run = match kind {
                StateKind::List => match crate::list_entry::holds_run(e.suffix) {
                    Some(run) => run,
                    None => {
                        return Err(sst_format::Error::Corrupt {
                            what: format!(
                                "savepoint list entry with a suffix of {} bytes",
                                e.suffix.len()
                            ),
                        })
                    }
                },
                StateKind::Map => false,
                _ if e.suffix.is_empty() => false,
                _ => {
                    return Err(sst_format::Error::Corrupt {
                        what: format!(
                            "savepoint entry of a {kind:?} state with a suffix of {} bytes",
                            e.suffix.len()
                        ),
                    })
                }
            };
            // The stored key as the file holds it: the order check's, and the key written
            // for every state but a list (whose position is numbered afresh).
            key.clear();
            codec::write_key_prefix(
                &mut key,
                block.key_group,
                max_parallelism,
                e.key,
                e.namespace,
            );
            let prefix_len = key.len();
            key.extend_from_slice(e.suffix);
            order.check(block.key_group, e.state, &key)?;
            stats.entries += 1;
            stats.raw_bytes +=
                (e.key.len() + e.namespace.len() + e.suffix.len() + e.value.len()) as u64;
            let Some(seq) = list_seq.as_deref_mut() else {
                return Ok(()); // verifying only
            };
            let done = match kind {
                // Restore numbers list entries afresh in file order and keeps the run mark.
                StateKind::List => seq.take().map(|n| {
                    key.truncate(prefix_len);
                    key.extend_from_slice(&n.to_be_bytes());
                    if run {
                        key.push(crate::list_entry::RUN_MARK);
                    }
                }),
                _ => Ok(()),
            }
            .and_then(|()| put(e.state as usize, &key, e.value));
            if let Err(err) = done {
                failure = Some(err);
                return Err(sst_format::Error::Corrupt {
                    what: "restore aborted".into(),
                });
            }
            Ok(())
        });
        if let Some(err) = failure {
            return Err(err);
        }
        read.map_err(Error::format)?;
    }
    Ok(order.edges())
}

/// Checks the order of a key group's entries across its blocks: by state, then strictly
/// ascending by stored key as the file holds it (the key prefix and the suffix; a list's
/// suffix is its position). A file breaking it (blocks of a continued key group going back, a
/// repeated key) is corrupt: RocksDB's SST writer would refuse it as a caller's mistake, the
/// heap would take the last duplicate.
#[derive(Default)]
struct EntryOrder {
    /// The key group and state of the last entry, and its stored key.
    last: Option<(u16, u32)>,
    last_key: Vec<u8>,
    /// The first entry checked.
    first: Option<Edge>,
}

impl EntryOrder {
    /// Checks an entry of `state` in `key_group` whose stored key, as the file holds it, is
    /// `key`.
    fn check(&mut self, key_group: u16, state: u32, key: &[u8]) -> sst_format::Result<()> {
        let ordered = match self.last {
            Some((g, last_state)) if g == key_group => {
                last_state < state || (last_state == state && key > self.last_key.as_slice())
            }
            _ => true,
        };
        if !ordered {
            return Err(sst_format::Error::Corrupt {
                what: format!(
                    "savepoint entries of key group {key_group} out of order (state {state})"
                ),
            });
        }
        if self.first.is_none() {
            self.first = Some((key_group, state, key.to_vec()));
        }
        self.last = Some((key_group, state));
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        Ok(())
    }

    /// The first and last entries checked.
    fn edges(self) -> RunEdges {
        RunEdges {
            first: self.first,
            last: self.last.map(|(g, s)| (g, s, self.last_key)),
        }
    }
}

/// Verifies the savepoint at `path` as a restore of all its key groups would, without
/// restoring it: the file's structure and checksums (as `sst_format::verify_savepoint`), and
/// every entry against its block and state: its key hashes to the block's key group, its state
/// is one of the header's, its suffix and value are what that state's kind stores (a list's
/// position, no suffix for a value, a TTL value's timestamp), and a key group's entries are in
/// order across its blocks. A problem is [`Error::Format`] (or, reading the file, an I/O
/// error). Returns the counts.
pub fn verify_file(path: &Path) -> Result<SavepointStats> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut reader = SavepointReader::open(BufReader::new(file)).map_err(Error::format)?;
    // (The reader refuses a header naming a state twice.)
    for meta in &reader.header().states {
        crate::state::check_state_name(&meta.name)?;
    }
    let blocks = reader.index().to_vec();
    let max_parallelism = reader.header().max_parallelism;
    let mut stats = SavepointStats {
        blocks: blocks.len() as u64,
        file_bytes: std::fs::metadata(path)
            .map_err(|e| Error::io(path, e))?
            .len(),
        ..SavepointStats::default()
    };
    restore_entries(
        &mut reader,
        &blocks,
        max_parallelism,
        None,
        &mut stats,
        |_, _, _| Ok(()),
    )?;
    Ok(stats)
}

/// The operator state stored in the savepoint at `path` (verified like the rest of the header).
pub fn read_operator_state(path: &Path) -> Result<OperatorState> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let reader = SavepointReader::open(BufReader::new(file)).map_err(Error::format)?;
    OperatorState::from_snapshot(reader.header().operator_state.clone())
}

/// One state of a [`FullSnapshot`].
struct SnapshotState {
    meta: StateMeta,
    table: Table,
    /// `(ttl_ms, now_ms)` when expired entries are dropped while writing.
    expiry: Option<(u64, u64)>,
}

/// How one state's entries go into a savepoint, carried from entry to entry of a pass.
struct StateScan {
    /// Lists: the heads seen (blind updates). A head goes out as a run under its own sequence
    /// number, the entries it made dead not at all, so the savepoint holds each list as a read
    /// returns it (`crate::list_entry`). Entries are classified by the heads before their
    /// expiry is judged: an expired head left out still leaves out the entries it replaced.
    lists: Option<ListCursor>,
    /// The TTL timestamp's length before a value's payload (0 without TTL).
    stamp_len: usize,
    /// The suffix and value a head goes out with.
    head_suffix: [u8; list_entry::SEQ_BYTES + 1],
    head_value: Vec<u8>,
}

impl StateScan {
    fn new(s: &SnapshotState) -> Self {
        StateScan {
            lists: (s.meta.kind == StateKind::List).then(ListCursor::new),
            stamp_len: if s.meta.ttl { ttl::TS_LEN } else { 0 },
            head_suffix: [0u8; list_entry::SEQ_BYTES + 1],
            head_value: Vec::new(),
        }
    }

    /// The suffix and value entry `e` of state `s` goes into the savepoint with, or `None`
    /// when it stays out (an entry a list head made dead, an expired entry).
    fn keep<'a>(
        &'a mut self,
        s: &SnapshotState,
        e: state::RawEntry<'a>,
    ) -> Result<Option<(&'a [u8], &'a [u8])>> {
        let (suffix, value) = match &mut self.lists {
            None => (e.suffix, e.value),
            Some(c) => {
                // Under TTL a list entry's payload follows its timestamp, and a head goes out
                // as the timestamp and its run.
                let payload = match self.stamp_len {
                    0 => e.value,
                    _ => ttl::split_stored(e.value)?.1,
                };
                match c.next((e.key, e.namespace), e.suffix, payload)? {
                    Entry::Dead => return Ok(None),
                    Entry::Live { seq, payload, .. } if e.suffix.is_empty() => {
                        self.head_suffix = list_entry::run_suffix(seq);
                        self.head_value.clear();
                        self.head_value
                            .extend_from_slice(&e.value[..self.stamp_len]);
                        self.head_value.extend_from_slice(payload);
                        (&self.head_suffix[..], self.head_value.as_slice())
                    }
                    Entry::Live { .. } => (e.suffix, e.value),
                }
            }
        };
        if let Some((ttl_ms, now)) = s.expiry {
            if ttl::stored_is_expired(value, ttl_ms, now) {
                return Ok(None);
            }
        }
        Ok(Some((suffix, value)))
    }
}

/// The keyed state of a heap backend frozen at [`crate::KeyedBackend::full_snapshot`]: later writes to
/// the backend do not show in it. `Send`; serialize it on any thread.
pub struct FullSnapshot {
    max_parallelism: u32,
    key_groups: KeyGroupRange,
    states: Vec<SnapshotState>,
    taken_in: Duration,
    /// When it was taken, by the backend's processing-time clock (the savepoint's
    /// `created_at_ms`).
    taken_at_ms: u64,
    /// The event-time watermark when it was taken.
    watermark_ms: u64,
}

impl std::fmt::Debug for FullSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FullSnapshot")
            .field("key_groups", &self.key_groups)
            .field("states", &self.states.len())
            .finish()
    }
}

impl FullSnapshot {
    /// How long taking the view blocked the task.
    pub fn taken_in(&self) -> Duration {
        self.taken_in
    }

    /// Encodes `run` of the key groups `groups` (consecutive; the run may start and end
    /// inside a key group, `crate::savepoint_runs`) into blocks and hands each to `emit` in
    /// file order: one sequential pass per state over the whole run (a cursor per state, each
    /// within the run's range of that state, all moving together), taking each group's entries
    /// of every state before the next group's, so blocks leave as they fill: a key group's
    /// block ends once it holds [`sst_format::BLOCK_TARGET_BYTES`] and the group continues in
    /// the next one, and no more than one block is in memory here however large a key group
    /// is. Empty groups have no block. Blocks are encoded into buffers from `spare` when it has
    /// any.
    fn encode_run(
        &self,
        groups: &[u16],
        run: &Run,
        compressor: &mut BlockCompressor,
        builder: &mut BlockBuilder,
        spare: &Mutex<Vec<Vec<u8>>>,
        mut emit: impl FnMut(EncodedBlock) -> Result<()>,
    ) -> Result<()> {
        let bounds = run.bounds(groups, self.states.len(), self.max_parallelism);
        let groups = &groups[run.first..=run.last];
        let (Some(&first), Some(&last)) = (groups.first(), groups.last()) else {
            return Ok(());
        };
        let tables: Vec<&Table> = self.states.iter().map(|s| &s.table).collect();
        let mut scans: Vec<StateScan> = self.states.iter().map(StateScan::new).collect();
        let mut encode = |builder: &BlockBuilder, compressor: &mut BlockCompressor| {
            let buffer = spare.lock().pop().unwrap_or_default();
            match builder
                .encode_into(compressor, buffer)
                .map_err(Error::format)?
            {
                Some(block) => emit(block),
                None => Ok(()),
            }
        };
        Table::bulk_cursors(&tables, &bounds, |cursors| {
            for &g in groups {
                builder.reset(g);
                for (index, ((s, scan), cursor)) in self
                    .states
                    .iter()
                    .zip(&mut scans)
                    .zip(cursors.iter_mut())
                    .enumerate()
                {
                    while let Some((k, v)) = cursor.current()? {
                        let e = state::raw_entry(k, v, self.max_parallelism)?;
                        if e.key_group != g {
                            // The pass's bounds and the groups before this one consumed every
                            // entry below it: a stored key whose prefix says otherwise is
                            // corrupt data, reported rather than misfiled.
                            if e.key_group < g || e.key_group > last {
                                return Err(Error::Decode {
                                    what: "savepoint",
                                    detail: format!(
                                        "entry of key group {} met at key group {g} of a scan \
                                         of key groups {first}..={last}",
                                        e.key_group
                                    ),
                                });
                            }
                            break;
                        }
                        if let Some((suffix, value)) = scan.keep(s, e)? {
                            let entry = SavepointEntry {
                                state: index as u32,
                                key: e.key,
                                namespace: e.namespace,
                                suffix,
                                value,
                            };
                            if builder.is_full_for(&entry) {
                                encode(builder, compressor)?;
                                builder.reset(g);
                            }
                            builder.add(entry).map_err(too_large_or_format)?;
                        }
                        cursor.advance();
                    }
                }
                encode(builder, compressor)?;
            }
            Ok(())
        })
    }

    /// Writes the view into a canonical savepoint at `path` (created; an existing file is an
    /// error), with `operator_state` in its header. Expired TTL entries are dropped when the
    /// state's `Cleanup::full_snapshot` is on, judged at the time the view was taken.
    ///
    /// Runs of consecutive key groups (a key group holding several runs' share cut into as
    /// many, between rows: `crate::savepoint_runs`) are scanned, encoded and compressed on up
    /// to 4 worker threads, each taking the next run as it finishes one; this thread writes
    /// the blocks in key-group order as they come and syncs the file every
    /// [`SYNC_EVERY_BYTES`], so the disk writes back while the workers compress instead of all
    /// at the end. Memory stays bounded whatever the state's size or skew: a worker holds one
    /// block (about [`sst_format::BLOCK_TARGET_BYTES`] uncompressed, a key group continuing
    /// over as many blocks as it needs), the channel to the writer a few, and each run the
    /// writer has not reached yet (at most two per worker) at most 32 MiB of compressed
    /// blocks: its worker waits there. On 2 cores that is under 100 MiB beside the blocks in
    /// flight.
    pub fn write_savepoint(
        &self,
        path: &Path,
        operator_state: &OperatorState,
    ) -> Result<SavepointStats> {
        let header = SavepointHeader {
            max_parallelism: self.max_parallelism,
            key_group_start: self.key_groups.start,
            key_group_end: self.key_groups.end,
            states: self.states.iter().map(|s| s.meta.clone()).collect(),
            operator_state: operator_state.snapshot(),
            created_at_ms: self.taken_at_ms,
            event_time_watermark_ms: self.watermark_ms,
        };
        // Refused before any work: a savepoint never replaces a file.
        if path.exists() {
            return Err(Error::io(
                path,
                std::io::Error::from(std::io::ErrorKind::AlreadyExists),
            ));
        }
        // Written under a partial name beside `path`, locked while it is written, and
        // linked to `path` once complete and durable: a process killed midway leaves a
        // partial file (which no restore takes for a savepoint: not its name), and the next
        // write to `path` removes it (its lock is free), never a half file under the name.
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = path
            .file_name()
            .ok_or_else(|| Error::InvalidOption {
                name: "write_savepoint",
                detail: format!("{} names no file", path.display()),
            })?
            .to_string_lossy()
            .into_owned();
        remove_dead_partials(dir, &name);
        let partial = dir.join(format!(
            "{}{:016x}",
            partial_prefix(&name),
            rand::random::<u64>()
        ));
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(&partial)
            .map_err(|e| Error::io(&partial, e))?;
        let written = crate::storage::lock_created(&file, &partial)
            .ok_or_else(|| {
                Error::io(
                    &partial,
                    std::io::Error::new(
                        std::io::ErrorKind::WouldBlock,
                        "another write of the same savepoint removed this partial file",
                    ),
                )
            })
            .and_then(|_lock| {
                let stats = self.write_into(file, &partial, &header)?;
                std::fs::hard_link(&partial, path).map_err(|e| Error::io(path, e))?;
                Ok(stats)
            });
        let _ = std::fs::remove_file(&partial);
        let stats = written?;
        // The new name is durable, the partial one gone: a savepoint reported written
        // survives a power loss.
        crate::storage::sync_dir(dir)?;
        Ok(stats)
    }

    /// [`FullSnapshot::write_savepoint`] into `file`, created at `path`: the file's bytes are
    /// durable when it returns (its directory entry is the caller's to sync).
    fn write_into(
        &self,
        file: File,
        path: &Path,
        header: &SavepointHeader,
    ) -> Result<SavepointStats> {
        // A write error names the file (a full disk, say), as every other I/O error does; a
        // header above the format's limit (operator state) is the caller's input, not damage.
        let written = |e: sst_format::Error| match e {
            sst_format::Error::Io(io) => Error::io(path, io),
            e => too_large_or_format(e),
        };
        let mut writer = SavepointWriter::new(
            BufWriter::with_capacity(1 << 20, SyncingFile::new(file)),
            header,
            SAVEPOINT_ZSTD_LEVEL,
        )
        .map_err(written)?;
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .clamp(1, 4);
        let groups: Vec<u16> = self.key_groups.iter().collect();
        // Runs small enough that every thread gets many (load balance), large enough that a
        // run's scans are long ones; a key group holding several runs' share is cut into as
        // many (`savepoint_runs`). Memory does not grow with them: blocks leave a run as
        // they fill (`encode_run`, `AHEAD_BYTES`).
        let run_len = (groups.len() / (threads * RUNS_PER_THREAD)).max(1);
        let tables: Vec<&Table> = self.states.iter().map(|s| &s.table).collect();
        let cuts = savepoint_runs::cuts(
            &tables,
            &groups,
            self.max_parallelism,
            threads * RUNS_PER_THREAD,
        )?;
        let runs = savepoint_runs::plan(&groups, run_len, &cuts);
        let states = writer.states();
        let gate = Gate::new(threads * RUNS_AHEAD_PER_THREAD);
        let next = AtomicUsize::new(0);
        // Buffers of written blocks, handed back to the encoders.
        let spare = Mutex::new(Vec::new());
        // Per run, its blocks in file order, then `None` when the run is done.
        type Message = (usize, Result<Option<EncodedBlock>>);
        let (sender, receiver) = mpsc::sync_channel::<Message>(threads * 4);
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads.min(runs.len()))
                .map(|_| {
                    let sender = sender.clone();
                    let (gate, next, runs, spare, groups) = (&gate, &next, &runs, &spare, &groups);
                    // A process out of threads encodes on the workers it could start.
                    crate::parallel::try_spawn(scope, move || {
                        // Wakes the writer and the other workers if this thread panics.
                        let _abort_on_panic = AbortOnPanic(gate);
                        let mut compressor = match BlockCompressor::new(SAVEPOINT_ZSTD_LEVEL) {
                            Ok(c) => c,
                            Err(e) => {
                                let _ = sender
                                    .send((next.load(Ordering::SeqCst), Err(Error::format(e))));
                                gate.abort();
                                return;
                            }
                        };
                        let mut builder = BlockBuilder::new(0, states);
                        loop {
                            let run = next.fetch_add(1, Ordering::SeqCst);
                            if run >= runs.len() || !gate.wait_turn(run) {
                                return;
                            }
                            // The writer keeps the blocks of a run it has not reached in
                            // memory: past `AHEAD_BYTES` of them, wait until it is there.
                            let mut ahead = 0usize;
                            let encoded = self.encode_run(
                                groups,
                                &runs[run],
                                &mut compressor,
                                &mut builder,
                                spare,
                                |block| {
                                    ahead = ahead.saturating_add(block.stored_len());
                                    if ahead > AHEAD_BYTES && !gate.wait_current(run) {
                                        return Err(write_aborted());
                                    }
                                    sender
                                        .send((run, Ok(Some(block))))
                                        .map_err(|_| write_aborted())
                                },
                            );
                            let failed = encoded.is_err();
                            if sender.send((run, encoded.map(|()| None))).is_err() || failed {
                                return;
                            }
                        }
                    })
                })
                .collect::<Vec<_>>()
                .into_iter()
                .flatten()
                .collect::<Vec<_>>();
            drop(sender);
            if workers.is_empty() {
                // No thread could be started: the blocks are encoded here, one run after
                // another, and written as they come.
                let mut compressor =
                    BlockCompressor::new(SAVEPOINT_ZSTD_LEVEL).map_err(Error::format)?;
                let mut builder = BlockBuilder::new(0, states);
                for run in &runs {
                    self.encode_run(
                        &groups,
                        run,
                        &mut compressor,
                        &mut builder,
                        &spare,
                        |block| {
                            writer.write_encoded(&block).map_err(written)?;
                            spare.lock().push(block.into_buffer());
                            Ok(())
                        },
                    )?;
                }
                return Ok(());
            }
            let mut written = (|| -> Result<()> {
                // Blocks of runs after the one being written, as they came.
                let mut early: BTreeMap<usize, VecDeque<Option<EncodedBlock>>> = BTreeMap::new();
                for run in 0..runs.len() {
                    loop {
                        let queued = early.get_mut(&run).and_then(VecDeque::pop_front);
                        let message = match queued {
                            Some(m) => m,
                            None => loop {
                                let (i, m) = receiver.recv().map_err(|_| encoder_died())?;
                                // An error ends the write whichever run it belongs to.
                                let m = m?;
                                if i == run {
                                    break m;
                                }
                                early.entry(i).or_default().push_back(m);
                            },
                        };
                        let Some(block) = message else {
                            break; // the run is done
                        };
                        writer.write_encoded(&block).map_err(written)?;
                        spare.lock().push(block.into_buffer());
                    }
                    early.remove(&run);
                    gate.advance(run + 1);
                }
                Ok(())
            })();
            if written.is_err() {
                gate.abort();
            }
            // Nothing is received any more: an encoder blocked handing over a block (the
            // channel full after the writer failed) gets an error and ends.
            drop(receiver);
            for w in workers {
                if w.join().is_err() && written.is_ok() {
                    written = Err(encoder_died());
                }
            }
            written
        })?;
        let (out, stats) = writer.finish().map_err(written)?;
        let file = out
            .into_inner()
            .map_err(|e| Error::io(path, e.into_error()))?;
        file.file.sync_all().map_err(|e| Error::io(path, e))?;
        Ok(stats)
    }
}

/// Name prefix of a savepoint being written to `<name>`: `.<name>.partial-`.
fn partial_prefix(name: &str) -> String {
    format!(".{name}.partial-")
}

/// Removes partial files of savepoints to `name` in `dir` whose writer is gone (their lock is
/// free): what a process killed while writing left. Best effort.
fn remove_dead_partials(dir: &Path, name: &str) {
    let prefix = partial_prefix(name);
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix)
            && crate::storage::try_lock(&e.path()).is_some()
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Key-group runs per encoder thread (see [`FullSnapshot::write_savepoint`]).
const RUNS_PER_THREAD: usize = 16;
/// How many runs per thread the encoders may start before the writer has written them.
const RUNS_AHEAD_PER_THREAD: usize = 2;
/// Compressed bytes of a run an encoder hands over before the writer has reached the run; past
/// them it waits, so the blocks kept for each later run stay within this however large the
/// run is (and at most `RUNS_AHEAD_PER_THREAD` runs per encoder are ahead).
const AHEAD_BYTES: usize = 32 << 20;
/// A savepoint file is synced (`fdatasync`) each time this many more bytes were written.
pub const SYNC_EVERY_BYTES: u64 = 8 << 20;

/// An error of the savepoint codec while writing: a limit of the format (a header or a
/// single entry too large) is the caller's input (`ValueTooLarge`), anything else as
/// [`Error::format`] says.
fn too_large_or_format(e: sst_format::Error) -> Error {
    match e {
        sst_format::Error::TooLarge { what, size, limit } => Error::ValueTooLarge {
            what,
            size: usize::try_from(size).unwrap_or(usize::MAX),
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
        },
        e => Error::format(e),
    }
}

fn write_aborted() -> Error {
    Error::Internal("the savepoint write was aborted".into())
}

fn encoder_died() -> Error {
    Error::Decode {
        what: "savepoint",
        detail: "a block encoder thread panicked".into(),
    }
}

/// A file that syncs its data every [`SYNC_EVERY_BYTES`] written, so the page cache does not
/// accumulate the whole savepoint for one long `fsync` at the end.
struct SyncingFile {
    file: File,
    unsynced: u64,
}

impl SyncingFile {
    fn new(file: File) -> Self {
        SyncingFile { file, unsynced: 0 }
    }
}

impl Write for SyncingFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.unsynced += n as u64;
        if self.unsynced >= SYNC_EVERY_BYTES {
            self.file.sync_data()?;
            self.unsynced = 0;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// Lets encoder threads start run `i` only once the writer has written run
/// `i - ahead`; `abort` releases every waiting thread for good.
struct Gate {
    ahead: usize,
    /// (runs written, aborted)
    state: Mutex<(usize, bool)>,
    changed: Condvar,
}

impl Gate {
    fn new(ahead: usize) -> Self {
        Gate {
            ahead: ahead.max(1),
            state: Mutex::new((0, false)),
            changed: Condvar::new(),
        }
    }

    /// Waits until run `run` may start; `false` when the write was aborted.
    fn wait_turn(&self, run: usize) -> bool {
        let mut s = self.state.lock();
        while !s.1 && run >= s.0 + self.ahead {
            self.changed.wait(&mut s);
        }
        !s.1
    }

    /// Waits until the writer is at run `run` (has written every run before it); `false`
    /// when the write was aborted.
    fn wait_current(&self, run: usize) -> bool {
        let mut s = self.state.lock();
        while !s.1 && s.0 < run {
            self.changed.wait(&mut s);
        }
        !s.1
    }

    fn advance(&self, written: usize) {
        self.state.lock().0 = written;
        self.changed.notify_all();
    }

    fn abort(&self) {
        self.state.lock().1 = true;
        self.changed.notify_all();
    }
}

/// Aborts the [`Gate`] when dropped during a panic.
struct AbortOnPanic<'a>(&'a Gate);

impl Drop for AbortOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abort();
        }
    }
}

/// The operator states stored in the savepoints of every instance of one operator (one file
/// each, any order), ordered by instance (key-group range), ready for
/// [`crate::operator_state::redistribute`]. The files' key-group ranges must tile the key
/// groups exactly: a missing or duplicated instance is a typed error, never a silent loss.
pub fn read_operator_states(paths: &[&Path]) -> Result<Vec<OperatorState>> {
    let mut parts = Vec::with_capacity(paths.len());
    let mut max_parallelism = None;
    for path in paths {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let reader = SavepointReader::open(BufReader::new(file)).map_err(Error::format)?;
        let h = reader.header();
        if *max_parallelism.get_or_insert(h.max_parallelism) != h.max_parallelism {
            return Err(Error::InvalidKeyGroups(format!(
                "savepoint {} has max parallelism {}, another one {}",
                path.display(),
                h.max_parallelism,
                max_parallelism.unwrap_or_default()
            )));
        }
        let range = KeyGroupRange::new(h.key_group_start, h.key_group_end)?;
        parts.push((
            range,
            OperatorState::from_snapshot(h.operator_state.clone())?,
        ));
    }
    let Some(max_parallelism) = max_parallelism else {
        return Err(Error::InvalidKeyGroups(
            "no savepoint given: the operator state of every old instance is needed".into(),
        ));
    };
    crate::operator_state::in_instance_order(parts, max_parallelism)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(lens: &[u32]) -> Vec<sst_format::IndexEntry> {
        lens.iter()
            .enumerate()
            .map(|(i, &len)| sst_format::IndexEntry {
                key_group: i as u16,
                offset: 0,
                len,
                entries: 1,
            })
            .collect()
    }

    /// One key group continuing over many blocks (a hot key) is cut like any other blocks,
    /// so it restores on several threads.
    #[test]
    fn a_continued_key_group_is_cut_into_runs() {
        let mut b = blocks(&[10; 8]);
        for e in &mut b {
            e.key_group = 7;
        }
        let sizes: Vec<usize> = runs_of_equal_bytes(&b, 4).iter().map(|r| r.len()).collect();
        assert_eq!(sizes, [2, 2, 2, 2]);
    }

    /// Where a key group is cut between two runs, the second must go on after the first.
    #[test]
    fn runs_of_one_key_group_must_continue_in_order() {
        let edges = |first: (u16, u32, &[u8]), last: (u16, u32, &[u8])| RunEdges {
            first: Some((first.0, first.1, first.2.to_vec())),
            last: Some((last.0, last.1, last.2.to_vec())),
        };
        let a = edges((1, 0, b"a"), (3, 0, b"m"));
        for (next, ok) in [
            (edges((3, 0, b"n"), (3, 1, b"a")), true),
            (edges((3, 1, b"a"), (4, 0, b"a")), true),
            (edges((4, 0, b"a"), (4, 0, b"b")), true),
            (edges((3, 0, b"m"), (3, 0, b"z")), false),
            (edges((3, 0, b"b"), (3, 0, b"z")), false),
        ] {
            assert_eq!(
                check_run_edges(&[&a, &next]).is_ok(),
                ok,
                "{:?}",
                next.first
            );
        }
        // A run without entries between two others does not hide their order.
        let back = edges((3, 0, b"b"), (3, 0, b"z"));
        assert!(check_run_edges(&[&a, &RunEdges::default(), &back]).is_err());
    }

    /// The runs cover every block once, in order, at most `parts` of them, none empty, and
    /// of about equal bytes when the blocks allow it.
    #[test]
    fn runs_cover_the_blocks_in_order() {
        for (lens, parts, want) in [
            (vec![10; 8], 2, vec![4, 4]),
            (vec![10; 8], 4, vec![2, 2, 2, 2]),
            (vec![100, 1, 1, 1], 2, vec![1, 3]),
            (vec![1, 1, 1, 100], 2, vec![4]),
            (vec![5], 4, vec![1]),
            (vec![5, 5], 1, vec![2]),
            (vec![], 4, vec![]),
        ] {
            let b = blocks(&lens);
            let runs = runs_of_equal_bytes(&b, parts);
            let sizes: Vec<usize> = runs.iter().map(|r| r.len()).collect();
            assert_eq!(sizes, want, "{lens:?} in {parts}");
            let flat: Vec<u16> = runs
                .iter()
                .flat_map(|r| r.iter().map(|e| e.key_group))
                .collect();
            assert_eq!(flat, (0..lens.len() as u16).collect::<Vec<_>>());
        }
    }
}

//! Changelog replay at restore: the log segments a changelog-mode manifest names
//! (docs/changelog-format.md) are downloaded, checked against the manifest (size, CRC-32,
//! the segment's own checks, and the sequence numbers: the first segment starts at the
//! materialization's, each next one where the one before ended) and applied in order onto
//! the downloaded materialization, before the rescale surgery and before anything opens the
//! backend. A source so replayed is its checkpoint's state exactly, as if the checkpoint had
//! uploaded its files; everything after (rescale, open, the checks) is the same for both.
//!
//! The log's *tables* (manifest version 4, `sst_format::LogTable`) hold the changes of runs
//! of segments already sorted into one SST per column family: a restore fetches and ingests
//! them in place of the segments they cover and replays only the segments after them.
//! [`build_table`] makes one from segments (the checkpoint's async phase uploads it).
//!
//! Two steps: [`prepare`] needs no database (download and check the tables; download,
//! check, sort, and write the remaining segments' keyed entries into SST files), so
//! `crate::restore` runs it while the materialization downloads; [`apply`] opens the
//! database and ingests those files. A keyed state's entry is
//! applied only when its key group is in the restore's target; the backend's own metadata
//! (column family `default`: state registrations, the list-sequence high-water mark) is
//! applied whole. A long log goes in batches of segments
//! (`ChangelogOptions::replay_batch_bytes`), each downloaded and written to disk before the
//! next, so a restore's memory does not grow with the log.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use sst_format::{Changelog, CheckpointManifest, LogEntry, LogSegment, LogSegmentFile, LogTable};

use crate::catalog::{check_digest, named_fetch_error};
use crate::db::{
    write_ssts, BlockSizing, Cf, Db, KeyLayout, MemoryBudget, ToWarm, DEFAULT_CF_NAME,
};
use crate::error::{Error, Result};
use crate::keygroup::{self, KeyGroupRange};
use crate::meta::STATE_CF_PREFIX;
use crate::options::DbOptions;
use crate::parallel::run_parallel;
use crate::storage::{CheckpointStorage, ObjectDigest};

/// What a replay did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ReplayCounts {
    /// Segments applied.
    pub(crate) segments: usize,
    /// Stored bytes of those segments.
    pub(crate) segment_bytes: u64,
    /// Log tables ingested in place of the segments they cover.
    pub(crate) tables: usize,
    /// Bytes of their files.
    pub(crate) table_bytes: u64,
    /// Entries applied.
    pub(crate) applied: u64,
    /// Keyed entries of key groups outside the target, not applied.
    pub(crate) skipped: u64,
    /// Batches the segments were downloaded and applied in.
    pub(crate) batches: usize,
    /// Entries applied through the memtable (a batch holding a range deletion) rather than
    /// by ingestion: the database holds them durably only once flushed.
    pub(crate) memtable_writes: u64,
}

/// A source's log made ready to apply (see [`prepare`]): per batch, in log order, what goes
/// into its database.
pub(crate) struct Prepared {
    /// Holds the batches' SST files until they are ingested (moved into the database).
    scratch: tempfile::TempDir,
    /// The log tables' files, per table (in log order) `(column family, file)`.
    tables: Vec<Vec<(String, PathBuf)>>,
    batches: Vec<Batch>,
    /// Segments, batches and the sorted batches' entries; the entry-by-entry batches' entries
    /// are counted as they are applied.
    counts: ReplayCounts,
    target: KeyGroupRange,
    source: KeyGroupRange,
    max_parallelism: u32,
}

/// One batch of a [`Prepared`] log.
enum Batch {
    /// The metadata entries' last changes as one SST file (if any), and per keyed state (by
    /// column-family name) its SST files over disjoint key ranges.
    Sorted {
        meta: Option<PathBuf>,
        states: Vec<(String, Vec<PathBuf>)>,
    },
    /// A batch holding a range deletion the sorted path does not take ([`ranges_sortable`]:
    /// the recorder writes only ones it takes), kept as it is and applied entry by entry.
    Entries(Vec<LogSegment>),
}

/// Prepares the log `m` (the manifest object `name`) names for [`apply`], without the
/// database, so it can run while the materialization downloads: its tables fetched and
/// checked, then the segments after them, keyed entries only of the groups in `target`
/// (a table holds every group of the source; the rescale surgery after the replay drops the
/// others). The segments go in batches of consecutive segments holding at most
/// `batch_bytes` stored bytes (at least one segment each): a batch is downloaded, checked,
/// sorted and written into SST files under a scratch directory in `scratch_in` (on the
/// database's file system, so ingestion moves them) before the next one is downloaded, so
/// the log in memory stays near one batch however long the log is. `None` for a manifest
/// without log segments.
#[allow(clippy::too_many_arguments)]
pub(crate) fn prepare(
    storage: &dyn CheckpointStorage,
    name: &str,
    m: &CheckpointManifest,
    scratch_in: &Path,
    target: KeyGroupRange,
    options: &DbOptions,
    budget: &MemoryBudget,
    threads: usize,
    batch_bytes: u64,
) -> Result<Option<Prepared>> {
    let Some(log) = m.changelog.as_ref().filter(|l| !l.segments.is_empty()) else {
        return Ok(None);
    };
    check_sequence(name, log)?;
    let after_tables = check_tables(name, log)?;
    let scratch = tempfile::Builder::new()
        .prefix("replay-")
        .tempdir_in(scratch_in)
        .map_err(|e| Error::io(scratch_in, e))?;
    let mut counts = ReplayCounts {
        tables: log.tables.len(),
        table_bytes: log
            .tables
            .iter()
            .flat_map(|t| t.files.iter().map(|f| f.size))
            .sum(),
        ..ReplayCounts::default()
    };
    // The tables are fetched (and their CRCs computed) beside the segments' preparation.
    let (tables, prepared) = std::thread::scope(|scope| {
        let tables = crate::parallel::beside(scope, || {
            fetch_tables(storage, &log.tables, scratch.path(), threads)
        });
        let prepared = (|| {
            let mut prepared = Vec::new();
            let rest = &log.segments[after_tables..];
            for (i, batch) in batches(rest, batch_bytes).into_iter().enumerate() {
                let segments = fetch(storage, batch, threads, |_| None)?;
                counts.segment_bytes += batch.iter().map(|s| s.size).sum::<u64>();
                let ranged = !ranges_sortable(&segments, m.max_parallelism);
                counts.segments += segments.len();
                counts.batches += 1;
                prepared.push(if ranged {
                    Batch::Entries(segments)
                } else {
                    let files = scratch.path().join(format!("batch-{i}"));
                    std::fs::create_dir(&files).map_err(|e| Error::io(&files, e))?;
                    sort_batch(
                        name,
                        &segments,
                        target,
                        m.max_parallelism,
                        options,
                        budget,
                        &files,
                        replay_threads(),
                        &mut counts,
                    )?
                });
            }
            Ok::<_, Error>(prepared)
        })();
        let tables = tables
            .join()
            .map_err(|_| Error::Internal("the log table fetch panicked".into()))?;
        Ok::<_, Error>((tables?, prepared?))
    })?;
    Ok(Some(Prepared {
        scratch,
        tables,
        batches: prepared,
        counts,
        target,
        source: KeyGroupRange::new(m.key_group_start, m.key_group_end)?,
        max_parallelism: m.max_parallelism,
    }))
}

/// Applies a [`prepare`]d log (of the manifest object `name`) onto the downloaded
/// materialization in `dir` (see [`apply_onto`]), opened with the source's key layout. The
/// database is closed before this returns.
pub(crate) fn apply(
    prepared: Prepared,
    dir: &Path,
    name: &str,
    options: &DbOptions,
    budget: &MemoryBudget,
) -> Result<ReplayCounts> {
    // Compactions stay off: the database is closed right after (`db::quiet`).
    let db = Db::open_for_restore(
        dir,
        options,
        budget,
        Some(KeyLayout::new(prepared.max_parallelism, prepared.source)),
    )?;
    // The database closes right after: its files are not warmed.
    let result = apply_onto(prepared, &db, name, None);
    let closed = db.close();
    let (counts, _) = result?;
    closed?;
    Ok(counts)
}

/// Applies a [`prepare`]d log (of the manifest object `name`) onto `db`, the downloaded
/// materialization open: the tables (per column family all their files in one ingestion, the
/// column families' ingestions at once), then the segments' batches, each above everything
/// before it (the metadata's and each state's SST files ingested; a batch holding a range
/// deletion through the memtable); and `last`, a file of the metadata column family, above
/// everything in that column family: with the tables when no batch follows them, else after
/// the batches. A plain restore applies the log onto the database it hands to the backend, so
/// RocksDB opens once. Returns the sorted batches' files, opened before their ingestion moved
/// them, for [`Db::warm_restored`] (RocksDB's SST writer dropped them from the page cache).
pub(crate) fn apply_onto(
    prepared: Prepared,
    db: &Arc<Db>,
    name: &str,
    last: Option<&Path>,
) -> Result<(ReplayCounts, ToWarm)> {
    let mut counts = prepared.counts;
    let sorted: Vec<&PathBuf> = prepared
        .batches
        .iter()
        .flat_map(|batch| match batch {
            Batch::Sorted { meta, states } => meta
                .iter()
                .chain(states.iter().flat_map(|(_, files)| files))
                .collect(),
            Batch::Entries(_) => Vec::new(),
        })
        .collect();
    let warm = db.open_for_warming(sorted);
    let result = (|| {
        // Per column family its tables' files, in log order, in one ingestion: RocksDB gives
        // files that overlap one another levels and sequence numbers that let a later file
        // win (`IngestExternalFile`'s contract), and one ingestion writes RocksDB's MANIFEST
        // once instead of once per table.
        let mut by_cf: Vec<(&str, Vec<PathBuf>)> = Vec::new();
        for (cf, file) in prepared.tables.iter().flatten() {
            match by_cf.iter_mut().find(|(name, _)| *name == cf.as_str()) {
                Some((_, files)) => files.push(file.clone()),
                None => by_cf.push((cf.as_str(), vec![file.clone()])),
            }
        }
        // Without batches after the tables, `last` joins the metadata's ingestion.
        let mut last = last;
        if prepared.batches.is_empty() {
            if let Some(file) = last.take() {
                match by_cf.iter_mut().find(|(cf, _)| *cf == DEFAULT_CF_NAME) {
                    Some((_, files)) => files.push(file.to_path_buf()),
                    None => by_cf.push((DEFAULT_CF_NAME, vec![file.to_path_buf()])),
                }
            }
        }
        // The column families' ingestions overlap (`Cf::ingest_each`): the identity, in the
        // default column family, no longer waits for the tables' file syncs.
        let cfs = by_cf
            .iter()
            .map(|(cf, files)| Ok((log_cf(db, name, "log table", cf)?.1, files.as_slice())))
            .collect::<Result<Vec<_>>>()?;
        let batches: Vec<(&Cf, &[PathBuf])> = cfs.iter().map(|(cf, f)| (cf, *f)).collect();
        Cf::ingest_each(&batches)?;
        for batch in &prepared.batches {
            match batch {
                Batch::Sorted { meta, states } => {
                    if let Some(file) = meta {
                        db.default_cf()?.ingest(std::slice::from_ref(file))?;
                    }
                    for (state, files) in states {
                        log_cf(db, name, "log segment", state)?.1.ingest(files)?;
                    }
                }
                Batch::Entries(segments) => {
                    let before = counts.applied;
                    for seg in segments {
                        apply_segment(
                            db,
                            name,
                            seg,
                            prepared.target,
                            prepared.max_parallelism,
                            &mut counts,
                        )?;
                    }
                    counts.memtable_writes += counts.applied - before;
                }
            }
        }
        if let Some(file) = last {
            db.default_cf()?.ingest(&[file.to_path_buf()])?;
        }
        Ok(())
    })();
    drop(prepared.scratch);
    result?;
    Ok((counts, warm))
}

/// Checks the sequence numbers of `log`'s segments (the manifest object `name`): the first
/// starts at the materialization's, each next one where the one before ended.
fn check_sequence(name: &str, log: &Changelog) -> Result<()> {
    let mut at = log.materialized_seq;
    for s in &log.segments {
        if s.first_seq != at {
            return Err(corrupt(
                name,
                format!(
                    "log segment {} starts at {}, the log before it ends at {at}",
                    s.remote_name, s.first_seq
                ),
            ));
        }
        at = at
            .checked_add(s.entries)
            .ok_or_else(|| corrupt(name, "log sequence numbers overflow".into()))?;
    }
    Ok(())
}

/// Checks the tables of `log` (the manifest object `name`), whose segments
/// [`check_sequence`] checked: the first starts at the materialization's sequence number,
/// each next one where the one before ended, each ends where a segment ends, and a table
/// names each column family at most once. Returns the index of the first segment after the
/// tables.
fn check_tables(name: &str, log: &Changelog) -> Result<usize> {
    let mut at = log.materialized_seq;
    let mut next = 0usize;
    for t in &log.tables {
        if t.first_seq != at || t.end_seq <= t.first_seq {
            return Err(corrupt(
                name,
                format!(
                    "log table {}..{} does not follow the log before it, which ends at {at}",
                    t.first_seq, t.end_seq
                ),
            ));
        }
        // The segments it covers: up to the one ending at its end.
        loop {
            let Some(s) = log.segments.get(next) else {
                return Err(corrupt(
                    name,
                    format!("log table {}..{} ends past the log", t.first_seq, t.end_seq),
                ));
            };
            let end = s.first_seq.saturating_add(s.entries);
            next += 1;
            if end == t.end_seq {
                break;
            }
            if end > t.end_seq {
                return Err(corrupt(
                    name,
                    format!(
                        "log table {}..{} ends inside segment {}",
                        t.first_seq, t.end_seq, s.remote_name
                    ),
                ));
            }
        }
        let mut families: Vec<&str> = t.files.iter().map(|f| f.column_family.as_str()).collect();
        families.sort_unstable();
        if families.windows(2).any(|w| w[0] == w[1]) {
            return Err(corrupt(
                name,
                format!(
                    "log table {}..{} names a column family twice",
                    t.first_seq, t.end_seq
                ),
            ));
        }
        at = t.end_seq;
    }
    Ok(next)
}

/// Fetches every file of `tables` into `dir` and checks it against the manifest (size,
/// CRC-32, and an SST's footer and properties); per table, `(column family, file)`.
fn fetch_tables(
    storage: &dyn CheckpointStorage,
    tables: &[LogTable],
    dir: &Path,
    threads: usize,
) -> Result<Vec<Vec<(String, PathBuf)>>> {
    let jobs: Vec<(usize, PathBuf, &sst_format::LogTableFile)> = tables
        .iter()
        .enumerate()
        .flat_map(|(i, t)| {
            t.files
                .iter()
                .enumerate()
                .map(move |(j, f)| (i, dir.join(format!("table-{i}-{j}.sst")), f))
        })
        .collect();
    run_parallel(&jobs, threads, |(_, path, f)| {
        let digest = storage
            .get_file(&f.remote_name, path)
            .map_err(|e| named_fetch_error(&f.remote_name, e))?;
        check_digest(&f.remote_name, digest, f.size, f.crc32)?;
        sst_format::read_sst_meta(path)
            .map_err(|e| corrupt(&f.remote_name, format!("not a valid SST: {e}")))?;
        Ok(())
    })?;
    let mut out: Vec<Vec<(String, PathBuf)>> = tables.iter().map(|_| Vec::new()).collect();
    for (i, path, f) in jobs {
        out[i].push((f.column_family.clone(), path));
    }
    Ok(out)
}

/// Builds the log table of `segments` (consecutive, of a backend owning `source` of
/// `max_parallelism`; `name` names them in errors) in `dir`: per column family they change,
/// one SST of the last change of every key, in column-family name order. Written on the
/// calling thread (the checkpoint's async phase, beside the backend's own work).
pub(crate) fn build_table(
    name: &str,
    segments: &[LogSegment],
    source: KeyGroupRange,
    max_parallelism: u32,
    options: &DbOptions,
    budget: &MemoryBudget,
    dir: &Path,
) -> Result<Vec<(String, PathBuf)>> {
    let mut counts = ReplayCounts::default();
    let Batch::Sorted { meta, states } = sort_batch(
        name,
        segments,
        source,
        max_parallelism,
        options,
        budget,
        dir,
        1,
        &mut counts,
    )?
    else {
        return Err(Error::Internal("a log table of a range deletion".into()));
    };
    if counts.skipped != 0 {
        return Err(Error::Internal(format!(
            "{} log entries outside the backend's key groups {source}",
            counts.skipped
        )));
    }
    let mut out = Vec::new();
    if let Some(file) = meta {
        out.push((DEFAULT_CF_NAME.to_string(), file));
    }
    for (state, files) in states {
        match files.as_slice() {
            [] => {}
            [file] => out.push((state, file.clone())),
            _ => {
                return Err(Error::Internal(
                    "a log table written in more than one file per state".into(),
                ))
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// `CheckpointCorrupt` for `file`.
fn corrupt(file: &str, detail: String) -> Error {
    Error::CheckpointCorrupt {
        file: file.to_string(),
        detail,
    }
}

/// `segments` cut into runs of consecutive segments holding at most `batch_bytes` stored
/// bytes, at least one segment each.
fn batches(segments: &[LogSegmentFile], batch_bytes: u64) -> Vec<&[LogSegmentFile]> {
    let mut out = Vec::new();
    let mut from = 0;
    while from < segments.len() {
        let mut to = from + 1;
        let mut bytes = segments[from].size;
        while to < segments.len() && bytes.saturating_add(segments[to].size) <= batch_bytes {
            bytes += segments[to].size;
            to += 1;
        }
        out.push(&segments[from..to]);
        from = to;
    }
    out
}

/// Downloads `files` (log segments, in log order) and checks each against its manifest entry
/// (size, CRC-32, the segment's own checks, its first sequence number and entry count). A
/// segment `local` gives a file for is read from that file instead (the writer's own copy).
pub(crate) fn fetch(
    storage: &dyn CheckpointStorage,
    files: &[LogSegmentFile],
    threads: usize,
    local: impl Fn(&LogSegmentFile) -> Option<PathBuf> + Sync,
) -> Result<Vec<LogSegment>> {
    run_parallel(files, threads, |s| {
        let fetched = match local(s) {
            Some(path) => std::fs::read(&path).map_err(|e| Error::io(&path, e)),
            None => storage.get_bytes(&s.remote_name),
        };
        let bytes = fetched.map_err(|e| named_fetch_error(&s.remote_name, e))?;
        let digest = ObjectDigest {
            size: bytes.len() as u64,
            crc32: crc32fast::hash(&bytes),
        };
        check_digest(&s.remote_name, digest, s.size, s.crc32)?;
        let seg = sst_format::decode_log_segment(&bytes)
            .map_err(|e| corrupt(&s.remote_name, format!("log segment: {e}")))?;
        if (seg.first_seq(), seg.count()) != (s.first_seq, s.entries) {
            return Err(corrupt(
                &s.remote_name,
                format!(
                    "holds entries {}.. ({}), manifest says {}.. ({})",
                    seg.first_seq(),
                    seg.count(),
                    s.first_seq,
                    s.entries
                ),
            ));
        }
        Ok(seg)
    })
}

/// Where the entries naming one column family of a segment go.
enum Dest {
    /// The backend's metadata: applied whole.
    Meta(Cf),
    /// A keyed state: applied for the target's key groups.
    Keyed(Cf),
}

/// The destination of each column family a segment names (created if missing).
fn destinations(db: &Arc<Db>, name: &str, seg: &LogSegment) -> Result<Vec<Dest>> {
    let mut dests = Vec::with_capacity(seg.column_families().len());
    for cf in seg.column_families() {
        dests.push(match log_cf(db, name, "log segment", cf)? {
            (true, cf) => Dest::Meta(cf),
            (false, cf) => Dest::Keyed(cf),
        });
    }
    Ok(dests)
}

/// The column family `cf` a log (`what` of the manifest object `name`) names, created if it
/// is a state's the database lacks; with whether it is the metadata's (else a keyed state's).
/// Any other name is `CheckpointCorrupt`.
fn log_cf(db: &Arc<Db>, name: &str, what: &str, cf: &str) -> Result<(bool, Cf)> {
    if cf == DEFAULT_CF_NAME {
        Ok((true, db.default_cf()?))
    } else if cf.starts_with(STATE_CF_PREFIX) {
        let state = match db.cf(cf)? {
            Some(c) => c,
            None => db.create_cf(cf)?,
        };
        Ok((false, state))
    } else {
        Err(unknown_cf(name, what, cf))
    }
}

/// Whether a keyed entry's key lies in `target` (`Err` for a key without a prefix).
fn in_target(key: &[u8], name: &str, target: KeyGroupRange, max_parallelism: u32) -> Result<bool> {
    Ok(target.contains(group_of(key, name, max_parallelism)?))
}

/// The part of the keyed range `[start, end)` inside the key groups `target`, `None` if it
/// holds no key of them (keys order by their big-endian key-group prefix first).
fn range_in_target(
    start: &[u8],
    end: &[u8],
    target: KeyGroupRange,
    max_parallelism: u32,
) -> Option<(Vec<u8>, Vec<u8>)> {
    let lo = keygroup::group_prefix(u32::from(target.start), max_parallelism);
    let hi = keygroup::group_prefix(u32::from(target.end) + 1, max_parallelism);
    let from = start.max(lo.as_slice()).to_vec();
    let to = end.min(hi.as_slice()).to_vec();
    (from < to).then_some((from, to))
}

/// At most this many threads sort and write a replay's SSTs; fewer on fewer cores (the work
/// is CPU-bound).
const REPLAY_THREADS: usize = 4;

/// The threads a replay sorts and writes on: one per core, at most [`REPLAY_THREADS`].
fn replay_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, REPLAY_THREADS)
}

/// One keyed change of the sorted path: the key's group, the key, the value (`None`: delete)
/// and its place in the batch's log.
type Change<'a> = (u16, &'a [u8], Option<&'a [u8]>, u64);

/// A keyed state's range deletion on the sorted path (a row the state layer cleared,
/// `ChangeLog::record_range`): `[start, end)` within key group `group`, at `pos` in the log.
#[derive(Debug, Clone, Copy)]
struct RowTombstone<'a> {
    group: u16,
    start: &'a [u8],
    end: &'a [u8],
    pos: u64,
}

/// The one key group `[start, end)` lies in, if it lies in one (it may end at the next
/// group's first key); `None` for a range over several groups or an empty one.
fn row_range_group(start: &[u8], end: &[u8], max_parallelism: u32) -> Option<u16> {
    let group = keygroup::read_prefix(start, max_parallelism).ok()?;
    let next = keygroup::group_prefix(u32::from(group) + 1, max_parallelism);
    (start < end && end <= next.as_slice()).then_some(group)
}

/// Whether the sorted path takes every range deletion of `segments`: each one a keyed
/// state's, within one key group, and no two of one column family overlapping unless they
/// are the same range (the rows the recorder logs). Otherwise the batch is applied entry by
/// entry. A segment that does not decode counts as sortable (the sorted path reports it).
fn ranges_sortable(segments: &[LogSegment], max_parallelism: u32) -> bool {
    let mut ranges: Vec<(&str, &[u8], &[u8])> = Vec::new();
    for seg in segments {
        for entry in seg.entries().flatten() {
            if let LogEntry::DeleteRange { start, end, .. } = entry {
                let Some(cf) = seg.column_families().get(entry.cf() as usize) else {
                    return true;
                };
                if !cf.starts_with(STATE_CF_PREFIX)
                    || row_range_group(start, end, max_parallelism).is_none()
                {
                    return false;
                }
                ranges.push((cf.as_str(), start, end));
            }
        }
    }
    ranges.sort_unstable();
    ranges.dedup();
    ranges
        .windows(2)
        .all(|w| w[0].0 != w[1].0 || w[0].2 <= w[1].1)
}

/// Whether a tombstone of `tombstones` (by start, disjoint) holds `key` and comes after the
/// key's change at `at`.
fn cleared_after(tombstones: &[RowTombstone<'_>], key: &[u8], at: u64) -> bool {
    let i = tombstones.partition_point(|t| t.start <= key);
    i > 0 && {
        let t = &tombstones[i - 1];
        key < t.end && t.pos > at
    }
}

/// `bounds` (see [`by_group`]) with each group that holds a tombstone counted one change
/// larger, so [`cut_runs`] leaves no such group out of every run.
fn with_tombstones(
    bounds: &[usize],
    tombstones: &[RowTombstone<'_>],
    target: KeyGroupRange,
) -> Vec<usize> {
    let mut extra = vec![0usize; bounds.len()];
    for t in tombstones {
        extra[usize::from(t.group - target.start) + 1] = 1;
    }
    let mut added = 0;
    bounds
        .iter()
        .zip(&extra)
        .map(|(b, e)| {
            added += e;
            b + added
        })
        .collect()
}

/// Where the entries of one column family of a segment go on the sorted path.
enum Route {
    /// The backend's metadata: applied whole.
    Meta,
    /// The keyed state at this index of the batch's states.
    State(usize),
}

/// The sorted path of a batch: the metadata entries and the keyed entries of the target
/// written into sorted SSTs under `files`, the last entry of each key (the log's order
/// decides) only.
///
/// Per state the changes are first laid out by key group (a stable counting sort, so each
/// group's changes keep log order), then cut into runs of whole groups with about equal
/// counts, one per thread ([`replay_threads`]). Each run is sorted group by group (small
/// sorts over keys that sit near each other) and written into its own SST on its own thread;
/// a state's files cover disjoint key ranges, so RocksDB takes them in one ingestion. With
/// one thread a state's changes go into one file.
#[allow(clippy::too_many_arguments)]
fn sort_batch(
    name: &str,
    segments: &[LogSegment],
    target: KeyGroupRange,
    max_parallelism: u32,
    options: &DbOptions,
    budget: &MemoryBudget,
    files: &Path,
    threads: usize,
    counts: &mut ReplayCounts,
) -> Result<Batch> {
    let mut meta = Vec::new();
    let mut keyed: Vec<(String, Vec<Change<'_>>, Vec<RowTombstone<'_>>)> = Vec::new();
    // Every entry's place in the log, so a row's tombstone deletes only what came before it.
    let mut pos: u64 = 0;
    for seg in segments {
        let mut routes = Vec::with_capacity(seg.column_families().len());
        for cf in seg.column_families() {
            routes.push(if cf == DEFAULT_CF_NAME {
                Route::Meta
            } else if cf.starts_with(STATE_CF_PREFIX) {
                Route::State(match keyed.iter().position(|(n, _, _)| n == cf) {
                    Some(at) => at,
                    None => {
                        keyed.push((cf.clone(), Vec::new(), Vec::new()));
                        keyed.len() - 1
                    }
                })
            } else {
                return Err(unknown_cf(name, "log segment", cf));
            });
        }
        for entry in seg.entries() {
            let entry = entry.map_err(|e| corrupt(name, format!("log segment: {e}")))?;
            pos += 1;
            let (key, value) = match entry {
                LogEntry::Put { key, value, .. } => (key, Some(value)),
                LogEntry::Delete { key, .. } => (key, None),
                LogEntry::DeleteRange { start, end, .. } => {
                    // A keyed state's range within one key group ([`ranges_sortable`]; the
                    // recorder writes only cleared rows): `prepare` sends others the other way.
                    let (Some(Route::State(at)), Some(group)) = (
                        routes.get(entry.cf() as usize),
                        row_range_group(start, end, max_parallelism),
                    ) else {
                        return Err(Error::Internal(
                            "a range deletion the sorted replay cannot take".into(),
                        ));
                    };
                    if target.contains(group) {
                        keyed[*at].2.push(RowTombstone {
                            group,
                            start,
                            end,
                            pos,
                        });
                        counts.applied += 1;
                    } else {
                        counts.skipped += 1;
                    }
                    continue;
                }
            };
            match routes.get(entry.cf() as usize) {
                Some(Route::Meta) => meta.push((key.to_vec(), value.map(<[u8]>::to_vec))),
                Some(Route::State(at)) => {
                    let group = group_of(key, name, max_parallelism)?;
                    if !target.contains(group) {
                        counts.skipped += 1;
                        continue;
                    }
                    keyed[*at].1.push((group, key, value, pos));
                }
                None => {
                    return Err(corrupt(
                        name,
                        "log entry names an unknown column family".into(),
                    ))
                }
            }
            counts.applied += 1;
        }
    }
    let meta = write_meta(&mut meta, options, budget, &files.join("meta.sst"))?;
    let mut states = Vec::with_capacity(keyed.len());
    for (i, (state, changes, mut tombstones)) in keyed.into_iter().enumerate() {
        // By start, a row cleared twice once (its last clear), so at most one tombstone
        // holds a key (they are disjoint: `ranges_sortable`).
        tombstones.sort_by(|a, b| (a.start, a.end, a.pos).cmp(&(b.start, b.end, b.pos)));
        tombstones.dedup_by(|later, kept| {
            let same = (later.start, later.end) == (kept.start, kept.end);
            if same {
                kept.pos = kept.pos.max(later.pos);
            }
            same
        });
        // Groups with a tombstone count as holding one change more, so a run covers them.
        let (mut laid, bounds) = by_group(changes, target);
        let runs = cut_runs(&with_tombstones(&bounds, &tombstones, target), threads);
        // Disjoint mutable runs, one per job; each lock is taken once, by its job.
        let mut jobs = Vec::with_capacity(runs.len());
        let mut rest = laid.as_mut_slice();
        let mut taken = 0;
        for (j, &(from, to)) in runs.iter().enumerate() {
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(bounds[from] - taken);
            let (run, tail) = tail.split_at_mut(bounds[to] - bounds[from]);
            rest = tail;
            taken = bounds[to];
            let file = files.join(format!("state-{i}-run-{j}.sst"));
            // The run's groups' tombstones (sorted by start, so by group).
            let (lo, hi) = (target.start + from as u16, target.start + to as u16);
            let first = tombstones.partition_point(|t| t.group < lo);
            let last = tombstones.partition_point(|t| t.group < hi);
            jobs.push((
                Mutex::new(run),
                &bounds[from..=to],
                &tombstones[first..last],
                file,
            ));
        }
        let written = run_parallel(&jobs, threads, |(run, bounds, tombstones, file)| {
            let mut run = run.lock();
            let base = bounds[0];
            for w in bounds.windows(2) {
                // Stable: a key's changes stay in log order, and the last one wins.
                run[w[0] - base..w[1] - base].sort_by(|a, b| a.1.cmp(b.1));
            }
            // The log does not say which state is a list (whose runs keep the shared block
            // size): the changes of a log are few beside the state, and the column family
            // decides from its files after the ingestion.
            let written = write_ssts(
                options,
                budget,
                &[(file.as_path(), BlockSizing::Shared)],
                |sinks| {
                    let Some(sink) = sinks.first_mut() else {
                        return Ok(());
                    };
                    for (j, (_, key, value, at)) in run.iter().enumerate() {
                        if run.get(j + 1).is_some_and(|next| next.1 == *key) {
                            continue; // a later change of the same key follows
                        }
                        if cleared_after(tombstones, key, *at) {
                            continue; // its row was cleared after it: the tombstone deletes it
                        }
                        match value {
                            Some(v) => sink.put(key, v)?,
                            None => sink.delete(key)?,
                        }
                    }
                    // Deletes what the database holds there from before the log; not this
                    // file's own entries (one sequence number: `SstSink::delete_range`).
                    for t in tombstones.iter() {
                        sink.delete_range(t.start, t.end)?;
                    }
                    Ok(())
                },
            )?;
            Ok(written.into_iter().next().flatten())
        })?;
        let state_files: Vec<PathBuf> = jobs
            .into_iter()
            .zip(written)
            .filter_map(|((_, _, _, file), w)| w.map(|_| file))
            .collect();
        states.push((state, state_files));
    }
    Ok(Batch::Sorted { meta, states })
}

/// Writes the last change of each key of `meta` (metadata entries in log order, `None` a
/// delete) into a sorted SST at `file`; `None` (and no file) when `meta` is empty.
fn write_meta(
    meta: &mut [(Vec<u8>, Option<Vec<u8>>)],
    options: &DbOptions,
    budget: &MemoryBudget,
    file: &Path,
) -> Result<Option<PathBuf>> {
    if meta.is_empty() {
        return Ok(None);
    }
    // Stable: a key's changes stay in log order, and the last one wins.
    meta.sort_by(|a, b| a.0.cmp(&b.0));
    let written = write_ssts(options, budget, &[(file, BlockSizing::Shared)], |sinks| {
        let Some(sink) = sinks.first_mut() else {
            return Ok(());
        };
        for (j, (key, value)) in meta.iter().enumerate() {
            if meta.get(j + 1).is_some_and(|next| next.0 == *key) {
                continue;
            }
            match value {
                Some(v) => sink.put(key, v)?,
                None => sink.delete(key)?,
            }
        }
        Ok(())
    })?;
    Ok(written
        .first()
        .is_some_and(Option::is_some)
        .then(|| file.to_path_buf()))
}

/// `CheckpointCorrupt` for a `what` (log segment or table) of `name` naming column family
/// `cf`, neither a state's nor the metadata's.
fn unknown_cf(name: &str, what: &str, cf: &str) -> Error {
    corrupt(
        name,
        format!("{what} names column family `{cf}`, neither a state's nor the metadata's"),
    )
}

/// A keyed entry's key group (`Err` for a key without a prefix).
fn group_of(key: &[u8], name: &str, max_parallelism: u32) -> Result<u16> {
    keygroup::read_prefix(key, max_parallelism).map_err(|_| Error::CheckpointCorrupt {
        file: name.to_string(),
        detail: "a keyed log entry without a key-group prefix".into(),
    })
}

/// `changes` (all in `target`) laid out by key group, each group's in their old order, and
/// where each group starts: group `target.start + g` holds `laid[bounds[g]..bounds[g + 1]]`.
fn by_group(changes: Vec<Change<'_>>, target: KeyGroupRange) -> (Vec<Change<'_>>, Vec<usize>) {
    let groups = target.len() as usize;
    let mut bounds = vec![0usize; groups + 1];
    for c in &changes {
        bounds[usize::from(c.0 - target.start) + 1] += 1;
    }
    for g in 0..groups {
        bounds[g + 1] += bounds[g];
    }
    let mut next = bounds.clone();
    let mut laid: Vec<Change<'_>> = vec![(0, &[], None, 0); changes.len()];
    for c in changes {
        let at = &mut next[usize::from(c.0 - target.start)];
        laid[*at] = c;
        *at += 1;
    }
    (laid, bounds)
}

/// Cuts the groups `bounds` describes (see [`by_group`]) into up to `threads` runs of whole
/// groups, `(first group, end group)`, with about equal numbers of changes; runs without
/// changes are left out.
fn cut_runs(bounds: &[usize], threads: usize) -> Vec<(usize, usize)> {
    let groups = bounds.len() - 1;
    let total = bounds[groups];
    let threads = threads.max(1);
    let mut runs = Vec::with_capacity(threads);
    let mut from = 0;
    for t in 1..=threads {
        // The group boundary nearest to this run's share of the changes (past `from`).
        let share = total * t / threads;
        let mut to = from;
        while to < groups && (bounds[to] < share || to == from) {
            to += 1;
        }
        if to - 1 > from && share - bounds[to - 1] < bounds[to].saturating_sub(share) {
            to -= 1;
        }
        if t == threads {
            to = groups;
        }
        if bounds[to] > bounds[from] {
            runs.push((from, to));
        }
        from = to;
        if from == groups {
            break;
        }
    }
    runs
}

fn apply_segment(
    db: &Arc<Db>,
    name: &str,
    seg: &LogSegment,
    target: KeyGroupRange,
    max_parallelism: u32,
    counts: &mut ReplayCounts,
) -> Result<()> {
    let dests = destinations(db, name, seg)?;
    for entry in seg.entries() {
        let entry = entry.map_err(|e| Error::CheckpointCorrupt {
            file: name.to_string(),
            detail: format!("log segment: {e}"),
        })?;
        let (cf, keyed) = match dests.get(entry.cf() as usize) {
            Some(Dest::Meta(cf)) => (cf, false),
            Some(Dest::Keyed(cf)) => {
                let inside = match entry {
                    LogEntry::Put { key, .. } | LogEntry::Delete { key, .. } => {
                        in_target(key, name, target, max_parallelism)?
                    }
                    // A range reaching into the target is applied (cut to it below), wherever
                    // it starts.
                    LogEntry::DeleteRange { start, end, .. } => {
                        range_in_target(start, end, target, max_parallelism).is_some()
                    }
                };
                if !inside {
                    counts.skipped += 1;
                    continue;
                }
                (cf, true)
            }
            None => {
                return Err(Error::CheckpointCorrupt {
                    file: name.to_string(),
                    detail: "log entry names an unknown column family".into(),
                })
            }
        };
        match entry {
            LogEntry::Put { key, value, .. } => cf.put(key, value)?,
            LogEntry::Delete { key, .. } => cf.delete(key)?,
            LogEntry::DeleteRange { start, end, .. } if keyed => {
                if let Some((from, to)) = range_in_target(start, end, target, max_parallelism) {
                    cf.range_tombstone(&from, &to)?;
                }
            }
            LogEntry::DeleteRange { start, end, .. } => cf.range_tombstone(start, end)?,
        }
        counts.applied += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A log's range deletion is cut to the target's key groups, and one outside them is
    /// dropped, wherever it starts.
    #[test]
    fn a_range_deletion_is_cut_to_the_target() {
        let target = KeyGroupRange::new(10, 20).unwrap();
        // 128 key groups: one-byte prefixes.
        assert_eq!(
            range_in_target(b"\x05zz", b"\x0cb", target, 128),
            Some((b"\x0a".to_vec(), b"\x0cb".to_vec()))
        );
        assert_eq!(
            range_in_target(b"\x0ca", b"\x30", target, 128),
            Some((b"\x0ca".to_vec(), b"\x15".to_vec()))
        );
        assert_eq!(range_in_target(b"\x01", b"\x0a", target, 128), None);
        assert_eq!(range_in_target(b"\x15", b"\x20", target, 128), None);
    }

    fn change(group: u16, key: &'static [u8]) -> Change<'static> {
        (group, key, None, 0)
    }

    #[test]
    fn a_row_range_lies_in_one_key_group() {
        assert_eq!(row_range_group(b"\x05a", b"\x05b", 128), Some(5));
        // Up to the next group's first key.
        assert_eq!(row_range_group(b"\x05a", b"\x06", 128), Some(5));
        assert_eq!(row_range_group(b"\x05a", b"\x06\x00", 128), None);
        assert_eq!(row_range_group(b"\x05b", b"\x05a", 128), None);
        assert_eq!(row_range_group(b"", b"\x05", 128), None);
    }

    #[test]
    fn a_key_is_cleared_by_a_later_tombstone_of_its_row_only() {
        let t = |start: &'static [u8], end: &'static [u8], pos| RowTombstone {
            group: 5,
            start,
            end,
            pos,
        };
        let tombstones = [t(b"\x05a", b"\x05b", 10), t(b"\x05c", b"\x05d", 20)];
        assert!(cleared_after(&tombstones, b"\x05a", 9));
        assert!(cleared_after(&tombstones, b"\x05a\xff", 3));
        assert!(
            !cleared_after(&tombstones, b"\x05a", 11),
            "written after the clear"
        );
        assert!(!cleared_after(&tombstones, b"\x05b", 1), "between the rows");
        assert!(cleared_after(&tombstones, b"\x05c1", 19));
        assert!(
            !cleared_after(&tombstones, b"\x05d", 1),
            "the end is outside"
        );
        assert!(!cleared_after(&tombstones, b"\x04z", 1), "before every row");
    }

    #[test]
    fn groups_with_only_tombstones_count_for_the_runs() {
        let target = KeyGroupRange::new(0, 3).unwrap();
        let t = RowTombstone {
            group: 2,
            start: b"\x02a",
            end: b"\x02b",
            pos: 1,
        };
        // Changes in group 0 only; group 2 holds a tombstone.
        assert_eq!(
            with_tombstones(&[0, 4, 4, 4, 4], &[t], target),
            [0, 4, 4, 5, 5]
        );
        let runs = cut_runs(&with_tombstones(&[0, 4, 4, 4, 4], &[t], target), 4);
        assert!(
            runs.iter().any(|&(from, to)| from <= 2 && 2 < to),
            "{runs:?}"
        );
    }

    #[test]
    fn laying_out_by_group_keeps_each_groups_log_order() {
        let target = KeyGroupRange::new(10, 13).unwrap();
        let changes = vec![
            change(12, b"c1"),
            change(10, b"a1"),
            change(12, b"c2"),
            change(13, b"d1"),
            change(10, b"a2"),
        ];
        let (laid, bounds) = by_group(changes, target);
        let keys: Vec<&[u8]> = laid.iter().map(|c| c.1).collect();
        assert_eq!(
            keys,
            [&b"a1"[..], b"a2", b"c1", b"c2", b"d1"],
            "groups ascending, log order within"
        );
        assert_eq!(bounds, [0, 2, 2, 4, 5]);
    }

    #[test]
    fn batches_hold_consecutive_segments_up_to_the_limit_and_at_least_one() {
        let seg = |size| LogSegmentFile {
            remote_name: String::new(),
            size,
            crc32: 0,
            first_seq: 0,
            entries: 0,
            key_groups: None,
        };
        let segments = [seg(4), seg(4), seg(9), seg(1), seg(2)];
        let sizes = |limit| -> Vec<Vec<u64>> {
            batches(&segments, limit)
                .iter()
                .map(|b| b.iter().map(|s| s.size).collect())
                .collect()
        };
        assert_eq!(sizes(8), [vec![4, 4], vec![9], vec![1, 2]]);
        assert_eq!(sizes(0), [[4], [4], [9], [1], [2]]);
        assert_eq!(sizes(u64::MAX), [vec![4, 4, 9, 1, 2]]);
        assert!(batches(&[], 8).is_empty());
    }

    #[test]
    fn runs_cover_every_change_once_in_group_order() {
        // Four groups of 3, 0, 3, 2 changes.
        let bounds = [0, 3, 3, 6, 8];
        assert_eq!(cut_runs(&bounds, 1), [(0, 4)]);
        assert_eq!(cut_runs(&bounds, 2), [(0, 2), (2, 4)]);
        // More threads than groups with changes: one run per such group at most.
        assert_eq!(cut_runs(&bounds, 8), [(0, 1), (2, 3), (3, 4)]);
        assert_eq!(cut_runs(&[0, 0, 0], 4), Vec::<(usize, usize)>::new());
    }

    proptest! {
        #[test]
        fn runs_partition_the_changes(
            counts in prop::collection::vec(0usize..20, 1..40),
            threads in 1usize..9,
        ) {
            let mut bounds = vec![0];
            for c in &counts {
                bounds.push(bounds.last().unwrap() + c);
            }
            let runs = cut_runs(&bounds, threads);
            prop_assert!(runs.len() <= threads);
            let mut covered = 0;
            let mut end = 0;
            for &(from, to) in &runs {
                prop_assert!(from >= end && from < to, "{runs:?}");
                // Whatever lies between two runs holds no change.
                prop_assert_eq!(bounds[from], bounds[end]);
                covered += bounds[to] - bounds[from];
                end = to;
            }
            prop_assert_eq!(covered, *bounds.last().unwrap());
        }
    }
}

//! Rescaling (docs/rescale.md): turns the downloaded databases of one or several checkpoint
//! manifests into one database for another key-group range of the same max parallelism.
//!
//! This module owns the database surgery between download and open; `crate::restore` picks
//! the manifests and downloads them. Steps, all below the backend layer (the database is
//! opened with [`Db`] directly, as the backend opens it, and handed to the backend open):
//!
//! 1. **Check every source** right after opening it, before anything is changed: its stored
//!    backend metadata must match its manifest (max parallelism, key-group range), its stored
//!    state metadata must equal the manifest's, and no state column family may hold a key
//!    outside the manifest's claimed key groups. The last check is two bounded seeks per
//!    column family (below the first claimed group's prefix, at or above the prefix after the
//!    last one): keys are ordered by their key-group prefix, so a live key outside the range
//!    is found by one of them. A seek is left out where no file's key range and no memtable
//!    reaches that side (a seek opens the first file it lands on, for nothing there). Any
//!    failure is a typed error
//!    ([`Error::DataOutsideKeyGroups`], [`Error::CheckpointCorrupt`]).
//! 2. **Drop the base's files outside the target**: per state column family, the SST files
//!    entirely inside its clipped ranges go (no tombstone yet: it would overlap what step 3
//!    ingests). When the restore did not download some of them ([`skippable`]), this runs
//!    first, right after opening the base with RocksDB's consistency checks off, and step 1
//!    checks the base after it, reopened with them on (see [`drop_skipped_files`]).
//! 3. **Merge the others** (opened read-only, so their live files stay put). Per state and
//!    other source, with `copy` = the other's claimed range ∩ the target: first the base's
//!    files entirely inside `copy` go (they hold only dead entries there; RocksDB drops such
//!    files from L1 down, not from L0). A base file inside `copy` that RocksDB kept and the
//!    source does not hold (in practice the clip tombstone an earlier split flushed into L0)
//!    goes too where that spares the rewrite of key groups: the base's column family is
//!    rebuilt from its other files ([`db::FileSurgery::rebuild`]), only if each of them is
//!    in level 0 or the last level and can be ingested as it is ([`ingestible_as_is`]).
//!    Then, per file ([`plan_state`]):
//!    * a source file with no key in `copy`, or one the base holds too (same SST unique id:
//!      both came from one checkpoint before an earlier split), needs nothing;
//!    * a source file inside `copy` that overlaps no base file and that RocksDB wrote (a
//!      flush or compaction output) is ingested *as it is*, hard-linked, keeping its sequence
//!      numbers (RocksDB's DB-generated-file ingestion, [`db::FileSurgery::ingest`]): no
//!      entry is rewritten. A file an earlier rescale's fallback wrote is never linked: its
//!      entries carry sequence number 0 and got their real one from the database that
//!      ingested it, so in another database they would sink below every linked entry and
//!      tombstone (`tests/rescale_rewritten_files.rs`). Nor is a file holding a range
//!      tombstone, which ingestion would widen ([`ingestible_as_is`]). Ingestion raises the base's last
//!      sequence number to the largest ingested one (persisted), so every later write is
//!      newer;
//!    * **fallback** (the old path), for the key groups of `copy` that any other source file
//!      touches, or that a base file the source does not hold touches (e.g. the base's clip
//!      tombstone of an earlier split, which hides the source's part of shared files): they
//!      are scanned from the source's merged view, cut into up to `threads` slices, written
//!      into new SSTs ([`Db::write_sst`]) in parallel and ingested with fresh sequence numbers
//!      after the linked files. Each such SST starts with a range tombstone over its slice,
//!      which hides whatever the base then holds there (linked files included: a key deleted
//!      in an unlinked file must not come back from a linked one) but not the SST's own
//!      entries.
//!
//!    The whole state takes the fallback if the source's memtables are not empty (a replayed
//!    WAL is in no file) or RocksDB refuses the ingestion (logged, counted in
//!    `RestoreReport::sst_ingestions_refused`). States must agree ([`Error::MergedStateMismatch`]); a state
//!    only the other source has is created in the base. No key-by-key write batch is used.
//! 4. **Clip the base**, after every ingestion (only where a file or memtable of the base may
//!    still hold data): `delete_range` the parts of the base's claimed range outside the
//!    target (a narrower tombstone overlaps fewer files of a later rescale); optionally
//!    compact those ranges. Ingestion raised the base's last sequence
//!    number to the largest ingested one, so these tombstones (and every later write) are
//!    newer than any ingested entry. Linked and rewritten data lies inside the target, so
//!    the tombstones never cover it anyway.
//! 5. **Fix the metadata**: the backend metadata gets the target range, each TTL list's
//!    timestamp mark the maximum over the sources that hold the state (none if one of them
//!    lacks it), the list-sequence
//!    high-water mark becomes the maximum over all sources (so new list elements sort after
//!    every restored one). Nothing is flushed here: the backend open writes the new backend
//!    id and flushes every column family once, clip tombstones and metadata included.
//!
//! Linked files keep their SST unique id (table properties), so the first checkpoint after
//! the rescale reuses the other manifests' shared objects (`checkpoint::snapshot` matches SSTs
//! by unique id and size); their local names change (new file numbers in the base).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sst_format::{CheckpointManifest, SstUniqueId};

use crate::codec;
use crate::db::{self, BlockSizing, Cf, Db, ForeignFiles, KeyLayout, LiveSst, MemoryBudget};
use crate::error::{Error, Result};
use crate::keygroup::{self, group_prefix, KeyGroupRange};
use crate::meta::{
    read_list_seq, read_watermark, ttl_floor_key, BackendMeta, TtlMark, BACKEND_META_VERSION,
    META_BACKEND, META_LIST_SEQ, META_STATE_PREFIX, META_WATERMARK, STATE_CF_PREFIX,
};
use crate::options::DbOptions;
use crate::parallel::run_parallel;
use crate::state::{StateKind, StateMeta};
use crate::store::Table;

/// One downloaded checkpoint database.
pub(crate) struct Source<'a> {
    /// The manifest's object name (for errors).
    pub(crate) name: &'a str,
    /// The manifest.
    pub(crate) manifest: &'a CheckpointManifest,
    /// The directory holding its downloaded files.
    pub(crate) dir: &'a Path,
    /// Local names of its SSTs that were not downloaded ([`skippable`]). They are dropped
    /// ([`drop_skipped`]; for the base, first thing in [`rescale`]) before anything reads the
    /// source: a bounded scan inside the target can still open one, since RocksDB's level
    /// iterator opens the first file of a level at or after its seek key even when it starts
    /// past the scan's upper bound. [`rescale`] refuses another source with skipped files.
    pub(crate) skipped: &'a [String],
}

/// Downloads (and verifies) the named SSTs of the source with this manifest into its
/// directory.
pub(crate) type FetchLate<'a> = dyn Fn(&CheckpointManifest, &Path, &[String]) -> Result<()> + 'a;

/// The target of a rescale and how to open databases.
pub(crate) struct Target<'a> {
    /// The key groups the restored backend owns.
    pub(crate) key_groups: KeyGroupRange,
    /// The job's max parallelism.
    pub(crate) max_parallelism: u32,
    /// RocksDB options (as the backend will open with).
    pub(crate) options: &'a DbOptions,
    /// Memory budget for the temporarily opened databases.
    pub(crate) budget: &'a MemoryBudget,
    /// Compact the clipped ranges of the base.
    pub(crate) compact_clipped: bool,
    /// Scratch directory on the target's filesystem for ingest files.
    pub(crate) scratch: &'a Path,
    /// Threads scanning the other sources into ingest files.
    pub(crate) threads: usize,
    /// Downloads (and verifies) the named SSTs of a source (its manifest and directory) after
    /// all: the skipped files RocksDB did not drop.
    pub(crate) fetch_late: &'a FetchLate<'a>,
}

/// What a rescale did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct RescaleStats {
    /// SST files of the other sources ingested as they are (hard-linked, not rewritten).
    pub(crate) files_linked: usize,
    /// SST files written by the fallback (scanned from another source) and ingested.
    pub(crate) files_rewritten: usize,
    /// SST files of the base wholly inside another source's part of the target that
    /// RocksDB's `DeleteFilesInRange` left (level 0 above all), dropped by rebuilding the
    /// base's column family from its other files.
    pub(crate) base_files_dropped: usize,
    /// Entries copied by the fallback into those files.
    pub(crate) entries_rewritten: u64,
    /// Ingestions of DB-generated files RocksDB refused (their states took the fallback).
    pub(crate) refused: usize,
    /// Skipped SSTs (local name, size) that RocksDB did not drop, so they were downloaded
    /// after all.
    pub(crate) fetched_late: Vec<(String, u64)>,
    /// Clipped ranges (per state) that needed no range tombstone: nothing of the base was
    /// left there.
    pub(crate) clips_without_tombstone: usize,
}

/// A state column family of the base rebuilt without some of its files.
#[derive(Default)]
struct Rebuild {
    /// Its live files when planned, in [`Cf::live_files`] order.
    expect: Vec<PathBuf>,
    /// The files left out.
    drop: Vec<PathBuf>,
}

/// How one state of one other source gets into the base.
struct Plan {
    /// Index into the opened other sources.
    source: usize,
    /// The state's name.
    name: String,
    /// The key groups of the target this source provides.
    copy: KeyGroupRange,
    /// What to link, rewrite and drop.
    state: StatePlan,
}

/// Checks `base` (already in the target directory; `opened`: its database, when the caller
/// opened it already with `target`'s options and key layout, and it has no skipped files)
/// and, unless its range is the target's and there are no `others`, rebuilds it for
/// `target`, merging `others`. Returns the base
/// database open as the backend uses it (`target`'s options, budget and key layout), so the
/// restore hands it to the backend instead of closing and opening it again: an open of
/// RocksDB writes and syncs a new MANIFEST, OPTIONS file and WAL and reads every table file's
/// footer, which for a restore of 200,000 keys of 100 B out of LocalStorage is a third of its
/// time (`rockstate-bench rescale --keys 200000`, docs/rescale.md §2 step 6).
pub(crate) fn rescale(
    base: &Source<'_>,
    opened: Option<Arc<Db>>,
    others: &[Source<'_>],
    target: &Target<'_>,
) -> Result<(RescaleStats, Arc<Db>)> {
    let mut stats = RescaleStats::default();
    let m = target.max_parallelism;
    let layout = Some(KeyLayout::new(m, target.key_groups));
    let claimed = claimed_range(base)?;
    // Only the parts of the base's claimed range outside the target are clipped.
    let clips = clip_ranges(claimed, target.key_groups, m);
    let db = match opened {
        Some(db) if base.skipped.is_empty() => db,
        Some(_) => {
            return Err(Error::Internal(
                "a base opened before the rescale with files skipped".into(),
            ))
        }
        None if base.skipped.is_empty() => {
            Db::open_for_restore(base.dir, target.options, target.budget, layout)?
        }
        None => {
            stats.fetched_late = drop_skipped_files(base, target, layout, &clips)?;
            Db::open_for_restore(base.dir, target.options, target.budget, layout)?
        }
    };
    let base_states = check_source(&db, base, m)?;
    let mut list_seq = read_list_seq(&Table::Rocks(db.default_cf()?))?;
    // The event-time watermark: the highest of the sources (each instance's is where its
    // input had got to; the restored one goes on from the furthest).
    let mut watermark = read_watermark(&Table::Rocks(db.default_cf()?))?;

    if others.is_empty() && claimed == target.key_groups {
        // A plain restore: checked, nothing to change.
        return Ok((stats, db));
    }

    // 2. Drop the base's files entirely outside the target.
    for state in base_states.values() {
        let cf = state_cf(&db, base, &state.name)?;
        for (from, to) in &clips {
            cf.drop_files_in_range(from, to)?;
        }
    }

    // A TTL list's timestamp mark: the maximum over the sources that hold the state, so no
    // head written after the rescale sorts as older than an entry of any source it
    // replaces; none if a source lacks it (that source's timestamps no mark covers) or if
    // two sources' marks are of different time domains (`TtlMark::joined`).
    let mut marks: BTreeMap<String, Option<TtlMark>> = BTreeMap::new();
    for (name, st) in &base_states {
        if st.kind == StateKind::List && st.ttl {
            marks.insert(name.clone(), read_ttl_mark(db.default_cf()?, name)?);
        }
    }

    // 3a. Open and check the others, merge the state lists, plan each state.
    let mut states = base_states.clone();
    let mut opened: Vec<Arc<Db>> = Vec::with_capacity(others.len());
    let mut plans: Vec<Plan> = Vec::new();
    for (i, other) in others.iter().enumerate() {
        if !other.skipped.is_empty() {
            return Err(Error::Internal(format!(
                "{}: another source of a rescale with files not dropped",
                other.name
            )));
        }
        let odb = Db::open_read_only(other.dir, target.options, target.budget, false)?;
        let other_states = check_source(&odb, other, m)?;
        list_seq = list_seq.max(read_list_seq(&Table::Rocks(odb.default_cf()?))?);
        watermark = watermark.max(read_watermark(&Table::Rocks(odb.default_cf()?))?);
        for (name, st) in &other_states {
            if st.kind == StateKind::List && st.ttl {
                let theirs = read_ttl_mark(odb.default_cf()?, name)?;
                marks
                    .entry(name.clone())
                    .and_modify(|m| *m = m.zip(theirs).and_then(|(a, b)| a.joined(b)))
                    .or_insert(theirs);
            }
        }
        for (name, st) in &other_states {
            match states.get(name) {
                Some(have) if !crate::state::same_state(have, st) => {
                    return Err(Error::MergedStateMismatch {
                        name: name.clone(),
                        base: base.name.to_string(),
                        base_meta: crate::state::describe(have),
                        other: other.name.to_string(),
                        other_meta: crate::state::describe(st),
                    })
                }
                Some(_) => {}
                None => {
                    let key = format!("{META_STATE_PREFIX}{name}");
                    db.default_cf()?
                        .put(key.as_bytes(), &codec::encode(st, "state metadata")?)?;
                    states.insert(name.clone(), st.clone());
                }
            }
            let dst = db.create_cf(&format!("{STATE_CF_PREFIX}{name}"))?;
            if let Some(copy) = claimed_range(other)?.intersect(&target.key_groups) {
                // The base's files entirely inside `copy` hold only dead entries there.
                dst.drop_files_in_range(
                    &group_prefix(u32::from(copy.start), m),
                    &group_prefix(u32::from(copy.end) + 1, m),
                )?;
                plans.push(Plan {
                    source: i,
                    name: name.clone(),
                    copy,
                    state: plan_state(&dst, &state_cf(&odb, other, name)?, copy, m)?,
                });
            }
        }
        opened.push(odb);
    }

    // 3b. Which state column families of the base are rebuilt without the files the plans
    //     drop: only where every other file of it lies in level 0 or the last level and can
    //     be ingested as it is, and its memtables are empty; elsewhere the plans keep every
    //     file.
    let mut rebuilds: BTreeMap<String, Rebuild> = BTreeMap::new();
    for plan in &plans {
        rebuilds
            .entry(plan.name.clone())
            .or_default()
            .drop
            .extend(plan.state.drop.iter().cloned());
    }
    rebuilds.retain(|_, r| !r.drop.is_empty());
    for (name, rebuild) in &mut rebuilds {
        let cf = state_cf(&db, base, name)?;
        if !cf.memtables_empty()? {
            continue;
        }
        let files = cf.live_files()?;
        // Ingested again, the kept files must read as they did, and land where they were: an
        // empty column family takes DB-generated files only into level 0 and the last level
        // (its base level is the last), so a file from levels 1 to 5 would go to level 0,
        // and the next compaction would rewrite the state under it (which the first
        // checkpoint would upload again).
        let all_ingestible = files.iter().all(|f| {
            rebuild.drop.contains(&f.path)
                || ((f.level == 0 || f.level == LAST_LEVEL)
                    && sst_format::read_sst_meta(&f.path).is_ok_and(|m| ingestible_as_is(&m)))
        });
        let present = rebuild
            .drop
            .iter()
            .all(|d| files.iter().any(|f| f.path == *d));
        if all_ingestible && present {
            rebuild.expect = files.into_iter().map(|f| f.path).collect();
        }
    }
    rebuilds.retain(|_, r| !r.expect.is_empty());
    for plan in &mut plans {
        if !rebuilds.contains_key(&plan.name) {
            plan.state.keep_base();
        }
    }

    // 3c. Rebuild those column families, then ingest the files that qualify as they are.
    //     RocksDB's DB-generated ingestion needs a handle type `Db` is not, so the base is
    //     closed meanwhile (its memtables flushed).
    let db = if plans.iter().any(|p| !p.state.link.is_empty()) || !rebuilds.is_empty() {
        db.flush_all()?;
        drop(db);
        let mut surgery = db::FileSurgery::open(base.dir, target.options, target.budget)?;
        for (name, rebuild) in &rebuilds {
            let cf = format!("{STATE_CF_PREFIX}{name}");
            match surgery.rebuild(&cf, &rebuild.expect, &rebuild.drop, target.scratch)? {
                Ok(()) => stats.base_files_dropped += rebuild.drop.len(),
                Err(reason) => {
                    tracing::warn!(
                        state = %name,
                        %reason,
                        "the base's column family was not rebuilt without the files another \
                         source provides; rewriting their key groups instead"
                    );
                    for plan in plans.iter_mut().filter(|p| p.name == *name) {
                        plan.state.keep_base();
                    }
                }
            }
        }
        for plan in &mut plans {
            let batch = ForeignFiles {
                cf: format!("{STATE_CF_PREFIX}{}", plan.name),
                files: plan.state.link.clone(),
            };
            match surgery.ingest(&batch)? {
                Ok(()) => stats.files_linked += plan.state.link.len(),
                Err(reason) => {
                    // Fallback: the whole state is rewritten from the source's merged view.
                    tracing::warn!(
                        state = %plan.name,
                        source = others[plan.source].name,
                        %reason,
                        "RocksDB refused ingesting the source's SST files as they are; rewriting them"
                    );
                    stats.refused += 1;
                    plan.state.link.clear();
                    plan.state.rewrite = vec![plan.copy];
                }
            }
        }
        drop(surgery);
        Db::open_for_restore(base.dir, target.options, target.budget, layout)?
    } else {
        db
    };

    // 3d. The fallback: rewrite the key groups no linked file brings, per state and source,
    //     cut into up to `threads` slices scanned into SSTs in parallel; each (state, source)
    //     is ingested in one call.
    let mut jobs: Vec<(usize, Cf, KeyGroupRange, PathBuf, BlockSizing)> = Vec::new();
    for (p, plan) in plans.iter().enumerate() {
        let other = &others[plan.source];
        let src = state_cf(&opened[plan.source], other, &plan.name)?;
        // A list's runs keep the shared block size, as its column family does.
        let sizing = match states.get(&plan.name).map(|st| st.kind) {
            Some(StateKind::List) | None => BlockSizing::Shared,
            Some(_) => BlockSizing::FromEntries,
        };
        for range in &plan.state.rewrite {
            for slice in split(*range, target.threads) {
                let file = target
                    .scratch
                    .join(format!("ingest-{}-{p}-{}.sst", plan.source, slice.start));
                jobs.push((p, src.clone(), slice, file, sizing));
            }
        }
    }
    let counts = run_parallel(&jobs, target.threads, |(_, src, slice, file, sizing)| {
        let from = group_prefix(u32::from(slice.start), m);
        let to = group_prefix(u32::from(slice.end) + 1, m);
        db.write_sst(file, *sizing, |sink| {
            // Hides what the base holds in the slice (see `plan_state`); not this file's own
            // entries.
            sink.delete_range(&from, &to)?;
            src.scan_bulk(&from, Some(&to), |k, v| {
                sink.put(k, v)?;
                Ok(true)
            })
        })
    })?;
    let mut by_plan: BTreeMap<usize, Vec<PathBuf>> = BTreeMap::new();
    // Slices the source has no entries in: their SST would hold only the range tombstone,
    // which RocksDB marks for compaction (see step 4), so the tombstone goes through the
    // memtable after the ingestions instead (still newer than every linked file).
    let mut empty: Vec<(usize, KeyGroupRange)> = Vec::new();
    for ((p, _, slice, file, _), n) in jobs.iter().zip(counts) {
        match n {
            Some(0) => {
                let _ = std::fs::remove_file(file);
                empty.push((*p, *slice));
            }
            Some(n) => {
                by_plan.entry(*p).or_default().push(file.clone());
                stats.entries_rewritten += n;
                stats.files_rewritten += 1;
            }
            None => {}
        }
    }
    // Opened before the ingestions move them (see `Db::warm_restored`).
    let warm = db.open_for_warming(by_plan.values().flatten());
    for (p, files) in &by_plan {
        let dst = state_cf(&db, base, &plans[*p].name)?;
        dst.ingest(files)?;
    }
    db.warm_restored(warm);
    for (p, slice) in &empty {
        let dst = state_cf(&db, base, &plans[*p].name)?;
        let to = group_prefix(u32::from(slice.end) + 1, m);
        dst.delete_range(&group_prefix(u32::from(slice.start), m), &to)?;
    }
    drop(jobs);
    drop(opened);

    // 4. Clip the base, after every ingestion. (Through the memtable: an ingested SST holding
    //    only one range tombstone is marked for compaction by RocksDB, which would rewrite the
    //    restored files the first checkpoint is meant to reuse.) A clipped range no file of
    //    the state touches any more (step 2 dropped every file there, as with
    //    `key_group_files`) and no memtable entry may lie in gets no tombstone: it would hide
    //    nothing, but a later merge of this backend's files would have to rewrite the range
    //    it covers instead of linking (docs/rescale.md, "Where linking cannot help").
    for state in base_states.values() {
        let cf = state_cf(&db, base, &state.name)?;
        let files = cf.live_files()?;
        let memtables_empty = cf.memtables_empty()?;
        for (from, to) in &clips {
            let touched = files
                .iter()
                .any(|f| f.smallest.as_slice() < to.as_slice() && f.largest >= *from);
            if touched || !memtables_empty {
                cf.delete_range(from, to)?;
            } else {
                stats.clips_without_tombstone += 1;
            }
        }
    }
    if target.compact_clipped {
        db.flush_all()?;
        for state in base_states.values() {
            let cf = state_cf(&db, base, &state.name)?;
            for (from, to) in &clips {
                cf.compact_range(from, to)?;
            }
        }
    }

    // 5. Metadata for the new range.
    let meta = db.default_cf()?;
    let backend_meta = BackendMeta {
        version: BACKEND_META_VERSION,
        max_parallelism: m,
        key_groups: target.key_groups,
    };
    meta.put(
        META_BACKEND,
        &codec::encode(&backend_meta, "backend metadata")?,
    )?;
    meta.put(META_LIST_SEQ, &list_seq.to_be_bytes())?;
    if watermark > 0 {
        meta.put(META_WATERMARK, &watermark.to_be_bytes())?;
    }
    for (name, mark) in &marks {
        match mark {
            Some(mark) => meta.put(&ttl_floor_key(name), &mark.encode())?,
            None => meta.delete(&ttl_floor_key(name))?,
        }
    }
    Ok((stats, db))
}

/// The parts of `claimed` outside `target`, as key-prefix ranges `[from, to)`: what a
/// rescale of a base claiming `claimed` drops and clips.
fn clip_ranges(claimed: KeyGroupRange, target: KeyGroupRange, m: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
    [
        (
            claimed.start,
            target.start.min(claimed.end.saturating_add(1)),
        ),
        (
            target.end.saturating_add(1).max(claimed.start),
            claimed.end.saturating_add(1),
        ),
    ]
    .into_iter()
    .filter(|(from, to)| from < to)
    .map(|(from, to)| {
        (
            group_prefix(u32::from(from), m),
            group_prefix(u32::from(to), m),
        )
    })
    .collect()
}

/// The SSTs of `base` (a manifest chosen as a rescale's source for `target`, the base or
/// another) that need not be downloaded: keyed-state files (manifest version 2 records their
/// key range) at L1 or deeper whose keys lie wholly inside one clipped range
/// ([`clip_ranges`], the end inclusive as RocksDB's `DeleteFilesInRange` takes it), so
/// wholly outside the target. Every source's such files are dropped ([`drop_skipped`]) before
/// anything reads it, unless RocksDB is compacting one or its range's edge is not a clean
/// cut; those are downloaded late ([`Target::fetch_late`]). Empty for a plain restore (no
/// clipped range) and for version-1 manifests (no ranges).
pub(crate) fn skippable(base: &CheckpointManifest, target: KeyGroupRange) -> Result<Vec<String>> {
    let claimed = KeyGroupRange::new(base.key_group_start, base.key_group_end)?;
    let clips = clip_ranges(claimed, target, base.max_parallelism);
    Ok(base
        .shared_files
        .iter()
        .filter(|f| {
            f.key_range.as_ref().is_some_and(|r| {
                r.level >= 1
                    && clips
                        .iter()
                        .any(|(from, to)| r.smallest >= *from && r.largest <= *to)
            })
        })
        .map(|f| f.local_name.clone())
        .collect())
}

/// Drops a source's `skipped` SSTs (and every other file wholly outside the target) before
/// anything else opens it: what [`rescale`] does first for the base, and what the restore does
/// for every other source with skipped files and for a source whose log is replayed. Returns
/// the skipped files RocksDB kept, downloaded after all (local name, size); the source is
/// then taken with nothing skipped.
pub(crate) fn drop_skipped(source: &Source<'_>, target: &Target<'_>) -> Result<Vec<(String, u64)>> {
    let m = target.max_parallelism;
    let clips = clip_ranges(claimed_range(source)?, target.key_groups, m);
    drop_skipped_files(
        source,
        target,
        Some(KeyLayout::new(m, target.key_groups)),
        &clips,
    )
}

/// Opens a source whose `skipped` SSTs were not downloaded with RocksDB's `paranoid_checks`
/// off (which tolerates the missing files), drops the files wholly inside `clips` from every
/// state column family before anything reads it, fetches the skipped files RocksDB kept
/// (being compacted, or not a clean cut) and closes it; returns those (local name, size).
/// The caller opens it again with every check on: a database left open with
/// `paranoid_checks` off would go on ignoring background errors.
fn drop_skipped_files(
    source: &Source<'_>,
    target: &Target<'_>,
    layout: Option<KeyLayout>,
    clips: &[(Vec<u8>, Vec<u8>)],
) -> Result<Vec<(String, u64)>> {
    let db = Db::open_missing_files(source.dir, target.options, target.budget, layout)?;
    let mut live = std::collections::HashSet::new();
    for name in db.cf_names()? {
        let Some(cf) = db.cf(&name)? else {
            continue;
        };
        if name.starts_with(STATE_CF_PREFIX) {
            for (from, to) in clips {
                cf.drop_files_in_range(from, to)?;
            }
        }
        for f in cf.live_files()? {
            if let Some(file) = f.path.file_name().and_then(|n| n.to_str()) {
                live.insert(file.to_string());
            }
        }
    }
    db.close()?;
    drop(db);
    let late: Vec<String> = source
        .skipped
        .iter()
        .filter(|n| live.contains(n.as_str()))
        .cloned()
        .collect();
    if late.is_empty() {
        return Ok(Vec::new());
    }
    tracing::warn!(
        files = ?late,
        checkpoint = source.name,
        "RocksDB kept SST files outside the target that were not downloaded; fetching them"
    );
    (target.fetch_late)(source.manifest, source.dir, &late)?;
    Ok(late
        .into_iter()
        .map(|name| {
            let size = source
                .manifest
                .shared_files
                .iter()
                .find(|f| f.local_name == name)
                .map_or(0, |f| f.size);
            (name, size)
        })
        .collect())
}

/// A live SST file with what its properties say about it.
struct FileFacts {
    file: LiveSst,
    /// Its SST unique id (`None` if unreadable, which only makes it count as not shared).
    id: Option<SstUniqueId>,
    /// Whether it may be ingested into another database as it is ([`ingestible_as_is`]).
    linkable: bool,
}

/// The live files of a column family that pass `keep`, with their properties' facts.
fn with_facts(cf: &Cf, keep: impl Fn(&LiveSst) -> bool) -> Result<Vec<FileFacts>> {
    Ok(cf
        .live_files()?
        .into_iter()
        .filter(|f| keep(f))
        .map(|file| {
            let meta = sst_format::read_sst_meta(&file.path).ok();
            FileFacts {
                linkable: meta.as_ref().is_some_and(ingestible_as_is),
                id: meta.map(|m| m.unique_id),
                file,
            }
        })
        .collect())
}

/// RocksDB's last level (its default of 7 levels, which rockstate keeps).
const LAST_LEVEL: i32 = 6;

/// Whether an SST with metadata `meta` reads the same after RocksDB ingests it as it is into another
/// column family, its sequence numbers kept (`allow_db_generated_files`):
/// * RocksDB wrote it (a flush or compaction): a file an `SstFileWriter` wrote (an earlier
///   rescale's rewrite, a changelog restore's log table) holds sequence number 0 in every
///   entry and got its real one from the database that ingested it; ingested again, its
///   entries would be older than anything else there;
/// * it holds no range tombstone: a compaction that cuts a range tombstone across several
///   output files stores it whole in each and narrows only the key range the MANIFEST
///   records; an ingestion takes the range from the file's contents, so the siblings come
///   back overlapping, a tombstone above newer entries of another sibling, and those
///   entries are lost.
///
/// (An unreadable file is neither: callers read `meta` and count a failure as `false`.)
fn ingestible_as_is(meta: &sst_format::SstMeta) -> bool {
    meta.properties.external_sst_file_version.is_none() && meta.properties.num_range_deletions == 0
}

/// How one state of one source gets into the base, as [`plan_state`] found it.
struct StatePlan {
    /// Files ingested as they are, in ingestion order.
    link: Vec<PathBuf>,
    /// Key groups rewritten by the fallback, disjoint and ascending.
    rewrite: Vec<KeyGroupRange>,
    /// Files of the base that `link` and `rewrite` assume gone (the base's column family is
    /// rebuilt without them, [`db::FileSurgery::rebuild`]); empty when none are.
    drop: Vec<PathBuf>,
    /// `link` and `rewrite` if the files of `drop` stay after all; `None` when `drop` is
    /// empty.
    if_kept: Option<(Vec<PathBuf>, Vec<KeyGroupRange>)>,
}

impl StatePlan {
    /// Plans as if the base kept every file.
    fn keep_base(&mut self) {
        if let Some((link, rewrite)) = self.if_kept.take() {
            (self.link, self.rewrite) = (link, rewrite);
            self.drop.clear();
        }
    }
}

/// How `src`'s data for the key groups `copy` gets into `dst` (see the module docs): the files
/// to ingest as they are, the key groups the fallback rewrites, and files of `dst` to drop.
///
/// `dst` has already lost its files entirely inside `copy` that RocksDB drops (L1 and deeper;
/// they held only dead entries and tombstones: the base's live keys are inside its own
/// claimed range). Of the rest:
/// * a source file with no key in `copy`, or one `dst` holds too (same SST unique id, e.g.
///   both came from one checkpoint before an earlier split), needs nothing: `dst` has the
///   same entries, and the source's own newer files lie on top of it in both;
/// * a source file inside `copy` that overlaps no file of `dst` and RocksDB wrote itself
///   ([`FileFacts::linkable`]) is ingested as it is;
/// * any other source file overlapping `copy`, and any file of `dst` overlapping `copy` that
///   the source does not hold (its entries there are not the source's view, e.g. the base's
///   clip tombstone of an earlier split), marks its key groups of `copy` for the rewrite.
///   The rewrite's range tombstone hides whatever `dst` then holds there, linked files
///   included, and its entries are the source's merged view.
///
/// A file of `dst` entirely inside `copy` that the source does not hold and RocksDB did not
/// drop (level 0 above all: typically the clip tombstone an earlier split flushed) holds only
/// dead entries and tombstones over them, like those dropped before. Without it, what `dst`
/// shows in `copy` comes from files the source holds as well, which need nothing, and from
/// files it does not hold, whose key groups are rewritten as above. So the plan drops such
/// files when that marks fewer key groups for the rewrite than keeping them, and says what
/// to do if they stay after all.
fn plan_state(dst: &Cf, src: &Cf, copy: KeyGroupRange, m: u32) -> Result<StatePlan> {
    if !src.memtables_empty()? {
        // Fallback: data only in the source's memtables (a replayed WAL) is in no file.
        return Ok(StatePlan {
            link: Vec::new(),
            rewrite: vec![copy],
            drop: Vec::new(),
            if_kept: None,
        });
    }
    let lo = group_prefix(u32::from(copy.start), m);
    let hi = group_prefix(u32::from(copy.end) + 1, m);
    // Key ranges are closed, except that a largest key equal to a bare key-group prefix can
    // only be a range tombstone's exclusive end (stored keys are longer than their prefix).
    let touches_copy = |f: &LiveSst| f.largest > lo && f.smallest < hi;
    // Only files touching `copy` matter (a file both hold has one key range in both).
    let files = with_facts(src, touches_copy)?;
    let existing = with_facts(dst, touches_copy)?;
    let (droppable, stay): (Vec<&FileFacts>, Vec<&FileFacts>) = existing
        .iter()
        .partition(|e| e.file.smallest >= lo && e.file.largest <= hi && !held(&e.id, &files));
    let all: Vec<&FileFacts> = existing.iter().collect();
    let (link, rewrite) = decide(&files, &all, copy, m);
    let keeping = StatePlan {
        link,
        rewrite,
        drop: Vec::new(),
        if_kept: None,
    };
    if droppable.is_empty() {
        return Ok(keeping);
    }
    let (link, rewrite) = decide(&files, &stay, copy, m);
    if groups(&rewrite) >= groups(&keeping.rewrite) {
        return Ok(keeping);
    }
    Ok(StatePlan {
        link,
        rewrite,
        drop: droppable.iter().map(|e| e.file.path.clone()).collect(),
        if_kept: Some((keeping.link, keeping.rewrite)),
    })
}

/// Whether a file with SST unique id `id` is among `set`.
fn held(id: &Option<SstUniqueId>, set: &[FileFacts]) -> bool {
    id.as_ref()
        .is_some_and(|id| set.iter().any(|other| other.id.as_ref() == Some(id)))
}

/// Key groups in `ranges`.
fn groups(ranges: &[KeyGroupRange]) -> u64 {
    ranges.iter().map(|r| u64::from(r.len())).sum()
}

/// [`plan_state`]'s rules for the source's `files` touching `copy` over the base's files
/// `existing` touching it: the files to link and the key groups to rewrite.
fn decide(
    files: &[FileFacts],
    existing: &[&FileFacts],
    copy: KeyGroupRange,
    m: u32,
) -> (Vec<PathBuf>, Vec<KeyGroupRange>) {
    let lo = group_prefix(u32::from(copy.start), m);
    let hi = group_prefix(u32::from(copy.end) + 1, m);
    let overlap = |a: &LiveSst, b: &LiveSst| a.smallest <= b.largest && b.smallest <= a.largest;
    let base_holds = |id: &Option<SstUniqueId>| {
        id.as_ref()
            .is_some_and(|id| existing.iter().any(|e| e.id.as_ref() == Some(id)))
    };
    let mut link = Vec::new();
    let mut marked: Vec<&LiveSst> = Vec::new();
    for FileFacts {
        file: f,
        id,
        linkable,
    } in files
    {
        if base_holds(id) {
            continue;
        }
        let inside = f.smallest >= lo && f.largest < hi;
        if *linkable && inside && !existing.iter().any(|e| overlap(f, &e.file)) {
            link.push(f.path.clone());
        } else {
            marked.push(f);
        }
    }
    marked.extend(
        existing
            .iter()
            .filter(|e| !held(&e.id, files))
            .map(|e| &e.file),
    );
    // The key groups of `copy` the marked files touch (widened where a bound has no prefix).
    let mut rewrite: Vec<KeyGroupRange> = marked
        .iter()
        .filter_map(|f| {
            let start = if f.smallest < lo {
                copy.start
            } else {
                keygroup::read_prefix(&f.smallest, m).unwrap_or(copy.start)
            };
            let end = if f.largest >= hi {
                copy.end
            } else {
                keygroup::read_prefix(&f.largest, m).unwrap_or(copy.end)
            };
            KeyGroupRange::new(start.max(copy.start), end.min(copy.end)).ok()
        })
        .collect();
    rewrite.sort_by_key(|r| r.start);
    let mut merged: Vec<KeyGroupRange> = Vec::with_capacity(rewrite.len());
    for r in rewrite {
        match merged.last_mut() {
            Some(last) if u32::from(r.start) <= u32::from(last.end) + 1 => {
                last.end = last.end.max(r.end)
            }
            _ => merged.push(r),
        }
    }
    (link, merged)
}

/// `range` cut into at most `parts` contiguous, non-empty slices, in order.
fn split(range: KeyGroupRange, parts: usize) -> Vec<KeyGroupRange> {
    let len = range.len() as usize;
    let parts = parts.clamp(1, len.max(1));
    let mut out = Vec::with_capacity(parts);
    let mut start = usize::from(range.start);
    for p in 0..parts {
        let n = len / parts + usize::from(p < len % parts);
        // `start + n - 1 <= range.end`, a u16, by construction.
        out.push(KeyGroupRange {
            start: start as u16,
            end: (start + n - 1) as u16,
        });
        start += n;
    }
    out
}

fn corrupt(src: &Source<'_>, detail: impl Into<String>) -> Error {
    Error::CheckpointCorrupt {
        file: src.name.to_string(),
        detail: detail.into(),
    }
}

fn claimed_range(src: &Source<'_>) -> Result<KeyGroupRange> {
    KeyGroupRange::new(src.manifest.key_group_start, src.manifest.key_group_end)
        .map_err(|e| corrupt(src, format!("bad key-group range: {e}")))
}

fn state_cf(db: &Arc<Db>, src: &Source<'_>, name: &str) -> Result<Cf> {
    db.cf(&format!("{STATE_CF_PREFIX}{name}"))?
        .ok_or_else(|| corrupt(src, format!("state `{name}` has no column family")))
}

/// The timestamp mark of TTL list state `name` in a source's metadata (`None` when absent).
fn read_ttl_mark(meta: Cf, name: &str) -> Result<Option<TtlMark>> {
    crate::meta::read_ttl_mark(&crate::store::Table::Rocks(meta), &ttl_floor_key(name))
}

/// Step 1: checks a freshly opened source against its manifest; returns its states by name.
/// The data check comes first, so data outside the claimed range is reported as such even
/// when the stored backend metadata disagrees with the manifest too.
fn check_source(
    db: &Arc<Db>,
    src: &Source<'_>,
    max_parallelism: u32,
) -> Result<BTreeMap<String, StateMeta>> {
    let meta = db.default_cf()?;
    let claimed = claimed_range(src)?;
    if src.manifest.max_parallelism != max_parallelism {
        return Err(corrupt(
            src,
            format!(
                "max parallelism {} differs from the restore's {max_parallelism}",
                src.manifest.max_parallelism
            ),
        ));
    }
    let below = group_prefix(u32::from(claimed.start), max_parallelism);
    let above = group_prefix(u32::from(claimed.end) + 1, max_parallelism);
    for cf_name in db.cf_names()? {
        let Some(name) = cf_name.strip_prefix(STATE_CF_PREFIX) else {
            continue;
        };
        let cf = state_cf(db, src, name)?;
        // Where no file (and no memtable) reaches outside the claimed range, no key lies
        // there, and no seek is needed: a seek opens the first file it lands on, which a
        // source opened without its skipped files may not have.
        let files = cf.live_files()?;
        let memtables_empty = cf.memtables_empty()?;
        let reaches_below = !memtables_empty || files.iter().any(|f| f.smallest < below);
        let reaches_above = !memtables_empty || files.iter().any(|f| f.largest >= above);
        let mut outside = None;
        if reaches_below {
            outside = first_key(&cf, &[], Some(&below))?;
        }
        if outside.is_none() && reaches_above {
            outside = first_key(&cf, &above, None)?;
        }
        if let Some(key) = outside {
            let key_group = keygroup::read_prefix(&key, max_parallelism)
                .map_err(|_| corrupt(src, format!("state `{name}` has a key without prefix")))?;
            return Err(Error::DataOutsideKeyGroups {
                checkpoint: src.name.to_string(),
                state: name.to_string(),
                key_group,
                claimed_start: claimed.start,
                claimed_end: claimed.end,
            });
        }
    }
    let stored: BackendMeta = meta
        .get_with(META_BACKEND, |b| codec::decode(b, "backend metadata"))?
        .transpose()?
        .ok_or_else(|| corrupt(src, "database has no backend metadata"))?;
    if stored.max_parallelism != max_parallelism || stored.key_groups != claimed {
        return Err(corrupt(
            src,
            format!(
                "database holds key groups {} of max parallelism {}, manifest says {claimed} of {max_parallelism}",
                stored.key_groups, stored.max_parallelism
            ),
        ));
    }
    let mut states = BTreeMap::new();
    let p = META_STATE_PREFIX.as_bytes();
    meta.scan(p, codec::prefix_end(p).as_deref(), |_, v| {
        let s: StateMeta = codec::decode(v, "state metadata")?;
        states.insert(s.name.clone(), s);
        Ok(true)
    })?;
    let mut want: Vec<&StateMeta> = src.manifest.states.iter().collect();
    want.sort_by(|a, b| a.name.cmp(&b.name));
    if !states.values().eq(want.iter().copied()) {
        return Err(corrupt(
            src,
            "the manifest's state list differs from the database's",
        ));
    }
    Ok(states)
}

/// The first live key in `[lower, upper)`.
fn first_key(cf: &Cf, lower: &[u8], upper: Option<&[u8]>) -> Result<Option<Vec<u8>>> {
    let mut found = None;
    cf.scan(lower, upper, |k, _| {
        found = Some(k.to_vec());
        Ok(false)
    })?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers_the_range_in_order() {
        for (start, end, parts) in [(0u16, 127u16, 4usize), (43, 63, 4), (5, 5, 8), (0, 2, 3)] {
            let r = KeyGroupRange { start, end };
            let s = split(r, parts);
            assert!(s.len() <= parts && !s.is_empty());
            assert_eq!(s[0].start, start);
            assert_eq!(s[s.len() - 1].end, end);
            for w in s.windows(2) {
                assert_eq!(w[0].end + 1, w[1].start);
            }
            assert!(s.iter().all(|x| x.start <= x.end));
        }
    }

    /// Only a file RocksDB wrote without a range tombstone is ingested as it is: a flush of
    /// puts is; a flush holding a range deletion is not, nor a file an `SstFileWriter` wrote.
    #[test]
    fn only_rocksdb_written_files_without_range_tombstones_are_ingestible_as_is() {
        use crate::options::MemoryBudgetConfig;
        let dir = tempfile::tempdir().unwrap();
        let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
        let db = Db::open(&dir.path().join("db"), &DbOptions::default(), &budget, None).unwrap();
        let cf = db.create_cf("s").unwrap();
        let flushed = |f: &dyn Fn(&Cf)| {
            let before: Vec<PathBuf> = cf
                .live_files()
                .unwrap()
                .into_iter()
                .map(|f| f.path)
                .collect();
            f(&cf);
            db.flush_all().unwrap();
            let mut new: Vec<PathBuf> = cf
                .live_files()
                .unwrap()
                .into_iter()
                .map(|f| f.path)
                .filter(|p| !before.contains(p))
                .collect();
            assert_eq!(new.len(), 1);
            new.remove(0)
        };
        let puts = flushed(&|cf| cf.put(b"a1", b"x").unwrap());
        let ingestible = |p: &Path| ingestible_as_is(&sst_format::read_sst_meta(p).unwrap());
        assert!(ingestible(&puts));
        let tombstone = flushed(&|cf| {
            cf.put(b"b1", b"y").unwrap();
            cf.delete_range(b"c", b"d").unwrap();
        });
        assert!(!ingestible(&tombstone));
        let written = dir.path().join("written.sst");
        db.write_sst(&written, BlockSizing::Shared, |sink| sink.put(b"e1", b"z"))
            .unwrap();
        assert!(!ingestible(&written));
    }
}

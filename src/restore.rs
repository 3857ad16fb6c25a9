//! Restore (docs/checkpoint-format.md §7): pick the manifests, check them against what the
//! builder asks for, download every file in parallel, verify each one (size, CRC-32, and for
//! SSTs the footer, properties and unique id) and only then open RocksDB. Any mismatch is a
//! typed error naming the file; nothing is opened from unverified bytes, and a failed restore
//! removes what it downloaded.
//!
//! Rescaling (another key-group range of the same max parallelism) plugs in between download
//! and open: [`select`] takes every committed manifest of one checkpoint id that overlaps the
//! target range (they must be disjoint and cover it), the one with the most overlap becomes
//! the base (downloaded into the target directory), the others go to a scratch directory next
//! to it, and `crate::rescale` clips the base and ingests the others' in-range key groups.
//! A manifest whose range equals the target is restored as is. The base's files stay the
//! restored backend's reuse base, so its first checkpoint is incremental.
//! `docs/rescale.md` describes the whole procedure.
//!
//! Protection and crash safety (`docs/ownership.md` §5): before reading anything, a restore
//! puts a pin `pins/<id>/…` on the checkpoint it reads, which every owner's garbage pass
//! honours, and deletes it when it ends (a pin of a restore that died is swept once older
//! than the sweep's minimum age). The target directory carries a marker from the first byte
//! written until the restored database is open and every file is durable; a directory with
//! the marker is never opened as a backend, and a new restore into it starts over.
//!
//! This module owns selection, verification and download.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sst_format::{CheckpointManifest, SstUniqueId};

use crate::catalog::{check_digest, decode_manifest_named, named_fetch_error};
use crate::checkpoint::local_recovery::{LocalSource, RestoreReport};
use crate::checkpoint::owner::{newest_record, read_record, record_ids};
use crate::checkpoint::registry::{list_committed, RestoredBase};
use crate::checkpoint::{to_manifest_state, RestoreFrom};
use crate::clock::Clock;
use crate::db::{Db, KeyLayout, MemoryBudget};
use crate::error::{Error, Result};
use crate::keygroup::{self, KeyGroupRange};
use crate::layout;
use crate::options::DbOptions;
use crate::parallel::run_parallel;
use crate::rescale;
use crate::shared_fetch::{FileKey, Placed, SharedFetches};
use crate::state::StateMeta;
use crate::storage::{sync_dir, validate_object_name, CheckpointStorage};

/// A chosen manifest: its object name and contents.
type Chosen = (String, CheckpointManifest);

/// The manifests a restore takes, base first, and the local copies (backend id, copy id) every
/// manifest of the restored cut reads when it is restored on this machine, where the whole
/// cut is known (a job record, or every manifest of an id without one): a restore of one
/// task retires no copy a sibling restoring the same cut takes its files from.
struct Selection {
    chosen: Vec<Chosen>,
    cut_copies: Option<Vec<(String, u64)>>,
}

/// The local copy a restore of `m` on this machine takes files from: the backend's copy of the
/// checkpoint, or of its materialization (changelog mode: a log checkpoint's files are its
/// materialization's).
fn copy_of(m: &CheckpointManifest) -> (String, u64) {
    let id = m
        .changelog
        .as_ref()
        .map_or(m.checkpoint_id, |c| c.materialization_id);
    (m.backend_id.clone(), id)
}

/// [`choose`] over the whole cut `all`, keeping the cut's local copies.
fn choose_in_cut(
    id: u64,
    all: Vec<Chosen>,
    target: KeyGroupRange,
    max_parallelism: u32,
) -> Result<Option<Selection>> {
    let cut_copies = all.iter().map(|(_, m)| copy_of(m)).collect();
    Ok(
        choose(id, all, target, max_parallelism)?.map(|chosen| Selection {
            chosen,
            cut_copies: Some(cut_copies),
        }),
    )
}

/// Name of the marker file an unfinished restore leaves in its target directory.
const RESTORE_MARKER: &str = ".rockstate-restore-incomplete";

/// Name of the directory inside the target that holds a restore's scratch space while it
/// runs (removed before the backend opens).
const RESTORE_SCRATCH: &str = ".rockstate-restore-scratch";

/// The marker of an unfinished restore into `dir`.
pub(crate) fn restore_marker(dir: &Path) -> PathBuf {
    dir.join(RESTORE_MARKER)
}

/// Puts the restore marker into `dir`, durably: from here on `dir` is never opened as a
/// backend until [`unmark_restore`].
pub(crate) fn mark_restore(dir: &Path) -> Result<()> {
    let marker = restore_marker(dir);
    std::fs::File::create(&marker)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(&marker, e))?;
    sync_dir(dir)
}

/// Removes the restore marker from `dir`, durably (the restore's result is durable already).
pub(crate) fn unmark_restore(dir: &Path) -> Result<()> {
    let marker = restore_marker(dir);
    std::fs::remove_file(&marker).map_err(|e| Error::io(&marker, e))?;
    sync_dir(dir)
}

/// Prepares the target directory: missing or empty, or holding an unfinished restore (whose
/// leftovers are removed); then writes the marker durably.
fn prepare_target(target: &Path) -> Result<bool> {
    let existed = target.exists();
    if existed {
        let marker = restore_marker(target);
        let entries: Vec<_> = std::fs::read_dir(target)
            .map_err(|e| Error::io(target, e))?
            .collect::<std::io::Result<_>>()
            .map_err(|e| Error::io(target, e))?;
        if !entries.is_empty() && !marker.exists() {
            return Err(Error::RestoreTargetNotEmpty(target.to_path_buf()));
        }
        for e in entries {
            if e.path() != marker {
                let path = e.path();
                std::fs::remove_file(&path)
                    .or_else(|_| std::fs::remove_dir_all(&path))
                    .map_err(|err| Error::io(&path, err))?;
            }
        }
    } else {
        std::fs::create_dir_all(target).map_err(|e| Error::io(target, e))?;
    }
    mark_restore(target)?;
    Ok(existed)
}

/// Puts a pin on the checkpoint `from` names, then selects its manifests (so nothing is read
/// before the pin is in storage). `Latest` pins the newest job record's id and, if that
/// record is gone by the time it is read (a newer one subsumed it), tries again.
fn pin_and_select(
    storage: &dyn CheckpointStorage,
    from: &RestoreFrom,
    key_groups: KeyGroupRange,
    max_parallelism: u32,
    now_ms: &dyn Fn() -> u64,
) -> Result<(String, Selection)> {
    const ATTEMPTS: usize = 5;
    for attempt in 1..=ATTEMPTS {
        let (id, pinned_from) = match from {
            RestoreFrom::Latest => {
                let id = match newest_record(storage)? {
                    Some(r) => r.checkpoint_id,
                    // Only void records: the job completes checkpoints through records and
                    // none completed (the manifests in storage are attempts it abandoned).
                    None if !record_ids(storage)?.is_empty() => {
                        return Err(Error::CheckpointNotFound(
                            "no completed checkpoint: every job record in storage is void \
                             (an abandoned checkpoint's)"
                                .into(),
                        ))
                    }
                    // No job record at all: the newest manifests covering the range (an
                    // engine that keeps completion elsewhere; see `RestoreFrom::Latest`).
                    None => select(storage, from, key_groups, max_parallelism, false)?
                        .chosen
                        .first()
                        .map(|(_, m)| m.checkpoint_id)
                        .ok_or_else(|| Error::CheckpointNotFound("no checkpoint".into()))?,
                };
                (id, RestoreFrom::Checkpoint(id))
            }
            RestoreFrom::Checkpoint(id) => (*id, from.clone()),
            RestoreFrom::Exact { checkpoint_id, .. }
            | RestoreFrom::Handles { checkpoint_id, .. } => (*checkpoint_id, from.clone()),
        };
        let had_record = record_ids(storage)?.contains(&id);
        let pin = layout::new_pin_name(id, now_ms());
        storage.put_bytes(&pin, b"")?;
        // The record may have been deleted by a pass that listed before the pin landed: then
        // what it names may be going too.
        if had_record && !record_ids(storage)?.contains(&id) {
            let _ = storage.delete(&pin);
            if matches!(from, RestoreFrom::Latest) && attempt < ATTEMPTS {
                continue;
            }
            return Err(Error::CheckpointNotFound(format!(
                "checkpoint {id} was subsumed while the restore began"
            )));
        }
        // A checkpoint that had a record is restored from what the record names, or not at
        // all: the manifests of its id may include attempts the job never committed (a task
        // that failed over), which only a checkpoint without any record falls back to.
        match select(
            storage,
            &pinned_from,
            key_groups,
            max_parallelism,
            had_record,
        ) {
            Ok(chosen) => return Ok((pin, chosen)),
            Err(e) => {
                let _ = storage.delete(&pin);
                let raced = matches!(from, RestoreFrom::Latest)
                    && matches!(
                        e,
                        Error::CheckpointNotFound(_)
                            | Error::ObjectNotFound { .. }
                            | Error::CheckpointCorrupt { .. }
                    )
                    && newest_record(storage)?.map(|r| r.checkpoint_id) != Some(id);
                if !raced || attempt == ATTEMPTS {
                    return Err(e);
                }
            }
        }
    }
    Err(Error::CheckpointNotFound(
        "the newest checkpoint kept changing".into(),
    ))
}

/// What a restore needs from the builder of the backend it restores.
pub(crate) struct RestoreParams {
    pub(crate) path: PathBuf,
    pub(crate) max_parallelism: u32,
    pub(crate) key_groups: Option<KeyGroupRange>,
    pub(crate) storage: Option<Arc<dyn CheckpointStorage>>,
    pub(crate) source: Option<Arc<dyn CheckpointStorage>>,
    pub(crate) transfer_threads: usize,
    pub(crate) options: DbOptions,
    pub(crate) budget: Option<MemoryBudget>,
    pub(crate) compact_clipped: bool,
    pub(crate) staging_dir: Option<PathBuf>,
    pub(crate) local_recovery: bool,
    /// Changelog mode: the stored log bytes a replay holds at once.
    pub(crate) replay_batch_bytes: u64,
    pub(crate) clock: Arc<dyn Clock>,
    /// Shared SSTs fetched by this restore and the others of the process it shares with.
    pub(crate) shared_fetches: SharedFetches,
}

/// What a restore hands the backend it opens at the target directory.
pub(crate) struct Restored {
    /// The restored database, checked (and rebuilt by a rescale), open with the restore's
    /// options, memory budget and key layout, which are the backend's: it is used as it is,
    /// not closed and opened again.
    pub(crate) db: Arc<Db>,
    /// What it was restored from.
    pub(crate) base: RestoredBase,
}

/// Restores per `from` into `p.path`, then `open`s the backend there (given the open database
/// and what it was restored from; it returns the backend and its states' metadata, checked
/// against the manifests), reporting where the files came from (local recovery or the
/// store).
pub(crate) fn restore<T>(
    p: RestoreParams,
    from: RestoreFrom,
    open: impl FnOnce(Restored) -> Result<(T, Vec<StateMeta>)>,
) -> Result<(T, RestoreReport)> {
    let claim = p.source.is_none();
    let storage = match &p.source {
        Some(s) => Arc::clone(s),
        None => p.storage.clone().ok_or(Error::NoCheckpointStorage)?,
    };
    keygroup::validate_max_parallelism(p.max_parallelism)?;
    let key_groups = match p.key_groups {
        Some(r) => r,
        None => KeyGroupRange::all(p.max_parallelism)?,
    };
    let clock = Arc::clone(&p.clock);
    let (pin, selection) = pin_and_select(
        storage.as_ref(),
        &from,
        key_groups,
        p.max_parallelism,
        &|| clock.now_ms(),
    )?;
    let result = restore_pinned(open, &p, storage.as_ref(), key_groups, selection, claim);
    // The restored backend's owner keeps what it needs from here on (or the restore failed).
    let _ = storage.delete(&pin);
    result
}

fn restore_pinned<T>(
    open: impl FnOnce(Restored) -> Result<(T, Vec<StateMeta>)>,
    p: &RestoreParams,
    storage: &dyn CheckpointStorage,
    key_groups: KeyGroupRange,
    selection: Selection,
    claim: bool,
) -> Result<(T, RestoreReport)> {
    let Selection { chosen, cut_copies } = selection;
    for (name, m) in &chosen {
        validate_manifest(name, m)?;
    }

    let target = p.path.clone();
    let existed = prepare_target(&target)?;
    let mut chosen = chosen.into_iter().map(|(n, m)| (n, Arc::new(m)));
    let (metadata_name, manifest) = chosen.next().ok_or_else(|| {
        Error::CheckpointNotFound(format!("any checkpoint for key groups {key_groups}"))
    })?;
    let others: Vec<(String, Arc<CheckpointManifest>)> = chosen.collect();
    let rescaling = !others.is_empty()
        || (manifest.key_group_start, manifest.key_group_end) != (key_groups.start, key_groups.end);
    // Local recovery: verified files of a checkpoint this machine took are used before
    // anything is downloaded (docs/checkpoint-format.md §10).
    let staging_root = p
        .staging_dir
        .clone()
        .unwrap_or_else(|| layout::default_staging_root(&target));
    let local_of = |m: &CheckpointManifest| {
        let (backend, id) = copy_of(m);
        LocalSource::find(&staging_root, &backend, id)
    };
    // The sources' local copies, found also with local recovery off: read only with it on,
    // and retired after the restore either way (a backend that kept copies before local
    // recovery was switched off would keep them forever), the restored one only at the
    // restored backend's first completed checkpoint when local recovery is on.
    let found: Vec<Option<LocalSource>> = std::iter::once(&manifest)
        .chain(others.iter().map(|(_, m)| m))
        .map(|m| local_of(m))
        .collect();
    let locals: Vec<Option<&LocalSource>> = found
        .iter()
        .map(|l| l.as_ref().filter(|_| p.local_recovery))
        .collect();
    let mut report = RestoreReport {
        checkpoint: metadata_name.clone(),
        ..RestoreReport::default()
    };
    let result = (|| {
        // Scratch space (sources other than the base, the rescale's and the log's SST files)
        // lies inside the target, so ingestion moves files by hard link, and whatever a
        // restore killed midway leaves there is part of its unfinished target, which the
        // next restore into it clears (`prepare_target`).
        let scratch_root = target.join(RESTORE_SCRATCH);
        std::fs::create_dir(&scratch_root).map_err(|e| Error::io(&scratch_root, e))?;
        let scratch = if rescaling {
            Some(
                tempfile::Builder::new()
                    .prefix("rescale-")
                    .tempdir_in(&scratch_root)
                    .map_err(|e| Error::io(&scratch_root, e))?,
            )
        } else {
            None
        };
        // The base's SSTs wholly outside the target are not downloaded (manifest version 2
        // records their key ranges); the rescale drops them unread (before the base's log,
        // if any, is replayed onto it).
        let skipped = if rescaling {
            rescale::skippable(&manifest, key_groups)?
        } else {
            Vec::new()
        };
        let mut dirs: Vec<Fetching<'_>> =
            vec![(&manifest, target.clone(), locals[0], skipped.as_slice())];
        // So are the other sources': they are only ever read inside the target (or, with a
        // log to replay, lose those files first, as the base does).
        let others_skipped: Vec<Vec<String>> = others
            .iter()
            .map(|(_, m)| rescale::skippable(m, key_groups))
            .collect::<Result<_>>()?;
        if let Some(s) = &scratch {
            for (i, (_, m)) in others.iter().enumerate() {
                let dir = s.path().join(format!("source-{i}"));
                std::fs::create_dir(&dir).map_err(|e| Error::io(&dir, e))?;
                dirs.push((m, dir, locals[i + 1], others_skipped[i].as_slice()));
            }
        }
        let budget = match &p.budget {
            Some(b) => b.clone(),
            None => MemoryBudget::process_default()?,
        };
        // Changelog mode: each source's log after its materialization is fetched, sorted and
        // written into SST files while the materializations download (`crate::replay`). A
        // plain restore with a log to apply opens its database as soon as the files are in,
        // while the log may still be in preparation (its private files read first: the open
        // writes a new MANIFEST), and the log goes onto the database the backend gets. The
        // backend's new identity is ingested with the log's tables, or after its batches if
        // it has any, above everything in the metadata column family: the restore then
        // changes the database only by ingestion, which needs no flush, while a flush could
        // wait until compactions took the level-0 files the ingestion added below RocksDB's
        // write-slowdown count.
        let open_early = !rescaling
            && manifest
                .changelog
                .as_ref()
                .is_some_and(|c| !c.segments.is_empty());
        let (counts, early, prepared) = std::thread::scope(|scope| {
            // The identity SST is written (and synced) beside the download, off its path.
            let identity = match open_early {
                true => Some(crate::parallel::beside(scope, || {
                    let file = scratch_root.join("identity.sst");
                    let id = crate::checkpoint::identity_sst(&p.options, &budget, &file)?;
                    Ok::<_, Error>((id, file))
                })),
                false => None,
            };
            let download = crate::parallel::beside(scope, || {
                let counts = download_all(storage, &dirs, p.transfer_threads, &p.shared_fetches)?;
                let Some(identity) = identity else {
                    return Ok((counts, None));
                };
                let identity = identity
                    .join()
                    .map_err(|_| Error::Internal("the identity thread panicked".into()))??;
                let private = read_private(&manifest, &target)?;
                let layout = KeyLayout::new(p.max_parallelism, key_groups);
                // At most every SST of the materialization and one file per log table in a
                // column family's level 0: its stall triggers start above that, so the
                // ingestion does not slow the restored backend's first writes down.
                let level0 = manifest.shared_files.len()
                    + manifest.changelog.as_ref().map_or(0, |c| c.tables.len());
                let db =
                    Db::open_restored(&target, &p.options, &budget, Some(layout), level0 as u64)?;
                Ok::<_, Error>((counts, Some((private, db, identity))))
            });
            let names = std::iter::once(&metadata_name).chain(others.iter().map(|(n, _)| n));
            let prepared: Result<Vec<Option<crate::replay::Prepared>>> = names
                .zip(&dirs)
                .map(|(name, (m, _, _, _))| {
                    crate::replay::prepare(
                        storage,
                        name,
                        m,
                        &scratch_root,
                        key_groups,
                        &p.options,
                        &budget,
                        p.transfer_threads,
                        p.replay_batch_bytes,
                    )
                })
                .collect();
            let downloaded = download
                .join()
                .map_err(|_| Error::Internal("the download thread panicked".into()))?;
            let (counts, early) = downloaded?;
            Ok::<_, Error>((counts, early, prepared?))
        })?;
        let (mut log_private, base_db, identity_file) = match early {
            Some((private, db, identity)) => (Some(private), Some(db), Some(identity)),
            None => (None, None, None),
        };
        let mut identity = None;
        (report.files_skipped, report.bytes_skipped) = counts.skipped;
        // If a manifest left storage while it was read (an owner that did not see the pin
        // yet), its files may be gone too: restore them, but reuse none of them.
        let mut reusable = claim;
        for name in std::iter::once(&metadata_name).chain(others.iter().map(|(n, _)| n)) {
            if !storage.exists(name)? {
                reusable = false;
            }
        }
        (report.files_local, report.bytes_local) = counts.local;
        (report.files_downloaded, report.bytes_downloaded) = counts.downloaded;
        (report.files_shared, report.bytes_shared) = counts.shared;
        let db = {
            // A plain restore of a changelog-mode checkpoint keeps its private files, read
            // before anything opens the database, so the restored backend's log checkpoints
            // continue on its materialization.
            if !rescaling && manifest.changelog.is_some() && log_private.is_none() {
                log_private = Some(read_private(&manifest, &target)?);
            }
            let mut base = rescale::Source {
                name: &metadata_name,
                manifest: &manifest,
                dir: &target,
                skipped: &skipped,
            };
            let mut other_sources: Vec<rescale::Source<'_>> = others
                .iter()
                .zip(&dirs[1..])
                .map(|((name, m), (_, dir, _, skipped))| rescale::Source {
                    name,
                    manifest: m,
                    dir,
                    skipped,
                })
                .collect();
            // Skipped files RocksDB kept after all: fetched and verified like the rest.
            let fetch_late = |m: &CheckpointManifest, dir: &Path, late: &[String]| -> Result<()> {
                let mut only = m.clone();
                only.shared_files.retain(|f| late.contains(&f.local_name));
                only.private_files.clear();
                download_all(
                    storage,
                    &[(&only, dir.to_path_buf(), None, &[])],
                    p.transfer_threads,
                    &p.shared_fetches,
                )
                .map(|_| ())
            };
            let rescale_target = rescale::Target {
                key_groups,
                max_parallelism: p.max_parallelism,
                options: &p.options,
                budget: &budget,
                compact_clipped: p.compact_clipped,
                scratch: scratch.as_ref().map_or(target.as_path(), |s| s.path()),
                threads: p.transfer_threads,
                fetch_late: &fetch_late,
            };
            let mut fetched_late = Vec::new();
            // Changelog mode: each source's prepared log is applied onto it, so every source
            // holds its checkpoint's state before the surgery (a plain restore's onto the
            // database opened early).
            let names = std::iter::once(&metadata_name).chain(others.iter().map(|(n, _)| n));
            for (i, ((name, (_, dir, _, _)), prepared)) in
                names.zip(&dirs).zip(prepared).enumerate()
            {
                let Some(prepared) = prepared else {
                    continue;
                };
                // The replay opens its source whole: the source's skipped files go first.
                let source = match i {
                    0 => &mut base,
                    _ => &mut other_sources[i - 1],
                };
                if !source.skipped.is_empty() {
                    fetched_late.extend(rescale::drop_skipped(source, &rescale_target)?);
                    source.skipped = &[];
                }
                let counts = match (i, &base_db) {
                    (0, Some(db)) => {
                        let last = identity_file.as_ref().map(|(_, f)| f.as_path());
                        let (counts, warm) = crate::replay::apply_onto(prepared, db, name, last)?;
                        db.warm_restored(warm);
                        // Otherwise not all by ingestion: the backend's open writes another
                        // identity and flushes.
                        if counts.memtable_writes == 0 {
                            identity = identity_file.as_ref().map(|(id, _)| id.clone());
                        }
                        counts
                    }
                    _ => crate::replay::apply(prepared, dir, name, &p.options, &budget)?,
                };
                report.log_bytes += counts.segment_bytes;
                report.log_tables += counts.tables;
                report.log_table_bytes += counts.table_bytes;
                report.log_batches += counts.batches;
                report.log_segments += counts.segments;
                report.log_entries_replayed += counts.applied;
                report.log_entries_skipped += counts.skipped;
            }
            // Another source is read by bounded scans, and RocksDB's level iterator opens the
            // first file of a level at or after a seek's key even when it starts past the
            // scan's upper bound: opened without its skipped files, a source whose level has
            // no file between could fail such a read. Its skipped files go first, as for a
            // source whose log is replayed.
            for source in other_sources.iter_mut().filter(|s| !s.skipped.is_empty()) {
                fetched_late.extend(rescale::drop_skipped(source, &rescale_target)?);
                source.skipped = &[];
            }
            let (mut stats, db) =
                rescale::rescale(&base, base_db, &other_sources, &rescale_target)?;
            db.after_restore()?;
            stats.fetched_late.extend(fetched_late);
            for &(_, size) in &stats.fetched_late {
                report.files_skipped -= 1;
                report.bytes_skipped -= size;
                report.files_downloaded += 1;
                report.bytes_downloaded += size;
            }
            report.sst_files_linked = stats.files_linked;
            report.sst_files_rewritten = stats.files_rewritten;
            report.entries_rewritten = stats.entries_rewritten;
            report.sst_files_dropped = stats.base_files_dropped;
            report.sst_ingestions_refused = stats.refused;
            db
        };
        drop(scratch);
        std::fs::remove_dir_all(&scratch_root).map_err(|e| Error::io(&scratch_root, e))?;
        let (backend, states) = open(Restored {
            db,
            base: RestoredBase {
                manifest: Arc::clone(&manifest),
                others: others.iter().map(|(_, m)| Arc::clone(m)).collect(),
                reusable,
                claimed: claim,
                local_copy: locals
                    .first()
                    .copied()
                    .flatten()
                    .filter(|_| !rescaling && log_private.is_some())
                    .map(|l| l.dir().to_path_buf()),
                log_private,
                identity,
            },
        })?;
        let mut have: Vec<_> = states.iter().map(to_manifest_state).collect();
        let mut want: BTreeMap<&str, &sst_format::StateMeta> = BTreeMap::new();
        for m in std::iter::once(&manifest).chain(others.iter().map(|(_, m)| m)) {
            for s in &m.states {
                want.entry(s.name.as_str()).or_insert(s);
            }
        }
        have.sort_by(|a, b| a.name.cmp(&b.name));
        if have.len() != want.len()
            || !have
                .iter()
                .zip(want.values())
                .all(|(h, w)| crate::state::same_state(h, w))
        {
            return Err(Error::CheckpointCorrupt {
                file: metadata_name.clone(),
                detail: "the manifests' state list differs from the restored database's".into(),
            });
        }
        // Every restored file was made durable as it was placed; the marker goes last.
        sync_dir(&target)?;
        unmark_restore(&target)?;
        Ok(backend)
    })();
    if result.is_err() {
        // Best effort: leave the target as it was (empty or missing). The marker goes last,
        // and only once everything else is gone: a directory that still holds part of a
        // restore keeps it, so it is never opened as a backend.
        let marker = restore_marker(&target);
        let mut emptied = true;
        if let Ok(entries) = std::fs::read_dir(&target) {
            for e in entries.flatten() {
                if e.path() != marker {
                    emptied &= std::fs::remove_file(e.path())
                        .or_else(|_| std::fs::remove_dir_all(e.path()))
                        .is_ok();
                }
            }
        }
        if emptied && std::fs::remove_file(&marker).is_ok() && !existed {
            let _ = std::fs::remove_dir(&target);
        }
    }
    let backend = result?;
    for local in found.iter().flatten() {
        if p.local_recovery {
            local.retire_others();
        } else {
            local.retire_backend();
        }
    }
    crate::checkpoint::local_recovery::retire_unused(
        &staging_root,
        manifest.checkpoint_id,
        cut_copies.as_deref(),
    );
    Ok((backend, report))
}

/// The private files of `m` as downloaded into `dir`, `(local name, bytes)`: a plain restore
/// of a changelog-mode checkpoint keeps them for the restored backend's log checkpoints.
fn read_private(m: &CheckpointManifest, dir: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let mut private = Vec::new();
    for f in &m.private_files {
        let path = dir.join(&f.local_name);
        let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        private.push((f.local_name.clone(), bytes));
    }
    Ok(private)
}

fn range_of(m: &CheckpointManifest) -> Option<KeyGroupRange> {
    KeyGroupRange::new(m.key_group_start, m.key_group_end).ok()
}

fn overlap(m: &CheckpointManifest, target: KeyGroupRange) -> u32 {
    range_of(m)
        .and_then(|r| r.intersect(&target))
        .map_or(0, |r| r.len())
}

/// From the manifests of one checkpoint id, the ones to restore `target` from, base first:
/// the one whose range equals the target if there is one, else every overlapping one (base =
/// most overlap). `Ok(None)` if they do not cover the target; overlapping manifests (two
/// backends claiming one key group) are [`Error::AmbiguousCheckpoint`].
fn choose(
    id: u64,
    candidates: Vec<Chosen>,
    target: KeyGroupRange,
    max_parallelism: u32,
) -> Result<Option<Vec<Chosen>>> {
    let mut found: Vec<Chosen> = candidates
        .into_iter()
        .filter(|(_, m)| m.max_parallelism == max_parallelism && overlap(m, target) > 0)
        .collect();
    let exact = |m: &CheckpointManifest| range_of(m) == Some(target);
    if found.iter().filter(|(_, m)| exact(m)).count() == 1 {
        found.retain(|(_, m)| exact(m));
        return Ok(Some(found));
    }
    found.sort_by_key(|(_, m)| m.key_group_start);
    let mut next = u32::from(target.start);
    for (i, (_, m)) in found.iter().enumerate() {
        if i > 0 && u32::from(m.key_group_start) <= u32::from(found[i - 1].1.key_group_end) {
            return Err(Error::AmbiguousCheckpoint {
                checkpoint_id: id,
                candidates: found.into_iter().map(|(_, m)| m.backend_id).collect(),
            });
        }
        if u32::from(m.key_group_start) > next {
            return Ok(None); // a gap
        }
        next = u32::from(m.key_group_end) + 1;
    }
    if found.is_empty() || next <= u32::from(target.end) {
        return Ok(None);
    }
    let base = (0..found.len())
        .max_by_key(|&i| (overlap(&found[i].1, target), std::cmp::Reverse(i)))
        .unwrap_or(0);
    found.swap(0, base);
    Ok(Some(found))
}

/// Loads the manifest `name`, checking that it describes the checkpoint its name says.
fn load(
    storage: &dyn CheckpointStorage,
    name: &str,
    id: u64,
    backend: &str,
) -> Result<CheckpointManifest> {
    let bytes = storage.get_bytes(name)?;
    let m = decode_manifest_named(name, &bytes)?;
    if m.checkpoint_id != id || m.backend_id != backend {
        return Err(Error::CheckpointCorrupt {
            file: name.to_string(),
            detail: format!(
                "manifest describes checkpoint {} of backend {}",
                m.checkpoint_id, m.backend_id
            ),
        });
    }
    Ok(m)
}

/// Picks the manifests to restore, base first; see [`RestoreFrom`]. With `needs_record`,
/// `Latest` and `Checkpoint` restore only what a job record names
/// ([`Error::CheckpointNotFound`] if it is gone), never the manifests of an id without one.
fn select(
    storage: &dyn CheckpointStorage,
    from: &RestoreFrom,
    key_groups: KeyGroupRange,
    max_parallelism: u32,
    needs_record: bool,
) -> Result<Selection> {
    let committed = list_committed(storage)?;
    let describe = format!("key groups {key_groups} of max parallelism {max_parallelism}");
    let load_named = |id: u64, backend_id: &str| -> Result<Chosen> {
        let name = layout::metadata_name(id, backend_id);
        if !committed.iter().any(|(n, _, _)| *n == name) {
            return Err(Error::CheckpointNotFound(format!(
                "checkpoint {id} of backend {backend_id}"
            )));
        }
        let m = load(storage, &name, id, backend_id)?;
        Ok((name, m))
    };
    match from {
        RestoreFrom::Exact {
            checkpoint_id,
            backend_id,
        } => {
            let (name, m) = load_named(*checkpoint_id, backend_id)?;
            let covers = m.max_parallelism == max_parallelism
                && m.key_group_start <= key_groups.start
                && m.key_group_end >= key_groups.end;
            if !covers {
                return Err(Error::RestoreMismatch {
                    checkpoint: name,
                    existing: format!(
                        "key groups [{}, {}] of max parallelism {}",
                        m.key_group_start, m.key_group_end, m.max_parallelism
                    ),
                    requested: describe,
                });
            }
            Ok(Selection {
                chosen: vec![(name, m)],
                cut_copies: None,
            })
        }
        RestoreFrom::Handles {
            checkpoint_id,
            backend_ids,
        } => {
            let all = backend_ids
                .iter()
                .map(|b| load_named(*checkpoint_id, b))
                .collect::<Result<Vec<_>>>()?;
            let chosen =
                choose(*checkpoint_id, all, key_groups, max_parallelism)?.ok_or_else(|| {
                    Error::CheckpointNotFound(format!(
                        "the given manifests of checkpoint {checkpoint_id} do not cover {describe}"
                    ))
                })?;
            Ok(Selection {
                chosen,
                cut_copies: None,
            })
        }
        RestoreFrom::Latest | RestoreFrom::Checkpoint(_) => {
            let record = match from {
                RestoreFrom::Checkpoint(id) => record_ids(storage)?.contains(id).then_some(*id),
                _ => newest_record(storage)?.map(|r| r.checkpoint_id),
            };
            // A completed checkpoint: the manifests its job record names (for `Latest`, the
            // newest record only: one consistent cut for every instance).
            if let Some(id) = record {
                let record = read_record(storage, id)?;
                let all = record
                    .tasks
                    .iter()
                    .filter_map(|t| t.manifest.as_deref())
                    .filter_map(|name| {
                        let p = layout::parse_checkpoint_object(name)?;
                        Some((name.to_string(), p.backend_id.to_string()))
                    })
                    .map(|(name, backend)| match load(storage, &name, id, &backend) {
                        Ok(m) => Ok((name, m)),
                        Err(Error::ObjectNotFound { .. }) => Err(Error::CheckpointCorrupt {
                            detail: format!("job record {id} names it, but it is missing"),
                            file: name,
                        }),
                        Err(e) => Err(e),
                    })
                    .collect::<Result<Vec<_>>>()?;
                return choose_in_cut(id, all, key_groups, max_parallelism)?.ok_or_else(|| {
                    Error::CheckpointNotFound(format!(
                        "completed checkpoint {id} has no manifests covering {describe}"
                    ))
                });
            }
            if needs_record {
                return Err(Error::CheckpointNotFound(format!(
                    "{}: its job record was deleted while the restore began",
                    match from {
                        RestoreFrom::Checkpoint(id) => format!("checkpoint {id}"),
                        _ => "the newest checkpoint".to_string(),
                    }
                )));
            }
            // No job record for it: the manifests of that id (for `Latest`, when storage holds
            // no record at all, the newest id whose manifests cover the range).
            let mut ids: Vec<u64> = committed.iter().map(|(_, id, _)| *id).collect();
            ids.dedup();
            ids.reverse();
            if let RestoreFrom::Checkpoint(id) = from {
                ids.retain(|i| i == id);
            }
            for id in ids {
                let all = committed
                    .iter()
                    .filter(|(_, i, _)| *i == id)
                    .map(|(name, _, backend)| Ok((name.clone(), load(storage, name, id, backend)?)))
                    .collect::<Result<Vec<_>>>()?;
                if let Some(selection) = choose_in_cut(id, all, key_groups, max_parallelism)? {
                    return Ok(selection);
                }
            }
            Err(Error::CheckpointNotFound(match from {
                RestoreFrom::Checkpoint(id) => format!("checkpoint {id} for {describe}"),
                _ => format!("any checkpoint for {describe}"),
            }))
        }
    }
}

/// Structural checks of a manifest before anything is downloaded: names are safe and unique,
/// and the RocksDB files needed to open are present.
pub(crate) fn validate_manifest(name: &str, m: &CheckpointManifest) -> Result<()> {
    let bad = |detail: String| Error::CheckpointCorrupt {
        file: name.to_string(),
        detail,
    };
    let mut locals = HashSet::new();
    for f in &m.shared_files {
        if !layout::is_shared_name(&f.remote_name) || validate_object_name(&f.remote_name).is_err()
        {
            return Err(bad(format!("bad shared object name `{}`", f.remote_name)));
        }
        if !layout::valid_local_name(&f.local_name) || !f.local_name.ends_with(".sst") {
            return Err(bad(format!("bad SST file name `{}`", f.local_name)));
        }
        if !locals.insert(f.local_name.as_str()) {
            return Err(bad(format!("file `{}` listed twice", f.local_name)));
        }
    }
    for f in &m.private_files {
        if validate_object_name(&f.remote_name).is_err() || layout::is_shared_name(&f.remote_name) {
            return Err(bad(format!("bad private object name `{}`", f.remote_name)));
        }
        if !layout::valid_local_name(&f.local_name) || f.local_name.ends_with(".sst") {
            return Err(bad(format!("bad private file name `{}`", f.local_name)));
        }
        if !locals.insert(f.local_name.as_str()) {
            return Err(bad(format!("file `{}` listed twice", f.local_name)));
        }
    }
    for s in m.changelog.iter().flat_map(|c| c.segments.iter()) {
        if !layout::is_shared_name(&s.remote_name)
            || !s.remote_name.ends_with(".log")
            || validate_object_name(&s.remote_name).is_err()
        {
            return Err(bad(format!("bad log segment name `{}`", s.remote_name)));
        }
    }
    let table_files = m
        .changelog
        .iter()
        .flat_map(|c| c.tables.iter().flat_map(|t| t.files.iter()));
    for f in table_files {
        if !layout::is_shared_name(&f.remote_name)
            || !f.remote_name.ends_with(".sst")
            || validate_object_name(&f.remote_name).is_err()
        {
            return Err(bad(format!("bad log table file name `{}`", f.remote_name)));
        }
    }
    if !locals.contains("CURRENT") || !locals.iter().any(|n| n.starts_with("MANIFEST-")) {
        return Err(bad(
            "no CURRENT or MANIFEST file: not a RocksDB checkpoint".into()
        ));
    }
    Ok(())
}

/// One file to fetch.
struct Fetch<'a> {
    remote: &'a str,
    local: &'a str,
    size: u64,
    crc32: u32,
    sst_id: Option<&'a SstUniqueId>,
    dir: &'a Path,
    /// The local copy to try first.
    source: Option<&'a LocalSource>,
}

/// `(files, bytes)` taken from local copies, downloaded, skipped and linked from another
/// restore's copy ([`SharedFetches`]) by [`download_all`].
#[derive(Debug, Default)]
pub(crate) struct FetchCounts {
    pub(crate) local: (usize, u64),
    pub(crate) downloaded: (usize, u64),
    pub(crate) skipped: (usize, u64),
    pub(crate) shared: (usize, u64),
}

/// What [`download_all`] fetches for one manifest: the manifest, the directory its files go
/// to, its local copy (if any), and the local names of its SSTs not to fetch.
pub(crate) type Fetching<'a> = (
    &'a CheckpointManifest,
    PathBuf,
    Option<&'a LocalSource>,
    &'a [String],
);

/// Downloads and verifies every file of each manifest into its directory (but the SSTs it
/// names to skip), all in parallel, taking verified files from the source's local copy first
/// when it has one (local recovery).
pub(crate) fn download_all(
    storage: &dyn CheckpointStorage,
    sources: &[Fetching<'_>],
    threads: usize,
    shared: &SharedFetches,
) -> Result<FetchCounts> {
    let mut jobs: Vec<Fetch<'_>> = Vec::new();
    let mut counts = FetchCounts::default();
    for (m, dir, local, skip) in sources {
        for f in m
            .shared_files
            .iter()
            .filter(|f| skip.contains(&f.local_name))
        {
            counts.skipped.0 += 1;
            counts.skipped.1 += f.size;
        }
        jobs.extend(
            m.shared_files
                .iter()
                .filter(|f| !skip.contains(&f.local_name))
                .map(|f| Fetch {
                    remote: &f.remote_name,
                    local: &f.local_name,
                    size: f.size,
                    crc32: f.crc32,
                    sst_id: Some(&f.sst_id),
                    dir,
                    source: *local,
                })
                .chain(m.private_files.iter().map(|f| Fetch {
                    remote: &f.remote_name,
                    local: &f.local_name,
                    size: f.size,
                    crc32: f.crc32,
                    sst_id: None,
                    dir,
                    source: *local,
                })),
        );
    }
    jobs.sort_by_key(|j| std::cmp::Reverse(j.size));
    let origins = run_parallel(&jobs, threads, |job| {
        let local = job.dir.join(job.local);
        // A shared SST another restore (or another source of this one) fetched is linked; it
        // was verified and made durable before it was offered, and the link's directory
        // entry is synced with the rest of the directory. Otherwise this restore claims the
        // file, and the claim ends (offering the file, or releasing it on any error) when it
        // returns.
        let claim = match job.sst_id {
            Some(id) => {
                let key = FileKey {
                    remote: job.remote.to_string(),
                    size: job.size,
                    crc32: job.crc32,
                    sst_id: id.clone(),
                };
                match shared.link_or_claim(&key, &local) {
                    Placed::Linked => return Ok(Origin::Shared),
                    Placed::Claimed(claim) => Some(claim),
                }
            }
            None => None,
        };
        // A file from storage is durable as placed (`get_file_durable`); a local copy is
        // synced here.
        let origin = fetch_one(storage, job, &local)?;
        if matches!(origin, Origin::Local) {
            std::fs::File::open(&local)
                .and_then(|f| f.sync_all())
                .map_err(|e| Error::io(&local, e))?;
        }
        if let Some(claim) = claim {
            claim.fetched(&local);
        }
        Ok(origin)
    })?;
    for (job, origin) in jobs.iter().zip(origins) {
        let c = match origin {
            Origin::Local => &mut counts.local,
            Origin::Downloaded => &mut counts.downloaded,
            Origin::Shared => &mut counts.shared,
        };
        c.0 += 1;
        c.1 += job.size;
    }
    Ok(counts)
}

/// Where one fetched file came from.
enum Origin {
    /// The source backend's local copy (local recovery).
    Local,
    /// Checkpoint storage.
    Downloaded,
    /// Another restore's verified copy ([`SharedFetches`]).
    Shared,
}

/// Places `job`'s file at `local` from the local copy or from storage, verified against the
/// manifest (size, CRC-32, and an SST's unique id).
fn fetch_one(storage: &dyn CheckpointStorage, job: &Fetch<'_>, local: &Path) -> Result<Origin> {
    let corrupt = |detail: String| Error::CheckpointCorrupt {
        file: job.remote.to_string(),
        detail,
    };
    if let Some(source) = job.source {
        if source.fetch(job.local, job.size, job.crc32, job.sst_id, local)? {
            return Ok(Origin::Local);
        }
    }
    let digest = storage
        .get_file_durable(job.remote, local)
        .map_err(|e| named_fetch_error(job.remote, e))?;
    check_digest(job.remote, digest, job.size, job.crc32)?;
    if let Some(id) = job.sst_id {
        let meta = sst_format::read_sst_meta(local)
            .map_err(|e| corrupt(format!("not a valid SST: {e}")))?;
        if meta.unique_id != *id {
            return Err(corrupt(format!(
                "SST unique id {}, manifest says {id}",
                meta.unique_id
            )));
        }
    }
    Ok(Origin::Downloaded)
}

//! The two phases of a checkpoint. The sync phase (`KeyedBackend::snapshot`) takes a RocksDB
//! checkpoint into a local staging directory and returns a [`PendingSnapshot`]; its
//! [`PendingSnapshot::upload`] (the async phase, on any thread) classifies the files, uploads
//! what the last completed checkpoint does not hold, and commits the manifest last.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sst_format::{CheckpointManifest, PrivateFile, SharedFile, SstKeyRange, SstUniqueId};

use super::changelog::{self, LogPlan};
use super::registry::{Checkpointer, FileStamp};
use super::{layout, CheckpointStats};
use crate::error::{Error, Result};
use crate::keygroup::KeyGroupRange;
use crate::parallel::run_parallel;

/// A checkpoint whose sync phase is done: the RocksDB checkpoint sits in a local staging
/// directory (hard links, so it costs no copy and stays valid while the backend keeps
/// writing). Move it to another thread and call [`PendingSnapshot::upload`]. Dropping it
/// without uploading discards the staging directory and the attempt.
#[must_use = "a pending snapshot does nothing until uploaded"]
#[derive(Debug)]
pub struct PendingSnapshot {
    pub(crate) id: u64,
    pub(crate) dir: PathBuf,
    pub(crate) cp: Arc<Checkpointer>,
    pub(crate) base: Option<Arc<CheckpointManifest>>,
    pub(crate) states: Vec<sst_format::StateMeta>,
    /// The operator's non-keyed state as of the sync phase, stored in the manifest.
    pub(crate) operator_state: Vec<sst_format::OperatorListState>,
    pub(crate) key_groups: KeyGroupRange,
    pub(crate) max_parallelism: u32,
    pub(crate) sync_duration: Duration,
    /// The key range and level of each keyed state's SST (by local name) as listed right
    /// before the RocksDB checkpoint was cut; recorded in the manifest (version 2) so a
    /// restore into other key groups can skip downloading files wholly outside them.
    pub(crate) key_ranges: HashMap<String, SstKeyRange>,
    pub(crate) finished: bool,
    /// The backend's checkpoint figures, updated when the upload succeeds.
    pub(crate) metrics: Arc<Mutex<crate::metrics::CheckpointMetrics>>,
    /// Changelog mode, a materialization: its manifest's log part (no segments).
    pub(crate) changelog: Option<sst_format::Changelog>,
    /// Changelog mode, a log checkpoint: what it references and uploads (no staging
    /// directory is made).
    pub(crate) log_plan: Option<LogPlan>,
}

/// One file of the staging directory that must be transferred.
struct Job {
    local_name: String,
    /// The object name of a private file; shared names are made when their put begins.
    remote_name: Option<String>,
    size: u64,
    /// `Some` for SSTs (their identity), `None` for private files.
    sst_id: Option<sst_format::SstUniqueId>,
}

impl PendingSnapshot {
    /// The checkpoint id.
    pub fn checkpoint_id(&self) -> u64 {
        self.id
    }

    /// How long the sync phase took.
    pub fn sync_duration(&self) -> Duration {
        self.sync_duration
    }

    /// The local staging directory (a complete RocksDB checkpoint).
    pub fn staging_dir(&self) -> &Path {
        &self.dir
    }

    /// The async phase: uploads every SST the reuse base (the last completed checkpoint as of
    /// the sync phase, or every manifest a rescaling restore merged) does not hold with the
    /// same identity (SST unique id + size; the local name may differ) under
    /// a fresh `shared/` name, uploads the private files (MANIFEST, CURRENT, OPTIONS, ...),
    /// then writes the manifest create-if-absent: the commit point. Files go in parallel
    /// (`CheckpointOptions::transfer_threads`). On any error, or if the checkpoint is aborted
    /// meanwhile, everything this attempt uploaded is deleted again and the error returned.
    /// The staging directory is removed on failure and kept as the local copy on success
    /// (`CheckpointOptions::local_recovery`).
    pub fn upload(mut self) -> Result<CheckpointStats> {
        let _span = tracing::info_span!("checkpoint.upload", id = self.id).entered();
        let start = Instant::now();
        let uploaded = Mutex::new(Vec::<String>::new());
        self.cp.collect_earlier_runs();
        let result = if self.cp.is_aborted(self.id) {
            Err(Error::CheckpointAborted { id: self.id })
        } else {
            match &self.log_plan {
                Some(plan) => self.upload_log(plan, &uploaded, start),
                None => self.upload_inner(&uploaded, start),
            }
        };
        self.finished = true;
        if self.changelog.is_some() {
            // A materialization's private files are read before the directory is moved.
            let dir = result.is_ok().then_some(self.dir.as_path());
            changelog::materialization_ended(&self.cp, self.id, dir);
        }
        if result.is_err() && self.log_plan.is_some() {
            changelog::log_ended(&self.cp, self.id);
        }
        if result.is_err() {
            // Anything this attempt created goes: the manifest first (its put may have stored
            // it and failed after), then the files, and only once the manifest is surely gone,
            // so a manifest in storage never names a deleted file. What a failure here leaves
            // is garbage the owner's next pass classifies (`docs/ownership.md` §4).
            let meta = layout::metadata_name(self.id, &self.cp.backend_id);
            let names = std::mem::take(&mut *uploaded.lock());
            let put_manifest = names.contains(&meta);
            if !put_manifest || self.cp.storage.delete(&meta).is_ok() {
                for name in names.iter().filter(|n| **n != meta) {
                    let _ = self.cp.storage.delete(name);
                }
            }
            self.cp.forget(self.id);
            let _ = fs::remove_dir_all(&self.dir);
        } else if self.log_plan.is_none() {
            super::local_recovery::keep(&self.cp, &self.dir, self.id);
        }
        result
    }

    /// The async phase of a log checkpoint: uploads the plan's segments the base lacks and
    /// copies of the materialization's private files, then commits a manifest naming the
    /// materialization's SSTs (the base's, uploaded before) and every segment after it.
    fn upload_log(
        &self,
        plan: &LogPlan,
        uploaded: &Mutex<Vec<String>>,
        start: Instant,
    ) -> Result<CheckpointStats> {
        let cp = &self.cp;
        let id = self.id;
        let planned_base = self
            .base
            .clone()
            .ok_or_else(|| Error::Internal("a log checkpoint without a base".into()))?;
        // A newer materialization completed since the sync phase: rest on it.
        let rebased = cp.completed_base().and_then(|current| {
            let p = changelog::rebase(cp, plan, &current)?;
            let names: Vec<String> = crate::catalog::shared_objects(&current)
                .map(str::to_string)
                .collect();
            cp.protect(id, &names);
            // Completions only move forward: if `current` is still the last one, it was
            // when the protection began, so its files were there and stay.
            if cp.last_completed() != Some(current.checkpoint_id) {
                return None;
            }
            changelog::rest_on(cp, id, &p);
            Some((p, current))
        });
        let (plan, base) = match &rebased {
            Some((p, current)) => (p, current.as_ref()),
            None => (plan, planned_base.as_ref()),
        };
        let mut new_shared = Vec::new();
        let (mut log, log_bytes, segments_reused) =
            changelog::log_part(cp, plan, base, |segment, stored| {
                let name = layout::new_log_name(id, cp.clock.now_ms());
                cp.protect(id, std::slice::from_ref(&name));
                // The segment was written without syncing it; `put_file` needs it durable, and a
                // storage on the same filesystem links the file itself rather than copying it.
                let path = segment.file.path();
                fs::File::open(path)
                    .and_then(|f| f.sync_data())
                    .map_err(|e| Error::io(path, e))?;
                let digest = put_recorded(uploaded, &name, || cp.storage.put_file(&name, path))?;
                if (digest.size, digest.crc32) != (stored.size, stored.crc32) {
                    return Err(Error::CheckpointCorrupt {
                        file: segment.file.path().display().to_string(),
                        detail: "log segment changed on local disk before its upload".into(),
                    });
                }
                new_shared.push(name.clone());
                Ok((name, digest.size, digest.crc32))
            })?;
        let (tables_built, table_bytes) =
            self.log_tables(plan, base, &mut log, log_bytes, uploaded, &mut new_shared)?;
        let mut private_files = Vec::new();
        let mut private_bytes = 0u64;
        for (local_name, bytes) in &plan.materialized.private {
            let remote_name = layout::private_name(id, &cp.backend_id, local_name);
            put_recorded(uploaded, &remote_name, || {
                cp.storage.put_bytes(&remote_name, bytes)
            })?;
            private_bytes += bytes.len() as u64;
            private_files.push(PrivateFile {
                remote_name,
                local_name: local_name.clone(),
                size: bytes.len() as u64,
                crc32: crc32fast::hash(bytes),
            });
        }
        if cp.is_aborted(id) {
            return Err(Error::CheckpointAborted { id });
        }
        let stats = CheckpointStats {
            checkpoint_id: id,
            sync_duration: self.sync_duration,
            files_uploaded: new_shared.len() + private_files.len(),
            files_reused: base.shared_files.len() + segments_reused,
            bytes_uploaded: log_bytes + table_bytes + private_bytes,
            log_bytes_uploaded: log_bytes,
            log_tables_built: tables_built,
            log_table_bytes_uploaded: table_bytes,
            ..CheckpointStats::default()
        };
        let manifest = self.manifest(base.shared_files.clone(), private_files, Some(log));
        self.commit(manifest, uploaded, new_shared, stats, start)
    }

    /// Gives `log` (this log checkpoint's, `own_bytes` of its segments uploaded by it) its
    /// tables ([`changelog::table_slots`]): the base's it keeps, and the new ones built from their
    /// segments (this backend's own files where it still has them, else fetched and checked)
    /// and uploaded. Returns how many were built and the bytes uploaded.
    fn log_tables(
        &self,
        plan: &LogPlan,
        base: &CheckpointManifest,
        log: &mut sst_format::Changelog,
        own_bytes: u64,
        uploaded: &Mutex<Vec<String>>,
        new_shared: &mut Vec<String>,
    ) -> Result<(usize, u64)> {
        let cp = &self.cp;
        let slots = changelog::table_slots(log, base, &cp.options.changelog, own_bytes);
        let mut tables = Vec::with_capacity(slots.len());
        let (mut built, mut bytes) = (0usize, 0u64);
        let locals = changelog::local_files(plan);
        let dir = layout::table_build_dir(&cp.staging_root, &cp.backend_id, self.id);
        for slot in slots {
            let (first_seq, end_seq, level, range) = match slot {
                changelog::TableSlot::Keep(t) => {
                    tables.push(t);
                    continue;
                }
                changelog::TableSlot::Build {
                    first_seq,
                    end_seq,
                    level,
                    segments,
                } => (first_seq, end_seq, level, segments),
            };
            let sources = log
                .segments
                .get(range)
                .ok_or_else(|| Error::Internal("a log table over segments the log lacks".into()))?;
            let segments = crate::replay::fetch(cp.storage.as_ref(), sources, 1, |s| {
                locals
                    .get(&s.first_seq)
                    .filter(|(_, stored)| (stored.size, stored.crc32) == (s.size, s.crc32))
                    .map(|(path, _)| path.clone())
            })?;
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            let result = (|| {
                let files = crate::replay::build_table(
                    &layout::metadata_name(self.id, &cp.backend_id),
                    &segments,
                    self.key_groups,
                    self.max_parallelism,
                    &plan.table_writer.options,
                    &plan.table_writer.budget,
                    &dir,
                )?;
                let mut out = Vec::with_capacity(files.len());
                for (column_family, path) in files {
                    let name = layout::new_shared_name(self.id, cp.clock.now_ms());
                    let size = fs::metadata(&path).map_err(|e| Error::io(&path, e))?.len();
                    cp.protect(self.id, std::slice::from_ref(&name));
                    let digest =
                        put_recorded(uploaded, &name, || cp.storage.put_file(&name, &path))?;
                    // The manifest records what storage took: a put that stored only part
                    // of the table must fail the checkpoint, as for an SST.
                    if digest.size != size {
                        return Err(Error::CheckpointCorrupt {
                            file: name,
                            detail: format!(
                                "log table upload stored {} of {size} bytes",
                                digest.size
                            ),
                        });
                    }
                    new_shared.push(name.clone());
                    bytes += digest.size;
                    out.push(sst_format::LogTableFile {
                        column_family,
                        remote_name: name,
                        size: digest.size,
                        crc32: digest.crc32,
                    });
                }
                Ok::<_, Error>(out)
            })();
            let _ = fs::remove_dir_all(&dir);
            tables.push(sst_format::LogTable {
                first_seq,
                end_seq,
                level,
                files: result?,
            });
            built += 1;
        }
        log.tables = tables;
        Ok((built, bytes))
    }

    /// This checkpoint's manifest, naming `shared_files`, `private_files` and `changelog`.
    fn manifest(
        &self,
        shared_files: Vec<SharedFile>,
        private_files: Vec<PrivateFile>,
        changelog: Option<sst_format::Changelog>,
    ) -> CheckpointManifest {
        CheckpointManifest {
            checkpoint_id: self.id,
            backend_id: self.cp.backend_id.clone(),
            key_group_start: self.key_groups.start,
            key_group_end: self.key_groups.end,
            max_parallelism: self.max_parallelism,
            states: self.states.clone(),
            shared_files,
            private_files,
            operator_state: self.operator_state.clone(),
            created_at_ms: self.cp.clock.now_ms(),
            changelog,
        }
    }

    fn upload_inner(
        &self,
        uploaded: &Mutex<Vec<String>>,
        start: Instant,
    ) -> Result<CheckpointStats> {
        let cp = &self.cp;
        let id = self.id;
        // By SST unique id, not local name: a rescale ingests other sources' files under new
        // file numbers (`crate::rescale`); the id survives, and two different files never
        // share it.
        let base_index: HashMap<&SstUniqueId, &SharedFile> = self
            .base
            .iter()
            .flat_map(|m| m.shared_files.iter())
            .map(|f| (&f.sst_id, f))
            .collect();

        // Classify the staging directory.
        let mut reused: Vec<SharedFile> = Vec::new();
        let mut jobs: Vec<Job> = Vec::new();
        let mut seen_ids = HashMap::new();
        let entries = fs::read_dir(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&self.dir, e))?;
            let path = entry.path();
            let meta = entry.metadata().map_err(|e| Error::io(&path, e))?;
            let local_name = entry
                .file_name()
                .into_string()
                .ok()
                .filter(|n| layout::valid_local_name(n) && meta.is_file())
                .ok_or_else(|| Error::CheckpointCorrupt {
                    file: path.display().to_string(),
                    detail: "unexpected entry in a RocksDB checkpoint directory".into(),
                })?;
            let size = meta.len();
            if local_name.ends_with(".log") && size == 0 {
                continue; // the empty WAL of a WAL-off checkpoint: RocksDB opens without it
            }
            if local_name.ends_with(".sst") {
                let sst_id = sst_identity(cp, &path, &local_name, &meta, &mut seen_ids)?;
                match base_index.get(&sst_id) {
                    Some(f) if f.size == size => reused.push(SharedFile {
                        // Listed now, or as the base recorded it (a level only grows).
                        key_range: self
                            .key_ranges
                            .get(&local_name)
                            .cloned()
                            .or_else(|| f.key_range.clone()),
                        local_name,
                        ..(*f).clone()
                    }),
                    _ => jobs.push(Job {
                        remote_name: None,
                        local_name,
                        size,
                        sst_id: Some(sst_id),
                    }),
                }
            } else {
                jobs.push(Job {
                    remote_name: Some(layout::private_name(id, &cp.backend_id, &local_name)),
                    local_name,
                    size,
                    sst_id: None,
                });
            }
        }
        *cp.sst_ids.lock() = seen_ids;

        // Transfer, largest first.
        jobs.sort_by(|a, b| {
            b.size
                .cmp(&a.size)
                .then_with(|| a.local_name.cmp(&b.local_name))
        });
        let digests = run_parallel(&jobs, cp.options.transfer_threads, |job| {
            // A shared name carries this checkpoint's id and the time its put begins, which
            // garbage collection reads as the object's age (`layout::new_shared_name`).
            let remote_name = match &job.remote_name {
                Some(n) => n.clone(),
                None => {
                    let n = layout::new_shared_name(id, cp.clock.now_ms());
                    cp.protect(id, std::slice::from_ref(&n));
                    n
                }
            };
            let digest = put_recorded(uploaded, &remote_name, || {
                cp.storage
                    .put_file(&remote_name, &self.dir.join(&job.local_name))
            })?;
            if digest.size != job.size {
                return Err(Error::CheckpointCorrupt {
                    file: job.local_name.clone(),
                    detail: format!("size changed during upload: {} → {}", job.size, digest.size),
                });
            }
            Ok((remote_name, digest))
        })?;
        if cp.is_aborted(id) {
            return Err(Error::CheckpointAborted { id });
        }

        // Build and commit the manifest.
        let mut stats = CheckpointStats {
            checkpoint_id: id,
            sync_duration: self.sync_duration,
            files_reused: reused.len(),
            ..CheckpointStats::default()
        };
        let mut shared_files = reused;
        let mut private_files = Vec::new();
        let mut new_shared = Vec::new();
        for (job, (remote_name, digest)) in jobs.into_iter().zip(digests) {
            stats.files_uploaded += 1;
            stats.bytes_uploaded += digest.size;
            match job.sst_id {
                Some(sst_id) => shared_files.push(SharedFile {
                    remote_name: {
                        new_shared.push(remote_name.clone());
                        remote_name
                    },
                    size: digest.size,
                    crc32: digest.crc32,
                    sst_id,
                    key_range: self.key_ranges.get(&job.local_name).cloned(),
                    local_name: job.local_name,
                }),
                None => private_files.push(PrivateFile {
                    remote_name,
                    local_name: job.local_name,
                    size: digest.size,
                    crc32: digest.crc32,
                }),
            }
        }
        shared_files.sort_by(|a, b| a.local_name.cmp(&b.local_name));
        private_files.sort_by(|a, b| a.local_name.cmp(&b.local_name));
        let manifest = self.manifest(shared_files, private_files, self.changelog.clone());
        stats.materialized = self.changelog.is_some();
        self.commit(manifest, uploaded, new_shared, stats, start)
    }

    /// Writes `manifest` create-if-absent (the acknowledgement) and records it.
    fn commit(
        &self,
        manifest: CheckpointManifest,
        uploaded: &Mutex<Vec<String>>,
        new_shared: Vec<String>,
        mut stats: CheckpointStats,
        start: Instant,
    ) -> Result<CheckpointStats> {
        let cp = &self.cp;
        let id = self.id;
        stats.state_bytes = crate::catalog::shared_objects_bytes(&manifest)
            + manifest.private_files.iter().map(|f| f.size).sum::<u64>();
        let shared_referenced = manifest.shared_files.len() as u64;
        let manifest_span = tracing::info_span!("checkpoint.manifest", id).entered();
        let bytes = sst_format::encode_manifest(&manifest).map_err(Error::format)?;
        let meta_name = layout::metadata_name(id, &cp.backend_id);
        put_recorded(uploaded, &meta_name, || {
            cp.storage.put_bytes(&meta_name, &bytes)
        })?;
        stats.manifest_bytes = bytes.len() as u64;
        drop(manifest_span);
        stats.async_duration = start.elapsed();
        cp.committed(id, Arc::new(manifest), new_shared, stats.clone())?;
        let mut m = self.metrics.lock();
        m.last_checkpoint_id = Some(id);
        m.last_sync_duration = stats.sync_duration;
        m.last_async_duration = stats.async_duration;
        m.last_bytes_uploaded = stats.bytes_uploaded;
        m.last_files_reused = stats.files_reused as u64;
        m.shared_files_referenced = shared_referenced;
        m.checkpoints_uploaded += 1;
        m.total_bytes_uploaded += stats.bytes_uploaded;
        Ok(stats)
    }
}

/// Runs `put`, the put of object `name` by this attempt. The name is recorded in `uploaded`
/// before the put, so a put that stores the object but reports failure is cleaned up too
/// (deleting a missing object succeeds); a name found taken is not this attempt's object, and
/// the cleanup leaves it alone.
fn put_recorded<T>(
    uploaded: &Mutex<Vec<String>>,
    name: &str,
    put: impl FnOnce() -> Result<T>,
) -> Result<T> {
    uploaded.lock().push(name.to_string());
    let result = put();
    if matches!(result, Err(Error::ObjectExists { .. })) {
        uploaded.lock().retain(|n| n != name);
    }
    result
}

/// The unique id of the staged SST `path`, read from its properties block unless an earlier
/// upload of this backend read it from the same file (same name and [`FileStamp`]). Every id
/// used is recorded in `seen`, which replaces the cache after classification so it holds only
/// live files.
fn sst_identity(
    cp: &Checkpointer,
    path: &Path,
    local_name: &str,
    meta: &fs::Metadata,
    seen: &mut HashMap<String, (FileStamp, SstUniqueId)>,
) -> Result<SstUniqueId> {
    let stamp = FileStamp::of(meta);
    let cached = cp
        .sst_ids
        .lock()
        .get(local_name)
        .filter(|(s, _)| *s == stamp)
        .map(|(_, id)| id.clone());
    let id = match cached {
        Some(id) => id,
        None => {
            sst_format::read_sst_meta(path)
                .map_err(|e| Error::CheckpointCorrupt {
                    file: path.display().to_string(),
                    detail: e.to_string(),
                })?
                .unique_id
        }
    };
    seen.insert(local_name.to_string(), (stamp, id.clone()));
    Ok(id)
}

impl Drop for PendingSnapshot {
    fn drop(&mut self) {
        if !self.finished {
            if self.changelog.is_some() {
                changelog::materialization_ended(&self.cp, self.id, None);
            }
            if self.log_plan.is_some() {
                changelog::log_ended(&self.cp, self.id);
            }
            self.cp.forget(self.id);
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

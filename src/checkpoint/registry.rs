//! The checkpoint bookkeeping of one backend (task): which attempts are in flight, which
//! uploaded checkpoints (acknowledgements) are not completed yet, and the reuse base (the last
//! completed checkpoint's manifest: SSTs are reused only from it).
//!
//! A backend deletes only its own attempts' objects, and only those that never became part of
//! a completed checkpoint: an attempt that failed or was aborted before its manifest was
//! written, or an acknowledged checkpoint the job aborted. Everything else is deleted by the
//! job's owner ([`super::owner::JobOwner`]): the backend's own one when it has no
//! coordinator (then `complete` commits the job record), or the coordinator's.
//! `docs/ownership.md` describes the whole protocol.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::Mutex;
use sst_format::{CheckpointManifest, JobCheckpoint, SstUniqueId, TaskCheckpoint};

use super::layout;
use super::owner::{completed_records, JobOwner};
use super::CheckpointOptions;
use crate::catalog::decode_manifest_named;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::storage::{lock_in_place, CheckpointStorage, STAGING_SWEEPS};

/// The checkpoint a backend was restored from; becomes its reuse base.
#[derive(Debug, Clone)]
pub(crate) struct RestoredBase {
    /// The decoded manifest.
    pub(crate) manifest: Arc<CheckpointManifest>,
    /// The other manifests a rescaling restore merged in; their shared files are reuse
    /// candidates of the first checkpoint too.
    pub(crate) others: Vec<Arc<CheckpointManifest>>,
    /// False when the restored files may have been deleted while they were downloaded (the
    /// checkpoint left storage meanwhile): the first checkpoint then reuses nothing.
    pub(crate) reusable: bool,
    /// False for a restore from another job's storage (no claim): its ids are not this job's
    /// and its files are never reused.
    pub(crate) claimed: bool,
    /// Changelog mode, a plain restore of a changelog-mode checkpoint: its private files
    /// (`(local name, bytes)`, read before anything opened the database), so the restored
    /// backend's log checkpoints continue on the same materialization and log.
    pub(crate) log_private: Option<Vec<(String, Vec<u8>)>>,
    /// The restored backend's new identity when the restore already wrote it and made
    /// everything it wrote durable ([`crate::checkpoint::identity_sst`]); `None` leaves both
    /// to the backend's open.
    pub(crate) identity: Option<String>,
    /// Local recovery, a plain restore of a changelog-mode checkpoint: the local copy of the
    /// materialization it took files from, which the restored backend's log checkpoints stand
    /// on (see `local_recovery::adopt`).
    pub(crate) local_copy: Option<PathBuf>,
}

#[derive(Debug, Default)]
struct PendingEntry {
    aborted: bool,
}

#[derive(Debug)]
struct UploadedEntry {
    manifest: Arc<CheckpointManifest>,
    /// Shared objects this checkpoint uploaded itself (deleted if it is aborted).
    new_shared: Vec<String>,
    stats: super::CheckpointStats,
}

#[derive(Debug, Default)]
struct Book {
    /// The last completed checkpoint's manifest: SSTs are reused only from it (after a
    /// rescaling restore: the merged manifests' shared files).
    base: Option<Arc<CheckpointManifest>>,
    last_completed: Option<u64>,
    /// Highest checkpoint id this backend has started (ids must increase).
    max_seen: Option<u64>,
    pending: BTreeMap<u64, PendingEntry>,
    uploaded: BTreeMap<u64, UploadedEntry>,
}

/// Who completes this backend's checkpoints.
#[derive(Debug, Clone)]
pub(crate) enum Completion {
    /// The backend is a job of one task: completing writes the job record through its own
    /// owner.
    Standalone(Arc<JobOwner>),
    /// A job's coordinator completes checkpoints; the owner is linked when it lives in this
    /// process (its garbage passes then see this backend's attempts in flight).
    Job(Option<Arc<JobOwner>>),
}

impl Completion {
    fn owner(&self) -> Option<&Arc<JobOwner>> {
        match self {
            Completion::Standalone(o) => Some(o),
            Completion::Job(o) => o.as_ref(),
        }
    }
}

/// The checkpoint machinery of one backend (present when checkpoint storage is configured).
#[derive(Debug)]
pub(crate) struct Checkpointer {
    pub(crate) storage: Arc<dyn CheckpointStorage>,
    pub(crate) backend_id: String,
    pub(crate) options: CheckpointOptions,
    pub(crate) staging_root: PathBuf,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) completion: Completion,
    book: Mutex<Book>,
    /// SST identities read by earlier uploads, by local name (see `snapshot::sst_identity`).
    pub(crate) sst_ids: Mutex<HashMap<String, (FileStamp, SstUniqueId)>>,
    /// Changelog mode's local segments and materializations (see `super::changelog`).
    pub(crate) log: Mutex<super::changelog::LogBook>,
    /// Whether a backend without a coordinator has removed what earlier runs of its job left
    /// (see [`Checkpointer::collect_earlier_runs`]).
    earlier_runs_collected: std::sync::atomic::AtomicBool,
    /// Held while the backend is open, released by [`Checkpointer::close`]: a staging
    /// directory whose lock nobody holds belongs to a backend that is gone (see
    /// `clean_staging`), so the directory can be opened again while a clone of the closed
    /// backend lives on.
    staging_lock: Mutex<Option<File>>,
    /// The backend was closed: notifications, sweeps and new snapshots answer
    /// [`Error::Closed`].
    closed: std::sync::atomic::AtomicBool,
    /// This instance's key for the job owner's protections (the backend id and a random
    /// suffix): a closed instance releases only its own, not those of the backend's next
    /// instance on the same directory.
    owner_key: String,
}

/// What identifies one file on disk well enough to reuse facts read from it: an SST under a
/// given name with the same size, inode and modification time is the same immutable file
/// (RocksDB never reuses a file number within a database, and a staging directory
/// hard-links the live files).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileStamp {
    len: u64,
    inode: (u64, u64),
    modified: Option<SystemTime>,
}

impl FileStamp {
    /// The stamp of `meta`.
    pub(crate) fn of(meta: &std::fs::Metadata) -> FileStamp {
        #[cfg(unix)]
        let inode = {
            use std::os::unix::fs::MetadataExt;
            (meta.dev(), meta.ino())
        };
        #[cfg(not(unix))]
        let inode = (0, 0);
        FileStamp {
            len: meta.len(),
            inode,
            modified: meta.modified().ok(),
        }
    }
}

/// Every manifest in storage: `(manifest object name, id, backend id)`, by id.
pub(crate) fn list_committed(
    storage: &dyn CheckpointStorage,
) -> Result<Vec<(String, u64, String)>> {
    let mut out: Vec<_> = storage
        .list(layout::CHECKPOINT_PREFIX)?
        .into_iter()
        .filter_map(|o| {
            let p = layout::parse_checkpoint_object(&o.name)?;
            p.is_metadata()
                .then(|| (o.name.clone(), p.id, p.backend_id.to_string()))
        })
        .collect();
    out.sort_by(|a, b| (a.1, &a.2).cmp(&(b.1, &b.2)));
    Ok(out)
}

/// Name of the lock file in a backend's staging directory: held while the backend is open.
pub(crate) const STAGING_LOCK: &str = "LOCK";

/// Takes this backend's staging lock, then removes staging directories (`snap-<id>`) of
/// attempts that can no longer finish, and changelog segment files (`log/`, which only the
/// process that cut them uses): this backend's own (an earlier process of this backend died
/// mid-snapshot) and those of every backend whose staging lock nobody holds (its process is
/// gone), each while holding that backend's lock. Local copies stay (a restore on this
/// machine uses them). Failures to remove only cost disk space; a lock this backend cannot
/// take (another open instance of it holds it) is an error: without it, any sibling would
/// take this backend for a gone one and remove its snapshots.
fn clean_staging(staging_root: &Path, backend_id: &str) -> Result<File> {
    let own = staging_root.join(backend_id);
    // Created again on each try: a sibling's sweep may remove an empty directory of a gone
    // backend between its creation and the lock (`local_recovery::retire_unused`).
    let lock = (0..200).find_map(|_| {
        let locked = {
            let _sweeps = STAGING_SWEEPS.lock();
            let _ = std::fs::create_dir_all(&own);
            lock_in_place(&own.join(STAGING_LOCK))
        };
        locked.or_else(|| {
            std::thread::sleep(std::time::Duration::from_millis(5));
            None
        })
    });
    let lock = lock.ok_or_else(|| {
        Error::io(
            own.join(STAGING_LOCK),
            std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                "the staging lock is held by another open instance of this backend",
            ),
        )
    })?;
    let _sweeps = STAGING_SWEEPS.lock();
    let Ok(entries) = std::fs::read_dir(staging_root) else {
        return Ok(lock);
    };
    for e in entries.flatten() {
        let dir = e.path();
        let mine = e.file_name().to_str() == Some(backend_id);
        // Held while its leftovers go: a backend opening meanwhile waits for it.
        let theirs = match mine {
            true => None,
            false if dir.is_dir() => match lock_in_place(&dir.join(STAGING_LOCK)) {
                Some(l) => Some(l),
                None => continue,
            },
            false => continue,
        };
        for snap in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let is_snap = snap
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("snap-") || n == layout::LOG_DIR_NAME);
            if is_snap {
                let _ = std::fs::remove_dir_all(snap.path());
            }
        }
        drop(theirs);
    }
    Ok(lock)
}

/// The manifest of `backend_id` named by the newest job record that names one, if any.
fn newest_completed(
    storage: &dyn CheckpointStorage,
    backend_id: &str,
) -> Result<Option<(u64, Arc<CheckpointManifest>)>> {
    // Void records and records deleted between list and read (subsumed) are skipped.
    for record in completed_records(storage)? {
        let record = record?;
        let id = record.checkpoint_id;
        let mine = layout::metadata_name(id, backend_id);
        if record
            .tasks
            .iter()
            .any(|t| t.manifest.as_deref() == Some(mine.as_str()))
        {
            let m = decode_manifest_named(&mine, &storage.get_bytes(&mine)?)?;
            return Ok(Some((id, Arc::new(m))));
        }
    }
    Ok(None)
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        // A closed backend's attempts can never complete: they protect nothing any more.
        if let Some(owner) = self.owner() {
            owner.release_instance(&self.owner_key);
        }
    }
}

impl Checkpointer {
    /// The backend closed: later notifications, sweeps and snapshots answer
    /// [`Error::Closed`], and the staging lock goes, so the directory can be opened again
    /// while a clone of this backend (or an upload it began) lives on.
    pub(crate) fn close(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
        self.staging_lock.lock().take();
    }

    /// Whether [`Checkpointer::close`] was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Opens the bookkeeping of `backend_id`. With `restored`, the backend is new and its base
    /// is the restored checkpoint; otherwise the base is this backend's manifest in the newest
    /// job record naming one.
    pub(crate) fn open(
        storage: Arc<dyn CheckpointStorage>,
        backend_id: String,
        options: CheckpointOptions,
        staging_root: PathBuf,
        clock: Arc<dyn Clock>,
        completion: Completion,
        restored: Option<RestoredBase>,
    ) -> Result<Checkpointer> {
        options.validate()?;
        let staging_lock = clean_staging(&staging_root, &backend_id)?;
        let mut book = Book::default();
        let mut log = super::changelog::LogBook::default();
        match restored {
            Some(r) if !r.claimed => {
                // Another job's checkpoint: nothing of it is this job's base or id.
            }
            Some(mut r) => {
                let restored_id = r.manifest.checkpoint_id;
                // A plain restore of a changelog-mode checkpoint continues its log.
                if r.reusable && r.others.is_empty() {
                    if let (Some(private), Some(c)) = (r.log_private.take(), &r.manifest.changelog)
                    {
                        super::changelog::resume(&mut log, c, private, clock.now_ms());
                    }
                }
                // The reuse base: every merged manifest's shared files, since a rescale
                // ingests the other sources' SSTs as they are (snapshot matches them by unique
                // id).
                if r.reusable {
                    book.base = Some(if r.others.is_empty() {
                        r.manifest
                    } else {
                        let mut merged = (*r.manifest).clone();
                        merged
                            .shared_files
                            .extend(r.others.iter().flat_map(|m| m.shared_files.iter().cloned()));
                        Arc::new(merged)
                    });
                }
                book.last_completed = Some(restored_id);
                book.max_seen = Some(restored_id);
            }
            None => {
                book.max_seen = storage
                    .list(layout::CHECKPOINT_PREFIX)?
                    .iter()
                    .filter_map(|o| layout::parse_checkpoint_object(&o.name))
                    .filter(|p| p.backend_id == backend_id)
                    .map(|p| p.id)
                    .max();
                if let Some((id, m)) = newest_completed(storage.as_ref(), &backend_id)? {
                    book.base = Some(m);
                    book.last_completed = Some(id);
                    book.max_seen = book.max_seen.max(Some(id));
                }
                // Only where job records say what completed: an engine may keep completion
                // elsewhere, and then every copy may be of a completed checkpoint.
                if let Some(last) = book.last_completed {
                    super::local_recovery::retire_own_dead_attempts(
                        &staging_root,
                        &backend_id,
                        last,
                    );
                }
            }
        }
        let owner_key = format!("{backend_id}#{:016x}", rand::random::<u64>());
        Ok(Checkpointer {
            storage,
            backend_id,
            options,
            staging_root,
            clock,
            completion,
            book: Mutex::new(book),
            sst_ids: Mutex::new(HashMap::new()),
            log: Mutex::new(log),
            earlier_runs_collected: std::sync::atomic::AtomicBool::new(false),
            staging_lock: Mutex::new(Some(staging_lock)),
            closed: std::sync::atomic::AtomicBool::new(false),
            owner_key,
        })
    }

    /// A backend without a coordinator whose job completes checkpoints through job records
    /// (storage held one when its owner opened) owns that storage alone: before its first
    /// upload it runs one garbage pass, which removes the attempts earlier runs uploaded and
    /// never completed (every id up to the highest in storage when it opened belongs to a
    /// run that is gone), so runs that die before their first completion do not pile up
    /// (`docs/ownership.md` §3 rule 5). Not where storage holds no record: several backends
    /// without a coordinator may share a storage whose completion an engine keeps elsewhere
    /// (§3 rule 6), and one's pass would delete another's attempts. Not at open: the pass
    /// would run in every restore's time, and before the first attempt's sync phase protects
    /// the files it may reuse. A failed pass is logged and left to the first completion's
    /// pass, which reports it.
    pub(crate) fn collect_earlier_runs(&self) {
        let Completion::Standalone(owner) = &self.completion else {
            return;
        };
        if owner.latest().is_none() {
            return;
        }
        if self
            .earlier_runs_collected
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        if let Err(e) = owner.collect_garbage() {
            tracing::warn!(error = %e, "garbage pass before the first upload failed");
        }
    }

    /// The owner this backend's attempts register with, if it lives in this process.
    pub(crate) fn owner(&self) -> Option<&Arc<JobOwner>> {
        self.completion.owner()
    }

    /// The last completed checkpoint's manifest: the base a sync phase starting now captures.
    pub(crate) fn completed_base(&self) -> Option<Arc<CheckpointManifest>> {
        self.book.lock().base.clone()
    }

    /// The last completed checkpoint id.
    pub(crate) fn last_completed(&self) -> Option<u64> {
        self.book.lock().last_completed
    }

    /// Changelog mode: the checkpoint whose files the last completed checkpoint's
    /// materialization are.
    pub(crate) fn base_materialization(&self) -> Option<u64> {
        let b = self.book.lock();
        b.base
            .as_ref()
            .and_then(|m| m.changelog.as_ref())
            .map(|c| c.materialization_id)
    }

    /// Starts checkpoint `id`: checks that it is new, registers it as in flight and returns the
    /// reuse base captured now.
    pub(crate) fn begin(&self, id: u64) -> Result<Option<Arc<CheckpointManifest>>> {
        let mut b = self.book.lock();
        if let Some(max) = b.max_seen {
            if id <= max {
                return Err(Error::CheckpointRejected {
                    id,
                    reason: format!("checkpoint ids must increase; {max} was already started"),
                });
            }
        }
        b.max_seen = Some(id);
        let base = if self.options.incremental {
            b.base.clone()
        } else {
            None
        };
        if let Some(owner) = self.owner() {
            owner.uploading(&self.owner_key, id, true);
            // The attempt's directory (its private files come before its manifest) and the
            // base's shared files it may reuse.
            owner.protect(
                &self.owner_key,
                id,
                std::iter::once(layout::checkpoint_dir(id, &self.backend_id)).chain(
                    base.iter()
                        .flat_map(|m| crate::catalog::shared_objects(m).map(str::to_string)),
                ),
            );
        }
        b.pending.insert(id, PendingEntry::default());
        Ok(base)
    }

    /// Marks `names` (new shared uploads of pending checkpoint `id`) as in flight.
    pub(crate) fn protect(&self, id: u64, names: &[String]) {
        if let Some(owner) = self.owner() {
            owner.protect(&self.owner_key, id, names.iter().cloned());
        }
    }

    /// Whether pending checkpoint `id` was aborted.
    pub(crate) fn is_aborted(&self, id: u64) -> bool {
        self.book.lock().pending.get(&id).is_some_and(|p| p.aborted)
    }

    /// Forgets pending checkpoint `id` (its upload failed or was dropped; the caller deletes
    /// what it uploaded).
    pub(crate) fn forget(&self, id: u64) {
        self.book.lock().pending.remove(&id);
        if let Some(owner) = self.owner() {
            owner.uploading(&self.owner_key, id, false);
        }
        self.release(id);
    }

    /// Records that checkpoint `id`'s manifest is in storage (the acknowledgement). If it was
    /// aborted meanwhile, or a newer checkpoint completed meanwhile, returns
    /// [`Error::CheckpointAborted`] and the caller deletes the attempt.
    pub(crate) fn committed(
        &self,
        id: u64,
        manifest: Arc<CheckpointManifest>,
        new_shared: Vec<String>,
        stats: super::CheckpointStats,
    ) -> Result<()> {
        if let Some(owner) = self.owner() {
            owner.uploading(&self.owner_key, id, false);
        }
        let mut b = self.book.lock();
        let aborted = b.pending.remove(&id).is_some_and(|p| p.aborted);
        let subsumed = b.last_completed.is_some_and(|lc| id < lc);
        if aborted || subsumed {
            drop(b);
            self.forget(id);
            return Err(Error::CheckpointAborted { id });
        }
        b.uploaded.insert(
            id,
            UploadedEntry {
                manifest,
                new_shared,
                stats,
            },
        );
        // The protection stays until the checkpoint completes or is aborted: the owner may
        // classify ids up to its open-time maximum as finished, and this acknowledgement must
        // survive that while it can still complete.
        Ok(())
    }

    /// `notify_checkpoint_complete`: see `KeyedBackend::notify_checkpoint_complete`.
    pub(crate) fn complete(&self, id: u64, key_groups: crate::KeyGroupRange) -> Result<()> {
        let (manifest, stats) = {
            let b = self.book.lock();
            if b.last_completed.is_some_and(|lc| id <= lc) {
                return Ok(()); // late: already subsumed
            }
            match b.uploaded.get(&id) {
                Some(u) => (Arc::clone(&u.manifest), u.stats.clone()),
                None => return Err(Error::UnknownCheckpoint { id }),
            }
        };
        if let Completion::Standalone(owner) = &self.completion {
            let now = self.clock.now_ms();
            let record = JobCheckpoint {
                checkpoint_id: id,
                job_name: String::new(),
                max_parallelism: manifest.max_parallelism,
                triggered_at_ms: now,
                completed_at_ms: now,
                tasks: vec![TaskCheckpoint {
                    task: 0,
                    manifest: Some(layout::metadata_name(id, &self.backend_id)),
                    key_group_start: key_groups.start,
                    key_group_end: key_groups.end,
                    operator_state: manifest.operator_state.clone(),
                    state_bytes: stats.state_bytes,
                    bytes_uploaded: stats.bytes_uploaded,
                    files_reused: stats.files_reused as u64,
                    sync_micros: stats.sync_duration.as_micros() as u64,
                    async_micros: stats.async_duration.as_micros() as u64,
                }],
            };
            match owner.commit(&record) {
                Ok(c) => {
                    self.completed(id, manifest);
                    // Completed; only its garbage pass failed (retried by the next one).
                    return c.gc_error.map_or(Ok(()), Err);
                }
                // Unknown (in doubt): the attempt stays as it is; a later notification retries.
                Err(e @ Error::CommitInDoubt { .. }) => return Err(e),
                Err(e) => {
                    // Not committed: this attempt can never complete (it is deleted, manifest
                    // first). A rejection means a reused file is gone: nothing is reused
                    // until a checkpoint completes again.
                    let rejected = matches!(e, Error::CheckpointRejected { .. });
                    let attempt = {
                        let mut b = self.book.lock();
                        if rejected {
                            b.base = None;
                        }
                        b.uploaded.remove(&id)
                    };
                    self.release(id);
                    if let Some(u) = attempt {
                        // Best effort: what stays is garbage of a finished id once a newer
                        // checkpoint completes.
                        let _ = self.delete_attempt(id, &u.new_shared);
                    }
                    return Err(e);
                }
            }
        }
        self.completed(id, manifest);
        Ok(())
    }

    /// Drops the owner's protection of attempt `id`.
    fn release(&self, id: u64) {
        if let Some(owner) = self.owner() {
            owner.release(&self.owner_key, id);
        }
    }

    fn completed(&self, id: u64, manifest: Arc<CheckpointManifest>) {
        super::changelog::completed(self, &manifest);
        let done: Vec<u64> = {
            let mut b = self.book.lock();
            b.base = Some(manifest);
            b.last_completed = Some(id);
            // Older acknowledgements can never complete now; the owner deletes them.
            let done = b.uploaded.range(..=id).map(|(k, _)| *k).collect();
            b.uploaded.retain(|k, _| *k > id);
            done
        };
        for k in done {
            self.release(k);
        }
    }

    /// `notify_checkpoint_aborted`: see `KeyedBackend::notify_checkpoint_aborted`.
    pub(crate) fn abort(&self, id: u64) -> Result<()> {
        let uploaded = {
            let mut b = self.book.lock();
            if let Some(p) = b.pending.get_mut(&id) {
                p.aborted = true; // the upload cleans up when it sees the flag
                return Ok(());
            }
            match b.uploaded.remove(&id) {
                Some(u) => u,
                None => return Ok(()), // completed, subsumed or never seen: nothing to do
            }
        };
        self.release(id);
        // The job may have rejected the checkpoint because a reused file is gone (this
        // backend missed a completion, or restored a checkpoint a newer one subsumed): if the
        // base is no longer a completed checkpoint of the job, reuse nothing until one
        // completes again.
        let base_id = self.book.lock().last_completed;
        if let Some(base_id) = base_id {
            let record = layout::job_record_name(base_id);
            if !self.storage.exists(&record)? {
                self.book.lock().base = None;
            }
        }
        // Nothing else can reference these: names are fresh, and only completed checkpoints
        // are reused from.
        self.delete_attempt(id, &uploaded.new_shared)
    }

    /// Deletes what an attempt of this backend wrote: its manifest first (if that fails, the
    /// rest stays, so no manifest ever names a deleted file; the owner's garbage pass removes
    /// it later), then its other objects and its new shared files.
    pub(crate) fn delete_attempt(&self, id: u64, new_shared: &[String]) -> Result<()> {
        self.storage
            .delete(&layout::metadata_name(id, &self.backend_id))?;
        for o in self
            .storage
            .list(&layout::checkpoint_dir(id, &self.backend_id))?
        {
            self.storage.delete(&o.name)?;
        }
        for name in new_shared {
            self.storage.delete(name)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::FileStamp;
    use std::fs;

    #[test]
    fn file_stamp_follows_the_inode_not_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("000001.sst");
        fs::write(&a, b"first").unwrap();
        let stamp = |p: &std::path::Path| FileStamp::of(&fs::metadata(p).unwrap());
        let first = stamp(&a);
        // A hard link (a staging directory's view of the live file) has the same stamp.
        let link = dir.path().join("staged.sst");
        fs::hard_link(&a, &link).unwrap();
        assert_eq!(stamp(&link), first);
        // Another file of the same size put under the same name does not.
        let other = dir.path().join("tmp");
        fs::write(&other, b"other").unwrap();
        fs::rename(&other, &a).unwrap();
        #[cfg(unix)]
        assert_ne!(stamp(&a), first);
    }
}

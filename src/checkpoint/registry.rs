//! The shared-file registry of one backend: which checkpoints are in flight, uploaded,
//! completed and retained; the reuse base; retained-N subsumption with deletion of files no
//! manifest references any more; abort cleanup; and the orphan sweep.
//!
//! Storage is the truth, memory a cache: on open the registry is rebuilt from the manifests
//! in storage, and before deleting any shared file it lists and decodes every manifest in
//! storage (of every backend; decoded manifests are cached by name since objects are
//! immutable). A shared file is deleted only if it was referenced by a dropped checkpoint of
//! this backend (or by an uncommitted leftover, for the sweep), no manifest in storage
//! references it, and no in-flight or in-memory checkpoint of this backend references it.
//!
//! Ownership across backends (rescaling): several backends may be restored from the same
//! checkpoint (1 → 2), and one backend from several (2 → 1). A restored backend *claims*
//! every source manifest it used (and the older committed checkpoints of those source
//! backends) by writing the empty object `claims/<id>/<source>/<claimer>`, and retains them
//! like its own. Dropping a retained checkpoint releases this backend's claim on it; the
//! checkpoint's manifest and files are deleted only when no claim on it remains (whoever
//! drops last deletes; an owner dropping its own checkpoint that others still claim leaves it
//! to them). Shared files additionally survive while any manifest in storage references them,
//! so a file used by several backends' checkpoints lives until the last of them is gone.
//! A claim of a backend that dies without ever completing a checkpoint stays behind and
//! keeps its checkpoint alive: that errs on the side of keeping (never a dangling reference).
//!
//! Ordering on deletion: a checkpoint's `_metadata` goes first (so a crash leaves an
//! uncommitted directory, never a manifest with missing files), then its private files, then
//! the shared files nothing references. Crashes anywhere leave only garbage the sweep removes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use sst_format::{CheckpointManifest, SstUniqueId};

use super::layout;
use super::{CheckpointOptions, SweepStats};
use crate::error::{Error, Result};
use crate::storage::{CheckpointStorage, ObjectInfo};

/// The checkpoint a backend was restored from; becomes its reuse base and is retained (claimed)
/// like its own checkpoints.
#[derive(Debug, Clone)]
pub(crate) struct RestoredBase {
    /// Object name of the manifest.
    pub(crate) metadata_name: String,
    /// The decoded manifest.
    pub(crate) manifest: Arc<CheckpointManifest>,
    /// The other manifests a rescaling restore merged in (object name, manifest); claimed and
    /// retained too, and their shared files are reuse candidates of the first checkpoint.
    pub(crate) others: Vec<(String, Arc<CheckpointManifest>)>,
}

/// One retained completed checkpoint.
#[derive(Debug, Clone)]
struct Retained {
    id: u64,
    backend_id: String,
    /// Kept in memory for checkpoints this process completed; loaded lazily otherwise.
    manifest: Option<Arc<CheckpointManifest>>,
}

#[derive(Debug, Default)]
struct PendingEntry {
    aborted: bool,
    /// Shared object names this snapshot may reference: the base's files (reuse candidates)
    /// and its own new uploads.
    protected: HashSet<String>,
}

#[derive(Debug)]
struct UploadedEntry {
    manifest: Arc<CheckpointManifest>,
    /// Shared objects this checkpoint uploaded itself (deleted if it is aborted).
    new_shared: Vec<String>,
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
    /// Completed checkpoints still kept, ascending by id.
    retained: Vec<Retained>,
    /// While a sweep runs: every name and id that became in flight meanwhile.
    sweep_log: Option<(HashSet<String>, HashSet<u64>)>,
}

impl Book {
    /// Names and own checkpoint ids nothing may delete now.
    fn protected(&self) -> (HashSet<String>, HashSet<u64>) {
        fn add_manifest(m: &CheckpointManifest, names: &mut HashSet<String>) {
            names.extend(m.shared_files.iter().map(|f| f.remote_name.clone()));
        }
        let mut names = HashSet::new();
        let mut ids = HashSet::new();
        if let Some(b) = &self.base {
            add_manifest(b, &mut names);
        }
        for (id, p) in &self.pending {
            ids.insert(*id);
            names.extend(p.protected.iter().cloned());
        }
        for (id, u) in &self.uploaded {
            ids.insert(*id);
            add_manifest(&u.manifest, &mut names);
        }
        for r in &self.retained {
            ids.insert(r.id);
            if let Some(m) = &r.manifest {
                add_manifest(m, &mut names);
            }
        }
        if let Some((log_names, log_ids)) = &self.sweep_log {
            names.extend(log_names.iter().cloned());
            ids.extend(log_ids.iter().copied());
        }
        (names, ids)
    }
}

/// The checkpoint machinery of one backend (present when checkpoint storage is configured).
#[derive(Debug)]
pub(crate) struct Checkpointer {
    pub(crate) storage: Arc<dyn CheckpointStorage>,
    pub(crate) backend_id: String,
    pub(crate) options: CheckpointOptions,
    pub(crate) staging_root: PathBuf,
    book: Mutex<Book>,
    cache: Mutex<HashMap<String, Arc<CheckpointManifest>>>,
    /// Serializes deletions (retention GC, abort cleanup, sweep) of this backend.
    gc_lock: Mutex<()>,
    /// SST identities read by earlier uploads, by local name (see `snapshot::sst_identity`).
    pub(crate) sst_ids: Mutex<HashMap<String, (FileStamp, SstUniqueId)>>,
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

/// Decodes manifest bytes, naming the object on failure.
pub(crate) fn decode_manifest_named(name: &str, bytes: &[u8]) -> Result<CheckpointManifest> {
    sst_format::decode_manifest(bytes).map_err(|e| Error::CheckpointCorrupt {
        file: name.to_string(),
        detail: e.to_string(),
    })
}

/// Every committed checkpoint in storage: `(manifest object name, id, backend id)`.
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

impl Checkpointer {
    /// Rebuilds the registry of `backend_id` from storage. With `restored`, the backend is new:
    /// its base is the restored checkpoint, and the restored checkpoint plus the older
    /// committed checkpoints of the same source backend are retained as its own (claimed).
    pub(crate) fn open(
        storage: Arc<dyn CheckpointStorage>,
        backend_id: String,
        options: CheckpointOptions,
        staging_root: PathBuf,
        restored: Option<RestoredBase>,
    ) -> Result<Checkpointer> {
        options.validate()?;
        let cp = Checkpointer {
            storage,
            backend_id,
            options,
            staging_root,
            book: Mutex::new(Book::default()),
            cache: Mutex::new(HashMap::new()),
            gc_lock: Mutex::new(()),
            sst_ids: Mutex::new(HashMap::new()),
        };
        let objects = cp.storage.list(layout::CHECKPOINT_PREFIX)?;
        let mut book = Book::default();
        match restored {
            Some(r) => {
                let restored_id = r.manifest.checkpoint_id;
                let mut retained: Vec<Retained> = Vec::new();
                let sources = std::iter::once((r.metadata_name.clone(), Arc::clone(&r.manifest)))
                    .chain(r.others.iter().cloned());
                for (name, m) in sources {
                    let source = m.backend_id.clone();
                    retained.extend(
                        objects
                            .iter()
                            .filter_map(|o| layout::parse_checkpoint_object(&o.name))
                            .filter(|p| {
                                p.is_metadata() && p.backend_id == source && p.id < m.checkpoint_id
                            })
                            .map(|p| Retained {
                                id: p.id,
                                backend_id: source.clone(),
                                manifest: None,
                            }),
                    );
                    retained.push(Retained {
                        id: m.checkpoint_id,
                        backend_id: source,
                        manifest: Some(Arc::clone(&m)),
                    });
                    cp.cache.lock().insert(name, m);
                }
                retained.sort_by(|x, y| (x.id, &x.backend_id).cmp(&(y.id, &y.backend_id)));
                retained.dedup_by(|x, y| (x.id, &x.backend_id) == (y.id, &y.backend_id));
                for r in &retained {
                    let claim = layout::claim_name(r.id, &r.backend_id, &cp.backend_id);
                    cp.storage.put_bytes(&claim, b"")?;
                }
                book.retained = retained;
                // The reuse base: every merged manifest's shared files, since a rescale ingests
                // the other sources' SSTs as they are (snapshot matches them by unique id).
                book.base = Some(if r.others.is_empty() {
                    r.manifest
                } else {
                    let mut merged = (*r.manifest).clone();
                    merged.shared_files.extend(
                        r.others
                            .iter()
                            .flat_map(|(_, m)| m.shared_files.iter().cloned()),
                    );
                    Arc::new(merged)
                });
                book.last_completed = Some(restored_id);
                book.max_seen = Some(restored_id);
            }
            None => {
                let own: Vec<_> = objects
                    .iter()
                    .filter_map(|o| layout::parse_checkpoint_object(&o.name))
                    .filter(|p| p.backend_id == cp.backend_id)
                    .collect();
                book.max_seen = own.iter().map(|p| p.id).max();
                let mut committed: Vec<u64> = own
                    .iter()
                    .filter(|p| p.is_metadata())
                    .map(|p| p.id)
                    .collect();
                committed.sort_unstable();
                if let Some(&newest) = committed.last() {
                    let m = cp.load_manifest(&layout::metadata_name(newest, &cp.backend_id))?;
                    book.base = Some(m);
                    book.last_completed = Some(newest);
                }
                let mut retained: Vec<Retained> = committed
                    .into_iter()
                    .map(|id| Retained {
                        id,
                        backend_id: cp.backend_id.clone(),
                        manifest: book.base.clone().filter(|b| b.checkpoint_id == id),
                    })
                    .collect();
                // Checkpoints of other backends this one claimed when it was restored and has
                // not released yet.
                let committed_names: HashSet<String> =
                    objects.iter().map(|o| o.name.clone()).collect();
                for o in cp.storage.list(layout::CLAIM_PREFIX)? {
                    if let Some((id, source, claimer)) = layout::parse_claim(&o.name) {
                        if claimer == cp.backend_id
                            && committed_names.contains(&layout::metadata_name(id, source))
                        {
                            retained.push(Retained {
                                id,
                                backend_id: source.to_string(),
                                manifest: None,
                            });
                        }
                    }
                }
                retained.sort_by(|x, y| (x.id, &x.backend_id).cmp(&(y.id, &y.backend_id)));
                book.retained = retained;
            }
        }
        *cp.book.lock() = book;
        Ok(cp)
    }

    /// Loads (or takes from the cache) the manifest object `name`.
    pub(crate) fn load_manifest(&self, name: &str) -> Result<Arc<CheckpointManifest>> {
        if let Some(m) = self.cache.lock().get(name) {
            return Ok(Arc::clone(m));
        }
        let bytes = self.storage.get_bytes(name)?;
        let m = Arc::new(decode_manifest_named(name, &bytes)?);
        self.cache.lock().insert(name.to_string(), Arc::clone(&m));
        Ok(m)
    }

    /// The last completed checkpoint id.
    pub(crate) fn last_completed(&self) -> Option<u64> {
        self.book.lock().last_completed
    }

    /// Ids of the retained completed checkpoints, ascending, with their backend ids.
    pub(crate) fn retained(&self) -> Vec<(u64, String)> {
        self.book
            .lock()
            .retained
            .iter()
            .map(|r| (r.id, r.backend_id.clone()))
            .collect()
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
        let protected: HashSet<String> = base
            .iter()
            .flat_map(|m| m.shared_files.iter().map(|f| f.remote_name.clone()))
            .collect();
        if let Some((names, ids)) = &mut b.sweep_log {
            names.extend(protected.iter().cloned());
            ids.insert(id);
        }
        b.pending.insert(
            id,
            PendingEntry {
                aborted: false,
                protected,
            },
        );
        Ok(base)
    }

    /// Marks `names` (new shared uploads of pending checkpoint `id`) as in flight.
    pub(crate) fn protect(&self, id: u64, names: &[String]) {
        let mut b = self.book.lock();
        if let Some((log, _)) = &mut b.sweep_log {
            log.extend(names.iter().cloned());
        }
        if let Some(p) = b.pending.get_mut(&id) {
            p.protected.extend(names.iter().cloned());
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
    }

    /// Records that checkpoint `id`'s manifest is in storage. If it was aborted meanwhile, or
    /// is already subsumed by a newer completed checkpoint, deletes it again and returns
    /// [`Error::CheckpointAborted`].
    pub(crate) fn committed(
        &self,
        id: u64,
        metadata_name: &str,
        manifest: Arc<CheckpointManifest>,
        new_shared: Vec<String>,
    ) -> Result<()> {
        let discard = {
            let mut b = self.book.lock();
            let aborted = b.pending.remove(&id).is_some_and(|p| p.aborted);
            let subsumed = b.last_completed.is_some_and(|lc| id < lc);
            if aborted || subsumed {
                true
            } else {
                self.cache
                    .lock()
                    .insert(metadata_name.to_string(), Arc::clone(&manifest));
                b.uploaded.insert(
                    id,
                    UploadedEntry {
                        manifest,
                        new_shared: new_shared.clone(),
                    },
                );
                false
            }
        };
        if discard {
            let _guard = self.gc_lock.lock();
            self.delete_checkpoint_dir(id, &self.backend_id.clone())?;
            for name in &new_shared {
                self.storage.delete(name)?;
            }
            return Err(Error::CheckpointAborted { id });
        }
        Ok(())
    }

    /// `notify_checkpoint_complete`: see `KeyedBackend::notify_checkpoint_complete`.
    pub(crate) fn complete(&self, id: u64) -> Result<()> {
        let dropped = {
            let mut b = self.book.lock();
            if b.last_completed.is_some_and(|lc| id <= lc) {
                return Ok(()); // late: already subsumed
            }
            if !b.uploaded.contains_key(&id) {
                return Err(Error::UnknownCheckpoint { id });
            }
            // Every uploaded checkpoint up to `id` is complete too (a newer completion
            // subsumes older ones whose notification was lost or is late).
            let ids: Vec<u64> = b.uploaded.range(..=id).map(|(k, _)| *k).collect();
            for k in ids {
                let Some(u) = b.uploaded.remove(&k) else {
                    continue;
                };
                if k == id {
                    b.base = Some(Arc::clone(&u.manifest));
                }
                let backend_id = self.backend_id.clone();
                b.retained.push(Retained {
                    id: k,
                    backend_id,
                    manifest: Some(u.manifest),
                });
            }
            b.retained
                .sort_by(|x, y| (x.id, &x.backend_id).cmp(&(y.id, &y.backend_id)));
            b.last_completed = Some(id);
            // Retention counts checkpoint ids: a rescaled backend retains several manifests
            // of one id (one per source backend).
            let mut ids: Vec<u64> = b.retained.iter().map(|r| r.id).collect();
            ids.dedup();
            let keep_from = ids
                .len()
                .checked_sub(self.options.retained)
                .and_then(|n| ids.get(n))
                .copied()
                .unwrap_or(0);
            let n = b.retained.iter().take_while(|r| r.id < keep_from).count();
            let dropped: Vec<Retained> = b.retained.drain(..n).collect();
            dropped
        };
        if dropped.is_empty() {
            return Ok(());
        }
        self.drop_checkpoints(dropped)
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
        let _guard = self.gc_lock.lock();
        self.delete_checkpoint_dir(id, &self.backend_id.clone())?;
        // Nothing else can reference these: names are fresh, and only completed checkpoints
        // are reused from.
        for name in &uploaded.new_shared {
            self.storage.delete(name)?;
        }
        Ok(())
    }

    /// Deletes `_metadata` first, then every other object of the checkpoint directory.
    fn delete_checkpoint_dir(&self, id: u64, backend_id: &str) -> Result<()> {
        let meta = layout::metadata_name(id, backend_id);
        self.storage.delete(&meta)?;
        self.cache.lock().remove(&meta);
        for o in self.storage.list(&layout::checkpoint_dir(id, backend_id))? {
            self.storage.delete(&o.name)?;
        }
        Ok(())
    }

    /// Drops retained checkpoints: their directories, then every shared file of theirs that no
    /// remaining manifest references and nothing in flight uses.
    fn drop_checkpoints(&self, dropped: Vec<Retained>) -> Result<()> {
        let _guard = self.gc_lock.lock();
        let mut candidates: HashSet<String> = HashSet::new();
        for r in &dropped {
            if r.backend_id != self.backend_id {
                let claim = layout::claim_name(r.id, &r.backend_id, &self.backend_id);
                self.storage.delete(&claim)?;
            }
            if !self
                .storage
                .list(&layout::claim_dir(r.id, &r.backend_id))?
                .is_empty()
            {
                // Another backend still claims it: the last claimer deletes it.
                continue;
            }
            let manifest = match &r.manifest {
                Some(m) => Some(Arc::clone(m)),
                // A missing or unreadable manifest: its files become orphans for the sweep.
                None => self
                    .load_manifest(&layout::metadata_name(r.id, &r.backend_id))
                    .ok(),
            };
            if let Some(m) = manifest {
                candidates.extend(m.shared_files.iter().map(|f| f.remote_name.clone()));
            }
            self.delete_checkpoint_dir(r.id, &r.backend_id)?;
        }
        let referenced = self.referenced_in_storage()?;
        let (protected, _) = self.book.lock().protected();
        for name in candidates {
            if !referenced.contains(&name) && !protected.contains(&name) {
                self.storage.delete(&name)?;
            }
        }
        Ok(())
    }

    /// Shared names referenced by any manifest in storage (decoding all of them; an
    /// undecodable manifest is an error, since what it references is unknown).
    fn referenced_in_storage(&self) -> Result<HashSet<String>> {
        let committed = list_committed(self.storage.as_ref())?;
        let live: HashSet<&str> = committed.iter().map(|(n, _, _)| n.as_str()).collect();
        self.cache.lock().retain(|k, _| live.contains(k.as_str()));
        let mut referenced = HashSet::new();
        for (name, _, _) in &committed {
            match self.load_manifest(name) {
                Ok(m) => referenced.extend(m.shared_files.iter().map(|f| f.remote_name.clone())),
                // Deleted between list and read (another backend's GC): references nothing.
                Err(Error::ObjectNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(referenced)
    }

    /// The orphan sweep: see `KeyedBackend::sweep_orphans`.
    pub(crate) fn sweep(&self, min_age: Duration) -> Result<SweepStats> {
        let _guard = self.gc_lock.lock();
        self.book.lock().sweep_log = Some(Default::default());
        let result = self.sweep_locked(min_age);
        self.book.lock().sweep_log = None;
        result
    }

    fn sweep_locked(&self, min_age: Duration) -> Result<SweepStats> {
        let now = SystemTime::now();
        let old_enough = |o: &ObjectInfo| {
            now.duration_since(o.last_modified)
                .map(|age| age >= min_age)
                .unwrap_or(min_age.is_zero())
        };
        // 1. Classify.
        let shared = self.storage.list(layout::SHARED_PREFIX)?;
        let chk_objects = self.storage.list(layout::CHECKPOINT_PREFIX)?;
        let mut dirs: BTreeMap<(u64, String), Vec<ObjectInfo>> = BTreeMap::new();
        for o in chk_objects {
            if let Some(p) = layout::parse_checkpoint_object(&o.name) {
                let key = (p.id, p.backend_id.to_string());
                dirs.entry(key).or_default().push(o);
            }
        }
        let referenced = self.referenced_in_storage()?;
        let (protected, own_ids) = self.book.lock().protected();
        let orphan_shared: Vec<&ObjectInfo> = shared
            .iter()
            .filter(|o| layout::is_shared_name(&o.name))
            .filter(|o| !referenced.contains(&o.name) && !protected.contains(&o.name))
            .filter(|o| old_enough(o))
            .collect();
        let uncommitted: Vec<(&(u64, String), &Vec<ObjectInfo>)> = dirs
            .iter()
            .filter(|(_, objs)| {
                !objs
                    .iter()
                    .any(|o| o.name.ends_with(&format!("/{}", layout::METADATA_FILE)))
            })
            .filter(|((id, backend), _)| !(backend == &self.backend_id && own_ids.contains(id)))
            .filter(|(_, objs)| objs.iter().all(&old_enough))
            .collect();
        // 2. Delete.
        let mut stats = SweepStats::default();
        for o in orphan_shared {
            self.storage.delete(&o.name)?;
            stats.shared_deleted += 1;
            stats.bytes_deleted += o.size;
        }
        for ((id, backend), objs) in uncommitted {
            // Re-check: a manifest may have been committed since the listing.
            let now_there = self.storage.list(&layout::checkpoint_dir(*id, backend))?;
            if now_there
                .iter()
                .any(|o| o.name.ends_with(layout::METADATA_FILE))
            {
                continue;
            }
            for o in objs {
                self.storage.delete(&o.name)?;
                stats.private_deleted += 1;
                stats.bytes_deleted += o.size;
            }
        }
        stats.incomplete_deleted = self.storage.sweep_incomplete(min_age)?;
        Ok(stats)
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

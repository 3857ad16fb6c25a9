//! Local recovery: the files of recently uploaded checkpoints stay on local disk, so a restart
//! on the same machine restores from them instead of downloading everything.
//!
//! After a successful upload the staging directory (a complete RocksDB checkpoint whose SSTs
//! are hard links into the live database) is renamed to `local-<id>` next to it instead of
//! being deleted (paths in [`super::layout`]). Copies are kept only for this backend's
//! retained checkpoints and for uploaded checkpoints not yet completed; the rest are deleted
//! after every upload and completion, so the disk cost is bounded by the retained count.
//!
//! On restore ([`LocalSource`]), each file the manifest lists is first looked up in the
//! source backend's local copy of that checkpoint. A local file is used only if its size and
//! CRC-32 match the manifest and, for SSTs, its footer and unique id do too; then SSTs are
//! hard-linked (immutable) and other files copied (RocksDB may rewrite them). Anything
//! missing or damaged is downloaded. [`RestoreReport`] says how many bytes came from where.
//!
//! Copies of backends that are gone (their staging lock is free) go when no restart would use
//! them: after a restore, every gone backend's copy that no task restoring the same cut reads;
//! after a completion, the gone backends' older copies. So the copy a restore used stays until
//! the restored backend has completed a checkpoint of its own, and a restart that dies before
//! then restores locally again. A backend restored as it is in changelog mode links the
//! materialization's copy in as its own ([`adopt`]), since its log checkpoints stand on it
//! (docs/checkpoint-format.md §10).
//!
//! This module owns the local copies; restore calls it through one hook in its download.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};

use sst_format::SstUniqueId;

use super::layout;
use super::registry::{Checkpointer, STAGING_LOCK};
use crate::error::{Error, Result};
use crate::storage::{lock_in_place, STAGING_SWEEPS};

/// Where the files of a restore came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// The manifest restored (`chk-<id>/<backend>/_metadata`).
    pub checkpoint: String,
    /// Files taken from the local copy (verified).
    pub files_local: usize,
    /// Bytes of those files.
    pub bytes_local: u64,
    /// Files downloaded from checkpoint storage.
    pub files_downloaded: usize,
    /// Bytes of those files.
    pub bytes_downloaded: u64,
    /// Shared SSTs hard-linked from another restore's verified copy instead of fetched
    /// ([`crate::SharedFetches`]): another restore of this process, or another source of a
    /// rescale that lists the same file.
    pub files_shared: usize,
    /// Bytes of those files.
    pub bytes_shared: u64,
    /// Rescaling: SST files of the base checkpoint neither downloaded nor taken from a local
    /// copy, because their keys lie wholly outside the restored key groups (their ranges are
    /// in the manifest, version 2; docs/rescale.md §2).
    pub files_skipped: usize,
    /// Bytes of those files.
    pub bytes_skipped: u64,
    /// Rescaling: SST files of the other sources ingested as they are (hard-linked, keeping
    /// their sequence numbers), not rewritten.
    pub sst_files_linked: usize,
    /// Rescaling: SST files the fallback wrote (scanned from another source) and ingested.
    pub sst_files_rewritten: usize,
    /// Rescaling: entries the fallback copied into those files.
    pub entries_rewritten: u64,
    /// Rescaling: SST files of the base checkpoint wholly inside the key groups another
    /// source provides that RocksDB does not drop by key range (level 0: typically the range
    /// tombstone an earlier split flushed), dropped by rebuilding the base's column family
    /// from its other files, so that the files both sources hold serve those key groups as
    /// they are (docs/rescale.md §2).
    pub sst_files_dropped: usize,
    /// Rescaling: ingestions of another source's SST files (one per state) that RocksDB
    /// refused, so that state took the fallback.
    pub sst_ingestions_refused: usize,
    /// Changelog mode: log segments downloaded and replayed onto the materializations (those
    /// after the log's tables).
    pub log_segments: usize,
    /// Bytes of those segments.
    pub log_bytes: u64,
    /// Changelog mode: log tables ingested in place of the segments they cover
    /// (`sst_format::LogTable`).
    pub log_tables: usize,
    /// Bytes of their files.
    pub log_table_bytes: u64,
    /// Batches those segments were downloaded and replayed in (see
    /// `ChangelogOptions::replay_batch_bytes`), summed over the replayed sources.
    pub log_batches: usize,
    /// Log entries applied.
    pub log_entries_replayed: u64,
    /// Log entries of keyed states in key groups outside the restored range, not applied.
    pub log_entries_skipped: u64,
}

/// Keeps the staging directory `staging` of checkpoint `id`, just uploaded, as its local
/// copy, then prunes copies no longer needed. Failures only cost local recovery: they are
/// ignored (the next restore downloads).
pub(crate) fn keep(cp: &Checkpointer, staging: &Path, id: u64) {
    if !cp.options.local_recovery {
        let _ = fs::remove_dir_all(staging);
        return;
    }
    let target = layout::local_copy_dir(&cp.staging_root, &cp.backend_id, id);
    let _ = fs::remove_dir_all(&target);
    if fs::rename(staging, &target).is_err() {
        let _ = fs::remove_dir_all(staging);
    }
    prune(cp);
}

/// Deletes this backend's local copies other than those of the retained checkpoints its
/// owner keeps in this process (the last completed one where the owner is elsewhere) and of
/// uploaded checkpoints newer than the last completed one.
pub(crate) fn prune(cp: &Checkpointer) {
    let last = cp.last_completed().unwrap_or(0);
    let mut keep: Vec<u64> = match cp.owner() {
        Some(owner) => owner.retained(),
        None => vec![last],
    };
    // Changelog mode: a log checkpoint's files are its materialization's.
    keep.extend(cp.base_materialization());
    let dir = cp.staging_root.join(&cp.backend_id);
    for (id, path) in local_copies(&dir) {
        if id <= last && !keep.contains(&id) {
            let _ = fs::remove_dir_all(path);
        }
    }
}

/// Checkpoint `id` was aborted: its local copy can never be restored (an uploaded checkpoint
/// that did not complete never will), unless it is a completed one or the materialization the
/// last completed log checkpoint stands on.
pub(crate) fn forget(cp: &Checkpointer, id: u64) {
    if cp.last_completed().is_some_and(|last| id <= last) || cp.base_materialization() == Some(id) {
        return;
    }
    let _ = fs::remove_dir_all(layout::local_copy_dir(&cp.staging_root, &cp.backend_id, id));
}

/// After a restore of checkpoint `restored`: the local copies of every backend under
/// `staging_root` that is gone (its staging lock is free) that no task restoring the same cut
/// reads. `cut_copies` are those it reads, (backend id, copy id), where the whole cut is known;
/// without it only the copies of checkpoints above `restored` go, attempts that did not
/// complete before the job restarted. Copies of older checkpoints are ones a restored backend
/// kept for its restarts ([`LocalSource::retire_others`]) and did not live to retire. Another
/// job sharing the staging root pays at most a download. A gone backend left with no copy
/// goes whole, so a job restarting on one machine leaves no directory per restart.
pub(crate) fn retire_unused(
    staging_root: &Path,
    restored: u64,
    cut_copies: Option<&[(String, u64)]>,
) {
    retire_gone(staging_root, |backend, id| match cut_copies {
        Some(keep) => !keep.iter().any(|(b, i)| b == backend && *i == id),
        None => id > restored,
    });
}

/// After checkpoint `completed` completed: the local copies of older checkpoints of every
/// gone backend under `staging_root` are superseded, since a restart restores `completed`
/// from the live backends' own copies. This retires the copy a restore was taken from
/// ([`LocalSource::retire_others`] keeps it for restarts that die before completing anything)
/// once the restored backend has one of its own.
pub(crate) fn retire_superseded(staging_root: &Path, completed: u64) {
    retire_gone(staging_root, |_, id| id < completed);
}

/// Removes the local copies `retire` picks by (backend id, checkpoint id) in every gone
/// backend's directory under `staging_root`, and a directory left with no copy whole.
fn retire_gone(staging_root: &Path, retire: impl Fn(&str, u64) -> bool) {
    let _sweeps = STAGING_SWEEPS.lock();
    for b in fs::read_dir(staging_root).into_iter().flatten().flatten() {
        let dir = b.path();
        if !dir.is_dir() {
            continue;
        }
        let lock_path = dir.join(STAGING_LOCK);
        let Some(lock) = lock_in_place(&lock_path) else {
            continue;
        };
        let backend = b.file_name().to_string_lossy().into_owned();
        let mut left = 0;
        for (id, path) in local_copies(&dir) {
            if retire(&backend, id) {
                let _ = fs::remove_dir_all(path);
            } else {
                left += 1;
            }
        }
        if left == 0 {
            remove_backend_dir(&dir, lock);
        }
    }
}

/// A backend restored as it is from a changelog-mode checkpoint on this machine: its log
/// checkpoints stand on the restored materialization `id`, whose files are in the source
/// backend's local copy `copy`, so it makes that copy its own (hard links, or copies where
/// links fail) as `local-<id>`. A restore of its checkpoints looks for the copy under its
/// id (docs/checkpoint-format.md §10); [`prune`] keeps it while it is the base
/// materialization, and the source's goes at the first completion ([`retire_superseded`]).
/// Failures only cost local recovery: a copy linked in part is dropped.
pub(crate) fn adopt(cp: &Checkpointer, copy: &Path, id: u64) {
    let target = layout::local_copy_dir(&cp.staging_root, &cp.backend_id, id);
    if target.exists() {
        return;
    }
    let linked = (|| {
        fs::create_dir(&target)?;
        for e in fs::read_dir(copy)? {
            let e = e?;
            let to = target.join(e.file_name());
            if fs::hard_link(e.path(), &to).is_err() {
                fs::copy(e.path(), &to)?;
            }
        }
        Ok::<_, std::io::Error>(())
    })();
    if linked.is_err() {
        let _ = fs::remove_dir_all(&target);
    }
}

/// At a reopen of backend `backend_id`'s directory (its staging lock held): its local copies
/// above `last_completed` are of uploads an earlier process of it began and never saw
/// complete, which this process cannot complete either (it knows no upload of theirs), so no
/// restore on this machine would use them. Without this, every process killed mid-upload
/// left one RocksDB checkpoint behind until a checkpoint completed.
pub(crate) fn retire_own_dead_attempts(staging_root: &Path, backend_id: &str, last_completed: u64) {
    for (id, path) in local_copies(&staging_root.join(backend_id)) {
        if id > last_completed {
            let _ = fs::remove_dir_all(path);
        }
    }
}

/// Removes a gone backend's staging directory whose local copies are gone: its changelog
/// segments (only its own process used them), then its lock file while `lock` still holds
/// it, then the directory (left in place if anything else is in it).
fn remove_backend_dir(backend_dir: &Path, lock: File) {
    let _ = fs::remove_dir_all(backend_dir.join(layout::LOG_DIR_NAME));
    let _ = fs::remove_file(backend_dir.join(STAGING_LOCK));
    drop(lock);
    let _ = fs::remove_dir(backend_dir);
}

/// The local copies in a backend's staging directory, `(checkpoint id, path)`.
fn local_copies(dir: &Path) -> Vec<(u64, PathBuf)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let id = layout::parse_local_copy_dir(e.file_name().to_str()?)?;
            Some((id, e.path()))
        })
        .collect()
}

/// The local copy a restore may take files from.
#[derive(Debug)]
pub(crate) struct LocalSource {
    dir: PathBuf,
}

impl LocalSource {
    /// The local copy of checkpoint `id` of `backend_id` under `staging_root`, if present.
    pub(crate) fn find(staging_root: &Path, backend_id: &str, id: u64) -> Option<LocalSource> {
        let dir = layout::local_copy_dir(staging_root, backend_id, id);
        dir.is_dir().then_some(LocalSource { dir })
    }

    /// The copy's directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Places file `local_name` at `dest` from the local copy if it is there and matches
    /// `size`, `crc32` and (for SSTs) `sst_id`; returns whether it did. `Ok(false)` means
    /// "download it" (`dest` is then absent); only a failure to remove a rejected `dest` is an
    /// error. The file is placed first (SSTs hard-linked, they are immutable; other files
    /// copied, RocksDB may rewrite them) and checked where it was placed: a concurrent restore
    /// of the same source that retires its copies meanwhile ([`LocalSource::retire_backend`])
    /// can then only make the placing fail, never take away a file already checked.
    pub(crate) fn fetch(
        &self,
        local_name: &str,
        size: u64,
        crc32: u32,
        sst_id: Option<&SstUniqueId>,
        dest: &Path,
    ) -> Result<bool> {
        let src = self.dir.join(local_name);
        let placed = if sst_id.is_some() {
            fs::hard_link(&src, dest).or_else(|_| fs::copy(&src, dest).map(|_| ()))
        } else {
            fs::copy(&src, dest).map(|_| ())
        };
        let good = placed.is_ok()
            && matches!(digest_of(dest), Some(d) if d == (size, crc32))
            && sst_id.is_none_or(
                |id| matches!(sst_format::read_sst_meta(dest), Ok(meta) if meta.unique_id == *id),
            );
        if !good {
            match fs::remove_file(dest) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(dest, e)),
            }
        }
        Ok(good)
    }

    /// After a restore from this copy with local recovery on: deletes the source backend's
    /// other local copies and its changelog segments, once that backend is gone, and keeps this
    /// one. The restored backend has a new id and no copy of its own until its first completed
    /// checkpoint, so a restart that dies before then restores from this copy again instead of
    /// downloading everything; that completion retires it ([`retire_superseded`]).
    pub(crate) fn retire_others(&self) {
        self.retire(true);
    }

    /// Deletes every local copy of the backend this source belongs to, and its directory:
    /// after a restore with local recovery off nothing would ever prune the old backend's
    /// copies.
    pub(crate) fn retire_backend(&self) {
        self.retire(false);
    }

    /// Deletes the source backend's local copies (but this one with `keep_this`) and its
    /// changelog segments, and with no copy left its directory. Only once that backend is gone:
    /// while it is open it holds its staging lock, prunes its own copies and still needs its
    /// changelog segments (a restore beside a live backend, on the same machine, retires
    /// nothing).
    fn retire(&self, keep_this: bool) {
        let Some(backend_dir) = self.dir.parent() else {
            return;
        };
        let lock_path = backend_dir.join(STAGING_LOCK);
        // A sibling restoring at the same moment would hold the lock for an instant to check
        // whether this backend is gone, and a retire skipped then is never retried.
        let _sweeps = STAGING_SWEEPS.lock();
        let Some(lock) = lock_in_place(&lock_path) else {
            return;
        };
        for (_, path) in local_copies(backend_dir) {
            if !(keep_this && path == self.dir) {
                let _ = fs::remove_dir_all(path);
            }
        }
        if keep_this {
            let _ = fs::remove_dir_all(backend_dir.join(layout::LOG_DIR_NAME));
        } else {
            remove_backend_dir(backend_dir, lock);
        }
    }
}

/// Size and CRC-32 of a local file, `None` if it cannot be read.
fn digest_of(path: &Path) -> Option<(u64, u32)> {
    let mut file = File::open(path).ok()?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
                size += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some((size, hasher.finalize()))
}

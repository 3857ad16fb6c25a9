//! Incremental checkpoints (design.md §5–§6): the snapshot strategy (sync phase into a local
//! staging directory, async upload with SST reuse from the last completed checkpoint), the
//! per-backend registry of shared files (completion, abort, retained-N subsumption, orphan
//! sweep), the object naming scheme ([`layout`]) and storage verification.
//!
//! This module owns everything between a backend's RocksDB checkpoint and the objects in
//! [`CheckpointStorage`]; restore lives in `crate::restore`, the storage seam in
//! [`crate::storage`]. The on-storage layout and manifest usage are documented in
//! `docs/checkpoint-format.md`.
//!
//! ```no_run
//! use std::sync::Arc;
//! use rockstate::{KeyedBackend, LocalStorage, RestoreFrom};
//! # fn main() -> rockstate::Result<()> {
//! let storage = Arc::new(LocalStorage::new("/checkpoints/job-1")?);
//! let backend = KeyedBackend::builder("/data/op-0").checkpoint_storage(storage.clone()).open()?;
//! let pending = backend.snapshot(1)?; // sync phase: short
//! let stats = std::thread::spawn(move || pending.upload()).join().unwrap()?; // async phase
//! backend.notify_checkpoint_complete(stats.checkpoint_id)?;
//! // Later, elsewhere: restore the newest checkpoint into a fresh directory.
//! let restored = KeyedBackend::builder("/data/op-0-restored")
//!     .checkpoint_storage(storage)
//!     .restore(RestoreFrom::Latest)?;
//! # Ok(()) }
//! ```

pub mod layout;
pub(crate) mod local_recovery;
pub(crate) mod registry;
mod snapshot;
pub(crate) mod uploader;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use local_recovery::RestoreReport;
pub use snapshot::PendingSnapshot;

use crate::backend::KeyedBackend;
use crate::db::Cf;
use crate::error::{Error, Result};
use crate::keygroup::KeyGroupRange;
use crate::operator_state::OperatorState;
use crate::state::StateMeta;
use crate::storage::CheckpointStorage;
use registry::{Checkpointer, RestoredBase};

/// Key of the backend id in the metadata column family.
const META_BACKEND_ID: &[u8] = b"backend-id";

/// Checkpoint settings of one backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckpointOptions {
    /// Completed checkpoints kept in storage (the newest ones). Default 1. At least 1.
    pub retained: usize,
    /// Parallel file transfers per upload or restore. Default 4. At least 1.
    pub transfer_threads: usize,
    /// Reuse SSTs of the last completed checkpoint. Default true; false uploads every file
    /// every time (a "full" checkpoint whose files later checkpoints still cannot reuse,
    /// since nothing is reused at all).
    pub incremental: bool,
    /// Local staging root for RocksDB checkpoints; must be on the backend's filesystem so SSTs
    /// are hard-linked. Default: `.rockstate-staging` next to the backend directory.
    pub staging_dir: Option<PathBuf>,
    /// Local recovery: keep the files of this backend's retained (and uploaded, not yet
    /// completed) checkpoints in the staging root, so a restore on this machine reads them
    /// from disk after verifying them. Default true. Costs the disk of SSTs the live database
    /// has compacted away since.
    pub local_recovery: bool,
}

impl Default for CheckpointOptions {
    fn default() -> Self {
        CheckpointOptions {
            retained: 1,
            transfer_threads: 4,
            incremental: true,
            staging_dir: None,
            local_recovery: true,
        }
    }
}

impl CheckpointOptions {
    /// Checks every field's range.
    pub fn validate(&self) -> Result<()> {
        if self.retained == 0 {
            return Err(Error::InvalidOption {
                name: "retained",
                detail: "must be at least 1".into(),
            });
        }
        if self.transfer_threads == 0 || self.transfer_threads > 256 {
            return Err(Error::InvalidOption {
                name: "transfer_threads",
                detail: format!("{} is not in 1..=256", self.transfer_threads),
            });
        }
        Ok(())
    }
}

/// The figures of one checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointStats {
    /// The checkpoint id.
    pub checkpoint_id: u64,
    /// Duration of the sync phase (`snapshot`).
    pub sync_duration: Duration,
    /// Duration of the async phase (`upload`), manifest included.
    pub async_duration: Duration,
    /// Files uploaded (new SSTs plus private files).
    pub files_uploaded: usize,
    /// SSTs referenced from the last completed checkpoint instead of uploaded.
    pub files_reused: usize,
    /// Bytes of the uploaded files (the manifest not included).
    pub bytes_uploaded: u64,
    /// Size of the manifest (`_metadata`).
    pub manifest_bytes: u64,
    /// Full state size: all files the checkpoint references.
    pub state_bytes: u64,
}

/// What [`KeyedBackend::sweep_orphans`] deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepStats {
    /// Unreferenced shared files.
    pub shared_deleted: usize,
    /// Objects of uncommitted checkpoint directories (no `_metadata`).
    pub private_deleted: usize,
    /// Leftovers of unfinished puts (storage-specific).
    pub incomplete_deleted: usize,
    /// Bytes of the deleted shared and private objects.
    pub bytes_deleted: u64,
}

/// Which checkpoint to restore. The max parallelism must equal the builder's. If one
/// manifest's key-group range equals the builder's, that one is restored as is; otherwise the
/// restore rescales from the manifests of one checkpoint id that overlap the builder's range
/// (they must cover it and be disjoint: manifests claiming the same group are
/// [`Error::AmbiguousCheckpoint`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreFrom {
    /// The newest committed checkpoint id (one with a `_metadata`) whose manifests cover the
    /// builder's key groups.
    Latest,
    /// Checkpoint `id`: the manifests of every backend at that id that overlap the range.
    Checkpoint(u64),
    /// Checkpoint `checkpoint_id` of backend `backend_id` only; its range must contain the
    /// builder's (equal, or clipped).
    Exact {
        /// The checkpoint id.
        checkpoint_id: u64,
        /// The backend id.
        backend_id: String,
    },
    /// What an engine passes after a rescale: the latest completed checkpoint id and all
    /// backends' manifests of it; the restore picks the ones overlapping the builder's range.
    Handles {
        /// The checkpoint id.
        checkpoint_id: u64,
        /// Backend ids of every manifest of that checkpoint.
        backend_ids: Vec<String>,
    },
}

/// Result of [`verify_checkpoints`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Committed manifests found (and decoded).
    pub manifests: usize,
    /// Referenced files read and checked.
    pub files_checked: usize,
    /// `(file, what is wrong)` for every referenced file that is missing or differs from its
    /// manifest's size or CRC-32.
    pub problems: Vec<(String, String)>,
    /// Shared objects no manifest references.
    pub unreferenced_shared: Vec<String>,
}

/// Reads every committed manifest in `storage` and every file they reference, checking size
/// and CRC-32 (design.md §10 invariant 1); also lists shared objects nothing references.
/// An undecodable manifest is an error naming it.
pub fn verify_checkpoints(storage: &dyn CheckpointStorage) -> Result<VerifyReport> {
    let scratch = tempfile::tempdir().map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let mut report = VerifyReport::default();
    let mut referenced = HashSet::new();
    let mut checked = HashSet::new();
    for (name, _, _) in registry::list_committed(storage)? {
        let m = registry::decode_manifest_named(&name, &storage.get_bytes(&name)?)?;
        report.manifests += 1;
        let files = m
            .shared_files
            .iter()
            .map(|f| (&f.remote_name, f.size, f.crc32))
            .chain(
                m.private_files
                    .iter()
                    .map(|f| (&f.remote_name, f.size, f.crc32)),
            );
        for (remote, size, crc32) in files {
            referenced.insert(remote.clone());
            if !checked.insert((remote.clone(), size, crc32)) {
                continue;
            }
            report.files_checked += 1;
            let local = scratch.path().join(format!("f{}", report.files_checked));
            match storage.get_file(remote, &local) {
                Ok(d) if d.size == size && d.crc32 == crc32 => {}
                Ok(d) => report.problems.push((
                    remote.clone(),
                    format!(
                        "size {} crc32 {:08x}, manifest {name} says {size} / {crc32:08x}",
                        d.size, d.crc32
                    ),
                )),
                Err(e) => report.problems.push((remote.clone(), e.to_string())),
            }
            let _ = std::fs::remove_file(&local);
        }
    }
    for o in storage.list(layout::SHARED_PREFIX)? {
        if !referenced.contains(&o.name) {
            report.unreferenced_shared.push(o.name);
        }
    }
    report.unreferenced_shared.sort();
    Ok(report)
}

/// rockstate's state metadata in the manifest's representation (the same type: state
/// metadata is defined by `sst-format` so the manifest carries it verbatim).
pub(crate) fn to_manifest_state(s: &StateMeta) -> sst_format::StateMeta {
    s.clone()
}

/// Reads (or, for a new or restored database, creates) the backend id and, with storage,
/// builds the checkpoint registry. Called by `BackendBuilder::open`.
pub(crate) fn attach(
    meta: &Cf,
    storage: Option<Arc<dyn CheckpointStorage>>,
    options: &CheckpointOptions,
    restored: Option<RestoredBase>,
) -> Result<(String, Option<Arc<Checkpointer>>)> {
    options.validate()?;
    let stored = meta
        .get_with(META_BACKEND_ID, |b| String::from_utf8(b.to_vec()))?
        .transpose()
        .map_err(|_| Error::decode("backend id", "not UTF-8"))?;
    let backend_id = match (stored, restored.is_some()) {
        (Some(id), false) if layout::valid_local_name(&id) => id,
        (Some(_), false) => return Err(Error::decode("backend id", "invalid characters")),
        // New database, or a restored copy of another backend's: a new identity, made durable
        // now so a reopen of this directory never takes the source backend's name.
        (_, _) => {
            let id = layout::new_backend_id();
            meta.put(META_BACKEND_ID, id.as_bytes())?;
            meta.db().flush_all()?;
            id
        }
    };
    let checkpointer = match storage {
        None => None,
        Some(storage) => {
            let staging = options
                .staging_dir
                .clone()
                .unwrap_or_else(|| layout::default_staging_root(meta.db().path()));
            Some(Arc::new(Checkpointer::open(
                storage,
                backend_id.clone(),
                options.clone(),
                staging,
                restored,
            )?))
        }
    };
    Ok((backend_id, checkpointer))
}

impl KeyedBackend {
    fn checkpoint_ctx(&self) -> Result<&Arc<Checkpointer>> {
        self.database()?;
        self.checkpointer().ok_or(Error::NoCheckpointStorage)
    }

    /// The sync phase of checkpoint `checkpoint_id` (ids must increase): a RocksDB checkpoint
    /// (memtables flushed, SSTs hard-linked) into a local staging directory, plus the state
    /// metadata. Short; the task may keep reading and writing as soon as it returns. Move the
    /// result to another thread and call [`PendingSnapshot::upload`].
    pub fn snapshot(&self, checkpoint_id: u64) -> Result<PendingSnapshot> {
        self.snapshot_with(checkpoint_id, &OperatorState::new())
    }

    /// [`KeyedBackend::snapshot`], also storing the operator's non-keyed state (as of this
    /// call) in the checkpoint's manifest; read it back with [`read_operator_states`].
    pub fn snapshot_with(
        &self,
        checkpoint_id: u64,
        operator_state: &OperatorState,
    ) -> Result<PendingSnapshot> {
        let _span = tracing::info_span!("checkpoint.sync", id = checkpoint_id).entered();
        let start = Instant::now();
        let cp = Arc::clone(self.checkpoint_ctx()?);
        let base = cp.begin(checkpoint_id)?;
        let dir = layout::staging_dir(&cp.staging_root, &cp.backend_id, checkpoint_id);
        // From here on, dropping `pending` unregisters the attempt and removes `dir`.
        let mut pending = PendingSnapshot {
            id: checkpoint_id,
            dir,
            cp,
            base,
            states: Vec::new(),
            operator_state: operator_state.snapshot(),
            key_groups: self.key_groups(),
            max_parallelism: self.max_parallelism(),
            sync_duration: Duration::ZERO,
            finished: false,
            metrics: Arc::clone(self.checkpoint_metrics_cell()),
        };
        pending.states = self.states()?.iter().map(to_manifest_state).collect();
        prepare_staging(&pending.dir)?;
        self.database()?.checkpoint(&pending.dir)?;
        pending.sync_duration = start.elapsed();
        Ok(pending)
    }

    /// Sync and async phase on the calling thread: `snapshot(id)?.upload()`.
    pub fn checkpoint(&self, checkpoint_id: u64) -> Result<CheckpointStats> {
        self.snapshot(checkpoint_id)?.upload()
    }

    /// Sync and async phase on the calling thread, with operator state:
    /// `snapshot_with(id, operator_state)?.upload()`.
    pub fn checkpoint_with(
        &self,
        checkpoint_id: u64,
        operator_state: &OperatorState,
    ) -> Result<CheckpointStats> {
        self.snapshot_with(checkpoint_id, operator_state)?.upload()
    }

    /// Checkpoint `checkpoint_id` completed (job-wide): it becomes the base SSTs are reused
    /// from, uploaded checkpoints with smaller ids count as completed too, and completed
    /// checkpoints beyond the newest `retained` are deleted with every shared file no
    /// remaining manifest references. A late notification (id not newer than the last
    /// completed) is ignored; an id this backend has not finished uploading is
    /// [`Error::UnknownCheckpoint`] and changes nothing. A deletion error is returned after
    /// the completion itself took effect.
    pub fn notify_checkpoint_complete(&self, checkpoint_id: u64) -> Result<()> {
        // Completion also drops subsumed checkpoints: the span covers that garbage collection.
        let _span = tracing::info_span!("checkpoint.notify", id = checkpoint_id, kind = "complete")
            .entered();
        let cp = self.checkpoint_ctx()?;
        let result = cp.complete(checkpoint_id);
        local_recovery::prune(cp);
        result
    }

    /// Checkpoint `checkpoint_id` was aborted: deletes exactly what that attempt uploaded (its
    /// new shared files and its checkpoint directory). An attempt still uploading stops and
    /// cleans up itself (its `upload` returns [`Error::CheckpointAborted`]). Completed or
    /// unknown ids are ignored.
    pub fn notify_checkpoint_aborted(&self, checkpoint_id: u64) -> Result<()> {
        let _span =
            tracing::info_span!("checkpoint.notify", id = checkpoint_id, kind = "abort").entered();
        self.checkpoint_ctx()?.abort(checkpoint_id)
    }

    /// Deletes garbage older than `min_age`: shared files no manifest in storage references
    /// and no checkpoint of this backend has in flight, and checkpoint directories without
    /// `_metadata` that are not in flight here. Classifies everything first, deletes after.
    /// Checkpoints in flight in *other* processes are protected only by `min_age`: use more
    /// than the longest upload when several processes share the storage.
    pub fn sweep_orphans(&self, min_age: Duration) -> Result<SweepStats> {
        let _span = tracing::info_span!("checkpoint.gc").entered();
        self.checkpoint_ctx()?.sweep(min_age)
    }

    /// A bare RocksDB checkpoint of this backend into `dir` (must not exist), without any
    /// registry work: the baseline `rockstate bench checkpoint` compares the sync phase with.
    #[doc(hidden)]
    pub fn bare_rocksdb_checkpoint(&self, dir: &Path) -> Result<()> {
        self.database()?.checkpoint(dir)
    }

    /// The last completed (or restored-from) checkpoint id.
    pub fn last_completed_checkpoint(&self) -> Option<u64> {
        self.checkpointer().and_then(|c| c.last_completed())
    }

    /// Retained completed checkpoints `(id, backend id)`, oldest first (the restored-from
    /// checkpoint counts as retained until subsumed).
    pub fn retained_checkpoints(&self) -> Vec<(u64, String)> {
        self.checkpointer()
            .map(|c| c.retained())
            .unwrap_or_default()
    }
}

/// The operator states stored in checkpoint `checkpoint_id` by every backend (operator
/// instance) that committed it to `storage`, ordered by instance (key-group range), ready for
/// [`crate::operator_state::redistribute`]. Every manifest is verified (checksum, and that it
/// describes the checkpoint its name says). The manifests' key-group ranges must tile the key
/// groups exactly: a missing instance (say, one whose upload failed) or two backends claiming
/// the same groups is a typed error, never a silently lost or duplicated element.
pub fn read_operator_states(
    storage: &dyn CheckpointStorage,
    checkpoint_id: u64,
) -> Result<Vec<OperatorState>> {
    let mut parts = Vec::new();
    let mut max_parallelism = None;
    for (name, id, backend) in registry::list_committed(storage)? {
        if id != checkpoint_id {
            continue;
        }
        let m = registry::decode_manifest_named(&name, &storage.get_bytes(&name)?)?;
        if m.checkpoint_id != id || m.backend_id != backend {
            return Err(Error::CheckpointCorrupt {
                file: name,
                detail: format!(
                    "manifest describes checkpoint {} of backend {}",
                    m.checkpoint_id, m.backend_id
                ),
            });
        }
        if *max_parallelism.get_or_insert(m.max_parallelism) != m.max_parallelism {
            return Err(Error::CheckpointCorrupt {
                file: name,
                detail: format!(
                    "max parallelism {} differs from the other manifests' of checkpoint {id}",
                    m.max_parallelism
                ),
            });
        }
        let range = KeyGroupRange::new(m.key_group_start, m.key_group_end)?;
        parts.push((range, OperatorState::from_snapshot(m.operator_state)?));
    }
    let Some(max_parallelism) = max_parallelism else {
        return Err(Error::CheckpointNotFound(format!(
            "checkpoint {checkpoint_id}"
        )));
    };
    crate::operator_state::in_instance_order(parts, max_parallelism)
}

/// Makes sure `dir` does not exist (a leftover of a crashed attempt is removed) and its parent
/// does.
fn prepare_staging(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    Ok(())
}

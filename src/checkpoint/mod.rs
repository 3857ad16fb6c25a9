//! Incremental checkpoints: the snapshot strategy (sync phase into a local staging directory,
//! async upload with SST reuse from the last completed checkpoint), each backend's
//! bookkeeping of its attempts, the job's owner ([`JobOwner`]: completion records, retention
//! and the only deleter of committed objects; `docs/ownership.md`), the object naming scheme
//! ([`layout`]) and storage verification.
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

pub use crate::layout;
pub(crate) mod changelog;
pub(crate) mod local_recovery;
pub mod owner;
pub(crate) mod registry;
mod snapshot;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sst_format::SstKeyRange;

pub use changelog::ChangelogOptions;
pub use local_recovery::RestoreReport;
pub use owner::{GcStats, JobOwner};
pub use snapshot::PendingSnapshot;

use crate::clock::Clock;
use crate::db::{Cf, Db, MemoryBudget};
use crate::error::{Error, Result};
use crate::keygroup::KeyGroupRange;
use crate::meta::STATE_CF_PREFIX;
use crate::operator_state::OperatorState;
use crate::options::DbOptions;
use crate::state::StateMeta;
use crate::storage::CheckpointStorage;
use registry::{Checkpointer, Completion, RestoredBase};

/// Key of the backend id in the metadata column family.
const META_BACKEND_ID: &[u8] = b"backend-id";

/// Checkpoint settings of one backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
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
    /// Changelog mode: checkpoints upload the changes since the last one and materialize the
    /// SSTs only now and then (see [`ChangelogOptions`]). Off by default.
    pub changelog: ChangelogOptions,
}

impl Default for CheckpointOptions {
    fn default() -> Self {
        CheckpointOptions {
            retained: 1,
            transfer_threads: 4,
            incremental: true,
            staging_dir: None,
            local_recovery: true,
            changelog: ChangelogOptions::default(),
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
        self.changelog.validate()
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
    /// Changelog mode: whether this checkpoint is a materialization (uploaded the SSTs its
    /// base lacks) rather than a log checkpoint (uploaded only log segments and copies of the
    /// materialization's private files). False outside changelog mode.
    pub materialized: bool,
    /// Changelog mode: bytes of the log segments uploaded (part of `bytes_uploaded`).
    pub log_bytes_uploaded: u64,
    /// Changelog mode: log tables built and uploaded (`ChangelogOptions::table_bytes`).
    pub log_tables_built: usize,
    /// Bytes of their files (part of `bytes_uploaded`).
    pub log_table_bytes_uploaded: u64,
}

/// What [`crate::KeyedBackend::sweep_orphans`] deleted.
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
    /// Job records of subsumed checkpoints, and of abandoned ones that landed late.
    pub records_deleted: usize,
    /// Restore pins older than the minimum age.
    pub pins_deleted: usize,
}

/// Which checkpoint to restore. The max parallelism must equal the builder's. If one
/// manifest's key-group range equals the builder's, that one is restored as is; otherwise the
/// restore rescales from the manifests of one checkpoint id that overlap the builder's range
/// (they must cover it and be disjoint: manifests claiming the same group are
/// [`Error::AmbiguousCheckpoint`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreFrom {
    /// The newest completed checkpoint: the newest job record in storage, restored from the
    /// manifests it names (a consistent cut: every instance of a job restores the same
    /// checkpoint). A manifest no job record names is the acknowledgement of a checkpoint
    /// that never completed and is not picked while any record exists. Only when storage
    /// holds no job record at all (an engine that keeps completion elsewhere) is it the
    /// newest checkpoint id whose manifests cover the range; each instance then decides on
    /// its own, so instances may restore different ids.
    Latest,
    /// Checkpoint `id`: the manifests its job record names that overlap the range, or, when
    /// storage holds no record of `id`, every manifest of `id` that does.
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

impl RestoreFrom {
    /// The restore of a job's instance from job record `record` (the newest one, after any
    /// crash or rescale): [`RestoreFrom::Handles`] with the backend id of every manifest the
    /// record names. A record naming a manifest of another checkpoint id, or a name that is
    /// not a manifest's, is [`Error::CheckpointCorrupt`].
    pub fn job_record(record: &sst_format::JobCheckpoint) -> Result<RestoreFrom> {
        let mut backend_ids = Vec::new();
        for name in record.tasks.iter().filter_map(|t| t.manifest.as_deref()) {
            match layout::parse_checkpoint_object(name) {
                Some(obj) if obj.id == record.checkpoint_id && obj.is_metadata() => {
                    backend_ids.push(obj.backend_id.to_string())
                }
                _ => {
                    return Err(Error::CheckpointCorrupt {
                        file: layout::job_record_name(record.checkpoint_id),
                        detail: format!("names `{name}`, not a manifest of its checkpoint"),
                    })
                }
            }
        }
        Ok(RestoreFrom::Handles {
            checkpoint_id: record.checkpoint_id,
            backend_ids,
        })
    }
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

/// Reads every manifest in `storage` and every file they reference, checking size, CRC-32
/// and, for SSTs, footer, properties and unique id, and every job record (the same check as
/// `rockstate verify`: [`crate::catalog::verify`]); also lists shared objects nothing
/// references.
pub fn verify_checkpoints(storage: &dyn CheckpointStorage) -> Result<VerifyReport> {
    let catalog = crate::catalog::Catalog::load(storage)?;
    let v = crate::catalog::verify(storage, &catalog)?;
    let mut unreferenced_shared: Vec<String> = catalog
        .shared
        .iter()
        .filter(|s| s.references == 0)
        .map(|s| s.info.name.clone())
        .collect();
    unreferenced_shared.sort();
    Ok(VerifyReport {
        manifests: catalog.checkpoints.len(),
        files_checked: v.files_checked,
        problems: v.problems.into_iter().map(|p| (p.file, p.detail)).collect(),
        unreferenced_shared,
    })
}

/// rockstate's state metadata in the manifest's representation (the same type: state
/// metadata is defined by `sst-format` so the manifest carries it verbatim).
pub(crate) fn to_manifest_state(s: &StateMeta) -> sst_format::StateMeta {
    s.clone()
}

/// Who completes a backend's checkpoints, as the builder was told.
#[derive(Debug, Clone, Default)]
pub(crate) enum Ownership {
    /// No coordinator: the backend is a job of one task with its own [`JobOwner`].
    #[default]
    Standalone,
    /// A job's coordinator completes checkpoints (its owner linked when in this process).
    Job(Option<Arc<JobOwner>>),
}

/// A new backend identity for a restored database, as a one-entry SST of the metadata column
/// family at `path`, written with `options`' table options: a restore that changes the
/// database only by ingestion ingests it last, and needs no flush (which could wait on the
/// compaction of the level-0 files the ingestion added). Returns the identity, for
/// [`RestoredBase::identity`].
pub(crate) fn identity_sst(
    options: &DbOptions,
    budget: &MemoryBudget,
    path: &Path,
) -> Result<String> {
    let id = layout::new_backend_id();
    crate::db::write_ssts(
        options,
        budget,
        &[(path, crate::db::BlockSizing::Shared)],
        |sinks| match sinks.first_mut() {
            Some(sink) => sink.put(META_BACKEND_ID, id.as_bytes()),
            None => Ok(()),
        },
    )?;
    Ok(id)
}

/// Reads (or, for a new or restored database, creates) the backend id and, with storage,
/// builds the checkpoint bookkeeping. Called by `BackendBuilder::open`.
pub(crate) fn attach(
    meta: &Cf,
    storage: Option<Arc<dyn CheckpointStorage>>,
    options: &CheckpointOptions,
    ownership: Ownership,
    clock: Arc<dyn Clock>,
    restored: Option<RestoredBase>,
    max_parallelism: u32,
) -> Result<(String, Option<Arc<Checkpointer>>)> {
    options.validate()?;
    let stored = meta
        .get_with(META_BACKEND_ID, |b| String::from_utf8(b.to_vec()))?
        .transpose()
        .map_err(|_| Error::decode("backend id", "not UTF-8"))?;
    let identity = restored.as_ref().and_then(|r| r.identity.clone());
    let local_copy = restored.as_ref().and_then(|r| r.local_copy.clone());
    let backend_id = match (stored, restored.is_some()) {
        (Some(id), false) if layout::valid_local_name(&id) => id,
        (Some(_), false) => return Err(Error::decode("backend id", "invalid characters")),
        // The restore wrote the new identity and made all it wrote durable itself.
        (Some(id), true) if identity.as_deref() == Some(id.as_str()) => id,
        // New database, or a restored copy of another backend's: a new identity, made durable
        // now so a reopen of this directory never takes the source backend's name. The flush
        // covers every column family: it also makes a restore's clip tombstones and metadata
        // durable, which the restore leaves unflushed (tests/rescale_reopen_killed.rs).
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
            let (completion, clock) = match ownership {
                Ownership::Standalone => (
                    Completion::Standalone(Arc::new(JobOwner::open_standalone(
                        Arc::clone(&storage),
                        options.retained,
                        Arc::clone(&clock),
                    )?)),
                    clock,
                ),
                Ownership::Job(Some(owner)) => {
                    let clock = Arc::clone(owner.clock());
                    (Completion::Job(Some(owner)), clock)
                }
                Ownership::Job(None) => (Completion::Job(None), clock),
            };
            Some(Arc::new(Checkpointer::open(
                storage,
                backend_id.clone(),
                options.clone(),
                staging,
                clock,
                completion,
                restored,
            )?))
        }
    };
    if let Some(cp) = &checkpointer {
        if let (true, Some(copy), Some(id)) = (
            options.changelog.enabled && options.local_recovery,
            local_copy,
            cp.base_materialization(),
        ) {
            local_recovery::adopt(cp, &copy, id);
        }
        if options.changelog.enabled {
            // From the open on: a restored backend's log checkpoints continue the restored
            // log, so no write before its first checkpoint may go unrecorded.
            start_log(cp, meta.db(), max_parallelism)?;
        }
    }
    Ok((backend_id, checkpointer))
}

/// What the sync phase of a checkpoint needs from its backend.
pub(crate) struct SnapshotSource<'a> {
    /// When the sync phase began: before the backend read its states' metadata (which drains
    /// the write cache), so `sync_duration` is the whole pause the task sees.
    pub(crate) started: Instant,
    /// The backend's checkpoint bookkeeping.
    pub(crate) cp: &'a Arc<Checkpointer>,
    /// Its database.
    pub(crate) db: &'a Arc<Db>,
    /// Its key groups and the job's max parallelism.
    pub(crate) key_groups: KeyGroupRange,
    /// The job's number of key groups.
    pub(crate) max_parallelism: u32,
    /// Its states' metadata, as of the sync phase.
    pub(crate) states: &'a [StateMeta],
    /// Its checkpoint figures, updated when the upload succeeds.
    pub(crate) metrics: &'a Arc<parking_lot::Mutex<crate::metrics::CheckpointMetrics>>,
}

/// The sync phase of checkpoint `checkpoint_id` (ids must increase): registers the attempt,
/// then a RocksDB checkpoint (memtables flushed, SSTs hard-linked) into a local staging
/// directory, plus the state metadata and `operator_state`.
pub(crate) fn begin_snapshot(
    src: SnapshotSource<'_>,
    checkpoint_id: u64,
    operator_state: &OperatorState,
) -> Result<PendingSnapshot> {
    let _span = tracing::info_span!("checkpoint.sync", id = checkpoint_id).entered();
    let cp = Arc::clone(src.cp);
    let base = cp.begin(checkpoint_id)?;
    let dir = layout::staging_dir(&cp.staging_root, &cp.backend_id, checkpoint_id);
    // From here on, dropping `pending` unregisters the attempt and removes `dir`.
    let mut pending = PendingSnapshot {
        id: checkpoint_id,
        dir,
        cp,
        base,
        states: src.states.iter().map(to_manifest_state).collect(),
        operator_state: operator_state.snapshot(),
        key_groups: src.key_groups,
        max_parallelism: src.max_parallelism,
        sync_duration: Duration::ZERO,
        key_ranges: HashMap::new(),
        finished: false,
        metrics: Arc::clone(src.metrics),
        changelog: None,
        log_plan: None,
    };
    if pending.cp.options.changelog.enabled {
        match cut_log(&src, &pending.cp, checkpoint_id, pending.base.as_deref())? {
            Cut::Log(plan) => {
                pending.log_plan = Some(plan);
                pending.sync_duration = src.started.elapsed();
                return Ok(pending);
            }
            Cut::Materialize(end_seq) => {
                pending.changelog = Some(sst_format::Changelog {
                    materialization_id: checkpoint_id,
                    materialized_seq: end_seq,
                    segments: Vec::new(),
                    tables: Vec::new(),
                });
                changelog::materialization_started(
                    &pending.cp,
                    checkpoint_id,
                    pending.cp.clock.now_ms(),
                );
            }
        }
    }
    prepare_staging(&pending.dir)?;
    // Listed before the checkpoint is cut: a file compacted away in between is simply not in
    // the checkpoint, one moved deeper is at least as deep as recorded, and a file written in
    // between (the checkpoint's own flush) gets no range.
    pending.key_ranges = state_key_ranges(src.db, src.states)?;
    src.db.checkpoint(&pending.dir)?;
    pending.sync_duration = src.started.elapsed();
    Ok(pending)
}

/// What changelog mode's sync phase decided.
enum Cut {
    /// A log checkpoint.
    Log(changelog::LogPlan),
    /// A materialization holding every change numbered below this.
    Materialize(u64),
}

/// Changelog mode's part of the sync phase: cuts the database's log (started when the
/// backend opened, [`attach`]) into a local segment, and decides the checkpoint's kind. A
/// materialization's RocksDB checkpoint is taken after the cut: a write slipping in between
/// is in both the files and the log after the cut, and replaying a put or delete onto a
/// state that already holds it changes nothing.
fn cut_log(
    src: &SnapshotSource<'_>,
    cp: &Arc<Checkpointer>,
    id: u64,
    base: Option<&sst_format::CheckpointManifest>,
) -> Result<Cut> {
    let cut = src
        .db
        .cut_changelog()?
        .ok_or_else(|| Error::Internal("changelog not started".into()))?;
    let (end_seq, complete) = (cut.end_seq, cut.complete);
    changelog::keep_cut(cp, cut, src.db.cf_names()?);
    let writer = changelog::TableWriter {
        options: src.db.options().clone(),
        budget: src.db.budget().clone(),
    };
    let planned = changelog::plan(cp, id, base, end_seq, complete, cp.clock.now_ms(), writer);
    Ok(match planned {
        Some(plan) => Cut::Log(plan),
        None => Cut::Materialize(end_seq),
    })
}

/// Starts the database's changelog, numbered where the checkpointer's log book says.
fn start_log(cp: &Checkpointer, db: &Arc<Db>, max_parallelism: u32) -> Result<()> {
    let book = cp.log.lock();
    db.start_changelog(
        book.first_seq,
        max_parallelism,
        cp.options.changelog.max_log_buffer_bytes,
    )
}

/// The key range and level of every SST of the keyed states' column families, by local file
/// name (manifest version 2, `SharedFile::key_range`).
fn state_key_ranges(db: &Arc<Db>, states: &[StateMeta]) -> Result<HashMap<String, SstKeyRange>> {
    let mut out = HashMap::new();
    for state in states {
        let Some(cf) = db.cf(&format!("{STATE_CF_PREFIX}{}", state.name))? else {
            continue;
        };
        for f in cf.live_files()? {
            let (Some(name), Ok(level)) = (
                f.path.file_name().and_then(|n| n.to_str()),
                u32::try_from(f.level),
            ) else {
                continue; // not a name or level a manifest records: no range, always fetched
            };
            out.insert(
                name.to_string(),
                SstKeyRange {
                    level,
                    smallest: f.smallest,
                    largest: f.largest,
                },
            );
        }
    }
    Ok(out)
}

/// Checkpoint `checkpoint_id` completed job-wide (see
/// `KeyedBackend::notify_checkpoint_complete`); local copies no longer needed go.
pub(crate) fn complete(
    cp: &Checkpointer,
    checkpoint_id: u64,
    key_groups: KeyGroupRange,
) -> Result<()> {
    // Completion also drops subsumed checkpoints: the span covers that garbage collection.
    let _span =
        tracing::info_span!("checkpoint.notify", id = checkpoint_id, kind = "complete").entered();
    let result = cp.complete(checkpoint_id, key_groups);
    local_recovery::prune(cp);
    if result.is_ok() {
        local_recovery::retire_superseded(&cp.staging_root, checkpoint_id);
    }
    result
}

/// Checkpoint `checkpoint_id` was aborted (see `KeyedBackend::notify_checkpoint_aborted`).
pub(crate) fn abort(cp: &Checkpointer, checkpoint_id: u64) -> Result<()> {
    let _span =
        tracing::info_span!("checkpoint.notify", id = checkpoint_id, kind = "abort").entered();
    let result = cp.abort(checkpoint_id);
    local_recovery::forget(cp, checkpoint_id);
    result
}

/// The owner's sweep, from a backend (see `KeyedBackend::sweep_orphans`).
pub(crate) fn sweep(cp: &Checkpointer, min_age: Duration) -> Result<SweepStats> {
    match cp.owner() {
        Some(owner) => owner.sweep(min_age),
        None => Err(Error::Unsupported(
            "sweeping from a backend whose job owner is in another process".into(),
        )),
    }
}

/// The retained completed checkpoints `(id, backend id)` of the owner `cp` completes through,
/// oldest first, naming `backend_id` where the record names a manifest of it (see
/// `KeyedBackend::retained_checkpoints`).
pub(crate) fn retained(cp: &Checkpointer, backend_id: &str) -> Vec<(u64, String)> {
    let Some(owner) = cp.owner() else {
        return Vec::new();
    };
    owner
        .retained()
        .into_iter()
        .filter_map(|id| {
            let r = owner.record(id)?;
            let names: Vec<&str> = owner::record_backends(&r).collect();
            let backend = names
                .iter()
                .find(|b| **b == backend_id)
                .or(names.first())
                .map_or_else(String::new, |b| b.to_string());
            Some((id, backend))
        })
        .collect()
}

/// The operator states stored in checkpoint `checkpoint_id` by every backend (operator
/// instance) that committed it to `storage`, ordered by instance (key-group range), ready for
/// [`crate::operator_state::redistribute`]. An instance's operator state is the one its
/// manifest holds or, when that is empty, the one its task acknowledged to the coordinator
/// (the job record's); tasks without keyed state are not instances here (their operator state
/// is in the job record). Every manifest is verified (checksum, and that it
/// describes the checkpoint its name says). The manifests' key-group ranges must tile the key
/// groups exactly: a missing instance (say, one whose upload failed) or two backends claiming
/// the same groups is a typed error, never a silently lost or duplicated element.
pub fn read_operator_states(
    storage: &dyn CheckpointStorage,
    checkpoint_id: u64,
) -> Result<Vec<OperatorState>> {
    let mut parts = Vec::new();
    let mut max_parallelism = None;
    // The job record names the manifests of the completed checkpoint, with each task's
    // operator state as the task acknowledged it (`coordinator::task_checkpoint`); without a
    // record, every manifest of that id counts.
    let named: Option<BTreeMap<String, Vec<sst_format::OperatorListState>>> =
        match owner::read_record(storage, checkpoint_id) {
            Ok(r) => Some(
                r.tasks
                    .into_iter()
                    .filter_map(|t| Some((t.manifest?, t.operator_state)))
                    .collect(),
            ),
            Err(Error::ObjectNotFound { .. }) => None,
            Err(e) => return Err(e),
        };
    for (name, id, backend) in registry::list_committed(storage)? {
        if id != checkpoint_id {
            continue;
        }
        let acknowledged = match &named {
            Some(n) => match n.get(&name) {
                Some(state) => Some(state),
                None => continue,
            },
            None => None,
        };
        let m = crate::catalog::decode_manifest_named(&name, &storage.get_bytes(&name)?)?;
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
        // A task stores its operator state in its manifest (`snapshot_with`) or hands it to
        // the coordinator with its acknowledgement, which puts it in the job record: either
        // place counts, and two copies must agree.
        let state = match acknowledged {
            Some(record) if m.operator_state.is_empty() => record.clone(),
            Some(record)
                if !record.is_empty()
                    && OperatorState::from_snapshot(record.clone())?
                        != OperatorState::from_snapshot(m.operator_state.clone())? =>
            {
                return Err(Error::CheckpointCorrupt {
                    file: name,
                    detail: format!(
                        "its operator state differs from the one job record {id} holds for it"
                    ),
                })
            }
            _ => m.operator_state,
        };
        parts.push((range, OperatorState::from_snapshot(state)?));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: u64, manifests: &[&str]) -> sst_format::JobCheckpoint {
        sst_format::JobCheckpoint {
            checkpoint_id: id,
            job_name: "job".into(),
            max_parallelism: 128,
            triggered_at_ms: 0,
            completed_at_ms: 0,
            tasks: manifests
                .iter()
                .enumerate()
                .map(|(i, m)| sst_format::TaskCheckpoint {
                    task: i as u32,
                    manifest: (!m.is_empty()).then(|| m.to_string()),
                    key_group_start: 0,
                    key_group_end: 0,
                    operator_state: Vec::new(),
                    state_bytes: 0,
                    bytes_uploaded: 0,
                    files_reused: 0,
                    sync_micros: 0,
                    async_micros: 0,
                })
                .collect(),
        }
    }

    #[test]
    fn a_job_record_restores_from_the_backends_it_names() {
        let r = record(
            7,
            &[
                "",
                &layout::metadata_name(7, "aa"),
                &layout::metadata_name(7, "bb"),
            ],
        );
        assert_eq!(
            RestoreFrom::job_record(&r).unwrap(),
            RestoreFrom::Handles {
                checkpoint_id: 7,
                backend_ids: vec!["aa".into(), "bb".into()],
            }
        );
        for bad in [
            layout::metadata_name(6, "aa"),
            layout::private_name(7, "aa", "CURRENT"),
        ] {
            let e = RestoreFrom::job_record(&record(7, &[&bad])).unwrap_err();
            assert!(matches!(e, Error::CheckpointCorrupt { .. }), "{bad}: {e}");
        }
    }
}

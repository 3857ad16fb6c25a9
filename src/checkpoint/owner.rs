//! The job's checkpoint owner: the one component that deletes anything a checkpoint
//! committed. Backends (tasks) upload their snapshot and write its manifest (their
//! acknowledgement); they delete only what an attempt of theirs uploaded that never became an
//! acknowledgement, or that the job aborted. The owner commits checkpoint N by writing the job
//! record `job/chk-<N>` once it has checked that every file the record's manifests name is in
//! storage, keeps the newest `retained` records, and after every commit and in its sweep
//! deletes what the one garbage classification ([`crate::catalog::classify`]) calls garbage.
//!
//! One owner per checkpoint storage (namespace): the job's coordinator
//! ([`crate::coordinator::Coordinator`] creates one), or, for a backend without a coordinator,
//! the backend itself (it is then a job of one task). Storage is the truth and memory a cache:
//! an owner opened on a storage that already holds this job's checkpoints (a restart, a
//! rescale) takes its records as completed checkpoints and its leftovers as garbage. The whole
//! protocol, with a sequence diagram, is `docs/ownership.md`.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use sst_format::{CheckpointManifest, JobCheckpoint, JobRecord, VoidRecord};

use super::layout;
use super::SweepStats;
use crate::catalog::decode_manifest_named;
use crate::catalog::{
    classify, shared_objects, Catalog, GcPlan, GcPolicy, GcReason, ManifestCache,
};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::operator_state::OperatorState;
use crate::storage::CheckpointStorage;

/// The owner of a job's checkpoints in one storage (see the module docs).
#[derive(Debug)]
pub struct JobOwner {
    storage: Arc<dyn CheckpointStorage>,
    clock: Arc<dyn Clock>,
    retained: usize,
    state: Mutex<State>,
    cache: ManifestCache,
    /// Shared names attempts in flight in this process may reference, by (backend, id):
    /// the reuse base they took and what they uploaded so far. Registered by backends linked
    /// to this owner; an owner in another process relies on the commit check instead.
    protected: Mutex<BTreeMap<(String, u64), HashSet<String>>>,
    /// Attempts whose upload has not ended: a commit of a newer checkpoint must not release
    /// their protection (their upload may still write a manifest naming those files).
    uploading: Mutex<HashSet<(String, u64)>>,
    /// Serializes commits, garbage passes and sweeps.
    gc_lock: Mutex<()>,
    /// When this owner opened (its clock): a pin of a restore that began before belongs to a
    /// run of the job that is gone, and the first pass releases it.
    opened_ms: u64,
    /// What the ids of an earlier run are while storage holds no job record.
    unrecorded: Unrecorded,
}

/// What a garbage pass makes of the checkpoint ids up to the highest in storage at open
/// while storage holds no job record (docs/ownership.md §3, rules 5 and 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unrecorded {
    /// Finished: they belong to a run of the job that is gone (a job's owner hands out
    /// higher ids, and its first record is its first completion).
    Finished,
    /// Unknown: the owner of a backend without a coordinator, whose engine may keep
    /// completion elsewhere and never write a record; only their age decides, until a record
    /// exists.
    Unknown,
}

#[derive(Debug, Default)]
struct State {
    /// Retained completed checkpoints, by id.
    records: BTreeMap<u64, JobCheckpoint>,
    /// Every job record id this owner found in storage or wrote: any other record is another
    /// owner's ([`Error::StorageConflict`]).
    known: BTreeSet<u64>,
    /// The highest checkpoint id in storage when this owner opened: ids up to it that no
    /// retained record names belong to a run of the job that is gone and can never complete
    /// (this owner hands out higher ids; a backend's in-flight attempts are protected).
    open_max: u64,
    /// Highest checkpoint id found in storage at open or handed out or committed since.
    max_id: u64,
    /// Records whose put failed in a way that may have stored them, while their outcome is
    /// open: every commit and pass reloads the records from storage before deciding
    /// anything, and adopts those it finds there (any other record it did not know is
    /// another owner's, or one of `abandoned`).
    in_doubt: BTreeMap<u64, JobCheckpoint>,
    /// Records this owner put whose checkpoint ended not completed while a put of them may
    /// still land (a server applying a request after its client gave up): a newer checkpoint
    /// completed, or [`JobOwner::resolve`] found them absent. Each stays here until a void
    /// record holds its name ([`JobOwner::fence`], at the start of every pass), and until then
    /// the passes keep what it names: a put landing before the fence names existing files,
    /// in any later run too. One that lands is this owner's, not another's; it is never
    /// retained, and the fence deletes it ([`GcReason::AbandonedRecord`]).
    abandoned: BTreeMap<u64, JobCheckpoint>,
    /// Abandoned ids whose name holds this owner's void record.
    voided: BTreeSet<u64>,
}

/// What a job record in storage that the owner did not know committed is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unknown {
    /// A record in doubt that landed: a completed checkpoint.
    Landed,
    /// An abandoned record that landed: to be deleted.
    Abandoned,
}

impl State {
    /// `id` is committed: known, no longer in doubt or abandoned.
    fn settle(&mut self, id: u64) {
        self.known.insert(id);
        self.in_doubt.remove(&id);
        self.abandoned.remove(&id);
    }

    /// `record`'s checkpoint ended not completed, though a put of it may still land.
    fn abandon(&mut self, record: JobCheckpoint) {
        let id = record.checkpoint_id;
        self.in_doubt.remove(&id);
        if self.known.contains(&id) {
            return;
        }
        self.abandoned.insert(id, record);
    }

    /// A void record holds abandoned `id`'s name: no put of its record can land any more.
    fn fenced(&mut self, id: u64) {
        self.abandoned.remove(&id);
        self.voided.insert(id);
    }

    /// Checkpoint `id` completed: every record in doubt below it can never complete now.
    fn abandon_below(&mut self, id: u64) {
        let newer = self.in_doubt.split_off(&id);
        for r in std::mem::replace(&mut self.in_doubt, newer).into_values() {
            self.abandon(r);
        }
    }

    /// What `stored`, found under an id this owner does not know, is: one of its own puts in
    /// doubt or abandoned (same manifests), or `None`: another owner's.
    fn unknown(&self, stored: &JobCheckpoint) -> Option<Unknown> {
        let id = stored.checkpoint_id;
        if self
            .in_doubt
            .get(&id)
            .is_some_and(|p| same_manifests(p, stored))
        {
            Some(Unknown::Landed)
        } else if self
            .abandoned
            .get(&id)
            .is_some_and(|p| same_manifests(p, stored))
        {
            Some(Unknown::Abandoned)
        } else {
            None
        }
    }
}

/// What [`JobOwner::commit`] did once the record is in storage.
#[derive(Debug)]
pub struct Committed {
    /// The garbage pass after the commit failed with this error (the commit itself took
    /// effect; the next pass retries the deletions).
    pub gc_error: Option<Error>,
}

/// What one garbage pass deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcStats {
    /// Job records of subsumed checkpoints, and of abandoned ones that landed late.
    pub records_deleted: usize,
    /// Objects of task checkpoints (manifests and private files).
    pub checkpoint_objects_deleted: usize,
    /// Shared files.
    pub shared_deleted: usize,
    /// Restore pins.
    pub pins_deleted: usize,
    /// Bytes of everything deleted.
    pub bytes_deleted: u64,
}

impl JobOwner {
    /// Opens the owner of the checkpoints in `storage`, keeping the newest `retained` job
    /// records. Records already there are this job's completed checkpoints; new checkpoint
    /// ids start above every id found in storage. An undecodable record is
    /// [`Error::CheckpointCorrupt`].
    pub fn open(
        storage: Arc<dyn CheckpointStorage>,
        retained: usize,
        clock: Arc<dyn Clock>,
    ) -> Result<JobOwner> {
        JobOwner::open_as(storage, retained, clock, Unrecorded::Finished)
    }

    /// [`JobOwner::open`] for a backend without a coordinator: while storage holds no job
    /// record, no id of an earlier run counts as finished (its engine may keep completion
    /// elsewhere).
    pub(crate) fn open_standalone(
        storage: Arc<dyn CheckpointStorage>,
        retained: usize,
        clock: Arc<dyn Clock>,
    ) -> Result<JobOwner> {
        JobOwner::open_as(storage, retained, clock, Unrecorded::Unknown)
    }

    fn open_as(
        storage: Arc<dyn CheckpointStorage>,
        retained: usize,
        clock: Arc<dyn Clock>,
        unrecorded: Unrecorded,
    ) -> Result<JobOwner> {
        if retained == 0 {
            return Err(Error::InvalidOption {
                name: "retained",
                detail: "must be at least 1".into(),
            });
        }
        let opened_ms = clock.now_ms();
        let owner = JobOwner {
            opened_ms,
            unrecorded,
            storage,
            clock,
            retained,
            state: Mutex::new(State::default()),
            cache: ManifestCache::default(),
            protected: Mutex::new(BTreeMap::new()),
            uploading: Mutex::new(HashSet::new()),
            gc_lock: Mutex::new(()),
        };
        owner.reload(true)?;
        {
            let mut s = owner.state.lock();
            s.open_max = s.max_id;
        }
        Ok(owner)
    }

    /// [`JobOwner::open`], then a garbage pass: a job that restarts (after a crash, at
    /// another parallelism) removes what its earlier runs left before it starts anything
    /// new, even if it dies again before its first completion. Only for the one owner of the
    /// storage: every id up to the highest in storage counts as finished, so another owner's
    /// attempts in flight would be deleted. A failed pass is logged, not returned: the next
    /// pass retries what it left, as after a commit.
    pub fn open_and_collect(
        storage: Arc<dyn CheckpointStorage>,
        retained: usize,
        clock: Arc<dyn Clock>,
    ) -> Result<JobOwner> {
        let owner = JobOwner::open(storage, retained, clock)?;
        // Best effort, as the pass after a commit: what a failed pass leaves, the next one
        // (every commit runs one) deletes; a job must not fail to start because storage
        // refused a delete.
        if let Err(e) = owner.collect_garbage() {
            tracing::warn!(error = %e, "the garbage pass at open failed; the next pass retries");
        }
        Ok(owner)
    }

    /// Rebuilds the in-memory records from storage (at open: also `open_max`). At open every
    /// record found is this owner's; later, only those it knew and the ones it put in doubt
    /// that landed: any other is another owner's ([`Error::StorageConflict`]).
    fn reload(&self, at_open: bool) -> Result<()> {
        let ids = record_ids(self.storage.as_ref())?;
        let mut landed = Vec::new();
        let mut abandoned = BTreeSet::new();
        if !at_open {
            for (id, unknown) in self.unknown_records(&ids)? {
                match unknown {
                    Unknown::Landed => landed.push(id),
                    Unknown::Abandoned => {
                        abandoned.insert(id);
                    }
                }
            }
        }
        // The newest `retained` records of completed checkpoints: void records are none.
        let mut records = BTreeMap::new();
        for &id in ids.iter().rev().filter(|id| !abandoned.contains(id)) {
            if records.len() == self.retained {
                break;
            }
            if let JobRecord::Checkpoint(r) = read_stored(self.storage.as_ref(), id)? {
                records.insert(id, r);
            }
        }
        let highest = |prefix: &str, id_of: fn(&str) -> Option<u64>| -> Result<u64> {
            let listed = self.storage.list(prefix)?;
            Ok(listed
                .iter()
                .filter_map(|o| id_of(&o.name))
                .max()
                .unwrap_or(0))
        };
        let max_task = highest(layout::CHECKPOINT_PREFIX, |n| {
            layout::parse_checkpoint_object(n).map(|p| p.id)
        })?;
        let max_shared = highest(layout::SHARED_PREFIX, |n| {
            layout::parse_shared_name(n).and_then(|s| s.checkpoint_id)
        })?;
        let mut s = self.state.lock();
        let in_storage = ids
            .last()
            .copied()
            .unwrap_or(0)
            .max(max_task)
            .max(max_shared);
        s.max_id = s.max_id.max(in_storage);
        if at_open {
            s.known.extend(ids.iter().copied());
        }
        for id in landed {
            s.settle(id);
        }
        s.records = records;
        Ok(())
    }

    /// Whether `record` committed, after reloading (for a commit whose outcome was
    /// [`Error::CommitInDoubt`]): it is in storage, or a pass after a newer commit found it
    /// landed and has deleted it since, or, absent, it was put again now (while it is the
    /// newest record this owner knows and every file it names is in storage: its puts may
    /// still land). A different record under its id is another owner's:
    /// [`Error::StorageConflict`].
    pub fn resolve(&self, record: &JobCheckpoint) -> Result<bool> {
        let _guard = self.gc_lock.lock();
        let id = record.checkpoint_id;
        let found = match read_stored(self.storage.as_ref(), id) {
            Ok(JobRecord::Checkpoint(stored)) if same_manifests(&stored, record) => true,
            // A void record of this owner's: abandoned before.
            Ok(JobRecord::Void(_))
                if {
                    let s = self.state.lock();
                    s.voided.contains(&id) || s.abandoned.contains_key(&id)
                } =>
            {
                self.state.lock().fenced(id);
                false
            }
            Ok(_) => {
                return Err(Error::StorageConflict(format!(
                    "job record {id} names other manifests than this owner committed"
                )))
            }
            // Gone from storage: it committed if a pass after a newer commit adopted it as
            // landed (and has since deleted it as subsumed). Otherwise its puts may still
            // land: settle it by putting it again.
            Err(Error::ObjectNotFound { .. }) => {
                self.state.lock().known.contains(&id) || self.put_again(record)?
            }
            Err(e) => return Err(e),
        };
        if found {
            self.state.lock().settle(id);
            // As after a commit: attempts up to `id` can never complete now.
            self.release_up_to(id);
        } else if !self.state.lock().voided.contains(&id) {
            // Reported not completed, so its tasks delete what it names: first its name takes
            // a void record, so that no put of the record can land naming deleted files, in
            // this run or a later one. A failed fence leaves the commit in doubt (`Err`); a
            // later call fences it or finds the record stored after all.
            self.state.lock().abandon(record.clone());
            self.fence_one(record)?;
            self.state.lock().fenced(id);
        }
        self.reload(false)?;
        Ok(found)
    }

    /// The storage this owner deletes in.
    pub fn storage(&self) -> &Arc<dyn CheckpointStorage> {
        &self.storage
    }

    /// The clock this owner ages objects with; backends linked to it name their uploads by it.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// How many completed checkpoints are kept.
    pub fn retained_count(&self) -> usize {
        self.retained
    }

    /// Ids of the retained completed checkpoints, oldest first.
    pub fn retained(&self) -> Vec<u64> {
        self.state.lock().records.keys().copied().collect()
    }

    /// The newest completed checkpoint's record.
    pub fn latest(&self) -> Option<JobCheckpoint> {
        self.state
            .lock()
            .records
            .last_key_value()
            .map(|(_, r)| r.clone())
    }

    /// The retained record of checkpoint `id`.
    pub fn record(&self, id: u64) -> Option<JobCheckpoint> {
        self.state.lock().records.get(&id).cloned()
    }

    /// A checkpoint id above every id in storage and every id handed out before.
    pub fn next_checkpoint_id(&self) -> Result<u64> {
        let mut s = self.state.lock();
        s.max_id = s
            .max_id
            .checked_add(1)
            .ok_or_else(|| Error::Coordinator("checkpoint ids exhausted".into()))?;
        Ok(s.max_id)
    }

    /// Commits checkpoint `record.checkpoint_id`: checks that the id is newer than every
    /// completed one, that no job record of another owner is in storage, that every task
    /// manifest the record names is in storage and describes this checkpoint, and that every
    /// file those manifests reference is in storage; then writes the record (create-if-absent:
    /// the commit point) and runs a garbage pass. Nothing is written when a check fails:
    /// [`Error::CheckpointRejected`] says which file is missing (a reused file a newer
    /// completion deleted), and the tasks then abort the checkpoint. When the record's put
    /// fails transiently and the record is not there, it is put again (the failed put may
    /// still land). When storage cannot say whether it landed, the result is
    /// [`Error::CommitInDoubt`]: the tasks must not delete the checkpoint;
    /// [`JobOwner::resolve`] tells later. A record already in storage that names the same
    /// manifests (a retried commit) counts as committed.
    pub fn commit(&self, record: &JobCheckpoint) -> Result<Committed> {
        let _guard = self.gc_lock.lock();
        let id = record.checkpoint_id;
        self.reload_if_unsure()?;
        // A retried commit whose record landed before (its outcome was in doubt): committed.
        let landed = self.state.lock().records.get(&id).cloned();
        if let Some(stored) = landed {
            if same_manifests(&stored, record) {
                {
                    let mut s = self.state.lock();
                    s.settle(id);
                    s.abandon_below(id);
                }
                self.release_up_to(id);
                return Ok(Committed {
                    gc_error: self.reload_if_landed().and_then(|()| self.pass(None)).err(),
                });
            }
        }
        if let Some(&newest) = self.state.lock().records.keys().next_back() {
            if id <= newest {
                return Err(Error::CheckpointRejected {
                    id,
                    reason: format!("checkpoint {newest} already completed"),
                });
            }
        }
        self.reload_if_landed()?;
        self.check_record_files(record)?;
        match self.put_record(record)? {
            None => {}
            Some((e, Error::ObjectNotFound { .. })) if !matches!(e, Error::ObjectExists { .. }) => {
                self.settle_record_put(record, e)?
            }
            Some((e, read)) => {
                self.state.lock().in_doubt.insert(id, record.clone());
                return Err(Error::CommitInDoubt {
                    id,
                    detail: format!("put failed ({e}), then reading it back failed ({read})"),
                });
            }
        }
        // The record now keeps what its attempts reference: their in-memory protection ends
        // before the pass.
        // Attempts of any backend up to `id` can never complete now (a backend that failed
        // over in this process leaves its entries behind otherwise).
        self.release_up_to(id);
        {
            let mut s = self.state.lock();
            s.settle(id);
            s.abandon_below(id);
            s.records.insert(id, record.clone());
            while s.records.len() > self.retained {
                s.records.pop_first();
            }
            s.max_id = s.max_id.max(id);
        }
        Ok(Committed {
            gc_error: self.pass(None).err(),
        })
    }

    /// Puts `record` (create-if-absent) and, if the put fails, asks storage whether it holds
    /// the record all the same (a put can store it and fail after): `None` when it is stored
    /// (by this put or an earlier one naming the same manifests), else the put's error and
    /// the read-back's (`ObjectNotFound`: absent). A record of other manifests under its id is
    /// another owner's ([`Error::StorageConflict`]).
    fn put_record(&self, record: &JobCheckpoint) -> Result<Option<(Error, Error)>> {
        let id = record.checkpoint_id;
        let bytes = sst_format::encode_job_checkpoint(record).map_err(Error::format)?;
        let Err(e) = self.storage.put_bytes(&layout::job_record_name(id), &bytes) else {
            return Ok(None);
        };
        match read_stored(self.storage.as_ref(), id) {
            Ok(JobRecord::Checkpoint(stored)) if same_manifests(&stored, record) => Ok(None),
            Ok(JobRecord::Void(_)) => Err(Error::CheckpointRejected {
                id,
                reason: "its record's name holds a void record: the checkpoint was abandoned"
                    .into(),
            }),
            Ok(JobRecord::Checkpoint(_)) => Err(Error::StorageConflict(format!(
                "job record {id} was written by another owner: a coordinator and a backend \
                 without one (open it with `job_owner` or `job_coordinated`), or two jobs, \
                 complete checkpoints in one storage"
            ))),
            Err(read) => Ok(Some((e, read))),
        }
    }

    /// After the put of `record` failed with `e` and reading it back found nothing. A put
    /// that failed transiently may still land: a server can apply a request after its client
    /// gave up (S3 finishing a PUT whose response timed out), and a record landing after its
    /// checkpoint ended failed would name the manifests and files its tasks deleted, as the
    /// newest completed checkpoint. So the checkpoint does not end failed while its put may
    /// land: the same record is put again (the checks of [`JobOwner::commit`] still hold
    /// under the lock). Stored, it is committed (`Ok`); otherwise it is in doubt
    /// ([`Error::CommitInDoubt`]), as the second put may land too. A put refused for good (a
    /// permanent error: nothing was stored) ends the commit with that error.
    fn settle_record_put(&self, record: &JobCheckpoint, e: Error) -> Result<()> {
        if !e.is_transient() {
            return Err(e);
        }
        let Some((again, read)) = self.put_record(record)? else {
            return Ok(());
        };
        let id = record.checkpoint_id;
        self.state.lock().in_doubt.insert(id, record.clone());
        Err(Error::CommitInDoubt {
            id,
            detail: format!(
                "put failed ({e}) and the record was not there; put again, failed ({again}), \
                 then reading it back: {read}"
            ),
        })
    }

    /// For [`JobOwner::resolve`]: a record in doubt that is not in storage, whose puts may
    /// still land ([`JobOwner::settle_record_put`]), is put again while it is still the
    /// newest this owner knows and every file it names is in storage: `true` once stored.
    /// `false` when a newer checkpoint completed meanwhile (that commit released this one's
    /// attempts, whose files may be gone; a late landing there is an older record the newer
    /// subsumes) or a file is missing. A failed put is an error: still in doubt.
    fn put_again(&self, record: &JobCheckpoint) -> Result<bool> {
        let id = record.checkpoint_id;
        if self.state.lock().known.iter().any(|&k| k > id) {
            return Ok(false);
        }
        match self.check_record_files(record) {
            Ok(()) => {}
            Err(Error::CheckpointRejected { .. }) => return Ok(false),
            Err(e) => return Err(e),
        }
        match self.put_record(record)? {
            None => Ok(true),
            Some((e, _)) => Err(e),
        }
    }

    /// The job records among `ids` (in storage) this owner does not know committed, and
    /// what each is: a put of its own that landed, in doubt or abandoned
    /// ([`State::unknown`]); a void record of its own (a fence whose put failed but landed)
    /// marks that name fenced. A record under an id up to the highest in
    /// storage when this owner opened is a put of an earlier run of the job that landed
    /// since (that run is gone): adopted, as at open, while every file it names is in
    /// storage; otherwise (this owner's passes deleted what it names) abandoned here, so the
    /// next fence deletes it and voids its name. Any other is another owner's:
    /// [`Error::StorageConflict`]. A record deleted since the listing is left out.
    fn unknown_records(&self, ids: &[u64]) -> Result<Vec<(u64, Unknown)>> {
        let unknown: Vec<u64> = {
            let s = self.state.lock();
            ids.iter()
                .copied()
                .filter(|id| !s.known.contains(id) && !s.voided.contains(id))
                .collect()
        };
        let mut out = Vec::new();
        for id in unknown {
            let ours = {
                let s = self.state.lock();
                s.in_doubt.contains_key(&id) || s.abandoned.contains_key(&id)
            };
            if !ours {
                if id > self.state.lock().open_max {
                    return Err(foreign_record(id));
                }
                match read_stored(self.storage.as_ref(), id) {
                    // Whole: a checkpoint of the earlier run, older than what this owner
                    // restored from; adopted like a record found at open.
                    Ok(JobRecord::Checkpoint(r)) => match self.check_record_files(&r) {
                        Ok(()) => {
                            self.state.lock().settle(id);
                            out.push((id, Unknown::Landed));
                        }
                        Err(Error::CheckpointRejected { reason, .. }) => {
                            tracing::warn!(
                                id,
                                reason,
                                "a job record of an earlier run landed after this owner \
                                 opened, naming what is gone; deleting it"
                            );
                            self.state.lock().abandon(r);
                            out.push((id, Unknown::Abandoned));
                        }
                        Err(e) => return Err(e),
                    },
                    Ok(JobRecord::Void(_)) => {
                        self.state.lock().voided.insert(id);
                    }
                    Err(Error::ObjectNotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
                continue;
            }
            let stored = match read_stored(self.storage.as_ref(), id) {
                Ok(JobRecord::Checkpoint(r)) => r,
                // Only abandoned names are voided: this one's fence put failed but landed.
                Ok(JobRecord::Void(_)) if self.state.lock().abandoned.contains_key(&id) => {
                    self.state.lock().fenced(id);
                    continue;
                }
                Ok(JobRecord::Void(_)) => return Err(foreign_record(id)),
                Err(Error::ObjectNotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            match self.state.lock().unknown(&stored) {
                Some(u) => out.push((id, u)),
                None => return Err(foreign_record(id)),
            }
        }
        Ok(out)
    }

    /// Classifies the job records in storage this owner does not know
    /// ([`JobOwner::unknown_records`]: another owner's is an error), and reloads when there
    /// are any, so that the retained set takes in what it adopted or abandoned.
    fn reload_if_landed(&self) -> Result<()> {
        if !self
            .unknown_records(&record_ids(self.storage.as_ref())?)?
            .is_empty()
        {
            self.reload(false)?;
        }
        Ok(())
    }

    fn reload_if_unsure(&self) -> Result<()> {
        if !self.state.lock().in_doubt.is_empty() {
            self.reload(false)?;
        }
        Ok(())
    }

    /// Every manifest `record` names exists and describes checkpoint `id`, and every file
    /// they reference is in storage.
    fn check_record_files(&self, record: &JobCheckpoint) -> Result<()> {
        let id = record.checkpoint_id;
        let reject = |reason: String| Error::CheckpointRejected { id, reason };
        let known: HashSet<String> = {
            let s = self.state.lock();
            let mut names = HashSet::new();
            for r in s.records.values() {
                for m in r.tasks.iter().filter_map(|t| t.manifest.as_deref()) {
                    if let Some(manifest) = self.cache.lock().get(m) {
                        names.extend(shared_objects(manifest).map(str::to_string));
                    }
                }
            }
            names
        };
        let mut named = HashSet::new();
        for t in &record.tasks {
            // Each task's operator state must be readable (no list twice), or the completed
            // checkpoint could not be restored.
            let acked = OperatorState::from_snapshot(t.operator_state.clone())
                .map_err(|e| reject(format!("task {}'s operator state: {e}", t.task)))?;
            let Some(name) = t.manifest.as_deref() else {
                continue;
            };
            // One backend's state in two tasks: a restore would refuse the record.
            if !named.insert(name) {
                return Err(reject(format!("two tasks name manifest {name}")));
            }
            let p = layout::parse_checkpoint_object(name)
                .filter(|p| p.is_metadata() && p.id == id)
                .ok_or_else(|| reject(format!("`{name}` is not a manifest of checkpoint {id}")))?;
            let manifest = match self.manifest(name) {
                Ok(m) => m,
                Err(Error::ObjectNotFound { .. }) => {
                    return Err(reject(format!("manifest {name} is not in storage")))
                }
                Err(e) => return Err(e),
            };
            if manifest.checkpoint_id != id || manifest.backend_id != p.backend_id {
                return Err(Error::CheckpointCorrupt {
                    file: name.to_string(),
                    detail: format!(
                        "manifest describes checkpoint {} of backend {}",
                        manifest.checkpoint_id, manifest.backend_id
                    ),
                });
            }
            // Where the manifest holds operator state too, the two copies must agree.
            if !t.operator_state.is_empty() && !manifest.operator_state.is_empty() {
                let stored = OperatorState::from_snapshot(manifest.operator_state.clone())
                    .map_err(|e| reject(format!("{name}'s operator state: {e}")))?;
                if stored != acked {
                    return Err(reject(format!(
                        "task {}'s acknowledged operator state differs from the one {name} holds",
                        t.task
                    )));
                }
            }
            // One listing for the private files; a name it misses (a listing may lag) is
            // asked for directly.
            let in_dir: HashSet<String> = self
                .storage
                .list(&layout::checkpoint_dir(id, p.backend_id))?
                .into_iter()
                .map(|o| o.name)
                .collect();
            for f in &manifest.private_files {
                if !in_dir.contains(&f.remote_name) && !self.storage.exists(&f.remote_name)? {
                    return Err(reject(format!("{} is not in storage", f.remote_name)));
                }
            }
            for remote in shared_objects(&manifest) {
                if known.contains(remote) {
                    continue;
                }
                if !self.storage.exists(remote)? {
                    return Err(reject(format!(
                        "{} (reused by {name}) is not in storage: a newer checkpoint's \
                         completion deleted it",
                        remote
                    )));
                }
            }
        }
        Ok(())
    }

    /// The manifest object `name`, decoded (cached).
    fn manifest(&self, name: &str) -> Result<Arc<CheckpointManifest>> {
        if let Some(m) = self.cache.lock().get(name) {
            return Ok(Arc::clone(m));
        }
        let m = Arc::new(decode_manifest_named(name, &self.storage.get_bytes(name)?)?);
        self.cache.lock().insert(name.to_string(), Arc::clone(&m));
        Ok(m)
    }

    /// A garbage pass that deletes only what can never be needed again, whatever its age
    /// (what a commit runs): subsumed records, task checkpoints of finished ids and their
    /// shared files.
    pub fn collect_garbage(&self) -> Result<GcStats> {
        let _guard = self.gc_lock.lock();
        self.reload_if_unsure()?;
        self.reload_if_landed()?;
        self.pass(None)
    }

    /// [`JobOwner::collect_garbage`], also deleting leftovers that may belong to an attempt
    /// in flight once they are `min_age` old by the owner's clock: checkpoint directories
    /// without a manifest, shared files nothing references (age from the time their put
    /// began, which their name carries), restore pins. `min_age` must exceed the longest
    /// single upload and restore, plus the clock difference between processes.
    pub fn sweep(&self, min_age: Duration) -> Result<SweepStats> {
        let _span = tracing::info_span!("checkpoint.gc").entered();
        let _guard = self.gc_lock.lock();
        self.reload_if_unsure()?;
        self.reload_if_landed()?;
        let incomplete = self
            .storage
            .sweep_incomplete(self.clock.now_ms(), min_age)?;
        let g = self.pass(Some(min_age))?;
        Ok(SweepStats {
            shared_deleted: g.shared_deleted,
            private_deleted: g.checkpoint_objects_deleted,
            incomplete_deleted: incomplete,
            bytes_deleted: g.bytes_deleted,
            records_deleted: g.records_deleted,
            pins_deleted: g.pins_deleted,
        })
    }

    /// Plans what a pass with `min_age` would delete, without deleting.
    pub fn plan(&self, min_age: Option<Duration>) -> Result<GcPlan> {
        // Protection before the listing (an attempt that completes or aborts meanwhile may
        // release it) ...
        let mut protected: HashSet<String> =
            self.protected.lock().values().flatten().cloned().collect();
        // The retained checkpoints this owner knows are kept even where a lagging listing
        // does not show their record or manifest yet; and the abandoned ones not fenced yet,
        // whose record may still land (naming what they name).
        let manifests: Vec<String> = {
            let s = self.state.lock();
            s.records
                .values()
                .chain(s.abandoned.values())
                .flat_map(|r| r.tasks.iter().filter_map(|t| t.manifest.clone()))
                .collect()
        };
        for name in manifests {
            if let Some(p) = layout::parse_checkpoint_object(&name) {
                protected.insert(layout::checkpoint_dir(p.id, p.backend_id));
            }
            match self.manifest(&name) {
                Ok(m) => protected.extend(shared_objects(&m).map(str::to_string)),
                // Gone: a pass of this owner deleted it (the record is being subsumed), or,
                // of an abandoned record, a file it named was missing.
                Err(Error::ObjectNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let mut catalog = Catalog::load_cached(self.storage.as_ref(), &self.cache)?;
        // And after: an upload registers its name before its put, so a put the listing shows
        // was registered by now.
        protected.extend(self.protected.lock().values().flatten().cloned());
        // Records of this owner's abandoned puts that landed are no checkpoint: out of the
        // classification (never retained; what they name is garbage of a finished id), and
        // deleted before anything else.
        let mut abandoned = Vec::new();
        {
            let s = self.state.lock();
            for j in catalog
                .job_records
                .iter()
                .filter(|j| !s.known.contains(&j.id))
            {
                match j.record.as_ref().ok().and_then(|r| s.unknown(r)) {
                    Some(Unknown::Abandoned) => abandoned.push(j.info.clone()),
                    // A record in doubt that landed: the caller reloaded before the plan
                    // (`reload_if_unsure`), so it landed since; the next pass adopts it.
                    Some(Unknown::Landed) => {}
                    None => return Err(foreign_record(j.id)),
                }
            }
        }
        catalog
            .job_records
            .retain(|j| !abandoned.iter().any(|o| o.name == j.name));
        let finished_up_to = {
            let s = self.state.lock();
            (self.unrecorded == Unrecorded::Finished || !s.known.is_empty()).then_some(s.open_max)
        };
        let mut plan = classify(
            &catalog,
            &GcPolicy {
                retained: self.retained,
                min_age,
                now_ms: self.clock.now_ms(),
                protected,
                pins_before_ms: Some(self.opened_ms),
                finished_up_to,
            },
        )?;
        plan.delete.splice(
            0..0,
            abandoned
                .into_iter()
                .map(|o| (o, GcReason::AbandonedRecord)),
        );
        Ok(plan)
    }

    /// One garbage pass (the caller holds `gc_lock`, and has classified the records landed
    /// since its last look: [`JobOwner::reload_if_landed`]). Records go first; then pins are listed
    /// again, and the pass stops if a restore pinned a checkpoint meanwhile.
    fn pass(&self, min_age: Option<Duration>) -> Result<GcStats> {
        let mut first_error = None;
        let mut stats = GcStats::default();
        match self.fence() {
            Ok(deleted) => stats.records_deleted += deleted,
            Err(e) => first_error = Some(e),
        }
        let plan = self.plan(min_age)?;
        let mut pinned_now: Option<BTreeSet<u64>> = None;
        for (o, why) in &plan.delete {
            if !matches!(
                why,
                GcReason::SubsumedRecord
                    | GcReason::AbandonedRecord
                    | GcReason::ExpiredPin
                    | GcReason::ExpiredVoid
            ) {
                if pinned_now.is_none() {
                    let expired: HashSet<&str> = plan
                        .delete
                        .iter()
                        .filter(|(_, w)| matches!(w, GcReason::ExpiredPin))
                        .map(|(p, _)| p.name.as_str())
                        .collect();
                    pinned_now = Some(
                        self.storage
                            .list(layout::PIN_PREFIX)?
                            .iter()
                            .filter(|p| !expired.contains(p.name.as_str()))
                            .filter_map(|p| layout::parse_pin(&p.name).map(|(id, _)| id))
                            .collect(),
                    );
                }
                // A restore pinned a checkpoint the plan did not see pinned: what it reads is
                // unknown to this plan, so stop; the next pass classifies with the pin.
                if pinned_now
                    .as_ref()
                    .is_some_and(|now| !now.is_subset(&plan.pinned))
                {
                    break;
                }
            }
            // A record or manifest that cannot be deleted must keep what it names: stop
            // before the objects that come after it in the plan.
            let commit_point = matches!(why, GcReason::SubsumedRecord | GcReason::AbandonedRecord)
                || o.name.ends_with(layout::METADATA_FILE);
            match self.storage.delete(&o.name) {
                Ok(()) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                    if commit_point {
                        break;
                    }
                    continue;
                }
            }
            stats.bytes_deleted += o.size;
            match why {
                GcReason::SubsumedRecord | GcReason::AbandonedRecord | GcReason::ExpiredVoid => {
                    stats.records_deleted += 1
                }
                GcReason::Finished | GcReason::Uncommitted => stats.checkpoint_objects_deleted += 1,
                GcReason::FinishedShared | GcReason::UnreferencedShared => {
                    stats.shared_deleted += 1
                }
                GcReason::ExpiredPin => stats.pins_deleted += 1,
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(stats),
        }
    }

    /// Puts a void record under the name of every abandoned record not fenced yet, so that no
    /// put of it can land from now on (puts are create-if-absent), and deletes a put of it
    /// found landed there first: how many it deleted. A record that fails stays abandoned for
    /// the next pass, which keeps what it names until then; the first failure is returned.
    fn fence(&self) -> Result<usize> {
        let pending: Vec<JobCheckpoint> = self.state.lock().abandoned.values().cloned().collect();
        let mut deleted = 0;
        let mut first_error = None;
        for record in pending {
            match self.fence_one(&record) {
                Ok(landed) => {
                    deleted += landed;
                    self.state.lock().fenced(record.checkpoint_id);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(deleted),
        }
    }

    /// [`JobOwner::fence`] for one record: `Ok` once a void record holds its name, with how
    /// many landed puts of the record it deleted first.
    fn fence_one(&self, record: &JobCheckpoint) -> Result<usize> {
        let id = record.checkpoint_id;
        let name = layout::job_record_name(id);
        let void = sst_format::encode_void_record(&VoidRecord {
            checkpoint_id: id,
            voided_at_ms: self.clock.now_ms(),
        });
        // Each round stores the void record or deletes one landed put of the record, which
        // has at most three (the commit's, the one settling it, `resolve`'s).
        let mut deleted = 0;
        for _ in 0..4 {
            let Err(e) = self.storage.put_bytes(&name, &void) else {
                return Ok(deleted);
            };
            // The put may have stored the void record and failed after; or the name is taken.
            match read_stored(self.storage.as_ref(), id) {
                Ok(JobRecord::Void(_)) => return Ok(deleted),
                Ok(JobRecord::Checkpoint(stored)) if same_manifests(&stored, record) => {
                    self.storage.delete(&name)?;
                    deleted += 1;
                }
                Ok(JobRecord::Checkpoint(_)) => return Err(foreign_record(id)),
                Err(Error::ObjectNotFound { .. }) => return Err(e),
                Err(read) => return Err(read),
            }
        }
        Err(Error::StorageConflict(format!(
            "job record {id} of an abandoned checkpoint landed again after every delete"
        )))
    }

    /// Registers shared names an attempt in flight in this process may reference. `instance`
    /// names one open backend (its id and a suffix of that instance), so the protections of
    /// a backend closed and opened again on its directory stay apart.
    pub(crate) fn protect(&self, instance: &str, id: u64, names: impl IntoIterator<Item = String>) {
        self.protected
            .lock()
            .entry((instance.to_string(), id))
            .or_default()
            .extend(names);
    }

    /// Drops the protections of every attempt up to `id` (checkpoint `id` completed: they can
    /// never complete now, and the record keeps what they reference).
    fn release_up_to(&self, id: u64) {
        let uploading = self.uploading.lock();
        self.protected
            .lock()
            .retain(|key, _| key.1 > id || uploading.contains(key));
    }

    /// Attempt `id` of backend instance `instance` began (`true`) or ended its upload
    /// (`false`).
    pub(crate) fn uploading(&self, instance: &str, id: u64, on: bool) {
        let key = (instance.to_string(), id);
        let mut u = self.uploading.lock();
        if on {
            u.insert(key);
        } else {
            u.remove(&key);
        }
    }

    /// Drops every protection of backend instance `instance` (it is gone: its attempts can
    /// never complete). Another instance of the same backend keeps its own.
    pub(crate) fn release_instance(&self, instance: &str) {
        self.uploading.lock().retain(|(b, _)| b != instance);
        self.protected.lock().retain(|(b, _), _| b != instance);
    }

    /// Drops what [`JobOwner::protect`] registered for that attempt.
    pub(crate) fn release(&self, instance: &str, id: u64) {
        self.protected.lock().remove(&(instance.to_string(), id));
    }
}

/// The backend ids whose manifests `record` names, in task order.
pub(crate) fn record_backends(record: &JobCheckpoint) -> impl Iterator<Item = &str> {
    record
        .tasks
        .iter()
        .filter_map(|t| t.manifest.as_deref())
        .filter_map(layout::parse_checkpoint_object)
        .map(|p| p.backend_id)
}

/// A job record in storage this owner neither found at open nor wrote.
fn foreign_record(id: u64) -> Error {
    Error::StorageConflict(format!(
        "job record {id} is in storage but this owner did not write it: another job or owner \
         completes checkpoints in the same storage (give each job its own namespace, \
         `ScopedStorage`; link a coordinated job's backends with `job_owner` or \
         `job_coordinated`)"
    ))
}

/// Whether two records describe the same checkpoint (id and task manifests).
fn same_manifests(a: &JobCheckpoint, b: &JobCheckpoint) -> bool {
    let names = |r: &JobCheckpoint| -> Vec<Option<String>> {
        r.tasks.iter().map(|t| t.manifest.clone()).collect()
    };
    a.checkpoint_id == b.checkpoint_id && names(a) == names(b)
}

/// Ids of every job record in `storage`, ascending.
pub(crate) fn record_ids(storage: &dyn CheckpointStorage) -> Result<Vec<u64>> {
    let mut ids: Vec<u64> = storage
        .list(layout::JOB_PREFIX)?
        .iter()
        .filter_map(|o| layout::parse_job_record_name(&o.name))
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Reads and decodes the job record object `id`: a completed checkpoint's record, or the void
/// record of an abandoned one. A damaged object is [`Error::CheckpointCorrupt`].
pub(crate) fn read_stored(storage: &dyn CheckpointStorage, id: u64) -> Result<JobRecord> {
    let name = layout::job_record_name(id);
    let bytes = storage.get_bytes(&name)?;
    let r = sst_format::decode_job_record(&bytes).map_err(|e| Error::CheckpointCorrupt {
        file: name.clone(),
        detail: e.to_string(),
    })?;
    if r.checkpoint_id() != id {
        return Err(Error::CheckpointCorrupt {
            file: name,
            detail: format!("record describes checkpoint {}", r.checkpoint_id()),
        });
    }
    Ok(r)
}

/// Reads and decodes job record `id`; a damaged record is [`Error::CheckpointCorrupt`], a void
/// record (the checkpoint was abandoned) [`Error::CheckpointNotFound`].
pub(crate) fn read_record(storage: &dyn CheckpointStorage, id: u64) -> Result<JobCheckpoint> {
    match read_stored(storage, id)? {
        JobRecord::Checkpoint(r) => Ok(r),
        JobRecord::Void(_) => Err(Error::CheckpointNotFound(format!(
            "checkpoint {id} was abandoned: its job record's name holds a void record"
        ))),
    }
}

/// The newest completed checkpoint's record in `storage` (void records skipped), if any.
pub(crate) fn newest_record(storage: &dyn CheckpointStorage) -> Result<Option<JobCheckpoint>> {
    completed_records(storage)?.next().transpose()
}

/// The records of completed checkpoints in `storage`, newest first, as they are read: void
/// records and records deleted since the listing are skipped.
pub(crate) fn completed_records(
    storage: &dyn CheckpointStorage,
) -> Result<impl Iterator<Item = Result<JobCheckpoint>> + '_> {
    Ok(record_ids(storage)?
        .into_iter()
        .rev()
        .filter_map(move |id| match read_stored(storage, id) {
            Ok(JobRecord::Checkpoint(r)) => Some(Ok(r)),
            Ok(JobRecord::Void(_)) | Err(Error::ObjectNotFound { .. }) => None,
            Err(e) => Some(Err(e)),
        }))
}

//! The job-level checkpoint coordinator: hands out checkpoint ids, triggers the source tasks,
//! collects one acknowledgement per task, commits checkpoint N by writing the job record
//! `job/chk-<N>` (which task snapshots belong to N; format in `docs/job-record-format.md`),
//! then tells every task that N completed, subsumes older checkpoints, and aborts a checkpoint
//! that a task declined, that a newer completion subsumed, or that timed out.
//!
//! Plain data and std channels, no async: the coordinator is driven by whoever owns it (an
//! engine's job manager thread, the `rockstate demo`, a test) through [`Coordinator::trigger`],
//! [`Coordinator::poll`] / [`Coordinator::wait`] and [`Coordinator::tick`]. Time comes from an
//! injected [`Clock`], so timeouts are tested without sleeping. Each task talks to it through a
//! [`TaskEndpoint`]: commands in, reports out.
//!
//! What a task does on each command (the coordinator does not touch backends itself):
//! * [`TaskCommand::Trigger`] (sources only) / a barrier from upstream: take the snapshot
//!   (`KeyedBackend::snapshot` + `upload`), then [`TaskEndpoint::ack`] with
//!   [`task_checkpoint`]'s summary, or [`TaskEndpoint::decline`] on failure;
//! * [`TaskCommand::Complete`]: `notify_checkpoint_complete`, and commit side effects staged for
//!   that checkpoint and every older one (an exactly-once sink): a completion covers the
//!   checkpoints before it, as in Flink, and completions arrive in ascending order;
//! * [`TaskCommand::Abort`]: `notify_checkpoint_aborted`, discard staged side effects. An abort
//!   of an id at or below the last completion (older checkpoints a completion subsumed, also
//!   a commit still in doubt then, whose record may have landed) has nothing left to discard:
//!   the completion committed it.
//!
//! The coordinator commits through the job's [`JobOwner`] ([`Coordinator::owner`]): the owner
//! checks that every file the acknowledged manifests name is in storage, writes the job record
//! and is the only one that deletes committed objects (`docs/ownership.md`). Backends of the
//! job are opened with `BackendBuilder::job_owner(coordinator.owner())` when they live in this
//! process, or `BackendBuilder::job_coordinated()` when they do not; they delete nothing a
//! completed checkpoint needs.

use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::Duration;

use sst_format::{JobCheckpoint, OperatorListState, TaskCheckpoint};

use crate::backend::KeyedBackend;
use crate::checkpoint::{layout, CheckpointStats, JobOwner};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::storage::CheckpointStorage;

/// Coordinator settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinatorConfig {
    /// Name written into every job record. At most 64 KiB.
    pub job_name: String,
    /// Number of tasks; task indexes are `0..tasks`. At most 2^20.
    pub tasks: u32,
    /// Task indexes that receive [`TaskCommand::Trigger`] (the sources). Others learn of a
    /// checkpoint from barriers in their input.
    pub sources: Vec<u32>,
    /// Key groups of the job, written into job records (0 if no task has keyed state).
    pub max_parallelism: u32,
    /// Completed job records kept (the newest). At least 1.
    pub retained: usize,
    /// A checkpoint not acknowledged by every task this long after its trigger is aborted by
    /// [`Coordinator::tick`].
    pub timeout: Duration,
    /// Checkpoints in flight at once; [`Coordinator::trigger`] returns [`Triggered::Busy`] at
    /// the limit.
    /// At least 1.
    pub max_concurrent: usize,
}

impl CoordinatorConfig {
    /// `tasks` tasks of which task 0 is the only source; retained 1, timeout 10 min, one
    /// checkpoint at a time.
    pub fn new(job_name: impl Into<String>, tasks: u32, max_parallelism: u32) -> Self {
        CoordinatorConfig {
            job_name: job_name.into(),
            tasks,
            sources: vec![0],
            max_parallelism,
            retained: 1,
            timeout: Duration::from_secs(600),
            max_concurrent: 1,
        }
    }

    fn validate(&self) -> Result<()> {
        const MAX_TASKS: u32 = 1 << 20;
        const MAX_JOB_NAME_BYTES: usize = 64 << 10;
        let bad = |what: String| Err(Error::Coordinator(what));
        if self.tasks == 0 {
            return bad("a job needs at least one task".into());
        }
        // One command slot per task is allocated up front.
        if self.tasks > MAX_TASKS {
            return bad(format!("{} tasks are more than {MAX_TASKS}", self.tasks));
        }
        // Written into every job record, which no restore could then read.
        if self.max_parallelism != 0 {
            if let Err(e) = crate::keygroup::validate_max_parallelism(self.max_parallelism) {
                return bad(e.to_string());
            }
        }
        // Every job record carries it: one that cannot fit a record could never complete
        // a checkpoint.
        if self.job_name.len() > MAX_JOB_NAME_BYTES {
            return bad(format!(
                "a job name of {} bytes is longer than {MAX_JOB_NAME_BYTES}",
                self.job_name.len()
            ));
        }
        if self.retained == 0 || self.max_concurrent == 0 {
            return bad("retained and max_concurrent must be at least 1".into());
        }
        if let Some(s) = self.sources.iter().find(|s| **s >= self.tasks) {
            return bad(format!("source {s} is not a task (0..{})", self.tasks));
        }
        if self.sources.is_empty() {
            return bad("a job needs at least one source".into());
        }
        // Checked in whole milliseconds, the clock's unit: a shorter one would abort every
        // checkpoint at the first tick.
        if crate::clock::millis(self.timeout) == 0 {
            return bad(format!("timeout {:?} is below 1 ms", self.timeout));
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(s) = self.sources.iter().find(|s| !seen.insert(**s)) {
            return bad(format!("source {s} is named twice"));
        }
        Ok(())
    }
}

/// What the coordinator tells a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskCommand {
    /// Sources: emit a barrier for this checkpoint and snapshot.
    Trigger {
        /// The checkpoint id.
        checkpoint_id: u64,
    },
    /// Checkpoint completed job-wide (its job record is in storage).
    Complete {
        /// The checkpoint id.
        checkpoint_id: u64,
    },
    /// Checkpoint aborted: discard what was staged for it.
    Abort {
        /// The checkpoint id.
        checkpoint_id: u64,
    },
}

/// What a task tells the coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskReport {
    /// The task's snapshot for `checkpoint_id` is durable.
    Ack {
        /// The checkpoint id.
        checkpoint_id: u64,
        /// The task's summary; `snapshot.task` names the task.
        snapshot: TaskCheckpoint,
    },
    /// The task could not snapshot `checkpoint_id`.
    Decline {
        /// The task index.
        task: u32,
        /// The checkpoint id.
        checkpoint_id: u64,
        /// Why (one line).
        reason: String,
    },
}

/// Why a checkpoint was aborted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AbortReason {
    /// Not every task acknowledged within the timeout.
    Timeout,
    /// A task declined.
    Declined {
        /// The task.
        task: u32,
        /// Its reason.
        reason: String,
    },
    /// A newer checkpoint completed first.
    Subsumed,
    /// A task's command channel is closed (the task is gone).
    TaskGone(u32),
    /// Writing the job record failed.
    CommitFailed(String),
    /// The owner aborted it ([`Coordinator::abort`]).
    Requested(String),
}

/// What happened to a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Committed: the job record was written and every task was told.
    Completed(JobCheckpoint),
    /// Aborted: every task was told.
    Aborted {
        /// The checkpoint id.
        checkpoint_id: u64,
        /// Why.
        reason: AbortReason,
    },
}

/// What [`Coordinator::trigger`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Triggered {
    /// Checkpoint `id` was triggered.
    Started(u64),
    /// `max_concurrent` checkpoints are in flight; nothing was triggered.
    Busy,
    /// A source is gone; the new checkpoint was aborted at once.
    Failed(Outcome),
}

/// One task's side of the coordinator: commands in, reports out. Send it to the task's thread.
#[derive(Debug)]
pub struct TaskEndpoint {
    task: u32,
    commands: Receiver<TaskCommand>,
    reports: Sender<TaskReport>,
}

impl TaskEndpoint {
    /// The task index.
    pub fn task(&self) -> u32 {
        self.task
    }

    /// Blocks until the next command; `None` once the coordinator is gone.
    pub fn recv(&self) -> Option<TaskCommand> {
        self.commands.recv().ok()
    }

    /// The next command if one is waiting; `None` if none is (or the coordinator is gone).
    pub fn try_recv(&self) -> Option<TaskCommand> {
        self.commands.try_recv().ok()
    }

    /// Acknowledges `checkpoint_id` (see [`TaskReporter::ack`]).
    pub fn ack(&self, checkpoint_id: u64, snapshot: TaskCheckpoint) -> bool {
        self.reporter().ack(checkpoint_id, snapshot)
    }

    /// Declines `checkpoint_id` (see [`TaskReporter::decline`]).
    pub fn decline(&self, checkpoint_id: u64, reason: impl Into<String>) -> bool {
        self.reporter().decline(checkpoint_id, reason)
    }

    /// A handle that only reports, for a task whose commands are read on another thread.
    pub fn reporter(&self) -> TaskReporter {
        TaskReporter {
            task: self.task,
            reports: self.reports.clone(),
        }
    }
}

/// The reporting half of a [`TaskEndpoint`] (cloneable, `Send`).
#[derive(Debug, Clone)]
pub struct TaskReporter {
    task: u32,
    reports: Sender<TaskReport>,
}

impl TaskReporter {
    /// Acknowledges `checkpoint_id` with this task's summary (its `task` field is set to this
    /// reporter's task). Returns false if the coordinator is gone.
    pub fn ack(&self, checkpoint_id: u64, mut snapshot: TaskCheckpoint) -> bool {
        snapshot.task = self.task;
        self.reports
            .send(TaskReport::Ack {
                checkpoint_id,
                snapshot,
            })
            .is_ok()
    }

    /// Declines `checkpoint_id`. Returns false if the coordinator is gone.
    pub fn decline(&self, checkpoint_id: u64, reason: impl Into<String>) -> bool {
        self.reports
            .send(TaskReport::Decline {
                task: self.task,
                checkpoint_id,
                reason: reason.into(),
            })
            .is_ok()
    }
}

/// The acknowledgement summary of one task: its keyed backend's checkpoint (manifest name,
/// key groups, figures from `stats`) if it has one, and its operator state.
pub fn task_checkpoint(
    task: u32,
    keyed: Option<(&KeyedBackend, &CheckpointStats)>,
    operator_state: Vec<OperatorListState>,
) -> TaskCheckpoint {
    let mut t = TaskCheckpoint {
        task,
        manifest: None,
        key_group_start: 0,
        key_group_end: 0,
        operator_state,
        state_bytes: 0,
        bytes_uploaded: 0,
        files_reused: 0,
        sync_micros: 0,
        async_micros: 0,
    };
    if let Some((backend, stats)) = keyed {
        let kg = backend.key_groups();
        t.manifest = Some(layout::metadata_name(
            stats.checkpoint_id,
            backend.backend_id(),
        ));
        t.key_group_start = kg.start;
        t.key_group_end = kg.end;
        t.state_bytes = stats.state_bytes;
        t.bytes_uploaded = stats.bytes_uploaded;
        t.files_reused = stats.files_reused as u64;
        t.sync_micros = stats.sync_duration.as_micros() as u64;
        t.async_micros = stats.async_duration.as_micros() as u64;
    }
    t
}

#[derive(Debug)]
struct Pending {
    triggered_at_ms: u64,
    acks: BTreeMap<u32, TaskCheckpoint>,
}

/// The checkpoint coordinator of one job (see the module docs).
#[derive(Debug)]
pub struct Coordinator {
    config: CoordinatorConfig,
    owner: Arc<JobOwner>,
    clock: Arc<dyn Clock>,
    commands: Vec<Option<Sender<TaskCommand>>>,
    reports_tx: Sender<TaskReport>,
    reports_rx: Receiver<TaskReport>,
    pending: BTreeMap<u64, Pending>,
    /// Checkpoints whose job record may or may not be in storage
    /// ([`Error::CommitInDoubt`]); [`Coordinator::tick`] asks the owner until it knows.
    in_doubt: BTreeMap<u64, JobCheckpoint>,
    /// Outcomes decided outside `poll` (a replaced endpoint's aborts), reported by the next
    /// [`Coordinator::tick`].
    deferred: Vec<Outcome>,
}

impl Coordinator {
    /// A coordinator over `storage`, with a new [`JobOwner`] of it keeping `retained` job
    /// records. Job records already there are taken as completed checkpoints of this job
    /// (a restart); new ids start above every checkpoint id found in storage (job records,
    /// task checkpoint directories and shared files), so a restarted job never reuses an id,
    /// and what earlier runs left is deleted now ([`JobOwner::open_and_collect`]).
    pub fn new(
        config: CoordinatorConfig,
        storage: Arc<dyn CheckpointStorage>,
        clock: Arc<dyn Clock>,
    ) -> Result<Coordinator> {
        config.validate()?;
        let owner = Arc::new(JobOwner::open_and_collect(
            storage,
            config.retained,
            Arc::clone(&clock),
        )?);
        let (reports_tx, reports_rx) = mpsc::channel();
        Ok(Coordinator {
            commands: vec![None; config.tasks as usize],
            config,
            owner,
            clock,
            reports_tx,
            reports_rx,
            pending: BTreeMap::new(),
            in_doubt: BTreeMap::new(),
            deferred: Vec::new(),
        })
    }

    /// The job's checkpoint owner (link in-process backends to it with
    /// `BackendBuilder::job_owner`).
    pub fn owner(&self) -> &Arc<JobOwner> {
        &self.owner
    }

    /// Creates the endpoint of task `task`. Replacing an earlier one (the task failed and
    /// was restarted) aborts every pending checkpoint ([`AbortReason::TaskGone`], reported by
    /// the next [`Coordinator::poll`] or [`Coordinator::tick`]), as Flink aborts them on a
    /// task failure: the old incarnation's acknowledgements must not complete them, and the
    /// new one restored older state and never saw their barriers. Commands then go to the new
    /// endpoint only.
    pub fn endpoint(&mut self, task: u32) -> Result<TaskEndpoint> {
        let replaced = self
            .commands
            .get(task as usize)
            .ok_or_else(|| Error::Coordinator(format!("no task {task} in this job")))?
            .is_some();
        if replaced {
            // Told before the new endpoint exists, so only the old incarnation hears of them.
            let ids: Vec<u64> = self.pending.keys().copied().collect();
            for id in ids {
                if let Some(o) = self.abort_pending(id, AbortReason::TaskGone(task)) {
                    self.deferred.push(o);
                }
            }
        }
        let (tx, rx) = mpsc::channel();
        self.commands[task as usize] = Some(tx);
        Ok(TaskEndpoint {
            task,
            commands: rx,
            reports: self.reports_tx.clone(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &CoordinatorConfig {
        &self.config
    }

    /// Ids of checkpoints triggered and neither completed nor aborted (including those whose
    /// commit is in doubt), ascending.
    pub fn pending(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .pending
            .keys()
            .chain(self.in_doubt.keys())
            .copied()
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Ids of the retained completed checkpoints (job records in storage), oldest first.
    pub fn completed(&self) -> Vec<u64> {
        self.owner.retained()
    }

    /// The newest completed checkpoint id.
    pub fn latest_completed(&self) -> Option<u64> {
        self.owner.retained().last().copied()
    }

    /// Starts a checkpoint: takes the next id and sends [`TaskCommand::Trigger`] to every
    /// source. [`Triggered::Busy`] when `max_concurrent` checkpoints are already in flight;
    /// if a source is gone the checkpoint is aborted at once ([`Triggered::Failed`]).
    pub fn trigger(&mut self) -> Result<Triggered> {
        if self.pending.len() + self.in_doubt.len() >= self.config.max_concurrent {
            return Ok(Triggered::Busy);
        }
        let id = self.owner.next_checkpoint_id()?;
        let _span = tracing::info_span!("checkpoint.trigger", id).entered();
        self.pending.insert(
            id,
            Pending {
                triggered_at_ms: self.clock.now_ms(),
                acks: BTreeMap::new(),
            },
        );
        for s in &self.config.sources {
            if !self.send(*s, TaskCommand::Trigger { checkpoint_id: id }) {
                self.pending.remove(&id);
                return Ok(Triggered::Failed(
                    self.notify_abort(id, AbortReason::TaskGone(*s)),
                ));
            }
        }
        Ok(Triggered::Started(id))
    }

    /// Handles one report: records an ack (completing the checkpoint when it is the last
    /// one) or aborts on a decline. Reports for checkpoints no longer pending (late acks after
    /// an abort or a subsumption) are ignored. A report naming a task outside the job is
    /// [`Error::Coordinator`] and changes nothing.
    pub fn handle(&mut self, report: TaskReport) -> Result<Vec<Outcome>> {
        match report {
            TaskReport::Ack {
                checkpoint_id,
                snapshot,
            } => {
                self.check_task(snapshot.task)?;
                let tasks = self.config.tasks as usize;
                let Some(p) = self.pending.get_mut(&checkpoint_id) else {
                    return Ok(Vec::new());
                };
                p.acks.entry(snapshot.task).or_insert(snapshot);
                if p.acks.len() == tasks {
                    return self.commit(checkpoint_id);
                }
                Ok(Vec::new())
            }
            TaskReport::Decline {
                task,
                checkpoint_id,
                reason,
            } => {
                self.check_task(task)?;
                Ok(self
                    .abort_pending(checkpoint_id, AbortReason::Declined { task, reason })
                    .into_iter()
                    .collect())
            }
        }
    }

    /// Handles every report waiting, then [`Coordinator::tick`]. Never blocks.
    pub fn poll(&mut self) -> Result<Vec<Outcome>> {
        let mut out = Vec::new();
        // The coordinator holds a sender itself, so the channel never disconnects.
        while let Ok(r) = self.reports_rx.try_recv() {
            out.extend(self.handle(r)?);
        }
        out.extend(self.tick()?);
        Ok(out)
    }

    /// Waits up to `max_wait` (real time) for one report, handles it and everything else
    /// waiting, then ticks. For drivers that have nothing else to do meanwhile.
    pub fn wait(&mut self, max_wait: Duration) -> Result<Vec<Outcome>> {
        let mut out = Vec::new();
        match self.reports_rx.recv_timeout(max_wait) {
            Ok(r) => out.extend(self.handle(r)?),
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {}
        }
        out.extend(self.poll()?);
        Ok(out)
    }

    /// Reports the aborts a replaced endpoint caused ([`Coordinator::endpoint`]), settles
    /// commits in doubt (the owner reads storage again: the record is there → completed,
    /// absent → aborted, no answer → still in doubt), then aborts every pending checkpoint
    /// triggered `timeout` or longer ago (by the clock).
    pub fn tick(&mut self) -> Result<Vec<Outcome>> {
        let mut out = std::mem::take(&mut self.deferred);
        out.extend(self.settle_in_doubt(u64::MAX));
        out.extend(self.abort_expired()?);
        Ok(out)
    }

    /// Asks the owner about every commit in doubt below `below`.
    fn settle_in_doubt(&mut self, below: u64) -> Vec<Outcome> {
        let mut out = Vec::new();
        let doubtful: Vec<(u64, JobCheckpoint)> = self
            .in_doubt
            .range(..below)
            .map(|(id, r)| (*id, r.clone()))
            .collect();
        for (id, record) in doubtful {
            match self.owner.resolve(&record) {
                Ok(true) => {
                    if let Some(record) = self.in_doubt.remove(&id) {
                        out.extend(self.finish(record));
                    }
                }
                Ok(false) => {
                    self.in_doubt.remove(&id);
                    out.push(self.notify_abort(
                        id,
                        AbortReason::CommitFailed("the job record is not in storage".into()),
                    ));
                }
                Err(e) => tracing::warn!(id, error = %e, "commit still in doubt"),
            }
        }
        out
    }

    fn abort_expired(&mut self) -> Result<Vec<Outcome>> {
        let now = self.clock.now_ms();
        let timeout = crate::clock::millis(self.config.timeout);
        let expired: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.triggered_at_ms.saturating_add(timeout) <= now)
            .map(|(id, _)| *id)
            .collect();
        Ok(expired
            .into_iter()
            .filter_map(|id| self.abort_pending(id, AbortReason::Timeout))
            .collect())
    }

    /// Aborts pending checkpoint `id` (the owner's decision, e.g. on shutdown). `None` if it is
    /// not pending.
    pub fn abort(&mut self, id: u64, reason: impl Into<String>) -> Option<Outcome> {
        self.abort_pending(id, AbortReason::Requested(reason.into()))
    }

    fn check_task(&self, task: u32) -> Result<()> {
        if task < self.config.tasks {
            Ok(())
        } else {
            Err(Error::Coordinator(format!(
                "report from task {task}, but the job has tasks 0..{}",
                self.config.tasks
            )))
        }
    }

    /// Sends `cmd` to `task`; false if the task has no endpoint or dropped it.
    fn send(&self, task: u32, cmd: TaskCommand) -> bool {
        self.commands
            .get(task as usize)
            .and_then(|c| c.as_ref())
            .is_some_and(|c| c.send(cmd).is_ok())
    }

    fn abort_pending(&mut self, id: u64, reason: AbortReason) -> Option<Outcome> {
        self.pending.remove(&id)?;
        Some(self.notify_abort(id, reason))
    }

    /// Tells every task that `id` is aborted.
    fn notify_abort(&self, id: u64, reason: AbortReason) -> Outcome {
        let _span = tracing::info_span!("checkpoint.abort", id).entered();
        tracing::info!(id, ?reason, "checkpoint aborted");
        for t in 0..self.config.tasks {
            // A task that is gone has nothing to discard.
            let _ = self.send(t, TaskCommand::Abort { checkpoint_id: id });
        }
        Outcome::Aborted {
            checkpoint_id: id,
            reason,
        }
    }

    /// Every task acked `id`: write the job record, notify, subsume.
    fn commit(&mut self, id: u64) -> Result<Vec<Outcome>> {
        let Some(p) = self.pending.remove(&id) else {
            return Ok(Vec::new());
        };
        let record = JobCheckpoint {
            checkpoint_id: id,
            job_name: self.config.job_name.clone(),
            max_parallelism: self.config.max_parallelism,
            triggered_at_ms: p.triggered_at_ms,
            completed_at_ms: self.clock.now_ms(),
            tasks: p.acks.into_values().collect(),
        };
        let committed = {
            let _span = tracing::info_span!("checkpoint.commit", id).entered();
            self.owner.commit(&record)
        };
        match committed {
            Ok(c) => {
                if let Some(e) = c.gc_error {
                    // Completed; only deleting what it subsumed failed (the next pass retries).
                    tracing::warn!(id, error = %e, "deleting subsumed checkpoints failed");
                }
                // Older commits in doubt first: their tasks must hear of them before `id`.
                let mut out = self.settle_in_doubt(id);
                out.extend(self.finish(record));
                Ok(out)
            }
            // The record may be in storage: the tasks keep their snapshots until `tick` knows.
            Err(Error::CommitInDoubt { .. }) => {
                self.in_doubt.insert(id, record);
                Ok(Vec::new())
            }
            // Nothing was committed: the tasks discard their snapshots.
            Err(e) => {
                Ok(vec![self.notify_abort(
                    id,
                    AbortReason::CommitFailed(e.to_string()),
                )])
            }
        }
    }

    /// `record` is in storage: tell every task, abort older pending checkpoints and older
    /// commits still in doubt (subsumed: whether their record landed no longer matters, and
    /// their tasks must not hear of a completion older than this one after it).
    fn finish(&mut self, record: JobCheckpoint) -> Vec<Outcome> {
        let id = record.checkpoint_id;
        let mut out = Vec::new();
        {
            let _span = tracing::info_span!("checkpoint.notify", id).entered();
            for t in 0..self.config.tasks {
                // A task that is gone is restored from this record later; nothing to tell it.
                let _ = self.send(t, TaskCommand::Complete { checkpoint_id: id });
            }
        }
        let older: Vec<u64> = self.pending.range(..id).map(|(k, _)| *k).collect();
        for k in older {
            out.extend(self.abort_pending(k, AbortReason::Subsumed));
        }
        let doubtful: Vec<u64> = self.in_doubt.range(..id).map(|(k, _)| *k).collect();
        for k in doubtful {
            self.in_doubt.remove(&k);
            out.push(self.notify_abort(k, AbortReason::Subsumed));
        }
        out.insert(0, Outcome::Completed(record));
        out
    }
}

/// Ids of the completed checkpoints whose job records are in `storage`, ascending (void
/// records, the names of abandoned checkpoints' records, are none).
pub fn list_job_checkpoints(storage: &dyn CheckpointStorage) -> Result<Vec<u64>> {
    let mut ids = crate::checkpoint::owner::completed_records(storage)?
        .map(|r| r.map(|r| r.checkpoint_id))
        .collect::<Result<Vec<u64>>>()?;
    ids.reverse();
    Ok(ids)
}

/// Reads and decodes job record `id`; a damaged record is [`Error::CheckpointCorrupt`] naming
/// it, a void record (checkpoint `id` was abandoned) [`Error::CheckpointNotFound`].
pub fn read_job_checkpoint(storage: &dyn CheckpointStorage, id: u64) -> Result<JobCheckpoint> {
    crate::checkpoint::owner::read_record(storage, id)
}

/// The newest job record in `storage`, if any (what a job restores from).
pub fn latest_job_checkpoint(storage: &dyn CheckpointStorage) -> Result<Option<JobCheckpoint>> {
    crate::checkpoint::owner::newest_record(storage)
}

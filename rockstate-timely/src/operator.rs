//! The adapter between timely and rockstate: the keyed operator, its frontier-driven
//! checkpoints, job-wide completion through worker 0 and the completion broadcast.
//!
//! Epochs are timely timestamps (`u64`) and checkpoint ids: checkpoint `e` holds the effect
//! of every record of epochs up to `e`. The dataflow [`checkpointed`] builds is
//!
//! ```text
//! records ──Exchange(owner of key group)──► keyed (one KeyedBackend per worker)
//!   keyed ──acks (TaskCheckpoint at time e)──Exchange(→ 0)──► commit (worker 0: JobOwner)
//!   commit ──completed e──broadcast──► watcher (every worker) ──Rc queue──► keyed
//! ```
//!
//! - **Routing.** A record goes to worker `key_group · peers / max_parallelism`, the worker
//!   whose [`KeyGroupRange::for_operator`] range holds its group ([`owner_of`]).
//! - **Epoch order.** Records of later epochs can arrive before an earlier one closes; the
//!   operator buffers them by epoch and applies epoch `e` only when its input frontier has
//!   passed `e`, so snapshot `e` holds exactly epochs `≤ e`.
//! - **Checkpoint.** Right after applying `e`, the operator takes the sync phase
//!   ([`KeyedBackend::snapshot`]) and hands the upload to a thread, holding a capability for
//!   `e` on its acknowledgement output meanwhile; when the upload finishes it sends its
//!   [`TaskCheckpoint`] at `e` and drops the capability. Processing goes on during the upload.
//! - **Completion.** Worker 0's commit operator sees its input frontier pass `e` only after
//!   every worker sent its acknowledgement for `e` (each held `e` until then), so no counting
//!   is needed: it writes the job record `job/chk-<e>` through [`JobOwner::commit`] (the
//!   commit point) and emits `e`, which is broadcast to every worker. Each worker then calls
//!   [`KeyedBackend::notify_checkpoint_complete`] and [`EpochLogic::completed`], where a sink
//!   commits what it staged up to `e`.
//!
//! A failure inside an operator (a storage error, a rejected commit) cannot be returned
//! through timely: [`fatal`] ends the process, its peers lose their connections and fail too,
//! and the job restarts from its last completed checkpoint, as a Flink job's full restart
//! does.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use rockstate::coordinator::task_checkpoint;
use rockstate::operator_state::OperatorState;
use rockstate::{CheckpointStats, JobOwner, KeyGroupRange, KeyedBackend};
use sst_format::{JobCheckpoint, TaskCheckpoint};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::{Exchange, Pipeline};
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::{Operator, OutputBuilder};
use timely::dataflow::operators::vec::Broadcast;
use timely::dataflow::operators::Capability;
use timely::dataflow::Stream;
use timely::ExchangeData;

use crate::error::{Error, Result};

/// Exit status of a process that stopped because an operator failed ([`fatal`]).
pub const FATAL_EXIT: i32 = 3;

/// Ends the process after an operator failed: timely operators cannot return errors, and a
/// job whose checkpoint or commit failed restarts as a whole from its last completed
/// checkpoint (the peers fail when this process's connections close).
///
/// The process ends at once, without running exit handlers or static destructors: other
/// workers, uploads and RocksDB's background threads are still running, and tearing down
/// what they use under them could crash or hang the exit.
pub fn fatal(error: &Error) -> ! {
    eprintln!("rockstate-timely: {error}; stopping the process so the job restarts");
    // SAFETY: `_exit` takes no pointers and does not return; it ends the process without
    // touching any state of this one.
    unsafe { libc::_exit(FATAL_EXIT) }
}

/// Makes a panic on any thread of the process end it as [`fatal`] does, after the panic's
/// message is printed. Without it, a worker thread that panics unwinds alone: the other
/// workers of its process wait forever for its progress, and the job's other processes for
/// its messages, instead of failing so that the job restarts. Engines call it once at
/// start-up (the `rockstate-timely worker` process does); [`checkpointed`] also turns a panic
/// inside its own operators (the job's [`EpochLogic`] included) into [`fatal`] without it.
pub fn exit_on_panic() {
    let printed = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        printed(info);
        fatal(&Error::Job(format!("a thread panicked: {info}")));
    }));
}

/// Runs `f`, turning a panic into [`fatal`]: see [`exit_on_panic`].
fn or_fatal<R>(what: &str, f: impl FnOnce() -> R) -> R {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => fatal(&Error::Job(format!("{what} panicked"))),
    }
}

/// The worker (of `peers`) whose [`KeyGroupRange::for_operator`] range holds `key_group` of
/// a job with `max_parallelism` key groups: `key_group · peers / max_parallelism`. An
/// exchange pact that returns it routes to exactly that worker index.
pub fn owner_of(key_group: u16, max_parallelism: u32, peers: usize) -> u64 {
    u64::from(key_group) * peers as u64 / u64::from(max_parallelism).max(1)
}

/// The key-group range worker `index` of `peers` owns.
pub fn worker_range(max_parallelism: u32, peers: usize, index: usize) -> Result<KeyGroupRange> {
    let (p, i) = (
        u32::try_from(peers).map_err(|_| Error::Usage(format!("{peers} workers")))?,
        u32::try_from(index).map_err(|_| Error::Usage(format!("worker {index}")))?,
    );
    Ok(KeyGroupRange::for_operator(max_parallelism, p, i)?)
}

/// What the user's logic does with each closed epoch; the adapter calls it on the worker
/// thread in epoch order.
pub trait EpochLogic<D>: 'static {
    /// Applies the records of `epoch` (all of this worker's, in arrival order) to the state.
    fn apply(&mut self, backend: &KeyedBackend, epoch: u64, records: Vec<D>) -> Result<()>;
    /// The operator state (source offsets, staged sink transactions) that checkpoint `epoch`
    /// stores with this worker's keyed state; called right after [`EpochLogic::apply`] of
    /// `epoch` when checkpoints are on.
    fn snapshot(&mut self, epoch: u64) -> Result<OperatorState>;
    /// Checkpoint `epoch` completed job-wide (or, with checkpoints off, `epoch` was applied):
    /// commit what was staged up to it.
    fn completed(&mut self, epoch: u64) -> Result<()>;
}

/// A callback on worker 0 after the job record of an epoch was committed.
pub type OnCommit = Box<dyn FnMut(u64, &JobCheckpoint)>;

/// How one worker's keyed operator runs.
pub struct Settings {
    /// This worker's backend, opened or restored for [`worker_range`], created with
    /// `job_coordinated()` (the owner is worker 0's).
    pub backend: KeyedBackend,
    /// The first epoch this run processes; above every checkpoint id in storage.
    pub first_epoch: u64,
    /// The last epoch of the input: every worker checkpoints every epoch up to it, and the
    /// operator stays alive until it completed.
    pub last_epoch: u64,
    /// Whether to checkpoint (off: epochs are applied and committed without checkpoints).
    pub checkpoints: bool,
    /// The job owner, on worker 0 only: it commits the job records.
    pub owner: Option<Arc<JobOwner>>,
    /// The job name stored in the job records.
    pub job_name: String,
    /// How many checkpoints may be taken beyond the last completed one: at most the job
    /// owner's retained count. A checkpoint's upload reuses files of the last completed
    /// checkpoint, which the owner (in another process, blind to this upload) deletes once
    /// that many newer checkpoints completed; so checkpoint `e` waits for `e - pipelined` to
    /// complete (records of later epochs stay buffered meanwhile).
    pub pipelined: u64,
    /// Called on worker 0 after the job record of each epoch was committed.
    pub on_commit: Option<OnCommit>,
    /// The process's activity gauges, if anyone observes them.
    pub activity: Option<Arc<Activity>>,
}

/// What the adapter of one process is doing right now, as gauges (an observer, such as a
/// harness that kills processes at random moments, reads them to tell which phase it hit).
#[derive(Debug, Default)]
pub struct Activity {
    /// Workers restoring their backend (set by the job around its restore).
    pub restoring: AtomicUsize,
    /// Epochs being applied to state.
    pub applying: AtomicUsize,
    /// Checkpoint uploads in flight.
    pub uploading: AtomicUsize,
    /// Completions in progress: worker 0 committing a job record, or a worker notifying its
    /// backend and committing its staged sink output.
    pub completing: AtomicUsize,
}

impl Activity {
    /// The phase to name for a process in this state, most specific first: `restore`,
    /// `completion`, `upload`, `processing`, else `idle` (waiting for input or progress).
    pub fn phase(
        restoring: usize,
        applying: usize,
        uploading: usize,
        completing: usize,
    ) -> &'static str {
        if restoring > 0 {
            "restore"
        } else if completing > 0 {
            "completion"
        } else if uploading > 0 {
            "upload"
        } else if applying > 0 {
            "processing"
        } else {
            "idle"
        }
    }

    /// One line `restoring=… applying=… uploading=… completing=…`.
    pub fn line(&self) -> String {
        format!(
            "restoring={} applying={} uploading={} completing={}",
            self.restoring.load(Ordering::Relaxed),
            self.applying.load(Ordering::Relaxed),
            self.uploading.load(Ordering::Relaxed),
            self.completing.load(Ordering::Relaxed),
        )
    }

    /// The phase a [`Activity::line`] names (`None` if it is not such a line).
    pub fn phase_of_line(line: &str) -> Option<&'static str> {
        let mut v = [0usize; 4];
        for (i, (part, key)) in line
            .split_whitespace()
            .zip(["restoring=", "applying=", "uploading=", "completing="])
            .enumerate()
        {
            v[i] = part.strip_prefix(key)?.parse().ok()?;
        }
        Some(Activity::phase(v[0], v[1], v[2], v[3]))
    }
}

/// Counts one unit of work on `gauge` while alive.
struct Busy(Option<Arc<Activity>>, fn(&Activity) -> &AtomicUsize);

impl Busy {
    fn new(activity: &Option<Arc<Activity>>, gauge: fn(&Activity) -> &AtomicUsize) -> Busy {
        if let Some(a) = activity {
            gauge(a).fetch_add(1, Ordering::Relaxed);
        }
        Busy(activity.clone(), gauge)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(a) = &self.0 {
            (self.1)(a).fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// An upload in flight: the capability that keeps epoch `e` open on the acknowledgement
/// output, and the operator state its acknowledgement carries.
struct InFlight {
    cap: Capability<u64>,
    operator_state: OperatorState,
}

/// Builds the keyed operator, the commit operator and the completion watcher for `records`
/// (see the module docs) and returns the acknowledgement stream (one [`TaskCheckpoint`] per
/// worker and epoch), which sources can probe to bound the epochs in flight.
pub fn checkpointed<'scope, D, L, K>(
    records: Stream<'scope, u64, Vec<D>>,
    key_group: K,
    settings: Settings,
    mut logic: L,
) -> Stream<'scope, u64, Vec<TaskCheckpoint>>
where
    D: ExchangeData,
    L: EpochLogic<D>,
    K: Fn(&D) -> u16 + 'static,
{
    let scope = records.scope();
    let (me, peers) = (scope.index(), scope.peers());
    let Settings {
        backend,
        first_epoch,
        last_epoch,
        checkpoints,
        owner,
        job_name,
        pipelined,
        mut on_commit,
        activity,
    } = settings;
    let commit_activity = activity.clone();
    let pipelined = pipelined.max(1);
    let max_parallelism = backend.max_parallelism();
    let mut builder = OperatorBuilder::new("rockstate-keyed".into(), scope);
    let mut input = builder.new_input(
        records,
        Exchange::new(move |d: &D| owner_of(key_group(d), max_parallelism, peers)),
    );
    let (acks_out, acks) = builder.new_output::<Vec<TaskCheckpoint>>();
    let mut acks_out =
        OutputBuilder::<u64, CapacityContainerBuilder<Vec<TaskCheckpoint>>>::from(acks_out);
    let address = builder.operator_info().address;
    let wake = scope.worker().sync_activator_for(address.to_vec());
    let completed: Rc<RefCell<VecDeque<u64>>> = Rc::new(RefCell::new(VecDeque::new()));
    let completed_in = Rc::clone(&completed);
    builder.build_reschedule(move |mut caps| {
        // One output, so one capability; it starts at time 0 and moves to the first epoch.
        let mut base = caps.pop();
        if let Some(cap) = base.as_mut() {
            cap.downgrade(&first_epoch);
        }
        let mut buffered: BTreeMap<u64, Vec<D>> = BTreeMap::new();
        let mut applied = first_epoch - 1;
        let mut completed_through = first_epoch - 1;
        let mut in_flight: BTreeMap<u64, InFlight> = BTreeMap::new();
        let (tx, rx) = mpsc::channel::<(u64, rockstate::Result<CheckpointStats>)>();
        move |frontiers| {
            let step = || -> Result<bool> {
                loop {
                    let next = completed_in.borrow_mut().pop_front();
                    let Some(e) = next else { break };
                    if e > completed_through {
                        let _busy = Busy::new(&activity, |a| &a.completing);
                        backend.notify_checkpoint_complete(e)?;
                        logic.completed(e)?;
                        completed_through = e;
                    }
                }
                input.for_each(|cap, data| {
                    if let Some(&t) = cap.least() {
                        if t > applied {
                            buffered.entry(t).or_default().append(data);
                        }
                    }
                });
                // Epochs below the frontier are closed; an empty frontier closes them all.
                let upto = frontiers[0]
                    .frontier()
                    .as_option()
                    .copied()
                    .unwrap_or(last_epoch + 1);
                while applied + 1 < upto
                    && applied < last_epoch
                    && (!checkpoints || applied + 1 - completed_through <= pipelined)
                {
                    let e = applied + 1;
                    let applying = Busy::new(&activity, |a| &a.applying);
                    logic.apply(&backend, e, buffered.remove(&e).unwrap_or_default())?;
                    drop(applying);
                    applied = e;
                    if !checkpoints {
                        logic.completed(e)?;
                        completed_through = e;
                        continue;
                    }
                    let operator_state = logic.snapshot(e)?;
                    let pending = backend.snapshot(e)?;
                    let Some(cap) = base.as_ref().map(|c| c.delayed(&e)) else {
                        return Err(Error::Job(format!("epoch {e} after the operator closed")));
                    };
                    in_flight.insert(
                        e,
                        InFlight {
                            cap,
                            operator_state,
                        },
                    );
                    let (tx, wake) = (tx.clone(), wake.clone());
                    let uploading = Busy::new(&activity, |a| &a.uploading);
                    std::thread::spawn(move || {
                        let uploaded = or_fatal("a checkpoint upload", || pending.upload());
                        drop(uploading);
                        let _ = tx.send((e, uploaded));
                        let _ = wake.activate();
                    });
                }
                if applied >= last_epoch {
                    base = None;
                } else if let Some(cap) = base.as_mut() {
                    cap.downgrade(&(applied + 1));
                }
                while let Ok((e, uploaded)) = rx.try_recv() {
                    let stats = uploaded?;
                    let Some(f) = in_flight.remove(&e) else {
                        return Err(Error::Job(format!("upload of unknown epoch {e}")));
                    };
                    let ack = task_checkpoint(
                        me as u32,
                        Some((&backend, &stats)),
                        f.operator_state.snapshot(),
                    );
                    acks_out.activate().session(&f.cap).give(ack);
                }
                // Alive until the last epoch completed job-wide: its sink output commits then.
                Ok(!in_flight.is_empty() || completed_through < last_epoch)
            };
            // A panic (in the job's logic or here) ends the process like an error: unwound,
            // it would leave this worker's peers waiting for it forever.
            match or_fatal("the keyed operator", step) {
                Ok(incomplete) => incomplete,
                Err(e) => fatal(&e),
            }
        }
    });

    let committed = acks
        .clone()
        .unary_frontier::<CapacityContainerBuilder<Vec<u64>>, _, _, _>(
            Exchange::new(|_: &TaskCheckpoint| 0),
            "rockstate-commit",
            move |_cap, _info| {
                let mut pending: BTreeMap<u64, (Capability<u64>, Vec<TaskCheckpoint>)> =
                    BTreeMap::new();
                move |(input, frontier), output| {
                    or_fatal("the commit operator", || {
                        input.for_each(|cap, data| {
                            if let Some(&t) = cap.least() {
                                pending
                                    .entry(t)
                                    .or_insert_with(|| (cap.delayed(&t, 0), Vec::new()))
                                    .1
                                    .append(data);
                            }
                        });
                        while let Some((&e, _)) = pending.first_key_value() {
                            if frontier.less_equal(&e) {
                                break;
                            }
                            let Some((_, (cap, tasks))) = pending.pop_first() else {
                                break;
                            };
                            let started = Instant::now();
                            let _busy = Busy::new(&commit_activity, |a| &a.completing);
                            match commit(
                                owner.as_deref(),
                                &job_name,
                                max_parallelism,
                                peers,
                                e,
                                tasks,
                            ) {
                                Ok(record) => {
                                    if let Some(f) = on_commit.as_mut() {
                                        f(e, &record);
                                    }
                                    output.session(&cap).give(e);
                                }
                                Err(err) => fatal(&Error::Job(format!(
                                    "commit of checkpoint {e} after {:?}: {err}",
                                    started.elapsed()
                                ))),
                            }
                        }
                    })
                }
            },
        );
    let activator = scope.activator_for(address);
    committed.broadcast().sink(
        Pipeline,
        "rockstate-completed",
        move |(input, _frontier)| {
            let mut any = false;
            input.for_each(|_cap, data| {
                completed.borrow_mut().extend(data.drain(..));
                any = true;
            });
            if any {
                activator.activate();
            }
        },
    );
    acks
}

/// Worker 0's commit of checkpoint `epoch` from every worker's acknowledgement.
fn commit(
    owner: Option<&JobOwner>,
    job_name: &str,
    max_parallelism: u32,
    peers: usize,
    epoch: u64,
    mut tasks: Vec<TaskCheckpoint>,
) -> Result<JobCheckpoint> {
    let owner = owner.ok_or_else(|| {
        Error::Job("acknowledgements reached a worker without the job owner".into())
    })?;
    tasks.sort_by_key(|t| t.task);
    tasks.dedup_by_key(|t| t.task);
    if tasks.len() != peers {
        return Err(Error::Job(format!(
            "checkpoint {epoch}: {} of {peers} workers acknowledged",
            tasks.len()
        )));
    }
    let now = owner.clock().now_ms();
    let record = JobCheckpoint {
        checkpoint_id: epoch,
        job_name: job_name.to_string(),
        max_parallelism,
        triggered_at_ms: now,
        completed_at_ms: now,
        tasks,
    };
    let committed = owner.commit(&record)?;
    if let Some(e) = committed.gc_error {
        // The commit took effect; the next pass retries the deletions.
        eprintln!("rockstate-timely: garbage pass after checkpoint {epoch}: {e}");
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activity_lines_name_the_most_specific_phase() {
        let a = Activity::default();
        assert_eq!(Activity::phase_of_line(&a.line()), Some("idle"));
        a.applying.store(1, Ordering::Relaxed);
        assert_eq!(Activity::phase_of_line(&a.line()), Some("processing"));
        a.uploading.store(2, Ordering::Relaxed);
        assert_eq!(Activity::phase_of_line(&a.line()), Some("upload"));
        a.completing.store(1, Ordering::Relaxed);
        assert_eq!(Activity::phase_of_line(&a.line()), Some("completion"));
        a.restoring.store(1, Ordering::Relaxed);
        assert_eq!(Activity::phase_of_line(&a.line()), Some("restore"));
        assert_eq!(Activity::phase_of_line("garbage"), None);
    }

    #[test]
    fn owner_of_matches_the_worker_ranges() {
        for m in [1u32, 2, 7, 128, 1000, 4096] {
            for p in 1..=m.min(40) as usize {
                for kg in 0..m as u16 {
                    let o = owner_of(kg, m, p) as usize;
                    assert!(o < p);
                    let range = worker_range(m, p, o).unwrap();
                    assert!(range.contains(kg), "m {m} p {p} kg {kg} -> {o} {range:?}");
                }
            }
        }
    }
}

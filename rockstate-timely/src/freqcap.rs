//! The frequency-capping job on timely: impressions `(user, ad, time)` from a deterministic
//! partitioned source, a per-(user, ad) impression counter (`ValueState<u64>`, 24 h TTL) and
//! list of impression times (`ListState<u64>`, no TTL, written by `add` and by `update`, so as
//! single elements, runs and list heads) in each worker's rockstate backend, and an alert
//! `(user, ad)` when a counter first exceeds [`CAP`], written through a two-phase-commit sink
//! into files. A restored worker checks both states against what the restored offsets imply.
//!
//! This module owns the job's logic and its state outside the processes:
//!
//! - **Input.** Impression `i` is a pure function of `(seed, i)` and lies in partition
//!   `i % partitions`. Each worker reads a set of partitions and keeps `(partition, next
//!   index)` per partition; at every epoch it emits the next `ceil(epoch_records /
//!   partitions)` impressions of each. The offsets after epoch `e` go into checkpoint `e` as
//!   operator state ([`OFFSETS`], split redistribution), so a restart at another worker
//!   count hands the partitions out anew and every worker derives the same last epoch.
//! - **Sink.** Alerts raised in epoch `e` are staged; checkpoint `e` carries every
//!   uncommitted transaction `(worker, epoch, alerts)` ([`PENDING`], union redistribution).
//!   When `e` completes, the worker commits its transactions up to `e` as one file each,
//!   `sink/t<worker>-c<epoch>`, written to a temporary name and renamed: a commit is
//!   idempotent per `(worker, checkpoint)` (checkpoint ids are never reused across runs).
//!   After a restore every worker commits the transactions of the restored record (they
//!   belong to a completed checkpoint; some were committed before the crash).
//! - **Restore check.** Each restored worker compares its counters key by key with the
//!   impressions the restored offsets say were consumed and writes any difference to
//!   `mismatch-*` files the launcher fails on.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rockstate::coordinator::read_job_checkpoint;
use rockstate::operator_state::{redistribute, OperatorState};
use rockstate::{
    ChangelogOptions, CheckpointOptions, CheckpointStorage, JobOwner, KeyedBackend, ListState,
    LocalStorage, ManualClock, RestoreFrom, ScopedStorage, SharedFetches, StateDescriptor,
    SystemClock, TtlConfig, ValueState,
};
use sst_format::{JobCheckpoint, RedistributionMode};
use timely::dataflow::operators::generic::operator::source;
use timely::dataflow::operators::probe::Handle as ProbeHandle;
use timely::dataflow::operators::Probe;
use timely::dataflow::Stream;

use crate::error::{Error, Result};
use crate::operator::{checkpointed, fatal, worker_range, Activity, EpochLogic, Settings};

/// Key groups of the job.
pub const MAX_PARALLELISM: u32 = 128;
/// An alert is raised when a counter first exceeds this.
pub const CAP: u64 = 5;
/// Completed checkpoints the job keeps.
pub const RETAINED: usize = 2;
/// Operator-state list of the source offsets: `(partition, next index)` pairs.
pub const OFFSETS: &str = "offsets";
/// Operator-state list of the uncommitted sink transactions.
pub const PENDING: &str = "pending-alerts";
/// Epochs a source may run ahead of the last epoch every worker acknowledged.
const IN_FLIGHT: u64 = 2;
/// The job's local staging root (`<job dir>/<this>`), shared by every run's backends.
pub const STAGING_ROOT: &str = ".rockstate-staging";

/// The offsets a worker's source reached at the end of each epoch, shared with the keyed
/// logic on the same worker (which stores them in the epoch's checkpoint).
type OffsetsAfter = Rc<RefCell<BTreeMap<u64, Vec<(u32, u64)>>>>;

/// A sink transaction: the alerts worker `.0` raised in epoch (checkpoint) `.1`.
pub type Txn = (u32, u64, Vec<(u32, u32)>);

/// The job's parameters: the same in the launcher and in every process.
#[derive(clap::Args, Debug, Clone)]
pub struct JobParams {
    /// Impressions to process.
    #[arg(long, default_value_t = 60_000)]
    pub impressions: u64,
    /// Distinct users.
    #[arg(long, default_value_t = 2_000)]
    pub users: u32,
    /// Distinct ads.
    #[arg(long, default_value_t = 20)]
    pub ads: u32,
    /// Input partitions (impression `i` is in partition `i % partitions`).
    #[arg(long, default_value_t = 12)]
    pub partitions: u32,
    /// Impressions per epoch; each epoch is one checkpoint.
    #[arg(long, default_value_t = 5_000)]
    pub epoch_records: u64,
    /// Seed of the impression stream.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Run without checkpoints (for the benchmark; output is then not exactly-once).
    #[arg(long)]
    pub no_checkpoints: bool,
    /// Checkpoint in changelog mode with these settings as JSON (`enabled` is implied), e.g.
    /// `{"materialize_log_percent":10,"materialize_min_log_bytes":0}` so that log
    /// checkpoints and materializations alternate across the kills and rescales.
    #[arg(long)]
    pub changelog: Option<String>,
}

impl JobParams {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<()> {
        if self.users == 0 || self.ads == 0 || self.partitions == 0 || self.epoch_records == 0 {
            return Err(Error::Usage(
                "users, ads, partitions and epoch records must be at least 1".into(),
            ));
        }
        self.checkpoint_options()?;
        Ok(())
    }

    /// The backends' checkpoint settings: the defaults, or changelog mode with
    /// `--changelog`'s settings.
    pub fn checkpoint_options(&self) -> Result<CheckpointOptions> {
        let Some(json) = &self.changelog else {
            return Ok(CheckpointOptions::default());
        };
        Ok(CheckpointOptions {
            changelog: ChangelogOptions::enabled_from_json(json)
                .map_err(|e| Error::Usage(format!("--changelog: {e}")))?,
            ..CheckpointOptions::default()
        })
    }

    /// Impressions each partition emits per epoch.
    fn chunk(&self) -> u64 {
        self.epoch_records
            .div_ceil(u64::from(self.partitions))
            .max(1)
    }

    /// The epochs after `first_epoch - 1` needed to read every partition to the end from
    /// `offsets` (at least one, so every run ends with a checkpoint).
    pub fn epochs_left(&self, offsets: &[(u32, u64)]) -> u64 {
        let step = u64::from(self.partitions);
        offsets
            .iter()
            .map(|&(_, next)| {
                self.impressions
                    .saturating_sub(next)
                    .div_ceil(step)
                    .div_ceil(self.chunk())
            })
            .max()
            .unwrap_or(0)
            .max(1)
    }
}

fn mix(mut x: u64) -> u64 {
    // splitmix64
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Impression `i`: `(user, ad, time ms)`.
pub fn impression(p: &JobParams, i: u64) -> (u32, u32, u64) {
    let h = mix(p.seed ^ mix(i));
    (
        (h % u64::from(p.users)) as u32,
        ((h >> 32) % u64::from(p.ads)) as u32,
        1_700_000_000_000 + i * 10,
    )
}

/// The key group of `(user, ad)`.
pub fn key_group(user: u32, ad: u32) -> Result<u16> {
    let bytes = rockstate::codec::encode(&(user, ad), "key")?;
    Ok(rockstate::keygroup::key_group_of(&bytes, MAX_PARALLELISM))
}

/// An impression on the wire: `(user, ad, time ms, key group)`.
pub type Impression = (u32, u32, u64, u16);

/// The per-(user, ad) impression counters (24 h TTL: impression times span far less, so
/// expiry never changes the result).
pub fn impressions_state(backend: &KeyedBackend) -> Result<ValueState<(u32, u32), (), u64>> {
    Ok(backend.value_state(
        StateDescriptor::new("impressions").with_ttl(TtlConfig::new(Duration::from_secs(86_400))),
    )?)
}

/// The per-(user, ad) impression times, a list the job keeps beside the counters so the crash
/// loops check list state too: a key's odd impressions `add` their time, its even ones
/// rewrite the whole list with `update` (a run, docs/decisions/0033-list-runs.md). No TTL, so
/// on RocksDB each `update` is blind: it writes the list's head and leaves the entries it
/// replaced for reads and compactions to remove (docs/decisions/0034-blind-list-updates.md),
/// and every kill, restore and rescale of the loops carries heads and dead entries.
pub fn times_state(backend: &KeyedBackend) -> Result<ListState<(u32, u32), (), u64>> {
    Ok(backend.list_state(StateDescriptor::new("times"))?)
}

/// Calls `f` with each impression `(user, ad, time)` before `offsets` (each `(partition,
/// next index)`), partition by partition.
fn each_before(p: &JobParams, offsets: &[(u32, u64)], mut f: impl FnMut(u32, u32, u64)) {
    for &(part, next) in offsets {
        let mut i = u64::from(part);
        while i < next.min(p.impressions) {
            let (user, ad, time) = impression(p, i);
            f(user, ad, time);
            i += u64::from(p.partitions);
        }
    }
}

/// Per-(user, ad) counts of the impressions before `offsets` (each `(partition, next
/// index)`).
pub fn counts_before(p: &JobParams, offsets: &[(u32, u64)]) -> BTreeMap<(u32, u32), u64> {
    let mut counts = BTreeMap::new();
    each_before(p, offsets, |user, ad, _| {
        *counts.entry((user, ad)).or_insert(0) += 1
    });
    counts
}

/// Per-(user, ad) times of the impressions before `offsets`, sorted.
pub fn times_before(p: &JobParams, offsets: &[(u32, u64)]) -> BTreeMap<(u32, u32), Vec<u64>> {
    let mut times: BTreeMap<(u32, u32), Vec<u64>> = BTreeMap::new();
    each_before(p, offsets, |user, ad, time| {
        times.entry((user, ad)).or_default().push(time)
    });
    for t in times.values_mut() {
        t.sort_unstable();
    }
    times
}

/// The alerts of the whole input, sorted: what a crash-free run outputs exactly once.
pub fn expected_alerts(p: &JobParams) -> Vec<(u32, u32)> {
    let all: Vec<(u32, u64)> = (0..p.partitions).map(|q| (q, p.impressions)).collect();
    // A BTreeMap iterates in key order: the result is sorted.
    counts_before(p, &all)
        .into_iter()
        .filter(|&(_, n)| n > CAP)
        .map(|(k, _)| k)
        .collect()
}

/// The external system the sink commits to: one file per `(worker, checkpoint)` under
/// `<job dir>/sink/`.
#[derive(Debug, Clone)]
pub struct SinkDir {
    dir: PathBuf,
}

impl SinkDir {
    /// The sink of the job in `job_dir`.
    pub fn new(job_dir: &Path) -> Result<Self> {
        let dir = job_dir.join("sink");
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("{}", dir.display()), e))?;
        Ok(SinkDir { dir })
    }

    /// Commits transaction `(writer, checkpoint)`; a second commit of it changes nothing.
    pub fn commit(&self, writer: u32, checkpoint: u64, alerts: &[(u32, u32)]) -> Result<()> {
        let path = self.dir.join(format!("t{writer}-c{checkpoint}"));
        if path.exists() {
            return Ok(());
        }
        let tmp = self.dir.join(format!(
            ".t{writer}-c{checkpoint}.{}.tmp",
            std::process::id()
        ));
        let body: String = alerts.iter().map(|(u, a)| format!("{u} {a}\n")).collect();
        std::fs::write(&tmp, body).map_err(|e| Error::io(format!("{}", tmp.display()), e))?;
        std::fs::rename(&tmp, &path).map_err(|e| Error::io(format!("{}", path.display()), e))
    }

    /// Every committed alert, in no particular order (duplicates kept).
    pub fn read_all(&self) -> Result<Vec<(u32, u32)>> {
        let mut out = Vec::new();
        let entries = std::fs::read_dir(&self.dir)
            .map_err(|e| Error::io(self.dir.display().to_string(), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(self.dir.display().to_string(), e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let text = std::fs::read_to_string(entry.path())
                .map_err(|e| Error::io(entry.path().display().to_string(), e))?;
            for line in text.lines() {
                let mut it = line.split(' ').map(str::parse::<u32>);
                match (it.next(), it.next()) {
                    (Some(Ok(u)), Some(Ok(a))) => out.push((u, a)),
                    _ => return Err(Error::Job(format!("sink file {name}: bad line `{line}`"))),
                }
            }
        }
        Ok(out)
    }
}

/// How a run of the job at `peers` workers starts: each worker's partitions with their next
/// index, each worker's pending sink transactions, and the keyed-state restore.
#[derive(Debug, Clone)]
pub struct StartPlan {
    /// Per worker: `(partition, next index)`.
    pub offsets: Vec<Vec<(u32, u64)>>,
    /// Per worker: the restored record's uncommitted transactions (union: every worker).
    pub txns: Vec<Vec<Txn>>,
    /// The keyed-state restore (`None`: a fresh start).
    pub restore: Option<RestoreFrom>,
}

impl StartPlan {
    /// Plans a start at `peers` workers from `record` (the newest job record) or from
    /// scratch: offsets and pending transactions are redistributed from the old workers'
    /// operator state; every worker restores its key-group range from all the record's
    /// manifests.
    pub fn new(p: &JobParams, record: Option<&JobCheckpoint>, peers: usize) -> Result<Self> {
        let Some(r) = record else {
            let mut all = OperatorState::new();
            let fresh: Vec<(u32, u64)> = (0..p.partitions).map(|q| (q, u64::from(q))).collect();
            all.update(OFFSETS, RedistributionMode::Split, &fresh)?;
            let states = redistribute(&[all], peers)?;
            return Ok(StartPlan {
                offsets: states
                    .iter()
                    .map(|o| o.get(OFFSETS))
                    .collect::<rockstate::Result<_>>()?,
                txns: vec![Vec::new(); peers],
                restore: None,
            });
        };
        let old: Vec<OperatorState> = r
            .tasks
            .iter()
            .map(|t| OperatorState::from_snapshot(t.operator_state.clone()))
            .collect::<rockstate::Result<_>>()?;
        let states = redistribute(&old, peers)?;
        let offsets: Vec<Vec<(u32, u64)>> = states
            .iter()
            .map(|o| o.get(OFFSETS))
            .collect::<rockstate::Result<_>>()?;
        let mut held: Vec<u32> = offsets.iter().flatten().map(|(q, _)| *q).collect();
        held.sort_unstable();
        if held != (0..p.partitions).collect::<Vec<_>>() {
            return Err(Error::Job(format!(
                "job record {} holds offsets of partitions {held:?}, expected 0..{}",
                r.checkpoint_id, p.partitions
            )));
        }
        let txns = states
            .iter()
            .map(|o| o.get(PENDING))
            .collect::<rockstate::Result<_>>()?;
        Ok(StartPlan {
            offsets,
            txns,
            restore: Some(RestoreFrom::job_record(r)?),
        })
    }

    /// Every partition's offset.
    pub fn all_offsets(&self) -> Vec<(u32, u64)> {
        self.offsets.iter().flatten().copied().collect()
    }
}

/// Opens the job's checkpoint storage: a directory, or an `s3://bucket/prefix` URL, with the
/// job's checkpoints kept under `jobs/<job id>/`.
pub fn open_job_storage(url: &str, job_id: &str) -> Result<Arc<dyn CheckpointStorage>> {
    let inner: Arc<dyn CheckpointStorage> = if url.starts_with("s3://") {
        rockstate::storage::open_storage(url, &rockstate::ObjectStorageOptions::default())?
    } else {
        Arc::new(LocalStorage::new(url)?.with_fsync(false))
    };
    Ok(Arc::new(ScopedStorage::for_job(inner, job_id)?))
}

/// One process of a run of the job (what `rockstate-timely worker` does).
#[derive(clap::Args, Debug, Clone)]
pub struct ProcessArgs {
    /// The job's directory (sink output, backends, checks).
    #[arg(long)]
    pub job_dir: PathBuf,
    /// Checkpoint storage: a directory or s3://bucket/prefix.
    #[arg(long)]
    pub storage: String,
    /// The job id (its namespace in the storage).
    #[arg(long)]
    pub job_id: String,
    /// This run's number (its backends live in `<job dir>/run-<n>/`).
    #[arg(long)]
    pub run: u32,
    /// The job record to restore (none: a fresh start).
    #[arg(long)]
    pub restore: Option<u64>,
    /// The first epoch (checkpoint id) of this run: above every id in storage.
    #[arg(long)]
    pub first_epoch: u64,
    /// This process's index.
    #[arg(long)]
    pub process: usize,
    /// Worker threads per process.
    #[arg(long)]
    pub threads: usize,
    /// Every process's `host:port`, in process order, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub hosts: Vec<String>,
    /// Worker 0 fails at this epoch (an operator error: the process ends as `fatal` makes
    /// it), so that the launcher's restart after a failure is exercised.
    #[arg(long)]
    pub fail_epoch: Option<u64>,
    /// The job's parameters.
    #[command(flatten)]
    pub params: JobParams,
}

/// What every worker thread of a process shares.
struct ProcessCtx {
    args: ProcessArgs,
    storage: Arc<dyn CheckpointStorage>,
    plan: StartPlan,
    last_epoch: u64,
    owner: Option<Arc<JobOwner>>,
    sink: SinkDir,
    /// What this process's workers are doing, written to `activity-process-<n>` of the run's
    /// directory every few ms for the launcher (which names the phase a kill hit).
    activity: Arc<Activity>,
    /// The SSTs this process's workers fetch while they restore, shared between them: after a
    /// rescale several workers need the same files, and each is fetched once per process.
    fetches: SharedFetches,
}

/// How old a leftover of an earlier run must be before process 0 of a new run deletes it:
/// longer than any upload or restore of a process of a run that might still be alive.
pub const LEFTOVER_MIN_AGE: Duration = Duration::from_secs(600);

/// Runs one process of the job until its last epoch completed job-wide.
pub fn run_process(args: ProcessArgs) -> Result<()> {
    args.params.validate()?;
    if args.first_epoch == 0 || args.threads == 0 || args.process >= args.hosts.len() {
        return Err(Error::Usage(
            "first epoch and threads must be at least 1, process below the host count".into(),
        ));
    }
    let storage = open_job_storage(&args.storage, &args.job_id)?;
    let record = match args.restore {
        Some(id) => Some(read_job_checkpoint(storage.as_ref(), id)?),
        None => None,
    };
    let peers = args.hosts.len() * args.threads;
    let plan = StartPlan::new(&args.params, record.as_ref(), peers)?;
    let last_epoch = args.first_epoch + args.params.epochs_left(&plan.all_offsets()) - 1;
    let sink = SinkDir::new(&args.job_dir)?;
    // Process 0 holds the job owner: it removes what earlier runs left, then commits.
    let owner = if args.process == 0 {
        // The restored record's transactions belong to a completed checkpoint.
        for (writer, id, alerts) in plan.txns.iter().flatten() {
            sink.commit(*writer, *id, alerts)?;
        }
        // The databases of earlier runs: their processes are gone (the launcher reaped
        // them), and every run restores into its own directories. Their local checkpoint
        // copies live in the job's staging root, where this run's restores use and retire
        // them.
        for k in 0..args.run {
            let old = args.job_dir.join(format!("run-{k}"));
            for e in std::fs::read_dir(&old).into_iter().flatten().flatten() {
                if e.file_name().to_string_lossy().starts_with("worker-") {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let owner = JobOwner::open_and_collect(storage.clone(), RETAINED, Arc::new(SystemClock))?;
        // What runs that died mid-put left (temporary objects, directories without a
        // manifest, shared files nothing references) once it is old enough to belong to no
        // upload still going: the collection above deletes only what finished checkpoints
        // name. Best effort, as every pass.
        if let Err(e) = owner.sweep(LEFTOVER_MIN_AGE) {
            eprintln!("rockstate-timely: sweeping leftovers of earlier runs failed: {e}");
        }
        Some(Arc::new(owner))
    } else {
        None
    };
    let config = timely::Config {
        communication: timely::CommunicationConfig::Cluster {
            threads: args.threads,
            process: args.process,
            addresses: args.hosts.clone(),
            report: false,
            zerocopy: false,
        },
        worker: timely::WorkerConfig::default().idle_spin(Duration::ZERO),
    };
    let activity = Arc::new(Activity::default());
    // Every worker counts as restoring until its backend is open and checked.
    activity.restoring.store(args.threads, Ordering::Relaxed);
    let activity_file = args
        .job_dir
        .join(format!("run-{}", args.run))
        .join(format!("activity-process-{}", args.process));
    let observed = Arc::clone(&activity);
    std::thread::spawn(move || {
        let tmp = activity_file.with_extension("tmp");
        let mut written = String::new();
        loop {
            // Only a changed line is written. Best effort: a missing line only makes the
            // launcher name the phase `startup`.
            let line = observed.line();
            if line != written
                && std::fs::write(&tmp, &line).is_ok()
                && std::fs::rename(&tmp, &activity_file).is_ok()
            {
                written = line;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    let ctx = Arc::new(ProcessCtx {
        args,
        storage,
        plan,
        last_epoch,
        owner,
        sink,
        activity,
        fetches: SharedFetches::default(),
    });
    let guards = timely::execute(config, move |worker| {
        if let Err(e) = run_worker(worker, &ctx) {
            fatal(&e);
        }
    })
    .map_err(Error::Timely)?;
    for r in guards.join() {
        r.map_err(Error::Timely)?;
    }
    Ok(())
}

/// One worker: opens or restores its backend, checks the restored state, builds the dataflow.
fn run_worker(worker: &mut timely::worker::Worker, ctx: &ProcessCtx) -> Result<()> {
    let (index, peers) = (worker.index(), worker.peers());
    let p = ctx.args.params.clone();
    let range = worker_range(MAX_PARALLELISM, peers, index)?;
    let dir = ctx
        .args
        .job_dir
        .join(format!("run-{}", ctx.args.run))
        .join(format!("worker-{index}"));
    let clock = ManualClock::new(0);
    let builder = KeyedBackend::builder(&dir)
        .max_parallelism(MAX_PARALLELISM)
        .key_groups(range)
        .clock(Arc::new(clock.clone()))
        .checkpoint_storage(ctx.storage.clone())
        .checkpoint_options(CheckpointOptions {
            // One staging root for every run: a restart on this machine restores from the
            // local copies the last run's backends kept (local recovery).
            staging_dir: Some(ctx.args.job_dir.join(STAGING_ROOT)),
            ..p.checkpoint_options()?
        })
        .job_coordinated();
    let backend = match &ctx.plan.restore {
        Some(from) => builder
            .shared_fetches(ctx.fetches.clone())
            .restore(from.clone())?,
        None => builder.open()?,
    };
    let counts = impressions_state(&backend)?;
    let times = times_state(&backend)?;
    if let (Some(RestoreFrom::Handles { checkpoint_id, .. }), false) =
        (&ctx.plan.restore, p.no_checkpoints)
    {
        check_restored(ctx, &counts, &times, &backend, index, *checkpoint_id)?;
    }
    ctx.activity.restoring.fetch_sub(1, Ordering::Relaxed);
    let offsets_after: OffsetsAfter = Rc::default();
    let logic = FreqCap {
        worker: index as u32,
        counts,
        times,
        clock,
        staged: BTreeMap::new(),
        pending: BTreeMap::new(),
        offsets_after: Rc::clone(&offsets_after),
        sink: ctx.sink.clone(),
        fail_epoch: ctx.args.fail_epoch.filter(|_| index == 0),
    };
    let stats_path = ctx
        .args
        .job_dir
        .join(format!("completion-run-{}", ctx.args.run));
    let epoch_closed: Rc<RefCell<BTreeMap<u64, Instant>>> = Rc::default();
    let closed = Rc::clone(&epoch_closed);
    let mut latencies: Vec<(u64, f64)> = Vec::new();
    let settings = Settings {
        backend,
        first_epoch: ctx.args.first_epoch,
        last_epoch: ctx.last_epoch,
        checkpoints: !p.no_checkpoints,
        owner: if index == 0 { ctx.owner.clone() } else { None },
        job_name: format!("freqcap {}", ctx.args.job_id),
        pipelined: RETAINED as u64,
        activity: Some(Arc::clone(&ctx.activity)),
        on_commit: Some(Box::new(move |e, _record| {
            // Time from the end of epoch `e` at worker 0's source to its job-wide commit.
            if let Some(t) = closed.borrow_mut().remove(&e) {
                latencies.push((e, t.elapsed().as_secs_f64() * 1e3));
                let text: String = latencies
                    .iter()
                    .map(|(e, ms)| format!("{e} {ms:.3}\n"))
                    .collect();
                let _ = std::fs::write(&stats_path, text);
            }
        })),
    };
    let source_offsets = ctx.plan.offsets.get(index).cloned().unwrap_or_default();
    let (first, last) = (ctx.args.first_epoch, ctx.last_epoch);
    worker.dataflow::<u64, _, _>(move |scope| {
        let probe = ProbeHandle::new();
        let records = impressions_source(
            scope,
            p,
            source_offsets,
            (first, last),
            offsets_after,
            epoch_closed,
            probe.clone(),
        );
        checkpointed(records, |r: &Impression| r.3, settings, logic).probe_with(&probe);
    });
    Ok(())
}

/// Compares worker `index`'s restored counters and impression times with what the restored
/// offsets imply; a difference is written to `<job dir>/mismatch-run-<n>-worker-<index>`.
fn check_restored(
    ctx: &ProcessCtx,
    counts: &ValueState<(u32, u32), (), u64>,
    times: &ListState<(u32, u32), (), u64>,
    backend: &KeyedBackend,
    index: usize,
    checkpoint_id: u64,
) -> Result<()> {
    let p = &ctx.args.params;
    let expected = counts_before(p, &ctx.plan.all_offsets());
    let expected_times = times_before(p, &ctx.plan.all_offsets());
    let mut differ = Vec::new();
    for user in 0..p.users {
        for ad in 0..p.ads {
            if !backend.key_groups().contains(key_group(user, ad)?) {
                continue;
            }
            let restored = counts.get(&(user, ad), &())?.unwrap_or(0);
            let want = expected.get(&(user, ad)).copied().unwrap_or(0);
            if restored != want {
                differ.push(format!("{user} {ad} restored {restored} expected {want}\n"));
            }
            let mut restored_times = times.get(&(user, ad), &())?;
            restored_times.sort_unstable();
            let want_times = expected_times.get(&(user, ad)).cloned().unwrap_or_default();
            if restored_times != want_times {
                differ.push(format!(
                    "{user} {ad} restored times {restored_times:?} expected {want_times:?}\n"
                ));
            }
        }
    }
    if !differ.is_empty() {
        let path = ctx
            .args
            .job_dir
            .join(format!("mismatch-run-{}-worker-{index}", ctx.args.run));
        let text = format!(
            "checkpoint {checkpoint_id}: {} keys differ\n{}",
            differ.len(),
            differ.concat()
        );
        std::fs::write(&path, text).map_err(|e| Error::io(path.display().to_string(), e))?;
    }
    Ok(())
}

/// The source: emits this worker's partitions epoch by epoch from `first` through `last`,
/// recording the offsets after each epoch (for the keyed operator's snapshot) and when the
/// epoch ended; runs at most [`IN_FLIGHT`] epochs ahead of what `acks` acknowledged.
fn impressions_source<'scope>(
    scope: timely::dataflow::Scope<'scope, u64>,
    p: JobParams,
    mut parts: Vec<(u32, u64)>,
    (first, last): (u64, u64),
    offsets_after: OffsetsAfter,
    epoch_closed: Rc<RefCell<BTreeMap<u64, Instant>>>,
    acks: ProbeHandle<u64>,
) -> Stream<'scope, u64, Vec<Impression>> {
    source(scope, "impressions", move |cap, info| {
        let activator = scope.activator_for(info.address);
        let mut cap = Some(cap);
        if let Some(c) = cap.as_mut() {
            c.downgrade(&first);
        }
        let mut epoch = first;
        move |output| {
            let Some(c) = cap.as_mut() else { return };
            if epoch >= first + IN_FLIGHT && acks.less_than(&(epoch - IN_FLIGHT)) {
                activator.activate_after(Duration::from_millis(1));
                return;
            }
            let mut session = output.session(c);
            for (_, next) in parts.iter_mut() {
                for _ in 0..p.chunk() {
                    if *next >= p.impressions {
                        break;
                    }
                    let (user, ad, time) = impression(&p, *next);
                    match key_group(user, ad) {
                        Ok(kg) => session.give((user, ad, time, kg)),
                        Err(e) => fatal(&e),
                    }
                    *next += u64::from(p.partitions);
                }
            }
            drop(session);
            offsets_after.borrow_mut().insert(epoch, parts.clone());
            epoch_closed.borrow_mut().insert(epoch, Instant::now());
            if epoch >= last {
                cap = None;
            } else {
                epoch += 1;
                c.downgrade(&epoch);
                activator.activate();
            }
        }
    })
}

/// The keyed logic of one worker: counters, staged alerts, pending transactions.
struct FreqCap {
    worker: u32,
    counts: ValueState<(u32, u32), (), u64>,
    /// The impression times per key ([`times_state`]).
    times: ListState<(u32, u32), (), u64>,
    /// Processing time for TTL: the impression's time.
    clock: ManualClock,
    /// Alerts raised per epoch, not yet in a checkpoint.
    staged: BTreeMap<u64, Vec<(u32, u32)>>,
    /// Transactions in a checkpoint, not yet committed: epoch → alerts.
    pending: BTreeMap<u64, Vec<(u32, u32)>>,
    offsets_after: OffsetsAfter,
    sink: SinkDir,
    /// The epoch whose `apply` fails (`ProcessArgs::fail_epoch`, worker 0 only).
    fail_epoch: Option<u64>,
}

impl EpochLogic<Impression> for FreqCap {
    fn apply(
        &mut self,
        _backend: &KeyedBackend,
        epoch: u64,
        records: Vec<Impression>,
    ) -> Result<()> {
        if self.fail_epoch == Some(epoch) {
            return Err(Error::Job(format!(
                "failure injected at epoch {epoch} (--fail-epoch)"
            )));
        }
        let staged = self.staged.entry(epoch).or_default();
        for (user, ad, time, _) in records {
            self.clock.set(time);
            let n = self.counts.get(&(user, ad), &())?.unwrap_or(0) + 1;
            self.counts.put(&(user, ad), &(), &n)?;
            if n % 2 == 1 {
                self.times.add(&(user, ad), &(), &time)?;
            } else {
                let mut all = self.times.get(&(user, ad), &())?;
                all.push(time);
                self.times.update(&(user, ad), &(), &all)?;
            }
            if n == CAP + 1 {
                staged.push((user, ad));
            }
        }
        Ok(())
    }

    fn snapshot(&mut self, epoch: u64) -> Result<OperatorState> {
        let alerts = self.staged.remove(&epoch).unwrap_or_default();
        self.pending.insert(epoch, alerts);
        let txns: Vec<Txn> = self
            .pending
            .iter()
            .map(|(id, a)| (self.worker, *id, a.clone()))
            .collect();
        let mut offsets = self.offsets_after.borrow_mut();
        // The source recorded epoch `epoch` before the keyed input's frontier passed it.
        let parts = offsets
            .remove(&epoch)
            .ok_or_else(|| Error::Job(format!("no source offsets recorded for epoch {epoch}")))?;
        offsets.retain(|&e, _| e > epoch);
        let mut op = OperatorState::new();
        op.update(OFFSETS, RedistributionMode::Split, &parts)?;
        op.update(PENDING, RedistributionMode::Union, &txns)?;
        Ok(op)
    }

    fn completed(&mut self, epoch: u64) -> Result<()> {
        if let Some(alerts) = self.staged.remove(&epoch) {
            // Checkpoints off: the epoch's alerts commit as it is applied.
            self.pending.insert(epoch, alerts);
        }
        let done: Vec<u64> = self.pending.range(..=epoch).map(|(e, _)| *e).collect();
        for e in done {
            if let Some(alerts) = self.pending.remove(&e) {
                if !alerts.is_empty() {
                    self.sink.commit(self.worker, e, &alerts)?;
                }
            }
        }
        Ok(())
    }
}

/// The set of distinct alerts in `alerts` and how many appeared more than once.
pub fn distinct(alerts: &[(u32, u32)]) -> (Vec<(u32, u32)>, usize) {
    let set: BTreeSet<(u32, u32)> = alerts.iter().copied().collect();
    let dups = alerts.len() - set.len();
    (set.into_iter().collect(), dups)
}

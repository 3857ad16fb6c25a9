//! The multi-process run of the frequency-capping job: start its OS processes, kill one with
//! SIGKILL at a random moment, stop the rest, restart the whole job from the newest job
//! record (optionally at another worker count), and check the output.
//!
//! Timely does not survive the loss of a process (its peers' connections fail), so a kill
//! means a full restart, as in Flink: the launcher kills every other process of the run,
//! reaps them all, and starts a new run of `rockstate-timely worker` processes that restore
//! from the newest job record. Each process binds a `127.0.0.1` port the launcher found free
//! just before. Each child gets `PR_SET_PDEATHSIG = SIGKILL`, so none outlives the launcher.
//!
//! The verdict compares the alerts committed to the sink files with the alerts of the whole
//! input (computed from the deterministic impressions) and, unless disabled, with a
//! crash-free run of the same job: every alert exactly once, no restored state that differs
//! from what its sources had consumed, and a final job record whose offsets reach the end of
//! every partition.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rockstate::coordinator::latest_job_checkpoint;
use rockstate::{JobOwner, SystemClock};

use crate::error::{Error, Result};
use crate::freqcap::{self, JobParams, SinkDir, StartPlan, RETAINED};

/// Arguments of `rockstate-timely freqcap`.
#[derive(clap::Args, Debug, Clone)]
pub struct FreqcapArgs {
    /// OS processes of the first run.
    #[arg(long, default_value_t = 2)]
    pub processes: usize,
    /// Worker threads per process of the first run.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Worker counts of the runs after each kill, comma-separated (default: the first run's).
    /// A count divisible by --threads runs as count/threads processes of --threads workers,
    /// any other as that many processes of one worker.
    #[arg(long, value_delimiter = ',')]
    pub rescale: Vec<usize>,
    /// How many runs are killed (each at a random moment) before one runs to the end.
    #[arg(long, default_value_t = 1)]
    pub kills: u32,
    /// A kill falls after a random number of the run's checkpoints completed (zero kills
    /// during startup and restore) plus a random delay of up to this many ms (during
    /// processing, uploads and commits), and at the latest once fewer checkpoints than the
    /// run's epochs completed, so the run cannot finish first.
    #[arg(long, default_value_t = 400)]
    pub kill_delay_ms: u64,
    /// Seed of the kill moments and victims (default: from the time; printed).
    #[arg(long)]
    pub kill_seed: Option<u64>,
    /// Checkpoint storage: a directory or s3://bucket/prefix (default: `<work dir>/storage`).
    #[arg(long)]
    pub storage: Option<String>,
    /// Directory for the job's files (default: a temporary directory, removed at the end).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Skip the crash-free reference run (the output is still compared with the alerts the
    /// input implies).
    #[arg(long)]
    pub no_reference: bool,
    /// A run that has not ended after this many seconds fails the verdict.
    #[arg(long, default_value_t = 300)]
    pub run_timeout_s: u64,
    /// A run one of whose processes fails by itself (an operator error, a panic, a start-up
    /// error such as a port taken meanwhile) is restarted from the last completed checkpoint,
    /// as a job manager restarts a failed job, up to this many times; then the verdict fails.
    #[arg(long, default_value_t = 3)]
    pub failure_restarts: u32,
    /// Worker 0 fails at the run's E-th epoch (an operator error), in every run until such a
    /// failure restarted the job once, to exercise the restart after a failure.
    #[arg(long)]
    pub fail_epoch: Option<u64>,
    /// The job's parameters.
    #[command(flatten)]
    pub params: JobParams,
}

/// A small deterministic generator (splitmix64) for kill moments and victims.
#[derive(Debug, Clone)]
pub struct Draw(u64);

impl Draw {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Draw(seed)
    }

    /// A value in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (x ^ (x >> 31)) % n.max(1)
    }
}

/// Processes and threads per process of a run of `workers` workers.
pub fn layout(workers: usize, threads: usize) -> (usize, usize) {
    if threads > 0 && workers.is_multiple_of(threads) {
        (workers / threads, threads)
    } else {
        (workers, 1)
    }
}

/// One job: where its files and checkpoints live.
#[derive(Debug, Clone)]
pub struct Job {
    /// The job's directory.
    pub dir: PathBuf,
    /// Checkpoint storage URL or directory.
    pub storage: String,
    /// The job id (namespace in the storage).
    pub id: String,
    /// The job's parameters.
    pub params: JobParams,
}

/// How one run ended.
#[derive(Debug)]
pub enum RunEnd {
    /// Every process exited successfully.
    Finished,
    /// The launcher killed process `victim` after `at`, then the rest.
    Killed {
        /// The process killed first.
        victim: usize,
        /// When, after the run started.
        at: Duration,
        /// What the victim was doing then, from its activity file
        /// ([`crate::operator::Activity::phase`]; `startup` before it wrote one).
        phase: &'static str,
    },
    /// A process failed on its own, or the run timed out.
    Failed(String),
}

/// When a run is killed: once `after_completions` of its checkpoints completed, `delay`
/// later, but at the latest when `latest_completions` completed (fewer than the run's
/// epochs, so a run faster than the delay is still killed before it ends; `None` when the
/// run has too few epochs for a bound above `after_completions`); `pick` chooses the victim
/// among the running processes.
#[derive(Debug, Clone, Copy)]
pub struct KillAt {
    /// Checkpoints of the run that complete first.
    pub after_completions: u64,
    /// Delay after that.
    pub delay: Duration,
    /// Checkpoints of the run after which the kill falls even if `delay` has not passed.
    pub latest_completions: Option<u64>,
    /// Chooses the victim.
    pub pick: u64,
}

/// What a run starts from.
#[derive(Debug, Clone, Copy)]
pub struct RunStart {
    /// The restored job record.
    pub restore: Option<u64>,
    /// The run's first epoch.
    pub first_epoch: u64,
    /// The epochs the run processes (to the end of the input).
    pub epochs: u64,
    /// Changelog mode: the log segments the restored record's manifests list, which the
    /// run's restores replay onto their materializations (0 without changelog mode).
    pub log_segments: usize,
    /// Changelog mode: the log tables those manifests list, which the restores ingest in
    /// place of the segments they cover.
    pub log_tables: usize,
    /// The epoch at which worker 0 of the run fails (`FreqcapArgs::fail_epoch`).
    pub fail_epoch: Option<u64>,
}

/// Finds where a run of `job` starts: the newest job record, and the first id above every
/// id in storage (read by an owner that is dropped again: the run's process 0 opens the one
/// that commits).
pub fn run_start(job: &Job) -> Result<RunStart> {
    let storage = freqcap::open_job_storage(&job.storage, &job.id)?;
    let record = latest_job_checkpoint(storage.as_ref())?;
    let plan = StartPlan::new(&job.params, record.as_ref(), 1)?;
    // Changelog mode only: the restored manifests, for the log segments they list.
    let (mut log_segments, mut log_tables) = (0, 0);
    for manifest in record
        .iter()
        .filter(|_| job.params.changelog.is_some())
        .flat_map(|r| &r.tasks)
        .flat_map(|t| &t.manifest)
    {
        let bytes = storage.get_bytes(manifest)?;
        let decoded = sst_format::decode_manifest(&bytes)
            .map_err(|e| Error::Job(format!("manifest {manifest}: {e}")))?;
        if let Some(c) = decoded.changelog {
            log_segments += c.segments.len();
            log_tables += c.tables.len();
        }
    }
    let first_epoch = JobOwner::open(storage, RETAINED, std::sync::Arc::new(SystemClock))?
        .next_checkpoint_id()?;
    Ok(RunStart {
        restore: record.map(|r| r.checkpoint_id),
        first_epoch,
        epochs: job.params.epochs_left(&plan.all_offsets()),
        log_segments,
        log_tables,
        fail_epoch: None,
    })
}

fn free_addresses(n: usize) -> Result<Vec<String>> {
    // Ports below Linux's ephemeral range (32768 and up): between the check here and a child
    // binding it, no outgoing connection (timely's own among them) can take the port, which
    // one drawn from the ephemeral range could see. Bound together, so no two are equal;
    // closed before the children bind them.
    const FIRST: u64 = 20_000;
    const SPAN: u64 = 12_000;
    let mut draw = Draw::new(now_seed() ^ u64::from(std::process::id()).rotate_left(32));
    let mut listeners: Vec<TcpListener> = Vec::with_capacity(n);
    let mut tries = 0;
    while listeners.len() < n {
        tries += 1;
        if tries > 1000 {
            return Err(Error::io(
                "finding free ports",
                std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    "no free port in 20000..32000",
                ),
            ));
        }
        // `FIRST + SPAN` is below 65536: the cast cannot truncate.
        let port = (FIRST + draw.below(SPAN)) as u16;
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            listeners.push(l);
        }
    }
    listeners
        .iter()
        .map(|l| {
            l.local_addr()
                .map(|a| a.to_string())
                .map_err(|e| Error::io("reading a bound port", e))
        })
        .collect()
}

fn params_args(p: &JobParams) -> Vec<String> {
    let mut a = vec![
        format!("--impressions={}", p.impressions),
        format!("--users={}", p.users),
        format!("--ads={}", p.ads),
        format!("--partitions={}", p.partitions),
        format!("--epoch-records={}", p.epoch_records),
        format!("--seed={}", p.seed),
    ];
    if p.no_checkpoints {
        a.push("--no-checkpoints".into());
    }
    if let Some(json) = &p.changelog {
        a.push(format!("--changelog={json}"));
    }
    a
}

fn spawn(exe: &Path, args: &[String], log: &Path) -> Result<Child> {
    let out = std::fs::File::create(log).map_err(|e| Error::io(log.display().to_string(), e))?;
    let err = out
        .try_clone()
        .map_err(|e| Error::io(log.display().to_string(), e))?;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err));
    // SAFETY: prctl is async-signal-safe; the closure allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
        .map_err(|e| Error::io(format!("starting {}", exe.display()), e))
}

fn kill_all(children: &mut [Child]) {
    for c in children.iter_mut() {
        // SIGKILL; an already reaped child is fine.
        let _ = c.kill();
    }
    for c in children.iter_mut() {
        let _ = c.wait();
    }
}

/// Checkpoints of a run that completed so far (worker 0 writes one line per commit).
fn completed_in(path: &Path) -> u64 {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count() as u64)
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

/// Runs `job` as run number `run` at `workers` workers (`threads` per process if it
/// divides), killing one process at `kill_at` if it is still running then.
pub fn run_job(
    job: &Job,
    run: u32,
    (processes, threads): (usize, usize),
    start: RunStart,
    kill_at: Option<KillAt>,
    timeout: Duration,
) -> Result<RunEnd> {
    let exe = std::env::current_exe().map_err(|e| Error::io("locating the launcher", e))?;
    let run_dir = job.dir.join(format!("run-{run}"));
    std::fs::create_dir_all(&run_dir).map_err(|e| Error::io(run_dir.display().to_string(), e))?;
    let hosts = free_addresses(processes)?;
    let mut children = Vec::new();
    for i in 0..processes {
        let mut args = vec![
            "worker".to_string(),
            format!("--job-dir={}", job.dir.display()),
            format!("--storage={}", job.storage),
            format!("--job-id={}", job.id),
            format!("--run={run}"),
            format!("--first-epoch={}", start.first_epoch),
            format!("--process={i}"),
            format!("--threads={threads}"),
            format!("--hosts={}", hosts.join(",")),
        ];
        if let Some(r) = start.restore {
            args.push(format!("--restore={r}"));
        }
        if let Some(e) = start.fail_epoch {
            args.push(format!("--fail-epoch={e}"));
        }
        args.extend(params_args(&job.params));
        match spawn(&exe, &args, &run_dir.join(format!("process-{i}.log"))) {
            Ok(c) => children.push(c),
            Err(e) => {
                kill_all(&mut children);
                return Err(e);
            }
        }
    }
    let started = Instant::now();
    let mut kill_from: Option<Instant> = None;
    let mut exited: Vec<Option<ExitStatus>> = vec![None; processes];
    loop {
        for (i, c) in children.iter_mut().enumerate() {
            if exited[i].is_none() {
                exited[i] = c
                    .try_wait()
                    .map_err(|e| Error::io("waiting for a process", e))?;
            }
        }
        if let Some((i, s)) = exited
            .iter()
            .enumerate()
            .find_map(|(i, s)| s.filter(|s| !s.success()).map(|s| (i, s)))
        {
            kill_all(&mut children);
            let log = run_dir.join(format!("process-{i}.log"));
            return Ok(RunEnd::Failed(format!(
                "process {i} exited with {s}; its log {} ends:\n{}",
                log.display(),
                tail(&log)
            )));
        }
        if exited.iter().all(Option::is_some) {
            return Ok(RunEnd::Finished);
        }
        if let Some(k) = kill_at {
            let completions = job.dir.join(format!("completion-run-{run}"));
            let completed = completed_in(&completions);
            if kill_from.is_none() && completed >= k.after_completions {
                kill_from = Some(Instant::now());
            }
            if kill_from.is_some_and(|t| t.elapsed() >= k.delay)
                || k.latest_completions.is_some_and(|n| completed >= n)
            {
                let pick = k.pick;
                let running: Vec<usize> = (0..processes).filter(|&i| exited[i].is_none()).collect();
                let victim = running[(pick % running.len() as u64) as usize];
                let phase =
                    std::fs::read_to_string(run_dir.join(format!("activity-process-{victim}")))
                        .ok()
                        .and_then(|l| crate::operator::Activity::phase_of_line(l.trim()))
                        .unwrap_or("startup");
                let _ = children[victim].kill();
                let _ = children[victim].wait();
                kill_all(&mut children);
                return Ok(RunEnd::Killed {
                    victim,
                    at: started.elapsed(),
                    phase,
                });
            }
        }
        if started.elapsed() > timeout {
            kill_all(&mut children);
            return Ok(RunEnd::Failed(format!(
                "run {run} did not end within {timeout:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What the kills of a job run hit and left behind.
#[derive(Debug, Default)]
pub struct KillLog {
    /// How many kills hit each phase ([`crate::operator::Activity::phase`]).
    pub phases: BTreeMap<&'static str, u32>,
    /// The largest retained checkpoint state seen after a kill, in bytes.
    pub live_max: u64,
    /// Whether storage stayed within the bound of `docs/ownership.md` §3 rule 5 after every
    /// kill ([`rockstate::catalog::Footprint::within_bound`]).
    pub bounded: bool,
    /// Runs that restored from a job record.
    pub restores: u32,
    /// Of those, runs whose record's manifests list log segments (changelog mode).
    pub log_restores: u32,
    /// The log segments those records list, summed.
    pub log_segments: usize,
    /// The log tables those records list, summed.
    pub log_tables: usize,
    /// Runs restarted because one of their processes failed by itself.
    pub failure_restarts: u32,
}

/// Runs `job` with kills per `args` until a run ends; returns the worker counts of its runs.
/// The phase each kill hit and the storage it left are added to `log`.
fn run_with_kills(
    job: &Job,
    args: &FreqcapArgs,
    draw: &mut Draw,
    (kills, fail_epoch): (u32, Option<u64>),
    log: &mut KillLog,
) -> Result<std::result::Result<Vec<usize>, String>> {
    let timeout = Duration::from_secs(args.run_timeout_s);
    let first = args.processes * args.threads;
    let mut workers_seen = Vec::new();
    let mut run = 0u32;
    let mut killed = 0u32;
    loop {
        let workers = if run == 0 {
            first
        } else {
            args.rescale
                .get(run as usize - 1)
                .copied()
                .or(args.rescale.last().copied())
                .unwrap_or(first)
        };
        let (processes, threads) = if run == 0 {
            (args.processes, args.threads)
        } else {
            layout(workers, args.threads)
        };
        workers_seen.push(workers);
        let mut start = run_start(job)?;
        // Until a failure restarted the job once: a kill before the failing epoch would
        // otherwise leave the failure untried.
        if log.failure_restarts == 0 {
            start.fail_epoch = fail_epoch.map(|e| start.first_epoch + e.saturating_sub(1));
        }
        // Kills spread over the input, leaving epochs for the kills after: a run completes
        // fewer than half its share of the remaining epochs among the kills left before the
        // delay starts.
        let left = start.epochs.saturating_sub(1);
        let span = (left / (2 * u64::from(kills.saturating_sub(killed).max(1)))).max(1);
        let kill_at = (killed < kills).then(|| {
            let after_completions = draw.below(span);
            KillAt {
                after_completions,
                delay: Duration::from_millis(draw.below(args.kill_delay_ms + 1)),
                // At most `left`, one fewer than the run's epochs.
                latest_completions: Some((after_completions + span).min(left))
                    .filter(|&n| n > after_completions),
                pick: draw.below(u64::MAX),
            }
        });
        eprintln!(
            "  run {run}: {workers} workers ({processes} processes x {threads} threads), {}, \
             epochs from {}",
            match (start.restore, start.log_segments) {
                (None, _) => "fresh start".to_string(),
                (Some(r), 0) => format!("restored from checkpoint {r}"),
                (Some(r), n) =>
                    format!("restored from checkpoint {r} (replaying {n} log segments)"),
            },
            start.first_epoch
        );
        if start.restore.is_some() {
            log.restores += 1;
            if start.log_segments > 0 {
                log.log_restores += 1;
                log.log_segments += start.log_segments;
                log.log_tables += start.log_tables;
            }
        }
        match run_job(job, run, (processes, threads), start, kill_at, timeout)? {
            RunEnd::Finished => {
                if let Some(k) = kill_at {
                    eprintln!(
                        "  run {run}: finished before its kill (after {} checkpoints + {} ms)",
                        k.after_completions,
                        k.delay.as_millis()
                    );
                }
                return Ok(Ok(workers_seen));
            }
            RunEnd::Killed { victim, at, phase } => {
                killed += 1;
                *log.phases.entry(phase).or_default() += 1;
                // What the kill left in storage: the retained checkpoints, attempts newer than
                // the last completed one, and at most one interrupted garbage pass.
                let storage = freqcap::open_job_storage(&job.storage, &job.id)?;
                let f = rockstate::catalog::Catalog::load(storage.as_ref())?.footprint(RETAINED);
                log.live_max = log.live_max.max(f.retained_bytes);
                let within = f.within_bound(log.live_max);
                log.bounded &= within;
                eprintln!(
                    "  run {run}: storage {} B after the kill: retained {} B, newer attempts {} B, \
                     garbage {} B{}",
                    f.total_bytes,
                    f.retained_bytes,
                    f.newer_bytes,
                    f.garbage_bytes,
                    if within { "" } else { " (OVER BOUND)" }
                );
                eprintln!(
                    "  run {run}: kill -9 process {victim} at {} ms ({phase}), after {} of its \
                     checkpoints completed, then the other processes",
                    at.as_millis(),
                    completed_in(&job.dir.join(format!("completion-run-{run}")))
                )
            }
            // A process failed by itself: the job restarts from its last completed
            // checkpoint, as after a kill, unless it failed too often.
            RunEnd::Failed(why) if log.failure_restarts < args.failure_restarts => {
                log.failure_restarts += 1;
                eprintln!(
                    "  run {run}: failed, restarting ({} of at most {}): {why}",
                    log.failure_restarts, args.failure_restarts
                );
            }
            RunEnd::Failed(why) => return Ok(Err(why)),
        }
        run += 1;
    }
}

/// What the verdict checked.
#[derive(Debug)]
pub struct Check {
    /// Alerts committed (with duplicates).
    pub alerts: usize,
    /// Alerts committed more than once.
    pub duplicates: usize,
    /// Whether the distinct alerts equal the expected ones.
    pub equal: bool,
    /// Restores whose state differed from their sources' offsets.
    pub mismatches: Vec<String>,
    /// Whether the final job record's offsets reach the end of every partition.
    pub consumed_all: bool,
}

/// Checks the output of `job` against `expected` (sorted, distinct).
pub fn check(job: &Job, expected: &[(u32, u32)]) -> Result<Check> {
    let committed = SinkDir::new(&job.dir)?.read_all()?;
    let (distinct, duplicates) = freqcap::distinct(&committed);
    let mut mismatches = Vec::new();
    let entries =
        std::fs::read_dir(&job.dir).map_err(|e| Error::io(job.dir.display().to_string(), e))?;
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with("mismatch-") {
            mismatches.push(std::fs::read_to_string(entry.path()).unwrap_or_default());
        }
    }
    let storage = freqcap::open_job_storage(&job.storage, &job.id)?;
    let record = latest_job_checkpoint(storage.as_ref())?;
    let consumed_all = match &record {
        Some(r) => StartPlan::new(&job.params, Some(r), 1)?
            .all_offsets()
            .iter()
            .all(|&(_, next)| next >= job.params.impressions),
        None => false,
    };
    Ok(Check {
        alerts: committed.len(),
        duplicates,
        equal: distinct == expected,
        mismatches,
        consumed_all,
    })
}

fn now_seed() -> u64 {
    use rockstate::Clock;
    rockstate::SystemClock.now_ms()
}

/// `rockstate-timely freqcap`: the reference run, the run with kills, the verdict. Returns
/// whether it passed.
pub fn freqcap(args: &FreqcapArgs) -> Result<bool> {
    args.params.validate()?;
    let counts = [args.processes, args.threads];
    if counts.contains(&0) || args.rescale.contains(&0) {
        return Err(Error::Usage(
            "processes, threads and worker counts must be at least 1".into(),
        ));
    }
    let max_workers = args
        .rescale
        .iter()
        .copied()
        .chain([args.processes * args.threads])
        .max()
        .unwrap_or(1);
    if max_workers > freqcap::MAX_PARALLELISM as usize {
        return Err(Error::Usage(format!(
            "at most {} workers (the job's key groups)",
            freqcap::MAX_PARALLELISM
        )));
    }
    let started = Instant::now();
    let tmp = tempfile::tempdir().map_err(|e| Error::io("creating a temporary directory", e))?;
    let work = args
        .work_dir
        .clone()
        .unwrap_or_else(|| tmp.path().to_path_buf());
    let seed = args.kill_seed.unwrap_or_else(now_seed);
    let mut draw = Draw::new(seed);
    let job_id = format!(
        "freqcap-{:016x}",
        now_seed() ^ u64::from(std::process::id())
    );
    let storage = |dir: &str| -> String {
        args.storage
            .clone()
            .unwrap_or_else(|| work.join(dir).join("storage").display().to_string())
    };
    let expected = freqcap::expected_alerts(&args.params);
    eprintln!(
        "job {job_id}: {} impressions, {} partitions, a checkpoint every {} impressions; \
         checkpoints under jobs/{job_id}/ of {}; kill seed {seed} (repeat with --kill-seed {seed})",
        args.params.impressions,
        args.params.partitions,
        args.params.epoch_records,
        storage("job"),
    );
    let mut reference_ok = true;
    let mut reference_alerts = None;
    if !args.no_reference {
        let job = Job {
            dir: work.join("reference"),
            storage: storage("reference"),
            id: format!("{job_id}-reference"),
            params: args.params.clone(),
        };
        eprintln!("reference run (no kill):");
        match run_with_kills(
            &job,
            args,
            &mut draw.clone(),
            (0, None),
            &mut KillLog::default(),
        )? {
            Ok(_) => {
                let mut alerts = SinkDir::new(&job.dir)?.read_all()?;
                alerts.sort_unstable();
                reference_ok = alerts == expected;
                reference_alerts = Some(alerts.len());
            }
            Err(why) => {
                eprintln!("  reference run failed: {why}");
                reference_ok = false;
            }
        }
    }
    let job = Job {
        dir: work.join("job"),
        storage: storage("job"),
        id: job_id.clone(),
        params: args.params.clone(),
    };
    eprintln!("job run with {} kill(s):", args.kills);
    let mut log = KillLog {
        bounded: true,
        ..KillLog::default()
    };
    let outcome = run_with_kills(
        &job,
        args,
        &mut draw,
        (args.kills, args.fail_epoch),
        &mut log,
    )?;
    if !log.phases.is_empty() {
        let list: Vec<String> = log.phases.iter().map(|(p, n)| format!("{p} {n}")).collect();
        println!("kill phases: {}", list.join(", "));
    }
    if args.params.changelog.is_some() {
        println!(
            "changelog: {} of {} restores replayed log segments ({} segments listed, {} log \
             tables ingested in place of the segments they cover)",
            log.log_restores, log.restores, log.log_segments, log.log_tables
        );
    }
    let (workers, failure) = match outcome {
        Ok(w) => (w, None),
        Err(why) => (Vec::new(), Some(why)),
    };
    let checked = match &failure {
        None => Some(check(&job, &expected)?),
        Some(why) => {
            eprintln!("  the job failed: {why}");
            None
        }
    };
    for m in checked.iter().flat_map(|c| c.mismatches.iter()) {
        eprintln!("  restored state differs from its sources' offsets: {m}");
    }
    let pass = reference_ok
        && log.bounded
        && checked.as_ref().is_some_and(|c| {
            c.equal && c.duplicates == 0 && c.mismatches.is_empty() && c.consumed_all
        });
    let chain: Vec<String> = workers.iter().map(usize::to_string).collect();
    match &checked {
        Some(c) => println!(
            "verdict: {} alerts {} (expected {}, reference run {}), duplicates {}, kills {}, \
             failure restarts {}, workers {}, restored-state mismatches {}, input consumed {}, \
             storage {}, {:.1}s",
            if pass { "PASS" } else { "FAIL" },
            c.alerts,
            expected.len(),
            reference_alerts.map_or("skipped".to_string(), |n| n.to_string()),
            c.duplicates,
            workers
                .len()
                .saturating_sub(1)
                .saturating_sub(log.failure_restarts as usize),
            log.failure_restarts,
            chain.join(" -> "),
            c.mismatches.len(),
            if c.consumed_all { "fully" } else { "NOT fully" },
            if log.bounded { "bounded" } else { "OVER BOUND" },
            started.elapsed().as_secs_f64()
        ),
        None => println!("verdict: FAIL the job did not finish"),
    }
    Ok(pass)
}

/// Arguments of `rockstate-timely bench`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// OS processes.
    #[arg(long, default_value_t = 2)]
    pub processes: usize,
    /// Worker threads per process.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Directory for the jobs' files (default: a temporary directory).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// The job's parameters (--no-checkpoints is ignored: both variants run).
    #[command(flatten)]
    pub params: JobParams,
}

/// `rockstate-timely bench`: the job's throughput with a checkpoint every epoch and with
/// checkpoints off (each a whole run, process start included), and the time from an epoch's
/// end at worker 0's source to its job-wide commit.
pub fn bench(args: &BenchArgs) -> Result<()> {
    args.params.validate()?;
    let tmp = tempfile::tempdir().map_err(|e| Error::io("creating a temporary directory", e))?;
    let work = args
        .work_dir
        .clone()
        .unwrap_or_else(|| tmp.path().to_path_buf());
    let timed = |checkpoints: bool| -> Result<(f64, Vec<f64>)> {
        let name = if checkpoints { "with" } else { "without" };
        let mut params = args.params.clone();
        params.no_checkpoints = !checkpoints;
        let job = Job {
            dir: work.join(name),
            storage: work.join(name).join("storage").display().to_string(),
            id: format!("bench-{name}"),
            params,
        };
        let start = run_start(&job)?;
        let t = Instant::now();
        match run_job(
            &job,
            0,
            (args.processes, args.threads),
            start,
            None,
            Duration::from_secs(3_600),
        )? {
            RunEnd::Finished => {}
            other => return Err(Error::Job(format!("bench run {name} ended: {other:?}"))),
        }
        let secs = t.elapsed().as_secs_f64();
        let text = std::fs::read_to_string(job.dir.join("completion-run-0")).unwrap_or_default();
        let mut ms: Vec<f64> = text
            .lines()
            .filter_map(|l| l.split(' ').nth(1)?.parse().ok())
            .collect();
        ms.sort_by(f64::total_cmp);
        Ok((args.params.impressions as f64 / secs, ms))
    };
    let (with, ms) = timed(true)?;
    let (without, _) = timed(false)?;
    let pct = |q: f64| -> f64 {
        if ms.is_empty() {
            return 0.0;
        }
        ms[((ms.len() - 1) as f64 * q).round() as usize]
    };
    println!(
        "timely_job records_s_with_checkpoints={with:.0} records_s_without={without:.0} \
         ratio={:.3} completion_ms_p50={:.1} p99={:.1} (checkpoints {}, every {} records, \
         {} processes x {} workers)",
        with / without,
        pct(0.5),
        pct(0.99),
        ms.len(),
        args.params.epoch_records,
        args.processes,
        args.threads
    );
    Ok(())
}

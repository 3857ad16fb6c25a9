//! `rockstate demo`: the frequency-capping job, run through the checkpoint coordinator and the
//! barrier aligner, crashed, restored from the newest job record, and compared with a
//! crash-free reference run.
//!
//! Impressions `(user, ad, time)` are a pure function of `(seed, index)`. `S` source tasks
//! read interleaved index ranges (source `s` reads `s, s + S, …`); their next offset lives in
//! operator state. Each impression goes to the keyed task owning `key_group((user, ad))`;
//! `P` keyed tasks each own a key-group range of a RocksDB backend with a `ValueState<u64>`
//! counter (24 h TTL; impression times span far less, so expiry never changes the result) and
//! raise an alert `(user, ad)` when a counter first exceeds 5. Keyed tasks have one input
//! channel per source and align barriers. The sink is two-phase: alerts are staged per
//! checkpoint, carried in the task's operator state in the job record, and committed to the
//! output only when the checkpoint completes (or, after a crash, when the restored job finds
//! them in the job record it restores from). Output is therefore exactly-once.
//!
//! Restore at another parallelism (`--rescale-to`) needs rescaling restore, which is not in
//! this build yet; the topology keeps source offsets in operator state and keyed state in
//! per-range backends so it plugs in there.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rockstate::barrier::{AlignmentMode, BarrierAligner, Input, Output};
use rockstate::checkpoint::layout;
use rockstate::coordinator::{
    latest_job_checkpoint, task_checkpoint, Coordinator, CoordinatorConfig, Outcome, TaskCommand,
    TaskReporter, Triggered,
};
use rockstate::operator_state::OperatorState;
use rockstate::{
    BackendMetrics, CheckpointOptions, CheckpointStorage, KeyGroupRange, KeyedBackend,
    LocalStorage, ManualClock, RestoreFrom, StateDescriptor, TtlConfig,
};
use sst_format::{JobCheckpoint, RedistributionMode};

use crate::ops::{human_bytes, CliError, EXIT_OK, EXIT_PROBLEMS};

/// Arguments of `demo`.
#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Impressions to process.
    #[arg(long, default_value_t = 60_000)]
    impressions: u64,
    /// Distinct users.
    #[arg(long, default_value_t = 2_000)]
    users: u32,
    /// Distinct ads.
    #[arg(long, default_value_t = 20)]
    ads: u32,
    /// Keyed tasks (parallelism).
    #[arg(long, default_value_t = 3)]
    parallelism: u32,
    /// Source tasks.
    #[arg(long, default_value_t = 2)]
    sources: u32,
    /// Trigger a checkpoint every this many processed impressions.
    #[arg(long, default_value_t = 10_000)]
    checkpoint_every: u64,
    /// Crash once this many impressions were processed (default: a seed-chosen point).
    #[arg(long)]
    crash_at: Option<u64>,
    /// Restore at another parallelism (needs rescaling restore; not in this build yet).
    #[arg(long)]
    rescale_to: Option<u32>,
    /// Seed of the impression stream and of the crash point.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Checkpoint storage directory (default: a temporary directory).
    #[arg(long)]
    storage: Option<String>,
}

const MAX_PARALLELISM: u32 = 128;
const CAP: u64 = 5;
/// Records buffered per keyed task's input.
const CHANNEL_CAPACITY: usize = 256;

fn mix(mut x: u64) -> u64 {
    // splitmix64
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Impression `i`: (user, ad, time ms).
fn impression(seed: u64, i: u64, users: u32, ads: u32) -> (u32, u32, u64) {
    let h = mix(seed ^ mix(i));
    (
        (h % u64::from(users)) as u32,
        ((h >> 32) % u64::from(ads)) as u32,
        1_700_000_000_000 + i * 10,
    )
}

fn key_group(user: u32, ad: u32) -> Result<u16, CliError> {
    let bytes = rockstate::codec::encode(&(user, ad), "key")?;
    Ok(rockstate::keygroup::key_group_of(&bytes, MAX_PARALLELISM))
}

/// The external system the sink writes to: survives crashes of the job.
#[derive(Debug, Default)]
struct SinkOutput {
    alerts: Vec<(u32, u32)>,
    /// (task, checkpoint) groups already committed: commits are idempotent.
    committed: BTreeSet<(u32, u64)>,
}

impl SinkOutput {
    fn commit(&mut self, task: u32, checkpoint_id: u64, alerts: &[(u32, u32)]) {
        if self.committed.insert((task, checkpoint_id)) {
            self.alerts.extend_from_slice(alerts);
        }
    }
}

/// A bounded or unbounded sender of [`Msg`].
trait SendMsg: Send + 'static {
    fn send_msg(&self, m: Msg) -> bool;
}

impl SendMsg for Sender<Msg> {
    fn send_msg(&self, m: Msg) -> bool {
        self.send(m).is_ok()
    }
}

impl SendMsg for SyncSender<Msg> {
    fn send_msg(&self, m: Msg) -> bool {
        self.send(m).is_ok()
    }
}

enum Msg {
    Data(usize, Input<(u32, u32, u64)>),
    Cmd(TaskCommand),
}

struct Shared {
    args_seed: u64,
    users: u32,
    ads: u32,
    total: u64,
    sources: u32,
    processed: AtomicU64,
    kill: AtomicBool,
    crash_at: u64,
    sink: Arc<Mutex<SinkOutput>>,
}

/// Per-checkpoint figures for the final table.
#[derive(Debug, Default, Clone)]
struct CheckpointRow {
    state_bytes: u64,
    uploaded: u64,
    reused: u64,
    sync_ms: f64,
    async_ms: f64,
}

/// What one run (or one leg of a crashed run) ended with.
struct RunEnd {
    crashed: bool,
    rows: BTreeMap<u64, CheckpointRow>,
    /// Each keyed task's backend figures when it finished (not after a crash).
    metrics: BTreeMap<u32, BackendMetrics>,
}

fn commands_into<S: SendMsg>(
    ep: rockstate::coordinator::TaskEndpoint,
    tx: S,
) -> (TaskReporter, JoinHandle<()>) {
    let reporter = ep.reporter();
    let h = std::thread::spawn(move || {
        while let Some(c) = ep.recv() {
            if !tx.send_msg(Msg::Cmd(c)) {
                return;
            }
        }
    });
    (reporter, h)
}

fn source_task(
    s: u32,
    shared: Arc<Shared>,
    start: u64,
    rx: Receiver<Msg>,
    outs: Vec<SyncSender<Msg>>,
    reporter: TaskReporter,
    ranges: Vec<KeyGroupRange>,
) -> Result<(), CliError> {
    let mut next = start;
    let step = u64::from(shared.sources);
    let mut state = OperatorState::new();
    let handle = |cmd: TaskCommand, next: u64, state: &mut OperatorState| -> Result<(), CliError> {
        if let TaskCommand::Trigger { checkpoint_id } = cmd {
            for o in &outs {
                let _ = o.send(Msg::Data(s as usize, Input::Barrier(checkpoint_id)));
            }
            state.update("offsets", RedistributionMode::Split, &[next])?;
            reporter.ack(checkpoint_id, task_checkpoint(s, None, state.snapshot()));
        }
        Ok(())
    };
    while next < shared.total {
        if shared.kill.load(Ordering::SeqCst) {
            return Ok(());
        }
        while let Ok(Msg::Cmd(c)) = rx.try_recv() {
            handle(c, next, &mut state)?;
        }
        let imp = impression(shared.args_seed, next, shared.users, shared.ads);
        let kg = key_group(imp.0, imp.1)?;
        let task = ranges.iter().position(|r| r.contains(kg)).unwrap_or(0);
        let _ = outs[task].send(Msg::Data(s as usize, Input::Record(imp)));
        next += step;
    }
    // Input exhausted: keep answering triggers until the job ends.
    while let Ok(Msg::Cmd(c)) = rx.recv() {
        if shared.kill.load(Ordering::SeqCst) {
            return Ok(());
        }
        handle(c, next, &mut state)?;
    }
    Ok(())
}

struct KeyedTask {
    task: u32,
    backend: KeyedBackend,
    staged: Vec<(u32, u32)>,
    pending: BTreeMap<u64, Vec<(u32, u32)>>,
}

fn keyed_task(
    mut kt: KeyedTask,
    shared: Arc<Shared>,
    clock: ManualClock,
    rx: Receiver<Msg>,
    reporter: TaskReporter,
    rows: Arc<Mutex<BTreeMap<u64, CheckpointRow>>>,
    metrics: Arc<Mutex<BTreeMap<u32, BackendMetrics>>>,
) -> Result<(), CliError> {
    let counts = kt.backend.value_state::<(u32, u32), (), u64>(
        StateDescriptor::new("impressions").with_ttl(TtlConfig::new(Duration::from_secs(86_400))),
    )?;
    let mut aligner = BarrierAligner::new(shared.sources as usize, AlignmentMode::Aligned)?;
    while let Ok(msg) = rx.recv() {
        if shared.kill.load(Ordering::SeqCst) {
            return Ok(()); // crash: nothing is flushed or committed
        }
        let outputs = match msg {
            Msg::Data(ch, input) => aligner.push(ch, input)?,
            Msg::Cmd(TaskCommand::Complete { checkpoint_id }) => {
                let done: Vec<u64> = kt
                    .pending
                    .range(..=checkpoint_id)
                    .map(|(k, _)| *k)
                    .collect();
                let mut sink = shared
                    .sink
                    .lock()
                    .map_err(|_| CliError::storage("sink poisoned"))?;
                for id in done {
                    if let Some(a) = kt.pending.remove(&id) {
                        sink.commit(kt.task, id, &a);
                    }
                }
                drop(sink);
                kt.backend.notify_checkpoint_complete(checkpoint_id)?;
                continue;
            }
            Msg::Cmd(TaskCommand::Abort { checkpoint_id }) => {
                // Its records are in the state already: its alerts go with the next checkpoint.
                if let Some(mut a) = kt.pending.remove(&checkpoint_id) {
                    a.append(&mut kt.staged);
                    kt.staged = a;
                }
                kt.backend.notify_checkpoint_aborted(checkpoint_id)?;
                continue;
            }
            Msg::Cmd(TaskCommand::Trigger { .. }) => continue,
        };
        for out in outputs {
            match out {
                Output::Record {
                    record: (user, ad, time),
                    ..
                } => {
                    clock.set(time);
                    let n = counts.get(&(user, ad), &())?.unwrap_or(0) + 1;
                    counts.put(&(user, ad), &(), &n)?;
                    if n == CAP + 1 {
                        kt.staged.push((user, ad));
                    }
                    let p = shared.processed.fetch_add(1, Ordering::SeqCst) + 1;
                    if p >= shared.crash_at {
                        shared.kill.store(true, Ordering::SeqCst);
                    }
                }
                Output::Snapshot { checkpoint_id } => {
                    let alerts = std::mem::take(&mut kt.staged);
                    let mut op = OperatorState::new();
                    op.update("pending-alerts", RedistributionMode::Union, &alerts)?;
                    let stats = kt.backend.checkpoint(checkpoint_id)?;
                    kt.pending.insert(checkpoint_id, alerts);
                    let row = CheckpointRow {
                        state_bytes: stats.state_bytes,
                        uploaded: stats.bytes_uploaded,
                        reused: stats.files_reused as u64,
                        sync_ms: stats.sync_duration.as_secs_f64() * 1e3,
                        async_ms: stats.async_duration.as_secs_f64() * 1e3,
                    };
                    if let Ok(mut r) = rows.lock() {
                        let e = r.entry(checkpoint_id).or_default();
                        e.state_bytes += row.state_bytes;
                        e.uploaded += row.uploaded;
                        e.reused += row.reused;
                        e.sync_ms = e.sync_ms.max(row.sync_ms);
                        e.async_ms = e.async_ms.max(row.async_ms);
                    }
                    reporter.ack(
                        checkpoint_id,
                        task_checkpoint(kt.task, Some((&kt.backend, &stats)), op.snapshot()),
                    );
                }
                Output::InFlight { .. } | Output::Aborted { .. } => {}
            }
        }
    }
    let m = kt.backend.metrics()?;
    if let Ok(mut all) = metrics.lock() {
        all.insert(kt.task, m);
    }
    Ok(())
}

/// Runs the job until the input is exhausted (and a final checkpoint completed) or the crash
/// point; restores from the newest job record in `storage` if there is one.
fn run_job(
    args: &DemoArgs,
    shared: Arc<Shared>,
    storage: Arc<LocalStorage>,
    work: &Path,
) -> Result<RunEnd, CliError> {
    let p = args.parallelism;
    let s = args.sources;
    let restored: Option<JobCheckpoint> = latest_job_checkpoint(storage.as_ref())?;
    let mut config = CoordinatorConfig::new("freqcap", s + p, MAX_PARALLELISM);
    config.sources = (0..s).collect();
    config.retained = 2;
    let dyn_storage: Arc<dyn CheckpointStorage> = storage.clone();
    let mut coord = Coordinator::new(
        config,
        dyn_storage.clone(),
        Arc::new(rockstate::SystemClock),
    )?;
    let ranges: Vec<KeyGroupRange> = (0..p)
        .map(|i| KeyGroupRange::for_operator(MAX_PARALLELISM, p, i))
        .collect::<rockstate::Result<_>>()?;
    let rows = Arc::new(Mutex::new(BTreeMap::new()));
    let task_metrics = Arc::new(Mutex::new(BTreeMap::new()));
    let mut threads: Vec<JoinHandle<Result<(), CliError>>> = Vec::new();
    let mut forwarders = Vec::new();
    let mut keyed_tx = Vec::new();
    // A fresh directory per leg: a restarted job never reopens the crashed job's databases.
    let leg = (0..)
        .map(|n| work.join(format!("leg-{n}")))
        .find(|d| !d.exists())
        .unwrap_or_else(|| work.join("leg"));
    for i in 0..p {
        // Bounded: sources feel backpressure, so barriers interleave with the records.
        let (tx, rx) = mpsc::sync_channel(CHANNEL_CAPACITY);
        keyed_tx.push(tx.clone());
        let task = s + i;
        let (reporter, fwd) = commands_into(coord.endpoint(task)?, tx);
        forwarders.push(fwd);
        let clock = ManualClock::new(0);
        let builder = KeyedBackend::builder(leg.join(format!("task-{task}")))
            .max_parallelism(MAX_PARALLELISM)
            .key_groups(ranges[i as usize])
            .clock(Arc::new(clock.clone()))
            .checkpoint_storage(dyn_storage.clone())
            .checkpoint_options(CheckpointOptions {
                retained: 2,
                ..CheckpointOptions::default()
            });
        let kt = KeyedTask {
            task,
            backend: builder.clone_open(restored.as_ref(), task)?,
            staged: Vec::new(),
            pending: BTreeMap::new(),
        };
        if let Some(r) = &restored {
            // Alerts of the restored checkpoint may not have been committed before the crash.
            if let Some(t) = r.tasks.iter().find(|t| t.task == task) {
                let op = OperatorState::from_snapshot(t.operator_state.clone())?;
                let alerts: Vec<(u32, u32)> = op.get("pending-alerts")?;
                if let Ok(mut sink) = shared.sink.lock() {
                    sink.commit(task, r.checkpoint_id, &alerts);
                }
            }
        }
        let (sh, rw) = (shared.clone(), rows.clone());
        let mt = task_metrics.clone();
        threads.push(std::thread::spawn(move || {
            keyed_task(kt, sh, clock, rx, reporter, rw, mt)
        }));
    }
    for src in 0..s {
        let (tx, rx) = mpsc::channel();
        let (reporter, fwd) = commands_into(coord.endpoint(src)?, tx);
        forwarders.push(fwd);
        let start = match &restored {
            Some(r) => {
                let t = r.tasks.iter().find(|t| t.task == src).ok_or_else(|| {
                    CliError::storage(format!("job record {} lacks source {src}", r.checkpoint_id))
                })?;
                let op = OperatorState::from_snapshot(t.operator_state.clone())?;
                op.get::<u64>("offsets")?
                    .first()
                    .copied()
                    .unwrap_or(u64::from(src))
            }
            None => u64::from(src),
        };
        let (sh, outs, rs) = (shared.clone(), keyed_tx.clone(), ranges.clone());
        threads.push(std::thread::spawn(move || {
            source_task(src, sh, start, rx, outs, reporter, rs)
        }));
    }
    drop(keyed_tx);
    let already = restored
        .as_ref()
        .map_or(0, |_| shared.processed.load(Ordering::SeqCst));
    let mut last_trigger = already;
    let mut final_triggered = None;
    let mut completed_final = false;
    let mut completed = BTreeSet::new();
    let mut progress = Instant::now();
    while !shared.kill.load(Ordering::SeqCst) {
        for o in coord.wait(Duration::from_millis(20))? {
            if let Outcome::Completed(r) = o {
                completed_final |= Some(r.checkpoint_id) == final_triggered;
                completed.insert(r.checkpoint_id);
            } else if let Outcome::Aborted { checkpoint_id, .. } = o {
                if Some(checkpoint_id) == final_triggered {
                    final_triggered = None;
                }
            }
        }
        if completed_final {
            break;
        }
        let done = shared.processed.load(Ordering::SeqCst);
        if progress.elapsed() >= Duration::from_millis(500) {
            eprint!("\r  processed {done}/{}", shared.total);
            progress = Instant::now();
        }
        let all_in = done >= shared.total;
        if (done >= last_trigger + args.checkpoint_every || (all_in && final_triggered.is_none()))
            && coord.pending().is_empty()
        {
            if let Triggered::Started(id) = coord.trigger()? {
                last_trigger = done;
                if all_in {
                    final_triggered = Some(id);
                }
            }
        }
    }
    let crashed = shared.kill.load(Ordering::SeqCst) && !completed_final;
    drop(coord); // ends the forwarders, which ends the tasks
    for f in forwarders {
        let _ = f.join();
    }
    for t in threads {
        match t.join() {
            Ok(r) => r?,
            Err(_) => return Err(CliError::storage("a task thread panicked")),
        }
    }
    eprintln!();
    // Only completed checkpoints go into the table (a crash leaves partial ones).
    let mut rows = rows.lock().map(|r| r.clone()).unwrap_or_default();
    rows.retain(|id, _| completed.contains(id));
    let metrics = task_metrics.lock().map(|m| m.clone()).unwrap_or_default();
    Ok(RunEnd {
        crashed,
        rows,
        metrics,
    })
}

trait OpenOrRestore {
    fn clone_open(self, from: Option<&JobCheckpoint>, task: u32) -> Result<KeyedBackend, CliError>;
}

impl OpenOrRestore for rockstate::BackendBuilder {
    fn clone_open(self, from: Option<&JobCheckpoint>, task: u32) -> Result<KeyedBackend, CliError> {
        let Some(r) = from else {
            return Ok(self.open()?);
        };
        let t = r.tasks.iter().find(|t| t.task == task).ok_or_else(|| {
            CliError::storage(format!("job record {} lacks task {task}", r.checkpoint_id))
        })?;
        let manifest = t.manifest.as_deref().ok_or_else(|| {
            CliError::storage(format!(
                "job record {} names no manifest for task {task}",
                r.checkpoint_id
            ))
        })?;
        let obj = layout::parse_checkpoint_object(manifest)
            .ok_or_else(|| CliError::storage(format!("bad manifest name {manifest}")))?;
        Ok(self.restore(RestoreFrom::Exact {
            checkpoint_id: obj.id,
            backend_id: obj.backend_id.to_string(),
        })?)
    }
}

impl Shared {
    fn new(
        args: &DemoArgs,
        processed: u64,
        crash_at: u64,
        sink: Arc<Mutex<SinkOutput>>,
    ) -> Arc<Self> {
        Arc::new(Shared {
            args_seed: args.seed,
            users: args.users,
            ads: args.ads,
            total: args.impressions,
            sources: args.sources,
            processed: AtomicU64::new(processed),
            kill: AtomicBool::new(false),
            crash_at,
            sink,
        })
    }
}

/// What a whole run (with its restores) produced.
struct RunResult {
    /// Committed alerts, sorted.
    alerts: Vec<(u32, u32)>,
    end: RunEnd,
    restores: u32,
}

/// Impressions the sources had consumed at the checkpoint of `record` (source `s` reads
/// `s, s + S, …`; its stored offset is the next index it will read).
fn consumed_at(record: &JobCheckpoint, sources: u32) -> u64 {
    record
        .tasks
        .iter()
        .filter(|t| t.task < sources)
        .map(|t| {
            OperatorState::from_snapshot(t.operator_state.clone())
                .and_then(|o| o.get::<u64>("offsets"))
                .ok()
                .and_then(|v| v.first().copied())
                .map_or(0, |next| {
                    next.saturating_sub(u64::from(t.task))
                        .div_ceil(u64::from(sources))
                })
        })
        .sum()
}

fn run_once(
    args: &DemoArgs,
    crash_at: u64,
    storage_dir: &Path,
    work: &Path,
) -> Result<RunResult, CliError> {
    let storage = Arc::new(LocalStorage::new(storage_dir)?.with_fsync(false));
    let sink = Arc::new(Mutex::new(SinkOutput::default()));
    let shared = Shared::new(args, 0, crash_at, sink.clone());
    let mut end = run_job(args, shared.clone(), storage.clone(), work)?;
    let mut restores = 0;
    while end.crashed {
        restores += 1;
        let restored = latest_job_checkpoint(storage.as_ref())?;
        eprintln!(
            "  crashed after {} impressions; restoring from checkpoint {}",
            shared.processed.load(Ordering::SeqCst),
            restored
                .as_ref()
                .map_or("none (start over)".into(), |r| r.checkpoint_id.to_string())
        );
        // The restored job re-processes everything after the checkpoint: count from there.
        let at_checkpoint = restored
            .as_ref()
            .map_or(0, |r| consumed_at(r, args.sources));
        let again = Shared::new(args, at_checkpoint, u64::MAX, sink.clone());
        let more = run_job(args, again, storage.clone(), work)?;
        end.rows.extend(more.rows);
        end.metrics = more.metrics;
        end.crashed = more.crashed;
    }
    let mut alerts = sink.lock().map(|s| s.alerts.clone()).unwrap_or_default();
    alerts.sort_unstable();
    Ok(RunResult {
        alerts,
        end,
        restores,
    })
}

/// `rockstate demo`.
pub fn run(args: &DemoArgs) -> Result<u8, CliError> {
    if let Some(p) = args.rescale_to {
        return Err(CliError::usage(format!(
            "--rescale-to {p}: restoring at another parallelism is not in this build yet"
        )));
    }
    if args.parallelism == 0 || args.sources == 0 || args.users == 0 || args.ads == 0 {
        return Err(CliError::usage(
            "parallelism, sources, users and ads must be at least 1",
        ));
    }
    let tmp = tempfile::tempdir().map_err(|e| CliError::storage(e.to_string()))?;
    let storage_dir: PathBuf = match &args.storage {
        Some(s) => match crate::storage_arg::parse(s).map_err(CliError::usage)? {
            crate::storage_arg::StorageUrl::Local(p) => p,
            crate::storage_arg::StorageUrl::S3 { .. } => {
                return Err(CliError::storage(
                    "s3:// storage is not built into this binary yet",
                ))
            }
        },
        None => tmp.path().join("storage"),
    };
    let crash_at = args
        .crash_at
        .unwrap_or_else(|| args.impressions / 5 + mix(args.seed) % (args.impressions / 2).max(1));
    let started = Instant::now();
    eprintln!(
        "reference run (no crash): {} impressions, {} keyed tasks, {} sources",
        args.impressions, args.parallelism, args.sources
    );
    let reference = run_once(
        args,
        u64::MAX,
        &tmp.path().join("reference"),
        &tmp.path().join("ref-work"),
    )?;
    eprintln!("job run, crashing after {crash_at} impressions");
    let RunResult {
        alerts: output,
        end,
        restores,
    } = run_once(args, crash_at, &storage_dir, &tmp.path().join("work"))?;
    println!("checkpoint  state      uploaded   reused  sync ms  async ms");
    for (id, r) in &end.rows {
        println!(
            "{id:>10}  {:>9}  {:>9}  {:>6}  {:>7.1}  {:>8.1}",
            human_bytes(r.state_bytes),
            human_bytes(r.uploaded),
            r.reused,
            r.sync_ms,
            r.async_ms
        );
    }
    for (task, m) in &end.metrics {
        let r = &m.rocksdb;
        let levels: Vec<String> = r
            .levels
            .iter()
            .map(|l| format!("L{} {}/{}", l.level, l.sst_files, human_bytes(l.sst_bytes)))
            .collect();
        println!(
            "task {task}: ~{} keys, memtables {}, block cache {}, pending compaction {}, SSTs {}; \
             last checkpoint {} uploaded, {} shared files referenced",
            r.estimated_keys,
            human_bytes(r.memtable_bytes),
            human_bytes(r.block_cache_bytes),
            human_bytes(r.pending_compaction_bytes),
            levels.join(", "),
            human_bytes(m.checkpoint.last_bytes_uploaded),
            m.checkpoint.shared_files_referenced,
        );
    }
    let dups = output.windows(2).filter(|w| w[0] == w[1]).count();
    let pass = output == reference.alerts;
    println!(
        "verdict: {} alerts {} (reference {}), duplicates {dups}, restores {restores}, {:.1}s",
        if pass { "PASS" } else { "FAIL" },
        output.len(),
        reference.alerts.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(if pass { EXIT_OK } else { EXIT_PROBLEMS })
}

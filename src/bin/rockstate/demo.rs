//! `rockstate demo`: the frequency-capping job, run through the checkpoint coordinator and the
//! barrier aligner, crashed, restored from the newest job record, and compared with a
//! crash-free reference run.
//!
//! Impressions `(user, ad, time)` are a pure function of `(seed, index)`. The input has a
//! fixed number of partitions (impression `i` is in partition `i % partitions`, like a log's
//! partitions); `S` source tasks each read a run of the partitions round-robin, and keep a
//! `(partition, next index)` pair per partition in operator state (split redistribution).
//! Sources emit only up to a gate that each checkpoint trigger raises by `checkpoint_every`,
//! and the next trigger waits for the previous checkpoint to complete, so a crash after `n`
//! impressions (n > 2 × checkpoint_every) always finds a completed checkpoint. Each
//! impression goes to the keyed task owning `key_group((user, ad))`; `P` keyed tasks each own
//! a key-group range of a RocksDB backend with a `ValueState<u64>` counter (24 h TTL;
//! impression times span far less, so expiry never changes the result) and raise an alert
//! `(user, ad)` when a counter first exceeds 5. Keyed tasks have one input channel per source
//! and align barriers. The sink is two-phase: alerts are staged per
//! checkpoint as a transaction `(task, checkpoint id, alerts)`. Every transaction not yet
//! committed is carried in the task's operator state (union redistribution) in the job record,
//! and committed to the output when a checkpoint at or after it completes (or, after a crash,
//! by every restored task that receives it: commits are idempotent per `(task, checkpoint)`).
//! Output is therefore exactly-once.
//!
//! After the crash the job restores from the newest job record, optionally at another
//! parallelism (`--rescale-to`, `--rescale-sources-to`): every keyed task restores its new
//! key-group range from all the record's manifests (`RestoreFrom::Handles`), and the source
//! offsets and the pending transactions are redistributed with
//! [`rockstate::operator_state::redistribute`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rockstate::barrier::{AlignmentMode, BarrierAligner, Input, Output};
use rockstate::coordinator::{
    latest_job_checkpoint, task_checkpoint, Coordinator, CoordinatorConfig, Outcome, TaskCommand,
    TaskReporter, Triggered,
};
use rockstate::operator_state::{redistribute, OperatorState};
use rockstate::{
    BackendMetrics, ChangelogOptions, CheckpointOptions, CheckpointStorage, Clock, KeyGroupRange,
    KeyedBackend, LocalStorage, ManualClock, RestoreFrom, StateDescriptor, TtlConfig,
};
use sst_format::{JobCheckpoint, RedistributionMode};

use crate::ops::{CliError, EXIT_OK, EXIT_PROBLEMS};
use crate::progress::human_bytes;

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
    /// Input partitions the sources share (impression `i` is in partition `i % partitions`).
    #[arg(long, default_value_t = 12)]
    partitions: u32,
    /// Trigger a checkpoint every this many processed impressions, at least 1 (default
    /// 10,000; with --crashes N, impressions / (3 × (N + 1)) so every leg completes
    /// checkpoints).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    checkpoint_every: Option<u64>,
    /// Crash this many times at random points, each restore at a random parallelism after
    /// the first (which follows --rescale-to / --rescale-sources-to). Default 1.
    #[arg(long, default_value_t = 1)]
    crashes: u32,
    /// Crash once this many impressions were processed (default: a random point, see
    /// --crash-seed).
    #[arg(long)]
    crash_at: Option<u64>,
    /// Seed of the crash point when --crash-at is not given (default: from the time; printed).
    #[arg(long)]
    crash_seed: Option<u64>,
    /// Keyed tasks of the job restored after the crash (default: --parallelism).
    #[arg(long)]
    rescale_to: Option<u32>,
    /// Source tasks of the job restored after the crash (default: --sources).
    #[arg(long)]
    rescale_sources_to: Option<u32>,
    /// Seed of the impression stream.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Checkpoint storage: a directory or s3://bucket/prefix (default: a temporary
    /// directory). Each run keeps its checkpoints apart under `jobs/<job id>/`.
    #[arg(long)]
    storage: Option<String>,
    /// Checkpoint in changelog mode with these settings as JSON (`enabled` is implied), e.g.
    /// `{"materialize_log_percent":10,"materialize_min_log_bytes":0}` so that log
    /// checkpoints and materializations alternate across the crashes and rescales.
    #[arg(long)]
    changelog: Option<String>,
}

impl DemoArgs {
    /// Impressions between two checkpoint triggers.
    fn every(&self) -> u64 {
        self.checkpoint_every
            .unwrap_or(match self.crashes {
                0 | 1 => 10_000,
                n => self.impressions / (3 * (u64::from(n) + 1)),
            })
            .max(1)
    }

    /// The keyed backends' checkpoint settings: the defaults, or changelog mode with
    /// `--changelog`'s settings.
    fn checkpoint_options(&self) -> Result<CheckpointOptions, CliError> {
        let Some(json) = &self.changelog else {
            return Ok(CheckpointOptions::default());
        };
        Ok(CheckpointOptions {
            changelog: ChangelogOptions::enabled_from_json(json)
                .map_err(|e| CliError::usage(format!("--changelog: {e}")))?,
            ..CheckpointOptions::default()
        })
    }
}

const MAX_PARALLELISM: u32 = 128;
/// Completed checkpoints the job keeps.
const RETAINED: usize = 2;
const CAP: u64 = 5;
/// Records buffered per keyed task's input.
const CHANNEL_CAPACITY: usize = 256;
/// Operator-state list of a source: `(partition, next index)` pairs.
const OFFSETS: &str = "offsets";
/// Operator-state list of a keyed task: its uncommitted sink transactions.
const PENDING: &str = "pending-alerts";

/// A sink transaction: the alerts a task staged before a checkpoint's barrier, identified by
/// `(task, checkpoint id)`.
type Txn = (u32, u64, Vec<(u32, u32)>);

/// Task counts of one run of the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Topology {
    sources: u32,
    keyed: u32,
}

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

/// The per-`(user, ad)` impression counters (24 h TTL: impression times span far less).
fn impressions_state(
    backend: &KeyedBackend,
) -> rockstate::Result<rockstate::ValueState<(u32, u32), (), u64>> {
    backend.value_state(
        StateDescriptor::new("impressions").with_ttl(TtlConfig::new(Duration::from_secs(86_400))),
    )
}

/// The per-`(user, ad)` counters the impressions before `offsets` (each `(partition, next
/// index)`) add up to: what a restored job's keyed state must hold exactly.
fn expected_counts(shared: &Shared, offsets: &[Vec<(u32, u64)>]) -> BTreeMap<(u32, u32), u64> {
    let mut counts = BTreeMap::new();
    for &(p, next) in offsets.iter().flatten() {
        let mut i = u64::from(p);
        while i < next {
            let (user, ad, _) = impression(shared.args_seed, i, shared.users, shared.ads);
            *counts.entry((user, ad)).or_insert(0) += 1;
            i += u64::from(shared.partitions);
        }
    }
    counts
}

/// A key whose restored counter differs from what the restored offsets imply.
#[derive(Debug, Clone, Copy)]
struct KeyMismatch {
    key_group: u16,
    key: (u32, u32),
    restored: u64,
    expected: u64,
}

/// The keys of `backend`'s key groups whose counter differs from `expected`.
fn mismatched_keys(
    backend: &KeyedBackend,
    shared: &Shared,
    expected: &BTreeMap<(u32, u32), u64>,
) -> Result<Vec<KeyMismatch>, CliError> {
    let counts = impressions_state(backend)?;
    let mut out = Vec::new();
    for user in 0..shared.users {
        for ad in 0..shared.ads {
            let key_group = key_group(user, ad)?;
            if backend.key_groups().contains(key_group) {
                let restored = counts.get(&(user, ad), &())?.unwrap_or(0);
                let expected = expected.get(&(user, ad)).copied().unwrap_or(0);
                if restored != expected {
                    out.push(KeyMismatch {
                        key_group,
                        key: (user, ad),
                        restored,
                        expected,
                    });
                }
            }
        }
    }
    Ok(out)
}

/// The external system the sink writes to: survives crashes of the job.
#[derive(Debug, Default)]
struct SinkOutput {
    alerts: Vec<(u32, u32)>,
    /// (task, checkpoint) groups already committed: commits are idempotent.
    committed: BTreeSet<(u32, u64)>,
    /// Restores whose keyed state differed from what the restored sources had consumed:
    /// `(checkpoint, keys that differ)`.
    state_mismatches: Vec<(u64, usize)>,
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
    partitions: u32,
    processed: AtomicU64,
    /// Impressions the sources emitted (claimed) so far.
    emitted: AtomicU64,
    /// Sources emit while `emitted < gate`; each trigger raises it by `checkpoint_every`.
    gate: AtomicU64,
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
    mut parts: Vec<(u32, u64)>,
    rx: Receiver<Msg>,
    outs: Vec<SyncSender<Msg>>,
    reporter: TaskReporter,
    ranges: Vec<KeyGroupRange>,
) -> Result<(), CliError> {
    let step = u64::from(shared.partitions);
    let handle = |cmd: TaskCommand, parts: &[(u32, u64)]| -> Result<(), CliError> {
        if let TaskCommand::Trigger { checkpoint_id } = cmd {
            for o in &outs {
                let _ = o.send(Msg::Data(s as usize, Input::Barrier(checkpoint_id)));
            }
            let mut state = OperatorState::new();
            state.update(OFFSETS, RedistributionMode::Split, parts)?;
            reporter.ack(checkpoint_id, task_checkpoint(s, None, state.snapshot()));
        }
        Ok(())
    };
    let mut live = true;
    while live {
        live = false;
        for i in 0..parts.len() {
            if shared.kill.load(Ordering::SeqCst) {
                return Ok(());
            }
            while let Ok(Msg::Cmd(c)) = rx.try_recv() {
                handle(c, &parts)?;
            }
            let next = parts[i].1;
            if next >= shared.total {
                continue;
            }
            live = true;
            // Wait for the gate (answering commands meanwhile).
            while shared
                .emitted
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |e| {
                    (e < shared.gate.load(Ordering::SeqCst)).then_some(e + 1)
                })
                .is_err()
            {
                if shared.kill.load(Ordering::SeqCst) {
                    return Ok(());
                }
                while let Ok(Msg::Cmd(c)) = rx.try_recv() {
                    handle(c, &parts)?;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            let imp = impression(shared.args_seed, next, shared.users, shared.ads);
            let kg = key_group(imp.0, imp.1)?;
            let task = ranges.iter().position(|r| r.contains(kg)).unwrap_or(0);
            let _ = outs[task].send(Msg::Data(s as usize, Input::Record(imp)));
            parts[i].1 = next + step;
        }
    }
    // Input exhausted: keep answering triggers until the job ends.
    while let Ok(Msg::Cmd(c)) = rx.recv() {
        if shared.kill.load(Ordering::SeqCst) {
            return Ok(());
        }
        handle(c, &parts)?;
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
    let counts = impressions_state(&kt.backend)?;
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
                // Its transaction stays pending: it is in every later snapshot and commits
                // with the next completed checkpoint.
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
                    kt.pending.insert(checkpoint_id, alerts);
                    let txns: Vec<Txn> = kt
                        .pending
                        .iter()
                        .map(|(id, a)| (kt.task, *id, a.clone()))
                        .collect();
                    let mut op = OperatorState::new();
                    op.update(PENDING, RedistributionMode::Union, &txns)?;
                    let stats = kt.backend.checkpoint(checkpoint_id)?;
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

/// How a run of the job at `topology` starts: each source's partitions with their next
/// index, each keyed task's pending sink transactions, and the keyed-state restore (none for
/// a fresh start).
struct StartPlan {
    source_parts: Vec<Vec<(u32, u64)>>,
    keyed_txns: Vec<Vec<Txn>>,
    restore: Option<RestoreFrom>,
}

/// Plans the start of a job at `topology` from `record` (the newest job record), or from
/// scratch: source offsets and pending transactions are redistributed from the old tasks'
/// operator state to the new ones, and keyed tasks restore from all the record's manifests.
fn plan_start(
    record: Option<&JobCheckpoint>,
    topology: Topology,
    partitions: u32,
) -> Result<StartPlan, CliError> {
    let Some(r) = record else {
        let mut all = OperatorState::new();
        let fresh: Vec<(u32, u64)> = (0..partitions).map(|p| (p, u64::from(p))).collect();
        all.update(OFFSETS, RedistributionMode::Split, &fresh)?;
        let sources = redistribute(&[all], topology.sources as usize)?;
        return Ok(StartPlan {
            source_parts: sources
                .iter()
                .map(|o| o.get(OFFSETS))
                .collect::<rockstate::Result<_>>()?,
            keyed_txns: vec![Vec::new(); topology.keyed as usize],
            restore: None,
        });
    };
    let states = |keyed: bool| -> rockstate::Result<Vec<OperatorState>> {
        r.tasks
            .iter()
            .filter(|t| t.manifest.is_some() == keyed)
            .map(|t| OperatorState::from_snapshot(t.operator_state.clone()))
            .collect()
    };
    let sources = redistribute(&states(false)?, topology.sources as usize)?;
    let source_parts: Vec<Vec<(u32, u64)>> = sources
        .iter()
        .map(|o| o.get(OFFSETS))
        .collect::<rockstate::Result<_>>()?;
    let mut held: Vec<u32> = source_parts.iter().flatten().map(|(p, _)| *p).collect();
    held.sort_unstable();
    if held != (0..partitions).collect::<Vec<_>>() {
        return Err(CliError::storage(format!(
            "job record {} holds offsets of partitions {held:?}, expected 0..{partitions} \
             (was the job started with another --partitions?)",
            r.checkpoint_id
        )));
    }
    let keyed = redistribute(&states(true)?, topology.keyed as usize)?;
    let keyed_txns = keyed
        .iter()
        .map(|o| o.get(PENDING))
        .collect::<rockstate::Result<_>>()?;
    Ok(StartPlan {
        source_parts,
        keyed_txns,
        restore: Some(RestoreFrom::job_record(r)?),
    })
}

/// Runs the job at `topology` until the input is exhausted (and a final checkpoint
/// completed) or the crash point; restores from the newest job record in `storage` if there
/// is one.
fn run_job(
    args: &DemoArgs,
    topology: Topology,
    shared: Arc<Shared>,
    storage: Arc<dyn CheckpointStorage>,
    work: &Path,
    label: &str,
) -> Result<RunEnd, CliError> {
    let p = topology.keyed;
    let s = topology.sources;
    let checkpoint_options = args.checkpoint_options()?;
    let restored: Option<JobCheckpoint> = latest_job_checkpoint(storage.as_ref())?;
    let plan = plan_start(restored.as_ref(), topology, args.partitions)?;
    let mut config = CoordinatorConfig::new("freqcap", s + p, MAX_PARALLELISM);
    config.sources = (0..s).collect();
    config.retained = RETAINED;
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
    // What the restored keyed state must hold, key by key: the impressions before the
    // restored offsets.
    let expected = match plan.restore {
        Some(_) => expected_counts(&shared, &plan.source_parts),
        None => BTreeMap::new(),
    };
    let mut mismatches: Vec<(u32, KeyMismatch)> = Vec::new();
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
            .checkpoint_options(checkpoint_options.clone())
            .job_owner(coord.owner().clone());
        let kt = KeyedTask {
            task,
            backend: match &plan.restore {
                Some(from) => builder.restore(from.clone())?,
                None => builder.open()?,
            },
            staged: Vec::new(),
            pending: BTreeMap::new(),
        };
        if plan.restore.is_some() {
            for m in mismatched_keys(&kt.backend, &shared, &expected)? {
                mismatches.push((task, m));
            }
        }
        // The restored checkpoint completed, so every transaction it carries commits (some
        // may have been committed before the crash: commits are idempotent).
        let mut sink = shared
            .sink
            .lock()
            .map_err(|_| CliError::storage("sink poisoned"))?;
        for (writer, id, alerts) in &plan.keyed_txns[i as usize] {
            sink.commit(*writer, *id, alerts);
        }
        drop(sink);
        let (sh, rw) = (shared.clone(), rows.clone());
        let mt = task_metrics.clone();
        threads.push(std::thread::spawn(move || {
            keyed_task(kt, sh, clock, rx, reporter, rw, mt)
        }));
    }
    // Every impression increments one counter (TTL never expires one here), so the restored
    // keyed state holds exactly the counters of the impressions the restored sources had
    // consumed.
    if let (Some(record), false) = (&restored, mismatches.is_empty()) {
        let (restored_sum, expected_sum) = mismatches
            .iter()
            .fold((0, 0), |(r, e), (_, m)| (r + m.restored, e + m.expected));
        eprintln!(
            "  restored state of checkpoint {} differs at {} keys from what its sources \
             consumed (those keys count {restored_sum} impressions, expected {expected_sum}):",
            record.checkpoint_id,
            mismatches.len(),
        );
        let mut groups: BTreeMap<(u32, u16), (usize, i64)> = BTreeMap::new();
        for (task, m) in &mismatches {
            let e = groups.entry((*task, m.key_group)).or_default();
            e.0 += 1;
            e.1 += m.restored as i64 - m.expected as i64;
        }
        for ((task, group), (keys, diff)) in groups.iter().take(20) {
            eprintln!("    task {task}, key group {group}: {keys} keys, {diff:+} impressions");
        }
        if let Some((task, m)) = mismatches.first() {
            eprintln!(
                "    e.g. task {task}: (user, ad) {:?} holds {}, expected {}",
                m.key, m.restored, m.expected
            );
        }
        if let Ok(mut sink) = shared.sink.lock() {
            sink.state_mismatches
                .push((record.checkpoint_id, mismatches.len()));
        }
    }
    for src in 0..s {
        let (tx, rx) = mpsc::channel();
        let (reporter, fwd) = commands_into(coord.endpoint(src)?, tx);
        forwarders.push(fwd);
        let parts = plan.source_parts[src as usize].clone();
        let (sh, outs, rs) = (shared.clone(), keyed_tx.clone(), ranges.clone());
        threads.push(std::thread::spawn(move || {
            source_task(src, sh, parts, rx, outs, reporter, rs)
        }));
    }
    drop(keyed_tx);
    let mut final_triggered = None;
    let mut completed_final = false;
    let mut completed = BTreeSet::new();
    let bar = crate::progress::bar(shared.total, "impressions", label);
    bar.set_position(shared.processed.load(Ordering::SeqCst));
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
        bar.set_position(done);
        let all_in = done >= shared.total;
        let at_gate = shared.emitted.load(Ordering::SeqCst) >= shared.gate.load(Ordering::SeqCst);
        if (at_gate || (all_in && final_triggered.is_none())) && coord.pending().is_empty() {
            if let Triggered::Started(id) = coord.trigger()? {
                // Sources emit the next `checkpoint_every` impressions only now, after the
                // previous checkpoint completed: a crash point maps to checkpoints exactly.
                shared.gate.fetch_add(args.every(), Ordering::SeqCst);
                if all_in {
                    final_triggered = Some(id);
                }
            }
        }
    }
    bar.finish_and_clear();
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

impl Shared {
    fn new(
        args: &DemoArgs,
        topology: Topology,
        processed: u64,
        crash_at: u64,
        sink: Arc<Mutex<SinkOutput>>,
    ) -> Arc<Self> {
        Arc::new(Shared {
            args_seed: args.seed,
            users: args.users,
            ads: args.ads,
            total: args.impressions,
            sources: topology.sources,
            partitions: args.partitions,
            processed: AtomicU64::new(processed),
            emitted: AtomicU64::new(processed),
            gate: AtomicU64::new(processed + args.every()),
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
    /// The storage right after each crash.
    crashes: Vec<CrashReport>,
    /// Restores whose keyed state disagreed with their sources' offsets.
    state_mismatches: usize,
}

/// The job's storage right after one crash (`docs/ownership.md` §3 rule 5).
struct CrashReport {
    /// Impressions processed when it crashed.
    at: u64,
    footprint: rockstate::catalog::Footprint,
    /// The parallelism the job restarts at.
    restart: Topology,
}

impl CrashReport {
    /// Besides the retained checkpoints and the attempts newer than the last completed one,
    /// at most the garbage of one interrupted garbage pass
    /// (`rockstate::catalog::Footprint::within_bound`), given the largest live state seen.
    fn within_bound(&self, live_max: u64) -> bool {
        self.footprint.within_bound(live_max)
    }
}

/// One restart of the job: its parallelism and how many impressions after its restore point
/// it crashes again (`None`: it runs to the end).
#[derive(Debug, Clone, Copy)]
struct Restart {
    topology: Topology,
    crash_after: Option<u64>,
}

/// Impressions the sources had consumed at the checkpoint of `record` (partition `p` holds
/// `p, p + partitions, …`; its stored offset is the next index its source will read).
fn consumed_at(record: &JobCheckpoint, partitions: u32) -> Result<u64, CliError> {
    let mut n = 0;
    for t in record.tasks.iter().filter(|t| t.manifest.is_none()) {
        let op = OperatorState::from_snapshot(t.operator_state.clone())?;
        for (p, next) in op.get::<(u32, u64)>(OFFSETS)? {
            n += next
                .saturating_sub(u64::from(p))
                .div_ceil(u64::from(partitions));
        }
    }
    Ok(n)
}

/// Runs the job at `before` until it ends or crashes after `crash_at` impressions; after each
/// crash restores it per the next of `restarts` (the last one runs to the end).
fn run_once(
    args: &DemoArgs,
    before: Topology,
    crash_at: u64,
    restarts: &[Restart],
    storage: Arc<dyn CheckpointStorage>,
    work: &Path,
    label: &str,
) -> Result<RunResult, CliError> {
    let sink = Arc::new(Mutex::new(SinkOutput::default()));
    let shared = Shared::new(args, before, 0, crash_at, sink.clone());
    let mut end = run_job(args, before, shared.clone(), storage.clone(), work, label)?;
    let mut processed = shared.processed.load(Ordering::SeqCst);
    let mut restores = 0;
    let mut crashes = Vec::new();
    while end.crashed {
        let restart = restarts.get(restores).copied().unwrap_or(Restart {
            topology: before,
            crash_after: None,
        });
        restores += 1;
        let footprint = rockstate::catalog::Catalog::load(storage.as_ref())?.footprint(RETAINED);
        let restored = latest_job_checkpoint(storage.as_ref())?;
        eprintln!(
            "  crash {restores} after {processed} impressions: storage {}, live {}, {} \
             completed checkpoints kept; restoring from checkpoint {} with {} keyed tasks \
             and {} sources",
            human_bytes(footprint.total_bytes),
            human_bytes(footprint.retained_bytes),
            footprint.records,
            restored
                .as_ref()
                .map_or("none (start over)".into(), |r| r.checkpoint_id.to_string()),
            restart.topology.keyed,
            restart.topology.sources,
        );
        crashes.push(CrashReport {
            at: processed,
            footprint,
            restart: restart.topology,
        });
        // The restored job re-processes everything after the checkpoint: count from there.
        let at_checkpoint = match &restored {
            Some(r) => consumed_at(r, args.partitions)?,
            None => 0,
        };
        let crash_at = restart
            .crash_after
            .map_or(u64::MAX, |n| at_checkpoint.saturating_add(n));
        let again = Shared::new(
            args,
            restart.topology,
            at_checkpoint,
            crash_at,
            sink.clone(),
        );
        let more = run_job(
            args,
            restart.topology,
            again.clone(),
            storage.clone(),
            work,
            "restored job",
        )?;
        processed = again.processed.load(Ordering::SeqCst);
        end.rows.extend(more.rows);
        end.metrics = more.metrics;
        end.crashed = more.crashed;
    }
    let (mut alerts, state_mismatches) = sink
        .lock()
        .map(|s| (s.alerts.clone(), s.state_mismatches.len()))
        .unwrap_or_default();
    alerts.sort_unstable();
    Ok(RunResult {
        alerts,
        end,
        restores: restores as u32,
        crashes,
        state_mismatches,
    })
}

/// `rockstate demo`.
pub fn run(args: &DemoArgs) -> Result<u8, CliError> {
    let before = Topology {
        sources: args.sources,
        keyed: args.parallelism,
    };
    let after = Topology {
        sources: args.rescale_sources_to.unwrap_or(args.sources),
        keyed: args.rescale_to.unwrap_or(args.parallelism),
    };
    let counts = [
        before.sources,
        before.keyed,
        after.sources,
        after.keyed,
        args.partitions,
        args.users,
        args.ads,
    ];
    if counts.contains(&0) {
        return Err(CliError::usage(
            "parallelism, sources, partitions, users and ads must be at least 1",
        ));
    }
    if before.keyed.max(after.keyed) > MAX_PARALLELISM {
        return Err(CliError::usage(format!(
            "at most {MAX_PARALLELISM} keyed tasks (the job's key groups)"
        )));
    }
    if args.checkpoint_options()?.changelog.enabled {
        eprintln!("checkpoints in changelog mode");
    }
    let tmp = tempfile::tempdir().map_err(|e| CliError::storage(e.to_string()))?;
    let local = |dir: &Path| -> Result<Arc<dyn CheckpointStorage>, CliError> {
        Ok(Arc::new(LocalStorage::new(dir)?.with_fsync(false)))
    };
    let storage: Arc<dyn CheckpointStorage> = match &args.storage {
        Some(s) => match crate::storage_arg::parse(s).map_err(CliError::usage)? {
            crate::storage_arg::StorageUrl::Local(p) => local(&p)?,
            crate::storage_arg::StorageUrl::S3 { .. } => rockstate::storage::open_storage(
                s,
                &rockstate::storage::ObjectStorageOptions::default(),
            )
            .map_err(|e| CliError::storage(e.to_string()))?,
        },
        None => local(&tmp.path().join("storage"))?,
    };
    // Each run is a job of its own: its checkpoints live apart from every other run's in the
    // same storage (a second run on the same storage starts fresh instead of meeting the
    // first run's checkpoints).
    let job_id = format!("freqcap-{:016x}", rand::random::<u64>());
    eprintln!("job {job_id}: checkpoints under jobs/{job_id}/ of the storage");
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(rockstate::ScopedStorage::for_job(storage, &job_id)?);
    let seed = args
        .crash_seed
        .unwrap_or_else(|| mix(rockstate::SystemClock.now_ms()));
    if args.crash_at.is_none() || args.crashes > 1 {
        eprintln!("crash seed {seed} (repeat with --crash-seed {seed})");
    }
    let every = args.every();
    let mut draw = {
        let mut state = seed;
        move |n: u64| {
            state = mix(state.wrapping_add(0x9e37_79b9_7f4a_7c15));
            state % n.max(1)
        }
    };
    let crashes = args.crashes.max(1);
    // With several crashes, each leg crashes 2–3 checkpoint intervals after its restore
    // point, so every leg completes a checkpoint first and the job always progresses.
    let leg = |draw: &mut dyn FnMut(u64) -> u64| 2 * every + 1 + draw(every);
    let crash_at = match (args.crash_at, crashes) {
        (Some(n), _) => n,
        (None, 1) => args.impressions / 5 + draw(args.impressions / 2),
        (None, _) => leg(&mut draw),
    };
    let mut restarts: Vec<Restart> = Vec::new();
    for i in 0..crashes {
        let topology = if i == 0 {
            after
        } else {
            Topology {
                keyed: 1 + draw(4) as u32,
                sources: 1 + draw(3) as u32,
            }
        };
        let crash_after = (i + 1 < crashes).then(|| leg(&mut draw));
        restarts.push(Restart {
            topology,
            crash_after,
        });
    }
    let started = Instant::now();
    eprintln!(
        "reference run (no crash): {} impressions, {} keyed tasks, {} sources",
        args.impressions, args.parallelism, args.sources
    );
    let reference = run_once(
        args,
        before,
        u64::MAX,
        &[],
        local(&tmp.path().join("reference"))?,
        &tmp.path().join("ref-work"),
        "reference run",
    )?;
    eprintln!("job run, crashing after {crash_at} impressions");
    let RunResult {
        alerts: output,
        end,
        restores,
        crashes: crash_reports,
        state_mismatches,
    } = run_once(
        args,
        before,
        crash_at,
        &restarts,
        storage,
        &tmp.path().join("work"),
        "job",
    )?;
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
    if !crash_reports.is_empty() {
        println!("crash  at impressions  storage    live       kept  garbage    restart");
    }
    let mut live_max = 0;
    let mut bounded = true;
    for (i, c) in crash_reports.iter().enumerate() {
        let f = &c.footprint;
        live_max = live_max.max(f.retained_bytes);
        let within = c.within_bound(live_max);
        bounded &= within;
        println!(
            "{:>5}  {:>14}  {:>9}  {:>9}  {:>4}  {:>9}  {} keyed, {} sources{}",
            i + 1,
            c.at,
            human_bytes(f.total_bytes),
            human_bytes(f.retained_bytes),
            f.records,
            human_bytes(f.garbage_bytes),
            c.restart.keyed,
            c.restart.sources,
            if within { "" } else { "  OVER BOUND" },
        );
    }
    let dups = output.windows(2).filter(|w| w[0] == w[1]).count();
    let exactly_once = output == reference.alerts && state_mismatches == 0;
    let pass = exactly_once && bounded;
    let last = crash_reports.last().map_or(before, |c| c.restart);
    println!(
        "verdict: {} alerts {} (reference {}), duplicates {dups}, restores {restores}, \
         keyed tasks {} -> {}, sources {} -> {}, storage {}, {:.1}s",
        if pass { "PASS" } else { "FAIL" },
        output.len(),
        reference.alerts.len(),
        before.keyed,
        last.keyed,
        before.sources,
        last.sources,
        if bounded { "bounded" } else { "OVER BOUND" },
        started.elapsed().as_secs_f64()
    );
    Ok(if pass { EXIT_OK } else { EXIT_PROBLEMS })
}

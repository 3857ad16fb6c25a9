//! `rockstate-bench rescale`: the rescale workload, with its baselines measured in the same
//! process.
//!
//! Workload: one backend (all 128 key groups) gets `keys` keys of `key_bytes` bytes with
//! `value_bytes`-byte random values through a value state → checkpoint 1. Then, each timed
//! as the median of `repeat` runs into fresh directories:
//! - `rescale=1->2`: two backends (halves) restored from checkpoint 1 concurrently, one thread
//!   each, as two tasks of an engine in one process would, sharing what they fetch (one
//!   `SharedFetches`: each shared SST is downloaded by one half and linked by the other);
//!   `rescale=1->2-apart`: the same without sharing, as two processes restore (each half
//!   downloads its own copy); baseline `plain_restore`: checkpoint 1 restored into one
//!   backend of the same range (the same bytes, no clipping).
//! - the two halves write checkpoint 2 (the first after the rescale) → its uploaded bytes vs
//!   a full checkpoint of the same state.
//! - `rescale=2->1-right-after-1->2`: one backend restored from both manifests of checkpoint 2 (base + SST
//!   ingestion of the other); baseline: the same two manifests restored plainly, one after
//!   the other, on one thread (the same bytes, no merging). Then the merged backend's first
//!   checkpoint (3) and how many of the other half's SSTs were linked, rewritten or dropped.
//!   Both halves still hold the source's L0 SSTs and their clip tombstones: a scale-in right
//!   after a scale-out, before compaction gave each half files of its own. The base drops
//!   its clip file, so the files both halves hold serve the other half as they are
//!   (docs/decisions/0044-merge-back-drops-level-0-clips.md).
//! - savepoint write and read of the merged backend, median of `repeat` runs each. MB/s =
//!   raw entry bytes (key + namespace + suffix + value lengths, uncompressed, summed over every
//!   entry) / 10^6 / wall seconds of `write_savepoint` (including its final fsync) or of
//!   `restore_savepoint` into a fresh empty backend. `savepoint-one-key-group`: the same for
//!   the same keys and values in a backend of max parallelism 1 (one key group holds all).
//! - `rescale=2->1`: the same for two halves loaded separately, as a job that ran at
//!   parallelism 2 has them (no shared SSTs; Flink's rescale benchmarks build their state this
//!   way): the other half's SSTs are linked as they are.
//! - `rescale=P->Q` for each `--case 'P->Q'`: a job of P instances loaded the same way,
//!   restored at parallelism Q, instance after instance; baseline: the P manifests restored
//!   plainly into their own ranges, one after the other.
//! - `--savepoint-gets N` runs only a savepoint write, its restores and N uniform gets of
//!   each restored backend in three passes (cold, warm, device: [`savepoint_gets`]).
//!
//! Before each timed run the file systems' dirty pages are written back (`sync`), untimed.
//! `--no-local-recovery` keeps no local copies, so every restore reads from storage (Flink's
//! benchmarks run that way; `scripts/flink-bench.sh --rescale` passes it).
//!
//! `ratio` = throughput of the rescale / throughput of the plain restore of the same bytes
//! = `plain_restore_secs / secs` (target ≥ 0.5). For 1 -> 2 each new instance needs the
//! source checkpoint's files but the SSTs lying wholly in the other half (the manifest records
//! each SST's key range; docs/rescale.md §2), so apart the rescale moves up to twice the
//! bytes: `downloaded_bytes`, `files_downloaded`, `files_skipped` and `files_shared` (both
//! halves, last run) and `ratio_per_downloaded_byte` show that part separately. A 2 -> 1
//! merge shares within itself: an SST both halves list is fetched once.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use rockstate::coordinator::task_checkpoint;
use rockstate::savepoint::SAVEPOINT_ZSTD_LEVEL;
use rockstate::{
    CheckpointOptions, CheckpointStats, CheckpointStorage, CodecId, DbOptions, Error, JobOwner,
    KeyGroupRange, KeyedBackend, MemoryBudget, MemoryBudgetConfig, RestoreFrom, RestoreReport,
    SharedFetches, SystemClock,
};

use crate::report::Line;
use crate::support::{io, median, storage_named};

/// Arguments of `bench rescale`.
#[derive(clap::Args, Debug)]
pub struct RescaleArgs {
    /// Number of keys.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Key size in bytes, at least 8: key `k` is `k` as 8 bytes big-endian followed by
    /// `key_bytes - 8` bytes drawn from `k` alone (the same key in every load). Flink's
    /// rescaling benchmark (flink-benchmarks' `RocksdbStateBackendRescalingBenchmarkExecutor`)
    /// runs 10M keys of 96 bytes with 128-byte values: `--keys 10000000 --key-bytes 96
    /// --value-bytes 128`.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(8..))]
    key_bytes: u16,
    /// Parallel file transfers per restore.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Timed runs per measurement (the median is printed).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Compact the source state fully before checkpoint 1 (as a long-running job's state
    /// mostly is; by default the checkpoint follows the load, its data mostly in L0 files,
    /// which a rescale cannot skip). With `--options '{"key_group_files":true}'` every
    /// compacted file then holds one key group, and 1 -> 2 skips the other half's files.
    #[arg(long)]
    compact_source: bool,
    /// Overrides of the RocksDB options of every backend as JSON, e.g.
    /// `{"key_group_files":false}`; fields not given keep their defaults.
    #[arg(long)]
    options: Option<String>,
    /// Measures only a savepoint restore and the reads after it: the state of `--keys` keys
    /// is written as a savepoint, restored `--repeat` times into a fresh backend on a budget
    /// of `--budget-mib`, and each restored backend takes this many uniform random gets in
    /// each of three passes (`cold_get_ops_s`: as the restore left its files;
    /// `warm_get_ops_s`: the files read into the page cache first; `device_get_ops_s`: the
    /// files dropped from the page cache every 1,000 gets), beside the restored state's data
    /// bytes per block. Alternating `--options '{"large_entry_block_size":0}'` with the
    /// default measures the block size a restore writes large values in
    /// (docs/decisions/0051-block-size-follows-entry-size.md).
    #[arg(long)]
    savepoint_gets: Option<u64>,
    /// Memory budget of every backend, MiB (default: the default budget, 512 MiB).
    #[arg(long)]
    budget_mib: Option<usize>,
    /// Keep no local copies of checkpoints (`CheckpointOptions::local_recovery = false`), so
    /// every restore downloads from storage. By default the copies are kept, and restores in
    /// the same directory take their files from the source's copy, as a job restarting in
    /// place does (`of_which_local_bytes`); Flink's benchmarks run without local recovery.
    #[arg(long)]
    no_local_recovery: bool,
    /// More rescales to time, as `P->Q` (repeatable, e.g. `--case '3->4' --case '4->3'`): a job
    /// of P instances, each loaded with the keys of its own key groups, restored at
    /// parallelism Q, every new instance one after the other, against the P manifests
    /// restored plainly one after the other (`rescale=P->Q`, after the other cases).
    #[arg(long = "case", value_parser = parse_case)]
    cases: Vec<(u32, u32)>,
    /// Checkpoint storage URL (`s3://bucket/prefix`, with the endpoint and credentials in
    /// `AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`); the run uses
    /// `<url>/rescale-<process id>`. Default: a LocalStorage directory, from which restores
    /// hard-link every SST (what a download costs there is reading it for its CRC).
    #[arg(long)]
    storage: Option<String>,
}

const M: u32 = 128;

struct Env<'a> {
    args: &'a RescaleArgs,
    root: &'a Path,
    storage: Arc<dyn CheckpointStorage>,
    budget: MemoryBudget,
    options: DbOptions,
}

impl Env<'_> {
    fn builder(&self, name: &str, range: KeyGroupRange) -> rockstate::BackendBuilder {
        KeyedBackend::builder(self.root.join(name))
            .max_parallelism(M)
            .key_groups(range)
            .memory_budget(self.budget.clone())
            .options(self.options.clone())
            .checkpoint_storage(Arc::clone(&self.storage))
            .checkpoint_options(CheckpointOptions {
                transfer_threads: self.args.threads,
                local_recovery: !self.args.no_local_recovery,
                ..CheckpointOptions::default()
            })
    }

    fn restore(
        &self,
        name: &str,
        range: KeyGroupRange,
        from: RestoreFrom,
    ) -> rockstate::Result<KeyedBackend> {
        self.builder(name, range).restore(from)
    }

    fn remove(&self, name: &str) -> rockstate::Result<()> {
        let p = self.root.join(name);
        std::fs::remove_dir_all(&p).map_err(io(&p))
    }

    /// Median over `repeat` runs of `f(run index)`, which returns the backends to drop and
    /// remove after the clock stopped. Before each run, untimed, the file systems' dirty
    /// pages are written back (`sync`), so a restore's fsyncs do not wait for what the load
    /// or an earlier run left to write.
    fn timed(
        &self,
        label: &str,
        mut f: impl FnMut(usize) -> rockstate::Result<Vec<(String, KeyedBackend)>>,
    ) -> rockstate::Result<Duration> {
        let mut times = Vec::new();
        for i in 0..self.args.repeat.max(1) {
            sync_file_systems()?;
            let t = Instant::now();
            let made = f(i)?;
            times.push(t.elapsed());
            for (name, b) in made {
                drop(b);
                self.remove(&name)?;
            }
        }
        let _ = label;
        Ok(median(times))
    }
}

/// Writes every file system's dirty pages back (`sync(1)`).
fn sync_file_systems() -> rockstate::Result<()> {
    let status = std::process::Command::new("sync")
        .status()
        .map_err(io(Path::new("sync")))?;
    if status.success() {
        Ok(())
    } else {
        Err(Error::Internal(format!("sync exited with {status}")))
    }
}

/// Checkpoint `id` of the job made of `backends` (two tasks linked to `owner`): each uploads,
/// `owner` commits the job record naming both manifests, then each is told it completed. (A
/// backend without a job owner is a job of its own: two of them in one storage would each
/// find the other's record foreign.)
fn checkpoint_job(
    owner: &JobOwner,
    backends: &[KeyedBackend],
    id: u64,
) -> rockstate::Result<Vec<CheckpointStats>> {
    let stats = backends
        .iter()
        .map(|b| b.checkpoint(id))
        .collect::<rockstate::Result<Vec<_>>>()?;
    let record = sst_format::JobCheckpoint {
        checkpoint_id: id,
        job_name: "bench-rescale".into(),
        max_parallelism: M,
        triggered_at_ms: 0,
        completed_at_ms: 0,
        tasks: backends
            .iter()
            .zip(&stats)
            .enumerate()
            .map(|(i, (b, s))| task_checkpoint(i as u32, Some((b, s)), Vec::new()))
            .collect(),
    };
    owner.commit(&record)?;
    for b in backends {
        b.notify_checkpoint_complete(id)?;
    }
    Ok(stats)
}

/// The job owner of the bench's storage, for checkpoints of two tasks.
fn job_owner(env: &Env<'_>) -> rockstate::Result<Arc<JobOwner>> {
    Ok(Arc::new(JobOwner::open(
        Arc::clone(&env.storage),
        1,
        Arc::new(SystemClock),
    )?))
}

fn half(i: u32) -> rockstate::Result<KeyGroupRange> {
    KeyGroupRange::for_operator(M, 2, i)
}

/// What the restores of one rescale fetched: `(bytes, files)` downloaded or taken from a
/// local copy, of which `local_bytes` from a local copy (local recovery), SST files skipped,
/// SST files linked from another restore's copy instead of fetched (`SharedFetches`), and
/// entries the merges rewrote (their fallback), summed over the new instances.
#[derive(Clone, Copy, Default)]
struct Fetched {
    bytes: u64,
    local_bytes: u64,
    files: usize,
    skipped: usize,
    shared: usize,
    rewritten: u64,
}

impl Fetched {
    fn add(&mut self, r: &RestoreReport) {
        self.bytes += r.bytes_downloaded + r.bytes_local;
        self.local_bytes += r.bytes_local;
        self.files += r.files_downloaded + r.files_local;
        self.skipped += r.files_skipped;
        self.shared += r.files_shared;
        self.rewritten += r.entries_rewritten;
    }
}

/// `bytes`: what the plain restore downloads (the state); `fetched`: what the rescale
/// downloaded in total (1 -> 2: both new instances).
fn print_ratio(what: &str, secs: Duration, plain: Duration, bytes: u64, fetched: Fetched) {
    let (s, p) = (secs.as_secs_f64(), plain.as_secs_f64());
    let downloaded = fetched.bytes;
    Line::new()
        .text("rescale", what)
        .num("secs", s, 3)
        .num("plain_restore_secs", p, 3)
        .num("ratio", p / s, 3)
        .int("bytes", bytes)
        .int("downloaded_bytes", downloaded)
        .int("of_which_local_bytes", fetched.local_bytes)
        .int("files_downloaded", fetched.files as u64)
        .int("files_skipped", fetched.skipped as u64)
        .int("files_shared", fetched.shared as u64)
        .int("entries_rewritten", fetched.rewritten)
        .num(
            "ratio_per_downloaded_byte",
            (downloaded as f64 / s) / (bytes as f64 / p),
            3,
        )
        .note("median, target ratio >= 0.5")
        .print();
}

/// Times `label`: one backend restored from checkpoint `id` of the two halves `ids` (base +
/// the other's SSTs) vs the same two manifests restored plainly, one after the other, on one
/// thread (the same bytes, no merging). Returns the merge's restore request.
fn two_to_one(
    env: &Env<'_>,
    label: &str,
    id: u64,
    ids: &[String],
    state_bytes: u64,
) -> rockstate::Result<RestoreFrom> {
    let all = KeyGroupRange::all(M)?;
    let plain = plain_parts(env, id, ids)?;
    let from = RestoreFrom::Handles {
        checkpoint_id: id,
        backend_ids: ids.to_vec(),
    };
    let mut fetched = Fetched::default();
    let rescale = env.timed(label, |r| {
        let name = format!("r21-{r}");
        let (b, report) = env.builder(&name, all).restore_with_report(from.clone())?;
        fetched = Fetched::default();
        fetched.add(&report);
        Ok(vec![(name.clone(), b)])
    })?;
    print_ratio(label, rescale, plain, state_bytes, fetched);
    Ok(from)
}

/// Runs the benchmark.
pub fn run(args: &RescaleArgs) -> rockstate::Result<()> {
    let tmp = std::env::temp_dir();
    let dir = tempfile::tempdir_in(&tmp).map_err(io(&tmp))?;
    let root = dir.path();
    let env = Env {
        args,
        root,
        storage: storage_named(
            args.storage.as_deref(),
            root,
            &format!("rescale-{}", std::process::id()),
        )?,
        budget: MemoryBudget::new(budget_config(args))?,
        options: crate::bench_ops::parse_override("--options", args.options.as_deref())?,
    };
    Line::header()
        .label("bench rescale:")
        .int("keys", args.keys)
        .int("key_bytes", u64::from(args.key_bytes))
        .int("value_bytes", args.value_bytes as u64)
        .int("threads", args.threads as u64)
        .int("repeat", args.repeat as u64)
        .text("local_recovery", (!args.no_local_recovery).to_string())
        .text(
            "storage",
            match &args.storage {
                Some(url) => url.clone(),
                None => format!("LocalStorage (fsync) in {}", root.display()),
            },
        )
        .print();
    let all = KeyGroupRange::all(M)?;

    // Source state and checkpoint 1 (full: nothing to reuse).
    let src = env.builder("src", all).open()?;
    let state = src.raw_value_state("bench", CodecId::new("bytes", 1))?;
    let mut rng = SmallRng::seed_from_u64(args.seed);
    let mut value = vec![0u8; args.value_bytes];
    let mut key = Vec::new();
    for k in 0..args.keys {
        rng.fill_bytes(&mut value);
        state.put(key_of(k, args.key_bytes, &mut key), &[], &value)?;
    }
    drop(state);
    if let Some(gets) = args.savepoint_gets {
        return savepoint_gets(&env, &src, all, gets);
    }
    if args.compact_source {
        src.flush()?;
        src.compact_state("bench")?;
    }
    let full = src.checkpoint(1)?;
    src.notify_checkpoint_complete(1)?;
    drop(src);
    env.remove("src")?;
    Line::header()
        .label("checkpoint 1 (full):")
        .int("uploaded_bytes", full.bytes_uploaded)
        .int("files", full.files_uploaded as u64)
        .print();

    // 1 -> 2.
    let plain = env.timed("plain 1", |i| {
        let name = format!("plain1-{i}");
        Ok(vec![(
            name.clone(),
            env.restore(&name, all, RestoreFrom::Checkpoint(1))?,
        )])
    })?;
    let restore_half = |name: String,
                        i: u32,
                        shared: Option<&SharedFetches>|
     -> rockstate::Result<(String, KeyedBackend, RestoreReport)> {
        let mut builder = env.builder(&name, half(i)?);
        if let Some(shared) = shared {
            builder = builder.shared_fetches(shared.clone());
        }
        let (b, report) = builder.restore_with_report(RestoreFrom::Checkpoint(1))?;
        Ok((name, b, report))
    };
    // The halves as two instances in one process restore them, sharing what they fetch
    // (`1->2`), and as two processes do, each fetching its own (`1->2-apart`).
    for (label, share) in [("1->2", true), ("1->2-apart", false)] {
        let mut fetched = Fetched::default();
        let rescale = env.timed(label, |r| {
            let shared = SharedFetches::default();
            let shared = share.then_some(&shared);
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..2u32)
                    .map(|i| {
                        let restore_half = &restore_half;
                        s.spawn(move || restore_half(format!("r12-{r}-{i}"), i, shared))
                    })
                    .collect();
                fetched = Fetched::default();
                handles
                    .into_iter()
                    .map(|h| {
                        let (name, b, report) = h
                            .join()
                            .map_err(|_| Error::Internal("restore thread panicked".into()))??;
                        fetched.add(&report);
                        Ok((name, b))
                    })
                    .collect()
            })
        })?;
        print_ratio(label, rescale, plain, full.state_bytes, fetched);
    }

    // The first checkpoint after the rescale.
    let owner = job_owner(&env)?;
    let halves = (0..2u32)
        .map(|i| {
            env.builder(&format!("half-{i}"), half(i)?)
                .job_owner(Arc::clone(&owner))
                .restore(RestoreFrom::Checkpoint(1))
        })
        .collect::<rockstate::Result<Vec<_>>>()?;
    let mut uploaded = 0;
    let mut state_bytes = 0;
    let mut reused = 0;
    for s in checkpoint_job(&owner, &halves, 2)? {
        uploaded += s.bytes_uploaded;
        state_bytes += s.state_bytes;
        reused += s.files_reused;
    }
    Line::new()
        .label("first_checkpoint_after_rescale")
        .int("uploaded_bytes", uploaded)
        .int("reused_files", reused as u64)
        .int("state_bytes", state_bytes)
        .int("full_checkpoint_bytes", full.bytes_uploaded)
        .num("fraction", uploaded as f64 / full.bytes_uploaded as f64, 4)
        .print();
    let ids: Vec<String> = halves.iter().map(|b| b.backend_id().to_string()).collect();
    drop(halves);
    drop(owner);

    // 2 -> 1.
    let from = two_to_one(&env, "2->1-right-after-1->2", 2, &ids, state_bytes)?;

    // How 2 -> 1 moved the other half's data, and the first checkpoint after it.
    let (merged, report) = env.builder("merged", all).restore_with_report(from)?;
    let after = merged.checkpoint(3)?;
    merged.notify_checkpoint_complete(3)?;
    Line::new()
        .label("first_checkpoint_after_rescale=2->1-right-after-1->2")
        .int("uploaded_bytes", after.bytes_uploaded)
        .int("reused_files", after.files_reused as u64)
        .int("state_bytes", after.state_bytes)
        .num(
            "fraction",
            after.bytes_uploaded as f64 / full.bytes_uploaded as f64,
            4,
        )
        .int("sst_files_linked", report.sst_files_linked as u64)
        .int("sst_files_rewritten", report.sst_files_rewritten as u64)
        .int("entries_rewritten", report.entries_rewritten)
        .int("sst_files_dropped", report.sst_files_dropped as u64)
        .print();

    // Savepoint write and read of the merged state.
    // Compactions the restore triggered would otherwise run during the timed writes.
    merged.wait_for_compactions()?;
    bench_savepoint(&env, &merged, all)?;
    drop(merged);
    bench_savepoint_one_key_group(&env)?;

    // 2 -> 1 of two halves that never shared SSTs (each loaded with its own keys): the other
    // half's SSTs are linked as they are, not rewritten.
    let (ids, own_bytes) = job_of_own_parts(&env, "own", 2, 10)?;
    let from = two_to_one(&env, "2->1", 10, &ids, own_bytes)?;
    let (merged, report) = env.builder("merged-own", all).restore_with_report(from)?;
    let after = merged.checkpoint(11)?;
    Line::new()
        .label("first_checkpoint_after_rescale=2->1")
        .int("uploaded_bytes", after.bytes_uploaded)
        .int("reused_files", after.files_reused as u64)
        .int("state_bytes", after.state_bytes)
        .int("sst_files_linked", report.sst_files_linked as u64)
        .int("sst_files_rewritten", report.sst_files_rewritten as u64)
        .int("entries_rewritten", report.entries_rewritten)
        .int("sst_files_dropped", report.sst_files_dropped as u64)
        .print();
    drop(merged);

    for (i, &(p, q)) in args.cases.iter().enumerate() {
        rescale_case(&env, p, q, 20 + i as u64)?;
    }
    Ok(())
}

/// Median time of restoring the manifests of checkpoint `id` of the backends `ids` (the
/// instances of a job at parallelism `ids.len()`, in order) plainly, each into its own key
/// groups, one after the other: the same bytes as a rescale of them, without clip or merge.
fn plain_parts(env: &Env<'_>, id: u64, ids: &[String]) -> rockstate::Result<Duration> {
    let p = u32::try_from(ids.len())
        .map_err(|_| Error::Internal(format!("{} instances", ids.len())))?;
    env.timed("plain parts", |r| {
        (0..p)
            .zip(ids)
            .map(|(i, backend)| {
                let name = format!("plain-{p}-{r}-{i}");
                let b = env.restore(
                    &name,
                    KeyGroupRange::for_operator(M, p, i)?,
                    RestoreFrom::Exact {
                        checkpoint_id: id,
                        backend_id: backend.clone(),
                    },
                )?;
                Ok((name, b))
            })
            .collect()
    })
}

/// Checkpoint `id` of a job of `p` instances (`<prefix>-<i>`), each loaded with the keys of
/// its own key groups, as a job that ran at parallelism `p` has its state. Returns the
/// instances' backend ids and their state bytes in total.
fn job_of_own_parts(
    env: &Env<'_>,
    prefix: &str,
    p: u32,
    id: u64,
) -> rockstate::Result<(Vec<String>, u64)> {
    let owner = job_owner(env)?;
    let parts = (0..p)
        .map(|i| {
            env.builder(
                &format!("{prefix}-{i}"),
                KeyGroupRange::for_operator(M, p, i)?,
            )
            .job_owner(Arc::clone(&owner))
            .open()
        })
        .collect::<rockstate::Result<Vec<_>>>()?;
    let states = parts
        .iter()
        .map(|b| b.raw_value_state("bench", CodecId::new("bytes", 1)))
        .collect::<rockstate::Result<Vec<_>>>()?;
    let mut rng = SmallRng::seed_from_u64(env.args.seed);
    let mut value = vec![0u8; env.args.value_bytes];
    let mut key = Vec::new();
    for k in 0..env.args.keys {
        rng.fill_bytes(&mut value);
        let key = key_of(k, env.args.key_bytes, &mut key);
        let group = rockstate::keygroup::key_group_of(key, M);
        let i = parts
            .iter()
            .position(|b| b.key_groups().contains(group))
            .ok_or_else(|| Error::Internal(format!("no instance owns key group {group}")))?;
        states[i].put(key, &[], &value)?;
    }
    drop(states);
    let bytes = checkpoint_job(&owner, &parts, id)?
        .iter()
        .map(|s| s.state_bytes)
        .sum();
    Ok((
        parts.iter().map(|b| b.backend_id().to_string()).collect(),
        bytes,
    ))
}

/// `--case P->Q`: a job of `p` instances with state of their own (checkpoint `id`), restored
/// at parallelism `q`, every new instance one after the other, against the `p` manifests
/// restored plainly into their own ranges one after the other (the same bytes, no clip or
/// merge). Each new instance restores `RestoreFrom::Checkpoint(id)` for its range, as an
/// engine's tasks do.
fn rescale_case(env: &Env<'_>, p: u32, q: u32, id: u64) -> rockstate::Result<()> {
    let prefix = format!("case-{p}");
    let (ids, bytes) = job_of_own_parts(env, &prefix, p, id)?;
    let plain = plain_parts(env, id, &ids)?;
    let label = format!("{p}->{q}");
    let mut fetched = Fetched::default();
    let rescale = env.timed(&label, |r| {
        fetched = Fetched::default();
        (0..q)
            .map(|i| {
                let name = format!("case-{p}-{q}-{r}-{i}");
                let (b, report) = env
                    .builder(&name, KeyGroupRange::for_operator(M, q, i)?)
                    .restore_with_report(RestoreFrom::Checkpoint(id))?;
                fetched.add(&report);
                Ok((name, b))
            })
            .collect()
    })?;
    print_ratio(&label, rescale, plain, bytes, fetched);
    for i in 0..p {
        env.remove(&format!("{prefix}-{i}"))?;
    }
    Ok(())
}

/// `P->Q` of `--case`: two parallelisms of at least 1 and at most the max parallelism.
fn parse_case(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("`{s}` is not P->Q with 1 <= P, Q <= {M}");
    let (p, q) = s.split_once("->").ok_or_else(bad)?;
    let p: u32 = p.trim().parse().map_err(|_| bad())?;
    let q: u32 = q.trim().parse().map_err(|_| bad())?;
    if !(1..=M).contains(&p) || !(1..=M).contains(&q) {
        return Err(bad());
    }
    Ok((p, q))
}

/// Key `k` of `key_bytes` bytes into `buf`: `k` big-endian, then bytes of a SplitMix64
/// sequence seeded by `k` (so every load of the bench writes the same keys).
fn key_of(k: u64, key_bytes: u16, buf: &mut Vec<u8>) -> &[u8] {
    buf.clear();
    buf.extend_from_slice(&k.to_be_bytes());
    let mut x = k;
    while buf.len() < usize::from(key_bytes) {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let n = (usize::from(key_bytes) - buf.len()).min(8);
        buf.extend_from_slice(&z.to_le_bytes()[..n]);
    }
    buf
}

/// The run with the median wall time of `(wall time, cpu seconds)` runs.
fn median_by_time(mut v: Vec<(Duration, f64)>) -> (Duration, f64) {
    v.sort_by_key(|r| r.0);
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// CPU seconds (user + system) of every thread of this process so far, from
/// `/proc/self/stat` (fields 14 and 15, in clock ticks of 1/100 s on Linux); NaN elsewhere.
fn process_cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    // The command name (field 2) may hold spaces; the fields after it follow its `)`.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / 100.0,
        _ => f64::NAN,
    }
}

/// The same keys and values in one key group (max parallelism 1): state skewed to its
/// extreme, where a savepoint restore cut only between key groups ran on one thread. Savepoint
/// write and read as `bench_savepoint`, under the label `savepoint-one-key-group`.
fn bench_savepoint_one_key_group(env: &Env<'_>) -> rockstate::Result<()> {
    let open = |name: &str| {
        KeyedBackend::builder(env.root.join(name))
            .max_parallelism(1)
            .memory_budget(env.budget.clone())
            .options(env.options.clone())
            .open()
    };
    let hot = open("one-group")?;
    let state = hot.raw_value_state("bench", CodecId::new("bytes", 1))?;
    let mut rng = SmallRng::seed_from_u64(env.args.seed);
    let mut value = vec![0u8; env.args.value_bytes];
    let mut key = Vec::new();
    for k in 0..env.args.keys {
        rng.fill_bytes(&mut value);
        state.put(key_of(k, env.args.key_bytes, &mut key), &[], &value)?;
    }
    drop(state);
    hot.flush()?;
    hot.wait_for_compactions()?;
    savepoint_rounds(
        env,
        &hot,
        "savepoint-one-key-group",
        || open("one-group-fresh"),
        "one-group-fresh",
    )?;
    drop(hot);
    env.remove("one-group")
}

/// Savepoint write and read of `backend`, each the median of `repeat` runs (fresh file, fresh
/// empty backend each time).
fn bench_savepoint(
    env: &Env<'_>,
    backend: &KeyedBackend,
    all: KeyGroupRange,
) -> rockstate::Result<()> {
    savepoint_rounds(
        env,
        backend,
        "savepoint",
        || env.builder("fresh", all).open(),
        "fresh",
    )
}

/// `repeat` savepoint writes of `backend`, each restored into a fresh backend `fresh()` (at
/// `fresh_name`, removed after each); prints the medians as `label`.
fn savepoint_rounds(
    env: &Env<'_>,
    backend: &KeyedBackend,
    label: &str,
    fresh: impl Fn() -> rockstate::Result<KeyedBackend>,
    fresh_name: &str,
) -> rockstate::Result<()> {
    let (mut writes, mut reads, mut stats) = (Vec::new(), Vec::new(), None);
    for i in 0..env.args.repeat.max(1) {
        let sp = env.root.join(format!("savepoint-{i}"));
        let (t, cpu) = (Instant::now(), process_cpu_secs());
        let w = backend.write_savepoint(&sp)?;
        writes.push((t.elapsed(), process_cpu_secs() - cpu));
        let target = fresh()?;
        let (t, cpu) = (Instant::now(), process_cpu_secs());
        let r = target.restore_savepoint(&sp)?;
        reads.push((t.elapsed(), process_cpu_secs() - cpu));
        stats = Some((w, r));
        drop(target);
        env.remove(fresh_name)?;
        std::fs::remove_file(&sp).map_err(io(&sp))?;
    }
    let ((write, write_cpu), (read, read_cpu)) = (median_by_time(writes), median_by_time(reads));
    let Some((w, r)) = stats else {
        return Ok(());
    };
    let mb = |bytes: u64, d: Duration| bytes as f64 / 1e6 / d.as_secs_f64();
    Line::new()
        .label(label)
        .num("write_mb_s", mb(w.raw_bytes, write), 1)
        .num("read_mb_s", mb(r.raw_bytes, read), 1)
        .int("entries", w.entries)
        .int("raw_bytes", w.raw_bytes)
        .int("file_bytes", w.file_bytes)
        .text("zstd_level", SAVEPOINT_ZSTD_LEVEL.to_string())
        .num("write_secs", write.as_secs_f64(), 3)
        .num("read_secs", read.as_secs_f64(), 3)
        .num("write_cpu_secs", write_cpu, 3)
        .num("read_cpu_secs", read_cpu, 3)
        .note("median; MB/s of raw entry bytes incl. fsync; cpu = all threads of the process; target write >= 200")
        .print();
    Ok(())
}

/// The memory budget of every backend: `--budget-mib`, or the default.
fn budget_config(args: &RescaleArgs) -> MemoryBudgetConfig {
    let default = MemoryBudgetConfig::default();
    match args.budget_mib {
        Some(mib) => MemoryBudgetConfig {
            total_bytes: mib << 20,
            ..default
        },
        None => default,
    }
}

/// `--savepoint-gets`: `src` written as a savepoint, restored `repeat` times into a fresh
/// backend, and each restored backend read three times by `gets` uniform random gets: as the
/// restore leaves its files (RocksDB's SST writer drops what it writes from the page cache,
/// so the reads go to the device until the page cache holds the files, or until the
/// backend's own warming has read them back: `DbOptions::warm_restored_files`); with every
/// restored file read into the page cache beforehand (state beyond the budget but within
/// the machine's memory, as `bench matrix` measures it); and with the files dropped from the page
/// cache every [`DROP_EVERY`] gets (state far beyond the machine's memory). Prints the
/// medians.
fn savepoint_gets(
    env: &Env<'_>,
    src: &KeyedBackend,
    all: KeyGroupRange,
    gets: u64,
) -> rockstate::Result<()> {
    let sp = env.root.join("savepoint");
    let written = src.write_savepoint(&sp)?;
    let mut rng = SmallRng::seed_from_u64(env.args.seed ^ 0x5eed);
    let (mut restores, mut per_block, mut files_before) = (Vec::new(), 0, String::new());
    let mut warmed = 0;
    // Per restore: how long the warming went on after the cold pass.
    let mut warm_waits = Vec::new();
    // Per pass (cold, warm, device): durations and bytes read per get.
    let mut passes: [(Vec<Duration>, u64); 3] = Default::default();
    let dir = env.root.join("fresh");
    for _ in 0..env.args.repeat.max(1) {
        let target = env.builder("fresh", all).open()?;
        let t = Instant::now();
        target.restore_savepoint(&sp)?;
        restores.push(t.elapsed());
        warmed = target.metrics()?.rocksdb.restored_bytes_warmed;
        per_block = state_bytes_per_block(&dir)?;
        let state = target.raw_value_state("bench", CodecId::new("bytes", 1))?;
        files_before =
            crate::bench_ops::levels(|p| target.state_property("bench", p).ok().flatten());
        // The restore's files and the savepoint go to disk first (a restore does not sync
        // its links, docs/decisions/0037-restores-link-without-fsync.md): the gets measure
        // reading the restored files, not the device's writeback beside them.
        // SAFETY: sync(2) takes no arguments and only schedules and waits for writeback.
        unsafe { libc::sync() };
        for (pass, (times, per_get)) in passes.iter_mut().enumerate() {
            if pass == 1 {
                let t = Instant::now();
                target.wait_for_page_cache_warming();
                warm_waits.push(t.elapsed());
                read_ssts(&dir)?;
            }
            let dropped = if pass == 2 {
                ssts_in(&dir)?
            } else {
                Vec::new()
            };
            let read_before = read_syscall_bytes();
            let t = Instant::now();
            let mut found = 0u64;
            let mut key = Vec::new();
            for i in 0..gets {
                if i % DROP_EVERY == 0 {
                    drop_from_page_cache(&dropped);
                }
                let k = rng.next_u64() % env.args.keys.max(1);
                let key = key_of(k, env.args.key_bytes, &mut key);
                found += u64::from(state.get(key, &[])?.is_some());
            }
            times.push(t.elapsed());
            *per_get = (read_syscall_bytes() - read_before) / gets.max(1);
            if found != gets {
                return Err(Error::Internal(format!(
                    "{found} of {gets} restored keys found"
                )));
            }
        }
        drop(state);
        drop(target);
        env.remove("fresh")?;
    }
    let restore = median(restores);
    let [(cold, cold_per_get), (warm, warm_per_get), (device, _)] = passes;
    let cold_secs = median(cold.clone()).as_secs_f64();
    let ops = |times: Vec<Duration>| gets as f64 / median(times).as_secs_f64();
    Line::new()
        .label("savepoint-gets")
        .num(
            "read_mb_s",
            written.raw_bytes as f64 / 1e6 / restore.as_secs_f64(),
            1,
        )
        .num("restore_secs", restore.as_secs_f64(), 3)
        .num("cold_get_ops_s", ops(cold), 0)
        .num("warm_get_ops_s", ops(warm), 0)
        .num("device_get_ops_s", ops(device), 0)
        .int("restored_bytes_per_block", per_block)
        .int("restored_bytes_warmed", warmed)
        .num("warming_after_cold_secs", median(warm_waits).as_secs_f64(), 3)
        .num("cold_secs", cold_secs, 3)
        .int("cold_read_bytes_per_get", cold_per_get)
        .int("warm_read_bytes_per_get", warm_per_get)
        .text("files_before", files_before)
        .int("budget_mib", (budget_config(env.args).total_bytes >> 20) as u64)
        .note("median of --repeat restores; gets uniform over the restored keys; cold: as the restore left the files (and warming reads them back), warm: every SST in the page cache, device: the SSTs dropped from the page cache every 1,000 gets")
        .print();
    Ok(())
}

/// Gets between two drops of the restored files from the page cache in the `device` pass:
/// 1,000 block reads of 16 KiB bring 16 MB of a state of 1 GB back, so nearly every block
/// the block cache misses is read from the device, as for state far beyond the machine's
/// memory.
const DROP_EVERY: u64 = 1000;

/// The SST files in `dir`.
fn sst_paths(dir: &Path) -> rockstate::Result<Vec<std::path::PathBuf>> {
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let path = entry.map_err(io(dir))?.path();
        if path.extension().is_some_and(|x| x == "sst") {
            paths.push(path);
        }
    }
    Ok(paths)
}

/// The SST files in `dir`, open for reading.
fn ssts_in(dir: &Path) -> rockstate::Result<Vec<std::fs::File>> {
    sst_paths(dir)?
        .iter()
        .map(|path| std::fs::File::open(path).map_err(io(path)))
        .collect()
}

/// Asks the kernel to drop `files` from the page cache (clean pages: the files were synced).
fn drop_from_page_cache(files: &[std::fs::File]) {
    use std::os::fd::AsRawFd;
    for file in files {
        // SAFETY: a valid open descriptor; the advice only drops clean cached pages.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

/// Reads every SST in `dir` once, so the page cache holds them.
fn read_ssts(dir: &Path) -> rockstate::Result<()> {
    for path in sst_paths(dir)? {
        let mut file = std::fs::File::open(&path).map_err(io(&path))?;
        std::io::copy(&mut file, &mut std::io::sink()).map_err(io(&path))?;
    }
    Ok(())
}

/// Data bytes per data block over the SSTs in `dir` that are not the metadata column
/// family's (a restore's ingested files carry no column family name).
fn state_bytes_per_block(dir: &Path) -> rockstate::Result<u64> {
    let (mut bytes, mut blocks) = (0u64, 0u64);
    for path in sst_paths(dir)? {
        let props = sst_format::read_sst_meta(&path)
            .map_err(|e| Error::Internal(format!("{}: {e}", path.display())))?
            .properties;
        if props.column_family_name != "default" {
            bytes += props.data_size;
            blocks += props.num_data_blocks;
        }
    }
    Ok(bytes / blocks.max(1))
}

/// Bytes this process has read through read system calls (`rchar` of `/proc/self/io`, page
/// cache hits included; 0 where the file is missing).
fn read_syscall_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|io| {
            io.lines()
                .find_map(|l| l.strip_prefix("rchar:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

//! `rockstate-bench checkpoint`: the checkpoint workload, with its baselines measured
//! in the same process: a bare RocksDB checkpoint (sync phase), a plain parallel copy of the
//! same files (async phase) and `cp -r` (restore).
//!
//! Workload: insert `keys` keys with `value_bytes`-byte random values through a value state →
//! cp1; update every 100th key → cp2; no change → cp3; update 1% random keys → cp4; then
//! `rounds` rounds of (update 1% random keys → checkpoint). The same again with incremental
//! checkpoints off ("full"), and in changelog mode ("changelog": log checkpoints with
//! periodic materialization; its restore is timed against SST-only restores of the same
//! state: a copy of the restored state, and with `--mode all` the incremental run's last
//! checkpoint, the same job with changelog mode off). One line per checkpoint.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use rockstate::{
    ChangelogOptions, CheckpointOptions, CheckpointStats, CheckpointStorage, CodecId, DbOptions,
    Error, KeyedBackend, MemoryBudget, MemoryBudgetConfig, RawValueState, RestoreFrom,
    RestoreReport,
};

use crate::report::Line;
use crate::support::{io, median, storage_named};

/// Which checkpoint modes to run.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Reuse SSTs of the last completed checkpoint.
    Incremental,
    /// Upload every file every time.
    Full,
    /// Both, one after the other.
    Both,
    /// Changelog mode: log checkpoints, materialized now and then.
    Changelog,
    /// Incremental, full and changelog, one after the other.
    All,
}

/// Arguments of `bench checkpoint`.
#[derive(clap::Args, Debug)]
pub struct CheckpointArgs {
    /// Number of keys.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Rounds of (update 1% random keys → checkpoint) after cp4.
    #[arg(long, default_value_t = 50)]
    rounds: u64,
    /// Checkpoint mode(s).
    #[arg(long, value_enum, default_value_t = Mode::Both)]
    mode: Mode,
    /// Parallel file transfers.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Random seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Overrides of the RocksDB options as JSON, e.g. `{"write_buffer_size":33554432}`.
    #[arg(long)]
    options: Option<String>,
    /// Also write an SVG chart of uploaded bytes per checkpoint, incremental vs full.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Checkpoint storage URL (`s3://bucket/prefix`, `memory://`, `file:///dir`); each mode
    /// uses `<url>/<mode>`. Default: a LocalStorage directory in the temporary directory.
    #[arg(long)]
    storage: Option<String>,
    /// Overrides of the changelog settings as JSON, e.g. `{"materialize_log_percent":50}`
    /// (changelog mode only; `enabled` is always true there).
    #[arg(long)]
    changelog: Option<String>,
    /// In changelog mode's restore comparison, every read of both timed restores (changelog
    /// and SST-only) waits this long before it reaches the storage, as a request to a remote
    /// object store waits for its first byte. Bandwidth is not limited.
    #[arg(long, default_value_t = 0)]
    get_latency_ms: u64,
    /// Timed restores of each kind in changelog mode's restore comparison (their median is
    /// printed), the kinds taken in turn, each round starting with the next kind.
    #[arg(long, default_value_t = 5)]
    restores: usize,
    /// In changelog mode's restore comparison, puts of 100-byte values to random existing
    /// keys timed right after each restore (0: none): how fast a restored job catches up,
    /// which level-0 files a restore leaves behind can slow down.
    #[arg(long, default_value_t = 250_000)]
    first_puts: u64,
}

/// `storage` as the timed restores read it: behind `--get-latency-ms` of latency per read.
fn restore_storage(
    args: &CheckpointArgs,
    storage: &Arc<dyn CheckpointStorage>,
) -> Arc<dyn CheckpointStorage> {
    if args.get_latency_ms == 0 {
        return storage.clone();
    }
    Arc::new(SlowReads {
        inner: storage.clone(),
        delay: Duration::from_millis(args.get_latency_ms),
    })
}

/// A storage whose reads (gets and listings) each sleep `delay` on the calling thread before
/// going to `inner`: the first-byte latency of a remote object store, which parallel reads
/// overlap as they would there.
#[derive(Debug)]
struct SlowReads {
    inner: Arc<dyn CheckpointStorage>,
    delay: Duration,
}

impl CheckpointStorage for SlowReads {
    fn put_file(&self, name: &str, local: &Path) -> rockstate::Result<rockstate::ObjectDigest> {
        self.inner.put_file(name, local)
    }
    fn put_bytes(&self, name: &str, bytes: &[u8]) -> rockstate::Result<()> {
        self.inner.put_bytes(name, bytes)
    }
    fn get_file(&self, name: &str, local: &Path) -> rockstate::Result<rockstate::ObjectDigest> {
        std::thread::sleep(self.delay);
        self.inner.get_file(name, local)
    }
    fn get_file_durable(
        &self,
        name: &str,
        local: &Path,
    ) -> rockstate::Result<rockstate::ObjectDigest> {
        std::thread::sleep(self.delay);
        self.inner.get_file_durable(name, local)
    }
    fn get_bytes(&self, name: &str) -> rockstate::Result<Vec<u8>> {
        std::thread::sleep(self.delay);
        self.inner.get_bytes(name)
    }
    fn list(&self, prefix: &str) -> rockstate::Result<Vec<rockstate::ObjectInfo>> {
        std::thread::sleep(self.delay);
        self.inner.list(prefix)
    }
    fn delete(&self, name: &str) -> rockstate::Result<()> {
        self.inner.delete(name)
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Run<'a> {
    args: &'a CheckpointArgs,
    backend: KeyedBackend,
    state: RawValueState,
    rng: SmallRng,
    value: Vec<u8>,
    next_id: u64,
    mode: &'static str,
    cumulative: u64,
    /// Uploaded bytes of each checkpoint, in order (for the chart).
    uploaded: Vec<u64>,
    /// Sync phase of each checkpoint, in order.
    syncs: Vec<Duration>,
    bar: indicatif::ProgressBar,
}

impl Run<'_> {
    fn put(&mut self, key: u64) -> rockstate::Result<()> {
        self.rng.fill_bytes(&mut self.value);
        self.state.put(&key.to_be_bytes(), &[], &self.value)
    }

    fn update_random_percent(&mut self) -> rockstate::Result<()> {
        for _ in 0..(self.args.keys / 100).max(1) {
            let k = self.rng.random_range(0..self.args.keys);
            self.put(k)?;
        }
        Ok(())
    }

    /// Sync phase on this thread, async phase on another, then completion.
    fn checkpoint(&mut self) -> rockstate::Result<CheckpointStats> {
        let id = self.next_id;
        self.next_id += 1;
        let pending = self.backend.snapshot(id)?;
        let stats = std::thread::spawn(move || pending.upload())
            .join()
            .map_err(|_| Error::CheckpointAborted { id })??;
        self.backend.notify_checkpoint_complete(id)?;
        self.cumulative += stats.bytes_uploaded;
        self.uploaded.push(stats.bytes_uploaded);
        self.syncs.push(stats.sync_duration);
        if !self.bar.is_finished() {
            self.bar.inc(1);
        }
        Line::new()
            .int("checkpoint", id)
            .text("mode", self.mode)
            .num("sync_ms", ms(stats.sync_duration), 1)
            .num("async_ms", ms(stats.async_duration), 1)
            .int("uploaded_bytes", stats.bytes_uploaded)
            .int("uploaded_files", stats.files_uploaded as u64)
            .int("reused_files", stats.files_reused as u64)
            .int("state_bytes", stats.state_bytes)
            .int("materialized", u64::from(stats.materialized))
            .int("log_tables_built", stats.log_tables_built as u64)
            .int("log_table_bytes", stats.log_table_bytes_uploaded)
            .print_above(&self.bar);
        Ok(stats)
    }
}

fn open_run<'a>(
    args: &'a CheckpointArgs,
    root: &Path,
    mode: &'static str,
    budget: &MemoryBudget,
) -> rockstate::Result<(Run<'a>, Arc<dyn CheckpointStorage>)> {
    let storage = storage_named(args.storage.as_deref(), root, mode)?;
    let backend = KeyedBackend::builder(root.join(format!("db-{mode}")))
        .options(crate::bench_ops::parse_override::<DbOptions>(
            "--options",
            args.options.as_deref(),
        )?)
        .memory_budget(budget.clone())
        .checkpoint_storage(storage.clone())
        .checkpoint_options(CheckpointOptions {
            incremental: mode != "full",
            transfer_threads: args.threads,
            changelog: if mode == "changelog" {
                ChangelogOptions {
                    enabled: true,
                    ..crate::bench_ops::parse_override::<ChangelogOptions>(
                        "--changelog",
                        args.changelog.as_deref(),
                    )?
                }
            } else {
                ChangelogOptions::default()
            },
            ..CheckpointOptions::default()
        })
        .open()?;
    let state = backend.raw_value_state("bench", CodecId::new("bytes", 1))?;
    Ok((
        Run {
            args,
            backend,
            state,
            rng: SmallRng::seed_from_u64(args.seed),
            value: vec![0; args.value_bytes],
            next_id: 1,
            mode,
            cumulative: 0,
            uploaded: Vec::new(),
            syncs: Vec::new(),
            bar: crate::progress::bar(4 + args.rounds, "checkpoints", mode),
        },
        storage,
    ))
}

/// The workload in one mode; returns the run for the baselines.
fn workload<'a>(
    args: &'a CheckpointArgs,
    root: &Path,
    mode: &'static str,
    budget: &MemoryBudget,
) -> rockstate::Result<(Run<'a>, Arc<dyn CheckpointStorage>)> {
    let (mut run, storage) = open_run(args, root, mode, budget)?;
    for k in 0..args.keys {
        run.put(k)?;
    }
    run.checkpoint()?; // cp1
    for k in (0..args.keys).step_by(100) {
        run.put(k)?;
    }
    run.checkpoint()?; // cp2
    run.checkpoint()?; // cp3
    run.update_random_percent()?;
    run.checkpoint()?; // cp4
    let after_cp4 = run.cumulative;
    for _ in 0..args.rounds {
        run.update_random_percent()?;
        run.checkpoint()?;
    }
    run.bar.finish_and_clear();
    // The rounds' sync phases: what processing waits for at each checkpoint, stalls included.
    let mut syncs = run.syncs[run.syncs.len() - args.rounds as usize..].to_vec();
    syncs.sort();
    Line::header()
        .text("mode", mode)
        .int("rounds", args.rounds)
        .int("cumulative_uploaded_bytes", run.cumulative)
        .num(
            "rounds_sync_ms_median",
            syncs.get(syncs.len() / 2).map_or(0.0, |d| ms(*d)),
            1,
        )
        .num(
            "rounds_sync_ms_max",
            syncs.last().map_or(0.0, |d| ms(*d)),
            1,
        )
        .note(format!(
            "cp1..cp4: {after_cp4}, rounds: {}",
            run.cumulative - after_cp4
        ))
        .print();
    Ok((run, storage))
}

/// Copies every file of `from` into the new directory `to` with `threads` threads, fsyncing
/// each (what a durable upload to a local directory must do).
fn parallel_copy(from: &Path, to: &Path, threads: usize) -> rockstate::Result<u64> {
    std::fs::create_dir_all(to).map_err(io(to))?;
    let mut files: Vec<(PathBuf, u64)> = std::fs::read_dir(from)
        .map_err(io(from))?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.path(), e.metadata().ok()?.len())))
        .collect();
    files.sort_by_key(|f| std::cmp::Reverse(f.1));
    let total = files.iter().map(|f| f.1).sum();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failed = std::sync::Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((path, _)) = files.get(i) else {
                    return;
                };
                let Some(name) = path.file_name() else { return };
                let dst = to.join(name);
                let r =
                    std::fs::copy(path, &dst).and_then(|_| std::fs::File::open(&dst)?.sync_all());
                if let Err(e) = r {
                    if let Ok(mut f) = failed.lock() {
                        *f = Some(Error::Io {
                            path: dst,
                            source: e,
                        });
                    }
                    return;
                }
            });
        }
    });
    if let Some(e) = failed.into_inner().ok().flatten() {
        return Err(e);
    }
    Ok(total)
}

fn dir_bytes(dir: &Path) -> rockstate::Result<u64> {
    Ok(std::fs::read_dir(dir)
        .map_err(io(dir))?
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum())
}

/// Checkpoints per side in the sync comparison.
const SYNC_SAMPLES: usize = 12;

/// Sync phase vs bare RocksDB checkpoint, interleaved after identical 1% updates. The two
/// alternate which goes first, so neither always runs while the other's flush is still being
/// compacted in the background. Each takes 15–20 ms here, and a compaction finishing a file
/// meanwhile adds several ms to either, so the medians are taken over [`SYNC_SAMPLES`] each.
fn compare_sync(run: &mut Run<'_>, root: &Path) -> rockstate::Result<()> {
    let (mut ours, mut bare) = (Vec::new(), Vec::new());
    for i in 0..SYNC_SAMPLES {
        for turn in 0..2 {
            run.update_random_percent()?;
            if (i + turn) % 2 == 0 {
                let dir = root.join(format!("bare-{i}"));
                let t = Instant::now();
                run.backend.bare_rocksdb_checkpoint(&dir)?;
                bare.push(t.elapsed());
                std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
            } else {
                let stats = run.checkpoint()?;
                ours.push(stats.sync_duration);
            }
        }
    }
    let (o, b) = (median(ours), median(bare));
    Line::header()
        .label("sync:")
        .num("rockstate_ms", ms(o), 2)
        .num("bare_rocksdb_checkpoint_ms", ms(b), 2)
        .num("ratio", o.as_secs_f64() / b.as_secs_f64(), 3)
        .note(format!("median of {SYNC_SAMPLES}, target <= 1.1"))
        .print();
    Ok(())
}

/// Async phase of a full upload vs a plain parallel copy of the same files.
fn compare_async(run: &mut Run<'_>, root: &Path, threads: usize) -> rockstate::Result<()> {
    let (mut ours, mut plain) = (Vec::new(), Vec::new());
    let mut bytes = 0;
    for i in 0..3 {
        let src = root.join(format!("plain-src-{i}"));
        run.backend.bare_rocksdb_checkpoint(&src)?;
        let dst = root.join(format!("plain-dst-{i}"));
        let t = Instant::now();
        bytes = parallel_copy(&src, &dst, threads)?;
        plain.push(t.elapsed());
        std::fs::remove_dir_all(&dst).map_err(io(&dst))?;
        std::fs::remove_dir_all(&src).map_err(io(&src))?;
        let stats = run.checkpoint()?;
        ours.push(stats.async_duration);
    }
    let (o, p) = (median(ours), median(plain));
    Line::header()
        .label("async (full upload):")
        .num("rockstate_ms", ms(o), 1)
        .num("plain_parallel_copy_ms", ms(p), 1)
        .int("bytes", bytes)
        .int("threads", threads as u64)
        .num("ratio", o.as_secs_f64() / p.as_secs_f64(), 3)
        .note("median of 3, target <= 1.2")
        .print();
    Ok(())
}

/// Restore of the last checkpoint vs `cp -r` of the same files.
fn compare_restore(
    storage: &Arc<dyn CheckpointStorage>,
    run: &Run<'_>,
    root: &Path,
    budget: &MemoryBudget,
) -> rockstate::Result<()> {
    let src = root.join("cp-src");
    run.backend.bare_rocksdb_checkpoint(&src)?;
    let bytes = dir_bytes(&src)?;
    let (mut ours, mut cp) = (Vec::new(), Vec::new());
    for i in 0..3 {
        let dst = root.join(format!("cp-dst-{i}"));
        let t = Instant::now();
        let status = Command::new("cp")
            .arg("-r")
            .arg(&src)
            .arg(&dst)
            .status()
            .map_err(io(&dst))?;
        cp.push(t.elapsed());
        if !status.success() {
            return Err(Error::InvalidOption {
                name: "cp -r",
                detail: format!("exited with {status}"),
            });
        }
        std::fs::remove_dir_all(&dst).map_err(io(&dst))?;
        let target = root.join(format!("restored-{i}"));
        let t = Instant::now();
        let restored = KeyedBackend::builder(&target)
            .memory_budget(budget.clone())
            .checkpoint_storage(storage.clone())
            .checkpoint_options(CheckpointOptions {
                transfer_threads: run.args.threads,
                // Measure the download, not the local copy.
                local_recovery: false,
                ..CheckpointOptions::default()
            })
            .restore(RestoreFrom::Latest)?;
        ours.push(t.elapsed());
        drop(restored);
        std::fs::remove_dir_all(&target).map_err(io(&target))?;
    }
    let (o, c) = (median(ours), median(cp));
    Line::header()
        .label("restore:")
        .num("rockstate_ms", ms(o), 1)
        .num("cp_r_ms", ms(c), 1)
        .int("bytes", bytes)
        .num("throughput_ratio", c.as_secs_f64() / o.as_secs_f64(), 3)
        .note("median of 3, target >= 0.8")
        .print();
    std::fs::remove_dir_all(&src).map_err(io(&src))?;
    Ok(())
}

/// Changelog mode's restore (materialization + replay) vs SST-only restores of the same
/// state:
/// * `sst_only`: the restored backend checkpoints its files, changelog off, into a second
///   storage, and that checkpoint is restored. Its files are those the changelog restore left
///   (the materialization's and the log tables): the restore raises its level-0 stall
///   triggers above them, so the copy's checkpoint does not wait until compaction merged them
///   (docs/decisions/0038-ingested-level-0-files-do-not-stall-writes.md).
/// * `incremental` (with `--mode all`): the incremental run's last checkpoint. Both runs put
///   the same values from the same seeded generator, so it holds the same state, in the
///   files the same job keeps with changelog mode off.
fn compare_changelog_restore(
    storage: &Arc<dyn CheckpointStorage>,
    incremental: Option<&Arc<dyn CheckpointStorage>>,
    run: &Run<'_>,
    root: &Path,
    budget: &MemoryBudget,
) -> rockstate::Result<()> {
    // The restoring side reads `--changelog` too (`replay_batch_bytes`); its own
    // checkpoints (the SST-only copy) keep changelog mode off.
    let options = CheckpointOptions {
        transfer_threads: run.args.threads,
        local_recovery: false,
        changelog: ChangelogOptions {
            enabled: false,
            ..crate::bench_ops::parse_override::<ChangelogOptions>(
                "--changelog",
                run.args.changelog.as_deref(),
            )?
        },
        ..CheckpointOptions::default()
    };
    let restore = |storage: &Arc<dyn CheckpointStorage>, target: &Path| {
        let storage = restore_storage(run.args, storage);
        let t = Instant::now();
        let (b, report) = KeyedBackend::builder(target)
            .memory_budget(budget.clone())
            .restore_source(storage)
            .checkpoint_options(options.clone())
            .restore_with_report(RestoreFrom::Latest)?;
        Ok::<_, Error>((b, report, t.elapsed()))
    };
    // The same kind of storage as the log checkpoints', so all restores download alike.
    let sst_storage = storage_named(run.args.storage.as_deref(), root, "sst-of-changelog")?;
    {
        // The same state as files: restored once, checkpointed with changelog off.
        let copy = KeyedBackend::builder(root.join("sst-copy"))
            .memory_budget(budget.clone())
            .restore_source(storage.clone())
            .checkpoint_storage(sst_storage.clone())
            .checkpoint_options(options.clone())
            .restore(RestoreFrom::Latest)?;
        copy.checkpoint(1)?;
        copy.notify_checkpoint_complete(1)?;
    }
    let mut sources: Vec<(&str, &Arc<dyn CheckpointStorage>)> =
        vec![("changelog", storage), ("sst-only", &sst_storage)];
    if let Some(s) = incremental {
        sources.push(("incremental", s));
    }
    let mut took: Vec<Vec<Duration>> = vec![Vec::new(); sources.len()];
    let mut puts: Vec<Vec<Duration>> = vec![Vec::new(); sources.len()];
    let mut rng = SmallRng::seed_from_u64(run.args.seed);
    let value = vec![0x5au8; 100];
    let mut reports: Vec<RestoreReport> = vec![RestoreReport::default(); sources.len()];
    for round in 0..run.args.restores.max(1) {
        for k in 0..sources.len() {
            let i = (round + k) % sources.len();
            let (kind, source) = sources[i];
            let target = root.join(format!("{kind}-restored-{round}"));
            let (b, report, t) = restore(source, &target)?;
            took[i].push(t);
            if run.args.first_puts > 0 {
                let state = b.raw_value_state("bench", CodecId::new("bytes", 1))?;
                let keys: Vec<u64> = (0..run.args.first_puts)
                    .map(|_| rng.random_range(0..run.args.keys))
                    .collect();
                let start = Instant::now();
                for k in keys {
                    state.put(&k.to_be_bytes(), &[], &value)?;
                }
                puts[i].push(start.elapsed());
            }
            reports[i] = report;
            drop(b);
            std::fs::remove_dir_all(&target).map_err(io(&target))?;
        }
    }
    let fetched = |r: &RestoreReport| r.bytes_downloaded + r.bytes_local + r.bytes_shared;
    let medians: Vec<Duration> = took.into_iter().map(median).collect();
    let puts: Vec<Option<Duration>> = puts
        .into_iter()
        .map(|p| (!p.is_empty()).then(|| median(p)))
        .collect();
    let report = &reports[0];
    let mut line = Line::header()
        .label("restore (changelog):")
        .num("changelog_ms", ms(medians[0]), 1)
        .num("sst_only_ms", ms(medians[1]), 1)
        .num(
            "ratio",
            medians[0].as_secs_f64() / medians[1].as_secs_f64(),
            3,
        );
    if let Some(m) = medians.get(2) {
        line = line.num("incremental_ms", ms(*m), 1).num(
            "ratio_incremental",
            medians[0].as_secs_f64() / m.as_secs_f64(),
            3,
        );
    }
    line = line
        .int(
            "changelog_bytes",
            fetched(report) + report.log_table_bytes + report.log_bytes,
        )
        .int("sst_only_bytes", fetched(&reports[1]));
    if let Some(r) = reports.get(2) {
        line = line.int("incremental_bytes", fetched(r));
    }
    for (name, p) in ["changelog", "sst_only", "incremental"].iter().zip(&puts) {
        if let Some(p) = p {
            line = line.num(&format!("{name}_first_puts_ms"), ms(*p), 1);
        }
    }
    line.int("log_tables", report.log_tables as u64)
        .int("log_table_bytes", report.log_table_bytes)
        .int("log_segments", report.log_segments as u64)
        .int("log_batches", report.log_batches as u64)
        .int("log_bytes", report.log_bytes)
        .int("entries_replayed", report.log_entries_replayed)
        .note(format!(
            "medians of {}, kinds in turn; first_puts: {} puts right after each restore; \
             target ratio <= 1.5",
            run.args.restores.max(1),
            run.args.first_puts
        ))
        .print();
    Ok(())
}

/// Runs the benchmark.
pub fn run(args: &CheckpointArgs) -> rockstate::Result<()> {
    let tmp = std::env::temp_dir();
    let dir = tempfile::tempdir_in(&tmp).map_err(io(&tmp))?;
    let root = dir.path();
    let budget = MemoryBudget::new(MemoryBudgetConfig::default())?;
    Line::header()
        .label("bench checkpoint:")
        .int("keys", args.keys)
        .int("value_bytes", args.value_bytes as u64)
        .int("rounds", args.rounds)
        .int("threads", args.threads as u64)
        .text(
            "storage",
            format!(
                "{} in {}",
                args.storage.as_deref().unwrap_or("LocalStorage (fsync)"),
                root.display()
            ),
        )
        .print();
    let mut series = Vec::new();
    let mut incremental = None;
    if matches!(args.mode, Mode::Incremental | Mode::Both | Mode::All) {
        let (mut run, storage) = workload(args, root, "incremental", &budget)?;
        series.push(("incremental", run.uploaded.clone()));
        compare_sync(&mut run, root)?;
        compare_restore(&storage, &run, root, &budget)?;
        incremental = Some(storage);
    }
    if matches!(args.mode, Mode::Full | Mode::Both | Mode::All) {
        let (mut run, _storage) = workload(args, root, "full", &budget)?;
        series.push(("full", run.uploaded.clone()));
        compare_async(&mut run, root, args.threads)?;
    }
    if matches!(args.mode, Mode::Changelog | Mode::All) {
        let (run, storage) = workload(args, root, "changelog", &budget)?;
        series.push(("changelog", run.uploaded.clone()));
        compare_changelog_restore(&storage, incremental.as_ref(), &run, root, &budget)?;
    }
    if let Some(path) = &args.svg {
        std::fs::write(path, crate::chart::uploaded_per_checkpoint(&series)).map_err(io(path))?;
        Line::header()
            .label("chart:")
            .text("svg", path.display().to_string())
            .print();
    }
    Ok(())
}

//! A crash loop as an outside harness runs it against the crate: a job process (this test
//! binary re-executed as a child) runs a `Coordinator` (`retained: 2`) and P keyed tasks that
//! restore `RestoreFrom::Latest` through the job records into fresh working directories
//! `tm/task-<i>` (removed first, as a harness gives each attempt new ones) under one stable
//! staging root `tm/.rockstate-staging` (so local recovery can find its copies), write random
//! state, checkpoint, and are killed with SIGKILL at random moments: during the restore
//! (downloads, ingestion, log replay), writes, snapshot, upload, commit, notification. The
//! parallelism follows a schedule (rescale 1 -> 2 -> 1 ...). After every kill the parent
//! checks storage verifies and stays bounded, and the local disk under `tm/` stays bounded;
//! every child checks its restore equals the model logged for the restored checkpoint.

#![allow(dead_code)]

#[path = "../checkpoint_common/mod.rs"]
pub mod common;

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::crash::{read_model, write_model};
use common::process::spawn_child;
use common::*;
use rand::Rng;
use rockstate::catalog::Catalog;
use rockstate::coordinator::{
    latest_job_checkpoint, task_checkpoint, Coordinator, CoordinatorConfig, Outcome, Triggered,
};
use rockstate::{
    ChangelogOptions, CheckpointOptions, CheckpointStorage, KeyGroupRange, KeyedBackend,
    RestoreFrom, SystemClock,
};

pub const CHILD_ENV: &str = "ROCKSTATE_CRASH_LOOP_CHILD";
pub const MAX_PARALLELISM: u32 = 64;
const READY: &str = "LOOP-CHILD-READY";
const PHASE: &str = "PHASE ";
const COMPLETED: &str = "COMPLETED ";
const RETAINED: usize = 2;

#[derive(Clone, Copy, Debug)]
pub struct Mode {
    pub changelog: bool,
    pub local_recovery: bool,
}

fn phase(p: &str) {
    println!("{PHASE}{p}");
    std::io::stdout().flush().unwrap();
}

pub const S3_ENV: &str = "ROCKSTATE_CRASH_LOOP_S3";

/// A soak run's seed (`ROCKSTATE_CRASH_LOOP_SEED`, default 0), added to every seed the loop
/// and its children draw from, so a longer run explores other kill moments and workloads.
const SEED_ENV: &str = "ROCKSTATE_CRASH_LOOP_SEED";
/// A soak run's cycle count (`ROCKSTATE_CRASH_LOOP_CYCLES`), in place of each test's own.
const CYCLES_ENV: &str = "ROCKSTATE_CRASH_LOOP_CYCLES";

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a number")),
    )
}

/// The soak run's seed, spread (0 when `ROCKSTATE_CRASH_LOOP_SEED` is not set).
pub fn soak_seed() -> u64 {
    env_u64(SEED_ENV).map_or(0, |s| s.wrapping_mul(1_000_003))
}

/// `work/storage`, or the S3 storage `ROCKSTATE_CRASH_LOOP_S3` names (`<endpoint> <url>`).
fn storage(work: &Path) -> Arc<dyn CheckpointStorage> {
    common::crash::storage_at(work, std::env::var(S3_ENV).ok().as_deref())
}

fn opts(mode: Mode) -> CheckpointOptions {
    CheckpointOptions {
        retained: RETAINED,
        transfer_threads: 2,
        local_recovery: mode.local_recovery,
        changelog: ChangelogOptions {
            enabled: mode.changelog,
            materialize_log_percent: 30,
            materialize_min_log_bytes: 0,
            table_bytes: 16 << 10,
            ..ChangelogOptions::default()
        },
        ..CheckpointOptions::default()
    }
}

pub fn task_dir(work: &Path, i: u32) -> PathBuf {
    work.join("tm").join(format!("task-{i}"))
}

fn builder(
    work: &Path,
    st: &Arc<dyn CheckpointStorage>,
    mode: Mode,
    p: u32,
    i: u32,
) -> rockstate::BackendBuilder {
    KeyedBackend::builder(task_dir(work, i))
        .options(small_options())
        .max_parallelism(MAX_PARALLELISM)
        .key_groups(KeyGroupRange::for_operator(MAX_PARALLELISM, p, i).unwrap())
        .checkpoint_storage(Arc::clone(st))
        .checkpoint_options(opts(mode))
}

/// The child: runs the job until killed. Panics (a failure the parent reports) if a restore
/// fails or restores anything but the model of the newest record.
pub fn child_main() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let work = Path::new(parts[0]);
    let gen: u64 = parts[1].parse().unwrap();
    let p: u32 = parts[2].parse().unwrap();
    let mode = Mode {
        changelog: parts[3] == "1",
        local_recovery: parts[4] == "1",
    };
    let st = storage(work);
    let mut r = rng(soak_seed().wrapping_add(9000 + gen));
    let mut config = CoordinatorConfig::new("loop-job", p, MAX_PARALLELISM);
    config.sources = (0..p).collect();
    config.retained = RETAINED;
    let mut coord = Coordinator::new(config, st.clone(), Arc::new(SystemClock)).unwrap();
    let owner = coord.owner().clone();
    let endpoints: Vec<_> = (0..p).map(|t| coord.endpoint(t).unwrap()).collect();
    phase("restore");
    // Killed during the restore: SIGKILL from a thread of its own after a random time (the
    // parent's own scheduling on a loaded machine is too coarse for a restore of ~50 ms).
    if let Some(us) = parts.get(5).and_then(|u| u.parse::<u64>().ok()) {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_micros(us));
            // SAFETY: kill(2) on this process.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        });
    }
    let t0 = std::time::Instant::now();
    let restored = latest_job_checkpoint(st.as_ref())
        .unwrap()
        .map(|r| r.checkpoint_id);
    // Fresh working directories for this attempt (every task index a run may have used).
    for i in 0..4 {
        let _ = fs::remove_dir_all(task_dir(work, i));
    }
    let handles: Vec<_> = (0..p)
        .map(|i| {
            let b = builder(work, &st, mode, p, i).job_owner(owner.clone());
            std::thread::spawn(move || match restored {
                Some(_) => b.restore_with_report(RestoreFrom::Latest).map(|(b, rep)| {
                    eprintln!(
                        "task {i} restored {} as {}: local {} downloaded {} shared {}",
                        rep.checkpoint,
                        &b.backend_id()[..6],
                        rep.files_local,
                        rep.files_downloaded,
                        rep.files_shared
                    );
                    b
                }),
                None => b.open(),
            })
        })
        .collect();
    let backends: Vec<KeyedBackend> = handles
        .into_iter()
        .enumerate()
        .map(|(i, h)| {
            h.join()
                .unwrap()
                .unwrap_or_else(|e| panic!("gen {gen} task {i} restore of {restored:?}: {e:?}"))
        })
        .collect();
    phase("restored");
    eprintln!("task * restore took {:?}", t0.elapsed());
    let mut model = match restored {
        Some(id) => {
            for b in &backends {
                assert_eq!(b.last_completed_checkpoint(), Some(id), "gen {gen}");
            }
            read_model(work, id)
        }
        None => Model::new(),
    };
    let got: Model = backends.iter().flat_map(read_all).collect();
    assert_eq!(
        got, model,
        "gen {gen}: restore of {restored:?} at p={p} differs"
    );
    println!("{READY}");
    std::io::stdout().flush().unwrap();
    loop {
        phase("process");
        for b in &backends {
            let n = r.random_range(20..600);
            random_writes(b, &mut model, &mut r, n);
        }
        if r.random_ratio(1, 6) {
            backends[r.random_range(0..backends.len())]
                .compact_state("v")
                .unwrap();
        }
        let Triggered::Started(id) = coord.trigger().unwrap() else {
            panic!("a trigger with nothing in flight must start");
        };
        write_model(work, id, &model);
        phase("snapshot");
        let pending: Vec<_> = backends.iter().map(|b| b.snapshot(id).unwrap()).collect();
        phase("upload");
        let uploads: Vec<_> = pending
            .into_iter()
            .map(|s| std::thread::spawn(move || s.upload()))
            .collect();
        let stats: Vec<_> = uploads
            .into_iter()
            .map(|u| u.join().unwrap().unwrap())
            .collect();
        if stats.iter().any(|s| s.materialized) && mode.changelog {
            phase("upload-materialized");
        }
        for (t, (b, s)) in backends.iter().zip(&stats).enumerate() {
            endpoints[t].ack(id, task_checkpoint(t as u32, Some((b, s)), Vec::new()));
        }
        phase("commit");
        if let Outcome::Completed(rec) = common::crash::next_outcome(&mut coord) {
            println!("{COMPLETED}{}", rec.checkpoint_id);
            std::io::stdout().flush().unwrap();
        }
        phase("notify");
        common::crash::deliver_commands(&endpoints, &backends);
    }
}

/// What lies on local disk under `dir`: bytes of distinct inodes, and the names (relative)
/// of directories two levels under the staging root (`<backend>/<entry>`).
pub struct Disk {
    pub bytes: u64,
    pub files: usize,
    pub staging_backends: usize,
    pub staging_entries: Vec<String>,
}

pub fn disk(tm: &Path) -> Disk {
    let mut seen = HashSet::new();
    let mut bytes = 0;
    let mut files = 0;
    let mut stack = vec![tm.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let Ok(md) = fs::symlink_metadata(e.path()) else {
                continue;
            };
            if md.is_dir() {
                stack.push(e.path());
            } else if seen.insert((md.dev(), md.ino())) {
                bytes += md.len();
                files += 1;
            }
        }
    }
    let staging = tm.join(".rockstate-staging");
    let mut staging_backends = 0;
    let mut staging_entries = Vec::new();
    for b in fs::read_dir(&staging).into_iter().flatten().flatten() {
        staging_backends += 1;
        for e in fs::read_dir(b.path()).into_iter().flatten().flatten() {
            staging_entries.push(format!(
                "{}/{}",
                &b.file_name().to_string_lossy()[..6],
                e.file_name().to_string_lossy()
            ));
        }
    }
    staging_entries.sort();
    Disk {
        bytes,
        files,
        staging_backends,
        staging_entries,
    }
}

/// The schedule of the rescaling loops: parallelism 1, 1, 2, 2, 1, 1, ... (a split, then a
/// merge, every four cycles).
pub fn one_two_one(cycle: u64) -> u32 {
    [1, 1, 2, 2][(cycle % 4) as usize]
}

/// The loop of the S3 tests: changelog mode with local recovery, rescaling 1 -> 2 -> 1, 12
/// cycles, on the S3 storage `spec` names (`<endpoint> <url>`; set in the environment, so the
/// children inherit it: one such loop per test binary).
pub fn s3_crash_loop(spec: String) {
    std::env::set_var(S3_ENV, spec);
    crash_loop(
        "loop_child",
        Mode {
            changelog: true,
            local_recovery: true,
        },
        12,
        one_two_one,
        2500,
        200,
    );
}

/// Runs `cycles` children of `test` (the ignored test calling [`child_main`]) at the
/// parallelism `schedule(cycle)`, each killed within `max_delay_ms` of being ready (one in
/// four within that time of being started: during its restore).
pub fn crash_loop(
    test: &str,
    mode: Mode,
    cycles: u64,
    schedule: impl Fn(u64) -> u32,
    max_delay_ms: u64,
    restore_delay_ms: u64,
) {
    let work_dir = tempfile::tempdir().unwrap();
    let work = work_dir.path();
    let mut r =
        rng(soak_seed().wrapping_add(31 + mode.changelog as u64 * 2 + mode.local_recovery as u64));
    let cycles = env_u64(CYCLES_ENV).unwrap_or(cycles);
    let mut acknowledged = 0u64;
    let mut phases: BTreeMap<String, u32> = BTreeMap::new();
    let mut live_max = 0u64;
    let mut disk_max_early = 0u64;
    let mut entries_max_early = 0usize;
    let mut failures = Vec::new();
    for cycle in 0..cycles {
        let p = schedule(cycle);
        let stderr_path = work.join(format!("child-{cycle}.stderr"));
        let during_restore = cycle % 4 == 2;
        let self_kill = if during_restore {
            format!("|{}", r.random_range(0..restore_delay_ms * 1000))
        } else {
            String::new()
        };
        let mut child = spawn_child(
            test,
            (
                CHILD_ENV,
                format!(
                    "{}|{cycle}|{p}|{}|{}{self_kill}",
                    work.display(),
                    mode.changelog as u8,
                    mode.local_recovery as u8
                ),
            ),
            S3_ENV,
            std::env::var(S3_ENV).ok().as_deref(),
            &stderr_path,
        );
        let stdout = child.stdout.take().unwrap();
        let last_phase = Arc::new(Mutex::new(String::from("start")));
        let completed = Arc::new(Mutex::new(0u64));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let reader = {
            let (last_phase, completed) = (last_phase.clone(), completed.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
                    if line.contains(READY) {
                        let _ = ready_tx.send(());
                    } else if let Some(at) = line.find(PHASE) {
                        // The first line follows libtest's "test <name> ... " on one line.
                        *last_phase.lock().unwrap() = line[at + PHASE.len()..].to_string();
                    } else if let Some(id) = line.strip_prefix(COMPLETED) {
                        *completed.lock().unwrap() = id.parse().unwrap();
                    }
                }
            })
        };
        if during_restore {
            // It kills itself (see `child_main`); a child that restored first dies in its loop.
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
        } else {
            if ready_rx.recv_timeout(Duration::from_secs(60)).is_err() {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "cycle {cycle} (p={p}): child not ready: {}",
                    fs::read_to_string(&stderr_path).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(r.random_range(0..max_delay_ms)));
        }
        let _ = child.kill();
        let status = child.wait().unwrap();
        reader.join().unwrap();
        let phase = last_phase.lock().unwrap().clone();
        // The backends this run restored (6-hex prefixes of their ids).
        let mut restored_as = Vec::new();
        let mut restored_checkpoint = None;
        for l in fs::read_to_string(&stderr_path)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("task "))
        {
            println!("  {l}");
            if let Some(at) = l.find(" as ") {
                restored_as.push(l[at + 4..at + 10].to_string());
            }
            if let Some(id) = l
                .split_once(" restored chk-")
                .and_then(|(_, rest)| rest.split_once('/'))
                .and_then(|(id, _)| id.parse::<u64>().ok())
            {
                restored_checkpoint = Some(id);
            }
        }
        if status.code().is_some() {
            let err = fs::read_to_string(&stderr_path).unwrap_or_default();
            let tail: String = err
                .lines()
                .filter(|l| l.contains("panicked") || l.contains("Error") || l.contains("restore"))
                .take(6)
                .collect::<Vec<_>>()
                .join("\n");
            println!("cycle {cycle}: CHILD FAILED BY ITSELF in {phase} ({status}):\n{tail}");
            failures.push(format!("cycle {cycle} p={p} in {phase}: {tail}"));
            assert!(
                failures.len() < 3,
                "children keep failing: {failures:#?}\nlast stderr:\n{err}"
            );
        }
        *phases.entry(phase.clone()).or_default() += 1;
        acknowledged = acknowledged.max(*completed.lock().unwrap());

        let st = storage(work);
        assert_verified(st.as_ref());
        let f = Catalog::load(st.as_ref()).unwrap().footprint(RETAINED);
        let newest = latest_job_checkpoint(st.as_ref())
            .unwrap()
            .map(|r| r.checkpoint_id);
        let d = disk(&work.join("tm"));
        let marked = (0..4)
            .filter(|i| {
                task_dir(work, *i)
                    .join(".rockstate-restore-incomplete")
                    .exists()
            })
            .count();
        if marked > 0 {
            *phases.entry("restore, marker left".into()).or_default() += 1;
        }
        println!(
            "cycle {cycle:>3} p={p} killed in {phase:<20} newest {newest:?} storage {} B \
             (retained {} B, newer {} B, garbage {} B ids {:?}) local disk {} B in {} files, \
             staging backends {}: {:?}",
            f.total_bytes,
            f.retained_bytes,
            f.newer_bytes,
            f.garbage_bytes,
            f.garbage_ids,
            d.bytes,
            d.files,
            d.staging_backends,
            d.staging_entries
        );
        assert!(
            newest.unwrap_or(0) >= acknowledged,
            "cycle {cycle}: newest record {newest:?} older than completed {acknowledged}"
        );
        live_max = live_max.max(f.retained_bytes);
        assert!(
            f.within_bound(live_max) && (live_max == 0 || f.newer_bytes <= 2 * live_max),
            "cycle {cycle}: storage grows: {f:?}"
        );
        // Once every task of a run restored, the local copies of every earlier run's
        // backends are retired (the sources' other copies by `retire_others` or
        // `retire_backend`, the others' by `retire_unused`) but for the copies the
        // restore took files from, which its backends keep for a restart that dies before
        // they complete a checkpoint: one per earlier backend at most, of the restored
        // checkpoint itself (plain) or of a materialization at or below it (changelog).
        if restored_as.len() == p as usize {
            let earlier: Vec<(&str, u64)> = d
                .staging_entries
                .iter()
                .filter(|e| !restored_as.iter().any(|b| e.starts_with(b.as_str())))
                .filter_map(|e| {
                    let (backend, copy) = e.split_once("/local-")?;
                    Some((backend, copy.parse().ok()?))
                })
                .collect();
            let restored_id = restored_checkpoint.unwrap_or(0);
            let kept = |&&(_, id): &&(&str, u64)| {
                (mode.local_recovery && id == restored_id)
                    || (mode.local_recovery && mode.changelog && id < restored_id)
            };
            let mut backends: Vec<&str> = earlier.iter().map(|(b, _)| *b).collect();
            backends.sort_unstable();
            backends.dedup();
            assert!(
                earlier.iter().all(|c| kept(&c)) && backends.len() == earlier.len(),
                "cycle {cycle}: after every task restored checkpoint {restored_id} (as \
                 {restored_as:?}), the staging root still holds local copies of earlier runs' \
                 backends that no restore uses: {earlier:?}"
            );
        }
        if cycle < cycles / 3 {
            disk_max_early = disk_max_early.max(d.bytes);
            entries_max_early = entries_max_early.max(d.staging_entries.len());
        } else {
            // Beyond the first third's most: the directory (lock and copy) each task keeps of
            // the backend it restored from after a run that died before it completed a
            // checkpoint, which the first third may not have seen (its copies are checked
            // above).
            assert!(
                d.staging_entries.len() <= entries_max_early.max(4) + 4 + 2 * p as usize,
                "cycle {cycle}: local staging grows with the cycles: {} entries now, at most \
                 {entries_max_early} in the first third: {:?}",
                d.staging_entries.len(),
                d.staging_entries
            );
            assert!(
                d.bytes <= 3 * disk_max_early.max(1 << 20),
                "cycle {cycle}: local disk grows with the cycles: {} B now, at most \
                 {disk_max_early} B in the first third",
                d.bytes
            );
        }
    }
    println!("kills by phase: {phases:?}");
    assert!(
        failures.is_empty(),
        "children failed by themselves: {failures:#?}"
    );
    // The last word: one more restore at p=1, in a fresh directory, must give the model.
    let st = storage(work);
    if let Some(newest) = latest_job_checkpoint(st.as_ref())
        .unwrap()
        .map(|r| r.checkpoint_id)
    {
        let target = work.join("final");
        let b = KeyedBackend::builder(&target)
            .options(small_options())
            .max_parallelism(MAX_PARALLELISM)
            .key_groups(KeyGroupRange::for_operator(MAX_PARALLELISM, 1, 0).unwrap())
            .checkpoint_storage(st.clone())
            .checkpoint_options(CheckpointOptions {
                local_recovery: false,
                ..opts(mode)
            })
            .job_coordinated()
            .restore(RestoreFrom::Latest)
            .unwrap();
        assert_eq!(
            read_all(&b),
            read_model(work, newest),
            "final restore of {newest}"
        );
    } else {
        panic!("no checkpoint ever completed");
    }
}

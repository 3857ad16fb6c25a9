//! Crash test (docs/architecture.md §8, invariants 1–4): a child process (this test binary
//! re-executed) restores the latest checkpoint, then checkpoints in a loop with random writes,
//! random missing/aborted notifications, compactions and sweeps, and is killed with SIGKILL at a
//! random moment (sync phase, upload, manifest write, completion, GC, sweep). After every kill the
//! parent checks that
//! * every committed manifest references only files that exist with the recorded size and
//!   CRC-32 (invariant 1),
//! * restoring the latest checkpoint yields exactly the model state the child logged for that
//!   checkpoint id before committing it (invariant 4),
//! * garbage stays within what one interrupted garbage pass leaves, without any sweep
//!   (bounded storage, `docs/ownership.md` §3 rule 5),
//! * after a sweep with minimum age 0 no unreferenced shared file remains (invariant 3).
//!
//! The trials chain: each child restores what the previous one left, so restores of restored
//! backends and cross-generation GC are exercised too. `ROCKSTATE_CRASH_TRIALS`
//! overrides the number of trials (default 50).
//!
//! The same test runs against the S3 test server (`s3::crash_at_random_moments`): the parent
//! starts the server and a bucket and passes endpoint and URL to every child in
//! `ROCKSTATE_CRASH_S3`; the server lives as long as the parent. The server is slow, so
//! there are fewer trials (default 10, `ROCKSTATE_CRASH_TRIALS_S3`) and the kill lands within
//! 1.2 s instead of 0.4 s of the child being ready.
//!
//! `changelog::crash_at_random_moments` runs the children in changelog mode (materializing
//! when the log passes 30 % of the state, so both kinds of checkpoint occur), and kills a
//! third of them before they are ready: during the restore, the log replay included.
#[path = "checkpoint_common/mod.rs"]
mod common;

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::time::Duration;

use common::crash::{self, read_model, storage_at, write_model};
use common::process::spawn_child;
use common::*;
use rand::Rng;
use rockstate::{CheckpointOptions, CheckpointStorage, KeyedBackend, RestoreFrom};

const CHILD_ENV: &str = "ROCKSTATE_CRASH_CHILD";
/// `<endpoint> <s3 url>` of the S3 storage the child uses; unset for local storage.
const S3_ENV: &str = "ROCKSTATE_CRASH_S3";
const READY: &str = "ROCKSTATE-CHILD-READY";

fn has_checkpoint(storage: &dyn CheckpointStorage) -> bool {
    newest_committed(storage).is_some()
}

/// The newest completed checkpoint (job record).
fn newest_committed(storage: &dyn CheckpointStorage) -> Option<u64> {
    rockstate::coordinator::list_job_checkpoints(storage)
        .unwrap()
        .last()
        .copied()
}

/// The child: runs until killed.
fn child_loop(work: &Path, seed: u64, s3: Option<&str>, changelog: bool) -> ! {
    let storage = storage_at(work, s3);
    let mut r = rng(seed);
    let opts = CheckpointOptions {
        retained: 1 + (seed % 2) as usize,
        transfer_threads: 1 + (seed % 4) as usize,
        changelog: rockstate::ChangelogOptions {
            enabled: changelog,
            materialize_log_percent: 30,
            materialize_min_log_bytes: 0,
            ..rockstate::ChangelogOptions::default()
        },
        ..CheckpointOptions::default()
    };
    let dir = work.join(format!("gen-{seed}"));
    let builder = KeyedBackend::builder(&dir)
        .options(small_options())
        .checkpoint_storage(storage.clone())
        .checkpoint_options(opts);
    let (backend, mut model, mut next) = if has_checkpoint(storage.as_ref()) {
        let b = builder.restore(RestoreFrom::Latest).unwrap();
        let id = b.last_completed_checkpoint().unwrap();
        let model = read_model(work, id);
        assert_eq!(read_all(&b), model, "child restore of {id}");
        (b, model, id + 1)
    } else {
        (builder.open().unwrap(), Model::new(), 1)
    };
    println!("{READY}");
    std::io::stdout().flush().unwrap();
    loop {
        let n = r.random_range(50..1500);
        random_writes(&backend, &mut model, &mut r, n);
        if r.random_ratio(1, 8) {
            backend.compact_state("v").unwrap();
        }
        write_model(work, next, &model);
        let pending = backend.snapshot(next).unwrap();
        let stats = std::thread::spawn(move || pending.upload())
            .join()
            .unwrap()
            .unwrap();
        assert_eq!(stats.checkpoint_id, next);
        match r.random_range(0..20) {
            0 => backend.notify_checkpoint_aborted(next).unwrap(),
            1 | 2 => {} // missing notification
            _ => backend.notify_checkpoint_complete(next).unwrap(),
        }
        if r.random_ratio(1, 6) {
            backend.sweep_orphans(Duration::ZERO).unwrap();
        }
        next += 1;
    }
}

/// Entry point of the child process; does nothing unless started by the crash test.
#[test]
#[ignore = "child process of crash_at_random_moments"]
fn crash_child() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let mut parts = spec.rsplitn(3, '|');
        let (mode, seed, work) = (parts.next(), parts.next(), parts.next());
        let (Some(mode), Some(seed), Some(work)) = (mode, seed, work) else {
            panic!("bad child spec {spec}");
        };
        let s3 = std::env::var(S3_ENV).ok();
        child_loop(
            Path::new(work),
            seed.parse().unwrap(),
            s3.as_deref(),
            mode == "changelog",
        );
    }
}

mod local {
    #[test]
    fn crash_at_random_moments() {
        super::crash_at_random_moments(None, "ROCKSTATE_CRASH_TRIALS", 50, 400, false);
    }
}

mod changelog {
    #[test]
    fn crash_at_random_moments() {
        super::crash_at_random_moments(None, "ROCKSTATE_CRASH_TRIALS", 40, 400, true);
    }
}

mod s3 {
    #[test]
    fn crash_at_random_moments() {
        let server = super::common::s3::server();
        let spec = format!("{} {}", server.endpoint, server.bucket_url("crash"));
        super::crash_at_random_moments(Some(&spec), "ROCKSTATE_CRASH_TRIALS_S3", 10, 1200, false);
    }
}

/// `trials` (or the number in env var `trials_env`) children on the storage `s3` names (see
/// [`storage_at`]), each killed within `max_delay_ms` of being ready; in changelog mode a
/// third of them within `max_delay_ms` of starting instead.
fn crash_at_random_moments(
    s3: Option<&str>,
    trials_env: &str,
    trials: u64,
    max_delay_ms: u64,
    changelog: bool,
) {
    let trials = crash::trials(trials_env, trials);
    let work_dir = tempfile::tempdir().unwrap();
    let work = work_dir.path();
    let mut r = rng(40);
    let mut restores = 0;
    let mut live_max = 0u64;
    for trial in 0..trials {
        let stderr_path = work.join(format!("child-{trial}.stderr"));
        let mut child = spawn_child(
            "crash_child",
            (
                CHILD_ENV,
                format!(
                    "{}|{trial}|{}",
                    work.display(),
                    if changelog { "changelog" } else { "files" }
                ),
            ),
            S3_ENV,
            s3,
            &stderr_path,
        );
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // Killed during its restore (replay included), or in its checkpoint loop.
        if !(changelog && trial % 3 == 1) {
            let ready = lines.any(|l| l.map(|l| l.contains(READY)).unwrap_or(false));
            assert!(
                ready,
                "trial {trial}: child exited before it was ready: {}",
                fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        // The kill lands anywhere in the checkpoint loop.
        std::thread::sleep(Duration::from_millis(r.random_range(0..max_delay_ms)));
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(
            status.code().is_none(),
            "trial {trial}: child failed by itself ({status}): {}",
            fs::read_to_string(&stderr_path).unwrap_or_default()
        );
        drop(lines);

        let storage = storage_at(work, s3);
        // Invariant 1 for every committed manifest.
        assert_verified(storage.as_ref());
        // Bounded storage without any sweep: only an interrupted pass's garbage is left.
        let f = rockstate::catalog::Catalog::load(storage.as_ref())
            .unwrap()
            .footprint(2);
        println!(
            "trial {trial:>3}: storage {} B (retained {} B, newer {} B, garbage {} B of {:?}), \
             {} job records",
            f.total_bytes,
            f.retained_bytes,
            f.newer_bytes,
            f.garbage_bytes,
            f.garbage_ids,
            f.records
        );
        live_max = live_max.max(f.retained_bytes);
        assert!(
            f.within_bound(live_max),
            "trial {trial}: garbage accumulates: {:?} in {:#?}",
            f,
            storage
                .list("")
                .unwrap()
                .into_iter()
                .map(|o| o.name)
                .collect::<Vec<_>>()
        );
        let Some(newest) = newest_committed(storage.as_ref()) else {
            continue;
        };
        // Invariant 4 for the newest committed checkpoint.
        let target = work.join(format!("verify-{trial}"));
        let restored = restore_from(storage.clone(), &target, RestoreFrom::Latest).unwrap();
        assert_eq!(restored.last_completed_checkpoint(), Some(newest));
        assert_eq!(
            read_all(&restored),
            read_model(work, newest),
            "trial {trial} checkpoint {newest}"
        );
        restores += 1;
        // Invariant 3 after a sweep (every fifth trial: the others show the bound holds
        // without one).
        if trial % 5 == 4 {
            restored.sweep_orphans(Duration::ZERO).unwrap();
            let unreferenced = assert_verified(storage.as_ref());
            assert!(unreferenced.is_empty(), "trial {trial}: {unreferenced:?}");
        }
        drop(restored);
        let _ = fs::remove_dir_all(&target);
        let _ = fs::remove_dir_all(work.join(format!("gen-{trial}")));
        // A restore killed midway leaves its scratch space (other sources, the log's SSTs)
        // inside its target, which the next restore into it clears: nothing beside it.
        let beside: Vec<String> = fs::read_dir(work)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".rockstate-replay-") || n.starts_with(".rockstate-rescale-"))
            .collect();
        assert!(beside.is_empty(), "trial {trial}: {beside:?}");
    }
    assert!(
        restores * 2 >= trials,
        "only {restores} of {trials} trials had a checkpoint"
    );
}

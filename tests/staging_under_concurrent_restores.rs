//! A job of P tasks in one process, restarted on the same machine again and again (each run
//! ends without `close`, as a killed process does: its staging locks go with it), every run
//! restoring `RestoreFrom::Latest` with its tasks restoring at once (one thread each, as an
//! engine starts its tasks), local recovery on. After every restart:
//! - every live backend holds its staging lock (`<staging root>/<backend-id>/LOCK`,
//!   docs/ownership.md §3 rule 9): the lock is what tells every other backend's open
//!   (`clean_staging`) and restore (`retire_unused`, `retire_backend`) that its
//!   snapshots, changelog segments and local copies are in use; a concurrent restore that took
//!   a new backend's directory for a dead one's (the lock not yet taken) and removed it left
//!   that backend running unlocked;
//! - no gone backend's local copies remain but those the restores took their files from
//!   (each the local copy of the backend that wrote its checkpoint, whose other copies the
//!   restore retires, `LocalSource::retire_others`), and once a checkpoint completed none at
//!   all (`local_recovery::retire_superseded`); a retire skipped while a sibling checked the
//!   lock left them for good, one more per restart.
//!
//! In changelog mode another backend also opens beside them between their sync phases and
//! uploads (a task of another operator on this machine): it must take none of them for a
//! gone one (an unlocked backend lost its snapshot and changelog segments to such an open,
//! and could never checkpoint again), so every upload succeeds.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use rockstate::coordinator::{
    latest_job_checkpoint, task_checkpoint, Coordinator, CoordinatorConfig, Outcome, TaskCommand,
    Triggered,
};
use rockstate::{
    CheckpointOptions, CheckpointStorage, KeyGroupRange, KeyedBackend, LocalStorage, RestoreFrom,
    SystemClock,
};

const P: u32 = 16;
const MAXP: u32 = 64;

fn staging_backends(tm: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(tm.join(".rockstate-staging"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| {
            let sub: Vec<String> = fs::read_dir(e.path())
                .into_iter()
                .flatten()
                .flatten()
                .map(|s| s.file_name().to_string_lossy().into_owned())
                .collect();
            format!("{}: {sub:?}", e.file_name().to_string_lossy())
        })
        .collect();
    v.sort();
    v
}

#[test]
fn concurrent_restores_keep_every_staging_lock_and_no_dead_backends_copies() {
    restarts(false, 45);
}

#[test]
fn in_changelog_mode_a_siblings_open_between_sync_and_upload_takes_nothing() {
    restarts(true, 20);
}

/// `runs` restarts of the job (changelog mode or not), checking after each.
fn restarts(changelog: bool, runs: u32) {
    let work = tempfile::tempdir().unwrap();
    let tm = work.path().join("tm");
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(work.path().join("storage")).unwrap());
    let mut r = rng(5);
    let mut model = Model::new();
    for run in 0..runs {
        let mut config = CoordinatorConfig::new("job", P, MAXP);
        config.sources = (0..P).collect();
        config.retained = 2;
        let mut coord = Coordinator::new(config, storage.clone(), Arc::new(SystemClock)).unwrap();
        let owner = coord.owner().clone();
        let eps: Vec<_> = (0..P).map(|t| coord.endpoint(t).unwrap()).collect();
        let restored = latest_job_checkpoint(storage.as_ref()).unwrap();
        let handles: Vec<_> = (0..P)
            .map(|i| {
                let dir = tm.join(format!("task-{i}"));
                let _ = fs::remove_dir_all(&dir);
                let b = KeyedBackend::builder(dir)
                    .options(small_options())
                    .max_parallelism(MAXP)
                    .key_groups(KeyGroupRange::for_operator(MAXP, P, i).unwrap())
                    .checkpoint_storage(storage.clone())
                    .checkpoint_options(CheckpointOptions {
                        retained: 2,
                        ..match changelog {
                            true => changelog_options(100_000),
                            false => CheckpointOptions::default(),
                        }
                    })
                    .job_owner(owner.clone());
                let restore = restored.is_some();
                std::thread::spawn(move || {
                    if restore {
                        b.restore(RestoreFrom::Latest)
                    } else {
                        b.open()
                    }
                })
            })
            .collect();
        let backends: Vec<KeyedBackend> = handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect();
        let got: Model = backends.iter().flat_map(read_all).collect();
        assert_eq!(got, model, "run {run}");
        for b in &backends {
            let lock = tm
                .join(".rockstate-staging")
                .join(b.backend_id())
                .join("LOCK");
            let free = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock)
                .map(|f| {
                    use std::os::unix::io::AsRawFd;
                    // SAFETY: flock on a descriptor this test owns.
                    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
                })
                .unwrap_or(true);
            assert!(
                !free,
                "run {run}: live backend {} (restored with {} others at once) does not hold its \
                 staging lock {}: {:#?}",
                b.backend_id(),
                P - 1,
                lock.display(),
                staging_backends(&tm)
            );
        }
        // Directories of backends that are gone: each may keep the copy its restored
        // successor took files from (of the restored checkpoint, or in changelog mode of its
        // materialization), for a restart that dies before completing a checkpoint; nothing
        // else (no restore would use it, and nothing would delete it).
        let restored_id = restored.as_ref().map_or(0, |r| r.checkpoint_id);
        let live: Vec<&str> = backends.iter().map(|b| b.backend_id()).collect();
        let gone_copies = |tm: &Path| -> Vec<(String, u64)> {
            let mut out = Vec::new();
            for d in fs::read_dir(tm.join(".rockstate-staging"))
                .into_iter()
                .flatten()
                .flatten()
            {
                let name = d.file_name().to_string_lossy().into_owned();
                if live.contains(&name.as_str()) {
                    continue;
                }
                for c in fs::read_dir(d.path()).into_iter().flatten().flatten() {
                    if let Some(id) = rockstate::checkpoint::layout::parse_local_copy_dir(
                        c.file_name().to_str().unwrap(),
                    ) {
                        out.push((name.clone(), id));
                    }
                }
            }
            out
        };
        let stale: Vec<(String, u64)> = gone_copies(&tm)
            .into_iter()
            .filter(|(_, id)| !(*id == restored_id || (changelog && *id < restored_id)))
            .collect();
        let per_backend = gone_copies(&tm).len();
        let mut gone: Vec<String> = gone_copies(&tm).into_iter().map(|(b, _)| b).collect();
        gone.dedup();
        assert!(
            stale.is_empty() && gone.len() == per_backend,
            "run {run}: restored checkpoint {restored_id}; the staging root keeps local copies \
             of dead backends no restore uses: {stale:#?}\n{:#?}",
            staging_backends(&tm)
        );
        // One completed checkpoint per run, then the process "dies" (no close).
        for b in &backends {
            random_writes(b, &mut model, &mut r, 300);
        }
        let Triggered::Started(id) = coord.trigger().unwrap() else {
            panic!()
        };
        let pending: Vec<_> = backends.iter().map(|b| b.snapshot(id).unwrap()).collect();
        if changelog {
            // Another backend opens beside them on this machine.
            let other = KeyedBackend::builder(tm.join(format!("other-operator-{run}")))
                .options(small_options())
                .checkpoint_storage(Arc::new(
                    LocalStorage::new(work.path().join("other-storage")).unwrap(),
                ))
                .open()
                .unwrap();
            other.close().unwrap();
        }
        let stats: Vec<_> = pending
            .into_iter()
            .map(|p| {
                p.upload()
                    .unwrap_or_else(|e| panic!("run {run}: upload: {e:?}"))
            })
            .collect();
        for (t, (b, s)) in backends.iter().zip(&stats).enumerate() {
            eps[t].ack(id, task_checkpoint(t as u32, Some((b, s)), vec![]));
        }
        let out = loop {
            let o = coord.wait(Duration::from_millis(50)).unwrap();
            if !o.is_empty() {
                break o;
            }
        };
        assert!(matches!(out.as_slice(), [Outcome::Completed(_)]), "{out:?}");
        // The commands queued for each task: the trigger, then the completion.
        for (e, b) in eps.iter().zip(&backends) {
            while let Some(command) = e.try_recv() {
                if let TaskCommand::Complete { checkpoint_id } = command {
                    b.notify_checkpoint_complete(checkpoint_id).unwrap();
                }
            }
        }
        // Every live backend has a completed copy of its own: the dead ones' copies are gone.
        let left = gone_copies(&tm);
        assert!(
            left.is_empty(),
            "run {run}: after a completion the staging root keeps the local copies of {} dead \
             backends: {left:#?}",
            left.len()
        );
        drop(backends);
        drop(coord);
    }
}

//! Consequence of a live backend left without its staging lock (see
//! `staging_under_concurrent_restores.rs`), changelog mode: another
//! backend opened beside it on this machine (a task of another operator, a restarted
//! sibling) takes it for a dead one and removes its snapshot directory and its changelog
//! segments (`clean_staging`) between its sync phase and its upload. The checkpoint must
//! still either complete with exactly the state written, or fail with a typed error and the
//! next one complete with it; a restore of the last completed checkpoint gives the model.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::fs;
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

#[test]
fn a_live_backends_checkpoint_survives_a_sibling_opening_beside_it() {
    let work = tempfile::tempdir().unwrap();
    let tm = work.path().join("tm");
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(work.path().join("storage")).unwrap());
    let mut r = rng(5);
    let mut model = Model::new();
    for run in 0..60 {
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
                        ..changelog_options(100_000)
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
        let unlocked: Option<usize> = backends.iter().position(|b| {
            let lock = tm
                .join(".rockstate-staging")
                .join(b.backend_id())
                .join("LOCK");
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock)
                .map(|f| {
                    use std::os::unix::io::AsRawFd;
                    // SAFETY: flock on a descriptor this test owns.
                    let free =
                        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 };
                    if free {
                        // SAFETY: as above.
                        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
                    }
                    free
                })
                .unwrap_or(true)
        });
        if let Some(u) = unlocked {
            eprintln!(
                "run {run}: backend {u} ({}) runs without its staging lock",
                backends[u].backend_id()
            );
            for b in &backends {
                random_writes(b, &mut model, &mut r, 300);
            }
            let Triggered::Started(id) = coord.trigger().unwrap() else {
                panic!()
            };
            let pending: Vec<_> = backends.iter().map(|b| b.snapshot(id).unwrap()).collect();
            // Another backend opens beside them on this machine.
            let other = KeyedBackend::builder(tm.join("other-operator"))
                .options(small_options())
                .checkpoint_storage(Arc::new(
                    LocalStorage::new(work.path().join("other-storage")).unwrap(),
                ))
                .open()
                .unwrap();
            let results: Vec<_> = pending.into_iter().map(|p| p.upload()).collect();
            eprintln!(
                "uploads: {:?}",
                results
                    .iter()
                    .map(|r| r
                        .as_ref()
                        .map(|s| s.checkpoint_id)
                        .map_err(|e| format!("{e:?}")))
                    .collect::<Vec<_>>()
            );
            if results.iter().all(|r| r.is_ok()) {
                for (t, (b, s)) in backends.iter().zip(&results).enumerate() {
                    eps[t].ack(
                        id,
                        task_checkpoint(t as u32, Some((b, s.as_ref().unwrap())), vec![]),
                    );
                }
            } else {
                eps[0].decline(id, "upload failed");
            }
            let out = loop {
                let o = coord.wait(Duration::from_millis(50)).unwrap();
                if !o.is_empty() {
                    break o;
                }
            };
            eprintln!("outcome {out:?}");
            for (e, b) in eps.iter().zip(&backends) {
                while let Some(cmd) = e.try_recv() {
                    match cmd {
                        TaskCommand::Complete { checkpoint_id } => {
                            b.notify_checkpoint_complete(checkpoint_id).unwrap()
                        }
                        TaskCommand::Abort { checkpoint_id } => {
                            b.notify_checkpoint_aborted(checkpoint_id).unwrap()
                        }
                        _ => {}
                    }
                }
            }
            drop(other);
            // A later checkpoint must complete with the whole model (a failed attempt loses
            // no change: the segments stay until a completed materialization covers them).
            let mut errors = Vec::new();
            let mut completed = false;
            for _ in 0..3 {
                for b in &backends {
                    random_writes(b, &mut model, &mut r, 300);
                }
                let Triggered::Started(id) = coord.trigger().unwrap() else {
                    panic!()
                };
                let stats: Vec<_> = backends.iter().map(|b| b.checkpoint(id)).collect();
                if let Some(Err(e)) = stats.iter().find(|s| s.is_err()) {
                    errors.push(format!("checkpoint {id}: {e:?}"));
                    eps[0].decline(id, "checkpoint failed");
                } else {
                    for (t, (b, s)) in backends.iter().zip(&stats).enumerate() {
                        eps[t].ack(
                            id,
                            task_checkpoint(t as u32, Some((b, s.as_ref().unwrap())), vec![]),
                        );
                    }
                }
                let out = loop {
                    let o = coord.wait(Duration::from_millis(50)).unwrap();
                    if !o.is_empty() {
                        break o;
                    }
                };
                for (e, b) in eps.iter().zip(&backends) {
                    while let Some(cmd) = e.try_recv() {
                        match cmd {
                            TaskCommand::Complete { checkpoint_id } => {
                                b.notify_checkpoint_complete(checkpoint_id).unwrap()
                            }
                            TaskCommand::Abort { checkpoint_id } => {
                                b.notify_checkpoint_aborted(checkpoint_id).unwrap()
                            }
                            _ => {}
                        }
                    }
                }
                if matches!(out.as_slice(), [Outcome::Completed(_)]) {
                    completed = true;
                    break;
                }
            }
            assert!(
                completed,
                "task {u} can never checkpoint again: {errors:#?}"
            );
            let check = KeyedBackend::builder(work.path().join("check"))
                .options(small_options())
                .max_parallelism(MAXP)
                .key_groups(KeyGroupRange::for_operator(MAXP, 1, 0).unwrap())
                .checkpoint_storage(storage.clone())
                .job_coordinated()
                .restore(RestoreFrom::Latest)
                .unwrap();
            assert_eq!(
                read_all(&check),
                model,
                "the checkpoint after the sibling's open"
            );
            return;
        }
        // One completed checkpoint per run, then the process "dies" (no close).
        for b in &backends {
            random_writes(b, &mut model, &mut r, 300);
        }
        let Triggered::Started(id) = coord.trigger().unwrap() else {
            panic!()
        };
        let stats: Vec<_> = backends.iter().map(|b| b.checkpoint(id).unwrap()).collect();
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
        for (e, b) in eps.iter().zip(&backends) {
            while let Some(TaskCommand::Complete { checkpoint_id }) = e.try_recv() {
                b.notify_checkpoint_complete(checkpoint_id).unwrap();
            }
        }
        drop(backends);
        drop(coord);
    }
}

//! A job of P tasks in one process, restarted on the same machine again and again (each run
//! ends without `close`, as a killed process does: its staging locks go with it), every run
//! restoring `RestoreFrom::Latest` with its tasks restoring at once (one thread each, as an
//! engine starts its tasks), local recovery on. Each restore takes its files from the local
//! copy of the backend that wrote its checkpoint, and must then retire that backend's staging
//! directory (`LocalSource::retire_backend`: "nothing else would ever prune the old backend's
//! copies"). Local disk must stay bounded: after every restart the staging root holds only the
//! P live backends' directories, not one more per restart.

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
fn concurrent_restores_retire_every_dead_backends_local_copies() {
    let work = tempfile::tempdir().unwrap();
    let tm = work.path().join("tm");
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(work.path().join("storage")).unwrap());
    let mut r = rng(5);
    let mut model = Model::new();
    for run in 0..45 {
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
                        ..CheckpointOptions::default()
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
        // Directories of backends that are gone and still hold local copies: nothing will
        // ever restore from them again (every live backend has a new id) nor delete them.
        let live: Vec<&str> = backends.iter().map(|b| b.backend_id()).collect();
        let stale: Vec<String> = staging_backends(&tm)
            .into_iter()
            .filter(|d| !live.iter().any(|l| d.starts_with(l)) && d.contains("local-"))
            .collect();
        assert!(
            stale.is_empty(),
            "run {run}: restored checkpoint {:?}; the staging root keeps the local copies of \
             {} dead backends: {stale:#?}",
            restored.as_ref().map(|r| r.checkpoint_id),
            stale.len()
        );
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

//! A job restarting on the same machine by reopening its backend directory (not restoring
//! it), each run killed (`kill -9`) after it uploaded one checkpoint that the job never
//! completed and in the middle of the upload of the next one, local recovery on (the
//! default). Every reopen must work and come back at the last completed checkpoint, and the
//! staging root must stay bounded: a copy of a checkpoint a dead run uploaded can never be
//! completed by the reopened backend (its completion would be `UnknownCheckpoint`), so it
//! must not stay as a local copy, one RocksDB checkpoint per restart (the same bound
//! `checkpoint_local_recovery.rs` `a_restart_loop_does_not_pile_up_local_copies` holds for
//! restarts through a restore; `CheckpointOptions::local_recovery`: "Copies are kept only
//! for this backend's retained (and uploaded, not yet completed) checkpoints").

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::path::Path;
use std::sync::Arc;

use common::hooked::Hooked;
use common::process::{kill_child_once_written, publish_and_wait_to_be_killed};
use common::*;
use rockstate::checkpoint::layout;
use rockstate::{CheckpointOptions, CheckpointStorage, KeyedBackend, LocalStorage};

const CHILD_ENV: &str = "ROCKSTATE_REOPEN_KILLED_MID_UPLOAD_CHILD";

fn open(work: &Path, storage: Arc<dyn CheckpointStorage>) -> KeyedBackend {
    KeyedBackend::builder(work.join("db"))
        .options(small_options())
        .checkpoint_storage(storage)
        .checkpoint_options(CheckpointOptions::default())
        .open()
        .unwrap()
}

fn local_storage(work: &Path) -> Arc<dyn CheckpointStorage> {
    Arc::new(LocalStorage::new(work.join("storage")).unwrap())
}

/// Ids of the local copies and names of the other entries in the backend's staging dir.
fn staging_entries(work: &Path, backend: &str) -> (Vec<u64>, Vec<String>) {
    let dir = layout::default_staging_root(&work.join("db")).join(backend);
    let mut copies = Vec::new();
    let mut other = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        match layout::parse_local_copy_dir(&name) {
            Some(id) => copies.push(id),
            None => other.push(name),
        }
    }
    copies.sort_unstable();
    other.sort();
    (copies, other)
}

#[test]
fn reopening_after_kills_mid_upload_comes_back_at_the_last_completion_with_bounded_staging() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    // Run 0: one completed checkpoint, id 1.
    let (backend_id, model) = {
        let b = open(work, local_storage(work));
        let mut model = Model::new();
        random_writes(&b, &mut model, &mut rng(1), 2000);
        b.checkpoint(1).unwrap();
        b.notify_checkpoint_complete(1).unwrap();
        let id = b.backend_id().to_string();
        b.close().unwrap();
        (id, model)
    };

    const RUNS: u64 = 4;
    for run in 1..=RUNS {
        let said = kill_child_once_written(
            "reopen_killed_child",
            (CHILD_ENV, format!("{}|{run}", work.display())),
            &work.join(format!("uploading-{run}")),
            &work.join(format!("child-{run}.stderr")),
        );
        eprintln!("run {run} killed while {said}");
    }

    // The parent reopens the directory: it is the backend at checkpoint 1 (as far as
    // checkpoints go), and its staging holds no snapshot of a dead run.
    let b = open(work, local_storage(work));
    assert_eq!(b.backend_id(), backend_id);
    assert_eq!(b.last_completed_checkpoint(), Some(1));
    let (copies_at_reopen, other) = staging_entries(work, &backend_id);
    eprintln!("after the reopen: local copies {copies_at_reopen:?}, other entries {other:?}");
    assert!(
        other.iter().all(|n| !n.starts_with("snap-")),
        "a dead run's staging directory survived the reopen: {other:?}"
    );
    // The reopened backend uploads its next checkpoint (not completed yet).
    random_writes(&b, &mut model.clone(), &mut rng(99), 500);
    let next = 2 * RUNS + 1;
    b.checkpoint(next).unwrap();
    let (copies, _) = staging_entries(work, &backend_id);
    // Useful copies: the last completed checkpoint's (1) and the one just uploaded.
    assert!(
        copies.len() <= 2,
        "{} local copies after {RUNS} killed runs and one upload of the reopened backend \
         ({copies:?}); the dead runs' uploads {:?} can never complete",
        copies.len(),
        copies
            .iter()
            .filter(|&&id| id != 1 && id != next)
            .collect::<Vec<_>>()
    );
    b.notify_checkpoint_complete(next).unwrap();
}

/// Entry point of a child process; does nothing unless started by the test above.
#[test]
#[ignore = "child process of reopening_after_kills_mid_upload_comes_back_at_the_last_completion_with_bounded_staging"]
fn reopen_killed_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (work, run) = spec.split_once('|').unwrap();
    let (work, run) = (Path::new(work), run.parse::<u64>().unwrap());
    let storage = Hooked::new(local_storage(work));
    let b = open(work, storage.clone());
    let mut model = Model::new();
    let mut r = rng(100 + run);
    // Checkpoint 2·run: uploaded (acknowledged), never completed.
    random_writes(&b, &mut model, &mut r, 2000);
    b.compact_state("v").unwrap();
    b.checkpoint(2 * run).unwrap();
    // Checkpoint 2·run + 1: killed in the middle of its upload.
    random_writes(&b, &mut model, &mut r, 2000);
    b.compact_state("v").unwrap();
    let pending = b.snapshot(2 * run + 1).unwrap();
    // Every put of the upload stops (its transfer threads too), the first one tells.
    let publish = work.join(format!("uploading-{run}"));
    let told = std::sync::Once::new();
    storage.before_every_put(move |name| {
        told.call_once(|| publish_and_wait_to_be_killed(&publish, &format!("uploading {name}")));
        loop {
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
    });
    let _ = pending.upload();
    unreachable!("the upload blocks until the kill");
}

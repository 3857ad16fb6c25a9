//! Local recovery across a restart loop: a job restarts on the same machine every few minutes
//! from its last completed checkpoint, and each run uploads a checkpoint that never completes
//! before it dies (another task of the job failed, or the process was killed between its
//! upload and the completion). Each run's backend is new (a restore gives a new backend id),
//! its uploaded-but-uncompleted checkpoint has a local copy, and no restore ever uses it (the
//! job restores the last completed checkpoint, of an older backend). The staging root must
//! stay bounded: docs/checkpoint-format.md §10 keeps copies "for this backend's retained
//! checkpoints and for uploaded ones newer than the last completed" of a live backend, and
//! local_recovery.rs says "the disk cost is bounded by the retained count". Here every run
//! leaves a full RocksDB checkpoint behind, forever.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::path::Path;

use common::*;
use rockstate::checkpoint::layout;
use rockstate::{CheckpointOptions, KeyedBackend, RestoreFrom};

/// `(backend id, checkpoint id)` of every local copy under `staging_root`.
fn all_local_copies(staging_root: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for b in std::fs::read_dir(staging_root)
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = b.file_name().to_string_lossy().into_owned();
        for c in std::fs::read_dir(b.path()).into_iter().flatten().flatten() {
            if let Some(id) = layout::parse_local_copy_dir(c.file_name().to_str().unwrap()) {
                out.push((name.clone(), id));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_restart_loop_does_not_pile_up_local_copies() {
    let fx = Fixture::new();
    let staging_root = layout::default_staging_root(&fx.path("a"));
    let first = fx.open("a", CheckpointOptions::default());
    let mut model = Model::new();
    let mut r = rng(9);
    random_writes(&first, &mut model, &mut r, 1000);
    first.checkpoint(1).unwrap();
    first.notify_checkpoint_complete(1).unwrap();
    drop(first);

    const RUNS: u64 = 6;
    for run in 0..RUNS {
        // Restart on the same machine: the database directory is replaced by a restore of
        // the last completed checkpoint (1: nothing after it ever completes).
        std::fs::remove_dir_all(fx.path("a")).unwrap();
        let b = KeyedBackend::builder(fx.path("a"))
            .options(small_options())
            .checkpoint_storage(fx.storage_dyn())
            .checkpoint_options(CheckpointOptions::default())
            .restore(RestoreFrom::Latest)
            .unwrap();
        assert_eq!(read_all(&b), model, "run {run} restored the wrong state");
        // The run writes on and uploads its next checkpoint, then dies before it completes.
        let mut scratch = model.clone();
        random_writes(&b, &mut scratch, &mut r, 1000);
        b.checkpoint(2 + run).unwrap();
        drop(b);
    }
    let copies = all_local_copies(&staging_root);
    // A dead backend's copy of a checkpoint that never completed can never be restored; at
    // most the last run's attempt may still be there.
    assert!(
        copies.len() <= 1,
        "{} local copies after {RUNS} restarts (one more per restart): {copies:?}",
        copies.len()
    );
    // Nor one (empty) backend directory per restart.
    let dirs = std::fs::read_dir(&staging_root).unwrap().count();
    assert!(
        dirs <= 2,
        "{dirs} backend directories after {RUNS} restarts"
    );
}

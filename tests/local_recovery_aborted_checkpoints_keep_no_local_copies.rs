//! Local recovery after aborted checkpoints: an uploaded checkpoint the job aborts (a task
//! declined, a timeout) can never complete and no restore will ever use it, so its local copy
//! must go with it (Flink's `TaskLocalStateStore::abortCheckpoint` discards it). A job whose
//! checkpoints keep being aborted while it runs (tolerable checkpoint failures) must not grow
//! its staging root by a full RocksDB checkpoint per attempt: docs/checkpoint-format.md §10
//! keeps copies only "for this backend's retained checkpoints and for uploaded ones newer than
//! the last completed", and local_recovery.rs promises "the disk cost is bounded by the
//! retained count".

#[path = "checkpoint_common/mod.rs"]
mod common;

use common::*;
use rockstate::checkpoint::layout;
use rockstate::CheckpointOptions;

fn local_copies(fx: &Fixture, backend: &str) -> Vec<u64> {
    let dir = layout::default_staging_root(&fx.path("a")).join(backend);
    let mut ids: Vec<u64> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| layout::parse_local_copy_dir(e.file_name().to_str()?))
                .collect()
        })
        .unwrap_or_default();
    ids.sort_unstable();
    ids
}

#[test]
fn aborted_checkpoints_leave_no_local_copies() {
    let fx = Fixture::new();
    let b = fx.open("a", CheckpointOptions::default());
    let backend = b.backend_id().to_string();
    let mut model = Model::new();
    let mut r = rng(3);
    random_writes(&b, &mut model, &mut r, 500);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    assert_eq!(local_copies(&fx, &backend), [1]);
    // Ten checkpoints uploaded, each aborted by the job (another task declined it).
    for id in 2..=11 {
        random_writes(&b, &mut model, &mut r, 500);
        b.checkpoint(id).unwrap();
        b.notify_checkpoint_aborted(id).unwrap();
        // Storage forgot the attempt...
        assert!(
            fx.objects()
                .keys()
                .all(|k| !k.contains(&format!("chk-{id}/"))),
            "attempt {id} still in storage"
        );
    }
    // ...and so must the staging root: only the last completed checkpoint's copy is useful.
    assert_eq!(
        local_copies(&fx, &backend),
        [1],
        "local copies of aborted checkpoints stay on disk"
    );
}

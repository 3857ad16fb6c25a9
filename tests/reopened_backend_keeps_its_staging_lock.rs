//! `docs/ownership.md` §3 rule 9: "Each backend holds a lock file in its staging directory;
//! on open, a backend removes its own stale `snap-<id>` directories and those of every
//! staging directory whose lock nobody holds." `KeyedBackend::close` lets the same path be
//! opened again at once while the old backend's clones are alive (an engine on failover or
//! shutdown: a notification thread, an upload thread still holding a clone). The reopened
//! backend must then hold its staging lock like any open backend, so that a sibling
//! backend opening on the same staging root later never takes its staging directory for a
//! dead one and removes the snapshot it is about to upload.

#[path = "checkpoint_common/mod.rs"]
mod common;

use common::*;
use rockstate::CheckpointOptions;

#[test]
fn a_backend_reopened_while_a_closed_clone_lives_keeps_its_snapshots_from_a_siblings_open() {
    let fx = Fixture::new();
    let b = fx.open("a", CheckpointOptions::default());
    let v = b.value_state::<u32, (), u64>("v").unwrap();
    for k in 0..100u32 {
        v.put(&k, &(), &u64::from(k)).unwrap();
    }
    let clone = b.clone();
    b.close().unwrap();
    // Reopened at once, as `close` promises, while the old clone still lives.
    let reopened = fx.open("a", CheckpointOptions::default());
    // The old clone goes away (its thread ended).
    drop((clone, v));

    let v2 = reopened.value_state::<u32, (), u64>("v").unwrap();
    v2.put(&1, &(), &1000).unwrap();
    let pending = reopened.snapshot(1).unwrap();
    let staged = pending.staging_dir().to_path_buf();
    assert!(staged.exists());

    // A sibling backend (another operator instance of the process) opens on the same
    // default staging root.
    let _sibling = fx.open("b", CheckpointOptions::default());
    let staged_survived = staged.exists();
    let upload = pending.upload();
    assert!(
        staged_survived && upload.is_ok(),
        "the live reopened backend's staged snapshot {} {} by a sibling's open; its upload: \
         {upload:?}",
        staged.display(),
        if staged_survived {
            "survived"
        } else {
            "was removed"
        },
    );
}

#[test]
fn a_backend_reopened_while_the_closed_ones_upload_runs_keeps_its_snapshots_from_a_siblings_open() {
    let fx = Fixture::new();
    let b = fx.open("a", CheckpointOptions::default());
    let v = b.value_state::<u32, (), u64>("v").unwrap();
    for k in 0..100u32 {
        v.put(&k, &(), &u64::from(k)).unwrap();
    }
    // Checkpoint 1's async phase runs on an upload thread when the task is closed.
    let old_upload = b.snapshot(1).unwrap();
    drop(v);
    b.close().unwrap();
    let reopened = fx.open("a", CheckpointOptions::default());
    // The old upload ends (whatever its outcome).
    let old = old_upload.upload();
    eprintln!(
        "the closed backend's upload: {:?}",
        old.as_ref().map(|s| s.checkpoint_id)
    );

    let v2 = reopened.value_state::<u32, (), u64>("v").unwrap();
    v2.put(&1, &(), &1000).unwrap();
    let pending = reopened.snapshot(2).unwrap();
    let staged = pending.staging_dir().to_path_buf();
    let _sibling = fx.open("b", CheckpointOptions::default());
    let staged_survived = staged.exists();
    let upload = pending.upload();
    assert!(
        staged_survived && upload.is_ok(),
        "the live reopened backend's staged snapshot {} {} by a sibling's open; its upload: \
         {upload:?}",
        staged.display(),
        if staged_survived {
            "survived"
        } else {
            "was removed"
        },
    );
}

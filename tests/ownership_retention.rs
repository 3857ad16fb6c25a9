//! Retention counts only checkpoints the job completed: with `retained: 2`, completing 3
//! while 2 was uploaded but then aborted keeps 1 and 3 (2 never completed and is deleted),
//! also for an owner opened afterwards on the same storage, and both kept checkpoints restore.

#[path = "checkpoint_common/mod.rs"]
mod common;

use common::*;
use rockstate::checkpoint::layout;
use rockstate::{CheckpointOptions, JobOwner, RestoreFrom, SystemClock};

#[test]
fn subsumed_and_aborted_checkpoints_never_count_as_retained() {
    let fx = Fixture::new();
    let b = fx.open(
        "a",
        CheckpointOptions {
            retained: 2,
            ..CheckpointOptions::default()
        },
    );
    let id = b.backend_id().to_string();
    let mut model = Model::new();
    let mut r = rng(3);
    let mut models = Vec::new();
    for cp in 1..=3u64 {
        random_writes(&b, &mut model, &mut r, 2000);
        models.push(model.clone());
        if cp == 1 {
            b.checkpoint(cp).unwrap();
            b.notify_checkpoint_complete(cp).unwrap();
        } else {
            b.snapshot(cp).unwrap().upload().unwrap();
        }
    }
    b.notify_checkpoint_complete(3).unwrap();
    b.notify_checkpoint_aborted(2).unwrap();
    let ids = |v: Vec<(u64, String)>| v.into_iter().map(|(i, _)| i).collect::<Vec<_>>();
    assert_eq!(ids(b.retained_checkpoints()), vec![1, 3]);
    assert!(fx
        .storage
        .list(&layout::checkpoint_dir(2, &id))
        .unwrap()
        .is_empty());
    // An owner rebuilt from storage sees the same.
    let owner = JobOwner::open(fx.storage_dyn(), 2, std::sync::Arc::new(SystemClock)).unwrap();
    assert_eq!(owner.retained(), vec![1, 3]);
    drop(b);
    let reopened = fx.open(
        "a",
        CheckpointOptions {
            retained: 2,
            ..CheckpointOptions::default()
        },
    );
    assert_eq!(ids(reopened.retained_checkpoints()), vec![1, 3]);
    for (cp, want) in [(1u64, &models[0]), (3, &models[2])] {
        let restored = fx
            .restore(&format!("r{cp}"), RestoreFrom::Checkpoint(cp))
            .unwrap();
        assert_eq!(&read_all(&restored), want, "checkpoint {cp}");
    }
    assert!(matches!(
        fx.restore("r2", RestoreFrom::Checkpoint(2)),
        Err(rockstate::Error::CheckpointNotFound(_))
    ));
    assert_verified(fx.storage.as_ref());
}

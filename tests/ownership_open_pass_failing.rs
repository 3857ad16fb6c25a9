//! The garbage pass a job owner runs when it opens (`JobOwner::open_and_collect`, what a
//! restarting coordinator runs) is best effort like every other: a delete that storage
//! refuses leaves its object to the next pass instead of stopping the job from starting.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::Arc;

use common::*;
use rockstate::checkpoint::layout;
use rockstate::{CheckpointOptions, Fault, FaultyStorage, JobOwner, OpKind, SystemClock};

#[test]
fn a_refused_delete_at_open_leaves_its_object_to_the_next_pass() {
    let fx = Fixture::new();
    let b = fx.open("a", CheckpointOptions::default());
    let id = b.backend_id().to_string();
    let mut model = Model::new();
    let mut r = rng(5);
    random_writes(&b, &mut model, &mut r, 2000);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    // Checkpoint 2 is uploaded, then the run dies before it completes.
    random_writes(&b, &mut model, &mut r, 2000);
    b.snapshot(2).unwrap().upload().unwrap();
    drop(b);
    assert_eq!(fx.committed_ids(&id), vec![1, 2]);

    let faulty = Arc::new(FaultyStorage::new(fx.storage_dyn()));
    faulty.add_fault(Fault::FailNth {
        op: OpKind::Delete,
        nth: 1,
    });
    let owner = JobOwner::open_and_collect(faulty.clone(), 1, Arc::new(SystemClock))
        .expect("the owner opens although a delete failed");
    faulty.clear_faults();
    // The next pass deletes what the refused delete left: the attempt of checkpoint 2.
    owner.collect_garbage().unwrap();
    assert_eq!(fx.committed_ids(&id), vec![1]);
    assert!(fx
        .storage
        .list(&layout::checkpoint_dir(2, &id))
        .unwrap()
        .is_empty());
    assert!(assert_verified(fx.storage.as_ref()).is_empty());
}

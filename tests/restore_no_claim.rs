//! Restoring another job's checkpoint without claiming it (Flink's NO_CLAIM): the new job
//! reads from the other job's namespace (`BackendBuilder::restore_source`) and checkpoints into
//! its own; its ids start afresh, its first checkpoint reuses none of the other job's files
//! (a full upload), and nothing it does deletes or adds anything in the other namespace.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::Arc;

use common::*;
use rockstate::{CheckpointStorage, KeyedBackend, LocalStorage, RestoreFrom, ScopedStorage};

#[test]
fn a_restore_from_another_jobs_storage_never_touches_it() {
    let dir = tempfile::tempdir().unwrap();
    let root: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
    let job_a: Arc<dyn CheckpointStorage> =
        Arc::new(ScopedStorage::for_job(root.clone(), "a").unwrap());
    let job_b: Arc<dyn CheckpointStorage> =
        Arc::new(ScopedStorage::for_job(root.clone(), "b").unwrap());
    let a = KeyedBackend::builder(dir.path().join("a"))
        .options(small_options())
        .checkpoint_storage(job_a.clone())
        .open()
        .unwrap();
    let mut model = Model::new();
    let mut r = rng(40);
    for id in 1..=3 {
        random_writes(&a, &mut model, &mut r, 2000);
        a.checkpoint(id).unwrap();
        a.notify_checkpoint_complete(id).unwrap();
    }
    drop(a);
    let a_objects = objects(job_a.as_ref());

    let b = KeyedBackend::builder(dir.path().join("b"))
        .options(small_options())
        .checkpoint_storage(job_b.clone())
        .restore_source(job_a.clone())
        .restore(RestoreFrom::Latest)
        .unwrap();
    assert_eq!(read_all(&b), model);
    assert_eq!(
        b.last_completed_checkpoint(),
        None,
        "no id of the other job is b's"
    );
    random_writes(&b, &mut model, &mut r, 300);
    let first = b.checkpoint(1).unwrap();
    assert_eq!(first.files_reused, 0, "{first:?}");
    b.notify_checkpoint_complete(1).unwrap();
    random_writes(&b, &mut model, &mut r, 300);
    let second = b.checkpoint(2).unwrap();
    assert!(second.files_reused > 0, "{second:?}");
    b.notify_checkpoint_complete(2).unwrap();
    b.sweep_orphans(std::time::Duration::ZERO).unwrap();
    assert_eq!(
        objects(job_a.as_ref()),
        a_objects,
        "the source job's storage changed"
    );
    assert_verified(job_b.as_ref());
    drop(b);
    let again = restore_from(
        job_b.clone(),
        &dir.path().join("again"),
        RestoreFrom::Latest,
    )
    .unwrap();
    assert_eq!(read_all(&again), model);
}

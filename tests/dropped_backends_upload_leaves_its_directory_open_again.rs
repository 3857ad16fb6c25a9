//! An engine on failover drops a task's backend without `close` while that task's checkpoint
//! upload still runs on another thread (the `PendingSnapshot` keeps the backend's checkpoint
//! bookkeeping alive), and opens the same directory again at once. A drop closes the backend
//! as `close` does: its staging lock goes with its last handle, so the open succeeds (it
//! failed `Transient`, unable to take the lock, until the old upload ended) and the reopened
//! backend holds the lock and checkpoints. The old upload, ending later, fails typed (the
//! reopened backend removed its snapshot) and leaves storage verified.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::Arc;

use common::*;
use rockstate::{ErrorKind, JobOwner, KeyedBackend, RestoreFrom, SystemClock};

#[test]
fn a_dropped_backends_directory_opens_again_while_its_upload_runs() {
    let fx = Fixture::new();
    let storage = fx.storage_dyn();
    let owner = Arc::new(JobOwner::open(storage.clone(), 1, Arc::new(SystemClock)).unwrap());
    let open = || {
        KeyedBackend::builder(fx.path("a"))
            .options(small_options())
            .checkpoint_storage(storage.clone())
            .job_owner(owner.clone())
            .open()
    };
    let b = open().unwrap();
    let mut model = Model::new();
    let mut r = rng(5);
    random_writes(&b, &mut model, &mut r, 3000);
    checkpoint_completed_by(&owner, &b, 1);

    // Checkpoint 2's sync phase ran; its upload has not ended when the task fails over.
    random_writes(&b, &mut model, &mut r, 3000);
    let old_upload = b.snapshot(2).unwrap();
    drop(b);

    let b2 = open().expect("the dropped backend's directory opens again");
    assert_eq!(read_all(&b2), model, "the drop wrote every write out");
    random_writes(&b2, &mut model, &mut r, 3000);
    checkpoint_completed_by(&owner, &b2, 3);

    // The old upload ends after all. The reopened backend took the staging directory over and
    // removed the dropped one's snapshot, so the upload fails with a typed error (or, had it
    // read everything first, it completes); either way no manifest names a missing file.
    if let Err(e) = old_upload.upload() {
        assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    }
    assert_verified(fx.storage.as_ref());

    // The reopened backend holds its staging lock: a sibling opening beside it leaves its
    // snapshots alone, and it checkpoints again.
    let sibling = KeyedBackend::builder(fx.path("b"))
        .options(small_options())
        .checkpoint_storage(storage.clone())
        .job_owner(owner.clone())
        .open()
        .unwrap();
    random_writes(&b2, &mut model, &mut r, 3000);
    checkpoint_completed_by(&owner, &b2, 4);
    drop(sibling);
    drop(b2);
    let restored = fx.restore("c", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model);
}

//! An engine on failover closes a task's backend while that task's checkpoint upload still
//! runs on another thread (the `PendingSnapshot` keeps the closed backend's checkpoint
//! bookkeeping alive), and reopens the same directory at once (`close` promises it) with
//! the job's in-process owner linked (`job_owner`). The reopened backend has the same
//! backend id. When the old upload ends later (here: it is dropped), the closed backend's
//! bookkeeping goes, and with it must go only *its own* protections: the reopened backend's
//! attempt still uploading must stay protected, so a commit of a newer checkpoint during its
//! upload does not delete what it uploaded and its manifest never names a missing file
//! (docs/ownership.md §3 rule 5, tests/ownership_commit_during_older_upload.rs for the same
//! race without the failover).

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::Arc;

use common::hooked::Hooked;
use common::*;
use rockstate::checkpoint::layout;
use rockstate::{CheckpointStorage, JobOwner, KeyedBackend, SystemClock};

#[test]
fn the_end_of_a_closed_backends_upload_leaves_the_reopened_backends_attempts_protected() {
    let fx = Fixture::new();
    let hooked = Hooked::new(fx.storage_dyn());
    let storage: Arc<dyn CheckpointStorage> = hooked.clone();
    let owner = Arc::new(JobOwner::open(storage.clone(), 1, Arc::new(SystemClock)).unwrap());
    let open = || {
        KeyedBackend::builder(fx.path("a"))
            .options(small_options())
            .checkpoint_storage(storage.clone())
            .job_owner(owner.clone())
            .open()
            .unwrap()
    };
    let b = open();
    let mut model = Model::new();
    let mut r = rng(11);
    random_writes(&b, &mut model, &mut r, 3000);
    checkpoint_completed_by(&owner, &b, 1);

    // Checkpoint 2's sync phase ran; its upload thread still holds it when the task fails over.
    random_writes(&b, &mut model, &mut r, 3000);
    let old_upload = b.snapshot(2).unwrap();
    b.close().unwrap();
    let b2 = open();

    // The reopened backend goes on: 3 and 4 in flight, both on base 1.
    random_writes(&b2, &mut model, &mut r, 3000);
    b2.compact_state("v").unwrap();
    let p3 = b2.snapshot(3).unwrap();
    random_writes(&b2, &mut model, &mut r, 3000);
    b2.compact_state("v").unwrap();
    let p4 = b2.snapshot(4).unwrap();
    let s4 = p4.upload().unwrap();

    // The closed backend's upload ends (it failed or was given up).
    drop(old_upload);

    // 4 is committed by the owner while 3's upload runs (right before 3's manifest put).
    let meta3 = layout::metadata_name(3, b2.backend_id());
    {
        let owner = owner.clone();
        let rec = one_task_record(&b2, &s4);
        hooked.before_put(meta3, move || {
            owner.commit(&rec).unwrap();
        });
    }
    let up3 = p3.upload();
    let report = rockstate::verify_checkpoints(fx.storage.as_ref()).unwrap();
    assert!(
        report.problems.is_empty(),
        "manifests in storage name missing files (upload 3 returned {:?}): {:?}",
        up3.map(|s| s.checkpoint_id),
        report.problems
    );
}

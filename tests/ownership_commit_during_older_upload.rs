//! A backend of a job whose owner lives in its process has checkpoints 2 and 3 in
//! flight (3's sync phase ran while 2 was still uploading, base 1 for both). 3 is uploaded,
//! acknowledged and committed by the owner while 2's upload is still running (2's upload is
//! slower). The commit's pass must not delete what 2's upload wrote or reuses: 2's manifest
//! is written after it, and no manifest in storage may name a missing file
//! (docs/checkpoint-format.md §8). The attempt stays protected until its upload ends.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::Arc;

use common::hooked::Hooked;
use common::*;
use rockstate::checkpoint::layout;
use rockstate::{CheckpointStorage, JobOwner, KeyedBackend, SystemClock};

#[test]
fn a_commit_during_an_older_upload_leaves_no_manifest_naming_deleted_files() {
    let fx = Fixture::new();
    let hooked = Hooked::new(fx.storage_dyn());
    let storage: Arc<dyn CheckpointStorage> = hooked.clone();
    let owner = Arc::new(JobOwner::open(storage.clone(), 1, Arc::new(SystemClock)).unwrap());
    let b = Arc::new(
        KeyedBackend::builder(fx.path("a"))
            .options(small_options())
            .checkpoint_storage(storage.clone())
            .job_owner(owner.clone())
            .open()
            .unwrap(),
    );
    let mut model = Model::new();
    let mut r = rng(7);
    random_writes(&b, &mut model, &mut r, 3000);
    checkpoint_completed_by(&owner, &b, 1);

    random_writes(&b, &mut model, &mut r, 3000);
    b.compact_state("v").unwrap();
    let p2 = b.snapshot(2).unwrap();
    random_writes(&b, &mut model, &mut r, 3000);
    b.compact_state("v").unwrap();
    let p3 = b.snapshot(3).unwrap();
    let s3 = p3.upload().unwrap();

    // 3 is committed by the owner while 2's upload runs (right before 2's manifest put).
    let meta2 = layout::metadata_name(2, b.backend_id());
    {
        let owner = owner.clone();
        let rec = one_task_record(&b, &s3);
        hooked.before_put(meta2.clone(), move || {
            owner.commit(&rec).unwrap();
        });
    }
    let up2 = p2.upload();
    let report = rockstate::verify_checkpoints(fx.storage.as_ref()).unwrap();
    assert!(
        report.problems.is_empty(),
        "manifests in storage name missing files (upload 2 returned {:?}): {:?}",
        up2.map(|s| s.checkpoint_id),
        report.problems
    );
}

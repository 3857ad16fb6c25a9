//! A job record whose put reported a failure, was not there when read back, and landed later
//! (an object store that applies a request after its client gave up: S3 may finish a PUT
//! whose response timed out). If the commit then ended the checkpoint as failed, its tasks
//! deleted the checkpoint's manifests and files, and the late record became the newest
//! completed checkpoint naming files that are gone: no restore of the latest checkpoint
//! could succeed. The commit must instead settle the record itself: once the checks passed,
//! it puts the same record again (create-if-absent), so the checkpoint ends committed, or in
//! doubt, never failed with a put still on its way.
//!
//! Whatever the outcome, storage verifies (every record's files are there) and the latest
//! restore yields the last checkpoint the backend reported completed.

#[path = "checkpoint_common/mod.rs"]
mod common;

use common::*;
use rockstate::{Error, Fault, OpKind, RestoreFrom};

#[test]
fn a_record_put_that_lands_after_its_failure_never_names_deleted_files() {
    let fx = Fixture::new();
    let (faulty, b) = fx.open_on_faulty("a");
    let mut model = Model::new();
    let mut r = rng(23);
    random_writes(&b, &mut model, &mut r, 3000);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    let at_1 = model.clone();
    // Checkpoint 2 rewrites what checkpoint 1 holds, so its files are its own.
    random_writes(&b, &mut model, &mut r, 3000);
    b.compact_state("v").unwrap();
    b.checkpoint(2).unwrap();
    let at_2 = model.clone();
    // The commit reads checkpoint 2's manifest and puts the record: that put fails and lands
    // only when the test says so, after the commit has read it back and found nothing.
    faulty.add_fault(Fault::LandLater {
        op: OpKind::PutBytes,
        nth: faulty.ops(OpKind::PutBytes) + 1,
    });
    let completion = b.notify_checkpoint_complete(2);
    faulty.clear_faults();
    let landed = faulty.land_late_puts();
    assert_eq!(
        landed.len(),
        1,
        "the record's put was not the one held back"
    );
    assert_eq!(landed[0].0, "job/chk-2");
    // The storage holds no record naming a missing file, and the latest restore is the last
    // completion the backend reported.
    assert_verified(fx.storage.as_ref());
    let completed = b.last_completed_checkpoint();
    drop(b);
    let restored = fx.restore("r", RestoreFrom::Latest).unwrap();
    let expected = match completed {
        Some(2) => &at_2,
        _ => &at_1,
    };
    assert!(read_all(&restored) == *expected, "restored other state");
    // The put was settled by the commit: checkpoint 2 completed, and the late put found its
    // name taken by the same record.
    completion.unwrap();
    assert_eq!(completed, Some(2));
    assert!(
        matches!(landed[0].1, Err(Error::ObjectExists { .. })),
        "{:?}",
        landed[0].1
    );
}

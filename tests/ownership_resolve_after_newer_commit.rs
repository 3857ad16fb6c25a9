//! A commit in doubt (its job record landed while the put reported a failure, and reading it
//! back failed too) whose newer checkpoint commits before it is resolved: that commit's pass
//! adopts the landed record and, keeping one, deletes it. `resolve` must still say the
//! checkpoint committed (an exactly-once sink commits or aborts its staged output by that
//! answer), not that it is missing from storage.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::Arc;

use common::*;
use rockstate::{Error, Fault, FaultyStorage, JobOwner, KeyedBackend, OpKind, SystemClock};

#[test]
fn a_commit_in_doubt_resolves_as_committed_after_a_newer_commit_deleted_its_record() {
    let fx = Fixture::new();
    let faulty = Arc::new(FaultyStorage::new(fx.storage_dyn()));
    let owner = Arc::new(JobOwner::open(faulty.clone(), 1, Arc::new(SystemClock)).unwrap());
    let b = KeyedBackend::builder(fx.path("a"))
        .options(small_options())
        .checkpoint_storage(faulty.clone())
        .job_owner(owner.clone())
        .open()
        .unwrap();
    let mut model = Model::new();
    let mut r = rng(5);
    random_writes(&b, &mut model, &mut r, 1000);
    checkpoint_completed_by(&owner, &b, 1);

    random_writes(&b, &mut model, &mut r, 1000);
    let s2 = b.checkpoint(2).unwrap();
    // The record lands and its put fails; reading it back fails too.
    faulty.add_fault(Fault::LandThenFail {
        op: OpKind::PutBytes,
        nth: faulty.ops(OpKind::PutBytes) + 1,
    });
    faulty.add_fault(Fault::FailNth {
        op: OpKind::GetBytes,
        nth: faulty.ops(OpKind::GetBytes) + 2,
    });
    let e = owner.commit(&one_task_record(&b, &s2)).unwrap_err();
    assert!(matches!(e, Error::CommitInDoubt { .. }), "{e}");
    faulty.clear_faults();

    // Checkpoint 3 commits before 2 is resolved; its pass keeps one record (3's).
    random_writes(&b, &mut model, &mut r, 1000);
    let s3 = b.checkpoint(3).unwrap();
    owner.commit(&one_task_record(&b, &s3)).unwrap();
    assert_eq!(owner.retained(), [3]);

    assert!(
        owner.resolve(&one_task_record(&b, &s2)).unwrap(),
        "checkpoint 2's record landed (checkpoint 3's pass adopted it), so it committed"
    );
}

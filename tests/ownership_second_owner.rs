//! A second owner wrongly sharing a job's storage (`docs/ownership.md` §3 rule 10): its
//! commits meet `Error::StorageConflict` and it deletes nothing of the first owner's, also
//! after one of its own commits was in doubt (the reload that settles the doubt adopts only
//! the record this owner put, never another owner's).

use std::sync::Arc;

use rockstate::checkpoint::layout;
use rockstate::{
    CheckpointStorage, Error, Fault, FaultyStorage, JobOwner, LocalStorage, ManualClock, OpKind,
};
use sst_format::{JobCheckpoint, TaskCheckpoint};

fn record(id: u64) -> JobCheckpoint {
    JobCheckpoint {
        checkpoint_id: id,
        job_name: "job".into(),
        max_parallelism: 0,
        triggered_at_ms: 0,
        completed_at_ms: 0,
        tasks: vec![TaskCheckpoint {
            task: 0,
            manifest: None,
            key_group_start: 0,
            key_group_end: 0,
            operator_state: Vec::new(),
            state_bytes: 0,
            bytes_uploaded: 0,
            files_reused: 0,
            sync_micros: 0,
            async_micros: 0,
        }],
    }
}

struct Owners {
    _dir: tempfile::TempDir,
    storage: Arc<dyn CheckpointStorage>,
    faulty: Arc<FaultyStorage>,
    /// The job's owner.
    a: JobOwner,
    /// A second owner on the same storage, opened after the first's first completion.
    b: JobOwner,
}

fn two_owners() -> Owners {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> = Arc::new(LocalStorage::new(dir.path()).unwrap());
    let faulty = Arc::new(FaultyStorage::new(storage.clone()));
    let clock = Arc::new(ManualClock::new(1_000));
    let a = JobOwner::open(storage.clone(), 1, clock.clone()).unwrap();
    a.commit(&record(1)).unwrap();
    let b = JobOwner::open(faulty.clone(), 1, clock).unwrap();
    Owners {
        _dir: dir,
        storage,
        faulty,
        a,
        b,
    }
}

/// Makes b's next record put fail and the read-back after it fail too: the commit is in doubt.
fn in_doubt(o: &Owners, id: u64) {
    o.faulty.add_fault(Fault::FailNth {
        op: OpKind::PutBytes,
        nth: o.faulty.ops(OpKind::PutBytes) + 1,
    });
    o.faulty.add_fault(Fault::FailNth {
        op: OpKind::GetBytes,
        nth: o.faulty.ops(OpKind::GetBytes) + 1,
    });
    let e = o.b.commit(&record(id)).unwrap_err();
    assert!(matches!(e, Error::CommitInDoubt { .. }), "{e}");
    o.faulty.clear_faults();
}

#[test]
fn a_second_owner_meets_a_conflict() {
    let o = two_owners();
    o.a.commit(&record(3)).unwrap();
    let e = o.b.commit(&record(4)).unwrap_err();
    assert!(matches!(e, Error::StorageConflict(_)), "{e}");
    assert!(o.storage.exists(&layout::job_record_name(3)).unwrap());
}

#[test]
fn a_second_owner_whose_commit_was_in_doubt_still_meets_a_conflict() {
    let o = two_owners();
    in_doubt(&o, 2);
    o.a.commit(&record(3)).unwrap();
    let r = o.b.commit(&record(4));
    assert!(
        o.storage.exists(&layout::job_record_name(3)).unwrap(),
        "the second owner deleted the first owner's latest checkpoint (its commit: {r:?})"
    );
    assert!(matches!(r, Err(Error::StorageConflict(_))), "{r:?}");
    // Nor does a garbage pass of the second owner delete anything.
    let e = o.b.collect_garbage().unwrap_err();
    assert!(matches!(e, Error::StorageConflict(_)), "{e}");
    assert!(o.storage.exists(&layout::job_record_name(3)).unwrap());
}

#[test]
fn a_commit_in_doubt_that_landed_is_the_owners_own() {
    // One owner alone: its in-doubt record landed (the put stored it, then failed), so the
    // next commit adopts it and goes on.
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> = Arc::new(LocalStorage::new(dir.path()).unwrap());
    let faulty = Arc::new(FaultyStorage::new(storage.clone()));
    let owner = JobOwner::open(faulty.clone(), 1, Arc::new(ManualClock::new(1_000))).unwrap();
    owner.commit(&record(1)).unwrap();
    faulty.add_fault(Fault::LandThenFail {
        op: OpKind::PutBytes,
        nth: faulty.ops(OpKind::PutBytes) + 1,
    });
    faulty.add_fault(Fault::FailNth {
        op: OpKind::GetBytes,
        nth: faulty.ops(OpKind::GetBytes) + 1,
    });
    let e = owner.commit(&record(2)).unwrap_err();
    assert!(matches!(e, Error::CommitInDoubt { .. }), "{e}");
    faulty.clear_faults();
    assert!(storage.exists(&layout::job_record_name(2)).unwrap());
    owner.commit(&record(3)).unwrap();
    assert_eq!(owner.retained(), vec![3]);
    assert!(!storage.exists(&layout::job_record_name(2)).unwrap());
}

//! A backend without a coordinator, retaining two checkpoints: the job record of checkpoint 2
//! fails both its puts (held back to land later), so its completion is in doubt; checkpoint 3
//! completes, which abandons checkpoint 2; then checkpoint 2's puts land (a server applying
//! requests after their client gave up). The abandoning owner fences the record's name with a
//! void record (create-if-absent) before it deletes anything checkpoint 2 names. Scenarios:
//!
//! * the fence holds, the process dies, and the late puts are refused (before the fence, the
//!   next run adopted the late record among the retained, naming the manifests checkpoint 3's
//!   pass had deleted, and storage no longer verified);
//! * the void record's put fails, so checkpoint 2's files are kept, the late record lands, and
//!   the same process goes on: its own put, not another owner's record (before, every later
//!   completion failed with `StorageConflict`); its next pass deletes it and fences the name;
//! * the void record's put fails and the process dies; the late puts land after the next
//!   run's owner opened and its first pass deleted checkpoint 2's files: that owner takes the
//!   record for an earlier run's late put (before, `StorageConflict`), deletes it and voids
//!   its name;
//! * the same, with the late puts landing before that owner's first pass: every file the
//!   record names is there, so it is adopted as an older completed checkpoint.
//!
//! Invariant checked, on local storage and on the S3 test server (whose create-if-absent put
//! is a conditional `If-None-Match: *` request): the job retains only completed checkpoints,
//! storage verifies, the latest restore is the last completed checkpoint, and a restore of
//! checkpoint 2 is refused.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use rand::rngs::SmallRng;
use rockstate::{
    CheckpointOptions, Error, Fault, FaultyStorage, JobOwner, KeyedBackend, ManualClock, OpKind,
    RestoreFrom,
};

fn retaining_two() -> CheckpointOptions {
    CheckpointOptions {
        retained: 2,
        ..CheckpointOptions::default()
    }
}

/// Runs checkpoints 1 to 3: 1 and 3 complete, 2's record puts are held back, and the void
/// record put under its name fails when `void_fails`. The fixture, the faulty storage holding
/// the late puts, the backend, the model of checkpoint 3, the writes' generator.
fn checkpoint_2_abandoned(
    fx: Fixture,
    void_fails: bool,
) -> (Fixture, Arc<FaultyStorage>, KeyedBackend, Model, SmallRng) {
    let faulty = Arc::new(FaultyStorage::new(fx.storage_dyn()));
    let a = KeyedBackend::builder(fx.path("a"))
        .options(small_options())
        .checkpoint_storage(faulty.clone())
        .checkpoint_options(retaining_two())
        .open()
        .unwrap();
    let mut model = Model::new();
    let mut r = rng(31);
    random_writes(&a, &mut model, &mut r, 2000);
    a.checkpoint(1).unwrap();
    a.notify_checkpoint_complete(1).unwrap();

    random_writes(&a, &mut model, &mut r, 2000);
    a.compact_state("v").unwrap();
    a.checkpoint(2).unwrap();
    let puts = faulty.ops(OpKind::PutBytes);
    for k in 1..=2 {
        faulty.add_fault(Fault::LandLater {
            op: OpKind::PutBytes,
            nth: puts + k,
        });
    }
    let in_doubt = a.notify_checkpoint_complete(2);
    faulty.clear_faults();
    assert!(
        matches!(in_doubt, Err(Error::CommitInDoubt { .. })),
        "{in_doubt:?}"
    );

    // Checkpoint 3 rewrites what checkpoint 2 holds: checkpoint 2's files are its own.
    random_writes(&a, &mut model, &mut r, 2000);
    a.compact_state("v").unwrap();
    a.checkpoint(3).unwrap();
    if void_fails {
        // Checkpoint 3's record goes through; the void record put after it fails.
        let puts = faulty.ops(OpKind::PutBytes);
        faulty.add_fault(Fault::FailNth {
            op: OpKind::PutBytes,
            nth: puts + 2,
        });
    }
    // Completed; a failed pass is the backend's error.
    let pass = a.notify_checkpoint_complete(3);
    faulty.clear_faults();
    assert_eq!(a.last_completed_checkpoint(), Some(3));
    assert_eq!(pass.is_err(), void_fails, "{pass:?}");
    assert_eq!(faulty.injected(), 2 + u64::from(void_fails));
    // Checkpoint 3's pass deletes checkpoint 2's files once its name is fenced, and only then.
    assert_eq!(has_manifest(&fx, 2), void_fails);
    (fx, faulty, a, model, r)
}

/// [`checkpoint_2_abandoned`], then the process dies.
fn first_run_dies(fx: Fixture, void_fails: bool) -> (Fixture, Arc<FaultyStorage>, Model, SmallRng) {
    let (fx, faulty, a, model, r) = checkpoint_2_abandoned(fx, void_fails);
    drop(a);
    (fx, faulty, model, r)
}

/// The next run: a backend restoring the latest completed checkpoint, with its own owner.
fn next_run(fx: &Fixture) -> KeyedBackend {
    KeyedBackend::builder(fx.path("b"))
        .options(small_options())
        .checkpoint_storage(fx.storage_dyn())
        .checkpoint_options(retaining_two())
        .restore(RestoreFrom::Latest)
        .unwrap()
}

/// The next run completes checkpoint 4 and sweeps; storage verifies, checkpoint 2 is refused,
/// and the latest restore is `model`.
fn next_run_goes_on(fx: &Fixture, b: KeyedBackend, mut model: Model, r: &mut SmallRng) {
    let owner = b.job_owner().unwrap();
    random_writes(&b, &mut model, r, 2000);
    b.checkpoint(4).unwrap();
    b.notify_checkpoint_complete(4).unwrap();
    assert_eq!(owner.retained(), vec![3, 4]);
    assert!(!has_manifest(fx, 2));
    assert_verified(fx.storage.as_ref());
    b.sweep_orphans(Duration::from_secs(3600)).unwrap();
    drop(b);
    let restored = fx.restore("r", RestoreFrom::Latest).unwrap();
    assert!(read_all(&restored) == model, "restored other state");
    assert!(matches!(
        fx.restore("r2", RestoreFrom::Checkpoint(2)),
        Err(Error::CheckpointNotFound(_))
    ));
}

on_every_storage!(
    an_unfenced_record_landing_in_its_owners_run_is_deleted_by_the_next_pass,
    a_record_landing_after_its_owner_died_is_refused_by_the_void_under_its_name,
    an_unfenced_record_landing_after_the_next_run_opened_is_deleted_by_it,
    an_unfenced_whole_record_landing_before_the_next_runs_first_pass_is_adopted,
);

fn an_unfenced_record_landing_in_its_owners_run_is_deleted_by_the_next_pass(fx: Fixture) {
    let (fx, faulty, a, mut model, mut r) = checkpoint_2_abandoned(fx, true);
    let landed = faulty.land_late_puts();
    assert_eq!(landed.len(), 2, "{landed:?}");
    assert!(landed[0].1.is_ok(), "{landed:?}");

    random_writes(&a, &mut model, &mut r, 2000);
    a.checkpoint(4).unwrap();
    a.notify_checkpoint_complete(4).unwrap();
    assert_eq!(a.job_owner().unwrap().retained(), vec![3, 4]);
    assert!(is_void(&fx, 2), "job/chk-2 holds no void record");
    assert!(!has_manifest(&fx, 2));
    assert_verified(fx.storage.as_ref());
    drop(a);
    assert!(matches!(
        fx.restore("r2", RestoreFrom::Checkpoint(2)),
        Err(Error::CheckpointNotFound(_))
    ));
    let restored = fx.restore("r", RestoreFrom::Latest).unwrap();
    assert!(read_all(&restored) == model, "restored other state");
}

fn a_record_landing_after_its_owner_died_is_refused_by_the_void_under_its_name(fx: Fixture) {
    let (fx, faulty, model, mut r) = first_run_dies(fx, false);
    let landed = faulty.land_late_puts();
    assert_eq!(landed.len(), 2, "{landed:?}");
    for (name, outcome) in &landed {
        assert!(
            matches!(outcome, Err(Error::ObjectExists { .. })),
            "{name}: {outcome:?}"
        );
    }

    let b = next_run(&fx);
    assert!(read_all(&b) == model, "restored other state");
    assert_eq!(b.job_owner().unwrap().retained(), vec![1, 3]);
    assert_verified(fx.storage.as_ref());
    next_run_goes_on(&fx, b, model, &mut r);
}

fn an_unfenced_record_landing_after_the_next_run_opened_is_deleted_by_it(fx: Fixture) {
    let (fx, faulty, model, mut r) = first_run_dies(fx, true);
    let b = next_run(&fx);
    assert!(read_all(&b) == model, "restored other state");
    let owner = b.job_owner().unwrap();
    assert_eq!(owner.retained(), vec![1, 3]);
    // The next run's first pass deletes checkpoint 2's files (an id of a run that is gone).
    owner.collect_garbage().unwrap();
    assert!(!has_manifest(&fx, 2));

    let landed = faulty.land_late_puts();
    assert!(landed[0].1.is_ok(), "{landed:?}");
    next_run_goes_on(&fx, b, model, &mut r);
    assert!(is_void(&fx, 2), "job/chk-2 holds no void record");
}

fn an_unfenced_whole_record_landing_before_the_next_runs_first_pass_is_adopted(fx: Fixture) {
    let (fx, faulty, _model, _r) = first_run_dies(fx, true);
    let owner = JobOwner::open(fx.storage_dyn(), 2, Arc::new(ManualClock::new(0))).unwrap();
    assert_eq!(owner.retained(), vec![1, 3]);
    let landed = faulty.land_late_puts();
    assert!(landed[0].1.is_ok(), "{landed:?}");
    owner.collect_garbage().unwrap();
    assert_eq!(owner.retained(), vec![2, 3]);
    assert!(has_manifest(&fx, 2));
    assert_verified(fx.storage.as_ref());
    let restored = fx.restore("r", RestoreFrom::Checkpoint(2)).unwrap();
    drop(restored);
}

/// Whether storage holds a manifest of checkpoint `id`.
fn has_manifest(fx: &Fixture, id: u64) -> bool {
    fx.objects()
        .keys()
        .any(|n| n.starts_with(&format!("chk-{id}/")) && n.ends_with("/_metadata"))
}

/// Whether checkpoint `id`'s job record name holds a void record.
fn is_void(fx: &Fixture, id: u64) -> bool {
    let stored = fx.storage.get_bytes(&format!("job/chk-{id}")).unwrap();
    matches!(
        sst_format::decode_job_record(&stored),
        Ok(sst_format::JobRecord::Void(_))
    )
}

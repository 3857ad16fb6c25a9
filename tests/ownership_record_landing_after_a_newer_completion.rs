//! A backend without a coordinator: the job record of checkpoint 2 fails both its puts
//! (the commit's and the one settling it) without being there when read back, so its
//! completion is in doubt; checkpoint 3 completes, and the void record its pass puts under
//! checkpoint 2's name (the fence a late put cannot pass) fails too; then checkpoint 2's puts
//! land (a server applying requests after their client gave up). While the name is not
//! fenced the passes keep what checkpoint 2 names, so the late record names existing files.
//! It is the backend's own put, not another owner's record: the next completion must not fail
//! with `StorageConflict` (it did, for every completion after); its pass deletes the late
//! record and fences the name, so storage verifies, a restore of checkpoint 2 is refused and
//! the latest restore is the last completed checkpoint.
#[path = "checkpoint_common/mod.rs"]
mod common;

use common::*;
use rockstate::{Error, Fault, OpKind, RestoreFrom};

#[test]
fn a_record_landing_after_a_newer_completion_is_deleted_by_the_next_one() {
    let fx = Fixture::new();
    let (faulty, b) = fx.open_on_faulty("a");
    let mut model = Model::new();
    let mut r = rng(29);
    random_writes(&b, &mut model, &mut r, 2000);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();

    random_writes(&b, &mut model, &mut r, 2000);
    b.compact_state("v").unwrap();
    b.checkpoint(2).unwrap();
    let puts = faulty.ops(OpKind::PutBytes);
    for k in 1..=2 {
        faulty.add_fault(Fault::LandLater {
            op: OpKind::PutBytes,
            nth: puts + k,
        });
    }
    let in_doubt = b.notify_checkpoint_complete(2);
    faulty.clear_faults();
    assert!(
        matches!(in_doubt, Err(Error::CommitInDoubt { .. })),
        "{in_doubt:?}"
    );

    // Checkpoint 3 rewrites what checkpoint 2 holds, so checkpoint 2's files are its own.
    random_writes(&b, &mut model, &mut r, 2000);
    b.compact_state("v").unwrap();
    b.checkpoint(3).unwrap();
    // The record's put goes through; the pass's void record put after it fails.
    let puts = faulty.ops(OpKind::PutBytes);
    faulty.add_fault(Fault::FailNth {
        op: OpKind::PutBytes,
        nth: puts + 2,
    });
    // Completed; only its pass failed (the backend reports the pass's error).
    let pass = b.notify_checkpoint_complete(3);
    faulty.clear_faults();
    assert!(matches!(pass, Err(Error::Storage { .. })), "{pass:?}");
    assert_eq!(b.last_completed_checkpoint(), Some(3));
    assert_eq!(faulty.injected(), 3, "the void record's put was not made");
    assert!(
        has_manifest(&fx, 2),
        "checkpoint 2's manifest was deleted while its record could still land"
    );

    let landed = faulty.land_late_puts();
    assert_eq!(landed.len(), 2, "{landed:?}");
    assert!(landed[0].1.is_ok(), "{landed:?}");

    random_writes(&b, &mut model, &mut r, 2000);
    b.checkpoint(4).unwrap();
    b.notify_checkpoint_complete(4).unwrap();
    assert_eq!(b.last_completed_checkpoint(), Some(4));
    let name = fx.storage.get_bytes("job/chk-2").unwrap();
    assert!(
        matches!(
            sst_format::decode_job_record(&name),
            Ok(sst_format::JobRecord::Void(_))
        ),
        "job/chk-2 holds no void record"
    );
    assert!(!has_manifest(&fx, 2));
    assert_verified(fx.storage.as_ref());
    drop(b);
    assert!(matches!(
        fx.restore("r2", RestoreFrom::Checkpoint(2)),
        Err(Error::CheckpointNotFound(_))
    ));
    let restored = fx.restore("r", RestoreFrom::Latest).unwrap();
    assert!(read_all(&restored) == model, "restored other state");
}

/// Whether storage holds a manifest of checkpoint `id`.
fn has_manifest(fx: &Fixture, id: u64) -> bool {
    fx.objects()
        .keys()
        .any(|n| n.starts_with(&format!("chk-{id}/")) && n.ends_with("/_metadata"))
}

//! A backend without a coordinator: the job record of checkpoint 2 fails both its puts
//! (the commit's and the one settling it) without being there when read back, so its
//! completion is in doubt; checkpoint 3 completes; then checkpoint 2's puts land (a server
//! applying requests after their client gave up). Checkpoint 3's pass deleted checkpoint 2's
//! files, so the late record names what is gone. It is the backend's own put, not another
//! owner's record: the next completion must not fail with `StorageConflict` (it did, for
//! every completion after), and it deletes the late record, so storage verifies and the
//! latest restore is the last completed checkpoint.

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
    b.notify_checkpoint_complete(3).unwrap();

    let landed = faulty.land_late_puts();
    assert_eq!(landed.len(), 2, "{landed:?}");
    assert!(landed[0].1.is_ok(), "{landed:?}");

    random_writes(&b, &mut model, &mut r, 2000);
    b.checkpoint(4).unwrap();
    b.notify_checkpoint_complete(4).unwrap();
    assert_eq!(b.last_completed_checkpoint(), Some(4));
    assert!(!fx.storage.exists("job/chk-2").unwrap());
    assert_verified(fx.storage.as_ref());
    drop(b);
    let restored = fx.restore("r", RestoreFrom::Latest).unwrap();
    assert!(read_all(&restored) == model, "restored other state");
}

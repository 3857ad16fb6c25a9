//! A completion whose job record landed while its put reported a failure, and reading it back
//! failed too (`CommitInDoubt`), counts as committed when the completion is retried; that
//! commit's garbage pass then deletes what the checkpoint subsumed at once, as any commit
//! does: the attempts up to its id are no longer protected (they were kept until the next
//! commit).

#[path = "checkpoint_common/mod.rs"]
mod common;

use common::*;
use rockstate::{Error, Fault, OpKind, RestoreFrom};

#[test]
fn a_retried_completion_whose_record_landed_collects_what_it_subsumed() {
    let fx = Fixture::new();
    let (faulty, b) = fx.open_on_faulty("a");
    let mut model = Model::new();
    let mut r = rng(17);
    random_writes(&b, &mut model, &mut r, 3000);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    // Checkpoint 2 rewrites everything checkpoint 1 holds: after 2 completes, every file of 1
    // is garbage.
    random_writes(&b, &mut model, &mut r, 3000);
    b.compact_state("v").unwrap();
    b.checkpoint(2).unwrap();
    faulty.add_fault(Fault::LandThenFail {
        op: OpKind::PutBytes,
        nth: faulty.ops(OpKind::PutBytes) + 1,
    });
    // The commit reads checkpoint 2's manifest, puts the record (it lands, the put fails),
    // then reads the record back: that read fails too.
    faulty.add_fault(Fault::FailNth {
        op: OpKind::GetBytes,
        nth: faulty.ops(OpKind::GetBytes) + 2,
    });
    let e = b.notify_checkpoint_complete(2).unwrap_err();
    assert!(matches!(e, Error::CommitInDoubt { .. }), "{e}");
    faulty.clear_faults();
    b.notify_checkpoint_complete(2).unwrap();
    assert_eq!(b.last_completed_checkpoint(), Some(2));
    let unreferenced = assert_verified(fx.storage.as_ref());
    assert!(
        unreferenced.is_empty(),
        "checkpoint 1's files outlived its subsumption: {unreferenced:?}"
    );
    drop(b);
    let restored = fx.restore("r", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model);
}

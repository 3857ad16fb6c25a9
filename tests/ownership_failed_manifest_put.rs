//! A manifest put that stores the manifest but reports failure, followed by a failed delete
//! of that manifest (the attempt's own cleanup), must leave garbage the owner classifies, not
//! a restorable checkpoint with missing files: the uploaded files stay while their manifest
//! does, `Latest` still restores the last completed checkpoint, a reopened backend reuses
//! from that one, and the next completion removes every object of the failed attempt.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::Arc;

use common::*;
use rockstate::checkpoint::layout;
use rockstate::{
    CheckpointStorage, Fault, FaultyStorage, KeyedBackend, LocalStorage, OpKind, RestoreFrom,
};

#[test]
fn failed_manifest_put_leaves_classifiable_garbage_and_the_last_checkpoint_intact() {
    let dir = tempfile::tempdir().unwrap();
    let local: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
    let faulty = Arc::new(FaultyStorage::new(local.clone()));
    let open = || {
        KeyedBackend::builder(dir.path().join("a"))
            .options(small_options())
            .checkpoint_storage(faulty.clone())
            .open()
            .unwrap()
    };
    let b = open();
    let mut model = Model::new();
    let mut r = rng(1);
    random_writes(&b, &mut model, &mut r, 3000);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    let model_1 = model.clone();

    random_writes(&b, &mut model, &mut r, 3000);
    b.flush().unwrap();
    // The manifest lands but its put fails; the attempt's delete of it fails too.
    faulty.add_fault(Fault::LandThenFail {
        op: OpKind::PutBytes,
        nth: faulty.ops(OpKind::PutBytes) + 1,
    });
    faulty.add_fault(Fault::FailNth {
        op: OpKind::Delete,
        nth: faulty.ops(OpKind::Delete) + 1,
    });
    assert!(b.checkpoint(2).is_err());
    faulty.clear_faults();
    let id = b.backend_id().to_string();
    assert!(
        local.get_bytes(&layout::metadata_name(2, &id)).is_ok(),
        "the stray manifest is still there"
    );
    // It names only files that exist.
    assert_verified(local.as_ref());
    // Checkpoint 1 is what a restore finds.
    let restored = restore_from(local.clone(), &dir.path().join("r"), RestoreFrom::Latest).unwrap();
    assert_eq!(restored.last_completed_checkpoint(), Some(1));
    assert_eq!(read_all(&restored), model_1);
    drop(restored);

    // A reopened backend reuses from checkpoint 1, not from the failed 2.
    drop(b);
    let b = open();
    assert_eq!(b.last_completed_checkpoint(), Some(1));
    random_writes(&b, &mut model, &mut r, 500);
    let stats = b.checkpoint(3).unwrap();
    assert!(stats.files_reused > 0, "{stats:?}");
    b.notify_checkpoint_complete(3).unwrap();
    assert_verified(local.as_ref());
    // Nothing of the failed attempt is left: its directory and its shared uploads.
    let leftovers: Vec<String> = local
        .list("")
        .unwrap()
        .into_iter()
        .map(|o| o.name)
        .filter(|n| {
            n.starts_with("chk-2/")
                || layout::parse_shared_name(n).and_then(|s| s.checkpoint_id) == Some(2)
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let restored =
        restore_from(local.clone(), &dir.path().join("r3"), RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model);
}

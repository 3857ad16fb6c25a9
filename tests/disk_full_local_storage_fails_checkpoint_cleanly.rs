//! The LocalStorage directory runs out of space while a checkpoint uploads: the checkpoint
//! fails with a typed error, storage holds nothing the attempt put (or only what one sweep
//! removes), and once space is freed the next checkpoint completes and restores exactly.

#[path = "checkpoint_common/mod.rs"]
mod common;
#[path = "disk_common/mod.rs"]
mod disk;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use rockstate::{CheckpointOptions, ErrorKind, LocalStorage, RestoreFrom};

#[test]
fn a_checkpoint_into_a_full_local_storage_is_typed_and_the_next_one_restores_exactly() {
    let fs = disk::SmallFs::mount(64);
    let local = Arc::new(LocalStorage::new(fs.path("storage")).unwrap());
    let fx = Fixture {
        local: Some(local.clone()),
        ..Fixture::with_storage(local.clone())
    };
    let b = fx.open("a", CheckpointOptions::default());
    let mut model = Model::new();
    let mut r = rng(7);
    random_writes(&b, &mut model, &mut r, 20_000);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    let before = fx.objects();

    random_writes(&b, &mut model, &mut r, 20_000);
    fs.fill();
    let e = b
        .checkpoint(2)
        .expect_err("checkpoint into a full storage succeeded");
    eprintln!("checkpoint 2: kind {:?}: {e}", e.kind());
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    // The failed attempt took back what it put; no temporary file of it is left either.
    let after: Vec<String> = fx.objects().into_keys().collect();
    let before_names: Vec<String> = before.keys().cloned().collect();
    assert_eq!(after, before_names, "objects left by the failed attempt");
    assert_eq!(
        disk::files_under(&fs.path("storage/.tmp")),
        Vec::<String>::new(),
        "temporary files of failed puts"
    );
    // Its staging directory is gone.
    let staging = fx.dir.path().join(".rockstate-staging");
    let left: Vec<String> = disk::files_under(&staging)
        .into_iter()
        .filter(|f| f.contains("snap-"))
        .collect();
    assert!(
        left.is_empty(),
        "staging left by the failed attempt: {left:?}"
    );

    fs.free();
    random_writes(&b, &mut model, &mut r, 1000);
    b.checkpoint(3).unwrap();
    b.notify_checkpoint_complete(3).unwrap();
    b.sweep_orphans(Duration::ZERO).unwrap();
    assert_eq!(assert_verified(fx.storage.as_ref()), Vec::<String>::new());

    let restored = fx.restore("restored", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model);
}

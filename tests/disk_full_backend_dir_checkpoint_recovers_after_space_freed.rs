//! The backend's filesystem (its directory and the default staging directory beside it) is
//! full when a checkpoint's sync phase flushes: a typed error, and once space is freed the
//! backend checkpoints again and the checkpoint restores exactly; nothing of the failed
//! attempt stays in storage after a sweep, nor in staging.

#[path = "checkpoint_common/mod.rs"]
mod common;
#[path = "disk_common/mod.rs"]
mod disk;

use std::time::Duration;

use common::*;
use rockstate::{CheckpointOptions, ErrorKind, KeyedBackend, RestoreFrom};

#[test]
fn a_checkpoint_on_a_full_backend_filesystem_is_typed_and_a_later_one_restores_exactly() {
    let fs = disk::SmallFs::mount(64);
    let fx = Fixture::new();
    let b = KeyedBackend::builder(fs.path("a"))
        .options(small_options())
        .checkpoint_storage(fx.storage_dyn())
        .checkpoint_options(CheckpointOptions::default())
        .open()
        .unwrap();
    let mut model = Model::new();
    let mut r = rng(11);
    random_writes(&b, &mut model, &mut r, 20_000);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();

    random_writes(&b, &mut model, &mut r, 20_000);
    fs.fill();
    let e = b
        .checkpoint(2)
        .expect_err("a checkpoint on a full filesystem succeeded");
    eprintln!("checkpoint 2: kind {:?}: {e}", e.kind());
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    fs.free();

    // Each try is a new checkpoint id (a failed sync phase used its id).
    let mut id = 2;
    let (stats, _) = disk::retry_until_recovered("checkpoint", || {
        id += 1;
        b.checkpoint(id)
    });
    b.notify_checkpoint_complete(stats.checkpoint_id).unwrap();
    b.sweep_orphans(Duration::ZERO).unwrap();
    assert_eq!(assert_verified(fx.storage.as_ref()), Vec::<String>::new());
    let staging: Vec<String> = disk::files_under(&fs.path(".rockstate-staging"))
        .into_iter()
        .filter(|f| f.contains("snap-"))
        .collect();
    assert!(
        staging.is_empty(),
        "staging directories of failed attempts: {staging:?}"
    );
    let restored = fx.restore("restored", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model);
}

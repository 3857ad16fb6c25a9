//! The staging directory (`CheckpointOptions::staging_dir`, here on a filesystem of its own,
//! where RocksDB's checkpoint copies instead of linking) runs out of space in a checkpoint's
//! sync phase: a typed error, nothing left in staging or storage that one sweep does not
//! remove, and after space is freed the next checkpoint completes and restores exactly.

#[path = "checkpoint_common/mod.rs"]
mod common;
#[path = "disk_common/mod.rs"]
mod disk;

use std::time::Duration;

use common::*;
use rockstate::{CheckpointOptions, ErrorKind, KeyedBackend, RestoreFrom};

#[test]
fn a_full_staging_directory_fails_the_sync_phase_typed_and_the_next_checkpoint_restores_exactly() {
    let fs = disk::SmallFs::mount(64);
    let fx = Fixture::new();
    let opts = CheckpointOptions {
        staging_dir: Some(fs.path("staging")),
        ..CheckpointOptions::default()
    };
    let b = KeyedBackend::builder(fx.path("a"))
        .options(small_options())
        .checkpoint_storage(fx.storage_dyn())
        .checkpoint_options(opts.clone())
        .open()
        .unwrap();
    let mut model = Model::new();
    let mut r = rng(9);
    random_writes(&b, &mut model, &mut r, 20_000);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    let before: Vec<String> = fx.objects().into_keys().collect();
    let staging_before = disk::files_under(&fs.path("staging"));

    random_writes(&b, &mut model, &mut r, 20_000);
    fs.fill();
    let e = b
        .checkpoint(2)
        .expect_err("checkpoint with a full staging directory succeeded");
    eprintln!("checkpoint 2: kind {:?}: {e}", e.kind());
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    let after: Vec<String> = fx.objects().into_keys().collect();
    assert_eq!(after, before, "objects left by the failed attempt");
    let staging_after = fs.files_besides_filler(&fs.path("staging"));
    assert_eq!(
        staging_after, staging_before,
        "staging left by the failed attempt"
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

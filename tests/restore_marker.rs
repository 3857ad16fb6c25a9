//! A restore that dies leaves its marker in the target directory: such a directory is never
//! opened as a backend (it may hold half the files), and a new restore into it starts over
//! and succeeds. The marker is gone after a restore that finished.

#[path = "checkpoint_common/mod.rs"]
mod common;

use common::*;
use rockstate::{CheckpointOptions, Error, KeyedBackend, RestoreFrom};

#[test]
fn a_half_restored_directory_is_never_opened_and_restoring_again_works() {
    let fx = Fixture::new();
    let b = fx.open("a", CheckpointOptions::default());
    let mut model = Model::new();
    random_writes(&b, &mut model, &mut rng(30), 3000);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();

    // What a restore killed halfway leaves: the marker and some of the files.
    let target = fx.path("restored");
    let done = fx.restore("complete", RestoreFrom::Latest).unwrap();
    drop(done);
    std::fs::create_dir_all(&target).unwrap();
    let mut copied = 0;
    for e in std::fs::read_dir(fx.path("complete")).unwrap().flatten() {
        let name = e.file_name().into_string().unwrap();
        if name.ends_with(".sst") && copied < 2 {
            std::fs::copy(e.path(), target.join(&name)).unwrap();
            copied += 1;
        }
    }
    assert!(copied > 0);
    std::fs::write(target.join(".rockstate-restore-incomplete"), b"").unwrap();
    assert!(!fx
        .path("complete")
        .join(".rockstate-restore-incomplete")
        .exists());

    let opened = KeyedBackend::builder(&target)
        .options(small_options())
        .checkpoint_storage(fx.storage_dyn())
        .open();
    assert!(
        matches!(opened, Err(Error::RestoreIncomplete(_))),
        "{opened:?}"
    );

    let restored = fx.restore("restored", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model);
    drop(restored);
    assert!(!target.join(".rockstate-restore-incomplete").exists());
    let reopened = KeyedBackend::builder(&target)
        .options(small_options())
        .checkpoint_storage(fx.storage_dyn())
        .open()
        .unwrap();
    assert_eq!(read_all(&reopened), model);
}

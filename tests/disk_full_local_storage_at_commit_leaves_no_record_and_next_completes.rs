//! The LocalStorage directory fills up between a checkpoint's upload and its completion: the
//! job record's put fails with a typed error and no record (nor a temporary file of it) is
//! left; after space is freed the next checkpoint completes, restores exactly, and the
//! failed one's objects are gone after one sweep.

#[path = "checkpoint_common/mod.rs"]
mod common;
#[path = "disk_common/mod.rs"]
mod disk;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use rockstate::checkpoint::layout;
use rockstate::{CheckpointOptions, LocalStorage, RestoreFrom};

#[test]
fn a_job_record_put_into_a_full_storage_is_typed_and_the_next_checkpoint_completes() {
    let fs = disk::SmallFs::mount(64);
    let local = Arc::new(LocalStorage::new(fs.path("storage")).unwrap());
    let fx = Fixture {
        local: Some(local.clone()),
        ..Fixture::with_storage(local.clone())
    };
    let b = fx.open("a", CheckpointOptions::default());
    let mut model = Model::new();
    let mut r = rng(13);
    random_writes(&b, &mut model, &mut r, 20_000);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    let model1 = model.clone();

    random_writes(&b, &mut model, &mut r, 5000);
    b.checkpoint(2).unwrap();
    fs.fill();
    let e = b
        .notify_checkpoint_complete(2)
        .expect_err("a commit into a full storage succeeded");
    eprintln!("complete 2: kind {:?}: {e}", e.kind());
    assert!(
        !fx.storage.exists(&layout::job_record_name(2)).unwrap(),
        "a job record of the failed commit"
    );
    assert_eq!(
        disk::files_under(&fs.path("storage/.tmp")),
        Vec::<String>::new()
    );
    fs.free();
    // What a restart would restore now: checkpoint 1.
    let r1 = fx.restore("r1", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&r1), model1);
    drop(r1);

    random_writes(&b, &mut model, &mut r, 1000);
    b.checkpoint(3).unwrap();
    b.notify_checkpoint_complete(3).unwrap();
    b.sweep_orphans(Duration::ZERO).unwrap();
    assert_eq!(assert_verified(fx.storage.as_ref()), Vec::<String>::new());
    let left: Vec<String> = fx
        .objects()
        .into_keys()
        .filter(|n| n.starts_with("chk-2/"))
        .collect();
    assert!(
        left.is_empty(),
        "objects of checkpoint 2 after a sweep: {left:?}"
    );
    let restored = fx.restore("restored", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model);
}

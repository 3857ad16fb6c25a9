//! The LocalStorage directory runs out of space:
//! - while a checkpoint uploads: the checkpoint fails with a typed error, storage holds
//!   nothing the attempt put (nor a temporary file of it), its staging directory is gone;
//! - between a checkpoint's upload and its completion: the job record's put fails with a
//!   typed error and no record (nor a temporary file of it) is left; a restore then gets the
//!   checkpoint before.
//!
//! Either way, once space is freed the next checkpoint completes, one sweep leaves storage
//! verified and without the failed attempt's objects, and a restore gives exactly the state.

#[path = "checkpoint_common/mod.rs"]
mod common;
#[path = "disk_common/mod.rs"]
mod disk;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use rand::rngs::SmallRng;
use rockstate::checkpoint::layout;
use rockstate::{CheckpointOptions, ErrorKind, KeyedBackend, LocalStorage, RestoreFrom};

/// A backend checkpointing into LocalStorage on a small filesystem, checkpoint 1 completed.
fn setup(seed: u64) -> (disk::SmallFs, Fixture, KeyedBackend, Model, SmallRng) {
    let fs = disk::SmallFs::mount(64);
    let local = Arc::new(LocalStorage::new(fs.path("storage")).unwrap());
    let fx = Fixture {
        local: Some(local.clone()),
        ..Fixture::with_storage(local)
    };
    let b = fx.open("a", CheckpointOptions::default());
    let mut model = Model::new();
    let mut r = rng(seed);
    random_writes(&b, &mut model, &mut r, 20_000);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    (fs, fx, b, model, r)
}

/// With space back: checkpoint 3 completes, a sweep leaves storage verified and without
/// anything of checkpoint 2, and a restore gives `model` and the writes made here.
fn next_checkpoint_restores_exactly(
    fx: &Fixture,
    b: &KeyedBackend,
    mut model: Model,
    r: &mut SmallRng,
) {
    random_writes(b, &mut model, r, 1000);
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

#[test]
fn a_checkpoint_into_a_full_local_storage_is_typed_and_the_next_one_restores_exactly() {
    let (fs, fx, b, mut model, mut r) = setup(7);
    let before: Vec<String> = fx.objects().into_keys().collect();
    random_writes(&b, &mut model, &mut r, 20_000);
    fs.fill();
    let e = b
        .checkpoint(2)
        .expect_err("checkpoint into a full storage succeeded");
    eprintln!("checkpoint 2: kind {:?}: {e}", e.kind());
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    // The failed attempt took back what it put; no temporary file of it is left either.
    let after: Vec<String> = fx.objects().into_keys().collect();
    assert_eq!(after, before, "objects left by the failed attempt");
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
    next_checkpoint_restores_exactly(&fx, &b, model, &mut r);
}

#[test]
fn a_job_record_put_into_a_full_storage_is_typed_and_the_next_checkpoint_completes() {
    let (fs, fx, b, mut model, mut r) = setup(13);
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
    next_checkpoint_restores_exactly(&fx, &b, model, &mut r);
}

//! The backend's filesystem (its directory and the default staging directory beside it) is
//! full when a checkpoint's sync phase flushes: a typed error, and once space is freed the
//! backend checkpoints again and the checkpoint restores exactly; nothing of the failed
//! attempt stays in storage after a sweep, nor in staging.

#[path = "checkpoint_common/mod.rs"]
mod common;
#[path = "disk_common/mod.rs"]
mod disk;

use std::time::{Duration, Instant};

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

    // RocksDB leaves its stopped state once it sees free space again (it polls): retry
    // without asserting on how long that takes.
    let start = Instant::now();
    let mut id = 3;
    let mut errors = Vec::new();
    let stats = loop {
        match b.checkpoint(id) {
            Ok(s) => break s,
            Err(e) => {
                errors.push(format!("{:?}: {e}", e.kind()));
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "no checkpoint 30 s after space was freed: {errors:?}"
                );
                std::thread::sleep(Duration::from_millis(200));
                id += 1;
            }
        }
    };
    eprintln!(
        "checkpoint {} after {:?}; errors before: {} (first {:?})",
        stats.checkpoint_id,
        start.elapsed(),
        errors.len(),
        errors.first()
    );
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

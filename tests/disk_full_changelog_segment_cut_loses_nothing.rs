//! Changelog mode: the staging directory is full when a log checkpoint's async phase writes
//! the segment its sync phase cut (the sync phase writes nothing, so it succeeds). The
//! checkpoint fails with a typed error; once space is
//! freed the next checkpoint still holds every change (invariant 20: a failed attempt loses
//! nothing) and restores exactly, and the failed cut leaves no file in the log directory once
//! a materialization covers everything.

#[path = "checkpoint_common/mod.rs"]
mod common;
#[path = "disk_common/mod.rs"]
mod disk;

use common::*;
use rockstate::{ErrorKind, KeyedBackend, RestoreFrom};

#[test]
fn a_full_staging_directory_in_a_log_checkpoint_loses_no_change_and_leaks_no_segment() {
    let fs = disk::SmallFs::mount(64);
    let fx = Fixture::new();
    let b = KeyedBackend::builder(fs.path("a"))
        .options(small_options())
        .checkpoint_storage(fx.storage_dyn())
        .checkpoint_options(changelog_options(1000))
        .open()
        .unwrap();
    let (mut model, mut r) = materialize_then_log(&b, 5, 5000, 1, 500);

    random_writes(&b, &mut model, &mut r, 500);
    fs.fill();
    // The sync phase only cuts the log, so it writes nothing and succeeds; the async phase
    // writes the segment and fails.
    let pending = b
        .snapshot(3)
        .expect("a log checkpoint's sync phase wrote to the full staging dir");
    let e = pending
        .upload()
        .expect_err("a log checkpoint into a full staging dir succeeded");
    eprintln!("checkpoint 3: kind {:?}: {e}", e.kind());
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    fs.free();

    random_writes(&b, &mut model, &mut r, 500);
    let stats = b.checkpoint(4).unwrap();
    eprintln!("checkpoint 4 materialized: {}", stats.materialized);
    b.notify_checkpoint_complete(4).unwrap();
    let restored = fx.restore("restored", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model, "restore of checkpoint 4");
    drop(restored);

    // Checkpoint 4 materialized (the failed cut left a gap in the log): it covers every
    // change, so no segment file is needed any more.
    assert!(stats.materialized, "checkpoint 4 built on a log with a gap");
    let log_dir = fs
        .path(".rockstate-staging")
        .join(b.backend_id())
        .join("log");
    assert_eq!(
        disk::files_under(&log_dir),
        Vec::<String>::new(),
        "segment files left after a materialization covered everything"
    );
}

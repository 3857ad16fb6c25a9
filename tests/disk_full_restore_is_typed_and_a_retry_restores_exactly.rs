//! A restore into a filesystem without room for the checkpoint, plain and in changelog mode
//! (the download, the log tables or the replay runs out of space midway): a typed error, the
//! target left empty or holding the restore marker (never opened as a backend), and a retry
//! after freeing space restores exactly (docs/ownership.md §3 rule 7). A restore that finds
//! just enough room restores exactly too.

#[path = "checkpoint_common/mod.rs"]
mod common;
#[path = "disk_common/mod.rs"]
mod disk;

use common::*;
use rockstate::{CheckpointOptions, Error, ErrorKind, KeyedBackend, RestoreFrom};

/// Restores into `fs` with `free` bytes left on it (`what` names the case); whether the
/// restore failed (and a retry then restored exactly).
fn check(fx: &Fixture, fs: &disk::SmallFs, model: &Model, free: u64, what: &str) -> bool {
    let target = fs.path(what);
    fs.leave_free(free);
    let e = match restore_from(fx.storage_dyn(), &target, RestoreFrom::Latest) {
        Ok(b) => {
            eprintln!("{what}: restore with {free} bytes free succeeded");
            assert_eq!(&read_all(&b), model, "{what}");
            b.close().unwrap();
            fs.free();
            std::fs::remove_dir_all(&target).unwrap();
            return false;
        }
        Err(e) => e,
    };
    eprintln!(
        "{what}: restore with {free} bytes free: kind {:?}: {e}",
        e.kind()
    );
    assert_eq!(e.kind(), ErrorKind::Io, "{what}: {e}");
    // Empty, gone, or marked: never a backend.
    let left = disk::files_under(&target);
    eprintln!("{what}: left in the target: {left:?}");
    if target.exists() && !left.is_empty() {
        let opened = KeyedBackend::builder(&target)
            .options(small_options())
            .open();
        assert!(
            matches!(opened, Err(Error::RestoreIncomplete(_))),
            "{what}: half-restored target opened: {:?}",
            opened.map(|_| ())
        );
    }
    fs.free();
    let restored = restore_from(fx.storage_dyn(), &target, RestoreFrom::Latest).unwrap();
    assert_eq!(&read_all(&restored), model, "{what}");
    restored.close().unwrap();
    std::fs::remove_dir_all(&target).unwrap();
    true
}

#[test]
fn a_restore_into_a_full_disk_is_typed_and_a_retry_restores_exactly() {
    let fs = disk::SmallFs::mount(64);
    let fx = Fixture::new();
    let b = fx.open(
        "a",
        CheckpointOptions {
            local_recovery: false,
            ..CheckpointOptions::default()
        },
    );
    let mut model = Model::new();
    let mut r = rng(3);
    random_writes(&b, &mut model, &mut r, 30_000);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    let bytes: u64 = fx
        .manifest(1, b.backend_id())
        .shared_files
        .iter()
        .map(|f| f.size)
        .sum();
    eprintln!("checkpoint holds {bytes} bytes of SSTs");
    // No room at all; room for about half the files; room for the files but hardly more.
    for (free, what) in [
        (0, "none"),
        (bytes / 2, "half"),
        (bytes + (64 << 10), "files-only"),
    ] {
        assert!(
            check(&fx, &fs, &model, free, what),
            "{what}: a restore into {free} free bytes succeeded"
        );
    }
}

#[test]
fn a_changelog_restore_into_a_full_disk_is_typed_and_a_retry_restores_exactly() {
    let fs = disk::SmallFs::mount(64);
    let fx = Fixture::new();
    let b = fx.open("a", changelog_options(1000));
    let (model, _) = materialize_then_log(&b, 21, 20_000, 3, 2000);
    let bytes: u64 = fx
        .objects()
        .iter()
        .filter(|(n, _)| n.starts_with("shared/"))
        .map(|(_, v)| v.len() as u64)
        .sum();
    eprintln!("storage holds {bytes} bytes of shared files");
    let frees = [0, bytes / 4, bytes / 2]
        .into_iter()
        .chain((0..24).map(|i| bytes + bytes * i / 16));
    for (i, free) in frees.enumerate() {
        check(&fx, &fs, &model, free, &format!("case-{i}"));
    }
}

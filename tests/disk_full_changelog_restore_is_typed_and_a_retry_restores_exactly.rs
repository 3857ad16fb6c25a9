//! Changelog mode: a restore that replays log segments into a filesystem without room for
//! them (download, log tables, replay): a typed error, the target left empty or holding the restore marker (never
//! opened as a backend), and a retry after freeing space restores exactly
//! (docs/ownership.md §3 rule 7).

#[path = "checkpoint_common/mod.rs"]
mod common;
#[path = "disk_common/mod.rs"]
mod disk;

use common::*;
use rockstate::{Error, ErrorKind, KeyedBackend, RestoreFrom};

fn check(fx: &Fixture, fs: &disk::SmallFs, model: &Model, free: u64, what: &str) {
    let target = fs.path(what);
    fs.leave_free(free);
    let e = match restore_from(fx.storage_dyn(), &target, RestoreFrom::Latest) {
        Ok(b) => {
            eprintln!("{what}: restore with {free} bytes free succeeded");
            assert_eq!(&read_all(&b), model, "{what}");
            b.close().unwrap();
            fs.free();
            std::fs::remove_dir_all(&target).unwrap();
            return;
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

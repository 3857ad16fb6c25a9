//! `rockstate inspect` and `rockstate verify` are read-only commands: they open the storage
//! without writing into it (`LocalStorage::open_existing`; `LocalStorage::new` creates
//! `<storage>/.tmp`), so they work on a read-only mount of a checkpoint storage (a snapshot,
//! an export, a forensic copy).

mod cli_fixture;

use cli_fixture::{code, rockstate, stderr, stdout};

fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn inspect_and_verify_leave_the_storage_directory_untouched() {
    let dir = tempfile::tempdir().unwrap();
    // A storage directory holding one stray object (no checkpoints yet).
    std::fs::write(dir.path().join("README"), b"checkpoints go here").unwrap();
    let before = entries(dir.path());
    for cmd in ["inspect", "verify"] {
        let o = rockstate(&[cmd, dir.path().to_str().unwrap()]);
        assert!(code(&o) <= 1, "{cmd}: {}{}", stdout(&o), stderr(&o));
        assert_eq!(
            entries(dir.path()),
            before,
            "`rockstate {cmd}` wrote into the storage it only reads"
        );
    }
}

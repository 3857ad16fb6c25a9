//! The heap backend does not use its builder's path (`BackendKind::Heap`: "Nothing is written
//! to the builder's path"; docs/heap-backend.md: "The builder's path is not used"), so the
//! marker of an unfinished RocksDB restore there (`RestoreIncomplete` for a RocksDB open)
//! does not stop it: an engine that switches a task to the heap backend at its old directory
//! (and restores it from a savepoint) opens it.

use rockstate::{BackendKind, KeyedBackend};

#[test]
fn heap_backend_opens_at_a_path_holding_a_killed_rocksdb_restore() {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("task-0");
    std::fs::create_dir_all(&task).unwrap();
    // What a RocksDB restore killed midway leaves (src/restore.rs `RESTORE_MARKER`).
    std::fs::write(task.join(".rockstate-restore-incomplete"), b"").unwrap();
    let opened = KeyedBackend::builder(&task).kind(BackendKind::Heap).open();
    assert!(
        opened.is_ok(),
        "the heap backend does not use its path, yet open failed: {:?}",
        opened.err()
    );
}

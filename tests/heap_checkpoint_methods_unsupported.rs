//! Every checkpoint method of a heap backend is a typed `Unsupported` (docs/heap-backend.md),
//! and a heap backend writes nothing to its path: closing and reopening it starts empty.

use std::sync::Arc;
use std::time::Duration;

use rockstate::operator_state::OperatorState;
use rockstate::{BackendKind, ErrorKind, KeyedBackend, LocalStorage, RestoreFrom};

#[test]
fn heap_checkpoint_methods_are_unsupported_and_nothing_is_persisted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("task");
    let b = KeyedBackend::builder(&path)
        .kind(BackendKind::Heap)
        .open()
        .unwrap();
    let v = b.value_state::<u32, (), u32>("v").unwrap();
    v.put(&1, &(), &1).unwrap();
    let unsupported = |r: Result<(), rockstate::Error>, what: &str| {
        let e = r.expect_err(what);
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{what}: {e}");
    };
    unsupported(b.snapshot(1).map(drop), "snapshot");
    unsupported(
        b.snapshot_with(1, &OperatorState::new()).map(drop),
        "snapshot_with",
    );
    unsupported(b.checkpoint(1).map(drop), "checkpoint");
    unsupported(
        b.checkpoint_with(1, &OperatorState::new()).map(drop),
        "checkpoint_with",
    );
    unsupported(
        b.notify_checkpoint_complete(1),
        "notify_checkpoint_complete",
    );
    unsupported(b.notify_checkpoint_aborted(1), "notify_checkpoint_aborted");
    unsupported(b.sweep_orphans(Duration::ZERO).map(drop), "sweep_orphans");
    unsupported(b.metrics().map(drop), "metrics");
    assert_eq!(b.last_completed_checkpoint(), None);
    assert!(b.retained_checkpoints().is_empty());
    let storage = Arc::new(LocalStorage::new(dir.path().join("cp")).unwrap());
    unsupported(
        KeyedBackend::builder(dir.path().join("r"))
            .kind(BackendKind::Heap)
            .checkpoint_storage(storage)
            .restore_with_report(RestoreFrom::Latest)
            .map(drop),
        "restore_with_report",
    );
    b.clone().close().unwrap();
    assert!(!path.exists(), "nothing written to the heap backend's path");
    assert_eq!(v.get(&1, &()).unwrap_err().kind(), ErrorKind::Closed);
    let again = KeyedBackend::builder(&path)
        .kind(BackendKind::Heap)
        .open()
        .unwrap();
    assert!(again.states().unwrap().is_empty());
}

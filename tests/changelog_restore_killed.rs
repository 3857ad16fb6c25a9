//! A process killed (`kill -9`) right after a plain restore of a changelog-mode checkpoint
//! returned, before any write, checkpoint or close: its directory reopens as the restored
//! backend. Such a restore changes the database only by ingestion (the log's tables, the
//! replayed segments' files, the new backend id last) and flushes nothing, so what it wrote
//! must be durable without a flush (WAL off: nothing left in a memtable survives the kill).

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::path::Path;
use std::sync::Arc;

use common::process::{kill_child_once_written, publish_and_wait_to_be_killed};
use common::*;
use rockstate::{CheckpointOptions, KeyedBackend, LocalStorage, RestoreFrom};

/// `<work dir>|<storage root>|<table_bytes>` of the child.
const CHILD_ENV: &str = "ROCKSTATE_CHANGELOG_RESTORE_KILLED_CHILD";

/// Changelog mode with a level-1 table once `table_bytes` of segments wait.
fn options(table_bytes: u64) -> CheckpointOptions {
    let mut o = changelog_options(100_000);
    o.changelog.table_bytes = table_bytes;
    o
}

fn builder(
    target: &Path,
    storage: Arc<LocalStorage>,
    table_bytes: u64,
) -> rockstate::BackendBuilder {
    KeyedBackend::builder(target)
        .options(small_options())
        .checkpoint_storage(storage)
        .checkpoint_options(options(table_bytes))
}

/// The source writes a materialization and three log checkpoints (with a map state
/// registered after the materialization); a child restores the last one and is killed; the
/// directory reopens with the child's new identity and exactly the checkpoint's state.
fn killed_after_restore_reopens_as_restored(table_bytes: u64, expect_tables: bool) {
    let fx = Fixture::new();
    let source = fx.open("a", options(table_bytes));
    let source_id = source.backend_id().to_string();
    let (mut model, mut r) = materialize_then_log(&source, 41, 4000, 2, 300);
    let map = source.map_state::<u32, (), u32, u64>("m").unwrap();
    for k in 0..50u32 {
        map.put(&k, &(), &(k % 3), &u64::from(k)).unwrap();
    }
    random_writes(&source, &mut model, &mut r, 300);
    assert!(!source.checkpoint(4).unwrap().materialized);
    source.notify_checkpoint_complete(4).unwrap();
    let tables = fx.manifest(4, &source_id).changelog.unwrap().tables.len();
    assert_eq!(tables > 0, expect_tables, "{tables} tables");
    drop(source);

    let work = fx.dir.path();
    let restored_id = kill_child_once_written(
        "restore_child",
        (
            CHILD_ENV,
            format!(
                "{}|{}|{table_bytes}",
                work.display(),
                fx.local_root().display()
            ),
        ),
        &work.join("restored-id"),
        &work.join("child.stderr"),
    );
    assert_ne!(restored_id, source_id);

    let storage = Arc::new(LocalStorage::new(fx.local_root()).unwrap());
    let reopened = builder(&work.join("target"), storage, table_bytes)
        .open()
        .unwrap();
    assert_eq!(reopened.backend_id(), restored_id);
    assert_eq!(read_all(&reopened), model);
    let map = reopened.map_state::<u32, (), u32, u64>("m").unwrap();
    for k in 0..50u32 {
        assert_eq!(map.get(&k, &(), &(k % 3)).unwrap(), Some(u64::from(k)));
    }
}

#[test]
fn killed_after_a_restore_through_log_tables() {
    killed_after_restore_reopens_as_restored(1, true);
}

#[test]
fn killed_after_a_restore_replaying_segments() {
    killed_after_restore_reopens_as_restored(u64::MAX, false);
}

/// Entry point of the child process; does nothing unless started by the tests above.
#[test]
#[ignore = "child process of the killed_after_* tests"]
fn restore_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.split('|');
    let (work, root, table_bytes) = (
        Path::new(parts.next().unwrap()),
        parts.next().unwrap(),
        parts.next().unwrap().parse::<u64>().unwrap(),
    );
    let storage = Arc::new(LocalStorage::new(root).unwrap());
    let restored = builder(&work.join("target"), storage, table_bytes)
        .restore(RestoreFrom::Latest)
        .unwrap();
    // Killed there, with the backend open and never closed.
    publish_and_wait_to_be_killed(&work.join("restored-id"), restored.backend_id());
}

//! `KeyedBackend::metrics`: RocksDB figures from properties and live files, checkpoint figures
//! recorded by uploads. (The tracing spans are tested alone in `tracing_spans.rs`: `tracing`
//! caches per call site whether anyone listens, so a checkpoint taken by another test of the
//! same process without a subscriber would hide the spans from a scoped one.)

use std::sync::Arc;

use rockstate::{KeyedBackend, LocalStorage};

fn backend(dir: &std::path::Path) -> KeyedBackend {
    let storage = Arc::new(LocalStorage::new(dir.join("cp")).unwrap().with_fsync(false));
    KeyedBackend::builder(dir.join("op"))
        .checkpoint_storage(storage)
        .open()
        .unwrap()
}

#[test]
fn rocksdb_and_checkpoint_figures() {
    let dir = tempfile::tempdir().unwrap();
    let b = backend(dir.path());
    let s = b.value_state::<u64, (), Vec<u8>>("v").unwrap();
    let empty = b.metrics().unwrap();
    // Opening persists the backend id: at most the metadata SST exists.
    let baseline = empty.rocksdb.sst_files();
    assert!(baseline <= 1, "{empty:?}");
    assert_eq!(empty.checkpoint.last_checkpoint_id, None);
    for k in 0..2000u64 {
        s.put(&k, &(), &vec![7u8; 100]).unwrap();
    }
    let m = b.metrics().unwrap().rocksdb;
    assert!(m.memtable_bytes > 200_000, "{m:?}");
    assert!(m.estimated_keys >= 1000, "{m:?}");
    b.flush().unwrap();
    let m = b.metrics().unwrap().rocksdb;
    assert!(m.sst_files() > baseline && m.sst_bytes() > 0, "{m:?}");
    assert!(m.levels.iter().all(|l| l.sst_files > 0));

    let st1 = b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    let c = b.metrics().unwrap().checkpoint;
    assert_eq!(c.last_checkpoint_id, Some(1));
    assert_eq!(c.last_completed, Some(1));
    assert_eq!(c.last_bytes_uploaded, st1.bytes_uploaded);
    assert_eq!(c.last_sync_duration, st1.sync_duration);
    assert_eq!(c.last_async_duration, st1.async_duration);
    let ssts = b.metrics().unwrap().rocksdb.sst_files();
    assert_eq!(
        c.shared_files_referenced, ssts,
        "every live SST is in the checkpoint"
    );
    assert_eq!(c.last_files_reused, 0);

    // Nothing changed: every SST is reused, only private files go up.
    let st2 = b.checkpoint(2).unwrap();
    let c = b.metrics().unwrap().checkpoint;
    assert_eq!(c.last_checkpoint_id, Some(2));
    assert_eq!(c.last_completed, Some(1));
    assert_eq!(c.last_files_reused, c.shared_files_referenced);
    assert_eq!(c.checkpoints_uploaded, 2);
    assert_eq!(
        c.total_bytes_uploaded,
        st1.bytes_uploaded + st2.bytes_uploaded
    );
    assert!(c.last_bytes_uploaded < st1.bytes_uploaded);
}

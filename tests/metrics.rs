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
    // Opening persists the backend id, registering a state its metadata (each flushed, so
    // a kill cannot leave a state's data without them): at most those two metadata SSTs.
    let baseline = empty.rocksdb.sst_files();
    assert!(baseline <= 2, "{empty:?}");
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

#[test]
fn pinned_index_and_filter_blocks_show_in_the_metrics() {
    use rockstate::{DbOptions, MemoryBudget, MemoryBudgetConfig};
    let pinned = |pin: bool| -> u64 {
        let dir = tempfile::tempdir().unwrap();
        // A budget of its own: the process-wide one is shared with the other tests.
        let b = KeyedBackend::builder(dir.path().join("op"))
            .options(DbOptions {
                pin_index_and_filter_blocks: pin,
                ..DbOptions::default()
            })
            .memory_budget(MemoryBudget::new(MemoryBudgetConfig::default()).unwrap())
            .open()
            .unwrap();
        let s = b.value_state::<u64, (), Vec<u8>>("v").unwrap();
        for k in 0..20_000u64 {
            s.put(&k, &(), &vec![(k % 251) as u8; 100]).unwrap();
        }
        b.flush().unwrap();
        b.compact_state("v").unwrap();
        b.wait_for_compactions().unwrap();
        assert_eq!(
            b.state_property("v", "rocksdb.num-files-at-level0")
                .unwrap(),
            Some(0),
            "the state's file left L0 (whose blocks are pinned either way)"
        );
        b.metrics().unwrap().rocksdb.block_cache_pinned_bytes
    };
    let (on, off) = (pinned(true), pinned(false));
    // 20,000 keys × 10 bloom bits alone are 25,000 bytes of filter, pinned only when on (the
    // compacted file is not in L0, whose blocks are pinned either way).
    assert!(on >= off + 20_000, "pinned on {on}, off {off}");
}

//! `KeyedBackend::metrics`: RocksDB figures from properties and live files, checkpoint figures
//! recorded by uploads, and the `tracing` spans around checkpoint phases.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rockstate::{KeyedBackend, LocalStorage};

fn backend(dir: &std::path::Path) -> KeyedBackend {
    let storage = Arc::new(LocalStorage::new(dir.join("cp")).unwrap().with_fsync(false));
    KeyedBackend::builder(dir.join("op"))
        .checkpoint_storage(storage)
        .open()
        .unwrap()
}

/// Serialises the tests of this file: tracing caches each callsite's interest, and a callsite
/// first hit on another thread while the span test installs its subscriber can keep a stale
/// "never" (the span test then misses a phase).
static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn rocksdb_and_checkpoint_figures() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
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

/// A subscriber that records the names of the spans created.
struct Recorder {
    names: Arc<Mutex<Vec<String>>>,
    next: AtomicU64,
}

impl tracing::Subscriber for Recorder {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        self.names
            .lock()
            .unwrap()
            .push(span.metadata().name().to_string());
        tracing::span::Id::from_u64(self.next.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn checkpoint_phases_have_spans() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let b = backend(dir.path());
    let s = b.value_state::<u64, (), u64>("v").unwrap();
    s.put(&1, &(), &1).unwrap();
    let names = Arc::new(Mutex::new(Vec::new()));
    let recorder = Recorder {
        names: names.clone(),
        next: AtomicU64::new(0),
    };
    tracing::subscriber::with_default(recorder, || {
        b.checkpoint(1).unwrap();
        b.notify_checkpoint_complete(1).unwrap();
        b.sweep_orphans(std::time::Duration::from_secs(3600))
            .unwrap();
    });
    let names = names.lock().unwrap().clone();
    for phase in [
        "checkpoint.sync",
        "checkpoint.upload",
        "checkpoint.manifest",
        "checkpoint.notify",
        "checkpoint.gc",
    ] {
        assert!(names.iter().any(|n| n == phase), "{phase} not in {names:?}");
    }
}

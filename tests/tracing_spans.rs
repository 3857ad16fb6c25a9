//! The `tracing` spans around checkpoint phases (sync, upload, manifest, notify, gc). Alone in
//! its own test binary: `tracing` caches per call site whether any subscriber listens, so a
//! checkpoint taken earlier in the same process without a subscriber would hide the spans from
//! the scoped one installed here.

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

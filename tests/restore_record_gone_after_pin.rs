//! A restore of a checkpoint that had a job record restores what the record names, or
//! nothing: a garbage pass that listed before the restore's pin landed may delete the record
//! (records go first; the pass then sees the pin and stops) after the restore checked it. The
//! manifests of that id are still there, but so may be attempts of the same id the job never
//! committed (a task that failed over uploads again), so the restore does not fall back to
//! them: `Checkpoint(id)` fails with `CheckpointNotFound`, `Latest` starts again with the newer
//! record.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use rockstate::checkpoint::layout;
use rockstate::{
    CheckpointOptions, CheckpointStorage, Error, KeyedBackend, ObjectDigest, ObjectInfo,
    RestoreFrom,
};

/// Deletes job record `id` just before the second listing of job records after a restore
/// pin was put: the restore's check after its pin sees the record, its selection does not.
#[derive(Debug)]
struct RecordGoesAfterPin {
    inner: Arc<dyn CheckpointStorage>,
    id: u64,
    /// Listings of job records since the pin (0: no pin yet, counting from 1).
    since_pin: AtomicUsize,
}

impl CheckpointStorage for RecordGoesAfterPin {
    fn put_file(&self, name: &str, local: &Path) -> rockstate::Result<ObjectDigest> {
        self.inner.put_file(name, local)
    }
    fn put_bytes(&self, name: &str, bytes: &[u8]) -> rockstate::Result<()> {
        if name.starts_with(layout::PIN_PREFIX) {
            self.since_pin.store(1, Ordering::SeqCst);
        }
        self.inner.put_bytes(name, bytes)
    }
    fn get_file(&self, name: &str, local: &Path) -> rockstate::Result<ObjectDigest> {
        self.inner.get_file(name, local)
    }
    fn get_bytes(&self, name: &str) -> rockstate::Result<Vec<u8>> {
        self.inner.get_bytes(name)
    }
    fn list(&self, prefix: &str) -> rockstate::Result<Vec<ObjectInfo>> {
        if prefix.starts_with(layout::JOB_PREFIX) {
            let n = self.since_pin.load(Ordering::SeqCst);
            if n > 0 {
                self.since_pin.store(n + 1, Ordering::SeqCst);
                if n == 2 {
                    self.inner.delete(&layout::job_record_name(self.id))?;
                }
            }
        }
        self.inner.list(prefix)
    }
    fn delete(&self, name: &str) -> rockstate::Result<()> {
        self.inner.delete(name)
    }
    fn sweep_incomplete(&self, now_ms: u64, min_age: Duration) -> rockstate::Result<usize> {
        self.inner.sweep_incomplete(now_ms, min_age)
    }
}

#[test]
fn a_checkpoint_whose_record_goes_after_the_pin_is_not_restored_from_bare_manifests() {
    let fx = Fixture::new();
    let a = fx.open("a", CheckpointOptions::default());
    let mut model = Model::new();
    random_writes(&a, &mut model, &mut rng(9), 2000);
    a.checkpoint(1).unwrap();
    a.notify_checkpoint_complete(1).unwrap();
    drop(a);
    let racing = Arc::new(RecordGoesAfterPin {
        inner: fx.storage_dyn(),
        id: 1,
        since_pin: AtomicUsize::new(0),
    });
    let restored = KeyedBackend::builder(fx.path("b"))
        .options(small_options())
        .checkpoint_storage(racing)
        .restore(RestoreFrom::Checkpoint(1));
    assert!(
        matches!(restored, Err(Error::CheckpointNotFound(_))),
        "{:?}",
        restored.map(|_| ())
    );
    // The pin is gone and nothing was restored into the target.
    assert!(fx.storage.list(layout::PIN_PREFIX).unwrap().is_empty());
    assert!(!fx.path("b").join("CURRENT").exists());
}

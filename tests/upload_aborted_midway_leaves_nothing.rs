//! `notify_checkpoint_aborted` for a checkpoint whose upload is still running (on another
//! thread): the upload stops and cleans up itself and returns `CheckpointAborted`; nothing it
//! put stays in storage (docs/ownership.md §1: the task deletes its own aborted attempts),
//! whatever object it was putting when the abort came, and no local copy stays.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use parking_lot::Mutex;
use rockstate::checkpoint::layout;
use rockstate::{
    CheckpointOptions, CheckpointStorage, ErrorKind, KeyedBackend, ObjectDigest, ObjectInfo,
};

type Hook = Box<dyn FnOnce() + Send>;

/// Runs a hook right before the put of one object.
struct Hooked {
    inner: Arc<dyn CheckpointStorage>,
    hook: Mutex<Option<(String, Hook)>>,
}

impl std::fmt::Debug for Hooked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hooked")
    }
}

impl Hooked {
    fn before(&self, name: &str) {
        let hook = {
            let mut h = self.hook.lock();
            match h.as_ref() {
                Some((n, _)) if n == name || n == "*" => h.take(),
                _ => None,
            }
        };
        if let Some((_, f)) = hook {
            f();
        }
    }
}

impl CheckpointStorage for Hooked {
    fn put_file(&self, name: &str, local: &Path) -> rockstate::Result<ObjectDigest> {
        self.before(name);
        self.inner.put_file(name, local)
    }
    fn put_bytes(&self, name: &str, bytes: &[u8]) -> rockstate::Result<()> {
        self.before(name);
        self.inner.put_bytes(name, bytes)
    }
    fn get_file(&self, name: &str, local: &Path) -> rockstate::Result<ObjectDigest> {
        self.inner.get_file(name, local)
    }
    fn get_bytes(&self, name: &str) -> rockstate::Result<Vec<u8>> {
        self.inner.get_bytes(name)
    }
    fn list(&self, prefix: &str) -> rockstate::Result<Vec<ObjectInfo>> {
        self.inner.list(prefix)
    }
    fn delete(&self, name: &str) -> rockstate::Result<()> {
        self.inner.delete(name)
    }
    fn exists(&self, name: &str) -> rockstate::Result<bool> {
        self.inner.exists(name)
    }
    fn sweep_incomplete(&self, now_ms: u64, min_age: Duration) -> rockstate::Result<usize> {
        self.inner.sweep_incomplete(now_ms, min_age)
    }
}

#[test]
fn an_abort_during_any_put_of_an_upload_leaves_nothing_of_it() {
    for which in ["first shared", "private", "manifest"] {
        let fx = Fixture::new();
        let hooked = Arc::new(Hooked {
            inner: fx.storage_dyn(),
            hook: Mutex::new(None),
        });
        let storage: Arc<dyn CheckpointStorage> = hooked.clone();
        let b = Arc::new(
            KeyedBackend::builder(fx.path("a"))
                .options(small_options())
                .checkpoint_storage(storage.clone())
                .checkpoint_options(CheckpointOptions {
                    transfer_threads: 1,
                    ..Default::default()
                })
                .open()
                .unwrap(),
        );
        let mut model = Model::new();
        let mut r = rng(7);
        random_writes(&b, &mut model, &mut r, 3000);
        b.checkpoint(1).unwrap();
        b.notify_checkpoint_complete(1).unwrap();
        let before = fx.objects();
        random_writes(&b, &mut model, &mut r, 3000);
        b.compact_state("v").unwrap();
        let p = b.snapshot(2).unwrap();
        let target = match which {
            "manifest" => layout::metadata_name(2, b.backend_id()),
            "private" => layout::private_name(2, b.backend_id(), "CURRENT"),
            _ => String::new(),
        };
        {
            let b = b.clone();
            let abort: Hook = Box::new(move || b.notify_checkpoint_aborted(2).unwrap());
            *hooked.hook.lock() = Some((target.clone(), abort));
        }
        if which == "first shared" {
            // Any name: hook on the first put whatever it is.
            let b2 = b.clone();
            let abort: Hook = Box::new(move || b2.notify_checkpoint_aborted(2).unwrap());
            *hooked.hook.lock() = Some(("*".into(), abort));
        }
        let up = p.upload();
        let after = fx.objects();
        let left: Vec<&String> = after.keys().filter(|k| !before.contains_key(*k)).collect();
        let local = layout::local_copy_dir(
            &layout::default_staging_root(&fx.path("a")),
            b.backend_id(),
            2,
        );
        assert!(
            matches!(&up, Err(e) if e.kind() == ErrorKind::Conflict || matches!(e, rockstate::Error::CheckpointAborted { .. }))
                && left.is_empty()
                && !local.exists(),
            "abort during the {which} put: upload {up:?}; left in storage {left:?}; local copy {}",
            local.exists()
        );
        // The backend goes on.
        b.checkpoint(3).unwrap();
        b.notify_checkpoint_complete(3).unwrap();
        assert_verified(fx.storage.as_ref());
    }
}

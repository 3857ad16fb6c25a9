//! A storage that runs a hook right before the put of one object: how a test acts at an
//! exact point of an upload (a commit, an abort, a kill); and that can leave objects out of
//! its listings, as a listing does that passed their place before they were put.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rockstate::{CheckpointStorage, ObjectDigest, ObjectInfo};

type Hook = Box<dyn FnOnce() + Send>;
type EveryHook = Arc<dyn Fn(&str) + Send + Sync>;

/// Delegates to `inner`; runs the hook set by [`Hooked::before_put`] once, before the put it
/// names, and the one set by [`Hooked::before_every_put`] before every put.
pub struct Hooked {
    inner: Arc<dyn CheckpointStorage>,
    hook: Mutex<Option<(String, Hook)>>,
    every: Mutex<Option<EveryHook>>,
    /// Prefixes whose objects listings leave out.
    unlisted: Mutex<Vec<String>>,
}

impl std::fmt::Debug for Hooked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hooked")
    }
}

impl Hooked {
    /// `inner` with no hook yet.
    pub fn new(inner: Arc<dyn CheckpointStorage>) -> Arc<Hooked> {
        Arc::new(Hooked {
            inner,
            hook: Mutex::new(None),
            every: Mutex::new(None),
            unlisted: Mutex::new(Vec::new()),
        })
    }

    /// Leaves objects under `prefix` out of every listing from now on (reads, `exists` and
    /// deletes still reach them): a listing that passed their place before they were put.
    pub fn unlist(&self, prefix: impl Into<String>) {
        self.unlisted.lock().push(prefix.into());
    }

    /// Runs `f` with the object's name before every put from now on (on the putting thread;
    /// uploads put from several).
    pub fn before_every_put(&self, f: impl Fn(&str) + Send + Sync + 'static) {
        *self.every.lock() = Some(Arc::new(f));
    }

    /// Runs `f` once, right before the put of object `name` (`"*"`: of the next object put),
    /// replacing a hook not run yet.
    pub fn before_put(&self, name: impl Into<String>, f: impl FnOnce() + Send + 'static) {
        *self.hook.lock() = Some((name.into(), Box::new(f)));
    }

    fn before(&self, name: &str) {
        let every = self.every.lock().clone();
        if let Some(f) = every {
            f(name);
        }
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
        let unlisted = self.unlisted.lock().clone();
        let mut listed = self.inner.list(prefix)?;
        listed.retain(|o| !unlisted.iter().any(|u| o.name.starts_with(u.as_str())));
        Ok(listed)
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

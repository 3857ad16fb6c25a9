//! [`ScopedStorage`]: one job's namespace inside a larger checkpoint storage. Every name is
//! put under a fixed prefix (`jobs/<job id>/`, as Flink puts the job id into its checkpoint
//! path), so several jobs, or several runs of one program, share a bucket or directory
//! without ever seeing each other's checkpoints.
//!
//! This module owns only the name mapping; every operation goes to the inner storage.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::{validate_object_name, CheckpointStorage, ObjectDigest, ObjectInfo};
use crate::error::{Error, Result};

/// A [`CheckpointStorage`] that stores every object of its own under `prefix` in `inner`.
#[derive(Debug, Clone)]
pub struct ScopedStorage {
    inner: Arc<dyn CheckpointStorage>,
    prefix: String,
}

impl ScopedStorage {
    /// The namespace `prefix` of `inner`; `prefix` must be a valid object name and is used
    /// followed by `/`.
    pub fn new(inner: Arc<dyn CheckpointStorage>, prefix: &str) -> Result<ScopedStorage> {
        let prefix = prefix.trim_end_matches('/');
        validate_object_name(prefix)?;
        Ok(ScopedStorage {
            inner,
            prefix: format!("{prefix}/"),
        })
    }

    /// The namespace of job `job_id`: `jobs/<job_id>/`.
    pub fn for_job(inner: Arc<dyn CheckpointStorage>, job_id: &str) -> Result<ScopedStorage> {
        if job_id.is_empty() || job_id.contains('/') {
            return Err(Error::InvalidObjectName(job_id.to_string()));
        }
        ScopedStorage::new(inner, &format!("jobs/{job_id}"))
    }

    /// The prefix every object of this namespace has in the inner storage (ends in `/`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn full(&self, name: &str) -> Result<String> {
        validate_object_name(name)?;
        Ok(format!("{}{name}", self.prefix))
    }
}

impl CheckpointStorage for ScopedStorage {
    fn put_file(&self, name: &str, local: &Path) -> Result<ObjectDigest> {
        self.inner.put_file(&self.full(name)?, local)
    }

    fn put_bytes(&self, name: &str, bytes: &[u8]) -> Result<()> {
        self.inner.put_bytes(&self.full(name)?, bytes)
    }

    fn get_file(&self, name: &str, local: &Path) -> Result<ObjectDigest> {
        self.inner.get_file(&self.full(name)?, local)
    }

    fn get_file_durable(&self, name: &str, local: &Path) -> Result<ObjectDigest> {
        self.inner.get_file_durable(&self.full(name)?, local)
    }

    fn get_bytes(&self, name: &str) -> Result<Vec<u8>> {
        self.inner.get_bytes(&self.full(name)?)
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let full = format!("{}{prefix}", self.prefix);
        Ok(self
            .inner
            .list(&full)?
            .into_iter()
            .filter_map(|mut o| {
                o.name = o.name.strip_prefix(&self.prefix)?.to_string();
                Some(o)
            })
            .collect())
    }

    fn delete(&self, name: &str) -> Result<()> {
        self.inner.delete(&self.full(name)?)
    }

    fn exists(&self, name: &str) -> Result<bool> {
        self.inner.exists(&self.full(name)?)
    }

    fn sweep_incomplete(&self, now_ms: u64, min_age: Duration) -> Result<usize> {
        self.inner.sweep_incomplete(now_ms, min_age)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::LocalStorage;

    #[test]
    fn names_live_under_the_prefix_and_list_without_it() {
        let dir = tempfile::tempdir().unwrap();
        let root: Arc<dyn CheckpointStorage> = Arc::new(LocalStorage::new(dir.path()).unwrap());
        let a = ScopedStorage::for_job(Arc::clone(&root), "a").unwrap();
        let b = ScopedStorage::for_job(Arc::clone(&root), "b").unwrap();
        a.put_bytes("job/chk-1", b"x").unwrap();
        b.put_bytes("job/chk-1", b"y").unwrap();
        assert_eq!(a.get_bytes("job/chk-1").unwrap(), b"x");
        let names: Vec<String> = a.list("").unwrap().into_iter().map(|o| o.name).collect();
        assert_eq!(names, vec!["job/chk-1".to_string()]);
        assert!(root.get_bytes("jobs/b/job/chk-1").is_ok());
        a.delete("job/chk-1").unwrap();
        assert!(b.get_bytes("job/chk-1").is_ok());
        assert!(ScopedStorage::for_job(root, "x/y").is_err());
    }
}

//! The checkpoint storage seam: [`CheckpointStorage`], a small synchronous object-store-like
//! interface (create-if-absent puts, gets, prefix listing, idempotent deletes), and
//! its implementations.
//!
//! This module owns how bytes reach storage and come back; it knows nothing about checkpoints.
//! What the object names mean is owned by `checkpoint::layout`. Implementations:
//! [`LocalStorage`] (a directory), [`ObjectStorage`] (S3-compatible stores and in-memory, over
//! the `object_store` crate), [`ScopedStorage`] (one job's namespace `jobs/<id>/` inside
//! another storage) and, with the `testing` feature, `FaultyStorage` (a fault-injecting wrapper
//! for tests and fuzzing).
//! [`open_storage`] picks one from a URL.
//!
//! Rules every implementation must follow (the checkpoint code relies on them):
//! * A put never replaces an existing object: putting a name that exists is
//!   [`Error::ObjectExists`] and leaves the existing object unchanged (docs/architecture.md
//!   §8, invariant 5). A put is atomic: readers see the whole object or nothing.
//! * A put returns the size and CRC-32 of exactly the bytes stored; a get returns them for the
//!   bytes fetched, so callers verify without reading twice.
//! * Deleting a missing object succeeds.
//! * Object names are relative, `/`-separated, with non-empty components other than `.` and
//!   `..` (checked by [`validate_object_name`]).

#[cfg(feature = "testing")]
mod faults;
mod local;
mod object;
mod s3_requests;
mod scoped;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

#[cfg(feature = "testing")]
pub use faults::{Fault, FaultyStorage, OpKind};
pub use local::LocalStorage;
pub use object::{ObjectStorage, ObjectStorageOptions};
pub use scoped::ScopedStorage;

use crate::error::{Error, Result};

/// fsyncs the directory `dir`, so that its entries (files created, linked or removed in it)
/// are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, e))
}

/// Takes an exclusive, non-blocking `flock` on `path` (created if missing); `None` if another
/// open file holds it.
pub(crate) fn try_lock(path: &Path) -> Option<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .ok()?;
    lock_file(&file)?;
    Some(file)
}

/// An exclusive, non-blocking `flock` on the open file `file`; `None` if another holds it.
fn lock_file(file: &std::fs::File) -> Option<()> {
    #[cfg(unix)]
    {
        use std::os::unix::io::AsRawFd;
        // SAFETY: flock on a descriptor `file` owns; no memory is shared with the kernel.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            return None;
        }
    }
    Some(())
}

/// Whether the open file `file` is the one now at `path` (a sweep may have unlinked it, and
/// another file may sit under the name).
fn is_at(file: &std::fs::File, path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let (Ok(held), Ok(now)) = (file.metadata(), std::fs::metadata(path)) else {
            return false;
        };
        (held.dev(), held.ino()) == (now.dev(), now.ino())
    }
    #[cfg(not(unix))]
    {
        let _ = (file, path);
        true
    }
}

/// [`try_lock`], kept only if the lock is on the file now at `path`. A sweep removing a gone
/// backend's staging directory unlinks its lock file while holding the lock; a lock taken
/// afterwards on the file it unlinked (opened before) holds nothing, and is given up.
pub(crate) fn lock_in_place(path: &Path) -> Option<std::fs::File> {
    let file = try_lock(path)?;
    is_at(&file, path).then_some(file)
}

/// Locks `file`, just created at `path`, through a duplicate of its descriptor (the returned
/// guard), kept only if it is still the file at `path`. Locking by name instead would, if a
/// sweep of unlocked files removed it in between, create and lock a new empty file under the
/// name while the caller writes into the removed one.
pub(crate) fn lock_created(file: &std::fs::File, path: &Path) -> Option<std::fs::File> {
    let guard = file.try_clone().ok()?;
    lock_file(&guard)?;
    is_at(&guard, path).then_some(guard)
}

/// Held by every section of this process that takes staging locks to judge whether a
/// backend is gone and removes what it left, and by a backend creating and locking its
/// staging directory: such sections never interleave within a process, so a check holding
/// a lock for an instant never makes another section skip a gone backend, nor remove a
/// directory a backend is about to lock. (Across processes, [`lock_in_place`] and retries
/// cover the second.)
pub(crate) static STAGING_SWEEPS: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

/// One object found by [`CheckpointStorage::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Object name under the storage root.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// Last modification (creation, since objects are immutable) time.
    pub last_modified: SystemTime,
}

/// Size and CRC-32 (IEEE, `crc32fast`) of the bytes a put stored or a get fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectDigest {
    /// Number of bytes.
    pub size: u64,
    /// CRC-32 of those bytes.
    pub crc32: u32,
}

/// Where checkpoints are stored. Synchronous: the checkpoint code calls it from its own
/// transfer threads. See the module docs for the contract.
pub trait CheckpointStorage: Send + Sync + std::fmt::Debug {
    /// Stores the local file `local` as object `name`, create-if-absent and atomically. The
    /// caller must have made `local`'s content durable (fsynced; RocksDB does so for every
    /// file of a checkpoint) and must never write it again (it may only unlink it): a storage
    /// on the same filesystem may share its inode ([`LocalStorage`] hard-links it). The object may become
    /// durable against power loss only when a later [`CheckpointStorage::put_bytes`] on the
    /// same storage returns (a checkpoint's manifest always follows its files).
    fn put_file(&self, name: &str, local: &Path) -> Result<ObjectDigest>;

    /// Stores `bytes` as object `name`, create-if-absent and atomically.
    fn put_bytes(&self, name: &str, bytes: &[u8]) -> Result<()>;

    /// Copies object `name` into the new local file `local` (which must not exist).
    fn get_file(&self, name: &str, local: &Path) -> Result<ObjectDigest>;

    /// [`CheckpointStorage::get_file`], and the content of `local` is durable when it returns
    /// (its directory entry is the caller's to sync). The default gets the file and fsyncs
    /// it. A storage whose get shares the object's own durable bytes (a hard link) may skip
    /// the fsync, as RocksDB's checkpoints link SSTs and sync only their directory: the
    /// fsync of a linked file still costs a journal commit and a device cache flush.
    fn get_file_durable(&self, name: &str, local: &Path) -> Result<ObjectDigest> {
        let digest = self.get_file(name, local)?;
        std::fs::File::open(local)
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::io(local, e))?;
        Ok(digest)
    }

    /// Reads the whole object `name`.
    fn get_bytes(&self, name: &str) -> Result<Vec<u8>>;

    /// Every object whose name starts with `prefix` (a plain string prefix), in no particular
    /// order.
    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>>;

    /// Deletes object `name`; deleting a missing object succeeds.
    fn delete(&self, name: &str) -> Result<()>;

    /// Whether object `name` exists, read-after-write consistent (a stored object is seen
    /// even where listings lag). The default lists `name` as a prefix.
    fn exists(&self, name: &str) -> Result<bool> {
        Ok(self.list(name)?.iter().any(|o| o.name == name))
    }

    /// Removes leftovers of puts that never finished (temporary files, unfinished multipart
    /// uploads) last modified `min_age` or longer before `now_ms` (the caller's clock,
    /// milliseconds since the Unix epoch: storage never reads the wall clock); returns how
    /// many. The default has nothing to remove.
    fn sweep_incomplete(&self, now_ms: u64, min_age: Duration) -> Result<usize> {
        let _ = (now_ms, min_age);
        Ok(0)
    }
}

/// Checks that `name` is a valid object name (see the module docs).
pub fn validate_object_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 1024
        && !name.contains(['\\', '\0'])
        && name
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..");
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidObjectName(name.to_string()))
    }
}

/// Opens the checkpoint storage a URL names:
/// * `file:///abs/path` or a plain path: [`LocalStorage`] (a path starting `s3:`, `memory:`
///   or `file:` without `//` is refused as a mistyped URL);
/// * `s3://bucket/prefix`: [`ObjectStorage`] on S3 or an S3-compatible server; endpoint,
///   region and credentials come from the environment (`AWS_ENDPOINT_URL`, `AWS_REGION`,
///   `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, ...) and are overridden by
///   `options` (see [`ObjectStorageOptions`]);
/// * `memory://`: an in-memory [`ObjectStorage`] (tests, benchmarks).
pub fn open_storage(
    url: &str,
    options: &ObjectStorageOptions,
) -> Result<Arc<dyn CheckpointStorage>> {
    if let Some(path) = url.strip_prefix("file://") {
        if !path.starts_with('/') {
            return Err(Error::InvalidStorageUrl {
                url: url.to_string(),
                detail: "a file URL needs an absolute path (file:///dir)".into(),
            });
        }
        return Ok(Arc::new(LocalStorage::new(path)?));
    }
    if url.contains("://") {
        return Ok(Arc::new(ObjectStorage::open(url, options)?));
    }
    if url.is_empty() {
        return Err(Error::InvalidStorageUrl {
            url: String::new(),
            detail: "empty".into(),
        });
    }
    // `s3:/bucket` or `s3:bucket` is a mistyped URL, not a directory to create here: the
    // checkpoints (or a benchmark's figures) would land on local disk unnoticed.
    if let Some((scheme, _)) = url.split_once(':') {
        if ["s3", "memory", "file"]
            .iter()
            .any(|s| s.eq_ignore_ascii_case(scheme))
        {
            return Err(Error::InvalidStorageUrl {
                url: url.to_string(),
                detail: format!("did you mean {}://...?", scheme.to_ascii_lowercase()),
            });
        }
    }
    Ok(Arc::new(LocalStorage::new(Path::new(url))?))
}

//! Shared SST files fetched once for all the restores of one process.
//!
//! The instances of a job that run in one process (timely's workers are threads of one
//! process; an engine may host several tasks) restore from the same checkpoint after a
//! failure or a rescale, and a rescale gives each new instance a part of the same files: a
//! 1 → 2 split makes both halves need every SST that spans both. Without sharing, each restore
//! downloads its own copy. With one [`SharedFetches`] given to their builders
//! ([`crate::BackendBuilder::shared_fetches`]), the first restore that needs a shared SST
//! claims it, downloads and verifies it; every other restore that needs it waits for that
//! and hard-links the verified file instead (SSTs are immutable; RocksDB never rewrites one).
//! A restore that merges several manifests (2 → 1) shares within itself the same way: the
//! same SST listed by two sources is fetched once.
//!
//! A link is made only while the fetched file is provably the one verified: its stamp (size,
//! device and inode, modification time) is the one recorded right after verification, and
//! the linked file's footer carries the unique id the manifest names. A fetched file that
//! has since gone (its restore failed and removed its directory, or its database compacted
//! it away) or changed is forgotten, and the restore fetches the file itself. A claimer that
//! fails or panics releases its claim, so a waiting restore fetches the file itself and
//! meets the same error on its own.
//!
//! This module owns the table of claimed and fetched files; restore consults it through one
//! hook in its download (`crate::restore::download_all`).

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use sst_format::SstUniqueId;

use crate::checkpoint::registry::FileStamp;

/// The shared SSTs fetched by the restores of one process, for the others to hard-link.
///
/// Cheap to clone (one shared table). Give the same value to the builders of backends that
/// restore at about the same time from the same checkpoint storage, e.g. one per restart of
/// a job's instances in this process, and drop it after: the table keeps one small entry per
/// fetched file for as long as it lives. Restores without one still share within each
/// restore.
#[derive(Clone, Default)]
pub struct SharedFetches {
    table: Arc<Table>,
}

impl std::fmt::Debug for SharedFetches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedFetches")
            .field("files", &self.table.slots.lock().len())
            .finish()
    }
}

#[derive(Default)]
struct Table {
    slots: Mutex<HashMap<FileKey, Slot>>,
    /// Signalled whenever a claim ends (fetched or released).
    changed: Condvar,
    /// Waits begun on `changed` (tests wait for a restore to be waiting).
    #[cfg(test)]
    waits: std::sync::atomic::AtomicUsize,
}

/// One shared SST as a manifest names it: the same key is the same bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct FileKey {
    /// The object's name in checkpoint storage.
    pub(crate) remote: String,
    /// Its size in bytes.
    pub(crate) size: u64,
    /// Its CRC-32.
    pub(crate) crc32: u32,
    /// The SST's unique id.
    pub(crate) sst_id: SstUniqueId,
}

enum Slot {
    /// A restore is fetching it.
    Claimed,
    /// Fetched and verified at `path`, which had `stamp` right after.
    Fetched { path: PathBuf, stamp: FileStamp },
}

/// What [`SharedFetches::link_or_claim`] gives a restore.
pub(crate) enum Placed<'a> {
    /// The file is at its destination, hard-linked from another restore's verified copy.
    Linked,
    /// The caller fetches the file and reports it with [`Claim::fetched`].
    Claimed(Claim<'a>),
}

/// The right and duty to fetch one file. Dropped without [`Claim::fetched`], it lets the
/// next restore that needs the file claim it.
pub(crate) struct Claim<'a> {
    table: &'a Table,
    key: Option<FileKey>,
}

impl SharedFetches {
    /// Places the file `key` names at `dest` by hard-linking another restore's verified
    /// copy, waiting while another restore fetches it; or claims it for the caller to fetch
    /// when no usable copy exists and nobody else is fetching it.
    pub(crate) fn link_or_claim(&self, key: &FileKey, dest: &Path) -> Placed<'_> {
        let table = &*self.table;
        let mut slots = table.slots.lock();
        loop {
            match slots.get(key) {
                None => {
                    slots.insert(key.clone(), Slot::Claimed);
                    return Placed::Claimed(Claim {
                        table,
                        key: Some(key.clone()),
                    });
                }
                Some(Slot::Claimed) => {
                    #[cfg(test)]
                    table
                        .waits
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    table.changed.wait(&mut slots);
                }
                Some(Slot::Fetched { path, stamp }) => {
                    let (path, stamp) = (path.clone(), *stamp);
                    let linked = parking_lot::MutexGuard::unlocked(&mut slots, || {
                        link(&path, stamp, key, dest)
                    });
                    if linked {
                        return Placed::Linked;
                    }
                    // That copy is gone or changed: forget it (unless another restore has
                    // already replaced it) and fetch the file anew.
                    if matches!(slots.get(key), Some(Slot::Fetched { path: p, .. }) if *p == path) {
                        slots.remove(key);
                    }
                }
            }
        }
    }
}

/// Hard-links `path` to `dest` if `path` still has `stamp`, and checks the link's footer
/// names `key`'s unique id. Leaves nothing at `dest` when it returns false.
fn link(path: &Path, stamp: FileStamp, key: &FileKey, dest: &Path) -> bool {
    let unchanged = |p: &Path| fs::metadata(p).is_ok_and(|m| FileStamp::of(&m) == stamp);
    if !unchanged(path) || fs::hard_link(path, dest).is_err() {
        return false;
    }
    let same = unchanged(dest)
        && sst_format::read_sst_meta(dest).is_ok_and(|meta| meta.unique_id == key.sst_id);
    if !same {
        let _ = fs::remove_file(dest);
    }
    same
}

impl Claim<'_> {
    /// Records that the claimed file was fetched and verified at `path`, for other restores
    /// to link. A file whose metadata cannot be read is not offered (they fetch their own).
    pub(crate) fn fetched(mut self, path: &Path) {
        let Some(key) = self.key.take() else {
            return;
        };
        let mut slots = self.table.slots.lock();
        match fs::metadata(path) {
            Ok(meta) => {
                let stamp = FileStamp::of(&meta);
                slots.insert(
                    key,
                    Slot::Fetched {
                        path: path.to_path_buf(),
                        stamp,
                    },
                );
            }
            Err(_) => {
                slots.remove(&key);
            }
        }
        drop(slots);
        self.table.changed.notify_all();
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.table.slots.lock().remove(&key);
            self.table.changed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(sst: &Path) -> FileKey {
        let meta = sst_format::read_sst_meta(sst).unwrap();
        FileKey {
            remote: "shared/000001.sst".into(),
            size: fs::metadata(sst).unwrap().len(),
            crc32: 7,
            sst_id: meta.unique_id,
        }
    }

    /// A real SST written by RocksDB, in `dir`.
    fn sst_in(dir: &Path) -> PathBuf {
        let path = dir.join("written.sst");
        let budget = crate::db::MemoryBudget::new(crate::MemoryBudgetConfig::default()).unwrap();
        crate::db::write_ssts(
            &Default::default(),
            &budget,
            &[(&path, crate::db::BlockSizing::Shared)],
            |sinks| sinks[0].put(b"a", b"1"),
        )
        .unwrap();
        path
    }

    /// A temporary directory, a real SST in it, its key, and an empty table.
    fn fixture() -> (tempfile::TempDir, PathBuf, FileKey, SharedFetches) {
        let dir = tempfile::tempdir().unwrap();
        let sst = sst_in(dir.path());
        let k = key(&sst);
        (dir, sst, k, SharedFetches::default())
    }

    /// The claim `link_or_claim` must hand out here.
    fn must_claim<'a>(shared: &'a SharedFetches, k: &FileKey, dest: &Path) -> Claim<'a> {
        match shared.link_or_claim(k, dest) {
            Placed::Claimed(claim) => claim,
            Placed::Linked => panic!("linked where nothing usable was fetched"),
        }
    }

    /// Returns once a restore has begun waiting on a claim in `shared`.
    fn until_a_restore_waits(shared: &SharedFetches) {
        while shared.table.waits.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
    }

    #[test]
    fn the_first_restore_claims_and_the_next_links_its_verified_copy() {
        let (dir, sst, k, shared) = fixture();
        let claim = must_claim(&shared, &k, &dir.path().join("a.sst"));
        fs::rename(&sst, dir.path().join("a.sst")).unwrap();
        claim.fetched(&dir.path().join("a.sst"));
        let dest = dir.path().join("b.sst");
        assert!(matches!(shared.link_or_claim(&k, &dest), Placed::Linked));
        let (a, b) = (
            fs::metadata(dir.path().join("a.sst")).unwrap(),
            fs::metadata(&dest).unwrap(),
        );
        assert_eq!(FileStamp::of(&a), FileStamp::of(&b), "one inode, linked");
    }

    /// Claims a file, lets another restore wait on the claim, ends the claim with `end`
    /// (given the file), and returns whether the waiter then linked the file (else it was
    /// handed the claim).
    fn waiter_links_after(end: impl FnOnce(Claim<'_>, &Path)) -> bool {
        let (dir, sst, k, shared) = fixture();
        let claim = must_claim(&shared, &k, &sst);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                matches!(
                    shared.link_or_claim(&k, &dir.path().join("w.sst")),
                    Placed::Linked
                )
            });
            until_a_restore_waits(&shared);
            end(claim, &sst);
            waiter.join().unwrap()
        })
    }

    #[test]
    fn a_waiting_restore_links_once_the_claimer_has_fetched() {
        assert!(waiter_links_after(|claim, sst| claim.fetched(sst)));
    }

    #[test]
    fn a_claim_dropped_unfetched_passes_to_a_waiting_restore() {
        assert!(
            !waiter_links_after(|claim, _| drop(claim)),
            "the waiter fetches the file itself"
        );
    }

    #[test]
    fn a_fetched_copy_that_is_gone_or_changed_is_fetched_again() {
        let (dir, sst, k, shared) = fixture();
        let claim = must_claim(&shared, &k, &sst);
        claim.fetched(&sst);
        // Changed in place after it was offered.
        use std::io::Write;
        fs::OpenOptions::new()
            .append(true)
            .open(&sst)
            .unwrap()
            .write_all(b"x")
            .unwrap();
        let dest = dir.path().join("d.sst");
        // A changed copy is not linked.
        let again = must_claim(&shared, &k, &dest);
        assert!(
            !dest.exists(),
            "nothing is left where the link would have gone"
        );
        again.fetched(&sst);
        fs::remove_file(&sst).unwrap();
        // Nor is a removed one.
        must_claim(&shared, &k, &dest);
    }

    #[test]
    fn a_copy_whose_footer_names_another_sst_is_not_linked() {
        let (dir, sst, mut k, shared) = fixture();
        let elsewhere = dir.path().join("other");
        fs::create_dir(&elsewhere).unwrap();
        let other = sst_in(&elsewhere);
        k.sst_id = sst_format::read_sst_meta(&other).unwrap().unique_id;
        must_claim(&shared, &k, &sst).fetched(&sst);
        let dest = dir.path().join("d.sst");
        must_claim(&shared, &k, &dest);
        assert!(!dest.exists());
    }
}

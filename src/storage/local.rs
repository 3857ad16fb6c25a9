//! [`LocalStorage`]: [`CheckpointStorage`] on a local (or mounted) directory.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::{sync_dir, validate_object_name, CheckpointStorage, ObjectDigest, ObjectInfo};
use crate::clock::{is_older_than, millis_since_epoch};
use crate::error::{Error, Result};

/// Copy buffer size of [`LocalStorage`] transfers.
const COPY_BUFFER: usize = 1 << 20;

/// Directory under the root holding in-progress puts (never listed).
const TEMP_DIR: &str = ".tmp";

/// [`CheckpointStorage`] on a directory: object `a/b` is the file `<root>/a/b`.
///
/// `put_file` hard-links the local file to its object name when both are on one filesystem
/// (the default; [`LocalStorage::with_hard_links`]): `link(2)` is atomic and fails if the name
/// exists, which is the create-if-absent. The file is then read once for its CRC-32 and
/// fsynced, and its directory fsynced. Sharing the inode is safe because every file a
/// checkpoint puts is written once and only ever unlinked afterwards (RocksDB never writes an
/// SST, MANIFEST copy, CURRENT or OPTIONS file of a checkpoint directory again), and readers
/// copy every non-SST file out instead of linking it ([`CheckpointStorage::get_file`]).
/// Otherwise (another filesystem, hard links off, and for `put_bytes`) a put copies into
/// `<root>/.tmp/<random>`, fsyncs it, then hard-links it to its final name, removes the
/// temporary name and fsyncs the directory. `get_file` does not fsync (a restore that
/// crashes is redone); `get_file_durable` fsyncs a copy but not a linked SST, whose bytes are
/// the object's own and durable already.
///
/// Directory fsyncs of `put_file` are deferred: the directories it changed are remembered and
/// fsynced by the next `put_bytes` before that one links its object (so an object of
/// `put_file` is durable once a later `put_bytes` on this storage returns). A checkpoint puts
/// its files and then its manifest with `put_bytes`, so the manifest never becomes durable
/// before the files it names, and a checkpoint costs a few journal commits instead of two per
/// file (each commit waits for the data RocksDB's compactions are writing meanwhile).
#[derive(Debug, Clone)]
pub struct LocalStorage {
    root: PathBuf,
    sync: bool,
    link_puts: bool,
    /// Directories whose new entries (from `put_file`) are not fsynced yet.
    pending_dirs: Arc<Mutex<BTreeSet<PathBuf>>>,
}

impl LocalStorage {
    /// Storage rooted at `root` (created if missing).
    pub fn new(root: impl AsRef<Path>) -> Result<Self> {
        let root = root.as_ref().to_path_buf();
        fs::create_dir_all(root.join(TEMP_DIR)).map_err(|e| Error::io(&root, e))?;
        Ok(LocalStorage {
            root,
            sync: true,
            link_puts: true,
            pending_dirs: Arc::default(),
        })
    }

    /// An existing storage directory, opened without writing anything into it (the operator
    /// commands): for listing, reading and deleting; a put needs [`LocalStorage::new`].
    pub fn open_existing(root: impl AsRef<Path>) -> Result<Self> {
        let root = root.as_ref().to_path_buf();
        Ok(LocalStorage {
            root,
            sync: true,
            link_puts: true,
            pending_dirs: Arc::default(),
        })
    }

    /// Whether `put_file` may hard-link the local file instead of copying it (default on).
    /// Turn it off when the storage directory must not share inodes with the live database,
    /// e.g. to keep a checkpoint intact even if something outside rockstate writes into the
    /// database directory.
    pub fn with_hard_links(mut self, link: bool) -> Self {
        self.link_puts = link;
        self
    }

    /// Turns fsync of puts off (default on). Only for benchmarks and tests that do not care
    /// about power loss.
    pub fn with_fsync(mut self, sync: bool) -> Self {
        self.sync = sync;
        self
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The local path of object `name`.
    pub fn path_of(&self, name: &str) -> Result<PathBuf> {
        validate_object_name(name)?;
        if name == TEMP_DIR || name.starts_with(".tmp/") {
            return Err(Error::InvalidObjectName(name.to_string()));
        }
        Ok(self.root.join(name))
    }

    /// Places object `name` at `local`: a hard link for an SST on the same filesystem (read
    /// once for its CRC-32), a copy otherwise. Returns the digest and whether it linked.
    fn fetch(&self, name: &str, local: &Path) -> Result<(ObjectDigest, bool)> {
        let path = self.path_of(name)?;
        if name.ends_with(".sst") && fs::hard_link(&path, local).is_ok() {
            // Same filesystem: the SST is shared with the restored database by a hard link,
            // as RocksDB's own checkpoints share SSTs with the live database (SSTs are never
            // written after creation; both sides only ever unlink them). Every byte is still
            // read once, for the CRC the caller verifies. Other files (MANIFEST, CURRENT, ...)
            // are copied: RocksDB may write them.
            let mut file = File::open(local).map_err(|e| Error::io(local, e))?;
            let digest = copy_with_crc(&mut file, &mut std::io::sink(), local, local)?;
            return Ok((digest, true));
        }
        let mut src = File::open(&path).map_err(|e| not_found_as_object(name, &path, e))?;
        // A directory opens too: it is no object (and nothing is created for it).
        if !src.metadata().map_err(|e| Error::io(&path, e))?.is_file() {
            return Err(Error::ObjectNotFound {
                name: name.to_string(),
            });
        }
        let mut dst = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(local)
            .map_err(|e| Error::io(local, e))?;
        let digest = copy_with_crc(&mut src, &mut dst, &path, local)?;
        Ok((digest, false))
    }

    fn temp_path(&self) -> PathBuf {
        self.root
            .join(TEMP_DIR)
            .join(format!("{:032x}", rand::random::<u128>()))
    }

    /// Writes a temporary file with `fill`, then links it to `name` create-if-absent. Unless
    /// `defer`, the directories earlier deferred puts changed are fsynced together with the
    /// file's data before the link, and the new entry's directory after it.
    fn put_with(
        &self,
        name: &str,
        defer: bool,
        fill: impl FnOnce(&mut File) -> Result<ObjectDigest>,
    ) -> Result<ObjectDigest> {
        let target = self.path_of(name)?;
        if target.exists() {
            return Err(Error::ObjectExists {
                name: name.to_string(),
            });
        }
        let tmp = self.temp_path();
        let result = (|| {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)
                .map_err(|e| Error::io(&tmp, e))?;
            let digest = fill(&mut file)?;
            if self.sync && !defer {
                self.sync_with_pending_dirs(&file, &tmp)?;
            } else if self.sync {
                file.sync_data().map_err(|e| Error::io(&tmp, e))?;
            }
            drop(file);
            self.link_new(&tmp, &target, name, defer)?;
            Ok(digest)
        })();
        // The temporary name goes in every case; after a successful link the object lives on
        // under its final name.
        let _ = fs::remove_file(&tmp);
        result
    }

    /// Syncs `file`'s data (at `path`) and fsyncs the directories deferred puts changed, all
    /// at once: fsyncs issued together share one journal commit. The lock is held while
    /// syncing, so a concurrent `put_bytes` cannot link its object before they are durable.
    fn sync_with_pending_dirs(&self, file: &File, path: &Path) -> Result<()> {
        let mut pending = self.pending_dirs.lock();
        let (data, failed): (_, Vec<(PathBuf, std::io::Error)>) = std::thread::scope(|s| {
            let syncs: Vec<_> = pending
                .iter()
                .map(|dir| {
                    crate::parallel::beside(s, move || {
                        (dir, File::open(dir).and_then(|d| d.sync_all()))
                    })
                })
                .collect();
            let data = file.sync_data();
            let failed = syncs
                .into_iter()
                .filter_map(|h| match h.join() {
                    Ok((_, Ok(()))) => None,
                    // Emptied and removed by a delete since (an aborted checkpoint's directory).
                    Ok((_, Err(e))) if e.kind() == ErrorKind::NotFound => None,
                    Ok((dir, Err(e))) => Some((dir.clone(), e)),
                    Err(_) => Some((
                        self.root.clone(),
                        std::io::Error::other("directory sync thread panicked"),
                    )),
                })
                .collect();
            (data, failed)
        });
        data.map_err(|e| Error::io(path, e))?;
        match failed.into_iter().next() {
            None => {
                pending.clear();
                Ok(())
            }
            // Everything stays pending for the next attempt.
            Some((dir, e)) => Err(Error::io(&dir, e)),
        }
    }

    /// `link(tmp, target)`, creating parent directories; retried if a concurrent delete
    /// removes an emptied parent between the two steps. Then the changed directories (the
    /// parent, and the parents of directories it created) are fsynced, or with `defer` only
    /// remembered for the next non-deferred put.
    fn link_new(&self, tmp: &Path, target: &Path, name: &str, defer: bool) -> Result<()> {
        let parent = target.parent().unwrap_or(&self.root);
        let mut attempts = 0;
        loop {
            let created = !parent.exists();
            if created {
                fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
            }
            match fs::hard_link(tmp, target) {
                Ok(()) => {
                    if self.sync {
                        let mut changed = vec![parent.to_path_buf()];
                        if created {
                            // The new directories' entries live in their parents.
                            let mut dir = parent;
                            while let Some(up) = dir.parent() {
                                changed.push(up.to_path_buf());
                                if up == self.root {
                                    break;
                                }
                                dir = up;
                            }
                        }
                        if defer {
                            self.pending_dirs.lock().extend(changed);
                        } else {
                            for dir in &changed {
                                sync_dir(dir)?;
                            }
                        }
                    }
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    return Err(Error::ObjectExists {
                        name: name.to_string(),
                    })
                }
                Err(e) if e.kind() == ErrorKind::NotFound && attempts < 5 => attempts += 1,
                Err(e) => return Err(Error::io(target, e)),
            }
        }
    }

    fn walk(&self, dir: &Path, rel: &str, prefix: &str, out: &mut Vec<ObjectInfo>) -> Result<()> {
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(dir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(dir, e))?;
            let Ok(file_name) = entry.file_name().into_string() else {
                continue; // not a name this storage ever creates
            };
            if rel.is_empty() && file_name == TEMP_DIR {
                continue;
            }
            let name = if rel.is_empty() {
                file_name
            } else {
                format!("{rel}/{file_name}")
            };
            // Prune subtrees that cannot hold a match.
            if !(name.starts_with(prefix) || prefix.starts_with(&format!("{name}/"))) {
                continue;
            }
            let meta = match entry.metadata() {
                Ok(m) => m,
                Err(e) if e.kind() == ErrorKind::NotFound => continue, // deleted meanwhile
                Err(e) => return Err(Error::io(entry.path(), e)),
            };
            if meta.is_dir() {
                self.walk(&entry.path(), &name, prefix, out)?;
            } else if meta.is_file() && name.starts_with(prefix) {
                out.push(ObjectInfo {
                    name,
                    size: meta.len(),
                    last_modified: meta.modified().map_err(|e| Error::io(entry.path(), e))?,
                });
            }
        }
        Ok(())
    }
}

/// Copies `from` into `to` computing the CRC-32 of the bytes on the way.
fn copy_with_crc(
    from: &mut impl Read,
    to: &mut impl Write,
    from_path: &Path,
    to_path: &Path,
) -> Result<ObjectDigest> {
    let mut buf = vec![0u8; COPY_BUFFER];
    let mut hasher = crc32fast::Hasher::new();
    let mut size = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io(from_path, e)),
        };
        hasher.update(&buf[..n]);
        to.write_all(&buf[..n]).map_err(|e| Error::io(to_path, e))?;
        size += n as u64;
    }
    Ok(ObjectDigest {
        size,
        crc32: hasher.finalize(),
    })
}

/// Whether `e` says no object is at a path: nothing there, a directory (a prefix of other
/// objects), or a path through a file.
fn no_object(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::NotFound | ErrorKind::IsADirectory | ErrorKind::NotADirectory
    )
}

fn not_found_as_object(name: &str, path: &Path, e: std::io::Error) -> Error {
    if no_object(&e) {
        Error::ObjectNotFound {
            name: name.to_string(),
        }
    } else {
        Error::io(path, e)
    }
}

impl CheckpointStorage for LocalStorage {
    fn put_file(&self, name: &str, local: &Path) -> Result<ObjectDigest> {
        if self.link_puts {
            let target = self.path_of(name)?;
            // The content is durable already (the `put_file` contract: RocksDB syncs every
            // file of a checkpoint); syncing it again would still cost a device cache flush
            // per file. The new directory entry is synced with the next `put_bytes`.
            let mut file = File::open(local).map_err(|e| Error::io(local, e))?;
            match self.link_new(local, &target, name, true) {
                Ok(()) => {
                    // The same inode: these are the object's bytes.
                    return copy_with_crc(&mut file, &mut std::io::sink(), local, &target);
                }
                Err(Error::ObjectExists { name }) => return Err(Error::ObjectExists { name }),
                Err(Error::Io { .. }) if local.exists() => {
                    // Another filesystem (EXDEV) or no hard links here: copy below.
                }
                Err(e) => return Err(e),
            }
        }
        let mut src = File::open(local).map_err(|e| Error::io(local, e))?;
        self.put_with(name, true, |dst| {
            let tmp = PathBuf::from(name);
            copy_with_crc(&mut src, dst, local, &tmp)
        })
    }

    fn put_bytes(&self, name: &str, bytes: &[u8]) -> Result<()> {
        self.put_with(name, false, |dst| {
            dst.write_all(bytes).map_err(|e| Error::io(name, e))?;
            Ok(ObjectDigest {
                size: bytes.len() as u64,
                crc32: crc32fast::hash(bytes),
            })
        })
        .map(|_| ())
    }

    fn get_file(&self, name: &str, local: &Path) -> Result<ObjectDigest> {
        self.fetch(name, local).map(|(digest, _)| digest)
    }

    fn get_file_durable(&self, name: &str, local: &Path) -> Result<ObjectDigest> {
        let (digest, linked) = self.fetch(name, local)?;
        // A linked SST is the object's inode, whose bytes were durable before the put
        // returned (synced by the put or, for a linked put, by RocksDB) unless this storage
        // does not sync at all; the link's directory entry is the caller's to sync.
        if !(linked && self.sync) {
            File::open(local)
                .and_then(|f| f.sync_all())
                .map_err(|e| Error::io(local, e))?;
        }
        Ok(digest)
    }

    fn get_bytes(&self, name: &str) -> Result<Vec<u8>> {
        let path = self.path_of(name)?;
        fs::read(&path).map_err(|e| not_found_as_object(name, &path, e))
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let mut out = Vec::new();
        self.walk(&self.root, "", prefix, &mut out)?;
        Ok(out)
    }

    fn exists(&self, name: &str) -> Result<bool> {
        let path = self.path_of(name)?;
        match fs::metadata(&path) {
            Ok(m) => Ok(m.is_file()),
            Err(e) if no_object(&e) => Ok(false),
            Err(e) => Err(Error::io(&path, e)),
        }
    }

    fn delete(&self, name: &str) -> Result<()> {
        let path = self.path_of(name)?;
        match fs::remove_file(&path) {
            Ok(()) => {}
            // Deleting a missing object succeeds; a directory is no object.
            Err(e) if no_object(&e) => return Ok(()),
            Err(e) => return Err(Error::io(&path, e)),
        }
        // Remove directories the delete emptied (a checkpoint's directory), up to the root.
        // Failure just means the directory is not empty (or is being filled again). The
        // first directory that stays is fsynced, so the removal is durable once this returns
        // (a garbage pass that deletes a manifest before its files relies on that order).
        let mut dir = path.parent();
        while let Some(d) = dir {
            if d == self.root || fs::remove_dir(d).is_err() {
                if self.sync {
                    sync_dir(d)?;
                }
                break;
            }
            dir = d.parent();
        }
        Ok(())
    }

    fn sweep_incomplete(&self, now_ms: u64, min_age: Duration) -> Result<usize> {
        let dir = self.root.join(TEMP_DIR);
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(Error::io(&dir, e)),
        };
        let mut removed = 0;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&dir, e))?;
            let Ok(meta) = entry.metadata() else { continue };
            let modified = meta.modified().map_or(u64::MAX, millis_since_epoch);
            if meta.is_file()
                && is_older_than(modified, now_ms, min_age)
                && fs::remove_file(entry.path()).is_ok()
            {
                removed += 1;
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// That `linked` (a local path and the object it came from) shares the object's inode
    /// and `copied` does not.
    fn assert_linked_and_copied(s: &LocalStorage, linked: (&Path, &str), copied: (&Path, &str)) {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let ino = |p: &Path| fs::metadata(p).unwrap().ino();
            assert_eq!(ino(linked.0), ino(&s.path_of(linked.1).unwrap()));
            assert_ne!(ino(copied.0), ino(&s.path_of(copied.1).unwrap()));
        }
        #[cfg(not(unix))]
        let _ = (s, linked, copied);
    }

    #[test]
    fn sst_gets_link_other_gets_copy_and_both_report_the_crc() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStorage::new(dir.path().join("root")).unwrap();
        s.put_bytes("shared/a.sst", b"sst bytes").unwrap();
        s.put_bytes("chk-1/b/MANIFEST-000001", b"manifest").unwrap();
        let sst = dir.path().join("a.sst");
        let d = s.get_file("shared/a.sst", &sst).unwrap();
        assert_eq!((d.size, d.crc32), (9, crc32fast::hash(b"sst bytes")));
        assert_eq!(fs::read(&sst).unwrap(), b"sst bytes");
        let manifest = dir.path().join("MANIFEST-000001");
        let d = s.get_file("chk-1/b/MANIFEST-000001", &manifest).unwrap();
        assert_eq!((d.size, d.crc32), (8, crc32fast::hash(b"manifest")));
        assert_linked_and_copied(
            &s,
            (&sst, "shared/a.sst"),
            (&manifest, "chk-1/b/MANIFEST-000001"),
        );
        // A name that is taken locally is an error, linked or copied.
        assert!(s.get_file("shared/a.sst", &sst).is_err());
        assert!(matches!(
            s.get_file("shared/missing.sst", &dir.path().join("m.sst")),
            Err(Error::ObjectNotFound { .. })
        ));
    }

    #[test]
    fn durable_gets_link_or_copy_as_gets_do_with_or_without_fsync() {
        let dir = tempfile::tempdir().unwrap();
        for (i, sync) in [true, false].into_iter().enumerate() {
            let s = LocalStorage::new(dir.path().join(format!("root-{i}")))
                .unwrap()
                .with_fsync(sync);
            s.put_bytes("shared/a.sst", b"sst bytes").unwrap();
            s.put_bytes("chk-1/b/OPTIONS-000003", b"options").unwrap();
            let sst = dir.path().join(format!("a-{i}.sst"));
            let d = s.get_file_durable("shared/a.sst", &sst).unwrap();
            assert_eq!((d.size, d.crc32), (9, crc32fast::hash(b"sst bytes")));
            let options = dir.path().join(format!("OPTIONS-{i}"));
            let d = s
                .get_file_durable("chk-1/b/OPTIONS-000003", &options)
                .unwrap();
            assert_eq!((d.size, d.crc32), (7, crc32fast::hash(b"options")));
            assert_eq!(fs::read(&options).unwrap(), b"options");
            assert_linked_and_copied(
                &s,
                (&sst, "shared/a.sst"),
                (&options, "chk-1/b/OPTIONS-000003"),
            );
            // What the durable get skips the fsync for: a linked SST, and only that.
            let again = dir.path().join(format!("again-{i}.sst"));
            assert!(s.fetch("shared/a.sst", &again).unwrap().1);
            let copy = dir.path().join(format!("copy-{i}"));
            assert!(!s.fetch("chk-1/b/OPTIONS-000003", &copy).unwrap().1);
            assert!(s.get_file_durable("shared/a.sst", &sst).is_err());
            assert!(matches!(
                s.get_file_durable("shared/missing.sst", &dir.path().join("m.sst")),
                Err(Error::ObjectNotFound { .. })
            ));
        }
    }

    #[test]
    fn put_file_links_on_one_filesystem_unless_told_not_to() {
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("000007.sst");
        fs::write(&local, b"immutable sst").unwrap();
        let linked = LocalStorage::new(dir.path().join("a")).unwrap();
        let copied = LocalStorage::new(dir.path().join("b"))
            .unwrap()
            .with_hard_links(false);
        for s in [&linked, &copied] {
            let d = s.put_file("shared/x.sst", &local).unwrap();
            assert_eq!((d.size, d.crc32), (13, crc32fast::hash(b"immutable sst")));
            assert_eq!(
                fs::read(s.path_of("shared/x.sst").unwrap()).unwrap(),
                b"immutable sst"
            );
            assert!(matches!(
                s.put_file("shared/x.sst", &local),
                Err(Error::ObjectExists { .. })
            ));
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let ino = |p: PathBuf| fs::metadata(p).unwrap().ino();
            let src = ino(local.clone());
            assert_eq!(ino(linked.path_of("shared/x.sst").unwrap()), src);
            assert_ne!(ino(copied.path_of("shared/x.sst").unwrap()), src);
        }
        // Unlinking the source leaves the object intact; a missing source is an error.
        fs::remove_file(&local).unwrap();
        assert_eq!(linked.get_bytes("shared/x.sst").unwrap(), b"immutable sst");
        assert!(linked.put_file("shared/y.sst", &local).is_err());
        assert!(linked.list("shared/y").unwrap().is_empty());
    }

    #[test]
    fn deferred_directories_are_synced_by_the_next_put_bytes_even_if_removed_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStorage::new(dir.path().join("root")).unwrap();
        let local = dir.path().join("MANIFEST-000001");
        fs::write(&local, b"m").unwrap();
        s.put_file("chk-1/b/MANIFEST-000001", &local).unwrap();
        s.put_file("chk-2/b/MANIFEST-000001", &local).unwrap();
        assert!(s
            .pending_dirs
            .lock()
            .contains(&dir.path().join("root/chk-1/b")));
        // An abort deletes checkpoint 1's objects and its emptied directories.
        s.delete("chk-1/b/MANIFEST-000001").unwrap();
        assert!(!dir.path().join("root/chk-1").exists());
        s.put_bytes("chk-2/b/_metadata", b"manifest").unwrap();
        assert!(s.pending_dirs.lock().is_empty());
        assert_eq!(s.get_bytes("chk-2/b/MANIFEST-000001").unwrap(), b"m");
    }

    #[test]
    fn create_if_absent_and_listing() {
        let dir = tempfile::tempdir().unwrap();
        // The storage root is a sub-directory: local source files live beside it, not in it.
        let s = LocalStorage::new(dir.path().join("root")).unwrap();
        s.put_bytes("chk-1/b/_metadata", b"one").unwrap();
        assert!(matches!(
            s.put_bytes("chk-1/b/_metadata", b"two"),
            Err(Error::ObjectExists { .. })
        ));
        assert_eq!(s.get_bytes("chk-1/b/_metadata").unwrap(), b"one");
        let local = dir.path().join("local");
        fs::write(&local, b"hello").unwrap();
        let d = s.put_file("shared/x.sst", &local).unwrap();
        assert_eq!(
            d,
            ObjectDigest {
                size: 5,
                crc32: crc32fast::hash(b"hello")
            }
        );
        assert!(matches!(
            s.put_file("shared/x.sst", &local),
            Err(Error::ObjectExists { .. })
        ));
        let mut names: Vec<_> = s.list("").unwrap().into_iter().map(|o| o.name).collect();
        names.sort();
        assert_eq!(names, ["chk-1/b/_metadata", "shared/x.sst"]);
        assert_eq!(s.list("chk-").unwrap().len(), 1);
        assert_eq!(s.list("chk-1/b/").unwrap().len(), 1);
        assert_eq!(s.list("chk-2").unwrap().len(), 0);
        s.delete("chk-1/b/_metadata").unwrap();
        s.delete("chk-1/b/_metadata").unwrap();
        assert!(!dir.path().join("chk-1").exists());
        assert!(matches!(
            s.get_bytes("chk-1/b/_metadata"),
            Err(Error::ObjectNotFound { .. })
        ));
        for bad in ["", "/a", "a//b", "../a", "a/./b", ".tmp/x"] {
            assert!(s.put_bytes(bad, b"").is_err(), "{bad}");
        }
        assert_eq!(s.sweep_incomplete(u64::MAX, Duration::ZERO).unwrap(), 0);
    }
}

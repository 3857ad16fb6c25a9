//! [`LocalStorage`]: [`CheckpointStorage`] on a local (or mounted) directory.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::{validate_object_name, CheckpointStorage, ObjectDigest, ObjectInfo};
use crate::error::{Error, Result};

/// Copy buffer size of [`LocalStorage`] transfers.
const COPY_BUFFER: usize = 1 << 20;

/// Directory under the root holding in-progress puts (never listed).
const TEMP_DIR: &str = ".tmp";

/// [`CheckpointStorage`] on a directory: object `a/b` is the file `<root>/a/b`.
///
/// A put copies into `<root>/.tmp/<random>`, fsyncs it, then hard-links it to its final name
/// (`link(2)` fails if the name exists: that is the create-if-absent), removes the temporary
/// name and fsyncs the directory. Gets do not fsync (a restore that crashes is redone).
#[derive(Debug, Clone)]
pub struct LocalStorage {
    root: PathBuf,
    sync: bool,
}

impl LocalStorage {
    /// Storage rooted at `root` (created if missing).
    pub fn new(root: impl AsRef<Path>) -> Result<Self> {
        let root = root.as_ref().to_path_buf();
        fs::create_dir_all(root.join(TEMP_DIR)).map_err(|e| Error::io(&root, e))?;
        Ok(LocalStorage { root, sync: true })
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

    fn temp_path(&self) -> PathBuf {
        self.root
            .join(TEMP_DIR)
            .join(format!("{:032x}", rand::random::<u128>()))
    }

    /// Writes a temporary file with `fill`, then links it to `name` create-if-absent.
    fn put_with(
        &self,
        name: &str,
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
            if self.sync {
                file.sync_all().map_err(|e| Error::io(&tmp, e))?;
            }
            drop(file);
            self.link_new(&tmp, &target, name)?;
            Ok(digest)
        })();
        // The temporary name goes in every case; after a successful link the object lives on
        // under its final name.
        let _ = fs::remove_file(&tmp);
        result
    }

    /// `link(tmp, target)`, creating parent directories; retried if a concurrent delete
    /// removes an emptied parent between the two steps.
    fn link_new(&self, tmp: &Path, target: &Path, name: &str) -> Result<()> {
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
                        sync_dir(parent)?;
                        if created {
                            // The new directories' entries live in their parents.
                            let mut dir = parent;
                            while let Some(up) = dir.parent() {
                                sync_dir(up)?;
                                if up == self.root {
                                    break;
                                }
                                dir = up;
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

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, e))
}

fn not_found_as_object(name: &str, path: &Path, e: std::io::Error) -> Error {
    if e.kind() == ErrorKind::NotFound {
        Error::ObjectNotFound {
            name: name.to_string(),
        }
    } else {
        Error::io(path, e)
    }
}

impl CheckpointStorage for LocalStorage {
    fn put_file(&self, name: &str, local: &Path) -> Result<ObjectDigest> {
        let mut src = File::open(local).map_err(|e| Error::io(local, e))?;
        self.put_with(name, |dst| {
            let tmp = PathBuf::from(name);
            copy_with_crc(&mut src, dst, local, &tmp)
        })
    }

    fn put_bytes(&self, name: &str, bytes: &[u8]) -> Result<()> {
        self.put_with(name, |dst| {
            dst.write_all(bytes).map_err(|e| Error::io(name, e))?;
            Ok(ObjectDigest {
                size: bytes.len() as u64,
                crc32: crc32fast::hash(bytes),
            })
        })
        .map(|_| ())
    }

    fn get_file(&self, name: &str, local: &Path) -> Result<ObjectDigest> {
        let path = self.path_of(name)?;
        let mut src = File::open(&path).map_err(|e| not_found_as_object(name, &path, e))?;
        let mut dst = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(local)
            .map_err(|e| Error::io(local, e))?;
        copy_with_crc(&mut src, &mut dst, &path, local)
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

    fn delete(&self, name: &str) -> Result<()> {
        let path = self.path_of(name)?;
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(&path, e)),
        }
        // Remove directories the delete emptied (a checkpoint's directory), up to the root.
        // Failure just means the directory is not empty (or is being filled again).
        let mut dir = path.parent();
        while let Some(d) = dir {
            if d == self.root || fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
        Ok(())
    }

    fn sweep_incomplete(&self, min_age: Duration) -> Result<usize> {
        let dir = self.root.join(TEMP_DIR);
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(Error::io(&dir, e)),
        };
        let now = SystemTime::now();
        let mut removed = 0;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&dir, e))?;
            let Ok(meta) = entry.metadata() else { continue };
            let age = meta
                .modified()
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .unwrap_or(Duration::ZERO);
            if meta.is_file() && age >= min_age && fs::remove_file(entry.path()).is_ok() {
                removed += 1;
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(s.sweep_incomplete(Duration::ZERO).unwrap(), 0);
    }
}

//! A small tmpfs mounted for one test, and a filler file that takes every free byte of it
//! until freed: the disk-full tests' filesystem. Mounting needs root, or `sudo` without a
//! password (what `scripts/setup.sh` uses to install packages); without either the tests
//! fail, saying so.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct SmallFs {
    pub root: PathBuf,
    _dir: tempfile::TempDir,
    filler: PathBuf,
}

impl SmallFs {
    /// A tmpfs of `mib` MiB (at most 256).
    pub fn mount(mib: u32) -> SmallFs {
        assert!(mib <= 256);
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("fs");
        std::fs::create_dir(&root).unwrap();
        let st = privileged("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(&root)
            .status()
            .unwrap();
        assert!(
            st.success(),
            "mounting a tmpfs failed: the disk-full tests need root or passwordless sudo"
        );
        SmallFs {
            filler: root.join("filler"),
            root,
            _dir: dir,
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// Every file and directory under `dir` (inside this filesystem) except the filler, as
    /// [`files_under`] lists them: what a failed operation left.
    pub fn files_besides_filler(&self, dir: &Path) -> Vec<String> {
        files_under(dir)
            .into_iter()
            .filter(|f| f != "filler")
            .collect()
    }

    /// Writes the filler until the filesystem refuses with ENOSPC (every byte taken).
    pub fn fill(&self) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.filler)
            .unwrap();
        for chunk in [1 << 20, 4096, 512, 1] {
            let buf = vec![0xa5u8; chunk];
            loop {
                match f.write(&buf) {
                    Ok(n) if n == chunk => continue,
                    Ok(_) => break,
                    Err(e) => {
                        assert_eq!(e.raw_os_error(), Some(libc_enospc()), "{e}");
                        break;
                    }
                }
            }
        }
        let _ = f.sync_all();
    }

    /// Fills the filesystem, then gives `bytes` of it back.
    pub fn leave_free(&self, bytes: u64) {
        self.fill();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.filler)
            .unwrap();
        let len = f.metadata().unwrap().len();
        f.set_len(len.saturating_sub(bytes)).unwrap();
    }

    /// Removes the filler.
    pub fn free(&self) {
        let _ = std::fs::remove_file(&self.filler);
    }

    pub fn free_bytes(&self) -> u64 {
        let out = Command::new("df")
            .args(["-B1", "--output=avail"])
            .arg(&self.root)
            .output()
            .unwrap();
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .nth(1)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

/// Runs `op` until it succeeds, as a caller does once space is back: after a failed flush
/// RocksDB takes writes again only when it next looks at free space (every 5 s). Fails the
/// test if `op` still fails 30 s after the first try (a bound on RocksDB's recovery, not a
/// speed check). Returns the result and the errors of the tries before it.
pub fn retry_until_recovered<T>(
    what: &str,
    mut op: impl FnMut() -> rockstate::Result<T>,
) -> (T, Vec<String>) {
    let start = std::time::Instant::now();
    let mut errors = Vec::new();
    loop {
        match op() {
            Ok(t) => {
                eprintln!(
                    "{what} after {:?}; errors before: {errors:?}",
                    start.elapsed()
                );
                return (t, errors);
            }
            Err(e) => {
                errors.push(format!("{:?}: {e}", e.kind()));
                assert!(
                    start.elapsed() < std::time::Duration::from_secs(30),
                    "{what}: still failing 30 s after space was freed: {errors:?}"
                );
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        }
    }
}

fn libc_enospc() -> i32 {
    28
}

/// `program` run directly as root, else through `sudo -n`.
fn privileged(program: &str) -> Command {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    if root {
        Command::new(program)
    } else {
        let mut c = Command::new("sudo");
        c.args(["-n", program]);
        c
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = privileged("umount").arg("-l").arg(&self.root).status();
    }
}

/// Every file under `dir`, relative, sorted.
pub fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.push(format!("{}/", p.strip_prefix(base).unwrap().display()));
                walk(base, &p, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().display().to_string());
            }
        }
    }
    walk(dir, dir, &mut out);
    out.sort();
    out
}

//! The body of the `restore_dir` fuzz target, shared with the test that replays its corpus
//! (`tests/fuzz_restore_dir.rs` in the rockstate crate).
//!
//! A small real checkpoint storage directory is built once per process: one backend with a value,
//! a list and a map state, two completed checkpoints (the second incremental, so it references
//! shared files of the first). Each input is read as a list of mutations of that directory's
//! files (flip, truncate, delete, append, zero a run, swap two files' bytes, duplicate one over
//! another); the mutated directory is written to a fresh temporary place and restored with
//! `RestoreFrom::Latest`.
//!
//! Oracle: restore returns a typed error, or it succeeds and the restored state is exactly the
//! state of one completed checkpoint (the newest, or the older one if the mutation removed the
//! newest manifest). A panic, an abort, or any other state is a finding.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use rockstate::{CheckpointOptions, CodecId, DbOptions, KeyedBackend, LocalStorage, RestoreFrom};

/// Keys written by the fixture.
const KEYS: u32 = 300;

/// One key's map entries.
type MapEntries = Vec<(Vec<u8>, Vec<u8>)>;

/// What one backend holds: value, list and map state, read back through the raw API.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Contents {
    values: BTreeMap<u32, Vec<u8>>,
    lists: BTreeMap<u32, Vec<Vec<u8>>>,
    maps: BTreeMap<u32, MapEntries>,
}

/// The unmutated storage directory: relative path → bytes, plus the contents of each
/// completed checkpoint.
pub struct Fixture {
    files: Vec<(String, Vec<u8>)>,
    checkpoints: Vec<Contents>,
}

fn options() -> DbOptions {
    DbOptions {
        write_buffer_size: 128 << 10,
        target_file_size_base: 128 << 10,
        ..DbOptions::default()
    }
}

fn key(k: u32) -> [u8; 4] {
    k.to_be_bytes()
}

fn read_contents(b: &KeyedBackend) -> rockstate::Result<Contents> {
    let codec = CodecId::new("bytes", 1);
    let v = b.raw_value_state("v", codec.clone())?;
    let l = b.raw_list_state("l", codec.clone())?;
    let m = b.raw_map_state("m", codec)?;
    let mut c = Contents::default();
    for k in 0..KEYS {
        if let Some(x) = v.get(&key(k), b"")? {
            c.values.insert(k, x);
        }
        let list = l.get(&key(k), b"")?;
        if !list.is_empty() {
            c.lists.insert(k, list);
        }
        let entries = m.entries(&key(k), b"")?;
        if !entries.is_empty() {
            c.maps.insert(k, entries);
        }
    }
    Ok(c)
}

fn write_round(b: &KeyedBackend, round: u32) -> rockstate::Result<()> {
    let codec = CodecId::new("bytes", 1);
    let v = b.raw_value_state("v", codec.clone())?;
    let l = b.raw_list_state("l", codec.clone())?;
    let m = b.raw_map_state("m", codec)?;
    for k in 0..KEYS {
        if (k + round).is_multiple_of(3) {
            v.put(&key(k), b"", &[(k % 251) as u8; 40])?;
        }
        if (k + round).is_multiple_of(5) {
            l.add(&key(k), b"", &k.to_le_bytes())?;
        }
        if (k * 7 + round).is_multiple_of(4) {
            m.put(&key(k), b"", &round.to_be_bytes(), &[round as u8; 20])?;
        }
        if round > 0 && k % 11 == 0 {
            v.clear(&key(k), b"")?;
        }
    }
    Ok(())
}

fn collect_files(root: &Path, rel: &str, out: &mut Vec<(String, Vec<u8>)>) {
    let dir = root.join(rel);
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixture: list storage")
        .map(|e| e.expect("fixture: list storage"))
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let rel_name = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        if e.file_type().expect("fixture: file type").is_dir() {
            collect_files(root, &rel_name, out);
        } else {
            out.push((rel_name, std::fs::read(e.path()).expect("fixture: read")));
        }
    }
}

fn build_fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("fixture: tempdir");
    let storage =
        Arc::new(LocalStorage::new(dir.path().join("storage")).expect("fixture: storage"));
    let b = KeyedBackend::builder(dir.path().join("db"))
        .options(options())
        .max_parallelism(8)
        .checkpoint_storage(storage.clone())
        .checkpoint_options(CheckpointOptions {
            retained: 2,
            transfer_threads: 1,
            ..CheckpointOptions::default()
        })
        .open()
        .expect("fixture: open");
    let mut checkpoints = Vec::new();
    for id in 1..=2u64 {
        write_round(&b, id as u32).expect("fixture: write");
        b.checkpoint(id).expect("fixture: checkpoint");
        b.notify_checkpoint_complete(id).expect("fixture: complete");
        checkpoints.push(read_contents(&b).expect("fixture: read"));
    }
    drop(b);
    let mut files = Vec::new();
    collect_files(&dir.path().join("storage"), "", &mut files);
    Fixture { files, checkpoints }
}

impl Fixture {
    /// Relative paths of the storage files, in the order mutations index them.
    pub fn file_names(&self) -> Vec<&str> {
        self.files.iter().map(|(n, _)| n.as_str()).collect()
    }
}

/// The fixture, built on first use.
pub fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(build_fixture)
}

/// Applies the mutations `data` describes (5 bytes each: file, operation, 24-bit argument).
fn mutate(files: &mut [(String, Option<Vec<u8>>)], data: &[u8]) {
    let n = files.len();
    if n == 0 {
        return;
    }
    for m in data.chunks(5) {
        let [f, op, a0, a1, a2] = [0, 1, 2, 3, 4].map(|i| m.get(i).copied().unwrap_or(0));
        let arg = u32::from_le_bytes([a0, a1, a2, 0]) as usize;
        let i = f as usize % n;
        let other = arg % n;
        match op % 8 {
            0 => {
                if let Some(bytes) = files[i].1.as_mut().filter(|b| !b.is_empty()) {
                    let at = arg % bytes.len();
                    bytes[at] ^= (op >> 3) | 1;
                }
            }
            1 => {
                if let Some(bytes) = files[i].1.as_mut() {
                    let len = bytes.len();
                    bytes.truncate(arg % (len + 1));
                }
            }
            2 => files[i].1 = None,
            3 => {
                if let Some(bytes) = files[i].1.as_mut() {
                    bytes.extend_from_slice(&m[1..]);
                }
            }
            4 => {
                if let Some(bytes) = files[i].1.as_mut().filter(|b| !b.is_empty()) {
                    let at = arg % bytes.len();
                    let end = (at + 16).min(bytes.len());
                    bytes[at..end].fill(0);
                }
            }
            5 => {
                let a = files[i].1.take();
                let b = files[other].1.take();
                files[i].1 = b;
                files[other].1 = a;
            }
            6 => files[i].1 = files[other].1.clone(),
            _ => {
                // The tail of the file from `arg` on, written over its head (keeps the size).
                if let Some(bytes) = files[i].1.as_mut().filter(|b| !b.is_empty()) {
                    let at = arg % bytes.len();
                    let tail = bytes[at..].to_vec();
                    bytes[..tail.len()].copy_from_slice(&tail);
                }
            }
        }
    }
}

/// What a restore of a mutated directory did (both are fine; a panic is a finding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Restored the state of a completed checkpoint.
    Restored,
    /// Rejected with a typed error.
    Rejected,
}

/// One fuzz input: mutate, restore, check the oracle. Panics on a finding.
pub fn run(data: &[u8]) -> Outcome {
    let fx = fixture();
    let mut files: Vec<(String, Option<Vec<u8>>)> = fx
        .files
        .iter()
        .map(|(n, b)| (n.clone(), Some(b.clone())))
        .collect();
    mutate(&mut files, data);
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("storage");
    for (name, bytes) in &files {
        if let Some(bytes) = bytes {
            let path = root.join(name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).expect("create dir");
            }
            std::fs::write(&path, bytes).expect("write file");
        }
    }
    let storage = match LocalStorage::new(&root) {
        Ok(s) => Arc::new(s),
        Err(_) => return Outcome::Rejected,
    };
    let restored = KeyedBackend::builder(dir.path().join("restored"))
        .options(options())
        .max_parallelism(8)
        .checkpoint_storage(storage)
        .restore(RestoreFrom::Latest);
    match restored {
        Err(e) => {
            // A typed error with a message that says something.
            assert!(!e.to_string().is_empty());
            Outcome::Rejected
        }
        Ok(b) => {
            let got = read_contents(&b).expect("a restored backend must be readable");
            assert!(
                fx.checkpoints.contains(&got),
                "restore succeeded with a state that no completed checkpoint had"
            );
            Outcome::Restored
        }
    }
}

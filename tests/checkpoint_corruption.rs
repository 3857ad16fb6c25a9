//! Corrupted storage (design.md §7, §10 invariant 1 from the reader's side): flipping or
//! truncating any file of a checkpoint, or deleting it, makes restore fail with a typed error
//! naming the file, never a panic and never a wrong state. A seeded randomized test mutates a
//! small real checkpoint directory (byte flips, truncations, deletions, extra files) and
//! restores: the result is the exact model state or a typed error.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use rand::Rng;
use rockstate::{CheckpointOptions, CheckpointStorage, Error, LocalStorage, RestoreFrom};

/// A storage directory with two retained checkpoints and the model of the newest.
struct Base {
    _dir: tempfile::TempDir,
    storage_root: PathBuf,
    /// Model of checkpoint 1 and 2 (index 0 and 1).
    models: Vec<Model>,
    model: Model,
    newest: u64,
}

fn build_base() -> Base {
    let fx = Fixture::new();
    let b = fx.open(
        "a",
        CheckpointOptions {
            retained: 2,
            ..CheckpointOptions::default()
        },
    );
    let mut model = Model::new();
    let mut r = rng(30);
    let mut models = Vec::new();
    for cp in 1..=2 {
        random_writes(&b, &mut model, &mut r, 2500);
        b.checkpoint(cp).unwrap();
        b.notify_checkpoint_complete(cp).unwrap();
        models.push(model.clone());
    }
    drop(b);
    let root = fx.local_root();
    Base {
        storage_root: root,
        models,
        model,
        newest: 2,
        _dir: fx.dir,
    }
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// A private copy of the base storage.
fn fresh_copy(base: &Base, scratch: &Path) -> (PathBuf, Arc<LocalStorage>) {
    let root = scratch.join(format!("storage-{:x}", rand::random::<u64>()));
    copy_dir(&base.storage_root, &root);
    let storage = Arc::new(LocalStorage::new(&root).unwrap());
    (root, storage)
}

#[derive(Debug, Clone, Copy)]
enum Mutation {
    FlipFirst,
    FlipMiddle,
    FlipLast,
    TruncateHalf,
    TruncateEmpty,
    TruncateOneByte,
    Delete,
}

fn mutate(path: &Path, m: Mutation) {
    let mut bytes = fs::read(path).unwrap();
    let n = bytes.len();
    match m {
        Mutation::FlipFirst if n > 0 => bytes[0] ^= 0x01,
        Mutation::FlipMiddle if n > 0 => bytes[n / 2] ^= 0x80,
        Mutation::FlipLast if n > 0 => bytes[n - 1] ^= 0x10,
        Mutation::TruncateHalf => bytes.truncate(n / 2),
        Mutation::TruncateEmpty => bytes.clear(),
        Mutation::TruncateOneByte => bytes.truncate(n.saturating_sub(1)),
        Mutation::Delete => {
            fs::remove_file(path).unwrap();
            return;
        }
        _ => {}
    }
    fs::write(path, bytes).unwrap();
}

/// Every file the newest checkpoint references, and its manifest, in turn × every mutation:
/// restore of that checkpoint fails with an error naming the file.
#[test]
fn every_damaged_file_is_named() {
    let base = build_base();
    let scratch = tempfile::tempdir().unwrap();
    let (_, probe) = fresh_copy(&base, scratch.path());
    let committed: Vec<String> = probe
        .list("chk-")
        .unwrap()
        .into_iter()
        .map(|o| o.name)
        .filter(|n| n.starts_with(&format!("chk-{}/", base.newest)) && n.ends_with("/_metadata"))
        .collect();
    assert_eq!(committed.len(), 1);
    let meta_name = committed[0].clone();
    let manifest = sst_format::decode_manifest(&probe.get_bytes(&meta_name).unwrap()).unwrap();
    let mut files: Vec<String> = vec![meta_name.clone()];
    files.extend(manifest.shared_files.iter().map(|f| f.remote_name.clone()));
    files.extend(manifest.private_files.iter().map(|f| f.remote_name.clone()));
    assert!(files.len() >= 5, "{files:?}");

    let mutations = [
        Mutation::FlipFirst,
        Mutation::FlipMiddle,
        Mutation::FlipLast,
        Mutation::TruncateHalf,
        Mutation::TruncateEmpty,
        Mutation::TruncateOneByte,
        Mutation::Delete,
    ];
    let mut cases = 0;
    for file in &files {
        for m in mutations {
            let (root, storage) = fresh_copy(&base, scratch.path());
            mutate(&root.join(file), m);
            let target = scratch.path().join(format!("t-{cases}"));
            let result = restore_from(storage, &target, RestoreFrom::Checkpoint(base.newest));
            cases += 1;
            match result {
                Err(Error::CheckpointCorrupt { file: named, .. }) => {
                    assert_eq!(&named, file, "{m:?}")
                }
                // Deleting the manifest uncommits the checkpoint.
                Err(Error::CheckpointNotFound(_))
                    if file == &meta_name && matches!(m, Mutation::Delete) => {}
                other => panic!("{file} {m:?}: {:?}", other.map(|_| "restored")),
            }
            // A failed restore leaves no files behind.
            assert!(!target.exists(), "{file} {m:?}");
            let _ = fs::remove_dir_all(&root);
        }
    }
    assert_eq!(cases, files.len() * mutations.len());
    // The undamaged base still restores exactly.
    let (_, storage) = fresh_copy(&base, scratch.path());
    let ok = restore_from(storage, &scratch.path().join("ok"), RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&ok), base.model);
}

fn random_object(root: &Path, rng: &mut impl Rng) -> Option<PathBuf> {
    let mut all = Vec::new();
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in fs::read_dir(dir).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                walk(&e.path(), out);
            } else {
                out.push(e.path());
            }
        }
    }
    walk(root, &mut all);
    all.retain(|p| !p.components().any(|c| c.as_os_str() == ".tmp"));
    all.sort();
    if all.is_empty() {
        return None;
    }
    let i = rng.random_range(0..all.len());
    Some(all.swap_remove(i))
}

/// The `restore_dir` fuzz scenario as a seeded test: 1–3 random mutations of a real
/// checkpoint storage directory, then restore of the latest checkpoint: either the exact
/// model (only when nothing that matters was hit) or a typed error; never a panic.
#[test]
fn restore_dir_randomized() {
    let base = build_base();
    let scratch = tempfile::tempdir().unwrap();
    let mut r = rng(31);
    let (mut oks, mut errs) = (0, 0);
    for case in 0..80 {
        let (root, storage) = fresh_copy(&base, scratch.path());
        let mut harmless = true;
        for _ in 0..r.random_range(1..=3) {
            match r.random_range(0..6) {
                0 | 1 => {
                    if let Some(p) = random_object(&root, &mut r) {
                        let mut bytes = fs::read(&p).unwrap();
                        if !bytes.is_empty() {
                            let i = r.random_range(0..bytes.len());
                            bytes[i] ^= 1 << r.random_range(0..8);
                            fs::write(&p, bytes).unwrap();
                            harmless = false;
                        }
                    }
                }
                2 => {
                    if let Some(p) = random_object(&root, &mut r) {
                        let len = fs::metadata(&p).unwrap().len();
                        let keep = r.random_range(0..len.max(1));
                        fs::OpenOptions::new()
                            .write(true)
                            .open(&p)
                            .unwrap()
                            .set_len(keep)
                            .unwrap();
                        harmless = false;
                    }
                }
                3 => {
                    if let Some(p) = random_object(&root, &mut r) {
                        fs::remove_file(&p).unwrap();
                        harmless = false;
                    }
                }
                4 => {
                    // An extra file somewhere: never affects a restore.
                    let dirs = ["", "shared", "chk-2", "chk-77/zz"];
                    let d = root.join(dirs[r.random_range(0..dirs.len())]);
                    fs::create_dir_all(&d).unwrap();
                    let junk: Vec<u8> = (0..r.random_range(0..64)).map(|_| r.random()).collect();
                    fs::write(d.join(format!("extra-{}", r.random::<u32>())), junk).unwrap();
                }
                _ => {
                    // A garbage manifest of a newer checkpoint: Latest must pick it and fail.
                    let d = root.join(format!("chk-{}/feed", 100 + case));
                    fs::create_dir_all(&d).unwrap();
                    let junk: Vec<u8> = (0..r.random_range(0..64)).map(|_| r.random()).collect();
                    fs::write(d.join("_metadata"), junk).unwrap();
                    harmless = false;
                }
            }
        }
        let target = scratch.path().join(format!("t-{case}"));
        match restore_from(storage, &target, RestoreFrom::Latest) {
            Ok(b) => {
                // Deleting the newest manifest legitimately falls back to checkpoint 1.
                let id = b.last_completed_checkpoint().unwrap();
                assert!(id == 2 || !harmless, "case {case}");
                let want = &base.models[(id - 1) as usize];
                assert_eq!(&read_all(&b), want, "case {case}: wrong state restored");
                oks += 1;
            }
            Err(e) => {
                assert!(
                    !harmless,
                    "case {case}: harmless mutation failed the restore: {e}"
                );
                assert!(
                    matches!(
                        e,
                        Error::CheckpointCorrupt { .. }
                            | Error::CheckpointNotFound(_)
                            | Error::RocksDb(_)
                            | Error::ObjectNotFound { .. }
                    ),
                    "case {case}: {e:?}"
                );
                errs += 1;
            }
        }
        let _ = fs::remove_dir_all(&root);
        let _ = fs::remove_dir_all(&target);
    }
    assert!(oks > 0 && errs > 0, "oks {oks} errs {errs}");
}

//! Corrupted storage (docs/checkpoint-format.md §7; docs/architecture.md §8, invariant 1 from the
//! reader's side): flipping or truncating any file of a checkpoint, or deleting it, makes restore
//! fail with a typed error naming the file, never a panic and never a wrong state; in changelog
//! mode too, for every log segment a log checkpoint names. A seeded randomized test mutates a
//! small real checkpoint directory (byte flips, truncations, deletions, extra files) and
//! restores: the result is the exact model state or a typed error.
//!
//! Every test runs on local storage (each case on a private copy of the storage directory)
//! and on the S3 test server (objects rewritten, truncated and deleted through the raw
//! `object_store` client; after each case the bucket is put back to the base).

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use object_store::{ObjectStoreExt, PutPayload};
use rand::Rng;
use rockstate::{
    ChangelogOptions, CheckpointOptions, CheckpointStorage, Error, LocalStorage, ObjectStorage,
    RestoreFrom,
};

/// Where the base checkpoints live.
enum BaseStorage {
    /// A storage directory; each case works on a private copy.
    Local(PathBuf),
    /// A bucket on the S3 test server, with every object's bytes after the base was built;
    /// cases damage it in place and [`Case::finish`] puts it back.
    S3(Arc<ObjectStorage>, BTreeMap<String, Vec<u8>>),
}

on_every_storage!(
    every_damaged_file_is_named,
    every_damaged_file_of_a_log_checkpoint_is_named,
    restore_dir_randomized
);

/// Storage with two retained checkpoints and the model of the newest.
struct Base {
    _dir: tempfile::TempDir,
    storage: BaseStorage,
    /// Model of checkpoint 1 and 2 (index 0 and 1); empty for the changelog-mode base.
    models: Vec<Model>,
    model: Model,
    newest: u64,
}

fn build_base(fx: Fixture) -> Base {
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
    base_of(fx, models, model, 2)
}

/// Changelog mode (docs/checkpoint-format.md §11): checkpoint 1 materializes, checkpoints 2
/// and 3 log the writes since, so checkpoint 3 names two log segments.
fn build_log_base(fx: Fixture) -> Base {
    let b = fx.open(
        "a",
        CheckpointOptions {
            retained: 2,
            changelog: ChangelogOptions {
                enabled: true,
                ..ChangelogOptions::default()
            },
            ..CheckpointOptions::default()
        },
    );
    let (model, _) = materialize_then_log(&b, 32, 2500, 2, 800);
    drop(b);
    // Only the newest checkpoint's model is compared.
    base_of(fx, Vec::new(), model, 3)
}

/// The [`Base`] of `fx`'s storage, whose newest checkpoint is `newest` (state `model`).
fn base_of(fx: Fixture, models: Vec<Model>, model: Model, newest: u64) -> Base {
    let storage = match &fx.local {
        Some(local) => BaseStorage::Local(local.root().to_path_buf()),
        None => {
            let s3 = fx.s3.clone().expect("the fixture's storage is local or S3");
            BaseStorage::S3(s3, fx.objects())
        }
    };
    Base {
        storage,
        models,
        model,
        newest,
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

/// One case's storage: a private copy of a local base, or the S3 base itself. Objects are
/// read, rewritten and deleted behind the storage's back (a local file, or the raw
/// `object_store` client for S3).
struct Case<'a> {
    base: &'a Base,
    /// The private copy's root (local storage only).
    root: Option<PathBuf>,
    storage: Arc<dyn CheckpointStorage>,
}

impl Case<'_> {
    fn new<'a>(base: &'a Base, scratch: &Path) -> Case<'a> {
        match &base.storage {
            BaseStorage::Local(base_root) => {
                let root = scratch.join(format!("storage-{:x}", rand::random::<u64>()));
                copy_dir(base_root, &root);
                let storage = Arc::new(LocalStorage::new(&root).unwrap());
                Case {
                    base,
                    root: Some(root),
                    storage,
                }
            }
            BaseStorage::S3(s3, _) => Case {
                base,
                root: None,
                storage: s3.clone(),
            },
        }
    }

    fn s3(&self) -> Option<&Arc<ObjectStorage>> {
        match &self.base.storage {
            BaseStorage::S3(s3, _) => Some(s3),
            BaseStorage::Local(_) => None,
        }
    }

    /// Runs a raw `object_store` operation on object `name` of the S3 base.
    fn raw<T: Send + 'static, F>(
        &self,
        s3: &ObjectStorage,
        name: &str,
        op: impl FnOnce(Arc<dyn object_store::ObjectStore>, object_store::path::Path) -> F,
    ) -> T
    where
        F: std::future::Future<Output = object_store::Result<T>> + Send + 'static,
    {
        let path = s3.object_path(name).unwrap();
        s3.run(op(s3.store(), path)).unwrap().unwrap()
    }

    /// Every object name (local: files outside `.tmp`).
    fn names(&self) -> Vec<String> {
        let Some(root) = &self.root else {
            return self
                .storage
                .list("")
                .unwrap()
                .into_iter()
                .map(|o| o.name)
                .collect();
        };
        let mut all = Vec::new();
        fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
            for e in fs::read_dir(dir).unwrap().flatten() {
                if e.file_type().unwrap().is_dir() {
                    walk(root, &e.path(), out);
                } else {
                    let rel = e.path().strip_prefix(root).unwrap().to_path_buf();
                    out.push(rel.to_str().unwrap().to_string());
                }
            }
        }
        walk(root, root, &mut all);
        all.retain(|n| !n.split('/').any(|c| c == ".tmp"));
        all
    }

    fn read(&self, name: &str) -> Vec<u8> {
        match (&self.root, self.s3()) {
            (Some(root), _) => fs::read(root.join(name)).unwrap(),
            (None, Some(s3)) => self
                .raw(s3, name, |store, path| async move {
                    store.get(&path).await?.bytes().await
                })
                .to_vec(),
            (None, None) => unreachable!("a case is local or S3"),
        }
    }

    /// Writes `bytes` as object `name`, replacing what is there.
    fn write(&self, name: &str, bytes: Vec<u8>) {
        match (&self.root, self.s3()) {
            (Some(root), _) => {
                let path = root.join(name);
                fs::create_dir_all(path.parent().unwrap()).unwrap();
                fs::write(path, bytes).unwrap()
            }
            (None, Some(s3)) => self.raw(s3, name, |store, path| async move {
                store.put(&path, PutPayload::from(bytes)).await.map(|_| ())
            }),
            (None, None) => unreachable!("a case is local or S3"),
        }
    }

    fn remove(&self, name: &str) {
        match (&self.root, self.s3()) {
            (Some(root), _) => fs::remove_file(root.join(name)).unwrap(),
            (None, Some(s3)) => {
                self.raw(
                    s3,
                    name,
                    |store, path| async move { store.delete(&path).await },
                )
            }
            (None, None) => unreachable!("a case is local or S3"),
        }
    }

    /// Local: deletes the private copy. S3: puts every base object back with its base bytes
    /// and deletes every other object (damage, junk, claims a restore wrote).
    fn finish(self) {
        match &self.base.storage {
            BaseStorage::Local(_) => {
                let _ = fs::remove_dir_all(self.root.as_ref().unwrap());
            }
            BaseStorage::S3(_, objects) => {
                let now = self.names();
                for name in now.iter().filter(|n| !objects.contains_key(*n)) {
                    self.remove(name);
                }
                for (name, bytes) in objects {
                    if self.storage.get_bytes(name).ok().as_ref() != Some(bytes) {
                        self.write(name, bytes.clone());
                    }
                }
            }
        }
    }
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

fn mutate(case: &Case, name: &str, m: Mutation) {
    let mut bytes = case.read(name);
    let n = bytes.len();
    match m {
        Mutation::FlipFirst if n > 0 => bytes[0] ^= 0x01,
        Mutation::FlipMiddle if n > 0 => bytes[n / 2] ^= 0x80,
        Mutation::FlipLast if n > 0 => bytes[n - 1] ^= 0x10,
        Mutation::TruncateHalf => bytes.truncate(n / 2),
        Mutation::TruncateEmpty => bytes.clear(),
        Mutation::TruncateOneByte => bytes.truncate(n.saturating_sub(1)),
        Mutation::Delete => {
            case.remove(name);
            return;
        }
        _ => {}
    }
    case.write(name, bytes);
}

/// Every file the newest checkpoint references, and its manifest, in turn × every mutation:
/// restore of that checkpoint fails with an error naming the file.
fn every_damaged_file_is_named(fx: Fixture) {
    sweep(build_base(fx), 5);
}

/// The same for a log checkpoint: its manifest, the materialization's files and every log
/// segment it names.
fn every_damaged_file_of_a_log_checkpoint_is_named(fx: Fixture) {
    sweep(build_log_base(fx), 7);
}

/// Damages each file the newest checkpoint of `base` names (at least `least` of them) with
/// every mutation in turn and restores: the error names the file.
fn sweep(base: Base, least: usize) {
    let scratch = tempfile::tempdir().unwrap();
    let probe_case = Case::new(&base, scratch.path());
    let probe = probe_case.storage.clone();
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
    if let Some(log) = &manifest.changelog {
        assert!(log.segments.len() >= 2, "{:?}", log.segments);
        files.extend(log.segments.iter().map(|s| s.remote_name.clone()));
    }
    assert!(files.len() >= least, "{files:?}");

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
    probe_case.finish();
    for file in &files {
        for m in mutations {
            let case = Case::new(&base, scratch.path());
            mutate(&case, file, m);
            let target = scratch.path().join(format!("t-{cases}"));
            let result = restore_from(
                case.storage.clone(),
                &target,
                RestoreFrom::Checkpoint(base.newest),
            );
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
            case.finish();
        }
    }
    assert_eq!(cases, files.len() * mutations.len());
    // The undamaged base still restores exactly.
    let case = Case::new(&base, scratch.path());
    let ok = restore_from(
        case.storage.clone(),
        &scratch.path().join("ok"),
        RestoreFrom::Latest,
    )
    .unwrap();
    assert_eq!(read_all(&ok), base.model);
}

fn random_object(case: &Case, rng: &mut impl Rng) -> Option<String> {
    let mut all = case.names();
    all.sort();
    if all.is_empty() {
        return None;
    }
    let i = rng.random_range(0..all.len());
    Some(all.swap_remove(i))
}

/// The `restore_dir` fuzz scenario as a seeded test: 1–3 random mutations of a real
/// checkpoint storage directory, then restore of the latest checkpoint: either the exact
/// model (only when nothing that matters was hit) or a typed error; never a panic. 80 cases
/// on local storage, 25 on the (slow) S3 test server.
fn restore_dir_randomized(fx: Fixture) {
    let cases = if fx.s3.is_some() { 25 } else { 80 };
    let base = build_base(fx);
    let scratch = tempfile::tempdir().unwrap();
    let mut r = rng(31);
    let (mut oks, mut errs) = (0, 0);
    for case in 0..cases {
        let damage = Case::new(&base, scratch.path());
        let mut harmless = true;
        for _ in 0..r.random_range(1..=3) {
            match r.random_range(0..6) {
                0 | 1 => {
                    if let Some(name) = random_object(&damage, &mut r) {
                        let mut bytes = damage.read(&name);
                        if !bytes.is_empty() {
                            let i = r.random_range(0..bytes.len());
                            bytes[i] ^= 1 << r.random_range(0..8);
                            damage.write(&name, bytes);
                            harmless = false;
                        }
                    }
                }
                2 => {
                    if let Some(name) = random_object(&damage, &mut r) {
                        let mut bytes = damage.read(&name);
                        let keep = r.random_range(0..(bytes.len() as u64).max(1));
                        bytes.truncate(keep as usize);
                        damage.write(&name, bytes);
                        harmless = false;
                    }
                }
                3 => {
                    if let Some(name) = random_object(&damage, &mut r) {
                        damage.remove(&name);
                        harmless = false;
                    }
                }
                4 => {
                    // An extra file somewhere: never affects a restore.
                    let dirs = ["", "shared/", "chk-2/", "chk-77/zz/"];
                    let d = dirs[r.random_range(0..dirs.len())];
                    let junk: Vec<u8> = (0..r.random_range(0..64)).map(|_| r.random()).collect();
                    damage.write(&format!("{d}extra-{}", r.random::<u32>()), junk);
                }
                _ => {
                    // A garbage manifest of a newer checkpoint: Latest must pick it and fail.
                    let junk: Vec<u8> = (0..r.random_range(0..64)).map(|_| r.random()).collect();
                    damage.write(&format!("chk-{}/feed/_metadata", 100 + case), junk);
                    harmless = false;
                }
            }
        }
        let target = scratch.path().join(format!("t-{case}"));
        match restore_from(damage.storage.clone(), &target, RestoreFrom::Latest) {
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
                            | Error::RocksDb { .. }
                            | Error::ObjectNotFound { .. }
                    ),
                    "case {case}: {e:?}"
                );
                errs += 1;
            }
        }
        damage.finish();
        let _ = fs::remove_dir_all(&target);
    }
    assert!(oks > 0 && errs > 0, "oks {oks} errs {errs}");
}

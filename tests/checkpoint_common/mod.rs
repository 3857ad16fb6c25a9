//! Helpers shared by the `checkpoint_*` integration tests: a storage fixture, a small model of
//! a value state, and snapshots of the storage's objects. Fixtures run on local storage or on
//! the S3 test server ([`s3`]); [`on_every_storage!`] runs a test body on both.
#![allow(dead_code)]

pub mod crash;
pub mod hooked;
pub mod process;
pub mod s3;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rockstate::checkpoint::layout;
use rockstate::{
    ChangelogOptions, CheckpointOptions, CheckpointStorage, DbOptions, FaultyStorage, KeyedBackend,
    LocalStorage, ObjectStorage, RestoreFrom, ValueState,
};
use sst_format::{CheckpointManifest, JobCheckpoint};

/// Keys the model uses.
pub const KEYS: u32 = 3000;

/// The model: key → value of the value state `v`.
pub type Model = BTreeMap<u32, u64>;

/// Small RocksDB settings so tests make several SSTs quickly.
pub fn small_options() -> DbOptions {
    DbOptions {
        write_buffer_size: 256 << 10,
        target_file_size_base: 256 << 10,
        ..DbOptions::default()
    }
}

/// Changelog mode on, materializing only once the log exceeds `percent` % of the state.
pub fn changelog_options(percent: u32) -> CheckpointOptions {
    CheckpointOptions {
        changelog: ChangelogOptions {
            enabled: true,
            materialize_interval_ms: u64::MAX,
            materialize_log_percent: percent,
            materialize_min_log_bytes: 0,
            ..ChangelogOptions::default()
        },
        ..CheckpointOptions::default()
    }
}

/// A temporary directory holding backend directories, and the checkpoint storage (a
/// directory inside it, or a fresh bucket on the S3 test server).
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub storage: Arc<dyn CheckpointStorage>,
    /// The local storage, when the fixture uses one.
    pub local: Option<Arc<LocalStorage>>,
    /// The S3 storage, when the fixture uses the S3 test server.
    pub s3: Option<Arc<ObjectStorage>>,
}

impl Fixture {
    /// Local storage in the temporary directory.
    pub fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let local = Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
        Fixture {
            dir,
            storage: local.clone(),
            local: Some(local),
            s3: None,
        }
    }

    /// A fresh bucket on the S3 test server.
    pub fn s3() -> Fixture {
        let s3 = s3::server().storage();
        Fixture {
            s3: Some(s3.clone()),
            ..Fixture::with_storage(s3)
        }
    }

    /// Any storage.
    pub fn with_storage(storage: Arc<dyn CheckpointStorage>) -> Fixture {
        Fixture {
            dir: tempfile::tempdir().unwrap(),
            storage,
            local: None,
            s3: None,
        }
    }

    /// The root directory of the local storage (panics for other storage).
    pub fn local_root(&self) -> PathBuf {
        self.local
            .as_ref()
            .expect("this test needs local storage")
            .root()
            .to_path_buf()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn storage_dyn(&self) -> Arc<dyn CheckpointStorage> {
        self.storage.clone()
    }

    /// Opens (or reopens) backend directory `name` with checkpoint options `opts`.
    pub fn open(&self, name: &str, opts: CheckpointOptions) -> KeyedBackend {
        KeyedBackend::builder(self.path(name))
            .options(small_options())
            .checkpoint_storage(self.storage_dyn())
            .checkpoint_options(opts)
            .open()
            .unwrap()
    }

    /// Opens backend directory `name` (default checkpoint options) on a `FaultyStorage`
    /// around this fixture's storage, which it returns too: faults added to it hit the
    /// backend's checkpoints and commits.
    pub fn open_on_faulty(&self, name: &str) -> (Arc<FaultyStorage>, KeyedBackend) {
        let faulty = Arc::new(FaultyStorage::new(self.storage_dyn()));
        let b = KeyedBackend::builder(self.path(name))
            .options(small_options())
            .checkpoint_storage(faulty.clone())
            .checkpoint_options(CheckpointOptions::default())
            .open()
            .unwrap();
        (faulty, b)
    }

    /// Restores into backend directory `name`.
    pub fn restore(&self, name: &str, from: RestoreFrom) -> rockstate::Result<KeyedBackend> {
        restore_from(self.storage_dyn(), &self.path(name), from)
    }

    /// Restores the latest checkpoint into backend directory `name` with checkpoint options
    /// `opts`, with the restore's report.
    pub fn restore_reported(
        &self,
        name: &str,
        opts: CheckpointOptions,
    ) -> (KeyedBackend, rockstate::RestoreReport) {
        KeyedBackend::builder(self.path(name))
            .options(small_options())
            .checkpoint_storage(self.storage_dyn())
            .checkpoint_options(opts)
            .restore_with_report(RestoreFrom::Latest)
            .unwrap()
    }

    /// Every object in storage with its bytes.
    pub fn objects(&self) -> BTreeMap<String, Vec<u8>> {
        objects(self.storage.as_ref())
    }

    /// The manifest of checkpoint `id` of `backend`.
    pub fn manifest(&self, id: u64, backend: &str) -> CheckpointManifest {
        let bytes = self
            .storage
            .get_bytes(&layout::metadata_name(id, backend))
            .unwrap();
        sst_format::decode_manifest(&bytes).unwrap()
    }

    /// Rewrites the manifest of checkpoint `id` of `backend` in storage, changed by `edit`
    /// (re-encoded, so its own checks pass).
    pub fn edit_manifest(
        &self,
        id: u64,
        backend: &str,
        edit: impl FnOnce(&mut CheckpointManifest),
    ) {
        let name = layout::metadata_name(id, backend);
        let mut m = self.manifest(id, backend);
        edit(&mut m);
        self.storage.delete(&name).unwrap();
        self.storage
            .put_bytes(&name, &sst_format::encode_manifest(&m).unwrap())
            .unwrap();
    }

    /// Replaces the local object `name` with its bytes changed by `damage` (as a new file: the
    /// object may share its inode with a restored database); returns the new bytes.
    pub fn damage_object(&self, name: &str, damage: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let path = self.local_root().join(name);
        let mut bytes = std::fs::read(&path).unwrap();
        damage(&mut bytes);
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        bytes
    }

    /// Committed checkpoint ids of `backend`, ascending.
    pub fn committed_ids(&self, backend: &str) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .storage
            .list("chk-")
            .unwrap()
            .iter()
            .filter_map(|o| {
                let p = layout::parse_checkpoint_object(&o.name)?;
                (p.is_metadata() && p.backend_id == backend).then_some(p.id)
            })
            .collect();
        ids.sort_unstable();
        ids
    }
}

pub fn restore_from(
    storage: Arc<dyn CheckpointStorage>,
    path: &Path,
    from: RestoreFrom,
) -> rockstate::Result<KeyedBackend> {
    KeyedBackend::builder(path)
        .options(small_options())
        .checkpoint_storage(storage)
        .restore(from)
}

pub fn objects(storage: &dyn CheckpointStorage) -> BTreeMap<String, Vec<u8>> {
    storage
        .list("")
        .unwrap()
        .into_iter()
        .map(|o| {
            let bytes = storage.get_bytes(&o.name).unwrap();
            (o.name, bytes)
        })
        .collect()
}

pub fn state(backend: &KeyedBackend) -> ValueState<u32, (), u64> {
    backend.value_state::<u32, (), u64>("v").unwrap()
}

/// `n` random puts (and some deletes) applied to the backend and the model.
pub fn random_writes(backend: &KeyedBackend, model: &mut Model, rng: &mut SmallRng, n: usize) {
    let s = state(backend);
    for _ in 0..n {
        let k = rng.random_range(0..KEYS);
        if !owns(backend, k) {
            continue;
        }
        if rng.random_ratio(1, 10) {
            s.clear(&k, &()).unwrap();
            model.remove(&k);
        } else {
            let v: u64 = rng.random();
            s.put(&k, &(), &v).unwrap();
            model.insert(k, v);
        }
    }
}

/// Reads every key of the universe back.
pub fn read_all(backend: &KeyedBackend) -> Model {
    let s = state(backend);
    (0..KEYS)
        .filter(|k| owns(backend, *k))
        .filter_map(|k| s.get(&k, &()).unwrap().map(|v| (k, v)))
        .collect()
}

/// Whether `backend` owns key `k`'s key group.
pub fn owns(backend: &KeyedBackend, k: u32) -> bool {
    let bytes = rockstate::codec::encode(&k, "key").unwrap();
    let group = rockstate::keygroup::key_group_of(&bytes, backend.max_parallelism());
    backend.key_groups().contains(group)
}

/// The part of `model` in `backend`'s key groups.
pub fn owned_part(backend: &KeyedBackend, model: &Model) -> Model {
    model
        .iter()
        .filter(|(k, _)| owns(backend, **k))
        .map(|(k, v)| (*k, *v))
        .collect()
}

/// The first of two instances of the fixtures' job at `target`: restoring it from a single
/// full-range backend clips. Every file comes from `storage`, none from a local copy.
pub fn first_half_builder(
    target: &Path,
    storage: Arc<dyn CheckpointStorage>,
) -> rockstate::BackendBuilder {
    KeyedBackend::builder(target)
        .options(small_options())
        .key_groups(rockstate::KeyGroupRange::for_operator(128, 2, 0).unwrap())
        .checkpoint_storage(storage)
        .checkpoint_options(CheckpointOptions {
            local_recovery: false,
            ..CheckpointOptions::default()
        })
}

pub fn rng(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed)
}

/// Asserts invariant 1 over the whole storage and returns the unreferenced shared objects.
pub fn assert_verified(storage: &dyn CheckpointStorage) -> Vec<String> {
    let report = rockstate::verify_checkpoints(storage).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    report.unreferenced_shared
}

/// Remembers every object's bytes; fails if a name ever shows other bytes (invariant 5).
#[derive(Default)]
pub struct OverwriteWatch {
    seen: BTreeMap<String, Vec<u8>>,
}

impl OverwriteWatch {
    pub fn observe(&mut self, storage: &dyn CheckpointStorage) {
        for (name, bytes) in objects(storage) {
            if let Some(old) = self.seen.get(&name) {
                assert!(
                    old == &bytes,
                    "object {name} was overwritten with other bytes"
                );
            } else {
                self.seen.insert(name, bytes);
            }
        }
    }
}

/// Runs each test body `fn name(fx: Fixture)` twice: as `local::name` on local storage and as
/// `s3::name` on a fresh bucket of the S3 test server.
#[macro_export]
macro_rules! on_every_storage {
    ($($name:ident),* $(,)?) => {
        $crate::on_local_and_s3!(common::Fixture, new, s3; $($name),*);
    };
}

/// Changelog mode: `writes` random writes into `b`, materialized by checkpoint 1, then
/// `logged` log checkpoints (2, 3, ...) of `each` random writes; the model of `b`'s state and
/// the random source, to write on.
pub fn materialize_then_log(
    b: &KeyedBackend,
    seed: u64,
    writes: usize,
    logged: u64,
    each: usize,
) -> (Model, SmallRng) {
    let mut model = Model::new();
    let mut r = rng(seed);
    random_writes(b, &mut model, &mut r, writes);
    assert!(b.checkpoint(1).unwrap().materialized);
    b.notify_checkpoint_complete(1).unwrap();
    for cp in 2..2 + logged {
        random_writes(b, &mut model, &mut r, each);
        assert!(!b.checkpoint(cp).unwrap().materialized, "checkpoint {cp}");
        b.notify_checkpoint_complete(cp).unwrap();
    }
    (model, r)
}

/// Checkpoint `id` of `b`, the one task of `owner`'s job, completed as a coordinator does:
/// the owner commits its record, then the backend is told.
pub fn checkpoint_completed_by(
    owner: &rockstate::JobOwner,
    b: &KeyedBackend,
    id: u64,
) -> rockstate::CheckpointStats {
    let stats = b.checkpoint(id).unwrap();
    owner.commit(&one_task_record(b, &stats)).unwrap();
    b.notify_checkpoint_complete(id).unwrap();
    stats
}

/// The job record of checkpoint `stats` of a job of one task, `b` (what a coordinator would
/// commit for it).
pub fn one_task_record(b: &KeyedBackend, stats: &rockstate::CheckpointStats) -> JobCheckpoint {
    JobCheckpoint {
        checkpoint_id: stats.checkpoint_id,
        job_name: "one-task".into(),
        max_parallelism: b.max_parallelism(),
        triggered_at_ms: 0,
        completed_at_ms: 0,
        tasks: vec![rockstate::coordinator::task_checkpoint(
            0,
            Some((b, stats)),
            Vec::new(),
        )],
    }
}

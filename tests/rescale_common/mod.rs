//! Helpers shared by the `rescale_*` tests: a model of five states (value, list, map,
//! reducing, aggregating; two namespaces each), random operations applied to backends and
//! model alike, a full comparison of a backend with the model restricted to its key groups,
//! and opening/restoring a set of operator instances at some parallelism. Tests run on local
//! storage and on the S3 test server ([`s3`], shared with the `checkpoint_*` tests);
//! [`on_every_storage!`] runs a test body on both.
#![allow(dead_code)]

#[path = "../checkpoint_common/process.rs"]
pub mod process;
#[path = "../checkpoint_common/s3.rs"]
pub mod s3;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};

use rand::rngs::SmallRng;
use rand::Rng;
use rockstate::checkpoint::layout;
use rockstate::coordinator::task_checkpoint;
use rockstate::{
    AggregateFunction, ChangelogOptions, CheckpointOptions, CheckpointStats, CheckpointStorage,
    DbOptions, JobOwner, KeyGroupRange, KeyedBackend, LocalStorage, RestoreFrom, SystemClock,
};
use sst_format::CheckpointManifest;

/// A temporary directory for backend directories and the checkpoint storage: a directory
/// inside it, or a fresh bucket on the S3 test server.
pub struct Store {
    pub dir: tempfile::TempDir,
    pub storage: Arc<dyn CheckpointStorage>,
    /// Whether the storage is the S3 test server (tests keep their CPU small there).
    pub is_s3: bool,
}

impl Store {
    /// Local storage in the temporary directory.
    pub fn local() -> Store {
        let dir = tempfile::tempdir().unwrap();
        let storage = Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
        Store {
            dir,
            storage,
            is_s3: false,
        }
    }

    /// A fresh bucket on the S3 test server.
    pub fn s3() -> Store {
        Store {
            dir: tempfile::tempdir().unwrap(),
            storage: s3::server().storage(),
            is_s3: true,
        }
    }

    /// Where backend directories go.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Runs each test body `fn name(store: Store)` twice: as `local::name` on local storage and
/// as `s3::name` on a fresh bucket of the S3 test server.
#[macro_export]
macro_rules! on_every_storage {
    ($($name:ident),* $(,)?) => {
        $crate::on_local_and_s3!(rescale_common::Store, local, s3; $($name),*);
    };
}

/// Max parallelism of every job in these tests.
pub const M: u32 = 128;
/// Key universe.
pub const KEYS: u32 = 500;
/// Namespaces.
pub const NS: u8 = 2;

/// Average of the inputs (integer), the aggregating state's function.
pub struct Avg;

impl AggregateFunction for Avg {
    type In = u32;
    type Acc = (u64, u64);
    type Out = u64;
    fn create_accumulator(&self) -> (u64, u64) {
        (0, 0)
    }
    fn add(&self, input: &u32, acc: &mut (u64, u64)) {
        acc.0 += u64::from(*input);
        acc.1 += 1;
    }
    fn result(&self, acc: &(u64, u64)) -> u64 {
        acc.0 / acc.1.max(1)
    }
}

type K = (u32, u8);

/// Expected contents of all five states.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Model {
    pub values: BTreeMap<K, u64>,
    pub lists: BTreeMap<K, Vec<u32>>,
    pub maps: BTreeMap<K, BTreeMap<u16, u32>>,
    pub sums: BTreeMap<K, u64>,
    pub avgs: BTreeMap<K, (u64, u64)>,
}

/// Small RocksDB settings so state spreads over several SSTs.
pub fn small_options() -> DbOptions {
    DbOptions {
        write_buffer_size: 128 << 10,
        target_file_size_base: 128 << 10,
        ..DbOptions::default()
    }
}

/// [`small_options`] without automatic compactions (level 0 compacts at 64 files): the files
/// a restore placed survive until the test's next checkpoint, whenever RocksDB's background
/// threads would have run.
/// Changelog mode on, materializing only on the first checkpoint (the log would have to
/// reach a thousand times the state).
pub fn changelog_options() -> CheckpointOptions {
    CheckpointOptions {
        changelog: ChangelogOptions {
            enabled: true,
            materialize_interval_ms: u64::MAX,
            materialize_log_percent: 100_000,
            materialize_min_log_bytes: 0,
            ..ChangelogOptions::default()
        },
        ..CheckpointOptions::default()
    }
}

pub fn small_options_without_compaction() -> DbOptions {
    DbOptions {
        level0_file_num_compaction_trigger: 64,
        ..small_options()
    }
}

/// Whether `b` owns `key`.
pub fn owns(b: &KeyedBackend, key: u32) -> bool {
    b.key_groups().contains(group(key))
}

/// The key group of `key`.
pub fn group(key: u32) -> u16 {
    let bytes = rockstate::codec::encode(&key, "key").unwrap();
    rockstate::keygroup::key_group_of(&bytes, M)
}

/// Applies `n` random operations on keys `b` owns to `b` and `model`.
pub fn random_ops(b: &KeyedBackend, model: &mut Model, rng: &mut SmallRng, n: usize) {
    let v = b.value_state::<u32, u8, u64>("value").unwrap();
    let l = b.list_state::<u32, u8, u32>("list").unwrap();
    let m = b.map_state::<u32, u8, u16, u32>("map").unwrap();
    let r = b
        .reducing_state::<u32, u8, u64>("reduce", |a, b| a + b)
        .unwrap();
    let a = b.aggregating_state::<u32, u8, Avg>("agg", Avg).unwrap();
    let mut done = 0;
    while done < n {
        let key = rng.random_range(0..KEYS);
        if !owns(b, key) {
            continue;
        }
        done += 1;
        let ns = rng.random_range(0..NS);
        let k = (key, ns);
        let x: u32 = rng.random_range(0..1_000_000);
        match rng.random_range(0..12) {
            0 | 1 => {
                v.put(&key, &ns, &u64::from(x)).unwrap();
                model.values.insert(k, u64::from(x));
            }
            2 => {
                v.clear(&key, &ns).unwrap();
                model.values.remove(&k);
            }
            3 => {
                l.add(&key, &ns, &x).unwrap();
                model.lists.entry(k).or_default().push(x);
            }
            4 => {
                // Two or three elements in one call: stored as one run entry
                // (docs/decisions/0033-list-runs.md); half of them replace the list.
                let run: Vec<u32> = (0..2 + x % 2).map(|i| x.wrapping_add(i)).collect();
                if x % 4 < 2 {
                    l.add_all(&key, &ns, &run).unwrap();
                    model.lists.entry(k).or_default().extend(&run);
                } else {
                    l.update(&key, &ns, &run).unwrap();
                    model.lists.insert(k, run);
                }
            }
            5 => {
                l.clear(&key, &ns).unwrap();
                model.lists.remove(&k);
            }
            6 | 7 => {
                let uk = (x % 16) as u16;
                m.put(&key, &ns, &uk, &x).unwrap();
                model.maps.entry(k).or_default().insert(uk, x);
            }
            8 => {
                let uk = (x % 16) as u16;
                m.remove(&key, &ns, &uk).unwrap();
                if let Some(mm) = model.maps.get_mut(&k) {
                    mm.remove(&uk);
                    if mm.is_empty() {
                        model.maps.remove(&k);
                    }
                }
            }
            9 => {
                r.add(&key, &ns, &u64::from(x)).unwrap();
                *model.sums.entry(k).or_default() += u64::from(x);
            }
            10 => {
                a.add(&key, &ns, &x).unwrap();
                let acc = model.avgs.entry(k).or_default();
                acc.0 += u64::from(x);
                acc.1 += 1;
            }
            _ => {
                a.clear(&key, &ns).unwrap();
                model.avgs.remove(&k);
            }
        }
    }
}

/// Reads every key of the universe that `b` owns and compares with the model; returns the
/// number of (key, namespace) pairs with some state.
pub fn check(b: &KeyedBackend, model: &Model) -> usize {
    let v = b.value_state::<u32, u8, u64>("value").unwrap();
    let l = b.list_state::<u32, u8, u32>("list").unwrap();
    let m = b.map_state::<u32, u8, u16, u32>("map").unwrap();
    let r = b
        .reducing_state::<u32, u8, u64>("reduce", |a, b| a + b)
        .unwrap();
    let a = b.aggregating_state::<u32, u8, Avg>("agg", Avg).unwrap();
    let mut seen = 0;
    for key in (0..KEYS).filter(|k| owns(b, *k)) {
        for ns in 0..NS {
            let k = (key, ns);
            let mut any = false;
            let got = v.get(&key, &ns).unwrap();
            assert_eq!(got, model.values.get(&k).copied(), "value {k:?}");
            any |= got.is_some();
            let got = l.get(&key, &ns).unwrap();
            assert_eq!(
                &got,
                model.lists.get(&k).unwrap_or(&Vec::new()),
                "list {k:?}"
            );
            any |= !got.is_empty();
            let got: BTreeMap<u16, u32> = m.entries(&key, &ns).unwrap().into_iter().collect();
            assert_eq!(
                &got,
                model.maps.get(&k).unwrap_or(&BTreeMap::new()),
                "map {k:?}"
            );
            any |= !got.is_empty();
            let got = r.get(&key, &ns).unwrap();
            assert_eq!(got, model.sums.get(&k).copied(), "reduce {k:?}");
            any |= got.is_some();
            let got = a.get(&key, &ns).unwrap();
            assert_eq!(
                got,
                model.avgs.get(&k).map(|acc| Avg.result(acc)),
                "agg {k:?}"
            );
            any |= got.is_some();
            seen += usize::from(any);
        }
    }
    seen
}

/// Number of (key, namespace) pairs with some state in the model.
pub fn model_pairs(model: &Model) -> usize {
    let mut keys: std::collections::BTreeSet<K> = model.values.keys().copied().collect();
    keys.extend(model.lists.keys());
    keys.extend(model.maps.keys());
    keys.extend(model.sums.keys());
    keys.extend(model.avgs.keys());
    keys.len()
}

/// The owner of the job every instance on `storage` belongs to (one per storage object, as a
/// job has one coordinator), keeping `retained` checkpoints.
pub fn owner_of(storage: &Arc<dyn CheckpointStorage>, retained: usize) -> Arc<JobOwner> {
    static OWNERS: Mutex<Vec<(usize, Weak<JobOwner>)>> = Mutex::new(Vec::new());
    let key = Arc::as_ptr(storage) as *const () as usize;
    let mut owners = OWNERS.lock().unwrap();
    owners.retain(|(_, w)| w.strong_count() > 0);
    if let Some(o) = owners
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, w)| w.upgrade())
    {
        return o;
    }
    let o = Arc::new(JobOwner::open(Arc::clone(storage), retained, Arc::new(SystemClock)).unwrap());
    owners.push((key, Arc::downgrade(&o)));
    o
}

/// Checkpoint `id` of the job made of `backends` (their storage's job): every backend uploads
/// its snapshot, the owner commits the job record naming their manifests, and every backend
/// is told that `id` completed.
pub fn checkpoint_job(
    storage: &Arc<dyn CheckpointStorage>,
    backends: &[&KeyedBackend],
    id: u64,
) -> Vec<CheckpointStats> {
    let owner = owner_of(storage, 1);
    let stats: Vec<CheckpointStats> = backends.iter().map(|b| b.checkpoint(id).unwrap()).collect();
    let record = sst_format::JobCheckpoint {
        checkpoint_id: id,
        job_name: "rescale-test".into(),
        max_parallelism: M,
        triggered_at_ms: 0,
        completed_at_ms: 0,
        tasks: backends
            .iter()
            .zip(&stats)
            .enumerate()
            .map(|(i, (b, st))| task_checkpoint(i as u32, Some((b, st)), Vec::new()))
            .collect(),
    };
    owner.commit(&record).unwrap();
    for b in backends {
        b.notify_checkpoint_complete(id).unwrap();
    }
    stats
}

/// The builder of operator instance `i` of `p` under `dir/name-i`.
fn instance(
    dir: &Path,
    storage: &Arc<dyn CheckpointStorage>,
    name: &str,
    p: u32,
    i: u32,
    opts: &CheckpointOptions,
    options: &DbOptions,
) -> rockstate::BackendBuilder {
    KeyedBackend::builder(dir.join(format!("{name}-{i}")))
        .options(options.clone())
        .max_parallelism(M)
        .key_groups(KeyGroupRange::for_operator(M, p, i).unwrap())
        .checkpoint_storage(Arc::clone(storage))
        .checkpoint_options(opts.clone())
        .job_owner(owner_of(storage, opts.retained))
}

/// Opens `p` fresh operator instances under `dir/name-i`.
pub fn open_fresh(
    dir: &Path,
    storage: &Arc<dyn CheckpointStorage>,
    name: &str,
    p: u32,
    opts: &CheckpointOptions,
) -> Vec<KeyedBackend> {
    open_fresh_with(dir, storage, name, p, opts, &small_options())
}

/// [`open_fresh`] with RocksDB options of the test's own.
pub fn open_fresh_with(
    dir: &Path,
    storage: &Arc<dyn CheckpointStorage>,
    name: &str,
    p: u32,
    opts: &CheckpointOptions,
    options: &DbOptions,
) -> Vec<KeyedBackend> {
    (0..p)
        .map(|i| {
            instance(dir, storage, name, p, i, opts, options)
                .open()
                .unwrap()
        })
        .collect()
}

/// Restores `p` operator instances under `dir/name-i` from `from`.
pub fn restore_all(
    dir: &Path,
    storage: &Arc<dyn CheckpointStorage>,
    name: &str,
    p: u32,
    opts: &CheckpointOptions,
    from: RestoreFrom,
) -> Vec<KeyedBackend> {
    restore_all_with(dir, storage, name, p, opts, from, &small_options())
}

/// [`restore_all`] with RocksDB options of the test's own.
pub fn restore_all_with(
    dir: &Path,
    storage: &Arc<dyn CheckpointStorage>,
    name: &str,
    p: u32,
    opts: &CheckpointOptions,
    from: RestoreFrom,
    options: &DbOptions,
) -> Vec<KeyedBackend> {
    (0..p)
        .map(|i| {
            instance(dir, storage, name, p, i, opts, options)
                .restore(from.clone())
                .unwrap_or_else(|e| panic!("restore {name}-{i}: {e}"))
        })
        .collect()
}

/// Restores checkpoint `id` as one instance owning every key group under `dir/name`, with
/// RocksDB options `options`, and the restore's report.
pub fn restore_one_with(
    dir: &Path,
    storage: &Arc<dyn CheckpointStorage>,
    name: &str,
    id: u64,
    options: &DbOptions,
) -> (KeyedBackend, rockstate::RestoreReport) {
    KeyedBackend::builder(dir.join(name))
        .options(options.clone())
        .max_parallelism(M)
        .key_groups(KeyGroupRange::all(M).unwrap())
        .checkpoint_storage(Arc::clone(storage))
        .job_owner(owner_of(storage, 1))
        .restore_with_report(RestoreFrom::Checkpoint(id))
        .unwrap()
}

/// Checks every backend against the model and that together they cover all of it once.
pub fn check_all(backends: &[KeyedBackend], model: &Model) {
    let total: usize = backends.iter().map(|b| check(b, model)).sum();
    assert_eq!(
        total,
        model_pairs(model),
        "the instances cover the model exactly once"
    );
}

/// Checkpoint `id`'s manifest of `backend`.
pub fn manifest(
    storage: &Arc<dyn CheckpointStorage>,
    id: u64,
    backend: &str,
) -> CheckpointManifest {
    let bytes = storage
        .get_bytes(&layout::metadata_name(id, backend))
        .unwrap();
    sst_format::decode_manifest(&bytes).unwrap()
}

/// Every manifest the job record of checkpoint `id` names.
pub fn job_manifests(storage: &Arc<dyn CheckpointStorage>, id: u64) -> Vec<CheckpointManifest> {
    rockstate::coordinator::read_job_checkpoint(storage.as_ref(), id)
        .unwrap()
        .tasks
        .iter()
        .filter_map(|t| t.manifest.as_deref())
        .map(|name| {
            let p = layout::parse_checkpoint_object(name).unwrap();
            manifest(storage, id, p.backend_id)
        })
        .collect()
}

/// The manifest a backend restored from checkpoint `id` took as its reuse base: the one the
/// job record of `id` names with the most key groups in common.
pub fn restored_base(
    storage: &Arc<dyn CheckpointStorage>,
    b: &KeyedBackend,
    id: u64,
) -> CheckpointManifest {
    let r = b.key_groups();
    job_manifests(storage, id)
        .into_iter()
        .max_by_key(|m| {
            let start = m.key_group_start.max(r.start);
            let end = m.key_group_end.min(r.end);
            (
                i32::from(end) - i32::from(start),
                std::cmp::Reverse(m.key_group_start),
            )
        })
        .unwrap()
}

/// Every file of the restored base that is still live at the first checkpoint after the
/// rescale is referenced under an object name the restored checkpoint already had, not
/// uploaded again. (RocksDB may have compacted some base files away meanwhile; those are
/// legitimately gone.) Several sources may hold one file (same unique id) under different
/// names: a source replayed once for the restores of a split job, each of which uploaded it
/// at its first checkpoint. Reusing any of those copies is reuse.
pub fn assert_base_reused(
    storage: &Arc<dyn CheckpointStorage>,
    b: &KeyedBackend,
    id: u64,
    base: &CheckpointManifest,
) {
    let m = manifest(storage, id, b.backend_id());
    let mut copies: Option<Vec<sst_format::SharedFile>> = None;
    for f in &m.shared_files {
        let Some(old) = base
            .shared_files
            .iter()
            .find(|o| o.local_name == f.local_name && o.sst_id == f.sst_id)
        else {
            continue;
        };
        if f.remote_name == old.remote_name {
            continue;
        }
        let copies = copies.get_or_insert_with(|| {
            job_manifests(storage, base.checkpoint_id)
                .into_iter()
                .flat_map(|m| m.shared_files)
                .collect()
        });
        assert!(
            copies
                .iter()
                .any(|c| c.sst_id == f.sst_id && c.remote_name == f.remote_name),
            "{} uploaded again as {} (the base has it as {})",
            f.local_name,
            f.remote_name,
            old.remote_name
        );
    }
}

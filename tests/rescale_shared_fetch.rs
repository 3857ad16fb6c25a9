//! Restores that share what they fetch (`SharedFetches`, docs/rescale.md §2): the halves of
//! a 1 -> 2 split restoring together fetch each shared SST once and link the other's copy;
//! a 2 -> 1 merge fetches an SST both halves list once; a failed restore leaves nothing
//! another links; a corrupt SST fails every restore that needs it.

use std::sync::Arc;

mod rescale_common;

use rescale_common::{checkpoint_job, owner_of};
use rockstate::{
    BackendBuilder, CheckpointOptions, CheckpointStorage, CodecId, ErrorKind, Fault, FaultyStorage,
    KeyGroupRange, KeyedBackend, LocalStorage, OpKind, RestoreFrom, RestoreReport, SharedFetches,
};
use sst_format::CheckpointManifest;

const M: u32 = 128;
const KEYS: u64 = 5_000;

fn value(k: u64) -> Vec<u8> {
    let mut v = k.to_le_bytes().to_vec();
    v.resize(64, 7);
    v
}

fn group(k: u64) -> u16 {
    rockstate::keygroup::key_group_of(&k.to_be_bytes(), M)
}

/// A job's storage: local storage under a temporary directory, behind a fault injector that
/// also counts downloads.
struct Job {
    dir: tempfile::TempDir,
    faulty: Arc<FaultyStorage>,
    storage: Arc<dyn CheckpointStorage>,
}

impl Job {
    fn new() -> Job {
        let dir = tempfile::tempdir().unwrap();
        let local: Arc<dyn CheckpointStorage> =
            Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
        let faulty = Arc::new(FaultyStorage::new(local));
        let storage: Arc<dyn CheckpointStorage> = faulty.clone();
        Job {
            dir,
            faulty,
            storage,
        }
    }

    /// A backend at `name` owning `range`; every file of a restore comes from storage.
    fn builder(&self, name: &str, range: KeyGroupRange) -> BackendBuilder {
        KeyedBackend::builder(self.dir.path().join(name))
            .max_parallelism(M)
            .key_groups(range)
            .checkpoint_storage(Arc::clone(&self.storage))
            .checkpoint_options(CheckpointOptions {
                local_recovery: false,
                ..CheckpointOptions::default()
            })
    }

    /// Checkpoint `id`'s manifest of backend `id_of`.
    fn manifest(&self, id: u64, backend: &str) -> CheckpointManifest {
        let name = rockstate::layout::metadata_name(id, backend);
        sst_format::decode_manifest(&self.storage.get_bytes(&name).unwrap()).unwrap()
    }
}

/// Checkpoint 1 of one backend owning every key group, its keys in L0 files that span both
/// halves (flushed twice, never compacted); returns its manifest.
fn source_checkpoint(job: &Job) -> CheckpointManifest {
    let src = job
        .builder("src", KeyGroupRange::all(M).unwrap())
        .open()
        .unwrap();
    let s = src.raw_value_state("s", CodecId::new("bytes", 1)).unwrap();
    for k in 0..KEYS {
        s.put(&k.to_be_bytes(), &[], &value(k)).unwrap();
        if k == KEYS / 2 {
            src.flush().unwrap();
        }
    }
    drop(s);
    src.checkpoint(1).unwrap();
    src.notify_checkpoint_complete(1).unwrap();
    let manifest = job.manifest(1, src.backend_id());
    assert!(
        manifest.shared_files.len() >= 2,
        "the state spans several SSTs"
    );
    manifest
}

/// Every key of `range` reads as written.
fn check(b: &KeyedBackend, range: KeyGroupRange) {
    let s = b.raw_value_state("s", CodecId::new("bytes", 1)).unwrap();
    for k in (0..KEYS).filter(|k| range.contains(group(*k))) {
        assert_eq!(
            s.get(&k.to_be_bytes(), &[]).unwrap(),
            Some(value(k)),
            "key {k}"
        );
    }
}

fn half(i: u32) -> KeyGroupRange {
    KeyGroupRange::for_operator(M, 2, i).unwrap()
}

/// Restores both halves of checkpoint 1 at once, one thread each, with `shared`.
fn restore_halves_together(
    job: &Job,
    prefix: &str,
    shared: &SharedFetches,
) -> Vec<rockstate::Result<(KeyedBackend, RestoreReport)>> {
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..2)
            .map(|i| {
                s.spawn(move || {
                    job.builder(&format!("{prefix}-{i}"), half(i))
                        .shared_fetches(shared.clone())
                        .restore_with_report(RestoreFrom::Checkpoint(1))
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    })
}

#[test]
fn halves_restoring_together_fetch_each_shared_sst_once() {
    let job = Job::new();
    let manifest = source_checkpoint(&job);
    let (shared_ssts, private) = (manifest.shared_files.len(), manifest.private_files.len());
    let shared_bytes: u64 = manifest.shared_files.iter().map(|f| f.size).sum();

    // Apart, each half downloads every file.
    let before = job.faulty.ops(OpKind::GetFile);
    for i in 0..2 {
        let (b, report) = job
            .builder(&format!("apart-{i}"), half(i))
            .restore_with_report(RestoreFrom::Checkpoint(1))
            .unwrap();
        assert_eq!(report.files_shared, 0);
        assert_eq!(report.files_downloaded, shared_ssts + private);
        check(&b, half(i));
    }
    let apart = job.faulty.ops(OpKind::GetFile) - before;
    assert_eq!(apart, 2 * (shared_ssts + private) as u64);

    // Together, each shared SST is downloaded by one half and linked by the other; private
    // files (RocksDB may rewrite them) are each half's own.
    let before = job.faulty.ops(OpKind::GetFile);
    let restored = restore_halves_together(&job, "together", &SharedFetches::default());
    let together = job.faulty.ops(OpKind::GetFile) - before;
    assert_eq!(together, (shared_ssts + 2 * private) as u64);
    let mut linked = (0, 0);
    for (i, r) in restored.into_iter().enumerate() {
        let (b, report) = r.unwrap();
        assert_eq!(report.files_skipped, 0, "every SST spans both halves");
        assert_eq!(
            report.files_downloaded + report.files_shared,
            shared_ssts + private
        );
        linked.0 += report.files_shared;
        linked.1 += report.bytes_shared;
        check(&b, half(i as u32));
        // The restored half keeps working on its linked files.
        b.checkpoint(10 + i as u64).unwrap();
        check(&b, half(i as u32));
    }
    assert_eq!(linked, (shared_ssts, shared_bytes));
}

#[test]
fn a_failed_restore_leaves_nothing_another_links() {
    let job = Job::new();
    let manifest = source_checkpoint(&job);
    let shared = SharedFetches::default();
    // The first half's second download fails: what it fetched before is offered, then
    // removed with the rest of its directory.
    let n = job.faulty.ops(OpKind::GetFile);
    job.faulty.add_fault(Fault::FailNth {
        op: OpKind::GetFile,
        nth: n + 2,
    });
    let failed = job
        .builder("failed-0", half(0))
        .shared_fetches(shared.clone())
        .restore_with_report(RestoreFrom::Checkpoint(1));
    assert!(
        failed.is_err(),
        "the injected download failure fails the restore"
    );
    job.faulty.clear_faults();

    let (b, report) = job
        .builder("after-1", half(1))
        .shared_fetches(shared.clone())
        .restore_with_report(RestoreFrom::Checkpoint(1))
        .unwrap();
    assert_eq!(
        report.files_shared, 0,
        "nothing of the failed restore is left"
    );
    assert_eq!(
        report.files_downloaded,
        manifest.shared_files.len() + manifest.private_files.len()
    );
    check(&b, half(1));
    // The failed half restores again and links what the other fetched (but a file the
    // other's database has compacted away since, which it fetches).
    let (b, report) = job
        .builder("failed-0", half(0))
        .shared_fetches(shared)
        .restore_with_report(RestoreFrom::Checkpoint(1))
        .unwrap();
    assert!(report.files_shared >= 1);
    assert_eq!(
        report.files_shared + report.files_downloaded,
        manifest.shared_files.len() + manifest.private_files.len()
    );
    check(&b, half(0));
}

#[test]
fn a_corrupt_sst_fails_every_restore_that_needs_it() {
    let job = Job::new();
    let manifest = source_checkpoint(&job);
    // Flip a byte in the middle of the largest SST's stored object.
    let f = manifest.shared_files.iter().max_by_key(|f| f.size).unwrap();
    let path = job.dir.path().join("storage").join(&f.remote_name);
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    std::fs::write(&path, &bytes).unwrap();

    for (i, r) in restore_halves_together(&job, "corrupt", &SharedFetches::default())
        .into_iter()
        .enumerate()
    {
        match r {
            Err(e) => assert_eq!(e.kind(), ErrorKind::Corruption, "half {i}: {e}"),
            Ok(_) => panic!("half {i} restored from a corrupt SST"),
        }
    }
}

#[test]
fn a_merge_fetches_an_sst_both_halves_list_once() {
    let job = Job::new();
    source_checkpoint(&job);
    // The halves, one job: they restore apart, then checkpoint 2 names both manifests, each
    // still listing the source's SSTs.
    let owner = owner_of(&job.storage, 1);
    let halves: Vec<KeyedBackend> = (0..2)
        .map(|i| {
            job.builder(&format!("half-{i}"), half(i))
                .job_owner(Arc::clone(&owner))
                .restore(RestoreFrom::Checkpoint(1))
                .unwrap()
        })
        .collect();
    checkpoint_job(&job.storage, &[&halves[0], &halves[1]], 2);
    let manifests: Vec<_> = halves
        .iter()
        .map(|b| job.manifest(2, b.backend_id()))
        .collect();
    let ids = |m: &CheckpointManifest| -> Vec<_> {
        m.shared_files
            .iter()
            .map(|f| f.remote_name.clone())
            .collect()
    };
    let (a, b) = (ids(&manifests[0]), ids(&manifests[1]));
    let both = a.iter().filter(|n| b.contains(n)).count();
    assert!(both >= 2, "the halves still list the source's SSTs");
    drop(halves);

    let all = KeyGroupRange::all(M).unwrap();
    let (merged, report) = job
        .builder("merged", all)
        .job_owner(owner)
        .restore_with_report(RestoreFrom::Checkpoint(2))
        .unwrap();
    assert_eq!(
        report.files_shared, both,
        "each SST both list is fetched once"
    );
    check(&merged, all);
}

//! A rescale downloads only the SSTs whose keys can matter to its key groups: manifests
//! (version 2) record each keyed state SST's key range and level, and a restore into part of
//! the base's key groups skips the files at L1 or deeper lying wholly outside the target
//! (docs/rescale.md §2). With `DbOptions::key_group_files` every compacted file holds one
//! key group, so half of them lie wholly outside either half.

use std::sync::Arc;

use rockstate::coordinator::task_checkpoint;
use rockstate::{
    BackendBuilder, CheckpointOptions, CheckpointStorage, CodecId, DbOptions, JobOwner,
    KeyGroupRange, KeyedBackend, LocalStorage, RawValueState, RestoreFrom, SystemClock,
};

const M: u32 = 128;
const KEYS: u64 = 20_000;

fn value(k: u64, round: u64) -> Vec<u8> {
    let mut v = k.to_le_bytes().to_vec();
    v.extend_from_slice(&round.to_le_bytes());
    v
}

fn group(k: u64) -> u16 {
    rockstate::keygroup::key_group_of(&k.to_be_bytes(), M)
}

/// A temporary directory and a local checkpoint storage inside it.
fn local_store() -> (tempfile::TempDir, Arc<dyn CheckpointStorage>) {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
    (dir, storage)
}

/// Checkpoint options that take every file from storage (no local copies), so a restore's
/// counts are downloads.
fn from_storage() -> CheckpointOptions {
    CheckpointOptions {
        local_recovery: false,
        ..CheckpointOptions::default()
    }
}

/// A backend at `root/name` owning `range`, its compacted files cut at every key group.
fn one_group_files(
    root: &std::path::Path,
    storage: &Arc<dyn CheckpointStorage>,
    name: &str,
    range: KeyGroupRange,
) -> BackendBuilder {
    KeyedBackend::builder(root.join(name))
        .max_parallelism(M)
        .key_groups(range)
        .options(DbOptions {
            key_group_files: true,
            ..DbOptions::default()
        })
        .checkpoint_storage(Arc::clone(storage))
}

/// Writes every key (round 0) into state `s` of `b`, flushed and compacted into one file per
/// key group below L0; returns the state.
fn fill_compacted(b: &KeyedBackend) -> RawValueState {
    let s = b.raw_value_state("s", CodecId::new("bytes", 1)).unwrap();
    for k in 0..KEYS {
        s.put(&k.to_be_bytes(), &[], &value(k, 0)).unwrap();
    }
    b.flush().unwrap();
    b.compact_state("s").unwrap();
    s
}

/// Overwrites the first 100 keys (round 1).
fn update_first_keys(s: &RawValueState) {
    for k in 0..100u64 {
        s.put(&k.to_be_bytes(), &[], &value(k, 1)).unwrap();
    }
}

/// Every key of `range` reads as written (the first 100 keys were overwritten in round 1),
/// and the state holds nothing else.
fn check(b: &KeyedBackend, range: KeyGroupRange) {
    let s = b.raw_value_state("s", CodecId::new("bytes", 1)).unwrap();
    let mut expected = 0;
    for k in (0..KEYS).filter(|k| range.contains(group(*k))) {
        let round = u64::from(k < 100);
        assert_eq!(
            s.get(&k.to_be_bytes(), &[]).unwrap(),
            Some(value(k, round)),
            "key {k}"
        );
        expected += 1;
    }
    let mut seen = 0;
    for g in range.iter() {
        b.scan_key_group("s", g, |_| {
            seen += 1;
            Ok(true)
        })
        .unwrap();
    }
    assert_eq!(seen, expected, "entries of {range}");
}

#[test]
fn rescale_skips_ssts_wholly_outside_the_target() {
    let (dir, storage) = local_store();
    let builder = |name: &str, range: KeyGroupRange| {
        one_group_files(dir.path(), &storage, name, range).checkpoint_options(from_storage())
    };
    let all = KeyGroupRange::all(M).unwrap();
    let src = builder("src", all).open().unwrap();
    // One file per key group below L0; then an update the checkpoint flushes into an L0
    // file spanning both halves, which no half may skip.
    let s = fill_compacted(&src);
    update_first_keys(&s);
    drop(s);
    src.checkpoint(1).unwrap();
    src.notify_checkpoint_complete(1).unwrap();

    // The manifest records a key range for every file of the state, none for the rest.
    let name = rockstate::layout::metadata_name(1, src.backend_id());
    let manifest = sst_format::decode_manifest(&storage.get_bytes(&name).unwrap()).unwrap();
    let ranged: Vec<_> = manifest
        .shared_files
        .iter()
        .filter_map(|f| f.key_range.as_ref())
        .collect();
    assert_eq!(
        ranged.iter().filter(|r| r.level >= 1).count(),
        128,
        "one compacted file per key group"
    );
    // The update's L0 file is written by the checkpoint's own flush, after the listing: it
    // has no range, like the default column family's files, and is always downloaded.
    assert!(manifest.shared_files.len() > ranged.len());
    let total_files = manifest.shared_files.len() + manifest.private_files.len();
    let total_bytes: u64 = manifest.shared_files.iter().map(|f| f.size).sum::<u64>()
        + manifest.private_files.iter().map(|f| f.size).sum::<u64>();
    drop(src);

    // A plain restore fetches everything.
    let (plain, report) = builder("plain", all)
        .restore_with_report(RestoreFrom::Checkpoint(1))
        .unwrap();
    assert_eq!((report.files_skipped, report.bytes_skipped), (0, 0));
    assert_eq!(
        (report.files_downloaded, report.files_local),
        (total_files, 0)
    );
    check(&plain, all);
    drop(plain);

    // Each half skips the other half's 64 one-group files, and nothing else.
    for i in 0..2 {
        let half = KeyGroupRange::for_operator(M, 2, i).unwrap();
        let (b, report) = builder(&format!("half-{i}"), half)
            .restore_with_report(RestoreFrom::Checkpoint(1))
            .unwrap();
        assert_eq!(report.files_skipped, 64, "half {i}");
        assert_eq!(report.files_local, 0);
        assert_eq!(report.files_downloaded + report.files_skipped, total_files);
        assert_eq!(report.bytes_downloaded + report.bytes_skipped, total_bytes);
        assert!(report.bytes_skipped > 0);
        check(&b, half);
        // The restored backend keeps working: write, checkpoint, and its manifest names no
        // skipped file.
        let s = b.raw_value_state("s", CodecId::new("bytes", 1)).unwrap();
        let k = (0..).find(|k| half.contains(group(*k))).unwrap();
        s.put(&k.to_be_bytes(), &[], &value(k, u64::from(k < 100)))
            .unwrap();
        drop(s);
        let id = 2 + u64::from(i);
        b.checkpoint(id).unwrap();
        let next = sst_format::decode_manifest(
            &storage
                .get_bytes(&rockstate::layout::metadata_name(id, b.backend_id()))
                .unwrap(),
        )
        .unwrap();
        for f in &next.shared_files {
            if let Some(r) = &f.key_range {
                let first = rockstate::keygroup::read_prefix(&r.smallest, M).unwrap();
                assert!(
                    r.level == 0 || half.contains(first),
                    "{} at L{} starts in group {first}, outside {half}",
                    f.local_name,
                    r.level
                );
            }
        }
        check(&b, half);
    }
}

/// 1 -> 2 -> 1 with one key group per file: each half drops the other's files (and, with
/// nothing of the base left in the range it gives away, writes no clip tombstone there), so
/// merging the halves right away links every file instead of rewriting half the state.
/// Takes checkpoint `id` of `backends` and completes it as one job of `owner`.
fn checkpoint_job(owner: &JobOwner, backends: &[KeyedBackend], id: u64) {
    let stats: Vec<_> = backends.iter().map(|b| b.checkpoint(id).unwrap()).collect();
    owner
        .commit(&sst_format::JobCheckpoint {
            checkpoint_id: id,
            job_name: "skip".into(),
            max_parallelism: M,
            triggered_at_ms: 0,
            completed_at_ms: 0,
            tasks: backends
                .iter()
                .zip(&stats)
                .enumerate()
                .map(|(i, (b, st))| task_checkpoint(i as u32, Some((b, st)), Vec::new()))
                .collect(),
        })
        .unwrap();
    for b in backends {
        b.notify_checkpoint_complete(id).unwrap();
    }
}

/// The halves of a split, one job, and its owner.
struct Halves {
    owner: Arc<JobOwner>,
    backends: Vec<KeyedBackend>,
}

impl Halves {
    /// Takes checkpoint `id` of both halves and completes it as one job.
    fn checkpoint(&self, id: u64) {
        checkpoint_job(&self.owner, &self.backends, id);
    }

    fn ids(&self) -> Vec<String> {
        self.backends
            .iter()
            .map(|b| b.backend_id().to_string())
            .collect()
    }
}

/// Checkpoint 1 of one backend owning every key group (one-group files below L0; the first
/// 100 keys at round 1), split into two halves (each skipping the other's 64 files) that
/// take checkpoint 2 as one job; every backend with checkpoint options `opts`.
fn split_in_halves(
    dir: &std::path::Path,
    storage: &Arc<dyn CheckpointStorage>,
    opts: &CheckpointOptions,
) -> Halves {
    let builder = |name: &str, range: KeyGroupRange| {
        one_group_files(dir, storage, name, range).checkpoint_options(opts.clone())
    };
    let all = KeyGroupRange::all(M).unwrap();
    let src = builder("src", all).open().unwrap();
    let s = src.raw_value_state("s", CodecId::new("bytes", 1)).unwrap();
    for k in 0..KEYS {
        let round = u64::from(k < 100);
        s.put(&k.to_be_bytes(), &[], &value(k, round)).unwrap();
    }
    drop(s);
    src.flush().unwrap();
    src.compact_state("s").unwrap();
    src.checkpoint(1).unwrap();
    src.notify_checkpoint_complete(1).unwrap();
    drop(src);

    // The halves, one job: its owner commits the record naming both manifests.
    let owner = Arc::new(JobOwner::open(Arc::clone(storage), 1, Arc::new(SystemClock)).unwrap());
    let backends: Vec<KeyedBackend> = (0..2)
        .map(|i| {
            let half = KeyGroupRange::for_operator(M, 2, i).unwrap();
            let (b, report) = builder(&format!("half-{i}"), half)
                .job_owner(Arc::clone(&owner))
                .restore_with_report(RestoreFrom::Checkpoint(1))
                .unwrap();
            assert_eq!(report.files_skipped, 64, "half {i}");
            check(&b, half);
            b
        })
        .collect();
    let halves = Halves { owner, backends };
    halves.checkpoint(2);
    halves
}

/// Checkpoint options of a changelog-mode job that materializes only when it must.
fn changelog_from_storage() -> CheckpointOptions {
    let mut opts = from_storage();
    opts.changelog.enabled = true;
    opts.changelog.materialize_interval_ms = u64::MAX;
    opts.changelog.materialize_log_percent = 100_000;
    opts.changelog.materialize_min_log_bytes = 0;
    opts
}

/// Restores the three instances of parallelism 3 from checkpoint `id`: each skips every
/// one-group file outside its third of the halves it merges, the base's and the other
/// half's alike (the middle third takes both halves), and holds its keys as written.
fn restore_thirds(
    dir: &std::path::Path,
    storage: &Arc<dyn CheckpointStorage>,
    opts: &CheckpointOptions,
    id: u64,
) -> Vec<rockstate::RestoreReport> {
    (0..3)
        .map(|i| {
            let third = KeyGroupRange::for_operator(M, 3, i).unwrap();
            let (b, report) = one_group_files(dir, storage, &format!("third-{id}-{i}"), third)
                .checkpoint_options(opts.clone())
                .restore_with_report(RestoreFrom::Checkpoint(id))
                .unwrap();
            let halves = if i == 1 { 2 } else { 1 };
            let own = third.len() as usize;
            assert_eq!(
                report.files_skipped,
                64 * halves - own,
                "third {i} ({third}): {report:?}"
            );
            check(&b, third);
            report
        })
        .collect()
}

#[test]
fn halves_of_a_split_merge_back_by_linking() {
    let (dir, storage) = local_store();
    let ids = split_in_halves(dir.path(), &storage, &CheckpointOptions::default()).ids();
    let all = KeyGroupRange::all(M).unwrap();
    let (merged, report) = one_group_files(dir.path(), &storage, "merged", all)
        .restore_with_report(RestoreFrom::Handles {
            checkpoint_id: 2,
            backend_ids: ids,
        })
        .unwrap();
    assert_eq!(report.sst_files_rewritten, 0, "{report:?}");
    assert_eq!(report.entries_rewritten, 0);
    assert!(report.sst_files_linked >= 64, "{report:?}");
    check(&merged, all);
}

/// A merge skips the other sources' files wholly outside the target too: 2 → 3, where the
/// middle instance takes a part of each half and neither half's files beyond its part.
#[test]
fn a_merge_skips_the_other_sources_files_outside_the_target() {
    let (dir, storage) = local_store();
    drop(split_in_halves(dir.path(), &storage, &from_storage()));
    restore_thirds(dir.path(), &storage, &from_storage(), 2);
}

/// So does a merge of log checkpoints: each source's skipped files are dropped before its
/// log is replayed onto it.
#[test]
fn a_merge_of_log_checkpoints_skips_every_sources_files_outside_the_target() {
    let (dir, storage) = local_store();
    let opts = changelog_from_storage();
    let halves = split_in_halves(dir.path(), &storage, &opts);
    // Checkpoint 2 (the first after the split) materialized; the first 100 keys, written
    // again as they are, go into each half's log.
    for b in &halves.backends {
        let s = b.raw_value_state("s", CodecId::new("bytes", 1)).unwrap();
        for k in (0..100u64).filter(|k| b.key_groups().contains(group(*k))) {
            s.put(&k.to_be_bytes(), &[], &value(k, 1)).unwrap();
        }
    }
    halves.checkpoint(3);
    drop(halves);
    let reports = restore_thirds(dir.path(), &storage, &opts, 3);
    assert_eq!(reports[1].log_segments, 2, "{:?}", reports[1]);
}

/// A changelog-mode checkpoint skips the same files: the base's skipped SSTs are dropped
/// before its log is replayed onto it, and the replay adds only the target's key groups.
#[test]
fn a_log_checkpoint_rescale_skips_too() {
    let (dir, storage) = local_store();
    let opts = changelog_from_storage();
    let builder = |name: &str, range: KeyGroupRange| {
        one_group_files(dir.path(), &storage, name, range).checkpoint_options(opts.clone())
    };
    let all = KeyGroupRange::all(M).unwrap();
    let src = builder("src", all).open().unwrap();
    let s = fill_compacted(&src);
    assert!(src.checkpoint(1).unwrap().materialized);
    src.notify_checkpoint_complete(1).unwrap();
    // The update goes into the log only.
    update_first_keys(&s);
    drop(s);
    assert!(!src.checkpoint(2).unwrap().materialized);
    src.notify_checkpoint_complete(2).unwrap();
    drop(src);

    for i in 0..2 {
        let half = KeyGroupRange::for_operator(M, 2, i).unwrap();
        let (b, report) = builder(&format!("half-{i}"), half)
            .restore_with_report(RestoreFrom::Checkpoint(2))
            .unwrap();
        assert_eq!(report.log_segments, 1, "half {i}");
        assert_eq!(report.files_skipped, 64, "half {i}");
        assert!(report.log_entries_skipped > 0, "half {i}");
        check(&b, half);
    }
}

/// Another source's skipped files are dropped before the merge reads it: RocksDB's level
/// iterator opens the first file of a level at or after a seek's key even when it starts past
/// the scan's upper bound. Three instances hold no key in groups 52..=63; each has its state
/// compacted into one file per group and two newer keys in an L0 file spanning its groups.
/// The first half (0..=63) merges the first third (base, 0..=42) and the second (43..=85),
/// whose files of 64..=85 are skipped; the second's L0 file marks 43..=63 for the rewrite,
/// and the scan of a slice past its last key (group 51) lands on the skipped file of group
/// 64. With that file missing, the restore failed with an IO error every time.
#[test]
fn a_scan_of_another_source_past_its_last_key_meets_no_skipped_file() {
    let (dir, storage) = local_store();
    let empty = |k: u64| (52..=63).contains(&group(k));
    let owner = Arc::new(JobOwner::open(Arc::clone(&storage), 1, Arc::new(SystemClock)).unwrap());
    let thirds: Vec<KeyedBackend> = (0..3)
        .map(|i| {
            let r = KeyGroupRange::for_operator(M, 3, i).unwrap();
            let b = one_group_files(dir.path(), &storage, &format!("third-{i}"), r)
                .checkpoint_options(from_storage())
                .job_owner(Arc::clone(&owner))
                .open()
                .unwrap();
            let s = b.raw_value_state("s", CodecId::new("bytes", 1)).unwrap();
            let mine: Vec<u64> = (0..KEYS)
                .filter(|k| r.contains(group(*k)) && !empty(*k))
                .collect();
            for k in &mine {
                s.put(&k.to_be_bytes(), &[], &value(*k, 0)).unwrap();
            }
            b.flush().unwrap();
            b.compact_state("s").unwrap();
            // Flushed by the checkpoint into an L0 file spanning the third's groups.
            for k in [mine[0], mine[mine.len() - 1]] {
                s.put(&k.to_be_bytes(), &[], &value(k, 0)).unwrap();
            }
            b
        })
        .collect();
    checkpoint_job(&owner, &thirds, 1);
    let ids: Vec<String> = thirds.iter().map(|b| b.backend_id().to_string()).collect();
    drop(thirds);

    let half = KeyGroupRange::for_operator(M, 2, 0).unwrap();
    let (b, report) = one_group_files(dir.path(), &storage, "half", half)
        .checkpoint_options(from_storage())
        .restore_with_report(RestoreFrom::Handles {
            checkpoint_id: 1,
            backend_ids: ids,
        })
        .unwrap();
    assert!(report.files_skipped > 0, "{report:?}");
    assert!(report.sst_files_rewritten > 0, "{report:?}");
    let s = b.raw_value_state("s", CodecId::new("bytes", 1)).unwrap();
    for k in (0..KEYS).filter(|k| half.contains(group(*k))) {
        let want = (!empty(k)).then(|| value(k, 0));
        assert_eq!(s.get(&k.to_be_bytes(), &[]).unwrap(), want, "key {k}");
    }
}

/// A split whose base skipped files hands the backend a database opened with RocksDB's
/// checks on: the newest OPTIONS file of the restored directory says `paranoid_checks=true`
/// (with them off, RocksDB would go on ignoring background errors).
#[test]
fn a_base_that_skipped_files_is_reopened_with_every_check_on() {
    let (dir, storage) = local_store();
    let all = KeyGroupRange::all(M).unwrap();
    let src = one_group_files(dir.path(), &storage, "src", all)
        .checkpoint_options(from_storage())
        .open()
        .unwrap();
    drop(fill_compacted(&src));
    src.checkpoint(1).unwrap();
    src.notify_checkpoint_complete(1).unwrap();
    drop(src);
    let half = KeyGroupRange::for_operator(M, 2, 0).unwrap();
    let (b, report) = one_group_files(dir.path(), &storage, "half", half)
        .checkpoint_options(from_storage())
        .restore_with_report(RestoreFrom::Checkpoint(1))
        .unwrap();
    assert_eq!(report.files_skipped, 64, "{report:?}");
    let newest = std::fs::read_dir(dir.path().join("half"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            let n: u64 = name.strip_prefix("OPTIONS-")?.parse().ok()?;
            Some((n, name))
        })
        .max()
        .unwrap()
        .1;
    let text = std::fs::read_to_string(dir.path().join("half").join(newest)).unwrap();
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("paranoid_checks="))
        .unwrap();
    assert_eq!(line, "paranoid_checks=true");
    drop(b);
}

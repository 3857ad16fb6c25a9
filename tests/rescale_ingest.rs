//! How a rescale brings the other sources' data into the base (docs/rescale.md §2 step 4):
//! their SST files as they are (hard-linked, sequence numbers kept) when they lie inside the
//! part of the target they provide and overlap nothing of the base, else the fallback that
//! rewrites those key groups into new SSTs. Both paths are checked against the model, with
//! writes, deletes and another checkpoint and restore after the merge; the restore report
//! says which path moved the data.

mod rescale_common;

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::SeedableRng;
use rescale_common::*;
use rockstate::checkpoint::layout;
use rockstate::{
    CheckpointOptions, CheckpointStorage, KeyGroupRange, KeyedBackend, LocalStorage, RestoreFrom,
    RestoreReport,
};
use sst_format::CheckpointManifest;

fn manifest(storage: &Arc<dyn CheckpointStorage>, id: u64, backend: &str) -> CheckpointManifest {
    let bytes = storage
        .get_bytes(&layout::metadata_name(id, backend))
        .unwrap();
    sst_format::decode_manifest(&bytes).unwrap()
}

fn restore_one(
    dir: &std::path::Path,
    storage: &Arc<dyn CheckpointStorage>,
    name: &str,
    id: u64,
) -> (KeyedBackend, RestoreReport) {
    KeyedBackend::builder(dir.join(name))
        .options(small_options())
        .max_parallelism(M)
        .key_groups(KeyGroupRange::all(M).unwrap())
        .checkpoint_storage(Arc::clone(storage))
        .restore_with_report(RestoreFrom::Checkpoint(id))
        .unwrap()
}

/// Two fresh halves hold only their own key groups, so 2 → 1 links every SST of the other
/// half as it is: nothing is rewritten. Writes after the merge (updates, deletes, list
/// appends on keys that came from the other half) win over the linked entries, so the
/// merged database's sequence numbers are above the linked ones. The first checkpoint
/// references the linked SSTs under the other half's object names (it stays incremental),
/// and restoring it (files under their new local names) gives the model again.
#[test]
fn clean_sources_are_linked_not_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
    let opts = CheckpointOptions::default();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
    let mut model = Model::default();
    let halves = open_fresh(dir.path(), &storage, "h", 2, &opts);
    // Several rounds with flushes in between: several SSTs and levels per half.
    for _ in 0..3 {
        for b in &halves {
            random_ops(b, &mut model, &mut rng, 1500);
            b.flush().unwrap();
        }
    }
    for b in &halves {
        b.checkpoint(1).unwrap();
        b.notify_checkpoint_complete(1).unwrap();
    }
    let ids: Vec<String> = halves.iter().map(|b| b.backend_id().to_string()).collect();
    drop(halves);

    let (merged, report) = restore_one(dir.path(), &storage, "merged", 1);
    assert!(report.sst_files_linked > 0, "{report:?}");
    assert_eq!(report.sst_files_rewritten, 0, "{report:?}");
    assert_eq!(report.entries_rewritten, 0, "{report:?}");
    check_all(std::slice::from_ref(&merged), &model);

    // Later writes on every key, both halves' included, are newer than the linked entries.
    random_ops(&merged, &mut model, &mut rng, 3000);
    check_all(std::slice::from_ref(&merged), &model);

    // The first checkpoint references the linked files by the other half's object names.
    let sources: BTreeMap<_, _> = ids
        .iter()
        .flat_map(|id| manifest(&storage, 1, id).shared_files)
        .map(|f| (f.sst_id.clone(), f))
        .collect();
    let stats = merged.checkpoint(2).unwrap();
    merged.notify_checkpoint_complete(2).unwrap();
    let m2 = manifest(&storage, 2, merged.backend_id());
    let mut renamed_reused = 0;
    for f in &m2.shared_files {
        if let Some(old) = sources.get(&f.sst_id) {
            assert_eq!(
                f.remote_name, old.remote_name,
                "{} uploaded again",
                f.local_name
            );
            renamed_reused += usize::from(f.local_name != old.local_name);
        }
    }
    assert!(
        renamed_reused > 0,
        "linked SSTs (new local names) are referenced, not uploaded"
    );
    assert!(stats.files_reused >= renamed_reused, "{stats:?}");
    drop(merged);

    let (again, report) = restore_one(dir.path(), &storage, "again", 2);
    assert_eq!(report.sst_files_linked, 0, "a plain restore links nothing");
    check_all(std::slice::from_ref(&again), &model);
    let report = rockstate::verify_checkpoints(storage.as_ref()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// 1 → 2 → 1 with no compaction in between: each half still holds the source's SSTs that
/// straddle the split (dead entries of the other half under its clip's range tombstone) and
/// that tombstone, so those files of the other half cannot be linked and the fallback
/// rewrites their key groups. The result equals the model, also after more writes and a
/// checkpoint/restore round.
#[test]
fn straddling_files_take_the_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
    let opts = CheckpointOptions::default();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(12);
    let mut model = Model::default();
    let src = open_fresh(dir.path(), &storage, "src", 1, &opts).remove(0);
    random_ops(&src, &mut model, &mut rng, 3000);
    src.checkpoint(1).unwrap();
    src.notify_checkpoint_complete(1).unwrap();
    drop(src);
    let halves = restore_all(
        dir.path(),
        &storage,
        "h",
        2,
        &opts,
        RestoreFrom::Checkpoint(1),
    );
    for b in &halves {
        b.checkpoint(2).unwrap();
        b.notify_checkpoint_complete(2).unwrap();
    }
    drop(halves);

    let (merged, report) = restore_one(dir.path(), &storage, "merged", 2);
    assert!(report.sst_files_rewritten > 0, "{report:?}");
    assert!(report.entries_rewritten > 0, "{report:?}");
    check_all(std::slice::from_ref(&merged), &model);
    random_ops(&merged, &mut model, &mut rng, 2000);
    check_all(std::slice::from_ref(&merged), &model);
    merged.checkpoint(3).unwrap();
    merged.notify_checkpoint_complete(3).unwrap();
    drop(merged);
    let (again, _) = restore_one(dir.path(), &storage, "again", 3);
    check_all(std::slice::from_ref(&again), &model);
}

//! Merging back what a split left (docs/rescale.md §2 step 3): after 1 → 2, both halves hold
//! the source's SSTs over all key groups, each hiding the other half under a range tombstone
//! its backend open flushed into a level-0 file. A merge 2 → 1 drops the base's level-0 files
//! wholly inside the part the other half provides, by rebuilding the base's column family
//! from its other files, so the files both halves hold serve that part as they are; only the
//! key groups the other half wrote since are rewritten. Where the base holds a file it cannot
//! ingest again as it is (an earlier rewrite's), it keeps its files and the fallback rewrites.
//! Every case is checked against the model, also after more writes and a checkpoint/restore.

mod rescale_common;

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rescale_common::*;
use rockstate::{
    CheckpointOptions, CheckpointStorage, KeyGroupRange, KeyedBackend, LocalStorage, RestoreFrom,
    RestoreReport,
};

/// Restores checkpoint `id` as one instance (automatic compactions off: a restore's level-0
/// files stay where it put them until the next checkpoint).
fn restore_one(
    dir: &std::path::Path,
    storage: &Arc<dyn CheckpointStorage>,
    name: &str,
    id: u64,
) -> (KeyedBackend, RestoreReport) {
    restore_one_with(dir, storage, name, id, &small_options_without_compaction())
}

/// One instance with `n` random operations, checkpoint 1, split into two halves restored
/// from it, with automatic compactions off: the clip each half's open flushed stays in its
/// own level-0 file. (A compaction that takes it together with the half's own writes leaves
/// the tombstone in files that also hold live entries, which only the fallback can merge.)
fn split(
    dir: &std::path::Path,
    storage: &Arc<dyn CheckpointStorage>,
    model: &mut Model,
    rng: &mut rand::rngs::SmallRng,
    n: usize,
) -> Vec<KeyedBackend> {
    let opts = CheckpointOptions::default();
    let src = open_fresh(dir, storage, "src", 1, &opts).remove(0);
    random_ops(&src, model, rng, n);
    checkpoint_job(storage, &[&src], 1);
    drop(src);
    restore_all_with(
        dir,
        storage,
        "h",
        2,
        &opts,
        RestoreFrom::Checkpoint(1),
        &small_options_without_compaction(),
    )
}

/// More writes on the merged backend, a checkpoint and a restore of it: the model again.
fn write_checkpoint_restore(
    dir: &std::path::Path,
    storage: &Arc<dyn CheckpointStorage>,
    merged: KeyedBackend,
    model: &mut Model,
    rng: &mut rand::rngs::SmallRng,
    id: u64,
) {
    random_ops(&merged, model, rng, 2000);
    check_all(std::slice::from_ref(&merged), model);
    checkpoint_job(storage, &[&merged], id);
    drop(merged);
    let (again, _) = restore_one(dir, storage, &format!("again-{id}"), id);
    check_all(std::slice::from_ref(&again), model);
}

/// 1 → 2 → 1 with no write in between: the base's clip tombstone file is dropped, nothing is
/// rewritten or linked (the other half's files are the base's own), and the first checkpoint
/// after the merge uploads no SST the halves had.
#[test]
fn a_merge_right_after_a_split_drops_the_clip_and_rewrites_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
    let mut rng = rand::rngs::SmallRng::seed_from_u64(12);
    let mut model = Model::default();
    let halves = split(dir.path(), &storage, &mut model, &mut rng, 3000);
    let cp2 = checkpoint_job(&storage, &halves.iter().collect::<Vec<_>>(), 2);
    drop(halves);

    let (merged, report) = restore_one(dir.path(), &storage, "merged", 2);
    assert!(report.sst_files_dropped > 0, "{report:?}");
    assert_eq!(report.sst_files_rewritten, 0, "{report:?}");
    assert_eq!(report.entries_rewritten, 0, "{report:?}");
    assert_eq!(report.sst_ingestions_refused, 0, "{report:?}");
    check_all(std::slice::from_ref(&merged), &model);
    // The halves' checkpoint uploaded only their clip files; the merged one reuses every SST
    // it keeps and uploads none but what its open flushed.
    let cp3 = checkpoint_job(&storage, &[&merged], 3).remove(0);
    assert!(cp3.files_reused > 0, "{cp3:?}");
    let halves_uploaded: u64 = cp2.iter().map(|s| s.bytes_uploaded).sum();
    assert!(
        cp3.bytes_uploaded <= halves_uploaded.max(cp3.manifest_bytes) * 4,
        "{cp3:?} against the halves' {cp2:?}"
    );
    write_checkpoint_restore(dir.path(), &storage, merged, &mut model, &mut rng, 4);
}

/// After the split, the upper half writes (puts and deletes of keys it has, and new keys)
/// only in four of its key groups, the lower half all over its own. The merge drops the
/// base's clip and rewrites those four groups from the upper half's merged view: its deletes
/// there hide the values both halves' shared files still hold. Everything else of the upper
/// half is served by the shared files.
#[test]
fn writes_after_the_split_are_rewritten_only_where_they_lie() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
    let mut rng = rand::rngs::SmallRng::seed_from_u64(13);
    let mut model = Model::default();
    let halves = split(dir.path(), &storage, &mut model, &mut rng, 4000);
    let band = KeyGroupRange::new(100, 103).unwrap();
    let v = halves[1].value_state::<u32, u8, u64>("value").unwrap();
    let mut written = 0;
    for key in 0..KEYS {
        if !band.contains(group(key)) {
            continue;
        }
        for ns in 0..NS {
            let k = (key, ns);
            if model.values.contains_key(&k) && rng.random_bool(0.5) {
                v.clear(&key, &ns).unwrap();
                model.values.remove(&k);
            } else {
                let x = rng.random_range(0..1_000_000u64);
                v.put(&key, &ns, &x).unwrap();
                model.values.insert(k, x);
            }
            written += 1;
        }
    }
    assert!(written > 0);
    halves[1].flush().unwrap();
    random_ops(&halves[0], &mut model, &mut rng, 1500);
    halves[0].flush().unwrap();
    // Counted in the model: a read of the halves would write (a list read deletes the dead
    // entries it meets, docs/decisions/0034-blind-list-updates.md), all over the upper half.
    let upper = KeyGroupRange::for_operator(M, 2, 1).unwrap();
    let upper_pairs = model
        .values
        .keys()
        .chain(model.lists.keys())
        .chain(model.maps.keys())
        .chain(model.sums.keys())
        .chain(model.avgs.keys())
        .filter(|(key, _)| upper.contains(group(*key)))
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    checkpoint_job(&storage, &halves.iter().collect::<Vec<_>>(), 2);
    drop(halves);

    let (merged, report) = restore_one(dir.path(), &storage, "merged", 2);
    assert!(report.sst_files_dropped > 0, "{report:?}");
    assert!(report.entries_rewritten > 0, "{report:?}");
    // Rewriting all of the upper half would copy at least one entry per pair it holds.
    assert!(
        report.entries_rewritten * 4 < upper_pairs as u64,
        "{report:?}: {upper_pairs} pairs in the upper half"
    );
    check_all(std::slice::from_ref(&merged), &model);
    write_checkpoint_restore(dir.path(), &storage, merged, &mut model, &mut rng, 3);
}

/// A merge whose fallback rewrote the upper half leaves files an `SstFileWriter` wrote (their
/// entries at sequence number 0, their real one in the MANIFEST) over older shared files
/// holding the same keys. Split and merged again, the base holds those files, which a rebuilt
/// column family would take with sequence number 0, below the older values: so the base keeps
/// its files, clip included, and the fallback rewrites.
#[test]
fn a_base_holding_rewritten_files_keeps_its_clip() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
    let opts = CheckpointOptions::default();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(14);
    let mut model = Model::default();
    let halves = split(dir.path(), &storage, &mut model, &mut rng, 3000);
    // Updates all over the upper half: its merge rewrites every one of its groups.
    random_ops(&halves[1], &mut model, &mut rng, 3000);
    halves[1].flush().unwrap();
    checkpoint_job(&storage, &halves.iter().collect::<Vec<_>>(), 2);
    drop(halves);
    let (merged, report) = restore_one(dir.path(), &storage, "merged", 2);
    assert!(report.sst_files_rewritten > 0, "{report:?}");
    check_all(std::slice::from_ref(&merged), &model);
    checkpoint_job(&storage, &[&merged], 3);
    drop(merged);

    let halves = restore_all_with(
        dir.path(),
        &storage,
        "again",
        2,
        &opts,
        RestoreFrom::Checkpoint(3),
        &small_options_without_compaction(),
    );
    check_all(&halves, &model);
    checkpoint_job(&storage, &halves.iter().collect::<Vec<_>>(), 4);
    drop(halves);
    let (merged, report) = restore_one(dir.path(), &storage, "merged-again", 4);
    check_all(std::slice::from_ref(&merged), &model);
    assert_eq!(report.sst_files_dropped, 0, "{report:?}");
    assert!(report.sst_files_rewritten > 0, "{report:?}");
    write_checkpoint_restore(dir.path(), &storage, merged, &mut model, &mut rng, 5);
}

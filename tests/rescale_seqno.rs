//! A merge (2 → 1) links the other half's SST files with their sequence numbers. When that
//! half wrote far more than the base (its sequence numbers are higher than the base's last
//! one), writes after the merge must still be newer than every linked entry: an update of a
//! key that came from the other half is read back, survives a checkpoint and a restore.

mod rescale_common;

use std::sync::Arc;

use rescale_common::*;
use rockstate::{CheckpointStorage, KeyGroupRange, KeyedBackend, LocalStorage, RestoreFrom};

#[test]
fn writes_after_a_merge_are_newer_than_linked_entries_of_a_busier_half() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
    let open = |i: u32| {
        KeyedBackend::builder(dir.path().join(format!("h{i}")))
            .options(small_options())
            .max_parallelism(M)
            .key_groups(KeyGroupRange::for_operator(M, 2, i).unwrap())
            .checkpoint_storage(Arc::clone(&storage))
            .job_owner(owner_of(&storage, 1))
            .open()
            .unwrap()
    };
    let halves = [open(0), open(1)];
    let keys: Vec<u32> = (0..4000).collect();
    // The base (half 0: the first of equal overlaps) writes little; half 1 writes each of
    // its keys many times, so its sequence numbers run far ahead.
    for (i, b) in halves.iter().enumerate() {
        let s = b.value_state::<u32, (), u64>("c").unwrap();
        let rounds = if i == 0 { 1 } else { 50 };
        for r in 0..rounds {
            for &k in keys.iter().filter(|&&k| b.key_groups().contains(group(k))) {
                s.put(&k, &(), &(r + 1)).unwrap();
            }
        }
        b.flush().unwrap();
    }
    checkpoint_job(&storage, &halves.iter().collect::<Vec<_>>(), 1);
    drop(halves);

    let merged = KeyedBackend::builder(dir.path().join("merged"))
        .options(small_options())
        .max_parallelism(M)
        .key_groups(KeyGroupRange::all(M).unwrap())
        .checkpoint_storage(Arc::clone(&storage))
        .job_owner(owner_of(&storage, 1))
        .restore_with_report(RestoreFrom::Checkpoint(1))
        .unwrap()
        .0;
    let s = merged.value_state::<u32, (), u64>("c").unwrap();
    for &k in &keys {
        let v = s.get(&k, &()).unwrap().unwrap();
        s.put(&k, &(), &(v + 1000)).unwrap();
    }
    merged.flush().unwrap();
    // Reads look at the newest L0 file first whatever its sequence numbers; a compaction
    // keeps the entry with the higher sequence number. Only after it does a write that is
    // older than a linked entry show.
    merged.compact_state("c").unwrap();
    let expect = |k: u32| {
        if KeyGroupRange::for_operator(M, 2, 0)
            .unwrap()
            .contains(group(k))
        {
            1001
        } else {
            1050
        }
    };
    for &k in &keys {
        assert_eq!(
            s.get(&k, &()).unwrap(),
            Some(expect(k)),
            "key {k} after the merge"
        );
    }
    checkpoint_job(&storage, &[&merged], 2);
    drop(s);
    drop(merged);
    let again = KeyedBackend::builder(dir.path().join("again"))
        .options(small_options())
        .max_parallelism(M)
        .key_groups(KeyGroupRange::all(M).unwrap())
        .checkpoint_storage(Arc::clone(&storage))
        .job_owner(owner_of(&storage, 1))
        .restore(RestoreFrom::Checkpoint(2))
        .unwrap();
    let s = again.value_state::<u32, (), u64>("c").unwrap();
    for &k in &keys {
        assert_eq!(
            s.get(&k, &()).unwrap(),
            Some(expect(k)),
            "key {k} after a restore"
        );
    }
}

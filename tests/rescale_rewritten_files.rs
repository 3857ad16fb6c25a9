//! A rescale that cannot link a source's files rewrites its key groups into new SSTs
//! (RocksDB's `SstFileWriter` files, whose entries carry sequence number 0 and get theirs from
//! the database that ingests them). Such a file is part of the rescaled backend's next
//! checkpoint like any other. A later merge that links that checkpoint's files into another
//! base must not link the rewritten file as it is: in the new database its entries would be
//! older than everything else, so an older tombstone (the clip of an earlier split) linked
//! beside it would hide them.
//!
//! The lineage: a backend of key groups 48..=95 writes and checkpoints (1); it is split into
//! 64..=95 (clipping 48..=63 with a tombstone) beside a fresh 32..=63 (2); 48..=95 is
//! restored from those two, rewriting 48..=63 from the fresh half on top of the clipped base
//! (3, beside fresh 0..=47 and 96..=127); finally all of 0..=127 is restored from checkpoint 3,
//! merging the 48..=95 backend into the 0..=47 base. Linked, the rewritten files' entries
//! would be hidden by the split's clip tombstone; without that tombstone, a compaction would
//! prefer any older entry of the same keys over them.

mod rescale_common;

use std::sync::Arc;

use rescale_common::*;
use rockstate::{
    CheckpointStorage, DbOptions, KeyGroupRange, KeyedBackend, LocalStorage, RestoreFrom,
};

/// The value each stage writes to its keys: keys of 32..=63 get 2 from the fresh half, the
/// rest of 48..=95 keeps 1 from the first backend; 0..=47 and 96..=127 are written by fresh
/// backends of checkpoint 3.
fn expected(key: u32) -> u64 {
    match group(key) {
        0..=47 => 3,
        48..=63 => 2,
        64..=95 => 1,
        _ => 4,
    }
}

#[test]
fn a_merge_keeps_the_entries_an_earlier_rescale_rewrote() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
    let keys: Vec<u32> = (0..4000).collect();
    // No compaction merges the rewritten files away before checkpoint 3 (when it runs is up
    // to RocksDB's background threads; in a busy job the files often survive).
    let options = DbOptions {
        level0_file_num_compaction_trigger: 64,
        ..small_options()
    };
    let builder = |name: &str, start: u16, end: u16| {
        KeyedBackend::builder(dir.path().join(name))
            .options(options.clone())
            .max_parallelism(M)
            .key_groups(KeyGroupRange::new(start, end).unwrap())
            .checkpoint_storage(Arc::clone(&storage))
            .job_owner(owner_of(&storage, 1))
    };
    let write = |b: &KeyedBackend, v: u64| {
        let s = b.value_state::<u32, (), u64>("c").unwrap();
        for &k in keys.iter().filter(|&&k| b.key_groups().contains(group(k))) {
            s.put(&k, &(), &v).unwrap();
        }
        b.flush().unwrap();
    };

    let first = builder("first", 48, 95).open().unwrap();
    write(&first, 1);
    checkpoint_job(&storage, &[&first], 1);
    drop(first);

    let (split, report) = builder("split", 64, 95)
        .restore_with_report(RestoreFrom::Checkpoint(1))
        .unwrap();
    assert_eq!(
        report.sst_files_rewritten, 0,
        "a plain clip rewrites nothing"
    );
    let fresh = builder("fresh", 32, 63).open().unwrap();
    write(&fresh, 2);
    checkpoint_job(&storage, &[&fresh, &split], 2);
    drop((split, fresh));

    let (merged, report) = builder("merged", 48, 95)
        .restore_with_report(RestoreFrom::Checkpoint(2))
        .unwrap();
    assert!(
        report.sst_files_rewritten > 0,
        "the clipped base holds files in 48..=63 the fresh half does not: rewritten, {report:?}"
    );
    let low = builder("low", 0, 47).open().unwrap();
    write(&low, 3);
    let high = builder("high", 96, 127).open().unwrap();
    write(&high, 4);
    checkpoint_job(&storage, &[&low, &merged, &high], 3);
    drop((low, merged, high));

    let (all, _) = builder("all", 0, 127)
        .restore_with_report(RestoreFrom::Checkpoint(3))
        .unwrap();
    let s = all.value_state::<u32, (), u64>("c").unwrap();
    // Read as restored, then after a compaction (which keeps, per key, the entry with the
    // higher sequence number, where a read takes the newest file's).
    for when in ["after the merge", "after a compaction"] {
        if when == "after a compaction" {
            all.compact_state("c").unwrap();
        }
        let wrong: Vec<(u32, u16, Option<u64>)> = keys
            .iter()
            .map(|&k| (k, group(k), s.get(&k, &()).unwrap()))
            .filter(|&(k, _, v)| v != Some(expected(k)))
            .collect();
        assert!(
            wrong.is_empty(),
            "{} keys differ {when}, e.g. (key, group, value) {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        );
    }
}

//! A rescale that rewrites key groups (the fallback of docs/rescale.md §2 step 3) writes the
//! files it ingests at the data block size their entries call for
//! (docs/decisions/0051-block-size-follows-entry-size.md, "Savepoint restores"), as a
//! savepoint restore does: files of 1 KiB values in 4 KiB blocks, not the shared 16 KiB.
//! Checked on the table properties of the SSTs the merge's `SstFileWriter` wrote (they carry
//! no column family name), after a split whose upper half rewrote its values.

mod rescale_common;

#[path = "block_size_common/mod.rs"]
mod block_size_common;

use std::sync::Arc;

use block_size_common::{ssts, LARGE_ENTRY_BLOCKS};
use rescale_common::*;
use rockstate::{CheckpointOptions, CheckpointStorage, DbOptions, LocalStorage, RestoreFrom};

const KEYS: u32 = 3000;

fn options() -> DbOptions {
    DbOptions {
        large_entry_block_size: 4096,
        // Stored sizes are the written sizes.
        compression: rockstate::Compression::None,
        ..small_options_without_compaction()
    }
}

#[test]
fn a_merge_rewrites_large_values_in_blocks_of_the_large_entry_size() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
    let opts = CheckpointOptions::default();
    let src = open_fresh_with(dir.path(), &storage, "src", 1, &opts, &options()).remove(0);
    let values = src.value_state::<u32, u8, Vec<u8>>("big").unwrap();
    for key in 0..KEYS {
        values.put(&key, &0, &vec![key as u8; 1000]).unwrap();
    }
    drop(values);
    checkpoint_job(&storage, &[&src], 1);
    drop(src);
    let halves = restore_all_with(
        dir.path(),
        &storage,
        "h",
        2,
        &opts,
        RestoreFrom::Checkpoint(1),
        &options(),
    );
    // New values all over the upper half: the merge rewrites its key groups.
    let upper = halves[1].value_state::<u32, u8, Vec<u8>>("big").unwrap();
    for key in (0..KEYS).filter(|&k| owns(&halves[1], k)) {
        upper.put(&key, &0, &vec![key as u8 ^ 0xff; 1000]).unwrap();
    }
    drop(upper);
    halves[1].flush().unwrap();
    checkpoint_job(&storage, &halves.iter().collect::<Vec<_>>(), 2);
    drop(halves);

    let (merged, report) = restore_one_with(dir.path(), &storage, "merged", 2, &options());
    assert!(report.entries_rewritten > 0, "{report:?}");
    // Every key reads its latest value.
    let values = merged.value_state::<u32, u8, Vec<u8>>("big").unwrap();
    for key in 0..KEYS {
        let byte = (key as u8) ^ if owned_by_upper(key) { 0xff } else { 0 };
        assert_eq!(values.get(&key, &0).unwrap(), Some(vec![byte; 1000]));
    }
    drop(values);
    merged.close().unwrap();

    // The files the rewrite wrote: no column family name, entries of 1 KB values.
    let (mut bytes, mut blocks, mut files) = (0, 0, 0);
    for path in ssts(&dir.path().join("merged")) {
        let props = sst_format::read_sst_meta(&path).unwrap().properties;
        let large = props.num_entries > 0 && props.raw_value_size / props.num_entries >= 900;
        if props.column_family_name.is_empty() && large {
            bytes += props.data_size;
            blocks += props.num_data_blocks;
            files += 1;
        }
    }
    assert!(files > 0, "no rewritten file of large values");
    let per_block = bytes / blocks;
    assert!(
        LARGE_ENTRY_BLOCKS.contains(&per_block),
        "{per_block} bytes per block of 1 KB values in {files} rewritten files"
    );
}

/// Whether the upper half of a split into two owns `key`.
fn owned_by_upper(key: u32) -> bool {
    rockstate::KeyGroupRange::for_operator(M, 2, 1)
        .unwrap()
        .contains(group(key))
}

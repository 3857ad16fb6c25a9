//! A savepoint restore writes each state's SSTs at the data block size its entries call for
//! (docs/decisions/0051-block-size-follows-entry-size.md, "Savepoint restores"): the files it
//! ingests often stay in the bottom level as they are, so a state of 1 KiB values restored in
//! 16 KiB blocks would read 16 KiB per block-cache miss for as long as the job runs. Checked
//! on the ingested files' table properties (data bytes per data block), one savepoint per
//! state so that every file of the restored database but the metadata's is the state's.

#[path = "block_size_common/mod.rs"]
mod block_size_common;

use std::path::Path;

use block_size_common::{bytes_per_block, ssts, LARGE_ENTRY_BLOCKS, SHARED_BLOCKS_AT_LEAST};
use rockstate::{CodecId, DbOptions, KeyedBackend, StateDescriptor};

/// The three kinds of entries the test restores.
#[derive(Clone, Copy, Debug)]
enum Entries {
    /// A value state of 1,000-byte values.
    Large,
    /// A value state of 100-byte values.
    Small,
    /// A list state, one run of 150 8-byte elements per key.
    ListRuns,
}

fn options(large_entry_block_size: usize) -> DbOptions {
    DbOptions {
        large_entry_block_size,
        // Stored sizes are the written sizes.
        compression: rockstate::Compression::None,
        ..DbOptions::default()
    }
}

/// Writes `keys` keys of one state of `entries` into a new backend, writes its savepoint,
/// restores that into another new backend at `dir.join("restored")` with
/// `large_entry_block_size`, and returns the data bytes per block of the restored state's
/// files (every SST of the restored database but the metadata column family's).
fn restored_bytes_per_block(
    dir: &Path,
    entries: Entries,
    keys: u32,
    large_entry_block_size: usize,
) -> u64 {
    let source = KeyedBackend::builder(dir.join("source"))
        .options(options(large_entry_block_size))
        .open()
        .unwrap();
    let codec = CodecId::new("bytes", 1);
    let descriptor = StateDescriptor::new("s");
    let elements: Vec<[u8; 8]> = (0..150u64).map(u64::to_be_bytes).collect();
    match entries {
        Entries::Large | Entries::Small => {
            let state = source.raw_value_state(descriptor, codec).unwrap();
            let len = if matches!(entries, Entries::Large) {
                1000
            } else {
                100
            };
            for i in 0..keys {
                state
                    .put(&i.to_be_bytes(), b"", &vec![i as u8; len])
                    .unwrap();
            }
        }
        Entries::ListRuns => {
            let state = source.raw_list_state(descriptor, codec).unwrap();
            for i in 0..keys {
                state
                    .add_all(&i.to_be_bytes(), b"", elements.iter().map(|e| &e[..]))
                    .unwrap();
            }
        }
    }
    let savepoint = dir.join("savepoint");
    source.write_savepoint(&savepoint).unwrap();
    source.close().unwrap();

    let restored_dir = dir.join("restored");
    let restored = KeyedBackend::builder(&restored_dir)
        .options(options(large_entry_block_size))
        .open()
        .unwrap();
    let report = restored.restore_savepoint(&savepoint).unwrap();
    assert!(
        report.entries >= u64::from(keys),
        "{entries:?}: entries restored"
    );
    restored.close().unwrap();
    let sizes = bytes_per_block(&ssts(&restored_dir));
    let state: Vec<u64> = sizes
        .iter()
        .filter(|(cf, _)| cf.as_str() != "default")
        .map(|(_, &b)| b)
        .collect();
    assert_eq!(
        state.len(),
        1,
        "{entries:?}: the state's files by column family: {sizes:?}"
    );
    state[0]
}

#[test]
fn large_values_are_restored_in_blocks_of_the_large_entry_size() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = restored_bytes_per_block(dir.path(), Entries::Large, 3000, 4096);
    assert!(
        LARGE_ENTRY_BLOCKS.contains(&bytes),
        "{bytes} bytes per block of 1 KB values"
    );
}

#[test]
fn a_file_of_fewer_puts_than_the_sample_is_sized_by_all_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = restored_bytes_per_block(dir.path(), Entries::Large, 300, 4096);
    assert!(
        LARGE_ENTRY_BLOCKS.contains(&bytes),
        "{bytes} bytes per block of 1 KB values"
    );
}

#[test]
fn small_values_keep_the_shared_block_size() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = restored_bytes_per_block(dir.path(), Entries::Small, 3000, 4096);
    assert!(
        bytes >= SHARED_BLOCKS_AT_LEAST,
        "{bytes} bytes per block of 100-byte values"
    );
}

#[test]
fn list_runs_keep_the_shared_block_size() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = restored_bytes_per_block(dir.path(), Entries::ListRuns, 3000, 4096);
    assert!(
        bytes >= SHARED_BLOCKS_AT_LEAST,
        "{bytes} bytes per block of list runs"
    );
}

#[test]
fn large_values_keep_the_shared_block_size_with_the_option_off() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = restored_bytes_per_block(dir.path(), Entries::Large, 3000, 0);
    assert!(
        bytes >= SHARED_BLOCKS_AT_LEAST,
        "{bytes} bytes per block of 1 KB values"
    );
}

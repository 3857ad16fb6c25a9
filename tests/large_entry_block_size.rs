//! A column family whose first puts carry large entries writes its SSTs in blocks of
//! `DbOptions::large_entry_block_size`; one of small entries, and a list's, keep `block_size`
//! (docs/decisions/0051-block-size-follows-entry-size.md). Checked in the SSTs RocksDB wrote
//! (their table properties: data bytes per data block), on a new backend and after a reopen.

#[path = "block_size_common/mod.rs"]
mod block_size_common;

use std::path::Path;

use block_size_common::{bytes_per_block, ssts, LARGE_ENTRY_BLOCKS, SHARED_BLOCKS_AT_LEAST};
use rockstate::{DbOptions, KeyedBackend};

/// Puts per state: more than the sample of 1,024 that decides.
const PUTS: u32 = 3000;

/// Opens a backend on `dir`, writes `PUTS` fresh keys (after any earlier run's `offset`) to
/// the three states of [`block_size_common::write_states`] and closes it (which flushes them).
fn write_states(dir: &Path, options: &DbOptions, offset: u32) {
    let b = KeyedBackend::builder(dir)
        .options(options.clone())
        .open()
        .unwrap();
    block_size_common::write_states(&b, offset, PUTS);
    b.close().unwrap();
}

#[test]
fn large_entries_get_smaller_blocks_small_ones_keep_the_shared_size() {
    let dir = tempfile::tempdir().unwrap();
    let options = DbOptions {
        large_entry_block_size: 4096,
        // Incompressible enough at neither size: stored sizes are the written sizes.
        compression: rockstate::Compression::None,
        ..DbOptions::default()
    };
    for run in 0..2 {
        // The second run reopens: RocksDB opens every column family with the shared block
        // size, and the files the first run wrote decide again
        // (tests/block_size_from_stored_entries.rs).
        write_states(dir.path(), &options, run * PUTS);
        let sizes = bytes_per_block(&ssts(dir.path()));
        let big = sizes["state:big"];
        let small = sizes["state:small"];
        assert!(
            LARGE_ENTRY_BLOCKS.contains(&big),
            "run {run}: {big} bytes per block of 1 KB values"
        );
        assert!(
            small >= SHARED_BLOCKS_AT_LEAST,
            "run {run}: {small} bytes per block of 100-byte values"
        );
        // Lists are read by seeks and keep the shared size, however large their runs.
        let list = sizes["state:list"];
        assert!(
            list >= SHARED_BLOCKS_AT_LEAST,
            "run {run}: {list} bytes per block of list runs"
        );
    }
}

#[test]
fn zero_keeps_the_shared_block_size_for_large_entries_too() {
    let dir = tempfile::tempdir().unwrap();
    let options = DbOptions {
        large_entry_block_size: 0,
        compression: rockstate::Compression::None,
        ..DbOptions::default()
    };
    write_states(dir.path(), &options, 0);
    let sizes = bytes_per_block(&ssts(dir.path()));
    assert!(sizes["state:big"] >= SHARED_BLOCKS_AT_LEAST, "{sizes:?}");
}

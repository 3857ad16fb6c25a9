//! A reopened or restored backend sizes the data blocks of a column family from the entries
//! its files hold (docs/decisions/0051-block-size-follows-entry-size.md): the files it writes
//! before 1,024 new puts could decide already have the blocks their entries call for. Checked
//! on the SSTs RocksDB writes after the reopen or restore (their table properties: data bytes
//! per data block) for a state of 1,000-byte values, one of 100-byte values and a list of
//! 150-element runs (large entries that keep the shared size).

#[path = "block_size_common/mod.rs"]
mod block_size_common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use block_size_common::{
    bytes_per_block, ssts, write_states as write, LARGE_ENTRY_BLOCKS, SHARED_BLOCKS_AT_LEAST,
};
use rockstate::{CheckpointStorage, DbOptions, KeyedBackend, LocalStorage, RestoreFrom};

/// Puts per state before the reopen or restore: more than the 1,024 that decide.
const PUTS: u32 = 3000;
/// Puts per state after it: fewer than 1,024, so only the stored entries can decide, and
/// enough 100-byte entries to fill 16 KiB blocks.
const FEW: u32 = 1000;

fn options() -> DbOptions {
    DbOptions {
        large_entry_block_size: 4096,
        // Stored sizes are the written sizes.
        compression: rockstate::Compression::None,
        ..DbOptions::default()
    }
}

/// Writes `FEW` keys through `b` (reopened or restored on `dir`), closes it, and checks the
/// block sizes of the files that appeared.
fn few_puts_write_the_stored_entries_block_sizes(b: KeyedBackend, dir: &Path) {
    let before = ssts(dir);
    write(&b, PUTS, FEW);
    b.close().unwrap();
    let new: BTreeSet<PathBuf> = ssts(dir).difference(&before).cloned().collect();
    let sizes = bytes_per_block(&new);
    let big = sizes["state:big"];
    assert!(
        LARGE_ENTRY_BLOCKS.contains(&big),
        "{big} bytes per block of 1 KB values"
    );
    let small = sizes["state:small"];
    assert!(
        small >= SHARED_BLOCKS_AT_LEAST,
        "{small} bytes per block of 100-byte values"
    );
    // The list's files gave it the size for large entries when the database opened; its
    // registration as a list set the shared size back.
    let list = sizes["state:list"];
    assert!(
        list >= SHARED_BLOCKS_AT_LEAST,
        "{list} bytes per block of list runs"
    );
}

#[test]
fn a_reopened_backend_sizes_blocks_from_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let b = KeyedBackend::builder(dir.path())
        .options(options())
        .open()
        .unwrap();
    write(&b, 0, PUTS);
    b.close().unwrap();
    let b = KeyedBackend::builder(dir.path())
        .options(options())
        .open()
        .unwrap();
    few_puts_write_the_stored_entries_block_sizes(b, dir.path());
}

#[test]
fn a_restored_backend_sizes_blocks_from_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());
    let b = KeyedBackend::builder(dir.path().join("a"))
        .options(options())
        .checkpoint_storage(storage.clone())
        .open()
        .unwrap();
    write(&b, 0, PUTS);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    b.close().unwrap();
    let restored = KeyedBackend::builder(dir.path().join("r"))
        .options(options())
        .checkpoint_storage(storage)
        .restore(RestoreFrom::Latest)
        .unwrap();
    few_puts_write_the_stored_entries_block_sizes(restored, &dir.path().join("r"));
}

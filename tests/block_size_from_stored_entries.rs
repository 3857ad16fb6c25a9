//! A reopened or restored backend sizes the data blocks of a column family from the entries
//! its files hold (docs/decisions/0051-block-size-follows-entry-size.md): the files it writes
//! before 1,024 new puts could decide already have the blocks their entries call for. Checked
//! on the SSTs RocksDB writes after the reopen or restore (their table properties: data bytes
//! per data block) for a state of 1,000-byte values, one of 100-byte values and a list of
//! 150-element runs (large entries that keep the shared size).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rockstate::{
    CheckpointStorage, CodecId, DbOptions, KeyedBackend, LocalStorage, RestoreFrom, StateDescriptor,
};

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

/// The SST files in the database directory `dir`.
fn ssts(dir: &Path) -> BTreeSet<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sst"))
        .collect()
}

/// Data bytes per data block of `files`, by column family.
fn bytes_per_block(files: &BTreeSet<PathBuf>) -> BTreeMap<String, u64> {
    let mut sums: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for path in files {
        let props = sst_format::read_sst_meta(path).unwrap().properties;
        let s = sums.entry(props.column_family_name).or_default();
        s.0 += props.data_size;
        s.1 += props.num_data_blocks;
    }
    sums.into_iter()
        .filter(|(_, (_, blocks))| *blocks > 0)
        .map(|(cf, (bytes, blocks))| (cf, bytes / blocks))
        .collect()
}

/// Registers states `big`, `small` and list `list` on `b` and writes `n` fresh keys to each
/// from `offset`: 1,000-byte values, 100-byte values, runs of 150 elements.
fn write(b: &KeyedBackend, offset: u32, n: u32) {
    let codec = CodecId::new("bytes", 1);
    let big = b
        .raw_value_state(StateDescriptor::new("big"), codec.clone())
        .unwrap();
    let small = b
        .raw_value_state(StateDescriptor::new("small"), codec.clone())
        .unwrap();
    let list = b
        .raw_list_state(StateDescriptor::new("list"), codec)
        .unwrap();
    let elements: Vec<[u8; 8]> = (0..150u64).map(u64::to_be_bytes).collect();
    for i in offset..offset + n {
        let key = i.to_be_bytes();
        big.put(&key, b"", &[i as u8; 1000]).unwrap();
        small.put(&key, b"", &[i as u8; 100]).unwrap();
        list.add_all(&key, b"", elements.iter().map(|e| &e[..]))
            .unwrap();
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
        (3000..5200).contains(&big),
        "{big} bytes per block of 1 KB values"
    );
    let small = sizes["state:small"];
    assert!(
        small >= 14 << 10,
        "{small} bytes per block of 100-byte values"
    );
    // The list's files gave it the size for large entries when the database opened; its
    // registration as a list set the shared size back.
    let list = sizes["state:list"];
    assert!(list >= 14 << 10, "{list} bytes per block of list runs");
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

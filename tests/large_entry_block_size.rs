//! A column family whose first puts carry large entries writes its SSTs in blocks of
//! `DbOptions::large_entry_block_size`; one of small entries, and a list's, keep `block_size`
//! (docs/decisions/0051-block-size-follows-entry-size.md). Checked in the SSTs RocksDB wrote
//! (their table properties: data bytes per data block), on a new backend and after a reopen.

use std::collections::BTreeMap;
use std::path::Path;

use rockstate::{CodecId, DbOptions, KeyedBackend, StateDescriptor};

/// Puts per state: more than the sample of 1,024 that decides.
const PUTS: u32 = 3000;

/// Data bytes per data block of each column family's SSTs in the database directory `dir`,
/// summed over its files.
fn bytes_per_block(dir: &Path) -> BTreeMap<String, u64> {
    let mut sums: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let ssts = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sst"));
    for path in ssts {
        let props = sst_format::read_sst_meta(&path).unwrap().properties;
        let s = sums.entry(props.column_family_name).or_default();
        s.0 += props.data_size;
        s.1 += props.num_data_blocks;
    }
    sums.into_iter()
        .filter(|(_, (_, blocks))| *blocks > 0)
        .map(|(cf, (bytes, blocks))| (cf, bytes / blocks))
        .collect()
}

/// Opens a backend on `dir`, writes `PUTS` values of 1,000 bytes to state `big`, of 100
/// bytes to state `small` and runs of 150 elements to list state `list` (fresh keys, after any
/// earlier run's `offset`), and closes it (which flushes them).
fn write_states(dir: &Path, options: &DbOptions, offset: u32) {
    let b = KeyedBackend::builder(dir)
        .options(options.clone())
        .open()
        .unwrap();
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
    for i in offset..offset + PUTS {
        let key = i.to_be_bytes();
        big.put(&key, b"", &[i as u8; 1000]).unwrap();
        small.put(&key, b"", &[i as u8; 100]).unwrap();
        // One entry of about 1.2 KB per call: a run of 150 elements.
        list.add_all(&key, b"", elements.iter().map(|e| &e[..]))
            .unwrap();
    }
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
        // size, and the new puts decide again.
        write_states(dir.path(), &options, run * PUTS);
        let sizes = bytes_per_block(dir.path());
        let big = sizes["state:big"];
        let small = sizes["state:small"];
        assert!(
            (3000..5200).contains(&big),
            "run {run}: {big} bytes per block of 1 KB values"
        );
        assert!(
            small >= 14 << 10,
            "run {run}: {small} bytes per block of 100-byte values"
        );
        // Lists are read by seeks and keep the shared size, however large their runs.
        let list = sizes["state:list"];
        assert!(
            list >= 14 << 10,
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
    let sizes = bytes_per_block(dir.path());
    assert!(sizes["state:big"] >= 14 << 10, "{sizes:?}");
}

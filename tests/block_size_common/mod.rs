//! What the block-size tests share: three states of different entry sizes written alike, and
//! the data bytes per block of the SSTs RocksDB wrote for them
//! (docs/decisions/0051-block-size-follows-entry-size.md).

// Each test file that includes this module uses a part of it.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use rockstate::{CodecId, KeyedBackend, StateDescriptor};

/// Data bytes per data block of files of 1 KB entries written in 4 KiB blocks (a block
/// closes once it passes the size: 4 or 5 entries).
pub const LARGE_ENTRY_BLOCKS: std::ops::Range<u64> = 3000..5200;

/// Data bytes per data block that files written in the shared 16 KiB blocks reach at least.
pub const SHARED_BLOCKS_AT_LEAST: u64 = 14 << 10;

/// The SST files in the database directory `dir`.
pub fn ssts(dir: &Path) -> BTreeSet<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sst"))
        .collect()
}

/// Data bytes per data block of `files` (their table properties), by column family, summed
/// over the files.
pub fn bytes_per_block(files: &BTreeSet<PathBuf>) -> BTreeMap<String, u64> {
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

/// Registers value states `big` and `small` and list state `list` on `b` and writes `n` fresh
/// keys to each from `offset`: 1,000-byte values, 100-byte values, and one run of 150
/// elements (an entry of about 1.2 KB) per key.
pub fn write_states(b: &KeyedBackend, offset: u32, n: u32) {
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

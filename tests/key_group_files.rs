//! `DbOptions::key_group_files` (default off): compaction cuts a state's SST files at
//! key-group boundaries, one key group per file (or, with two-byte prefixes and more than 256
//! owned groups, 256 neighbouring groups per file), and reads see the same state either way.

use rockstate::{CodecId, DbOptions, KeyGroupRange, KeyedBackend};

/// SST files of state `name` over all levels.
fn files(b: &KeyedBackend, name: &str) -> u64 {
    (0..7)
        .map(|l| {
            b.state_property(name, &format!("rocksdb.num-files-at-level{l}"))
                .unwrap()
                .unwrap()
        })
        .sum()
}

/// Opens a backend, writes `keys` keys (value = key) into one state, compacts it fully and
/// returns its file count; then checks every key and some missing ones read as written.
fn compacted_files(max_parallelism: u32, range: KeyGroupRange, on: bool, keys: u64) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let options = DbOptions {
        key_group_files: on,
        ..DbOptions::default()
    };
    let b = KeyedBackend::builder(dir.path())
        .max_parallelism(max_parallelism)
        .key_groups(range)
        .options(options)
        .open()
        .unwrap();
    let s = b.raw_value_state("s", CodecId::new("bytes", 1)).unwrap();
    let groups = |k: u64| rockstate::keygroup::key_group_of(&k.to_be_bytes(), max_parallelism);
    let owned: Vec<u64> = (0..)
        .filter(|k| range.contains(groups(*k)))
        .take(keys as usize)
        .collect();
    for k in &owned {
        s.put(&k.to_be_bytes(), &[], &k.to_le_bytes()).unwrap();
    }
    b.flush().unwrap();
    b.compact_state("s").unwrap();
    let n = files(&b, "s");
    for k in &owned {
        assert_eq!(
            s.get(&k.to_be_bytes(), &[]).unwrap().as_deref(),
            Some(&k.to_le_bytes()[..])
        );
    }
    // Owned keys past every stored one: the reads the cuts let skip whole files.
    let last = *owned.last().unwrap();
    for k in (last + 1..last + 2000).filter(|k| range.contains(groups(*k))) {
        assert_eq!(s.get(&k.to_be_bytes(), &[]).unwrap(), None);
    }
    n
}

#[test]
fn one_file_per_key_group_with_one_byte_prefixes() {
    assert!(!DbOptions::default().key_group_files, "off by default");
    let all = KeyGroupRange::all(128).unwrap();
    // 20,000 keys reach every one of the 128 groups.
    assert_eq!(compacted_files(128, all, true, 20_000), 128);
    assert_eq!(compacted_files(128, all, false, 20_000), 1);
    // An operator's share: its own groups only.
    let share = KeyGroupRange::for_operator(128, 4, 1).unwrap();
    assert_eq!(compacted_files(128, share, true, 5_000), 32);
}

#[test]
fn two_byte_prefixes_cut_per_group_up_to_256_groups_then_per_256() {
    // 256 owned groups of a two-byte layout: one file each.
    let share = KeyGroupRange::new(256, 511).unwrap();
    assert_eq!(compacted_files(1024, share, true, 20_000), 256);
    // All 1024: files of 256 neighbouring groups (the prefix's first byte).
    let all = KeyGroupRange::all(1024).unwrap();
    assert_eq!(compacted_files(1024, all, true, 40_000), 4);
}

//! A key group may hold more than the savepoint format's 1 GiB block
//! (`sst_format::savepoint::MAX_BLOCK_BYTES`): since format version 4 it continues over
//! several blocks (docs/savepoint-format.md). A backend of max parallelism 1 (every key in key
//! group 0) holding 17 values of the default maximum size (64 MiB each, 1088 MiB) savepoints,
//! and the savepoint restores every value.

use rockstate::{CodecId, KeyedBackend};

#[test]
fn a_key_group_holding_more_than_1_gib_savepoints_and_restores() {
    let dir = tempfile::tempdir().unwrap();
    let b = KeyedBackend::builder(dir.path().join("db"))
        .max_parallelism(1)
        .open()
        .unwrap();
    let v = b.raw_value_state("v", CodecId::new("raw", 1)).unwrap();
    // Byte k in value k: RocksDB and zstd store them in a few KiB, the block counts them raw.
    for k in 0..17u8 {
        let value = vec![k; 64 << 20]; // exactly DbOptions::default().max_value_bytes
        v.put(&[k], b"", &value).unwrap();
    }
    let sp = dir.path().join("sp");
    let stats = b.write_savepoint(&sp).unwrap();
    assert_eq!(stats.entries, 17);
    assert!(stats.raw_bytes > 1 << 30, "{stats:?}");
    assert!(
        stats.blocks >= 5,
        "{stats:?}: one key group over several blocks"
    );
    drop(v);
    drop(b);

    let b2 = KeyedBackend::builder(dir.path().join("db2"))
        .max_parallelism(1)
        .open()
        .unwrap();
    b2.restore_savepoint(&sp).unwrap();
    let v2 = b2.raw_value_state("v", CodecId::new("raw", 1)).unwrap();
    for k in 0..17u8 {
        let got = v2.get(&[k], b"").unwrap().expect("restored");
        assert_eq!(got.len(), 64 << 20, "value {k}");
        assert!(got.iter().all(|&x| x == k), "value {k}");
    }
    assert_eq!(v2.get(&[17], b"").unwrap(), None);
}

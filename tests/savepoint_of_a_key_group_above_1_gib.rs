//! The savepoint format caps one key group's uncompressed block at 1 GiB
//! (`sst_format::savepoint::MAX_BLOCK_BYTES`, docs/savepoint-format.md): a backend of max
//! parallelism 1 (every key in key group 0) holding 17 values of the default maximum size
//! (64 MiB each, 1088 MiB) cannot be savepointed. The write is refused as invalid input
//! (`Error::ValueTooLarge` naming the block), not reported as damaged bytes, and leaves no
//! file behind; the backend keeps working and a smaller state is savepointed.

use rockstate::{CodecId, Error, ErrorKind, KeyedBackend};

#[test]
fn a_key_group_holding_more_than_1_gib_is_refused_as_invalid_input() {
    let dir = tempfile::tempdir().unwrap();
    let b = KeyedBackend::builder(dir.path().join("db"))
        .max_parallelism(1)
        .open()
        .unwrap();
    let v = b.raw_value_state("v", CodecId::new("raw", 1)).unwrap();
    // Zeros: RocksDB stores them in a few KiB, the savepoint block counts them raw.
    let value = vec![0u8; 64 << 20]; // exactly DbOptions::default().max_value_bytes
    for k in 0..17u8 {
        v.put(&[k], b"", &value).unwrap();
    }
    let sp = dir.path().join("sp");
    let err = b.write_savepoint(&sp).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(
        matches!(&err, Error::ValueTooLarge { what, .. } if what.contains("key-group block")),
        "{err:?}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "db")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");

    // Under the limit again, the same backend savepoints and restores.
    for k in [15u8, 16] {
        v.clear(&[k], b"").unwrap();
    }
    b.write_savepoint(&sp).unwrap();
    let b2 = KeyedBackend::builder(dir.path().join("db2"))
        .max_parallelism(1)
        .open()
        .unwrap();
    b2.restore_savepoint(&sp).unwrap();
    let v2 = b2.raw_value_state("v", CodecId::new("raw", 1)).unwrap();
    for k in 0..15u8 {
        assert_eq!(v2.get(&[k], b"").unwrap().map(|x| x.len()), Some(64 << 20));
    }
    assert_eq!(v2.get(&[16], b"").unwrap(), None);
}

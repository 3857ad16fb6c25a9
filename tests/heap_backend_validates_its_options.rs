//! `DbOptions::validate` refuses a `max_value_bytes` of 0 or at/above `u32::MAX`, and a
//! RocksDB backend opened with one fails with `Error::InvalidOption`. The heap backend never
//! validates its options: it opens with `max_value_bytes: 0` (then refuses every non-empty
//! value as "too large") or `usize::MAX` (then takes values of any size, though its state
//! survives only through savepoints, whose key-group blocks hold at most 1 GiB).

use rockstate::{BackendKind, CodecId, DbOptions, Error, KeyedBackend};

#[test]
fn the_heap_backend_refuses_options_the_rocksdb_backend_refuses() {
    let mut failures = Vec::new();
    for (name, options) in [
        (
            "max_value_bytes: 0",
            DbOptions {
                max_value_bytes: 0,
                ..DbOptions::default()
            },
        ),
        (
            "max_value_bytes: usize::MAX",
            DbOptions {
                max_value_bytes: usize::MAX,
                ..DbOptions::default()
            },
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let rocks = KeyedBackend::builder(dir.path())
            .options(options.clone())
            .open();
        assert!(
            matches!(rocks, Err(Error::InvalidOption { .. })),
            "{name}: RocksDB opened"
        );
        match KeyedBackend::heap_builder()
            .kind(BackendKind::Heap)
            .options(options)
            .open()
        {
            Err(Error::InvalidOption { .. }) => {}
            Err(e) => failures.push(format!("{name}: heap failed with {e:?}")),
            Ok(b) => {
                let v = b.raw_value_state("v", CodecId::new("raw", 1)).unwrap();
                failures.push(format!(
                    "{name}: heap backend opened; a put of 1 byte: {:?}",
                    v.put(b"k", b"", b"x")
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

//! A point read of a key whose group this backend does not own is `KeyGroupOutOfRange`; a scan
//! of a whole key group this backend does not own (below the max parallelism) should be a
//! typed error too, not an empty answer indistinguishable from an owned, empty group.

use rockstate::{BackendKind, Error, KeyGroupRange, KeyedBackend};

#[test]
fn scanning_a_key_group_outside_the_backends_range_is_refused() {
    let mut failures = Vec::new();
    for kind in [BackendKind::RocksDb, BackendKind::Heap] {
        let dir = tempfile::tempdir().unwrap();
        let b = KeyedBackend::builder(dir.path())
            .kind(kind)
            .max_parallelism(128)
            .key_groups(KeyGroupRange::new(0, 63).unwrap())
            .open()
            .unwrap();
        let s = b.value_state::<u64, (), u64>("s").unwrap();
        // A key of group 100: the point API refuses it.
        let k = (0u64..)
            .find(|k| {
                rockstate::keygroup::key_group_of(&rockstate::codec::encode(k, "k").unwrap(), 128)
                    == 100
            })
            .unwrap();
        assert!(matches!(
            s.get(&k, &()),
            Err(Error::KeyGroupOutOfRange { .. })
        ));
        let mut seen = 0;
        let r = b.scan_key_group("s", 100, |_| {
            seen += 1;
            Ok(true)
        });
        if !matches!(
            r,
            Err(Error::KeyGroupOutOfRange { .. }) | Err(Error::InvalidKeyGroups(_))
        ) {
            failures.push(format!(
                "{kind:?}: scan_key_group of group 100 outside [0, 63] -> {r:?} ({seen} entries)"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

//! A TTL state with `UpdateType::Disabled` never expires: reads return its entries however
//! old, and so does a savepoint of it, on both backends (the savepoint writer drops expired
//! entries only of states whose entries can expire, as the compaction filter and the heap's
//! incremental cleanup do).

use std::sync::Arc;
use std::time::Duration;

use rockstate::ttl::UpdateType;
use rockstate::{BackendKind, KeyedBackend, ManualClock, StateDescriptor, TtlConfig};

#[test]
fn savepoint_keeps_entries_of_a_state_whose_ttl_update_type_is_disabled() {
    let mut restored = Vec::new();
    for kind in [BackendKind::RocksDb, BackendKind::Heap] {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(1_000);
        let src = KeyedBackend::builder(dir.path().join("src"))
            .kind(kind)
            .clock(Arc::new(clock.clone()))
            .open()
            .unwrap();
        let desc = StateDescriptor::new("v")
            .with_ttl(TtlConfig::new(Duration::from_secs(10)).update_type(UpdateType::Disabled));
        let v = src.value_state::<u32, (), u32>(desc.clone()).unwrap();
        v.put(&1, &(), &11).unwrap();
        clock.advance(Duration::from_secs(60));
        // Disabled: never expires, the live backend still returns it.
        assert_eq!(v.get(&1, &()).unwrap(), Some(11), "{kind:?} live read");
        let sp = dir.path().join("sp");
        src.write_savepoint(&sp).unwrap();
        let dst = KeyedBackend::builder(dir.path().join("dst"))
            .kind(kind)
            .clock(Arc::new(clock.clone()))
            .open()
            .unwrap();
        dst.restore_savepoint(&sp).unwrap();
        let v2 = dst.value_state::<u32, (), u32>(desc).unwrap();
        restored.push((kind, v2.get(&1, &()).unwrap()));
    }
    assert_eq!(
        restored,
        vec![
            (BackendKind::RocksDb, Some(11)),
            (BackendKind::Heap, Some(11))
        ],
        "the savepoint lost a value that never expires"
    );
}

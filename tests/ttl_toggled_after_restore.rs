//! Flink treats switching TTL on or off for a restored state as incompatible: the same state
//! name registered after a reopen, a checkpoint restore or a savepoint restore with TTL
//! switched is a typed `StateMismatch`, on both backends, in either order (registered before
//! or after the savepoint is loaded), and the stored bytes are never reinterpreted.

use std::sync::Arc;
use std::time::Duration;

use rockstate::{
    BackendKind, Error, KeyedBackend, LocalStorage, RestoreFrom, StateDescriptor, TtlConfig,
};

fn desc(ttl: bool) -> StateDescriptor {
    let d = StateDescriptor::new("s");
    if ttl {
        d.with_ttl(TtlConfig::new(Duration::from_secs(3600)))
    } else {
        d
    }
}

fn mismatch<T>(r: rockstate::Result<T>) -> bool {
    matches!(r, Err(Error::StateMismatch { .. }))
}

#[test]
fn ttl_switched_after_reopen_checkpoint_or_savepoint_is_refused() {
    let mut failures = Vec::new();
    for ttl_before in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let storage = Arc::new(LocalStorage::new(dir.path().join("cp")).unwrap());
        // RocksDB: write, checkpoint, savepoint, close.
        let b = KeyedBackend::builder(dir.path().join("a"))
            .checkpoint_storage(storage.clone())
            .open()
            .unwrap();
        let v = b.value_state::<u64, (), u64>(desc(ttl_before)).unwrap();
        v.put(&1, &(), &7).unwrap();
        b.checkpoint(1).unwrap();
        b.notify_checkpoint_complete(1).unwrap();
        let sp = dir.path().join("sp");
        b.write_savepoint(&sp).unwrap();
        b.close().unwrap();
        // Reopen.
        let b = KeyedBackend::builder(dir.path().join("a")).open().unwrap();
        if !mismatch(b.value_state::<u64, (), u64>(desc(!ttl_before))) {
            failures.push(format!("ttl {ttl_before}: reopen accepted the switch"));
        }
        b.close().unwrap();
        // Checkpoint restore.
        let b = KeyedBackend::builder(dir.path().join("b"))
            .checkpoint_storage(storage.clone())
            .restore(RestoreFrom::Checkpoint(1))
            .unwrap();
        if !mismatch(b.value_state::<u64, (), u64>(desc(!ttl_before))) {
            failures.push(format!(
                "ttl {ttl_before}: checkpoint restore accepted the switch"
            ));
        }
        b.close().unwrap();
        // Savepoint restore, both kinds, both orders.
        for kind in [BackendKind::RocksDb, BackendKind::Heap] {
            for register_first in [false, true] {
                let path = dir.path().join(format!("c-{kind:?}-{register_first}"));
                let b = KeyedBackend::builder(&path).kind(kind).open().unwrap();
                if register_first {
                    let s = b.value_state::<u64, (), u64>(desc(!ttl_before)).unwrap();
                    let r = b.restore_savepoint(&sp);
                    let read = s.get(&1, &());
                    if r.is_ok() {
                        failures.push(format!(
                            "ttl {ttl_before} {kind:?}: savepoint loaded into a state registered \
                             with TTL switched; read back {read:?}"
                        ));
                    }
                } else {
                    b.restore_savepoint(&sp).unwrap();
                    if !mismatch(b.value_state::<u64, (), u64>(desc(!ttl_before))) {
                        failures.push(format!(
                            "ttl {ttl_before} {kind:?}: savepoint restore accepted the switch"
                        ));
                    }
                    let same = b.value_state::<u64, (), u64>(desc(ttl_before)).unwrap();
                    assert_eq!(same.get(&1, &()).unwrap(), Some(7));
                }
                b.close().unwrap();
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

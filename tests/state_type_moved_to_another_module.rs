//! A typed state's key or value type moved to another module (or crate), or printed with other
//! paths by another compiler (`std::any::type_name` is not promised stable), keeps its postcard
//! bytes: a reopen, a checkpoint restore and a savepoint restore open the state with the moved
//! type. A type that changed (another value type, another element type, another kind) is still
//! refused with `StateMismatch`.

use std::path::Path;
use std::sync::Arc;

use rockstate::{
    BackendKind, CodecId, Error, KeyedBackend, LocalStorage, ManualClock, RestoreFrom,
};
use serde::{Deserialize, Serialize};

mod before {
    use super::*;
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    pub struct Key(pub u32);
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    pub struct Count {
        pub n: u64,
    }
}

mod after {
    use super::*;
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    pub struct Key(pub u32);
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    pub struct Count {
        pub n: u64,
    }
}

fn builder(dir: &Path, kind: BackendKind) -> rockstate::BackendBuilder {
    KeyedBackend::builder(dir)
        .kind(kind)
        .clock(Arc::new(ManualClock::new(1_000)))
}

fn write_before(b: &KeyedBackend) {
    let v = b
        .value_state::<before::Key, (), before::Count>("counts")
        .unwrap();
    let m = b
        .map_state::<before::Key, (), String, Vec<before::Key>>("index")
        .unwrap();
    for k in 0..50 {
        v.put(&before::Key(k), &(), &before::Count { n: k.into() })
            .unwrap();
        m.put(
            &before::Key(k),
            &(),
            &format!("k{k}"),
            &vec![before::Key(k)],
        )
        .unwrap();
    }
}

fn read_after(b: &KeyedBackend) {
    let v = b
        .value_state::<after::Key, (), after::Count>("counts")
        .unwrap();
    let m = b
        .map_state::<after::Key, (), String, Vec<after::Key>>("index")
        .unwrap();
    for k in 0..50 {
        assert_eq!(
            v.get(&after::Key(k), &()).unwrap(),
            Some(after::Count { n: k.into() })
        );
        assert_eq!(
            m.get(&after::Key(k), &(), &format!("k{k}")).unwrap(),
            Some(vec![after::Key(k)])
        );
    }
}

#[test]
fn a_reopen_opens_the_state_with_the_moved_types() {
    for kind in [BackendKind::RocksDb, BackendKind::Heap] {
        let dir = tempfile::tempdir().unwrap();
        let b = builder(dir.path(), kind).open().unwrap();
        write_before(&b);
        if kind == BackendKind::RocksDb {
            b.close().unwrap();
            let b = builder(dir.path(), kind).open().unwrap();
            read_after(&b);
        } else {
            // Within one session too: the state is the same.
            read_after(&b);
        }
    }
}

#[test]
fn a_checkpoint_and_a_savepoint_restore_with_the_moved_types() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(LocalStorage::new(dir.path().join("cp")).unwrap());
    let b = builder(&dir.path().join("a"), BackendKind::RocksDb)
        .checkpoint_storage(storage.clone())
        .open()
        .unwrap();
    write_before(&b);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    let sp = dir.path().join("sp");
    b.write_savepoint(&sp).unwrap();
    b.close().unwrap();

    let r = builder(&dir.path().join("r"), BackendKind::RocksDb)
        .checkpoint_storage(storage.clone())
        .restore(RestoreFrom::Checkpoint(1))
        .unwrap();
    read_after(&r);
    // The next checkpoint of the restored backend restores again.
    r.checkpoint(2).unwrap();
    r.notify_checkpoint_complete(2).unwrap();
    r.close().unwrap();
    let r2 = builder(&dir.path().join("r2"), BackendKind::RocksDb)
        .checkpoint_storage(storage)
        .restore(RestoreFrom::Checkpoint(2))
        .unwrap();
    read_after(&r2);

    for kind in [BackendKind::RocksDb, BackendKind::Heap] {
        let s = builder(&dir.path().join(format!("s-{kind:?}")), kind)
            .open()
            .unwrap();
        s.restore_savepoint(&sp).unwrap();
        read_after(&s);
    }
}

#[test]
fn a_changed_type_is_still_refused() {
    let dir = tempfile::tempdir().unwrap();
    let b = builder(dir.path(), BackendKind::RocksDb).open().unwrap();
    b.value_state::<u32, (), u64>("n").unwrap();
    b.list_state::<u32, (), Vec<u8>>("l").unwrap();
    b.raw_value_state("raw", CodecId::new("my::codec::Json", 1))
        .unwrap();
    b.close().unwrap();
    let b = builder(dir.path(), BackendKind::RocksDb).open().unwrap();
    let refused = |r: rockstate::Result<()>, what: &str| {
        assert!(
            matches!(r, Err(Error::StateMismatch { .. })),
            "{what}: {r:?}"
        );
    };
    refused(b.value_state::<u32, (), i64>("n").map(drop), "u64 as i64");
    refused(
        b.value_state::<u64, (), u64>("n").map(drop),
        "key u32 as u64",
    );
    refused(
        b.list_state::<u32, (), Vec<u16>>("l").map(drop),
        "Vec<u8> as Vec<u16>",
    );
    refused(
        b.value_state::<u32, (), Vec<u8>>("l").map(drop),
        "list as value",
    );
    // A raw codec's name is the caller's: compared as it is, paths included.
    refused(
        b.raw_value_state("raw", CodecId::new("other::codec::Json", 1))
            .map(drop),
        "another raw codec",
    );
    b.value_state::<u32, (), u64>("n").unwrap();
    b.raw_value_state("raw", CodecId::new("my::codec::Json", 1))
        .unwrap();
}

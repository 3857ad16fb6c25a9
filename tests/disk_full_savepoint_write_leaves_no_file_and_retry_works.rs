//! A savepoint written to a full filesystem: a typed error, no file under the final name and
//! no partial file left behind; once space is freed the same write succeeds and restores
//! exactly. Then a savepoint restore into a backend whose directory is full: a typed error,
//! and after freeing space a retry restores exactly.

#[path = "disk_common/mod.rs"]
mod disk;

use std::collections::BTreeMap;

use rockstate::{ErrorKind, KeyedBackend};

fn value(k: u32) -> Vec<u8> {
    (0..120u32)
        .map(|i| (k.wrapping_mul(2_654_435_761).wrapping_add(i * 40_503) >> 13) as u8)
        .collect()
}

const KEYS: u32 = 40_000;

#[test]
fn a_savepoint_to_a_full_disk_is_typed_leaves_nothing_and_a_retry_works() {
    let fs = disk::SmallFs::mount(32);
    let dir = tempfile::tempdir().unwrap();
    let src = KeyedBackend::builder(dir.path().join("src"))
        .open()
        .unwrap();
    let v = src.value_state::<u32, (), Vec<u8>>("v").unwrap();
    let l = src.list_state::<u32, (), u32>("l").unwrap();
    for k in 0..KEYS {
        v.put(&k, &(), &value(k)).unwrap();
        if k % 10 == 0 {
            l.add(&k, &(), &k).unwrap();
            l.add(&k, &(), &(k + 1)).unwrap();
        }
    }
    let sp = fs.path("sp");
    fs.fill();
    let e = src
        .write_savepoint(&sp)
        .expect_err("a savepoint to a full disk succeeded");
    eprintln!("savepoint: kind {:?}: {e}", e.kind());
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    assert!(
        e.to_string().contains(".sp.partial-"),
        "the error names the file: {e}"
    );
    assert!(
        !sp.exists(),
        "a file under the final name after a failed write"
    );
    let left = fs.files_besides_filler(&fs.root);
    assert_eq!(left, Vec::<String>::new(), "files left by the failed write");

    fs.free();
    src.write_savepoint(&sp).unwrap();

    // A savepoint restore into a backend whose directory is full.
    let target = fs.path("restored");
    let restored = KeyedBackend::builder(&target).open().unwrap();
    fs.fill();
    let e = restored
        .restore_savepoint(&sp)
        .expect_err("a savepoint restore into a full disk succeeded");
    eprintln!("restore_savepoint: kind {:?}: {e}", e.kind());
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    fs.free();
    disk::retry_until_recovered("savepoint restore", || restored.restore_savepoint(&sp));
    let v2 = restored.value_state::<u32, (), Vec<u8>>("v").unwrap();
    let l2 = restored.list_state::<u32, (), u32>("l").unwrap();
    let mut lists = BTreeMap::new();
    for k in 0..KEYS {
        assert_eq!(v2.get(&k, &()).unwrap(), Some(value(k)), "key {k}");
        let got = l2.get(&k, &()).unwrap();
        if !got.is_empty() {
            lists.insert(k, got);
        }
    }
    let want: BTreeMap<u32, Vec<u32>> = (0..KEYS)
        .filter(|k| k % 10 == 0)
        .map(|k| (k, vec![k, k + 1]))
        .collect();
    assert_eq!(lists, want);
}

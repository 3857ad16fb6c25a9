//! Every failure carries a coarse kind a caller can decide on (`Error::kind`), whatever the
//! variant: each kind here comes from a real failure through the public API.

use std::sync::Arc;

use rockstate::keygroup::key_group_of;
use rockstate::{
    BackendKind, CheckpointStorage, ErrorKind, KeyGroupRange, KeyedBackend, LocalStorage,
    RestoreFrom,
};

#[test]
fn failures_have_the_kind_a_caller_decides_on() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn CheckpointStorage> =
        Arc::new(LocalStorage::new(dir.path().join("storage")).unwrap());

    // Invalid input: a key outside the backend's key groups.
    let range = KeyGroupRange::for_operator(128, 4, 1).unwrap();
    let b = KeyedBackend::builder(dir.path().join("b"))
        .key_groups(range)
        .checkpoint_storage(Arc::clone(&storage))
        .open()
        .unwrap();
    let outside = (0u32..)
        .find(|k| !range.contains(key_group_of(&postcard::to_stdvec(k).unwrap(), 128)))
        .unwrap();
    let v = b.value_state::<u32, (), u64>("v").unwrap();
    let e = v.put(&outside, &(), &1).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(!e.is_transient());

    // Not found: a restore of a checkpoint that was never taken.
    let e = KeyedBackend::builder(dir.path().join("r"))
        .key_groups(range)
        .checkpoint_storage(Arc::clone(&storage))
        .restore(RestoreFrom::Checkpoint(42))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");

    // Conflict: storage objects are never overwritten.
    storage.put_bytes("x/once", b"1").unwrap();
    let e = storage.put_bytes("x/once", b"2").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");

    // Corruption: a checkpoint whose manifest was damaged.
    let inside = (0u32..)
        .find(|k| range.contains(key_group_of(&postcard::to_stdvec(k).unwrap(), 128)))
        .unwrap();
    v.put(&inside, &(), &7).unwrap();
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    let manifest = storage
        .list("")
        .unwrap()
        .into_iter()
        .find(|o| o.name.ends_with("/_metadata"))
        .unwrap()
        .name;
    let mut bytes = storage.get_bytes(&manifest).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    storage.delete(&manifest).unwrap();
    storage.put_bytes(&manifest, &bytes).unwrap();
    let e = KeyedBackend::builder(dir.path().join("c"))
        .key_groups(range)
        .checkpoint_storage(Arc::clone(&storage))
        .restore(RestoreFrom::Checkpoint(1))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");

    // Unsupported: checkpoints of the heap backend.
    let e = KeyedBackend::builder(dir.path().join("h"))
        .kind(BackendKind::Heap)
        .checkpoint_storage(Arc::clone(&storage))
        .open()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
}

//! `LocalStorage` answers for a name that is no object as object storage does: a directory
//! (a prefix of other objects) or a path through an object is not found for reads, its delete
//! succeeds, and a get creates nothing.

use rockstate::{CheckpointStorage, Error, LocalStorage};

#[test]
fn a_directory_or_a_path_through_an_object_is_no_object() {
    let dir = tempfile::tempdir().unwrap();
    let s = LocalStorage::new(dir.path().join("root")).unwrap();
    s.put_bytes("chk-1/b/_metadata", b"m").unwrap();
    for name in ["chk-1", "chk-1/b", "chk-1/b/_metadata/x"] {
        assert!(!s.exists(name).unwrap(), "{name}");
        let g = s.get_bytes(name);
        assert!(
            matches!(g, Err(Error::ObjectNotFound { .. })),
            "{name}: {g:?}"
        );
        let local = dir.path().join("fetched");
        let f = s.get_file(name, &local);
        assert!(
            matches!(f, Err(Error::ObjectNotFound { .. })),
            "{name}: {f:?}"
        );
        assert!(!local.exists(), "{name}: a failed get left a file");
        s.delete(name).unwrap();
    }
    assert_eq!(s.get_bytes("chk-1/b/_metadata").unwrap(), b"m");
}

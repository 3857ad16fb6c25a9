//! `rockstate verify` on a storage where checkpoint 2's manifest holds the bytes of checkpoint
//! 1's manifest (same backend; a misplaced copy). A restore refuses it ("manifest describes
//! checkpoint 1 of backend …", `restore::load`), so verify names it and exits 1: intact files
//! are not enough.

mod cli_fixture;

use std::sync::Arc;

use cli_fixture::{code, rockstate, stdout, Fixture};
use rockstate::{KeyedBackend, LocalStorage, RestoreFrom};

#[test]
fn verify_names_a_manifest_describing_another_checkpoint() {
    let f = Fixture::new();
    let m1 = f
        .objects("chk-1/")
        .into_iter()
        .find(|n| n.ends_with("/_metadata"))
        .unwrap();
    let m2 = f
        .objects("chk-2/")
        .into_iter()
        .find(|n| n.ends_with("/_metadata"))
        .unwrap();
    let bytes = std::fs::read(f.storage.join(&m1)).unwrap();
    std::fs::write(f.storage.join(&m2), bytes).unwrap();
    // What a restore makes of it: refused as corrupt.
    let restored = KeyedBackend::builder(f.dir.path().join("restored"))
        .checkpoint_storage(Arc::new(LocalStorage::new(&f.storage).unwrap()))
        .restore(RestoreFrom::Latest);
    let err = restored.expect_err("the restore refuses the storage");
    assert!(err.to_string().contains("describes checkpoint 1"), "{err}");
    let o = rockstate(&["verify", f.arg()]);
    assert_eq!(
        code(&o),
        1,
        "verify passed a misplaced manifest:\n{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains(&format!("BAD {m2}")), "{}", stdout(&o));
}

//! `rockstate verify <storage>` on the storage the demo ran on (`--storage`): the demo keeps
//! its checkpoints under `jobs/<job id>/`, so at the root verify recognizes none of the
//! objects. A verify that checked nothing of a non-empty directory is not a pass: it says so,
//! points at the job namespaces and exits non-zero.

mod cli_fixture;

use cli_fixture::{code, rockstate, stderr, stdout};

#[test]
fn verify_of_a_directory_holding_no_checkpoint_storage_is_not_ok() {
    let dir = tempfile::tempdir().unwrap();
    let storage = dir.path().join("storage");
    let o = rockstate(&[
        "demo",
        "--impressions",
        "3000",
        "--users",
        "50",
        "--ads",
        "5",
        "--checkpoint-every",
        "1000",
        "--crash-at",
        "2500",
        "--storage",
        storage.to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let o = rockstate(&["verify", storage.to_str().unwrap()]);
    assert_ne!(
        code(&o),
        0,
        "verify of a storage whose checkpoints it did not find passed:\n{}{}",
        stdout(&o),
        stderr(&o)
    );
}

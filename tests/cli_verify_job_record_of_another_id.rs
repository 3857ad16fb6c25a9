//! `rockstate verify` on a storage where job record `job/chk-2` holds the bytes of record 1
//! (a misplaced copy, e.g. a botched sync of the storage). A restore refuses that record
//! (`checkpoint::read_record`: "record describes checkpoint 1"), so verify, which checks
//! "every manifest and job record", names it and exits 1, and gc refuses rather than take
//! checkpoint 2's own directory for garbage.

mod cli_fixture;

use std::sync::Arc;

use cli_fixture::{code, rockstate, stdout, Fixture};
use rockstate::{KeyedBackend, LocalStorage, RestoreFrom};

#[test]
fn verify_names_a_job_record_describing_another_checkpoint() {
    let f = Fixture::new();
    let r1 = std::fs::read(f.storage.join("job/chk-1")).unwrap();
    std::fs::write(f.storage.join("job/chk-2"), r1).unwrap();
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
        "verify passed a misplaced record:\n{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("BAD job/chk-2"), "{}", stdout(&o));
}

/// The same storage under `gc`: record `job/chk-2` is taken at its name's word (`L` = 2) but
/// its content names checkpoint 1's manifests, so checkpoint 2's own directory looks
/// "finished" and a default `gc --apply` deletes it and the SSTs its attempt uploaded. Like an
/// undecodable retained record, a record that does not describe its own id must stop gc.
#[test]
fn gc_refuses_a_job_record_describing_another_checkpoint() {
    let f = Fixture::new();
    let r1 = std::fs::read(f.storage.join("job/chk-1")).unwrap();
    std::fs::write(f.storage.join("job/chk-2"), r1).unwrap();
    let before = f.objects("");
    let o = rockstate(&["gc", "--apply", f.arg()]);
    let after = f.objects("");
    let gone: Vec<&String> = before.iter().filter(|n| !after.contains(n)).collect();
    assert!(
        gone.is_empty(),
        "gc deleted checkpoint 2's objects (exit {}): {gone:?}\n{}",
        code(&o),
        stdout(&o)
    );
    assert_eq!(code(&o), 1, "{}", stdout(&o));
}

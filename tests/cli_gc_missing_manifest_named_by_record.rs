//! `rockstate gc --apply` on a storage whose newest job record names a manifest that is gone
//! from storage (damaged storage): what that checkpoint references is unknown, exactly as for
//! an undecodable manifest (`gc_refuses_while_a_manifest_is_undecodable` in tests/cli.rs), so
//! gc refuses (exit 1) and deletes nothing, rather than take the checkpoint's directory for a
//! finished one and delete its private files and the SSTs its attempt uploaded.

mod cli_fixture;

use cli_fixture::{code, rockstate, stderr, stdout, Fixture};

#[test]
fn gc_refuses_when_a_retained_record_names_a_missing_manifest() {
    let f = Fixture::new();
    let meta = f
        .objects("chk-2/")
        .into_iter()
        .find(|n| n.ends_with("/_metadata"))
        .unwrap();
    std::fs::remove_file(f.storage.join(&meta)).unwrap();
    let before = f.objects("");

    // verify names the problem ...
    let o = rockstate(&["verify", f.arg()]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));

    // ... and gc, with its default minimum age, must not delete what record 2 needs.
    let o = rockstate(&["gc", "--apply", f.arg()]);
    let after = f.objects("");
    let gone: Vec<&String> = before.iter().filter(|n| !after.contains(n)).collect();
    assert!(
        gone.is_empty(),
        "gc deleted objects of the checkpoint job record 2 names (exit {}):\n{:?}\nstdout:\n{}stderr:\n{}",
        code(&o),
        gone,
        stdout(&o),
        stderr(&o)
    );
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
}

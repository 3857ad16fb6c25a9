//! `rockstate gc --apply` must report what it did: when one delete fails part-way, the objects
//! it already deleted are still listed (text and `--json`), and a file rockstate never names
//! (`valid_local_name` allows only letters, digits, `.`, `_`, `-` inside a checkpoint
//! directory; `checkpoint-format.md` §1: "objects of any other name ... never deleted") neither
//! makes the command fail nor blocks the collection of rockstate's own garbage.
//!
//! Here a finished attempt's directory `chk-1/<backend>/` (id 1 is below the newest record, so
//! it is deleted whatever its age) holds `CURRENT` and a file another tool left, `notes\1.txt`.

mod cli_fixture;

use cli_fixture::{code, rockstate, stderr, stdout, Fixture};

#[test]
fn gc_apply_lists_every_object_it_deleted_and_is_not_wedged_by_a_foreign_name() {
    let f = Fixture::new();
    let dir = "chk-1/0123456789abcdef0123456789abcdef";
    std::fs::create_dir_all(f.storage.join(dir)).unwrap();
    let current = format!("{dir}/CURRENT");
    let foreign = format!("{dir}/notes\\1.txt");
    std::fs::write(f.storage.join(&current), b"MANIFEST-000001\n").unwrap();
    std::fs::write(f.storage.join(&foreign), b"someone's notes").unwrap();
    let orphan = "shared/1-1700000000000-0123456789abcdef.sst";
    std::fs::write(f.storage.join(orphan), b"orphan of attempt 1").unwrap();

    let before = f.objects("");
    let o = rockstate(&["gc", "--apply", "--min-age", "0s", f.arg()]);
    let after = f.objects("");
    let gone: Vec<&String> = before.iter().filter(|n| !after.contains(n)).collect();
    let out = stdout(&o);
    let unreported: Vec<&&String> = gone.iter().filter(|n| !out.contains(n.as_str())).collect();
    assert!(
        unreported.is_empty(),
        "gc --apply deleted {unreported:?} without reporting it (exit {}):\nstdout: {out}\nstderr: {}",
        code(&o),
        stderr(&o)
    );
    assert_eq!(code(&o), 0, "{out}{}", stderr(&o));
    assert!(
        f.storage.join(&foreign).exists(),
        "a file of no rockstate name was deleted"
    );
    assert!(
        !f.storage.join(orphan).exists(),
        "rockstate's own garbage stayed:\n{out}"
    );
}

//! `docs/checkpoint-format.md` §1: `<id>` is "decimal, no padding", and "objects of any other
//! name ... are not rockstate's: listed as other objects by `rockstate inspect`, never deleted
//! by a sweep or `rockstate gc`" (`ownership.md` §4 rule 6: "only names the layout makes are
//! ever garbage"). A system that keeps zero-padded checkpoint directories (`chk-0001/…`) beside
//! rockstate's must keep them through `gc --apply`: rockstate never makes such a name
//! (`layout::metadata_name(1, b)` is `chk-1/b/_metadata`).

mod cli_fixture;

use cli_fixture::{code, rockstate, stderr, stdout, Fixture};

#[test]
fn gc_apply_keeps_files_under_zero_padded_checkpoint_directories() {
    let f = Fixture::new();
    let foreign = [
        "chk-0001/state/_metadata",
        "chk-0001/state/part-00000",
        "chk-0002/state/_metadata",
    ];
    for name in foreign {
        let p = f.storage.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"another system's checkpoint").unwrap();
    }
    let o = rockstate(&["inspect", "--json", f.arg()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let o = rockstate(&["gc", "--apply", "--min-age", "0s", "--json", f.arg()]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let gone: Vec<&str> = foreign
        .iter()
        .copied()
        .filter(|n| !f.storage.join(n).exists())
        .collect();
    assert!(
        gone.is_empty(),
        "gc --apply deleted {gone:?}, names rockstate never makes;\ninspect listed: uncommitted={} other={}\ngc said: {}",
        v["uncommitted"],
        v["other"],
        stdout(&o)
    );
}

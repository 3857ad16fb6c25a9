//! Garbage collection deletes only objects whose names rockstate's layout makes. A storage
//! pointed at by mistake, or shared with another system, holds other files under `shared/`:
//! Flink's incremental checkpoints keep `shared/<uuid>`, RocksDB's BackupEngine
//! `shared/000123.sst`. `rockstate gc --apply` and a job owner's sweep must leave them, however
//! old and unreferenced they are, and delete rockstate's own unreferenced files beside them.

mod cli_fixture;

use std::time::Duration;

use cli_fixture::{code, rockstate, stderr, Fixture};
use rockstate::catalog::{gc_plan, Catalog};
use rockstate::LocalStorage;

const FOREIGN: [&str; 4] = [
    "shared/9f1c2b7e-3c44-4a8e-bd42-1f0e8f1f3a77",
    "shared/000123.sst",
    "shared/photo.jpg",
    "shared/1-2-not-hex-digits!.sst",
];

/// Rockstate's own unreferenced shared files: the current form and the older one.
fn own_orphans() -> [String; 2] {
    [
        "shared/7-1700000000000-0123456789abcdef.sst".to_string(),
        format!("shared/{}.sst", "ab".repeat(16)),
    ]
}

fn put_all(f: &Fixture) {
    for name in FOREIGN
        .iter()
        .copied()
        .chain(own_orphans().iter().map(String::as_str))
    {
        std::fs::write(f.storage.join(name), b"bytes of someone").unwrap();
    }
}

#[test]
fn gc_apply_deletes_own_orphans_and_keeps_foreign_names() {
    let f = Fixture::new();
    let before = f.objects("");
    put_all(&f);
    let o = rockstate(&["gc", "--min-age", "0s", "--apply", "--json", f.arg()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut deleted: Vec<String> = v["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect();
    deleted.sort();
    let mut own = own_orphans().to_vec();
    own.sort();
    assert_eq!(deleted, own, "{v}");
    let mut want: Vec<String> = before
        .into_iter()
        .chain(FOREIGN.iter().map(|s| s.to_string()))
        .collect();
    want.sort();
    assert_eq!(f.objects(""), want, "the foreign files stay");

    // They are listed as objects of no rockstate name.
    let o = rockstate(&["inspect", "--json", f.arg()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let other: Vec<&str> = v["other"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    for name in FOREIGN {
        assert!(other.contains(&name), "{name} not in {other:?}");
    }
}

#[test]
fn a_sweep_plan_never_names_a_foreign_object() {
    let f = Fixture::new();
    put_all(&f);
    let storage = LocalStorage::open_existing(&f.storage).unwrap();
    let catalog = Catalog::load(&storage).unwrap();
    // Long after every put, with no minimum age: everything unreferenced is old enough.
    let now_ms = 4_000_000_000_000;
    let plan = gc_plan(&catalog, Duration::ZERO, now_ms).unwrap();
    let names: Vec<&str> = plan.delete.iter().map(|(o, _)| o.name.as_str()).collect();
    for name in FOREIGN {
        assert!(!names.contains(&name), "{name} planned for deletion");
    }
    for name in own_orphans() {
        assert!(
            names.contains(&name.as_str()),
            "{name} not planned: {names:?}"
        );
    }
}

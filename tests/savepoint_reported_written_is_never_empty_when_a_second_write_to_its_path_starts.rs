//! A savepoint `write_savepoint` reports written must be the savepoint, whatever another
//! write to the same path does meanwhile (a retried savepoint request while the first still
//! runs: one of them may fail, AlreadyExists, but an `Ok` must leave the file).
//!
//! `write_savepoint` creates its partial file (`create_new`) and then takes the partial's
//! lock by opening it again *by name* (`storage::try_lock`, `create(true)`). A second write
//! to the same path that removes "dead" partials (`remove_dead_partials`: lock free) between
//! those two opens unlinks the first writer's partial; the first writer's lock open then
//! creates a new, empty file under the partial name, the savepoint goes into the unlinked
//! inode, and `hard_link(partial, path)` links the empty file: `Ok`, and a 0-byte savepoint.
//!
//! The interleaving is made deterministic by holding opens (`open_gate`, Linux, root): the
//! first writer's `create_new` open is held while the second writer sweeps; the second
//! writer's own `create_new` is held until the first writer returned.

#[path = "open_gate/mod.rs"]
mod open_gate;

use std::path::{Path, PathBuf};
use std::time::Duration;

use open_gate::OpenGate;
use rockstate::{CodecId, KeyedBackend};

const PARTIAL: &str = ".sp.partial-";

fn backend(path: PathBuf, values: &[(u32, &str)]) -> KeyedBackend {
    let b = KeyedBackend::builder(path)
        .max_parallelism(8)
        .open()
        .unwrap();
    let s = b.raw_value_state("v", CodecId::new("raw", 1)).unwrap();
    for (k, v) in values {
        s.put(&k.to_be_bytes(), b"", v.as_bytes()).unwrap();
    }
    b.flush().unwrap();
    b
}

fn read_back(dir: &Path, sp: &Path) -> Result<Vec<Option<Vec<u8>>>, String> {
    let b = KeyedBackend::builder(dir.join("check"))
        .max_parallelism(8)
        .open()
        .unwrap();
    b.restore_savepoint(sp).map_err(|e| e.to_string())?;
    let s = b.raw_value_state("v", CodecId::new("raw", 1)).unwrap();
    Ok((0..4u32)
        .map(|k| s.get(&k.to_be_bytes(), b"").unwrap())
        .collect())
}

#[test]
fn savepoint_reported_written_holds_its_state_when_a_second_write_to_its_path_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let sps = tmp.path().join("sps");
    std::fs::create_dir(&sps).unwrap();
    let sp = sps.join("sp");
    let a = backend(
        tmp.path().join("a"),
        &[(0, "a0"), (1, "a1"), (2, "a2"), (3, "a3")],
    );
    let b = backend(
        tmp.path().join("b"),
        &[(0, "b0"), (1, "b1"), (2, "b2"), (3, "b3")],
    );

    let gate = OpenGate::watch(&sps);
    let wait = Duration::from_secs(120);
    let (ra, rb) = std::thread::scope(|s| {
        let ta = s.spawn(|| a.write_savepoint(&sp));
        let held_a = gate.hold_first("a creates its partial", wait, |n| n.starts_with(PARTIAL));
        let a_name = held_a.name().to_string();
        let tb = s.spawn(|| b.write_savepoint(&sp));
        // b's sweep opens a's partial (allowed), then b creates its own: held.
        let held_b = gate.hold_first("b creates its partial", wait, |n| {
            n.starts_with(PARTIAL) && n != a_name
        });
        held_a.allow();
        let pass = gate.pass_all();
        let ra = ta.join().unwrap();
        held_b.allow();
        let rb = tb.join().unwrap();
        drop(pass);
        (ra, rb)
    });

    let len = std::fs::metadata(&sp).map(|m| m.len());
    eprintln!("first write: {ra:?}\nsecond write: {rb:?}\nfile length: {len:?}");
    if let Ok(stats) = &ra {
        let back = read_back(tmp.path(), &sp);
        assert_eq!(
            back,
            Ok(["a0", "a1", "a2", "a3"]
                .iter()
                .map(|v| Some(v.as_bytes().to_vec()))
                .collect::<Vec<_>>()),
            "the first write returned Ok({stats:?}) but {} is not its savepoint \
             ({len:?} bytes); the second write returned {rb:?}",
            sp.display()
        );
    }
    if let Ok(stats) = &rb {
        let back = read_back(&tmp.path().join("b-check"), &sp);
        assert!(
            back.is_ok(),
            "second write Ok({stats:?}) but file unreadable: {back:?}"
        );
    }
    assert!(
        ra.is_ok() || rb.is_ok(),
        "neither write succeeded: {ra:?} {rb:?}"
    );
}

//! A database written with rockstate's default options (SST format_version 6) opens in another
//! RocksDB build: the `rocksdict` Python binding. `scripts/setup.sh` installs it; if python3 or
//! rocksdict is missing this test fails with that message instead of skipping.

use std::process::Command;

use rockstate::{CodecId, KeyedBackend};

#[test]
fn default_format_opens_in_rocksdict() {
    let dir = tempfile::tempdir().unwrap();
    let b = KeyedBackend::builder(dir.path()).open().unwrap();
    let v = b
        .raw_value_state("values", CodecId::new("bytes", 1))
        .unwrap();
    let l = b.raw_list_state("lists", CodecId::new("bytes", 1)).unwrap();
    for i in 0..1000u32 {
        v.put(&i.to_be_bytes(), b"", b"value").unwrap();
    }
    for i in 0..10u32 {
        l.add_all(&i.to_be_bytes(), b"ns", [&b"a"[..], b"b", b"c"])
            .unwrap();
    }
    b.close().unwrap();
    drop((v, l));

    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/compat/open_with_rocksdict.py"
    );
    let out = Command::new("python3")
        .arg(script)
        .arg(dir.path())
        .output()
        .expect("python3 must be installed (scripts/setup.sh installs it with rocksdict)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "rocksdict failed to open the database (is rocksdict installed? scripts/setup.sh does it)\nstdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.lines().any(|l| l == "state:values 1000"), "{stdout}");
    // Each `add_all` stores its three elements as one run entry (docs/decisions/0033).
    assert!(stdout.lines().any(|l| l == "state:lists 10"), "{stdout}");
}

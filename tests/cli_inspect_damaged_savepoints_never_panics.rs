//! `rockstate inspect <savepoint>` on the savepoint files an operator meets: every earlier
//! format version the reader accepts (1 to 4) is inspected (exit 0); a truncated file at any
//! length, or one with any single byte flipped, ends with exit 0 or 1 and one `error:` line
//! naming the file — never a panic, a signal or another exit code; `--json` output is valid JSON.

mod cli_fixture;

use std::path::PathBuf;

use cli_fixture::{rockstate, stderr, stdout};

fn corpus(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus/savepoint_decode")
        .join(name)
}

#[test]
fn inspect_reads_every_version_and_survives_every_truncation_and_flip() {
    for name in [
        "many_blocks.rssp",
        "many_blocks_v3.rssp",
        "many_blocks_v4.rssp",
        "continued_v4.rssp",
        "three_states.rssp",
        "empty.rssp",
    ] {
        let p = corpus(name);
        let o = rockstate(&["inspect", "--json", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(v["entries"].is_u64(), "{name}: {v}");
    }
    let src = std::fs::read(corpus("three_states_v4.rssp")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("sp.rssp");
    let mut failures = Vec::new();
    let mut check = |bytes: &[u8], what: String| {
        std::fs::write(&p, bytes).unwrap();
        let o = rockstate(&["inspect", "--json", p.to_str().unwrap()]);
        match o.status.code() {
            Some(0) => {
                if serde_json::from_slice::<serde_json::Value>(&o.stdout).is_err() {
                    failures.push(format!("{what}: invalid JSON {}", stdout(&o)));
                }
            }
            Some(1) => {
                let e = stderr(&o);
                if !e.starts_with("error:")
                    || e.trim_end().lines().count() != 1
                    || !e.contains("sp.rssp")
                {
                    failures.push(format!("{what}: {e}"));
                }
            }
            other => failures.push(format!("{what}: exit {other:?}: {}", stderr(&o))),
        }
    };
    for len in 0..src.len() {
        check(&src[..len], format!("truncated to {len}"));
    }
    for i in 0..src.len() {
        let mut b = src.clone();
        b[i] ^= 0x41;
        check(&b, format!("byte {i} flipped"));
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

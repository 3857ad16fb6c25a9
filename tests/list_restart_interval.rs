//! A list state's column family writes its SSTs with a restart point every 2 entries, every
//! other column family keeps RocksDB's 16 (docs/decisions/0041-list-restart-interval.md), on
//! a new backend and again after a reopen, as RocksDB's own OPTIONS file records them.

use std::path::Path;

use rockstate::{CodecId, KeyedBackend, StateDescriptor};

/// `block_restart_interval` of each column family in the newest OPTIONS file under `dir`.
fn restart_intervals(dir: &Path) -> Vec<(String, u32)> {
    let mut newest: Option<(u64, std::path::PathBuf)> = None;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            let Some(n) = name.strip_prefix("OPTIONS-").and_then(|n| n.parse().ok()) else {
                continue;
            };
            if newest.as_ref().is_none_or(|(m, _)| n > *m) {
                newest = Some((n, p));
            }
        }
    }
    let (_, path) = newest.expect("no OPTIONS file");
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    let mut section: Option<String> = None;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("[TableOptions/BlockBasedTable \"") {
            section = Some(rest.trim_end_matches("\"]").replace("\\:", ":"));
        } else if line.starts_with('[') {
            section = None;
        } else if let (Some(cf), Some(v)) = (&section, line.strip_prefix("block_restart_interval="))
        {
            out.push((cf.clone(), v.parse().unwrap()));
        }
    }
    out.sort();
    out
}

fn open_states(dir: &Path) -> KeyedBackend {
    let b = KeyedBackend::builder(dir).open().unwrap();
    let codec = CodecId::new("bytes", 1);
    let list = b
        .raw_list_state(StateDescriptor::new("l"), codec.clone())
        .unwrap();
    let value = b.raw_value_state(StateDescriptor::new("v"), codec).unwrap();
    list.add(b"k", b"", b"element").unwrap();
    value.put(b"k", b"", b"value").unwrap();
    b
}

#[test]
fn list_column_families_restart_every_two_entries_the_rest_every_sixteen() {
    let dir = tempfile::tempdir().unwrap();
    let expected = vec![
        ("default".to_string(), 16),
        ("state:l".to_string(), 2),
        ("state:v".to_string(), 16),
    ];
    let b = open_states(dir.path());
    assert_eq!(restart_intervals(dir.path()), expected);
    b.close().unwrap();
    // Reopened, RocksDB opens every column family with the shared options; registering the
    // list state sets its interval again.
    let b = open_states(dir.path());
    assert_eq!(restart_intervals(dir.path()), expected);
    b.close().unwrap();
}

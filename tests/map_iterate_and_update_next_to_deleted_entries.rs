//! A Flink user's commonest map pattern: iterate a key's map and update (or remove) the
//! entries met, through the same handle. When RocksDB's iterator gives up next to many deleted
//! entries (another key's removed map entries right after this key's range), the scan must go
//! on past them without failing: the entries it handed out changed by the caller's own
//! writes, and an error after those writes landed would make a retry apply them twice. The
//! heap backend iterates the same sequence; both must end with the same map.

use rockstate::keygroup::key_group_of;
use rockstate::{BackendKind, CodecId, DbOptions, KeyedBackend, RawMapState};

const M: u32 = 128;

/// Two ids whose keys sort `a` before `b` in the state (b's key group is larger).
fn two_ids() -> ([u8; 8], [u8; 8]) {
    let a = 1u64.to_be_bytes();
    let ga = key_group_of(&a, M);
    let b = (2u64..)
        .map(|i| i.to_be_bytes())
        .find(|b| key_group_of(b, M) > ga)
        .unwrap();
    (a, b)
}

fn run(kind: BackendKind, options: DbOptions, remove: bool) -> Result<(), String> {
    run_with(kind, options, remove, false)
}

/// `peek`: the callback also asks whether a third key's map is empty (a scan of the same
/// state, which drains the write cache holding the callback's write).
fn run_with(kind: BackendKind, options: DbOptions, remove: bool, peek: bool) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let backend = KeyedBackend::builder(dir.path())
        .kind(kind)
        .max_parallelism(M)
        .options(options)
        .open()
        .unwrap();
    let m: RawMapState = backend
        .raw_map_state("m", CodecId::new("bytes", 1))
        .unwrap();
    let (a, b) = two_ids();
    for k in [&b"k1"[..], b"k2", b"k3"] {
        m.put(&a, b"", k, &1u32.to_be_bytes()).unwrap();
    }
    for i in 0..300u32 {
        m.put(&b, b"", &i.to_be_bytes(), b"x").unwrap();
    }
    for i in 0..300u32 {
        m.remove(&b, b"", &i.to_be_bytes()).unwrap();
    }
    // Iterate a's map, incrementing (or removing) every entry through the same handle.
    let mut visited = 0;
    let r = m.for_each(&a, b"", |uk, v| {
        visited += 1;
        if remove {
            m.remove(&a, b"", uk)?;
        } else {
            let n = u32::from_be_bytes(v.try_into().unwrap());
            m.put(&a, b"", uk, &(n + 1).to_be_bytes())?;
        }
        if peek {
            m.is_empty(&9u64.to_be_bytes(), b"")?;
        }
        Ok(true)
    });
    let after = m.entries(&a, b"").unwrap();
    let want: Vec<(Vec<u8>, Vec<u8>)> = if remove {
        Vec::new()
    } else {
        [&b"k1"[..], b"k2", b"k3"]
            .iter()
            .map(|k| (k.to_vec(), 2u32.to_be_bytes().to_vec()))
            .collect()
    };
    if r.is_err() || visited != 3 || after != want {
        return Err(format!(
            "{kind:?} remove={remove}: for_each -> {r:?} after {visited} visits; map after: {after:?}"
        ));
    }
    Ok(())
}

#[test]
fn iterate_and_update_a_map_next_to_deleted_entries() {
    let mut failures = Vec::new();
    for remove in [false, true] {
        // The heap backend: the reference.
        if let Err(e) = run(BackendKind::Heap, DbOptions::default(), remove) {
            failures.push(e);
        }
        // WAL on: the write cache is off, the caller's writes reach RocksDB at once (as they
        // do when the budget's write-cache share is used up).
        let wal = DbOptions {
            wal: true,
            ..DbOptions::default()
        };
        if let Err(e) = run(BackendKind::RocksDb, wal, remove) {
            failures.push(format!("wal on: {e}"));
        }
        let tiny = DbOptions {
            write_cache_bytes: 1,
            ..DbOptions::default()
        };
        if let Err(e) = run(BackendKind::RocksDb, tiny, remove) {
            failures.push(format!("tiny write cache: {e}"));
        }
        // Default options: the callback's own read of another key's map drains its write.
        if let Err(e) = run_with(BackendKind::RocksDb, DbOptions::default(), remove, true) {
            failures.push(format!("default options, peeking: {e}"));
        }
        if let Err(e) = run_with(BackendKind::Heap, DbOptions::default(), remove, true) {
            failures.push(format!("heap, peeking: {e}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

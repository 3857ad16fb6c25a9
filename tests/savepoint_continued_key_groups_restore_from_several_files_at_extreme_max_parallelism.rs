//! Savepoints of key groups that continue over several blocks (format version 4), of several
//! states of which some are empty and some hold entries in a few key groups only, restore
//! exactly at max parallelism 32768 (two-byte key-group prefixes, the last group 32767) and 1
//! (one group), from several old instances' files into backends of other, partial ranges,
//! RocksDB and heap, and written from either.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rockstate::{BackendKind, CodecId, KeyGroupRange, KeyedBackend};

type Model = BTreeMap<(&'static str, Vec<u8>, Vec<u8>), Vec<u8>>;

fn big(i: u32) -> Vec<u8> {
    let mut x = u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..64 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b'a' + (x & 15) as u8
        })
        .collect()
}

fn open(kind: BackendKind, path: &Path, m: u32, range: KeyGroupRange) -> KeyedBackend {
    KeyedBackend::builder(path)
        .kind(kind)
        .max_parallelism(m)
        .key_groups(range)
        .open()
        .unwrap()
}

/// Fills the states of `b` (all its key groups' keys of `keys`), returns the model:
/// "big" holds 6.5 MiB under each of `big_keys` (maps: one key group over two blocks),
/// "small" a value per key, "empty" nothing, "sparse" a value for every 97th key only.
fn fill(b: &KeyedBackend, m: u32, keys: &[Vec<u8>], big_keys: &[Vec<u8>]) -> Model {
    let range = b.key_groups();
    let owns = |k: &[u8]| range.contains(rockstate::keygroup::key_group_of(k, m));
    let mut model = Model::new();
    let raw = || CodecId::new("raw", 1);
    let small = b.raw_value_state("small", raw()).unwrap();
    let _empty = b.raw_list_state("empty", raw()).unwrap();
    let bigm = b.raw_map_state("big", raw()).unwrap();
    let sparse = b.raw_value_state("sparse", raw()).unwrap();
    for (i, k) in keys.iter().enumerate().filter(|(_, k)| owns(k)) {
        let v = format!("small-{i}").into_bytes();
        small.put(k, b"", &v).unwrap();
        model.insert(("small", k.clone(), vec![]), v);
        if i % 97 == 0 {
            let v = format!("sparse-{i}").into_bytes();
            sparse.put(k, b"", &v).unwrap();
            model.insert(("sparse", k.clone(), vec![]), v);
        }
    }
    for k in big_keys.iter().filter(|k| owns(k)) {
        for u in 0..100u32 {
            let v = big(u);
            bigm.put(k, b"", &u.to_be_bytes(), &v).unwrap();
            model.insert(("big", k.clone(), u.to_be_bytes().to_vec()), v);
        }
    }
    model
}

/// Reads every owned entry of `model` from `b` and checks nothing else is there.
fn check(
    b: &KeyedBackend,
    m: u32,
    model: &Model,
    keys: &[Vec<u8>],
    big_keys: &[Vec<u8>],
    what: &str,
) {
    let range = b.key_groups();
    let owns = |k: &[u8]| range.contains(rockstate::keygroup::key_group_of(k, m));
    let raw = || CodecId::new("raw", 1);
    let small = b.raw_value_state("small", raw()).unwrap();
    let empty = b.raw_list_state("empty", raw()).unwrap();
    let bigm = b.raw_map_state("big", raw()).unwrap();
    let sparse = b.raw_value_state("sparse", raw()).unwrap();
    let mut bad = Vec::new();
    for k in keys.iter().filter(|k| owns(k)) {
        for (name, st) in [("small", &small), ("sparse", &sparse)] {
            let got = st.get(k, b"").unwrap();
            let want = model.get(&(name, k.clone(), vec![])).cloned();
            if got != want {
                bad.push(format!("{name} {:?}", String::from_utf8_lossy(k)));
            }
        }
        if !empty.get(k, b"").unwrap().is_empty() {
            bad.push("empty list not empty".into());
        }
    }
    for k in big_keys.iter().filter(|k| owns(k)) {
        let got: Vec<(Vec<u8>, Vec<u8>)> = bigm.entries(k, b"").unwrap();
        let want: Vec<(Vec<u8>, Vec<u8>)> = model
            .iter()
            .filter(|((n, kk, _), _)| *n == "big" && kk == k)
            .map(|((_, _, u), v)| (u.clone(), v.clone()))
            .collect();
        if got != want {
            bad.push(format!(
                "big map: {} entries, want {}",
                got.len(),
                want.len()
            ));
        }
    }
    assert!(bad.is_empty(), "{what}: {bad:?}");
}

fn scenario(m: u32, source_parallelism: u32, targets: &[u32]) {
    let dir = tempfile::tempdir().unwrap();
    let keys: Vec<Vec<u8>> = (0..3000u32)
        .map(|i| format!("key-{i}").into_bytes())
        .collect();
    // One heavy key per source instance (max parallelism 1: one).
    let mut big_keys = Vec::new();
    for i in 0..source_parallelism {
        let r = KeyGroupRange::for_operator(m, source_parallelism, i).unwrap();
        let k = (0u32..)
            .map(|j| format!("big-{j}").into_bytes())
            .find(|k| r.contains(rockstate::keygroup::key_group_of(k, m)))
            .unwrap();
        big_keys.push(k);
    }
    // The last key group too, when there are several.
    if m > 1 {
        let last = (0u32..)
            .map(|j| format!("last-{j}").into_bytes())
            .find(|k| rockstate::keygroup::key_group_of(k, m) == (m - 1) as u16)
            .unwrap();
        big_keys.push(last);
    }
    for source_kind in [BackendKind::RocksDb, BackendKind::Heap] {
        let mut model = Model::new();
        let mut files: Vec<PathBuf> = Vec::new();
        for i in 0..source_parallelism {
            let r = KeyGroupRange::for_operator(m, source_parallelism, i).unwrap();
            let src = open(
                source_kind,
                &dir.path().join(format!("src-{source_kind:?}-{i}")),
                m,
                r,
            );
            model.extend(fill(&src, m, &keys, &big_keys));
            let sp = dir.path().join(format!("sp-{source_kind:?}-{i}"));
            let stats = src.write_savepoint(&sp).unwrap();
            assert!(stats.blocks > 0);
            files.push(sp);
        }
        let paths: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
        for kind in [BackendKind::RocksDb, BackendKind::Heap] {
            for &p in targets {
                for i in 0..p {
                    let r = KeyGroupRange::for_operator(m, p, i).unwrap();
                    let what = format!(
                        "{source_kind:?} p{source_parallelism} -> {kind:?} p{p}/{i} (m {m})"
                    );
                    let b = open(
                        kind,
                        &dir.path().join(format!("{source_kind:?}-{kind:?}-{p}-{i}")),
                        m,
                        r,
                    );
                    b.restore_savepoints(&paths)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    check(&b, m, &model, &keys, &big_keys, &what);
                }
            }
        }
    }
}

#[test]
fn max_parallelism_32768_from_two_files_into_three() {
    scenario(32768, 2, &[3]);
}

#[test]
fn max_parallelism_1() {
    scenario(1, 1, &[1]);
}

//! Lists whose entries fill several 4 MiB savepoint blocks of one key group (format version
//! 4) keep their order through a savepoint, also restored at another parallelism, into the
//! heap, from the heap, and with a blindly updated head (RocksDB) whose replaced entries stay
//! out. Several lists share the key group, so one list ends and the next starts mid-block.

use std::collections::BTreeMap;
use std::path::Path;

use rockstate::{BackendKind, CodecId, KeyGroupRange, KeyedBackend, RawListState};

const M: u32 = 128;

/// `n` distinct keys of key group `g`.
fn keys_in(g: u16, n: usize) -> Vec<Vec<u8>> {
    (0u32..)
        .map(|i| format!("list-{i}").into_bytes())
        .filter(|k| rockstate::keygroup::key_group_of(k, M) == g)
        .take(n)
        .collect()
}

fn element(list: usize, i: u32) -> Vec<u8> {
    let mut e = format!("{list:02}-{i:07}-").into_bytes();
    e.resize(700, b'a' + (i % 26) as u8);
    e
}

/// Fills lists with add, add_all and update; returns what each must read.
fn fill(l: &RawListState, keys: &[Vec<u8>]) -> BTreeMap<Vec<u8>, Vec<Vec<u8>>> {
    let mut want = BTreeMap::new();
    for (n, k) in keys.iter().enumerate() {
        let mut expect: Vec<Vec<u8>> = Vec::new();
        // Entries the update replaces (dead once it wrote a head).
        let old: Vec<Vec<u8>> = (0..300).map(|i| element(99, i)).collect();
        l.add_all(k, b"ns", old.iter().map(|e| e.as_slice()))
            .unwrap();
        let first: Vec<Vec<u8>> = (0..200).map(|i| element(n, i)).collect();
        l.update(k, b"ns", first.iter().map(|e| e.as_slice()))
            .unwrap();
        expect.extend(first);
        let mut i = 200;
        while i < 9_000 {
            if i % 3 == 0 {
                let e = element(n, i);
                l.add(k, b"ns", &e).unwrap();
                expect.push(e);
                i += 1;
            } else {
                let batch: Vec<Vec<u8>> = (i..i + 150).map(|j| element(n, j)).collect();
                l.add_all(k, b"ns", batch.iter().map(|e| e.as_slice()))
                    .unwrap();
                expect.extend(batch);
                i += 150;
            }
        }
        want.insert(k.clone(), expect);
    }
    want
}

fn open(kind: BackendKind, path: &Path, range: KeyGroupRange) -> KeyedBackend {
    KeyedBackend::builder(path)
        .kind(kind)
        .max_parallelism(M)
        .key_groups(range)
        .open()
        .unwrap()
}

fn check(b: &KeyedBackend, want: &BTreeMap<Vec<u8>, Vec<Vec<u8>>>, what: &str) {
    let l = b.raw_list_state("l", CodecId::new("raw", 1)).unwrap();
    for (k, v) in want {
        let g = rockstate::keygroup::key_group_of(k, M);
        match l.get(k, b"ns") {
            Ok(got) => {
                assert_eq!(got.len(), v.len(), "{what}: list of key group {g}: length");
                let first_diff = got.iter().zip(v).position(|(a, b)| a != b);
                assert_eq!(first_diff, None, "{what}: list of key group {g}: order");
            }
            Err(e) => assert_eq!(e.kind(), rockstate::ErrorKind::InvalidInput, "{what}: {e}"),
        }
    }
}

#[test]
fn lists_spanning_blocks_keep_their_order_at_any_parallelism_and_backend() {
    let dir = tempfile::tempdir().unwrap();
    let all = KeyGroupRange::new(0, (M - 1) as u16).unwrap();
    // Three lists in key group 5 (~19 MiB raw together), one in 100.
    let mut keys = keys_in(5, 3);
    keys.extend(keys_in(100, 1));
    for source_kind in [BackendKind::RocksDb, BackendKind::Heap] {
        let tag = format!("{source_kind:?}");
        let src = open(source_kind, &dir.path().join(format!("src-{tag}")), all);
        let l = src.raw_list_state("l", CodecId::new("raw", 1)).unwrap();
        let want = fill(&l, &keys);
        check(&src, &want, "source");
        let sp = dir.path().join(format!("sp-{tag}"));
        let stats = src.write_savepoint(&sp).unwrap();
        assert!(stats.blocks >= 6, "{stats:?}");
        drop(l);
        drop(src);
        for kind in [BackendKind::RocksDb, BackendKind::Heap] {
            for p in [1u32, 2] {
                for i in 0..p {
                    let range = KeyGroupRange::for_operator(M, p, i).unwrap();
                    let b = open(
                        kind,
                        &dir.path().join(format!("{tag}-{kind:?}-{p}-{i}")),
                        range,
                    );
                    b.restore_savepoint(&sp).unwrap();
                    check(&b, &want, &format!("{tag} -> {kind:?} p{p}/{i}"));
                }
            }
        }
    }
}

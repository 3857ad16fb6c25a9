//! Differential test of the raw state API at its byte edges: empty keys, namespaces, user keys
//! and elements, keys that are prefixes of one another (`k`, `k\0`), namespaces `""`, `"\0"`,
//! `"\0\0"`, `"\xff"`, list elements around the 64 KiB run size. The same sequence runs on
//! RocksDB and on the heap, each checked against a `BTreeMap` model after every read.

use std::collections::BTreeMap;

use proptest::prelude::*;
use rockstate::{BackendKind, CodecId, KeyedBackend, RawListState, RawMapState, RawValueState};

const KEYS: [&[u8]; 3] = [b"", b"k", b"k\x00"];
const NSS: [&[u8]; 4] = [b"", b"\x00", b"\x00\x00", b"\xff"];
const UKS: [&[u8]; 5] = [b"", b"\x00", b"a", b"a\x00", b"\xff"];
const SIZES: [usize; 5] = [0, 1, 100, 40_000, 70_000];

#[derive(Debug, Clone)]
enum Op {
    VPut(usize, usize, usize),
    VGet(usize, usize),
    VClear(usize, usize),
    LAdd(usize, usize, usize),
    LAddAll(usize, usize, Vec<usize>),
    LUpdate(usize, usize, Vec<usize>),
    LGet(usize, usize),
    LClear(usize, usize),
    MPut(usize, usize, usize, usize),
    MRemove(usize, usize, usize),
    MEntries(usize, usize),
    MClear(usize, usize),
    Reopen,
    Compact,
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0..KEYS.len();
    let n = 0..NSS.len();
    let u = 0..UKS.len();
    let s = 0..SIZES.len();
    let ss = proptest::collection::vec(0..SIZES.len(), 0..4);
    prop_oneof![
        (k.clone(), n.clone(), s.clone()).prop_map(|(a, b, c)| Op::VPut(a, b, c)),
        (k.clone(), n.clone()).prop_map(|(a, b)| Op::VGet(a, b)),
        (k.clone(), n.clone()).prop_map(|(a, b)| Op::VClear(a, b)),
        (k.clone(), n.clone(), s.clone()).prop_map(|(a, b, c)| Op::LAdd(a, b, c)),
        (k.clone(), n.clone(), ss.clone()).prop_map(|(a, b, c)| Op::LAddAll(a, b, c)),
        (k.clone(), n.clone(), ss).prop_map(|(a, b, c)| Op::LUpdate(a, b, c)),
        (k.clone(), n.clone()).prop_map(|(a, b)| Op::LGet(a, b)),
        (k.clone(), n.clone()).prop_map(|(a, b)| Op::LClear(a, b)),
        (k.clone(), n.clone(), u.clone(), s).prop_map(|(a, b, c, d)| Op::MPut(a, b, c, d)),
        (k.clone(), n.clone(), u).prop_map(|(a, b, c)| Op::MRemove(a, b, c)),
        (k.clone(), n.clone()).prop_map(|(a, b)| Op::MEntries(a, b)),
        (k, n).prop_map(|(a, b)| Op::MClear(a, b)),
        Just(Op::Reopen),
        Just(Op::Compact),
    ]
}

/// A payload of `SIZES[s]` bytes, distinct per `tag`.
fn payload(s: usize, tag: u32) -> Vec<u8> {
    let mut v = vec![(tag % 251) as u8; SIZES[s]];
    if v.len() >= 4 {
        v[..4].copy_from_slice(&tag.to_be_bytes());
    }
    v
}

struct H {
    b: KeyedBackend,
    v: RawValueState,
    l: RawListState,
    m: RawMapState,
}

fn handles(b: KeyedBackend) -> H {
    let c = CodecId::new("bytes", 1);
    H {
        v: b.raw_value_state("v", c.clone()).unwrap(),
        l: b.raw_list_state("l", c.clone()).unwrap(),
        m: b.raw_map_state("m", c).unwrap(),
        b,
    }
}

fn run(ops: &[Op], kind: BackendKind) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let open = |p: &std::path::Path| {
        handles(
            KeyedBackend::builder(p)
                .kind(kind)
                .max_parallelism(128)
                .open()
                .unwrap(),
        )
    };
    let mut h = open(&path);
    let mut gen = 0;
    let mut vm: BTreeMap<(usize, usize), Vec<u8>> = BTreeMap::new();
    let mut lm: BTreeMap<(usize, usize), Vec<Vec<u8>>> = BTreeMap::new();
    let mut mm: BTreeMap<(usize, usize), BTreeMap<Vec<u8>, Vec<u8>>> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        let tag = i as u32;
        let ctx = format!("{kind:?} step {i} {op:?}");
        match op.clone() {
            Op::VPut(k, n, s) => {
                let p = payload(s, tag);
                h.v.put(KEYS[k], NSS[n], &p).unwrap();
                vm.insert((k, n), p);
            }
            Op::VGet(k, n) => assert_eq!(
                h.v.get(KEYS[k], NSS[n]).unwrap(),
                vm.get(&(k, n)).cloned(),
                "{ctx}"
            ),
            Op::VClear(k, n) => {
                h.v.clear(KEYS[k], NSS[n]).unwrap();
                vm.remove(&(k, n));
            }
            Op::LAdd(k, n, s) => {
                let p = payload(s, tag);
                h.l.add(KEYS[k], NSS[n], &p).unwrap();
                lm.entry((k, n)).or_default().push(p);
            }
            Op::LAddAll(k, n, ss) | Op::LUpdate(k, n, ss) => {
                let ps: Vec<Vec<u8>> = ss
                    .iter()
                    .enumerate()
                    .map(|(j, s)| payload(*s, tag * 8 + j as u32))
                    .collect();
                let it = ps.iter().map(Vec::as_slice);
                if let Op::LAddAll(..) = op {
                    h.l.add_all(KEYS[k], NSS[n], it).unwrap();
                    lm.entry((k, n)).or_default().extend(ps);
                } else {
                    h.l.update(KEYS[k], NSS[n], it).unwrap();
                    lm.insert((k, n), ps);
                }
            }
            Op::LGet(k, n) => {
                let got = h.l.get(KEYS[k], NSS[n]).unwrap();
                let want = lm.get(&(k, n)).cloned().unwrap_or_default();
                assert!(
                    got == want,
                    "{ctx}: lengths {:?} vs {:?}",
                    got.iter().map(Vec::len).collect::<Vec<_>>(),
                    want.iter().map(Vec::len).collect::<Vec<_>>()
                );
            }
            Op::LClear(k, n) => {
                h.l.clear(KEYS[k], NSS[n]).unwrap();
                lm.remove(&(k, n));
            }
            Op::MPut(k, n, u, s) => {
                let p = payload(s, tag);
                h.m.put(KEYS[k], NSS[n], UKS[u], &p).unwrap();
                mm.entry((k, n)).or_default().insert(UKS[u].to_vec(), p);
            }
            Op::MRemove(k, n, u) => {
                h.m.remove(KEYS[k], NSS[n], UKS[u]).unwrap();
                if let Some(x) = mm.get_mut(&(k, n)) {
                    x.remove(UKS[u]);
                }
            }
            Op::MEntries(k, n) => {
                let want: Vec<(Vec<u8>, Vec<u8>)> = mm
                    .get(&(k, n))
                    .map(|x| x.iter().map(|(a, b)| (a.clone(), b.clone())).collect())
                    .unwrap_or_default();
                let got = h.m.entries(KEYS[k], NSS[n]).unwrap();
                assert!(
                    got == want,
                    "{ctx}: keys {:?} vs {:?}",
                    got.iter().map(|e| &e.0).collect::<Vec<_>>(),
                    want.iter().map(|e| &e.0).collect::<Vec<_>>()
                );
                assert_eq!(
                    h.m.is_empty(KEYS[k], NSS[n]).unwrap(),
                    want.is_empty(),
                    "{ctx}"
                );
                for u in UKS {
                    assert_eq!(
                        h.m.get(KEYS[k], NSS[n], u).unwrap(),
                        mm.get(&(k, n)).and_then(|x| x.get(u)).cloned(),
                        "{ctx} get {u:?}"
                    );
                }
            }
            Op::MClear(k, n) => {
                h.m.clear(KEYS[k], NSS[n]).unwrap();
                mm.remove(&(k, n));
            }
            Op::Compact => {
                h.b.flush().unwrap();
                for s in ["v", "l", "m"] {
                    h.b.compact_state(s).unwrap();
                }
            }
            Op::Reopen => {
                if kind == BackendKind::Heap {
                    gen += 1;
                    let sp = dir.path().join(format!("sp-{gen}"));
                    h.b.write_savepoint(&sp).unwrap();
                    drop(h);
                    let fresh = KeyedBackend::heap_builder()
                        .max_parallelism(128)
                        .open()
                        .unwrap();
                    fresh.restore_savepoint(&sp).unwrap();
                    h = handles(fresh);
                } else {
                    h.b.clone().close().unwrap();
                    drop(h);
                    h = open(&path);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
    #[test]
    fn raw_edges_match_model_on_both_backends(ops in proptest::collection::vec(op(), 1..60)) {
        run(&ops, BackendKind::Heap);
        run(&ops, BackendKind::RocksDb);
    }
}

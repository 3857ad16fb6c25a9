//! A heap backend and a RocksDB backend run the same workload on TTL states of every kind
//! (namespaces, list runs from `add_all`, `update`, timestamps at several times, some entries
//! expired). Savepoints move state heap → RocksDB → heap; after each move the stored entries
//! (key, namespace, suffix — list entries by their position and run mark, since sequence
//! numbers are renumbered — and value bytes including the TTL timestamp) must be the same,
//! and the savepoints both backends write of the same state must restore to the same entries.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rockstate::{
    AggregateFunction, BackendKind, KeyedBackend, ManualClock, StateDescriptor, TtlConfig,
};

const M: u32 = 128;

struct Sum;
impl AggregateFunction for Sum {
    type In = u32;
    type Acc = u64;
    type Out = u64;
    fn create_accumulator(&self) -> u64 {
        0
    }
    fn add(&self, input: &u32, acc: &mut u64) {
        *acc += u64::from(*input);
    }
    fn result(&self, acc: &u64) -> u64 {
        *acc
    }
}

fn d(name: &str) -> StateDescriptor {
    StateDescriptor::new(name).with_ttl(TtlConfig::new(Duration::from_secs(10)))
}

const STATES: [&str; 5] = ["agg", "list", "map", "red", "val"];

struct Handles {
    v: rockstate::ValueState<u32, u8, u32>,
    l: rockstate::ListState<u32, u8, u32>,
    m: rockstate::MapState<u32, u8, u16, String>,
    r: rockstate::ReducingState<u32, u8, u32>,
    a: rockstate::AggregatingState<u32, u8, Sum>,
}

fn handles(b: &KeyedBackend) -> Handles {
    Handles {
        v: b.value_state(d("val")).unwrap(),
        l: b.list_state(d("list")).unwrap(),
        m: b.map_state(d("map")).unwrap(),
        r: b.reducing_state(d("red"), |a: &u32, b: &u32| a + b)
            .unwrap(),
        a: b.aggregating_state(d("agg"), Sum).unwrap(),
    }
}

/// Writes at the current time; `round` varies what is written.
fn workload(h: &Handles, round: u32) {
    for k in 0..60u32 {
        for ns in 0..2u8 {
            let s = k * 3 + u32::from(ns) + round * 1000;
            if !(k + round).is_multiple_of(3) {
                h.v.put(&k, &ns, &s).unwrap();
            }
            match (k + round) % 4 {
                0 => h.l.add(&k, &ns, &s).unwrap(),
                1 => h.l.add_all(&k, &ns, &[s, s + 1, s + 2]).unwrap(),
                2 => h.l.update(&k, &ns, &[s + 7, s + 8]).unwrap(),
                _ => {}
            }
            if !(k + round).is_multiple_of(5) {
                h.m.put(&k, &ns, &((s % 7) as u16), &format!("m{s}"))
                    .unwrap();
            }
            if k % 2 == 0 {
                h.r.add(&k, &ns, &s).unwrap();
                h.a.add(&k, &ns, &s).unwrap();
            }
        }
    }
}

type Dump = BTreeMap<String, Vec<(Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>)>>;

/// Every stored entry of every state, list sequence numbers replaced by their position.
fn dump(b: &KeyedBackend) -> Dump {
    let mut out = Dump::new();
    for name in STATES {
        let mut entries = Vec::new();
        let mut pos: BTreeMap<(Vec<u8>, Vec<u8>), u64> = BTreeMap::new();
        for g in 0..M as u16 {
            b.scan_key_group(name, g, |e| {
                let suffix = if name == "list" {
                    assert!(!e.suffix.is_empty(), "no list head expected here");
                    let p = pos
                        .entry((e.key.to_vec(), e.namespace.to_vec()))
                        .or_default();
                    *p += 1;
                    let mut s = p.to_be_bytes().to_vec();
                    s.extend_from_slice(&e.suffix[8..]);
                    s
                } else {
                    e.suffix.to_vec()
                };
                entries.push((
                    e.key.to_vec(),
                    e.namespace.to_vec(),
                    suffix,
                    e.value.to_vec(),
                ));
                Ok(true)
            })
            .unwrap();
        }
        out.insert(name.to_string(), entries);
    }
    out
}

#[track_caller]
fn assert_dumps(got: &Dump, want: &Dump, what: &str) {
    for name in STATES {
        let (g, w) = (&got[name], &want[name]);
        if let Some(i) = (0..g.len().max(w.len())).find(|&i| g.get(i) != w.get(i)) {
            panic!(
                "{what}: state {name}: entry {i} differs ({} vs {} entries): got {:?}, want {:?}",
                g.len(),
                w.len(),
                g.get(i),
                w.get(i)
            );
        }
    }
}

fn open(kind: BackendKind, path: &Path, clock: &ManualClock) -> KeyedBackend {
    KeyedBackend::builder(path)
        .kind(kind)
        .max_parallelism(M)
        .clock(Arc::new(clock.clone()))
        .open()
        .unwrap()
}

#[test]
fn ttl_state_of_every_kind_moves_heap_to_rocksdb_and_back_entry_by_entry() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let heap = open(BackendKind::Heap, &dir.path().join("h"), &clock);
    let rocks = open(BackendKind::RocksDb, &dir.path().join("r0"), &clock);
    let (hh, rh) = (handles(&heap), handles(&rocks));
    for round in 0..3 {
        workload(&hh, round);
        workload(&rh, round);
        clock.advance(Duration::from_secs(6)); // round 0 expires after round 2
    }
    // Savepoints of both (round 0's entries are expired: full-snapshot cleanup drops them).
    let sp_heap = dir.path().join("sp-heap");
    let sp_rocks = dir.path().join("sp-rocks");
    heap.write_savepoint(&sp_heap).unwrap();
    rocks.write_savepoint(&sp_rocks).unwrap();
    // heap → RocksDB
    let r1 = open(BackendKind::RocksDb, &dir.path().join("r1"), &clock);
    r1.restore_savepoint(&sp_heap).unwrap();
    let _ = handles(&r1);
    // rocks → heap
    let h1 = open(BackendKind::Heap, &dir.path().join("h1"), &clock);
    h1.restore_savepoint(&sp_rocks).unwrap();
    let _ = handles(&h1);
    // heap savepoint → heap
    let h2 = open(BackendKind::Heap, &dir.path().join("h2"), &clock);
    h2.restore_savepoint(&sp_heap).unwrap();
    let _ = handles(&h2);
    let want = dump(&h2);
    assert!(want["list"].len() > 50 && want["val"].len() > 50);
    assert_dumps(&dump(&r1), &want, "heap savepoint restored into RocksDB");
    assert_dumps(&dump(&h1), &want, "RocksDB savepoint restored into heap");
    // And back again: r1 → heap, h1 → RocksDB, with more writes on both first.
    let (r1h, h1h) = (handles(&r1), handles(&h1));
    workload(&r1h, 7);
    workload(&h1h, 7);
    clock.advance(Duration::from_secs(1));
    let sp_r1 = dir.path().join("sp-r1");
    let sp_h1 = dir.path().join("sp-h1");
    r1.write_savepoint(&sp_r1).unwrap();
    h1.write_savepoint(&sp_h1).unwrap();
    let h3 = open(BackendKind::Heap, &dir.path().join("h3"), &clock);
    h3.restore_savepoint(&sp_r1).unwrap();
    let _ = handles(&h3);
    let r3 = open(BackendKind::RocksDb, &dir.path().join("r3"), &clock);
    r3.restore_savepoint(&sp_h1).unwrap();
    let _ = handles(&r3);
    assert_dumps(&dump(&r3), &dump(&h3), "second round trip");
}

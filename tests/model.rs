//! Model-based test: random operation sequences over every state kind and namespace, checked
//! against in-memory models after every step, with close-and-reopen and full compactions in the
//! middle. Also checks invariant 7: every stored entry lives under the key group of its key's
//! hash.
//!
//! Runs against both backends. The heap backend keeps nothing across a close, so its "reopen"
//! carries the state through a savepoint into a fresh heap backend instead. The RocksDB
//! backend runs with its write cache off, tiny (drained every few writes, so reads meet
//! writes in both places) and at its default size (drained only by scans, compactions and
//! closes), with its value cache off, tiny (a few entries, evicting all the time) and at its
//! default size (larger than any run's state), and is also reopened after a drop without
//! `close`.

use std::collections::BTreeMap;

use proptest::prelude::*;
use rockstate::keygroup::key_group_of;
use rockstate::{
    AggregateFunction, AggregatingState, BackendKind, DbOptions, KeyedBackend, ListState, MapState,
    ReducingState, ValueCacheWrites, ValueState,
};

#[derive(Debug, Clone)]
enum Op {
    ValuePut(u8, u8, u32),
    ValueGet(u8, u8),
    ValueClear(u8, u8),
    ListAdd(u8, u8, u32),
    ListAddAll(u8, u8, Vec<u32>),
    ListUpdate(u8, u8, Vec<u32>),
    ListGet(u8, u8),
    ListClear(u8, u8),
    MapPut(u8, u8, u8, u32),
    MapGet(u8, u8, u8),
    MapContains(u8, u8, u8),
    MapRemove(u8, u8, u8),
    MapEntries(u8, u8),
    MapClear(u8, u8),
    ReduceAdd(u8, u8, u32),
    ReduceGet(u8, u8),
    AggAdd(u8, u8, u32),
    AggGet(u8, u8),
    AggClear(u8, u8),
    Reopen,
    /// Drop the backend without `close` and open it again (RocksDB; heap: as `Reopen`).
    DropAndReopen,
    /// Flush and compact every state fully (RocksDB: files cut at key-group boundaries, TTL
    /// filter run; heap: no-op).
    Compact,
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u8..6;
    let ns = 0u8..3;
    let uk = 0u8..5;
    let v = any::<u32>();
    let vs = proptest::collection::vec(any::<u32>(), 0..4);
    prop_oneof![
        (k.clone(), ns.clone(), v).prop_map(|(a, b, c)| Op::ValuePut(a, b, c)),
        (k.clone(), ns.clone()).prop_map(|(a, b)| Op::ValueGet(a, b)),
        (k.clone(), ns.clone()).prop_map(|(a, b)| Op::ValueClear(a, b)),
        (k.clone(), ns.clone(), v).prop_map(|(a, b, c)| Op::ListAdd(a, b, c)),
        (k.clone(), ns.clone(), vs.clone()).prop_map(|(a, b, c)| Op::ListAddAll(a, b, c)),
        (k.clone(), ns.clone(), vs).prop_map(|(a, b, c)| Op::ListUpdate(a, b, c)),
        (k.clone(), ns.clone()).prop_map(|(a, b)| Op::ListGet(a, b)),
        (k.clone(), ns.clone()).prop_map(|(a, b)| Op::ListClear(a, b)),
        (k.clone(), ns.clone(), uk.clone(), v).prop_map(|(a, b, c, d)| Op::MapPut(a, b, c, d)),
        (k.clone(), ns.clone(), uk.clone()).prop_map(|(a, b, c)| Op::MapGet(a, b, c)),
        (k.clone(), ns.clone(), uk.clone()).prop_map(|(a, b, c)| Op::MapContains(a, b, c)),
        (k.clone(), ns.clone(), uk).prop_map(|(a, b, c)| Op::MapRemove(a, b, c)),
        (k.clone(), ns.clone()).prop_map(|(a, b)| Op::MapEntries(a, b)),
        (k.clone(), ns.clone()).prop_map(|(a, b)| Op::MapClear(a, b)),
        (k.clone(), ns.clone(), v).prop_map(|(a, b, c)| Op::ReduceAdd(a, b, c)),
        (k.clone(), ns.clone()).prop_map(|(a, b)| Op::ReduceGet(a, b)),
        (k.clone(), ns.clone(), v).prop_map(|(a, b, c)| Op::AggAdd(a, b, c)),
        (k.clone(), ns.clone()).prop_map(|(a, b)| Op::AggGet(a, b)),
        (k, ns).prop_map(|(a, b)| Op::AggClear(a, b)),
        Just(Op::Reopen),
        Just(Op::DropAndReopen),
        Just(Op::Compact),
    ]
}

/// Average of u32 inputs, accumulated as (sum, count).
struct Avg;
impl AggregateFunction for Avg {
    type In = u32;
    type Acc = (u64, u64);
    type Out = u64;
    fn create_accumulator(&self) -> (u64, u64) {
        (0, 0)
    }
    fn add(&self, input: &u32, acc: &mut (u64, u64)) {
        acc.0 += u64::from(*input);
        acc.1 += 1;
    }
    fn result(&self, acc: &(u64, u64)) -> u64 {
        acc.0 / acc.1.max(1)
    }
}

type K = String;

struct Handles {
    backend: KeyedBackend,
    value: ValueState<K, u8, u32>,
    list: ListState<K, u8, u32>,
    map: MapState<K, u8, u8, u32>,
    reduce: ReducingState<K, u8, u32>,
    agg: AggregatingState<K, u8, Avg>,
}

/// The front caches a model run uses: write cache bytes, value cache bytes, what writes do
/// to the value cache.
#[derive(Debug, Clone, Copy)]
struct Caches(usize, usize, ValueCacheWrites);

fn open(path: &std::path::Path, kind: BackendKind, caches: Caches) -> Handles {
    handles(
        KeyedBackend::builder(path)
            .kind(kind)
            .max_parallelism(128)
            .options(DbOptions {
                write_cache_bytes: caches.0,
                value_cache_bytes: caches.1,
                value_cache_writes: caches.2,
                ..DbOptions::default()
            })
            .open()
            .unwrap(),
    )
}

fn handles(backend: KeyedBackend) -> Handles {
    Handles {
        value: backend.value_state("value").unwrap(),
        list: backend.list_state("list").unwrap(),
        map: backend.map_state("map").unwrap(),
        reduce: backend
            .reducing_state("reduce", |a: &u32, b: &u32| a.wrapping_add(*b))
            .unwrap(),
        agg: backend.aggregating_state("agg", Avg).unwrap(),
        backend,
    }
}

#[derive(Default)]
struct Model {
    value: BTreeMap<(u8, u8), u32>,
    list: BTreeMap<(u8, u8), Vec<u32>>,
    map: BTreeMap<(u8, u8), BTreeMap<u8, u32>>,
    reduce: BTreeMap<(u8, u8), u32>,
    agg: BTreeMap<(u8, u8), (u64, u64)>,
}

fn key(k: u8) -> String {
    format!("key-{k}")
}

fn run(ops: Vec<Op>, kind: BackendKind, caches: Caches) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut h = open(&path, kind, caches);
    let mut savepoints = 0;
    let mut m = Model::default();
    for op in ops {
        match op {
            Op::ValuePut(k, n, v) => {
                h.value.put(&key(k), &n, &v).unwrap();
                m.value.insert((k, n), v);
            }
            Op::ValueGet(k, n) => {
                assert_eq!(
                    h.value.get(&key(k), &n).unwrap(),
                    m.value.get(&(k, n)).copied()
                )
            }
            Op::ValueClear(k, n) => {
                h.value.clear(&key(k), &n).unwrap();
                m.value.remove(&(k, n));
            }
            Op::ListAdd(k, n, v) => {
                h.list.add(&key(k), &n, &v).unwrap();
                m.list.entry((k, n)).or_default().push(v);
            }
            Op::ListAddAll(k, n, vs) => {
                h.list.add_all(&key(k), &n, &vs).unwrap();
                m.list.entry((k, n)).or_default().extend(vs);
            }
            Op::ListUpdate(k, n, vs) => {
                h.list.update(&key(k), &n, &vs).unwrap();
                m.list.insert((k, n), vs);
            }
            Op::ListGet(k, n) => assert_eq!(
                h.list.get(&key(k), &n).unwrap(),
                m.list.get(&(k, n)).cloned().unwrap_or_default()
            ),
            Op::ListClear(k, n) => {
                h.list.clear(&key(k), &n).unwrap();
                m.list.remove(&(k, n));
            }
            Op::MapPut(k, n, uk, v) => {
                h.map.put(&key(k), &n, &uk, &v).unwrap();
                m.map.entry((k, n)).or_default().insert(uk, v);
            }
            Op::MapGet(k, n, uk) => assert_eq!(
                h.map.get(&key(k), &n, &uk).unwrap(),
                m.map.get(&(k, n)).and_then(|mm| mm.get(&uk)).copied()
            ),
            Op::MapContains(k, n, uk) => assert_eq!(
                h.map.contains(&key(k), &n, &uk).unwrap(),
                m.map.get(&(k, n)).is_some_and(|mm| mm.contains_key(&uk))
            ),
            Op::MapRemove(k, n, uk) => {
                h.map.remove(&key(k), &n, &uk).unwrap();
                if let Some(mm) = m.map.get_mut(&(k, n)) {
                    mm.remove(&uk);
                }
            }
            Op::MapEntries(k, n) => {
                // u8 user keys encode as one byte in postcard, so byte order is numeric order.
                let expected: Vec<(u8, u32)> = m
                    .map
                    .get(&(k, n))
                    .map(|mm| mm.iter().map(|(a, b)| (*a, *b)).collect())
                    .unwrap_or_default();
                assert_eq!(h.map.entries(&key(k), &n).unwrap(), expected);
                assert_eq!(h.map.is_empty(&key(k), &n).unwrap(), expected.is_empty());
            }
            Op::MapClear(k, n) => {
                h.map.clear(&key(k), &n).unwrap();
                m.map.remove(&(k, n));
            }
            Op::ReduceAdd(k, n, v) => {
                h.reduce.add(&key(k), &n, &v).unwrap();
                let e = m.reduce.entry((k, n)).or_insert(0);
                *e = e.wrapping_add(v);
            }
            Op::ReduceGet(k, n) => assert_eq!(
                h.reduce.get(&key(k), &n).unwrap(),
                m.reduce.get(&(k, n)).copied()
            ),
            Op::AggAdd(k, n, v) => {
                h.agg.add(&key(k), &n, &v).unwrap();
                let e = m.agg.entry((k, n)).or_insert((0, 0));
                e.0 += u64::from(v);
                e.1 += 1;
            }
            Op::AggGet(k, n) => assert_eq!(
                h.agg.get(&key(k), &n).unwrap(),
                m.agg.get(&(k, n)).map(|a| a.0 / a.1)
            ),
            Op::AggClear(k, n) => {
                h.agg.clear(&key(k), &n).unwrap();
                m.agg.remove(&(k, n));
            }
            Op::Reopen | Op::DropAndReopen if kind == BackendKind::Heap => {
                savepoints += 1;
                let sp = dir.path().join(format!("sp-{savepoints}"));
                h.backend.write_savepoint(&sp).unwrap();
                drop(h);
                let fresh = KeyedBackend::heap_builder().open().unwrap();
                fresh.restore_savepoint(&sp).unwrap();
                h = handles(fresh);
            }
            Op::Compact => {
                h.backend.flush().unwrap();
                for name in ["value", "list", "map", "reduce", "agg"] {
                    h.backend.compact_state(name).unwrap();
                }
            }
            Op::Reopen => {
                h.backend.clone().close().unwrap();
                drop(h);
                h = open(&path, kind, caches);
            }
            Op::DropAndReopen => {
                drop(h);
                h = open(&path, kind, caches);
            }
        }
    }
    // Full comparison at the end, through every read path.
    for k in 0..6u8 {
        for n in 0..3u8 {
            assert_eq!(
                h.value.get(&key(k), &n).unwrap(),
                m.value.get(&(k, n)).copied()
            );
            assert_eq!(
                h.list.get(&key(k), &n).unwrap(),
                m.list.get(&(k, n)).cloned().unwrap_or_default()
            );
        }
    }
    // Invariant 7: every entry sits under its key's group.
    for state in ["value", "list", "map", "reduce", "agg"] {
        let mut seen = 0;
        for g in 0..128u16 {
            h.backend
                .scan_key_group(state, g, |e| {
                    assert_eq!(e.key_group, g);
                    assert_eq!(key_group_of(e.key, 128), g);
                    seen += match (state, e.suffix.len()) {
                        // A list entry holds one element, or a run of them (`add_all` and
                        // `update` write one per call), each framed by its varint length.
                        ("list", 9) => run_elements(e.value),
                        // A list's head (a blind `update`, RocksDB): its sequence number, then
                        // a run. The reads above deleted the entries it made dead.
                        ("list", 0) => run_elements(&e.value[8..]),
                        _ => 1,
                    };
                    Ok(true)
                })
                .unwrap();
        }
        let expected: usize = match state {
            "value" => m.value.len(),
            "list" => m.list.values().map(Vec::len).sum(),
            "map" => m.map.values().map(BTreeMap::len).sum(),
            "reduce" => m.reduce.len(),
            _ => m.agg.len(),
        };
        assert_eq!(seen, expected, "entries of {state}");
    }
}

/// The elements of a list run (the value of a list entry whose key ends in the run mark).
fn run_elements(mut run: &[u8]) -> usize {
    let mut n = 0;
    while !run.is_empty() {
        let (len, used) = rockstate::codec::read_varint(run).unwrap();
        run = &run[used + len as usize..];
        n += 1;
    }
    n
}

const DEFAULT_CACHE: usize = 2 << 20;
const DEFAULT_VALUE_CACHE: usize = 128 << 20;

#[test]
fn default_cache_sizes_are_the_ones_tested() {
    assert_eq!(DbOptions::default().write_cache_bytes, DEFAULT_CACHE);
    assert_eq!(DbOptions::default().value_cache_bytes, DEFAULT_VALUE_CACHE);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn state_matches_model(
        ops in proptest::collection::vec(op(), 1..120),
        write_cache_bytes in prop_oneof![Just(0usize), Just(300), Just(DEFAULT_CACHE)],
        // Off, a few entries (evicting all the time), the default (far larger than any
        // model run's state).
        value_cache_bytes in prop_oneof![Just(0usize), Just(6000), Just(DEFAULT_VALUE_CACHE)],
        writes in prop_oneof![Just(ValueCacheWrites::Refresh), Just(ValueCacheWrites::Fill)],
    ) {
        run(ops, BackendKind::RocksDb, Caches(write_cache_bytes, value_cache_bytes, writes));
    }

    #[test]
    fn heap_state_matches_model(ops in proptest::collection::vec(op(), 1..120)) {
        // The heap backend has neither cache; the sizes are passed and ignored.
        run(
            ops,
            BackendKind::Heap,
            Caches(DEFAULT_CACHE, DEFAULT_VALUE_CACHE, ValueCacheWrites::Refresh),
        );
    }
}

//! Differential model test of TTL keyed state: the same random operation sequence (every state
//! kind, namespaces, clock advances, compactions, reopen, checkpoint and restore) runs on the
//! RocksDB backend and on the heap backend, each checked after every step against a
//! `BTreeMap` model of Flink's TTL semantics (`OnCreateAndWrite` or `OnReadAndWrite`,
//! `NeverReturnExpired`): an entry is expired iff `ts + ttl <= now`, reads never return one,
//! `OnReadAndWrite` reads refresh what they return.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use rockstate::ttl::UpdateType;
use rockstate::{
    AggregateFunction, AggregatingState, BackendKind, KeyedBackend, ListState, LocalStorage,
    ManualClock, MapState, ReducingState, RestoreFrom, StateDescriptor, TtlConfig, ValueState,
};

const TTL_MS: u64 = 100;

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
    MapIsEmpty(u8, u8),
    MapClear(u8, u8),
    ReduceAdd(u8, u8, u32),
    ReduceGet(u8, u8),
    ReduceClear(u8, u8),
    AggAdd(u8, u8, u32),
    AggGet(u8, u8),
    AggClear(u8, u8),
    Advance(u64),
    Compact,
    Reopen,
    CheckpointRestore,
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u8..4;
    let ns = 0u8..2;
    let uk = 0u8..4;
    let v = 0u32..1000;
    let vs = proptest::collection::vec(0u32..1000, 0..4);
    prop_oneof![
        (k.clone(), ns.clone(), v.clone()).prop_map(|(a, b, c)| Op::ValuePut(a, b, c)),
        (k.clone(), ns.clone()).prop_map(|(a, b)| Op::ValueGet(a, b)),
        (k.clone(), ns.clone()).prop_map(|(a, b)| Op::ValueClear(a, b)),
        (k.clone(), ns.clone(), v.clone()).prop_map(|(a, b, c)| Op::ListAdd(a, b, c)),
        (k.clone(), ns.clone(), vs.clone()).prop_map(|(a, b, c)| Op::ListAddAll(a, b, c)),
        (k.clone(), ns.clone(), vs).prop_map(|(a, b, c)| Op::ListUpdate(a, b, c)),
        (k.clone(), ns.clone()).prop_map(|(a, b)| Op::ListGet(a, b)),
        (k.clone(), ns.clone()).prop_map(|(a, b)| Op::ListClear(a, b)),
        (k.clone(), ns.clone(), uk.clone(), v.clone())
            .prop_map(|(a, b, c, d)| Op::MapPut(a, b, c, d)),
        (k.clone(), ns.clone(), uk.clone()).prop_map(|(a, b, c)| Op::MapGet(a, b, c)),
        (k.clone(), ns.clone(), uk.clone()).prop_map(|(a, b, c)| Op::MapContains(a, b, c)),
        (k.clone(), ns.clone(), uk).prop_map(|(a, b, c)| Op::MapRemove(a, b, c)),
        (k.clone(), ns.clone()).prop_map(|(a, b)| Op::MapEntries(a, b)),
        (k.clone(), ns.clone()).prop_map(|(a, b)| Op::MapIsEmpty(a, b)),
        (k.clone(), ns.clone()).prop_map(|(a, b)| Op::MapClear(a, b)),
        (k.clone(), ns.clone(), v.clone()).prop_map(|(a, b, c)| Op::ReduceAdd(a, b, c)),
        (k.clone(), ns.clone()).prop_map(|(a, b)| Op::ReduceGet(a, b)),
        (k.clone(), ns.clone()).prop_map(|(a, b)| Op::ReduceClear(a, b)),
        (k.clone(), ns.clone(), v).prop_map(|(a, b, c)| Op::AggAdd(a, b, c)),
        (k.clone(), ns.clone()).prop_map(|(a, b)| Op::AggGet(a, b)),
        (k, ns).prop_map(|(a, b)| Op::AggClear(a, b)),
        (0u64..70).prop_map(Op::Advance),
        (0u64..70).prop_map(Op::Advance),
        Just(Op::Compact),
        Just(Op::Reopen),
        Just(Op::CheckpointRestore),
    ]
}

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

type K = String;

struct Handles {
    backend: KeyedBackend,
    value: ValueState<K, u8, u32>,
    list: ListState<K, u8, u32>,
    map: MapState<K, u8, u8, u32>,
    reduce: ReducingState<K, u8, u32>,
    agg: AggregatingState<K, u8, Sum>,
}

fn desc(name: &str, update: UpdateType) -> StateDescriptor {
    let mut c = TtlConfig::new(Duration::from_millis(TTL_MS));
    c.update_type = update;
    StateDescriptor::new(name).with_ttl(c)
}

fn handles(backend: KeyedBackend, update: UpdateType) -> Handles {
    Handles {
        value: backend.value_state(desc("value", update)).unwrap(),
        list: backend.list_state(desc("list", update)).unwrap(),
        map: backend.map_state(desc("map", update)).unwrap(),
        reduce: backend
            .reducing_state(desc("reduce", update), |a: &u32, b: &u32| {
                a.wrapping_add(*b)
            })
            .unwrap(),
        agg: backend.aggregating_state(desc("agg", update), Sum).unwrap(),
        backend,
    }
}

fn key(k: u8) -> String {
    format!("key-{k}")
}

/// A model entry: payload and timestamp.
type E<T> = (T, u64);

#[derive(Default)]
struct Model {
    value: BTreeMap<(u8, u8), E<u32>>,
    list: BTreeMap<(u8, u8), Vec<E<u32>>>,
    map: BTreeMap<(u8, u8), BTreeMap<u8, E<u32>>>,
    reduce: BTreeMap<(u8, u8), E<u32>>,
    agg: BTreeMap<(u8, u8), E<u64>>,
}

fn live(ts: u64, now: u64) -> bool {
    ts + TTL_MS > now
}

/// A point read of `m[k]`: removes it when expired, refreshes it under `rw`.
fn read<T: Clone>(m: &mut BTreeMap<(u8, u8), E<T>>, k: (u8, u8), now: u64, rw: bool) -> Option<T> {
    match m.get_mut(&k) {
        Some((v, ts)) if live(*ts, now) => {
            if rw {
                *ts = now;
            }
            Some(v.clone())
        }
        Some(_) => {
            m.remove(&k);
            None
        }
        None => None,
    }
}

struct Env {
    dir: tempfile::TempDir,
    clock: ManualClock,
    kind: BackendKind,
    update: UpdateType,
    storage: Arc<LocalStorage>,
    generation: u32,
    checkpoint: u64,
}

impl Env {
    fn path(&self) -> std::path::PathBuf {
        self.dir.path().join(format!("db-{}", self.generation))
    }

    fn builder(&self, path: &Path) -> rockstate::BackendBuilder {
        let b = KeyedBackend::builder(path)
            .kind(self.kind)
            .max_parallelism(128)
            .clock(Arc::new(self.clock.clone()));
        match self.kind {
            BackendKind::RocksDb => b.checkpoint_storage(self.storage.clone()),
            _ => b,
        }
    }

    fn open(&self) -> Handles {
        handles(self.builder(&self.path()).open().unwrap(), self.update)
    }

    /// Close and open again (heap: through a savepoint into a fresh backend).
    fn reopen(&mut self, h: Handles) -> Handles {
        if self.kind == BackendKind::Heap {
            return self.through_savepoint(h);
        }
        h.backend.clone().close().unwrap();
        drop(h);
        self.open()
    }

    fn through_savepoint(&mut self, h: Handles) -> Handles {
        self.generation += 1;
        let sp = self.dir.path().join(format!("sp-{}", self.generation));
        h.backend.write_savepoint(&sp).unwrap();
        h.backend.clone().close().unwrap();
        drop(h);
        let fresh = self.builder(&self.path()).open().unwrap();
        fresh.restore_savepoint(&sp).unwrap();
        handles(fresh, self.update)
    }

    /// A checkpoint, then a restore of it into a new directory (heap: a savepoint).
    fn checkpoint_restore(&mut self, h: Handles) -> Handles {
        if self.kind == BackendKind::Heap {
            return self.through_savepoint(h);
        }
        self.checkpoint += 1;
        h.backend.checkpoint(self.checkpoint).unwrap();
        h.backend
            .notify_checkpoint_complete(self.checkpoint)
            .unwrap();
        h.backend.clone().close().unwrap();
        drop(h);
        self.generation += 1;
        let restored = self
            .builder(&self.path())
            .restore(RestoreFrom::Checkpoint(self.checkpoint))
            .unwrap();
        handles(restored, self.update)
    }
}

fn run(ops: &[Op], kind: BackendKind, update: UpdateType) {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(LocalStorage::new(dir.path().join("checkpoints")).unwrap());
    let mut env = Env {
        dir,
        clock: ManualClock::new(1_000),
        kind,
        update,
        storage,
        generation: 0,
        checkpoint: 0,
    };
    let rw = update == UpdateType::OnReadAndWrite;
    let mut h = env.open();
    let mut m = Model::default();
    for (step, op) in ops.iter().enumerate() {
        let now = env.clock.now_ms_for_test();
        let ctx = format!("{kind:?} {update:?} step {step} {op:?} at {now}");
        match op.clone() {
            Op::ValuePut(k, n, v) => {
                h.value.put(&key(k), &n, &v).unwrap();
                m.value.insert((k, n), (v, now));
            }
            Op::ValueGet(k, n) => {
                let want = read(&mut m.value, (k, n), now, rw);
                assert_eq!(h.value.get(&key(k), &n).unwrap(), want, "{ctx}");
            }
            Op::ValueClear(k, n) => {
                h.value.clear(&key(k), &n).unwrap();
                m.value.remove(&(k, n));
            }
            Op::ListAdd(k, n, v) => {
                h.list.add(&key(k), &n, &v).unwrap();
                m.list.entry((k, n)).or_default().push((v, now));
            }
            Op::ListAddAll(k, n, vs) => {
                h.list.add_all(&key(k), &n, &vs).unwrap();
                m.list
                    .entry((k, n))
                    .or_default()
                    .extend(vs.iter().map(|v| (*v, now)));
            }
            Op::ListUpdate(k, n, vs) => {
                h.list.update(&key(k), &n, &vs).unwrap();
                m.list
                    .insert((k, n), vs.iter().map(|v| (*v, now)).collect());
            }
            Op::ListGet(k, n) => {
                let l = m.list.entry((k, n)).or_default();
                l.retain(|(_, ts)| live(*ts, now));
                if rw {
                    for e in l.iter_mut() {
                        e.1 = now;
                    }
                }
                let want: Vec<u32> = l.iter().map(|e| e.0).collect();
                assert_eq!(h.list.get(&key(k), &n).unwrap(), want, "{ctx}");
            }
            Op::ListClear(k, n) => {
                h.list.clear(&key(k), &n).unwrap();
                m.list.remove(&(k, n));
            }
            Op::MapPut(k, n, uk, v) => {
                h.map.put(&key(k), &n, &uk, &v).unwrap();
                m.map.entry((k, n)).or_default().insert(uk, (v, now));
            }
            Op::MapGet(k, n, uk) | Op::MapContains(k, n, uk) => {
                let mm = m.map.entry((k, n)).or_default();
                let want = match mm.get_mut(&uk) {
                    Some((v, ts)) if live(*ts, now) => {
                        if rw {
                            *ts = now;
                        }
                        Some(*v)
                    }
                    Some(_) => {
                        mm.remove(&uk);
                        None
                    }
                    None => None,
                };
                if let Op::MapGet(..) = op {
                    assert_eq!(h.map.get(&key(k), &n, &uk).unwrap(), want, "{ctx}");
                } else {
                    assert_eq!(
                        h.map.contains(&key(k), &n, &uk).unwrap(),
                        want.is_some(),
                        "{ctx}"
                    );
                }
            }
            Op::MapRemove(k, n, uk) => {
                h.map.remove(&key(k), &n, &uk).unwrap();
                m.map.entry((k, n)).or_default().remove(&uk);
            }
            Op::MapEntries(k, n) => {
                let mm = m.map.entry((k, n)).or_default();
                mm.retain(|_, (_, ts)| live(*ts, now));
                if rw {
                    for e in mm.values_mut() {
                        e.1 = now;
                    }
                }
                let want: Vec<(u8, u32)> = mm.iter().map(|(a, b)| (*a, b.0)).collect();
                assert_eq!(h.map.entries(&key(k), &n).unwrap(), want, "{ctx}");
            }
            Op::MapIsEmpty(k, n) => {
                // Stops at the first live entry: expired ones before it are removed, it is
                // refreshed under `rw`.
                let mm = m.map.entry((k, n)).or_default();
                let mut empty = true;
                let keys: Vec<u8> = mm.keys().copied().collect();
                for uk in keys {
                    let e = mm.get_mut(&uk).unwrap();
                    if live(e.1, now) {
                        if rw {
                            e.1 = now;
                        }
                        empty = false;
                        break;
                    }
                    mm.remove(&uk);
                }
                assert_eq!(h.map.is_empty(&key(k), &n).unwrap(), empty, "{ctx}");
            }
            Op::MapClear(k, n) => {
                h.map.clear(&key(k), &n).unwrap();
                m.map.remove(&(k, n));
            }
            Op::ReduceAdd(k, n, v) => {
                h.reduce.add(&key(k), &n, &v).unwrap();
                let next = match read(&mut m.reduce, (k, n), now, rw) {
                    Some(cur) => cur.wrapping_add(v),
                    None => v,
                };
                m.reduce.insert((k, n), (next, now));
            }
            Op::ReduceGet(k, n) => {
                let want = read(&mut m.reduce, (k, n), now, rw);
                assert_eq!(h.reduce.get(&key(k), &n).unwrap(), want, "{ctx}");
            }
            Op::ReduceClear(k, n) => {
                h.reduce.clear(&key(k), &n).unwrap();
                m.reduce.remove(&(k, n));
            }
            Op::AggAdd(k, n, v) => {
                h.agg.add(&key(k), &n, &v).unwrap();
                let next = read(&mut m.agg, (k, n), now, rw).unwrap_or(0) + u64::from(v);
                m.agg.insert((k, n), (next, now));
            }
            Op::AggGet(k, n) => {
                let want = read(&mut m.agg, (k, n), now, rw);
                assert_eq!(h.agg.get(&key(k), &n).unwrap(), want, "{ctx}");
            }
            Op::AggClear(k, n) => {
                h.agg.clear(&key(k), &n).unwrap();
                m.agg.remove(&(k, n));
            }
            Op::Advance(ms) => env.clock.advance(Duration::from_millis(ms)),
            Op::Compact => {
                h.backend.flush().unwrap();
                for name in ["value", "list", "map", "reduce", "agg"] {
                    h.backend.compact_state(name).unwrap();
                }
            }
            Op::Reopen => h = env.reopen(h),
            Op::CheckpointRestore => h = env.checkpoint_restore(h),
        }
    }
    // Final full comparison through the non-refreshing view: advance nothing, read everything
    // (the model applies the same reads).
    let now = env.clock.now_ms_for_test();
    for k in 0..4u8 {
        for n in 0..2u8 {
            let want = read(&mut m.value, (k, n), now, rw);
            assert_eq!(
                h.value.get(&key(k), &n).unwrap(),
                want,
                "final value {k} {n}"
            );
            let l = m.list.entry((k, n)).or_default();
            l.retain(|(_, ts)| live(*ts, now));
            let want: Vec<u32> = l.iter().map(|e| e.0).collect();
            assert_eq!(h.list.get(&key(k), &n).unwrap(), want, "final list {k} {n}");
            let mm = m.map.entry((k, n)).or_default();
            mm.retain(|_, (_, ts)| live(*ts, now));
            let want: Vec<(u8, u32)> = mm.iter().map(|(a, b)| (*a, b.0)).collect();
            assert_eq!(
                h.map.entries(&key(k), &n).unwrap(),
                want,
                "final map {k} {n}"
            );
        }
    }
}

trait NowForTest {
    fn now_ms_for_test(&self) -> u64;
}

impl NowForTest for ManualClock {
    fn now_ms_for_test(&self) -> u64 {
        rockstate::Clock::now_ms(self)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn ttl_state_matches_model_on_both_backends(
        ops in proptest::collection::vec(op(), 1..100),
        rw in any::<bool>(),
    ) {
        let update = if rw { UpdateType::OnReadAndWrite } else { UpdateType::OnCreateAndWrite };
        run(&ops, BackendKind::Heap, update);
        run(&ops, BackendKind::RocksDb, update);
    }
}

//! Randomized differential test: several threads, each owning its own keys, drive the same
//! random operations (every state kind, two namespaces, TTL states and plain ones) against a
//! heap backend (with incremental TTL cleanup), a RocksDB backend and a model, checking every
//! read on the spot. Between phases the clock advances (so TTL entries expire) and a heap
//! `full_snapshot` taken while the threads run must hold a state that the model saw at some
//! point (it is checked against the final state of the keys no thread touched after it).
//! At the end, both backends' savepoints, restored crosswise, must read as the model.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rockstate::{BackendKind, Clock, KeyedBackend, ManualClock, StateDescriptor, TtlConfig};

const THREADS: u32 = 3;
const KEYS_PER_THREAD: u32 = 40;
const TTL_MS: u64 = 10_000;

#[derive(Clone)]
struct Handles {
    v: rockstate::ValueState<u32, u8, u32>,
    tv: rockstate::ValueState<u32, u8, u32>,
    l: rockstate::ListState<u32, u8, u32>,
    tl: rockstate::ListState<u32, u8, u32>,
    m: rockstate::MapState<u32, u8, u8, u32>,
    tm: rockstate::MapState<u32, u8, u8, u32>,
    r: rockstate::ReducingState<u32, u8, u32>,
}

fn ttl(name: &str) -> StateDescriptor {
    StateDescriptor::new(name).with_ttl(TtlConfig::new(Duration::from_millis(TTL_MS)))
}

fn handles(b: &KeyedBackend) -> Handles {
    Handles {
        v: b.value_state("v").unwrap(),
        tv: b.value_state(ttl("tv")).unwrap(),
        l: b.list_state("l").unwrap(),
        tl: b.list_state(ttl("tl")).unwrap(),
        m: b.map_state("m").unwrap(),
        tm: b.map_state(ttl("tm")).unwrap(),
        r: b.reducing_state("r", |a: &u32, b: &u32| a.wrapping_add(*b))
            .unwrap(),
    }
}

/// The model of one thread's keys: values with their write time (for TTL states).
#[derive(Default, Clone, Debug)]
struct Model {
    v: BTreeMap<(u32, u8), u32>,
    tv: BTreeMap<(u32, u8), (u32, u64)>,
    l: BTreeMap<(u32, u8), Vec<u32>>,
    tl: BTreeMap<(u32, u8), Vec<(u32, u64)>>,
    m: BTreeMap<(u32, u8), BTreeMap<u8, u32>>,
    tm: BTreeMap<(u32, u8), BTreeMap<u8, (u32, u64)>>,
    r: BTreeMap<(u32, u8), u32>,
}

fn live(ts: u64, now: u64) -> bool {
    ts + TTL_MS > now
}

impl Model {
    fn tv(&self, k: (u32, u8), now: u64) -> Option<u32> {
        self.tv
            .get(&k)
            .filter(|(_, t)| live(*t, now))
            .map(|(v, _)| *v)
    }
    fn tl(&self, k: (u32, u8), now: u64) -> Vec<u32> {
        self.tl
            .get(&k)
            .map(|xs| {
                xs.iter()
                    .filter(|(_, t)| live(*t, now))
                    .map(|(x, _)| *x)
                    .collect()
            })
            .unwrap_or_default()
    }
    fn tm(&self, k: (u32, u8), now: u64) -> Vec<(u8, u32)> {
        self.tm
            .get(&k)
            .map(|m| {
                m.iter()
                    .filter(|(_, (_, t))| live(*t, now))
                    .map(|(u, (v, _))| (*u, *v))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Checks every read of key `k` in `h` against the model at time `now`.
#[track_caller]
fn check(h: &Handles, model: &Model, k: (u32, u8), now: u64, what: &str) {
    let (key, ns) = k;
    assert_eq!(
        h.v.get(&key, &ns).unwrap(),
        model.v.get(&k).copied(),
        "{what} v {k:?}"
    );
    assert_eq!(
        h.tv.get(&key, &ns).unwrap(),
        model.tv(k, now),
        "{what} tv {k:?}"
    );
    assert_eq!(
        h.l.get(&key, &ns).unwrap(),
        model.l.get(&k).cloned().unwrap_or_default(),
        "{what} l {k:?}"
    );
    assert_eq!(
        h.tl.get(&key, &ns).unwrap(),
        model.tl(k, now),
        "{what} tl {k:?}"
    );
    assert_eq!(
        h.m.entries(&key, &ns).unwrap(),
        model
            .m
            .get(&k)
            .map(|m| m.iter().map(|(a, b)| (*a, *b)).collect::<Vec<_>>())
            .unwrap_or_default(),
        "{what} m {k:?}"
    );
    assert_eq!(
        h.tm.entries(&key, &ns).unwrap(),
        model.tm(k, now),
        "{what} tm {k:?}"
    );
    assert_eq!(
        h.r.get(&key, &ns).unwrap(),
        model.r.get(&k).copied(),
        "{what} r {k:?}"
    );
}

fn step(rng: &mut StdRng, hs: &[&Handles], model: &mut Model, keys: &[u32], now: u64) {
    let key = keys[rng.random_range(0..keys.len())];
    let ns = rng.random_range(0..2u8);
    let k = (key, ns);
    let x: u32 = rng.random_range(0..1000);
    let op = rng.random_range(0..16);
    for h in hs {
        match op {
            0 => h.v.put(&key, &ns, &x).unwrap(),
            1 => h.v.clear(&key, &ns).unwrap(),
            2 => h.tv.put(&key, &ns, &x).unwrap(),
            3 => h.tv.clear(&key, &ns).unwrap(),
            4 => h.l.add(&key, &ns, &x).unwrap(),
            5 => h.l.add_all(&key, &ns, &[x, x + 1]).unwrap(),
            6 => h.l.update(&key, &ns, &[x]).unwrap(),
            7 => h.tl.add(&key, &ns, &x).unwrap(),
            8 => h.tl.add_all(&key, &ns, &[x, x + 1, x + 2]).unwrap(),
            9 => h.tl.update(&key, &ns, &[x, x + 5]).unwrap(),
            10 => h.m.put(&key, &ns, &((x % 5) as u8), &x).unwrap(),
            11 => h.m.remove(&key, &ns, &((x % 5) as u8)).unwrap(),
            12 => h.tm.put(&key, &ns, &((x % 5) as u8), &x).unwrap(),
            13 => h.tm.clear(&key, &ns).unwrap(),
            14 => h.r.add(&key, &ns, &x).unwrap(),
            _ => h.tl.clear(&key, &ns).unwrap(),
        }
    }
    match op {
        0 => {
            model.v.insert(k, x);
        }
        1 => {
            model.v.remove(&k);
        }
        2 => {
            model.tv.insert(k, (x, now));
        }
        3 => {
            model.tv.remove(&k);
        }
        4 => model.l.entry(k).or_default().push(x),
        5 => model.l.entry(k).or_default().extend([x, x + 1]),
        6 => {
            model.l.insert(k, vec![x]);
        }
        7 => model.tl.entry(k).or_default().push((x, now)),
        8 => model
            .tl
            .entry(k)
            .or_default()
            .extend([(x, now), (x + 1, now), (x + 2, now)]),
        9 => {
            model.tl.insert(k, vec![(x, now), (x + 5, now)]);
        }
        10 => {
            model.m.entry(k).or_default().insert((x % 5) as u8, x);
        }
        11 => {
            if let Some(m) = model.m.get_mut(&k) {
                m.remove(&((x % 5) as u8));
            }
        }
        12 => {
            model
                .tm
                .entry(k)
                .or_default()
                .insert((x % 5) as u8, (x, now));
        }
        13 => {
            model.tm.remove(&k);
        }
        14 => {
            let r = model.r.entry(k).or_insert(0);
            *r = r.wrapping_add(x);
        }
        _ => {
            model.tl.remove(&k);
        }
    }
    // Reducing state: the first add stores x itself (0 + x here, the same).
    for (i, h) in hs.iter().enumerate() {
        check(h, model, k, now, if i == 0 { "heap" } else { "rocksdb" });
    }
}

#[test]
fn heap_and_rocksdb_agree_with_a_model_under_several_threads() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let heap = KeyedBackend::heap_builder()
        .clock(Arc::new(clock.clone()))
        .heap_incremental_cleanup(4)
        .open()
        .unwrap();
    let rocks = KeyedBackend::builder(dir.path().join("rocks"))
        .clock(Arc::new(clock.clone()))
        .open()
        .unwrap();
    let (hh, rh) = (handles(&heap), handles(&rocks));
    let mut models: Vec<Model> = vec![Model::default(); THREADS as usize];
    let seed: u64 = std::env::var("SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    for phase in 0..6u64 {
        let now = clock.now_ms();
        let snapper = {
            let heap = heap.clone();
            std::thread::spawn(move || {
                for _ in 0..20 {
                    drop(heap.full_snapshot().unwrap());
                }
            })
        };
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (hh, rh) = (hh.clone(), rh.clone());
                let mut model = models[t as usize].clone();
                std::thread::spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed * 1000 + phase * 10 + u64::from(t));
                    let keys: Vec<u32> = (0..KEYS_PER_THREAD).map(|i| i * THREADS + t).collect();
                    for _ in 0..400 {
                        step(&mut rng, &[&hh, &rh], &mut model, &keys, now);
                    }
                    model
                })
            })
            .collect();
        for (t, th) in threads.into_iter().enumerate() {
            models[t] = th.join().unwrap();
        }
        snapper.join().unwrap();
        clock.advance(Duration::from_millis(4_000));
    }
    // Savepoints restored crosswise read as the model.
    let now = clock.now_ms();
    let sp_h = dir.path().join("sp-heap");
    let sp_r = dir.path().join("sp-rocks");
    heap.write_savepoint(&sp_h).unwrap();
    rocks.write_savepoint(&sp_r).unwrap();
    let r2 = KeyedBackend::builder(dir.path().join("r2"))
        .clock(Arc::new(clock.clone()))
        .open()
        .unwrap();
    r2.restore_savepoint(&sp_h).unwrap();
    let h2 = KeyedBackend::heap_builder()
        .clock(Arc::new(clock.clone()))
        .open()
        .unwrap();
    h2.restore_savepoint(&sp_r).unwrap();
    assert_eq!(h2.kind(), BackendKind::Heap);
    let (h2h, r2h) = (handles(&h2), handles(&r2));
    for t in 0..THREADS {
        for i in 0..KEYS_PER_THREAD {
            for ns in 0..2 {
                let k = (i * THREADS + t, ns);
                check(
                    &r2h,
                    &models[t as usize],
                    k,
                    now,
                    "heap savepoint in RocksDB",
                );
                check(
                    &h2h,
                    &models[t as usize],
                    k,
                    now,
                    "RocksDB savepoint in heap",
                );
                check(&hh, &models[t as usize], k, now, "heap");
                check(&rh, &models[t as usize], k, now, "rocksdb");
            }
        }
    }
}

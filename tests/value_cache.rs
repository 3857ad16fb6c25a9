//! The value cache (`DbOptions::value_cache_bytes`): values recently read from RocksDB (and
//! written to it, `DbOptions::value_cache_writes`), served to later point reads. What a user must never notice: a read that returns an
//! older value than RocksDB holds, whichever thread reads, whenever the write cache drains,
//! however often entries are evicted. The model test (`tests/model.rs`) runs every state kind
//! with the value cache off, tiny and at its default size.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rockstate::{DbOptions, KeyedBackend, ValueCacheWrites};

fn open(
    path: &std::path::Path,
    write_cache_bytes: usize,
    wal: bool,
    value_cache_bytes: usize,
    value_cache_writes: ValueCacheWrites,
) -> KeyedBackend {
    KeyedBackend::builder(path)
        .options(DbOptions {
            write_cache_bytes,
            wal,
            value_cache_bytes,
            value_cache_writes,
            ..DbOptions::default()
        })
        .open()
        .unwrap()
}

/// Two readers and a writer on 64 keys whose values only grow: no reader may see a value go
/// back, and the writer's reads must match what it wrote.
fn race_readers_and_a_writer(backend: &KeyedBackend) {
    const KEYS: u32 = 64;
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2u64)
        .map(|r| {
            let (backend, done) = (backend.clone(), done.clone());
            std::thread::spawn(move || {
                let s = state(&backend);
                let mut rng = SmallRng::seed_from_u64(r);
                let mut last = [0u64; KEYS as usize];
                let mut reads = 0u64;
                while !done.load(Ordering::Acquire) || reads < 1000 {
                    let k = rng.random_range(0..KEYS);
                    let v = s.get(&k, &()).unwrap().unwrap_or(0);
                    assert!(
                        v >= last[k as usize],
                        "key {k}: {v} after {}",
                        last[k as usize]
                    );
                    last[k as usize] = v;
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    let s = state(backend);
    let mut truth = [0u64; KEYS as usize];
    let mut rng = SmallRng::seed_from_u64(99);
    for i in 1..=30_000u64 {
        let k = rng.random_range(0..KEYS);
        s.put(&k, &(), &i).unwrap();
        truth[k as usize] = i;
        let j = rng.random_range(0..KEYS);
        let want = (truth[j as usize] > 0).then_some(truth[j as usize]);
        assert_eq!(s.get(&j, &()).unwrap(), want, "key {j} after write {i}");
    }
    done.store(true, Ordering::Release);
    for r in readers {
        assert!(r.join().unwrap() >= 1000);
    }
    for k in 0..KEYS {
        let want = (truth[k as usize] > 0).then_some(truth[k as usize]);
        assert_eq!(s.get(&k, &()).unwrap(), want);
    }
}

#[test]
fn reads_race_drains_and_evictions_without_seeing_an_older_value() {
    for (write_cache, wal) in [(1000, false), (0, true)] {
        for writes in [ValueCacheWrites::Refresh, ValueCacheWrites::Fill] {
            let dir = tempfile::tempdir().unwrap();
            // At most 32 cached values among 64 keys (the smallest cache: a 64-slot index at
            // most half full): reads miss, go to RocksDB and record what they found while the
            // writer's drains (or write-through puts) change it.
            race_readers_and_a_writer(&open(dir.path(), write_cache, wal, 2 << 10, writes));
        }
    }
}

#[test]
fn reads_race_resizes_as_backends_open_and_close() {
    use rockstate::{MemoryBudget, MemoryBudgetConfig};
    for (write_cache, wal) in [(1000, false), (0, true)] {
        let dir = tempfile::tempdir().unwrap();
        // A quarter of 32 MiB for value caches: 8 MiB for the racing backend alone, half of
        // it while another is open, so every open and close empties its cache.
        let budget = MemoryBudget::new(MemoryBudgetConfig {
            total_bytes: 32 << 20,
            ..MemoryBudgetConfig::default()
        })
        .unwrap();
        let open_on_budget = |name: &str, write_cache_bytes, wal| {
            KeyedBackend::builder(dir.path().join(name))
                .options(DbOptions {
                    write_cache_bytes,
                    wal,
                    value_cache_bytes: 8 << 20,
                    ..DbOptions::default()
                })
                .memory_budget(budget.clone())
                .open()
                .unwrap()
        };
        let backend = open_on_budget("racing", write_cache, wal);
        let done = Arc::new(AtomicBool::new(false));
        let resizer = {
            let (done, budget, path) = (done.clone(), budget.clone(), dir.path().join("other"));
            std::thread::spawn(move || {
                let mut rounds = 0u32;
                while !done.load(Ordering::Acquire) || rounds < 5 {
                    let other = KeyedBackend::builder(&path)
                        .options(DbOptions {
                            value_cache_bytes: 8 << 20,
                            ..DbOptions::default()
                        })
                        .memory_budget(budget.clone())
                        .open()
                        .unwrap();
                    other.close().unwrap();
                    rounds += 1;
                }
                rounds
            })
        };
        race_readers_and_a_writer(&backend);
        done.store(true, Ordering::Release);
        assert!(resizer.join().unwrap() >= 5);
        assert_eq!(
            backend.metrics().unwrap().rocksdb.value_cache_limit_bytes,
            8 << 20,
            "alone again"
        );
    }
}

#[test]
fn written_and_read_values_are_cached_and_deleted_ones_dropped() {
    use rockstate::{MemoryBudget, MemoryBudgetConfig};
    let dir = tempfile::tempdir().unwrap();
    // A budget of its own: backends that other tests open on the process's budget would
    // resize (and so empty) this one's cache.
    let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
    let open = |path: &std::path::Path, value_cache_bytes, value_cache_writes| {
        KeyedBackend::builder(path)
            .options(DbOptions {
                value_cache_bytes,
                value_cache_writes,
                ..DbOptions::default()
            })
            .memory_budget(budget.clone())
            .open()
            .unwrap()
    };
    let entries = |b: &KeyedBackend| b.metrics().unwrap().rocksdb.value_cache_entries;
    for (value_cache, writes) in [
        (1 << 20, ValueCacheWrites::Fill),
        (1 << 20, ValueCacheWrites::Refresh),
        (0, ValueCacheWrites::Refresh),
    ] {
        let case = format!("{value_cache} bytes, {writes:?}");
        let path = dir.path().join(format!("v{value_cache}-{writes:?}"));
        let on = |n: u64| if value_cache > 0 { n } else { 0 };
        let filling = |n: u64| {
            if writes == ValueCacheWrites::Fill {
                on(n)
            } else {
                0
            }
        };
        let backend = open(&path, value_cache, writes);
        let s = state(&backend);
        let base = entries(&backend);
        for k in 0..100u32 {
            s.put(&k, &(), &u64::from(k)).unwrap();
        }
        // `metrics` drains the write cache, and the drain records what it wrote: new keys
        // only under `Fill`.
        assert_eq!(entries(&backend), base + filling(100), "{case}");
        drop(s);
        backend.close().unwrap();
        // A reopened backend starts empty; reads fill it.
        let backend = open(&path, value_cache, writes);
        let s = state(&backend);
        let base = entries(&backend);
        assert!(base < 10, "the metadata read at registration only");
        for k in 0..50u32 {
            assert_eq!(s.get(&k, &()).unwrap(), Some(u64::from(k)));
        }
        assert_eq!(entries(&backend), base + on(50), "{case}");
        // Writes of cached keys replace their entries; of other keys, add them under `Fill`.
        for k in 40..60u32 {
            s.put(&k, &(), &(u64::from(k) + 1000)).unwrap();
        }
        assert_eq!(entries(&backend), base + on(50) + filling(10), "{case}");
        for k in 40..60u32 {
            assert_eq!(s.get(&k, &()).unwrap(), Some(u64::from(k) + 1000), "{case}");
        }
        assert_eq!(entries(&backend), base + on(60), "{case}");
        // Deletes drop cached values; reads of absent keys add nothing.
        for k in 0..10u32 {
            s.clear(&k, &()).unwrap();
        }
        for k in 0..10u32 {
            assert_eq!(s.get(&k, &()).unwrap(), None);
        }
        assert_eq!(entries(&backend), base + on(50), "{case}");
        let m = backend.metrics().unwrap().rocksdb;
        assert_eq!(m.value_cache_limit_bytes, value_cache as u64);
        assert!(m.value_cache_bytes <= m.value_cache_limit_bytes);
        backend.close().unwrap();
    }
}

#[test]
fn a_closed_backend_can_be_reopened_while_others_open_and_close() {
    use rockstate::{MemoryBudget, MemoryBudgetConfig};
    // Each open and close resizes the other backends' value caches; that must never keep a
    // closed backend's database (and its directory lock) alive on another thread.
    let budget = MemoryBudget::new(MemoryBudgetConfig {
        total_bytes: 32 << 20,
        ..MemoryBudgetConfig::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let threads: Vec<_> = (0..3)
        .map(|t| {
            let (budget, path) = (budget.clone(), dir.path().join(format!("b{t}")));
            std::thread::spawn(move || {
                for round in 0..100u64 {
                    let b = KeyedBackend::builder(&path)
                        .memory_budget(budget.clone())
                        .open()
                        .unwrap();
                    let s = state(&b);
                    s.put(&1, &(), &round).unwrap();
                    assert_eq!(s.get(&1, &()).unwrap(), Some(round));
                    drop(s);
                    b.close().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// List entries stay out of the value cache: lists are read only by scans, which never look
/// there, so their runs would only take the room of values point reads find. Map entries,
/// which point reads (`get`, `contains`) do find, are cached.
#[test]
fn list_entries_stay_out_of_the_value_cache_and_map_entries_go_in() {
    use rockstate::{CodecId, MemoryBudget, MemoryBudgetConfig};
    let dir = tempfile::tempdir().unwrap();
    let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
    let backend = KeyedBackend::builder(dir.path())
        .options(DbOptions {
            value_cache_bytes: 1 << 20,
            // Every write would enter the cache, so only the list's exclusion keeps its
            // entries out.
            value_cache_writes: ValueCacheWrites::Fill,
            ..DbOptions::default()
        })
        .memory_budget(budget)
        .open()
        .unwrap();
    let entries = |b: &KeyedBackend| b.metrics().unwrap().rocksdb.value_cache_entries;
    let l = backend
        .raw_list_state("l", CodecId::new("bytes", 1))
        .unwrap();
    let m = backend
        .raw_map_state("m", CodecId::new("bytes", 1))
        .unwrap();
    // The first append reserves a block of list sequence numbers, persisting the high-water
    // mark in the backend's metadata (which is cached like any point-read value).
    l.add(b"first", b"", b"x").unwrap();
    let base = entries(&backend);
    for k in 0..100u32 {
        l.add(&k.to_be_bytes(), b"", b"one").unwrap();
        l.update(&k.to_be_bytes(), b"", [&b"a"[..], b"b"]).unwrap();
    }
    assert_eq!(entries(&backend), base, "list writes cached");
    for k in 0..100u32 {
        assert_eq!(l.get(&k.to_be_bytes(), b"").unwrap().len(), 2);
        m.put(&k.to_be_bytes(), b"", b"uk", b"v").unwrap();
    }
    assert_eq!(entries(&backend), base + 100, "map writes not cached");
}

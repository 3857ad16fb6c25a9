//! The value cache (`DbOptions::value_cache_bytes`): values recently read from RocksDB, kept
//! current by writes and served to later point reads. What a user must never notice: a read
//! that returns an older value than RocksDB holds, whichever thread reads, whenever the write
//! cache drains, however often entries are evicted. The model test (`tests/model.rs`) runs
//! every state kind with the value cache off (its default), tiny and large.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rockstate::{DbOptions, KeyedBackend};

fn open(
    path: &std::path::Path,
    write_cache_bytes: usize,
    wal: bool,
    value_cache_bytes: usize,
) -> KeyedBackend {
    KeyedBackend::builder(path)
        .options(DbOptions {
            write_cache_bytes,
            wal,
            value_cache_bytes,
            ..DbOptions::default()
        })
        .open()
        .unwrap()
}

#[test]
fn reads_race_drains_and_evictions_without_seeing_an_older_value() {
    const KEYS: u32 = 64;
    for (write_cache, wal) in [(1000, false), (0, true)] {
        let dir = tempfile::tempdir().unwrap();
        // About 30 cached values among 64 keys: reads miss, go to RocksDB and record what
        // they found while the writer's drains (or write-through puts) change it.
        let backend = open(dir.path(), write_cache, wal, 8 << 10);
        let done = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..2u64)
            .map(|r| {
                let (backend, done) = (backend.clone(), done.clone());
                std::thread::spawn(move || {
                    let s = state(&backend);
                    let mut rng = SmallRng::seed_from_u64(r);
                    // Values of a key only grow: a reader must never see one go back.
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
        // The writer knows every key's value: its own reads of other keys must match it.
        let s = state(&backend);
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
}

#[test]
fn stored_values_read_once_are_cached_and_written_ones_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let entries = |b: &KeyedBackend| b.metrics().unwrap().rocksdb.value_cache_entries;
    for value_cache in [1 << 20, 0] {
        let backend = open(
            &dir.path().join(format!("v{value_cache}")),
            2 << 20,
            false,
            value_cache,
        );
        let s = state(&backend);
        for k in 0..100u32 {
            s.put(&k, &(), &u64::from(k)).unwrap();
        }
        // `metrics` drains the write cache: only RocksDB holds the values now.
        assert_eq!(entries(&backend), 0);
        for k in 0..50u32 {
            assert_eq!(s.get(&k, &()).unwrap(), Some(u64::from(k)));
        }
        let want = if value_cache > 0 { 50 } else { 0 };
        assert_eq!(
            entries(&backend),
            want,
            "value cache of {value_cache} bytes"
        );
        // Deletes drop cached values; reads of absent keys add nothing.
        for k in 0..10u32 {
            s.clear(&k, &()).unwrap();
        }
        for k in 0..10u32 {
            assert_eq!(s.get(&k, &()).unwrap(), None);
        }
        assert_eq!(entries(&backend), want.saturating_sub(10));
        let m = backend.metrics().unwrap().rocksdb;
        assert_eq!(m.value_cache_limit_bytes, value_cache as u64);
        assert!(m.value_cache_bytes <= m.value_cache_limit_bytes);
        backend.close().unwrap();
    }
}

//! The write cache (`DbOptions::write_cache_bytes`): writes held in memory before they reach
//! RocksDB in sorted batches. What a user must never notice: a checkpoint taken while writes
//! sit in the cache holds them; a reader on another thread never loses sight of a write it
//! has seen (no moment where a key is in neither the cache nor RocksDB); with the WAL on,
//! every write is in the log when `put` returns (the cache is bypassed). The model test
//! (`tests/model.rs`) runs every state kind with the cache off, tiny and at its default size.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use common::*;
use rockstate::{CheckpointOptions, DbOptions, KeyedBackend, RestoreFrom};

#[test]
fn a_checkpoint_holds_writes_still_in_the_cache() {
    let fx = Fixture::new();
    let backend = KeyedBackend::builder(fx.path("a"))
        .options(DbOptions {
            write_cache_bytes: 64 << 20,
            ..DbOptions::default()
        })
        .checkpoint_storage(fx.storage_dyn())
        .checkpoint_options(CheckpointOptions::default())
        .open()
        .unwrap();
    let s = state(&backend);
    // The cache takes at most 1/8 of the 16 MiB memtable: 2 MiB. 2000 small writes stay far
    // below that, so none has reached RocksDB yet.
    for k in 0..2000u32 {
        s.put(&k, &(), &u64::from(k * 3)).unwrap();
    }
    for k in (0..2000u32).step_by(7) {
        s.clear(&k, &()).unwrap();
    }
    backend.checkpoint(1).unwrap();
    backend.notify_checkpoint_complete(1).unwrap();
    // Writes after the checkpoint must not show up in it.
    s.put(&1, &(), &999).unwrap();

    let restored = fx.restore("b", RestoreFrom::Latest).unwrap();
    let got = read_all(&restored);
    let want: Model = (0..2000u32)
        .filter(|k| k % 7 != 0)
        .map(|k| (k, u64::from(k * 3)))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn readers_on_other_threads_never_lose_a_write() {
    let dir = tempfile::tempdir().unwrap();
    // A cache of a few entries drains all the time, so readers race the drains.
    let backend = KeyedBackend::builder(dir.path())
        .options(DbOptions {
            write_cache_bytes: 1000,
            ..DbOptions::default()
        })
        .open()
        .unwrap();
    const N: u32 = 20_000;
    let written = Arc::new(AtomicU32::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (backend, written, done) = (backend.clone(), written.clone(), done.clone());
            std::thread::spawn(move || {
                let s = state(&backend);
                let mut checked = 0u64;
                let mut k: u32 = r;
                // Until the writer is done, and at least 1000 reads in any case (a reader that
                // starts late still reads every key back).
                while !done.load(Ordering::Acquire) || checked < 1000 {
                    // Every key below `seen` was written before this read started.
                    let seen = written.load(Ordering::Acquire);
                    if seen > 0 {
                        k = (k.wrapping_mul(2_654_435_761).wrapping_add(1)) % seen;
                        assert_eq!(s.get(&k, &()).unwrap(), Some(u64::from(k) + 1), "key {k}");
                        checked += 1;
                    }
                }
                checked
            })
        })
        .collect();
    let s = state(&backend);
    for k in 0..N {
        s.put(&k, &(), &(u64::from(k) + 1)).unwrap();
        written.store(k + 1, Ordering::Release);
    }
    done.store(true, Ordering::Release);
    for r in readers {
        assert!(r.join().unwrap() >= 1000);
    }
    for k in 0..N {
        assert_eq!(s.get(&k, &()).unwrap(), Some(u64::from(k) + 1));
    }
}

fn open_with_wal(path: &std::path::Path) -> KeyedBackend {
    KeyedBackend::builder(path)
        .options(DbOptions {
            wal: true,
            ..DbOptions::default()
        })
        .open()
        .unwrap()
}

#[test]
fn with_the_wal_on_a_write_is_logged_when_put_returns() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live");
    let backend = open_with_wal(&live);
    let s = state(&backend);
    for k in 0..100u32 {
        s.put(&k, &(), &u64::from(k)).unwrap();
    }
    // A crash image: the files as they are now, the process still running (nothing flushed,
    // nothing closed). Only the WAL can carry the writes into it.
    let image = dir.path().join("image");
    std::fs::create_dir(&image).unwrap();
    for entry in std::fs::read_dir(&live).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() == "LOCK" || !entry.file_type().unwrap().is_file() {
            continue;
        }
        match std::fs::copy(entry.path(), image.join(entry.file_name())) {
            // RocksDB may delete an obsolete file (an old OPTIONS file or log) meanwhile.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            other => {
                other.unwrap();
            }
        }
    }
    let recovered = open_with_wal(&image);
    let want: Model = (0..100u32).map(|k| (k, u64::from(k))).collect();
    assert_eq!(read_all(&recovered), want);
    drop(backend);
}

#[test]
fn a_read_may_write_from_inside_its_closure() {
    // `get_with` hands its closure a value found in the cache; the closure may write to the
    // same state (read-modify-write in place). Run on a thread so a deadlock fails the test
    // instead of hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let dir = tempfile::tempdir().unwrap();
        let backend = KeyedBackend::builder(dir.path()).open().unwrap();
        let s = backend
            .raw_value_state("raw", rockstate::CodecId::new("bytes", 1))
            .unwrap();
        s.put(b"k", &[], b"1").unwrap();
        let seen = s
            .get_with(b"k", &[], |v| {
                let seen = v.to_vec();
                s.put(b"k", &[], b"2")?;
                s.get(b"k", &[]).map(|now| (seen, now))
            })
            .unwrap();
        tx.send(seen).unwrap();
    });
    let seen = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("get_with with a writing closure deadlocked");
    assert_eq!(seen, Some((b"1".to_vec(), Some(b"2".to_vec()))));
}

#[test]
fn write_and_value_caches_come_out_of_the_memory_budget() {
    use rockstate::{MemoryBudget, MemoryBudgetConfig};
    const MIB: u64 = 1 << 20;
    // 64 MiB: the write caches share 8 MiB evenly, each backend taking at most the 2 MiB it
    // asks for; the value caches share 16 MiB evenly, each taking at most the 8 MiB it asks
    // for.
    let budget = MemoryBudget::new(MemoryBudgetConfig {
        total_bytes: 64 << 20,
        ..MemoryBudgetConfig::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let options = DbOptions {
        value_cache_bytes: 8 << 20,
        ..DbOptions::default()
    };
    let open = |i: u32, options: DbOptions| {
        KeyedBackend::builder(dir.path().join(format!("b{i}")))
            .options(options)
            .memory_budget(budget.clone())
            .open()
            .unwrap()
    };
    let figures = |b: &KeyedBackend| {
        let m = b.metrics().unwrap().rocksdb;
        (
            m.write_cache_limit_bytes,
            m.value_cache_limit_bytes,
            m.block_cache_capacity_bytes,
        )
    };
    let first = open(0, options.clone());
    assert_eq!(figures(&first), (2 * MIB, 8 * MIB, 54 * MIB));
    let entries = |b: &KeyedBackend| b.metrics().unwrap().rocksdb.value_cache_entries;
    let s = state(&first);
    let before = entries(&first);
    s.put(&1, &(), &7).unwrap();
    // `metrics` drains the write cache, so the read below finds the value in RocksDB.
    assert_eq!(entries(&first), before);
    assert_eq!(s.get(&1, &()).unwrap(), Some(7));
    assert_eq!(entries(&first), before + 1, "read, so cached");
    // A second and a third backend: each of the three gets a third of 16 MiB, and the first
    // one's cache starts over at its new size.
    let mut open_ones = vec![first];
    for i in 1..3u32 {
        open_ones.push(open(i, options.clone()));
    }
    let third = 16 * MIB / 3;
    for b in &open_ones {
        assert_eq!(figures(b), (2 * MIB, third, 64 * MIB - 6 * MIB - 3 * third));
    }
    assert_eq!(entries(&open_ones[0]), 0);
    assert_eq!(
        s.get(&1, &()).unwrap(),
        Some(7),
        "resized, not lost: RocksDB has it"
    );
    // One that asks for less gets that; with the WAL on, a backend takes no write cache, but
    // a value cache.
    let small = open(
        3,
        DbOptions {
            value_cache_bytes: MIB as usize,
            wal: true,
            ..options.clone()
        },
    );
    assert_eq!(figures(&small).0, 0);
    assert_eq!(figures(&small).1, MIB);
    assert_eq!(figures(&open_ones[0]).1, 4 * MIB);
    // Three write caches so far (the logged backend has none): a fourth fills their share,
    // and with a fifth all five share it, each cache's limit lowered (the first one's holds
    // a write above its new limit: it drains at its next write, and nothing is lost). Six
    // value caches share the quarter now.
    let fourth = open(4, options.clone());
    assert_eq!(figures(&fourth).0, 2 * MIB);
    s.put(&2, &(), &8).unwrap();
    let fifth = open(5, options.clone());
    assert_eq!(figures(&fifth).0, 8 * MIB / 5);
    assert_eq!(figures(&open_ones[0]).0, 8 * MIB / 5);
    assert_eq!(figures(&fifth).1, 16 * MIB / 6);
    assert_eq!(
        figures(&fifth).2,
        64 * MIB - 8 * MIB / 5 * 5 - 16 * MIB / 6 * 5 - MIB
    );
    assert_eq!(s.get(&2, &()).unwrap(), Some(8));
    let s5 = state(&fifth);
    s5.put(&1, &(), &7).unwrap();
    assert_eq!(s5.get(&1, &()).unwrap(), Some(7));
    // Closing gives the shares back; alone, the fifth has its 2 MiB and 8 MiB caps, and the
    // block cache the rest.
    open_ones.pop().unwrap().close().unwrap();
    assert_eq!(figures(&fifth).0, 2 * MIB);
    assert_eq!(figures(&fifth).1, 16 * MIB / 5);
    drop((s, open_ones, small, fourth));
    assert_eq!(figures(&fifth), (2 * MIB, 8 * MIB, 64 * MIB - 10 * MIB));
    drop((s5, fifth));
    let last = open(6, DbOptions::default());
    assert_eq!(
        figures(&last).1,
        16 * MIB,
        "alone: the whole quarter, below its cap"
    );
}

/// A scan never sees part of a batch: a drain writes the cache to RocksDB in several batches
/// of 64 KiB, and a list read on another thread used to build or refresh its iterator between
/// two of them, reading the head of a new list without its later runs. Each `update` here
/// replaces a list of 16 elements of 40 KiB (16 run entries, ten RocksDB batches when the
/// next write drains the cache), while three threads read the list.
#[test]
fn a_list_read_on_another_thread_sees_a_whole_update_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let backend = KeyedBackend::builder(dir.path())
        .options(DbOptions {
            write_cache_bytes: 4096,
            ..DbOptions::default()
        })
        .open()
        .unwrap();
    let codec = rockstate::CodecId::new("bytes", 1);
    let l = backend.raw_list_state("l", codec.clone()).unwrap();
    let other = backend.raw_value_state("o", codec).unwrap();
    // Element `i` of generation `g` starts with byte `g * 7 ^ i`.
    let list = |g: u8| -> Vec<Vec<u8>> {
        (0..16u8)
            .map(|i| vec![g.wrapping_mul(7) ^ i; 40 << 10])
            .collect()
    };
    l.update(b"k", &[], list(0).iter().map(Vec::as_slice))
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let torn = Arc::new(AtomicU32::new(0));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (l, done, torn) = (l.clone(), Arc::clone(&done), Arc::clone(&torn));
            std::thread::spawn(move || {
                while !done.load(Ordering::Acquire) {
                    let got = match l.get(b"k", &[]) {
                        Ok(got) => got,
                        // A kept iterator's give-up path meeting a change: read again.
                        Err(e) if e.kind() == rockstate::ErrorKind::Transient => continue,
                        Err(e) => panic!("{e}"),
                    };
                    let whole = got.len() == 16
                        && got
                            .iter()
                            .enumerate()
                            .all(|(i, e)| e[0] == got[0][0] ^ i as u8);
                    if !whole {
                        torn.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for round in 1..1000u32 {
        l.update(b"k", &[], list(round as u8).iter().map(Vec::as_slice))
            .unwrap();
        // Finds the cache full and drains the update.
        other.put(b"x", &[], &round.to_be_bytes()).unwrap();
        if torn.load(Ordering::Relaxed) > 0 {
            break;
        }
    }
    done.store(true, Ordering::Release);
    for r in readers {
        r.join().unwrap();
    }
    assert_eq!(
        torn.load(Ordering::Relaxed),
        0,
        "reads of part of an update"
    );
}

//! The heap backend: savepoints move state heap → RocksDB → heap at other parallelisms with
//! every state kind and namespaces; a copy-on-write snapshot sees exactly the state at snapshot
//! time while the task keeps writing; TTL cleanup on read, incremental and in full snapshots;
//! checkpoints are a typed `Unsupported`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rockstate::ttl::{UpdateType, Visibility};
use rockstate::{
    AggregateFunction, BackendKind, Error, KeyGroupRange, KeyedBackend, LocalStorage, ManualClock,
    StateDescriptor, TtlConfig,
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

/// Expected content, per key `key-<i>` and namespace.
#[derive(Default, Clone, PartialEq, Debug)]
struct Data {
    values: BTreeMap<(u32, u8), u32>,
    lists: BTreeMap<(u32, u8), Vec<u32>>,
    maps: BTreeMap<(u32, u8), BTreeMap<u16, String>>,
    sums: BTreeMap<(u32, u8), u32>,
    aggs: BTreeMap<(u32, u8), u64>,
}

fn key(i: u32) -> String {
    format!("key-{i}")
}

fn data(keys: u32) -> Data {
    let mut d = Data::default();
    for i in 0..keys {
        for ns in 0..2u8 {
            let s = i * 7 + u32::from(ns);
            d.values.insert((i, ns), s);
            if s % 4 != 0 {
                d.lists
                    .insert((i, ns), (0..(s % 4)).map(|j| s * 10 + j).collect());
            }
            if s % 3 != 0 && s % 5 != 0 {
                d.maps.insert(
                    (i, ns),
                    (0..(s % 5) as u16)
                        .map(|u| (u * 300, format!("v{s}-{u}")))
                        .collect(),
                );
            }
            d.sums.insert((i, ns), s + 1);
            d.aggs.insert((i, ns), u64::from(s) * 2);
        }
    }
    d
}

/// Asserts `got == want`, naming the first differing entry instead of printing everything.
#[track_caller]
fn assert_same(got: &Data, want: &Data, what: &str) {
    fn first<K: Ord + std::fmt::Debug + Copy, V: PartialEq + std::fmt::Debug>(
        got: &BTreeMap<K, V>,
        want: &BTreeMap<K, V>,
    ) -> Option<String> {
        got.keys()
            .chain(want.keys())
            .find(|k| got.get(k) != want.get(k))
            .map(|k| format!("{k:?}: got {:?}, want {:?}", got.get(k), want.get(k)))
    }
    let diff = first(&got.values, &want.values)
        .map(|d| format!("values {d}"))
        .or_else(|| first(&got.lists, &want.lists).map(|d| format!("lists {d}")))
        .or_else(|| first(&got.maps, &want.maps).map(|d| format!("maps {d}")))
        .or_else(|| first(&got.sums, &want.sums).map(|d| format!("sums {d}")))
        .or_else(|| first(&got.aggs, &want.aggs).map(|d| format!("aggs {d}")));
    if let Some(d) = diff {
        panic!("{what}: {d}");
    }
}

fn owned(d: &Data, range: KeyGroupRange) -> Data {
    let mine = |i: &u32| range.contains(rockstate::keygroup::key_group_of(&postcard_key(*i), M));
    Data {
        values: d
            .values
            .iter()
            .filter(|((i, _), _)| mine(i))
            .map(|(k, v)| (*k, *v))
            .collect(),
        lists: d
            .lists
            .iter()
            .filter(|((i, _), _)| mine(i))
            .map(|(k, v)| (*k, v.clone()))
            .collect(),
        maps: d
            .maps
            .iter()
            .filter(|((i, _), _)| mine(i))
            .map(|(k, v)| (*k, v.clone()))
            .collect(),
        sums: d
            .sums
            .iter()
            .filter(|((i, _), _)| mine(i))
            .map(|(k, v)| (*k, *v))
            .collect(),
        aggs: d
            .aggs
            .iter()
            .filter(|((i, _), _)| mine(i))
            .map(|(k, v)| (*k, *v))
            .collect(),
    }
}

/// The serialized form of `key(i)` (what the key group is computed from).
fn postcard_key(i: u32) -> Vec<u8> {
    let k = key(i);
    let mut out = vec![k.len() as u8];
    out.extend_from_slice(k.as_bytes());
    out
}

fn fill(b: &KeyedBackend, d: &Data) {
    let v = b.value_state::<String, u8, u32>("values").unwrap();
    let l = b.list_state::<String, u8, u32>("lists").unwrap();
    let m = b.map_state::<String, u8, u16, String>("maps").unwrap();
    let r = b
        .reducing_state::<String, u8, u32>("sums", |a, b| a + b)
        .unwrap();
    let a = b.aggregating_state::<String, u8, Sum>("aggs", Sum).unwrap();
    for ((i, ns), x) in &d.values {
        v.put(&key(*i), ns, x).unwrap();
    }
    for ((i, ns), xs) in &d.lists {
        for x in xs {
            l.add(&key(*i), ns, x).unwrap();
        }
    }
    for ((i, ns), mm) in &d.maps {
        for (uk, uv) in mm {
            m.put(&key(*i), ns, uk, uv).unwrap();
        }
    }
    for ((i, ns), x) in &d.sums {
        r.add(&key(*i), ns, &1).unwrap();
        r.add(&key(*i), ns, &(x - 1)).unwrap();
    }
    for ((i, ns), x) in &d.aggs {
        a.add(&key(*i), ns, &((*x / 2) as u32)).unwrap();
        a.add(&key(*i), ns, &((*x / 2) as u32)).unwrap();
    }
}

/// Reads every key `0..keys` through every state kind.
fn read(b: &KeyedBackend, keys: u32) -> Data {
    let v = b.value_state::<String, u8, u32>("values").unwrap();
    let l = b.list_state::<String, u8, u32>("lists").unwrap();
    let m = b.map_state::<String, u8, u16, String>("maps").unwrap();
    let r = b
        .reducing_state::<String, u8, u32>("sums", |a, b| a + b)
        .unwrap();
    let a = b.aggregating_state::<String, u8, Sum>("aggs", Sum).unwrap();
    let range = b.key_groups();
    let mut d = Data::default();
    for i in 0..keys {
        if !range.contains(rockstate::keygroup::key_group_of(&postcard_key(i), M)) {
            continue;
        }
        for ns in 0..2u8 {
            let k = key(i);
            if let Some(x) = v.get(&k, &ns).unwrap() {
                d.values.insert((i, ns), x);
            }
            let xs = l.get(&k, &ns).unwrap();
            if !xs.is_empty() {
                d.lists.insert((i, ns), xs);
            }
            let mm: BTreeMap<u16, String> = m.entries(&k, &ns).unwrap().into_iter().collect();
            if !mm.is_empty() {
                d.maps.insert((i, ns), mm);
            }
            if let Some(x) = r.get(&k, &ns).unwrap() {
                d.sums.insert((i, ns), x);
            }
            if let Some(x) = a.get(&k, &ns).unwrap() {
                d.aggs.insert((i, ns), x);
            }
        }
    }
    d
}

fn open(kind: BackendKind, path: PathBuf, range: KeyGroupRange) -> KeyedBackend {
    KeyedBackend::builder(path)
        .kind(kind)
        .max_parallelism(M)
        .key_groups(range)
        .open()
        .unwrap()
}

/// Savepoints every backend of `from` into `dir/<tag>-<i>`, then restores them at parallelism
/// `p` into fresh backends of `kind`, checking each against its share of `d`.
fn rescale(
    from: &[KeyedBackend],
    dir: &Path,
    tag: &str,
    kind: BackendKind,
    p: u32,
    d: &Data,
    keys: u32,
) -> Vec<KeyedBackend> {
    let paths: Vec<PathBuf> = from
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let path = dir.join(format!("{tag}-{i}"));
            b.write_savepoint(&path).unwrap();
            path
        })
        .collect();
    let refs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    (0..p)
        .map(|i| {
            let range = KeyGroupRange::for_operator(M, p, i).unwrap();
            let b = open(kind, dir.join(format!("{tag}-to-p{p}-{i}")), range);
            b.restore_savepoints(&refs).unwrap();
            assert_same(
                &read(&b, keys),
                &owned(d, range),
                &format!("{tag} → {kind:?} p={p} #{i}"),
            );
            b
        })
        .collect()
}

#[test]
fn savepoints_move_heap_to_rocksdb_and_back_at_other_parallelisms() {
    let dir = tempfile::tempdir().unwrap();
    let keys = 150;
    let d = data(keys);
    let heap2: Vec<KeyedBackend> = (0..2)
        .map(|i| {
            let range = KeyGroupRange::for_operator(M, 2, i).unwrap();
            let b = open(BackendKind::Heap, PathBuf::new(), range);
            assert_eq!(b.kind(), BackendKind::Heap);
            fill(&b, &owned(&d, range));
            assert_same(&read(&b, keys), &owned(&d, range), "filled");
            b
        })
        .collect();
    let rocks3 = rescale(
        &heap2,
        dir.path(),
        "heap2",
        BackendKind::RocksDb,
        3,
        &d,
        keys,
    );
    let heap1 = rescale(
        &rocks3,
        dir.path(),
        "rocks3",
        BackendKind::Heap,
        1,
        &d,
        keys,
    );
    assert_same(&read(&heap1[0], keys), &d, "all in one");
    // And once more to RocksDB at parallelism 2, then lists keep appending in order.
    let rocks2 = rescale(
        &heap1,
        dir.path(),
        "heap1",
        BackendKind::RocksDb,
        2,
        &d,
        keys,
    );
    let b = &rocks2[usize::from(
        !rocks2[0]
            .key_groups()
            .contains(rockstate::keygroup::key_group_of(&postcard_key(5), M)),
    )];
    let l = b.list_state::<String, u8, u32>("lists").unwrap();
    l.add(&key(5), &1, &777).unwrap();
    let mut expected = d.lists.get(&(5, 1)).cloned().unwrap_or_default();
    expected.push(777);
    assert_eq!(l.get(&key(5), &1).unwrap(), expected);
}

#[test]
fn restoring_overlapping_savepoints_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = KeyedBackend::heap_builder().open().unwrap();
    fill(&src, &data(10));
    let sp = dir.path().join("sp");
    src.write_savepoint(&sp).unwrap();
    let dst = KeyedBackend::heap_builder().open().unwrap();
    assert!(matches!(
        dst.restore_savepoints(&[&sp, &sp]),
        Err(Error::InvalidKeyGroups(_))
    ));
    assert!(dst.states().unwrap().is_empty(), "nothing was written");
}

#[test]
fn snapshot_sees_exactly_the_state_at_snapshot_time_while_the_task_writes() {
    let dir = tempfile::tempdir().unwrap();
    let keys = 400;
    let before = data(keys);
    let b = KeyedBackend::heap_builder().open().unwrap();
    fill(&b, &before);
    let snapshot = b.full_snapshot().unwrap();
    let sp = dir.path().join("sp");
    let writer = {
        let sp = sp.clone();
        std::thread::spawn(move || snapshot.write_savepoint(&sp, &Default::default()))
    };
    // The task keeps writing while the snapshot is serialized: overwrites, deletes, appends,
    // new keys, in every state kind.
    let v = b.value_state::<String, u8, u32>("values").unwrap();
    let l = b.list_state::<String, u8, u32>("lists").unwrap();
    let m = b.map_state::<String, u8, u16, String>("maps").unwrap();
    let r = b
        .reducing_state::<String, u8, u32>("sums", |a, b| a + b)
        .unwrap();
    let a = b.aggregating_state::<String, u8, Sum>("aggs", Sum).unwrap();
    let mut after = before.clone();
    for i in 0..keys + 50 {
        let k = key(i);
        v.put(&k, &0, &(i + 1_000_000)).unwrap();
        after.values.insert((i, 0), i + 1_000_000);
        v.clear(&k, &1).unwrap();
        after.values.remove(&(i, 1));
        l.add(&k, &0, &9).unwrap();
        after.lists.entry((i, 0)).or_default().push(9);
        m.clear(&k, &1).unwrap();
        after.maps.remove(&(i, 1));
        r.add(&k, &0, &1).unwrap();
        *after.sums.entry((i, 0)).or_insert(0) += 1;
        a.clear(&k, &1).unwrap();
        after.aggs.remove(&(i, 1));
    }
    let stats = writer.join().unwrap().unwrap();
    assert!(stats.entries > 0);
    assert_same(&read(&b, keys + 50), &after, "the task's writes all landed");
    let restored = KeyedBackend::heap_builder().open().unwrap();
    restored.restore_savepoint(&sp).unwrap();
    assert_same(
        &read(&restored, keys + 50),
        &before,
        "the snapshot holds exactly the state at snapshot time",
    );
}

fn ttl_desc(name: &str, update: UpdateType, visibility: Visibility) -> StateDescriptor {
    StateDescriptor::new(name).with_ttl(
        TtlConfig::new(Duration::from_secs(10))
            .update_type(update)
            .visibility(visibility),
    )
}

/// A heap backend on `clock` whose TTL-state accesses each examine `entries` more entries.
fn incremental_heap(clock: &ManualClock, entries: usize) -> KeyedBackend {
    KeyedBackend::heap_builder()
        .clock(Arc::new(clock.clone()))
        .heap_incremental_cleanup(entries)
        .open()
        .unwrap()
}

/// A TTL state of 10 s, refreshed on writes, expired entries never returned.
fn expiring(name: &str) -> StateDescriptor {
    ttl_desc(
        name,
        UpdateType::OnCreateAndWrite,
        Visibility::NeverReturnExpired,
    )
}

fn stored(b: &KeyedBackend, state: &str) -> usize {
    let mut n = 0;
    for g in 0..M as u16 {
        b.scan_key_group(state, g, |_| {
            n += 1;
            Ok(true)
        })
        .unwrap();
    }
    n
}

#[test]
fn heap_ttl_expires_lazily_on_read_and_in_full_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let b = KeyedBackend::heap_builder()
        .clock(Arc::new(clock.clone()))
        .open()
        .unwrap();
    let never = ttl_desc(
        "v",
        UpdateType::OnCreateAndWrite,
        Visibility::NeverReturnExpired,
    );
    let v = b.value_state::<u32, (), u32>(never.clone()).unwrap();
    let l = b
        .list_state::<u32, (), u32>(ttl_desc(
            "l",
            UpdateType::OnCreateAndWrite,
            Visibility::NeverReturnExpired,
        ))
        .unwrap();
    let touched = b
        .value_state::<u32, (), u32>(ttl_desc(
            "touched",
            UpdateType::OnReadAndWrite,
            Visibility::NeverReturnExpired,
        ))
        .unwrap();
    let visible = b
        .value_state::<u32, (), u32>(ttl_desc(
            "visible",
            UpdateType::OnCreateAndWrite,
            Visibility::ReturnExpiredIfNotCleanedUp,
        ))
        .unwrap();
    for i in 0..20 {
        v.put(&i, &(), &i).unwrap();
        l.add(&i, &(), &i).unwrap();
        touched.put(&i, &(), &i).unwrap();
        visible.put(&i, &(), &i).unwrap();
    }
    clock.advance(Duration::from_secs(6));
    for i in 0..20 {
        assert_eq!(
            touched.get(&i, &()).unwrap(),
            Some(i),
            "refreshes the timestamp"
        );
    }
    for i in 20..30 {
        v.put(&i, &(), &i).unwrap();
        l.add(&0, &(), &i).unwrap(); // key 0's list: 1 old element, 10 new
    }
    clock.advance(Duration::from_secs(6)); // keys 0..20 written 12 s ago: expired
                                           // Lazy cleanup: expired entries stay stored until read, then are removed.
    assert_eq!(stored(&b, "v"), 30);
    assert_eq!(v.get(&3, &()).unwrap(), None);
    assert_eq!(stored(&b, "v"), 29);
    assert_eq!(b.ttl_stats("v").unwrap().dropped_on_read, 1);
    assert_eq!(l.get(&0, &()).unwrap(), (20..30).collect::<Vec<_>>());
    assert_eq!(v.get(&25, &()).unwrap(), Some(25));
    assert_eq!(
        touched.get(&7, &()).unwrap(),
        Some(7),
        "read 6 s ago: alive"
    );
    assert_eq!(
        visible.get(&7, &()).unwrap(),
        Some(7),
        "expired but visible"
    );
    // Full-snapshot cleanup: the savepoint drops what expired, the live state keeps it.
    let snapshot = b.full_snapshot().unwrap();
    clock.advance(Duration::from_secs(60)); // judged at snapshot time, not write time
    let sp = dir.path().join("sp");
    let stats = snapshot.write_savepoint(&sp, &Default::default()).unwrap();
    // v: 10 live of 29 stored; l: key 0's 10 new elements; touched: 20; visible: 0.
    assert_eq!(stats.entries, 10 + 10 + 20);
    assert_eq!(stored(&b, "v"), 29, "the backend itself is not cleaned");
    let dst = KeyedBackend::heap_builder()
        .clock(Arc::new(ManualClock::new(13_000)))
        .open()
        .unwrap();
    dst.restore_savepoint(&sp).unwrap();
    let v2 = dst.value_state::<u32, (), u32>(never).unwrap();
    assert_eq!(v2.get(&25, &()).unwrap(), Some(25));
    assert_eq!(v2.get(&3, &()).unwrap(), None);
}

#[test]
fn heap_checkpoints_and_rocksdb_full_snapshots_are_unsupported() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(LocalStorage::new(dir.path().join("cp")).unwrap());
    assert!(matches!(
        KeyedBackend::heap_builder()
            .checkpoint_storage(storage.clone())
            .open(),
        Err(Error::Unsupported(_))
    ));
    assert!(matches!(
        KeyedBackend::heap_builder()
            .checkpoint_storage(storage)
            .restore(rockstate::RestoreFrom::Latest),
        Err(Error::Unsupported(_))
    ));
    let heap = KeyedBackend::heap_builder().open().unwrap();
    assert!(matches!(heap.snapshot(1), Err(Error::Unsupported(_))));
    let rocks = KeyedBackend::builder(dir.path().join("db")).open().unwrap();
    assert!(matches!(rocks.full_snapshot(), Err(Error::Unsupported(_))));
}

#[test]
fn heap_incremental_cleanup_removes_expired_entries_nobody_reads() {
    let run = |entries: usize| {
        let clock = ManualClock::new(0);
        let b = incremental_heap(&clock, entries);
        let v = b.value_state::<u32, (), u32>(expiring("v")).unwrap();
        let plain = b.value_state::<u32, (), u32>("plain").unwrap();
        for i in 0..20 {
            v.put(&i, &(), &i).unwrap();
            plain.put(&i, &(), &i).unwrap();
        }
        clock.advance(Duration::from_secs(11)); // all 20 expired, none is read again
        for _ in 0..10 {
            v.put(&100, &(), &1).unwrap(); // each access examines `entries` more entries
        }
        (
            stored(&b, "v"),
            b.ttl_stats("v").unwrap(),
            stored(&b, "plain"),
        )
    };
    let (left, stats, plain) = run(5);
    assert_eq!(left, 1, "only the live entry is left");
    assert_eq!(stats.dropped_incrementally, 20);
    assert_eq!(stats.dropped_on_read, 0);
    assert_eq!(plain, 20, "states without TTL are untouched");
    let (left, stats, _) = run(0);
    assert_eq!(left, 21, "off: nothing removed");
    assert_eq!(stats.dropped_incrementally, 0);
    assert!(matches!(
        KeyedBackend::builder(tempfile::tempdir().unwrap().path())
            .heap_incremental_cleanup(5)
            .open(),
        Err(Error::InvalidOption { .. })
    ));
}

/// Reads of lists and maps, a list's `add_all` and `update` and a `clear` are state accesses
/// too: a state only ever used through them still has its expired entries of other keys
/// removed step by step.
#[test]
fn heap_incremental_cleanup_runs_on_list_and_map_reads() {
    let run = |reads: usize, batches: usize| {
        let clock = ManualClock::new(0);
        let b = incremental_heap(&clock, 5);
        let l = b.list_state::<u32, (), u32>(expiring("l")).unwrap();
        let m = b.map_state::<u32, (), u32, u32>(expiring("m")).unwrap();
        for i in 0..20 {
            l.add(&i, &(), &i).unwrap();
            m.put(&i, &(), &i, &i).unwrap();
        }
        clock.advance(Duration::from_secs(11)); // all expired; nobody reads those keys again
        l.add(&100, &(), &1).unwrap();
        m.put(&100, &(), &1, &1).unwrap();
        for _ in 0..reads {
            assert_eq!(l.get(&100, &()).unwrap(), vec![1]);
            assert_eq!(m.entries(&100, &()).unwrap(), vec![(1, 1)]);
        }
        for i in 0..batches {
            // Two entries apart from key 100's: `clear` of a key without entries.
            match i % 3 {
                0 => l.add_all(&100, &(), &[1]).unwrap(),
                1 => l.update(&100, &(), &[1]).unwrap(),
                _ => m.clear(&(200 + i as u32), &()).unwrap(),
            }
            l.clear(&(300 + i as u32), &()).unwrap();
        }
        (stored(&b, "l"), stored(&b, "m"))
    };
    let (list, map) = run(0, 0);
    assert!(list > 1 && map > 1, "the writes alone examined every entry");
    assert_eq!(run(10, 0), (1, 1), "reads left expired entries");
    let (list, map) = run(0, 24);
    assert!(
        list <= 3,
        "add_all, update and clear left {list} list entries"
    );
    assert_eq!(map, 1, "clear left expired map entries");
}

/// A value's `clear` and a map's `remove` are state accesses too (Flink's TTL states run their
/// incremental cleanup on them): a state only cleared or removed from still loses the expired
/// entries of keys nobody touches again.
#[test]
fn heap_incremental_cleanup_runs_on_value_clear_and_map_remove() {
    let run = |accesses: usize| {
        let clock = ManualClock::new(0);
        let b = incremental_heap(&clock, 5);
        let v = b.value_state::<u32, (), u32>(expiring("v")).unwrap();
        let m = b.map_state::<u32, (), u32, u32>(expiring("m")).unwrap();
        for i in 0..20 {
            v.put(&i, &(), &i).unwrap();
            m.put(&i, &(), &i, &i).unwrap();
        }
        clock.advance(Duration::from_secs(11)); // all expired; nobody touches those keys again
        for i in 0..accesses as u32 {
            // Keys the states never held: the accesses remove nothing themselves.
            v.clear(&(100 + i), &()).unwrap();
            m.remove(&(100 + i), &(), &1).unwrap();
        }
        (stored(&b, "v"), stored(&b, "m"))
    };
    assert_eq!(run(0), (20, 20), "nothing examined without accesses");
    assert_eq!(run(8), (0, 0), "clears and removes left expired entries");
}

//! State TTL with an injected clock (no sleeps): every update type × visibility for every state
//! kind, compaction-filter cleanup checked on the raw column family, lists with mixed expired
//! and live elements, periodic compaction reaching RocksDB, clock refresh every N entries,
//! event time, counters, and TTL on/off as a registration error. The tests that do not
//! depend on RocksDB's compaction filter run against the heap backend too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rockstate::ttl::{Cleanup, TimeDomain, UpdateType, Visibility};
use rockstate::{
    AggregateFunction, BackendKind, Clock, DbOptions, Error, KeyedBackend, ManualClock,
    StateDescriptor, TtlConfig,
};

const TTL: Duration = Duration::from_millis(1000);

/// A manual clock that counts how often it is read.
#[derive(Debug, Clone, Default)]
struct CountingClock {
    time: ManualClock,
    reads: Arc<AtomicU64>,
}

impl Clock for CountingClock {
    fn now_ms(&self) -> u64 {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.time.now_ms()
    }
}

fn open(dir: &std::path::Path, clock: &ManualClock) -> KeyedBackend {
    open_kind(dir, clock, BackendKind::RocksDb)
}

fn open_kind(dir: &std::path::Path, clock: &ManualClock, kind: BackendKind) -> KeyedBackend {
    KeyedBackend::builder(dir)
        .kind(kind)
        .clock(Arc::new(clock.clone()))
        .open()
        .unwrap()
}

const KINDS: [BackendKind; 2] = [BackendKind::RocksDb, BackendKind::Heap];

fn desc(name: &str, update: UpdateType, visibility: Visibility) -> StateDescriptor {
    StateDescriptor::new(name).with_ttl(
        TtlConfig::new(TTL)
            .update_type(update)
            .visibility(visibility),
    )
}

fn raw_entries(b: &KeyedBackend, state: &str) -> usize {
    let mut n = 0;
    for g in 0..b.max_parallelism() as u16 {
        b.scan_key_group(state, g, |_| {
            n += 1;
            Ok(true)
        })
        .unwrap();
    }
    n
}

struct Sum;
impl AggregateFunction for Sum {
    type In = u64;
    type Acc = u64;
    type Out = u64;
    fn create_accumulator(&self) -> u64 {
        0
    }
    fn add(&self, input: &u64, acc: &mut u64) {
        *acc += input;
    }
    fn result(&self, acc: &u64) -> u64 {
        *acc
    }
}

/// What a read at `written + 1500 ms` returns for an entry written at t0 and read at t0 + 600:
/// OnReadAndWrite refreshed it (alive); OnCreateAndWrite did not (expired: hidden or visible);
/// Disabled never expires.
fn expect_alive(update: UpdateType, visibility: Visibility) -> bool {
    match update {
        UpdateType::Disabled | UpdateType::OnReadAndWrite => true,
        UpdateType::OnCreateAndWrite => visibility == Visibility::ReturnExpiredIfNotCleanedUp,
    }
}

#[test]
fn every_update_type_and_visibility_for_every_kind() {
    for kind in KINDS {
        for update in [
            UpdateType::Disabled,
            UpdateType::OnCreateAndWrite,
            UpdateType::OnReadAndWrite,
        ] {
            for visibility in [
                Visibility::NeverReturnExpired,
                Visibility::ReturnExpiredIfNotCleanedUp,
            ] {
                let dir = tempfile::tempdir().unwrap();
                let clock = ManualClock::new(10_000);
                let b = open_kind(dir.path(), &clock, kind);
                let value = b
                    .value_state::<String, (), u64>(desc("value", update, visibility))
                    .unwrap();
                let list = b
                    .list_state::<String, (), u64>(desc("list", update, visibility))
                    .unwrap();
                let map = b
                    .map_state::<String, (), u8, u64>(desc("map", update, visibility))
                    .unwrap();
                let reduce = b
                    .reducing_state::<String, (), u64>(
                        desc("reduce", update, visibility),
                        |a, b| a + b,
                    )
                    .unwrap();
                let agg = b
                    .aggregating_state::<String, (), Sum>(desc("agg", update, visibility), Sum)
                    .unwrap();
                let k = "k".to_string();
                value.put(&k, &(), &1).unwrap();
                list.add(&k, &(), &1).unwrap();
                map.put(&k, &(), &1, &1).unwrap();
                reduce.add(&k, &(), &1).unwrap();
                agg.add(&k, &(), &1).unwrap();

                clock.advance(Duration::from_millis(600));
                // Reads within the TTL see everything (and refresh under OnReadAndWrite).
                assert_eq!(value.get(&k, &()).unwrap(), Some(1));
                assert_eq!(list.get(&k, &()).unwrap(), vec![1]);
                assert_eq!(map.get(&k, &(), &1).unwrap(), Some(1));
                assert_eq!(reduce.get(&k, &()).unwrap(), Some(1));
                assert_eq!(agg.get(&k, &()).unwrap(), Some(1));

                clock.advance(Duration::from_millis(900)); // 1500 ms after the write
                let alive = expect_alive(update, visibility);
                let case = format!("{kind:?} {update:?}/{visibility:?}");
                assert_eq!(
                    value.get(&k, &()).unwrap(),
                    alive.then_some(1),
                    "value {case}"
                );
                assert_eq!(
                    list.get(&k, &()).unwrap(),
                    if alive { vec![1] } else { vec![] },
                    "list {case}"
                );
                assert_eq!(
                    map.get(&k, &(), &1).unwrap(),
                    alive.then_some(1),
                    "map {case}"
                );
                assert_eq!(
                    map.contains(&k, &(), &1).unwrap(),
                    alive,
                    "map contains {case}"
                );
                assert_eq!(
                    reduce.get(&k, &()).unwrap(),
                    alive.then_some(1),
                    "reduce {case}"
                );
                assert_eq!(agg.get(&k, &()).unwrap(), alive.then_some(1), "agg {case}");

                // Hidden expired entries were removed by the read (cleanup on read).
                let stored = raw_entries(&b, "value");
                let hidden = !alive;
                assert_eq!(stored, usize::from(!hidden), "value storage {case}");
                if hidden {
                    assert_eq!(b.ttl_stats("value").unwrap().dropped_on_read, 1);
                }

                // A write after expiry starts a fresh life; reducing starts from scratch.
                reduce.add(&k, &(), &5).unwrap();
                let expected = if alive { 6 } else { 5 };
                assert_eq!(
                    reduce.get(&k, &()).unwrap(),
                    Some(expected),
                    "reduce restart {case}"
                );
            }
        }
    }
}

#[test]
fn compaction_filter_removes_expired_and_keeps_live_on_the_raw_column_family() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let b = open(dir.path(), &clock);
    let cfg = TtlConfig::new(TTL);
    let value = b
        .value_state::<u32, (), u32>(StateDescriptor::new("v").with_ttl(cfg.clone()))
        .unwrap();
    let map = b
        .map_state::<u32, (), u32, u32>(StateDescriptor::new("m").with_ttl(cfg.clone()))
        .unwrap();
    let list = b
        .list_state::<u32, (), u32>(StateDescriptor::new("l").with_ttl(cfg))
        .unwrap();
    for i in 0..500u32 {
        value.put(&i, &(), &i).unwrap();
        map.put(&i, &(), &1, &i).unwrap();
        list.add(&i, &(), &i).unwrap();
    }
    clock.advance(Duration::from_millis(700));
    for i in 500..800u32 {
        value.put(&i, &(), &i).unwrap();
        map.put(&i, &(), &1, &i).unwrap();
        list.add(&i, &(), &i).unwrap();
    }
    // Mixed lists: old element (t0) and new element (t0+700) under the same key.
    for i in 0..100u32 {
        list.add(&i, &(), &(i + 10_000)).unwrap();
    }
    b.flush().unwrap();
    clock.advance(Duration::from_millis(400)); // first batch expired, second alive
    for state in ["v", "m", "l"] {
        b.compact_state(state).unwrap();
    }
    assert_eq!(raw_entries(&b, "v"), 300);
    assert_eq!(raw_entries(&b, "m"), 300);
    assert_eq!(
        raw_entries(&b, "l"),
        400,
        "300 live lists + 100 live second elements"
    );
    assert_eq!(b.ttl_stats("v").unwrap().dropped_by_compaction, 500);
    assert_eq!(b.ttl_stats("l").unwrap().dropped_by_compaction, 500);
    for i in 0..100u32 {
        assert_eq!(
            list.get(&i, &()).unwrap(),
            vec![i + 10_000],
            "mixed list {i} keeps only the live element"
        );
    }
    for i in 100..500u32 {
        assert!(
            list.get(&i, &()).unwrap().is_empty(),
            "fully expired list disappears"
        );
        assert_eq!(value.get(&i, &()).unwrap(), None);
    }
    for i in 500..800u32 {
        assert_eq!(value.get(&i, &()).unwrap(), Some(i));
        assert_eq!(map.get(&i, &(), &1).unwrap(), Some(i));
        assert_eq!(list.get(&i, &()).unwrap(), vec![i]);
    }
    // Without TTL nothing is dropped by compaction.
    let plain = b.value_state::<u32, (), u32>("plain").unwrap();
    plain.put(&1, &(), &1).unwrap();
    b.flush().unwrap();
    clock.advance(Duration::from_secs(1_000_000));
    b.compact_state("plain").unwrap();
    assert_eq!(plain.get(&1, &()).unwrap(), Some(1));
}

#[test]
fn disabled_compaction_filter_keeps_expired_entries_until_read() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let b = open(dir.path(), &clock);
    let cfg = TtlConfig::new(TTL).cleanup(Cleanup {
        compaction_filter: false,
        ..Cleanup::default()
    });
    let v = b
        .value_state::<u32, (), u32>(StateDescriptor::new("v").with_ttl(cfg))
        .unwrap();
    v.put(&1, &(), &1).unwrap();
    b.flush().unwrap();
    clock.advance(Duration::from_secs(10));
    b.compact_state("v").unwrap();
    assert_eq!(raw_entries(&b, "v"), 1);
    assert_eq!(v.get(&1, &()).unwrap(), None);
    assert_eq!(raw_entries(&b, "v"), 0);
}

#[test]
fn clock_is_read_once_per_refresh_interval() {
    for refresh_every in [1u64, 100, 1000] {
        let dir = tempfile::tempdir().unwrap();
        let clock = CountingClock::default();
        let b = KeyedBackend::builder(dir.path())
            .clock(Arc::new(clock.clone()))
            .open()
            .unwrap();
        let cfg = TtlConfig::new(TTL).cleanup(Cleanup {
            refresh_every,
            ..Cleanup::default()
        });
        let v = b
            .value_state::<u32, (), u32>(StateDescriptor::new("v").with_ttl(cfg))
            .unwrap();
        const N: u64 = 5000;
        for i in 0..N as u32 {
            v.put(&i, &(), &i).unwrap();
        }
        b.flush().unwrap();
        let before = clock.reads.load(Ordering::SeqCst);
        let stats_before = b.ttl_stats("v").unwrap();
        b.compact_state("v").unwrap();
        let reads = clock.reads.load(Ordering::SeqCst) - before;
        let stats = b.ttl_stats("v").unwrap();
        let examined = stats.examined_by_compaction - stats_before.examined_by_compaction;
        let filters = stats.compaction_filters - stats_before.compaction_filters;
        // RocksDB may compact the same entries more than once (L0 → base level → bottommost);
        // every pass examines them again. Each filter reads the clock once per `refresh_every`
        // entries it examines, starting with its first.
        assert!(
            examined >= N && filters >= 1,
            "examined {examined}, filters {filters}"
        );
        let min = examined.div_ceil(refresh_every);
        assert!(
            reads >= min && reads <= min + filters,
            "refresh_every={refresh_every}: {reads} reads for {examined} entries in {filters} filters"
        );
    }
}

#[test]
fn periodic_compaction_option_reaches_rocksdb() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let b = open(dir.path(), &clock);
    let cfg = TtlConfig::new(TTL).cleanup(Cleanup {
        periodic_compaction: Duration::from_secs(12345),
        ..Cleanup::default()
    });
    b.value_state::<u32, (), u32>(StateDescriptor::new("v").with_ttl(cfg))
        .unwrap();
    // RocksDB writes its live options to OPTIONS-<n> files; the newest holds the CF setting.
    let newest = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().into_string().unwrap())
        .filter(|n| n.starts_with("OPTIONS-"))
        .max_by_key(|n| n[8..].parse::<u64>().unwrap())
        .unwrap();
    let text = std::fs::read_to_string(dir.path().join(newest)).unwrap();
    let section = text
        .split("[CFOptions \"state\\:v\"]") // RocksDB escapes ':' in names
        .nth(1)
        .unwrap_or_else(|| panic!("no state CF section in the newest OPTIONS file:\n{text}"));
    let section = section.split("[TableOptions").next().unwrap();
    assert!(
        section.contains("periodic_compaction_seconds=12345"),
        "{section}"
    );
}

#[test]
fn event_time_ttl_follows_the_watermark() {
    for kind in KINDS {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(5_000_000);
        let b = open_kind(dir.path(), &clock, kind);
        let cfg = TtlConfig::new(TTL).time_domain(TimeDomain::EventTime);
        let v = b
            .value_state::<u32, (), u32>(StateDescriptor::new("v").with_ttl(cfg))
            .unwrap();
        b.advance_watermark(100);
        v.put(&1, &(), &1).unwrap();
        clock.advance(Duration::from_secs(3600)); // processing time is irrelevant
        assert_eq!(v.get(&1, &()).unwrap(), Some(1));
        b.advance_watermark(1099);
        assert_eq!(v.get(&1, &()).unwrap(), Some(1));
        b.advance_watermark(50); // watermarks never go back
        b.advance_watermark(1100);
        assert_eq!(v.get(&1, &()).unwrap(), None);
    }
}

#[test]
fn turning_ttl_on_or_off_is_a_registration_error() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    {
        let b = open(dir.path(), &clock);
        b.value_state::<u32, (), u32>("plain")
            .unwrap()
            .put(&1, &(), &1)
            .unwrap();
        b.value_state::<u32, (), u32>(StateDescriptor::new("ttl").with_ttl(TtlConfig::new(TTL)))
            .unwrap()
            .put(&1, &(), &1)
            .unwrap();
        b.close().unwrap();
    }
    let b = open(dir.path(), &clock);
    assert!(matches!(
        b.value_state::<u32, (), u32>(StateDescriptor::new("plain").with_ttl(TtlConfig::new(TTL))),
        Err(Error::StateMismatch { .. })
    ));
    assert!(matches!(
        b.value_state::<u32, (), u32>("ttl"),
        Err(Error::StateMismatch { .. })
    ));
    // Same flag, other duration: allowed (as in Flink), data intact.
    let v = b
        .value_state::<u32, (), u32>(StateDescriptor::new("ttl").with_ttl(TtlConfig::new(TTL * 2)))
        .unwrap();
    assert_eq!(v.get(&1, &()).unwrap(), Some(1));
}

#[test]
fn idle_state_retention_is_a_ttl_config() {
    for kind in KINDS {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let b = open_kind(dir.path(), &clock, kind);
        let v = b
            .value_state::<u32, (), u32>(
                StateDescriptor::new("v").with_ttl(TtlConfig::idle_state_retention(TTL)),
            )
            .unwrap();
        v.put(&1, &(), &1).unwrap();
        for _ in 0..5 {
            clock.advance(Duration::from_millis(900));
            assert_eq!(v.get(&1, &()).unwrap(), Some(1), "reading keeps it alive");
        }
        clock.advance(Duration::from_millis(1000));
        assert_eq!(
            v.get(&1, &()).unwrap(),
            None,
            "idle for the retention: gone"
        );
    }
}

#[test]
fn an_expired_value_read_before_compaction_drops_it_is_not_returned_after() {
    // ReturnExpiredIfNotCleanedUp returns expired entries only until cleanup removes them:
    // a value read (and so cached) before the compaction must not come back after it.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let b = KeyedBackend::builder(dir.path())
        .clock(Arc::new(clock.clone()))
        .options(DbOptions {
            value_cache_bytes: 1 << 20,
            ..DbOptions::default()
        })
        .open()
        .unwrap();
    let visible = |name| {
        b.value_state::<u32, (), u32>(desc(
            name,
            UpdateType::OnCreateAndWrite,
            Visibility::ReturnExpiredIfNotCleanedUp,
        ))
        .unwrap()
    };
    let (value, hidden) = (
        visible("v"),
        b.value_state::<u32, (), u32>(desc(
            "h",
            UpdateType::OnCreateAndWrite,
            Visibility::NeverReturnExpired,
        ))
        .unwrap(),
    );
    for i in 0..50u32 {
        value.put(&i, &(), &i).unwrap();
        hidden.put(&i, &(), &i).unwrap();
    }
    b.flush().unwrap();
    clock.advance(TTL + Duration::from_millis(1));
    for i in 0..50u32 {
        assert_eq!(
            value.get(&i, &()).unwrap(),
            Some(i),
            "expired, not cleaned up"
        );
        assert_eq!(hidden.get(&i, &()).unwrap(), None);
    }
    b.compact_state("v").unwrap();
    b.compact_state("h").unwrap();
    assert_eq!(raw_entries(&b, "v"), 0);
    for i in 0..50u32 {
        assert_eq!(value.get(&i, &()).unwrap(), None, "cleaned up");
        assert_eq!(hidden.get(&i, &()).unwrap(), None);
    }
    // The other states' values are still cached.
    let plain = b.value_state::<u32, (), u32>("plain").unwrap();
    let entries = || b.metrics().unwrap().rocksdb.value_cache_entries;
    let before = entries();
    plain.put(&1, &(), &1).unwrap();
    b.flush().unwrap();
    assert_eq!(plain.get(&1, &()).unwrap(), Some(1));
    assert_eq!(entries(), before + 1, "read, so cached");
}

#[test]
fn a_ttl_value_written_around_the_write_cache_or_through_it_expires_alike() {
    // A TTL value's timestamp and payload reach RocksDB joined whether the write cache takes
    // them apart (on) or the put goes straight to RocksDB (off), and through a flush.
    for write_cache_bytes in [0, DbOptions::default().write_cache_bytes] {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(1_000_000);
        let b = KeyedBackend::builder(dir.path())
            .clock(Arc::new(clock.clone()))
            .options(DbOptions {
                write_cache_bytes,
                ..DbOptions::default()
            })
            .open()
            .unwrap();
        let value = b
            .value_state::<u32, (), Vec<u8>>(desc(
                "v",
                UpdateType::OnCreateAndWrite,
                Visibility::NeverReturnExpired,
            ))
            .unwrap();
        let payload = |i: u32| vec![i as u8; 1 + (i as usize * 37) % 2000];
        for i in 0..100u32 {
            value.put(&i, &(), &payload(i)).unwrap();
        }
        clock.advance(TTL / 2);
        value.put(&7, &(), &payload(70)).unwrap();
        b.flush().unwrap();
        for i in 0..100u32 {
            let want = payload(if i == 7 { 70 } else { i });
            assert_eq!(
                value.get(&i, &()).unwrap(),
                Some(want),
                "{write_cache_bytes}: {i}"
            );
        }
        clock.advance(TTL / 2 + Duration::from_millis(1));
        for i in 0..100u32 {
            let want = (i == 7).then(|| payload(70));
            assert_eq!(
                value.get(&i, &()).unwrap(),
                want,
                "{write_cache_bytes}: {i}"
            );
        }
    }
}

/// A read's TTL side effects come before what its caller writes while it reads: the refresh
/// of an `OnReadAndWrite` value read through `get_with` does not overwrite a value the closure
/// writes to the same key; nor does a map iteration's refresh of the entries it visits
/// overwrite the updates the iteration makes, nor its cleanup of an expired entry delete the
/// fresh value the iteration writes there. (The side effects used to be written after the
/// read, over those writes.)
#[test]
fn a_reads_refresh_and_cleanup_never_undo_what_the_reader_writes() {
    for kind in KINDS {
        reads_refresh_and_cleanup_never_undo_what_the_reader_writes(kind);
    }
}

fn reads_refresh_and_cleanup_never_undo_what_the_reader_writes(kind: BackendKind) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let b = open_kind(dir.path(), &clock, kind);
    let codec = rockstate::CodecId::new("bytes", 1);
    let v = b
        .raw_value_state(
            desc(
                "v",
                UpdateType::OnReadAndWrite,
                Visibility::NeverReturnExpired,
            ),
            codec.clone(),
        )
        .unwrap();
    v.put(b"k", &[], b"1").unwrap();
    let seen = v
        .get_with(b"k", &[], |old| {
            let seen = old.to_vec();
            v.put(b"k", &[], b"2")?;
            Ok(seen)
        })
        .unwrap();
    assert_eq!(seen, Some(b"1".to_vec()));
    assert_eq!(v.get(b"k", &[]).unwrap(), Some(b"2".to_vec()));

    let m = b
        .raw_map_state(
            desc(
                "m",
                UpdateType::OnReadAndWrite,
                Visibility::NeverReturnExpired,
            ),
            codec.clone(),
        )
        .unwrap();
    m.put(b"k", &[], b"a", b"old").unwrap();
    m.for_each(b"k", &[], |uk, _| {
        m.put(b"k", &[], uk, b"new")?;
        Ok(true)
    })
    .unwrap();
    assert_eq!(m.get(b"k", &[], b"a").unwrap(), Some(b"new".to_vec()));

    let c = b
        .raw_map_state(
            desc(
                "c",
                UpdateType::OnCreateAndWrite,
                Visibility::NeverReturnExpired,
            ),
            codec,
        )
        .unwrap();
    c.put(b"k", &[], b"a", b"old").unwrap();
    clock.advance(TTL * 2);
    c.put(b"k", &[], b"b", b"live").unwrap();
    c.for_each(b"k", &[], |_, _| {
        // Writes the expired entry the scan met before this one again.
        c.put(b"k", &[], b"a", b"fresh")?;
        Ok(true)
    })
    .unwrap();
    assert_eq!(c.get(b"k", &[], b"a").unwrap(), Some(b"fresh".to_vec()));
}

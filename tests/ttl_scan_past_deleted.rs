//! A TTL read writes (an `OnReadAndWrite` refresh, the removal of an expired entry) to the
//! entries it has read. When its scan runs next to many deleted entries (another key's cleared
//! list or removed map entries), the kept iterator gives up and the scan goes on from a new
//! one past the entries it gave, so those writes, reaching RocksDB at once with the WAL on or
//! through a tiny write cache, do not fail the read (docs/decisions/0042).

use std::sync::Arc;
use std::time::Duration;

use rockstate::keygroup::key_group_of;
use rockstate::{
    CodecId, DbOptions, KeyedBackend, ManualClock, RawListState, RawMapState, StateDescriptor,
    TtlConfig,
};

const M: u32 = 128;

/// Two ids whose keys sort `a` before `b` in the state (b's key group is larger).
fn two_ids() -> ([u8; 8], [u8; 8]) {
    let a = 1u64.to_be_bytes();
    let ga = key_group_of(&a, M);
    let b = (2u64..)
        .map(|i| i.to_be_bytes())
        .find(|b| key_group_of(b, M) > ga)
        .unwrap();
    (a, b)
}

fn open(dir: &std::path::Path, clock: &ManualClock, options: DbOptions) -> KeyedBackend {
    KeyedBackend::builder(dir)
        .max_parallelism(M)
        .clock(Arc::new(clock.clone()))
        .options(options)
        .open()
        .unwrap()
}

fn ttl() -> StateDescriptor {
    // Flink SQL's idle-state retention: every read refreshes the entry's timestamp.
    StateDescriptor::new("s").with_ttl(TtlConfig::idle_state_retention(Duration::from_secs(3600)))
}

/// The map of `a` holds two entries; the map of `b`, right after it, had 300 entries that
/// were removed (600 hidden entries in the memtable past `a`'s range).
fn map_case(options: DbOptions) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let backend = open(dir.path(), &clock, options);
    let m: RawMapState = backend
        .raw_map_state(ttl(), CodecId::new("bytes", 1))
        .unwrap();
    let (a, b) = two_ids();
    m.put(&a, b"", b"k1", b"v1").unwrap();
    m.put(&a, b"", b"k2", b"v2").unwrap();
    for i in 0..300u32 {
        m.put(&b, b"", &i.to_be_bytes(), b"x").unwrap();
    }
    for i in 0..300u32 {
        m.remove(&b, b"", &i.to_be_bytes()).unwrap();
    }
    // Time passes: the read refreshes both entries (new timestamps).
    clock.advance(Duration::from_millis(10));
    let got = m.entries(&a, b"");
    assert_eq!(
        got.unwrap(),
        vec![
            (b"k1".to_vec(), b"v1".to_vec()),
            (b"k2".to_vec(), b"v2".to_vec())
        ]
    );
}

#[test]
fn a_refreshing_map_read_next_to_deleted_entries_with_the_wal_on() {
    // WAL on: the write cache is off, so the refresh goes to RocksDB at once.
    map_case(DbOptions {
        wal: true,
        ..DbOptions::default()
    });
}

#[test]
fn a_refreshing_map_read_next_to_deleted_entries_with_a_tiny_write_cache() {
    // A write cache drained by every second write: the read's second refresh drains the first.
    map_case(DbOptions {
        write_cache_bytes: 1,
        ..DbOptions::default()
    });
}

#[test]
fn a_refreshing_list_read_next_to_a_cleared_list_with_the_wal_on() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let backend = open(
        dir.path(),
        &clock,
        DbOptions {
            wal: true,
            ..DbOptions::default()
        },
    );
    let l: RawListState = backend
        .raw_list_state(ttl(), CodecId::new("bytes", 1))
        .unwrap();
    let m: RawMapState = backend
        .raw_map_state("other", CodecId::new("bytes", 1))
        .unwrap();
    drop(m);
    let (a, b) = two_ids();
    l.add(&a, b"", b"e1").unwrap();
    l.add(&a, b"", b"e2").unwrap();
    // 300 single-element adds under b, then cleared: 600 hidden entries after a's list.
    for i in 0..300u32 {
        l.add(&b, b"", &i.to_be_bytes()).unwrap();
    }
    l.clear(&b, b"").unwrap();
    clock.advance(Duration::from_millis(10));
    assert_eq!(
        l.get(&a, b"").unwrap(),
        vec![b"e1".to_vec(), b"e2".to_vec()]
    );
}

//! Changelog mode, TTL states with the default settings (`NeverReturnExpired`, compaction
//! filter on): the filter drops an expired entry without a logged change, then the user clears
//! the row (a map's `clear`, a list's `clear` or `update`), which finds nothing to delete. The
//! job is restored from the log checkpoint with a longer TTL (allowed, as in Flink; a clock
//! behind does the same): the replay onto the materialization, which still holds the entry,
//! must not bring it back. The clear is logged as a deletion of the whole row. Both replay
//! paths: segments sorted at restore, and log tables built at checkpoint time.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use rockstate::{
    CheckpointOptions, KeyGroupRange, KeyedBackend, ListState, ManualClock, MapState, RestoreFrom,
    StateDescriptor, TtlConfig,
};

fn map(b: &KeyedBackend, ttl: Duration) -> MapState<u32, (), u32, u64> {
    b.map_state::<u32, (), u32, u64>(StateDescriptor::new("m").with_ttl(TtlConfig::new(ttl)))
        .unwrap()
}

fn list(b: &KeyedBackend, ttl: Duration) -> ListState<u32, (), u64> {
    b.list_state::<u32, (), u64>(StateDescriptor::new("l").with_ttl(TtlConfig::new(ttl)))
        .unwrap()
}

fn scenario(options: CheckpointOptions, rescale: bool) {
    let fx = Fixture::new();
    let clock = ManualClock::new(1_000_000);
    let b = KeyedBackend::builder(fx.path("a"))
        .options(small_options())
        .clock(Arc::new(clock.clone()))
        .checkpoint_storage(fx.storage_dyn())
        .checkpoint_options(options)
        .open()
        .unwrap();
    let (m, l) = (
        map(&b, Duration::from_secs(1)),
        list(&b, Duration::from_secs(1)),
    );
    for k in 0..20u32 {
        m.put(&k, &(), &1, &111).unwrap();
        l.add(&k, &(), &5).unwrap();
    }
    assert!(b.checkpoint(1).unwrap().materialized);
    b.notify_checkpoint_complete(1).unwrap();
    // Expired; the compaction filter drops them (not logged).
    clock.advance(Duration::from_secs(5));
    b.compact_state("m").unwrap();
    b.compact_state("l").unwrap();
    // Rows 0..5 cleared, 5..10 replaced, 10..15 cleared and written again; 15..20 untouched.
    for k in 0..5u32 {
        m.clear(&k, &()).unwrap();
        l.clear(&k, &()).unwrap();
    }
    for k in 5..10u32 {
        m.clear(&k, &()).unwrap();
        m.put(&k, &(), &2, &222).unwrap();
        l.update(&k, &(), &[6, 7]).unwrap();
    }
    for k in 10..15u32 {
        m.clear(&k, &()).unwrap();
        m.put(&k, &(), &1, &333).unwrap();
        l.clear(&k, &()).unwrap();
        l.add(&k, &(), &8).unwrap();
    }
    assert!(!b.checkpoint(2).unwrap().materialized);
    b.notify_checkpoint_complete(2).unwrap();
    drop(b);
    // The job comes back with a retention of an hour (at two instances when rescaling).
    let instances: Vec<KeyGroupRange> = match rescale {
        false => vec![KeyGroupRange::new(0, 127).unwrap()],
        true => (0..2)
            .map(|i| KeyGroupRange::for_operator(128, 2, i).unwrap())
            .collect(),
    };
    let (mut maps, mut lists) = (Vec::new(), Vec::new());
    for (i, range) in instances.iter().enumerate() {
        let r = KeyedBackend::builder(fx.path(&format!("r{i}")))
            .options(small_options())
            .key_groups(*range)
            .clock(Arc::new(clock.clone()))
            .checkpoint_storage(fx.storage_dyn())
            .restore(RestoreFrom::Latest)
            .unwrap();
        let (m, l) = (
            map(&r, Duration::from_secs(3600)),
            list(&r, Duration::from_secs(3600)),
        );
        for k in 0..20u32 {
            if let Ok(e) = m.entries(&k, &()) {
                maps.push((k, e));
                lists.push((k, l.get(&k, &()).unwrap()));
            }
        }
    }
    maps.sort();
    lists.sort();
    let want_maps: Vec<(u32, Vec<(u32, u64)>)> = (0..20u32)
        .map(|k| match k {
            0..5 => (k, vec![]),
            5..10 => (k, vec![(2, 222)]),
            10..15 => (k, vec![(1, 333)]),
            _ => (k, vec![(1, 111)]),
        })
        .collect();
    let want_lists: Vec<(u32, Vec<u64>)> = (0..20u32)
        .map(|k| match k {
            0..5 => (k, vec![]),
            5..10 => (k, vec![6, 7]),
            10..15 => (k, vec![8]),
            _ => (k, vec![5]),
        })
        .collect();
    assert_eq!(
        maps, want_maps,
        "maps after the restore (rescale: {rescale})"
    );
    assert_eq!(
        lists, want_lists,
        "lists after the restore (rescale: {rescale})"
    );
}

fn with_tables(table_bytes: u64) -> CheckpointOptions {
    let mut o = changelog_options(100_000);
    o.changelog.table_bytes = table_bytes;
    o
}

#[test]
fn cleared_rows_stay_cleared_after_replaying_segments() {
    scenario(with_tables(0), false);
}

#[test]
fn cleared_rows_stay_cleared_after_ingesting_log_tables() {
    scenario(with_tables(1), false);
}

#[test]
fn cleared_rows_stay_cleared_after_a_rescaling_replay() {
    scenario(with_tables(0), true);
    scenario(with_tables(1), true);
}

//! The TTL timestamp mark of a list with blind updates (docs/decisions/0045) across checkpoint
//! restores: a head written after a restore onto a machine whose clock is behind carries a
//! timestamp no earlier than the restored entries it replaces, at the same parallelism, split
//! (1 -> 2) and merged (2 -> 1, where the mark is the larger of the two halves').

#[path = "rescale_common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use rockstate::ttl::Visibility;
use rockstate::{
    CheckpointOptions, Clock, CodecId, KeyGroupRange, KeyedBackend, RawListState, RestoreFrom,
    StateDescriptor, TtlConfig,
};

/// A processing-time clock that may step back.
#[derive(Debug, Clone, Default)]
struct StepClock(Arc<AtomicU64>);

impl Clock for StepClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

fn list(b: &KeyedBackend) -> RawListState {
    list_with(b, TtlConfig::new(Duration::from_secs(10)))
}

fn list_with(b: &KeyedBackend, ttl: TtlConfig) -> RawListState {
    let d = StateDescriptor::new("l").with_ttl(ttl);
    b.raw_list_state(d, CodecId::new("bytes", 1)).unwrap()
}

/// Operator instance `i` of `p` under `name-i`, on `clock`.
fn instance(
    store: &Store,
    name: &str,
    p: u32,
    i: u32,
    clock: &StepClock,
) -> rockstate::BackendBuilder {
    KeyedBackend::builder(store.path().join(format!("{name}-{i}")))
        .options(small_options())
        .max_parallelism(M)
        .key_groups(KeyGroupRange::for_operator(M, p, i).unwrap())
        .checkpoint_storage(Arc::clone(&store.storage))
        .checkpoint_options(CheckpointOptions::default())
        .job_owner(owner_of(&store.storage, 1))
        .clock(Arc::new(clock.clone()))
}

/// The keys of 0..400 whose key group `b` owns.
fn keys_of(b: &KeyedBackend) -> Vec<u32> {
    (0..400u32)
        .filter(|k| {
            let g = rockstate::keygroup::key_group_of(&k.to_be_bytes(), M);
            b.key_groups().contains(g)
        })
        .collect()
}

/// Writes a two-element list for every key at clock `stamps[i]` into instance `i` of a job of
/// `stamps.len()` instances, and checkpoints the job as checkpoint 1.
fn job(store: &Store, name: &str, stamps: &[u64]) {
    let p = stamps.len() as u32;
    let clock = StepClock::default();
    let backends: Vec<KeyedBackend> = (0..p)
        .map(|i| instance(store, name, p, i, &clock).open().unwrap())
        .collect();
    for (b, stamp) in backends.iter().zip(stamps) {
        clock.0.store(*stamp, Ordering::SeqCst);
        let l = list(b);
        for k in keys_of(b) {
            l.add_all(&k.to_be_bytes(), b"", [&b"old1"[..], b"old2"])
                .unwrap();
        }
    }
    let refs: Vec<&KeyedBackend> = backends.iter().collect();
    checkpoint_job(&store.storage, &refs, 1);
}

/// Restores checkpoint 1 as `p` instances on a clock far behind, replaces every list and
/// checks each head's timestamp is at least `floor`.
fn restore_and_update_behind(store: &Store, name: &str, p: u32, floor: u64) {
    let clock = StepClock::default();
    clock.0.store(1_000, Ordering::SeqCst);
    let mut heads = 0;
    for i in 0..p {
        let b = instance(store, name, p, i, &clock)
            .restore(RestoreFrom::Checkpoint(1))
            .unwrap();
        let l = list(&b);
        let keys = keys_of(&b);
        assert!(!keys.is_empty());
        for k in &keys {
            assert_eq!(l.get(&k.to_be_bytes(), b"").unwrap().len(), 2, "{name}");
            l.update(&k.to_be_bytes(), b"", [&b"new"[..]]).unwrap();
        }
        for g in b.key_groups().iter() {
            b.scan_key_group("l", g, |e| {
                let stamp = u64::from_be_bytes(e.value[..8].try_into().unwrap());
                if e.suffix.is_empty() {
                    heads += 1;
                    assert!(stamp >= floor, "{name}: a head stamped {stamp} < {floor}");
                }
                Ok(true)
            })
            .unwrap();
        }
        for k in &keys {
            assert_eq!(
                l.get(&k.to_be_bytes(), b"").unwrap(),
                vec![b"new".to_vec()],
                "{name}"
            );
        }
    }
    assert_eq!(heads, 400, "{name}");
}

#[test]
fn the_timestamp_mark_survives_restores_splits_and_merges() {
    let store = Store::local();
    job(&store, "one", &[50_000]);
    restore_and_update_behind(&store, "same", 1, 50_000);
    restore_and_update_behind(&store, "split", 2, 50_000);
    let store: Store = Store::local();
    job(&store, "two", &[40_000, 60_000]);
    restore_and_update_behind(&store, "merged", 1, 60_000);
}

#[test]
fn a_merge_with_a_source_no_mark_covers_keeps_the_reading_update() {
    let store = Store::local();
    let clock = StepClock::default();
    clock.0.store(50_000, Ordering::SeqCst);
    let backends: Vec<KeyedBackend> = (0..2)
        .map(|i| instance(&store, "two", 2, i, &clock).open().unwrap())
        .collect();
    // Instance 1's list returns expired entries: it never writes heads, so no mark covers
    // its timestamps.
    let lists = [
        list(&backends[0]),
        list_with(
            &backends[1],
            TtlConfig::new(Duration::from_secs(10))
                .visibility(Visibility::ReturnExpiredIfNotCleanedUp),
        ),
    ];
    for (b, l) in backends.iter().zip(&lists) {
        for k in keys_of(b) {
            l.add_all(&k.to_be_bytes(), b"", [&b"old1"[..], b"old2"])
                .unwrap();
        }
    }
    let refs: Vec<&KeyedBackend> = backends.iter().collect();
    checkpoint_job(&store.storage, &refs, 1);
    clock.0.store(1_000, Ordering::SeqCst);
    let b = instance(&store, "merged", 1, 0, &clock)
        .restore(RestoreFrom::Checkpoint(1))
        .unwrap();
    let l = list(&b);
    for k in keys_of(&b) {
        l.update(&k.to_be_bytes(), b"", [&b"new"[..]]).unwrap();
    }
    let mut heads = 0;
    for g in b.key_groups().iter() {
        b.scan_key_group("l", g, |e| {
            heads += usize::from(e.suffix.is_empty());
            Ok(true)
        })
        .unwrap();
    }
    assert_eq!(heads, 0, "the merged list has no mark, so its update reads");
    for k in keys_of(&b) {
        assert_eq!(l.get(&k.to_be_bytes(), b"").unwrap(), vec![b"new".to_vec()]);
    }
}

//! Key bounds (`DbOptions::key_bounds`): per state and key group, a key at least as large as
//! every stored key of the group, so a read of a key above it answers "absent" without asking
//! RocksDB. What a user must never notice: a stored key is found whichever way it got into the
//! database (put in this session, put before a reopen, restored from a checkpoint, brought in
//! by a rescale, loaded from savepoints). The keys here are the shape the bounds serve:
//! big-endian ids that grow, looked up before they are stored, as a dedup of sequence numbers
//! does. The bounds' own rules (learning, losing them at ingestion) are unit-tested in
//! `src/key_bounds.rs` and `src/db/`; `tests/model.rs` runs every state kind with them on.
//! List and map reads (scans of one key's entries) consult the same bounds: a list or map of
//! an id above its group's bound is empty without an iterator, so its entries must be found
//! just as surely.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::path::Path;

use common::*;
use rockstate::{
    CheckpointOptions, CodecId, KeyGroupRange, KeyedBackend, RawListState, RawMapState,
    RawValueState, RestoreFrom,
};

const M: u32 = 128;

fn ids(backend: &KeyedBackend) -> RawValueState {
    backend
        .raw_value_state("ids", CodecId::new("bytes", 1))
        .unwrap()
}

fn id(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

fn owns(backend: &KeyedBackend, i: u64) -> bool {
    let group = rockstate::keygroup::key_group_of(&id(i), backend.max_parallelism());
    backend.key_groups().contains(group)
}

/// Dedup of ids `from..to` in order: each is looked up (and must be new), then stored.
fn dedup(backend: &KeyedBackend, from: u64, to: u64) {
    let s = ids(backend);
    for i in (from..to).filter(|&i| owns(backend, i)) {
        assert_eq!(s.get(&id(i), &[]).unwrap(), None, "id {i} seen before");
        s.put(&id(i), &[], &i.to_le_bytes()).unwrap();
    }
}

/// Every owned id of `stored` is found with its value; every owned id of `absent` is not.
fn check(backend: &KeyedBackend, stored: std::ops::Range<u64>, absent: std::ops::Range<u64>) {
    let s = ids(backend);
    let mut found = 0;
    for i in stored.filter(|&i| owns(backend, i)) {
        assert_eq!(
            s.get(&id(i), &[]).unwrap(),
            Some(i.to_le_bytes().to_vec()),
            "id {i} lost"
        );
        found += 1;
    }
    assert!(found > 0, "the backend owns none of the stored ids");
    for i in absent.filter(|&i| owns(backend, i)) {
        assert_eq!(s.get(&id(i), &[]).unwrap(), None, "id {i} appeared");
    }
}

fn open_at(fx: &Fixture, name: &str, range: KeyGroupRange, from: RestoreFrom) -> KeyedBackend {
    KeyedBackend::builder(fx.path(name))
        .options(small_options())
        .max_parallelism(M)
        .key_groups(range)
        .checkpoint_storage(fx.storage_dyn())
        .restore(from)
        .unwrap()
}

#[test]
fn ids_stored_before_a_reopen_are_found_after_it() {
    let dir = tempfile::tempdir().unwrap();
    {
        let b = KeyedBackend::builder(dir.path()).open().unwrap();
        dedup(&b, 0, 3000);
        b.close().unwrap();
    }
    let b = KeyedBackend::builder(dir.path()).open().unwrap();
    check(&b, 0..3000, 3000..4000);
    dedup(&b, 3000, 4000);
    check(&b, 0..4000, 4000..5000);
}

#[test]
fn ids_restored_from_a_checkpoint_at_any_parallelism_are_found_and_later_ones_are_not() {
    let fx = Fixture::new();
    let a = source(&fx);
    dedup(&a, 0, 4000);
    a.checkpoint(1).unwrap();
    a.notify_checkpoint_complete(1).unwrap();
    // After the checkpoint: not in what is restored from it.
    dedup(&a, 4000, 5000);

    for b in restored_from_checkpoint_1(&fx) {
        check(&b, 0..4000, 4000..6000);
        dedup(&b, 4000, 5000);
        check(&b, 0..5000, 5000..6000);
    }
}

/// The backend whose checkpoints the restores read: directory `a`, checkpointing into `fx`.
fn source(fx: &Fixture) -> KeyedBackend {
    KeyedBackend::builder(fx.path("a"))
        .options(small_options())
        .max_parallelism(M)
        .checkpoint_storage(fx.storage_dyn())
        .checkpoint_options(CheckpointOptions::default())
        .open()
        .unwrap()
}

/// Checkpoint 1 of `fx`'s storage restored whole and in the two halves of parallelism 2
/// (ingested files: every bound lost, then learned by reads).
fn restored_from_checkpoint_1(fx: &Fixture) -> Vec<KeyedBackend> {
    let mut out = vec![open_at(
        fx,
        "whole",
        KeyGroupRange::all(M).unwrap(),
        RestoreFrom::Checkpoint(1),
    )];
    for i in 0..2 {
        out.push(open_at(
            fx,
            &format!("half{i}"),
            KeyGroupRange::for_operator(M, 2, i).unwrap(),
            RestoreFrom::Checkpoint(1),
        ));
    }
    out
}

#[test]
fn ids_loaded_from_savepoints_are_found() {
    let dir = tempfile::tempdir().unwrap();
    let open = |name: &str, range: KeyGroupRange| {
        KeyedBackend::builder(dir.path().join(name))
            .max_parallelism(M)
            .key_groups(range)
            .open()
            .unwrap()
    };
    let mut paths = Vec::new();
    for i in 0..2 {
        let half = open(
            &format!("h{i}"),
            KeyGroupRange::for_operator(M, 2, i).unwrap(),
        );
        dedup(&half, 0, 3000);
        let sp = dir.path().join(format!("sp{i}"));
        half.write_savepoint(&sp).unwrap();
        paths.push(sp);
    }
    let whole = open("whole", KeyGroupRange::all(M).unwrap());
    let refs: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
    whole.restore_savepoints(&refs).unwrap();
    check(&whole, 0..3000, 3000..4000);
    dedup(&whole, 3000, 4000);
    check(&whole, 0..4000, 4000..5000);
}

fn lists(backend: &KeyedBackend) -> (RawListState, RawMapState) {
    let codec = CodecId::new("bytes", 1);
    (
        backend.raw_list_state("lists", codec.clone()).unwrap(),
        backend.raw_map_state("maps", codec).unwrap(),
    )
}

/// The list every id gets: a run of two (one `update`) and a single element (one `add`).
fn list_of(i: u64) -> Vec<Vec<u8>> {
    vec![i.to_le_bytes().to_vec(), b"run".to_vec(), b"one".to_vec()]
}

/// For ids `from..to` in order: the id's list and map must be empty, then they are written
/// and read back at once (from the write cache's drain, before any flush).
fn fill_lists(backend: &KeyedBackend, from: u64, to: u64) {
    let (l, m) = lists(backend);
    for i in (from..to).filter(|&i| owns(backend, i)) {
        assert!(
            l.get(&id(i), &[]).unwrap().is_empty(),
            "list {i} seen before"
        );
        assert!(m.is_empty(&id(i), &[]).unwrap(), "map {i} seen before");
        let want = list_of(i);
        l.update(&id(i), &[], want[..2].iter().map(Vec::as_slice))
            .unwrap();
        l.add(&id(i), &[], &want[2]).unwrap();
        m.put(&id(i), &[], b"k", &i.to_le_bytes()).unwrap();
        assert_eq!(l.get(&id(i), &[]).unwrap(), want, "list {i} just written");
        assert!(!m.is_empty(&id(i), &[]).unwrap(), "map {i} just written");
    }
}

/// Every owned id of `stored` has its list and map; every owned id of `absent` has neither.
fn check_lists(backend: &KeyedBackend, stored: std::ops::Range<u64>, absent: std::ops::Range<u64>) {
    let (l, m) = lists(backend);
    let mut found = 0;
    for i in stored.filter(|&i| owns(backend, i)) {
        assert_eq!(l.get(&id(i), &[]).unwrap(), list_of(i), "list {i} lost");
        assert_eq!(
            m.entries(&id(i), &[]).unwrap(),
            vec![(b"k".to_vec(), i.to_le_bytes().to_vec())],
            "map {i} lost"
        );
        found += 1;
    }
    assert!(found > 0, "the backend owns none of the stored ids");
    for i in absent.filter(|&i| owns(backend, i)) {
        assert!(l.get(&id(i), &[]).unwrap().is_empty(), "list {i} appeared");
        assert!(m.is_empty(&id(i), &[]).unwrap(), "map {i} appeared");
    }
}

#[test]
fn lists_and_maps_of_growing_ids_are_found_after_reopen_restore_and_savepoint() {
    let fx = Fixture::new();
    let a = source(&fx);
    fill_lists(&a, 0, 1500);
    check_lists(&a, 0..1500, 1500..2000);
    a.flush().unwrap();
    fill_lists(&a, 1500, 2000);
    a.checkpoint(1).unwrap();
    a.notify_checkpoint_complete(1).unwrap();
    fill_lists(&a, 2000, 2500);
    let sp = fx.path("sp");
    a.write_savepoint(&sp).unwrap();
    a.close().unwrap();

    // Reopened: every bound unknown until a read learns it.
    let a = KeyedBackend::builder(fx.path("a"))
        .options(small_options())
        .max_parallelism(M)
        .open()
        .unwrap();
    check_lists(&a, 0..2500, 2500..3000);
    fill_lists(&a, 2500, 3000);
    check_lists(&a, 0..3000, 3000..3500);

    for b in restored_from_checkpoint_1(&fx) {
        check_lists(&b, 0..2000, 2000..2500);
        fill_lists(&b, 2000, 2500);
        check_lists(&b, 0..2500, 2500..3000);
    }

    // Loaded from the savepoint.
    let loaded = KeyedBackend::builder(fx.path("loaded"))
        .max_parallelism(M)
        .open()
        .unwrap();
    loaded.restore_savepoint(&sp).unwrap();
    check_lists(&loaded, 0..2500, 2500..3000);
    fill_lists(&loaded, 2500, 2600);
    check_lists(&loaded, 0..2600, 2600..3000);
}

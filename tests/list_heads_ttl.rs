//! Blind `update` of lists with TTL (docs/decisions/0045-blind-ttl-list-updates.md): on
//! RocksDB, a list whose reads never return expired entries writes a head like a list without
//! TTL. A head must then expire no earlier than the entries it replaced, or a compaction that
//! drops the expired head without them would let them be read again; so a list's timestamps
//! never go back, across a clock stepping back, a reopen, a checkpoint restore, a rescale and a
//! savepoint restore (`list_heads_ttl_restore.rs` has checkpoint restores and rescales).
//! Lists whose reads may return expired entries keep the reading `update`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rockstate::ttl::{UpdateType, Visibility};
use rockstate::{
    BackendKind, Clock, CodecId, DbOptions, KeyedBackend, RawListState, StateDescriptor, TtlConfig,
};

const M: u32 = 128;
const TTL: Duration = Duration::from_secs(10);

/// A processing-time clock that may step back, as a wall clock corrected by NTP can.
#[derive(Debug, Clone, Default)]
struct StepClock(Arc<AtomicU64>);

impl StepClock {
    fn at(ms: u64) -> Self {
        let c = StepClock::default();
        c.set(ms);
        c
    }
    fn set(&self, ms: u64) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

impl Clock for StepClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

fn descriptor(ttl: TtlConfig) -> StateDescriptor {
    StateDescriptor::new("l").with_ttl(ttl)
}

fn list_with(b: &KeyedBackend, ttl: TtlConfig) -> RawListState {
    b.raw_list_state(descriptor(ttl), CodecId::new("bytes", 1))
        .unwrap()
}

fn list(b: &KeyedBackend) -> RawListState {
    list_with(b, TtlConfig::new(TTL))
}

fn builder(dir: &std::path::Path, clock: &StepClock) -> rockstate::BackendBuilder {
    KeyedBackend::builder(dir)
        .options(DbOptions {
            write_buffer_size: 128 << 10,
            target_file_size_base: 128 << 10,
            ..DbOptions::default()
        })
        .max_parallelism(M)
        .clock(Arc::new(clock.clone()))
}

/// Stored entries of state `l`: (suffix length, key, TTL timestamp) for each, in key order.
fn entries(b: &KeyedBackend) -> Vec<(usize, Vec<u8>, u64)> {
    let mut out = Vec::new();
    for g in 0..b.max_parallelism() as u16 {
        b.scan_key_group("l", g, |e| {
            let stamp = u64::from_be_bytes(e.value[..8].try_into().unwrap());
            out.push((e.suffix.len(), e.key.to_vec(), stamp));
            Ok(true)
        })
        .unwrap();
    }
    out
}

fn heads(b: &KeyedBackend) -> Vec<(Vec<u8>, u64)> {
    entries(b)
        .into_iter()
        .filter(|(s, _, _)| *s == 0)
        .map(|(_, k, t)| (k, t))
        .collect()
}

fn el(tag: &str) -> Vec<u8> {
    tag.as_bytes().to_vec()
}

/// Writes to 200 lists two adds, an `add_all`, an `update`, then one more add; returns
/// what each list must read.
fn write_history(l: &RawListState) -> BTreeMap<u32, Vec<Vec<u8>>> {
    let mut want = BTreeMap::new();
    for k in 0..200u32 {
        let key = k.to_be_bytes();
        l.add(&key, b"", b"a").unwrap();
        l.add(&key, b"", b"b").unwrap();
        l.add_all(&key, b"", [&b"c"[..], b"d"]).unwrap();
        let new = [el(&format!("x{k}")), el("y")];
        l.update(&key, b"", new.iter().map(Vec::as_slice)).unwrap();
        l.add(&key, b"", b"z").unwrap();
        want.insert(k, vec![new[0].clone(), new[1].clone(), el("z")]);
    }
    want
}

fn check(l: &RawListState, want: &BTreeMap<u32, Vec<Vec<u8>>>, what: &str) {
    for (k, list) in want {
        assert_eq!(
            &l.get(&k.to_be_bytes(), b"").unwrap(),
            list,
            "{what}: list {k}"
        );
    }
}

#[test]
fn ttl_lists_update_blindly_and_compactions_drop_what_heads_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let clock = StepClock::at(1_000);
    let b = builder(dir.path(), &clock).open().unwrap();
    let l = list(&b);
    let want = write_history(&l);
    assert_eq!(heads(&b).len(), 200, "update wrote a head per list");
    assert_eq!(entries(&b).len(), 200 * 5, "and deleted nothing");
    b.compact_state("l").unwrap();
    assert_eq!(entries(&b).len(), 200 * 2, "the head and z stay");
    check(&l, &want, "after compaction");
    // A refreshing read rewrites the head with its sequence number, so what was appended
    // after it still reads after it.
    let refreshing = dir.path().join("refresh");
    let b = builder(&refreshing, &clock).open().unwrap();
    let l = list_with(
        &b,
        TtlConfig::new(TTL).update_type(UpdateType::OnReadAndWrite),
    );
    let want = write_history(&l);
    clock.set(2_000);
    check(&l, &want, "refreshing read");
    let stored = entries(&b);
    assert_eq!(stored.len(), 200 * 2, "the read deleted the dead entries");
    assert!(stored.iter().all(|(_, _, t)| *t == 2_000), "{stored:?}");
    check(&l, &want, "second refreshing read");
}

#[test]
fn an_expired_head_takes_what_it_replaced_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = StepClock::at(0);
    let mut backends = Vec::new();
    for name in ["read", "compacted"] {
        let b = builder(&dir.path().join(name), &clock).open().unwrap();
        let l = list(&b);
        backends.push((name, b, l));
    }
    let key = 1u32.to_be_bytes();
    for (_, _, l) in &backends {
        clock.set(0);
        l.add_all(&key, b"", [&b"old1"[..], b"old2"]).unwrap();
        clock.set(5_000);
        l.update(&key, b"", [&b"new"[..]]).unwrap();
        clock.set(9_000);
        l.add(&key, b"", b"z").unwrap();
    }
    // The replaced run expired, the head and z did not.
    clock.set(12_000);
    let (_, b, l) = &backends[0];
    assert_eq!(l.get(&key, b"").unwrap(), vec![el("new"), el("z")]);
    // The head expired: it goes, and what it replaced does not come back.
    clock.set(15_000);
    assert_eq!(l.get(&key, b"").unwrap(), vec![el("z")]);
    assert_eq!(
        entries(b).len(),
        1,
        "the read deleted the head and all before it"
    );
    let (_, b, l) = &backends[1];
    b.compact_state("l").unwrap();
    assert_eq!(
        entries(b).len(),
        1,
        "the compaction dropped the head and all before it"
    );
    assert_eq!(l.get(&key, b"").unwrap(), vec![el("z")]);
}

#[test]
fn a_head_written_while_the_clock_is_behind_outlives_what_it_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let clock = StepClock::at(10_000);
    let key = 1u32.to_be_bytes();
    {
        let b = builder(dir.path(), &clock).open().unwrap();
        let l = list(&b);
        l.add_all(&key, b"", [&b"old1"[..], b"old2"]).unwrap();
        b.flush().unwrap();
        b.compact_state("l").unwrap();
        // The clock steps back five seconds.
        clock.set(5_000);
        l.update(&key, b"", [&b"new"[..]]).unwrap();
        let h = heads(&b);
        assert_eq!(h.len(), 1);
        assert_eq!(
            h[0].1, 10_000,
            "the head's timestamp is not below the run it replaced"
        );
        // A later write too.
        l.add(&key, b"", b"z").unwrap();
        assert!(entries(&b).iter().all(|(_, _, t)| *t == 10_000));
        // Still a second before the replaced run expires: the head has not expired either.
        clock.set(19_000);
        assert_eq!(l.get(&key, b"").unwrap(), vec![el("new"), el("z")]);
        b.close().unwrap();
    }
    // The mark survives a reopen with the clock behind again.
    clock.set(3_000);
    let b = builder(dir.path(), &clock).open().unwrap();
    let l = list(&b);
    l.add(&key, b"", b"old3").unwrap();
    l.update(&key, b"", [&b"newer"[..]]).unwrap();
    assert_eq!(heads(&b)[0].1, 10_000);
    b.compact_state("l").unwrap();
    assert_eq!(entries(&b).len(), 1);
    clock.set(19_999);
    assert_eq!(l.get(&key, b"").unwrap(), vec![el("newer")]);
    clock.set(20_000);
    assert_eq!(l.get(&key, b"").unwrap(), Vec::<Vec<u8>>::new());
}

/// Replaces every list in `b` at a clock behind what was written and checks each head's
/// timestamp is not below `floor`.
fn update_behind(b: &KeyedBackend, clock: &StepClock, keys: &[u32], floor: u64, what: &str) {
    clock.set(1_000);
    let l = list(b);
    for k in keys {
        l.update(&k.to_be_bytes(), b"", [&b"new"[..]]).unwrap();
    }
    let h = heads(b);
    assert_eq!(h.len(), keys.len(), "{what}");
    let lowest = h.iter().map(|(_, t)| *t).min();
    assert!(
        lowest >= Some(floor),
        "{what}: a head stamped {lowest:?} < {floor}"
    );
    for k in keys {
        assert_eq!(
            l.get(&k.to_be_bytes(), b"").unwrap(),
            vec![el("new")],
            "{what}"
        );
    }
}

#[test]
fn the_timestamp_mark_survives_a_savepoint_restore() {
    let dir = tempfile::tempdir().unwrap();
    let clock = StepClock::at(70_000);
    let src = builder(&dir.path().join("src"), &clock).open().unwrap();
    let want = write_history(&list(&src));
    let sp = dir.path().join("sp");
    src.write_savepoint(&sp).unwrap();
    let keys: Vec<u32> = want.keys().copied().collect();
    let dst = builder(&dir.path().join("dst"), &clock).open().unwrap();
    dst.restore_savepoint(&sp).unwrap();
    check(&list(&dst), &want, "restored");
    update_behind(&dst, &clock, &keys, 70_000, "savepoint");
}

#[test]
fn a_savepoint_holds_ttl_lists_as_read() {
    let dir = tempfile::tempdir().unwrap();
    let clock = StepClock::at(1_000);
    let src = builder(&dir.path().join("src"), &clock).open().unwrap();
    let want = write_history(&list(&src));
    let sp = dir.path().join("sp");
    src.write_savepoint(&sp).unwrap();
    for kind in [BackendKind::RocksDb, BackendKind::Heap] {
        let dst = builder(&dir.path().join(format!("dst-{kind:?}")), &clock)
            .kind(kind)
            .open()
            .unwrap();
        dst.restore_savepoint(&sp).unwrap();
        let l = list(&dst);
        check(&l, &want, &format!("{kind:?}"));
        let stored = entries(&dst);
        assert_eq!(stored.len(), 200 * 2, "{kind:?}: dead entries left out");
        assert!(
            stored.iter().all(|(s, _, t)| *s >= 8 && *t == 1_000),
            "{kind:?}"
        );
        // They expire when they would have in the source.
        clock.set(11_000);
        check(
            &l,
            &want.keys().map(|k| (*k, Vec::new())).collect(),
            "expired",
        );
        clock.set(1_000);
    }
}

#[test]
fn lists_that_may_return_expired_entries_update_by_reading() {
    let dir = tempfile::tempdir().unwrap();
    let clock = StepClock::at(1_000);
    let b = builder(dir.path(), &clock).open().unwrap();
    let l = list_with(
        &b,
        TtlConfig::new(TTL).visibility(Visibility::ReturnExpiredIfNotCleanedUp),
    );
    let want = write_history(&l);
    assert!(heads(&b).is_empty());
    assert_eq!(entries(&b).len(), 200 * 2);
    check(&l, &want, "read");
}

/// Deletes the timestamp mark of state `l` from the closed database in `dir`: what a database
/// written before marks existed looks like.
fn drop_mark(dir: &std::path::Path) {
    let opts = rocksdb::Options::default();
    let cfs = rocksdb::DB::list_cf(&opts, dir).unwrap();
    let db = rocksdb::DB::open_cf(&opts, dir, &cfs).unwrap();
    assert!(db.get(b"ttl-floor/l").unwrap().is_some());
    db.delete(b"ttl-floor/l").unwrap();
    db.flush().unwrap();
}

#[test]
fn a_list_no_mark_covers_updates_by_reading() {
    let dir = tempfile::tempdir().unwrap();
    let clock = StepClock::at(50_000);
    let key = 1u32.to_be_bytes();
    {
        let b = builder(dir.path(), &clock).open().unwrap();
        list(&b)
            .add_all(&key, b"", [&b"old1"[..], b"old2"])
            .unwrap();
        b.close().unwrap();
    }
    drop_mark(dir.path());
    // Reopened on a clock behind what the list holds: a head stamped with the clock would
    // expire before the run it replaced, and a compaction holding only the head would let
    // the run be read again.
    clock.set(1_000);
    let b = builder(dir.path(), &clock).open().unwrap();
    let l = list(&b);
    b.compact_state("l").unwrap();
    l.update(&key, b"", [&b"new"[..]]).unwrap();
    assert!(heads(&b).is_empty(), "no head without a mark");
    b.flush().unwrap();
    clock.set(12_000);
    b.compact_state("l").unwrap();
    assert_eq!(l.get(&key, b"").unwrap(), Vec::<Vec<u8>>::new());
}

/// A first run writes heads under `NeverReturnExpired`; a second run registers the list with
/// `visibility`, and RocksDB compacts the files holding the expired head without the file
/// holding the run it replaced. Returns what the list reads then.
fn after_restart_with(visibility: Visibility) -> Vec<Vec<u8>> {
    let dir = tempfile::tempdir().unwrap();
    let clock = StepClock::at(0);
    let key = 1u32.to_be_bytes();
    let kg = rockstate::keygroup::key_group_of(&key, M);
    // Keys of other lists in lower key groups, one per group, lowest group first.
    let mut lower: Vec<(u16, [u8; 4])> = (0..10_000u32)
        .map(|k| k.to_be_bytes())
        .map(|k| (rockstate::keygroup::key_group_of(&k, M), k))
        .filter(|(g, _)| *g < kg)
        .collect();
    lower.sort();
    lower.dedup_by_key(|(g, _)| *g);
    assert!(lower.len() >= 7, "{kg}");
    let options = DbOptions {
        write_buffer_size: 128 << 10,
        target_file_size_base: 128 << 10,
        level0_file_num_compaction_trigger: 5,
        ..DbOptions::default()
    };
    {
        let b = builder(dir.path(), &clock)
            .options(options.clone())
            .open()
            .unwrap();
        let l = list(&b);
        // The last level: one file with the run `update` will replace, one with list x.
        l.add_all(&key, b"", [&b"old1"[..], b"old2"]).unwrap();
        b.flush().unwrap();
        b.compact_state("l").unwrap();
        l.add(&lower[6].1, b"", b"x").unwrap();
        b.flush().unwrap();
        b.compact_state("l").unwrap();
        clock.set(5_000);
        // Four level-0 files spanning [a lower key, the head]: they overlap each other and
        // x's file, not the run's.
        for (i, (_, k)) in lower.iter().take(4).enumerate() {
            l.add(k, b"", b"o").unwrap();
            l.update(&key, b"", [format!("new{i}").as_bytes()]).unwrap();
            b.flush().unwrap();
        }
        b.close().unwrap();
    }
    // The heads (5,000) and the run they replaced (0) have expired.
    clock.set(15_500);
    let b = builder(dir.path(), &clock).options(options).open().unwrap();
    let l = list_with(&b, TtlConfig::new(TTL).visibility(visibility));
    // A fifth level-0 file: RocksDB compacts the five with x's file.
    l.add(&lower[4].1, b"", b"o").unwrap();
    b.flush().unwrap();
    b.wait_for_compactions().unwrap();
    l.get(&key, b"").unwrap()
}

#[test]
fn heads_are_folded_when_a_list_switches_to_returning_expired_entries() {
    assert_eq!(
        after_restart_with(Visibility::NeverReturnExpired),
        Vec::<Vec<u8>>::new()
    );
    // Returning expired entries, the list reads the last update's element, expired but not
    // yet cleaned up, and never what it replaced.
    let got = after_restart_with(Visibility::ReturnExpiredIfNotCleanedUp);
    assert!(got.is_empty() || got == [el("new3")], "{got:?}");
    // Folded: no head is left, and the list reads as a list that was never blind-updated.
    let dir = tempfile::tempdir().unwrap();
    let clock = StepClock::at(1_000);
    {
        let b = builder(dir.path(), &clock).open().unwrap();
        write_history(&list(&b));
        assert_eq!(heads(&b).len(), 200);
        b.close().unwrap();
    }
    let b = builder(dir.path(), &clock).open().unwrap();
    let l = list_with(
        &b,
        TtlConfig::new(TTL).visibility(Visibility::ReturnExpiredIfNotCleanedUp),
    );
    assert!(heads(&b).is_empty());
    assert_eq!(entries(&b).len(), 200 * 2, "the heads as runs and z");
    let want = write_history(&l);
    check(&l, &want, "updated by reading after the fold");
    assert!(heads(&b).is_empty());
    b.close().unwrap();
    // Back to `NeverReturnExpired`: the mark went with the heads, so `update` keeps reading.
    let b = builder(dir.path(), &clock).open().unwrap();
    let l = list(&b);
    check(&l, &want, "reopened");
    l.update(&0u32.to_be_bytes(), b"", [&b"n"[..]]).unwrap();
    assert!(heads(&b).is_empty());
}

//! Blind list updates (docs/decisions/0034-blind-list-updates.md): on RocksDB, `update` of a
//! list without TTL writes the new elements' first run as the list's head (an entry under the
//! list's own key, sorting first) and reads nothing; every older entry of the list is dead.
//! What a user must never notice: a list reads exactly as written, whatever mix of `add`,
//! `add_all`, `update` and `clear` made it, before and after reads delete dead entries and
//! compactions drop them, after a reopen, a checkpoint restore at another parallelism and a
//! savepoint into either backend. The heap backend keeps the reading `update`; lists with
//! TTL are in `list_heads_ttl.rs`.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::collections::BTreeMap;

use common::*;
use rockstate::{
    BackendKind, CheckpointOptions, CodecId, KeyGroupRange, KeyedBackend, RawListState, RestoreFrom,
};

const M: u32 = 128;

fn list(b: &KeyedBackend) -> RawListState {
    b.raw_list_state("l", CodecId::new("bytes", 1)).unwrap()
}

/// Stored entries of state `l`: (suffix length, key) for each, in key order.
fn entries(b: &KeyedBackend) -> Vec<(usize, Vec<u8>)> {
    let mut out = Vec::new();
    for g in 0..b.max_parallelism() as u16 {
        b.scan_key_group("l", g, |e| {
            out.push((e.suffix.len(), e.key.to_vec()));
            Ok(true)
        })
        .unwrap();
    }
    out
}

fn heads(b: &KeyedBackend) -> usize {
    entries(b).iter().filter(|(s, _)| *s == 0).count()
}

fn el(tag: &str) -> Vec<u8> {
    tag.as_bytes().to_vec()
}

/// Writes to 200 lists a history that leaves dead entries behind a head: two adds, an
/// `add_all`, an `update`, then one more add. Returns what each list must read.
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

/// A fresh RocksDB backend in `dir` with [`write_history`] written: per list the head, three
/// dead entries (a, b, the run c d) and z.
fn with_history(
    dir: &std::path::Path,
) -> (KeyedBackend, RawListState, BTreeMap<u32, Vec<Vec<u8>>>) {
    let b = KeyedBackend::builder(dir).open().unwrap();
    let l = list(&b);
    let want = write_history(&l);
    assert_eq!(entries(&b).len(), 200 * 5);
    (b, l, want)
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
fn an_update_writes_a_head_and_reads_skip_then_delete_what_it_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let (b, l, want) = with_history(dir.path());
    assert_eq!(heads(&b), 200);
    check(&l, &want, "first read");
    assert_eq!(entries(&b).len(), 200 * 2, "reads delete the dead entries");
    check(&l, &want, "second read");
    // A second update replaces the head and makes z dead.
    let key = 7u32.to_be_bytes();
    l.update(&key, b"", [&b"p"[..], b"q", b"r"]).unwrap();
    l.add(&key, b"", b"s").unwrap();
    assert_eq!(
        l.get(&key, b"").unwrap(),
        vec![el("p"), el("q"), el("r"), el("s")]
    );
    // An update to nothing leaves no head behind.
    l.update(&key, b"", std::iter::empty()).unwrap();
    assert_eq!(l.get(&key, b"").unwrap(), Vec::<Vec<u8>>::new());
    assert!(entries(&b).iter().all(|(_, k)| k != &key));
    l.add(&key, b"", b"t").unwrap();
    assert_eq!(l.get(&key, b"").unwrap(), vec![el("t")]);
    // `clear` removes the head with the rest.
    let key = 8u32.to_be_bytes();
    l.clear(&key, b"").unwrap();
    assert!(entries(&b).iter().all(|(_, k)| k != &key));
    assert_eq!(l.get(&key, b"").unwrap(), Vec::<Vec<u8>>::new());
}

#[test]
fn a_compaction_drops_dead_entries_of_lists_never_read() {
    let dir = tempfile::tempdir().unwrap();
    let (b, l, want) = with_history(dir.path());
    b.compact_state("l").unwrap();
    // The head and z stay: z was written after the head, the rest before it.
    assert_eq!(entries(&b).len(), 200 * 2);
    check(&l, &want, "after compaction");
    // A head replaced by a newer one: the compaction judges by the newest.
    for k in 0..200u32 {
        l.update(&k.to_be_bytes(), b"", [&b"n"[..]]).unwrap();
    }
    b.compact_state("l").unwrap();
    assert_eq!(entries(&b).len(), 200);
    for k in 0..200u32 {
        assert_eq!(l.get(&k.to_be_bytes(), b"").unwrap(), vec![el("n")]);
    }
}

#[test]
fn heads_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let want = {
        let b = KeyedBackend::builder(dir.path()).open().unwrap();
        let want = write_history(&list(&b));
        b.close().unwrap();
        want
    };
    let b = KeyedBackend::builder(dir.path()).open().unwrap();
    let l = list(&b);
    check(&l, &want, "after reopen");
    // Appends after the reopen sort after the head (the sequence is persisted).
    l.add(&3u32.to_be_bytes(), b"", b"w").unwrap();
    let mut three = want[&3].clone();
    three.push(el("w"));
    assert_eq!(l.get(&3u32.to_be_bytes(), b"").unwrap(), three);
}

#[test]
fn heads_survive_checkpoint_restores_at_any_parallelism() {
    let fx = Fixture::new();
    let a = KeyedBackend::builder(fx.path("a"))
        .options(small_options())
        .max_parallelism(M)
        .checkpoint_storage(fx.storage_dyn())
        .checkpoint_options(CheckpointOptions::default())
        .open()
        .unwrap();
    let want = write_history(&list(&a));
    a.checkpoint(1).unwrap();
    a.notify_checkpoint_complete(1).unwrap();
    let mut ranges = vec![("whole", KeyGroupRange::all(M).unwrap())];
    for i in 0..2 {
        ranges.push(("half", KeyGroupRange::for_operator(M, 2, i).unwrap()));
    }
    for (i, (name, range)) in ranges.into_iter().enumerate() {
        let b = KeyedBackend::builder(fx.path(&format!("{name}{i}")))
            .options(small_options())
            .max_parallelism(M)
            .key_groups(range)
            .checkpoint_storage(fx.storage_dyn())
            .restore(RestoreFrom::Checkpoint(1))
            .unwrap();
        let l = list(&b);
        let mine: BTreeMap<u32, Vec<Vec<u8>>> = want
            .iter()
            .filter(|(k, _)| range.contains(rockstate::keygroup::key_group_of(&k.to_be_bytes(), M)))
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        assert!(!mine.is_empty());
        check(&l, &mine, name);
        // Updates and appends after the restore replace and follow what was restored.
        for k in mine.keys() {
            l.add(&k.to_be_bytes(), b"", b"after").unwrap();
            let mut list = mine[k].clone();
            list.push(el("after"));
            assert_eq!(l.get(&k.to_be_bytes(), b"").unwrap(), list, "{name} {k}");
            l.update(&k.to_be_bytes(), b"", [&b"u"[..]]).unwrap();
            assert_eq!(l.get(&k.to_be_bytes(), b"").unwrap(), vec![el("u")]);
        }
    }
}

#[test]
fn a_savepoint_holds_each_list_as_read_and_restores_into_both_backends() {
    let dir = tempfile::tempdir().unwrap();
    let src = KeyedBackend::builder(dir.path().join("src"))
        .open()
        .unwrap();
    let want = write_history(&list(&src));
    assert_eq!(heads(&src), 200);
    let sp = dir.path().join("sp");
    src.write_savepoint(&sp).unwrap();
    for kind in [BackendKind::RocksDb, BackendKind::Heap] {
        let dst = KeyedBackend::builder(dir.path().join(format!("dst-{kind:?}")))
            .kind(kind)
            .open()
            .unwrap();
        dst.restore_savepoint(&sp).unwrap();
        let l = list(&dst);
        check(&l, &want, &format!("{kind:?}"));
        // The savepoint left the dead entries out and the head went in as a run.
        let stored = entries(&dst);
        assert_eq!(stored.len(), 200 * 2, "{kind:?}");
        assert!(stored.iter().all(|(s, _)| *s == 8 || *s == 9), "{kind:?}");
        // Restored entries are numbered afresh: appends still follow them.
        l.add(&0u32.to_be_bytes(), b"", b"last").unwrap();
        let mut zero = want[&0].clone();
        zero.push(el("last"));
        assert_eq!(l.get(&0u32.to_be_bytes(), b"").unwrap(), zero, "{kind:?}");
    }
}

#[test]
fn lists_on_the_heap_update_by_reading() {
    let dir = tempfile::tempdir().unwrap();
    let b = KeyedBackend::builder(dir.path())
        .kind(BackendKind::Heap)
        .open()
        .unwrap();
    let l = list(&b);
    let want = write_history(&l);
    assert_eq!(heads(&b), 0);
    assert_eq!(entries(&b).len(), 200 * 2);
    check(&l, &want, "heap");
}

#[test]
fn a_long_update_writes_its_first_run_as_the_head_and_the_rest_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let b = KeyedBackend::builder(dir.path()).open().unwrap();
    let l = list(&b);
    let key = b"long";
    l.add(key, b"", b"old").unwrap();
    // About 200 KiB framed, one element larger than a run among them: the head holds the
    // first run, the rest follow it under larger sequence numbers.
    let mut long: Vec<Vec<u8>> = (0..200u32)
        .map(|i| {
            let mut e = vec![3u8; 1024];
            e[..4].copy_from_slice(&i.to_be_bytes());
            e
        })
        .collect();
    long.insert(100, vec![9u8; 100 << 10]);
    l.update(key, b"", long.iter().map(Vec::as_slice)).unwrap();
    l.add(key, b"", b"tail").unwrap();
    let mut want = long.clone();
    want.push(el("tail"));
    assert_eq!(l.get(key, b"").unwrap(), want);
    let stored = entries(&b);
    assert_eq!(heads(&b), 1);
    assert!(stored.len() >= 5, "{stored:?}");
    // A head that is one element larger than a run.
    let big = vec![vec![5u8; 100 << 10], el("after")];
    l.update(key, b"", big.iter().map(Vec::as_slice)).unwrap();
    assert_eq!(l.get(key, b"").unwrap(), big);
    b.compact_state("l").unwrap();
    assert_eq!(entries(&b).len(), 2, "the head and the run after it");
    assert_eq!(l.get(key, b"").unwrap(), big);
}

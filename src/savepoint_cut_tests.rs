//! Savepoints whose key groups are cut into several runs (`savepoint_runs`): the pieces are
//! made small here (`TEST_MIN_PIECE_BYTES`), so every key group of a small state is cut many
//! times, between the rows of every kind of state (a list with dead entries behind its heads,
//! a map, a TTL value; lists long enough that a cut would fall inside them if it were not
//! moved to the start of a row), and the file must hold the same entries as one written whole
//! and restore to the same state.

use std::time::Duration;

use crate::savepoint_runs::TEST_MIN_PIECE_BYTES;
use crate::state::StateDescriptor;
use crate::ttl::TtlConfig;
use crate::{KeyGroupRange, KeyedBackend};

const MAX_PARALLELISM: u32 = 4;
const KEYS: u32 = 6_000;

fn open(path: &std::path::Path, groups: KeyGroupRange) -> KeyedBackend {
    KeyedBackend::builder(path)
        .max_parallelism(MAX_PARALLELISM)
        .key_groups(groups)
        .open()
        .unwrap()
}

fn ttl() -> StateDescriptor {
    StateDescriptor::new("t").with_ttl(TtlConfig::new(Duration::from_secs(86_400)))
}

fn fill(b: &KeyedBackend) {
    let v = b.value_state::<u32, u8, u64>("v").unwrap();
    let t = b.value_state::<u32, u8, String>(ttl()).unwrap();
    let l = b.list_state::<u32, u8, u32>("l").unwrap();
    let m = b.map_state::<u32, u8, u32, u64>("m").unwrap();
    for k in 0..KEYS {
        v.put(&k, &(k as u8 % 3), &(u64::from(k) * 7)).unwrap();
        t.put(&k, &0, &format!("value of {k}")).unwrap();
        for e in 0..4 {
            l.add(&k, &0, &(k + e)).unwrap();
        }
        // A blind update: a head over the entries added before it, then entries after it.
        if k % 3 == 0 {
            l.update(&k, &0, &[k, k + 1]).unwrap();
            l.add(&k, &0, &(k * 2)).unwrap();
        }
        for u in 0..5 {
            m.put(&k, &1, &u, &(u64::from(k) + u64::from(u))).unwrap();
        }
        if k % 4 == 0 {
            m.remove(&k, &1, &2).unwrap();
        }
    }
    // Long lists, each a head over hundreds of dead entries and hundreds after it: rows that
    // span several pieces, so a cut falls inside them unless moved to the row's start.
    for k in 0..40 {
        for e in 0..300 {
            l.add(&k, &0, &e).unwrap();
        }
        l.update(&k, &0, &[k, 1, 2]).unwrap();
        for e in 0..300 {
            l.add(&k, &0, &(e + 1_000)).unwrap();
        }
    }
    b.flush().unwrap();
}

/// Key `k`'s state in every state of `b`, read through the typed handles.
fn contents_of(b: &KeyedBackend, k: u32) -> String {
    let v = b.value_state::<u32, u8, u64>("v").unwrap();
    let t = b.value_state::<u32, u8, String>(ttl()).unwrap();
    let l = b.list_state::<u32, u8, u32>("l").unwrap();
    let m = b.map_state::<u32, u8, u32, u64>("m").unwrap();
    format!(
        "{k}: {:?} {:?} {:?} {:?}",
        v.get(&k, &(k as u8 % 3)).unwrap(),
        t.get(&k, &0).unwrap(),
        l.get(&k, &0).unwrap(),
        m.entries(&k, &1).unwrap()
    )
}

/// A backend of every key group under `dir`, filled.
fn filled(dir: &std::path::Path) -> (KeyGroupRange, KeyedBackend) {
    let all = KeyGroupRange::new(0, MAX_PARALLELISM as u16 - 1).unwrap();
    let src = open(&dir.join("src"), all);
    fill(&src);
    (all, src)
}

/// Every key's state in `b`.
fn contents(b: &KeyedBackend) -> Vec<String> {
    (0..KEYS).map(|k| contents_of(b, k)).collect()
}

#[test]
fn key_groups_cut_into_runs_write_the_same_entries_and_restore_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    let (all, src) = filled(dir.path());
    let expected = contents(&src);

    let whole = dir.path().join("whole");
    let whole_stats = src.write_savepoint(&whole).unwrap();
    let cut = dir.path().join("cut");
    TEST_MIN_PIECE_BYTES.with(|b| b.set(Some(4 << 10)));
    let cut_stats = src.write_savepoint(&cut);
    TEST_MIN_PIECE_BYTES.with(|b| b.set(None));
    let cut_stats = cut_stats.unwrap();
    assert_eq!(cut_stats.entries, whole_stats.entries);
    assert_eq!(cut_stats.raw_bytes, whole_stats.raw_bytes);
    // A run ends its key group's block: more blocks show the key groups were cut.
    assert!(
        cut_stats.blocks > whole_stats.blocks + 8,
        "cut into {} blocks, whole {}",
        cut_stats.blocks,
        whole_stats.blocks
    );
    crate::savepoint::verify_file(&cut).unwrap();

    // Restored whole and at another parallelism, the cut file gives the source's state.
    let dst = open(&dir.path().join("dst"), all);
    dst.restore_savepoint(&cut).unwrap();
    assert_eq!(contents(&dst), expected);
    for (i, (first, last)) in [(0, 1), (2, 3)].into_iter().enumerate() {
        let groups = KeyGroupRange::new(first, last).unwrap();
        let part = open(&dir.path().join(format!("part-{i}")), groups);
        part.restore_savepoint(&cut).unwrap();
        let owned: Vec<u32> = (0..KEYS)
            .filter(|k| {
                let key = crate::codec::encode(k, "key").unwrap();
                groups.contains(crate::keygroup::key_group_of(&key, MAX_PARALLELISM))
            })
            .collect();
        assert!(!owned.is_empty() && owned.len() < KEYS as usize);
        for k in owned {
            assert_eq!(contents_of(&part, k), expected[k as usize], "key {k}");
        }
    }
}

/// Every cut lies at the start of a row (its key has no suffix), so no list is divided
/// between runs, and the list state is cut too.
#[test]
fn cuts_lie_at_the_start_of_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (all, src) = filled(dir.path());
    // Cuts are planned over the states in the order given; the list state goes first here.
    let names = ["l", "m", "t", "v"];
    let cores: Vec<_> = names.iter().map(|n| src.registered(n).unwrap()).collect();
    let tables: Vec<&crate::store::Table> = cores.iter().map(|c| &c.table).collect();
    let groups: Vec<u16> = all.iter().collect();
    TEST_MIN_PIECE_BYTES.with(|b| b.set(Some(4 << 10)));
    let cuts = crate::savepoint_runs::cuts(&tables, &groups, MAX_PARALLELISM, 32);
    TEST_MIN_PIECE_BYTES.with(|b| b.set(None));
    let cuts = cuts.unwrap();
    let all_cuts: Vec<_> = cuts.values().flatten().collect();
    assert!(all_cuts.len() >= 8, "{} cuts", all_cuts.len());
    assert!(
        all_cuts.iter().any(|c| c.state == 0),
        "no cut in the list state"
    );
    for (g, group_cuts) in &cuts {
        assert!(
            group_cuts.windows(2).all(|w| w[0] < w[1]),
            "cuts out of order"
        );
        for c in group_cuts {
            let parts = crate::codec::split_key(&c.row, MAX_PARALLELISM).unwrap();
            assert_eq!(parts.key_group, *g);
            assert!(parts.suffix.is_empty(), "a cut inside a row: {:?}", c);
        }
    }
}

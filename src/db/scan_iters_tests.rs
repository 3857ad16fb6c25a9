//! Scans on iterators kept between them ([`super::scan_iters`]): they see every write made
//! before the scan, let go of flushed memtables once the database has taken more writes, give
//! the same entries when RocksDB gives up skipping deleted ones, and match a model through
//! random writes, flushes, compactions and range deletions.

use std::sync::Arc;

use super::*;
use crate::options::MemoryBudgetConfig;

fn open(write_buffer_size: usize) -> (tempfile::TempDir, Arc<Db>) {
    open_with(DbOptions {
        write_buffer_size,
        ..DbOptions::default()
    })
}

fn open_with(options: DbOptions) -> (tempfile::TempDir, Arc<Db>) {
    let dir = tempfile::tempdir().unwrap();
    let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
    let db = Db::open(dir.path(), &options, &budget, None).unwrap();
    (dir, db)
}

fn kept(db: &Db) -> usize {
    db.opened().unwrap().kept_iterators()
}

/// The keys of `[lower, upper)`.
fn keys(cf: &Cf, lower: &[u8], upper: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    cf.scan(lower, Some(upper), |k, _| {
        out.push(k.to_vec());
        Ok(true)
    })
    .unwrap();
    out
}

#[test]
fn a_kept_iterator_sees_the_writes_made_after_the_scan_that_kept_it() {
    let (_dir, db) = open(16 << 20);
    let cf = db.create_cf("s").unwrap();
    cf.put(b"a1", b"x").unwrap();
    cf.put(b"a2", b"x").unwrap();
    cf.put(b"b1", b"x").unwrap();
    assert_eq!(keys(&cf, b"a", b"b"), [b"a1".to_vec(), b"a2".to_vec()]);
    assert_eq!(kept(&db), 1);
    cf.put(b"a3", b"x").unwrap();
    cf.delete(b"a1").unwrap();
    assert_eq!(keys(&cf, b"a", b"b"), [b"a2".to_vec(), b"a3".to_vec()]);
    assert_eq!(keys(&cf, b"b", b"c"), [b"b1".to_vec()]);
    // A range deletion goes through the front's change guard, which lets go of them.
    cf.delete_range(b"a", b"b").unwrap();
    assert_eq!(kept(&db), 0);
    assert!(keys(&cf, b"a", b"b").is_empty());
    cf.put(b"a4", b"x").unwrap();
    assert_eq!(keys(&cf, b"a", b"b"), [b"a4".to_vec()]);
    // So does a flush this crate asks for.
    db.flush_all().unwrap();
    assert_eq!(kept(&db), 0);
    assert_eq!(keys(&cf, b"a", b"c"), [b"a4".to_vec(), b"b1".to_vec()]);
    assert_eq!(kept(&db), 1);
}

/// Bytes of flushed memtables that something (an iterator) still holds.
fn pinned_memtable_bytes(cf: &Cf) -> u64 {
    let all = cf.property_u64("rocksdb.size-all-mem-tables").unwrap();
    let live = cf.property_u64("rocksdb.cur-size-all-mem-tables").unwrap();
    all.unwrap() - live.unwrap()
}

#[test]
fn writes_past_an_eighth_of_a_memtable_let_go_of_the_memtables_a_kept_iterator_held() {
    // 64 KiB memtables: kept iterators are refreshed after every 8 KiB of writes.
    let (_dir, db) = open(64 << 10);
    let cf = db.create_cf("s").unwrap();
    let value = vec![5u8; 1000];
    cf.put(b"a", &value).unwrap();
    assert_eq!(keys(&cf, b"a", b"b").len(), 1);
    assert_eq!(kept(&db), 1);
    // Enough writes for several memtables to fill, switch and flush in the background.
    for i in 0..400u32 {
        cf.put(&[b"k".as_slice(), &i.to_be_bytes()].concat(), &value)
            .unwrap();
    }
    db.drain().unwrap();
    // RocksDB's background flushes, waited for without `wait_for_compactions` (which drops
    // the kept iterators): polled, and bounded so a flush that never ends fails the test.
    let mut polls = 0;
    while cf.property_u64("rocksdb.num-immutable-mem-table").unwrap() != Some(0) {
        polls += 1;
        assert!(polls < 6000, "the memtables were never flushed");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // The last flush may have come after the last refresh: one more round of writes.
    for i in 0..16u32 {
        cf.put(&[b"m".as_slice(), &i.to_be_bytes()].concat(), &value)
            .unwrap();
    }
    db.drain().unwrap();
    assert_eq!(kept(&db), 1);
    assert_eq!(pinned_memtable_bytes(&cf), 0);
    assert_eq!(keys(&cf, b"a", b"b"), [b"a".to_vec()]);
}

#[test]
fn a_scan_next_to_many_deleted_entries_gives_the_same_entries() {
    let (_dir, db) = open(16 << 20);
    let cf = db.create_cf("s").unwrap();
    let key = |p: &[u8], i: u32| [p, &i.to_be_bytes()].concat();
    cf.put(b"b", b"x").unwrap();
    cf.put(&key(b"d", 0), b"x").unwrap();
    cf.put(&key(b"d", 999), b"x").unwrap();
    for i in 0..600 {
        cf.put(&key(b"c", i), b"x").unwrap();
        if (1..=300).contains(&i) {
            cf.put(&key(b"d", i), b"x").unwrap();
        }
    }
    // Put, then deleted: both stay in the memtable, and each deleted key hides two entries.
    db.drain().unwrap();
    for i in 0..600 {
        cf.delete(&key(b"c", i)).unwrap();
        if (1..=300).contains(&i) {
            cf.delete(&key(b"d", i)).unwrap();
        }
    }
    // Past the range's end: the kept iterator gives up after "b" and is dropped; the rest
    // of the range is scanned on a bounded one.
    assert_eq!(keys(&cf, b"b", b"c"), [b"b".to_vec()]);
    assert_eq!(kept(&db), 0);
    // Inside the range, between two live entries.
    assert_eq!(keys(&cf, b"d", b"e"), [key(b"d", 0), key(b"d", 999)]);
    assert_eq!(kept(&db), 0);
    assert!(keys(&cf, b"c", b"d").is_empty());
    // Where it skips few, it is kept.
    assert_eq!(keys(&cf, b"a", b"b").len(), 0);
    assert_eq!(kept(&db), 1);
}

#[test]
fn a_scan_that_gives_up_midway_goes_on_only_over_the_entries_it_gave() {
    // The write cache off: a put inside the scan's callback reaches RocksDB at once.
    let (_dir, db) = open_with(DbOptions {
        write_cache_bytes: 0,
        ..DbOptions::default()
    });
    let cf = db.create_cf("s").unwrap();
    let key = |i: u32| [b"d".as_slice(), &i.to_be_bytes()].concat();
    cf.put(&key(0), b"first").unwrap();
    cf.put(&key(999), b"last").unwrap();
    for i in 1..=300 {
        cf.put(&key(i), b"x").unwrap();
    }
    for i in 1..=300 {
        cf.delete(&key(i)).unwrap();
    }
    let scan = |write: &dyn Fn()| {
        let mut seen = Vec::new();
        let result = cf.scan(b"d", Some(b"e"), |k, v| {
            if seen.is_empty() {
                write();
            }
            seen.push((k.to_vec(), v.to_vec()));
            Ok(true)
        });
        (result, seen)
    };
    // A write outside the range while the scan runs: the scan goes on over the same state.
    let (result, seen) = scan(&|| cf.put(b"z", b"elsewhere").unwrap());
    result.unwrap();
    assert_eq!(
        seen,
        [(key(0), b"first".to_vec()), (key(999), b"last".to_vec())]
    );
    assert_eq!(kept(&db), 0);
    // A write to an entry the scan already gave: no state holds both, so the scan fails.
    let (result, seen) = scan(&|| cf.put(&key(0), b"changed").unwrap());
    let err = result.unwrap_err();
    assert_eq!(err.kind(), crate::error::ErrorKind::Transient, "{err}");
    assert_eq!(seen, [(key(0), b"first".to_vec())]);
    // Read again, it gives the new state.
    let (result, seen) = scan(&|| {});
    result.unwrap();
    assert_eq!(
        seen,
        [(key(0), b"changed".to_vec()), (key(999), b"last".to_vec())]
    );
    // A scan whose caller writes back to what it read (a TTL read) goes on past the entries
    // it gave instead: its own write to one of them does not fail it.
    let mut seen = Vec::new();
    cf.scan_writing_back(b"d", Some(b"e"), |k, v| {
        if seen.is_empty() {
            cf.put(k, b"refreshed")?;
        }
        seen.push((k.to_vec(), v.to_vec()));
        Ok(true)
    })
    .unwrap();
    assert_eq!(
        seen,
        [(key(0), b"changed".to_vec()), (key(999), b"last".to_vec())]
    );
}

#[test]
fn a_scan_still_running_when_the_iterators_are_cleared_does_not_keep_its_own() {
    let (_dir, db) = open(16 << 20);
    let cf = db.create_cf("s").unwrap();
    cf.put(b"a1", b"x").unwrap();
    cf.put(b"a2", b"x").unwrap();
    db.drain().unwrap();
    let mut n = 0;
    cf.scan(b"a", Some(b"b"), |_, _| {
        if n == 0 {
            // A flush this crate asks for, from inside the scan: it clears the kept ones.
            db.flush_all().unwrap();
        }
        n += 1;
        Ok(true)
    })
    .unwrap();
    assert_eq!(n, 2);
    assert_eq!(kept(&db), 0);
    assert_eq!(keys(&cf, b"a", b"b").len(), 2);
    assert_eq!(kept(&db), 1);
}

#[test]
fn scans_on_kept_iterators_match_a_model_through_writes_flushes_and_file_changes() {
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeMap;
    // 64 KiB memtables: they fill, switch and flush in the background as the test writes.
    let (_dir, db) = open(64 << 10);
    let cfs = [db.create_cf("s").unwrap(), db.create_cf("t").unwrap()];
    let mut models: [BTreeMap<Vec<u8>, Vec<u8>>; 2] = Default::default();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let key = |rng: &mut rand::rngs::StdRng| {
        let prefix = b"abcd"[rng.random_range(0..4)];
        vec![prefix, rng.random_range(0..64u8)]
    };
    for step in 0..6000 {
        let c = rng.random_range(0..2);
        let (cf, model) = (&cfs[c], &mut models[c]);
        match rng.random_range(0..100) {
            0..=44 => {
                let k = key(&mut rng);
                let v = vec![step as u8; rng.random_range(1..600)];
                cf.put(&k, &v).unwrap();
                model.insert(k, v);
            }
            45..=59 => {
                let k = key(&mut rng);
                cf.delete(&k).unwrap();
                model.remove(&k);
            }
            60..=95 => {
                let p = b"abcd"[rng.random_range(0..4)];
                let (lower, upper) = ([p], [p + 1]);
                let mut got = Vec::new();
                cf.scan(&lower, Some(&upper), |k, v| {
                    got.push((k.to_vec(), v.to_vec()));
                    Ok(true)
                })
                .unwrap();
                let want: Vec<_> = model
                    .range(lower.to_vec()..upper.to_vec())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(got, want, "step {step}");
            }
            96 => db.flush_all().unwrap(),
            97 => cf.compact_range(b"a", b"e").unwrap(),
            98 => {
                let p = b"abcd"[rng.random_range(0..4)];
                cf.delete_range(&[p], &[p + 1]).unwrap();
                model.retain(|k, _| k[0] != p);
            }
            _ => db.drain().unwrap(),
        }
    }
}

#[test]
fn a_scan_drains_the_write_cache_only_when_it_holds_a_write_to_the_scanned_state() {
    let (_dir, db) = open(16 << 20);
    let (s, t) = (db.create_cf("s").unwrap(), db.create_cf("t").unwrap());
    let cached = |db: &Db| db.opened().unwrap().front().read().cache.is_empty();
    s.put(b"a1", b"x").unwrap();
    t.put(b"a1", b"y").unwrap();
    // A write to the scanned column family is cached: the scan drains, and sees it.
    assert_eq!(keys(&s, b"a", b"b"), [b"a1".to_vec()]);
    assert!(cached(&db));
    // Only another one's: it stays cached, and the scan reads what RocksDB has.
    t.put(b"a2", b"y").unwrap();
    assert_eq!(keys(&s, b"a", b"b"), [b"a1".to_vec()]);
    assert!(!cached(&db));
    assert_eq!(keys(&t, b"a", b"b"), [b"a1".to_vec(), b"a2".to_vec()]);
    assert!(cached(&db));
}

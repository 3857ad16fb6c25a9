//! The database layer's own tests: the write cache's drain under failure, key bounds and the
//! value cache kept true across writes, drains, reopening, range deletion, dropped files and
//! ingestion.

use std::path::Path;
use std::sync::Arc;

use parking_lot::MappedRwLockReadGuard;

use super::front::Open;
use super::*;
use crate::key_bounds::Check;
use crate::options::MemoryBudgetConfig;

/// The open database behind `db`.
fn open_of(db: &Db) -> MappedRwLockReadGuard<'_, Open> {
    db.opened().unwrap()
}

/// Makes `db`'s writes to RocksDB fail (or succeed again); `db` must have no other holder.
fn fail_writes(db: &mut Arc<Db>, fail: bool) {
    Arc::get_mut(db)
        .unwrap()
        .open
        .get_mut()
        .as_mut()
        .unwrap()
        .fail_writes(fail);
}

#[test]
fn a_failed_drain_keeps_every_cached_write_and_refuses_the_next() {
    let dir = tempfile::tempdir().unwrap();
    // 64 KiB memtables: the cache holds 8 KiB.
    let options = DbOptions {
        write_buffer_size: 64 << 10,
        ..DbOptions::default()
    };
    let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
    let mut db = Db::open(dir.path(), &options, &budget, None).unwrap();
    fail_writes(&mut db, true);
    let cf = db.default_cf().unwrap();
    let value = vec![7u8; 1000];
    let mut n = 0u32;
    // Cached only: nothing has reached RocksDB, so nothing fails yet.
    while !open_of(&db).front().read().cache.is_full() {
        cf.put(&n.to_be_bytes(), &value).unwrap();
        n += 1;
    }
    let read = |cf: &Cf, k: &[u8]| cf.get_with(k, |v| v.to_vec()).unwrap();
    // The next write drains first; the drain fails, so this write is refused...
    assert!(matches!(cf.put(b"late", b"x"), Err(Error::RocksDb { .. })));
    assert!(matches!(
        cf.delete(&0u32.to_be_bytes()),
        Err(Error::RocksDb { .. })
    ));
    assert_eq!(read(&cf, b"late"), None);
    // ...every cached write is still there, and so is the failure.
    for i in 0..n {
        assert_eq!(read(&cf, &i.to_be_bytes()), Some(value.clone()));
    }
    assert!(cf.scan(b"", None, |_, _| Ok(true)).is_err());
    assert!(db.drain().is_err());
    // Once RocksDB takes writes again, a drain writes them all.
    drop(cf);
    fail_writes(&mut db, false);
    db.drain().unwrap();
    assert!(open_of(&db).front().read().cache.is_empty());
    let cf = db.default_cf().unwrap();
    let mut scanned = 0u32;
    cf.scan(b"", None, |k, v| {
        assert_eq!(k, scanned.to_be_bytes());
        assert_eq!(v, &value[..]);
        scanned += 1;
        Ok(true)
    })
    .unwrap();
    assert_eq!(scanned, n);
}

#[test]
fn a_drain_goes_in_several_batches_and_one_failing_part_way_is_written_again_whole() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_bounded(dir.path(), 2 << 20);
    let cf = db.create_cf("s").unwrap();
    let value = vec![3u8; 1000];
    // About 1 MB over every key group: many batches of `DRAIN_BATCH_BYTES`.
    let keys: Vec<Vec<u8>> = (0..1000u32)
        .map(|i| [&[(i % 128) as u8][..], &i.to_be_bytes()].concat())
        .collect();
    for k in &keys {
        cf.put(k, &value).unwrap();
    }
    assert!(open_of(&db).front().read().cache.bytes() > 16 * super::front::DRAIN_BATCH_BYTES);
    // The third batch fails: two are in RocksDB, and the cache still holds every write.
    open_of(&db).fail_after_writes(2);
    assert!(matches!(db.drain(), Err(Error::RocksDb { .. })));
    assert!(!open_of(&db).front().read().cache.is_empty());
    for k in &keys {
        assert_eq!(read(&cf, k), Some(value.clone()));
    }
    // A key the failed drain wrote, deleted since: the next drain's delete wins.
    let gone = &keys[0];
    cf.delete(gone).unwrap();
    open_of(&db).fail_after_writes(usize::MAX);
    db.drain().unwrap();
    assert!(open_of(&db).front().read().cache.is_empty());
    let mut found = 0;
    cf.scan(b"", None, |k, v| {
        assert_ne!(k, &gone[..]);
        assert_eq!(v, &value[..]);
        found += 1;
        Ok(true)
    })
    .unwrap();
    assert_eq!(found, keys.len() - 1);
}

/// A backend-like layout: 128 key groups, one-byte prefixes.
fn layout() -> Option<KeyLayout> {
    Some(KeyLayout::new(128, KeyGroupRange::all(128).unwrap()))
}

fn open_bounded(dir: &Path, write_cache_bytes: usize) -> Arc<Db> {
    let options = DbOptions {
        write_cache_bytes,
        ..DbOptions::default()
    };
    let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
    Db::open(dir, &options, &budget, layout()).unwrap()
}

/// A database at `dir` whose state `s` holds `puts`, closed and opened again: every bound
/// is unknown, and only RocksDB knows the keys.
fn reopened_with(dir: &Path, puts: &[(&[u8], &[u8])]) -> (Arc<Db>, Cf) {
    {
        let db = open_bounded(dir, 2 << 20);
        let cf = db.create_cf("s").unwrap();
        for (k, v) in puts {
            cf.put(k, v).unwrap();
        }
    }
    let db = open_bounded(dir, 2 << 20);
    let cf = db.cf("s").unwrap().unwrap();
    (db, cf)
}

fn read(cf: &Cf, key: &[u8]) -> Option<Vec<u8>> {
    cf.get_with(key, |v| v.to_vec()).unwrap()
}

/// Whether the bound of `key`'s group rules `key` out (a read would not ask RocksDB).
fn ruled_out(cf: &Cf, key: &[u8]) -> bool {
    open_of(&cf.db).front().read().check(cf.slot, key) == Check::Absent
}

#[test]
fn every_put_raises_its_groups_bound_with_the_cache_on_and_off() {
    for cache in [0, 2 << 20] {
        let dir = tempfile::tempdir().unwrap();
        let db = open_bounded(dir.path(), cache);
        let cf = db.create_cf("s").unwrap();
        // A read learns that group 7 is empty: every key of it is ruled out.
        assert_eq!(read(&cf, b"\x07a"), None);
        assert!(ruled_out(&cf, b"\x07a"));
        cf.put(b"\x07m", b"1").unwrap();
        let mut batch = Batch::new();
        batch.put(&cf, b"\x07z", b"2");
        batch.delete(&cf, b"\x07zz");
        db.write(batch).unwrap();
        // Found in the cache or (cache off) in RocksDB above the old bound.
        assert_eq!(read(&cf, b"\x07m"), Some(b"1".to_vec()), "cache {cache}");
        assert_eq!(read(&cf, b"\x07z"), Some(b"2".to_vec()), "cache {cache}");
        // After the drain only RocksDB has them: the drain raised the bound.
        db.drain().unwrap();
        assert_eq!(read(&cf, b"\x07m"), Some(b"1".to_vec()), "cache {cache}");
        assert_eq!(read(&cf, b"\x07z"), Some(b"2".to_vec()), "cache {cache}");
        assert!(!ruled_out(&cf, b"\x07y"));
        // A delete does not raise it.
        assert!(ruled_out(&cf, b"\x07zz"));
    }
}

#[test]
fn a_drain_raises_each_groups_bound_to_its_largest_put() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_bounded(dir.path(), 2 << 20);
    let (a, b) = (db.create_cf("a").unwrap(), db.create_cf("b").unwrap());
    for (cf, key) in [(&a, b"\x01"), (&a, b"\x02"), (&b, b"\x01")] {
        assert_eq!(read(cf, key), None);
        assert!(ruled_out(cf, key));
    }
    // Runs by slot, then group, each ending in a different way.
    a.put(b"\x01a", b"1").unwrap();
    a.put(b"\x01c", b"2").unwrap();
    a.delete(b"\x01d").unwrap();
    a.put(b"\x02b", b"3").unwrap();
    b.put(b"\x01z", b"4").unwrap();
    db.drain().unwrap();
    assert_eq!(read(&a, b"\x01a"), Some(b"1".to_vec()));
    assert_eq!(read(&a, b"\x01c"), Some(b"2".to_vec()));
    assert_eq!(read(&a, b"\x02b"), Some(b"3".to_vec()));
    assert_eq!(read(&b, b"\x01z"), Some(b"4".to_vec()));
    assert!(ruled_out(&a, b"\x01d"));
    assert!(ruled_out(&a, b"\x02c"));
    assert!(!ruled_out(&b, b"\x01y"));
}

#[test]
fn bounds_are_learned_from_rocksdb_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let (_db, cf) = reopened_with(dir.path(), &[(b"\x03k", b"1"), (b"\x04k", b"2")]);
    assert!(!ruled_out(&cf, b"\x03k"));
    assert_eq!(read(&cf, b"\x03k"), Some(b"1".to_vec()));
    assert_eq!(read(&cf, b"\x03l"), None);
    assert!(ruled_out(&cf, b"\x03l"));
    assert!(!ruled_out(&cf, b"\x03k"));
    assert_eq!(read(&cf, b"\x04k"), Some(b"2".to_vec()));
}

#[test]
fn a_put_cached_while_its_bound_is_learned_is_found_before_and_after_the_drain() {
    let dir = tempfile::tempdir().unwrap();
    let (db, cf) = reopened_with(dir.path(), &[(b"\x05k", b"1")]);
    // Put while the bound is unknown, still cached when RocksDB is asked (it knows `k`).
    cf.put(b"\x05x", b"2").unwrap();
    assert_eq!(read(&cf, b"\x05a"), None);
    assert!(!open_of(&db).front().read().cache.is_empty());
    assert!(
        ruled_out(&cf, b"\x05x"),
        "the bound covers RocksDB's keys only"
    );
    assert_eq!(read(&cf, b"\x05x"), Some(b"2".to_vec()));
    db.drain().unwrap();
    assert_eq!(read(&cf, b"\x05x"), Some(b"2".to_vec()));
    assert!(ruled_out(&cf, b"\x05y"));
}

/// Whether `key`'s value is in the value cache (a read would not ask RocksDB).
fn value_cached(cf: &Cf, key: &[u8]) -> Option<Vec<u8>> {
    let open = open_of(&cf.db);
    let front = open.front().read();
    front
        .values
        .get(front.values.hash(cf.slot, key), cf.slot, key)
        .map(<[u8]>::to_vec)
}

#[test]
fn writes_and_reads_fill_the_value_cache_and_keep_it_true() {
    use crate::options::ValueCacheAdmission::{EveryRead, SecondRead};
    use crate::options::ValueCacheWrites::{Fill, Refresh, SecondWrite};
    for (cache, wal, admission, writes) in [
        (2 << 20, false, EveryRead, Fill),
        (0, false, EveryRead, Fill),
        (0, true, EveryRead, Fill),
        (2 << 20, false, SecondRead, Fill),
        (0, true, SecondRead, Fill),
        (2 << 20, false, EveryRead, Refresh),
        (0, true, EveryRead, Refresh),
        (2 << 20, false, SecondRead, Refresh),
        (2 << 20, false, EveryRead, SecondWrite),
        (0, true, EveryRead, SecondWrite),
        (2 << 20, false, SecondRead, SecondWrite),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let options = DbOptions {
            write_cache_bytes: cache,
            wal,
            value_cache_bytes: 1 << 20,
            value_cache_admission: admission,
            value_cache_writes: writes,
            ..DbOptions::default()
        };
        let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
        let db = Db::open(dir.path(), &options, &budget, layout()).unwrap();
        let cf = db.create_cf("s").unwrap();
        let case = format!("cache {cache}, wal {wal}, {admission:?}, {writes:?}");
        let filled = |value: &[u8]| (writes == Fill).then(|| value.to_vec());
        cf.put(b"\x05a", b"1").unwrap();
        cf.put(b"\x05b", b"2").unwrap();
        if cache > 0 {
            assert_eq!(
                value_cached(&cf, b"\x05a"),
                None,
                "{case}: a cached write reaches the value cache with its drain"
            );
        }
        db.drain().unwrap();
        assert_eq!(
            value_cached(&cf, b"\x05a"),
            filled(b"1"),
            "{case}: writes add their keys under Fill only"
        );
        open_of(&db).front().write().values.clear();
        assert_eq!(read(&cf, b"\x05a"), Some(b"1".to_vec()));
        if admission == SecondRead {
            assert_eq!(
                value_cached(&cf, b"\x05a"),
                None,
                "{case}: a first read only marks its key"
            );
            assert_eq!(read(&cf, b"\x05a"), Some(b"1".to_vec()));
        }
        assert_eq!(
            value_cached(&cf, b"\x05a"),
            Some(b"1".to_vec()),
            "{case}: reads add their keys"
        );
        // A put of a cached key: the value cache follows once RocksDB has it.
        cf.put(b"\x05a", b"3").unwrap();
        assert_eq!(read(&cf, b"\x05a"), Some(b"3".to_vec()), "{case}");
        db.drain().unwrap();
        assert_eq!(value_cached(&cf, b"\x05a"), Some(b"3".to_vec()), "{case}");
        assert_eq!(read(&cf, b"\x05a"), Some(b"3".to_vec()), "{case}");
        // A batch, then a delete.
        assert_eq!(read(&cf, b"\x05b"), Some(b"2".to_vec()));
        if admission == SecondRead {
            assert_eq!(read(&cf, b"\x05b"), Some(b"2".to_vec()));
        }
        assert_eq!(value_cached(&cf, b"\x05b"), Some(b"2".to_vec()), "{case}");
        let mut batch = Batch::new();
        batch.put(&cf, b"\x05b", b"longer");
        batch.put(&cf, b"\x05c", b"4");
        db.write(batch).unwrap();
        db.drain().unwrap();
        assert_eq!(
            value_cached(&cf, b"\x05b"),
            Some(b"longer".to_vec()),
            "{case}"
        );
        assert_eq!(value_cached(&cf, b"\x05c"), filled(b"4"), "{case}");
        cf.delete(b"\x05a").unwrap();
        assert_eq!(read(&cf, b"\x05a"), None, "{case}");
        db.drain().unwrap();
        assert_eq!(value_cached(&cf, b"\x05a"), None, "{case}");
        assert_eq!(read(&cf, b"\x05a"), None, "{case}");
        // A key written again (a later drain, or a later write straight to RocksDB) before
        // any read: cached under SecondWrite, as under Fill.
        cf.put(b"\x05d", b"5").unwrap();
        db.drain().unwrap();
        assert_eq!(value_cached(&cf, b"\x05d"), filled(b"5"), "{case}");
        cf.put(b"\x05d", b"6").unwrap();
        db.drain().unwrap();
        let again = (writes != Refresh).then(|| b"6".to_vec());
        assert_eq!(value_cached(&cf, b"\x05d"), again, "{case}: a second write");
        assert_eq!(read(&cf, b"\x05d"), Some(b"6".to_vec()), "{case}");
    }
}

#[test]
fn range_deletion_dropped_files_and_ingestion_empty_the_value_cache() {
    let dir = tempfile::tempdir().unwrap();
    // Files cut per key group, so each group's keys can be dropped as a whole file.
    let options = DbOptions {
        key_group_files: true,
        value_cache_bytes: 1 << 20,
        // Every read fills the cache, so each change below has entries to drop.
        value_cache_admission: crate::options::ValueCacheAdmission::EveryRead,
        ..DbOptions::default()
    };
    let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
    let db = Db::open(&dir.path().join("db"), &options, &budget, layout()).unwrap();
    let cf = db.create_cf("s").unwrap();
    let keys: [&[u8]; 3] = [b"\x03a", b"\x04a", b"\x05a"];
    for k in keys {
        cf.put(k, b"old").unwrap();
    }
    cf.compact_all().unwrap();
    let read_all = |cf: &Cf| {
        for k in keys {
            if read(cf, k).is_some() {
                assert!(value_cached(cf, k).is_some());
            }
        }
    };
    read_all(&cf);
    let sst = dir.path().join("in.sst");
    db.write_sst(&sst, BlockSizing::Shared, |sink| sink.put(b"\x05a", b"new"))
        .unwrap();
    cf.ingest(&[sst]).unwrap();
    assert_eq!(read(&cf, b"\x05a"), Some(b"new".to_vec()));
    read_all(&cf);
    cf.delete_range(b"\x04", b"\x05").unwrap();
    assert_eq!(read(&cf, b"\x04a"), None);
    read_all(&cf);
    assert_eq!(value_cached(&cf, b"\x03a"), Some(b"old".to_vec()));
    cf.drop_files_in_range(b"\x03", b"\x04").unwrap();
    assert_eq!(read(&cf, b"\x03a"), None, "its file was dropped");
    assert_eq!(read(&cf, b"\x05a"), Some(b"new".to_vec()));
}

#[test]
fn ingested_keys_above_a_known_bound_are_found() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_bounded(&dir.path().join("db"), 2 << 20);
    let cf = db.create_cf("s").unwrap();
    cf.put(b"\x09a", b"1").unwrap();
    assert_eq!(read(&cf, b"\x09b"), None);
    assert!(ruled_out(&cf, b"\x09b"));
    let sst = dir.path().join("in.sst");
    db.write_sst(&sst, BlockSizing::Shared, |sink| {
        sink.put(b"\x09b", b"2")?;
        sink.put(b"\x0ab", b"3")
    })
    .unwrap();
    cf.ingest(&[sst]).unwrap();
    assert_eq!(read(&cf, b"\x09b"), Some(b"2".to_vec()));
    assert_eq!(read(&cf, b"\x0ab"), Some(b"3".to_vec()));
    assert_eq!(read(&cf, b"\x09a"), Some(b"1".to_vec()));
    assert!(ruled_out(&cf, b"\x09c"));
}

#[test]
fn without_a_layout_or_with_the_option_off_nothing_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
    let off = DbOptions {
        key_bounds: false,
        ..DbOptions::default()
    };
    let a = Db::open(&dir.path().join("a"), &off, &budget, layout()).unwrap();
    let b = Db::open(&dir.path().join("b"), &DbOptions::default(), &budget, None).unwrap();
    for db in [a, b] {
        assert!(!open_of(&db).bounded());
        assert!(open_of(&db).front().read().bounds.is_none());
    }
}

#[test]
fn a_column_family_created_inside_a_scan_does_not_wait_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_bounded(dir.path(), 2 << 20);
    let cf = db.create_cf("s").unwrap();
    cf.put(b"\x01a", b"1").unwrap();
    let mut created = None;
    cf.scan(b"", None, |_, _| {
        // The scan holds the database open; creating a column family takes a free slot.
        created = Some(db.create_cf("t")?);
        Ok(true)
    })
    .unwrap();
    let t = created.unwrap();
    t.put(b"\x01b", b"2").unwrap();
    assert_eq!(read(&t, b"\x01b"), Some(b"2".to_vec()));
    assert_eq!(db.cf_names().unwrap().len(), 3);
}

#[test]
fn after_close_every_call_answers_closed_and_the_path_opens_again() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_bounded(dir.path(), 2 << 20);
    let cf = db.create_cf("s").unwrap();
    cf.put(b"\x01a", b"1").unwrap();
    db.close().unwrap();
    db.close().unwrap();
    let is_closed = |r: Result<()>| assert!(matches!(r, Err(Error::Closed { .. })), "{r:?}");
    is_closed(cf.put(b"\x01b", b"2"));
    is_closed(cf.get_with(b"\x01a", |_| ()).map(|_| ()));
    is_closed(cf.scan(b"", None, |_, _| Ok(true)));
    is_closed(db.flush_all());
    is_closed(db.create_cf("t").map(|_| ()));
    // The directory lock is released: the path opens while `db` and `cf` live on.
    let again = open_bounded(dir.path(), 2 << 20);
    let cf2 = again.cf("s").unwrap().unwrap();
    assert_eq!(read(&cf2, b"\x01a"), Some(b"1".to_vec()));
}

#[test]
fn ingestions_into_several_column_families_at_once_keep_each_ones_order() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_bounded(&dir.path().join("db"), 2 << 20);
    let (a, b) = (db.create_cf("a").unwrap(), db.create_cf("b").unwrap());
    a.put(b"\x01k", b"old").unwrap();
    // A bound learned before the ingestion must not rule the ingested keys out.
    assert_eq!(read(&b, b"\x02k"), None);
    let file = |name: &str, key: &[u8], value: &[u8]| {
        let path = dir.path().join(name);
        db.write_sst(&path, BlockSizing::Shared, |sink| sink.put(key, value))
            .unwrap();
        path
    };
    let a_files = [
        file("a1.sst", b"\x01k", b"first"),
        file("a2.sst", b"\x01k", b"second"),
    ];
    let b_files = [file("b1.sst", b"\x02k", b"b")];
    Cf::ingest_each(&[
        (&a, &a_files[..]),
        (&b, &b_files[..]),
        (&db.default_cf().unwrap(), &[]),
    ])
    .unwrap();
    // Within one column family the later file wins.
    assert_eq!(read(&a, b"\x01k"), Some(b"second".to_vec()));
    assert_eq!(read(&b, b"\x02k"), Some(b"b".to_vec()));
    // One column family twice is refused before anything is ingested.
    let again = [file("a3.sst", b"\x01k", b"third")];
    assert!(matches!(
        Cf::ingest_each(&[(&a, &again[..]), (&a, &again[..])]),
        Err(Error::Internal(_))
    ));
    assert_eq!(read(&a, b"\x01k"), Some(b"second".to_vec()));
    Cf::ingest_each(&[]).unwrap();
}

#[test]
fn an_ingested_level_0_raises_the_stall_triggers_until_compaction_takes_it() {
    let dir = tempfile::tempdir().unwrap();
    // No write cache: every put below reaches RocksDB itself, so each one counts.
    let db = open_bounded(&dir.path().join("db"), 0);
    let cf = db.create_cf("s").unwrap();
    let slot = cf.slot;
    // 24 files over one key range: each overlaps the others, so each goes to level 0.
    let files: Vec<_> = (0..24u8)
        .map(|i| {
            let path = dir.path().join(format!("t{i}.sst"));
            db.write_sst(&path, BlockSizing::Shared, |sink| {
                sink.put(b"\x01a", &[i])?;
                sink.put(b"\x01z", &[i])
            })
            .unwrap();
            path
        })
        .collect();
    Cf::ingest_each(&[(&cf, &files[..])]).unwrap();
    assert_eq!(read(&cf, b"\x01a"), Some(vec![23]), "the last file wins");
    // Raised beside the ingestion, before compaction (already running) could take them.
    assert_eq!(open_of(&db).l0_raised(), vec![slot]);
    // Once compaction took level 0 below the slowdown count, writes set them back.
    cf.compact_all().unwrap();
    assert_eq!(open_of(&db).level0_files(slot).unwrap(), 0);
    for i in 0..200u32 {
        cf.put(&[&b"\x02"[..], &i.to_be_bytes()].concat(), b"v")
            .unwrap();
    }
    assert!(open_of(&db).l0_raised().is_empty());
    // A restore's database looks at every column family; few files raise nothing.
    db.after_restore().unwrap();
    assert!(open_of(&db).l0_raised().is_empty());
}

#[test]
fn a_restored_database_opens_with_raised_triggers_that_writes_set_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let options = DbOptions {
        write_cache_bytes: 0,
        ..DbOptions::default()
    };
    let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
    {
        let db = Db::open(&path, &options, &budget, layout()).unwrap();
        db.create_cf("s").unwrap().put(b"\x01a", b"1").unwrap();
        db.close().unwrap();
    }
    let db = Db::open_restored(&path, &options, &budget, layout(), 30).unwrap();
    assert_eq!(
        open_of(&db).l0_raised().len(),
        2,
        "default and state column family"
    );
    let cf = db.cf("s").unwrap().unwrap();
    assert_eq!(read(&cf, b"\x01a"), Some(b"1".to_vec()));
    for i in 0..200u32 {
        cf.put(&[&b"\x02"[..], &i.to_be_bytes()].concat(), b"v")
            .unwrap();
    }
    assert!(open_of(&db).l0_raised().is_empty());
    // Opened without a restore's files, nothing is raised.
    db.close().unwrap();
    let db = Db::open(&path, &options, &budget, layout()).unwrap();
    assert!(open_of(&db).l0_raised().is_empty());
}

#[test]
fn an_ingestion_of_no_files_changes_nothing_in_front_of_rocksdb() {
    let dir = tempfile::tempdir().unwrap();
    let options = DbOptions {
        value_cache_bytes: 1 << 20,
        value_cache_admission: crate::options::ValueCacheAdmission::EveryRead,
        ..DbOptions::default()
    };
    let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
    let db = Db::open(&dir.path().join("db"), &options, &budget, layout()).unwrap();
    let (a, b) = (db.create_cf("a").unwrap(), db.create_cf("b").unwrap());
    a.put(b"\x01k", b"v").unwrap();
    db.flush_all().unwrap();
    assert_eq!(read(&a, b"\x01k"), Some(b"v".to_vec()));
    assert!(value_cached(&a, b"\x01k").is_some());
    // Nothing to ingest: the front is not changed (a change would empty the value cache).
    a.ingest(&[]).unwrap();
    Cf::ingest_each(&[(&a, &[]), (&b, &[])]).unwrap();
    assert!(value_cached(&a, b"\x01k").is_some());
}

/// `FileSurgery::rebuild` leaves out exactly the files it is told to, level 0 included, and
/// changes nothing when the column family's files are not the planned ones or a link fails.
#[test]
fn a_rebuilt_column_family_holds_its_other_files_and_a_stale_plan_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let scratch = dir.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let options = DbOptions::default();
    let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
    let db = Db::open(&path, &options, &budget, None).unwrap();
    let cf = db.create_cf("s").unwrap();
    // Three level-0 files: an old value, a newer one of the same key and another key.
    for (k, v) in [(b"k1", b"old"), (b"k1", b"new"), (b"k2", b"two")] {
        cf.put(k, v).unwrap();
        db.flush_all().unwrap();
    }
    let files: Vec<PathBuf> = cf
        .live_files()
        .unwrap()
        .into_iter()
        .map(|f| f.path)
        .collect();
    assert_eq!(files.len(), 3);
    assert!(cf.live_files().unwrap().iter().all(|f| f.level == 0));
    db.close().unwrap();
    drop((cf, db));
    let reads = |expect: &[(&[u8], Option<&[u8]>)]| {
        let db = Db::open(&path, &options, &budget, None).unwrap();
        let cf = db.cf("s").unwrap().unwrap();
        for (k, v) in expect {
            assert_eq!(read(&cf, k), v.map(<[u8]>::to_vec), "{k:?}");
        }
        db.close().unwrap();
    };

    let mut surgery = FileSurgery::open(&path, &options, &budget).unwrap();
    // A plan made before a compaction: the live files differ.
    assert!(surgery
        .rebuild("s", &files[..2], &[], &scratch)
        .unwrap()
        .is_err());
    // A link that cannot be made.
    let taken = scratch.join(format!("rebuild-{}-0.sst", "73"));
    std::fs::write(&taken, b"x").unwrap();
    assert!(surgery
        .rebuild("s", &files, &files[2..], &scratch)
        .unwrap()
        .is_err());
    std::fs::remove_file(&taken).unwrap();
    drop(surgery);
    reads(&[(b"k1", Some(b"new")), (b"k2", Some(b"two"))]);

    // Leaving out the newest file: the other two keep their order (the newer value wins).
    let mut surgery = FileSurgery::open(&path, &options, &budget).unwrap();
    surgery
        .rebuild("s", &files, &files[2..], &scratch)
        .unwrap()
        .unwrap();
    drop(surgery);
    assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0);
    reads(&[(b"k1", Some(b"new")), (b"k2", None)]);
}

/// A range tombstone alone (`Cf::range_tombstone`, what a log's range deletion replays as)
/// keeps the range's end key, even in a file whose largest key it is: `Cf::delete_range`
/// drops whole files first with the end taken inclusive, which only a bare key-group prefix
/// (no stored key equals one) makes safe.
#[test]
fn a_range_tombstone_keeps_the_end_key_of_its_range() {
    let dir = tempfile::tempdir().unwrap();
    let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
    let db = Db::open(&dir.path().join("db"), &DbOptions::default(), &budget, None).unwrap();
    let cf = db.create_cf("s").unwrap();
    cf.put(b"\x05a", b"x").unwrap();
    cf.put(b"\x05k", b"kept").unwrap();
    cf.compact_all().unwrap();
    cf.range_tombstone(b"\x05a", b"\x05k").unwrap();
    assert_eq!(read(&cf, b"\x05a"), None);
    assert_eq!(read(&cf, b"\x05k"), Some(b"kept".to_vec()));
}

/// With the write cache off, a put, a delete or a batch that RocksDB refuses is not in the
/// change log: the caller got an error and the state never held the change, so a restore
/// from the log must not apply it. (Through the cache a refused drain keeps the writes and
/// records them again when they do go in.)
#[test]
fn a_write_rocksdb_refuses_stays_out_of_the_change_log() {
    let dir = tempfile::tempdir().unwrap();
    let options = DbOptions {
        write_cache_bytes: 0,
        ..DbOptions::default()
    };
    let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
    let mut db = Db::open(dir.path(), &options, &budget, None).unwrap();
    open_of(&db)
        .start_log(crate::change_log::ChangeLog::new(0, Some(0), 128, 1 << 20))
        .unwrap();
    fail_writes(&mut db, true);
    let cf = db.default_cf().unwrap();
    assert!(cf.put(b"refused", b"x").is_err());
    assert!(cf.delete(b"refused").is_err());
    let mut batch = Batch::new();
    batch.put(&cf, b"refused-in-a-batch", b"x");
    assert!(db.write(batch).is_err());
    drop(cf);
    fail_writes(&mut db, false);
    let cf = db.default_cf().unwrap();
    cf.put(b"taken", b"y").unwrap();
    let cut = open_of(&db).cut_log().unwrap().unwrap();
    assert_eq!(
        cut.builder.len(),
        1,
        "only the write RocksDB took is logged"
    );
}

#[test]
fn rocksdb_opens_table_files_with_one_thread_per_core() {
    let dir = tempfile::tempdir().unwrap();
    let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
    let db = Db::open(dir.path(), &DbOptions::default(), &budget, None).unwrap();
    db.close().unwrap();
    // RocksDB writes the options it runs with into an OPTIONS file at every open.
    let options_file = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("OPTIONS-")
        })
        .max()
        .unwrap();
    let text = std::fs::read_to_string(options_file).unwrap();
    let cores = std::thread::available_parallelism().unwrap().get().min(16);
    assert!(
        text.lines()
            .any(|l| l.trim() == format!("max_file_opening_threads={cores}")),
        "the OPTIONS file does not say max_file_opening_threads={cores}"
    );
}

/// RocksDB's ingestion picks the levels it checks from a column family's current version
/// and reads them through its super version; a flush or compaction finishing beside it can
/// leave the two apart, and the ingestion then read past the super version's levels
/// (SIGSEGV, `super::quiet`). Column families whose level-0 files a compaction is taking
/// get files while those compactions run: no flush or compaction is running when an
/// ingestion begins, and every file is in.
#[test]
fn ingestions_begin_with_no_flush_or_compaction_running() {
    let dir = tempfile::tempdir().unwrap();
    let options = DbOptions {
        write_cache_bytes: 0,
        level0_file_num_compaction_trigger: 2,
        max_background_jobs: 4,
        ..DbOptions::default()
    };
    let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
    let key = |group: u8, i: u32| [&[group][..], &i.to_be_bytes()].concat();
    let mut busy_before = 0;
    for round in 0..10u32 {
        let db = Db::open(
            &dir.path().join(format!("db{round}")),
            &options,
            &budget,
            layout(),
        )
        .unwrap();
        let cfs: Vec<Cf> = (0..8)
            .map(|c| db.create_cf(&format!("s{c}")).unwrap())
            .collect();
        let files: Vec<Vec<PathBuf>> = (0..cfs.len())
            .map(|c| {
                let path = dir.path().join(format!("r{round}-{c}.sst"));
                db.write_sst(&path, BlockSizing::Shared, |sink| {
                    sink.put(&key(5, c as u32), b"i")
                })
                .unwrap();
                vec![path]
            })
            .collect();
        // Two overlapping level-0 files per column family: compactions that rewrite them.
        for flush in 0..2u8 {
            for cf in &cfs {
                for i in 0..2000 {
                    cf.put(&key(1, i), &[flush; 100]).unwrap();
                }
            }
            db.flush_all().unwrap();
        }
        busy_before += open_of(&db).running_jobs();
        let batches: Vec<(&Cf, &[PathBuf])> =
            cfs.iter().zip(&files).map(|(cf, f)| (cf, &f[..])).collect();
        Cf::ingest_each(&batches).unwrap();
        assert_eq!(open_of(&db).jobs_at_ingestion(), 0, "round {round}");
        for (c, cf) in cfs.iter().enumerate() {
            assert_eq!(read(cf, &key(5, c as u32)), Some(b"i".to_vec()));
            assert_eq!(read(cf, &key(1, 7)), Some(vec![1; 100]));
        }
        // Compactions run again after the ingestion: two more level-0 files each are taken.
        for flush in 2..4u8 {
            for cf in &cfs {
                cf.put(&key(1, 0), &[flush; 100]).unwrap();
            }
            db.flush_all().unwrap();
        }
        db.wait_for_compactions().unwrap();
        for cf in &cfs {
            assert!(
                open_of(&db).level0_files(cf.slot).unwrap() < 2,
                "round {round}"
            );
        }
        db.close().unwrap();
    }
    assert!(
        busy_before > 0,
        "no compaction ran as an ingestion was asked for"
    );
}

/// A database a restore ingests into opens with automatic compactions off on every column
/// family, those it creates included, and `after_restore` turns them on; its ingestions
/// leave them off.
#[test]
fn a_restores_database_compacts_only_once_the_restore_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let options = DbOptions {
        write_cache_bytes: 0,
        level0_file_num_compaction_trigger: 2,
        ..DbOptions::default()
    };
    let budget = MemoryBudget::new(MemoryBudgetConfig::default()).unwrap();
    Db::open(&path, &options, &budget, layout())
        .unwrap()
        .create_cf("old")
        .unwrap();
    let db = Db::open_for_restore(&path, &options, &budget, layout()).unwrap();
    let old = db.cf("old").unwrap().unwrap();
    let new = db.create_cf("new").unwrap();
    let level0 = |cf: &Cf| open_of(&db).level0_files(cf.slot).unwrap();
    let fill = |cf: &Cf, files: u8| {
        for f in 0..files {
            cf.put(b"\x01k", &[f]).unwrap();
            db.flush_all().unwrap();
        }
    };
    fill(&old, 3);
    fill(&new, 3);
    let sst = dir.path().join("t.sst");
    db.write_sst(&sst, BlockSizing::Shared, |sink| sink.put(b"\x01k", b"in"))
        .unwrap();
    new.ingest(&[sst]).unwrap();
    db.wait_for_compactions().unwrap();
    assert_eq!((level0(&old), level0(&new)), (3, 4), "compactions are off");
    db.after_restore().unwrap();
    db.wait_for_compactions().unwrap();
    assert_eq!((level0(&old), level0(&new)), (0, 0), "compactions are on");
    assert_eq!(read(&new, b"\x01k"), Some(b"in".to_vec()));
    // A database opened otherwise keeps compacting across an ingestion.
    let sst = dir.path().join("u.sst");
    db.write_sst(&sst, BlockSizing::Shared, |sink| {
        sink.put(b"\x01k", b"again")
    })
    .unwrap();
    new.ingest(&[sst]).unwrap();
    fill(&old, 2);
    db.wait_for_compactions().unwrap();
    assert_eq!(level0(&old), 0);
}

/// A RocksDB checkpoint holds what the memtables held: without a WAL the memtables of every
/// column family are flushed first (`raw::flush_now`), and the checkpoint
/// then flushes nothing itself. With the write cache on, its writes are drained into it too.
#[test]
fn a_checkpoint_holds_every_column_familys_memtable_and_cached_writes() {
    for write_cache_bytes in [0, 2 << 20] {
        let dir = tempfile::tempdir().unwrap();
        let db = open_bounded(&dir.path().join("db"), write_cache_bytes);
        let a = db.create_cf("a").unwrap();
        let b = db.create_cf("b").unwrap();
        a.put(b"\x01k", b"in a").unwrap();
        b.put(b"\x02k", b"in b").unwrap();
        let copy = dir.path().join("copy");
        db.checkpoint(&copy).unwrap();
        for cf in [&a, &b] {
            assert_eq!(
                open_of(&db).level0_files(cf.slot).unwrap(),
                1,
                "one flush each (write cache {write_cache_bytes})"
            );
        }
        drop((a, b));
        db.close().unwrap();
        let copy = open_bounded(&copy, write_cache_bytes);
        let (a, b) = (
            copy.cf("a").unwrap().unwrap(),
            copy.cf("b").unwrap().unwrap(),
        );
        assert_eq!(read(&a, b"\x01k"), Some(b"in a".to_vec()));
        assert_eq!(read(&b, b"\x02k"), Some(b"in b".to_vec()));
    }
}

//! Log tables (docs/checkpoint-format.md §11, manifest version 4): once the segments after the
//! log's last table hold `table_bytes`, a log checkpoint also uploads their changes sorted
//! into one SST per column family; `table_fanout` tables of one level merge into one of the
//! next. A restore ingests the tables and replays only the segments after them, into exactly
//! the checkpoint's state, at the same or another parallelism; a restored backend keeps the
//! tables it restored and builds on them.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::collections::BTreeMap;

use common::*;
use rockstate::{CheckpointOptions, Error, KeyGroupRange, KeyedBackend, RestoreFrom};
use sst_format::{Changelog, CheckpointManifest};

on_every_storage!(
    tables_are_built_and_merged_and_restore_exactly,
    a_restored_backend_keeps_the_tables_and_builds_on_them,
);

/// Changelog mode with tables once `table_bytes` of segments wait, merged `fanout` at a time.
fn table_options(table_bytes: u64, fanout: u32) -> CheckpointOptions {
    let mut o = changelog_options(100_000);
    o.changelog.table_bytes = table_bytes;
    o.changelog.table_fanout = fanout;
    o
}

fn log(m: &CheckpointManifest) -> &Changelog {
    m.changelog.as_ref().expect("a changelog-mode manifest")
}

/// Where the log of `l` ends.
fn log_end(l: &Changelog) -> u64 {
    l.segments
        .last()
        .map_or(l.materialized_seq, |s| s.first_seq + s.entries)
}

/// The tables of `l` follow one another from the materialization on, each ending where a
/// segment ends; returns where they end.
fn assert_chain(l: &Changelog) -> u64 {
    let ends: Vec<u64> = l.segments.iter().map(|s| s.first_seq + s.entries).collect();
    let mut at = l.materialized_seq;
    for t in &l.tables {
        assert_eq!(t.first_seq, at, "{:?}", l.tables);
        assert!(ends.contains(&t.end_seq), "{:?}", l.tables);
        assert!(!t.files.is_empty());
        at = t.end_seq;
    }
    at
}

/// The map state `m` besides the value state the common model covers: key → user key → value.
type MapModel = BTreeMap<u32, BTreeMap<u32, u64>>;

fn map_writes(b: &KeyedBackend, model: &mut MapModel, round: u64) {
    let m = b.map_state::<u32, (), u32, u64>("m").unwrap();
    for k in 0..40u32 {
        let uk = (k * 7 + round as u32) % 5;
        if (k + round as u32).is_multiple_of(4) {
            m.remove(&k, &(), &uk).unwrap();
            if let Some(e) = model.get_mut(&k) {
                e.remove(&uk);
            }
        } else {
            let v = round * 1000 + u64::from(k);
            m.put(&k, &(), &uk, &v).unwrap();
            model.entry(k).or_default().insert(uk, v);
        }
    }
    model.retain(|_, e| !e.is_empty());
}

fn read_map(b: &KeyedBackend) -> MapModel {
    let m = b.map_state::<u32, (), u32, u64>("m").unwrap();
    (0..40u32)
        .filter(|k| owns(b, *k))
        .filter_map(|k| {
            let e: BTreeMap<u32, u64> = m.entries(&k, &()).unwrap().into_iter().collect();
            (!e.is_empty()).then_some((k, e))
        })
        .collect()
}

fn owned_map(b: &KeyedBackend, model: &MapModel) -> MapModel {
    model
        .iter()
        .filter(|(k, _)| owns(b, **k))
        .map(|(k, e)| (*k, e.clone()))
        .collect()
}

/// With a table after every checkpoint and a fan-out of 2, the tables count the log
/// checkpoints in binary: after `n` of them, one table per bit of `n`, the highest first, of
/// level bit + 1. A map state registered after the materialization reaches the restore
/// through the tables alone (its column family and its registration).
fn tables_are_built_and_merged_and_restore_exactly(fx: Fixture) {
    let b = fx.open("a", table_options(1, 2));
    let id = b.backend_id().to_string();
    let (mut model, mut r) = materialize_then_log(&b, 31, 6000, 0, 0);
    let mut maps = MapModel::new();
    let mut before: Option<CheckpointManifest> = None;
    for n in 1..=7u64 {
        let cp = n + 1;
        random_writes(&b, &mut model, &mut r, 200);
        map_writes(&b, &mut maps, n);
        let s = b.checkpoint(cp).unwrap();
        assert!(!s.materialized);
        assert!(s.log_tables_built >= 1, "checkpoint {cp}: {s:?}");
        assert!(s.log_table_bytes_uploaded > 0);
        b.notify_checkpoint_complete(cp).unwrap();
        let m = fx.manifest(cp, &id);
        let l = log(&m);
        assert_eq!(assert_chain(l), log_end(l), "every segment is in a table");
        let levels: Vec<u8> = l.tables.iter().map(|t| t.level).collect();
        let expected: Vec<u8> = (0..8u8)
            .rev()
            .filter(|bit| n >> bit & 1 == 1)
            .map(|bit| bit + 1)
            .collect();
        assert_eq!(levels, expected, "after {n} log checkpoints");
        // Tables the previous checkpoint named and no merge replaced are referenced as they
        // are, not built again.
        if let Some(prev) = &before {
            let kept = log(prev)
                .tables
                .iter()
                .filter(|t| l.tables.contains(t))
                .count();
            assert_eq!(kept + s.log_tables_built, l.tables.len(), "checkpoint {cp}");
        }
        let (restored, report) = KeyedBackend::builder(fx.path(&format!("r{cp}")))
            .options(small_options())
            .checkpoint_storage(fx.storage_dyn())
            .restore_with_report(RestoreFrom::Latest)
            .unwrap();
        assert_eq!(report.log_tables, l.tables.len(), "{report:?}");
        assert_eq!(report.log_segments, 0, "{report:?}");
        assert_eq!(read_all(&restored), model, "restore of checkpoint {cp}");
        assert_eq!(read_map(&restored), maps, "restore of checkpoint {cp}");
        before = Some(m);
    }
    // Storage holds what the retained checkpoint names and nothing else.
    assert!(assert_verified(fx.storage.as_ref()).is_empty());

    // Into two halves: each ingests the whole tables, and the rescale keeps its own groups.
    for (i, name) in ["h0", "h1"].into_iter().enumerate() {
        let half = KeyedBackend::builder(fx.path(name))
            .options(small_options())
            .key_groups(KeyGroupRange::for_operator(128, 2, i as u32).unwrap())
            .checkpoint_storage(fx.storage_dyn())
            .checkpoint_options(CheckpointOptions {
                local_recovery: false,
                ..CheckpointOptions::default()
            })
            .restore(RestoreFrom::Latest)
            .unwrap();
        assert_eq!(read_all(&half), owned_part(&half, &model), "half {i}");
        assert_eq!(read_map(&half), owned_map(&half, &maps), "half {i}");
    }
}

/// Segments written without tables get them once a restored backend with tables checkpoints
/// (built from segments it fetches back from storage); a backend restored from that keeps
/// its tables without building more, and its restore ingests them and replays the segment
/// after them.
fn a_restored_backend_keeps_the_tables_and_builds_on_them(fx: Fixture) {
    let b = fx.open("a", table_options(u64::MAX, 4));
    let (mut model, mut r) = materialize_then_log(&b, 32, 6000, 2, 300);
    assert!(log(&fx.manifest(3, b.backend_id())).tables.is_empty());
    drop(b);

    let restore = |name: &str, opts: CheckpointOptions| fx.restore_reported(name, opts);
    let (b, report) = restore("b", table_options(1, 4));
    assert_eq!((report.log_tables, report.log_segments), (0, 2));
    random_writes(&b, &mut model, &mut r, 300);
    let s = b.checkpoint(4).unwrap();
    assert!(!s.materialized);
    assert_eq!(s.log_tables_built, 1);
    b.notify_checkpoint_complete(4).unwrap();
    let m4 = fx.manifest(4, b.backend_id());
    let l4 = log(&m4);
    assert_eq!(l4.segments.len(), 3);
    assert_eq!(l4.tables.len(), 1);
    assert_eq!(assert_chain(l4), log_end(l4));
    drop(b);

    let (c, report) = restore("c", table_options(u64::MAX, 4));
    assert_eq!((report.log_tables, report.log_segments), (1, 0));
    assert_eq!(read_all(&c), model);
    random_writes(&c, &mut model, &mut r, 300);
    let s = c.checkpoint(5).unwrap();
    assert_eq!(s.log_tables_built, 0);
    c.notify_checkpoint_complete(5).unwrap();
    let m5 = fx.manifest(5, c.backend_id());
    assert_eq!(log(&m5).tables, l4.tables, "the restored tables, kept");
    drop(c);

    let (d, report) = restore("d", CheckpointOptions::default());
    assert_eq!(
        (report.log_tables, report.log_segments),
        (1, 1),
        "{report:?}"
    );
    assert_eq!(read_all(&d), model);
    assert!(assert_verified(fx.storage.as_ref()).is_empty());
}

/// Checkpoint 3 (two log checkpoints, every segment in a table) in storage: the backend id
/// and its manifest.
fn tabled_checkpoint(fx: &Fixture) -> (String, CheckpointManifest) {
    let b = fx.open("a", table_options(1, 4));
    materialize_then_log(&b, 33, 4000, 2, 300);
    let m = fx.manifest(3, b.backend_id());
    assert_eq!(log(&m).tables.len(), 2);
    (b.backend_id().to_string(), m)
}

fn expect_corrupt(fx: &Fixture, file: &str, detail: &str) {
    match fx.restore("r", RestoreFrom::Latest) {
        Err(Error::CheckpointCorrupt { file: f, detail: d }) => {
            assert_eq!(f, file);
            assert!(d.contains(detail), "{d}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("restored a checkpoint with a bad log table"),
    }
    assert!(!fx.path("r").exists());
}

#[test]
fn a_damaged_table_file_is_refused_at_restore_and_by_verify() {
    let fx = Fixture::new();
    let (_, m) = tabled_checkpoint(&fx);
    let name = log(&m).tables[1].files[0].remote_name.clone();
    fx.damage_object(&name, |b| {
        let middle = b.len() / 2;
        b[middle] ^= 0x40;
    });
    expect_corrupt(&fx, &name, "crc32");
    let report = rockstate::verify_checkpoints(fx.storage.as_ref()).unwrap();
    assert!(
        report.problems.iter().any(|(f, _)| *f == name),
        "{report:?}"
    );
}

#[test]
fn a_missing_table_file_is_refused_at_restore() {
    let fx = Fixture::new();
    let (_, m) = tabled_checkpoint(&fx);
    let name = log(&m).tables[0].files[0].remote_name.clone();
    std::fs::remove_file(fx.local_root().join(&name)).unwrap();
    expect_corrupt(&fx, &name, "missing");
}

#[test]
fn a_table_file_that_is_no_sst_is_refused_even_behind_a_matching_checksum() {
    let fx = Fixture::new();
    let (backend, m) = tabled_checkpoint(&fx);
    let name = log(&m).tables[0].files[0].remote_name.clone();
    let bytes = fx.damage_object(&name, |b| *b = vec![0x5a; 4096]);
    fx.edit_manifest(3, &backend, |m| {
        let f = &mut m.changelog.as_mut().unwrap().tables[0].files[0];
        (f.size, f.crc32) = (bytes.len() as u64, crc32fast::hash(&bytes));
    });
    expect_corrupt(&fx, &name, "not a valid SST");
}

#[test]
fn tables_that_do_not_follow_the_log_are_refused() {
    let meta = |backend: &str| rockstate::checkpoint::layout::metadata_name(3, backend);
    // The second table starts after a gap.
    let fx = Fixture::new();
    let (backend, _) = tabled_checkpoint(&fx);
    fx.edit_manifest(3, &backend, |m| {
        m.changelog.as_mut().unwrap().tables[1].first_seq += 1;
    });
    expect_corrupt(&fx, &meta(&backend), "does not follow");
    // A table ending inside a segment.
    let fx = Fixture::new();
    let (backend, _) = tabled_checkpoint(&fx);
    fx.edit_manifest(3, &backend, |m| {
        let l = m.changelog.as_mut().unwrap();
        l.tables.truncate(1);
        l.tables[0].end_seq -= 1;
    });
    expect_corrupt(&fx, &meta(&backend), "ends inside segment");
    // A table past the log's end.
    let fx = Fixture::new();
    let (backend, _) = tabled_checkpoint(&fx);
    fx.edit_manifest(3, &backend, |m| {
        m.changelog.as_mut().unwrap().tables[1].end_seq += 1;
    });
    expect_corrupt(&fx, &meta(&backend), "past the log");
}

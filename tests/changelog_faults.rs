//! Changelog mode under failures (docs/ownership.md §4): a log checkpoint whose upload fails,
//! or that the job aborts, loses no change (the next checkpoint carries it); a damaged or
//! missing log segment is a typed error at restore and a problem for `verify`, never a
//! silently older state; a backend that writes more than its log buffer holds materializes.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::sync::Arc;

use common::*;
use rockstate::{
    CheckpointOptions, CheckpointStorage, Error, Fault, FaultyStorage, KeyedBackend, OpKind,
    RestoreFrom,
};

fn changelog() -> CheckpointOptions {
    changelog_options(100_000)
}

fn open(
    fx: &Fixture,
    storage: Arc<dyn CheckpointStorage>,
    opts: CheckpointOptions,
) -> KeyedBackend {
    KeyedBackend::builder(fx.path("a"))
        .options(small_options())
        .checkpoint_storage(storage)
        .checkpoint_options(opts)
        .open()
        .unwrap()
}

#[test]
fn a_failed_log_upload_loses_no_change() {
    let fx = Fixture::new();
    let faulty = Arc::new(FaultyStorage::new(fx.storage_dyn()));
    let b = open(&fx, faulty.clone(), changelog());
    let (mut model, mut r) = materialize_then_log(&b, 21, 4000, 0, 0);

    // Checkpoint 2's segment upload fails; its changes must reach checkpoint 3.
    random_writes(&b, &mut model, &mut r, 300);
    let puts = faulty.ops(OpKind::PutFile);
    faulty.add_fault(Fault::FailNth {
        op: OpKind::PutFile,
        nth: puts + 1,
    });
    assert!(b.checkpoint(2).is_err());
    faulty.clear_faults();
    random_writes(&b, &mut model, &mut r, 300);
    let s3 = b.checkpoint(3).unwrap();
    assert!(!s3.materialized);
    b.notify_checkpoint_complete(3).unwrap();
    let restored = fx.restore("r", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model);
    assert!(assert_verified(fx.storage.as_ref()).is_empty());
}

/// A put that stores only part of a log table (and says so) fails the log checkpoint, like a
/// short SST upload: a manifest naming the short table, committed, would be a completed
/// checkpoint that cannot be restored.
#[test]
fn a_log_table_stored_short_fails_its_checkpoint() {
    let fx = Fixture::new();
    let faulty = Arc::new(FaultyStorage::new(fx.storage_dyn()));
    let mut opts = changelog();
    opts.changelog.table_bytes = 1; // every log checkpoint builds a table
    let b = open(&fx, faulty.clone(), opts);
    let (mut model, mut r) = materialize_then_log(&b, 5, 4000, 0, 0);
    random_writes(&b, &mut model, &mut r, 300);
    // Checkpoint 2 puts its one new segment, then its table's file, which is stored short.
    let puts = faulty.ops(OpKind::PutFile);
    faulty.add_fault(Fault::TruncateNth { nth: puts + 2 });
    let e = b.checkpoint(2).unwrap_err();
    assert!(matches!(e, Error::CheckpointCorrupt { .. }), "{e}");
    faulty.clear_faults();
    random_writes(&b, &mut model, &mut r, 300);
    let s3 = b.checkpoint(3).unwrap();
    assert!(!s3.materialized && s3.log_tables_built >= 1, "{s3:?}");
    b.notify_checkpoint_complete(3).unwrap();
    let restored = fx.restore("r", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model);
    assert!(assert_verified(fx.storage.as_ref()).is_empty());
}

#[test]
fn an_aborted_log_checkpoint_loses_no_change() {
    let fx = Fixture::new();
    let b = fx.open("a", changelog());
    let (mut model, mut r) = materialize_then_log(&b, 22, 4000, 0, 0);
    random_writes(&b, &mut model, &mut r, 300);
    b.checkpoint(2).unwrap();
    b.notify_checkpoint_aborted(2).unwrap();
    random_writes(&b, &mut model, &mut r, 300);
    b.checkpoint(3).unwrap();
    b.notify_checkpoint_complete(3).unwrap();
    let restored = fx.restore("r", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model);
    assert!(assert_verified(fx.storage.as_ref()).is_empty());
}

/// Checkpoint 2 (a log checkpoint) in storage: the backend id and the name of its one
/// segment.
fn log_checkpoint(fx: &Fixture) -> (String, String) {
    let b = fx.open("a", changelog());
    materialize_then_log(&b, 23, 4000, 1, 300);
    let m = fx.manifest(2, b.backend_id());
    let segments = &m.changelog.as_ref().unwrap().segments;
    assert_eq!(segments.len(), 1);
    (b.backend_id().to_string(), segments[0].remote_name.clone())
}

#[test]
fn a_damaged_segment_is_refused_at_restore_and_by_verify() {
    let fx = Fixture::new();
    let (_, name) = log_checkpoint(&fx);
    fx.damage_object(&name, |b| {
        let middle = b.len() / 2;
        b[middle] ^= 0x40;
    });
    match fx.restore("r", RestoreFrom::Latest) {
        Err(Error::CheckpointCorrupt { file, .. }) => assert_eq!(file, name),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a damaged segment was restored"),
    }
    // The failed restore left neither a backend directory nor scratch space behind (the
    // log is prepared inside the target while the files download).
    assert!(!fx.path("r").exists());
    let left: Vec<_> = std::fs::read_dir(fx.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".rockstate-replay-") || n.starts_with(".rockstate-rescale-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let report = rockstate::verify_checkpoints(fx.storage.as_ref()).unwrap();
    assert!(
        report.problems.iter().any(|(f, _)| *f == name),
        "{report:?}"
    );
}

#[test]
fn a_segment_damaged_behind_a_matching_checksum_is_refused() {
    // The object's CRC-32 matches the manifest (a writer that damaged the segment before
    // computing it): the segment's own checks refuse it.
    let fx = Fixture::new();
    let (backend, name) = log_checkpoint(&fx);
    let bytes = fx.damage_object(&name, |b| b[40] ^= 0x01);
    fx.edit_manifest(2, &backend, |m| {
        m.changelog.as_mut().unwrap().segments[0].crc32 = crc32fast::hash(&bytes);
    });
    match fx.restore("r", RestoreFrom::Latest) {
        Err(Error::CheckpointCorrupt { file, detail }) => {
            assert_eq!(file, name);
            assert!(detail.contains("log segment"), "{detail}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a damaged segment was restored"),
    }
}

#[test]
fn a_segment_holding_other_entries_than_its_manifest_says_is_refused() {
    // An intact segment the manifest counts one entry more in: restore and verify compare
    // the segment's own numbering with the manifest's.
    let fx = Fixture::new();
    let (backend, name) = log_checkpoint(&fx);
    fx.edit_manifest(2, &backend, |m| {
        m.changelog.as_mut().unwrap().segments[0].entries += 1;
    });
    match fx.restore("r", RestoreFrom::Latest) {
        Err(Error::CheckpointCorrupt { file, detail }) => {
            assert_eq!(file, name);
            assert!(detail.contains("holds entries"), "{detail}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a miscounted segment was restored"),
    }
    let report = rockstate::verify_checkpoints(fx.storage.as_ref()).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|(f, why)| *f == name && why.contains("holds entries")),
        "{report:?}"
    );
}

#[test]
fn a_missing_segment_is_refused() {
    let fx = Fixture::new();
    let (_, name) = log_checkpoint(&fx);
    fx.storage.delete(&name).unwrap();
    match fx.restore("r", RestoreFrom::Latest) {
        Err(Error::CheckpointCorrupt { file, .. }) => assert_eq!(file, name),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("restored without a segment"),
    }
}

#[test]
fn more_changes_than_the_buffer_holds_materialize() {
    let fx = Fixture::new();
    let mut opts = changelog();
    opts.changelog.max_log_buffer_bytes = 8 << 10;
    let b = fx.open("a", opts);
    // 100 writes fit in the buffer.
    let (mut model, mut r) = materialize_then_log(&b, 24, 4000, 1, 100);
    random_writes(&b, &mut model, &mut r, 3000);
    assert!(b.checkpoint(3).unwrap().materialized, "3000 writes do not");
    b.notify_checkpoint_complete(3).unwrap();
    random_writes(&b, &mut model, &mut r, 100);
    assert!(!b.checkpoint(4).unwrap().materialized);
    b.notify_checkpoint_complete(4).unwrap();
    let restored = fx.restore("r", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model);
}

#[test]
fn a_range_deletion_in_the_log_is_replayed_in_order() {
    // The recorder never writes one (a range deletion loses the log instead), but the format
    // has them: a segment ending in one clears its range on restore.
    let fx = Fixture::new();
    let b = fx.open("a", changelog());
    let (mut model, _) = materialize_then_log(&b, 25, 4000, 1, 300);
    let backend = b.backend_id().to_string();
    drop(b);

    let old_name = fx.manifest(2, &backend).changelog.unwrap().segments[0]
        .remote_name
        .clone();
    let old = sst_format::decode_log_segment(&fx.storage.get_bytes(&old_name).unwrap()).unwrap();
    let mut builder = sst_format::LogSegmentBuilder::new();
    for e in old.entries() {
        match e.unwrap() {
            sst_format::LogEntry::Put { cf, key, value } => builder.put(cf, key, value),
            sst_format::LogEntry::Delete { cf, key } => builder.delete(cf, key),
            sst_format::LogEntry::DeleteRange { cf, start, end } => {
                builder.delete_range(cf, start, end)
            }
        }
    }
    let cf = old
        .column_families()
        .iter()
        .position(|n| n.ends_with(":v"))
        .unwrap() as u32;
    let group = 7u8;
    builder.delete_range(cf, &[group], &[group + 1]);
    let bytes = builder
        .finish(old.first_seq(), old.column_families(), true)
        .unwrap();
    let replayed = old.count() + 1;
    let new_name = format!("{}0.log", old_name.trim_end_matches(".log"));
    fx.storage.put_bytes(&new_name, &bytes).unwrap();
    fx.edit_manifest(2, &backend, |m| {
        let seg = &mut m.changelog.as_mut().unwrap().segments[0];
        seg.remote_name = new_name;
        seg.size = bytes.len() as u64;
        seg.crc32 = crc32fast::hash(&bytes);
        seg.entries += 1;
    });

    model.retain(|k, _| {
        let key = rockstate::codec::encode(k, "key").unwrap();
        rockstate::keygroup::key_group_of(&key, 128) != u16::from(group)
    });
    let (restored, report) = KeyedBackend::builder(fx.path("r"))
        .options(small_options())
        .checkpoint_storage(fx.storage_dyn())
        .restore_with_report(RestoreFrom::Latest)
        .unwrap();
    assert_eq!(report.log_entries_replayed, replayed, "{report:?}");
    assert_eq!(read_all(&restored), model);
}

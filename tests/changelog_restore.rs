//! Changelog mode (docs/checkpoint-format.md §11): a log checkpoint uploads only the changes
//! since the last checkpoint and references the materialization's SSTs; a materialization
//! happens when the log outgrows its share of the state; restoring any of them yields exactly
//! the state at that checkpoint (invariant 4), and a restored backend's checkpoints continue
//! the restored materialization and log.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::collections::HashSet;

use common::*;
use rockstate::{CheckpointOptions, KeyedBackend, RestoreFrom};

on_every_storage!(
    log_checkpoints_upload_the_change_and_restore_exactly,
    the_log_materializes_when_it_outgrows_its_share,
    a_restored_backend_continues_the_restored_log,
    a_backend_restored_from_another_job_materializes_reusing_nothing_of_it,
    a_log_longer_than_a_replay_batch_replays_batch_by_batch,
);

fn shared(m: &sst_format::CheckpointManifest) -> HashSet<String> {
    m.shared_files
        .iter()
        .map(|f| f.remote_name.clone())
        .collect()
}

fn log(m: &sst_format::CheckpointManifest) -> &sst_format::Changelog {
    m.changelog.as_ref().expect("a changelog-mode manifest")
}

fn log_checkpoints_upload_the_change_and_restore_exactly(fx: Fixture) {
    let b = fx.open("a", changelog_options(100_000));
    let id = b.backend_id().to_string();
    let mut model = Model::new();
    let mut r = rng(11);
    random_writes(&b, &mut model, &mut r, 6000);
    let first = b.checkpoint(1).unwrap();
    assert!(first.materialized);
    b.notify_checkpoint_complete(1).unwrap();
    let m1 = fx.manifest(1, &id);
    assert_eq!(log(&m1).materialization_id, 1);
    assert!(log(&m1).segments.is_empty());
    assert!(!m1.shared_files.is_empty());

    for cp in 2..=5u64 {
        random_writes(&b, &mut model, &mut r, 150);
        let s = b.checkpoint(cp).unwrap();
        assert!(!s.materialized, "checkpoint {cp}");
        assert!(s.log_bytes_uploaded > 0);
        // 150 writes of a 12-byte key and an 8-byte value, against thousands in the files.
        assert!(
            s.log_bytes_uploaded * 5 < first.bytes_uploaded,
            "{} vs {}",
            s.log_bytes_uploaded,
            first.bytes_uploaded
        );
        b.notify_checkpoint_complete(cp).unwrap();
        let m = fx.manifest(cp, &id);
        let l = log(&m);
        assert_eq!(l.materialization_id, 1);
        assert_eq!(
            shared(&m),
            shared(&m1),
            "the materialization's SSTs, referenced"
        );
        assert_eq!(
            l.segments.len() as u64,
            cp - 1,
            "one new segment per checkpoint"
        );
        let mut at = l.materialized_seq;
        for seg in &l.segments {
            assert_eq!(seg.first_seq, at);
            at += seg.entries;
        }
        let restored = fx.restore(&format!("r{cp}"), RestoreFrom::Latest).unwrap();
        assert_eq!(read_all(&restored), model, "restore of checkpoint {cp}");
    }
    assert!(assert_verified(fx.storage.as_ref()).is_empty());
}

fn the_log_materializes_when_it_outgrows_its_share(fx: Fixture) {
    let b = fx.open("a", changelog_options(5));
    let id = b.backend_id().to_string();
    let mut model = Model::new();
    let mut r = rng(12);
    random_writes(&b, &mut model, &mut r, 6000);
    assert!(b.checkpoint(1).unwrap().materialized);
    b.notify_checkpoint_complete(1).unwrap();
    let mut kinds = Vec::new();
    for cp in 2..=14u64 {
        random_writes(&b, &mut model, &mut r, 300);
        let s = b.checkpoint(cp).unwrap();
        kinds.push(s.materialized);
        b.notify_checkpoint_complete(cp).unwrap();
        let m = fx.manifest(cp, &id);
        let l = log(&m);
        if s.materialized {
            assert_eq!((l.materialization_id, l.segments.len()), (cp, 0));
        }
        // The log a checkpoint names never outgrows the share by more than one cut.
        let log_bytes: u64 = l.segments.iter().map(|s| s.size).sum();
        let state: u64 = m.shared_files.iter().map(|f| f.size).sum();
        assert!(
            log_bytes * 100 <= state * 5 + 100 * 4096,
            "{log_bytes} vs {state}"
        );
        // Storage holds only what the retained checkpoint names (retained = 1).
        assert!(assert_verified(fx.storage.as_ref()).is_empty());
        let logs_in_storage = fx
            .storage
            .list("shared/")
            .unwrap()
            .iter()
            .filter(|o| o.name.ends_with(".log"))
            .count();
        assert_eq!(logs_in_storage, l.segments.len(), "after checkpoint {cp}");
    }
    assert!(kinds.contains(&true), "{kinds:?}");
    assert!(kinds.contains(&false), "{kinds:?}");
    let restored = fx.restore("r", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&restored), model);
}

fn a_restored_backend_continues_the_restored_log(fx: Fixture) {
    let b = fx.open("a", changelog_options(100_000));
    let (mut model, mut r) = materialize_then_log(&b, 13, 6000, 1, 200);
    let m2 = fx.manifest(2, b.backend_id());
    drop(b);

    let restored = KeyedBackend::builder(fx.path("r"))
        .options(small_options())
        .checkpoint_storage(fx.storage_dyn())
        .checkpoint_options(changelog_options(100_000))
        .restore(RestoreFrom::Latest)
        .unwrap();
    assert_eq!(read_all(&restored), model);
    random_writes(&restored, &mut model, &mut r, 200);
    // A log checkpoint at once: the restored materialization and segment referenced, only
    // the new changes (and the private-file copies) uploaded.
    let s3 = restored.checkpoint(3).unwrap();
    assert!(!s3.materialized);
    let m3 = fx.manifest(3, restored.backend_id());
    let (l2, l3) = (log(&m2), log(&m3));
    assert_eq!(l3.materialization_id, 1);
    assert_eq!(shared(&m3), shared(&m2));
    assert_eq!(l3.segments.len(), 2);
    assert_eq!(l3.segments[0], l2.segments[0]);
    assert_eq!(
        l3.segments[1].first_seq,
        l2.segments[0].first_seq + l2.segments[0].entries
    );
    assert_eq!(
        s3.log_bytes_uploaded, l3.segments[1].size,
        "only the new segment is uploaded"
    );
    restored.notify_checkpoint_complete(3).unwrap();
    random_writes(&restored, &mut model, &mut r, 200);
    assert!(!restored.checkpoint(4).unwrap().materialized);
    restored.notify_checkpoint_complete(4).unwrap();
    let again = fx.restore("r2", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&again), model);
    assert!(assert_verified(fx.storage.as_ref()).is_empty());
}

/// A restore holds at most `replay_batch_bytes` of log at once: a longer log is fetched,
/// sorted and ingested one batch of segments after another, later batches above earlier
/// ones, so a key written and cleared across batches ends as its last change says.
fn a_log_longer_than_a_replay_batch_replays_batch_by_batch(fx: Fixture) {
    // Few keys, many writes: each key changes in several segments.
    let b = fx.open("a", changelog_options(100_000));
    let (model, _) = materialize_then_log(&b, 17, 3000, 6, 400);
    drop(b);
    let restore = |name: &str, batch: u64| {
        let mut opts = CheckpointOptions::default();
        opts.changelog.replay_batch_bytes = batch;
        fx.restore_reported(name, opts)
    };
    let (whole, whole_report) = restore("whole", u64::MAX);
    assert_eq!(whole_report.log_segments, 6);
    assert_eq!(whole_report.log_batches, 1);
    assert_eq!(read_all(&whole), model);
    // One segment per batch (a batch holds at least one).
    let (batched, report) = restore("batched", 1);
    assert_eq!(report.log_batches, 6);
    assert_eq!(
        report.log_entries_replayed,
        whole_report.log_entries_replayed
    );
    assert_eq!(read_all(&batched), model);
}

fn a_backend_restored_from_another_job_materializes_reusing_nothing_of_it(fx: Fixture) {
    let b = fx.open("a", changelog_options(100_000));
    let (mut model, mut r) = materialize_then_log(&b, 15, 6000, 1, 200);
    drop(b);

    let other = rockstate::LocalStorage::new(fx.path("other-job")).unwrap();
    let restored = KeyedBackend::builder(fx.path("r"))
        .options(small_options())
        .restore_source(fx.storage_dyn())
        .checkpoint_storage(std::sync::Arc::new(other))
        .checkpoint_options(changelog_options(100_000))
        .restore(RestoreFrom::Latest)
        .unwrap();
    assert_eq!(read_all(&restored), model);
    let s = restored.checkpoint(1).unwrap();
    assert!(s.materialized);
    assert_eq!(s.files_reused, 0);
    restored.notify_checkpoint_complete(1).unwrap();
    random_writes(&restored, &mut model, &mut r, 200);
    assert!(!restored.checkpoint(2).unwrap().materialized);
}

/// Local recovery: a log checkpoint's files are its materialization's, whose local copy stays
/// while a retained checkpoint rests on it; a restore on this machine reads them from disk
/// and downloads only the log.
#[test]
fn a_log_checkpoint_restores_its_files_from_the_local_copy() {
    let fx = Fixture::new();
    // The writer stays open while the restore runs beside it.
    let writer = fx.open("a", changelog_options(100_000));
    let (model, _) = materialize_then_log(&writer, 14, 6000, 3, 200);
    let (restored, report) = KeyedBackend::builder(fx.path("r"))
        .options(small_options())
        .checkpoint_storage(fx.storage_dyn())
        .restore_with_report(RestoreFrom::Latest)
        .unwrap();
    assert_eq!(read_all(&restored), model);
    assert!(report.files_local > 0, "{report:?}");
    assert_eq!(report.files_downloaded, 0, "{report:?}");
    assert_eq!(report.log_segments, 3, "{report:?}");
}

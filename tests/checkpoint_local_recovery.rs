//! Local recovery: the files of the retained checkpoints stay on local disk; a
//! restart on the same machine restores from them after verifying them, downloads only what
//! is missing or damaged, and reports the split; copies no restore can use (aborted
//! attempts, a dead backend's uncompleted ones, a gone source's) are deleted, so the staging
//! root stays bounded. Runs on local storage and on S3.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};

use common::*;
use rockstate::checkpoint::layout;
use rockstate::{CheckpointOptions, KeyedBackend, RestoreFrom, RestoreReport};

fn local_copies(fx: &Fixture, backend: &str) -> Vec<u64> {
    let dir = layout::default_staging_root(&fx.path("a")).join(backend);
    let mut ids: Vec<u64> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| layout::parse_local_copy_dir(e.file_name().to_str()?))
                .collect()
        })
        .unwrap_or_default();
    ids.sort_unstable();
    ids
}

fn restore_with_report(fx: &Fixture, name: &str) -> (KeyedBackend, RestoreReport) {
    KeyedBackend::builder(fx.path(name))
        .options(small_options())
        .checkpoint_storage(fx.storage_dyn())
        .restore_with_report(RestoreFrom::Latest)
        .unwrap()
}

/// Flips one byte in the middle of `path` (a fresh inode first, so no hard-linked twin
/// changes with it).
fn damage(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let i = bytes.len() / 2;
    bytes[i] ^= 0x5a;
    std::fs::remove_file(path).unwrap();
    std::fs::write(path, bytes).unwrap();
}

fn restores_from_local_copy_and_downloads_only_the_damage(fx: Fixture) {
    let opts = CheckpointOptions {
        retained: 2,
        ..CheckpointOptions::default()
    };
    let b = fx.open("a", opts);
    let backend = b.backend_id().to_string();
    let mut model = Model::new();
    let mut r = rng(11);
    for id in 1..=4 {
        random_writes(&b, &mut model, &mut r, 2000);
        b.checkpoint(id).unwrap();
        b.notify_checkpoint_complete(id).unwrap();
    }
    // Bounded to the retained checkpoints.
    assert_eq!(local_copies(&fx, &backend), [3, 4]);
    // Uploaded but not completed: kept too, until completion retires older ones.
    random_writes(&b, &mut model, &mut r, 1000);
    b.checkpoint(5).unwrap();
    assert_eq!(local_copies(&fx, &backend), [3, 4, 5]);
    b.notify_checkpoint_complete(5).unwrap();
    assert_eq!(local_copies(&fx, &backend), [4, 5]);
    let manifest = fx.manifest(5, &backend);
    let total: u64 = manifest.shared_files.iter().map(|f| f.size).sum::<u64>()
        + manifest.private_files.iter().map(|f| f.size).sum::<u64>();
    let files = manifest.shared_files.len() + manifest.private_files.len();

    // Restart on the same machine: the database directory is gone, the local copy is not.
    drop(b);
    std::fs::remove_dir_all(fx.path("a")).unwrap();
    let copy: PathBuf =
        layout::local_copy_dir(&layout::default_staging_root(&fx.path("a")), &backend, 5);
    // Damage one SST and lose another file of the copy.
    let mut ssts: Vec<_> = manifest.shared_files.iter().collect();
    ssts.sort_by_key(|f| f.size);
    let damaged = ssts.last().unwrap();
    damage(&copy.join(&damaged.local_name));
    let lost = &manifest.private_files[0];
    std::fs::remove_file(copy.join(&lost.local_name)).unwrap();

    let (restored, report) = restore_with_report(&fx, "a");
    assert_eq!(read_all(&restored), model);
    assert_eq!(report.files_downloaded, 2, "{report:?}");
    assert_eq!(report.bytes_downloaded, damaged.size + lost.size);
    assert_eq!(report.files_local, files - 2);
    assert_eq!(report.bytes_local + report.bytes_downloaded, total);
    assert!(report.checkpoint.ends_with("/_metadata"));
    // The restored backend has a new id; the old one's copies are retired but for the one
    // restored, kept until the restored backend completes a checkpoint of its own.
    assert_eq!(local_copies(&fx, &backend), [5]);

    // Its next checkpoint makes a local copy of its own, which retires the old one's; a
    // restore elsewhere (no copy) downloads everything.
    let new_id = restored.backend_id().to_string();
    restored.checkpoint(6).unwrap();
    restored.notify_checkpoint_complete(6).unwrap();
    assert_eq!(local_copies(&fx, &new_id), [6]);
    assert!(local_copies(&fx, &backend).is_empty());
    let elsewhere = tempfile::tempdir().unwrap();
    let (far, report) = KeyedBackend::builder(elsewhere.path().join("db"))
        .options(small_options())
        .checkpoint_storage(fx.storage_dyn())
        .restore_with_report(RestoreFrom::Latest)
        .unwrap();
    assert_eq!(read_all(&far), model);
    assert_eq!((report.files_local, report.bytes_local), (0, 0));
    assert!(report.bytes_downloaded > 0);
}

fn local_recovery_off_keeps_nothing(fx: Fixture) {
    let opts = CheckpointOptions {
        local_recovery: false,
        ..CheckpointOptions::default()
    };
    let b = fx.open("a", opts);
    let mut model = Model::new();
    random_writes(&b, &mut model, &mut rng(5), 2000);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    assert!(local_copies(&fx, b.backend_id()).is_empty());
}

/// A backend that kept local copies, restored by one with local recovery switched off: the
/// restore downloads everything, and the gone source's copies are retired all the same
/// (nothing else would ever delete them).
fn a_restore_with_local_recovery_off_retires_the_sources_copies(fx: Fixture) {
    let b = fx.open("a", CheckpointOptions::default());
    let backend = b.backend_id().to_string();
    let mut model = Model::new();
    random_writes(&b, &mut model, &mut rng(6), 2000);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    assert_eq!(local_copies(&fx, &backend), [1]);
    drop(b);
    let (r, report) = KeyedBackend::builder(fx.path("r"))
        .options(small_options())
        .checkpoint_storage(fx.storage_dyn())
        .checkpoint_options(CheckpointOptions {
            local_recovery: false,
            ..CheckpointOptions::default()
        })
        .restore_with_report(RestoreFrom::Latest)
        .unwrap();
    assert_eq!(read_all(&r), model);
    assert_eq!(report.files_local, 0, "{report:?}");
    assert!(
        local_copies(&fx, &backend).is_empty(),
        "the gone source's local copies stay"
    );
}

/// Checkpoints the job aborts (a task declined, a timeout) after their upload: an uploaded
/// checkpoint that did not complete never will, so its local copy goes with the abort (as
/// Flink's `TaskLocalStateStore::abortCheckpoint` discards it); a job whose checkpoints keep
/// being aborted does not grow its staging root by a RocksDB checkpoint per attempt.
fn aborted_checkpoints_leave_no_local_copies(fx: Fixture) {
    let b = fx.open("a", CheckpointOptions::default());
    let backend = b.backend_id().to_string();
    let mut model = Model::new();
    let mut r = rng(3);
    random_writes(&b, &mut model, &mut r, 500);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    assert_eq!(local_copies(&fx, &backend), [1]);
    // Ten checkpoints uploaded, each aborted by the job (another task declined it).
    for id in 2..=11 {
        random_writes(&b, &mut model, &mut r, 500);
        b.checkpoint(id).unwrap();
        b.notify_checkpoint_aborted(id).unwrap();
        // Storage forgot the attempt...
        assert!(
            fx.objects()
                .keys()
                .all(|k| !k.contains(&format!("chk-{id}/"))),
            "attempt {id} still in storage"
        );
    }
    // ...and so must the staging root: only the last completed checkpoint's copy is useful.
    assert_eq!(
        local_copies(&fx, &backend),
        [1],
        "local copies of aborted checkpoints stay on disk"
    );
}

/// `(backend id, checkpoint id)` of every local copy under `staging_root`.
fn all_local_copies(staging_root: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for b in std::fs::read_dir(staging_root)
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = b.file_name().to_string_lossy().into_owned();
        for c in std::fs::read_dir(b.path()).into_iter().flatten().flatten() {
            if let Some(id) = layout::parse_local_copy_dir(c.file_name().to_str().unwrap()) {
                out.push((name.clone(), id));
            }
        }
    }
    out.sort();
    out
}

/// A job restarting on the same machine from its last completed checkpoint, each run uploading
/// a checkpoint that never completes before it dies (another task failed, or a kill between
/// upload and completion): each run's backend is new, and no restore uses its copy. Every run
/// restores from the first backend's copy of checkpoint 1; the staging root keeps that and at
/// most the last run's attempt, not one RocksDB checkpoint per restart.
fn a_restart_loop_does_not_pile_up_local_copies(fx: Fixture) {
    let staging_root = layout::default_staging_root(&fx.path("a"));
    let first = fx.open("a", CheckpointOptions::default());
    let mut model = Model::new();
    let mut r = rng(9);
    random_writes(&first, &mut model, &mut r, 1000);
    first.checkpoint(1).unwrap();
    first.notify_checkpoint_complete(1).unwrap();
    let first_id = first.backend_id().to_string();
    drop(first);

    const RUNS: u64 = 6;
    for run in 0..RUNS {
        // Restart on the same machine: the database directory is replaced by a restore of
        // the last completed checkpoint (1: nothing after it ever completes).
        std::fs::remove_dir_all(fx.path("a")).unwrap();
        let (b, report) = KeyedBackend::builder(fx.path("a"))
            .options(small_options())
            .checkpoint_storage(fx.storage_dyn())
            .checkpoint_options(CheckpointOptions::default())
            .restore_with_report(RestoreFrom::Latest)
            .unwrap();
        assert_eq!(read_all(&b), model, "run {run} restored the wrong state");
        assert_eq!(report.files_downloaded, 0, "run {run}: {report:?}");
        // The run writes on and uploads its next checkpoint, then dies before it completes.
        let mut scratch = model.clone();
        random_writes(&b, &mut scratch, &mut r, 1000);
        b.checkpoint(2 + run).unwrap();
        drop(b);
    }
    let copies = all_local_copies(&staging_root);
    // A dead backend's copy of a checkpoint that never completed can never be restored; at
    // most the last run's attempt may still be there, beside the copy of checkpoint 1 every
    // run restored from.
    assert!(copies.contains(&(first_id, 1)), "{copies:?}");
    assert!(
        copies.len() <= 2,
        "{} local copies after {RUNS} restarts (one more per restart): {copies:?}",
        copies.len()
    );
    // Nor one (empty) backend directory per restart.
    let dirs = std::fs::read_dir(&staging_root).unwrap().count();
    assert!(
        dirs <= 2,
        "{dirs} backend directories after {RUNS} restarts"
    );
}

/// A job restarting on the same machine whose restarted run dies before any checkpoint of its
/// own completes (a crash loop faster than the checkpoint interval): every restart restores the
/// same checkpoint, and each finds it on local disk. The restored backend has a new id, so the
/// source's copy of that checkpoint is kept until the restored backend's first completed
/// checkpoint, which then retires it.
fn a_restart_that_dies_before_its_first_completion_restores_locally_again(fx: Fixture) {
    let staging_root = layout::default_staging_root(&fx.path("a"));
    let first = fx.open("a", CheckpointOptions::default());
    let source = first.backend_id().to_string();
    let mut model = Model::new();
    let mut r = rng(12);
    random_writes(&first, &mut model, &mut r, 2000);
    first.checkpoint(1).unwrap();
    first.notify_checkpoint_complete(1).unwrap();
    let manifest = fx.manifest(1, &source);
    let files = manifest.shared_files.len() + manifest.private_files.len();
    drop(first);

    for run in 0..3u64 {
        std::fs::remove_dir_all(fx.path("a")).unwrap();
        let (b, report) = restore_with_report(&fx, "a");
        assert_eq!(read_all(&b), model, "run {run} restored the wrong state");
        assert_eq!(
            (report.files_local, report.files_downloaded),
            (files, 0),
            "run {run} did not restore from the local copy: {report:?}"
        );
        // The run writes on and uploads a checkpoint, then dies before it completes.
        let mut scratch = model.clone();
        random_writes(&b, &mut scratch, &mut r, 500);
        b.checkpoint(2 + run).unwrap();
        drop(b);
    }

    // A run that completes a checkpoint of its own retires the source's copy.
    std::fs::remove_dir_all(fx.path("a")).unwrap();
    let (b, report) = restore_with_report(&fx, "a");
    assert_eq!(report.files_downloaded, 0, "{report:?}");
    assert_eq!(local_copies(&fx, &source), [1]);
    random_writes(&b, &mut model, &mut r, 500);
    b.checkpoint(10).unwrap();
    b.notify_checkpoint_complete(10).unwrap();
    assert_eq!(
        all_local_copies(&staging_root),
        [(b.backend_id().to_string(), 10)],
        "copies no restart would use stay"
    );
    let dirs = std::fs::read_dir(&staging_root).unwrap().count();
    assert_eq!(dirs, 1, "backend directories of gone backends stay");
    drop(b);
    std::fs::remove_dir_all(fx.path("a")).unwrap();
    let (again, report) = restore_with_report(&fx, "a");
    assert_eq!(read_all(&again), model);
    assert_eq!(report.files_downloaded, 0, "{report:?}");
}

/// Changelog mode: a backend restored as it is goes on logging on the restored
/// materialization, so its checkpoints name another backend's materialization. Restarts
/// restoring those checkpoints, one after another, each find the materialization's files on
/// local disk, whether the run before completed a checkpoint of its own or died first.
fn changelog_restarts_find_the_materialization_locally(fx: Fixture) {
    let first = fx.open("a", changelog_options(100_000));
    let (mut model, mut r) = materialize_then_log(&first, 13, 3000, 1, 200);
    let source = first.backend_id().to_string();
    let materialization = fx.manifest(2, &source);
    let files = materialization.shared_files.len() + materialization.private_files.len();
    drop(first);

    for run in 0..4u64 {
        let id = 3 + run;
        std::fs::remove_dir_all(fx.path("a")).unwrap();
        let (b, report) = KeyedBackend::builder(fx.path("a"))
            .options(small_options())
            .checkpoint_storage(fx.storage_dyn())
            .checkpoint_options(changelog_options(100_000))
            .restore_with_report(RestoreFrom::Latest)
            .unwrap();
        assert_eq!(read_all(&b), model, "run {run} restored the wrong state");
        assert_eq!(
            report.files_local, files,
            "run {run} did not take the materialization from local disk: {report:?}"
        );
        // Odd runs complete a log checkpoint of their own before they die, even runs die
        // first.
        let mut written = model.clone();
        random_writes(&b, &mut written, &mut r, 200);
        let stats = b.checkpoint(id).unwrap();
        assert!(!stats.materialized, "run {run}");
        if run % 2 == 1 {
            b.notify_checkpoint_complete(id).unwrap();
            model = written;
        }
        drop(b);
    }
}

on_every_storage!(
    changelog_restarts_find_the_materialization_locally,
    a_restart_that_dies_before_its_first_completion_restores_locally_again,
    restores_from_local_copy_and_downloads_only_the_damage,
    aborted_checkpoints_leave_no_local_copies,
    a_restart_loop_does_not_pile_up_local_copies,
    local_recovery_off_keeps_nothing,
    a_restore_with_local_recovery_off_retires_the_sources_copies,
    a_restore_beside_the_live_writer_leaves_its_files_alone,
);

/// A restore on the same machine while the backend it restores from still runs (a task
/// restarted beside one not yet torn down, a restore to inspect a running job): it takes
/// files from the writer's local copies but retires nothing of a backend that still holds
/// its staging directory. The writer's copies stay, and so do its changelog segments not yet
/// uploaded, which its next checkpoint uploads.
fn a_restore_beside_the_live_writer_leaves_its_files_alone(fx: Fixture) {
    let writer = fx.open("a", changelog_options(100_000));
    let backend = writer.backend_id().to_string();
    let (mut model, mut r) = materialize_then_log(&writer, 15, 4000, 1, 200);
    // Cut into a local segment and not uploaded yet when the restore runs.
    random_writes(&writer, &mut model, &mut r, 200);
    let pending = writer.snapshot(3).unwrap();
    let (restored, report) = restore_with_report(&fx, "r");
    assert!(report.files_local > 0, "{report:?}");
    assert_eq!(local_copies(&fx, &backend), [1]);
    drop(restored);
    assert!(!pending.upload().unwrap().materialized);
    writer.notify_checkpoint_complete(3).unwrap();
    let (again, _) = restore_with_report(&fx, "r3");
    assert_eq!(read_all(&again), model);
}

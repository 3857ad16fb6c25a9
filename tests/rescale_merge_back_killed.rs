//! A process killed (`kill -9`) right after a merge that rebuilt the base's column families
//! (2 → 1 right after 1 → 2: each state's clip file dropped,
//! docs/decisions/0044-merge-back-drops-level-0-clips.md) returned, before any write,
//! checkpoint or close: its directory reopens as the merged backend. The rebuilt column
//! families (dropped, created again and their files ingested back) are durable when the
//! restore returns; the reopened backend reads the whole model, and so does a restore of its
//! next checkpoint.

mod rescale_common;

use std::path::Path;
use std::sync::Arc;

use rand::SeedableRng;
use rescale_common::process::{kill_child_once_written, publish_and_wait_to_be_killed};
use rescale_common::*;
use rockstate::{
    CheckpointOptions, CheckpointStorage, KeyGroupRange, KeyedBackend, LocalStorage, RestoreFrom,
};

/// `<work dir>` of the child.
const CHILD_ENV: &str = "ROCKSTATE_MERGE_BACK_KILLED_CHILD";

fn storage_in(work: &Path) -> Arc<dyn CheckpointStorage> {
    Arc::new(LocalStorage::new(work.join("storage")).unwrap())
}

/// The merged instance under `work/target`: every key group, compactions off (the rebuilt
/// files stay as the merge left them).
fn merged_builder(work: &Path, storage: &Arc<dyn CheckpointStorage>) -> rockstate::BackendBuilder {
    KeyedBackend::builder(work.join("target"))
        .options(small_options_without_compaction())
        .max_parallelism(M)
        .key_groups(KeyGroupRange::all(M).unwrap())
        .checkpoint_storage(Arc::clone(storage))
        .job_owner(owner_of(storage, 1))
}

#[test]
fn a_merge_that_rebuilt_column_families_killed_right_after_reopens_as_merged() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let storage = storage_in(work);
    let opts = CheckpointOptions::default();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(15);
    let mut model = Model::default();
    let src = open_fresh(work, &storage, "src", 1, &opts).remove(0);
    random_ops(&src, &mut model, &mut rng, 3000);
    checkpoint_job(&storage, &[&src], 1);
    drop(src);
    let halves = restore_all_with(
        work,
        &storage,
        "h",
        2,
        &opts,
        RestoreFrom::Checkpoint(1),
        &small_options_without_compaction(),
    );
    checkpoint_job(&storage, &halves.iter().collect::<Vec<_>>(), 2);
    drop(halves);

    let published = kill_child_once_written(
        "merge_child",
        (CHILD_ENV, work.display().to_string()),
        &work.join("merged"),
        &work.join("child.stderr"),
    );
    let (merged_id, dropped) = published.split_once(' ').unwrap();
    assert!(dropped.parse::<usize>().unwrap() > 0, "{published}");

    // Reopened, not restored.
    let reopened = merged_builder(work, &storage).open().unwrap();
    assert_eq!(reopened.backend_id(), merged_id);
    check_all(std::slice::from_ref(&reopened), &model);
    checkpoint_job(&storage, &[&reopened], 3);
    drop(reopened);
    let (again, _) = restore_one_with(work, &storage, "again", 3, &small_options());
    check_all(std::slice::from_ref(&again), &model);
}

/// Entry point of the child process; does nothing unless started by the test above.
#[test]
#[ignore = "child process of a_merge_that_rebuilt_column_families_killed_right_after_reopens_as_merged"]
fn merge_child() {
    let Ok(work) = std::env::var(CHILD_ENV) else {
        return;
    };
    let work = Path::new(&work);
    let storage = storage_in(work);
    let (merged, report) = merged_builder(work, &storage)
        .restore_with_report(RestoreFrom::Checkpoint(2))
        .unwrap();
    // Killed there, with the backend open and never closed.
    publish_and_wait_to_be_killed(
        &work.join("merged"),
        &format!("{} {}", merged.backend_id(), report.sst_files_dropped),
    );
}

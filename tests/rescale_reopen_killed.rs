//! A process killed (`kill -9`) right after a rescaling restore returned, before any write,
//! checkpoint or close: its directory reopens as the restored backend. The target range, the
//! new backend id and the clip of the key groups it gave away are durable when the restore
//! returns (WAL off, so nothing left in a memtable survives the kill); the reopened backend
//! reads exactly its part of the state, and its next checkpoint restores without data
//! outside its key groups.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::path::Path;
use std::sync::Arc;

use common::process::{kill_child_once_written, publish_and_wait_to_be_killed};
use common::*;
use rockstate::{CheckpointOptions, LocalStorage, RestoreFrom};

/// `<work dir>|<storage root>` of the child.
const CHILD_ENV: &str = "ROCKSTATE_RESCALE_REOPEN_KILLED_CHILD";

#[test]
fn a_rescaled_directory_killed_before_its_first_checkpoint_reopens_as_restored() {
    let fx = Fixture::new();
    let source = fx.open("a", CheckpointOptions::default());
    let source_id = source.backend_id().to_string();
    let mut model = Model::new();
    let mut r = rng(8);
    random_writes(&source, &mut model, &mut r, 3000);
    source.checkpoint(1).unwrap();
    source.notify_checkpoint_complete(1).unwrap();
    drop(source);

    let work = fx.dir.path();
    let target = work.join("target");
    let restored_id = kill_child_once_written(
        "reopen_child",
        (
            CHILD_ENV,
            format!("{}|{}", work.display(), fx.local_root().display()),
        ),
        &work.join("restored-id"),
        &work.join("child.stderr"),
    );
    assert_ne!(restored_id, source_id);

    // Reopened, not restored: the stored range must equal the builder's, else the open fails.
    let reopened = first_half_builder(&target, fx.storage_dyn())
        .open()
        .unwrap();
    assert_eq!(reopened.backend_id(), restored_id);
    let owned = owned_part(&reopened, &model);
    assert!(!owned.is_empty() && owned.len() < model.len());
    assert_eq!(read_all(&reopened), owned);

    // A restore of its next checkpoint checks that no state holds a key outside the range:
    // an unclipped database fails it with `DataOutsideKeyGroups`.
    reopened.checkpoint(2).unwrap();
    reopened.notify_checkpoint_complete(2).unwrap();
    drop(reopened);
    let again = first_half_builder(&work.join("again"), fx.storage_dyn())
        .restore(RestoreFrom::Checkpoint(2))
        .unwrap();
    assert_eq!(read_all(&again), owned);
}

/// Entry point of the child process; does nothing unless started by the test above.
#[test]
#[ignore = "child process of a_rescaled_directory_killed_before_its_first_checkpoint_reopens_as_restored"]
fn reopen_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (work, root) = spec.split_once('|').unwrap();
    let storage = Arc::new(LocalStorage::new(root).unwrap());
    let work = Path::new(work);
    let restored = first_half_builder(&work.join("target"), storage)
        .restore(RestoreFrom::Latest)
        .unwrap();
    // Killed there, with the backend open and never closed.
    publish_and_wait_to_be_killed(&work.join("restored-id"), restored.backend_id());
}

//! `KeyedBackend::close` closes the backend "for every clone and state handle: each later call
//! through them returns an error of kind `Closed`", and the path "can be opened again at
//! once". An engine shutting a task down on failover closes the backend while another thread
//! (its checkpoint-notification path) still holds a clone; a completion or abort notification
//! for an uploaded checkpoint may then arrive late, after the directory was reopened.
//! Such a late call must answer `Closed` and change nothing in storage: here it commits a job
//! record through the closed backend's own `JobOwner`, a record the reopened backend's owner
//! never saw, so every later completion of the reopened backend fails with
//! `StorageConflict`.

#[path = "checkpoint_common/mod.rs"]
mod common;

use common::*;
use rockstate::{CheckpointOptions, ErrorKind};

#[test]
fn a_completion_through_a_closed_backends_clone_answers_closed_and_commits_nothing() {
    let fx = Fixture::new();
    let b = fx.open("a", CheckpointOptions::default());
    let v = b.value_state::<u32, (), u64>("v").unwrap();
    for k in 0..100u32 {
        v.put(&k, &(), &u64::from(k)).unwrap();
    }
    // Checkpoint 1 is uploaded (acknowledged) but its completion has not arrived yet.
    b.checkpoint(1).unwrap();
    let notifier = b.clone();
    b.close().unwrap();

    // Failover: the same directory is opened again at once.
    let reopened = fx.open("a", CheckpointOptions::default());

    // The late completion through the closed backend's clone.
    let late = notifier.notify_checkpoint_complete(1);
    let records_after_late =
        rockstate::coordinator::list_job_checkpoints(fx.storage.as_ref()).unwrap();

    // The reopened backend goes on checkpointing and completing.
    let v2 = reopened.value_state::<u32, (), u64>("v").unwrap();
    v2.put(&1, &(), &1000).unwrap();
    reopened.checkpoint(2).unwrap();
    let completed = reopened.notify_checkpoint_complete(2);

    assert!(
        matches!(&late, Err(e) if e.kind() == ErrorKind::Closed) && completed.is_ok(),
        "late completion through the closed backend: {late:?} (job records in storage \
         afterwards: {records_after_late:?}); the reopened backend's completion of \
         checkpoint 2: {completed:?}"
    );
}

#[test]
fn an_abort_through_a_closed_backends_clone_answers_closed_and_deletes_nothing() {
    let fx = Fixture::new();
    let b = fx.open("a", CheckpointOptions::default());
    let v = b.value_state::<u32, (), u64>("v").unwrap();
    for k in 0..100u32 {
        v.put(&k, &(), &u64::from(k)).unwrap();
    }
    b.checkpoint(1).unwrap();
    let notifier = b.clone();
    b.close().unwrap();
    let before = fx.objects();
    let late = notifier.notify_checkpoint_aborted(1);
    let after = fx.objects();
    let deleted: Vec<&String> = before.keys().filter(|k| !after.contains_key(*k)).collect();
    assert!(
        matches!(&late, Err(e) if e.kind() == ErrorKind::Closed) && deleted.is_empty(),
        "late abort through the closed backend: {late:?}; it deleted {deleted:?}"
    );
}

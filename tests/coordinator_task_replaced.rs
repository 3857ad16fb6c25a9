//! A task whose endpoint is replaced (the task failed and was restarted, as a failover does)
//! takes no part in the checkpoints pending when it went: the acknowledgement its old
//! incarnation sent, before or after it went, must not complete them (the new incarnation
//! restored older state and never saw their barriers). They are aborted, as Flink aborts
//! pending checkpoints on a task failure; the next checkpoint completes with the new one.

use std::sync::Arc;
use std::time::Duration;

use rockstate::coordinator::{
    task_checkpoint, AbortReason, Coordinator, CoordinatorConfig, Outcome, TaskEndpoint, Triggered,
};
use rockstate::{LocalStorage, ManualClock};

fn ack(ep: &TaskEndpoint, id: u64) {
    assert!(ep.ack(id, task_checkpoint(ep.task(), None, vec![])));
}

fn started(t: Triggered) -> u64 {
    match t {
        Triggered::Started(id) => id,
        other => panic!("not started: {other:?}"),
    }
}

#[test]
fn checkpoints_pending_when_a_task_was_replaced_are_aborted() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(LocalStorage::new(dir.path()).unwrap().with_fsync(false));
    let mut config = CoordinatorConfig::new("replaced", 2, 128);
    config.timeout = Duration::from_secs(60);
    config.max_concurrent = 2;
    let mut c = Coordinator::new(config, storage, Arc::new(ManualClock::new(1_000))).unwrap();
    let old0 = c.endpoint(0).unwrap();
    let one = c.endpoint(1).unwrap();

    let first = started(c.trigger().unwrap());
    let second = started(c.trigger().unwrap());
    ack(&old0, first);
    assert!(c.poll().unwrap().is_empty());
    // Task 0 fails and is restarted; its old incarnation's report of `second` is still on
    // its way.
    let old_reporter = old0.reporter();
    let new0 = c.endpoint(0).unwrap();
    ack(&one, first);
    assert!(old_reporter.ack(second, task_checkpoint(0, None, vec![])));
    ack(&one, second);
    let outcomes = c.poll().unwrap();
    for id in [first, second] {
        assert!(
            outcomes.iter().any(|o| matches!(
                o,
                Outcome::Aborted { checkpoint_id, reason: AbortReason::TaskGone(0) }
                    if *checkpoint_id == id
            )),
            "checkpoint {id} not aborted: {outcomes:?}"
        );
    }
    assert!(
        !outcomes.iter().any(|o| matches!(o, Outcome::Completed(_))),
        "{outcomes:?}"
    );
    assert_eq!(c.pending(), Vec::<u64>::new());

    // The new incarnation takes part in the next checkpoint.
    let third = started(c.trigger().unwrap());
    ack(&new0, third);
    ack(&one, third);
    let outcomes = c.poll().unwrap();
    assert!(
        matches!(outcomes.as_slice(), [Outcome::Completed(r)] if r.checkpoint_id == third),
        "{outcomes:?}"
    );
}

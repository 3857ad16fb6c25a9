//! Two checkpoints in flight (max_concurrent 2). Checkpoint 1's job record lands but its put
//! reports a failure: the commit is in doubt. Checkpoint 2 commits, and right after it storage
//! stops answering reads, so whether 1's record is there cannot be told. 2's completion subsumes 1:
//! once storage answers again, 1 is not reported or notified as completed after 2 (tasks hear
//! of completions in checkpoint order, Flink's contract that a later completion covers the
//! earlier ones); it ends as aborted, subsumed, after 2's completion.

use std::sync::Arc;
use std::time::Duration;

use rockstate::coordinator::{
    task_checkpoint, AbortReason, Coordinator, CoordinatorConfig, Outcome, TaskCommand,
    TaskEndpoint, Triggered,
};
use rockstate::{CheckpointStorage, Fault, FaultyStorage, LocalStorage, ManualClock, OpKind};

fn started(t: Triggered) -> u64 {
    match t {
        Triggered::Started(id) => id,
        o => panic!("{o:?}"),
    }
}

fn ack(ep: &TaskEndpoint, id: u64) {
    assert!(ep.ack(id, task_checkpoint(ep.task(), None, vec![])));
}

/// Fails the next `n` operations of kind `op`.
fn fail_next(st: &FaultyStorage, op: OpKind, n: u64) {
    let done = st.ops(op);
    for k in 1..=n {
        st.add_fault(Fault::FailNth { op, nth: done + k });
    }
}

#[test]
fn an_older_commit_still_in_doubt_is_subsumed_by_a_newer_completion() {
    let dir = tempfile::tempdir().unwrap();
    let local: Arc<dyn CheckpointStorage> = Arc::new(
        LocalStorage::new(dir.path().join("cp"))
            .unwrap()
            .with_fsync(false),
    );
    let st = Arc::new(FaultyStorage::new(local));
    let mut config = CoordinatorConfig::new("in-doubt-subsumed", 2, 128);
    config.timeout = Duration::from_secs(60);
    config.max_concurrent = 2;
    let mut c = Coordinator::new(config, st.clone(), Arc::new(ManualClock::new(1_000))).unwrap();
    let eps: Vec<TaskEndpoint> = (0..2).map(|t| c.endpoint(t).unwrap()).collect();
    let a = started(c.trigger().unwrap());
    let b = started(c.trigger().unwrap());

    // Checkpoint a: the record lands, the put reports a failure, and no read answers.
    ack(&eps[0], a);
    ack(&eps[1], a);
    st.add_fault(Fault::LandThenFail {
        op: OpKind::PutBytes,
        nth: st.ops(OpKind::PutBytes) + 1,
    });
    fail_next(&st, OpKind::GetBytes, 1_000);
    let mut outcomes = c.poll().unwrap();
    assert!(outcomes.is_empty(), "a is in doubt: {outcomes:?}");
    st.clear_faults();

    // Checkpoint b commits (its commit reads a's record); then storage stops answering
    // reads, so the settling of a that follows cannot tell.
    ack(&eps[0], b);
    ack(&eps[1], b);
    // The commit's own two reads answer; every later one fails (the settling of a among them).
    let g = st.ops(OpKind::GetBytes);
    for n in 3..1_000 {
        st.add_fault(Fault::FailNth {
            op: OpKind::GetBytes,
            nth: g + n,
        });
    }
    outcomes.extend(c.poll().unwrap());
    assert!(
        outcomes
            .iter()
            .any(|o| matches!(o, Outcome::Completed(r) if r.checkpoint_id == b)),
        "b completes: {outcomes:?}"
    );

    // Storage answers again.
    st.clear_faults();
    outcomes.extend(c.tick().unwrap());
    outcomes.extend(c.poll().unwrap());

    let completed: Vec<u64> = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Completed(r) => Some(r.checkpoint_id),
            _ => None,
        })
        .collect();
    assert_eq!(
        completed,
        vec![b],
        "a completion reported after the newer one: {outcomes:?}"
    );
    assert!(
        outcomes.iter().any(|o| matches!(
            o,
            Outcome::Aborted { checkpoint_id, reason: AbortReason::Subsumed } if *checkpoint_id == a
        )),
        "a ends subsumed: {outcomes:?}"
    );
    for ep in &eps {
        let commands: Vec<TaskCommand> = std::iter::from_fn(|| ep.try_recv())
            .filter(|c| !matches!(c, TaskCommand::Trigger { .. }))
            .collect();
        assert_eq!(
            commands,
            vec![
                TaskCommand::Complete { checkpoint_id: b },
                TaskCommand::Abort { checkpoint_id: a }
            ],
            "task {}",
            ep.task()
        );
    }
    // Nothing is left in doubt to settle later.
    assert!(c.tick().unwrap().is_empty());
}

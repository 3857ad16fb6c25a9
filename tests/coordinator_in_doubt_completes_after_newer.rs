//! Two checkpoints in flight (max_concurrent 2). Checkpoint 1's job record lands but its put
//! reports a failure and reading it back fails: the commit is in doubt. Checkpoint 2 then
//! commits (its commit adopts 1's landed record). Checkpoint 1 is settled (reported, and its
//! tasks told) before checkpoint 2: a task hears of completions in checkpoint order, as a
//! two-phase sink that tracks its last committed id expects (Flink's contract that a later
//! completion covers the earlier ones).

use std::sync::Arc;
use std::time::Duration;

use rockstate::coordinator::{
    task_checkpoint, Coordinator, CoordinatorConfig, Outcome, TaskCommand, TaskEndpoint, Triggered,
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

#[test]
fn an_older_commit_in_doubt_is_not_notified_after_a_newer_completion() {
    let dir = tempfile::tempdir().unwrap();
    let local: Arc<dyn CheckpointStorage> = Arc::new(
        LocalStorage::new(dir.path().join("cp"))
            .unwrap()
            .with_fsync(false),
    );
    let st = Arc::new(FaultyStorage::new(local));
    let mut config = CoordinatorConfig::new("in-doubt-order", 2, 128);
    config.timeout = Duration::from_secs(60);
    config.max_concurrent = 2;
    let mut c = Coordinator::new(config, st.clone(), Arc::new(ManualClock::new(1_000))).unwrap();
    let eps: Vec<TaskEndpoint> = (0..2).map(|t| c.endpoint(t).unwrap()).collect();
    let a = started(c.trigger().unwrap());
    let b = started(c.trigger().unwrap());

    // Checkpoint a: the record lands, the put reports a failure, reading it back fails (and
    // so does the resolve attempt of the same poll's tick).
    ack(&eps[0], a);
    ack(&eps[1], a);
    st.add_fault(Fault::LandThenFail {
        op: OpKind::PutBytes,
        nth: st.ops(OpKind::PutBytes) + 1,
    });
    let g = st.ops(OpKind::GetBytes);
    for k in 1..=2 {
        st.add_fault(Fault::FailNth {
            op: OpKind::GetBytes,
            nth: g + k,
        });
    }
    assert!(c.poll().unwrap().is_empty(), "a is in doubt");
    assert_eq!(c.pending(), vec![a, b]);
    st.clear_faults();

    // Checkpoint b commits.
    ack(&eps[0], b);
    ack(&eps[1], b);
    let mut outcomes = c.poll().unwrap();
    outcomes.extend(c.poll().unwrap());
    let order: Vec<u64> = outcomes
        .iter()
        .map(|o| match o {
            Outcome::Completed(r) => r.checkpoint_id,
            Outcome::Aborted { checkpoint_id, .. } => *checkpoint_id,
        })
        .collect();
    let commands: Vec<TaskCommand> = std::iter::from_fn(|| eps[0].try_recv())
        .filter(|c| !matches!(c, TaskCommand::Trigger { .. }))
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "outcomes out of checkpoint order: {outcomes:?}"
    );
    assert!(
        commands.windows(2).all(|w| !matches!(
            (w[0], w[1]),
            (TaskCommand::Complete { checkpoint_id: n }, TaskCommand::Complete { checkpoint_id: m }) if m < n
        )),
        "task 0 told Complete of an older checkpoint after a newer one: {commands:?}"
    );
}

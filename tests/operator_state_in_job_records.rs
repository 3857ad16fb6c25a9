//! Operator state in coordinated checkpoints: each task's acknowledged operator state goes
//! into the job record beside the copy its manifest holds. A completed checkpoint's operator
//! state is always readable: an acknowledged copy that differs from the manifest's, or names
//! one list twice, is refused at commit (the checkpoint aborts), not found at restore; the same
//! lists in another order are the same state.

use std::sync::Arc;
use std::time::Duration;

use rockstate::checkpoint::read_operator_states;
use rockstate::coordinator::{
    task_checkpoint, Coordinator, CoordinatorConfig, Outcome, TaskEndpoint, Triggered,
};
use rockstate::operator_state::{OperatorListState, OperatorState, RedistributionMode};
use rockstate::{KeyGroupRange, KeyedBackend, LocalStorage, ManualClock};

/// A one-task job: its coordinator, the task's endpoint and its backend, linked to the
/// coordinator's owner.
struct Job {
    _dir: tempfile::TempDir,
    storage: Arc<LocalStorage>,
    c: Coordinator,
    ep: TaskEndpoint,
    b: KeyedBackend,
}

fn job() -> Job {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(
        LocalStorage::new(dir.path().join("cp"))
            .unwrap()
            .with_fsync(false),
    );
    let mut config = CoordinatorConfig::new("job", 1, 128);
    config.timeout = Duration::from_secs(60);
    let mut c = Coordinator::new(
        config,
        storage.clone(),
        Arc::new(ManualClock::new(1_000_000)),
    )
    .unwrap();
    let ep = c.endpoint(0).unwrap();
    let b = KeyedBackend::builder(dir.path().join("op-0"))
        .key_groups(KeyGroupRange::for_operator(128, 1, 0).unwrap())
        .checkpoint_storage(storage.clone())
        .job_owner(c.owner().clone())
        .open()
        .unwrap();
    Job {
        _dir: dir,
        storage,
        c,
        ep,
        b,
    }
}

/// Triggers the next checkpoint; its id.
fn started(c: &mut Coordinator) -> u64 {
    match c.trigger().unwrap() {
        Triggered::Started(id) => id,
        o => panic!("{o:?}"),
    }
}

#[test]
fn a_completed_checkpoint_always_has_readable_operator_state() {
    let Job {
        _dir,
        storage,
        mut c,
        ep,
        b,
    } = job();
    let mut completed = Vec::new();
    for offset in [10u64, 20] {
        let id = started(&mut c);
        let mut at_barrier = OperatorState::new();
        at_barrier
            .update("offsets", RedistributionMode::Split, &[offset])
            .unwrap();
        let stats = b.snapshot_with(id, &at_barrier).unwrap().upload().unwrap();
        // The task acknowledges with its state as of the ack, a little later.
        let mut later = OperatorState::new();
        later
            .update("offsets", RedistributionMode::Split, &[offset + 1])
            .unwrap();
        ep.ack(id, task_checkpoint(0, Some((&b, &stats)), later.snapshot()));
        for o in c.poll().unwrap() {
            match o {
                Outcome::Completed(r) => completed.push(r.checkpoint_id),
                o => println!("outcome: {o:?}"),
            }
        }
    }
    // A disagreement is refused at commit, the checkpoint aborted: a completed one (older
    // ones are subsumed and deleted) could not be restored.
    assert!(
        completed.is_empty(),
        "checkpoints {completed:?} completed with operator state other than their manifests': \
         {:?}",
        completed
            .iter()
            .map(|&id| read_operator_states(storage.as_ref(), id))
            .collect::<Vec<_>>()
    );
}

#[test]
fn duplicate_list_names_are_refused_before_completion() {
    let Job {
        _dir,
        storage,
        mut c,
        ep,
        b,
    } = job();
    let id = started(&mut c);
    let stats = b.snapshot(id).unwrap().upload().unwrap();
    let list = |e: u8| OperatorListState {
        name: "offsets".into(),
        mode: RedistributionMode::Split,
        elements: vec![vec![e]],
    };
    ep.ack(
        id,
        task_checkpoint(0, Some((&b, &stats)), vec![list(1), list(2)]),
    );
    match c.poll().unwrap().as_slice() {
        [Outcome::Aborted { .. }] => {}
        o => panic!(
            "checkpoint {id} ended {o:?}; its operator state: {:?}",
            read_operator_states(storage.as_ref(), id)
        ),
    }
}

#[test]
fn the_same_lists_in_another_order_are_the_same_state() {
    let Job {
        _dir,
        storage,
        mut c,
        ep,
        b,
    } = job();
    let id = started(&mut c);
    let mut op = OperatorState::new();
    op.update("offsets", RedistributionMode::Split, &[1u64, 2])
        .unwrap();
    op.update("rules", RedistributionMode::Broadcast, &["r".to_string()])
        .unwrap();
    let stats = b.snapshot_with(id, &op).unwrap().upload().unwrap();
    let mut acked = op.snapshot();
    acked.reverse(); // "rules" before "offsets": the same two lists
    ep.ack(id, task_checkpoint(0, Some((&b, &stats)), acked));
    match c.poll().unwrap().as_slice() {
        [Outcome::Completed(_)] => {}
        o => panic!("{o:?}"),
    }
    let r = read_operator_states(storage.as_ref(), id);
    assert!(
        matches!(&r, Ok(v) if *v == vec![op.clone()]),
        "the operator state of checkpoint {id}: {r:?}"
    );
}

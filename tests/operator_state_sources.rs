//! Operator state where engines put it: a coordinated job's tasks hand theirs to the
//! coordinator with their acknowledgements (the job record holds it), and
//! `checkpoint::read_operator_states` returns it from there when the manifests hold none; no
//! savepoint at all is an error, not every instance's state empty; a broadcast list missing
//! from one old instance is a copy that differs.

use std::sync::Arc;
use std::time::Duration;

use rockstate::checkpoint::read_operator_states;
use rockstate::coordinator::{task_checkpoint, Coordinator, CoordinatorConfig, Outcome, Triggered};
use rockstate::operator_state::{redistribute, OperatorState, RedistributionMode};
use rockstate::{KeyGroupRange, KeyedBackend, LocalStorage, ManualClock};

/// in a coordinated job that follows the coordinator's documented flow (snapshot +
/// upload, ack with `task_checkpoint` carrying the operator state), `read_operator_states`
/// returns Ok with empty states: it reads the job record but ignores its operator state.
#[test]
fn a_coordinated_jobs_operator_state_is_read_from_its_job_record() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(
        LocalStorage::new(dir.path().join("cp"))
            .unwrap()
            .with_fsync(false),
    );
    let mut config = CoordinatorConfig::new("job", 2, 128);
    config.timeout = Duration::from_secs(60);
    let mut c = Coordinator::new(
        config,
        storage.clone(),
        Arc::new(ManualClock::new(1_000_000)),
    )
    .unwrap();
    let eps: Vec<_> = (0..2).map(|t| c.endpoint(t).unwrap()).collect();
    let mut ops = Vec::new();
    let backends: Vec<KeyedBackend> = (0..2u32)
        .map(|t| {
            let mut op = OperatorState::new();
            op.update("offsets", RedistributionMode::Split, &[u64::from(t) * 100])
                .unwrap();
            ops.push(op);
            KeyedBackend::builder(dir.path().join(format!("op-{t}")))
                .key_groups(KeyGroupRange::for_operator(128, 2, t).unwrap())
                .checkpoint_storage(storage.clone())
                .job_owner(c.owner().clone())
                .open()
                .unwrap()
        })
        .collect();
    let id = match c.trigger().unwrap() {
        Triggered::Started(id) => id,
        o => panic!("{o:?}"),
    };
    for t in 0..2 {
        let stats = backends[t].snapshot(id).unwrap().upload().unwrap();
        eps[t].ack(
            id,
            task_checkpoint(t as u32, Some((&backends[t], &stats)), ops[t].snapshot()),
        );
    }
    let record = match c.poll().unwrap().as_slice() {
        [Outcome::Completed(r)] => r.clone(),
        o => panic!("{o:?}"),
    };
    // The committed job record holds each task's operator state ...
    assert_eq!(record.tasks[0].operator_state, ops[0].snapshot());
    assert_eq!(record.tasks[1].operator_state, ops[1].snapshot());
    // ... but the reader of "the operator states stored in checkpoint id" returns none of it.
    let read = read_operator_states(storage.as_ref(), id).unwrap();
    assert_eq!(read, ops, "operator state of the completed checkpoint");
}

/// reading the operator states of zero savepoints is Ok(vec![]) (redistribute then
/// hands every new instance empty state) instead of a typed error.
#[test]
fn read_operator_states_of_no_savepoints_is_an_error() {
    let r = rockstate::savepoint::read_operator_states(&[]);
    assert!(r.is_err(), "no savepoints: {r:?}");
}

/// a Broadcast list that one old instance does not hold is not detected.
#[test]
fn broadcast_list_missing_in_one_instance_is_detected() {
    let mut a = OperatorState::new();
    a.update("rules", RedistributionMode::Broadcast, &["r1".to_string()])
        .unwrap();
    let b = OperatorState::new(); // instance 1 holds no copy of `rules`
    let r = redistribute(&[a, b], 2);
    assert!(
        r.is_err(),
        "broadcast copies differ (one instance has none): {r:?}"
    );
}

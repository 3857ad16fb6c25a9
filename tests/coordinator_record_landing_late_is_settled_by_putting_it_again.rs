//! A coordinated commit whose job record put failed twice (the commit's put and the put that
//! settles it) without the record being there when read back: both puts may still land (a
//! server applying a request after its client gave up). The commit is in doubt. When the
//! coordinator's tick settles it, "absent" must not end the checkpoint aborted while a put
//! may land: the record would then name what the aborting tasks deleted. The settling puts
//! the record again; the checkpoint completes, and the late puts find the name taken.
//!
//! Invariant checked: after the late puts land, a record is in storage exactly for the
//! checkpoints reported completed.

use std::sync::Arc;
use std::time::Duration;

use rockstate::coordinator::{task_checkpoint, Coordinator, CoordinatorConfig, Outcome, Triggered};
use rockstate::{
    CheckpointStorage, Error, Fault, FaultyStorage, LocalStorage, ManualClock, OpKind,
};

#[test]
fn a_commit_in_doubt_is_settled_by_putting_its_record_again() {
    let dir = tempfile::tempdir().unwrap();
    let local: Arc<dyn CheckpointStorage> = Arc::new(
        LocalStorage::new(dir.path().join("cp"))
            .unwrap()
            .with_fsync(false),
    );
    let st = Arc::new(FaultyStorage::new(local));
    let mut config = CoordinatorConfig::new("late-record", 2, 128);
    config.timeout = Duration::from_secs(60);
    let mut c = Coordinator::new(config, st.clone(), Arc::new(ManualClock::new(1_000))).unwrap();
    let eps: Vec<_> = (0..2).map(|t| c.endpoint(t).unwrap()).collect();
    let Triggered::Started(a) = c.trigger().unwrap() else {
        panic!("not started")
    };
    for ep in &eps {
        assert!(ep.ack(a, task_checkpoint(ep.task(), None, vec![])));
    }
    // The commit's put of the record and the put settling it both fail and land later.
    let puts = st.ops(OpKind::PutBytes);
    for k in 1..=2 {
        st.add_fault(Fault::LandLater {
            op: OpKind::PutBytes,
            nth: puts + k,
        });
    }
    let mut outcomes = c.poll().unwrap();
    outcomes.extend(c.tick().unwrap());
    st.clear_faults();
    let landed = st.land_late_puts();
    assert_eq!(landed.len(), 2, "{landed:?}");
    let stored = st.exists(&format!("job/chk-{a}")).unwrap();
    let completed = outcomes
        .iter()
        .any(|o| matches!(o, Outcome::Completed(r) if r.checkpoint_id == a));
    assert_eq!(
        stored, completed,
        "record in storage: {stored}, reported completed: {completed} ({outcomes:?})"
    );
    assert!(completed, "{outcomes:?}");
    for (name, r) in &landed {
        assert!(
            matches!(r, Err(Error::ObjectExists { .. })),
            "{name}: {r:?}"
        );
    }
}

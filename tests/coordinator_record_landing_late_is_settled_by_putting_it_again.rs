//! A coordinated commit whose job record put failed twice (the commit's put and the put that
//! settles it) without the record being there when read back: both puts may still land (a
//! server applying a request after its client gave up). The commit is in doubt. When the
//! coordinator's tick settles it, "absent" must not end the checkpoint aborted while a put
//! may land: the record would then name what the aborting tasks deleted. The settling puts
//! the record again; the checkpoint completes, and the late puts find the name taken.
//!
//! Invariant checked: after the late puts land, a record is in storage exactly for the
//! checkpoints reported completed.

mod coordinator_common;

use coordinator_common::{completed, faulty_job, run_checkpoint, FaultyJob};
use rockstate::{CheckpointStorage, Error, Fault, OpKind};

#[test]
fn a_commit_in_doubt_is_settled_by_putting_its_record_again() {
    let FaultyJob {
        _dir,
        st,
        mut c,
        eps,
    } = faulty_job("late-record", |_| {});
    let a = run_checkpoint(&mut c, &eps);
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
    let completed = completed(&outcomes, a);
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

//! A job record whose puts all failed transiently (the commit's, the one settling it, the
//! coordinator's put to resolve it), then a newer checkpoint completed, then the old puts
//! landed: a server applying requests after their client gave up. The old checkpoint was
//! reported aborted (subsumed by the newer completion), so its late record must not stop the
//! job: it is this owner's own put, not another owner's record (no `StorageConflict` for every
//! later commit), it is never a retained checkpoint, and a pass deletes it and fences its
//! name with a void record. The scenarios: both void record puts fail (the pass's after the
//! newer commit, and the one `resolve` makes before it reports the old checkpoint aborted), so
//! the late puts land (a pass between the landing and the next commit, and none); the pass's
//! succeeds, or only `resolve`'s does, and the late puts are refused.
//!
//! Invariant checked: after the late puts, the job keeps completing checkpoints, and storage
//! holds records exactly for the retained completed ones.

mod coordinator_common;

use coordinator_common::{completed, faulty_job, run_checkpoint, FaultyJob};
use rockstate::coordinator::list_job_checkpoints;
use rockstate::{CheckpointStorage, Fault, OpKind};

/// A job retaining two checkpoints, two at once, after checkpoint `a`'s record puts all
/// failed (held back to land later), checkpoint `b` completed (the first `void_fails` of the
/// void record puts under `a`'s name failing: the pass's, then `resolve`'s), and `a`'s puts
/// were made: `(job, a, b)`.
fn a_abandoned_then_b_completed(void_fails: u64) -> (FaultyJob, u64, u64) {
    let mut job = faulty_job("late-old-record", |config| {
        config.retained = 2;
        config.max_concurrent = 2;
    });
    let FaultyJob { st, c, eps, .. } = &mut job;

    // Checkpoint a: every put of its record fails and lands later (the commit's, the one
    // settling it, and the one `poll`'s tick makes to resolve it): still in doubt.
    let a = run_checkpoint(c, eps);
    let puts = st.ops(OpKind::PutBytes);
    for k in 1..=3 {
        st.add_fault(Fault::LandLater {
            op: OpKind::PutBytes,
            nth: puts + k,
        });
    }
    let outcomes = c.poll().unwrap();
    st.clear_faults();
    assert!(outcomes.is_empty(), "{outcomes:?}");

    // Checkpoint b completes; a, still absent, is subsumed.
    let b = run_checkpoint(c, eps);
    let faults = st.injected();
    // b's record goes through; void record puts follow (its pass's, then, if that failed, the
    // one resolving a, in doubt below b, makes).
    let puts = st.ops(OpKind::PutBytes);
    for k in 0..void_fails {
        st.add_fault(Fault::FailNth {
            op: OpKind::PutBytes,
            nth: puts + 2 + k,
        });
    }
    let outcomes = c.poll().unwrap();
    st.clear_faults();
    assert_eq!(st.injected() - faults, void_fails);
    assert!(completed(&outcomes, b), "{outcomes:?}");
    assert!(!completed(&outcomes, a), "{outcomes:?}");

    // Now a's puts are made: without the fence the first stores the record and the others
    // find it there; with it, all find the name taken.
    let landed = st.land_late_puts();
    assert_eq!(landed.len(), 3, "{landed:?}");
    assert_eq!(landed[0].1.is_ok(), void_fails == 2, "{landed:?}");
    assert!(landed[1..].iter().all(|(_, r)| r.is_err()), "{landed:?}");
    assert!(st.exists(&format!("job/chk-{a}")).unwrap());
    (job, a, b)
}

#[test]
fn a_record_landing_after_a_newer_completion_is_deleted_and_the_job_goes_on() {
    let (mut job, a, b) = a_abandoned_then_b_completed(2);
    let FaultyJob { st, c, eps, .. } = &mut job;

    // The owner's next pass deletes it: a was reported aborted, so it is never retained.
    c.owner().collect_garbage().unwrap();
    assert_eq!(list_job_checkpoints(st.as_ref()).unwrap(), vec![b]);
    assert_eq!(c.owner().retained(), vec![b]);

    // And the job goes on completing checkpoints.
    for _ in 0..2 {
        let next = run_checkpoint(c, eps);
        let outcomes = c.poll().unwrap();
        assert!(completed(&outcomes, next), "{outcomes:?}");
    }
    let ids = list_job_checkpoints(st.as_ref()).unwrap();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(!ids.contains(&a), "{ids:?}");
}

#[test]
fn a_record_landing_after_a_newer_completion_does_not_stop_the_next_commit() {
    let (mut job, a, b) = a_abandoned_then_b_completed(2);
    let FaultyJob { st, c, eps, .. } = &mut job;

    // No pass between the landing and the next commit: the commit itself meets the record.
    let next = run_checkpoint(c, eps);
    let outcomes = c.poll().unwrap();
    assert!(completed(&outcomes, next), "{outcomes:?}");
    let ids = list_job_checkpoints(st.as_ref()).unwrap();
    assert_eq!(ids, vec![b, next], "a = {a}");
    assert_eq!(c.owner().retained(), vec![b, next]);
}

#[test]
fn a_record_put_after_a_newer_completion_is_refused_by_the_void_record() {
    refused_by_the_void_record(0);
}

#[test]
fn a_record_put_after_a_newer_completion_is_refused_by_the_void_record_resolve_puts() {
    refused_by_the_void_record(1);
}

/// After [`a_abandoned_then_b_completed`] with `void_fails` below 2: the void record holds a's
/// name, the job goes on, and a sweep once no put can be in flight removes the void record.
fn refused_by_the_void_record(void_fails: u64) {
    let (mut job, a, b) = a_abandoned_then_b_completed(void_fails);
    let FaultyJob { st, c, eps, .. } = &mut job;
    let stored = st.get_bytes(&format!("job/chk-{a}")).unwrap();
    assert!(
        matches!(
            sst_format::decode_job_record(&stored),
            Ok(sst_format::JobRecord::Void(v)) if v.checkpoint_id == a
        ),
        "job/chk-{a} holds no void record"
    );
    assert_eq!(list_job_checkpoints(st.as_ref()).unwrap(), vec![b]);

    let next = run_checkpoint(c, eps);
    let outcomes = c.poll().unwrap();
    assert!(completed(&outcomes, next), "{outcomes:?}");
    assert_eq!(list_job_checkpoints(st.as_ref()).unwrap(), vec![b, next]);
    assert_eq!(c.owner().retained(), vec![b, next]);
    // A sweep once no put can be in flight removes the void record.
    c.owner().sweep(std::time::Duration::ZERO).unwrap();
    assert!(!st.exists(&format!("job/chk-{a}")).unwrap());
    assert_eq!(list_job_checkpoints(st.as_ref()).unwrap(), vec![b, next]);
}

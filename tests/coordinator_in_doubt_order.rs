//! A commit in doubt (its job record landed but the put reported a failure and no read could
//! tell) while a newer checkpoint commits: tasks hear of completions in checkpoint order, as a
//! two-phase sink that tracks its last committed id expects (Flink's contract that a later
//! completion covers the earlier ones).
//!
//! * The newer commit can read the older record (it adopts it as landed): the older is settled
//!   (reported, and its tasks told) before the newer.
//! * Storage stops answering reads right after the newer commit, so whether the older record
//!   is there cannot be told: the newer completion subsumes it; once storage answers again it
//!   is not reported or notified as completed after the newer one, but ends aborted, subsumed.

mod coordinator_common;

use std::sync::Arc;

use coordinator_common::{ack, faulty_job, started, FaultyJob};
use rockstate::coordinator::{AbortReason, Coordinator, Outcome, TaskCommand, TaskEndpoint};
use rockstate::{Fault, FaultyStorage, OpKind};

/// Fails operations `first..last` of kind `op`, counted from now (1 is the next one).
fn fail_ops(st: &FaultyStorage, op: OpKind, first: u64, last: u64) {
    let done = st.ops(op);
    for k in first..last {
        st.add_fault(Fault::FailNth { op, nth: done + k });
    }
}

struct InDoubt {
    _dir: tempfile::TempDir,
    st: Arc<FaultyStorage>,
    c: Coordinator,
    eps: Vec<TaskEndpoint>,
    /// The checkpoint in doubt.
    a: u64,
    /// The newer one, triggered, not yet acknowledged.
    b: u64,
}

/// Two checkpoints in flight; `a`'s record lands, its put reports a failure, and reading it
/// back fails (and so does the resolve attempt of the same poll's tick): `a` is in doubt.
fn in_doubt() -> InDoubt {
    let FaultyJob {
        _dir: dir,
        st,
        mut c,
        eps,
    } = faulty_job("in-doubt-order", |config| config.max_concurrent = 2);
    let a = started(c.trigger().unwrap());
    let b = started(c.trigger().unwrap());
    ack(&eps[0], a);
    ack(&eps[1], a);
    st.add_fault(Fault::LandThenFail {
        op: OpKind::PutBytes,
        nth: st.ops(OpKind::PutBytes) + 1,
    });
    fail_ops(&st, OpKind::GetBytes, 1, 3);
    let outcomes = c.poll().unwrap();
    assert!(outcomes.is_empty(), "a is in doubt: {outcomes:?}");
    assert_eq!(c.pending(), vec![a, b]);
    st.clear_faults();
    InDoubt {
        _dir: dir,
        st,
        c,
        eps,
        a,
        b,
    }
}

#[test]
fn an_older_commit_in_doubt_is_not_notified_after_a_newer_completion() {
    let InDoubt {
        _dir,
        st: _,
        mut c,
        eps,
        a: _,
        b,
    } = in_doubt();
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

#[test]
fn an_older_commit_still_in_doubt_is_subsumed_by_a_newer_completion() {
    let InDoubt {
        _dir,
        st,
        mut c,
        eps,
        a,
        b,
    } = in_doubt();
    // Checkpoint b commits (its commit reads a's record); then storage stops answering
    // reads, so the settling of a that follows cannot tell: the commit's own two reads
    // answer, every later one fails.
    ack(&eps[0], b);
    ack(&eps[1], b);
    fail_ops(&st, OpKind::GetBytes, 3, 1_000);
    let mut outcomes = c.poll().unwrap();
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

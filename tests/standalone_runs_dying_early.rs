//! A backend without a coordinator whose storage holds a job record owns it alone
//! (docs/ownership.md §3 rule 5):
//! runs that upload and die before their first completion must not pile up in storage. Each
//! run's first upload is preceded by one garbage pass that removes what the earlier runs left,
//! and never what the last completed checkpoint needs.

#[path = "checkpoint_common/mod.rs"]
mod common;

use std::collections::BTreeSet;

use common::*;
use rockstate::checkpoint::layout;
use rockstate::{CheckpointOptions, RestoreFrom};

fn attempt_ids(fx: &Fixture) -> BTreeSet<u64> {
    fx.storage
        .list("chk-")
        .unwrap()
        .iter()
        .filter_map(|o| layout::parse_checkpoint_object(&o.name).map(|p| p.id))
        .collect()
}

#[test]
fn runs_that_die_before_their_first_completion_leave_at_most_the_last_runs_attempt() {
    let fx = Fixture::new();
    let mut model = Model::new();
    let mut r = rng(9);
    let b = fx.open("a", CheckpointOptions::default());
    random_writes(&b, &mut model, &mut r, 1500);
    b.checkpoint(1).unwrap();
    b.notify_checkpoint_complete(1).unwrap();
    let completed = model.clone();
    drop(b);
    for run in 2..=7u64 {
        let b = fx
            .restore(&format!("run{run}"), RestoreFrom::Latest)
            .unwrap();
        assert_eq!(
            read_all(&b),
            completed,
            "run {run} restored the completed checkpoint"
        );
        let mut m = completed.clone();
        random_writes(&b, &mut m, &mut r, 1500);
        // Uploaded, never completed: the run dies here.
        b.snapshot(run).unwrap().upload().unwrap();
        let ids = attempt_ids(&fx);
        assert!(
            ids.iter().all(|id| [1, run].contains(id)),
            "run {run}: attempts of earlier runs left: {ids:?}"
        );
    }
    assert_verified(fx.storage.as_ref());
    let b = fx.restore("last", RestoreFrom::Latest).unwrap();
    assert_eq!(read_all(&b), completed);
}
